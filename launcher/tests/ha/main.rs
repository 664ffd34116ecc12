//! Master high availability on a real etcd (issue 23): Debian's `etcd` on loopback ports with a
//! temp data dir (installed by `scripts/install-etcd.sh`), `lb up`'s testbed, agents and ops
//! server in this process, and two masters as real `lb master` processes campaigning in one
//! election. `lb up`'s own master runs with its planners halted: it collects like the others
//! but never acts, so every action comes from the elected pair.
//!
//! - a leader killed (-9) during a hotspot: the standby leads, acts and relieves it; no action
//!   is submitted twice, and every action after the kill carries the new epoch;
//! - a leader frozen (SIGSTOP) until the standby leads, then thawed: it steps down, nothing it
//!   sends after the new leader's takeover is accepted, and its epoch is refused (409);
//! - etcd stopped: no master acts while it is down; restarted: one leads and acts again.
//!
//! The tests run one at a time (each is a whole system). `failover_time_over_ten_runs`
//! (ignored; the figures in `docs/benchmarks.md`) repeats the first one ten times and prints
//! the failover times.

#[path = "../support/install.rs"]
mod install;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use lb_common::clients::{MasterClient, OpsClient};
use lb_common::config::shared::HttpClientConfig;
use lb_common::protocol::{ActionRecord, ActionRequest, ActionSpec, LeadershipStatus, Origin, PartitionsQuery};
use lb_launcher::up::{Overrides, Running, UpOptions, up_with};
use tokio::time::{Instant, sleep};

/// One whole system at a time: two cores cannot run three with their deadlines.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// When the hot range starts (scenario seconds): time for the masters to start, elect and
/// fill a window first.
const ONSET_SECS: u64 = 12;

/// The e2e hot range (`configs/scenarios/e2e-hot-range.toml`) starting later.
fn scenario() -> String {
    include_str!("../../../configs/scenarios/e2e-hot-range.toml")
        .replace("name = \"e2e-hot-range\"", "name = \"ha-hot-range\"")
        .replace("start_secs = 3", &format!("start_secs = {ONSET_SECS}"))
}

/// `lb up`'s master only watches: its planners are halted (it is not one of the elected pair).
const WATCHER: &str = "[planner]\nhalt = true\n";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn signal(child: &Child, sig: &str) {
    let status = Command::new("kill").arg(format!("-{sig}")).arg(child.id().to_string()).status().expect("kill");
    assert!(status.success(), "kill -{sig} {}", child.id());
}

