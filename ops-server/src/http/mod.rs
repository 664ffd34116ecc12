//! The ops server's HTTP API. Everything under `/v1` except the observability routes goes
//! through authentication and the rate limit.

mod actions;
mod agents;

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};
use lb_common::config::watch::SharedReloadStatus;
use lb_common::http::{HttpClient, Readiness, observability_router, with_standard_layers};
use tokio::sync::watch;

use crate::actions::book::ActionBook;
use crate::actions::executor::Executor;
use crate::auth::RateLimiter;
use crate::config::OpsServerConfig;
use crate::registry::Registry;

#[derive(Debug, Clone)]
pub struct AppState {
    pub config: watch::Receiver<Arc<OpsServerConfig>>,
    pub registry: Arc<Registry>,
    pub book: Arc<ActionBook>,
    pub fencing: Arc<crate::actions::fencing::Fencing>,
    pub executor: Arc<Executor>,
    pub agents_client: HttpClient,
    pub rate_limiter: Arc<RateLimiter>,
}

pub fn router(state: AppState, readiness: Readiness, config_status: Option<SharedReloadStatus>) -> Router {
    let http = state.config.borrow().http.clone();
    let api = Router::new()
        .route("/v1/agents", get(agents::list))
        .route("/v1/agents/register", post(agents::register))
        .route("/v1/agents/heartbeat", post(agents::heartbeat))
        .route("/v1/collect", post(agents::collect))
        .route("/v1/collect/rollups", post(agents::collect_rollups))
        .route("/v1/actions", post(actions::submit).get(actions::list))
        .route("/v1/actions/{id}", get(actions::get))
        .route("/v1/actions/{id}/events", get(actions::events))
        .route("/v1/actions/{id}/cancel", post(actions::cancel))
        .route("/v1/fencing", get(actions::fencing_status).post(actions::announce_epoch))
        .route("/v1/halt", get(actions::halt_status).post(actions::set_halt))
        .route("/v1/topology", get(actions::topology))
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), crate::auth::authenticate))
        .with_state(state)
        .merge(observability_router(lb_common::telemetry::metrics_handle(), readiness, config_status));
    with_standard_layers(api, &http)
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}
