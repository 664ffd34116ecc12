//! The sketches against exact counts computed here, on the four stream shapes the planner tells
//! apart: zipf, hot range, single hot key, append. Streams go through the real record path
//! (recorders, rings, drains every 1,000 records) and the report the aggregator builds.

use std::time::Duration;

use lb_common::ids::{Key, KeyRange};
use lb_common::protocol::{KeySketch, PartitionStats};
use lb_common::rng::SplitMix64;
use lb_reporter::sketch::{LATENCY_RELATIVE_ERROR, TOP_KEY_COUNTERS};
use lb_reporter::{Aggregator, AggregatorConfig, Op, Outcome};

use crate::support::{exact_median, exact_top, partition, sketch_median, worker};

/// A quarter of the key space, so bucket positions are not those of the whole space.
const RANGE: KeyRange = KeyRange { start: Key(0x4000_0000_0000_0000), end: Key(0x7fff_ffff_ffff_ffff) };
/// The bound for the load median: 2 % of the partition's key space.
const MEDIAN_BOUND_RATIO: f64 = 0.02;
const N: usize = 200_000;

fn at(share: f64) -> u64 {
    RANGE.start.0 + (share * (RANGE.width() - 1.0)) as u64
}

/// One request of a stream: key, op, latency.
type Request = (u64, Op, Duration);

/// Records `stream` through `threads` recorders (round-robin chunks, as request threads would),
/// draining every 1,000 records, and returns the partition's report entry.
fn aggregate(stream: &[Request], threads: usize) -> PartitionStats {
    let mut agg = Aggregator::new(AggregatorConfig { ring_capacity: 4_096, ..AggregatorConfig::default() });
    let handle = agg.handle();
    let slot = handle.upsert_partition(partition("p", RANGE));
    let recorders: Vec<_> = (0..threads).map(|_| handle.recorder()).collect();
    for (i, chunk) in stream.chunks(250).enumerate() {
        for &(key, op, latency) in chunk {
            recorders[i % threads].record(slot, Key(key), op, 100, latency, Outcome::Ok);
        }
        if i % 4 == 3 {
            agg.drain();
        }
    }
    let report = agg.take_report(&worker(), 1, 1_000, 1_000);
    report.validate().expect("the report validates");
    assert_eq!(agg.stats().records_dropped_buffer_full_total, 0);
    report.partitions.into_iter().next().expect("the partition")
}

fn sketch(p: &PartitionStats) -> &KeySketch {
    p.sketch.as_ref().expect("a sketch")
}

fn keys(stream: &[Request]) -> Vec<u64> {
    stream.iter().map(|r| r.0).collect()
}

fn assert_median_within_bound(name: &str, stream: &[Request], p: &PartitionStats) {
    let exact = exact_median(&keys(stream));
    let got = sketch_median(RANGE, &sketch(p).bucket_ops);
    let off = (got - exact).abs() / RANGE.width();
    eprintln!("{name}: load median off by {:.3} % of the key space", off * 100.0);
    assert!(
        off <= MEDIAN_BOUND_RATIO,
        "{name}: sketch median {got} vs exact {exact}: {:.2} % of the range",
        off * 100.0
    );
}

/// The top key is the exact one, its share never above the truth and at most 1/32 below it.
fn assert_top_key_within_bound(name: &str, stream: &[Request], p: &PartitionStats) {
    let (key, truth) = exact_top(&keys(stream));
    let top = &sketch(p).top_keys[0];
    eprintln!("{name}: top key share {:.4} (exact {truth:.4})", top.share_ratio);
    assert_eq!(top.key, key, "{name}");
    assert!(top.share_ratio <= truth + 1e-12, "{name}: {} over the truth {truth}", top.share_ratio);
    assert!(truth - top.share_ratio <= 1.0 / TOP_KEY_COUNTERS as f64, "{name}: {} vs {truth}", top.share_ratio);
}

