//! Partition overload: split where the sketch says the load can be divided, isolate where it
//! cannot, and scatter split children to cool workers.

use lb_common::protocol::{ActionKind, ActionSpec, GroupTarget};

use std::collections::{HashMap, HashSet};

use lb_common::ids::{GroupId, Key, KeyRange, PartitionId, WorkerId};
use lb_common::protocol::{KeySketch, MAX_SPLIT_PIECES};

use super::model::{
    Load, SketchShape, cold_ends, measured_load, piece_load, piece_shares, sketch_shape, split_key, split_key_share,
    supports,
};
use super::proposal::{Alternative, DeclineReason, Policy, PolicyMode, Prediction, Proposal, Trigger};
use super::rebalance::{alt, nothing_helps};
use super::state::{ExpectedDemand, PendingChild, PlacedPiece, PlannerState, Scatter};
use super::{Hot, Pass};

/// How long after a split a child's measured load may still lag what it carries: the master's
/// analysis window (5 s by default) plus collection and topology lag. Until then a child is
/// taken to carry at least what the split left on it ([`expect_children`]), so a hot new side
/// is split again, not scattered or moved (a move would rest it for a cooldown while it
/// rejects).
const CHILD_MEASUREMENT_LAG_MS: i64 = 10_000;

/// Young split children read at least the demand their split left on them (see
/// [`CHILD_MEASUREMENT_LAG_MS`]), and every recent split's pieces at least the load it placed
/// them for ([`ExpectedDemand::load`]); expired expectations are dropped.
pub fn expect_children(pass: &mut Pass<'_>, state: &mut PlannerState) {
    let now = pass.now_ms;
    let (partitions, workers) = (&pass.input.partitions, &pass.input.workers);
    state.expected_demand.retain(|e| e.until_ms.max(e.load_until_ms) > now);
    // The pieces of multi-way splits in flight: the model counts each where it goes at its
    // share of the parent's measured demand; it holds what the split placed it for.
    let splitting: HashSet<&PartitionId> = pass
        .input
        .in_flight
        .iter()
        .filter_map(|a| match &a.spec {
            ActionSpec::SplitInto { partition, .. } => Some(partition),
            _ => None,
        })
        .collect();
    let in_flight = |c: &PendingChild| c.placed.is_some() && splitting.contains(&c.parent);
    // Positions are kept from the input they were taken in; where the layout changed since,
    // the ids are found again in one scan of the partitions (and of the workers).
    let stale: HashSet<&PartitionId> = state
        .expected_demand
        .iter()
        .filter(|e| partitions.get(e.index).is_none_or(|p| p.id != e.partition))
        .map(|e| &e.partition)
        .chain(state.pending_children.iter().filter(|c| in_flight(c)).filter_map(|c| {
            let at = c.placed.as_ref()?.parent_index;
            partitions.get(at).is_none_or(|p| p.id != c.parent).then_some(&c.parent)
        }))
        .collect();
    let found: HashMap<PartitionId, usize> = if stale.is_empty() {
        HashMap::new()
    } else {
        partitions.iter().enumerate().filter(|(_, p)| stale.contains(&p.id)).map(|(i, p)| (p.id.clone(), i)).collect()
    };
    let stale_worker =
        state.pending_children.iter().filter(|c| in_flight(c)).any(|c| {
            c.placed.as_ref().is_some_and(|pl| workers.get(pl.worker_index).is_none_or(|w| w.id != pl.worker))
        });
    let worker_at: HashMap<&WorkerId, usize> =
        if stale_worker { workers.iter().enumerate().map(|(i, w)| (&w.id, i)).collect() } else { HashMap::new() };
    state.expected_demand.retain_mut(|e| {
        if partitions.get(e.index).is_none_or(|p| p.id != e.partition) {
            match found.get(&e.partition) {
                Some(&i) => e.index = i,
                None => return false,
            }
        }
        if e.until_ms > now {
            pass.model.demand_ops[e.index] = pass.model.demand_ops[e.index].max(e.demand_ops);
        }
        if e.load_until_ms > now {
            pass.model.raise_load(e.index, e.load);
        }
        true
    });
    for c in state.pending_children.iter_mut().filter(|c| c.placed.is_some() && splitting.contains(&c.parent)) {
        let Some(placed) = c.placed.as_mut() else { continue };
        if partitions.get(placed.parent_index).is_none_or(|p| p.id != c.parent) {
            match found.get(&c.parent) {
                Some(&i) => placed.parent_index = i,
                None => continue,
            }
        }
        if workers.get(placed.worker_index).is_none_or(|w| w.id != placed.worker) {
            match worker_at.get(&placed.worker) {
                Some(&w) => placed.worker_index = w,
                None => continue,
            }
        }
        let parent = &partitions[placed.parent_index];
        if !parent.range.contains(c.start) {
            continue;
        }
        let (whole, demand) = measured_load(parent);
        pass.model.raise_arriving(placed.worker_index, piece_load(parent, whole, demand, placed.share), c.planned_load);
    }
}

/// How long a split's pieces hold the load it placed them for: through the cooldown it sized
/// them for, and at least until they are measured.
fn reserve_ms(pass: &Pass<'_>) -> i64 {
    (pass.config.caps.cooldown_secs as i64 * 1000).max(CHILD_MEASUREMENT_LAG_MS)
}

/// A split whose busier side keeps this share of the load divides nothing worth a cooldown.
const MAX_USEFUL_SPLIT_SIDE_RATIO: f64 = 0.9;

