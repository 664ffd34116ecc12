//! What decides the actions: the master's real planner, or a baseline to compare it with.
//!
//! - [`Lb`]: the master's online core ([`lb_master::online::OnlineCore`], the same step the live
//!   loop runs, in the same order: settle, evaluate and feed harm back, every analyzer — the
//!   planner and the dataset placement manager —, submit) with the master's default config and
//!   the scenario's `[master]` over it ([`super::policies`]), fed by
//!   [`super::InputBuilder`] as the master feeds it (in-flight actions included) and its
//!   engine's datasets ([`dataset_view`]). Virtual time has no collection lag or noise, so one
//!   second stands for every window: evaluations read the input of that second, and no window
//!   straddles a move (the core's correction for recent moves has nothing to do).
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
use lb_common::protocol::{ActionSpec, DatasetInfo};
use lb_common::validate::ValidationError;
use lb_master::evaluation::Evaluation;
use lb_master::online::{ActionUpdate, EvaluationView, Observation, OnlineConfig, OnlineCore};
use lb_master::placement_manager::{DatasetShardUsage, parse_dataset_shard_id};
use lb_master::planner::{Plan, PlannerInput, PlannerState, Policy, PolicyMode};

use lb_testbed::Engine;
use lb_testbed::scenario::Scenario;

use super::report::CompareError;

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
    pub input: Option<&'a mut PlannerInput>,
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
    /// The id the strategy gave it (`lb`: the core's action id); `None`: the simulator names it.
    pub id: Option<ActionId>,
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
    fn decide(&mut self, ctx: &mut Context<'_>) -> Decision;
    /// The engine accepted `action` as `id` (after [`Strategy::decide`], same second).
    fn submitted(&mut self, _id: &ActionId, _action: &Proposed, _input: Option<&PlannerInput>, _now_ms: i64) {}
    /// The engine refused an action the strategy wanted submitted.
    fn refused(&mut self, _id: &ActionId) {}
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
    /// The largest state a leader hands a successor through etcd over the run (`lb` only;
    /// etcd refuses requests over 1.5 MiB by default).
    fn handover_bytes_max(&self) -> Option<HandoverBytes> {
        None
    }
}

/// A leader's state for its successor: its JSON, and the bytes the live loop saves
/// ([`lb_master::online::Handover::encode`], compressed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HandoverBytes {
    pub json: usize,
    pub saved: usize,
}

/// The strategy named `name` (`lb`, `none`, `greedy`, `lb+offline`, `lb+pd-merge`,
/// `lb+pd-merge+ahead`, `pd`, `crdb`) for `scenario`: `lb` and its offline variants under the
/// scenario's `[master]` ([`super::policies`]), the others as they are.
pub fn by_name(name: &str, scenario: &Scenario) -> Result<Box<dyn Strategy>, CompareError> {
    Ok(match name {
        "lb" => Box::new(Lb::for_scenario(scenario).map_err(CompareError::Policies)?),
        "none" => Box::new(NoBalancer),
        "greedy" => Box::new(Greedy::default()),
        _ if super::offline::NAMES.contains(&name) => {
            let config = super::policies::online_config(scenario, super::offline::LbOffline::sim_config())
                .map_err(CompareError::Policies)?;
            Box::new(super::offline::LbOffline::by_name(name, &config).expect("one of NAMES"))
        }
        super::peers::PD => Box::<super::peers::Pd>::default(),
        super::peers::CRDB => Box::<super::peers::Crdb>::default(),
        _ => return Err(CompareError::UnknownStrategy(name.to_owned())),
    })
}

/// The master's online core. See the module doc.
#[derive(Debug)]
pub struct Lb {
    /// What the core is run with (tests and experiments change it; the default is what ships).
    pub config: OnlineConfig,
    core: OnlineCore,
    /// Ends of submitted actions since the last pass, handed to the core at the next one.
    updates: Vec<ActionUpdate>,
    pub evaluations: Vec<Evaluation>,
    handover_bytes_max: HandoverBytes,
}

impl Default for Lb {
    fn default() -> Self {
        Self::with_config(OnlineConfig::default())
    }
}

impl Lb {
    /// The master's defaults with `scenario`'s `[master]` laid over them.
    pub fn for_scenario(scenario: &Scenario) -> Result<Self, ValidationError> {
        Ok(Self::with_config(super::policies::online_config(scenario, OnlineConfig::default())?))
    }

    pub fn with_config(config: OnlineConfig) -> Self {
        let core = OnlineCore::new(&config, 0);
        Self::with_core(config, core)
    }

    /// The core with these analyzers (the `lb+offline` strategy's, [`super::offline`]).
    pub fn with_analyzers(
        config: OnlineConfig,
        analyzers: Vec<Box<dyn lb_master::online::analyzer::Analyzer>>,
    ) -> Self {
        let core = OnlineCore::with_analyzers(analyzers, 0);
        Self::with_core(config, core)
    }

    fn with_core(config: OnlineConfig, core: OnlineCore) -> Self {
        Self {
            config,
            core,
            updates: Vec::new(),
            evaluations: Vec::new(),
            handover_bytes_max: HandoverBytes::default(),
        }
    }
}

