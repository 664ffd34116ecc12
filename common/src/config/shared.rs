//! Config sections every binary shares: its HTTP server, its HTTP clients, logging, shutdown
//! and config reload. Each binary embeds the ones it needs as tables of its own file.

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::validate::Scope;

/// 8 MiB: a report of 10k partitions with full sketches fits, a runaway client does not.
pub const DEFAULT_BODY_LIMIT_BYTES: u64 = 8 * 1024 * 1024;
/// Ceiling for any body limit: beyond this a single request can pressure the process's memory.
pub const MAX_BODY_LIMIT_BYTES: u64 = 256 * 1024 * 1024;
/// 30 s: longer than any healthy request here, short enough that a stuck one frees its slot.
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 30_000;
/// 1 s: a loopback or LAN connect takes microseconds; a second means the peer is gone.
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 1_000;
/// 5 s: a collection round is 1 s, so one slow peer may cost a few rounds but never more.
pub const DEFAULT_CLIENT_DEADLINE_MS: u64 = 5_000;
/// 10 s: enough to drain in-flight requests and flush SQLite; orchestrators kill at 30 s.
pub const DEFAULT_SHUTDOWN_DEADLINE_MS: u64 = 10_000;
/// 250 ms: editors write in bursts (truncate, write, rename); one reload per save is the goal.
pub const DEFAULT_RELOAD_DEBOUNCE_MS: u64 = 250;
/// 60 s: the backstop re-read for lost inotify events; cheap, and a minute is an acceptable lag.
pub const DEFAULT_RELOAD_POLL_INTERVAL_MS: u64 = 60_000;
/// `info` for every crate: what a running service is read at; `RUST_LOG` overrides it.
pub const DEFAULT_LOG_FILTER: &str = "info";

/// `[http]`: the binary's own HTTP server. `listen` is static; the limits are dynamic in the
/// file but applied at start-up only (the router is built once), so they are static too.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpServerConfig {
    pub listen: SocketAddr,
    #[serde(default = "default_body_limit_bytes")]
    pub body_limit_bytes: u64,
    #[serde(default = "default_request_timeout_ms")]
    pub request_timeout_ms: u64,
}

impl HttpServerConfig {
    pub fn validate_into(&self, s: &mut Scope<'_>) {
        s.range_u64("body_limit_bytes", self.body_limit_bytes, 1024, MAX_BODY_LIMIT_BYTES);
        s.range_u64("request_timeout_ms", self.request_timeout_ms, 100, 3_600_000);
    }

    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }
}

/// `[client]`: timeouts of the binary's outgoing HTTP calls.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpClientConfig {
    pub connect_timeout_ms: u64,
    /// Whole-request deadline: connect, send, and read the full reply.
    pub deadline_ms: u64,
}

impl Default for HttpClientConfig {
    fn default() -> Self {
        Self { connect_timeout_ms: DEFAULT_CONNECT_TIMEOUT_MS, deadline_ms: DEFAULT_CLIENT_DEADLINE_MS }
    }
}

impl HttpClientConfig {
    pub fn validate_into(&self, s: &mut Scope<'_>) {
        s.range_u64("connect_timeout_ms", self.connect_timeout_ms, 1, 60_000);
        s.range_u64("deadline_ms", self.deadline_ms, 1, 3_600_000);
        s.check(
            self.connect_timeout_ms <= self.deadline_ms,
            "connect_timeout_ms",
            self.connect_timeout_ms,
            "must not exceed deadline_ms",
        );
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// `[log]`: static (the subscriber is installed once); `RUST_LOG` overrides `filter`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    pub format: LogFormat,
    pub filter: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self { format: LogFormat::Text, filter: DEFAULT_LOG_FILTER.to_owned() }
    }
}

/// `[runtime]`: shutdown deadline and config reload cadence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RuntimeConfig {
    pub shutdown_deadline_ms: u64,
    pub reload_debounce_ms: u64,
    pub reload_poll_interval_ms: u64,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            shutdown_deadline_ms: DEFAULT_SHUTDOWN_DEADLINE_MS,
            reload_debounce_ms: DEFAULT_RELOAD_DEBOUNCE_MS,
            reload_poll_interval_ms: DEFAULT_RELOAD_POLL_INTERVAL_MS,
        }
    }
}

impl RuntimeConfig {
    pub fn validate_into(&self, s: &mut Scope<'_>) {
        s.range_u64("shutdown_deadline_ms", self.shutdown_deadline_ms, 100, 600_000);
        s.range_u64("reload_debounce_ms", self.reload_debounce_ms, 10, 10_000);
        s.range_u64("reload_poll_interval_ms", self.reload_poll_interval_ms, 100, 3_600_000);
    }
}

// `[http]` requires `listen`, so its other fields keep a default each: a struct-level
// `#[serde(default)]` would make `listen` optional too.
fn default_body_limit_bytes() -> u64 {
    DEFAULT_BODY_LIMIT_BYTES
}
fn default_request_timeout_ms() -> u64 {
    DEFAULT_REQUEST_TIMEOUT_MS
}
