//! The master's read API under `/api/v1`. Every reply that aggregates over time states its
//! averaging window (`window_secs`, or `step_ms` for heatmaps and histories). Table queries run
//! on a blocking thread: a top-N over 100k partitions takes milliseconds, too long for an async
//! task.
//!
//! Each handler carries its OpenAPI doc (`#[utoipa::path]`: method, path, parameters, body,
//! replies, auth) and [`api_routes`] registers it from there, so a path is written once; the
//! document is assembled in [`openapi`] and served at `GET /api/v1/openapi.json`.

pub mod console;
pub mod openapi;

use std::time::Duration;

use axum::Router;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::http::StatusCode;
use axum::routing::get;
use lb_common::config::watch::SharedReloadStatus;
use lb_common::http::auth::{Role, identify, require};
use lb_common::http::{ApiError, ApiJson, Readiness, observability_router, with_standard_layers};
use lb_common::ids::{ActionId, PartitionId};
use lb_common::protocol::{
    ActionRecord, ClusterHistory, ClusterHistoryQuery, ErrorBody, HeatmapQuery, HistoryQuery, LeadershipStatus,
    ManualActionReply, ManualActionRequest, OfflineFindings, OfflinePassRequested, OverviewQuery, PartitionsQuery,
    PassSnapshot, Pending, PendingResponse, PlacementRules, Policy, PolicyStatus, RecordsQuery, RecordsResponse,
    StoredRecord, TopQuery, Topology, WindowQuery,
};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::Shared;
use crate::collector::CollectorStatus;
use crate::executor::ApprovalError;
use crate::online::{ManualError, Request};
use crate::store::RecordKind;
use crate::table::{
    ClusterOverview, Freshness, Heatmap, History, MemoryUsage, Metric, MetricsTable, PartitionRow, TableError, TopN,
    WorkerRow,
};

/// 10 s: long enough to smooth a 1 s report's noise, short enough to show a hotspot now.
pub const DEFAULT_WINDOW_SECS: u64 = 10;

/// `stop` ends the console's event streams, so a graceful shutdown does not wait on them.
pub fn router(
    shared: Shared,
    readiness: Readiness,
    config_status: Option<SharedReloadStatus>,
    stop: tokio_util::sync::CancellationToken,
) -> Router {
    let http = shared.config.borrow().http.clone();
    let max_streams = shared.config.borrow().api.max_streams;
    let metrics = lb_common::telemetry::metrics_handle();
    let (api, _doc) = api_routes().split_for_parts();
    let api = api
        .route("/api/v1/actions", get(console::actions))
        .merge(console::api_router(stop, max_streams))
        .route_layer(axum::middleware::from_fn_with_state(shared.clone(), read_access))
        .route_layer(axum::middleware::from_fn_with_state(shared.clone(), leader_only))
        .with_state(shared)
        .merge(console::assets_router())
        .merge(observability_router(metrics, readiness, config_status));
    with_standard_layers(api, &http)
}

/// With `auth.reads_need_token`, every read of `/api/v1` needs a token of any role (writes check
/// their role in their handler).
async fn read_access(
    State(shared): State<Shared>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let auth = shared.config.borrow().auth.clone();
    if auth.reads_need_token
        && request.method() == axum::http::Method::GET
        && let Err(e) = identify(&auth, request.headers())
    {
        return axum::response::IntoResponse::into_response(e);
    }
    next.run(request).await
}

/// Names the leader in a standby's refusal of a write (also in the error message).
pub const LEADER_HEADER: &str = "lb-leader";

/// Writes that act — approving or rejecting a proposal, an action by hand, an offline pass on
/// demand (only the leader archives and runs passes) — are refused by a
/// standby: 503 `not_leader` naming the leader's URL in the message and in the `lb-leader` header
/// (not forwarded: the caller retries at the leader, and a standby never sends what it was not
/// elected to send). Reads and the ops server's halt switch (`/api/v1/halt`, an SRE's brake that
/// must work from any master) are served by every master.
async fn leader_only(
    State(shared): State<Shared>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let path = request.uri().path();
    let acts = request.method() == axum::http::Method::POST
        && (path.starts_with("/api/v1/proposals/") || path == "/api/v1/actions" || path == "/api/v1/offline/pass");
    if acts {
        let status = shared.leadership.status();
        if !status.leader {
            let leader = status.leader_address.unwrap_or_default();
            let message = if leader.is_empty() {
                "this master is a standby and no master leads now; retry shortly".to_owned()
            } else {
                format!("this master is a standby; send this to the leader at {leader}")
            };
            let mut response =
                axum::response::IntoResponse::into_response(ApiError::unavailable("not_leader", message));
            if let Ok(value) = axum::http::HeaderValue::from_str(&leader)
                && !leader.is_empty()
            {
                response.headers_mut().insert(LEADER_HEADER, value);
            }
            return response;
        }
    }
    next.run(request).await
}

