//! Real `valkey-server` processes: a 3-node local cluster, routed writes, slot stats and INFO
//! moving, an atomic slot migration with keys in the slot, and a killed node seen as failed.
//! The binary is found or installed by `LocalCluster` (never skipped).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use lb_valkey::reply::{MigrationOperation, MigrationState};
use lb_valkey::{LocalCluster, LocalClusterConfig, NodeClient, NodeError, Slot, SlotRange, key_slot};

/// The slot migration of a few hundred small keys finishes in well under a second on loopback.
const MIGRATION_TIMEOUT: Duration = Duration::from_secs(30);

async fn set(client: &mut NodeClient, key: &str, value: &str) -> Result<(), NodeError> {
    client.query("SET", redis::cmd("SET").arg(key).arg(value)).await.map(|_| ())
}

async fn get(client: &mut NodeClient, key: &str) -> Result<Option<String>, NodeError> {
    let value = client.query("GET", redis::cmd("GET").arg(key)).await?;
    Ok(match value {
        redis::Value::Nil => None,
        redis::Value::BulkString(bytes) => Some(String::from_utf8(bytes).expect("values are utf-8")),
        other => panic!("unexpected GET reply {other:?}"),
    })
}

/// Index of the node owning `slot` in the cluster's initial even split.
fn owner_index(cluster: &LocalCluster, slot: Slot) -> usize {
    SlotRange::even_split(cluster.len()).iter().position(|r| r.contains(slot)).expect("every slot is assigned")
}

