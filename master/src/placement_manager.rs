//! Placement manager for hash-sharded datasets: EWMA statistics → adaptive shard allocator →
//! load-balancing strategy → **reshard** proposals, and the placement rules routers poll.
//!
//! # Problem
//!
//! A hash-sharded dataset (an ingest stream, a profile store) writes into a contiguous subring of
//! `dataset_shards` shards inside its tenant's subring; each shard lives on one worker. When the
//! dataset grows, its shards' owners saturate and reject writes unless the subring widens; when
//! it shrinks, a wide subring scatters its keys for nothing. Under fingerprint placement a skewed
//! key set also loads a few shards far above the rest, which more shards do not fix but round
//! robin does. The manager watches per-shard load and proposes the one `Reshard` action per
//! dataset (shard count and strategy together) that fixes both, explained like every planner
//! proposal.
//!
//! # Inputs
//!
//! Dataset load reaches the master as *pseudo-partitions* in the ordinary report pipeline
//! (`docs/protocol.md`, "Hash-sharded datasets in reports"): a worker reports each shard it serves
//! with `table` = dataset and `partition_id` = `<tenant>.<dataset>.s<shard id>`. The agent,
//! collector and MetricsTable carry them unchanged; [`dataset_shard_usage`] picks them back out of
//! the table's rows (only for datasets the topology lists, only ids of that exact form). The
//! planner never sees them: its input is built from the topology's partitions.
//!
//! # One tick
//!
//! 1. [`PlacementManager::observe`]: each shard's demand (served + rejected ops, and bytes) is
//!    folded into an [`EwmaRate`] per (tenant, dataset, shard) and per dataset.
//! 2. [`PlacementManager::plan`], per dataset of the topology:
//!    - load in **shard units**: `max(ops / shard_unit_ops_per_sec, bytes / shard_unit_bytes_per_sec)`;
//!    - the dataset's [`ShardAllocator`] turns it into a target shard count: scale out at once
//!      (amplified by the burst multiplier when scale-outs follow each other inside the burst
//!      window), scale in only to the highest need of the current and previous decay window;
//!      a dataset first seen keeps its current shard count as a floor for one to two decay
//!      windows, so a restart of the master never shrinks anything;
//!    - the **strategy switch**: under `dynamic`, fingerprint becomes round robin when every skew
//!      condition holds (at least `min_shards` shards, shard count within
//!      `min..max_shards_to_target_ratio` of the target, a shard at `overheated_units` or more, a
//!      relative standard deviation of at least `min_skew_rsd`, and no reshard in the last two
//!      EWMA half-lives, while new shards' averages still rise from zero); round robin is sticky;
//!    - a `Reshard` proposal when the target or the strategy differs from the topology, at most
//!      one per `min_reshard_interval_secs` per dataset (counted from the last proposal and from
//!      the last layout change seen in the topology).
//! 3. [`PlacementManager::rules`]: the rules for `GET /api/v1/placement/rules`, following what the
//!    topology says is applied (a router must never route to a subring the storage does not have).
//!
//! # Invariants (tested)
//!
//! - No data is not zero load: a dataset without a reported shard for `stale_after_secs` gets no
//!   proposal; a dataset first seen is never shrunk within its first decay window.
//! - Scale-in waits for the decay window: after the load drops, the first reshard down comes no
//!   earlier than one decay window after the last higher need; and a dataset is never resharded
//!   up and down while its load stays put.
//! - Every proposal has a reason, trigger numbers, a before/after prediction and its rejected
//!   alternatives. For this policy the fields mean: `trigger.partition_*` = the hottest shard
//!   (a pseudo-partition) and the shard unit, `partition_rejected_per_sec` = the dataset's
//!   rejections, `max_over_mean` / `cv` = hottest over mean shard and the relative standard
//!   deviation; `predicted.target_*` and `cluster_max_*` = the hottest shard in shard units,
//!   `source_*` = the mean shard, `cost_ratio` = 0 (a reshard moves no stored data: new writes
//!   follow the new subring).
//!
//! Pure: no I/O, no clock; `now_ms` is an argument. Config changes apply on the next `plan`
//! (a new EWMA half-life to series created from then on).

#[cfg(test)]
mod scenario_tests;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use lb_common::ids::{DatasetId, PartitionId, TenantId, WorkerId, ZoneId};
use lb_common::placement::allocator::{
    AllocatorLimits, DEFAULT_BURST_WINDOW, DEFAULT_DECAY_WINDOW, DEFAULT_MAX_DATASET_SHARDS,
    DEFAULT_MIN_DATASET_SHARDS, ShardAllocator,
};
use lb_common::placement::distribute::{DistributionKey, dataset_shard_indices};
use lb_common::placement::ewma::EwmaRate;
use lb_common::placement::ids::ShardId;
use lb_common::placement::rules::{
    DEFAULT_PLACEMENT_RETENTION_PERIOD, DatasetPlacement, PlacementRules as CoreRules, TenantPlacement,
};
use lb_common::placement::strategy::LoadBalancingMode;
use lb_common::protocol::{ActionSpec, DatasetInfo, LoadBalancing, PlacementRules};
use lb_common::validate::{Scope, ValidationError, Validator};
use serde::{Deserialize, Serialize};

use crate::planner::{Alternative, Policy, PolicyMode, Prediction, Proposal, Trigger};
use crate::table::{MetricsTable, PartitionRow, TableError};

