//! What decides the actions: the master's real planner, or a baseline to compare it with.
//!
//! - [`Lb`]: `lb_master::planner::plan` with its default [`PlannerConfig`] and every policy
//!   `auto`, fed by [`super::InputBuilder`] exactly as the master feeds it (in-flight actions
//!   included). Like the master's loop it follows each action it submitted to its end and
//!   evaluates it ([`lb_master::executor::Executor`], [`lb_master::evaluation`]) once its settle
//!   time and window have passed, on the input of that second (virtual time has no collection
//!   lag or noise, so one second stands for the window); a harmful verdict feeds back into the
//!   planner's state before it plans, and a harmful move is reverted when the config says so.
//! - [`NoBalancer`]: never acts; the cost of doing nothing.
//! - [`Greedy`]: the classic threshold mover. Every second, for each healthy worker whose demand
//!   is over [`DEFAULT_GREEDY_HIGH_RATIO`] of its capacity, it moves that worker's hottest
//!   partition (by demand, skipping partitions moved in the last
//!   [`DEFAULT_GREEDY_COOLDOWN_SECS`] and ones with an operation in flight) to the coolest
//!   healthy ungrouped worker, if that worker would stay cooler than the source. No hysteresis
//!   (one hot second triggers), no cost model (a 10 GiB move counts like a 1 MiB one), no splits,
//!   no isolation, in-flight moves are not counted as done; within one second it does account for
//!   its own moves when choosing the coolest worker, so it does not pile them all on one.

use std::collections::HashMap;

use lb_common::ids::{ActionId, PartitionId};
use lb_common::protocol::ActionSpec;
use lb_master::evaluation::{Evaluation, EvaluationConfig};
use lb_master::executor::Executor;
use lb_master::planner::{Plan, PlannerConfig, PlannerInput, PlannerState, Policy, PolicyMode, plan};

use crate::Engine;

/// Greedy's trigger: 90 % of capacity is the usual "hot worker" alert threshold.
pub const DEFAULT_GREEDY_HIGH_RATIO: f64 = 0.9;
/// Greedy's per-partition cooldown: long enough that it does not move one partition every
/// second, short against an hour.
pub const DEFAULT_GREEDY_COOLDOWN_SECS: u64 = 60;

/// What a strategy sees each second.
#[derive(Debug)]
pub struct Context<'a> {
    pub engine: &'a Engine,
    /// The planner's input, built only for strategies that ask for it
    /// ([`Strategy::needs_input`]); its `in_flight` is current.
    pub input: Option<&'a PlannerInput>,
    /// Partitions with an operation in flight (pending or running).
    pub busy: &'a [PartitionId],
    pub now_ms: i64,
}

/// One action a strategy wants; `submit = false` records it without running it (dry run).
#[derive(Debug, Clone, PartialEq)]
pub struct Proposed {
    pub spec: ActionSpec,
    pub submit: bool,
    pub reason: String,
    /// The planner policy behind it (`lb` only), for its evaluation.
    pub policy: Option<Policy>,
}

/// A strategy's answer for one second.
#[derive(Debug, Clone, Default)]
pub struct Decision {
    pub actions: Vec<Proposed>,
    /// The planner's whole plan (declined items, stats), for [`Lb`].
    pub plan: Option<Plan>,
}

/// Decides actions once per simulated second.
pub trait Strategy: Send + std::fmt::Debug {
    fn name(&self) -> &str;
    /// Whether [`Context::input`] is needed (building it reads every partition's counters).
    fn needs_input(&self) -> bool;
    fn decide(&mut self, ctx: &Context<'_>) -> Decision;
    /// The engine accepted `action` as `id` (after [`Strategy::decide`], same second).
    fn submitted(&mut self, _id: &ActionId, _action: &Proposed, _input: Option<&PlannerInput>, _now_ms: i64) {}
    /// A submitted action ended: `applied` when it succeeded.
    fn finished(&mut self, _id: &ActionId, _applied: bool, _at_ms: i64) {}
    /// The evaluations of finished actions so far (`lb` only).
    fn evaluations(&self) -> &[Evaluation] {
        &[]
    }
    /// The planner's state between passes (`lb` only): cooldowns, strikes, hysteresis.
    fn planner_state(&self) -> Option<&PlannerState> {
        None
    }
}

/// The strategy named `name` (`lb`, `none` or `greedy`).
pub fn by_name(name: &str) -> Option<Box<dyn Strategy>> {
    match name {
        "lb" => Some(Box::new(Lb::default())),
        "none" => Some(Box::new(NoBalancer)),
        "greedy" => Some(Box::new(Greedy::default())),
        _ => None,
    }
}

/// The master's planner. See the module doc.
#[derive(Debug, Default)]
pub struct Lb {
    pub config: PlannerConfig,
    pub state: PlannerState,
    pub evaluation: EvaluationConfig,
    pub executor: Executor,
    pub evaluations: Vec<Evaluation>,
}

impl Lb {
    /// The planner with `config` (tests and experiments change it; the default is what ships).
    pub fn with_config(config: PlannerConfig) -> Self {
        Self { config, ..Self::default() }
    }
}

impl Strategy for Lb {
    fn name(&self) -> &str {
        "lb"
    }

    fn needs_input(&self) -> bool {
        true
    }