/// Every route under `/api/v1` with its doc. A new route is a handler with a `#[utoipa::path]`
/// and one `.routes(routes!(handler))` line here (one handler per line: `routes!` with several
/// handlers of different paths would mount each on every path).
pub fn api_routes() -> OpenApiRouter<Shared> {
    OpenApiRouter::with_openapi(openapi::base())
        .routes(routes!(overview))
        .routes(routes!(workers))
        .routes(routes!(partitions))
        .routes(routes!(history))
        .routes(routes!(top))
        .routes(routes!(heatmap))
        .routes(routes!(cluster_history))
        .routes(routes!(topology))
        .routes(routes!(collector))
        .routes(routes!(memory))
        .routes(routes!(records))
        .routes(routes!(record))
        .routes(routes!(pending))
        .routes(routes!(placement_rules))
        .routes(routes!(pass_snapshot))
        .routes(routes!(leadership))
        .routes(routes!(offline))
        .routes(routes!(offline_pass))
        .routes(routes!(approve))
        .routes(routes!(reject))
        .routes(routes!(manual_action))
        .routes(routes!(policy))
        .routes(routes!(openapi::document_json))
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn table_error(err: TableError) -> ApiError {
    match err {
        TableError::UnknownPartition(_) | TableError::UnknownWorker(_) => ApiError::not_found(err.to_string()),
        other => ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_query", other.to_string()),
    }
}

/// Runs a table query on a blocking thread under the read lock.
async fn query<T: Send + 'static>(
    shared: &Shared,
    f: impl FnOnce(&MetricsTable) -> Result<T, TableError> + Send + 'static,
) -> Result<T, ApiError> {
    let table = shared.table.clone();
    tokio::task::spawn_blocking(move || f(&table.read().expect("table lock is never poisoned")))
        .await
        .map_err(ApiError::internal)?
        .map_err(table_error)
}

fn bad_query(e: QueryRejection) -> ApiError {
    ApiError::bad_request(e.body_text())
}

fn window(secs: Option<u64>) -> Duration {
    Duration::from_secs(secs.unwrap_or(DEFAULT_WINDOW_SECS).max(1))
}

/// Per-worker load of one metric and its spread (max, mean, max/mean, CV).
#[utoipa::path(
    get, path = "/api/v1/overview", tag = "load",
    params(OverviewQuery),
    responses(
        (status = 200, body = ClusterOverview, description = "per-worker load over the window"),
        (status = 400, body = ErrorBody,
            description = "`bad_request`: a malformed query (unknown field, unknown metric, not a number)"),
        (status = 422, body = ErrorBody,
            description = "`invalid_query`: the table cannot answer it (a window longer than the history, a metric \
                           this view does not keep)"),
    )
)]
async fn overview(
    State(shared): State<Shared>,
    q: Result<Query<OverviewQuery>, QueryRejection>,
) -> Result<ApiJson<ClusterOverview>, ApiError> {
    let Query(q) = q.map_err(bad_query)?;
    let (metric, last, now) = (q.metric.unwrap_or(Metric::Ops), window(q.window_secs), now_ms());
    let stale_after = shared.config.borrow().collector.stale_after_ms as i64;
    let freshness = freshness(&shared, now, stale_after);
    query(&shared, move |t| t.cluster_overview(metric, last, now, freshness)).await.map(ApiJson)
}

/// Workers' freshness as of the collector's newest round ([`Freshness::as_of_round`]).
fn freshness(shared: &Shared, now_ms: i64, stale_after_ms: i64) -> Freshness {
    let round = shared.collector.read().expect("collector status lock is never poisoned").last_success_ms;
    Freshness::as_of_round(round, now_ms, stale_after_ms)
}

