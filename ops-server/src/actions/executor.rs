//! The executor: takes actions off the fair queue and runs them against the storage system,
//! within a cluster-wide and a per-worker concurrency limit, a timeout per kind, stall detection
//! and a halt switch.
//!
//! ```text
//! dispatcher: parked actions whose workers now have room, then the fair queue
//!   → workers involved (from the topology) all under max_concurrent_per_worker? start : park
//! action task: queued → running → submit (AdminRequest, idempotent by action id)
//!   → poll the operation every poll_interval until it succeeds, fails, stalls
//!     (no progress for stall_timeout), times out (per kind) or is cancelled
//!   → succeeded | failed | timed_out | cancelled, with execution not_executed | maybe_executed
//! ```
//!
//! An action that succeeds or ends "maybe executed" drops the cached topology, so nothing is
//! planned on a stale view and its effect shows at the next read.
//! On shutdown, running actions stop being polled and are noted as interrupted; after a restart
//! those with an operation id resume polling, those without one fail as maybe executed.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use lb_common::fair_queue::EnqueueError;
use lb_common::fair_queue::{ConsumerId, FairQueue, FairQueueConfig, TenantCursor};
use lb_common::ids::{ActionId, OperationId, WorkerId};
use lb_common::protocol::{
    ActionFailure, ActionRecord, ActionSpec, ActionState, AdminRequest, Execution, GroupTarget, OperationState,
    Topology,
};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use super::book::ActionBook;
use crate::config::{OpsServerConfig, StorageConfig};
use crate::storage::{self, StorageAdapter};

/// The executor's identity towards the fair queue.
const CONSUMER: ConsumerId = ConsumerId(1);
/// How long a topology read stays good for deciding which workers an action touches.
const TOPOLOGY_TTL: Duration = Duration::from_secs(2);

/// The topology as last read, kept for [`TOPOLOGY_TTL`]. Dropping it bumps `generation`, and a
/// read that began before a drop is not kept, so a read racing an action's end cannot bring
/// back the layout from before it.
///
/// Each distinct topology gets an entity tag (`GET /v1/topology` answers `ETag`, and
/// `304 Not Modified` to a matching `If-None-Match`): a read equal to the one before keeps its
/// tag, so a master that already has it neither receives nor parses the 16,384 partitions of a
/// Valkey cluster again. Tags are `"<this process's start, hex ms>-<n>"`: a restarted ops server
/// never answers "not modified" to a tag of its previous life.
#[derive(Debug, Default)]
struct TopologyCache {
    read: Option<(Arc<Topology>, Instant)>,
    generation: u64,
    /// The newest topology read and its tag.
    tagged: Option<(Arc<Topology>, Arc<str>)>,
    tags: u64,
}

impl TopologyCache {
    /// The tag of `t`: the previous one if `t` equals the topology it was given to.
    fn tag(&mut self, t: &Arc<Topology>) -> Arc<str> {
        match &self.tagged {
            Some((old, tag)) if Arc::ptr_eq(old, t) || **old == **t => tag.clone(),
            _ => {
                self.tags += 1;
                let tag: Arc<str> = format!("\"{:x}-{}\"", *PROCESS_START_MS, self.tags).into();
                self.tagged = Some((t.clone(), tag.clone()));
                tag
            }
        }
    }
}

/// When this process started (ms since the epoch): the prefix of its topology tags.
static PROCESS_START_MS: std::sync::LazyLock<i64> = std::sync::LazyLock::new(now_ms);
/// Re-check the queue at least this often (halt lifted by config, parked actions).
const DISPATCH_TICK: Duration = Duration::from_millis(50);

#[derive(Debug, Default)]
struct Slots {
    running: usize,
    per_worker: HashMap<WorkerId, usize>,
    /// Dequeued actions waiting for a busy worker, oldest first.
    parked: VecDeque<(ActionId, Vec<WorkerId>)>,
}