/// Dry-run: a reshard changes where a whole dataset's writes go; a new deployment shows its
/// proposals first and an operator turns on `auto`.
pub const DEFAULT_MODE: PolicyMode = PolicyMode::DryRun;
/// 60 s: the table's windows already average the per-second reports; a minute more smooths bursts
/// while a steady ramp lags by only ~1.4 half-lives (the reference's 3 min reacts too late to a
/// dataset that grows a shard's worth every few minutes).
pub const DEFAULT_EWMA_HALF_LIFE_SECS: u64 = 60;
/// 5,000 ops/s per shard: a sixth of a 30k ops/s worker, so even a worker whose 4 tokens all fall
/// into one dataset's subring keeps a third of its capacity for its partitions.
pub const DEFAULT_SHARD_UNIT_OPS_PER_SEC: f64 = 5_000.0;
/// 50 MB/s per shard: a sixth of a 300 MB/s worker, for the same reason as the ops unit.
pub const DEFAULT_SHARD_UNIT_BYTES_PER_SEC: f64 = 50e6;
/// 60 s between reshards of one dataset: routers poll rules every 15 s, so four polls let every
/// router pick up one change before the next (the testbed applies a reshard in 5 s).
pub const DEFAULT_MIN_RESHARD_INTERVAL_SECS: u64 = 60;
/// 30 s without any reported shard: the collection is broken or the dataset went idle; either
/// way there is nothing to act on (no data is not zero load).
pub const DEFAULT_STALE_AFTER_SECS: u64 = 30;
/// Two shards at least: skew needs something to compare (the reference's first condition).
pub const DEFAULT_SWITCH_MIN_SHARDS: u32 = 2;
/// Shard count under half the target: a rescale is in progress, the skew is not the keys'.
pub const DEFAULT_SWITCH_MIN_SHARDS_TO_TARGET_RATIO: f64 = 0.5;
/// Shard count over twice the target: a relocation or scale-in is pending.
pub const DEFAULT_SWITCH_MAX_SHARDS_TO_TARGET_RATIO: f64 = 2.0;
/// A shard at 2 units is overheated: more shards cannot help a key set that sticks to it.
pub const DEFAULT_SWITCH_OVERHEATED_UNITS: f64 = 2.0;
/// Relative standard deviation 0.5: the shards are clearly uneven (the reference's threshold).
pub const DEFAULT_SWITCH_MIN_SKEW_RSD: f64 = 0.5;
/// After a reshard the strategy switch waits two EWMA half-lives: new shards' averages then
/// reach three quarters of their rate, close enough to tell key skew from warm-up.
const SWITCH_WARM_UP_HALF_LIVES: f64 = 2.0;
/// The allocator counts load in thousandths of a shard unit (it works on integers).
const MILLI_UNITS_PER_UNIT: f64 = 1000.0;
/// A shard not reported for 10 s (ten report intervals) has left the dataset's subring.
const SHARD_SEEN_WITHIN_MS: i64 = 10_000;
/// A gap between observations longer than this counts as this long (after a master pause, one
/// tick's rates must not stand for minutes of traffic).
const MAX_OBSERVE_GAP_SECS: f64 = 10.0;
/// Most ring shards one dataset may be configured to span (the core's largest default, ×64).
pub const MAX_SHARDS_LIMIT: u64 = 65_536;
/// A week: windows longer than this are a typo (the reference uses 17 and 19 minutes).
const MAX_WINDOW_SECS: u64 = 7 * 86_400;

/// How a dataset's writes pick a shard, as configured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadBalancingPolicy {
    /// Always by key fingerprint (locality first).
    Fingerprint,
    /// Always round robin (spread first).
    RoundRobin,
    /// Fingerprint until the skew conditions hold, then round robin for good (the reference).
    #[default]
    Dynamic,
}

/// The placement manager's config (`[placement]` in `master.toml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlacementManagerConfig {
    pub mode: PolicyMode,
    /// Half-life of the per-shard and per-dataset load averages.
    pub ewma_half_life_secs: u64,
    /// Load one shard should carry at most, per dimension; a dataset needs
    /// `floor(load / unit) + 1` shards.
    pub shard_unit_ops_per_sec: f64,
    pub shard_unit_bytes_per_sec: f64,
    pub min_shards: u32,
    /// Also capped by the ring's shard count.
    pub max_shards: u32,
    /// Scale-outs closer than this count as one burst and are amplified (×2, ×4, … ×16, at most
    /// twice the need).
    pub burst_window_secs: u64,
    /// Scale-in keeps the highest need of the current and previous window of this length.
    pub decay_window_secs: u64,
    pub min_reshard_interval_secs: u64,
    pub stale_after_secs: u64,
    pub load_balancing: LoadBalancingPolicy,
    pub strategy_switch: StrategySwitchConfig,
}

/// When `dynamic` load balancing switches a dataset from fingerprint to round robin: every
/// condition must hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StrategySwitchConfig {
    pub min_shards: u32,
    pub min_shards_to_target_ratio: f64,
    pub max_shards_to_target_ratio: f64,
    /// Some shard carries at least this many shard units.
    pub overheated_units: f64,
    /// Standard deviation of the shards' loads over their mean.
    pub min_skew_rsd: f64,
}

