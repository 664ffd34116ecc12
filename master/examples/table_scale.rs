//! The master's MetricsTable at scale: `N` partitions on `W` workers ingested one second at a
//! time for `S` seconds (the 1 s ring is 80 s, so 90 s fills it), then its bytes per partition,
//! the ingest rate and the process's peak RSS (issue 19: a million partitions).
//!
//! `cargo run --release -p lb-master --example table_scale [-- N W S [STEP POINTS]]` (defaults
//! 1,000,000, 10,000 and 90; STEP and POINTS set the coarse ring, default 60 s × 360 = 6 h, as
//! `[table] coarse_step_ms` and `coarse_points` do).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_debug_implementations)]

use std::time::{Duration, Instant};

use lb_master::table::{MetricsTable, TableConfig};

#[path = "../benches/support/cluster.rs"]
#[allow(dead_code)]
mod cluster;

fn main() {
    let arg = |i: usize, default: usize| std::env::args().nth(i).map_or(default, |a| a.parse().expect("a number"));
    let (n, workers, secs) = (arg(1, 1_000_000), arg(2, 10_000), arg(3, 90));
    let mut cluster = cluster::Cluster::with_workers(n, 100, workers);
    // The default ceiling is 500,000 partitions (`[table] max_partitions`): raised to `n`.
    let defaults = TableConfig::default();
    let config = TableConfig {
        coarse_step: Duration::from_secs(arg(4, defaults.coarse_step.as_secs() as usize) as u64),
        coarse_points: arg(5, defaults.coarse_points as usize) as u32,
        max_partitions: n,
        max_workers: workers.max(TableConfig::default().max_workers),
        ..TableConfig::default()
    };
    let mut table = MetricsTable::new(config).unwrap();
    let (mut ingest, mut samples) = (Duration::ZERO, 0usize);
    let started = Instant::now();
    let mut ts = 1_700_000_000_000i64;
    for _ in 0..secs {
        ts += 1000;
        let batches = cluster.batches(ts, 1000);
        let t = Instant::now();
        for (w, batch) in &batches {
            table.ingest(w, batch, ts);
            samples += batch.len();
        }
        ingest += t.elapsed();
    }
    let m = table.memory_usage();
    println!(
        "{n} partitions on {workers} workers, {secs} s of 1 s samples ({samples} samples); the table holds {} partitions",
        m.partitions
    );
    println!(
        "ingest: {:.2} M samples/s on one thread ({:.1} s of {:.1} s wall; the rest builds the samples)",
        samples as f64 / ingest.as_secs_f64() / 1e6,
        ingest.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    println!(
        "table: history {} B/partition, entry {} B/partition, total {} B = {:.0} B/partition incl. workers and indexes",
        m.history_bytes_per_partition,
        m.entry_bytes_per_partition,
        m.total_bytes,
        m.total_bytes as f64 / m.partitions as f64
    );
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    for line in status.lines().filter(|l| l.starts_with("VmHWM") || l.starts_with("VmRSS")) {
        println!("process {line}");
    }
}
