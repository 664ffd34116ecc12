//! Load that vanishes or is not collected yet is not relief and not zero (issue 29, items 3
//! and 4), on the same real 3-node cluster as [`crate::valkey_e2e`]:
//!
//! - the clients of the first hot slot lb moves stop right after the move (as when they die
//!   instead of following `MOVED`): its evaluation must be `inconclusive` because the demand
//!   fell, never `effective`;
//! - one node's agent stops before the hot phase: the master must show that node `stale` (not
//!   0 ops/s, and out of the spread figures) and must not move load onto it while it is
//!   blind to it.

use std::time::{Duration, Instant};

use lb_common::clients::{MasterClient, OpsClient};
use lb_common::config::shared::HttpClientConfig;
use lb_common::protocol::{
    ActionKind, ActionRecord, ActionSpec, ActionState, Evaluation, OverviewQuery, RecordsQuery, Verdict, WindowQuery,
};
use lb_launcher::up::Overrides;
use lb_launcher::valkey_up::{ValkeyUpOptions, up_valkey};

/// Evaluation soon after an action ends: 2 s to settle, then a 5 s window.
const FAST_EVALUATION: &str = "[evaluation]\nsettle_secs = 2\nwindow_secs = 5\n";
/// Time for the hotspot to form and lb to move a hot slot on a busy 2-core machine.
const MOVE_BUDGET: Duration = Duration::from_secs(120);
/// Time for the evaluation (settle + window after the move ends) to be recorded.
const EVALUATION_BUDGET: Duration = Duration::from_secs(60);
/// Time for a stopped agent's node to read stale (the master's `stale_after_ms` is 5 s here).
const STALE_BUDGET: Duration = Duration::from_secs(30);
const ALL: RecordsQuery = RecordsQuery { since_ms: None, limit: Some(1000) };

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_slot_whose_clients_stop_is_judged_inconclusive_not_effective() {
    let (_alone, _dir, options) = prepare(Duration::from_secs(3)).await;
    let hot: Vec<String> = options.load.as_ref().expect("load").hot_slots.iter().map(slot_id).collect();
    let overrides = Overrides { master: FAST_EVALUATION.to_owned(), tokens: None };
    let running = up_valkey(&options, &overrides).await.expect("everything starts");
    let master = MasterClient::new(format!("http://{}", running.master.addr()), &HttpClientConfig::default());
    let ops = OpsClient::new(format!("http://{}", running.ops_server.addr()), &HttpClientConfig::default())
        .with_bearer_token(&running.tokens.operator.token);

    let started = Instant::now();
    let (moved, slot) = loop {
        let done = ops.actions(Some(ActionState::Succeeded)).await.unwrap_or_default();
        let first = done.iter().find_map(|a| match &a.request.spec {
            ActionSpec::Move { partition, .. } if hot.iter().any(|h| h == partition.as_str()) => {
                Some((a.clone(), partition.clone()))
            }
            _ => None,
        });
        if let Some(found) = first {
            break found;
        }
        assert!(started.elapsed() < MOVE_BUDGET, "no hot slot was moved: {done:#?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let slot_number = lb_valkey::naming::slot_of_partition(&slot).expect("a slot partition");
    running.load.as_ref().expect("load").silence(slot_number);
    eprintln!("{} moved ({:?}); its clients stop now", slot, moved.request.spec);

    let verdict = evaluation_of(&master, &moved).await;
    eprintln!("{}: {:?}, {}", moved.request.id, verdict.judgement.verdict, verdict.judgement.why);
    assert_eq!(verdict.judgement.verdict, Verdict::Inconclusive, "{verdict:#?}");
    assert!(verdict.judgement.why.contains("demand fell"), "the reason says the demand fell: {verdict:#?}");
    assert!(running.stop(Duration::from_secs(20)).await, "clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_agent_stopped_reads_stale_not_zero_and_takes_no_load() {
    // The hot phase starts once the node is blind: after its agent stopped and it read stale.
    let (_alone, _dir, options) = prepare(Duration::from_secs(30)).await;
    let mut running = up_valkey(&options, &Overrides::default()).await.expect("everything starts");
    let master = MasterClient::new(format!("http://{}", running.master.addr()), &HttpClientConfig::default());
    let ops = OpsClient::new(format!("http://{}", running.ops_server.addr()), &HttpClientConfig::default())
        .with_bearer_token(&running.tokens.operator.token);
    let onset = running.load.as_ref().expect("load").onset_at();

    // Every node collected first, so the blind one is known to have reported before.
    let started = Instant::now();
    loop {
        let seen = master.workers(&WindowQuery::default()).await.unwrap_or_default();
        if seen.len() == 3 && seen.iter().all(|w| w.covered_secs > 0.0) {
            break;
        }
        assert!(started.elapsed() < STALE_BUDGET, "not every node was collected: {seen:#?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (blind, agent) = running.agents.remove(1);
    assert!(agent.stop(Duration::from_secs(10)).await, "the agent stops");

    let started = Instant::now();
    let overview = loop {
        let overview = master.overview(&OverviewQuery::default()).await.expect("overview");
        if overview.workers.iter().any(|w| w.worker == blind && w.stale) {
            break overview;
        }
        assert!(started.elapsed() < STALE_BUDGET, "{blind} never read stale: {overview:#?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(Instant::now() < onset, "the node read stale before the hot phase (raise the onset)");
    let collector = master.collector().await.expect("collector");
    assert_eq!(overview.stale_workers, 1, "{overview:#?}\n{collector:#?}");
    let fresh: Vec<f64> = overview.workers.iter().filter(|w| !w.stale).map(|w| w.value).collect();
    assert_eq!(fresh.len(), 2, "{overview:#?}");
    let mean = fresh.iter().sum::<f64>() / 2.0;
    assert!((overview.mean - mean).abs() <= 1e-6 * mean.max(1.0), "the mean is the fresh nodes': {overview:#?}");
    let status = collector.agents.get(&blind).expect("the blind node's agent is listed");
    assert!(status.last_error.is_some(), "the collector says why it has nothing: {collector:#?}");

    // The hot phase: lb moves load off node 0, to the node it sees, never to the blind one.
    let started = Instant::now();
    let done = loop {
        let done = ops.actions(Some(ActionState::Succeeded)).await.unwrap_or_default();
        if done.iter().any(|a| a.request.spec.kind() == ActionKind::Move) {
            break done;
        }
        assert!(started.elapsed() < MOVE_BUDGET, "nothing was moved off the hot node");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let pending = ops.actions(Some(ActionState::Queued)).await.unwrap_or_default();
    let onto_blind: Vec<&ActionRecord> = done
        .iter()
        .chain(&pending)
        .filter(|a| matches!(&a.request.spec, ActionSpec::Move { to_worker, .. } if *to_worker == blind))
        .collect();
    assert!(onto_blind.is_empty(), "nothing moves onto a node whose load is unknown: {onto_blind:#?}");
    assert!(running.stop(Duration::from_secs(20)).await, "clean stop");
}

/// This file's turn on the machine, telemetry, and the launcher's 3-node options (node
/// capacity set, as in [`crate::valkey_e2e`]) with the hot phase from `onset`.
async fn prepare(onset: Duration) -> (tokio::sync::MutexGuard<'static, ()>, tempfile::TempDir, ValkeyUpOptions) {
    let turn = crate::valkey_e2e::ONE_CLUSTER_AT_A_TIME.lock().await;
    lb_common::telemetry::metrics_handle();
    let dir = tempfile::tempdir().expect("dir");
    let mut options = ValkeyUpOptions::ops_capacity(3, dir.path().join("data"));
    options.load.as_mut().expect("the launcher drives load").onset = onset;
    (turn, dir, options)
}

/// The evaluation of `action`, waited for.
async fn evaluation_of(master: &MasterClient, action: &ActionRecord) -> Evaluation {
    let started = Instant::now();
    loop {
        let evaluations = master.records::<Evaluation>(&ALL).await.unwrap_or_default();
        if let Some(e) = evaluations.into_iter().find(|r| r.body.action_id == action.request.id.as_str()) {
            return e.body;
        }
        assert!(started.elapsed() < EVALUATION_BUDGET, "{} was not evaluated", action.request.id);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn slot_id(slot: &lb_valkey::Slot) -> String {
    format!("slot-{:05}", slot.get())
}
