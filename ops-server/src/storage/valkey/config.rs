//! `[storage.valkey]`: how the ops server reaches a Valkey / Redis cluster and how it names what
//! it finds there.
//!
//! ```toml
//! [storage]
//! kind = "valkey"
//!
//! [storage.valkey]
//! seeds = ["127.0.0.1:7001", "127.0.0.1:7002"]   # any nodes; the first that answers is read
//! cluster = "valkey"                              # tenant of every slot (the agent's too)
//! # username = "lb"                               # ACL user; absent = the default user
//! # password = "..."                              # never logged or echoed
//! worker_ids = "port"                             # valkey-<port>; or "address": valkey-<ip>-<port>
//! # node_ops_per_sec = 80000                      # optional caps beside the main thread's one core
//! # node_bytes_per_sec = 200000000
//! # [storage.valkey.workers]                      # explicit names win over the scheme
//! # "10.0.0.5:6379" = "cache-a"
//! # [storage.valkey.zones]                        # zone per node; wins over the node's own
//! # "10.0.0.5:6379" = "eu-1a"
//! ```
//!
//! Naming, which the agent's Valkey source matches: partition `slot-NNNNN` (the slot number,
//! five digits, zero padded), tenant = `cluster` (the agent's `source.cluster_name`), table
//! `slots`, key range `[s << 50, ((s + 1) << 50) - 1]`; worker id per primary from `workers`
//! (keyed by the `ip:port` that `CLUSTER NODES` shows), else from `worker_ids`. Each agent's
//! `worker_id` must be set to the id of the node it watches.
//!
//! Zones: a worker's zone is its entry in `zones` (keyed like `workers`), else the node's own
//! `availability-zone` setting (Valkey 8.0+, read from `INFO server`, which the least ACL user
//! may run; empty = none), else none. Valkey has no rack setting, so no worker has a rack.
//!
//! Capacity: a primary executes every command on one main thread, so each worker's capacity is
//! `cpu_cores = 1` and its load is that thread's busy time, which its agent reads from `INFO`
//! (and splits over the slots by their `CLUSTER SLOT-STATS` CPU). Nothing has to be measured
//! or configured. `node_ops_per_sec` / `node_bytes_per_sec` add a command-rate or network cap
//! the planner also respects (the tightest dimension decides); absent, they are no dimension.

use std::collections::BTreeMap;

use lb_common::ids::{TenantId, WorkerId, ZoneId};
use lb_common::validate::Scope;
use lb_valkey::NodeAddr;
use serde::{Deserialize, Serialize};

/// Default tenant name for the slots of a cluster.
pub const DEFAULT_CLUSTER_NAME: &str = "valkey";
/// 2 s: loopback and LAN connects take milliseconds; a dead seed must not stall a topology read.
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 2_000;
/// 5 s: `CLUSTER SLOT-STATS` over all slots (~0.8 MB) on a loaded node fits many times over.
pub const DEFAULT_COMMAND_TIMEOUT_MS: u64 = 5_000;
/// 100 ms between `CLUSTER GETSLOTMIGRATIONS` polls: a one-slot migration of 100,000 keys takes
/// ~270 ms on loopback, so this sees each phase without loading the nodes.
pub const DEFAULT_POLL_INTERVAL_MS: u64 = 100;
/// 30 s with neither side of a migration answering: long enough for a node restart, then the
/// outcome is read from who owns the slots.
pub const DEFAULT_UNREACHABLE_AFTER_MS: u64 = 30_000;
/// 100 bytes per key when `INFO` cannot give an average (the node holds no key or did not
/// answer): the size of a small string value with its key and overhead.
pub const DEFAULT_BYTES_PER_KEY: u64 = 100;

#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValkeyStorageConfig {
    /// `host:port` of any nodes of the cluster; tried in order until one answers.
    pub seeds: Vec<String>,
    /// Tenant of every slot; the agent's Valkey source reports the same name.
    #[serde(default = "default_cluster")]
    pub cluster: String,
    /// ACL user (`AUTH user password`); absent with a password means the `default` user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    #[serde(default)]
    pub worker_ids: WorkerIdScheme,
    /// `ip:port` as `CLUSTER NODES` shows it → worker id; wins over `worker_ids`.
    #[serde(default)]
    pub workers: BTreeMap<String, String>,
    /// `ip:port` as `CLUSTER NODES` shows it → availability zone (a valid id, e.g. `eu-1a`).
    /// Wins over the node's own `availability-zone` setting; a node in neither has no zone.
    /// Map replicas too: one that is promoted keeps its zone.
    #[serde(default)]
    pub zones: BTreeMap<String, String>,
    /// Optional caps on what one primary serves, beside its main thread's one core (which is
    /// always a dimension): the same for every node; absent, not planned on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_ops_per_sec: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_bytes_per_sec: Option<f64>,
    /// A limit per slot, when there is one (there is none in Valkey itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot_limit: Option<ValkeyCapacity>,
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    #[serde(default = "default_command_timeout_ms")]
    pub command_timeout_ms: u64,
    #[serde(default = "default_poll_interval_ms")]
    pub poll_interval_ms: u64,
    #[serde(default = "default_unreachable_after_ms")]
    pub unreachable_after_ms: u64,
    /// Average key size used when `INFO` does not give one.
    #[serde(default = "default_bytes_per_key")]
    pub bytes_per_key: u64,
}

