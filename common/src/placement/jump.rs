//! Jump consistent hash (Lamping & Veach, arXiv 1406.2294), bit-exact with Pyroscope's port.

/// Multiplier of the linear congruential step used by the paper.
const JUMP_LCG_MULTIPLIER: u64 = 2_862_933_555_777_941_757;

/// Maps `key` to a bucket in `[0, buckets)`.
///
/// Returns `None` when `buckets == 0` (Pyroscope returns -1 there; the paper returns 1).
/// Monotone: when `buckets` grows a key either keeps its bucket or moves to one of the new buckets.
#[inline]
pub fn jump_hash(key: u64, buckets: u32) -> Option<u32> {
    if buckets == 0 {
        return None;
    }
    Some(jump_hash_nonzero(key, buckets))
}

/// [`jump_hash`] for a bucket count known to be at least 1 (0 is treated as 1).
///
/// Same arithmetic as the textbook loop, with one change that does not alter results: the exit
/// test compares the f64 product with `buckets` before truncating (`trunc(t) < B ⇔ t < B` for
/// `t >= 0` and integer `B`), so the final, mispredicted branch resolves a conversion earlier.
#[inline]
pub fn jump_hash_nonzero(mut key: u64, buckets: u32) -> u32 {
    let buckets_f = f64::from(buckets.max(1));
    let mut b: i64 = 0;
    loop {
        key = key.wrapping_mul(JUMP_LCG_MULTIPLIER).wrapping_add(1);
        // Quotient first, then one f64 multiply, truncated toward zero (exactness rules).
        let quotient = 2_147_483_648.0_f64 / ((key >> 33) + 1) as f64;
        let next = (b + 1) as f64 * quotient;
        if next >= buckets_f {
            return b as u32;
        }
        b = next as i64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const VECTORS_CSV: &str = include_str!("testdata/jump_vectors.csv");

    #[test]
    fn matches_every_reference_vector() {
        let mut rows = 0;
        for line in VECTORS_CSV.lines().skip(1).filter(|l| !l.trim().is_empty()) {
            let mut cols = line.split(',');
            let key: u64 = cols.next().unwrap().trim().parse().unwrap();
            let buckets: u32 = cols.next().unwrap().trim().parse().unwrap();
            let want: u32 = cols.next().unwrap().trim().parse().unwrap();
            assert_eq!(jump_hash(key, buckets), Some(want), "key {key} buckets {buckets}");
            rows += 1;
        }
        assert_eq!(rows, 271);
    }

    #[test]
    fn cpp_reference_rows() {
        let rows: [(u64, [u32; 19]); 3] = [
            (1, [0, 0, 0, 0, 0, 0, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 17, 17]),
            (0xdeadbeef, [0, 1, 2, 3, 3, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 16, 16, 16]),
            (0x0ddc0ffeebadf00d, [0, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 15, 15, 15, 15]),
        ];
        for (key, want) in rows {
            for (i, w) in want.iter().enumerate() {
                assert_eq!(jump_hash(key, i as u32 + 1), Some(*w), "key {key} buckets {}", i + 1);
            }
        }
        for buckets in 1..20 {
            assert_eq!(jump_hash(0, buckets), Some(0));
        }
        assert_eq!(jump_hash(256, 1024), Some(520));
    }

    #[test]
    fn zero_buckets_is_none() {
        assert_eq!(jump_hash(42, 0), None);
    }

    proptest! {
        #[test]
        fn in_range_and_monotone(key in any::<u64>(), buckets in 1u32..5000) {
            let a = jump_hash_nonzero(key, buckets);
            let b = jump_hash_nonzero(key, buckets + 1);
            prop_assert!(a < buckets);
            // Monotonicity: either stays or moves to the new bucket.
            prop_assert!(b == a || b == buckets);
        }
    }

    #[test]
    fn balanced_over_buckets() {
        let buckets = 10u32;
        let mut counts = [0u32; 10];
        let keys = 100_000u64;
        for k in 0..keys {
            let key = k.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            counts[jump_hash_nonzero(key, buckets) as usize] += 1;
        }
        let expected = keys as f64 / f64::from(buckets);
        for c in counts {
            assert!((f64::from(c) - expected).abs() / expected < 0.05, "{counts:?}");
        }
    }
}
