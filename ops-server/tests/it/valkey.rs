//! The Valkey storage adapter against real `valkey-server` processes (a 3-node `LocalCluster`
//! on loopback; the binary is found or installed, never skipped): topology, moves of slots that
//! hold keys (through the adapter and through the ops server's executor over HTTP),
//! idempotency, group, refusals, and a node killed in the middle of a migration.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lb_common::http::ClientError;
use lb_common::ids::{OperationId, PartitionId, WorkerId};
use lb_common::protocol::*;
use lb_ops_server::config::ValkeyStorageConfig;
use lb_ops_server::storage::valkey::{ValkeyStorage, partition_id};
use lb_ops_server::storage::{StorageAdapter, StorageError};
use lb_valkey::reply::MigrationState;
use lb_valkey::{LocalCluster, LocalClusterConfig, NodeAddr, SLOT_COUNT, Slot, SlotRange, key_slot};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use crate::support::*;

/// Bound on any one wait here; a loopback migration of a few thousand keys takes ~100 ms.
const WAIT: Duration = Duration::from_secs(60);

async fn cluster(dir: &Path) -> LocalCluster {
    LocalCluster::start(LocalClusterConfig::new(3, dir.join("cluster"))).await.expect("cluster starts")
}

fn adapter_config(cluster: &LocalCluster) -> ValkeyStorageConfig {
    let seeds = cluster.addrs().iter().map(ToString::to_string).collect();
    let mut config = ValkeyStorageConfig::new(seeds);
    config.node_ops_per_sec = Some(100_000.0);
    config.poll_interval_ms = 20;
    config
}

fn worker(cluster: &LocalCluster, index: usize) -> WorkerId {
    format!("valkey-{}", cluster.addr(index).port).parse().expect("id")
}

fn slot(n: u16) -> Slot {
    Slot::new(n).expect("slot")
}

/// The node of the initial even split that owns `slot`.
fn initial_owner(cluster: &LocalCluster, slot: Slot) -> usize {
    SlotRange::even_split(cluster.len()).iter().position(|r| r.contains(slot)).expect("assigned")
}

/// `count` keys (with values) that all hash to `slot`.
fn keys_in_slot(slot: Slot, count: usize, value_bytes: usize) -> Vec<(String, String)> {
    let tag = (0u64..).map(|n| format!("t{n}")).find(|t| key_slot(t.as_bytes()) == slot).expect("a tag hashes here");
    (0..count).map(|i| (format!("{{{tag}}}:{i}"), format!("{i:0>width$}", width = value_bytes))).collect()
}

async fn raw(addr: &NodeAddr) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(format!("redis://{addr}/")).expect("client");
    client.get_multiplexed_async_connection().await.expect("connect")
}

/// Writes `pairs` to the node at `addr` in pipelined batches.
async fn fill(addr: &NodeAddr, pairs: &[(String, String)]) {
    let mut conn = raw(addr).await;
    for batch in pairs.chunks(2_000) {
        let mut pipe = redis::pipe();
        for (k, v) in batch {
            pipe.cmd("SET").arg(k).arg(v).ignore();
        }
        pipe.query_async::<()>(&mut conn).await.expect("SET batch");
    }
}

/// How many of `pairs` the node at `addr` serves with their value (a MOVED reply fails the
/// whole batch, so a node that no longer owns the slot reads as zero).
async fn read_back(addr: &NodeAddr, pairs: &[(String, String)]) -> usize {
    let mut conn = raw(addr).await;
    let mut good = 0;
    for batch in pairs.chunks(2_000) {
        let mut pipe = redis::pipe();
        for (k, _) in batch {
            pipe.cmd("GET").arg(k);
        }
        let Ok(values) = pipe.query_async::<Vec<Option<String>>>(&mut conn).await else { continue };
        good += batch.iter().zip(values).filter(|((_, v), got)| got.as_deref() == Some(v.as_str())).count();
    }
    good
}

