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

/// 16 buckets: a split key within 1/16 of the range is as good as the analyzer needs, except
/// where load concentrates in a narrower band (refined, see [`REFINE_SHARE`]).
pub const DEFAULT_SKETCH_BUCKETS: usize = 16;
/// A bucket that holds more than half of a partition's load (and is not one hot key) is drawn
/// again as 16 buckets of its own, up to [`MAX_REFINE_LEVELS`] times: a hot range 1/2048 of its
/// partition wide then gets buckets 1/4096 wide, and a split cuts inside it in one step (issue
/// 25: at 100,000 partitions the mixed scenario's range sat in one 1/16 bucket, the first cut
/// left it whole in one piece, and that piece rejected for its 30 s cooldown).
const REFINE_SHARE: f64 = 0.5;
/// 16 + 3 × 15 = 61 buckets at most, under the protocol's 64.
const MAX_REFINE_LEVELS: usize = 3;
/// 8 cores per simulated worker host.
pub const DEFAULT_WORKER_CPU_CORES: u32 = 8;
/// 64 GiB of memory per simulated worker host.
pub const DEFAULT_WORKER_MEMORY_BYTES: u64 = 64 << 30;

/// Per partition: its key range's sketch buckets and the bucket masses of its static workload
/// components, valid while the range is unchanged (see [`Cluster::sketch_cached`]).
/// Boxed, so that moving a cache (the simulator reorders them after a split) moves a pointer;
/// what says whether the last sketch still holds is kept beside the box, so that a second in
/// which nothing changed does not touch it (one cache miss per partition was most of a tick).
#[derive(Debug, Clone, Default)]
pub struct SketchCache {
    /// The range, ops and table rates epoch of the sketch last written with this cache, when
    /// its table has no moving component: the same three give the same sketch.
    last: Option<((u64, u64), u64, u64)>,
    buckets: Option<Box<CachedBuckets>>,
}

#[derive(Debug, Clone, Default)]
struct CachedBuckets {
    range: (u64, u64),
    buckets: usize,
    bounds: [(u64, u64); DEFAULT_SKETCH_BUCKETS],
    masses: Vec<(u32, [f64; DEFAULT_SKETCH_BUCKETS])>,
}

