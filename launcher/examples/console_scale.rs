//! The web console at the simulator's scale (issue 20): a master holding 100,000 partitions in 10
//! tables on 1,000 workers — a synthetic state, two minutes of 1 s samples written into the
//! running master's MetricsTable, the topology applied with capacities and limits — then every
//! reply the console's pages ask for, measured in bytes and time, and the overview and heatmap
//! drawn in headless Chromium (time from navigation start to the first full draw).
//!
//! `cargo run --release -p lb-launcher --example console_scale`
//!
//! No ops server runs: the pages' calls passed on to it (halt, actions) answer 503 at once and
//! are shown as such; everything else is the master's own work over the full table.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_debug_implementations)]

#[path = "../tests/console/browser.rs"]
#[allow(dead_code)]
mod browser;
#[path = "../tests/support/install.rs"]
mod install;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lb_common::ids::{Key, KeyRange, PartitionId, TableId, TenantId, WorkerId};
use lb_common::protocol::{
    ActionKind, Capacity, Cursor, Health, PartitionInfo, PartitionStats, Sample, SampleData, Topology, WorkerInfo,
};

const PARTITIONS: usize = 100_000;
const WORKERS: usize = 1_000;
const TABLES: usize = 10;
const SECONDS: i64 = 120;

fn topology() -> Topology {
    let per_table = (PARTITIONS / TABLES) as u64;
    let width = u64::MAX / per_table;
    let workers: Vec<WorkerId> = (0..WORKERS).map(|w| WorkerId::new(format!("w-{w:04}")).unwrap()).collect();
    Topology {
        version: 1,
        workers: workers
            .iter()
            .map(|id| WorkerInfo {
                id: id.clone(),
                capacity: Capacity { ops_per_sec: 150_000.0, bytes_per_sec: 1e9 },
                cpu_cores: 0.0,
                group: None,
                health: Health::Healthy,
                zone: None,
                rack: None,
            })
            .collect(),
        partitions: (0..PARTITIONS)
            .map(|i| {
                let j = i as u64 % per_table;
                let end = if j + 1 == per_table { u64::MAX } else { (j + 1) * width - 1 };
                PartitionInfo {
                    id: PartitionId::new(format!("t{}.p{j:05}", i / per_table as usize)).unwrap(),
                    tenant: TenantId::new(format!("tenant{}", i / per_table as usize % 3)).unwrap(),
                    table: TableId::new(format!("table{}", i / per_table as usize)).unwrap(),
                    range: KeyRange { start: Key(j * width), end: Key(end) },
                    owner: workers[i % WORKERS].clone(),
                    group: None,
                    stored_bytes: 1 << 30,
                    limit: Some(Capacity { ops_per_sec: 1_480.0, bytes_per_sec: 1e8 }),
                    supported_actions: ActionKind::ALL.to_vec(),
                }
            })
            .collect(),
        datasets: Vec::new(),
        new_group_dedicates_owner: false,
        multi_way_split: false,
        move_rate_limit: false,
        merge_to_worker: false,
    }
}