impl Default for PlacementManagerConfig {
    fn default() -> Self {
        Self {
            mode: DEFAULT_MODE,
            ewma_half_life_secs: DEFAULT_EWMA_HALF_LIFE_SECS,
            shard_unit_ops_per_sec: DEFAULT_SHARD_UNIT_OPS_PER_SEC,
            shard_unit_bytes_per_sec: DEFAULT_SHARD_UNIT_BYTES_PER_SEC,
            min_shards: DEFAULT_MIN_DATASET_SHARDS,
            max_shards: DEFAULT_MAX_DATASET_SHARDS,
            burst_window_secs: DEFAULT_BURST_WINDOW.as_secs(),
            decay_window_secs: DEFAULT_DECAY_WINDOW.as_secs(),
            min_reshard_interval_secs: DEFAULT_MIN_RESHARD_INTERVAL_SECS,
            stale_after_secs: DEFAULT_STALE_AFTER_SECS,
            load_balancing: LoadBalancingPolicy::Dynamic,
            strategy_switch: StrategySwitchConfig::default(),
        }
    }
}

impl Default for StrategySwitchConfig {
    fn default() -> Self {
        Self {
            min_shards: DEFAULT_SWITCH_MIN_SHARDS,
            min_shards_to_target_ratio: DEFAULT_SWITCH_MIN_SHARDS_TO_TARGET_RATIO,
            max_shards_to_target_ratio: DEFAULT_SWITCH_MAX_SHARDS_TO_TARGET_RATIO,
            overheated_units: DEFAULT_SWITCH_OVERHEATED_UNITS,
            min_skew_rsd: DEFAULT_SWITCH_MIN_SKEW_RSD,
        }
    }
}

impl PlacementManagerConfig {
    /// Checks what serde cannot; every error names its field (`placement.max_shards` when the
    /// caller scopes it under `placement`).
    pub fn validate_into(&self, s: &mut Scope<'_>) {
        s.range_u64("ewma_half_life_secs", self.ewma_half_life_secs, 1, 86_400);
        s.positive("shard_unit_ops_per_sec", self.shard_unit_ops_per_sec)
            .positive("shard_unit_bytes_per_sec", self.shard_unit_bytes_per_sec);
        s.range_u64("min_shards", u64::from(self.min_shards), 1, MAX_SHARDS_LIMIT);
        s.range_u64("max_shards", u64::from(self.max_shards), 1, MAX_SHARDS_LIMIT);
        s.check(
            self.min_shards <= self.max_shards,
            "min_shards",
            self.min_shards,
            &format!("must be <= max_shards ({})", self.max_shards),
        );
        s.range_u64("burst_window_secs", self.burst_window_secs, 0, MAX_WINDOW_SECS);
        s.range_u64("decay_window_secs", self.decay_window_secs, 1, MAX_WINDOW_SECS);
        s.range_u64("min_reshard_interval_secs", self.min_reshard_interval_secs, 0, 86_400);
        s.range_u64("stale_after_secs", self.stale_after_secs, 1, 3_600);
        let w = &self.strategy_switch;
        let mut sw = s.at("strategy_switch");
        sw.range_u64("min_shards", u64::from(w.min_shards), 2, MAX_SHARDS_LIMIT);
        sw.positive("min_shards_to_target_ratio", w.min_shards_to_target_ratio);
        sw.check(
            w.max_shards_to_target_ratio > w.min_shards_to_target_ratio,
            "max_shards_to_target_ratio",
            w.max_shards_to_target_ratio,
            &format!("must be greater than min_shards_to_target_ratio ({})", w.min_shards_to_target_ratio),
        );
        sw.positive("overheated_units", w.overheated_units).non_negative("min_skew_rsd", w.min_skew_rsd);
    }

    /// [`Self::validate_into`] at the root.
    pub fn validate(&self) -> Result<(), ValidationError> {
        let mut v = Validator::new();
        self.validate_into(&mut v.at(""));
        v.finish()
    }

    fn half_life(&self) -> Duration {
        Duration::from_secs(self.ewma_half_life_secs.max(1))
    }

    /// The allocator's limits on a ring of `ring_shards` shards (load in milli-units).
    fn allocator_limits(&self, ring_shards: u32) -> AllocatorLimits {
        let max_shards = self.max_shards.clamp(1, ring_shards.max(1));
        AllocatorLimits {
            unit_size_bytes_per_sec: MILLI_UNITS_PER_UNIT as u64,
            min_shards: self.min_shards.clamp(1, max_shards),
            max_shards,
            burst_window: Duration::from_secs(self.burst_window_secs),
            decay_window: Duration::from_secs(self.decay_window_secs),
        }
    }

    /// Load in shard units: the tighter of the two dimensions.
    fn units(&self, ops_per_sec: f64, bytes_per_sec: f64) -> f64 {
        (ops_per_sec / self.shard_unit_ops_per_sec).max(bytes_per_sec / self.shard_unit_bytes_per_sec).max(0.0)
    }
}

/// One shard's load over the table's window, from its pseudo-partition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DatasetShardUsage {
    pub tenant: TenantId,
    pub dataset: DatasetId,
    pub shard: ShardId,
    /// The worker that reported it last.
    pub worker: Option<WorkerId>,
    /// Served.
    pub ops_per_sec: f64,
    pub rejected_per_sec: f64,
    /// Served.
    pub bytes_per_sec: f64,
}

impl DatasetShardUsage {
    /// Served plus rejected: what the shard was asked for.
    pub fn demand_ops_per_sec(&self) -> f64 {
        self.ops_per_sec + self.rejected_per_sec
    }

    /// Bytes scaled up by the rejected share (a rejected write carries bytes too).
    pub fn demand_bytes_per_sec(&self) -> f64 {
        if self.ops_per_sec > 0.0 {
            self.bytes_per_sec * self.demand_ops_per_sec() / self.ops_per_sec
        } else {
            self.bytes_per_sec
        }
    }
}

