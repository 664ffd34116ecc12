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
        .layer(TraceLayer::new_for_http())
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
