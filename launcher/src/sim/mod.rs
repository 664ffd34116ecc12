//! The scale simulator: the virtual-time [`Engine`] driven by a balancing [`Strategy`] — the
//! master's real planner or a baseline — one decision per simulated second, with every second
//! recorded.
//!
//! **Loop** ([`Sim::tick`]), one simulated second:
//! 1. the engine steps 1 s (timeline events, operations advance and apply, load);
//! 2. operations that ended leave the in-flight list and their [`ActionRecord`] gets its outcome;
//! 3. if the strategy reads it, the planner's input is refreshed in place ([`InputBuilder`]);
//! 4. the strategy decides; each action it wants run is submitted with [`Engine::submit`]
//!    (refusals are kept in [`Sim::submit_errors`]);
//! 5. the second's figures go into [`Sim::ticks`].
//!
//! Everything a later stage needs (an action evaluation, the analysis in [`report`]) is in the
//! public records: [`Sim::actions`] (what ran, when, on what, with which outcome),
//! [`Sim::proposals`] (the core's proposals with their reasons: the planner's, the analyzers',
//! reverts) and [`Sim::ticks`].
//!
//! - [`input`]: the engine → `PlannerInput` adapter.
//! - [`strategy`]: `lb`, `none` and `greedy`.
//! - [`scale`]: a scenario scaled to N partitions and M workers at the same load per worker.
//! - [`report`]: per-strategy figures, the comparison runner, the markdown table.
//! - [`offline`]: `lb+offline` (the offline analyzer fed from virtual time) and the multi-day
//!   report of partitions, merges, pre-splits and rejections at each peak.
//! - [`peers`]: `pd` and `crdb`, TiKV/PD's and CockroachDB's balancing as their defaults
//!   describe them.
//! - [`safety`]: the invariant every run is checked against: no action overloads the place it
//!   puts load, compared with no balancer at the same second.
//! - [`svg`]: line charts of the per-second figures.

pub mod input;
pub mod offline;
pub mod peers;
pub mod policies;
pub mod report;
pub mod safety;
pub mod scale;
pub mod strategy;
pub mod svg;

use std::time::{Duration, Instant};

use lb_common::ids::{ActionId, Key, OperationId, PartitionId};
use lb_common::protocol::{ActionKind, ActionSpec, GroupTarget, Health, OperationState};
use lb_master::planner::{InFlightAction, Proposal};

pub use input::InputBuilder;
use lb_testbed::Engine;
use lb_testbed::scenario::Scenario;
pub use strategy::{Context, Decision, Greedy, Lb, NoBalancer, Proposed, Strategy};

/// One simulated second, recorded after the strategy acted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tick {
    pub t_secs: u64,
    /// Cluster demand and rejected ops per second (partitions and datasets).
    pub demand: f64,
    pub rejected: f64,
    /// Demand over capacity across healthy workers: max, mean, coefficient of variation.
    pub max_demand_ratio: f64,
    pub mean_demand_ratio: f64,
    pub cv: f64,
    /// Max and mean over healthy *ungrouped* workers (the pool the planner balances).
    pub pool_max: f64,
    pub pool_mean: f64,
    /// Operations in flight after this second's submissions.
    pub in_flight: usize,
    /// The healthy worker with the highest demand ratio (index into the engine's workers), and
    /// its demand over its nominal capacity (without what its outgoing streams take: a source
    /// lends capacity to a move while it runs).
    pub worst_worker: Option<u32>,
    pub worst_worker_nominal_ratio: f64,
    /// The hottest zone's demand over its capacity, over the mean of the zones' (1 without
    /// zones): how unevenly the zones are loaded.
    pub zone_max_over_mean: f64,
}

impl Tick {
    /// Rejected share of demand, 0..1.
    pub fn rejected_ratio(&self) -> f64 {
        if self.demand > 0.0 { self.rejected / self.demand } else { 0.0 }
    }

    /// Max over mean demand ratio of healthy workers (1 when idle).
    pub fn max_over_mean(&self) -> f64 {
        if self.mean_demand_ratio > 0.0 { self.max_demand_ratio / self.mean_demand_ratio } else { 1.0 }
    }
}

