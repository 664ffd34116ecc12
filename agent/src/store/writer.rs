//! The single writer thread: group commit, dedup, cursors, rollups and retention.
//!
//! Every write goes through one thread that owns the writer connection. It blocks for the next
//! command, then drains whatever else is queued (up to `max_batch_reports`) into *one*
//! transaction, commits, appends the new samples to the window, and only then answers each
//! caller. So a report is acknowledged only once it is durable, and a burst of reports costs one
//! commit. Maintenance (rollup flush, retention) runs on the same thread between batches.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use lb_common::ids::KeyRange;
use lb_common::protocol::{Cursor, HostStats, PartitionStats, Report};
use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{info, warn};

use super::codec::{encode_sketch, to_sql};
use super::mark::CursorMark;
use super::rollup::{Rollups, SampleCounters};
use super::{META_EXPIRED_THROUGH, META_ROLLED_THROUGH, Shared, StoreError};
use crate::config::AgentConfig;
use crate::window::{Record, RecordData, Window};

/// Rows deleted per retention chunk: about 50 ms of writer time, so ingest never stalls long.
const RETENTION_CHUNK_ROWS: i64 = 50_000;
/// Chunks per maintenance run; a large backlog is worked off over several runs.
const RETENTION_MAX_CHUNKS: usize = 20;
/// How long a report key is remembered: retries come within seconds; a day covers any outage
/// of the worker's retry loop, at 86,400 keys for a 1 s reporter.
const DEDUP_WINDOW_MS: i64 = 86_400_000;

/// What a report write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportOutcome {
    pub duplicate: bool,
    /// Highest cursor assigned to the report's samples (unchanged for a duplicate).
    pub last_cursor: Cursor,
}

