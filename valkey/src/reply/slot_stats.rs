//! `CLUSTER SLOT-STATS SLOTSRANGE <start> <end>` (also `ORDERBY <metric> [LIMIT n]`).
//!
//! Needs `cluster-slot-stats-enabled yes` for the cpu and network counters; `key-count` is always
//! there. The node answers only for the slots it owns inside the range (asking `0 16383` on a
//! node that owns a third of the cluster returns about 5,461 entries; asking a range it does not
//! own returns `*0`). All four counters are cumulative since the slot arrived on this node or
//! the node started: they reset on restart and when a slot migrates away and back.
//!
//! Reply on valkey-server 9.1.2, RESP2 (slot 866 after one `SET`):
//!
//! ```text
//! *1                      one entry per owned slot in the range, in slot order
//!   *2
//!     :866                the slot
//!     *8                  flat key/value array (a map under RESP3)
//!       $9 key-count         :1
//!       $8 cpu-usec          :23     microseconds of main-thread time spent on the slot's commands
//!       $16 network-bytes-in  :94    request bytes
//!       $17 network-bytes-out :5     reply bytes
//! ```

use redis::Value;

use super::{ParseError, as_text, as_u64, describe, pairs};
use crate::slot::Slot;

const COMMAND: &str = "CLUSTER SLOT-STATS";

/// One slot's cumulative counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotStats {
    pub slot: Slot,
    pub key_count: u64,
    pub cpu_usec: u64,
    pub network_bytes_in: u64,
    pub network_bytes_out: u64,
}

/// Parses a `CLUSTER SLOT-STATS` reply. A field other than the four known ones is ignored (newer
/// servers may add metrics); a missing one is an error, because a zero would be a lie.
pub fn parse_slot_stats(value: &Value) -> Result<Vec<SlotStats>, ParseError> {
    let Value::Array(entries) = value else {
        return Err(ParseError::new(COMMAND, "reply", format!("expected an array, got {}", describe(value))));
    };
    entries.iter().enumerate().map(|(index, entry)| parse_entry(index, entry)).collect()
}

fn parse_entry(index: usize, entry: &Value) -> Result<SlotStats, ParseError> {
    let at = |what: &str| format!("entry {index} {what}");
    let Value::Array(parts) = entry else {
        return Err(ParseError::new(COMMAND, at("shape"), format!("expected [slot, stats], got {}", describe(entry))));
    };
    let [slot, stats] = parts.as_slice() else {
        return Err(ParseError::new(COMMAND, at("shape"), format!("expected 2 elements, got {}", parts.len())));
    };
    let slot = as_u64(slot)
        .and_then(|n| u16::try_from(n).ok())
        .and_then(Slot::new)
        .ok_or_else(|| ParseError::new(COMMAND, at("slot"), describe(slot)))?;
    let (mut key_count, mut cpu_usec, mut bytes_in, mut bytes_out) = (None, None, None, None);
    for (name, number) in pairs(COMMAND, &at("stats"), stats)? {
        let name = as_text(name).ok_or_else(|| ParseError::new(COMMAND, at("stat name"), describe(name)))?;
        let target = match name {
            "key-count" => &mut key_count,
            "cpu-usec" => &mut cpu_usec,
            "network-bytes-in" => &mut bytes_in,
            "network-bytes-out" => &mut bytes_out,
            _ => continue,
        };
        *target = Some(as_u64(number).ok_or_else(|| ParseError::new(COMMAND, at(name), describe(number)))?);
    }
    let require = |value: Option<u64>, name: &str| {
        value.ok_or_else(|| ParseError::new(COMMAND, at(name), "missing (is cluster-slot-stats-enabled on?)"))
    };
    Ok(SlotStats {
        slot,
        key_count: require(key_count, "key-count")?,
        cpu_usec: require(cpu_usec, "cpu-usec")?,
        network_bytes_in: require(bytes_in, "network-bytes-in")?,
        network_bytes_out: require(bytes_out, "network-bytes-out")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reply::fixtures::parse;

    #[test]
    fn parses_a_captured_range() {
        let value = parse(include_bytes!("../fixtures/slot_stats_range.resp"));
        let stats = parse_slot_stats(&value).expect("valid reply");
        assert_eq!(stats.len(), 3);
        assert_eq!(stats[0].slot.get(), 865);
        assert_eq!(
            stats[1],
            SlotStats {
                slot: Slot::new(866).expect("valid"),
                key_count: 1,
                cpu_usec: 23,
                network_bytes_in: 94,
                network_bytes_out: 5,
            }
        );
        assert_eq!(stats[2].key_count, 0);
    }

    #[test]
    fn a_node_answers_only_for_slots_it_owns() {
        // Asked for 12181..=12183 while owning only 12182.
        let value = parse(include_bytes!("../fixtures/slot_stats_partly_owned.resp"));
        let stats = parse_slot_stats(&value).expect("valid reply");
        assert_eq!(stats.len(), 1);
        assert_eq!((stats[0].slot.get(), stats[0].key_count, stats[0].cpu_usec), (12182, 1, 6));
        assert!(parse_slot_stats(&parse(b"*0\r\n")).expect("valid").is_empty());
    }

    #[test]
    fn a_missing_counter_is_an_error_naming_it() {
        // What a server without slot stats for cpu would send: key-count only.
        let value = parse(b"*1\r\n*2\r\n:7\r\n*2\r\n$9\r\nkey-count\r\n:3\r\n");
        let error = parse_slot_stats(&value).expect_err("cpu-usec missing");
        assert_eq!(error.field, "entry 0 cpu-usec");
    }

    #[test]
    fn rejects_other_shapes() {
        assert!(parse_slot_stats(&Value::Okay).is_err());
        assert!(parse_slot_stats(&parse(b"*1\r\n*2\r\n:16384\r\n*0\r\n")).is_err());
    }
}
