//! Action routes: submit (idempotent, fenced by leader epoch), get, list, events, cancel, the
//! halt switch, and the fencing status.

use axum::Extension;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::header::{ETAG, IF_NONE_MATCH};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use lb_common::http::{ApiError, ApiJson};
use lb_common::ids::ActionId;
use lb_common::protocol::{
    ActionRecord, ActionRequest, ActionSpec, ActionState, ActionsQuery, ActionsResponse, EventsResponse,
    FencingRequest, FencingStatus, HaltRequest, HaltStatus,
};

use super::{AppState, now_ms};
use crate::actions::book::{BookError, Submitted};
use crate::actions::fencing::FencingError;
use crate::auth::Caller;

fn book_error(err: BookError) -> ApiError {
    match err {
        BookError::Conflict(_) | BookError::InvalidTransition { .. } => ApiError::conflict(err.to_string()),
        BookError::NotFound(_) => ApiError::not_found(err.to_string()),
        BookError::Audit(e) => ApiError::unavailable("audit_unavailable", e.to_string()),
    }
}

/// Refuses an action the storage system would refuse a second later (unknown partition or
/// worker, a split key outside the range, a move to its own owner, a non-adjacent merge),
/// against the topology the ops server has; a refusal on a cached copy is re-checked on a fresh
/// read (a split that just ran made partitions the cache does not show). When the storage
/// system cannot be read the action is accepted and the executor reports what happens.
async fn check_against_topology(state: &AppState, spec: &ActionSpec) -> Result<(), ApiError> {
    let Some(cached) = state.executor.topology().await else { return Ok(()) };
    if cached.check_action(spec).is_ok() {
        return Ok(());
    }
    state.executor.forget_topology();
    match state.executor.topology().await {
        Some(fresh) => fresh.check_action(spec).map_err(ApiError::from),
        None => Ok(()),
    }
}

fn fencing_error(err: FencingError) -> ApiError {
    match err {
        FencingError::Stale { .. } => ApiError::new(StatusCode::CONFLICT, "stale_epoch", err.to_string()),
        FencingError::Audit(e) => ApiError::unavailable("audit_unavailable", e.to_string()),
    }
}

/// A newly elected master's term, before it acts: 200 with the status, or 409 `stale_epoch`.
pub async fn announce_epoch(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(request): ApiJson<FencingRequest>,
) -> Result<ApiJson<FencingStatus>, ApiError> {
    request.validate()?;
    let who = format!("{} ({})", caller.name, request.leader);
    state.fencing.admit(request.leader_epoch, &who, None, now_ms()).await.map_err(fencing_error)?;
    fencing_status(State(state)).await
}

/// The newest leadership term seen and the refusals of older ones.
pub async fn fencing_status(State(state): State<AppState>) -> Result<ApiJson<FencingStatus>, ApiError> {
    state.fencing.status().await.map(ApiJson).map_err(|e| ApiError::unavailable("audit_unavailable", e.to_string()))
}

fn parse_id(raw: &str) -> Result<ActionId, ApiError> {
    raw.parse().map_err(|e| ApiError::bad_request(format!("action id {raw:?}: {e}")))
}

pub async fn submit(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(request): ApiJson<ActionRequest>,
) -> Result<(StatusCode, ApiJson<ActionRecord>), ApiError> {
    request.validate_with(&state.config.borrow().limits.text())?;
    if let Some(epoch) = request.leader_epoch {
        state.fencing.admit(epoch, &caller.name, Some(&request.id), now_ms()).await.map_err(fencing_error)?;
    }
    if state.book.get(&request.id).is_none() {
        check_against_topology(&state, &request.spec).await?;
    }
    let record = match state.book.create(request, &caller.name, now_ms()).map_err(book_error)? {
        Submitted::Existing(record) => return Ok((StatusCode::OK, ApiJson(record))),
        Submitted::Created(record) => record,
    };
    if let Err(err) = state.executor.enqueue(&record) {
        state.book.discard(&record.request.id);
        let status = StatusCode::from_u16(err.http_status()).unwrap_or(StatusCode::UNPROCESSABLE_ENTITY);
        let code = if status == StatusCode::TOO_MANY_REQUESTS { "queue_full" } else { "invalid_field" };
        return Err(ApiError::new(status, code, err.to_string()));
    }
    if let Err(err) = state.book.persist_created(&record).await {
        // Queued but not audited: withdraw it rather than run an action with no record.
        state.executor.withdraw(&record);
        let _ = state
            .book
            .transition(
                &record.request.id,
                ActionState::Cancelled,
                "ops-server",
                "audit log unavailable".into(),
                now_ms(),
                |_| {},
            )
            .await;
        return Err(book_error(err));
    }
    // Audited: the dispatcher may start it now.
    state.executor.wake();
    tracing::info!(action = %record.request.id, kind = record.request.spec.kind().as_str(), by = %caller.name, "action accepted");
    Ok((StatusCode::ACCEPTED, ApiJson(record)))
}

