//! The online loop's shell: every `analyzer.interval_ms` it gathers what the core needs (the
//! actions the ops server has in flight, the records of tracked actions, the planner's view from
//! the MetricsTable and the topology, SREs' approvals), calls [`OnlineCore::step`], and carries
//! out its commands (submissions to the ops server, ResultDataStore records, approval answers).
//! No decision is made here.
//!
//! The loop holds off while the collector is stale (acting on old numbers is how balancers
//! flap).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use lb_common::clients::OpsClient;
use lb_common::http::ClientError;
use lb_common::ids::ActionId;
use lb_common::protocol::{
    ActionEntry, ActionOutcome, ActionRecord, ActionState, Execution, FencingRequest, ManualActionReply,
    ManualActionRequest, Topology,
};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::core::{
    ActionUpdate, ApprovalRequest, Command, EvaluationView, Handover, ManualRequest, Observation, OnlineConfig,
    OnlineCore, PassOutput, Record,
};
use super::observe::{KeptInput, planner_input, refresh_planner_input};
use super::snapshot::PassSnapshot;
use crate::Shared;
use crate::config::MasterConfig;
use crate::executor::{ApprovalError, Pending};
use crate::leadership::LeadershipStatus;
use crate::placement_manager;
use crate::planner::{InFlightAction, ManualRefusal, Proposal};

/// What an SRE asks of the online loop through the API, answered at its next pass.
#[derive(Debug)]
pub enum Request {
    /// Approve a dry-run proposal: it is submitted like an `auto` one.
    Approve { proposal_id: String, approved_by: String, reply: oneshot::Sender<Result<ActionRecord, ApprovalError>> },
    /// Reject a dry-run proposal: dropped, not offered again for the approval TTL.
    Reject { proposal_id: String, rejected_by: String, reply: oneshot::Sender<Result<Pending, ApprovalError>> },
    /// An action by hand, checked against the current view, predicted and (unless a dry run)
    /// submitted, tracked and evaluated.
    Manual {
        request: ManualActionRequest,
        requested_by: String,
        reply: oneshot::Sender<Result<ManualActionReply, ManualError>>,
    },
}

