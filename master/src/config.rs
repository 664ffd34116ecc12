//! `master.toml`. Static: `[http]`, `[log]`, `store.path`, `[table]` (the table is sized at
//! start-up), `[leadership]`. Everything else reloads live.

use std::path::PathBuf;
use std::time::Duration;

use lb_common::config::ServiceConfig;
use lb_common::config::shared::{HttpClientConfig, HttpServerConfig, LogConfig, RuntimeConfig};
use lb_common::validate::{FieldError, ValidationError, Validator};
use serde::{Deserialize, Serialize};

use lb_common::http::auth::AuthConfig;

use crate::evaluation::EvaluationConfig;
use crate::executor::DEFAULT_APPROVAL_TTL_SECS;
use crate::planner::PlannerConfig;
use crate::table::TableConfig;

/// 1 s: the design's online cadence; hotspots are detected within a few seconds.
pub const DEFAULT_COLLECT_INTERVAL_MS: u64 = 1_000;
/// 800 ms: each agent gets most of a round, and a round still fits in its second.
pub const DEFAULT_AGENT_DEADLINE_MS: u64 = 800;
/// 5,000 samples per agent per page: a 5k-partition worker's second in one page.
pub const DEFAULT_LIMIT_PER_AGENT: u32 = 5_000;
/// 20 pages per round: enough to catch up a minute behind, bounded so a round ends.
pub const DEFAULT_MAX_PAGES_PER_ROUND: u32 = 20;
/// 5 s without a successful round: the analyzers should not act on what they have.
pub const DEFAULT_STALE_AFTER_MS: u64 = 5_000;
/// 5 s: partitions move and split on this scale; the ops server caches topology for 2 s anyway.
pub const DEFAULT_TOPOLOGY_INTERVAL_MS: u64 = 5_000;
/// 30 days of proposals, actions and evaluations: a month of "why did it do that" answers.
pub const DEFAULT_STORE_RETENTION_DAYS: u64 = 30;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MasterConfig {
    pub http: HttpServerConfig,
    #[serde(default)]
    pub client: HttpClientConfig,
    #[serde(default)]
    pub log: LogConfig,
    #[serde(default)]
    pub runtime: RuntimeConfig,
    pub ops_server: OpsServerLink,
    #[serde(default)]
    pub collector: CollectorConfig,
    pub store: StoreConfig,
    #[serde(default)]
    pub table: TableSection,
    /// What one API reply may hold (`[api]`): bounds on what a query can ask for.
    #[serde(default)]
    pub api: ApiLimits,
    #[serde(default)]
    pub analyzer: AnalyzerConfig,
    /// Policies, thresholds, caps and cooldowns of the online planner.
    #[serde(default)]
    pub planner: PlannerConfig,
    /// How finished actions are scored (settle time, windows, verdict thresholds, reverts).
    #[serde(default)]
    pub evaluation: EvaluationConfig,
    /// The placement manager for hash-sharded datasets (reshards, placement rules for routers).
    #[serde(default)]
    pub placement: crate::placement_manager::PlacementManagerConfig,
    /// The offline analyzer: the hourly archive, merges and peaks ahead ([`crate::offline`]).
    #[serde(default)]
    pub offline: crate::offline::OfflineSection,
    /// Tokens for the write endpoints (approving dry-run proposals needs `operator`). No tokens:
    /// writes are open (loopback demos); the master warns at start-up.
    #[serde(default)]
    pub auth: AuthConfig,
    /// Who may act: one master alone (`single`, the default) or masters elected through etcd.
    #[serde(default)]
    pub leadership: LeadershipConfig,
}

/// `[leadership] backend`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeadershipBackend {
    /// One master, always the leader; no external service.
    #[default]
    Single,
    /// Masters campaign in an etcd election; the one holding it acts, the others stand by.
    Etcd,
}

impl LeadershipBackend {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Single => "single",
            Self::Etcd => "etcd",
        }
    }
}

