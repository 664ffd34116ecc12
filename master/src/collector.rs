//! The collector: every `collector.interval_ms`, pull new samples from all agents through the
//! ops server (`POST /v1/collect`) with per-agent cursors, and hand them to the table.
//!
//! Exactly once: a worker's cursor only advances past samples that were handed over, and a
//! failed agent (timeout, error, down) keeps its cursor, so it is asked from the same place next
//! round. An ops server outage is retried with exponential backoff; after `stale_after_ms`
//! without a successful round the data is marked stale (the analyzers see it and hold off), but
//! nothing waits on the collector.
//!
//! Falling behind is bounded and told. An agent that misses its deadline gets half the page
//! next time (down to [`MIN_PAGE`]), and one that answers well inside it gets its page back
//! step by step up to `limit_per_agent`: an agent that cannot serve a full page in time (a slow
//! machine, a debug build, a backlog) still delivers every round instead of timing out on the
//! same page forever. Each agent's **lag** — the wall clock less the newest sample delivered
//! from it — is in [`AgentCollectStatus::lag_ms`], `/api/v1/collector` and
//! `lb_master_collection_lag_seconds` (the largest over agents that are not down).

use std::collections::BTreeMap;
use std::time::Duration;

use lb_common::clients::OpsClient;
use lb_common::http::ClientError;
use lb_common::ids::WorkerId;
pub use lb_common::protocol::{AgentCollectStatus, CollectorStatus};
use lb_common::protocol::{CollectRequest, CollectResponse, CollectStatus, Cursor, Sample};

use tokio_util::sync::CancellationToken;

use crate::Shared;
use crate::config::CollectorConfig;

/// Longest wait between retries while the ops server is unreachable.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// The smallest page an agent is asked for: a few reports' worth, so even an agent that is
/// very slow to serve moves forward every round.
pub const MIN_PAGE: u32 = 100;
/// A page served within this share of the deadline is taken as room to grow the next one.
const GROW_BELOW_DEADLINE_RATIO: f64 = 0.25;

#[derive(Debug)]
pub struct Collector {
    client: OpsClient,
    cursors: BTreeMap<WorkerId, Cursor>,
    /// Per-agent pages below the configured limit (an agent not listed gets the full page).
    limits: BTreeMap<WorkerId, u32>,
    pub status: CollectorStatus,
}

impl Collector {
    pub fn new(ops_server: OpsClient) -> Self {
        Self {
            client: ops_server,
            cursors: BTreeMap::new(),
            limits: BTreeMap::new(),
            status: CollectorStatus::default(),
        }
    }

    /// One round: collect until no agent has more (bounded by `max_pages_per_round`), handing
    /// each agent's samples to `sink` before advancing its cursor. The sink's flag says the
    /// agent's cursors went backwards (its store was replaced): forget what was seen from it.
    pub async fn run_once(
        &mut self,
        config: &CollectorConfig,
        now_ms: i64,
        sink: &mut (dyn FnMut(&WorkerId, &[Sample], bool) + Send),
    ) -> Result<u64, ClientError> {
        self.status.last_attempt_ms = Some(now_ms);
        let mut collected = 0u64;
        for _ in 0..config.max_pages_per_round {
            let request = CollectRequest {
                cursors: self.cursors.clone(),
                limit_per_agent: Some(config.limit_per_agent),
                agent_deadline_ms: Some(config.agent_deadline_ms),
                limits: self.limits.clone(),
            };
            let reply: CollectResponse = match self.client.collect(&request).await {
                Ok(reply) => reply,
                Err(err) => {
                    self.status.consecutive_failures += 1;
                    self.status.last_error = Some(err.to_string());
                    self.update_stale(config, now_ms);
                    metrics::counter!("lb_master_collect_rounds_total", "outcome" => "error").increment(1);
                    return Err(err);
                }
            };
            let mut more = false;
            for agent in reply.agents {
                let limit = self.next_page(config, &agent);
                let entry = self.status.agents.entry(agent.worker_id.clone()).or_default();
                entry.status = Some(agent.status);
                entry.last_error = agent.error.clone();
                entry.page_limit = limit;
                entry.last_elapsed_ms = agent.elapsed_ms;
                if entry.warnings != agent.warnings {
                    for warning in &agent.warnings {
                        tracing::warn!(worker = %agent.worker_id, warning = %warning, "an agent's config does not fit the storage's topology");
                    }
                    entry.warnings = agent.warnings.clone();
                }
                if agent.status != CollectStatus::Ok {
                    continue;
                }
                if let Some(newest) = agent.samples.iter().map(|s| s.timestamp_ms).max() {
                    entry.newest_sample_ms = Some(entry.newest_sample_ms.map_or(newest, |t| t.max(newest)));
                }
                if agent.gap {
                    entry.gaps += 1;
                    metrics::counter!("lb_master_collect_gaps_total").increment(1);
                    tracing::warn!(worker_id = %agent.worker_id, "agent reports expired data before our cursor");
                }
                let previous = self.cursors.get(&agent.worker_id).copied().unwrap_or_default();
                let reset = agent.next_cursor < previous;
                if reset {
                    tracing::warn!(worker_id = %agent.worker_id, "agent cursors went backwards; its store was replaced");
                }
                if !agent.samples.is_empty() || reset {
                    sink(&agent.worker_id, &agent.samples, reset);
                    collected += agent.samples.len() as u64;
                }
                entry.cursor = agent.next_cursor;
                self.cursors.insert(agent.worker_id, agent.next_cursor);
                more |= agent.more;
            }
            if !more {
                break;
            }
        }
        self.note_lag(now_ms);
        self.status.consecutive_failures = 0;
        self.status.last_error = None;
        self.status.last_success_ms = Some(now_ms);
        self.status.samples_total += collected;
        self.status.stale = false;
        metrics::counter!("lb_master_collect_rounds_total", "outcome" => "ok").increment(1);
        metrics::counter!("lb_master_collected_samples_total").increment(collected);
        metrics::gauge!("lb_master_stale_collectors").set(0.0);
        Ok(collected)
    }

