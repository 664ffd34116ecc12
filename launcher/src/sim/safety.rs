//! The safety invariant every run is checked against (issue 25): **no action may overload the
//! place it puts load.**
//!
//! A strategy's run is compared second by second with a run of the same scenario under no
//! balancer (same seed, same workload, same workers in the same order):
//! - **worker**: at second `t` the strategy's worst worker (highest demand over capacity) is over
//!   capacity *and* over the worst worker of the no-balancer run at `t`, and an action of the
//!   strategy put load on that worker within the [`ATTRIBUTION_SECS`] before `t`: a move to it,
//!   an isolation or merge that landed there, a split whose pieces it serves (pieces each get a
//!   partition's limit, so a split in place can raise its worker's demand), a reshard whose new
//!   subring it owns a shard of. The worker must be
//!   over the bound by the load it carries (demand over its nominal capacity): the capacity a
//!   source lends to a stream while it runs (make-before-break keeps its load there) is not
//!   where an action puts load; the planner bounds it (a move from a source not over its
//!   capacity streams only as fast as its spare capacity pays for, `Model::next_stream`, where
//!   the storage honours a move's rate; `max_source_transient_ratio`, 1.05, for balancing and
//!   scatter moves elsewhere) and the rejections it costs are in the figures;
//! - **group**: a dedicated group's demand over its capacity (all its up workers) is over 1 and
//!   over the same group's value under no balancer, and an action of the strategy put load into it
//!   within the [`ATTRIBUTION_SECS`] before.
//!
//! The attribution window is what makes "because of an action" decidable: an action is charged
//! for where its destination stands from the second it lands until its evaluation has judged it
//! (60 s). A worker that an earlier, safe move filled and that a later event overloads (a hot
//! key starting on a partition it received, a failed worker's partitions failing over to it) is
//! a hotspot the balancer has to relieve, and the relief figures measure that; it is not an
//! action that overloaded its destination.
//!
//! Consecutive seconds of one place over the invariant are one [`Violation`] with its first and
//! last second, its peak and the latest actions that loaded it, so a report reads "w-0007 at up to 2.07 from 312 s to
//! 340 s after move p-17 → w-0007", not 28 lines.

use std::fmt;

use lb_common::ids::WorkerId;
use serde::Serialize;

use super::{ActionRecord, Outcome, Tick};

/// A demand ratio this close to the bound is not over it (float noise between two runs).
const EPSILON: f64 = 1e-6;
/// How long after landing an action answers for its destination's load (its evaluation's
/// settle time plus window, by default).
pub const ATTRIBUTION_SECS: u64 = 60;
/// Actions named per violation: the latest few that put load there.
const MAX_NAMED_ACTIONS: usize = 3;

/// Where a violation happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "id")]
pub enum Place {
    Worker(String),
    Group(String),
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Worker(w) => write!(f, "worker {w}"),
            Place::Group(g) => write!(f, "group {g}"),
        }
    }
}

/// One stretch of seconds over the invariant, with the actions that put the load there.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Violation {
    pub place: Place,
    pub from_secs: u64,
    pub to_secs: u64,
    /// Peak demand over capacity under the strategy, and the bound at that second (max of 1 and
    /// the no-balancer value).
    pub peak_ratio: f64,
    pub bound_ratio: f64,
    /// `id: spec` of the latest actions that put load there, newest first.
    pub actions: Vec<String>,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at up to {:.2} of capacity (bound {:.2}) from {} s to {} s, loaded by {}",
            self.place,
            self.peak_ratio,
            self.bound_ratio,
            self.from_secs,
            self.to_secs,
            if self.actions.is_empty() { "no action".to_owned() } else { self.actions.join("; ") }
        )
    }
}

/// What a run recorded that the check reads.
#[derive(Debug, Clone, Copy)]
pub struct RunRecord<'a> {
    pub ticks: &'a [Tick],
    pub actions: &'a [ActionRecord],
    /// Per second, each group's demand over capacity, indexed like `group_ids`.
    pub group_ratios: &'a [Vec<f64>],
    pub group_ids: &'a [String],
    pub worker_ids: &'a [WorkerId],
}

