//! End to end over real HTTP (issue 9): `up` starts the simulated cluster, one agent per worker,
//! the ops server and the master on loopback; a hotspot starts a few seconds in; the test reads
//! only the master's API (and the ops server's action list) to check that the hotspot was
//! detected, the right action ran and was evaluated effective, and rejections fell back under
//! 1 % of demand within the scenario's budget. One case per hotspot kind: a hot key range, a
//! single hot key, a lost worker. Partitions are small (16 MiB) so moves take a fraction of a
//! second of simulated streaming: the budget measures lb, not the testbed's copy speed.

use std::time::Duration;

use lb_common::clients::{MasterClient, OpsClient};
use lb_common::config::shared::HttpClientConfig;
use lb_common::http::ClientError;
use lb_common::protocol::{
    ActionEntry, ActionKind, ActionOutcome, ActionSpec, ActionState, AnalysisRecord, Evaluation, Health,
    ManualActionRequest, Origin, PartitionsQuery, Policy, PolicyMode, Proposal, RecordsQuery, StoredRecord, Verdict,
};
use lb_launcher::tokens::{DemoToken, DemoTokens};
use lb_launcher::up::{Overrides, UpOptions, up_with};

/// Evaluate soon after an action ends, so a case finishes within its budget: 2 s to settle, a
/// 3 s window after (the master's defaults are 10 s and 10 s).
const FAST_EVALUATION: &str = "[analyzer]\nwindow_ms = 2000\n[evaluation]\nsettle_secs = 2\nwindow_secs = 3\n";

struct Case {
    name: &'static str,
    scenario: &'static str,
    /// The policies that may detect it (a single hot key is isolated by whichever of worker
    /// overload and partition overload engages first) and the action kind that must fix it.
    policies: &'static [&'static str],
    /// Kinds that must never be proposed for it (a split cannot divide a single key).
    never: &'static [ActionKind],
    kind: ActionKind,
    /// From start (the hotspot begins at `onset`) until relief must have held.
    onset: Duration,
    budget: Duration,
    /// Where the first split must put its key (the hot range), if the fix is a split: the
    /// testbed's sketches come from requests recorded through lb-reporter.
    first_split_key_in: Option<(u64, u64)>,
}

const HOT_RANGE: &str = include_str!("../../../configs/scenarios/e2e-hot-range.toml");

const HOT_KEY: &str = r#"
name = "e2e-hot-key"
description = "one key at 12k ops/s from 3 s overloads its worker; a split cannot help"
seed = 2
duration_secs = 3600
[cluster]
workers = 4
worker_ops_per_sec = 20000
worker_bytes_per_sec = 400e6
partition_limit_ops_per_sec = 20000
partition_limit_bytes_per_sec = 200e6
groups = [{ group = "isolated", workers = 1 }]
[[tables]]
tenant = "acme"
table = "users"
partitions = 12
stored_bytes_per_partition = 16777216
[[tables.workloads]]
kind = "uniform"
ops_per_sec = 30000
[[tables.workloads]]
kind = "hot_key"
ops_per_sec = 12000
key = "2a00000000000042"
start_secs = 3
"#;

const WORKER_LOSS: &str = r#"
name = "e2e-worker-loss"
description = "w-0003 lost at 3 s; its partitions fail over to a neighbour, which overloads"
seed = 5
duration_secs = 3600
[cluster]
workers = 5
worker_ops_per_sec = 40000
worker_bytes_per_sec = 400e6
partition_limit_ops_per_sec = 10000
partition_limit_bytes_per_sec = 100e6
[[tables]]
tenant = "acme"
table = "sessions"
partitions = 40
stored_bytes_per_partition = 16777216
[[tables.workloads]]
kind = "uniform"
ops_per_sec = 120000
[[timeline]]
at_secs = 3
event = "worker_lost"
worker = "w-0003"
"#;

