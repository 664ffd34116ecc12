//! `lb up --backend valkey --attach HOST:PORT`: lb beside a Valkey cluster that already runs.
//!
//! From one seed address it reads `CLUSTER NODES`, takes every primary that serves (healthy,
//! addressable), and starts what [`crate::valkey_up`] starts for a local cluster, minus the
//! cluster and the load: the ops server with the Valkey adapter (seeds: every primary), one
//! agent per primary with its worker id derived the way the ops server derives it (so the two
//! can never disagree), and the master. Capacity is each primary's main thread (nothing to
//! measure or configure). Auth is on, with the data directory's tokens ([`crate::tokens`]).
//!
//! Every component is started **from the config file it writes** into the data directory —
//! `ops-server.toml`, `agent-<worker>.toml` per primary, `master.toml`, each with the port it
//! listens on — so `lb ops-server --config`, `lb agent --config` and `lb master --config` on
//! those files start the same system as separate processes (files holding a password or token
//! are readable by their owner only).
//!
//! It follows the cluster: every [`TOPOLOGY_EVERY`] it reads `CLUSTER NODES` again, starts an
//! agent (and writes its config) for a primary that appeared, and stops the agent of one that
//! is gone; the ops server reads the layout from the cluster itself on every topology read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use lb_common::config::watch::ConfigHandle;
use lb_common::ids::WorkerId;
use lb_ops_server::config::{ValkeyStorageConfig, WorkerIdScheme};
use lb_valkey::{ConnectOptions, NodeAddr, NodeClient};
use tokio::sync::{Mutex, watch};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::tokens::{DemoTokens, LBCTL_FILE, TOKENS_FILE, write_lbctl_config, write_private};
use crate::up::{WatchedMaster, bind, parse, start_watched_master_on};
use crate::valkey_up::{master_sections, ops_server_cadence};

/// How often the cluster's primaries are read again to follow nodes added or removed.
pub const TOPOLOGY_EVERY: Duration = Duration::from_secs(5);

/// Options of `up --backend valkey --attach`.
#[derive(Debug, Clone)]
pub struct AttachOptions {
    /// `host:port` of any node of the cluster.
    pub seed: String,
    /// ACL user and password of the cluster, when it needs them (never logged).
    pub username: Option<String>,
    pub password: Option<String>,
    /// Configs, tokens and every component's SQLite file go here.
    pub data_dir: PathBuf,
    /// The address lb's own components listen on (`127.0.0.1`: free ports are picked).
    pub host: String,
    /// Agent poll and master collection cadence.
    pub interval: Duration,
    /// How often the primaries are read again ([`TOPOLOGY_EVERY`]).
    pub topology_every: Duration,
    /// Worker overload and imbalance in `auto` (true) or `dry_run` (false: lb proposes, an
    /// operator approves).
    pub auto: bool,
    /// Tokens to run with instead of the data directory's own (tests use known ones).
    pub tokens: Option<DemoTokens>,
}

impl AttachOptions {
    pub fn new(seed: impl Into<String>, data_dir: PathBuf) -> Self {
        Self {
            seed: seed.into(),
            username: None,
            password: None,
            data_dir,
            host: "127.0.0.1".to_owned(),
            interval: Duration::from_secs(1),
            topology_every: TOPOLOGY_EVERY,
            auto: true,
            tokens: None,
        }
    }

    fn connect_options(&self) -> ConnectOptions {
        ConnectOptions { username: self.username.clone(), password: self.password.clone(), ..ConnectOptions::default() }
    }
}

/// The serving primaries the seed knows, by address, in address order.
pub async fn primaries(seed: &NodeAddr, options: &ConnectOptions) -> anyhow::Result<Vec<NodeAddr>> {
    let mut client = NodeClient::connect(seed, options).await.with_context(|| {
        format!("cannot reach the seed {seed} (is it a node's client port, and the password right?)")
    })?;
    let nodes = client.cluster_nodes().await.with_context(|| {
        format!("{seed} did not answer CLUSTER NODES: lb needs a node of a cluster (cluster-enabled yes)")
    })?;
    let mut out: Vec<NodeAddr> = nodes
        .iter()
        .filter(|n| n.is_primary() && n.is_healthy() && !n.slots.is_empty())
        .map(|n| n.addr.clone().unwrap_or_else(|| seed.clone()))
        .collect();
    out.sort_by(|a, b| (&a.host, a.port).cmp(&(&b.host, b.port)));
    out.dedup();
    anyhow::ensure!(!out.is_empty(), "the cluster of {seed} has no serving primary that owns slots");
    Ok(out)
}

