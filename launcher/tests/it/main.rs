//! lb-launcher's integration tests, in one binary: the whole system on the simulated storage
//! (`up` in process, the end-to-end hot-range, hot-key, worker-loss and dry-run runs), the
//! report pusher against a real in-process agent, the master's online core driving the
//! testbed's engine through the simulator (scenario, convergence and parity tests), and
//! `lb sim` and `lb up` (the binary, from an empty directory) end to end.

mod core_parity;
mod e2e;
mod offline_api;
mod offline_sim;
mod planner_scenarios;
mod pusher;
mod sim_cli;
// The testbed's test helpers (scenarios, stepping), shared rather than copied.
#[allow(dead_code)]
#[path = "../../../testbed/tests/it/support.rs"]
mod support;
mod up;
mod up_cli;
