//! The storage adapter for a Valkey / Redis cluster: the cluster itself is the storage system,
//! no admin API in front of it.
//!
//! A Valkey cluster spreads keys over 16,384 hash slots, each owned by one primary. Here a
//! primary is a worker and a slot is a partition (`slot-NNNNN`, tenant = the configured cluster
//! name, table `slots`, key range = the slot's 2^50-wide share of the 64-bit key space, exactly
//! as the agent's Valkey source reports it; naming in [`config`]). Slots cannot be split
//! or merged, so only two actions exist:
//!
//! - **move**: `CLUSTER MIGRATESLOTS SLOTSRANGE s s NODE <target>` on the owner, an atomic
//!   migration that keeps serving traffic; done when `CLUSTER GETSLOTMIGRATIONS` says so.
//! - **group** (one slot): give the slot's node to that slot alone by migrating the node's other
//!   slots to the other primaries, fewest slots first ([`plan`]); one migration per receiver,
//!   one after the other, all tracked by one operation.
//!
//! ```text
//! submit: operation id = "valkey-<action id>" (known: the same id, nothing sent again)
//!   → CLUSTER NODES (first seed that answers) → plan → already done? succeeded at once
//!   → GETSLOTMIGRATIONS on source and target (jobs that existed before) → MIGRATESLOTS
//!   → a driver task per operation: poll GETSLOTMIGRATIONS on the source (the target when the
//!     source does not answer) for the new job → next migration | succeeded | failed
//! ```
//!
//! Progress is the job's phase, plus a little for every *beat* inside a phase: a change of the
//! job's last update, its peer's last acknowledgement (about once a second while the target
//! receives a snapshot) or the replication bytes left. A large slot's snapshot can last minutes
//! in one phase; the beats keep the executor's stall detector for jobs that really stopped.
//!
//! `MIGRATESLOTS` answers `+OK` without naming its job, so the driver finds it as the newest job
//! with the same ranges and peer that was not listed before the command was sent (names are
//! unique), which needs no clock agreement between the ops server and the nodes.
//!
//! Failures, as the executor reads them: a refused connection is `Unreachable` and an error
//! reply `Rejected` (neither ran); a timeout or a broken connection after the command was sent
//! is `Uncertain`. A migration whose node dies ends as the surviving side reports it (`failed`,
//! or `success` when the handover completed); when neither side answers for
//! `unreachable_after_ms`, the outcome is read from who owns the slots then. A group that fails
//! after some of its migrations finished says how many in its message: those slots stay where
//! they went (each migration is atomic, the group is not).
//!
//! Operations live in this process, and the cluster is the state that matters: after an
//! ops-server restart (or a config change that rebuilds the adapter) the executor polls with
//! the action, and an operation id this process does not know is taken over — wait until the
//! slot's node runs no migration, plan the action again on the layout as it is, run what is
//! left ([`Inner::resume`]). Which node is dedicated to which slot is restored from the actions
//! that succeeded before ([`StorageAdapter::remember`]), and holds while the node owns that slot
//! alone.
//!
//! A worker's zone is its entry in `storage.valkey.zones`, else the node's own
//! `availability-zone` (Valkey 8.0+), read with `INFO server` — the `+info` the least ACL user
//! already has; `CONFIG GET` would need more — on the topology read after the adapter connects
//! to the node, then again at most every [`ZONE_REFRESH`] ([`Inner::read_zone`]). A setting that
//! is no valid zone id is logged once and read as no zone.

pub mod config;
mod plan;

use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lb_common::ids::{ActionId, GroupId, OperationId, PartitionId, TableId, TenantId, WorkerId, ZoneId, derived_id};
use lb_common::protocol::{
    ActionKind, ActionRecord, ActionSpec, AdminRequest, Capacity, GroupTarget, Health, Operation, OperationState,
    PartitionInfo, Topology, WorkerInfo,
};
use lb_valkey::reply::{ClusterNode, MigrationOperation, MigrationState, ParseError, SlotMigration};
use lb_valkey::{ConnectOptions, NodeAddr, NodeClient, NodeError, NodeId, SLOT_COUNT, Slot, SlotRange};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

pub use config::ValkeyStorageConfig;

use super::{StorageAdapter, StorageError, StorageFuture};

/// Table name of every slot partition.
pub use lb_valkey::naming::SLOT_TABLE as SLOTS_TABLE;
/// Prefix of operation ids; the rest is the action id.
const OPERATION_PREFIX: &str = "valkey-";
/// Polls without finding a job that must exist before the adapter reads the outcome from slot
/// ownership: the job is listed as soon as `MIGRATESLOTS` answers, so a few polls only cover a
/// command whose reply was lost.
const MISSING_JOB_POLLS: u32 = 10;
/// Operations remembered for polling and idempotent retries: the executor polls an operation
/// until it ends and retries only while an action runs, so the last 10,000 are plenty, and the
/// memory stays bounded (~200 bytes each).
const MAX_OPERATIONS: usize = 10_000;
/// Progress a taken-over operation shows at most while it waits for the migration that was
/// running: below the first phase of any resumed step.
const RESUME_WAIT_PROGRESS: f64 = 0.01;
/// Status for refusals, as the HTTP adapter would get from a storage admin API.
const UNPROCESSABLE: u16 = 422;
/// A primary's capacity in CPU: the one main thread that executes every command (I/O threads
/// only move bytes; see the agent's `source::valkey::rates`).
const MAIN_THREAD_CORES: f64 = 1.0;
/// How long a node's own zone setting, once read, is used before it is read again (besides
/// after every new connection to the node): a zone is set when a node is deployed and rarely
/// changes, so one `INFO server` (~1 KB) per node a minute costs nothing, and a
/// `CONFIG SET availability-zone` at runtime shows within a minute.
const ZONE_REFRESH: Duration = Duration::from_secs(60);
/// How long a node's slot key counts (the topology's stored bytes), once read, are used
/// before they are read again — unless the node's slots changed (a migration), which reads them
/// at the next topology. The count is a full `CLUSTER SLOT-STATS` (~120 bytes of reply a slot),
/// which the topology read every two seconds would otherwise parse for every node; stored bytes
/// only size a move's copy, and half a minute of writes does not change that estimate.
const KEY_COUNT_REFRESH: Duration = Duration::from_secs(30);

/// Slot naming lives in `lb_valkey::naming`, shared with the agent that reports the slots.
pub use lb_valkey::naming::{
    slot_key_range, slot_of_partition as parse_partition_id, slot_partition_id as partition_id,
};

/// The slot a move or a group of one partition acts on.
fn action_slot(spec: &ActionSpec) -> Option<Slot> {
    match spec {
        ActionSpec::Move { partition, .. } | ActionSpec::Group { target: GroupTarget::Partition { partition }, .. } => {
            parse_partition_id(partition)
        }
        _ => None,
    }
}

