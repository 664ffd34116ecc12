//! The standard middleware stack every lb server wraps its router in.

use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::classify::ServerErrorsFailureClass;
use tower_http::trace::TraceLayer;

use super::ApiError;
use crate::config::shared::HttpServerConfig;

/// Wraps `router` (outermost first): request tracing → panic catching → metrics and deadline →
/// URI and header limits → every error reply as the JSON error body → body limit; unknown routes
/// and methods answer with the JSON error body.
///
/// Metrics: `lb_http_requests_total{method,route,status}` and
/// `lb_http_request_duration_seconds{method,route}`, labelled by the route *template* so that
/// label values stay bounded.
pub fn with_standard_layers(router: Router, config: &HttpServerConfig) -> Router {
    let deadline = config.request_timeout();
    let body_limit = usize::try_from(config.body_limit_bytes).unwrap_or(usize::MAX);
    let limits = HeadLimits {
        max_uri_bytes: usize::try_from(config.max_uri_bytes).unwrap_or(usize::MAX),
        max_header_bytes: usize::try_from(config.max_header_bytes).unwrap_or(usize::MAX),
    };
    router
        .fallback(|| async { ApiError::not_found("no such route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", "method not allowed on this route")
        })
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(middleware::from_fn(json_errors))
        .layer(middleware::from_fn(move |req, next| head_limits(req, next, limits)))
        .layer(middleware::from_fn(move |req, next| track(req, next, deadline)))
        .layer(CatchPanicLayer::custom(|_panic| ApiError::internal("handler panicked").into_response()))
        .layer(TraceLayer::new_for_http().make_span_with(request_span).on_failure(log_failure))
}

/// Server errors by what they mean: a 500 is a bug (ERROR); a 503 is expected — not ready
/// during a start or a stop, a store or peer away, a deadline — and its cause is logged where
/// it arises, so the reply itself is DEBUG (a probe every second during a restart is not an
/// error); any other 5xx (a peer's bad answer passed on) is WARN.
fn log_failure(class: ServerErrorsFailureClass, latency: Duration, _span: &tracing::Span) {
    let latency_ms = latency.as_millis() as u64;
    match class {
        ServerErrorsFailureClass::StatusCode(StatusCode::SERVICE_UNAVAILABLE) => {
            tracing::debug!(status = 503, latency_ms, "response failed")
        }
        ServerErrorsFailureClass::StatusCode(status) if status == StatusCode::INTERNAL_SERVER_ERROR => {
            tracing::error!(status = status.as_u16(), latency_ms, "response failed")
        }
        ServerErrorsFailureClass::StatusCode(status) => {
            tracing::warn!(status = status.as_u16(), latency_ms, "response failed")
        }
        ServerErrorsFailureClass::Error(error) => tracing::error!(%error, latency_ms, "response failed"),
    }
}

/// The span every request is traced in: method and path, never the query string (a caller may
/// put a token there; tower-http's default span records the full URI).
fn request_span<B>(req: &axum::http::Request<B>) -> tracing::Span {
    tracing::debug_span!("request", method = %req.method(), path = %req.uri().path(), version = ?req.version())
}

#[derive(Debug, Clone, Copy)]
struct HeadLimits {
    max_uri_bytes: usize,
    max_header_bytes: usize,
}

/// 414 for a URI over `http.max_uri_bytes`, 431 for headers over `http.max_header_bytes` (names
/// and values), before any handler runs.
async fn head_limits(req: Request, next: Next, limits: HeadLimits) -> Response {
    let uri_bytes = req.uri().path_and_query().map_or(0, |pq| pq.as_str().len());
    if uri_bytes > limits.max_uri_bytes {
        let message =
            format!("the request URI is {uri_bytes} bytes; at most {} (http.max_uri_bytes)", limits.max_uri_bytes);
        return ApiError::new(StatusCode::URI_TOO_LONG, "uri_too_long", message).into_response();
    }
    let header_bytes: usize = req.headers().iter().map(|(name, value)| name.as_str().len() + value.len()).sum();
    if header_bytes > limits.max_header_bytes {
        let message = format!(
            "the request headers are {header_bytes} bytes; at most {} (http.max_header_bytes)",
            limits.max_header_bytes
        );
        return ApiError::new(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, "headers_too_large", message)
            .into_response();
    }
    next.run(req).await
}

/// The most of a non-JSON error reply's text kept as the message (axum's rejections are one
/// short sentence).
const MAX_REJECTION_TEXT_BYTES: usize = 1024;

/// Turns an error reply that is not JSON — axum's own extractor rejections (a bad path
/// parameter, a query that does not parse, a body that is not UTF-8 …) — into the shared error
/// body with the same status and headers, its text as the message.
async fn json_errors(req: Request, next: Next) -> Response {
    let response = next.run(req).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = match axum::body::to_bytes(body, MAX_REJECTION_TEXT_BYTES).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).trim().to_owned(),
        Err(_) => String::new(),
    };
    let message = if text.is_empty() { status.canonical_reason().unwrap_or("error").to_lowercase() } else { text };
    let mut reply = ApiError::new(status, code_of(status), message).into_response();
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            reply.headers_mut().append(name.clone(), value.clone());
        }
    }
    reply
}