/// The shard id of a dataset pseudo-partition id `<tenant>.<dataset>.s<shard id>`, `None` for any
/// other id (a real partition of a table that happens to share the dataset's name).
pub fn parse_dataset_shard_id(id: &PartitionId, tenant: &TenantId, dataset: &str) -> Option<ShardId> {
    let rest = id.as_str().strip_prefix(tenant.as_str())?.strip_prefix('.')?;
    let digits = rest.strip_prefix(dataset)?.strip_prefix(".s")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let shard = digits.parse::<u32>().ok()?;
    (shard > 0).then_some(ShardId(shard))
}

/// The dataset shards in the MetricsTable over the last `window`: rows of the datasets the
/// topology lists whose id has the pseudo-partition form, with some load in the window (a shard
/// that reported nothing in the window is no longer part of the subring). Gone rows count: the
/// table marks every id missing from the topology's partitions as gone, and shards never are in it.
/// One scan of the table; a caller that already holds [`MetricsTable::partitions`] for the same
/// window (the online loop does, for the planner) uses [`dataset_shard_usage_from_rows`].
pub fn dataset_shard_usage(
    table: &MetricsTable,
    datasets: &[DatasetInfo],
    window: Duration,
    now_ms: i64,
) -> Result<Vec<DatasetShardUsage>, TableError> {
    if datasets.is_empty() {
        return Ok(Vec::new());
    }
    Ok(dataset_shard_usage_from_rows(&table.partitions(window, now_ms)?, datasets))
}

/// [`dataset_shard_usage`] over rows already read from the table.
pub fn dataset_shard_usage_from_rows(rows: &[PartitionRow], datasets: &[DatasetInfo]) -> Vec<DatasetShardUsage> {
    let known: HashMap<(&str, &str), &DatasetId> =
        datasets.iter().map(|d| ((d.tenant.as_str(), d.dataset.as_str()), &d.dataset)).collect();
    let mut out = Vec::new();
    for r in rows {
        let Some(&dataset) = known.get(&(r.tenant.as_str(), r.table.as_str())) else { continue };
        let Some(shard) = parse_dataset_shard_id(&r.id, &r.tenant, dataset.as_str()) else { continue };
        if r.ops_per_sec <= 0.0 && r.rejected_per_sec <= 0.0 {
            continue;
        }
        out.push(DatasetShardUsage {
            tenant: r.tenant.clone(),
            dataset: dataset.clone(),
            shard,
            worker: r.last_worker.clone(),
            ops_per_sec: r.ops_per_sec,
            rejected_per_sec: r.rejected_per_sec,
            bytes_per_sec: r.bytes_per_sec,
        });
    }
    out
}

/// Where a reshard puts a dataset's load, per worker: the ops and bytes per second it gains
/// (positive) or sheds (negative) when the dataset's measured demand leaves the owners that
/// report its shards now and spreads over the new subring's owners, which
/// [`dataset_shard_indices`] reads off the topology's shard table the way the storage and the
/// routers place it. Spread evenly over the new shards: a round-robin dataset writes so; a
/// fingerprinted one's key skew is not known ahead, and the evaluation charges a reshard whose
/// load landed otherwise. `None` for another kind of action or a dataset the topology does not
/// list (nothing to predict from).
pub fn reshard_shift(
    spec: &ActionSpec,
    datasets: &[DatasetInfo],
    usage: &[DatasetShardUsage],
) -> Option<Vec<(WorkerId, f64, f64)>> {
    let ActionSpec::Reshard { tenant, dataset, tenant_shards, dataset_shards, .. } = spec else { return None };
    let info = datasets.iter().find(|d| &d.tenant == tenant && &d.dataset == dataset)?;
    let mut shift: Vec<(WorkerId, f64, f64)> = Vec::new();
    let mut add = |w: &WorkerId, ops: f64, bytes: f64| match shift.iter_mut().find(|(x, ..)| x == w) {
        Some((_, o, b)) => {
            *o += ops;
            *b += bytes;
        }
        None => shift.push((w.clone(), ops, bytes)),
    };
    let (mut ops, mut bytes) = (0.0, 0.0);
    for u in usage.iter().filter(|u| &u.tenant == tenant && &u.dataset == dataset) {
        let (o, b) = (u.demand_ops_per_sec(), u.demand_bytes_per_sec());
        ops += o;
        bytes += b;
        if let Some(w) = &u.worker {
            add(w, -o, -b);
        }
    }
    let ring = u32::try_from(info.shard_owners.len()).unwrap_or(u32::MAX);
    let key = DistributionKey::new(tenant.as_str(), dataset.as_str(), &[]);
    let shards = dataset_shard_indices(ring, &key, *tenant_shards, *dataset_shards);
    let n = shards.len() as f64;
    for s in &shards {
        add(&info.shard_owners[*s as usize], ops / n, bytes / n);
    }
    Some(shift)
}

type DatasetKey = (TenantId, DatasetId);

#[derive(Debug, Clone)]
struct ShardTrack {
    ops: EwmaRate,
    bytes: EwmaRate,
    last_seen_ms: i64,
}

#[derive(Debug, Clone)]
struct DatasetTrack {
    ops: EwmaRate,
    bytes: EwmaRate,
    /// Rejected ops/s at the last observation (a trigger number, not smoothed).
    rejected_per_sec: f64,
    last_seen_ms: i64,
    shards: BTreeMap<ShardId, ShardTrack>,
    /// Created at the first plan that sees the dataset, restored from its shard count then.
    allocator: Option<ShardAllocator>,
    last_proposal_ms: Option<i64>,
    /// Shard count and strategy in the topology at the last plan, and when they last changed.
    seen_layout: Option<(u32, LoadBalancing)>,
    last_layout_change_ms: Option<i64>,
}

