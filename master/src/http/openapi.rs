//! The master's OpenAPI document, generated from the handlers' `#[utoipa::path]` attributes and
//! the protocol types' `ToSchema` derives (lb-common's feature `openapi`), served at
//! `GET /api/v1/openapi.json`.
//!
//! [`base`] holds what no handler of `mod.rs` says: the info, the tags, the bearer scheme, and
//! the routes whose handlers live elsewhere (the observability routes in lb-common, the console's
//! in `console.rs`), documented here by doc-only functions. [`super::api_routes`] adds every
//! route of `mod.rs` from its handler's attribute; [`document`] then gives each operation the
//! `default` error reply the standard layers can produce on any route, and each read under
//! `/api/v1` the optional bearer token of `auth.reads_need_token` (one middleware, so one place
//! here too).
//!
//! `docs/openapi.json` is this document as committed; a test fails when the two differ.
//! Regenerate it with `UPDATE_OPENAPI=1 cargo test -p lb-master --lib openapi`.

use std::sync::LazyLock;

use axum::http::header;
use axum::response::IntoResponse;
use lb_common::config::watch::ReloadStatus;
use lb_common::protocol::{
    ActionEntry, ActionsQuery, ActionsResponse, AnalysisRecord, ErrorBody, Evaluation, HaltRequest, HaltStatus,
    Proposal, StreamHello, StreamLagged,
};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, Response, ResponseBuilder};
use utoipa::{Modify, OpenApi, ToSchema};

/// Where the document is served.
pub const PATH: &str = "/api/v1/openapi.json";

/// The name of the security scheme of the write routes.
const BEARER: &str = "bearer";
/// The name of the reply every operation lists as `default`.
const ERROR_RESPONSE: &str = "Error";

const DESCRIPTION: &str = "\
The lb master's HTTP API: the load it sees (`/api/v1/overview`, `/workers`, `/partitions`, \
`/top`, `/heatmap`, histories), what it decided (`/pass`, pending proposals, records) and the \
operator's writes (approve, reject, act by hand). Every reply that aggregates over time states \
its averaging window (`window_secs`, or `step_ms`). Queries reject unknown fields (400).

**Auth.** Writes need `Authorization: Bearer <token>` with a token of the `operator` role from \
the master's `[[auth.tokens]]` (401 without a known token, 403 for another role). Reads under \
`/api/v1` take no token unless `auth.reads_need_token` is set; then they need a token of any role \
(401 without one), hence their optional bearer requirement. With no tokens configured, auth is \
off. An operation's security requirement lists the role it needs.

**Errors.** Every error reply has the body `ErrorBody` (`{\"error\", \"code\"}`); each operation \
lists the statuses and codes its handler answers, and `default` covers what any route can \
answer: 500 `internal` (details in the server log), 503 `request_timeout` (over \
`http.request_timeout_ms`), 413 `body_too_large`.

**Outside `/api/v1`.** `/live`, `/ready`, `/metrics` and `/v1/config/status` are the \
observability routes every lb binary serves, outside auth. The console's own files \
(`/console/`, with `/` and `/console` redirecting there) are not described here.";

#[derive(OpenApi)]
#[openapi(
    info(title = "lb master API", description = DESCRIPTION),
    paths(console_actions, halt_status, set_halt, stream, live, ready, metrics, config_status),
    components(schemas(ErrorBody, StreamHello, StreamLagged)),
    modifiers(&Security),
    tags(
        (name = "load", description = "Load from the MetricsTable: workers, partitions, top-N, heatmaps, histories"),
        (name = "cluster", description = "The master's view: topology, collection, leadership, placement rules"),
        (name = "decisions", description = "Online passes, proposals and the operator's writes"),
        (name = "records", description = "The ResultDataStore: analyses, proposals, actions, evaluations, reloads"),
        (name = "console", description = "Beside the reads, for the console: the event stream, the ops server's \
                                          halt switch and actions passed on"),
        (name = "meta", description = "This document"),
        (name = "observability", description = "Liveness, readiness, metrics and config status, on every lb binary"),
    )
)]
struct ApiDoc;

/// The document before the routes are added.
pub(super) fn base() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

