//! `lb up --backend valkey`: lb against a real Valkey cluster, all in one process.
//!
//! The simulated testbed of [`crate::up`] proves the control loop; this proves it on a storage
//! system nobody here wrote. It starts a [`LocalCluster`] of `nodes` real `valkey-server`
//! primaries on loopback (slots split evenly, slot stats on), one agent per node with the
//! Valkey source (worker id `valkey-<port>`, as the ops server's `worker_ids = "port"` names
//! it), the ops server with the Valkey adapter (move = atomic slot migration, group = give a
//! slot its node), and the master with worker overload and imbalance in `auto` (its config is
//! a real file, `<data dir>/master.toml`, watched and reloaded like in `up`). A
//! [`LoadGenerator`] then drives a hot-slot workload: uniform background keys, and from
//! `onset` on most operations on a few slots of node 0 (see [`hot_slots_on`]).
//!
//! Start order follows who needs whose address: cluster, ops server (seeds), agents (register
//! with it), master (collects through it), load. Stop order is the reverse. Auth is on, as in
//! [`crate::up`]: the data directory's tokens (`tokens.toml`, `lbctl.toml`, both 0600).
//!
//! Load is main-thread CPU: each node's capacity is its one main thread, its load that
//! thread's busy time (the agents read it from `INFO`), so nothing is configured. The
//! launcher's workload ([`ValkeyUpOptions::launcher`]) makes one node's hot slots run an
//! expensive command, so that node is the busiest in CPU while every node serves about the same
//! command rate. [`ValkeyUpOptions::ops_capacity`] is the older setup the end-to-end tests
//! keep: a hand-set node capacity in ops/s (an override the ops server still takes), with the
//! hot node over it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use lb_common::config::watch::ConfigHandle;
use lb_common::ids::WorkerId;
use lb_valkey::{LocalCluster, LocalClusterConfig, Slot, SlotRange};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::tokens::{DemoTokens, TOKENS_FILE, write_lbctl_config};
use crate::up::{WatchedMaster, bind, parse, start_watched_master};
use crate::valkey_load::{LoadGenerator, LoadSpec};

/// Slots between the hot slots picked on one node: spread over its range so they are not one
/// contiguous run (each is a separate migration, as in a real hotspot).
const HOT_SLOT_SPACING: u16 = 997;
/// The master's HTTP deadline towards the ops server: a topology of 16,384 slot partitions
/// and pages of up to 20,000 samples take well under a second on an idle machine, but a
/// 2-core machine that also runs the cluster, the load and a compiler can stall one for
/// several seconds; 15 s keeps the master from dropping a whole round for it.
const MASTER_CLIENT_DEADLINE_MS: u64 = 15_000;

/// Options of `up --backend valkey`.
#[derive(Debug, Clone)]
pub struct ValkeyUpOptions {
    /// Primaries (at least 2: balancing needs somewhere to move to).
    pub nodes: usize,
    /// Node directories and every component's SQLite file go here.
    pub data_dir: PathBuf,
    /// `127.0.0.1`: ports are picked free.
    pub host: String,
    /// Agent poll and master collection cadence.
    pub interval: Duration,
    /// A hand-set cap on what one node serves (`[storage.valkey] node_ops_per_sec`), beside its
    /// main thread's core; `None`: CPU alone.
    pub node_ops_per_sec: Option<f64>,
    /// The workload; `None` starts lb and the cluster without load.
    pub load: Option<LoadSpec>,
    /// Worker overload and imbalance in `auto` (true) or `off` (false: lb only watches, the
    /// baseline runs of the benchmark).
    pub balance: bool,
}

impl ValkeyUpOptions {
    /// The launcher's defaults for `nodes` nodes, with no capacity figure: 1 s interval, one
    /// hot slot per node, all on node 0, from 10 s; 8 clients at 8,000 ops/s in all, half of them
    /// on the hot slots, whose reads are expensive (a script of 200 reads, ~150 µs of main
    /// thread against ~8 µs for a `GET`). Node 0's main thread is then busy ~0.3 of a second per
    /// second and the others' ~0.01 while each serves about the same command rate; one hot slot
    /// per node evens them out.
    pub fn launcher(nodes: usize, data_dir: PathBuf) -> Self {
        let hot = hot_slots_on(nodes, 0, nodes);
        let mut load = LoadSpec::hot_slots(hot, Duration::from_secs(10));
        load.rate_ops_per_sec = Some(8_000.0);
        load.hot_share = 0.5;
        load.hot_read_cost = 200;
        Self {
            nodes,
            data_dir,
            host: "127.0.0.1".to_owned(),
            interval: Duration::from_secs(1),
            node_ops_per_sec: None,
            load: Some(load),
            balance: true,
        }
    }