/// How a primary's worker id is derived from its address.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerIdScheme {
    /// `valkey-<port>`: short and stable, for clusters whose nodes all have distinct ports (one
    /// machine, the launcher).
    #[default]
    Port,
    /// `valkey-<ip>-<port>` (`valkey-10.0.0.5-6379`): for nodes on several machines.
    Address,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValkeyCapacity {
    pub ops_per_sec: f64,
    pub bytes_per_sec: f64,
}

impl std::fmt::Debug for ValkeyStorageConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ValkeyStorageConfig")
            .field("seeds", &self.seeds)
            .field("cluster", &self.cluster)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("worker_ids", &self.worker_ids)
            .field("workers", &self.workers)
            .field("zones", &self.zones)
            .field("node_ops_per_sec", &self.node_ops_per_sec)
            .field("node_bytes_per_sec", &self.node_bytes_per_sec)
            .field("slot_limit", &self.slot_limit)
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("command_timeout_ms", &self.command_timeout_ms)
            .field("poll_interval_ms", &self.poll_interval_ms)
            .field("unreachable_after_ms", &self.unreachable_after_ms)
            .field("bytes_per_key", &self.bytes_per_key)
            .finish()
    }
}

impl ValkeyStorageConfig {
    /// A config for `seeds` with every default (capacity: the main thread's core alone).
    pub fn new(seeds: Vec<String>) -> Self {
        Self {
            seeds,
            cluster: default_cluster(),
            username: None,
            password: None,
            worker_ids: WorkerIdScheme::default(),
            workers: BTreeMap::new(),
            zones: BTreeMap::new(),
            node_ops_per_sec: None,
            node_bytes_per_sec: None,
            slot_limit: None,
            connect_timeout_ms: DEFAULT_CONNECT_TIMEOUT_MS,
            command_timeout_ms: DEFAULT_COMMAND_TIMEOUT_MS,
            poll_interval_ms: DEFAULT_POLL_INTERVAL_MS,
            unreachable_after_ms: DEFAULT_UNREACHABLE_AFTER_MS,
            bytes_per_key: DEFAULT_BYTES_PER_KEY,
        }
    }

    pub fn validate_into(&self, s: &mut Scope<'_>) {
        s.check(!self.seeds.is_empty(), "seeds", "[]", "must name at least one host:port");
        for (i, seed) in self.seeds.iter().enumerate() {
            s.check(parse_addr(seed).is_some(), &format!("seeds[{i}]"), seed, "must be host:port");
        }
        s.check(TenantId::new(self.cluster.clone()).is_ok(), "cluster", &self.cluster, "must be a valid id");
        for (addr, id) in &self.workers {
            s.check(parse_addr(addr).is_some(), &format!("workers.{addr:?}"), addr, "key must be ip:port");
            s.check(WorkerId::new(id.clone()).is_ok(), &format!("workers.{addr:?}"), id, "must be a valid worker id");
        }
        for (addr, zone) in &self.zones {
            s.check(parse_addr(addr).is_some(), &format!("zones.{addr:?}"), addr, "key must be ip:port");
            s.check(ZoneId::new(zone.clone()).is_ok(), &format!("zones.{addr:?}"), zone, "must be a valid zone id");
        }
        s.check(self.username.is_none() || self.password.is_some(), "username", "set", "needs a password");
        s.check(self.password.as_ref().is_none_or(|p| !p.is_empty()), "password", "<redacted>", "must not be empty");
        if let Some(ops) = self.node_ops_per_sec {
            s.positive("node_ops_per_sec", ops);
        }
        if let Some(bytes) = self.node_bytes_per_sec {
            s.positive("node_bytes_per_sec", bytes);
        }
        if let Some(limit) = &self.slot_limit {
            s.positive("slot_limit.ops_per_sec", limit.ops_per_sec);
            s.positive("slot_limit.bytes_per_sec", limit.bytes_per_sec);
        }
        s.range_u64("connect_timeout_ms", self.connect_timeout_ms, 10, 600_000);
        s.range_u64("command_timeout_ms", self.command_timeout_ms, 10, 600_000);
        s.range_u64("poll_interval_ms", self.poll_interval_ms, 10, 60_000);
        s.range_u64("unreachable_after_ms", self.unreachable_after_ms, 100, 86_400_000);
        s.range_u64("bytes_per_key", self.bytes_per_key, 1, 1 << 30);
    }

    /// The seeds as addresses (validation made sure they parse).
    pub fn seed_addrs(&self) -> Vec<NodeAddr> {
        self.seeds.iter().filter_map(|s| parse_addr(s)).collect()
    }

