//! The master's executor: what happens to a proposal after the planner made it.
//!
//! - An `auto` proposal is submitted to the ops server (idempotent by action id) and **tracked**
//!   until it ends. Its [`Subject`] and a before-[`Snapshot`] are taken from the input it was
//!   planned on.
//! - A `dry_run` proposal waits for **approval** ([`Pending`]). The planner proposes it again
//!   every pass while the condition holds; the executor keeps one entry per distinct action (so
//!   the store gets one record, not one a second) and forgets it `approval_ttl_secs` after the
//!   planner last proposed it: an SRE cannot approve what the planner no longer believes in.
//!   Approving submits it exactly as an auto proposal, recorded with who approved it.
//! - An action that ends `failed` or `timed_out` with `maybe_executed` is settled by **re-reading
//!   the topology**: if its effect is there ([`applied`]) it counts as succeeded (and is
//!   evaluated), otherwise as not executed. A submission whose reply was lost is tracked too; the
//!   ops server answers 404 if it never arrived.
//! - A succeeded action is **evaluated** once its settle time and after-window have passed
//!   ([`crate::evaluation`]); the verdict feeds back into the planner's state, and a harmful move
//!   is reverted when the config says so.
//!
//! The bookkeeping here is synchronous and pure; the online loop ([`crate::analysis`]) does the
//! HTTP calls and hands the results in, so the rules are unit-tested without a network.

use lb_common::ids::{ActionId, Key, WorkerId};
pub use lb_common::protocol::Pending;
use lb_common::protocol::{ActionRecord, ActionSpec, ActionState, Execution, GroupTarget, Stages, Topology};
use serde::{Deserialize, Serialize};

use crate::evaluation::{self, Evaluation, EvaluationConfig, Snapshot, Subject, Verdict};
use crate::planner::{InFlightAction, PlannerConfig, PlannerInput, PlannerState, Policy, Proposal};

/// 60 s: a dry-run proposal the planner has not repeated for a minute is stale (the hotspot
/// moved or went away); approving it would act on a situation that no longer exists.
pub const DEFAULT_APPROVAL_TTL_SECS: u64 = 60;

/// A submitted action, followed until it is evaluated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tracked {
    pub id: ActionId,
    pub spec: ActionSpec,
    pub policy: Option<Policy>,
    pub subject: Subject,
    pub before: Snapshot,
    pub submitted_at_ms: i64,
    pub state: ActionState,
    /// When it succeeded (or was found applied after a "maybe executed" failure).
    pub finished_at_ms: Option<i64>,
    /// Not judged before this (a split ahead of a peak: in the peak hour), whatever the settle
    /// time says.
    #[serde(default)]
    pub judge_at_ms: Option<i64>,
    /// Where the planner predicted the storage would put a group isolation.
    #[serde(default)]
    pub predicted_dest: Option<WorkerId>,
    /// Where its time went so far ([`Executor::observe_stages`]).
    #[serde(default)]
    pub stages: Stages,
}

impl Tracked {
    /// Whether it is finished and due for evaluation at `now_ms`.
    fn due(&self, config: &EvaluationConfig, now_ms: i64) -> bool {
        self.finished_at_ms.is_some_and(|f| config.due_at_ms(f).max(self.judge_at_ms.unwrap_or(i64::MIN)) <= now_ms)
    }
}

/// A split ahead of a peak is judged this long into the peak's hour: its middle, where a peak
/// hour's load is (the forecast is of the hour's mean demand).
pub const PEAK_JUDGE_OFFSET_MS: i64 = 30 * 60_000;

/// What happened to a tracked action at this refresh.
#[derive(Debug, Clone, PartialEq)]
pub enum Settled {
    /// Still queued or running.
    InFlight,
    /// Succeeded (or applied despite a "maybe executed" failure): evaluation is scheduled.
    Done { note: Option<String> },
    /// Ended without effect: failed before running, cancelled, or not applied after all.
    NotApplied { note: String },
}

#[derive(Debug, Default)]
pub struct Executor {
    pub tracked: Vec<Tracked>,
    pub pending: Vec<Pending>,
    /// Targets (policy, kind, target) whose dry-run proposal an SRE rejected, until when they
    /// are not offered again.
    pub(crate) rejected: std::collections::HashMap<String, i64>,
    /// The evaluation's index of the last layout it looked into (rebuilt when the layout changes).
    index: evaluation::LayoutIndex,
    /// Within a pass ([`Executor::begin_pass`] to [`Executor::end_pass`]): the census of the
    /// input the pass tracks its actions on, by that input's address.
    pass_census: Option<Option<(usize, evaluation::Census)>>,
}

impl Executor {
    /// From here to [`Executor::end_pass`], actions tracked on one input share one census of it:
    /// the caller does not change an input between two tracks on it.
    pub fn begin_pass(&mut self) {
        self.pass_census = Some(None);
    }

    pub fn end_pass(&mut self) {
        self.pass_census = None;
    }

    /// `subject`'s snapshot in `input`: on the pass's census of it when inside a pass.
    fn snapshot(&mut self, subject: &Subject, input: &PlannerInput) -> Snapshot {
        let index = self.index.refresh(input);
        let at = std::ptr::from_ref(input) as usize;
        let fresh;
        let census = match &mut self.pass_census {
            Some(slot) => match slot {
                Some((a, census)) if *a == at => &*census,
                _ => &slot.insert((at, evaluation::Census::of(input))).1,
            },
            None => {
                fresh = evaluation::Census::of(input);
                &fresh
            }
        };
        evaluation::snapshot_with(subject, input, census, index)
    }

