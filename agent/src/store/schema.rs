//! Opening the SQLite file and migrating its schema.
//!
//! Migrations are embedded and applied in order inside one transaction each; `PRAGMA
//! user_version` records how many ran. A file from a newer agent is refused rather than misread.

use std::path::Path;
use std::time::Duration;

use rusqlite::Connection;

use crate::config::Synchronous;

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
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("cannot open {path}: {source}")]
    Open { path: String, source: rusqlite::Error },
    #[error("{path} has schema version {found}, newer than this agent's {SCHEMA_VERSION}; upgrade the agent")]
    TooNew { path: String, found: i64 },
    #[error("migrating {path} to version {version} failed: {source}")]
    Migrate { path: String, version: i64, source: rusqlite::Error },
}

/// Opens the writer connection: WAL, the configured durability, schema migrated.
pub fn open_writer(path: &Path, synchronous: Synchronous) -> Result<Connection, OpenError> {
    let shown = path.display().to_string();
    let open_err = |source| OpenError::Open { path: shown.clone(), source };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| {
            open_err(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CANTOPEN),
                Some(format!("cannot create directory {}: {e}", parent.display())),
            ))
        })?;
    }
    let mut conn = Connection::open(path).map_err(open_err)?;
    conn.busy_timeout(Duration::from_secs(5)).map_err(open_err)?;
    conn.pragma_update(None, "journal_mode", "wal").map_err(open_err)?;
    let sync = match synchronous {
        Synchronous::Normal => "NORMAL",
        Synchronous::Full => "FULL",
    };
    conn.pragma_update(None, "synchronous", sync).map_err(open_err)?;
    conn.pragma_update(None, "foreign_keys", "ON").map_err(open_err)?;
    conn.set_prepared_statement_cache_capacity(32);
    migrate(&mut conn, &shown)?;
    Ok(conn)
}

/// Opens a read-only connection for serving (WAL lets it read while the writer writes).
pub fn open_reader(path: &Path) -> Result<Connection, OpenError> {
    let shown = path.display().to_string();
    let open_err = |source| OpenError::Open { path: shown.clone(), source };
    let conn = Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(open_err)?;
    conn.busy_timeout(Duration::from_secs(5)).map_err(open_err)?;
    Ok(conn)
}

fn migrate(conn: &mut Connection, path: &str) -> Result<(), OpenError> {
    let found: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(|source| OpenError::Open { path: path.to_owned(), source })?;
    if found > SCHEMA_VERSION {
        return Err(OpenError::TooNew { path: path.to_owned(), found });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        let version = i as i64 + 1;
        let fail = |source| OpenError::Migrate { path: path.to_owned(), version, source };
        let tx = conn.transaction().map_err(fail)?;
        tx.execute_batch(sql).map_err(fail)?;
        tx.pragma_update(None, "user_version", version).map_err(fail)?;
        tx.commit().map_err(fail)?;
        tracing::info!(path, version, "store schema migrated");
    }
    Ok(())
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
        drop(conn);
        let conn = open_writer(&path, Synchronous::Full).expect("reopen is a no-op migration");
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1).expect("bump");
        drop(conn);
        let err = open_writer(&path, Synchronous::Normal).expect_err("newer schema");
        assert!(err.to_string().contains("newer than this agent"), "{err}");
    }
}
