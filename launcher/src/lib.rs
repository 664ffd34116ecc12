//! lb-launcher: lb on one machine, and lb against baselines in virtual time.
//!
//! - [`up`]: the whole system in one process on loopback — the simulated storage (the
//!   testbed), an agent per worker, the ops server and the master — with the master's config
//!   written and watched in the data directory.
//! - [`tokens`]: the demo's bearer tokens, one per role, kept in the data directory.
//! - [`valkey_up`]: the same on a local cluster of real `valkey-server` primaries;
//!   [`valkey_load`]: the hot-slot load generator (follows `MOVED` / `ASK`) and its checks;
//!   [`valkey_attach`]: lb beside a Valkey cluster that already runs, from one seed address.
//! - [`dashboards`]: the Grafana dashboards, the metrics reference and the `prometheus.yml`
//!   that `up` writes for what it started.
//! - [`events`]: the event lines `lb up` prints (hotspot, proposal, action, verdict), read
//!   from the master's API.
//! - [`sim`]: the scale simulator: the testbed's virtual-time engine driven by the master's
//!   online core (or a baseline), one decision per simulated second.
//!
//! The launcher depends on every component; nothing depends on it (the testbed depends on
//! `lb-common` alone).

pub mod dashboards;
pub mod events;
pub mod sim;
pub mod tokens;
pub mod up;
pub mod valkey_attach;
pub mod valkey_load;
pub mod valkey_up;