/// Kills (SIGKILL) and reaps the process, if it still runs.
fn kill_and_reap(child: &mut Option<Child>) {
    if let Some(mut child) = child.take() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// A single-node etcd on loopback with its data in `dir`.
struct Etcd {
    child: Option<Child>,
    dir: PathBuf,
    client_url: String,
    peer_url: String,
}

impl Etcd {
    async fn start(dir: &Path) -> Etcd {
        install::run_once("install-etcd.sh").expect("etcd installed");
        let mut etcd = Etcd {
            child: None,
            dir: dir.to_path_buf(),
            client_url: format!("http://127.0.0.1:{}", free_port()),
            peer_url: format!("http://127.0.0.1:{}", free_port()),
        };
        etcd.spawn().await;
        etcd
    }

    /// Starts (or restarts, on the same data) the server and waits until it is healthy.
    async fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join("etcd.log")).expect("log");
        let child = Command::new("/usr/bin/etcd")
            .args(["--name", "ha", "--data-dir"])
            .arg(self.dir.join("etcd-data"))
            .args(["--listen-client-urls", &self.client_url, "--advertise-client-urls", &self.client_url])
            .args(["--listen-peer-urls", &self.peer_url, "--initial-advertise-peer-urls", &self.peer_url])
            .args(["--initial-cluster", &format!("ha={}", self.peer_url), "--logger", "zap"])
            // As the README runs it: every handover save is a new revision until compacted.
            .args(["--auto-compaction-mode", "periodic", "--auto-compaction-retention", "1h"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("etcd starts");
        self.child = Some(child);
        let http = reqwest::Client::builder().timeout(Duration::from_millis(500)).build().expect("client");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let healthy = http.get(format!("{}/health", self.client_url)).send().await;
            if let Ok(reply) = healthy
                && reply.text().await.is_ok_and(|t| t.contains("true"))
            {
                return;
            }
            assert!(Instant::now() < deadline, "etcd not healthy within 20 s (see {}/etcd.log)", self.dir.display());
            sleep(Duration::from_millis(100)).await;
        }
    }

    fn stop(&mut self) {
        kill_and_reap(&mut self.child);
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One `lb master` process of the elected pair.
struct Master {
    name: &'static str,
    child: Option<Child>,
    url: String,
    api: MasterClient,
}

impl Master {
    fn spawn(name: &'static str, dir: &Path, running: &Running, etcd: &Etcd) -> Master {
        let port = free_port();
        let config = format!(
            "[http]\nlisten = \"127.0.0.1:{port}\"\n[ops_server]\nurl = \"http://{}\"\ntoken = \"{}\"\n\
             [store]\npath = \"{}\"\n[collector]\ninterval_ms = 250\nstale_after_ms = 1250\ntopology_interval_ms = 500\n\
             [analyzer]\nwindow_ms = 2000\n[evaluation]\nsettle_secs = 2\nwindow_secs = 3\n\
             [leadership]\nbackend = \"etcd\"\nendpoints = [\"{}\"]\nelection = \"/lb-ha-test\"\n{}",
            running.ops_server.addr(),
            running.tokens.service.token,
            dir.join(format!("{name}.sqlite")).display(),
            etcd.client_url,
            running.tokens.master_toml(),
        );
        let path = dir.join(format!("{name}.toml"));
        std::fs::write(&path, config).expect("config");
        let log = std::fs::File::create(dir.join(format!("{name}.log"))).expect("log");
        let child = Command::new(env!("CARGO_BIN_EXE_lb"))
            .args(["master", "--config"])
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("lb master starts");
        let url = format!("http://127.0.0.1:{port}");
        let client = HttpClientConfig { deadline_ms: 1_000, ..HttpClientConfig::default() };
        let api = MasterClient::new(url.clone(), &client).with_bearer_token(&running.tokens.operator.token);
        Master { name, child: Some(child), url, api }
    }

    async fn leadership(&self) -> Option<LeadershipStatus> {
        self.api.leadership().await.ok()
    }

    /// `lb_master_leadership_sessions_ended_total` on its `/metrics`: etcd sessions that ended
    /// on an error.
    async fn sessions_ended(&self) -> f64 {
        self.metric("lb_master_leadership_sessions_ended_total").await
    }

    /// One series of its `/metrics`, named with its labels as the exposition writes them.
    async fn metric(&self, series: &str) -> f64 {
        let text = reqwest::get(format!("{}/metrics", self.url)).await.expect("metrics").text().await.expect("body");
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("{}: no {series} in\n{text}", self.name))
    }

    fn kill(&mut self) {
        kill_and_reap(&mut self.child);
    }
}

impl Drop for Master {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Polls `f` every 100 ms until it answers `Some`, for at most `limit`.
async fn wait_for<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    limit: Duration,
    mut f: impl FnMut() -> F,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = f().await {
            return value;
        }
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        sleep(Duration::from_millis(100)).await;
    }
}

/// The index of the one master that leads and its epoch, once exactly one does.
async fn one_leader(masters: &[&Master], limit: Duration) -> (usize, u64) {
    wait_for("exactly one master leads", limit, || async {
        let mut leaders = Vec::new();
        for (i, m) in masters.iter().enumerate() {
            if let Some(status) = m.leadership().await
                && status.leader
            {
                leaders.push((i, status.epoch.expect("an elected leader has an epoch")));
            }
        }
        (leaders.len() == 1).then(|| leaders[0])
    })
    .await
}

/// The whole system but the elected masters.
struct System {
    dir: tempfile::TempDir,
    running: Running,
    started: Instant,
    ops: OpsClient,
    etcd: Etcd,
}

async fn system(name: &str) -> System {
    lb_common::telemetry::metrics_handle();
    let dir = tempfile::tempdir().expect("dir");
    let etcd = Etcd::start(dir.path()).await;
    let path = dir.path().join(format!("{name}.toml"));
    std::fs::write(&path, scenario()).expect("scenario");
    let options = UpOptions {
        scenario: path,
        data_dir: dir.path().join("data"),
        host: "127.0.0.1".to_owned(),
        interval: Duration::from_millis(250),
    };
    let running = up_with(&options, &Overrides { master: WATCHER.to_owned(), tokens: None }).await.expect("up");
    let started = Instant::now();
    let ops = OpsClient::new(format!("http://{}", running.ops_server.addr()), &HttpClientConfig::default())
        .with_bearer_token(&running.tokens.service.token);
    System { dir, running, started, ops, etcd }
}

