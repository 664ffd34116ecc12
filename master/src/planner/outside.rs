//! Actions decided outside the planner's pass — the offline analyzer's merges and pre-splits,
//! the move back of a harmful move — checked as the planner checks its own, on the same model
//! (in-flight actions counted where they land):
//! - **the caps**: one more action on the cluster (`max_inflight_cluster`) and on each worker it
//!   touches (`max_inflight_per_worker`) must fit, and one more in the pass
//!   (`max_actions_per_pass`, shared with what the planner proposed in the same pass);
//! - **where it puts load**: an offline merge lands the merged partition on the worker it
//!   names (one of the two owners; the left's without one), so the other side's load lands
//!   there; a move back lands on the source; a reshard spreads its
//!   dataset's demand over the new subring's owners
//!   ([`crate::placement_manager::reshard_shift`], read with [`OutsideCheck::with_datasets`]). A
//!   place may take load
//!   that leaves it at or under the high watermark, or, as the lesser evil, under capacity and
//!   cooler than the source stays (the planner's own rule for its moves).
//!
//! What the planner proposed earlier in the same pass is not in flight yet, but it will be:
//! [`OutsideCheck::after`] counts it first, where it lands and in the caps, so an offline merge
//! cannot land on the worker a planner move of the same pass just filled: a move on its
//! destination, a multi-way split's pieces on theirs, an isolation on the worker the group's
//! placement picks, a dedication's other partitions on the receivers the storage fills.
//!
//! Manual actions are an operator's explicit choice and are not refused here.

use std::collections::HashMap;

use lb_common::ids::{GroupId, PartitionId, WorkerId};
use lb_common::protocol::{ActionSpec, DatasetInfo, GroupTarget};

use super::input::PlannerInput;
use super::model::{Load, Model, Streams, dedication_target, group_placement, partitions_of, piece_load, piece_shares};
use super::{DeclineReason, PlannerConfig};
use crate::placement_manager::{DatasetShardUsage, reshard_shift};

/// Where an action puts load on the check's view.
enum Effect {
    /// Partition `moved`'s load lands on worker `to` (`what` says how, for the decline).
    Lands { moved: usize, to: usize, what: &'static str },
    /// Load leaves partition `p`'s worker in parts: a multi-way split's pieces, or the other
    /// partitions of a worker dedicated to `p`.
    Spreads { p: usize, how: Spread },
    /// It stays on its worker (a split in two, a group it is already in).
    InPlace(usize),
    /// A reshard: per worker, the load it gains (positive) or sheds (negative).
    Shifts { what: String, shift: Vec<(usize, Load)> },
    /// A target this view does not know.
    Unknown,
}

enum Spread {
    /// Piece `i + 1` (`shares[i + 1]` of the demand) goes to `dests[i]`; the first stays, or
    /// goes to `first`.
    Pieces { shares: Vec<f64>, dests: Vec<usize>, first: Option<usize> },
    /// `(partition, receiver)`: where the storage sends the worker's other partitions.
    Dedication { moves: Vec<(usize, usize)>, group: GroupId },
}

/// Why a merge lands where [`OutsideCheck::merge_landing`] puts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergeLanding {
    /// The other owner is not healthy.
    Healthy,
    /// The busier of the two owners ends cooler by `min_gain` or more there.
    Cooler,
    /// Either way the pair ends within `min_gain`: the side with fewer bytes streams.
    FewerBytes,
}

/// Checks actions one after another against the pass's view; each admitted one counts (in the
/// caps, and where it lands) for the next.
#[derive(Debug)]
pub struct OutsideCheck<'a> {
    input: &'a PlannerInput,
    model: Model,
    high: f64,
    max_inflight_cluster: u32,
    max_inflight_per_worker: u32,
    max_actions_per_pass: u32,
    /// Actions of this pass so far: counted earlier ones and admitted ones.
    proposed: u32,
    /// `zones.cross` lets load leave its zone.
    cross_zones: bool,
    partitions: HashMap<&'a PartitionId, usize>,
    workers: HashMap<&'a WorkerId, usize>,
    /// The topology's datasets and their measured shards, for reshards.
    datasets: &'a [DatasetInfo],
    dataset_usage: &'a [DatasetShardUsage],
}