pub fn relieve(pass: &mut Pass<'_>, state: &mut PlannerState, hot: &[Hot]) {
    let cfg = &pass.config.partition_overload;
    let mode = cfg.mode;
    for h in hot {
        let p = h.index;
        let info = &pass.input.partitions[p];
        let id = info.id.clone();
        let ratio = h.demand_ops / h.limit_ops;
        // A move's cooldown holds back another move, not the split of a partition over its
        // own limit (the move did not change that demand).
        let after_a_move = state.cooling_from_a_move_only(&id, pass.now_ms) && !pass.model.busy[p];
        if let Some((reason, why)) = pass.blocked(state, p).filter(|_| !after_a_move) {
            pass.decline(
                Policy::PartitionOverload,
                id.as_str(),
                reason,
                format!("hot at {ratio:.2} of its limit but {why}"),
            );
            continue;
        }
        if let Some(g) = &info.group {
            pass.decline(
                Policy::PartitionOverload,
                id.as_str(),
                DeclineReason::AlreadyIsolated,
                format!("hot at {ratio:.2} of its limit but already isolated in group {g}: only more capacity helps"),
            );
            continue;
        }
        let owner = pass.model.owner[p] as usize;
        // A split moves no data: only the pass and cluster caps apply, not the per-worker one.
        if let Err(why) = pass.caps_allow(&[]) {
            pass.decline(
                Policy::PartitionOverload,
                id.as_str(),
                DeclineReason::Cap,
                format!("hot at {ratio:.2} of its limit: {why}"),
            );
            continue;
        }
        if info.stats.sketch.is_none()
            && state.expected_demand.iter().any(|e| e.partition == id && e.until_ms > pass.now_ms)
            && supports(&info.supported_actions, ActionKind::Split)
        {
            pass.decline(
                Policy::PartitionOverload,
                id.as_str(),
                DeclineReason::AwaitingSketch,
                format!("new split child hot at {ratio:.2} of its limit: waiting for its first key sketch to split it"),
            );
            continue;
        }
        let shape = sketch_shape(info.stats.sketch.as_ref());
        let trigger = Trigger {
            partition_demand_ops_per_sec: Some(h.demand_ops),
            partition_limit_ops_per_sec: Some(h.limit_ops).filter(|l| l.is_finite()),
            partition_rejected_per_sec: Some(info.stats.rejected_per_sec),
            partition_growth_ops_per_sec_per_sec: Some(h.growth_per_sec),
            top_key_share_ratio: Some(shape.top_key_share_ratio),
            sequential_write_ratio: Some(shape.sequential_write_ratio),
            ..h.hysteresis.trigger()
        };
        let mut alts = Vec::new();
        match try_split(pass, h, shape, &mut alts) {
            Some((_, _, quantile)) if pass.input.multi_way_split => {
                let pieces = ((1.0 / quantile).round() as usize).clamp(2, MAX_SPLIT_PIECES);
                // Placed for the demand the pieces were sized for: the load growing through the
                // cooldown of the piece that keeps the id.
                let horizon_secs = pass.config.caps.cooldown_secs as f64;
                let projected = h.demand_ops + h.growth_per_sec.max(0.0) * horizon_secs;
                // Its own zone first; across zones only when `zones.cross` allows and its zone
                // has no room for the pieces.
                let mut planned = plan_split_into(pass, p, pieces, projected, false);
                if pass.may_cross_zones()
                    && planned.as_ref().is_err_and(|e| e.0 == DeclineReason::DestinationOverloaded)
                {
                    planned = plan_split_into(pass, p, pieces, projected, true);
                }
                match planned {
                    Ok(plan) => propose_split_into(pass, state, h, plan, trigger, alts),
                    Err((reason, why)) => pass.decline(
                        Policy::PartitionOverload,
                        id.as_str(),
                        reason,
                        format!("hot at {ratio:.2} of its limit: a split into {pieces} pieces {why}"),
                    ),
                }
            }
            Some((key, left_share, _)) if !in_place_split_fits(pass, p, left_share) => {
                let after = pass.model.ratio_plus(owner, in_place_split_delta(pass, p, left_share));
                pass.decline(
                    Policy::PartitionOverload,
                    id.as_str(),
                    DeclineReason::DestinationOverloaded,
                    format!(
                        "hot at {ratio:.2} of its limit: a split at {key} leaves both pieces on worker {}, each under its own limit, which would put it at {after:.2} of capacity (the storage cannot place the new piece elsewhere)",
                        pass.input.workers[owner].id
                    ),
                );
            }
            Some((key, left_share, quantile)) => {
                let spec = ActionSpec::Split { partition: id.clone(), split_key: key };
                let src = pass.model.worker_ratio(owner);
                let (max, mean, _) = pass.model.pool_stats(&pass.groups);
                let after = left_share.max(1.0 - left_share) * ratio;
                let how = if quantile == 0.5 {
                    "at the key that best halves the load".to_owned()
                } else {
                    // Rounded before printing so a small decline reads "+0", not "-0".
                    let growth = h.growth_per_sec.round() + 0.0;
                    format!(
                        "peeling {:.0} % into the side that keeps the id (load changes {growth:+.0} ops/s per s; it must stay under the limit through its cooldown)",
                        left_share * 100.0,
                    )
                };
                let how_long = match h.hysteresis.windows {
                    // A piece of a split that is over its limit from its first window on.
                    0 => "as soon as it was split off".to_owned(),
                    n => format!("for {n} windows"),
                };
                let reason = format!(
                    "partition {id} demands {:.0} ops/s, {ratio:.2} of its limit, {how_long}: split at {key} {how}; the new side goes to the coolest eligible worker",
                    h.demand_ops
                );
                let predicted = Prediction {
                    target_before_ratio: ratio,
                    target_after_ratio: after,
                    source_before_ratio: src,
                    source_after_ratio: src,
                    cluster_max_before_ratio: max,
                    cluster_max_after_ratio: max,
                    cluster_mean_ratio: mean,
                    ..Prediction::default()
                };
                alts.push(alt(
                    format!("move {id} whole"),
                    "a move does not lower a partition's demand against its own limit".into(),
                ));
                let proposal = Proposal {
                    spec,
                    policy: Policy::PartitionOverload,
                    mode,
                    origin: lb_common::protocol::Origin::Online,
                    reason,
                    trigger,
                    predicted,
                    rejected_alternatives: alts,
                };
                let (whole, demand) = (pass.model.load[p], pass.model.demand_ops[p]);
                reserve(pass, state, p, piece_load(info, whole, demand, left_share));
                pass.model.mark_action(p);
                expect_child(
                    state,
                    PendingChild {
                        tenant: info.tenant.clone(),
                        table: info.table.clone(),
                        start: key,
                        parent: id.clone(),
                        from_worker: pass.input.workers[owner].id.clone(),
                        parent_hot: h.hysteresis,
                        split_at_ms: pass.now_ms,
                        expected_demand_ops: h.demand_ops * (1.0 - left_share),
                        planned_load: piece_load(info, whole, demand, 1.0 - left_share),
                        placed: None,
                        stays: false,
                    },
                );
                pass.propose(state, p, mode, proposal);
            }
            None if after_a_move => {
                let why = pass.blocked(state, p).map_or_else(String::new, |(_, why)| why);
                pass.decline(
                    Policy::PartitionOverload,
                    id.as_str(),
                    DeclineReason::Cooldown,
                    format!("hot at {ratio:.2} of its limit, not splittable, and {why}"),
                );
            }
            None => isolate(pass, state, h, shape, trigger, alts),
        }
    }
}

/// What a split in place adds to its worker: both pieces stay, each under its own limit, so the
/// worker serves up to two limits of what it served one of.
fn in_place_split_delta(pass: &Pass<'_>, p: usize, left_share: f64) -> Load {
    let (info, whole, demand) = (&pass.input.partitions[p], pass.model.load[p], pass.model.demand_ops[p]);
    let mut d = piece_load(info, whole, demand, left_share);
    d.add(piece_load(info, whole, demand, 1.0 - left_share), 1.0);
    d.add(whole, -1.0);
    d
}

/// Whether the worker of `p` can take a split in place: it stays under capacity (the pieces
/// serve what `p` rejected; the worker is the place the load goes).
fn in_place_split_fits(pass: &Pass<'_>, p: usize, left_share: f64) -> bool {
    let owner = pass.model.owner[p] as usize;
    pass.model.ratio_plus(owner, in_place_split_delta(pass, p, left_share)) <= 1.0
}

/// A multi-way split ready to propose: keys, each piece's share of the demand, and the worker of
/// each new piece.
#[derive(Debug)]
struct SplitIntoPlan {
    partition: usize,
    keys: Vec<Key>,
    shares: Vec<f64>,
    dests: Vec<usize>,
    /// The demand the pieces were placed for (the projection through the cooldown, or what is
    /// measured if more).
    sized_for_ops: f64,
    /// Whether the first and the last piece are cold ends left on the partition's worker.
    cold_start: bool,
    cold_end: bool,
    owner_before: f64,
    owner_after: f64,
    /// The hottest worker receiving a piece, before and after.
    dest_before: f64,
    dest_after: f64,
}