#[derive(Debug)]
pub struct Executor {
    book: Arc<ActionBook>,
    queue: FairQueue<ActionId>,
    config: watch::Receiver<Arc<OpsServerConfig>>,
    storage: Mutex<Option<(StorageConfig, Arc<dyn StorageAdapter>)>>,
    api_halt: AtomicBool,
    /// Who last flipped the API switch, and why.
    halt_note: std::sync::Mutex<(Option<String>, Option<String>)>,
    slots: Mutex<Slots>,
    wake: Notify,
    topology: Mutex<TopologyCache>,
    cancels: Mutex<HashMap<ActionId, CancellationToken>>,
    tracker: TaskTracker,
}

impl Executor {
    pub fn new(book: Arc<ActionBook>, config: watch::Receiver<Arc<OpsServerConfig>>) -> Self {
        let cfg = config.borrow().clone();
        let queue = FairQueue::new(FairQueueConfig {
            // Below the tenant: table and up to two more levels.
            max_depth: lb_common::protocol::MAX_ACTOR_PATH_DEPTH - 1,
            max_outstanding_per_tenant: cfg.executor.max_queued_per_tenant as usize,
            ..FairQueueConfig::default()
        });
        queue.register_consumer(CONSUMER);
        Self {
            book,
            queue,
            config,
            storage: Mutex::new(None),
            api_halt: AtomicBool::new(false),
            halt_note: std::sync::Mutex::new((None, None)),
            slots: Mutex::new(Slots::default()),
            wake: Notify::new(),
            topology: Mutex::new(TopologyCache::default()),
            cancels: Mutex::new(HashMap::new()),
            tracker: TaskTracker::new(),
        }
    }

    /// Queues an accepted action under its actor path `[tenant, rest..]`.
    pub fn enqueue(&self, record: &ActionRecord) -> Result<(), EnqueueError> {
        let (tenant, rest) = queue_path(record);
        self.queue.enqueue(tenant, rest, record.request.id.clone())?;
        self.wake.notify_one();
        Ok(())
    }

    /// Looks at the queue again now (an action's creation was just audited).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Takes a cancelled action off the fair queue, so it stops counting against its tenant's
    /// `max_queued_per_tenant` at once (with the executor halted nothing else would remove it).
    /// `false` when the dispatcher took it already (it then skips it: its state is not queued).
    pub fn withdraw(&self, record: &ActionRecord) -> bool {
        let (tenant, rest) = queue_path(record);
        // The fair queue's own `lb_fair_queue_items{tenant}` follows the removal.
        self.queue.remove(tenant, rest, |id| *id == record.request.id).is_some()
    }

    pub fn queue_len(&self) -> usize {
        self.queue.len()
    }

    pub fn halted(&self) -> bool {
        self.api_halt.load(Ordering::Acquire) || self.config.borrow().executor.halted
    }

    /// The API's halt switch (the config's `executor.halted` is the other one), with who
    /// flipped it and why.
    pub fn set_halt(&self, halted: bool, by: &str, reason: Option<String>) {
        *self.halt_note.lock().expect("halt note lock is never poisoned") = (Some(by.to_owned()), reason);
        self.api_halt.store(halted, Ordering::Release);
        metrics::gauge!("lb_ops_halted_executors").set(if halted { 1.0 } else { 0.0 });
        self.wake.notify_one();
    }

    pub fn api_halted(&self) -> bool {
        self.api_halt.load(Ordering::Acquire)
    }

    /// Who last flipped the API switch, and why.
    pub fn halt_note(&self) -> (Option<String>, Option<String>) {
        self.halt_note.lock().expect("halt note lock is never poisoned").clone()
    }

