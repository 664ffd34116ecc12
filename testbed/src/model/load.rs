//! One step of load: demand per partition → served and rejected, latency, CPU.
//!
//! Contract, per step of `dt` seconds at scenario time `t`:
//! 1. demand of partition `p` = Σ over its table's components of `rate(t) × surge × mass(p)`,
//!    plus every sequential-append tail that currently lies in `p`;
//! 2. a partition serves at most its single-partition limit (ops and bytes); the rest is rejected;
//! 3. a worker serves at most its capacity (reduced while a move drains it); above that every
//!    partition on it is scaled down alike and the rest is rejected;
//! 4. latency rises with the higher of the worker's and the partition's utilization;
//!    CPU time is linear in served ops and bytes.
//!
//! Performance: static masses are cached per partition (rebuilt only after a layout change), all
//! per-partition arrays are flat `Vec<f64>`, and a step allocates nothing.

use super::Cluster;

/// 200 µs: a small-record read from memory plus the network round trip inside a rack.
pub const DEFAULT_BASE_LATENCY_US: f64 = 200.0;
/// p99 is ~5× p50 in a healthy key-value store.
pub const DEFAULT_P99_OVER_P50: f64 = 5.0;
/// Utilization at which queueing latency is capped (1/(1-0.98) = 50× base): beyond it requests
/// are rejected, not queued.
pub const MAX_QUEUEING_UTILIZATION: f64 = 0.98;
/// 20 µs of CPU per op: ~50k ops/s per core, typical of an in-memory engine.
pub const DEFAULT_CPU_US_PER_OP: f64 = 20.0;
/// 1 µs of CPU per KiB moved (copying and checksumming).
pub const DEFAULT_CPU_US_PER_BYTE: f64 = 1.0 / 1024.0;

/// Per-partition and per-worker load, last step and accumulated since the last report.
#[derive(Debug, Clone, Default)]
pub struct LoadState {
    dirty: bool,
    /// Cached static masses: partition `p`'s entries are `entries[entry_start[p]..entry_start[p+1]]`.
    entry_start: Vec<u32>,
    entries: Vec<(u32, f64)>,
    /// Per table, its moving (non-static) components, ascending.
    moving: Vec<Vec<u32>>,
    /// Per component this step: read ops, write ops, read bytes, write bytes per second.
    pub(super) coef: Vec<[f64; 4]>,
    /// Per table, bumped at every step that changed one of its components' `coef`: a sketch
    /// computed at the same epoch (and for the same ops and range) is the same.
    pub(super) rates_epoch: Vec<u64>,
    /// Last step, per second.
    pub demand_read_ops: Vec<f64>,
    pub demand_write_ops: Vec<f64>,
    pub demand_read_bytes: Vec<f64>,
    pub demand_write_bytes: Vec<f64>,
    pub sequential_write_ops: Vec<f64>,
    /// Share of demand served, 0..=1.
    pub served_ratio: Vec<f64>,
    pub latency_p50_us: Vec<f64>,
    /// Accumulated since the last report of the partition's owner.
    pub acc: Accumulators,
    /// Per worker, last step: served ops and bytes per second (partitions and datasets),
    /// demand over capacity, and the capacity factor (below 1 while a move drains it).
    pub worker_ops: Vec<f64>,
    pub worker_bytes: Vec<f64>,
    pub worker_demand_ratio: Vec<f64>,
    pub worker_scale: Vec<f64>,
    pub worker_capacity_factor: Vec<f64>,
    /// Cluster totals of the last step, per second.
    pub rejected_ops: f64,
    pub demand_ops: f64,
}

/// Counters accumulated per partition between reports (totals, not rates).
#[derive(Debug, Clone, Default)]
pub struct Accumulators {
    pub read_ops: Vec<f64>,
    pub write_ops: Vec<f64>,
    pub read_bytes: Vec<f64>,
    pub write_bytes: Vec<f64>,
    pub rejected: Vec<f64>,
    pub sequential_writes: Vec<f64>,
    /// Σ p50 × ops, for an ops-weighted mean.
    pub latency_weighted_us: Vec<f64>,
    pub latency_p99_max_us: Vec<f64>,
}

macro_rules! for_each_partition_vec {
    ($s:expr, |$v:ident| $body:expr) => {{
        let s = $s;
        for $v in [
            &mut s.demand_read_ops,
            &mut s.demand_write_ops,
            &mut s.demand_read_bytes,
            &mut s.demand_write_bytes,
            &mut s.sequential_write_ops,
            &mut s.served_ratio,
            &mut s.latency_p50_us,
            &mut s.acc.read_ops,
            &mut s.acc.write_ops,
            &mut s.acc.read_bytes,
            &mut s.acc.write_bytes,
            &mut s.acc.rejected,
            &mut s.acc.sequential_writes,
            &mut s.acc.latency_weighted_us,
            &mut s.acc.latency_p99_max_us,
        ] {
            $body;
        }
    }};
}

