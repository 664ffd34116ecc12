//! The action book: every action's current record in memory, written through to the audit log.
//!
//! Submission is idempotent by action id: the same id with the same request returns the
//! existing record; the same id with a different request is a conflict. Every state change
//! follows the protocol's state machine and is audited with who caused it.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, RwLock};

use lb_common::ids::ActionId;
use lb_common::protocol::{ActionRecord, ActionRequest, ActionState};

use super::audit::{Audit, AuditError, AuditEvent, state_name};

#[derive(Debug, thiserror::Error)]
pub enum BookError {
    #[error("action {0} exists with a different request")]
    Conflict(ActionId),
    #[error("no action {0}")]
    NotFound(ActionId),
    #[error("action {id} is {from} and cannot become {to}")]
    InvalidTransition { id: ActionId, from: &'static str, to: &'static str },
    #[error(transparent)]
    Audit(#[from] AuditError),
}

#[derive(Debug)]
pub enum Submitted {
    Created(ActionRecord),
    Existing(ActionRecord),
}

#[derive(Debug)]
pub struct ActionBook {
    records: RwLock<HashMap<ActionId, ActionRecord>>,
    /// Created, and their creation not yet in the audit log: not to be started, so that no
    /// later event of theirs is audited before it (a submission is queued before it is audited,
    /// so that a refused one leaves no trace).
    unaudited: Mutex<HashSet<ActionId>>,
    audit: Audit,
}

impl ActionBook {
    /// Loads every action the audit log knows.
    pub fn open(audit: Audit) -> Result<Self, AuditError> {
        let records = audit.load_all()?.into_iter().map(|r| (r.request.id.clone(), r)).collect();
        Ok(Self { records: RwLock::new(records), unaudited: Mutex::new(HashSet::new()), audit })
    }

    /// Records a new queued action (in memory only; see [`ActionBook::persist_created`]).
    pub fn create(&self, request: ActionRequest, submitted_by: &str, now_ms: i64) -> Result<Submitted, BookError> {
        let mut records = self.records.write().expect("book lock is never poisoned");
        if let Some(existing) = records.get(&request.id) {
            return if existing.request == request {
                Ok(Submitted::Existing(existing.clone()))
            } else {
                Err(BookError::Conflict(request.id))
            };
        }
        let record = ActionRecord {
            request,
            state: ActionState::Queued,
            submitted_by: submitted_by.to_owned(),
            created_at_ms: now_ms,
            started_at_ms: None,
            finished_at_ms: None,
            operation_id: None,
            failure: None,
        };
        records.insert(record.request.id.clone(), record.clone());
        self.unaudited.lock().expect("book lock is never poisoned").insert(record.request.id.clone());
        Ok(Submitted::Created(record))
    }

    /// Forgets an action that was never queued (the queue refused it).
    pub fn discard(&self, id: &ActionId) {
        self.records.write().expect("book lock is never poisoned").remove(id);
        self.unaudited.lock().expect("book lock is never poisoned").remove(id);
    }

    /// Whether `id`'s creation is in the audit log (every action loaded from it is).
    pub fn audited(&self, id: &ActionId) -> bool {
        !self.unaudited.lock().expect("book lock is never poisoned").contains(id)
    }

    /// Writes the creation to the audit log.
    pub async fn persist_created(&self, record: &ActionRecord) -> Result<(), BookError> {
        let detail = format!("submitted: {}", record.request.reason);
        let event = AuditEvent {
            at_ms: record.created_at_ms,
            state: ActionState::Queued,
            actor: record.submitted_by.clone(),
            detail,
        };
        self.audit.record(record, event).await?;
        self.unaudited.lock().expect("book lock is never poisoned").remove(&record.request.id);
        Ok(())
    }

