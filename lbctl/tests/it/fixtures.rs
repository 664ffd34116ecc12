//! Fixed, coherent data for the snapshot tests: one story on `acme/orders` (4 workers, a hot
//! range in p000002 split by partition_overload and judged effective, a second split waiting
//! for approval in dry run), at a fixed `NOW_MS`. Built from JSON shaped like the replies in
//! `docs/examples`, so the renderers see what the APIs send.

use lb_common::protocol::*;
use lbctl::cmd::agents::AgentsReport;
use lbctl::cmd::explain::{ActionExplanation, DeclinedAt, PartitionExplanation};
use lbctl::cmd::history::HistoryReport;
use lbctl::cmd::status::{Status, hot_partitions, stale_agents};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// 2026-12-01 12:39:35 UTC.
pub const NOW_MS: i64 = 1_796_128_775_000;
pub const SPLIT_ID: &str = "lb-1796128699637-2";
pub const PENDING_ID: &str = "lb-1796128699637-10";

fn typed<T: DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("fixture matches the protocol type")
}

pub fn overview() -> ClusterOverview {
    typed(json!({
        "metric": "ops", "window_secs": 10.0,
        "workers": [
            {"worker": "w-0000", "value": 8100.0, "capacity_ratio": 0.2025},
            {"worker": "w-0001", "value": 39000.0, "capacity_ratio": 0.975},
            {"worker": "w-0002", "value": 7950.5, "capacity_ratio": 0.1987625},
            {"worker": "w-0003", "value": 0.0, "capacity_ratio": 0.0}
        ],
        "max": 39000.0, "mean": 13762.6, "max_over_mean": 2.8338, "cv": 1.0651
    }))
}

fn worker(id: &str, health: &str, ops: f64, rejected: f64, covered: f64) -> Value {
    json!({
        "id": id, "in_topology": true, "health": health,
        "capacity": {"ops_per_sec": 40000.0, "bytes_per_sec": 400000000.0},
        "window_secs": 10.0, "ops_per_sec": ops, "bytes_per_sec": ops * 1024.0, "cpu_cores": ops / 50000.0,
        "rejected_per_sec": rejected, "latency_p99_us": 1300.0, "host_cpu_ratio": null, "net_bytes_per_sec": null,
        "covered_secs": covered, "last_sample_ms": NOW_MS - 700
    })
}

pub fn workers() -> Vec<WorkerRow> {
    typed(json!([
        worker("w-0000", "healthy", 8100.0, 0.0, 10.0),
        worker("w-0001", "healthy", 39000.0, 1210.0, 10.0),
        worker("w-0002", "healthy", 7950.5, 0.0, 10.0),
        worker("w-0003", "down", 0.0, 0.0, 2.0)
    ]))
}

fn partition(id: &str, start: &str, end: &str, owner: &str, ops: f64, rejected: f64, parents: &[&str]) -> Value {
    json!({
        "id": id, "tenant": "acme", "table": "orders",
        "key_range": {"start": start, "end": end},
        "owner": owner, "last_worker": owner, "gone": false, "parents": parents,
        "stored_bytes": 16777216, "limit": {"ops_per_sec": 8000.0, "bytes_per_sec": 80000000.0},
        "window_secs": 10.0, "ops_per_sec": ops, "bytes_per_sec": ops * 1024.0, "cpu_cores": ops / 50000.0,
        "rejected_per_sec": rejected, "errors_per_sec": 0.0, "latency_p99_us": 1333.2, "has_sketch": true
    })
}

pub fn partitions() -> Vec<PartitionRow> {
    typed(json!([
        partition("acme.orders.p000001", "2000000000000000", "3fffffffffffffff", "w-0000", 2000.0, 0.0, &[]),
        partition("acme.orders.p000002", "4000000000000000", "4261698898e1c447", "w-0001", 7990.0, 1210.0, &[]),
        partition(
            "acme.orders.p000008",
            "4261698898e1c448",
            "5fffffffffffffff",
            "w-0002",
            7100.0,
            0.0,
            &["acme.orders.p000002"]
        ),
        partition("acme.orders.p000003", "6000000000000000", "7fffffffffffffff", "w-0001", 2010.0, 0.0, &[])
    ]))
}

