//! Agent registry and collection: agents register and heartbeat with the ops server
//! (`POST /v1/agents/register`, `POST /v1/agents/heartbeat`, `GET /v1/agents`); the master
//! collects from all agents in one call (`POST /v1/collect`), which the ops server fans out in
//! parallel with a per-agent deadline.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ids::{TenantId, WorkerId};
use crate::protocol::limits::TextLimits;
use crate::protocol::samples::{Cursor, HourlyRollup, Sample};

/// `POST /v1/agents/register` body. Registering again (after a restart) replaces the entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisterRequest {
    pub worker_id: WorkerId,
    /// Base URL the ops server reaches the agent at, e.g. `http://127.0.0.1:7101`.
    pub address: String,
    /// The agent's version, for the registry listing.
    pub version: String,
    /// The tenant the agent reports every partition under, when its source fixes one (a Valkey
    /// node's `cluster_name`): the ops server checks it against its own topology. Optional and
    /// additive, but the request refuses unknown fields: upgrade the ops server first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<TenantId>,
}

/// 256 bytes: any agent URL fits (`https://` + a DNS name of at most 253 + a port).
pub const MAX_ADDRESS_BYTES: usize = 256;
/// A version string (`0.1.0`, a git describe).
pub const MAX_VERSION_BYTES: usize = 64;

impl RegisterRequest {
    /// The address is an `http://` or `https://` URL of at most [`MAX_ADDRESS_BYTES`] with no
    /// whitespace or control characters (it is logged and dialled); the version is short and
    /// printable.
    pub fn validate(&self) -> Result<(), crate::validate::ValidationError> {
        self.validate_with(&TextLimits::default())
    }

    /// [`RegisterRequest::validate`] with a server's configured text limits.
    pub fn validate_with(&self, limits: &TextLimits) -> Result<(), crate::validate::ValidationError> {
        let mut v = crate::validate::Validator::new();
        let mut root = v.at("");
        check_address(&mut root, "address", &self.address, MAX_ADDRESS_BYTES);
        let max_version = limits.max_version_bytes;
        root.check(
            self.version.len() <= max_version && printable(&self.version),
            "version",
            self.version.escape_debug(),
            &format!("must be at most {max_version} printable bytes"),
        );
        drop(root);
        v.finish()
    }
}

/// No whitespace or control characters: the value is logged and dialled.
fn printable(s: &str) -> bool {
    s.chars().all(|c| !c.is_control() && !c.is_whitespace())
}

/// An agent's address: an `http://` or `https://` URL with a host, at most `max_bytes`.
fn check_address(v: &mut crate::validate::Scope<'_>, field: &str, a: &str, max_bytes: usize) {
    let url_ok = (a.starts_with("http://") || a.starts_with("https://"))
        && reqwest::Url::parse(a).is_ok_and(|u| u.host_str().is_some_and(|h| !h.is_empty()));
    v.check(
        a.len() <= max_bytes && printable(a) && url_ok,
        field,
        a.escape_debug(),
        &format!("must be an http:// or https:// URL with a host, at most {max_bytes} bytes"),
    );
}

impl HeartbeatRequest {
    /// The address, when sent, as a registration's; the error names the field.
    pub fn validate(&self) -> Result<(), crate::validate::ValidationError> {
        let mut v = crate::validate::Validator::new();
        if let Some(address) = &self.address {
            check_address(&mut v.at(""), "address", address, MAX_ADDRESS_BYTES);
        }
        v.finish()
    }
}

/// Reply to register and heartbeat: how often to heartbeat and after how long without one the
/// agent is marked down.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterResponse {
    pub heartbeat_interval_ms: u64,
    pub down_after_ms: u64,
    /// What does not fit between the agent's config and the storage's topology (a worker id
    /// that is no worker, a tenant the topology does not use), each naming both values. The
    /// registration stands; the agent logs them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// `POST /v1/agents/heartbeat` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatRequest {
    pub worker_id: WorkerId,
    /// Newest cursor the agent has stored, so the registry shows how far behind a puller is.
    pub latest_cursor: Cursor,
    /// The address the agent registered with: a heartbeat from another address than the
    /// registered one is refused (409 naming the registered address) instead of keeping that
    /// entry alive. Optional for older agents, whose heartbeats are taken as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentState {
    Up,
    /// No heartbeat for longer than the grace period.
    Down,
}