/// `port` when every primary has a port of its own (one machine, or one node per port), else
/// `address`: the scheme both the ops server and the agents name workers by.
pub fn worker_scheme(primaries: &[NodeAddr]) -> WorkerIdScheme {
    let mut ports: Vec<u16> = primaries.iter().map(|a| a.port).collect();
    ports.sort_unstable();
    ports.dedup();
    if ports.len() == primaries.len() { WorkerIdScheme::Port } else { WorkerIdScheme::Address }
}

/// Everything `--attach` started.
pub struct Attached {
    pub ops_server: lb_ops_server::RunningOpsServer,
    pub master: lb_master::RunningMaster,
    pub master_config: ConfigHandle<lb_master::config::MasterConfig>,
    /// The agents by worker id, with the address each watches; the follower adds and removes.
    pub agents: Arc<Mutex<BTreeMap<WorkerId, (NodeAddr, lb_agent::RunningAgent)>>>,
    /// The config files written, one per component (agents added later write theirs too).
    pub config_dir: PathBuf,
    pub tokens: DemoTokens,
    pub seed: NodeAddr,
    follower: Option<tokio::task::JoinHandle<()>>,
    cancel: CancellationToken,
}

impl std::fmt::Debug for Attached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attached")
            .field("seed", &self.seed)
            .field("config_dir", &self.config_dir)
            .finish_non_exhaustive()
    }
}

/// What an agent's config needs besides its node.
#[derive(Debug, Clone)]
struct AgentTemplate {
    data_dir: PathBuf,
    host: String,
    interval_ms: u64,
    ops_url: String,
    agent_token: String,
    username: Option<String>,
    password: Option<String>,
    storage: ValkeyStorageConfig,
}

impl AgentTemplate {
    /// Writes `agent-<worker>.toml` for the primary at `addr` and starts the agent from it.
    async fn start(&self, addr: &NodeAddr) -> anyhow::Result<(WorkerId, lb_agent::RunningAgent)> {
        let worker = self.storage.worker_id(addr).with_context(|| format!("no valid worker id for {addr}"))?;
        let listener = bind(&self.host).await?;
        let listen = listener.local_addr()?;
        let auth = auth_toml(self.username.as_deref(), self.password.as_deref());
        let text = format!(
            "# Written by lb up --backend valkey --attach: the agent beside primary {addr}.\n\
             # Run it alone with: lb agent --config <this file>\n\
             worker_id = \"{worker}\"\n[http]\nlisten = \"{listen}\"\n[store]\npath = \"{store}\"\n\
             [host]\nenabled = false\n\
             [source]\nkind = \"valkey\"\naddress = \"{addr}\"\ncluster_name = \"{cluster}\"\ninterval_ms = {interval}\n{auth}\
             [ops_server]\nurl = \"{ops}\"\ntoken = \"{token}\"\n",
            store = self.data_dir.join(format!("agent-{worker}.sqlite")).display(),
            cluster = self.storage.cluster,
            interval = self.interval_ms,
            ops = self.ops_url,
            token = self.agent_token,
        );
        let config: lb_agent::config::AgentConfig = parse(&text, "agent.toml")?;
        write_private(&self.data_dir.join(format!("agent-{worker}.toml")), &text)?;
        let (_tx, rx) = watch::channel(Arc::new(config));
        let agent = lb_agent::start(rx, listener, None).await?;
        Ok((worker, agent))
    }
}