/// One row per worker: capacity, health, load figures and how much of the window it reported.
#[utoipa::path(
    get, path = "/api/v1/workers", tag = "load",
    params(WindowQuery),
    responses(
        (status = 200, body = Vec<WorkerRow>, description = "one row per worker"),
        (status = 400, body = ErrorBody,
            description = "`bad_request`: a malformed query (unknown field, not a number)"),
        (status = 422, body = ErrorBody, description = "`invalid_query`: a window longer than the table's history"),
    )
)]
async fn workers(
    State(shared): State<Shared>,
    q: Result<Query<WindowQuery>, QueryRejection>,
) -> Result<ApiJson<Vec<WorkerRow>>, ApiError> {
    let Query(q) = q.map_err(bad_query)?;
    let (last, now) = (window(q.window_secs), now_ms());
    query(&shared, move |t| t.workers(last, now)).await.map(ApiJson)
}

/// One row per partition (live ones unless `include_gone`), filtered by the query.
#[utoipa::path(
    get, path = "/api/v1/partitions", tag = "load",
    params(PartitionsQuery),
    responses(
        (status = 200, body = Vec<PartitionRow>, description = "one row per matching partition"),
        (status = 400, body = ErrorBody,
            description = "`bad_request`: a malformed query (unknown field, not a number)"),
        (status = 422, body = ErrorBody,
            description = "`invalid_query`: `min_ops_per_sec` not finite, or a window longer than the table's history"),
    )
)]
async fn partitions(
    State(shared): State<Shared>,
    q: Result<Query<PartitionsQuery>, QueryRejection>,
) -> Result<ApiJson<Vec<PartitionRow>>, ApiError> {
    let Query(q) = q.map_err(bad_query)?;
    if q.min_ops_per_sec.is_some_and(|m| !m.is_finite()) {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_query",
            "min_ops_per_sec must be a finite number",
        ));
    }
    let (last, now) = (window(q.window_secs), now_ms());
    let mut rows = query(&shared, move |t| t.partitions(last, now)).await?;
    rows.retain(|r| {
        q.tenant.as_ref().is_none_or(|t| &r.tenant == t)
            && q.table.as_ref().is_none_or(|t| &r.table == t)
            && q.worker.as_ref().is_none_or(|w| r.owner.as_ref() == Some(w))
            && q.min_ops_per_sec.is_none_or(|m| r.ops_per_sec >= m)
            && (q.include_gone.unwrap_or(false) || !r.gone)
    });
    Ok(ApiJson(rows))
}

/// The `n` highest partitions (or workers, tables, tenants) by one metric, highest first.
#[utoipa::path(
    get, path = "/api/v1/top", tag = "load",
    params(TopQuery),
    responses(
        (status = 200, body = TopN, description = "the highest `n`, with the window"),
        (status = 400, body = ErrorBody,
            description = "`bad_request`: a malformed query (unknown field, unknown metric, not a number)"),
        (status = 422, body = ErrorBody,
            description = "`invalid_query`: the table cannot answer it (a window longer than the history, a metric \
                           this view does not keep)"),
    )
)]
async fn top(
    State(shared): State<Shared>,
    q: Result<Query<TopQuery>, QueryRejection>,
) -> Result<ApiJson<TopN>, ApiError> {
    let Query(q) = q.map_err(bad_query)?;
    let metric = q.metric.unwrap_or(Metric::Ops);
    let n = q.n.unwrap_or(100).clamp(1, shared.config.borrow().api.max_top_n);
    let (group_by, last, now) = (q.group_by.unwrap_or_default(), window(q.window_secs), now_ms());
    query(&shared, move |t| t.top_n(metric, n, group_by, last, now)).await.map(ApiJson)
}

