//! Adaptive shard allocator: scale out fast, scale in slowly (per dataset).
//!
//! `observe(usage, now)` turns a byte rate into a shard count `usage / unit + 1`. Scale-out is
//! immediate; consecutive scale-outs inside the burst window are amplified by a multiplier that
//! doubles up to [`MAX_BURST_MULTIPLIER`] (never more than 2× the wanted count). Scale-in is delayed:
//! the result never drops below the largest count wanted in the previous and the current decay window.
//! Timestamps are epoch milliseconds; **0 means "unset"** (the reference vectors rely on it).

use std::time::Duration;

use super::error::PlacementError;

/// 128 KiB/s per shard: the reference product default unit.
pub const DEFAULT_UNIT_SIZE_BYTES_PER_SEC: u64 = 128 * 1024;
/// One shard per dataset unless load says otherwise.
pub const DEFAULT_MIN_DATASET_SHARDS: u32 = 1;
/// 1 << 10: caps one dataset's spread; the reference default.
pub const DEFAULT_MAX_DATASET_SHARDS: u32 = 1 << 10;
/// 17 min: scale-outs closer than this count as one burst (reference default).
pub const DEFAULT_BURST_WINDOW: Duration = Duration::from_secs(17 * 60);
/// 19 min: a peak holds the shard count for one to two of these windows (reference default).
pub const DEFAULT_DECAY_WINDOW: Duration = Duration::from_secs(19 * 60);
/// Largest burst amplification: 1, 2, 4, 8, 16.
pub const MAX_BURST_MULTIPLIER: f64 = 16.0;
/// The "unset" timestamp (epoch 0 is never a real observation time).
pub const UNSET_MS: i64 = 0;

/// Limits of one dataset's allocator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocatorLimits {
    /// Bytes per second one shard absorbs; must be at least 1.
    pub unit_size_bytes_per_sec: u64,
    pub min_shards: u32,
    pub max_shards: u32,
    pub burst_window: Duration,
    pub decay_window: Duration,
}

impl Default for AllocatorLimits {
    fn default() -> Self {
        Self {
            unit_size_bytes_per_sec: DEFAULT_UNIT_SIZE_BYTES_PER_SEC,
            min_shards: DEFAULT_MIN_DATASET_SHARDS,
            max_shards: DEFAULT_MAX_DATASET_SHARDS,
            burst_window: DEFAULT_BURST_WINDOW,
            decay_window: DEFAULT_DECAY_WINDOW,
        }
    }
}

impl AllocatorLimits {
    /// Rejects a zero unit (division by zero) and `min_shards > max_shards`.
    pub fn validate(&self) -> Result<(), PlacementError> {
        if self.unit_size_bytes_per_sec == 0 {
            return Err(PlacementError::ZeroUnitSize);
        }
        if self.min_shards > self.max_shards {
            return Err(PlacementError::InvalidShardBounds {
                min_shards: self.min_shards,
                max_shards: self.max_shards,
            });
        }
        Ok(())
    }
}

fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Allocator state of one dataset.
#[derive(Clone, Debug, PartialEq)]
pub struct ShardAllocator {
    limits: AllocatorLimits,
    target: u64,
    burst_offset_ms: i64,
    multiplier: f64,
    decay_offset_ms: i64,
    previous_min: u64,
    current_min: u64,
}

impl ShardAllocator {
    /// A fresh allocator (target 0, nothing observed).
    pub fn new(limits: AllocatorLimits) -> Result<Self, PlacementError> {
        limits.validate()?;
        Ok(Self {
            limits,
            target: 0,
            burst_offset_ms: UNSET_MS,
            multiplier: 0.0,
            decay_offset_ms: UNSET_MS,
            previous_min: 0,
            current_min: 0,
        })
    }

    /// An allocator restored from stored rules: `dataset_shards` is a floor for at least one decay
    /// window after `created_at_ms`, while scale-out stays possible.
    pub fn restored(limits: AllocatorLimits, created_at_ms: i64, dataset_shards: u32) -> Result<Self, PlacementError> {
        let mut a = Self::new(limits)?;
        a.decay_offset_ms = created_at_ms;
        a.current_min = u64::from(dataset_shards);
        Ok(a)
    }

    /// Replaces the limits (they are refreshed from configuration on every build).
    pub fn set_limits(&mut self, limits: AllocatorLimits) -> Result<(), PlacementError> {
        limits.validate()?;
        self.limits = limits;
        Ok(())
    }

    /// The last clamped output.
    pub fn target(&self) -> u32 {
        u32::try_from(self.target).expect("target clamped to max_shards")
    }

    /// Current burst multiplier (0 before the first scale-out).
    pub fn multiplier(&self) -> f64 {
        self.multiplier
    }

    /// `(previous_min, current_min)` of the decay windows.
    pub fn decay_mins(&self) -> (u64, u64) {
        (self.previous_min, self.current_min)
    }