/// Attaches to the cluster of `options.seed`: see the module doc.
pub async fn attach(options: &AttachOptions, master_extra: &str) -> anyhow::Result<Attached> {
    let seed = lb_ops_server::config::parse_valkey_addr(&options.seed)
        .with_context(|| format!("--attach {:?}: expected host:port of a cluster node", options.seed))?;
    let connect = options.connect_options();
    let nodes = primaries(&seed, &connect).await?;
    std::fs::create_dir_all(&options.data_dir)
        .with_context(|| format!("cannot create the data directory {}", options.data_dir.display()))?;
    let tokens = match &options.tokens {
        Some(tokens) => tokens.clone(),
        None => DemoTokens::load_or_create(&options.data_dir)?,
    };
    let interval_ms = options.interval.as_millis() as u64;
    let data = |name: &str| options.data_dir.join(name).display().to_string();

    let mut storage = ValkeyStorageConfig::new(nodes.iter().map(ToString::to_string).collect());
    storage.worker_ids = worker_scheme(&nodes);
    storage.username = options.username.clone();
    storage.password = options.password.clone();
    let scheme = match storage.worker_ids {
        WorkerIdScheme::Port => "port",
        WorkerIdScheme::Address => "address",
    };
    let auth = auth_toml(options.username.as_deref(), options.password.as_deref());
    let ops_listener = bind(&options.host).await?;
    let ops_addr = ops_listener.local_addr()?;
    let ops_text = format!(
        "# Written by lb up --backend valkey --attach {seed}. Run it alone with:\n\
         #   lb ops-server --config <this file>\n\
         [http]\nlisten = \"{ops_addr}\"\n[audit]\npath = \"{audit}\"\n\
         [storage]\nkind = \"valkey\"\n\
         [storage.valkey]\nseeds = [{seeds}]\nworker_ids = \"{scheme}\"\n{auth}\
         {cadence}{tokens}",
        audit = data("ops-server-audit.sqlite"),
        seeds = nodes.iter().map(|a| format!("\"{a}\"")).collect::<Vec<_>>().join(", "),
        cadence = ops_server_cadence(interval_ms),
        tokens = tokens.ops_server_toml(),
    );
    let ops_config: lb_ops_server::config::OpsServerConfig = parse(&ops_text, "ops-server.toml")?;
    write_private(&options.data_dir.join("ops-server.toml"), &ops_text)?;
    let (_ops_tx, ops_rx) = watch::channel(Arc::new(ops_config));
    let ops_server = lb_ops_server::start(ops_rx, ops_listener, None).await?;
    let ops_url = format!("http://{ops_addr}");

    let template = AgentTemplate {
        data_dir: options.data_dir.clone(),
        host: options.host.clone(),
        interval_ms,
        ops_url: ops_url.clone(),
        agent_token: tokens.agent.token.clone(),
        username: options.username.clone(),
        password: options.password.clone(),
        storage,
    };
    let mut agents = BTreeMap::new();
    for addr in &nodes {
        let (worker, agent) = template.start(addr).await?;
        agents.insert(worker, (addr.clone(), agent));
    }

    let master_listener = bind(&options.host).await?;
    let mode = if options.auto { "auto" } else { "dry_run" };
    let master_text = format!(
        "# Written by lb up --backend valkey --attach {seed}. Policies, thresholds, caps and modes\n\
         # reload live when this file changes; [http] and [store] need a restart. Run it alone with:\n\
         #   lb master --config <this file>\n\
         [http]\nlisten = \"{listen}\"\n[ops_server]\nurl = \"{ops_url}\"\ntoken = \"{service}\"\n[store]\npath = \"{store}\"\n\
         {sections}{master_extra}\n{people}",
        listen = master_listener.local_addr()?,
        service = tokens.service.token,
        store = data("master-results.sqlite"),
        sections = master_sections(interval_ms, mode),
        people = tokens.master_toml(),
    );
    let WatchedMaster { master, config: master_config, config_path, watch_cancel } =
        start_watched_master_on(&master_text, &options.data_dir, master_listener).await?;
    set_private(&config_path)?;
    crate::up::write_prometheus_config(&options.data_dir, master.addr())?;
    write_lbctl_config(&options.data_dir, "lb up --backend valkey --attach", master.addr(), &ops_url, &tokens)?;

    let agents = Arc::new(Mutex::new(agents));
    let follower = tokio::spawn(follow(
        seed.clone(),
        connect,
        template,
        agents.clone(),
        options.topology_every,
        watch_cancel.clone(),
    ));
    Ok(Attached {
        ops_server,
        master,
        master_config,
        agents,
        config_dir: options.data_dir.clone(),
        tokens,
        seed,
        follower: Some(follower),
        cancel: watch_cancel,
    })
}

/// Reads the primaries every `every` and starts or stops agents to match.
async fn follow(
    seed: NodeAddr,
    connect: ConnectOptions,
    template: AgentTemplate,
    agents: Arc<Mutex<BTreeMap<WorkerId, (NodeAddr, lb_agent::RunningAgent)>>>,
    every: Duration,
    cancel: CancellationToken,
) {
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        // Any known primary will do when the seed itself is gone.
        let mut candidates = vec![seed.clone()];
        candidates.extend(agents.lock().await.values().map(|(a, _)| a.clone()));
        let mut now = None;
        for candidate in &candidates {
            match primaries(candidate, &connect).await {
                Ok(found) => {
                    now = Some(found);
                    break;
                }
                Err(error) => {
                    warn!(node = %candidate, error = format!("{error:#}"), "attach: cannot read the cluster's primaries")
                }
            }
        }
        let Some(now) = now else { continue };
        let mut agents = agents.lock().await;
        let gone: Vec<WorkerId> =
            agents.iter().filter(|(_, (addr, _))| !now.contains(addr)).map(|(w, _)| w.clone()).collect();
        for worker in gone {
            if let Some((addr, agent)) = agents.remove(&worker) {
                info!(%worker, node = %addr, "attach: primary left the cluster (or stopped serving): its agent stops");
                agent.stop(Duration::from_secs(5)).await;
            }
        }
        let new: Vec<NodeAddr> =
            now.iter().filter(|a| !agents.values().any(|(known, _)| known == *a)).cloned().collect();
        for addr in &new {
            match template.start(addr).await {
                Ok((worker, agent)) => {
                    info!(%worker, node = %addr, "attach: new primary: its agent started");
                    agents.insert(worker, (addr.clone(), agent));
                }
                Err(error) => {
                    warn!(node = %addr, error = format!("{error:#}"), "attach: cannot start an agent for a new primary")
                }
            }
        }
    }
}

