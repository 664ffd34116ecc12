//! The master's online analyzer and planner, as one pure function:
//! [`plan`]`(&input, &config, &mut state, now_ms) -> Plan`. No I/O, no clock: the same code runs
//! live (1 s tick) and in the virtual-time simulator.
//!
//! **Problem.** Given the layout (partitions on workers, with limits, sizes and supported
//! actions), the last window's load per partition (ops, bytes, CPU, rejections, key sketch) and
//! per worker, and the actions in flight, propose the few actions that remove hotspots without
//! moving too much, and say why — and why not the alternatives.
//!
//! **Policies** (each `off | dry_run | auto`, in this order within a pass):
//! 1. *Partition overload* (demand over `engage_ratio` × its limit, or rejections): **split** at
//!    the key that best halves the load ([`model::split_key`], interpolated inside the sketch
//!    bucket). When the load grows fast enough to outgrow half the limit within the cooldown, the
//!    split "peels" a `1/k` share into the side that keeps the id (it enters the cooldown) and
//!    leaves the rest in the new side, which is split again next pass. The new side is then
//!    **scattered** to the coolest eligible worker. If one top key holds `single_key_share_ratio`
//!    of the ops or `sequential_write_ratio` of the writes are appends, a split cannot help: the
//!    partition is **isolated** — `Group` onto a dedicated group when the topology has one, else
//!    a `Move` to the coolest worker if that gains, else a **dedication** of its own worker
//!    (`dedicate.rs`). Never a split without `split` support. A new split side counts as carrying
//!    what the split left on it until the master has measured it.
//! 2. *Worker overload* (load ratio over `high_watermark_ratio`, in the tightest of ops, bytes,
//!    CPU): **moves** the partitions that best bring the worker under `low_watermark_ratio` to the
//!    coolest workers with headroom (single-key partitions are isolated instead; a splittable
//!    partition over its own limit is left to the split; when no move helps, a partition too hot
//!    to share any worker gets its worker alone).
//! 3. *Imbalance* (max/mean or CV of the shared pool over threshold): bounded greedy **moves**
//!    from the hottest worker toward the coolest.
//!
//! **Hysteresis.** A subject is hot only over a relative band *and* an absolute floor for
//! `hot_windows` consecutive passes; it stays engaged until it drops under the lower release
//! threshold ([`state::Hysteresis`]).
//!
//! **Caps and safety.** In-flight actions count as done (their moves are applied to the model,
//! their partitions are busy). A move must cut the max of its two workers' load by
//! `min_gain_ratio` after charging `move_cost_ratio_per_gib` per GiB moved. Caps per pass, per
//! worker (in flight + proposed) and cluster-wide; per-partition cooldown after any action;
//! `halt` stops every proposal (hysteresis is still tracked).
//!
//! **Invariants** (tested): a partition is never acted on inside its cooldown; never two actions
//! on one partition in a pass; a split key always lies strictly inside the range; every proposal
//! carries a reason, its trigger, a before/after prediction and the alternatives it rejected;
//! a balanced cluster gets no proposals.

pub mod config;
mod dedicate;
mod destinations;
pub mod input;
mod manual;
mod model;
mod outside;
mod partition;
pub mod proposal;
mod rebalance;
pub mod state;

#[cfg(test)]
mod safety_tests;
#[cfg(test)]
pub(crate) mod tests;
#[cfg(test)]
mod zone_tests;

use lb_common::ids::GroupId;

pub use config::{CrossZone, PlannerConfig, PolicyMode, ZonesConfig};
pub use input::{
    IdIndex, InFlightAction, PartitionView, PartitionWindow, PlannerInput, WorkerView, WorkerWindow, new_layout_id,
};
pub use proposal::{Alternative, DeclineReason, Declined, Plan, PlanStats, Policy, Prediction, Proposal, Trigger};
pub use state::{ExpectedDemand, Hysteresis, PendingChild, PlannerState, Scatter, Strikes};