/// A time × key-range grid of one table's load.
#[utoipa::path(
    get, path = "/api/v1/heatmap", tag = "load",
    params(HeatmapQuery),
    responses(
        (status = 200, body = Heatmap, description = "the grid, row-major"),
        (status = 400, body = ErrorBody,
            description = "`bad_request`: a malformed query, or `tenant` or `table` missing"),
        (status = 422, body = ErrorBody,
            description = "`invalid_query`: a step or span the table cannot answer, a grid too large, an unknown \
                           table, or a metric without partition history"),
    )
)]
async fn heatmap(
    State(shared): State<Shared>,
    q: Result<Query<HeatmapQuery>, QueryRejection>,
) -> Result<ApiJson<Heatmap>, ApiError> {
    let Query(q) = q.map_err(bad_query)?;
    let now = now_ms();
    let to = q.to_ms.unwrap_or(now);
    let from = q.from_ms.unwrap_or(to - 3_600_000);
    let (metric, step, buckets) =
        (q.metric.unwrap_or(Metric::Ops), q.step_ms.unwrap_or(60_000), q.buckets.unwrap_or(64));
    let limits = shared.config.borrow().api.clone();
    query(&shared, move |t| t.heatmap(&q.tenant, &q.table, metric, from, to, step, buckets, &limits)).await.map(ApiJson)
}

/// The spread of worker load over time: one overview (max, mean, max/mean, CV) per step.
#[utoipa::path(
    get, path = "/api/v1/cluster/history", tag = "load",
    params(ClusterHistoryQuery),
    responses(
        (status = 200, body = ClusterHistory, description = "one point per step, oldest first"),
        (status = 400, body = ErrorBody,
            description = "`bad_request`: a malformed query (unknown field, unknown metric, not a number)"),
        (status = 422, body = ErrorBody,
            description = "`invalid_query`: `step_ms` outside 1000..=86400000, `to_ms` not after `from_ms`, a span \
                           longer than the history or of more steps than `[api] max_history_points` (1,440)"),
    )
)]
async fn cluster_history(
    State(shared): State<Shared>,
    q: Result<Query<ClusterHistoryQuery>, QueryRejection>,
) -> Result<ApiJson<ClusterHistory>, ApiError> {
    let Query(q) = q.map_err(bad_query)?;
    let to = q.to_ms.unwrap_or_else(now_ms);
    let from = q.from_ms.unwrap_or(to.saturating_sub(3_600_000));
    let (metric, step) = (q.metric.unwrap_or(Metric::Ops), q.step_ms.unwrap_or(60_000));
    let (stale_after, max_points) = {
        let c = shared.config.borrow();
        (c.collector.stale_after_ms as i64, c.api.max_history_points)
    };
    let freshness = freshness(&shared, now_ms(), stale_after);
    query(&shared, move |t| t.cluster_history(metric, from, to, step, freshness, max_points)).await.map(ApiJson)
}

/// One partition's history of one metric, reaching into its parents' after a split or merge.
#[utoipa::path(
    get, path = "/api/v1/partitions/{id}/history", tag = "load",
    params(("id" = PartitionId, Path, description = "the partition"), HistoryQuery),
    responses(
        (status = 200, body = History, description = "the points, oldest first"),
        (status = 400, body = ErrorBody, description = "`bad_request`: a malformed query or partition id"),
        (status = 404, body = ErrorBody, description = "`not_found`: the table has no such partition"),
        (status = 422, body = ErrorBody,
            description = "`invalid_query`: `to_ms` before `from_ms`, a span too long, or a metric without partition \
                           history"),
    )
)]
async fn history(
    State(shared): State<Shared>,
    Path(id): Path<String>,
    q: Result<Query<HistoryQuery>, QueryRejection>,
) -> Result<ApiJson<History>, ApiError> {
    let Query(q) = q.map_err(bad_query)?;
    let id: PartitionId = id.parse().map_err(|e| ApiError::bad_request(format!("partition id: {e}")))?;
    let to = q.to_ms.unwrap_or_else(now_ms);
    let from = q.from_ms.unwrap_or(to - 3_600_000);
    let metric = q.metric.unwrap_or(Metric::Ops);
    query(&shared, move |t| t.history(&id, metric, from, to)).await.map(ApiJson)
}

/// The storage layout as last read through the ops server.
#[utoipa::path(
    get, path = "/api/v1/topology", tag = "cluster",
    responses(
        (status = 200, body = Topology, description = "the last topology read"),
        (status = 503, body = ErrorBody, description = "`no_topology`: not read from the ops server yet"),
    )
)]
async fn topology(State(shared): State<Shared>) -> Result<ApiJson<Topology>, ApiError> {
    let topology = shared.topology.read().expect("topology lock is never poisoned").clone();
    topology
        .map(|t| ApiJson(Topology::clone(&t)))
        .ok_or_else(|| ApiError::unavailable("no_topology", "the topology has not been read from the ops server yet"))
}

