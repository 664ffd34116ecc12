//! The online core: one pass of the master's decisions as a pure step. See the module doc of
//! [`crate::online`] for the order of the steps and why.

use std::sync::Arc;

use lb_common::ids::ActionId;
use lb_common::protocol::{
    ActionEntry, ActionOutcome, ActionRecord, ActionRequest, ActionSpec, AnalysisRecord, DatasetInfo, Origin,
    PlacementRules, Topology,
};

use super::analyzer::{self, AnalysisContext, Analyzer};
use crate::config::MasterConfig;
use crate::evaluation::{Evaluation, EvaluationConfig, Verdict};
use crate::executor::{ApprovalError, DEFAULT_APPROVAL_TTL_SECS, Executor, Pending, Settled};
use crate::placement_manager::{DatasetShardUsage, PlacementManagerConfig};
use crate::planner::{
    Declined, InFlightAction, ManualRefusal, Plan, PlannerConfig, PlannerInput, PlannerState, Policy, PolicyMode,
    Proposal, manual_proposal, partitions_of,
};

/// Declined items an analysis record keeps (the plan keeps up to 256).
pub const MAX_DECLINED_RECORDED: usize = 64;
/// While anything is declined, an analysis record is written at least this often.
pub const ANALYSIS_HEARTBEAT_MS: i64 = 60_000;

/// What the core needs of the master's config: the live loop takes it from `master.toml` at
/// every pass ([`OnlineConfig::of`]), the simulator from its defaults and the scenario's
/// `[master]`.
#[derive(Debug, Clone, PartialEq)]
pub struct OnlineConfig {
    pub planner: PlannerConfig,
    pub evaluation: EvaluationConfig,
    pub placement: PlacementManagerConfig,
    pub approval_ttl_secs: u64,
    /// The offline policies the offline analyzer proposes under (modes, lead time, caps).
    pub offline: crate::offline::OfflineSection,
}

impl Default for OnlineConfig {
    fn default() -> Self {
        Self {
            planner: PlannerConfig::default(),
            evaluation: EvaluationConfig::default(),
            placement: PlacementManagerConfig::default(),
            approval_ttl_secs: DEFAULT_APPROVAL_TTL_SECS,
            offline: Default::default(),
        }
    }
}

impl OnlineConfig {
    /// The mode a policy proposes under now; `None` for actions by hand, which have none.
    pub fn mode_of(&self, policy: Policy) -> Option<PolicyMode> {
        Some(match policy {
            Policy::PartitionOverload => self.planner.partition_overload.mode,
            Policy::WorkerOverload => self.planner.worker_overload.mode,
            Policy::Imbalance => self.planner.imbalance.mode,
            Policy::DatasetPlacement => self.placement.mode,
            Policy::Merge => self.offline.merge_mode,
            Policy::PeakAhead => self.offline.peak_ahead_mode,
            Policy::Manual => return None,
        })
    }

    pub fn of(config: &MasterConfig) -> Self {
        let mut planner = config.planner.clone();
        // A pass run early (an action ended) must not hurry a hysteresis (see the field).
        planner.hysteresis_min_gap_ms = (config.analyzer.interval_ms * 3 / 4) as i64;
        Self {
            planner,
            evaluation: config.evaluation.clone(),
            placement: config.placement.clone(),
            approval_ttl_secs: config.analyzer.approval_ttl_secs,
            offline: config.offline.clone(),
        }
    }
}

