//! The result store's file across versions: fresh, reopened, written before migrations were
//! tracked (with the record shapes of that time), and written by a newer master.

use lb_common::config::watch::ReloadStatus;
use lb_common::protocol::{ActionEntry, ActionOutcome, ActionRecord, Proposal};
use lb_master::store::{RecordKind, ResultStore, StoredRecord};
use rusqlite::Connection;

/// The schema version this master writes.
const VERSION: i64 = 2;

/// Real bodies, from the protocol examples.
fn action_record() -> ActionRecord {
    serde_json::from_str(include_str!("../../../docs/examples/action_record.json")).expect("example")
}
fn proposal() -> Proposal {
    let v: serde_json::Value =
        serde_json::from_str(include_str!("../../../docs/examples/record_proposal.json")).expect("example");
    serde_json::from_value(v["records"][0]["body"].clone()).expect("a proposal")
}

fn user_version(path: &std::path::Path) -> i64 {
    let conn = Connection::open(path).expect("open");
    conn.query_row("PRAGMA user_version", [], |r| r.get(0)).expect("version")
}

#[tokio::test]
async fn a_fresh_file_is_at_the_current_version_and_reopens() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("nested/results.sqlite");
    let store = ResultStore::open(&path).expect("open");
    store.put_record("p-1", 5, &proposal()).await.expect("put");
    drop(store);
    assert_eq!(user_version(&path), VERSION);
    let store = ResultStore::open(&path).expect("reopen");
    let p: StoredRecord<Proposal> = store.get(RecordKind::Proposal, "p-1").await.expect("get").expect("kept");
    assert_eq!(p.body, proposal());
    drop(store);
    assert_eq!(user_version(&path), VERSION);
}

#[tokio::test]
async fn a_file_from_before_migrations_opens_with_its_records_in_todays_shapes() {
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
    // The shapes that version wrote: the ops server's reply to a submission, a settlement, a
    // failed and an unanswered submission, and a dry-run proposal as its pending entry.
    let record = action_record();
    let rows = [
        ("action", "a-1", serde_json::to_value(&record).expect("json")),
        ("action", "a-2", serde_json::json!({"record": record, "applied": true, "note": null})),
        ("action", "a-3", serde_json::json!({"record": record, "applied": false, "note": "gone"})),
        ("action", "a-4", serde_json::json!({"request": record.request, "state": "failed", "error": "409 conflict"})),
        ("action", "a-5", serde_json::json!({"request": record.request, "state": "unknown", "error": "timed out"})),
        (
            "proposal",
            "p-1",
            serde_json::json!({"id": "p-1", "proposal": proposal(),
            "first_proposed_at_ms": 1, "last_proposed_at_ms": 2}),
        ),
        ("proposal", "p-2", serde_json::to_value(proposal()).expect("json")),
    ];
    for (kind, key, body) in &rows {
        old.execute(
            "INSERT INTO records (kind, key, at_ms, body) VALUES (?1, ?2, 10, ?3)",
            rusqlite::params![kind, key, body.to_string()],
        )
        .expect("old record");
    }
    drop(old);
    assert_eq!(user_version(&path), 0);
    let store = ResultStore::open(&path).expect("open the old file");
    let entry = |key: &'static str| {
        let store = store.clone();
        async move {
            let r: StoredRecord<ActionEntry> = store.get(RecordKind::Action, key).await.expect("typed").expect("kept");
            assert_eq!(r.at_ms, 10);
            r.body
        }
    };
    let submitted = entry("a-1").await;
    assert_eq!((submitted.outcome, submitted.record.as_ref()), (ActionOutcome::Submitted, Some(&record)));
    assert_eq!(submitted.request, record.request);
    let applied = entry("a-2").await;
    assert_eq!((applied.outcome, applied.note), (ActionOutcome::Applied, None));
    let not_applied = entry("a-3").await;
    assert_eq!((not_applied.outcome, not_applied.note.as_deref()), (ActionOutcome::NotApplied, Some("gone")));
    let refused = entry("a-4").await;
    assert_eq!(
        (refused.outcome, refused.record, refused.note.as_deref()),
        (ActionOutcome::Refused, None, Some("409 conflict"))
    );
    assert_eq!(entry("a-5").await.outcome, ActionOutcome::Unanswered);
    for key in ["p-1", "p-2"] {
        let p: StoredRecord<Proposal> = store.get(RecordKind::Proposal, key).await.expect("typed").expect("kept");
        assert_eq!(p.body, proposal(), "{key}");
    }
    drop(store);
    assert_eq!(user_version(&path), VERSION);
    // Opening again changes nothing.
    let store = ResultStore::open(&path).expect("reopen");
    assert_eq!(
        store.get::<ActionEntry>(RecordKind::Action, "a-2").await.expect("typed").expect("kept").body,
        applied_again(&record)
    );
    let _: Option<StoredRecord<ReloadStatus>> = store.get(RecordKind::ConfigReload, "none").await.expect("empty kind");
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
    assert!(text.contains("newer than version 2 that this master result store knows"), "{text}");
}

fn applied_again(record: &ActionRecord) -> ActionEntry {
    ActionEntry {
        request: record.request.clone(),
        outcome: ActionOutcome::Applied,
        record: Some(record.clone()),
        note: None,
        stages: None,
    }
}
