//! Workload generators: each component yields a *closed-form* demand over the key space.
//!
//! Contract: a component is a rate over time ([`Component::rate_at`]) times a distribution over
//! keys. Static distributions (uniform, zipf, hot range, hot key) answer "what share of my ops
//! falls in `[start, end]`" ([`Component::mass`]) in O(1); the sequential append's distribution is
//! a point that moves with the tail ([`Component::point_at`]). Nothing is sampled per request, so
//! demand is exact, cheap and deterministic from the scenario's seed (zipf's segment ranking is
//! the only random part).
//!
//! A table's workload is the sum of its components, each scaled by the table's surge multiplier.

pub mod rng;
mod zipf;

use rng::SplitMix64;

use crate::scenario::{WorkloadKind, WorkloadSpec};
pub use zipf::ZipfCdf;

/// 2^64 as a float: the width of the key space.
pub const KEY_SPACE: f64 = 18_446_744_073_709_551_616.0;

/// Where a component's ops fall in the key space.
#[derive(Debug, Clone)]
pub enum Shape {
    Uniform,
    Zipf(ZipfCdf),
    /// Uniform inside `[start, end]`.
    HotRange {
        start: u64,
        end: u64,
    },
    /// Every op on one key.
    HotKey(u64),
    /// Every op on the tail, which starts at `start` and moves up by `keys_per_sec`.
    Append {
        start: u64,
        keys_per_sec: f64,
    },
}

/// One workload component of one table.
#[derive(Debug, Clone)]
pub struct Component {
    /// Index of the table in the cluster.
    pub table: usize,
    pub shape: Shape,
    pub ops_per_sec: f64,
    pub read_ratio: f64,
    pub value_bytes: f64,
    pub start_secs: f64,
    pub ramp_secs: f64,
    pub end_secs: Option<f64>,
    pub period_amplitude_ratio: f64,
    pub period_secs: f64,
    pub peak_at_secs: f64,
}

impl Component {
    /// Builds a component from a validated spec; `seed` ranks zipf segments.
    pub fn from_spec(table: usize, spec: &WorkloadSpec, seed: u64) -> Self {
        let shape = match spec.kind {
            WorkloadKind::Uniform {} => Shape::Uniform,
            WorkloadKind::Zipf { exponent, segments } => Shape::Zipf(ZipfCdf::new(segments, exponent, seed)),
            WorkloadKind::HotRange { start_key, end_key } => Shape::HotRange { start: start_key.0, end: end_key.0 },
            WorkloadKind::HotKey { key } => Shape::HotKey(key.0),
            WorkloadKind::SequentialAppend { start_key, keys_per_sec } => {
                Shape::Append { start: start_key.0, keys_per_sec }
            }
        };
        Self {
            table,
            shape,
            ops_per_sec: spec.ops_per_sec,
            read_ratio: spec.read_ratio,
            value_bytes: spec.value_bytes as f64,
            start_secs: spec.start_secs as f64,
            ramp_secs: spec.ramp_secs as f64,
            end_secs: spec.end_secs.map(|s| s as f64),
            period_amplitude_ratio: spec.period_amplitude_ratio,
            period_secs: spec.period_secs as f64,
            peak_at_secs: spec.peak_at_secs as f64,
        }
    }

    /// Ops per second over the whole table at `t_secs` since the scenario start (no surge).
    pub fn rate_at(&self, t_secs: f64) -> f64 {
        if t_secs < self.start_secs || self.end_secs.is_some_and(|end| t_secs >= end) {
            return 0.0;
        }
        let ramp = if self.ramp_secs > 0.0 { ((t_secs - self.start_secs) / self.ramp_secs).min(1.0) } else { 1.0 };
        let period = if self.period_amplitude_ratio > 0.0 {
            let phase = std::f64::consts::TAU * (t_secs - self.peak_at_secs) / self.period_secs;
            1.0 + self.period_amplitude_ratio * phase.cos()
        } else {
            1.0
        };
        self.ops_per_sec * ramp * period
    }

    /// Share (0..=1) of this component's ops that fall in the inclusive range `[start, end]`.
    /// Always 0 for the moving tail of a sequential append; see [`Component::point_at`].
    pub fn mass(&self, start: u64, end: u64) -> f64 {
        match &self.shape {
            Shape::Uniform => ((end - start) as f64 + 1.0) / KEY_SPACE,
            Shape::Zipf(cdf) => cdf.mass(start, end),
            Shape::HotRange { start: a, end: b } => {
                let lo = start.max(*a);
                let hi = end.min(*b);
                if lo > hi { 0.0 } else { ((hi - lo) as f64 + 1.0) / ((b - a) as f64 + 1.0) }
            }
            Shape::HotKey(k) => f64::from(u8::from(start <= *k && *k <= end)),
            Shape::Append { .. } => 0.0,
        }
    }

    /// The keys a localized shape (hot range, hot key) can load; `None` for shapes spread over
    /// the whole key space or moving.
    pub fn key_span(&self) -> Option<(u64, u64)> {
        match self.shape {
            Shape::HotRange { start, end } => Some((start, end)),
            Shape::HotKey(k) => Some((k, k)),
            _ => None,
        }
    }

    /// The key every op of a sequential append lands on at `t_secs`; `None` for static shapes.
    pub fn point_at(&self, t_secs: f64) -> Option<u64> {
        match self.shape {
            Shape::Append { start, keys_per_sec } => {
                let advanced = (t_secs - self.start_secs).max(0.0) * keys_per_sec;
                // Saturates at the top of the key space: the tail stops there.
                let advanced = if advanced >= KEY_SPACE { u64::MAX } else { advanced as u64 };
                Some(start.saturating_add(advanced))
            }
            _ => None,
        }
    }

