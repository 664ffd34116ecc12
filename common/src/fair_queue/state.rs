//! The single-threaded core of the fair queue: tenants in rotation, their actor trees, consumers.
//! [`super::FairQueue`] wraps it in a mutex; everything here runs under that lock and never
//! blocks or allocates on the steady-state path.

use std::sync::Arc;

use super::config::FairQueueConfig;
use super::error::{DequeueError, EnqueueError};
use super::mapping::{CURSOR_LOCAL, CURSOR_START, Mapping, SlotCursor};
use super::shard::{ConsumerId, Consumers, shard_for};
use super::telemetry::{LabelSlot, TenantLabels};
use super::tree::{Forest, NodeId};
use super::{Dequeued, TenantCursor};

/// One tenant in the top-level rotation.
#[derive(Debug)]
pub(crate) struct TenantQueue {
    /// Root of the tenant's actor tree; its subtree length is the tenant's outstanding count.
    root: NodeId,
    /// Consumers allowed to serve this tenant (sorted); `None` means all.
    consumers: Option<Vec<ConsumerId>>,
    /// Series the tenant's length is reported under.
    label: LabelSlot,
}

#[derive(Debug)]
pub(crate) struct State<T> {
    config: FairQueueConfig,
    forest: Forest<T>,
    /// Tenants holding at least one item, in rotation order.
    tenants: Mapping<TenantQueue>,
    consumers: Consumers,
    labels: TenantLabels,
    /// Items in all tenants.
    total_len: usize,
    closed: bool,
}

impl<T> State<T> {
    pub(crate) fn new(config: FairQueueConfig) -> Self {
        Self {
            labels: TenantLabels::new(config.max_tenant_labels),
            config,
            forest: Forest::default(),
            tenants: Mapping::default(),
            consumers: Consumers::default(),
            total_len: 0,
            closed: false,
        }
    }

    /// Queues `item` for `tenant` at the actor `path` below it. A refused item is handed back
    /// with the error, so the caller drops it after releasing the lock.
    ///
    /// All checks run before anything is created or counted, and nothing can fail after the
    /// first mutation, so a refused item leaves no trace (no counter, no node).
    pub(crate) fn enqueue<S: AsRef<str>>(
        &mut self,
        tenant: &str,
        path: &[S],
        item: T,
    ) -> Result<(), (EnqueueError, T)> {
        let slot = match self.admit(tenant, path) {
            Ok(slot) => slot,
            Err(err) => return Err((err, item)),
        };
        let path: &[S] = if self.config.hierarchy_enabled { path } else { &[] };
        let tq = self.tenants.get_slot(slot).expect("admit returns a live slot");
        let (root, label) = (tq.root, tq.label);
        self.forest.push(root, path, item);
        self.total_len += 1;
        self.labels.added(label, self.forest.len(root));
        Ok(())
    }

    /// Runs every check of an enqueue and returns the tenant's slot, creating the tenant only
    /// once all checks passed.
    fn admit<S: AsRef<str>>(&mut self, tenant: &str, path: &[S]) -> Result<usize, EnqueueError> {
        if self.closed {
            return Err(EnqueueError::Closed);
        }
        if tenant.is_empty() {
            return Err(EnqueueError::EmptyTenant);
        }
        // With the hierarchy off the path is ignored and everything goes to the tenant queue.
        if self.config.hierarchy_enabled {
            validate_path(path, self.config.max_depth)?;
        }
        let limit = self.config.max_outstanding_per_tenant;
        match self.tenants.slot_of(tenant) {
            Some(slot) => {
                let tq = self.tenants.get_slot(slot).expect("slot_of returns live slots");
                if self.forest.len(tq.root) >= limit {
                    return Err(too_many(tenant, limit));
                }
                Ok(slot)
            }
            None if limit == 0 => Err(too_many(tenant, limit)),
            None => Ok(self.add_tenant(tenant)),
        }
    }

