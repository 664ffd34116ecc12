//! The MetricStore: SQLite (WAL) on the agent's disk, one writer thread, group commit.
//!
//! Contract:
//! - [`MetricStore::write_report`] returns only after the report's samples are committed (and
//!   appended to the in-memory window); a retried report is recognised and not stored twice.
//! - Cursors are SQLite `AUTOINCREMENT` row ids: strictly increasing, never reused, stable
//!   across restarts — also when the `-wal` file is lost: the cursor mark beside the file
//!   (see `mark`) reveals the loss, new cursors continue above it, and pullers get `gap`. [`MetricStore::samples`] serves `cursor > after` from the window when it
//!   holds all of them, else from SQLite, with `gap` when retention removed some.
//! - Rollups are exact (see `rollup`), retention deletes a cursor prefix in bounded chunks.

mod codec;
pub mod mark;
mod rollup;
pub mod schema;
mod writer;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use lb_common::ids::{Key, KeyRange};
use lb_common::protocol::{Cursor, HostStats, HourlyRollup, PartitionStats, Report, Sample, SampleData};
use rusqlite::{Connection, OptionalExtension};
use tokio::sync::{mpsc, oneshot, watch};

use crate::config::{AgentConfig, OnCorruption, Synchronous};
use crate::window::{Record, RecordData, Window};
use codec::{decode_sketch, from_sql};
pub use writer::ReportOutcome;
use writer::{Command, Writer, get_meta};

const META_ROLLED_THROUGH: &str = "rolled_through";
const META_EXPIRED_THROUGH: &str = "expired_through";
/// Every loss the cursor mark revealed: cursors `(from, through]` were acknowledged and are
/// gone. Each is a `meta` row `lost.<from>` = `through`; stores written before every loss was
/// kept hold their one (last) loss as `lost_from` / `lost_through`, still read.
const META_LOST_PREFIX: &str = "lost.";
const META_LOST_FROM: &str = "lost_from";
const META_LOST_THROUGH: &str = "lost_through";

/// Commands queued for the writer before callers wait: a second of 1 s reports from a few
/// hundred workers' worth of bursts, and the back-pressure point when the disk is slow.
const COMMAND_QUEUE: usize = 4096;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Open(#[from] schema::OpenError),
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("store write failed: {0}")]
    Write(String),
    #[error("the store is shut down")]
    Closed,
    #[error(
        "the agent's store {path} is damaged ({error}). To start with an empty store (its samples \
         are lost; pullers are told gap: true), move it aside with its -wal and -shm files \
         (mv {path} {path}.damaged), or set [store] on_corruption = \"move_aside\" to do so at start-up"
    )]
    Corrupt { path: String, error: String },
}

impl StoreError {
    /// SQLite found the file damaged: not a database, or a malformed page.
    fn is_corruption(&self) -> bool {
        let sqlite = match self {
            StoreError::Open(schema::OpenError::Open { source, .. } | schema::OpenError::Migrate { source, .. }) => {
                source
            }
            StoreError::Sqlite(source) => source,
            _ => return false,
        };
        matches!(
            sqlite.sqlite_error_code(),
            Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
        )
    }
}

/// State the writer publishes for readers without a lock.
#[derive(Debug, Default)]
pub struct Shared {
    latest_cursor: AtomicU64,
    expired_through: AtomicU64,
    /// Every loss of acknowledged samples: cursors in `(from, through]`, oldest first.
    lost: RwLock<Vec<(Cursor, Cursor)>>,
    /// Why the last commit failed, until one succeeds (a full disk): the agent is not ready.
    write_failure: RwLock<Option<String>>,
    /// What the last integrity check found wrong with the file, until one passes.
    damage: RwLock<Option<String>>,
}

