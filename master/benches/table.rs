//! MetricsTable benchmarks: ingest throughput, top-100 over 100k partitions, a 10k-partition ×
//! 360-window heatmap, and bytes per partition (printed).
//!
//! `CARGO_TARGET_DIR=/work/scratch/target-table cargo bench --bench table`

#![allow(clippy::unwrap_used, clippy::expect_used, missing_debug_implementations)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use lb_common::ids::{Key, KeyRange, PartitionId, TableId, TenantId, WorkerId};
use lb_common::protocol::{Cursor, PartitionStats, Sample, SampleData};
use lb_master::table::{GroupBy, Metric, MetricsTable, TableConfig};

const T0_MS: i64 = 1_700_000_000_000;
const WORKERS: usize = 100;

/// A cluster of `n` partitions over `tables` tables, spread over [`WORKERS`] workers, that
/// produces one second (or `interval_ms`) of samples at a time.
struct Cluster {
    templates: Vec<PartitionStats>,
    workers: Vec<WorkerId>,
    cursors: Vec<u64>,
}

impl Cluster {
    fn new(n: usize, tables: usize) -> Self {
        let per_table = n.div_ceil(tables) as u64;
        let width = u64::MAX / per_table;
        let templates = (0..n)
            .map(|i| {
                let j = i as u64 % per_table;
                let end = if j + 1 == per_table { u64::MAX } else { (j + 1) * width - 1 };
                PartitionStats {
                    tenant: TenantId::new(format!("tenant{}", i % 10)).unwrap(),
                    table: TableId::new(format!("table{}", i % tables)).unwrap(),
                    partition_id: PartitionId::new(format!("p{i}")).unwrap(),
                    key_range: KeyRange { start: Key(j * width), end: Key(end) },
                    read_ops: 0,
                    write_ops: 0,
                    read_bytes: 0,
                    write_bytes: 0,
                    errors: 0,
                    rejected: 0,
                    latency_p50_us: 200.0,
                    latency_p99_us: 2_000.0,
                    cpu_time_us: 0,
                    stored_bytes: 1 << 30,
                    sketch: None,
                }
            })
            .collect();
        let workers = (0..WORKERS).map(|w| WorkerId::new(format!("w{w}")).unwrap()).collect();
        Self { templates, workers, cursors: vec![0; WORKERS] }
    }

    /// Per worker, the samples of all partitions for the interval ending at `ts_ms`.
    fn batches(&mut self, ts_ms: i64, interval_ms: u64) -> Vec<(WorkerId, Vec<Sample>)> {
        let mut out: Vec<(WorkerId, Vec<Sample>)> = self.workers.iter().map(|w| (w.clone(), Vec::new())).collect();
        for (i, t) in self.templates.iter().enumerate() {
            let w = i % WORKERS;
            let mut s = t.clone();
            // A skewed, time-varying load so that top-N and the heatmap have something to rank.
            let ops = ((i * 7919 + ts_ms as usize / 1000) % 1000) as u64 * (interval_ms / 1000);
            s.read_ops = ops;
            s.write_ops = ops / 3;
            s.read_bytes = ops * 512;
            s.cpu_time_us = ops * 20;
            s.rejected = ops / 100;
            self.cursors[w] += 1;
            out[w].1.push(Sample {
                cursor: Cursor(self.cursors[w]),
                timestamp_ms: ts_ms,
                interval_ms,
                data: SampleData::Partition(s),
            });
        }
        out
    }

    fn fill(&mut self, table: &mut MetricsTable, from_ms: i64, secs: i64, interval_ms: u64) -> i64 {
        let step = interval_ms as i64;
        let mut ts = from_ms;
        for _ in 0..(secs * 1000 / step) {
            ts += step;
            for (w, batch) in self.batches(ts, interval_ms) {
                table.ingest(&w, &batch, ts);
            }
        }
        ts
    }
}

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
    let hm = table.heatmap(&tenant, &tbl, Metric::Ops, from, now, 60_000, 256).unwrap();
    println!("heatmap: {} rows × {} key buckets", hm.times_ms.len(), hm.key_buckets.len());
    let mut g = c.benchmark_group("heatmap_10k_partitions");
    g.sample_size(20);
    g.bench_function("360_windows_x_256_buckets_ops", |b| {
        b.iter(|| black_box(table.heatmap(&tenant, &tbl, Metric::Ops, from, now, 60_000, 256).unwrap()))
    });
    g.bench_function("360_windows_x_256_buckets_latency_p99", |b| {
        b.iter(|| black_box(table.heatmap(&tenant, &tbl, Metric::LatencyP99, from, now, 60_000, 256).unwrap()))
    });
    g.finish();
}

criterion_group!(benches, ingest, top_n, heatmap);
criterion_main!(benches);
