//! What persists between passes: hysteresis counters, cooldowns and split children waiting to
//! be scattered. The caller keeps it and hands it back every pass; a fresh state is a cold start
//! (it only delays actions by the hysteresis windows).

use std::collections::HashMap;

use lb_common::ids::{Key, PartitionId, TableId, TenantId, WorkerId};
use lb_common::protocol::Trigger;
use serde::{Deserialize, Serialize};

use super::input::PlannerInput;
use super::model::Load;
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
    /// The end of the last window counted in `windows`, while the streak lasts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counted_ms: Option<i64>,
}

impl Hysteresis {
    /// One window ending at `at_ms`: `over` engage, `under` release. Returns whether it is
    /// engaged now. A window over engage that ends less than `min_gap_ms` after the last one
    /// counted keeps the streak without adding to it (a pass run early sees mostly the same
    /// seconds); one under engage breaks the streak whenever it comes.
    pub fn observe(&mut self, over: bool, under: bool, needed: u32, at_ms: i64, min_gap_ms: i64) -> bool {
        if over {
            if self.counted_ms.is_none_or(|counted| at_ms - counted >= min_gap_ms) {
                self.windows = self.windows.saturating_add(1);
                self.counted_ms = Some(at_ms);
            }
            self.since_ms.get_or_insert(at_ms);
        } else {
            self.windows = 0;
            self.counted_ms = None;
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
    /// The load the split placed this side for (its share of the demand projected through the
    /// parent's cooldown): held for it on its worker until measured past it
    /// ([`ExpectedDemand::load`]).
    #[serde(default)]
    pub planned_load: Load,
    /// Where a multi-way split sent it (worker position and id in the input it was planned
    /// on), its share of the parent's demand, and the parent's position: while the split is in
    /// flight, its worker holds `planned_load` for it.
    #[serde(default)]
    pub placed: Option<PlacedPiece>,
    /// A cold end a multi-way split left on its parent's worker on purpose (most of the bytes,
    /// little of the load): never scattered.
    #[serde(default)]
    pub stays: bool,
}

/// Where a multi-way split's piece goes ([`PendingChild::placed`]). Positions are checked
/// against the ids before use (the layout may have changed since).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlacedPiece {
    pub worker: WorkerId,
    pub worker_index: usize,
    pub parent_index: usize,
    pub share: f64,
}

/// A split's new piece that exists now and waits to be moved off its parent's worker: tried
/// every pass until it is moved (or, in dry run, approved and moved), leaves the worker, or the
/// scatter window since its split closes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scatter {
    pub partition: PartitionId,
    pub child: PendingChild,
}

/// A split piece's demand and load before the master has measured them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExpectedDemand {
    pub partition: PartitionId,
    pub demand_ops: f64,
    /// Epoch millis until which `demand_ops` is trusted over the measurement.
    pub until_ms: i64,
    /// The load its split placed on it, the growth through the cooldown included: a floor under
    /// the measured load (and its worker's) until `load_until_ms`, so that no other action takes
    /// the room the split's pieces were placed into while the measurement catches up with them.
    #[serde(default)]
    pub load: Load,
    #[serde(default)]
    pub load_until_ms: i64,
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
    pub partitions: PartitionHysteresis,
    pub workers: HashMap<WorkerId, Hysteresis>,
    /// Each worker's load ratio at the last passes, oldest first (as many as the imbalance
    /// policy's `hot_windows`): balancing leaves a worker alone while its load rises
    /// ([`super::Pass::heating`]).
    #[serde(default)]
    pub recent_ratios: HashMap<WorkerId, RecentRatios>,
    pub imbalance: Hysteresis,
    /// The zones' spread (`zones.cross = balance`), engaged like the imbalance policy.
    #[serde(default)]
    pub zone_imbalance: Hysteresis,
    /// Partition → epoch millis until which it must not be acted on.
    pub cooldown_until_ms: HashMap<PartitionId, i64>,
    /// The cooldowns in `cooldown_until_ms` that a move started (the same until): a move does
    /// not change a partition's demand against its own limit, so the partition's own overload
    /// may still split it (a ramping range a balancing move carried, found over its limit a few
    /// seconds later, would otherwise reject for the rest of the move's cooldown).
    #[serde(default)]
    pub moved_until_ms: HashMap<PartitionId, i64>,
    pub pending_children: Vec<PendingChild>,
    #[serde(default)]
    pub scatter: Vec<Scatter>,
    /// Harmful verdicts per policy, from action evaluation: each active strike lengthens the
    /// policy's cooldowns ([`PlannerState::cooldown_factor`]).
    #[serde(default)]
    pub strikes: HashMap<Policy, Strikes>,
    /// Passes run, for tests and metrics.
    pub passes: u64,
    /// What the planner derives from the input's layout, kept while the layout holds.
    #[serde(skip)]
    pub(crate) layout: LayoutCache,
}

