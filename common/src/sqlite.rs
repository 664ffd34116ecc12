//! One way to open a store's SQLite file (feature `sqlite`): the shared pragmas, the parent
//! directory created, and the schema migrated.
//!
//! A store's schema is an ordered list of migrations ([`Schema`]); `PRAGMA user_version` records
//! how many have run, each runs in its own transaction together with the version bump, so a
//! crash leaves the file at one version or the next. A file whose version is newer than the code
//! knows is refused, naming the file and both versions, rather than misread. Append migrations;
//! never edit a shipped one. A store whose files predate `user_version` writes its first
//! migration with `IF NOT EXISTS`, so such a file (version 0, tables already there) opens and
//! becomes version 1.
//!
//! Opening does blocking I/O: call it on a blocking thread.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

/// 5 s: a writer holds the lock for milliseconds (one group commit), so a wait this long means a
/// stuck process, not contention; every store used it before this module existed.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// `PRAGMA synchronous` under WAL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// A commit survives a process crash (kill -9); power loss may lose the last few.
    #[default]
    Normal,
    /// A commit also survives power loss, at an fsync per commit.
    Full,
}

/// How a store sets up its connection; WAL and [`BUSY_TIMEOUT`] always.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pragmas {
    pub synchronous: Synchronous,
    /// `PRAGMA foreign_keys = ON` (off by default in SQLite).
    pub foreign_keys: bool,
}

/// A store's schema: its name, for errors and logs, and its migrations in order. Migration `i`
/// (0-based) takes the file from version `i` to `i + 1`.
#[derive(Debug, Clone, Copy)]
pub struct Schema {
    pub store: &'static str,
    pub migrations: &'static [&'static str],
}

impl Schema {
    /// The version this build writes: the number of migrations.
    pub const fn version(&self) -> i64 {
        self.migrations.len() as i64
    }
}

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("cannot create directory {dir} for {path}: {source}")]
    CreateDir { path: String, dir: String, source: std::io::Error },
    #[error("cannot open {path}: {source}")]
    Open { path: String, source: rusqlite::Error },
    #[error(
        "{path} has schema version {found}, newer than version {known} that this {store} knows; upgrade it before opening the file"
    )]
    TooNew { path: String, store: &'static str, found: i64, known: i64 },
    #[error("migrating {path} to version {version} failed: {source}")]
    Migrate { path: String, version: i64, source: rusqlite::Error },
}

/// For stores whose error type wraps `rusqlite::Error`: the whole message is kept, and SQLite's
/// own error code where there is one.
impl From<OpenError> for rusqlite::Error {
    fn from(e: OpenError) -> Self {
        let code = match &e {
            OpenError::Open { source: rusqlite::Error::SqliteFailure(f, _), .. }
            | OpenError::Migrate { source: rusqlite::Error::SqliteFailure(f, _), .. } => f.extended_code,
            OpenError::CreateDir { .. } | OpenError::Open { .. } => rusqlite::ffi::SQLITE_CANTOPEN,
            OpenError::TooNew { .. } | OpenError::Migrate { .. } => rusqlite::ffi::SQLITE_ERROR,
        };
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), Some(e.to_string()))
    }
}

/// Opens (creating it and its directory if needed) the read-write connection to `path`: WAL,
/// [`BUSY_TIMEOUT`], `pragmas`, and `schema` migrated to its latest version.
pub fn open(path: &Path, pragmas: Pragmas, schema: &Schema) -> Result<Connection, OpenError> {
    let shown = path.display().to_string();
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|source| OpenError::CreateDir {
            path: shown.clone(),
            dir: parent.display().to_string(),
            source,
        })?;
    }
    let open_err = |source| OpenError::Open { path: shown.clone(), source };
    let mut conn = Connection::open(path).map_err(open_err)?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(open_err)?;
    conn.pragma_update(None, "journal_mode", "wal").map_err(open_err)?;
    let synchronous = match pragmas.synchronous {
        Synchronous::Normal => "NORMAL",
        Synchronous::Full => "FULL",
    };
    conn.pragma_update(None, "synchronous", synchronous).map_err(open_err)?;
    if pragmas.foreign_keys {
        conn.pragma_update(None, "foreign_keys", "ON").map_err(open_err)?;
    }
    migrate(&mut conn, &shown, schema)?;
    Ok(conn)
}

/// Opens a read-only connection to an existing file (WAL lets it read while a writer writes),
/// with [`BUSY_TIMEOUT`]. It does not migrate: open the writer with [`open`] first.
pub fn open_read_only(path: &Path) -> Result<Connection, OpenError> {
    let open_err = |source| OpenError::Open { path: path.display().to_string(), source };
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
        .map_err(open_err)?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(open_err)?;
    Ok(conn)
}

/// The file's `PRAGMA user_version`.
pub fn user_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0))
}