    fn decide(&mut self, ctx: &Context<'_>) -> Decision {
        let Some(input) = ctx.input else {
            return Decision::default();
        };
        let mut actions = Vec::new();
        if self.executor.evaluation_due(&self.evaluation, ctx.now_ms) {
            let done = self.executor.evaluate_due(input, &self.evaluation, &self.config, &mut self.state, ctx.now_ms);
            for e in done {
                if let Some(spec) = e.revert.clone() {
                    let reason = format!("revert of harmful action {}: {}", e.action_id, e.judgement.why);
                    actions.push(Proposed { spec, submit: true, reason, policy: e.policy });
                }
                self.evaluations.push(e);
            }
        }
        let plan = plan(input, &self.config, &mut self.state, ctx.now_ms);
        // A revert takes precedence over a new proposal on the same partition.
        let reverted: Vec<&PartitionId> =
            actions.iter().flat_map(|a| lb_master::planner::partitions_of(&a.spec)).collect();
        let planned: Vec<Proposed> = plan
            .proposals
            .iter()
            .filter(|p| !lb_master::planner::partitions_of(&p.spec).iter().any(|id| reverted.contains(id)))
            .map(|p| Proposed {
                spec: p.spec.clone(),
                submit: p.mode == PolicyMode::Auto,
                reason: p.reason.clone(),
                policy: Some(p.policy),
            })
            .collect();
        actions.extend(planned);
        Decision { actions, plan: Some(plan) }
    }

    fn submitted(&mut self, id: &ActionId, action: &Proposed, input: Option<&PlannerInput>, now_ms: i64) {
        if let Some(input) = input {
            self.executor.track_spec(id.clone(), &action.spec, action.policy, input, now_ms);
        }
    }

    fn finished(&mut self, id: &ActionId, applied: bool, at_ms: i64) {
        self.executor.finish(id, applied, at_ms);
    }

    fn evaluations(&self) -> &[Evaluation] {
        &self.evaluations
    }

    fn planner_state(&self) -> Option<&PlannerState> {
        Some(&self.state)
    }
}

/// Never acts.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoBalancer;

impl Strategy for NoBalancer {
    fn name(&self) -> &str {
        "none"
    }

    fn needs_input(&self) -> bool {
        false
    }

    fn decide(&mut self, _ctx: &Context<'_>) -> Decision {
        Decision::default()
    }
}

/// The threshold mover. See the module doc.
#[derive(Debug, Clone)]
pub struct Greedy {
    pub high_ratio: f64,
    pub cooldown_secs: u64,
    /// Partition → epoch millis until which it is not moved again.
    cooldown_until_ms: HashMap<PartitionId, i64>,
}

impl Default for Greedy {
    fn default() -> Self {
        Self {
            high_ratio: DEFAULT_GREEDY_HIGH_RATIO,
            cooldown_secs: DEFAULT_GREEDY_COOLDOWN_SECS,
            cooldown_until_ms: HashMap::new(),
        }
    }
}

impl Strategy for Greedy {
    fn name(&self) -> &str {
        "greedy"
    }

    fn needs_input(&self) -> bool {
        false
    }

    fn decide(&mut self, ctx: &Context<'_>) -> Decision {
        let c = &ctx.engine.cluster;
        let now = ctx.now_ms;
        self.cooldown_until_ms.retain(|_, until| *until > now);
        let nw = c.workers.len();
        let mut ratio: Vec<f64> = c.load.worker_demand_ratio.clone();
        let hot: Vec<usize> = (0..nw).filter(|&w| c.workers.is_up(w) && ratio[w] > self.high_ratio).collect();
        if hot.is_empty() {
            return Decision::default();
        }
        // Each hot worker's hottest movable partition, in one pass over the partitions.
        let mut hottest: Vec<Option<(usize, f64)>> = vec![None; nw];
        let is_hot: Vec<bool> = (0..nw).map(|w| hot.contains(&w)).collect();
        for p in 0..c.partitions.len() {
            let w = c.partitions.owner[p] as usize;
            if !is_hot[w] {
                continue;
            }
            let demand = c.demand_ops(p);
            if hottest[w].is_some_and(|(_, d)| d >= demand) {
                continue;
            }
            let id = &c.partitions.ids[p];
            if self.cooldown_until_ms.contains_key(id) || ctx.busy.contains(id) {
                continue;
            }
            hottest[w] = Some((p, demand));
        }
        let mut actions = Vec::new();
        for &src in &hot {
            let Some((p, demand)) = hottest[src] else { continue };
            let coolest = (0..nw)
                .filter(|&w| w != src && c.workers.is_up(w) && c.workers.group[w].is_none())
                .min_by(|&a, &b| ratio[a].total_cmp(&ratio[b]));
            let Some(dst) = coolest else { continue };
            let share = |w: usize| {
                let cap = c.workers.capacity[w].ops_per_sec * c.load.worker_capacity_factor[w];
                if cap > 0.0 { demand / cap } else { f64::INFINITY }
            };
            let (src_after, dst_after) = (ratio[src] - share(src), ratio[dst] + share(dst));
            if dst_after >= ratio[src] {
                continue;
            }
            let id = c.partitions.ids[p].clone();
            let reason = format!(
                "greedy: worker {} at {:.2} of capacity (> {:.2}): move its hottest partition {id} ({demand:.0} ops/s) to the coolest worker {} ({:.2} -> {:.2})",
                c.workers.ids[src], ratio[src], self.high_ratio, c.workers.ids[dst], ratio[dst], dst_after
            );
            ratio[src] = src_after;
            ratio[dst] = dst_after;
            self.cooldown_until_ms.insert(id.clone(), now + (self.cooldown_secs * 1000) as i64);
            actions.push(Proposed {
                spec: ActionSpec::Move { partition: id, to_worker: c.workers.ids[dst].clone() },
                submit: true,
                reason,
                policy: None,
            });
        }
        Decision { actions, plan: None }
    }
}
