//! kill -9 while a client streams reports: every acknowledged report is served after a restart.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use lb_common::config::shared::HttpClientConfig;
use lb_common::http::HttpClient;
use lb_common::protocol::{ReportAck, SampleData};

use crate::support::*;

/// Starts the real `lb-agent` binary and returns it with its base URL (read from its stdout).
fn spawn_agent(config_path: &std::path::Path) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lb-agent"))
        .arg("--config")
        .arg(config_path)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start lb-agent");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).expect("read the listening line");
    let url = line.split_whitespace().last().expect("url at the end of the line").to_owned();
    assert!(url.starts_with("http://127.0.0.1:"), "unexpected first line {line:?}");
    (child, url)
}

#[tokio::test]
async fn every_acknowledged_report_survives_sigkill() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("agent.toml");
    std::fs::write(&path, config_text(dir.path(), None)).expect("write config");

    for round in 0..3u64 {
        let (mut child, url) = tokio::task::spawn_blocking({
            let path = path.clone();
            move || spawn_agent(&path)
        })
        .await
        .expect("spawn");
        let client = HttpClient::new(&url, &HttpClientConfig { connect_timeout_ms: 500, deadline_ms: 5_000 });
        let (acked_tx, mut acked_rx) = tokio::sync::mpsc::unbounded_channel();
        let streamer = tokio::spawn(async move {
            // One worker streaming sequentially, as a real worker does; stops at the first error.
            for seq in (round * 100_000 + 1).. {
                match client.post::<_, ReportAck>("/v1/report", &report(seq, 20)).await {
                    Ok(ack) if !ack.duplicate => {
                        let _ = acked_tx.send(seq);
                    }
                    Ok(_) => panic!("a fresh report was called a duplicate"),
                    Err(_) => return,
                }
            }
        });
        // Let it stream for a while, then kill -9 mid-stream.
        tokio::time::sleep(Duration::from_millis(400 + 150 * round)).await;
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");
        streamer.await.expect("streamer ends on the first failed call");
        let mut acked = Vec::new();
        while let Ok(seq) = acked_rx.try_recv() {
            acked.push(seq);
        }
        assert!(acked.len() > 5, "round {round}: the stream made progress ({} reports)", acked.len());

        // Restart and read everything back.
        let (mut child, url) = tokio::task::spawn_blocking({
            let path = path.clone();
            move || spawn_agent(&path)
        })
        .await
        .expect("spawn");
        let client = HttpClient::new(&url, &HttpClientConfig::default());
        let (samples, _, gap) = pull_all(&client, 0).await;
        assert!(!gap);
        let mut per_seq = std::collections::BTreeMap::<u64, usize>::new();
        for s in &samples {
            if let SampleData::Partition(_) = s.data {
                *per_seq.entry(((s.timestamp_ms - 1_764_478_800_000) / 1000) as u64).or_default() += 1;
            }
        }
        for seq in &acked {
            assert_eq!(per_seq.get(seq), Some(&20), "round {round}: acknowledged report {seq} lost or partial");
        }
        assert!(per_seq.values().all(|&n| n == 20), "no report is ever half-stored");
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");
    }
}
