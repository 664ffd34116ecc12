//! Moves: destination choice, the gain-after-cost test, and the worker-overload and imbalance
//! policies.

use lb_common::ids::GroupId;
use lb_common::protocol::{ActionKind, ActionSpec, GroupTarget};

use super::config::CrossZone;
use super::model::{STREAM_SPARE_MARGIN, sketch_shape, supports};
use super::proposal::{Alternative, DeclineReason, Policy, Prediction, Proposal, Trigger};
use super::state::PlannerState;
use super::{HEATING_RISE_RATIO, MAX_ALTERNATIVES, Pass, Zones};

/// Bytes in a GiB, for the move cost.
const GIB: f64 = (1u64 << 30) as f64;
/// Why a partition over its own limit is not moved by the worker policies.
const SPLIT_FIRST: &str = "over its own limit: partition overload splits it first (a move cannot lower its demand against its limit, and the move's cooldown would hold the split back)";
/// Candidates tried per overloaded worker before giving up: the best few explain the choice.
const MAX_CANDIDATES_PER_WORKER: usize = 8;

/// What a look at the destinations of one move found (see [`Pass::best_destination`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Scan {
    /// Workers at their concurrent action cap.
    capped: usize,
    /// Workers still streaming partitions away ([`super::model::Model::shedding`]): they take
    /// no load until those land. Unlike capped ones, they do not keep a move in its zone (they
    /// are usually its hot workers, shedding).
    shedding: usize,
    /// Workers the move would put over the high watermark (or `max_after`).
    full: usize,
    /// Workers of other zones with room, where crossing is not allowed.
    room_elsewhere: usize,
    /// Whether a worker of the owner's zone could take the load at all.
    room_home: bool,
    /// The coolest worker that fits.
    best: Option<MoveEval>,
}

/// A move that passed the gain test.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MoveEval {
    pub dest: usize,
    pub src_before: f64,
    pub src_after: f64,
    pub dest_before: f64,
    pub dest_after: f64,
    pub gain: f64,
    pub cost: f64,
}

