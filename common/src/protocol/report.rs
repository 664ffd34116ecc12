//! Report: what a storage worker pushes to its agent every interval (`POST /v1/report`).

use serde::{Deserialize, Serialize};

use crate::ids::{Key, KeyRange, PartitionId, TableId, TenantId, WorkerId};
use crate::validate::{Scope, ValidationError, Validator};

/// Most buckets a key-access sketch may carry; 64 resolves a split point to 1/64 of the range,
/// finer than any split needs, while keeping a 10k-partition report under a few MiB.
pub const MAX_SKETCH_BUCKETS: usize = 64;
/// Most top keys a sketch may carry: enough to see a handful of hot keys, bounded per partition.
pub const MAX_SKETCH_TOP_KEYS: usize = 16;
/// Longest report interval accepted: a worker that reports less often than this is broken.
pub const MAX_REPORT_INTERVAL_MS: u64 = 3_600_000;

/// `POST /v1/report` body. Idempotent by `(seq, timestamp_ms)`: a retry repeats both.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Report {
    pub worker_id: WorkerId,
    /// Increasing per worker; a retried report repeats its number *and* its timestamp.
    pub seq: u64,
    /// End of the interval the report covers.
    pub timestamp_ms: i64,
    /// Length of the interval; counters below are totals over it.
    pub interval_ms: u64,
    pub partitions: Vec<PartitionStats>,
    /// The worker's own view of its host; the agent samples `/proc` itself as well.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostStats>,
}

/// One partition's counters over the report interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartitionStats {
    pub tenant: TenantId,
    pub table: TableId,
    pub partition_id: PartitionId,
    pub key_range: KeyRange,
    pub read_ops: u64,
    pub write_ops: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub errors: u64,
    /// Requests refused because the partition was over its limit (queue full, throttled).
    pub rejected: u64,
    pub latency_p50_us: f64,
    pub latency_p99_us: f64,
    /// CPU time spent serving this partition during the interval.
    pub cpu_time_us: u64,
    pub stored_bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sketch: Option<KeySketch>,
}

impl PartitionStats {
    pub fn ops(&self) -> u64 {
        self.read_ops.saturating_add(self.write_ops)
    }
}

/// Where in its key range a partition's load falls.
///
/// The sketch lets the analyzer pick a split key that halves the load, and tell a splittable
/// hotspot from a single hot key or an append-only tail (which a split cannot fix).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeySketch {
    /// Ops per bucket of the partition's key range, lowest keys first: equal-width buckets, or
    /// those `bucket_bounds` draws.
    pub bucket_ops: Vec<u64>,
    /// Inner bucket boundaries; empty (the default) for equal widths. Otherwise one fewer than
    /// the buckets, strictly increasing, inside the key range: bucket `i` holds the keys from
    /// `bucket_bounds[i - 1]` (the range's start for the first) up to, not including,
    /// `bucket_bounds[i]` (through the range's end for the last). A producer refines where load
    /// concentrates, so a band narrower than an equal-width bucket gets buckets of its own and a
    /// split can cut inside it in one step.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bucket_bounds: Vec<Key>,
    /// The hottest keys with their share of the partition's ops.
    #[serde(default)]
    pub top_keys: Vec<TopKey>,
    /// Share of writes that landed at or after the previous highest key (append-only tail).
    #[serde(default)]
    pub sequential_write_ratio: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopKey {
    pub key: Key,
    pub share_ratio: f64,
}

/// Machine-level stats, from the worker or from the agent's own `/proc` sampler.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostStats {
    /// Busy share of all cores, 0..=1.
    pub cpu_ratio: f64,
    pub cpu_cores: u32,
    pub memory_used_bytes: u64,
    pub memory_total_bytes: u64,
    pub net_rx_bytes_per_sec: f64,
    pub net_tx_bytes_per_sec: f64,
    pub disk_read_bytes_per_sec: f64,
    pub disk_write_bytes_per_sec: f64,
}

/// `POST /v1/report` reply, sent only once the report is durable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReportAck {
    pub worker_id: WorkerId,
    pub seq: u64,
    /// True when this `(seq, timestamp_ms)` had already been accepted; nothing was counted twice.
    pub duplicate: bool,
}

impl Report {
    /// Checks what serde cannot: ranges, finiteness and consistency. The error names every bad
    /// field, e.g. `partitions[2].latency_p99_us`.
    pub fn validate(&self) -> Result<(), ValidationError> {
        let mut v = Validator::new();
        {
            let mut root = v.at("");
            root.range_u64("interval_ms", self.interval_ms, 1, MAX_REPORT_INTERVAL_MS);
            root.check(self.timestamp_ms > 0, "timestamp_ms", self.timestamp_ms, "must be > 0 (epoch millis)");
        }
        let mut seen = std::collections::HashSet::with_capacity(self.partitions.len());
        for (i, p) in self.partitions.iter().enumerate() {
            let mut s = v.at_index("partitions", i);
            p.validate_into(&mut s);
            // Listed twice, a partition's load would be counted twice downstream.
            s.check(seen.insert(&p.partition_id), "partition_id", &p.partition_id, "is listed twice in the report");
        }
        if let Some(host) = &self.host {
            host.validate_into(&mut v.at("host"));
        }
        v.finish()
    }
}

