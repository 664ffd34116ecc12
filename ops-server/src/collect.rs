//! Collection fan-out: one call from the master pulls new samples from every registered agent
//! in parallel, each with its own deadline, and reports per agent what happened. A slow or dead
//! agent costs its own deadline and nothing more.

use std::time::{Duration, Instant};

use lb_common::clients::AgentClient;
use lb_common::http::{ClientError, HttpClient};
use lb_common::ids::WorkerId;
use lb_common::protocol::{
    AgentRollups, AgentState, CollectRequest, CollectStatus, Cursor, RollupsCollectRequest, RollupsCollectResponse,
    RollupsQuery, SamplesQuery,
};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tokio::task::JoinSet;

use crate::config::CollectConfig;
use crate::registry::Registry;

/// [`lb_common::protocol::CollectResponse`] as the ops server sends it: each agent's samples
/// relayed as the agent wrote them, never parsed and written again here (that was ~40 % of the
/// ops server's CPU beside a Valkey cluster, `docs/benchmarks.md`). The master reads it as a
/// `CollectResponse` (`relayed_replies_read_as_the_protocol_types`).
#[derive(Debug, Serialize)]
pub struct RelayedCollect {
    pub agents: Vec<RelayedAgent>,
}

/// [`lb_common::protocol::AgentCollect`] with its `samples` as raw JSON; the same fields, names
/// and omissions.
#[derive(Debug, Serialize)]
pub struct RelayedAgent {
    pub worker_id: WorkerId,
    pub status: CollectStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub samples: Box<RawValue>,
    pub next_cursor: Cursor,
    pub gap: bool,
    pub more: bool,
    pub elapsed_ms: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// An agent's [`lb_common::protocol::SamplesResponse`], its samples kept as they came.
#[derive(Debug, Deserialize)]
struct RawPage {
    samples: Box<RawValue>,
    next_cursor: Cursor,
    #[serde(default)]
    gap: bool,
    #[serde(default)]
    more: bool,
}

fn no_samples() -> Box<RawValue> {
    RawValue::from_string("[]".to_owned()).expect("[] is JSON")
}

pub async fn collect(
    registry: &Registry,
    client: &HttpClient,
    request: CollectRequest,
    config: &CollectConfig,
    now_ms: i64,
    down_after_ms: u64,
) -> RelayedCollect {
    let deadline_ms = request.agent_deadline_ms.unwrap_or(config.agent_deadline_ms).min(config.max_agent_deadline_ms);
    let deadline = Duration::from_millis(deadline_ms);
    let limit = request.limit_per_agent.unwrap_or(config.limit_per_agent).min(config.limit_per_agent);
    let mut tasks = JoinSet::new();
    let mut replies = Vec::new();
    for agent in registry.list(now_ms, down_after_ms) {
        let after = request.cursors.get(&agent.worker_id).copied().unwrap_or(Cursor(0));
        if agent.state == AgentState::Down {
            replies.push(RelayedAgent {
                worker_id: agent.worker_id,
                status: CollectStatus::Down,
                error: Some("no heartbeat within the grace period; not asked".to_owned()),
                samples: no_samples(),
                next_cursor: after,
                gap: false,
                more: false,
                elapsed_ms: 0,
                warnings: agent.warnings,
            });
            continue;
        }
        let limit = request.limits.get(&agent.worker_id).map_or(limit, |&l| l.clamp(1, limit));
        let peer = client.for_peer(&agent.address).with_deadline(deadline);
        tasks.spawn(async move {
            let started = Instant::now();
            let query = SamplesQuery { after, limit: Some(limit) };
            // The client enforces the deadline; the outer timeout is the hard cap.
            let result = tokio::time::timeout(deadline, peer.get_with_query::<_, RawPage>("/v1/samples", &query))
                .await
                .unwrap_or_else(|_| Err(ClientError::Timeout { url: peer.base_url().to_owned(), deadline_ms }));
            let elapsed_ms = started.elapsed().as_millis() as u64;
            let reply = match result {
                Ok(page) => RelayedAgent {
                    worker_id: agent.worker_id,
                    status: CollectStatus::Ok,
                    error: None,
                    samples: page.samples,
                    next_cursor: page.next_cursor,
                    gap: page.gap,
                    more: page.more,
                    elapsed_ms,
                    warnings: agent.warnings,
                },
                Err(err) => RelayedAgent {
                    worker_id: agent.worker_id,
                    status: if matches!(err, ClientError::Timeout { .. }) {
                        CollectStatus::Timeout
                    } else {
                        CollectStatus::Error
                    },
                    error: Some(err.to_string()),
                    samples: no_samples(),
                    next_cursor: after,
                    gap: false,
                    more: false,
                    elapsed_ms,
                    warnings: agent.warnings,
                },
            };
            metrics::counter!("lb_ops_collect_agents_total", "status" => reply.status.as_str()).increment(1);
            reply
        });
    }
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok(reply) => replies.push(reply),
            Err(error) => tracing::error!(%error, "collect task failed"),
        }
    }
    replies.sort_by(|a, b| a.worker_id.cmp(&b.worker_id));
    RelayedCollect { agents: replies }
}