/// What the loop observed for one pass.
#[derive(Debug)]
pub struct Observation<'a> {
    /// Where the load windows end (the newest second every live worker has delivered).
    pub window_end_ms: i64,
    /// Length of the window `input` averages over; 0 when the input is instantaneous (the
    /// simulator's: its step's load is computed on the layout after that step's operations, so
    /// no window straddles a move and nothing needs correcting).
    pub window_ms: i64,
    /// The planner's view; its `in_flight` as the ops server lists them. The core corrects it in
    /// place for moves that ended inside the window (the caller may keep it for the next pass).
    pub input: &'a mut PlannerInput,
    /// The view finished actions are judged on, when [`OnlineCore::evaluation_due`] said so.
    pub evaluation: EvaluationView<'a>,
    pub datasets: &'a [DatasetInfo],
    pub dataset_usage: &'a [DatasetShardUsage],
    /// What became of the actions [`OnlineCore::open_actions`] listed.
    pub updates: Vec<ActionUpdate>,
    /// SREs' approvals of dry-run proposals, in the order they came.
    pub approvals: Vec<ApprovalRequest>,
    /// SREs' actions by hand, in the order they came.
    pub manual: Vec<ManualRequest>,
}

/// What due evaluations are judged on.
#[derive(Debug, Clone, Copy)]
pub enum EvaluationView<'a> {
    /// Nothing is due (or the view could not be built): evaluations wait for a later pass.
    None,
    /// The view over the evaluation window (the live loop's: longer than the planner's).
    Window(&'a PlannerInput),
    /// The planning input itself, before the correction (the simulator's single window).
    PlanningInput,
}

/// News of a tracked action.
#[derive(Debug, Clone)]
pub enum ActionUpdate {
    /// The ops server's record; `topology` is a fresh read, needed when it ended "maybe
    /// executed" (without it such an action stays open until the next pass).
    Record { record: Box<ActionRecord>, topology: Option<Arc<Topology>> },
    /// The outcome is known without a record (the simulator executes against its engine).
    Finished { id: ActionId, applied: bool, at_ms: i64 },
    /// The ops server does not know the action: its submission never arrived.
    Unknown { id: ActionId },
}

/// An SRE approved a dry-run proposal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalRequest {
    pub proposal_id: String,
    pub approved_by: String,
}

/// An SRE's action by hand (`POST /api/v1/actions`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManualRequest {
    /// Names the request in [`PassOutput::manual`] and in the submission's `approval`.
    pub key: String,
    pub spec: ActionSpec,
    pub reason: String,
    /// The token's name: the action's fair-queue path is `["manual", <who>]`.
    pub requested_by: String,
    /// Only predict.
    pub dry_run: bool,
}

/// What the loop must do after a pass, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Send the action to the ops server. The core tracks it already; tell it
    /// [`OnlineCore::refused`] if the ops server certainly did not take it. `approval` names
    /// the approval to answer with the outcome.
    Submit { request: Box<ActionRequest>, approval: Option<String> },
    /// Write a ResultDataStore record.
    Record(Box<Record>),
    /// An approval that cannot be carried out, to answer now.
    RefuseApproval { proposal_id: String, error: ApprovalError },
}

/// How a tracked action ended this pass (for logs and metrics).
#[derive(Debug, Clone, PartialEq)]
pub struct Ended {
    pub id: ActionId,
    pub applied: bool,
    pub note: Option<String>,
}

/// Everything one pass decided.
#[derive(Debug, Default)]
pub struct PassOutput {
    pub commands: Vec<Command>,
    /// The online planner's plan (proposals, declined items, counters).
    pub plan: Plan,
    /// Every proposal of the pass from every analyzer, reverts first, in submission order.
    pub proposals: Vec<Proposal>,
    pub evaluations: Vec<Evaluation>,
    pub ended: Vec<Ended>,
    /// Each manual request by key: its proposal (submitted unless a dry run; the submission is a
    /// [`Command::Submit`] with the key as `approval`) or why it does not fit.
    pub manual: Vec<(String, Result<Proposal, ManualRefusal>)>,
}

impl PassOutput {
    /// The actions to send, in order.
    pub fn submissions(&self) -> impl Iterator<Item = &ActionRequest> {
        self.commands.iter().filter_map(|c| match c {
            Command::Submit { request, .. } => Some(&**request),
            _ => None,
        })
    }
}

