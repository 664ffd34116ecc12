//! SplitMix64 (Steele, Lea & Flood 2014): the one seeded generator lb uses where a run must be
//! reproducible and cheap rather than unpredictable — the testbed's workloads and scaling, the
//! fair queue's shuffle shards, load generators and benchmarks. A seed fixes the whole stream on
//! every platform: the arithmetic is fully specified wrapping integer operations.
//!
//! [`crate::placement::permutation`] keeps its own spelled-out copy on purpose: its stream is
//! pinned by reference vectors and must not change with this module. A test there checks that
//! both give the same stream for the same seed.

/// Steele, Lea & Flood's SplitMix64; passes BigCrush, one add and three multiplies per draw.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub const fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, n)` (Lemire's multiply-shift without rejection: the bias, below
    /// `n / 2^64`, is irrelevant for simulation and load generation). `n = 0` gives 0.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `[0, 1)`: the top 53 bits of one draw, so every value is an exact `f64`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_sequence() {
        // First outputs for seed 1234567 from the reference C implementation.
        let mut r = SplitMix64::new(1_234_567);
        assert_eq!(r.next_u64(), 6_457_827_717_110_365_317);
        assert_eq!(r.next_u64(), 3_203_168_211_198_807_973);
    }

    #[test]
    fn below_and_next_f64_stay_in_range() {
        let mut r = SplitMix64::new(42);
        for n in [1, 2, 3, 7, 1000, u64::MAX] {
            for _ in 0..100 {
                assert!(r.below(n) < n);
            }
        }
        assert_eq!(r.below(0), 0);
        for _ in 0..1000 {
            let x = r.next_f64();
            assert!((0.0..1.0).contains(&x), "{x}");
        }
    }
}
