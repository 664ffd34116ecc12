//! How lb names a Valkey Cluster's slots, in one place for the agent (which reports them) and
//! the ops server's adapter (which builds the topology and acts on them): a slot is the
//! partition `slot-NNNNN` of the table `slots`, covering its share of the 64-bit key space.

use lb_common::ids::{Key, KeyRange, PartitionId};

use crate::slot::{SLOT_COUNT, Slot};

/// The table every slot partition belongs to.
pub const SLOT_TABLE: &str = "slots";

/// Each slot's share of the 64-bit key space: 2^64 / 16,384 slots = 2^50 keys, so slot `s` is
/// the key range `[s << 50, ((s + 1) << 50) - 1]`; the slots tile the space in slot order.
pub const SLOT_KEY_SPACE_SHIFT: u32 = u64::BITS - SLOT_COUNT.trailing_zeros();

/// `slot-00000` .. `slot-16383`: zero-padded so ids sort in slot order.
pub fn slot_partition_id(slot: Slot) -> PartitionId {
    PartitionId::new(format!("slot-{:05}", slot.get())).expect("slot-NNNNN is a valid id")
}

/// The slot a partition id names, if it is `slot-NNNNN` with a slot in range.
pub fn slot_of_partition(id: &PartitionId) -> Option<Slot> {
    let digits = id.as_str().strip_prefix("slot-")?;
    if digits.len() != 5 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Slot::new(digits.parse().ok()?)
}

/// Slot `s` as the 64-bit key range `[s << 50, ((s + 1) << 50) - 1]`.
pub fn slot_key_range(slot: Slot) -> KeyRange {
    let start = u64::from(slot.get()) << SLOT_KEY_SPACE_SHIFT;
    KeyRange { start: Key(start), end: Key(start | ((1u64 << SLOT_KEY_SPACE_SHIFT) - 1)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_ranges_tile_the_key_space_in_slot_order() {
        let mut next = 0u64;
        for n in 0..SLOT_COUNT {
            let slot = Slot::new(n).expect("in range");
            assert_eq!(slot_of_partition(&slot_partition_id(slot)), Some(slot));
            let range = slot_key_range(slot);
            assert_eq!(range.start.0, next, "slot {n} starts where {} ended", n.saturating_sub(1));
            next = range.end.0.wrapping_add(1);
        }
        assert_eq!(next, 0, "the last slot ends at u64::MAX");
        assert_eq!(slot_partition_id(Slot::new(5461).expect("slot")).as_str(), "slot-05461");
        let first = Slot::new(0).expect("slot");
        assert_eq!(slot_key_range(first), KeyRange { start: Key(0), end: Key((1 << 50) - 1) });
        for bad in ["slot-1", "slot-16384", "slot-0001a", "slots-00001", "p-00001"] {
            assert_eq!(slot_of_partition(&PartitionId::new(bad).expect("id")), None, "{bad}");
        }
    }
}