impl<'a> OutsideCheck<'a> {
    pub fn new(input: &'a PlannerInput, config: &PlannerConfig, now_ms: i64) -> Self {
        Self {
            input,
            model: Model::build(input, Streams::new(&config.caps, input.move_rate_limit), now_ms),
            high: config.worker_overload.high_watermark_ratio,
            max_inflight_cluster: config.caps.inflight_cluster(input.workers.len()),
            max_inflight_per_worker: config.caps.max_inflight_per_worker,
            max_actions_per_pass: config.caps.actions_per_pass(input.workers.len()),
            proposed: 0,
            cross_zones: config.zones.cross != super::CrossZone::Never,
            partitions: input.partitions.iter().enumerate().map(|(i, p)| (&p.id, i)).collect(),
            workers: input.workers.iter().enumerate().map(|(i, w)| (&w.id, i)).collect(),
            datasets: &[],
            dataset_usage: &[],
        }
    }

    /// Where a merge of `left` and `right`, on two different workers, should land on this view
    /// (this pass's earlier actions counted): on the owner after which the busier of the two
    /// is cooler, when that is by `min_gain` or more; else on the owner that streams fewer bytes
    /// (the other side's), since either leaves the pair as balanced. A healthy owner before one
    /// that is not. `None` when either is unknown to this view or both are on one worker.
    pub fn merge_landing(
        &self,
        left: &PartitionId,
        right: &PartitionId,
        min_gain: f64,
    ) -> Option<(&'a WorkerId, MergeLanding)> {
        let (&l, &r) = (self.partitions.get(left)?, self.partitions.get(right)?);
        let m = &self.model;
        let (lw, rw) = (m.owner[l] as usize, m.owner[r] as usize);
        if lw == rw {
            return None;
        }
        let on_left = m.ratio_with(lw, r, 1.0).max(m.ratio_with(rw, r, -1.0));
        let on_right = m.ratio_with(rw, l, 1.0).max(m.ratio_with(lw, l, -1.0));
        let bytes = |p: usize| self.input.partitions[p].stored_bytes;
        let (w, why) = match (m.healthy[lw], m.healthy[rw]) {
            (true, false) => (lw, MergeLanding::Healthy),
            (false, true) => (rw, MergeLanding::Healthy),
            _ if on_right <= on_left - min_gain => (rw, MergeLanding::Cooler),
            _ if on_left <= on_right - min_gain => (lw, MergeLanding::Cooler),
            _ if bytes(l) < bytes(r) => (rw, MergeLanding::FewerBytes),
            _ => (lw, MergeLanding::FewerBytes),
        };
        Some((&self.input.workers[w].id, why))
    }

    /// Reads reshards against `datasets` (the topology's) and `usage` (their shards' measured
    /// load); without them a reshard answers only to the caps. Before [`OutsideCheck::after`],
    /// so that an earlier reshard counts where it lands.
    pub fn with_datasets(mut self, datasets: &'a [DatasetInfo], usage: &'a [DatasetShardUsage]) -> Self {
        self.datasets = datasets;
        self.dataset_usage = usage;
        self
    }

    /// Counts `earlier` (the actions the planner proposed earlier in the same pass) as admitted,
    /// unchecked: where they land and in the caps.
    pub fn after(mut self, earlier: &[ActionSpec]) -> Self {
        for spec in earlier {
            match self.effect(spec) {
                Effect::Lands { moved, to, .. } => {
                    let from = self.model.owner[moved] as usize;
                    if from == to {
                        self.count_in_place(moved, from);
                    } else {
                        self.model.apply_move(moved, to);
                    }
                }
                Effect::Spreads { p, how } => self.apply_spread(p, how),
                Effect::InPlace(p) => self.count_in_place(p, self.model.owner[p] as usize),
                Effect::Shifts { shift, .. } => self.apply_shift(&shift),
                Effect::Unknown => {}
            }
            self.proposed += 1;
        }
        self
    }

