//! The online loop: every `analyzer.interval_ms`, build the planner's view from the
//! MetricsTable and the topology, plan, submit the `auto` proposals to the ops server, keep the
//! `dry_run` ones for approval, follow every submitted action to its end and evaluate it
//! ([`crate::executor`] holds the rules; this module does the I/O).
//!
//! The loop holds off while the collector is stale (acting on old numbers is how balancers
//! flap), and counts the actions the ops server still has queued or running as done, so a fix
//! in flight is never proposed twice. Every proposal, action and evaluation is recorded in the
//! ResultDataStore.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use lb_common::http::{ClientError, HttpClient};
use lb_common::ids::ActionId;
use lb_common::protocol::{ActionRecord, ActionRequest, ActionSpec, ActionsResponse, Origin, Topology};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::Shared;
use crate::config::MasterConfig;
use crate::evaluation::{Evaluation, Verdict};
use crate::executor::{ApprovalError, Executor, Pending, Settled};
use crate::placement_manager::{self, PlacementManager};
use crate::planner::{
    Declined, InFlightAction, PartitionView, PartitionWindow, Plan, PlanStats, PlannerInput, PlannerState, Policy,
    PolicyMode, Proposal, WorkerView, WorkerWindow, plan,
};
use crate::store::RecordKind;
use crate::table::{MetricsTable, RateBasis};

/// Past 20,000 partitions the input is built on two threads (a single core takes ~10 ms).
const PARALLEL_INPUT_PARTITIONS: usize = 20_000;

/// Builds the planner's input: the layout from the topology, the load over the last `window`
/// from the table, each partition's averaged over the seconds its worker reported since the
/// partition's first sample ([`RateBasis::Reported`]: a split's new side shows its real rate
/// from its first report, a partition left out of a report counts as idle for that second, a
/// partition without samples yet counts as idle).
pub fn planner_input(
    table: &MetricsTable,
    topology: &Topology,
    in_flight: Vec<InFlightAction>,
    window: Duration,
    now_ms: i64,
) -> PlannerInput {
    let mut input =
        PlannerInput { partitions: Vec::new(), workers: Vec::new(), in_flight, new_group_dedicates_owner: false };
    refresh_planner_input(&mut input, None, table, topology, window, now_ms);
    input
}