/// The group and slot of a group of one slot.
fn slot_group(spec: &ActionSpec) -> Option<(GroupId, Slot)> {
    match spec {
        ActionSpec::Group { group, .. } => Some((group.clone(), action_slot(spec)?)),
        _ => None,
    }
}

/// The operation id of an action: `valkey-<action id>`, hashed when that would be too long
/// ([`derived_id`]: the same in every process, which taking an operation over relies on).
pub fn operation_id(action: &ActionId) -> OperationId {
    OperationId::new(derived_id(OPERATION_PREFIX, action.as_str())).expect("derived from a valid id")
}

/// The adapter; see the module docs. Driver tasks stop when it is dropped.
#[derive(Debug)]
pub struct ValkeyStorage {
    inner: Arc<Inner>,
    stop: CancellationToken,
}

impl Drop for ValkeyStorage {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[derive(Debug)]
struct Inner {
    config: ValkeyStorageConfig,
    tenant: TenantId,
    table: TableId,
    options: ConnectOptions,
    clients: Mutex<HashMap<NodeAddr, NodeClient>>,
    /// Addresses of the primaries seen last, tried after the seeds.
    known: Mutex<Vec<NodeAddr>>,
    ops: Mutex<HashMap<OperationId, Operation>>,
    /// One submission at a time, so two submits of one action cannot both start it.
    submitting: tokio::sync::Mutex<()>,
    layout: Mutex<Layout>,
    /// Slots a group action gave a node of their own, shown in the topology while their node
    /// holds them alone. Kept by slot, so what [`StorageAdapter::remember`] restores after a
    /// restart needs no cluster read.
    groups: Mutex<HashMap<Slot, GroupId>>,
    /// Each node's own zone setting as last read, by address ([`Inner::read_zone`]).
    zones: Mutex<HashMap<NodeAddr, NodeZone>>,
    /// Each node's slot key counts as last read, by address ([`KEY_COUNT_REFRESH`]).
    key_counts: Mutex<HashMap<NodeAddr, NodeKeys>>,
}

/// A node's key count per slot it owns, and its average bytes a key.
type KeyCounts = (Arc<Vec<(Slot, u64)>>, u64);

/// A node's slot key counts as last read, and the average bytes a key.
#[derive(Debug)]
struct NodeKeys {
    /// The node and the slots it owned then: another node at the address, or other slots,
    /// read again.
    node: NodeId,
    slots: Vec<SlotRange>,
    counts: Arc<Vec<(Slot, u64)>>,
    per_key: u64,
    read_at: Instant,
}

/// A node's own `availability-zone` as last read.
#[derive(Debug)]
struct NodeZone {
    /// The node it was read from: another node at the address is read again.
    node: NodeId,
    /// The setting as the node gave it (empty: unset), so an invalid one is logged once.
    setting: String,
    zone: Option<ZoneId>,
    read_at: Instant,
    /// Cleared when the adapter opens a new connection to the address (the node may have been
    /// restarted with another setting): read again at the next topology.
    current: bool,
}

#[derive(Debug, Default)]
struct Layout {
    fingerprint: Option<u64>,
    version: u64,
}

/// A primary as the adapter sees it.
#[derive(Debug, Clone)]
struct Primary {
    id: NodeId,
    addr: NodeAddr,
    worker: WorkerId,
    health: Health,
    slots: Vec<SlotRange>,
}

impl Primary {
    fn slot_count(&self) -> u32 {
        self.slots.iter().map(|r| u32::from(r.len())).sum()
    }

    fn owns(&self, slot: Slot) -> bool {
        self.slots.iter().any(|r| r.contains(slot))
    }
}

/// One node's view of the cluster, reduced to primaries.
#[derive(Debug)]
struct View {
    primaries: Vec<Primary>,
}

impl View {
    fn owner(&self, slot: Slot) -> Option<&Primary> {
        self.primaries.iter().find(|p| p.owns(slot))
    }

    fn by_worker(&self, worker: &WorkerId) -> Option<&Primary> {
        self.primaries.iter().find(|p| &p.worker == worker)
    }
}

/// One migration: these ranges from `source` to `target`.
#[derive(Debug, Clone)]
struct Step {
    source: Primary,
    target: Primary,
    ranges: Vec<SlotRange>,
}

impl Step {
    fn describe(&self) -> String {
        let ranges: Vec<String> = self.ranges.iter().map(ToString::to_string).collect();
        format!("slots {} from {} to {}", ranges.join(" "), self.source.worker, self.target.worker)
    }

    fn matches(&self, job: &SlotMigration) -> bool {
        job.source_node == self.source.id && job.target_node == self.target.id && job.slot_ranges == self.ranges
    }
}

/// What a submission turns into.
#[derive(Debug)]
enum Plan {
    /// Nothing to migrate (the slot is already there, or already alone).
    AlreadyDone(String),
    Steps(Vec<Step>),
}

/// What shows a running job is alive: its phase, its last update and the last time its peer
/// acknowledged, and the replication bytes left. A change between two polls is a beat.
type Beat = (u64, Option<u64>, Option<u64>);

fn beat(job: &SlotMigration) -> Beat {
    (job.last_update_time_unix_secs, job.last_ack_time_unix_secs, job.remaining_repl_bytes)
}

/// What a poll found out about one migration.
#[derive(Debug)]
enum Seen {
    /// The job's state, its message, and what shows it is alive ([`Beat`]).
    Job(MigrationState, String, Beat),
    /// The nodes that answered do not list the job.
    Missing,
    /// Neither node answered.
    Unreachable,
}

impl ValkeyStorage {
    pub fn new(config: ValkeyStorageConfig) -> Result<Self, StorageError> {
        let bad = |field: &str, detail: String| StorageError::Rejected {
            status: UNPROCESSABLE,
            message: format!("storage.valkey.{field}: {detail}"),
        };
        let tenant = TenantId::new(config.cluster.clone()).map_err(|e| bad("cluster", e.to_string()))?;
        let table = TableId::new(SLOTS_TABLE).map_err(|e| bad("table", e.to_string()))?;
        let options = ConnectOptions {
            connect_timeout: Duration::from_millis(config.connect_timeout_ms),
            command_timeout: Duration::from_millis(config.command_timeout_ms),
            username: config.username.clone(),
            password: config.password.clone(),
        };
        let inner = Inner {
            config,
            tenant,
            table,
            options,
            clients: Mutex::new(HashMap::new()),
            known: Mutex::new(Vec::new()),
            ops: Mutex::new(HashMap::new()),
            submitting: tokio::sync::Mutex::new(()),
            layout: Mutex::new(Layout::default()),
            groups: Mutex::new(HashMap::new()),
            zones: Mutex::new(HashMap::new()),
            key_counts: Mutex::new(HashMap::new()),
        };
        Ok(Self { inner: Arc::new(inner), stop: CancellationToken::new() })
    }
}

/// The executor's reading of a node error: did the command certainly not run?
fn storage_error(error: &NodeError) -> StorageError {
    match error {
        NodeError::Connect { .. } | NodeError::ConnectTimeout { .. } | NodeError::Poisoned { .. } => {
            StorageError::Unreachable(error.to_string())
        }
        NodeError::Rejected { .. } => StorageError::Rejected { status: UNPROCESSABLE, message: error.to_string() },
        NodeError::Timeout { .. } | NodeError::Io { .. } | NodeError::Reply { .. } => {
            StorageError::Uncertain(error.to_string())
        }
    }
}

/// The node's own `availability-zone` setting (Valkey 8.0+; empty when unset, and on servers
/// without it): the `availability_zone:` line of `INFO server`, which only `+info` may run.
async fn availability_zone(client: &mut NodeClient) -> Result<String, NodeError> {
    const NAME: &str = "INFO server";
    let value = client.query(NAME, redis::cmd("INFO").arg("server")).await?;
    let text = match &value {
        redis::Value::BulkString(bytes) => std::str::from_utf8(bytes).ok(),
        redis::Value::VerbatimString { text, .. } => Some(text.as_str()),
        _ => None,
    };
    let Some(text) = text else {
        let detail = format!("expected a string, got {}", value_kind(&value));
        let source = ParseError { command: NAME, field: "reply".to_owned(), detail };
        return Err(NodeError::Reply { addr: client.addr().clone(), command: NAME, source });
    };
    Ok(zone_setting(text).to_owned())
}

/// The value of the `availability_zone:` line of an `INFO` text, trimmed; empty without one.
fn zone_setting(info: &str) -> &str {
    info.lines().find_map(|line| line.strip_prefix("availability_zone:")).map_or("", str::trim)
}

/// What kind of reply a value is, for an error message (never its payload).
fn value_kind(value: &redis::Value) -> &'static str {
    match value {
        redis::Value::Nil => "nil",
        redis::Value::Int(_) => "an integer",
        redis::Value::Array(_) => "an array",
        redis::Value::Map(_) => "a map",
        _ => "another type",
    }
}

