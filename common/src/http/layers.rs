//! The standard middleware stack every lb server wraps its router in.

use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::trace::TraceLayer;

use super::ApiError;
use crate::config::shared::HttpServerConfig;

/// Wraps `router` (outermost first): request tracing → panic catching → metrics and deadline →
/// body limit; unknown routes and methods answer with the JSON error body.
///
/// Metrics: `lb_http_requests_total{method,route,status}` and
/// `lb_http_request_duration_seconds{method,route}`, labelled by the route *template* so that
/// label values stay bounded.
pub fn with_standard_layers(router: Router, config: &HttpServerConfig) -> Router {
    let deadline = config.request_timeout();
    let body_limit = usize::try_from(config.body_limit_bytes).unwrap_or(usize::MAX);
    router
        .fallback(|| async { ApiError::not_found("no such route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", "method not allowed on this route")
        })
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(middleware::from_fn(move |req, next| track(req, next, deadline)))
        .layer(CatchPanicLayer::custom(|_panic| ApiError::internal("handler panicked").into_response()))
        .layer(TraceLayer::new_for_http().make_span_with(request_span))
}

/// The span every request is traced in: method and path, never the query string (a caller may
/// put a token there; tower-http's default span records the full URI).
fn request_span<B>(req: &axum::http::Request<B>) -> tracing::Span {
    tracing::debug_span!("request", method = %req.method(), path = %req.uri().path(), version = ?req.version())
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

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("capture lock").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Issue 17: a token sent in a query string was logged with the full URI at DEBUG.
    #[tokio::test]
    async fn a_query_string_never_reaches_the_request_log() {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        let router = with_standard_layers(
            Router::new().route("/v1/x", get(|| async { "ok" })),
            &HttpServerConfig {
                listen: "127.0.0.1:0".parse().expect("addr"),
                body_limit_bytes: 4096,
                request_timeout_ms: 1_000,
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