/// Action ids of one master process: `<prefix>-<boot ms>-<n>`, unique across restarts.
#[derive(Debug, Clone)]
struct ActionIds {
    prefix: &'static str,
    boot_ms: i64,
    next: u64,
}

impl ActionIds {
    fn next(&mut self) -> ActionId {
        self.next += 1;
        format!("{}-{}-{}", self.prefix, self.boot_ms, self.next)
            .parse()
            .expect("<word>-<digits>-<digits> is a valid id")
    }
}

/// What a leader keeps for its successor, so that a takeover neither forgets nor repeats: the
/// planner's state (cooldowns, harm strikes, hysteresis, split children), the actions it
/// follows until they are evaluated (with their before-snapshots), the dry-run proposals
/// waiting for approval and the ones an SRE rejected. The leader saves it after a pass that
/// acted, and otherwise every `leadership.handover_interval_ms` (`[leadership] backend = "etcd"`
/// keeps it in etcd); see `docs/architecture.md`, "Takeover".
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Handover {
    pub planner: PlannerState,
    pub tracked: Vec<crate::executor::Tracked>,
    pub pending: Vec<Pending>,
    pub rejected: std::collections::HashMap<String, i64>,
}

/// zstd's level for the saved handover: its JSON shrinks about tenfold, in milliseconds at
/// 100,000 partitions (`docs/benchmarks.md`, "The leader's handover").
const HANDOVER_ZSTD_LEVEL: i32 = 3;
/// The first bytes of a zstd frame; JSON starts with `{`.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

impl Handover {
    /// The bytes a leader saves: its JSON in one zstd frame. At 100,000 partitions the JSON
    /// alone passes etcd's default request limit (1.5 MiB).
    pub fn encode(&self) -> Result<Vec<u8>, String> {
        let json = serde_json::to_vec(self).map_err(|e| format!("encode: {e}"))?;
        zstd::bulk::compress(&json, HANDOVER_ZSTD_LEVEL).map_err(|e| format!("compress: {e}"))
    }

    /// Reads what [`Handover::encode`] wrote, or the plain JSON a master before it saved (a
    /// rolling upgrade hands over across the two).
    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        if !bytes.starts_with(&ZSTD_MAGIC) {
            return serde_json::from_slice(bytes).map_err(|e| format!("decode: {e}"));
        }
        let json = zstd::stream::decode_all(bytes).map_err(|e| format!("decompress: {e}"))?;
        serde_json::from_slice(&json).map_err(|e| format!("decode: {e}"))
    }
}

/// The master's decision state between passes and the step that moves it. See the module doc.
#[derive(Debug)]
pub struct OnlineCore {
    planner: PlannerState,
    executor: Executor,
    analyzers: Vec<Box<dyn Analyzer>>,
    ids: ActionIds,
    /// What the last stored analysis record said (its fingerprint) and when it was written.
    last_analysis: Option<(u64, i64)>,
}

impl OnlineCore {
    /// A core with the shipped analyzers ([`analyzer::registered`]); ids start with
    /// `lb-<boot_ms>-`.
    pub fn new(config: &OnlineConfig, boot_ms: i64) -> Self {
        Self::with_analyzers(analyzer::registered(config), boot_ms)
    }

    pub fn with_analyzers(analyzers: Vec<Box<dyn Analyzer>>, boot_ms: i64) -> Self {
        Self {
            planner: PlannerState::default(),
            executor: Executor::default(),
            analyzers,
            ids: ActionIds { prefix: "lb", boot_ms, next: 0 },
            last_analysis: None,
        }
    }

    pub fn planner_state(&self) -> &PlannerState {
        &self.planner
    }

    pub fn executor(&self) -> &Executor {
        &self.executor
    }

    /// Dry-run proposals waiting for approval.
    pub fn pending(&self) -> &[Pending] {
        &self.executor.pending
    }

