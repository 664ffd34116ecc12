//! The offline pass benchmark (docs/benchmarks.md): an archive of `partitions` partitions ×
//! `days` days of hourly rollups on `workers` workers is written to a temporary directory, then
//! one offline pass ([`lb_offline::analyze`]) runs over it. Prints the rows, the archive's bytes
//! per partition-day, the pass's wall time and the process's peak resident memory.
//!
//! `cargo run --release -p lb-offline --example offline_pass -- [partitions] [days] [workers]`
//! (default 100000 14 100). `POLARS_MAX_THREADS` caps polars' threads.

use std::time::Instant;

use lb_offline::archive::DAY_MS;
use lb_offline::{Archive, OfflineConfig, analyze};

fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let arg = |i: usize, d: u64| std::env::args().nth(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (partitions, days, workers) = (arg(1, 100_000), arg(2, 14) as i64, arg(3, 100));
    let dir = tempfile::tempdir()?;
    let archive = Archive::new(dir.path().join("archive"));
    // 2026-11-02 00:00 UTC.
    let t0: i64 = 1_793_577_600_000;
    let started = Instant::now();
    let (rows_written, layout) = lb_offline::synthetic::write(&archive, partitions, days, workers, t0)?;
    let written = started.elapsed();
    let bytes = archive.bytes();
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