/// The keys of a multi-way split into `k` pieces of equal load. Where the load sits in a band
/// and a wide cold end lies before or after it ([`cold_ends`]), the band alone is cut into the
/// `k` pieces and each cold end is a piece of its own: the first keeps the id and the worker,
/// the last stays on that worker too, so only the band's narrow pieces (few bytes) stream to
/// other workers, not the ends' bulk. The cold ends are dropped where they would take the split
/// past [`MAX_SPLIT_PIECES`].
fn split_into_keys(range: KeyRange, sketch: &KeySketch, k: usize) -> SplitKeys {
    let (mut lo, mut hi) = cold_ends(range, sketch);
    if k + usize::from(lo.is_some()) + usize::from(hi.is_some()) > MAX_SPLIT_PIECES {
        (lo, hi) = (None, None);
    }
    let share_at = |key: Option<Key>, or: f64| key.map_or(or, |key| split_key_share(range, Some(sketch), key));
    let (from, to) = (share_at(lo, 0.0), share_at(hi, 1.0));
    let mut keys: Vec<Key> = Vec::with_capacity(k + 1);
    keys.extend(lo);
    for i in 1..k {
        if let Some((key, _)) = split_key(range, sketch, from + (to - from) * i as f64 / k as f64)
            && keys.last().is_none_or(|last| key > *last)
            && hi.is_none_or(|hi| key < hi)
        {
            keys.push(key);
        }
    }
    let cold_end = hi.is_some_and(|hi| keys.last().is_none_or(|last| hi > *last));
    if cold_end {
        keys.extend(hi);
    }
    SplitKeys { cold_start: lo.is_some() && keys.first() == lo.as_ref(), cold_end, keys }
}

/// The width in keys of piece `i` when `range` is cut at `keys`.
fn piece_width(range: KeyRange, keys: &[Key], i: usize) -> f64 {
    let start = if i == 0 { range.start.0 } else { keys[i - 1].0 };
    let end = keys.get(i).map_or(range.end.0, |k| k.0 - 1);
    (end - start) as f64 + 1.0
}

/// The keys of a multi-way split, and whether its first and last pieces are cold ends.
struct SplitKeys {
    keys: Vec<Key>,
    cold_start: bool,
    cold_end: bool,
}

/// Cuts `p` at the sketch's load quantiles `1/k .. (k-1)/k` (of its band, cold ends cut off:
/// [`split_into_keys`]) and places every new piece, largest first: a cold end on its own
/// worker; any other on its own worker while that stays within the high watermark and a move
/// could still drain it (no bytes move; the piece is scattered once measured, as after a split
/// in place), else on the coolest worker of
/// the pool that [`Pass::destination_allows`] it, the pieces already placed, the load in flight
/// and the capacity a source lends to its streams counted, each piece carrying its share of
/// `projected_demand` (what a growing load reaches within the cooldown). Receivers are of the
/// partition's own zone; with `may_cross`, a piece none of them has the room for (none merely
/// at its action cap) goes to the coolest worker of the coolest other zone. The error names the
/// piece no worker can take.
fn plan_split_into(
    pass: &Pass<'_>,
    p: usize,
    k: usize,
    projected_demand: f64,
    may_cross: bool,
) -> Result<SplitIntoPlan, (DeclineReason, String)> {
    let info = &pass.input.partitions[p];
    let Some(sketch) = info.stats.sketch.as_ref() else {
        return Err((DeclineReason::NoRemedy, "needs a key sketch".into()));
    };
    let SplitKeys { keys, cold_start, cold_end } = split_into_keys(info.range, sketch, k);
    if keys.is_empty() {
        return Err((DeclineReason::NoRemedy, "finds no key inside the range".into()));
    }
    let shares = piece_shares(info.range, Some(sketch), &keys);
    let owner = pass.model.owner[p] as usize;
    let (whole, demand) = (pass.model.load[p], pass.model.demand_ops[p].max(projected_demand));
    let owner_before = pass.model.worker_ratio(owner);
    let mut added: Vec<(usize, Load)> = Vec::new();
    let add = |w: usize, l: Load, added: &mut Vec<(usize, Load)>| match added.iter_mut().find(|(x, _)| *x == w) {
        Some((_, a)) => a.add(l, 1.0),
        None => added.push((w, l)),
    };
    let mut first = piece_load(info, whole, demand, shares[0]);
    first.add(whole, -1.0);
    add(owner, first, &mut added);
    let extra =
        |w: usize, added: &[(usize, Load)]| added.iter().find(|(x, _)| *x == w).map_or(Load::default(), |a| a.1);
    // A cold end on the right stays too: it is most of the bytes and little of the load.
    if cold_end {
        add(owner, piece_load(info, whole, demand, shares[shares.len() - 1]), &mut added);
    }
    let mut order: Vec<usize> = (1..shares.len() - usize::from(cold_end)).collect();
    order.sort_by(|&a, &b| shares[b].total_cmp(&shares[a]));
    let mut dests = vec![owner; keys.len()];
    let cap = pass.config.caps.max_inflight_per_worker;
    let high = pass.config.worker_overload.high_watermark_ratio;
    for i in order {
        let l = piece_load(info, whole, demand, shares[i]);
        // Its own worker first while it stays within the high watermark: no bytes move (a
        // metadata change), and the piece is scattered once measured. And only while a move
        // could stream from it without taking it over capacity: kept up to the watermark, a
        // scatter or a balancing move would push it past capacity while it streams (or, past
        // `max_source_transient_ratio`, never start), and it would stay that hot.
        let mut own = extra(owner, &added);
        own.add(l, 1.0);
        let own_ratio = pass.model.ratio_plus(owner, own) / pass.model.drain_factor(owner);
        let stays = own_ratio <= high && pass.model.with_one_more_move(owner, own_ratio) <= 1.0;
        let mut best: Option<(usize, f64)> = stays.then_some((owner, own_ratio));
        // Its own zone first; another zone only when none of its own allows the piece and
        // `zones.cross` lets it cross (the coolest zone, then its coolest worker).
        // A zone is full when its workers lack the load room, not when they are at their action
        // cap (that passes within a move's time): a capped worker of its own zone keeps it home.
        let mut capped_home = false;
        for crossing in [false, true] {
            if stays
                || (crossing
                    && (!may_cross
                        || !pass.zones.several()
                        || capped_home
                        || best.is_some_and(|(_, r)| pass.destination_allows(owner_before, r))))
            {
                break;
            }
            let mut best_key = (f64::INFINITY, f64::INFINITY);
            // Crossing, the coolest zone first; at home, no zone term (an empty list reads 0).
            let zone_ratio = if crossing { pass.zone_ratios_by_worker() } else { Vec::new() };
            for w in 0..pass.input.workers.len() {
                if !pass.model.healthy[w] || pass.groups[w].is_some() || pass.zones.same(owner, w) == crossing {
                    continue;
                }
                let receiving = added.iter().filter(|(x, _)| *x == w).count() as u32;
                if w != owner && pass.model.worker_actions[w] + receiving >= cap {
                    capped_home |= !crossing;
                    continue;
                }
                let mut e = extra(w, &added);
                e.add(l, 1.0);
                // Against what it has left while the streams from it run (a source lends capacity).
                let r = pass.model.ratio_plus(w, e) / pass.model.drain_factor(w);
                let key = (zone_ratio.get(w).copied().unwrap_or(0.0), r);
                if key < best_key && (!crossing || pass.destination_allows(owner_before, r)) {
                    best = Some((w, r));
                    best_key = key;
                }
            }
        }
        match best {
            Some((w, r)) if pass.destination_allows(owner_before, r) => {
                dests[i - 1] = w;
                add(w, l, &mut added);
            }
            Some((w, r)) => {
                return Err((
                    DeclineReason::DestinationOverloaded,
                    format!(
                        "has no place for piece {} ({:.0} ops/s): the coolest worker, {}, would be at {r:.2} of capacity (high watermark {:.2}), with the pieces already placed and the load in flight counted",
                        i + 1,
                        demand * shares[i],
                        pass.input.workers[w].id,
                        pass.config.worker_overload.high_watermark_ratio
                    ),
                ));
            }
            None => return Err((DeclineReason::Cap, "has no worker under its concurrent action cap".into())),
        }
    }
    let owner_after = pass.model.ratio_plus(owner, extra(owner, &added));
    let (mut dest_before, mut dest_after) = (0.0f64, 0.0f64);
    for &(w, l) in added.iter().filter(|(w, _)| *w != owner) {
        dest_before = dest_before.max(pass.model.worker_ratio(w));
        dest_after = dest_after.max(pass.model.ratio_plus(w, l));
    }
    Ok(SplitIntoPlan {
        partition: p,
        keys,
        shares,
        dests,
        sized_for_ops: demand,
        cold_start,
        cold_end,
        owner_before,
        owner_after,
        dest_before,
        dest_after,
    })
}