/// The refusal of a kind Valkey cannot do at all.
fn unsupported(spec: &ActionSpec) -> StorageError {
    rejected(format!(
        "{} is not supported on valkey: hash slots cannot be split or merged; move or group the slot instead",
        spec.kind().as_str()
    ))
}

fn rejected(message: impl Into<String>) -> StorageError {
    StorageError::Rejected { status: UNPROCESSABLE, message: message.into() }
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Progress of a running job: its phase's share, plus part of the way to the next phase for
/// every beat seen in this phase (half the way after one, two thirds after two, ...), so it
/// rises while the job is alive and never reaches the next phase's share.
fn running_ratio(phase: &str, beats: u32) -> f64 {
    let (ratio, band) = phase_ratio(phase);
    ratio + band * (1.0 - 1.0 / (f64::from(beats) + 1.0))
}

/// A running job's phase as a share of the way to the handover, and the width of one phase.
fn phase_ratio(phase: &str) -> (f64, f64) {
    const EXPORT: [&str; 11] = [
        "connecting",
        "sending-auth-command",
        "reading-auth-response",
        "sending-establish-command",
        "reading-establish-response",
        "waiting-to-snapshot",
        "snapshotting",
        "replicating",
        "waiting-to-pause",
        "failover-paused",
        "failover-granted",
    ];
    const IMPORT: [&str; 6] = [
        "waiting-for-ack",
        "receiving-snapshot",
        "waiting-for-paused",
        "failover-requested",
        "failover-granted",
        "cleaning-up",
    ];
    for phases in [&EXPORT[..], &IMPORT[..]] {
        if let Some(i) = phases.iter().position(|p| *p == phase) {
            let band = 1.0 / (phases.len() + 1) as f64;
            return ((i + 1) as f64 * band, band);
        }
    }
    (0.0, 1.0 / (EXPORT.len() + 1) as f64)
}

impl Inner {
    /// A connection to `addr`: the cached one unless an earlier failure made it unusable.
    async fn client(&self, addr: &NodeAddr) -> Result<NodeClient, NodeError> {
        let cached = self.clients.lock().expect("clients lock is never poisoned").get(addr).cloned();
        if let Some(client) = cached.filter(|c| !c.is_poisoned()) {
            return Ok(client);
        }
        let client = NodeClient::connect(addr, &self.options).await?;
        self.clients.lock().expect("clients lock is never poisoned").insert(addr.clone(), client.clone());
        if let Some(zone) = self.zones.lock().expect("zones lock is never poisoned").get_mut(addr) {
            zone.current = false;
        }
        Ok(client)
    }

    /// Runs a read-only command; a cached connection that broke (the node restarted) is
    /// replaced once, since re-reading is harmless.
    async fn read<T, F>(&self, addr: &NodeAddr, command: F) -> Result<T, NodeError>
    where
        F: AsyncFn(&mut NodeClient) -> Result<T, NodeError>,
    {
        let mut client = self.client(addr).await?;
        match command(&mut client).await {
            Err(NodeError::Io { .. } | NodeError::Poisoned { .. }) => {
                self.clients.lock().expect("clients lock is never poisoned").remove(addr);
                let mut client = self.client(addr).await?;
                command(&mut client).await
            }
            other => other,
        }
    }

    /// `CLUSTER NODES` from the first seed (then the last known primaries) that answers.
    async fn read_view(&self) -> Result<View, StorageError> {
        let mut candidates = self.config.seed_addrs();
        for addr in self.known.lock().expect("known lock is never poisoned").iter() {
            if !candidates.contains(addr) {
                candidates.push(addr.clone());
            }
        }
        let mut errors = Vec::new();
        for addr in &candidates {
            match self.read(addr, async |c: &mut NodeClient| c.cluster_nodes().await).await {
                Ok(nodes) => {
                    let view = self.view_of(addr, nodes)?;
                    *self.known.lock().expect("known lock is never poisoned") =
                        view.primaries.iter().map(|p| p.addr.clone()).collect();
                    return Ok(view);
                }
                Err(error) => errors.push(error.to_string()),
            }
        }
        Err(StorageError::Unreachable(format!("no valkey node answered CLUSTER NODES: {}", errors.join("; "))))
    }

    fn view_of(&self, answered: &NodeAddr, nodes: Vec<ClusterNode>) -> Result<View, StorageError> {
        let mut primaries: Vec<Primary> = Vec::new();
        for node in nodes.into_iter().filter(ClusterNode::is_primary) {
            // A node's own line lacks its IP until it met another node: it is the one we asked.
            let addr = match (&node.addr, node.flags.myself) {
                (Some(addr), _) => addr.clone(),
                (None, true) => answered.clone(),
                (None, false) if node.slots.is_empty() => continue, // half-joined, owns nothing
                (None, false) => {
                    return Err(StorageError::Uncertain(format!(
                        "CLUSTER NODES on {answered}: node {} owns slots but has no address",
                        node.id
                    )));
                }
            };
            let worker = self.config.worker_id(&addr).ok_or_else(|| {
                StorageError::Uncertain(format!("node {addr} gives no valid worker id; set storage.valkey.workers"))
            })?;
            if let Some(other) = primaries.iter().find(|p| p.worker == worker) {
                return Err(StorageError::Uncertain(format!(
                    "nodes {} and {addr} both map to worker id {worker}; use worker_ids = \"address\" or storage.valkey.workers",
                    other.addr
                )));
            }
            let health = if node.flags.fail || node.flags.pfail {
                Health::Down
            } else if node.is_healthy() {
                Health::Healthy
            } else {
                Health::Degraded
            };
            primaries.push(Primary { id: node.id, addr, worker, health, slots: node.slots });
        }
        primaries.sort_by(|a, b| a.worker.cmp(&b.worker));
        Ok(View { primaries })
    }

    /// Key counts per slot (`CLUSTER SLOT-STATS`, one command for all the node's slots) and
    /// average bytes per key (`INFO`: `used_memory` / keys) of one primary; `None` when it does
    /// not answer (its slots then show zero bytes). The average includes the node's fixed
    /// overhead (~1-2 MB), so a node with few keys overstates it; with many keys it converges.
    /// The node's key counts as last read, while they stand ([`KEY_COUNT_REFRESH`]).
    fn kept_keys(&self, primary: &Primary) -> Option<KeyCounts> {
        let kept = self.key_counts.lock().expect("key counts lock is never poisoned");
        kept.get(&primary.addr)
            .filter(|k| k.node == primary.id && k.slots == primary.slots && k.read_at.elapsed() < KEY_COUNT_REFRESH)
            .map(|k| (k.counts.clone(), k.per_key))
    }

    /// Reads the node's slot key counts and average key size, and keeps them.
    async fn node_keys(&self, primary: &Primary) -> Option<KeyCounts> {
        let (counts, per_key) = self.read_node_keys(&primary.addr).await?;
        let counts = Arc::new(counts);
        let read = NodeKeys {
            node: primary.id.clone(),
            slots: primary.slots.clone(),
            counts: counts.clone(),
            per_key,
            read_at: Instant::now(),
        };
        self.key_counts.lock().expect("key counts lock is never poisoned").insert(primary.addr.clone(), read);
        Some((counts, per_key))
    }

    async fn read_node_keys(&self, addr: &NodeAddr) -> Option<(Vec<(Slot, u64)>, u64)> {
        let stats = match self.read(addr, async |c: &mut NodeClient| c.slot_stats(SlotRange::all()).await).await {
            Ok(stats) => stats,
            Err(error) => {
                warn!(%addr, %error, "cannot read slot key counts");
                return None;
            }
        };
        let per_key = match self.read(addr, async |c: &mut NodeClient| c.info().await).await {
            Ok(info) if info.total_keys() > 0 => (info.used_memory_bytes / info.total_keys()).max(1),
            Ok(_) => self.config.bytes_per_key,
            Err(error) => {
                warn!(%addr, %error, "cannot read INFO for the average key size");
                self.config.bytes_per_key
            }
        };
        Some((stats.into_iter().map(|s| (s.slot, s.key_count)).collect(), per_key))
    }

    /// Whether the node's own zone setting has to be read (again): not when the config maps the
    /// node (the mapping wins) or the node is down (its last reading stands).
    fn zone_due(&self, primary: &Primary) -> bool {
        if primary.health == Health::Down || self.config.configured_zone(&primary.addr).is_some() {
            return false;
        }
        match self.zones.lock().expect("zones lock is never poisoned").get(&primary.addr) {
            Some(read) => read.node != primary.id || !read.current || read.read_at.elapsed() >= ZONE_REFRESH,
            None => true,
        }
    }

    /// Reads the node's `availability-zone` (`INFO server`, within the command timeout) into
    /// the cache. A setting that is no valid zone id is no zone, logged once per node and
    /// value; a failed read keeps the last reading and is tried again at the next topology.
    async fn read_zone(&self, primary: &Primary) {
        let addr = &primary.addr;
        let setting = match self.read(addr, async |c: &mut NodeClient| availability_zone(c).await).await {
            Ok(setting) => setting,
            Err(error) => {
                warn!(%addr, %error, "cannot read the node's availability zone; keeping the last one read");
                return;
            }
        };
        let mut zones = self.zones.lock().expect("zones lock is never poisoned");
        let seen = zones.get(addr).is_some_and(|z| z.node == primary.id && z.setting == setting);
        let zone = match setting.as_str() {
            "" => None,
            text => match ZoneId::new(text) {
                Ok(zone) => Some(zone),
                Err(error) => {
                    if !seen {
                        warn!(%addr, node = %primary.id, worker = %primary.worker, availability_zone = %text, %error,
                            "the node's availability-zone is not a valid zone id; the worker has no zone (set storage.valkey.zones to give it one)");
                    }
                    None
                }
            },
        };
        let read = NodeZone { node: primary.id.clone(), setting, zone, read_at: Instant::now(), current: true };
        zones.insert(addr.clone(), read);
    }

    /// The worker's zone: the configured one, else the node's own as last read.
    fn zone_of(&self, primary: &Primary) -> Option<ZoneId> {
        self.config.configured_zone(&primary.addr).or_else(|| {
            let zones = self.zones.lock().expect("zones lock is never poisoned");
            zones.get(&primary.addr).filter(|z| z.node == primary.id).and_then(|z| z.zone.clone())
        })
    }

    async fn topology(self: &Arc<Self>) -> Result<Topology, StorageError> {
        let view = self.read_view().await?;
        let mut tasks = tokio::task::JoinSet::new();
        let mut readings = Vec::new();
        for primary in view.primaries.iter().filter(|p| p.health != Health::Down) {
            let kept = if primary.slots.is_empty() { None } else { self.kept_keys(primary) };
            let (keys, zone) = (!primary.slots.is_empty() && kept.is_none(), self.zone_due(primary));
            readings.extend(kept);
            if !keys && !zone {
                continue;
            }
            let (this, primary) = (self.clone(), primary.clone());
            tasks.spawn(async move {
                // The zone first: a new connection it opens is then the one the key counts use,
                // and does not mark the reading it just made as one of an older connection.
                if zone {
                    this.read_zone(&primary).await;
                }
                if keys { this.node_keys(&primary).await } else { None }
            });
        }
        while let Some(done) = tasks.join_next().await {
            if let Ok(Some(reading)) = done {
                readings.push(reading);
            }
        }
        let mut keys = vec![0u64; usize::from(SLOT_COUNT)];
        let mut bytes = vec![0u64; usize::from(SLOT_COUNT)];
        for (counts, per_key) in readings {
            for &(slot, count) in counts.iter() {
                keys[usize::from(slot.get())] = count;
                bytes[usize::from(slot.get())] = count.saturating_mul(per_key);
            }
        }
        let zones: Vec<Option<ZoneId>> = view.primaries.iter().map(|p| self.zone_of(p)).collect();
        let version = self.layout_version(&view, &zones);
        let groups = self.current_groups(&view);
        // One core of main thread per primary; the configured caps, if any, beside it.
        let capacity = Capacity {
            ops_per_sec: self.config.node_ops_per_sec.unwrap_or(0.0),
            bytes_per_sec: self.config.node_bytes_per_sec.unwrap_or(0.0),
        };
        let workers = view
            .primaries
            .iter()
            .zip(zones)
            .map(|(p, zone)| WorkerInfo {
                id: p.worker.clone(),
                capacity,
                cpu_cores: MAIN_THREAD_CORES,
                group: groups.get(&p.worker).map(|(g, _)| g.clone()),
                health: p.health,
                zone,
                rack: None, // Valkey has no rack setting
            })
            .collect();
        let limit =
            self.config.slot_limit.map(|l| Capacity { ops_per_sec: l.ops_per_sec, bytes_per_sec: l.bytes_per_sec });
        let mut partitions = Vec::with_capacity(usize::from(SLOT_COUNT));
        for primary in &view.primaries {
            for slot in primary.slots.iter().flat_map(|r| r.slots()) {
                partitions.push(PartitionInfo {
                    id: partition_id(slot),
                    tenant: self.tenant.clone(),
                    table: self.table.clone(),
                    range: slot_key_range(slot),
                    owner: primary.worker.clone(),
                    group: groups.get(&primary.worker).filter(|(_, s)| *s == slot).map(|(g, _)| g.clone()),
                    stored_bytes: bytes[usize::from(slot.get())],
                    limit,
                    supported_actions: vec![ActionKind::Move, ActionKind::Group],
                });
            }
        }
        partitions.sort_by_key(|p| p.range.start);
        metrics::gauge!("lb_ops_valkey_keys").set(keys.iter().sum::<u64>() as f64);
        Ok(Topology {
            version,
            workers,
            partitions,
            datasets: Vec::new(),
            new_group_dedicates_owner: true,
            multi_way_split: false,
            move_rate_limit: false,
            merge_to_worker: false,
        })
    }

    /// Bumps the version when owners, workers, health or zones (`zones[i]` of
    /// `view.primaries[i]`) changed since the last read. The new version is the wall clock in
    /// milliseconds (or the old one + 1 if that is not larger), so it keeps increasing across
    /// ops-server restarts too, without any state of its own.
    fn layout_version(&self, view: &View, zones: &[Option<ZoneId>]) -> u64 {
        let mut hasher = DefaultHasher::new();
        for (p, zone) in view.primaries.iter().zip(zones) {
            (&p.worker, &p.id, p.health as u8, &p.slots, zone).hash(&mut hasher);
        }
        let fingerprint = hasher.finish();
        let mut layout = self.layout.lock().expect("layout lock is never poisoned");
        if layout.fingerprint != Some(fingerprint) {
            layout.fingerprint = Some(fingerprint);
            layout.version = (layout.version + 1).max(u64::try_from(now_ms()).unwrap_or(0));
        }
        layout.version
    }

    /// The groups that hold in `view`, by worker: the slot's node owns that slot alone. The
    /// record is kept when a view says otherwise: a node's view can lag a migration that just
    /// ended (the node answering still lists the moved slots on their old owner), and the group
    /// shows again once the node holds its slot alone. At most one record per slot.
    fn current_groups(&self, view: &View) -> HashMap<WorkerId, (GroupId, Slot)> {
        let groups = self.groups.lock().expect("groups lock is never poisoned");
        groups
            .iter()
            .filter_map(|(slot, group)| {
                let owner = view.owner(*slot).filter(|p| p.slot_count() == 1)?;
                Some((owner.worker.clone(), (group.clone(), *slot)))
            })
            .collect()
    }

    fn set_group(&self, slot: Slot, group: GroupId) {
        self.groups.lock().expect("groups lock is never poisoned").insert(slot, group);
    }

    /// What an action means on this cluster now.
    fn plan(&self, spec: &ActionSpec, view: &View) -> Result<Plan, StorageError> {
        let slot_of = |partition: &PartitionId| {
            parse_partition_id(partition)
                .ok_or_else(|| rejected(format!("partition {partition} is not a slot (slot-00000 .. slot-16383)")))
        };
        let owner_of = |slot: Slot| {
            let owner = view.owner(slot).ok_or_else(|| rejected(format!("slot {slot} has no owner in the cluster")))?;
            if owner.health == Health::Down {
                return Err(rejected(format!("slot {slot} is on {}, which is down", owner.worker)));
            }
            Ok(owner)
        };
        match spec {
            ActionSpec::Move { max_bytes_per_sec: Some(_), .. } => {
                Err(rejected("a move's max_bytes_per_sec: Valkey's atomic slot migration has no rate".to_owned()))
            }
            ActionSpec::Move { partition, to_worker, max_bytes_per_sec: None } => {
                let slot = slot_of(partition)?;
                let target =
                    view.by_worker(to_worker).ok_or_else(|| rejected(format!("unknown worker {to_worker}")))?;
                let owner = owner_of(slot)?;
                if owner.id == target.id {
                    return Ok(Plan::AlreadyDone(format!("slot {slot} is already on {to_worker}")));
                }
                if target.health != Health::Healthy {
                    return Err(rejected(format!("target worker {to_worker} is {:?}", target.health)));
                }
                Ok(Plan::Steps(vec![Step {
                    source: owner.clone(),
                    target: target.clone(),
                    ranges: vec![SlotRange::single(slot)],
                }]))
            }
            ActionSpec::Group { target: GroupTarget::Partition { partition }, .. } => {
                let slot = slot_of(partition)?;
                let owner = owner_of(slot)?;
                let moved: Vec<Slot> = owner.slots.iter().flat_map(|r| r.slots()).filter(|s| *s != slot).collect();
                if moved.is_empty() {
                    return Ok(Plan::AlreadyDone(format!("slot {slot} is already alone on {}", owner.worker)));
                }
                // A node already dedicated to another slot keeps it alone.
                let dedicated = self.current_groups(view);
                let receivers: Vec<&Primary> = view
                    .primaries
                    .iter()
                    .filter(|p| p.id != owner.id && p.health == Health::Healthy && !dedicated.contains_key(&p.worker))
                    .collect();
                if receivers.is_empty() {
                    return Err(rejected(format!(
                        "no other healthy primary outside a group can take the other slots of {}",
                        owner.worker
                    )));
                }
                let counts: Vec<u32> = receivers.iter().map(|p| p.slot_count()).collect();
                let steps = plan::spread(&moved, &counts)
                    .into_iter()
                    .map(|share| Step {
                        source: owner.clone(),
                        target: receivers[share.receiver].clone(),
                        ranges: share.ranges,
                    })
                    .collect();
                Ok(Plan::Steps(steps))
            }
            ActionSpec::Group { .. } => Err(rejected(
                "valkey groups single slots only (scope = \"partition\"); a table or tenant is the whole cluster",
            )),
            ActionSpec::Split { .. }
            | ActionSpec::SplitInto { .. }
            | ActionSpec::Merge { .. }
            | ActionSpec::Reshard { .. } => Err(unsupported(spec)),
        }
    }

    /// Names of the jobs matching `step` that exist before it is sent, on both sides. The
    /// source must answer (otherwise nothing is sent); the target may not.
    async fn existing_jobs(&self, step: &Step) -> Result<HashSet<String>, StorageError> {
        let source =
            self.read(&step.source.addr, async |c: &mut NodeClient| c.slot_migrations().await).await.map_err(|e| {
                match storage_error(&e) {
                    rejected @ StorageError::Rejected { .. } => rejected,
                    _ => StorageError::Unreachable(e.to_string()),
                }
            })?;
        let target = self
            .read(&step.target.addr, async |c: &mut NodeClient| c.slot_migrations().await)
            .await
            .unwrap_or_default();
        Ok(source.into_iter().chain(target).filter(|j| step.matches(j)).map(|j| j.name).collect())
    }

    /// Sends `MIGRATESLOTS` for `step` to its source.
    async fn send(&self, step: &Step) -> Result<(), StorageError> {
        let mut client = self.client(&step.source.addr).await.map_err(|e| storage_error(&e))?;
        client.migrate_slots(&step.ranges, &step.target.id).await.map_err(|e| storage_error(&e))?;
        info!(migration = %step.describe(), "valkey slot migration started");
        Ok(())
    }

    /// The newest job of `step` that was not there before it was sent: on the source, or on
    /// the target when the source does not answer or does not list it.
    async fn seen(&self, step: &Step, before: &HashSet<String>) -> Seen {
        let mut answered = 0;
        for (addr, side) in
            [(&step.source.addr, MigrationOperation::Export), (&step.target.addr, MigrationOperation::Import)]
        {
            match self.read(addr, async |c: &mut NodeClient| c.slot_migrations().await).await {
                Ok(jobs) => {
                    answered += 1;
                    let job =
                        jobs.into_iter().find(|j| j.operation == side && step.matches(j) && !before.contains(&j.name));
                    if let Some(job) = job {
                        let beat = beat(&job);
                        return Seen::Job(job.state, job.message, beat);
                    }
                }
                Err(error) => warn!(%addr, %error, "cannot read slot migrations"),
            }
        }
        // A node that answers lists its jobs at once, so one answer without the job is enough.
        if answered > 0 { Seen::Missing } else { Seen::Unreachable }
    }

    /// Whether the cluster now says every slot of `step` is on its target; `None` if it cannot
    /// be read.
    async fn landed(&self, step: &Step) -> Option<bool> {
        let view = self.read_view().await.ok()?;
        Some(step.ranges.iter().flat_map(|r| r.slots()).all(|s| view.owner(s).is_some_and(|o| o.id == step.target.id)))
    }

    /// Follows one migration to its end; `Err` carries why it failed.
    async fn watch(
        &self,
        step: &Step,
        before: &HashSet<String>,
        op: &OperationId,
        base: f64,
        share: f64,
        stop: &CancellationToken,
    ) -> Result<(), String> {
        let poll = Duration::from_millis(self.config.poll_interval_ms);
        let give_up = Duration::from_millis(self.config.unreachable_after_ms);
        let mut missing = 0;
        let mut unreachable_since: Option<Instant> = None;
        // Beats seen in the current phase: a phase that lasts (the snapshot of a large slot)
        // still shows progress while its peer acknowledges, so the stall detector only fires
        // on a job that really stopped.
        let (mut last, mut beats) = (None::<(String, Beat)>, 0u32);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return Err("the valkey adapter was replaced (config change) while the migration ran; re-read topology".to_owned()),
                _ = tokio::time::sleep(poll) => {}
            }
            let by_ownership = |landed: Option<bool>, why: &str| match landed {
                Some(true) => Some(Ok(())),
                Some(false) => Some(Err(format!("{why}; {} did not move", step.describe()))),
                None => None,
            };
            match self.seen(step, before).await {
                Seen::Job(MigrationState::Success, ..) => return Ok(()),
                Seen::Job(MigrationState::Failed | MigrationState::Cancelled, message, _) => {
                    // The job's verdict, unless the cluster says the handover happened after all
                    // (a side that died after granting it reports the loss as a failure).
                    if self.landed(step).await == Some(true) {
                        warn!(operation = %op, %message, "the migration job failed, but its slots are on the target");
                        return Ok(());
                    }
                    let message = if message.is_empty() { "the migration job failed".to_owned() } else { message };
                    return Err(message);
                }
                Seen::Job(MigrationState::Running(phase), _, beat) => {
                    unreachable_since = None;
                    match &last {
                        Some((p, _)) if *p != phase => beats = 0,
                        Some((_, b)) if *b != beat => beats += 1,
                        _ => {}
                    }
                    self.set_progress(op, base + share * running_ratio(&phase, beats));
                    last = Some((phase, beat));
                }
                Seen::Missing => {
                    unreachable_since = None;
                    missing += 1;
                    if missing >= MISSING_JOB_POLLS
                        && let Some(outcome) = by_ownership(
                            self.landed(step).await,
                            "no migration job was listed on the nodes that answered",
                        )
                    {
                        return outcome;
                    }
                }
                Seen::Unreachable => {
                    let since = *unreachable_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= give_up
                        && let Some(outcome) = by_ownership(
                            self.landed(step).await,
                            &format!(
                                "neither {} nor {} answered for {} ms",
                                step.source.addr,
                                step.target.addr,
                                give_up.as_millis()
                            ),
                        )
                    {
                        return outcome;
                    }
                }
            }
        }
    }

    fn set_progress(&self, op: &OperationId, ratio: f64) {
        if let Some(o) = self.ops.lock().expect("ops lock is never poisoned").get_mut(op) {
            o.progress_ratio = o.progress_ratio.max(ratio.clamp(0.0, 1.0));
        }
    }

    fn finish(&self, op: &OperationId, result: Result<(), String>) {
        let mut ops = self.ops.lock().expect("ops lock is never poisoned");
        let Some(o) = ops.get_mut(op) else { return };
        o.finished_at_ms = Some(now_ms());
        match result {
            Ok(()) => {
                o.state = OperationState::Succeeded;
                o.progress_ratio = 1.0;
                metrics::counter!("lb_ops_valkey_operations_total", "outcome" => "succeeded").increment(1);
                info!(operation = %op, "valkey operation succeeded");
            }
            Err(message) => {
                o.state = OperationState::Failed;
                warn!(operation = %op, error = %message, "valkey operation failed");
                o.error = Some(message);
                metrics::counter!("lb_ops_valkey_operations_total", "outcome" => "failed").increment(1);
            }
        }
    }

    /// Runs the steps of one operation, one after the other. `submit` sent the first (or may
    /// have: its reply was lost); `first` names the matching jobs that existed before it.
    async fn drive(
        self: Arc<Self>,
        op: OperationId,
        steps: Vec<Step>,
        first: Option<HashSet<String>>,
        group: Option<(GroupId, Slot)>,
        stop: CancellationToken,
    ) {
        let total = steps.len();
        let share = 1.0 / total as f64;
        let mut before = first;
        for (i, step) in steps.iter().enumerate() {
            let partial = |message: String| {
                if i == 0 {
                    message
                } else {
                    format!("{message} (migration {} of {total}; the first {i} completed and stay applied)", i + 1)
                }
            };
            let known = match before.take() {
                Some(known) => known,
                None => match self.existing_jobs(step).await {
                    Ok(known) => match self.send(step).await {
                        Ok(()) => known,
                        Err(error @ (StorageError::Rejected { .. } | StorageError::Unreachable(_))) => {
                            return self.finish(&op, Err(partial(format!("{} not started: {error}", step.describe()))));
                        }
                        Err(error) => {
                            warn!(operation = %op, %error, "migration may have started; looking for its job");
                            known
                        }
                    },
                    Err(error) => {
                        return self.finish(&op, Err(partial(format!("{} not started: {error}", step.describe()))));
                    }
                },
            };
            if let Err(message) = self.watch(step, &known, &op, i as f64 * share, share, &stop).await {
                return self.finish(&op, Err(partial(message)));
            }
            self.set_progress(&op, (i + 1) as f64 * share);
        }
        if let Some((group, slot)) = group {
            self.set_group(slot, group);
        }
        self.finish(&op, Ok(()));
    }

    /// Finishes an operation taken over from another process: waits until the node that owns
    /// the action's slot runs no migration any more (the one that was running ends by itself;
    /// each is atomic), then plans the action again on the layout as it is now and runs what is
    /// left — a move whose migration finished is done, a group whose first migrations finished
    /// moves only the slots still on the node.
    async fn resume(self: Arc<Self>, op: OperationId, spec: ActionSpec, stop: CancellationToken) {
        let poll = Duration::from_millis(self.config.poll_interval_ms);
        let give_up = Duration::from_millis(self.config.unreachable_after_ms);
        let Some(slot) = action_slot(&spec) else {
            return self.finish(&op, Err(format!("cannot take over {op}: it names no slot")));
        };
        let mut unreachable_since: Option<Instant> = None;
        // While it waits, the running migration's beats are its progress (capped far below
        // what the resumed steps report), so the stall detector does not end a healthy wait.
        let (mut last_beats, mut beats) = (Vec::<Beat>::new(), 0u32);
        loop {
            let running = match self.read_view().await.ok().and_then(|v| v.owner(slot).map(|p| p.addr.clone())) {
                Some(addr) => self
                    .read(&addr, async |c: &mut NodeClient| c.slot_migrations().await)
                    .await
                    .ok()
                    .map(|jobs| jobs.iter().filter(|j| !j.state.is_terminal()).map(beat).collect::<Vec<Beat>>()),
                None => None,
            };
            match running {
                Some(now) if now.is_empty() => break,
                Some(now) => {
                    unreachable_since = None;
                    if now != last_beats {
                        beats += 1;
                        self.set_progress(&op, RESUME_WAIT_PROGRESS * (1.0 - 1.0 / (f64::from(beats) + 1.0)));
                        last_beats = now;
                    }
                }
                None => {
                    let since = *unreachable_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= give_up {
                        let why = format!("the owner of slot {slot} did not answer for {} ms", give_up.as_millis());
                        return self.finish(&op, Err(format!("cannot take over {op}: {why}; re-read topology")));
                    }
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(poll) => {}
            }
        }
        let view = match self.read_view().await {
            Ok(view) => view,
            Err(error) => return self.finish(&op, Err(format!("cannot take over {op}: {error}"))),
        };
        match self.plan(&spec, &view) {
            Ok(Plan::AlreadyDone(why)) => {
                info!(operation = %op, %why, "taken-over operation had finished");
                if let Some((group, slot)) = slot_group(&spec) {
                    self.set_group(slot, group);
                }
                self.finish(&op, Ok(()));
            }
            Ok(Plan::Steps(steps)) => {
                info!(operation = %op, migrations = steps.len(), "taken-over operation resumes");
                let group = slot_group(&spec);
                self.drive(op, steps, None, group, stop).await;
            }
            Err(error) => self.finish(&op, Err(format!("cannot finish {op}: {error}"))),
        }
    }

    fn record(&self, op: &OperationId, request: &AdminRequest, state: OperationState) {
        let now = now_ms();
        let done = matches!(state, OperationState::Succeeded);
        let operation = Operation {
            id: op.clone(),
            action_id: request.action_id.clone(),
            kind: request.spec.kind(),
            state,
            started_at_ms: now,
            finished_at_ms: done.then_some(now),
            progress_ratio: if done { 1.0 } else { 0.0 },
            error: None,
        };
        let mut ops = self.ops.lock().expect("ops lock is never poisoned");
        if ops.len() >= MAX_OPERATIONS {
            // Forget the oldest finished operation; running ones are never dropped.
            let oldest = ops
                .values()
                .filter(|o| o.finished_at_ms.is_some())
                .min_by_key(|o| o.finished_at_ms)
                .map(|o| o.id.clone());
            if let Some(oldest) = oldest {
                ops.remove(&oldest);
            }
        }
        ops.insert(op.clone(), operation);
    }
}