    fn add_tenant(&mut self, tenant: &str) -> usize {
        let name: Arc<str> = Arc::from(tenant);
        let root = self.forest.alloc(Arc::clone(&name));
        let consumers = shard_for(tenant, self.config.max_consumers_per_tenant, &self.consumers.sorted_ids());
        let label = self.labels.slot_for(&name);
        self.tenants.put(name, TenantQueue { root, consumers, label })
    }

    /// Takes the next item for `consumer`, continuing the tenant rotation after `cursor`.
    ///
    /// `Ok(None)`: nothing this consumer may take right now. `Err(Closed)` only once the queue
    /// is closed and holds nothing more for this consumer.
    pub(crate) fn try_dequeue(
        &mut self,
        consumer: ConsumerId,
        cursor: TenantCursor,
    ) -> Result<Option<Dequeued<T>>, DequeueError> {
        if !self.consumers.is_registered(consumer) {
            return Err(DequeueError::UnknownConsumer(consumer));
        }
        let (found, next_cursor) = self.next_tenant_for(cursor.0, consumer);
        let Some(slot) = found else {
            return if self.closed { Err(DequeueError::Closed) } else { Ok(None) };
        };
        let tq = self.tenants.get_slot(slot).expect("next_tenant_for returns live slots");
        let (root, label) = (tq.root, tq.label);
        let item = self.forest.pop(root).expect("a tenant in rotation holds at least one item");
        let remaining = self.forest.len(root);
        let tenant = Arc::clone(self.forest.name(root));
        if remaining == 0 {
            self.tenants.remove(&tenant);
            self.forest.release(root);
        }
        self.total_len -= 1;
        self.labels.removed(label, remaining);
        Ok(Some(Dequeued { item, tenant, cursor: TenantCursor(next_cursor), tenant_drained: remaining == 0 }))
    }

    /// Withdraws the first item that `matches` at `tenant`'s actor `path` (see
    /// [`super::FairQueue::remove`]).
    pub(crate) fn remove<S: AsRef<str>>(
        &mut self,
        tenant: &str,
        path: &[S],
        matches: impl FnMut(&T) -> bool,
    ) -> Option<T> {
        let path: &[S] = if self.config.hierarchy_enabled { path } else { &[] };
        let tq = self.tenants.get(tenant)?;
        let (root, label) = (tq.root, tq.label);
        let item = self.forest.remove(root, path, matches)?;
        let remaining = self.forest.len(root);
        if remaining == 0 {
            self.tenants.remove(tenant);
            self.forest.release(root);
        }
        self.total_len -= 1;
        self.labels.removed(label, remaining);
        Some(item)
    }

    /// Loki's `getNextQueueForQuerier`: the first tenant after `last` that `consumer` may serve.
    /// Returns its slot (if any) and the cursor to continue from.
    fn next_tenant_for(&self, last: SlotCursor, consumer: ConsumerId) -> (Option<usize>, SlotCursor) {
        // Tenants have no local queue, so the local-queue sentinel means "from the start".
        let mut cursor = if last <= CURSOR_LOCAL { CURSOR_START } else { last };
        if self.consumers.is_shutting_down(consumer) {
            return (None, cursor);
        }
        for _ in 0..=self.tenants.slot_count() {
            let Some((slot, tq)) = self.tenants.get_next(cursor) else {
                cursor = CURSOR_START;
                continue;
            };
            cursor = isize::try_from(slot).expect("slot count fits in isize");
            if let Some(allowed) = &tq.consumers
                && allowed.binary_search(&consumer).is_err()
            {
                continue; // not one of this tenant's consumers
            }
            return (Some(slot), cursor);
        }
        (None, cursor)
    }

    /// Adds a registration of `consumer`; returns true when the consumer set changed.
    pub(crate) fn register_consumer(&mut self, consumer: ConsumerId) -> bool {
        let changed = self.consumers.register(consumer);
        if changed {
            self.reshard();
        }
        changed
    }

    /// Removes a registration of `consumer`; returns true when it left the consumer set.
    pub(crate) fn unregister_consumer(&mut self, consumer: ConsumerId) -> bool {
        let changed = self.consumers.unregister(consumer);
        if changed {
            self.reshard();
        }
        changed
    }