impl LoadState {
    pub fn new(partitions: usize, workers: usize) -> Self {
        let mut s = Self { dirty: true, ..Self::default() };
        for_each_partition_vec!(&mut s, |v| v.resize(partitions, 0.0));
        s.served_ratio.fill(1.0);
        s.resize_workers(workers);
        s
    }

    pub fn resize_workers(&mut self, workers: usize) {
        self.worker_ops.resize(workers, 0.0);
        self.worker_bytes.resize(workers, 0.0);
        self.worker_demand_ratio.resize(workers, 0.0);
        self.worker_scale.resize(workers, 1.0);
        self.worker_capacity_factor.resize(workers, 1.0);
    }

    pub fn mark_dirty(&mut self) {
        self.dirty = true;
    }

    /// The static components with mass in partition `p`, ascending; `None` while the cache is
    /// stale (after a layout change, until the next step).
    pub(super) fn static_components_of(&self, p: usize) -> Option<impl Iterator<Item = u32> + '_> {
        if self.dirty || p + 1 >= self.entry_start.len() {
            return None;
        }
        let (a, b) = (self.entry_start[p] as usize, self.entry_start[p + 1] as usize);
        Some(self.entries[a..b].iter().map(|e| e.0))
    }

    /// Table `t`'s moving components (sequential appends), ascending.
    pub(super) fn moving_of(&self, t: usize) -> &[u32] {
        self.moving.get(t).map_or(&[], Vec::as_slice)
    }

    pub(super) fn push_partition(&mut self) {
        for_each_partition_vec!(&mut *self, |v| v.push(0.0));
        self.dirty = true;
    }

    pub(super) fn swap_remove_partition(&mut self, p: usize) {
        for_each_partition_vec!(&mut *self, |v| {
            v.swap_remove(p);
        });
        self.dirty = true;
    }

    /// Moves `share` of partition `from`'s accumulated counters to `to` (after a split).
    pub(super) fn transfer_acc(&mut self, from: usize, to: usize, share: f64) {
        let a = &mut self.acc;
        for v in [
            &mut a.read_ops,
            &mut a.write_ops,
            &mut a.read_bytes,
            &mut a.write_bytes,
            &mut a.rejected,
            &mut a.sequential_writes,
            &mut a.latency_weighted_us,
        ] {
            let moved = v[from] * share;
            v[from] -= moved;
            v[to] += moved;
        }
        a.latency_p99_max_us[to] = a.latency_p99_max_us[to].max(a.latency_p99_max_us[from]);
    }

    /// Zeroes every partition's accumulators (all of them went into reports).
    pub fn reset_all_acc(&mut self) {
        let a = &mut self.acc;
        for v in [
            &mut a.read_ops,
            &mut a.write_ops,
            &mut a.read_bytes,
            &mut a.write_bytes,
            &mut a.rejected,
            &mut a.sequential_writes,
            &mut a.latency_weighted_us,
            &mut a.latency_p99_max_us,
        ] {
            v.fill(0.0);
        }
    }

    /// Zeroes partition `p`'s accumulators (after they went into a report).
    pub fn reset_acc(&mut self, p: usize) {
        let a = &mut self.acc;
        for v in [
            &mut a.read_ops,
            &mut a.write_ops,
            &mut a.read_bytes,
            &mut a.write_bytes,
            &mut a.rejected,
            &mut a.sequential_writes,
            &mut a.latency_weighted_us,
            &mut a.latency_p99_max_us,
        ] {
            v[p] = 0.0;
        }
    }
}