/// [`planner_input`] in place: when `built_from` is the version of `topology` that `input`'s
/// partitions were built from, only their load is re-read (no ids cloned, nothing allocated
/// but sketches); otherwise the views are rebuilt. Workers are always rebuilt (a thousand).
pub fn refresh_planner_input(
    input: &mut PlannerInput,
    built_from: Option<u64>,
    table: &MetricsTable,
    topology: &Topology,
    window: Duration,
    now_ms: i64,
) {
    let reader = table.rate_reader(window, now_ms, RateBasis::Reported).ok();
    let stats = |p: &lb_common::protocol::PartitionInfo| {
        let rates = reader.as_ref().and_then(|r| r.rates(&p.id));
        rates.map_or_else(PartitionWindow::default, |r| PartitionWindow {
            ops_per_sec: r.ops_per_sec,
            bytes_per_sec: r.bytes_per_sec,
            cpu_cores: r.cpu_cores,
            rejected_per_sec: r.rejected_per_sec,
            latency_p99_us: r.latency_p99_us.unwrap_or(0.0),
            sketch: table.sketch_for(&p.id, p.range).cloned(),
        })
    };
    let all = &topology.partitions;
    let same_layout = built_from == Some(topology.version) && input.partitions.len() == all.len();
    if same_layout {
        let refresh = |views: &mut [PartitionView], infos: &[lb_common::protocol::PartitionInfo]| {
            for (v, p) in views.iter_mut().zip(infos) {
                v.stats = stats(p);
            }
        };
        if all.len() < PARALLEL_INPUT_PARTITIONS {
            refresh(&mut input.partitions, all);
        } else {
            let mid = all.len() / 2;
            let (lv, rv) = input.partitions.split_at_mut(mid);
            let (li, ri) = all.split_at(mid);
            std::thread::scope(|s| {
                s.spawn(|| refresh(rv, ri));
                refresh(lv, li);
            });
        }
    } else {
        let view = |p: &lb_common::protocol::PartitionInfo| PartitionView {
            id: p.id.clone(),
            tenant: p.tenant.clone(),
            table: p.table.clone(),
            range: p.range,
            owner: p.owner.clone(),
            group: p.group.clone(),
            stored_bytes: p.stored_bytes,
            limit: p.limit,
            supported_actions: p.supported_actions.clone(),
            stats: stats(p),
        };
        input.partitions = if all.len() < PARALLEL_INPUT_PARTITIONS {
            all.iter().map(view).collect()
        } else {
            let (left, right) = all.split_at(all.len() / 2);
            std::thread::scope(|s| {
                let other = s.spawn(|| right.iter().map(view).collect::<Vec<_>>());
                let mut out: Vec<PartitionView> = left.iter().map(view).collect();
                out.extend(other.join().unwrap_or_else(|_| right.iter().map(view).collect()));
                out
            })
        };
    }
    let loads: HashMap<_, _> =
        table.workers(window, now_ms).unwrap_or_default().into_iter().map(|w| (w.id.clone(), w)).collect();
    let workers = topology
        .workers
        .iter()
        .map(|w| {
            let load = loads.get(&w.id);
            WorkerView {
                id: w.id.clone(),
                capacity: w.capacity,
                // Host cores are not in the topology; CPU stays out of the load dimensions until
                // agents report them (the ops and bytes dimensions carry the decision).
                cpu_cores: 0.0,
                group: w.group.clone(),
                health: w.health,
                load: load.map_or_else(WorkerWindow::default, |l| WorkerWindow {
                    ops_per_sec: l.ops_per_sec,
                    bytes_per_sec: l.bytes_per_sec,
                    cpu_ratio: l.host_cpu_ratio.unwrap_or(0.0),
                }),
            }
        })
        .collect();
    input.workers = workers;
    input.new_group_dedicates_owner = topology.new_group_dedicates_owner;
}

async fn in_flight(ops: &HttpClient) -> Result<Vec<InFlightAction>, ClientError> {
    let mut out = Vec::new();
    for state in ["queued", "running"] {
        let reply: ActionsResponse = ops.get(&format!("/v1/actions?state={state}")).await?;
        out.extend(reply.actions.into_iter().map(|r: ActionRecord| InFlightAction {
            started_at_ms: r.started_at_ms.unwrap_or(r.created_at_ms),
            spec: r.request.spec,
        }));
    }
    Ok(out)
}

fn action_request(proposal: &Proposal, id: ActionId, topology: &Topology, reason: String) -> ActionRequest {
    // The fair-queue path is the target's [tenant, table]; cluster-wide actions fall back to "lb".
    let partition = crate::planner::partitions_of(&proposal.spec).into_iter().next();
    let actor_path = match &proposal.spec {
        ActionSpec::Reshard { tenant, dataset, .. } => vec![tenant.to_string(), dataset.to_string()],
        _ => partition
            .and_then(|id| topology.partitions.iter().find(|p| &p.id == id))
            .map_or_else(|| vec!["lb".to_owned()], |p| vec![p.tenant.to_string(), p.table.to_string()]),
    };
    ActionRequest {
        id,
        spec: proposal.spec.clone(),
        origin: Origin::Online,
        policy: Some(proposal.policy.as_str().to_owned()),
        reason,
        actor_path,
    }
}

/// An SRE's approval of a dry-run proposal, answered by the loop at its next pass.
#[derive(Debug)]
pub struct Approval {
    pub proposal_id: String,
    pub approved_by: String,
    pub reply: oneshot::Sender<Result<ActionRecord, ApprovalError>>,
}