impl Pass<'_> {
    /// The move cost of partition `p` in capacity points.
    pub fn move_cost(&self, p: usize) -> f64 {
        self.input.partitions[p].stored_bytes as f64 / GIB * self.config.caps.move_cost_ratio_per_gib
    }

    /// Whether a place may take load that puts it at `after` of its capacity, when the load
    /// comes from a place at `source_before`: at or under the high watermark; or, as the lesser
    /// evil, still under capacity and cooler than the source stays without the action.
    pub fn destination_allows(&self, source_before: f64, after: f64) -> bool {
        after <= self.config.worker_overload.high_watermark_ratio || (after <= 1.0 && after < source_before)
    }

    /// Whether a partition may cross into another zone when its own has no room.
    pub fn may_cross_zones(&self) -> bool {
        self.config.zones.cross != CrossZone::Never
    }

    /// The zone spread worst in max/mean among the pool's zones, with its max, mean and CV
    /// (the whole pool when the topology has no zones).
    pub fn worst_zone_stats(&self) -> (u32, (f64, f64, f64)) {
        let mut worst = (Zones::NONE, (0.0, 0.0, 0.0));
        let mut worst_mom = f64::NEG_INFINITY;
        for z in self.zones.indices() {
            let stats = self.model.pool_stats_where(&self.groups, |w| self.zones.of[w] == z);
            let mom = if stats.1 > 0.0 { stats.0 / stats.1 } else { 0.0 };
            if mom > worst_mom {
                (worst, worst_mom) = ((z, stats), mom);
            }
        }
        worst
    }

    /// The load ratio of worker `w`'s zone as a whole.
    pub fn zone_ratio(&self, w: usize) -> f64 {
        let z = self.zones.of[w];
        self.model.ratio_of_workers(|x| self.zones.of[x] == z)
    }

    /// Each worker's zone's load ratio, every zone computed once (for a scan over the workers).
    pub fn zone_ratios_by_worker(&self) -> Vec<f64> {
        let by_zone: Vec<(u32, f64)> =
            self.zones.indices().map(|z| (z, self.model.ratio_of_workers(|x| self.zones.of[x] == z))).collect();
        self.zones.of.iter().map(|z| by_zone.iter().find(|(i, _)| i == z).map_or(f64::INFINITY, |r| r.1)).collect()
    }

    /// What a crossing from worker `from` to worker `to` says in a reason: empty inside a zone.
    pub fn zone_note(&self, from: usize, to: usize) -> String {
        if self.zones.same(from, to) {
            return String::new();
        }
        format!(
            "; crosses from zone {} to zone {} (at {:.2} of its capacity): no worker of zone {} has room, and zones.cross = when_full",
            self.zones.name(from),
            self.zones.name(to),
            self.zone_ratio(to),
            self.zones.name(from)
        )
    }

    /// The coolest eligible worker (under its action cap, not streaming partitions away) for
    /// partition `p` among the workers of `group` (None: the
    /// shared pool) in its owner's zone, whose load after the move stays at or under
    /// `max_after` and that [`Pass::destination_allows`], and that passes the gain test; when
    /// the source is over the high watermark, no worker of its zone has the room (none merely at
    /// its action cap) and `zones.cross` allows it, the coolest such worker of the coolest other
    /// zone, charged `cross_zone_cost_factor` times the move cost. Losers go to `alts`;
    /// the error is why none won (`destination_overloaded`, `cap` or `no_gain`).
    pub fn best_destination(
        &self,
        p: usize,
        group: Option<&GroupId>,
        max_after: f64,
        alts: &mut Vec<Alternative>,
    ) -> Result<MoveEval, DeclineReason> {
        let src = self.model.owner[p] as usize;
        let src_before = self.model.worker_ratio(src);
        let id = &self.input.partitions[p].id;
        let mut scan = match self.home_sorted(p, group, max_after) {
            Some(sorted) => {
                #[cfg(debug_assertions)]
                {
                    let mut all = Scan::default();
                    self.scan_all(p, group, max_after, false, &mut all);
                    debug_assert_eq!(sorted, all, "the sorted destination scan of {id} differs from the full one");
                }
                sorted
            }
            None => {
                let mut all = Scan::default();
                self.scan_all(p, group, max_after, false, &mut all);
                all
            }
        };
        // Crossing is for relief: only a source over the high watermark whose zone has no
        // worker with the room (one merely at its action cap, which passes within a move's
        // time, or one that would only end hotter than the source, keeps it home).
        let high = self.config.worker_overload.high_watermark_ratio;
        if self.zones.several() && scan.best.is_none() && scan.capped == 0 && !scan.room_home && src_before > high {
            self.scan_all(p, group, max_after, true, &mut scan);
        }
        let Scan { capped, shedding, full, room_elsewhere, best, .. } = scan;
        if capped > 0 {
            alts.push(alt(format!("move {id} to {capped} other workers"), "at their concurrent action cap".into()));
        }
        if shedding > 0 {
            alts.push(alt(
                format!("move {id} to {shedding} other workers"),
                "still streaming partitions away: they take no load until those land".into(),
            ));
        }
        if full > 0 {
            alts.push(alt(
                format!("move {id} to {full} other workers"),
                format!(
                    "would put them over {:.2} of capacity (the high watermark, or under capacity and cooler than the source at {src_before:.2})",
                    max_after.min(high.max(src_before.min(1.0)))
                ),
            ));
        }
        if room_elsewhere > 0 {
            alts.push(alt(
                format!("move {id} to {room_elsewhere} workers of other zones with room"),
                format!("zones.cross = never: it stays in zone {}", self.zones.name(src)),
            ));
        }
        let Some(b) = best else {
            return Err(if room_elsewhere > 0 {
                DeclineReason::CrossZone
            } else if full > 0 {
                DeclineReason::DestinationOverloaded
            } else if capped > 0 || shedding > 0 {
                DeclineReason::Cap
            } else {
                DeclineReason::NoGain
            });
        };
        // A source over its capacity rejects on every partition it holds: a move that takes it
        // back under needs only a gain that outweighs its cost, however small.
        let ends_rejections = b.src_before > 1.0 && b.src_after <= 1.0;
        let min_gain = if ends_rejections { 0.0 } else { self.config.caps.min_gain_ratio };
        if b.gain - b.cost < min_gain {
            alts.push(alt(
                format!("move {id} to {}", self.input.workers[b.dest].id),
                format!(
                    "gain {:.3} minus cost {:.3} is under {} (max of the pair {:.2} -> {:.2})",
                    b.gain,
                    b.cost,
                    if ends_rejections {
                        "0 (a move ending its source's rejections needs only a net gain)".to_owned()
                    } else {
                        format!("min_gain_ratio {min_gain:.3}")
                    },
                    b.src_before.max(b.dest_before),
                    b.src_after.max(b.dest_after)
                ),
            ));
            return Err(DeclineReason::NoGain);
        }
        Ok(b)
    }

    /// One look at every worker for a move of partition `p` out of its owner's zone
    /// (`crossing`) or inside it, added to `scan`: [`Pass::best_destination`] without the order.
    pub(super) fn scan_all(&self, p: usize, group: Option<&GroupId>, max_after: f64, crossing: bool, scan: &mut Scan) {
        let src = self.model.owner[p] as usize;
        let src_before = self.model.worker_ratio(src);
        let src_after = self.model.ratio_with(src, p, -1.0);
        // Not allowed to cross: other zones are only looked at to say whether they had room.
        let probe = crossing && !self.may_cross_zones();
        let cost = self.move_cost(p) * if crossing { self.config.zones.cross_zone_cost_factor } else { 1.0 };
        let zone_ratio = if crossing { self.zone_ratios_by_worker() } else { Vec::new() };
        // Crossing, the coolest zone first (a crossing balances zones), then the coolest worker.
        let mut best_key = (f64::INFINITY, f64::INFINITY);
        for w in 0..self.input.workers.len() {
            if w == src || !self.model.healthy[w] || self.groups[w].as_ref() != group {
                continue;
            }
            if self.zones.same(src, w) == crossing {
                continue;
            }
            if self.model.worker_actions[w] >= self.config.caps.max_inflight_per_worker {
                scan.capped += usize::from(!probe);
                continue;
            }
            // Still streaming partitions away (it serves them until they land): it takes no
            // load until that ends.
            if self.model.shedding(w) {
                scan.shedding += usize::from(!probe);
                continue;
            }
            // Both tests are monotone in the ratio after (a lower one passes whatever a higher
            // one passes): decided on the ratio's bounds, divided out only where they differ
            // or where this worker may beat the best so far.
            let (lo, hi) = self.model.ratio_with_bounds(w, p);
            let (allows_lo, allows_hi) =
                (self.destination_allows(src_before, lo), self.destination_allows(src_before, hi));
            let (fits_lo, fits_hi) = (allows_lo && lo <= max_after, allows_hi && hi <= max_after);
            let zone_key = zone_ratio.get(w).copied().unwrap_or(0.0);
            let may_win = fits_lo && !probe && (zone_key, lo) < best_key;
            let dest_after = if allows_lo != allows_hi || fits_lo != fits_hi || may_win {
                self.model.ratio_with(w, p, 1.0)
            } else {
                hi
            };
            let allows =
                if allows_lo == allows_hi { allows_lo } else { self.destination_allows(src_before, dest_after) };
            scan.room_home |= !crossing && allows;
            let fits = if fits_lo == fits_hi { fits_lo } else { allows && dest_after <= max_after };
            if !fits {
                scan.full += usize::from(!probe);
                continue;
            }
            if probe {
                scan.room_elsewhere += 1;
                continue;
            }
            let key = (zone_key, dest_after);
            if may_win && key < best_key {
                let dest_before = self.model.worker_ratio(w);
                let gain = src_before.max(dest_before) - src_after.max(dest_after);
                scan.best = Some(MoveEval { dest: w, src_before, src_after, dest_before, dest_after, gain, cost });
                best_key = key;
            }
        }
    }

    /// [`Pass::scan_all`] inside the owner's zone, from the workers sorted by load ratio
    /// ([`super::destinations`]): the same answer, with only the workers where it can change
    /// worked out one by one. `None` where the order does not apply (a group's workers, a load
    /// below zero in some dimension).
    pub(super) fn home_sorted(&self, p: usize, group: Option<&GroupId>, max_after: f64) -> Option<Scan> {
        let a = self.model.load[p];
        if group.is_some() || !(a.ops >= 0.0 && a.bytes >= 0.0 && a.cpu >= 0.0) {
            return None;
        }
        let model = &self.model;
        let src = model.owner[p] as usize;
        let src_before = model.worker_ratio(src);
        let src_after = model.ratio_with(src, p, -1.0);
        let cost = self.move_cost(p);
        let cap = self.config.caps.max_inflight_per_worker;
        let mut dests = self.destinations.borrow_mut();
        let (home, inv) = dests.home_of(model, &self.groups, &self.zones, cap, src);
        let allows = |after: f64| self.destination_allows(src_before, after);
        let fits = |after: f64| allows(after) && after <= max_after;
        // With the partition added, a worker's ratio rises by at most this (plus rounding).
        let rise = (a.ops * inv.ops).max(a.bytes * inv.bytes).max(a.cpu * inv.cpu) * (1.0 + 1e-9) + 1e-12;
        let order = &home.order;
        let shared_src = model.healthy[src] && self.groups[src].is_none();
        let src_capped = shared_src && model.worker_actions[src] >= cap;
        let src_shedding = shared_src && !src_capped && model.shedding(src);
        let src_at = if shared_src && !src_capped && !src_shedding {
            order.binary_search_by(|e| e.0.total_cmp(&src_before).then(e.1.cmp(&(src as u32)))).ok()
        } else {
            None
        };
        let others =
            |from: usize, to: usize| (to - from) - usize::from(src_at.is_some_and(|i| (from..to).contains(&i)));
        // Cool enough to fit whatever the partition adds; too hot to fit; too hot to take it.
        let sure = order.partition_point(|&(r, _)| fits(r + rise));
        let no_fit = order.partition_point(|&(r, _)| fits(r));
        let no_room = order.partition_point(|&(r, _)| allows(r));
        let mut scan = Scan {
            capped: home.capped - usize::from(src_capped),
            shedding: home.shedding - usize::from(src_shedding),
            ..Scan::default()
        };
        let mut best: Option<(f64, usize)> = None;
        // The coolest after the move wins; of equals, the first worker (as `scan_all` finds it).
        let consider = |best: &mut Option<(f64, usize)>, d: f64, w: usize| {
            if best.is_none_or(|(bd, bw)| d < bd || (d == bd && w < bw)) {
                *best = Some((d, w));
            }
        };
        let after = |w: u32| model.ratio_with(w as usize, p, 1.0);
        scan.room_home = others(0, sure) > 0;
        for &(r, w) in &order[..sure] {
            // The ratio only rises: a worker already hotter than the best after the move loses.
            if best.is_some_and(|(bd, _)| r > bd) {
                break;
            }
            if w as usize != src {
                consider(&mut best, after(w), w as usize);
            }
        }
        for &(_, w) in &order[sure..no_fit] {
            if w as usize == src {
                continue;
            }
            let d = after(w);
            scan.room_home |= allows(d);
            if fits(d) {
                consider(&mut best, d, w as usize);
            } else {
                scan.full += 1;
            }
        }
        scan.full += others(no_fit, order.len());
        if !scan.room_home {
            scan.room_home = order[no_fit..no_room].iter().any(|&(_, w)| w as usize != src && allows(after(w)));
        }
        scan.best = best.map(|(dest_after, dest)| {
            let dest_before = model.worker_ratio(dest);
            let gain = src_before.max(dest_before) - src_after.max(dest_after);
            MoveEval { dest, src_before, src_after, dest_before, dest_after, gain, cost }
        });
        Some(scan)
    }

    /// Isolating partition `p` into `group`: where the storage system will put it
    /// ([`Model::group_destination`](super::model::Model::group_destination)), checked against
    /// that worker and against the whole group's capacity, with what is already on its way
    /// there counted. The why-not names the place.
    pub fn group_isolation(&self, p: usize, group: &GroupId) -> Result<MoveEval, String> {
        let src = self.model.owner[p] as usize;
        let Some(dest) = self.model.group_destination(self.input, group, p) else {
            return Err(format!("group {group} has no healthy worker to take it"));
        };
        let dest_id = &self.input.workers[dest].id;
        if !self.zones.same(src, dest) {
            return Err(format!(
                "the storage would put it on {dest_id} in zone {}, out of its zone {}: a group's isolation stays in its zone",
                self.zones.name(dest),
                self.zones.name(src)
            ));
        }
        if self.model.worker_actions[dest] >= self.config.caps.max_inflight_per_worker {
            return Err(format!("the storage would put it on {dest_id}, which is at its concurrent action cap"));
        }
        let src_before = self.model.worker_ratio(src);
        let (dest_before, dest_after) = (self.model.worker_ratio(dest), self.model.ratio_with(dest, p, 1.0));
        let group_after = self.model.group_ratio_with(&self.groups, group, self.model.load[p]);
        if !self.destination_allows(src_before, dest_after) || !self.destination_allows(src_before, group_after) {
            return Err(format!(
                "destination overloaded: the storage would put it on {dest_id} ({dest_before:.2} -> {dest_after:.2} of capacity) and group {group} would be at {group_after:.2} of its capacity, with the isolations in flight counted (high watermark {:.2})",
                self.config.worker_overload.high_watermark_ratio
            ));
        }
        let src_after = self.model.ratio_with(src, p, -1.0);
        let gain = src_before.max(dest_before) - src_after.max(dest_after);
        Ok(MoveEval { dest, src_before, src_after, dest_before, dest_after, gain, cost: self.move_cost(p) })
    }

    /// The move of `p` to `dest`, streaming as fast as its source can afford
    /// ([`super::model::Model::next_stream`]; at the full rate where no throttled stream may
    /// start, which the caller has weighed), applied to the model. With a note for its reason
    /// when the stream is throttled.
    pub fn plan_move(&mut self, p: usize, dest: usize) -> (ActionSpec, String) {
        let src = self.model.owner[p] as usize;
        let stream = self.model.next_stream(src).unwrap_or_else(|| self.model.full_stream());
        self.model.apply_stream(p, dest, stream);
        let spec = ActionSpec::Move {
            partition: self.input.partitions[p].id.clone(),
            to_worker: self.input.workers[dest].id.clone(),
            max_bytes_per_sec: stream.max_bytes_per_sec,
        };
        let note = match stream.max_bytes_per_sec {
            Some(r) => format!(
                "; streamed at {:.1} MiB/s, so it takes {:.2} of {}'s capacity, what it has spare less a {STREAM_SPARE_MARGIN} margin",
                r as f64 / (1024.0 * 1024.0),
                stream.share,
                self.input.workers[src].id
            ),
            None => String::new(),
        };
        (spec, note)
    }

    /// Whether worker `w` can stream at the storage's full rate (an isolation into a group,
    /// which the storage moves at its own pace) without rejecting for it where it rejects
    /// nothing now.
    pub fn full_rate_affordable(&self, w: usize) -> Result<(), String> {
        match self.model.next_stream(w) {
            Some(s) if s.max_bytes_per_sec.is_none() => Ok(()),
            _ => Err(format!(
                "the storage streams it at its full rate, {:.2} of {}'s capacity, which has {:.3} spare: it would reject for the stream",
                self.model.full_stream().share,
                self.input.workers[w].id,
                self.model.spare(w)
            )),
        }
    }

    /// The prediction of a move already evaluated (before it is applied to the model).
    pub fn move_prediction(&self, p: usize, e: &MoveEval) -> Prediction {
        let (max, mean, _) = self.model.pool_stats(&self.groups);
        let mut max_after = 0.0f64;
        for w in 0..self.input.workers.len() {
            if self.model.healthy[w] && self.groups[w].is_none() {
                let r = if w == e.dest {
                    e.dest_after
                } else if w == self.model.owner[p] as usize {
                    e.src_after
                } else {
                    self.model.worker_ratio(w)
                };
                max_after = max_after.max(r);
            }
        }
        Prediction {
            target_before_ratio: e.src_before,
            target_after_ratio: e.src_after,
            source_before_ratio: e.src_before,
            source_after_ratio: e.src_after,
            dest_before_ratio: Some(e.dest_before),
            dest_after_ratio: Some(e.dest_after),
            cluster_max_before_ratio: max,
            cluster_max_after_ratio: max_after,
            cluster_mean_ratio: mean,
            cost_ratio: e.cost,
            dest_worker: Some(self.input.workers[e.dest].id.clone()),
        }
    }

    /// The group to isolate partition `p` on: the one whose coolest healthy worker stays
    /// coolest with it. `None` when the topology has no group with a healthy worker.
    pub fn isolation_group(&self, p: usize) -> Option<(GroupId, usize)> {
        let mut best: Option<(GroupId, usize, f64)> = None;
        let owner = self.model.owner[p] as usize;
        for w in 0..self.input.workers.len() {
            let Some(g) = &self.groups[w] else { continue };
            if !self.model.healthy[w] || w == owner || !self.zones.same(owner, w) {
                continue;
            }
            let r = self.model.ratio_with(w, p, 1.0);
            if best.as_ref().is_none_or(|b| r < b.2) {
                best = Some((g.clone(), w, r));
            }
        }
        best.map(|(g, w, _)| (g, w))
    }
}

