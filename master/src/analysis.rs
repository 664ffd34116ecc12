//! The online loop: every `analyzer.interval_ms`, build the planner's view from the
//! MetricsTable and the topology, plan, record every proposal in the ResultDataStore, and submit
//! the `auto` ones to the ops server.
//!
//! The loop holds off while the collector is stale (acting on old numbers is how balancers
//! flap), and counts the actions the ops server still has queued or running as done, so a fix
//! in flight is never proposed twice. Dry-run proposals are recorded and shown, not submitted.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use lb_common::http::HttpClient;
use lb_common::ids::ActionId;
use lb_common::protocol::{ActionRecord, ActionRequest, ActionState, ActionsResponse, Origin, Topology};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::Shared;
use crate::planner::{
    InFlightAction, PartitionView, PartitionWindow, PlannerInput, PlannerState, PolicyMode, Proposal, WorkerView,
    WorkerWindow, plan,
};
use crate::store::RecordKind;
use crate::table::MetricsTable;

/// Builds the planner's input: the layout from the topology, the load over the last `window`
/// from the table (a partition without samples yet counts as idle).
pub fn planner_input(
    table: &MetricsTable,
    topology: &Topology,
    in_flight: Vec<InFlightAction>,
    window: Duration,
    now_ms: i64,
) -> PlannerInput {
    let rows: HashMap<_, _> =
        table.partitions(window, now_ms).unwrap_or_default().into_iter().map(|r| (r.id.clone(), r)).collect();
    let partitions = topology
        .partitions
        .iter()
        .map(|p| {
            let stats = rows.get(&p.id).map_or_else(PartitionWindow::default, |r| PartitionWindow {
                ops_per_sec: r.ops_per_sec,
                bytes_per_sec: r.bytes_per_sec,
                cpu_cores: r.cpu_cores,
                rejected_per_sec: r.rejected_per_sec,
                latency_p99_us: r.latency_p99_us.unwrap_or(0.0),
                sketch: table.sketch_for(&p.id, p.range).cloned(),
            });
            PartitionView {
                id: p.id.clone(),
                tenant: p.tenant.clone(),
                table: p.table.clone(),
                range: p.range,
                owner: p.owner.clone(),
                group: p.group.clone(),
                stored_bytes: p.stored_bytes,
                limit: p.limit,
                supported_actions: p.supported_actions.clone(),
                stats,
            }
        })
        .collect();
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
    PlannerInput { partitions, workers, in_flight }
}

async fn in_flight(ops: &HttpClient) -> Result<Vec<InFlightAction>, lb_common::http::ClientError> {
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

fn action_request(proposal: &Proposal, id: ActionId, topology: &Topology) -> ActionRequest {
    // The fair-queue path is the target's [tenant, table]; cluster-wide moves fall back to "lb".
    let partition = match &proposal.spec {
        lb_common::protocol::ActionSpec::Split { partition, .. }
        | lb_common::protocol::ActionSpec::Move { partition, .. } => Some(partition),
        lb_common::protocol::ActionSpec::Merge { left, .. } => Some(left),
        _ => None,
    };
    let actor_path = partition
        .and_then(|id| topology.partitions.iter().find(|p| &p.id == id))
        .map_or_else(|| vec!["lb".to_owned()], |p| vec![p.tenant.to_string(), p.table.to_string()]);
    ActionRequest {
        id,
        spec: proposal.spec.clone(),
        origin: Origin::Online,
        policy: Some(proposal.policy.as_str().to_owned()),
        reason: proposal.reason.clone(),
        actor_path,
    }
}

/// The online loop; see the module doc.
pub async fn run(shared: Shared, ops: impl Fn() -> HttpClient + Send, cancel: CancellationToken) {
    let mut state = PlannerState::default();
    let mut submitted = 0u64;
    let boot_ms = chrono::Utc::now().timestamp_millis();
    loop {
        let cfg = shared.config.borrow().clone();
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(cfg.analyzer.interval_ms)) => {}
        }
        if shared.collector.read().expect("collector status lock is never poisoned").stale {
            metrics::counter!("lb_master_analysis_passes_total", "outcome" => "stale").increment(1);
            continue;
        }
        let Some(topology) = shared.topology.read().expect("topology lock is never poisoned").clone() else { continue };
        let client = ops();
        let in_flight = match in_flight(&client).await {
            Ok(actions) => actions,
            Err(error) => {
                warn!(%error, "cannot read in-flight actions; skipping this pass");
                metrics::counter!("lb_master_analysis_passes_total", "outcome" => "no_ops_server").increment(1);
                continue;
            }
        };
        let now = chrono::Utc::now().timestamp_millis();
        let window = Duration::from_millis(cfg.analyzer.window_ms);
        let (table, topo) = (shared.table.clone(), Arc::clone(&topology));
        let planned = tokio::task::spawn_blocking(move || {
            let input =
                planner_input(&table.read().expect("table lock is never poisoned"), &topo, in_flight, window, now);
            (input, now)
        })
        .await;
        let Ok((input, now)) = planned else { continue };
        let plan = plan(&input, &cfg.planner, &mut state, now);
        metrics::counter!("lb_master_analysis_passes_total", "outcome" => "ok").increment(1);
        for proposal in plan.proposals {
            submitted += 1;
            let id: ActionId = match format!("lb-{boot_ms}-{submitted}").parse() {
                Ok(id) => id,
                Err(_) => continue,
            };
            if let Err(error) = shared.store.put(RecordKind::Proposal, id.as_str(), now, &proposal).await {
                warn!(%error, "cannot record proposal");
            }
            metrics::counter!("lb_master_proposals_total", "policy" => proposal.policy.as_str(), "mode" => mode_label(proposal.mode))
                .increment(1);
            if proposal.mode != PolicyMode::Auto {
                continue;
            }
            let request = action_request(&proposal, id.clone(), &topology);
            match client.post::<_, ActionRecord>("/v1/actions", &request).await {
                Ok(record) => {
                    info!(action = %id, kind = request.spec.kind().as_str(), reason = %request.reason, "action submitted");
                    let _ = shared.store.put(RecordKind::Action, id.as_str(), now, &record).await;
                }
                Err(error) => {
                    warn!(action = %id, %error, "action submission failed");
                    let failed = serde_json::json!({"request": request, "state": ActionState::Failed, "error": error.to_string()});
                    let _ = shared.store.put(RecordKind::Action, id.as_str(), now, &failed).await;
                }
            }
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
