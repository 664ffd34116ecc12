//! The reporter thread's CPU at a steady record rate: one producer thread records `RATE`
//! requests per second (in 1 ms batches) over 1,000 partitions for `SECS` seconds, while the
//! `lb-reporter` thread drains, aggregates and pushes one report per second to an agent stand-in
//! that acknowledges every report. The thread's CPU time is read from
//! `/proc/self/task/<tid>/stat` (user + system, in clock ticks of 10 ms).
//!
//! `cargo run --release -p lb-reporter --example aggregator_cpu [RATE] [SECS]`
//! (defaults: 1,000,000 records/s for 20 s).

use std::time::{Duration, Instant};

use axum::Json;
use lb_common::ids::{Key, KeyRange};
use lb_common::protocol::{Report, ReportAck};
use lb_common::rng::SplitMix64;
use lb_reporter::{Op, Outcome, PartitionInfo, Reporter, ReporterConfig};

const PARTITIONS: u64 = 1_000;
/// Linux's USER_HZ on every mainstream architecture (`getconf CLK_TCK`).
const TICKS_PER_SEC: f64 = 100.0;

/// User + system CPU seconds of this process's thread named `name`.
fn thread_cpu_secs(name: &str) -> Option<f64> {
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
        // Fields after the `(comm)`: state is field 3, utime 14 and stime 15.
        let rest = &stat[stat.rfind(')')? + 2..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
        return Some(ticks / TICKS_PER_SEC);
    }
    None
}

async fn ack(Json(report): Json<Report>) -> Json<ReportAck> {
    Json(ReportAck { worker_id: report.worker_id, seq: report.seq, duplicate: false })
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<u64> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let rate = args.first().copied().unwrap_or(1_000_000);
    let secs = args.get(1).copied().unwrap_or(20);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = axum::Router::new().route("/v1/report", axum::routing::post(ack));
    tokio::spawn(async move { axum::serve(listener, app).await });

    let reporter =
        Reporter::start(ReporterConfig::new("w-0".parse().expect("id"), format!("http://{addr}"))).expect("starts");
    let handle = reporter.handle();
    let width = u64::MAX / PARTITIONS;
    let slots: Vec<_> = (0..PARTITIONS)
        .map(|i| {
            handle.upsert_partition(PartitionInfo {
                tenant: "acme".parse().expect("id"),
                table: "orders".parse().expect("id"),
                partition_id: format!("acme.orders.p{i:06}").parse().expect("id"),
                key_range: KeyRange {
                    start: Key(i * width),
                    end: Key(if i == PARTITIONS - 1 { u64::MAX } else { (i + 1) * width - 1 }),
                },
                stored_bytes: 1 << 30,
            })
        })
        .collect();
    let recorder = handle.recorder();
    let producer = std::thread::spawn(move || {
        let mut rng = SplitMix64::new(1);
        let per_ms = rate / 1_000;
        let start = Instant::now();
        for ms in 0..secs * 1_000 {
            for _ in 0..per_ms {
                // 80 % of the ops on a tenth of the partitions, half of those on 1,000 hot keys.
                let p = if rng.below(10) < 8 { rng.below(PARTITIONS / 10) } else { rng.below(PARTITIONS) };
                let spread = if rng.below(2) == 0 { 1_000 } else { width };
                let op = if rng.below(4) == 0 { Op::Write } else { Op::Read };
                let latency = Duration::from_micros(50 + rng.below(5_000));
                recorder.record(slots[p as usize], Key(p * width + rng.below(spread)), op, 256, latency, Outcome::Ok);
            }
            let due = start + Duration::from_millis(ms + 1);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
        start.elapsed()
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let cpu_before = thread_cpu_secs("lb-reporter").expect("the reporter thread");
    let wall = tokio::task::spawn_blocking(move || producer.join().expect("producer")).await.expect("join");
    let cpu = thread_cpu_secs("lb-reporter").expect("the reporter thread") - cpu_before;
    let stats = reporter.stats();
    let recorded = rate / 1_000 * 1_000 * secs;
    println!(
        "{recorded} records in {:.2} s ({:.0} records/s): reporter thread CPU {cpu:.2} s = {:.3} of a core; \
         dropped {} (buffer full), reports built {}, acknowledged {}",
        wall.as_secs_f64(),
        recorded as f64 / wall.as_secs_f64(),
        cpu / (wall.as_secs_f64() - 0.5),
        stats.records_dropped_buffer_full_total,
        stats.reports_built_total,
        stats.reports_acked_total,
    );
    tokio::task::spawn_blocking(move || reporter.shutdown()).await.expect("shutdown");
}
