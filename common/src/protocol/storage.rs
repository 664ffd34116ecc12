//! Storage admin protocol: what the ops server asks of the storage system. The testbed serves
//! it; a real system implements or adapts it.
//!
//! - `GET /v1/topology` → [`Topology`]
//! - `POST /v1/admin/{split,move,merge,group,reshard}` with an [`AdminRequest`] → [`OperationAccepted`]
//! - `GET /v1/admin/operations/{id}` → [`Operation`]
//!
//! Admin requests carry the action id, so a retried request returns the same operation instead
//! of running the change twice.

use serde::{Deserialize, Serialize};

use crate::ids::{ActionId, DatasetId, GroupId, KeyRange, OperationId, PartitionId, TableId, TenantId, WorkerId};
use crate::protocol::actions::{ActionKind, ActionSpec, LoadBalancing};

/// The storage system's layout as it is now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Topology {
    /// Increases on every change; lets a reader tell a stale copy.
    pub version: u64,
    pub workers: Vec<WorkerInfo>,
    pub partitions: Vec<PartitionInfo>,
    #[serde(default)]
    pub datasets: Vec<DatasetInfo>,
    /// What a `group` of one partition does when it names a group no worker is in yet: `true`,
    /// the storage system dedicates the partition's current worker to it (every other partition
    /// of that worker moves to the other healthy ungrouped workers, and the worker and the
    /// partition then show the group), as the Valkey adapter does; `false` (the default), it is
    /// refused and a group must name workers the topology already shows in it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub new_group_dedicates_owner: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerInfo {
    pub id: WorkerId,
    pub capacity: Capacity,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<GroupId>,
    pub health: Health,
}

/// What a worker (or a single partition) can serve before it rejects requests.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Capacity {
    pub ops_per_sec: f64,
    pub bytes_per_sec: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Health {
    Healthy,
    /// Serving, but should not receive new partitions.
    Degraded,
    Down,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartitionInfo {
    pub id: PartitionId,
    pub tenant: TenantId,
    pub table: TableId,
    pub range: KeyRange,
    pub owner: WorkerId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<GroupId>,
    pub stored_bytes: u64,
    /// The single-partition limit, when the storage system has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<Capacity>,
    /// Which actions the storage system supports on this partition (Valkey slots cannot split).
    pub supported_actions: Vec<ActionKind>,
}

/// A hash-sharded dataset and where its shards live.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DatasetInfo {
    pub tenant: TenantId,
    pub dataset: DatasetId,
    pub tenant_shards: u32,
    pub dataset_shards: u32,
    pub load_balancing: LoadBalancing,
    /// Shard ids start at 1; `shards[i]` is the owner of shard `i + 1`.
    pub shard_owners: Vec<WorkerId>,
}

/// `POST /v1/admin/{kind}` body: the action's spec and its id for idempotency.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminRequest {
    pub action_id: ActionId,
    pub spec: ActionSpec,
}

/// Reply of `POST /v1/admin/{kind}` (202).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperationAccepted {
    pub operation_id: OperationId,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OperationState {
    Pending,
    Running,
    Succeeded,
    Failed,
}

/// Reply of `GET /v1/admin/operations/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Operation {
    pub id: OperationId,
    pub action_id: ActionId,
    pub kind: ActionKind,
    pub state: OperationState,
    pub started_at_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at_ms: Option<i64>,
    /// 0..=1, for long moves.
    pub progress_ratio: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}
