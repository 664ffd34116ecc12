//! The master's API under `/api/v1`: the query of every route and the body of every reply.
//!
//! Every reply that aggregates over time states its averaging window (`window_secs`, or
//! `step_ms` for heatmaps and histories). Queries reject unknown fields (a typo is a 400, not a
//! silently ignored filter); every query field is optional unless its type says otherwise, and
//! the defaults are the master's (documented on each field).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::actions::{ActionRecord, ActionSpec};
use super::placement::PlacementRules;
use super::proposals::{Declined, PlanStats, PolicyMode, Proposal};
use super::registry::CollectStatus;
use super::samples::Cursor;
use super::storage::{Capacity, Health};
use crate::config::watch::ReloadStatus;
use crate::ids::{ActionId, KeyRange, PartitionId, TableId, TenantId, WorkerId};

/// A metric the table answers for (`?metric=ops`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Read + write operations per second.
    Ops,
    /// Read operations per second (derived: ops − write ops, per point).
    ReadOps,
    WriteOps,
    /// Read + write bytes per second.
    Bytes,
    /// CPU cores busy serving (CPU-seconds per second).
    Cpu,
    /// Requests refused per second (over the partition's limit).
    Rejected,
    Errors,
    /// Latency p99 in microseconds; a worker's is the max over its partitions.
    LatencyP99,
    /// Stored bytes: the latest value only, no history.
    StoredBytes,
    /// Host busy share of all cores, 0..=1 (worker series only, from host samples).
    HostCpu,
    /// Host network bytes per second, rx + tx (worker series only, from host samples).
    NetBytes,
}

impl Metric {
    pub const ALL: [Metric; 11] = [
        Metric::Ops,
        Metric::ReadOps,
        Metric::WriteOps,
        Metric::Bytes,
        Metric::Cpu,
        Metric::Rejected,
        Metric::Errors,
        Metric::LatencyP99,
        Metric::StoredBytes,
        Metric::HostCpu,
        Metric::NetBytes,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Metric::Ops => "ops",
            Metric::ReadOps => "read_ops",
            Metric::WriteOps => "write_ops",
            Metric::Bytes => "bytes",
            Metric::Cpu => "cpu",
            Metric::Rejected => "rejected",
            Metric::Errors => "errors",
            Metric::LatencyP99 => "latency_p99",
            Metric::StoredBytes => "stored_bytes",
            Metric::HostCpu => "host_cpu",
            Metric::NetBytes => "net_bytes",
        }
    }

    /// The unit of the metric's values, for display.
    pub fn unit(self) -> &'static str {
        match self {
            Metric::Ops | Metric::ReadOps | Metric::WriteOps | Metric::Rejected | Metric::Errors => "per_sec",
            Metric::Bytes | Metric::NetBytes => "bytes_per_sec",
            Metric::Cpu => "cores",
            Metric::LatencyP99 => "us",
            Metric::StoredBytes => "bytes",
            Metric::HostCpu => "ratio",
        }
    }

    /// Whether values are rates that add up across partitions and over time (sums, per-second
    /// rates over a window with missing seconds counted as zero). Gauges are averaged over the
    /// seconds that have a sample, and grouped by max.
    pub fn is_rate(self) -> bool {
        matches!(
            self,
            Metric::Ops
                | Metric::ReadOps
                | Metric::WriteOps
                | Metric::Bytes
                | Metric::Cpu
                | Metric::Rejected
                | Metric::Errors
        )
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not a [`Metric`] or a [`GroupBy`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {name:?} (known: {known})")]
pub struct UnknownName {
    pub what: &'static str,
    pub name: String,
    pub known: String,
}

impl FromStr for Metric {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, UnknownName> {
        Metric::ALL.into_iter().find(|m| m.as_str() == s).ok_or_else(|| UnknownName {
            what: "metric",
            name: s.to_owned(),
            known: Metric::ALL.map(Metric::as_str).join(", "),
        })
    }
}

/// How `/api/v1/top` groups partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum GroupBy {
    /// One entry per live partition.
    #[default]
    None,
    /// One entry per worker, from the worker series (load attributed to the worker that served it).
    Worker,
    /// Partitions summed (rates) or maxed (gauges) per table.
    Table,
    Tenant,
}

impl GroupBy {
    pub fn as_str(self) -> &'static str {
        match self {
            GroupBy::None => "none",
            GroupBy::Worker => "worker",
            GroupBy::Table => "table",
            GroupBy::Tenant => "tenant",
        }
    }
}