/// Action ids of this master process: `lb-<boot ms>-<n>`, unique across restarts.
#[derive(Debug)]
struct Ids {
    boot_ms: i64,
    next: u64,
}

impl Ids {
    fn next(&mut self) -> ActionId {
        self.next += 1;
        format!("lb-{}-{}", self.boot_ms, self.next).parse().expect("lb-<digits>-<digits> is a valid id")
    }
}

/// The loop's state between passes.
struct Online {
    shared: Shared,
    state: PlannerState,
    executor: Executor,
    placement: PlacementManager,
    ids: Ids,
    /// The last pass's input and the topology version its partitions were built from: while the
    /// layout holds, a pass only re-reads the load.
    input: Option<(u64, PlannerInput)>,
    /// What the last stored analysis record said (its fingerprint) and when it was written.
    last_analysis: Option<(u64, i64)>,
}

/// Declined items an analysis record keeps (the plan keeps up to 256).
const MAX_DECLINED_RECORDED: usize = 64;
/// While anything is declined, an analysis record is written at least this often.
const ANALYSIS_HEARTBEAT_MS: i64 = 60_000;

/// What a pass saw and decided, stored as an `analysis` record keyed by the pass's time: the
/// plan's counters, what it proposed and the first [`MAX_DECLINED_RECORDED`] of what it declined,
/// each with why. Written when the pass submitted something, when what it proposes in dry run
/// or declines changed, and every [`ANALYSIS_HEARTBEAT_MS`] while that stays; a quiet cluster
/// writes nothing. The why of an action not taken is what an SRE asks first.
#[derive(Debug, serde::Serialize)]
struct AnalysisRecord<'a> {
    /// Where the load windows ended (the newest second every live worker has delivered).
    window_end_ms: i64,
    stats: &'a PlanStats,
    proposed: Vec<(Policy, PolicyMode, &'a ActionSpec)>,
    declined: &'a [Declined],
    declined_total: usize,
}

impl AnalysisRecord<'_> {
    /// Proposals and declined `(policy, subject)` pairs, ignoring the numbers in the whys (they
    /// move every pass). A dry-run proposal repeated every pass is the same fingerprint.
    fn fingerprint(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for (policy, _, spec) in &self.proposed {
            crate::executor::target_key(*policy, spec).hash(&mut h);
        }
        for d in self.declined {
            (d.policy.as_str(), d.subject.as_str()).hash(&mut h);
        }
        h.finish()
    }
}

/// The online loop; see the module doc.
pub async fn run(
    shared: Shared,
    ops: impl Fn() -> HttpClient + Send,
    mut approvals: mpsc::Receiver<Approval>,
    cancel: CancellationToken,
) {
    let boot_ms = chrono::Utc::now().timestamp_millis();
    let placement = PlacementManager::new(&shared.config.borrow().placement);
    let mut online = Online {
        shared,
        state: PlannerState::default(),
        executor: Executor::default(),
        placement,
        ids: Ids { boot_ms, next: 0 },
        input: None,
        last_analysis: None,
    };
    loop {
        let cfg = online.shared.config.borrow().clone();
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(cfg.analyzer.interval_ms)) => {}
        }
        if online.shared.collector.read().expect("collector status lock is never poisoned").stale {
            metrics::counter!("lb_master_analysis_passes_total", "outcome" => "stale").increment(1);
            continue;
        }
        let Some(topology) = online.shared.topology.read().expect("topology lock is never poisoned").clone() else {
            continue;
        };
        let client = ops();
        // A pass makes several calls to the ops server, each with its own deadline; shutdown
        // does not wait for them (a pass cut short leaves nothing half-submitted that the ops
        // server would not also report at the next start).
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = online.pass(&cfg, &client, &topology, &mut approvals) => {}
        }
    }
}