impl ValkeyStorage {
    async fn submit_inner(&self, request: &AdminRequest) -> Result<OperationId, StorageError> {
        let op = operation_id(&request.action_id);
        let _one_at_a_time = self.inner.submitting.lock().await;
        if self.inner.ops.lock().expect("ops lock is never poisoned").contains_key(&op) {
            return Ok(op);
        }
        // Refuse what can never run before touching the cluster.
        if matches!(
            request.spec,
            ActionSpec::Split { .. }
                | ActionSpec::SplitInto { .. }
                | ActionSpec::Merge { .. }
                | ActionSpec::Reshard { .. }
        ) {
            return Err(unsupported(&request.spec));
        }
        let view = self.inner.read_view().await?;
        let steps = match self.inner.plan(&request.spec, &view)? {
            Plan::AlreadyDone(why) => {
                info!(operation = %op, %why, "nothing to migrate");
                self.inner.record(&op, request, OperationState::Succeeded);
                if let Some((group, slot)) = slot_group(&request.spec) {
                    self.inner.set_group(slot, group);
                }
                return Ok(op);
            }
            Plan::Steps(steps) => steps,
        };
        let group = slot_group(&request.spec);
        let first = &steps[0];
        let before = self.inner.existing_jobs(first).await?;
        let sent = self.inner.send(first).await;
        if let Err(error @ (StorageError::Rejected { .. } | StorageError::Unreachable(_))) = sent {
            return Err(error); // certainly not started: nothing to track
        }
        // Started, or maybe started (the reply was lost): tracked either way, so the driver finds
        // the job if it exists and a retry of the action gets this operation.
        self.inner.record(&op, request, OperationState::Running);
        tokio::spawn(self.inner.clone().drive(op.clone(), steps, Some(before), group, self.stop.clone()));
        sent.map(|()| op)
    }

