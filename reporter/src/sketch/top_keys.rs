//! Heavy hitters by Space-Saving (Metwally, Agrawal, El Abbadi 2005) over [`TOP_KEY_COUNTERS`]
//! counters.
//!
//! Contract, for `n` keys observed: every key observed more than `n / TOP_KEY_COUNTERS` times
//! holds a counter; a counter's `count` over-estimates its key's true count by at most its
//! `error`, and `error <= n / TOP_KEY_COUNTERS`. [`TopKeys::top`] reports the guaranteed part,
//! `(count - error) / n`: never above the key's true share, and at most `1 / TOP_KEY_COUNTERS`
//! (3.1 %) below it.
//!
//! Keys are lb's 64-bit keys ([`lb_common::ids::Key`] is a `u64`), so a counter stores its key
//! inline: nothing is allocated after construction, and a replaced counter copies 8 bytes.
//! Lookup and minimum are linear scans of 32 entries, which beat a hash map at this size.

use lb_common::ids::Key;

/// 32 counters: a 3.1 % share bound, finer than the single-key threshold a planner decides on
/// (tens of %), in 512 bytes per partition.
pub const TOP_KEY_COUNTERS: usize = 32;

/// Space-Saving summary of one partition's keys in one interval.
#[derive(Debug, Clone, PartialEq)]
pub struct TopKeys {
    keys: [u64; TOP_KEY_COUNTERS],
    /// 32-bit counts (saturating: 4 G ops on one partition in one interval is past any
    /// storage node): the minimum scan on a miss reads half the cache lines.
    counts: [u32; TOP_KEY_COUNTERS],
    errors: [u32; TOP_KEY_COUNTERS],
    len: usize,
    total: u64,
}

impl Default for TopKeys {
    fn default() -> Self {
        Self {
            keys: [0; TOP_KEY_COUNTERS],
            counts: [0; TOP_KEY_COUNTERS],
            errors: [0; TOP_KEY_COUNTERS],
            len: 0,
            total: 0,
        }
    }
}

impl TopKeys {
    /// Counts one occurrence of `key`.
    pub fn insert(&mut self, key: u64) {
        self.total += 1;
        if let Some(i) = self.keys[..self.len].iter().position(|&k| k == key) {
            self.counts[i] = self.counts[i].saturating_add(1);
            return;
        }
        if self.len < TOP_KEY_COUNTERS {
            let i = self.len;
            (self.keys[i], self.counts[i], self.errors[i]) = (key, 1, 0);
            self.len += 1;
            return;
        }
        // Replace the smallest counter: the newcomer inherits its count as its error. Two
        // passes (the minimum, then where it is) vectorise; one compare-and-keep-index pass
        // does not, and was half of the aggregator's time.
        let least = *self.counts.iter().min().expect("TOP_KEY_COUNTERS > 0");
        let min = self.counts.iter().position(|&c| c == least).expect("the minimum is one of the counts");
        self.errors[min] = self.counts[min];
        self.counts[min] = self.counts[min].saturating_add(1);
        self.keys[min] = key;
    }

    /// Keys observed.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Up to `limit` keys whose guaranteed share is at least `min_share_ratio`, hottest first,
    /// as `(key, guaranteed share)`; ties broken by key so the order is deterministic.
    pub fn top(&self, limit: usize, min_share_ratio: f64) -> Vec<(Key, f64)> {
        if self.total == 0 {
            return Vec::new();
        }
        let n = self.total as f64;
        let mut out: Vec<(Key, f64)> = (0..self.len)
            .map(|i| (Key(self.keys[i]), f64::from(self.counts[i] - self.errors[i]) / n))
            .filter(|&(_, share)| share > 0.0 && share >= min_share_ratio)
            .collect();
        out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        out.truncate(limit);
        out
    }

    /// Forgets every key (a new interval).
    pub fn clear(&mut self) {
        self.len = 0;
        self.total = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frequent_key_is_kept_under_churn_with_its_share_bounded() {
        let mut t = TopKeys::default();
        let mut rng = lb_common::rng::SplitMix64::new(9);
        let mut hot = 0u64;
        let n = 100_000;
        for _ in 0..n {
            if rng.below(10) < 3 {
                t.insert(42);
                hot += 1;
            } else {
                t.insert(1_000 + rng.below(1_000_000));
            }
        }
        let top = t.top(16, 0.0);
        assert_eq!(top[0].0, Key(42));
        let truth = hot as f64 / n as f64;
        assert!(top[0].1 <= truth && truth - top[0].1 <= 1.0 / TOP_KEY_COUNTERS as f64, "{top:?} vs {truth}");
        // Churned keys hold next to no guaranteed share.
        assert!(top.iter().skip(1).all(|&(_, s)| s < 0.001), "{top:?}");
    }

    #[test]
    fn fewer_keys_than_counters_are_exact() {
        let mut t = TopKeys::default();
        for k in [1u64, 2, 2, 3, 3, 3] {
            t.insert(k);
        }
        assert_eq!(t.top(2, 0.0), vec![(Key(3), 0.5), (Key(2), 2.0 / 6.0)]);
        assert_eq!(t.top(16, 0.2).len(), 2);
        t.clear();
        assert!(t.top(16, 0.0).is_empty());
    }
}