/// Why nothing relieved a subject: only other zones had room, every place was full, or no
/// remedy applied.
pub fn nothing_helps(cross_zone: bool, destination_full: bool, source_full: bool) -> DeclineReason {
    if cross_zone {
        DeclineReason::CrossZone
    } else if destination_full {
        DeclineReason::DestinationOverloaded
    } else if source_full {
        DeclineReason::SourceAtLimit
    } else {
        DeclineReason::NoRemedy
    }
}

pub fn alt(candidate: String, why: String) -> Alternative {
    Alternative { candidate, why }
}

/// Worker overload: move the partitions that best bring each engaged worker under the low
/// watermark to the coolest workers with headroom.
pub fn worker_overload(pass: &mut Pass<'_>, state: &mut PlannerState, overloaded: &[usize]) {
    let cfg = &pass.config.worker_overload;
    let (high, low, mode) = (cfg.high_watermark_ratio, cfg.low_watermark_ratio, cfg.mode);
    let pcfg = &pass.config.partition_overload;
    let (key_share, seq_ratio) = (pcfg.single_key_share_ratio, pcfg.sequential_write_ratio);
    for &w in overloaded {
        let wid = pass.input.workers[w].id.clone();
        let hot = state.workers.get(&wid).copied().unwrap_or_default();
        let hot_windows = hot.windows;
        let mut tried = vec![false; pass.model.partitions_on(w).len()];
        let mut proposed = false;
        loop {
            let ratio = pass.model.worker_ratio(w);
            if ratio <= low {
                break;
            }
            if let Err(why) = pass.caps_allow(&[w]) {
                pass.decline(
                    Policy::WorkerOverload,
                    wid.as_str(),
                    DeclineReason::Cap,
                    format!("at {ratio:.2} of capacity: {why}"),
                );
                break;
            }
            if !proposed && let Some((p, share)) = imminent_cut(pass, state, w, high) {
                pass.decline(
                    Policy::WorkerOverload,
                    wid.as_str(),
                    DeclineReason::SplitFirst,
                    format!(
                        "at {ratio:.2} of capacity, serving all it is asked: partition {} ({share:.2} of it) is over its own limit and about to be split, which takes at least {:.2} off it (under the high watermark {high:.2}); a move now would stream from it at its peak",
                        pass.input.partitions[p].id,
                        share / 2.0
                    ),
                );
                break;
            }
            // A worker that serves all it is asked sheds only as fast as its spare capacity
            // pays for: a stream it cannot afford would make it reject where, left alone, it
            // rejects nothing (once it rejects, it streams at the full rate).
            if pass.model.next_stream(w).is_none() {
                if !proposed {
                    let spare = pass.model.spare(w);
                    pass.decline(
                        Policy::WorkerOverload,
                        wid.as_str(),
                        DeclineReason::SourceAtLimit,
                        format!(
                            "at {ratio:.2} of capacity ({:.2} with what streams away still on it), {spare:.3} of it spare with its running streams: one more stream needs {:.3} spare or it would make it reject; it sheds once it has room, or at the full rate once it rejects",
                            pass.model.load_with_outgoing(w),
                            pass.model.min_stream_spare()
                        ),
                    );
                }
                break;
            }
            let excess = ratio - low;
            // Rank: the smallest partition that alone brings the worker under low, then the largest.
            let mut cands: Vec<(usize, usize, f64)> = Vec::new();
            let mut alts = Vec::new();
            for (k, &p) in pass.model.partitions_on(w).iter().enumerate() {
                let p = p as usize;
                if tried[k] || pass.model.owner[p] as usize != w {
                    continue;
                }
                let info = &pass.input.partitions[p];
                if info.group.is_some() {
                    continue;
                }
                if let Some((_, why)) = pass.blocked(state, p) {
                    if alts.len() < MAX_ALTERNATIVES {
                        alts.push(alt(format!("move {}", info.id), why));
                    }
                    continue;
                }
                if !supports(&info.supported_actions, ActionKind::Move) {
                    continue;
                }
                if pass.splitting[p] {
                    if alts.len() < MAX_ALTERNATIVES {
                        alts.push(alt(format!("move {}", info.id), SPLIT_FIRST.into()));
                    }
                    continue;
                }
                let share = pass.model.ratio_of(w, pass.model.load[p]);
                if share > 0.0 {
                    cands.push((k, p, share));
                }
            }
            cands.sort_by(|a, b| {
                let (fa, fb) = (a.2 >= excess, b.2 >= excess);
                fb.cmp(&fa).then(if fa { a.2.total_cmp(&b.2) } else { b.2.total_cmp(&a.2) })
            });
            let (mut done, mut destination_full, mut cross_zone, mut source_full) = (false, false, false, false);
            for &(k, p, share) in cands.iter().take(MAX_CANDIDATES_PER_WORKER) {
                tried[k] = true;
                let info = &pass.input.partitions[p];
                let shape = sketch_shape(info.stats.sketch.as_ref());
                let unsplittable = shape.top_key_share_ratio >= key_share || shape.sequential_write_ratio >= seq_ratio;
                let trigger = Trigger {
                    worker_load_ratio: Some(ratio),
                    top_key_share_ratio: Some(shape.top_key_share_ratio).filter(|&s| s > 0.0),
                    ..hot.trigger()
                };
                if unsplittable
                    && supports(&info.supported_actions, ActionKind::Group)
                    && let Some((group, dest)) = pass.isolation_group(p)
                {
                    let mut a2 = alts.clone();
                    match pass.key_cut(p, &group, dest) {
                        Ok(cut) => {
                            let why_hot = format!(
                                "worker {wid} at {ratio:.2} of capacity (high watermark {high:.2}); partition {} carries {share:.2} of it, {:.0} % on one key",
                                info.id,
                                shape.top_key_share_ratio * 100.0
                            );
                            let how = (Policy::WorkerOverload, mode);
                            super::partition::propose_key_cut(pass, state, cut, how, why_hot, trigger, a2);
                            done = true;
                            break;
                        }
                        Err(why) => a2.push(alt(format!("cut the hot key out of {}", info.id), why)),
                    }
                    let placed = pass.group_isolation(p, &group);
                    destination_full |= placed.is_err();
                    let placed = placed.and_then(|e| pass.full_rate_affordable(w).map(|()| e));
                    source_full |= placed.is_err() && !destination_full;
                    if let Err(why) = &placed {
                        a2.push(alt(format!("isolate {} on group {group}", info.id), why.clone()));
                    }
                    if let Ok(e) = placed {
                        a2.push(alt(
                            format!("plain move of {} in the shared pool", info.id),
                            format!(
                                "one key holds {:.0} % of its ops: it would overload whichever pool worker gets it",
                                shape.top_key_share_ratio * 100.0
                            ),
                        ));
                        let prediction = pass.move_prediction(p, &e);
                        let reason = format!(
                            "worker {wid} at {ratio:.2} of capacity (high watermark {high:.2}); partition {} carries {:.2} of it, {:.0} % on one key: isolate it on group {group} (worker {})",
                            info.id,
                            share,
                            shape.top_key_share_ratio * 100.0,
                            pass.input.workers[e.dest].id
                        );
                        let spec = ActionSpec::Group {
                            target: GroupTarget::Partition { partition: info.id.clone() },
                            group: group.clone(),
                        };
                        let proposal = Proposal {
                            spec,
                            policy: Policy::WorkerOverload,
                            mode,
                            origin: lb_common::protocol::Origin::Online,
                            reason,
                            trigger,
                            predicted: prediction,
                            rejected_alternatives: a2,
                        };
                        pass.model.apply_move(p, e.dest);
                        pass.propose(state, p, mode, proposal);
                        done = true;
                        break;
                    }
                    alts = a2;
                    continue;
                }
                let found = pass.best_destination(p, None, low.max(pass.model.worker_ratio(w) - share), &mut alts);
                destination_full |= found == Err(DeclineReason::DestinationOverloaded);
                cross_zone |= found == Err(DeclineReason::CrossZone);
                if let Ok(e) = found {
                    let prediction = pass.move_prediction(p, &e);
                    let mut reason = format!(
                        "worker {wid} at {ratio:.2} of capacity (high watermark {high:.2}) for {hot_windows} windows: move {} ({:.2} of it) to the coolest worker with headroom {} ({:.2} -> {:.2}){}",
                        info.id,
                        share,
                        pass.input.workers[e.dest].id,
                        e.dest_before,
                        e.dest_after,
                        pass.zone_note(w, e.dest)
                    );
                    let (spec, note) = pass.plan_move(p, e.dest);
                    reason.push_str(&note);
                    let proposal = Proposal {
                        spec,
                        policy: Policy::WorkerOverload,
                        mode,
                        origin: lb_common::protocol::Origin::Online,
                        reason,
                        trigger,
                        predicted: prediction,
                        rejected_alternatives: std::mem::take(&mut alts),
                    };
                    pass.propose(state, p, mode, proposal);
                    proposed = true;
                    done = true;
                    break;
                }
            }
            if !done {
                // No move relieves it: the hottest partition may be too hot to share any worker.
                // Its own cooldown does not count (a dedication leaves it where it is): the
                // usual case is a hot partition that just landed here, or was just moved in vain.
                let top = pass
                    .model
                    .partitions_on(w)
                    .iter()
                    .map(|&p| p as usize)
                    .filter(|&p| {
                        pass.model.owner[p] as usize == w
                            && !pass.model.busy[p]
                            && pass.input.partitions[p].group.is_none()
                    })
                    .map(|p| (p, pass.model.ratio_of(w, pass.model.load[p])))
                    .max_by(|a, b| a.1.total_cmp(&b.1));
                if let Some((p, share)) = top {
                    match pass.dedication(state, p) {
                        Ok(d) => {
                            let why_hot = format!(
                                "worker {wid} at {ratio:.2} of capacity (high watermark {high:.2}) for {hot_windows} windows; partition {} carries {share:.2} of it",
                                pass.input.partitions[p].id
                            );
                            let trigger = Trigger { worker_load_ratio: Some(ratio), ..hot.trigger() };
                            pass.propose_dedication(state, d, Policy::WorkerOverload, why_hot, trigger, alts);
                            break;
                        }
                        Err(why) => alts.push(alt(format!("dedicate {wid} to {}", pass.input.partitions[p].id), why)),
                    }
                }
                let why = alts.iter().map(|a| format!("{}: {}", a.candidate, a.why)).collect::<Vec<_>>().join("; ");
                pass.decline(
                    Policy::WorkerOverload,
                    wid.as_str(),
                    nothing_helps(cross_zone, destination_full, source_full),
                    format!(
                        "at {ratio:.2} of capacity, no move passes: {}",
                        if why.is_empty() { "no movable partition".into() } else { why }
                    ),
                );
                break;
            }
        }
    }
}

