//! What the web console needs beside the read API: its own files at `/console/` (embedded in
//! the binary), the live event stream, and the ops server's halt switch and actions in flight
//! passed on, so a browser talks to the master alone.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use lb_common::clients::OpsClient;
use lb_common::http::auth::{Role, identify, require};
use lb_common::http::{ApiError, ApiJson, ClientError};
use lb_common::protocol::{
    ActionRecord, ActionsQuery, ActionsResponse, HaltRequest, HaltStatus, PassSnapshot, StreamHello, StreamLagged,
};
use rust_embed::Embed;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, broadcast, watch};
use tokio_util::sync::CancellationToken;

use crate::Shared;
use crate::store::RecordEvent;

/// The console's files, from `dashboards/console/`; embedded in every build (`debug-embed`),
/// so a test or a binary run from any directory serves the same bytes.
#[derive(Embed)]
#[folder = "../dashboards/console/"]
struct Assets;

/// A comment line this often keeps proxies from closing an idle stream.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Routes that need no token at all: the console's files and the redirects to them.
pub fn assets_router() -> Router {
    Router::new()
        .route("/", get(|| async { Redirect::permanent("/console/") }))
        .route("/console", get(|| async { Redirect::permanent("/console/") }))
        .route("/console/", get(|headers: HeaderMap| async move { asset("index.html", &headers) }))
        .route(
            "/console/{*path}",
            get(|Path(path): Path<String>, headers: HeaderMap| async move { asset(&path, &headers) }),
        )
}

/// The API routes of this module, under the read-token rule of the rest of `/api/v1`.
/// `max_streams`: `[api] max_streams` at start-up.
pub fn api_router(stop: CancellationToken, max_streams: usize) -> Router<Shared> {
    let streams = Arc::new(Semaphore::new(max_streams));
    Router::new()
        .route("/api/v1/stream", get(move |state: State<Shared>| stream(state, streams.clone(), stop.clone())))
        .route("/api/v1/halt", get(halt_status).post(set_halt))
}

/// One embedded file, with an ETag of its content; `If-None-Match` answers 304. Every file is
/// revalidated (`no-cache`): the names carry no hash, and a revalidation is one small request.
fn asset(path: &str, headers: &HeaderMap) -> Response {
    let Some(file) = Assets::get(path) else {
        return ApiError::not_found(format!("no console file {path:?}")).into_response();
    };
    let etag = format!("\"{}\"", hex(&file.metadata.sha256_hash()[..16]));
    let cache = [(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"))];
    if headers.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok()) == Some(etag.as_str()) {
        return (StatusCode::NOT_MODIFIED, cache, [(header::ETAG, etag)]).into_response();
    }
    let mime = file.metadata.mimetype().to_owned();
    (cache, [(header::ETAG, etag), (header::CONTENT_TYPE, mime)], file.data.into_owned()).into_response()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `GET /api/v1/stream`: server-sent events. `hello` first, then `pass` after every online pass
/// (the snapshot without placement rules), `record` for every proposal, action, evaluation and
/// config reload the master writes, and `lagged` when this reader fell behind and missed records
/// (refetch them). A reader that goes away costs nothing further.
async fn stream(
    State(shared): State<Shared>,
    streams: Arc<Semaphore>,
    stop: CancellationToken,
) -> Result<Response, ApiError> {
    let permit = streams.try_acquire_owned().map_err(|_| {
        let max = shared.config.borrow().api.max_streams;
        ApiError::unavailable(
            "too_many_streams",
            format!("consoles already follow the stream up to [api] max_streams ({max} at start-up)"),
        )
    })?;
    let state = StreamState {
        snapshot: shared.snapshot.clone(),
        records: shared.store.subscribe(),
        hello: true,
        stop,
        _permit: permit,
    };
    let events = futures_util::stream::unfold(state, |mut s| async move {
        let event = s.next().await?;
        Some((Ok::<_, Infallible>(event), s))
    });
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(KEEP_ALIVE)).into_response())
}

struct StreamState {
    snapshot: watch::Receiver<Arc<PassSnapshot>>,
    records: broadcast::Receiver<RecordEvent>,
    hello: bool,
    stop: CancellationToken,
    _permit: OwnedSemaphorePermit,
}