pub use dedicate::{DEDICATED_GROUP_PREFIX, dedicated_group};
pub use manual::{ManualRefusal, manual_proposal};
pub use model::{partitions_of, split_key};
pub use outside::{MergeLanding, OutsideCheck};

/// Whether `spec` dedicates its partition's own worker to it in the layout of `input` (a group
/// naming a group no worker is in, where the storage forms such groups).
pub fn is_dedication(spec: &lb_common::protocol::ActionSpec, input: &PlannerInput) -> bool {
    model::dedication_target(spec, input).is_some()
}

use model::{Model, Streams};

/// Share of the cluster's in-flight slots deferrable work leaves free ([`Pass::caps_allow_deferrable`]).
const RELIEF_RESERVE: f64 = 0.25;

/// A worker whose load rose by this share of its capacity within the imbalance policy's windows
/// is heating, not standing imbalanced ([`Pass::heating`]): a rise two and a half times the
/// smallest gain a move must bring (`caps.min_gain_ratio`, 0.02), above what noise in a
/// multi-second window moves a worker by.
pub const HEATING_RISE_RATIO: f64 = 0.05;

/// Declined items kept per pass: enough for the console, bounded for a 100k-partition pass.
pub const MAX_DECLINED_PER_PASS: usize = 256;
/// Alternatives kept per proposal: the best few losers explain a choice.
pub const MAX_ALTERNATIVES: usize = 6;

/// One pass of the analyzer and planner. See the module doc.
pub fn plan(input: &PlannerInput, config: &PlannerConfig, state: &mut PlannerState, now_ms: i64) -> Plan {
    // The model looks up the partitions of the actions in flight, when there are any.
    let (owners, ids) = state.layout.owners_and_ids(input, !input.in_flight.is_empty());
    let streams = Streams::new(&config.caps, input.move_rate_limit);
    let model = Model::build_with_owners(input, owners, ids, streams, now_ms);
    state.partitions.bind(input);
    let mut groups: Vec<Option<GroupId>> = input.workers.iter().map(|w| w.group.clone()).collect();
    // A worker being dedicated has left the shared pool already.
    for (w, group) in &model.dedicating {
        groups[*w] = Some(group.clone());
    }
    let splitting = vec![false; input.partitions.len()];
    let zones = Zones::of(input);
    let mut pass = Pass {
        input,
        config,
        now_ms,
        model,
        groups,
        zones,
        splitting,
        plan: Plan::default(),
        proposed_this_pass: 0,
        destinations: Default::default(),
        recent_low: Vec::new(),
    };
    state.passes += 1;
    state.cooldown_until_ms.retain(|_, until| *until > now_ms);
    state.moved_until_ms.retain(|_, until| *until > now_ms);

    partition::adopt_children(&pass, state);
    partition::expect_children(&mut pass, state);
    let hot = pass.observe_partitions(state);
    let overloaded = pass.observe_workers(state);
    let (max, mean, cv) = pass.model.pool_stats(&pass.groups);
    // Imbalance is judged inside each zone (a partition stays in its zone): the zone spread
    // worst in max/mean engages it. Without zones, that is the whole pool.
    let (zmax, zmean, zcv) = pass.worst_zone_stats().1;
    let imbalance = pass.observe_imbalance(state, zmax, zmean, zcv);
    pass.plan.stats = PlanStats {
        partitions: input.partitions.len(),
        workers: input.workers.len(),
        hot_partitions: hot.len(),
        overloaded_workers: overloaded.len(),
        imbalance_engaged: imbalance,
        max_load_ratio: max,
        mean_load_ratio: mean,
        cv,
        in_flight: input.in_flight.len(),
        declined_dropped: 0,
    };
    pass.plan.hot = hot.iter().map(|h| h.index).collect();
    pass.plan.worker_load_ratios = (0..input.workers.len()).map(|w| pass.model.worker_ratio(w)).collect();
    if config.halt {
        let why = || "halted: the global halt switch is on".to_owned();
        for h in &hot {
            let id = input.partitions[h.index].id.as_str();
            pass.decline(Policy::PartitionOverload, id, DeclineReason::Halted, why());
        }
        for &w in &overloaded {
            pass.decline(Policy::WorkerOverload, input.workers[w].id.as_str(), DeclineReason::Halted, why());
        }
        if imbalance {
            pass.decline(Policy::Imbalance, "cluster", DeclineReason::Halted, why());
        }
        return pass.plan;
    }
    if config.partition_overload.mode != PolicyMode::Off {
        partition::relieve(&mut pass, state, &hot);
        partition::scatter_children(&mut pass, state);
    }
    if config.worker_overload.mode != PolicyMode::Off {
        rebalance::worker_overload(&mut pass, state, &overloaded);
    }
    if config.imbalance.mode != PolicyMode::Off && imbalance {
        rebalance::imbalance(&mut pass, state, zmax / zmean.max(f64::MIN_POSITIVE), zcv);
    }
    if config.imbalance.mode != PolicyMode::Off && config.zones.cross == CrossZone::Balance && pass.zones.several() {
        rebalance::zone_imbalance(&mut pass, state);
    }
    pass.plan
}

