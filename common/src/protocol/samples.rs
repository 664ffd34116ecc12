//! Samples and rollups: what an agent serves to its puller (`GET /v1/samples`, `GET /v1/rollups`).
//!
//! Cursors are opaque, strictly increasing per agent and survive agent restarts, so a puller
//! that always passes back `next_cursor` neither misses nor double-counts a sample. When the
//! data after a cursor has expired the agent answers from its oldest data with `gap: true`.
//!
//! Requests reject unknown fields (a typo is an error); replies accept them, so a newer agent
//! can add a field without breaking an older puller.

use serde::{Deserialize, Serialize};

use crate::ids::{KeyRange, PartitionId, TableId, TenantId, WorkerId};
use crate::protocol::report::{HostStats, PartitionStats};

/// Position in an agent's sample log. `Cursor(0)` means "from the beginning".
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(transparent)]
pub struct Cursor(pub u64);

/// Query of `GET /v1/samples`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SamplesQuery {
    /// Return samples with a cursor strictly greater than this one.
    #[serde(default)]
    pub after: Cursor,
    /// Most samples to return; the agent caps it at its own maximum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// Reply of `GET /v1/samples`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SamplesResponse {
    pub worker_id: WorkerId,
    pub samples: Vec<Sample>,
    /// Pass this as `after` next time. Equal to `after` when there was nothing new.
    pub next_cursor: Cursor,
    /// True when samples between `after` and the first returned one have expired.
    pub gap: bool,
    /// True when more samples are ready right now (the reply was cut at `limit`).
    pub more: bool,
}

/// One stored observation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub cursor: Cursor,
    pub timestamp_ms: i64,
    pub interval_ms: u64,
    pub data: SampleData,
    /// A host reading the agent took itself (its `/proc` sampler), not one its worker reported:
    /// it says the host is up, not that the worker reported that second, so the master does not
    /// count it as a reported second (a pushing worker that stopped reads as missing data, not
    /// as idle). Absent: false, as every sample of older agents.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub agent_sampled: bool,
}

/// What a sample describes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "stats", rename_all = "snake_case")]
pub enum SampleData {
    Partition(PartitionStats),
    Host(HostStats),
}

/// Query of `GET /v1/rollups`: hours whose start lies in `[from_ms, to_ms)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RollupsQuery {
    pub from_ms: i64,
    pub to_ms: i64,
}

/// Reply of `GET /v1/rollups`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RollupsResponse {
    pub worker_id: WorkerId,
    pub rollups: Vec<HourlyRollup>,
}

/// One partition's hour, for offline analysis over weeks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HourlyRollup {
    pub hour_start_ms: i64,
    pub tenant: TenantId,
    pub table: TableId,
    pub partition_id: PartitionId,
    pub key_range: KeyRange,
    /// Samples that went into the hour; fewer than expected means missing data.
    pub sample_count: u32,
    pub read_ops: u64,
    pub write_ops: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub errors: u64,
    pub rejected: u64,
    pub cpu_time_us: u64,
    /// Highest per-interval ops rate seen in the hour (peaks drive merge and pre-split).
    pub max_ops_per_sec: f64,
    pub max_latency_p99_us: f64,
    /// Stored bytes at the end of the hour.
    pub stored_bytes: u64,
}
