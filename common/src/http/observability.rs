//! `/metrics`, `/live`, `/ready` and `/v1/config/status`, merged into every server's router
//! outside any auth.

use std::sync::{Arc, RwLock};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;

use super::ApiError;
use crate::config::watch::{ReloadStatus, SharedReloadStatus};

/// A condition asked on every readiness probe: `Some(why)` while the process cannot do its work
/// (the agent's store refusing writes).
pub type ReadinessCheck = Arc<dyn Fn() -> Option<String> + Send + Sync>;

/// Whether the process should receive traffic, and if not, why. Starts not ready.
#[derive(Clone)]
pub struct Readiness {
    reason: Arc<RwLock<Option<String>>>,
    checks: Arc<RwLock<Vec<ReadinessCheck>>>,
}

impl std::fmt::Debug for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Readiness").field("reason", &self.not_ready_reason()).finish_non_exhaustive()
    }
}

impl Default for Readiness {
    fn default() -> Self {
        Self::new()
    }
}

impl Readiness {
    pub fn new() -> Self {
        Self { reason: Arc::new(RwLock::new(Some("starting".to_owned()))), checks: Arc::default() }
    }

    /// Adds a condition every probe asks once the process is otherwise ready.
    pub fn add_check(&self, check: ReadinessCheck) {
        self.checks.write().expect("readiness lock is never poisoned").push(check);
    }

    pub fn set_ready(&self) {
        *self.reason.write().expect("readiness lock is never poisoned") = None;
    }

    pub fn set_not_ready(&self, reason: impl Into<String>) {
        *self.reason.write().expect("readiness lock is never poisoned") = Some(reason.into());
    }

    /// `None` when ready, else why not.
    pub fn not_ready_reason(&self) -> Option<String> {
        if let Some(reason) = self.reason.read().expect("readiness lock is never poisoned").clone() {
            return Some(reason);
        }
        self.checks.read().expect("readiness lock is never poisoned").iter().find_map(|check| check())
    }
}

#[derive(Clone)]
struct ObservabilityState {
    metrics: PrometheusHandle,
    readiness: Readiness,
    config_status: Option<SharedReloadStatus>,
}

/// The observability routes. `config_status` comes from the binary's config watcher.
pub fn observability_router(
    metrics: PrometheusHandle,
    readiness: Readiness,
    config_status: Option<SharedReloadStatus>,
) -> Router {
    Router::new()
        .route("/metrics", get(render_metrics))
        .route("/live", get(|| async { "ok\n" }))
        .route("/ready", get(ready))
        .route("/v1/config/status", get(config_status_handler))
        .with_state(ObservabilityState { metrics, readiness, config_status })
}

async fn render_metrics(State(state): State<ObservabilityState>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], state.metrics.render())
}

async fn ready(State(state): State<ObservabilityState>) -> Result<&'static str, ApiError> {
    match state.readiness.not_ready_reason() {
        None => Ok("ready\n"),
        Some(reason) => Err(ApiError::unavailable("not_ready", reason)),
    }
}

async fn config_status_handler(State(state): State<ObservabilityState>) -> Result<axum::Json<ReloadStatus>, ApiError> {
    let shared = state
        .config_status
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, "no_config", "this process runs without a config file"))?;
    let status = shared.read().expect("reload status lock is never poisoned").clone();
    Ok(axum::Json(status))
}