fn propose_split_into(
    pass: &mut Pass<'_>,
    state: &mut PlannerState,
    h: &Hot,
    plan: SplitIntoPlan,
    trigger: Trigger,
    mut alts: Vec<Alternative>,
) {
    let p = plan.partition;
    let mode = pass.config.partition_overload.mode;
    let info = &pass.input.partitions[p];
    let id = info.id.clone();
    let owner = pass.model.owner[p] as usize;
    // The receivers' caps apply; the partition's own worker is exempt, as for a split in place:
    // relieving the hot partition is what its in-flight actions must not hold back.
    let mut receivers: Vec<usize> = plan.dests.iter().copied().filter(|&w| w != owner).collect();
    receivers.sort_unstable();
    receivers.dedup();
    if let Err(why) = pass.caps_allow(&receivers) {
        pass.decline(Policy::PartitionOverload, id.as_str(), DeclineReason::Cap, format!("split into pieces: {why}"));
        return;
    }
    let ratio = h.demand_ops / h.limit_ops;
    let largest = plan.shares.iter().copied().fold(0.0, f64::max);
    let n = plan.shares.len();
    let placed: Vec<String> = plan
        .keys
        .iter()
        .zip(&plan.dests)
        .zip(&plan.shares[1..])
        .map(|((k, &w), s)| {
            let zone = if pass.zones.same(owner, w) { "" } else { pass.zones.name(w) };
            let crossing = if zone.is_empty() { String::new() } else { format!(" in zone {zone}") };
            format!("{k} ({:.0} %) to {}{crossing}", s * 100.0, pass.input.workers[w].id)
        })
        .collect();
    let crossing = plan.dests.iter().find(|&&w| !pass.zones.same(owner, w)).map_or(String::new(), |&w| {
        let home = pass.zones.name(owner);
        format!(
            "; pieces cross from zone {home} to zone {} (at {:.2} of its capacity): no worker of zone {home} has room for them, and zones.cross = when_full",
            pass.zones.name(w),
            pass.zone_ratio(w)
        )
    });
    let cold = match (plan.cold_start, plan.cold_end) {
        (false, false) => String::new(),
        (start, end) => {
            let ends = [start.then_some(0), end.then_some(n - 1)];
            let share: f64 = ends.iter().flatten().map(|&i| plan.shares[i]).sum();
            let key_share: f64 = ends.iter().flatten().map(|&i| piece_width(info.range, &plan.keys, i)).sum::<f64>()
                / info.range.width();
            format!(
                " (the band holding its load; its cold {}, {:.0} % of its keys and {:.0} % of its demand, stay on {}: only the band's pieces stream)",
                if start && end { "ends" } else { "end" },
                key_share * 100.0,
                share * 100.0,
                pass.input.workers[owner].id
            )
        }
    };
    let reason = format!(
        "partition {id} demands {:.0} ops/s, {ratio:.2} of its limit, for {} windows: split it into {n} pieces at the sketch's load quantiles{cold} in one action (the largest {:.0} % of its demand, {:.2} of a limit), first piece {:.0} % stays on {}; new pieces {}; its worker {:.2} -> {:.2}, the hottest receiver {:.2} -> {:.2}{crossing}",
        h.demand_ops,
        h.hysteresis.windows,
        largest * 100.0,
        largest * ratio,
        plan.shares[0] * 100.0,
        pass.input.workers[owner].id,
        placed.join(", "),
        plan.owner_before,
        plan.owner_after,
        plan.dest_before,
        plan.dest_after,
    );
    alts.push(alt(
        format!("split {id} in two"),
        format!("each half would carry about {:.2} of a limit: {n} pieces are needed, and halving one split at a time waits for a measurement and a cooldown between cuts", ratio / 2.0),
    ));
    alts.push(alt(
        format!("split {id} into {n} pieces on its own worker"),
        "every piece gets its own limit: the worker would serve all of it and overload".into(),
    ));
    let (max, mean, _) = pass.model.pool_stats(&pass.groups);
    let predicted = Prediction {
        target_before_ratio: ratio,
        target_after_ratio: largest * ratio,
        source_before_ratio: plan.owner_before,
        source_after_ratio: plan.owner_after,
        dest_before_ratio: Some(plan.dest_before),
        dest_after_ratio: Some(plan.dest_after),
        cluster_max_before_ratio: max,
        cluster_max_after_ratio: max.max(plan.dest_after),
        cluster_mean_ratio: mean,
        ..Prediction::default()
    };
    let pieces = Pieces {
        partition: p,
        keys: plan.keys,
        shares: plan.shares,
        dests: plan.dests,
        demand_ops: h.demand_ops,
        sized_for_ops: plan.sized_for_ops,
        parent_hot: h.hysteresis,
        cold_end: plan.cold_end,
        group: None,
        first_to: None,
    };
    propose_pieces(pass, state, pieces, mode, |spec| Proposal {
        spec,
        policy: Policy::PartitionOverload,
        mode,
        origin: lb_common::protocol::Origin::Online,
        reason,
        trigger,
        predicted,
        rejected_alternatives: alts,
    });
}

