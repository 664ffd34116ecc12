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
/// 10 s: a request head is a few hundred bytes that a live client sends in milliseconds; a
/// slow or silent connection (slowloris, or idle between keep-alive requests) is closed after
/// this, so it cannot hold a connection slot for long. Clients keep pooled connections idle for
/// less (`IDLE_POOL_TIMEOUT` in the HTTP client), so they never reuse one the server closes.
pub const DEFAULT_HEAD_TIMEOUT_MS: u64 = 10_000;
/// 1,024 connections: far above what a cluster's components open to one server (the master
/// keeps one per agent through the ops server's fan-out, a few per console), and well below
/// the default 1,024+ open-file limit headroom of a process that also holds SQLite files.
pub const DEFAULT_MAX_CONNECTIONS: u64 = 1_024;
/// 8 KiB: lb's longest URI (a heatmap query with every parameter) is under 300 bytes; nginx's
/// default is the same 8 KiB.
pub const DEFAULT_MAX_URI_BYTES: u64 = 8 * 1024;
/// 16 KiB of request headers (start line excluded): a bearer token and the usual headers take
/// under 1 KiB; a browser with cookies stays far below.
pub const DEFAULT_MAX_HEADER_BYTES: u64 = 16 * 1024;
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
    /// A connection must send a whole request head within this, also between keep-alive
    /// requests (an idle connection is closed after it).
    #[serde(default = "default_head_timeout_ms")]
    pub head_timeout_ms: u64,
    /// Connections served at once; more wait in the listen backlog until one closes.
    #[serde(default = "default_max_connections")]
    pub max_connections: u64,
    /// A longer request URI is 414 `uri_too_long`.
    #[serde(default = "default_max_uri_bytes")]
    pub max_uri_bytes: u64,
    /// Larger request headers (names and values together) are 431 `headers_too_large`.
    #[serde(default = "default_max_header_bytes")]
    pub max_header_bytes: u64,
}

impl HttpServerConfig {
    /// A server on `listen` with every limit at its default.
    pub fn on(listen: SocketAddr) -> Self {
        Self {
            listen,
            body_limit_bytes: DEFAULT_BODY_LIMIT_BYTES,
            request_timeout_ms: DEFAULT_REQUEST_TIMEOUT_MS,
            head_timeout_ms: DEFAULT_HEAD_TIMEOUT_MS,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_uri_bytes: DEFAULT_MAX_URI_BYTES,
            max_header_bytes: DEFAULT_MAX_HEADER_BYTES,
        }
    }

    pub fn validate_into(&self, s: &mut Scope<'_>) {
        s.range_u64("body_limit_bytes", self.body_limit_bytes, 1024, MAX_BODY_LIMIT_BYTES);
        s.range_u64("request_timeout_ms", self.request_timeout_ms, 100, 3_600_000);
        s.range_u64("head_timeout_ms", self.head_timeout_ms, 100, 600_000);
        s.range_u64("max_connections", self.max_connections, 1, 1_000_000);
        // The server's own parser refuses beyond 64 KiB with an empty reply; stay below it.
        s.range_u64("max_uri_bytes", self.max_uri_bytes, 256, 60 * 1024);
        s.range_u64("max_header_bytes", self.max_header_bytes, 1024, 256 * 1024);
    }

    pub fn head_timeout(&self) -> Duration {
        Duration::from_millis(self.head_timeout_ms)
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
fn default_head_timeout_ms() -> u64 {
    DEFAULT_HEAD_TIMEOUT_MS
}
fn default_max_connections() -> u64 {
    DEFAULT_MAX_CONNECTIONS
}
fn default_max_uri_bytes() -> u64 {
    DEFAULT_MAX_URI_BYTES
}
fn default_max_header_bytes() -> u64 {
    DEFAULT_MAX_HEADER_BYTES
}