impl PartitionStats {
    fn validate_into(&self, s: &mut Scope<'_>) {
        s.check(self.key_range.is_valid(), "key_range", format!("{:?}", self.key_range), "start must be <= end");
        s.non_negative("latency_p50_us", self.latency_p50_us);
        s.non_negative("latency_p99_us", self.latency_p99_us);
        s.check(
            // NaN is reported by the checks above; only compare real numbers here.
            self.latency_p50_us <= self.latency_p99_us || self.latency_p50_us.is_nan() || self.latency_p99_us.is_nan(),
            "latency_p50_us",
            self.latency_p50_us,
            "must not exceed latency_p99_us",
        );
        if let Some(sketch) = &self.sketch {
            let mut sk = s.at("sketch");
            let n = sketch.bucket_ops.len();
            sk.check(
                (1..=MAX_SKETCH_BUCKETS).contains(&n),
                "bucket_ops",
                format!("{n} buckets"),
                "must have 1..=64 buckets",
            );
            if !sketch.bucket_bounds.is_empty() {
                let b = &sketch.bucket_bounds;
                let inside = b.windows(2).all(|w| w[0] < w[1])
                    && b.first().is_some_and(|k| self.key_range.start < *k)
                    && b.last().is_some_and(|k| *k <= self.key_range.end);
                sk.check(
                    b.len() + 1 == n && inside,
                    "bucket_bounds",
                    format!("{} bounds for {n} buckets", b.len()),
                    "must be one fewer than the buckets, strictly increasing, after key_range's start and not past its end",
                );
            }
            let bucket_sum: u64 = sketch.bucket_ops.iter().fold(0, |a, b| a.saturating_add(*b));
            sk.check(bucket_sum <= self.ops(), "bucket_ops", bucket_sum, "sum must not exceed read_ops + write_ops");
            sk.check(
                sketch.top_keys.len() <= MAX_SKETCH_TOP_KEYS,
                "top_keys",
                format!("{} keys", sketch.top_keys.len()),
                "must have at most 16 keys",
            );
            sk.ratio("sequential_write_ratio", sketch.sequential_write_ratio);
            let mut share_sum = 0.0;
            for (k, top) in sketch.top_keys.iter().enumerate() {
                let mut t = sk.at_index("top_keys", k);
                t.ratio("share_ratio", top.share_ratio);
                t.check(self.key_range.contains(top.key), "key", top.key, "must lie inside key_range");
                share_sum += top.share_ratio;
            }
            sk.check(share_sum <= 1.0 + 1e-9, "top_keys", share_sum, "shares must sum to at most 1");
        }
    }
}

impl KeySketch {
    /// Where each bucket starts and how wide it is, as key offsets from `range.start` (floats: a
    /// split key is interpolated inside its bucket).
    pub fn bucket_spans(&self, range: KeyRange) -> impl Iterator<Item = (f64, f64)> + '_ {
        let n = self.bucket_ops.len();
        let width = range.width();
        let equal = self.bucket_bounds.len() + 1 != n;
        let bucket = width / n.max(1) as f64;
        let edge = move |i: usize| -> f64 {
            match i {
                0 => 0.0,
                i if i >= n => width,
                i => self.bucket_bounds[i - 1].0.saturating_sub(range.start.0) as f64,
            }
        };
        (0..n).map(move |i| {
            if equal {
                (i as f64 * bucket, bucket)
            } else {
                let a = edge(i);
                (a, (edge(i + 1) - a).max(0.0))
            }
        })
    }
}

impl HostStats {
    fn validate_into(&self, s: &mut Scope<'_>) {
        s.ratio("cpu_ratio", self.cpu_ratio);
        s.check(self.cpu_cores > 0, "cpu_cores", self.cpu_cores, "must be > 0");
        s.check(
            self.memory_used_bytes <= self.memory_total_bytes,
            "memory_used_bytes",
            self.memory_used_bytes,
            "must not exceed memory_total_bytes",
        );
        s.non_negative("net_rx_bytes_per_sec", self.net_rx_bytes_per_sec);
        s.non_negative("net_tx_bytes_per_sec", self.net_tx_bytes_per_sec);
        s.non_negative("disk_read_bytes_per_sec", self.disk_read_bytes_per_sec);
        s.non_negative("disk_write_bytes_per_sec", self.disk_write_bytes_per_sec);
    }
}
