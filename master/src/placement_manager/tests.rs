//! Unit tests: config validation, the rules output, the pseudo-partition convention, the skew
//! conditions against the placement core's vectors, and the "no data is not zero load" rules.

use lb_common::ids::{Key, KeyRange, TableId};
use lb_common::placement::strategy::{load_balancing_strategy, std_dev_u64};
use lb_common::protocol::{Cursor, PartitionStats, Sample, SampleData};

use super::*;
use crate::table::TableConfig;

const T0: i64 = 1_764_547_200_000;

fn tenant(s: &str) -> TenantId {
    TenantId::new(s).expect("valid id")
}

fn dataset(s: &str) -> DatasetId {
    DatasetId::new(s).expect("valid id")
}

fn info(t: &str, d: &str, tenant_shards: u32, dataset_shards: u32, lb: LoadBalancing) -> DatasetInfo {
    DatasetInfo {
        tenant: tenant(t),
        dataset: dataset(d),
        tenant_shards,
        dataset_shards,
        load_balancing: lb,
        shard_owners: (0..64).map(|i| WorkerId::new(format!("w-{:04}", i % 16)).expect("valid id")).collect(),
        zones: Vec::new(),
    }
}

/// `n` equal shards of a dataset carrying `ops_per_sec` in total.
fn even_usage(t: &str, d: &str, n: u32, ops_per_sec: f64) -> Vec<DatasetShardUsage> {
    (1..=n)
        .map(|s| DatasetShardUsage {
            tenant: tenant(t),
            dataset: dataset(d),
            shard: ShardId(s),
            worker: None,
            ops_per_sec: ops_per_sec / f64::from(n),
            rejected_per_sec: 0.0,
            bytes_per_sec: 0.0,
        })
        .collect()
}

fn auto() -> PlacementManagerConfig {
    PlacementManagerConfig { mode: PolicyMode::Auto, ..PlacementManagerConfig::default() }
}

fn reshard_of(p: &Proposal) -> (u32, u32, LoadBalancing) {
    match &p.spec {
        ActionSpec::Reshard { tenant_shards, dataset_shards, load_balancing, .. } => {
            (*tenant_shards, *dataset_shards, *load_balancing)
        }
        other => panic!("unexpected spec {other:?}"),
    }
}