    /// The page to ask `agent` for next: halved after a missed deadline, doubled back after a
    /// page served well inside it, never above `limit_per_agent` or below [`MIN_PAGE`].
    fn next_page(&mut self, config: &CollectorConfig, agent: &lb_common::protocol::AgentCollect) -> u32 {
        let full = config.limit_per_agent;
        let now = self.limits.get(&agent.worker_id).copied().unwrap_or(full).min(full);
        let next = match agent.status {
            CollectStatus::Timeout => {
                let halved = (now / 2).max(MIN_PAGE.min(full));
                if halved < now {
                    tracing::warn!(worker_id = %agent.worker_id, page = halved, "agent missed its collection deadline; asking it for smaller pages");
                }
                halved
            }
            CollectStatus::Ok
                if (agent.elapsed_ms as f64) < config.agent_deadline_ms as f64 * GROW_BELOW_DEADLINE_RATIO =>
            {
                now.saturating_mul(2).min(full)
            }
            _ => now,
        };
        if next >= full {
            self.limits.remove(&agent.worker_id);
        } else {
            self.limits.insert(agent.worker_id.clone(), next);
        }
        next
    }

    /// Each agent's lag at `now_ms`, and the largest over agents that are not down.
    fn note_lag(&mut self, now_ms: i64) {
        let mut max = None;
        for agent in self.status.agents.values_mut() {
            agent.lag_ms = agent.newest_sample_ms.map(|t| (now_ms - t).max(0));
            if agent.status != Some(CollectStatus::Down) {
                max = max.max(agent.lag_ms);
            }
        }
        self.status.max_lag_ms = max;
        if let Some(lag) = max {
            metrics::gauge!("lb_master_collection_lag_seconds").set(lag as f64 / 1000.0);
        }
        let smallest = self.status.agents.values().map(|a| a.page_limit).filter(|&l| l > 0).min();
        if let Some(page) = smallest {
            metrics::gauge!("lb_master_collect_page_samples").set(f64::from(page));
        }
        for status in [CollectStatus::Ok, CollectStatus::Timeout, CollectStatus::Error, CollectStatus::Down] {
            let n = self.status.agents.values().filter(|a| a.status == Some(status)).count();
            metrics::gauge!("lb_master_collected_agents", "status" => status.as_str()).set(n as f64);
        }
    }

    fn update_stale(&mut self, config: &CollectorConfig, now_ms: i64) {
        let last = self.status.last_success_ms.unwrap_or(i64::MIN);
        self.status.stale = now_ms.saturating_sub(last) > config.stale_after_ms as i64;
        metrics::gauge!("lb_master_stale_collectors").set(if self.status.stale { 1.0 } else { 0.0 });
    }

    /// How long to wait before the next round.
    pub fn next_delay(&self, config: &CollectorConfig) -> Duration {
        let interval = Duration::from_millis(config.interval_ms);
        match self.status.consecutive_failures {
            0 => interval,
            n => (interval * 2u32.saturating_pow(n.min(16))).min(MAX_BACKOFF),
        }
    }

    pub fn cursor(&self, worker: &WorkerId) -> Option<Cursor> {
        self.cursors.get(worker).copied()
    }
}

/// `lb_master_table_bytes` is measured every this many rounds (10 s at the default 1 s).
const TABLE_MEMORY_EVERY_ROUNDS: u64 = 10;

