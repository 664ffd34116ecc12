//! Every sample an agent serves appears in the master's table exactly once — across an agent
//! restart and an ops server outage — and the read API answers from it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use lb_common::config::shared::HttpClientConfig;
use lb_common::http::HttpClient;
use lb_common::ids::{Key, KeyRange, PartitionId};
use lb_common::protocol::*;
use lb_master::table::Metric;
use tokio::sync::watch;

const STOP: Duration = Duration::from_secs(20);

fn parse<C: lb_common::config::ServiceConfig>(text: &str) -> C {
    lb_common::config::parse(text, Path::new("test.toml")).expect("valid test config")
}

async fn start_ops(dir: &Path, listen: SocketAddr) -> lb_ops_server::RunningOpsServer {
    let config: lb_ops_server::config::OpsServerConfig = parse(&format!(
        "[http]\nlisten = \"{listen}\"\n[audit]\npath = \"{}\"\n[storage]\nurl = \"http://127.0.0.1:9\"\n\
         [registry]\nheartbeat_interval_ms = 100\ndown_after_ms = 2000\n[limits]\nrequests_per_sec = 100000\n",
        dir.join("ops.sqlite").display()
    ));
    let (_tx, rx) = watch::channel(Arc::new(config));
    let listener = tokio::net::TcpListener::bind(listen).await.expect("bind ops server");
    lb_ops_server::start(rx, listener, None).await.expect("ops server")
}

