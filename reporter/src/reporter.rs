//! The [`Reporter`]: the aggregator and the pusher on one background thread of their own
//! (a current-thread tokio runtime), so the embedding worker needs no runtime of its own and
//! its request threads never wait on either.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lb_common::clients::AgentClient;
use lb_common::config::shared::HttpClientConfig;
use lb_common::http::HttpClient;
use lb_common::ids::WorkerId;
use lb_common::protocol::{MAX_REPORT_INTERVAL_MS, MAX_SKETCH_BUCKETS};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::aggregate::{Aggregator, AggregatorConfig};
use crate::partition::ReporterHandle;
use crate::push::{self, Backoff, Outbox};
use crate::stats::{ReporterStats, Stats};

/// 1 s: the interval the agent and the master's online analyzers expect.
pub const DEFAULT_REPORT_INTERVAL: Duration = Duration::from_secs(1);
/// 10 ms: a ring of 16,384 records then holds 1.6 M records/s per thread before it drops.
pub const DEFAULT_DRAIN_INTERVAL: Duration = Duration::from_millis(10);
/// 120 reports: two minutes of 1 s intervals kept while the agent restarts, ~ a few MiB.
pub const DEFAULT_MAX_PENDING_REPORTS: usize = 120;
/// 100 ms, doubling to 5 s: a restarting agent is found again within seconds without the
/// worker hammering a dead port.
pub const DEFAULT_RETRY_INITIAL: Duration = Duration::from_millis(100);
pub const DEFAULT_RETRY_MAX: Duration = Duration::from_secs(5);
/// 2 s to send what is pending on shutdown: a worker's stop should not wait on a dead agent.
pub const DEFAULT_SHUTDOWN_FLUSH: Duration = Duration::from_secs(2);

/// How a [`Reporter`] runs.
#[derive(Debug, Clone)]
pub struct ReporterConfig {
    /// The worker's id, as its agent knows it.
    pub worker_id: WorkerId,
    /// The agent's base URL, e.g. `http://127.0.0.1:7101`.
    pub agent_url: String,
    /// A bearer token for the agent, if it wants one.
    pub bearer_token: Option<String>,
    pub report_interval: Duration,
    pub drain_interval: Duration,
    pub aggregator: AggregatorConfig,
    /// Reports kept while the agent is unreachable; beyond it the oldest are dropped.
    pub max_pending_reports: usize,
    pub retry: Backoff,
    /// Connect timeout and deadline of each push.
    pub http: HttpClientConfig,
    /// How long [`Reporter::shutdown`] keeps pushing what is pending.
    pub shutdown_flush: Duration,
}

impl ReporterConfig {
    /// The defaults for worker `worker_id` reporting to the agent at `agent_url`.
    pub fn new(worker_id: WorkerId, agent_url: impl Into<String>) -> Self {
        Self {
            worker_id,
            agent_url: agent_url.into(),
            bearer_token: None,
            report_interval: DEFAULT_REPORT_INTERVAL,
            drain_interval: DEFAULT_DRAIN_INTERVAL,
            aggregator: AggregatorConfig::default(),
            max_pending_reports: DEFAULT_MAX_PENDING_REPORTS,
            retry: Backoff { initial: DEFAULT_RETRY_INITIAL, max: DEFAULT_RETRY_MAX },
            http: HttpClientConfig::default(),
            shutdown_flush: DEFAULT_SHUTDOWN_FLUSH,
        }
    }

    fn validate(&self) -> Result<(), StartError> {
        let bad = |field: &'static str, why: &'static str| Err(StartError::Config { field, why });
        if !(self.agent_url.starts_with("http://") || self.agent_url.starts_with("https://")) {
            return bad("agent_url", "must start with http:// or https://");
        }
        let interval_ms = self.report_interval.as_millis();
        if interval_ms == 0 || interval_ms > u128::from(MAX_REPORT_INTERVAL_MS) {
            return bad("report_interval", "must be 1 ms ..= 1 h");
        }
        if self.drain_interval.is_zero() || self.drain_interval > self.report_interval {
            return bad("drain_interval", "must be > 0 and at most report_interval");
        }
        if !(1..=MAX_SKETCH_BUCKETS).contains(&self.aggregator.sketch_buckets) {
            return bad("aggregator.sketch_buckets", "must be 1..=64");
        }
        if self.aggregator.ring_capacity == 0 || self.max_pending_reports == 0 {
            return bad("ring_capacity / max_pending_reports", "must be > 0");
        }
        if self.retry.initial.is_zero() || self.retry.initial > self.retry.max {
            return bad("retry", "initial must be > 0 and at most max");
        }
        Ok(())
    }
}

/// Why a reporter did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("reporter config: {field} {why}")]
    Config { field: &'static str, why: &'static str },
    #[error("cannot start the reporter thread: {0}")]
    Thread(#[from] std::io::Error),
}

