//! The shared server stack and client over real HTTP on loopback: error bodies, limits,
//! deadlines, observability routes, client error classes and graceful shutdown.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::{get, post};
use lb_common::config::shared::{HttpClientConfig, HttpServerConfig};
use lb_common::http::{ApiJson, ClientError, HttpClient, Readiness, observability_router, with_standard_layers};
use lb_common::protocol::{ErrorBody, Report, ReportAck};
use lb_common::shutdown::{Shutdown, serve};
use tower::ServiceExt;

fn server_config() -> HttpServerConfig {
    HttpServerConfig { listen: "127.0.0.1:0".parse().expect("addr"), body_limit_bytes: 4096, request_timeout_ms: 300 }
}

async fn accept_report(ApiJson(report): ApiJson<Report>) -> Result<ApiJson<ReportAck>, lb_common::http::ApiError> {
    report.validate()?;
    Ok(ApiJson(ReportAck { worker_id: report.worker_id, seq: report.seq, duplicate: false }))
}

fn app(readiness: Readiness) -> Router {
    let routes = Router::new()
        .route("/v1/report", post(accept_report))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                "late"
            }),
        )
        .route("/v1/items/{id}", get(|| async { ApiJson(serde_json::json!({"ok": true})) }))
        .merge(observability_router(lb_common::telemetry::metrics_handle(), readiness, None));
    with_standard_layers(routes, &server_config())
}

async fn send(router: Router, request: Request<Body>) -> (StatusCode, String) {
    let response = router.oneshot(request).await.expect("router is infallible");
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.expect("body");
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

fn post_json(uri: &str, body: impl Into<Body>) -> Request<Body> {
    Request::post(uri).header("content-type", "application/json").body(body.into()).expect("request")
}

fn error_code(body: &str) -> String {
    serde_json::from_str::<ErrorBody>(body).unwrap_or_else(|e| panic!("not an error body ({e}): {body}")).code
}

fn example_report() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/examples/report.json")).expect("example")
}