impl DatasetTrack {
    fn new(half_life: Duration) -> Self {
        Self {
            ops: EwmaRate::with_half_life(half_life),
            bytes: EwmaRate::with_half_life(half_life),
            rejected_per_sec: 0.0,
            last_seen_ms: 0,
            shards: BTreeMap::new(),
            allocator: None,
            last_proposal_ms: None,
            seen_layout: None,
            last_layout_change_ms: None,
        }
    }
}

/// The published rule of one dataset, from the topology.
#[derive(Debug, Clone, PartialEq)]
struct RuleEntry {
    tenant_shards: u32,
    dataset_shards: u32,
    load_balancing: LoadBalancing,
    zones: Vec<ZoneId>,
    last_seen_ms: i64,
}

/// What the strategy switch measured on one dataset.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Skew {
    shards: usize,
    hottest_units: f64,
    mean_units: f64,
    rsd: f64,
    shards_to_target: f64,
}

impl Skew {
    fn measure(shard_units: &[f64], target: u32) -> Self {
        let n = shard_units.len();
        let mean = if n > 0 { shard_units.iter().sum::<f64>() / n as f64 } else { 0.0 };
        let var = if n > 0 { shard_units.iter().map(|u| (u - mean).powi(2)).sum::<f64>() / n as f64 } else { 0.0 };
        Self {
            shards: n,
            hottest_units: shard_units.iter().copied().fold(0.0, f64::max),
            mean_units: mean,
            rsd: if mean > 0.0 { var.sqrt() / mean } else { 0.0 },
            shards_to_target: n as f64 / f64::from(target.max(1)),
        }
    }

    /// The conditions that fail, each with its numbers; empty when round robin is called for.
    fn failing(&self, c: &StrategySwitchConfig) -> Vec<String> {
        let mut why = Vec::new();
        if self.shards < c.min_shards as usize {
            why.push(format!("{} shard(s) reported, under {}", self.shards, c.min_shards));
        }
        if !(c.min_shards_to_target_ratio..=c.max_shards_to_target_ratio).contains(&self.shards_to_target) {
            why.push(format!(
                "shards/target {:.2} outside {}..{} (a rescale is in progress)",
                self.shards_to_target, c.min_shards_to_target_ratio, c.max_shards_to_target_ratio
            ));
        }
        if self.hottest_units < c.overheated_units {
            why.push(format!("hottest shard at {:.2} units, under {}", self.hottest_units, c.overheated_units));
        }
        if self.rsd < c.min_skew_rsd {
            why.push(format!("relative std dev {:.2}, under {}", self.rsd, c.min_skew_rsd));
        }
        why
    }
}

/// The manager's state: load averages, one allocator per dataset, the published rules.
#[derive(Debug, Clone)]
pub struct PlacementManager {
    half_life: Duration,
    datasets: BTreeMap<DatasetKey, DatasetTrack>,
    last_observe_ms: Option<i64>,
    rules: BTreeMap<DatasetKey, RuleEntry>,
    rules_version: u64,
    rules_created_at_ms: i64,
}

impl PlacementManager {
    /// An empty manager; `config` gives the EWMA half-life of new series.
    pub fn new(config: &PlacementManagerConfig) -> Self {
        Self {
            half_life: config.half_life(),
            datasets: BTreeMap::new(),
            last_observe_ms: None,
            rules: BTreeMap::new(),
            rules_version: 0,
            rules_created_at_ms: 0,
        }
    }

    /// Folds one tick's shard usage into the averages. Each shard's rate stands for the time since
    /// the previous observation (at most [`MAX_OBSERVE_GAP_SECS`]); an observation not after the
    /// previous one is ignored. A dataset or shard absent from `usage` counts as idle meanwhile.
    pub fn observe(&mut self, now_ms: i64, usage: &[DatasetShardUsage]) {
        let dt_secs = match self.last_observe_ms {
            Some(last) if now_ms <= last => return,
            Some(last) => ((now_ms - last) as f64 / 1000.0).min(MAX_OBSERVE_GAP_SECS),
            None => 1.0,
        };
        self.last_observe_ms = Some(now_ms);
        let half_life = self.half_life;
        let mut totals: BTreeMap<DatasetKey, (f64, f64, f64)> = BTreeMap::new();
        for u in usage {
            let key = (u.tenant.clone(), u.dataset.clone());
            let track = self.datasets.entry(key.clone()).or_insert_with(|| DatasetTrack::new(half_life));
            let shard = track.shards.entry(u.shard).or_insert_with(|| ShardTrack {
                ops: EwmaRate::with_half_life(half_life),
                bytes: EwmaRate::with_half_life(half_life),
                last_seen_ms: now_ms,
            });
            let (ops, bytes) = (u.demand_ops_per_sec(), u.demand_bytes_per_sec());
            shard.ops.update(ops * dt_secs, now_ms);
            shard.bytes.update(bytes * dt_secs, now_ms);
            shard.last_seen_ms = now_ms;
            let t = totals.entry(key).or_default();
            t.0 += ops;
            t.1 += bytes;
            t.2 += u.rejected_per_sec;
        }
        for (key, (ops, bytes, rejected)) in totals {
            if let Some(track) = self.datasets.get_mut(&key) {
                track.ops.update(ops * dt_secs, now_ms);
                track.bytes.update(bytes * dt_secs, now_ms);
                track.rejected_per_sec = rejected;
                track.last_seen_ms = now_ms;
            }
        }
    }

