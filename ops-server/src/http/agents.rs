//! Registry and collection routes.

use axum::Extension;
use axum::extract::State;
use lb_common::http::{ApiError, ApiJson};
use lb_common::protocol::{
    AgentsResponse, CollectRequest, CollectResponse, HeartbeatRequest, RegisterRequest, RegisterResponse,
};

use super::{AppState, now_ms};
use crate::auth::Caller;

fn reply(state: &AppState) -> RegisterResponse {
    let r = &state.config.borrow().registry;
    RegisterResponse { heartbeat_interval_ms: r.heartbeat_interval_ms, down_after_ms: r.down_after_ms }
}

pub async fn register(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(req): ApiJson<RegisterRequest>,
) -> Result<ApiJson<RegisterResponse>, ApiError> {
    req.validate()?;
    let (worker_id, address) = (req.worker_id.clone(), req.address.clone());
    let down_after_ms = state.config.borrow().registry.down_after_ms;
    if let Err(taken) = state.registry.register(req, now_ms(), down_after_ms) {
        tracing::warn!(%worker_id, %address, live_address = %taken.live_address, by = %caller.name, "registration refused: id is live elsewhere");
        return Err(ApiError::conflict(taken.to_string()));
    }
    tracing::info!(%worker_id, %address, by = %caller.name, "agent registered");
    Ok(ApiJson(reply(&state)))
}

pub async fn heartbeat(
    State(state): State<AppState>,
    ApiJson(beat): ApiJson<HeartbeatRequest>,
) -> Result<ApiJson<RegisterResponse>, ApiError> {
    if !state.registry.heartbeat(&beat, now_ms()) {
        return Err(ApiError::not_found(format!("agent {} is not registered; register again", beat.worker_id)));
    }
    Ok(ApiJson(reply(&state)))
}

pub async fn list(State(state): State<AppState>) -> ApiJson<AgentsResponse> {
    let down_after = state.config.borrow().registry.down_after_ms;
    ApiJson(AgentsResponse { agents: state.registry.list(now_ms(), down_after) })
}

pub async fn collect(State(state): State<AppState>, ApiJson(req): ApiJson<CollectRequest>) -> ApiJson<CollectResponse> {
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