/// How a submitted action ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Still pending or running at the end of the run.
    InFlight,
    Succeeded {
        at_secs: u64,
    },
    Failed {
        at_secs: u64,
    },
}

/// One action the strategy submitted and the engine accepted.
#[derive(Debug, Clone, PartialEq)]
pub struct ActionRecord {
    pub t_secs: u64,
    pub action_id: ActionId,
    pub operation: OperationId,
    pub spec: ActionSpec,
    pub reason: String,
    /// Stored bytes the action streams between workers (0 for a split or a local merge).
    pub bytes_to_move: u64,
    pub outcome: Outcome,
    /// Workers the action put load on (engine indices), known once it succeeded: a move's
    /// destination, where an isolation or merge landed.
    pub landed_on: Vec<u32>,
    /// The dedicated group it put load into, if any.
    pub into_group: Option<String>,
    /// The worker its streamed data left (engine index) when submitted: the partition's owner,
    /// a cross-worker merge's side not on where it lands.
    pub source: Option<u32>,
    /// Of `bytes_to_move`, what crossed from one zone into another, known once it succeeded.
    pub cross_zone_bytes: u64,
    /// Keys the action cuts or joins at, known when submitted: a split's keys, a merge's
    /// boundary (the right side's first key). For [`report::thrash`].
    pub keys: Vec<Key>,
}

/// Wall time spent in each phase of the loop, for profiling.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PhaseTimes {
    pub engine: Duration,
    pub input: Duration,
    pub decide: Duration,
    pub record: Duration,
}

/// The engine, a strategy and everything recorded. See the module doc.
#[derive(Debug)]
pub struct Sim {
    /// What it runs (kept for baselines such as [`safety::against_no_balancer`]).
    pub scenario: Scenario,
    pub engine: Engine,
    pub strategy: Box<dyn Strategy>,
    pub input: InputBuilder,
    /// Operations submitted and not finished, with what the planner is told about them.
    pub in_flight: Vec<(OperationId, InFlightAction, usize)>,
    pub actions: Vec<ActionRecord>,
    /// The core's proposals (auto and dry-run: the planner's, the analyzers' and reverts) with
    /// the second they were made; `lb` only.
    pub proposals: Vec<(u64, Proposal)>,
    pub submit_errors: Vec<String>,
    /// Broken invariants of a decision (two actions on one partition in one pass).
    pub violations: Vec<String>,
    pub ticks: Vec<Tick>,
    /// Per second, each dedicated group's demand over its capacity, indexed like `group_ids`.
    pub group_ratios: Vec<Vec<f64>>,
    pub group_ids: Vec<String>,
    pub times: PhaseTimes,
    next_id: u64,
}

impl Sim {
    pub fn new(scenario: &Scenario, strategy: Box<dyn Strategy>) -> Self {
        Self {
            scenario: scenario.clone(),
            engine: Engine::new(scenario),
            strategy,
            input: InputBuilder::new(std::thread::available_parallelism().map_or(1, usize::from)),
            in_flight: Vec::new(),
            actions: Vec::new(),
            proposals: Vec::new(),
            submit_errors: Vec::new(),
            violations: Vec::new(),
            ticks: Vec::new(),
            group_ratios: Vec::new(),
            group_ids: Vec::new(),
            times: PhaseTimes::default(),
            next_id: 0,
        }
    }

    /// The master's online core on `scenario`, under its `[master]`. Panics if that section is
    /// invalid (`lb sim` refuses it first, through [`policies::online_config`]).
    pub fn lb(scenario: &Scenario) -> Self {
        let lb = Lb::for_scenario(scenario).unwrap_or_else(|e| panic!("scenario {}: [master]: {e}", scenario.name));
        Self::new(scenario, Box::new(lb))
    }

    pub fn strategy_name(&self) -> &str {
        self.strategy.name()
    }