impl Cluster {
    /// Recomputes the cached static masses of every partition.
    ///
    /// Components spread over the key space (uniform, zipf) are asked for every partition of
    /// their table; localized ones (hot ranges, hot keys) only for the partitions their keys
    /// overlap, found by binary search in key order — a scaled table with hundreds of hot
    /// ranges rebuilds in the time of one with a single one. Entries stay in component order.
    fn rebuild_masses(&mut self) {
        let p = &self.partitions;
        let mut local: Vec<(u32, u32, f64)> = Vec::new();
        let mut spread: Vec<Vec<usize>> = Vec::with_capacity(self.tables.len());
        for table in &self.tables {
            let mut global = Vec::new();
            for &c in &table.components {
                let comp = &self.components[c];
                if !comp.is_static() {
                    continue;
                }
                let Some((a, b)) = comp.key_span() else {
                    global.push(c);
                    continue;
                };
                let first = table.sorted.partition_point(|&q| p.end[q as usize] < a);
                for &q in &table.sorted[first..] {
                    let q = q as usize;
                    if p.start[q] > b {
                        break;
                    }
                    let mass = comp.mass(p.start[q], p.end[q]);
                    if mass > 0.0 {
                        local.push((q as u32, c as u32, mass));
                    }
                }
            }
            spread.push(global);
        }
        local.sort_unstable_by_key(|&(q, c, _)| (q, c));
        let load = &mut self.load;
        load.entry_start.clear();
        load.entries.clear();
        let mut l = 0;
        for i in 0..p.len() {
            load.entry_start.push(load.entries.len() as u32);
            let mut end = l;
            while end < local.len() && local[end].0 as usize == i {
                end += 1;
            }
            for &c in &spread[p.table[i] as usize] {
                while l < end && (local[l].1 as usize) < c {
                    load.entries.push((local[l].1, local[l].2));
                    l += 1;
                }
                let mass = self.components[c].mass(p.start[i], p.end[i]);
                if mass > 0.0 {
                    load.entries.push((c as u32, mass));
                }
            }
            while l < end {
                load.entries.push((local[l].1, local[l].2));
                l += 1;
            }
        }
        load.entry_start.push(load.entries.len() as u32);
        load.moving = self
            .tables
            .iter()
            .map(|t| t.components.iter().filter(|&&c| !self.components[c].is_static()).map(|&c| c as u32).collect())
            .collect();
        load.coef.resize(self.components.len(), [0.0; 4]);
        load.dirty = false;
    }

    /// Advances the load by one step of `dt_secs` ending at scenario time `t_secs`.
    // A dozen structure-of-arrays columns are read and written in lockstep by partition index;
    // zipping them would hide that and gain nothing.
    #[allow(clippy::needless_range_loop)]
    pub fn step_load(&mut self, t_secs: f64, dt_secs: f64) {
        if self.load.dirty {
            self.rebuild_masses();
        }
        self.load.rates_epoch.resize(self.tables.len(), 0);
        for (c, comp) in self.components.iter().enumerate() {
            let rate = comp.rate_at(t_secs) * self.tables[comp.table].surge_multiplier;
            let reads = rate * comp.read_ratio;
            let writes = rate - reads;
            let coef = [reads, writes, reads * comp.value_bytes, writes * comp.value_bytes];
            if self.load.coef[c] != coef {
                self.load.coef[c] = coef;
                self.load.rates_epoch[comp.table] += 1;
            }
        }
        let n = self.partitions.len();
        let load = &mut self.load;
        for p in 0..n {
            let mut d = [0.0f64; 4];
            let (a, b) = (load.entry_start[p] as usize, load.entry_start[p + 1] as usize);
            for &(c, mass) in &load.entries[a..b] {
                let k = &load.coef[c as usize];
                d[0] += k[0] * mass;
                d[1] += k[1] * mass;
                d[2] += k[2] * mass;
                d[3] += k[3] * mass;
            }
            load.demand_read_ops[p] = d[0];
            load.demand_write_ops[p] = d[1];
            load.demand_read_bytes[p] = d[2];
            load.demand_write_bytes[p] = d[3];
            load.sequential_write_ops[p] = 0.0;
        }
        self.add_moving_tails(t_secs, dt_secs);

        let load = &mut self.load;
        load.worker_ops.fill(0.0);
        load.worker_bytes.fill(0.0);
        let limit = self.partition_limit;
        let owner = &self.partitions.owner;
        let mut demand_total = 0.0;
        for p in 0..n {
            let ops = load.demand_read_ops[p] + load.demand_write_ops[p];
            let bytes = load.demand_read_bytes[p] + load.demand_write_bytes[p];
            demand_total += ops;
            let f = (limit.ops_per_sec / ops).min(limit.bytes_per_sec / bytes).min(1.0);
            load.served_ratio[p] = f;
            let w = owner[p] as usize;
            load.worker_ops[w] += ops * f;
            load.worker_bytes[w] += bytes * f;
        }
        self.add_dataset_load(t_secs);

        let load = &mut self.load;
        let owner = &self.partitions.owner;
        for w in 0..self.workers.len() {
            let cap = self.workers.capacity[w];
            let factor = load.worker_capacity_factor[w];
            let ratio = (load.worker_ops[w] / (cap.ops_per_sec * factor))
                .max(load.worker_bytes[w] / (cap.bytes_per_sec * factor));
            load.worker_demand_ratio[w] = ratio;
            load.worker_scale[w] = if ratio > 1.0 { 1.0 / ratio } else { 1.0 };
        }
        let mut rejected_total = 0.0;
        for p in 0..n {
            let w = owner[p] as usize;
            let partition_ratio = load.served_ratio[p];
            let f = partition_ratio * load.worker_scale[w];
            load.served_ratio[p] = f;
            let reads = load.demand_read_ops[p];
            let writes = load.demand_write_ops[p];
            let ops = reads + writes;
            // Utilization of the tighter of the worker and the partition's own limit.
            let partition_util = (ops / limit.ops_per_sec).min(1.0);
            let util = load.worker_demand_ratio[w].min(1.0).max(partition_util).min(MAX_QUEUEING_UTILIZATION);
            let p50 = DEFAULT_BASE_LATENCY_US / (1.0 - util);
            load.latency_p50_us[p] = p50;
            let served = ops * f;
            rejected_total += ops - served;
            let acc = &mut load.acc;
            acc.read_ops[p] += reads * f * dt_secs;
            acc.write_ops[p] += writes * f * dt_secs;
            acc.read_bytes[p] += load.demand_read_bytes[p] * f * dt_secs;
            acc.write_bytes[p] += load.demand_write_bytes[p] * f * dt_secs;
            acc.rejected[p] += (ops - served) * dt_secs;
            acc.sequential_writes[p] += load.sequential_write_ops[p] * f * dt_secs;
            acc.latency_weighted_us[p] += p50 * served * dt_secs;
            let p99 = p50 * DEFAULT_P99_OVER_P50;
            if served > 0.0 && p99 > acc.latency_p99_max_us[p] {
                acc.latency_p99_max_us[p] = p99;
            }
        }
        load.rejected_ops = rejected_total;
        load.demand_ops = demand_total;
    }

