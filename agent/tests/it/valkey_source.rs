//! The Valkey source against real `valkey-server` processes: a 3-node `LocalCluster`, agents
//! started in-process and pointed at one node each, load written into chosen slots, a node
//! killed and restarted, slot stats turned off live, and a server without cluster mode.
//! The binary is found or installed by `LocalCluster` (never skipped).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lb_agent::config::AgentConfig;
use lb_agent::config::SourceConfig;
use lb_agent::source::valkey::rates::{slot_key_range, slot_of_partition, slot_partition_id};
use lb_common::http::HttpClient;
use lb_common::protocol::{Cursor, HostStats, PartitionStats, Sample, SampleData, SamplesQuery, SamplesResponse};
use lb_valkey::reply::MigrationState;
use lb_valkey::{ConnectOptions, LocalCluster, LocalClusterConfig, NodeAddr, NodeClient, Slot, SlotRange, key_slot};

use crate::support::{STOP, start};

/// Fast enough that a test sees several intervals within seconds, slow enough that a debug
/// build stores a node's 5,461 slots per report without falling behind.
const INTERVAL_MS: u64 = 500;
/// Bound on every wait for the agent to show something; normally a few intervals.
const WAIT: Duration = Duration::from_secs(30);
/// A slot's CPU cannot exceed the interval on Valkey's one main thread; twice that is slack for
/// clock granularity. Anything above is the "huge rate" a mishandled reset would produce.
const MAX_SLOT_CPU_PER_INTERVAL_RATIO: u64 = 2;
/// Far above what this test's single writer (one SET per round trip, debug build) reaches.
const MAX_OPS_PER_SEC: u64 = 200_000;

fn agent_config(dir: &Path, worker: &str, address: &NodeAddr) -> AgentConfig {
    let text = format!(
        "worker_id = \"{worker}\"\n\
         [http]\nlisten = \"127.0.0.1:0\"\n\
         [store]\npath = \"{}\"\n\
         [host]\nenabled = false\n\
         [serve]\nmax_samples_per_page = 20000\n\
         [source]\nkind = \"valkey\"\naddress = \"{address}\"\ncluster_name = \"it-cluster\"\n\
         interval_ms = {INTERVAL_MS}\nconnect_timeout_ms = 500\ncommand_timeout_ms = 2000\n",
        dir.join("agent.sqlite").display()
    );
    lb_common::config::parse(&text, Path::new("agent-valkey.toml")).expect("test config is valid")
}

/// Every sample after `after`, and the cursor to continue from.
async fn pull(client: &HttpClient, mut after: u64) -> (Vec<Sample>, u64) {
    let mut all = Vec::new();
    loop {
        let page: SamplesResponse = client
            .get_with_query("/v1/samples", &SamplesQuery { after: Cursor(after), limit: Some(20_000) })
            .await
            .expect("samples");
        after = page.next_cursor.0;
        all.extend(page.samples);
        if !page.more {
            return (all, after);
        }
    }
}

fn partitions(samples: &[Sample]) -> Vec<(&Sample, &PartitionStats)> {
    samples
        .iter()
        .filter_map(|s| match &s.data {
            SampleData::Partition(p) => Some((s, p)),
            SampleData::Host(_) => None,
        })
        .collect()
}

fn hosts(samples: &[Sample]) -> Vec<&HostStats> {
    samples
        .iter()
        .filter_map(|s| match &s.data {
            SampleData::Host(h) => Some(h),
            SampleData::Partition(_) => None,
        })
        .collect()
}

/// `(ops, cpu_time_us)` summed per partition id.
fn totals(samples: &[Sample]) -> BTreeMap<String, (u64, u64)> {
    let mut totals = BTreeMap::new();
    for (_, p) in partitions(samples) {
        let entry = totals.entry(p.partition_id.to_string()).or_insert((0, 0));
        entry.0 += p.ops();
        entry.1 += p.cpu_time_us;
    }
    totals
}