/// A multi-way split as proposed: its cut keys, each piece's share of the demand (the first
/// stays), each new piece's worker, and what the pieces are expected to carry.
struct Pieces {
    partition: usize,
    keys: Vec<Key>,
    shares: Vec<f64>,
    dests: Vec<usize>,
    /// The demand measured now, shared out as each new piece's expected demand.
    demand_ops: f64,
    /// The demand the pieces were sized for: each holds its share of it on its worker.
    sized_for_ops: f64,
    parent_hot: super::state::Hysteresis,
    /// The last piece is a cold end left on the partition's worker: never scattered.
    cold_end: bool,
    /// The group the pieces created on its workers join ([`ActionSpec::SplitInto`]).
    group: Option<GroupId>,
    /// Where the first piece (the id) goes, when not its worker.
    first_to: Option<usize>,
}

/// Proposes `pieces` (the proposal built around its spec) and expects its new pieces: each
/// holds what it was sized for where it goes, and the model carries the split from now on.
fn propose_pieces(
    pass: &mut Pass<'_>,
    state: &mut PlannerState,
    pieces: Pieces,
    mode: PolicyMode,
    proposal: impl FnOnce(ActionSpec) -> Proposal,
) {
    let p = pieces.partition;
    let info = &pass.input.partitions[p];
    let id = info.id.clone();
    let owner = pass.model.owner[p] as usize;
    let spec = ActionSpec::SplitInto {
        partition: id.clone(),
        split_keys: pieces.keys.clone(),
        to_workers: pieces.dests.iter().map(|&w| pass.input.workers[w].id.clone()).collect(),
        group: pieces.group.clone(),
        first_to_worker: pieces.first_to.map(|w| pass.input.workers[w].id.clone()),
    };
    let (whole, sized_for) = (pass.model.load[p], pieces.sized_for_ops);
    reserve(pass, state, p, piece_load(info, whole, sized_for, pieces.shares[0]));
    let last = pieces.keys.len() - 1;
    for (i, ((k, share), &to)) in pieces.keys.iter().zip(&pieces.shares[1..]).zip(&pieces.dests).enumerate() {
        expect_child(
            state,
            PendingChild {
                tenant: info.tenant.clone(),
                table: info.table.clone(),
                start: *k,
                parent: id.clone(),
                // Placed already: only a piece left on its parent's worker may be scattered.
                from_worker: pass.input.workers[owner].id.clone(),
                parent_hot: pieces.parent_hot,
                split_at_ms: pass.now_ms,
                expected_demand_ops: pieces.demand_ops * share,
                planned_load: piece_load(info, whole, sized_for, *share),
                placed: Some(PlacedPiece {
                    worker: pass.input.workers[to].id.clone(),
                    worker_index: to,
                    parent_index: p,
                    share: *share,
                }),
                stays: pieces.cold_end && i == last,
            },
        );
    }
    let input = pass.input;
    pass.model.apply_split_into(input, p, &pieces.shares, &pieces.dests, pieces.first_to);
    let proposal = proposal(spec);
    pass.propose(state, p, mode, proposal);
}

/// The split key, the share of load left of it and the quantile aimed at; why not in `alts`.
fn try_split(
    pass: &Pass<'_>,
    h: &Hot,
    shape: SketchShape,
    alts: &mut Vec<Alternative>,
) -> Option<(lb_common::ids::Key, f64, f64)> {
    let cfg = &pass.config.partition_overload;
    let info = &pass.input.partitions[h.index];
    let candidate = format!("split {}", info.id);
    if !supports(&info.supported_actions, ActionKind::Split) {
        alts.push(alt(candidate, "the storage system cannot split this partition".into()));
        return None;
    }
    if shape.top_key_share_ratio >= cfg.single_key_share_ratio {
        alts.push(alt(
            candidate,
            format!(
                "one key holds {:.0} % of its ops (>= {:.0} %): no split can divide it",
                shape.top_key_share_ratio * 100.0,
                cfg.single_key_share_ratio * 100.0
            ),
        ));
        return None;
    }
    if shape.sequential_write_ratio >= cfg.sequential_write_ratio {
        alts.push(alt(
            candidate,
            format!(
                "{:.0} % of its writes append at the tail (>= {:.0} %): a split only moves the tail",
                shape.sequential_write_ratio * 100.0,
                cfg.sequential_write_ratio * 100.0
            ),
        ));
        return None;
    }
    let Some(sketch) = info.stats.sketch.as_ref() else {
        alts.push(alt(candidate, "no key-access sketch to place the split key".into()));
        return None;
    };
    // Size the side that keeps the id (it enters the cooldown) for the load expected by then.
    let target = cfg.split_target_ratio * h.limit_ops;
    let horizon_secs = pass.config.caps.cooldown_secs as f64;
    let projected = h.demand_ops + h.growth_per_sec.max(0.0) * horizon_secs;
    let pieces = if target.is_finite() && target > 0.0 { (projected / target).ceil().max(2.0) } else { 2.0 };
    let quantile = if pieces <= 2.0 { 0.5 } else { 1.0 / pieces };
    let Some((key, left)) = split_key(info.range, sketch, quantile) else {
        alts.push(alt(candidate, "the sketch has no load or the range is a single key".into()));
        return None;
    };
    if left.max(1.0 - left) >= MAX_USEFUL_SPLIT_SIDE_RATIO && quantile == 0.5 {
        alts.push(alt(
            candidate,
            format!(
                "the best split leaves {:.0} % on one side: the load is concentrated",
                left.max(1.0 - left) * 100.0
            ),
        ));
        return None;
    }
    if quantile != 0.5 {
        alts.push(alt(
            format!("split {} at its load median", info.id),
            format!(
                "projected {projected:.0} ops/s within the {horizon_secs:.0} s cooldown needs {pieces:.0} pieces of <= {target:.0}: the half keeping the id would outgrow its limit while it cannot be split again"
            ),
        ));
    }
    Some((key, left, quantile))
}