/// A partition on worker `w` over its own limit and about to be split (splittable, with a
/// sketch, in no group, not held back, its hysteresis still building) whose cut into pieces
/// spread over other workers — `w` keeps at most half of it —
/// alone brings `w` under `high`, while `w`
/// still serves all it is asked (its streams counted): `(partition, its share of w)`. Worker
/// overload waits for that cut rather than stream neighbours off `w` while the partition
/// ramps, which would make it reject at its peak (the 100k mixed run's hot range's worker
/// stayed over capacity 25 s after the cut, on such streams).
fn imminent_cut(pass: &Pass<'_>, state: &PlannerState, w: usize, high: f64) -> Option<(usize, f64)> {
    // Only a multi-way split spreads its pieces; a split in two leaves both halves on `w`.
    if !pass.input.multi_way_split || pass.model.spare(w) < 0.0 {
        return None;
    }
    let ratio = pass.model.worker_ratio(w);
    pass.model
        .partitions_on(w)
        .iter()
        .map(|&p| p as usize)
        .filter(|&p| {
            let info = &pass.input.partitions[p];
            // Still building its hysteresis: once hot, partition overload has had its turn (it
            // cut it, and it is busy, or declined to, and waiting would be for nothing).
            pass.splitting[p]
                && !pass.plan.hot.contains(&p)
                && info.group.is_none()
                && info.stats.sketch.is_some()
                && pass.model.owner[p] as usize == w
                && (pass.blocked(state, p).is_none()
                    || (!pass.model.busy[p]
                        && state.cooling_from_a_move_only(&pass.input.partitions[p].id, pass.now_ms)))
        })
        .map(|p| (p, pass.model.ratio_of(w, pass.model.load[p])))
        .find(|&(_, share)| ratio - share / 2.0 <= high)
}

