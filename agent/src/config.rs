//! `agent.toml`: the agent's config. Static: `worker_id`, `[http]`, `[log]`, `store.path`,
//! `store.synchronous`. Everything else reloads live, `[source]` included (a changed address or
//! credential reconnects and starts a fresh baseline).

use std::path::PathBuf;
use std::time::Duration;

use lb_common::config::ServiceConfig;
use lb_common::config::shared::{HttpClientConfig, HttpServerConfig, LogConfig, RuntimeConfig};
use lb_common::ids::WorkerId;
use lb_common::validate::{ValidationError, Validator};
use serde::{Deserialize, Serialize};

/// 7 days: a week of 1 s samples answers "what happened last Tuesday" without rollups.
pub const DEFAULT_RAW_RETENTION_HOURS: u64 = 7 * 24;
/// 90 days: a quarter of hourly rollups covers weekly and monthly periodicity for merge decisions.
pub const DEFAULT_ROLLUP_RETENTION_DAYS: u64 = 90;
/// 60 s: retention deletes in bounded chunks, so running it often keeps each chunk small.
pub const DEFAULT_MAINTENANCE_INTERVAL_MS: u64 = 60_000;
/// An hour between integrity checks of the store (`PRAGMA quick_check`): it reads every page
/// (well under a second for the ~100 MB a week of 1,000 partitions takes), so a page damaged
/// while the agent runs is found within the hour instead of at the next restart.
pub const DEFAULT_INTEGRITY_CHECK_SECS: u64 = 3600;
/// 60 s: rollup accumulators reach SQLite at least this often (a restart recomputes the rest).
pub const DEFAULT_ROLLUP_FLUSH_INTERVAL_MS: u64 = 60_000;
/// 512 reports per transaction: one group commit serves every report that arrived meanwhile,
/// bounded so that a backlog does not make one transaction (and its replies) arbitrarily late.
pub const DEFAULT_MAX_BATCH_REPORTS: u64 = 512;
/// 120 s: two minutes of samples serve any puller that is not far behind, and a standby master's
/// warm-up; older data is read from SQLite.
pub const DEFAULT_WINDOW_DURATION_MS: u64 = 120_000;
/// 128 MiB: the hard bound of the in-memory window, whatever the partition count; at about 100
/// bytes a sample it holds the full 120 s of a 10,000-partition worker reporting every second.
pub const DEFAULT_WINDOW_MAX_BYTES: u64 = 128 * 1024 * 1024;
/// 1 s: the same cadence as worker reports, so host and partition samples line up.
pub const DEFAULT_HOST_INTERVAL_MS: u64 = 1_000;
/// 10,000 samples: a page of about 5 MiB of JSON, a second of a 10k-partition worker.
pub const DEFAULT_MAX_SAMPLES_PER_PAGE: u64 = 10_000;
/// 1 s: the cadence of pushed worker reports, so a Valkey node's slots line up with them; one
/// poll of a node owning a third of the slots costs the node about a millisecond.
pub const DEFAULT_SOURCE_INTERVAL_MS: u64 = 1_000;
/// 2 s: a loopback or LAN connect takes milliseconds; a dead node is noticed within one or two
/// intervals without a poll hanging.
pub const DEFAULT_SOURCE_CONNECT_TIMEOUT_MS: u64 = 2_000;
/// 5 s: `CLUSTER SLOT-STATS` over all 16,384 slots is ~0.8 MB; a loaded node answers well within
/// this, and a stuck one costs at most a few skipped intervals.
pub const DEFAULT_SOURCE_COMMAND_TIMEOUT_MS: u64 = 5_000;
/// The tenant of slot partitions when `source.cluster_name` is not set.
pub const DEFAULT_VALKEY_CLUSTER_NAME: &str = "valkey";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// The worker this agent runs beside; reports for another worker are refused.
    pub worker_id: WorkerId,
    pub http: HttpServerConfig,
    #[serde(default)]
    pub client: HttpClientConfig,
    #[serde(default)]
    pub log: LogConfig,
    #[serde(default)]
    pub runtime: RuntimeConfig,
    pub store: StoreConfig,
    #[serde(default)]
    pub window: WindowConfig,
    #[serde(default)]
    pub host: HostConfig,
    #[serde(default)]
    pub serve: ServeConfig,
    /// Where to register; absent runs the agent standalone (pulled directly).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ops_server: Option<OpsServerConfig>,
    /// A storage node the agent polls itself instead of (or besides) receiving pushed reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceConfig>,
}