    /// Asks a running action to stop waiting for its operation. `false` if it is not running here.
    pub fn cancel_running(&self, id: &ActionId) -> bool {
        match self.cancels.lock().expect("cancels lock is never poisoned").get(id) {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    /// Picks up where a previous run left off: re-queues queued actions, resumes polling running
    /// ones with an operation id, fails running ones without (they may or may not have started).
    pub async fn recover(self: &Arc<Self>, shutdown: &CancellationToken) {
        for record in self.book.list(Some(ActionState::Queued)) {
            if let Err(error) = self.enqueue(&record) {
                warn!(action = %record.request.id, %error, "cannot re-queue recovered action");
            }
        }
        for record in self.book.list(Some(ActionState::Running)) {
            let id = record.request.id.clone();
            match record.operation_id.clone() {
                Some(op) => {
                    let _ = self
                        .book
                        .note(&id, "executor", format!("resumed polling {op} after restart"), now_ms(), |_| {})
                        .await;
                    self.start(id, Vec::new(), Some(op), shutdown.clone());
                }
                None => {
                    let failure = ActionFailure {
                        message: "interrupted by a restart before the storage acknowledged it".to_owned(),
                        execution: Execution::MaybeExecuted,
                    };
                    self.finish(&id, ActionState::Failed, Some(failure)).await;
                }
            }
        }
    }

    /// The dispatcher loop; returns when `shutdown` fires, after running actions stopped.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let mut cursor = TenantCursor::START;
        loop {
            if shutdown.is_cancelled() {
                break;
            }
            let started = if self.halted() { false } else { self.dispatch_one(&mut cursor, &shutdown).await };
            if !started {
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = self.wake.notified() => {}
                    _ = tokio::time::sleep(DISPATCH_TICK) => {}
                }
            }
        }
        self.tracker.close();
        self.tracker.wait().await;
    }

    /// Starts at most one action; `true` if it did.
    async fn dispatch_one(self: &Arc<Self>, cursor: &mut TenantCursor, shutdown: &CancellationToken) -> bool {
        let cfg = self.config.borrow().clone();
        let max_running = cfg.executor.max_concurrent as usize;
        let per_worker = cfg.executor.max_concurrent_per_worker as usize;
        {
            let mut slots = self.slots.lock().expect("slots lock is never poisoned");
            if slots.running >= max_running {
                return false;
            }
            // Not before its creation is audited (one no longer queued is started only to be
            // dropped by its state check).
            let ready = slots.parked.iter().position(|(id, workers)| {
                (self.book.audited(id) || self.book.get(id).is_none_or(|r| r.state != ActionState::Queued))
                    && workers.iter().all(|w| slots.per_worker.get(w).copied().unwrap_or(0) < per_worker)
            });
            if let Some(i) = ready {
                let (id, workers) = slots.parked.remove(i).expect("position is in range");
                drop(slots);
                self.start(id, workers, None, shutdown.clone());
                return true;
            }
        }
        let next = match self.queue.try_dequeue(CONSUMER, *cursor) {
            Ok(Some(d)) => d,
            Ok(None) | Err(_) => return false,
        };
        *cursor = next.cursor;
        let id = next.item;
        let Some(record) = self.book.get(&id).filter(|r| r.state == ActionState::Queued) else {
            return true; // cancelled while queued: nothing to run, look again at once
        };
        let workers = self.involved_workers(&record.request.spec).await;
        let mut slots = self.slots.lock().expect("slots lock is never poisoned");
        if self.book.audited(&id) && workers.iter().all(|w| slots.per_worker.get(w).copied().unwrap_or(0) < per_worker)
        {
            drop(slots);
            self.start(id, workers, None, shutdown.clone());
        } else {
            slots.parked.push_back((id, workers));
        }
        true
    }

