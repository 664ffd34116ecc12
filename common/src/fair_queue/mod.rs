//! Hierarchical fair queue (Loki's LID 0003 "fully hierarchical queues").
//!
//! # Problem
//!
//! The ops server runs actions for many tenants. One tenant's storm of hotspots must not starve
//! another tenant's fixes, one table's storm must not starve another table of the same tenant,
//! and manual SRE commands need their own share. A FIFO gives the share to whoever piles up most.
//!
//! # Contract
//!
//! * [`FairQueue::enqueue`] takes a tenant, an **actor path** below it (`[]`, `[table]`,
//!   `[table, kind]`, … up to `max_depth` segments) and an item. The item lands in the local
//!   queue of the node the path names; missing nodes are created.
//! * Dequeue order inside a tenant: every node takes turns, round robin, between its own local
//!   queue and each non-empty child (`local, child0, child1, …`), recursively; a child that
//!   drains leaves the rotation at once, so the others' shares grow. With `n` non-empty children
//!   and a non-empty local queue, each gets `1/(n+1)` of the node's dequeues; shares nest
//!   multiplicatively.
//! * Across tenants each consumer walks the tenants round robin from its own [`TenantCursor`],
//!   so every tenant with work gets one item per round whatever its depth or backlog.
//! * Optional shuffle sharding (`max_consumers_per_tenant`) restricts which registered consumers
//!   serve which tenant.
//! * Rejections (never queued, never counted): more than `max_outstanding_per_tenant` items over
//!   the tenant's whole tree (HTTP 429), a path deeper than `max_depth`, an empty segment, an
//!   empty tenant, a closed queue. [`EnqueueError::http_status`] gives the status.
//! * [`FairQueue::remove`] withdraws one queued item (a cancelled action) from its actor's
//!   queue; it stops counting at once and the nodes it empties leave their rotations, as after
//!   a dequeue.
//! * [`FairQueue::try_dequeue`] never blocks; [`FairQueue::dequeue`] waits for work, a
//!   cancellation or a deadline. After [`FairQueue::close`] enqueues fail and consumers drain
//!   what is left, then get [`DequeueError::Closed`].
//!
//! # Invariants
//!
//! * A tenant's outstanding count *is* its tree's item count (one number, kept per node), so it
//!   cannot drift or leak on an error path: every check runs before the first mutation and
//!   nothing fails after it.
//! * Every node in a rotation holds at least one item; a tenant or node whose count reaches 0 is
//!   unlinked and its arena slot (with its buffers) reused.
//! * Slots of a rotation are never compacted (Loki's `Mapping`), so cursors stay valid across
//!   removals; a freed slot is reused oldest-first.
//! * FIFO order within each local queue.
//!
//! # Deviations from Loki
//!
//! * Empty path segments are rejected (Loki queued such items where no one could dequeue them).
//! * Enqueue validates the tenant before counting it (Loki leaked the optimistic increment).
//! * No per-node channel capacity: the tenant-wide limit already bounds every node.
//! * Consumers leave at once on unregister (no forget delay); closing lets consumers drain the
//!   remaining items instead of failing them.

mod config;
mod error;
mod mapping;
mod shard;
mod state;
mod telemetry;
mod tree;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod qos_tests;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use config::{
    DEFAULT_MAX_DEPTH, DEFAULT_MAX_OUTSTANDING_PER_TENANT, DEFAULT_MAX_TENANT_LABELS, FairQueueConfig, MAX_DEPTH,
};
pub use error::{DequeueError, EnqueueError};
pub use shard::ConsumerId;
pub use telemetry::{OTHER_TENANTS_LABEL, QUEUE_LENGTH_METRIC, REJECTIONS_METRIC};

use mapping::{CURSOR_START, SlotCursor};
use state::State;

/// A consumer's position in the tenant rotation. Start with [`TenantCursor::START`] and pass
/// back the cursor of each [`Dequeued`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenantCursor(SlotCursor);

impl TenantCursor {
    /// Before the first tenant.
    pub const START: Self = Self(CURSOR_START);

    /// A cursor whose next dequeue serves the same tenant again (Loki's `reuse_last_index`),
    /// e.g. to drain expired work of that tenant first.
    pub fn reuse_last(self) -> Self {
        if self.0 < CURSOR_START { self } else { Self(self.0 - 1) }
    }
}

impl Default for TenantCursor {
    fn default() -> Self {
        Self::START
    }
}

/// One dequeued item.
#[derive(Debug)]
pub struct Dequeued<T> {
    pub item: T,
    pub tenant: Arc<str>,
    /// Cursor to pass to this consumer's next dequeue.
    pub cursor: TenantCursor,
    /// This was the tenant's last queued item.
    pub tenant_drained: bool,
}

/// Hierarchical fair queue shared by producers and consumers (see the module doc).
///
/// A std mutex around the single-threaded core (held for well under a microsecond per call) plus
/// a [`Notify`] to wake async consumers.
#[derive(Debug)]
pub struct FairQueue<T> {
    state: Mutex<State<T>>,
    notify: Notify,
    /// Consumers inside [`FairQueue::dequeue`]; producers skip the wake-up when there are none.
    waiting: AtomicUsize,
}