pub fn split_proposal() -> Proposal {
    typed(json!({
        "spec": {"kind": "split", "partition": "acme.orders.p000002", "split_key": "4261698898e1c448"},
        "policy": "partition_overload", "mode": "auto", "origin": "online",
        "reason": "partition acme.orders.p000002 demands 24010 ops/s, 3.00 of its limit, for 2 windows: split at 4261698898e1c448 peeling 50 % into the side that keeps the id (load changes +12 ops/s per s; it must stay under the limit through its cooldown); the new side goes to the coolest eligible worker",
        "trigger": {
            "hot_windows": 2, "partition_demand_ops_per_sec": 24010.0, "partition_limit_ops_per_sec": 8000.0,
            "partition_rejected_per_sec": 16010.0, "partition_growth_ops_per_sec_per_sec": 12.4,
            "top_key_share_ratio": 0.003, "sequential_write_ratio": 0.0
        },
        "predicted": {
            "target_before_ratio": 3.0012, "target_after_ratio": 1.5006,
            "source_before_ratio": 0.8, "source_after_ratio": 0.6,
            "dest_before_ratio": 0.05, "dest_after_ratio": 0.25,
            "cluster_max_before_ratio": 0.8, "cluster_max_after_ratio": 0.6,
            "cluster_mean_ratio": 0.3441, "cost_ratio": 0.0
        },
        "rejected_alternatives": [
            {"candidate": "split acme.orders.p000002 at its load median", "why": "the half keeping the id would stay over its limit through the 30 s cooldown"},
            {"candidate": "move acme.orders.p000002 whole", "why": "a move does not lower a partition's demand against its own limit"}
        ]
    }))
}

pub fn pending() -> Vec<Pending> {
    let mut proposal = split_proposal();
    proposal.mode = PolicyMode::DryRun;
    proposal.spec =
        typed(json!({"kind": "split", "partition": "acme.orders.p000002", "split_key": "4130b44c4c70e224"}));
    proposal.reason = "partition acme.orders.p000002 demands 9200 ops/s, 1.15 of its limit, for 2 windows: split at 4130b44c4c70e224 at its load median".into();
    proposal.predicted.target_before_ratio = 1.15;
    proposal.predicted.target_after_ratio = 0.58;
    vec![Pending {
        id: PENDING_ID.parse().expect("id"),
        proposal,
        first_proposed_at_ms: NOW_MS - 12_000,
        last_proposed_at_ms: NOW_MS - 400,
    }]
}

fn request(id: &str, spec: Value, policy: Option<&str>, reason: &str) -> Value {
    json!({
        "id": id, "spec": spec, "origin": if policy.is_some() { "online" } else { "manual" },
        "policy": policy, "reason": reason,
        "actor_path": if policy.is_some() { json!(["acme", "orders"]) } else { json!(["manual", "sre"]) }
    })
}

pub fn split_record() -> ActionRecord {
    typed(json!({
        "request": request(SPLIT_ID, json!({"kind": "split", "partition": "acme.orders.p000002", "split_key": "4261698898e1c448"}), Some("partition_overload"), &split_proposal().reason),
        "state": "succeeded", "submitted_by": "master",
        "created_at_ms": NOW_MS - 60_000, "started_at_ms": NOW_MS - 59_990, "finished_at_ms": NOW_MS - 57_700,
        "operation_id": "op-000001"
    }))
}

pub fn actions() -> Vec<ActionRecord> {
    let mut out = vec![split_record()];
    out.push(typed(json!({
        "request": request("lb-1796128699637-7", json!({"kind": "move", "partition": "acme.orders.p000003", "to_worker": "w-0002"}), Some("worker_overload"), "worker w-0001 at 0.98 of its capacity"),
        "state": "running", "submitted_by": "master",
        "created_at_ms": NOW_MS - 4_000, "started_at_ms": NOW_MS - 3_500
    })));
    out.push(typed(json!({
        "request": request("manual-sre-1", json!({"kind": "merge", "left": "acme.orders.p000005", "right": "acme.orders.p000006"}), None, "INC-42: merge cold partitions"),
        "state": "queued", "submitted_by": "sre", "created_at_ms": NOW_MS - 1_500
    })));
    out.push(typed(json!({
        "request": request("lb-1796128699637-4", json!({"kind": "move", "partition": "acme.orders.p000004", "to_worker": "w-0003"}), Some("imbalance"), "max/mean 1.4 over 10 windows"),
        "state": "failed", "submitted_by": "master",
        "created_at_ms": NOW_MS - 30_000, "started_at_ms": NOW_MS - 29_900, "finished_at_ms": NOW_MS - 29_000,
        "failure": {"message": "destination w-0003 is down", "execution": "not_executed"}
    })));
    out
}