/// How collection from the agents is going: per agent its cursor, status, gaps and lag.
#[utoipa::path(
    get, path = "/api/v1/collector", tag = "cluster",
    responses((status = 200, body = CollectorStatus, description = "the collector's status"))
)]
async fn collector(State(shared): State<Shared>) -> ApiJson<CollectorStatus> {
    ApiJson(shared.collector.read().expect("collector status lock is never poisoned").clone())
}

/// Memory the MetricsTable holds, measured from capacities and sizes.
#[utoipa::path(
    get, path = "/api/v1/table/memory", tag = "load",
    responses((status = 200, body = MemoryUsage, description = "bytes held"))
)]
async fn memory(State(shared): State<Shared>) -> Result<ApiJson<MemoryUsage>, ApiError> {
    query(&shared, |t| Ok(t.memory_usage())).await.map(ApiJson)
}

/// ResultDataStore records of one kind, newest first.
#[utoipa::path(
    get, path = "/api/v1/records/{kind}", tag = "records",
    params(("kind" = RecordKind, Path, description = "the record kind; it decides the body type"), RecordsQuery),
    responses(
        (status = 200, body = RecordsResponse<openapi::RecordBody>, description = "the records, newest first"),
        (status = 400, body = ErrorBody, description = "`bad_request`: a malformed query"),
        (status = 404, body = ErrorBody, description = "`not_found`: no such record kind"),
        (status = 503, body = ErrorBody, description = "`store_unavailable`: the result store could not be read"),
    )
)]
async fn records(
    State(shared): State<Shared>,
    Path(kind): Path<String>,
    q: Result<Query<RecordsQuery>, QueryRejection>,
) -> Result<ApiJson<RecordsResponse<serde_json::Value>>, ApiError> {
    let Query(q) = q.map_err(bad_query)?;
    let kind = record_kind(&kind)?;
    let max = shared.config.borrow().api.max_records;
    let records = shared
        .store
        .list(kind, q.since_ms.unwrap_or(0), q.limit.unwrap_or(100).min(max))
        .await
        .map_err(|e| ApiError::unavailable("store_unavailable", e.to_string()))?;
    Ok(ApiJson(RecordsResponse { records }))
}

fn record_kind(kind: &str) -> Result<RecordKind, ApiError> {
    RecordKind::parse(kind).ok_or_else(|| ApiError::not_found(format!("no record kind {kind:?}")))
}

/// One ResultDataStore record.
#[utoipa::path(
    get, path = "/api/v1/records/{kind}/{key}", tag = "records",
    params(
        ("kind" = RecordKind, Path, description = "the record kind; it decides the body type"),
        ("key" = String, Path, description = "the record's key: a pass's time in epoch ms, an action id, ..."),
    ),
    responses(
        (status = 200, body = StoredRecord<openapi::RecordBody>, description = "the record"),
        (status = 404, body = ErrorBody, description = "`not_found`: no such record kind, or no record with that key"),
        (status = 503, body = ErrorBody, description = "`store_unavailable`: the result store could not be read"),
    )
)]
async fn record(
    State(shared): State<Shared>,
    Path((kind, key)): Path<(String, String)>,
) -> Result<ApiJson<StoredRecord<serde_json::Value>>, ApiError> {
    let kind = record_kind(&kind)?;
    shared
        .store
        .get(kind, &key)
        .await
        .map_err(|e| ApiError::unavailable("store_unavailable", e.to_string()))?
        .map(ApiJson)
        .ok_or_else(|| ApiError::not_found(format!("no {} record {key:?}", kind.as_str())))
}

/// Dry-run proposals waiting for approval.
#[utoipa::path(
    get, path = "/api/v1/proposals/pending", tag = "decisions",
    responses((status = 200, body = PendingResponse, description = "the pending proposals"))
)]
async fn pending(State(shared): State<Shared>) -> ApiJson<PendingResponse> {
    ApiJson(PendingResponse { proposals: shared.snapshot.borrow().pending.clone() })
}