    /// The end-to-end tests' setup, with a hand-set node capacity: 3 hot slots on node 0 from
    /// 10 s, 8 clients at 6,000 ops/s in all (70 % hot, 1,400 ops/s per hot slot), and a node
    /// capacity of 4,500 ops/s: the hot node then runs at ~1.07 of capacity (worker overload
    /// engages at 0.85); one hot slot per node puts every node near 2,000 (0.44 with 3 nodes),
    /// and even two hot slots on one node stay under the high watermark (3,400, 0.76).
    pub fn ops_capacity(nodes: usize, data_dir: PathBuf) -> Self {
        let hot = hot_slots_on(nodes, 0, 3);
        let mut load = LoadSpec::hot_slots(hot, Duration::from_secs(10));
        load.rate_ops_per_sec = Some(6_000.0);
        Self {
            nodes,
            data_dir,
            host: "127.0.0.1".to_owned(),
            interval: Duration::from_secs(1),
            node_ops_per_sec: Some(4_500.0),
            load: Some(load),
            balance: true,
        }
    }
}

/// `count` slots owned by node `index` of a fresh `nodes`-node [`LocalCluster`] (slots split
/// evenly in node order), spread [`HOT_SLOT_SPACING`] apart from 100 past the range's start.
pub fn hot_slots_on(nodes: usize, index: usize, count: usize) -> Vec<Slot> {
    let ranges = SlotRange::even_split(nodes.max(1));
    let range = ranges[index.min(ranges.len() - 1)];
    (0..count as u16)
        .filter_map(|i| {
            let n = range.start().get().saturating_add(100).saturating_add(i.saturating_mul(HOT_SLOT_SPACING));
            Slot::new(n).filter(|s| range.contains(*s))
        })
        .collect()
}

/// Everything `up --backend valkey` started.
#[derive(Debug)]
pub struct RunningValkey {
    pub cluster: LocalCluster,
    pub ops_server: lb_ops_server::RunningOpsServer,
    pub agents: Vec<(WorkerId, lb_agent::RunningAgent)>,
    pub master: lb_master::RunningMaster,
    pub master_config: ConfigHandle<lb_master::config::MasterConfig>,
    pub master_config_path: PathBuf,
    /// A `prometheus.yml` that scrapes this system (see [`crate::up::write_prometheus_config`]).
    pub prometheus_config_path: PathBuf,
    /// The run's tokens (operator, viewer, the master's service, the agents'): auth is on.
    pub tokens: DemoTokens,
    pub tokens_path: PathBuf,
    /// `lbctl --config` for this run (operator token).
    pub lbctl_config_path: PathBuf,
    /// The workload, when [`ValkeyUpOptions::load`] asked for one.
    pub load: Option<LoadGenerator>,
    watch_cancel: CancellationToken,
}

/// The worker id the ops server's `worker_ids = "port"` gives the node on `port`.
pub fn worker_id(port: u16) -> anyhow::Result<WorkerId> {
    WorkerId::new(format!("valkey-{port}")).map_err(|e| anyhow::anyhow!("worker id for port {port}: {e}"))
}