    /// One simulated second (see the module doc); returns the strategy's decision.
    pub fn tick(&mut self) -> Decision {
        let started = Instant::now();
        self.engine.step(Duration::from_secs(1));
        let t = self.engine.t_secs() as u64;
        self.settle_in_flight(t);
        let stepped = Instant::now();

        let input = if self.strategy.needs_input() {
            let input = self.input.update(&mut self.engine);
            input.in_flight = self.in_flight.iter().map(|(_, a, _)| a.clone()).collect();
            Some(input)
        } else {
            None
        };
        let built = Instant::now();
        let busy: Vec<PartitionId> =
            self.in_flight.iter().flat_map(|(_, a, _)| partitions_of(&a.spec)).cloned().collect();
        let now_ms = self.engine.now_ms();
        let decision = self.strategy.decide(&mut Context { engine: &self.engine, input, busy: &busy, now_ms });
        let decided = Instant::now();

        self.check_one_action_per_partition(t, &decision);
        if let Some(plan) = &decision.plan {
            self.proposals.extend(plan.proposals.iter().map(|p| (t, p.clone())));
        }
        for action in decision.actions.iter().filter(|a| a.submit) {
            if let Some(id) = self.submit(t, now_ms, action) {
                let input = self.strategy.needs_input().then(|| self.input.current());
                self.strategy.submitted(&id, action, input, now_ms);
            }
        }
        self.record_tick(t);
        let recorded = Instant::now();

        self.times.engine += stepped - started;
        self.times.input += built - stepped;
        self.times.decide += decided - built;
        self.times.record += recorded - decided;
        decision
    }

    /// Ticks until scenario time `t_secs`.
    pub fn run_until(&mut self, t_secs: u64) {
        while (self.engine.t_secs() as u64) < t_secs {
            self.tick();
        }
    }

    /// Submitted actions of `kind` (accepted by the engine).
    pub fn count(&self, kind: ActionKind) -> usize {
        self.actions.iter().filter(|a| a.spec.kind() == kind).count()
    }

    /// Proposals of `kind` (the core's, auto or not).
    pub fn proposed(&self, kind: ActionKind) -> usize {
        self.proposals.iter().filter(|(_, p)| p.spec.kind() == kind).count()
    }

    /// Stored bytes streamed by actions that succeeded.
    pub fn bytes_moved(&self) -> u64 {
        self.actions.iter().filter(|a| matches!(a.outcome, Outcome::Succeeded { .. })).map(|a| a.bytes_to_move).sum()
    }

    fn settle_in_flight(&mut self, t: u64) {
        let engine = &self.engine;
        let actions = &mut self.actions;
        let mut ended = Vec::new();
        self.in_flight.retain(|(op, _, record)| {
            let state = engine.operation(op).map(|o| o.state);
            match state {
                Some(OperationState::Pending | OperationState::Running) => true,
                Some(OperationState::Succeeded) => {
                    let a = &mut actions[*record];
                    a.outcome = Outcome::Succeeded { at_secs: t };
                    (a.landed_on, a.into_group) = landing(engine, &a.spec);
                    a.cross_zone_bytes = cross_zone_bytes(engine, a);
                    ended.push((*record, true));
                    false
                }
                Some(OperationState::Failed) | None => {
                    actions[*record].outcome = Outcome::Failed { at_secs: t };
                    ended.push((*record, false));
                    false
                }
            }
        });
        let now_ms = self.engine.now_ms();
        for (record, applied) in ended {
            self.strategy.finished(&self.actions[record].action_id, applied, now_ms);
        }
    }

    /// Submits `action` now as if the strategy had decided it this second (it is tracked and
    /// evaluated like the strategy's own): tests use it to put a known-bad action in front of
    /// the evaluation and its feedback.
    pub fn inject(&mut self, action: &Proposed) -> Option<ActionId> {
        let (t, now_ms) = (self.engine.t_secs() as u64, self.engine.now_ms());
        let id = self.submit(t, now_ms, action)?;
        let input = self.strategy.needs_input().then(|| self.input.current());
        self.strategy.submitted(&id, action, input, now_ms);
        Some(id)
    }

    /// Evaluations of the strategy's finished actions (`lb` only).
    pub fn evaluations(&self) -> &[lb_master::evaluation::Evaluation] {
        self.strategy.evaluations()
    }

