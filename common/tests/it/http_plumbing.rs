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
    HttpServerConfig {
        body_limit_bytes: 4096,
        request_timeout_ms: 300,
        ..HttpServerConfig::on("127.0.0.1:0".parse().expect("addr"))
    }
}

async fn accept_report(ApiJson(report): ApiJson<Report>) -> Result<ApiJson<ReportAck>, lb_common::http::ApiError> {
    report.validate()?;
    Ok(ApiJson(ReportAck { worker_id: report.worker_id, seq: report.seq, duplicate: false }))
}

#[derive(serde::Deserialize)]
struct Limit {
    n: u32,
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
        // axum's own extractors, whose rejections are plain text until the layers rewrite them.
        .route("/v1/plain/{n}", get(|axum::extract::Path(n): axum::extract::Path<u32>| async move { n.to_string() }))
        .route(
            "/v1/plain",
            post(|axum::Json(v): axum::Json<serde_json::Value>| async move { v.to_string() })
                .get(|axum::extract::Query(q): axum::extract::Query<Limit>| async move { q.n.to_string() }),
        )
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
    shutdown.spawn(async move { serve(listener, router, token, &server_config()).await.expect("serve") });
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
    shutdown.spawn(async move { serve(listener, router, token, &server_config()).await.expect("serve") });

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

/// Issue 17 item 5: a slowloris connection was held 35 s and idle connections stayed open
/// without bound: every connection must now send its head within `head_timeout_ms` (also
/// between keep-alive requests), and at most `max_connections` are served at once.
#[tokio::test]
async fn slow_and_idle_connections_are_closed_and_their_number_is_capped() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let shutdown = Shutdown::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let http = HttpServerConfig { head_timeout_ms: 300, max_connections: 3, ..server_config() };
    let router = app(Readiness::new());
    let token = shutdown.token();
    shutdown.spawn(async move { serve(listener, router, token, &http).await.expect("serve") });
    let closed_within = |mut stream: tokio::net::TcpStream, limit: Duration| async move {
        let mut buf = Vec::new();
        let read = tokio::time::timeout(limit, stream.read_to_end(&mut buf)).await;
        read.is_ok()
    };

    // A head that never ends.
    let started = std::time::Instant::now();
    let mut slow = tokio::net::TcpStream::connect(addr).await.expect("connect");
    slow.write_all(b"GET /live HTTP/1.1\r\nhost: x\r\nx-slow: ").await.expect("write");
    assert!(closed_within(slow, Duration::from_secs(5)).await, "a slow head is cut");
    assert!(started.elapsed() < Duration::from_secs(3), "cut after {:?}", started.elapsed());

    // A kept-alive connection that goes quiet after one request.
    let mut idle = tokio::net::TcpStream::connect(addr).await.expect("connect");
    idle.write_all(b"GET /live HTTP/1.1\r\nhost: x\r\n\r\n").await.expect("write");
    let mut first = [0_u8; 12];
    idle.read_exact(&mut first).await.expect("a reply");
    assert_eq!(&first, b"HTTP/1.1 200");
    assert!(closed_within(idle, Duration::from_secs(5)).await, "an idle connection is closed");

    // Three silent connections take every slot: a fourth is served only once they are cut.
    let mut silent = Vec::new();
    for _ in 0..3 {
        silent.push(tokio::net::TcpStream::connect(addr).await.expect("connect"));
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = std::time::Instant::now();
    let client = HttpClient::new(format!("http://{addr}"), &HttpClientConfig::default());
    let _: serde_json::Value = client.get("/v1/items/1").await.expect("served once a slot is free");
    assert!(started.elapsed() >= Duration::from_millis(200), "served at once: no cap ({:?})", started.elapsed());
    drop(silent);
    assert!(shutdown.stop(Duration::from_secs(10)).await);
}

/// Sends `request` on a fresh connection and reads the reply to the connection's end.
async fn raw(addr: std::net::SocketAddr, request: &[u8]) -> (u16, String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    // The server may answer and close before it read everything: a failed write is fine.
    let _ = stream.write_all(request).await;
    let mut reply = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut reply))
        .await
        .expect("the server closes after its reply")
        .ok();
    let reply = String::from_utf8_lossy(&reply).into_owned();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
    let status = head.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, head.to_ascii_lowercase(), body.to_owned())
}

