//! Ingest, pull by cursor, restart, duplicates, bad input, gaps and rollups.

use axum::http::StatusCode;
use lb_common::http::ClientError;
use lb_common::protocol::{Cursor, ReportAck, RollupsQuery, RollupsResponse, SampleData};

use crate::support::*;

#[tokio::test]
async fn ingest_then_pull_by_cursor_across_a_restart_loses_and_repeats_nothing() {
    let dir = tempfile::tempdir().expect("dir");
    let (agent, _cfg, client) = start(config(dir.path(), None)).await;
    for seq in 1..=5 {
        let ack: ReportAck = client.post("/v1/report", &report(seq, 40)).await.expect("ack");
        assert_eq!((ack.seq, ack.duplicate), (seq, false));
    }
    let (first, cursor, gap) = pull_all(&client, 0).await;
    assert_eq!(first.len(), 200);
    assert!(!gap);
    for seq in 6..=8 {
        client.post::<_, ReportAck>("/v1/report", &report(seq, 40)).await.expect("ack");
    }
    assert!(agent.stop(STOP).await, "clean stop");

    // Restart on the same file: the old cursor still means the same place. A 1 s window keeps
    // only the newest report in memory, so the older ones are served from SQLite.
    let mut small_window = config(dir.path(), None);
    small_window.window.duration_ms = 1_000;
    let (agent, _cfg, client) = start(small_window).await;
    for seq in 9..=10 {
        client.post::<_, ReportAck>("/v1/report", &report(seq, 40)).await.expect("ack");
    }
    let (second, _, gap) = pull_all(&client, cursor).await;
    assert!(!gap);
    assert_eq!(second.len(), 5 * 40, "reports 6..=10, nothing lost or repeated");
    let all: Vec<_> = first.iter().chain(&second).collect();
    assert!(all.windows(2).all(|w| w[0].cursor < w[1].cursor), "cursors strictly increase");
    // Every (report, partition) appears exactly once, with the values sent.
    let mut seen = std::collections::BTreeSet::new();
    for s in &all {
        let SampleData::Partition(p) = &s.data else { panic!("host sampling is off") };
        let seq = (s.timestamp_ms - base_ms()) / 1000;
        assert!(seen.insert((seq, p.partition_id.to_string())), "duplicate sample");
        let expected = &report(seq as u64, 40).partitions;
        let sent = expected.iter().find(|e| e.partition_id == p.partition_id).expect("sent");
        assert_eq!(sent, p, "served exactly what was sent, sketch included");
    }
    assert_eq!(seen.len(), 10 * 40);
    // A full re-read from the start (served from SQLite and the reloaded window) agrees.
    let (again, _, _) = pull_all(&client, 0).await;
    assert_eq!(again.len(), 400);
    assert!(agent.stop(STOP).await);
}