    fn check_one_action_per_partition(&mut self, t: u64, decision: &Decision) {
        let mut touched: Vec<&PartitionId> = decision.actions.iter().flat_map(|a| partitions_of(&a.spec)).collect();
        let before = touched.len();
        touched.sort();
        touched.dedup();
        if before != touched.len() {
            self.violations.push(format!("t={t}: a partition got two actions in one pass"));
        }
    }

    fn submit(&mut self, t: u64, now_ms: i64, action: &Proposed) -> Option<ActionId> {
        self.next_id += 1;
        let action_id = action.id.clone().unwrap_or_else(|| {
            ActionId::new(format!("{}-{}", self.strategy.name(), self.next_id))
                .expect("strategy names and numbers make valid ids")
        });
        let bytes_to_move = self.bytes_to_move(&action.spec);
        let keys = match &action.spec {
            ActionSpec::Split { split_key, .. } => vec![*split_key],
            ActionSpec::SplitInto { split_keys, .. } => split_keys.clone(),
            ActionSpec::Merge { right, .. } => {
                let p = &self.engine.cluster.partitions;
                p.find(right).map(|r| Key(p.start[r])).into_iter().collect()
            }
            _ => Vec::new(),
        };
        let source = {
            let p = &self.engine.cluster.partitions;
            match &action.spec {
                ActionSpec::Merge { left, right, to_worker } => self
                    .engine
                    .cluster
                    .merge_streamed(left, right, to_worker.as_ref())
                    .ok()
                    .flatten()
                    .map(|i| p.owner[i]),
                other => partitions_of(other).into_iter().next().and_then(|id| p.find(id)).map(|i| p.owner[i]),
            }
        };
        match self.engine.submit(action_id.clone(), action.spec.clone()) {
            Ok(operation) => {
                self.in_flight.push((
                    operation.clone(),
                    InFlightAction { spec: action.spec.clone(), started_at_ms: now_ms },
                    self.actions.len(),
                ));
                self.actions.push(ActionRecord {
                    t_secs: t,
                    action_id: action_id.clone(),
                    operation,
                    spec: action.spec.clone(),
                    reason: action.reason.clone(),
                    bytes_to_move,
                    outcome: Outcome::InFlight,
                    landed_on: Vec::new(),
                    into_group: None,
                    source,
                    cross_zone_bytes: 0,
                    keys,
                });
                Some(action_id)
            }
            Err(e) => {
                self.submit_errors.push(format!("t={t} {:?}: {e}", action.spec));
                self.strategy.refused(&action_id);
                None
            }
        }
    }

    /// Bytes `spec` would stream: a move's or a grouped partition's stored bytes when it
    /// changes worker, a cross-worker merge's side not on where it lands, a multi-way split's
    /// pieces created elsewhere; a split in two moves nothing.
    fn bytes_to_move(&self, spec: &ActionSpec) -> u64 {
        let p = &self.engine.cluster.partitions;
        let stored = |id: &PartitionId| p.find(id).map_or(0, |i| p.stored_bytes[i] as u64);
        match spec {
            ActionSpec::Move { partition, .. } => stored(partition),
            ActionSpec::SplitInto { partition, split_keys, to_workers, first_to_worker, .. } => self
                .engine
                .cluster
                .check_split_into(partition, split_keys, to_workers, first_to_worker.as_ref())
                .map_or(0, |(_, b)| b as u64),
            ActionSpec::Merge { left, right, to_worker } => {
                match self.engine.cluster.merge_streamed(left, right, to_worker.as_ref()).ok().flatten() {
                    Some(i) => p.stored_bytes[i] as u64,
                    None => 0,
                }
            }
            ActionSpec::Group { target: GroupTarget::Partition { partition }, group } => {
                let w = &self.engine.cluster.workers;
                let on_group = p.find(partition).is_some_and(|i| w.group[p.owner[i] as usize].as_ref() == Some(group));
                if on_group { 0 } else { stored(partition) }
            }
            _ => 0,
        }
    }

