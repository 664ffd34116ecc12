//! Every file in `docs/examples/` deserialises into its wire type and serialises back to the
//! same JSON, and every wire message has an example: the docs cannot drift from the code.

use std::collections::BTreeSet;
use std::path::PathBuf;

use lb_common::config::watch::ReloadStatus;
use lb_common::protocol::*;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

type Check = fn(&str) -> Result<(Value, Value), String>;

fn round_trip<T: DeserializeOwned + Serialize>(text: &str) -> Result<(Value, Value), String> {
    let original: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let typed: T = serde_json::from_str(text).map_err(|e| format!("does not deserialise: {e}"))?;
    let back = serde_json::to_value(&typed).map_err(|e| format!("does not serialise: {e}"))?;
    Ok((original, back))
}

/// File name → the type it is an example of.
const EXAMPLES: &[(&str, Check)] = &[
    ("report.json", round_trip::<Report>),
    ("report_ack.json", round_trip::<ReportAck>),
    ("samples_response.json", round_trip::<SamplesResponse>),
    ("rollups_response.json", round_trip::<RollupsResponse>),
    ("register_request.json", round_trip::<RegisterRequest>),
    ("register_response.json", round_trip::<RegisterResponse>),
    ("heartbeat_request.json", round_trip::<HeartbeatRequest>),
    ("agents_response.json", round_trip::<AgentsResponse>),
    ("collect_request.json", round_trip::<CollectRequest>),
    ("collect_response.json", round_trip::<CollectResponse>),
    ("action_request_split.json", round_trip::<ActionRequest>),
    ("action_request_split_into.json", round_trip::<ActionRequest>),
    ("action_request_move.json", round_trip::<ActionRequest>),
    ("action_request_merge.json", round_trip::<ActionRequest>),
    ("action_request_group.json", round_trip::<ActionRequest>),
    ("action_request_reshard.json", round_trip::<ActionRequest>),
    ("action_record.json", round_trip::<ActionRecord>),
    ("actions_response.json", round_trip::<ActionsResponse>),
    ("topology.json", round_trip::<Topology>),
    ("admin_request.json", round_trip::<AdminRequest>),
    ("operation_accepted.json", round_trip::<OperationAccepted>),
    ("operation.json", round_trip::<Operation>),
    ("placement_rules.json", round_trip::<PlacementRules>),
    ("error.json", round_trip::<ErrorBody>),
    ("config_status.json", round_trip::<ReloadStatus>),
    ("halt_status.json", round_trip::<HaltStatus>),
    ("fencing_request.json", round_trip::<FencingRequest>),
    ("fencing_status.json", round_trip::<FencingStatus>),
    ("action_events.json", round_trip::<EventsResponse>),
    ("master_overview.json", round_trip::<ClusterOverview>),
    ("master_workers.json", round_trip::<Vec<WorkerRow>>),
    ("master_partitions.json", round_trip::<Vec<PartitionRow>>),
    ("master_top.json", round_trip::<TopN>),
    ("master_heatmap.json", round_trip::<Heatmap>),
    ("master_history.json", round_trip::<History>),
    ("master_collector.json", round_trip::<CollectorStatus>),
    ("master_table_memory.json", round_trip::<MemoryUsage>),
    ("master_pending.json", round_trip::<PendingResponse>),
    ("master_pass.json", round_trip::<PassSnapshot>),
    ("master_leadership.json", round_trip::<LeadershipStatus>),
    ("master_offline.json", round_trip::<OfflineFindings>),
    ("master_offline_pass.json", round_trip::<OfflinePassRequested>),
    ("master_policy.json", round_trip::<PolicyStatus>),
    ("master_manual_action_request.json", round_trip::<ManualActionRequest>),
    ("master_manual_action_reply.json", round_trip::<ManualActionReply>),
    ("record_analysis.json", round_trip::<RecordsResponse<AnalysisRecord>>),
    ("record_proposal.json", round_trip::<RecordsResponse<Proposal>>),
    ("record_action.json", round_trip::<RecordsResponse<ActionEntry>>),
    ("record_evaluation.json", round_trip::<RecordsResponse<Evaluation>>),
    ("record_config_reload.json", round_trip::<RecordsResponse<ReloadStatus>>),
];

fn examples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/examples")
}

