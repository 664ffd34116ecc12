//! lb-testbed: a storage system for lb to balance, simulated.
//!
//! - [`scenario`]: scenario files (`configs/scenarios/*.toml`): cluster shape, tables and
//!   datasets with their workloads, and a timeline (surges, worker lost or added, faults).
//! - [`workload`]: workload components as closed-form demand over the key space (uniform, zipf,
//!   hot range with a ramp, single hot key, sequential append, daily period), seeded.
//! - [`model`]: the cluster: workers, range partitions, hash-sharded datasets placed with the
//!   placement core; demand → served / rejected, latency and CPU; layout changes; reports with
//!   key-access sketches.
//! - [`ops`]: admin operations: validation, realistic durations, fail / hang / timeout faults.
//! - [`virtual_time`]: the [`Engine`]: step the clock, read the view, apply actions, build
//!   reports; no HTTP, no sleeping, deterministic from the seed.
//! - [`realtime`] and [`http`]: the same engine stepped by the wall clock behind the storage
//!   admin API, and the pusher that posts every worker's report to its agent.
//!
//! It depends on `lb-common` and `lb-reporter` (the worker-side library its real-time mode
//! records sampled requests through, as a real storage worker would) alone: the launcher (`lb-launcher`: `lb up`, `lb sim`) puts it
//! together with lb, and the master's tests use its engine.

pub mod http;
pub mod model;
pub mod ops;
pub mod realtime;
pub mod scenario;
pub mod virtual_time;
pub mod workload;

pub use virtual_time::Engine;