    fn record_tick(&mut self, t: u64) {
        let s = self.engine.summary();
        let (pool_max, pool_mean) = pool_ratios(&self.engine);
        self.ticks.push(Tick {
            t_secs: t,
            demand: s.demand_ops_per_sec,
            rejected: s.rejected_ops_per_sec,
            max_demand_ratio: s.max_demand_ratio,
            mean_demand_ratio: s.mean_demand_ratio,
            cv: s.cv,
            pool_max,
            pool_mean,
            in_flight: self.in_flight.len(),
            worst_worker: worst_worker(&self.engine),
            worst_worker_nominal_ratio: worst_worker(&self.engine).map_or(0.0, |w| {
                let load = &self.engine.cluster.load;
                load.worker_demand_ratio[w as usize] * load.worker_capacity_factor[w as usize]
            }),
            zone_max_over_mean: zone_max_over_mean(&self.engine),
        });
        self.record_groups();
    }

    /// Each dedicated group's demand over capacity this second (groups seen so far keep their
    /// index; a group with no up worker reads 0).
    fn record_groups(&mut self) {
        let c = &self.engine.cluster;
        let mut sums: Vec<(f64, f64)> = vec![(0.0, 0.0); self.group_ids.len()];
        for w in 0..c.workers.len() {
            let Some(g) = &c.workers.group[w] else { continue };
            let k = match self.group_ids.iter().position(|n| n == g.as_str()) {
                Some(k) => k,
                None => {
                    self.group_ids.push(g.to_string());
                    sums.push((0.0, 0.0));
                    self.group_ids.len() - 1
                }
            };
            if c.workers.is_up(w) {
                let cap = c.workers.capacity[w].ops_per_sec * c.load.worker_capacity_factor[w];
                sums[k].0 += c.load.worker_demand_ratio[w] * cap;
                sums[k].1 += cap;
            }
        }
        if self.group_ids.is_empty() {
            return;
        }
        self.group_ratios.push(sums.into_iter().map(|(d, c)| if c > 0.0 { d / c } else { 0.0 }).collect());
    }

    /// The safety check's view of this run (see [`safety`]).
    pub fn safety_record(&self) -> safety::RunRecord<'_> {
        safety::RunRecord {
            ticks: &self.ticks,
            actions: &self.actions,
            group_ratios: &self.group_ratios,
            group_ids: &self.group_ids,
            worker_ids: &self.engine.cluster.workers.ids,
        }
    }
}

/// The partitions an action keeps busy (a group of a whole table or tenant: none listed).
pub fn partitions_of(spec: &ActionSpec) -> Vec<&PartitionId> {
    lb_master::planner::partitions_of(spec)
}

/// The up worker with the highest demand ratio.
fn worst_worker(engine: &Engine) -> Option<u32> {
    let c = &engine.cluster;
    (0..c.workers.len())
        .filter(|&w| c.workers.is_up(w))
        .max_by(|&a, &b| c.load.worker_demand_ratio[a].total_cmp(&c.load.worker_demand_ratio[b]))
        .map(|w| w as u32)
}

/// Where an action that just succeeded put load: the workers it landed on, and the dedicated
/// group it filled.
fn landing(engine: &Engine, spec: &ActionSpec) -> (Vec<u32>, Option<String>) {
    let c = &engine.cluster;
    let owner_of = |id: &PartitionId| c.partitions.find(id).map(|i| c.partitions.owner[i]);
    match spec {
        ActionSpec::Move { to_worker, .. } => (c.workers.find(to_worker).map(|w| w as u32).into_iter().collect(), None),
        ActionSpec::Merge { left, .. } => (owner_of(left).into_iter().collect(), None),
        ActionSpec::Group { target, group } => {
            let members: Vec<u32> = match target {
                GroupTarget::Partition { partition } => owner_of(partition).into_iter().collect(),
                _ => (0..c.workers.len())
                    .filter(|&w| c.workers.group[w].as_ref() == Some(group))
                    .map(|w| w as u32)
                    .collect(),
            };
            (members, Some(group.to_string()))
        }
        // The pieces stay with the partition's worker, each with its own limit.
        ActionSpec::Split { partition, .. } => (owner_of(partition).into_iter().collect(), None),
        // The first piece stays with no more load than the whole had (or goes where
        // `first_to_worker` sends it); the new pieces land where the action sent them (their own
        // worker included, where one stays), joining `group` there when it names one.
        ActionSpec::SplitInto { to_workers, first_to_worker, group, .. } => {
            let mut on: Vec<u32> =
                to_workers.iter().chain(first_to_worker).filter_map(|w| c.workers.find(w)).map(|w| w as u32).collect();
            on.sort_unstable();
            on.dedup();
            (on, group.as_ref().map(|g| g.to_string()))
        }
        // The dataset's load spreads over its new subring's owners.
        ActionSpec::Reshard { tenant, dataset, .. } => {
            let mut on: Vec<u32> = c
                .datasets
                .iter()
                .filter(|d| &d.tenant == tenant && &d.dataset == dataset)
                .flat_map(|d| d.shares.iter().map(|s| s.worker))
                .collect();
            on.sort_unstable();
            on.dedup();
            (on, None)
        }
    }
}