/// Why a manual action was not carried out.
#[derive(Debug, thiserror::Error)]
pub enum ManualError {
    /// It does not fit the current layout (422, naming the field).
    #[error(transparent)]
    Refused(#[from] ManualRefusal),
    /// The ops server did not take it.
    #[error("the ops server did not take it: {0}")]
    Submission(String),
}

/// Who waits for the outcome of a submission the pass makes.
#[derive(Debug)]
enum Reply {
    Approval(oneshot::Sender<Result<ActionRecord, ApprovalError>>),
    Manual(oneshot::Sender<Result<ManualActionReply, ManualError>>, Option<Box<Proposal>>),
}

/// The loop's state between passes.
struct Online {
    shared: Shared,
    core: OnlineCore,
    /// The last pass's input and the topology version its partitions were built from: while the
    /// layout holds, a pass only re-reads the load.
    input: KeptInput,
    /// Numbers manual requests within this master's life.
    manual_seq: u64,
    /// Times each table's hotspot to its relief (`lb_master_hotspot_relief_seconds`).
    relief: crate::metrics::ReliefClock,
    /// The leadership term this loop has taken over (elected backends only): announced to the
    /// ops server and the predecessor's state restored.
    term: Option<u64>,
    /// The first pass of a term adopts the masters' actions in flight that the core does not
    /// track.
    adopting: bool,
    /// The handover last saved, to skip saving an unchanged one.
    saved: Option<Saved>,
}

/// A handover as saved to the leadership backend.
struct Saved {
    bytes: Vec<u8>,
    /// When these bytes were last found to be the state (saved, or encoded again unchanged).
    at: std::time::Instant,
}

/// etcd's default `--max-request-bytes`: a larger put is refused.
const ETCD_DEFAULT_MAX_REQUEST_BYTES: usize = 1_572_864;

/// The online loop; see the module doc.
pub async fn run(
    shared: Shared,
    ops: impl Fn() -> OpsClient + Send,
    mut approvals: mpsc::Receiver<Request>,
    publish: watch::Sender<Arc<PassSnapshot>>,
    cancel: CancellationToken,
) {
    let boot_ms = chrono::Utc::now().timestamp_millis();
    let config = OnlineConfig::of(&shared.config.borrow());
    let core = OnlineCore::with_analyzers(super::analyzer::registered_with(&config, shared.offline.clone()), boot_ms);
    let mut online = Online {
        shared,
        core,
        input: KeptInput::default(),
        manual_seq: 0,
        relief: Default::default(),
        term: None,
        adopting: false,
        saved: None,
    };
    loop {
        let cfg = online.shared.config.borrow().clone();
        metrics::gauge!("lb_master_analysis_interval_seconds").set(cfg.analyzer.interval_ms as f64 / 1000.0);
        metrics::gauge!("lb_master_halted_planners").set(if cfg.planner.halt { 1.0 } else { 0.0 });
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = online.until_next_pass(&ops, Duration::from_millis(cfg.analyzer.interval_ms)) => {}
        }
        let leadership = online.shared.leadership.status();
        if !leadership.leader {
            online.term = None;
            metrics::counter!("lb_master_analysis_passes_total", "outcome" => "standby").increment(1);
            publish.send_modify(|s| Arc::make_mut(s).leadership = Some(leadership));
            continue;
        }
        if online.shared.collector.read().expect("collector status lock is never poisoned").stale {
            metrics::counter!("lb_master_analysis_passes_total", "outcome" => "stale").increment(1);
            continue;
        }
        let Some(topology) = online.shared.topology.read().expect("topology lock is never poisoned").clone() else {
            continue;
        };
        let client = ops();
        if leadership.epoch.is_some() && online.term != leadership.epoch {
            let taken = tokio::select! {
                _ = cancel.cancelled() => return,
                taken = online.take_over(&client, &leadership) => taken,
            };
            if let Err(outcome) = taken {
                metrics::counter!("lb_master_analysis_passes_total", "outcome" => outcome).increment(1);
                continue;
            }
        }
        // A pass makes several calls to the ops server, each with its own deadline; shutdown
        // does not wait for them (a pass cut short leaves nothing half-submitted that the ops
        // server would not also report at the next start).
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = online.pass(&cfg, &client, &topology, &mut approvals, &publish, leadership) => {}
        }
    }
}