    fn start(
        self: &Arc<Self>,
        id: ActionId,
        workers: Vec<WorkerId>,
        resume: Option<OperationId>,
        shutdown: CancellationToken,
    ) {
        {
            let mut slots = self.slots.lock().expect("slots lock is never poisoned");
            slots.running += 1;
            for w in &workers {
                *slots.per_worker.entry(w.clone()).or_default() += 1;
            }
            metrics::gauge!("lb_ops_running_actions").set(slots.running as f64);
        }
        let cancel = CancellationToken::new();
        self.cancels.lock().expect("cancels lock is never poisoned").insert(id.clone(), cancel.clone());
        let this = self.clone();
        self.tracker.spawn(async move {
            this.execute(&id, &workers, resume, &cancel, &shutdown).await;
            this.cancels.lock().expect("cancels lock is never poisoned").remove(&id);
            let mut slots = this.slots.lock().expect("slots lock is never poisoned");
            slots.running -= 1;
            for w in &workers {
                if let Some(n) = slots.per_worker.get_mut(w) {
                    *n -= 1;
                    if *n == 0 {
                        slots.per_worker.remove(w);
                    }
                }
            }
            metrics::gauge!("lb_ops_running_actions").set(slots.running as f64);
            drop(slots);
            this.wake.notify_one();
        });
    }

    async fn execute(
        &self,
        id: &ActionId,
        workers: &[WorkerId],
        resume: Option<OperationId>,
        cancel: &CancellationToken,
        shutdown: &CancellationToken,
    ) {
        let Some(record) = self.book.get(id) else { return };
        let kind = record.request.spec.kind();
        let storage = self.storage();
        let request = AdminRequest { action_id: id.clone(), spec: record.request.spec.clone() };
        let op = match resume {
            Some(op) => op,
            None => {
                let on: Vec<&str> = workers.iter().map(|w| w.as_str()).collect();
                let detail = format!("started; workers involved: [{}]", on.join(", "));
                if let Err(error) =
                    self.book.transition(id, ActionState::Running, "executor", detail, now_ms(), |_| {}).await
                {
                    warn!(action = %id, %error, "cannot start action");
                    return;
                }
                match storage.submit(&request).await {
                    Ok(op) => {
                        let detail = format!("storage operation {op} accepted");
                        let set = op.clone();
                        let _ = self.book.note(id, "executor", detail, now_ms(), |r| r.operation_id = Some(set)).await;
                        op
                    }
                    Err(error) => {
                        let failure = ActionFailure { message: error.to_string(), execution: error.execution() };
                        self.finish(id, ActionState::Failed, Some(failure)).await;
                        return;
                    }
                }
            }
        };
        // The kind's timeout counts from the action's start, also across a restart.
        let timeout = self.config.borrow().executor.timeouts.for_spec(&request.spec);
        let started_ms = self.book.get(id).and_then(|r| r.started_at_ms).unwrap_or_else(now_ms);
        let mut last_progress = (-1.0_f64, Instant::now());
        loop {
            let (poll, stall) = {
                let c = self.config.borrow();
                (Duration::from_millis(c.executor.poll_interval_ms), Duration::from_millis(c.executor.stall_timeout_ms))
            };
            tokio::select! {
                _ = shutdown.cancelled() => {
                    let detail = format!("interrupted by shutdown while {op} runs; polling resumes after restart");
                    let _ = self.book.note(id, "executor", detail, now_ms(), |_| {}).await;
                    return;
                }
                _ = cancel.cancelled() => {
                    let failure = ActionFailure {
                        message: format!("cancelled while running; storage operation {op} may still complete"),
                        execution: Execution::MaybeExecuted,
                    };
                    self.finish(id, ActionState::Cancelled, Some(failure)).await;
                    return;
                }
                _ = tokio::time::sleep(poll) => {}
            }
            if now_ms().saturating_sub(started_ms) > timeout.as_millis() as i64 {
                let failure = ActionFailure {
                    message: format!("{} did not finish within {} ms", kind.as_str(), timeout.as_millis()),
                    execution: Execution::MaybeExecuted,
                };
                self.finish(id, ActionState::TimedOut, Some(failure)).await;
                return;
            }
            match storage.poll(&op, &request).await {
                Ok(operation) => match operation.state {
                    OperationState::Succeeded => {
                        self.finish(id, ActionState::Succeeded, None).await;
                        return;
                    }
                    OperationState::Failed => {
                        // Admin operations are atomic: a failed one left the layout as it was.
                        let message = operation.error.unwrap_or_else(|| "storage reported failure".to_owned());
                        let failure = ActionFailure { message, execution: Execution::NotExecuted };
                        self.finish(id, ActionState::Failed, Some(failure)).await;
                        return;
                    }
                    OperationState::Pending | OperationState::Running => {
                        if operation.progress_ratio > last_progress.0 {
                            last_progress = (operation.progress_ratio, Instant::now());
                        } else if last_progress.1.elapsed() > stall {
                            let failure = ActionFailure {
                                message: format!(
                                    "stalled: no progress for {} ms at {:.0}%",
                                    stall.as_millis(),
                                    operation.progress_ratio * 100.0
                                ),
                                execution: Execution::MaybeExecuted,
                            };
                            self.finish(id, ActionState::Failed, Some(failure)).await;
                            return;
                        }
                    }
                },
                // Transient: the timeout and the stall detector bound how long this can go on.
                Err(error) => warn!(action = %id, operation = %op, %error, "cannot poll storage operation"),
            }
        }
    }

