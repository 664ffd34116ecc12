//! Registry and collection routes.

use axum::Extension;
use axum::extract::State;
use lb_common::http::{ApiError, ApiJson};
use lb_common::protocol::{
    AgentsResponse, CollectRequest, HeartbeatRequest, RegisterRequest, RegisterResponse, Topology,
};

use super::{AppState, now_ms};
use crate::auth::Caller;
use crate::registry::Beat;

fn reply(state: &AppState, warnings: Vec<String>) -> RegisterResponse {
    let r = &state.config.borrow().registry;
    RegisterResponse { heartbeat_interval_ms: r.heartbeat_interval_ms, down_after_ms: r.down_after_ms, warnings }
}

/// How long a registration waits for the topology it is checked against.
const TOPOLOGY_CHECK_DEADLINE: std::time::Duration = std::time::Duration::from_secs(2);

/// What in an agent's registration does not fit the storage's topology, each naming both
/// values: a worker id that is no worker of it (the agent's samples would count for no node),
/// and a tenant none of its partitions has (they would be another table's).
pub fn mismatches(req: &RegisterRequest, topology: &Topology) -> Vec<String> {
    let mut out = Vec::new();
    if !topology.workers.is_empty() && !topology.workers.iter().any(|w| w.id == req.worker_id) {
        let mut ids: Vec<&str> = topology.workers.iter().map(|w| w.id.as_str()).collect();
        ids.sort_unstable();
        let shown = ids.iter().take(8).copied().collect::<Vec<_>>().join(", ");
        let more = if ids.len() > 8 { format!(" and {} more", ids.len() - 8) } else { String::new() };
        out.push(format!(
            "worker_id {} is not a worker of the storage's topology (its workers: {shown}{more}): set the agent's worker_id to its node's id",
            req.worker_id
        ));
    }
    if let Some(tenant) = &req.tenant
        && let Some(first) = topology.partitions.first()
        && !topology.partitions.iter().any(|p| &p.tenant == tenant)
    {
        out.push(format!(
            "the agent reports its partitions under tenant {tenant}, the storage's topology under {} (the ops server's cluster name): set the agent's cluster_name to {}",
            first.tenant, first.tenant
        ));
    }
    out
}

pub async fn register(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(req): ApiJson<RegisterRequest>,
) -> Result<ApiJson<RegisterResponse>, ApiError> {
    req.validate_with(&state.config.borrow().limits.text())?;
    let (worker_id, address) = (req.worker_id.clone(), req.address.clone());
    let down_after_ms = state.config.borrow().registry.down_after_ms;
    let warnings = match tokio::time::timeout(TOPOLOGY_CHECK_DEADLINE, state.executor.topology()).await {
        Ok(Some(topology)) => mismatches(&req, &topology),
        _ => Vec::new(),
    };
    for warning in &warnings {
        tracing::warn!(%worker_id, %address, warning = %warning, "agent registered with a config that does not fit the topology");
    }
    if let Err(taken) = state.registry.register(req, warnings.clone(), now_ms(), down_after_ms) {
        tracing::warn!(%worker_id, %address, live_address = %taken.live_address, by = %caller.name, "registration refused: id is live elsewhere");
        return Err(ApiError::conflict(taken.to_string()));
    }
    tracing::info!(%worker_id, %address, by = %caller.name, "agent registered");
    Ok(ApiJson(reply(&state, warnings)))
}

pub async fn heartbeat(
    State(state): State<AppState>,
    ApiJson(beat): ApiJson<HeartbeatRequest>,
) -> Result<ApiJson<RegisterResponse>, ApiError> {
    beat.validate()?;
    match state.registry.heartbeat(&beat, now_ms()) {
        Beat::Ok => Ok(ApiJson(reply(&state, Vec::new()))),
        Beat::Unknown => {
            Err(ApiError::not_found(format!("agent {} is not registered; register again", beat.worker_id)))
        }
        Beat::Elsewhere { registered_address } => {
            let from = beat.address.as_deref().unwrap_or_default();
            tracing::warn!(worker_id = %beat.worker_id, %registered_address, heartbeat_from = %from.escape_debug(), "heartbeat refused: the worker id is registered at another address");
            Err(ApiError::conflict(format!(
                "worker {} is registered at {registered_address}, not at {}: another agent has this worker id (two agents configured alike, or it was taken over while this one was down)",
                beat.worker_id,
                from.escape_debug()
            )))
        }
    }
}

pub async fn list(State(state): State<AppState>) -> ApiJson<AgentsResponse> {
    let down_after = state.config.borrow().registry.down_after_ms;
    ApiJson(AgentsResponse { agents: state.registry.list(now_ms(), down_after) })
}

pub async fn collect(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<CollectRequest>,
) -> ApiJson<crate::collect::RelayedCollect> {
    let (collect, down_after) = {
        let c = state.config.borrow();
        (c.collect.clone(), c.registry.down_after_ms)
    };
    ApiJson(crate::collect::collect(&state.registry, &state.agents_client, req, &collect, now_ms(), down_after).await)
}

/// `POST /v1/collect/rollups`: every agent's hourly rollups of the asked hours, fanned out like
/// `POST /v1/collect`.
pub async fn collect_rollups(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<lb_common::protocol::RollupsCollectRequest>,
) -> ApiJson<lb_common::protocol::RollupsCollectResponse> {
    let (collect, down_after) = {
        let c = state.config.borrow();
        (c.collect.clone(), c.registry.down_after_ms)
    };
    ApiJson(
        crate::collect::collect_rollups(&state.registry, &state.agents_client, req, &collect, now_ms(), down_after)
            .await,
    )
}