impl Online {
    async fn pass(
        &mut self,
        cfg: &MasterConfig,
        client: &HttpClient,
        topology: &Arc<Topology>,
        approvals: &mut mpsc::Receiver<Approval>,
    ) {
        let in_flight = match in_flight(client).await {
            Ok(actions) => actions,
            Err(error) => {
                warn!(%error, "cannot read in-flight actions; skipping this pass");
                metrics::counter!("lb_master_analysis_passes_total", "outcome" => "no_ops_server").increment(1);
                return;
            }
        };
        let now = chrono::Utc::now().timestamp_millis();
        // Settle what ended since the last pass before planning, so a move that just finished
        // is known as finished (its partition's load is then put where it now is).
        self.refresh(client, now).await;
        let window = Duration::from_millis(cfg.analyzer.window_ms);
        let eval_window =
            self.executor.evaluation_due(&cfg.evaluation, now).then(|| Duration::from_secs(cfg.evaluation.window_secs));
        let (table, topo) = (self.shared.table.clone(), Arc::clone(topology));
        let horizon_ms = cfg.collector.stale_after_ms as i64;
        let cached = self.input.take();
        let built = tokio::task::spawn_blocking(move || {
            let table = table.read().expect("table lock is never poisoned");
            // Windows end where every live worker's reports are in, not at the wall clock.
            let at = table.complete_until_ms(now, horizon_ms);
            let (built_from, mut input) = cached.map_or((None, PlannerInput::default()), |(v, i)| (Some(v), i));
            refresh_planner_input(&mut input, built_from, &table, &topo, window, at);
            input.in_flight = in_flight;
            let after = eval_window.map(|w| planner_input(&table, &topo, Vec::new(), w, at));
            let usage = if topo.datasets.is_empty() {
                Vec::new()
            } else {
                placement_manager::dataset_shard_usage(&table, &topo.datasets, window, at).unwrap_or_default()
            };
            (input, after, usage, at)
        })
        .await;
        let Ok((mut input, after, usage, at)) = built else { return };
        self.executor.correct_for_recent_moves(&mut input, window.as_millis() as i64, at);
        metrics::gauge!("lb_master_analysis_data_lag_seconds").set((now - at) as f64 / 1000.0);
        let plan = plan(&input, &cfg.planner, &mut self.state, now);
        self.record_analysis(&plan, at, now).await;
        self.placement.observe(at, &usage);
        let reshards = self.placement.plan(&topology.datasets, &cfg.placement, now);
        *self.shared.placement_rules.write().expect("placement rules lock is never poisoned") =
            Some(self.placement.rules(now));
        metrics::counter!("lb_master_analysis_passes_total", "outcome" => "ok").increment(1);
        for proposal in plan.proposals.into_iter().chain(reshards) {
            metrics::counter!("lb_master_proposals_total", "policy" => proposal.policy.as_str(), "mode" => mode_label(proposal.mode))
                .increment(1);
            match proposal.mode {
                PolicyMode::Auto => {
                    let id = self.ids.next();
                    self.record(RecordKind::Proposal, id.as_str(), now, &proposal).await;
                    let reason = proposal.reason.clone();
                    let _ = self.submit(client, &proposal, id, reason, topology, &input, now).await;
                }
                PolicyMode::DryRun => {
                    let ids = &mut self.ids;
                    let new = self.executor.offer(proposal, now, || ids.next()).cloned();
                    if let Some(p) = new {
                        self.record(RecordKind::Proposal, p.id.as_str(), now, &p).await;
                    }
                }
                PolicyMode::Off => {}
            }
        }
        self.executor.expire_pending(cfg.analyzer.approval_ttl_secs, now);
        while let Ok(approval) = approvals.try_recv() {
            let result = self.approve(cfg, client, &approval, topology, &input, now).await;
            let _ = approval.reply.send(result);
        }
        *self.shared.pending.write().expect("pending lock is never poisoned") = self.executor.pending.clone();
        if let Some(after) = after {
            let evaluations = self.executor.evaluate_due(&after, &cfg.evaluation, &cfg.planner, &mut self.state, now);
            for e in evaluations {
                self.evaluated(client, e, topology, &after, now).await;
            }
        }
        self.input = Some((topology.version, input));
    }