    /// The placement rules routers read, from the analyzers that keep them.
    pub fn placement_rules(&mut self, now_ms: i64) -> Option<PlacementRules> {
        self.analyzers.iter_mut().find_map(|a| a.placement_rules(now_ms))
    }

    /// Tracked actions that have not ended: the loop asks the ops server about each and hands
    /// the answers in as [`Observation::updates`].
    pub fn open_actions(&self) -> Vec<ActionId> {
        self.executor.tracked.iter().filter(|t| t.finished_at_ms.is_none()).map(|t| t.id.clone()).collect()
    }

    /// The state a successor needs (see [`Handover`]).
    pub fn handover(&self) -> Handover {
        Handover {
            planner: self.planner.clone(),
            tracked: self.executor.tracked.clone(),
            pending: self.executor.pending.clone(),
            rejected: self.executor.rejected.clone(),
        }
    }

    /// Takes over a predecessor's state (replacing this core's own, which is older: a standby
    /// decides nothing).
    pub fn restore(&mut self, handover: Handover) {
        self.planner = handover.planner;
        self.executor.tracked = handover.tracked;
        self.executor.pending = handover.pending;
        self.executor.rejected = handover.rejected;
        self.last_analysis = None;
    }

    /// Follows an action the ops server has in flight that this core does not track (one a
    /// predecessor submitted after it last saved its state), and rests its partitions for the
    /// cooldown as if this core had submitted it. Only the masters' own actions (ids `lb-…`) are
    /// adopted; false when already tracked or not a master's.
    pub fn adopt(&mut self, record: &ActionRecord, input: &PlannerInput, config: &OnlineConfig, now_ms: i64) -> bool {
        let id = &record.request.id;
        if !id.as_str().starts_with("lb-") || self.executor.tracked.iter().any(|t| &t.id == id) {
            return false;
        }
        let policy = record.request.policy.as_deref().and_then(|p| Policy::ALL.into_iter().find(|x| x.as_str() == p));
        self.executor.track_spec(id.clone(), &record.request.spec, policy, input, now_ms);
        if let Some(tracked) = self.executor.tracked.last_mut() {
            tracked.submitted_at_ms = record.created_at_ms;
        }
        let until = now_ms + (config.planner.caps.cooldown_secs * 1000) as i64;
        for p in crate::evaluation::subject_of(&record.request.spec, input).partitions {
            let entry = self.planner.cooldown_until_ms.entry(p).or_insert(until);
            *entry = (*entry).max(until);
        }
        true
    }

    /// An action a predecessor saw succeed that its handover may not show (a leader that died
    /// between submitting and saving its state): its partitions rest a cooldown from when it
    /// finished, as the predecessor's own would, so nothing acts on them again at once. Only
    /// lb's own actions (`lb-…`), and only while that cooldown lasts; true when it added rest.
    pub fn rest_after_predecessor(&mut self, record: &ActionRecord, config: &OnlineConfig, now_ms: i64) -> bool {
        let Some(finished) = record.finished_at_ms else { return false };
        let until = finished + (config.planner.caps.cooldown_secs * 1000) as i64;
        if !record.request.id.as_str().starts_with("lb-")
            || record.state != lb_common::protocol::ActionState::Succeeded
            || until <= now_ms
        {
            return false;
        }
        let mut rested = false;
        for p in crate::planner::partitions_of(&record.request.spec) {
            let entry = self.planner.cooldown_until_ms.entry(p.clone()).or_insert(i64::MIN);
            if *entry < until {
                *entry = until;
                rested = true;
            }
        }
        rested
    }

    /// Whether the next pass evaluates something (then the loop builds
    /// [`Observation::evaluation`]).
    pub fn evaluation_due(&self, config: &OnlineConfig, now_ms: i64) -> bool {
        self.executor.evaluation_due(&config.evaluation, now_ms)
    }

