//! The request path: [`Recorder::record`] at 1, 2 and 8 threads, each with its own recorder.
//!
//! Each thread records `iters` requests (keys, ops and latencies precomputed) into a ring large
//! enough to hold them, so the timed loop is the record path alone: neither the drop path nor
//! a concurrently draining aggregator competing for this machine's 2 cores. The rings are
//! drained, untimed, between samples. The reported time is the mean over threads of one
//! thread's wall time per call: on 2 cores, 8 threads time-share, so that figure is ~4× the
//! CPU cost of a call (divide by threads / cores for it, see `docs/benchmarks.md`).

use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use lb_common::ids::{Key, KeyRange};
use lb_common::rng::SplitMix64;
use lb_reporter::{Aggregator, AggregatorConfig, Op, Outcome, PartitionInfo};

/// Records per thread per timed chunk (the ring's capacity): 32 MiB of ring per thread at most.
const CHUNK: u64 = 1 << 20;

fn partition(i: usize) -> PartitionInfo {
    let id = format!("acme.orders.p{i:06}").parse().expect("id");
    PartitionInfo::new("acme".parse().expect("id"), "orders".parse().expect("id"), id, KeyRange::FULL)
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("record");
    group.throughput(Throughput::Elements(1));
    for threads in [1usize, 2, 8] {
        group.bench_function(format!("{threads}_threads"), |b| {
            let mut agg = Aggregator::new(AggregatorConfig { ring_capacity: CHUNK as usize, ..Default::default() });
            let handle = agg.handle();
            let slots: Vec<_> = (0..64).map(|i| handle.upsert_partition(partition(i))).collect();
            let recorders: Vec<_> = (0..threads).map(|_| handle.recorder()).collect();
            // 4,096 precomputed requests per thread, cycled.
            let requests: Vec<Vec<_>> = (0..threads)
                .map(|t| {
                    let mut rng = SplitMix64::new(t as u64);
                    (0..4_096)
                        .map(|_| {
                            let op = if rng.below(4) == 0 { Op::Write } else { Op::Read };
                            (
                                slots[rng.below(64) as usize],
                                Key(rng.next_u64()),
                                op,
                                Duration::from_micros(rng.below(2_000)),
                            )
                        })
                        .collect()
                })
                .collect();
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                let mut left = iters;
                while left > 0 {
                    let n = left.min(CHUNK);
                    left -= n;
                    let barrier = Barrier::new(threads);
                    let elapsed: Vec<Duration> = std::thread::scope(|s| {
                        let handles: Vec<_> = recorders
                            .iter()
                            .zip(&requests)
                            .map(|(recorder, requests)| {
                                let barrier = &barrier;
                                s.spawn(move || {
                                    barrier.wait();
                                    let start = Instant::now();
                                    for i in 0..n as usize {
                                        let (slot, key, op, latency) = requests[i & 4_095];
                                        recorder.record(black_box(slot), key, op, 128, latency, Outcome::Ok);
                                    }
                                    start.elapsed()
                                })
                            })
                            .collect();
                        handles.into_iter().map(|h| h.join().expect("thread")).collect()
                    });
                    total += elapsed.iter().sum::<Duration>() / threads as u32;
                    agg.drain();
                }
                assert_eq!(agg.stats().records_dropped_buffer_full_total, 0, "the timed loop never hit a full ring");
                total
            });
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
