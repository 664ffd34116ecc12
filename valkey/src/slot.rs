//! Hash slots: the unit Valkey Cluster places, and lb's partition for a Valkey backend.
//!
//! A key lives in slot `CRC16(tag) mod 16384`, where `tag` is the key itself or, when the key holds
//! a non-empty `{...}` hash tag, the bytes between the first `{` and the next `}`. The CRC is
//! CRC16/XMODEM (polynomial 0x1021, initial value 0, no reflection), the variant the Redis Cluster
//! specification fixes; it is computed bit by bit here because keys are short and a table would be
//! more code than the loop.

use std::fmt;

/// Number of hash slots in every Valkey / Redis cluster (fixed by the cluster protocol).
pub const SLOT_COUNT: u16 = 16_384;

/// One hash slot, `0..SLOT_COUNT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Slot(u16);

impl Slot {
    /// The slot `number`, or `None` when it is not below [`SLOT_COUNT`].
    pub fn new(number: u16) -> Option<Self> {
        (number < SLOT_COUNT).then_some(Self(number))
    }

    /// The slot's number.
    pub fn get(self) -> u16 {
        self.0
    }
}

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// An inclusive range of slots, as every cluster command writes them (`start-end` or `start end`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SlotRange {
    start: Slot,
    end: Slot,
}

impl SlotRange {
    /// `start..=end`, or `None` when `start > end`.
    pub fn new(start: Slot, end: Slot) -> Option<Self> {
        (start <= end).then_some(Self { start, end })
    }

    /// The range holding one slot.
    pub fn single(slot: Slot) -> Self {
        Self { start: slot, end: slot }
    }

    /// Every slot of the cluster.
    pub fn all() -> Self {
        Self { start: Slot(0), end: Slot(SLOT_COUNT - 1) }
    }

    pub fn start(self) -> Slot {
        self.start
    }

    pub fn end(self) -> Slot {
        self.end
    }

    /// Number of slots in the range (at least 1).
    pub fn len(self) -> u16 {
        self.end.0 - self.start.0 + 1
    }

    /// Always false: a range holds at least one slot (here for clippy's `len_without_is_empty`).
    pub fn is_empty(self) -> bool {
        false
    }

    pub fn contains(self, slot: Slot) -> bool {
        self.start <= slot && slot <= self.end
    }

    /// The slots of the range, in order.
    pub fn slots(self) -> impl Iterator<Item = Slot> {
        (self.start.0..=self.end.0).map(Slot)
    }

    /// Splits `0..SLOT_COUNT` into `parts` contiguous ranges whose sizes differ by at most one
    /// (the earlier ranges take the remainder).
    /// Returns an empty vector for `parts == 0` and at most `SLOT_COUNT` ranges.
    pub fn even_split(parts: usize) -> Vec<Self> {
        let parts = parts.min(usize::from(SLOT_COUNT));
        if parts == 0 {
            return Vec::new();
        }
        let total = usize::from(SLOT_COUNT);
        let (base, remainder) = (total / parts, total % parts);
        let mut ranges = Vec::with_capacity(parts);
        let mut start = 0usize;
        for index in 0..parts {
            let len = base + usize::from(index < remainder);
            let end = start + len - 1;
            // Both bounds are below SLOT_COUNT, which fits in u16.
            ranges.push(Self { start: Slot(start as u16), end: Slot(end as u16) });
            start = end + 1;
        }
        ranges
    }
}

impl fmt::Display for SlotRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.start, self.end)
    }
}

/// The slot that holds `key`, honouring `{hash tags}`.
pub fn key_slot(key: &[u8]) -> Slot {
    Slot(crc16_xmodem(hash_tag(key)) % SLOT_COUNT)
}

/// The part of `key` that is hashed: the bytes between the first `{` and the first `}` after
/// it when that is non-empty, else the whole key.
fn hash_tag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{') {
        let rest = &key[open + 1..];
        if let Some(close) = rest.iter().position(|&b| b == b'}')
            && close > 0
        {
            return &rest[..close];
        }
    }
    key
}

/// CRC16/XMODEM: polynomial 0x1021, initial value 0, input and output not reflected.
fn crc16_xmodem(bytes: &[u8]) -> u16 {
    const POLYNOMIAL: u16 = 0x1021;
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ POLYNOMIAL } else { crc << 1 };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_matches_the_xmodem_check_value() {
        // The catalogue check value of CRC-16/XMODEM, also quoted by the cluster spec.
        assert_eq!(crc16_xmodem(b"123456789"), 0x31C3);
    }

    #[test]
    fn key_slots_match_the_real_server() {
        // From `CLUSTER KEYSLOT` on valkey-server 9.1.2 and the MOVED replies it sent.
        assert_eq!(key_slot(b"foo").get(), 12182);
        assert_eq!(key_slot(b"hello").get(), 866);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"{user1000}.followers"), key_slot(b"user1000"));
    }

    #[test]
    fn empty_or_unclosed_hash_tags_hash_the_whole_key() {
        assert_eq!(hash_tag(b"foo{}{bar}"), b"foo{}{bar}");
        assert_eq!(hash_tag(b"foo{bar"), b"foo{bar");
        assert_eq!(hash_tag(b"foo{{bar}}zap"), b"{bar");
        assert_eq!(hash_tag(b"foo{bar}{zap}"), b"bar");
    }

    #[test]
    fn even_split_covers_every_slot_once() {
        for parts in [1usize, 3, 7, 16_384] {
            let ranges = SlotRange::even_split(parts);
            assert_eq!(ranges.len(), parts);
            assert_eq!(ranges[0].start().get(), 0);
            assert_eq!(ranges[parts - 1].end().get(), SLOT_COUNT - 1);
            for pair in ranges.windows(2) {
                assert_eq!(pair[0].end().get() + 1, pair[1].start().get());
                assert!(pair[0].len().abs_diff(pair[1].len()) <= 1);
            }
        }
        let three = SlotRange::even_split(3);
        assert_eq!(three.iter().map(|r| r.to_string()).collect::<Vec<_>>(), ["0-5461", "5462-10922", "10923-16383"]);
        assert!(SlotRange::even_split(0).is_empty());
    }

    #[test]
    fn slot_and_range_constructors_reject_invalid_input() {
        assert!(Slot::new(SLOT_COUNT).is_none());
        let (a, b) = (Slot::new(5).expect("valid"), Slot::new(9).expect("valid"));
        assert!(SlotRange::new(b, a).is_none());
        let range = SlotRange::new(a, b).expect("ordered");
        assert_eq!(range.len(), 5);
        assert!(range.contains(Slot::new(9).expect("valid")));
        assert!(!range.contains(Slot::new(10).expect("valid")));
        assert_eq!(range.slots().count(), 5);
    }
}
