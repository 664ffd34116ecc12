//! Opening the SQLite file and migrating its schema, through [`lb_common::sqlite`].
//!
//! Migrations are embedded and applied in order inside one transaction each; `PRAGMA
//! user_version` records how many ran. A file from a newer agent is refused rather than misread.
//! (The agent's store tracked `user_version` from its first release, so its migration 1 needs no
//! `IF NOT EXISTS`.)

use std::path::Path;

use lb_common::sqlite::{Pragmas, Schema};
use rusqlite::Connection;

use crate::config::Synchronous;

pub use lb_common::sqlite::OpenError;

/// Each entry migrates from version `i` to `i + 1`. Append only; never edit a shipped entry.
const MIGRATIONS: &[&str] = &[
    // 1: partitions, raw samples, hourly rollups, accepted report keys, meta.
    "CREATE TABLE partitions (
        id INTEGER PRIMARY KEY,
        tenant TEXT NOT NULL,
        table_name TEXT NOT NULL,
        partition_id TEXT NOT NULL,
        range_start INTEGER NOT NULL,
        range_end INTEGER NOT NULL,
        UNIQUE (tenant, table_name, partition_id, range_start, range_end)
    );
    -- AUTOINCREMENT: a cursor is never reused, even after retention deletes the newest rows.
    CREATE TABLE samples (
        cursor INTEGER PRIMARY KEY AUTOINCREMENT,
        ts_ms INTEGER NOT NULL,
        interval_ms INTEGER NOT NULL,
        partition_ref INTEGER REFERENCES partitions (id),
        read_ops INTEGER NOT NULL DEFAULT 0,
        write_ops INTEGER NOT NULL DEFAULT 0,
        read_bytes INTEGER NOT NULL DEFAULT 0,
        write_bytes INTEGER NOT NULL DEFAULT 0,
        errors INTEGER NOT NULL DEFAULT 0,
        rejected INTEGER NOT NULL DEFAULT 0,
        cpu_time_us INTEGER NOT NULL DEFAULT 0,
        stored_bytes INTEGER NOT NULL DEFAULT 0,
        latency_p50_us REAL NOT NULL DEFAULT 0,
        latency_p99_us REAL NOT NULL DEFAULT 0,
        sketch BLOB,
        host TEXT
    );
    CREATE TABLE rollups (
        hour_start_ms INTEGER NOT NULL,
        partition_ref INTEGER NOT NULL REFERENCES partitions (id),
        sample_count INTEGER NOT NULL,
        read_ops INTEGER NOT NULL,
        write_ops INTEGER NOT NULL,
        read_bytes INTEGER NOT NULL,
        write_bytes INTEGER NOT NULL,
        errors INTEGER NOT NULL,
        rejected INTEGER NOT NULL,
        cpu_time_us INTEGER NOT NULL,
        max_ops_per_sec REAL NOT NULL,
        max_latency_p99_us REAL NOT NULL,
        stored_bytes INTEGER NOT NULL,
        PRIMARY KEY (hour_start_ms, partition_ref)
    ) WITHOUT ROWID;
    -- Keys of recently accepted reports: a retry repeats both, so it is recognised.
    CREATE TABLE report_keys (
        seq INTEGER NOT NULL,
        ts_ms INTEGER NOT NULL,
        PRIMARY KEY (seq, ts_ms)
    ) WITHOUT ROWID;
    CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;",
    // 2: when a rollup's stored_bytes was sampled, so a late, older sample cannot overwrite it
    // (rows from before keep the oldest possible time: the next sample replaces their size).
    "ALTER TABLE rollups ADD COLUMN stored_bytes_ts_ms INTEGER NOT NULL DEFAULT -9223372036854775808;",
    // 3: host readings of the agent's own sampler, told from its worker's (`Sample::agent_sampled`).
    "ALTER TABLE samples ADD COLUMN agent_sampled INTEGER NOT NULL DEFAULT 0;",
];

/// The agent's sample store.
pub const SCHEMA: Schema = Schema { store: "agent sample store", migrations: MIGRATIONS };

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = SCHEMA.version();

/// Prepared statements the writer keeps: its handful of statements, with room to spare.
const STATEMENT_CACHE: usize = 32;

/// Opens the writer connection: WAL, the configured durability, foreign keys, schema migrated.
pub fn open_writer(path: &Path, synchronous: Synchronous) -> Result<Connection, OpenError> {
    let synchronous = match synchronous {
        Synchronous::Normal => lb_common::sqlite::Synchronous::Normal,
        Synchronous::Full => lb_common::sqlite::Synchronous::Full,
    };
    let conn = lb_common::sqlite::open(path, Pragmas { synchronous, foreign_keys: true }, &SCHEMA)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    Ok(conn)
}

/// Opens a read-only connection for serving (WAL lets it read while the writer writes).
pub fn open_reader(path: &Path) -> Result<Connection, OpenError> {
    lb_common::sqlite::open_read_only(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrates_once_and_refuses_newer_files() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("nested/agent.sqlite");
        let conn = open_writer(&path, Synchronous::Normal).expect("open");
        let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0)).expect("mode");
        assert_eq!(mode, "wal");
        let fk: i64 = conn.query_row("PRAGMA foreign_keys", [], |r| r.get(0)).expect("fk");
        assert_eq!(fk, 1);
        drop(conn);
        let conn = open_writer(&path, Synchronous::Full).expect("reopen is a no-op migration");
        let sync: i64 = conn.query_row("PRAGMA synchronous", [], |r| r.get(0)).expect("sync");
        assert_eq!(sync, 2, "FULL");
        let reader = open_reader(&path).expect("reader");
        let n: i64 = reader.query_row("SELECT count(*) FROM samples", [], |r| r.get(0)).expect("read");
        assert_eq!(n, 0);
        assert!(reader.execute("DELETE FROM samples", []).is_err(), "the reader is read only");
        drop(reader);
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1).expect("bump");
        drop(conn);
        let err = open_writer(&path, Synchronous::Normal).expect_err("newer schema");
        let text = err.to_string();
        let newer = format!("newer than version {SCHEMA_VERSION} that this agent sample store knows");
        assert!(text.contains(&newer), "{text}");
        assert!(
            text.contains("agent.sqlite") && text.contains(&format!("schema version {}", SCHEMA_VERSION + 1)),
            "{text}"
        );
    }

    /// A file written by the agent before the shared opener: its own migration loop ran
    /// migration 1 and set `user_version = 1`; it opens with its data, migrated on.
    #[test]
    fn a_file_from_the_previous_opener_opens_with_its_data() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("agent.sqlite");
        let old = Connection::open(&path).expect("old");
        old.pragma_update(None, "journal_mode", "wal").expect("wal");
        old.execute_batch(MIGRATIONS[0]).expect("old schema");
        old.pragma_update(None, "user_version", 1).expect("old version");
        old.execute("INSERT INTO meta (key, value) VALUES ('rolled_through', 42)", []).expect("old row");
        drop(old);
        let conn = open_writer(&path, Synchronous::Normal).expect("open the old file");
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).expect("version");
        assert_eq!(version, SCHEMA_VERSION);
        let v: i64 =
            conn.query_row("SELECT value FROM meta WHERE key = 'rolled_through'", [], |r| r.get(0)).expect("kept");
        assert_eq!(v, 42);
    }
}