pub enum Command {
    Report {
        report: Report,
        reply: oneshot::Sender<Result<ReportOutcome, StoreError>>,
    },
    Host {
        timestamp_ms: i64,
        interval_ms: u64,
        stats: HostStats,
        reply: oneshot::Sender<Result<Cursor, StoreError>>,
    },
    /// Flush rollups, then apply retention as of `now_ms`.
    Maintenance {
        now_ms: i64,
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
    /// Flush rollup accumulators so that a rollups query sees everything committed.
    FlushRollups {
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
    /// Commit what is queued before it, flush rollups, stop.
    Shutdown {
        reply: oneshot::Sender<()>,
    },
}

type PartitionKey = (String, String, String, u64, u64);

pub struct Writer {
    conn: Connection,
    config: watch::Receiver<Arc<AgentConfig>>,
    window: Arc<RwLock<Window>>,
    shared: Arc<Shared>,
    partition_refs: HashMap<PartitionKey, i64>,
    /// `(seq, timestamp_ms)` of every report accepted within the dedup window.
    seen_reports: HashSet<(u64, i64)>,
    rollups: Rollups,
    last_rollup_flush: Instant,
    /// The newest committed cursor, outside the WAL (see `mark`).
    mark: CursorMark,
}

impl Writer {
    pub fn new(
        conn: Connection,
        config: watch::Receiver<Arc<AgentConfig>>,
        window: Arc<RwLock<Window>>,
        shared: Arc<Shared>,
        mark: CursorMark,
    ) -> Result<Self, StoreError> {
        let seen_reports = conn
            .prepare("SELECT seq, ts_ms FROM report_keys")?
            .query_map([], |r| Ok((super::codec::from_sql(r.get(0)?), r.get(1)?)))?
            .collect::<Result<HashSet<_>, _>>()?;
        let rolled_through = get_meta(&conn, META_ROLLED_THROUGH)?.unwrap_or(0);
        let mut writer = Self {
            conn,
            config,
            window,
            shared,
            partition_refs: HashMap::new(),
            seen_reports,
            rollups: Rollups::new(rolled_through),
            last_rollup_flush: Instant::now(),
            mark,
        };
        writer.refold_unflushed_rollups()?;
        Ok(writer)
    }

    /// The thread body: runs until a shutdown command or until every sender is gone, then
    /// flushes rollups.
    pub fn run(mut self, mut commands: mpsc::Receiver<Command>) {
        let mut shutdown_reply = None;
        'outer: while let Some(first) = commands.blocking_recv() {
            let max_batch = self.config.borrow().store.max_batch_reports as usize;
            let mut batch = vec![first];
            let mut deferred = Vec::new();
            while batch.len() < max_batch {
                match commands.try_recv() {
                    Ok(cmd @ (Command::Report { .. } | Command::Host { .. })) => batch.push(cmd),
                    Ok(other) => deferred.push(other),
                    Err(_) => break,
                }
            }
            let (ingest, other): (Vec<_>, Vec<_>) =
                batch.into_iter().partition(|c| matches!(c, Command::Report { .. } | Command::Host { .. }));
            if !ingest.is_empty() {
                self.commit_batch(ingest);
            }
            for cmd in other.into_iter().chain(deferred) {
                if let Command::Shutdown { reply } = cmd {
                    shutdown_reply = Some(reply);
                    break 'outer;
                }
                self.run_other(cmd);
            }
        }
        if let Err(error) = self.flush_rollups() {
            warn!(%error, "final rollup flush failed; the next start recomputes it from samples");
        }
        info!("store writer stopped");
        if let Some(reply) = shutdown_reply {
            let _ = reply.send(());
        }
    }

    fn run_other(&mut self, cmd: Command) {
        match cmd {
            Command::Maintenance { now_ms, reply } => {
                let result = self.flush_rollups().and_then(|()| self.apply_retention(now_ms));
                if let Err(error) = &result {
                    warn!(%error, "store maintenance failed");
                }
                let _ = reply.send(result);
            }
            Command::FlushRollups { reply } => {
                let _ = reply.send(self.flush_rollups());
            }
            Command::Report { .. } | Command::Host { .. } | Command::Shutdown { .. } => {
                unreachable!("ingest commands are batched and shutdown ends the loop")
            }
        }
    }

    fn commit_batch(&mut self, batch: Vec<Command>) {
        let started = Instant::now();
        let batch_len = batch.len();
        let mut staged = Staged::default();
        let result = self.write_batch(&batch, &mut staged);
        match result {
            Ok(()) => {
                self.set_write_failure(None);
                // Publish the newest cursor first: nothing a reader can see is ever above it.
                if let Some(last) = staged.records.last() {
                    // Before any acknowledgement: a later loss of the WAL is then detected.
                    if let Err(error) = self.mark.record(last.cursor.0) {
                        warn!(%error, "cannot write the cursor mark: a lost -wal file would go unnoticed");
                    }
                    self.shared.latest_cursor.store(last.cursor.0, Ordering::Release);
                }
                self.seen_reports.extend(staged.new_keys.iter().copied());
                for (cursor, partition_ref, counters) in &staged.folds {
                    self.rollups.fold(*cursor, *partition_ref, *counters);
                }
                let config = self.config.borrow().clone();
                {
                    let mut window = self.window.write().expect("window lock is never poisoned");
                    window.append(
                        staged.records.iter().map(|r| r.borrow_from(&batch)),
                        config.window.duration_ms,
                        usize::try_from(config.window.max_bytes).unwrap_or(usize::MAX),
                    );
                    metrics::gauge!("lb_agent_window_samples").set(window.len() as f64);
                    metrics::gauge!("lb_agent_window_bytes").set(window.bytes() as f64);
                }
                metrics::histogram!("lb_agent_store_commit_seconds").record(started.elapsed().as_secs_f64());
                metrics::counter!("lb_agent_store_commits_total", "outcome" => "ok").increment(1);
                metrics::counter!("lb_agent_store_rows_total").increment(staged.rows);
                for (cmd, outcome) in batch.into_iter().zip(staged.outcomes) {
                    match (cmd, outcome) {
                        (Command::Report { reply, .. }, Outcome::Report(o)) => {
                            let _ = reply.send(Ok(o));
                        }
                        (Command::Host { reply, .. }, Outcome::Host(c)) => {
                            let _ = reply.send(Ok(c));
                        }
                        _ => unreachable!("outcomes follow the batch order"),
                    }
                }
                if self.last_rollup_flush.elapsed().as_millis() as u64 >= config.store.rollup_flush_interval_ms
                    && let Err(error) = self.flush_rollups()
                {
                    warn!(%error, "rollup flush failed; retrying on the next batch");
                }
            }
            Err(error) => {
                // The transaction rolled back: ids it created are gone, so forget cached ones.
                self.partition_refs.clear();
                warn!(%error, reports = batch_len, "store commit failed; nothing in the batch is acknowledged");
                metrics::counter!("lb_agent_store_commits_total", "outcome" => "error").increment(1);
                let message = error.to_string();
                self.set_write_failure(Some(message.clone()));
                for cmd in batch {
                    match cmd {
                        Command::Report { reply, .. } => {
                            let _ = reply.send(Err(StoreError::Write(message.clone())));
                        }
                        Command::Host { reply, .. } => {
                            let _ = reply.send(Err(StoreError::Write(message.clone())));
                        }
                        _ => {}
                    }
                }
            }
        }
    }

    fn set_write_failure(&self, failure: Option<String>) {
        let mut slot = self.shared.write_failure.write().expect("write failure lock is never poisoned");
        if slot.is_some() != failure.is_some() {
            match &failure {
                Some(error) => warn!(%error, "store writes failing: not ready until one succeeds"),
                None => info!("store writes succeed again: ready"),
            }
        }
        *slot = failure;
    }

    fn write_batch(&mut self, batch: &[Command], staged: &mut Staged) -> rusqlite::Result<()> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        for (command, cmd) in batch.iter().enumerate() {
            match cmd {
                Command::Report { report, .. } => {
                    let key = (report.seq, report.timestamp_ms);
                    if self.seen_reports.contains(&key) || staged.new_keys.contains(&key) {
                        let last_cursor = Cursor(self.shared.latest_cursor.load(Ordering::Acquire));
                        staged.outcomes.push(Outcome::Report(ReportOutcome { duplicate: true, last_cursor }));
                        continue;
                    }
                    tx.prepare_cached("INSERT INTO report_keys (seq, ts_ms) VALUES (?1, ?2)")?
                        .execute(params![to_sql(report.seq), report.timestamp_ms])?;
                    let mut last_cursor = Cursor(self.shared.latest_cursor.load(Ordering::Acquire));
                    for (index, p) in report.partitions.iter().enumerate() {
                        let partition_ref = partition_ref(&tx, &mut self.partition_refs, p)?;
                        let cursor = insert_partition_sample(&tx, report, p, partition_ref)?;
                        staged.folds.push((cursor, partition_ref, counters(report, p)));
                        last_cursor = Cursor(cursor as u64);
                        staged.records.push(StagedRecord {
                            cursor: last_cursor,
                            command,
                            source: Source::Partition { index, partition_ref },
                        });
                        staged.rows += 1;
                    }
                    if let Some(host) = &report.host {
                        let cursor = insert_host_sample(&tx, report.timestamp_ms, report.interval_ms, host, false)?;
                        last_cursor = Cursor(cursor as u64);
                        staged.records.push(StagedRecord { cursor: last_cursor, command, source: Source::Host });
                        staged.rows += 1;
                    }
                    staged.new_keys.push(key);
                    staged.outcomes.push(Outcome::Report(ReportOutcome { duplicate: false, last_cursor }));
                }
                Command::Host { timestamp_ms, interval_ms, stats, .. } => {
                    let cursor = insert_host_sample(&tx, *timestamp_ms, *interval_ms, stats, true)?;
                    staged.records.push(StagedRecord { cursor: Cursor(cursor as u64), command, source: Source::Host });
                    staged.rows += 1;
                    staged.outcomes.push(Outcome::Host(Cursor(cursor as u64)));
                }
                Command::Maintenance { .. } | Command::FlushRollups { .. } | Command::Shutdown { .. } => {}
            }
        }
        tx.commit()
    }

