//! Registry, collection fan-out against real agents (and a dead and a hung one), and auth.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use lb_common::config::shared::HttpClientConfig;
use lb_common::http::HttpClient;
use lb_common::protocol::*;
use reqwest::StatusCode;
use tokio::sync::watch;

use crate::support::*;

fn register(worker: &str, address: &str) -> RegisterRequest {
    RegisterRequest {
        worker_id: worker.parse().expect("id"),
        address: address.to_owned(),
        version: "test".into(),
        tenant: None,
    }
}

/// An hour ago, on the hour: within the agent's raw retention.
fn recent_hour_ms() -> i64 {
    let now = chrono::Utc::now().timestamp_millis();
    now - now.rem_euclid(3_600_000) - 3_600_000
}

/// A real lb-agent in-process, with `reports` reports of 3 partitions already ingested.
async fn real_agent(dir: &std::path::Path, worker: &str, reports: u64) -> (lb_agent::RunningAgent, String) {
    let text = format!(
        "worker_id = \"{worker}\"\n[http]\nlisten = \"127.0.0.1:0\"\n[store]\npath = \"{}\"\n[host]\nenabled = false\n",
        dir.join(format!("{worker}.sqlite")).display()
    );
    let config: lb_agent::config::AgentConfig =
        lb_common::config::parse(&text, std::path::Path::new("a.toml")).expect("config");
    let (_tx, rx) = watch::channel(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let agent = lb_agent::start(rx, listener, None).await.expect("agent");
    let url = format!("http://{}", agent.addr());
    let client = HttpClient::new(&url, &HttpClientConfig::default());
    for seq in 1..=reports {
        let report = Report {
            worker_id: worker.parse().expect("id"),
            seq,
            timestamp_ms: recent_hour_ms() + seq as i64 * 1000,
            interval_ms: 1000,
            partitions: (0..3u64)
                .map(|i| PartitionStats {
                    tenant: "acme".parse().expect("id"),
                    table: "orders".parse().expect("id"),
                    partition_id: format!("p{i}").parse().expect("id"),
                    key_range: lb_common::ids::KeyRange {
                        start: lb_common::ids::Key(i * 100),
                        end: lb_common::ids::Key(i * 100 + 99),
                    },
                    read_ops: 10,
                    write_ops: 1,
                    read_bytes: 100,
                    write_bytes: 10,
                    errors: 0,
                    rejected: 0,
                    latency_p50_us: 1.0,
                    latency_p99_us: 2.0,
                    cpu_time_us: 5,
                    stored_bytes: 1000,
                    sketch: None,
                })
                .collect(),
            host: None,
        };
        client.post::<_, ReportAck>("/v1/report", &report).await.expect("ingest");
    }
    (agent, url)
}

#[tokio::test]
async fn collection_fans_out_with_per_agent_deadlines_and_status() {
    let dir = tempfile::tempdir().expect("dir");
    let (_storage, url) = fake_storage().await;
    let s = start(config(dir.path(), &url, "")).await;
    let (agent_a, url_a) = real_agent(dir.path(), "w-a", 4).await;
    let (agent_b, url_b) = real_agent(dir.path(), "w-b", 2).await;
    // A hung agent: accepts connections, never answers.
    let hung = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let hung_url = format!("http://{}", hung.local_addr().expect("addr"));
    let slow = Router::new().route(
        "/v1/samples",
        get(|| async {
            tokio::time::sleep(Duration::from_secs(60)).await;
            "never"
        }),
    );
    tokio::spawn(async move { axum::serve(hung, slow).await });
    // A dead agent: nothing listens.
    let free = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let dead_url = format!("http://{}", free.local_addr().expect("addr"));
    drop(free);
    for (w, u) in [("w-a", &url_a), ("w-b", &url_b), ("w-hung", &hung_url), ("w-dead", &dead_url)] {
        let reply: RegisterResponse = s.agent.post("/v1/agents/register", &register(w, u)).await.expect("register");
        assert_eq!(reply.heartbeat_interval_ms, 100);
    }

    let started = Instant::now();
    let mut cursors = std::collections::BTreeMap::new();
    cursors.insert("w-b".parse().expect("id"), Cursor(3));
    let request = CollectRequest { cursors, limit_per_agent: None, agent_deadline_ms: Some(300), ..Default::default() };
    let reply: CollectResponse = s.master.post("/v1/collect", &request).await.expect("collect");
    let elapsed = started.elapsed();
    let by = |w: &str| reply.agents.iter().find(|a| a.worker_id.as_str() == w).expect("every agent answers");
    assert_eq!((by("w-a").status, by("w-a").samples.len()), (CollectStatus::Ok, 12));
    assert_eq!((by("w-b").status, by("w-b").samples.len()), (CollectStatus::Ok, 3), "from cursor 3 on");
    assert_eq!(by("w-hung").status, CollectStatus::Timeout);
    assert_eq!(by("w-hung").next_cursor, Cursor(0), "a failed agent is asked from the same place next time");
    assert_eq!(by("w-dead").status, CollectStatus::Error);
    // The hung agent cost its own deadline, not the 60 s it would take.
    assert!(elapsed < Duration::from_secs(5), "collection took {elapsed:?}");

    // Agents that stop heartbeating are marked down and not asked.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let beat = HeartbeatRequest { worker_id: "w-a".parse().expect("id"), latest_cursor: Cursor(12), address: None };
    let _: RegisterResponse = s.agent.post("/v1/agents/heartbeat", &beat).await.expect("heartbeat");
    let agents: AgentsResponse = s.viewer.get("/v1/agents").await.expect("agents");
    let state = |w: &str| agents.agents.iter().find(|a| a.worker_id.as_str() == w).map(|a| a.state);
    assert_eq!((state("w-a"), state("w-b")), (Some(AgentState::Up), Some(AgentState::Down)));
    let reply: CollectResponse = s.master.post("/v1/collect", &CollectRequest::default()).await.expect("collect");
    assert_eq!(reply.agents.iter().filter(|a| a.status == CollectStatus::Down).count(), 3);

    let unknown = HeartbeatRequest { worker_id: "w-zzz".parse().expect("id"), latest_cursor: Cursor(0), address: None };
    let err = s.agent.post::<_, RegisterResponse>("/v1/agents/heartbeat", &unknown).await.unwrap_err();
    assert_eq!(err.status(), Some(StatusCode::NOT_FOUND));
    assert!(agent_a.stop(STOP).await && agent_b.stop(STOP).await);
    assert!(s.server.stop(STOP).await);
}

#[tokio::test]
async fn rollups_fan_out_to_every_agent_and_say_which_returned_none() {
    let dir = tempfile::tempdir().expect("dir");
    let (_storage, url) = fake_storage().await;
    let s = start(config(dir.path(), &url, "")).await;
    let (agent, agent_url) = real_agent(dir.path(), "w-a", 3).await;
    let free = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let dead_url = format!("http://{}", free.local_addr().expect("addr"));
    drop(free);
    for (w, u) in [("w-a", &agent_url), ("w-dead", &dead_url)] {
        let _: RegisterResponse = s.agent.post("/v1/agents/register", &register(w, u)).await.expect("register");
    }
    let hour = recent_hour_ms();
    let request = RollupsCollectRequest {
        from_ms: hour,
        to_ms: hour + 3_600_000,
        agent_deadline_ms: Some(2_000),
        workers: vec![],
    };
    let reply: RollupsCollectResponse = s.master.post("/v1/collect/rollups", &request).await.expect("rollups");
    let by = |w: &str| reply.agents.iter().find(|a| a.worker_id.as_str() == w).expect("every agent answers");
    let a = by("w-a");
    assert_eq!(a.status, CollectStatus::Ok, "{:?}", a.error);
    assert_eq!(a.rollups.len(), 3, "one row per partition of the hour");
    assert!(a.rollups.iter().all(|r| r.hour_start_ms == hour && r.read_ops == 30 && r.sample_count == 3));
    assert_eq!(by("w-dead").status, CollectStatus::Error);
    assert!(by("w-dead").rollups.is_empty());
    // Named agents only (the master's catch-up of one worker): the others are not asked.
    let only = RollupsCollectRequest { workers: vec!["w-a".parse().expect("id")], ..request.clone() };
    let reply: RollupsCollectResponse = s.master.post("/v1/collect/rollups", &only).await.expect("rollups");
    assert_eq!(reply.agents.iter().map(|a| a.worker_id.as_str()).collect::<Vec<_>>(), ["w-a"]);
    assert_eq!(reply.agents[0].rollups.len(), 3);
    // The master's route: an agent token may not read every agent's history.
    let err = s.agent.post::<_, RollupsCollectResponse>("/v1/collect/rollups", &request).await.unwrap_err();
    assert_eq!(err.status(), Some(StatusCode::FORBIDDEN));
    assert!(agent.stop(STOP).await);
    assert!(s.server.stop(STOP).await);
}

#[tokio::test]
async fn auth_needs_a_known_token_with_the_right_role() {
    let dir = tempfile::tempdir().expect("dir");
    let (_storage, url) = fake_storage().await;
    let s = start(config(dir.path(), &url, "")).await;
    let req = action("auth-1", split("p1"), "acme");
    let status = |r: Result<ActionRecord, lb_common::http::ClientError>| r.err().and_then(|e| e.status());
    assert_eq!(status(s.anonymous.post("/v1/actions", &req).await), Some(StatusCode::UNAUTHORIZED));
    let wrong = s.anonymous.clone().with_bearer_token("test-master-token-000002");
    assert_eq!(status(wrong.post("/v1/actions", &req).await), Some(StatusCode::UNAUTHORIZED));
    assert_eq!(status(s.viewer.post("/v1/actions", &req).await), Some(StatusCode::FORBIDDEN));
    // Only agents register: not operators, nor the master (issue 17 item 12).
    for (who, client) in [("an operator", &s.sre), ("the master", &s.master)] {
        let err = client
            .post::<_, RegisterResponse>("/v1/agents/register", &register("w-x", "http://127.0.0.1:1"))
            .await
            .unwrap_err();
        assert_eq!(err.status(), Some(StatusCode::FORBIDDEN), "{who} is not an agent");
    }
    let err =
        s.master.post::<_, serde_json::Value>("/v1/halt", &serde_json::json!({"halted": true})).await.unwrap_err();
    assert_eq!(err.status(), Some(StatusCode::FORBIDDEN), "only operators halt");
    // The error body never echoes a token.
    if let Err(lb_common::http::ClientError::Status { body, .. }) =
        wrong.post::<_, ActionRecord>("/v1/actions", &req).await
    {
        assert!(!body.error.contains("test-master-token"), "{}", body.error);
    }
    let record: ActionRecord = s.sre.post("/v1/actions", &req).await.expect("operator may submit");
    assert_eq!(record.submitted_by, "sre");
    let _: AgentsResponse = s.viewer.get("/v1/agents").await.expect("viewer may read");
    // Observability stays open.
    let live = reqwest::get(format!("http://{}/metrics", s.server.addr())).await.expect("metrics");
    assert_eq!(live.status(), StatusCode::OK);
    let metrics = live.text().await.expect("text");
    assert!(metrics.contains("lb_http_requests_total"), "{metrics}");
    assert!(s.server.stop(STOP).await);
}

/// Issue 17 item 12: re-registering a live worker id at another address redirected its
/// collection there, and the real agent's heartbeats did not repair it.
#[tokio::test]
async fn a_live_agents_id_cannot_be_registered_at_another_address() {
    let dir = tempfile::tempdir().expect("dir");
    let (_storage, url) = fake_storage().await;
    let s = start(config(dir.path(), &url, "")).await;
    let (agent, agent_url) = real_agent(dir.path(), "w-a", 1).await;
    let _: RegisterResponse =
        s.agent.post("/v1/agents/register", &register("w-a", &agent_url)).await.expect("register");
    let err = s
        .agent
        .post::<_, RegisterResponse>("/v1/agents/register", &register("w-a", "http://127.0.0.1:1"))
        .await
        .expect_err("the id is live elsewhere");
    assert!(
        matches!(&err, lb_common::http::ClientError::Status { status, body, .. }
            if status.as_u16() == 409 && body.code == "conflict" && body.error.contains(&agent_url)),
        "409 naming the live address: {err}"
    );
    let reply: CollectResponse = s.master.post("/v1/collect", &CollectRequest::default()).await.expect("collect");
    assert_eq!((reply.agents[0].status, reply.agents[0].samples.len()), (CollectStatus::Ok, 3), "still the real one");
    // A restart at the same address registers again at once.
    let _: RegisterResponse = s.agent.post("/v1/agents/register", &register("w-a", &agent_url)).await.expect("again");
    // Once its heartbeats stop for down_after_ms (500 ms here), the id may move.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let _: RegisterResponse =
        s.agent.post("/v1/agents/register", &register("w-a", "http://127.0.0.1:1")).await.expect("moved");
    // The agent at the first address heartbeats again: it does not keep the other entry alive,
    // it is told where its id is registered now.
    let beat = HeartbeatRequest {
        worker_id: "w-a".parse().expect("id"),
        latest_cursor: Cursor(3),
        address: Some(agent_url.clone()),
    };
    let err =
        s.agent.post::<_, RegisterResponse>("/v1/agents/heartbeat", &beat).await.expect_err("registered elsewhere");
    assert!(
        matches!(&err, lb_common::http::ClientError::Status { status, body, .. }
            if status.as_u16() == 409 && body.error.contains("http://127.0.0.1:1") && body.error.contains(&agent_url)),
        "409 naming both addresses: {err}"
    );
    assert!(agent.stop(STOP).await);
    assert!(s.server.stop(STOP).await);
}

/// Issue 29: an agent whose worker id is no worker of the storage, or whose partitions carry
/// another tenant, registers (it is not refused) but is told so, naming both values; the
/// registry listing and every collection round carry the warnings on to the master.
#[tokio::test]
async fn a_registration_that_does_not_fit_the_topology_is_told_and_listed() {
    let dir = tempfile::tempdir().expect("dir");
    let (_storage, url) = fake_storage().await;
    let s = start(config(dir.path(), &url, "")).await;
    let fits = RegisterRequest { tenant: Some("acme".parse().expect("id")), ..register("w-1", "http://127.0.0.1:1") };
    let reply: RegisterResponse = s.agent.post("/v1/agents/register", &fits).await.expect("register");
    assert_eq!(reply.warnings, Vec::<String>::new(), "w-1 of tenant acme is what the storage has");
    let wrong =
        RegisterRequest { tenant: Some("cache-eu1".parse().expect("id")), ..register("w-9", "http://127.0.0.1:2") };
    let reply: RegisterResponse = s.agent.post("/v1/agents/register", &wrong).await.expect("registered all the same");
    let [worker, tenant] = &reply.warnings[..] else { panic!("two warnings: {:?}", reply.warnings) };
    assert!(worker.contains("worker_id w-9") && worker.contains("w-1, w-2, w-3, w-4"), "{worker}");
    assert!(tenant.contains("cache-eu1") && tenant.contains("under acme"), "{tenant}");
    let agents: AgentsResponse = s.viewer.get("/v1/agents").await.expect("agents");
    let listed = |w: &str| agents.agents.iter().find(|a| a.worker_id.as_str() == w).map(|a| a.warnings.len());
    assert_eq!((listed("w-1"), listed("w-9")), (Some(0), Some(2)));
    let round: CollectResponse = s.master.post("/v1/collect", &CollectRequest::default()).await.expect("collect");
    let carried = round.agents.iter().find(|a| a.worker_id.as_str() == "w-9").expect("w-9 is asked");
    assert_eq!(carried.warnings, reply.warnings);
    assert!(s.server.stop(STOP).await);
}

#[tokio::test]
async fn rate_limit_answers_429() {
    let dir = tempfile::tempdir().expect("dir");
    let (_storage, url) = fake_storage().await;
    let s = start(config(dir.path(), &url, "[limits]\nrequests_per_sec = 5\n")).await;
    let mut statuses = Vec::new();
    for _ in 0..12 {
        statuses.push(s.viewer.get::<AgentsResponse>("/v1/agents").await.err().and_then(|e| e.status()));
    }
    assert!(statuses.contains(&Some(StatusCode::TOO_MANY_REQUESTS)), "{statuses:?}");
    assert!(statuses[..5].iter().all(Option::is_none), "the burst allowance is served");
    assert!(s.server.stop(STOP).await);
}
