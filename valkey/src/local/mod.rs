//! A Valkey cluster of real `valkey-server` processes on loopback, for tests and the launcher.
//!
//! [`LocalCluster::start`] gives each node its own directory under the data dir (its
//! `nodes.conf`, `valkey.log` and `stdout.log`), picks ports whose cluster bus port
//! (port + 10000) is free too, starts the processes with cluster mode and slot stats on and
//! persistence off, waits until each answers `PING`, assigns the 16,384 slots in even
//! contiguous ranges (`CLUSTER ADDSLOTSRANGE`), joins the nodes (`CLUSTER MEET`) and waits until
//! every node reports `cluster_state:ok` and all agree on who owns every slot.
//!
//! No orphans: each server runs under a tiny `sh` watchdog whose stdin is a pipe from this
//! process. Closing the pipe (kill, drop) or this process dying for any reason (even
//! `SIGKILL`) gives the watchdog EOF, and it `SIGKILL`s its server and reaps it. `Drop` closes
//! every pipe and waits for the watchdogs.

mod binary;

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub use binary::{
    DEFAULT_TOOLS_DIR, INSTALL_SCRIPT, SERVER_ENV, TOOLS_DIR_ENV, find_valkey_server, locate_valkey_server,
};
use tracing::{debug, info, warn};

use crate::connection::{ConnectOptions, NodeClient, NodeError};
use crate::node_id::{NodeAddr, NodeId};
use crate::slot::{SLOT_COUNT, SlotRange};

/// Cluster bus port = client port + this, unless `cluster-port` says otherwise.
pub const CLUSTER_BUS_PORT_OFFSET: u16 = 10_000;
/// Failure detection in about two of these; short so tests see a killed node within seconds,
/// long enough not to flap when a 2-core CI machine is busy compiling.
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(2_000);
/// A fresh 3-node cluster is healthy within ~2 s on loopback; 30 s absorbs a loaded machine.
pub const DEFAULT_READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How often readiness is polled: gossip runs every 100 ms, so polling faster gains nothing.
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// Times a node is started on fresh ports when its port was taken meanwhile.
const MAX_PORT_ATTEMPTS: usize = 5;
const HOST: &str = "127.0.0.1";

/// Runs the server in the background, waits for EOF on stdin (the owner closed the pipe or
/// died), then kills and reaps it. Signals to the watchdog kill the server too.
const WATCHDOG_SCRIPT: &str = r#"
"$@" </dev/null &
pid=$!
trap 'kill -KILL "$pid" 2>/dev/null; wait "$pid"; exit 1' HUP INT TERM
while read -r _line; do :; done
kill -KILL "$pid" 2>/dev/null
wait "$pid"
exit 0
"#;

/// What to start.
#[derive(Debug, Clone)]
pub struct LocalClusterConfig {
    /// Number of primaries (at least 1).
    pub nodes: usize,
    /// Parent of the node directories (`node-0`, `node-1`, ...).
    pub data_dir: PathBuf,
    /// `None`: [`find_valkey_server`].
    pub server_binary: Option<PathBuf>,
    /// `cluster-node-timeout`.
    pub node_timeout: Duration,
    /// Bound on every wait (start-up, health, failure detection).
    pub ready_timeout: Duration,
    /// `requirepass` (and `masterauth`, which slot migration uses between nodes) for the
    /// `default` user; [`LocalCluster::connect`] authenticates with it.
    pub password: Option<String>,
    /// Extra `--name value` arguments for every node.
    pub extra_args: Vec<String>,
}