/// A worker's load ratio at its last passes, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RecentRatios {
    pub ratios: std::collections::VecDeque<f64>,
    /// The pass that last recorded one, to forget workers that left the topology.
    pub pass: u64,
}

/// Per partition position in the input, each partition's owner (its position among the
/// workers, `u32::MAX` for a worker the input does not have), derived once per layout
/// ([`PlannerInput::layout`]) instead of hashing every owner's id every pass. A cache: two
/// states never differ by it.
#[derive(Debug, Clone, Default)]
pub(crate) struct LayoutCache {
    layout: Option<u64>,
    owners: Vec<u32>,
    /// Positions by id, built when first asked for in a layout.
    ids: Option<super::IdIndex>,
}

impl PartialEq for LayoutCache {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl LayoutCache {
    /// Each partition's owner's position in `input`, and the partitions' positions by id when
    /// `ids`.
    pub(crate) fn owners_and_ids(&mut self, input: &PlannerInput, ids: bool) -> (&[u32], Option<&super::IdIndex>) {
        if input.layout.is_none() || self.layout != input.layout || self.owners.len() != input.partitions.len() {
            self.owners = super::model::owner_positions(input);
            self.ids = None;
            self.layout = input.layout;
        }
        debug_assert!(
            self.owners == super::model::owner_positions(input),
            "an input kept its layout id while its owners changed"
        );
        if ids && self.ids.is_none() {
            self.ids = Some(super::IdIndex::of(&input.partitions));
        }
        (&self.owners, if ids { self.ids.as_ref() } else { None })
    }
}

/// The hysteresis of the partitions at or over the release threshold. Entries are reached by
/// the partition's position in the input: bound to a layout ([`PartitionHysteresis::bind`]),
/// a pass finds a partition's entry with no id hashed or compared (at 100k partitions, tens of
/// thousands of warm ones, that lookup was a quarter of a pass). Serialized as a map by id.
#[derive(Debug, Clone, Default)]
pub struct PartitionHysteresis {
    entries: Vec<HysteresisEntry>,
    /// Per input position: the index of its entry, or [`NO_ENTRY`]; valid for layout `bound`.
    at: Vec<u32>,
    bound: Option<u64>,
}

#[derive(Debug, Clone)]
struct HysteresisEntry {
    id: PartitionId,
    /// Its position in the bound input ([`NO_ENTRY`] when the input does not have it).
    pos: u32,
    h: Hysteresis,
}

const NO_ENTRY: u32 = u32::MAX;

impl PartitionHysteresis {
    /// Binds the entries to `input`'s positions: nothing to do while its layout is the one
    /// bound; otherwise each of its partitions is looked up by id once.
    pub(crate) fn bind(&mut self, input: &PlannerInput) {
        let n = input.partitions.len();
        if input.layout.is_some() && self.bound == input.layout && self.at.len() == n {
            debug_assert!(
                self.entries.iter().all(|e| e.pos == NO_ENTRY || input.partitions[e.pos as usize].id == e.id),
                "an input kept its layout id while its partitions changed"
            );
            return;
        }
        self.bound = input.layout;
        self.at.clear();
        self.at.resize(n, NO_ENTRY);
        for e in &mut self.entries {
            e.pos = NO_ENTRY;
        }
        if self.entries.is_empty() {
            return;
        }
        let by_id: HashMap<&PartitionId, u32> =
            self.entries.iter().enumerate().map(|(k, e)| (&e.id, k as u32)).collect();
        for (i, p) in input.partitions.iter().enumerate() {
            if let Some(&k) = by_id.get(&p.id) {
                self.at[i] = k;
            }
        }
        for (i, &k) in self.at.iter().enumerate() {
            if k != NO_ENTRY {
                self.entries[k as usize].pos = i as u32;
            }
        }
    }

