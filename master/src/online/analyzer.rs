//! The analyzer seam: everything that finds actions answers one call, in one vocabulary.
//!
//! An [`Analyzer`] looks at the pass's view ([`AnalysisContext`]: the planner's input with
//! in-flight actions applied as done, the datasets and their shard usage, the planner's state of
//! cooldowns, strikes and hysteresis) and returns [`Proposal`]s — each with its policy, origin
//! (`online | offline | manual`), mode, reason, numbers and rejected alternatives. The core
//! ([`super::OnlineCore`]) takes every analyzer's proposals down one path: `auto` ones are
//! submitted, tracked and evaluated; `dry_run` ones wait for approval. Adding an analyzer is
//! one type that implements the trait and one line in [`registered`].
//!
//! Shipped, in pass order:
//! - [`OnlinePlanner`]: [`crate::planner::plan`] (split, isolate, move, balance);
//! - [`DatasetPlacement`]: the placement manager for hash-sharded datasets (reshards and the
//!   placement rules routers read);
//! - [`OfflineAnalyzer`]: merges and splits ahead of recurring peaks, from the findings of the
//!   offline passes over the archive ([`crate::offline`]), origin `offline`.

use lb_common::protocol::{ActionSpec, DatasetInfo, PlacementRules};

use super::core::OnlineConfig;
use crate::offline::{FindingsSlot, OfflineAnalyzer};
use crate::placement_manager::{DatasetShardUsage, PlacementManager};
use crate::planner::{OutsideCheck, Plan, PlannerInput, PlannerState, PolicyMode, Proposal, plan};

/// What an analyzer sees in one pass.
#[derive(Debug)]
pub struct AnalysisContext<'a> {
    /// The planner's view, corrected for recent moves, with the actions in flight.
    pub input: &'a PlannerInput,
    pub datasets: &'a [DatasetInfo],
    pub dataset_usage: &'a [DatasetShardUsage],
    /// Where the load windows end.
    pub window_end_ms: i64,
    /// Cooldowns, harm strikes and hysteresis, shared by the analyzers and the evaluation's
    /// feedback.
    pub planner_state: &'a mut PlannerState,
    pub now_ms: i64,
    /// What the analyzers before this one proposed in this pass in `auto` mode: not in flight
    /// yet, but it will be, so a later analyzer checks its own proposals with these counted
    /// ([`crate::planner::OutsideCheck::after`]).
    pub earlier: Vec<ActionSpec>,
}

/// What an analyzer found.
#[derive(Debug, Default)]
pub struct Findings {
    pub proposals: Vec<Proposal>,
    /// The online planner's whole plan (declined items and counters, for the analysis record).
    pub plan: Option<Plan>,
}

/// One source of proposals. Pure: no clock, no I/O (`now_ms` is in the context).
pub trait Analyzer: Send + Sync + std::fmt::Debug {
    fn name(&self) -> &'static str;
    fn analyze(&mut self, ctx: &mut AnalysisContext<'_>, config: &OnlineConfig) -> Findings;
    /// The placement rules this analyzer keeps for routers, if it keeps any.
    fn placement_rules(&mut self, _now_ms: i64) -> Option<PlacementRules> {
        None
    }
}

/// The analyzers every master runs, in pass order; the offline analyzer's slot is not fed, so
/// it does nothing (see [`registered_with`]).
pub fn registered(config: &OnlineConfig) -> Vec<Box<dyn Analyzer>> {
    registered_with(config, FindingsSlot::default())
}

/// The shipped analyzers, the offline one reading the findings an offline pass leaves in
/// `offline` (live: the archiver's; in the simulator: its virtual-time passes). It runs last, so
/// it sees the cooldowns the online planner's proposals of the same pass set.
pub fn registered_with(config: &OnlineConfig, offline: FindingsSlot) -> Vec<Box<dyn Analyzer>> {
    vec![Box::new(OnlinePlanner), Box::new(DatasetPlacement::new(config)), Box::new(OfflineAnalyzer::new(offline))]
}

/// Partition overload, worker overload and imbalance ([`crate::planner`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct OnlinePlanner;

impl Analyzer for OnlinePlanner {
    fn name(&self) -> &'static str {
        "online_planner"
    }

    fn analyze(&mut self, ctx: &mut AnalysisContext<'_>, config: &OnlineConfig) -> Findings {
        let plan = plan(ctx.input, &config.planner, ctx.planner_state, ctx.now_ms);
        Findings { proposals: plan.proposals.clone(), plan: Some(plan) }
    }
}

/// Reshards of hash-sharded datasets and the placement rules ([`crate::placement_manager`]).
#[derive(Debug)]
pub struct DatasetPlacement {
    manager: PlacementManager,
}

impl DatasetPlacement {
    pub fn new(config: &OnlineConfig) -> Self {
        Self { manager: PlacementManager::new(&config.placement) }
    }
}

impl Analyzer for DatasetPlacement {
    fn name(&self) -> &'static str {
        "dataset_placement"
    }

    fn analyze(&mut self, ctx: &mut AnalysisContext<'_>, config: &OnlineConfig) -> Findings {
        self.manager.observe(ctx.window_end_ms, ctx.dataset_usage);
        let mut proposals = self.manager.plan(ctx.datasets, &config.placement, ctx.now_ms);
        if proposals.iter().any(|p| p.mode == PolicyMode::Auto) {
            // What will run is checked where its shards land, after what the planner proposed.
            let mut check = OutsideCheck::new(ctx.input, &config.planner, ctx.now_ms)
                .with_datasets(ctx.datasets, ctx.dataset_usage)
                .after(&ctx.earlier);
            proposals.retain(|p| {
                // A dry-run proposal is offered, not run: nothing lands.
                if p.mode != PolicyMode::Auto {
                    return true;
                }
                let Err((reason, why)) = check.admit(&p.spec) else { return true };
                tracing::info!(spec = %p.spec, %why, "reshard declined");
                metrics::counter!(
                    "lb_master_declines_total", "policy" => p.policy.as_str(), "reason" => reason.as_str()
                )
                .increment(1);
                false
            });
        }
        Findings { proposals, plan: None }
    }

    fn placement_rules(&mut self, now_ms: i64) -> Option<PlacementRules> {
        Some(self.manager.rules(now_ms))
    }
}
