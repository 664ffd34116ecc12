//! Where in its key range a partition's ops fall: equal-width bucket counts, and the share of
//! writes that append at the tail.
//!
//! Buckets are those of the testbed's `bucket_bounds` and the planner's `split_key`: `n` equal
//! widths of the inclusive range (fewer when the range holds fewer than `n` keys), the first
//! `width % n` of them one key wider. Counting is exact; a median read from the buckets (the
//! planner interpolates uniformly inside the crossing one) is off by at most one bucket width,
//! `1 / n` of the range (1.6 % at 64 buckets).

use lb_common::ids::KeyRange;
use lb_common::protocol::MAX_SKETCH_BUCKETS;

/// Ops per equal-width bucket of one partition's key range.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyBuckets {
    counts: [u64; MAX_SKETCH_BUCKETS],
    range: KeyRange,
    n: usize,
    /// Width of the narrow buckets; the first `rem` are one key wider. Unused when `n == 1`.
    step: u64,
    rem: u64,
}

impl KeyBuckets {
    /// `buckets` (1..=64, clamped) equal-width buckets of `range`.
    pub fn new(range: KeyRange, buckets: usize) -> Self {
        let width = u128::from(range.end.0 - range.start.0) + 1;
        let n = (buckets.clamp(1, MAX_SKETCH_BUCKETS) as u128).min(width);
        // With n >= 2 the step is at most 2^63 and `rem * (step + 1) < width <= 2^64`: u64 math.
        let (step, rem) = if n == 1 { (0, 0) } else { ((width / n) as u64, (width % n) as u64) };
        Self { counts: [0; MAX_SKETCH_BUCKETS], range, n: n as usize, step, rem }
    }

    /// The bucket holding `key`; `None` outside the range.
    pub fn bucket_of(&self, key: u64) -> Option<usize> {
        if key < self.range.start.0 || key > self.range.end.0 {
            return None;
        }
        if self.n == 1 {
            return Some(0);
        }
        let offset = key - self.range.start.0;
        let wide = self.step + 1;
        let in_wide = self.rem * wide;
        let i = if offset < in_wide { offset / wide } else { self.rem + (offset - in_wide) / self.step };
        Some(i as usize)
    }

    /// Counts one op on `key`; returns whether it lies in the range.
    pub fn insert(&mut self, key: u64) -> bool {
        match self.bucket_of(key) {
            Some(i) => {
                self.counts[i] += 1;
                true
            }
            None => false,
        }
    }

    /// The counts, lowest keys first.
    pub fn counts(&self) -> &[u64] {
        &self.counts[..self.n]
    }

    pub fn range(&self) -> KeyRange {
        self.range
    }

    /// Zeroes the counts (a new interval).
    pub fn clear(&mut self) {
        self.counts = [0; MAX_SKETCH_BUCKETS];
    }
}

/// The share of writes at or past the highest key written before them: near 1 for an
/// append-only tail, near 0 for writes spread over the range.
///
/// "Before" means before the current drain round, not before the write itself: records from
/// several request threads reach the aggregator interleaved by thread, so one thread's tail
/// write may be drained after another's later one. Comparing with the high mark of the
/// previous round (10 ms ago by default) keeps a tail shared by many threads sequential.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SequentialWrites {
    /// Highest key written up to the end of the previous round; kept across intervals.
    high: Option<u64>,
    round_high: Option<u64>,
    writes: u64,
    sequential: u64,
}

impl SequentialWrites {
    /// Counts one write to `key`; returns whether this was the round's first write (the caller
    /// ends the round of partitions that had one).
    pub fn insert(&mut self, key: u64) -> bool {
        self.writes += 1;
        if self.high.is_some_and(|h| key >= h) {
            self.sequential += 1;
        }
        let first = self.round_high.is_none();
        self.round_high = Some(self.round_high.map_or(key, |h| h.max(key)));
        first
    }

    /// Folds the round's writes into the high mark.
    pub fn end_round(&mut self) {
        if let Some(r) = self.round_high.take() {
            self.high = Some(self.high.map_or(r, |h| h.max(r)));
        }
    }

    /// Sequential share of the interval's writes, 0 without writes.
    pub fn ratio(&self) -> f64 {
        if self.writes == 0 { 0.0 } else { self.sequential as f64 / self.writes as f64 }
    }

    /// Starts a new interval; the high mark stays.
    pub fn clear_counts(&mut self) {
        self.writes = 0;
        self.sequential = 0;
    }

    /// Forgets the high mark too (the partition's range changed).
    pub fn reset(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lb_common::ids::Key;

    #[test]
    fn buckets_tile_the_range_like_the_testbeds_bounds() {
        // 10 keys in 4 buckets: widths 3, 3, 2, 2 (the first `10 % 4` are one wider).
        let b = KeyBuckets::new(KeyRange { start: Key(100), end: Key(109) }, 4);
        let got: Vec<_> = (100..=109).map(|k| b.bucket_of(k).expect("inside")).collect();
        assert_eq!(got, vec![0, 0, 0, 1, 1, 1, 2, 2, 3, 3]);
        assert_eq!(b.bucket_of(99), None);
        assert_eq!(b.bucket_of(110), None);
        let full = KeyBuckets::new(KeyRange::FULL, 64);
        assert_eq!(full.bucket_of(0), Some(0));
        assert_eq!(full.bucket_of(u64::MAX), Some(63));
        assert_eq!(full.bucket_of(1 << 63), Some(32));
        assert_eq!(KeyBuckets::new(KeyRange::FULL, 1).bucket_of(u64::MAX), Some(0));
        // Narrower than the bucket count: one bucket per key.
        assert_eq!(KeyBuckets::new(KeyRange { start: Key(5), end: Key(7) }, 16).counts().len(), 3);
    }

    #[test]
    fn appends_are_sequential_and_spread_writes_are_not() {
        let mut tail = SequentialWrites::default();
        let mut spread = SequentialWrites::default();
        let mut rng = lb_common::rng::SplitMix64::new(1);
        for round in 0..100u64 {
            for i in 0..50 {
                tail.insert(round * 100 + i);
                spread.insert(rng.below(1 << 40));
            }
            tail.end_round();
            spread.end_round();
        }
        assert!(tail.ratio() > 0.98, "{}", tail.ratio());
        assert!(spread.ratio() < 0.05, "{}", spread.ratio());
    }
}