    fn flush_rollups(&mut self) -> Result<(), StoreError> {
        self.last_rollup_flush = Instant::now();
        if self.rollups.is_empty() {
            return Ok(());
        }
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        self.rollups.write(&tx)?;
        tx.commit()?;
        self.rollups.clear();
        Ok(())
    }

    /// Folds samples committed after the last rollup flush (a crash lost their accumulators).
    fn refold_unflushed_rollups(&mut self) -> Result<(), StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT cursor, partition_ref, ts_ms, interval_ms, read_ops, write_ops, read_bytes, write_bytes,
                    errors, rejected, cpu_time_us, latency_p99_us, stored_bytes
             FROM samples WHERE cursor > ?1 AND partition_ref IS NOT NULL ORDER BY cursor",
        )?;
        let mut rows = stmt.query([self.rollups.folded_through])?;
        let u = |r: &rusqlite::Row<'_>, i| r.get::<_, i64>(i).map(super::codec::from_sql);
        let mut refolded = 0u64;
        while let Some(r) = rows.next()? {
            let c = SampleCounters {
                ts_ms: r.get(2)?,
                interval_ms: u(r, 3)?,
                read_ops: u(r, 4)?,
                write_ops: u(r, 5)?,
                read_bytes: u(r, 6)?,
                write_bytes: u(r, 7)?,
                errors: u(r, 8)?,
                rejected: u(r, 9)?,
                cpu_time_us: u(r, 10)?,
                latency_p99_us: r.get(11)?,
                stored_bytes: u(r, 12)?,
            };
            self.rollups.fold(r.get(0)?, r.get(1)?, c);
            refolded += 1;
        }
        if refolded > 0 {
            info!(samples = refolded, "refolded samples committed after the last rollup flush");
        }
        Ok(())
    }

    fn apply_retention(&mut self, now_ms: i64) -> Result<(), StoreError> {
        let config = self.config.borrow().clone();
        let raw_cutoff = now_ms.saturating_sub(config.store.raw_retention().as_millis() as i64);
        let rollup_cutoff = now_ms.saturating_sub(config.store.rollup_retention().as_millis() as i64);
        let mut deleted = 0usize;
        for _ in 0..RETENTION_MAX_CHUNKS {
            let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            // The oldest chunk by cursor, up to its newest expired row: cursors follow arrival
            // order, so this deletes a prefix and the cursors below it stay "expired".
            let upto: Option<i64> = tx.query_row(
                "SELECT max(cursor) FROM (SELECT cursor, ts_ms FROM samples ORDER BY cursor LIMIT ?1)
                 WHERE ts_ms < ?2",
                params![RETENTION_CHUNK_ROWS, raw_cutoff],
                |r| r.get(0),
            )?;
            let Some(upto) = upto else { break };
            deleted += tx.execute("DELETE FROM samples WHERE cursor <= ?1", [upto])?;
            set_meta(&tx, META_EXPIRED_THROUGH, upto)?;
            tx.commit()?;
            self.shared.expired_through.store(upto as u64, Ordering::Release);
            self.window.write().expect("window lock is never poisoned").evict_through(Cursor(upto as u64));
        }
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let rollups_deleted = tx.execute("DELETE FROM rollups WHERE hour_start_ms < ?1", [rollup_cutoff])?;
        let dedup_cutoff = now_ms.saturating_sub(DEDUP_WINDOW_MS);
        tx.execute("DELETE FROM report_keys WHERE ts_ms < ?1", [dedup_cutoff])?;
        tx.commit()?;
        self.seen_reports.retain(|&(_, ts_ms)| ts_ms >= dedup_cutoff);
        if deleted > 0 || rollups_deleted > 0 {
            info!(samples = deleted, rollups = rollups_deleted, "retention applied");
            metrics::counter!("lb_agent_store_expired_rows_total").increment((deleted + rollups_deleted) as u64);
        }
        Ok(())
    }
}