/// Every recorded loss, oldest first (see [`META_LOST_PREFIX`]).
fn lost_ranges(conn: &Connection) -> rusqlite::Result<Vec<(Cursor, Cursor)>> {
    let mut ranges: Vec<(Cursor, Cursor)> = conn
        .prepare("SELECT key, value FROM meta WHERE key LIKE 'lost.%'")?
        .query_map([], |row| Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?)))?
        .filter_map(|row| {
            let (key, through) = row.ok()?;
            let from = key.strip_prefix(META_LOST_PREFIX)?.parse::<u64>().ok()?;
            Some((Cursor(from), Cursor(through as u64)))
        })
        .collect();
    if let (Some(from), Some(through)) = (get_meta(conn, META_LOST_FROM)?, get_meta(conn, META_LOST_THROUGH)?)
        && through > from
    {
        ranges.push((Cursor(from as u64), Cursor(through as u64)));
    }
    ranges.sort();
    ranges.dedup();
    Ok(ranges)
}

/// One page of `GET /v1/samples`.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplesPage {
    pub samples: Vec<Sample>,
    pub next_cursor: Cursor,
    pub gap: bool,
    pub more: bool,
}

#[derive(Debug)]
pub struct MetricStore {
    commands: mpsc::Sender<Command>,
    reader: Arc<Mutex<Connection>>,
    window: Arc<RwLock<Window>>,
    shared: Arc<Shared>,
    writer_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl MetricStore {
    /// Opens (creating or migrating) the file, reloads the recent window, starts the writer. A
    /// damaged file is refused with what to do, or moved aside (`store.on_corruption`).
    pub fn open(config: watch::Receiver<Arc<AgentConfig>>) -> Result<Self, StoreError> {
        let cfg = config.borrow().clone();
        match Self::open_file(config.clone()) {
            Err(err) if err.is_corruption() => {
                let path = cfg.store.path.display().to_string();
                if cfg.store.on_corruption == OnCorruption::Fail {
                    return Err(StoreError::Corrupt { path, error: err.to_string() });
                }
                let aside = move_aside(&cfg.store.path)
                    .map_err(|e| StoreError::Write(format!("cannot move the damaged store {path} aside: {e}")))?;
                tracing::error!(
                    %path,
                    moved_to = %aside.display(),
                    error = %err,
                    "the store was damaged: moved aside, starting with an empty one (pullers are told gap: true)"
                );
                metrics::counter!("lb_agent_store_moved_aside_total").increment(1);
                Self::open_file(config)
            }
            other => other,
        }
    }

    fn open_file(config: watch::Receiver<Arc<AgentConfig>>) -> Result<Self, StoreError> {
        let cfg = config.borrow().clone();
        let conn = schema::open_writer(&cfg.store.path, cfg.store.synchronous)?;
        let reader = schema::open_reader(&cfg.store.path)?;
        let shared = Arc::new(Shared::default());
        let mut latest: i64 = conn
            .query_row("SELECT seq FROM sqlite_sequence WHERE name = 'samples'", [], |r| r.get(0))
            .optional()?
            .unwrap_or(0);
        let mark_path = mark::path_of(&cfg.store.path);
        let (mut mark, held) = mark::CursorMark::open(&cfg.store.path, cfg.store.synchronous == Synchronous::Full)
            .map_err(|e| StoreError::Write(format!("cannot open the cursor mark {}: {e}", mark_path.display())))?;
        if let Some(held) = held.and_then(|h| i64::try_from(h).ok()).filter(|&h| h > latest) {
            tracing::error!(
                path = %cfg.store.path.display(),
                lost_from = latest,
                lost_through = held,
                "acknowledged samples are missing from the store (its -wal file was lost or damaged, or the store was replaced): \
                 new cursors continue above the lost ones and pullers are told gap: true"
            );
            metrics::counter!("lb_agent_store_lost_samples_total").increment((held - latest) as u64);
            writer::record_loss(&conn, latest, held)?;
            // Into the main file now: a later loss of the -wal file must not take this record
            // with it.
            conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
            latest = held;
        }
        mark.record(latest as u64)
            .map_err(|e| StoreError::Write(format!("cannot write the cursor mark {}: {e}", mark_path.display())))?;
        shared.latest_cursor.store(latest as u64, Ordering::Release);
        *shared.lost.write().expect("lost lock is never poisoned") = lost_ranges(&conn)?;
        shared.expired_through.store(get_meta(&conn, META_EXPIRED_THROUGH)?.unwrap_or(0) as u64, Ordering::Release);
        let window = Arc::new(RwLock::new(load_window(&reader, &cfg, Cursor(latest as u64))?));
        let writer = Writer::new(conn, config, window.clone(), shared.clone(), mark)?;
        let (commands, rx) = mpsc::channel(COMMAND_QUEUE);
        let thread = std::thread::Builder::new()
            .name("lb-agent-store-writer".to_owned())
            .spawn(move || writer.run(rx))
            .map_err(|e| StoreError::Write(format!("cannot start the writer thread: {e}")))?;
        let window_len = window.read().expect("window lock is never poisoned").len();
        tracing::info!(path = %cfg.store.path.display(), latest_cursor = latest, window_samples = window_len, "store open");
        Ok(Self {
            commands,
            reader: Arc::new(Mutex::new(reader)),
            window,
            shared,
            writer_thread: Mutex::new(Some(thread)),
        })
    }

    /// Stores a validated report; returns once it is committed.
    pub async fn write_report(&self, report: Report) -> Result<ReportOutcome, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Report { report, reply }).await?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    pub async fn write_host(
        &self,
        timestamp_ms: i64,
        interval_ms: u64,
        stats: HostStats,
    ) -> Result<Cursor, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Host { timestamp_ms, interval_ms, stats, reply }).await?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Why the last commit failed (`None` once one succeeded): while it is set, reports are
    /// refused and `/ready` answers 503.
    /// Runs `PRAGMA quick_check` on its own read connection to `path` (the writer goes on):
    /// `Ok(None)` when the file is sound, `Ok(Some(what))` when it is damaged (kept for
    /// [`MetricStore::damage`] until a check passes), `Err` when the check itself could not run.
    pub fn check_integrity(&self, path: &std::path::Path) -> Result<Option<String>, String> {
        let conn = schema::open_reader(path).map_err(|e| e.to_string())?;
        let found: Result<Vec<String>, rusqlite::Error> = conn
            .prepare("PRAGMA quick_check(5)")
            .and_then(|mut q| q.query_map([], |row| row.get::<_, String>(0))?.collect());
        let damage = match found {
            Ok(rows) if rows.len() == 1 && rows[0] == "ok" => None,
            Ok(rows) => Some(rows.join("; ")),
            Err(e) => {
                let text = e.to_string();
                if !StoreError::Sqlite(e).is_corruption() {
                    return Err(text);
                }
                Some(text)
            }
        };
        *self.shared.damage.write().expect("damage lock is never poisoned") = damage.clone();
        Ok(damage)
    }

    /// What the last integrity check found wrong, until one passes.
    pub fn damage(&self) -> Option<String> {
        self.shared.damage.read().expect("damage lock is never poisoned").clone()
    }

    pub fn write_failure(&self) -> Option<String> {
        self.shared.write_failure.read().expect("write failure lock is never poisoned").clone()
    }

    /// Flushes rollups and applies retention as of `now_ms`.
    pub async fn maintenance(&self, now_ms: i64) -> Result<(), StoreError> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Maintenance { now_ms, reply }).await?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Samples with a cursor above `after`, at most `limit`.
    pub async fn samples(&self, after: Cursor, limit: usize) -> Result<SamplesPage, StoreError> {
        // A cursor from the future means this store was replaced: start over and say so. The
        // writer publishes its newest cursor right after a commit, so confirm against SQLite
        // before resetting a puller that is merely quick.
        let reset = after > self.latest_cursor() && after > self.committed_cursor().await?;
        let after = if reset { Cursor(0) } else { after };
        let expired = Cursor(self.shared.expired_through.load(Ordering::Acquire));
        let from_window = self.window.read().expect("window lock is never poisoned").read_after(after, limit + 1);
        let mut samples = match from_window {
            Some(samples) => samples,
            None => {
                let reader = self.reader.clone();
                tokio::task::spawn_blocking(move || {
                    let conn = reader.lock().expect("reader lock is never poisoned");
                    read_after(&conn, after, limit + 1)
                })
                .await
                .map_err(|e| StoreError::Write(format!("reader task failed: {e}")))??
            }
        };
        let more = samples.len() > limit;
        samples.truncate(limit);
        // A page that reaches the lost cursors (it passes over them, or ends with the newest
        // sample before them), or a puller waiting inside them, is told; it continues after
        // them at once.
        // Each loss the page reaches moves the puller past it.
        let mut at_loss = false;
        let mut past = Cursor(0);
        for &(from, through) in self.shared.lost.read().expect("lost lock is never poisoned").iter() {
            let reached = after < through
                && match samples.last() {
                    Some(last) => last.cursor > through || (!more && last.cursor >= from),
                    None => after >= from,
                };
            if reached {
                at_loss = true;
                past = past.max(through);
            }
        }
        let gap = reset || after < expired || at_loss;
        let next_cursor = match samples.last() {
            Some(last) if at_loss => last.cursor.max(past),
            Some(last) => last.cursor,
            None if at_loss => expired.max(past),
            None if gap => expired.max(after),
            None => after,
        };
        Ok(SamplesPage { samples, next_cursor, gap, more })
    }

    /// Hourly rollups whose hour starts in `[from_ms, to_ms)`, including the current hour so far.
    pub async fn rollups(&self, from_ms: i64, to_ms: i64) -> Result<Vec<HourlyRollup>, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::FlushRollups { reply }).await?;
        rx.await.map_err(|_| StoreError::Closed)??;
        let reader = self.reader.clone();
        tokio::task::spawn_blocking(move || {
            let conn = reader.lock().expect("reader lock is never poisoned");
            read_rollups(&conn, from_ms, to_ms)
        })
        .await
        .map_err(|e| StoreError::Write(format!("reader task failed: {e}")))?
    }

    async fn committed_cursor(&self) -> Result<Cursor, StoreError> {
        let reader = self.reader.clone();
        tokio::task::spawn_blocking(move || {
            let conn = reader.lock().expect("reader lock is never poisoned");
            let seq: Option<i64> = conn
                .query_row("SELECT seq FROM sqlite_sequence WHERE name = 'samples'", [], |r| r.get(0))
                .optional()?;
            Ok(Cursor(seq.map_or(0, from_sql)))
        })
        .await
        .map_err(|e| StoreError::Write(format!("reader task failed: {e}")))?
    }

    pub fn latest_cursor(&self) -> Cursor {
        Cursor(self.shared.latest_cursor.load(Ordering::Acquire))
    }

    /// Stops the writer after it has committed everything queued, and waits for it.
    pub async fn close(&self) {
        let thread = self.writer_thread.lock().expect("writer thread lock is never poisoned").take();
        let Some(thread) = thread else { return };
        let (reply, rx) = oneshot::channel();
        // Shutdown is a maintenance-free flush: queue it behind everything already sent.
        if self.commands.send(Command::Shutdown { reply }).await.is_ok() {
            let _ = rx.await;
        }
        let _ = tokio::task::spawn_blocking(move || thread.join()).await;
    }

    async fn send(&self, cmd: Command) -> Result<(), StoreError> {
        self.commands.send(cmd).await.map_err(|_| StoreError::Closed)
    }
}