impl System {
    async fn actions(&self) -> Vec<ActionRecord> {
        self.ops.actions(None).await.expect("actions")
    }

    /// Sleeps until `secs` after the system started.
    async fn until(&self, secs: f64) {
        let at = self.started + Duration::from_secs_f64(secs);
        tokio::time::sleep_until(at).await;
    }

    async fn stop(self) {
        let System { dir, running, mut etcd, .. } = self;
        running.stop(Duration::from_secs(5)).await;
        etcd.stop();
        drop(dir);
    }
}

/// No two actions ask for the same change (a takeover that forgot or repeated its predecessor's
/// action would).
fn assert_no_action_twice(actions: &[ActionRecord]) {
    let mut seen = BTreeSet::new();
    for a in actions {
        let spec = serde_json::to_string(&a.request.spec).expect("spec");
        assert!(seen.insert(spec.clone()), "submitted twice: {spec}\n{actions:#?}");
    }
}

/// The share of demand rejected, as `master` sees it over 2 s.
async fn rejected_share(master: &MasterClient) -> Option<f64> {
    let query = PartitionsQuery { window_secs: Some(2), ..PartitionsQuery::default() };
    let rows = master.partitions(&query).await.ok()?;
    let demand: f64 = rows.iter().map(|p| p.ops_per_sec + p.rejected_per_sec).sum();
    let rejected: f64 = rows.iter().map(|p| p.rejected_per_sec).sum();
    (demand > 0.0).then_some(rejected / demand)
}

/// What one kill -9 failover measured.
#[derive(Debug, Clone, Copy)]
struct Failover {
    to_leading: Duration,
    to_first_action: Duration,
}