    /// Feeds one usage observation (bytes per second) at `now_ms`; returns the new shard count.
    pub fn observe(&mut self, usage_bytes_per_sec: u64, now_ms: i64) -> u32 {
        let l = self.limits;
        let mut want = usage_bytes_per_sec / l.unit_size_bytes_per_sec + 1;
        if want > self.target {
            let delta = want - self.target;
            let burst_over = self.burst_offset_ms == UNSET_MS
                || now_ms.saturating_sub(self.burst_offset_ms) >= duration_ms(l.burst_window);
            if burst_over {
                self.multiplier = 1.0;
            } else {
                if self.multiplier < MAX_BURST_MULTIPLIER {
                    self.multiplier *= 2.0;
                }
                let amplified = (delta as f64 * self.multiplier).ceil() as u64;
                want = want.saturating_mul(2).min(want.saturating_add(amplified));
            }
            self.burst_offset_ms = now_ms;
        }
        if self.decay_offset_ms == UNSET_MS
            || now_ms.saturating_sub(self.decay_offset_ms) >= duration_ms(l.decay_window)
        {
            self.previous_min = self.current_min;
            self.current_min = want;
            self.decay_offset_ms = now_ms;
        }
        self.current_min = self.current_min.max(want);
        let floor = u64::from(l.min_shards).max(self.previous_min).max(self.current_min);
        self.target = floor.min(u64::from(l.max_shards));
        self.target()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn limits(unit: u64, min: u32, max: u32, burst_ms: u64, decay_ms: u64) -> AllocatorLimits {
        AllocatorLimits {
            unit_size_bytes_per_sec: unit,
            min_shards: min,
            max_shards: max,
            burst_window: Duration::from_millis(burst_ms),
            decay_window: Duration::from_millis(decay_ms),
        }
    }

    /// `Test_shard_allocator`.
    #[test]
    fn shard_allocator_vectors() {
        let mut a = ShardAllocator::new(limits(10, 1, 5, 50, 50)).unwrap();
        let rows = [
            (0, 0, 1),
            (0, 1, 1),
            (5, 2, 1),
            (10, 3, 2),
            (10, 4, 2),
            (11, 5, 2),
            (20, 6, 5),
            (10, 7, 5),
            (5, 8, 5),
            (5, 9, 5),
            (5, 51, 5),
            (5, 101, 1),
            (100, 151, 5),
        ];
        for (usage, now, want) in rows {
            assert_eq!(a.observe(usage, now), want, "usage {usage} now {now}");
        }
    }

    /// The extra trace with multiplier and decay-window state.
    #[test]
    fn extra_trace() {
        let mut a = ShardAllocator::new(limits(10, 1, 1000, 50, 50)).unwrap();
        type Row = (u64, i64, u32, Option<(f64, u64, u64)>);
        let rows: [Row; 15] = [
            (0, 0, 1, Some((1.0, 0, 1))),
            (10, 1, 2, Some((1.0, 1, 2))),
            (20, 2, 5, Some((2.0, 1, 5))),
            (30, 3, 5, None),
            (40, 4, 5, None),
            (50, 5, 10, Some((4.0, 1, 10))),
            (60, 6, 10, None),
            (70, 7, 10, None),
            (80, 8, 10, None),
            (200, 100, 21, Some((1.0, 10, 21))),
            (200, 160, 21, Some((1.0, 21, 21))),
            (0, 161, 21, None),
            (0, 200, 21, None),
            (0, 260, 21, Some((1.0, 21, 1))),
            (0, 320, 1, None),
        ];
        for (usage, now, want, state) in rows {
            assert_eq!(a.observe(usage, now), want, "usage {usage} now {now}");
            if let Some((m, p, c)) = state {
                assert_eq!((a.multiplier(), a.decay_mins()), (m, (p, c)), "now {now}");
            }
        }
    }

    /// `Test_shard_limit`: steadily growing usage never lowers the output.
    #[test]
    fn shard_limit_non_decreasing() {
        let unit = 128 * 1024;
        let mut a = ShardAllocator::new(limits(unit, 1, 10, 10_000, 50_000)).unwrap();
        let mut last = 0;
        for i in 0..100u64 {
            let t = a.observe(2 * unit * i, (i as i64) * 10_000);
            assert!(t >= last);
            last = t;
        }
        assert_eq!(last, 10);
    }

    #[test]
    fn rejects_zero_unit_and_bad_bounds() {
        assert_eq!(ShardAllocator::new(limits(0, 1, 5, 1, 1)).unwrap_err(), PlacementError::ZeroUnitSize);
        assert!(ShardAllocator::new(limits(1, 6, 5, 1, 1)).is_err());
    }

    proptest! {
        /// Output stays in `[min, max]`; scale-out is immediate; amplification at most doubles.
        #[test]
        fn bounded_and_immediate(obs in proptest::collection::vec((0u64..10_000, 1i64..1_000), 1..60)) {
            let mut a = ShardAllocator::new(limits(100, 2, 40, 5_000, 20_000)).unwrap();
            let mut now = 1_000;
            for (usage, dt) in obs {
                now += dt;
                let t = a.observe(usage, now);
                let want = (usage / 100 + 1).min(40) as u32;
                prop_assert!((2..=40).contains(&t));
                prop_assert!(t >= want);
            }
        }
    }
}
