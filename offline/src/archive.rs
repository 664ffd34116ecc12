//! The archive: every worker's hourly rollups as Parquet, partitioned by day.
//!
//! **Layout** (Hive-style, read as is by DuckDB, Spark, Trino or polars):
//!
//! ```text
//! <root>/date=2026-12-01/<worker>.parquet   one file per (day, worker): that worker's rows of the day
//! <root>/date=2026-12-02/<worker>.parquet
//! ```
//!
//! One row per (worker, partition, hour) with the [`HourlyRollup`] fields ([`COLUMNS`]). A file
//! is rewritten whole (to a temporary name, then renamed) when rows of its day arrive, the old
//! rows and the new ones merged by (partition, hour): a late rollup, or the same hour fetched
//! again after a master restart, replaces its row instead of adding one (the more complete of
//! the two, by `sample_count`, wins). So each (worker, partition, hour) is there exactly once,
//! whatever is fetched twice.
//!
//! **Bad files.** A file that cannot be read is skipped with a warning and counted
//! ([`DayRead::skipped`]); when such a file would be rewritten it is moved aside first
//! (`<worker>.parquet.corrupt-<ms>`) so its bytes stay for a person to look at.
//!
//! **Retention.** [`Archive::prune`] removes day directories older than the retention.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::path::{Path, PathBuf};

use chrono::{DateTime, NaiveDate, Utc};
use lb_common::protocol::HourlyRollup;
use polars::prelude::*;
use tracing::warn;

/// One hour in milliseconds.
pub const HOUR_MS: i64 = 3_600_000;
/// One day in milliseconds.
pub const DAY_MS: i64 = 24 * HOUR_MS;

/// The columns of every archive file, in order.
pub const COLUMNS: [&str; 18] = [
    "worker",
    "tenant",
    "table",
    "partition",
    "key_start",
    "key_end",
    "hour_start_ms",
    "sample_count",
    "read_ops",
    "write_ops",
    "read_bytes",
    "write_bytes",
    "errors",
    "rejected",
    "cpu_time_us",
    "max_ops_per_sec",
    "max_latency_p99_us",
    "stored_bytes",
];

/// One archived row: a worker's rollup of one partition's hour.
#[derive(Debug, Clone, PartialEq)]
pub struct ArchiveRow {
    pub worker: String,
    pub rollup: HourlyRollup,
}

/// Why the archive could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("archive {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("archive {path}: {source}")]
    Parquet { path: PathBuf, source: PolarsError },
    #[error("worker id {0:?} cannot name an archive file")]
    WorkerName(String),
}

/// What [`Archive::append`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Appended {
    /// Rows that were not in the archive before.
    pub new_rows: usize,
    /// Rows that replaced an earlier copy of their (worker, partition, hour).
    pub replaced_rows: usize,
    /// Files written.
    pub files: usize,
    /// Unreadable files moved aside before being rewritten.
    pub corrupt_moved: usize,
}

/// One day's files as read for an analysis.
#[derive(Debug, Default)]
pub struct DayRead {
    /// The day's rows, every file concatenated (`None` when no file could be read).
    pub frame: Option<DataFrame>,
    pub files_read: usize,
    /// Files that could not be read, with why.
    pub skipped: Vec<(PathBuf, String)>,
    /// The workers with a file of the day, read or not.
    pub workers: Vec<String>,
}

/// The archive in a directory; see the module doc.
#[derive(Debug, Clone)]
pub struct Archive {
    root: PathBuf,
}

impl Archive {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory of the day that contains `ms`.
    pub fn day_dir(&self, ms: i64) -> PathBuf {
        self.root.join(format!("date={}", day_of(ms)))
    }