/// One partition's counters since its last report (the numbers of its report entry).
#[derive(Debug, Clone, PartialEq)]
pub struct WindowCounters {
    pub read_ops: u64,
    pub write_ops: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub rejected: u64,
    pub latency_p50_us: f64,
    pub latency_p99_us: f64,
    pub cpu_time_us: u64,
}

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
        let c = self.window_counters(p);
        let t = self.partitions.table[p] as usize;
        let table = &self.tables[t];
        PartitionStats {
            tenant: table.tenant.clone(),
            table: table.table.clone(),
            partition_id: self.partitions.ids[p].clone(),
            key_range: self.partitions.range(p),
            read_ops: c.read_ops,
            write_ops: c.write_ops,
            read_bytes: c.read_bytes,
            write_bytes: c.write_bytes,
            errors: 0,
            rejected: c.rejected,
            latency_p50_us: c.latency_p50_us,
            latency_p99_us: c.latency_p99_us,
            cpu_time_us: c.cpu_time_us,
            stored_bytes: self.partitions.stored_bytes[p] as u64,
            sketch: Some(self.sketch(p, c.read_ops + c.write_ops, t_secs)),
        }
    }

    /// What partition `p`'s report entry would count now, without its ids or its sketch: the
    /// simulator reads this for every partition every second, where cloning three ids each
    /// would dominate. Does not reset the counters (see [`super::LoadState::reset_acc`]).
    pub fn window_counters(&self, p: usize) -> WindowCounters {
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
        WindowCounters {
            read_ops,
            write_ops,
            read_bytes,
            write_bytes,
            rejected: acc.rejected[p].round() as u64,
            latency_p50_us: p50,
            latency_p99_us: p99,
            cpu_time_us: cpu as u64,
        }
    }

    /// The key-access sketch of partition `p` for `ops` ops, from the demand at `t_secs`.
    pub fn sketch(&self, p: usize, ops: u64, t_secs: f64) -> KeySketch {
        let mut sketch = KeySketch {
            bucket_ops: Vec::new(),
            bucket_bounds: Vec::new(),
            top_keys: Vec::new(),
            sequential_write_ratio: 0.0,
        };
        self.sketch_into(p, ops, t_secs, &mut sketch);
        sketch
    }

    /// [`Cluster::sketch`] written into `out`, reusing its buffers.
    pub fn sketch_into(&self, p: usize, ops: u64, t_secs: f64, out: &mut KeySketch) {
        self.sketch_cached(p, ops, t_secs, &mut SketchCache::default(), out);
    }

    /// [`Cluster::sketch_into`] with the bucket masses of the partition's static components
    /// kept in `cache` while its key range does not change: a caller that sketches every
    /// partition every second (the simulator) then pays 16 multiply-adds per component instead
    /// of 16 mass evaluations. Same numbers, bit for bit. And where nothing the sketch depends
    /// on changed since `out` was last written with `cache` (same ops, same rates, same range,
    /// no moving component), `out` is left as it is: the caller must pass the same `out` with
    /// the same `cache` each time, as the simulator's input builder does.
    ///
    /// Only the components that can load the partition are visited (cached with the masses):
    /// a table with hundreds of hot ranges costs per partition what one with a single one does.
    pub fn sketch_cached(&self, p: usize, ops: u64, t_secs: f64, cache: &mut SketchCache, out: &mut KeySketch) {
        let t = self.partitions.table[p] as usize;
        let (start, end) = (self.partitions.start[p], self.partitions.end[p]);
        // Nothing it depends on changed since the sketch `out` holds was written with this
        // cache: the range, the ops, the rates of the table's components; with no moving
        // component, time enters only through those rates.
        let unmoving = self.load.moving_of(t).is_empty();
        let now = ((start, end), ops, self.load.rates_epoch.get(t).copied().unwrap_or(0));
        if unmoving && cache.last == Some(now) {
            return;
        }
        cache.last = unmoving.then_some(now);
        let cache = match &mut cache.buckets {
            Some(c) if c.range == (start, end) => c,
            slot => self.fill_cache(p, t, slot.get_or_insert_with(Box::default)),
        };
        let n = cache.buckets;
        let buckets = &cache.bounds[..n];
        let mut weights = [0.0f64; DEFAULT_SKETCH_BUCKETS];
        let mut top = [(0u64, 0.0f64); lb_common::protocol::MAX_SKETCH_TOP_KEYS];
        let mut tops = 0;
        let mut note_top = |c: u32, rate: f64| {
            if let Some(key) = self.components[c as usize].hot_point(t_secs).filter(|&k| start <= k && k <= end)
                && rate > 0.0
                && tops < top.len()
            {
                top[tops] = (key, rate);
                tops += 1;
            }
        };
        // Static components (cached masses) and moving ones (a point now), merged in component
        // order as the table lists them, so sums are those of a walk over every component.
        let mut moving = self.load.moving_of(t).iter().copied().peekable();
        let visit_moving = |c: u32, weights: &mut [f64; DEFAULT_SKETCH_BUCKETS]| {
            let rate = self.component_rate(c);
            if rate != 0.0
                && let Some(key) = self.components[c as usize].point_at(t_secs)
            {
                for (w, &(a, b)) in weights.iter_mut().zip(buckets) {
                    *w += rate * f64::from(u8::from(a <= key && key <= b));
                }
            }
            rate
        };
        for (c, masses) in &cache.masses {
            while let Some(m) = moving.next_if(|&m| m < *c) {
                let rate = visit_moving(m, &mut weights);
                note_top(m, rate);
            }
            let rate = self.component_rate(*c);
            if rate != 0.0 {
                for (w, mass) in weights.iter_mut().zip(&masses[..n]) {
                    *w += rate * mass;
                }
            }
            note_top(*c, rate);
        }
        for m in moving {
            let rate = visit_moving(m, &mut weights);
            note_top(m, rate);
        }
        let weights = &weights[..n];
        let total: f64 = weights.iter().sum();
        out.bucket_ops.clear();
        out.bucket_bounds.clear();
        if total > 0.0 && weights.iter().any(|&w| w > REFINE_SHARE * total) {
            let spans = buckets.iter().zip(weights).map(|(&(a, b), &w)| (a, b, w)).collect();
            let spans = self.refine(spans, total, &cache.masses, t, t_secs, &top[..tops]);
            out.bucket_ops.extend(spans.iter().map(|&(.., w)| (ops as f64 * w / total) as u64));
            if spans.len() > n {
                out.bucket_bounds.extend(spans[1..].iter().map(|&(a, ..)| Key(a)));
            }
        } else if total > 0.0 {
            // Non-negative: truncation is the floor (and `f64::floor` is a libm call here).
            out.bucket_ops.extend(weights.iter().map(|w| (ops as f64 * w / total) as u64));
        } else {
            let even = ops / n as u64;
            out.bucket_ops.extend(std::iter::repeat_n(even, n));
        }
        out.top_keys.clear();
        let mut share_sum = 0.0;
        if total > 0.0 {
            for &(key, rate) in &top[..tops] {
                let share = (rate / total).min(1.0 - share_sum);
                if share > 0.0 && out.top_keys.len() < lb_common::protocol::MAX_SKETCH_TOP_KEYS {
                    share_sum += share;
                    out.top_keys.push(TopKey { key: Key(key), share_ratio: share });
                }
            }
        }
        let acc = &self.load.acc;
        out.sequential_write_ratio =
            if acc.write_ops[p] > 0.0 { (acc.sequential_writes[p] / acc.write_ops[p]).clamp(0.0, 1.0) } else { 0.0 };
    }

    /// Component `c`'s rate now (reads and writes), 0 for one the load does not know.
    fn component_rate(&self, c: u32) -> f64 {
        self.load.coef.get(c as usize).map_or(0.0, |k| k[0] + k[1])
    }

    /// `spans` (inclusive key bounds and load) with the bucket holding more than
    /// [`REFINE_SHARE`] of `total` drawn again as up to 16 buckets, level after level, unless
    /// one hot point (`points`: key and rate) carries half of it (a split cannot divide a key).
    fn refine(
        &self,
        mut spans: Vec<(u64, u64, f64)>,
        total: f64,
        statics: &[(u32, [f64; DEFAULT_SKETCH_BUCKETS])],
        t: usize,
        t_secs: f64,
        points: &[(u64, f64)],
    ) -> Vec<(u64, u64, f64)> {
        for _ in 0..MAX_REFINE_LEVELS {
            let Some((j, &(a, b, w))) = spans.iter().enumerate().max_by(|x, y| x.1.2.total_cmp(&y.1.2)) else {
                break;
            };
            let at_points: f64 = points.iter().filter(|&&(k, _)| a <= k && k <= b).map(|&(_, r)| r).sum();
            if w <= REFINE_SHARE * total || b - a < DEFAULT_SKETCH_BUCKETS as u64 || at_points >= 0.5 * w {
                break;
            }
            let mut sub = [(0u64, 0u64); DEFAULT_SKETCH_BUCKETS];
            let m = bucket_bounds_into(a, b, &mut sub);
            let mut sub_w = [0.0f64; DEFAULT_SKETCH_BUCKETS];
            for &(c, _) in statics {
                let rate = self.component_rate(c);
                if rate != 0.0 {
                    let comp = &self.components[c as usize];
                    for (sw, &(x, y)) in sub_w.iter_mut().zip(&sub[..m]) {
                        *sw += rate * comp.mass(x, y);
                    }
                }
            }
            for &c in self.load.moving_of(t) {
                if let Some(key) = self.components[c as usize].point_at(t_secs).filter(|&k| a <= k && k <= b)
                    && let Some(i) = sub[..m].iter().position(|&(x, y)| x <= key && key <= y)
                {
                    sub_w[i] += self.component_rate(c);
                }
            }
            spans.splice(j..=j, sub[..m].iter().zip(&sub_w[..m]).map(|(&(x, y), &w)| (x, y, w)));
        }
        spans
    }

    /// The bucket bounds of partition `p` and the bucket masses of its static components (those
    /// with mass in it, from the load cache; every static one of the table while that is stale).
    fn fill_cache<'c>(&self, p: usize, t: usize, cache: &'c mut CachedBuckets) -> &'c mut CachedBuckets {
        let (start, end) = (self.partitions.start[p], self.partitions.end[p]);
        cache.range = (start, end);
        cache.buckets = bucket_bounds_into(start, end, &mut cache.bounds);
        cache.masses.clear();
        let mut add = |c: u32| {
            let comp = &self.components[c as usize];
            if !comp.is_static() {
                return;
            }
            let mut masses = [0.0; DEFAULT_SKETCH_BUCKETS];
            for (m, &(a, b)) in masses.iter_mut().zip(&cache.bounds[..cache.buckets]) {
                *m = comp.mass(a, b);
            }
            cache.masses.push((c, masses));
        };
        match self.load.static_components_of(p) {
            Some(fixed) => fixed.for_each(&mut add),
            None => self.tables[t].components.iter().for_each(|&c| add(c as u32)),
        }
        cache
    }

    /// Index of a worker by id, for callers holding ids.
    pub fn worker_index(&self, id: &WorkerId) -> Option<usize> {
        self.workers.find(id)
    }
}

