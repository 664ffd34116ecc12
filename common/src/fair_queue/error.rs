//! Errors of the fair queue. Every enqueue error means the item was certainly **not** queued (it
//! is dropped with the error; nothing is counted against the tenant).

use super::shard::ConsumerId;

/// Why an enqueue was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnqueueError {
    /// The tenant already has `limit` items queued over its whole actor tree.
    #[error("tenant {tenant} has too many outstanding requests (limit {limit})")]
    TooManyOutstanding { tenant: String, limit: usize },
    /// The actor path below the tenant has more segments than the configured maximum.
    #[error("actor path depth {depth} exceeds the maximum queue hierarchy depth {max}")]
    PathTooDeep { depth: usize, max: usize },
    /// Segment `index` (0-based, below the tenant) of the actor path is empty.
    #[error("actor path segment {index} is empty")]
    EmptySegment { index: usize },
    /// The tenant name is empty.
    #[error("empty tenant is not allowed")]
    EmptyTenant,
    /// The queue was closed and accepts no new items.
    #[error("fair queue is closed")]
    Closed,
}

impl EnqueueError {
    /// HTTP status the ops server answers with: 429 for the per-tenant limit (retry later), 422
    /// for a path deeper than allowed, 400 for malformed names, 503 once the queue is closed.
    pub fn http_status(&self) -> u16 {
        match self {
            Self::TooManyOutstanding { .. } => 429,
            Self::PathTooDeep { .. } => 422,
            Self::EmptySegment { .. } | Self::EmptyTenant => 400,
            Self::Closed => 503,
        }
    }

    /// Bounded `reason` label of `lb_fair_queue_rejections_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::TooManyOutstanding { .. } => "too_many_outstanding",
            Self::PathTooDeep { .. } => "path_too_deep",
            Self::EmptySegment { .. } => "empty_segment",
            Self::EmptyTenant => "empty_tenant",
            Self::Closed => "closed",
        }
    }
}

/// Why a dequeue returned no item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DequeueError {
    /// The caller's cancellation token fired.
    #[error("dequeue cancelled")]
    Cancelled,
    /// The deadline passed with nothing to hand to this consumer.
    #[error("dequeue deadline exceeded")]
    DeadlineExceeded,
    /// The queue is closed and holds nothing more for this consumer.
    #[error("fair queue is closed")]
    Closed,
    /// The consumer id was never registered (or was unregistered).
    #[error("consumer {0} is not registered")]
    UnknownConsumer(ConsumerId),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_tenant_limit_maps_to_429() {
        let limit = EnqueueError::TooManyOutstanding { tenant: "t".into(), limit: 3 };
        assert_eq!(limit.http_status(), 429);
        assert_eq!(EnqueueError::PathTooDeep { depth: 4, max: 3 }.http_status(), 422);
        assert_eq!(EnqueueError::EmptySegment { index: 1 }.http_status(), 400);
        assert_eq!(EnqueueError::EmptyTenant.http_status(), 400);
        assert_eq!(EnqueueError::Closed.http_status(), 503);
        assert_eq!(limit.to_string(), "tenant t has too many outstanding requests (limit 3)");
    }
}