const SAMPLE_COLUMNS: &str = "s.cursor, s.ts_ms, s.interval_ms, p.tenant, p.table_name, p.partition_id, p.range_start,
     p.range_end, s.read_ops, s.write_ops, s.read_bytes, s.write_bytes, s.errors, s.rejected, s.cpu_time_us,
     s.stored_bytes, s.latency_p50_us, s.latency_p99_us, s.sketch, s.host, s.agent_sampled";

fn read_after(conn: &Connection, after: Cursor, limit: usize) -> Result<Vec<Sample>, StoreError> {
    let sql = format!(
        "SELECT {SAMPLE_COLUMNS} FROM samples s LEFT JOIN partitions p ON s.partition_ref = p.id
         WHERE s.cursor > ?1 ORDER BY s.cursor LIMIT ?2"
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map(rusqlite::params![after.0 as i64, limit as i64], row_to_sample)?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?.into_iter().flatten().collect())
}

/// Rows decoded per step of the start-up reload, so it never holds more than a chunk decoded.
const RELOAD_CHUNK: usize = 10_000;
/// The smallest a window sample can be; bounds how many rows the reload scans back.
const MIN_SAMPLE_BYTES: u64 = 24;

/// Reloads the newest samples into a fresh window, within its age and bytes bounds.
/// Renames the store file and its `-wal` and `-shm` to `<name>.damaged-<unix ms>[-wal|-shm]`;
/// the cursor mark stays, so the fresh store's cursors continue above the old ones and the lost
/// range is a gap.
fn move_aside(path: &std::path::Path) -> std::io::Result<std::path::PathBuf> {
    let stamp = chrono::Utc::now().timestamp_millis();
    let mut aside = path.as_os_str().to_owned();
    aside.push(format!(".damaged-{stamp}"));
    let aside = std::path::PathBuf::from(aside);
    std::fs::rename(path, &aside)?;
    for suffix in ["-wal", "-shm"] {
        let (mut from, mut to) = (path.as_os_str().to_owned(), aside.as_os_str().to_owned());
        from.push(suffix);
        to.push(suffix);
        if std::path::Path::new(&from).exists() {
            std::fs::rename(&from, &to)?;
        }
    }
    Ok(aside)
}