fn read(name: &str) -> String {
    std::fs::read_to_string(examples_dir().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn every_example_round_trips_through_its_type() {
    let mut failures = Vec::new();
    for (name, check) in EXAMPLES {
        match check(&read(name)) {
            Ok((original, back)) if original == back => {}
            Ok((original, back)) => failures.push(format!(
                "{name}: differs after a round trip (a field the type drops or defaults)\n  file: {original}\n  type: {back}"
            )),
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_example_file_is_checked() {
    let on_disk: BTreeSet<String> = std::fs::read_dir(examples_dir())
        .expect("docs/examples exists")
        .map(|e| e.expect("dir entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json"))
        .collect();
    let checked: BTreeSet<String> = EXAMPLES.iter().map(|(n, _)| (*n).to_owned()).collect();
    assert_eq!(on_disk, checked, "docs/examples and the EXAMPLES table disagree");
}

#[test]
fn every_example_is_documented_in_protocol_md() {
    let doc = std::fs::read_to_string(examples_dir().join("../protocol.md")).expect("docs/protocol.md exists");
    for (name, _) in EXAMPLES {
        assert!(doc.contains(&format!("examples/{name}")), "docs/protocol.md does not link examples/{name}");
    }
}

#[test]
fn example_requests_pass_validation() {
    let report: Report = serde_json::from_str(&read("report.json")).expect("report");
    report.validate().expect("the example report is valid");
    for name in EXAMPLES.iter().map(|(n, _)| *n).filter(|n| n.starts_with("action_request_")) {
        let action: ActionRequest = serde_json::from_str(&read(name)).expect("action");
        action.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn requests_reject_unknown_fields_and_bad_values() {
    let mut report: Value = serde_json::from_str(&read("report.json")).expect("report");
    report["partitions"][0]["read_opps"] = Value::from(1);
    let err = serde_json::from_value::<Report>(report).unwrap_err();
    assert!(err.to_string().contains("unknown field `read_opps`"), "{err}");

    let mut report: Report = serde_json::from_str(&read("report.json")).expect("report");
    report.partitions[1].latency_p99_us = -1.0;
    report.partitions[0].sketch.as_mut().expect("sketch").bucket_ops.push(u64::MAX);
    report.interval_ms = 0;
    let err = report.validate().unwrap_err().to_string();
    assert!(err.contains("interval_ms = 0: must be within 1..=3600000"), "{err}");
    assert!(err.contains("partitions[1].latency_p99_us = -1: must be a finite number >= 0"), "{err}");
    assert!(err.contains("partitions[0].sketch.bucket_ops"), "{err}");

    // Bucket bounds: one fewer than the buckets, increasing, inside the range; else named.
    let mut report: Report = serde_json::from_str(&read("report.json")).expect("report");
    let p = &mut report.partitions[0];
    let (start, n) = (p.key_range.start.0, p.sketch.as_ref().expect("sketch").bucket_ops.len());
    let sketch = p.sketch.as_mut().expect("sketch");
    sketch.bucket_bounds = (1..n as u64).map(|i| lb_common::ids::Key(start + i)).collect();
    report.validate().expect("good bounds");
    report.partitions[0].sketch.as_mut().expect("sketch").bucket_bounds.swap(0, 1);
    let err = report.validate().unwrap_err().to_string();
    assert!(err.contains("partitions[0].sketch.bucket_bounds"), "{err}");
}

/// Issue 17 item 18: floats came back 1 ulp off (serde_json parses fast but inexactly without
/// its `float_roundtrip` feature): a latency or a ratio sent as JSON is read back bit for bit.
#[test]
fn floats_survive_a_json_round_trip_bit_for_bit() {
    let mut rng = lb_common::rng::SplitMix64::new(17);
    let mut off = Vec::new();
    for _ in 0..20_000 {
        // Finite doubles over every exponent, not only the unit interval.
        let value = f64::from_bits(rng.next_u64());
        if !value.is_finite() {
            continue;
        }
        let stats = HostStats {
            cpu_ratio: 0.5,
            cpu_cores: 2,
            memory_used_bytes: 1,
            memory_total_bytes: 2,
            net_rx_bytes_per_sec: value,
            net_tx_bytes_per_sec: 0.0,
            disk_read_bytes_per_sec: 0.0,
            disk_write_bytes_per_sec: 0.0,
        };
        let text = serde_json::to_string(&stats).expect("serialise");
        let back: HostStats = serde_json::from_str(&text).expect("deserialise");
        if back.net_rx_bytes_per_sec.to_bits() != value.to_bits() {
            off.push((value, back.net_rx_bytes_per_sec));
        }
    }
    assert!(off.is_empty(), "{} of 20,000 floats changed, e.g. {:?}", off.len(), &off[..off.len().min(3)]);
}
