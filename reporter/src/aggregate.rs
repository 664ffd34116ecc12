//! The aggregator: drains every recorder's ring into per-partition state and turns an
//! interval's state into a [`Report`].
//!
//! Synchronous and clock-free: [`Aggregator::drain`] and [`Aggregator::take_report`] are called
//! by the [`Reporter`](crate::Reporter)'s background thread, or directly by a caller that runs
//! its own loop (the testbed does, inside its simulation step).
//!
//! Memory per registered partition: the state below is at most [`PARTITION_STATE_BYTES`]
//! bytes inline (counters, 64 buckets, 32 Space-Saving counters, the sequential-write mark), plus
//! the three id strings and the latency window on the heap (4 bytes per 2 % latency step seen
//! in the interval: ~1.4 KiB for latencies over three decades, at most 5.6 KiB). About 3 KiB
//! per partition in practice, 7 KiB at worst, whatever the request rate.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use lb_common::ids::WorkerId;
use lb_common::protocol::{KeySketch, MAX_SKETCH_BUCKETS, MAX_SKETCH_TOP_KEYS, PartitionStats, Report, TopKey};

use crate::partition::{Hub, PartitionInfo, ReporterHandle};
use crate::record::{Event, Kind, Outcome};
use crate::sketch::{KeyBuckets, LatencySketch, SequentialWrites, TopKeys};
use crate::stats::{ReporterStats, Stats};

/// 64: the most a report may carry; a split point to 1/64 of the range (the median bound).
pub const DEFAULT_SKETCH_BUCKETS: usize = MAX_SKETCH_BUCKETS;
/// 16,384 records (640 KiB: 32-byte events plus the ring's 8-byte stamps) per recorder: 16 ms
/// of one thread at 1 M records/s, longer than the 10 ms drain interval.
pub const DEFAULT_RING_CAPACITY: usize = 16_384;
/// 1 %: a key under 1 % of its partition's ops cannot decide split against isolate; listing
/// it would only fill the report.
pub const MIN_TOP_KEY_SHARE_RATIO: f64 = 0.01;
/// Inline bytes of one partition's state (checked by a test).
pub const PARTITION_STATE_BYTES: usize = 1_408;

/// What the aggregator keeps and how its sketches are shaped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AggregatorConfig {
    /// Equal-width buckets per partition (1..=64).
    pub sketch_buckets: usize,
    /// Records each recorder's ring holds between drains.
    pub ring_capacity: usize,
}

impl Default for AggregatorConfig {
    fn default() -> Self {
        Self { sketch_buckets: DEFAULT_SKETCH_BUCKETS, ring_capacity: DEFAULT_RING_CAPACITY }
    }
}

/// One partition's counts over the current interval.
#[derive(Debug, Default)]
struct Counters {
    read_ops: u64,
    write_ops: u64,
    read_bytes: u64,
    write_bytes: u64,
    errors: u64,
    rejected: u64,
    cpu_ns: u64,
}

/// One partition over the current interval.
#[derive(Debug)]
struct PartitionState {
    generation: u32,
    info: PartitionInfo,
    /// Removed from the registry: reported once more, then released.
    removed: bool,
    reported_stored_bytes: Option<u64>,
    counters: Counters,
    latency: LatencySketch,
    buckets: KeyBuckets,
    top: TopKeys,
    sequential: SequentialWrites,
}

impl PartitionState {
    fn new(info: PartitionInfo, generation: u32, buckets: usize) -> Self {
        Self {
            generation,
            buckets: KeyBuckets::new(info.key_range, buckets),
            info,
            removed: false,
            reported_stored_bytes: None,
            counters: Counters::default(),
            latency: LatencySketch::default(),
            top: TopKeys::default(),
            sequential: SequentialWrites::default(),
        }
    }

    /// Takes the registry's view; a new range restarts the key sketches.
    fn update(&mut self, info: &PartitionInfo, buckets: usize) {
        if info.key_range != self.info.key_range {
            self.buckets = KeyBuckets::new(info.key_range, buckets);
            self.top.clear();
            self.sequential.reset();
            self.info.key_range = info.key_range;
        }
        self.info.stored_bytes = info.stored_bytes;
        if info.tenant != self.info.tenant || info.table != self.info.table {
            self.info.tenant = info.tenant.clone();
            self.info.table = info.table.clone();
        }
    }

    fn ops(&self) -> u64 {
        self.counters.read_ops + self.counters.write_ops
    }

