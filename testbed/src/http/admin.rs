//! Handlers of the admin routes.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use lb_common::http::{ApiError, ApiJson};
use lb_common::ids::OperationId;
use lb_common::protocol::{ActionKind, AdminRequest, Operation, OperationAccepted, Topology};

use super::error::to_api;
use super::{AppState, lock};
use crate::ops::FaultRule;

pub async fn topology(State(state): State<AppState>) -> ApiJson<Topology> {
    ApiJson(lock(&state.engine).topology())
}

pub async fn split(
    state: State<AppState>,
    req: ApiJson<AdminRequest>,
) -> Result<(StatusCode, ApiJson<OperationAccepted>), ApiError> {
    submit(state, req, ActionKind::Split)
}

pub async fn move_partition(
    state: State<AppState>,
    req: ApiJson<AdminRequest>,
) -> Result<(StatusCode, ApiJson<OperationAccepted>), ApiError> {
    submit(state, req, ActionKind::Move)
}

pub async fn merge(
    state: State<AppState>,
    req: ApiJson<AdminRequest>,
) -> Result<(StatusCode, ApiJson<OperationAccepted>), ApiError> {
    submit(state, req, ActionKind::Merge)
}

pub async fn group(
    state: State<AppState>,
    req: ApiJson<AdminRequest>,
) -> Result<(StatusCode, ApiJson<OperationAccepted>), ApiError> {
    submit(state, req, ActionKind::Group)
}

pub async fn reshard(
    state: State<AppState>,
    req: ApiJson<AdminRequest>,
) -> Result<(StatusCode, ApiJson<OperationAccepted>), ApiError> {
    submit(state, req, ActionKind::Reshard)
}

fn submit(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<AdminRequest>,
    path_kind: ActionKind,
) -> Result<(StatusCode, ApiJson<OperationAccepted>), ApiError> {
    let kind = req.spec.kind();
    if kind != path_kind {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "wrong_kind",
            format!(
                "spec.kind = {}: must be {} on /v1/admin/{}",
                kind.as_str(),
                path_kind.as_str(),
                path_kind.as_str()
            ),
        ));
    }
    let operation_id = lock(&state.engine).submit(req.action_id, req.spec).map_err(to_api)?;
    Ok((StatusCode::ACCEPTED, ApiJson(OperationAccepted { operation_id })))
}

pub async fn operation(State(state): State<AppState>, Path(id): Path<String>) -> Result<ApiJson<Operation>, ApiError> {
    let id = OperationId::new(id).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let engine = lock(&state.engine);
    engine.operation(&id).cloned().map(ApiJson).ok_or_else(|| ApiError::not_found(format!("no operation {id}")))
}

pub async fn add_fault(
    State(state): State<AppState>,
    ApiJson(rule): ApiJson<FaultRule>,
) -> Result<ApiJson<Vec<FaultRule>>, ApiError> {
    if rule.count == 0 {
        return Err(ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_field", "count = 0: must be > 0"));
    }
    let mut engine = lock(&state.engine);
    tracing::info!(kind = ?rule.kind, fault = ?rule.fault, count = rule.count, "fault injected");
    engine.add_fault(rule);
    Ok(ApiJson(engine.pending_faults()))
}

pub async fn faults(State(state): State<AppState>) -> ApiJson<Vec<FaultRule>> {
    ApiJson(lock(&state.engine).pending_faults())
}