/// `[source]`: what the agent polls. `kind` selects the system.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SourceConfig {
    /// One Valkey (or Redis) cluster node: see [`crate::source::valkey`].
    Valkey(ValkeySourceConfig),
}

impl SourceConfig {
    /// The tenant every partition of this source is reported under, when it fixes one.
    pub fn tenant(&self) -> Option<lb_common::ids::TenantId> {
        match self {
            SourceConfig::Valkey(v) => lb_common::ids::TenantId::new(v.cluster_name.as_str()).ok(),
        }
    }
}

/// `[source] kind = "valkey"`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValkeySourceConfig {
    /// `host:port` of the node beside this agent (`[::1]:6379` for IPv6).
    pub address: String,
    /// ACL user; absent with a password means the `default` user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// Never logged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// The tenant of every slot partition; name the cluster when one master watches several.
    #[serde(default = "default_valkey_cluster_name")]
    pub cluster_name: String,
    #[serde(default = "default_source_interval_ms")]
    pub interval_ms: u64,
    #[serde(default = "default_source_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    #[serde(default = "default_source_command_timeout_ms")]
    pub command_timeout_ms: u64,
}

impl ValkeySourceConfig {
    pub fn interval(&self) -> Duration {
        Duration::from_millis(self.interval_ms)
    }

    /// `address` split into host and port; `None` when it is not `host:port`.
    pub fn host_port(&self) -> Option<(String, u16)> {
        let (host, port) = self.address.rsplit_once(':')?;
        let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
        let port: u16 = port.parse().ok()?;
        (!host.is_empty() && port > 0).then(|| (host.to_owned(), port))
    }
}

impl std::fmt::Debug for ValkeySourceConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ValkeySourceConfig")
            .field("address", &self.address)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("cluster_name", &self.cluster_name)
            .field("interval_ms", &self.interval_ms)
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("command_timeout_ms", &self.command_timeout_ms)
            .finish()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Synchronous {
    /// WAL + NORMAL: a commit survives a process crash (kill -9); power loss may lose the last few.
    #[default]
    Normal,
    /// WAL + FULL: a commit also survives power loss, at an fsync per group commit.
    Full,
}

/// What the agent does when its store file is damaged at start-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnCorruption {
    /// Refuse to start, naming the file and what to do: an operator decides (the default, as
    /// moving data aside should be a choice).
    #[default]
    Fail,
    /// Rename the damaged file (and its `-wal` and `-shm`) to `<path>.damaged-<unix ms>` and
    /// start with an empty store; the lost samples are a gap to every puller.
    MoveAside,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    pub path: PathBuf,
    #[serde(default)]
    pub synchronous: Synchronous,
    /// Read at start-up only.
    #[serde(default)]
    pub on_corruption: OnCorruption,
    #[serde(default = "default_raw_retention_hours")]
    pub raw_retention_hours: u64,
    #[serde(default = "default_rollup_retention_days")]
    pub rollup_retention_days: u64,
    #[serde(default = "default_maintenance_interval_ms")]
    pub maintenance_interval_ms: u64,
    /// Seconds between integrity checks of the store file while the agent runs; 0 turns them
    /// off (a damaged file is then found only at start-up).
    #[serde(default = "default_integrity_check_secs")]
    pub integrity_check_secs: u64,
    #[serde(default = "default_rollup_flush_interval_ms")]
    pub rollup_flush_interval_ms: u64,
    #[serde(default = "default_max_batch_reports")]
    pub max_batch_reports: u64,
}

impl StoreConfig {
    pub fn raw_retention(&self) -> Duration {
        Duration::from_secs(self.raw_retention_hours * 3600)
    }

