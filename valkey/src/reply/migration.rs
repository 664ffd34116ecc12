//! `CLUSTER MIGRATESLOTS` and `CLUSTER GETSLOTMIGRATIONS` (atomic slot migration, Valkey 9.0+).
//!
//! `CLUSTER MIGRATESLOTS SLOTSRANGE <start> <end> [<start> <end> ...] NODE <target-id>` is sent
//! to the node that owns the slots. It answers at once and does not name the job it starts:
//!
//! ```text
//! +OK                                                          job created; poll for its end
//! -ERR Slots are not served by this node.                      not the owner: nothing started
//! -ERR Unknown node name: 0000000000000000000000000000000000000000
//! ```
//!
//! `+OK` is not completion: the source forks a snapshot of the slots, streams it and the live
//! writes to the target, pauses writes briefly and hands the slots over. Measured on loopback
//! (2 nodes, one slot of 100,000 keys of 100 bytes, one client writing into the slot on the
//! source all along): `waiting-to-snapshot` at 3 ms, `snapshotting` 58 ms, `waiting-to-pause`
//! 130 ms, `success` 271 ms; 4,046 writes answered `+OK` during the migration (the slowest in
//! 115 ms, the pause), the next ones `MOVED 100 <target>`, and the target held all 104,046 keys.
//!
//! `CLUSTER GETSLOTMIGRATIONS` lists the jobs this node takes part in, newest first, as a flat
//! key/value array each (a map under RESP3). Captured on the source after one success, one
//! cancelled job and one whose target was killed (`SIGKILL`) mid-way:
//!
//! ```text
//! *4
//!   *24
//!     name                 $40 cd99bd17...           unique job name
//!     operation            EXPORT                    IMPORT on the target
//!     slot_ranges          "11001-11001"             ranges joined by a space: "12000-12001 13000-13005"
//!     target_node          $40 1888b4ca...
//!     source_node          $40 80052a6d...
//!     create_time          :1796020142               unix seconds
//!     last_update_time     :1796020144
//!     last_ack_time        :1796020142
//!     state                failed
//!     message              "Connection lost to target. Check CLUSTER GETSLOTMIGRATIONS on the target node for more information."
//!     cow_size             :0
//!     remaining_repl_size  :0
//! ```
//!
//! States: `success`, `failed`, `cancelled` are terminal; while running, the export side goes
//! through `connecting`, `sending-auth-command`, `reading-auth-response`,
//! `sending-establish-command`, `reading-establish-response`, `waiting-to-snapshot`,
//! `snapshotting`, `replicating`, `waiting-to-pause`, `failover-paused`, `failover-granted`, and
//! the import side through `waiting-for-ack`, `receiving-snapshot`, `waiting-for-paused`,
//! `failover-requested`, `failover-granted`, `cleaning-up`. `message` is empty unless the job
//! failed. Entries are kept in memory only (lost on restart) and only the last
//! `cluster-slot-migration-log-max-len` finished ones are listed.

use redis::Value;

use super::{ParseError, as_text, as_u64, describe, pairs, parse_slot_range_text};
use crate::node_id::NodeId;
use crate::slot::SlotRange;

const COMMAND: &str = "CLUSTER GETSLOTMIGRATIONS";

/// Parses the reply of `CLUSTER MIGRATESLOTS`: `+OK` means a job was started. Error replies
/// never reach here: the connection turns them into a rejected command.
pub fn parse_migrate_slots(value: &Value) -> Result<(), ParseError> {
    match value {
        Value::Okay => Ok(()),
        Value::SimpleString(s) if s == "OK" => Ok(()),
        other => Err(ParseError::new("CLUSTER MIGRATESLOTS", "reply", format!("expected OK, got {}", describe(other)))),
    }
}

/// One entry of `CLUSTER GETSLOTMIGRATIONS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotMigration {
    pub name: String,
    pub operation: MigrationOperation,
    pub slot_ranges: Vec<SlotRange>,
    pub source_node: NodeId,
    pub target_node: NodeId,
    pub create_time_unix_secs: u64,
    pub last_update_time_unix_secs: u64,
    /// When the peer last acknowledged (the source's entry moves it about every second while
    /// the target receives the snapshot, the one phase that can last long and changes nothing
    /// else); `None` when the server does not report it.
    pub last_ack_time_unix_secs: Option<u64>,
    /// Replication bytes still to send (`remaining_repl_size`); `None` when not reported.
    pub remaining_repl_bytes: Option<u64>,
    pub state: MigrationState,
    /// Why the job failed; empty otherwise.
    pub message: String,
}

