//! `lbctl` against a running system: `lb_launcher::up::up_with` starts the simulated cluster,
//! one agent per worker, the ops server and the master in this process on loopback, and every
//! check runs the binary over real HTTP, reading its output and exit status. Two systems, each
//! shared by the checks of one test: a hot range in `auto` (halt and resume, the read
//! commands, failure paths, manual actions, `explain` of the split that relieved it) and the
//! same hot range in `dry_run` (proposals, reject, approve).
//!
//! Needs the master's `POST /api/v1/actions`, `POST /api/v1/proposals/{id}/reject` and
//! `GET /api/v1/policy`.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use lb_common::clients::{MasterClient, OpsClient};
use lb_common::config::shared::HttpClientConfig;
use lb_common::ids::Key;
use lb_common::protocol::{
    ActionRecord, ActionSpec, ActionState, ActionsResponse, Evaluation, Heatmap, ManualActionReply, Origin, Pending,
    PendingResponse, PolicyMode, PolicyStatus, RecordsQuery, TopN, Verdict,
};
use lb_launcher::tokens::{DemoToken, DemoTokens};
use lb_launcher::up::{Overrides, Running, UpOptions, up_with};
use lbctl::cmd::agents::AgentsReport;
use lbctl::cmd::explain::Explanation;
use lbctl::cmd::history::HistoryReport;
use lbctl::cmd::status::Status;

use crate::support::{command, eventually, lbctl};

/// A key range at 3x its partition's limit from 3 s (the launcher's e2e hot range).
const HOT_RANGE: &str = include_str!("../../../configs/scenarios/e2e-hot-range.toml");

const SRE_TOKEN: &str = "lbctl-sre-operator-token-01";
const VIEWER_TOKEN: &str = "lbctl-dashboard-viewer-token";

/// `lb up` runs with auth on: its people get known tokens, `sre` (operator) and `dash` (viewer).
fn people() -> DemoTokens {
    let person = |name: &str, token: &str| DemoToken { name: name.to_owned(), token: token.to_owned() };
    DemoTokens::with_people(person("sre", SRE_TOKEN), person("dash", VIEWER_TOKEN)).expect("tokens")
}

/// The running system and the flags that point lbctl at it.
struct System {
    running: Running,
    _dir: tempfile::TempDir,
    master_url: String,
    ops_url: String,
    master: MasterClient,
    ops: OpsClient,
}

impl System {
    async fn start(master_extra: String) -> System {
        lb_common::telemetry::metrics_handle();
        let dir = tempfile::tempdir().expect("dir");
        let options = UpOptions::loopback(dir.path(), HOT_RANGE).expect("scenario");
        let overrides = Overrides { master: master_extra, tokens: Some(people()) };
        let running = up_with(&options, &overrides).await.expect("everything starts");
        let master_url = format!("http://{}", running.master.addr());
        let ops_url = format!("http://{}", running.ops_server.addr());
        let master = MasterClient::new(&master_url, &HttpClientConfig::default());
        let ops = OpsClient::new(&ops_url, &HttpClientConfig::default()).with_bearer_token(VIEWER_TOKEN);
        System { running, _dir: dir, master_url, ops_url, master, ops }
    }

    /// lbctl pointed at this system, with `args` after the addresses and the viewer's token
    /// unless `args` name one (the ops server answers no one without a token).
    async fn lbctl(&self, args: &[&str]) -> crate::support::Run {
        if args.contains(&"--token") {
            return self.anonymous(args).await;
        }
        let mut all = vec!["--token", VIEWER_TOKEN];
        all.extend_from_slice(args);
        self.anonymous(&all).await
    }

    /// lbctl pointed at this system with no token but those in `args`.
    async fn anonymous(&self, args: &[&str]) -> crate::support::Run {
        let mut all = vec!["--master", self.master_url.as_str(), "--ops", self.ops_url.as_str()];
        all.extend_from_slice(args);
        let run = lbctl(&all).await;
        // LBCTL_TEST_SHOW=1 prints what every run printed, to see the output on live data.
        if std::env::var_os("LBCTL_TEST_SHOW").is_some() {
            eprintln!("$ lbctl {}\n{}{}(exit {})\n", args.join(" "), run.stdout, run.stderr, run.code);
        }
        run
    }

