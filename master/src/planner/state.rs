//! What persists between passes: hysteresis counters, cooldowns and split children waiting to
//! be scattered. The caller keeps it and hands it back every pass; a fresh state is a cold start
//! (it only delays actions by the hysteresis windows).

use std::collections::HashMap;

use lb_common::ids::{Key, PartitionId, TableId, TenantId, WorkerId};
use lb_common::protocol::Trigger;
use serde::{Deserialize, Serialize};

use super::proposal::Policy;

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
    /// The end of the first window over engage of this episode (its onset): kept while
    /// engaged, cleared when the streak breaks before it engaged or when it is released.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_ms: Option<i64>,
    /// When it engaged (the hysteresis was met), while it stays engaged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engaged_ms: Option<i64>,
}

impl Hysteresis {
    /// One window ending at `at_ms`: `over` engage, `under` release. Returns whether it is
    /// engaged now.
    pub fn observe(&mut self, over: bool, under: bool, needed: u32, at_ms: i64) -> bool {
        if over {
            self.windows = self.windows.saturating_add(1);
            self.since_ms.get_or_insert(at_ms);
        } else {
            self.windows = 0;
        }
        if self.windows >= needed {
            if !self.engaged {
                self.engaged_ms = Some(at_ms);
            }
            self.engaged = true;
        } else if under {
            self.engaged = false;
        }
        if !self.engaged {
            self.engaged_ms = None;
            if self.windows == 0 {
                self.since_ms = None;
            }
        }
        self.engaged
    }

    /// Its onset and when it engaged.
    pub fn timing(&self) -> (Option<i64>, Option<i64>) {
        (self.since_ms, self.engaged_ms)
    }

    /// A proposal's trigger with what the hysteresis knows: how long, since when, detected when.
    pub fn trigger(&self) -> Trigger {
        Trigger {
            hot_windows: self.windows,
            onset_ms: self.since_ms,
            detected_ms: self.engaged_ms,
            ..Trigger::default()
        }
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
    /// The demand the split left on this side (the parent's, times the share right of the key):
    /// what the child carries before the master has measured it.
    #[serde(default)]
    pub expected_demand_ops: f64,
}

/// A split's new piece that exists now and waits to be moved off its parent's worker: tried
/// every pass until it is moved (or, in dry run, approved and moved), leaves the worker, or the
/// scatter window since its split closes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scatter {
    pub partition: PartitionId,
    pub child: PendingChild,
}

/// A split child's demand before the master has measured it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExpectedDemand {
    pub partition: PartitionId,
    pub demand_ops: f64,
    /// Epoch millis until which it is trusted over the measurement.
    pub until_ms: i64,
    /// Where the partition was in the last input: checked first, so a pass finds it without
    /// a scan of every partition while the layout holds.
    pub index: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PlannerState {
    /// Split children too young to be measured, and the demand their split left on them.
    #[serde(default)]
    pub expected_demand: Vec<ExpectedDemand>,
    /// Only partitions at or over the release threshold have an entry.
    pub partitions: HashMap<PartitionId, Hysteresis>,
    pub workers: HashMap<WorkerId, Hysteresis>,
    pub imbalance: Hysteresis,
    /// The zones' spread (`zones.cross = balance`), engaged like the imbalance policy.
    #[serde(default)]
    pub zone_imbalance: Hysteresis,
    /// Partition → epoch millis until which it must not be acted on.
    pub cooldown_until_ms: HashMap<PartitionId, i64>,
    pub pending_children: Vec<PendingChild>,
    #[serde(default)]
    pub scatter: Vec<Scatter>,
    /// Harmful verdicts per policy, from action evaluation: each active strike lengthens the
    /// policy's cooldowns ([`PlannerState::cooldown_factor`]).
    #[serde(default)]
    pub strikes: HashMap<Policy, Strikes>,
    /// Passes run, for tests and metrics.
    pub passes: u64,
}