/// One entry of `GET /v1/agents`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentInfo {
    pub worker_id: WorkerId,
    pub address: String,
    pub version: String,
    pub state: AgentState,
    pub registered_at_ms: i64,
    pub last_heartbeat_ms: i64,
    pub latest_cursor: Cursor,
    /// The registration's warnings ([`RegisterResponse::warnings`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// Reply of `GET /v1/agents`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentsResponse {
    pub agents: Vec<AgentInfo>,
}

/// `POST /v1/collect` body: pull new samples from every registered agent.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CollectRequest {
    /// Where the caller left off, per worker; a worker not listed is read from the beginning.
    #[serde(default)]
    pub cursors: BTreeMap<WorkerId, Cursor>,
    /// Most samples per agent in this round.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_per_agent: Option<u32>,
    /// Per worker, a smaller page than `limit_per_agent` (a collector shrinks the page of an
    /// agent that missed its deadline, so a slow agent still delivers something every round);
    /// capped like `limit_per_agent`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub limits: BTreeMap<WorkerId, u32>,
    /// Deadline for each agent; the ops server caps it at its own configured maximum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_deadline_ms: Option<u64>,
}

/// Reply of `POST /v1/collect`: one entry per registered agent, whatever happened to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CollectResponse {
    pub agents: Vec<AgentCollect>,
}

/// `POST /v1/collect/rollups` body: every registered agent's hourly rollups whose hour starts in
/// `[from_ms, to_ms)` (the master's archive, for the offline analyzer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RollupsCollectRequest {
    pub from_ms: i64,
    pub to_ms: i64,
    /// Deadline for each agent; the ops server caps it at its own configured maximum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_deadline_ms: Option<u64>,
    /// Ask only these agents (the master's catch-up of workers whose archive is behind); empty:
    /// every registered agent. Additive, but the request refuses unknown fields: upgrade the
    /// ops server before the master.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workers: Vec<WorkerId>,
}

/// Reply of `POST /v1/collect/rollups`: one entry per registered agent, whatever happened to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RollupsCollectResponse {
    pub agents: Vec<AgentRollups>,
}

/// One agent's rollups, or why there are none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentRollups {
    pub worker_id: WorkerId,
    pub status: CollectStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default)]
    pub rollups: Vec<HourlyRollup>,
    pub elapsed_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum CollectStatus {
    Ok,
    /// The agent did not answer within its deadline.
    Timeout,
    /// The agent answered with an error or could not be reached.
    Error,
    /// The registry marks the agent down; it was not asked.
    Down,
}

impl CollectStatus {
    /// Bounded metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            CollectStatus::Ok => "ok",
            CollectStatus::Timeout => "timeout",
            CollectStatus::Error => "error",
            CollectStatus::Down => "down",
        }
    }
}

/// What one agent returned in a collection round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentCollect {
    pub worker_id: WorkerId,
    pub status: CollectStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default)]
    pub samples: Vec<Sample>,
    /// The cursor to send next time; the request's cursor when nothing was read.
    pub next_cursor: Cursor,
    #[serde(default)]
    pub gap: bool,
    #[serde(default)]
    pub more: bool,
    pub elapsed_ms: u64,
    /// The agent's registration warnings ([`RegisterResponse::warnings`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 17: a newline or ANSI escape in an address was logged raw (a forged log line), and
    /// 1 MiB versions were kept.
    #[test]
    fn addresses_are_urls_and_free_text_is_bounded() {
        let ok = RegisterRequest {
            worker_id: "w-1".parse().expect("id"),
            address: "http://127.0.0.1:7101".to_owned(),
            version: "0.1.0".to_owned(),
            tenant: None,
        };
        assert!(ok.validate().is_ok());
        for address in [
            "http://a\n2026-12-01T00:00:00Z  INFO forged line",
            "http://a\u{1b}[31m",
            "ftp://host",
            "http://",
            "127.0.0.1:7101",
            &format!("http://{}", "a".repeat(300)),
        ] {
            let bad = RegisterRequest { address: address.to_owned(), ..ok.clone() };
            let err = bad.validate().expect_err(address).to_string();
            assert!(err.starts_with("address = ") && !err.contains('\n') && !err.contains('\u{1b}'), "{err}");
        }
        let huge = RegisterRequest { version: "v".repeat(1 << 20), ..ok.clone() };
        let err = huge.validate().expect_err("1 MiB version").to_string();
        assert!(err.len() < 400, "the error does not echo the megabyte: {} bytes", err.len());
    }
}
