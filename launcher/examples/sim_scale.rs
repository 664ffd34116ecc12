//! The virtual-time benchmark of issue 5: 100,000 partitions on 1,000 workers for one
//! simulated hour at 1 s steps, with a mixed workload, a surge, a worker lost and one added.
//!
//! `cargo run --release --example sim_scale [-- SEED]`; prints the wall time and a checksum of
//! the final load (equal for equal seeds: the run is deterministic).

use std::time::{Duration, Instant};

use lb_testbed::Engine;
use lb_testbed::scenario::Scenario;

const SCENARIO: &str = r#"
name = "scale"
duration_secs = 3600
[cluster]
workers = 1000
worker_ops_per_sec = 50000
worker_bytes_per_sec = 500e6
partition_limit_ops_per_sec = 2000
partition_limit_bytes_per_sec = 20e6
[[tables]]
tenant = "big"
table = "t0"
partitions = 60000
[[tables.workloads]]
kind = "zipf"
ops_per_sec = 10000000
exponent = 0.9
segments = 65536
period_amplitude_ratio = 0.2
[[tables.workloads]]
kind = "hot_range"
ops_per_sec = 500000
start_key = "1000000000000000"
end_key = "10ffffffffffffff"
start_secs = 600
ramp_secs = 300
[[tables]]
tenant = "big"
table = "t1"
partitions = 40000
[[tables.workloads]]
kind = "uniform"
ops_per_sec = 8000000
[[tables.workloads]]
kind = "hot_key"
ops_per_sec = 3000
key = "7000000000000000"
[[tables.workloads]]
kind = "sequential_append"
ops_per_sec = 5000
read_ratio = 0.0
start_key = "0000000000000000"
keys_per_sec = 1e15
[[datasets]]
tenant = "big"
dataset = "ingest"
tenant_shards = 256
dataset_shards = 32
load_balancing = "fingerprint"
ops_per_sec = 100000
growth_ops_per_sec_per_hour = 100000
[[timeline]]
at_secs = 900
event = "surge"
tenant = "big"
table = "t1"
multiplier = 1.5
duration_secs = 600
[[timeline]]
at_secs = 1800
event = "worker_lost"
worker = "w-0042"
[[timeline]]
at_secs = 2400
event = "worker_added"
worker = "w-1000"
"#;

/// Flags: the scenario's seed.
#[derive(Debug, clap::Parser)]
struct Args {
    /// The scenario seed (the figures are deterministic per seed).
    #[arg(default_value_t = 0)]
    seed: u64,
}

fn main() -> anyhow::Result<()> {
    let seed = <Args as clap::Parser>::parse().seed;
    let mut scenario = Scenario::parse(SCENARIO, std::path::Path::new("sim_scale"))?;
    scenario.seed = seed;
    let built = Instant::now();
    let mut engine = Engine::new(&scenario);
    let build_secs = built.elapsed().as_secs_f64();
    let started = Instant::now();
    let mut splits = 0;
    let mut observe_secs = 0.0;
    let mut reported_partitions = 0usize;
    for step in 0..3600u32 {
        engine.step(Duration::from_secs(1));
        // Once a minute, what a master would read: the view and every worker's report.
        if step % 60 == 59 {
            let observed = Instant::now();
            let view = engine.view();
            let workers: Vec<_> = view.workers.iter().map(|w| w.id.clone()).collect();
            reported_partitions += engine.reports_for(&workers).iter().map(|r| r.partitions.len()).sum::<usize>();
            observe_secs += observed.elapsed().as_secs_f64();
        }
        // A light control loop so layout changes are part of the measured run.
        if step % 60 == 59 {
            let c = &engine.cluster;
            if let Some(p) = (0..c.partitions.len()).max_by(|&a, &b| c.demand_ops(a).total_cmp(&c.demand_ops(b))) {
                let range = c.partitions.range(p);
                let mid = lb_common::ids::Key(range.start.0 + (range.end.0 - range.start.0) / 2 + 1);
                let spec =
                    lb_common::protocol::ActionSpec::Split { partition: c.partitions.ids[p].clone(), split_key: mid };
                if engine.apply(spec).is_ok() {
                    splits += 1;
                }
            }
        }
    }
    let run_secs = started.elapsed().as_secs_f64();
    let s = engine.summary();
    println!(
        "partitions={} workers={} steps=3600 build={build_secs:.2}s run={run_secs:.2}s \
         (of which per-minute view + reports {observe_secs:.2}s, {reported_partitions} partition reports) splits={splits}",
        engine.cluster.partitions.len(),
        engine.cluster.workers.len()
    );
    println!(
        "final: max_ratio={:.4} mean_ratio={:.4} cv={:.4} demand={:.0} rejected={:.0} checksum={:016x}",
        s.max_demand_ratio,
        s.mean_demand_ratio,
        s.cv,
        s.demand_ops_per_sec,
        s.rejected_ops_per_sec,
        (s.demand_ops_per_sec.to_bits()
            ^ s.rejected_ops_per_sec.to_bits().rotate_left(17)
            ^ s.cv.to_bits().rotate_left(33))
    );
    Ok(())
}