    /// One key drawn from this component's ops inside `[start, end]` (the caller only asks
    /// where [`Component::mass`] or [`Component::point_at`] says it has some). A moving tail
    /// answers its point at `t_secs`.
    pub fn sample_in(&self, start: u64, end: u64, t_secs: f64, rng: &mut SplitMix64) -> u64 {
        let uniform = |lo: u64, hi: u64, rng: &mut SplitMix64| match (hi - lo).checked_add(1) {
            Some(width) => lo + rng.below(width),
            None => rng.next_u64(),
        };
        let key = match &self.shape {
            Shape::Uniform => uniform(start, end, rng),
            Shape::HotRange { start: a, end: b } => uniform(start.max(*a), end.min(*b), rng),
            Shape::HotKey(k) => *k,
            Shape::Zipf(cdf) => {
                let lo = cdf.share_below(start);
                let hi = lo + cdf.mass(start, end);
                let position = cdf.position_at(lo + (hi - lo) * rng.next_f64());
                if position >= KEY_SPACE { u64::MAX } else { position as u64 }
            }
            Shape::Append { .. } => self.point_at(t_secs).unwrap_or(start),
        };
        key.clamp(start, end)
    }

    /// A single key that concentrates this component's ops, for the sketch's top keys.
    pub fn hot_point(&self, t_secs: f64) -> Option<u64> {
        match self.shape {
            Shape::HotKey(k) => Some(k),
            Shape::Append { .. } => self.point_at(t_secs),
            _ => None,
        }
    }

    pub fn is_sequential(&self) -> bool {
        matches!(self.shape, Shape::Append { .. })
    }

    /// Whether demand over a partition changes with time only by the rate (cacheable mass).
    pub fn is_static(&self) -> bool {
        !self.is_sequential()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::WorkloadSpec;
    use lb_common::ids::Key;

    fn spec(kind: WorkloadKind) -> WorkloadSpec {
        WorkloadSpec {
            kind,
            ops_per_sec: 1000.0,
            read_ratio: 0.5,
            value_bytes: 100,
            start_secs: 0,
            ramp_secs: 0,
            end_secs: None,
            period_amplitude_ratio: 0.0,
            period_secs: 86_400,
            peak_at_secs: 0,
        }
    }

    const HALF: u64 = 1 << 63;

    #[test]
    fn uniform_spreads_by_width() {
        let c = Component::from_spec(0, &spec(WorkloadKind::Uniform {}), 1);
        assert!((c.mass(0, HALF - 1) - 0.5).abs() < 1e-12);
        assert!((c.mass(0, u64::MAX) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn hot_range_ramps_and_halves_at_its_median() {
        let mut s = spec(WorkloadKind::HotRange { start_key: Key(1000), end_key: Key(1999) });
        s.start_secs = 100;
        s.ramp_secs = 100;
        let c = Component::from_spec(0, &s, 1);
        assert_eq!(c.rate_at(50.0), 0.0);
        assert!((c.rate_at(150.0) - 500.0).abs() < 1e-9);
        assert!((c.rate_at(500.0) - 1000.0).abs() < 1e-9);
        assert!((c.mass(0, 1499) - 0.5).abs() < 1e-12);
        assert!((c.mass(1500, u64::MAX) - 0.5).abs() < 1e-12);
        assert_eq!(c.mass(2000, u64::MAX), 0.0);
    }

    #[test]
    fn a_hot_key_cannot_be_split_apart() {
        let s = spec(WorkloadKind::HotKey { key: Key(HALF) });
        let c = Component::from_spec(0, &s, 1);
        // Wherever a split falls, the key's whole load stays on one side.
        for split in [HALF - 1, HALF, HALF + 1] {
            let left = c.mass(0, split - 1);
            let right = c.mass(split, u64::MAX);
            assert!(left == 1.0 && right == 0.0 || left == 0.0 && right == 1.0, "split at {split}");
        }
    }

    #[test]
    fn sequential_append_tail_moves() {
        let s = spec(WorkloadKind::SequentialAppend { start_key: Key(HALF), keys_per_sec: 1e12 });
        let c = Component::from_spec(0, &s, 1);
        assert_eq!(c.point_at(0.0), Some(HALF));
        assert_eq!(c.point_at(10.0), Some(HALF + 10_000_000_000_000));
        assert_eq!(c.point_at(1e12), Some(u64::MAX));
        assert_eq!(c.mass(0, u64::MAX), 0.0);
    }

    #[test]
    fn daily_period_swings_around_the_mean() {
        let mut s = spec(WorkloadKind::Uniform {});
        s.period_amplitude_ratio = 0.5;
        s.peak_at_secs = 3600;
        let c = Component::from_spec(0, &s, 1);
        assert!((c.rate_at(3600.0) - 1500.0).abs() < 1e-6);
        assert!((c.rate_at(3600.0 + 43_200.0) - 500.0).abs() < 1e-6);
    }

    #[test]
    fn zipf_is_skewed_and_deterministic() {
        let s = spec(WorkloadKind::Zipf { exponent: 1.0, segments: 64 });
        let a = Component::from_spec(0, &s, 7);
        let b = Component::from_spec(0, &s, 7);
        let width = u64::MAX / 64;
        let masses: Vec<f64> = (0..64).map(|i| a.mass(i * width, i * width + width - 1)).collect();
        let again: Vec<f64> = (0..64).map(|i| b.mass(i * width, i * width + width - 1)).collect();
        assert_eq!(masses, again);
        let max = masses.iter().cloned().fold(0.0, f64::max);
        let min = masses.iter().cloned().fold(1.0, f64::min);
        assert!(max > 20.0 * min, "max {max} min {min}");
        assert!((a.mass(0, u64::MAX) - 1.0).abs() < 1e-9);
    }
}
