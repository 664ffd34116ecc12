//! The reporter's own counters: kept as atomics for [`ReporterStats`] and exported through the
//! `metrics` crate (`lb_reporter_*`) at the same time, so an embedding worker's `/metrics`
//! shows them without any wiring.

use std::sync::atomic::{AtomicU64, Ordering};

/// A snapshot of what the reporter has done since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReporterStats {
    /// Records aggregated.
    pub records_total: u64,
    /// Records dropped on the request path because the thread's ring was full.
    pub records_dropped_buffer_full_total: u64,
    /// Records for a partition slot that is not registered (removed, or never was).
    pub records_dropped_stale_partition_total: u64,
    /// Reports built by the aggregator.
    pub reports_built_total: u64,
    /// Reports the agent acknowledged (duplicates included).
    pub reports_acked_total: u64,
    /// Acknowledged as a duplicate: an earlier try had arrived but its reply was lost.
    pub reports_duplicate_total: u64,
    /// Refused by the agent as invalid (4xx): retrying cannot help, so dropped.
    pub reports_rejected_total: u64,
    /// Dropped unsent because the outbox was full while the agent was unreachable.
    pub reports_dropped_total: u64,
    /// Push attempts that failed and were retried.
    pub push_retries_total: u64,
    /// Reports waiting in the outbox now.
    pub pending_reports: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Stats {
    records: AtomicU64,
    dropped_full: AtomicU64,
    dropped_stale: AtomicU64,
    built: AtomicU64,
    acked: AtomicU64,
    duplicate: AtomicU64,
    rejected: AtomicU64,
    dropped: AtomicU64,
    retries: AtomicU64,
    pending: AtomicU64,
}

fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

impl Stats {
    pub fn records(&self, aggregated: u64, dropped_full: u64, dropped_stale: u64) {
        add(&self.records, aggregated);
        add(&self.dropped_full, dropped_full);
        add(&self.dropped_stale, dropped_stale);
        metrics::counter!("lb_reporter_records_total").increment(aggregated);
        if dropped_full > 0 {
            metrics::counter!("lb_reporter_records_dropped_total", "reason" => "buffer_full").increment(dropped_full);
        }
        if dropped_stale > 0 {
            metrics::counter!("lb_reporter_records_dropped_total", "reason" => "stale_partition")
                .increment(dropped_stale);
        }
    }

    pub fn built(&self) {
        add(&self.built, 1);
        metrics::counter!("lb_reporter_reports_total", "outcome" => "built").increment(1);
    }

    pub fn acked(&self, duplicate: bool) {
        add(&self.acked, 1);
        if duplicate {
            add(&self.duplicate, 1);
        }
        let outcome = if duplicate { "duplicate" } else { "acked" };
        metrics::counter!("lb_reporter_reports_total", "outcome" => outcome).increment(1);
    }

    pub fn rejected(&self) {
        add(&self.rejected, 1);
        metrics::counter!("lb_reporter_reports_total", "outcome" => "rejected").increment(1);
    }

    pub fn dropped(&self, n: u64) {
        add(&self.dropped, n);
        metrics::counter!("lb_reporter_reports_total", "outcome" => "dropped").increment(n);
    }

    pub fn retried(&self) {
        add(&self.retries, 1);
        metrics::counter!("lb_reporter_push_retries_total").increment(1);
    }

    pub fn pending(&self, n: usize) {
        self.pending.store(n as u64, Ordering::Relaxed);
        metrics::gauge!("lb_reporter_pending_reports").set(n as f64);
    }

    pub fn snapshot(&self) -> ReporterStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ReporterStats {
            records_total: get(&self.records),
            records_dropped_buffer_full_total: get(&self.dropped_full),
            records_dropped_stale_partition_total: get(&self.dropped_stale),
            reports_built_total: get(&self.built),
            reports_acked_total: get(&self.acked),
            reports_duplicate_total: get(&self.duplicate),
            reports_rejected_total: get(&self.rejected),
            reports_dropped_total: get(&self.dropped),
            push_retries_total: get(&self.retries),
            pending_reports: get(&self.pending),
        }
    }
}

/// What the reporter exports through the embedding worker's `metrics` recorder, with HELP
/// text: a worker that serves Prometheus calls `lb_common::telemetry::describe(CATALOG)` after
/// installing its recorder.
pub const CATALOG: &[lb_common::telemetry::MetricDef] = {
    use lb_common::telemetry::MetricDef;
    use lb_common::telemetry::MetricKind::{Counter, Gauge};
    &[
        MetricDef::new("lb_reporter_records_total", Counter, &[], "Requests recorded and aggregated into reports."),
        MetricDef::new(
            "lb_reporter_records_dropped_total",
            Counter,
            &["reason"],
            "Requests not counted: a request thread's ring was full (buffer_full) or the partition was gone (stale_partition).",
        ),
        MetricDef::new(
            "lb_reporter_reports_total",
            Counter,
            &["outcome"],
            "Reports by outcome: built, acked, duplicate (the agent had it), rejected (refused, not retried), dropped (the outbox was full).",
        ),
        MetricDef::new(
            "lb_reporter_push_retries_total",
            Counter,
            &[],
            "Pushes to the agent retried (it was down or slow); a retry repeats seq and timestamp.",
        ),
        MetricDef::new(
            "lb_reporter_pending_reports",
            Gauge,
            &[],
            "Reports built and not yet acknowledged by the agent (bounded by the outbox).",
        ),
    ]
};