impl Online {
    /// The first steps of a new term, before its first pass: tell the ops server the epoch (so
    /// a late submission of the previous leader is refused from now on), then restore what the
    /// previous leader saved. Err names the pass outcome to count when the takeover must wait.
    async fn take_over(&mut self, client: &OpsClient, leadership: &LeadershipStatus) -> Result<(), &'static str> {
        let epoch = leadership.epoch.expect("only elected terms are taken over");
        let leader = leadership.leader_address.clone().unwrap_or_default();
        match client.announce_epoch(&FencingRequest { leader_epoch: epoch, leader }).await {
            Ok(_) => {}
            Err(ClientError::Status { status, .. }) if status == axum::http::StatusCode::CONFLICT => {
                warn!(epoch, "the ops server has seen a newer leader: stepping down");
                self.shared.leadership.fenced();
                return Err("fenced");
            }
            Err(error) => {
                warn!(epoch, %error, "cannot announce the leadership epoch to the ops server; waiting");
                return Err("no_ops_server");
            }
        }
        let restored = match self.shared.leadership.handover() {
            None => None,
            Some(store) => match store.load().await {
                Ok(None) => None,
                Ok(Some(bytes)) => match Handover::decode(&bytes) {
                    Ok(handover) => Some(handover),
                    Err(error) => {
                        warn!(%error, "the previous leader's state does not decode; starting without it");
                        None
                    }
                },
                Err(error) => {
                    warn!(epoch, %error, "cannot read the previous leader's state; waiting");
                    return Err("no_handover");
                }
            },
        };
        let state = if restored.is_some() { "handover" } else { "fresh" };
        if let Some(handover) = restored {
            info!(
                epoch,
                tracked = handover.tracked.len(),
                pending = handover.pending.len(),
                cooling = handover.planner.cooldown_until_ms.len(),
                "took over the previous leader's state"
            );
            self.core.restore(handover);
        } else {
            info!(epoch, "took over with no previous leader's state");
        }
        // A predecessor that died between submitting and saving left no trace of an action that
        // has finished since (not in flight, so not adopted): rest its partitions all the same.
        let config = OnlineConfig::of(&self.shared.config.borrow());
        let now = chrono::Utc::now().timestamp_millis();
        match client.actions(Some(ActionState::Succeeded)).await {
            Ok(records) => {
                for record in &records {
                    if self.core.rest_after_predecessor(record, &config, now) {
                        info!(action = %record.request.id, "resting the partitions of the previous leader's finished action");
                    }
                }
            }
            Err(error) => warn!(epoch, %error, "cannot read the previous leader's finished actions; waiting"),
        }
        metrics::counter!("lb_master_takeovers_total", "state" => state).increment(1);
        self.term = Some(epoch);
        self.adopting = true;
        self.saved = None;
        Ok(())
    }

    /// Waits for the next pass: `interval` from now, or as soon as an action this loop tracks
    /// has ended at the ops server, but no sooner than a quarter of `interval`. The next step
    /// (the move after it, a split's scatter) then follows the action's end instead of the clock,
    /// which saved ~0.5 s per step of a six-move relief; the hysteresis does not count a pass
    /// that soon (`PlannerConfig::hysteresis_min_gap_ms`). Nothing open: a plain sleep.
    async fn until_next_pass(&self, ops: &impl Fn() -> OpsClient, interval: Duration) {
        let deadline = tokio::time::Instant::now() + interval;
        let open = if self.shared.leadership.status().leader { self.core.open_actions() } else { Vec::new() };
        if open.is_empty() {
            tokio::time::sleep_until(deadline).await;
            return;
        }
        let tick = (interval / 4).max(Duration::from_millis(50));
        tokio::time::sleep(tick).await;
        let client = ops();
        while tokio::time::Instant::now() < deadline {
            // A failed read waits for the deadline like any pass; an id missing from the lists
            // ended (or never arrived: the pass says which).
            if let Ok(records) = in_flight(&client).await
                && open.iter().any(|id| !records.iter().any(|r| &r.request.id == id))
            {
                metrics::counter!("lb_master_analysis_early_passes_total").increment(1);
                self.await_topology_read(tick).await;
                return;
            }
            tokio::time::sleep_until(deadline.min(tokio::time::Instant::now() + tick)).await;
        }
    }

    /// Has the topology loop read the layout again at once and waits (up to `limit`) for that
    /// read: a pass that learns a move ended but still sees the layout from before it plans it
    /// as in flight, so the worker it left stays at its action cap for one more pass.
    async fn await_topology_read(&self, limit: Duration) {
        let current = || self.shared.topology.read().expect("topology lock is never poisoned").clone();
        let before = current();
        self.shared.topology_wake.notify_one();
        let until = tokio::time::Instant::now() + limit;
        while tokio::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(20)).await;
            match (&before, current()) {
                (Some(old), Some(new)) if !Arc::ptr_eq(old, &new) => return,
                (None, Some(_)) => return,
                _ => {}
            }
        }
    }

    /// Saves the core's state for a successor when the backend keeps it and it changed: at once
    /// after a pass that `acted` (submitted, ended or evaluated an action, a dry-run proposal
    /// came or went, an SRE's decision), otherwise once `interval` has passed since the last
    /// save (only the hysteresis moved, which a successor rebuilds in a few windows), and at the
    /// next pass after a save that failed.
    async fn save_handover(&mut self, acted: bool, interval: Duration) {
        let (Some(epoch), Some(store)) = (self.term, self.shared.leadership.handover()) else { return };
        if !acted && self.saved.as_ref().is_some_and(|s| s.at.elapsed() < interval) {
            return;
        }
        let handover = self.core.handover();
        let bytes = match tokio::task::spawn_blocking(move || handover.encode()).await {
            Ok(Ok(bytes)) => bytes,
            Ok(Err(error)) => {
                warn!(%error, "cannot encode the leader's state");
                return;
            }
            Err(_) => return,
        };
        metrics::gauge!("lb_master_handover_bytes").set(bytes.len() as f64);
        if let Some(saved) = self.saved.as_mut().filter(|s| s.bytes == bytes) {
            saved.at = std::time::Instant::now();
            metrics::counter!("lb_master_handover_saves_total", "outcome" => "unchanged").increment(1);
            return;
        }
        let len = bytes.len();
        match store.save(epoch, bytes.clone()).await {
            Ok(()) => {
                self.saved = Some(Saved { bytes, at: std::time::Instant::now() });
                metrics::counter!("lb_master_handover_saves_total", "outcome" => "saved").increment(1);
            }
            Err(error) => {
                // Saved again at the next pass, acted or not: what this save carried must not
                // wait out the interval.
                self.saved = None;
                metrics::counter!("lb_master_handover_saves_total", "outcome" => "failed").increment(1);
                if len > ETCD_DEFAULT_MAX_REQUEST_BYTES {
                    warn!(epoch, %error, bytes = len, "cannot save the leader's state for a successor: it is over etcd's default request limit (1.5 MiB); start etcd with a larger --max-request-bytes");
                } else {
                    warn!(epoch, %error, bytes = len, "cannot save the leader's state for a successor");
                }
            }
        }
    }

    async fn pass(
        &mut self,
        cfg: &MasterConfig,
        client: &OpsClient,
        topology: &Arc<Topology>,
        approvals: &mut mpsc::Receiver<Request>,
        publish: &watch::Sender<Arc<PassSnapshot>>,
        leadership: LeadershipStatus,
    ) {
        let started = std::time::Instant::now();
        let in_flight_records = match in_flight(client).await {
            Ok(actions) => actions,
            Err(error) => {
                warn!(%error, "cannot read in-flight actions; skipping this pass");
                metrics::counter!("lb_master_analysis_passes_total", "outcome" => "no_ops_server").increment(1);
                return;
            }
        };
        let in_flight: Vec<InFlightAction> = in_flight_records
            .iter()
            .map(|r| InFlightAction {
                started_at_ms: r.started_at_ms.unwrap_or(r.created_at_ms),
                spec: r.request.spec.clone(),
            })
            .collect();
        let now = chrono::Utc::now().timestamp_millis();
        let config = OnlineConfig::of(cfg);
        let updates = self.action_updates(client).await;
        let window = Duration::from_millis(cfg.analyzer.window_ms);
        let eval_window =
            self.core.evaluation_due(&config, now).then(|| Duration::from_secs(cfg.evaluation.window_secs));
        let (table, topo) = (self.shared.table.clone(), Arc::clone(topology));
        let horizon_ms = cfg.collector.stale_after_ms as i64;
        let mut kept = std::mem::take(&mut self.input);
        let built = tokio::task::spawn_blocking(move || {
            let table = table.read().expect("table lock is never poisoned");
            // Windows end where every live worker's reports are in, not at the wall clock.
            let at = table.complete_until_ms(now, horizon_ms);
            refresh_planner_input(&mut kept, &table, &topo, window, at);
            kept.input.in_flight = in_flight;
            let after = eval_window.map(|w| planner_input(&table, &topo, Vec::new(), w, at));
            let usage = if topo.datasets.is_empty() {
                Vec::new()
            } else {
                placement_manager::dataset_shard_usage(&table, &topo.datasets, window, at).unwrap_or_default()
            };
            (kept, after, usage, at)
        })
        .await;
        let Ok((mut kept, after, usage, at)) = built else { return };
        // Whether this pass changed what a successor must not lose (not just the hysteresis).
        let mut acted = false;
        if std::mem::take(&mut self.adopting) {
            for record in &in_flight_records {
                if self.core.adopt(record, &kept.input, &config, now) {
                    acted = true;
                    info!(action = %record.request.id, "adopted an action in flight from the previous leader");
                }
            }
        }
        metrics::gauge!("lb_master_analysis_data_lag_seconds").set((now - at) as f64 / 1000.0);
        let mut requests = Vec::new();
        let mut manual = Vec::new();
        let mut replies = HashMap::new();
        while let Ok(request) = approvals.try_recv() {
            match request {
                Request::Approve { proposal_id, approved_by, reply } => {
                    requests.push(ApprovalRequest { proposal_id: proposal_id.clone(), approved_by });
                    replies.insert(proposal_id, Reply::Approval(reply));
                }
                Request::Reject { proposal_id, rejected_by, reply } => {
                    let result = self.core.reject(&proposal_id, &config, now);
                    acted |= result.is_ok();
                    if result.is_ok() {
                        info!(proposal = %proposal_id, by = %rejected_by, "dry-run proposal rejected");
                    }
                    let _ = reply.send(result);
                }
                Request::Manual { request, requested_by, reply } => {
                    self.manual_seq += 1;
                    let key = format!("manual-{}", self.manual_seq);
                    manual.push(ManualRequest {
                        key: key.clone(),
                        spec: request.spec,
                        reason: request.reason,
                        requested_by,
                        dry_run: request.dry_run,
                    });
                    replies.insert(key, Reply::Manual(reply, None));
                }
            }
        }
        let observation = Observation {
            window_end_ms: at,
            window_ms: window.as_millis() as i64,
            input: &mut kept.input,
            evaluation: after.as_ref().map_or(EvaluationView::None, EvaluationView::Window),
            datasets: &topology.datasets,
            dataset_usage: &usage,
            updates,
            approvals: requests,
            manual,
        };
        let pending_before: Vec<_> = self.core.pending().iter().map(|p| p.id.clone()).collect();
        let mut out = self.core.step(observation, &config, now);
        for (key, result) in std::mem::take(&mut out.manual) {
            let submitted =
                out.commands.iter().any(|c| matches!(c, Command::Submit { approval: Some(k), .. } if k == &key));
            match (replies.remove(&key), result) {
                (Some(Reply::Manual(reply, _)), Ok(proposal)) if submitted => {
                    replies.insert(key, Reply::Manual(reply, Some(Box::new(proposal))));
                }
                (Some(Reply::Manual(reply, _)), Ok(proposal)) => {
                    let _ = reply.send(Ok(ManualActionReply { proposal, action: None }));
                }
                (Some(Reply::Manual(reply, _)), Err(refusal)) => {
                    let _ = reply.send(Err(ManualError::Refused(refusal)));
                }
                _ => {}
            }
        }
        metrics::counter!("lb_master_analysis_passes_total", "outcome" => "ok").increment(1);
        let plan = std::mem::take(&mut out.plan);
        crate::metrics::record_pass(&plan, &kept.input, &mut self.relief, now);
        let proposals = out.proposals.clone();
        // A dry-run proposal offered again every pass is no change; a new or dropped one is.
        let pending = self.core.pending();
        acted |= pending.len() != pending_before.len()
            || pending.iter().zip(&pending_before).any(|(p, id)| &p.id != id)
            || !out.evaluations.is_empty()
            || !out.ended.is_empty()
            || out.commands.iter().any(|c| !matches!(c, Command::Record(_)));
        self.carry_out(client, out, &mut replies, now).await;
        self.save_handover(acted, cfg.leadership.handover_interval()).await;
        let (declined, declined_total) = super::snapshot::declined_of(&plan.rejected, plan.stats.declined_dropped);
        let pass = publish.borrow().pass + 1;
        publish.send_replace(Arc::new(PassSnapshot {
            pass,
            at_ms: Some(now),
            window_end_ms: Some(at),
            leadership: Some(leadership),
            stats: plan.stats,
            proposals,
            declined,
            declined_total,
            pending: self.core.pending().to_vec(),
            placement_rules: self.core.placement_rules(now),
        }));
        metrics::gauge!("lb_master_pending_proposals").set(self.core.pending().len() as f64);
        let cooling = self.core.planner_state().cooldown_until_ms.values().filter(|&&until| until > now).count();
        metrics::gauge!("lb_master_cooling_partitions").set(cooling as f64);
        metrics::histogram!("lb_master_analysis_pass_seconds").record(started.elapsed().as_secs_f64());
        self.input = kept;
    }

    /// What became of every tracked action that has not ended, as the ops server tells it.
    async fn action_updates(&mut self, client: &OpsClient) -> Vec<ActionUpdate> {
        let mut updates = Vec::new();
        let mut fresh_topology: Option<Arc<Topology>> = None;
        for id in self.core.open_actions() {
            let record = match client.action(&id).await {
                Ok(record) => record,
                Err(ClientError::Status { status, .. }) if status == axum::http::StatusCode::NOT_FOUND => {
                    warn!(action = %id, "the ops server does not know this action: its submission never arrived");
                    updates.push(ActionUpdate::Unknown { id });
                    continue;
                }
                Err(error) => {
                    warn!(action = %id, %error, "cannot read the action's state");
                    continue;
                }
            };
            let maybe = record.failure.as_ref().is_some_and(|f| f.execution == Execution::MaybeExecuted);
            if maybe && fresh_topology.is_none() {
                // Never guess: the storage system's current layout says whether it happened.
                fresh_topology = client.topology().await.ok().map(Arc::new);
            }
            let topology = if maybe { fresh_topology.clone() } else { None };
            updates.push(ActionUpdate::Record { record: Box::new(record), topology });
        }
        updates
    }

    /// Carries out a pass's commands in order, and logs and counts what it decided.
    async fn carry_out(&mut self, client: &OpsClient, out: PassOutput, replies: &mut HashMap<String, Reply>, now: i64) {
        if out.ended.iter().any(|e| e.applied) {
            self.shared.topology_wake.notify_one();
        }
        for ended in &out.ended {
            info!(action = %ended.id, applied = ended.applied, note = ended.note.as_deref().unwrap_or(""), "action ended");
            metrics::counter!("lb_master_actions_ended_total", "applied" => if ended.applied { "yes" } else { "no" })
                .increment(1);
        }
        for e in &out.evaluations {
            let policy = e.policy.map_or("manual", |p| p.as_str());
            metrics::counter!("lb_master_evaluations_total", "verdict" => e.judgement.verdict.as_str(), "policy" => policy)
                .increment(1);
            if e.judgement.verdict == lb_common::protocol::Verdict::Inconclusive {
                // The load left (clients stopped, or stopped following the data): worth a look.
                warn!(action = %e.action_id, why = %e.judgement.why, "action evaluated inconclusive: the demand it was judged on fell");
            } else {
                info!(action = %e.action_id, verdict = e.judgement.verdict.as_str(), score = e.judgement.score, why = %e.judgement.why, "action evaluated");
            }
        }
        for p in &out.proposals {
            metrics::counter!("lb_master_proposals_total", "policy" => p.policy.as_str(), "mode" => p.mode.as_str())
                .increment(1);
        }
        for command in out.commands {
            match command {
                Command::Record(record) => self.record(&record, now).await,
                Command::Submit { request, approval } => {
                    let result = self.submit(client, *request, now).await;
                    match approval.and_then(|id| replies.remove(&id)) {
                        Some(Reply::Approval(reply)) => {
                            if let Ok(record) = &result {
                                info!(action = %record.request.id, "dry-run proposal approved");
                            }
                            let _ = reply.send(result);
                        }
                        Some(Reply::Manual(reply, Some(proposal))) => {
                            let reply_body = result
                                .map(|record| ManualActionReply { proposal: *proposal, action: Some(record) })
                                .map_err(|e| ManualError::Submission(e.to_string()));
                            let _ = reply.send(reply_body);
                        }
                        Some(Reply::Manual(_, None)) | None => {}
                    }
                }
                Command::RefuseApproval { proposal_id, error } => {
                    if let Some(Reply::Approval(reply)) = replies.remove(&proposal_id) {
                        let _ = reply.send(Err(error));
                    }
                }
            }
        }
    }

    async fn record(&self, record: &Record, now: i64) {
        let store = &self.shared.store;
        let (kind, result) = match record {
            Record::Analysis { at_ms, body } => ("analysis", store.put_record(&at_ms.to_string(), now, body).await),
            Record::Proposal { id, proposal } => ("proposal", store.put_record(id.as_str(), now, proposal).await),
            Record::Action(entry) => ("action", store.put_record(entry.request.id.as_str(), now, entry).await),
            Record::Evaluation(e) => ("evaluation", store.put_record(&e.action_id, now, e).await),
        };
        if let Err(error) = result {
            warn!(%error, kind, "cannot write to the result store");
        }
    }

    /// Sends an action the core decided (and already tracks). A refused submission (4xx, or
    /// one that certainly never left) is recorded as failed and no longer followed; one whose
    /// reply was lost stays followed (the ops server may have it).
    async fn submit(
        &mut self,
        client: &OpsClient,
        request: lb_common::protocol::ActionRequest,
        now: i64,
    ) -> Result<ActionRecord, ApprovalError> {
        let id: ActionId = request.id.clone();
        let mut request = request;
        // Asked again right before sending: a term can end inside a pass (a lost lease, a
        // frozen process that just woke up), and then nothing more leaves this master.
        let leadership = self.shared.leadership.status();
        if !leadership.leader || (self.term.is_some() && leadership.epoch != self.term) {
            warn!(action = %id, "not the leader any more: the action is not submitted");
            self.core.refused(&id);
            let note = "not submitted: this master stopped leading during the pass".to_owned();
            let entry = ActionEntry {
                request,
                outcome: ActionOutcome::Refused,
                record: None,
                note: Some(note.clone()),
                stages: None,
            };
            self.record(&Record::Action(entry), now).await;
            return Err(ApprovalError::Refused(note));
        }
        request.leader_epoch = self.term;
        match client.submit(&request).await {
            Ok(record) => {
                info!(action = %id, kind = request.spec.kind().as_str(), reason = %request.reason, "action submitted");
                metrics::counter!("lb_master_actions_submitted_total", "kind" => request.spec.kind().as_str())
                    .increment(1);
                let mut stages = self.core.executor().stages_of(&id);
                if let Some(s) = stages.as_mut() {
                    s.follow(&record);
                }
                let entry = ActionEntry {
                    request,
                    outcome: ActionOutcome::Submitted,
                    record: Some(record.clone()),
                    note: None,
                    stages,
                };
                self.record(&Record::Action(entry), now).await;
                Ok(record)
            }
            Err(error) => {
                let refused = matches!(&error, ClientError::Status { status, .. } if status.is_client_error())
                    || !error.maybe_delivered();
                warn!(action = %id, %error, refused, "action submission failed");
                if let ClientError::Status { body, .. } = &error
                    && body.code == "stale_epoch"
                {
                    warn!(action = %id, epoch = ?self.term, "the ops server refused this master's epoch: stepping down");
                    self.shared.leadership.fenced();
                    self.term = None;
                }
                if refused {
                    self.core.refused(&id);
                }
                let outcome = if refused { ActionOutcome::Refused } else { ActionOutcome::Unanswered };
                let entry = ActionEntry { request, outcome, record: None, note: Some(error.to_string()), stages: None };
                self.record(&Record::Action(entry), now).await;
                Err(ApprovalError::Refused(error.to_string()))
            }
        }
    }
}

/// The actions the ops server has queued or running.
async fn in_flight(ops: &OpsClient) -> Result<Vec<ActionRecord>, ClientError> {
    let mut out = Vec::new();
    for state in [ActionState::Queued, ActionState::Running] {
        out.extend(ops.actions(Some(state)).await?);
    }
    Ok(out)
}
