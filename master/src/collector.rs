//! The collector: every `collector.interval_ms`, pull new samples from all agents through the
//! ops server (`POST /v1/collect`) with per-agent cursors, and hand them to the table.
//!
//! Exactly once: a worker's cursor only advances past samples that were handed over, and a
//! failed agent (timeout, error, down) keeps its cursor, so it is asked from the same place next
//! round. An ops server outage is retried with exponential backoff; after `stale_after_ms`
//! without a successful round the data is marked stale (the analyzers see it and hold off), but
//! nothing waits on the collector.

use std::collections::BTreeMap;
use std::time::Duration;

use lb_common::http::{ClientError, HttpClient};
use lb_common::ids::WorkerId;
use lb_common::protocol::{CollectRequest, CollectResponse, CollectStatus, Cursor, Sample};
use serde::{Deserialize, Serialize};

use crate::config::CollectorConfig;

/// Longest wait between retries while the ops server is unreachable.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// What the console and `/api/v1/collector` show.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CollectorStatus {
    pub last_success_ms: Option<i64>,
    pub last_attempt_ms: Option<i64>,
    pub consecutive_failures: u32,
    /// No successful round within `collector.stale_after_ms`: the table is behind.
    pub stale: bool,
    pub last_error: Option<String>,
    pub samples_total: u64,
    /// Per agent: the last round's status, and how many gaps (expired data) it reported.
    pub agents: BTreeMap<WorkerId, AgentCollectStatus>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentCollectStatus {
    pub status: Option<CollectStatus>,
    pub cursor: Cursor,
    pub gaps: u64,
    pub last_error: Option<String>,
}

#[derive(Debug)]
pub struct Collector {
    client: HttpClient,
    cursors: BTreeMap<WorkerId, Cursor>,
    pub status: CollectorStatus,
}

impl Collector {
    pub fn new(ops_server: HttpClient) -> Self {
        Self { client: ops_server, cursors: BTreeMap::new(), status: CollectorStatus::default() }
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
            };
            let reply: CollectResponse = match self.client.post("/v1/collect", &request).await {
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
                let entry = self.status.agents.entry(agent.worker_id.clone()).or_default();
                entry.status = Some(agent.status);
                entry.last_error = agent.error.clone();
                if agent.status != CollectStatus::Ok {
                    continue;
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
        self.status.consecutive_failures = 0;
        self.status.last_error = None;
        self.status.last_success_ms = Some(now_ms);
        self.status.samples_total += collected;
        self.status.stale = false;
        metrics::counter!("lb_master_collect_rounds_total", "outcome" => "ok").increment(1);
        metrics::counter!("lb_master_collected_samples_total").increment(collected);
        metrics::gauge!("lb_master_collector_stale").set(0.0);
        Ok(collected)
    }

    fn update_stale(&mut self, config: &CollectorConfig, now_ms: i64) {
        let last = self.status.last_success_ms.unwrap_or(i64::MIN);
        self.status.stale = now_ms.saturating_sub(last) > config.stale_after_ms as i64;
        metrics::gauge!("lb_master_collector_stale").set(if self.status.stale { 1.0 } else { 0.0 });
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
