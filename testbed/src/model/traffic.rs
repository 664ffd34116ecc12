//! Sampled traffic (the real-time mode): each step draws a bounded stream of requests per
//! partition from its workload and records them through lb-reporter, so the reports' key-access
//! sketches are built by the library a real storage worker embeds, from keys, not formulas.
//!
//! Contract, per step of `dt` at scenario time `t`:
//! - a partition gets `min(served ops in the step, MAX_SAMPLED_OPS_PER_PARTITION_PER_SEC × dt)`
//!   sampled requests (stochastically rounded), all partitions scaled down together when the
//!   cluster's total would pass `MAX_SAMPLED_OPS_PER_SEC × dt`: CPU stays bounded whatever the
//!   modelled rates;
//! - each request's component is drawn by its share of the partition's demand, its key from
//!   that component inside the partition's range ([`Component::sample_in`]: uniform, zipf,
//!   hot range, hot key; an append tail's key at the request's instant, so tails move up), its
//!   op by the component's read ratio;
//! - the requests go to the owning worker's [`Aggregator`] (one per worker, drained each step);
//!   at report time the library's sketch replaces the closed-form one, its buckets scaled to
//!   the partition's modelled ops.
//!
//! The counters (ops, bytes, rejections, latency, CPU) stay modelled: the sample is bounded,
//! so counting it would report the sample rate, not the modelled demand.
//! The virtual-time simulator does not sample (it keeps the closed-form sketches).
//!
//! [`Component::sample_in`]: crate::workload::Component::sample_in

use std::collections::HashMap;
use std::time::Duration;

use lb_common::ids::{Key, KeyRange, PartitionId};
use lb_common::protocol::{KeySketch, Report};
use lb_common::rng::SplitMix64;
use lb_reporter::{Aggregator, AggregatorConfig, Op, Outcome, PartitionInfo, PartitionSlot, Recorder, ReporterHandle};

use super::Cluster;
use super::report::DEFAULT_SKETCH_BUCKETS;

/// 1,000 sampled requests per partition per second: ~60 per bucket of a uniformly loaded
/// partition's 16, enough to place a split key within a few % of the range and a hot key's
/// share within a few %.
pub const MAX_SAMPLED_OPS_PER_PARTITION_PER_SEC: f64 = 1_000.0;
/// 50,000 sampled requests per second over the cluster: tens of ms of CPU per second even
/// unoptimised, whatever the scenario's size.
pub const MAX_SAMPLED_OPS_PER_SEC: f64 = 50_000.0;

/// One worker's side of the library: what a storage worker would embed.
#[derive(Debug)]
struct WorkerStream {
    aggregator: Aggregator,
    handle: ReporterHandle,
    recorder: Recorder,
}

impl WorkerStream {
    fn new() -> Self {
        // Two steps' worth of one worker's sample fits the ring (drained every step).
        let ring_capacity = (MAX_SAMPLED_OPS_PER_SEC as usize).max(1);
        let aggregator = Aggregator::new(AggregatorConfig { sketch_buckets: DEFAULT_SKETCH_BUCKETS, ring_capacity });
        let handle = aggregator.handle();
        let recorder = handle.recorder();
        Self { aggregator, handle, recorder }
    }
}

/// Where a partition is registered: its worker, slot and range.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Registered {
    worker: usize,
    slot: PartitionSlot,
    range: KeyRange,
}

/// The sampled streams of every worker.
#[derive(Debug)]
pub struct SampledTraffic {
    seed: u64,
    rng: SplitMix64,
    workers: Vec<WorkerStream>,
    registered: HashMap<PartitionId, Registered>,
    /// Per partition index, its registration; valid for `layout_version`.
    slots: Vec<Registered>,
    layout_version: Option<u64>,
}

impl Clone for SampledTraffic {
    /// A clone starts afresh (no samples, registered again on its first step): recorded
    /// requests live in the library's rings and cannot be copied.
    fn clone(&self) -> Self {
        Self::new(self.seed)
    }
}

