//! Load command for lb-agent, run in one go (figures go to `docs/benchmarks.md`):
//!
//! ```text
//! cargo build --release -p lb-agent --bins --examples && target/release/examples/agent_load
//! ```
//!
//! 1. SQLite insert rate: the MetricStore's writer path in-process (no HTTP), reports of 1,000
//!    partitions, rows committed per second.
//! 2. Sustained ingest over HTTP: the real `lb-agent` binary as its own process on loopback,
//!    this process as the load generator (same machine, same run), `STREAMS` concurrent
//!    connections posting 1,000-partition reports with sketches; partition-stats acknowledged
//!    (hence committed) per second.
//! 3. Memory: a fresh `lb-agent` process fed 10,000-partition reports one simulated second
//!    apart until its whole window (120 s by default) has been filled and rolled; its RSS.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lb_agent::config::AgentConfig;
use lb_common::ids::{Key, KeyRange};
use lb_common::protocol::{KeySketch, PartitionStats, Report, TopKey};

const STREAMS: usize = 4;
const HTTP_PARTITIONS: usize = 1_000;
const HTTP_SECS: u64 = 20;
const RSS_PARTITIONS: usize = 10_000;
const RSS_REPORTS: u64 = 150;
/// A day ago: within the agent's raw retention (it refuses older reports), and in the past
/// for the few hundred thousand seconds the reports count up.
fn base_ts_ms() -> i64 {
    static BASE: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *BASE.get_or_init(|| chrono::Utc::now().timestamp_millis() - 86_400_000)
}

fn report(worker: &str, seq: u64, partitions: usize) -> Report {
    let width = u64::MAX / partitions as u64;
    Report {
        worker_id: worker.parse().expect("id"),
        seq,
        timestamp_ms: base_ts_ms() + seq as i64 * 1000,
        interval_ms: 1000,
        partitions: (0..partitions)
            .map(|i| {
                let start = width * i as u64;
                PartitionStats {
                    tenant: format!("tenant-{}", i % 10).parse().expect("id"),
                    table: format!("table-{}", i % 100).parse().expect("id"),
                    partition_id: format!("p{i:06}").parse().expect("id"),
                    key_range: KeyRange { start: Key(start), end: Key(start + width - 1) },
                    read_ops: 1000 + i as u64,
                    write_ops: 200,
                    read_bytes: 1 << 20,
                    write_bytes: 1 << 18,
                    errors: 0,
                    rejected: 0,
                    latency_p50_us: 250.0,
                    latency_p99_us: 4000.0,
                    cpu_time_us: 30_000,
                    stored_bytes: 1 << 30,
                    sketch: Some(KeySketch {
                        bucket_ops: vec![100, 150, 120, 130, 200, 180, 160, 160],
                        bucket_bounds: Vec::new(),
                        top_keys: vec![TopKey { key: Key(start + 1), share_ratio: 0.05 }],
                        sequential_write_ratio: 0.01,
                    }),
                }
            })
            .collect(),
        host: None,
    }
}

/// A report body whose `seq` and `timestamp_ms` can be swapped in without re-serialising.
struct BodyTemplate {
    before_seq: String,
    between: String,
    after_ts: String,
}

impl BodyTemplate {
    fn new(worker: &str, partitions: usize) -> Self {
        let json = serde_json::to_string(&report(worker, 424_242_424, partitions)).expect("json");
        let ts = (base_ts_ms() + 424_242_424 * 1000).to_string();
        let (before_seq, rest) = json.split_once("424242424").expect("seq in body");
        let (between, after_ts) = rest.split_once(&ts).expect("ts in body");
        Self { before_seq: before_seq.to_owned(), between: between.to_owned(), after_ts: after_ts.to_owned() }
    }

    fn body(&self, seq: u64) -> String {
        format!("{}{seq}{}{}{}", self.before_seq, self.between, base_ts_ms() + seq as i64 * 1000, self.after_ts)
    }
}

fn agent_config_text(dir: &Path, worker: &str) -> String {
    format!(
        "worker_id = \"{worker}\"\n[http]\nlisten = \"127.0.0.1:0\"\n[log]\nfilter = \"warn\"\n\
         [store]\npath = \"{}\"\n[host]\nenabled = false\n",
        dir.join("agent.sqlite").display()
    )
}

fn agent_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("own path");
    let dir = exe.parent().and_then(Path::parent).expect("target/<profile>/examples");
    let bin = dir.join("lb-agent");
    assert!(bin.exists(), "{} missing: run `cargo build --release -p lb-agent --bins --examples` first", bin.display());
    bin
}

fn spawn_agent(config: &Path) -> (Child, String) {
    let mut child = Command::new(agent_binary())
        .arg("--config")
        .arg(config)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start lb-agent");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("listening line");
    let url = line.split_whitespace().last().expect("url").to_owned();
    (child, url)
}

fn rss_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .expect("rss field")
}

