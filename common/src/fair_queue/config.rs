//! Configuration of the fair queue.

/// Default maximum actor path depth below the tenant: Loki's default of
/// `max-queue-hierarchy-levels`, and `[table, kind, partition]` is the deepest actor the ops
/// server names.
pub const DEFAULT_MAX_DEPTH: usize = 3;
/// Hard cap on `max_depth`: dequeue recurses once per level, and no real actor path comes close.
pub const MAX_DEPTH: usize = 16;
/// Default per-tenant outstanding limit: a hotspot storm on a large cluster plans a few hundred
/// actions per tenant; 1024 leaves headroom and bounds the memory one tenant can pin.
pub const DEFAULT_MAX_OUTSTANDING_PER_TENANT: usize = 1024;
/// Default cap on distinct `tenant` label values of the length gauge: far above the ops server's
/// configured tenants, far below what hurts a Prometheus server.
pub const DEFAULT_MAX_TENANT_LABELS: usize = 64;

/// Settings of a [`FairQueue`](super::FairQueue).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FairQueueConfig {
    /// Maximum number of actor path segments below the tenant; deeper paths are rejected with
    /// [`EnqueueError::PathTooDeep`](super::EnqueueError::PathTooDeep). Capped at [`MAX_DEPTH`].
    pub max_depth: usize,
    /// Maximum items queued per tenant over its whole actor tree; beyond it enqueues fail with
    /// [`EnqueueError::TooManyOutstanding`](super::EnqueueError::TooManyOutstanding) (HTTP 429).
    /// 0 refuses every enqueue.
    pub max_outstanding_per_tenant: usize,
    /// With `false` the actor path is ignored (not validated) and each tenant is one FIFO:
    /// fairness across tenants only.
    pub hierarchy_enabled: bool,
    /// Consumers per tenant (shuffle sharding); 0 lets every consumer serve every tenant.
    pub max_consumers_per_tenant: usize,
    /// Cap on distinct `tenant` label values of `lb_fair_queue_items`.
    pub max_tenant_labels: usize,
}

impl Default for FairQueueConfig {
    fn default() -> Self {
        Self {
            max_depth: DEFAULT_MAX_DEPTH,
            max_outstanding_per_tenant: DEFAULT_MAX_OUTSTANDING_PER_TENANT,
            hierarchy_enabled: true,
            max_consumers_per_tenant: 0,
            max_tenant_labels: DEFAULT_MAX_TENANT_LABELS,
        }
    }
}

impl FairQueueConfig {
    /// The configuration with `max_depth` capped at [`MAX_DEPTH`].
    pub(crate) fn capped(mut self) -> Self {
        self.max_depth = self.max_depth.min(MAX_DEPTH);
        self
    }
}
