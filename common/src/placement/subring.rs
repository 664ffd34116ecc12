//! Nested contiguous subrings of a ring of `n` shards and the fallback iterator over them.
//!
//! Coordinates are "unwrapped" (they may exceed `n`); [`Subring::at`] folds them back, first inside
//! the parent range, then around the ring. Only two nesting levels are used: a tenant subring in the
//! ring and a dataset subring in the tenant subring.

use super::jump::jump_hash_nonzero;

/// A contiguous range `[start, end)` inside a parent range `[parent_start, parent_end)` of a ring of
/// `ring_size` shards. Reference notation: `(n, a, b, c, d)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Subring {
    /// Total shards `n` of the ring.
    pub ring_size: u64,
    /// Parent range start `a` (unwrapped).
    pub parent_start: u64,
    /// Parent range end `b` (unwrapped, exclusive).
    pub parent_end: u64,
    /// This range's start `c` (unwrapped), `parent_start <= start`.
    pub start: u64,
    /// This range's end `d` (unwrapped, exclusive), `end - start <= parent_end - parent_start`.
    pub end: u64,
}

impl Subring {
    /// The whole ring of `ring_size` shards: `(n, 0, n, 0, n)`.
    pub const fn whole(ring_size: u64) -> Self {
        Self { ring_size, parent_start: 0, parent_end: ring_size, start: 0, end: ring_size }
    }

    /// Reference tuple constructor `(n, a, b, c, d)`.
    pub const fn from_parts(n: u64, a: u64, b: u64, c: u64, d: u64) -> Self {
        Self { ring_size: n, parent_start: a, parent_end: b, start: c, end: d }
    }

    /// Child subring of `size` shards whose start offset is `jump(key, self.size())`.
    ///
    /// The caller clamps `size` to `1..=self.size()`; `self.size()` must be at least 1 and fit a u32.
    #[inline]
    pub fn sub(&self, key: u64, size: u64) -> Self {
        let parent_size = u32::try_from(self.size()).expect("subring sizes fit a u32 shard count");
        let start = self.start + u64::from(jump_hash_nonzero(key, parent_size));
        Self { ring_size: self.ring_size, parent_start: self.start, parent_end: self.end, start, end: start + size }
    }

    /// The parent becomes "this" range and the whole ring becomes the parent.
    #[inline]
    pub const fn pop(&self) -> Self {
        Self {
            ring_size: self.ring_size,
            parent_start: 0,
            parent_end: self.ring_size,
            start: self.parent_start,
            end: self.parent_end,
        }
    }

    /// Number of shards in this range.
    #[inline]
    pub const fn size(&self) -> u64 {
        self.end - self.start
    }

    /// Offset of this range inside its parent.
    #[inline]
    pub const fn offset(&self) -> u64 {
        self.start - self.parent_start
    }

    /// Absolute shard index in `[0, n)` of relative position `i` (taken modulo the size).
    ///
    /// Returns 0 for an empty subring (callers never ask an empty one).
    #[inline]
    pub fn at(&self, i: u64) -> u64 {
        let size = self.size();
        let parent_size = self.parent_end - self.parent_start;
        if size == 0 || parent_size == 0 || self.ring_size == 0 {
            return 0;
        }
        let x = self.start + reduce(i, size);
        let x = reduce(x - self.parent_start, parent_size);
        reduce(x + self.parent_start, self.ring_size)
    }
}

/// `x mod m` (`m >= 1`) without a division in the common cases `x < 2m` of subring arithmetic.
#[inline]
fn reduce(x: u64, m: u64) -> u64 {
    if x < m {
        x
    } else if x - m < m {
        x - m
    } else {
        x % m
    }
}

/// Shard indices in fallback order: the rest of the dataset subring starting at the pick, then the
/// rest of the tenant subring, then the rest of the ring; each shard exactly once, at most `n` items.
#[derive(Clone, Debug)]
pub struct FallbackShards {
    ring: Subring,
    offset: u64,
    left_in_level: i64,
    produced: u64,
}

impl FallbackShards {
    /// Starts at relative offset `pick_offset` inside `dataset`.
    pub fn new(dataset: Subring, pick_offset: u64) -> Self {
        Self {
            ring: dataset,
            offset: pick_offset,
            left_in_level: i64::try_from(dataset.size()).expect("subring size fits an i64"),
            produced: 0,
        }
    }
}