    /// The ops server certainly did not take a submitted action (refused it, or it never left):
    /// it is not followed.
    pub fn refused(&mut self, id: &ActionId) {
        self.executor.forget(id);
    }

    /// Follows an action that did not come from a pass (a manual action, or one a test puts in
    /// front of the evaluation) like the core's own: it is settled and evaluated the same way.
    pub fn track(
        &mut self,
        id: ActionId,
        spec: &ActionSpec,
        policy: Option<Policy>,
        input: &PlannerInput,
        now_ms: i64,
    ) {
        self.executor.track_spec(id, spec, policy, input, now_ms);
    }

    /// One pass. The order is the contract both drivers share:
    /// 1. settle what ended since the last pass (so a move that just finished is known as
    ///    finished before anything is planned on its load), and note the stages after the end
    ///    of each finished action that the view shows (visible, measured, relieved);
    /// 2. evaluate what is due and feed harm back into the planner's state (a partition found
    ///    harmful rests from this pass on; a harmful move's revert is proposed);
    /// 3. correct worker loads for moves that ended inside the window;
    /// 4. run every analyzer on the corrected view;
    /// 5. record the analysis when it says something new;
    /// 6. submit `auto` proposals (reverts first; a planned proposal on a partition being
    ///    reverted waits) and offer `dry_run` ones for approval;
    /// 7. carry out approvals.
    pub fn step(&mut self, obs: Observation<'_>, config: &OnlineConfig, now_ms: i64) -> PassOutput {
        let mut out = PassOutput::default();
        for update in obs.updates {
            self.settle(update, now_ms, &mut out);
        }
        self.executor.observe_stages(obs.input, obs.window_end_ms, obs.window_ms, now_ms);

        let mut reverts = Vec::new();
        let judged_on = match obs.evaluation {
            EvaluationView::None => None,
            EvaluationView::Window(after) => Some(after),
            EvaluationView::PlanningInput => Some(&*obs.input),
        };
        if let Some(after) = judged_on {
            let due = self.executor.evaluate_due(after, &config.evaluation, &config.planner, &mut self.planner, now_ms);
            // A move back is an action and load put somewhere: checked like the planner's own.
            let mut check = due.iter().any(|e| e.revert.is_some()).then(|| {
                crate::planner::OutsideCheck::new(obs.input, &config.planner, now_ms)
                    .with_datasets(obs.datasets, obs.dataset_usage)
            });
            for mut e in due {
                if let (Some(spec), Some(check)) = (e.revert.as_ref(), check.as_mut())
                    && let Err((_, why)) = check.admit(spec)
                {
                    e.judgement.why = format!("{}; not moved back: {why}", e.judgement.why);
                    e.revert = None;
                }
                out.commands.push(Command::Record(Box::new(Record::Evaluation(e.clone()))));
                if e.judgement.verdict == Verdict::Harmful
                    && let (Some(spec), Some(policy)) = (e.revert.clone(), e.policy)
                {
                    reverts.push(Proposal {
                        spec,
                        policy,
                        mode: PolicyMode::Auto,
                        origin: Origin::Online,
                        reason: format!("revert of harmful action {}: {}", e.action_id, e.judgement.why),
                        trigger: Default::default(),
                        predicted: Default::default(),
                        rejected_alternatives: Vec::new(),
                    });
                }
                out.evaluations.push(e);
            }
        }
        // The moves back go out first in this pass: everything planned after them counts them
        // in flight (where they land, the caps), as it counts the ops server's own.
        let reverted = reverts.iter().map(|p| InFlightAction { spec: p.spec.clone(), started_at_ms: now_ms });
        obs.input.in_flight.extend(reverted);

        // A policy edited out of dry run takes its pending proposals with it: in `auto` the
        // analyzers propose again what still holds, now to act on; in `off`, nothing.
        for p in self.executor.withdraw_pending(|p| config.mode_of(p.policy) == Some(PolicyMode::DryRun)) {
            tracing::info!(
                id = %p.id, policy = p.proposal.policy.as_str(), reason = %p.proposal.reason,
                "pending proposal withdrawn: its policy is no longer in dry run"
            );
        }
        self.executor.correct_for_recent_moves(obs.input, obs.window_ms, obs.window_end_ms);
        let input: &PlannerInput = obs.input;
        // From here on neither input changes: the actions tracked on one share one census of it.
        self.executor.begin_pass();
        let mut ctx = AnalysisContext {
            input,
            datasets: obs.datasets,
            dataset_usage: obs.dataset_usage,
            window_end_ms: obs.window_end_ms,
            planner_state: &mut self.planner,
            now_ms,
            earlier: Vec::new(),
        };
        let mut proposals = Vec::new();
        for a in &mut self.analyzers {
            let found = a.analyze(&mut ctx, config);
            if let Some(plan) = found.plan {
                out.plan = plan;
            }
            // Only what will run counts: a dry-run proposal is offered, not submitted.
            ctx.earlier.extend(found.proposals.iter().filter(|p| p.mode == PolicyMode::Auto).map(|p| p.spec.clone()));
            proposals.extend(found.proposals);
        }
        if let Some(command) = self.analysis_record(&out.plan, obs.window_end_ms, now_ms) {
            out.commands.push(command);
        }

        let reverted: Vec<_> = reverts.iter().flat_map(|r| partitions_of(&r.spec)).cloned().collect();
        proposals.retain(|p| !partitions_of(&p.spec).iter().any(|id| reverted.contains(id)));
        // Reverts are tracked on the view they were judged on.
        let revert_input = match obs.evaluation {
            EvaluationView::Window(after) => after,
            _ => input,
        };
        for proposal in reverts {
            self.propose(proposal, revert_input, now_ms, &mut out);
        }
        for proposal in proposals {
            self.propose(proposal, input, now_ms, &mut out);
        }
        self.executor.expire_pending(config.approval_ttl_secs, now_ms);

        for approval in obs.approvals {
            self.approve(approval, input, config, now_ms, &mut out);
        }
        for request in obs.manual {
            self.manual(request, input, obs.datasets, config, now_ms, &mut out);
        }
        self.executor.end_pass();
        out
    }