fn load_window(conn: &Connection, config: &AgentConfig, latest: Cursor) -> Result<Window, StoreError> {
    let max_bytes = usize::try_from(config.window.max_bytes).unwrap_or(usize::MAX);
    let max_age_ms = i64::try_from(config.window.duration_ms).unwrap_or(i64::MAX);
    let max_rows = config.window.max_bytes / MIN_SAMPLE_BYTES;
    // Pass 1, two narrow columns: how far back the window reaches.
    let mut start = None;
    {
        let mut stmt = conn.prepare("SELECT cursor, ts_ms FROM samples ORDER BY cursor DESC")?;
        let mut rows = stmt.query([])?;
        let mut newest_ts = None;
        let mut count = 0u64;
        while let Some(row) = rows.next()? {
            let (cursor, ts_ms): (i64, i64) = (row.get(0)?, row.get(1)?);
            let newest = *newest_ts.get_or_insert(ts_ms);
            count += 1;
            if ts_ms < newest.saturating_sub(max_age_ms) || count > max_rows {
                break;
            }
            start = Some(cursor);
        }
    }
    let Some(start) = start else { return Ok(Window::new(latest)) };
    // Pass 2: decode forward in chunks; the window's own bounds evict as it fills.
    let mut window = Window::new(Cursor(from_sql(start) - 1));
    let sql = format!(
        "SELECT {SAMPLE_COLUMNS}, s.partition_ref FROM samples s LEFT JOIN partitions p ON s.partition_ref = p.id
         WHERE s.cursor >= ?1 ORDER BY s.cursor"
    );
    let mut stmt = conn.prepare(&sql)?;
    let mut rows = stmt.query([start])?;
    let mut chunk: Vec<(Sample, Option<i64>)> = Vec::with_capacity(RELOAD_CHUNK);
    loop {
        let row = rows.next()?;
        if let Some(row) = row
            && let Some(sample) = row_to_sample(row)?
        {
            chunk.push((sample, row.get(21)?));
        }
        if chunk.len() == RELOAD_CHUNK || (row.is_none() && !chunk.is_empty()) {
            window.append(chunk.iter().map(record), config.window.duration_ms, max_bytes);
            chunk.clear();
        }
        if row.is_none() {
            return Ok(window);
        }
    }
}

