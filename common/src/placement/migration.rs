//! Per-key migration between two ring versions.
//!
//! Each key gets a stable migration bucket in `0..1_000_000` from a seeded XXH3 hash that is
//! independent of the ring's CRC-32 (so the migrating keys are spread over the whole ring, not one
//! arc). A key uses the new ring iff its bucket is below the fraction (in parts per million):
//! raising the fraction only ever moves keys old → new, lowering it rolls exactly those back.

use std::net::SocketAddr;

use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::error::PlacementError;
use super::ring::Ring;

/// Parts per million: the whole key space.
pub const FRACTION_PPM_ALL: u32 = 1_000_000;

/// Seed of the migration-bucket hash; fixed so every router agrees which keys have moved.
pub const MIGRATION_SEED: u64 = 0x6d69_6772_6174_6521;

/// Stable migration bucket of `key` in `0..FRACTION_PPM_ALL`.
#[inline]
pub fn migration_bucket(key: &[u8]) -> u32 {
    let h = xxh3_64_with_seed(key, MIGRATION_SEED);
    ((u128::from(h) * u128::from(FRACTION_PPM_ALL)) >> 64) as u32
}

/// Whether `key` uses the new ring at `fraction_ppm`.
#[inline]
pub fn uses_new_ring(key: &[u8], fraction_ppm: u32) -> bool {
    migration_bucket(key) < fraction_ppm
}

/// Two ring versions and how far the ramp from `old` to `new` has advanced.
#[derive(Clone, Debug)]
pub struct RingMigration {
    old: Ring,
    new: Ring,
    fraction_ppm: u32,
}

impl RingMigration {
    /// Starts a migration at `fraction_ppm` (0 = everything on `old`).
    pub fn new(old: Ring, new: Ring, fraction_ppm: u32) -> Result<Self, PlacementError> {
        check_fraction(fraction_ppm)?;
        Ok(Self { old, new, fraction_ppm })
    }

    /// Current fraction of keys (ppm) on the new ring.
    pub fn fraction_ppm(&self) -> u32 {
        self.fraction_ppm
    }

    /// Advances (or rolls back, when lower) the ramp.
    pub fn set_fraction_ppm(&mut self, fraction_ppm: u32) -> Result<(), PlacementError> {
        check_fraction(fraction_ppm)?;
        self.fraction_ppm = fraction_ppm;
        Ok(())
    }

    /// The ring `key` uses now.
    #[inline]
    pub fn ring_for(&self, key: &[u8]) -> &Ring {
        if uses_new_ring(key, self.fraction_ppm) { &self.new } else { &self.old }
    }

    /// The node `key` uses now.
    #[inline]
    pub fn node(&self, key: &[u8]) -> Option<SocketAddr> {
        self.ring_for(key).node(key)
    }

    /// Ends the migration, keeping the new ring.
    pub fn finish(self) -> Ring {
        self.new
    }
}

fn check_fraction(fraction_ppm: u32) -> Result<(), PlacementError> {
    if fraction_ppm > FRACTION_PPM_ALL {
        return Err(PlacementError::InvalidFraction { fraction_ppm });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::ring::RingNode;
    use proptest::prelude::*;

    fn ring(n: u8) -> Ring {
        let nodes: Vec<RingNode> =
            (0..n).map(|i| RingNode { addr: SocketAddr::from(([10, 9, 0, i], 80)), weight: 1 }).collect();
        Ring::build(&nodes, 40).unwrap()
    }

    #[test]
    fn endpoints_and_measured_fraction() {
        let mut m = RingMigration::new(ring(4), ring(5), 0).unwrap();
        let old = ring(4);
        let new = ring(5);
        for k in 0..1000u32 {
            assert_eq!(m.node(&k.to_le_bytes()), old.node(&k.to_le_bytes()));
        }
        m.set_fraction_ppm(FRACTION_PPM_ALL).unwrap();
        for k in 0..1000u32 {
            assert_eq!(m.node(&k.to_le_bytes()), new.node(&k.to_le_bytes()));
        }
        assert!(m.set_fraction_ppm(FRACTION_PPM_ALL + 1).is_err());
        let on_new = (0..100_000u32).filter(|k| uses_new_ring(&k.to_le_bytes(), 250_000)).count();
        assert!((on_new as f64 / 100_000.0 - 0.25).abs() < 0.01, "{on_new}");
    }

    proptest! {
        /// Raising the fraction only moves keys old → new; lowering only new → old.
        #[test]
        fn fraction_is_monotone(key in proptest::collection::vec(any::<u8>(), 0..40), a in 0u32..=1_000_000, b in 0u32..=1_000_000) {
            let (lo, hi) = (a.min(b), a.max(b));
            prop_assert!(!uses_new_ring(&key, lo) || uses_new_ring(&key, hi));
            prop_assert!(!uses_new_ring(&key, 0));
            prop_assert!(uses_new_ring(&key, FRACTION_PPM_ALL));
        }
    }
}
