//! What persists between passes: hysteresis counters, cooldowns and split children waiting to
//! be scattered. The caller keeps it and hands it back every pass; a fresh state is a cold start
//! (it only delays actions by the hysteresis windows).

use std::collections::HashMap;

use lb_common::ids::{Key, PartitionId, TableId, TenantId, WorkerId};
use serde::{Deserialize, Serialize};

/// Hysteresis of one subject (partition, worker or the cluster).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Hysteresis {
    /// Consecutive windows over the engage threshold (saturating).
    pub windows: u32,
    /// Over engage for enough windows; stays so until the load drops under release.
    pub engaged: bool,
    /// Demand at the previous pass and when, for the growth rate.
    pub last_demand: f64,
    pub last_ms: i64,
    /// Demand growth, ops/s per second, smoothed over passes (EWMA, half weight per pass) so
    /// one noisy window does not size a split.
    #[serde(default)]
    pub growth_per_sec: f64,
}

impl Hysteresis {
    /// One window: `over` engage, `under` release. Returns whether it is engaged now.
    pub fn observe(&mut self, over: bool, under: bool, needed: u32) -> bool {
        if over {
            self.windows = self.windows.saturating_add(1);
        } else {
            self.windows = 0;
        }
        if self.windows >= needed {
            self.engaged = true;
        } else if under {
            self.engaged = false;
        }
        self.engaged
    }
}

/// The right half of a split, to be placed on a cool worker once it exists.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingChild {
    pub tenant: TenantId,
    pub table: TableId,
    pub start: Key,
    pub parent: PartitionId,
    pub from_worker: WorkerId,
    pub parent_hot: Hysteresis,
    pub split_at_ms: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PlannerState {
    /// Only partitions at or over the release threshold have an entry.
    pub partitions: HashMap<PartitionId, Hysteresis>,
    pub workers: HashMap<WorkerId, Hysteresis>,
    pub imbalance: Hysteresis,
    /// Partition → epoch millis until which it must not be acted on.
    pub cooldown_until_ms: HashMap<PartitionId, i64>,
    pub pending_children: Vec<PendingChild>,
    /// Passes run, for tests and metrics.
    pub passes: u64,
}

impl PlannerState {
    pub fn in_cooldown(&self, id: &PartitionId, now_ms: i64) -> Option<i64> {
        self.cooldown_until_ms.get(id).copied().filter(|&until| until > now_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engages_after_n_windows_and_releases_only_under_release() {
        let mut h = Hysteresis::default();
        assert!(!h.observe(true, false, 2));
        assert!(h.observe(true, false, 2));
        // Between release and engage: stays engaged.
        assert!(h.observe(false, false, 2));
        assert!(!h.observe(false, true, 2));
        // One hot window after a cold one does not engage.
        assert!(!h.observe(true, false, 2));
    }
}