    pub(crate) fn notify_consumer_shutdown(&mut self, consumer: ConsumerId) {
        self.consumers.notify_shutdown(consumer);
    }

    /// Recomputes every tenant's consumer set after the consumer set changed.
    fn reshard(&mut self) {
        let k = self.config.max_consumers_per_tenant;
        if k == 0 {
            return;
        }
        let sorted = self.consumers.sorted_ids();
        for tq in self.tenants.values_mut() {
            tq.consumers = shard_for(self.forest.name(tq.root), k, &sorted);
        }
    }

    pub(crate) fn close(&mut self) {
        self.closed = true;
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed
    }

    pub(crate) fn len(&self) -> usize {
        self.total_len
    }

    pub(crate) fn tenant_len(&self, tenant: &str) -> usize {
        self.tenants.get(tenant).map_or(0, |tq| self.forest.len(tq.root))
    }

    /// Number of tenants holding items.
    pub(crate) fn tenant_count(&self) -> usize {
        self.tenants.len()
    }

    /// Checks every internal invariant (tests only).
    #[cfg(test)]
    pub(crate) fn check_consistent(&self) {
        self.tenants.check_consistent();
        let mut total = 0;
        let mut live_nodes = 0;
        for tq in self.tenants.values() {
            let len = self.forest.check_subtree(tq.root);
            assert!(len > 0, "empty tenant left in rotation");
            assert!(len <= self.config.max_outstanding_per_tenant, "limit exceeded");
            total += len;
            live_nodes += self.count_nodes(tq.root);
        }
        assert_eq!(total, self.total_len, "total length");
        assert_eq!(live_nodes, self.forest.live_nodes(), "leaked nodes");
    }

    #[cfg(test)]
    fn count_nodes(&self, root: NodeId) -> usize {
        self.forest.subtree_node_count(root)
    }

    #[cfg(test)]
    pub(crate) fn forest(&self) -> &Forest<T> {
        &self.forest
    }

    /// The tenant `consumer` would be served next, without dequeuing (tests only).
    #[cfg(test)]
    pub(crate) fn next_tenant_name(
        &self,
        consumer: ConsumerId,
        cursor: TenantCursor,
    ) -> (Option<Arc<str>>, TenantCursor) {
        let (slot, next) = self.next_tenant_for(cursor.0, consumer);
        let name = slot.map(|slot| {
            let tq = self.tenants.get_slot(slot).expect("live slot");
            Arc::clone(self.forest.name(tq.root))
        });
        (name, TenantCursor(next))
    }

    /// Removes a tenant with all its items (tests only).
    #[cfg(test)]
    pub(crate) fn drop_tenant(&mut self, tenant: &str) {
        let tq = self.tenants.remove(tenant).expect("tenant exists");
        while self.forest.pop(tq.root).is_some() {
            self.total_len -= 1;
        }
        self.forest.release(tq.root);
    }

    #[cfg(test)]
    pub(crate) fn consumers_of(&self, tenant: &str) -> Option<Option<Vec<ConsumerId>>> {
        self.tenants.get(tenant).map(|tq| tq.consumers.clone())
    }

    #[cfg(test)]
    pub(crate) fn labels(&self) -> &TenantLabels {
        &self.labels
    }
}

fn too_many(tenant: &str, limit: usize) -> EnqueueError {
    EnqueueError::TooManyOutstanding { tenant: tenant.to_owned(), limit }
}

/// Rejects paths deeper than `max_depth` and paths with an empty segment.
fn validate_path<S: AsRef<str>>(path: &[S], max_depth: usize) -> Result<(), EnqueueError> {
    if path.len() > max_depth {
        return Err(EnqueueError::PathTooDeep { depth: path.len(), max: max_depth });
    }
    match path.iter().position(|s| s.as_ref().is_empty()) {
        Some(index) => Err(EnqueueError::EmptySegment { index }),
        None => Ok(()),
    }
}