/// Starts the cluster, lb and (optionally) the load. `overrides.master` is appended to the
/// generated master.toml (keys must not repeat generated ones).
pub async fn up_valkey(options: &ValkeyUpOptions, overrides: &crate::up::Overrides) -> anyhow::Result<RunningValkey> {
    anyhow::ensure!(
        options.nodes >= 2,
        "--nodes must be at least 2 (balancing needs a second node), got {}",
        options.nodes
    );
    anyhow::ensure!(
        options.node_ops_per_sec.is_none_or(|ops| ops.is_finite() && ops > 0.0),
        "node_ops_per_sec must be positive"
    );
    std::fs::create_dir_all(&options.data_dir)
        .with_context(|| format!("cannot create the data directory {}", options.data_dir.display()))?;
    let data = |name: &str| options.data_dir.join(name).display().to_string();
    let interval_ms = options.interval.as_millis() as u64;

    // Auth on, as in `up`: the data directory's own tokens (tests bring known ones).
    let tokens = match &overrides.tokens {
        Some(tokens) => tokens.clone(),
        None => DemoTokens::load_or_create(&options.data_dir)?,
    };
    let cluster = LocalCluster::start(LocalClusterConfig::new(options.nodes, options.data_dir.join("valkey")))
        .await
        .context("cannot start the local valkey cluster")?;
    let seeds: Vec<String> = cluster.addrs().iter().map(|a| format!("\"{a}\"")).collect();

    let ops_config: lb_ops_server::config::OpsServerConfig = parse(
        &format!(
            "[http]\nlisten = \"{host}:0\"\n[audit]\npath = \"{audit}\"\n\
             [storage]\nkind = \"valkey\"\n\
             [storage.valkey]\nseeds = [{seeds}]\nworker_ids = \"port\"\n{ops}poll_interval_ms = 50\n\
             {cadence}{tokens}",
            host = options.host,
            audit = data("ops-server-audit.sqlite"),
            seeds = seeds.join(", "),
            ops = options.node_ops_per_sec.map_or(String::new(), |ops| format!("node_ops_per_sec = {ops}\n")),
            cadence = ops_server_cadence(interval_ms),
            tokens = tokens.ops_server_toml(),
        ),
        "ops-server.toml",
    )?;
    let (_ops_tx, ops_rx) = watch::channel(Arc::new(ops_config));
    let ops_server = lb_ops_server::start(ops_rx, bind(&options.host).await?, None).await?;
    let ops_url = format!("http://{}", ops_server.addr());

    let mut agents = Vec::new();
    for addr in cluster.addrs() {
        let worker = worker_id(addr.port)?;
        let config: lb_agent::config::AgentConfig = parse(
            &format!(
                "worker_id = \"{worker}\"\n[http]\nlisten = \"{host}:0\"\n[store]\npath = \"{store}\"\n\
                 [host]\nenabled = false\n\
                 [source]\nkind = \"valkey\"\naddress = \"{addr}\"\ninterval_ms = {interval_ms}\n\
                 [ops_server]\nurl = \"{ops_url}\"\ntoken = \"{token}\"\n",
                host = options.host,
                token = tokens.agent.token,
                store = data(&format!("agent-{worker}.sqlite")),
            ),
            "agent.toml",
        )?;
        let (_tx, rx) = watch::channel(Arc::new(config));
        let agent = lb_agent::start(rx, bind(&options.host).await?, None).await?;
        agents.push((worker, agent));
    }

    let master_text = format!(
        "# Generated by lb up --backend valkey. Policies, thresholds, caps and modes reload\n\
         # live when this file changes; [http] and [store] need a restart.\n\
         [http]\nlisten = \"{host}:0\"\n[ops_server]\nurl = \"{ops_url}\"\ntoken = \"{service}\"\n[store]\npath = \"{store}\"\n\
         {sections}{extra}\n{people}",
        host = options.host,
        service = tokens.service.token,
        people = tokens.master_toml(),
        store = data("master-results.sqlite"),
        sections = master_sections(interval_ms, if options.balance { "auto" } else { "off" }),
        extra = overrides.master,
    );
    let WatchedMaster { master, config: master_config, config_path: master_path, watch_cancel } =
        start_watched_master(&master_text, &options.data_dir, &options.host).await?;
    let prometheus_config_path = crate::up::write_prometheus_config(&options.data_dir, master.addr())?;
    let lbctl_config_path =
        write_lbctl_config(&options.data_dir, "lb up --backend valkey", master.addr(), &ops_url, &tokens)?;

    let load = match &options.load {
        Some(spec) => Some(LoadGenerator::start(cluster.addrs(), cluster.connect_options(), spec.clone()).await?),
        None => None,
    };
    Ok(RunningValkey {
        cluster,
        ops_server,
        agents,
        master,
        master_config,
        master_config_path: master_path,
        prometheus_config_path,
        tokens,
        tokens_path: options.data_dir.join(TOKENS_FILE),
        lbctl_config_path,
        load,
        watch_cancel,
    })
}

impl RunningValkey {
    /// Stops the load, the master, the agents and the ops server (each within `deadline`), then
    /// the cluster. Returns whether all stopped clean.
    pub async fn stop(mut self, deadline: Duration) -> bool {
        if let Some(load) = self.load.take() {
            load.stop().await;
        }
        let mut clean = stopped("master", self.master.stop(deadline).await);
        self.watch_cancel.cancel();
        for (worker, agent) in self.agents {
            clean &= stopped(worker.as_str(), agent.stop(deadline).await);
        }
        clean &= stopped("ops server", self.ops_server.stop(deadline).await);
        self.cluster.shutdown();
        clean
    }

    /// The URLs and addresses to print (and the `redis-cli` command that reaches each node).
    pub fn urls(&self) -> Vec<(String, String)> {
        let mut urls = vec![
            ("console".to_owned(), format!("http://{}/console/", self.master.addr())),
            ("master API (/api/v1)".to_owned(), format!("http://{}", self.master.addr())),
            ("master config (edit to change policies live)".to_owned(), self.master_config_path.display().to_string()),
            ("prometheus config".to_owned(), self.prometheus_config_path.display().to_string()),
            ("ops server".to_owned(), format!("http://{}", self.ops_server.addr())),
            ("tokens (operator, viewer, ...)".to_owned(), self.tokens_path.display().to_string()),
            ("lbctl config (operator token)".to_owned(), self.lbctl_config_path.display().to_string()),
        ];
        for (worker, agent) in &self.agents {
            urls.push((format!("agent {worker}"), format!("http://{}", agent.addr())));
        }
        for (i, addr) in self.cluster.addrs().iter().enumerate() {
            urls.push((format!("valkey node {i} (redis-cli -c -p {})", addr.port), addr.to_string()));
        }
        urls
    }
}