fn record((sample, partition_ref): &(Sample, Option<i64>)) -> Record<'_> {
    let data = match (&sample.data, partition_ref) {
        (SampleData::Partition(stats), Some(partition_ref)) => {
            RecordData::Partition { partition_ref: *partition_ref, stats }
        }
        (SampleData::Host(host), _) => RecordData::Host { stats: host, agent_sampled: sample.agent_sampled },
        (SampleData::Partition(_), None) => unreachable!("partition rows always have a partition_ref"),
    };
    Record { cursor: sample.cursor, timestamp_ms: sample.timestamp_ms, interval_ms: sample.interval_ms, data }
}

/// `None` for a row this build cannot decode (logged); it is skipped, never served wrong.
fn row_to_sample(r: &rusqlite::Row<'_>) -> rusqlite::Result<Option<Sample>> {
    let u = |i| r.get::<_, i64>(i).map(from_sql);
    let cursor = Cursor(u(0)?);
    let timestamp_ms: i64 = r.get(1)?;
    let interval_ms = u(2)?;
    let host: Option<String> = r.get(19)?;
    let data = match host {
        Some(json) => match serde_json::from_str::<HostStats>(&json) {
            Ok(h) => SampleData::Host(h),
            Err(error) => {
                tracing::error!(cursor = cursor.0, %error, "undecodable host sample skipped");
                return Ok(None);
            }
        },
        None => {
            let tenant: String = r.get(3)?;
            let table: String = r.get(4)?;
            let partition_id: String = r.get(5)?;
            let sketch = match r.get::<_, Option<Vec<u8>>>(18)? {
                None => None,
                Some(blob) => match decode_sketch(&blob) {
                    Some(s) => Some(s),
                    None => {
                        tracing::error!(cursor = cursor.0, "undecodable sketch dropped from sample");
                        None
                    }
                },
            };
            let (Ok(tenant), Ok(table), Ok(partition_id)) = (tenant.parse(), table.parse(), partition_id.parse())
            else {
                tracing::error!(cursor = cursor.0, "sample with an invalid id skipped");
                return Ok(None);
            };
            SampleData::Partition(PartitionStats {
                tenant,
                table,
                partition_id,
                key_range: KeyRange { start: Key(u(6)?), end: Key(u(7)?) },
                read_ops: u(8)?,
                write_ops: u(9)?,
                read_bytes: u(10)?,
                write_bytes: u(11)?,
                errors: u(12)?,
                rejected: u(13)?,
                cpu_time_us: u(14)?,
                stored_bytes: u(15)?,
                latency_p50_us: r.get(16)?,
                latency_p99_us: r.get(17)?,
                sketch,
            })
        }
    };
    let agent_sampled: bool = r.get(20)?;
    Ok(Some(Sample { cursor, timestamp_ms, interval_ms, data, agent_sampled }))
}