pub fn in_flight() -> Vec<ActionRecord> {
    lbctl::cmd::actions::select(actions().into_iter().filter(|a| !a.state.is_terminal()).collect(), None, usize::MAX)
}

pub fn events() -> Vec<AuditEvent> {
    typed(json!([
        {"at_ms": NOW_MS - 60_000, "state": "queued", "actor": "master", "detail": "submitted: partition acme.orders.p000002 demands 24010 ops/s"},
        {"at_ms": NOW_MS - 59_990, "state": "running", "actor": "executor", "detail": "started; workers involved: [w-0001]"},
        {"at_ms": NOW_MS - 59_987, "state": "running", "actor": "executor", "detail": "storage operation op-000001 accepted"},
        {"at_ms": NOW_MS - 57_700, "state": "succeeded", "actor": "executor", "detail": "done"}
    ]))
}

pub fn evaluation() -> Evaluation {
    typed(json!({
        "action_id": SPLIT_ID,
        "spec": {"kind": "split", "partition": "acme.orders.p000002", "split_key": "4261698898e1c448"},
        "policy": "partition_overload",
        "subject": {"partitions": ["acme.orders.p000002"], "range": ["acme", "orders", {"start": "4000000000000000", "end": "5fffffffffffffff"}], "source": "w-0001"},
        "submitted_at_ms": NOW_MS - 60_000, "finished_at_ms": NOW_MS - 57_700, "evaluated_at_ms": NOW_MS - 52_000,
        "settle_secs": 2, "window_secs": 3,
        "before": {"target_ratio": 3.0012, "target_rejected_ratio": 0.6668, "source_ratio": 0.8, "cluster_max_ratio": 0.8, "cluster_mean_ratio": 0.3441, "cluster_cv": 0.71},
        "after": {"target_ratio": 1.1488, "target_rejected_ratio": 0.1313, "source_ratio": 0.975, "cluster_max_ratio": 0.975, "cluster_mean_ratio": 0.3441, "cluster_cv": 0.85},
        "score": 0.6172, "verdict": "effective", "metric": "target_ratio",
        "why": "target_ratio went from 3.00 to 1.15 (-62 %), over the 10 % that counts as effective",
        "stages": {
            "onset_ms": NOW_MS - 62_400, "detected_ms": NOW_MS - 61_200, "proposed_ms": NOW_MS - 60_000,
            "accepted_ms": NOW_MS - 59_990, "started_ms": NOW_MS - 59_980, "finished_ms": NOW_MS - 57_700,
            "visible_ms": NOW_MS - 56_600, "measured_ms": NOW_MS - 54_300, "relieved_ms": NOW_MS - 54_300
        }
    }))
}

pub fn entry() -> ActionEntry {
    let record = split_record();
    ActionEntry {
        request: record.request.clone(),
        outcome: ActionOutcome::Applied,
        record: Some(record),
        note: None,
        stages: None,
    }
}

pub fn pass() -> PassSnapshot {
    typed(json!({
        "pass": 74, "at_ms": NOW_MS - 480, "window_end_ms": NOW_MS - 1_000,
        "leadership": {"leader": true, "backend": "single", "epoch": null, "leader_address": null},
        "stats": {"partitions": 9, "workers": 4, "hot_partitions": 1, "overloaded_workers": 1, "imbalance_engaged": false,
                  "max_load_ratio": 0.975, "mean_load_ratio": 0.3441, "cv": 0.85, "in_flight": 2, "declined_dropped": 0},
        "proposals": [],
        "declined": [
            {"policy": "partition_overload", "subject": "acme.orders.p000002", "why": "hot at 1.15 of its limit but an action on it is in flight"},
            {"policy": "worker_overload", "subject": "w-0001", "why": "at 0.98 of its capacity but no eligible destination has room"}
        ],
        "declined_total": 2,
        "pending": pending(),
        "placement_rules": {"version": 0, "created_at_ms": 0, "datasets": []}
    }))
}