    /// Refuses a pending dry-run proposal: dropped, and not offered again for the approval TTL.
    pub fn reject(&mut self, proposal_id: &str, config: &OnlineConfig, now_ms: i64) -> Result<Pending, ApprovalError> {
        self.executor.reject_pending(proposal_id, config.approval_ttl_secs, now_ms)
    }

    fn manual(
        &mut self,
        request: ManualRequest,
        input: &PlannerInput,
        datasets: &[DatasetInfo],
        config: &OnlineConfig,
        now_ms: i64,
        out: &mut PassOutput,
    ) {
        // Any ops server takes 1 KiB, whatever its configured `max_reason_bytes`: the operator's
        // words are cut so that who asked still fits.
        let by = format!(" (by hand, {})", request.requested_by);
        let room = lb_common::protocol::limits::MIN_REASON_BYTES.saturating_sub(by.len());
        let reason = format!("{}{by}", lb_common::protocol::cut_text(request.reason.trim(), room));
        let result = manual_proposal(&request.spec, &reason, input, datasets, &config.planner, now_ms);
        if let (Ok(proposal), false) = (&result, request.dry_run) {
            let id = self.ids.next();
            out.commands
                .push(Command::Record(Box::new(Record::Proposal { id: id.clone(), proposal: proposal.clone() })));
            let until = now_ms + (config.planner.caps.cooldown_secs * 1000) as i64;
            for p in partitions_of(&proposal.spec) {
                self.planner.cooldown_until_ms.insert(p.clone(), until);
            }
            self.executor.track(id.clone(), proposal, input, now_ms);
            let actor_path = vec!["manual".to_owned(), request.requested_by.clone()];
            let request_body = ActionRequest {
                id,
                spec: proposal.spec.clone(),
                origin: Origin::Manual,
                policy: None,
                reason: proposal.reason.clone(),
                actor_path,
                leader_epoch: None,
            };
            out.commands.push(Command::Submit { request: Box::new(request_body), approval: Some(request.key.clone()) });
        }
        out.manual.push((request.key, result));
    }