/// The ops server's `[registry]`, `[collect]`, `[limits]` and `[executor]` for a Valkey run polled every
/// `interval_ms` (shared with [`crate::valkey_attach`]).
pub fn ops_server_cadence(interval_ms: u64) -> String {
    format!(
        "[registry]\nheartbeat_interval_ms = {hb}\ndown_after_ms = {down}\n\
         [collect]\nagent_deadline_ms = 3000\nmax_agent_deadline_ms = 8000\nlimit_per_agent = 20000\n\
         [limits]\nrequests_per_sec = 100000\n\
         [executor]\nmax_concurrent_per_worker = 1\n",
        hb = interval_ms.max(100),
        down = (interval_ms * 10).max(1000),
    )
}

/// The master's `[client]` and `[collector]` for a Valkey run at `interval_ms`, and worker
/// overload and imbalance in `mode` (shared with [`crate::valkey_attach`]).
pub fn master_sections(interval_ms: u64, mode: &str) -> String {
    format!(
        "[client]\ndeadline_ms = {MASTER_CLIENT_DEADLINE_MS}\n\
         [collector]\ninterval_ms = {collect}\nagent_deadline_ms = 3000\nlimit_per_agent = 20000\n\
         stale_after_ms = {stale}\ntopology_interval_ms = {topology}\n\
         [planner.worker_overload]\nmode = \"{mode}\"\n[planner.imbalance]\nmode = \"{mode}\"\n",
        collect = interval_ms.max(100),
        stale = (interval_ms * 5).max(1000),
        topology = (interval_ms * 2).max(100),
    )
}

fn stopped(what: &str, clean: bool) -> bool {
    if !clean {
        tracing::warn!(component = what, "did not stop within the deadline");
    }
    clean
}

/// `lb up --backend valkey`: starts everything with [`ValkeyUpOptions::launcher`],
/// prints where things are, reports node CPU and ops from `INFO` every 5 s, and stops on Ctrl-C (or
/// SIGTERM).
pub async fn launch(nodes: usize, data_dir: PathBuf, interval: Duration) -> anyhow::Result<()> {
    let mut options = ValkeyUpOptions::launcher(nodes, data_dir);
    options.interval = interval;
    let running = up_valkey(&options, &crate::up::Overrides::default()).await?;
    let hot = options.load.as_ref().map(|l| l.hot_slots.clone()).unwrap_or_default();
    println!(
        "lb is up on a {nodes}-node valkey cluster; hot slots {hot:?} on node 0 from {} s; Ctrl-C stops everything.",
        options.load.as_ref().map_or(0, |l| l.onset.as_secs())
    );
    for (what, url) in running.urls() {
        println!("  {what:<44} {url}");
    }
    let mut counters =
        crate::valkey_load::NodeCounters::new(running.cluster.addrs(), running.cluster.connect_options());
    counters.sample().await;
    let signal = {
        let signal = lb_common::shutdown::wait_for_signal();
        tokio::pin!(signal);
        loop {
            tokio::select! {
                s = &mut signal => break s,
                () = tokio::time::sleep(LAUNCHER_REPORT_EVERY) => {
                    let rates = counters.sample().await;
                    let ops: Vec<f64> = rates.iter().map(|r| r.as_ref().map_or(0.0, |r| r.ops_per_sec)).collect();
                    let cpu: Vec<f64> = rates.iter().map(|r| r.as_ref().map_or(0.0, |r| r.cpu_cores)).collect();
                    let shown = |v: &[f64], f: fn(f64) -> String| v.iter().map(|x| f(*x)).collect::<Vec<_>>().join(", ");
                    println!(
                        "node main-thread cpu (INFO) [{}], max/mean {:.2}; ops/s [{}], max/mean {:.2}",
                        shown(&cpu, |x| format!("{x:.2}")),
                        crate::valkey_load::max_over_mean(&cpu),
                        shown(&ops, |x| format!("{x:.0}")),
                        crate::valkey_load::max_over_mean(&ops)
                    );
                }
            }
        }
    };
    tracing::info!(signal, "shutting down");
    if !running.stop(Duration::from_secs(10)).await {
        anyhow::bail!("shutdown did not finish within 10 s per component");
    }
    Ok(())
}

/// How often the launcher prints node load: often enough to watch relief happen.
const LAUNCHER_REPORT_EVERY: Duration = Duration::from_secs(5);