/// 3 s lease: a dead leader's lease lapses and a standby leads within ~5 s (ecosystem.md §5
/// measured 5.5 s from the last keep-alive with this TTL against etcd 3.4).
pub const DEFAULT_LEASE_TTL_SECS: u64 = 3;
/// 1 s per etcd call: a keep-alive is sent every third of the TTL and must answer before the
/// next one is due.
pub const DEFAULT_ETCD_REQUEST_TIMEOUT_MS: u64 = 1_000;
/// 1 s to open a connection to etcd on a LAN; a dead endpoint is retried at the next attempt.
pub const DEFAULT_ETCD_CONNECT_TIMEOUT_MS: u64 = 1_000;
/// The election's name (an etcd key prefix); the leader's handover state lives under it too.
pub const DEFAULT_ELECTION: &str = "/lb/master";
/// 10 s between saves of a handover that only the hysteresis changed: a successor starts at most
/// that far behind on counters it rebuilds in a few windows anyway, while etcd takes a tenth of
/// the writes it would at one a pass (each one a new revision until etcd compacts). A pass
/// that submitted, ended or evaluated an action (or whose dry-run proposals changed) saves at once.
pub const DEFAULT_HANDOVER_INTERVAL_MS: u64 = 10_000;

/// `[leadership]`: static (a change needs a restart: a live switch of backend or election would
/// let two masters act).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LeadershipConfig {
    pub backend: LeadershipBackend,
    /// etcd client URLs (`http://host:port`), for `backend = "etcd"`.
    pub endpoints: Vec<String>,
    /// The election name: every master of one cluster uses the same.
    pub election: String,
    /// This master's URL as the others and clients should reach it (told to writes sent to a
    /// standby); default `http://` + the listen address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advertise: Option<String>,
    pub lease_ttl_secs: u64,
    pub request_timeout_ms: u64,
    pub connect_timeout_ms: u64,
    /// The longest a handover the hysteresis alone changed goes unsaved.
    pub handover_interval_ms: u64,
}

impl Default for LeadershipConfig {
    fn default() -> Self {
        Self {
            backend: LeadershipBackend::Single,
            endpoints: Vec::new(),
            election: DEFAULT_ELECTION.to_owned(),
            advertise: None,
            lease_ttl_secs: DEFAULT_LEASE_TTL_SECS,
            request_timeout_ms: DEFAULT_ETCD_REQUEST_TIMEOUT_MS,
            connect_timeout_ms: DEFAULT_ETCD_CONNECT_TIMEOUT_MS,
            handover_interval_ms: DEFAULT_HANDOVER_INTERVAL_MS,
        }
    }
}

impl LeadershipConfig {
    pub fn lease_ttl(&self) -> Duration {
        Duration::from_secs(self.lease_ttl_secs)
    }

    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }

    pub fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.connect_timeout_ms)
    }

    pub fn handover_interval(&self) -> Duration {
        Duration::from_millis(self.handover_interval_ms)
    }

    fn validate_into(&self, v: &mut lb_common::validate::Scope<'_>) {
        if self.backend == LeadershipBackend::Single {
            v.check(
                self.endpoints.is_empty(),
                "endpoints",
                format!("{:?}", self.endpoints),
                "only for backend = \"etcd\"",
            );
            return;
        }
        v.check(
            !self.endpoints.is_empty(),
            "endpoints",
            "[]",
            "must list at least one etcd URL for backend = \"etcd\"",
        );
        for (i, url) in self.endpoints.iter().enumerate() {
            v.check(
                url.strip_prefix("http://").is_some_and(|rest| !rest.is_empty() && !rest.contains('/')),
                &format!("endpoints[{i}]"),
                url,
                "must be http://host:port (TLS is not supported)",
            );
        }
        v.check(
            !self.election.is_empty() && !self.election.chars().any(char::is_whitespace),
            "election",
            format!("{:?}", self.election),
            "must be a non-empty etcd key prefix without spaces",
        );
        if let Some(url) = &self.advertise {
            // It is announced to the ops server (`FencingRequest.leader`), which refuses more.
            let max = lb_common::protocol::MAX_ADDRESS_BYTES;
            v.check(
                (url.starts_with("http://") || url.starts_with("https://")) && url.len() <= max,
                "advertise",
                url,
                &format!("must be an http:// or https:// URL of at most {max} bytes"),
            );
        }
        v.range_u64("lease_ttl_secs", self.lease_ttl_secs, 2, 60);
        // A keep-alive goes out every third of the TTL and must be answered before the next.
        let max_request = (self.lease_ttl_secs.clamp(2, 60) * 1000 / 3).max(100);
        v.range_u64("request_timeout_ms", self.request_timeout_ms, 50, max_request);
        v.range_u64("connect_timeout_ms", self.connect_timeout_ms, 50, 30_000);
        v.range_u64("handover_interval_ms", self.handover_interval_ms, 1_000, 300_000);
    }
}