    /// Adds `rows` of `worker`, merging with what its day files hold (see the module doc).
    pub fn append(&self, worker: &str, rows: &[HourlyRollup]) -> Result<Appended, ArchiveError> {
        if worker.is_empty() || worker.contains(['/', '\\']) || worker.starts_with('.') {
            return Err(ArchiveError::WorkerName(worker.to_owned()));
        }
        let mut by_day: BTreeMap<NaiveDate, Vec<&HourlyRollup>> = BTreeMap::new();
        for r in rows {
            by_day.entry(day_of(r.hour_start_ms)).or_default().push(r);
        }
        let mut done = Appended::default();
        for (day, rows) in by_day {
            let dir = self.root.join(format!("date={day}"));
            fs::create_dir_all(&dir).map_err(|source| ArchiveError::Io { path: dir.clone(), source })?;
            let path = dir.join(format!("{worker}.parquet"));
            let mut merged: BTreeMap<(String, i64), HourlyRollup> = BTreeMap::new();
            if path.exists() {
                match read_file(&path, None).and_then(|df| rows_of(&df)) {
                    Ok(old) => {
                        for r in old {
                            merged.insert((r.rollup.partition_id.to_string(), r.rollup.hour_start_ms), r.rollup);
                        }
                    }
                    Err(error) => {
                        let aside = path.with_extension(format!("parquet.corrupt-{}", Utc::now().timestamp_millis()));
                        warn!(path = %path.display(), %error, aside = %aside.display(), "unreadable archive file moved aside");
                        fs::rename(&path, &aside).map_err(|source| ArchiveError::Io { path: path.clone(), source })?;
                        done.corrupt_moved += 1;
                    }
                }
            }
            for r in rows {
                let key = (r.partition_id.to_string(), r.hour_start_ms);
                match merged.get(&key) {
                    None => {
                        done.new_rows += 1;
                        merged.insert(key, r.clone());
                    }
                    Some(old) => {
                        done.replaced_rows += 1;
                        if r.sample_count >= old.sample_count {
                            merged.insert(key, r.clone());
                        }
                    }
                }
            }
            let mut df = frame_of(worker, merged.values())
                .map_err(|source| ArchiveError::Parquet { path: path.clone(), source })?;
            write_atomically(&path, &mut df)?;
            done.files += 1;
        }
        Ok(done)
    }

    /// The days with a directory, oldest first.
    pub fn days(&self) -> Vec<NaiveDate> {
        let Ok(entries) = fs::read_dir(&self.root) else { return Vec::new() };
        let mut days: Vec<NaiveDate> = entries
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str().and_then(|n| n.strip_prefix("date=")).and_then(|d| d.parse().ok()))
            .collect();
        days.sort();
        days
    }

    /// Removes the day directories wholly older than `retention_days` before `now_ms`; returns
    /// how many went.
    pub fn prune(&self, retention_days: u32, now_ms: i64) -> Result<usize, ArchiveError> {
        let oldest_kept = day_of(now_ms - i64::from(retention_days) * DAY_MS);
        let mut removed = 0;
        for day in self.days().into_iter().filter(|d| *d < oldest_kept) {
            let dir = self.root.join(format!("date={day}"));
            fs::remove_dir_all(&dir).map_err(|source| ArchiveError::Io { path: dir, source })?;
            removed += 1;
        }
        Ok(removed)
    }

    /// The newest hour (start, ms) archived for `worker` in the day of `ms` or the day before,
    /// for a restarted collector to know where to resume (it refetches from there: the merge
    /// makes refetching harmless).
    pub fn last_hour(&self, worker: &str, now_ms: i64) -> Option<i64> {
        [now_ms, now_ms - DAY_MS].into_iter().find_map(|ms| {
            let path = self.day_dir(ms).join(format!("{worker}.parquet"));
            let df = read_file(&path, Some(&["hour_start_ms"])).ok()?;
            df.column("hour_start_ms").ok()?.i64().ok()?.max()
        })
    }

    /// Reads one day's files (only `columns`, or all): unreadable ones are skipped with a
    /// warning and a counter.
    pub fn read_day(&self, day: NaiveDate, columns: Option<&[&str]>) -> DayRead {
        let dir = self.root.join(format!("date={day}"));
        let mut out = DayRead::default();
        let Ok(entries) = fs::read_dir(&dir) else { return out };
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "parquet"))
            .collect();
        files.sort();
        out.workers = files.iter().filter_map(|p| p.file_stem().and_then(|s| s.to_str()).map(str::to_owned)).collect();
        let mut frames = Vec::with_capacity(files.len());
        for path in files {
            match read_file(&path, columns) {
                Ok(df) => {
                    out.files_read += 1;
                    frames.push((path, df));
                }
                Err(error) => {
                    warn!(path = %path.display(), %error, "archive file skipped");
                    out.skipped.push((path, error.to_string()));
                }
            }
        }
        let mut iter = frames.into_iter();
        if let Some((_, mut first)) = iter.next() {
            for (path, df) in iter {
                // A file of another shape (columns renamed or retyped by hand, another
                // version's) is skipped and counted like an unreadable one: the pass is partial.
                // Appended to a copy (columns are shared, not copied): a failed append leaves
                // the columns it reached longer than the rest.
                let mut next = first.clone();
                match next.vstack_mut_owned(df) {
                    Ok(_) => first = next,
                    Err(error) => {
                        warn!(path = %path.display(), %error, "archive file of another shape skipped");
                        out.files_read -= 1;
                        out.skipped.push((path, format!("another shape than the day's first file: {error}")));
                    }
                }
            }
            out.frame = Some(first);
        }
        out
    }

    /// Bytes on disk under the archive (the benchmark's bytes per partition-day).
    pub fn bytes(&self) -> u64 {
        fn walk(p: &Path) -> u64 {
            let Ok(entries) = fs::read_dir(p) else { return 0 };
            entries
                .filter_map(|e| e.ok())
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => walk(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        }
        walk(&self.root)
    }
}

