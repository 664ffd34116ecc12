//! Each workload's demand as the master sees it: through the engine's load and the sketch.

use lb_common::ids::Key;
use lb_common::protocol::ActionSpec;

use crate::support::{demand, partition_at, scenario, sketch_median, step_secs};
use lb_common::protocol::KeySketch;
use lb_testbed::Engine;
use lb_testbed::model::report::SketchCache;

pub const HOT_RANGE: &str = r#"
[[tables.workloads]]
kind = "uniform"
ops_per_sec = 4000
[[tables.workloads]]
kind = "hot_range"
ops_per_sec = 8000
start_key = "4000000000000000"
end_key = "43ffffffffffffff"
start_secs = 10
ramp_secs = 20
"#;

#[test]
fn hot_range_ramps_up_and_splitting_at_the_load_median_halves_demand() {
    let mut engine = Engine::new(&scenario(3, 4, HOT_RANGE));
    let hot = partition_at(&engine, 0x4100_0000_0000_0000);
    step_secs(&mut engine, 5);
    assert!((demand(&engine, &hot) - 1000.0).abs() < 1.0, "before the ramp only the uniform quarter");
    step_secs(&mut engine, 15);
    let mid_ramp = demand(&engine, &hot);
    assert!((mid_ramp - 1000.0 - 4000.0).abs() < 1.0, "half-way up the ramp: {mid_ramp}");
    step_secs(&mut engine, 20);
    let full = demand(&engine, &hot);
    assert!((full - 9000.0).abs() < 1.0, "{full}");

    let owner = engine.cluster.partitions.owner[engine.cluster.partitions.find(&hot).expect("hot")] as usize;
    let worker = engine.cluster.workers.ids[owner].clone();
    let report = engine.report_for(&worker).expect("report");
    let stats = report.partitions.iter().find(|p| p.partition_id == hot).expect("hot partition reported");
    let sketch = stats.sketch.as_ref().expect("sketch");
    // The range is the partition's first 16th and carries 8/9 of its load: that bucket is drawn
    // again as 16 of its own (31 in all), so a split can cut inside the range.
    assert_eq!((sketch.bucket_ops.len(), sketch.bucket_bounds.len()), (31, 30), "{sketch:?}");
    let range_end = 0x43ff_ffff_ffff_ffff_u64;
    // (Partitions are `u64::MAX / 4` wide, so bucket edges sit a key off the range's.)
    assert!(sketch.bucket_bounds[15].0.abs_diff(range_end + 1) <= 1, "the refined buckets end where the range does");
    let inside: u64 = sketch.bucket_ops[..16].iter().sum();
    let total: u64 = sketch.bucket_ops.iter().sum();
    assert!(inside as f64 > 0.85 * total as f64, "{:?}", sketch.bucket_ops);
    assert!(sketch.bucket_ops[..16].iter().all(|&b| b.abs_diff(sketch.bucket_ops[0]) <= 2), "{:?}", sketch.bucket_ops);
    assert!(sketch.top_keys.is_empty(), "a hot range has no single hot key");
    let median = sketch_median(stats.key_range.start.0, stats.key_range.end.0, sketch);

    let op = engine.apply(ActionSpec::Split { partition: hot.clone(), split_key: median }).expect("split accepted");
    step_secs(&mut engine, 3);
    assert_eq!(engine.operation(&op).map(|o| o.state), Some(lb_common::protocol::OperationState::Succeeded));
    let left = demand(&engine, &hot);
    let right = demand(&engine, &partition_at(&engine, median.0));
    assert!((left - full / 2.0).abs() / full < 0.03, "left {left} of {full}");
    assert!((right - full / 2.0).abs() / full < 0.03, "right {right} of {full}");
}

pub const HOT_KEY: &str = r#"
[[tables.workloads]]
kind = "uniform"
ops_per_sec = 4000
[[tables.workloads]]
kind = "hot_key"
ops_per_sec = 9000
key = "5000000000000000"
"#;