pub fn policy() -> PolicyStatus {
    typed(json!({
        "config": {
            "path": "/var/lib/lb/master.toml", "version": 2, "loaded_at_ms": NOW_MS - 300_000,
            "last_attempt_at_ms": NOW_MS - 300_000, "last_outcome": "applied", "last_error": null,
            "changed_fields": ["planner.partition_overload.mode"]
        },
        "modes": {"partition_overload": "auto", "worker_overload": "auto", "imbalance": "dry_run", "dataset_placement": "off"},
        "halted": false,
        "planner": {
            "halt": false,
            "partition_overload": {"mode": "auto", "engage_ratio": 0.9, "release_ratio": 0.7, "rejected_engage_ratio": 0.01, "min_ops_per_sec": 100.0, "hot_windows": 2},
            "caps": {"max_actions_per_pass": 8, "cooldown_secs": 30}
        },
        "evaluation": {"settle_secs": 10, "window_secs": 10},
        "placement": {"mode": "off"}
    }))
}

pub fn halt(halted: bool) -> HaltStatus {
    if halted {
        typed(
            json!({"halted": true, "halted_by_api": true, "halted_by_config": false, "queued": 3, "changed_by": "sre", "reason": "INC-42: storage upgrade"}),
        )
    } else {
        typed(
            json!({"halted": false, "halted_by_api": false, "halted_by_config": false, "queued": 1, "changed_by": "sre"}),
        )
    }
}

pub fn agents() -> AgentsReport {
    let agent = |id: &str, port: u16, state: &str, beat_ago: i64, cursor: u64| {
        json!({"worker_id": id, "address": format!("http://127.0.0.1:{port}"), "version": "0.1.0", "state": state,
               "registered_at_ms": NOW_MS - 600_000, "last_heartbeat_ms": NOW_MS - beat_ago, "latest_cursor": cursor})
    };
    let collected = |status: &str, lag: i64, error: Option<&str>| {
        json!({"status": status, "cursor": 400, "gaps": 0, "last_error": error, "newest_sample_ms": NOW_MS - lag,
               "lag_ms": lag, "page_limit": 5000, "last_elapsed_ms": 3})
    };
    AgentsReport {
        agents: typed::<AgentsResponse>(json!({"agents": [
            agent("w-0000", 7101, "up", 300, 419),
            agent("w-0001", 7102, "up", 450, 395),
            agent("w-0002", 7103, "up", 120, 401),
            agent("w-0003", 7104, "down", 12_400, 212)
        ]}))
        .agents,
        collector: typed(json!({
            "last_success_ms": NOW_MS - 250, "last_attempt_ms": NOW_MS - 250, "consecutive_failures": 0, "stale": false,
            "last_error": null, "samples_total": 3072, "max_lag_ms": 703,
            "agents": {
                "w-0000": collected("ok", 703, None),
                "w-0001": collected("ok", 650, None),
                "w-0002": collected("ok", 15_200, None),
                "w-0003": collected("error", 12_900, Some("cannot connect to http://127.0.0.1:7104/v1/samples"))
            }
        })),
    }
}

pub fn status(halted: bool) -> Status {
    let policy = policy();
    let agents = agents();
    Status {
        master_url: "http://127.0.0.1:7000".into(),
        ops_url: "http://127.0.0.1:7200".into(),
        window_secs: 10,
        overview: overview(),
        workers: workers(),
        pass: pass(),
        hot_partitions: hot_partitions(partitions(), 0.9, 0.01),
        hot_ratio: 0.9,
        hot_rejected_ratio: 0.01,
        in_flight: in_flight(),
        policy,
        halt: halt(halted),
        stale_agents: stale_agents(&agents.agents, &agents.collector, NOW_MS),
        agents: agents.agents,
        collector: agents.collector,
    }
}

pub fn top() -> TopN {
    typed(json!({
        "metric": "ops", "group_by": "none", "window_secs": 10.0,
        "entries": [
            {"key": {"kind": "partition", "partition": "acme.orders.p000002"}, "value": 7990.0},
            {"key": {"kind": "partition", "partition": "acme.orders.p000008"}, "value": 7100.0},
            {"key": {"kind": "partition", "partition": "acme.orders.p000003"}, "value": 2010.0}
        ]
    }))
}

pub fn top_tables() -> TopN {
    typed(json!({
        "metric": "latency_p99", "group_by": "table", "window_secs": 30.0,
        "entries": [
            {"key": {"kind": "table", "tenant": "acme", "table": "orders"}, "value": 50000.0},
            {"key": {"kind": "table", "tenant": "acme", "table": "users"}, "value": 1333.2}
        ]
    }))
}