    /// Plans reshards for the topology's `datasets` (see the module doc); also refreshes the rules
    /// from them and forgets what has not been seen for the retention period.
    pub fn plan(&mut self, datasets: &[DatasetInfo], config: &PlacementManagerConfig, now_ms: i64) -> Vec<Proposal> {
        self.half_life = config.half_life();
        self.refresh_rules(datasets, now_ms);
        let retention_ms = duration_ms(DEFAULT_PLACEMENT_RETENTION_PERIOD);
        self.datasets.retain(|_, t| now_ms - t.last_seen_ms <= retention_ms);
        for t in self.datasets.values_mut() {
            t.shards.retain(|_, s| now_ms - s.last_seen_ms <= retention_ms);
        }
        let mut proposals = Vec::new();
        for d in datasets {
            let key = (d.tenant.clone(), d.dataset.clone());
            let Some(track) = self.datasets.get_mut(&key) else { continue };
            if let Some(p) = decide(d, track, config, now_ms) {
                tracing::info!(
                    tenant = %d.tenant, dataset = %d.dataset, reason = %p.reason, mode = ?p.mode,
                    "dataset placement proposed"
                );
                proposals.push(p);
            }
        }
        proposals
    }

    /// The placement rules for routers as of the last [`Self::plan`]: the applied layout of every
    /// dataset seen in the topology within the retention period before `now_ms` (forgetting older
    /// ones bumps the version). The version increases whenever a rule changes.
    pub fn rules(&mut self, now_ms: i64) -> PlacementRules {
        let retention_ms = duration_ms(DEFAULT_PLACEMENT_RETENTION_PERIOD);
        let before = self.rules.len();
        self.rules.retain(|_, r| now_ms - r.last_seen_ms <= retention_ms);
        if self.rules.len() != before {
            self.bump_rules(now_ms);
        }
        let mut core = CoreRules { created_at_ms: self.rules_created_at_ms, ..CoreRules::default() };
        let mut tenant_index: BTreeMap<&TenantId, u32> = BTreeMap::new();
        for ((tenant, dataset), r) in &self.rules {
            let next = core.tenants.len() as u32;
            let t = *tenant_index.entry(tenant).or_insert_with(|| {
                core.tenants.push(TenantPlacement { tenant_id: tenant.to_string() });
                next
            });
            core.datasets.push(DatasetPlacement {
                tenant: t,
                name: dataset.to_string(),
                tenant_shard_limit: r.tenant_shards,
                dataset_shard_limit: r.dataset_shards,
                load_balancing: match r.load_balancing {
                    LoadBalancing::Fingerprint => LoadBalancingMode::Fingerprint,
                    LoadBalancing::RoundRobin => LoadBalancingMode::RoundRobin,
                },
                zones: r.zones.clone(),
            });
        }
        core.to_wire(self.rules_version).expect("tenant and dataset names come from valid ids")
    }

    fn refresh_rules(&mut self, datasets: &[DatasetInfo], now_ms: i64) {
        let mut changed = false;
        for d in datasets {
            let key = (d.tenant.clone(), d.dataset.clone());
            let entry = RuleEntry {
                tenant_shards: d.tenant_shards,
                dataset_shards: d.dataset_shards,
                load_balancing: d.load_balancing,
                zones: d.zones.clone(),
                last_seen_ms: now_ms,
            };
            match self.rules.get_mut(&key) {
                Some(r) => {
                    changed |= (r.tenant_shards, r.dataset_shards, r.load_balancing, &r.zones)
                        != (entry.tenant_shards, entry.dataset_shards, entry.load_balancing, &entry.zones);
                    *r = entry;
                }
                None => {
                    self.rules.insert(key, entry);
                    changed = true;
                }
            }
        }
        if changed {
            self.bump_rules(now_ms);
        }
    }

    fn bump_rules(&mut self, now_ms: i64) {
        self.rules_version += 1;
        self.rules_created_at_ms = now_ms;
    }
}

fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// What one pass measured and decided for one dataset.
#[derive(Debug, Clone)]
struct Decision {
    ring_shards: u32,
    demand_ops: f64,
    demand_bytes: f64,
    /// The dataset's load in shard units.
    units: f64,
    /// `floor(units) + 1`: the shards today's load needs, before burst amplification, decay and
    /// the `max_shards` / ring cap.
    need_now: u32,
    /// The allocator's output and its burst multiplier.
    target: u32,
    multiplier: f64,
    skew: Skew,
    /// Skew conditions that do not hold (empty: round robin is called for).
    failing: Vec<String>,
    /// Demand (ops/s) of the hottest recently reported shard.
    hottest_shard_ops: Option<f64>,
    wanted_lb: LoadBalancing,
}

impl Decision {
    fn is_due(&self, d: &DatasetInfo) -> bool {
        self.target != d.dataset_shards || self.wanted_lb != d.load_balancing
    }
}