/// The embedded reporter: records in, reports out to the agent every interval.
#[derive(Debug)]
pub struct Reporter {
    handle: ReporterHandle,
    stats: Arc<Stats>,
    cancel: CancellationToken,
    thread: Option<JoinHandle<bool>>,
}

impl Reporter {
    /// Starts the background thread (`lb-reporter`).
    pub fn start(config: ReporterConfig) -> Result<Self, StartError> {
        config.validate()?;
        // HELP text for the worker's `/metrics`, if it installed a recorder already.
        lb_common::telemetry::describe(crate::CATALOG);
        let aggregator = Aggregator::new(config.aggregator.clone());
        let handle = aggregator.handle();
        let stats = aggregator.shared_stats();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let cancel = CancellationToken::new();
        let token = cancel.clone();
        let thread = std::thread::Builder::new()
            .name("lb-reporter".into())
            .spawn(move || runtime.block_on(run(aggregator, config, token)))?;
        Ok(Self { handle, stats, cancel, thread: Some(thread) })
    }

    /// The handle to register partitions and get recorders with.
    pub fn handle(&self) -> ReporterHandle {
        self.handle.clone()
    }

    pub fn stats(&self) -> ReporterStats {
        self.stats.snapshot()
    }

    /// Reports the interval so far, pushes what is pending for up to the configured
    /// `shutdown_flush`, and stops the thread. Blocks for at most about that long (call it from
    /// a blocking context). Returns whether every report reached the agent.
    pub fn shutdown(mut self) -> bool {
        self.cancel.cancel();
        self.thread.take().and_then(|t| t.join().ok()).unwrap_or(false)
    }
}

impl Drop for Reporter {
    /// Dropped without [`Reporter::shutdown`]: the thread flushes and exits on its own.
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

fn epoch_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The thread's body: drain every `drain_interval`, report every `report_interval`, push
/// concurrently; on cancel, report the partial interval and flush. Returns whether the outbox
/// was emptied.
async fn run(mut aggregator: Aggregator, config: ReporterConfig, cancel: CancellationToken) -> bool {
    let outbox = Arc::new(Outbox::new(config.max_pending_reports, aggregator.shared_stats()));
    let mut http = HttpClient::new(config.agent_url.clone(), &config.http);
    if let Some(token) = &config.bearer_token {
        http = http.with_bearer_token(token.clone());
    }
    let push_cancel = CancellationToken::new();
    let pusher =
        tokio::spawn(push::run(outbox.clone(), AgentClient::from_http(http), config.retry, push_cancel.clone()));
    info!(worker = %config.worker_id, agent = %config.agent_url, "reporter started");

    let mut seq = 0u64;
    let mut last_report = Instant::now();
    let mut report = |aggregator: &mut Aggregator, now: Instant| {
        seq += 1;
        let interval_ms =
            u64::try_from((now - last_report).as_millis()).unwrap_or(u64::MAX).clamp(1, MAX_REPORT_INTERVAL_MS);
        last_report = now;
        outbox.push(aggregator.take_report(&config.worker_id, seq, epoch_ms(), interval_ms));
    };
    let mut drains = tokio::time::interval(config.drain_interval);
    drains.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut next_report = Instant::now() + config.report_interval;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = drains.tick() => {}
        }
        let now = Instant::now();
        if now >= next_report {
            report(&mut aggregator, now);
            while next_report <= now {
                next_report += config.report_interval;
            }
        } else {
            aggregator.drain();
        }
    }
    report(&mut aggregator, Instant::now());
    let flushed = tokio::time::timeout(config.shutdown_flush, async {
        while !outbox.is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .is_ok();
    push_cancel.cancel();
    if pusher.await.is_err() {
        warn!("reporter pusher panicked");
    }
    let stats = aggregator.stats();
    info!(flushed, pending = stats.pending_reports, acked = stats.reports_acked_total, "reporter stopped");
    flushed
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A field's name and how to spoil it.
    type Spoil = (&'static str, fn(&mut ReporterConfig));

    #[test]
    fn a_bad_config_is_refused_with_the_field_named() {
        let good = ReporterConfig::new("w-1".parse().expect("id"), "http://127.0.0.1:1");
        assert!(good.validate().is_ok());
        let cases: [Spoil; 6] = [
            ("agent_url", |c| c.agent_url = "127.0.0.1:7101".into()),
            ("report_interval", |c| c.report_interval = Duration::ZERO),
            ("drain_interval", |c| c.drain_interval = c.report_interval * 2),
            ("aggregator.sketch_buckets", |c| c.aggregator.sketch_buckets = 65),
            ("ring_capacity / max_pending_reports", |c| c.max_pending_reports = 0),
            ("retry", |c| c.retry.initial = c.retry.max * 2),
        ];
        for (field, spoil) in cases {
            let mut config = good.clone();
            spoil(&mut config);
            match Reporter::start(config) {
                Err(StartError::Config { field: got, .. }) => assert_eq!(got, field),
                other => panic!("{field}: {other:?}"),
            }
        }
    }
}