async fn wait_operation(storage: &ValkeyStorage, op: &OperationId) -> Operation {
    let started = Instant::now();
    loop {
        let operation = storage.operation(op).await.expect("operation is known");
        if matches!(operation.state, OperationState::Succeeded | OperationState::Failed) {
            return operation;
        }
        assert!(started.elapsed() < WAIT, "operation {op} never finished: {operation:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn owner_of(topology: &Topology, slot: Slot) -> &WorkerId {
    let id = partition_id(slot);
    &topology.partitions.iter().find(|p| p.id == id).expect("slot listed").owner
}

fn request(action: &str, spec: ActionSpec) -> AdminRequest {
    AdminRequest { action_id: action.parse().expect("id"), spec }
}

/// Migration jobs the node at `index` lists for exactly `slot`.
async fn jobs_for(cluster: &LocalCluster, index: usize, slot: Slot) -> usize {
    let mut client = cluster.connect(index).await.expect("connect");
    let jobs = client.slot_migrations().await.expect("GETSLOTMIGRATIONS");
    jobs.iter().filter(|j| j.slot_ranges == [SlotRange::single(slot)]).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topology_move_idempotency_and_refusals() {
    let dir = tempfile::tempdir().expect("dir");
    let cluster = cluster(dir.path()).await;
    let storage = ValkeyStorage::new(adapter_config(&cluster)).expect("adapter");
    let hot = slot(100);
    let source = initial_owner(&cluster, hot);
    let pairs = keys_in_slot(hot, 3_000, 64);
    fill(&cluster.addr(source), &pairs).await;

    let reading = Instant::now();
    let topology = storage.topology().await.expect("topology");
    eprintln!("topology of 16,384 slots read in {:?}", reading.elapsed());
    let workers: Vec<&str> = topology.workers.iter().map(|w| w.id.as_str()).collect();
    let mut expected: Vec<String> = (0..3).map(|i| worker(&cluster, i).to_string()).collect();
    expected.sort();
    assert_eq!(workers, expected);
    assert!(topology.workers.iter().all(|w| w.health == Health::Healthy && w.capacity.ops_per_sec == 100_000.0));
    assert!(topology.workers.iter().all(|w| w.cpu_cores == 1.0), "one main thread per primary");
    assert_eq!(topology.partitions.len(), usize::from(SLOT_COUNT));
    for (index, range) in SlotRange::even_split(3).into_iter().enumerate() {
        for s in [range.start(), range.end()] {
            assert_eq!(owner_of(&topology, s), &worker(&cluster, index), "slot {s}");
        }
    }
    let p = topology.partitions.iter().find(|p| p.id == partition_id(hot)).expect("hot slot");
    assert_eq!((p.tenant.as_str(), p.table.as_str()), ("valkey", "slots"));
    assert_eq!(p.range, lb_agent::source::valkey::rates::slot_key_range(hot), "the agent's key range");
    assert_eq!(p.supported_actions, [ActionKind::Move, ActionKind::Group]);
    assert!(p.stored_bytes >= 3_000 * 64, "3,000 keys of 64 bytes: {}", p.stored_bytes);
    let empty = topology.partitions.iter().find(|p| p.id == partition_id(slot(101))).expect("slot 101");
    assert_eq!(empty.stored_bytes, 0);
    assert_eq!(storage.topology().await.expect("again").version, topology.version, "nothing changed");

    // Move the slot with its keys.
    let target = (source + 1) % 3;
    let spec =
        ActionSpec::Move { partition: partition_id(hot), to_worker: worker(&cluster, target), max_bytes_per_sec: None };
    let started = Instant::now();
    let op = storage.submit(&request("move-1", spec.clone())).await.expect("submitted");
    assert_eq!(op.as_str(), "valkey-move-1");
    let again = storage.submit(&request("move-1", spec.clone())).await.expect("resubmitted while it runs");
    assert_eq!(again, op);
    let done = wait_operation(&storage, &op).await;
    eprintln!("moved slot {hot} with 3,000 keys in {:?}", started.elapsed());
    assert_eq!((done.state, done.progress_ratio, done.kind), (OperationState::Succeeded, 1.0, ActionKind::Move));
    assert_eq!(read_back(&cluster.addr(target), &pairs).await, pairs.len(), "every key on the new owner");
    assert_eq!(read_back(&cluster.addr(source), &pairs).await, 0, "the old owner redirects");
    let after = storage.topology().await.expect("topology after");
    assert_eq!(owner_of(&after, hot), &worker(&cluster, target));
    assert!(after.version > topology.version, "the layout changed");
    // Idempotent after success too: the same operation, and still one job on the source.
    assert_eq!(storage.submit(&request("move-1", spec)).await.expect("resubmitted after"), op);
    assert_eq!(jobs_for(&cluster, source, hot).await, 1, "the retry started nothing");

    // Already there: succeeds without a migration.
    let spec =
        ActionSpec::Move { partition: partition_id(hot), to_worker: worker(&cluster, target), max_bytes_per_sec: None };
    let op = storage.submit(&request("move-2", spec)).await.expect("submitted");
    assert_eq!(storage.operation(&op).await.expect("known").state, OperationState::Succeeded);
    assert_eq!(jobs_for(&cluster, target, hot).await, 1, "only the import of move-1");

    // Refusals: certainly not executed.
    let split = ActionSpec::Split { partition: partition_id(hot), split_key: lb_common::ids::Key(100) };
    let err = storage.submit(&request("split-1", split)).await.expect_err("slots cannot split");
    assert!(
        matches!(&err, StorageError::Rejected { status: 422, message } if message.contains("cannot be split")),
        "{err}"
    );
    assert_eq!(err.execution(), Execution::NotExecuted);
    let unknown = ActionSpec::Move {
        partition: partition_id(hot),
        to_worker: "valkey-1".parse().expect("id"),
        max_bytes_per_sec: None,
    };
    let err = storage.submit(&request("move-3", unknown)).await.expect_err("unknown worker");
    assert!(matches!(&err, StorageError::Rejected { message, .. } if message.contains("unknown worker")), "{err}");
    let bad = ActionSpec::Move {
        partition: "p1".parse().expect("id"),
        to_worker: worker(&cluster, 0),
        max_bytes_per_sec: None,
    };
    assert!(matches!(storage.submit(&request("move-4", bad)).await, Err(StorageError::Rejected { .. })));
    // A refused action left no operation behind: polling it is an error, not a result.
    assert!(storage.operation(&"valkey-move-3".parse().expect("id")).await.is_err());
}

/// The agent's Valkey source and this adapter name the cluster the same by default, or the
/// master could not join what the agents report with the topology.
#[test]
fn the_default_cluster_name_matches_the_agent() {
    // Slot naming itself is one module (`lb_valkey::naming`) both use.
    assert_eq!(
        lb_ops_server::config::ValkeyStorageConfig::new(Vec::new()).cluster,
        lb_agent::config::DEFAULT_VALKEY_CLUSTER_NAME
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_with_a_password_is_reached_with_it_and_never_echoes_it() {
    const PASSWORD: &str = "s3cret-valkey-pass";
    let dir = tempfile::tempdir().expect("dir");
    let mut config = LocalClusterConfig::new(3, dir.path().join("cluster"));
    config.password = Some(PASSWORD.to_owned());
    let cluster = LocalCluster::start(config).await.expect("cluster starts");

    let without = ValkeyStorage::new(adapter_config(&cluster)).expect("adapter");
    let err = without.topology().await.expect_err("NOAUTH");
    assert!(!err.to_string().contains(PASSWORD), "{err}");
    let mut wrong = adapter_config(&cluster);
    wrong.password = Some("not-the-password".to_owned());
    let err = ValkeyStorage::new(wrong).expect("adapter").topology().await.expect_err("bad password");
    assert!(!err.to_string().contains("not-the-password"), "{err}");

    let mut right = adapter_config(&cluster);
    right.password = Some(PASSWORD.to_owned());
    assert!(!format!("{right:?}").contains(PASSWORD));
    let storage = ValkeyStorage::new(right).expect("adapter");
    assert_eq!(storage.topology().await.expect("topology").workers.len(), 3);
    let hot = slot(12_000);
    let target = (initial_owner(&cluster, hot) + 1) % 3;
    let spec =
        ActionSpec::Move { partition: partition_id(hot), to_worker: worker(&cluster, target), max_bytes_per_sec: None };
    let op = storage.submit(&request("auth-move", spec)).await.expect("submitted");
    assert_eq!(wait_operation(&storage, &op).await.state, OperationState::Succeeded);
    assert_eq!(owner_of(&storage.topology().await.expect("topology"), hot), &worker(&cluster, target));

    // The least an ACL user needs: the commands the adapter sends, nothing else.
    for index in 0..3 {
        let mut client = cluster.connect(index).await.expect("connect");
        let setuser = redis::cmd("ACL")
            .arg("SETUSER")
            .arg("lb-ops")
            .arg("on")
            .arg(">lb-ops-password")
            .arg("-@all")
            .arg(OPS_SERVER_ACL.split(' ').collect::<Vec<_>>())
            .to_owned();
        client.query("ACL SETUSER", &setuser).await.expect("user created");
    }
    let mut limited = adapter_config(&cluster);
    (limited.username, limited.password) = (Some("lb-ops".to_owned()), Some("lb-ops-password".to_owned()));
    let storage = ValkeyStorage::new(limited).expect("adapter");
    let pairs = keys_in_slot(hot, 10, 20);
    let mut conn = redis::Client::open(format!("redis://:{PASSWORD}@{}/", cluster.addr(target)))
        .expect("client")
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    for (k, v) in &pairs {
        redis::cmd("SET").arg(k).arg(v).query_async::<()>(&mut conn).await.expect("SET");
    }
    let back = (target + 1) % 3;
    let mut client = cluster.connect(back).await.expect("connect");
    let set_zone = redis::cmd("CONFIG").arg("SET").arg("availability-zone").arg("eu-1a").to_owned();
    client.query("CONFIG SET", &set_zone).await.expect("zone set");
    let spec =
        ActionSpec::Move { partition: partition_id(hot), to_worker: worker(&cluster, back), max_bytes_per_sec: None };
    let op = storage.submit(&request("acl-move", spec)).await.expect("submitted by the ACL user");
    assert_eq!(wait_operation(&storage, &op).await.state, OperationState::Succeeded);
    let topology = storage.topology().await.expect("topology by the ACL user");
    assert_eq!(owner_of(&topology, hot), &worker(&cluster, back));
    let p = topology.partitions.iter().find(|p| p.id == partition_id(hot)).expect("hot slot");
    assert!(p.stored_bytes >= 10 * 20, "SLOT-STATS and INFO are allowed: {}", p.stored_bytes);
    let zone = topology.workers.iter().find(|w| w.id == worker(&cluster, back)).and_then(|w| w.zone.clone());
    assert_eq!(zone.as_ref().map(|z| z.as_str()), Some("eu-1a"), "the node's zone is read with +info alone");
}

/// Sets node `index`'s `availability-zone` at runtime (lost when the node restarts).
async fn set_zone(cluster: &LocalCluster, index: usize, zone: &str) {
    let mut conn = raw(&cluster.addr(index)).await;
    redis::cmd("CONFIG").arg("SET").arg("availability-zone").arg(zone).query_async::<()>(&mut conn).await.expect("set");
}

/// The zone of each node's worker, by node index.
fn zones(topology: &Topology, cluster: &LocalCluster) -> Vec<Option<String>> {
    (0..cluster.len())
        .map(|i| {
            let w = topology.workers.iter().find(|w| w.id == worker(cluster, i)).expect("worker listed");
            assert_eq!(w.rack, None, "valkey has no rack");
            w.zone.as_ref().map(|z| z.as_str().to_owned())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zones_come_from_the_config_map_then_the_nodes_own_setting() {
    let dir = tempfile::tempdir().expect("dir");
    let mut config = LocalClusterConfig::new(3, dir.path().join("cluster"));
    // Every node starts in eu-1c; runtime CONFIG SETs below change some, until a restart.
    config.extra_args = vec!["--availability-zone".to_owned(), "eu-1c".to_owned()];
    let mut cluster = LocalCluster::start(config).await.expect("cluster starts");
    set_zone(&cluster, 0, "eu-1a").await;
    set_zone(&cluster, 2, "").await; // unset: no zone
    let mut adapter = adapter_config(&cluster);
    // Node 1 says eu-1c; the config's mapping wins.
    adapter.zones.insert(cluster.addr(1).to_string(), "eu-1b".to_owned());
    let some = |z: &str| Some(z.to_owned());

    let storage = ValkeyStorage::new(adapter.clone()).expect("adapter");
    let first = storage.topology().await.expect("topology");
    assert_eq!(zones(&first, &cluster), [some("eu-1a"), some("eu-1b"), None]);

    // Read once, then cached: a change on the node shows after ZONE_REFRESH (a minute) or a new
    // connection, not on the next topology.
    set_zone(&cluster, 0, "eu-1d").await;
    set_zone(&cluster, 1, "eu-1d").await;
    let again = storage.topology().await.expect("topology");
    assert_eq!(zones(&again, &cluster), [some("eu-1a"), some("eu-1b"), None]);
    assert_eq!(again.version, first.version, "nothing changed as far as the adapter knows");

    // A setting that is no valid id is no zone, never a failed topology.
    set_zone(&cluster, 2, "eu 1a/bad").await;
    let fresh = ValkeyStorage::new(adapter.clone()).expect("adapter");
    let read = fresh.topology().await.expect("an invalid zone fails nothing");
    assert_eq!(zones(&read, &cluster), [some("eu-1d"), some("eu-1b"), None]);
    assert_eq!(read.workers.len(), 3);

    // A restarted node is read again on the new connection (it is back in eu-1c, its start-up
    // setting), well before ZONE_REFRESH: the first topology after the restart reconnects, the
    // next one reads.
    cluster.restart(0).await.expect("node 0 restarts");
    let started = Instant::now();
    let after = loop {
        let topology = storage.topology().await.expect("topology");
        if zones(&topology, &cluster)[0] == some("eu-1c") {
            break topology;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "zone never re-read: {:?}", zones(&topology, &cluster));
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(zones(&after, &cluster), [some("eu-1c"), some("eu-1b"), None]);
    assert!(after.version > first.version, "a zone change is a topology change");
}

/// The permissions the adapter needs, as documented in configs/ops-server-valkey.toml.
const OPS_SERVER_ACL: &str =
    "+info +cluster|nodes +cluster|slot-stats +cluster|getslotmigrations +cluster|migrateslots";

/// A node that speaks just enough RESP to be read (`CLUSTER NODES`: it owns every slot and knows
/// one other primary, which is not running; `GETSLOTMIGRATIONS`: no jobs) and never answers
/// `MIGRATESLOTS`, like a node that stalls or a reply lost on the way. Counts what it receives.
async fn silent_migrator() -> (NodeAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let migrations = Arc::new(AtomicUsize::new(0));
    let count = migrations.clone();
    let nodes = format!(
        "{} 127.0.0.1:{port}@{} myself,master - 0 0 1 connected 0-16383\n\
         {} 127.0.0.1:1@10001 master - 0 0 2 connected\n",
        "a".repeat(40),
        u32::from(port) + 10_000,
        "b".repeat(40)
    );
    tokio::spawn(async move {
        loop {
            let Ok((socket, _)) = listener.accept().await else { return };
            let (nodes, count) = (nodes.clone(), count.clone());
            tokio::spawn(async move {
                let (read, mut write) = socket.into_split();
                let mut lines = tokio::io::BufReader::new(read).lines();
                // Requests are RESP arrays of bulk strings: *N, then $len and the word, N times.
                while let Ok(Some(header)) = lines.next_line().await {
                    let n: usize = header.trim_start_matches('*').parse().unwrap_or(0);
                    let mut words = Vec::new();
                    for _ in 0..n {
                        let _len = lines.next_line().await;
                        words.push(lines.next_line().await.ok().flatten().unwrap_or_default().to_uppercase());
                    }
                    let reply = match words.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
                        ["CLUSTER", "NODES"] => format!("${}\r\n{nodes}\r\n", nodes.len()),
                        ["CLUSTER", "GETSLOTMIGRATIONS"] => "*0\r\n".to_owned(),
                        ["CLUSTER", "MIGRATESLOTS", ..] => {
                            count.fetch_add(1, Ordering::SeqCst);
                            continue; // never answered
                        }
                        ["PING"] => "+PONG\r\n".to_owned(),
                        _ => "+OK\r\n".to_owned(),
                    };
                    if write.write_all(reply.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (NodeAddr::new("127.0.0.1", port), migrations)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_without_a_reply_may_have_run_and_is_followed_to_its_end() {
    let (addr, migrations) = silent_migrator().await;
    let mut config = ValkeyStorageConfig::new(vec![addr.to_string()]);
    (config.command_timeout_ms, config.connect_timeout_ms, config.poll_interval_ms) = (300, 300, 20);
    let storage = ValkeyStorage::new(config).expect("adapter");
    let topology = storage.topology().await.expect("topology of the fake");
    assert_eq!(topology.partitions.len(), usize::from(SLOT_COUNT));
    let target: WorkerId = "valkey-1".parse().expect("id");
    let spec = ActionSpec::Move { partition: partition_id(slot(5)), to_worker: target, max_bytes_per_sec: None };
    let err = storage.submit(&request("lost-reply", spec.clone())).await.expect_err("no reply");
    assert!(matches!(err, StorageError::Uncertain(_)), "{err}");
    assert_eq!(err.execution(), Execution::MaybeExecuted);
    // A retry of the same action does not send the command again: it gets the operation that
    // follows the first one.
    let op = storage.submit(&request("lost-reply", spec)).await.expect("the retry gets the operation");
    assert_eq!(op.as_str(), "valkey-lost-reply");
    let done = wait_operation(&storage, &op).await;
    assert_eq!(done.state, OperationState::Failed, "{done:?}");
    assert!(done.error.as_deref().is_some_and(|e| e.contains("no migration job")), "{done:?}");
    assert_eq!(migrations.load(Ordering::SeqCst), 1, "MIGRATESLOTS was sent once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_seeds_are_not_executed() {
    // A port nothing listens on: bind, note the port, close.
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let mut config = ValkeyStorageConfig::new(vec![format!("127.0.0.1:{port}")]);
    config.connect_timeout_ms = 500;
    let storage = ValkeyStorage::new(config).expect("adapter");
    let err = storage.topology().await.expect_err("nothing answers");
    assert!(matches!(err, StorageError::Unreachable(_)), "{err}");
    let spec = ActionSpec::Move {
        partition: partition_id(slot(1)),
        to_worker: "valkey-1".parse().expect("id"),
        max_bytes_per_sec: None,
    };
    let err = storage.submit(&request("m", spec)).await.expect_err("nothing answers");
    assert_eq!(err.execution(), Execution::NotExecuted, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_leaves_the_hot_slot_alone_on_its_node() {
    let dir = tempfile::tempdir().expect("dir");
    let cluster = cluster(dir.path()).await;
    let storage = ValkeyStorage::new(adapter_config(&cluster)).expect("adapter");
    let hot = slot(3_000);
    let neighbour = slot(3_001);
    let owner = initial_owner(&cluster, hot);
    assert_eq!(initial_owner(&cluster, neighbour), owner);
    let hot_keys = keys_in_slot(hot, 1_000, 32);
    let neighbour_keys = keys_in_slot(neighbour, 1_000, 32);
    fill(&cluster.addr(owner), &hot_keys).await;
    fill(&cluster.addr(owner), &neighbour_keys).await;

    let spec = ActionSpec::Group {
        target: GroupTarget::Partition { partition: partition_id(hot) },
        group: "hot-3000".parse().expect("id"),
    };
    let started = Instant::now();
    let op = storage.submit(&request("group-1", spec)).await.expect("submitted");
    let done = wait_operation(&storage, &op).await;
    eprintln!("group moved ~5,460 slots off one node in {:?}", started.elapsed());
    assert_eq!(done.state, OperationState::Succeeded, "{done:?}");

    let topology = storage.topology().await.expect("topology");
    let me = worker(&cluster, owner);
    let mine: Vec<&PartitionInfo> = topology.partitions.iter().filter(|p| p.owner == me).collect();
    assert_eq!(mine.len(), 1, "only the hot slot stays");
    assert_eq!(mine[0].id, partition_id(hot));
    assert_eq!(mine[0].group.as_ref().map(|g| g.as_str()), Some("hot-3000"));
    let grouped = topology.workers.iter().find(|w| w.id == me).expect("worker");
    assert_eq!(grouped.group.as_ref().map(|g| g.as_str()), Some("hot-3000"));
    assert_eq!(topology.partitions.len(), usize::from(SLOT_COUNT), "no slot lost");
    let counts: Vec<usize> = (0..3)
        .filter(|i| *i != owner)
        .map(|i| topology.partitions.iter().filter(|p| p.owner == worker(&cluster, i)).count())
        .collect();
    assert!(counts[0].abs_diff(counts[1]) <= 1, "the other two evened out: {counts:?}");
    assert_eq!(read_back(&cluster.addr(owner), &hot_keys).await, hot_keys.len());
    let new_owner = owner_of(&topology, neighbour).clone();
    let new_index = (0..3).find(|i| worker(&cluster, *i) == new_owner).expect("a node");
    assert_eq!(read_back(&cluster.addr(new_index), &neighbour_keys).await, neighbour_keys.len());
    assert!(topology.new_group_dedicates_owner, "the planner may form groups here");

    // A second group never sends slots to the node dedicated to the first: everything else
    // of the neighbour's node goes to the third.
    let spec = ActionSpec::Group {
        target: GroupTarget::Partition { partition: partition_id(neighbour) },
        group: "hot-3001".parse().expect("id"),
    };
    let op = storage.submit(&request("group-2", spec)).await.expect("submitted");
    let done = wait_operation(&storage, &op).await;
    assert_eq!(done.state, OperationState::Succeeded, "{done:?}");
    let topology = storage.topology().await.expect("topology");
    let mine: Vec<&PartitionId> = topology.partitions.iter().filter(|p| p.owner == me).map(|p| &p.id).collect();
    assert_eq!(mine, [&partition_id(hot)], "the first dedicated node kept its slot alone");
    let theirs: Vec<&PartitionId> =
        topology.partitions.iter().filter(|p| p.owner == new_owner).map(|p| &p.id).collect();
    assert_eq!(theirs, [&partition_id(neighbour)], "the second node holds the neighbour alone");
    let groups: Vec<Option<&str>> = topology.workers.iter().map(|w| w.group.as_ref().map(|g| g.as_str())).collect();
    assert_eq!(groups.iter().filter(|g| g.is_some()).count(), 2, "two dedicated nodes: {groups:?}");
    assert_eq!(topology.partitions.len(), usize::from(SLOT_COUNT), "no slot lost");
    assert_eq!(read_back(&cluster.addr(new_index), &neighbour_keys).await, neighbour_keys.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_killed_mid_migration_leaves_a_correct_final_state() {
    killed_mid_migration(Side::Target).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_killed_mid_migration_leaves_a_correct_final_state() {
    killed_mid_migration(Side::Source).await;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Source,
    Target,
}

/// Migration phases in which the data is being copied (the kill is meant to land there).
const COPYING: [&str; 4] = ["snapshotting", "replicating", "waiting-to-pause", "failover-paused"];

async fn killed_mid_migration(side: Side) {
    let dir = tempfile::tempdir().expect("dir");
    let mut config = LocalClusterConfig::new(3, dir.path().join("cluster"));
    // The surviving nodes keep serving their slots while one is down, so the data can be read.
    config.extra_args = vec!["--cluster-require-full-coverage".to_owned(), "no".to_owned()];
    let mut cluster = LocalCluster::start(config).await.expect("cluster starts");
    let storage = ValkeyStorage::new(adapter_config(&cluster)).expect("adapter");
    let hot = slot(200);
    let source = initial_owner(&cluster, hot);
    let target = (source + 1) % 3;
    let (killed, survivor) = match side {
        Side::Source => (source, target),
        Side::Target => (target, source),
    };
    // Enough data (30 MB) that the copy takes a moment.
    let pairs = keys_in_slot(hot, 300_000, 100);
    let filling = Instant::now();
    fill(&cluster.addr(source), &pairs).await;
    eprintln!("wrote {} keys in {:?}", pairs.len(), filling.elapsed());

    let spec =
        ActionSpec::Move { partition: partition_id(hot), to_worker: worker(&cluster, target), max_bytes_per_sec: None };
    let op = storage.submit(&request("move-killed", spec)).await.expect("submitted");
    let mut client = cluster.connect(source).await.expect("connect");
    let started = Instant::now();
    loop {
        let jobs = client.slot_migrations().await.expect("jobs");
        let state = jobs.first().map(|j| j.state.clone());
        match &state {
            Some(MigrationState::Running(phase)) if COPYING.contains(&phase.as_str()) => break,
            Some(s) if s.is_terminal() => break, // too quick to catch: the success path is tested then
            _ => {}
        }
        assert!(started.elapsed() < WAIT, "the migration never got under way: {state:?}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let phase = client.slot_migrations().await.expect("jobs").first().map(|j| j.state.clone());
    eprintln!("killing the {side:?} during {phase:?}, {:?} into the migration", started.elapsed());
    cluster.kill(killed).expect("kill");
    let done = wait_operation(&storage, &op).await;
    eprintln!("operation ended {:?} after {:?}: {:?}", done.state, started.elapsed(), done.error);

    // Whatever the outcome, the re-read topology and the cluster agree with it.
    let expected_owner = match done.state {
        OperationState::Failed => {
            assert!(done.error.as_deref().is_some_and(|e| !e.is_empty()), "the server's reason: {done:?}");
            source
        }
        _ => target,
    };
    let topology = storage.topology().await.expect("topology after the kill");
    assert_eq!(owner_of(&topology, hot), &worker(&cluster, expected_owner));
    let mut nodes = cluster.connect(survivor).await.expect("connect").cluster_nodes().await.expect("nodes");
    nodes.retain(|n| n.slots.iter().any(|r| r.contains(hot)));
    assert_eq!(nodes.len(), 1, "one owner");
    assert_eq!(&nodes[0].id, cluster.node_id(expected_owner), "the cluster agrees with the topology");
    if expected_owner == survivor {
        assert_eq!(read_back(&cluster.addr(survivor), &pairs).await, pairs.len(), "no key lost");
    }
    // The dead node shows as down once the cluster agrees it failed, and healthy after a restart.
    cluster.wait_until_seen_failed(killed).await.expect("seen failed");
    let topology = storage.topology().await.expect("topology");
    let dead = topology.workers.iter().find(|w| w.id == worker(&cluster, killed)).expect("still listed");
    assert_eq!(dead.health, Health::Down);
    cluster.restart(killed).await.expect("restart");
    let topology = storage.topology().await.expect("topology");
    assert!(topology.workers.iter().all(|w| w.health == Health::Healthy), "{:?}", topology.workers);
    assert_eq!(owner_of(&topology, hot), &worker(&cluster, expected_owner), "ownership survives the restart");
}

fn ops_config_text(dir: &Path, cluster: &LocalCluster) -> String {
    let seeds: Vec<String> = cluster.addrs().iter().map(|a| format!("\"{a}\"")).collect();
    format!(
        "[http]\nlisten = \"127.0.0.1:0\"\n\
         [audit]\npath = \"{}\"\n\
         [storage]\nkind = \"valkey\"\n\
         [storage.valkey]\nseeds = [{}]\ncluster = \"shop\"\nnode_ops_per_sec = 50000\nnode_bytes_per_sec = 1e8\npoll_interval_ms = 20\n\
         [[auth.tokens]]\nname = \"master\"\ntoken = \"{MASTER_TOKEN}\"\nrole = \"service\"\n\
         [[auth.tokens]]\nname = \"dash\"\ntoken = \"{VIEWER_TOKEN}\"\nrole = \"viewer\"\n\
         [executor]\npoll_interval_ms = 20\n",
        dir.join("audit.sqlite").display(),
        seeds.join(", ")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ops_server_executor_moves_a_slot_over_http() {
    let dir = tempfile::tempdir().expect("dir");
    let cluster = cluster(dir.path()).await;
    let config = lb_common::config::parse(&ops_config_text(dir.path(), &cluster), Path::new("ops.toml"))
        .expect("the valkey storage config is valid");
    let s = start(config).await;
    let hot = slot(9_000);
    let source = initial_owner(&cluster, hot);
    let target = (source + 2) % 3;
    let pairs = keys_in_slot(hot, 2_000, 50);
    fill(&cluster.addr(source), &pairs).await;

    let topology: Topology = s.viewer.get("/v1/topology").await.expect("topology through the ops server");
    assert_eq!(topology.partitions.len(), usize::from(SLOT_COUNT));
    assert!(topology.partitions.iter().all(|p| p.tenant.as_str() == "shop"));
    assert_eq!(owner_of(&topology, hot), &worker(&cluster, source));

    let spec = mv(partition_id(hot).as_str(), worker(&cluster, target).as_str());
    let _: ActionRecord = s.master.post("/v1/actions", &action("valkey-move-1", spec, "shop")).await.expect("accepted");
    let record = wait_done(&s.viewer, "valkey-move-1").await;
    assert_eq!(record.state, ActionState::Succeeded, "{record:?}");
    assert_eq!(record.operation_id.as_ref().map(|o| o.as_str()), Some("valkey-valkey-move-1"));
    assert_eq!(read_back(&cluster.addr(target), &pairs).await, pairs.len(), "every key on the new owner");

    // A split of a slot is refused at submission (slots do not support it, as the topology
    // says), naming why; nothing is recorded. The adapter's own refusal, for a caller that
    // goes around the ops server, is covered by `topology_move_idempotency_and_refusals`.
    let split = split(partition_id(hot).as_str());
    let err = s.master.post::<_, ActionRecord>("/v1/actions", &action("valkey-split-1", split, "shop")).await;
    let err = err.expect_err("refused at submission");
    assert!(
        matches!(&err, ClientError::Status { status, body, .. }
            if status.as_u16() == 422 && body.error.contains("does not support this kind of action")),
        "{err}"
    );
    let missing = s.viewer.get::<ActionRecord>("/v1/actions/valkey-split-1").await.expect_err("not recorded");
    assert_eq!(missing.status().map(|s| s.as_u16()), Some(404));
    // The executor caches the topology for a moment; the new owner shows once it is re-read.
    let started = Instant::now();
    loop {
        let topology: Topology = s.viewer.get("/v1/topology").await.expect("topology");
        if owner_of(&topology, hot) == &worker(&cluster, target) {
            break;
        }
        assert!(started.elapsed() < WAIT, "the topology never showed the move");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(s.server.stop(STOP).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_cut_off_by_a_restart_is_finished_by_the_next_process_and_remembered() {
    let dir = tempfile::tempdir().expect("dir");
    let cluster = cluster(dir.path()).await;
    let hot = slot(3_000);
    let owner = initial_owner(&cluster, hot);
    let me = worker(&cluster, owner);
    // Enough data in the node's other slots that the group is still migrating when the
    // first adapter goes away right after submitting (its first migration was sent).
    let neighbour_keys: Vec<Vec<(String, String)>> =
        (0..40u16).map(|i| keys_in_slot(slot(2_001 + i * 50), 250, 512)).collect(); // never 3,000
    for keys in &neighbour_keys {
        fill(&cluster.addr(owner), keys).await;
    }
    let hot_keys = keys_in_slot(hot, 200, 32);
    fill(&cluster.addr(owner), &hot_keys).await;
    let spec = ActionSpec::Group {
        target: GroupTarget::Partition { partition: partition_id(hot) },
        group: "dedicated-slot-03000".parse().expect("id"),
    };
    let group = request("group-restart", spec);

    let first = ValkeyStorage::new(adapter_config(&cluster)).expect("adapter");
    let op = first.submit(&group).await.expect("submitted");
    drop(first); // the process ends: its driver stops, the cluster keeps the migration it started

    let second = ValkeyStorage::new(adapter_config(&cluster)).expect("adapter");
    let err = second.operation(&op).await.expect_err("a bare lookup does not know it");
    assert!(matches!(err, StorageError::Uncertain(_)), "{err}");
    let started = Instant::now();
    let done = loop {
        let operation = second.poll(&op, &group).await.expect("taken over");
        if matches!(operation.state, OperationState::Succeeded | OperationState::Failed) {
            break operation;
        }
        assert!(started.elapsed() < WAIT, "never finished: {operation:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(done.state, OperationState::Succeeded, "{done:?}");
    let topology = second.topology().await.expect("topology");
    let mine: Vec<&PartitionId> = topology.partitions.iter().filter(|p| p.owner == me).map(|p| &p.id).collect();
    assert_eq!(mine, [&partition_id(hot)], "the slot ends alone on its node");
    let grouped = topology.workers.iter().find(|w| w.id == me).expect("worker");
    assert_eq!(grouped.group.as_ref().map(|g| g.as_str()), Some("dedicated-slot-03000"));
    assert_eq!(topology.partitions.len(), usize::from(SLOT_COUNT), "no slot lost");
    assert_eq!(read_back(&cluster.addr(owner), &hot_keys).await, hot_keys.len());
    for keys in &neighbour_keys {
        let mut readable = 0;
        for i in (0..3).filter(|&i| i != owner) {
            readable += read_back(&cluster.addr(i), keys).await; // one slot: all on one node
        }
        assert_eq!(readable, keys.len(), "every neighbour key moved with its slot");
    }

    // A third process learns the dedication from the actions that succeeded before.
    let third = ValkeyStorage::new(adapter_config(&cluster)).expect("adapter");
    let before = third.topology().await.expect("topology");
    assert!(before.workers.iter().all(|w| w.group.is_none()), "nothing remembered yet");
    let record = ActionRecord {
        request: ActionRequest {
            id: "group-restart".parse().expect("id"),
            spec: group.spec.clone(),
            origin: Origin::Online,
            policy: Some("worker_overload".into()),
            reason: "test".into(),
            actor_path: vec![],
            leader_epoch: None,
        },
        state: ActionState::Succeeded,
        submitted_by: "master".into(),
        created_at_ms: 1,
        started_at_ms: Some(1),
        finished_at_ms: Some(2),
        operation_id: Some(op.clone()),
        failure: None,
    };
    third.remember(&[record]);
    let after = third.topology().await.expect("topology");
    let grouped = after.workers.iter().find(|w| w.id == me).expect("worker");
    assert_eq!(grouped.group.as_ref().map(|g| g.as_str()), Some("dedicated-slot-03000"));
}

/// An ops server on `cluster` with the Valkey adapter, its audit in `dir`, Valkey-sized stall
/// detection (the test default of 400 ms is for the fake storage).
fn valkey_ops_config(dir: &Path, cluster: &LocalCluster) -> lb_ops_server::config::OpsServerConfig {
    let seeds: Vec<String> = cluster.addrs().iter().map(|a| format!("\"{a}\"")).collect();
    let storage = format!(
        "[storage]\nkind = \"valkey\"\n[storage.valkey]\nseeds = [{}]\nworker_ids = \"port\"\n\
         node_ops_per_sec = 100000\nnode_bytes_per_sec = 1000000000\npoll_interval_ms = 20\n",
        seeds.join(", ")
    );
    let text = config_text(dir, "http://127.0.0.1:9", "")
        .replace("[storage]\nurl = \"http://127.0.0.1:9\"\n", &storage)
        .replace("stall_timeout_ms = 400", "stall_timeout_ms = 30000");
    lb_common::config::parse(&text, Path::new("ops.toml")).expect("valid test config")
}

/// Worker ids dedicated to a group in the ops server's topology, with their group.
async fn dedicated(s: &Server) -> Vec<(String, String)> {
    let topology: Topology = s.viewer.get("/v1/topology").await.expect("topology");
    let mut out: Vec<(String, String)> =
        topology.workers.iter().filter_map(|w| Some((w.id.to_string(), w.group.as_ref()?.to_string()))).collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ops_server_keeps_dedicated_nodes_and_finishes_a_group_across_restarts() {
    if std::env::var_os("LB_E2E_TRACE").is_some() {
        lb_common::telemetry::init_tracing(&lb_common::config::shared::LogConfig::default());
    }
    let dir = tempfile::tempdir().expect("dir");
    let cluster = cluster(dir.path()).await;
    let (a, b) = (slot(1_000), slot(12_000));
    let (owner_a, owner_b) = (initial_owner(&cluster, a), initial_owner(&cluster, b));
    assert_ne!(owner_a, owner_b);
    let group = |s: Slot| ActionSpec::Group {
        target: GroupTarget::Partition { partition: partition_id(s) },
        group: format!("dedicated-{}", partition_id(s)).parse().expect("id"),
    };
    let s = start(valkey_ops_config(dir.path(), &cluster)).await;
    s.master.post::<_, ActionRecord>("/v1/actions", &action("g-a", group(a), "valkey")).await.expect("accepted");
    assert_eq!(wait_done(&s.viewer, "g-a").await.state, ActionState::Succeeded);
    let first = vec![(worker(&cluster, owner_a).to_string(), "dedicated-slot-01000".to_owned())];
    // The ops server caches the topology for up to 2 s.
    let started = Instant::now();
    while dedicated(&s).await != first {
        assert!(started.elapsed() < WAIT, "the dedication shows: {:?}", dedicated(&s).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Stop as soon as the second group has its operation: it is mid-migration.
    let data: Vec<(String, String)> = (0..20u16).flat_map(|i| keys_in_slot(slot(11_000 + i * 7), 300, 512)).collect();
    for keys in data.chunks(300) {
        fill(&cluster.addr(owner_b), keys).await;
    }
    s.master.post::<_, ActionRecord>("/v1/actions", &action("g-b", group(b), "valkey")).await.expect("accepted");
    let started = Instant::now();
    loop {
        let r: ActionRecord = s.viewer.get("/v1/actions/g-b").await.expect("get");
        if r.operation_id.is_some() {
            break;
        }
        assert!(started.elapsed() < WAIT, "never submitted");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(s.server.stop(STOP).await);

    let s = start(valkey_ops_config(dir.path(), &cluster)).await;
    let mut both = first.clone();
    both.push((worker(&cluster, owner_b).to_string(), "dedicated-slot-12000".to_owned()));
    both.sort();
    // The new process resumes the cut-off group at once; it may have finished it by the first
    // read, so the second dedication may show already, but the first must.
    let restarted = dedicated(&s).await;
    assert!(
        restarted == first || restarted == both,
        "the first dedication is remembered after the restart: {restarted:?}"
    );
    let done = wait_done(&s.viewer, "g-b").await;
    assert_eq!(done.state, ActionState::Succeeded, "{done:?}");
    // The topology is cached for up to 2 s; the dedication shows once it is read again.
    let started = Instant::now();
    while dedicated(&s).await != both {
        if started.elapsed() > WAIT {
            let topology: Topology = s.viewer.get("/v1/topology").await.expect("topology");
            let on_b: Vec<_> = topology
                .partitions
                .iter()
                .filter(|p| p.owner == worker(&cluster, owner_b))
                .map(|p| (&p.id, &p.group))
                .collect();
            panic!("both dedications show: {:?}; on b: {on_b:?}; workers {:?}", dedicated(&s).await, topology.workers);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let topology: Topology = s.viewer.get("/v1/topology").await.expect("topology");
    assert_eq!(topology.partitions.len(), usize::from(SLOT_COUNT), "no slot lost");
    for (i, keys) in data.chunks(300).enumerate() {
        let s = slot(11_000 + i as u16 * 7);
        let index = (0..3).find(|&n| &worker(&cluster, n) == owner_of(&topology, s)).expect("owner");
        assert_eq!(read_back(&cluster.addr(index), keys).await, keys.len(), "slot {s:?} kept its keys");
    }
    assert!(s.server.stop(STOP).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_snapshot_shows_progress_while_its_target_acknowledges() {
    // Three million keys in one slot take seconds to snapshot; Valkey reports the same phase all
    // along, but the source's last_ack_time moves every second. Progress must rise inside the
    // snapshotting phase (the 7th of the 11 export phases: between 7/12 and 8/12 of a move), or
    // the executor's stall detector would fail a healthy migration of a large slot.
    let dir = tempfile::tempdir().expect("dir");
    let mut config = LocalClusterConfig::new(2, dir.path().join("cluster"));
    config.extra_args = vec!["--enable-debug-command".into(), "yes".into()];
    // Populating 3,000,000 keys blocks the owner's main thread for seconds (more on a busy
    // machine): the other node must not mark it failed meanwhile (CI once saw the move refused
    // with "which is down").
    config.node_timeout = Duration::from_secs(30);
    let cluster = LocalCluster::start(config).await.expect("cluster starts");
    let big = key_slot(b"t0");
    let owner = usize::from(!SlotRange::even_split(2)[0].contains(big));
    // Populating takes seconds, longer than the default command deadline on a busy machine.
    let options = lb_valkey::ConnectOptions { command_timeout: Duration::from_secs(120), ..cluster.connect_options() };
    let mut client = lb_valkey::NodeClient::connect(&cluster.addr(owner), &options).await.expect("connect");
    client
        .query("DEBUG", redis::cmd("DEBUG").arg("POPULATE").arg(3_000_000).arg("{t0}:k").arg(100))
        .await
        .expect("populate");
    cluster.wait_until_healthy().await.expect("both nodes see each other healthy");
    let storage = ValkeyStorage::new(adapter_config(&cluster)).expect("adapter");
    let target = worker(&cluster, 1 - owner);
    let op = storage
        .submit(&request(
            "big-move",
            ActionSpec::Move { partition: partition_id(big), to_worker: target, max_bytes_per_sec: None },
        ))
        .await
        .expect("submitted");
    let (snapshot_start, snapshot_end) = (7.0 / 12.0, 8.0 / 12.0);
    let mut inside = Vec::new();
    let started = Instant::now();
    let done = loop {
        let operation = storage.operation(&op).await.expect("known");
        if operation.progress_ratio > snapshot_start + 1e-9 && operation.progress_ratio < snapshot_end {
            inside.push(operation.progress_ratio);
        }
        if matches!(operation.state, OperationState::Succeeded | OperationState::Failed) {
            break operation;
        }
        assert!(started.elapsed() < WAIT, "never finished: {operation:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    inside.dedup();
    eprintln!("3,000,000-key slot moved in {:?}; progress inside the snapshot: {inside:.3?}", started.elapsed());
    assert_eq!(done.state, OperationState::Succeeded, "{done:?}");
    assert!(inside.len() >= 2, "progress rose while the snapshot ran: {inside:?}");
}