impl FromStr for GroupBy {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, UnknownName> {
        Ok(match s {
            "none" | "partition" => GroupBy::None,
            "worker" => GroupBy::Worker,
            "table" => GroupBy::Table,
            "tenant" => GroupBy::Tenant,
            other => {
                return Err(UnknownName {
                    what: "group_by",
                    name: other.to_owned(),
                    known: "none (or partition), worker, table, tenant".to_owned(),
                });
            }
        })
    }
}

/// `GET /api/v1/overview`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct OverviewQuery {
    /// Default `ops`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<Metric>,
    /// Default 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_secs: Option<u64>,
}

/// `GET /api/v1/workers`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct WindowQuery {
    /// Default 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_secs: Option<u64>,
}

/// `GET /api/v1/partitions`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct PartitionsQuery {
    /// Default 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_secs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<TenantId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<TableId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<WorkerId>,
    /// Only partitions at or above this many ops per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_ops_per_sec: Option<f64>,
    /// Include partitions that no longer exist (split, merged) but still have history.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_gone: Option<bool>,
}

/// `GET /api/v1/top`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct TopQuery {
    /// Default `ops`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<Metric>,
    /// Default 100, at most 1,000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<usize>,
    /// Default `none` (one entry per partition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_by: Option<GroupBy>,
    /// Default 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_secs: Option<u64>,
}

/// `GET /api/v1/heatmap`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct HeatmapQuery {
    pub tenant: TenantId,
    pub table: TableId,
    /// Default `ops`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<Metric>,
    /// Default: an hour before `to_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_ms: Option<i64>,
    /// Default: now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_ms: Option<i64>,
    /// Default: one minute per row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_ms: Option<i64>,
    /// Default: 64 key-range columns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buckets: Option<usize>,
}

/// `GET /api/v1/partitions/{id}/history`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct HistoryQuery {
    /// Default `ops`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<Metric>,
    /// Default: an hour before `to_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_ms: Option<i64>,
    /// Default: now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_ms: Option<i64>,
}

/// What a top-N entry is.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum GroupKey {
    Partition { partition: PartitionId },
    Worker { worker: WorkerId },
    Table { tenant: TenantId, table: TableId },
    Tenant { tenant: TenantId },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TopEntry {
    pub key: GroupKey,
    pub value: f64,
}

/// `GET /api/v1/top`: the highest `n`, highest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TopN {
    pub metric: Metric,
    pub group_by: GroupBy,
    pub window_secs: f64,
    /// Highest first.
    pub entries: Vec<TopEntry>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerLoad {
    pub worker: WorkerId,
    /// Over the part of the window collected from this worker (0 when nothing is).
    pub value: f64,
    /// `value` over the worker's capacity for ops and bytes, when the topology gives one.
    pub capacity_ratio: Option<f64>,
    /// The worker's newest sample is older than the window's end by more than the collector's
    /// `stale_after_ms` (its data is not collected yet, or it stopped reporting): its `value` is
    /// not its load, and it is left out of `max`, `mean`, `max_over_mean` and `cv`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stale: bool,
}

/// `GET /api/v1/overview`: per-worker load and its spread.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClusterOverview {
    pub metric: Metric,
    pub window_secs: f64,
    pub workers: Vec<WorkerLoad>,
    pub max: f64,
    pub mean: f64,
    /// `max / mean`; 0 when the mean is 0.
    pub max_over_mean: f64,
    /// Coefficient of variation (population std-dev / mean); 0 when the mean is 0.
    pub cv: f64,
    /// Workers marked `stale` (not in the spread figures).
    #[serde(default)]
    pub stale_workers: usize,
}