#[derive(Default)]
struct Staged {
    /// Keys of the reports this batch accepts (a batch is small: a linear scan is cheapest).
    new_keys: Vec<(u64, i64)>,
    /// Where each committed sample's data is in the batch, for the window.
    records: Vec<StagedRecord>,
    folds: Vec<(i64, i64, SampleCounters)>,
    outcomes: Vec<Outcome>,
    rows: u64,
}

struct StagedRecord {
    cursor: Cursor,
    command: usize,
    source: Source,
}

enum Source {
    Partition {
        index: usize,
        partition_ref: i64,
    },
    /// The report's host stats, or a host reading of its own.
    Host,
}

impl StagedRecord {
    fn borrow_from<'a>(&self, batch: &'a [Command]) -> Record<'a> {
        match (&batch[self.command], &self.source) {
            (Command::Report { report, .. }, Source::Partition { index, partition_ref }) => Record {
                cursor: self.cursor,
                timestamp_ms: report.timestamp_ms,
                interval_ms: report.interval_ms,
                data: RecordData::Partition { partition_ref: *partition_ref, stats: &report.partitions[*index] },
            },
            (Command::Report { report, .. }, Source::Host) => Record {
                cursor: self.cursor,
                timestamp_ms: report.timestamp_ms,
                interval_ms: report.interval_ms,
                data: RecordData::Host {
                    stats: report.host.as_ref().expect("staged only when present"),
                    agent_sampled: false,
                },
            },
            (Command::Host { timestamp_ms, interval_ms, stats, .. }, _) => Record {
                cursor: self.cursor,
                timestamp_ms: *timestamp_ms,
                interval_ms: *interval_ms,
                data: RecordData::Host { stats, agent_sampled: true },
            },
            _ => unreachable!("records point at ingest commands"),
        }
    }
}

enum Outcome {
    Report(ReportOutcome),
    Host(Cursor),
}

