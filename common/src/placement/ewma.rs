//! Exponentially weighted moving average of a byte rate (bytes per second).
//!
//! Samples are summed into buckets of at least one second; each full bucket is folded with weight
//! `a = 1 - exp(-dt / tau)`. Time is an argument (epoch milliseconds).

use std::time::Duration;

/// Folds happen at most once per this many milliseconds (samples are summed meanwhile).
const MIN_FOLD_INTERVAL_SECS: f64 = 1.0;

/// An EWMA rate.
#[derive(Clone, Debug, PartialEq)]
pub struct EwmaRate {
    tau_secs: f64,
    last_ms: i64,
    cumulative: f64,
    ewma: f64,
}

fn fold(old: f64, rate: f64, dt_secs: f64, tau_secs: f64) -> f64 {
    let a = 1.0 - (-dt_secs / tau_secs).exp();
    a * rate + (1.0 - a) * old
}

impl EwmaRate {
    /// A rate whose weight halves every `half_life` (at least 1 s): `tau = h / ln 2`.
    pub fn with_half_life(half_life: Duration) -> Self {
        Self::with_tau(half_life.as_secs_f64().max(1.0) / std::f64::consts::LN_2)
    }

    /// A rate with mean lifetime `lifetime` (at least 1 s): `tau = lifetime`.
    pub fn with_lifetime(lifetime: Duration) -> Self {
        Self::with_tau(lifetime.as_secs_f64().max(1.0))
    }

    fn with_tau(tau_secs: f64) -> Self {
        Self { tau_secs, last_ms: 0, cumulative: 0.0, ewma: 0.0 }
    }

    /// Time constant in seconds.
    pub fn tau_secs(&self) -> f64 {
        self.tau_secs
    }

    /// Adds `value` (bytes) observed at `now_ms`; samples older than the last fold are ignored.
    pub fn update(&mut self, value: f64, now_ms: i64) {
        let dt_secs = (now_ms - self.last_ms) as f64 / 1000.0;
        if dt_secs < 0.0 {
            return;
        }
        if dt_secs >= MIN_FOLD_INTERVAL_SECS {
            self.ewma = fold(self.ewma, self.cumulative / dt_secs, dt_secs, self.tau_secs);
            self.cumulative = 0.0;
            self.last_ms = now_ms;
        }
        self.cumulative += value;
    }

    /// The rate at `now_ms` (bytes per second), folding pending samples read-only.
    pub fn value(&self, now_ms: i64) -> f64 {
        let dt_secs = (now_ms - self.last_ms) as f64 / 1000.0;
        if dt_secs < 0.0 {
            return 0.0;
        }
        if dt_secs >= MIN_FOLD_INTERVAL_SECS {
            return fold(self.ewma, self.cumulative / dt_secs, dt_secs, self.tau_secs);
        }
        self.ewma
    }

    /// The last folded value (without pending samples).
    pub fn folded(&self) -> f64 {
        self.ewma
    }

    /// Time of the last fold (not of the last sample).
    pub fn last_update_ms(&self) -> i64 {
        self.last_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * b.abs().max(1e-12)
    }

    #[test]
    fn reference_trace() {
        let mut r = EwmaRate::with_half_life(Duration::from_secs(10));
        assert!(close(r.tau_secs(), 14.4269504, 1e-8));
        let want = [0.0, 6.6967008463, 12.9449436704, 18.7747603644, 24.2141716745];
        for (t, w) in want.iter().enumerate() {
            r.update(100.0, t as i64 * 1000);
            assert!((r.folded() - w).abs() < 1e-9, "t={t}: {} vs {w}", r.folded());
            if t == 0 {
                assert!((r.value(2000) - 6.4724718352).abs() < 1e-9);
            }
        }
    }

    /// `Test_Rate_HalfLife`.
    #[test]
    fn half_life() {
        let mut r = EwmaRate::with_half_life(Duration::from_secs(10));
        let mut now = 0;
        for _ in 0..100 {
            r.update(10.0, now);
            now += 100;
        }
        assert!(close(r.value(now), 50.0, 1e-4), "{}", r.value(now));
        for _ in 0..400 {
            r.update(10.0, now);
            now += 100;
        }
        assert!(close(r.value(now), 96.65, 0.05), "{}", r.value(now));
        for _ in 0..500 {
            r.update(5.0, now);
            now += 100;
        }
        assert!(close(r.value(now), 50.0, 0.05), "{}", r.value(now));
        let mut r = EwmaRate::with_half_life(Duration::from_secs(10));
        for s in 0..120 {
            r.update(50.0, s * 1000);
        }
        assert!(close(r.value(120_000), 50.0, 0.005 * 1.0 + 0.01), "{}", r.value(120_000));
    }

    /// `Test_Rate_HalfLife_Tail`.
    #[test]
    fn tail() {
        let mut r = EwmaRate::with_half_life(Duration::from_secs(10));
        let mut now = 0;
        for _ in 0..600 {
            r.update(10.0, now);
            now += 100;
        }
        let v = r.value(now);
        assert!(r.value(now + 120_000) < 1.0);
        assert!(close(r.value(now + 10_000), v / 2.0, 0.05), "{} vs {}", r.value(now + 10_000), v / 2.0);
    }

    /// `Test_Rate_Lifetime`: a lifetime of 10 s / 3 approximates a 10 s simple moving average.
    #[test]
    fn lifetime() {
        let mut r = EwmaRate::with_lifetime(Duration::from_secs_f64(10.0 / 3.0));
        for s in 0..60 {
            r.update(100.0, s * 1000);
        }
        assert!(close(r.value(60_000), 100.0, 0.05), "{}", r.value(60_000));
    }
}