    pub fn rollup_retention(&self) -> Duration {
        Duration::from_secs(self.rollup_retention_days * 86_400)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WindowConfig {
    pub duration_ms: u64,
    pub max_bytes: u64,
}

impl Default for WindowConfig {
    fn default() -> Self {
        Self { duration_ms: DEFAULT_WINDOW_DURATION_MS, max_bytes: DEFAULT_WINDOW_MAX_BYTES }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HostConfig {
    pub enabled: bool,
    pub interval_ms: u64,
}

impl Default for HostConfig {
    fn default() -> Self {
        Self { enabled: true, interval_ms: DEFAULT_HOST_INTERVAL_MS }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServeConfig {
    pub max_samples_per_page: u64,
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self { max_samples_per_page: DEFAULT_MAX_SAMPLES_PER_PAGE }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpsServerConfig {
    /// Base URL of the ops server, e.g. `http://127.0.0.1:7200`.
    pub url: String,
    /// The URL the ops server reaches this agent at; defaults to `http://<http.listen>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advertise_url: Option<String>,
    /// Bearer token with the agent role, if the ops server requires one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

impl ServiceConfig for AgentConfig {
    const STATIC_FIELDS: &'static [&'static str] = &["worker_id", "http", "log", "store.path", "store.synchronous"];

    fn validate(&self) -> Result<(), ValidationError> {
        let mut v = Validator::new();
        self.http.validate_into(&mut v.at("http"));
        self.client.validate_into(&mut v.at("client"));
        self.runtime.validate_into(&mut v.at("runtime"));
        {
            let s = &self.store;
            let mut st = v.at("store");
            st.check(!s.path.as_os_str().is_empty(), "path", "\"\"", "must name a file");
            st.range_u64("raw_retention_hours", s.raw_retention_hours, 1, 24 * 365);
            st.range_u64("rollup_retention_days", s.rollup_retention_days, 1, 3650);
            st.check(
                s.rollup_retention_days * 24 >= s.raw_retention_hours,
                "rollup_retention_days",
                s.rollup_retention_days,
                "must cover at least raw_retention_hours (rollups outlive raw samples)",
            );
            st.range_u64("maintenance_interval_ms", s.maintenance_interval_ms, 100, 86_400_000);
            st.range_u64("rollup_flush_interval_ms", s.rollup_flush_interval_ms, 100, 3_600_000);
            st.range_u64("max_batch_reports", s.max_batch_reports, 1, 100_000);
        }
        {
            let mut w = v.at("window");
            w.range_u64("duration_ms", self.window.duration_ms, 1_000, 86_400_000);
            w.range_u64("max_bytes", self.window.max_bytes, 1024 * 1024, 16 * 1024 * 1024 * 1024);
        }
        v.at("host").range_u64("interval_ms", self.host.interval_ms, 100, 3_600_000);
        v.at("serve").range_u64("max_samples_per_page", self.serve.max_samples_per_page, 1, 1_000_000);
        if let Some(ops) = &self.ops_server {
            let mut o = v.at("ops_server");
            o.check(is_http_url(&ops.url), "url", &ops.url, "must be an http:// or https:// URL");
            if let Some(advertise) = &ops.advertise_url {
                o.check(is_http_url(advertise), "advertise_url", advertise, "must be an http:// or https:// URL");
            }
        }
        if let Some(SourceConfig::Valkey(source)) = &self.source {
            let mut sv = v.at("source");
            sv.check(
                source.host_port().is_some(),
                "address",
                &source.address,
                "must be host:port with a port in 1..=65535",
            );
            sv.check(
                lb_common::ids::TenantId::new(source.cluster_name.as_str()).is_ok(),
                "cluster_name",
                &source.cluster_name,
                "must be an id (ASCII letters, digits and - _ . : @, at most 128 bytes)",
            );
            if let Some(username) = &source.username {
                sv.check(!username.is_empty(), "username", "\"\"", "must not be empty (omit it for the default user)");
                sv.check(source.password.is_some(), "username", username, "needs a password");
            }
            if let Some(password) = &source.password {
                sv.check(
                    !password.is_empty(),
                    "password",
                    "<redacted>",
                    "must not be empty (omit it when the node has none)",
                );
            }
            sv.range_u64("interval_ms", source.interval_ms, 100, 600_000);
            sv.range_u64("connect_timeout_ms", source.connect_timeout_ms, 10, 60_000);
            sv.range_u64("command_timeout_ms", source.command_timeout_ms, 10, 60_000);
            sv.check(
                !self.host.enabled,
                "kind",
                "valkey",
                "reports the node's own CPU, memory and network as host stats: set host.enabled = false so /proc samples of the machine do not mix with them",
            );
        }
        v.finish()
    }
}

impl AgentConfig {
    /// The URL the ops server should reach this agent at.
    pub fn advertise_url(&self, bound: std::net::SocketAddr) -> String {
        self.ops_server.as_ref().and_then(|o| o.advertise_url.clone()).unwrap_or_else(|| format!("http://{bound}"))
    }
}

fn is_http_url(s: &str) -> bool {
    (s.starts_with("http://") || s.starts_with("https://")) && s.len() > "https://".len()
}

// `[store]` requires `path` and `[source]` requires `address`, so their other fields keep a
// default each: a struct-level `#[serde(default)]` would make the required ones optional too.
fn default_raw_retention_hours() -> u64 {
    DEFAULT_RAW_RETENTION_HOURS
}
fn default_rollup_retention_days() -> u64 {
    DEFAULT_ROLLUP_RETENTION_DAYS
}
fn default_maintenance_interval_ms() -> u64 {
    DEFAULT_MAINTENANCE_INTERVAL_MS
}
fn default_integrity_check_secs() -> u64 {
    DEFAULT_INTEGRITY_CHECK_SECS
}
fn default_rollup_flush_interval_ms() -> u64 {
    DEFAULT_ROLLUP_FLUSH_INTERVAL_MS
}
fn default_max_batch_reports() -> u64 {
    DEFAULT_MAX_BATCH_REPORTS
}
fn default_valkey_cluster_name() -> String {
    DEFAULT_VALKEY_CLUSTER_NAME.to_owned()
}
fn default_source_interval_ms() -> u64 {
    DEFAULT_SOURCE_INTERVAL_MS
}
fn default_source_connect_timeout_ms() -> u64 {
    DEFAULT_SOURCE_CONNECT_TIMEOUT_MS
}
fn default_source_command_timeout_ms() -> u64 {
    DEFAULT_SOURCE_COMMAND_TIMEOUT_MS
}

lb_common::impl_service_basics!(AgentConfig);

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn the_shipped_config_parses_and_validates() {
        let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../configs/agent.toml"));
        let config: AgentConfig = lb_common::config::load(path).expect("configs/agent.toml is valid");
        assert_eq!(config.worker_id.as_str(), "w-0003");
        assert!(config.ops_server.is_some());
    }

    #[test]
    fn bad_values_name_their_field() {
        let text = "worker_id = \"w\"\n[http]\nlisten = \"127.0.0.1:0\"\n[store]\npath = \"x\"\nraw_retention_hours = 0\n\
                    [window]\nmax_bytes = 10\n[ops_server]\nurl = \"ftp://x\"\n";
        let err = lb_common::config::parse::<AgentConfig>(text, Path::new("agent.toml")).unwrap_err().to_string();
        assert!(err.contains("store.raw_retention_hours = 0"), "{err}");
        assert!(err.contains("window.max_bytes = 10"), "{err}");
        assert!(err.contains("ops_server.url = ftp://x"), "{err}");
        let unknown = "worker_id = \"w\"\nworkerid = 1\n[http]\nlisten = \"127.0.0.1:0\"\n[store]\npath = \"x\"\n";
        let err = lb_common::config::parse::<AgentConfig>(unknown, Path::new("agent.toml")).unwrap_err().to_string();
        assert!(err.contains("unknown field `workerid`"), "{err}");
    }

    #[test]
    fn a_partial_table_takes_the_rest_from_its_defaults_and_required_fields_stay_required() {
        let base = "worker_id = \"w\"\n[http]\nlisten = \"127.0.0.1:0\"\n[store]\npath = \"x\"\n";
        let text = format!(
            "{base}[window]\nduration_ms = 5000\n[host]\nenabled = false\n[runtime]\nreload_debounce_ms = 100\n"
        );
        let config = lb_common::config::parse::<AgentConfig>(&text, Path::new("agent.toml")).expect("valid");
        assert_eq!(config.window, WindowConfig { duration_ms: 5000, max_bytes: DEFAULT_WINDOW_MAX_BYTES });
        assert_eq!(config.host, HostConfig { enabled: false, interval_ms: DEFAULT_HOST_INTERVAL_MS });
        assert_eq!(config.runtime, RuntimeConfig { reload_debounce_ms: 100, ..RuntimeConfig::default() });
        assert_eq!(config.store.raw_retention_hours, DEFAULT_RAW_RETENTION_HOURS);
        let typo = format!("{base}[window]\nduration = 5000\n");
        let err = lb_common::config::parse::<AgentConfig>(&typo, Path::new("agent.toml")).unwrap_err().to_string();
        assert!(err.contains("unknown field `duration`"), "{err}");
        let no_path = "worker_id = \"w\"\n[http]\nlisten = \"127.0.0.1:0\"\n[store]\nraw_retention_hours = 1\n";
        let err = lb_common::config::parse::<AgentConfig>(no_path, Path::new("agent.toml")).unwrap_err().to_string();
        assert!(err.contains("missing field `path`"), "{err}");
        let no_listen = "worker_id = \"w\"\n[http]\nbody_limit_bytes = 4096\n[store]\npath = \"x\"\n";
        let err = lb_common::config::parse::<AgentConfig>(no_listen, Path::new("agent.toml")).unwrap_err().to_string();
        assert!(err.contains("missing field `listen`"), "{err}");
    }

    #[test]
    fn the_shipped_valkey_config_parses_and_validates() {
        let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../configs/agent-valkey.toml"));
        let config: AgentConfig = lb_common::config::load(path).expect("configs/agent-valkey.toml is valid");
        let Some(SourceConfig::Valkey(source)) = &config.source else { panic!("a valkey source: {config:?}") };
        assert_eq!(source.host_port(), Some(("127.0.0.1".to_owned(), 7000)));
        assert_eq!(source.cluster_name, "valkey");
        assert!(!config.host.enabled);
    }

    #[test]
    fn bad_source_values_name_their_field_and_the_password_is_never_shown() {
        let base = "worker_id = \"w\"\n[http]\nlisten = \"127.0.0.1:0\"\n[store]\npath = \"x\"\n";
        let text = format!(
            "{base}[source]\nkind = \"valkey\"\naddress = \"node-a\"\npassword = \"hunter2-secret\"\n\
             interval_ms = 5\ncluster_name = \"a b\"\n"
        );
        let err = lb_common::config::parse::<AgentConfig>(&text, Path::new("agent.toml")).unwrap_err().to_string();
        assert!(err.contains("source.address = node-a"), "{err}");
        assert!(err.contains("source.interval_ms = 5"), "{err}");
        assert!(err.contains("source.cluster_name = a b"), "{err}");
        assert!(err.contains("source.kind = valkey") && err.contains("host.enabled = false"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
        let unknown = format!("{base}[source]\nkind = \"valkey\"\naddress = \"127.0.0.1:1\"\nadress = 1\n");
        let err = lb_common::config::parse::<AgentConfig>(&unknown, Path::new("agent.toml")).unwrap_err().to_string();
        assert!(err.contains("adress"), "{err}");
        let kind = format!("{base}[source]\nkind = \"cassandra\"\naddress = \"127.0.0.1:1\"\n");
        let err = lb_common::config::parse::<AgentConfig>(&kind, Path::new("agent.toml")).unwrap_err().to_string();
        assert!(err.contains("cassandra"), "{err}");
        let ok = format!(
            "{base}[host]\nenabled = false\n[source]\nkind = \"valkey\"\naddress = \"[::1]:6379\"\n\
             username = \"lb\"\npassword = \"hunter2-secret\"\n"
        );
        let config = lb_common::config::parse::<AgentConfig>(&ok, Path::new("agent.toml")).expect("valid");
        assert!(!format!("{config:?}").contains("hunter2"), "Debug redacts the password");
        let Some(SourceConfig::Valkey(source)) = &config.source else { panic!("a valkey source") };
        assert_eq!(source.host_port(), Some(("::1".to_owned(), 6379)));
        assert_eq!(source.interval_ms, DEFAULT_SOURCE_INTERVAL_MS);
    }
}
