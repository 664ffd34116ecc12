//! MetricsTable benchmarks: ingest throughput, top-100 over 100k partitions, a 10k-partition ×
//! 360-window heatmap, bytes per partition (printed), and the online loop's whole analysis pass
//! over 100k partitions on 1k workers (the planner's input read from the table, then planning),
//! alone and while an offline pass runs beside it.
//!
//! `CARGO_TARGET_DIR=/work/scratch/target-table cargo bench --bench table`

#![allow(clippy::unwrap_used, clippy::expect_used, missing_debug_implementations)]

use lb_master::config::ApiLimits;
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use lb_common::ids::{TableId, TenantId};
use lb_common::protocol::{ActionKind, Capacity, Health, PartitionInfo, Topology, WorkerInfo};
use lb_master::online::observe::{KeptInput, planner_input, refresh_planner_input};
use lb_master::planner::{PlannerConfig, PlannerState, plan};
use lb_master::table::{GroupBy, Metric, MetricsTable, TableConfig};

#[path = "support/cluster.rs"]
mod cluster;

use cluster::Cluster;

const T0_MS: i64 = 1_700_000_000_000;
/// The analysis pass's cluster: the 100,000 partitions on 1,000 workers.
const PASS_PARTITIONS: usize = 100_000;
const PASS_WORKERS: usize = 1_000;

fn ingest(c: &mut Criterion) {
    let mut g = c.benchmark_group("ingest");
    let n = 10_000;
    g.throughput(Throughput::Elements(n as u64));
    let mut cluster = Cluster::new(n, 10);
    let mut table = MetricsTable::new(TableConfig::default()).unwrap();
    let mut ts = cluster.fill(&mut table, T0_MS, 100, 1000);
    g.bench_function("10k_partition_samples", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                ts += 1000;
                let batches = cluster.batches(ts, 1000);
                let start = Instant::now();
                for (w, batch) in &batches {
                    black_box(table.ingest(w, batch, ts));
                }
                total += start.elapsed();
            }
            total
        })
    });
    g.finish();
}

fn top_n(c: &mut Criterion) {
    let n = 100_000;
    let mut cluster = Cluster::new(n, 100);
    let mut table = MetricsTable::new(TableConfig::default()).unwrap();
    let now = cluster.fill(&mut table, T0_MS, 180, 1000);
    let m = table.memory_usage();
    println!(
        "memory: {} partitions, history {} B/partition, entry {} B/partition, total {} B ({:.0} B/partition incl. workers and indexes)",
        m.partitions,
        m.history_bytes_per_partition,
        m.entry_bytes_per_partition,
        m.total_bytes,
        m.total_bytes as f64 / m.partitions as f64
    );
    for b in table.error_bounds() {
        println!(
            "error bound {:>12}: fine ±{:.4}%, coarse ±{:.2}% (relative at ≥ {} {})",
            b.metric,
            b.fine_relative_error * 100.0,
            b.coarse_relative_error * 100.0,
            b.unit,
            b.metric.unit()
        );
    }
    let mut g = c.benchmark_group("top_n_100k_partitions");
    for (name, metric, group_by, last) in [
        ("ops_last_10s", Metric::Ops, GroupBy::None, 10),
        ("cpu_last_60s", Metric::Cpu, GroupBy::None, 60),
        ("latency_p99_last_60s", Metric::LatencyP99, GroupBy::None, 60),
        ("read_ops_last_10s", Metric::ReadOps, GroupBy::None, 10),
        ("ops_last_10s_by_table", Metric::Ops, GroupBy::Table, 10),
        ("ops_last_180s_fine_and_coarse", Metric::Ops, GroupBy::None, 180),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| black_box(table.top_n(metric, 100, group_by, Duration::from_secs(last), now).unwrap()))
        });
    }
    g.finish();
}

fn heatmap(c: &mut Criterion) {
    let n = 10_000;
    let mut cluster = Cluster::new(n, 1);
    let mut table = MetricsTable::new(TableConfig::default()).unwrap();
    // Six hours of 20 s samples (each spread over its 20 seconds) fill the coarse ring.
    let now = cluster.fill(&mut table, T0_MS, 6 * 3600, 20_000);
    let tenant = TenantId::new("tenant0").unwrap();
    let tbl = TableId::new("table0").unwrap();
    let from = now - 6 * 3_600_000;
    let hm = table.heatmap(&tenant, &tbl, Metric::Ops, from, now, 60_000, 256, &ApiLimits::default()).unwrap();
    println!("heatmap: {} rows × {} key buckets", hm.times_ms.len(), hm.key_buckets.len());
    let mut g = c.benchmark_group("heatmap_10k_partitions");
    g.sample_size(20);
    g.bench_function("360_windows_x_256_buckets_ops", |b| {
        b.iter(|| {
            black_box(table.heatmap(&tenant, &tbl, Metric::Ops, from, now, 60_000, 256, &ApiLimits::default()).unwrap())
        })
    });
    g.bench_function("360_windows_x_256_buckets_latency_p99", |b| {
        b.iter(|| {
            black_box(
                table
                    .heatmap(&tenant, &tbl, Metric::LatencyP99, from, now, 60_000, 256, &ApiLimits::default())
                    .unwrap(),
            )
        })
    });
    g.finish();
}