    /// Whether the interval has anything to report (protocol: idle partitions may be left out).
    fn changed(&self) -> bool {
        self.ops() > 0
            || self.counters.rejected > 0
            || self.counters.cpu_ns > 0
            || self.reported_stored_bytes != Some(self.info.stored_bytes)
    }

    /// Returns whether this was the round's first in-range write.
    fn apply(&mut self, e: &Event) -> bool {
        let write = match (e.kind, e.outcome) {
            (Kind::Cpu, _) => {
                self.counters.cpu_ns = self.counters.cpu_ns.saturating_add(e.value_ns);
                return false;
            }
            (_, Outcome::Rejected) => {
                self.counters.rejected += 1;
                return false;
            }
            (Kind::Read, _) => {
                self.counters.read_ops += 1;
                self.counters.read_bytes += u64::from(e.bytes);
                false
            }
            (Kind::Write, _) => {
                self.counters.write_ops += 1;
                self.counters.write_bytes += u64::from(e.bytes);
                true
            }
        };
        if e.outcome == Outcome::Error {
            self.counters.errors += 1;
        }
        self.latency.insert(e.value_ns);
        // A key outside the range (a request routed before a split took effect) counts as an op
        // but not in the key sketches, which must stay inside the range.
        if !self.buckets.insert(e.key) {
            return false;
        }
        self.top.insert(e.key);
        write && self.sequential.insert(e.key)
    }

    fn stats(&self) -> PartitionStats {
        let us = |q: f64| self.latency.quantile(q).map_or(0.0, |ns| ns / 1_000.0);
        let sketch = (self.ops() > 0).then(|| KeySketch {
            bucket_ops: self.buckets.counts().to_vec(),
            bucket_bounds: Vec::new(),
            top_keys: self
                .top
                .top(MAX_SKETCH_TOP_KEYS, MIN_TOP_KEY_SHARE_RATIO)
                .into_iter()
                .map(|(key, share_ratio)| TopKey { key, share_ratio })
                .collect(),
            sequential_write_ratio: self.sequential.ratio().clamp(0.0, 1.0),
        });
        PartitionStats {
            tenant: self.info.tenant.clone(),
            table: self.info.table.clone(),
            partition_id: self.info.partition_id.clone(),
            key_range: self.info.key_range,
            read_ops: self.counters.read_ops,
            write_ops: self.counters.write_ops,
            read_bytes: self.counters.read_bytes,
            write_bytes: self.counters.write_bytes,
            errors: self.counters.errors,
            rejected: self.counters.rejected,
            latency_p50_us: us(0.5),
            latency_p99_us: us(0.99),
            cpu_time_us: self.counters.cpu_ns / 1_000,
            stored_bytes: self.info.stored_bytes,
            sketch,
        }
    }

    fn start_interval(&mut self) {
        self.reported_stored_bytes = Some(self.info.stored_bytes);
        self.counters = Counters::default();
        self.latency.clear();
        self.buckets.clear();
        self.top.clear();
        self.sequential.clear_counts();
    }
}

/// Turns recorded requests into reports.
#[derive(Debug)]
pub struct Aggregator {
    hub: Arc<Hub>,
    config: AggregatorConfig,
    stats: Arc<Stats>,
    seen_version: Option<u64>,
    states: Vec<Option<Box<PartitionState>>>,
    /// Slots with an in-range write in the current drain round.
    round_writers: Vec<u32>,
}

impl Aggregator {
    pub fn new(config: AggregatorConfig) -> Self {
        Self {
            hub: Arc::new(Hub::new(config.ring_capacity)),
            config,
            stats: Arc::new(Stats::default()),
            seen_version: None,
            states: Vec::new(),
            round_writers: Vec::new(),
        }
    }

    /// The handle to register partitions and get recorders with.
    pub fn handle(&self) -> ReporterHandle {
        ReporterHandle::new(self.hub.clone())
    }

    pub(crate) fn shared_stats(&self) -> Arc<Stats> {
        self.stats.clone()
    }

    /// What has been aggregated and dropped so far.
    pub fn stats(&self) -> ReporterStats {
        self.stats.snapshot()
    }

