//! Load-balancing strategy of a dataset: fingerprint (series stickiness) or round-robin (spread).
//!
//! Under `dynamic`, a dataset switches from fingerprint to round-robin only when **every** skew
//! condition holds: at least two shards, the shard count within 0.5–2× of the allocator target (no
//! relocation or rescale in progress), some shard at or above 2 units, and a relative standard
//! deviation of at least 0.5. The switch is sticky (see [`super::rules::Ruler`]).

use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::error::PlacementError;

/// Shard-count/target ratio above which a relocation or rescale is assumed in progress.
const MAX_SHARDS_TO_TARGET_RATIO: f64 = 2.0;
/// Shard-count/target ratio below which a rescale is assumed in progress.
const MIN_SHARDS_TO_TARGET_RATIO: f64 = 0.5;
/// A shard is overheated at this many units of load.
const OVERHEATED_UNITS: u64 = 2;
/// Relative standard deviation from which the load counts as skewed.
const MIN_SKEW_RSD: f64 = 0.5;

/// Configured load-balancing option (`fingerprint`, `round-robin`, `dynamic`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LoadBalancing {
    Fingerprint,
    RoundRobin,
    /// Fingerprint until the strategy decides round-robin (the reference default).
    #[default]
    Dynamic,
}

impl FromStr for LoadBalancing {
    type Err = PlacementError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fingerprint" => Ok(Self::Fingerprint),
            "round-robin" => Ok(Self::RoundRobin),
            "dynamic" => Ok(Self::Dynamic),
            other => Err(PlacementError::InvalidLoadBalancing(other.to_owned())),
        }
    }
}

/// Load-balancing mode carried by placement rules.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadBalancingMode {
    /// Not decided (behaves as fingerprint).
    #[default]
    Unspecified,
    Fingerprint,
    RoundRobin,
}

impl From<LoadBalancing> for LoadBalancingMode {
    fn from(lb: LoadBalancing) -> Self {
        match lb {
            LoadBalancing::Fingerprint => Self::Fingerprint,
            LoadBalancing::RoundRobin => Self::RoundRobin,
            LoadBalancing::Dynamic => Self::Unspecified,
        }
    }
}

/// `floor(sum / len)`, 0 for an empty slice.
pub fn mean_u64(values: &[u64]) -> u64 {
    if values.is_empty() {
        return 0;
    }
    let sum: u128 = values.iter().map(|&v| u128::from(v)).sum();
    (sum / values.len() as u128) as u64
}

/// Integer population standard deviation as the reference computes it: wrapping u64 squares of
/// `v - floor(mean)` (`(-x)² ≡ x² mod 2^64`, exact while the sum of squares fits a u64, i.e. for
/// deviations below ~4 GB/s), `floor(var / len)`, then `trunc(sqrt)`.
pub fn std_dev_u64(values: &[u64]) -> u64 {
    if values.is_empty() {
        return 0;
    }
    let m = mean_u64(values);
    let var = values.iter().fold(0u64, |acc, &v| {
        let d = v.wrapping_sub(m);
        acc.wrapping_add(d.wrapping_mul(d))
    });
    ((var / values.len() as u64) as f64).sqrt() as u64
}

/// The strategy for one dataset with per-shard `usage_bytes_per_sec`, its published `std_dev`,
/// the allocator's `target_shards` and the unit size. A zero unit is rejected.
pub fn load_balancing_strategy(
    usage_bytes_per_sec: &[u64],
    std_dev_bytes_per_sec: u64,
    unit_size_bytes_per_sec: u64,
    target_shards: u32,
) -> Result<LoadBalancingMode, PlacementError> {
    if unit_size_bytes_per_sec == 0 {
        return Err(PlacementError::ZeroUnitSize);
    }
    let fp = Ok(LoadBalancingMode::Fingerprint);
    if usage_bytes_per_sec.len() < 2 {
        return fp;
    }
    let ratio = usage_bytes_per_sec.len() as f64 / f64::from(target_shards);
    if !(MIN_SHARDS_TO_TARGET_RATIO..=MAX_SHARDS_TO_TARGET_RATIO).contains(&ratio) {
        return fp;
    }
    let hot = unit_size_bytes_per_sec.saturating_mul(OVERHEATED_UNITS);
    if !usage_bytes_per_sec.iter().any(|&u| u >= hot) {
        return fp;
    }
    let mean = mean_u64(usage_bytes_per_sec);
    // `mean > 0` here: some value is >= 2 units. The negated `<` keeps NaN on the round-robin side,
    // as in the reference.
    if (std_dev_bytes_per_sec as f64 / mean as f64) < MIN_SKEW_RSD {
        return fp;
    }
    Ok(LoadBalancingMode::RoundRobin)
}