    /// Where `spec` puts load, on this view.
    fn effect(&self, spec: &ActionSpec) -> Effect {
        match spec {
            ActionSpec::Merge { left, right, to_worker } => {
                match (self.partitions.get(left), self.partitions.get(right)) {
                    // The side not on the destination streams there.
                    (Some(&l), Some(&r)) => match to_worker.as_ref().map(|w| self.workers.get(w)) {
                        None => Effect::Lands {
                            moved: r,
                            to: self.model.owner[l] as usize,
                            what: "the merged partition stays on",
                        },
                        Some(Some(&w)) if w == self.model.owner[r] as usize => {
                            Effect::Lands { moved: l, to: w, what: "the merged partition lands on" }
                        }
                        Some(Some(&w)) if w == self.model.owner[l] as usize => {
                            Effect::Lands { moved: r, to: w, what: "the merged partition lands on" }
                        }
                        // Owning neither side, it is refused by the storage: no load goes anywhere.
                        Some(_) => Effect::Unknown,
                    },
                    _ => Effect::Unknown,
                }
            }
            ActionSpec::Move { partition, to_worker, .. } => {
                match (self.partitions.get(partition), self.workers.get(to_worker)) {
                    (Some(&p), Some(&w)) => Effect::Lands { moved: p, to: w, what: "the move lands on" },
                    _ => Effect::Unknown,
                }
            }
            ActionSpec::SplitInto { partition, split_keys, to_workers, first_to_worker, .. } => {
                let Some(&p) = self.partitions.get(partition) else { return Effect::Unknown };
                let dests: Option<Vec<usize>> = to_workers.iter().map(|w| self.workers.get(w).copied()).collect();
                let first = first_to_worker.as_ref().map(|w| self.workers.get(w).copied());
                match (dests, first) {
                    (_, Some(None)) => Effect::Unknown,
                    (Some(dests), first) if dests.len() == split_keys.len() => {
                        let info = &self.input.partitions[p];
                        let shares = piece_shares(info.range, info.stats.sketch.as_ref(), split_keys);
                        Effect::Spreads { p, how: Spread::Pieces { shares, dests, first: first.flatten() } }
                    }
                    _ => Effect::InPlace(p),
                }
            }
            ActionSpec::Group { target: GroupTarget::Partition { partition }, group } => {
                let Some(&p) = self.partitions.get(partition) else { return Effect::Unknown };
                let owner = self.model.owner[p] as usize;
                if dedication_target(spec, self.input).is_some() {
                    // Shared: in no group, and not being dedicated.
                    let receivers = self.model.dedication_receivers(owner, |r| {
                        self.input.workers[r].group.is_none() && !self.model.dedicating.iter().any(|&(w, _)| w == r)
                    });
                    let moves = self.model.dedication_moves(p, &receivers);
                    return Effect::Spreads { p, how: Spread::Dedication { moves, group: group.clone() } };
                }
                match group_placement(self.input, group, &self.model.held, owner) {
                    Some(to) => Effect::Lands { moved: p, to: to as usize, what: "the group's placement puts it on" },
                    None => Effect::InPlace(p),
                }
            }
            ActionSpec::Reshard { tenant, dataset, .. } => {
                let Some(shift) = reshard_shift(spec, self.datasets, self.dataset_usage) else {
                    return Effect::Unknown;
                };
                // A worker this view does not know carries nothing the check can weigh.
                let shift = shift
                    .into_iter()
                    .filter_map(|(w, ops, bytes)| Some((*self.workers.get(&w)?, Load { ops, bytes, cpu: 0.0 })))
                    .collect();
                Effect::Shifts { what: format!("the reshard of {tenant}/{dataset} spreads"), shift }
            }
            other => match partitions_of(other).first().and_then(|id| self.partitions.get(id)) {
                Some(&p) => Effect::InPlace(p),
                None => Effect::Unknown,
            },
        }
    }

    fn count_in_place(&mut self, p: usize, owner: usize) {
        self.model.count_in_place(p, owner);
    }

    /// The load `how` takes off `p`'s worker, summed per worker it lands on.
    fn arrivals(&self, p: usize, how: &Spread) -> Vec<(usize, Load)> {
        let owner = self.model.owner[p] as usize;
        let mut out: Vec<(usize, Load)> = Vec::new();
        let mut land = |to: usize, l: Load| match out.iter_mut().find(|(w, _)| *w == to) {
            Some((_, sum)) => sum.add(l, 1.0),
            None => out.push((to, l)),
        };
        match how {
            Spread::Pieces { shares, dests, first } => {
                let info = &self.input.partitions[p];
                let pieces = std::iter::once((&shares[0], first.unwrap_or(owner)))
                    .chain(shares[1..].iter().zip(dests.iter().copied()));
                for (&share, to) in pieces.filter(|&(_, to)| to != owner) {
                    land(to, piece_load(info, self.model.load[p], self.model.demand_ops[p], share));
                }
            }
            Spread::Dedication { moves, .. } => moves.iter().for_each(|&(q, to)| land(to, self.model.load[q])),
        }
        out
    }

    fn apply_shift(&mut self, shift: &[(usize, Load)]) {
        self.model.cluster_actions += 1;
        for &(w, l) in shift {
            self.model.shift_worker_load(w, l);
        }
    }

    fn apply_spread(&mut self, p: usize, how: Spread) {
        match how {
            Spread::Pieces { shares, dests, first } => {
                self.model.apply_split_into(self.input, p, &shares, &dests, first)
            }
            Spread::Dedication { moves, group } => {
                self.model.dedicating.push((self.model.owner[p] as usize, group));
                self.model.apply_dedication(p, &moves);
            }
        }
    }

