//! Partition overload: split where the sketch says the load can be divided, isolate where it
//! cannot, and scatter split children to cool workers.

use lb_common::protocol::{ActionKind, ActionSpec, GroupTarget};

use super::config::PolicyMode;
use super::model::{SketchShape, sketch_shape, split_key, supports};
use super::proposal::{Alternative, DeclineReason, Policy, Prediction, Proposal, Trigger};
use super::rebalance::alt;
use super::state::{ExpectedDemand, PendingChild, PlannerState};
use super::{Hot, Pass};

/// How long after a split a child's measured load may still lag what it carries: the master's
/// analysis window (5 s by default) plus collection and topology lag. Until then a child is
/// taken to carry at least what the split left on it ([`expect_children`]), so a hot new side
/// is split again, not scattered or moved (a move would rest it for a cooldown while it
/// rejects).
const CHILD_MEASUREMENT_LAG_MS: i64 = 10_000;

/// Young split children read at least the demand their split left on them (see
/// [`CHILD_MEASUREMENT_LAG_MS`]); expired expectations are dropped.
pub fn expect_children(pass: &mut Pass<'_>, state: &mut PlannerState) {
    let now = pass.now_ms;
    let partitions = &pass.input.partitions;
    state.expected_demand.retain_mut(|e| {
        if e.until_ms <= now {
            return false;
        }
        if partitions.get(e.index).is_none_or(|p| p.id != e.partition) {
            // The layout changed since: find it again (rare, and only for young children).
            match partitions.iter().position(|p| p.id == e.partition) {
                Some(i) => e.index = i,
                None => return false,
            }
        }
        pass.model.demand_ops[e.index] = pass.model.demand_ops[e.index].max(e.demand_ops);
        true
    });
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
        if let Some((reason, why)) = pass.blocked(state, p) {
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
            && state.expected_demand.iter().any(|e| e.partition == id)
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
            hot_windows: h.hysteresis.windows,
            partition_demand_ops_per_sec: Some(h.demand_ops),
            partition_limit_ops_per_sec: Some(h.limit_ops).filter(|l| l.is_finite()),
            partition_rejected_per_sec: Some(info.stats.rejected_per_sec),
            partition_growth_ops_per_sec_per_sec: Some(h.growth_per_sec),
            top_key_share_ratio: Some(shape.top_key_share_ratio),
            sequential_write_ratio: Some(shape.sequential_write_ratio),
            ..Trigger::default()
        };
        let mut alts = Vec::new();
        match try_split(pass, h, shape, &mut alts) {
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
                pass.model.mark_action(p);
                if mode == PolicyMode::Auto {
                    state.pending_children.push(PendingChild {
                        tenant: info.tenant.clone(),
                        table: info.table.clone(),
                        start: key,
                        parent: id.clone(),
                        from_worker: pass.input.workers[owner].id.clone(),
                        parent_hot: h.hysteresis,
                        split_at_ms: pass.now_ms,
                        expected_demand_ops: h.demand_ops * (1.0 - left_share),
                    });
                }
                pass.propose(state, p, mode, proposal);
            }
            None => isolate(pass, state, h, shape, trigger, alts),
        }
    }
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
    let Some((key, left)) = split_key(info.range, &sketch.bucket_ops, quantile) else {
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
    if let Err(why) = pass.caps_allow(&[pass.model.owner[p] as usize]) {
        pass.decline(
            Policy::PartitionOverload,
            id.as_str(),
            DeclineReason::Cap,
            format!("hot at {ratio:.2} of its limit and {what}; isolation: {why}"),
        );
        return;
    }
    if supports(&info.supported_actions, ActionKind::Group)
        && let Some((group, _)) = pass.isolation_group(p)
    {
        if let Some(e) = pass.best_destination(p, Some(&group), high.max(1.0), &mut alts) {
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
    if supports(&info.supported_actions, ActionKind::Move) {
        let max_after = pass.model.worker_ratio(pass.model.owner[p] as usize).min(high);
        if let Some(e) = pass.best_destination(p, None, max_after, &mut alts) {
            let predicted =
                Prediction { target_before_ratio: ratio, target_after_ratio: ratio, ..pass.move_prediction(p, &e) };
            let reason = format!(
                "partition {id} demands {:.0} ops/s, {ratio:.2} of its limit, and {what}: no dedicated group, so isolate it by moving it to the coolest worker {} ({:.2} -> {:.2})",
                h.demand_ops, pass.input.workers[e.dest].id, e.dest_before, e.dest_after
            );
            let proposal = Proposal {
                spec: ActionSpec::Move { partition: id.clone(), to_worker: pass.input.workers[e.dest].id.clone() },
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
    }
    match pass.dedication(state, p) {
        Ok(d) => {
            let why_hot =
                format!("partition {id} demands {:.0} ops/s, {ratio:.2} of its limit, and {what}", h.demand_ops);
            pass.propose_dedication(state, d, Policy::PartitionOverload, why_hot, trigger, alts);
            return;
        }
        Err(why) => alts.push(alt(format!("dedicate its worker to {id}"), why)),
    }
    let why = alts.iter().map(|a| format!("{}: {}", a.candidate, a.why)).collect::<Vec<_>>().join("; ");
    pass.decline(
        Policy::PartitionOverload,
        id.as_str(),
        DeclineReason::NoRemedy,
        format!("hot at {ratio:.2} of its limit and {what}; nothing helps: {why}"),
    );
}

/// Finds split children that appeared since the last pass: each inherits its parent's
/// hysteresis (a still-hot child is split again without waiting) and is returned for scattering.
pub fn adopt_children(pass: &Pass<'_>, state: &mut PlannerState) -> Vec<(PendingChild, usize)> {
    if state.pending_children.is_empty() {
        return Vec::new();
    }
    let window_ms = (pass.config.partition_overload.scatter_window_secs * 1000) as i64;
    let now = pass.now_ms;
    state.pending_children.retain(|c| now - c.split_at_ms <= window_ms);
    let mut found = Vec::new();
    for (i, p) in pass.input.partitions.iter().enumerate() {
        if let Some(k) = state
            .pending_children
            .iter()
            .position(|c| c.start == p.range.start && c.table == p.table && c.tenant == p.tenant && c.parent != p.id)
        {
            let child = state.pending_children.swap_remove(k);
            if child.expected_demand_ops > 0.0 {
                state.expected_demand.push(ExpectedDemand {
                    partition: p.id.clone(),
                    demand_ops: child.expected_demand_ops,
                    until_ms: child.split_at_ms + CHILD_MEASUREMENT_LAG_MS,
                    index: i,
                });
            }
            let h = state.partitions.entry(p.id.clone()).or_default();
            h.windows = h.windows.max(child.parent_hot.windows);
            h.engaged |= child.parent_hot.engaged;
            found.push((child, i));
        }
    }
    found
}

/// Moves the new side of each recent split to the coolest eligible worker.
pub fn scatter_children(pass: &mut Pass<'_>, state: &mut PlannerState, found: Vec<(PendingChild, usize)>) {
    let mode = pass.config.partition_overload.mode;
    let engage = pass.config.partition_overload.engage_ratio;
    for (child, p) in found {
        let info = &pass.input.partitions[p];
        let id = info.id.clone();
        let limit = info.limit.map_or(f64::INFINITY, |l| l.ops_per_sec);
        if pass.model.demand_ops[p] >= engage * limit {
            pass.decline(
                Policy::PartitionOverload,
                id.as_str(),
                DeclineReason::SplitFirst,
                "split child is itself hot: split it before scattering".into(),
            );
            continue;
        }
        let owner = pass.model.owner[p] as usize;
        if pass.input.workers[owner].id != child.from_worker {
            continue;
        }
        if let Some((reason, why)) = pass.blocked(state, p) {
            pass.decline(Policy::PartitionOverload, id.as_str(), reason, format!("scatter of split child: {why}"));
            continue;
        }
        if let Err(why) = pass.caps_allow(&[owner]) {
            pass.decline(
                Policy::PartitionOverload,
                id.as_str(),
                DeclineReason::Cap,
                format!("scatter of split child: {why}"),
            );
            continue;
        }
        let mut alts = Vec::new();
        let max_after = pass.model.worker_ratio(owner);
        let Some(e) = pass.best_destination(p, None, max_after, &mut alts) else {
            let why = alts.iter().map(|a| format!("{}: {}", a.candidate, a.why)).collect::<Vec<_>>().join("; ");
            pass.decline(
                Policy::PartitionOverload,
                id.as_str(),
                DeclineReason::NoGain,
                format!("scatter of split child not needed: {why}"),
            );
            continue;
        };
        let reason = format!(
            "scatter the new side of the split of {} to the coolest eligible worker {} ({:.2} -> {:.2}); its old worker {} goes {:.2} -> {:.2}",
            child.parent,
            pass.input.workers[e.dest].id,
            e.dest_before,
            e.dest_after,
            child.from_worker,
            e.src_before,
            e.src_after
        );
        let proposal = Proposal {
            spec: ActionSpec::Move { partition: id.clone(), to_worker: pass.input.workers[e.dest].id.clone() },
            policy: Policy::PartitionOverload,
            mode,
            origin: lb_common::protocol::Origin::Online,
            reason,
            trigger: Trigger {
                hot_windows: child.parent_hot.windows,
                partition_demand_ops_per_sec: Some(pass.model.demand_ops[p]),
                worker_load_ratio: Some(e.src_before),
                ..Trigger::default()
            },
            predicted: pass.move_prediction(p, &e),
            rejected_alternatives: alts,
        };
        pass.model.apply_move(p, e.dest);
        pass.propose(state, p, mode, proposal);
    }
}
