//! lb-testbed's integration tests, in one binary: scenario files, the virtual-time engine
//! (workload demand, every admin operation and every invalid one, faults), the admin API over
//! real HTTP, the report pusher against a real in-process agent, the master's planner driving
//! the engine through the simulator (scenario and convergence tests), and `lb-testbed sim` end
//! to end.

mod admin_http;
mod core_parity;
mod e2e;
mod engine_ops;
mod planner_scenarios;
mod pusher;
mod scenarios;
mod sim_cli;
mod support;
mod up;
mod workloads;