/// Zipf(1.1) over 20,000 keys at random positions of the range.
fn zipf_stream(rng: &mut SplitMix64) -> Vec<Request> {
    let keys: Vec<u64> = (0..20_000).map(|_| at(rng.next_f64())).collect();
    let weights: Vec<f64> = (1..=keys.len()).map(|r| 1.0 / (r as f64).powf(1.1)).collect();
    let total: f64 = weights.iter().sum();
    let mut cdf = Vec::with_capacity(weights.len());
    let mut acc = 0.0;
    for w in &weights {
        acc += w / total;
        cdf.push(acc);
    }
    (0..N)
        .map(|_| {
            let u = rng.next_f64();
            let rank = cdf.partition_point(|&c| c < u).min(keys.len() - 1);
            (keys[rank], if rng.below(10) < 7 { Op::Read } else { Op::Write }, Duration::from_micros(200))
        })
        .collect()
}

#[test]
fn zipf_median_and_top_key_are_within_their_bounds() {
    let stream = zipf_stream(&mut SplitMix64::new(1));
    let p = aggregate(&stream, 4);
    assert_eq!(p.read_ops + p.write_ops, N as u64);
    assert_median_within_bound("zipf", &stream, &p);
    assert_top_key_within_bound("zipf", &stream, &p);
}

#[test]
fn a_hot_range_median_lies_inside_it() {
    let mut rng = SplitMix64::new(2);
    // 80 % of the ops on [40 %, 45 %] of the range, the rest uniform.
    let stream: Vec<Request> = (0..N)
        .map(|_| {
            let share = if rng.below(10) < 8 { 0.40 + 0.05 * rng.next_f64() } else { rng.next_f64() };
            (at(share), Op::Read, Duration::from_micros(150))
        })
        .collect();
    let p = aggregate(&stream, 2);
    assert_median_within_bound("hot range", &stream, &p);
    let median = sketch_median(RANGE, &sketch(&p).bucket_ops);
    assert!((at(0.40) as f64..=at(0.45) as f64).contains(&median), "the split key falls in the hot range");
    // No single key stands out.
    assert!(sketch(&p).top_keys.is_empty(), "{:?}", sketch(&p).top_keys);
}

#[test]
fn a_single_hot_key_is_found_with_its_share() {
    let mut rng = SplitMix64::new(3);
    let hot = at(0.7);
    let stream: Vec<Request> = (0..N)
        .map(|_| {
            let key = if rng.below(100) < 60 { hot } else { at(rng.next_f64()) };
            (key, Op::Read, Duration::from_micros(100))
        })
        .collect();
    let p = aggregate(&stream, 4);
    assert_top_key_within_bound("hot key", &stream, &p);
    assert_eq!(sketch(&p).top_keys.len(), 1, "only the hot key holds over 1 %: {:?}", sketch(&p).top_keys);
    assert_median_within_bound("hot key", &stream, &p);
}

