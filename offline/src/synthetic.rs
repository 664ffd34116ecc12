//! A synthetic archive for benchmarks (the offline pass example, the master's bench of the
//! online pass while an offline one runs): `partitions` partitions in 100 tables on `workers`
//! workers, `days` days of hourly rollups from `t0_ms`, a daily swing per partition peaking at
//! 12:00, written as the archive writes them (one Parquet file per worker and day).

use lb_common::ids::{Key, KeyRange};
use lb_common::protocol::HourlyRollup;
use polars::prelude::ParquetWriter;

use crate::analysis::{Layout, LayoutPartition, LayoutWorker};
use crate::archive::{Archive, DAY_MS, HOUR_MS, frame_of};

/// Tables the partitions are spread over.
const TABLES: u64 = 100;

/// Writes the archive; returns the rows written and the layout the partitions have now.
pub fn write(
    archive: &Archive,
    partitions: u64,
    days: i64,
    workers: u64,
    t0_ms: i64,
) -> Result<(u64, Layout), Box<dyn std::error::Error + Send + Sync>> {
    let per_table = (partitions / TABLES).max(1);
    let width = u64::MAX / per_table;
    let part = |i: u64| {
        let (t, k) = (i / per_table, i % per_table);
        let end = if k + 1 == per_table { u64::MAX } else { (k + 1) * width - 1 };
        (format!("t{t:03}"), format!("p{i:06}"), KeyRange { start: Key(k * width), end: Key(end) })
    };
    let mut rows_written = 0u64;
    for day in 0..days {
        let dir = archive.day_dir(t0_ms + day * DAY_MS);
        std::fs::create_dir_all(&dir)?;
        for w in 0..workers {
            let mut rows = Vec::new();
            for i in (w..partitions).step_by(workers as usize) {
                let (table, id, range) = part(i);
                for h in 0..24 {
                    let phase = ((h as f64 - 12.0) / 24.0 * std::f64::consts::TAU).cos();
                    let base = 200.0 + (i % 97) as f64 * 20.0;
                    let peak = base * (1.5 + phase);
                    rows.push(HourlyRollup {
                        hour_start_ms: t0_ms + day * DAY_MS + h * HOUR_MS,
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
            .collect::<Result<_, Box<dyn std::error::Error + Send + Sync>>>()?,
        workers: (0..workers)
            .map(|w| Ok(LayoutWorker { id: format!("w{w:03}").parse()?, capacity_ops_per_sec: 1e6, ops_per_sec: 5e5 }))
            .collect::<Result<_, Box<dyn std::error::Error + Send + Sync>>>()?,
    };
    Ok((rows_written, layout))
}