    /// `Ok` (and the action counted), or why not, with the reason a decline is counted under.
    /// Kinds that put no load on another worker only answer to the caps; targets this view does
    /// not know pass (the submission's own validation refuses those).
    pub fn admit(&mut self, spec: &ActionSpec) -> Result<(), (DeclineReason, String)> {
        let admitted = self.check_and_apply(spec);
        if admitted.is_ok() {
            self.proposed += 1;
        }
        admitted
    }

    fn check_and_apply(&mut self, spec: &ActionSpec) -> Result<(), (DeclineReason, String)> {
        let (moved, to, what) = match self.effect(spec) {
            Effect::Lands { moved, to, what } => (moved, to, what),
            Effect::Spreads { p, how } => {
                let from = self.model.owner[p] as usize;
                let arrivals = self.arrivals(p, &how);
                let touched: Vec<usize> = std::iter::once(from).chain(arrivals.iter().map(|&(w, _)| w)).collect();
                self.caps_allow(&touched)?;
                let source_before = self.model.worker_ratio(from);
                for &(to, load) in &arrivals {
                    let after = self.model.ratio_plus(to, load);
                    if !self.may_take(after, source_before) {
                        let what = match how {
                            Spread::Pieces { .. } => "a piece of the split lands on",
                            Spread::Dedication { .. } => "the dedication sends partitions of its worker to",
                        };
                        return Err((
                            DeclineReason::DestinationOverloaded,
                            format!(
                                "destination overloaded: {what} {}, which would carry {after:.2} of its capacity with {:.0} ops/s more, over the high watermark {:.2} (the source is at {source_before:.2})",
                                self.input.workers[to].id, load.ops, self.high,
                            ),
                        ));
                    }
                }
                self.apply_spread(p, how);
                return Ok(());
            }
            Effect::InPlace(p) => {
                let owner = self.model.owner[p] as usize;
                self.caps_allow(&[owner])?;
                self.count_in_place(p, owner);
                return Ok(());
            }
            Effect::Shifts { what, shift } => {
                self.caps_allow(&[])?;
                // The source: the busiest worker the dataset leaves.
                let source_before = shift
                    .iter()
                    .filter(|(_, l)| l.ops < 0.0)
                    .map(|&(w, _)| self.model.worker_ratio(w))
                    .fold(0.0, f64::max);
                for &(to, load) in shift.iter().filter(|(_, l)| l.ops > 0.0 || l.bytes > 0.0) {
                    let after = self.model.ratio_plus(to, load);
                    if !self.may_take(after, source_before) {
                        return Err((
                            DeclineReason::DestinationOverloaded,
                            format!(
                                "destination overloaded: {what} {:.0} ops/s more onto {}, which would carry {after:.2} of its capacity, over the high watermark {:.2} (the busiest worker it leaves is at {source_before:.2})",
                                load.ops, self.input.workers[to].id, self.high,
                            ),
                        ));
                    }
                }
                self.apply_shift(&shift);
                return Ok(());
            }
            Effect::Unknown => return Ok(()),
        };
        let from = self.model.owner[moved] as usize;
        self.caps_allow(&[from, to])?;
        if from == to {
            self.count_in_place(moved, from);
            return Ok(());
        }
        let zone = |w: usize| self.input.workers[w].zone.as_ref();
        if matches!(spec, ActionSpec::Merge { .. })
            && !self.cross_zones
            && zone(from).is_some()
            && zone(to).is_some()
            && zone(from) != zone(to)
        {
            return Err((
                DeclineReason::CrossZone,
                format!(
                    "the merge would carry {} from zone {} to {} in zone {} (zones.cross = never)",
                    self.input.partitions[moved].id,
                    zone(from).map_or("-", |z| z.as_str()),
                    self.input.workers[to].id,
                    zone(to).map_or("-", |z| z.as_str()),
                ),
            ));
        }
        let (source_before, after) = (self.model.worker_ratio(from), self.model.ratio_with(to, moved, 1.0));
        if self.may_take(after, source_before) {
            self.model.apply_move(moved, to);
            return Ok(());
        }
        Err((
            DeclineReason::DestinationOverloaded,
            format!(
                "destination overloaded: {what} {}, which would carry {after:.2} of its capacity with {} ({:.0} ops/s) on it, over the high watermark {:.2} (the source is at {source_before:.2})",
                self.input.workers[to].id, self.input.partitions[moved].id, self.model.demand_ops[moved], self.high,
            ),
        ))
    }

