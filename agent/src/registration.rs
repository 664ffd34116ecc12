//! Registers with the ops server and heartbeats, with exponential backoff while it is down.
//! Collection and persistence never wait on this loop: an agent whose ops server is gone keeps
//! accepting reports and storing them.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use lb_common::clients::OpsClient;
use lb_common::http::KeptClient;
use lb_common::protocol::{HeartbeatRequest, RegisterRequest};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::config::AgentConfig;
use crate::store::MetricStore;

/// First retry after a failed call; doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(500);
/// 30 s: an ops server back from an outage sees every agent within half a minute.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

pub async fn run(
    config: watch::Receiver<Arc<AgentConfig>>,
    bound: SocketAddr,
    store: Arc<MetricStore>,
    cancel: CancellationToken,
) {
    let mut registered_with: Option<String> = None;
    let mut backoff = MIN_BACKOFF;
    // One client (and connection) for every heartbeat while the settings hold.
    let kept = KeptClient::default();
    loop {
        let cfg = config.borrow().clone();
        let wait = match &cfg.ops_server {
            None => {
                registered_with = None;
                Duration::from_secs(5)
            }
            Some(ops) => {
                let client = OpsClient::from_http(kept.get(&ops.url, &cfg.client, ops.token.as_deref()));
                let result = if registered_with.as_deref() == Some(ops.url.as_str()) {
                    let beat = HeartbeatRequest {
                        worker_id: cfg.worker_id.clone(),
                        latest_cursor: store.latest_cursor(),
                        address: Some(cfg.advertise_url(bound)),
                    };
                    client.heartbeat(&beat).await
                } else {
                    let req = RegisterRequest {
                        worker_id: cfg.worker_id.clone(),
                        address: cfg.advertise_url(bound),
                        version: env!("CARGO_PKG_VERSION").to_owned(),
                        tenant: cfg.source.as_ref().and_then(|s| s.tenant()),
                    };
                    let reply = client.register(&req).await;
                    if let Ok(reply) = &reply {
                        info!(ops_server = %ops.url, "registered with the ops server");
                        for warning in &reply.warnings {
                            warn!(ops_server = %ops.url, warning = %warning, "the ops server says this agent's config does not fit the storage");
                        }
                        registered_with = Some(ops.url.clone());
                    }
                    reply
                };
                match result {
                    Ok(reply) => {
                        backoff = MIN_BACKOFF;
                        metrics::counter!("lb_agent_heartbeats_total", "outcome" => "ok").increment(1);
                        Duration::from_millis(reply.heartbeat_interval_ms.clamp(100, 600_000))
                    }
                    Err(error) => {
                        let retry_in_ms = backoff.as_millis() as u64;
                        match error.status() {
                            // The ops server forgot us (it restarted): register again.
                            Some(StatusCode::NOT_FOUND) => {
                                registered_with = None;
                                info!(%error, retry_in_ms, "the ops server does not know this agent: registering again");
                            }
                            // Another agent holds this worker id: nothing is collected from this
                            // one until it can register again.
                            Some(StatusCode::CONFLICT) => {
                                registered_with = None;
                                tracing::error!(%error, retry_in_ms, "this agent's worker id is registered by another agent: not collected");
                            }
                            _ => warn!(%error, retry_in_ms, "ops server unreachable"),
                        }
                        metrics::counter!("lb_agent_heartbeats_total", "outcome" => error.kind()).increment(1);
                        let wait = backoff;
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                        wait
                    }
                }
            }
        };
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}