fn migrate(conn: &mut Connection, path: &str, schema: &Schema) -> Result<(), OpenError> {
    let found = user_version(conn).map_err(|source| OpenError::Open { path: path.to_owned(), source })?;
    let known = schema.version();
    if found > known {
        return Err(OpenError::TooNew { path: path.to_owned(), store: schema.store, found, known });
    }
    let done = usize::try_from(found).unwrap_or(0);
    for (i, sql) in schema.migrations.iter().enumerate().skip(done) {
        let version = i as i64 + 1;
        let fail = |source| OpenError::Migrate { path: path.to_owned(), version, source };
        let tx = conn.transaction().map_err(fail)?;
        tx.execute_batch(sql).map_err(fail)?;
        tx.pragma_update(None, "user_version", version).map_err(fail)?;
        tx.commit().map_err(fail)?;
        tracing::info!(path, store = schema.store, version, "sqlite schema migrated");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY, v INTEGER NOT NULL);";
    const V1: Schema = Schema { store: "test store", migrations: &[TABLE] };
    const V2: Schema = Schema { store: "test store", migrations: &[TABLE, "ALTER TABLE t ADD COLUMN w INTEGER;"] };

    fn columns(conn: &Connection) -> Vec<String> {
        let mut stmt = conn.prepare("SELECT name FROM pragma_table_info('t') ORDER BY cid").expect("prepare");
        stmt.query_map([], |r| r.get(0)).expect("query").collect::<Result<_, _>>().expect("rows")
    }

    #[test]
    fn a_fresh_file_gets_its_directory_the_pragmas_and_every_migration() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("nested/deeper/s.sqlite");
        let conn = open(&path, Pragmas { synchronous: Synchronous::Full, foreign_keys: true }, &V2).expect("open");
        assert_eq!(user_version(&conn).expect("version"), 2);
        assert_eq!(columns(&conn), ["k", "v", "w"]);
        let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0)).expect("mode");
        assert_eq!(mode, "wal");
        let sync: i64 = conn.query_row("PRAGMA synchronous", [], |r| r.get(0)).expect("sync");
        assert_eq!(sync, 2, "FULL");
        let fk: i64 = conn.query_row("PRAGMA foreign_keys", [], |r| r.get(0)).expect("fk");
        assert_eq!(fk, 1);
        let reader = open_read_only(&path).expect("reader");
        assert_eq!(columns(&reader), ["k", "v", "w"]);
        assert!(reader.execute("INSERT INTO t (k, v) VALUES ('a', 1)", []).is_err(), "read only");
    }

    #[test]
    fn reopening_runs_only_the_new_migrations() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("s.sqlite");
        let conn = open(&path, Pragmas::default(), &V1).expect("open");
        conn.execute("INSERT INTO t (k, v) VALUES ('a', 1)", []).expect("insert");
        drop(conn);
        let conn = open(&path, Pragmas::default(), &V1).expect("reopen is a no-op");
        assert_eq!(user_version(&conn).expect("version"), 1);
        drop(conn);
        // A second ALTER TABLE ADD COLUMN would fail: migration 2 runs exactly once.
        drop(open(&path, Pragmas::default(), &V2).expect("upgrade to 2"));
        let conn = open(&path, Pragmas::default(), &V2).expect("reopen at 2");
        assert_eq!(user_version(&conn).expect("version"), 2);
        let v: i64 = conn.query_row("SELECT v FROM t WHERE k = 'a'", [], |r| r.get(0)).expect("row kept");
        assert_eq!(v, 1);
    }

    #[test]
    fn a_file_from_before_user_version_opens_and_becomes_version_1() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("old.sqlite");
        let old = Connection::open(&path).expect("old");
        old.execute_batch(TABLE).expect("old schema");
        old.execute("INSERT INTO t (k, v) VALUES ('a', 7)", []).expect("old row");
        drop(old);
        let conn = open(&path, Pragmas::default(), &V1).expect("open the old file");
        assert_eq!(user_version(&conn).expect("version"), 1);
        let v: i64 = conn.query_row("SELECT v FROM t WHERE k = 'a'", [], |r| r.get(0)).expect("row kept");
        assert_eq!(v, 7);
    }

    #[test]
    fn a_newer_file_is_refused_naming_the_file_and_both_versions() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("new.sqlite");
        drop(open(&path, Pragmas::default(), &V2).expect("open at 2"));
        let err = open(&path, Pragmas::default(), &V1).expect_err("too new");
        assert!(matches!(err, OpenError::TooNew { found: 2, known: 1, .. }), "{err:?}");
        let text = err.to_string();
        assert!(text.contains(&path.display().to_string()), "{text}");
        assert!(text.contains("version 2") && text.contains("version 1") && text.contains("test store"), "{text}");
        // As a rusqlite error (for stores that wrap one) the message survives whole.
        let err = open(&path, Pragmas::default(), &V1).expect_err("too new");
        assert_eq!(rusqlite::Error::from(err).to_string(), text);
    }

    #[test]
    fn a_failing_migration_leaves_the_file_at_the_version_before() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("s.sqlite");
        drop(open(&path, Pragmas::default(), &V1).expect("open"));
        let broken = Schema { store: "test store", migrations: &[TABLE, "CREATE TABLE u (x); NOT SQL;"] };
        let err = open(&path, Pragmas::default(), &broken).expect_err("broken migration");
        assert!(matches!(err, OpenError::Migrate { version: 2, .. }), "{err:?}");
        let conn = open(&path, Pragmas::default(), &V1).expect("still version 1");
        assert_eq!(user_version(&conn).expect("version"), 1);
        let u: i64 =
            conn.query_row("SELECT count(*) FROM sqlite_master WHERE name = 'u'", [], |r| r.get(0)).expect("count");
        assert_eq!(u, 0, "the failed migration's table was rolled back");
    }
}
