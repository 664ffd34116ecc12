//! Registration and heartbeats against a real HTTP ops-server stand-in, and ingest while the ops
//! server is down.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use lb_common::http::{ApiError, ApiJson};
use lb_common::protocol::{HeartbeatRequest, RegisterRequest, RegisterResponse, ReportAck};

use crate::support::*;

#[derive(Default)]
struct Registry {
    registrations: AtomicUsize,
    heartbeats: AtomicUsize,
    forget_next_heartbeat: AtomicBool,
    address: std::sync::Mutex<Option<String>>,
}

const REPLY: RegisterResponse =
    RegisterResponse { heartbeat_interval_ms: 100, down_after_ms: 1000, warnings: Vec::new() };

async fn register(State(r): State<Arc<Registry>>, ApiJson(req): ApiJson<RegisterRequest>) -> ApiJson<RegisterResponse> {
    *r.address.lock().expect("lock") = Some(req.address);
    r.registrations.fetch_add(1, Ordering::SeqCst);
    ApiJson(REPLY)
}

async fn heartbeat(
    State(r): State<Arc<Registry>>,
    ApiJson(_beat): ApiJson<HeartbeatRequest>,
) -> Result<ApiJson<RegisterResponse>, ApiError> {
    if r.forget_next_heartbeat.swap(false, Ordering::SeqCst) {
        return Err(ApiError::new(StatusCode::NOT_FOUND, "not_found", "unknown agent"));
    }
    r.heartbeats.fetch_add(1, Ordering::SeqCst);
    Ok(ApiJson(REPLY))
}

async fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let started = tokio::time::Instant::now();
    while !cond() {
        assert!(started.elapsed() < Duration::from_secs(20), "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn registers_heartbeats_and_re_registers_when_forgotten() {
    let registry = Arc::new(Registry::default());
    let app = Router::new()
        .route("/v1/agents/register", post(register))
        .route("/v1/agents/heartbeat", post(heartbeat))
        .with_state(registry.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });

    let dir = tempfile::tempdir().expect("dir");
    let (agent, _cfg, _client) = start(config(dir.path(), Some(&url))).await;
    wait_until("two heartbeats", || registry.heartbeats.load(Ordering::SeqCst) >= 2).await;
    assert_eq!(registry.registrations.load(Ordering::SeqCst), 1);
    let advertised = registry.address.lock().expect("lock").clone();
    assert_eq!(advertised, Some(format!("http://{}", agent.addr())));

    registry.forget_next_heartbeat.store(true, Ordering::SeqCst);
    wait_until("re-registration", || registry.registrations.load(Ordering::SeqCst) == 2).await;
    assert!(agent.stop(STOP).await);
}

#[tokio::test]
async fn keeps_ingesting_while_the_ops_server_is_down() {
    let free = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let dead = format!("http://{}", free.local_addr().expect("addr"));
    drop(free);
    let dir = tempfile::tempdir().expect("dir");
    let (agent, _cfg, client) = start(config(dir.path(), Some(&dead))).await;
    for seq in 1..=3 {
        let ack: ReportAck = client.post("/v1/report", &report(seq, 5)).await.expect("acked without an ops server");
        assert!(!ack.duplicate);
    }
    assert_eq!(pull_all(&client, 0).await.0.len(), 15);
    assert!(agent.stop(STOP).await);
}
