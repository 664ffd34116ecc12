//! MetricsTable: the master's in-memory time series of every partition and worker.
//!
//! # Problem
//!
//! The online analyzer (1 s tick), the action evaluation and the console need, for up to a few
//! hundred thousand partitions, recent per-second load and a few hours of history: windows
//! (rate, max, mean, percentiles), top-N by any metric grouped by worker, table or tenant, a
//! time × key-range heatmap of a table, and the history of a partition across splits and
//! merges. Samples come per worker from `POST /v1/collect` and may be re-delivered. Memory must
//! be bounded and small: the target is ≤ 4 KiB of history per partition.
//!
//! # Resolutions (defaults, [`TableConfig`])
//!
//! - **fine**: 1 s × 80 points (the last 80 s), `u16` log-quantised;
//! - **coarse**: 1 min × 360 points (the last 6 h), `u8` log-quantised, plus the number of
//!   seconds of the minute that had data (`u8` coverage).
//!
//! The example, 1 s for 10 min and 10 s for 6 h, needs `7 × (600 × 2 + 2160 × 1)` ≈
//! 23.5 KiB per partition even at these code widths, so it does not fit 4 KiB; 80 s + 6 h at
//! 1 min does. What this costs: windows longer than the fine ring (≈ 20–80 s back, depending on
//! where the current minute is) read 1-minute means with a few per cent error, and their
//! `max`/percentiles are over minute means. Both resolutions are configurable; the measured
//! bytes follow the config (`memory_usage()`).
//!
//! # Metrics and encoding
//!
//! Seven columns per partition, stored as per-second rates or gauges: ops (read + write),
//! write ops, bytes (read + write), CPU cores (`cpu_time_us / 1e6 / s`), rejected, errors
//! (rates: samples in a slot add; a coarse slot keeps the mean over its covered seconds) and
//! latency p99 µs (gauge: max within a slot and over a minute). Read ops is derived per point
//! (ops − write ops). Stored bytes changes slowly and is a move's cost, not a load: only its
//! latest value is kept (no history). Host CPU and network bytes exist for workers only.
//!
//! A value `v` is stored as `code = 1 + round(ln(1 + v / unit) × scale)` (`code 0` = no
//! sample), `scale = (2^bits − 2) / ln(1 + max / unit)`. Decoding is a table lookup. The error
//! is `|v' − v| ≤ (v + unit) × (e^(0.5 / scale) − 1)`, i.e. relative above `unit`:
//!
//! | column | unit | max | fine (u16) | coarse (u8) |
//! |---|---|---|---|---|
//! | ops, write ops, rejected, errors (/s) | 1 | 1e8 | ±0.014 % | ±3.7 % |
//! | bytes (/s) | 100 | 1e11 | ±0.016 % | ±4.2 % |
//! | CPU (cores) | 0.001 | 1000 | ±0.011 % | ±2.8 % |
//! | latency p99 (µs) | 1 | 1e8 (100 s) | ±0.014 % | ±3.7 % |
//!
//! Larger values saturate at `max`. `MetricsTable::error_bounds` returns these figures.
//! Worker series are few (≤ `max_workers`) and keep plain `f32` at the same resolutions,
//! ~9 columns × 440 points × 4 B + coverage ≈ 16 KiB per worker.
//!
//! # Memory
//!
//! Per partition: fine `7 × 80 × 2` = 1120 B, coarse `7 × 360 × 1` = 2520 B, coverage 360 B,
//! head, ring position and fine-part start 20 B: **4020 B of history**, fixed at creation and
//! independent of time (one flat array per column, no per-series allocation; arrays grow by
//! ≤ 1/8 at a time, so allocator slack stays under 12.5 %). Outside that budget: the entry (ids, key range, owner,
//! lineage, index) ≈ 250–300 B, and the latest key sketch, bounded by the protocol at 64
//! buckets and 16 top keys: at most 64 × 8 + 16 × 16 + 56 ≈ 824 B when the worker sends one.
//! `max_partitions` (default 500k ≈ 2.1 GiB) is the hard ceiling; beyond it new partitions are
//! refused and counted. `benches/table.rs` prints the measured figures.
//!
//! # Invariants
//!
//! - **Exactly once.** Each worker's highest ingested cursor is remembered; a sample at or below
//!   it is counted as a duplicate and changes nothing, so re-delivering any batch is a no-op.
//!   Every delivered sample lands in exactly one [`IngestStats`] bucket.
//! - **Each second counted once.** A coarse slot is rolled up from the fine ring exactly once,
//!   just before its first second leaves the ring; readers see coarse points up to that minute
//!   and fine points after it, never both.
//! - **Late data.** A sample may land in any second whose minute is not yet rolled up — at
//!   least `fine_points − 60` s (20 s) late; older samples are dropped and counted. A sample more
//!   than `max_future_skew` ahead of `now_ms` is refused (it would wipe the fine ring).
//! - A sample covering `interval_ms` > 1 s is spread evenly over its seconds (at most 20).
//! - Samples are attributed to the worker that served them: the worker series is the sum of
//!   the partition samples it delivered (so load follows a move the moment it happens).
//! - Pure: no clock, no I/O; `now_ms` is an argument. Every query result states its window.
//!
//! # Lineage
//!
//! `link_split` / `link_merge` record parents. [`MetricsTable::history`] returns a partition's
//! own points from its first sample on, and before that its parents' (a split child gets its
//! key-range share of the parent's rates, a merged child the sum of its parents; gauges take
//! the max), up to [`MAX_LINEAGE_DEPTH`]. Partitions missing from the topology are marked gone
//! and keep their history (the heatmap of a table shows the parent before a split and the
//! children after) until [`MetricsTable::evict_expired`] frees them 6 h after their last sample.
//!
//! # Heatmap
//!
//! Equal-width key buckets over the key span of the table's partitions (live and gone); a
//! partition's rate is spread over the buckets its range covers in proportion to the overlap
//! (so a row sums to the table's rate); gauges take the max over overlapping partitions. The
//! per-partition key sketch is not used for the spread (it is only kept as the latest sketch,
//! for the split analyzer).