/// One dataset's pass: feeds the allocator (whatever the mode, so its windows hold the history
/// when the mode turns on) and returns a proposal when a change is due, allowed by the mode and
/// outside the minimum interval.
fn decide(d: &DatasetInfo, track: &mut DatasetTrack, config: &PlacementManagerConfig, now_ms: i64) -> Option<Proposal> {
    let layout = (d.dataset_shards, d.load_balancing);
    if track.seen_layout.is_some_and(|seen| seen != layout) {
        track.last_layout_change_ms = Some(now_ms);
    }
    track.seen_layout = Some(layout);
    if now_ms - track.last_seen_ms > (config.stale_after_secs * 1000) as i64 {
        return None;
    }
    let decision = measure(d, track, config, now_ms)?;
    if !decision.is_due(d) || config.mode == PolicyMode::Off {
        return None;
    }
    let interval_ms = (config.min_reshard_interval_secs * 1000) as i64;
    let last_ms = track.last_proposal_ms.into_iter().chain(track.last_layout_change_ms).max();
    if let Some(last) = last_ms.filter(|last| now_ms - last < interval_ms) {
        tracing::debug!(
            tenant = %d.tenant, dataset = %d.dataset, target = decision.target, since_last_ms = now_ms - last,
            "dataset reshard waits for the minimum interval"
        );
        return None;
    }
    track.last_proposal_ms = Some(now_ms);
    Some(explain(d, &decision, track.rejected_per_sec, config))
}

/// The dataset's numbers at `now_ms` and the allocator's and the strategy's answers; `None` on
/// an empty ring.
fn measure(
    d: &DatasetInfo,
    track: &mut DatasetTrack,
    config: &PlacementManagerConfig,
    now_ms: i64,
) -> Option<Decision> {
    let ring_shards = u32::try_from(d.shard_owners.len()).unwrap_or(u32::MAX);
    if ring_shards == 0 {
        return None;
    }
    let limits = config.allocator_limits(ring_shards);
    let invariant = "allocator_limits: the unit is 1000 and min_shards <= max_shards";
    let allocator = match &mut track.allocator {
        Some(a) => a,
        None => track.allocator.insert(
            ShardAllocator::restored(limits, now_ms, d.dataset_shards.min(limits.max_shards)).expect(invariant),
        ),
    };
    allocator.set_limits(limits).expect(invariant);
    let demand_ops = track.ops.value(now_ms);
    let demand_bytes = track.bytes.value(now_ms);
    let units = config.units(demand_ops, demand_bytes);
    let milli_units = (units * MILLI_UNITS_PER_UNIT).round() as u64;
    let need_now = u32::try_from(milli_units / MILLI_UNITS_PER_UNIT as u64 + 1).unwrap_or(u32::MAX);
    let target = allocator.observe(milli_units, now_ms);
    let multiplier = allocator.multiplier();

    let shards: Vec<(f64, f64)> = track
        .shards
        .values()
        .filter(|s| now_ms - s.last_seen_ms <= SHARD_SEEN_WITHIN_MS)
        .map(|s| {
            let ops = s.ops.value(now_ms);
            (ops, config.units(ops, s.bytes.value(now_ms)))
        })
        .collect();
    let shard_units: Vec<f64> = shards.iter().map(|s| s.1).collect();
    let skew = Skew::measure(&shard_units, target);
    let mut failing = skew.failing(&config.strategy_switch);
    // New shards' averages start at zero: right after a reshard the spread says more about
    // their warm-up than about the keys.
    let warm_up_ms = (SWITCH_WARM_UP_HALF_LIVES * config.half_life().as_secs_f64() * 1000.0) as i64;
    if let Some(changed) = track.last_layout_change_ms.filter(|t| now_ms - t < warm_up_ms) {
        failing.push(format!("shard averages still warming up after the reshard {} s ago", (now_ms - changed) / 1000));
    }
    let wanted_lb = match config.load_balancing {
        LoadBalancingPolicy::Fingerprint => LoadBalancing::Fingerprint,
        LoadBalancingPolicy::RoundRobin => LoadBalancing::RoundRobin,
        // Sticky: once round robin, a dataset stays there (its keys are already scattered).
        LoadBalancingPolicy::Dynamic if d.load_balancing == LoadBalancing::RoundRobin => LoadBalancing::RoundRobin,
        LoadBalancingPolicy::Dynamic if failing.is_empty() => LoadBalancing::RoundRobin,
        LoadBalancingPolicy::Dynamic => LoadBalancing::Fingerprint,
    };
    Some(Decision {
        ring_shards,
        demand_ops,
        demand_bytes,
        units,
        need_now,
        target,
        multiplier,
        skew,
        failing,
        hottest_shard_ops: shards.iter().max_by(|a, b| a.1.total_cmp(&b.1)).map(|s| s.0),
        wanted_lb,
    })
}

fn lb_name(lb: LoadBalancing) -> &'static str {
    match lb {
        LoadBalancing::Fingerprint => "fingerprint",
        LoadBalancing::RoundRobin => "round robin",
    }
}