/// The whole document: [`base`], every route of [`super::api_routes`], each operation's
/// `default` error reply, and the optional token of the reads.
pub fn document() -> utoipa::openapi::OpenApi {
    let (_, mut doc) = super::api_routes().split_for_parts();
    let body = ContentBuilder::new().schema(Some(Ref::from_schema_name("ErrorBody"))).build();
    let error = ResponseBuilder::new().description("any other error, with the shared error body");
    let error = Response::from(error.content("application/json", body));
    doc.components.get_or_insert_default().responses.insert(ERROR_RESPONSE.to_owned(), RefOr::T(error));
    let unauthorized = ResponseBuilder::new()
        .description("`unauthorized`: no bearer token, or an unknown one (only with `auth.reads_need_token`)")
        .content("application/json", ContentBuilder::new().schema(Some(Ref::from_schema_name("ErrorBody"))).build());
    let unauthorized = Response::from(unauthorized);
    for (path, item) in &mut doc.paths.paths {
        // `read_access` in mod.rs: every GET under /api/v1, none outside.
        if let Some(read) = item.get.as_mut().filter(|_| path.starts_with("/api/v1/")) {
            read.security = Some(vec![SecurityRequirement::default(), SecurityRequirement::new(BEARER, [""; 0])]);
            read.responses.responses.entry("401".to_owned()).or_insert_with(|| RefOr::T(unauthorized.clone()));
        }
        let operations = [&mut item.get, &mut item.put, &mut item.post, &mut item.delete, &mut item.patch];
        for operation in operations.into_iter().flatten() {
            operation
                .responses
                .responses
                .entry("default".to_owned())
                .or_insert_with(|| RefOr::Ref(Ref::from_response_name(ERROR_RESPONSE)));
        }
    }
    doc
}

/// [`document`] as pretty JSON (stable: every map in it is sorted or in declaration order), as
/// served and as committed in `docs/openapi.json`.
pub fn document_pretty_json() -> String {
    let mut json = document().to_pretty_json().expect("an OpenAPI document always serialises");
    json.push('\n');
    json
}

/// Built on the first request: the document depends on the code only.
static DOCUMENT_JSON: LazyLock<String> = LazyLock::new(document_pretty_json);

/// This document.
#[utoipa::path(
    get, path = PATH, tag = "meta",
    responses((status = 200, body = Object, description = "the OpenAPI document of this API"))
)]
pub async fn document_json() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], DOCUMENT_JSON.as_str())
}

/// The body of a stored record: one type per record kind (`analysis`, `proposal`, `action`,
/// `evaluation`, `config_reload`), named by the record's `kind`. For the doc only: the records
/// routes serve the stored JSON as it is.
#[derive(Debug, ToSchema)]
#[serde(untagged)]
pub enum RecordBody {
    Analysis(AnalysisRecord),
    Proposal(Proposal),
    Action(ActionEntry),
    Evaluation(Evaluation),
    ConfigReload(ReloadStatus),
}

/// The bearer scheme the write routes name.
struct Security;

impl Modify for Security {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let scheme = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .description(Some(
                "A token from the master's `[[auth.tokens]]`; the requirement lists the role it must have. \
                 With no tokens configured, auth is off.",
            ))
            .build();
        doc.components.get_or_insert_default().add_security_scheme(BEARER, SecurityScheme::Http(scheme));
    }
}

// The console's routes: their handlers are `console.rs`'s, so these functions only carry their
// doc (moving each attribute onto its handler, mounted with `routes!`, would retire them).

/// The ops server's actions (`GET /v1/actions`, passed on), newest first, at most 500.
#[utoipa::path(
    get, path = "/api/v1/actions", tag = "console",
    params(ActionsQuery),
    responses(
        (status = 200, body = ActionsResponse, description = "the actions, newest first"),
        (status = 400, body = ErrorBody, description = "`bad_request`: a malformed query"),
        (status = 401, body = ErrorBody,
            description = "`unauthorized`: no known token with `auth.reads_need_token`; `ops_server_refused`: the \
                           ops server does not know the token"),
        (status = 403, body = ErrorBody, description = "`ops_server_refused`: the ops server refused the token"),
        (status = 502, body = ErrorBody, description = "`ops_server_refused`: the ops server answered an error"),
        (status = 503, body = ErrorBody, description = "`ops_server_unavailable`: the ops server did not answer"),
    )
)]
#[expect(dead_code, reason = "doc only: the router mounts console::actions")]
fn console_actions() {}