    /// Stores what this pass decided and declined, when it says something new (see
    /// [`AnalysisRecord`]).
    async fn record_analysis(&mut self, plan: &Plan, window_end_ms: i64, now: i64) {
        if plan.proposals.is_empty() && plan.rejected.is_empty() {
            self.last_analysis = None;
            return;
        }
        let record = AnalysisRecord {
            window_end_ms,
            stats: &plan.stats,
            proposed: plan.proposals.iter().map(|p| (p.policy, p.mode, &p.spec)).collect(),
            declined: &plan.rejected[..plan.rejected.len().min(MAX_DECLINED_RECORDED)],
            declined_total: plan.rejected.len() + plan.stats.declined_dropped,
        };
        let fingerprint = record.fingerprint();
        let due = match self.last_analysis {
            None => true,
            Some((last, at)) => {
                record.proposed.iter().any(|(_, mode, _)| *mode == PolicyMode::Auto)
                    || last != fingerprint
                    || now - at >= ANALYSIS_HEARTBEAT_MS
            }
        };
        if due {
            self.record(RecordKind::Analysis, &now.to_string(), now, &record).await;
            self.last_analysis = Some((fingerprint, now));
        }
    }

    async fn record<T: serde::Serialize>(&self, kind: RecordKind, key: &str, now: i64, body: &T) {
        if let Err(error) = self.shared.store.put(kind, key, now, body).await {
            warn!(%error, kind = kind.as_str(), key, "cannot write to the result store");
        }
    }

    /// Submits an action and starts tracking it. A refused submission (4xx) is recorded as
    /// failed; one whose reply was lost is tracked anyway (the ops server may have it).
    #[allow(clippy::too_many_arguments)]
    async fn submit(
        &mut self,
        client: &HttpClient,
        proposal: &Proposal,
        id: ActionId,
        reason: String,
        topology: &Topology,
        input: &PlannerInput,
        now: i64,
    ) -> Result<ActionRecord, ApprovalError> {
        let request = action_request(proposal, id.clone(), topology, reason);
        match client.post::<_, ActionRecord>("/v1/actions", &request).await {
            Ok(record) => {
                info!(action = %id, kind = request.spec.kind().as_str(), reason = %request.reason, "action submitted");
                metrics::counter!("lb_master_actions_submitted_total", "kind" => request.spec.kind().as_str())
                    .increment(1);
                self.executor.track(id.clone(), proposal, input, now);
                self.record(RecordKind::Action, id.as_str(), now, &record).await;
                Ok(record)
            }
            Err(error) => {
                let refused = matches!(&error, ClientError::Status { status, .. } if status.is_client_error())
                    || !error.maybe_delivered();
                warn!(action = %id, %error, refused, "action submission failed");
                if !refused {
                    self.executor.track(id.clone(), proposal, input, now);
                }
                let body = serde_json::json!({
                    "request": request,
                    "state": if refused { "failed" } else { "unknown" },
                    "error": error.to_string(),
                });
                self.record(RecordKind::Action, id.as_str(), now, &body).await;
                Err(ApprovalError::Refused(error.to_string()))
            }
        }
    }

    async fn approve(
        &mut self,
        cfg: &MasterConfig,
        client: &HttpClient,
        approval: &Approval,
        topology: &Topology,
        input: &PlannerInput,
        now: i64,
    ) -> Result<ActionRecord, ApprovalError> {
        let Pending { id, proposal, .. } =
            self.executor.take_pending(&approval.proposal_id, cfg.analyzer.approval_ttl_secs, now)?;
        let reason = format!("{} (dry run, approved by {})", proposal.reason, approval.approved_by);
        let record = self.submit(client, &proposal, id, reason, topology, input, now).await?;
        // The approved action rests its partitions like an auto one.
        let until = now + (cfg.planner.caps.cooldown_secs * 1000) as i64;
        for p in crate::evaluation::Subject::of(&proposal.spec, input).partitions {
            self.state.cooldown_until_ms.insert(p, until);
        }
        info!(action = %record.request.id, approved_by = %approval.approved_by, "dry-run proposal approved");
        Ok(record)
    }