/// No negative (wrapped) or huge values anywhere.
fn assert_sane(samples: &[Sample]) {
    for (sample, p) in partitions(samples) {
        let interval_us = sample.interval_ms * 1000;
        assert!(
            p.cpu_time_us <= interval_us * MAX_SLOT_CPU_PER_INTERVAL_RATIO,
            "{} used {} µs of CPU in a {} ms interval",
            p.partition_id,
            p.cpu_time_us,
            sample.interval_ms
        );
        assert!(
            p.ops() <= MAX_OPS_PER_SEC * sample.interval_ms.div_ceil(1000),
            "{} did {} ops in {} ms",
            p.partition_id,
            p.ops(),
            sample.interval_ms
        );
        assert!(p.read_bytes < 1 << 32 && p.write_bytes < 1 << 32, "{p:?}");
    }
    for h in hosts(samples) {
        assert!((0.0..=1.0).contains(&h.cpu_ratio) && h.cpu_cores == 1, "{h:?}");
        assert!(h.net_rx_bytes_per_sec < 1e9 && h.net_tx_bytes_per_sec < 1e9, "{h:?}");
        assert!(h.memory_used_bytes > 0 && h.memory_used_bytes <= h.memory_total_bytes, "{h:?}");
    }
}

/// The value of a counter with one label in the agent's `/metrics` (0 when absent).
async fn metric(agent: &lb_agent::RunningAgent, name: &str, outcome: &str) -> u64 {
    let text = reqwest::get(format!("http://{}/metrics", agent.addr()))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text");
    // An empty `outcome` reads a counter without labels.
    let prefix = if outcome.is_empty() { format!("{name} ") } else { format!("{name}{{outcome=\"{outcome}\"}} ") };
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map_or(0, |value| value.trim().parse::<f64>().expect("a number") as u64)
}

/// A key whose slot is `slot` (a hash tag that hashes there).
fn key_in_slot(slot: Slot, index: usize) -> String {
    let tag =
        (0u64..).map(|n| format!("t{n}")).find(|tag| key_slot(tag.as_bytes()) == slot).expect("some tag hashes here");
    format!("{{{tag}}}:k{index}")
}

/// Writes into `hot` (three keys a round) and `warm` (one key every fourth round) on one node
/// until stopped, reconnecting when the node goes away.
fn spawn_writer(
    addr: NodeAddr,
    options: ConnectOptions,
    hot: Slot,
    warm: Slot,
    stop: Arc<AtomicBool>,
    writes: Arc<AtomicU64>,
) -> tokio::task::JoinHandle<()> {
    let hot_keys: Vec<String> = (0..3).map(|i| key_in_slot(hot, i)).collect();
    let warm_key = key_in_slot(warm, 0);
    tokio::spawn(async move {
        let mut client: Option<NodeClient> = None;
        let mut round = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let Some(c) = client.as_mut() else {
                match NodeClient::connect(&addr, &options).await {
                    Ok(c) => client = Some(c),
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
                continue;
            };
            round += 1;
            let mut keys: Vec<&String> = hot_keys.iter().collect();
            if round.is_multiple_of(4) {
                keys.push(&warm_key);
            }
            for key in keys {
                let value = format!("value-{round}-{}", "x".repeat(64));
                if c.query("SET", redis::cmd("SET").arg(key).arg(value)).await.is_err() {
                    client = None;
                    break;
                }
                writes.fetch_add(1, Ordering::Relaxed);
            }
        }
    })
}

/// Pulls until `done(all samples so far)` holds or `WAIT` passes.
async fn pull_until(
    client: &HttpClient,
    samples: &mut Vec<Sample>,
    cursor: &mut u64,
    what: &str,
    done: impl Fn(&[Sample]) -> bool,
) {
    let deadline = Instant::now() + WAIT;
    loop {
        let (new, next) = pull(client, *cursor).await;
        samples.extend(new);
        *cursor = next;
        if done(samples) {
            return;
        }
        assert!(Instant::now() < deadline, "{what} not seen within {WAIT:?}; totals {:?}", totals(samples).len());
        tokio::time::sleep(Duration::from_millis(INTERVAL_MS / 2)).await;
    }
}