/// The rollups fan-out (`POST /v1/collect/rollups`): each agent's (or each named agent's) hourly
/// rollups of the asked hours, in parallel with the same per-agent deadline as collection. The master archives them
/// hourly, so a slow agent costs its deadline once an hour.
pub async fn collect_rollups(
    registry: &Registry,
    client: &HttpClient,
    request: RollupsCollectRequest,
    config: &CollectConfig,
    now_ms: i64,
    down_after_ms: u64,
) -> RollupsCollectResponse {
    let deadline_ms = request.agent_deadline_ms.unwrap_or(config.agent_deadline_ms).min(config.max_agent_deadline_ms);
    let deadline = Duration::from_millis(deadline_ms);
    let query = RollupsQuery { from_ms: request.from_ms, to_ms: request.to_ms };
    let mut tasks = JoinSet::new();
    let mut replies = Vec::new();
    let asked = |agent: &lb_common::protocol::AgentInfo| {
        request.workers.is_empty() || request.workers.contains(&agent.worker_id)
    };
    for agent in registry.list(now_ms, down_after_ms).into_iter().filter(asked) {
        if agent.state == AgentState::Down {
            replies.push(AgentRollups {
                worker_id: agent.worker_id,
                status: CollectStatus::Down,
                error: Some("no heartbeat within the grace period; not asked".to_owned()),
                rollups: Vec::new(),
                elapsed_ms: 0,
            });
            continue;
        }
        let peer = client.for_peer(&agent.address).with_deadline(deadline);
        let query = query.clone();
        tasks.spawn(async move {
            let started = Instant::now();
            let result = tokio::time::timeout(deadline, AgentClient::from_http(peer.clone()).rollups(&query))
                .await
                .unwrap_or_else(|_| Err(ClientError::Timeout { url: peer.base_url().to_owned(), deadline_ms }));
            let elapsed_ms = started.elapsed().as_millis() as u64;
            match result {
                Ok(page) => AgentRollups {
                    worker_id: agent.worker_id,
                    status: CollectStatus::Ok,
                    error: None,
                    rollups: page.rollups,
                    elapsed_ms,
                },
                Err(err) => AgentRollups {
                    worker_id: agent.worker_id,
                    status: if matches!(err, ClientError::Timeout { .. }) {
                        CollectStatus::Timeout
                    } else {
                        CollectStatus::Error
                    },
                    error: Some(err.to_string()),
                    rollups: Vec::new(),
                    elapsed_ms,
                },
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok(reply) => replies.push(reply),
            Err(error) => tracing::error!(%error, "rollups task failed"),
        }
    }
    replies.sort_by(|a, b| a.worker_id.cmp(&b.worker_id));
    RollupsCollectResponse { agents: replies }
}

#[cfg(test)]
mod tests {
    use lb_common::protocol::{AgentCollect, CollectResponse, SamplesResponse};

    use super::*;

    /// What the master parses is what the ops server used to send: the documented agent page
    /// relayed raw, and an agent not asked, read back as the protocol's types, field for field.
    #[test]
    fn relayed_replies_read_as_the_protocol_types() {
        let page_text = include_str!("../../docs/examples/samples_response.json");
        let page: SamplesResponse = serde_json::from_str(page_text).expect("the documented page");
        // As an agent sends it: compact (a raw value keeps the bytes it was given).
        let sent = serde_json::to_string(&page).expect("serialises");
        let raw: RawPage = serde_json::from_str(&sent).expect("read raw");
        let worker: WorkerId = "w-3".parse().expect("id");
        let relayed = RelayedCollect {
            agents: vec![
                RelayedAgent {
                    worker_id: worker.clone(),
                    status: CollectStatus::Ok,
                    error: None,
                    samples: raw.samples,
                    next_cursor: raw.next_cursor,
                    gap: raw.gap,
                    more: raw.more,
                    elapsed_ms: 3,
                    warnings: vec!["a warning".to_owned()],
                },
                RelayedAgent {
                    worker_id: "w-4".parse().expect("id"),
                    status: CollectStatus::Down,
                    error: Some("not asked".to_owned()),
                    samples: no_samples(),
                    next_cursor: Cursor(7),
                    gap: false,
                    more: false,
                    elapsed_ms: 0,
                    warnings: Vec::new(),
                },
            ],
        };
        let text = serde_json::to_string(&relayed).expect("serialises");
        let read: CollectResponse = serde_json::from_str(&text).expect("the master reads it");
        let want = CollectResponse {
            agents: vec![
                AgentCollect {
                    worker_id: worker,
                    status: CollectStatus::Ok,
                    error: None,
                    samples: page.samples,
                    next_cursor: page.next_cursor,
                    gap: page.gap,
                    more: page.more,
                    elapsed_ms: 3,
                    warnings: vec!["a warning".to_owned()],
                },
                AgentCollect {
                    worker_id: "w-4".parse().expect("id"),
                    status: CollectStatus::Down,
                    error: Some("not asked".to_owned()),
                    samples: Vec::new(),
                    next_cursor: Cursor(7),
                    gap: false,
                    more: false,
                    elapsed_ms: 0,
                    warnings: Vec::new(),
                },
            ],
        };
        assert_eq!(read, want);
        // And byte for byte what the typed reply serialises to.
        assert_eq!(text, serde_json::to_string(&want).expect("serialises"));
    }
}