/// One second of every partition's load, per worker; a hot band in each table's tenth decile.
/// `cursors` are the workers' sample cursors (each sample its own, as an agent numbers them).
fn second(topology: &Topology, ts_ms: i64, cursors: &mut [u64]) -> Vec<(WorkerId, Vec<Sample>)> {
    let mut out: Vec<(WorkerId, Vec<Sample>)> = topology.workers.iter().map(|w| (w.id.clone(), Vec::new())).collect();
    for (i, p) in topology.partitions.iter().enumerate() {
        let decile = p.range.start.0 / (u64::MAX / 10);
        let ops = if decile == 9 { 1_400 } else { ((i * 7919 + ts_ms as usize / 1000) % 700) as u64 };
        cursors[i % WORKERS] += 1;
        out[i % WORKERS].1.push(Sample {
            cursor: Cursor(cursors[i % WORKERS]),
            timestamp_ms: ts_ms,
            interval_ms: 1000,
            data: SampleData::Partition(PartitionStats {
                tenant: p.tenant.clone(),
                table: p.table.clone(),
                partition_id: p.id.clone(),
                key_range: p.range,
                read_ops: ops,
                write_ops: ops / 3,
                read_bytes: ops * 512,
                write_bytes: 0,
                errors: 0,
                rejected: ops / 100,
                latency_p50_us: 200.0,
                latency_p99_us: 2_000.0,
                cpu_time_us: ops * 20,
                stored_bytes: 1 << 30,
                sketch: None,
            }),
            agent_sampled: false,
        });
    }
    out
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let text = format!(
        "[http]\nlisten = \"127.0.0.1:0\"\n[ops_server]\nurl = \"http://127.0.0.1:9\"\n[store]\npath = \"{}\"\n",
        dir.path().join("results.sqlite").display()
    );
    let config: lb_master::config::MasterConfig = lb_common::config::parse(&text, Path::new("master.toml"))?;
    let (_tx, rx) = tokio::sync::watch::channel(Arc::new(config));
    let master = lb_master::start(rx, tokio::net::TcpListener::bind("127.0.0.1:0").await?, None).await?;
    let base = format!("http://{}", master.addr());

    let topo = topology();
    let started = Instant::now();
    let now = chrono::Utc::now().timestamp_millis() / 1000 * 1000;
    {
        let mut table = master.shared.table.write().expect("table lock");
        table.apply_topology(&topo);
        let mut cursors = vec![0; WORKERS];
        // The fill takes seconds: the last 15 s are written against a fresh clock, so that
        // "the last 10 s" still has data when the pages ask.
        for s in 0..SECONDS - 15 {
            let ts = now - (SECONDS - 1 - s) * 1000;
            for (w, batch) in second(&topo, ts, &mut cursors) {
                table.ingest(&w, &batch, ts);
            }
        }
        let recent = chrono::Utc::now().timestamp_millis() / 1000 * 1000;
        for s in 0..15 {
            let ts = recent - (14 - s) * 1000;
            for (w, batch) in second(&topo, ts, &mut cursors) {
                table.ingest(&w, &batch, ts);
            }
        }
    }
    println!(
        "filled: {PARTITIONS} partitions, {WORKERS} workers, {SECONDS} s of 1 s samples ({} samples) in {:.1} s",
        PARTITIONS as i64 * SECONDS,
        started.elapsed().as_secs_f64()
    );

    // Every request the overview, heatmap and top-N pages make, as they make them.
    let heat_to = chrono::Utc::now().timestamp_millis() / 1000 * 1000;
    let requests = [
        ("overview", "/api/v1/overview?metric=ops".to_owned()),
        ("overview", "/api/v1/cluster/history?metric=ops&step_ms=10000".to_owned()),
        ("overview", "/api/v1/pass".to_owned()),
        ("overview", "/api/v1/top?metric=ops&n=10".to_owned()),
        ("overview", "/api/v1/policy".to_owned()),
        ("overview", "/api/v1/collector".to_owned()),
        ("heatmap", "/api/v1/top?group_by=table&n=1000&window_secs=3600".to_owned()),
        (
            "heatmap",
            format!(
                "/api/v1/heatmap?tenant=tenant0&table=table0&metric=ops&from_ms={}&to_ms={heat_to}&step_ms=1000&buckets=400",
                heat_to - 300_000
            ),
        ),
        ("heatmap", format!("/api/v1/records/action?since_ms={}&limit=1000", heat_to - 300_000)),
        ("top-N", "/api/v1/top?metric=ops&window_secs=10&group_by=none&n=500".to_owned()),
        ("partition", "/api/v1/partitions/t0.p09999/history?metric=ops".to_owned()),
    ];
    let client = reqwest::Client::new();
    println!("| page | request | status | bytes | ms |\n|---|---|---|---|---|");
    for (page, path) in &requests {
        let t = Instant::now();
        let reply = client.get(format!("{base}{path}")).send().await?;
        let status = reply.status().as_u16();
        let bytes = reply.bytes().await?.len();
        println!("| {page} | `{path}` | {status} | {bytes} | {:.1} |", t.elapsed().as_secs_f64() * 1000.0);
    }

    let pages = tokio::task::spawn_blocking(move || -> anyhow::Result<Vec<(String, String, String)>> {
        let mut browser = browser::Browser::launch()?;
        let mut out = Vec::new();
        for route in ["overview", "heatmap?tenant=tenant0&table=table0&range=300", "top?n=500"] {
            let mut page = browser.new_page()?;
            page.goto(&format!("{base}/console/#/{route}"))?;
            page.wait_for("document.body.dataset.ready === '1'", Duration::from_secs(60))?;
            let first = page.eval("document.body.dataset.firstDrawMs")?;
            let bars = page.eval("document.querySelectorAll('#worker-bars .bar').length")?;
            out.push((route.to_owned(), first.as_str().unwrap_or("?").to_owned(), bars.to_string()));
        }
        Ok(out)
    })
    .await??;
    println!("\n| page | first draw, ms from navigation start | worker bars |\n|---|---|---|");
    for (route, first, bars) in pages {
        println!("| `#/{route}` | {first} | {bars} |");
    }
    master.stop(Duration::from_secs(5)).await;
    Ok(())
}