    /// Moves an action to `to` (checked against the state machine), lets `update` fill in the
    /// details, and audits the change.
    pub async fn transition(
        &self,
        id: &ActionId,
        to: ActionState,
        actor: &str,
        detail: String,
        now_ms: i64,
        update: impl FnOnce(&mut ActionRecord),
    ) -> Result<ActionRecord, BookError> {
        let record = {
            let mut records = self.records.write().expect("book lock is never poisoned");
            let record = records.get_mut(id).ok_or_else(|| BookError::NotFound(id.clone()))?;
            if !record.state.can_become(to) {
                return Err(BookError::InvalidTransition {
                    id: id.clone(),
                    from: state_name(record.state),
                    to: state_name(to),
                });
            }
            record.state = to;
            match to {
                ActionState::Running => record.started_at_ms = Some(now_ms),
                s if s.is_terminal() => record.finished_at_ms = Some(now_ms),
                _ => {}
            }
            update(record);
            record.clone()
        };
        if to.is_terminal() {
            let outcome = state_name(to);
            let kind = record.request.spec.kind().as_str();
            metrics::counter!("lb_ops_actions_total", "kind" => kind, "outcome" => outcome).increment(1);
            if let Some(started) = record.started_at_ms {
                metrics::histogram!("lb_ops_action_duration_seconds", "kind" => kind, "outcome" => outcome)
                    .record((now_ms - started).max(0) as f64 / 1000.0);
            }
        }
        let event = AuditEvent { at_ms: now_ms, state: to, actor: actor.to_owned(), detail };
        self.audit.record(&record, event).await?;
        Ok(record)
    }

    /// Audits an event that does not change the state (operation started, interrupted by
    /// shutdown, resumed), after `update` fills in details.
    pub async fn note(
        &self,
        id: &ActionId,
        actor: &str,
        detail: String,
        now_ms: i64,
        update: impl FnOnce(&mut ActionRecord),
    ) -> Result<ActionRecord, BookError> {
        let record = {
            let mut records = self.records.write().expect("book lock is never poisoned");
            let record = records.get_mut(id).ok_or_else(|| BookError::NotFound(id.clone()))?;
            update(record);
            record.clone()
        };
        let event = AuditEvent { at_ms: now_ms, state: record.state, actor: actor.to_owned(), detail };
        self.audit.record(&record, event).await?;
        Ok(record)
    }

    pub fn get(&self, id: &ActionId) -> Option<ActionRecord> {
        self.records.read().expect("book lock is never poisoned").get(id).cloned()
    }

    /// Actions, oldest first, optionally only those in `state`.
    pub fn list(&self, state: Option<ActionState>) -> Vec<ActionRecord> {
        let records = self.records.read().expect("book lock is never poisoned");
        let mut out: Vec<ActionRecord> =
            records.values().filter(|r| state.is_none_or(|s| r.state == s)).cloned().collect();
        out.sort_by(|a, b| (a.created_at_ms, &a.request.id).cmp(&(b.created_at_ms, &b.request.id)));
        out
    }

    pub fn audit(&self) -> &Audit {
        &self.audit
    }
}

#[cfg(test)]
mod tests {
    use lb_common::ids::Key;
    use lb_common::protocol::{ActionSpec, Origin};

    use super::*;

    fn request(id: &str) -> ActionRequest {
        ActionRequest {
            id: id.parse().expect("id"),
            spec: ActionSpec::Split { partition: "p1".parse().expect("id"), split_key: Key(7) },
            origin: Origin::Manual,
            policy: None,
            reason: "test".into(),
            actor_path: vec!["acme".into()],
            leader_epoch: None,
        }
    }

    #[tokio::test]
    async fn an_action_is_startable_only_once_its_creation_is_audited() {
        let dir = tempfile::tempdir().expect("dir");
        let book = ActionBook::open(Audit::open(&dir.path().join("audit.sqlite")).expect("audit")).expect("book");
        let Submitted::Created(record) = book.create(request("a-1"), "ci", 1_000).expect("created") else {
            panic!("new")
        };
        let id = record.request.id.clone();
        assert!(!book.audited(&id), "queued in memory, not yet in the audit log: the dispatcher must wait");
        book.persist_created(&record).await.expect("audited");
        assert!(book.audited(&id));
        // Its first event is its creation, whatever runs after.
        book.transition(&id, ActionState::Running, "executor", "started".into(), 1_001, |_| {}).await.expect("runs");
        let states: Vec<_> = book.audit.events(&id).await.expect("events").into_iter().map(|e| e.state).collect();
        assert_eq!(states, [ActionState::Queued, ActionState::Running]);
        // A refused submission leaves nothing behind, the pending mark included.
        let Submitted::Created(refused) = book.create(request("a-2"), "ci", 1_002).expect("created") else {
            panic!("new")
        };
        book.discard(&refused.request.id);
        assert!(book.get(&refused.request.id).is_none() && book.audited(&refused.request.id));
        // Loaded from the audit log after a restart: audited.
        drop(book);
        let reopened = ActionBook::open(Audit::open(&dir.path().join("audit.sqlite")).expect("audit")).expect("book");
        assert!(reopened.get(&id).is_some() && reopened.audited(&id));
    }
}