#[test]
fn a_single_hot_key_shows_in_the_sketch_and_cannot_be_split_apart() {
    let mut engine = Engine::new(&scenario(3, 4, HOT_KEY));
    step_secs(&mut engine, 5);
    let hot = partition_at(&engine, 0x5000_0000_0000_0000);
    let w = engine.cluster.partitions.owner[engine.cluster.partitions.find(&hot).expect("hot")] as usize;
    let worker = engine.cluster.workers.ids[w].clone();
    let report = engine.report_for(&worker).expect("report");
    let sketch =
        report.partitions.iter().find(|p| p.partition_id == hot).and_then(|p| p.sketch.clone()).expect("sketch");
    assert_eq!(sketch.top_keys.len(), 1);
    assert_eq!(sketch.top_keys[0].key, Key(0x5000_0000_0000_0000));
    assert!((sketch.top_keys[0].share_ratio - 0.9).abs() < 0.01, "{:?}", sketch.top_keys);
    // Split right at the key and right after it: the key's whole load stays on one side.
    for split_key in [Key(0x5000_0000_0000_0000), Key(0x5000_0000_0000_0001)] {
        let mut e = engine.clone();
        let op = e.apply(ActionSpec::Split { partition: hot.clone(), split_key }).expect("split accepted");
        step_secs(&mut e, 3);
        assert!(e.operation(&op).is_some_and(|o| o.error.is_none()));
        let sides = [demand(&e, &hot), demand(&e, &partition_at(&e, split_key.0))];
        assert!(sides.iter().any(|&d| d >= 9000.0), "hot key split apart: {sides:?}");
    }
}

pub const APPEND: &str = r#"
[[tables.workloads]]
kind = "uniform"
ops_per_sec = 4000
read_ratio = 1.0
[[tables.workloads]]
kind = "sequential_append"
ops_per_sec = 5000
read_ratio = 0.0
value_bytes = 1000
start_key = "3ff0000000000000"
keys_per_sec = 1e13
"#;

#[test]
fn sequential_append_writes_at_a_moving_tail() {
    let mut engine = Engine::new(&scenario(3, 4, APPEND));
    step_secs(&mut engine, 2);
    let first = partition_at(&engine, 0x3ff0_0000_0000_0000);
    assert!((demand(&engine, &first) - 6000.0).abs() < 1.0);
    let p = engine.cluster.partitions.find(&first).expect("p");
    let w = engine.cluster.workers.ids[engine.cluster.partitions.owner[p] as usize].clone();
    let bytes_before = engine.cluster.partitions.stored_bytes[p];
    let report = engine.report_for(&w).expect("report");
    let stats = report.partitions.iter().find(|s| s.partition_id == first).expect("reported");
    let sketch = stats.sketch.as_ref().expect("sketch");
    assert!(sketch.sequential_write_ratio > 0.99, "{}", sketch.sequential_write_ratio);
    assert_eq!(sketch.top_keys.len(), 1, "the tail is the hot key");
    // 0x0010_0000_0000_0000 keys at 1e13 keys/s: the tail crosses into the next partition in ~450 s.
    step_secs(&mut engine, 500);
    let next = partition_at(&engine, 0x4000_0000_0000_0000);
    assert!((demand(&engine, &first) - 1000.0).abs() < 1.0, "the old tail partition cooled down");
    assert!((demand(&engine, &next) - 6000.0).abs() < 1.0, "the tail moved on");
    assert!(engine.cluster.partitions.stored_bytes[p] > bytes_before + 1e9, "appends grow the data");
}

#[test]
fn demand_above_limits_is_rejected_and_latency_rises_with_utilization() {
    let extra = r#"
[[tables.workloads]]
kind = "uniform"
ops_per_sec = 60000
"#;
    // 4 partitions of 15k ops/s against a 10k limit: a third of each is rejected.
    let mut engine = Engine::new(&scenario(3, 4, extra));
    step_secs(&mut engine, 2);
    let s = engine.summary();
    assert!((s.rejected_ops_per_sec - 20000.0).abs() < 1.0, "{s:?}");
    let w = engine.cluster.workers.ids[0].clone();
    let report = engine.report_for(&w).expect("report");
    let stats = &report.partitions[0];
    assert!(stats.rejected > 0 && stats.latency_p50_us > 1000.0, "{stats:?}");

    let light = r#"
[[tables.workloads]]
kind = "uniform"
ops_per_sec = 4000
"#;
    let mut calm = Engine::new(&scenario(3, 4, light));
    step_secs(&mut calm, 2);
    let calm_report = calm.report_for(&w).expect("report");
    let calm_stats = &calm_report.partitions[0];
    assert_eq!(calm_stats.rejected, 0);
    assert!(calm_stats.latency_p50_us < stats.latency_p50_us / 2.0);
    assert!(calm_stats.cpu_time_us > 0 && calm_stats.cpu_time_us < stats.cpu_time_us);
}