mod codec;
mod ingest;
mod metric;
mod query;
mod ring;
mod store;
#[cfg(test)]
mod tests;
mod views;

use std::time::Duration;

use lb_common::ids::{PartitionId, TableId, TenantId, WorkerId};
use serde::{Deserialize, Serialize};

pub use metric::Metric;
pub use query::{
    ClusterOverview, Freshness, GroupBy, GroupKey, PartitionLoad, PartitionRates, PartitionRow, RateBasis, RateReader,
    TopEntry, TopN, WindowStats, WorkerLoad, WorkerRow,
};
pub use store::{ErrorBound, IngestStats, MemoryUsage, MetricsTable, PartitionSlot, SlotsEpoch};
pub use views::{Heatmap, History, HistoryPoint};

/// One second: the report interval of workers and agents, so one fine slot holds one report.
pub const DEFAULT_FINE_STEP: Duration = Duration::from_secs(1);
/// 80 s of 1 s points: covers the online analyzer's hysteresis windows (3 × 10 s) and 20 s of
/// late delivery, and is what fits the 4 KiB budget next to 6 h of coarse history.
pub const DEFAULT_FINE_POINTS: u32 = 80;
/// One minute: the console's 6 h charts and heatmaps show 360 columns, one per minute.
pub const DEFAULT_COARSE_STEP: Duration = Duration::from_secs(60);
/// 360 × 1 min = 6 h: "recent hours in memory"; older data is the agents' SQLite rollups.
pub const DEFAULT_COARSE_POINTS: u32 = 360;
/// Agents' clocks may run ahead a little; a sample further in the future than this would wipe
/// the fine ring of its series, so it is refused.
pub const DEFAULT_MAX_FUTURE_SKEW: Duration = Duration::from_secs(10);
/// 500k partitions × ~4 KiB ≈ 2 GiB: the hard ceiling of the table's memory.
pub const DEFAULT_MAX_PARTITIONS: usize = 500_000;
/// Far above any cluster lb balances; bounds worker series (~16 KiB each) to ~160 MiB.
pub const DEFAULT_MAX_WORKERS: usize = 10_000;
/// Splits and merges rarely chain more than a few times within 6 h; bounds history walks.
pub const MAX_LINEAGE_DEPTH: usize = 8;

/// Resolutions and limits of a [`MetricsTable`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableConfig {
    pub fine_step: Duration,
    pub fine_points: u32,
    /// Must be a multiple of `fine_step`, and shorter than `fine_points` fine steps.
    pub coarse_step: Duration,
    pub coarse_points: u32,
    pub max_future_skew: Duration,
    pub max_partitions: usize,
    pub max_workers: usize,
}

impl Default for TableConfig {
    fn default() -> Self {
        Self {
            fine_step: DEFAULT_FINE_STEP,
            fine_points: DEFAULT_FINE_POINTS,
            coarse_step: DEFAULT_COARSE_STEP,
            coarse_points: DEFAULT_COARSE_POINTS,
            max_future_skew: DEFAULT_MAX_FUTURE_SKEW,
            max_partitions: DEFAULT_MAX_PARTITIONS,
            max_workers: DEFAULT_MAX_WORKERS,
        }
    }
}

/// Why the table refused a request.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TableError {
    #[error("invalid table config: {0}")]
    InvalidConfig(String),
    #[error("metric {metric} has no {scope} history")]
    MetricNotAvailable { metric: Metric, scope: &'static str },
    #[error("unknown partition {0}")]
    UnknownPartition(PartitionId),
    #[error("unknown worker {0}")]
    UnknownWorker(WorkerId),
    #[error("unknown table {tenant}/{table}")]
    UnknownTable { tenant: TenantId, table: TableId },
    #[error("linking {child} to {parent} would make a lineage cycle")]
    LineageCycle { parent: PartitionId, child: PartitionId },
    #[error("invalid query: {0}")]
    InvalidQuery(String),
}
