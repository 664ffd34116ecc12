//! The metrics the table answers for, and how each maps onto stored columns.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::TableError;

/// A metric that queries can ask for (`?metric=ops`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
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

    /// Where the metric lives in a partition series, if it has history there.
    pub(crate) fn partition_view(self) -> Option<View> {
        Some(match self {
            Metric::ReadOps => View::Diff(COL_OPS, COL_WRITE_OPS),
            Metric::StoredBytes | Metric::HostCpu | Metric::NetBytes => return None,
            m => View::Col(m.base_column()?),
        })
    }

    /// Where the metric lives in a worker series, if it has history there.
    pub(crate) fn worker_view(self) -> Option<View> {
        Some(match self {
            Metric::ReadOps => View::Diff(COL_OPS, COL_WRITE_OPS),
            Metric::HostCpu => View::Col(COL_HOST_CPU),
            Metric::NetBytes => View::Col(COL_NET_BYTES),
            Metric::StoredBytes => return None,
            m => View::Col(m.base_column()?),
        })
    }

    fn base_column(self) -> Option<usize> {
        Some(match self {
            Metric::Ops => COL_OPS,
            Metric::WriteOps => COL_WRITE_OPS,
            Metric::Bytes => COL_BYTES,
            Metric::Cpu => COL_CPU,
            Metric::Rejected => COL_REJECTED,
            Metric::Errors => COL_ERRORS,
            Metric::LatencyP99 => COL_LATENCY_P99,
            _ => return None,
        })
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Metric {
    type Err = TableError;
    fn from_str(s: &str) -> Result<Self, TableError> {
        Metric::ALL.into_iter().find(|m| m.as_str() == s).ok_or_else(|| TableError::UnknownMetric(s.to_owned()))
    }
}

/// How a column merges samples within a slot and rolls fine slots up into a coarse one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Agg {
    /// Per-second rate: samples in a slot add; a coarse slot is the mean with missing seconds as 0.
    Rate,
    /// Gauge: max within a slot and over a coarse slot (latency p99 — the worst minute matters).
    Max,
    /// Gauge: the last sample wins within a slot; a coarse slot is the mean of present seconds.
    Mean,
}

/// How a metric is read from a series: one column, or the difference of two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum View {
    Col(usize),
    Diff(usize, usize),
}

pub(crate) const COL_OPS: usize = 0;
pub(crate) const COL_WRITE_OPS: usize = 1;
pub(crate) const COL_BYTES: usize = 2;
pub(crate) const COL_CPU: usize = 3;
pub(crate) const COL_REJECTED: usize = 4;
pub(crate) const COL_ERRORS: usize = 5;
pub(crate) const COL_LATENCY_P99: usize = 6;
pub(crate) const COL_HOST_CPU: usize = 7;
pub(crate) const COL_NET_BYTES: usize = 8;

/// Columns of a partition series, in column order.
pub(crate) const PARTITION_AGGS: [Agg; 7] =
    [Agg::Rate, Agg::Rate, Agg::Rate, Agg::Rate, Agg::Rate, Agg::Rate, Agg::Max];
/// Columns of a worker series: the partition columns summed over the worker, plus host stats.
pub(crate) const WORKER_AGGS: [Agg; 9] =
    [Agg::Rate, Agg::Rate, Agg::Rate, Agg::Rate, Agg::Rate, Agg::Rate, Agg::Max, Agg::Mean, Agg::Mean];

/// `(unit, max)` of each partition column's log codec: the error is relative above `unit`,
/// values over `max` saturate. Chosen so that the hottest partition a storage system can have
/// fits and the coldest still reads as "about zero".
pub(crate) const PARTITION_RANGES: [(f64, f64); 7] = [
    (1.0, 1e8),    // ops/s
    (1.0, 1e8),    // write ops/s
    (100.0, 1e11), // bytes/s
    (1e-3, 1e3),   // CPU cores
    (1.0, 1e8),    // rejected/s
    (1.0, 1e8),    // errors/s
    (1.0, 1e8),    // latency p99 µs (100 s)
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_names_round_trip_through_str_and_serde() {
        for m in Metric::ALL {
            assert_eq!(m.as_str().parse::<Metric>().ok(), Some(m));
            let json = format!("\"{}\"", m.as_str());
            assert_eq!(serde_json_like(m), json);
        }
        assert!("opz".parse::<Metric>().is_err());
    }

    fn serde_json_like(m: Metric) -> String {
        serde_json::to_string(&m).expect("unit variant serialises")
    }
}
