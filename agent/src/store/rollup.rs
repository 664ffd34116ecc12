//! Hourly rollups, maintained incrementally.
//!
//! The writer folds every committed partition sample into an in-memory accumulator per
//! (hour, partition) and upserts the accumulators into `rollups` at most every
//! `rollup_flush_interval_ms`, together with `meta.rolled_through` (the highest cursor folded in)
//! in the same transaction. After a crash, the samples above `rolled_through` are folded again
//! from SQLite, so rollups are exact: nothing is counted twice or missed.

use std::collections::HashMap;

use rusqlite::{Transaction, params};

use super::codec::to_sql;

pub const HOUR_MS: i64 = 3_600_000;

pub fn hour_start(ts_ms: i64) -> i64 {
    ts_ms - ts_ms.rem_euclid(HOUR_MS)
}

/// One partition's hour so far.
#[derive(Debug, Clone, PartialEq)]
pub struct Accumulator {
    pub sample_count: u64,
    pub read_ops: u64,
    pub write_ops: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub errors: u64,
    pub rejected: u64,
    pub cpu_time_us: u64,
    pub max_ops_per_sec: f64,
    pub max_latency_p99_us: f64,
    /// Stored bytes of the newest sample, and its time.
    pub stored_bytes: u64,
    pub stored_bytes_ts_ms: i64,
}

impl Default for Accumulator {
    fn default() -> Self {
        Self {
            sample_count: 0,
            read_ops: 0,
            write_ops: 0,
            read_bytes: 0,
            write_bytes: 0,
            errors: 0,
            rejected: 0,
            cpu_time_us: 0,
            max_ops_per_sec: 0.0,
            max_latency_p99_us: 0.0,
            stored_bytes: 0,
            // Before any sample: the first one folded in, of any time, sets the size.
            stored_bytes_ts_ms: i64::MIN,
        }
    }
}

/// The counters of one partition sample, as the writer has them.
#[derive(Debug, Clone, Copy)]
pub struct SampleCounters {
    pub ts_ms: i64,
    pub interval_ms: u64,
    pub read_ops: u64,
    pub write_ops: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub errors: u64,
    pub rejected: u64,
    pub cpu_time_us: u64,
    pub latency_p99_us: f64,
    pub stored_bytes: u64,
}

#[derive(Debug, Default)]
pub struct Rollups {
    pending: HashMap<(i64, i64), Accumulator>,
    /// Highest cursor folded into `pending` (or already flushed).
    pub folded_through: i64,
}

impl Rollups {
    pub fn new(rolled_through: i64) -> Self {
        Self { pending: HashMap::new(), folded_through: rolled_through }
    }

