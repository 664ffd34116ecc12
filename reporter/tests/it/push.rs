//! The push: to a real lb-agent started in-process (through its downtime), and to a scripted
//! agent that fails first tries and refuses one report, to see retries and drops exactly.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use lb_agent::config::AgentConfig;
use lb_common::clients::AgentClient;
use lb_common::config::shared::HttpClientConfig;
use lb_common::http::HttpClient;
use lb_common::ids::{Key, KeyRange};
use lb_common::protocol::{Report, ReportAck, SampleData, SamplesQuery};
use lb_reporter::{Backoff, Op, Outcome, Reporter, ReporterConfig, ReporterStats};

use crate::support::{partition, worker};

fn config(agent: SocketAddr) -> ReporterConfig {
    let mut config = ReporterConfig::new(worker(), format!("http://{agent}"));
    config.report_interval = Duration::from_millis(100);
    config.max_pending_reports = 5;
    config.retry = Backoff { initial: Duration::from_millis(20), max: Duration::from_millis(200) };
    config.http = HttpClientConfig { connect_timeout_ms: 200, deadline_ms: 2_000 };
    config
}

async fn start_agent(dir: &Path, listener: tokio::net::TcpListener) -> lb_agent::RunningAgent {
    let text = format!(
        "worker_id = \"{}\"\n[http]\nlisten = \"127.0.0.1:0\"\n[store]\npath = \"{}\"\n[host]\nenabled = false\n",
        worker(),
        dir.join("agent.sqlite").display()
    );
    let config: AgentConfig = lb_common::config::parse(&text, Path::new("agent.toml")).expect("agent config");
    let (_tx, rx) = tokio::sync::watch::channel(Arc::new(config));
    lb_agent::start(rx, listener, None).await.expect("agent starts")
}

/// Polls `stats` until `done` holds (10 s at most).
async fn wait_for(reporter: &Reporter, what: &str, done: impl Fn(&ReporterStats) -> bool) -> ReporterStats {
    for _ in 0..1_000 {
        let stats = reporter.stats();
        if done(&stats) {
            return stats;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{what}: not reached, {:?}", reporter.stats());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_wait_out_the_agents_downtime_up_to_their_bound_then_arrive() {
    // A port with nothing behind it yet: the agent is down when the reporter starts.
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = port.local_addr().expect("addr");
    drop(port);
    let reporter = Reporter::start(config(addr)).expect("starts");
    let handle = reporter.handle();
    let slot = handle.upsert_partition(partition("acme.orders.p1", KeyRange::FULL));
    let recorder = handle.recorder();

    let down = wait_for(&reporter, "outbox overflows", |s| s.reports_dropped_total >= 3).await;
    assert_eq!(down.reports_acked_total, 0);
    assert!(down.push_retries_total > 0 && down.pending_reports <= 5, "{down:?}");

    let dir = tempfile::tempdir().expect("tempdir");
    let agent = start_agent(dir.path(), tokio::net::TcpListener::bind(addr).await.expect("rebind")).await;
    let up = wait_for(&reporter, "backlog delivered", |s| s.reports_acked_total >= 5 && s.pending_reports <= 1).await;
    assert!(up.reports_rejected_total == 0, "{up:?}");

    for i in 0..1_000u64 {
        recorder.record(slot, Key(i << 40), Op::Read, 64, Duration::from_micros(100), Outcome::Ok);
    }
    let client = AgentClient::from_http(HttpClient::new(format!("http://{addr}"), &HttpClientConfig::default()));
    let mut read_ops = 0;
    for _ in 0..200 {
        let page =
            client.samples(&SamplesQuery { after: Default::default(), limit: Some(10_000) }).await.expect("samples");
        read_ops = page
            .samples
            .iter()
            .filter_map(|s| match &s.data {
                SampleData::Partition(p) if p.partition_id.as_str() == "acme.orders.p1" => Some(p.read_ops),
                _ => None,
            })
            .sum::<u64>();
        if read_ops >= 1_000 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(read_ops, 1_000, "every recorded op reached the agent exactly once");
    let flushed = tokio::task::spawn_blocking(move || reporter.shutdown()).await.expect("join");
    assert!(flushed, "shutdown pushed the last interval");
    agent.stop(Duration::from_secs(5)).await;
}

/// What the scripted agent saw: `(seq, timestamp_ms)` of every try, in order.
type Seen = Arc<Mutex<Vec<(u64, i64)>>>;

/// Fails the first try of every report with 503, acknowledges the second as a duplicate (as
/// an agent that stored the first try would), and refuses report 3 as invalid.
async fn scripted(State(seen): State<Seen>, Json(report): Json<Report>) -> Response {
    let mut seen = seen.lock().expect("lock");
    let tries = seen.iter().filter(|&&(seq, _)| seq == report.seq).count();
    seen.push((report.seq, report.timestamp_ms));
    let error = |status: StatusCode, code: &str| {
        (status, Json(serde_json::json!({"error": "scripted", "code": code}))).into_response()
    };
    match (report.seq, tries) {
        (3, _) => error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_field"),
        (_, 0) => error(StatusCode::SERVICE_UNAVAILABLE, "not_ready"),
        _ => Json(ReportAck { worker_id: report.worker_id, seq: report.seq, duplicate: true }).into_response(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_repeats_seq_and_timestamp_and_a_refused_report_is_dropped() {
    let seen: Seen = Arc::default();
    let app = axum::Router::new().route("/v1/report", axum::routing::post(scripted)).with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let reporter = Reporter::start(config(addr)).expect("starts");
    reporter.handle().upsert_partition(partition("acme.orders.p1", KeyRange::FULL));
    let stats = wait_for(&reporter, "five reports acknowledged", |s| s.reports_acked_total >= 5).await;
    assert_eq!(stats.reports_rejected_total, 1, "{stats:?}");
    assert_eq!(stats.reports_duplicate_total, stats.reports_acked_total);
    let seen = seen.lock().expect("lock").clone();
    for seq in 1..=6u64 {
        let tries: Vec<_> = seen.iter().filter(|t| t.0 == seq).collect();
        match seq {
            3 => assert_eq!(tries.len(), 1, "a refused report is not retried: {seen:?}"),
            6 => assert!(!tries.is_empty(), "{seen:?}"),
            _ => {
                assert_eq!(tries.len(), 2, "report {seq}: one failed try, one retry: {seen:?}");
                assert_eq!(tries[0], tries[1], "a retry repeats seq and timestamp");
            }
        }
    }
    // Oldest first: every try of a report comes before the first try of the next one.
    assert!(seen.windows(2).all(|w| w[0].0 <= w[1].0), "{seen:?}");
    drop(reporter);
    server.abort();
}