    /// Starts following a submitted action.
    ///
    /// An action ahead of a forecast peak (`trigger.peak_at_ms`) is judged in the peak's hour,
    /// and against the forecast: its "before" is the demand the forecast put on its target, so
    /// pieces that hold the peak are effective, and a peak that does not come (demand under
    /// `vanished_demand_ratio` of the forecast) is inconclusive.
    pub fn track(&mut self, id: ActionId, proposal: &Proposal, input: &PlannerInput, now_ms: i64) {
        self.track_spec(id, &proposal.spec, Some(proposal.policy), input, now_ms);
        let trigger = &proposal.trigger;
        if let Some(t) = self.tracked.last_mut() {
            (t.stages.onset_ms, t.stages.detected_ms) = (trigger.onset_ms, trigger.detected_ms);
            if let ActionSpec::Group { .. } = &proposal.spec {
                t.predicted_dest = proposal.predicted.dest_worker.clone();
            }
        }
        if let (Some(peak), Some(t)) = (trigger.peak_at_ms, self.tracked.last_mut()) {
            t.judge_at_ms = Some(peak + PEAK_JUDGE_OFFSET_MS);
            if let (Some(demand), Some(limit)) =
                (trigger.partition_demand_ops_per_sec, trigger.partition_limit_ops_per_sec.filter(|&l| l > 0.0))
            {
                t.before.target_ratio = demand / limit;
                t.before.target_demand_ops_per_sec = demand;
                t.before.target_rejected_ratio = ((demand - limit) / demand).max(0.0);
            }
        }
    }

    /// [`Executor::track`] from the spec and policy alone.
    pub fn track_spec(
        &mut self,
        id: ActionId,
        spec: &ActionSpec,
        policy: Option<Policy>,
        input: &PlannerInput,
        now_ms: i64,
    ) {
        let subject = evaluation::subject_in(spec, input, self.index.refresh(input));
        let before = self.snapshot(&subject, input);
        self.tracked.push(Tracked {
            id,
            spec: spec.clone(),
            policy,
            subject,
            before,
            submitted_at_ms: now_ms,
            state: ActionState::Queued,
            finished_at_ms: None,
            judge_at_ms: None,
            predicted_dest: None,
            stages: Stages { proposed_ms: now_ms, ..Stages::default() },
        });
    }

    /// Offers a dry-run proposal; returns the new entry when it was not pending yet (the caller
    /// records it once). `new_id` names it if it is new.
    pub fn offer(&mut self, proposal: Proposal, now_ms: i64, new_id: impl FnOnce() -> ActionId) -> Option<&Pending> {
        // The same action on the same target is one proposal even if its details (a split
        // key that follows the load, a destination) move from tick to tick; it keeps its id and
        // shows the newest details.
        let key = target_key(proposal.policy, &proposal.spec);
        self.rejected.retain(|_, until| *until > now_ms);
        if self.rejected.contains_key(&key) {
            return None;
        }
        if let Some(i) = self.pending.iter().position(|p| target_key(p.proposal.policy, &p.proposal.spec) == key) {
            let p = &mut self.pending[i];
            p.last_proposed_at_ms = now_ms;
            p.proposal = proposal;
            return None;
        }
        self.pending.push(Pending {
            id: new_id(),
            proposal,
            first_proposed_at_ms: now_ms,
            last_proposed_at_ms: now_ms,
        });
        self.pending.last()
    }

    /// Drops the pending proposals `keep` refuses, and returns them.
    pub fn withdraw_pending(&mut self, keep: impl Fn(&Proposal) -> bool) -> Vec<Pending> {
        self.pending.extract_if(.., |p| !keep(&p.proposal)).collect()
    }

    /// Drops dry-run proposals the planner stopped making.
    pub fn expire_pending(&mut self, ttl_secs: u64, now_ms: i64) {
        let horizon = now_ms - (ttl_secs * 1000) as i64;
        self.pending.retain(|p| p.last_proposed_at_ms >= horizon);
    }

    /// Takes a pending proposal for approval, or says why it cannot be approved.
    pub fn take_pending(&mut self, id: &str, ttl_secs: u64, now_ms: i64) -> Result<Pending, ApprovalError> {
        self.expire_pending(ttl_secs, now_ms);
        let i = self.pending.iter().position(|p| p.id.as_str() == id).ok_or(ApprovalError::NotPending)?;
        Ok(self.pending.remove(i))
    }

    /// Drops a pending proposal an SRE rejected; the same action on the same target is not
    /// offered again for `ttl_secs` (it would be back at the next pass otherwise).
    pub fn reject_pending(&mut self, id: &str, ttl_secs: u64, now_ms: i64) -> Result<Pending, ApprovalError> {
        let pending = self.take_pending(id, ttl_secs, now_ms)?;
        let key = target_key(pending.proposal.policy, &pending.proposal.spec);
        self.rejected.insert(key, now_ms + (ttl_secs * 1000) as i64);
        Ok(pending)
    }

    /// Applies the ops server's record of a tracked action. `topology` is a fresh read, needed
    /// only when the action failed with "maybe executed".
    pub fn settle(&mut self, record: &ActionRecord, topology: Option<&Topology>, now_ms: i64) -> Settled {
        let Some(t) = self.tracked.iter_mut().find(|t| t.id == record.request.id) else {
            return Settled::NotApplied { note: "not tracked".into() };
        };
        t.state = record.state;
        t.stages.follow(record);
        let outcome = match record.state {
            ActionState::Queued | ActionState::Running => return Settled::InFlight,
            ActionState::Succeeded => Settled::Done { note: None },
            ActionState::Failed | ActionState::TimedOut
                if record.failure.as_ref().is_some_and(|f| f.execution == Execution::MaybeExecuted) =>
            {
                match topology {
                    Some(topo) if applied(&t.spec, topo) => Settled::Done {
                        note: Some("ended without a clear outcome; the topology shows it applied".into()),
                    },
                    Some(_) => Settled::NotApplied {
                        note: "ended without a clear outcome; the topology shows it did not apply".into(),
                    },
                    // No fresh topology yet: decide at the next refresh.
                    None => return Settled::InFlight,
                }
            }
            state => Settled::NotApplied {
                note: record
                    .failure
                    .as_ref()
                    .map_or_else(|| format!("ended {state:?}").to_lowercase(), |f| f.message.clone()),
            },
        };
        match &outcome {
            Settled::Done { .. } => {
                let finished = record.finished_at_ms.unwrap_or(now_ms);
                t.finished_at_ms = Some(finished);
                t.stages.finished_ms = Some(finished);
            }
            _ => {
                let id = t.id.clone();
                self.tracked.retain(|t| t.id != id);
            }
        }
        outcome
    }