impl Iterator for FallbackShards {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        if self.produced >= self.ring.ring_size {
            return None;
        }
        if self.left_in_level > 0 {
            self.left_in_level -= 1;
        } else {
            // The reference loops while `left <= 0`, which skips a parent holding exactly one
            // shard more than its child (S=3, T=2, D=1 yields one instance, not three). A parent
            // level with `left == 0` still has the one shard produced now, so climb only while < 0.
            self.left_in_level = -1;
            while self.left_in_level < 0 {
                if self.ring.size() == self.ring.ring_size {
                    return None;
                }
                let child_size = self.ring.size();
                self.offset = self.ring.offset() + child_size;
                self.ring = self.ring.pop();
                self.left_in_level = self.ring.size() as i64 - child_size as i64 - 1;
            }
        }
        self.offset += 1;
        self.produced += 1;
        Some(self.ring.at(self.offset - 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readme_example() {
        let ring = Subring::whole(12);
        let tenant = Subring::from_parts(12, 0, 12, 3, 11);
        assert_eq!(tenant.offset(), 3);
        let dataset = Subring::from_parts(12, 3, 11, 4, 8);
        assert_eq!(dataset.offset(), 1);
        assert_eq!(dataset.pop(), Subring::from_parts(12, 0, 12, 3, 11));
        assert_eq!(ring.size(), 12);
    }

    proptest::proptest! {
        #[test]
        fn reduce_is_mod(x in proptest::prelude::any::<u64>(), m in 1u64..(1u64 << 62)) {
            proptest::prop_assert_eq!(reduce(x, m), x % m);
            proptest::prop_assert_eq!(reduce(x % m + m / 2, m), (x % m + m / 2) % m);
        }
    }

    #[test]
    fn wrap_inside_parent() {
        let r = Subring::from_parts(12, 8, 16, 14, 18);
        let got: Vec<u64> = (0..4).map(|i| r.at(i)).collect();
        assert_eq!(got, vec![2, 3, 8, 9]);
    }

    fn names(sub: Subring, pick: u64, shards: &[usize], desc: &[&str]) -> String {
        FallbackShards::new(sub, pick).take(20).map(|s| desc[shards[s as usize]]).collect::<Vec<_>>().join(" ")
    }

    type Tuple5 = (u64, u64, u64, u64, u64);

    /// `Test_distribution_iterator` vectors.
    #[test]
    fn iterator_vectors() {
        let shards = [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2];
        let desc = ["a", "b", "c"];
        assert_eq!(FallbackShards::new(Subring::from_parts(0, 0, 0, 0, 0), 0).count(), 0);
        let cases: [(Tuple5, &[&str]); 5] = [
            (
                (12, 8, 16, 8, 16),
                &[
                    "c c c c a a a a b b b b",
                    "c c c a a a a c b b b b",
                    "c c a a a a c c b b b b",
                    "c a a a a c c c b b b b",
                    "a a a a c c c c b b b b",
                    "a a a c c c c a b b b b",
                    "a a c c c c a a b b b b",
                    "a c c c c a a a b b b b",
                ],
            ),
            (
                (12, 1, 9, 3, 7),
                &[
                    "a b b b b c a a c c c a",
                    "b b b a b c a a c c c a",
                    "b b a b b c a a c c c a",
                    "b a b b b c a a c c c a",
                ],
            ),
            (
                (12, 1, 9, 1, 5),
                &[
                    "a a a b b b b c c c c a",
                    "a a b a b b b c c c c a",
                    "a b a a b b b c c c c a",
                    "b a a a b b b c c c c a",
                ],
            ),
            (
                (12, 8, 16, 10, 14),
                &[
                    "c c a a a a c c b b b b",
                    "c a a c a a c c b b b b",
                    "a a c c a a c c b b b b",
                    "a c c a a a c c b b b b",
                ],
            ),
            (
                (12, 8, 16, 14, 18),
                &[
                    "a a c c c c a a b b b b",
                    "a c c a c c a a b b b b",
                    "c c a a c c a a b b b b",
                    "c a a c c c a a b b b b",
                ],
            ),
        ];
        for ((n, a, b, c, d), rows) in cases {
            let sub = Subring::from_parts(n, a, b, c, d);
            let period = rows.len() as u64;
            for pick in 0..period + 2 {
                let want = rows[(pick % period) as usize];
                assert_eq!(names(sub, pick, &shards, &desc), want, "{sub:?} pick {pick}");
            }
        }
    }
}