    async fn finish(&self, id: &ActionId, state: ActionState, failure: Option<ActionFailure>) {
        if state == ActionState::Succeeded || failure.as_ref().is_some_and(|f| f.execution == Execution::MaybeExecuted)
        {
            // The layout changed (or may have): the next read asks the storage system, so the
            // master sees the action's effect as soon as it hears it ended, not a cache TTL later.
            self.forget_topology();
        }
        let detail = failure.as_ref().map_or_else(|| "done".to_owned(), |f| f.message.clone());
        match self.book.transition(id, state, "executor", detail, now_ms(), |r| r.failure = failure).await {
            Ok(record) => info!(action = %id, state = ?record.state, "action finished"),
            Err(error) => warn!(action = %id, %error, "cannot record action outcome"),
        }
    }

    fn storage(&self) -> Arc<dyn StorageAdapter> {
        let cfg = self.config.borrow().clone();
        let mut cached = self.storage.lock().expect("storage lock is never poisoned");
        match cached.as_ref() {
            Some((storage, adapter)) if *storage == cfg.storage => adapter.clone(),
            _ => {
                // Validation guarantees the config is complete; an adapter that cannot be built
                // still answers every call, with the reason, instead of panicking the executor.
                let adapter = storage::from_config(&cfg.storage, &cfg.client)
                    .unwrap_or_else(|error| Arc::new(storage::Broken(error.to_string())));
                let adapter: Arc<dyn StorageAdapter> = Arc::new(storage::Counted(adapter));
                let mut succeeded = self.book.list(Some(ActionState::Succeeded));
                succeeded.sort_by_key(|r| r.finished_at_ms);
                adapter.remember(&succeeded);
                *cached = Some((cfg.storage.clone(), adapter.clone()));
                adapter
            }
        }
    }

    /// Drops the cached topology: the next read asks the storage system.
    pub fn forget_topology(&self) {
        let mut cache = self.topology.lock().expect("topology lock is never poisoned");
        cache.read = None;
        cache.generation += 1;
    }

    /// A recent topology (cached for [`TOPOLOGY_TTL`]); `None` if the storage cannot be read.
    pub async fn topology(&self) -> Option<Arc<Topology>> {
        self.tagged_topology().await.map(|(t, _)| t)
    }

    /// [`Self::topology`] with its entity tag ([`TopologyCache`]).
    pub async fn tagged_topology(&self) -> Option<(Arc<Topology>, Arc<str>)> {
        let generation = {
            let mut cache = self.topology.lock().expect("topology lock is never poisoned");
            if let Some((t, at)) = cache.read.clone()
                && at.elapsed() < TOPOLOGY_TTL
            {
                let tag = cache.tag(&t);
                return Some((t, tag));
            }
            cache.generation
        };
        match self.storage().topology().await {
            Ok(t) => {
                let t = Arc::new(t);
                let mut cache = self.topology.lock().expect("topology lock is never poisoned");
                // A read that began before the cache was dropped may show the layout from
                // before an action ended: answer with it, but do not keep it.
                if cache.generation == generation {
                    cache.read = Some((t.clone(), Instant::now()));
                }
                let tag = cache.tag(&t);
                Some((t, tag))
            }
            Err(error) => {
                warn!(%error, "cannot read topology");
                None
            }
        }
    }