/// Approves a dry-run proposal: the online loop submits it at its next pass (within a second
/// by default) and this answers with the ops server's record. Needs the `operator` role.
#[utoipa::path(
    post, path = "/api/v1/proposals/{id}/approve", tag = "decisions",
    security(("bearer" = ["operator"])),
    params(("id" = ActionId, Path, description = "the pending proposal's id: the action id it gets")),
    responses(
        (status = 200, body = ActionRecord, description = "the ops server's record of the submitted action"),
        (status = 401, body = ErrorBody,
            description = "`unauthorized`: no bearer token, or an unknown one (tokens are configured)"),
        (status = 403, body = ErrorBody, description = "`forbidden`: the token's role is not `operator`"),
        (status = 404, body = ErrorBody,
            description = "`not_found`: no pending proposal with that id (approved already, or no longer proposed)"),
        (status = 409, body = ErrorBody, description = "`conflict`: the ops server refused the action"),
        (status = 503, body = ErrorBody,
            description = "`requests_busy`: too many requests wait for the online loop; `online_loop_unavailable`: no \
                           pass answered in time"),
    )
)]
async fn approve(
    State(shared): State<Shared>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<ApiJson<ActionRecord>, ApiError> {
    let cfg = shared.config.borrow().clone();
    let caller = identify(&cfg.auth, &headers)?;
    require(&caller, &[Role::Operator], "approve proposals")?;
    let (reply, answer) = tokio::sync::oneshot::channel();
    send(&shared, Request::Approve { proposal_id: id, approved_by: caller.name, reply })?;
    approval_reply(wait_for_pass(&cfg, answer).await)
}

/// Hands a request to the online loop.
fn send(shared: &Shared, request: Request) -> Result<(), ApiError> {
    shared.approvals.try_send(request).map_err(|_| {
        ApiError::unavailable("requests_busy", "too many requests are waiting for the online loop; retry shortly")
    })
}

/// The loop answers at its next pass; a stale collector holds passes back. `None`: no answer
/// in time.
async fn wait_for_pass<T>(cfg: &crate::config::MasterConfig, answer: tokio::sync::oneshot::Receiver<T>) -> Option<T> {
    let wait = Duration::from_millis((cfg.analyzer.interval_ms * 3).max(5_000));
    tokio::time::timeout(wait, answer).await.ok().and_then(Result::ok)
}

fn approval_reply<T>(answer: Option<Result<T, ApprovalError>>) -> Result<ApiJson<T>, ApiError> {
    match answer.unwrap_or(Err(ApprovalError::Timeout)) {
        Ok(record) => Ok(ApiJson(record)),
        Err(e @ ApprovalError::NotPending) => Err(ApiError::not_found(e.to_string())),
        Err(e @ ApprovalError::Refused(_)) => Err(ApiError::conflict(e.to_string())),
        Err(e @ ApprovalError::Timeout) => Err(ApiError::unavailable(
            "online_loop_unavailable",
            format!("{e} (is the collector stale or the ops server down?)"),
        )),
    }
}

/// Rejects a dry-run proposal: dropped, and the same action on the same target is not offered
/// again for `analyzer.approval_ttl_secs`. Needs the `operator` role.
#[utoipa::path(
    post, path = "/api/v1/proposals/{id}/reject", tag = "decisions",
    security(("bearer" = ["operator"])),
    params(("id" = ActionId, Path, description = "the pending proposal's id")),
    responses(
        (status = 200, body = Pending, description = "the proposal as it was pending"),
        (status = 401, body = ErrorBody,
            description = "`unauthorized`: no bearer token, or an unknown one (tokens are configured)"),
        (status = 403, body = ErrorBody, description = "`forbidden`: the token's role is not `operator`"),
        (status = 404, body = ErrorBody, description = "`not_found`: no pending proposal with that id"),
        (status = 503, body = ErrorBody,
            description = "`requests_busy`: too many requests wait for the online loop; `online_loop_unavailable`: no \
                           pass answered in time"),
    )
)]
async fn reject(
    State(shared): State<Shared>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<ApiJson<Pending>, ApiError> {
    let cfg = shared.config.borrow().clone();
    let caller = identify(&cfg.auth, &headers)?;
    require(&caller, &[Role::Operator], "reject proposals")?;
    let (reply, answer) = tokio::sync::oneshot::channel();
    send(&shared, Request::Reject { proposal_id: id, rejected_by: caller.name, reply })?;
    approval_reply(wait_for_pass(&cfg, answer).await)
}

/// An action by hand, through the online loop: checked against the current view (422 naming
/// the field when it does not fit), predicted, and unless `dry_run` submitted, tracked and
/// evaluated like the analyzers' own. Needs the `operator` role.
#[utoipa::path(
    post, path = "/api/v1/actions", tag = "decisions",
    security(("bearer" = ["operator"])),
    request_body = ManualActionRequest,
    responses(
        (status = 200, body = ManualActionReply,
            description = "the action as a proposal, and unless a dry run the ops server's record"),
        (status = 400, body = ErrorBody, description = "`malformed_json`: the body is not JSON"),
        (status = 401, body = ErrorBody,
            description = "`unauthorized`: no bearer token, or an unknown one (tokens are configured)"),
        (status = 403, body = ErrorBody, description = "`forbidden`: the token's role is not `operator`"),
        (status = 409, body = ErrorBody, description = "`conflict`: the ops server did not take it"),
        (status = 413, body = ErrorBody, description = "`body_too_large`: over `http.body_limit_bytes`"),
        (status = 415, body = ErrorBody, description = "`unsupported_media_type`: not `application/json`"),
        (status = 422, body = ErrorBody,
            description = "`invalid_field`: the body has the wrong shape; `invalid_action`: the action does not fit \
                           the current view (`field` names the field at fault)"),
        (status = 503, body = ErrorBody,
            description = "`requests_busy`: too many requests wait for the online loop; `online_loop_unavailable`: no \
                           pass answered in time"),
    )
)]
async fn manual_action(
    State(shared): State<Shared>,
    headers: HeaderMap,
    ApiJson(request): ApiJson<ManualActionRequest>,
) -> Result<ApiJson<ManualActionReply>, ApiError> {
    let cfg = shared.config.borrow().clone();
    let caller = identify(&cfg.auth, &headers)?;
    require(&caller, &[Role::Operator], "submit actions")?;
    let (reply, answer) = tokio::sync::oneshot::channel();
    send(&shared, Request::Manual { request, requested_by: caller.name, reply })?;
    match wait_for_pass(&cfg, answer).await {
        Some(Ok(reply)) => Ok(ApiJson(reply)),
        Some(Err(ManualError::Refused(refusal))) => {
            Err(ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_action", refusal.to_string())
                .with_field(refusal.field))
        }
        Some(Err(e @ ManualError::Submission(_))) => Err(ApiError::conflict(e.to_string())),
        None => Err(ApiError::unavailable(
            "online_loop_unavailable",
            "no online pass answered in time (is the collector stale or the ops server down?)",
        )),
    }
}

