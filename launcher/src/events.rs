//! The event lines `lb up` prints: one line per thing a user watching the loop cares about —
//! a hotspot detected (and gone), an action proposed with its reason, an action finished, a
//! verdict — read from the master's API with the typed client, as any outside tool would.
//!
//! [`Follower`] is pure (what the API said in, lines out) so its wording is tested without a
//! cluster; [`follow`] polls the master once a second and prints.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use lb_common::clients::MasterClient;
use lb_common::protocol::{
    ActionEntry, ActionOutcome, ActionSpec, Evaluation, GroupTarget, PassSnapshot, PolicyMode, Proposal, RecordsQuery,
    StoredRecord,
};
use tokio_util::sync::CancellationToken;

/// How often the master is asked.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);
/// Records asked per kind and poll: more than a pass writes in a second.
const RECORDS_PER_POLL: usize = 200;

/// What one poll of the master returned.
#[derive(Debug, Default)]
pub struct Observed {
    pub pass: Option<PassSnapshot>,
    /// Newest first, as the API lists them.
    pub proposals: Vec<StoredRecord<Proposal>>,
    pub actions: Vec<StoredRecord<ActionEntry>>,
    pub evaluations: Vec<StoredRecord<Evaluation>>,
}

/// Turns successive polls into event lines, each event once.
#[derive(Debug)]
pub struct Follower {
    started_ms: i64,
    hot: bool,
    proposals: HashSet<String>,
    outcomes: HashMap<String, ActionOutcome>,
    evaluations: HashSet<String>,
}

impl Follower {
    /// Lines are stamped with the time since `started_ms`; records older than it (a data
    /// directory used before) are not events of this run.
    pub fn new(started_ms: i64) -> Self {
        Self {
            started_ms,
            hot: false,
            proposals: HashSet::new(),
            outcomes: HashMap::new(),
            evaluations: HashSet::new(),
        }
    }

    /// The query for each record kind: this run's records.
    pub fn query(&self) -> RecordsQuery {
        RecordsQuery { since_ms: Some(self.started_ms), limit: Some(RECORDS_PER_POLL) }
    }

    pub fn lines(&mut self, observed: Observed, now_ms: i64) -> Vec<String> {
        let mut events: Vec<(i64, String)> = Vec::new();
        if let Some(pass) = &observed.pass
            && pass.pass > 0
        {
            let s = &pass.stats;
            let hot = s.hot_partitions > 0 || s.overloaded_workers > 0;
            if hot != self.hot {
                self.hot = hot;
                let at = pass.at_ms.unwrap_or(now_ms);
                events.push((
                    at,
                    if hot {
                        format!(
                            "hotspot detected: {} hot partition{}, {} overloaded worker{}; the hottest worker is at {:.2} of its capacity",
                            s.hot_partitions,
                            plural(s.hot_partitions),
                            s.overloaded_workers,
                            plural(s.overloaded_workers),
                            s.max_load_ratio
                        )
                    } else {
                        format!(
                            "hotspot gone: no hot partition or overloaded worker; the hottest worker is at {:.2} of its capacity",
                            s.max_load_ratio
                        )
                    },
                ));
            }
        }
        for r in observed.proposals.iter().rev() {
            if self.proposals.insert(r.key.clone()) {
                let p = &r.body;
                let waiting = match p.mode {
                    PolicyMode::DryRun => format!(" [dry run: approve with POST /api/v1/proposals/{}/approve]", r.key),
                    _ => String::new(),
                };
                events.push((
                    r.at_ms,
                    format!("proposed: {} ({}): {}{waiting}", describe(&p.spec), p.policy.as_str(), p.reason),
                ));
            }
        }
        for r in observed.actions.iter().rev() {
            let entry = &r.body;
            if self.outcomes.insert(r.key.clone(), entry.outcome) == Some(entry.outcome)
                || entry.outcome == ActionOutcome::Submitted
            {
                continue;
            }
            let took = entry
                .record
                .as_ref()
                .and_then(|rec| Some(rec.finished_at_ms? - rec.started_at_ms.unwrap_or(rec.created_at_ms)))
                .map_or_else(String::new, |ms| format!(" after {:.1} s", ms as f64 / 1000.0));
            let note = entry.note.as_deref().map_or_else(String::new, |n| format!(": {n}"));
            let what = match entry.outcome {
                ActionOutcome::Applied => "finished, applied",
                ActionOutcome::NotApplied => "finished, not applied",
                ActionOutcome::Refused => "refused by the ops server",
                ActionOutcome::Unanswered => "submitted, reply lost (still followed)",
                ActionOutcome::Submitted => "submitted",
            };
            events.push((r.at_ms, format!("action {what}{took}: {}{note}", describe(&entry.request.spec))));
        }
        for r in observed.evaluations.iter().rev() {
            if self.evaluations.insert(r.key.clone()) {
                let e = &r.body;
                events.push((
                    r.at_ms,
                    format!(
                        "verdict: {} was {} (score {:.2}): {}",
                        describe(&e.spec),
                        e.judgement.verdict.as_str().replace('_', " "),
                        e.judgement.score,
                        e.judgement.why
                    ),
                ));
            }
        }
        events.sort_by_key(|(at, _)| *at);
        events.into_iter().map(|(at, line)| format!("{} {line}", self.stamp(at))).collect()
    }