fn isolate(
    pass: &mut Pass<'_>,
    state: &mut PlannerState,
    h: &Hot,
    shape: SketchShape,
    trigger: Trigger,
    mut alts: Vec<Alternative>,
) {
    let cfg = &pass.config;
    let mode = cfg.partition_overload.mode;
    let p = h.index;
    let info = &pass.input.partitions[p];
    let id = info.id.clone();
    let ratio = h.demand_ops / h.limit_ops;
    let what = if shape.top_key_share_ratio >= cfg.partition_overload.single_key_share_ratio {
        format!("{:.0} % of its ops are on one key", shape.top_key_share_ratio * 100.0)
    } else if shape.sequential_write_ratio >= cfg.partition_overload.sequential_write_ratio {
        format!("{:.0} % of its writes append at the tail", shape.sequential_write_ratio * 100.0)
    } else {
        "it cannot be split".to_owned()
    };
    let high = cfg.worker_overload.high_watermark_ratio;
    let owner = pass.model.owner[p] as usize;
    if let Err(why) = pass.caps_allow(&[owner]) {
        pass.decline(
            Policy::PartitionOverload,
            id.as_str(),
            DeclineReason::Cap,
            format!("hot at {ratio:.2} of its limit and {what}; isolation: {why}"),
        );
        return;
    }
    let (mut destination_full, mut cross_zone, mut source_full) = (false, false, false);
    if supports(&info.supported_actions, ActionKind::Group)
        && let Some((group, dest)) = pass.isolation_group(p)
    {
        match pass.key_cut(p, &group, dest) {
            Ok(cut) => {
                let why_hot =
                    format!("partition {id} demands {:.0} ops/s, {ratio:.2} of its limit, and {what}", h.demand_ops);
                let how = (Policy::PartitionOverload, mode);
                propose_key_cut(pass, state, cut, how, why_hot, trigger, alts);
                return;
            }
            Err(why) => alts.push(alt(format!("cut the hot key out of {id}"), why)),
        }
        let placed = pass.group_isolation(p, &group);
        destination_full |= placed.is_err();
        let placed = placed.and_then(|e| pass.full_rate_affordable(owner).map(|()| e));
        source_full |= placed.is_err() && !destination_full;
        if let Err(why) = &placed {
            alts.push(alt(format!("group {id} into {group}"), why.clone()));
        }
        if let Ok(e) = placed {
            let predicted =
                Prediction { target_before_ratio: ratio, target_after_ratio: ratio, ..pass.move_prediction(p, &e) };
            let reason = format!(
                "partition {id} demands {:.0} ops/s, {ratio:.2} of its limit, and {what}: isolate it on dedicated group {group} (worker {}, {:.2} -> {:.2}) so its worker's other partitions are not dragged down",
                h.demand_ops, pass.input.workers[e.dest].id, e.dest_before, e.dest_after
            );
            let proposal = Proposal {
                spec: ActionSpec::Group { target: GroupTarget::Partition { partition: id.clone() }, group },
                policy: Policy::PartitionOverload,
                mode,
                origin: lb_common::protocol::Origin::Online,
                reason,
                trigger,
                predicted,
                rejected_alternatives: alts,
            };
            pass.model.apply_move(p, e.dest);
            pass.propose(state, p, mode, proposal);
            return;
        }
    } else {
        alts.push(alt(
            format!("group {id}"),
            "the topology has no dedicated group with a healthy worker (or the partition cannot be grouped)".into(),
        ));
    }
    if supports(&info.supported_actions, ActionKind::Move) && pass.model.next_stream(owner).is_none() {
        source_full = true;
        alts.push(alt(
            format!("move {id}"),
            format!(
                "its worker {} is not over its capacity and has {:.3} of it spare, where a move's stream needs {:.3}: the move would make it reject",
                pass.input.workers[owner].id,
                pass.model.spare(owner),
                pass.model.min_stream_spare()
            ),
        ));
    } else if supports(&info.supported_actions, ActionKind::Move) {
        let max_after = pass.model.worker_ratio(owner).min(high);
        let found = pass.best_destination(p, None, max_after, &mut alts);
        destination_full |= found == Err(DeclineReason::DestinationOverloaded);
        cross_zone |= found == Err(DeclineReason::CrossZone);
        if let Ok(e) = found {
            let predicted =
                Prediction { target_before_ratio: ratio, target_after_ratio: ratio, ..pass.move_prediction(p, &e) };
            let mut reason = format!(
                "partition {id} demands {:.0} ops/s, {ratio:.2} of its limit, and {what}: no dedicated group, so isolate it by moving it to the coolest worker {} ({:.2} -> {:.2}){}",
                h.demand_ops,
                pass.input.workers[e.dest].id,
                e.dest_before,
                e.dest_after,
                pass.zone_note(owner, e.dest)
            );
            let (spec, note) = pass.plan_move(p, e.dest);
            reason.push_str(&note);
            let proposal = Proposal {
                spec,
                policy: Policy::PartitionOverload,
                mode,
                origin: lb_common::protocol::Origin::Online,
                reason,
                trigger,
                predicted,
                rejected_alternatives: alts,
            };
            pass.propose(state, p, mode, proposal);
            return;
        }
    }
    // A dedication streams the worker's other partitions away at the storage's own pace.
    match pass.full_rate_affordable(owner).and_then(|()| pass.dedication(state, p)) {
        Ok(d) => {
            let why_hot =
                format!("partition {id} demands {:.0} ops/s, {ratio:.2} of its limit, and {what}", h.demand_ops);
            pass.propose_dedication(state, d, Policy::PartitionOverload, why_hot, trigger, alts);
            return;
        }
        Err(why) => alts.push(alt(format!("dedicate its worker to {id}"), why)),
    }
    pass.decline_with(
        Policy::PartitionOverload,
        id.as_str(),
        nothing_helps(cross_zone, destination_full, source_full),
        || {
            let why = alts.iter().map(|a| format!("{}: {}", a.candidate, a.why)).collect::<Vec<_>>().join("; ");
            format!("hot at {ratio:.2} of its limit and {what}; nothing helps: {why}")
        },
    );
}

/// Expects the new piece of a split proposed this pass. A dry-run proposal is repeated every
/// pass until an operator approves it: its children are expected too (an approved split gets its
/// pieces scattered like an automatic one), once each, from the latest proposal.
fn expect_child(state: &mut PlannerState, child: PendingChild) {
    let same = |c: &PendingChild| {
        c.start == child.start && c.table == child.table && c.tenant == child.tenant && c.parent == child.parent
    };
    match state.pending_children.iter_mut().find(|c| same(c)) {
        Some(c) => *c = child,
        None => state.pending_children.push(child),
    }
}

/// Holds `load` for the piece of split partition `p` that keeps its id (its measurement is the
/// whole partition's until the window has passed the split). It replaces any floor the
/// partition had: a dry-run proposal repeated every pass, or a young piece split again.
fn reserve(pass: &Pass<'_>, state: &mut PlannerState, p: usize, load: Load) {
    let partition = pass.input.partitions[p].id.clone();
    state.expected_demand.retain_mut(|e| {
        if e.partition == partition {
            e.load_until_ms = 0;
        }
        e.until_ms.max(e.load_until_ms) > pass.now_ms
    });
    let load_until_ms = pass.now_ms + reserve_ms(pass);
    state.expected_demand.push(ExpectedDemand {
        partition,
        demand_ops: 0.0,
        until_ms: 0,
        load,
        load_until_ms,
        index: p,
    });
}

