//! The agent's HTTP API: `POST /v1/report`, `GET /v1/samples`, `GET /v1/rollups`, plus the
//! shared observability routes.

mod ingest;
mod serve;

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};
use lb_common::config::watch::SharedReloadStatus;
use lb_common::http::{ApiError, Readiness, observability_router, with_standard_layers};
use tokio::sync::watch;

use crate::config::AgentConfig;
use crate::store::{MetricStore, StoreError};

#[derive(Debug, Clone)]
pub struct AppState {
    pub store: Arc<MetricStore>,
    pub config: watch::Receiver<Arc<AgentConfig>>,
}

/// The full router, layers included.
pub fn router(state: AppState, readiness: Readiness, config_status: Option<SharedReloadStatus>) -> Router {
    let http = state.config.borrow().http.clone();
    // The bulk replies go out zstd-compressed to a caller that accepts it (lb's clients do):
    // a second of a Valkey node's changed slots is ~200 KB of repetitive JSON.
    let bulk = Router::new()
        .route("/v1/samples", get(serve::samples))
        .route("/v1/rollups", get(serve::rollups))
        .layer(tower_http::compression::CompressionLayer::new());
    let api = Router::new()
        .route("/v1/report", post(ingest::report))
        .merge(bulk)
        .with_state(state)
        .merge(observability_router(lb_common::telemetry::metrics_handle(), readiness, config_status));
    with_standard_layers(api, &http)
}

/// A store failure is the agent's problem, not the caller's: 503, so the worker retries.
fn store_error(err: StoreError) -> ApiError {
    tracing::warn!(error = %err, "store unavailable");
    ApiError::unavailable("store_unavailable", err.to_string())
}