#[test]
fn an_append_tail_is_detected_and_spread_writes_are_not() {
    let mut rng = SplitMix64::new(4);
    // Writes append at a tail moving up from 99 % of the range (the last bucket), three writes
    // per key; reads spread; recorded by 4 threads, so the aggregator sees them interleaved.
    let append: Vec<Request> = (0..N)
        .map(|i| {
            if i % 5 == 0 {
                (at(rng.next_f64()), Op::Read, Duration::from_micros(100))
            } else {
                (at(0.99) + (i as u64 / 3) * 1_000_000, Op::Write, Duration::from_micros(300))
            }
        })
        .collect();
    let p = aggregate(&append, 4);
    let s = sketch(&p);
    // Exact: the share of writes at or past every earlier write's key, in stream order.
    let mut high = None;
    let (mut writes, mut sequential) = (0u64, 0u64);
    for &(k, op, _) in &append {
        if op == Op::Write {
            writes += 1;
            sequential += u64::from(high.is_some_and(|h| k >= h));
            high = Some(high.map_or(k, |h: u64| h.max(k)));
        }
    }
    let exact = sequential as f64 / writes as f64;
    eprintln!("append: sequential write ratio {:.4} (exact {exact:.4})", s.sequential_write_ratio);
    assert!(exact > 0.99 && s.sequential_write_ratio > 0.97, "{} vs {exact}", s.sequential_write_ratio);
    let last = *s.bucket_ops.last().expect("buckets");
    let total: u64 = s.bucket_ops.iter().sum();
    assert!(last as f64 > 0.7 * total as f64, "the tail's load is in the last bucket: {:?}", s.bucket_ops);

    let spread: Vec<Request> = (0..N).map(|_| (at(rng.next_f64()), Op::Write, Duration::from_micros(300))).collect();
    let p = aggregate(&spread, 4);
    assert!(sketch(&p).sequential_write_ratio < 0.02, "{}", sketch(&p).sequential_write_ratio);
}

#[test]
fn latency_quantiles_are_within_their_relative_bound() {
    let mut rng = SplitMix64::new(5);
    // Log-uniform from 20 µs to 200 ms, plus a slow tail.
    let stream: Vec<Request> = (0..N)
        .map(|i| {
            let us = 20.0 * 10f64.powf(4.0 * rng.next_f64()) * if i % 50 == 0 { 10.0 } else { 1.0 };
            (at(rng.next_f64()), Op::Read, Duration::from_nanos((us * 1_000.0) as u64))
        })
        .collect();
    let p = aggregate(&stream, 2);
    let mut ns: Vec<u64> = stream.iter().map(|r| r.2.as_nanos() as u64).collect();
    ns.sort_unstable();
    let exact = |q: f64| ns[(q * (ns.len() - 1) as f64).floor() as usize] as f64 / 1_000.0;
    for (got, truth) in [(p.latency_p50_us, exact(0.5)), (p.latency_p99_us, exact(0.99))] {
        eprintln!("latency: {got:.1} µs (exact {truth:.1} µs)");
        assert!((got - truth).abs() <= LATENCY_RELATIVE_ERROR * truth, "{got} vs {truth}");
    }
}

#[test]
fn concurrent_request_threads_lose_nothing_while_the_aggregator_drains() {
    const THREADS: usize = 4;
    const PER_THREAD: u64 = 50_000;
    let mut agg = Aggregator::new(AggregatorConfig { sketch_buckets: 16, ring_capacity: PER_THREAD as usize });
    let handle = agg.handle();
    let slot = handle.upsert_partition(partition("p", RANGE));
    let done = std::sync::atomic::AtomicUsize::new(0);
    let mut exact = [0u64; 16];
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let recorder = handle.recorder();
            let done = &done;
            s.spawn(move || {
                let mut rng = SplitMix64::new(t as u64);
                for _ in 0..PER_THREAD {
                    let key = at(rng.next_f64());
                    recorder.record(slot, Key(key), Op::Write, 10, Duration::from_micros(50), Outcome::Ok);
                }
                done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            });
        }
        while done.load(std::sync::atomic::Ordering::SeqCst) < THREADS {
            agg.drain();
        }
    });
    for t in 0..THREADS {
        let mut rng = SplitMix64::new(t as u64);
        for _ in 0..PER_THREAD {
            let key = at(rng.next_f64());
            exact[((key - RANGE.start.0) as u128 * 16 / RANGE.width() as u128) as usize] += 1;
        }
    }
    let report = agg.take_report(&worker(), 1, 1_000, 1_000);
    let p = &report.partitions[0];
    assert_eq!(p.write_ops, THREADS as u64 * PER_THREAD);
    assert_eq!(sketch(p).bucket_ops, exact.to_vec(), "bucket counts are exact");
    assert_eq!(agg.stats().records_total, THREADS as u64 * PER_THREAD);
}