/// 1 s: the design's online tick; a hotspot is acted on a few windows after it appears.
pub const DEFAULT_ANALYZER_INTERVAL_MS: u64 = 1_000;
/// 5 s of load per decision: smooths one report's noise without hiding a surge.
pub const DEFAULT_ANALYZER_WINDOW_MS: u64 = 5_000;

/// `[analyzer]`: cadence and averaging window of the online loop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AnalyzerConfig {
    pub interval_ms: u64,
    pub window_ms: u64,
    /// A dry-run proposal can be approved while the planner keeps proposing it and for this
    /// long after it last did.
    pub approval_ttl_secs: u64,
}

impl Default for AnalyzerConfig {
    fn default() -> Self {
        Self {
            interval_ms: DEFAULT_ANALYZER_INTERVAL_MS,
            window_ms: DEFAULT_ANALYZER_WINDOW_MS,
            approval_ttl_secs: DEFAULT_APPROVAL_TTL_SECS,
        }
    }
}

/// `[table]`: the MetricsTable's resolutions and ceilings (static: sized at start-up).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TableSection {
    pub fine_step_ms: u64,
    pub fine_points: u32,
    pub coarse_step_ms: u64,
    pub coarse_points: u32,
    pub max_partitions: usize,
    pub max_workers: usize,
}

impl Default for TableSection {
    fn default() -> Self {
        Self::from(&TableConfig::default())
    }
}

impl From<&TableConfig> for TableSection {
    fn from(c: &TableConfig) -> Self {
        Self {
            fine_step_ms: c.fine_step.as_millis() as u64,
            fine_points: c.fine_points,
            coarse_step_ms: c.coarse_step.as_millis() as u64,
            coarse_points: c.coarse_points,
            max_partitions: c.max_partitions,
            max_workers: c.max_workers,
        }
    }
}

