//! The report a worker pushes to its agent: counters accumulated since its last report, and a
//! key-access sketch computed only now.
//!
//! Sketch contract (the master's analyzers rely on it):
//! - `bucket_ops`: the interval's ops in [`DEFAULT_SKETCH_BUCKETS`] equal-width buckets of the
//!   partition's range, distributed like the demand at report time (closed form, exact for
//!   static workloads), summing to at most the partition's ops;
//! - `top_keys`: hot single keys in the range (a hot key, an append tail) with their share;
//! - `sequential_write_ratio`: the share of the interval's writes that went to an append tail.
//!
//! Each dataset shard the worker serves follows the partitions as one more entry
//! ([`Cluster::dataset_shard_stats`]): `table` = dataset, `partition_id` =
//! `<tenant>.<dataset>.s<shard id>`, no sketch.

use lb_common::ids::{Key, WorkerId};
use lb_common::protocol::{HostStats, KeySketch, PartitionStats, Report, TopKey};

use super::Cluster;
use super::load::{DEFAULT_BASE_LATENCY_US, DEFAULT_CPU_US_PER_BYTE, DEFAULT_CPU_US_PER_OP, DEFAULT_P99_OVER_P50};

/// 16 buckets: a split key within 1/16 of the range is as good as the analyzer needs.
pub const DEFAULT_SKETCH_BUCKETS: usize = 16;
/// 8 cores per simulated worker host.
pub const DEFAULT_WORKER_CPU_CORES: u32 = 8;
/// 64 GiB of memory per simulated worker host.
pub const DEFAULT_WORKER_MEMORY_BYTES: u64 = 64 << 30;

impl Cluster {
    /// Partition indices per worker, each list in key order (tables in order): one pass.
    pub fn partitions_by_owner(&self) -> Vec<Vec<u32>> {
        let mut by_owner = vec![Vec::new(); self.workers.len()];
        for table in &self.tables {
            for &p in &table.sorted {
                by_owner[self.partitions.owner[p as usize] as usize].push(p);
            }
        }
        by_owner
    }

    /// The report of worker `w` over `parts` (its partitions, from
    /// [`Cluster::partitions_by_owner`]) for the interval that ends now; resets their counters.
    pub fn report_for(
        &mut self,
        w: usize,
        parts: &[u32],
        seq: u64,
        timestamp_ms: i64,
        interval_ms: u64,
        t_secs: f64,
    ) -> Report {
        let mut partitions = Vec::with_capacity(parts.len());
        let mut stored_total = 0.0;
        for &p in parts {
            let p = p as usize;
            stored_total += self.partitions.stored_bytes[p];
            partitions.push(self.partition_stats(p, t_secs));
            self.load.reset_acc(p);
        }
        // Hash-sharded datasets ride along as pseudo-partitions (docs/protocol.md).
        partitions.extend(self.dataset_shard_stats(w, interval_ms, t_secs));
        let load = &self.load;
        let host = HostStats {
            cpu_ratio: load.worker_demand_ratio.get(w).copied().unwrap_or(0.0).clamp(0.0, 1.0),
            cpu_cores: DEFAULT_WORKER_CPU_CORES,
            memory_used_bytes: (stored_total as u64).min(DEFAULT_WORKER_MEMORY_BYTES),
            memory_total_bytes: DEFAULT_WORKER_MEMORY_BYTES,
            net_rx_bytes_per_sec: load.worker_bytes.get(w).copied().unwrap_or(0.0) / 2.0,
            net_tx_bytes_per_sec: load.worker_bytes.get(w).copied().unwrap_or(0.0) / 2.0,
            disk_read_bytes_per_sec: 0.0,
            disk_write_bytes_per_sec: 0.0,
        };
        Report { worker_id: self.workers.ids[w].clone(), seq, timestamp_ms, interval_ms, partitions, host: Some(host) }
    }

