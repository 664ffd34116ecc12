//! Collection fan-out: one call from the master pulls new samples from every registered agent
//! in parallel, each with its own deadline, and reports per agent what happened. A slow or dead
//! agent costs its own deadline and nothing more.

use std::time::{Duration, Instant};

use lb_common::clients::AgentClient;
use lb_common::http::{ClientError, HttpClient};
use lb_common::protocol::{
    AgentCollect, AgentRollups, AgentState, CollectRequest, CollectResponse, CollectStatus, Cursor,
    RollupsCollectRequest, RollupsCollectResponse, RollupsQuery, SamplesQuery,
};
use tokio::task::JoinSet;

use crate::config::CollectConfig;
use crate::registry::Registry;

pub async fn collect(
    registry: &Registry,
    client: &HttpClient,
    request: CollectRequest,
    config: &CollectConfig,
    now_ms: i64,
    down_after_ms: u64,
) -> CollectResponse {
    let deadline_ms = request.agent_deadline_ms.unwrap_or(config.agent_deadline_ms).min(config.max_agent_deadline_ms);
    let deadline = Duration::from_millis(deadline_ms);
    let limit = request.limit_per_agent.unwrap_or(config.limit_per_agent).min(config.limit_per_agent);
    let mut tasks = JoinSet::new();
    let mut replies = Vec::new();
    for agent in registry.list(now_ms, down_after_ms) {
        let after = request.cursors.get(&agent.worker_id).copied().unwrap_or(Cursor(0));
        if agent.state == AgentState::Down {
            replies.push(AgentCollect {
                worker_id: agent.worker_id,
                status: CollectStatus::Down,
                error: Some("no heartbeat within the grace period; not asked".to_owned()),
                samples: Vec::new(),
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
            let result = tokio::time::timeout(deadline, AgentClient::from_http(peer.clone()).samples(&query))
                .await
                .unwrap_or_else(|_| Err(ClientError::Timeout { url: peer.base_url().to_owned(), deadline_ms }));
            let elapsed_ms = started.elapsed().as_millis() as u64;
            let reply = match result {
                Ok(page) => AgentCollect {
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
                Err(err) => AgentCollect {
                    worker_id: agent.worker_id,
                    status: if matches!(err, ClientError::Timeout { .. }) {
                        CollectStatus::Timeout
                    } else {
                        CollectStatus::Error
                    },
                    error: Some(err.to_string()),
                    samples: Vec::new(),
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
    CollectResponse { agents: replies }
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
