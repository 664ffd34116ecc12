//! Shared helpers: agent configs on temp files, generated reports, a started agent.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use lb_agent::RunningAgent;
use lb_agent::config::AgentConfig;
use lb_common::config::shared::HttpClientConfig;
use lb_common::http::HttpClient;
use lb_common::ids::{Key, KeyRange};
use lb_common::protocol::{KeySketch, PartitionStats, Report, SamplesQuery, SamplesResponse, TopKey};
use tokio::sync::watch;

pub const WORKER: &str = "w-1";

/// Config text for an agent storing in `dir`, with an optional `[ops_server]` url.
pub fn config_text(dir: &Path, ops_server: Option<&str>) -> String {
    let mut text = format!(
        "worker_id = \"{WORKER}\"\n\
         [http]\nlisten = \"127.0.0.1:0\"\nbody_limit_bytes = 65536\n\
         [store]\npath = \"{}\"\nrollup_flush_interval_ms = 100\n\
         [host]\nenabled = false\n\
         [serve]\nmax_samples_per_page = 500\n",
        dir.join("agent.sqlite").display()
    );
    if let Some(url) = ops_server {
        text.push_str(&format!("[ops_server]\nurl = \"{url}\"\n"));
    }
    text
}

pub fn config(dir: &Path, ops_server: Option<&str>) -> AgentConfig {
    let text = config_text(dir, ops_server);
    lb_common::config::parse(&text, Path::new("test.toml")).expect("test config is valid")
}

pub async fn start(config: AgentConfig) -> (RunningAgent, watch::Sender<Arc<AgentConfig>>, HttpClient) {
    let (tx, rx) = watch::channel(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let agent = lb_agent::start(rx, listener, None).await.expect("agent starts");
    let client = HttpClient::new(format!("http://{}", agent.addr()), &HttpClientConfig::default());
    (agent, tx, client)
}

/// Where the test reports' times start: on an hour, four days ago — within the agent's raw
/// retention (seven days), and far enough back that `seq` seconds after it (a crash test sends
/// a few hundred thousand) stay in the past. The same for every test of this binary.
pub fn base_ms() -> i64 {
    static BASE: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *BASE.get_or_init(|| {
        let now = chrono::Utc::now().timestamp_millis();
        now - now.rem_euclid(3_600_000) - 4 * 86_400_000
    })
}

/// A valid report with `partitions` partitions; values depend on `seq` so every sample differs.
pub fn report(seq: u64, partitions: usize) -> Report {
    let width = u64::MAX / partitions as u64;
    Report {
        worker_id: WORKER.parse().expect("id"),
        seq,
        timestamp_ms: base_ms() + seq as i64 * 1000,
        interval_ms: 1000,
        partitions: (0..partitions)
            .map(|i| {
                let start = width * i as u64;
                PartitionStats {
                    tenant: "acme".parse().expect("id"),
                    table: "orders".parse().expect("id"),
                    partition_id: format!("orders.p{i:05}").parse().expect("id"),
                    key_range: KeyRange { start: Key(start), end: Key(start + width - 1) },
                    read_ops: seq * 10 + i as u64,
                    write_ops: seq,
                    read_bytes: 4096,
                    write_bytes: 1024,
                    errors: 0,
                    rejected: i as u64 % 3,
                    latency_p50_us: 100.0,
                    latency_p99_us: 900.0 + seq as f64,
                    cpu_time_us: 700,
                    stored_bytes: 1 << 30,
                    sketch: Some(KeySketch {
                        bucket_ops: vec![seq, 2, 3, 4],
                        bucket_bounds: Vec::new(),
                        top_keys: vec![TopKey { key: Key(start + 7), share_ratio: 0.1 }],
                        sequential_write_ratio: 0.0,
                    }),
                }
            })
            .collect(),
        host: None,
    }
}

/// Pulls every sample after `after`, page by page, the way the ops server does.
pub async fn pull_all(client: &HttpClient, mut after: u64) -> (Vec<lb_common::protocol::Sample>, u64, bool) {
    let mut all = Vec::new();
    let mut any_gap = false;
    loop {
        let page: SamplesResponse = client
            .get_with_query(
                "/v1/samples",
                &SamplesQuery { after: lb_common::protocol::Cursor(after), limit: Some(200) },
            )
            .await
            .expect("samples");
        any_gap |= page.gap;
        after = page.next_cursor.0;
        let more = page.more;
        all.extend(page.samples);
        if !more {
            return (all, after, any_gap);
        }
    }
}

pub const STOP: Duration = Duration::from_secs(20);