    /// The workers an action touches. Unknown targets touch none here; the storage rejects them.
    async fn involved_workers(&self, spec: &ActionSpec) -> Vec<WorkerId> {
        let Some(topology) = self.topology().await else { return Vec::new() };
        involved_workers(&topology, spec)
    }
}

/// The workers whose load an action changes, sorted and unique.
pub fn involved_workers(topology: &Topology, spec: &ActionSpec) -> Vec<WorkerId> {
    let owner =
        |p: &lb_common::ids::PartitionId| topology.partitions.iter().find(|x| &x.id == p).map(|x| x.owner.clone());
    let mut workers: Vec<WorkerId> = match spec {
        ActionSpec::Split { partition, .. } => owner(partition).into_iter().collect(),
        ActionSpec::SplitInto { partition, to_workers, first_to_worker, .. } => owner(partition)
            .into_iter()
            .chain(to_workers.iter().cloned())
            .chain(first_to_worker.iter().cloned())
            .collect(),
        ActionSpec::Move { partition, to_worker, .. } => {
            owner(partition).into_iter().chain([to_worker.clone()]).collect()
        }
        ActionSpec::Merge { left, right, .. } => owner(left).into_iter().chain(owner(right)).collect(),
        ActionSpec::Group { target, group } => {
            let in_group = topology.workers.iter().filter(|w| w.group.as_ref() == Some(group)).map(|w| w.id.clone());
            let targets = topology.partitions.iter().filter(|p| match target {
                GroupTarget::Partition { partition } => &p.id == partition,
                GroupTarget::Table { tenant, table } => &p.tenant == tenant && &p.table == table,
                GroupTarget::Tenant { tenant } => &p.tenant == tenant,
            });
            in_group.chain(targets.map(|p| p.owner.clone())).collect()
        }
        ActionSpec::Reshard { tenant, dataset, .. } => topology
            .datasets
            .iter()
            .filter(|d| &d.tenant == tenant && &d.dataset == dataset)
            .flat_map(|d| d.shard_owners.iter().cloned())
            .collect(),
    };
    workers.sort();
    workers.dedup();
    workers
}

/// Where an action sits in the fair queue: its actor path's tenant and the segments below it.
fn queue_path(record: &ActionRecord) -> (&str, &[String]) {
    record.request.actor_path.split_first().map_or(("", &[][..]), |(t, r)| (t.as_str(), r))
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topology(version: u64, stored_bytes: u64) -> Arc<Topology> {
        let text = include_str!("../../../docs/examples/topology.json");
        let mut t: Topology = serde_json::from_str(text).expect("the documented example parses");
        t.version = version;
        t.partitions.iter_mut().for_each(|p| p.stored_bytes = stored_bytes);
        Arc::new(t)
    }

    #[test]
    fn a_topology_keeps_its_tag_until_something_in_it_changes() {
        let mut cache = TopologyCache::default();
        let a = cache.tag(&topology(1, 10));
        assert_eq!(cache.tag(&topology(1, 10)), a, "an equal read keeps the tag");
        let b = cache.tag(&topology(1, 11));
        assert_ne!(b, a, "stored bytes changed");
        let c = cache.tag(&topology(2, 11));
        assert_ne!(c, b, "the layout changed");
        assert_ne!(cache.tag(&topology(1, 10)), a, "a tag is never reused, even for content seen before");
        assert!(a.starts_with(&format!("\"{:x}-", *PROCESS_START_MS)), "{a}");
    }
}
