//! `lb up` in-process: every component starts on loopback, reports flow from the
//! simulated workers through the agents and the ops server into the master's table, and
//! everything stops cleanly.

use std::time::Duration;

use lb_common::clients::{MasterClient, OpsClient};
use lb_common::config::shared::HttpClientConfig;
use lb_common::protocol::{HistoryQuery, Metric, OverviewQuery, PartitionsQuery};
use lb_launcher::up::{UpOptions, up};

use crate::support::scenarios_dir;

/// `up` of the hot-range surge in `data_dir`, reports every 200 ms.
fn options(data_dir: &std::path::Path) -> UpOptions {
    UpOptions {
        scenario: scenarios_dir().join("hot-range-surge.toml"),
        data_dir: data_dir.to_owned(),
        host: "127.0.0.1".to_owned(),
        interval: Duration::from_millis(200),
    }
}

#[tokio::test]
async fn up_starts_everything_and_data_reaches_the_master() {
    lb_common::telemetry::metrics_handle();
    let dir = tempfile::tempdir().expect("dir");
    let options = options(dir.path());
    let running = up(&options).await.expect("everything starts");
    assert_eq!(running.agents.len(), 8, "one agent per worker of the scenario");
    let master = MasterClient::new(format!("http://{}", running.master.addr()), &HttpClientConfig::default());
    let started = tokio::time::Instant::now();
    loop {
        let query = OverviewQuery { metric: Some(Metric::Ops), window_secs: Some(5) };
        let overview = master.overview(&query).await.expect("overview");
        let topology_ok = master.topology().await.is_ok();
        let loaded = overview.workers.len() == 8 && overview.mean > 0.0;
        if loaded && topology_ok {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "no load reached the master: {overview:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let query = PartitionsQuery { window_secs: Some(5), ..PartitionsQuery::default() };
    let partitions = master.partitions(&query).await.expect("partitions");
    assert_eq!(partitions.len(), 32, "every partition of the scenario is in the table");
    for dir_entry in ["ops-server-audit.sqlite", "master-results.sqlite", "agent-w-0000.sqlite"] {
        assert!(dir.path().join(dir_entry).exists(), "{dir_entry} was created");
    }
    assert!(running.stop(Duration::from_secs(20)).await, "clean stop");
}

#[tokio::test]
async fn a_split_keeps_the_new_partitions_history_linked_to_its_parent() {
    lb_common::telemetry::metrics_handle();
    let dir = tempfile::tempdir().expect("dir");
    let options = options(dir.path());
    let running = up(&options).await.expect("everything starts");
    let master = MasterClient::new(format!("http://{}", running.master.addr()), &HttpClientConfig::default());
    let ops = OpsClient::new(format!("http://{}", running.ops_server.addr()), &HttpClientConfig::default())
        .with_bearer_token(&running.tokens.operator.token);
    // Let the parent build up a few seconds of history.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let topology = master.topology().await.expect("topology");
    let parent = topology.partitions.iter().min_by_key(|p| p.range.start).expect("a partition").clone();
    let mid = lb_common::ids::Key(parent.range.start.0 + (parent.range.end.0 - parent.range.start.0) / 2);
    let split_at_ms = chrono::Utc::now().timestamp_millis();
    let request = lb_common::protocol::ActionRequest {
        id: "lineage-split".parse().expect("id"),
        spec: lb_common::protocol::ActionSpec::Split { partition: parent.id.clone(), split_key: mid },
        origin: lb_common::protocol::Origin::Manual,
        policy: None,
        reason: "test lineage".to_owned(),
        actor_path: vec!["manual".to_owned(), "test".to_owned()],
        leader_epoch: None,
    };
    ops.submit(&request).await.expect("accepted");
    // Wait for the master to see the new partition.
    let started = tokio::time::Instant::now();
    let child = loop {
        let t = master.topology().await.expect("topology");
        if let Some(child) = t.partitions.iter().find(|p| p.range.start == mid) {
            break child.clone();
        }
        assert!(started.elapsed() < Duration::from_secs(30), "the split never showed in the master's topology");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    tokio::time::sleep(Duration::from_millis(600)).await;
    let query = HistoryQuery { metric: Some(Metric::Ops), from_ms: Some(split_at_ms - 10_000), to_ms: None };
    let history = master.history(&child.id, &query).await.expect("history");
    let before_split = history.points.iter().filter(|p| p.ts_ms < split_at_ms - 1_000 && p.value > 0.0).count();
    assert!(before_split > 0, "the child's history reaches back into its parent's: {history:?}");
    assert!(running.stop(Duration::from_secs(20)).await);
}

/// Issue 17 item 15: `lb up` configured no tokens, so every caller could do everything. Now
/// each data directory has its own random tokens (0600, reused on restart), every component
/// uses them, an unauthenticated write is 401, and lbctl gets a config with the operator's.
#[tokio::test]
async fn up_runs_with_auth_on_with_the_data_directorys_own_tokens() {
    use std::os::unix::fs::PermissionsExt;
    lb_common::telemetry::metrics_handle();
    let dir = tempfile::tempdir().expect("dir");
    let options = options(dir.path());
    let running = up(&options).await.expect("everything starts");
    let tokens = running.tokens.clone();
    let ops_url = format!("http://{}", running.ops_server.addr());
    let halt = serde_json::json!({"halted": true, "reason": "an anonymous caller"});
    let anonymous = reqwest::Client::new().post(format!("{ops_url}/v1/halt")).json(&halt).send().await.expect("reply");
    assert_eq!(anonymous.status().as_u16(), 401, "an unauthenticated write to the demo's ops server");
    let master_url = format!("http://{}", running.master.addr());
    let approve = reqwest::Client::new().post(format!("{master_url}/api/v1/proposals/p-1/approve")).send().await;
    assert_eq!(approve.expect("reply").status().as_u16(), 401, "and to the master");
    // The components themselves use the tokens: the agents registered, the master collects.
    let master = MasterClient::new(&master_url, &HttpClientConfig::default());
    let started = tokio::time::Instant::now();
    while master
        .overview(&OverviewQuery { metric: Some(Metric::Ops), window_secs: Some(5) })
        .await
        .expect("overview")
        .max
        <= 0.0
    {
        assert!(started.elapsed() < Duration::from_secs(30), "no data reached the master with auth on");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for path in [&running.tokens_path, &running.lbctl_config_path] {
        let mode = std::fs::metadata(path).expect("written").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{} is private", path.display());
    }
    let lbctl = std::fs::read_to_string(&running.lbctl_config_path).expect("lbctl config");
    assert!(lbctl.contains(&tokens.operator.token) && lbctl.contains(&master_url), "{lbctl}");
    assert!(running.stop(Duration::from_secs(20)).await);

    // The same data directory: the same tokens.
    let running = up(&options).await.expect("starts again");
    assert_eq!(running.tokens, tokens, "tokens are reused on restart");
    assert!(running.stop(Duration::from_secs(20)).await);
}

/// A scenario's own policies (`[master.*]`) reach the master `lb up` starts: they are written
/// into its config file and the master runs them.
#[tokio::test]
async fn up_runs_the_master_under_the_scenarios_own_policies() {
    lb_common::telemetry::metrics_handle();
    let dir = tempfile::tempdir().expect("dir");
    let options = UpOptions { scenario: scenarios_dir().join("all-action-kinds.toml"), ..options(dir.path()) };
    let running = up(&options).await.expect("everything starts");
    let config = running.master_config.current();
    assert_eq!(config.placement.mode, lb_master::planner::PolicyMode::Auto, "the scenario's [master.placement]");
    assert_eq!((config.offline.lookback_hours, config.offline.merge_min_age_secs), (1, 3600));
    let text = std::fs::read_to_string(&running.master_config_path).expect("master.toml");
    assert!(text.contains("# From the scenario's [master]."), "{text}");
    assert!(running.stop(Duration::from_secs(20)).await, "clean stop");
}