/// Finds split children that appeared since the last pass: each inherits its parent's
/// hysteresis (a still-hot child is split again without waiting) and joins the scatter queue
/// (not a cold end a multi-way split left on its worker on purpose).
pub fn adopt_children(pass: &Pass<'_>, state: &mut PlannerState) {
    if state.pending_children.is_empty() {
        return;
    }
    let window_ms = (pass.config.partition_overload.scatter_window_secs * 1000) as i64;
    let (now, reserve) = (pass.now_ms, reserve_ms(pass));
    state.pending_children.retain(|c| now - c.split_at_ms <= window_ms);
    // Only a partition starting where a pending child starts can be one: a binary search on the
    // start keys, not a look at every pending child, for each of the input's partitions.
    let mut starts: Vec<Key> = state.pending_children.iter().map(|c| c.start).collect();
    starts.sort_unstable();
    for (i, p) in pass.input.partitions.iter().enumerate() {
        if starts.binary_search(&p.range.start).is_err() {
            continue;
        }
        if let Some(k) = state
            .pending_children
            .iter()
            .position(|c| c.start == p.range.start && c.table == p.table && c.tenant == p.tenant && c.parent != p.id)
        {
            let child = state.pending_children.swap_remove(k);
            if child.expected_demand_ops > 0.0 || child.planned_load != Load::default() {
                state.expected_demand.push(ExpectedDemand {
                    partition: p.id.clone(),
                    demand_ops: child.expected_demand_ops,
                    until_ms: child.split_at_ms + CHILD_MEASUREMENT_LAG_MS,
                    load: child.planned_load,
                    load_until_ms: child.split_at_ms + reserve,
                    index: i,
                });
            }
            let h = state.partitions.at_mut(i, &p.id);
            h.windows = h.windows.max(child.parent_hot.windows);
            if child.parent_hot.engaged && !h.engaged {
                // The parent's episode goes on in the child: its onset and detection with it.
                (h.since_ms, h.engaged_ms) = (child.parent_hot.since_ms, child.parent_hot.engaged_ms);
            }
            h.engaged |= child.parent_hot.engaged;
            if !child.stays {
                state.scatter.push(Scatter { partition: p.id.clone(), child });
            }
        }
    }
}

/// Moves the new side of each recent split to the coolest eligible worker. A child that cannot
/// go yet (hot, capped, its worker streaming) is tried again next pass; one proposed in dry run
/// is offered again every pass like any dry-run proposal, so an approval, or the policy turned
/// to `auto`, finds it current. It leaves the queue once off its parent's worker, gone, or
/// outside the scatter window.
pub fn scatter_children(pass: &mut Pass<'_>, state: &mut PlannerState) {
    if state.scatter.is_empty() {
        return;
    }
    let window_ms = (pass.config.partition_overload.scatter_window_secs * 1000) as i64;
    let now = pass.now_ms;
    let queued: HashMap<&PartitionId, usize> =
        state.scatter.iter().enumerate().map(|(k, s)| (&s.partition, k)).collect();
    let mut index = vec![None; state.scatter.len()];
    for (i, p) in pass.input.partitions.iter().enumerate() {
        if let Some(&k) = queued.get(&p.id) {
            index[k] = Some(i);
        }
    }
    let queue = std::mem::take(&mut state.scatter);
    for (queued, p) in queue.into_iter().zip(index) {
        let Some(p) = p else { continue };
        let owner = pass.model.owner[p] as usize;
        if now - queued.child.split_at_ms > window_ms || pass.input.workers[owner].id != queued.child.from_worker {
            continue;
        }
        let keep = match scatter_one(pass, state, p, owner, &queued.child) {
            Ok(mode) => mode == PolicyMode::DryRun,
            Err((reason, why)) => {
                pass.decline(Policy::PartitionOverload, queued.partition.as_str(), reason, why);
                true
            }
        };
        if keep {
            state.scatter.push(queued);
        }
    }
}

/// Proposes the move of split child `p` off its parent's worker `owner`, in the policy's mode,
/// or says why it waits.
fn scatter_one(
    pass: &mut Pass<'_>,
    state: &mut PlannerState,
    p: usize,
    owner: usize,
    child: &PendingChild,
) -> Result<PolicyMode, (DeclineReason, String)> {
    let cfg = &pass.config.partition_overload;
    let (mode, engage) = (cfg.mode, cfg.engage_ratio);
    let limit = pass.input.partitions[p].limit.map_or(f64::INFINITY, |l| l.ops_per_sec);
    if pass.model.demand_ops[p] >= engage * limit {
        return Err((DeclineReason::SplitFirst, "split child is itself hot: split it before scattering".into()));
    }
    if let Some((reason, why)) = pass.blocked(state, p) {
        return Err((reason, format!("scatter of split child: {why}")));
    }
    pass.caps_allow_deferrable(&[owner])
        .map_err(|why| (DeclineReason::Cap, format!("scatter of split child: {why}")))?;
    // A scatter is not urgent (the child fits its limit): it must not drain its worker far
    // into rejecting while it streams, as for a balancing move.
    let transient_max = pass.config.imbalance.max_source_transient_ratio;
    let transient = pass.model.transient_ratio_with_one_more_move(owner);
    if transient > transient_max || pass.model.next_stream(owner).is_none() {
        let why = format!(
            "scatter of split child waits: its worker {} would be at {transient:.2} of capacity while one more move streams from it (max {transient_max:.2})",
            pass.input.workers[owner].id
        );
        return Err((DeclineReason::SourceAtLimit, why));
    }
    let mut alts = Vec::new();
    let max_after = pass.model.worker_ratio(owner);
    let e = pass.best_destination(p, None, max_after, &mut alts).map_err(|reason| {
        let why = alts.iter().map(|a| format!("{}: {}", a.candidate, a.why)).collect::<Vec<_>>().join("; ");
        (reason, format!("scatter of split child not done: {why}"))
    })?;
    let mut reason = format!(
        "scatter the new side of the split of {} to the coolest eligible worker {} ({:.2} -> {:.2}); its old worker {} goes {:.2} -> {:.2}{}",
        child.parent,
        pass.input.workers[e.dest].id,
        e.dest_before,
        e.dest_after,
        child.from_worker,
        e.src_before,
        e.src_after,
        pass.zone_note(owner, e.dest)
    );
    let predicted = pass.move_prediction(p, &e);
    let (spec, note) = pass.plan_move(p, e.dest);
    reason.push_str(&note);
    let proposal = Proposal {
        spec,
        policy: Policy::PartitionOverload,
        mode,
        origin: lb_common::protocol::Origin::Online,
        reason,
        trigger: Trigger {
            partition_demand_ops_per_sec: Some(pass.model.demand_ops[p]),
            worker_load_ratio: Some(e.src_before),
            ..child.parent_hot.trigger()
        },
        predicted,
        rejected_alternatives: alts,
    };
    pass.propose(state, p, mode, proposal);
    Ok(mode)
}

/// A partition under this size moves whole about as fast as its hot key is cut out (the cut is
/// a split, a metadata round of seconds; at 100 MiB/s 256 MiB streams in about 2.5 s), so it is
/// moved whole.
pub const KEY_CUT_MIN_BYTES: u64 = 256 << 20;

/// A partition's hot key cut out into a piece of its own, placed alone on a group's worker
/// ([`Pass::key_cut`]).
#[derive(Debug, Clone)]
pub struct KeyCut {
    pub partition: usize,
    pub group: GroupId,
    pub key: Key,
    /// The split keys: the hot key, and the key after it unless it is the range's last.
    pub keys: Vec<Key>,
    /// Each new piece's worker: the key's goes to `dest`, the rest stays.
    pub dests: Vec<usize>,
    /// `dest` when the key's piece is the first (the key is the range's first).
    pub first_to: Option<usize>,
    pub shares: Vec<f64>,
    pub dest: usize,
    pub src_before: f64,
    pub src_after: f64,
    pub dest_before: f64,
    pub dest_after: f64,
    pub group_after: f64,
}

impl KeyCut {
    /// The key piece's share of the demand: the first piece's when it is the one that goes.
    pub fn key_share(&self) -> f64 {
        self.shares[if self.first_to.is_some() { 0 } else { 1 }]
    }
}