    /// Takes over an operation this process did not start — the ops server restarted, or a
    /// config change rebuilt the adapter — and finishes it from the cluster's own state
    /// ([`Inner::resume`]). Only this adapter's operations (`valkey-<action id>` of a move or a
    /// group) are taken over; any other id is unknown, and may have run.
    async fn adopt(&self, op: &OperationId, request: &AdminRequest) -> Result<Operation, StorageError> {
        let ours = operation_id(&request.action_id) == *op
            && matches!(request.spec, ActionSpec::Move { .. } | ActionSpec::Group { .. })
            && action_slot(&request.spec).is_some();
        if !ours {
            return Err(StorageError::Uncertain(format!(
                "operation {op} is unknown to this ops server process and not one it can take over; re-read topology"
            )));
        }
        let _one_at_a_time = self.inner.submitting.lock().await;
        if let Some(known) = self.inner.ops.lock().expect("ops lock is never poisoned").get(op).cloned() {
            return Ok(known);
        }
        info!(operation = %op, "taking over a valkey operation this process did not start; finishing it from the cluster's state");
        metrics::counter!("lb_ops_valkey_operations_adopted_total").increment(1);
        self.inner.record(op, request, OperationState::Running);
        tokio::spawn(self.inner.clone().resume(op.clone(), request.spec.clone(), self.stop.clone()));
        self.inner
            .ops
            .lock()
            .expect("ops lock is never poisoned")
            .get(op)
            .cloned()
            .ok_or_else(|| StorageError::Uncertain(format!("operation {op} was dropped as soon as it was taken over")))
    }
}

