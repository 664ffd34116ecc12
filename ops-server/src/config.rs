//! `ops-server.toml`. Static: `[http]`, `[log]`, `audit.path`. Everything else reloads live:
//! tokens (rotate without a restart), limits, timeouts, the halt switch, the storage URL.

use std::path::PathBuf;
use std::time::Duration;

use lb_common::config::ServiceConfig;
use lb_common::config::shared::{HttpClientConfig, HttpServerConfig, LogConfig, RuntimeConfig};
use lb_common::protocol::{ActionKind, TextLimits};
use lb_common::validate::{ValidationError, Validator};
use serde::{Deserialize, Serialize};

/// 2 s: frequent enough to notice a dead agent within seconds, cheap for thousands of agents.
pub const DEFAULT_HEARTBEAT_INTERVAL_MS: u64 = 2_000;
/// 10 s: five missed heartbeats; a GC pause or a slow restart does not flap an agent.
pub const DEFAULT_DOWN_AFTER_MS: u64 = 10_000;
/// 800 ms: a collection round is 1 s; every agent gets most of it, the reply still fits.
pub const DEFAULT_AGENT_DEADLINE_MS: u64 = 800;
/// 5,000 samples per agent per round: half the agent's page, a 5k-partition worker's second.
pub const DEFAULT_LIMIT_PER_AGENT: u32 = 5_000;
/// 8 actions at once cluster-wide: enough to fix several hotspots, few enough to stay safe.
pub const DEFAULT_MAX_CONCURRENT_ACTIONS: u64 = 8;
/// Two actions per worker at a time, the planner's own `caps.max_inflight_per_worker`: the planner
/// charges each streaming move to its source's capacity (`caps.move_source_drain_ratio`) and plans
/// a second only where that is worth it, so a lower limit here would only queue a move the planner
/// believes is streaming. Cruise Control runs 5 partition moves per broker by default. A storage
/// system whose moves block the source's serving thread (Valkey) sets 1.
pub const DEFAULT_MAX_CONCURRENT_PER_WORKER: u64 = 2;
/// 1,000 queued actions per tenant: far above any real storm, a hard stop for a runaway planner.
pub const DEFAULT_MAX_QUEUED_PER_TENANT: u64 = 1_000;
/// 250 ms between operation polls: quick feedback, negligible load on the storage admin API.
pub const DEFAULT_POLL_INTERVAL_MS: u64 = 250;
/// 60 s without progress means the operation is stuck, whatever its kind.
pub const DEFAULT_STALL_TIMEOUT_MS: u64 = 60_000;
/// 500 requests per second per token: a master at 1 Hz and an SRE's scripts fit many times over.
pub const DEFAULT_REQUESTS_PER_SEC: u64 = 500;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpsServerConfig {
    pub http: HttpServerConfig,
    #[serde(default)]
    pub client: HttpClientConfig,
    #[serde(default)]
    pub log: LogConfig,
    #[serde(default)]
    pub runtime: RuntimeConfig,
    pub audit: AuditConfig,
    pub storage: StorageConfig,
    #[serde(default)]
    pub auth: AuthConfig,
    #[serde(default)]
    pub registry: RegistryConfig,
    #[serde(default)]
    pub collect: CollectConfig,
    #[serde(default)]
    pub executor: ExecutorConfig,
    #[serde(default)]
    pub limits: LimitsConfig,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditConfig {
    /// SQLite file with every action and every state change.
    pub path: PathBuf,
}

/// Which storage system the executor talks to. `[storage] url = "http://..."` alone is the
/// storage admin API over HTTP; `kind = "valkey"` with a `[storage.valkey]` table talks to a
/// Valkey / Redis cluster directly ([`ValkeyStorageConfig`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageConfig {
    #[serde(default)]
    pub kind: StorageKind,
    /// `kind = "http"`: base URL of the storage admin API (the testbed, or an adapter in front
    /// of a real system). Unused (and must be empty) for `kind = "valkey"`.
    #[serde(default)]
    pub url: String,
    /// `kind = "valkey"`: how to reach the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valkey: Option<ValkeyStorageConfig>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StorageKind {
    /// The storage admin protocol over HTTP (`storage.url`).
    #[default]
    Http,
    /// A Valkey or Redis cluster (`[storage.valkey]`).
    Valkey,
}

