//! How each metric the API answers for maps onto the table's stored columns.

pub use lb_common::protocol::Metric;

/// Where a [`Metric`] lives in the table's series.
pub(crate) trait MetricColumns: Copy {
    /// Where the metric lives in a partition series, if it has history there.
    fn partition_view(self) -> Option<View>;
    /// Where the metric lives in a worker series, if it has history there.
    fn worker_view(self) -> Option<View>;
}

impl MetricColumns for Metric {
    fn partition_view(self) -> Option<View> {
        Some(match self {
            Metric::ReadOps => View::Diff(COL_OPS, COL_WRITE_OPS),
            Metric::StoredBytes | Metric::HostCpu | Metric::NetBytes => return None,
            m => View::Col(base_column(m)?),
        })
    }

    fn worker_view(self) -> Option<View> {
        Some(match self {
            Metric::ReadOps => View::Diff(COL_OPS, COL_WRITE_OPS),
            Metric::HostCpu => View::Col(COL_HOST_CPU),
            Metric::NetBytes => View::Col(COL_NET_BYTES),
            Metric::StoredBytes => return None,
            m => View::Col(base_column(m)?),
        })
    }
}

fn base_column(m: Metric) -> Option<usize> {
    Some(match m {
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
