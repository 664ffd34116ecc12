//! `lb-testbed up` in-process: every component starts on loopback, reports flow from the
//! simulated workers through the agents and the ops server into the master's table, and
//! everything stops cleanly.

use std::time::Duration;

use lb_common::config::shared::HttpClientConfig;
use lb_common::http::HttpClient;
use lb_testbed::up::{UpOptions, up};

use crate::support::scenarios_dir;

#[tokio::test]
async fn up_starts_everything_and_data_reaches_the_master() {
    lb_common::telemetry::metrics_handle();
    let dir = tempfile::tempdir().expect("dir");
    let options = UpOptions {
        scenario: scenarios_dir().join("hot-range-surge.toml"),
        data_dir: dir.path().to_owned(),
        host: "127.0.0.1".to_owned(),
        interval: Duration::from_millis(200),
    };
    let running = up(&options).await.expect("everything starts");
    assert_eq!(running.agents.len(), 8, "one agent per worker of the scenario");
    let master = HttpClient::new(format!("http://{}", running.master.addr()), &HttpClientConfig::default());
    let started = tokio::time::Instant::now();
    loop {
        let overview: serde_json::Value =
            master.get("/api/v1/overview?metric=ops&window_secs=5").await.expect("overview");
        let topology_ok = master.get::<serde_json::Value>("/api/v1/topology").await.is_ok();
        let loaded = overview["workers"].as_array().is_some_and(|w| w.len() == 8)
            && overview["mean"].as_f64().is_some_and(|m| m > 0.0);
        if loaded && topology_ok {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "no load reached the master: {overview}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let partitions: Vec<serde_json::Value> = master.get("/api/v1/partitions?window_secs=5").await.expect("partitions");
    assert_eq!(partitions.len(), 32, "every partition of the scenario is in the table");
    for dir_entry in ["ops-server-audit.sqlite", "master-results.sqlite", "agent-w-0000.sqlite"] {
        assert!(dir.path().join(dir_entry).exists(), "{dir_entry} was created");
    }
    assert!(running.stop(Duration::from_secs(20)).await, "clean stop");
}
