//! The real-time mode's sketches: requests sampled from each workload and recorded through
//! lb-reporter, stepped at the real-time tick. The same shapes as the closed-form sketches in
//! `workloads.rs` must come out: a split key inside a hot range that halves it, a single hot key
//! with its share, an append tail.

use std::time::Duration;

use lb_common::ids::{Key, PartitionId};
use lb_common::protocol::{ActionSpec, KeySketch, PartitionStats};
use lb_testbed::Engine;

use crate::support::{demand, partition_at, scenario, sketch_median};
use crate::workloads::{APPEND, HOT_KEY, HOT_RANGE};

/// Steps `secs` seconds at the real-time tick (100 ms), as the ticker does.
fn tick_secs(engine: &mut Engine, secs: u64) {
    for _ in 0..secs * 10 {
        engine.step(Duration::from_millis(100));
    }
}

/// A sampling engine stepped `warm_secs`, then one more second after a report: that second's
/// report entry of the partition holding `key`.
fn one_second_report(extra: &str, warm_secs: u64, key: u64) -> (Engine, PartitionId, PartitionStats) {
    let mut engine = Engine::new(&scenario(3, 4, extra));
    engine.sample_traffic();
    tick_secs(&mut engine, warm_secs);
    let id = partition_at(&engine, key);
    let p = engine.cluster.partitions.find(&id).expect("partition");
    let worker = engine.cluster.workers.ids[engine.cluster.partitions.owner[p] as usize].clone();
    engine.report_for(&worker).expect("report");
    tick_secs(&mut engine, 1);
    let report = engine.report_for(&worker).expect("report");
    report.validate().expect("the report validates");
    let stats = report.partitions.into_iter().find(|s| s.partition_id == id).expect("reported");
    (engine, id, stats)
}

fn sketch(stats: &PartitionStats) -> &KeySketch {
    stats.sketch.as_ref().expect("a sketch from the sampled requests")
}

#[test]
fn a_sampled_hot_range_is_split_inside_it_into_halves() {
    let (mut engine, hot, stats) = one_second_report(HOT_RANGE, 40, 0x4100_0000_0000_0000);
    let s = sketch(&stats);
    // Counters stay modelled (9,000 ops/s), the buckets are the sample scaled to them.
    let total: u64 = s.bucket_ops.iter().sum();
    assert!((stats.ops() as f64 - 9_000.0).abs() < 10.0, "{}", stats.ops());
    assert!(total <= stats.ops() && total as f64 > 0.99 * stats.ops() as f64, "{total} of {}", stats.ops());
    assert!(s.top_keys.is_empty(), "a hot range has no single hot key: {:?}", s.top_keys);
    let median = sketch_median(stats.key_range.start.0, stats.key_range.end.0, s);
    assert!((0x4000_0000_0000_0000..=0x43ff_ffff_ffff_ffff).contains(&median.0), "{median:?}");
    let full = demand(&engine, &hot);
    engine.apply(ActionSpec::Split { partition: hot.clone(), split_key: median }).expect("split accepted");
    tick_secs(&mut engine, 3);
    let left = demand(&engine, &hot);
    assert!((left - full / 2.0).abs() / full < 0.05, "left {left} of {full}");
}

#[test]
fn a_sampled_hot_key_is_the_top_key_with_its_share() {
    let (_, _, stats) = one_second_report(HOT_KEY, 3, 0x5000_0000_0000_0000);
    let s = sketch(&stats);
    assert_eq!(s.top_keys.len(), 1, "{:?}", s.top_keys);
    assert_eq!(s.top_keys[0].key, Key(0x5000_0000_0000_0000));
    // 9,000 of 10,000 ops/s; the sample's share is within a few % of it.
    assert!((s.top_keys[0].share_ratio - 0.9).abs() < 0.04, "{:?}", s.top_keys);
}

#[test]
fn a_sampled_append_tail_is_sequential_and_in_the_last_bucket() {
    let (_, _, stats) = one_second_report(APPEND, 2, 0x3ff0_0000_0000_0000);
    let s = sketch(&stats);
    assert!(s.sequential_write_ratio > 0.95, "{}", s.sequential_write_ratio);
    let total: u64 = s.bucket_ops.iter().sum();
    let last = *s.bucket_ops.last().expect("buckets");
    assert!(last as f64 > 0.75 * total as f64, "5,000 of 6,000 ops/s on the tail: {:?}", s.bucket_ops);
}
