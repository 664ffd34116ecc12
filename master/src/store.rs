//! ResultDataStore: the master's durable history in SQLite — analysis results, proposals,
//! actions, evaluations and config reloads — with retention.
//!
//! One table holds every kind of record as JSON under `(kind, key)`, with its time; a record
//! written again under the same key replaces the old one (an action's record as it moves through
//! its states). Kinds are a closed enum so a typo cannot create a new one. Writes run on a
//! blocking thread; nothing here blocks an async task.

use std::path::Path;
use std::sync::{Arc, Mutex};

pub use lb_common::protocol::{RecordBody, RecordKind, StoredRecord};
use rusqlite::{Connection, params};
use serde::Serialize;
use serde::de::DeserializeOwned;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("result store: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("result store record: {0}")]
    Json(#[from] serde_json::Error),
    #[error("result store task failed: {0}")]
    Task(String),
}

/// A record as just written, as the JSON of its [`StoredRecord`]: what the console's event
/// stream sends.
pub type RecordEvent = Arc<str>;

/// Records written while a reader is this far behind are dropped for it (it is told it lagged).
const EVENT_BUFFER: usize = 1_024;

#[derive(Debug, Clone)]
pub struct ResultStore {
    conn: Arc<Mutex<Connection>>,
    events: tokio::sync::broadcast::Sender<RecordEvent>,
}

impl ResultStore {
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        // The result store's migrations, in order; append only, never edit a shipped entry.
        const MIGRATIONS: &[&str] = &[
            // 1: the records. `IF NOT EXISTS`: files from before `user_version` was kept already
            // have the table, and open as version 1.
            "CREATE TABLE IF NOT EXISTS records (
                 kind TEXT NOT NULL,
                 key TEXT NOT NULL,
                 at_ms INTEGER NOT NULL,
                 body TEXT NOT NULL,
                 PRIMARY KEY (kind, key)
             ) WITHOUT ROWID;
             CREATE INDEX IF NOT EXISTS records_by_time ON records (kind, at_ms);",
            // 2: one body per kind (`lb_common::protocol::records`). Action records were kept in
            // three shapes — the ops server's reply to a submission, a settlement
            // `{record, applied, note}`, a failed submission `{request, state, error}` — and a
            // dry-run proposal as its pending entry `{id, proposal, ...}`; each becomes the
            // typed body. Rows already in the new shape (an `outcome`) are left alone.
            "UPDATE records SET body = json_object(
                 'request', json_extract(body, '$.record.request'),
                 'outcome', CASE WHEN json_extract(body, '$.applied') THEN 'applied' ELSE 'not_applied' END,
                 'record', json_extract(body, '$.record'),
                 'note', json_extract(body, '$.note'))
               WHERE kind = 'action' AND json_type(body, '$.outcome') IS NULL
                 AND json_type(body, '$.record') = 'object';
             UPDATE records SET body = json_object(
                 'request', json_extract(body, '$.request'),
                 'outcome', 'submitted',
                 'record', json(body))
               WHERE kind = 'action' AND json_type(body, '$.outcome') IS NULL
                 AND json_type(body, '$.created_at_ms') IS NOT NULL;
             UPDATE records SET body = json_object(
                 'request', json_extract(body, '$.request'),
                 'outcome', CASE json_extract(body, '$.state') WHEN 'failed' THEN 'refused' ELSE 'unanswered' END,
                 'note', json_extract(body, '$.error'))
               WHERE kind = 'action' AND json_type(body, '$.outcome') IS NULL
                 AND json_type(body, '$.error') IS NOT NULL;
             UPDATE records SET body = json_extract(body, '$.proposal')
               WHERE kind = 'proposal' AND json_type(body, '$.proposal') = 'object';",
        ];
        const SCHEMA: lb_common::sqlite::Schema =
            lb_common::sqlite::Schema { store: "master result store", migrations: MIGRATIONS };
        // WAL, synchronous NORMAL; the opener's error, message whole, as the store's SQLite error.
        let conn = lb_common::sqlite::open(path, lb_common::sqlite::Pragmas::default(), &SCHEMA)
            .map_err(rusqlite::Error::from)?;
        let (events, _) = tokio::sync::broadcast::channel(EVENT_BUFFER);
        Ok(Self { conn: Arc::new(Mutex::new(conn)), events })
    }

    /// Writes (or replaces) the record `(T::KIND, key)`: every body is its kind's type. Once
    /// written, every record but an analysis pass (the stream's `pass` events carry those) goes
    /// to the [`subscribe`](Self::subscribe)rs.
    pub async fn put_record<T: RecordBody + Sync>(&self, key: &str, at_ms: i64, body: &T) -> Result<(), StoreError> {
        self.put(T::KIND, key, at_ms, body).await?;
        if T::KIND != RecordKind::Analysis && self.events.receiver_count() > 0 {
            let record = StoredRecord { kind: T::KIND, key: key.to_owned(), at_ms, body };
            // Nobody listening is not an error.
            let _ = self.events.send(serde_json::to_string(&record)?.into());
        }
        Ok(())
    }

    /// Every record written from now on (but analysis passes), as JSON.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<RecordEvent> {
        self.events.subscribe()
    }

    /// Writes (or replaces) the record `(kind, key)`.
    async fn put<T: Serialize>(&self, kind: RecordKind, key: &str, at_ms: i64, body: &T) -> Result<(), StoreError> {
        let body = serde_json::to_string(body)?;
        let key = key.to_owned();
        self.blocking(move |conn| {
            conn.prepare_cached(
                "INSERT INTO records (kind, key, at_ms, body) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (kind, key) DO UPDATE SET at_ms = excluded.at_ms, body = excluded.body",
            )?
            .execute(params![kind.as_str(), key, at_ms, body])?;
            Ok(())
        })
        .await
    }

    pub async fn get<T: DeserializeOwned + Send + 'static>(
        &self,
        kind: RecordKind,
        key: &str,
    ) -> Result<Option<StoredRecord<T>>, StoreError> {
        let key = key.to_owned();
        self.blocking(move |conn| {
            let row: Option<(i64, String)> = rusqlite::OptionalExtension::optional(conn.query_row(
                "SELECT at_ms, body FROM records WHERE kind = ?1 AND key = ?2",
                params![kind.as_str(), key],
                |r| Ok((r.get(0)?, r.get(1)?)),
            ))?;
            match row {
                None => Ok(None),
                Some((at_ms, body)) => Ok(Some(StoredRecord { kind, key, at_ms, body: serde_json::from_str(&body)? })),
            }
        })
        .await
    }

    /// The newest `limit` records of `kind` at or after `since_ms`, newest first.
    pub async fn list<T: DeserializeOwned + Send + 'static>(
        &self,
        kind: RecordKind,
        since_ms: i64,
        limit: usize,
    ) -> Result<Vec<StoredRecord<T>>, StoreError> {
        self.blocking(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT key, at_ms, body FROM records WHERE kind = ?1 AND at_ms >= ?2 ORDER BY at_ms DESC, key LIMIT ?3",
            )?;
            let rows = stmt.query_map(params![kind.as_str(), since_ms, limit as i64], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, String>(2)?))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (key, at_ms, body) = row?;
                out.push(StoredRecord { kind, key, at_ms, body: serde_json::from_str(&body)? });
            }
            Ok(out)
        })
        .await
    }

    /// Deletes records older than `before_ms`; returns how many.
    pub async fn expire(&self, before_ms: i64) -> Result<usize, StoreError> {
        self.blocking(move |conn| Ok(conn.execute("DELETE FROM records WHERE at_ms < ?1", [before_ms])?)).await
    }

    async fn blocking<R: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<R, StoreError> + Send + 'static,
    ) -> Result<R, StoreError> {
        let conn = self.conn.clone();
        tokio::task::spawn_blocking(move || f(&conn.lock().expect("result store lock is never poisoned")))
            .await
            .map_err(|e| StoreError::Task(e.to_string()))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn put_replaces_list_orders_and_expire_deletes() {
        let dir = tempfile::tempdir().expect("dir");
        let store = ResultStore::open(&dir.path().join("r.sqlite")).expect("open");
        store.put(RecordKind::Action, "a-1", 10, &serde_json::json!({"state": "queued"})).await.expect("put");
        store.put(RecordKind::Action, "a-1", 20, &serde_json::json!({"state": "running"})).await.expect("put");
        store.put(RecordKind::Action, "a-2", 15, &serde_json::json!({"state": "queued"})).await.expect("put");
        store.put(RecordKind::Proposal, "p-1", 5, &serde_json::json!({})).await.expect("put");
        let a1: StoredRecord<serde_json::Value> =
            store.get(RecordKind::Action, "a-1").await.expect("get").expect("found");
        assert_eq!((a1.at_ms, a1.body["state"].as_str()), (20, Some("running")));
        let list: Vec<StoredRecord<serde_json::Value>> = store.list(RecordKind::Action, 0, 10).await.expect("list");
        assert_eq!(list.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(), ["a-1", "a-2"]);
        assert_eq!(store.expire(16).await.expect("expire"), 2, "a-2 and p-1 are older than 16");
        drop(store);
        let reopened = ResultStore::open(&dir.path().join("r.sqlite")).expect("reopen");
        let left: Vec<StoredRecord<serde_json::Value>> = reopened.list(RecordKind::Action, 0, 10).await.expect("list");
        assert_eq!(left.len(), 1, "durable across reopen");
    }
}