    /// Partition `p`'s counters since its last report, with a sketch.
    fn partition_stats(&self, p: usize, t_secs: f64) -> PartitionStats {
        let acc = &self.load.acc;
        let read_ops = acc.read_ops[p].round() as u64;
        let write_ops = acc.write_ops[p].round() as u64;
        let ops = read_ops + write_ops;
        let read_bytes = acc.read_bytes[p].round() as u64;
        let write_bytes = acc.write_bytes[p].round() as u64;
        let served = acc.read_ops[p] + acc.write_ops[p];
        let p50 = if served > 0.0 { acc.latency_weighted_us[p] / served } else { DEFAULT_BASE_LATENCY_US };
        let p99 = acc.latency_p99_max_us[p].max(p50 * DEFAULT_P99_OVER_P50);
        let cpu = ops as f64 * DEFAULT_CPU_US_PER_OP + (read_bytes + write_bytes) as f64 * DEFAULT_CPU_US_PER_BYTE;
        let t = self.partitions.table[p] as usize;
        let table = &self.tables[t];
        PartitionStats {
            tenant: table.tenant.clone(),
            table: table.table.clone(),
            partition_id: self.partitions.ids[p].clone(),
            key_range: self.partitions.range(p),
            read_ops,
            write_ops,
            read_bytes,
            write_bytes,
            errors: 0,
            rejected: acc.rejected[p].round() as u64,
            latency_p50_us: p50,
            latency_p99_us: p99,
            cpu_time_us: cpu as u64,
            stored_bytes: self.partitions.stored_bytes[p] as u64,
            sketch: Some(self.sketch(p, ops, t_secs)),
        }
    }

    /// The key-access sketch of partition `p` for `ops` ops, from the demand at `t_secs`.
    pub fn sketch(&self, p: usize, ops: u64, t_secs: f64) -> KeySketch {
        let t = self.partitions.table[p] as usize;
        let (start, end) = (self.partitions.start[p], self.partitions.end[p]);
        let buckets = bucket_bounds(start, end, DEFAULT_SKETCH_BUCKETS);
        let weights: Vec<f64> = buckets.iter().map(|&(a, b)| self.last_step_demand_in(t, a, b, t_secs)).collect();
        let total: f64 = weights.iter().sum();
        let bucket_ops = if total > 0.0 {
            weights.iter().map(|w| (ops as f64 * w / total).floor() as u64).collect()
        } else {
            let even = ops / buckets.len() as u64;
            vec![even; buckets.len()]
        };
        let table = &self.tables[t];
        let mut top_keys = Vec::new();
        let mut share_sum = 0.0;
        for &c in &table.components {
            let comp = &self.components[c];
            let Some(key) = comp.hot_point(t_secs) else { continue };
            if key < start || key > end || total <= 0.0 {
                continue;
            }
            let rate = self.load.coef.get(c).map_or(0.0, |k| k[0] + k[1]);
            let share = (rate / total).min(1.0 - share_sum);
            if share > 0.0 && top_keys.len() < lb_common::protocol::MAX_SKETCH_TOP_KEYS {
                share_sum += share;
                top_keys.push(TopKey { key: Key(key), share_ratio: share });
            }
        }
        let acc = &self.load.acc;
        let sequential_write_ratio =
            if acc.write_ops[p] > 0.0 { (acc.sequential_writes[p] / acc.write_ops[p]).clamp(0.0, 1.0) } else { 0.0 };
        KeySketch { bucket_ops, top_keys, sequential_write_ratio }
    }

    /// Index of a worker by id, for callers holding ids.
    pub fn worker_index(&self, id: &WorkerId) -> Option<usize> {
        self.workers.find(id)
    }
}

/// `n` equal-width inclusive buckets of `[start, end]` (fewer if the range is narrower).
pub fn bucket_bounds(start: u64, end: u64, n: usize) -> Vec<(u64, u64)> {
    let width = u128::from(end - start) + 1;
    let n = (n as u128).min(width).max(1);
    // One division; the first `rem` buckets are one key wider (u128 division per bucket showed
    // up as the sketch's main cost at 100k partitions).
    let (step, rem) = (width / n, width % n);
    let mut a = u128::from(start);
    (0..n)
        .map(|i| {
            let len = step + u128::from(i < rem);
            let bucket = (a as u64, (a + len - 1) as u64);
            a += len;
            bucket
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_tile_the_range() {
        let b = bucket_bounds(0, u64::MAX, 16);
        assert_eq!(b.len(), 16);
        assert_eq!(b[0].0, 0);
        assert_eq!(b[15].1, u64::MAX);
        assert!(b.windows(2).all(|w| w[0].1 + 1 == w[1].0));
        assert_eq!(bucket_bounds(5, 7, 16), vec![(5, 5), (6, 6), (7, 7)]);
    }
}