/// The collect loop: a round every `collector.interval_ms` (backing off while the ops server
/// fails), each agent's page ingested under the table's write lock before its cursor advances;
/// the status is published for `/api/v1/collector` after every round.
pub async fn run(shared: Shared, cancel: CancellationToken) {
    let mut collector: Option<(String, Collector)> = None;
    let mut rounds = 0u64;
    loop {
        let cfg = shared.config.borrow().clone();
        // A new ops server URL starts from fresh cursors only if the URL changed.
        if collector.as_ref().is_none_or(|(url, _)| *url != cfg.ops_server.url) {
            collector = Some((cfg.ops_server.url.clone(), Collector::new(shared.ops_client())));
        }
        let (_, c) = collector.as_mut().expect("set above");
        let table = shared.table.clone();
        let mut sink = |worker: &lb_common::ids::WorkerId, samples: &[lb_common::protocol::Sample], reset: bool| {
            // Held for one agent's page at a time, so readers are never blocked for long.
            let mut table = table.write().expect("table lock is never poisoned");
            if reset {
                table.forget_cursor(worker);
            }
            let stats = table.ingest(worker, samples, crate::now_ms());
            metrics::counter!("lb_master_table_accepted_total")
                .increment(stats.accepted_partition + stats.accepted_host);
            metrics::counter!("lb_master_table_duplicates_total").increment(stats.duplicate);
            metrics::counter!("lb_master_table_dropped_total")
                .increment(stats.dropped_late + stats.rejected_future + stats.invalid + stats.over_capacity);
        };
        let _ = c.run_once(&cfg.collector, crate::now_ms(), &mut sink).await;
        *shared.collector.write().expect("collector status lock is never poisoned") = c.status.clone();
        if rounds.is_multiple_of(TABLE_MEMORY_EVERY_ROUNDS) {
            // A walk over every partition entry: cheap, but not worth doing every round.
            let usage = shared.table.read().expect("table lock is never poisoned").memory_usage();
            metrics::gauge!("lb_master_table_bytes").set(usage.total_bytes as f64);
            metrics::gauge!("lb_master_table_partitions").set(usage.partitions as f64);
        }
        rounds += 1;
        let delay = c.next_delay(&cfg.collector);
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use lb_common::protocol::AgentCollect;

    use super::*;

    fn reply(status: CollectStatus, elapsed_ms: u64) -> AgentCollect {
        AgentCollect {
            worker_id: "w1".parse().expect("id"),
            status,
            error: None,
            samples: Vec::new(),
            next_cursor: Cursor(0),
            gap: false,
            more: true,
            elapsed_ms,
            warnings: Vec::new(),
        }
    }

    #[test]
    fn a_slow_agent_gets_smaller_pages_until_it_answers_in_time_and_then_full_ones_again() {
        let config = CollectorConfig { limit_per_agent: 20_000, agent_deadline_ms: 3_000, ..Default::default() };
        let mut c = Collector::new(OpsClient::new("http://127.0.0.1:9", &Default::default()));
        let pages: Vec<u32> = (0..10).map(|_| c.next_page(&config, &reply(CollectStatus::Timeout, 3_000))).collect();
        assert_eq!(pages[..3], [10_000, 5_000, 2_500]);
        assert_eq!(pages[9], MIN_PAGE, "never below the floor: {pages:?}");
        // An answer inside the deadline but not well inside it keeps the page.
        assert_eq!(c.next_page(&config, &reply(CollectStatus::Ok, 1_500)), MIN_PAGE);
        let grown: Vec<u32> = (0..9).map(|_| c.next_page(&config, &reply(CollectStatus::Ok, 100))).collect();
        assert_eq!(grown[..3], [200, 400, 800]);
        assert_eq!(*grown.last().expect("some"), 20_000, "back to the configured page: {grown:?}");
        assert!(c.limits.is_empty(), "a full page is not listed in the request");
        // Errors and down agents keep the page they had.
        assert_eq!(c.next_page(&config, &reply(CollectStatus::Error, 0)), 20_000);
    }

    #[test]
    fn lag_is_the_round_time_less_the_newest_sample_and_skips_down_agents() {
        let mut c = Collector::new(OpsClient::new("http://127.0.0.1:9", &Default::default()));
        let agent = |status, newest| AgentCollectStatus {
            status: Some(status),
            newest_sample_ms: newest,
            page_limit: 5_000,
            ..Default::default()
        };
        c.status.agents.insert("w1".parse().expect("id"), agent(CollectStatus::Ok, Some(9_000)));
        c.status.agents.insert("w2".parse().expect("id"), agent(CollectStatus::Timeout, Some(4_000)));
        c.status.agents.insert("w3".parse().expect("id"), agent(CollectStatus::Down, Some(1_000)));
        c.status.agents.insert("w4".parse().expect("id"), agent(CollectStatus::Ok, None));
        c.note_lag(10_000);
        let lags: Vec<Option<i64>> = c.status.agents.values().map(|a| a.lag_ms).collect();
        assert_eq!(lags, [Some(1_000), Some(6_000), Some(9_000), None]);
        assert_eq!(c.status.max_lag_ms, Some(6_000), "the agent behind, not the one that is down");
    }
}