impl<T> FairQueue<T> {
    /// A queue with `config` (`max_depth` capped at [`MAX_DEPTH`]).
    pub fn new(config: FairQueueConfig) -> Self {
        Self { state: Mutex::new(State::new(config.capped())), notify: Notify::new(), waiting: AtomicUsize::new(0) }
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().expect("fair queue lock poisoned: a holder panicked mid-update")
    }

    /// Queues `item` for `tenant` at the actor `path` below it (`&[]` for the tenant itself).
    /// On error the item is dropped and nothing is counted.
    pub fn enqueue<S: AsRef<str>>(&self, tenant: &str, path: &[S], item: T) -> Result<(), EnqueueError> {
        // The guard is a temporary: the lock is released before waking or dropping anything.
        let result = self.lock().enqueue(tenant, path, item);
        match result {
            Ok(()) => {
                self.wake_waiters();
                Ok(())
            }
            Err((err, refused)) => {
                drop(refused);
                telemetry::count_rejection(err.reason());
                Err(err)
            }
        }
    }

    /// Withdraws the first item that `matches` among those queued for `tenant` at `path` (the
    /// path it was enqueued with), e.g. a cancelled action; it stops counting against the
    /// tenant's limit at once. `None` when no such item is queued (already dequeued).
    pub fn remove<S: AsRef<str>>(&self, tenant: &str, path: &[S], matches: impl FnMut(&T) -> bool) -> Option<T> {
        self.lock().remove(tenant, path, matches)
    }

    /// Takes the next item `consumer` may serve, continuing the tenant rotation after `cursor`;
    /// never blocks. `Ok(None)` when there is nothing for this consumer now.
    pub fn try_dequeue(&self, consumer: ConsumerId, cursor: TenantCursor) -> Result<Option<Dequeued<T>>, DequeueError> {
        self.lock().try_dequeue(consumer, cursor)
    }

    /// Waits for the next item `consumer` may serve, until `cancel` fires or `deadline` passes.
    ///
    /// Cancellation and the deadline are checked before taking an item, so a cancelled consumer
    /// never takes work it will not run. Cancel safe: dropping the future loses no item.
    pub async fn dequeue(
        &self,
        consumer: ConsumerId,
        cursor: TenantCursor,
        cancel: &CancellationToken,
        deadline: Instant,
    ) -> Result<Dequeued<T>, DequeueError> {
        let _waiting = WaitingGuard::enter(&self.waiting);
        let sleep = tokio::time::sleep_until(deadline);
        tokio::pin!(sleep);
        loop {
            // Register for wake-ups before looking, so an enqueue in between is not missed.
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if cancel.is_cancelled() {
                return Err(DequeueError::Cancelled);
            }
            if Instant::now() >= deadline {
                return Err(DequeueError::DeadlineExceeded);
            }
            if let Some(dequeued) = self.try_dequeue(consumer, cursor)? {
                return Ok(dequeued);
            }
            tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(DequeueError::Cancelled),
                () = &mut sleep => return Err(DequeueError::DeadlineExceeded),
                () = &mut notified => {}
            }
        }
    }

    /// Registers one connection of `consumer` (a consumer may register several times and is
    /// known until it unregisters as often).
    pub fn register_consumer(&self, consumer: ConsumerId) {
        let changed = self.lock().register_consumer(consumer);
        if changed {
            // Resharding may hand waiting consumers new tenants.
            self.notify.notify_waiters();
        }
    }

    /// Undoes one registration; the consumer is forgotten with its last one. Its pending
    /// dequeues then fail with [`DequeueError::UnknownConsumer`].
    pub fn unregister_consumer(&self, consumer: ConsumerId) {
        let changed = self.lock().unregister_consumer(consumer);
        if changed {
            self.notify.notify_waiters();
        }
    }

    /// The consumer is going away: it gets no more work (its dequeues wait or time out), and it
    /// keeps its shard of tenants until it unregisters.
    pub fn notify_consumer_shutdown(&self, consumer: ConsumerId) {
        self.lock().notify_consumer_shutdown(consumer);
    }

    /// Stops accepting items; consumers drain what is queued, then get [`DequeueError::Closed`].
    pub fn close(&self) {
        self.lock().close();
        self.notify.notify_waiters();
    }

    pub fn is_closed(&self) -> bool {
        self.lock().is_closed()
    }

    /// Items queued over all tenants.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Items queued for `tenant` over its whole actor tree (its outstanding count).
    pub fn tenant_len(&self, tenant: &str) -> usize {
        self.lock().tenant_len(tenant)
    }

    /// Number of tenants with queued items.
    pub fn tenant_count(&self) -> usize {
        self.lock().tenant_count()
    }

    fn wake_waiters(&self) {
        // SeqCst pairs with the increment in `WaitingGuard::enter`, which happens before the
        // waiter's own look under the lock (see `dequeue`).
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.notify.notify_waiters();
        }
    }
}

/// Counts a consumer as waiting for the life of one `dequeue` call (also when it is dropped).
struct WaitingGuard<'a>(&'a AtomicUsize);

impl<'a> WaitingGuard<'a> {
    fn enter(counter: &'a AtomicUsize) -> Self {
        counter.fetch_add(1, Ordering::SeqCst);
        Self(counter)
    }
}

impl Drop for WaitingGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}