    fn settle(&mut self, update: ActionUpdate, now_ms: i64, out: &mut PassOutput) {
        match update {
            ActionUpdate::Record { record, topology } => {
                let mut stages = self.executor.stages_of(&record.request.id);
                let settled = self.executor.settle(&record, topology.as_deref(), now_ms);
                let (applied, note) = match settled {
                    Settled::InFlight => return,
                    Settled::Done { note } => (true, note),
                    Settled::NotApplied { note } => (false, Some(note)),
                };
                let id = record.request.id.clone();
                out.ended.push(Ended { id, applied, note: note.clone() });
                let outcome = if applied { ActionOutcome::Applied } else { ActionOutcome::NotApplied };
                if let Some(s) = stages.as_mut() {
                    s.follow(&record);
                }
                let entry =
                    ActionEntry { request: record.request.clone(), outcome, record: Some(*record), note, stages };
                out.commands.push(Command::Record(Box::new(Record::Action(entry))));
            }
            ActionUpdate::Finished { id, applied, at_ms } => {
                self.executor.finish(&id, applied, at_ms);
                out.ended.push(Ended { id, applied, note: None });
            }
            ActionUpdate::Unknown { id } => {
                self.executor.forget(&id);
                let note = Some("the ops server does not know this action: its submission never arrived".to_owned());
                out.ended.push(Ended { id, applied: false, note });
            }
        }
    }

    fn propose(&mut self, proposal: Proposal, input: &PlannerInput, now_ms: i64, out: &mut PassOutput) {
        match proposal.mode {
            PolicyMode::Auto => {
                let id = self.ids.next();
                out.commands
                    .push(Command::Record(Box::new(Record::Proposal { id: id.clone(), proposal: proposal.clone() })));
                let reason = proposal.reason.clone();
                self.submit(&proposal, id, reason, input, now_ms, None, out);
            }
            PolicyMode::DryRun => {
                let ids = &mut self.ids;
                if let Some(p) = self.executor.offer(proposal.clone(), now_ms, || ids.next()) {
                    out.commands.push(Command::Record(Box::new(Record::Proposal {
                        id: p.id.clone(),
                        proposal: p.proposal.clone(),
                    })));
                }
            }
            PolicyMode::Off => return,
        }
        out.proposals.push(proposal);
    }

    #[allow(clippy::too_many_arguments)]
    fn submit(
        &mut self,
        proposal: &Proposal,
        id: ActionId,
        reason: String,
        input: &PlannerInput,
        now_ms: i64,
        approval: Option<String>,
        out: &mut PassOutput,
    ) {
        self.executor.track(id.clone(), proposal, input, now_ms);
        // The subject just tracked names the target's table: no second scan of the partitions.
        let table = self.executor.tracked.last().and_then(|t| t.subject.range.as_ref()).map(|(t, b, _)| (t, b));
        let request = action_request(proposal, id, table, reason);
        out.commands.push(Command::Submit { request: Box::new(request), approval });
    }

    fn approve(
        &mut self,
        approval: ApprovalRequest,
        input: &PlannerInput,
        config: &OnlineConfig,
        now_ms: i64,
        out: &mut PassOutput,
    ) {
        let pending = match self.executor.take_pending(&approval.proposal_id, config.approval_ttl_secs, now_ms) {
            Ok(pending) => pending,
            Err(error) => {
                out.commands.push(Command::RefuseApproval { proposal_id: approval.proposal_id, error });
                return;
            }
        };
        let Pending { id, proposal, .. } = pending;
        let reason = format!("{} (dry run, approved by {})", proposal.reason, approval.approved_by);
        // The approved action rests its partitions like an auto one.
        let until = now_ms + (config.planner.caps.cooldown_secs * 1000) as i64;
        for p in crate::evaluation::subject_of(&proposal.spec, input).partitions {
            self.planner.cooldown_until_ms.insert(p, until);
        }
        self.submit(&proposal, id, reason, input, now_ms, Some(approval.proposal_id), out);
    }