/// What the master's API says at one moment.
#[derive(Debug, Default)]
struct Seen {
    detected: bool,
    ran: bool,
    effective: bool,
    demand: f64,
    rejected: f64,
}

/// Every record kept, up to the API's cap.
const ALL: RecordsQuery = RecordsQuery { since_ms: None, limit: Some(1000) };

async fn evaluations(master: &MasterClient) -> Vec<StoredRecord<Evaluation>> {
    master.records::<Evaluation>(&ALL).await.expect("evaluations")
}

async fn look(master: &MasterClient, ops: &OpsClient, case: &Case) -> Seen {
    let mut seen = Seen::default();
    let proposals = master.records::<Proposal>(&ALL).await.expect("proposals");
    seen.detected =
        proposals.iter().any(|r| r.body.spec.kind() == case.kind && case.policies.contains(&r.body.policy.as_str()));
    for r in &proposals {
        let kind = r.body.spec.kind();
        assert!(!case.never.contains(&kind), "{}: a {} was proposed: {:?}", case.name, kind.as_str(), r.body);
    }
    let done = ops.actions(Some(ActionState::Succeeded)).await.expect("actions");
    seen.ran = done.iter().any(|a| {
        a.request.origin == Origin::Online
            && a.request.policy.as_deref().is_some_and(|p| case.policies.contains(&p))
            && a.request.spec.kind() == case.kind
    });
    seen.effective = evaluations(master)
        .await
        .iter()
        .any(|r| r.body.judgement.verdict == Verdict::Effective && r.body.spec.kind() == case.kind);
    let query = PartitionsQuery { window_secs: Some(2), ..PartitionsQuery::default() };
    for p in master.partitions(&query).await.expect("partitions") {
        seen.demand += p.ops_per_sec + p.rejected_per_sec;
        seen.rejected += p.rejected_per_sec;
    }
    seen
}

/// `up` on `scenario` (written to a fresh directory, kept alive by the caller) with `master`
/// appended to the master's generated config, reports and collection every 250 ms.
async fn start(
    name: &str,
    scenario: &str,
    master: String,
    tokens: Option<DemoTokens>,
) -> (tempfile::TempDir, lb_launcher::up::Running) {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join(format!("{name}.toml"));
    std::fs::write(&path, scenario).expect("scenario");
    let options = UpOptions {
        scenario: path,
        data_dir: dir.path().join("data"),
        host: "127.0.0.1".to_owned(),
        interval: Duration::from_millis(250),
    };
    let running = up_with(&options, &Overrides { master, tokens }).await.expect("everything starts");
    (dir, running)
}

