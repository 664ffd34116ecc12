//! Pushing reports to the agent: a bounded outbox, one report in flight at a time, oldest
//! first, retried with exponential backoff while the agent is unreachable.
//!
//! A retry sends the same report (same `seq` and `timestamp_ms`), so an agent that got an
//! earlier try but whose reply was lost acknowledges it as a duplicate and counts it once. An
//! agent that refuses a report as invalid (4xx other than 408 / 429) would refuse every retry:
//! the report is dropped and counted. When the outbox is full the oldest report is dropped
//! (counted) to make room: an online balancer needs the newest intervals most. Nothing here
//! ever blocks the aggregator, which only appends to the outbox under a short lock.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lb_common::clients::AgentClient;
use lb_common::http::ClientError;
use lb_common::protocol::Report;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::stats::Stats;

/// Reports waiting for the agent, oldest first.
#[derive(Debug)]
pub(crate) struct Outbox {
    queue: Mutex<VecDeque<Arc<Report>>>,
    capacity: usize,
    ready: Notify,
    stats: Arc<Stats>,
}

impl Outbox {
    pub fn new(capacity: usize, stats: Arc<Stats>) -> Self {
        Self { queue: Mutex::new(VecDeque::new()), capacity: capacity.max(1), ready: Notify::new(), stats }
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<Arc<Report>>> {
        self.queue.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Appends a report, dropping the oldest when full.
    pub fn push(&self, report: Report) {
        let mut queue = self.lock();
        if queue.len() >= self.capacity
            && let Some(old) = queue.pop_front()
        {
            self.stats.dropped(1);
            warn!(seq = old.seq, pending = queue.len(), "outbox full, oldest report dropped");
        }
        queue.push_back(Arc::new(report));
        self.stats.pending(queue.len());
        drop(queue);
        self.ready.notify_one();
    }

    fn front(&self) -> Option<Arc<Report>> {
        self.lock().front().cloned()
    }

    /// Removes `report` if it is still the oldest (it may have been dropped meanwhile).
    fn done(&self, report: &Arc<Report>) {
        let mut queue = self.lock();
        if queue.front().is_some_and(|f| Arc::ptr_eq(f, report)) {
            queue.pop_front();
        }
        self.stats.pending(queue.len());
    }

    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

/// How long to wait before retrying a failed push.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
}

/// Whether the agent refused the report itself, so every retry would be refused too.
fn refused(error: &ClientError) -> bool {
    // 408 and 429 are the agent's state, not the report's: worth a retry.
    error.status().map(|s| s.as_u16()).is_some_and(|s| (400..500).contains(&s) && s != 408 && s != 429)
}

/// Sends the outbox's reports until `cancel`.
pub(crate) async fn run(outbox: Arc<Outbox>, client: AgentClient, backoff: Backoff, cancel: CancellationToken) {
    let mut delay = backoff.initial;
    loop {
        let Some(report) = outbox.front() else {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = outbox.ready.notified() => continue,
            }
        };
        let result = tokio::select! {
            _ = cancel.cancelled() => return,
            result = client.report(&report) => result,
        };
        match result {
            Ok(ack) => {
                outbox.done(&report);
                outbox.stats.acked(ack.duplicate);
                debug!(seq = report.seq, duplicate = ack.duplicate, "report pushed");
                delay = backoff.initial;
            }
            Err(error) if refused(&error) => {
                outbox.done(&report);
                outbox.stats.rejected();
                warn!(seq = report.seq, %error, "report refused by the agent, dropped");
            }
            Err(error) => {
                outbox.stats.retried();
                warn!(seq = report.seq, %error, retry_in_ms = delay.as_millis() as u64, "report push failed");
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(backoff.max);
            }
        }
    }
}
