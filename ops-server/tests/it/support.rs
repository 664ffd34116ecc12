//! Test support: an ops server in-process on loopback, and a storage admin API stand-in that
//! speaks the real protocol over real HTTP with scripted behaviour per partition name:
//! `fail*` operations fail, `stall*` never progress, `slow*` progress but never finish,
//! `reject*` submissions get 422, anything else succeeds after two polls.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use lb_common::config::shared::HttpClientConfig;
use lb_common::http::{ApiError, ApiJson, HttpClient};
use lb_common::ids::{ActionId, Key, KeyRange, OperationId};
use lb_common::protocol::*;
use lb_ops_server::RunningOpsServer;
use lb_ops_server::config::OpsServerConfig;
use tokio::sync::watch;

pub const MASTER_TOKEN: &str = "test-master-token-000001";
pub const SRE_TOKEN: &str = "test-operator-token-00001";
pub const VIEWER_TOKEN: &str = "test-viewer-token-000001";
pub const AGENT_TOKEN: &str = "test-agent-token-0000001";

#[derive(Debug, Default)]
pub struct FakeStorage {
    /// Submissions per action id: proves a duplicate never runs twice.
    pub submissions: Mutex<HashMap<ActionId, u32>>,
    ops: Mutex<HashMap<OperationId, (AdminRequest, u32, usize)>>,
    next_op: AtomicU64,
    /// Every operation: its spec, when it was submitted, when it was first seen finished.
    pub log: Mutex<Vec<(ActionSpec, Instant, Option<Instant>)>>,
}

impl FakeStorage {
    /// The most operations that were in flight at once, over all workers and on one worker
    /// (partitions p1 and p2 live on w-1).
    pub fn max_overlap(&self) -> (usize, usize) {
        let log = self.log.lock().expect("lock");
        let on_w1 = |spec: &ActionSpec| matches!(spec, ActionSpec::Split { partition, .. } | ActionSpec::Move { partition, .. } if partition.as_str() == "p1" || partition.as_str() == "p2");
        let at = |t: Instant, filter: &dyn Fn(&ActionSpec) -> bool| {
            log.iter().filter(|(spec, s, e)| filter(spec) && *s <= t && e.is_none_or(|e| t < e)).count()
        };
        let all = log.iter().map(|(_, s, _)| at(*s, &|_| true)).max().unwrap_or(0);
        let w1 = log.iter().map(|(_, s, _)| at(*s, &on_w1)).max().unwrap_or(0);
        (all, w1)
    }
}

fn behaviour(spec: &ActionSpec) -> &'static str {
    let name = match spec {
        ActionSpec::Split { partition, .. }
        | ActionSpec::SplitInto { partition, .. }
        | ActionSpec::Move { partition, .. } => partition.to_string(),
        ActionSpec::Merge { left, .. } => left.to_string(),
        ActionSpec::Group { group, .. } => group.to_string(),
        ActionSpec::Reshard { dataset, .. } => dataset.to_string(),
    };
    ["fail", "stall", "slow", "reject"].into_iter().find(|b| name.starts_with(b)).unwrap_or("ok")
}

async fn topology(State(_s): State<Arc<FakeStorage>>) -> ApiJson<Topology> {
    let worker = |id: &str, group: Option<&str>| WorkerInfo {
        id: id.parse().expect("id"),
        capacity: Capacity { ops_per_sec: 10_000.0, bytes_per_sec: 1e8 },
        cpu_cores: 0.0,
        group: group.map(|g| g.parse().expect("id")),
        health: Health::Healthy,
        zone: None,
        rack: None,
    };
    let partition = |id: &str, owner: &str, start: u64| PartitionInfo {
        id: id.parse().expect("id"),
        tenant: "acme".parse().expect("id"),
        table: "orders".parse().expect("id"),
        range: KeyRange { start: Key(start), end: Key(start + 99) },
        owner: owner.parse().expect("id"),
        group: None,
        stored_bytes: 1 << 20,
        limit: None,
        supported_actions: ActionKind::ALL.to_vec(),
    };
    let mut partitions: Vec<PartitionInfo> =
        FAKE_PARTITIONS.iter().map(|&(id, owner)| partition(id, owner, fake_range_start(id))).collect();
    // Partitions named for a behaviour (`fail1`, `stall1`, ...) exist too, so the ops server's
    // submission check lets them through to the storage, which then behaves as named.
    partitions.extend(["fail1", "stall1", "slow1", "reject1"].map(|id| partition(id, "w-1", fake_range_start(id))));
    ApiJson(Topology {
        version: 1,
        workers: vec![worker("w-1", None), worker("w-2", None), worker("w-3", Some("iso")), worker("w-4", None)],
        partitions,
        datasets: vec![DatasetInfo {
            tenant: "acme".parse().expect("id"),
            dataset: "profiles".parse().expect("id"),
            tenant_shards: 8,
            dataset_shards: 4,
            load_balancing: lb_common::protocol::LoadBalancing::Fingerprint,
            shard_owners: vec!["w-1".parse().expect("id"); 8],
            zones: Vec::new(),
        }],
        new_group_dedicates_owner: false,
        multi_way_split: false,
        move_rate_limit: false,
        merge_to_worker: false,
    })
}

