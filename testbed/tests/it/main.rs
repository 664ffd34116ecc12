//! lb-testbed's integration tests, in one binary: scenario files, the virtual-time engine
//! (workload demand, every admin operation and every invalid one, faults) and the admin API
//! over real HTTP. The tests that run lb against the testbed live with the launcher.

mod admin_http;
mod engine_ops;
mod sampled;
mod scenarios;
mod support;
mod workloads;