/// The UTC day of `ms`.
pub fn day_of(ms: i64) -> NaiveDate {
    DateTime::<Utc>::from_timestamp_millis(ms).unwrap_or_default().date_naive()
}

/// Midnight UTC of `day`, in ms.
pub fn day_start_ms(day: NaiveDate) -> i64 {
    day.and_hms_opt(0, 0, 0).map_or(0, |t| t.and_utc().timestamp_millis())
}

fn read_file(path: &Path, columns: Option<&[&str]>) -> PolarsResult<DataFrame> {
    let file = File::open(path).map_err(|e| PolarsError::ComputeError(format!("open: {e}").into()))?;
    let reader = ParquetReader::new(file);
    let reader = match columns {
        Some(c) => reader.with_columns(Some(c.iter().map(|s| s.to_string()).collect())),
        None => reader,
    };
    reader.finish()
}

fn write_atomically(path: &Path, df: &mut DataFrame) -> Result<(), ArchiveError> {
    let tmp = path.with_extension("parquet.tmp");
    let io = |source| ArchiveError::Io { path: tmp.clone(), source };
    let file = File::create(&tmp).map_err(io)?;
    ParquetWriter::new(&file)
        .with_compression(ParquetCompression::Snappy)
        .finish(df)
        .map_err(|source| ArchiveError::Parquet { path: tmp.clone(), source })?;
    file.sync_all().map_err(io)?;
    fs::rename(&tmp, path).map_err(|source| ArchiveError::Io { path: path.to_owned(), source })
}

/// The frame of `worker`'s rows, in [`COLUMNS`] order.
pub fn frame_of<'a>(worker: &str, rows: impl Iterator<Item = &'a HourlyRollup> + Clone) -> PolarsResult<DataFrame> {
    let n = rows.clone().count();
    let s = |f: fn(&HourlyRollup) -> String| rows.clone().map(f).collect::<Vec<_>>();
    let u = |f: fn(&HourlyRollup) -> u64| rows.clone().map(f).collect::<Vec<_>>();
    let x = |f: fn(&HourlyRollup) -> f64| rows.clone().map(f).collect::<Vec<_>>();
    DataFrame::new(
        n,
        vec![
            Column::new("worker".into(), vec![worker.to_owned(); n]),
            Column::new("tenant".into(), s(|r| r.tenant.to_string())),
            Column::new("table".into(), s(|r| r.table.to_string())),
            Column::new("partition".into(), s(|r| r.partition_id.to_string())),
            Column::new("key_start".into(), u(|r| r.key_range.start.0)),
            Column::new("key_end".into(), u(|r| r.key_range.end.0)),
            Column::new("hour_start_ms".into(), rows.clone().map(|r| r.hour_start_ms).collect::<Vec<_>>()),
            Column::new("sample_count".into(), rows.clone().map(|r| r.sample_count).collect::<Vec<_>>()),
            Column::new("read_ops".into(), u(|r| r.read_ops)),
            Column::new("write_ops".into(), u(|r| r.write_ops)),
            Column::new("read_bytes".into(), u(|r| r.read_bytes)),
            Column::new("write_bytes".into(), u(|r| r.write_bytes)),
            Column::new("errors".into(), u(|r| r.errors)),
            Column::new("rejected".into(), u(|r| r.rejected)),
            Column::new("cpu_time_us".into(), u(|r| r.cpu_time_us)),
            Column::new("max_ops_per_sec".into(), x(|r| r.max_ops_per_sec)),
            Column::new("max_latency_p99_us".into(), x(|r| r.max_latency_p99_us)),
            Column::new("stored_bytes".into(), u(|r| r.stored_bytes)),
        ],
    )
}

