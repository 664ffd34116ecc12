//! lb-common: what every lb component shares.
//!
//! - [`ids`]: newtype ids and the 64-bit key space.
//! - [`protocol`]: every wire message (report, samples, rollups, registry, collection, actions,
//!   storage admin, placement rules, the error body). With feature `openapi` (the master's), the
//!   types the master's API serves also derive `utoipa::ToSchema` (queries: `IntoParams`).
//! - [`validate`]: field-level validation with messages that name the field and value.
//! - [`config`]: strict TOML config files with validation and hot reload.
//! - [`telemetry`]: tracing and the Prometheus recorder.
//! - [`http`]: router plumbing (`/metrics`, `/live`, `/ready`, limits, errors) and the typed
//!   HTTP client with timeouts.
//! - [`shutdown`]: signal handling and graceful shutdown within a deadline.
//! - [`service`]: the body of every binary's `main`.
//! - `sqlite` (feature `sqlite`): one opener for every store's SQLite file, with the shared
//!   pragmas and schema migrations tracked by `PRAGMA user_version`.
//! - [`rng`]: SplitMix64, the seeded generator wherever a run must be reproducible.
//! - [`fair_queue`]: the hierarchical fair queue (per tenant, per table, any depth) the ops
//!   server runs actions through.
//! - [`placement`]: the placement decision core for hash-sharded datasets: jump hash, nested
//!   subrings, shard → node permutation with stable node slots, the weighted ketama ring with
//!   per-key migration, the adaptive shard allocator, EWMA rates and the placement rules builder.

pub mod clients;
pub mod config;
pub mod fair_queue;
pub mod http;
pub mod ids;
pub mod placement;
pub mod protocol;
pub mod rng;
pub mod service;
pub mod shutdown;
#[cfg(feature = "sqlite")]
pub mod sqlite;
pub mod telemetry;
pub mod validate;