impl SampledTraffic {
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            rng: SplitMix64::new(seed),
            workers: Vec::new(),
            registered: HashMap::new(),
            slots: Vec::new(),
            layout_version: None,
        }
    }

    /// Samples and records one step of `dt_secs` ending at `t_secs` (after the load step).
    pub fn step(&mut self, cluster: &Cluster, t_secs: f64, dt_secs: f64) {
        if dt_secs <= 0.0 {
            return;
        }
        self.sync(cluster);
        let cap = MAX_SAMPLED_OPS_PER_PARTITION_PER_SEC * dt_secs;
        let wanted: f64 = (0..cluster.partitions.len()).map(|p| (cluster.served_ops(p) * dt_secs).min(cap)).sum();
        let scale =
            if wanted > MAX_SAMPLED_OPS_PER_SEC * dt_secs { MAX_SAMPLED_OPS_PER_SEC * dt_secs / wanted } else { 1.0 };
        for p in 0..cluster.partitions.len() {
            let count = self.round((cluster.served_ops(p) * dt_secs).min(cap) * scale);
            if count > 0 {
                self.sample_partition(cluster, p, count, t_secs, dt_secs);
            }
        }
        for stream in &mut self.workers {
            stream.aggregator.drain();
        }
    }

    /// Records `count` requests of partition `p` drawn from its demand.
    fn sample_partition(&mut self, cluster: &Cluster, p: usize, count: u64, t_secs: f64, dt_secs: f64) {
        let Registered { worker, slot, range } = self.slots[p];
        let (start, end) = (range.start.0, range.end.0);
        let table = &cluster.tables[cluster.partitions.table[p] as usize];
        let demand = |c: usize| {
            let k = cluster.load.coef.get(c).copied().unwrap_or_default();
            let mass = match cluster.components[c].point_at(t_secs) {
                Some(key) => f64::from(u8::from(start <= key && key <= end)),
                None => cluster.components[c].mass(start, end),
            };
            (k[0] * mass, (k[0] + k[1]) * mass)
        };
        let total: f64 = table.components.iter().map(|&c| demand(c).1).sum();
        if total <= 0.0 {
            return;
        }
        let latency = Duration::from_secs_f64(cluster.load.latency_p50_us[p].max(0.0) / 1e6);
        for &c in &table.components {
            let (reads, ops) = demand(c);
            let n = if ops > 0.0 { self.round(count as f64 * ops / total) } else { 0 };
            let component = &cluster.components[c];
            let bytes = component.value_bytes as u64;
            for i in 0..n {
                // Spread over the step, so an append tail's keys rise request by request.
                let at = t_secs - dt_secs + dt_secs * (i + 1) as f64 / n as f64;
                let key = component.sample_in(start, end, at, &mut self.rng);
                let op = if self.rng.next_f64() * ops < reads { Op::Read } else { Op::Write };
                self.workers[worker].recorder.record(slot, Key(key), op, bytes, latency, Outcome::Ok);
            }
        }
    }

    /// `x` rounded down or up with the probability of its fraction: unbiased counts.
    fn round(&mut self, x: f64) -> u64 {
        let whole = x.floor();
        whole as u64 + u64::from(self.rng.next_f64() < x - whole)
    }

    /// Registers partitions with their owner's aggregator after a layout change: new ones,
    /// moved ones (removed from the old owner), changed ranges; forgets merged ones.
    fn sync(&mut self, cluster: &Cluster) {
        if self.layout_version == Some(cluster.version) && self.workers.len() == cluster.workers.len() {
            return;
        }
        while self.workers.len() < cluster.workers.len() {
            self.workers.push(WorkerStream::new());
        }
        let parts = &cluster.partitions;
        let mut registered = HashMap::with_capacity(parts.len());
        self.slots.clear();
        for p in 0..parts.len() {
            let id = &parts.ids[p];
            let (worker, range) = (parts.owner[p] as usize, parts.range(p));
            let entry = match self.registered.remove(id) {
                Some(r) if r.worker == worker && r.range == range => r,
                old => {
                    if let Some(old) = old.filter(|r| r.worker != worker) {
                        self.workers[old.worker].handle.remove_partition(id);
                    }
                    let table = &cluster.tables[parts.table[p] as usize];
                    let info = PartitionInfo::new(table.tenant.clone(), table.table.clone(), id.clone(), range);
                    let slot = self.workers[worker].handle.upsert_partition(info);
                    Registered { worker, slot, range }
                }
            };
            self.slots.push(entry);
            registered.insert(id.clone(), entry);
        }
        // What is left was merged away.
        for (id, gone) in self.registered.drain() {
            self.workers[gone.worker].handle.remove_partition(&id);
        }
        self.registered = registered;
        self.layout_version = Some(cluster.version);
    }

    /// Replaces the sketches of `report` (worker `w`'s, just built) with those the library
    /// aggregated over the same interval; a partition without sampled requests gets none.
    pub fn apply_sketches(&mut self, w: usize, report: &mut Report) {
        let Some(stream) = self.workers.get_mut(w) else { return };
        let sampled =
            stream.aggregator.take_report(&report.worker_id, report.seq, report.timestamp_ms, report.interval_ms);
        let mut sketches: HashMap<PartitionId, KeySketch> =
            sampled.partitions.into_iter().filter_map(|s| Some((s.partition_id, s.sketch?))).collect();
        // Dataset shards carry no sketch, from the model or the library.
        for stats in report.partitions.iter_mut().filter(|s| s.sketch.is_some()) {
            let ops = stats.ops();
            stats.sketch = sketches.remove(&stats.partition_id).map(|s| scaled(s, ops));
        }
    }
}