/// The rows of an archive frame (all [`COLUMNS`]).
pub fn rows_of(df: &DataFrame) -> PolarsResult<Vec<ArchiveRow>> {
    let h = df.height();
    let st = |n: &str| -> PolarsResult<Vec<String>> {
        let c = df.column(n)?.str()?;
        Ok((0..h).map(|i| c.get(i).unwrap_or_default().to_owned()).collect())
    };
    let u = |n: &str| -> PolarsResult<Vec<u64>> {
        let c = df.column(n)?.u64()?;
        Ok((0..h).map(|i| c.get(i).unwrap_or(0)).collect())
    };
    let x = |n: &str| -> PolarsResult<Vec<f64>> {
        let c = df.column(n)?.f64()?;
        Ok((0..h).map(|i| c.get(i).unwrap_or(0.0)).collect())
    };
    let (worker, tenant, table, partition) = (st("worker")?, st("tenant")?, st("table")?, st("partition")?);
    let (key_start, key_end) = (u("key_start")?, u("key_end")?);
    let hour_col = df.column("hour_start_ms")?.i64()?;
    let hour: Vec<i64> = (0..h).map(|i| hour_col.get(i).unwrap_or(0)).collect();
    let samples_col = df.column("sample_count")?.u32()?;
    let samples: Vec<u32> = (0..h).map(|i| samples_col.get(i).unwrap_or(0)).collect();
    let (read_ops, write_ops, read_bytes, write_bytes) =
        (u("read_ops")?, u("write_ops")?, u("read_bytes")?, u("write_bytes")?);
    let (errors, rejected, cpu, stored) = (u("errors")?, u("rejected")?, u("cpu_time_us")?, u("stored_bytes")?);
    let (max_ops, max_p99) = (x("max_ops_per_sec")?, x("max_latency_p99_us")?);
    let bad = |what: &str, v: &str| PolarsError::ComputeError(format!("{what} {v:?}: not a valid id").into());
    let mut out = Vec::with_capacity(df.height());
    for i in 0..df.height() {
        out.push(ArchiveRow {
            worker: worker[i].clone(),
            rollup: HourlyRollup {
                hour_start_ms: hour[i],
                tenant: tenant[i].parse().map_err(|_| bad("tenant", &tenant[i]))?,
                table: table[i].parse().map_err(|_| bad("table", &table[i]))?,
                partition_id: partition[i].parse().map_err(|_| bad("partition", &partition[i]))?,
                key_range: lb_common::ids::KeyRange {
                    start: lb_common::ids::Key(key_start[i]),
                    end: lb_common::ids::Key(key_end[i]),
                },
                sample_count: samples[i],
                read_ops: read_ops[i],
                write_ops: write_ops[i],
                read_bytes: read_bytes[i],
                write_bytes: write_bytes[i],
                errors: errors[i],
                rejected: rejected[i],
                cpu_time_us: cpu[i],
                max_ops_per_sec: max_ops[i],
                max_latency_p99_us: max_p99[i],
                stored_bytes: stored[i],
            },
        });
    }
    Ok(out)
}