    /// The entry of the partition at position `i` of the bound input, created when it has none.
    /// An index whose entry is not at `i` (the topology listed one id twice) counts as none.
    pub(crate) fn at_mut(&mut self, i: usize, id: &PartitionId) -> &mut Hysteresis {
        let mut k = self.at[i];
        if self.entries.get(k as usize).is_none_or(|e| e.pos != i as u32) {
            k = self.entries.len() as u32;
            self.entries.push(HysteresisEntry { id: id.clone(), pos: i as u32, h: Hysteresis::default() });
            self.at[i] = k;
        }
        &mut self.entries[k as usize].h
    }

    /// Keeps the entries `keep` says yes to.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&Hysteresis) -> bool) {
        let mut k = 0;
        while k < self.entries.len() {
            if keep(&self.entries[k].h) {
                k += 1;
                continue;
            }
            let gone = self.entries.swap_remove(k);
            if let Some(slot) = self.at.get_mut(gone.pos as usize) {
                *slot = NO_ENTRY;
            }
            if let Some(moved) = self.entries.get(k)
                && let Some(slot) = self.at.get_mut(moved.pos as usize)
            {
                *slot = k as u32;
            }
        }
    }

    pub fn get(&self, id: &PartitionId) -> Option<&Hysteresis> {
        self.entries.iter().find(|e| &e.id == id).map(|e| &e.h)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&PartitionId, &Hysteresis)> {
        self.entries.iter().map(|e| (&e.id, &e.h))
    }
}

impl PartialEq for PartitionHysteresis {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().all(|(id, h)| other.get(id) == Some(h))
    }
}

impl Serialize for PartitionHysteresis {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.iter())
    }
}

impl<'de> Deserialize<'de> for PartitionHysteresis {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let map = HashMap::<PartitionId, Hysteresis>::deserialize(d)?;
        let entries = map.into_iter().map(|(id, h)| HysteresisEntry { id, pos: NO_ENTRY, h }).collect();
        Ok(Self { entries, at: Vec::new(), bound: None })
    }
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

    /// Whether `id`'s cooldown, if any, is only the one a move started.
    pub fn cooling_from_a_move_only(&self, id: &PartitionId, now_ms: i64) -> bool {
        self.in_cooldown(id, now_ms).is_some_and(|until| self.moved_until_ms.get(id) == Some(&until))
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
            self.moved_until_ms.remove(id);
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
        assert!(!h.observe(true, false, 2, 1_000, 0));
        assert_eq!(h.timing(), (Some(1_000), None), "the onset is the first hot window");
        assert!(h.observe(true, false, 2, 2_000, 0));
        assert_eq!(h.timing(), (Some(1_000), Some(2_000)), "detected when the hysteresis is met");
        // Between release and engage: stays engaged, and the episode keeps its onset.
        assert!(h.observe(false, false, 2, 3_000, 0));
        assert_eq!(h.timing(), (Some(1_000), Some(2_000)));
        assert!(!h.observe(false, true, 2, 4_000, 0));
        assert_eq!(h.timing(), (None, None), "released: the episode is over");
        // One hot window after a cold one does not engage; a broken streak forgets its onset.
        assert!(!h.observe(true, false, 2, 5_000, 0));
        assert!(!h.observe(false, false, 2, 6_000, 0));
        assert_eq!(h.timing(), (None, None));
        assert!(!h.observe(true, false, 2, 7_000, 0));
        assert!(h.observe(true, false, 2, 8_000, 0));
        assert_eq!(h.timing(), (Some(7_000), Some(8_000)));
    }

    #[test]
    fn a_window_too_soon_after_the_last_counted_keeps_the_streak_without_adding_to_it() {
        // Passes a second apart, with a gap of 750 ms: one run early (at 1.3 s, an action
        // ended) sees mostly the same seconds and does not count, so engaging still takes two
        // windows a pass apart.
        let mut h = Hysteresis::default();
        assert!(!h.observe(true, false, 2, 1_000, 750));
        assert!(!h.observe(true, false, 2, 1_300, 750), "too soon to count");
        assert_eq!(h.windows, 1);
        assert!(h.observe(true, false, 2, 2_300, 750), "a pass interval after the one counted");
        assert_eq!(h.timing(), (Some(1_000), Some(2_300)));
        // A cold window breaks the streak however soon it comes.
        let mut h = Hysteresis::default();
        assert!(!h.observe(true, false, 2, 1_000, 750));
        assert!(!h.observe(false, false, 2, 1_200, 750));
        assert!(!h.observe(true, false, 2, 2_000, 750));
        assert!(h.observe(true, false, 2, 3_000, 750));
        assert_eq!(h.timing(), (Some(2_000), Some(3_000)));
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