/// The live policy config: each policy's mode, the halt switch, the planner, evaluation and
/// placement sections, and the config file's version and last reload.
#[utoipa::path(
    get, path = "/api/v1/policy", tag = "decisions",
    responses(
        (status = 200, body = PolicyStatus, description = "the live policy config"),
        (status = 503, body = ErrorBody,
            description = "`no_config_file`: this master was not started from a config file"),
    )
)]
async fn policy(State(shared): State<Shared>) -> Result<ApiJson<PolicyStatus>, ApiError> {
    let cfg = shared.config.borrow().clone();
    let config = shared
        .config_status
        .as_ref()
        .map(|s| s.read().expect("reload status lock is never poisoned").clone())
        .ok_or_else(|| ApiError::unavailable("no_config_file", "this master was not started from a config file"))?;
    let p = &cfg.planner;
    let modes = [
        (Policy::PartitionOverload, p.partition_overload.mode),
        (Policy::WorkerOverload, p.worker_overload.mode),
        (Policy::Imbalance, p.imbalance.mode),
        (Policy::DatasetPlacement, cfg.placement.mode),
    ]
    .into_iter()
    .map(|(policy, mode)| (policy.as_str().to_owned(), mode))
    .collect();
    let value = |v: serde_json::Result<serde_json::Value>| v.map_err(ApiError::internal);
    Ok(ApiJson(PolicyStatus {
        config,
        modes,
        halted: p.halt,
        planner: value(serde_json::to_value(&cfg.planner))?,
        evaluation: value(serde_json::to_value(&cfg.evaluation))?,
        placement: value(serde_json::to_value(&cfg.placement))?,
    }))
}