/// A hot partition of this pass.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Hot {
    pub index: usize,
    pub hysteresis: Hysteresis,
    pub demand_ops: f64,
    pub limit_ops: f64,
    /// Demand growth since the previous pass, ops/s per second (0 when unknown).
    pub growth_per_sec: f64,
}

/// Each worker's zone as a small index, for the zone rules of a pass.
#[derive(Debug, Default)]
pub(crate) struct Zones {
    /// Per worker: index into `names`, or [`Zones::NONE`] for a worker without a zone.
    pub of: Vec<u32>,
    pub names: Vec<lb_common::ids::ZoneId>,
}

impl Zones {
    /// A worker the topology gives no zone.
    pub const NONE: u32 = u32::MAX;

    fn of(input: &PlannerInput) -> Self {
        let mut names: Vec<lb_common::ids::ZoneId> = Vec::new();
        let of = input
            .workers
            .iter()
            .map(|w| match &w.zone {
                None => Self::NONE,
                Some(z) => match names.iter().position(|n| n == z) {
                    Some(i) => i as u32,
                    None => {
                        names.push(z.clone());
                        (names.len() - 1) as u32
                    }
                },
            })
            .collect();
        Self { of, names }
    }

    /// Whether workers `a` and `b` share a zone; a worker without one shares every zone (a
    /// topology without zones is one zone).
    pub fn same(&self, a: usize, b: usize) -> bool {
        let (za, zb) = (self.of[a], self.of[b]);
        za == zb || za == Self::NONE || zb == Self::NONE
    }

    /// Every zone index workers have: the named zones, then [`Zones::NONE`] if a worker has none.
    pub fn indices(&self) -> impl Iterator<Item = u32> + '_ {
        let none = self.of.contains(&Self::NONE).then_some(Self::NONE);
        (0..self.names.len() as u32).chain(none)
    }

    /// Whether the topology has more than one zone (zone rules then matter at all).
    pub fn several(&self) -> bool {
        self.names.len() > 1
    }

    /// The name of worker `w`'s zone, `-` without one.
    pub fn name(&self, w: usize) -> &str {
        self.names.get(self.of[w] as usize).map_or("-", |z| z.as_str())
    }
}

/// The working set of one pass.
#[derive(Debug)]
pub(crate) struct Pass<'a> {
    pub input: &'a PlannerInput,
    pub config: &'a PlannerConfig,
    pub now_ms: i64,
    pub model: Model,
    pub groups: Vec<Option<GroupId>>,
    pub zones: Zones,
    pub plan: Plan,
    proposed_this_pass: u32,
    /// Per partition: over its own limit and splittable (supported, load not on one key or an
    /// append tail), so partition overload splits it rather than anything moving it (a move cannot lower its demand against its limit, and
    /// its cooldown would hold the split back).
    pub splitting: Vec<bool>,
    /// The workers sorted for [`Pass::best_destination`], kept while the model stands still.
    destinations: std::cell::RefCell<destinations::Destinations>,
    /// Per worker: the lowest load ratio of its recent passes, this one's included
    /// ([`Pass::steady_ratio`]); empty while the imbalance policy is off.
    recent_low: Vec<f64>,
}

