//! Zipf skew over the key space in closed form: the space is cut into equal segments, segment
//! ranks are a seeded permutation, and segment `r` gets weight `1/(r+1)^s`. Inside a segment the
//! load is uniform, so the CDF is piecewise linear and any range's share is O(1).

use super::KEY_SPACE;
use super::rng::SplitMix64;

#[derive(Debug, Clone)]
pub struct ZipfCdf {
    /// `prefix[i]` = share of all segments before segment `i`; `prefix[n] = 1`.
    prefix: Vec<f64>,
    segment_width: f64,
}

impl ZipfCdf {
    pub fn new(segments: u32, exponent: f64, seed: u64) -> Self {
        let n = segments.max(1) as usize;
        let mut ranks: Vec<usize> = (0..n).collect();
        let mut rng = SplitMix64::new(seed);
        for i in (1..n).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            ranks.swap(i, j);
        }
        let weights: Vec<f64> = ranks.iter().map(|&r| 1.0 / ((r + 1) as f64).powf(exponent)).collect();
        let total: f64 = weights.iter().sum();
        let mut prefix = Vec::with_capacity(n + 1);
        let mut acc = 0.0;
        prefix.push(0.0);
        for w in &weights {
            acc += w / total;
            prefix.push(acc);
        }
        Self { prefix, segment_width: KEY_SPACE / n as f64 }
    }

    /// Share of load strictly below position `x` (a key as a float, `0..=2^64`).
    fn cdf(&self, x: f64) -> f64 {
        let n = self.prefix.len() - 1;
        let pos = (x / self.segment_width).clamp(0.0, n as f64);
        let i = (pos as usize).min(n - 1);
        let frac = pos - i as f64;
        self.prefix[i] + frac * (self.prefix[i + 1] - self.prefix[i])
    }

    /// The position (a key as a float) below which `share` of the load falls: the inverse of
    /// the CDF, for sampling keys.
    pub fn position_at(&self, share: f64) -> f64 {
        let n = self.prefix.len() - 1;
        // The segment whose prefix interval holds `share`.
        let i = self.prefix.partition_point(|&p| p <= share).clamp(1, n) - 1;
        let span = self.prefix[i + 1] - self.prefix[i];
        let frac = if span > 0.0 { ((share - self.prefix[i]) / span).clamp(0.0, 1.0) } else { 0.0 };
        (i as f64 + frac) * self.segment_width
    }

    /// Share of load strictly below key `key`.
    pub fn share_below(&self, key: u64) -> f64 {
        self.cdf(key as f64)
    }

    /// Share of load in the inclusive key range `[start, end]`.
    pub fn mass(&self, start: u64, end: u64) -> f64 {
        (self.cdf(end as f64 + 1.0) - self.cdf(start as f64)).max(0.0)
    }
}
