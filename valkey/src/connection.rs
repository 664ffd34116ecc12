//! A connection to one Valkey node.
//!
//! lb talks to each node on its own: the agent watches the node beside it, the ops server sends
//! a migration to the node that owns the slots. Every network step has a bound: connecting
//! (TCP, then `AUTH` and the client handshake) within [`ConnectOptions::connect_timeout`], and
//! every command within [`ConnectOptions::command_timeout`], enforced with
//! `tokio::time::timeout` around the whole round trip.
//!
//! Errors say what a caller that retries or reports an action needs to know
//! ([`NodeError::may_have_run`]): a command certainly did not run when the connection never
//! came up or the server answered with an error reply (Valkey checks a command before
//! executing it, and none of the commands lb sends has partial effects); it may have run when
//! the deadline passed or the connection broke after the command was handed to the socket.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, ConnectionAddr, ErrorKind, IntoConnectionInfo, RedisConnectionInfo, Value};
use tracing::debug;

use crate::node_id::{NodeAddr, NodeId};
use crate::reply::{self, ClusterInfo, ClusterNode, Info, ParseError, SlotMigration, SlotStats};
use crate::resp::{RawConnection, Reply};
use crate::slot::SlotRange;

/// Loopback and LAN connects finish in milliseconds; two seconds absorbs a busy node without
/// letting a dead address stall a poll loop.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Long enough for `CLUSTER SLOT-STATS` over all 16,384 slots (~0.8 MB) on a loaded node,
/// short enough that a stuck node is noticed within one agent interval.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(5);

/// How to reach and authenticate to a node.
#[derive(Clone)]
pub struct ConnectOptions {
    pub connect_timeout: Duration,
    pub command_timeout: Duration,
    /// ACL user; `None` with a password means the `default` user (`AUTH <password>`).
    pub username: Option<String>,
    pub password: Option<String>,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        Self {
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            username: None,
            password: None,
        }
    }
}