    fn stamp(&self, at_ms: i64) -> String {
        let secs = (at_ms - self.started_ms).max(0) / 1000;
        format!("{:>3}:{:02}", secs / 60, secs % 60)
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// An action in a few words: `split p-0003 at 4200000000000000`, `move slot-00012 to w-0001`.
pub fn describe(spec: &ActionSpec) -> String {
    match spec {
        ActionSpec::Split { partition, split_key } => format!("split {partition} at {split_key}"),
        ActionSpec::SplitInto { .. } => spec.to_string(),
        ActionSpec::Move { .. } => spec.to_string(),
        ActionSpec::Merge { left, right, to_worker: None } => format!("merge {left} with {right}"),
        ActionSpec::Merge { left, right, to_worker: Some(w) } => format!("merge {left} with {right} on {w}"),
        ActionSpec::Group { target, group } => {
            let target = match target {
                GroupTarget::Partition { partition } => partition.to_string(),
                GroupTarget::Table { tenant, table } => format!("table {tenant}/{table}"),
                GroupTarget::Tenant { tenant } => format!("tenant {tenant}"),
            };
            format!("isolate {target} in group {group}")
        }
        ActionSpec::Reshard { tenant, dataset, tenant_shards, dataset_shards, .. } => {
            format!("reshard {tenant}/{dataset} to {tenant_shards} tenant and {dataset_shards} dataset shards")
        }
    }
}

/// Polls the master every [`POLL_INTERVAL`] and prints each event line until `cancel`. A
/// failed poll (the master is starting or stopping) prints nothing and is retried.
pub async fn follow(master: MasterClient, started_ms: i64, cancel: CancellationToken) {
    let mut follower = Follower::new(started_ms);
    let mut tick = tokio::time::interval(POLL_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let query = follower.query();
        let (pass, proposals, actions, evaluations) = tokio::join!(
            master.pass(),
            master.records::<Proposal>(&query),
            master.records::<ActionEntry>(&query),
            master.records::<Evaluation>(&query),
        );
        let observed = Observed {
            pass: pass.ok(),
            proposals: proposals.unwrap_or_default(),
            actions: actions.unwrap_or_default(),
            evaluations: evaluations.unwrap_or_default(),
        };
        for line in follower.lines(observed, chrono::Utc::now().timestamp_millis()) {
            println!("{line}");
        }
    }
}

#[cfg(test)]
mod tests {
    use lb_common::protocol::{
        ActionRecord, ActionRequest, ActionState, Judgement, Origin, PlanStats, Policy, Prediction, RecordKind,
        Snapshot, Subject, Trigger, Verdict,
    };

    use super::*;

    const T0: i64 = 1_000_000;

    fn split() -> ActionSpec {
        ActionSpec::Split { partition: "p-0003".parse().expect("id"), split_key: lb_common::ids::Key(0x42 << 56) }
    }

    fn stored<T>(kind: RecordKind, key: &str, at_ms: i64, body: T) -> StoredRecord<T> {
        StoredRecord { kind, key: key.to_owned(), at_ms, body }
    }

    fn pass(n: u64, at_ms: i64, hot_partitions: usize) -> PassSnapshot {
        PassSnapshot {
            pass: n,
            at_ms: Some(at_ms),
            stats: PlanStats { hot_partitions, max_load_ratio: 1.25, ..PlanStats::default() },
            ..PassSnapshot::default()
        }
    }

    fn proposal() -> Proposal {
        Proposal {
            spec: split(),
            policy: Policy::PartitionOverload,
            mode: PolicyMode::Auto,
            origin: Origin::Online,
            reason: "p-0003 at 1.40 of its limit for 2 windows".to_owned(),
            trigger: Trigger::default(),
            predicted: Prediction::default(),
            rejected_alternatives: Vec::new(),
        }
    }

    fn entry(outcome: ActionOutcome) -> ActionEntry {
        let request = ActionRequest {
            id: "a-1".parse().expect("id"),
            spec: split(),
            origin: Origin::Online,
            policy: Some("partition_overload".to_owned()),
            reason: "r".to_owned(),
            actor_path: vec!["acme".to_owned()],
            leader_epoch: None,
        };
        let record = ActionRecord {
            request: request.clone(),
            state: ActionState::Succeeded,
            submitted_by: "master".to_owned(),
            created_at_ms: T0 + 31_000,
            started_at_ms: Some(T0 + 31_000),
            finished_at_ms: Some(T0 + 31_800),
            operation_id: None,
            failure: None,
        };
        ActionEntry { request, outcome, record: Some(record), note: None, stages: None }
    }

    #[test]
    fn each_event_is_told_once_in_time_order() {
        let mut f = Follower::new(T0);
        assert!(f.lines(Observed { pass: Some(pass(1, T0 + 5_000, 0)), ..Observed::default() }, T0).is_empty());
        let lines = f.lines(
            Observed {
                pass: Some(pass(30, T0 + 30_500, 1)),
                proposals: vec![stored(RecordKind::Proposal, "a-1", T0 + 30_600, proposal())],
                actions: vec![stored(RecordKind::Action, "a-1", T0 + 30_700, entry(ActionOutcome::Submitted))],
                ..Observed::default()
            },
            T0 + 31_000,
        );
        assert_eq!(
            lines,
            [
                "  0:30 hotspot detected: 1 hot partition, 0 overloaded workers; the hottest worker is at 1.25 of its capacity",
                "  0:30 proposed: split p-0003 at 4200000000000000 (partition_overload): p-0003 at 1.40 of its limit for 2 windows",
            ]
        );
        let evaluation = Evaluation {
            action_id: "a-1".to_owned(),
            spec: split(),
            policy: Some(Policy::PartitionOverload),
            subject: Subject { partitions: Vec::new(), range: None, source: None, dest: None, dedication: false },
            submitted_at_ms: T0 + 30_700,
            finished_at_ms: T0 + 31_800,
            evaluated_at_ms: T0 + 52_000,
            settle_secs: 10,
            window_secs: 10,
            before: Snapshot::default(),
            after: Snapshot::default(),
            judgement: Judgement {
                score: 0.8,
                verdict: Verdict::Effective,
                metric: "target_ratio".to_owned(),
                why: "the target fell from 1.40 to 0.28".to_owned(),
            },
            revert: None,
            stages: Default::default(),
        };
        let again = Observed {
            pass: Some(pass(52, T0 + 52_100, 0)),
            proposals: vec![stored(RecordKind::Proposal, "a-1", T0 + 30_600, proposal())],
            actions: vec![stored(RecordKind::Action, "a-1", T0 + 32_000, entry(ActionOutcome::Applied))],
            evaluations: vec![stored(RecordKind::Evaluation, "a-1", T0 + 52_000, evaluation)],
        };
        assert_eq!(
            f.lines(again, T0 + 53_000),
            [
                "  0:32 action finished, applied after 0.8 s: split p-0003 at 4200000000000000",
                "  0:52 verdict: split p-0003 at 4200000000000000 was effective (score 0.80): the target fell from 1.40 to 0.28",
                "  0:52 hotspot gone: no hot partition or overloaded worker; the hottest worker is at 1.25 of its capacity",
            ]
        );
        let same = Observed {
            pass: Some(pass(53, T0 + 53_100, 0)),
            actions: vec![stored(RecordKind::Action, "a-1", T0 + 32_000, entry(ActionOutcome::Applied))],
            ..Observed::default()
        };
        assert!(f.lines(same, T0 + 54_000).is_empty(), "nothing new, nothing printed");
    }

    #[test]
    fn a_dry_run_proposal_says_how_to_approve_it() {
        let mut f = Follower::new(T0);
        let mut p = proposal();
        p.mode = PolicyMode::DryRun;
        let lines = f.lines(
            Observed { proposals: vec![stored(RecordKind::Proposal, "a-7", T0 + 1_000, p)], ..Observed::default() },
            T0 + 2_000,
        );
        assert!(lines[0].ends_with("[dry run: approve with POST /api/v1/proposals/a-7/approve]"), "{lines:?}");
    }
}