/// Issue 17 item 14: the HTTP layer's own 400/414/431 replies had empty bodies, and axum's
/// extractor rejections were plain text: every error reply now has the shared JSON body.
#[tokio::test]
async fn every_error_reply_of_the_http_layer_has_the_shared_body() {
    let shutdown = Shutdown::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let router = app(Readiness::new());
    let token = shutdown.token();
    shutdown.spawn(async move { serve(listener, router, token, &server_config()).await.expect("serve") });
    let get =
        |target: &str, headers: &str| format!("GET {target} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n{headers}\r\n");
    let many_headers: String = (0..150).map(|i| format!("x-h{i}: v\r\n")).collect();
    let cases: Vec<(&str, String, u16, &str)> = vec![
        ("a garbage request line", "GARBAGE\r\n\r\n".to_owned(), 400, "bad_request"),
        ("a header that does not parse", get("/live", "bad header\r\n"), 400, "bad_request"),
        ("a URI over max_uri_bytes", get(&format!("/live?{}", "q".repeat(9_000)), ""), 414, "uri_too_long"),
        ("a URI over hyper's own limit", get(&format!("/live?{}", "q".repeat(70_000)), ""), 414, "uri_too_long"),
        ("headers over max_header_bytes", get("/live", &format!("x-big: {}\r\n", "v".repeat(20_000))), 431, "headers_too_large"),
        ("more headers than hyper takes", get("/live", &many_headers), 431, "headers_too_large"),
        ("a path parameter that does not parse", get("/v1/plain/abc", ""), 400, "bad_request"),
        ("a query that does not parse", get("/v1/plain?n=abc", ""), 400, "bad_request"),
        ("an unknown route", get("/nope", ""), 404, "not_found"),
        ("a method the route lacks", "DELETE /v1/plain HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n".to_owned(), 405, "method_not_allowed"),
        (
            "a body that is not JSON",
            "POST /v1/plain HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: 5\r\n\r\n{nope".to_owned(),
            400,
            "bad_request",
        ),
        (
            "a body that is not declared JSON",
            "POST /v1/plain HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-type: text/plain\r\ncontent-length: 2\r\n\r\n{}".to_owned(),
            415,
            "unsupported_media_type",
        ),
    ];
    for (what, request, status, code) in cases {
        let (got, head, body) = raw(addr, request.as_bytes()).await;
        assert_eq!(got, status, "{what}: {head}");
        assert!(head.contains("content-type: application/json"), "{what}: {head}");
        let body: ErrorBody =
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("{what}: not the error body ({e}): {body}"));
        assert_eq!(body.code, code, "{what}: {}", body.error);
        assert!(!body.error.is_empty(), "{what}");
    }
    let (got, _, _) = raw(addr, get("/v1/plain/7", "").as_bytes()).await;
    assert_eq!(got, 200, "a good request is untouched");
    assert!(shutdown.stop(Duration::from_secs(10)).await);
}

/// A keep-alive HTTP/1.1 peer that answers `{}` to every request and counts the connections
/// it accepted.
async fn counting_peer() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let accepted = std::sync::Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 1024];
                while let Ok(n) = socket.read(&mut chunk).await {
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    // Requests here have no body: each ends at its blank line.
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        let reply = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
                        if socket.write_all(reply).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (format!("http://{addr}"), accepted)
}

#[tokio::test]
async fn a_kept_client_reuses_its_connection_until_its_settings_change() {
    use std::sync::atomic::Ordering;
    let (base, accepted) = counting_peer().await;
    let kept = lb_common::http::KeptClient::default();
    let config = HttpClientConfig { connect_timeout_ms: 500, deadline_ms: 2_000 };
    for _ in 0..3 {
        let _: serde_json::Value = kept.get(&base, &config, Some("token-a")).get("/x").await.expect("answer");
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "one pool, one connection, for the same settings");
    // A new token is a new client (and pool): one more connection, then reused again.
    for _ in 0..2 {
        let _: serde_json::Value = kept.get(&base, &config, Some("token-b")).get("/x").await.expect("answer");
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
    let longer = HttpClientConfig { deadline_ms: 3_000, ..config.clone() };
    let _: serde_json::Value = kept.get(&base, &longer, Some("token-b")).get("/x").await.expect("answer");
    assert_eq!(accepted.load(Ordering::SeqCst), 3, "new timeouts build a new client");
    // A client built per call, as the heartbeat did: a connection each time.
    for _ in 0..2 {
        let _: serde_json::Value = HttpClient::new(&base, &config).get("/x").await.expect("answer");
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 5);
}