impl Pass<'_> {
    /// Whether partition `p`'s hottest key can be cut out and sent alone to worker `dest` of
    /// `group`, instead of moving the whole partition there: one split whose only streaming
    /// piece is one key, so the worker is relieved in about a metadata round, where the whole
    /// partition's bytes would stream for as long as they take (a 1 GiB partition: ~11 s in the
    /// testbed). Why not otherwise.
    pub fn key_cut(&self, p: usize, group: &GroupId, dest: usize) -> Result<KeyCut, String> {
        let info = &self.input.partitions[p];
        if !self.input.multi_way_split {
            return Err("the storage system does not place split pieces on other workers (multi-way split)".into());
        }
        if !supports(&info.supported_actions, ActionKind::Split) {
            return Err("the storage system cannot split this partition".into());
        }
        if info.stored_bytes < KEY_CUT_MIN_BYTES {
            return Err(format!(
                "it holds {} MiB (under {} MiB): moved whole it streams about as long as a cut takes",
                info.stored_bytes >> 20,
                KEY_CUT_MIN_BYTES >> 20
            ));
        }
        let sketch = info.stats.sketch.as_ref();
        let sequential = sketch.map_or(0.0, |s| s.sequential_write_ratio);
        if sequential >= self.config.partition_overload.sequential_write_ratio {
            return Err(format!(
                "{:.0} % of its writes append at the tail: the hot key moves on, a cut behind it stays hot",
                sequential * 100.0
            ));
        }
        let Some(top) = sketch
            .into_iter()
            .flat_map(|s| &s.top_keys)
            .filter(|t| info.range.contains(t.key))
            .max_by(|a, b| a.share_ratio.total_cmp(&b.share_ratio))
        else {
            return Err("the sketch names no hot key".into());
        };
        let single = self.config.partition_overload.single_key_share_ratio;
        if top.share_ratio < single {
            return Err(format!(
                "its hottest key holds {:.0} % of its ops (under {:.0} %): no one key to cut out",
                top.share_ratio * 100.0,
                single * 100.0
            ));
        }
        let (key, range) = (top.key, info.range);
        if range.start == range.end {
            return Err(format!("it is one key already ({key})"));
        }
        // The key's piece: the one starting at the key, or the first (the id) when the key is
        // the range's first (a previous cut at this key made it so).
        let (keys, first_to) = if key == range.start {
            (vec![Key(key.0 + 1)], Some(dest))
        } else if key < range.end {
            (vec![key, Key(key.0 + 1)], None)
        } else {
            (vec![key], None)
        };
        let owner = self.model.owner[p] as usize;
        if self.model.worker_actions[dest] >= self.config.caps.max_inflight_per_worker {
            return Err(format!("{} of group {group} is at its concurrent action cap", self.input.workers[dest].id));
        }
        let shares = piece_shares(info.range, sketch, &keys);
        let (whole, demand) = (self.model.load[p], self.model.demand_ops[p]);
        // The key's piece, as in [`KeyCut::key_share`]: the first when it is the one that goes.
        let key_piece = if first_to.is_some() { 0 } else { 1 };
        let key_load = piece_load(info, whole, demand, shares[key_piece]);
        let src_before = self.model.worker_ratio(owner);
        let (dest_before, dest_after) = (self.model.worker_ratio(dest), self.model.ratio_plus(dest, key_load));
        let group_after = self.model.group_ratio_with(&self.groups, group, key_load);
        if !self.destination_allows(src_before, dest_after) || !self.destination_allows(src_before, group_after) {
            return Err(format!(
                "destination overloaded: its piece would put {} at {dest_after:.2} of capacity and group {group} at {group_after:.2}, with the load in flight counted (high watermark {:.2})",
                self.input.workers[dest].id, self.config.worker_overload.high_watermark_ratio
            ));
        }
        let less = Load { ops: -key_load.ops, bytes: -key_load.bytes, cpu: -key_load.cpu };
        let src_after = self.model.ratio_plus(owner, less);
        let mut dests = if first_to.is_some() { Vec::new() } else { vec![dest] };
        dests.resize(keys.len(), owner);
        Ok(KeyCut {
            partition: p,
            group: group.clone(),
            key,
            keys,
            dests,
            first_to,
            shares,
            dest,
            src_before,
            src_after,
            dest_before,
            dest_after,
            group_after,
        })
    }
}

/// Proposes `cut` (see [`Pass::key_cut`]) for `policy`: one `split_into` whose one-key piece
/// lands on the group's worker and whose other pieces stay; judged as one action.
pub fn propose_key_cut(
    pass: &mut Pass<'_>,
    state: &mut PlannerState,
    cut: KeyCut,
    (policy, mode): (Policy, PolicyMode),
    why_hot: String,
    trigger: Trigger,
    mut alts: Vec<Alternative>,
) {
    let (p, group) = (cut.partition, &cut.group);
    let info = &pass.input.partitions[p];
    let id = info.id.clone();
    let owner = pass.model.owner[p] as usize;
    let dest_id = pass.input.workers[cut.dest].id.clone();
    let reason = format!(
        "{why_hot}: cut its hot key {} ({:.0} % of its demand) out into a piece of its own created on {dest_id} as a member of group {group}, its other pieces staying on {}: {} streams one key where moving the partition whole streams {} MiB; {} {:.2} -> {:.2}, {dest_id} {:.2} -> {:.2} (group {group} at {:.2})",
        cut.key,
        cut.key_share() * 100.0,
        pass.input.workers[owner].id,
        id,
        info.stored_bytes >> 20,
        pass.input.workers[owner].id,
        cut.src_before,
        cut.src_after,
        cut.dest_before,
        cut.dest_after,
        cut.group_after,
    );
    alts.push(alt(
        format!("isolate {id} whole on group {group}"),
        format!("its {} MiB would stream before its worker is relieved", info.stored_bytes >> 20),
    ));
    let (max, mean, _) = pass.model.pool_stats(&pass.groups);
    let predicted = Prediction {
        target_before_ratio: cut.src_before,
        target_after_ratio: cut.src_after,
        source_before_ratio: cut.src_before,
        source_after_ratio: cut.src_after,
        dest_before_ratio: Some(cut.dest_before),
        dest_after_ratio: Some(cut.dest_after),
        cluster_max_before_ratio: max,
        cluster_max_after_ratio: max.max(cut.dest_after),
        cluster_mean_ratio: mean,
        dest_worker: Some(dest_id),
        ..Prediction::default()
    };
    let (demand, parent_hot) = (pass.model.demand_ops[p], state.partitions.get(&id).copied().unwrap_or_default());
    let pieces = Pieces {
        partition: p,
        // A last piece staying is the rest of the range: cold bulk.
        cold_end: cut.dests.last() == Some(&owner),
        first_to: cut.first_to,
        keys: cut.keys,
        shares: cut.shares,
        dests: cut.dests,
        demand_ops: demand,
        sized_for_ops: demand,
        parent_hot,
        group: Some(cut.group),
    };
    propose_pieces(pass, state, pieces, mode, |spec| Proposal {
        spec,
        policy,
        mode,
        origin: lb_common::protocol::Origin::Online,
        reason,
        trigger,
        predicted,
        rejected_alternatives: alts,
    });
}
