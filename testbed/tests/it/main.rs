//! lb-testbed's integration tests, in one binary: scenario files, the virtual-time engine
//! (workload demand, every admin operation and every invalid one, faults), the admin API over
//! real HTTP, and the report pusher against a real in-process agent.

mod admin_http;
mod e2e;
mod engine_ops;
mod pusher;
mod scenarios;
mod support;
mod up;
mod workloads;