#[test]
fn worker_capacity_caps_served_load() {
    let extra = r#"
[[tables.workloads]]
kind = "uniform"
ops_per_sec = 390000
"#;
    // 64 partitions of ~6k (under the limit) on 2 ungrouped workers with 100k capacity each.
    let mut engine = Engine::new(&scenario(3, 64, extra));
    step_secs(&mut engine, 1);
    let view = engine.view();
    let w0 = &view.workers[0];
    assert!(w0.demand_ratio > 1.9 && (w0.served_ops_per_sec - 100_000.0).abs() < 1.0, "{w0:?}");
    assert!((engine.summary().rejected_ops_per_sec - 190_000.0).abs() < 1.0);
}

#[test]
fn hash_sharded_datasets_load_their_shard_owners_and_reshard_spreads_them() {
    let extra = r#"
[[datasets]]
tenant = "acme"
dataset = "ingest"
tenant_shards = 12
dataset_shards = 2
load_balancing = "fingerprint"
ops_per_sec = 60000
"#;
    let mut engine = Engine::new(&scenario(6, 4, extra));
    step_secs(&mut engine, 1);
    let topo = engine.topology();
    assert_eq!(topo.datasets.len(), 1);
    assert_eq!(topo.datasets[0].shard_owners.len(), 24, "6 workers x 4 tokens");
    let before = engine.summary().max_demand_ratio;
    let spec = lb_common::protocol::ActionSpec::Reshard {
        tenant: "acme".parse().expect("id"),
        dataset: "ingest".parse().expect("id"),
        tenant_shards: 12,
        dataset_shards: 12,
        load_balancing: lb_common::protocol::LoadBalancing::RoundRobin,
    };
    engine.apply(spec).expect("reshard accepted");
    step_secs(&mut engine, 6);
    let after = engine.summary().max_demand_ratio;
    assert!(after < before * 0.7, "reshard spreads the dataset: {before} -> {after}");
    assert_eq!(engine.topology().datasets[0].dataset_shards, 12);
}

#[test]
fn a_sketch_kept_with_its_cache_is_the_fresh_one_every_second_through_ramps_splits_and_moves() {
    // A hot range that ramps, a hot key, a uniform base; every partition's sketch written each
    // second into the same buffer with the same cache (as the simulator does) against a fresh
    // one: equal, also across a split and a move.
    let extra =
        format!("{HOT_RANGE}{}", HOT_KEY.replace("[[tables.workloads]]\nkind = \"uniform\"\nops_per_sec = 4000\n", ""));
    let mut engine = Engine::new(&scenario(3, 4, &extra));
    let mut kept: std::collections::HashMap<lb_common::ids::PartitionId, (SketchCache, KeySketch)> = Default::default();
    let mut compared = 0;
    for t in 0..45u64 {
        step_secs(&mut engine, 1);
        if t == 20 {
            let hot = partition_at(&engine, 0x4100_0000_0000_0000);
            engine.apply(ActionSpec::Split { partition: hot, split_key: Key(0x4200_0000_0000_0000) }).expect("split");
        }
        if t == 30 {
            let p = partition_at(&engine, 0x9000_0000_0000_0000);
            let c = &engine.cluster;
            let owner = c.partitions.owner[c.partitions.find(&p).expect("p")] as usize;
            let to = c.workers.ids[(owner + 1) % c.workers.len()].clone();
            engine.apply(ActionSpec::Move { partition: p, to_worker: to, max_bytes_per_sec: None }).expect("move");
        }
        let c = &engine.cluster;
        let t_secs = engine.t_secs();
        for p in 0..c.partitions.len() {
            let ops = c.window_counters(p).read_ops + c.window_counters(p).write_ops;
            let (cache, out) = kept.entry(c.partitions.ids[p].clone()).or_insert_with(|| {
                (
                    SketchCache::default(),
                    KeySketch {
                        bucket_ops: vec![],
                        bucket_bounds: vec![],
                        top_keys: vec![],
                        sequential_write_ratio: 0.0,
                    },
                )
            });
            c.sketch_cached(p, ops, t_secs, cache, out);
            assert_eq!(*out, c.sketch(p, ops, t_secs), "partition {} at {t_secs} s", c.partitions.ids[p]);
            compared += 1;
        }
        engine.cluster.load.reset_all_acc();
    }
    assert!(compared > 45 * 4, "every partition every second, and the split's new piece: {compared}");
}
