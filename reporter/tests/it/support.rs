//! Streams and exact answers the tests compare the sketches with.

use lb_common::ids::{Key, KeyRange, WorkerId};
use lb_reporter::PartitionInfo;

pub fn worker() -> WorkerId {
    "w-0000".parse().expect("id")
}

pub fn partition(id: &str, range: KeyRange) -> PartitionInfo {
    PartitionInfo::new("acme".parse().expect("id"), "orders".parse().expect("id"), id.parse().expect("id"), range)
}

/// The key below which half of `bucket_ops` falls, interpolated inside the crossing bucket:
/// the master planner's `split_key` at quantile 0.5 (`master/src/planner/model.rs`).
pub fn sketch_median(range: KeyRange, bucket_ops: &[u64]) -> f64 {
    let total: f64 = bucket_ops.iter().map(|&b| b as f64).sum();
    let width = range.width() / bucket_ops.len() as f64;
    let mut below = 0.0;
    for (i, &ops) in bucket_ops.iter().enumerate() {
        let ops = ops as f64;
        if ops > 0.0 && below + ops >= total / 2.0 {
            let frac = ((total / 2.0 - below) / ops).clamp(0.0, 1.0);
            return range.start.0 as f64 + (i as f64 + frac) * width;
        }
        below += ops;
    }
    range.end.0 as f64
}

/// The exact median of `keys` (the key of rank n / 2).
pub fn exact_median(keys: &[u64]) -> f64 {
    let mut sorted = keys.to_vec();
    sorted.sort_unstable();
    sorted[sorted.len() / 2] as f64
}

/// Exact share of the most frequent key, and that key.
pub fn exact_top(keys: &[u64]) -> (Key, f64) {
    let mut counts = std::collections::HashMap::<u64, u64>::new();
    for &k in keys {
        *counts.entry(k).or_default() += 1;
    }
    let (&k, &c) = counts.iter().max_by_key(|&(k, c)| (*c, std::cmp::Reverse(*k))).expect("keys");
    (Key(k), c as f64 / keys.len() as f64)
}