impl std::fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("connect_timeout", &self.connect_timeout)
            .field("command_timeout", &self.command_timeout)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// Why talking to a node failed.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// TCP connect, AUTH or the handshake failed: no command was sent.
    #[error("connecting to {addr} failed: {source}")]
    Connect { addr: NodeAddr, source: redis::RedisError },
    /// Connecting took longer than the connect timeout: no command was sent.
    #[error("connecting to {addr} timed out after {timeout:?}")]
    ConnectTimeout { addr: NodeAddr, timeout: Duration },
    /// The node answered with an error reply (`ERR ...`, `MOVED ...`, `CLUSTERDOWN ...`): the
    /// command did not run.
    #[error("{command} on {addr} was rejected: {message}")]
    Rejected { addr: NodeAddr, command: &'static str, message: String },
    /// No reply within the command deadline: the command may have run.
    #[error("{command} on {addr} timed out after {timeout:?} (it may have run)")]
    Timeout { addr: NodeAddr, command: &'static str, timeout: Duration },
    /// The connection broke while the command was in flight: it may have run.
    #[error("{command} on {addr} failed (it may have run): {source}")]
    Io { addr: NodeAddr, command: &'static str, source: redis::RedisError },
    /// An earlier command on this connection timed out or broke it; its late reply would be
    /// read as the answer to the next command, so nothing more is sent: reconnect.
    #[error("{command} not sent to {addr}: the connection is unusable after an earlier failure; reconnect")]
    Poisoned { addr: NodeAddr, command: &'static str },
    /// The command ran but its reply does not have the documented shape.
    #[error("{command} on {addr}: {source}")]
    Reply { addr: NodeAddr, command: &'static str, source: ParseError },
}

impl NodeError {
    /// False when the command certainly did not run (safe to retry or report as not done);
    /// true when it may have run or did run.
    pub fn may_have_run(&self) -> bool {
        match self {
            Self::Connect { .. } | Self::ConnectTimeout { .. } | Self::Rejected { .. } | Self::Poisoned { .. } => false,
            Self::Timeout { .. } | Self::Io { .. } | Self::Reply { .. } => true,
        }
    }

    /// Bounded label for metrics.
    fn outcome(&self) -> &'static str {
        match self {
            Self::Connect { .. } => "connect_failed",
            Self::ConnectTimeout { .. } => "connect_timeout",
            Self::Rejected { .. } => "rejected",
            Self::Timeout { .. } => "timeout",
            Self::Io { .. } => "io_error",
            Self::Poisoned { .. } => "poisoned",
            Self::Reply { .. } => "bad_reply",
        }
    }
}

/// An open connection to one node. Cheap to clone (a handle to one multiplexed connection).
///
/// After a command times out or the connection breaks, every clone refuses further commands
/// with [`NodeError::Poisoned`]: on a pipelined connection a blocked or lost reply would
/// otherwise delay or misattribute the replies behind it. Callers reconnect.
#[derive(Clone)]
pub struct NodeClient {
    addr: NodeAddr,
    connection: MultiplexedConnection,
    command_timeout: Duration,
    poisoned: Arc<AtomicBool>,
    /// The connection `CLUSTER SLOT-STATS` is read on ([`crate::resp`]), opened at its first
    /// use with these options, and dropped after any failure on it.
    stats: Arc<tokio::sync::Mutex<Option<RawConnection>>>,
    options: ConnectOptions,
}

impl std::fmt::Debug for NodeClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeClient").field("addr", &self.addr).field("command_timeout", &self.command_timeout).finish()
    }
}

impl NodeClient {
    /// Connects (and authenticates when the options carry a password) within the connect
    /// timeout.
    pub async fn connect(addr: &NodeAddr, options: &ConnectOptions) -> Result<Self, NodeError> {
        let connect_error = |source| NodeError::Connect { addr: addr.clone(), source };
        let mut redis_settings = RedisConnectionInfo::default();
        if let Some(password) = &options.password {
            redis_settings = redis_settings.set_password(password);
            if let Some(username) = &options.username {
                redis_settings = redis_settings.set_username(username);
            }
        }
        let info = ConnectionAddr::Tcp(addr.host.clone(), addr.port)
            .into_connection_info()
            .map_err(connect_error)?
            .set_redis_settings(redis_settings);
        let client = Client::open(info).map_err(connect_error)?;
        // The command deadline is ours (below); the library's own response timeout stays off so
        // there is one clock and one error for it.
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(options.connect_timeout))
            .set_response_timeout(None);
        let connecting = client.get_multiplexed_async_connection_with_config(&config);
        let connection = match tokio::time::timeout(options.connect_timeout, connecting).await {
            Ok(Ok(connection)) => connection,
            Ok(Err(source)) => {
                metrics::counter!("lb_valkey_connects_total", "outcome" => "failed").increment(1);
                return Err(connect_error(source));
            }
            Err(_) => {
                metrics::counter!("lb_valkey_connects_total", "outcome" => "timeout").increment(1);
                return Err(NodeError::ConnectTimeout { addr: addr.clone(), timeout: options.connect_timeout });
            }
        };
        metrics::counter!("lb_valkey_connects_total", "outcome" => "ok").increment(1);
        debug!(%addr, "connected to valkey node");
        Ok(Self {
            addr: addr.clone(),
            connection,
            command_timeout: options.command_timeout,
            poisoned: Arc::new(AtomicBool::new(false)),
            stats: Arc::default(),
            options: options.clone(),
        })
    }

    pub fn addr(&self) -> &NodeAddr {
        &self.addr
    }

    /// Whether an earlier timeout or I/O error made this connection refuse commands.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Relaxed)
    }

    /// Sends `cmd` and returns its raw reply. `name` is a fixed label for logs, metrics and
    /// errors (e.g. `"CLUSTER SLOT-STATS"`), never built from user data.
    pub async fn query(&mut self, name: &'static str, cmd: &redis::Cmd) -> Result<Value, NodeError> {
        if self.poisoned.load(Ordering::Relaxed) {
            return Err(NodeError::Poisoned { addr: self.addr.clone(), command: name });
        }
        let result = match tokio::time::timeout(self.command_timeout, cmd.query_async::<Value>(&mut self.connection))
            .await
        {
            Ok(Ok(Value::ServerError(error))) => {
                Err(NodeError::Rejected { addr: self.addr.clone(), command: name, message: error.to_string() })
            }
            Ok(Ok(value)) => Ok(value),
            Ok(Err(source)) => Err(self.classify(name, source)),
            Err(_) => Err(NodeError::Timeout { addr: self.addr.clone(), command: name, timeout: self.command_timeout }),
        };
        self.settle(name, &result);
        result
    }

    /// Counts a command's outcome, and poisons the connection when the command timed out or
    /// broke it (returns whether it did).
    fn settle(&self, name: &'static str, result: &Result<Value, NodeError>) -> bool {
        let outcome = match result {
            Ok(_) => "ok",
            Err(error) => error.outcome(),
        };
        metrics::counter!("lb_valkey_commands_total", "command" => name, "outcome" => outcome).increment(1);
        match result {
            Err(error @ (NodeError::Timeout { .. } | NodeError::Io { .. })) => {
                self.poisoned.store(true, Ordering::Relaxed);
                debug!(addr = %self.addr, command = name, %error, "valkey connection unusable from now on");
                true
            }
            Err(error) => {
                debug!(addr = %self.addr, command = name, %error, "valkey command failed");
                false
            }
            Ok(_) => false,
        }
    }

    fn classify(&self, command: &'static str, source: redis::RedisError) -> NodeError {
        let addr = self.addr.clone();
        match source.kind() {
            ErrorKind::Server(_) | ErrorKind::Extension => {
                // The server's own words (`MOVED 14907 127.0.0.1:40783`), not the library's
                // rendering of them.
                let message = match (source.code(), source.detail()) {
                    (Some(code), Some(detail)) => format!("{code} {detail}"),
                    (Some(code), None) => code.to_owned(),
                    _ => source.to_string(),
                };
                NodeError::Rejected { addr, command, message }
            }
            ErrorKind::Parse | ErrorKind::UnexpectedReturnType => {
                NodeError::Reply { addr, command, source: ParseError::new(command, "reply", source.to_string()) }
            }
            _ => NodeError::Io { addr, command, source },
        }
    }

    fn parsed<T>(&self, command: &'static str, parsed: Result<T, ParseError>) -> Result<T, NodeError> {
        parsed.map_err(|source| NodeError::Reply { addr: self.addr.clone(), command, source })
    }

    /// `PING`, expecting `PONG`.
    pub async fn ping(&mut self) -> Result<(), NodeError> {
        const NAME: &str = "PING";
        let value = self.query(NAME, &redis::cmd("PING")).await?;
        match reply::as_text(&value) {
            Some("PONG") => Ok(()),
            _ => self.parsed(NAME, Err(ParseError::new(NAME, "reply", reply::describe(&value)))),
        }
    }

    /// `CLUSTER MYID`.
    pub async fn myid(&mut self) -> Result<NodeId, NodeError> {
        const NAME: &str = "CLUSTER MYID";
        let value = self.query(NAME, redis::cmd("CLUSTER").arg("MYID")).await?;
        self.parsed(NAME, reply::parse_myid(&value))
    }

    /// `INFO` (default sections).
    pub async fn info(&mut self) -> Result<Info, NodeError> {
        const NAME: &str = "INFO";
        let value = self.query(NAME, &redis::cmd("INFO")).await?;
        self.parsed(NAME, reply::parse_info(&value))
    }

    /// `CLUSTER INFO`.
    pub async fn cluster_info(&mut self) -> Result<ClusterInfo, NodeError> {
        const NAME: &str = "CLUSTER INFO";
        let value = self.query(NAME, redis::cmd("CLUSTER").arg("INFO")).await?;
        self.parsed(NAME, reply::parse_cluster_info(&value))
    }

    /// `CLUSTER NODES`: this node's view of the cluster.
    pub async fn cluster_nodes(&mut self) -> Result<Vec<ClusterNode>, NodeError> {
        const NAME: &str = "CLUSTER NODES";
        let value = self.query(NAME, redis::cmd("CLUSTER").arg("NODES")).await?;
        self.parsed(NAME, reply::parse_cluster_nodes(&value))
    }

    /// `CLUSTER SLOT-STATS SLOTSRANGE start end`: counters of the slots in `range` this node
    /// owns (slots it does not own are left out by the server).
    pub async fn slot_stats(&mut self, range: SlotRange) -> Result<Vec<SlotStats>, NodeError> {
        const NAME: &str = "CLUSTER SLOT-STATS";
        let cmd = redis::cmd("CLUSTER")
            .arg("SLOT-STATS")
            .arg("SLOTSRANGE")
            .arg(range.start().get())
            .arg(range.end().get())
            .to_owned();
        let value = self.query_raw(NAME, &cmd).await?;
        self.parsed(NAME, reply::parse_slot_stats(&value))
    }

    /// [`Self::query`] on the plain RESP2 connection of [`crate::resp`] (opened here if it is
    /// not yet, within the connect timeout; the whole within the command timeout), for the
    /// replies too large for the `redis` crate's parser to read every second. Same errors,
    /// same metrics, same poisoning.
    async fn query_raw(&mut self, name: &'static str, cmd: &redis::Cmd) -> Result<Value, NodeError> {
        if self.poisoned.load(Ordering::Relaxed) {
            return Err(NodeError::Poisoned { addr: self.addr.clone(), command: name });
        }
        let addr = self.addr.clone();
        let mut stats = self.stats.lock().await;
        if stats.is_none() {
            let auth = self.options.password.as_deref().map(|p| (self.options.username.as_deref(), p));
            let connecting = RawConnection::connect(&addr.host, addr.port, auth);
            *stats = Some(match tokio::time::timeout(self.options.connect_timeout, connecting).await {
                Ok(Ok(connection)) => connection,
                Ok(Err(error)) => return Err(NodeError::Connect { addr, source: error.into() }),
                Err(_) => return Err(NodeError::ConnectTimeout { addr, timeout: self.options.connect_timeout }),
            });
        }
        let connection = stats.as_mut().expect("opened above");
        let result = match tokio::time::timeout(self.command_timeout, connection.query(cmd)).await {
            Ok(Ok(Reply::Value(value))) => Ok(value),
            Ok(Ok(Reply::Error(message))) => Err(NodeError::Rejected { addr, command: name, message }),
            Ok(Err(error)) => Err(NodeError::Io { addr, command: name, source: error.into() }),
            Err(_) => Err(NodeError::Timeout { addr, command: name, timeout: self.command_timeout }),
        };
        if self.settle(name, &result) {
            *stats = None;
        }
        result
    }

    /// `CLUSTER GETSLOTMIGRATIONS`: jobs this node takes part in, newest first.
    pub async fn slot_migrations(&mut self) -> Result<Vec<SlotMigration>, NodeError> {
        const NAME: &str = "CLUSTER GETSLOTMIGRATIONS";
        let value = self.query(NAME, redis::cmd("CLUSTER").arg("GETSLOTMIGRATIONS")).await?;
        self.parsed(NAME, reply::parse_slot_migrations(&value))
    }

    /// `CLUSTER MIGRATESLOTS SLOTSRANGE a b [c d ...] NODE target`, sent to the owner of the
    /// slots. `Ok` means a job started, not that it finished: poll
    /// [`slot_migrations`](Self::slot_migrations).
    pub async fn migrate_slots(&mut self, ranges: &[SlotRange], target: &NodeId) -> Result<(), NodeError> {
        const NAME: &str = "CLUSTER MIGRATESLOTS";
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("MIGRATESLOTS").arg("SLOTSRANGE");
        for range in ranges {
            cmd.arg(range.start().get()).arg(range.end().get());
        }
        cmd.arg("NODE").arg(target.as_str());
        let value = self.query(NAME, &cmd).await?;
        self.parsed(NAME, reply::parse_migrate_slots(&value))
    }
}
