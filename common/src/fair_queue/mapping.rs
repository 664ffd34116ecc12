//! Ordered slot map: the round-robin rotation of one level (tenants, or the children of one node).
//!
//! Port of Loki's `Mapping`: every key lives in a numbered slot; removing a key empties its slot and
//! puts it at the back of a FIFO of free slots; a new key takes the oldest free slot, else a new
//! slot at the end. Slots are never compacted, so the position of every other key never changes and
//! a cursor (the last slot served) stays meaningful across removals.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// A round-robin cursor over the slots of a [`Mapping`]: the last slot served, or a sentinel.
///
/// `-1` means "before the first slot" and `-2` means "the owning node's local queue is next"
/// (only meaningful inside a tree node). `get_next(cursor)` looks from `cursor + 1` on.
pub(crate) type SlotCursor = isize;

/// Cursor value: the local queue of the node gets the next turn.
pub(crate) const CURSOR_LOCAL: SlotCursor = -2;
/// Cursor value: start scanning at slot 0.
pub(crate) const CURSOR_START: SlotCursor = -1;

/// Ordered slot map from a name to a value of type `V`, with Loki's slot-reuse semantics.
#[derive(Debug)]
pub(crate) struct Mapping<V> {
    /// Slot array; `None` marks an empty (freed) slot.
    slots: Vec<Option<V>>,
    /// Name to slot index.
    by_name: HashMap<Arc<str>, usize>,
    /// Freed slots, oldest first.
    free: VecDeque<usize>,
}

impl<V> Default for Mapping<V> {
    fn default() -> Self {
        Self { slots: Vec::new(), by_name: HashMap::new(), free: VecDeque::new() }
    }
}

impl<V> Mapping<V> {
    /// Number of live keys.
    pub(crate) fn len(&self) -> usize {
        self.by_name.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Number of slots, empty ones included (the bound of one full rotation).
    pub(crate) fn slot_count(&self) -> usize {
        self.slots.len()
    }

    /// Slot of `name`, if present.
    pub(crate) fn slot_of(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    pub(crate) fn get(&self, name: &str) -> Option<&V> {
        self.slot_of(name).and_then(|slot| self.slots[slot].as_ref())
    }

    pub(crate) fn get_slot(&self, slot: usize) -> Option<&V> {
        self.slots.get(slot).and_then(Option::as_ref)
    }

    /// Inserts a key that must not be present yet; returns its slot (the oldest free one, else a
    /// new one at the end).
    pub(crate) fn put(&mut self, name: Arc<str>, value: V) -> usize {
        debug_assert!(!self.by_name.contains_key(&*name), "put of a present key");
        let slot = match self.free.pop_front() {
            Some(slot) => {
                self.slots[slot] = Some(value);
                slot
            }
            None => {
                self.slots.push(Some(value));
                self.slots.len() - 1
            }
        };
        self.by_name.insert(name, slot);
        slot
    }

    /// Removes `name`; its slot goes to the back of the free FIFO. Returns the value, if present.
    pub(crate) fn remove(&mut self, name: &str) -> Option<V> {
        let slot = self.by_name.remove(name)?;
        self.free.push_back(slot);
        self.slots[slot].take()
    }

    /// First live slot strictly after `cursor`, with its value; `None` when the scan reaches the
    /// end (the caller wraps around).
    pub(crate) fn get_next(&self, cursor: SlotCursor) -> Option<(usize, &V)> {
        if self.is_empty() {
            return None;
        }
        // Both sentinels (-1 and -2) start the scan at slot 0.
        let start = usize::try_from(cursor.saturating_add(1)).unwrap_or(0);
        self.slots.iter().enumerate().skip(start).find_map(|(slot, value)| value.as_ref().map(|v| (slot, v)))
    }

    /// Live values in slot order.
    #[cfg(test)]
    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.slots.iter().flatten()
    }

    /// Live values in slot order, mutably.
    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.slots.iter_mut().flatten()
    }

    /// Empties the mapping and keeps its allocations for reuse.
    pub(crate) fn clear(&mut self) {
        self.slots.clear();
        self.by_name.clear();
        self.free.clear();
    }

    /// Checks the internal bookkeeping (tests only).
    #[cfg(test)]
    pub(crate) fn check_consistent(&self) {
        let live = self.slots.iter().filter(|s| s.is_some()).count();
        assert_eq!(live, self.by_name.len(), "live slots vs names");
        assert_eq!(live + self.free.len(), self.slots.len(), "live + free vs slots");
        for (name, &slot) in &self.by_name {
            assert!(self.slots[slot].is_some(), "name {name} points to an empty slot");
        }
        for &slot in &self.free {
            assert!(self.slots[slot].is_none(), "free slot {slot} is occupied");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(m: &Mapping<&'static str>) -> Vec<Option<&'static str>> {
        m.slots.clone()
    }

    /// Loki `TestQueueMapping`: slot reuse, `get_next` order and out-of-bounds.
    #[test]
    fn slot_reuse_and_get_next_follow_loki() {
        let mut m: Mapping<&'static str> = Mapping::default();
        m.put("q1".into(), "q1");
        m.put("q2".into(), "q2");
        assert_eq!(names(&m), vec![Some("q1"), Some("q2")]);

        assert_eq!(m.remove("q1"), Some("q1"));
        m.put("q3".into(), "q3");
        assert_eq!(names(&m), vec![Some("q3"), Some("q2")]);

        m.put("q4".into(), "q4");
        assert_eq!(names(&m), vec![Some("q3"), Some("q2"), Some("q4")]);
        assert_eq!(m.slot_of("q2"), Some(1));

        assert_eq!(m.get_next(CURSOR_START), Some((0, &"q3")));
        assert_eq!(m.get_next(0), Some((1, &"q2")));
        m.remove("q2");
        assert_eq!(m.get_next(1), Some((2, &"q4")));
        assert_eq!(m.get_next(100), None);
        assert_eq!(m.get_next(CURSOR_LOCAL), Some((0, &"q3")));
        m.check_consistent();
    }

    #[test]
    fn oldest_free_slot_is_reused_first() {
        let mut m: Mapping<u32> = Mapping::default();
        for (i, name) in ["a", "b", "c"].into_iter().enumerate() {
            m.put(name.into(), u32::try_from(i).expect("small"));
        }
        m.remove("c");
        m.remove("a");
        assert_eq!(m.put("d".into(), 3), 2, "slot of c was freed first");
        assert_eq!(m.put("e".into(), 4), 0);
        assert_eq!(m.len(), 3);
        assert_eq!(m.values().copied().collect::<Vec<_>>(), vec![4, 1, 3]);
        m.check_consistent();
    }

    #[test]
    fn empty_mapping_has_no_next() {
        let mut m: Mapping<u8> = Mapping::default();
        assert_eq!(m.get_next(CURSOR_START), None);
        m.put("x".into(), 1);
        m.remove("x");
        assert_eq!(m.get_next(CURSOR_START), None);
        assert_eq!(m.slot_count(), 1);
        m.clear();
        assert_eq!(m.slot_count(), 0);
    }
}