/// The proposal for a due decision: the action, why, the numbers, before/after and why not the
/// alternatives (see the module doc for what the trigger and prediction fields mean here).
fn explain(d: &DatasetInfo, x: &Decision, rejected_per_sec: f64, config: &PlacementManagerConfig) -> Proposal {
    let (current, target, units) = (d.dataset_shards, x.target, x.units);
    let mean_before = units / f64::from(current.max(1));
    let hottest_before = x.skew.hottest_units.max(mean_before);
    let skew_factor = if x.skew.mean_units > 0.0 { x.skew.hottest_units / x.skew.mean_units } else { 1.0 };
    let mean_after = units / f64::from(target.max(1));
    // Round robin spreads evenly; fingerprint keeps the key set's skew over the new subring.
    let hottest_after =
        if x.wanted_lb == LoadBalancing::RoundRobin { mean_after } else { mean_after * skew_factor.max(1.0) };
    let mut parts = Vec::new();
    let mut alternatives = Vec::new();
    let amplified = target > x.need_now;
    if target > current {
        let burst = if amplified {
            format!(" (burst ×{}: it grew again within the burst window)", x.multiplier)
        } else {
            String::new()
        };
        parts.push(format!("reshard up {current} → {target}: the allocator wants {target}{burst}"));
        alternatives.push(Alternative {
            candidate: format!("keep {current} shards"),
            why: format!(
                "{units:.2} units need {} shards; the hottest shard is at {hottest_before:.2} units and the dataset's owners reject {rejected_per_sec:.0} ops/s",
                x.need_now
            ),
        });
        if amplified {
            alternatives.push(Alternative {
                candidate: format!("reshard to {} (today's need only)", x.need_now),
                why: format!(
                    "scale-outs keep coming within {} s of each other; amplifying them avoids a reshard per unit of growth",
                    config.burst_window_secs
                ),
            });
        }
        if x.need_now > target {
            alternatives.push(Alternative {
                candidate: format!("more than {target} shards"),
                why: format!("capped by max_shards ({}) and the ring's {} shards", config.max_shards, x.ring_shards),
            });
        }
    } else if target < current {
        parts.push(format!(
            "reshard down {current} → {target}: no higher need in the current and previous {} s decay window",
            config.decay_window_secs
        ));
        alternatives.push(Alternative {
            candidate: format!("keep {current} shards"),
            why: format!(
                "{units:.2} units have needed at most {target} shards for a full decay window; fewer shards keep keys together"
            ),
        });
        if amplified {
            alternatives.push(Alternative {
                candidate: format!("reshard to {} (today's need only)", x.need_now),
                why: "scale in slowly: the allocator keeps the highest need of the last two decay windows".to_owned(),
            });
        }
    } else {
        alternatives.push(Alternative {
            candidate: format!("reshard beyond {current} shards"),
            why: format!(
                "{current} shards already match the allocator's target for {units:.2} units; the excess sits on a few shards of a skewed key set"
            ),
        });
    }
    if x.wanted_lb != d.load_balancing {
        let why = if config.load_balancing == LoadBalancingPolicy::Dynamic {
            format!(
                "hottest shard at {:.2} units, relative std dev {:.2}, {} shards for a target of {target}",
                x.skew.hottest_units, x.skew.rsd, x.skew.shards
            )
        } else {
            format!("load_balancing is {:?} in the config", config.load_balancing)
        };
        parts.push(format!("switch {} → {}: {why}", lb_name(d.load_balancing), lb_name(x.wanted_lb)));
        alternatives.push(Alternative {
            candidate: format!("stay on {}", lb_name(d.load_balancing)),
            why: if x.wanted_lb == LoadBalancing::RoundRobin {
                "a skewed key set keeps loading its hottest shards whatever their number; round robin spreads it evenly"
                    .to_owned()
            } else {
                "the config asks for fingerprint placement (key locality) for every dataset".to_owned()
            },
        });
    } else if d.load_balancing == LoadBalancing::Fingerprint && config.load_balancing == LoadBalancingPolicy::Dynamic {
        alternatives.push(Alternative {
            candidate: "switch to round robin".to_owned(),
            why: format!("skew conditions not met: {}", x.failing.join("; ")),
        });
    }
    let direction = match target.cmp(&current) {
        std::cmp::Ordering::Greater => "up",
        std::cmp::Ordering::Less => "down",
        std::cmp::Ordering::Equal => "switch",
    };
    metrics::counter!("lb_master_placement_proposals_total", "direction" => direction).increment(1);
    let tenant_shards = d.tenant_shards.max(target).min(x.ring_shards);
    Proposal {
        spec: ActionSpec::Reshard {
            tenant: d.tenant.clone(),
            dataset: d.dataset.clone(),
            tenant_shards,
            dataset_shards: target.min(tenant_shards),
            load_balancing: x.wanted_lb,
        },
        policy: Policy::DatasetPlacement,
        mode: config.mode,
        origin: lb_common::protocol::Origin::Online,
        reason: format!(
            "dataset {}/{}: demand {:.0} ops/s, {:.1} MB/s = {units:.2} shard units ({} ops/s, {:.0} MB/s each) on {current} shards; {}",
            d.tenant,
            d.dataset,
            x.demand_ops,
            x.demand_bytes / 1e6,
            config.shard_unit_ops_per_sec,
            config.shard_unit_bytes_per_sec / 1e6,
            parts.join("; ")
        ),
        trigger: Trigger {
            hot_windows: 1,
            partition_demand_ops_per_sec: x.hottest_shard_ops,
            partition_limit_ops_per_sec: Some(config.shard_unit_ops_per_sec),
            partition_rejected_per_sec: Some(rejected_per_sec),
            max_over_mean: Some(skew_factor),
            cv: Some(x.skew.rsd),
            ..Trigger::default()
        },
        predicted: Prediction {
            target_before_ratio: hottest_before,
            target_after_ratio: hottest_after,
            source_before_ratio: mean_before,
            source_after_ratio: mean_after,
            dest_before_ratio: None,
            dest_after_ratio: None,
            cluster_max_before_ratio: hottest_before,
            cluster_max_after_ratio: hottest_after,
            cluster_mean_ratio: mean_before,
            cost_ratio: 0.0,
            dest_worker: None,
        },
        rejected_alternatives: alternatives,
    }
}