/// The topology the agents' samples describe: partition `i` on worker `i % workers`.
fn topology(cluster: &Cluster) -> Topology {
    let nw = cluster.workers.len();
    Topology {
        version: 1,
        workers: cluster
            .workers
            .iter()
            .map(|id| WorkerInfo {
                id: id.clone(),
                capacity: Capacity { ops_per_sec: 150_000.0, bytes_per_sec: 1e9 },
                cpu_cores: 0.0,
                group: None,
                health: Health::Healthy,
                zone: None,
                rack: None,
            })
            .collect(),
        partitions: cluster
            .templates
            .iter()
            .enumerate()
            .map(|(i, t)| PartitionInfo {
                id: t.partition_id.clone(),
                tenant: t.tenant.clone(),
                table: t.table.clone(),
                range: t.key_range,
                owner: cluster.workers[i % nw].clone(),
                group: None,
                stored_bytes: t.stored_bytes,
                // Ops (reads 0..999/s plus a third as writes) run to 1,332/s: the top 1 % are over
                // 0.9 of this limit, hot.
                limit: Some(Capacity { ops_per_sec: 1_480.0, bytes_per_sec: 1e8 }),
                supported_actions: ActionKind::ALL.to_vec(),
            })
            .collect(),
        datasets: Vec::new(),
        new_group_dedicates_owner: false,
        multi_way_split: false,
        move_rate_limit: false,
        merge_to_worker: false,
    }
}

/// The online loop's pass as it runs live: the planner's input built from the MetricsTable
/// (rates over the 5 s analyzer window, sketches, the topology), then `plan`.
fn analysis_pass(c: &mut Criterion) {
    let mut g = c.benchmark_group("analysis_pass");
    g.sample_size(20);
    let mut cluster = Cluster::with_workers(PASS_PARTITIONS, 10, PASS_WORKERS);
    let mut table = MetricsTable::new(TableConfig::default()).unwrap();
    let topo = topology(&cluster);
    table.apply_topology(&topo);
    let now = cluster.fill(&mut table, T0_MS, 10, 1000);
    let window = Duration::from_secs(5);
    let config = PlannerConfig::default();
    let mut state = PlannerState::default();
    // Warm the hysteresis so the measured pass is one that proposes, on the input the loop
    // keeps from pass to pass (the state then holds what it derives from that layout, as live).
    let mut kept = KeptInput::default();
    for k in 0..3 {
        refresh_planner_input(&mut kept, &table, &topo, window, now);
        plan(&kept.input, &config, &mut state, now + k * 1000);
    }
    let input = planner_input(&table, &topo, Vec::new(), window, now);
    let first = plan(&input, &config, &mut state.clone(), now + 3000);
    eprintln!(
        "analysis pass: {} partitions, {} workers, {} hot, {} proposals, {} declined",
        input.partitions.len(),
        input.workers.len(),
        first.stats.hot_partitions,
        first.proposals.len(),
        first.rejected.len()
    );
    g.bench_function("input_from_table_100k_partitions_1k_workers", |b| {
        b.iter(|| black_box(planner_input(&table, &topo, Vec::new(), window, now)))
    });
    // The steady state: the layout did not change since the last pass, so only the load is
    // re-read into the views the loop keeps (`Online` in analysis.rs), then the planner runs.
    g.bench_function("refresh_input_100k_partitions_1k_workers", |b| {
        b.iter(|| refresh_planner_input(black_box(&mut kept), &table, &topo, window, now))
    });
    // The plan alone, on the kept input (the part of the pass that holds no lock).
    g.bench_function("plan_kept_input_100k_partitions_1k_workers", |b| {
        b.iter_batched(
            || state.clone(),
            |mut st| black_box(plan(&kept.input, &config, &mut st, now + 3000)),
            criterion::BatchSize::LargeInput,
        )
    });
    let mut refresh_and_plan = |b: &mut criterion::Bencher<'_>| {
        b.iter_batched(
            || state.clone(),
            |mut st| {
                refresh_planner_input(&mut kept, &table, &topo, window, now);
                black_box(plan(&kept.input, &config, &mut st, now + 3000))
            },
            criterion::BatchSize::LargeInput,
        )
    };
    g.bench_function("refresh_and_plan_100k_partitions_1k_workers", &mut refresh_and_plan);
    // The same pass while an offline pass (the shipped one-week look-back over 100k partitions
    // on 100 workers) runs again and again on another thread, as the archiver runs it beside
    // the online loop: the online pass must not wait for it (run with POLARS_MAX_THREADS=1, as
    // the shipped config advises, for polars to keep to one core).
    let dir = tempfile::tempdir().unwrap();
    let archive = lb_offline::Archive::new(dir.path().join("archive"));
    let t0 = 1_793_577_600_000;
    let (rows, layout) = lb_offline::synthetic::write(&archive, PASS_PARTITIONS as u64, 7, 100, t0).unwrap();
    let offline = lb_offline::OfflineConfig::default();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let background = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            // As the archiver runs a pass: at the lowest OS priority.
            lb_offline::lower_this_threads_priority();
            let (mut passes, started) = (0u32, Instant::now());
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                lb_offline::analyze(&archive, &layout, &offline, t0 + 7 * lb_offline::DAY_MS, &[]).unwrap();
                passes += 1;
            }
            (passes, started.elapsed())
        })
    };
    g.bench_function("refresh_and_plan_100k_while_an_offline_pass_runs", &mut refresh_and_plan);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (passes, took) = background.join().unwrap();
    eprintln!(
        "offline passes beside it: {passes} over {rows} archived rows in {:.1} s ({:.1} s each)",
        took.as_secs_f64(),
        took.as_secs_f64() / f64::from(passes.max(1))
    );
    g.finish();
}

criterion_group!(benches, ingest, top_n, heatmap, analysis_pass);
criterion_main!(benches);