    pub fn fold(&mut self, cursor: i64, partition_ref: i64, c: SampleCounters) {
        let acc = self.pending.entry((hour_start(c.ts_ms), partition_ref)).or_default();
        acc.sample_count += 1;
        acc.read_ops = acc.read_ops.saturating_add(c.read_ops);
        acc.write_ops = acc.write_ops.saturating_add(c.write_ops);
        acc.read_bytes = acc.read_bytes.saturating_add(c.read_bytes);
        acc.write_bytes = acc.write_bytes.saturating_add(c.write_bytes);
        acc.errors = acc.errors.saturating_add(c.errors);
        acc.rejected = acc.rejected.saturating_add(c.rejected);
        acc.cpu_time_us = acc.cpu_time_us.saturating_add(c.cpu_time_us);
        let ops_per_sec = c.read_ops.saturating_add(c.write_ops) as f64 * 1000.0 / c.interval_ms.max(1) as f64;
        acc.max_ops_per_sec = acc.max_ops_per_sec.max(ops_per_sec);
        acc.max_latency_p99_us = acc.max_latency_p99_us.max(c.latency_p99_us);
        if c.ts_ms >= acc.stored_bytes_ts_ms {
            acc.stored_bytes = c.stored_bytes;
            acc.stored_bytes_ts_ms = c.ts_ms;
        }
        self.folded_through = self.folded_through.max(cursor);
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Upserts every accumulator and records `rolled_through`, inside the caller's transaction.
    /// The accumulators are cleared only by [`Rollups::clear`] once that transaction committed.
    pub fn write(&self, tx: &Transaction<'_>) -> rusqlite::Result<()> {
        let mut stmt = tx.prepare_cached(
            "INSERT INTO rollups (hour_start_ms, partition_ref, sample_count, read_ops, write_ops, read_bytes,
                 write_bytes, errors, rejected, cpu_time_us, max_ops_per_sec, max_latency_p99_us, stored_bytes,
                 stored_bytes_ts_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)
             ON CONFLICT (hour_start_ms, partition_ref) DO UPDATE SET
                 sample_count = sample_count + excluded.sample_count,
                 read_ops = read_ops + excluded.read_ops,
                 write_ops = write_ops + excluded.write_ops,
                 read_bytes = read_bytes + excluded.read_bytes,
                 write_bytes = write_bytes + excluded.write_bytes,
                 errors = errors + excluded.errors,
                 rejected = rejected + excluded.rejected,
                 cpu_time_us = cpu_time_us + excluded.cpu_time_us,
                 max_ops_per_sec = max(max_ops_per_sec, excluded.max_ops_per_sec),
                 max_latency_p99_us = max(max_latency_p99_us, excluded.max_latency_p99_us),
                 -- The newest sample's size wins, whichever flush brought it (a late report
                 -- of an older time must not overwrite it); SET reads the row as it was.
                 stored_bytes = CASE WHEN excluded.stored_bytes_ts_ms >= stored_bytes_ts_ms
                     THEN excluded.stored_bytes ELSE stored_bytes END,
                 stored_bytes_ts_ms = max(stored_bytes_ts_ms, excluded.stored_bytes_ts_ms)",
        )?;
        for (&(hour, partition_ref), a) in &self.pending {
            stmt.execute(params![
                hour,
                partition_ref,
                to_sql(a.sample_count),
                to_sql(a.read_ops),
                to_sql(a.write_ops),
                to_sql(a.read_bytes),
                to_sql(a.write_bytes),
                to_sql(a.errors),
                to_sql(a.rejected),
                to_sql(a.cpu_time_us),
                a.max_ops_per_sec,
                a.max_latency_p99_us,
                to_sql(a.stored_bytes),
                a.stored_bytes_ts_ms,
            ])?;
        }
        super::writer::set_meta(tx, super::META_ROLLED_THROUGH, self.folded_through)?;
        Ok(())
    }

    pub fn clear(&mut self) {
        self.pending.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hours_are_aligned_for_negative_times_too() {
        assert_eq!(hour_start(3_600_000 * 5 + 17), 3_600_000 * 5);
        assert_eq!(hour_start(-1), -3_600_000);
    }

    #[test]
    fn fold_sums_and_keeps_peaks_and_latest_size() {
        let mut r = Rollups::new(0);
        let c = |ts_ms, ops, stored| SampleCounters {
            ts_ms,
            interval_ms: 1000,
            read_ops: ops,
            write_ops: 0,
            read_bytes: 1,
            write_bytes: 0,
            errors: 0,
            rejected: 0,
            cpu_time_us: 1,
            latency_p99_us: ops as f64,
            stored_bytes: stored,
        };
        r.fold(1, 7, c(2000, 10, 100));
        r.fold(2, 7, c(1000, 30, 50));
        r.fold(3, 7, c(HOUR_MS, 5, 60));
        let a = &r.pending[&(0, 7)];
        assert_eq!((a.sample_count, a.read_ops, a.max_ops_per_sec, a.stored_bytes), (2, 40, 30.0, 100));
        assert_eq!(r.pending[&(HOUR_MS, 7)].sample_count, 1);
        assert_eq!(r.folded_through, 3);
    }
}