impl LocalClusterConfig {
    pub fn new(nodes: usize, data_dir: impl Into<PathBuf>) -> Self {
        Self {
            nodes,
            data_dir: data_dir.into(),
            server_binary: None,
            node_timeout: DEFAULT_NODE_TIMEOUT,
            ready_timeout: DEFAULT_READY_TIMEOUT,
            password: None,
            extra_args: Vec::new(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LocalClusterError {
    #[error(
        "valkey-server not found: {detail}. Run `scripts/install-valkey.sh` (installs into \
         $LB_TOOLS_DIR, default /var/tmp/lb-tools) or set {SERVER_ENV} to a valkey-server binary"
    )]
    BinaryNotFound { detail: String },
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
    #[error("invalid local cluster config: {0}")]
    Config(String),
    #[error("no free port pair (port and port+{CLUSTER_BUS_PORT_OFFSET}) on 127.0.0.1")]
    NoFreePort,
    #[error("node {index} ({addr}): {source}")]
    Node { index: usize, addr: NodeAddr, source: Box<NodeError> },
    #[error("{what} not reached within {waited:?}; last: {last}")]
    NotReady { what: String, waited: Duration, last: String },
    #[error("node {index} is not running")]
    NotRunning { index: usize },
}

/// One node's process and place.
struct LocalNode {
    port: u16,
    dir: PathBuf,
    id: NodeId,
    process: Option<NodeProcess>,
}

/// What a server just spawned came to (see `LocalCluster::await_start`).
enum Started {
    /// A server answers PING on its port, running in this directory (ours, or another's that
    /// took the port first).
    Answered(PathBuf),
    /// It exited without answering.
    Exited,
}

struct NodeProcess {
    watchdog: Child,
    /// Dropping it closes the pipe: the watchdog kills the server.
    stdin: Option<ChildStdin>,
}

impl NodeProcess {
    /// Closes the pipe and waits (bounded) for the watchdog, which kills and reaps the server.
    fn stop(&mut self) {
        drop(self.stdin.take());
        // SIGKILL and reaping take milliseconds; the bound only guards against a wedged shell.
        const STOP_TIMEOUT: Duration = Duration::from_secs(5);
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            match self.watchdog.try_wait() {
                Ok(Some(_)) => return,
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
                _ => {
                    warn!(pid = self.watchdog.id(), "valkey watchdog did not exit: killing it");
                    let _ = self.watchdog.kill();
                    let _ = self.watchdog.wait();
                    return;
                }
            }
        }
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A running local cluster; see the module docs. Nodes are numbered `0..len()`; methods taking
/// an `index` panic when it is out of range, which is a bug in the caller, not bad input.
pub struct LocalCluster {
    config: LocalClusterConfig,
    binary: PathBuf,
    nodes: Vec<LocalNode>,
}

impl std::fmt::Debug for LocalCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalCluster")
            .field("binary", &self.binary)
            .field("ports", &self.nodes.iter().map(|n| n.port).collect::<Vec<_>>())
            .finish()
    }
}

impl LocalCluster {
    /// Starts `config.nodes` servers, assigns slots evenly, joins them and waits until the
    /// cluster is healthy.
    pub async fn start(config: LocalClusterConfig) -> Result<Self, LocalClusterError> {
        if config.nodes == 0 || config.nodes > usize::from(SLOT_COUNT) {
            return Err(LocalClusterError::Config(format!("nodes must be 1..={SLOT_COUNT}, got {}", config.nodes)));
        }
        let binary = match &config.server_binary {
            Some(path) => path.clone(),
            None => tokio::task::spawn_blocking(find_valkey_server).await.map_err(|e| LocalClusterError::Io {
                what: "finding valkey-server".to_owned(),
                source: std::io::Error::other(e),
            })??,
        };
        let started = Instant::now();
        let mut cluster = Self { config, binary, nodes: Vec::new() };
        for index in 0..cluster.config.nodes {
            let dir = cluster.config.data_dir.join(format!("node-{index}"));
            fs::create_dir_all(&dir)
                .map_err(|source| LocalClusterError::Io { what: format!("creating {}", dir.display()), source })?;
            let (port, process) = cluster.spawn_on_free_port(&dir).await?;
            let mut client = cluster.connect_addr(index, port).await?;
            let id = client.myid().await.map_err(|source| cluster.node_error(index, port, source))?;
            cluster.nodes.push(LocalNode { port, dir, id, process: Some(process) });
        }
        let ranges = SlotRange::even_split(cluster.nodes.len());
        for (index, range) in ranges.iter().enumerate() {
            let mut client = cluster.connect(index).await?;
            let cmd =
                redis::cmd("CLUSTER").arg("ADDSLOTSRANGE").arg(range.start().get()).arg(range.end().get()).to_owned();
            client
                .query("CLUSTER ADDSLOTSRANGE", &cmd)
                .await
                .map_err(|e| cluster.node_error(index, cluster.nodes[index].port, e))?;
        }
        let mut first = cluster.connect(0).await?;
        for index in 1..cluster.nodes.len() {
            let cmd = redis::cmd("CLUSTER").arg("MEET").arg(HOST).arg(cluster.nodes[index].port).to_owned();
            first.query("CLUSTER MEET", &cmd).await.map_err(|e| cluster.node_error(0, cluster.nodes[0].port, e))?;
        }
        cluster.wait_until_healthy().await?;
        info!(
            nodes = cluster.nodes.len(),
            ports = ?cluster.nodes.iter().map(|n| n.port).collect::<Vec<_>>(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "local valkey cluster ready"
        );
        Ok(cluster)
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The `valkey-server` binary in use.
    pub fn binary(&self) -> &Path {
        &self.binary
    }

    pub fn addr(&self, index: usize) -> NodeAddr {
        NodeAddr::new(HOST, self.nodes[index].port)
    }

    pub fn addrs(&self) -> Vec<NodeAddr> {
        (0..self.nodes.len()).map(|i| self.addr(i)).collect()
    }

    pub fn node_id(&self, index: usize) -> &NodeId {
        &self.nodes[index].id
    }

    pub fn node_ids(&self) -> Vec<NodeId> {
        self.nodes.iter().map(|n| n.id.clone()).collect()
    }

    /// Index of the node with this id.
    pub fn index_of(&self, id: &NodeId) -> Option<usize> {
        self.nodes.iter().position(|n| &n.id == id)
    }

    /// The node's server log.
    pub fn log_path(&self, index: usize) -> PathBuf {
        self.nodes[index].dir.join("valkey.log")
    }

    pub fn is_running(&self, index: usize) -> bool {
        self.nodes[index].process.is_some()
    }

    /// Options that reach this cluster's nodes: default timeouts and the cluster's password.
    pub fn connect_options(&self) -> ConnectOptions {
        ConnectOptions { password: self.config.password.clone(), ..ConnectOptions::default() }
    }

    /// A connection to node `index` (waits up to the ready timeout for it to answer `PING`).
    pub async fn connect(&self, index: usize) -> Result<NodeClient, LocalClusterError> {
        self.connect_addr(index, self.nodes[index].port).await
    }

    /// Kills node `index` with `SIGKILL` (no shutdown, like a crash) and waits for it to exit.
    pub fn kill(&mut self, index: usize) -> Result<(), LocalClusterError> {
        let mut process = self.nodes[index].process.take().ok_or(LocalClusterError::NotRunning { index })?;
        process.stop();
        info!(index, port = self.nodes[index].port, "killed valkey node");
        Ok(())
    }

    /// Starts a killed node again on its port and directory (its `nodes.conf` keeps its id and
    /// its view of the cluster) and waits until the whole cluster is healthy again.
    pub async fn restart(&mut self, index: usize) -> Result<(), LocalClusterError> {
        if self.is_running(index) {
            self.kill(index)?;
        }
        let (port, dir) = (self.nodes[index].port, self.nodes[index].dir.clone());
        // The killed server may hold its ports for a moment after its watchdog exits: a start
        // that fails to bind is tried again on the same port until the ready timeout.
        let waited = Instant::now();
        loop {
            let mut process = self.spawn(port, &dir)?;
            let left = self.config.ready_timeout.saturating_sub(waited.elapsed());
            match self.await_start(&mut process, port, &dir, left).await {
                Ok(Started::Answered(served)) if same_dir(&served, &dir) => {
                    self.nodes[index].process = Some(process);
                    break;
                }
                Ok(Started::Answered(served)) => {
                    warn!(index, port, foreign_dir = %served.display(), "the restarted node's port is answered by another valkey-server: trying again");
                }
                Ok(Started::Exited) => {
                    warn!(index, port, log = %dir.join("valkey.log").display(), "restarted valkey-server did not start: trying again");
                }
                Err(last) => {
                    process.stop();
                    let what = format!("restarted valkey-server answering PING on port {port}");
                    return Err(LocalClusterError::NotReady { what, waited: waited.elapsed(), last });
                }
            }
            process.stop();
            if waited.elapsed() >= self.config.ready_timeout {
                let what = format!("restarted valkey-server bound to port {port}");
                let last = log_tail(&dir.join("valkey.log"));
                return Err(LocalClusterError::NotReady { what, waited: waited.elapsed(), last });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        self.wait_until_healthy().await?;
        info!(index, port, "restarted valkey node");
        Ok(())
    }

    /// Waits until every node reports `cluster_state:ok`, knows all nodes as healthy, and all
    /// agree on one owner for each of the 16,384 slots. Fails when a node is not running.
    pub async fn wait_until_healthy(&self) -> Result<(), LocalClusterError> {
        let waited = Instant::now();
        loop {
            let last = match self.check_healthy().await {
                Ok(()) => return Ok(()),
                Err(reason) => reason,
            };
            if waited.elapsed() >= self.config.ready_timeout {
                return Err(LocalClusterError::NotReady {
                    what: "healthy cluster".to_owned(),
                    waited: waited.elapsed(),
                    last,
                });
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// Waits until every running node flags node `index` as failed (`fail`), the cluster's
    /// agreed verdict that the node is down.
    pub async fn wait_until_seen_failed(&self, index: usize) -> Result<(), LocalClusterError> {
        let waited = Instant::now();
        let target = self.nodes[index].id.clone();
        let mut last = String::from("nothing checked yet");
        loop {
            let mut all = true;
            for other in (0..self.nodes.len()).filter(|&i| i != index && self.is_running(i)) {
                let view = match self.connect(other).await {
                    Ok(mut client) => client.cluster_nodes().await.map_err(|e| e.to_string()),
                    Err(error) => Err(error.to_string()),
                };
                match view {
                    Ok(nodes) if nodes.iter().any(|n| n.id == target && n.flags.fail) => {}
                    Ok(_) => {
                        all = false;
                        last = format!("node {other} does not flag node {index} as fail yet");
                    }
                    Err(error) => {
                        all = false;
                        last = error;
                    }
                }
            }
            if all {
                return Ok(());
            }
            if waited.elapsed() >= self.config.ready_timeout {
                return Err(LocalClusterError::NotReady {
                    what: format!("node {index} flagged as failed"),
                    waited: waited.elapsed(),
                    last,
                });
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// Kills every node (also done on drop).
    pub fn shutdown(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut process) = node.process.take() {
                process.stop();
            }
        }
    }

    async fn check_healthy(&self) -> Result<(), String> {
        let mut views: Vec<Vec<Option<NodeId>>> = Vec::new();
        for index in 0..self.nodes.len() {
            if !self.is_running(index) {
                return Err(format!("node {index} is not running"));
            }
            let mut client = self.connect(index).await.map_err(|e| e.to_string())?;
            let info = client.cluster_info().await.map_err(|e| e.to_string())?;
            if !info.state_ok {
                return Err(format!("node {index} reports cluster_state fail"));
            }
            let nodes = client.cluster_nodes().await.map_err(|e| e.to_string())?;
            if nodes.len() != self.nodes.len() {
                return Err(format!("node {index} knows {} of {} nodes", nodes.len(), self.nodes.len()));
            }
            if let Some(sick) = nodes.iter().find(|n| !n.is_healthy()) {
                return Err(format!("node {index} sees {} as unhealthy ({:?})", sick.id, sick.flags));
            }
            let mut owners = vec![None; usize::from(SLOT_COUNT)];
            for node in &nodes {
                for slot in node.slots.iter().flat_map(|range| range.slots()) {
                    owners[usize::from(slot.get())] = Some(node.id.clone());
                }
            }
            if let Some(slot) = owners.iter().position(Option::is_none) {
                return Err(format!("node {index} sees slot {slot} unowned"));
            }
            views.push(owners);
        }
        if let Some(index) = views.iter().position(|view| view != &views[0]) {
            return Err(format!("node {index} disagrees with node 0 on slot owners"));
        }
        Ok(())
    }

    fn node_error(&self, index: usize, port: u16, source: NodeError) -> LocalClusterError {
        LocalClusterError::Node { index, addr: NodeAddr::new(HOST, port), source: Box::new(source) }
    }

    /// Connects, retrying until the node answers `PING` or the ready timeout passes.
    async fn connect_addr(&self, index: usize, port: u16) -> Result<NodeClient, LocalClusterError> {
        let addr = NodeAddr::new(HOST, port);
        let waited = Instant::now();
        loop {
            let attempt = async {
                let mut client = NodeClient::connect(&addr, &self.connect_options()).await?;
                client.ping().await?;
                Ok::<_, NodeError>(client)
            };
            match attempt.await {
                Ok(client) => return Ok(client),
                Err(error) if waited.elapsed() < self.config.ready_timeout => {
                    debug!(index, %addr, %error, "valkey node not answering yet");
                    tokio::time::sleep(POLL_INTERVAL).await;
                }
                Err(source) => return Err(self.node_error(index, port, source)),
            }
        }
    }

    /// Starts a server on a free port pair, retrying on fresh ports when the chosen one was
    /// taken between the check and the server's bind.
    async fn spawn_on_free_port(&self, dir: &Path) -> Result<(u16, NodeProcess), LocalClusterError> {
        // Long enough for a server to bind or to log that it cannot.
        const BIND_CHECK_TIMEOUT: Duration = Duration::from_secs(10);
        for _ in 0..MAX_PORT_ATTEMPTS {
            let port = free_port_pair()?;
            let mut process = self.spawn(port, dir)?;
            let log = dir.join("valkey.log");
            match self.await_start(&mut process, port, dir, BIND_CHECK_TIMEOUT).await {
                // Our server: it runs in the directory we gave it.
                Ok(Started::Answered(served)) if same_dir(&served, dir) => return Ok((port, process)),
                // Another process (another test binary's cluster) got the port first.
                Ok(Started::Answered(served)) => {
                    warn!(port, foreign_dir = %served.display(), "port answered by another valkey-server: trying another port");
                }
                Ok(Started::Exited) => {
                    warn!(port, log = %log.display(), "valkey-server did not start: trying another port");
                }
                Err(last) => {
                    process.stop();
                    return Err(LocalClusterError::NotReady {
                        what: format!("valkey-server answering PING on port {port}"),
                        waited: BIND_CHECK_TIMEOUT,
                        last,
                    });
                }
            }
            process.stop();
        }
        Err(LocalClusterError::NoFreePort)
    }

    /// Waits up to `timeout` until the server just spawned on `port` answers PING (and says
    /// which directory it runs in) or exits (its port taken, its `nodes.conf` locked); when neither happened in time, the last error from the server's port and the
    /// end of its log.
    async fn await_start(
        &self,
        process: &mut NodeProcess,
        port: u16,
        dir: &Path,
        timeout: Duration,
    ) -> Result<Started, String> {
        let waited = Instant::now();
        let addr = NodeAddr::new(HOST, port);
        loop {
            let answered = async {
                let mut client = NodeClient::connect(&addr, &self.connect_options()).await?;
                client.ping().await?;
                server_dir(&mut client).await
            };
            let error = match answered.await {
                Ok(served) => return Ok(Started::Answered(served)),
                Err(e) => e,
            };
            if matches!(process.watchdog.try_wait(), Ok(Some(_))) || server_exited(dir) {
                return Ok(Started::Exited);
            }
            if waited.elapsed() >= timeout {
                return Err(format!("{error}; {}", log_tail(&dir.join("valkey.log"))));
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    fn spawn(&self, port: u16, dir: &Path) -> Result<NodeProcess, LocalClusterError> {
        let io_error = |what: String| move |source| LocalClusterError::Io { what, source };
        // The log is truncated on each start so `server_exited` reads only this run.
        File::create(dir.join("valkey.log")).map_err(io_error(format!("creating log in {}", dir.display())))?;
        let stdout = File::options()
            .create(true)
            .append(true)
            .open(dir.join("stdout.log"))
            .map_err(io_error(format!("opening stdout.log in {}", dir.display())))?;
        let stderr = stdout.try_clone().map_err(io_error("cloning stdout.log handle".to_owned()))?;
        let node_timeout_ms = self.config.node_timeout.as_millis().to_string();
        let port_text = port.to_string();
        let mut args: Vec<&str> = vec![
            "--port",
            &port_text,
            "--bind",
            HOST,
            "--dir",
            ".",
            "--logfile",
            "valkey.log",
            "--daemonize",
            "no",
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            &node_timeout_ms,
            "--cluster-slot-stats-enabled",
            "yes",
            "--save",
            "",
            "--appendonly",
            "no",
        ];
        if let Some(password) = &self.config.password {
            args.extend(["--requirepass", password, "--masterauth", password]);
        }
        args.extend(self.config.extra_args.iter().map(String::as_str));
        let mut watchdog = Command::new("sh")
            .arg("-c")
            .arg(WATCHDOG_SCRIPT)
            .arg("valkey-watchdog")
            .arg(&self.binary)
            .args(&args)
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .map_err(io_error(format!("starting {} on port {port}", self.binary.display())))?;
        let stdin = watchdog.stdin.take();
        debug!(port, dir = %dir.display(), "started valkey-server");
        Ok(NodeProcess { watchdog, stdin })
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Ports handed out in this process (never returned: a killed node restarts on its port, and
/// a few dozen reserved ports cost nothing), so two clusters in one test binary cannot pick the
/// same free port between the check and the server's bind.
static RESERVED_PORTS: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// A port on 127.0.0.1 that is free, whose bus port (port + 10000) is free too, that no
/// cluster of this process uses, and that no outgoing connection can take.
///
/// Both are taken below the kernel's ephemeral range (`ip_local_port_range`, 32768-60999 by
/// default): every outgoing connection on the machine (a client's, another cluster's bus links)
/// gets its local port from that range, and one that lands on a killed node's port keeps the
/// node from binding it again for as long as the connection lives. A restart waited 30 s for
/// such a port in CI. Where the range leaves no room below it, the kernel picks (port 0) as
/// before.
fn free_port_pair() -> Result<u16, LocalClusterError> {
    const MAX_TRIES: usize = 200;
    // Well above the registered ports of common services on a developer's machine.
    const LOWEST: u16 = 10_000;
    let ephemeral_from = ephemeral_range_start();
    let below = ephemeral_from.checked_sub(CLUSTER_BUS_PORT_OFFSET).filter(|&top| top > LOWEST + 1_000);
    let mut next = below.map(|top| {
        // A start that differs per process, so two test binaries do not walk the same ports.
        let span = u64::from(top - LOWEST);
        let seed =
            std::hash::BuildHasher::hash_one(&std::collections::hash_map::RandomState::new(), std::process::id());
        (LOWEST, span, seed % span)
    });
    for _ in 0..MAX_TRIES {
        let port = match &mut next {
            Some((lowest, span, at)) => {
                *at = (*at + 1) % *span;
                *lowest + *at as u16
            }
            None => {
                let Ok(listener) = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)) else { continue };
                let Ok(port) = listener.local_addr().map(|a| a.port()) else { continue };
                port
            }
        };
        let Some(bus_port) = port.checked_add(CLUSTER_BUS_PORT_OFFSET) else { continue };
        let mut reserved = RESERVED_PORTS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if reserved.contains(&port) || reserved.contains(&bus_port) {
            continue;
        }
        let free = |p: u16| TcpListener::bind((Ipv4Addr::LOCALHOST, p)).is_ok();
        if free(port) && free(bus_port) {
            reserved.insert(port);
            reserved.insert(bus_port);
            return Ok(port);
        }
    }
    Err(LocalClusterError::NoFreePort)
}

/// The first port of the kernel's ephemeral range (Linux's default when it cannot be read).
fn ephemeral_range_start() -> u16 {
    const LINUX_DEFAULT: u16 = 32_768;
    fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| text.split_whitespace().next().and_then(|first| first.parse().ok()))
        .unwrap_or(LINUX_DEFAULT)
}

/// `CONFIG GET dir`: the working directory of the server answering on a port.
async fn server_dir(client: &mut NodeClient) -> Result<PathBuf, NodeError> {
    const NAME: &str = "CONFIG GET";
    let value = client.query(NAME, redis::cmd("CONFIG").arg("GET").arg("dir")).await?;
    match &value {
        redis::Value::Array(items) | redis::Value::Set(items) if items.len() == 2 => match &items[1] {
            redis::Value::BulkString(bytes) => Ok(PathBuf::from(String::from_utf8_lossy(bytes).into_owned())),
            other => Err(bad_config_reply(client, other)),
        },
        redis::Value::Map(items) if items.len() == 1 => match &items[0].1 {
            redis::Value::BulkString(bytes) => Ok(PathBuf::from(String::from_utf8_lossy(bytes).into_owned())),
            other => Err(bad_config_reply(client, other)),
        },
        other => Err(bad_config_reply(client, other)),
    }
}

fn bad_config_reply(client: &NodeClient, value: &redis::Value) -> NodeError {
    NodeError::Reply {
        addr: client.addr().clone(),
        command: "CONFIG GET",
        source: crate::reply::ParseError::new("CONFIG GET", "dir", format!("{value:?}")),
    }
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// Whether the server's log says it gave up (port in use, bad config).
/// The last lines of a server's log, for an error that outlives the test's temporary directory.
fn log_tail(path: &Path) -> String {
    const LINES: usize = 12;
    match fs::read_to_string(path) {
        Ok(log) => {
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(LINES)..].join(" | ");
            format!("{} ends: {tail}", path.display())
        }
        Err(e) => format!("{} unreadable: {e}", path.display()),
    }
}

fn server_exited(dir: &Path) -> bool {
    fs::read_to_string(dir.join("valkey.log"))
        .map(|log| {
            ["Address already in use", "Failed listening", "FATAL", "is already used by a different"]
                .iter()
                .any(|m| log.contains(m))
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_and_bus_ports_are_free_distinct_and_below_the_ephemeral_range() {
        let ephemeral_from = ephemeral_range_start();
        let mut seen = BTreeSet::new();
        for _ in 0..20 {
            let port = free_port_pair().expect("a free pair");
            let bus = port + CLUSTER_BUS_PORT_OFFSET;
            assert!(
                bus < ephemeral_from,
                "{port}/{bus}: an outgoing connection could take them (range from {ephemeral_from})"
            );
            assert!(seen.insert(port) && seen.insert(bus), "{port}/{bus} handed out twice");
            // Still free for the server to bind.
            assert!(TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok());
            assert!(TcpListener::bind((Ipv4Addr::LOCALHOST, bus)).is_ok());
        }
    }
}