impl Attached {
    /// Stops the follower, the master, the agents and the ops server, each within `deadline`.
    pub async fn stop(mut self, deadline: Duration) -> bool {
        self.cancel.cancel();
        if let Some(follower) = self.follower.take() {
            let _ = follower.await;
        }
        let mut clean = self.master.stop(deadline).await;
        let agents = std::mem::take(&mut *self.agents.lock().await);
        for (_, (_, agent)) in agents {
            clean &= agent.stop(deadline).await;
        }
        clean & self.ops_server.stop(deadline).await
    }

    /// The URLs and files to print.
    pub async fn urls(&self) -> Vec<(String, String)> {
        let file = |name: &str| self.config_dir.join(name).display().to_string();
        let mut urls = vec![
            ("console".to_owned(), format!("http://{}/console/", self.master.addr())),
            ("master API (/api/v1)".to_owned(), format!("http://{}", self.master.addr())),
            ("master config (edited live)".to_owned(), file("master.toml")),
            ("ops server".to_owned(), format!("http://{}", self.ops_server.addr())),
            ("ops server config".to_owned(), file("ops-server.toml")),
            ("tokens (operator, viewer, ...)".to_owned(), file(TOKENS_FILE)),
            ("lbctl config (operator token)".to_owned(), file(LBCTL_FILE)),
            ("prometheus config".to_owned(), file("prometheus.yml")),
        ];
        for (worker, (addr, agent)) in self.agents.lock().await.iter() {
            urls.push((format!("agent {worker} (node {addr})"), format!("http://{}", agent.addr())));
        }
        urls
    }
}

/// `username = ...` / `password = ...` lines for the cluster's ACL user, as TOML strings
/// (quotes and backslashes escaped: passwords may hold anything).
fn auth_toml(username: Option<&str>, password: Option<&str>) -> String {
    let line = |key: &str, value: &str| format!("{key} = {}\n", toml::Value::String(value.to_owned()));
    username.map(|u| line("username", u)).unwrap_or_default()
        + &password.map(|p| line("password", p)).unwrap_or_default()
}

fn set_private(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("cannot make {} private", path.display()))
}

/// `lb up --backend valkey --attach SEED`: attaches, prints where everything is (and how to run
/// each component alone), prints lb's events as they happen, and stops on Ctrl-C (or SIGTERM).
pub async fn launch(options: &AttachOptions) -> anyhow::Result<()> {
    let started_ms = chrono::Utc::now().timestamp_millis();
    let attached = attach(options, "").await?;
    let workers = attached.agents.lock().await.len();
    println!(
        "lb is attached to the valkey cluster of {} ({workers} primaries; policies in {}); Ctrl-C stops lb, not the cluster.",
        attached.seed,
        if options.auto { "auto" } else { "dry_run: approve with lbctl or the console" }
    );
    for (what, url) in attached.urls().await {
        println!("  {what:<44} {url}");
    }
    println!(
        "  the same as separate processes: lb ops-server --config {dir}/ops-server.toml, \
         lb agent --config {dir}/agent-<worker>.toml each, lb master --config {dir}/master.toml",
        dir = attached.config_dir.display()
    );
    println!("events (minutes:seconds since start):");
    let master = lb_common::clients::MasterClient::new(
        format!("http://{}", attached.master.addr()),
        &lb_common::config::shared::HttpClientConfig::default(),
    );
    let stop_events = CancellationToken::new();
    let events = tokio::spawn(crate::events::follow(master, started_ms, stop_events.clone()));
    let signal = lb_common::shutdown::wait_for_signal().await;
    info!(signal, "shutting down");
    stop_events.cancel();
    let _ = events.await;
    if !attached.stop(Duration::from_secs(10)).await {
        anyhow::bail!("shutdown did not finish within 10 s per component");
    }
    Ok(())
}