    /// The worker id of the primary serving at `addr`.
    pub fn worker_id(&self, addr: &NodeAddr) -> Option<WorkerId> {
        let key = format!("{}:{}", addr.host, addr.port);
        if let Some(id) = self.workers.get(&key) {
            return WorkerId::new(id.clone()).ok();
        }
        let text = match self.worker_ids {
            WorkerIdScheme::Port => format!("valkey-{}", addr.port),
            WorkerIdScheme::Address => format!("valkey-{}-{}", addr.host, addr.port),
        };
        WorkerId::new(text).ok()
    }

    /// The zone `zones` gives the node at `addr`, if any (keys compare as addresses, so
    /// `[::1]:7001` matches `::1` port 7001).
    pub fn configured_zone(&self, addr: &NodeAddr) -> Option<ZoneId> {
        let (_, zone) = self.zones.iter().find(|(key, _)| parse_addr(key).as_ref() == Some(addr))?;
        ZoneId::new(zone.clone()).ok()
    }
}

/// `host:port` (the last `:` separates the port, so a bare IPv6 address parses too).
pub fn parse_addr(text: &str) -> Option<NodeAddr> {
    let (host, port) = text.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port: u16 = port.parse().ok()?;
    (!host.is_empty() && port > 0).then(|| NodeAddr::new(host, port))
}

// `[storage.valkey]` requires `seeds`, so its other fields keep a default each: a struct-level
// `#[serde(default)]` would make the required one optional too.
fn default_cluster() -> String {
    DEFAULT_CLUSTER_NAME.to_owned()
}
fn default_connect_timeout_ms() -> u64 {
    DEFAULT_CONNECT_TIMEOUT_MS
}
fn default_command_timeout_ms() -> u64 {
    DEFAULT_COMMAND_TIMEOUT_MS
}
fn default_poll_interval_ms() -> u64 {
    DEFAULT_POLL_INTERVAL_MS
}
fn default_unreachable_after_ms() -> u64 {
    DEFAULT_UNREACHABLE_AFTER_MS
}
fn default_bytes_per_key() -> u64 {
    DEFAULT_BYTES_PER_KEY
}

#[cfg(test)]
mod tests {
    use lb_common::validate::Validator;

    use super::*;

    #[test]
    fn worker_ids_follow_the_map_then_the_scheme() {
        let mut config = ValkeyStorageConfig::new(vec!["127.0.0.1:7001".into()]);
        config.workers.insert("10.0.0.5:6379".into(), "cache-a".into());
        let id = |c: &ValkeyStorageConfig, host: &str, port| c.worker_id(&NodeAddr::new(host, port)).expect("id");
        assert_eq!(id(&config, "127.0.0.1", 7001).as_str(), "valkey-7001");
        assert_eq!(id(&config, "10.0.0.5", 6379).as_str(), "cache-a");
        config.worker_ids = WorkerIdScheme::Address;
        assert_eq!(id(&config, "10.0.0.6", 6379).as_str(), "valkey-10.0.0.6-6379");
        assert_eq!(parse_addr("[::1]:7001"), Some(NodeAddr::new("::1", 7001)));
        assert_eq!(parse_addr("nope"), None);
    }

    #[test]
    fn zones_are_validated_by_field_and_looked_up_by_address() {
        let mut config = ValkeyStorageConfig::new(vec!["127.0.0.1:7001".into()]);
        config.zones.insert("10.0.1.5:6379".into(), "eu-1a".into());
        config.zones.insert("[::1]:7001".into(), "eu-1b".into());
        let mut v = Validator::new();
        config.validate_into(&mut v.at("storage").at("valkey"));
        assert!(v.finish().is_ok());
        let zone = |c: &ValkeyStorageConfig, host: &str, port| c.configured_zone(&NodeAddr::new(host, port));
        assert_eq!(zone(&config, "10.0.1.5", 6379).map(|z| z.to_string()).as_deref(), Some("eu-1a"));
        assert_eq!(zone(&config, "::1", 7001).map(|z| z.to_string()).as_deref(), Some("eu-1b"));
        assert_eq!(zone(&config, "10.0.1.5", 6380), None);

        config.zones.insert("10.0.1.6:6379".into(), "eu 1a".into());
        config.zones.insert("no-port".into(), "eu-1c".into());
        let mut v = Validator::new();
        config.validate_into(&mut v.at("storage").at("valkey"));
        let err = v.finish().expect_err("bad zones");
        let text = err.to_string();
        assert!(text.contains(r#"storage.valkey.zones."10.0.1.6:6379" = eu 1a: must be a valid zone id"#), "{text}");
        assert!(text.contains(r#"storage.valkey.zones."no-port" = no-port: key must be ip:port"#), "{text}");
        assert_eq!(err.errors.len(), 2, "only the two bad entries: {text}");
    }

    #[test]
    fn the_password_is_never_in_debug_output() {
        let mut config = ValkeyStorageConfig::new(vec!["127.0.0.1:7001".into()]);
        config.password = Some("hunter2-secret".into());
        let text = format!("{config:?}");
        assert!(text.contains("<redacted>") && !text.contains("hunter2-secret"), "{text}");
    }
}