async fn run(case: Case) {
    lb_common::telemetry::metrics_handle();
    if std::env::var_os("LB_E2E_TRACE").is_some() {
        lb_common::telemetry::init_tracing(&lb_common::config::shared::LogConfig::default());
    }
    let (_dir, running) = start(case.name, case.scenario, FAST_EVALUATION.to_owned(), None).await;
    let master = MasterClient::new(format!("http://{}", running.master.addr()), &HttpClientConfig::default());
    let ops = OpsClient::new(format!("http://{}", running.ops_server.addr()), &HttpClientConfig::default())
        .with_bearer_token(&running.tokens.operator.token);
    let started = tokio::time::Instant::now();
    let mut peak = 0.0f64;
    // Relief must hold: rejections under 1 % for 3 s in a row (12 looks), after the fix ran.
    let mut clean_looks = 0;
    // When the run of clean looks that ended the wait began: the test's own relief (the break
    // itself waits for the evaluation's verdict too, seconds later).
    let mut clean_since = Duration::ZERO;
    let outcome: Result<(Duration, Seen, f64), (Seen, f64)> = loop {
        let looked_at = started.elapsed();
        let seen = look(&master, &ops, &case).await;
        let share = if seen.demand > 0.0 { seen.rejected / seen.demand } else { 0.0 };
        if started.elapsed() > case.onset {
            peak = peak.max(share);
        }
        clean_looks = if seen.ran && share < 0.01 { clean_looks + 1 } else { 0 };
        if clean_looks == 1 {
            clean_since = looked_at;
        }
        if std::env::var_os("LB_E2E_TRACE").is_some() {
            eprintln!(
                "{}: t={:.1} share {:.2} % detected {} ran {} effective {}",
                case.name,
                started.elapsed().as_secs_f64(),
                share * 100.0,
                seen.detected,
                seen.ran,
                seen.effective
            );
        }
        if seen.detected && seen.effective && clean_looks >= 12 {
            break Ok((started.elapsed(), seen, share));
        }
        if started.elapsed() > case.budget {
            break Err((seen, share));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    if std::env::var_os("LB_E2E_TRACE").is_some() {
        let mut analyses = master.records::<AnalysisRecord>(&ALL).await.expect("analysis records");
        analyses.sort_by_key(|r| r.at_ms);
        for r in analyses {
            let declined: Vec<String> = r.body.declined.iter().map(|d| format!("{}: {}", d.subject, d.why)).collect();
            eprintln!("{}: pass {} proposed {:?} declined {declined:?}", case.name, r.key, r.body.proposed);
        }
    }
    let verdicts: Vec<String> = evaluations(&master)
        .await
        .iter()
        .map(|r| {
            format!("{} {}: {}", r.body.spec.kind().as_str(), r.body.judgement.verdict.as_str(), r.body.judgement.why)
        })
        .collect();
    match &outcome {
        Ok((at, _, share)) => eprintln!(
            "{}: relieved from {:.1} s, evaluated effective by {:.1} s (onset {:?}, peak rejected {:.1} %, now {:.2} %); evaluations: {verdicts:#?}",
            case.name,
            clean_since.as_secs_f64(),
            at.as_secs_f64(),
            case.onset,
            peak * 100.0,
            share * 100.0
        ),
        Err((seen, share)) => {
            let truth = running.testbed.engine().lock().expect("engine").summary();
            let collector = master.collector().await.expect("collector");
            panic!(
                "{}: not done within {:?}: {seen:?}, rejected now {:.2} % (peak {:.1} %); testbed truth: {truth:?}; collector: {collector:?}; evaluations: {verdicts:#?}",
                case.name,
                case.budget,
                share * 100.0,
                peak * 100.0,
            )
        }
    }
    assert!(peak > 0.02, "{}: the hotspot did reject requests (peak {:.1} %)", case.name, peak * 100.0);
    report_stages(&running, &master, &case, started, clean_since).await;
    if let Some((lo, hi)) = case.first_split_key_in {
        let mut proposals = master.records::<Proposal>(&ALL).await.expect("proposals");
        proposals.sort_by_key(|r| r.at_ms);
        let keys: Vec<lb_common::ids::Key> = proposals
            .iter()
            .filter_map(|r| match &r.body.spec {
                ActionSpec::Split { split_key, .. } => Some(*split_key),
                ActionSpec::SplitInto { split_keys, .. } => split_keys.first().copied(),
                _ => None,
            })
            .collect();
        eprintln!("{}: split keys proposed, in order: {keys:?}", case.name);
        let first = keys.first().expect("a split was proposed");
        assert!((lo..=hi).contains(&first.0), "{}: the first split key {first} lies outside the hot range", case.name);
    }
    assert!(running.stop(Duration::from_secs(20)).await, "clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_range_is_split_evaluated_effective_and_relieved() {
    run(Case {
        name: "hot-range",
        scenario: HOT_RANGE,
        policies: &["partition_overload"],
        never: &[],
        kind: ActionKind::Split,
        onset: Duration::from_secs(3),
        // Relieved 6–9 s after the hotspot's start over 5 runs on a quiet 2-core machine, a few
        // seconds more on a loaded one (docs/benchmarks.md, "Where the real-time seconds go"),
        // evaluated ~5 s after.
        budget: Duration::from_secs(40),
        // `e2e-hot-range.toml`'s hot range.
        first_split_key_in: Some((0x4000_0000_0000_0000, 0x43ff_ffff_ffff_ffff)),
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_hot_key_is_isolated_evaluated_effective_and_relieved() {
    run(Case {
        name: "hot-key",
        scenario: HOT_KEY,
        policies: &["worker_overload", "partition_overload"],
        never: &[ActionKind::Split],
        kind: ActionKind::Group,
        onset: Duration::from_secs(3),
        // Relieved 5–7 s after the hotspot's start over 5 quiet runs (see the hot range's).
        budget: Duration::from_secs(40),
        first_split_key_in: None,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_workers_load_is_moved_evaluated_effective_and_relieved() {
    run(Case {
        name: "worker-loss",
        scenario: WORKER_LOSS,
        policies: &["worker_overload"],
        never: &[ActionKind::Split],
        kind: ActionKind::Move,
        onset: Duration::from_secs(3),
        // Relieved 8.4–9.3 s after the loss over 5 quiet runs (six moves off the neighbour, two
        // at a time, each next one planned as soon as the last ended), evaluated ~5 s after;
        // 10–13 s and a 60 s budget while the ops server ran one move per worker at a time.
        budget: Duration::from_secs(40),
        first_split_key_in: None,
    })
    .await;
}

/// Prints where the fixing action's time went, stage by stage (`Stages`), in seconds from the
/// hotspot's start in the testbed (its scenario time `onset`), as one `e2e-stages` JSON line
/// that `scripts/e2e-stages.sh` gathers over runs; every stage up to the master's relief must
/// be there and in order.
async fn report_stages(
    running: &lb_launcher::up::Running,
    master: &MasterClient,
    case: &Case,
    started: tokio::time::Instant,
    relieved_at: Duration,
) {
    let start_ms = {
        let engine = running.testbed.engine().lock().expect("engine");
        engine.now_ms() - engine.elapsed().as_millis() as i64
    };
    let onset_ms = start_ms + case.onset.as_millis() as i64;
    let test_started_ms = chrono::Utc::now().timestamp_millis() - started.elapsed().as_millis() as i64;
    let fix = evaluations(master)
        .await
        .into_iter()
        .filter(|r| {
            r.body.spec.kind() == case.kind
                && r.body.policy.is_some_and(|p| case.policies.contains(&p.as_str()))
                && r.body.judgement.verdict == Verdict::Effective
        })
        .min_by_key(|r| r.body.stages.proposed_ms)
        .expect("the fix was evaluated effective");
    let stages = fix.body.stages;
    eprintln!("{}: the fix {}'s stages: {}", case.name, fix.body.action_id, stages.describe());
    let named = stages.named();
    for (name, at) in &named[..named.len() - 1] {
        assert!(at.is_some(), "{}: the fix has no {name} stage: {stages:?}", case.name);
    }
    let present: Vec<(&str, i64)> = named.iter().filter_map(|&(n, t)| t.map(|t| (n, t))).collect();
    assert!(present.windows(2).all(|w| w[0].1 <= w[1].1), "{}: stages out of order: {present:?}", case.name);
    let mut line = serde_json::Map::new();
    line.insert("case".into(), case.name.into());
    for (name, at) in named {
        if let Some(at) = at {
            line.insert(name.into(), serde_json::json!((at - onset_ms) as f64 / 1000.0));
        }
    }
    // The test's own relief: its first look of the 3 s it held rejections under 1 %.
    let seen_ms = test_started_ms + relieved_at.as_millis() as i64;
    line.insert("test_relief".into(), serde_json::json!((seen_ms - onset_ms) as f64 / 1000.0));
    eprintln!("e2e-stages {}", serde_json::Value::Object(line));
}

const SRE_TOKEN: &str = "e2e-sre-operator-token-01";
const VIEWER_TOKEN: &str = "e2e-dashboard-viewer-token";

/// The demo's people with known tokens: `sre` (operator) and `dash` (viewer).
fn people() -> DemoTokens {
    let person = |name: &str, token: &str| DemoToken { name: name.to_owned(), token: token.to_owned() };
    DemoTokens::with_people(person("sre", SRE_TOKEN), person("dash", VIEWER_TOKEN)).expect("tokens")
}

/// Dry run end to end: the master proposes but does not act, keeps one pending proposal per
/// action (not one per tick), refuses approvals without the operator role, submits an approved
/// one exactly once; then an edit of the live config file switches the policy to `auto` and the
/// next ticks act on their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_waits_for_an_operator_and_a_policy_edit_applies_on_the_next_tick() {
    lb_common::telemetry::metrics_handle();
    let master_extra = "[planner.partition_overload]\nmode = \"dry_run\"\n[planner.worker_overload]\nmode = \"off\"\n\
                        [planner.imbalance]\nmode = \"off\"\n"
        .to_owned();
    // A second hot range from 20 s gives auto mode something to act on after the edit: the
    // approved split may well relieve the first range for good (its pieces sized at the whole
    // demand), leaving nothing hot for the second online action this test waits for.
    let scenario = format!(
        "{HOT_RANGE}\n[[tables.workloads]]\nkind = \"hot_range\"\nops_per_sec = 22000\n\
         start_key = \"c000000000000000\"\nend_key = \"c3ffffffffffffff\"\nstart_secs = 20\nramp_secs = 0\n"
    );
    let (_dir, running) = start("hot-range", &scenario, master_extra, Some(people())).await;
    let base = format!("http://{}", running.master.addr());
    let master = MasterClient::new(&base, &HttpClientConfig::default());
    let ops = OpsClient::new(format!("http://{}", running.ops_server.addr()), &HttpClientConfig::default())
        .with_bearer_token(&running.tokens.operator.token);
    let online_actions = || async {
        let mut n = 0;
        for state in [ActionState::Queued, ActionState::Running, ActionState::Succeeded, ActionState::Failed] {
            let actions = ops.actions(Some(state)).await.expect("actions");
            n += actions.iter().filter(|a| a.request.origin == Origin::Online).count();
        }
        n
    };

    let started = tokio::time::Instant::now();
    let pending = loop {
        let p = master.pending().await.expect("pending");
        if !p.is_empty() {
            break p;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "no dry-run proposal: {p:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let before = master.records::<Proposal>(&ALL).await.expect("proposals").len();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = master.records::<Proposal>(&ALL).await.expect("proposals").len();
    assert!(after <= before + 2, "dry-run proposals are kept once, not recorded every tick ({before} -> {after})");
    assert_eq!(online_actions().await, 0, "dry run acts on nothing by itself");
    // Each pass's decisions are on record: what it proposed (in dry run) and the counters.
    let analyses = master.records::<AnalysisRecord>(&ALL).await.expect("analysis records");
    assert!(
        analyses
            .iter()
            .any(|r| r.body.proposed.iter().any(|(_, mode, _)| *mode == PolicyMode::DryRun)
                && r.body.stats.partitions > 0),
        "an analysis record holds the dry-run proposal: {analyses:?}"
    );
    assert!(analyses.len() < 40, "analysis records are written on change, not every tick: {}", analyses.len());
    // The pass snapshot the API serves holds the same pending proposal, and says who may act.
    let pass = master.pass().await.expect("pass snapshot");
    assert!(pass.pass > 0, "{pass:?}");
    assert!(pass.leadership.as_ref().is_some_and(|l| l.leader), "{pass:?}");
    assert!(pass.pending.iter().any(|x| x.id == pending[0].id), "{pass:?}");
    assert!(pass.stats.partitions > 0, "{pass:?}");

    let id = pending[0].id.clone();
    let status = |e: ClientError| match e {
        ClientError::Status { status, .. } => status.as_u16(),
        other => panic!("unexpected error {other}"),
    };
    let anonymous = master.approve(&id).await.expect_err("no token");
    assert_eq!(status(anonymous), 401);
    let viewer = MasterClient::new(&base, &HttpClientConfig::default()).with_bearer_token(VIEWER_TOKEN);
    assert_eq!(status(viewer.approve(&id).await.expect_err("viewer")), 403);
    let sre = MasterClient::new(&base, &HttpClientConfig::default()).with_bearer_token(SRE_TOKEN);
    let record = sre.approve(&id).await.expect("the operator approves");
    assert!(record.request.reason.contains("approved by sre"), "{}", record.request.reason);
    assert_eq!(record.request.id, id);
    assert_eq!(status(sre.approve(&id).await.expect_err("twice")), 404);
    let started = tokio::time::Instant::now();
    loop {
        let done = ops.actions(Some(ActionState::Succeeded)).await.expect("actions");
        if done.iter().any(|a| a.request.id == id) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "the approved action did not run");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(online_actions().await, 1, "only the approved action ran");

    // Switch the policy to auto in the live config file (an editor's rename-over save).
    let text = std::fs::read_to_string(&running.master_config_path).expect("config");
    let edited = text.replacen(
        "[planner.partition_overload]\nmode = \"dry_run\"",
        "[planner.partition_overload]\nmode = \"auto\"",
        1,
    );
    assert_ne!(text, edited);
    let tmp = running.master_config_path.with_extension("toml.swp");
    std::fs::write(&tmp, edited).expect("write");
    std::fs::rename(&tmp, &running.master_config_path).expect("rename over");
    let started = tokio::time::Instant::now();
    loop {
        let status = master.config_status().await.expect("status");
        if status.version == 2 {
            assert!(status.changed_fields.iter().any(|f| f == "planner.partition_overload.mode"), "{status:?}");
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "the edit was not applied: {status:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let started = tokio::time::Instant::now();
    while online_actions().await < 2 {
        if started.elapsed() > Duration::from_secs(30) {
            let actions = ops.actions(None).await.expect("actions");
            let pass = master.pass().await.expect("pass");
            let proposals = master.records::<Proposal>(&ALL).await.expect("proposals");
            panic!(
                "auto mode did not act after the reload: actions {actions:#?}\npass {pass:#?}\nproposals {proposals:#?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(running.stop(Duration::from_secs(20)).await, "clean stop");
}

/// The SRE's other writes over real HTTP: a rejected dry-run proposal is not offered again;
/// `GET /api/v1/policy` shows each policy's live mode; an action by hand is refused with the
/// field when it does not fit, only predicted in a dry run, and otherwise submitted through the
/// master as `manual`, run by the ops server and evaluated like the analyzers' own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_proposal_stays_away_and_a_manual_action_is_tracked_and_evaluated() {
    lb_common::telemetry::metrics_handle();
    let master_extra = format!(
        "{FAST_EVALUATION}[planner.partition_overload]\nmode = \"dry_run\"\n[planner.worker_overload]\nmode = \"off\"\n\
         [planner.imbalance]\nmode = \"off\"\n"
    );
    let (_dir, running) = start("hot-range", HOT_RANGE, master_extra, Some(people())).await;
    let base = format!("http://{}", running.master.addr());
    let anonymous = MasterClient::new(&base, &HttpClientConfig::default());
    let sre = MasterClient::new(&base, &HttpClientConfig::default()).with_bearer_token(SRE_TOKEN);
    let ops = OpsClient::new(format!("http://{}", running.ops_server.addr()), &HttpClientConfig::default())
        .with_bearer_token(&running.tokens.operator.token);
    let status = |e: ClientError| match e {
        ClientError::Status { status, body, .. } => (status.as_u16(), body.error),
        other => panic!("unexpected error {other}"),
    };

    let policy = sre.policy().await.expect("policy");
    assert_eq!(policy.modes.get("partition_overload"), Some(&PolicyMode::DryRun), "{policy:?}");
    assert_eq!(policy.modes.get("imbalance"), Some(&PolicyMode::Off), "{policy:?}");
    assert!(policy.config.version >= 1 && policy.config.path.ends_with("master.toml"), "{policy:?}");

    let started = tokio::time::Instant::now();
    let pending = loop {
        let p = sre.pending().await.expect("pending");
        if let Some(first) = p.into_iter().next() {
            break first;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "no dry-run proposal");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(status(anonymous.reject(&pending.id).await.expect_err("no token")).0, 401);
    let rejected = sre.reject(&pending.id).await.expect("the operator rejects");
    assert_eq!(rejected.id, pending.id);
    assert_eq!(status(sre.reject(&pending.id).await.expect_err("twice")).0, 404);
    let target = pending.proposal.spec.partitions();
    for _ in 0..12 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let again = sre.pending().await.expect("pending");
        assert!(
            !again
                .iter()
                .any(|p| p.proposal.spec.partitions() == target
                    && p.proposal.spec.kind() == pending.proposal.spec.kind()),
            "a rejected proposal is not offered again: {again:?}"
        );
    }

    // By hand: a partition away from the hot range, moved to another worker.
    let topology = sre.topology().await.expect("topology");
    let hot = lb_common::ids::Key(0x4000_0000_0000_0000);
    let cold = topology.partitions.iter().find(|p| !p.range.contains(hot)).expect("a partition off the hot range");
    let outside = ManualActionRequest {
        spec: ActionSpec::Split { partition: cold.id.clone(), split_key: cold.range.start },
        reason: "drill".to_owned(),
        dry_run: false,
    };
    let (code, message) = status(sre.submit_manual(&outside).await.expect_err("a split at the range start"));
    assert_eq!(code, 422, "{message}");
    assert!(message.contains("spec.split_key"), "the refusal names the field: {message}");
    let owner = cold.owner.clone();
    let to = topology.workers.iter().find(|w| w.id != owner && w.health == Health::Healthy).expect("another worker");
    let mut by_hand = ManualActionRequest {
        spec: ActionSpec::Move { partition: cold.id.clone(), to_worker: to.id.clone(), max_bytes_per_sec: None },
        reason: "drill".to_owned(),
        dry_run: true,
    };
    let predicted = sre.submit_manual(&by_hand).await.expect("a dry run");
    assert!(predicted.action.is_none(), "a dry run submits nothing");
    assert!(
        predicted.proposal.predicted.dest_after_ratio > predicted.proposal.predicted.dest_before_ratio,
        "{predicted:?}"
    );
    by_hand.dry_run = false;
    assert_eq!(status(anonymous.submit_manual(&by_hand).await.expect_err("no token")).0, 401);
    let submitted = sre.submit_manual(&by_hand).await.expect("submitted through the master");
    let record = submitted.action.expect("the ops server's record");
    assert_eq!((record.request.origin, record.request.policy.as_deref()), (Origin::Manual, None));
    assert_eq!(record.request.actor_path, ["manual", "sre"]);
    let id = record.request.id.clone();
    let started = tokio::time::Instant::now();
    loop {
        let evaluated = sre.record::<Evaluation>(id.as_str()).await;
        if let Ok(e) = evaluated {
            assert_eq!(e.body.spec, by_hand.spec, "{e:?}");
            assert_eq!(e.body.policy, Some(Policy::Manual), "{e:?}");
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(40), "the manual move was not evaluated");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let done = ops.actions(Some(ActionState::Succeeded)).await.expect("actions");
    assert!(done.iter().any(|a| a.request.id == id), "the ops server ran it");
    let entry = sre.record::<ActionEntry>(id.as_str()).await.expect("its action record");
    assert_eq!(entry.body.outcome, ActionOutcome::Applied, "{entry:?}");
    assert!(running.stop(Duration::from_secs(20)).await, "clean stop");
}