    /// Moves everything recorded so far into the partitions' state; returns how many records
    /// it took. Bounded: at most one ring's capacity per ring, so a flood cannot hold it.
    pub fn drain(&mut self) -> usize {
        self.sync_registry();
        let hub = self.hub.clone();
        let mut rings = hub.lock_rings();
        let (mut taken, mut stale, mut full) = (0usize, 0u64, 0u64);
        for ring in rings.iter() {
            full += ring.dropped.swap(0, Ordering::Relaxed);
            for _ in 0..ring.queue.capacity() {
                let Some(event) = ring.queue.pop() else { break };
                taken += 1;
                if !self.apply(&event) {
                    stale += 1;
                }
            }
        }
        // A recorder that was dropped leaves its ring here alone; forget it once empty.
        rings.retain(|ring| Arc::strong_count(ring) > 1 || !ring.queue.is_empty());
        drop(rings);
        for i in self.round_writers.drain(..) {
            if let Some(state) = self.states[i as usize].as_deref_mut() {
                state.sequential.end_round();
            }
        }
        self.stats.records(taken as u64 - stale, full, stale);
        taken
    }

    /// Returns whether the event's partition is known.
    fn apply(&mut self, event: &Event) -> bool {
        let index = event.slot.index;
        let Some(state) = self
            .states
            .get_mut(index as usize)
            .and_then(|s| s.as_deref_mut())
            .filter(|s| s.generation == event.slot.generation)
        else {
            return false;
        };
        if state.apply(event) {
            self.round_writers.push(index);
        }
        true
    }

    /// Takes the registry's changes (new, updated and removed partitions) if there are any.
    fn sync_registry(&mut self) {
        let version = self.hub.version();
        if self.seen_version == Some(version) {
            return;
        }
        let buckets = self.config.sketch_buckets;
        let reg = self.hub.registry();
        if self.states.len() < reg.slots.len() {
            self.states.resize_with(reg.slots.len(), || None);
        }
        let mut never_seen = Vec::new();
        for (i, (entry, state)) in reg.slots.iter().zip(self.states.iter_mut()).enumerate() {
            match (&entry.info, state) {
                (Some(info), Some(s)) if s.generation == entry.generation => s.update(info, buckets),
                (Some(info), state) => {
                    *state = Some(Box::new(PartitionState::new(info.clone(), entry.generation, buckets)));
                }
                (None, Some(s)) if s.generation == entry.generation => s.removed = true,
                // Registered and removed between two syncs: nothing to report, free it now.
                (None, _) if !entry.released => never_seen.push(i as u32),
                (None, _) => {}
            }
        }
        drop(reg);
        self.hub.release(&never_seen);
        self.seen_version = Some(version);
    }