#[tokio::test]
async fn bad_requests_get_the_shared_error_body() {
    let app = app(Readiness::new());
    let (status, body) = send(app.clone(), post_json("/v1/report", "{not json")).await;
    assert_eq!((status, error_code(&body).as_str()), (StatusCode::BAD_REQUEST, "malformed_json"));

    let (status, body) = send(app.clone(), post_json("/v1/report", r#"{"worker_id": 7}"#)).await;
    assert_eq!((status, error_code(&body).as_str()), (StatusCode::UNPROCESSABLE_ENTITY, "invalid_field"));
    assert!(body.contains("worker_id"), "{body}");

    let too_big = format!("{{\"pad\": \"{}\"}}", "x".repeat(8192));
    let (status, body) = send(app.clone(), post_json("/v1/report", too_big)).await;
    assert_eq!((status, error_code(&body).as_str()), (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large"));

    let invalid = example_report().replace("\"latency_p99_us\": 9100.0", "\"latency_p99_us\": -3.0");
    let (status, body) = send(app.clone(), post_json("/v1/report", invalid)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(body.contains("partitions[0].latency_p99_us = -3"), "{body}");

    let (status, body) = send(app.clone(), Request::get("/nope").body(Body::empty()).expect("req")).await;
    assert_eq!((status, error_code(&body).as_str()), (StatusCode::NOT_FOUND, "not_found"));
    let (status, body) = send(app.clone(), Request::delete("/v1/report").body(Body::empty()).expect("req")).await;
    assert_eq!((status, error_code(&body).as_str()), (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"));
}

#[tokio::test]
async fn slow_handlers_hit_the_deadline() {
    let (status, body) = send(app(Readiness::new()), Request::get("/slow").body(Body::empty()).expect("req")).await;
    assert_eq!((status, error_code(&body).as_str()), (StatusCode::SERVICE_UNAVAILABLE, "request_timeout"));
}

#[tokio::test]
async fn observability_routes() {
    let readiness = Readiness::new();
    let app = app(readiness.clone());
    let get = |uri: &str| Request::get(uri).body(Body::empty()).expect("req");
    assert_eq!(send(app.clone(), get("/live")).await.0, StatusCode::OK);
    let (status, body) = send(app.clone(), get("/ready")).await;
    assert_eq!((status, error_code(&body).as_str()), (StatusCode::SERVICE_UNAVAILABLE, "not_ready"));
    readiness.set_ready();
    assert_eq!(send(app.clone(), get("/ready")).await.0, StatusCode::OK);
    assert_eq!(send(app.clone(), get("/v1/items/42")).await.0, StatusCode::OK);
    assert_eq!(send(app.clone(), get("/v1/config/status")).await.0, StatusCode::NOT_FOUND);

    let (status, metrics) = send(app.clone(), get("/metrics")).await;
    assert_eq!(status, StatusCode::OK);
    // Labelled by the route template, never the raw path.
    assert!(metrics.contains(r#"route="/v1/items/{id}""#), "{metrics}");
    assert!(!metrics.contains("/v1/items/42"), "{metrics}");
    assert!(metrics.contains("lb_http_request_duration_seconds_bucket"), "{metrics}");
}

async fn spawn_server(shutdown: &Shutdown) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let router = app(Readiness::new());
    let token = shutdown.token();
    shutdown.spawn(async move { serve(listener, router, token).await.expect("serve") });
    format!("http://{addr}")
}

#[tokio::test]
async fn client_classifies_failures() {
    let shutdown = Shutdown::new();
    let base = spawn_server(&shutdown).await;
    let client = HttpClient::new(&base, &HttpClientConfig { connect_timeout_ms: 500, deadline_ms: 2_000 });

    let ack: ReportAck = client
        .post("/v1/report", &serde_json::from_str::<Report>(&example_report()).expect("report"))
        .await
        .expect("accepted");
    assert_eq!(ack.seq, 1842);

    let err = client.get::<serde_json::Value>("/nope").await.unwrap_err();
    assert!(matches!(&err, ClientError::Status { body, .. } if body.code == "not_found"), "{err}");

    let short = client.clone().with_deadline(Duration::from_millis(100));
    let err = short.get::<serde_json::Value>("/slow").await.unwrap_err();
    assert!(matches!(err, ClientError::Timeout { .. }), "{err}");
    assert!(err.maybe_delivered());

    // A port nobody listens on: refused at once, certainly not delivered.
    let free = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let dead = format!("http://{}", free.local_addr().expect("addr"));
    drop(free);
    let err = client.for_peer(dead).get::<serde_json::Value>("/live").await.unwrap_err();
    assert!(matches!(err, ClientError::Connect { .. }), "{err}");
    assert!(!err.maybe_delivered());

    let err = client.get::<ReportAck>("/v1/items/1").await.unwrap_err();
    assert!(matches!(err, ClientError::Decode { .. }), "{err}");

    assert!(shutdown.stop(Duration::from_secs(10)).await);
}

#[tokio::test]
async fn shutdown_lets_in_flight_requests_finish() {
    let shutdown = Shutdown::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let (entered_tx, entered_rx) = tokio::sync::oneshot::channel::<()>();
    let entered_tx = std::sync::Arc::new(std::sync::Mutex::new(Some(entered_tx)));
    let router = Router::new().route(
        "/work",
        get(move || {
            if let Some(tx) = entered_tx.lock().expect("lock").take() {
                let _ = tx.send(());
            }
            async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                ApiJson(serde_json::json!({"done": true}))
            }
        }),
    );
    let token = shutdown.token();
    shutdown.spawn(async move { serve(listener, router, token).await.expect("serve") });

    let client = HttpClient::new(&base, &HttpClientConfig::default());
    let in_flight = tokio::spawn({
        let client = client.clone();
        async move { client.get::<serde_json::Value>("/work").await }
    });
    entered_rx.await.expect("request reached the handler");
    assert!(shutdown.stop(Duration::from_secs(10)).await, "server stopped within the deadline");
    let reply = in_flight.await.expect("join").expect("in-flight request completed");
    assert_eq!(reply["done"], true);
    let err = client.get::<serde_json::Value>("/work").await.unwrap_err();
    assert!(matches!(err, ClientError::Connect { .. }), "new connections are refused: {err}");
}