/// Zone imbalance (`zones.cross = balance`): while the hottest zone's load ratio is over the
/// imbalance policy's `engage_max_over_mean` times the mean of the zones' (until under its
/// `release_max_over_mean`), a move from the hottest zone's hottest worker to the coolest
/// zone's coolest worker, of the partition nearest half their gap, each charged the crossing's
/// cost and required to pass the gain test.
pub fn zone_imbalance(pass: &mut Pass<'_>, state: &mut PlannerState) {
    let mode = pass.config.imbalance.mode;
    let cfg = &pass.config.imbalance;
    let (engage, release, floor) = (cfg.engage_max_over_mean, cfg.release_max_over_mean, cfg.min_mean_ratio);
    let mut first = true;
    loop {
        let pool = |w: usize, z: u32| pass.zones.of[w] == z && pass.groups[w].is_none();
        let ratios: Vec<(u32, f64)> = (0..pass.zones.names.len() as u32)
            .map(|z| (z, pass.model.ratio_of_workers(|w| pool(w, z))))
            .filter(|(_, r)| r.is_finite())
            .collect();
        if ratios.len() < 2 {
            return;
        }
        let mean = ratios.iter().map(|r| r.1).sum::<f64>() / ratios.len() as f64;
        let (Some(&(hot, hot_ratio)), Some(&(cool, cool_ratio))) =
            (ratios.iter().max_by(|a, b| a.1.total_cmp(&b.1)), ratios.iter().min_by(|a, b| a.1.total_cmp(&b.1)))
        else {
            return;
        };
        let spread = hot_ratio / mean.max(f64::MIN_POSITIVE);
        // Engaged like the imbalance policy: over the engage band for its windows, until under
        // the release band; moves this pass re-check against release.
        if first {
            first = false;
            let over = mean >= floor && spread >= engage;
            let under = mean < floor || spread < release;
            if !state.zone_imbalance.observe(
                over,
                under,
                cfg.hot_windows,
                pass.now_ms,
                pass.config.hysteresis_min_gap_ms,
            ) {
                return;
            }
        } else if spread < release {
            return;
        }
        let (hot_name, cool_name) = (pass.zones.names[hot as usize].clone(), pass.zones.names[cool as usize].clone());
        let healthy = |w: &usize| pass.model.healthy[*w];
        let coolest = |z: u32| {
            (0..pass.input.workers.len())
                .filter(|&w| pool(w, z) && healthy(&w))
                .filter(|&w| pass.model.worker_actions[w] < pass.config.caps.max_inflight_per_worker)
                .filter(|&w| !pass.model.shedding(w))
                .min_by(|&a, &b| pass.model.worker_ratio(a).total_cmp(&pass.model.worker_ratio(b)))
        };
        let transient_max = cfg.max_source_transient_ratio;
        let src = (0..pass.input.workers.len())
            .filter(|&w| pool(w, hot) && healthy(&w))
            .filter(|&w| pass.model.worker_actions[w] < pass.config.caps.max_inflight_per_worker)
            .filter(|&w| pass.model.next_stream(w).is_some())
            .filter(|&w| pass.model.transient_ratio_with_one_more_move(w) <= transient_max)
            .max_by(|&a, &b| pass.model.worker_ratio(a).total_cmp(&pass.model.worker_ratio(b)));
        let subject = format!("zone {hot_name}");
        let (Some(src), Some(dest)) = (src, coolest(cool)) else {
            let why = format!(
                "zone {hot_name} at {hot_ratio:.2} of its capacity, {spread:.2} times the zones' mean: no worker of it can start a move, or none of zone {cool_name} can take one"
            );
            pass.decline(Policy::Imbalance, &subject, DeclineReason::SourceAtLimit, why);
            return;
        };
        if let Err(why) = pass.caps_allow_deferrable(&[src, dest]) {
            pass.decline(Policy::Imbalance, &subject, DeclineReason::Cap, why);
            return;
        }
        let (src_before, dest_before) = (pass.model.worker_ratio(src), pass.model.worker_ratio(dest));
        let ideal = (src_before - dest_before) / 2.0;
        let cost_factor = pass.config.zones.cross_zone_cost_factor;
        let mut best: Option<(usize, MoveEval)> = None;
        for &p in pass.model.partitions_on(src) {
            let p = p as usize;
            let info = &pass.input.partitions[p];
            if pass.model.owner[p] as usize != src
                || info.group.is_some()
                || !supports(&info.supported_actions, ActionKind::Move)
                || pass.splitting[p]
                || pass.blocked(state, p).is_some()
            {
                continue;
            }
            let (src_after, dest_after) = (pass.model.ratio_with(src, p, -1.0), pass.model.ratio_with(dest, p, 1.0));
            if dest_after > src_before || !pass.destination_allows(src_before, dest_after) {
                continue;
            }
            let gain = src_before.max(dest_before) - src_after.max(dest_after);
            let cost = pass.move_cost(p) * cost_factor;
            if gain - cost < pass.config.caps.min_gain_ratio {
                continue;
            }
            let e = MoveEval { dest, src_before, src_after, dest_before, dest_after, gain, cost };
            let off = |e: &MoveEval| (e.src_before - e.src_after - ideal).abs();
            if best.as_ref().is_none_or(|(_, b)| off(&e) < off(b)) {
                best = Some((p, e));
            }
        }
        let Some((p, e)) = best else {
            let why = format!(
                "zone {hot_name} at {hot_ratio:.2} of its capacity, {spread:.2} times the zones' mean: no partition of its hottest worker {} passes the gain test after the crossing's cost",
                pass.input.workers[src].id
            );
            pass.decline(Policy::Imbalance, &subject, DeclineReason::NoGain, why);
            return;
        };
        let info = &pass.input.partitions[p];
        let mut reason = format!(
            "zone imbalance: zone {hot_name} at {hot_ratio:.2} of its capacity, {spread:.2} times the zones' mean, zone {cool_name} at {cool_ratio:.2}; move {} from {} ({:.2} -> {:.2}) to {} ({:.2} -> {:.2}), crossing zones (zones.cross = balance, cost {:.3} at {cost_factor} times a move in a zone)",
            info.id,
            pass.input.workers[src].id,
            e.src_before,
            e.src_after,
            pass.input.workers[dest].id,
            e.dest_before,
            e.dest_after,
            e.cost
        );
        let predicted = pass.move_prediction(p, &e);
        let (spec, note) = pass.plan_move(p, e.dest);
        reason.push_str(&note);
        let proposal = Proposal {
            spec,
            policy: Policy::Imbalance,
            mode,
            origin: lb_common::protocol::Origin::Online,
            reason,
            trigger: Trigger {
                worker_load_ratio: Some(src_before),
                max_over_mean: Some(spread),
                ..state.zone_imbalance.trigger()
            },
            predicted,
            rejected_alternatives: Vec::new(),
        };
        pass.propose(state, p, mode, proposal);
    }
}

