//! The audit log in SQLite: every action as last known, and every state change with who, when
//! and why. Survives restarts; the action book reloads from it.

use std::path::Path;
use std::sync::{Arc, Mutex};

use lb_common::ids::ActionId;
use lb_common::protocol::{ActionRecord, ActionState, StaleEpochRefusal};
use lb_common::sqlite::{Pragmas, Schema};
use rusqlite::{Connection, params};

/// The audit log's migrations, in order; append only, never edit a shipped entry.
const MIGRATIONS: &[&str] = &[
    // 1: actions and their events. `IF NOT EXISTS`: files from before `user_version` was kept
    // already have these tables, and open as version 1.
    "CREATE TABLE IF NOT EXISTS actions (
         id TEXT PRIMARY KEY,
         record TEXT NOT NULL,
         state TEXT NOT NULL,
         created_at_ms INTEGER NOT NULL,
         updated_at_ms INTEGER NOT NULL
     );
     CREATE TABLE IF NOT EXISTS action_events (
         seq INTEGER PRIMARY KEY AUTOINCREMENT,
         action_id TEXT NOT NULL,
         at_ms INTEGER NOT NULL,
         state TEXT NOT NULL,
         actor TEXT NOT NULL,
         detail TEXT NOT NULL
     );
     CREATE INDEX IF NOT EXISTS action_events_by_action ON action_events (action_id, seq);",
    // 2: fencing (master HA): every leadership term seen, and every submission refused for an
    // older one.
    "CREATE TABLE leader_epochs (
         epoch INTEGER PRIMARY KEY,
         at_ms INTEGER NOT NULL,
         leader TEXT NOT NULL
     );
     CREATE TABLE stale_epoch_refusals (
         seq INTEGER PRIMARY KEY AUTOINCREMENT,
         at_ms INTEGER NOT NULL,
         action_id TEXT,
         leader_epoch INTEGER NOT NULL,
         newest_epoch INTEGER NOT NULL,
         submitted_by TEXT NOT NULL
     );",
];

/// The ops server's audit log.
pub const SCHEMA: Schema = Schema { store: "ops server audit log", migrations: MIGRATIONS };

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error(transparent)]
    Open(#[from] lb_common::sqlite::OpenError),
    #[error("audit log: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("audit log record is not valid JSON: {0}")]
    Decode(#[from] serde_json::Error),
    #[error("audit log task failed: {0}")]
    Task(String),
}

/// One line of an action's history, as `GET /v1/actions/{id}/events` serves it.
pub use lb_common::protocol::AuditEvent;

#[derive(Debug, Clone)]
pub struct Audit {
    conn: Arc<Mutex<Connection>>,
}

impl Audit {
    /// Opens (creating or migrating) the audit log: WAL, synchronous NORMAL.
    pub fn open(path: &Path) -> Result<Self, AuditError> {
        let conn = lb_common::sqlite::open(path, Pragmas::default(), &SCHEMA)?;
        Ok(Self { conn: Arc::new(Mutex::new(conn)) })
    }

    /// Stores the record and appends the event, in one transaction.
    pub async fn record(&self, record: &ActionRecord, event: AuditEvent) -> Result<(), AuditError> {
        let json = serde_json::to_string(record)?;
        let id = record.request.id.to_string();
        let created = record.created_at_ms;
        let conn = self.conn.clone();
        tokio::task::spawn_blocking(move || {
            let mut conn = conn.lock().expect("audit lock is never poisoned");
            let tx = conn.transaction()?;
            let state = state_name(event.state);
            tx.execute(
                "INSERT INTO actions (id, record, state, created_at_ms, updated_at_ms) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (id) DO UPDATE SET record = excluded.record, state = excluded.state,
                     updated_at_ms = excluded.updated_at_ms",
                params![id, json, state, created, event.at_ms],
            )?;
            tx.execute(
                "INSERT INTO action_events (action_id, at_ms, state, actor, detail) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![id, event.at_ms, state, event.actor, event.detail],
            )?;
            tx.commit()?;
            Ok(())
        })
        .await
        .map_err(|e| AuditError::Task(e.to_string()))?
    }

    /// Every stored action, oldest first.
    pub fn load_all(&self) -> Result<Vec<ActionRecord>, AuditError> {
        let conn = self.conn.lock().expect("audit lock is never poisoned");
        let mut stmt = conn.prepare("SELECT record FROM actions ORDER BY created_at_ms, id")?;
        let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
        let mut out = Vec::new();
        for row in rows {
            out.push(serde_json::from_str(&row?)?);
        }
        Ok(out)
    }

    pub async fn events(&self, id: &ActionId) -> Result<Vec<AuditEvent>, AuditError> {
        let conn = self.conn.clone();
        let id = id.to_string();
        tokio::task::spawn_blocking(move || {
            let conn = conn.lock().expect("audit lock is never poisoned");
            let mut stmt = conn
                .prepare("SELECT at_ms, state, actor, detail FROM action_events WHERE action_id = ?1 ORDER BY seq")?;
            let rows = stmt.query_map([id], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?, r.get::<_, String>(3)?))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (at_ms, state, actor, detail) = row?;
                let state = serde_json::from_value(serde_json::Value::String(state))?;
                out.push(AuditEvent { at_ms, state, actor, detail });
            }
            Ok(out)
        })
        .await
        .map_err(|e| AuditError::Task(e.to_string()))?
    }
}