/// The leader killed during the hotspot; returns the failover times.
async fn kill_the_leader_during_a_hotspot() -> Failover {
    let system = system("kill").await;
    let dir = system.dir.path();
    let mut a = Master::spawn("master-a", dir, &system.running, &system.etcd);
    let mut b = Master::spawn("master-b", dir, &system.running, &system.etcd);
    let (leader, old_epoch) = one_leader(&[&a, &b], Duration::from_secs(30)).await;
    let (old, standby) = if leader == 0 { (&mut a, &mut b) } else { (&mut b, &mut a) };

    // A standby names the leader (it reads etcd every third of the TTL), refuses writes with
    // the leader's address, and says so on /ready.
    wait_for("the standby names the leader", Duration::from_secs(5), || async {
        standby.leadership().await.filter(|s| !s.leader && s.leader_address.as_deref() == Some(old.url.as_str()))
    })
    .await;
    let refused = reqwest::Client::new()
        .post(format!("{}/api/v1/actions", standby.url))
        .bearer_auth(&system.running.tokens.operator.token)
        .json(&serde_json::json!({"spec": {"kind": "move", "partition": "p-0", "to_worker": "w-0001"}, "reason": "x"}))
        .send()
        .await
        .expect("standby answers");
    assert_eq!(refused.status(), reqwest::StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.headers().get("lb-leader").and_then(|v| v.to_str().ok()), Some(old.url.as_str()));
    let ready = reqwest::get(format!("{}/ready", standby.url)).await.expect("ready");
    assert_eq!(ready.status(), reqwest::StatusCode::SERVICE_UNAVAILABLE);
    assert!(ready.text().await.expect("body").contains("standby"));

    system.until(ONSET_SECS as f64 + 1.0).await;
    // A standby waits in its campaign for as long as the leader lives: its session does not end
    // (a per-request timeout on the campaign ended it every second).
    for master in [&*old, &*standby] {
        assert_eq!(master.sessions_ended().await, 0.0, "{}: an etcd session ended while etcd was up", master.name);
    }
    // Before the hotspot nothing was acted on: the leader saved its state once, when its term
    // began, and not at every pass (only the hysteresis changed since; it saves that every
    // `handover_interval_ms`, 10 s).
    let passes = old.metric("lb_master_analysis_passes_total{outcome=\"ok\"}").await;
    let saved = old.metric("lb_master_handover_saves_total{outcome=\"saved\"}").await;
    assert!(passes >= 3.0, "the leader ran {passes} passes before the hotspot");
    assert!(saved >= 1.0 && saved < passes, "{saved} handover saves in {passes} quiet passes");
    let killed = Instant::now();
    let killed_ms = now_ms();
    old.kill();
    let new_epoch = wait_for("the standby leads", Duration::from_secs(20), || async {
        standby.leadership().await.filter(|s| s.leader).and_then(|s| s.epoch)
    })
    .await;
    let to_leading = killed.elapsed();
    assert!(new_epoch > old_epoch, "a new term has a higher epoch: {new_epoch} after {old_epoch}");
    wait_for("the new leader restored its predecessor's state", Duration::from_secs(10), || async {
        (standby.metric("lb_master_takeovers_total{state=\"handover\"}").await == 1.0).then_some(())
    })
    .await;
    let first = wait_for("the new leader acts", Duration::from_secs(45), || async {
        system.actions().await.into_iter().find(|a| a.request.leader_epoch == Some(new_epoch))
    })
    .await;
    let to_first_action = Duration::from_millis((first.created_at_ms - killed_ms).max(0) as u64);

    // Relief: under 1 % of demand rejected for 3 s in a row, as the new leader sees it.
    let (mut clean, deadline) = (0, Instant::now() + Duration::from_secs(60));
    while clean < 30 {
        assert!(Instant::now() < deadline, "the hotspot is not relieved within 60 s of the new leader's first action");
        clean = if rejected_share(&standby.api).await.is_some_and(|s| s < 0.01) { clean + 1 } else { 0 };
        sleep(Duration::from_millis(100)).await;
    }

    let actions = system.actions().await;
    assert_no_action_twice(&actions);
    for action in &actions {
        let epoch = action.request.leader_epoch;
        assert!(epoch == Some(old_epoch) || epoch == Some(new_epoch), "{action:?}");
        if action.created_at_ms > killed_ms {
            assert_eq!(epoch, Some(new_epoch), "after the kill only the new leader acts: {action:?}");
        }
    }
    drop(a);
    drop(b);
    system.stop().await;
    Failover { to_leading, to_first_action }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_is_replaced_by_the_standby_which_relieves_the_hotspot_without_repeating_an_action() {
    let _one = SERIAL.lock().await;
    let failover = kill_the_leader_during_a_hotspot().await;
    eprintln!("failover: leading after {:?}, first action after {:?}", failover.to_leading, failover.to_first_action);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_leader_thawed_after_a_takeover_is_fenced_and_steps_down() {
    let _one = SERIAL.lock().await;
    let system = system("freeze").await;
    let dir = system.dir.path();
    let a = Master::spawn("master-a", dir, &system.running, &system.etcd);
    let b = Master::spawn("master-b", dir, &system.running, &system.etcd);
    let (leader, old_epoch) = one_leader(&[&a, &b], Duration::from_secs(30)).await;
    let (old, new) = if leader == 0 { (&a, &b) } else { (&b, &a) };

    system.until(ONSET_SECS as f64 + 1.0).await;
    let frozen_ms = now_ms();
    signal(old.child.as_ref().expect("running"), "STOP");
    let new_epoch = wait_for("the standby leads", Duration::from_secs(20), || async {
        new.leadership().await.filter(|s| s.leader).and_then(|s| s.epoch)
    })
    .await;
    // Its takeover told the ops server the new epoch before anything else.
    wait_for("the ops server knows the new epoch", Duration::from_secs(10), || async {
        system.ops.fencing().await.ok().filter(|f| f.newest_epoch == Some(new_epoch))
    })
    .await;
    let thawed_ms = now_ms();
    signal(old.child.as_ref().expect("running"), "CONT");
    wait_for("the old leader steps down and names the new one", Duration::from_secs(10), || async {
        old.leadership().await.filter(|s| !s.leader && s.leader_address.as_deref() == Some(new.url.as_str()))
    })
    .await;

    // Whatever the old leader sends with its term is refused and audited.
    let late = ActionRequest {
        id: format!("lb-{frozen_ms}-999").parse().expect("id"),
        spec: ActionSpec::Split { partition: "p-0".parse().expect("id"), split_key: lb_common::ids::Key(1) },
        origin: Origin::Online,
        policy: Some("partition_overload".to_owned()),
        reason: "a late submission of the old leader".to_owned(),
        actor_path: vec!["acme".to_owned(), "orders".to_owned()],
        leader_epoch: Some(old_epoch),
    };
    let err = system.ops.submit(&late).await.expect_err("stale epoch");
    assert_eq!(err.status(), Some(axum::http::StatusCode::CONFLICT), "{err}");
    assert!(err.to_string().contains("stale_epoch"), "{err}");

    // Let both run a while through the hotspot: the thawed one never acts again.
    sleep(Duration::from_secs(8)).await;
    let actions = system.actions().await;
    assert_no_action_twice(&actions);
    for action in &actions {
        if action.created_at_ms > thawed_ms {
            assert_eq!(action.request.leader_epoch, Some(new_epoch), "after the thaw: {action:?}");
        }
    }
    let fencing = system.ops.fencing().await.expect("fencing");
    assert!(fencing.refused.iter().any(|r| r.action_id.as_ref() == Some(&late.id)), "{fencing:?}");
    for refusal in &fencing.refused {
        assert_eq!((refusal.leader_epoch, refusal.newest_epoch), (old_epoch, new_epoch), "{refusal:?}");
    }
    assert!(!old.leadership().await.expect("answers").leader);
    drop(a);
    drop(b);
    system.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_etcd_down_no_master_acts_and_when_it_returns_one_leads_and_acts() {
    let _one = SERIAL.lock().await;
    let mut system = system("etcd-down").await;
    let dir = system.dir.path().to_path_buf();
    let a = Master::spawn("master-a", &dir, &system.running, &system.etcd);
    let b = Master::spawn("master-b", &dir, &system.running, &system.etcd);
    let (_, first_epoch) = one_leader(&[&a, &b], Duration::from_secs(30)).await;

    system.until(ONSET_SECS as f64 - 2.0).await;
    system.etcd.stop();
    wait_for("both masters stand by", Duration::from_secs(10), || async {
        let (sa, sb) = (a.leadership().await?, b.leadership().await?);
        (!sa.leader && !sb.leader).then_some(())
    })
    .await;
    let before = system.actions().await.len();
    // The hotspot runs for 8 s with nobody allowed to act.
    system.until(ONSET_SECS as f64 + 8.0).await;
    assert_eq!(system.actions().await.len(), before, "an action was submitted while etcd was down");
    for m in [&a, &b] {
        assert!(!m.leadership().await.expect("answers").leader, "{} leads without etcd", m.name);
    }

    system.etcd.spawn().await;
    let (_, epoch) = one_leader(&[&a, &b], Duration::from_secs(30)).await;
    assert!(epoch > first_epoch, "{epoch} after {first_epoch}");
    wait_for("the new leader acts", Duration::from_secs(45), || async {
        system.actions().await.into_iter().find(|a| a.request.leader_epoch == Some(epoch)).map(|_| ())
    })
    .await;
    assert_no_action_twice(&system.actions().await);
    drop(a);
    drop(b);
    system.stop().await;
}

/// `cargo test -p lb-launcher --test ha -- --ignored --nocapture failover_time`: the figures of
/// `docs/benchmarks.md` ("Master failover").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: ten whole-system runs, about ten minutes"]
async fn failover_time_over_ten_runs() {
    let _one = SERIAL.lock().await;
    let mut runs = Vec::new();
    for run in 1..=10 {
        let f = kill_the_leader_during_a_hotspot().await;
        eprintln!(
            "run {run}: leading after {:.2} s, first action after {:.2} s",
            f.to_leading.as_secs_f64(),
            f.to_first_action.as_secs_f64()
        );
        runs.push(f);
    }
    let stats = |xs: Vec<f64>| {
        let mut xs = xs;
        xs.sort_by(f64::total_cmp);
        (xs[0], xs[xs.len() / 2], xs[xs.len() - 1])
    };
    let leading = stats(runs.iter().map(|f| f.to_leading.as_secs_f64()).collect());
    let acting = stats(runs.iter().map(|f| f.to_first_action.as_secs_f64()).collect());
    eprintln!("to leading: min {:.2} s, median {:.2} s, max {:.2} s", leading.0, leading.1, leading.2);
    eprintln!("to first action: min {:.2} s, median {:.2} s, max {:.2} s", acting.0, acting.1, acting.2);
}