/// Imbalance: greedy moves from the hottest pool worker toward the coolest, each one required
/// to cut the pair's max by the minimum gain after its cost.
pub fn imbalance(pass: &mut Pass<'_>, state: &mut PlannerState, max_over_mean: f64, cv: f64) {
    let mode = pass.config.imbalance.mode;
    let high = pass.config.worker_overload.high_watermark_ratio;
    let hot = state.imbalance;
    let hot_windows = hot.windows;
    let cfg = &pass.config.imbalance;
    let (release_mom, release_cv) = (cfg.release_max_over_mean, cfg.release_cv);
    loop {
        // The zone spread worst: a partition stays in its zone, so each zone balances on its own.
        let (zone, (max, mean, now_cv)) = pass.worst_zone_stats();
        if mean <= 0.0 || (max / mean < release_mom && now_cv < release_cv) {
            return;
        }
        let mut order: Vec<usize> = (0..pass.input.workers.len())
            .filter(|&w| pass.model.healthy[w] && pass.groups[w].is_none() && pass.zones.of[w] == zone)
            .collect();
        if order.len() < 2 {
            return;
        }
        // The hottest by its standing load first (see `Pass::steady_ratio`).
        order.sort_by(|&a, &b| pass.steady_ratio(b).total_cmp(&pass.steady_ratio(a)));
        // Imbalance is not urgent: a move must not drain its source far into rejecting while
        // it streams (make-before-break keeps the load there), and a worker heating right now
        // is not a standing imbalance (see `Pass::heating`).
        let transient_max = pass.config.imbalance.max_source_transient_ratio;
        let Some(&src) = order.iter().find(|&&w| {
            pass.model.worker_ratio(w) > mean
                && pass.model.next_stream(w).is_some()
                && pass.model.transient_ratio_with_one_more_move(w) <= transient_max
                && pass.model.worker_actions[w] < pass.config.caps.max_inflight_per_worker
                && !pass.heating(w)
        }) else {
            pass.decline(
                Policy::Imbalance,
                "cluster",
                DeclineReason::SourceAtLimit,
                format!(
                    "max/mean {max_over_mean:.2}, cv {cv:.2}: every worker over the mean is at its action cap, would exceed {transient_max:.2} of capacity while a move drains it, or is heating (its load up {HEATING_RISE_RATIO:.2} of capacity or more within the policy's windows)"
                ),
            );
            return;
        };
        let sid = pass.input.workers[src].id.clone();
        if let Err(why) = pass.caps_allow_deferrable(&[src]) {
            pass.decline(Policy::Imbalance, sid.as_str(), DeclineReason::Cap, why);
            return;
        }
        let src_ratio = pass.model.worker_ratio(src);
        let coolest = order.iter().map(|&w| pass.model.worker_ratio(w)).fold(f64::INFINITY, f64::min);
        // The ideal partition carries half the gap between the hottest and the coolest.
        let ideal = (src_ratio - coolest) / 2.0;
        let mut cands: Vec<(usize, f64)> = Vec::new();
        let mut alts = Vec::new();
        for &p in pass.model.partitions_on(src) {
            let p = p as usize;
            let info = &pass.input.partitions[p];
            if pass.model.owner[p] as usize != src || info.group.is_some() {
                continue;
            }
            if !supports(&info.supported_actions, ActionKind::Move) {
                continue;
            }
            if let Some((_, why)) = pass.blocked(state, p) {
                if alts.len() < 2 {
                    alts.push(alt(format!("move {}", info.id), why));
                }
                continue;
            }
            if pass.splitting[p] {
                if alts.len() < 2 {
                    alts.push(alt(format!("move {}", info.id), SPLIT_FIRST.into()));
                }
                continue;
            }
            let share = pass.model.ratio_of(src, pass.model.load[p]);
            if share > 0.0 {
                cands.push((p, share));
            }
        }
        cands.sort_by(|a, b| (a.1 - ideal).abs().total_cmp(&(b.1 - ideal).abs()));
        let (mut chosen, mut why_not) = (None, DeclineReason::NoGain);
        for &(p, _) in cands.iter().take(MAX_CANDIDATES_PER_WORKER) {
            match pass.best_destination(p, None, high.min(src_ratio), &mut alts) {
                Ok(e) => {
                    chosen = Some((p, e));
                    break;
                }
                Err(r @ (DeclineReason::DestinationOverloaded | DeclineReason::CrossZone)) => why_not = r,
                Err(_) => {}
            }
        }
        let Some((p, e)) = chosen else {
            let why = alts.iter().map(|a| format!("{}: {}", a.candidate, a.why)).collect::<Vec<_>>().join("; ");
            pass.decline(
                Policy::Imbalance,
                sid.as_str(),
                why_not,
                format!("max/mean {max_over_mean:.2}, cv {cv:.2}: no move passes the gain test ({why})"),
            );
            return;
        };
        let info = &pass.input.partitions[p];
        let prediction = pass.move_prediction(p, &e);
        let mut reason = format!(
            "imbalance: max/mean {max_over_mean:.2}, cv {cv:.2} for {hot_windows} windows{}; move {} from the hottest worker {sid} ({:.2} -> {:.2}) to {} ({:.2} -> {:.2}){}",
            if pass.zones.names.is_empty() { String::new() } else { format!(" in zone {}", pass.zones.name(src)) },
            info.id,
            e.src_before,
            e.src_after,
            pass.input.workers[e.dest].id,
            e.dest_before,
            e.dest_after,
            pass.zone_note(src, e.dest)
        );
        let (spec, note) = pass.plan_move(p, e.dest);
        reason.push_str(&note);
        let proposal = Proposal {
            spec,
            policy: Policy::Imbalance,
            mode,
            origin: lb_common::protocol::Origin::Online,
            reason,
            trigger: Trigger {
                worker_load_ratio: Some(src_ratio),
                max_over_mean: Some(max_over_mean),
                cv: Some(cv),
                ..hot.trigger()
            },
            predicted: prediction,
            rejected_alternatives: alts,
        };
        pass.propose(state, p, mode, proposal);
    }
}
