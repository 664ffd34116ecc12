//! The offline analyzer over HTTP on a running system: `lb up` on the testbed, two days of the
//! live partitions' hourly rollups in the master's archive (real Parquet files, where the
//! archiver keeps them), a pass asked for with `POST /api/v1/offline/pass`, and its findings and
//! report read back with `GET /api/v1/offline`.

use std::collections::BTreeMap;
use std::time::Duration;

use lb_common::clients::MasterClient;
use lb_common::config::shared::HttpClientConfig;
use lb_common::protocol::HourlyRollup;
use lb_launcher::up::{UpOptions, up};
use lb_master::offline::{Archive, HOUR_MS};

use crate::support::scenarios_dir;

/// Seeded hours, ending at the hour before the current one.
const HOURS: i64 = 48;

#[tokio::test]
async fn an_offline_pass_on_demand_serves_its_findings_and_report() {
    lb_common::telemetry::metrics_handle();
    let dir = tempfile::tempdir().expect("dir");
    let options = UpOptions {
        scenario: scenarios_dir().join("hot-range-surge.toml"),
        data_dir: dir.path().to_owned(),
        host: "127.0.0.1".to_owned(),
        interval: Duration::from_millis(250),
    };
    let running = up(&options).await.expect("everything starts");
    let url = format!("http://{}", running.master.addr());
    let reader = MasterClient::new(url.clone(), &HttpClientConfig::default());
    let operator = reader.clone().with_bearer_token(&running.tokens.operator.token);

    // Before any pass: nothing yet, said as such.
    let before = reader.offline().await.expect("findings");
    assert_eq!((before.at_ms, before.merges.len(), before.report.worker_days.len()), (0, 0, 0));

    // Two days of rollups for every live partition, each worker's partitions at a load of their
    // own (100 ops/s per partition times the worker's number), in the archive the master reads.
    let topology = loop {
        match reader.topology().await {
            Ok(t) if !t.partitions.is_empty() => break t,
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    let this_hour = chrono::Utc::now().timestamp_millis().div_euclid(HOUR_MS) * HOUR_MS;
    let mut rows: BTreeMap<String, Vec<HourlyRollup>> = BTreeMap::new();
    let mut per_worker: BTreeMap<String, f64> = BTreeMap::new();
    for p in &topology.partitions {
        let n: f64 = p.owner.as_str().trim_start_matches(|c: char| !c.is_ascii_digit()).parse().unwrap_or(0.0);
        let load = 100.0 * (n + 1.0);
        *per_worker.entry(p.owner.to_string()).or_default() += load;
        rows.entry(p.owner.to_string()).or_default().extend((1..=HOURS).map(|h| HourlyRollup {
            hour_start_ms: this_hour - h * HOUR_MS,
            tenant: p.tenant.clone(),
            table: p.table.clone(),
            partition_id: p.id.clone(),
            key_range: p.range,
            sample_count: 3600,
            read_ops: (load * 3600.0) as u64,
            write_ops: 0,
            read_bytes: 0,
            write_bytes: 0,
            errors: 0,
            rejected: 0,
            cpu_time_us: 0,
            max_ops_per_sec: load,
            max_latency_p99_us: 1000.0,
            stored_bytes: p.stored_bytes,
        }));
    }
    let archive = Archive::new(dir.path().join("archive"));
    for (worker, rows) in &rows {
        archive.append(worker, rows).expect("archived");
    }

    // Asking needs an operator.
    let refused = reqwest::Client::new().post(format!("{url}/api/v1/offline/pass")).send().await.expect("answered");
    assert_eq!(refused.status(), reqwest::StatusCode::UNAUTHORIZED);
    let asked = operator.request_offline_pass().await.expect("a pass is asked for");

    let started = tokio::time::Instant::now();
    let found = loop {
        let found = reader.offline().await.expect("findings");
        if found.at_ms >= asked.requested_at_ms - 1_000 && found.at_ms > 0 {
            break found;
        }
        assert!(started.elapsed() < Duration::from_secs(90), "no offline pass within 90 s of asking");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };

    // It read the seeded hours (and said the 7-day look-back is not whole, so it merges nothing).
    assert_eq!(found.coverage.hours_with_data, HOURS as u32, "{:?}", found.coverage);
    assert!(found.coverage.files_read >= rows.len(), "{:?}", found.coverage);
    assert!(found.coverage.partial.iter().any(|p| p.contains("of the look-back's 168 hours")), "{:?}", found.coverage);
    assert!(found.merges.is_empty(), "{:?}", found.merges);
    assert!(!found.tables.is_empty() && found.tables.iter().all(|t| !t.periodic), "{:?}", found.tables);
    // Every worker's days, at the load seeded for it: a flat load is its own p50, p90 and max.
    for (worker, load) in &per_worker {
        let days: Vec<_> = found.report.worker_days.iter().filter(|d| &d.worker == worker).collect();
        assert!(days.len() >= 2, "{worker}: {days:?}");
        assert_eq!(days.iter().map(|d| d.hours).sum::<u32>(), HOURS as u32, "{worker}: {days:?}");
        for d in days {
            assert!((d.p50_ops_per_sec - load).abs() < 1e-6 && (d.max_ops_per_sec - load).abs() < 1e-6, "{d:?}");
        }
    }
    assert!(found.report.flapping.is_empty(), "{:?}", found.report.flapping);
    assert!(running.stop(Duration::from_secs(20)).await, "clean stop");
}