    /// Records the end of a tracked action whose outcome is known without an ops-server record
    /// (the virtual-time simulator executes against the engine directly): applied ones wait
    /// for evaluation, the others are dropped.
    pub fn finish(&mut self, id: &ActionId, applied: bool, at_ms: i64) {
        if applied {
            if let Some(t) = self.tracked.iter_mut().find(|t| &t.id == id) {
                t.state = ActionState::Succeeded;
                t.finished_at_ms = Some(at_ms);
                t.stages.finished_ms = Some(at_ms);
            }
        } else {
            self.forget(id);
        }
    }

    /// A tracked action's stages so far.
    pub fn stages_of(&self, id: &ActionId) -> Option<Stages> {
        self.tracked.iter().find(|t| &t.id == id).map(|t| t.stages)
    }

    /// Notes the stages after the end of each finished action that this pass's view shows:
    /// the first pass whose layout shows its effect (visible), the first whose load window
    /// began after it finished (measured), and the first from then on in which its target is
    /// relieved ([`evaluation::relieved`]). `input` is the view before any correction, its load
    /// averaged over `window_ms` up to `window_end_ms`.
    pub fn observe_stages(&mut self, input: &PlannerInput, window_end_ms: i64, window_ms: i64, now_ms: i64) {
        let mut measured = Vec::new();
        let index = self.index.refresh(input);
        for (i, t) in self.tracked.iter_mut().enumerate().filter(|(_, t)| t.stages.relieved_ms.is_none()) {
            let Some(finished) = t.finished_at_ms else { continue };
            let s = &mut t.stages;
            let start = t.subject.range.as_ref().map(|(_, _, r)| r.start);
            if s.visible_ms.is_none() {
                let shows = match index.and_then(|x| x.near(&t.spec, input)) {
                    Some(near) => shows_near(&t.spec, &near, start),
                    None => shows_near(&t.spec, &input.partitions, start),
                };
                if shows.unwrap_or(true) {
                    s.visible_ms = Some(now_ms);
                }
            }
            if s.visible_ms.is_some() && s.measured_ms.is_none() && window_end_ms - window_ms >= finished {
                s.measured_ms = Some(now_ms);
            }
            if s.measured_ms.is_some() {
                measured.push(i);
            }
        }
        if measured.is_empty() {
            return;
        }
        let subjects: Vec<&Subject> = measured.iter().map(|&i| &self.tracked[i].subject).collect();
        let relieved = evaluation::relieved(&subjects, input, index);
        for (i, relieved) in measured.into_iter().zip(relieved) {
            if relieved {
                self.tracked[i].stages.relieved_ms = Some(now_ms);
            }
        }
    }

    /// Forgets an action the ops server does not know (its submission never arrived).
    pub fn forget(&mut self, id: &ActionId) {
        self.tracked.retain(|t| &t.id != id);
    }

    /// Corrects worker loads in `input` for moves that finished inside its window. A worker's
    /// load is what it served over the window, so for a while after a move the source still
    /// counts the partition's load and the destination lacks it: judged on that, the source
    /// looks overloaded still and another partition leaves it (over-moving), the destination
    /// looks cooler than it is. For each move (or partition group) that ended at `f` inside
    /// the window `[at - window, at]`, the share of the window before `f` of the partition's
    /// current load is taken off its source and put on its current owner. A tracked action the
    /// ops server no longer lists as in flight but that is not settled here yet (it ended since
    /// the last refresh) counts as ending at `at` once the topology shows its partition moved.
    pub fn correct_for_recent_moves(&self, input: &mut PlannerInput, window_ms: i64, at_ms: i64) {
        let start = at_ms - window_ms;
        for t in &self.tracked {
            // An action not settled yet whose effect the topology already shows ended between
            // the last refresh and now: count it as ending at the window's end (the whole window
            // still has its load on the source).
            let Some(finished) = t.finished_at_ms.or(Some(at_ms)).filter(|&f| f > start && window_ms > 0) else {
                continue;
            };
            // A split whose first piece (the id) went elsewhere moved the id like a move.
            if !matches!(
                t.spec,
                ActionSpec::Move { .. }
                    | ActionSpec::Group { target: GroupTarget::Partition { .. }, .. }
                    | ActionSpec::SplitInto { first_to_worker: Some(_), .. }
            ) {
                continue;
            }
            let (Some(source), Some(id)) = (&t.subject.source, t.subject.partitions.first()) else { continue };
            let Some(p) = input.partitions.iter().find(|p| &p.id == id) else { continue };
            if let ActionSpec::Group { group, .. } = &t.spec
                && p.group.as_ref() == Some(group)
                && &p.owner == source
            {
                // A dedication that shows: the partition stayed, its neighbours left.
                continue;
            }
            if &p.owner == source {
                // Done, but the topology read is older than the move: plan as if it were still
                // in flight (the model applies it), or the source looks as hot as before it.
                if t.finished_at_ms.is_some() && !input.in_flight.iter().any(|a| a.spec == t.spec) {
                    input.in_flight.push(InFlightAction { spec: t.spec.clone(), started_at_ms: t.submitted_at_ms });
                }
                continue;
            }
            let share = ((finished.min(at_ms) - start) as f64 / window_ms as f64).clamp(0.0, 1.0);
            let (ops, bytes, dest) = (p.stats.ops_per_sec * share, p.stats.bytes_per_sec * share, p.owner.clone());
            for w in input.workers.iter_mut() {
                if &w.id == source {
                    w.load.ops_per_sec = (w.load.ops_per_sec - ops).max(0.0);
                    w.load.bytes_per_sec = (w.load.bytes_per_sec - bytes).max(0.0);
                } else if w.id == dest {
                    w.load.ops_per_sec += ops;
                    w.load.bytes_per_sec += bytes;
                }
            }
        }
    }