    /// Adds each sequential append's tail to the partition that holds it; the tail's writes
    /// grow that partition's stored bytes.
    fn add_moving_tails(&mut self, t_secs: f64, dt_secs: f64) {
        for c in 0..self.components.len() {
            let comp = &self.components[c];
            let Some(key) = comp.point_at(t_secs) else { continue };
            let p = self.partition_at(comp.table, key);
            let k = self.load.coef[c];
            let load = &mut self.load;
            load.demand_read_ops[p] += k[0];
            load.demand_write_ops[p] += k[1];
            load.demand_read_bytes[p] += k[2];
            load.demand_write_bytes[p] += k[3];
            load.sequential_write_ops[p] += k[1];
            self.partitions.stored_bytes[p] += k[3] * dt_secs;
        }
    }

    /// Demand of partition `p` in ops per second at the last step.
    pub fn demand_ops(&self, p: usize) -> f64 {
        self.load.demand_read_ops[p] + self.load.demand_write_ops[p]
    }

    /// Served ops per second of partition `p` at the last step.
    pub fn served_ops(&self, p: usize) -> f64 {
        self.demand_ops(p) * self.load.served_ratio[p]
    }

    /// [`Cluster::demand_in`] with the rates of the last step (no rate recomputation), for the
    /// sketch; `t_secs` only places the append tails.
    pub fn last_step_demand_in(&self, t: usize, start: u64, end: u64, t_secs: f64) -> f64 {
        self.tables[t]
            .components
            .iter()
            .map(|&c| {
                let comp = &self.components[c];
                let k = self.load.coef.get(c).copied().unwrap_or_default();
                let rate = k[0] + k[1];
                if rate == 0.0 {
                    return 0.0;
                }
                let mass = match comp.point_at(t_secs) {
                    Some(key) => f64::from(u8::from(start <= key && key <= end)),
                    None => comp.mass(start, end),
                };
                rate * mass
            })
            .sum()
    }

    /// Demand (ops/s) of table `t`'s components in `[start, end]` at `t_secs`, surge included.
    pub fn demand_in(&self, t: usize, start: u64, end: u64, t_secs: f64) -> f64 {
        let table = &self.tables[t];
        table
            .components
            .iter()
            .map(|&c| {
                let comp = &self.components[c];
                let mass = match comp.point_at(t_secs) {
                    Some(k) => f64::from(u8::from(start <= k && k <= end)),
                    None => comp.mass(start, end),
                };
                comp.rate_at(t_secs) * table.surge_multiplier * mass
            })
            .sum()
    }
}