/// Waits until the agent has counted `at_least` polls with `outcome`.
async fn wait_for_metric(agent: &lb_agent::RunningAgent, outcome: &str, at_least: u64) {
    let deadline = Instant::now() + WAIT;
    loop {
        let now = metric(agent, "lb_agent_valkey_polls_total", outcome).await;
        if now >= at_least {
            return;
        }
        assert!(Instant::now() < deadline, "{outcome} polls stayed at {now}, expected {at_least}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Moves `slot` from node `from` to node `to` with `CLUSTER MIGRATESLOTS` and waits until the
/// job succeeded and every node agrees on the new owner.
async fn migrate(cluster: &LocalCluster, from: usize, to: usize, slot: Slot) {
    let mut client = cluster.connect(from).await.expect("connect");
    let target = cluster.node_id(to).clone();
    client.migrate_slots(&[SlotRange::single(slot)], &target).await.expect("MIGRATESLOTS accepted");
    let deadline = Instant::now() + WAIT;
    loop {
        let jobs = client.slot_migrations().await.expect("GETSLOTMIGRATIONS");
        let job = jobs
            .into_iter()
            .find(|j| j.target_node == target && j.slot_ranges == [SlotRange::single(slot)])
            .expect("the job is listed on the source");
        if job.state.is_terminal() {
            assert_eq!(job.state, MigrationState::Success, "{}", job.message);
            break;
        }
        assert!(Instant::now() < deadline, "migration stuck in {:?}", job.state);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cluster.wait_until_healthy().await.expect("all nodes agree on the new owner");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valkey_source_reports_owned_slots_survives_a_restart_and_falls_back_without_slot_stats() {
    let data_dir = tempfile::tempdir().expect("temp dir");
    let mut cluster = LocalCluster::start(LocalClusterConfig::new(3, data_dir.path())).await.expect("cluster starts");
    let owned = SlotRange::even_split(3)[0];
    let (hot, warm, idle) =
        (Slot::new(100).expect("slot"), Slot::new(200).expect("slot"), Slot::new(300).expect("slot"));
    assert!(owned.contains(hot) && owned.contains(warm) && owned.contains(idle), "node 0 owns {owned}");

    let agent_dir = tempfile::tempdir().expect("temp dir");
    let (agent, _config_tx, http) = start(agent_config(agent_dir.path(), "valkey-n0", &cluster.addr(0))).await;
    let stop = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(AtomicU64::new(0));
    let writer = spawn_writer(cluster.addr(0), cluster.connect_options(), hot, warm, stop.clone(), writes.clone());

    // 1. Per-slot samples: the written slots show ops and CPU, the hot one more than the warm
    //    one, an idle owned slot is left out (only what changed is reported; the master reads
    //    it as zero), and the node's stats arrive as host samples.
    let (mut samples, mut cursor) = (Vec::new(), 0);
    let (hot_id, warm_id, idle_id) = (slot_partition_id(hot), slot_partition_id(warm), slot_partition_id(idle));
    pull_until(&http, &mut samples, &mut cursor, "load on the hot and warm slots", |s| {
        let t = totals(s);
        let busy = |id: &lb_common::ids::PartitionId| t.get(id.as_str()).is_some_and(|&(ops, cpu)| ops > 0 && cpu > 0);
        busy(&hot_id) && busy(&warm_id) && hosts(s).len() >= 2
    })
    .await;
    let t = totals(&samples);
    let (hot_ops, hot_cpu) = t[hot_id.as_str()];
    let (warm_ops, warm_cpu) = t[warm_id.as_str()];
    eprintln!(
        "after {} writes: hot {hot_ops} ops {hot_cpu} µs, warm {warm_ops} ops {warm_cpu} µs, {} samples, {} slots",
        writes.load(Ordering::Relaxed),
        samples.len(),
        t.len()
    );
    assert!(hot_ops > warm_ops && hot_cpu > warm_cpu, "hot {:?} vs warm {:?}", t[hot_id.as_str()], t[warm_id.as_str()]);
    assert_eq!(t.get(idle_id.as_str()), None, "an idle owned slot is not reported");
    let reported: Vec<Slot> = t.keys().filter_map(|id| slot_of_partition(&id.parse().expect("id"))).collect();
    assert!(reported.iter().all(|s| owned.contains(*s)), "only owned slots: {reported:?}");
    assert!(t.len() < usize::from(owned.len()) / 10, "only the slots that changed: {} of {}", t.len(), owned.len());
    assert!(
        metric(&agent, "lb_agent_valkey_idle_slots_total", "").await >= 2 * (u64::from(owned.len()) - 10),
        "the idle slots of every poll are counted"
    );
    let (_, hot_stats) =
        partitions(&samples).into_iter().find(|(_, p)| p.partition_id == hot_id).expect("a hot slot sample");
    assert_eq!((hot_stats.tenant.as_str(), hot_stats.table.as_str()), ("it-cluster", "slots"));
    assert_eq!(hot_stats.key_range, slot_key_range(hot));
    let latest_hot = partitions(&samples).into_iter().rev().find(|(_, p)| p.partition_id == hot_id).expect("hot");
    assert!(latest_hot.1.stored_bytes > 0, "3 keys hold some memory: {:?}", latest_hot.1);
    assert!(hosts(&samples).iter().any(|h| h.net_rx_bytes_per_sec > 0.0 && h.cpu_ratio > 0.0), "node stats move");
    assert_sane(&samples);

    // 2. The node dies: polls fail (counted) and the agent keeps serving; it comes back with a
    //    new run_id and fresh counters: no negative or huge rate, and the slots report again.
    let failures_before = metric(&agent, "lb_agent_valkey_polls_total", "connect_failed").await
        + metric(&agent, "lb_agent_valkey_polls_total", "timeout").await
        + metric(&agent, "lb_agent_valkey_polls_total", "failed").await;
    let baselines_before = metric(&agent, "lb_agent_valkey_polls_total", "baseline").await;
    cluster.kill(0).expect("kill node 0");
    let deadline = Instant::now() + WAIT;
    loop {
        let failures = metric(&agent, "lb_agent_valkey_polls_total", "connect_failed").await
            + metric(&agent, "lb_agent_valkey_polls_total", "timeout").await
            + metric(&agent, "lb_agent_valkey_polls_total", "failed").await;
        if failures >= failures_before + 2 {
            break;
        }
        assert!(Instant::now() < deadline, "failed polls of a dead node are not counted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let restarted_at = Instant::now();
    cluster.restart(0).await.expect("node 0 restarts");
    eprintln!("node 0 restarted in {:?}", restarted_at.elapsed());
    let cursor_at_restart = cursor;
    pull_until(&http, &mut samples, &mut cursor, "hot slot load after the restart", |s| {
        let after: Vec<Sample> = s.iter().filter(|x| x.cursor.0 > cursor_at_restart).cloned().collect();
        totals(&after).get(hot_id.as_str()).is_some_and(|&(ops, cpu)| ops > 0 && cpu > 0)
    })
    .await;
    assert!(
        metric(&agent, "lb_agent_valkey_polls_total", "baseline").await > baselines_before,
        "the restart (new run_id) makes a new baseline instead of a delta"
    );
    assert_sane(&samples);
    stop.store(true, Ordering::Relaxed);
    writer.await.expect("writer");

    // 2b. The hot slot migrates to node 1 and back: while away node 0's agent does not report
    //     it; back, it starts from its first reading (no delta across its absence) and shows the
    //     new load.
    migrate(&cluster, 0, 1, hot).await;
    // A poll that read the slot stats just before the handover is stamped when it ends, after
    // it: only polls stamped a whole interval later certainly started with the slot gone.
    let away_at_ms = chrono::Utc::now().timestamp_millis() + INTERVAL_MS as i64;
    pull_until(&http, &mut samples, &mut cursor, "two polls after the slot left", |s| {
        s.iter().filter(|x| x.timestamp_ms > away_at_ms && matches!(x.data, SampleData::Host(_))).count() >= 2
    })
    .await;
    let reported_while_away = partitions(&samples)
        .into_iter()
        .filter(|(x, p)| x.timestamp_ms > away_at_ms && p.partition_id == hot_id)
        .count();
    assert_eq!(reported_while_away, 0, "a slot node 0 no longer owns is not reported by it");
    migrate(&cluster, 1, 0, hot).await;
    let back_at_ms = chrono::Utc::now().timestamp_millis();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = spawn_writer(cluster.addr(0), cluster.connect_options(), hot, warm, stop.clone(), writes.clone());
    pull_until(&http, &mut samples, &mut cursor, "hot slot load after it came back", |s| {
        partitions(s).iter().any(|(x, p)| x.timestamp_ms > back_at_ms && p.partition_id == hot_id && p.ops() > 0)
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    writer.await.expect("writer");
    assert_sane(&samples);

    // 3. Slot stats turned off live: one warning, node stats only, no crash; turned on again:
    //    per-slot samples come back without a restart.
    let mut node1 = cluster.connect(1).await.expect("connect node 1");
    let set_slot_stats =
        |on: &'static str| redis::cmd("CONFIG").arg("SET").arg("cluster-slot-stats-enabled").arg(on).to_owned();
    node1.query("CONFIG SET", &set_slot_stats("no")).await.expect("slot stats off");
    let dir1 = tempfile::tempdir().expect("temp dir");
    let node_only_before = metric(&agent, "lb_agent_valkey_polls_total", "node_only").await;
    let (agent1, _tx1, http1) = start(agent_config(dir1.path(), "valkey-n1", &cluster.addr(1))).await;
    let (mut samples1, mut cursor1) = (Vec::new(), 0);
    pull_until(&http1, &mut samples1, &mut cursor1, "node stats without slot stats", |s| hosts(s).len() >= 3).await;
    assert!(partitions(&samples1).is_empty(), "no per-slot samples without the counters");
    assert!(metric(&agent1, "lb_agent_valkey_polls_total", "node_only").await >= node_only_before + 3);
    assert_sane(&samples1);
    node1.query("CONFIG SET", &set_slot_stats("yes")).await.expect("slot stats on");
    // Node 1 is idle: a writer on two of its slots makes them change.
    let node1_slots = SlotRange::even_split(3)[1];
    let (a, b) = (node1_slots.start(), Slot::new(node1_slots.start().get() + 1).expect("slot"));
    let stop1 = Arc::new(AtomicBool::new(false));
    let writer1 = spawn_writer(cluster.addr(1), cluster.connect_options(), a, b, stop1.clone(), writes.clone());
    pull_until(&http1, &mut samples1, &mut cursor1, "slot samples once the counters are on", |s| {
        totals(s).contains_key(slot_partition_id(a).as_str())
    })
    .await;
    stop1.store(true, Ordering::Relaxed);
    writer1.await.expect("writer");
    let reported: Vec<Slot> =
        totals(&samples1).keys().filter_map(|id| slot_of_partition(&id.parse().expect("id"))).collect();
    assert!(reported.iter().all(|s| node1_slots.contains(*s)), "node 1's own slots only: {reported:?}");
    assert!(agent1.stop(STOP).await, "agent 1 stops in time");

    // 4. A server without cluster mode: SLOT-STATS is refused; node stats only, no crash.
    let standalone = Standalone::start(cluster.binary(), data_dir.path()).await;
    let dir2 = tempfile::tempdir().expect("temp dir");
    let (agent2, tx2, http2) = start(agent_config(dir2.path(), "valkey-standalone", &standalone.addr)).await;
    let (mut samples2, mut cursor2) = (Vec::new(), 0);
    pull_until(&http2, &mut samples2, &mut cursor2, "node stats of a standalone server", |s| hosts(s).len() >= 2).await;
    assert!(partitions(&samples2).is_empty());
    assert_sane(&samples2);

    // 5. A node that hangs (SIGSTOP: TCP still accepts, nothing answers) fails the poll by the
    //    deadline, counted as a timeout; once it runs again the agent recovers on its own.
    let timeouts_before = metric(&agent2, "lb_agent_valkey_polls_total", "timeout").await;
    standalone.signal("-STOP");
    wait_for_metric(&agent2, "timeout", timeouts_before + 1).await;
    standalone.signal("-CONT");
    let node_only_now = metric(&agent2, "lb_agent_valkey_polls_total", "node_only").await;
    wait_for_metric(&agent2, "node_only", node_only_now + 2).await;

    // 6. Live reload: the same agent pointed at cluster node 2 under another cluster name
    //    reports node 2's slots, from a fresh baseline.
    let mut reloaded = agent_config(dir2.path(), "valkey-standalone", &cluster.addr(2));
    if let Some(SourceConfig::Valkey(source)) = &mut reloaded.source {
        source.cluster_name = "reloaded".to_owned();
    }
    tx2.send(Arc::new(reloaded)).expect("the agent watches its config");
    // Node 2 is idle: a writer on two of its slots makes them change (only those are reported).
    let node2 = SlotRange::even_split(3)[2];
    let (a, b) = (node2.start(), Slot::new(node2.start().get() + 1).expect("slot"));
    let stop2 = Arc::new(AtomicBool::new(false));
    let writer2 = spawn_writer(cluster.addr(2), cluster.connect_options(), a, b, stop2.clone(), writes.clone());
    pull_until(&http2, &mut samples2, &mut cursor2, "node 2's slots after a live address change", |s| {
        partitions(s).iter().any(|(_, p)| p.tenant.as_str() == "reloaded")
    })
    .await;
    stop2.store(true, Ordering::Relaxed);
    writer2.await.expect("writer");
    for (_, p) in partitions(&samples2) {
        let slot = slot_of_partition(&p.partition_id).expect("a slot partition");
        assert!(node2.contains(slot) && p.tenant.as_str() == "reloaded", "{p:?}");
    }
    assert_sane(&samples2);
    assert!(agent2.stop(STOP).await, "agent 2 stops in time");
    assert!(agent.stop(STOP).await, "agent 0 stops in time");
}

/// A `valkey-server` without cluster mode, killed on drop.
struct Standalone {
    child: Child,
    addr: NodeAddr,
}

impl Standalone {
    async fn start(binary: &Path, parent: &Path) -> Self {
        let dir = parent.join("standalone");
        std::fs::create_dir_all(&dir).expect("standalone dir");
        // A port the OS just handed out; the server takes it a moment later.
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
        let child = Command::new(binary)
            .args(["--bind", "127.0.0.1", "--port", &port.to_string(), "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("valkey-server starts");
        // Owned from here on: a failed wait below kills and reaps it in `drop`.
        let server = Self { child, addr: NodeAddr::new("127.0.0.1", port) };
        let deadline = Instant::now() + WAIT;
        loop {
            if let Ok(mut client) = NodeClient::connect(&server.addr, &ConnectOptions::default()).await
                && client.ping().await.is_ok()
            {
                return server;
            }
            assert!(Instant::now() < deadline, "standalone valkey-server did not answer on {}", server.addr);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Standalone {
    /// Sends `signal` (`-STOP`, `-CONT`) to the server with `kill(1)`.
    fn signal(&self, signal: &str) {
        let status = Command::new("kill").arg(signal).arg(self.child.id().to_string()).status().expect("kill runs");
        assert!(status.success(), "kill {signal} failed");
    }
}

impl Drop for Standalone {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