#[test]
fn defaults_are_valid_and_round_trip() {
    let c = PlacementManagerConfig::default();
    c.validate().expect("defaults are valid");
    assert_eq!(c.mode, PolicyMode::DryRun);
    let json = serde_json::to_string(&c).expect("serialise");
    assert_eq!(serde_json::from_str::<PlacementManagerConfig>(&json).expect("parse"), c);
    let parsed: PlacementManagerConfig = serde_json::from_str(
        r#"{"mode":"auto","load_balancing":"round_robin","strategy_switch":{"min_skew_rsd":0.8}}"#,
    )
    .expect("parse");
    assert_eq!(parsed.mode, PolicyMode::Auto);
    assert_eq!(parsed.load_balancing, LoadBalancingPolicy::RoundRobin);
    assert_eq!(parsed.strategy_switch.min_skew_rsd, 0.8);
    assert_eq!(parsed.decay_window_secs, 19 * 60);
    assert!(serde_json::from_str::<PlacementManagerConfig>(r#"{"decay_window":5}"#).is_err());
    assert!(serde_json::from_str::<PlacementManagerConfig>(r#"{"strategy_switch":{"rsd":0.5}}"#).is_err());
}

#[test]
fn validation_names_every_bad_field_under_its_scope() {
    let mut c = PlacementManagerConfig {
        shard_unit_ops_per_sec: 0.0,
        min_shards: 10,
        max_shards: 4,
        decay_window_secs: 0,
        ..PlacementManagerConfig::default()
    };
    c.strategy_switch.max_shards_to_target_ratio = 0.25;
    c.strategy_switch.min_shards = 1;
    let mut v = Validator::new();
    c.validate_into(&mut v.at("placement"));
    let err = v.finish().expect_err("invalid");
    let fields: Vec<_> = err.errors.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "placement.shard_unit_ops_per_sec",
            "placement.min_shards",
            "placement.decay_window_secs",
            "placement.strategy_switch.min_shards",
            "placement.strategy_switch.max_shards_to_target_ratio",
        ]
    );
    let messages: Vec<_> = err.errors.iter().map(ToString::to_string).collect();
    assert_eq!(messages[0], "placement.shard_unit_ops_per_sec = 0: must be a finite number > 0");
    assert_eq!(messages[1], "placement.min_shards = 10: must be <= max_shards (4)");
    assert_eq!(messages[2], "placement.decay_window_secs = 0: must be within 1..=604800");
    assert_eq!(
        messages[4],
        "placement.strategy_switch.max_shards_to_target_ratio = 0.25: must be greater than min_shards_to_target_ratio (0.5)"
    );
}

#[test]
fn rules_follow_the_topology_with_a_version_per_change() {
    let mut m = PlacementManager::new(&auto());
    let topo = vec![
        info("zeta", "clicks", 16, 4, LoadBalancing::RoundRobin),
        info("acme", "profiles", 20, 8, LoadBalancing::Fingerprint),
    ];
    m.plan(&topo, &auto(), T0);
    let rules = m.rules(T0);
    assert_eq!((rules.version, rules.created_at_ms), (1, T0));
    let json = serde_json::to_value(&rules).expect("serialise");
    assert_eq!(
        json,
        serde_json::json!({
            "version": 1,
            "created_at_ms": T0,
            "datasets": [
                {"tenant": "acme", "dataset": "profiles", "tenant_shard_limit": 20, "dataset_shard_limit": 8, "load_balancing": "fingerprint"},
                {"tenant": "zeta", "dataset": "clicks", "tenant_shard_limit": 16, "dataset_shard_limit": 4, "load_balancing": "round_robin"}
            ]
        })
    );
    // Same layout: same version and creation time.
    m.plan(&topo, &auto(), T0 + 1_000);
    assert_eq!(m.rules(T0 + 1_000), rules);
    // A reshard applied by the storage system: a new version.
    let resharded = vec![topo[0].clone(), info("acme", "profiles", 20, 12, LoadBalancing::RoundRobin)];
    m.plan(&resharded, &auto(), T0 + 2_000);
    let r2 = m.rules(T0 + 2_000);
    assert_eq!((r2.version, r2.created_at_ms), (2, T0 + 2_000));
    assert_eq!(r2.datasets[0].dataset_shard_limit, 12);
    // A dataset gone from the topology keeps its rule for the retention period, then goes.
    m.plan(&resharded[1..], &auto(), T0 + 3_000);
    assert_eq!(m.rules(T0 + 3_000).datasets.len(), 2);
    let later = T0 + 3_000 + 15 * 60 * 1000 + 1;
    m.plan(&resharded[1..], &auto(), later);
    let r3 = m.rules(later);
    assert_eq!(r3.version, 3);
    let names: Vec<_> = r3.datasets.iter().map(|d| d.dataset.as_str()).collect();
    assert_eq!(names, ["profiles"]);
}

#[test]
fn rules_say_which_zones_a_dataset_lives_in() {
    let mut m = PlacementManager::new(&auto());
    let mut pinned = info("acme", "profiles", 20, 8, LoadBalancing::Fingerprint);
    pinned.zones = vec!["eu-1a".parse().expect("zone"), "eu-1b".parse().expect("zone")];
    let topo = vec![info("zeta", "clicks", 16, 4, LoadBalancing::RoundRobin), pinned.clone()];
    m.plan(&topo, &auto(), T0);
    let rules = m.rules(T0);
    let json = serde_json::to_value(&rules).expect("serialise");
    assert_eq!(json["datasets"][0]["zones"], serde_json::json!(["eu-1a", "eu-1b"]));
    // A dataset in every zone sends no zones (what an older router reads as before).
    assert!(json["datasets"][1].get("zones").is_none());
    // The storage moving a dataset to other zones is a new rule set.
    pinned.zones.pop();
    m.plan(&[topo[0].clone(), pinned], &auto(), T0 + 1_000);
    let r2 = m.rules(T0 + 1_000);
    assert_eq!(r2.version, rules.version + 1);
    assert_eq!(r2.datasets[0].zones.len(), 1);
}

#[test]
fn pseudo_partition_ids_parse_only_in_their_exact_form() {
    let id = |s: &str| PartitionId::new(s).expect("valid id");
    let t = tenant("logs");
    assert_eq!(parse_dataset_shard_id(&id("logs.ingest.s17"), &t, "ingest"), Some(ShardId(17)));
    for bad in ["logs.ingest.p000001", "logs.ingest.s0", "logs.ingest.s", "logs.ingest.s03x", "logs.ingest.s3x"] {
        assert_eq!(parse_dataset_shard_id(&id(bad), &t, "ingest"), None, "{bad}");
    }
    assert_eq!(parse_dataset_shard_id(&id("logs.ingestx.s3"), &t, "ingest"), None);
    assert_eq!(parse_dataset_shard_id(&id("logsx.ingest.s3"), &t, "ingest"), None);
    assert_eq!(parse_dataset_shard_id(&id("logs.ingest.s99999999999"), &t, "ingest"), None);
}

/// Dataset shards come back out of a real MetricsTable; a real partition of a table that shares
/// the dataset's name does not, and neither does a dataset the topology does not list.
#[test]
fn usage_is_extracted_from_the_metrics_table() {
    let mut table = MetricsTable::new(TableConfig::default()).expect("table");
    let entry = |t: &str, tb: &str, id: &str, ops: u64, rejected: u64| PartitionStats {
        tenant: tenant(t),
        table: TableId::new(tb).expect("id"),
        partition_id: PartitionId::new(id).expect("id"),
        key_range: KeyRange { start: Key(0), end: Key(u64::MAX) },
        read_ops: 0,
        write_ops: ops,
        read_bytes: 0,
        write_bytes: ops * 100,
        errors: 0,
        rejected,
        latency_p50_us: 200.0,
        latency_p99_us: 1000.0,
        cpu_time_us: 0,
        stored_bytes: 0,
        sketch: None,
    };
    let worker = WorkerId::new("w-0001").expect("id");
    let mut cursor = 0;
    for s in 1..=5i64 {
        let entries = [
            entry("logs", "ingest", "logs.ingest.s3", 1000, 0),
            entry("logs", "ingest", "logs.ingest.s9", 400, 100),
            entry("logs", "ingest", "logs.ingest.p000001", 5000, 0),
            entry("other", "stream", "other.stream.s1", 700, 0),
        ];
        let samples: Vec<Sample> = entries
            .into_iter()
            .map(|p| {
                cursor += 1;
                Sample {
                    cursor: Cursor(cursor),
                    timestamp_ms: T0 + s * 1000,
                    interval_ms: 1000,
                    data: SampleData::Partition(p),
                    agent_sampled: false,
                }
            })
            .collect();
        table.ingest(&worker, &samples, T0 + s * 1000);
    }
    let topo = [info("logs", "ingest", 16, 4, LoadBalancing::Fingerprint)];
    let mut usage = dataset_shard_usage(&table, &topo, Duration::from_secs(5), T0 + 5_000).expect("query");
    usage.sort_by_key(|u| u.shard);
    let got: Vec<_> = usage.iter().map(|u| (u.shard.0, u.ops_per_sec.round(), u.rejected_per_sec.round())).collect();
    assert_eq!(got, [(3, 1000.0, 0.0), (9, 400.0, 100.0)]);
    assert_eq!(usage[1].demand_ops_per_sec().round(), 500.0);
    // The table stores log-quantised values (±0.016 % for bytes).
    assert!((usage[1].demand_bytes_per_sec() - 50_000.0).abs() < 50_000.0 * 0.001, "{:?}", usage[1]);
    assert_eq!(usage[0].worker.as_ref(), Some(&worker));
    assert!(dataset_shard_usage(&table, &[], Duration::from_secs(5), T0 + 5_000).expect("query").is_empty());
}

/// With the default thresholds the switch decides like the placement core's reference vectors
/// (`load_balancing_strategy`, unit U ↔ one shard unit).
#[test]
fn skew_conditions_agree_with_the_core_vectors() {
    const U: u64 = 512 * 1024;
    let rows: [(&[u64], u32); 11] = [
        (&[2 * U, U, U, U, U], 5),
        (&[2 * U, U / 2, U, U, U], 5),
        (&[2 * U, U / 2, U / 2, U, U], 5),
        (&[576716, 576716, 576716, 576716, 471860], 5),
        (&[52429, 996147, 52429, 996147, 52429], 5),
        (&[1992294, 104858, 104858, 1992294, 104858], 5),
        (&[2 * U, 2 * U, U / 2, U / 2, U / 2], 5),
        (&[2 * U, 2 * U, U / 2, U / 2], 2),
        (&[2 * U, 2 * U, U / 2, U / 2, U / 2], 2),
        (&[U, U, U / 5, U / 5], 2),
        (&[2 * U - 1, 0], 1),
    ];
    let c = StrategySwitchConfig::default();
    for (usage, target) in rows {
        let core = load_balancing_strategy(usage, std_dev_u64(usage), U, target).expect("unit > 0");
        let units: Vec<f64> = usage.iter().map(|&u| u as f64 / U as f64).collect();
        let ours = Skew::measure(&units, target).failing(&c).is_empty();
        assert_eq!(ours, core == LoadBalancingMode::RoundRobin, "{usage:?} target {target}");
    }
}

/// No data is not zero load: a dataset never observed, or not observed for `stale_after_secs`,
/// gets no proposal, and a dataset first seen at low load keeps its shards for a decay window.
#[test]
fn no_data_and_a_fresh_start_never_shrink_a_dataset() {
    let config = PlacementManagerConfig { decay_window_secs: 600, ..auto() };
    let topo = [info("logs", "ingest", 16, 8, LoadBalancing::Fingerprint)];
    let mut m = PlacementManager::new(&config);
    assert!(m.plan(&topo, &config, T0).is_empty(), "never observed");

    // 2k ops/s needs 1 shard, but the dataset has 8: nothing for one decay window (the restored
    // floor holds for one to two windows), then one reshard down, applied.
    let mut topo = topo;
    let mut downs = Vec::new();
    for s in 1..=1800i64 {
        let now = T0 + s * 1000;
        m.observe(now, &even_usage("logs", "ingest", topo[0].dataset_shards, 2_000.0));
        for p in m.plan(&topo, &config, now) {
            let r = reshard_of(&p);
            topo[0].dataset_shards = r.1;
            downs.push((s, r));
        }
    }
    assert_eq!(downs.len(), 1, "{downs:?}");
    let (at, (tenant_shards, shards, lb)) = downs[0];
    assert!((600..=1260).contains(&at), "down at {at} s, decay window 600 s");
    assert_eq!((tenant_shards, shards, lb), (16, 1, LoadBalancing::Fingerprint));

    // Collection stops: after stale_after_secs there is no proposal, whatever the averages say.
    let mut m = PlacementManager::new(&config);
    for s in 1..=10i64 {
        m.observe(T0 + s * 1000, &even_usage("logs", "ingest", 8, 200_000.0));
    }
    let stale = T0 + 10_000 + (config.stale_after_secs as i64 + 1) * 1000;
    assert!(m.plan(&topo, &config, stale).is_empty());
    assert!(!m.plan(&topo, &config, T0 + 10_000).is_empty(), "fresh data at 40 units calls for a reshard up");
}

/// A scale-out proposal carries its numbers, and a fingerprint dataset with one overheated shard
/// is switched to round robin in the same action.
#[test]
fn proposals_explain_themselves() {
    let config = auto();
    let topo = [info("logs", "ingest", 16, 4, LoadBalancing::Fingerprint)];
    let mut m = PlacementManager::new(&config);
    let mut proposals = Vec::new();
    for s in 1..=600i64 {
        let now = T0 + s * 1000;
        // 40k ops/s, 70 % of it on one shard (28k ops/s = 5.6 units).
        let mut usage = even_usage("logs", "ingest", 4, 12_000.0);
        usage[0].ops_per_sec += 28_000.0 - 3_000.0;
        usage[0].rejected_per_sec = 0.0;
        m.observe(now, &usage);
        proposals.extend(m.plan(&topo, &config, now));
    }
    let p = proposals.iter().find(|p| reshard_of(p).1 > 4).expect("a reshard up");
    let (tenant_shards, shards, _) = reshard_of(p);
    assert!(shards > 4 && tenant_shards >= shards, "{shards} / {tenant_shards}");
    assert_eq!(p.policy, Policy::DatasetPlacement);
    assert!(p.reason.starts_with("dataset logs/ingest: demand"), "{}", p.reason);
    assert!(p.reason.contains("reshard up 4 →"), "{}", p.reason);
    assert!(p.rejected_alternatives.iter().any(|a| a.candidate == "keep 4 shards"), "{:?}", p.rejected_alternatives);
    assert_eq!(p.trigger.partition_limit_ops_per_sec, Some(DEFAULT_SHARD_UNIT_OPS_PER_SEC));
    assert!(p.predicted.target_after_ratio < p.predicted.target_before_ratio, "{:?}", p.predicted);
    assert_eq!(p.predicted.cost_ratio, 0.0);
    let switched = proposals.iter().find(|p| reshard_of(p).2 == LoadBalancing::RoundRobin).expect("switch proposed");
    assert!(switched.reason.contains("switch fingerprint → round robin"), "{}", switched.reason);
    assert!(switched.trigger.cv.is_some_and(|cv| cv >= 0.5), "{:?}", switched.trigger);
}

/// `max_shards` caps the target (and says so); a configured strategy overrides the sticky
/// round robin.
#[test]
fn caps_and_configured_strategy_are_explained() {
    let config = PlacementManagerConfig { max_shards: 6, load_balancing: LoadBalancingPolicy::Fingerprint, ..auto() };
    let topo = [info("logs", "ingest", 4, 4, LoadBalancing::RoundRobin)];
    let mut m = PlacementManager::new(&config);
    let mut proposals = Vec::new();
    for s in 1..=300i64 {
        let now = T0 + s * 1000;
        m.observe(now, &even_usage("logs", "ingest", 4, 100_000.0));
        proposals.extend(m.plan(&topo, &config, now));
    }
    let last = proposals.last().expect("proposals");
    assert_eq!(reshard_of(last), (6, 6, LoadBalancing::Fingerprint), "tenant subring widened to fit");
    let cap = last.rejected_alternatives.iter().find(|a| a.candidate == "more than 6 shards").expect("cap explained");
    assert!(cap.why.contains("max_shards (6)"), "{}", cap.why);
    assert!(last.reason.contains("switch round robin → fingerprint"), "{}", last.reason);
}

/// Right after a reshard the new shards' averages are still rising: the strategy switch waits
/// two half-lives before it reads the spread as key skew.
#[test]
fn strategy_switch_waits_for_new_shards_to_warm_up() {
    let config = auto();
    let topo = info("logs", "ingest", 16, 4, LoadBalancing::Fingerprint);
    let mut m = PlacementManager::new(&config);
    let now = T0 + 600_000;
    for s in 1..=600i64 {
        let mut usage = even_usage("logs", "ingest", 4, 8_000.0);
        usage[0].ops_per_sec = 20_000.0; // 4 units on one shard, 0.4 on the others
        m.observe(T0 + s * 1000, &usage);
    }
    let track = m.datasets.get_mut(&(tenant("logs"), dataset("ingest"))).expect("tracked");
    track.last_layout_change_ms = Some(now - 60_000);
    let young = measure(&topo, track, &config, now).expect("ring");
    assert_eq!(young.wanted_lb, LoadBalancing::Fingerprint);
    assert!(young.failing.iter().any(|f| f.contains("warming up after the reshard 60 s ago")), "{:?}", young.failing);
    track.last_layout_change_ms = Some(now - 2 * 60_000 - 1);
    let settled = measure(&topo, track, &config, now).expect("ring");
    assert!(settled.failing.is_empty(), "{:?}", settled.failing);
    assert_eq!(settled.wanted_lb, LoadBalancing::RoundRobin);
}
