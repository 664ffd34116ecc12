//! `POST /v1/report`: validate, store (group commit), acknowledge.

use axum::extract::State;
use axum::http::StatusCode;
use lb_common::http::{ApiError, ApiJson};
use lb_common::protocol::{Report, ReportAck};

use super::{AppState, store_error};

/// A worker's clock may run a little ahead of the agent's; a report dated further ahead (2200,
/// `i64::MAX`) is a broken clock, and stored it would sort after every real sample. The
/// master's table refuses samples this far ahead too.
pub const MAX_FUTURE_SKEW_MS: i64 = 10_000;

pub async fn report(
    State(state): State<AppState>,
    ApiJson(report): ApiJson<Report>,
) -> Result<ApiJson<ReportAck>, ApiError> {
    if let Err(err) = report.validate() {
        metrics::counter!("lb_agent_reports_total", "outcome" => "invalid").increment(1);
        return Err(err.into());
    }
    let now_ms = chrono::Utc::now().timestamp_millis();
    if report.timestamp_ms > now_ms.saturating_add(MAX_FUTURE_SKEW_MS) {
        metrics::counter!("lb_agent_reports_total", "outcome" => "invalid").increment(1);
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            format!(
                "timestamp_ms = {}: more than {} s ahead of this agent's clock ({now_ms}); is the worker's clock right?",
                report.timestamp_ms,
                MAX_FUTURE_SKEW_MS / 1000
            ),
        ));
    }
    // As old as the raw retention: the next maintenance would delete it at once, and pullers
    // that are past its time would never see it.
    let retention_ms = i64::try_from(state.config.borrow().store.raw_retention().as_millis()).unwrap_or(i64::MAX);
    if report.timestamp_ms < now_ms.saturating_sub(retention_ms) {
        metrics::counter!("lb_agent_reports_total", "outcome" => "invalid").increment(1);
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            format!(
                "timestamp_ms = {}: more than store.raw_retention_hours ({} h) before this agent's clock ({now_ms}); \
                 it would expire at once",
                report.timestamp_ms,
                retention_ms / 3_600_000
            ),
        )
        .with_field("timestamp_ms"));
    }
    let expected = state.config.borrow().worker_id.clone();
    if report.worker_id != expected {
        metrics::counter!("lb_agent_reports_total", "outcome" => "invalid").increment(1);
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            format!("worker_id = {}: this agent serves worker {expected}", report.worker_id),
        ));
    }
    let (worker_id, seq, partitions) = (report.worker_id.clone(), report.seq, report.partitions.len() as u64);
    let outcome = state.store.write_report(report).await.map_err(store_error)?;
    if outcome.duplicate {
        metrics::counter!("lb_agent_reports_total", "outcome" => "duplicate").increment(1);
    } else {
        metrics::counter!("lb_agent_reports_total", "outcome" => "accepted").increment(1);
        metrics::counter!("lb_agent_partition_stats_total").increment(partitions);
    }
    Ok(ApiJson(ReportAck { worker_id, seq, duplicate: outcome.duplicate }))
}