/// The error body's code for a status no lb handler chose a code for (see docs/protocol.md).
pub(crate) fn code_of(status: StatusCode) -> &'static str {
    match status {
        StatusCode::BAD_REQUEST => "bad_request",
        StatusCode::UNAUTHORIZED => "unauthorized",
        StatusCode::FORBIDDEN => "forbidden",
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::REQUEST_TIMEOUT => "request_timeout",
        StatusCode::CONFLICT => "conflict",
        StatusCode::PAYLOAD_TOO_LARGE => "body_too_large",
        StatusCode::URI_TOO_LONG => "uri_too_long",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::UNPROCESSABLE_ENTITY => "invalid_field",
        StatusCode::TOO_MANY_REQUESTS => "rate_limited",
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => "headers_too_large",
        StatusCode::SERVICE_UNAVAILABLE => "unavailable",
        s if s.is_server_error() => "internal",
        _ => "bad_request",
    }
}

async fn track(req: Request, next: Next, deadline: Duration) -> Response {
    let route =
        req.extensions().get::<MatchedPath>().map(|p| p.as_str().to_owned()).unwrap_or_else(|| "unmatched".to_owned());
    let method = req.method().as_str().to_owned();
    let started = Instant::now();
    let response = match tokio::time::timeout(deadline, next.run(req)).await {
        Ok(response) => response,
        Err(_) => {
            ApiError::unavailable("request_timeout", format!("request took longer than {} ms", deadline.as_millis()))
                .into_response()
        }
    };
    let status = response.status().as_u16().to_string();
    metrics::counter!("lb_http_requests_total", "method" => method.clone(), "route" => route.clone(), "status" => status)
        .increment(1);
    metrics::histogram!("lb_http_request_duration_seconds", "method" => method, "route" => route)
        .record(started.elapsed().as_secs_f64());
    response
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use axum::body::Body;
    use axum::routing::get;
    use tower::ServiceExt;

    use super::*;

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Captured {
        /// Captures every event of this thread, at every level, while the guard lives.
        fn install() -> (Self, tracing::subscriber::DefaultGuard) {
            let captured = Captured::default();
            let writer = captured.clone();
            let subscriber = tracing_subscriber::fmt()
                .with_max_level(tracing::Level::TRACE)
                .with_ansi(false)
                .with_writer(move || writer.clone())
                .finish();
            (captured, tracing::subscriber::set_default(subscriber))
        }
    }

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("capture lock").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Issue 17 item 18: every 503 was logged at ERROR, `/ready` probes during a restart
    /// included; a 500 still is.
    #[tokio::test]
    async fn an_expected_503_is_not_logged_as_an_error() {
        let (captured, _guard) = Captured::install();
        let router = with_standard_layers(
            Router::new()
                .route("/ready", get(|| async { ApiError::unavailable("not_ready", "starting") }))
                .route("/bug", get(|| async { ApiError::internal("a bug") })),
            &HttpServerConfig::on("127.0.0.1:0".parse().expect("addr")),
        );
        let get = |uri: &str| axum::http::Request::get(uri).body(Body::empty()).expect("request");
        let response = router.clone().oneshot(get("/ready")).await.expect("served");
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        let log = String::from_utf8(captured.0.lock().expect("capture lock").clone()).expect("utf-8");
        assert!(log.contains("response failed"), "the 503 is logged: {log}");
        assert!(!log.contains("ERROR"), "not as an error: {log}");
        let response = router.oneshot(get("/bug")).await.expect("served");
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let log = String::from_utf8(captured.0.lock().expect("capture lock").clone()).expect("utf-8");
        assert!(log.lines().any(|l| l.contains("ERROR") && l.contains("response failed")), "{log}");
    }

    /// Issue 17: a token sent in a query string was logged with the full URI at DEBUG.
    #[tokio::test]
    async fn a_query_string_never_reaches_the_request_log() {
        let (captured, _guard) = Captured::install();
        let router = with_standard_layers(
            Router::new().route("/v1/x", get(|| async { "ok" })),
            &HttpServerConfig {
                body_limit_bytes: 4096,
                request_timeout_ms: 1_000,
                ..HttpServerConfig::on("127.0.0.1:0".parse().expect("addr"))
            },
        );
        let request =
            axum::http::Request::get("/v1/x?token=leaked-secret-token-0001").body(Body::empty()).expect("request");
        let response = router.oneshot(request).await.expect("served");
        assert_eq!(response.status(), StatusCode::OK);
        let log = String::from_utf8(captured.0.lock().expect("capture lock").clone()).expect("utf-8");
        assert!(log.contains("path=/v1/x"), "the request is traced: {log}");
        assert!(!log.contains("leaked-secret") && !log.contains("token="), "{log}");
    }
}