async fn start_agent(dir: &Path, worker: &str, ops_url: &str) -> (lb_agent::RunningAgent, HttpClient) {
    let config: lb_agent::config::AgentConfig = parse(&format!(
        "worker_id = \"{worker}\"\n[http]\nlisten = \"127.0.0.1:0\"\n[store]\npath = \"{}\"\n\
         [host]\nenabled = false\n[ops_server]\nurl = \"{ops_url}\"\n",
        dir.join(format!("{worker}.sqlite")).display()
    ));
    let (_tx, rx) = watch::channel(Arc::new(config));
    let agent = lb_agent::start(rx, tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind"), None)
        .await
        .expect("agent");
    let client = HttpClient::new(format!("http://{}", agent.addr()), &HttpClientConfig::default());
    (agent, client)
}

/// Sends one report of three partitions to `worker`'s agent and adds what it sent to `sent`.
async fn report(client: &HttpClient, worker: &str, seq: u64, sent: &mut BTreeMap<PartitionId, u64>) {
    let partitions: Vec<PartitionStats> = (0..3u64)
        .map(|i| {
            let ops = 100 * (i + 1) + seq;
            PartitionStats {
                tenant: "acme".parse().expect("id"),
                table: "orders".parse().expect("id"),
                partition_id: format!("{worker}.p{i}").parse().expect("id"),
                key_range: KeyRange { start: Key(i << 60), end: Key(((i + 1) << 60) - 1) },
                read_ops: ops,
                write_ops: 0,
                read_bytes: ops * 10,
                write_bytes: 0,
                errors: 0,
                rejected: 0,
                latency_p50_us: 100.0,
                latency_p99_us: 500.0,
                cpu_time_us: 1_000,
                stored_bytes: 1 << 20,
                sketch: None,
            }
        })
        .collect();
    for p in &partitions {
        *sent.entry(p.partition_id.clone()).or_default() += p.read_ops;
    }
    let report = Report {
        worker_id: worker.parse().expect("id"),
        seq,
        timestamp_ms: chrono::Utc::now().timestamp_millis(),
        interval_ms: 1000,
        partitions,
        host: None,
    };
    let ack: ReportAck = client.post("/v1/report", &report).await.expect("agent accepts the report");
    assert!(!ack.duplicate);
}

async fn wait_until(what: &str, mut cond: impl AsyncFnMut() -> bool) {
    let started = tokio::time::Instant::now();
    while !cond().await {
        assert!(started.elapsed() < Duration::from_secs(30), "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn agents_up(ops: &HttpClient, n: usize) -> bool {
    ops.get::<AgentsResponse>("/v1/agents")
        .await
        .is_ok_and(|a| a.agents.iter().filter(|a| a.state == AgentState::Up).count() == n)
}

#[tokio::test]
async fn every_served_sample_lands_in_the_table_exactly_once() {
    lb_common::telemetry::metrics_handle();
    let dir = tempfile::tempdir().expect("dir");
    let ops_addr = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("probe");
        probe.local_addr().expect("addr")
    };
    let ops_url = format!("http://{ops_addr}");
    let ops_client = HttpClient::new(&ops_url, &HttpClientConfig::default());
    let ops = start_ops(dir.path(), ops_addr).await;
    let (agent_a, client_a) = start_agent(dir.path(), "w-a", &ops_url).await;
    let (agent_b, client_b) = start_agent(dir.path(), "w-b", &ops_url).await;
    wait_until("both agents registered", async || agents_up(&ops_client, 2).await).await;

    let master_config: lb_master::config::MasterConfig = parse(&format!(
        "[http]\nlisten = \"127.0.0.1:0\"\n[ops_server]\nurl = \"{ops_url}\"\n[store]\npath = \"{}\"\n\
         [collector]\ninterval_ms = 100\nstale_after_ms = 1000\ntopology_interval_ms = 3600000\n",
        dir.path().join("master.sqlite").display()
    ));
    let (_tx, rx) = watch::channel(Arc::new(master_config));
    let master = lb_master::start(rx, tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind"), None)
        .await
        .expect("master");
    let api = HttpClient::new(format!("http://{}", master.addr()), &HttpClientConfig::default());

    let mut sent = BTreeMap::new();
    let mut seq = 0;
    for _ in 0..5 {
        seq += 1;
        report(&client_a, "w-a", seq, &mut sent).await;
        report(&client_b, "w-b", seq, &mut sent).await;
    }

    // An agent restart: same store, new port; it registers again and its cursors carry on.
    assert!(agent_a.stop(STOP).await);
    let (agent_a, client_a) = start_agent(dir.path(), "w-a", &ops_url).await;
    for _ in 0..5 {
        seq += 1;
        report(&client_a, "w-a", seq, &mut sent).await;
        report(&client_b, "w-b", seq, &mut sent).await;
    }

    // An ops server outage: the agents keep accepting, the master retries and marks data stale.
    assert!(ops.stop(STOP).await);
    for _ in 0..5 {
        seq += 1;
        report(&client_a, "w-a", seq, &mut sent).await;
        report(&client_b, "w-b", seq, &mut sent).await;
    }
    wait_until("the master to notice the outage", async || {
        api.get::<serde_json::Value>("/api/v1/collector").await.is_ok_and(|s| s["stale"] == true)
    })
    .await;
    let ops = start_ops(dir.path(), ops_addr).await;
    wait_until("agents registered again", async || agents_up(&ops_client, 2).await).await;
    for _ in 0..3 {
        seq += 1;
        report(&client_a, "w-a", seq, &mut sent).await;
        report(&client_b, "w-b", seq, &mut sent).await;
    }

    // Caught up: the master's cursor for each worker is the agent's newest.
    let latest = |agent: &lb_agent::RunningAgent| agent.store().latest_cursor();
    let (latest_a, latest_b) = (latest(&agent_a), latest(&agent_b));
    wait_until("the master to catch up", async || {
        let status: serde_json::Value = api.get("/api/v1/collector").await.expect("collector status");
        status["agents"]["w-a"]["cursor"] == latest_a.0 && status["agents"]["w-b"]["cursor"] == latest_b.0
    })
    .await;

    // Exactly once: each partition's summed ops in the table equal what was sent (the 1 s ring
    // is exact to 0.015 %; a duplicate or a loss would be off by a whole report).
    let now = chrono::Utc::now().timestamp_millis();
    {
        let table = master.shared.table.read().expect("table");
        for (partition, total) in &sent {
            let stats = table.window(partition, Metric::Ops, Duration::from_secs(75), now).expect("partition in table");
            let error = (stats.sum - *total as f64).abs() / *total as f64;
            assert!(error < 0.001, "{partition}: table has {} ops, agents served {total}", stats.sum);
        }
    }

    // The read API answers from the same table and states its window.
    let top: serde_json::Value = api.get("/api/v1/top?metric=ops&n=3&window_secs=60").await.expect("top");
    assert_eq!(top["window_secs"], 60.0);
    assert_eq!(top["entries"].as_array().map(Vec::len), Some(3));
    let overview: serde_json::Value = api.get("/api/v1/overview?metric=ops&window_secs=60").await.expect("overview");
    assert_eq!(overview["workers"].as_array().map(Vec::len), Some(2));
    let history: serde_json::Value = api.get("/api/v1/partitions/w-a.p2/history?metric=ops").await.expect("history");
    assert!(!history["points"].as_array().expect("points").is_empty());
    let err = api.get::<serde_json::Value>("/api/v1/top?metric=nonsense").await.unwrap_err();
    assert_eq!(err.status(), Some(reqwest::StatusCode::BAD_REQUEST));

    assert!(master.stop(STOP).await);
    assert!(agent_a.stop(STOP).await && agent_b.stop(STOP).await);
    assert!(ops.stop(STOP).await);
}
