//! Agent registry and collection: agents register and heartbeat with the ops server
//! (`POST /v1/agents/register`, `POST /v1/agents/heartbeat`, `GET /v1/agents`); the master
//! collects from all agents in one call (`POST /v1/collect`), which the ops server fans out in
//! parallel with a per-agent deadline.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ids::WorkerId;
use crate::protocol::samples::{Cursor, Sample};

/// `POST /v1/agents/register` body. Registering again (after a restart) replaces the entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisterRequest {
    pub worker_id: WorkerId,
    /// Base URL the ops server reaches the agent at, e.g. `http://127.0.0.1:7101`.
    pub address: String,
    /// The agent's version, for the registry listing.
    pub version: String,
}

/// Reply to register and heartbeat: how often to heartbeat and after how long without one the
/// agent is marked down.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterResponse {
    pub heartbeat_interval_ms: u64,
    pub down_after_ms: u64,
}

/// `POST /v1/agents/heartbeat` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatRequest {
    pub worker_id: WorkerId,
    /// Newest cursor the agent has stored, so the registry shows how far behind a puller is.
    pub latest_cursor: Cursor,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
}