fn read_rollups(conn: &Connection, from_ms: i64, to_ms: i64) -> Result<Vec<HourlyRollup>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT r.hour_start_ms, p.tenant, p.table_name, p.partition_id, p.range_start, p.range_end,
                r.sample_count, r.read_ops, r.write_ops, r.read_bytes, r.write_bytes, r.errors, r.rejected,
                r.cpu_time_us, r.max_ops_per_sec, r.max_latency_p99_us, r.stored_bytes
         FROM rollups r JOIN partitions p ON r.partition_ref = p.id
         WHERE r.hour_start_ms >= ?1 AND r.hour_start_ms < ?2
         ORDER BY r.hour_start_ms, p.tenant, p.table_name, p.range_start",
    )?;
    let rows = stmt.query_map([from_ms, to_ms], |r| {
        let u = |i| r.get::<_, i64>(i).map(from_sql);
        let ids: (String, String, String) = (r.get(1)?, r.get(2)?, r.get(3)?);
        Ok((
            ids,
            r.get::<_, i64>(0)?,
            [u(4)?, u(5)?, u(6)?, u(7)?, u(8)?, u(9)?, u(10)?, u(11)?, u(12)?, u(13)?, u(16)?],
            r.get::<_, f64>(14)?,
            r.get::<_, f64>(15)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let ((tenant, table, partition_id), hour_start_ms, n, max_ops_per_sec, max_latency_p99_us) = row?;
        let (Ok(tenant), Ok(table), Ok(partition_id)) = (tenant.parse(), table.parse(), partition_id.parse()) else {
            continue;
        };
        out.push(HourlyRollup {
            hour_start_ms,
            tenant,
            table,
            partition_id,
            key_range: KeyRange { start: Key(n[0]), end: Key(n[1]) },
            sample_count: u32::try_from(n[2]).unwrap_or(u32::MAX),
            read_ops: n[3],
            write_ops: n[4],
            read_bytes: n[5],
            write_bytes: n[6],
            errors: n[7],
            rejected: n[8],
            cpu_time_us: n[9],
            max_ops_per_sec,
            max_latency_p99_us,
            stored_bytes: n[10],
        });
    }
    Ok(out)
}