    /// The destination rule: a place may end at `after` of its capacity if that is at or under
    /// the high watermark, or, as the lesser evil, under capacity and cooler than the source
    /// (`source_before`) was.
    fn may_take(&self, after: f64, source_before: f64) -> bool {
        after <= self.high || (after <= 1.0 && after < source_before)
    }

    fn caps_allow(&self, workers: &[usize]) -> Result<(), (DeclineReason, String)> {
        if self.proposed >= self.max_actions_per_pass {
            return Err((
                DeclineReason::Cap,
                format!(
                    "cap: max_actions_per_pass ({} for {} workers) reached, the planner's proposals of this pass included",
                    self.max_actions_per_pass,
                    self.input.workers.len()
                ),
            ));
        }
        if self.model.cluster_actions >= self.max_inflight_cluster {
            return Err((
                DeclineReason::Cap,
                format!(
                    "cap: max_inflight_cluster ({} for {} workers) reached",
                    self.max_inflight_cluster,
                    self.input.workers.len()
                ),
            ));
        }
        match workers.iter().find(|&&w| self.model.worker_actions[w] >= self.max_inflight_per_worker) {
            Some(&w) => Err((
                DeclineReason::Cap,
                format!(
                    "cap: worker {} already has {} actions in flight (max_inflight_per_worker)",
                    self.input.workers[w].id, self.model.worker_actions[w]
                ),
            )),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use lb_common::ids::{Key, KeyRange};
    use lb_common::protocol::{ActionKind, Capacity, Health};

    use super::*;
    use crate::planner::{PartitionView, PartitionWindow, WorkerView, WorkerWindow};

    /// Two workers of 1,000 ops/s: a (left, 300) on w0 with `w0_other` more, b (right, 200) on w1.
    fn input(w0_other: f64) -> PlannerInput {
        let worker = |i: usize, ops: f64| WorkerView {
            id: format!("w{i}").parse().expect("id"),
            capacity: Capacity { ops_per_sec: 1000.0, bytes_per_sec: 1e12 },
            cpu_cores: 0.0,
            group: None,
            health: Health::Healthy,
            zone: None,
            load: WorkerWindow { ops_per_sec: ops, ..Default::default() },
        };
        let part = |id: &str, range: KeyRange, owner: usize, ops: f64| PartitionView {
            id: id.parse().expect("id"),
            tenant: "t".parse().expect("id"),
            table: "x".parse().expect("id"),
            range,
            owner: format!("w{owner}").parse().expect("id"),
            group: None,
            stored_bytes: 0,
            limit: Some(Capacity { ops_per_sec: 10_000.0, bytes_per_sec: 1e12 }),
            supported_actions: ActionKind::ALL.to_vec(),
            stats: PartitionWindow { ops_per_sec: ops, ..Default::default() },
        };
        PlannerInput {
            workers: vec![worker(0, 300.0 + w0_other), worker(1, 200.0)],
            partitions: vec![
                part("a", KeyRange { start: Key(0), end: Key(99) }, 0, 300.0),
                part("b", KeyRange { start: Key(100), end: Key(199) }, 1, 200.0),
            ],
            in_flight: Vec::new(),
            new_group_dedicates_owner: false,
            multi_way_split: false,
            layout: None,
            move_rate_limit: false,
            merge_to_worker: false,
        }
    }

    /// `input` with partition c (keys 200..=299, `ops` ops/s) on worker `owner` as well.
    fn with_c(mut input: PlannerInput, owner: usize, ops: f64) -> PlannerInput {
        input.partitions.push(PartitionView {
            id: "c".parse().expect("id"),
            owner: format!("w{owner}").parse().expect("id"),
            range: KeyRange { start: Key(200), end: Key(299) },
            stats: PartitionWindow { ops_per_sec: ops, ..Default::default() },
            ..input.partitions[1].clone()
        });
        input.workers[owner].load.ops_per_sec += ops;
        input
    }

    /// `a` cut at key 50, the right piece to w1.
    fn split_a_to_w1() -> ActionSpec {
        ActionSpec::SplitInto {
            partition: "a".parse().expect("id"),
            split_keys: vec![Key(50)],
            to_workers: vec!["w1".parse().expect("id")],
            group: None,
            first_to_worker: None,
        }
    }

    fn merge() -> ActionSpec {
        ActionSpec::Merge { left: "a".parse().expect("id"), right: "b".parse().expect("id"), to_worker: None }
    }

    fn merge_on(w: &str) -> ActionSpec {
        ActionSpec::Merge {
            left: "a".parse().expect("id"),
            right: "b".parse().expect("id"),
            to_worker: Some(w.parse().expect("id")),
        }
    }

    #[test]
    fn a_merge_named_onto_the_rights_owner_carries_the_left_there() {
        let mut config = PlannerConfig::default();
        config.caps.max_inflight_per_worker = 10;
        // w0 at 0.70 cannot take b (0.90), but w1 at 0.20 takes a's 300 (0.50).
        let full = input(400.0);
        let why = OutsideCheck::new(&full, &config, 0).admit(&merge_on("w0")).expect_err("declined").1;
        assert!(why.starts_with("destination overloaded: the merged partition lands on w0"), "{why}");
        let mut check = OutsideCheck::new(&full, &config, 0);
        check.admit(&merge_on("w1")).expect("w1 has room");
        // a counts on w1 now, for whatever the pass checks next.
        assert_eq!(check.model.owner[0], 1);
        assert!((check.model.worker_ratio(1) - 0.50).abs() < 1e-9, "{}", check.model.worker_ratio(1));
        assert!((check.model.worker_ratio(0) - 0.40).abs() < 1e-9, "{}", check.model.worker_ratio(0));
    }

    #[test]
    fn a_merge_is_declined_when_the_left_owner_cannot_take_the_right_and_counted_when_it_can() {
        // Room in the caps: this is about load (the caps' own test is below).
        let mut config = PlannerConfig::default();
        config.caps.max_inflight_per_worker = 10;
        // w0 at 0.70: with b's 200 it would be at 0.90, over the 0.85 watermark, and hotter
        // than w1 (0.20) stays without the merge.
        let full = input(400.0);
        let why = OutsideCheck::new(&full, &config, 0).admit(&merge()).expect_err("declined").1;
        assert!(why.starts_with("destination overloaded: the merged partition stays on w0"), "{why}");
        assert!(why.contains("0.90 of its capacity"), "{why}");
        // w0 at 0.30: 0.50 after; admitted, and the next move onto w0 sees b's load there.
        let roomy = input(0.0);
        let mut check = OutsideCheck::new(&roomy, &config, 0);
        check.admit(&merge()).expect("admitted");
        let back = ActionSpec::Move {
            partition: "b".parse().expect("id"),
            to_worker: "w1".parse().expect("id"),
            max_bytes_per_sec: None,
        };
        check.admit(&back).expect("w1 is empty after the merge");
        let onto_w0 = ActionSpec::Move {
            partition: "b".parse().expect("id"),
            to_worker: "w0".parse().expect("id"),
            max_bytes_per_sec: None,
        };
        assert!(check.admit(&onto_w0).is_ok(), "b is back on w1: moving it to w0 again fits (0.50)");
    }

    #[test]
    fn the_in_flight_caps_hold_for_actions_decided_outside_the_pass() {
        let config = PlannerConfig::default();
        let roomy = input(0.0);
        let mut check = OutsideCheck::new(&roomy, &config, 0);
        let split = |p: &str| ActionSpec::Split { partition: p.parse().expect("id"), split_key: Key(50) };
        // max_inflight_per_worker: a's worker takes that many, then no more.
        for _ in 0..config.caps.max_inflight_per_worker {
            check.admit(&split("a")).expect("fits");
        }
        let (reason, why) = check.admit(&split("a")).expect_err("w0 is full");
        assert_eq!(reason, DeclineReason::Cap);
        assert!(why.starts_with("cap: worker w0 already has"), "{why}");
        check.admit(&split("b")).expect("w1 still has room");
    }

    #[test]
    fn what_the_planner_proposed_earlier_in_the_pass_counts_where_it_lands_and_in_the_caps() {
        let mut config = PlannerConfig::default();
        config.caps.max_inflight_per_worker = 10;
        // Alone, the merge fits: w0 at 0.30 takes b's 200 (0.50).
        let roomy = input(0.0);
        OutsideCheck::new(&roomy, &config, 0).admit(&merge()).expect("fits alone");
        // The planner moved c (450 ops/s) onto w0 in the same pass: w0 would carry 0.95.
        let busy = with_c(input(0.0), 1, 450.0);
        let planned = ActionSpec::Move {
            partition: "c".parse().expect("id"),
            to_worker: "w0".parse().expect("id"),
            max_bytes_per_sec: None,
        };
        let (reason, why) = OutsideCheck::new(&busy, &config, 0)
            .after(std::slice::from_ref(&planned))
            .admit(&merge())
            .expect_err("w0 is filled by the planner's move");
        assert_eq!(reason, DeclineReason::DestinationOverloaded);
        assert!(why.contains("0.95 of its capacity"), "{why}");
        // The per-pass cap is shared with the planner's proposals.
        config.caps.max_actions_per_pass = 1;
        let split = ActionSpec::Split { partition: "b".parse().expect("id"), split_key: Key(150) };
        let (reason, why) = OutsideCheck::new(&roomy, &config, 0)
            .after(std::slice::from_ref(&split))
            .admit(&merge())
            .expect_err("the pass is full");
        assert_eq!(reason, DeclineReason::Cap);
        assert!(why.starts_with("cap: max_actions_per_pass (1 for 2 workers) reached"), "{why}");
    }

    #[test]
    fn a_move_back_onto_an_overloaded_worker_is_declined() {
        let config = PlannerConfig::default();
        let full = input(650.0);
        let back = ActionSpec::Move {
            partition: "b".parse().expect("id"),
            to_worker: "w0".parse().expect("id"),
            max_bytes_per_sec: None,
        };
        let why = OutsideCheck::new(&full, &config, 0).admit(&back).expect_err("declined").1;
        assert!(why.starts_with("destination overloaded: the move lands on w0"), "{why}");
    }

    #[test]
    fn a_multi_way_split_of_the_pass_fills_its_pieces_destinations_for_what_comes_after() {
        let mut config = PlannerConfig::default();
        config.caps.max_inflight_per_worker = 10;
        // w0: a (300) and c (100); w1: b (200) and 450 of its own, at 0.65.
        let mut tight = with_c(input(0.0), 0, 100.0);
        tight.workers[1].load.ops_per_sec += 450.0;
        let c_to_w1 = ActionSpec::Move {
            partition: "c".parse().expect("id"),
            to_worker: "w1".parse().expect("id"),
            max_bytes_per_sec: None,
        };
        OutsideCheck::new(&tight, &config, 0).admit(&c_to_w1).expect("alone, w1 takes c at 0.75");
        // The planner cut a in two and sent the right half (~150 ops/s) to w1 in the same pass.
        let (reason, why) = OutsideCheck::new(&tight, &config, 0)
            .after(&[split_a_to_w1()])
            .admit(&c_to_w1)
            .expect_err("w1 is filled by the split's piece");
        assert_eq!(reason, DeclineReason::DestinationOverloaded);
        assert!(why.starts_with("destination overloaded: the move lands on w1"), "{why}");
        assert!(why.contains("0.90 of its capacity"), "{why}");
    }

    #[test]
    fn a_split_whose_piece_would_overload_its_destination_is_declined_with_that_reason() {
        let config = PlannerConfig::default();
        // w1 at 0.80: a's right half (~150 ops/s) would take it to 0.95, hotter than w0 (0.30).
        let mut full = input(0.0);
        full.workers[1].load.ops_per_sec += 600.0;
        let (reason, why) = OutsideCheck::new(&full, &config, 0).admit(&split_a_to_w1()).expect_err("declined");
        assert_eq!(reason, DeclineReason::DestinationOverloaded);
        assert!(why.starts_with("destination overloaded: a piece of the split lands on w1"), "{why}");
        assert!(why.contains("0.95 of its capacity"), "{why}");
        // With room on w1 it is admitted, and the piece counts there.
        let roomy = input(0.0);
        let mut check = OutsideCheck::new(&roomy, &config, 0);
        check.admit(&split_a_to_w1()).expect("w1 at 0.35 after");
        assert!((check.model.worker_ratio(1) - 0.35).abs() < 0.01, "{}", check.model.worker_ratio(1));
    }

    #[test]
    fn a_reshard_is_declined_where_its_new_shards_would_overload_a_worker_and_counted_where_it_fits() {
        use lb_common::placement::distribute::{DistributionKey, dataset_shard_indices};
        use lb_common::placement::ids::ShardId;
        use lb_common::protocol::LoadBalancing;

        let config = PlannerConfig::default();
        let id = |i: usize| -> WorkerId { format!("w{i}").parse().expect("id") };
        // Four workers of 1,000 ops/s on a ring of 8 shards, w0 w1 w2 w3 w0 w1 w2 w3.
        let ring: Vec<WorkerId> = (0..8).map(|i| id(i % 4)).collect();
        let key = DistributionKey::new("t", "d", &[]);
        let now = dataset_shard_indices(8, &key, 8, 1)[0] as usize;
        let wider: Vec<usize> = dataset_shard_indices(8, &key, 8, 4).iter().map(|&s| s as usize % 4).collect();
        let source = now % 4;
        let dest = *wider.iter().find(|&&w| w != source).expect("the wider subring reaches another worker");
        let per_dest = 100.0 * wider.iter().filter(|&&w| w == dest).count() as f64;
        // The dataset's 400 ops/s, measured on its one shard, on `source`.
        let with_dest_at = |dest_ops: f64| {
            let mut input = input(0.0);
            for i in 2..4 {
                input.workers.push(WorkerView { id: id(i), ..input.workers[1].clone() });
            }
            for (i, w) in input.workers.iter_mut().enumerate() {
                w.load.ops_per_sec = if i == dest { dest_ops } else { 100.0 };
            }
            input.workers[source].load.ops_per_sec += 400.0;
            input
        };
        let info = DatasetInfo {
            tenant: "t".parse().expect("id"),
            dataset: "d".parse().expect("id"),
            tenant_shards: 8,
            dataset_shards: 1,
            load_balancing: LoadBalancing::RoundRobin,
            shard_owners: ring,
            zones: Vec::new(),
        };
        let usage = [DatasetShardUsage {
            tenant: info.tenant.clone(),
            dataset: info.dataset.clone(),
            shard: ShardId(now as u32 + 1),
            worker: Some(id(source)),
            ops_per_sec: 400.0,
            rejected_per_sec: 0.0,
            bytes_per_sec: 0.0,
        }];
        let reshard = ActionSpec::Reshard {
            tenant: info.tenant.clone(),
            dataset: info.dataset.clone(),
            tenant_shards: 8,
            dataset_shards: 4,
            load_balancing: LoadBalancing::RoundRobin,
        };
        let datasets = [info];
        // `dest` at 0.80 would pass 0.85 with its new shards, and be hotter than the source (0.50).
        let full = with_dest_at(800.0);
        let (reason, why) = OutsideCheck::new(&full, &config, 0)
            .with_datasets(&datasets, &usage)
            .admit(&reshard)
            .expect_err("declined");
        assert_eq!(reason, DeclineReason::DestinationOverloaded);
        assert!(why.starts_with("destination overloaded: the reshard of t/d spreads"), "{why}");
        assert!(why.contains(&format!("onto w{dest}")), "{why}");
        // Without the datasets the check cannot see where it lands: caps only.
        OutsideCheck::new(&full, &config, 0).admit(&reshard).expect("nothing to weigh");
        // With room, it is admitted and counted: the source sheds what it no longer serves, the
        // destination carries its new shards.
        let roomy = with_dest_at(100.0);
        let mut check = OutsideCheck::new(&roomy, &config, 0).with_datasets(&datasets, &usage);
        check.admit(&reshard).expect("fits");
        let at_source = 100.0 * wider.iter().filter(|&&w| w == source).count() as f64;
        assert!((check.model.worker_ratio(dest) - (100.0 + per_dest) / 1000.0).abs() < 1e-9);
        assert!((check.model.worker_ratio(source) - (100.0 + at_source) / 1000.0).abs() < 1e-9);
    }

    #[test]
    fn an_isolation_of_the_pass_lands_where_the_storage_puts_it() {
        let config = PlannerConfig::default();
        let group: GroupId = "g".parse().expect("id");
        let isolate = |g: &GroupId| ActionSpec::Group {
            target: GroupTarget::Partition { partition: "a".parse().expect("id") },
            group: g.clone(),
        };
        // Into a group the topology shows: a lands on its worker (w1).
        let mut grouped = input(0.0);
        grouped.workers[1].group = Some(group.clone());
        let check = OutsideCheck::new(&grouped, &config, 0).after(&[isolate(&group)]);
        assert_eq!(check.model.owner[0], 1, "a is on the group's worker");
        assert!((check.model.worker_ratio(1) - 0.50).abs() < 1e-9);
        // A dedication (a storage that forms the group from a's own worker): a stays, c leaves
        // for the other shared worker, and w0 is the group's.
        let mut dedicating = with_c(input(0.0), 0, 100.0);
        dedicating.new_group_dedicates_owner = true;
        let dedicated: GroupId = "dedicated-a".parse().expect("id");
        let check = OutsideCheck::new(&dedicating, &config, 0).after(&[isolate(&dedicated)]);
        assert_eq!((check.model.owner[0], check.model.owner[2]), (0, 1), "a stays, c goes to w1");
        assert!((check.model.worker_ratio(1) - 0.30).abs() < 1e-9);
        assert_eq!(check.model.dedicating, vec![(0, dedicated)]);
    }
}