    /// Whether any finished action is due for evaluation.
    pub fn evaluation_due(&self, config: &EvaluationConfig, now_ms: i64) -> bool {
        self.tracked.iter().any(|t| t.due(config, now_ms))
    }

    /// Evaluates every due action against `after` (the load over the evaluation window ending
    /// now), feeds harmful verdicts back into `state`, and returns the evaluations.
    pub fn evaluate_due(
        &mut self,
        after: &PlannerInput,
        config: &EvaluationConfig,
        planner: &PlannerConfig,
        state: &mut PlannerState,
        now_ms: i64,
    ) -> Vec<Evaluation> {
        let (due, rest): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.tracked).into_iter().partition(|t| t.due(config, now_ms));
        self.tracked = rest;
        if due.is_empty() {
            return Vec::new();
        }
        let census = evaluation::Census::of(after);
        let index = self.index.refresh(after);
        due.into_iter().map(|t| evaluate_one(t, after, &census, index, config, planner, state, now_ms)).collect()
    }
}

#[allow(clippy::too_many_arguments)]
fn evaluate_one(
    t: Tracked,
    after: &PlannerInput,
    census: &evaluation::Census,
    index: Option<&evaluation::LayoutIndex>,
    config: &EvaluationConfig,
    planner: &PlannerConfig,
    state: &mut PlannerState,
    now_ms: i64,
) -> Evaluation {
    let after_snapshot = evaluation::snapshot_with(&t.subject, after, census, index);
    let mut judgement =
        evaluation::judge(t.policy, t.spec.kind(), t.subject.dedication, &t.before, &after_snapshot, config);
    if let Some(predicted) = &t.predicted_dest {
        let placed = t.subject.partitions.first().and_then(|id| after.partitions.iter().find(|p| &p.id == id));
        let high = planner.worker_overload.high_watermark_ratio;
        evaluation::charge_placement(&mut judgement, &t.subject, predicted, placed, &after_snapshot, high);
    }
    let mut revert = None;
    if judgement.verdict == Verdict::Harmful {
        let rest_ms = (planner.caps.cooldown_secs * 1000 * u64::from(planner.feedback.harmful_cooldown_factor)) as i64;
        let targets = after.partitions.iter().filter(|p| evaluation::covers(&t.subject, p)).map(|p| &p.id);
        state.penalize(targets, t.policy, now_ms + rest_ms, now_ms);
        if config.revert_harmful_moves {
            revert = evaluation::revert(&t.spec, &t.subject, after);
        }
    }
    Evaluation {
        action_id: t.id.to_string(),
        spec: t.spec,
        policy: t.policy,
        subject: t.subject,
        submitted_at_ms: t.submitted_at_ms,
        finished_at_ms: t.finished_at_ms.unwrap_or(now_ms),
        evaluated_at_ms: now_ms,
        settle_secs: config.settle_secs,
        window_secs: config.window_secs,
        before: t.before,
        after: after_snapshot,
        judgement,
        revert,
        stages: t.stages,
    }
}

/// What a proposal acts on: its policy, kind and target, without the details.
pub(crate) fn target_key(policy: Policy, spec: &ActionSpec) -> String {
    let target = match spec {
        ActionSpec::Split { partition, .. }
        | ActionSpec::SplitInto { partition, .. }
        | ActionSpec::Move { partition, .. } => partition.to_string(),
        ActionSpec::Merge { left, right, .. } => format!("{left}+{right}"),
        ActionSpec::Group { target, .. } => format!("{target:?}"),
        ActionSpec::Reshard { tenant, dataset, .. } => format!("{tenant}/{dataset}"),
    };
    format!("{}:{}:{target}", policy.as_str(), spec.kind().as_str())
}

/// Whether the topology shows `spec` applied.
pub fn applied(spec: &ActionSpec, topology: &Topology) -> bool {
    match spec {
        ActionSpec::Reshard { tenant, dataset, tenant_shards, dataset_shards, load_balancing } => {
            topology.datasets.iter().any(|d| {
                &d.tenant == tenant
                    && &d.dataset == dataset
                    && d.tenant_shards == *tenant_shards
                    && d.dataset_shards == *dataset_shards
                    && d.load_balancing == *load_balancing
            })
        }
        _ => shows(spec, &topology.partitions).unwrap_or(false),
    }
}

/// A partition as a layout shows it: the topology's and the planner's view alike.
pub trait Placed {
    fn id(&self) -> &lb_common::ids::PartitionId;
    fn table(&self) -> (&lb_common::ids::TenantId, &lb_common::ids::TableId);
    fn range(&self) -> &lb_common::ids::KeyRange;
    fn owner(&self) -> &WorkerId;
    fn group(&self) -> Option<&lb_common::ids::GroupId>;
}