/// `GET /api/v1/cluster/history`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct ClusterHistoryQuery {
    /// Default `ops`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<Metric>,
    /// Default: an hour before `to_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_ms: Option<i64>,
    /// Default: now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_ms: Option<i64>,
    /// Default 60,000 (a minute); every point averages its own step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_ms: Option<i64>,
}

/// Reply of `GET /api/v1/cluster/history`: the spread of worker load over time, one point per
/// step (each the [`ClusterOverview`] of that step's window), oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClusterHistory {
    pub metric: Metric,
    pub step_ms: i64,
    pub points: Vec<ClusterPoint>,
}

/// One step of a [`ClusterHistory`]: where the step ended and the workers' max, mean, max/mean
/// and CV over it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClusterPoint {
    pub ts_ms: i64,
    pub max: f64,
    pub mean: f64,
    pub max_over_mean: f64,
    pub cv: f64,
}

/// One row of `GET /api/v1/partitions`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PartitionRow {
    pub id: PartitionId,
    pub tenant: TenantId,
    pub table: TableId,
    pub key_range: KeyRange,
    pub owner: Option<WorkerId>,
    pub last_worker: Option<WorkerId>,
    pub gone: bool,
    pub parents: Vec<PartitionId>,
    pub stored_bytes: u64,
    pub limit: Option<Capacity>,
    pub window_secs: f64,
    pub ops_per_sec: f64,
    pub bytes_per_sec: f64,
    pub cpu_cores: f64,
    pub rejected_per_sec: f64,
    pub errors_per_sec: f64,
    pub latency_p99_us: Option<f64>,
    pub has_sketch: bool,
}

/// One row of `GET /api/v1/workers`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerRow {
    pub id: WorkerId,
    pub in_topology: bool,
    pub health: Option<Health>,
    /// Its availability zone, when the topology gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<crate::ids::ZoneId>,
    pub capacity: Option<Capacity>,
    pub window_secs: f64,
    pub ops_per_sec: f64,
    pub bytes_per_sec: f64,
    pub cpu_cores: f64,
    pub rejected_per_sec: f64,
    pub latency_p99_us: Option<f64>,
    pub host_cpu_ratio: Option<f64>,
    pub net_bytes_per_sec: Option<f64>,
    /// Seconds of the window in which this worker reported (any sample): less than
    /// `window_secs` means the window is incomplete for it (it is down, or its data has not
    /// been collected yet), and its rates count the missing seconds as zero.
    pub covered_secs: f64,
    /// Report time of the newest sample ingested from this worker.
    pub last_sample_ms: Option<i64>,
}

/// `GET /api/v1/heatmap`: a time × key-range grid of one table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Heatmap {
    pub tenant: TenantId,
    pub table: TableId,
    pub metric: Metric,
    /// The averaging window of each cell.
    pub step_ms: i64,
    /// Start of each row (a time cell `[t, t + step_ms)`).
    pub times_ms: Vec<i64>,
    /// Equal-width buckets over the key span of the table's partitions (live and gone).
    pub key_buckets: Vec<KeyRange>,
    /// Row-major: `values[row * key_buckets.len() + bucket]`. Rates: the rate that landed in the
    /// bucket (a partition's rate spread over the buckets its range covers, in proportion to
    /// the overlap — sums over buckets equal the table's rate). Gauges: max over the partitions
    /// overlapping the bucket. 0 where there is no data.
    pub values: Vec<f32>,
    /// Per bucket, the live partition holding the bucket's first key now (`None`: no live
    /// partition does), for a console's hover.
    #[serde(default)]
    pub bucket_partitions: Vec<Option<PartitionId>>,
}

/// One point of a history.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HistoryPoint {
    /// Start of the point's interval.
    pub ts_ms: i64,
    /// Length of the interval: the fine step, or the coarse step (shorter when cut by the query).
    pub step_ms: i64,
    pub value: f64,
}

/// `GET /api/v1/partitions/{id}/history`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct History {
    pub partition: PartitionId,
    pub metric: Metric,
    /// Oldest first. Points before the partition's first sample come from its ancestors.
    pub points: Vec<HistoryPoint>,
}