fn counters(report: &Report, p: &PartitionStats) -> SampleCounters {
    SampleCounters {
        ts_ms: report.timestamp_ms,
        interval_ms: report.interval_ms,
        read_ops: p.read_ops,
        write_ops: p.write_ops,
        read_bytes: p.read_bytes,
        write_bytes: p.write_bytes,
        errors: p.errors,
        rejected: p.rejected,
        cpu_time_us: p.cpu_time_us,
        latency_p99_us: p.latency_p99_us,
        stored_bytes: p.stored_bytes,
    }
}

fn partition_ref(
    tx: &Transaction<'_>,
    cache: &mut HashMap<PartitionKey, i64>,
    p: &PartitionStats,
) -> rusqlite::Result<i64> {
    let KeyRange { start, end } = p.key_range;
    let key: PartitionKey = (p.tenant.to_string(), p.table.to_string(), p.partition_id.to_string(), start.0, end.0);
    if let Some(&id) = cache.get(&key) {
        return Ok(id);
    }
    let args = params![key.0, key.1, key.2, to_sql(key.3), to_sql(key.4)];
    let existing: Option<i64> = tx
        .prepare_cached(
            "SELECT id FROM partitions
             WHERE tenant = ?1 AND table_name = ?2 AND partition_id = ?3 AND range_start = ?4 AND range_end = ?5",
        )?
        .query_row(args, |r| r.get(0))
        .optional()?;
    let id = match existing {
        Some(id) => id,
        None => {
            tx.prepare_cached(
                "INSERT INTO partitions (tenant, table_name, partition_id, range_start, range_end)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(args)?;
            tx.last_insert_rowid()
        }
    };
    cache.insert(key, id);
    Ok(id)
}

fn insert_partition_sample(
    tx: &Transaction<'_>,
    report: &Report,
    p: &PartitionStats,
    partition_ref: i64,
) -> rusqlite::Result<i64> {
    let sketch = p.sketch.as_ref().map(encode_sketch);
    tx.prepare_cached(
        "INSERT INTO samples (ts_ms, interval_ms, partition_ref, read_ops, write_ops, read_bytes, write_bytes,
             errors, rejected, cpu_time_us, stored_bytes, latency_p50_us, latency_p99_us, sketch)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
    )?
    .execute(params![
        report.timestamp_ms,
        to_sql(report.interval_ms),
        partition_ref,
        to_sql(p.read_ops),
        to_sql(p.write_ops),
        to_sql(p.read_bytes),
        to_sql(p.write_bytes),
        to_sql(p.errors),
        to_sql(p.rejected),
        to_sql(p.cpu_time_us),
        to_sql(p.stored_bytes),
        p.latency_p50_us,
        p.latency_p99_us,
        sketch,
    ])?;
    Ok(tx.last_insert_rowid())
}

/// A host row: the report's host stats, or (`agent_sampled`) a reading of the agent's own.
fn insert_host_sample(
    tx: &Transaction<'_>,
    ts_ms: i64,
    interval_ms: u64,
    host: &HostStats,
    agent_sampled: bool,
) -> rusqlite::Result<i64> {
    let json = serde_json::to_string(host).expect("host stats serialise");
    tx.prepare_cached("INSERT INTO samples (ts_ms, interval_ms, host, agent_sampled) VALUES (?1, ?2, ?3, ?4)")?
        .execute(params![ts_ms, to_sql(interval_ms), json, agent_sampled])?;
    Ok(tx.last_insert_rowid())
}

/// Moves the cursor sequence to `lost_through` (new samples get higher cursors than any lost
/// one) and records the lost range `(lost_from, lost_through]` in `meta` beside any earlier
/// ones, in one transaction.
pub fn record_loss(conn: &Connection, lost_from: i64, lost_through: i64) -> rusqlite::Result<()> {
    let tx = conn.unchecked_transaction()?;
    tx.execute(
        "INSERT INTO sqlite_sequence (name, seq) SELECT 'samples', 0
         WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'samples')",
        [],
    )?;
    tx.execute("UPDATE sqlite_sequence SET seq = ?1 WHERE name = 'samples'", [lost_through])?;
    set_meta(&tx, &format!("{}{lost_from}", super::META_LOST_PREFIX), lost_through)?;
    tx.commit()
}

pub fn get_meta(conn: &Connection, key: &str) -> rusqlite::Result<Option<i64>> {
    conn.query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0)).optional()
}

pub fn set_meta(tx: &Transaction<'_>, key: &str, value: i64) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT INTO meta (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
    )?
    .execute(params![key, value])?;
    Ok(())
}