impl TableSection {
    pub fn to_table_config(&self) -> TableConfig {
        TableConfig {
            fine_step: Duration::from_millis(self.fine_step_ms),
            fine_points: self.fine_points,
            coarse_step: Duration::from_millis(self.coarse_step_ms),
            coarse_points: self.coarse_points,
            max_partitions: self.max_partitions,
            max_workers: self.max_workers,
            ..TableConfig::default()
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpsServerLink {
    pub url: String,
    /// Bearer token with the `service` role, when the ops server requires one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CollectorConfig {
    pub interval_ms: u64,
    pub agent_deadline_ms: u64,
    pub limit_per_agent: u32,
    pub max_pages_per_round: u32,
    pub stale_after_ms: u64,
    pub topology_interval_ms: u64,
}

impl Default for CollectorConfig {
    fn default() -> Self {
        Self {
            interval_ms: DEFAULT_COLLECT_INTERVAL_MS,
            agent_deadline_ms: DEFAULT_AGENT_DEADLINE_MS,
            limit_per_agent: DEFAULT_LIMIT_PER_AGENT,
            max_pages_per_round: DEFAULT_MAX_PAGES_PER_ROUND,
            stale_after_ms: DEFAULT_STALE_AFTER_MS,
            topology_interval_ms: DEFAULT_TOPOLOGY_INTERVAL_MS,
        }
    }
}

/// `[api]`: how much one reply of the master's API may hold, whatever the query asks. Each
/// default says why; they reload live (`max_streams` at the next start).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApiLimits {
    /// `GET /api/v1/top`: most entries; a larger `n` is capped. 1,000 rows: beyond a console
    /// page, still a bounded reply.
    pub max_top_n: usize,
    /// `GET /api/v1/records/{kind}`: most records per page (a larger `limit` is capped); 1,000
    /// of a few KiB each bound a reply to a few MB, and `since_ms` pages on.
    pub max_records: usize,
    /// `GET /api/v1/heatmap`: most cells (rows × key buckets); more is refused. 262,144 (a day
    /// of minutes over 180 key buckets, or an hour of 10 s rows over 700) is more than a screen
    /// shows and bounds a reply to ~3 MB of JSON.
    pub max_heatmap_cells: usize,
    /// `GET /api/v1/heatmap`: most key buckets; finer than any screen shows.
    pub max_heatmap_key_buckets: usize,
    /// `GET /api/v1/cluster/history`: most points (steps); a day of minutes is a chart's worth.
    pub max_history_points: usize,
    /// `GET /api/v1/stream`: consoles following at once; more is a script gone wrong (503).
    /// Read at start-up.
    pub max_streams: usize,
    /// `GET /api/v1/actions`: most actions listed, newest first: a console page's worth (the
    /// ops server keeps more).
    pub max_actions_listed: usize,
}

pub const DEFAULT_MAX_TOP_N: usize = 1_000;
pub const DEFAULT_MAX_RECORDS: usize = 1_000;
pub const DEFAULT_MAX_HEATMAP_CELLS: usize = 262_144;
pub const DEFAULT_MAX_HEATMAP_KEY_BUCKETS: usize = 4096;
pub const DEFAULT_MAX_HISTORY_POINTS: usize = 1_440;
pub const DEFAULT_MAX_STREAMS: usize = 64;
pub const DEFAULT_MAX_ACTIONS_LISTED: usize = 500;

impl Default for ApiLimits {
    fn default() -> Self {
        Self {
            max_top_n: DEFAULT_MAX_TOP_N,
            max_records: DEFAULT_MAX_RECORDS,
            max_heatmap_cells: DEFAULT_MAX_HEATMAP_CELLS,
            max_heatmap_key_buckets: DEFAULT_MAX_HEATMAP_KEY_BUCKETS,
            max_history_points: DEFAULT_MAX_HISTORY_POINTS,
            max_streams: DEFAULT_MAX_STREAMS,
            max_actions_listed: DEFAULT_MAX_ACTIONS_LISTED,
        }
    }
}

impl ApiLimits {
    fn validate_into(&self, v: &mut lb_common::validate::Scope<'_>) {
        v.range_u64("max_top_n", self.max_top_n as u64, 1, 1_000_000);
        v.range_u64("max_records", self.max_records as u64, 1, 1_000_000);
        v.range_u64("max_heatmap_cells", self.max_heatmap_cells as u64, 1, 16_777_216);
        v.range_u64("max_heatmap_key_buckets", self.max_heatmap_key_buckets as u64, 1, 65_536);
        v.range_u64("max_history_points", self.max_history_points as u64, 1, 1_000_000);
        v.range_u64("max_streams", self.max_streams as u64, 1, 10_000);
        v.range_u64("max_actions_listed", self.max_actions_listed as u64, 1, 1_000_000);
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// The ResultDataStore's SQLite file.
    pub path: PathBuf,
    #[serde(default = "default_retention_days")]
    pub retention_days: u64,
}

impl ServiceConfig for MasterConfig {
    const STATIC_FIELDS: &'static [&'static str] = &["http", "log", "store.path", "table", "leadership"];

    fn validate(&self) -> Result<(), ValidationError> {
        let mut v = Validator::new();
        self.http.validate_into(&mut v.at("http"));
        self.client.validate_into(&mut v.at("client"));
        self.runtime.validate_into(&mut v.at("runtime"));
        let url = &self.ops_server.url;
        v.at("ops_server").check(
            (url.starts_with("http://") || url.starts_with("https://")) && url.len() > 8,
            "url",
            url,
            "must be an http:// or https:// URL",
        );
        let c = &self.collector;
        let mut col = v.at("collector");
        col.range_u64("interval_ms", c.interval_ms, 100, 60_000);
        col.range_u64("agent_deadline_ms", c.agent_deadline_ms, 10, 60_000);
        col.range_u64("limit_per_agent", u64::from(c.limit_per_agent), 1, 1_000_000);
        col.range_u64("max_pages_per_round", u64::from(c.max_pages_per_round), 1, 1_000);
        col.check(
            c.stale_after_ms >= c.interval_ms,
            "stale_after_ms",
            c.stale_after_ms,
            "must be at least interval_ms",
        );
        col.range_u64("topology_interval_ms", c.topology_interval_ms, 100, 3_600_000);
        drop(col);
        let mut st = v.at("store");
        st.check(!self.store.path.as_os_str().is_empty(), "path", "\"\"", "must name a file");
        st.range_u64("retention_days", self.store.retention_days, 1, 3650);
        drop(st);
        if let Err(e) = crate::table::MetricsTable::new(self.table.to_table_config()) {
            v.at("").check(false, "table", format!("{:?}", self.table), &e.to_string());
        }
        self.api.validate_into(&mut v.at("api"));
        let mut an = v.at("analyzer");
        an.range_u64("interval_ms", self.analyzer.interval_ms, 100, 60_000);
        an.range_u64("window_ms", self.analyzer.window_ms, 1_000, 60_000);
        an.range_u64("approval_ttl_secs", self.analyzer.approval_ttl_secs, 1, 86_400);
        drop(an);
        self.auth.validate(&mut v.at("auth"));
        self.leadership.validate_into(&mut v.at("leadership"));
        let mut errors = match v.finish() {
            Ok(()) => Vec::new(),
            Err(e) => e.errors,
        };
        errors.extend(policy_errors(&self.planner, &self.evaluation, &self.placement, &self.offline));
        if errors.is_empty() { Ok(()) } else { Err(ValidationError { errors }) }
    }
}

/// What is wrong with the policy sections (`[planner]`, `[evaluation]`, `[placement]`,
/// `[offline]`), each field named from its section (`planner.caps.min_gain_ratio`): the
/// master's file and a simulated scenario's `[master]` are checked alike.
pub fn policy_errors(
    planner: &PlannerConfig,
    evaluation: &EvaluationConfig,
    placement: &crate::placement_manager::PlacementManagerConfig,
    offline: &crate::offline::OfflineSection,
) -> Vec<FieldError> {
    let mut v = Validator::new();
    placement.validate_into(&mut v.at("placement"));
    offline.validate_into(&mut v.at("offline"));
    let mut errors = v.finish().err().map_or_else(Vec::new, |e| e.errors);
    if let Err(e) = planner.validate() {
        errors.extend(e.errors.into_iter().map(|f| FieldError { field: format!("planner.{}", f.field), ..f }));
    }
    if let Err(e) = evaluation.validate() {
        // Named from `evaluation.` already.
        errors.extend(e.errors);
    }
    errors
}

// `[store]` requires `path`, so `retention_days` keeps a default of its own: a struct-level
// `#[serde(default)]` would make `path` optional too.
fn default_retention_days() -> u64 {
    DEFAULT_STORE_RETENTION_DAYS
}

lb_common::impl_service_basics!(MasterConfig);

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn the_shipped_config_parses_and_validates() {
        let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../configs/master.toml"));
        let config: MasterConfig = lb_common::config::load(path).expect("configs/master.toml is valid");
        assert_eq!(config.table, TableSection::default());
    }

    #[test]
    fn a_partial_table_takes_the_rest_from_its_defaults_and_store_path_stays_required() {
        let base = "[http]\nlisten = \"127.0.0.1:0\"\n[ops_server]\nurl = \"http://127.0.0.1:7200\"\n";
        let text =
            format!("{base}[store]\npath = \"r.sqlite\"\n[collector]\ninterval_ms = 500\n[table]\nfine_points = 600\n");
        let config = lb_common::config::parse::<MasterConfig>(&text, Path::new("m.toml")).expect("valid");
        assert_eq!(config.collector, CollectorConfig { interval_ms: 500, ..CollectorConfig::default() });
        assert_eq!(config.collector.stale_after_ms, DEFAULT_STALE_AFTER_MS);
        assert_eq!(config.table, TableSection { fine_points: 600, ..TableSection::default() });
        assert_eq!(config.analyzer, AnalyzerConfig::default());
        assert_eq!(config.store.retention_days, DEFAULT_STORE_RETENTION_DAYS);
        let no_path = format!("{base}[store]\nretention_days = 7\n");
        let err = lb_common::config::parse::<MasterConfig>(&no_path, Path::new("m.toml")).unwrap_err().to_string();
        assert!(err.contains("missing field `path`"), "{err}");
    }

    #[test]
    fn leadership_defaults_to_single_and_etcd_is_validated_field_by_field() {
        let base = "[http]\nlisten = \"127.0.0.1:0\"\n[ops_server]\nurl = \"http://127.0.0.1:7200\"\n[store]\npath = \"r.sqlite\"\n";
        let parse = |leadership: &str| {
            lb_common::config::parse::<MasterConfig>(&format!("{base}{leadership}"), Path::new("m.toml"))
        };
        let refused = |leadership: &str| parse(leadership).unwrap_err().to_string();
        assert_eq!(parse("").expect("valid").leadership, LeadershipConfig::default());
        assert_eq!(LeadershipConfig::default().backend, LeadershipBackend::Single);
        let good = parse("[leadership]\nbackend = \"etcd\"\nendpoints = [\"http://127.0.0.1:2379\"]\n").expect("valid");
        assert_eq!(good.leadership.lease_ttl_secs, DEFAULT_LEASE_TTL_SECS);
        assert_eq!(good.leadership.election, DEFAULT_ELECTION);
        let err = refused(
            "[leadership]\nbackend = \"etcd\"\nendpoints = [\"https://x:1\"]\nelection = \"a b\"\n\
             lease_ttl_secs = 1\nrequest_timeout_ms = 5000\nadvertise = \"m:1\"\nhandover_interval_ms = 10\n",
        );
        for field in [
            "leadership.endpoints[0]",
            "leadership.election",
            "leadership.lease_ttl_secs",
            "leadership.request_timeout_ms",
            "leadership.advertise",
            "leadership.handover_interval_ms",
        ] {
            assert!(err.contains(field), "{field}: {err}");
        }
        for (text, field) in [
            ("[leadership]\nbackend = \"etcd\"\n", "leadership.endpoints"),
            ("[leadership]\nendpoints = [\"http://127.0.0.1:2379\"]\n", "leadership.endpoints"),
            ("[leadership]\nbackend = \"zookeeper\"\n", "backend"),
        ] {
            let err = refused(text);
            assert!(err.contains(field), "{text}: {err}");
        }
    }

    #[test]
    fn bad_values_name_their_field() {
        let text = "[http]\nlisten = \"127.0.0.1:0\"\n[ops_server]\nurl = \"x\"\n[store]\npath = \"r.sqlite\"\n\
                    [collector]\ninterval_ms = 1000\nstale_after_ms = 10\n[table]\nfine_points = 0\n";
        let err = lb_common::config::parse::<MasterConfig>(text, Path::new("m.toml")).unwrap_err().to_string();
        assert!(err.contains("ops_server.url = x"), "{err}");
        assert!(err.contains("collector.stale_after_ms = 10"), "{err}");
        assert!(err.contains("table = "), "{err}");
    }
}