pub async fn get(State(state): State<AppState>, Path(id): Path<String>) -> Result<ApiJson<ActionRecord>, ApiError> {
    let id = parse_id(&id)?;
    state.book.get(&id).map(ApiJson).ok_or_else(|| ApiError::not_found(format!("no action {id}")))
}

pub async fn list(
    State(state): State<AppState>,
    query: Result<Query<ActionsQuery>, QueryRejection>,
) -> Result<ApiJson<ActionsResponse>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    Ok(ApiJson(ActionsResponse { actions: state.book.list(query.state) }))
}

pub async fn events(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<ApiJson<EventsResponse>, ApiError> {
    let id = parse_id(&id)?;
    if state.book.get(&id).is_none() {
        return Err(ApiError::not_found(format!("no action {id}")));
    }
    let events =
        state.book.audit().events(&id).await.map_err(|e| ApiError::unavailable("audit_unavailable", e.to_string()))?;
    Ok(ApiJson(EventsResponse { events }))
}

pub async fn cancel(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<ApiJson<ActionRecord>, ApiError> {
    let id = parse_id(&id)?;
    let record = state.book.get(&id).ok_or_else(|| ApiError::not_found(format!("no action {id}")))?;
    match record.state {
        ActionState::Queued => {
            let detail = format!("cancelled by {} while queued", caller.name);
            let record = state
                .book
                .transition(&id, ActionState::Cancelled, &caller.name, detail, now_ms(), |_| {})
                .await
                .map_err(book_error)?;
            state.executor.withdraw(&record);
            Ok(ApiJson(record))
        }
        ActionState::Running if state.executor.cancel_running(&id) => {
            // The executor records the outcome; answer with the record as it is now.
            Ok(ApiJson(state.book.get(&id).unwrap_or(record)))
        }
        other => Err(ApiError::conflict(format!("action {id} is {other:?} and cannot be cancelled"))),
    }
}

fn halt_status_of(state: &AppState) -> HaltStatus {
    let (changed_by, reason) = state.executor.halt_note();
    HaltStatus {
        halted: state.executor.halted(),
        halted_by_api: state.executor.api_halted(),
        halted_by_config: state.config.borrow().executor.halted,
        queued: state.executor.queue_len(),
        changed_by,
        reason,
    }
}

pub async fn halt_status(State(state): State<AppState>) -> ApiJson<HaltStatus> {
    ApiJson(halt_status_of(&state))
}

pub async fn set_halt(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(req): ApiJson<HaltRequest>,
) -> Result<ApiJson<HaltStatus>, ApiError> {
    req.validate_with(&state.config.borrow().limits.text())?;
    let reason = req.reason.filter(|r| !r.trim().is_empty());
    tracing::warn!(by = %caller.name, halted = req.halted, reason = reason.as_deref().unwrap_or(""), "executor halt switch changed");
    state.executor.set_halt(req.halted, &caller.name, reason);
    Ok(ApiJson(halt_status_of(&state)))
}

/// The storage system's topology, read through the ops server (cached for two seconds, dropped
/// when an action succeeds or ends "maybe executed"), with its entity tag: `304 Not Modified`,
/// and no body, when the caller's `If-None-Match` names the tag of this very topology.
pub async fn topology(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    let (topology, tag) = state.executor.tagged_topology().await.ok_or_else(|| {
        ApiError::unavailable("storage_unavailable", "cannot read the topology from the storage system")
    })?;
    let etag = HeaderValue::from_str(&tag).map_err(|e| ApiError::internal(format!("topology tag {tag}: {e}")))?;
    let known = headers
        .get(IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').map(str::trim).any(|candidate| candidate == &*tag || candidate == "*"));
    if known {
        metrics::counter!("lb_ops_topology_reads_total", "reply" => "not_modified").increment(1);
        return Ok((StatusCode::NOT_MODIFIED, [(ETAG, etag)]).into_response());
    }
    metrics::counter!("lb_ops_topology_reads_total", "reply" => "full").increment(1);
    Ok(([(ETAG, etag)], ApiJson(&*topology)).into_response())
}