/// The engine's datasets and their shards' usage over the last second, as the master's table
/// gives them to the placement manager.
pub fn dataset_view(engine: &Engine) -> (Vec<DatasetInfo>, Vec<DatasetShardUsage>) {
    let c = &engine.cluster;
    if c.datasets.is_empty() {
        return (Vec::new(), Vec::new());
    }
    let datasets: Vec<DatasetInfo> = c.datasets.iter().map(|d| d.info(&c.nodes, &c.workers)).collect();
    let mut usage = Vec::new();
    for w in 0..c.workers.len() {
        for stats in c.dataset_shard_stats(w, 1000, engine.t_secs()) {
            let dataset = stats.table.as_str();
            let Some(shard) = parse_dataset_shard_id(&stats.partition_id, &stats.tenant, dataset) else { continue };
            let Some(info) = datasets.iter().find(|d| d.tenant == stats.tenant && d.dataset.as_str() == dataset) else {
                continue;
            };
            usage.push(DatasetShardUsage {
                tenant: stats.tenant.clone(),
                dataset: info.dataset.clone(),
                shard,
                worker: Some(c.workers.ids[w].clone()),
                ops_per_sec: stats.ops() as f64,
                rejected_per_sec: stats.rejected as f64,
                bytes_per_sec: stats.read_bytes.saturating_add(stats.write_bytes) as f64,
            });
        }
    }
    (datasets, usage)
}

/// What the `lb` strategy hands the core each second. Virtual time has no collection lag or
/// noise: the last second stands for every window, so evaluations read the planning input and
/// there is no window for the correction of recent moves (`window_ms` 0).
pub fn observation<'a>(
    input: &'a mut PlannerInput,
    datasets: &'a [DatasetInfo],
    usage: &'a [DatasetShardUsage],
    evaluation_due: bool,
    updates: Vec<ActionUpdate>,
    now_ms: i64,
) -> Observation<'a> {
    Observation {
        window_end_ms: now_ms,
        window_ms: 0,
        input,
        evaluation: if evaluation_due { EvaluationView::PlanningInput } else { EvaluationView::None },
        datasets,
        dataset_usage: usage,
        updates,
        approvals: Vec::new(),
        manual: Vec::new(),
    }
}

impl Strategy for Lb {
    fn name(&self) -> &str {
        "lb"
    }

    fn needs_input(&self) -> bool {
        true
    }

    fn decide(&mut self, ctx: &mut Context<'_>) -> Decision {
        let Some(input) = ctx.input.as_deref_mut() else {
            return Decision::default();
        };
        let (datasets, usage) = dataset_view(ctx.engine);
        let due = self.core.evaluation_due(&self.config, ctx.now_ms);
        let updates = std::mem::take(&mut self.updates);
        let observation = observation(input, &datasets, &usage, due, updates, ctx.now_ms);
        let out = self.core.step(observation, &self.config, ctx.now_ms);
        let policies: HashMap<&str, Policy> = out.proposals.iter().map(|p| (p.policy.as_str(), p.policy)).collect();
        let mut actions: Vec<Proposed> = out
            .submissions()
            .map(|r| Proposed {
                spec: r.spec.clone(),
                submit: true,
                reason: r.reason.clone(),
                policy: r.policy.as_deref().and_then(|p| policies.get(p).copied()),
                id: Some(r.id.clone()),
            })
            .collect();
        actions.extend(out.proposals.iter().filter(|p| p.mode == PolicyMode::DryRun).map(|p| Proposed {
            spec: p.spec.clone(),
            submit: false,
            reason: p.reason.clone(),
            policy: Some(p.policy),
            id: None,
        }));
        self.evaluations.extend(out.evaluations);
        // Compressed only when the JSON is the largest so far: a pass's compression costs
        // milliseconds at 100,000 partitions, and the sizes grow together.
        let handover = self.core.handover();
        let json = serde_json::to_vec(&handover).map_or(0, |b| b.len());
        if json > self.handover_bytes_max.json {
            let saved = handover.encode().map_or(0, |b| b.len());
            self.handover_bytes_max = HandoverBytes { json, saved: saved.max(self.handover_bytes_max.saved) };
        }
        // The sim records every proposal of the pass: the planner's, the analyzers' (offline
        // merges and pre-splits) and reverts.
        let plan = lb_master::planner::Plan { proposals: out.proposals, ..out.plan };
        Decision { actions, plan: Some(plan) }
    }

    fn submitted(&mut self, id: &ActionId, action: &Proposed, input: Option<&PlannerInput>, now_ms: i64) {
        // The core follows its own submissions already; anything else (a test's injected
        // action) is followed like a manual one.
        let own = self.core.executor().tracked.iter().any(|t| &t.id == id);
        if let (false, Some(input)) = (own, input) {
            self.core.track(id.clone(), &action.spec, action.policy, input, now_ms);
        }
    }

    fn refused(&mut self, id: &ActionId) {
        self.core.refused(id);
    }

    fn finished(&mut self, id: &ActionId, applied: bool, at_ms: i64) {
        self.updates.push(ActionUpdate::Finished { id: id.clone(), applied, at_ms });
    }

    fn handover_bytes_max(&self) -> Option<HandoverBytes> {
        Some(self.handover_bytes_max)
    }

    fn evaluations(&self) -> &[Evaluation] {
        &self.evaluations
    }

    fn planner_state(&self) -> Option<&PlannerState> {
        Some(self.core.planner_state())
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

    fn decide(&mut self, _ctx: &mut Context<'_>) -> Decision {
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

    fn decide(&mut self, ctx: &mut Context<'_>) -> Decision {
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
                spec: ActionSpec::Move {
                    partition: id,
                    to_worker: c.workers.ids[dst].clone(),
                    max_bytes_per_sec: None,
                },
                submit: true,
                reason,
                policy: None,
                id: None,
            });
        }
        Decision { actions, plan: None }
    }
}