async fn sqlite_insert_rate(dir: &Path) -> f64 {
    let config: AgentConfig =
        lb_common::config::parse(&agent_config_text(dir, "w-sql"), Path::new("load.toml")).expect("config");
    let (_tx, rx) = tokio::sync::watch::channel(Arc::new(config));
    let store =
        tokio::task::spawn_blocking(move || lb_agent::store::MetricStore::open(rx)).await.expect("task").expect("open");
    let reports: Vec<Report> = (1..=200).map(|seq| report("w-sql", seq, 1_000)).collect();
    let started = Instant::now();
    let rows = reports.iter().map(|r| r.partitions.len() as u64).sum::<u64>();
    // Concurrent submitters, as HTTP handlers would be: the writer groups them into commits.
    let store = Arc::new(store);
    let mut tasks = Vec::new();
    for chunk in reports.chunks(50) {
        let (store, chunk) = (store.clone(), chunk.to_vec());
        tasks.push(tokio::spawn(async move {
            for r in chunk {
                store.write_report(r).await.expect("write");
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    let rate = rows as f64 / started.elapsed().as_secs_f64();
    store.close().await;
    let file_bytes: u64 = std::fs::read_dir(dir)
        .expect("dir")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("agent.sqlite"))
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum();
    println!(
        "  sqlite file: {} bytes for {rows} samples, {:.0} bytes a sample",
        file_bytes,
        file_bytes as f64 / rows as f64
    );
    rate
}

async fn http_ingest(dir: &Path) -> (f64, u64) {
    let config = dir.join("agent.toml");
    std::fs::write(&config, agent_config_text(dir, "w-http")).expect("config");
    let (mut child, url) = spawn_agent(&config);
    let client = reqwest::Client::new();
    let template = Arc::new(BodyTemplate::new("w-http", HTTP_PARTITIONS));
    let acked = Arc::new(AtomicU64::new(0));
    let next_seq = Arc::new(AtomicU64::new(1));
    let deadline = Instant::now() + Duration::from_secs(HTTP_SECS);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..STREAMS {
        let (client, url, template, acked, next_seq) =
            (client.clone(), url.clone(), template.clone(), acked.clone(), next_seq.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                let seq = next_seq.fetch_add(1, Ordering::Relaxed);
                let reply = client
                    .post(format!("{url}/v1/report"))
                    .header("content-type", "application/json")
                    .body(template.body(seq))
                    .send()
                    .await
                    .expect("agent reachable");
                assert!(reply.status().is_success(), "status {}", reply.status());
                let ack: serde_json::Value = reply.json().await.expect("ack");
                assert_eq!(ack["duplicate"], false);
                acked.fetch_add(HTTP_PARTITIONS as u64, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        t.await.expect("stream");
    }
    let elapsed = started.elapsed().as_secs_f64();
    let peak_kib = rss_kib(child.id(), "VmHWM:");
    child.kill().expect("kill");
    child.wait().expect("reap");
    (acked.load(Ordering::Relaxed) as f64 / elapsed, peak_kib)
}

async fn window_rss(dir: &Path) -> (u64, u64, f64) {
    let config = dir.join("agent.toml");
    std::fs::write(&config, agent_config_text(dir, "w-rss")).expect("config");
    let (mut child, url) = spawn_agent(&config);
    let client = reqwest::Client::new();
    let template = BodyTemplate::new("w-rss", RSS_PARTITIONS);
    let started = Instant::now();
    for seq in 1..=RSS_REPORTS {
        let reply = client
            .post(format!("{url}/v1/report"))
            .header("content-type", "application/json")
            .body(template.body(seq))
            .send()
            .await
            .expect("agent reachable");
        assert!(reply.status().is_success(), "status {}", reply.status());
    }
    let rate = (RSS_REPORTS as usize * RSS_PARTITIONS) as f64 / started.elapsed().as_secs_f64();
    let rss = rss_kib(child.id(), "VmRSS:");
    let peak = rss_kib(child.id(), "VmHWM:");
    let metrics = client.get(format!("{url}/metrics")).send().await.expect("metrics").text().await.expect("text");
    let gauge = |name: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().last())
            .unwrap_or("?")
            .to_owned()
    };
    println!(
        "  window holds {} samples in {} estimated bytes (bounded by window.max_bytes)",
        gauge("lb_agent_window_samples"),
        gauge("lb_agent_window_bytes")
    );
    child.kill().expect("kill");
    child.wait().expect("reap");
    (rss, peak, rate)
}

#[tokio::main]
async fn main() {
    let sql_dir = tempfile::tempdir().expect("dir");
    let rate = sqlite_insert_rate(sql_dir.path()).await;
    println!("sqlite insert rate (writer path, 200 reports x 1,000 partitions): {rate:.0} rows/s");

    let http_dir = tempfile::tempdir().expect("dir");
    let (rate, peak) = http_ingest(http_dir.path()).await;
    println!(
        "http ingest ({STREAMS} streams, {HTTP_PARTITIONS}-partition reports, {HTTP_SECS} s): {rate:.0} partition-stats/s acknowledged; agent peak RSS {} MiB",
        peak / 1024
    );

    let rss_dir = tempfile::tempdir().expect("dir");
    let (rss, peak, rate) = window_rss(rss_dir.path()).await;
    println!(
        "window memory ({RSS_PARTITIONS} partitions, {RSS_REPORTS} reports 1 s apart, window full): agent RSS {} MiB, peak {} MiB (ingest {rate:.0} stats/s, one stream)",
        rss / 1024,
        peak / 1024
    );
}