/// `GET /api/v1/table/memory`: memory held by the table, measured from capacities and sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MemoryUsage {
    pub partitions: usize,
    pub workers: usize,
    /// History rings of one partition (fixed by the config): the figure the 4 KiB budget is about.
    pub history_bytes_per_partition: usize,
    /// Entry of one partition outside its rings (ids, range, lineage), averaged.
    pub entry_bytes_per_partition: usize,
    /// Latest key sketches of all partitions (outside the history budget, ≤ ~1.6 KiB each).
    pub sketch_bytes: usize,
    pub total_bytes: usize,
}

/// `GET /api/v1/collector`: how collection from the agents is going.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CollectorStatus {
    pub last_success_ms: Option<i64>,
    pub last_attempt_ms: Option<i64>,
    pub consecutive_failures: u32,
    /// No successful round within `collector.stale_after_ms`: the table is behind.
    pub stale: bool,
    pub last_error: Option<String>,
    pub samples_total: u64,
    /// The largest [`AgentCollectStatus::lag_ms`] over agents that are not down, as of the
    /// last round; `None` before any sample arrived.
    pub max_lag_ms: Option<i64>,
    /// Per agent: the last round's status, and how many gaps (expired data) it reported.
    pub agents: BTreeMap<WorkerId, AgentCollectStatus>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentCollectStatus {
    pub status: Option<CollectStatus>,
    pub cursor: Cursor,
    pub gaps: u64,
    pub last_error: Option<String>,
    /// Report time of the newest sample delivered from this agent.
    #[serde(default)]
    pub newest_sample_ms: Option<i64>,
    /// The last round's time less `newest_sample_ms`: how far behind this agent's data is.
    #[serde(default)]
    pub lag_ms: Option<i64>,
    /// The page this agent is asked for now (smaller than `limit_per_agent` after a missed
    /// deadline).
    #[serde(default)]
    pub page_limit: u32,
    /// How long the agent took to serve its last page.
    #[serde(default)]
    pub last_elapsed_ms: u64,
    /// What in the agent's config does not fit the storage's topology, as the ops server found
    /// when it registered (a worker id that is no worker, a tenant the topology does not use),
    /// each naming both values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// A dry-run proposal waiting for approval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Pending {
    /// The action id it gets if approved.
    pub id: ActionId,
    pub proposal: Proposal,
    pub first_proposed_at_ms: i64,
    pub last_proposed_at_ms: i64,
}

/// `GET /api/v1/proposals/pending`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PendingResponse {
    pub proposals: Vec<Pending>,
}

/// `POST /api/v1/actions`: an action by hand (needs an `operator` token), submitted through the
/// master so it is tracked and evaluated like the analyzers' own. The master checks it against
/// its current view (the partition exists, a split key lies strictly inside its range, a move's
/// destination is another healthy worker, a merge's partitions are adjacent) and answers 422
/// naming the field when it does not fit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ManualActionRequest {
    pub spec: ActionSpec,
    /// Why, for the audit trail and the console.
    pub reason: String,
    /// Only predict: nothing is submitted.
    #[serde(default)]
    pub dry_run: bool,
}

/// Reply of `POST /api/v1/actions`: the action as a proposal (origin `manual`, policy `manual`,
/// with the predicted before/after on the master's current view) and, unless a dry run, the
/// ops server's record of the submitted action.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ManualActionReply {
    pub proposal: Proposal,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<ActionRecord>,
}

/// `GET /api/v1/policy`: the live policy config and where it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PolicyStatus {
    /// The master's config file, its version and its last reload attempt.
    pub config: ReloadStatus,
    /// Each policy's mode now, by policy name (`partition_overload`, `worker_overload`,
    /// `imbalance`, `dataset_placement`).
    pub modes: BTreeMap<String, PolicyMode>,
    /// `planner.halt`: no proposals at all (the ops server's halt switch is separate).
    pub halted: bool,
    /// The `[planner]`, `[evaluation]` and `[placement]` sections as loaded (they hold no
    /// secrets), every default filled in.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub planner: serde_json::Value,
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub evaluation: serde_json::Value,
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub placement: serde_json::Value,
}