impl Audit {
    /// The newest leadership term recorded, with who announced it.
    pub fn newest_epoch(&self) -> Result<Option<(u64, String)>, AuditError> {
        let conn = self.conn.lock().expect("audit lock is never poisoned");
        let mut stmt = conn.prepare("SELECT epoch, leader FROM leader_epochs ORDER BY epoch DESC LIMIT 1")?;
        let mut rows = stmt.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))?;
        Ok(rows.next().transpose()?.map(|(epoch, leader)| (epoch as u64, leader)))
    }

    /// Records a newer leadership term.
    pub async fn record_epoch(&self, epoch: u64, leader: &str, at_ms: i64) -> Result<(), AuditError> {
        let conn = self.conn.clone();
        let leader = leader.to_owned();
        tokio::task::spawn_blocking(move || {
            let conn = conn.lock().expect("audit lock is never poisoned");
            conn.execute(
                "INSERT OR IGNORE INTO leader_epochs (epoch, at_ms, leader) VALUES (?1, ?2, ?3)",
                params![epoch as i64, at_ms, leader],
            )?;
            Ok(())
        })
        .await
        .map_err(|e| AuditError::Task(e.to_string()))?
    }

    /// Records a submission (or announcement) refused for its stale leadership term.
    pub async fn record_refusal(&self, refusal: &StaleEpochRefusal) -> Result<(), AuditError> {
        let conn = self.conn.clone();
        let r = refusal.clone();
        tokio::task::spawn_blocking(move || {
            let conn = conn.lock().expect("audit lock is never poisoned");
            conn.execute(
                "INSERT INTO stale_epoch_refusals (at_ms, action_id, leader_epoch, newest_epoch, submitted_by)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![
                    r.at_ms,
                    r.action_id.as_ref().map(|id| id.to_string()),
                    r.leader_epoch as i64,
                    r.newest_epoch as i64,
                    r.submitted_by
                ],
            )?;
            Ok(())
        })
        .await
        .map_err(|e| AuditError::Task(e.to_string()))?
    }

    /// The newest `limit` refusals, newest first.
    pub async fn refusals(&self, limit: usize) -> Result<Vec<StaleEpochRefusal>, AuditError> {
        let conn = self.conn.clone();
        tokio::task::spawn_blocking(move || {
            let conn = conn.lock().expect("audit lock is never poisoned");
            let mut stmt = conn.prepare(
                "SELECT at_ms, action_id, leader_epoch, newest_epoch, submitted_by FROM stale_epoch_refusals
                 ORDER BY seq DESC LIMIT ?1",
            )?;
            let rows = stmt.query_map([limit as i64], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, Option<String>>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, i64>(3)?,
                    r.get::<_, String>(4)?,
                ))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (at_ms, action_id, leader_epoch, newest_epoch, submitted_by) = row?;
                out.push(StaleEpochRefusal {
                    at_ms,
                    // Ids were valid when they were stored; one that no longer parses is dropped.
                    action_id: action_id.and_then(|id| id.parse().ok()),
                    leader_epoch: leader_epoch as u64,
                    newest_epoch: newest_epoch as u64,
                    submitted_by,
                });
            }
            Ok(out)
        })
        .await
        .map_err(|e| AuditError::Task(e.to_string()))?
    }
}