async fn submit(
    State(s): State<Arc<FakeStorage>>,
    UrlPath(kind): UrlPath<String>,
    ApiJson(req): ApiJson<AdminRequest>,
) -> Result<(StatusCode, ApiJson<OperationAccepted>), ApiError> {
    if kind != req.spec.kind().as_str() {
        return Err(ApiError::bad_request("kind in path and body differ"));
    }
    if behaviour(&req.spec) == "reject" {
        return Err(ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_field", "no such partition"));
    }
    *s.submissions.lock().expect("lock").entry(req.action_id.clone()).or_default() += 1;
    let op: OperationId = format!("op-{}", s.next_op.fetch_add(1, Ordering::SeqCst)).parse().expect("id");
    let index = {
        let mut log = s.log.lock().expect("lock");
        log.push((req.spec.clone(), Instant::now(), None));
        log.len() - 1
    };
    s.ops.lock().expect("lock").insert(op.clone(), (req, 0, index));
    Ok((StatusCode::ACCEPTED, ApiJson(OperationAccepted { operation_id: op })))
}

async fn operation(
    State(s): State<Arc<FakeStorage>>,
    UrlPath(id): UrlPath<String>,
) -> Result<ApiJson<Operation>, ApiError> {
    let id: OperationId = id.parse().map_err(|_| ApiError::bad_request("bad id"))?;
    let mut ops = s.ops.lock().expect("lock");
    let (req, polls, index) = ops.get_mut(&id).ok_or_else(|| ApiError::not_found("no such operation"))?;
    *polls += 1;
    let b = behaviour(&req.spec);
    let (state, progress, error) = match (b, *polls) {
        ("fail", _) => (OperationState::Failed, 0.0, Some("disk full on target".to_owned())),
        ("stall", _) => (OperationState::Running, 0.25, None),
        ("slow", n) => (OperationState::Running, 1.0 - 1.0 / f64::from(n + 1), None),
        (_, n) if n >= 2 => (OperationState::Succeeded, 1.0, None),
        _ => (OperationState::Running, 0.5, None),
    };
    if matches!(state, OperationState::Succeeded | OperationState::Failed) {
        let mut log = s.log.lock().expect("lock");
        log[*index].2.get_or_insert_with(Instant::now);
    }
    Ok(ApiJson(Operation {
        id: id.clone(),
        action_id: req.action_id.clone(),
        kind: req.spec.kind(),
        state,
        started_at_ms: 0,
        finished_at_ms: None,
        progress_ratio: progress,
        error,
    }))
}

/// Starts the storage stand-in; returns it and its base URL.
pub async fn fake_storage() -> (Arc<FakeStorage>, String) {
    let state = Arc::new(FakeStorage::default());
    let app = Router::new()
        .route("/v1/topology", get(topology))
        .route("/v1/admin/{kind}", post(submit))
        .route("/v1/admin/operations/{id}", get(operation))
        .with_state(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (state, url)
}

pub fn config_text(dir: &Path, storage_url: &str, extra: &str) -> String {
    format!(
        "[http]\nlisten = \"127.0.0.1:0\"\nbody_limit_bytes = 65536\n\
         [audit]\npath = \"{}\"\n[storage]\nurl = \"{storage_url}\"\n\
         [[auth.tokens]]\nname = \"master\"\ntoken = \"{MASTER_TOKEN}\"\nrole = \"service\"\n\
         [[auth.tokens]]\nname = \"sre\"\ntoken = \"{SRE_TOKEN}\"\nrole = \"operator\"\n\
         [[auth.tokens]]\nname = \"dash\"\ntoken = \"{VIEWER_TOKEN}\"\nrole = \"viewer\"\n\
         [[auth.tokens]]\nname = \"agents\"\ntoken = \"{AGENT_TOKEN}\"\nrole = \"agent\"\n\
         [registry]\nheartbeat_interval_ms = 100\ndown_after_ms = 500\n\
         [collect]\nagent_deadline_ms = 300\nmax_agent_deadline_ms = 1000\n\
         [executor]\npoll_interval_ms = 20\nstall_timeout_ms = 400\nmax_concurrent = 4\n\
         [executor.timeouts]\nsplit_ms = 60000\nmove_ms = 700\nmerge_ms = 60000\ngroup_ms = 60000\nreshard_ms = 60000\n\
         {extra}",
        dir.join("audit.sqlite").display()
    )
}

pub fn config(dir: &Path, storage_url: &str, extra: &str) -> OpsServerConfig {
    lb_common::config::parse(&config_text(dir, storage_url, extra), Path::new("ops.toml")).expect("valid test config")
}

pub struct Server {
    pub server: RunningOpsServer,
    pub config: watch::Sender<Arc<OpsServerConfig>>,
    pub master: HttpClient,
    pub sre: HttpClient,
    pub viewer: HttpClient,
    pub agent: HttpClient,
    pub anonymous: HttpClient,
}

pub async fn start(config: OpsServerConfig) -> Server {
    lb_common::telemetry::metrics_handle();
    let (tx, rx) = watch::channel(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let server = lb_ops_server::start(rx, listener, None).await.expect("ops server starts");
    let base = HttpClient::new(format!("http://{}", server.addr()), &HttpClientConfig::default());
    Server {
        master: base.clone().with_bearer_token(MASTER_TOKEN),
        sre: base.clone().with_bearer_token(SRE_TOKEN),
        viewer: base.clone().with_bearer_token(VIEWER_TOKEN),
        agent: base.clone().with_bearer_token(AGENT_TOKEN),
        anonymous: base,
        config: tx,
        server,
    }
}

pub fn action(id: &str, spec: ActionSpec, tenant: &str) -> ActionRequest {
    ActionRequest {
        id: id.parse().expect("id"),
        spec,
        origin: Origin::Online,
        policy: Some("partition_overload".to_owned()),
        reason: "test".to_owned(),
        actor_path: vec![tenant.to_owned(), "orders".to_owned()],
        leader_epoch: None,
    }
}

/// The fake storage's partitions and owners: `p1` and `p2` adjacent on `w-1`, `p3` on `w-4`.
const FAKE_PARTITIONS: [(&str, &str); 3] = [("p1", "w-1"), ("p2", "w-1"), ("p3", "w-4")];

/// Where a fake partition's 100-key range starts (`p2` right after `p1`; the behaviour
/// partitions share `p1`'s keys, which the fake storage does not mind).
pub fn fake_range_start(partition: &str) -> u64 {
    match partition {
        "p2" => 100,
        "p3" => 200,
        _ => 0,
    }
}

/// A split in the middle of the partition's fake range.
pub fn split(partition: &str) -> ActionSpec {
    ActionSpec::Split { partition: partition.parse().expect("id"), split_key: Key(fake_range_start(partition) + 50) }
}

pub fn mv(partition: &str, to: &str) -> ActionSpec {
    ActionSpec::Move {
        partition: partition.parse().expect("id"),
        to_worker: to.parse().expect("id"),
        max_bytes_per_sec: None,
    }
}

/// Polls the action until it reaches a terminal state (the bound only stops a broken build).
pub async fn wait_done(client: &HttpClient, id: &str) -> ActionRecord {
    let started = tokio::time::Instant::now();
    loop {
        let record: ActionRecord = client.get(&format!("/v1/actions/{id}")).await.expect("get action");
        if record.state.is_terminal() {
            return record;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "action {id} never finished: {record:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub const STOP: Duration = Duration::from_secs(20);
