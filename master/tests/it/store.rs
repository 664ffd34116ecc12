//! The result store's file across versions: fresh, reopened, written before migrations were
//! tracked, and written by a newer master.

use lb_master::store::{RecordKind, ResultStore, StoredRecord};
use rusqlite::Connection;

fn user_version(path: &std::path::Path) -> i64 {
    let conn = Connection::open(path).expect("open");
    conn.query_row("PRAGMA user_version", [], |r| r.get(0)).expect("version")
}

#[tokio::test]
async fn a_fresh_file_is_version_1_and_reopens() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("nested/results.sqlite");
    let store = ResultStore::open(&path).expect("open");
    store.put(RecordKind::Proposal, "p-1", 5, &serde_json::json!({"n": 1})).await.expect("put");
    drop(store);
    assert_eq!(user_version(&path), 1);
    let store = ResultStore::open(&path).expect("reopen");
    let p: StoredRecord<serde_json::Value> = store.get(RecordKind::Proposal, "p-1").await.expect("get").expect("kept");
    assert_eq!(p.body["n"], 1);
    drop(store);
    assert_eq!(user_version(&path), 1);
}

#[tokio::test]
async fn a_file_from_before_migrations_opens_with_its_records_and_becomes_version_1() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("results.sqlite");
    // The schema as `ResultStore::open` created it before, with no user_version.
    let old = Connection::open(&path).expect("old");
    old.pragma_update(None, "journal_mode", "wal").expect("wal");
    old.execute_batch(
        "CREATE TABLE IF NOT EXISTS records (
             kind TEXT NOT NULL,
             key TEXT NOT NULL,
             at_ms INTEGER NOT NULL,
             body TEXT NOT NULL,
             PRIMARY KEY (kind, key)
         ) WITHOUT ROWID;
         CREATE INDEX IF NOT EXISTS records_by_time ON records (kind, at_ms);",
    )
    .expect("old schema");
    old.execute(
        "INSERT INTO records (kind, key, at_ms, body) VALUES ('action', 'a-1', 10, '{\"state\":\"queued\"}')",
        [],
    )
    .expect("old record");
    drop(old);
    assert_eq!(user_version(&path), 0);
    let store = ResultStore::open(&path).expect("open the old file");
    let a: StoredRecord<serde_json::Value> = store.get(RecordKind::Action, "a-1").await.expect("get").expect("kept");
    assert_eq!((a.at_ms, a.body["state"].as_str()), (10, Some("queued")));
    drop(store);
    assert_eq!(user_version(&path), 1);
}

#[test]
fn a_file_from_a_newer_master_is_refused_naming_the_file_and_both_versions() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("results.sqlite");
    drop(ResultStore::open(&path).expect("open"));
    Connection::open(&path).expect("open").pragma_update(None, "user_version", 3).expect("bump");
    let err = ResultStore::open(&path).expect_err("newer");
    let text = err.to_string();
    assert!(text.contains("results.sqlite") && text.contains("schema version 3"), "{text}");
    assert!(text.contains("newer than version 1 that this master result store knows"), "{text}");
}