/// `GET /api/v1/leadership`: what a master knows about leadership right now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LeadershipStatus {
    /// This master may act.
    pub leader: bool,
    /// The backend deciding it (`single`, later `etcd`).
    pub backend: String,
    /// The current leadership term, when the backend has terms (fencing epoch).
    pub epoch: Option<u64>,
    /// Who leads, when it is not this master and the backend knows.
    pub leader_address: Option<String>,
}

/// `GET /api/v1/pass`: the outcome of the latest online pass, as published.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PassSnapshot {
    /// Passes published since the master started (0: none yet).
    pub pass: u64,
    /// When the pass ran, and where its load windows ended.
    pub at_ms: Option<i64>,
    pub window_end_ms: Option<i64>,
    /// Who may act; a standby publishes snapshots without proposals.
    pub leadership: Option<LeadershipStatus>,
    /// The online planner's counters: hot partitions, overloaded workers, pool max/mean and CV.
    pub stats: PlanStats,
    /// Every proposal of the pass, from every analyzer (submitted or offered).
    pub proposals: Vec<Proposal>,
    /// The first declined items with why (as in the analysis record).
    pub declined: Vec<Declined>,
    pub declined_total: usize,
    /// Dry-run proposals waiting for approval.
    pub pending: Vec<Pending>,
    /// The placement rules routers read.
    pub placement_rules: Option<PlacementRules>,
}

/// `GET /api/v1/stream`, event `hello`: the first event of every connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StreamHello {
    /// The latest pass published when the reader connected.
    pub pass: u64,
    /// The master's clock, so a console can show how far its own is off.
    pub server_ms: i64,
}

/// One event of `GET /api/v1/stream`, typed by its name.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    Hello(StreamHello),
    /// The pass snapshot, placement rules left out.
    Pass(Box<PassSnapshot>),
    /// A record just written (its body as the kind's JSON).
    Record(super::StoredRecord<serde_json::Value>),
    Lagged(StreamLagged),
}

impl StreamEvent {
    /// From an event's name and data; an unknown name is `Ok(None)` (skip it: newer masters may
    /// send more kinds).
    pub fn parse(event: &str, data: &str) -> serde_json::Result<Option<Self>> {
        Ok(Some(match event {
            "hello" => StreamEvent::Hello(serde_json::from_str(data)?),
            "pass" => StreamEvent::Pass(serde_json::from_str(data)?),
            "record" => StreamEvent::Record(serde_json::from_str(data)?),
            "lagged" => StreamEvent::Lagged(serde_json::from_str(data)?),
            _ => return Ok(None),
        }))
    }
}

/// `GET /api/v1/stream`, event `lagged`: this reader fell behind and `missed` records were not
/// sent to it; it should read them again (`GET /api/v1/records/{kind}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StreamLagged {
    pub missed: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_names_round_trip_through_str_and_serde() {
        for m in Metric::ALL {
            assert_eq!(m.as_str().parse::<Metric>().ok(), Some(m));
            assert_eq!(serde_json::to_string(&m).expect("unit variant"), format!("\"{}\"", m.as_str()));
        }
        let err = "opz".parse::<Metric>().expect_err("not a metric");
        assert!(err.to_string().contains("\"opz\"") && err.to_string().contains("latency_p99"), "{err}");
        for g in [GroupBy::None, GroupBy::Worker, GroupBy::Table, GroupBy::Tenant] {
            assert_eq!(g.as_str().parse::<GroupBy>().ok(), Some(g));
        }
    }

    #[test]
    fn a_query_serialises_only_what_is_set_and_rejects_unknown_fields() {
        let q = TopQuery { metric: Some(Metric::Cpu), n: Some(5), ..TopQuery::default() };
        assert_eq!(serde_json::to_value(&q).expect("query"), serde_json::json!({"metric": "cpu", "n": 5}));
        let typo = serde_json::from_value::<TopQuery>(serde_json::json!({"metrc": "cpu"}));
        assert!(typo.expect_err("unknown field").to_string().contains("metrc"));
    }
}