#[cfg(test)]
mod tests {
    use super::*;
    use LoadBalancingMode::{Fingerprint as FP, RoundRobin as RR};

    const U: u64 = 512 * 1024;

    fn decide(usage: &[u64], target: u32) -> LoadBalancingMode {
        load_balancing_strategy(usage, std_dev_u64(usage), U, target).unwrap()
    }

    /// `Test_loadBalancingStrategy` (target = number of shards), with the std-dev/mean columns.
    #[test]
    fn strategy_vectors() {
        for usage in [vec![], vec![0], vec![U], vec![0; 5], vec![U; 5]] {
            assert_eq!(decide(&usage, usage.len() as u32), FP);
            assert_eq!(std_dev_u64(&usage), 0);
        }
        let rows: [([u64; 5], u64, u64, LoadBalancingMode); 7] = [
            ([2 * U, U, U, U, U], 209715, 629145, FP),
            ([2 * U, U / 2, U, U, U], 256847, 576716, FP),
            ([2 * U, U / 2, U / 2, U, U], 287164, 524288, RR),
            ([576716, 576716, 576716, 576716, 471860], 41942, 555744, FP),
            ([52429, 996147, 52429, 996147, 52429], 462325, 429916, FP),
            ([943719, 943719, 1153433, 1153433, 943719], 102738, 1027604, FP),
            ([1992294, 104858, 104858, 1992294, 104858], 924651, 859832, RR),
        ];
        for (usage, sd, mean, want) in rows {
            assert_eq!(std_dev_u64(&usage), sd, "{usage:?}");
            assert_eq!(mean_u64(&usage), mean, "{usage:?}");
            assert_eq!(decide(&usage, 5), want, "{usage:?}");
        }
    }

    /// `Test_loadBalancingStrategy_relocation`.
    #[test]
    fn relocation_vectors() {
        assert_eq!(decide(&[2 * U, 2 * U, U / 2, U / 2, U / 2], 5), RR);
        assert_eq!(decide(&[2 * U, 2 * U, U / 2, U / 2], 2), RR);
        assert_eq!(decide(&[2 * U, 2 * U, U / 2, U / 2, U / 2], 3), RR);
        assert_eq!(decide(&[2 * U, 2 * U, U / 2, U / 2, U / 2], 2), FP);
        assert_eq!(decide(&[U, U, U / 5, U / 5], 2), FP);
        assert_eq!(decide(&[2 * U - 1, 0], 1), FP);
    }

    #[test]
    fn zero_unit_rejected_and_parse() {
        assert_eq!(load_balancing_strategy(&[1, 2], 1, 0, 2), Err(PlacementError::ZeroUnitSize));
        assert_eq!("round-robin".parse::<LoadBalancing>(), Ok(LoadBalancing::RoundRobin));
        let err = "random".parse::<LoadBalancing>().unwrap_err().to_string();
        assert_eq!(err, "invalid load balancing option: random; valid options: fingerprint, round-robin, dynamic");
        assert_eq!(LoadBalancingMode::from(LoadBalancing::Dynamic), LoadBalancingMode::Unspecified);
    }

    #[test]
    fn std_dev_wrapping_is_exact() {
        // `0 - 5` wraps, its square does not lose anything.
        assert_eq!(std_dev_u64(&[0, 10]), 5);
        assert_eq!(std_dev_u64(&[10, 0, 10, 0]), 5);
    }
}