    /// Records what this pass decided and declined, when it says something new (see
    /// [`AnalysisRecord`]).
    fn analysis_record(&mut self, plan: &Plan, window_end_ms: i64, now_ms: i64) -> Option<Command> {
        if plan.proposals.is_empty() && plan.rejected.is_empty() {
            self.last_analysis = None;
            return None;
        }
        let declined = &plan.rejected[..plan.rejected.len().min(MAX_DECLINED_RECORDED)];
        let fingerprint = fingerprint(&plan.proposals, declined);
        let due = match self.last_analysis {
            None => true,
            Some((last, at)) => {
                plan.proposals.iter().any(|p| p.mode == PolicyMode::Auto)
                    || last != fingerprint
                    || now_ms - at >= ANALYSIS_HEARTBEAT_MS
            }
        };
        if !due {
            return None;
        }
        self.last_analysis = Some((fingerprint, now_ms));
        let body = AnalysisRecord {
            window_end_ms,
            stats: plan.stats,
            proposed: plan.proposals.iter().map(|p| (p.policy, p.mode, p.spec.clone())).collect(),
            declined: declined.to_vec(),
            declined_total: plan.rejected.len() + plan.stats.declined_dropped,
        };
        Some(Command::Record(Box::new(Record::Analysis { at_ms: now_ms, body })))
    }
}

/// A ResultDataStore record a pass writes: one typed body per kind
/// (`lb_common::protocol::records`).
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// Keyed by the pass's time.
    Analysis {
        at_ms: i64,
        body: AnalysisRecord,
    },
    /// Keyed by the action id the proposal has or gets.
    Proposal {
        id: ActionId,
        proposal: Proposal,
    },
    Action(ActionEntry),
    Evaluation(Evaluation),
}

/// The request for `proposal`: its fair-queue path is the target's `[tenant, table]` (a
/// reshard's `[tenant, dataset]`); cluster-wide actions fall back to `["lb"]`.
fn action_request(
    proposal: &Proposal,
    id: ActionId,
    table: Option<(&lb_common::ids::TenantId, &lb_common::ids::TableId)>,
    reason: String,
) -> ActionRequest {
    let actor_path = match &proposal.spec {
        ActionSpec::Reshard { tenant, dataset, .. } => vec![tenant.to_string(), dataset.to_string()],
        _ => table.map_or_else(|| vec!["lb".to_owned()], |(tenant, table)| vec![tenant.to_string(), table.to_string()]),
    };
    ActionRequest {
        id,
        spec: proposal.spec.clone(),
        origin: proposal.origin,
        policy: Some(proposal.policy.as_str().to_owned()),
        // Any ops server takes this much, whatever its configured `max_reason_bytes`.
        reason: lb_common::protocol::cut_text(&reason, lb_common::protocol::limits::MIN_REASON_BYTES),
        actor_path,
        leader_epoch: None,
    }
}

/// What an analysis record says, ignoring the numbers in the whys (they move every pass):
/// proposals by policy and target, declined items by `(policy, subject)`. A dry-run proposal
/// repeated every pass is the same fingerprint.
fn fingerprint(proposals: &[Proposal], declined: &[Declined]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for p in proposals {
        crate::executor::target_key(p.policy, &p.spec).hash(&mut h);
    }
    for d in declined {
        (d.policy.as_str(), d.subject.as_str()).hash(&mut h);
    }
    h.finish()
}
