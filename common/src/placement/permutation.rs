//! Fixed-seed, portable shard permutation: a pure function of the shard count.
//!
//! `permutation(n)` is an "inside-out" Fisher–Yates shuffle whose swap targets `steps[i]` (uniform in
//! `0..=i`) come from one SplitMix64 stream with a fixed seed, so every build on every platform gets
//! the same table. Growing `n` by one changes at most two slots: slot `steps[n]` now holds `n`, and
//! the new slot `n` takes its previous value. Shrinking is the exact reverse (no hysteresis).

/// Seed of the step stream ("lb_place" in ASCII); fixed forever because changing it remaps every shard.
pub const PERMUTATION_SEED: u64 = 0x6c62_5f70_6c61_6365;

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, portable, and fully specified integer arithmetic.
#[derive(Clone, Debug)]
struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Unbiased draw in `0..range` (Lemire's multiply-shift with rejection); `range >= 1`.
    fn below(&mut self, range: u64) -> u64 {
        loop {
            let m = u128::from(self.next_u64()) * u128::from(range);
            let low = m as u64;
            if low >= range || low >= range.wrapping_neg() % range {
                return (m >> 64) as u64;
            }
        }
    }
}

/// The first `n` swap targets: `steps[i]` is uniform in `0..=i`.
pub fn permutation_steps(n: u32) -> Vec<u32> {
    let mut rng = SplitMix64 { state: PERMUTATION_SEED };
    (0..n)
        .map(|i| {
            let step = rng.below(u64::from(i) + 1);
            u32::try_from(step).expect("step is at most i")
        })
        .collect()
}

/// The permutation of `0..n` used to map shard `j` to token position `permutation(n)[j]`.
pub fn permutation(n: u32) -> Vec<u32> {
    let steps = permutation_steps(n);
    let mut v = vec![0u32; n as usize];
    for (i, &j) in steps.iter().enumerate() {
        let j = j as usize;
        v[i] = v[j];
        v[j] = u32::try_from(i).expect("i < n");
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn small_values_are_permutations_and_stable() {
        assert!(permutation(0).is_empty());
        assert_eq!(permutation(1), vec![0]);
        // Regression pin: the generator is fixed forever.
        assert_eq!(permutation(8), permutation(8));
        let p = permutation(5000);
        assert_eq!(p.len(), 5000);
        let mut sorted = p.clone();
        sorted.sort_unstable();
        assert!(sorted.iter().enumerate().all(|(i, &v)| v as usize == i));
    }

    #[test]
    fn pinned_prefix() {
        // Pins the portable stream so an accidental change of seed or generator fails loudly.
        let steps = permutation_steps(16);
        assert!(steps.iter().enumerate().all(|(i, &s)| s as usize <= i));
        assert_eq!(steps, permutation_steps(4096)[..16].to_vec());
        assert_eq!(permutation(12), PINNED_12.to_vec());
    }

    const PINNED_12: &[u32] = &[8, 6, 11, 3, 1, 2, 4, 0, 10, 9, 7, 5];

    #[test]
    fn the_shared_generator_gives_the_same_stream() {
        // The copy here stays spelled out (it is pinned forever); lb_common::rng::SplitMix64 must
        // not drift from it.
        for seed in [PERMUTATION_SEED, 0, 1, u64::MAX] {
            let mut own = SplitMix64 { state: seed };
            let mut shared = crate::rng::SplitMix64::new(seed);
            for _ in 0..1000 {
                assert_eq!(own.next_u64(), shared.next_u64(), "seed {seed:#x}");
            }
        }
    }

    #[test]
    fn grow_and_shrink_walk_is_pure() {
        let forward: Vec<Vec<u32>> = (0..=32).map(permutation).collect();
        for n in (0..=32).rev() {
            assert_eq!(permutation(n), forward[n as usize]);
        }
    }

    proptest! {
        #[test]
        fn growing_by_one_changes_at_most_two_slots(n in 0u32..3000) {
            let a = permutation(n);
            let b = permutation(n + 1);
            let changed = a.iter().zip(&b).filter(|(x, y)| x != y).count();
            prop_assert!(changed <= 1, "old slots changed: {changed}");
            let steps = permutation_steps(n + 1);
            prop_assert_eq!(b[steps[n as usize] as usize], n);
        }
    }
}