impl StreamState {
    /// The next event; `None` ends the stream (the master is shutting down).
    async fn next(&mut self) -> Option<Event> {
        if std::mem::take(&mut self.hello) {
            let pass = self.snapshot.borrow_and_update().pass;
            let hello = StreamHello { pass, server_ms: crate::now_ms() };
            return Some(json_event("hello", &hello));
        }
        tokio::select! {
            () = self.stop.cancelled() => None,
            changed = self.snapshot.changed() => {
                changed.ok()?;
                let mut snapshot = PassSnapshot::clone(&self.snapshot.borrow_and_update());
                snapshot.placement_rules = None;
                Some(json_event("pass", &snapshot))
            }
            record = self.records.recv() => match record {
                Ok(record) => Some(Event::default().event("record").data(&*record)),
                Err(broadcast::error::RecvError::Lagged(missed)) => Some(json_event("lagged", &StreamLagged { missed })),
                Err(broadcast::error::RecvError::Closed) => None,
            },
        }
    }
}

fn json_event(name: &str, body: &impl serde::Serialize) -> Event {
    Event::default().event(name).json_data(body).unwrap_or_else(|e| Event::default().event("error").data(e.to_string()))
}

/// The client for the ops server on behalf of this request: the caller's own bearer token when
/// it sent one (the ops server then checks and audits the person), else the master's.
fn ops_for(shared: &Shared, headers: &HeaderMap) -> OpsClient {
    let cfg = shared.config.borrow().clone();
    match lb_common::http::auth::presented_token(headers) {
        Some(token) => OpsClient::new(&cfg.ops_server.url, &cfg.client).with_bearer_token(token),
        None => shared.ops_client(),
    }
}

/// The ops server's answer as this API's error: its 401/403/404/409/422 as they were (the
/// message says it was the ops server), anything else a 502; no answer a 503.
fn ops_error(err: ClientError) -> ApiError {
    match &err {
        ClientError::Status { status, body, .. } => {
            let status = match *status {
                s @ (StatusCode::UNAUTHORIZED
                | StatusCode::FORBIDDEN
                | StatusCode::NOT_FOUND
                | StatusCode::CONFLICT
                | StatusCode::UNPROCESSABLE_ENTITY) => s,
                _ => StatusCode::BAD_GATEWAY,
            };
            ApiError::new(status, "ops_server_refused", format!("the ops server refused: {}", body.error))
        }
        _ => ApiError::unavailable("ops_server_unavailable", err.to_string()),
    }
}

/// `GET /api/v1/halt`: the ops server's halt switch (`GET /v1/halt`).
async fn halt_status(State(shared): State<Shared>, headers: HeaderMap) -> Result<ApiJson<HaltStatus>, ApiError> {
    ops_for(&shared, &headers).halt_status().await.map(ApiJson).map_err(ops_error)
}

/// `POST /api/v1/halt`: halts or resumes the ops server's executor. Needs `operator` here, and
/// the ops server checks the same token again (it must know it too when it has tokens).
async fn set_halt(
    State(shared): State<Shared>,
    headers: HeaderMap,
    ApiJson(request): ApiJson<HaltRequest>,
) -> Result<ApiJson<HaltStatus>, ApiError> {
    let cfg = shared.config.borrow().clone();
    let caller = identify(&cfg.auth, &headers)?;
    require(&caller, &[Role::Operator], "halt or resume the executor")?;
    request.validate_with(&lb_common::protocol::TextLimits::default())?;
    tracing::warn!(by = %caller.name, halted = request.halted, "halt switch changed through the master");
    // The ops server audits the token it sees (none when its auth is off): the reason says who.
    let by = format!("by {} through the master", caller.name);
    // Any ops server takes 1 KiB, whatever its configured `max_reason_bytes`: the operator's
    // words are cut so that who asked still fits.
    let room = lb_common::protocol::limits::MIN_REASON_BYTES.saturating_sub(by.len() + 3);
    let reason =
        Some(request.reason.map_or(by.clone(), |r| format!("{} ({by})", lb_common::protocol::cut_text(&r, room))));
    ops_for(&shared, &headers).set_halt(request.halted, reason).await.map(ApiJson).map_err(ops_error)
}

/// `GET /api/v1/actions`: the ops server's actions (`GET /v1/actions`), newest first, at most
/// `[api] max_actions_listed`; `?state=running` for those in flight.
pub async fn actions(
    State(shared): State<Shared>,
    headers: HeaderMap,
    q: Result<Query<ActionsQuery>, QueryRejection>,
) -> Result<ApiJson<ActionsResponse>, ApiError> {
    let Query(q) = q.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let mut actions: Vec<ActionRecord> = ops_for(&shared, &headers).actions(q.state).await.map_err(ops_error)?;
    actions.sort_by_key(|a| std::cmp::Reverse(a.created_at_ms));
    actions.truncate(shared.config.borrow().api.max_actions_listed);
    Ok(ApiJson(ActionsResponse { actions }))
}
