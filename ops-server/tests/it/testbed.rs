//! The ops server against the real testbed's storage admin API (in-process, real HTTP): every
//! action kind runs end to end and changes the layout the way it says; an injected storage
//! failure ends the action as failed and changes nothing.

use std::path::Path;
use std::time::Duration;

use lb_common::ids::Key;
use lb_common::protocol::*;
use lb_testbed::Engine;
use lb_testbed::realtime::{self, RealtimeOptions, RunningTestbed};
use lb_testbed::scenario::Scenario;

use crate::support::*;

const SCENARIO: &str = r#"
name = "ops-server-test"
seed = 3
[cluster]
workers = 6
worker_ops_per_sec = 100000
worker_bytes_per_sec = 1e9
partition_limit_ops_per_sec = 10000
partition_limit_bytes_per_sec = 1e9
groups = [{ group = "gold", workers = 2 }]
[[tables]]
tenant = "acme"
table = "orders"
partitions = 8
stored_bytes_per_partition = 1048576
[[tables.workloads]]
kind = "uniform"
ops_per_sec = 20000
[[datasets]]
tenant = "acme"
dataset = "profiles"
tenant_shards = 12
dataset_shards = 2
load_balancing = "fingerprint"
ops_per_sec = 1000
"#;

async fn start_testbed() -> (RunningTestbed, String) {
    let scenario = Scenario::parse(SCENARIO, Path::new("test.toml")).expect("scenario");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let mut options = RealtimeOptions::new(listener.local_addr().expect("addr"));
    options.tick = Duration::from_millis(20);
    let testbed = realtime::start(Engine::new(&scenario), listener, options).await.expect("testbed");
    let url = format!("http://{}", testbed.addr());
    (testbed, url)
}

fn sorted_partitions(t: &Topology) -> Vec<PartitionInfo> {
    let mut parts: Vec<_> = t.partitions.clone();
    parts.sort_by_key(|p| p.range.start);
    parts
}

#[tokio::test]
async fn every_kind_runs_against_the_testbed_and_changes_the_layout() {
    let dir = tempfile::tempdir().expect("dir");
    let (testbed, url) = start_testbed().await;
    let mut cfg = config(dir.path(), &url, "");
    cfg.executor.timeouts.move_ms = 60_000;
    let s = start(cfg).await;
    let before: Topology = s.viewer.get("/v1/topology").await.expect("topology");
    let parts = sorted_partitions(&before);
    let gold: Vec<_> = before
        .workers
        .iter()
        .filter(|w| w.group.as_ref().is_some_and(|g| g.as_str() == "gold"))
        .map(|w| w.id.clone())
        .collect();
    let plain: Vec<_> = before.workers.iter().filter(|w| w.group.is_none()).map(|w| w.id.clone()).collect();
    assert_eq!(gold.len(), 2);

    let (p0, p1, p2, p3, p4) = (&parts[0], &parts[1], &parts[2], &parts[3], &parts[4]);
    let mid = Key(p0.range.start.0 + (p0.range.end.0 - p0.range.start.0) / 2);
    let to = plain.iter().find(|w| **w != p1.owner).expect("another worker").clone();
    let specs = vec![
        ("tb-split", ActionSpec::Split { partition: p0.id.clone(), split_key: mid }),
        ("tb-move", ActionSpec::Move { partition: p1.id.clone(), to_worker: to.clone(), max_bytes_per_sec: None }),
        ("tb-merge", ActionSpec::Merge { left: p2.id.clone(), right: p3.id.clone(), to_worker: None }),
        (
            "tb-group",
            ActionSpec::Group {
                target: GroupTarget::Partition { partition: p4.id.clone() },
                group: "gold".parse().expect("id"),
            },
        ),
        (
            "tb-reshard",
            ActionSpec::Reshard {
                tenant: "acme".parse().expect("id"),
                dataset: "profiles".parse().expect("id"),
                tenant_shards: 12,
                dataset_shards: 6,
                load_balancing: LoadBalancing::RoundRobin,
            },
        ),
    ];
    for (id, spec) in &specs {
        s.master.post::<_, ActionRecord>("/v1/actions", &action(id, spec.clone(), "acme")).await.expect("accepted");
    }
    for (id, _) in &specs {
        let record = wait_done(&s.viewer, id).await;
        assert_eq!(record.state, ActionState::Succeeded, "{id}: {:?}", record.failure);
    }
    // Read at once: an action that succeeded drops the ops server's cached topology, so the
    // layout it serves shows every effect without waiting out the cache.
    let after: Topology = s.viewer.get("/v1/topology").await.expect("topology");
    let find = |id: &lb_common::ids::PartitionId| after.partitions.iter().find(|p| &p.id == id);
    assert!(
        after.partitions.iter().any(|p| p.range.start == mid),
        "split created a partition starting at the split key"
    );
    assert_eq!(find(&p1.id).map(|p| p.owner.clone()), Some(to), "moved");
    let merged = after.partitions.iter().find(|p| p.range.start == p2.range.start).expect("merged partition");
    assert_eq!(merged.range.end, p3.range.end, "merged");
    let grouped = after.partitions.iter().find(|p| p.range.start == p4.range.start).expect("grouped partition");
    assert!(gold.contains(&grouped.owner), "grouped onto gold: {:?}", grouped.owner);
    let dataset = after.datasets.iter().find(|d| d.dataset.as_str() == "profiles").expect("dataset");
    assert_eq!((dataset.dataset_shards, dataset.load_balancing), (6, LoadBalancing::RoundRobin), "resharded");
    assert!(s.server.stop(STOP).await);
    assert!(testbed.stop(STOP).await);
}

#[tokio::test]
async fn an_injected_storage_failure_fails_the_action_and_changes_nothing() {
    let dir = tempfile::tempdir().expect("dir");
    let (testbed, url) = start_testbed().await;
    let s = start(config(dir.path(), &url, "")).await;
    let client = lb_common::http::HttpClient::new(&url, &lb_common::config::shared::HttpClientConfig::default());
    let fault = serde_json::json!({"kind": "split", "fault": "fail", "count": 1});
    let _: serde_json::Value = client.post("/v1/admin/faults", &fault).await.expect("fault injected");
    let before: Topology = s.viewer.get("/v1/topology").await.expect("topology");
    let p0 = sorted_partitions(&before)[0].clone();
    let mid = Key(p0.range.start.0 + (p0.range.end.0 - p0.range.start.0) / 2);
    let spec = ActionSpec::Split { partition: p0.id.clone(), split_key: mid };
    s.master.post::<_, ActionRecord>("/v1/actions", &action("tb-fail", spec, "acme")).await.expect("accepted");
    let record = wait_done(&s.viewer, "tb-fail").await;
    assert_eq!(record.state, ActionState::Failed);
    assert_eq!(record.failure.expect("failure").execution, Execution::NotExecuted);
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    let after: Topology = s.viewer.get("/v1/topology").await.expect("topology");
    assert_eq!(after.partitions.len(), before.partitions.len(), "no split happened");
    assert!(s.server.stop(STOP).await);
    assert!(testbed.stop(STOP).await);
}