/// 6 rows of 10 s over 16 key ranges: uniform load, and a hot range in buckets 4 and 5 that
/// starts in row 2 and is split (spread to bucket 6) in row 4.
pub fn heatmap() -> Heatmap {
    let buckets = 16u64;
    let width = u64::MAX / buckets + 1;
    let key_buckets: Vec<Value> = (0..buckets)
        .map(|b| json!({"start": format!("{:016x}", b * width), "end": format!("{:016x}", b * width + (width - 1))}))
        .collect();
    let mut values = Vec::new();
    for row in 0..6 {
        for b in 0..buckets {
            let base = 1000.0;
            let hot = match (row, b) {
                (2..=3, 4 | 5) => 11_000.0,
                (4.., 4) => 8_000.0,
                (4.., 5 | 6) => 7_000.0,
                _ => 0.0,
            };
            values.push(if b == 15 && row == 0 { 0.0 } else { base + hot });
        }
    }
    typed(json!({
        "tenant": "acme", "table": "orders", "metric": "ops", "step_ms": 10_000,
        "times_ms": (0..6).map(|r| NOW_MS - 60_000 + r * 10_000).collect::<Vec<i64>>(),
        "key_buckets": key_buckets, "values": values
    }))
}

pub fn history() -> HistoryReport {
    let points: Vec<Value> = (0..90)
        .map(|i| {
            let value = if i < 30 {
                2000.0
            } else if i < 60 {
                2000.0 + (i - 30) as f64 * 700.0
            } else {
                7990.0
            };
            json!({"ts_ms": NOW_MS - 90_000 + i * 1000, "step_ms": 1000, "value": value})
        })
        .collect();
    HistoryReport {
        history: typed(json!({"partition": "acme.orders.p000008", "metric": "ops", "points": points})),
        lineage: vec!["acme.orders.p000008".parse().expect("id"), "acme.orders.p000002".parse().expect("id")],
        actions: vec![split_record()],
        evaluations: vec![evaluation()],
    }
}

pub fn explain_action() -> ActionExplanation {
    ActionExplanation {
        id: SPLIT_ID.parse().expect("id"),
        proposal: Some(split_proposal()),
        pending: None,
        entry: Some(entry()),
        record: Some(split_record()),
        events: events(),
        evaluation: Some(evaluation()),
    }
}

pub fn explain_pending() -> ActionExplanation {
    ActionExplanation {
        id: PENDING_ID.parse().expect("id"),
        proposal: Some(pending()[0].proposal.clone()),
        pending: Some(pending()[0].clone()),
        entry: None,
        record: None,
        events: vec![],
        evaluation: None,
    }
}

pub fn explain_partition() -> PartitionExplanation {
    let row = partitions().into_iter().find(|p| p.id.as_str() == "acme.orders.p000002").expect("fixture row");
    let pass = pass();
    PartitionExplanation {
        partition: row,
        pass: pass.pass,
        pass_at_ms: pass.at_ms,
        declined_now: pass.declined.clone(),
        proposed_now: vec![],
        declined_before: vec![DeclinedAt {
            at_ms: NOW_MS - 61_000,
            declined: typed(
                json!({"policy": "partition_overload", "subject": "acme.orders.p000002", "why": "hot for 1 window, 2 needed"}),
            ),
        }],
        in_flight: vec![],
        pending: pending(),
    }
}

/// A cold partition nobody declines: "nothing is being done because nothing is wrong".
pub fn explain_quiet_partition() -> PartitionExplanation {
    let row = partitions().into_iter().find(|p| p.id.as_str() == "acme.orders.p000001").expect("fixture row");
    PartitionExplanation {
        partition: row,
        pass: 74,
        pass_at_ms: Some(NOW_MS - 480),
        declined_now: vec![],
        proposed_now: vec![],
        declined_before: vec![],
        in_flight: vec![],
        pending: vec![],
    }
}

pub fn manual_reply(dry_run: bool) -> ManualActionReply {
    let mut proposal = split_proposal();
    proposal.policy = Policy::Manual;
    proposal.origin = Origin::Manual;
    proposal.reason = "INC-42: hot range (manual via lbctl, by sre)".into();
    proposal.rejected_alternatives.clear();
    let action = (!dry_run).then(|| {
        typed(json!({
            "request": request("manual-1796128775000-1", json!({"kind": "split", "partition": "acme.orders.p000002", "split_key": "4261698898e1c448"}), None, "INC-42: hot range"),
            "state": "queued", "submitted_by": "sre", "created_at_ms": NOW_MS
        }))
    });
    ManualActionReply { proposal, action }
}
