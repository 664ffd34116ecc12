//! The storage admin API over real HTTP on loopback: every operation, every invalid one, the
//! fault endpoint, and the shared error body.

use std::time::Duration;

use lb_common::config::shared::HttpClientConfig;
use lb_common::http::{ClientError, HttpClient};
use lb_common::ids::{Key, OperationId};
use lb_common::protocol::{
    ActionKind, ActionSpec, AdminRequest, GroupTarget, LoadBalancing, Operation, OperationAccepted, OperationState,
    Topology,
};
use lb_testbed::Engine;
use lb_testbed::ops::FaultRule;
use lb_testbed::realtime::{self, RealtimeOptions, RunningTestbed};
use lb_testbed::scenario::FaultKind;
use reqwest::StatusCode;

use crate::support::{pid, scenario};

const WORKLOAD: &str = r#"
[[tables.workloads]]
kind = "uniform"
ops_per_sec = 8000
[[datasets]]
tenant = "acme"
dataset = "ingest"
tenant_shards = 8
dataset_shards = 2
load_balancing = "fingerprint"
ops_per_sec = 1000
"#;

async fn start() -> (RunningTestbed, HttpClient) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let mut options = RealtimeOptions::new(listener.local_addr().expect("addr"));
    options.tick = Duration::from_millis(20);
    let testbed =
        realtime::start(Engine::new(&scenario(4, 8, WORKLOAD)), listener, options).await.expect("testbed starts");
    let client = HttpClient::new(format!("http://{}", testbed.addr()), &HttpClientConfig::default());
    (testbed, client)
}

async fn submit(client: &HttpClient, kind: &str, id: &str, spec: ActionSpec) -> Result<OperationId, ClientError> {
    let req = AdminRequest { action_id: id.parse().expect("action id"), spec };
    let accepted: OperationAccepted = client.post(&format!("/v1/admin/{kind}"), &req).await?;
    Ok(accepted.operation_id)
}