/// Harmful verdicts of one policy that have not decayed yet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Strikes {
    pub count: u32,
    pub last_ms: i64,
}

impl PlannerState {
    pub fn in_cooldown(&self, id: &PartitionId, now_ms: i64) -> Option<i64> {
        self.cooldown_until_ms.get(id).copied().filter(|&until| until > now_ms)
    }

    /// Feedback of a harmful action: its targets (every partition now covering the range it
    /// acted on) rest for `until_ms`, and `policy` gets a strike.
    pub fn penalize<'a>(
        &mut self,
        targets: impl IntoIterator<Item = &'a PartitionId>,
        policy: Option<Policy>,
        until_ms: i64,
        now_ms: i64,
    ) {
        for id in targets {
            let until = self.cooldown_until_ms.entry(id.clone()).or_insert(until_ms);
            *until = (*until).max(until_ms);
        }
        if let Some(policy) = policy {
            let s = self.strikes.entry(policy).or_default();
            s.count = s.count.saturating_add(1);
            s.last_ms = now_ms;
        }
    }

    /// How many cooldowns long `policy`'s next cooldown is: 1 plus its strikes, at most `max`.
    /// Strikes expire `decay_ms` after the last one (a policy that stopped doing harm recovers).
    pub fn cooldown_factor(&mut self, policy: Policy, max: u32, decay_ms: i64, now_ms: i64) -> u32 {
        match self.strikes.get(&policy) {
            Some(s) if now_ms - s.last_ms < decay_ms => (1 + s.count).min(max.max(1)),
            Some(_) => {
                self.strikes.remove(&policy);
                1
            }
            None => 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engages_after_n_windows_and_releases_only_under_release() {
        let mut h = Hysteresis::default();
        assert!(!h.observe(true, false, 2, 1_000));
        assert_eq!(h.timing(), (Some(1_000), None), "the onset is the first hot window");
        assert!(h.observe(true, false, 2, 2_000));
        assert_eq!(h.timing(), (Some(1_000), Some(2_000)), "detected when the hysteresis is met");
        // Between release and engage: stays engaged, and the episode keeps its onset.
        assert!(h.observe(false, false, 2, 3_000));
        assert_eq!(h.timing(), (Some(1_000), Some(2_000)));
        assert!(!h.observe(false, true, 2, 4_000));
        assert_eq!(h.timing(), (None, None), "released: the episode is over");
        // One hot window after a cold one does not engage; a broken streak forgets its onset.
        assert!(!h.observe(true, false, 2, 5_000));
        assert!(!h.observe(false, false, 2, 6_000));
        assert_eq!(h.timing(), (None, None));
        assert!(!h.observe(true, false, 2, 7_000));
        assert!(h.observe(true, false, 2, 8_000));
        assert_eq!(h.timing(), (Some(7_000), Some(8_000)));
    }

    #[test]
    fn a_harmful_verdict_rests_the_target_and_lengthens_the_policy_cooldown_until_it_decays() {
        let mut s = PlannerState::default();
        let p: PartitionId = "t.x.p1".parse().expect("id");
        s.cooldown_until_ms.insert(p.clone(), 5_000);
        s.penalize([&p], Some(Policy::WorkerOverload), 120_000, 1_000);
        assert_eq!(s.in_cooldown(&p, 100_000), Some(120_000));
        assert_eq!(s.cooldown_factor(Policy::WorkerOverload, 4, 3_600_000, 2_000), 2);
        assert_eq!(s.cooldown_factor(Policy::Imbalance, 4, 3_600_000, 2_000), 1);
        for _ in 0..5 {
            s.penalize([], Some(Policy::WorkerOverload), 0, 3_000);
        }
        assert_eq!(s.cooldown_factor(Policy::WorkerOverload, 4, 3_600_000, 4_000), 4, "capped");
        assert_eq!(s.cooldown_factor(Policy::WorkerOverload, 4, 3_600_000, 3_603_000), 1, "decayed");
        assert!(s.strikes.is_empty());
    }
}