pub fn state_name(state: ActionState) -> &'static str {
    match state {
        ActionState::Queued => "queued",
        ActionState::Running => "running",
        ActionState::Succeeded => "succeeded",
        ActionState::Failed => "failed",
        ActionState::Cancelled => "cancelled",
        ActionState::TimedOut => "timed_out",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The schema as `Audit::open` created it before migrations were tracked: no user_version.
    const SCHEMA_BEFORE_MIGRATIONS: &str = "CREATE TABLE IF NOT EXISTS actions (
             id TEXT PRIMARY KEY,
             record TEXT NOT NULL,
             state TEXT NOT NULL,
             created_at_ms INTEGER NOT NULL,
             updated_at_ms INTEGER NOT NULL
         );
         CREATE TABLE IF NOT EXISTS action_events (
             seq INTEGER PRIMARY KEY AUTOINCREMENT,
             action_id TEXT NOT NULL,
             at_ms INTEGER NOT NULL,
             state TEXT NOT NULL,
             actor TEXT NOT NULL,
             detail TEXT NOT NULL
         );
         CREATE INDEX IF NOT EXISTS action_events_by_action ON action_events (action_id, seq);";

    fn version(audit: &Audit) -> i64 {
        let conn = audit.conn.lock().expect("audit lock is never poisoned");
        lb_common::sqlite::user_version(&conn).expect("version")
    }

    #[test]
    fn a_fresh_file_opens_at_the_latest_version_and_reopens() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("nested/audit.sqlite");
        let audit = Audit::open(&path).expect("open");
        assert_eq!(version(&audit), SCHEMA.version());
        assert!(audit.load_all().expect("load").is_empty());
        drop(audit);
        let audit = Audit::open(&path).expect("reopen");
        assert_eq!(version(&audit), SCHEMA.version());
    }

    #[test]
    fn a_file_from_before_migrations_opens_with_its_events_and_migrates_to_the_latest() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("audit.sqlite");
        let old = Connection::open(&path).expect("old");
        old.pragma_update(None, "journal_mode", "wal").expect("wal");
        old.execute_batch(SCHEMA_BEFORE_MIGRATIONS).expect("old schema");
        old.execute(
            "INSERT INTO action_events (action_id, at_ms, state, actor, detail) VALUES ('a-1', 5, 'queued', 'ci', 'x')",
            [],
        )
        .expect("old event");
        drop(old);
        let audit = Audit::open(&path).expect("open the old file");
        assert_eq!(version(&audit), SCHEMA.version());
        let conn = audit.conn.lock().expect("audit lock is never poisoned");
        let actor: String =
            conn.query_row("SELECT actor FROM action_events WHERE action_id = 'a-1'", [], |r| r.get(0)).expect("kept");
        assert_eq!(actor, "ci");
    }

    #[test]
    fn a_file_from_a_newer_ops_server_is_refused() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("audit.sqlite");
        let audit = Audit::open(&path).expect("open");
        audit.conn.lock().expect("lock").pragma_update(None, "user_version", 9).expect("bump");
        drop(audit);
        let err = Audit::open(&path).expect_err("newer");
        let text = err.to_string();
        assert!(text.contains("audit.sqlite") && text.contains("schema version 9"), "{text}");
        assert!(text.contains("newer than version 2 that this ops server audit log knows"), "{text}");
    }
}