/// The stored bytes of `a` that crossed zones: all of a move's, an isolation's or a merge's
/// when it landed in another zone than its source's; a multi-way split's in proportion to the
/// new pieces sent to other zones (the pieces' bytes follow their ranges, about even).
fn cross_zone_bytes(engine: &Engine, a: &ActionRecord) -> u64 {
    let w = &engine.cluster.workers;
    let Some(zone) = a.source.and_then(|s| w.zone[s as usize].as_ref()) else { return 0 };
    let away = |i: usize| w.zone[i].as_ref().is_some_and(|z| z != zone);
    match &a.spec {
        ActionSpec::SplitInto { to_workers, .. } => {
            let moving: Vec<usize> =
                to_workers.iter().filter_map(|id| w.find(id)).filter(|&i| Some(i as u32) != a.source).collect();
            let crossing = moving.iter().filter(|&&i| away(i)).count();
            if moving.is_empty() { 0 } else { a.bytes_to_move * crossing as u64 / moving.len() as u64 }
        }
        _ if a.landed_on.iter().any(|&i| away(i as usize)) => a.bytes_to_move,
        _ => 0,
    }
}

/// The hottest zone's demand ratio over the mean of the zones' (each zone's up workers taken
/// together); 1 with fewer than two zones.
pub fn zone_max_over_mean(engine: &Engine) -> f64 {
    let c = &engine.cluster;
    let mut zones: Vec<(&lb_common::ids::ZoneId, f64, f64)> = Vec::new();
    for w in 0..c.workers.len() {
        let Some(z) = &c.workers.zone[w] else { continue };
        if !c.workers.is_up(w) {
            continue;
        }
        let cap = c.workers.capacity[w].ops_per_sec * c.load.worker_capacity_factor[w];
        let demand = c.load.worker_demand_ratio[w] * cap;
        match zones.iter_mut().find(|(n, _, _)| *n == z) {
            Some(e) => {
                e.1 += demand;
                e.2 += cap;
            }
            None => zones.push((z, demand, cap)),
        }
    }
    let ratios: Vec<f64> = zones.iter().filter(|z| z.2 > 0.0).map(|z| z.1 / z.2).collect();
    let mean = ratios.iter().sum::<f64>() / ratios.len().max(1) as f64;
    if ratios.len() < 2 || mean <= 0.0 {
        return 1.0;
    }
    ratios.iter().copied().fold(0.0, f64::max) / mean
}

/// Max and mean demand ratio over healthy ungrouped workers (the pool the planner balances).
pub fn pool_ratios(engine: &Engine) -> (f64, f64) {
    let c = &engine.cluster;
    let (mut n, mut sum, mut max) = (0.0, 0.0, 0.0f64);
    for w in 0..c.workers.len() {
        if c.workers.health[w] != Health::Down && c.workers.group[w].is_none() {
            let r = c.load.worker_demand_ratio[w];
            n += 1.0;
            sum += r;
            max = max.max(r);
        }
    }
    (max, if n > 0.0 { sum / n } else { 0.0 })
}