/// The topology's partitions and the planner's view of them have the same placement fields.
macro_rules! placed {
    ($($t:ty),*) => {$(
        impl Placed for $t {
            fn id(&self) -> &lb_common::ids::PartitionId {
                &self.id
            }
            fn table(&self) -> (&lb_common::ids::TenantId, &lb_common::ids::TableId) {
                (&self.tenant, &self.table)
            }
            fn range(&self) -> &lb_common::ids::KeyRange {
                &self.range
            }
            fn owner(&self) -> &WorkerId {
                &self.owner
            }
            fn group(&self) -> Option<&lb_common::ids::GroupId> {
                self.group.as_ref()
            }
        }
    )*};
}
placed!(lb_common::protocol::PartitionInfo, crate::planner::PartitionView, &crate::planner::PartitionView);

/// Whether `partitions` show `spec` applied; `None` for a reshard, which the partitions do
/// not show (the topology's datasets do).
pub fn shows<P: Placed>(spec: &ActionSpec, partitions: &[P]) -> Option<bool> {
    shows_near(spec, partitions, None)
}

/// [`shows`], told where the partition the spec names started when it was planned (a move, a
/// split or a group keeps it): partitions starting there are tried first, so the ids of a
/// million partitions are not compared for every action waiting to show.
pub fn shows_near<P: Placed>(spec: &ActionSpec, partitions: &[P], start: Option<Key>) -> Option<bool> {
    let find = |id| {
        start
            .and_then(|s| partitions.iter().find(|p| p.range().start == s && p.id() == id))
            .or_else(|| partitions.iter().find(|p| p.id() == id))
    };
    Some(match spec {
        ActionSpec::Move { partition, to_worker, .. } => find(partition).is_some_and(|p| p.owner() == to_worker),
        ActionSpec::Split { partition, split_key } => {
            // The left side keeps the id and now ends right before the split key.
            find(partition).is_some_and(|p| p.range().end.0.checked_add(1) == Some(split_key.0))
        }
        ActionSpec::SplitInto { partition, split_keys, to_workers, first_to_worker, .. } => find(partition)
            .is_some_and(|p| {
                // The first piece keeps the id and ends before the first key (on `first_to_worker`
                // when named); each new piece starts at its key, on its worker.
                p.range().end.0.checked_add(1) == split_keys.first().map(|k| k.0)
                    && first_to_worker.as_ref().is_none_or(|w| p.owner() == w)
                    && split_keys.iter().zip(to_workers).all(|(k, w)| {
                        partitions.iter().any(|q| q.range().start == *k && q.owner() == w && q.table() == p.table())
                    })
            }),
        ActionSpec::Merge { left, right, to_worker } => {
            find(right).is_none() && to_worker.as_ref().is_none_or(|w| find(left).is_some_and(|p| p.owner() == w))
        }
        ActionSpec::Group { target: GroupTarget::Partition { partition }, group } => {
            find(partition).is_some_and(|p| p.group() == Some(group))
        }
        ActionSpec::Group { target: GroupTarget::Table { tenant, table }, group } => {
            partitions.iter().filter(|p| p.table() == (tenant, table)).all(|p| p.group() == Some(group))
        }
        ActionSpec::Group { target: GroupTarget::Tenant { tenant }, group } => {
            partitions.iter().filter(|p| p.table().0 == tenant).all(|p| p.group() == Some(group))
        }
        ActionSpec::Reshard { .. } => return None,
    })
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApprovalError {
    #[error("no pending proposal with that id: it was approved already, or the planner stopped proposing it")]
    NotPending,
    #[error("the ops server refused the action: {0}")]
    Refused(String),
    #[error("the online loop did not answer in time")]
    Timeout,
}

#[cfg(test)]
mod tests {
    use lb_common::ids::{Key, KeyRange};
    use lb_common::protocol::{
        ActionFailure, ActionKind, ActionRequest, Capacity, Health, Origin, PartitionInfo, WorkerInfo,
    };

    use super::*;
    use crate::planner::{PartitionView, PartitionWindow, PolicyMode, Prediction, Trigger, WorkerView, WorkerWindow};

    fn view(ops_a: f64, ops_b: f64, owner: &str) -> PlannerInput {
        let worker = |id: &str, ops| WorkerView {
            id: id.parse().unwrap(),
            capacity: Capacity { ops_per_sec: 1000.0, bytes_per_sec: 1e9 },
            cpu_cores: 0.0,
            group: None,
            health: Health::Healthy,
            zone: None,
            load: WorkerWindow { ops_per_sec: ops, ..Default::default() },
        };
        PlannerInput {
            workers: vec![worker("a", ops_a), worker("b", ops_b)],
            partitions: vec![PartitionView {
                id: "t.x.p1".parse().unwrap(),
                tenant: "t".parse().unwrap(),
                table: "x".parse().unwrap(),
                range: KeyRange { start: Key(0), end: Key(99) },
                owner: owner.parse().unwrap(),
                group: None,
                stored_bytes: 0,
                limit: Some(Capacity { ops_per_sec: 1000.0, bytes_per_sec: 1e9 }),
                supported_actions: ActionKind::ALL.to_vec(),
                stats: PartitionWindow { ops_per_sec: 400.0, ..Default::default() },
            }],
            in_flight: Vec::new(),
            new_group_dedicates_owner: false,
            multi_way_split: false,
            layout: None,
            move_rate_limit: false,
            merge_to_worker: false,
        }
    }

    fn proposal(spec: ActionSpec, mode: PolicyMode) -> Proposal {
        Proposal {
            spec,
            policy: Policy::WorkerOverload,
            mode,
            origin: lb_common::protocol::Origin::Online,
            reason: "test".into(),
            trigger: Trigger::default(),
            predicted: Prediction::default(),
            rejected_alternatives: Vec::new(),
        }
    }

    fn record(id: &str, spec: ActionSpec, state: ActionState, failure: Option<Execution>) -> ActionRecord {
        ActionRecord {
            request: ActionRequest {
                id: id.parse().unwrap(),
                spec,
                origin: Origin::Online,
                policy: None,
                reason: "test".into(),
                actor_path: vec!["t".into()],
                leader_epoch: None,
            },
            state,
            submitted_by: "master".into(),
            created_at_ms: 0,
            started_at_ms: None,
            finished_at_ms: Some(2_000),
            operation_id: None,
            failure: failure.map(|execution| ActionFailure { message: "lost".into(), execution }),
        }
    }

    fn topology(owner: &str) -> Topology {
        Topology {
            version: 1,
            workers: ["a", "b"]
                .iter()
                .map(|w| WorkerInfo {
                    id: w.parse().unwrap(),
                    capacity: Capacity { ops_per_sec: 1000.0, bytes_per_sec: 1e9 },
                    cpu_cores: 0.0,
                    group: None,
                    health: Health::Healthy,
                    zone: None,
                    rack: None,
                })
                .collect(),
            partitions: vec![PartitionInfo {
                id: "t.x.p1".parse().unwrap(),
                tenant: "t".parse().unwrap(),
                table: "x".parse().unwrap(),
                range: KeyRange { start: Key(0), end: Key(99) },
                owner: owner.parse().unwrap(),
                group: None,
                stored_bytes: 0,
                limit: None,
                supported_actions: ActionKind::ALL.to_vec(),
            }],
            datasets: Vec::new(),
            new_group_dedicates_owner: false,
            multi_way_split: false,
            move_rate_limit: false,
            merge_to_worker: false,
        }
    }

    fn move_to_b() -> ActionSpec {
        ActionSpec::Move {
            partition: "t.x.p1".parse().unwrap(),
            to_worker: "b".parse().unwrap(),
            max_bytes_per_sec: None,
        }
    }

    #[test]
    fn a_maybe_executed_action_is_settled_by_the_topology() {
        let mut ex = Executor::default();
        let p = proposal(move_to_b(), PolicyMode::Auto);
        ex.track("m1".parse().unwrap(), &p, &view(900.0, 100.0, "a"), 1_000);
        ex.track("m2".parse().unwrap(), &p, &view(900.0, 100.0, "a"), 1_000);
        let lost = record("m1", move_to_b(), ActionState::TimedOut, Some(Execution::MaybeExecuted));
        assert_eq!(ex.settle(&lost, None, 3_000), Settled::InFlight, "waits for a fresh topology");
        assert!(matches!(ex.settle(&lost, Some(&topology("b")), 3_000), Settled::Done { note: Some(_) }));
        let lost2 = record("m2", move_to_b(), ActionState::Failed, Some(Execution::MaybeExecuted));
        assert!(matches!(ex.settle(&lost2, Some(&topology("a")), 3_000), Settled::NotApplied { .. }));
        assert_eq!(ex.tracked.len(), 1, "only the applied one waits for evaluation");
        let refused = record("m1", move_to_b(), ActionState::Failed, Some(Execution::NotExecuted));
        ex.track("m3".parse().unwrap(), &p, &view(900.0, 100.0, "a"), 1_000);
        let refused =
            ActionRecord { request: ActionRequest { id: "m3".parse().unwrap(), ..refused.request }, ..refused };
        assert!(matches!(ex.settle(&refused, None, 3_000), Settled::NotApplied { .. }));
    }

    #[test]
    fn an_actions_stages_run_from_its_onset_to_the_first_pass_that_sees_it_relieved() {
        let mut ex = Executor::default();
        let mut p = proposal(move_to_b(), PolicyMode::Auto);
        (p.trigger.onset_ms, p.trigger.detected_ms) = (Some(500), Some(800));
        ex.track("m1".parse().unwrap(), &p, &view(1200.0, 100.0, "a"), 1_000);
        let mut done = record("m1", move_to_b(), ActionState::Succeeded, None);
        (done.created_at_ms, done.started_at_ms) = (1_050, Some(1_100));
        assert!(matches!(ex.settle(&done, None, 2_100), Settled::Done { .. }));
        // The view is older than the move: nothing after its end is seen yet.
        ex.observe_stages(&view(1200.0, 100.0, "a"), 2_500, 2_000, 2_600);
        assert_eq!(ex.stages_of(&"m1".parse().unwrap()).and_then(|s| s.visible_ms), None);
        // Shown in the layout, but the window still began before the move ended.
        ex.observe_stages(&view(1100.0, 500.0, "b"), 3_500, 2_000, 3_600);
        // The first window wholly after it: measured; the source is still over its capacity.
        ex.observe_stages(&view(1100.0, 500.0, "b"), 4_500, 2_000, 4_600);
        // Under capacity, nothing rejected: relieved.
        ex.observe_stages(&view(900.0, 500.0, "b"), 5_500, 2_000, 5_600);
        let s = ex.stages_of(&"m1".parse().unwrap()).expect("tracked");
        let expected = Stages {
            onset_ms: Some(500),
            detected_ms: Some(800),
            proposed_ms: 1_000,
            accepted_ms: Some(1_050),
            started_ms: Some(1_100),
            finished_ms: Some(2_000),
            visible_ms: Some(3_600),
            measured_ms: Some(4_600),
            relieved_ms: Some(5_600),
        };
        assert_eq!(s, expected);
        assert_eq!(
            s.describe(),
            "onset→detected 0.3 s, detected→proposed 0.2 s, proposed→accepted 0.1 s, accepted→started 0.1 s, \
             started→finished 0.9 s, finished→visible 1.6 s, visible→measured 1.0 s, measured→relieved 1.0 s"
        );
        // Relief is noted once; the evaluation carries the stages.
        ex.observe_stages(&view(1100.0, 500.0, "b"), 6_500, 2_000, 6_600);
        let cfg = EvaluationConfig::default();
        let (planner, mut state) = (PlannerConfig::default(), PlannerState::default());
        let evals = ex.evaluate_due(&view(900.0, 500.0, "b"), &cfg, &planner, &mut state, 60_000);
        assert_eq!(evals.first().map(|e| e.stages), Some(expected));
    }

    #[test]
    fn evaluation_waits_for_settle_and_window_then_feeds_harm_back() {
        let mut ex = Executor::default();
        let cfg = EvaluationConfig { revert_harmful_moves: true, ..Default::default() };
        let planner = PlannerConfig::default();
        let mut state = PlannerState::default();
        ex.track("m1".parse().unwrap(), &proposal(move_to_b(), PolicyMode::Auto), &view(950.0, 700.0, "a"), 1_000);
        ex.settle(&record("m1", move_to_b(), ActionState::Succeeded, None), None, 2_000);
        assert!(!ex.evaluation_due(&cfg, 2_000 + 19_999));
        assert!(ex.evaluation_due(&cfg, 22_000));
        // The move carried the hotspot: b is now at 1.1, hotter than a was (0.95).
        let after = view(550.0, 1100.0, "b");
        let evals = ex.evaluate_due(&after, &cfg, &planner, &mut state, 22_000);
        assert_eq!(evals.len(), 1);
        let e = &evals[0];
        assert_eq!(e.judgement.verdict, Verdict::Harmful, "{e:?}");
        assert_eq!(
            e.revert,
            Some(ActionSpec::Move {
                partition: "t.x.p1".parse().unwrap(),
                to_worker: "a".parse().unwrap(),
                max_bytes_per_sec: None
            })
        );
        let rest = state.in_cooldown(&"t.x.p1".parse().unwrap(), 22_000).expect("penalised");
        assert_eq!(rest, 22_000 + 4 * 30_000);
        assert_eq!(state.strikes.get(&Policy::WorkerOverload).map(|s| s.count), Some(1));
        assert!(ex.tracked.is_empty());
    }

    #[test]
    fn a_split_ahead_of_a_peak_is_judged_in_the_peak_hour_against_the_forecast() {
        let cfg = EvaluationConfig::default();
        let (planner, mut state) = (PlannerConfig::default(), PlannerState::default());
        let split = ActionSpec::Split { partition: "t.x.p1".parse().unwrap(), split_key: Key(50) };
        let peak_at = 3_600_000;
        let ahead = Proposal {
            policy: Policy::PeakAhead,
            trigger: Trigger {
                partition_demand_ops_per_sec: Some(1_800.0),
                partition_limit_ops_per_sec: Some(1_000.0),
                peak_at_ms: Some(peak_at),
                ..Trigger::default()
            },
            ..proposal(split.clone(), PolicyMode::Auto)
        };
        // Split half an hour ahead, while the partition is at 400 ops/s.
        let (mut ex, mut idle) = (Executor::default(), Executor::default());
        ex.track("pre".parse().unwrap(), &ahead, &view(400.0, 0.0, "a"), 1_800_000);
        idle.track("pre".parse().unwrap(), &ahead, &view(400.0, 0.0, "a"), 1_800_000);
        for e in [&mut ex, &mut idle] {
            e.settle(&record("pre", split.clone(), ActionState::Succeeded, None), None, 1_801_000);
        }
        assert!(!ex.evaluation_due(&cfg, 1_801_000 + 60_000), "settled, but the peak has not come");
        let judged_at = peak_at + PEAK_JUDGE_OFFSET_MS;
        assert!(!ex.evaluation_due(&cfg, judged_at - 1) && ex.evaluation_due(&cfg, judged_at));
        // At the peak: 1,700 ops/s over two pieces, the hotter at 900 (0.9 of its limit), against
        // the forecast's 1.8 of the limit on one partition.
        let mut peak = view(1_700.0, 0.0, "a");
        let mut piece = peak.partitions[0].clone();
        peak.partitions[0].range = KeyRange { start: Key(0), end: Key(49) };
        peak.partitions[0].stats.ops_per_sec = 900.0;
        piece.id = "t.x.p2".parse().unwrap();
        piece.range = KeyRange { start: Key(50), end: Key(99) };
        piece.stats.ops_per_sec = 800.0;
        peak.partitions.push(piece);
        let [e]: [Evaluation; 1] =
            ex.evaluate_due(&peak, &cfg, &planner, &mut state, judged_at).try_into().expect("one evaluation");
        assert_eq!((e.before.target_ratio, e.before.target_demand_ops_per_sec), (1.8, 1_800.0), "{e:?}");
        assert_eq!(e.judgement.verdict, Verdict::Effective, "{e:?}");
        assert!((e.judgement.score - 0.5).abs() < 1e-9, "1.8 to 0.9 of the limit: {e:?}");
        // The peak did not come: 400 ops/s at the peak hour is under half the forecast.
        let quiet = view(400.0, 0.0, "a");
        let [e]: [Evaluation; 1] =
            idle.evaluate_due(&quiet, &cfg, &planner, &mut state, judged_at).try_into().expect("one evaluation");
        assert_eq!(e.judgement.verdict, Verdict::Inconclusive, "{e:?}");
    }

    #[test]
    fn an_isolation_the_storage_placed_elsewhere_is_charged_where_it_overloaded() {
        let cfg = EvaluationConfig::default();
        let planner = PlannerConfig::default();
        let group = ActionSpec::Group {
            target: GroupTarget::Partition { partition: "t.x.p1".parse().unwrap() },
            group: "iso".parse().unwrap(),
        };
        let isolation = |predicted: &str| Proposal {
            policy: Policy::PartitionOverload,
            predicted: Prediction { dest_worker: Some(predicted.parse().unwrap()), ..Prediction::default() },
            ..proposal(group.clone(), PolicyMode::Auto)
        };
        // a at 0.95 isolates p1; lb predicted c, the storage put it on b, now at 0.90: by the
        // source alone (0.95 -> 0.55) effective, but b is over the 0.85 high watermark.
        let after = view(550.0, 900.0, "b");
        let judged = |predicted: &str| {
            let (mut ex, mut state) = (Executor::default(), PlannerState::default());
            ex.track("g1".parse().unwrap(), &isolation(predicted), &view(950.0, 100.0, "a"), 1_000);
            ex.settle(&record("g1", group.clone(), ActionState::Succeeded, None), None, 2_000);
            let [e]: [Evaluation; 1] =
                ex.evaluate_due(&after, &cfg, &planner, &mut state, 22_000).try_into().expect("one evaluation");
            e
        };
        let wrong = judged("c");
        assert_eq!(wrong.judgement.verdict, Verdict::Harmful, "{wrong:?}");
        assert!(wrong.judgement.why.starts_with("the storage placed it on b, not on c as lb predicted"), "{wrong:?}");
        let right = judged("b");
        assert_eq!(right.judgement.verdict, Verdict::Effective, "{right:?}");
    }

    #[test]
    fn dry_run_proposals_are_kept_once_and_expire_unless_repeated() {
        let mut ex = Executor::default();
        let mut n = 0;
        let mut id = || {
            n += 1;
            format!("dry-{n}").parse().unwrap()
        };
        assert!(ex.offer(proposal(move_to_b(), PolicyMode::DryRun), 1_000, &mut id).is_some());
        assert!(ex.offer(proposal(move_to_b(), PolicyMode::DryRun), 2_000, &mut id).is_none(), "same action");
        let elsewhere = ActionSpec::Move {
            partition: "t.x.p1".parse().unwrap(),
            to_worker: "c".parse().unwrap(),
            max_bytes_per_sec: None,
        };
        assert!(ex.offer(proposal(elsewhere.clone(), PolicyMode::DryRun), 2_500, &mut id).is_none(), "same target");
        assert_eq!(ex.pending.len(), 1);
        assert_eq!(ex.pending[0].proposal.spec, elsewhere, "the newest details are shown");
        assert_eq!(ex.take_pending("dry-9", 60, 3_000), Err(ApprovalError::NotPending));
        let p = ex.take_pending("dry-1", 60, 3_000).expect("pending");
        assert_eq!((p.first_proposed_at_ms, p.last_proposed_at_ms), (1_000, 2_500));
        assert!(ex.take_pending("dry-1", 60, 3_000).is_err(), "approved once");
        ex.offer(proposal(move_to_b(), PolicyMode::DryRun), 4_000, &mut id);
        assert_eq!(ex.take_pending("dry-2", 60, 4_000 + 60_001), Err(ApprovalError::NotPending), "stale");
    }

    #[test]
    fn a_move_that_ended_inside_the_window_is_taken_off_its_source_and_put_on_its_destination() {
        let mut ex = Executor::default();
        ex.track("m1".parse().unwrap(), &proposal(move_to_b(), PolicyMode::Auto), &view(900.0, 100.0, "a"), 1_000);
        ex.finish(&"m1".parse().unwrap(), true, 8_000);
        // The window is [5 s, 10 s]; the move ended at 8 s: a served p1 (400 ops/s) for 3 of 5 s.
        let mut input = view(900.0, 340.0, "b");
        ex.correct_for_recent_moves(&mut input, 5_000, 10_000);
        assert!((input.workers[0].load.ops_per_sec - (900.0 - 240.0)).abs() < 1e-6, "{:?}", input.workers[0].load);
        assert!((input.workers[1].load.ops_per_sec - (340.0 + 240.0)).abs() < 1e-6, "{:?}", input.workers[1].load);
        // A move not settled yet but visible in the topology counts as ending now: all of it.
        let mut ex2 = Executor::default();
        ex2.track("m2".parse().unwrap(), &proposal(move_to_b(), PolicyMode::Auto), &view(900.0, 100.0, "a"), 1_000);
        let mut unsettled = view(900.0, 100.0, "b");
        ex2.correct_for_recent_moves(&mut unsettled, 5_000, 10_000);
        assert!((unsettled.workers[0].load.ops_per_sec - 500.0).abs() < 1e-6, "{:?}", unsettled.workers[0].load);
        assert!((unsettled.workers[1].load.ops_per_sec - 500.0).abs() < 1e-6, "{:?}", unsettled.workers[1].load);
        // Still running (the topology shows the old owner): nothing to correct.
        let mut running = view(900.0, 100.0, "a");
        ex2.correct_for_recent_moves(&mut running, 5_000, 10_000);
        assert_eq!(running.workers[0].load.ops_per_sec, 900.0);
        assert!(running.in_flight.is_empty());
        // Done, but the topology read predates it: planned as in flight (the model applies it).
        ex2.finish(&"m2".parse().unwrap(), true, 9_500);
        let mut stale = view(900.0, 100.0, "a");
        ex2.correct_for_recent_moves(&mut stale, 5_000, 10_000);
        assert_eq!(stale.in_flight.len(), 1);
        assert_eq!(stale.in_flight[0].spec, move_to_b());
        // Once the window no longer holds the move, nothing changes.
        let mut later = view(500.0, 500.0, "b");
        ex.correct_for_recent_moves(&mut later, 5_000, 14_000);
        assert_eq!(later.workers[0].load.ops_per_sec, 500.0);
    }

    #[test]
    fn applied_reads_each_kind_from_the_topology() {
        let t = topology("b");
        assert!(applied(&move_to_b(), &t));
        assert!(!applied(&ActionSpec::Split { partition: "t.x.p1".parse().unwrap(), split_key: Key(50) }, &t));
        let mut split = t.clone();
        split.partitions[0].range.end = Key(49);
        assert!(applied(&ActionSpec::Split { partition: "t.x.p1".parse().unwrap(), split_key: Key(50) }, &split));
    }
}
