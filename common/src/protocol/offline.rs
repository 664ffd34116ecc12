//! The offline analyzer's findings: what one pass over the hourly-rollup archive read, the merges
//! and pre-splits it found, and its report of the look-back. `lb-offline` produces them, the
//! master serves the newest at `GET /api/v1/offline`.

use chrono::NaiveDate;
use serde::{Deserialize, Serialize};

use crate::ids::{Key, KeyRange, PartitionId, TableId, TenantId, WorkerId};

/// `GET /api/v1/offline`: the newest offline pass (`at_ms` 0 and empty lists before the first).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(default)]
pub struct OfflineFindings {
    /// When the pass ran (its `now`).
    pub at_ms: i64,
    pub coverage: OfflineCoverage,
    /// Neighbours to merge, coolest first.
    pub merges: Vec<OfflineMerge>,
    /// Pairs not merged, with why (the first 64).
    pub declined: Vec<OfflineDeclined>,
    pub declined_total: usize,
    /// Recurring peaks to split ahead of.
    pub peaks: Vec<OfflinePeak>,
    /// Each table's daily profile.
    pub tables: Vec<OfflineTableProfile>,
    pub report: OfflineReport,
}

/// `POST /api/v1/offline/pass`: a pass on demand was asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OfflinePassRequested {
    pub requested_at_ms: i64,
    /// The newest pass before it (0: none yet): `GET /api/v1/offline` shows a later `at_ms` once
    /// the asked-for pass is done.
    pub previous_at_ms: i64,
}

/// How much of the look-back a pass had.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(default)]
pub struct OfflineCoverage {
    pub from_ms: i64,
    pub to_ms: i64,
    /// Hours of the look-back with at least one archived row.
    pub hours_with_data: u32,
    pub hours_expected: u32,
    pub files_read: usize,
    /// Files that could not be read, with why.
    pub files_skipped: Vec<String>,
    /// Why the look-back is partial (empty: it is whole).
    pub partial: Vec<String>,
}

/// Two neighbours to merge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OfflineMerge {
    pub tenant: TenantId,
    pub table: TableId,
    pub left: PartitionId,
    pub right: PartitionId,
    /// The highest hourly sum of the two peaks over the look-back.
    pub combined_peak_ops_per_sec: f64,
    pub limit_ops_per_sec: f64,
    pub hours_judged: u32,
    pub periodic: bool,
    /// The cooler of the two owners when the analysis ran. The merge proposed lands where the
    /// pair ends cooler at its pass, or where the smaller side streams when that is a wash (its
    /// `to_worker`), where the storage system places merges (topology `merge_to_worker`); else
    /// on the left's owner.
    pub to_worker: WorkerId,
    pub reason: String,
}

/// A pair of neighbours not merged, with why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OfflineDeclined {
    /// `left+right`.
    pub pair: String,
    pub reason: String,
}

/// A recurring peak to split ahead of.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OfflinePeak {
    pub tenant: TenantId,
    pub table: TableId,
    pub partition: PartitionId,
    pub range: KeyRange,
    /// Start of the hour the peak is expected in.
    pub peak_at_ms: i64,
    /// When to act: `lead_time_secs` before the peak.
    pub act_at_ms: i64,
    pub predicted_peak_ops_per_sec: f64,
    pub limit_ops_per_sec: f64,
    /// Days on which the peak came at this hour (of the day for a daily peak, of the week for a
    /// weekly one).
    pub recurrences: u32,
    /// Pieces that hold it under the target ratio.
    pub pieces: u32,
    /// Whether it recurs every day or on one day of the week.
    #[serde(default)]
    pub pattern: PeakPattern,
}

/// How a peak recurs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum PeakPattern {
    /// At this hour on days of several weekdays.
    #[default]
    Daily,
    /// At this hour on the same weekday of several weeks, and not on other days.
    Weekly,
}

/// A table's daily profile over the look-back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OfflineTableProfile {
    pub tenant: TenantId,
    pub table: TableId,
    pub periodic: bool,
    pub peak_hour_of_day: u32,
    /// Mean ops/s of the peak hour of the day over the trough hour's.
    pub peak_over_trough: f64,
}

/// The report of a pass's look-back: chronic imbalance, flapping split keys, per-day worker load.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(default)]
pub struct OfflineReport {
    /// Tables unbalanced in most of their hours, worst first (at most 256; `tables_total` counts
    /// them all).
    pub tables: Vec<OfflineImbalance>,
    pub tables_total: usize,
    /// Tenants unbalanced in most of their hours (`table` is null), worst first.
    pub tenants: Vec<OfflineImbalance>,
    pub tenants_total: usize,
    /// Keys split and merged back repeatedly, most changes first.
    pub flapping: Vec<OfflineFlap>,
    pub flapping_total: usize,
    /// Per day and worker, oldest day first.
    pub worker_days: Vec<OfflineWorkerDay>,
}

/// A table or tenant whose load sat on one of its workers in most hours.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OfflineImbalance {
    pub tenant: TenantId,
    pub table: Option<TableId>,
    /// Hours it had load on two or more workers.
    pub hours_judged: u32,
    /// Of those, hours whose spread (its busiest worker's load over its mean per worker) was
    /// over `offline.report_imbalance_ratio`.
    pub hours_unbalanced: u32,
    pub mean_spread: f64,
    pub max_spread: f64,
}

/// A key of a table split and merged back repeatedly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OfflineFlap {
    pub tenant: TenantId,
    pub table: TableId,
    /// The boundary: the first key of the right-hand piece.
    pub key: Key,
    pub splits: u32,
    pub merges: u32,
    /// The hour of the last change.
    pub last_change_ms: i64,
}

/// One worker's day: its hourly load (mean ops/s of each hour) at p50, p90 and max.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OfflineWorkerDay {
    /// The UTC day, `YYYY-MM-DD`.
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = Date))]
    pub day: NaiveDate,
    pub worker: String,
    /// Hours of the day with rows.
    pub hours: u32,
    pub p50_ops_per_sec: f64,
    pub p90_ops_per_sec: f64,
    pub max_ops_per_sec: f64,
}