    /// Drains, then builds the report of the interval that ends now and starts the next one.
    /// Lists the partitions with ops, rejections, CPU or changed stored bytes (the protocol
    /// reads a missing one as idle), or one idle partition if none changed, so the interval is
    /// never mistaken for a missing report. A removed partition is reported one last time.
    pub fn take_report(&mut self, worker_id: &WorkerId, seq: u64, timestamp_ms: i64, interval_ms: u64) -> Report {
        self.drain();
        let mut partitions = Vec::new();
        let mut released = Vec::new();
        let mut first_idle = None;
        for (i, slot) in self.states.iter_mut().enumerate() {
            let Some(state) = slot.as_deref_mut() else { continue };
            if state.changed() {
                partitions.push(state.stats());
            } else if first_idle.is_none() && !state.removed {
                first_idle = Some(state.stats());
            }
            state.start_interval();
            if state.removed {
                released.push(i as u32);
                *slot = None;
            }
        }
        if partitions.is_empty() {
            partitions.extend(first_idle);
        }
        self.hub.release(&released);
        self.stats.built();
        Report { worker_id: worker_id.clone(), seq, timestamp_ms, interval_ms, partitions, host: None }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use lb_common::ids::{Key, KeyRange};

    use super::*;
    use crate::record::Op;

    fn info(id: &str, range: KeyRange) -> PartitionInfo {
        let (tenant, table) = ("acme".parse().expect("id"), "orders".parse().expect("id"));
        PartitionInfo { stored_bytes: 1_000, ..PartitionInfo::new(tenant, table, id.parse().expect("id"), range) }
    }

    fn worker() -> WorkerId {
        "w-1".parse().expect("id")
    }

    #[test]
    fn a_partitions_state_stays_within_its_stated_size() {
        assert!(
            std::mem::size_of::<PartitionState>() <= PARTITION_STATE_BYTES,
            "{}",
            std::mem::size_of::<PartitionState>()
        );
    }

    #[test]
    fn counters_outcomes_and_cpu_reach_the_report_which_validates() {
        let mut agg = Aggregator::new(AggregatorConfig { sketch_buckets: 4, ring_capacity: 64 });
        let h = agg.handle();
        let slot = h.upsert_partition(info("p1", KeyRange { start: Key(0), end: Key(399) }));
        let rec = h.recorder();
        let ms = Duration::from_millis(1);
        rec.record(slot, Key(10), Op::Read, 100, ms, Outcome::Ok);
        rec.record(slot, Key(110), Op::Write, 50, ms * 3, Outcome::Ok);
        rec.record(slot, Key(210), Op::Write, 50, ms * 2, Outcome::Error);
        rec.record(slot, Key(310), Op::Read, 0, ms, Outcome::Rejected);
        rec.record(slot, Key(9_999), Op::Read, 7, ms, Outcome::Ok);
        rec.record_cpu(slot, Duration::from_micros(250));
        let report = agg.take_report(&worker(), 1, 1_000, 1_000);
        report.validate().expect("valid");
        let p = &report.partitions[0];
        assert_eq!((p.read_ops, p.write_ops, p.read_bytes, p.write_bytes), (2, 2, 107, 100));
        assert_eq!((p.errors, p.rejected, p.cpu_time_us), (1, 1, 250));
        let sketch = p.sketch.as_ref().expect("sketch");
        // The out-of-range key counts as an op but not in the buckets.
        assert_eq!(sketch.bucket_ops, vec![1, 1, 1, 0]);
        assert!((p.latency_p50_us - 1_000.0).abs() <= 10.0, "{}", p.latency_p50_us);
        // p99 of four values is the one of rank floor(0.99 * 3) = 2: 2 ms.
        assert!((p.latency_p99_us - 2_000.0).abs() <= 20.0, "{}", p.latency_p99_us);
        // Nothing new: the idle partition alone marks the next interval as reported.
        let next = agg.take_report(&worker(), 2, 2_000, 1_000);
        assert_eq!(next.partitions.len(), 1);
        assert_eq!(next.partitions[0].ops(), 0);
        assert!(next.partitions[0].sketch.is_none());
    }

    #[test]
    fn removed_partitions_report_once_more_and_stale_slots_are_dropped() {
        let mut agg = Aggregator::new(AggregatorConfig::default());
        let h = agg.handle();
        let a = h.upsert_partition(info("a", KeyRange { start: Key(0), end: Key(99) }));
        let b = h.upsert_partition(info("b", KeyRange { start: Key(100), end: Key(199) }));
        let rec = h.recorder();
        rec.record(a, Key(5), Op::Read, 1, Duration::ZERO, Outcome::Ok);
        agg.drain();
        assert!(h.remove_partition(&"a".parse().expect("id")));
        rec.record(b, Key(150), Op::Read, 1, Duration::ZERO, Outcome::Ok);
        let r1 = agg.take_report(&worker(), 1, 1_000, 1_000);
        let ids: Vec<_> = r1.partitions.iter().map(|p| p.partition_id.as_str().to_owned()).collect();
        assert_eq!(ids, ["a", "b"]);
        // `a`'s slot is reused by `c` with a new generation: `a`'s old slot records nothing.
        let c = h.upsert_partition(info("c", KeyRange { start: Key(0), end: Key(99) }));
        assert_eq!(c.index, a.index);
        rec.record(a, Key(5), Op::Read, 1, Duration::ZERO, Outcome::Ok);
        rec.record(c, Key(6), Op::Read, 1, Duration::ZERO, Outcome::Ok);
        let r2 = agg.take_report(&worker(), 2, 2_000, 1_000);
        assert_eq!(r2.partitions.iter().map(|p| p.ops()).sum::<u64>(), 1);
        assert_eq!(agg.stats().records_dropped_stale_partition_total, 1);
    }

    #[test]
    fn a_new_range_restarts_the_key_sketch() {
        let mut agg = Aggregator::new(AggregatorConfig { sketch_buckets: 2, ring_capacity: 64 });
        let h = agg.handle();
        let mut i = info("p", KeyRange { start: Key(0), end: Key(199) });
        let slot = h.upsert_partition(i.clone());
        let rec = h.recorder();
        rec.record(slot, Key(150), Op::Write, 1, Duration::ZERO, Outcome::Ok);
        agg.drain();
        i.key_range = KeyRange { start: Key(0), end: Key(99) };
        assert_eq!(h.upsert_partition(i), slot);
        rec.record(slot, Key(10), Op::Write, 1, Duration::ZERO, Outcome::Ok);
        let r = agg.take_report(&worker(), 1, 1_000, 1_000);
        r.validate().expect("valid");
        assert_eq!(r.partitions[0].sketch.as_ref().expect("sketch").bucket_ops, vec![1, 0]);
    }
}
