//! The aggregator's cost: draining records into 1,000 partitions' state (one record = counters,
//! latency sketch, bucket, Space-Saving, sequential mark), and building the report of those
//! 1,000 partitions. CPU at 1 M records/s = 1 M × (drain time per record) + 1 report per second.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use lb_common::ids::{Key, KeyRange};
use lb_common::rng::SplitMix64;
use lb_reporter::{Aggregator, AggregatorConfig, Op, Outcome, PartitionInfo, PartitionSlot, Recorder};

const PARTITIONS: u64 = 1_000;
/// One 10 ms drain round at 1 M records/s.
const BATCH: usize = 10_000;

/// An aggregator with 1,000 partitions tiling the key space, and one recorder.
fn setup() -> (Aggregator, Recorder, Vec<PartitionSlot>) {
    let agg = Aggregator::new(AggregatorConfig { ring_capacity: BATCH, ..Default::default() });
    let handle = agg.handle();
    let width = u64::MAX / PARTITIONS;
    let slots = (0..PARTITIONS)
        .map(|i| {
            let end = if i == PARTITIONS - 1 { u64::MAX } else { (i + 1) * width - 1 };
            handle.upsert_partition(PartitionInfo {
                tenant: "acme".parse().expect("id"),
                table: "orders".parse().expect("id"),
                partition_id: format!("acme.orders.p{i:06}").parse().expect("id"),
                key_range: KeyRange { start: Key(i * width), end: Key(end) },
                stored_bytes: 1 << 30,
            })
        })
        .collect();
    let recorder = handle.recorder();
    (agg, recorder, slots)
}

/// A zipf-like key stream: a tenth of the keys take most of the load, 25 % writes.
fn requests(slots: &[PartitionSlot]) -> Vec<(PartitionSlot, Key, Op, Duration)> {
    let mut rng = SplitMix64::new(7);
    let width = u64::MAX / PARTITIONS;
    (0..BATCH * 10)
        .map(|_| {
            let p = if rng.below(10) < 8 { rng.below(PARTITIONS / 10) } else { rng.below(PARTITIONS) };
            // Half the ops on the first 1,000 keys of their partition (hot keys), half spread.
            let spread = if rng.below(2) == 0 { 1_000 } else { width };
            let key = Key(p * width + rng.below(spread));
            let op = if rng.below(4) == 0 { Op::Write } else { Op::Read };
            (slots[p as usize], key, op, Duration::from_micros(50 + rng.below(5_000)))
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let (mut agg, recorder, slots) = setup();
    let stream = requests(&slots);
    let worker = "w-0".parse().expect("id");
    let mut group = c.benchmark_group("aggregate_1000_partitions");
    group.throughput(Throughput::Elements(BATCH as u64));
    // Only the drain is timed; recording the batch is not.
    let mut offset = 0;
    group.bench_function("drain_10k_records", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                for &(slot, key, op, latency) in &stream[offset..offset + BATCH] {
                    recorder.record(slot, key, op, 256, latency, Outcome::Ok);
                }
                offset = (offset + BATCH) % stream.len();
                let start = Instant::now();
                black_box(agg.drain());
                total += start.elapsed();
            }
            total
        });
    });
    group.throughput(Throughput::Elements(1));
    group.bench_function("take_report", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                // 100k records touching every partition, drained untimed.
                for chunk in stream.chunks(BATCH) {
                    for &(slot, key, op, latency) in chunk {
                        recorder.record(slot, key, op, 256, latency, Outcome::Ok);
                    }
                    agg.drain();
                }
                let start = Instant::now();
                black_box(agg.take_report(&worker, 1, 1_000, 1_000));
                total += start.elapsed();
            }
            total
        });
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
