//! The storage admin API (protocol: `docs/protocol.md`, "storage admin"):
//!
//! - `GET /v1/topology` → [`Topology`](lb_common::protocol::Topology)
//! - `POST /v1/admin/{split,move,merge,group,reshard}` with an
//!   [`AdminRequest`](lb_common::protocol::AdminRequest) → 202
//!   [`OperationAccepted`](lb_common::protocol::OperationAccepted)
//! - `GET /v1/admin/operations/{id}` → [`Operation`](lb_common::protocol::Operation)
//! - `POST /v1/admin/faults` with a [`FaultRule`](crate::ops::FaultRule) → the pending faults;
//!   `GET /v1/admin/faults` lists them (testbed only: makes operations fail, hang or time out).
//!
//! Invalid actions answer 404 (unknown partition), 422 (invalid for the layout, or a spec whose
//! kind does not match the path) or 409 (partition busy, action id reused) and change nothing.

mod admin;
mod error;

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::routing::{get, post};

use crate::Engine;

/// The engine shared by the HTTP handlers, the ticker and the pusher. Held only for
/// microseconds-long calls (one step of a small cluster, one report, one submit).
pub type SharedEngine = Arc<Mutex<Engine>>;

#[derive(Debug, Clone)]
pub struct AppState {
    pub engine: SharedEngine,
}

/// The admin routes, without the standard layers (tests drive it with `oneshot`).
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/topology", get(admin::topology))
        .route("/v1/admin/split", post(admin::split))
        .route("/v1/admin/move", post(admin::move_partition))
        .route("/v1/admin/merge", post(admin::merge))
        .route("/v1/admin/group", post(admin::group))
        .route("/v1/admin/reshard", post(admin::reshard))
        .route("/v1/admin/operations/{id}", get(admin::operation))
        .route("/v1/admin/faults", post(admin::add_fault).get(admin::faults))
        .with_state(state)
}

/// Locks the engine; a poisoned lock means a handler panicked mid-change, which the standard
/// layers already turned into a 500, and the state is still the last consistent one.
pub fn lock(engine: &SharedEngine) -> std::sync::MutexGuard<'_, Engine> {
    engine.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