/// `count` keys whose slot is `slot`, using a hash tag so they share it.
fn keys_in_slot(slot: Slot, count: usize) -> Vec<String> {
    let tag =
        (0u64..).map(|n| format!("tag{n}")).find(|tag| key_slot(tag.as_bytes()) == slot).expect("some tag hashes here");
    (0..count).map(|i| format!("{{{tag}}}:key{i}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_node_cluster_stats_migration_and_failure() {
    let data_dir = tempfile::tempdir().expect("temp dir");
    let started = Instant::now();
    let mut cluster = LocalCluster::start(LocalClusterConfig::new(3, data_dir.path())).await.expect("cluster starts");
    eprintln!("cluster of 3 ready in {:?} using {}", started.elapsed(), cluster.binary().display());
    let ids = cluster.node_ids();
    assert_eq!(ids.len(), 3);
    assert_ne!(ids[0], ids[1]);
    for index in 0..3 {
        let mut client = cluster.connect(index).await.expect("connect");
        assert_eq!(&client.myid().await.expect("myid"), cluster.node_id(index));
        let nodes = client.cluster_nodes().await.expect("cluster nodes");
        assert_eq!(nodes.len(), 3);
        assert!(nodes.iter().all(|n| n.is_healthy() && n.is_primary()));
        let me = nodes.iter().find(|n| n.flags.myself).expect("myself");
        assert_eq!(me.slots, [SlotRange::even_split(3)[index]]);
    }

    // Writes routed with our own CRC16: a key sent to the wrong node would be MOVED (rejected).
    let mut clients = Vec::new();
    for index in 0..3 {
        clients.push(cluster.connect(index).await.expect("connect"));
    }
    let mut written: BTreeMap<String, String> = BTreeMap::new();
    for i in 0..300 {
        let key = format!("user:{i}");
        let value = format!("value-{i}");
        let owner = owner_index(&cluster, key_slot(key.as_bytes()));
        set(&mut clients[owner], &key, &value).await.expect("routed SET succeeds");
        written.insert(key, value);
    }
    // Wrong node: MOVED is a rejection, certainly not run.
    let key = "user:0";
    let wrong = (owner_index(&cluster, key_slot(key.as_bytes())) + 1) % 3;
    let moved = set(&mut clients[wrong], key, "x").await.expect_err("wrong node refuses");
    assert!(matches!(&moved, NodeError::Rejected { message, .. } if message.contains("MOVED")), "{moved}");
    assert!(!moved.may_have_run());

    // A hot slot on node 0 with many keys, written through slot stats and INFO snapshots.
    let hot_slot = Slot::new(100).expect("valid");
    assert_eq!(owner_index(&cluster, hot_slot), 0);
    let hot_keys = keys_in_slot(hot_slot, 200);
    let before_stats = clients[0].slot_stats(SlotRange::single(hot_slot)).await.expect("slot stats");
    let before_info = clients[0].info().await.expect("info");
    assert_eq!(before_info.valkey_version.as_deref(), Some("9.1.2"));
    for key in &hot_keys {
        let value = format!("hot-{key}");
        set(&mut clients[0], key, &value).await.expect("hot SET");
        written.insert(key.clone(), value);
    }
    let after_stats = clients[0].slot_stats(SlotRange::single(hot_slot)).await.expect("slot stats");
    let after_info = clients[0].info().await.expect("info");
    assert_eq!(before_stats.len(), 1);
    assert_eq!(after_stats[0].key_count, before_stats[0].key_count + 200);
    assert!(after_stats[0].cpu_usec > before_stats[0].cpu_usec, "{before_stats:?} -> {after_stats:?}");
    assert!(after_stats[0].network_bytes_in > before_stats[0].network_bytes_in);
    assert!(after_stats[0].network_bytes_out > before_stats[0].network_bytes_out);
    assert!(after_info.total_commands_processed >= before_info.total_commands_processed + 200);
    assert!(after_info.total_net_input_bytes > before_info.total_net_input_bytes);
    assert!(after_info.total_keys() >= before_info.total_keys() + 200);
    assert!(
        after_info.used_cpu_user_secs + after_info.used_cpu_sys_secs
            >= before_info.used_cpu_user_secs + before_info.used_cpu_sys_secs
    );
    // Node 0 answers for its own slots only.
    let node0_all = clients[0].slot_stats(SlotRange::all()).await.expect("all slot stats");
    assert_eq!(node0_all.len(), usize::from(SlotRange::even_split(3)[0].len()));

    // Migrate the hot slot from node 0 to node 2 while its keys exist.
    let target = cluster.node_id(2).clone();
    let migration_started = Instant::now();
    clients[0].migrate_slots(&[SlotRange::single(hot_slot)], &target).await.expect("MIGRATESLOTS accepted");
    // Keep writing into the slot while it moves: the source serves until the hand-over, then
    // answers MOVED and the write goes to the new owner.
    let mut during = 0usize;
    let mut redirected_writes = 0usize;
    let job = loop {
        let key = format!("{}:during{during}", hot_keys[0]);
        let value = format!("during-{during}");
        match set(&mut clients[0], &key, &value).await {
            Ok(()) => {}
            Err(NodeError::Rejected { message, .. }) if message.starts_with("MOVED") => {
                set(&mut clients[2], &key, &value).await.expect("new owner takes the write");
                redirected_writes += 1;
            }
            Err(error) => panic!("write during migration failed: {error}"),
        }
        assert_eq!(key_slot(key.as_bytes()), hot_slot);
        written.insert(key, value);
        during += 1;
        let jobs = clients[0].slot_migrations().await.expect("getslotmigrations");
        let job = jobs
            .into_iter()
            .find(|j| j.slot_ranges == [SlotRange::single(hot_slot)] && j.target_node == target)
            .expect("the job is listed on the source");
        if job.state.is_terminal() {
            break job;
        }
        assert!(migration_started.elapsed() < MIGRATION_TIMEOUT, "migration stuck in {:?}", job.state);
    };
    eprintln!("{during} writes during the migration, {redirected_writes} redirected");
    eprintln!("migration of slot {hot_slot} (200 keys) finished in {:?}", migration_started.elapsed());
    assert_eq!(job.state, MigrationState::Success, "message: {}", job.message);
    assert_eq!(job.operation, MigrationOperation::Export);
    assert_eq!(&job.source_node, cluster.node_id(0));
    let imports = clients[2].slot_migrations().await.expect("target lists the job");
    assert!(imports.iter().any(|j| j.name == job.name && j.operation == MigrationOperation::Import));

    // The new owner serves every key of the slot; the old one redirects.
    for (key, value) in written.iter().filter(|(key, _)| key_slot(key.as_bytes()) == hot_slot) {
        assert_eq!(get(&mut clients[2], key).await.expect("GET on new owner").as_deref(), Some(value.as_str()));
    }
    let redirected = get(&mut clients[0], &hot_keys[0]).await.expect_err("old owner redirects");
    assert!(matches!(&redirected, NodeError::Rejected { message, .. } if message.contains("MOVED")), "{redirected}");
    let moved_stats = clients[2].slot_stats(SlotRange::single(hot_slot)).await.expect("slot stats on target");
    assert_eq!(moved_stats[0].key_count, 200 + during as u64);
    assert!(clients[0].slot_stats(SlotRange::single(hot_slot)).await.expect("slot stats on source").is_empty());
    cluster.wait_until_healthy().await.expect("all nodes agree on the new owner");
    for (index, client) in clients.iter_mut().enumerate() {
        let nodes = client.cluster_nodes().await.expect("cluster nodes");
        let owner = nodes.iter().find(|n| n.slots.iter().any(|r| r.contains(hot_slot))).expect("slot owned");
        assert_eq!(owner.id, target, "node {index} view");
    }

    // Every key written (routed by the current owner) still reads back.
    for (key, value) in &written {
        let slot = key_slot(key.as_bytes());
        let owner = if slot == hot_slot { 2 } else { owner_index(&cluster, slot) };
        assert_eq!(get(&mut clients[owner], key).await.expect("GET").as_deref(), Some(value.as_str()), "{key}");
    }

    // Kill node 1: connecting fails (certainly not run) and the others flag it `fail`.
    let killed_at = Instant::now();
    cluster.kill(1).expect("kill");
    assert!(!cluster.is_running(1));
    let direct =
        NodeClient::connect(&cluster.addr(1), &lb_valkey::ConnectOptions::default()).await.expect_err("refused");
    assert!(matches!(direct, NodeError::Connect { .. }) && !direct.may_have_run(), "{direct}");
    cluster.wait_until_seen_failed(1).await.expect("failure detected");
    eprintln!("killed node flagged fail after {:?}", killed_at.elapsed());
    let info = clients[0].cluster_info().await.expect("cluster info");
    assert!(!info.state_ok, "slots of a dead primary without replica leave the cluster down");

    // Restart: same id, cluster healthy again, its keys were not persisted (no persistence).
    cluster.restart(1).await.expect("restart");
    let mut again = cluster.connect(1).await.expect("connect");
    assert_eq!(&again.myid().await.expect("myid"), &ids[1]);
    assert!(cluster.connect(0).await.expect("connect").cluster_info().await.expect("info").state_ok);
}

#[tokio::test]
async fn a_command_past_its_deadline_may_have_run() {
    let data_dir = tempfile::tempdir().expect("temp dir");
    let cluster = LocalCluster::start(LocalClusterConfig::new(1, data_dir.path())).await.expect("cluster starts");
    let options = lb_valkey::ConnectOptions { command_timeout: Duration::from_millis(200), ..Default::default() };
    let mut client = NodeClient::connect(&cluster.addr(0), &options).await.expect("connect");
    // DEBUG is disabled by default; a blocking pop on an empty list outlives the deadline.
    let error =
        client.query("BLPOP", redis::cmd("BLPOP").arg("{empty}list").arg(5)).await.expect_err("deadline passes first");
    assert!(matches!(error, NodeError::Timeout { .. }) && error.may_have_run(), "{error}");
    // The reply to the timed-out command would arrive ahead of the next one's: the connection
    // refuses further commands (certainly not run) until replaced.
    let error = client.query("PING", &redis::cmd("PING")).await.expect_err("poisoned");
    assert!(matches!(error, NodeError::Poisoned { .. }) && !error.may_have_run(), "{error}");
    let mut client = NodeClient::connect(&cluster.addr(0), &options).await.expect("reconnect");
    client.ping().await.expect("fresh connection works");
    // A server error reply is a rejection.
    let error = client.query("CLUSTER", redis::cmd("CLUSTER").arg("NOSUCH")).await.expect_err("unknown subcommand");
    assert!(matches!(error, NodeError::Rejected { .. }) && !error.may_have_run(), "{error}");
}

#[tokio::test]
async fn auth_with_password_and_migration_between_authenticated_nodes() {
    let data_dir = tempfile::tempdir().expect("temp dir");
    let mut config = LocalClusterConfig::new(2, data_dir.path());
    config.password = Some("s3cret pass".to_owned());
    let cluster = LocalCluster::start(config).await.expect("cluster with a password starts");

    let no_password = lb_valkey::ConnectOptions::default();
    let mut anonymous = NodeClient::connect(&cluster.addr(0), &no_password).await.expect("TCP connect works");
    let error = anonymous.ping().await.expect_err("NOAUTH");
    assert!(matches!(&error, NodeError::Rejected { message, .. } if message.contains("NOAUTH")), "{error}");

    let wrong = lb_valkey::ConnectOptions { password: Some("wrong".to_owned()), ..Default::default() };
    let error = NodeClient::connect(&cluster.addr(0), &wrong).await.expect_err("bad password");
    assert!(matches!(error, NodeError::Connect { .. }) && !error.may_have_run(), "{error}");

    let mut client = NodeClient::connect(&cluster.addr(0), &cluster.connect_options()).await.expect("auth");
    let slot = Slot::new(7).expect("valid");
    let keys = keys_in_slot(slot, 10);
    for key in &keys {
        set(&mut client, key, "v").await.expect("SET");
    }
    let target = cluster.node_id(1).clone();
    client.migrate_slots(&[SlotRange::single(slot)], &target).await.expect("MIGRATESLOTS");
    let started = Instant::now();
    let job = loop {
        let jobs = client.slot_migrations().await.expect("getslotmigrations");
        let job = jobs.into_iter().find(|j| j.target_node == target).expect("listed");
        if job.state.is_terminal() {
            break job;
        }
        assert!(started.elapsed() < MIGRATION_TIMEOUT, "stuck in {:?}", job.state);
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(job.state, MigrationState::Success, "message: {}", job.message);
    let mut new_owner = cluster.connect(1).await.expect("connect");
    for key in &keys {
        assert_eq!(get(&mut new_owner, key).await.expect("GET").as_deref(), Some("v"));
    }
}
