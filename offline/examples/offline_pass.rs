//! The offline pass benchmark (docs/benchmarks.md): an archive of `partitions` partitions ×
//! `days` days of hourly rollups on `workers` workers is written to a temporary directory, then
//! one offline pass ([`lb_offline::analyze`]) runs over it. Prints the rows, the archive's bytes
//! per partition-day, the pass's wall time and the process's peak resident memory.
//!
//! `cargo run --release -p lb-offline --example offline_pass -- [partitions] [days] [workers]`
//! (default 100000 14 100). `POLARS_MAX_THREADS` caps polars' threads.

use std::time::Instant;

use lb_common::ids::{Key, KeyRange};
use lb_common::protocol::HourlyRollup;
use lb_offline::archive::{DAY_MS, HOUR_MS, frame_of};
use lb_offline::{Archive, Layout, LayoutPartition, LayoutWorker, OfflineConfig, analyze};
use polars::prelude::ParquetWriter;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let arg = |i: usize, d: u64| std::env::args().nth(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (partitions, days, workers) = (arg(1, 100_000), arg(2, 14) as i64, arg(3, 100));
    let dir = tempfile::tempdir()?;
    let archive = Archive::new(dir.path().join("archive"));
    // 2026-11-02 00:00 UTC.
    let t0: i64 = 1_793_577_600_000;
    let tables = 100u64;
    let per_table = partitions / tables;
    let width = u64::MAX / per_table;
    let part = |i: u64| {
        let (t, k) = (i / per_table, i % per_table);
        let end = if k + 1 == per_table { u64::MAX } else { (k + 1) * width - 1 };
        (format!("t{t:03}"), format!("p{i:06}"), KeyRange { start: Key(k * width), end: Key(end) })
    };
    let started = Instant::now();
    let mut rows_written = 0u64;
    for day in 0..days {
        let dir = archive.day_dir(t0 + day * DAY_MS);
        std::fs::create_dir_all(&dir)?;
        for w in 0..workers {
            let mut rows = Vec::new();
            for i in (w..partitions).step_by(workers as usize) {
                let (table, id, range) = part(i);
                for h in 0..24 {
                    // A daily swing peaking at 12:00, different per partition.
                    let phase = ((h as f64 - 12.0) / 24.0 * std::f64::consts::TAU).cos();
                    let base = 200.0 + (i % 97) as f64 * 20.0;
                    let peak = base * (1.5 + phase);
                    rows.push(HourlyRollup {
                        hour_start_ms: t0 + day * DAY_MS + h * HOUR_MS,
                        tenant: "acme".parse()?,
                        table: table.parse()?,
                        partition_id: id.parse()?,
                        key_range: range,
                        sample_count: 360,
                        read_ops: (peak * 2400.0) as u64,
                        write_ops: (peak * 600.0) as u64,
                        read_bytes: (peak * 2400.0) as u64 * 512,
                        write_bytes: (peak * 600.0) as u64 * 512,
                        errors: 0,
                        rejected: 0,
                        cpu_time_us: (peak * 3600.0 * 20.0) as u64,
                        max_ops_per_sec: peak,
                        max_latency_p99_us: 800.0 + phase * 100.0,
                        stored_bytes: 1 << 30,
                    });
                }
            }
            rows_written += rows.len() as u64;
            let mut df = frame_of(&format!("w{w:03}"), rows.iter())?;
            let file = std::fs::File::create(dir.join(format!("w{w:03}.parquet")))?;
            ParquetWriter::new(file).finish(&mut df)?;
        }
    }
    let written = started.elapsed();
    let bytes = archive.bytes();
    let layout = Layout {
        partitions: (0..partitions)
            .map(|i| {
                let (table, id, range) = part(i);
                Ok(LayoutPartition {
                    id: id.parse()?,
                    tenant: "acme".parse()?,
                    table: table.parse()?,
                    range,
                    owner: format!("w{:03}", i % workers).parse()?,
                    limit_ops_per_sec: Some(10_000.0),
                    can_merge: true,
                    can_split: true,
                    split_at_ms: None,
                    busy: false,
                    ops_per_sec: 500.0,
                })
            })
            .collect::<Result<_, Box<dyn std::error::Error>>>()?,
        workers: (0..workers)
            .map(|w| Ok(LayoutWorker { id: format!("w{w:03}").parse()?, capacity_ops_per_sec: 1e6, ops_per_sec: 5e5 }))
            .collect::<Result<_, Box<dyn std::error::Error>>>()?,
    };
    let config = OfflineConfig { lookback_hours: (days * 24) as u32, ..OfflineConfig::default() };
    let now = t0 + days * DAY_MS;
    let started = Instant::now();
    let found = analyze(&archive, &layout, &config, now, &[])?;
    let pass = started.elapsed();
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let hwm = status.lines().find(|l| l.starts_with("VmHWM")).unwrap_or("VmHWM: ?").to_owned();
    println!(
        "rows {rows_written} ({partitions} partitions x {days} days x 24 h, {workers} workers), written in {:.1} s",
        written.as_secs_f64()
    );
    println!(
        "archive {bytes} bytes = {:.0} bytes per partition-day ({} files read, {} skipped)",
        bytes as f64 / (partitions as f64 * days as f64),
        found.coverage.files_read,
        found.coverage.files_skipped.len()
    );
    println!(
        "offline pass {:.2} s: {} merges, {} declined, {} peak forecasts, {} tables periodic; peak memory {}",
        pass.as_secs_f64(),
        found.merges.len(),
        found.declined_total,
        found.peaks.len(),
        found.tables.iter().filter(|t| t.periodic).count(),
        hwm.split_whitespace().skip(1).collect::<Vec<_>>().join(" ")
    );
    Ok(())
}