impl StorageAdapter for ValkeyStorage {
    fn topology(&self) -> StorageFuture<'_, Topology> {
        Box::pin(async move { self.inner.topology().await })
    }

    fn submit<'a>(&'a self, request: &'a AdminRequest) -> StorageFuture<'a, OperationId> {
        Box::pin(self.submit_inner(request))
    }

    fn poll<'a>(&'a self, id: &'a OperationId, request: &'a AdminRequest) -> StorageFuture<'a, Operation> {
        Box::pin(async move {
            let known = self.inner.ops.lock().expect("ops lock is never poisoned").get(id).cloned();
            match known {
                Some(operation) => Ok(operation),
                None => self.adopt(id, request).await,
            }
        })
    }

    fn remember(&self, succeeded: &[ActionRecord]) {
        for record in succeeded {
            if let Some((group, slot)) = slot_group(&record.request.spec) {
                self.inner.set_group(slot, group);
            }
        }
    }

    fn operation<'a>(&'a self, id: &'a OperationId) -> StorageFuture<'a, Operation> {
        Box::pin(async move {
            self.inner.ops.lock().expect("ops lock is never poisoned").get(id).cloned().ok_or_else(|| {
                StorageError::Uncertain(format!(
                    "operation {id} is unknown to this ops server process (restarted or reconfigured?); re-read topology"
                ))
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use lb_common::protocol::Execution;

    use super::*;

    #[test]
    fn slot_partition_ids_are_five_digits() {
        let slot = Slot::new(42).expect("slot");
        assert_eq!(partition_id(slot).as_str(), "slot-00042");
        assert_eq!(parse_partition_id(&partition_id(slot)), Some(slot));
        for bad in ["slot-16384", "slot-42", "slot-000042", "p1"] {
            assert_eq!(parse_partition_id(&bad.parse().expect("id")), None, "{bad}");
        }
        assert_eq!(operation_id(&"a-1".parse().expect("id")).as_str(), "valkey-a-1");
        let long: ActionId = "a".repeat(128).parse().expect("id");
        assert!(operation_id(&long).as_str().len() <= 128);
    }

    #[test]
    fn node_errors_map_to_what_the_executor_expects() {
        let addr = NodeAddr::new("127.0.0.1", 7001);
        let command = "CLUSTER MIGRATESLOTS";
        let cases = [
            (NodeError::ConnectTimeout { addr: addr.clone(), timeout: Duration::from_secs(1) }, Execution::NotExecuted),
            (NodeError::Poisoned { addr: addr.clone(), command }, Execution::NotExecuted),
            (
                NodeError::Rejected { addr: addr.clone(), command, message: "ERR Slots are not served".into() },
                Execution::NotExecuted,
            ),
            (
                NodeError::Timeout { addr: addr.clone(), command, timeout: Duration::from_secs(1) },
                Execution::MaybeExecuted,
            ),
        ];
        for (error, expected) in cases {
            assert_eq!(storage_error(&error).execution(), expected, "{error}");
            assert_eq!(storage_error(&error).execution() == Execution::MaybeExecuted, error.may_have_run(), "{error}");
        }
        assert!(matches!(
            storage_error(&NodeError::Rejected { addr, command, message: "ERR x".into() }),
            StorageError::Rejected { status: 422, .. }
        ));
    }

    #[test]
    fn the_zone_setting_is_the_availability_zone_line_of_info() {
        let info = "# Server\r\nvalkey_version:9.1.2\r\navailability_zone:eu-1a\r\nlistener0:name=tcp\r\n";
        assert_eq!(zone_setting(info), "eu-1a");
        assert_eq!(zone_setting("# Server\r\navailability_zone:\r\ntcp_port:7001\r\n"), "", "unset");
        assert_eq!(zone_setting("# Server\r\nredis_version:7.2.4\r\n"), "", "a server without the setting");
    }

    #[test]
    fn phases_and_beats_advance_progress_without_reaching_the_next_phase() {
        assert!(phase_ratio("snapshotting").0 < phase_ratio("failover-granted").0);
        assert!(phase_ratio("receiving-snapshot").0 > 0.0);
        assert_eq!(phase_ratio("something-new").0, 0.0);
        let mut last = running_ratio("snapshotting", 0);
        assert_eq!(last, phase_ratio("snapshotting").0);
        for beats in 1..1_000 {
            let now = running_ratio("snapshotting", beats);
            assert!(now > last, "a beat is progress ({beats})");
            assert!(now < phase_ratio("replicating").0, "never the next phase's share ({beats})");
            last = now;
        }
    }
}