/// `n` equal-width inclusive buckets of `[start, end]` (fewer if the range is narrower).
pub fn bucket_bounds(start: u64, end: u64, n: usize) -> Vec<(u64, u64)> {
    let mut out = vec![(0, 0); n.max(1)];
    let len = bucket_bounds_into(start, end, &mut out);
    out.truncate(len);
    out
}

/// The inclusive key bounds of `sketch`'s buckets over `[start, end]`: the bounds it draws, or
/// equal widths ([`bucket_bounds`]) without them.
pub fn sketch_bucket_bounds(start: u64, end: u64, sketch: &KeySketch) -> Vec<(u64, u64)> {
    let n = sketch.bucket_ops.len();
    if sketch.bucket_bounds.is_empty() || sketch.bucket_bounds.len() + 1 != n {
        return bucket_bounds(start, end, n);
    }
    let starts = std::iter::once(start).chain(sketch.bucket_bounds.iter().map(|k| k.0));
    let ends = sketch.bucket_bounds.iter().map(|k| k.0 - 1).chain(std::iter::once(end));
    starts.zip(ends).collect()
}

/// [`bucket_bounds`] with `out.len()` buckets, written into `out`; returns how many.
pub fn bucket_bounds_into(start: u64, end: u64, out: &mut [(u64, u64)]) -> usize {
    let width = u128::from(end - start) + 1;
    let n = (out.len() as u128).min(width).max(1);
    // One division; the first `rem` buckets are one key wider (u128 division per bucket showed
    // up as the sketch's main cost at 100k partitions).
    let (step, rem) = (width / n, width % n);
    let mut a = u128::from(start);
    for (i, bucket) in out.iter_mut().take(n as usize).enumerate() {
        let len = step + u128::from((i as u128) < rem);
        *bucket = (a as u64, (a + len - 1) as u64);
        a += len;
    }
    n as usize
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