/// The ops server's halt switch (`GET /v1/halt`, passed on).
#[utoipa::path(
    get, path = "/api/v1/halt", tag = "console",
    responses(
        (status = 200, body = HaltStatus, description = "the halt switch"),
        (status = 401, body = ErrorBody,
            description = "`unauthorized`: no known token with `auth.reads_need_token`; `ops_server_refused`: the \
                           ops server does not know the token"),
        (status = 403, body = ErrorBody, description = "`ops_server_refused`: the ops server refused the token"),
        (status = 502, body = ErrorBody, description = "`ops_server_refused`: the ops server answered an error"),
        (status = 503, body = ErrorBody, description = "`ops_server_unavailable`: the ops server did not answer"),
    )
)]
#[expect(dead_code, reason = "doc only: console::api_router serves it")]
fn halt_status() {}

/// Halts or resumes the ops server's executor (`POST /v1/halt`, passed on with the caller's
/// token, which the ops server checks again).
#[utoipa::path(
    post, path = "/api/v1/halt", tag = "console",
    security(("bearer" = ["operator"])),
    request_body = HaltRequest,
    responses(
        (status = 200, body = HaltStatus, description = "the halt switch as it is now"),
        (status = 400, body = ErrorBody, description = "`malformed_json`: the body is not JSON"),
        (status = 401, body = ErrorBody,
            description = "`unauthorized`: no bearer token, or an unknown one; `ops_server_refused`: the ops server \
                           does not know the token"),
        (status = 403, body = ErrorBody,
            description = "`forbidden`: the token's role is not `operator`; `ops_server_refused`: the ops server \
                           refused its role"),
        (status = 415, body = ErrorBody, description = "`unsupported_media_type`: not `application/json`"),
        (status = 422, body = ErrorBody,
            description = "`invalid_field`: the body has the wrong shape; `ops_server_refused`: the ops server \
                           refused the request"),
        (status = 502, body = ErrorBody, description = "`ops_server_refused`: the ops server answered an error"),
        (status = 503, body = ErrorBody, description = "`ops_server_unavailable`: the ops server did not answer"),
    )
)]
#[expect(dead_code, reason = "doc only: console::api_router serves it")]
fn set_halt() {}

/// Server-sent events: `hello` first (`StreamHello`), then `pass` after every online pass (a
/// `PassSnapshot` without placement rules), `record` for every record the master writes but
/// analysis passes (a `StoredRecord` as `/api/v1/records/{kind}/{key}` serves it), and `lagged`
/// (`StreamLagged`) when this reader fell behind and should read the records again. Each event's
/// data is one JSON value; the stream ends when the master shuts down.
#[utoipa::path(
    get, path = "/api/v1/stream", tag = "console",
    responses(
        (status = 200, body = String, content_type = "text/event-stream", description = "the event stream"),
        (status = 503, body = ErrorBody, description = "`too_many_streams`: 64 consoles already follow the stream"),
    )
)]
#[expect(dead_code, reason = "doc only: console::api_router serves it")]
fn stream() {}

// The observability routes: their handlers are lb-common's (`observability_router`), so these
// functions only carry their doc.

/// Liveness: 200 while the process runs.
#[utoipa::path(
    get, path = "/live", tag = "observability",
    responses((status = 200, body = String, content_type = "text/plain", description = "`ok`"))
)]
#[expect(dead_code, reason = "doc only: lb_common::http::observability_router serves it")]
fn live() {}

/// Readiness: 200 when the master should receive traffic.
#[utoipa::path(
    get, path = "/ready", tag = "observability",
    responses(
        (status = 200, body = String, content_type = "text/plain", description = "`ready`"),
        (status = 503, body = ErrorBody,
            description = "`not_ready`: starting or shutting down; the message says which"),
    )
)]
#[expect(dead_code, reason = "doc only: lb_common::http::observability_router serves it")]
fn ready() {}

/// Prometheus metrics in the text exposition format.
#[utoipa::path(
    get, path = "/metrics", tag = "observability",
    responses((status = 200, body = String, content_type = "text/plain; version=0.0.4; charset=utf-8",
        description = "every metric of this process"))
)]
#[expect(dead_code, reason = "doc only: lb_common::http::observability_router serves it")]
fn metrics() {}

/// The config file's live version and the last reload attempt.
#[utoipa::path(
    get, path = "/v1/config/status", tag = "observability",
    responses(
        (status = 200, body = ReloadStatus, description = "the reload status"),
        (status = 404, body = ErrorBody, description = "`no_config`: this process runs without a config file"),
    )
)]
#[expect(dead_code, reason = "doc only: lb_common::http::observability_router serves it")]
fn config_status() {}

#[cfg(test)]
mod tests;