/// The violations of `run` against `baseline` (the no-balancer run of the same scenario).
pub fn check(run: RunRecord<'_>, baseline: RunRecord<'_>) -> Vec<Violation> {
    let mut out: Vec<Violation> = Vec::new();
    for (i, t) in run.ticks.iter().enumerate() {
        let Some(b) = baseline.ticks.get(i).filter(|b| b.t_secs == t.t_secs) else { continue };
        let bound = b.max_demand_ratio.max(1.0);
        // Over the bound by the load it carries, not only by the capacity it lends to streams.
        if t.max_demand_ratio > bound + EPSILON
            && t.worst_worker_nominal_ratio > bound + EPSILON
            && let Some(w) = t.worst_worker
        {
            let actions = loaded_by(run.actions, t.t_secs, |a| a.landed_on.contains(&w));
            if !actions.is_empty() {
                let id = run.worker_ids.get(w as usize).map_or_else(|| format!("#{w}"), ToString::to_string);
                extend(&mut out, Place::Worker(id), t.t_secs, t.max_demand_ratio, bound, actions);
            }
        }
        let (Some(ratios), Some(base)) = (run.group_ratios.get(i), baseline.group_ratios.get(i)) else { continue };
        for (g, &r) in ratios.iter().enumerate() {
            let name = &run.group_ids[g];
            let base_r = baseline.group_ids.iter().position(|n| n == name).and_then(|k| base.get(k)).copied();
            let bound = base_r.unwrap_or(0.0).max(1.0);
            if r > bound + EPSILON {
                let actions = loaded_by(run.actions, t.t_secs, |a| a.into_group.as_deref() == Some(name.as_str()));
                if !actions.is_empty() {
                    extend(&mut out, Place::Group(name.clone()), t.t_secs, r, bound, actions);
                }
            }
        }
    }
    out
}

/// The latest actions (newest first) that had put load somewhere by second `t`, within the
/// attribution window.
fn loaded_by(actions: &[ActionRecord], t: u64, put_load_there: impl Fn(&ActionRecord) -> bool) -> Vec<String> {
    actions
        .iter()
        .rev()
        .filter(|a| {
            matches!(a.outcome, Outcome::Succeeded { at_secs } if at_secs <= t && t - at_secs <= ATTRIBUTION_SECS)
                && put_load_there(a)
        })
        .take(MAX_NAMED_ACTIONS)
        .map(|a| format!("{}: {}", a.action_id, a.spec))
        .collect()
}

/// Adds second `t` to the open violation of `place` when it continues it, else opens one.
fn extend(out: &mut Vec<Violation>, place: Place, t: u64, ratio: f64, bound: f64, actions: Vec<String>) {
    if let Some(v) = out.iter_mut().rev().find(|v| v.place == place)
        && v.to_secs + 1 == t
    {
        v.to_secs = t;
        for a in actions {
            if !v.actions.contains(&a) {
                v.actions.insert(0, a);
            }
        }
        v.actions.truncate(MAX_NAMED_ACTIONS);
        if ratio > v.peak_ratio {
            (v.peak_ratio, v.bound_ratio) = (ratio, bound);
        }
        return;
    }
    out.push(Violation { place, from_secs: t, to_secs: t, peak_ratio: ratio, bound_ratio: bound, actions });
}

/// The violations of `sim` against no balancer over the same seconds of its scenario: runs the
/// baseline now. For tests that drive one [`Sim`] by hand.
pub fn against_no_balancer(sim: &super::Sim) -> Vec<Violation> {
    let mut baseline = super::Sim::new(&sim.scenario, Box::new(super::NoBalancer));
    baseline.run_until(sim.engine.t_secs() as u64);
    check(sim.safety_record(), baseline.safety_record())
}