pub use crate::storage::valkey::config::{
    ValkeyCapacity, ValkeyStorageConfig, WorkerIdScheme, parse_addr as parse_valkey_addr,
};

pub use lb_common::http::auth::{AuthConfig, Role, TokenConfig};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RegistryConfig {
    pub heartbeat_interval_ms: u64,
    pub down_after_ms: u64,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        Self { heartbeat_interval_ms: DEFAULT_HEARTBEAT_INTERVAL_MS, down_after_ms: DEFAULT_DOWN_AFTER_MS }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CollectConfig {
    /// Used when the request names none; a request's own value is capped at `max_agent_deadline_ms`.
    pub agent_deadline_ms: u64,
    pub max_agent_deadline_ms: u64,
    pub limit_per_agent: u32,
}

impl Default for CollectConfig {
    fn default() -> Self {
        Self {
            agent_deadline_ms: DEFAULT_AGENT_DEADLINE_MS,
            max_agent_deadline_ms: 10 * DEFAULT_AGENT_DEADLINE_MS,
            limit_per_agent: DEFAULT_LIMIT_PER_AGENT,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExecutorConfig {
    /// Stop taking actions off the queue (running ones finish). Also switchable over the API.
    pub halted: bool,
    pub max_concurrent: u64,
    pub max_concurrent_per_worker: u64,
    pub max_queued_per_tenant: u64,
    pub poll_interval_ms: u64,
    pub stall_timeout_ms: u64,
    pub timeouts: KindTimeouts,
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        Self {
            halted: false,
            max_concurrent: DEFAULT_MAX_CONCURRENT_ACTIONS,
            max_concurrent_per_worker: DEFAULT_MAX_CONCURRENT_PER_WORKER,
            max_queued_per_tenant: DEFAULT_MAX_QUEUED_PER_TENANT,
            poll_interval_ms: DEFAULT_POLL_INTERVAL_MS,
            stall_timeout_ms: DEFAULT_STALL_TIMEOUT_MS,
            timeouts: KindTimeouts::default(),
        }
    }
}

/// Longest each kind may run before it is declared timed out (and "maybe executed").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KindTimeouts {
    /// 60 s: a split is a metadata change (a `split_into` whose pieces go to other workers
    /// streams them, and gets `move_ms` if that is longer).
    pub split_ms: u64,
    /// 30 min: a move copies the partition's bytes.
    pub move_ms: u64,
    /// 30 min, as a move: a merge across two workers streams the side not on where it lands.
    pub merge_ms: u64,
    /// 1 h: a group evacuates every other partition from the group's workers.
    pub group_ms: u64,
    /// 10 min: a reshard publishes rules and moves shards.
    pub reshard_ms: u64,
}

impl Default for KindTimeouts {
    fn default() -> Self {
        // Each value's reason is on its field.
        Self { split_ms: 60_000, move_ms: 1_800_000, merge_ms: 1_800_000, group_ms: 3_600_000, reshard_ms: 600_000 }
    }
}

impl KindTimeouts {
    /// The timeout of `spec`: its kind's, except a `split_into` that creates pieces on named
    /// workers, which streams their bytes like a move (the longer of the two).
    pub fn for_spec(&self, spec: &lb_common::protocol::ActionSpec) -> Duration {
        let kind = self.for_kind(spec.kind());
        match spec {
            lb_common::protocol::ActionSpec::SplitInto { to_workers, first_to_worker, .. }
                if !to_workers.is_empty() || first_to_worker.is_some() =>
            {
                kind.max(self.for_kind(ActionKind::Move))
            }
            _ => kind,
        }
    }

    pub fn for_kind(&self, kind: ActionKind) -> Duration {
        Duration::from_millis(match kind {
            ActionKind::Split => self.split_ms,
            ActionKind::Move => self.move_ms,
            ActionKind::Merge => self.merge_ms,
            ActionKind::Group => self.group_ms,
            ActionKind::Reshard => self.reshard_ms,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Per token (or per anonymous caller); over it answers 429.
    pub requests_per_sec: u64,
    /// An action's and the halt switch's `reason`, 422 over it; the wire contract's 4 KiB by
    /// default (the ops server keeps every action's reason in memory and in its audit), down to
    /// 1 KiB, which the master's own reasons never pass.
    pub max_reason_bytes: usize,
    /// An action's `policy` name: 64 bytes by default, down to 32.
    pub max_policy_bytes: usize,
    /// A registered agent's `version`: 64 bytes by default, down to 16.
    pub max_version_bytes: usize,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        let text = TextLimits::default();
        Self {
            requests_per_sec: DEFAULT_REQUESTS_PER_SEC,
            max_reason_bytes: text.max_reason_bytes,
            max_policy_bytes: text.max_policy_bytes,
            max_version_bytes: text.max_version_bytes,
        }
    }
}

impl LimitsConfig {
    /// The free-text limits the HTTP handlers check requests against.
    pub fn text(&self) -> TextLimits {
        TextLimits {
            max_reason_bytes: self.max_reason_bytes,
            max_policy_bytes: self.max_policy_bytes,
            max_version_bytes: self.max_version_bytes,
        }
    }
}

impl ServiceConfig for OpsServerConfig {
    const STATIC_FIELDS: &'static [&'static str] = &["http", "log", "audit.path"];

    fn validate(&self) -> Result<(), ValidationError> {
        let mut v = Validator::new();
        self.http.validate_into(&mut v.at("http"));
        self.client.validate_into(&mut v.at("client"));
        self.runtime.validate_into(&mut v.at("runtime"));
        v.at("audit").check(!self.audit.path.as_os_str().is_empty(), "path", "\"\"", "must name a file");
        let storage = &self.storage;
        let mut st = v.at("storage");
        match storage.kind {
            StorageKind::Http => {
                let url = &storage.url;
                st.check(
                    (url.starts_with("http://") || url.starts_with("https://")) && url.len() > 8,
                    "url",
                    url,
                    "must be an http:// or https:// URL",
                );
                st.check(storage.valkey.is_none(), "valkey", "present", "is only read with kind = \"valkey\"");
            }
            StorageKind::Valkey => {
                st.check(storage.url.is_empty(), "url", &storage.url, "must be empty with kind = \"valkey\"");
                match &storage.valkey {
                    Some(valkey) => valkey.validate_into(&mut st.at("valkey")),
                    None => {
                        st.check(false, "valkey", "missing", "kind = \"valkey\" needs a [storage.valkey] table");
                    }
                }
            }
        }
        drop(st);
        self.auth.validate(&mut v.at("auth"));
        let r = &self.registry;
        let mut reg = v.at("registry");
        reg.range_u64("heartbeat_interval_ms", r.heartbeat_interval_ms, 100, 600_000);
        reg.check(
            r.down_after_ms >= 2 * r.heartbeat_interval_ms,
            "down_after_ms",
            r.down_after_ms,
            "must be at least twice heartbeat_interval_ms",
        );
        drop(reg);
        let c = &self.collect;
        let mut col = v.at("collect");
        col.range_u64("max_agent_deadline_ms", c.max_agent_deadline_ms, 10, 600_000);
        col.range_u64("agent_deadline_ms", c.agent_deadline_ms, 10, c.max_agent_deadline_ms.max(10));
        col.range_u64("limit_per_agent", u64::from(c.limit_per_agent), 1, 1_000_000);
        drop(col);
        let e = &self.executor;
        let mut ex = v.at("executor");
        ex.range_u64("max_concurrent", e.max_concurrent, 1, 1024);
        ex.range_u64("max_concurrent_per_worker", e.max_concurrent_per_worker, 1, 64);
        ex.range_u64("max_queued_per_tenant", e.max_queued_per_tenant, 1, 1_000_000);
        ex.range_u64("poll_interval_ms", e.poll_interval_ms, 10, 60_000);
        ex.range_u64("stall_timeout_ms", e.stall_timeout_ms, 100, 86_400_000);
        let t = &e.timeouts;
        let mut to = ex.at("timeouts");
        for (name, ms) in [
            ("split_ms", t.split_ms),
            ("move_ms", t.move_ms),
            ("merge_ms", t.merge_ms),
            ("group_ms", t.group_ms),
            ("reshard_ms", t.reshard_ms),
        ] {
            to.range_u64(name, ms, 100, 86_400_000);
        }
        drop(to);
        drop(ex);
        let mut limits = v.at("limits");
        limits.range_u64("requests_per_sec", self.limits.requests_per_sec, 1, 1_000_000);
        self.limits.text().validate_into(&mut limits);
        drop(limits);
        v.finish()
    }
}

lb_common::impl_service_basics!(OpsServerConfig);

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn a_split_into_that_streams_pieces_gets_a_moves_timeout() {
        use lb_common::protocol::ActionSpec;
        let t = KindTimeouts::default();
        let cut = |to: Vec<&str>| ActionSpec::SplitInto {
            partition: "p".parse().expect("id"),
            split_keys: to.iter().enumerate().map(|(i, _)| lb_common::ids::Key(i as u64 + 1)).collect(),
            to_workers: to.iter().map(|w| w.parse().expect("id")).collect(),
            group: None,
            first_to_worker: None,
        };
        assert_eq!(t.for_spec(&cut(vec!["w-1", "w-2"])), Duration::from_millis(t.move_ms));
        let split = ActionSpec::Split { partition: "p".parse().expect("id"), split_key: lb_common::ids::Key(9) };
        assert_eq!(t.for_spec(&split), Duration::from_millis(t.split_ms));
    }

    #[test]
    fn the_shipped_config_parses_and_validates() {
        let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../configs/ops-server.toml"));
        let config: OpsServerConfig = lb_common::config::load(path).expect("configs/ops-server.toml is valid");
        assert_eq!(config.auth.tokens.len(), 4);
    }

    #[test]
    fn a_partial_table_takes_the_rest_from_its_defaults() {
        let text = "[http]\nlisten = \"127.0.0.1:0\"\n[audit]\npath = \"a.sqlite\"\n[storage]\nurl = \"http://127.0.0.1:7300\"\n\
                    [executor]\nmax_concurrent = 4\n[executor.timeouts]\nmove_ms = 60000\n[collect]\nlimit_per_agent = 10\n";
        let config = lb_common::config::parse::<OpsServerConfig>(text, Path::new("ops.toml")).expect("valid");
        let executor = ExecutorConfig {
            max_concurrent: 4,
            timeouts: KindTimeouts { move_ms: 60_000, ..KindTimeouts::default() },
            ..ExecutorConfig::default()
        };
        assert_eq!(config.executor, executor);
        assert_eq!(config.executor.max_concurrent_per_worker, DEFAULT_MAX_CONCURRENT_PER_WORKER);
        assert_eq!(config.executor.timeouts.split_ms, 60_000);
        assert_eq!(config.collect, CollectConfig { limit_per_agent: 10, ..CollectConfig::default() });
        assert_eq!(config.collect.max_agent_deadline_ms, 10 * DEFAULT_AGENT_DEADLINE_MS);
        assert_eq!(config.registry, RegistryConfig::default());
        let typo = text.replace("move_ms", "moves_ms");
        let err = lb_common::config::parse::<OpsServerConfig>(&typo, Path::new("ops.toml")).unwrap_err().to_string();
        assert!(err.contains("unknown field `moves_ms`"), "{err}");
    }

    #[test]
    fn the_shipped_valkey_config_parses_and_validates() {
        let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../configs/ops-server-valkey.toml"));
        let config: OpsServerConfig = lb_common::config::load(path).expect("configs/ops-server-valkey.toml is valid");
        assert_eq!(config.storage.kind, StorageKind::Valkey);
        let valkey = config.storage.valkey.expect("[storage.valkey]");
        assert_eq!((valkey.seeds.len(), valkey.cluster.as_str()), (3, "valkey"));
    }

    #[test]
    fn valkey_storage_errors_name_their_field_and_never_echo_the_password() {
        let base = "[http]\nlisten = \"127.0.0.1:0\"\n[audit]\npath = \"a.sqlite\"\n";
        let parse = |storage: &str| {
            lb_common::config::parse::<OpsServerConfig>(&format!("{base}{storage}"), Path::new("ops.toml"))
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        let err = parse("[storage]\nkind = \"valkey\"\n").unwrap_err();
        assert!(err.contains("storage.valkey"), "{err}");
        let err = parse(
            "[storage]\nkind = \"valkey\"\n[storage.valkey]\nseeds = [\"nope\"]\npassword = \"\"\n\
             node_ops_per_sec = 0\nnode_bytes_per_sec = 1e8\n",
        )
        .unwrap_err();
        assert!(err.contains("storage.valkey.seeds[0] = nope"), "{err}");
        assert!(err.contains("storage.valkey.node_ops_per_sec = 0"), "{err}");
        assert!(err.contains("storage.valkey.password = <redacted>"), "{err}");
        let err = parse(
            "[storage]\nkind = \"valkey\"\n[storage.valkey]\nseeds = [\"127.0.0.1:7001\"]\n\
             password = \"hunter2-secret\"\nnode_ops_per_sec = 1\nnode_bytes_per_sec = 1\npoll_interval_ms = 1\n",
        )
        .unwrap_err();
        assert!(err.contains("storage.valkey.poll_interval_ms = 1") && !err.contains("hunter2"), "{err}");
        let zones = "[storage]\nkind = \"valkey\"\n[storage.valkey]\nseeds = [\"127.0.0.1:7001\"]\n\
                     [storage.valkey.zones]\n\"127.0.0.1:7001\" = \"eu-1a\"\n";
        assert!(parse(zones).is_ok(), "{:?}", parse(zones));
        let err = parse(&zones.replace("eu-1a", "eu 1a")).unwrap_err();
        assert!(err.contains(r#"storage.valkey.zones."127.0.0.1:7001" = eu 1a: must be a valid zone id"#), "{err}");
        // The HTTP form is unchanged, and does not take a valkey table.
        assert!(parse("[storage]\nurl = \"http://127.0.0.1:7300\"\n").is_ok());
        let err = parse("[storage]\nurl = \"http://127.0.0.1:7300\"\n[storage.valkey]\nseeds = []\nnode_ops_per_sec = 1\nnode_bytes_per_sec = 1\n").unwrap_err();
        assert!(err.contains("storage.valkey"), "{err}");
    }

    #[test]
    fn bad_values_name_their_field_and_never_echo_tokens() {
        let text = "[http]\nlisten = \"127.0.0.1:0\"\n[audit]\npath = \"a.sqlite\"\n[storage]\nurl = \"nope\"\n\
                    [[auth.tokens]]\nname = \"ci\"\ntoken = \"short-secret\"\nrole = \"operator\"\n\
                    [registry]\nheartbeat_interval_ms = 1000\ndown_after_ms = 1500\n";
        let err = lb_common::config::parse::<OpsServerConfig>(text, Path::new("ops.toml")).unwrap_err().to_string();
        assert!(err.contains("storage.url = nope"), "{err}");
        assert!(err.contains("auth.tokens[0].token = <redacted>"), "{err}");
        assert!(!err.contains("short-secret"), "{err}");
        assert!(err.contains("registry.down_after_ms = 1500"), "{err}");
    }
}