/// A host reading of the agent's own sampler is told from one a report carried, in memory and
/// from SQLite after a restart: the master counts only the worker's own as a reported second.
#[tokio::test]
async fn the_agents_own_host_readings_are_marked_and_a_reports_are_not() {
    let dir = tempfile::tempdir().expect("dir");
    let mut cfg = config(dir.path(), None);
    cfg.host = lb_agent::config::HostConfig { enabled: true, interval_ms: 100 };
    let (agent, _cfg, client) = start(cfg.clone()).await;
    let mut with_host = report(1, 2);
    with_host.host = Some(lb_common::protocol::HostStats {
        cpu_ratio: 0.25,
        cpu_cores: 4,
        memory_used_bytes: 1,
        memory_total_bytes: 2,
        net_rx_bytes_per_sec: 0.0,
        net_tx_bytes_per_sec: 0.0,
        disk_read_bytes_per_sec: 0.0,
        disk_write_bytes_per_sec: 0.0,
    });
    client.post::<_, ReportAck>("/v1/report", &with_host).await.expect("ack");
    let hosts = |samples: &[lb_common::protocol::Sample]| -> (usize, usize) {
        let host: Vec<_> = samples.iter().filter(|s| matches!(s.data, SampleData::Host(_))).collect();
        (host.iter().filter(|s| s.agent_sampled).count(), host.iter().filter(|s| !s.agent_sampled).count())
    };
    let mut own = 0;
    for _ in 0..100 {
        own = hosts(&pull_all(&client, 0).await.0).0;
        if own >= 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(own >= 2, "the sampler's readings are marked: {own}");
    let (samples, _, _) = pull_all(&client, 0).await;
    assert_eq!(hosts(&samples).1, 1, "the report's host stats are not marked");
    assert!(samples.iter().filter(|s| matches!(s.data, SampleData::Partition(_))).all(|s| !s.agent_sampled));
    assert!(agent.stop(STOP).await);

    // From SQLite: a 1 s window holds only the newest readings; the rest is read from the file.
    cfg.host.enabled = false;
    cfg.window.duration_ms = 1_000;
    let (agent, _cfg, client) = start(cfg).await;
    let (again, _, _) = pull_all(&client, 0).await;
    let (own_again, report_host) = hosts(&again);
    assert!(own_again >= own, "{own_again} of the sampler's readings, still marked");
    assert_eq!(report_host, 1);
    assert!(agent.stop(STOP).await);
}

#[tokio::test]
async fn a_retried_report_is_not_counted_twice() {
    let dir = tempfile::tempdir().expect("dir");
    let (agent, _cfg, client) = start(config(dir.path(), None)).await;
    let r = report(7, 3);
    assert!(!client.post::<_, ReportAck>("/v1/report", &r).await.expect("ack").duplicate);
    assert!(client.post::<_, ReportAck>("/v1/report", &r).await.expect("ack").duplicate);
    let (samples, _, _) = pull_all(&client, 0).await;
    assert_eq!(samples.len(), 3);
    // Out of order is not a retry (reports may race on separate connections) ...
    assert!(!client.post::<_, ReportAck>("/v1/report", &report(3, 3)).await.expect("ack").duplicate);
    // ... and neither is a reused sequence number with a new timestamp (the worker restarted).
    let mut restarted = report(7, 3);
    restarted.timestamp_ms += 60_000;
    assert!(!client.post::<_, ReportAck>("/v1/report", &restarted).await.expect("ack").duplicate);
    assert_eq!(pull_all(&client, 0).await.0.len(), 9);
    assert!(agent.stop(STOP).await);
    // The dedup state survives a restart too.
    let (agent, _cfg, client) = start(config(dir.path(), None)).await;
    assert!(client.post::<_, ReportAck>("/v1/report", &r).await.expect("ack").duplicate);
    assert_eq!(pull_all(&client, 0).await.0.len(), 9);
    assert!(agent.stop(STOP).await);
}

fn rejected(err: ClientError) -> (StatusCode, String, String) {
    match err {
        ClientError::Status { status, body, .. } => (status, body.code, body.error),
        other => panic!("expected an error status, got {other}"),
    }
}

#[tokio::test]
async fn bad_input_gets_the_right_status_and_leaves_state_untouched() {
    let dir = tempfile::tempdir().expect("dir");
    let (agent, _cfg, client) = start(config(dir.path(), None)).await;
    client.post::<_, ReportAck>("/v1/report", &report(1, 2)).await.expect("ack");
    let before = agent.store().latest_cursor();

    let raw = reqwest::Client::new();
    let url = format!("http://{}/v1/report", agent.addr());
    let send = |body: String| raw.post(&url).header("content-type", "application/json").body(body).send();
    let malformed = send("{\"worker_id\": ".to_owned()).await.expect("reply");
    assert_eq!(malformed.status(), StatusCode::BAD_REQUEST);
    let big = report(2, 400);
    let too_big = send(serde_json::to_string(&big).expect("json")).await.expect("reply");
    assert_eq!(too_big.status(), StatusCode::PAYLOAD_TOO_LARGE, "over the 64 KiB test limit");

    let mut negative = serde_json::to_value(report(3, 2)).expect("json");
    negative["partitions"][1]["read_ops"] = serde_json::json!(-5);
    let reply = send(negative.to_string()).await.expect("reply");
    assert_eq!(reply.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(reply.text().await.expect("body").contains("read_ops"), "names the field");

    let mut bad = report(4, 2);
    bad.partitions[1].latency_p50_us = 5000.0;
    let (status, code, message) = rejected(client.post::<_, ReportAck>("/v1/report", &bad).await.unwrap_err());
    assert_eq!((status, code.as_str()), (StatusCode::UNPROCESSABLE_ENTITY, "invalid_field"));
    assert!(message.contains("partitions[1].latency_p50_us = 5000"), "{message}");

    let mut other_worker = report(5, 2);
    other_worker.worker_id = "w-9".parse().expect("id");
    let (status, _, message) = rejected(client.post::<_, ReportAck>("/v1/report", &other_worker).await.unwrap_err());
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(message.contains("worker_id = w-9"), "{message}");

    // Issue 17: a partition listed twice would be counted twice; a date far ahead is a broken clock.
    let mut twice = report(6, 2);
    twice.partitions[1].partition_id = twice.partitions[0].partition_id.clone();
    let (status, _, message) = rejected(client.post::<_, ReportAck>("/v1/report", &twice).await.unwrap_err());
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(message.contains("partitions[1].partition_id") && message.contains("listed twice"), "{message}");
    for future in [4_102_444_800_000i64, i64::MAX] {
        let mut ahead = report(7, 2);
        ahead.timestamp_ms = future;
        let (status, _, message) = rejected(client.post::<_, ReportAck>("/v1/report", &ahead).await.unwrap_err());
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(message.contains("timestamp_ms") && message.contains("ahead"), "{message}");
    }
    // Issue 17: a report older than the raw retention would expire at once.
    for past in [base_ms() - 8 * 86_400_000, 1_764_478_800_000] {
        let mut old = report(8, 2);
        old.timestamp_ms = past;
        let (status, _, message) = rejected(client.post::<_, ReportAck>("/v1/report", &old).await.unwrap_err());
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(message.contains("timestamp_ms") && message.contains("raw_retention_hours"), "{message}");
    }

    let reply = raw.get(format!("http://{}/v1/samples?after=abc", agent.addr())).send().await.expect("reply");
    assert_eq!(reply.status(), StatusCode::BAD_REQUEST);

    assert_eq!(agent.store().latest_cursor(), before, "nothing invalid reached the store");
    assert_eq!(pull_all(&client, 0).await.0.len(), 2);
    // The valid report after all that is still not a duplicate: dedup state was not touched.
    assert!(!client.post::<_, ReportAck>("/v1/report", &report(2, 2)).await.expect("ack").duplicate);
    assert!(agent.stop(STOP).await);
}

#[tokio::test]
async fn expired_data_is_flagged_as_a_gap_and_rollups_sum_the_hour() {
    let dir = tempfile::tempdir().expect("dir");
    let (agent, _cfg, client) = start(config(dir.path(), None)).await;
    for seq in 1..=3 {
        client.post::<_, ReportAck>("/v1/report", &report(seq, 2)).await.expect("ack");
    }
    // The example timestamps start on an hour boundary.
    let hour: i64 = base_ms();
    assert_eq!(hour % 3_600_000, 0);
    let rollups: RollupsResponse = client
        .get_with_query("/v1/rollups", &RollupsQuery { from_ms: hour, to_ms: hour + 3_600_000 })
        .await
        .expect("rollups");
    assert_eq!(rollups.rollups.len(), 2);
    let p0 = &rollups.rollups[0];
    assert_eq!((p0.sample_count, p0.read_ops, p0.write_ops), (3, 10 + 20 + 30, 1 + 2 + 3));
    assert_eq!(p0.max_latency_p99_us, 903.0);
    assert_eq!(p0.max_ops_per_sec, 33.0);

    // Retention as of eight days later removes every raw sample: a puller at 0 learns of the gap.
    let later = base_ms() + 8 * 86_400_000;
    agent.store().maintenance(later).await.expect("maintenance");
    let page = agent.store().samples(Cursor(0), 100).await.expect("page");
    assert!(page.gap && page.samples.is_empty());
    assert_eq!(page.next_cursor, agent.store().latest_cursor(), "the puller skips what expired");
    // Rollups outlive raw samples.
    let rollups: RollupsResponse = client
        .get_with_query("/v1/rollups", &RollupsQuery { from_ms: hour, to_ms: hour + 3_600_000 })
        .await
        .expect("rollups");
    assert_eq!(rollups.rollups.len(), 2);
    assert!(agent.stop(STOP).await);
}

/// Issue 17 item 18: a late report with an older timestamp overwrote a rollup's stored_bytes
/// once the newer sample's rollup had been written.
#[tokio::test]
async fn a_late_older_report_does_not_overwrite_a_rollups_stored_bytes() {
    let dir = tempfile::tempdir().expect("dir");
    let (agent, _cfg, client) = start(config(dir.path(), None)).await;
    let sized = |seq: u64, stored_bytes: u64| {
        let mut r = report(seq, 1);
        r.partitions[0].stored_bytes = stored_bytes;
        r
    };
    let hour: i64 = base_ms();
    let stored = || async {
        let rollups: RollupsResponse = client
            .get_with_query("/v1/rollups", &RollupsQuery { from_ms: hour, to_ms: hour + 3_600_000 })
            .await
            .expect("rollups");
        (rollups.rollups[0].sample_count, rollups.rollups[0].stored_bytes)
    };
    client.post::<_, ReportAck>("/v1/report", &sized(5, 500)).await.expect("ack");
    assert_eq!(stored().await, (1, 500), "reading flushes the rollup");
    client.post::<_, ReportAck>("/v1/report", &sized(2, 200)).await.expect("ack");
    assert_eq!(stored().await, (2, 500), "the older sample is counted, its size is not the latest");
    client.post::<_, ReportAck>("/v1/report", &sized(7, 700)).await.expect("ack");
    assert_eq!(stored().await, (3, 700));
    assert!(agent.stop(STOP).await);
}

#[tokio::test]
async fn a_cursor_from_the_future_restarts_from_the_beginning_with_a_gap() {
    let dir = tempfile::tempdir().expect("dir");
    let (agent, _cfg, client) = start(config(dir.path(), None)).await;
    client.post::<_, ReportAck>("/v1/report", &report(1, 2)).await.expect("ack");
    let page = agent.store().samples(Cursor(1_000_000), 100).await.expect("page");
    assert!(page.gap);
    assert_eq!(page.samples.len(), 2);
    let _ = client;
    assert!(agent.stop(STOP).await);
}

#[tokio::test]
async fn samples_go_out_compressed_to_a_caller_that_accepts_zstd() {
    let dir = tempfile::tempdir().expect("dir");
    let (agent, _cfg, client) = start(config(dir.path(), None)).await;
    for seq in 1..=10 {
        client.post::<_, ReportAck>("/v1/report", &report(seq, 40)).await.expect("ack");
    }
    let url = format!("http://{}/v1/samples?after=0&limit=400", agent.addr());
    // A client that decompresses nothing, so the bytes on the wire are seen as sent.
    let raw = reqwest::Client::builder().no_zstd().build().expect("client");
    let get = |encoding: &'static str| raw.get(&url).header(reqwest::header::ACCEPT_ENCODING, encoding).send();
    let plain = get("identity").await.expect("reply");
    assert_eq!(plain.headers().get(reqwest::header::CONTENT_ENCODING), None);
    let plain = plain.bytes().await.expect("body");
    let zstd = get("zstd").await.expect("reply");
    assert_eq!(zstd.headers().get(reqwest::header::CONTENT_ENCODING).map(|v| v.as_bytes()), Some(&b"zstd"[..]));
    let zstd = zstd.bytes().await.expect("body");
    assert!(zstd.len() * 5 < plain.len(), "400 samples: {} bytes compressed of {}", zstd.len(), plain.len());
    // lb's own client asks for zstd and reads the same page.
    let (samples, _, _) = pull_all(&client, 0).await;
    let page: lb_common::protocol::SamplesResponse = serde_json::from_slice(&plain).expect("the plain page");
    assert_eq!(samples, page.samples);
    assert!(agent.stop(STOP).await);
}