/// The placement rules routers follow: per hash-sharded dataset its shard limits and strategy,
/// versioned. 503 until the online loop has run once.
#[utoipa::path(
    get, path = "/api/v1/placement/rules", tag = "cluster",
    responses(
        (status = 200, body = PlacementRules, description = "the rule set"),
        (status = 503, body = ErrorBody, description = "`not_ready`: the online loop has not run yet"),
    )
)]
async fn placement_rules(State(shared): State<Shared>) -> Result<ApiJson<PlacementRules>, ApiError> {
    let rules = shared.snapshot.borrow().placement_rules.clone();
    rules.map(ApiJson).ok_or_else(|| ApiError::unavailable("not_ready", "the online loop has not run yet"))
}

/// The latest online pass as published (counters, proposals, declines with why, pending
/// proposals, placement rules, leadership).
#[utoipa::path(
    get, path = "/api/v1/pass", tag = "decisions",
    responses((status = 200, body = PassSnapshot, description = "the latest pass; `pass` 0 before the first"))
)]
async fn pass_snapshot(State(shared): State<Shared>) -> ApiJson<PassSnapshot> {
    let snapshot = shared.snapshot.borrow().clone();
    ApiJson((*snapshot).clone())
}

/// Whether this master may act, and who leads.
#[utoipa::path(
    get, path = "/api/v1/leadership", tag = "cluster",
    responses((status = 200, body = LeadershipStatus, description = "this master's view of leadership"))
)]
async fn leadership(State(shared): State<Shared>) -> ApiJson<LeadershipStatus> {
    ApiJson(shared.leadership.status())
}

/// The newest offline pass: what it read of the look-back, the merges and pre-splits it found,
/// each table's daily profile, and its report (chronically unbalanced tables and tenants, keys
/// split and merged back repeatedly, each worker's day at p50, p90 and max). Passes run on the
/// leader, hourly (`offline.interval_secs`) or on demand; a standby and a master before its first
/// pass answer `at_ms` 0 with empty lists.
#[utoipa::path(
    get, path = "/api/v1/offline", tag = "decisions",
    responses((status = 200, body = OfflineFindings, description = "the newest offline pass's findings"))
)]
async fn offline(State(shared): State<Shared>) -> ApiJson<OfflineFindings> {
    ApiJson(shared.offline.latest().map(|f| (*f).clone()).unwrap_or_default())
}

/// Runs an offline round now (fetch the rollups due, archive them, one pass) instead of at the
/// next interval; answers at once, and `GET /api/v1/offline` shows the pass when it is done.
/// Needs the `operator` role; the leader runs passes, so a standby refuses it.
#[utoipa::path(
    post, path = "/api/v1/offline/pass", tag = "decisions",
    security(("bearer" = ["operator"])),
    responses(
        (status = 200, body = OfflinePassRequested,
            description = "the archiver starts a round now (one more after the current, if one runs)"),
        (status = 401, body = ErrorBody,
            description = "`unauthorized`: no bearer token, or an unknown one (tokens are configured)"),
        (status = 403, body = ErrorBody, description = "`forbidden`: the token's role is not `operator`"),
        (status = 503, body = ErrorBody,
            description = "`not_leader`: this master is a standby; `offline_off`: this master runs no offline passes"),
    )
)]
async fn offline_pass(
    State(shared): State<Shared>,
    headers: HeaderMap,
) -> Result<ApiJson<OfflinePassRequested>, ApiError> {
    let cfg = shared.config.borrow().clone();
    let caller = identify(&cfg.auth, &headers)?;
    require(&caller, &[Role::Operator], "run an offline pass")?;
    if !shared.offline.is_fed() {
        return Err(ApiError::unavailable("offline_off", "this master runs no offline passes"));
    }
    let previous_at_ms = shared.offline.latest().map_or(0, |f| f.at_ms);
    shared.offline.request_pass();
    Ok(ApiJson(OfflinePassRequested { requested_at_ms: now_ms(), previous_at_ms }))
}
