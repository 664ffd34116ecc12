//! Table output pinned by snapshots: each renderer is a pure function of typed data and `now`,
//! run here on the fixed data of `fixtures` and compared with `tests/snapshots/<name>.txt`
//! (escape bytes shown as `␛`). After an intended change, refresh them with
//! `UPDATE_SNAPSHOTS=1 cargo test -p lbctl snapshots` and review the diff.

use std::path::PathBuf;

use lbctl::cmd::{
    actions, agents, explain, halt, heatmap, history, manual, offline, policy, proposals, status, top, watch,
};
use lbctl::style::Style;

use crate::fixtures::{self, NOW_MS};

const PLAIN: Style = Style::PLAIN;
const COLOR: Style = Style { color: true, colors256: false };
const COLOR256: Style = Style { color: true, colors256: true };

fn check(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots").join(format!("{name}.txt"));
    let shown = actual.replace('\x1b', "␛");
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, &shown).expect("write snapshot");
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|_| panic!("no snapshot {}: run with UPDATE_SNAPSHOTS=1 to create it", path.display()));
    if shown != expected {
        let line = shown.lines().zip(expected.lines()).position(|(a, b)| a != b).unwrap_or(0) + 1;
        panic!(
            "{name} differs from {} from line {line} (rerun with UPDATE_SNAPSHOTS=1 if intended):\n--- actual\n{shown}\n--- expected\n{expected}",
            path.display()
        );
    }
}

#[test]
fn status() {
    check("status", &status::render(&fixtures::status(false), &PLAIN, NOW_MS));
    check("status_halted_color", &status::render(&fixtures::status(true), &COLOR, NOW_MS));
    // Where the topology has zones, a ZONE column (w-0003 has none: `-`).
    let mut zoned = fixtures::status(false);
    for (w, zone) in zoned.workers.iter_mut().zip(["eu-1a", "eu-1a", "eu-1b"]) {
        w.zone = Some(zone.parse().expect("zone"));
    }
    check("status_zones", &status::render(&zoned, &PLAIN, NOW_MS));
}

#[test]
fn top() {
    check("top", &top::render(&fixtures::top(), &PLAIN));
    check("top_tables_latency", &top::render(&fixtures::top_tables(), &PLAIN));
}

#[test]
fn heatmap() {
    check("heatmap_shades", &heatmap::render(&fixtures::heatmap(), &PLAIN));
    check("heatmap_256", &heatmap::render(&fixtures::heatmap(), &COLOR256));
}

#[test]
fn history() {
    check("history", &history::render(&fixtures::history(), &PLAIN, NOW_MS));
}

#[test]
fn actions() {
    check("actions", &actions::render(&fixtures::actions(), &PLAIN, NOW_MS));
    check("actions_color", &actions::render(&fixtures::actions(), &COLOR, NOW_MS));
    let record = fixtures::split_record();
    let lines = [
        actions::change_line(&record, None, &PLAIN),
        actions::change_line(&record, Some(lb_common::protocol::ActionState::Running), &PLAIN),
    ];
    check("actions_follow_lines", &lines.concat());
}

#[test]
fn explain() {
    let action = explain::Explanation::Action(Box::new(fixtures::explain_action()));
    check("explain_action", &explain::render(&action, &PLAIN, NOW_MS));
    let pending = explain::Explanation::Action(Box::new(fixtures::explain_pending()));
    check("explain_pending", &explain::render(&pending, &PLAIN, NOW_MS));
    let partition = explain::Explanation::Partition(Box::new(fixtures::explain_partition()));
    check("explain_partition", &explain::render(&partition, &PLAIN, NOW_MS));
    let quiet = explain::Explanation::Partition(Box::new(fixtures::explain_quiet_partition()));
    check("explain_quiet_partition", &explain::render(&quiet, &PLAIN, NOW_MS));
}

#[test]
fn proposals_and_answers() {
    check("proposals", &proposals::render(&fixtures::pending(), &PLAIN, NOW_MS));
    check("proposals_none", &proposals::render(&[], &PLAIN, NOW_MS));
    let mut approved = fixtures::split_record();
    approved.state = lb_common::protocol::ActionState::Queued;
    check("approved", &proposals::render_approved(&approved, &PLAIN));
    check("rejected", &proposals::render_rejected(&fixtures::pending()[0], &PLAIN));
}

#[test]
fn manual_actions() {
    check("manual_dry_run", &manual::render(&fixtures::manual_reply(true), &PLAIN));
    check("manual_submitted", &manual::render(&fixtures::manual_reply(false), &PLAIN));
}

#[test]
fn halt_policy_agents() {
    check("halted", &halt::render(&fixtures::halt(true), &PLAIN));
    check("resumed", &halt::render(&fixtures::halt(false), &PLAIN));
    check("policy", &policy::render(&fixtures::policy(), &PLAIN, NOW_MS));
    check("agents", &agents::render(&fixtures::agents(), &PLAIN, NOW_MS));
}

/// The JSON of every wrapper lbctl defines parses back into it (the plain replies are the
/// protocol's own types, round-tripped by lb-common's example tests).
#[test]
fn json_wrappers_round_trip() {
    fn back<T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug>(v: T) {
        let text = serde_json::to_string_pretty(&v).expect("serialises");
        assert_eq!(serde_json::from_str::<T>(&text).expect("parses back"), v);
    }
    back(fixtures::status(true));
    back(fixtures::history());
    back(fixtures::agents());
    back(explain::Explanation::Action(Box::new(fixtures::explain_action())));
    back(explain::Explanation::Partition(Box::new(fixtures::explain_partition())));
    let tagged = serde_json::to_value(explain::Explanation::Partition(Box::new(fixtures::explain_quiet_partition())))
        .expect("serialises");
    assert_eq!(tagged["subject"], "partition", "{tagged}");
}

#[test]
fn watch_lines() {
    use lb_common::protocol::{RecordKind, StoredRecord, StreamEvent, StreamHello, StreamLagged};
    let record = |kind, body: serde_json::Value| {
        StreamEvent::Record(StoredRecord { kind, key: "lb-1796128699637-10".to_owned(), at_ms: NOW_MS - 3_000, body })
    };
    let events = [
        StreamEvent::Hello(StreamHello { pass: 74, server_ms: NOW_MS - 5_000 }),
        StreamEvent::Pass(Box::new(fixtures::pass())),
        record(RecordKind::Proposal, serde_json::to_value(fixtures::split_proposal()).expect("json")),
        record(RecordKind::Action, serde_json::to_value(fixtures::entry()).expect("json")),
        record(RecordKind::Evaluation, serde_json::to_value(fixtures::evaluation()).expect("json")),
        StreamEvent::Lagged(StreamLagged { missed: 12 }),
    ];
    let text: String = events.iter().map(|e| watch::line(e, &PLAIN)).collect();
    check("watch_lines", &text);
}

/// The docs' example of `GET /api/v1/offline`, as of two minutes ago; and before any pass.
#[test]
fn offline() {
    let text =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/master_offline.json"))
            .expect("the example");
    let mut found: lb_common::protocol::OfflineFindings = serde_json::from_str(&text).expect("an offline pass");
    found.at_ms = NOW_MS - 120_000;
    check("offline", &offline::render(&found, &PLAIN, NOW_MS));
    check("offline_none", &offline::render(&Default::default(), &PLAIN, NOW_MS));
}