/// Which side of the migration the answering node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MigrationOperation {
    Export,
    Import,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MigrationState {
    Success,
    Failed,
    Cancelled,
    /// Still running, in the named phase (`snapshotting`, `replicating`, ...).
    Running(String),
}

impl MigrationState {
    pub fn is_terminal(&self) -> bool {
        !matches!(self, Self::Running(_))
    }
}

/// Parses the reply of `CLUSTER GETSLOTMIGRATIONS`.
pub fn parse_slot_migrations(value: &Value) -> Result<Vec<SlotMigration>, ParseError> {
    let Value::Array(entries) = value else {
        return Err(ParseError::new(COMMAND, "reply", format!("expected an array, got {}", describe(value))));
    };
    entries.iter().enumerate().map(|(index, entry)| parse_entry(index, entry)).collect()
}

fn parse_entry(index: usize, entry: &Value) -> Result<SlotMigration, ParseError> {
    let at = |field: &str| format!("entry {index} {field}");
    let mut name = None;
    let mut operation = None;
    let mut slot_ranges = None;
    let mut source_node = None;
    let mut target_node = None;
    let mut create_time = None;
    let mut last_update_time = None;
    let mut last_ack_time = None;
    let mut remaining_repl_size = None;
    let mut state = None;
    let mut message = String::new();
    for (key, value) in pairs(COMMAND, &at("fields"), entry)? {
        let key = as_text(key).ok_or_else(|| ParseError::new(COMMAND, at("field name"), describe(key)))?;
        let bad = || ParseError::new(COMMAND, at(key), describe(value));
        match key {
            "name" => name = Some(as_text(value).ok_or_else(bad)?.to_owned()),
            "operation" => {
                operation = Some(match as_text(value) {
                    Some("EXPORT") => MigrationOperation::Export,
                    Some("IMPORT") => MigrationOperation::Import,
                    _ => return Err(bad()),
                });
            }
            "slot_ranges" => {
                let text = as_text(value).ok_or_else(bad)?;
                let ranges: Option<Vec<SlotRange>> = text.split_ascii_whitespace().map(parse_slot_range_text).collect();
                slot_ranges = Some(ranges.filter(|r| !r.is_empty()).ok_or_else(bad)?);
            }
            "source_node" => source_node = Some(as_text(value).and_then(NodeId::parse).ok_or_else(bad)?),
            "target_node" => target_node = Some(as_text(value).and_then(NodeId::parse).ok_or_else(bad)?),
            "create_time" => create_time = Some(as_u64(value).ok_or_else(bad)?),
            "last_update_time" => last_update_time = Some(as_u64(value).ok_or_else(bad)?),
            "last_ack_time" => last_ack_time = Some(as_u64(value).ok_or_else(bad)?),
            "remaining_repl_size" => remaining_repl_size = Some(as_u64(value).ok_or_else(bad)?),
            "state" => {
                state = Some(match as_text(value).ok_or_else(bad)? {
                    "success" => MigrationState::Success,
                    "failed" => MigrationState::Failed,
                    "cancelled" => MigrationState::Cancelled,
                    running => MigrationState::Running(running.to_owned()),
                });
            }
            "message" => message = as_text(value).ok_or_else(bad)?.to_owned(),
            _ => {}
        }
    }
    let missing = |field: &str| ParseError::new(COMMAND, at(field), "missing");
    Ok(SlotMigration {
        name: name.ok_or_else(|| missing("name"))?,
        operation: operation.ok_or_else(|| missing("operation"))?,
        slot_ranges: slot_ranges.ok_or_else(|| missing("slot_ranges"))?,
        source_node: source_node.ok_or_else(|| missing("source_node"))?,
        target_node: target_node.ok_or_else(|| missing("target_node"))?,
        create_time_unix_secs: create_time.ok_or_else(|| missing("create_time"))?,
        last_update_time_unix_secs: last_update_time.ok_or_else(|| missing("last_update_time"))?,
        last_ack_time_unix_secs: last_ack_time,
        remaining_repl_bytes: remaining_repl_size,
        state: state.ok_or_else(|| missing("state"))?,
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reply::fixtures::parse;

    #[test]
    fn parses_captured_jobs_in_every_terminal_state() {
        let jobs = parse_slot_migrations(&parse(include_bytes!("../fixtures/getslotmigrations.resp"))).expect("valid");
        assert_eq!(jobs.len(), 4);
        let failed = &jobs[0];
        assert_eq!(failed.name, "cd99bd17830f23468462ebb479647897abfdaa3c");
        assert_eq!(failed.operation, MigrationOperation::Export);
        assert_eq!(failed.state, MigrationState::Failed);
        assert!(failed.message.starts_with("Connection lost to target."));
        assert_eq!(failed.slot_ranges.iter().map(ToString::to_string).collect::<Vec<_>>(), ["11001-11001"]);
        assert_eq!(failed.target_node.as_str(), "1888b4ca40d7e66ad86db1de65bd28b880945e1b");
        assert_eq!(failed.source_node.as_str(), "80052a6df7ef006688adbcc45e6347e9176598d8");
        assert_eq!((failed.create_time_unix_secs, failed.last_update_time_unix_secs), (1_796_020_142, 1_796_020_144));
        assert_eq!((failed.last_ack_time_unix_secs, failed.remaining_repl_bytes), (Some(1_796_020_142), Some(0)));
        assert_eq!(jobs[1].state, MigrationState::Cancelled);
        assert!(jobs[1].message.is_empty());
        let multi = &jobs[2];
        assert_eq!(multi.state, MigrationState::Success);
        assert_eq!(
            multi.slot_ranges.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["12000-12001", "13000-13005"]
        );
        assert!(jobs.iter().all(|job| job.state.is_terminal()));
    }

    #[test]
    fn a_running_state_keeps_its_phase() {
        let text = "*1\r\n*18\r\n$4\r\nname\r\n$1\r\nn\r\n$9\r\noperation\r\n$6\r\nIMPORT\r\n\
            $11\r\nslot_ranges\r\n$3\r\n5-9\r\n$11\r\ntarget_node\r\n$40\r\naaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\
            $11\r\nsource_node\r\n$40\r\nbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\r\n$11\r\ncreate_time\r\n:1\r\n\
            $16\r\nlast_update_time\r\n:2\r\n$5\r\nstate\r\n$26\r\nreading-establish-response\r\n\
            $7\r\nmessage\r\n$0\r\n\r\n";
        let jobs = parse_slot_migrations(&parse(text.as_bytes())).expect("valid");
        assert_eq!(jobs[0].state, MigrationState::Running("reading-establish-response".to_owned()));
        assert!(!jobs[0].state.is_terminal());
        assert_eq!(jobs[0].operation, MigrationOperation::Import);
        assert!(parse_slot_migrations(&parse(b"*0\r\n")).expect("valid").is_empty());
    }

    #[test]
    fn a_bad_field_is_named() {
        let text = "*1\r\n*2\r\n$11\r\nslot_ranges\r\n$5\r\n9-5xx\r\n";
        let error = parse_slot_migrations(&parse(text.as_bytes())).expect_err("bad range");
        assert_eq!(error.field, "entry 0 slot_ranges");
    }

    #[test]
    fn migrate_slots_ok_and_errors() {
        let ok = parse(include_bytes!("../fixtures/migrateslots_ok.resp"));
        assert_eq!(parse_migrate_slots(&ok), Ok(()));
        assert!(parse_migrate_slots(&Value::Int(1)).is_err());
        // Captured error replies arrive as server errors, which the connection maps to
        // `NodeError::Rejected` before any parser runs.
        for bytes in [
            &include_bytes!("../fixtures/migrateslots_not_served.resp")[..],
            &include_bytes!("../fixtures/migrateslots_unknown_node.resp")[..],
        ] {
            let value = redis::parse_redis_value(bytes);
            assert!(matches!(value, Ok(Value::ServerError(_)) | Err(_)), "{value:?}");
        }
    }
}