/// `sketch` with its bucket counts scaled from the sample to `ops` (their sum stays <= `ops`);
/// shares and ratios are the sample's.
fn scaled(mut sketch: KeySketch, ops: u64) -> KeySketch {
    let sampled: u64 = sketch.bucket_ops.iter().sum();
    if sampled > 0 {
        for b in &mut sketch.bucket_ops {
            *b = (u128::from(*b) * u128::from(ops) / u128::from(sampled)) as u64;
        }
    }
    sketch
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::report::bucket_bounds;

    #[test]
    fn the_librarys_buckets_are_the_testbeds_and_the_planners() {
        for (start, end) in [(0, u64::MAX), (0x4000_0000_0000_0000, 0x7fff_ffff_ffff_ffff), (1_000, 1_009), (7, 7)] {
            let range = KeyRange { start: Key(start), end: Key(end) };
            let library = lb_reporter::sketch::KeyBuckets::new(range, DEFAULT_SKETCH_BUCKETS);
            let bounds = bucket_bounds(start, end, DEFAULT_SKETCH_BUCKETS);
            assert_eq!(library.counts().len(), bounds.len());
            for (i, &(a, b)) in bounds.iter().enumerate() {
                assert_eq!(
                    (library.bucket_of(a), library.bucket_of(b)),
                    (Some(i), Some(i)),
                    "[{start}, {end}] bucket {i}"
                );
            }
        }
    }

    #[test]
    fn scaling_keeps_the_shape_and_the_sum_under_the_ops() {
        let s = KeySketch {
            bucket_ops: vec![1, 3, 0, 6],
            bucket_bounds: Vec::new(),
            top_keys: Vec::new(),
            sequential_write_ratio: 0.5,
        };
        let out = scaled(s, 1_001);
        assert_eq!(out.bucket_ops, vec![100, 300, 0, 600]);
        assert!(out.bucket_ops.iter().sum::<u64>() <= 1_001);
        assert_eq!(out.sequential_write_ratio, 0.5);
    }
}