    /// The same with the operator's token.
    async fn sre(&self, args: &[&str]) -> crate::support::Run {
        let mut all = vec!["--token", SRE_TOKEN];
        all.extend_from_slice(args);
        self.lbctl(&all).await
    }

    async fn actions(&self) -> Vec<ActionRecord> {
        self.ops.actions(None).await.expect("ops server actions")
    }

    async fn stop(self) {
        assert!(self.running.stop(Duration::from_secs(20)).await, "clean stop");
    }
}

/// Every record kept, up to the API's cap.
const ALL: RecordsQuery = RecordsQuery { since_ms: None, limit: Some(1000) };

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_range_run_seen_and_steered_through_lbctl() {
    let started = tokio::time::Instant::now();
    // Evaluate soon after an action ends (2 s to settle, 3 s windows), as the launcher's e2e does.
    let fast = "[analyzer]\nwindow_ms = 2000\n[evaluation]\nsettle_secs = 2\nwindow_secs = 3\n";
    let sys = System::start(fast.to_owned()).await;

    // The event stream: a line per pass with --passes, JSON lines with -o json (hello first).
    let out = sys.lbctl(&["watch", "--passes", "-n", "3"]).await;
    let text = out.ok();
    assert_eq!(text.lines().filter(|l| l.contains(" pass ") && l.contains("hot partitions")).count(), 3, "{text}");
    let out = sys.lbctl(&["watch", "--passes", "-n", "2", "-o", "json"]).await;
    let events: Vec<serde_json::Value> =
        out.ok().lines().map(|l| serde_json::from_str(l).expect("one JSON value per line")).collect();
    assert_eq!(events[0]["event"], "hello", "{events:?}");
    assert_eq!(events[1]["event"], "pass", "{events:?}");
    assert!(events[1]["data"]["stats"]["workers"].as_u64() == Some(4), "{events:?}");

    // Halt before the hotspot starts: what the master submits waits in the queue.
    let out = sys.sre(&["halt", "--reason", "lbctl test: hold everything"]).await;
    assert!(
        out.ok().contains("executor halted") && out.stdout.contains("lbctl test: hold everything"),
        "{}",
        out.stdout
    );
    let queued = eventually(Duration::from_secs(30), "the master submits an action", || async {
        let a = sys.actions().await;
        a.iter().any(|a| a.request.origin == Origin::Online).then_some(a)
    })
    .await;
    assert!(queued.iter().all(|a| a.state == ActionState::Queued), "halted: nothing starts: {queued:?}");
    // Two more passes and more submissions: still nothing starts.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let held = sys.actions().await;
    assert!(held.iter().all(|a| a.state == ActionState::Queued), "halted: nothing starts: {held:?}");
    let out = sys.lbctl(&["status"]).await;
    let text = out.ok();
    // Auth is on in `lb up`: the ops server itself knows who halted it.
    assert!(text.contains("executor HALTED (api switch by sre: lbctl test: hold everything)"), "{text}");
    assert!(text.contains("queued") && text.contains("hot partitions: "), "{text}");
    let status: Status = sys.lbctl(&["status", "-o", "json"]).await.json();
    assert!(status.halt.halted && !status.in_flight.is_empty(), "{:?}", status.halt);
    assert_eq!(status.overview.workers.len(), 4);
    assert_eq!(status.policy.modes.get("partition_overload"), Some(&PolicyMode::Auto));
    assert!(
        status.hot_partitions.iter().any(|p| p.id.as_str() == "acme.orders.p000002"),
        "{:?}",
        status.hot_partitions
    );

    // Resume: the queue drains.
    let out = sys.sre(&["resume"]).await;
    assert!(out.ok().contains("executor running"), "{}", out.stdout);
    let held_ids: Vec<_> = held.iter().map(|a| a.request.id.clone()).collect();
    eventually(Duration::from_secs(30), "the held actions run after resume", || async {
        let a = sys.actions().await;
        a.iter().filter(|a| held_ids.contains(&a.request.id)).all(|a| a.state.is_terminal()).then_some(())
    })
    .await;

    // Failure paths, each one line on stderr and exit 1 naming the status.
    let out = sys.lbctl(&["explain", "no-such-thing-42"]).await;
    let line = out.fails(1);
    assert!(
        line.contains("master at ") && line.contains("refused: 404 not_found") && line.contains("no-such-thing-42"),
        "{line}"
    );
    let out = sys.sre(&["approve", "no-such-proposal"]).await;
    assert!(out.fails(1).contains("refused: 404"), "{}", out.stderr);
    let topology = sys.master.topology().await.expect("topology");
    let cold = topology.partitions.iter().min_by_key(|p| p.range.start).expect("a partition").clone();
    let mid = Key(cold.range.start.0 + (cold.range.end.0 - cold.range.start.0) / 2).to_string();
    let outside = Key(cold.range.end.0 + 1).to_string();
    let out = sys.anonymous(&["split", cold.id.as_str(), "--at", &mid]).await;
    assert!(out.fails(1).contains("refused: 401 unauthorized"), "no token: {}", out.stderr);
    let out = sys.lbctl(&["--token", "not-a-configured-token", "split", cold.id.as_str(), "--at", &mid]).await;
    assert!(out.fails(1).contains("refused: 401 unauthorized"), "unknown token: {}", out.stderr);
    let out = sys.lbctl(&["--token", VIEWER_TOKEN, "split", cold.id.as_str(), "--at", &mid]).await;
    let line = out.fails(1);
    assert!(
        line.contains(&format!("master at {}/api/v1/actions refused: 403 forbidden: dash (viewer)", sys.master_url)),
        "{line}"
    );
    let out = sys.sre(&["split", cold.id.as_str(), "--at", &outside]).await;
    let line = out.fails(1);
    assert!(line.contains("refused: 422") && line.contains("split_key"), "a key outside the range: {line}");

    // A manual merge lands on the owner `--to` names (the testbed places merges), one of its
    // two sides'; a worker owning neither is refused naming the field. Dry runs: nothing runs.
    let mut sorted = topology.partitions.clone();
    sorted.sort_by(|a, b| (&a.tenant, &a.table, a.range.start).cmp(&(&b.tenant, &b.table, b.range.start)));
    let pairs: Vec<_> = sorted
        .windows(2)
        .filter(|w| {
            (&w[0].tenant, &w[0].table) == (&w[1].tenant, &w[1].table)
                && w[0].range.end.0.checked_add(1) == Some(w[1].range.start.0)
                && w[0].owner != w[1].owner
        })
        .map(|w| (w[0].clone(), w[1].clone()))
        .collect();
    // lb's planner could act on a partition between any two commands: then the next one.
    let busy = |run: &crate::support::Run| run.code != 0 && run.stderr.contains("has an action in flight");
    let mut merged = false;
    for (l, r) in pairs.iter().take(6) {
        let out = sys
            .sre(&["merge", l.id.as_str(), r.id.as_str(), "--to", r.owner.as_str(), "--dry-run", "-o", "json"])
            .await;
        if busy(&out) {
            continue;
        }
        let reply: ManualActionReply = out.json();
        assert!(reply.action.is_none(), "{reply:?}");
        assert_eq!(
            reply.proposal.spec,
            ActionSpec::Merge { left: l.id.clone(), right: r.id.clone(), to_worker: Some(r.owner.clone()) }
        );
        assert!(reply.proposal.predicted.dest_before_ratio.is_some(), "{:?}", reply.proposal.predicted);
        let third = topology.workers.iter().find(|w| w.id != l.owner && w.id != r.owner).expect("a third worker");
        let out = sys.sre(&["merge", l.id.as_str(), r.id.as_str(), "--to", third.id.as_str(), "--dry-run"]).await;
        if busy(&out) {
            continue;
        }
        let line = out.fails(1);
        assert!(
            line.contains("refused: 422") && line.contains("spec.to_worker") && line.contains("owns neither"),
            "{line}"
        );
        merged = true;
        break;
    }
    assert!(merged, "one of {} cross-worker neighbour pairs had no action in flight", pairs.len());

    let before = sys.actions().await.len();

    // `actions --follow` tails a real manual split from queued to succeeded; Ctrl-C ends it.
    let mut follow = command(
        &["--master", &sys.master_url, "--ops", &sys.ops_url, "actions", "--follow", "-o", "json"],
        &[("LB_TOKEN", VIEWER_TOKEN)],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("lbctl runs");
    let (tx, rx) = mpsc::channel::<String>();
    let stdout = follow.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    // The coldest partition, unless lb has just started an action on it itself (its planner
    // keeps running in auto: an imbalance move can take a cold partition): then the next one.
    let mut by_start = topology.partitions.clone();
    by_start.sort_by_key(|p| p.range.start);
    let mut submitted = None;
    for p in by_start.iter().take(6) {
        let at = Key(p.range.start.0 + (p.range.end.0 - p.range.start.0) / 2).to_string();
        // A manual split in dry run predicts and submits nothing.
        let out = sys.sre(&["split", p.id.as_str(), "--at", &at, "--dry-run"]).await;
        if busy(&out) {
            continue;
        }
        assert!(out.ok().contains("dry run:") && out.stdout.contains("predicted"), "{}", out.stdout);
        let out = sys.sre(&["split", p.id.as_str(), "--at", &at, "--dry-run", "-o", "json"]).await;
        if busy(&out) {
            continue;
        }
        let reply: ManualActionReply = out.json();
        assert!(reply.action.is_none() && reply.proposal.origin == Origin::Manual, "{reply:?}");
        let run =
            sys.sre(&["split", p.id.as_str(), "--at", &at, "--reason", "lbctl test: manual split", "-o", "json"]).await;
        if busy(&run) {
            continue;
        }
        submitted = Some((p.clone(), run.json::<ManualActionReply>()));
        break;
    }
    let (cold, reply) = submitted.expect("one of the six coldest partitions had no action in flight");
    let manual = reply.action.expect("submitted").request.id;
    assert!(sys.actions().await.len() > before, "the manual split was submitted");
    let mut states = Vec::new();
    let waited = tokio::time::Instant::now();
    while !states.contains(&ActionState::Succeeded) {
        assert!(waited.elapsed() < Duration::from_secs(30), "follow never showed {manual} succeed: {states:?}");
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(100)) {
            let record: ActionRecord = serde_json::from_str(&line).expect("one ActionRecord per line");
            if record.request.id == manual {
                states.push(record.state);
            }
        }
    }
    // Each line is a change: the states seen follow the life cycle, without repeats.
    let order = [ActionState::Queued, ActionState::Running, ActionState::Succeeded];
    let ranks: Vec<usize> = states.iter().map(|s| order.iter().position(|o| o == s).expect("no failure")).collect();
    assert!(ranks.windows(2).all(|w| w[0] < w[1]), "follow printed each change once, in order: {states:?}");
    let stopped = std::process::Command::new("kill").args(["-INT", &follow.id().to_string()]).status().expect("kill");
    assert!(stopped.success());
    let status = tokio::task::spawn_blocking(move || follow.wait()).await.expect("join").expect("wait");
    assert_eq!(status.code(), Some(0), "Ctrl-C ends --follow cleanly");
    let out = sys.lbctl(&["actions", "--policy", "manual"]).await;
    assert!(out.ok().contains(manual.as_str()) && out.stdout.contains("succeeded"), "{}", out.stdout);

    // Read commands, as text and as the typed reply.
    let out = sys.lbctl(&["top", "--metric", "ops", "-n", "3"]).await;
    assert!(out.ok().starts_with("top 3 partitions by ops over 10 s"), "{}", out.stdout);
    let top: TopN = sys.lbctl(&["top", "--by", "worker", "-o", "json"]).await.json();
    assert_eq!(top.entries.len(), 4, "{top:?}");
    let out = sys.lbctl(&["heatmap", "acme/orders", "--since", "1m", "--step", "5s", "--buckets", "32"]).await;
    assert!(out.ok().contains('│') && out.stdout.contains('█') && !out.stdout.contains('\x1b'), "{}", out.stdout);
    let heatmap: Heatmap = sys.lbctl(&["heatmap", "acme/orders", "--since", "1m", "-o", "json"]).await.json();
    assert_eq!(heatmap.key_buckets.len(), 64);
    let out = sys.lbctl(&["history", "acme.orders.p000002"]).await;
    assert!(
        out.ok().contains("actions that touched it: ") && out.stdout.contains("split acme.orders.p000002"),
        "{}",
        out.stdout
    );
    let history: HistoryReport = sys.lbctl(&["history", "acme.orders.p000002", "-o", "json"]).await.json();
    assert!(!history.history.points.is_empty() && !history.actions.is_empty(), "{history:?}");
    let out = sys.lbctl(&["history", "acme.orders.nope"]).await;
    assert!(out.fails(1).contains("refused: 404"), "{}", out.stderr);
    let agents: AgentsReport = sys.lbctl(&["agents", "-o", "json"]).await.json();
    assert_eq!(agents.agents.len(), 4);
    assert!(sys.lbctl(&["agents"]).await.ok().contains("w-0000"));
    let policy: PolicyStatus = sys.lbctl(&["policy", "-o", "json"]).await.json();
    assert_eq!(policy.config.version, 1);
    assert!(sys.lbctl(&["policy"]).await.ok().contains("partition_overload.engage_ratio"));
    let actions: ActionsResponse = sys.lbctl(&["actions", "--state", "succeeded", "-o", "json"]).await.json();
    assert!(actions.actions.iter().all(|a| a.state == ActionState::Succeeded) && !actions.actions.is_empty());
    let pending: PendingResponse = sys.lbctl(&["proposals", "-o", "json"]).await.json();
    assert!(pending.proposals.is_empty(), "auto mode leaves nothing pending: {pending:?}");
    let why: Explanation = sys.lbctl(&["explain", cold.id.as_str(), "-o", "json"]).await.json();
    assert!(matches!(why, Explanation::Partition(_)), "{why:?}");
    assert!(sys.lbctl(&["explain", cold.id.as_str()]).await.ok().contains("latest pass (pass "));

    // The split that relieved the hot range, explained: reason, numbers, alternatives, verdict.
    // The split itself: the scatter move of its new side has the same policy, and whichever of
    // the two was evaluated last is listed first.
    let effective = eventually(Duration::from_secs(60), "a split evaluated effective", || async {
        let evaluations = sys.master.records::<Evaluation>(&ALL).await.expect("evaluations");
        evaluations.into_iter().map(|r| r.body).find(|e| {
            e.judgement.verdict == Verdict::Effective
                && e.policy.is_some_and(|p| p.as_str() == "partition_overload")
                && e.spec.kind() == lb_common::protocol::ActionKind::Split
        })
    })
    .await;
    let out = sys.lbctl(&["explain", &effective.action_id]).await;
    let text = out.ok();
    for part in [
        "policy partition_overload",
        "reason: partition acme.orders.p0000",
        "trigger",
        "partition demand",
        "predicted",
        "rejected alternatives: ",
        "execution (ops server audit)",
        "succeeded",
        "evaluation: effective (score +",
    ] {
        assert!(text.contains(part), "explain shows {part:?}:\n{text}");
    }
    let why: Explanation = sys.lbctl(&["explain", &effective.action_id, "-o", "json"]).await.json();
    let Explanation::Action(a) = why else { panic!("an action: {why:?}") };
    let proposal = a.proposal.expect("its proposal record");
    assert!(!proposal.rejected_alternatives.is_empty() && proposal.trigger.partition_demand_ops_per_sec.is_some());
    assert_eq!(a.evaluation.map(|e| e.judgement.verdict), Some(Verdict::Effective));
    assert!(a.events.iter().any(|e| e.state == ActionState::Succeeded), "{:?}", a.events);

    eprintln!("hot-range lbctl checks took {:.1} s", started.elapsed().as_secs_f64());
    sys.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_proposals_are_rejected_and_approved_through_lbctl() {
    let started = tokio::time::Instant::now();
    // A rejected proposal comes back after 4 s (the approval TTL), so the test can approve it.
    let sys = System::start(
        "[analyzer]\napproval_ttl_secs = 4\n[planner.partition_overload]\nmode = \"dry_run\"\n\
         [planner.worker_overload]\nmode = \"off\"\n[planner.imbalance]\nmode = \"off\"\n"
            .to_owned(),
    )
    .await;
    let first = eventually(Duration::from_secs(30), "a dry-run proposal", || async {
        let p = sys.master.pending().await.expect("pending");
        p.into_iter().next()
    })
    .await;
    let out = sys.lbctl(&["proposals"]).await;
    assert!(
        out.ok().contains(first.id.as_str()) && out.stdout.contains("approve with `lbctl approve ID`"),
        "{}",
        out.stdout
    );
    let out = sys.lbctl(&["explain", first.id.as_str()]).await;
    assert!(out.ok().contains("pending approval since") && out.stdout.contains("mode dry_run"), "{}", out.stdout);

    // Reject: no token 401, a viewer 403, the operator drops it.
    let id = first.id.as_str();
    assert!(sys.anonymous(&["reject", id]).await.fails(1).contains("refused: 401 unauthorized"));
    let out = sys.lbctl(&["--token", VIEWER_TOKEN, "reject", id]).await;
    assert!(out.fails(1).contains("refused: 403 forbidden: dash (viewer)"), "{}", out.stderr);
    let rejected: Pending = sys.sre(&["reject", id, "-o", "json"]).await.json();
    assert_eq!(rejected.id, first.id);
    let pending: PendingResponse = sys.lbctl(&["proposals", "-o", "json"]).await.json();
    assert!(pending.proposals.iter().all(|p| p.id != first.id), "rejected, so not pending: {pending:?}");
    assert!(sys.sre(&["reject", id]).await.fails(1).contains("refused: 404"), "twice");

    // After the TTL the planner offers it again; approve that one.
    let again = eventually(Duration::from_secs(30), "the proposal offered again", || async {
        sys.master.pending().await.expect("pending").into_iter().next()
    })
    .await;
    let out = sys.lbctl(&["--token", VIEWER_TOKEN, "approve", again.id.as_str()]).await;
    assert!(out.fails(1).contains("refused: 403 forbidden"), "{}", out.stderr);
    let record: ActionRecord = sys.sre(&["approve", again.id.as_str(), "-o", "json"]).await.json();
    assert!(record.request.reason.contains("approved by sre"), "{}", record.request.reason);
    eventually(Duration::from_secs(30), "the approved action runs", || async {
        let done = sys.ops.actions(Some(ActionState::Succeeded)).await.expect("actions");
        done.iter().any(|a| a.request.id == record.request.id).then_some(())
    })
    .await;
    let online = sys.actions().await.into_iter().filter(|a| a.request.origin == Origin::Online).count();
    assert_eq!(online, 1, "only the approved proposal ran");
    let out = sys.lbctl(&["explain", record.request.id.as_str()]).await;
    assert!(out.ok().contains("(dry run, approved by sre)") && out.stdout.contains("succeeded"), "{}", out.stdout);

    eprintln!("dry-run lbctl checks took {:.1} s", started.elapsed().as_secs_f64());
    sys.stop().await;
}
