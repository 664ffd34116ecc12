//! `GET /v1/samples` and `GET /v1/rollups`.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use lb_common::http::{ApiError, ApiJson};
use lb_common::protocol::{RollupsQuery, RollupsResponse, SamplesQuery, SamplesResponse};

use super::{AppState, store_error};

/// Longest rollup range one request may ask for: 400 days, more than any retention.
const MAX_ROLLUP_RANGE_MS: i64 = 400 * 86_400_000;

pub async fn samples(
    State(state): State<AppState>,
    query: Result<Query<SamplesQuery>, QueryRejection>,
) -> Result<ApiJson<SamplesResponse>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let (worker_id, max_page) = {
        let config = state.config.borrow();
        (config.worker_id.clone(), config.serve.max_samples_per_page as usize)
    };
    let limit = query.limit.map_or(max_page, |l| (l as usize).clamp(1, max_page));
    let page = state.store.samples(query.after, limit).await.map_err(store_error)?;
    metrics::counter!("lb_agent_samples_served_total").increment(page.samples.len() as u64);
    if page.gap {
        metrics::counter!("lb_agent_sample_gaps_total").increment(1);
    }
    Ok(ApiJson(SamplesResponse {
        worker_id,
        samples: page.samples,
        next_cursor: page.next_cursor,
        gap: page.gap,
        more: page.more,
    }))
}

pub async fn rollups(
    State(state): State<AppState>,
    query: Result<Query<RollupsQuery>, QueryRejection>,
) -> Result<ApiJson<RollupsResponse>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    if query.from_ms > query.to_ms || query.to_ms.saturating_sub(query.from_ms) > MAX_ROLLUP_RANGE_MS {
        return Err(ApiError::new(
            axum::http::StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            format!("to_ms = {}: must be >= from_ms and at most 400 days after it", query.to_ms),
        ));
    }
    let rollups = state.store.rollups(query.from_ms, query.to_ms).await.map_err(store_error)?;
    let worker_id = state.config.borrow().worker_id.clone();
    Ok(ApiJson(RollupsResponse { worker_id, rollups }))
}