    /// Follows every tracked action that has not ended yet.
    async fn refresh(&mut self, client: &HttpClient, now: i64) {
        let open: Vec<ActionId> =
            self.executor.tracked.iter().filter(|t| t.finished_at_ms.is_none()).map(|t| t.id.clone()).collect();
        let mut fresh_topology: Option<Topology> = None;
        for id in open {
            let record = match client.get::<ActionRecord>(&format!("/v1/actions/{id}")).await {
                Ok(record) => record,
                Err(ClientError::Status { status, .. }) if status == axum::http::StatusCode::NOT_FOUND => {
                    warn!(action = %id, "the ops server does not know this action: its submission never arrived");
                    self.executor.forget(&id);
                    continue;
                }
                Err(error) => {
                    warn!(action = %id, %error, "cannot read the action's state");
                    continue;
                }
            };
            let maybe =
                record.failure.as_ref().is_some_and(|f| f.execution == lb_common::protocol::Execution::MaybeExecuted);
            if maybe && fresh_topology.is_none() {
                // Never guess: the storage system's current layout says whether it happened.
                fresh_topology = client.get::<Topology>("/v1/topology").await.ok();
            }
            let settled = self.executor.settle(&record, fresh_topology.as_ref(), now);
            let note = match &settled {
                Settled::InFlight => continue,
                Settled::Done { note } => note.clone(),
                Settled::NotApplied { note } => Some(note.clone()),
            };
            info!(action = %id, state = ?record.state, note = note.as_deref().unwrap_or(""), "action ended");
            metrics::counter!("lb_master_actions_ended_total", "applied" => if matches!(settled, Settled::Done { .. }) { "yes" } else { "no" })
                .increment(1);
            let body = serde_json::json!({ "record": record, "applied": matches!(settled, Settled::Done { .. }), "note": note });
            self.record(RecordKind::Action, id.as_str(), now, &body).await;
        }
    }

    async fn evaluated(
        &mut self,
        client: &HttpClient,
        e: Evaluation,
        topology: &Topology,
        after: &PlannerInput,
        now: i64,
    ) {
        let policy = e.policy.map_or("manual", |p| p.as_str());
        metrics::counter!("lb_master_evaluations_total", "verdict" => e.judgement.verdict.as_str(), "policy" => policy)
            .increment(1);
        info!(action = %e.action_id, verdict = e.judgement.verdict.as_str(), score = e.judgement.score, why = %e.judgement.why, "action evaluated");
        self.record(RecordKind::Evaluation, &e.action_id, now, &e).await;
        if e.judgement.verdict != Verdict::Harmful {
            return;
        }
        let Some(spec) = e.revert.clone() else { return };
        let Some(policy) = e.policy else { return };
        let proposal = Proposal {
            spec,
            policy,
            mode: PolicyMode::Auto,
            reason: format!("revert of harmful action {}: {}", e.action_id, e.judgement.why),
            trigger: Default::default(),
            predicted: Default::default(),
            rejected_alternatives: Vec::new(),
        };
        let id = self.ids.next();
        self.record(RecordKind::Proposal, id.as_str(), now, &proposal).await;
        let reason = proposal.reason.clone();
        if self.submit(client, &proposal, id, reason, topology, after, now).await.is_ok() {
            metrics::counter!("lb_master_reverts_total").increment(1);
        }
    }
}

fn mode_label(mode: PolicyMode) -> &'static str {
    match mode {
        PolicyMode::Off => "off",
        PolicyMode::DryRun => "dry_run",
        PolicyMode::Auto => "auto",
    }
}