impl Pass<'_> {
    pub fn decline(&mut self, policy: Policy, subject: &str, reason: DeclineReason, why: String) {
        self.decline_with(policy, subject, reason, || why);
    }

    /// [`Pass::decline`] with the why written only if the pass keeps it (the first
    /// [`MAX_DECLINED_PER_PASS`]; the rest are only counted).
    pub fn decline_with(&mut self, policy: Policy, subject: &str, reason: DeclineReason, why: impl FnOnce() -> String) {
        let counts = &mut self.plan.declined_counts;
        match counts.iter_mut().find(|(p, r, _)| *p == policy && *r == reason) {
            Some((_, _, n)) => *n += 1,
            None => counts.push((policy, reason, 1)),
        }
        if self.plan.rejected.len() < MAX_DECLINED_PER_PASS {
            self.plan.rejected.push(Declined { policy, subject: subject.to_owned(), reason, why: why() });
        } else {
            self.plan.stats.declined_dropped += 1;
        }
    }

    /// [`Pass::caps_allow`] for work that can wait (a balancing move, a split piece's scatter): it
    /// leaves a quarter of the cluster's in-flight slots ([`RELIEF_RESERVE`]) to the relief of
    /// partitions and workers over their limits, so a wave of scatters or balancing moves cannot
    /// fill the cap that the split of a range that rejects needs.
    pub fn caps_allow_deferrable(&self, workers: &[usize]) -> Result<(), String> {
        let n = self.input.workers.len();
        let cluster = self.config.caps.inflight_cluster(n);
        let usable = cluster - ((f64::from(cluster) * RELIEF_RESERVE) as u32).min(cluster.saturating_sub(1));
        if self.model.cluster_actions >= usable {
            return Err(format!(
                "cap: {usable} of max_inflight_cluster ({cluster} for {n} workers) in flight, the rest kept for relief"
            ));
        }
        self.caps_allow(workers)
    }

    /// Whether one more action touching `workers` fits the caps; the why-not otherwise.
    pub fn caps_allow(&self, workers: &[usize]) -> Result<(), String> {
        let c = &self.config.caps;
        let n = self.input.workers.len();
        let per_pass = c.actions_per_pass(n);
        if self.proposed_this_pass >= per_pass {
            return Err(format!("cap: max_actions_per_pass ({per_pass} for {n} workers) reached"));
        }
        let cluster = c.inflight_cluster(n);
        if self.model.cluster_actions >= cluster {
            return Err(format!("cap: max_inflight_cluster ({cluster} for {n} workers) reached"));
        }
        for &w in workers {
            if self.model.worker_actions[w] >= c.max_inflight_per_worker {
                return Err(format!(
                    "cap: worker {} already has {} actions in flight (max_inflight_per_worker)",
                    self.input.workers[w].id, self.model.worker_actions[w]
                ));
            }
        }
        Ok(())
    }

    /// Why partition `p` cannot be acted on now, if it cannot.
    pub fn blocked(&self, state: &PlannerState, p: usize) -> Option<(DeclineReason, String)> {
        if self.model.busy[p] {
            return Some((DeclineReason::InFlight, "an action on it is in flight".into()));
        }
        let id = &self.input.partitions[p].id;
        state.in_cooldown(id, self.now_ms).map(|until| {
            (DeclineReason::Cooldown, format!("in cooldown for {} s more", (until - self.now_ms + 999) / 1000))
        })
    }

    /// Records a proposal; an auto one starts the partition's cooldown.
    pub fn propose(&mut self, state: &mut PlannerState, p: usize, mode: PolicyMode, mut proposal: Proposal) {
        proposal.mode = mode;
        proposal.rejected_alternatives.truncate(MAX_ALTERNATIVES);
        if mode == PolicyMode::Auto {
            let f = &self.config.feedback;
            let factor = state.cooldown_factor(
                proposal.policy,
                f.harmful_cooldown_factor,
                (f.strike_decay_secs * 1000) as i64,
                self.now_ms,
            );
            let until = self.now_ms + (self.config.caps.cooldown_secs * 1000 * u64::from(factor)) as i64;
            let id = &self.input.partitions[p].id;
            state.cooldown_until_ms.insert(id.clone(), until);
            if matches!(proposal.spec, lb_common::protocol::ActionSpec::Move { .. }) {
                state.moved_until_ms.insert(id.clone(), until);
            } else {
                state.moved_until_ms.remove(id);
            }
        }
        self.proposed_this_pass += 1;
        self.plan.proposals.push(proposal);
    }

    fn observe_partitions(&mut self, state: &mut PlannerState) -> Vec<Hot> {
        let cfg = &self.config.partition_overload;
        let mut hot = Vec::new();
        let mut seen = 0usize;
        for (i, (&demand, own)) in self.model.demand_ops.iter().zip(&self.model.own).enumerate() {
            let limit = own.limit_ops;
            // Against its own limit, in the tighter of ops and bytes.
            let bytes_ratio = if own.limit_bytes > 0.0 && own.ops_per_sec > 0.0 {
                own.bytes_per_sec * demand / own.ops_per_sec / own.limit_bytes
            } else {
                0.0
            };
            let ratio = (demand / limit).max(bytes_ratio);
            let rejected_ratio = if demand > 0.0 { own.rejected_per_sec / demand } else { 0.0 };
            let floor = demand >= cfg.min_ops_per_sec;
            // Rejections count only near the partition's own limit: an overloaded worker rejects
            // on every partition it holds, and that is the worker policy's case, not a split's.
            let over = floor
                && (ratio >= cfg.engage_ratio
                    || (rejected_ratio >= cfg.rejected_engage_ratio && ratio >= cfg.release_ratio));
            let warm = over || (floor && ratio >= cfg.release_ratio);
            if !warm {
                continue;
            }
            let p = &self.input.partitions[i];
            // Splittable: supported, and not one hot key or an append tail (those are isolated,
            // and the worker policies may do that too). Looked at only where it is over: the
            // view and its sketch are far apart in memory, and many more are only warm.
            self.splitting[i] = cfg.mode != PolicyMode::Off
                && over
                && model::supports(&p.supported_actions, lb_common::protocol::ActionKind::Split)
                && {
                    let shape = model::sketch_shape(p.stats.sketch.as_ref());
                    shape.top_key_share_ratio < cfg.single_key_share_ratio
                        && shape.sequential_write_ratio < cfg.sequential_write_ratio
                };
            seen += 1;
            let h = state.partitions.at_mut(i, &p.id);
            if h.last_ms > 0 && self.now_ms > h.last_ms {
                let raw = (demand - h.last_demand) / ((self.now_ms - h.last_ms) as f64 / 1000.0);
                h.growth_per_sec = 0.5 * raw + 0.5 * h.growth_per_sec;
            }
            let growth = h.growth_per_sec;
            h.last_demand = demand;
            h.last_ms = self.now_ms;
            if h.observe(over, !warm, cfg.hot_windows, self.now_ms, self.config.hysteresis_min_gap_ms) {
                hot.push(Hot {
                    index: i,
                    hysteresis: *h,
                    demand_ops: demand,
                    limit_ops: limit,
                    growth_per_sec: growth,
                });
            }
        }
        // Entries not refreshed this pass went under release: forget them.
        if state.partitions.len() > seen {
            let now = self.now_ms;
            state.partitions.retain(|h| h.last_ms == now);
        }
        hot.sort_by(|a, b| (b.demand_ops / b.limit_ops).total_cmp(&(a.demand_ops / a.limit_ops)));
        hot
    }

    fn observe_workers(&mut self, state: &mut PlannerState) -> Vec<usize> {
        let cfg = &self.config.worker_overload;
        let mut out = Vec::new();
        for (w, info) in self.input.workers.iter().enumerate() {
            let r = self.model.worker_ratio(w).max(info.load.cpu_ratio);
            let over = self.model.healthy[w] && r >= cfg.high_watermark_ratio;
            let under = r < cfg.low_watermark_ratio;
            if !over && under && !state.workers.contains_key(&info.id) {
                continue;
            }
            let h = state.workers.entry(info.id.clone()).or_default();
            if h.observe(over, under, cfg.hot_windows, self.now_ms, self.config.hysteresis_min_gap_ms) {
                out.push(w);
            } else if under && h.windows == 0 {
                state.workers.remove(&info.id);
            }
        }
        out.sort_by(|&a, &b| self.model.worker_ratio(b).total_cmp(&self.model.worker_ratio(a)));
        if self.config.imbalance.mode != PolicyMode::Off {
            self.record_recent_ratios(state);
        }
        out
    }

    /// Appends each worker's load ratio to its recent ones and keeps the lowest of them for
    /// the pass (see [`Pass::heating`]).
    fn record_recent_ratios(&mut self, state: &mut PlannerState) {
        let keep = self.config.imbalance.hot_windows.max(1) as usize;
        let pass = state.passes;
        self.recent_low.clear();
        for (w, info) in self.input.workers.iter().enumerate() {
            let r = self.model.worker_ratio(w);
            let recent = match state.recent_ratios.get_mut(&info.id) {
                Some(recent) => recent,
                None => state.recent_ratios.entry(info.id.clone()).or_default(),
            };
            while recent.ratios.len() >= keep {
                recent.ratios.pop_front();
            }
            recent.ratios.push_back(r);
            recent.pass = pass;
            self.recent_low.push(recent.ratios.iter().copied().fold(r, f64::min));
        }
        if state.recent_ratios.len() > self.input.workers.len() {
            state.recent_ratios.retain(|_, r| r.pass == pass);
        }
    }

    /// Whether worker `w` is heating: its load ratio now (with this pass's proposals) is
    /// [`HEATING_RISE_RATIO`] or more above the lowest it read at the imbalance policy's last
    /// `hot_windows` passes. Imbalance is a standing condition: a worker whose load jumped (a
    /// range ramping up, a partition that just landed) is the overload policies' case if it
    /// keeps on, and a balancing move taken from it would likely carry the partition that is
    /// heating, which that partition's split would then have to wait for.
    pub fn heating(&self, w: usize) -> bool {
        self.model.worker_ratio(w) - self.steady_ratio(w) >= HEATING_RISE_RATIO
    }

    /// Worker `w`'s standing load: the lowest of its ratio now and at the imbalance policy's last
    /// `hot_windows` passes. Balancing ranks its sources by it, so a worker that rose within
    /// the windows (by less than heating takes) comes after those that stood hot all along.
    pub fn steady_ratio(&self, w: usize) -> f64 {
        let now = self.model.worker_ratio(w);
        self.recent_low.get(w).map_or(now, |&low| low.min(now))
    }

    fn observe_imbalance(&mut self, state: &mut PlannerState, max: f64, mean: f64, cv: f64) -> bool {
        let cfg = &self.config.imbalance;
        let mom = if mean > 0.0 { max / mean } else { 1.0 };
        let floor = mean >= cfg.min_mean_ratio;
        let over = floor && (mom >= cfg.engage_max_over_mean || cv >= cfg.engage_cv);
        let under = !floor || (mom < cfg.release_max_over_mean && cv < cfg.release_cv);
        state.imbalance.observe(over, under, cfg.hot_windows, self.now_ms, self.config.hysteresis_min_gap_ms)
    }
}