async fn wait_done(client: &HttpClient, op: &OperationId) -> Operation {
    for _ in 0..200 {
        let o: Operation = client.get(&format!("/v1/admin/operations/{op}")).await.expect("poll");
        if o.state != OperationState::Running && o.state != OperationState::Pending {
            return o;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("operation {op} did not finish in 10 s");
}

fn status(result: Result<OperationId, ClientError>) -> (StatusCode, String) {
    match result {
        Err(ClientError::Status { status, body, .. }) => (status, body.code),
        other => panic!("expected an error status, got {other:?}"),
    }
}

#[tokio::test]
async fn every_operation_runs_over_http_and_changes_the_topology() {
    let (testbed, client) = start().await;
    let before: Topology = client.get("/v1/topology").await.expect("topology");
    assert_eq!(before.partitions.len(), 8);
    assert_eq!(before.workers.len(), 4);
    assert!(before.partitions.iter().all(|p| p.supported_actions.contains(&ActionKind::Split) && p.limit.is_some()));
    let p = |i: usize| before.partitions[i].id.clone();
    let owner1 = before.partitions[1].owner.clone();
    let to: lb_common::ids::WorkerId =
        if owner1.as_str() == "w-0000" { "w-0001" } else { "w-0000" }.parse().expect("id");
    let mid0 = Key(before.partitions[0].range.start.0 + (1 << 58));

    // Different partitions: all five run at once.
    let ops = [
        submit(&client, "split", "a-split", ActionSpec::Split { partition: p(0), split_key: mid0 })
            .await
            .expect("split"),
        submit(
            &client,
            "move",
            "a-move",
            ActionSpec::Move { partition: p(1), to_worker: to.clone(), max_bytes_per_sec: None },
        )
        .await
        .expect("move"),
        submit(&client, "merge", "a-merge", ActionSpec::Merge { left: p(2), right: p(3), to_worker: None })
            .await
            .expect("merge"),
        submit(
            &client,
            "group",
            "a-group",
            ActionSpec::Group {
                target: GroupTarget::Partition { partition: p(4) },
                group: "gold".parse().expect("id"),
            },
        )
        .await
        .expect("group"),
        submit(
            &client,
            "reshard",
            "a-reshard",
            ActionSpec::Reshard {
                tenant: "acme".parse().expect("id"),
                dataset: "ingest".parse().expect("id"),
                tenant_shards: 8,
                dataset_shards: 4,
                load_balancing: LoadBalancing::RoundRobin,
            },
        )
        .await
        .expect("reshard"),
    ];
    // A retry of the same action returns the same operation.
    let again = submit(
        &client,
        "move",
        "a-move",
        ActionSpec::Move { partition: p(1), to_worker: to.clone(), max_bytes_per_sec: None },
    )
    .await;
    assert_eq!(again.expect("retry"), ops[1]);
    for op in &ops {
        let done = wait_done(&client, op).await;
        assert_eq!(done.state, OperationState::Succeeded, "{done:?}");
        assert_eq!(done.progress_ratio, 1.0);
        assert!(done.finished_at_ms.is_some_and(|f| f >= done.started_at_ms));
    }
    let after: Topology = client.get("/v1/topology").await.expect("topology");
    assert!(after.version > before.version);
    assert_eq!(after.partitions.len(), 8, "one split and one merge");
    assert_eq!(after.partitions[1].range.start, mid0);
    assert_eq!(after.partitions.iter().find(|x| x.id == p(1)).map(|x| &x.owner), Some(&to));
    assert!(after.partitions.iter().all(|x| x.id != p(3)), "merged away");
    let grouped = after.partitions.iter().find(|x| x.id == p(4)).expect("p4");
    assert_eq!((grouped.group.as_ref().map(|g| g.as_str()), grouped.owner.as_str()), (Some("gold"), "w-0003"));
    assert_eq!(after.datasets[0].dataset_shards, 4);
    testbed.stop(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn invalid_operations_get_4xx_and_change_nothing() {
    let (testbed, client) = start().await;
    let before: Topology = client.get("/v1/topology").await.expect("topology");
    let p0 = before.partitions[0].id.clone();
    let outside = Key(before.partitions[0].range.end.0 + 1);
    let cases = [
        ("split", ActionSpec::Split { partition: p0.clone(), split_key: outside }, 422, "invalid_action"),
        ("split", ActionSpec::Split { partition: pid("nope"), split_key: Key(9) }, 404, "unknown_partition"),
        (
            "merge",
            ActionSpec::Merge { left: p0.clone(), right: before.partitions[2].id.clone(), to_worker: None },
            422,
            "invalid_action",
        ),
        (
            "move",
            ActionSpec::Move {
                partition: p0.clone(),
                to_worker: "w-9999".parse().expect("id"),
                max_bytes_per_sec: None,
            },
            422,
            "invalid_action",
        ),
        (
            "group",
            ActionSpec::Group {
                target: GroupTarget::Tenant { tenant: "ghost".parse().expect("id") },
                group: "gold".parse().expect("id"),
            },
            422,
            "invalid_action",
        ),
        (
            "reshard",
            ActionSpec::Reshard {
                tenant: "acme".parse().expect("id"),
                dataset: "ingest".parse().expect("id"),
                tenant_shards: 1000,
                dataset_shards: 4,
                load_balancing: LoadBalancing::Fingerprint,
            },
            422,
            "invalid_action",
        ),
        // A spec posted to another kind's endpoint.
        ("move", ActionSpec::Split { partition: p0.clone(), split_key: Key(5) }, 422, "wrong_kind"),
    ];
    for (i, (kind, spec, want_status, want_code)) in cases.into_iter().enumerate() {
        let (got, code) = status(submit(&client, kind, &format!("bad-{i}"), spec).await);
        assert_eq!((got.as_u16(), code.as_str()), (want_status, want_code), "case {i}");
    }
    // Busy partition and reused action id: 409.
    let mv =
        ActionSpec::Move { partition: p0.clone(), to_worker: "w-0001".parse().expect("id"), max_bytes_per_sec: None };
    submit(&client, "move", "m-1", mv).await.expect("move accepted");
    let split = ActionSpec::Split { partition: p0.clone(), split_key: Key(before.partitions[0].range.start.0 + 99) };
    assert_eq!(
        status(submit(&client, "split", "s-1", split.clone()).await),
        (StatusCode::CONFLICT, "partition_busy".into())
    );
    assert_eq!(status(submit(&client, "split", "m-1", split).await), (StatusCode::CONFLICT, "action_reused".into()));
    // Malformed bodies and unknown operations.
    let raw = reqwest::Client::new();
    let url = format!("{}/v1/admin/split", client.base_url());
    let bad = raw.post(&url).header("content-type", "application/json").body("{").send().await.expect("send");
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    let unknown_field = serde_json::json!({"action_id": "x", "spec": {"kind": "split", "partition": "p", "split_key": "0000000000000001", "force": true}});
    let bad = raw.post(&url).json(&unknown_field).send().await.expect("send");
    assert_eq!(bad.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let missing: Result<Operation, _> = client.get("/v1/admin/operations/op-999999").await;
    assert_eq!(missing.expect_err("404").status(), Some(StatusCode::NOT_FOUND));

    let after: Topology = client.get("/v1/topology").await.expect("topology");
    assert_eq!(after.partitions, before.partitions, "only the accepted move is pending; nothing changed yet");
    testbed.stop(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn injected_faults_fail_and_hang_operations() {
    let (testbed, client) = start().await;
    let topo: Topology = client.get("/v1/topology").await.expect("topology");
    let rule = FaultRule { kind: Some(ActionKind::Split), fault: FaultKind::Fail, count: 1 };
    let pending: Vec<FaultRule> = client.post("/v1/admin/faults", &rule).await.expect("fault");
    assert_eq!(pending, vec![rule]);
    let hang = FaultRule { kind: Some(ActionKind::Merge), fault: FaultKind::Hang, count: 1 };
    let _: Vec<FaultRule> = client.post("/v1/admin/faults", &hang).await.expect("fault");
    let bad = FaultRule { kind: None, fault: FaultKind::Fail, count: 0 };
    let refused: Result<Vec<FaultRule>, _> = client.post("/v1/admin/faults", &bad).await;
    assert_eq!(refused.expect_err("422").status(), Some(StatusCode::UNPROCESSABLE_ENTITY));

    let p0 = &topo.partitions[0];
    let split = ActionSpec::Split { partition: p0.id.clone(), split_key: Key(p0.range.start.0 + 1000) };
    let failed = submit(&client, "split", "f-1", split).await.expect("accepted");
    let merge = ActionSpec::Merge {
        left: topo.partitions[2].id.clone(),
        right: topo.partitions[3].id.clone(),
        to_worker: None,
    };
    let hung = submit(&client, "merge", "f-2", merge).await.expect("accepted");
    let done = wait_done(&client, &failed).await;
    assert_eq!(done.state, OperationState::Failed);
    assert!(done.error.is_some());
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let still: Operation = client.get(&format!("/v1/admin/operations/{hung}")).await.expect("poll");
    assert_eq!(still.state, OperationState::Running);
    let after: Topology = client.get("/v1/topology").await.expect("topology");
    assert_eq!(after.partitions, topo.partitions, "neither faulty operation changed the layout");
    let left: Vec<FaultRule> = client.get("/v1/admin/faults").await.expect("faults");
    assert!(left.is_empty());
    testbed.stop(Duration::from_secs(5)).await;
}
