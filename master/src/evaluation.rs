//! ActionEvaluation: did an action help?
//!
//! **Problem.** A balancer that never checks its own work repeats its mistakes: a move that only
//! carried the hotspot to another worker, a split whose load sat on one side. For every finished
//! action lb compares a window *before* it (the planner's input when it was submitted) with a
//! window *after* it, taken once the action has settled (caches warm, routers caught up). It
//! looks at the metric that triggered the action, the source and destination workers, and the
//! cluster's max, mean and CV, and gives a score and a verdict:
//!
//! - **effective**: the triggering metric improved by at least `effective_gain_ratio`
//!   (relative) and nothing got worse beyond the harm margin;
//! - **harmful**: the action made things worse — a move (or a cross-worker merge, or a group)
//!   whose destination ends up hotter than its source was before (the hotspot moved, it was not relieved), or the cluster's hottest
//!   worker got hotter by `harmful_margin_ratio` while the target did not improve;
//! - a **dedication** (a group that gives a partition its own worker) cannot cool its partition,
//!   only the partition's former neighbours: it is judged on them, the source worker's ratio
//!   before against the hottest shared worker after (where they went), and is harmful when that
//!   worker ends hotter than the source was;
//! - **inconclusive**: the load the action was meant to relieve left — the subject's demand
//!   (served plus rejected, over every partition now covering it: a moved partition at its
//!   destination, a split's pieces) fell under `vanished_demand_ratio` of its value before, or
//!   the whole cluster's did. Clients that stopped, or stopped following the moved data, make
//!   every ratio fall; that is a drop in demand, not relief, and it is checked before anything
//!   else (a hotter destination with the load gone is still not this action's doing);
//!   The mirror case is inconclusive too: a move or group that would be harmful only because
//!   its destination is hot, while the subject's own demand grew past `1 / vanished_demand_ratio`
//!   of before (a ramping hot range a balancing move carried) — that growth is not where the
//!   action put load, and a harmful verdict would rest the subject's later split pieces through
//!   the overload that follows;
//! - **no effect**: none of these.
//!
//! Where the storage, not lb, places a partition (a group isolation), a placement other than the
//! one the planner predicted is named in the why and charged as harmful where it overloaded
//! ([`charge_placement`]).
//!
//! **What is watched.** A [`Subject`] is fixed at submission: the target partitions, and — so a
//! split's pieces are found without lineage — the key range they covered in their table; the
//! source worker and the destination (a move's `to_worker`; a cross-worker merge's landing
//! owner, its source the streamed side's owner; a group's owner afterwards).
//!
//! **Feedback.** A harmful verdict lengthens the cooldown of the target (every partition now
//! covering its range) and adds a strike to the policy that proposed it, which lengthens that
//! policy's cooldowns until the strike decays ([`crate::planner::PlannerState::penalize`]). A
//! harmful move is reverted (moved back) when `revert_harmful_moves` is on.
//!
//! Pure: no clock, no I/O — the live loop and the virtual-time tests call the same functions.

use lb_common::ids::{KeyRange, PartitionId, WorkerId};
pub use lb_common::protocol::records::{Evaluation, Judgement, Snapshot, Subject, Verdict};
use lb_common::protocol::{ActionKind, ActionSpec, Health};
use lb_common::validate::{ValidationError, Validator};
use serde::{Deserialize, Serialize};

use crate::planner::{PartitionView, PlannerInput, Policy, WorkerView};

/// 10 s: a move's caches warm and routers pick up the new owner within a few seconds; ten is
/// past the transient without waiting so long that the workload has changed under us.
pub const DEFAULT_SETTLE_SECS: u64 = 10;
/// 10 s after: the same length as the analyzer's view before (5–10 s), long enough to smooth
/// one-second noise.
pub const DEFAULT_WINDOW_SECS: u64 = 10;
/// 10 % better on the triggering metric counts as effective; less is within a window's noise.
pub const DEFAULT_EFFECTIVE_GAIN_RATIO: f64 = 0.10;
/// 5 points of capacity hotter on the cluster's hottest worker, with no gain on the target, is harm.
pub const DEFAULT_HARMFUL_MARGIN_RATIO: f64 = 0.05;
/// Harmful moves are reported and penalised, not undone, unless an SRE opts in: undoing is
/// itself a move, and a revert loop is worse than one bad move.
pub const DEFAULT_REVERT_HARMFUL_MOVES: bool = false;
/// Demand after under half of demand before means the load left: a split or a move keeps its
/// subject's demand (served plus rejected), and a one-window wobble or clients backing off
/// after their rejections stop stays well above half.
pub const DEFAULT_VANISHED_DEMAND_RATIO: f64 = 0.5;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EvaluationConfig {
    pub settle_secs: u64,
    pub window_secs: u64,
    pub effective_gain_ratio: f64,
    pub harmful_margin_ratio: f64,
    pub revert_harmful_moves: bool,
    /// The subject's (or the cluster's) demand after under this share of before: inconclusive.
    pub vanished_demand_ratio: f64,
}

impl Default for EvaluationConfig {
    fn default() -> Self {
        Self {
            settle_secs: DEFAULT_SETTLE_SECS,
            window_secs: DEFAULT_WINDOW_SECS,
            effective_gain_ratio: DEFAULT_EFFECTIVE_GAIN_RATIO,
            harmful_margin_ratio: DEFAULT_HARMFUL_MARGIN_RATIO,
            revert_harmful_moves: DEFAULT_REVERT_HARMFUL_MOVES,
            vanished_demand_ratio: DEFAULT_VANISHED_DEMAND_RATIO,
        }
    }
}

impl EvaluationConfig {
    /// Checks what serde cannot; errors name the field under `evaluation.`.
    pub fn validate(&self) -> Result<(), ValidationError> {
        let mut v = Validator::new();
        let mut s = v.at("evaluation");
        s.range_u64("settle_secs", self.settle_secs, 0, 3_600);
        s.range_u64("window_secs", self.window_secs, 1, 3_600);
        s.check(
            self.effective_gain_ratio > 0.0 && self.effective_gain_ratio < 1.0,
            "effective_gain_ratio",
            self.effective_gain_ratio,
            "must be within (0, 1)",
        );
        s.check(
            self.harmful_margin_ratio > 0.0 && self.harmful_margin_ratio < 1.0,
            "harmful_margin_ratio",
            self.harmful_margin_ratio,
            "must be within (0, 1)",
        );
        s.check(
            self.vanished_demand_ratio > 0.0 && self.vanished_demand_ratio < 1.0,
            "vanished_demand_ratio",
            self.vanished_demand_ratio,
            "must be within (0, 1)",
        );
        drop(s);
        v.finish()
    }

    /// When an action that finished at `finished_ms` can be evaluated.
    pub fn due_at_ms(&self, finished_ms: i64) -> i64 {
        finished_ms + ((self.settle_secs + self.window_secs) * 1000) as i64
    }
}

/// The subject of `spec` in the layout it was planned on.
pub fn subject_of(spec: &ActionSpec, input: &PlannerInput) -> Subject {
    subject_in(spec, input, None)
}

/// [`subject_of`], finding the spec's partitions through `index` when it is `input`'s.
pub fn subject_in(spec: &ActionSpec, input: &PlannerInput, index: Option<&LayoutIndex>) -> Subject {
    let ids: Vec<PartitionId> = crate::planner::partitions_of(spec).into_iter().cloned().collect();
    let positions = match index.filter(|x| x.fits(input)) {
        Some(index) => index.positions_of(&ids, input),
        None => (0..input.partitions.len()).filter(|&i| ids.contains(&input.partitions[i].id)).collect(),
    };
    let views: Vec<_> = positions.iter().map(|&i| &input.partitions[i]).collect();
    let range = views.first().map(|first| {
        let start = views.iter().map(|p| p.range.start).min().unwrap_or(first.range.start);
        let end = views.iter().map(|p| p.range.end).max().unwrap_or(first.range.end);
        (first.tenant.clone(), first.table.clone(), KeyRange { start, end })
    });
    let mut source = views.first().map(|p| p.owner.clone());
    let dest = match spec {
        ActionSpec::Move { to_worker, .. } => Some(to_worker.clone()),
        // A merge across two workers: the side not on where it lands streams there, like a move.
        ActionSpec::Merge { left, to_worker, .. } => {
            let landing = to_worker.clone().or_else(|| views.iter().find(|p| &p.id == left).map(|p| p.owner.clone()));
            let streamed = views.iter().find(|p| Some(&p.owner) != landing.as_ref());
            streamed.and_then(|p| {
                source = Some(p.owner.clone());
                landing
            })
        }
        _ => None,
    };
    let dedication = crate::planner::is_dedication(spec, input);
    Subject { partitions: ids, range, source, dest, dedication }
}

/// Where one layout's partitions sit ([`PlannerInput::layout`]), for the evaluation's lookups:
/// a spec's partitions by id, a subject's key range by start key. Built once per layout (the
/// executor keeps it), so tracking, watching and judging an action reads the few partitions it
/// is about instead of scanning them all: at a million partitions a scan is ~10 ms, and one pass
/// tracks and judges up to dozens of actions. Answers are those of the scan, in input order.
#[derive(Clone, Default)]
pub struct LayoutIndex {
    layout: Option<u64>,
    len: usize,
    by_id: crate::planner::IdIndex,
    /// Every partition by (its table's hash, start key, position).
    by_start: Vec<StartEntry>,
    /// Per entry of `by_start`: the largest end key among the entries of its table hash up to
    /// it, so a walk back from a range's end stops where nothing earlier can reach the range.
    reach: Vec<u64>,
}

/// A summary: the entries are a million lines at the largest scale.
impl std::fmt::Debug for LayoutIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LayoutIndex")
            .field("layout", &self.layout)
            .field("partitions", &self.len)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone, Copy)]
struct StartEntry {
    table: u64,
    start: u64,
    end: u64,
    pos: u32,
}

fn table_hash(tenant: &str, table: &str) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(tenant.as_bytes());
    h.update(&[0]);
    h.update(table.as_bytes());
    h.digest()
}

impl LayoutIndex {
    /// The index of `input`'s layout; one that fits no input when the input has no layout id.
    pub fn of(input: &PlannerInput) -> Self {
        let Some(layout) = input.layout else { return Self::default() };
        let by_id = crate::planner::IdIndex::of(&input.partitions);
        let mut by_start: Vec<StartEntry> = input
            .partitions
            .iter()
            .enumerate()
            .map(|(i, p)| StartEntry {
                table: table_hash(p.tenant.as_str(), p.table.as_str()),
                start: p.range.start.0,
                end: p.range.end.0,
                pos: i as u32,
            })
            .collect();
        by_start.sort_unstable_by_key(|e| (e.table, e.start, e.pos));
        let mut reach = Vec::with_capacity(by_start.len());
        for (k, e) in by_start.iter().enumerate() {
            let before = (k > 0 && by_start[k - 1].table == e.table).then(|| reach[k - 1]);
            reach.push(before.map_or(e.end, |r: u64| r.max(e.end)));
        }
        Self { layout: Some(layout), len: input.partitions.len(), by_id, by_start, reach }
    }

    /// This index made `input`'s (rebuilt only when the layout changed); `None` when `input` has
    /// no layout id.
    pub fn refresh(&mut self, input: &PlannerInput) -> Option<&Self> {
        input.layout?;
        if !self.fits(input) {
            *self = Self::of(input);
        }
        Some(self)
    }

    /// Whether this is `input`'s layout.
    pub fn fits(&self, input: &PlannerInput) -> bool {
        self.layout.is_some() && self.layout == input.layout && self.len == input.partitions.len()
    }

    /// Positions of the partitions named `ids`, ascending.
    fn positions_of(&self, ids: &[PartitionId], input: &PlannerInput) -> Vec<usize> {
        let mut out = Vec::new();
        for id in ids {
            out.extend(self.by_id.positions(id, &input.partitions));
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The partitions whose placement shows whether `spec` ran ([`crate::executor::shows`]), in
    /// input order: those it names, and for a multi-way split those of their table starting at
    /// its keys. `None` where that takes all of them (a table's or tenant's group, a reshard)
    /// or this is not `input`'s index.
    pub fn near<'a>(&self, spec: &ActionSpec, input: &'a PlannerInput) -> Option<Vec<&'a PartitionView>> {
        use lb_common::protocol::GroupTarget;
        let keys: &[lb_common::ids::Key] = match spec {
            ActionSpec::SplitInto { split_keys, .. } => split_keys,
            ActionSpec::Move { .. }
            | ActionSpec::Split { .. }
            | ActionSpec::Merge { .. }
            | ActionSpec::Group { target: GroupTarget::Partition { .. }, .. } => &[],
            _ => return None,
        };
        if !self.fits(input) {
            return None;
        }
        let ids: Vec<PartitionId> = crate::planner::partitions_of(spec).into_iter().cloned().collect();
        let mut at = self.positions_of(&ids, input);
        let tables: Vec<u64> = at
            .iter()
            .map(|&i| table_hash(input.partitions[i].tenant.as_str(), input.partitions[i].table.as_str()))
            .collect();
        for t in tables {
            for k in keys {
                let from = self.by_start.partition_point(|e| (e.table, e.start) < (t, k.0));
                let starting = self.by_start[from..].iter().take_while(|e| e.table == t && e.start == k.0);
                at.extend(starting.map(|e| e.pos as usize));
            }
        }
        at.sort_unstable();
        at.dedup();
        Some(at.into_iter().map(|i| &input.partitions[i]).collect())
    }

    /// Positions of the partitions that [`covers`] `subject`, ascending.
    fn covering(&self, subject: &Subject, input: &PlannerInput) -> Vec<usize> {
        let Some((tenant, table, range)) = &subject.range else {
            return self.positions_of(&subject.partitions, input);
        };
        let t = table_hash(tenant.as_str(), table.as_str());
        let mut k = self.by_start.partition_point(|e| (e.table, e.start) <= (t, range.end.0));
        let mut out = Vec::new();
        while k > 0 && self.by_start[k - 1].table == t && self.reach[k - 1] >= range.start.0 {
            k -= 1;
            let i = self.by_start[k].pos as usize;
            if self.by_start[k].end >= range.start.0 && covers(subject, &input.partitions[i]) {
                out.push(i);
            }
        }
        out.sort_unstable();
        out
    }
}

/// What the partitions covering a subject carry.
struct SubjectLoad<'a> {
    /// The hottest one's demand over its limit.
    target: f64,
    demand: f64,
    rejected: f64,
    /// The owner of the last of them (in input order) that is one of the subject's own.
    owner_now: Option<&'a WorkerId>,
}

fn subject_load<'a>(subject: &Subject, input: &'a PlannerInput, index: Option<&LayoutIndex>) -> SubjectLoad<'a> {
    let mut load = SubjectLoad { target: 0.0, demand: 0.0, rejected: 0.0, owner_now: None };
    for i in covering(subject, input, index) {
        let p = &input.partitions[i];
        let d = p.stats.ops_per_sec + p.stats.rejected_per_sec;
        let limit = p.limit.map_or(f64::INFINITY, |l| l.ops_per_sec);
        load.target = load.target.max(if limit > 0.0 { d / limit } else { 0.0 });
        load.demand += d;
        load.rejected += p.stats.rejected_per_sec;
        if subject.partitions.contains(&p.id) {
            load.owner_now = Some(&p.owner);
        }
    }
    load
}

/// Positions of `input`'s partitions that [`covers`] `subject`, ascending: through `index` when
/// it is `input`'s, else by a scan.
fn covering(subject: &Subject, input: &PlannerInput, index: Option<&LayoutIndex>) -> Vec<usize> {
    match index.filter(|x| x.fits(input)) {
        Some(index) => index.covering(subject, input),
        None => (0..input.partitions.len()).filter(|&i| covers(subject, &input.partitions[i])).collect(),
    }
}

/// Whether `p` now covers what `subject` covered (a split's pieces included).
pub fn covers(subject: &Subject, p: &PartitionView) -> bool {
    match &subject.range {
        Some((tenant, table, range)) => {
            // The key range first: two integer compares rule out nearly every partition before
            // two string compares would (a scan per snapshot, a million partitions in the sim).
            p.range.start <= range.end && p.range.end >= range.start && &p.table == table && &p.tenant == tenant
        }
        None => subject.partitions.contains(&p.id),
    }
}

/// The share of its demand a relieved target may still see rejected: 1 %, the bar the
/// simulator's time to relief and the end-to-end tests hold relief to.
pub const RELIEVED_REJECTED_RATIO: f64 = 0.01;

/// Whether each subject is relieved in `input`: under [`RELIEVED_REJECTED_RATIO`] of its
/// demand rejected, its hottest partition (a split's hottest piece) within its limit, and the
/// worker it took load off within its capacity. It runs every pass while finished actions
/// wait for relief: each subject's partitions are found through `index` when it is `input`'s.
pub fn relieved(subjects: &[&Subject], input: &PlannerInput, index: Option<&LayoutIndex>) -> Vec<bool> {
    let ratios = subjects.iter().any(|s| s.source.is_some()).then(|| Census::of(input).ratios);
    subjects
        .iter()
        .map(|s| {
            let SubjectLoad { target, demand, rejected, .. } = subject_load(s, input, index);
            let source = s.source.as_ref().and_then(|id| {
                let w = input.workers.iter().position(|w| &w.id == id)?;
                ratios.as_ref().map(|r| r[w])
            });
            rejected <= RELIEVED_REJECTED_RATIO * demand && target <= 1.0 && source.is_none_or(|r| r <= 1.0)
        })
        .collect()
}

/// A worker's demand ratio in the tightest dimension (ops incl. rejected, bytes, CPU).
fn worker_ratio(w: &WorkerView, rejected_per_sec: f64) -> f64 {
    let ops = if w.capacity.ops_per_sec > 0.0 {
        (w.load.ops_per_sec + rejected_per_sec) / w.capacity.ops_per_sec
    } else {
        0.0
    };
    let bytes = if w.capacity.bytes_per_sec > 0.0 { w.load.bytes_per_sec / w.capacity.bytes_per_sec } else { 0.0 };
    let cpu = if w.cpu_cores > 0.0 { w.load.cpu_ratio } else { 0.0 };
    ops.max(bytes).max(cpu)
}

/// What every snapshot of one input shares: each worker's demand ratio, the pool's spread and
/// the cluster's demand. One scan of the partitions; a pass takes it once for all the actions
/// it tracks or judges on that input.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Census {
    ratios: Vec<f64>,
    max: f64,
    mean: f64,
    cv: f64,
    demand: f64,
}

impl Census {
    pub fn of(input: &PlannerInput) -> Self {
        let index: std::collections::HashMap<&WorkerId, usize> =
            input.workers.iter().enumerate().map(|(i, w)| (&w.id, i)).collect();
        let mut worker_rejected = vec![0.0; input.workers.len()];
        let mut demand = 0.0;
        for p in &input.partitions {
            demand += p.stats.ops_per_sec + p.stats.rejected_per_sec;
            // Only partitions that reject add to their worker's demand: at a million partitions,
            // hashing every owner's id was most of a simulated hour.
            if p.stats.rejected_per_sec != 0.0
                && let Some(&w) = index.get(&p.owner)
            {
                worker_rejected[w] += p.stats.rejected_per_sec;
            }
        }
        let ratios: Vec<f64> = input.workers.iter().zip(worker_rejected).map(|(w, r)| worker_ratio(w, r)).collect();
        let (mut n, mut sum, mut sq, mut max) = (0.0, 0.0, 0.0, 0.0f64);
        for (w, &r) in input.workers.iter().zip(&ratios) {
            if w.health != Health::Down && w.group.is_none() {
                n += 1.0;
                sum += r;
                sq += r * r;
                max = max.max(r);
            }
        }
        let mean = if n > 0.0 { sum / n } else { 0.0 };
        let cv = if mean > 0.0 { ((sq / n - mean * mean).max(0.0)).sqrt() / mean } else { 0.0 };
        Self { ratios, max, mean, cv, demand }
    }
}

/// The subject's numbers in `input`. `dest` falls back to the target's owner when the spec did
/// not name one (a group lands wherever the storage puts it).
pub fn snapshot(subject: &Subject, input: &PlannerInput) -> Snapshot {
    snapshot_with(subject, input, &Census::of(input), None)
}

/// [`snapshot`] on `census` (taken of `input`), finding the subject's partitions through
/// `index` when it is `input`'s.
pub fn snapshot_with(
    subject: &Subject,
    input: &PlannerInput,
    census: &Census,
    index: Option<&LayoutIndex>,
) -> Snapshot {
    let SubjectLoad { target: target_ratio, demand, rejected, owner_now } = subject_load(subject, input, index);
    let ratio_of = |id: &WorkerId| input.workers.iter().rposition(|w| &w.id == id).map(|i| census.ratios[i]);
    let dest = subject.dest.clone().or(owner_now.cloned()).filter(|d| Some(d) != subject.source.as_ref());
    Snapshot {
        target_ratio,
        target_rejected_ratio: if demand > 0.0 { rejected / demand } else { 0.0 },
        source_ratio: subject.source.as_ref().and_then(ratio_of),
        dest_ratio: dest.as_ref().and_then(ratio_of),
        cluster_max_ratio: census.max,
        cluster_mean_ratio: census.mean,
        cluster_cv: census.cv,
        target_demand_ops_per_sec: demand,
        cluster_demand_ops_per_sec: census.demand,
    }
}

/// Why the load an action was judged on is gone, if it is: see the module doc. Snapshots
/// written before these fields existed carry 0 and are never called vanished.
fn vanished(before: &Snapshot, after: &Snapshot, config: &EvaluationConfig) -> Option<String> {
    let keep = config.vanished_demand_ratio;
    let fell = |b: f64, a: f64| b > 0.0 && a < keep * b;
    if fell(before.target_demand_ops_per_sec, after.target_demand_ops_per_sec) {
        return Some(format!(
            "demand fell / moved load did not arrive: the subject's demand went from {:.0} to {:.0} ops/s (under {:.0} % of before), so its lower load is not relief",
            before.target_demand_ops_per_sec,
            after.target_demand_ops_per_sec,
            keep * 100.0
        ));
    }
    if fell(before.cluster_demand_ops_per_sec, after.cluster_demand_ops_per_sec) {
        return Some(format!(
            "demand fell: the cluster's demand went from {:.0} to {:.0} ops/s (under {:.0} % of before), so lower load is not relief",
            before.cluster_demand_ops_per_sec,
            after.cluster_demand_ops_per_sec,
            keep * 100.0
        ));
    }
    None
}

/// The metric an action is judged on: what its policy meant to fix.
fn primary(policy: Option<Policy>, kind: ActionKind, s: &Snapshot) -> (&'static str, f64) {
    match (policy, kind) {
        (_, ActionKind::Split) => ("target_ratio", s.target_ratio),
        (Some(Policy::Imbalance), _) => ("cluster_max_over_mean", s.cluster_max_ratio / s.cluster_mean_ratio.max(1e-9)),
        (_, ActionKind::Move | ActionKind::Group) => ("source_ratio", s.source_ratio.unwrap_or(s.cluster_max_ratio)),
        _ => ("cluster_max_ratio", s.cluster_max_ratio),
    }
}

/// Scores an action from its before and after snapshots. See the module doc for the rules.
pub fn judge(
    policy: Option<Policy>,
    kind: ActionKind,
    dedication: bool,
    before: &Snapshot,
    after: &Snapshot,
    config: &EvaluationConfig,
) -> Judgement {
    let (metric, b, a) = if dedication {
        // Where the neighbours were against the hottest shared worker now (where they went).
        ("neighbours_ratio", before.source_ratio.unwrap_or(before.cluster_max_ratio), after.cluster_max_ratio)
    } else {
        let (metric, b) = primary(policy, kind, before);
        (metric, b, primary(policy, kind, after).1)
    };
    let score = if b > 0.0 { (b - a) / b } else { 0.0 };
    if let Some(why) = vanished(before, after, config) {
        return Judgement { score, verdict: Verdict::Inconclusive, metric: metric.to_owned(), why };
    }
    let margin = config.harmful_margin_ratio;
    if dedication && a > b + margin && a > 1.0 - margin {
        let why = format!(
            "the worker's former neighbours went from {b:.2} of capacity to a shared worker at {a:.2}: the hotspot moved"
        );
        return Judgement { score, verdict: Verdict::Harmful, metric: metric.to_owned(), why };
    }
    // The hotspot moved instead of going away: the destination ends hotter than the source was.
    let moved_hotspot = match (kind, before.source_ratio, after.dest_ratio) {
        (ActionKind::Move | ActionKind::Group | ActionKind::Merge, Some(src), Some(dst)) => {
            dst > src + margin && dst > 1.0 - margin
        }
        _ => false,
    };
    let max_rose = after.cluster_max_ratio > before.cluster_max_ratio + margin;
    // Harm is only charged where the action put load: a move's, group's or cross-worker merge's
    // destination that is now the hottest worker. The cluster's max also rises when demand
    // surges, whatever any action did; a split keeps both halves on their worker until a move
    // scatters one, and a merge on one worker adds no load, so neither is charged with the
    // cluster's max.
    let dest_is_hottest = matches!(kind, ActionKind::Move | ActionKind::Group | ActionKind::Merge)
        && after.dest_ratio.is_some_and(|d| d >= after.cluster_max_ratio - 1e-9);
    // A merged partition that now rejects (over its limit) was a bad merge.
    let merged_over_limit = kind == ActionKind::Merge && after.target_ratio > 1.0 && before.target_ratio <= 1.0;
    // The subject's own demand grew past 1 / `vanished_demand_ratio` of before (a ramping range
    // that a balancing move carried): its destination carries that growth, which no placement
    // chose. The mirror of a demand that vanished; charging the move would rest the subject and
    // its later split pieces through the very overload that follows.
    let keep = config.vanished_demand_ratio;
    let surged = (moved_hotspot || (max_rose && dest_is_hottest))
        && keep > 0.0
        && before.target_demand_ops_per_sec > 0.0
        && after.target_demand_ops_per_sec * keep > before.target_demand_ops_per_sec;
    let (verdict, why) = if surged {
        (
            Verdict::Inconclusive,
            format!(
                "demand surged: the subject's demand went from {:.0} to {:.0} ops/s (over {:.0} times before), so its destination at {:.2} of capacity carries growth no placement chose",
                before.target_demand_ops_per_sec,
                after.target_demand_ops_per_sec,
                1.0 / keep,
                after.dest_ratio.unwrap_or(after.cluster_max_ratio),
            ),
        )
    } else if moved_hotspot {
        (
            Verdict::Harmful,
            format!(
                "the destination is at {:.2} of capacity after, hotter than the source was before ({:.2}): the hotspot moved",
                after.dest_ratio.unwrap_or(0.0),
                before.source_ratio.unwrap_or(0.0)
            ),
        )
    } else if max_rose && dest_is_hottest && score < config.effective_gain_ratio {
        (
            Verdict::Harmful,
            format!(
                "the destination became the hottest worker, {:.2} to {:.2} of capacity, while {metric} went from {b:.2} to {a:.2}",
                before.cluster_max_ratio, after.cluster_max_ratio
            ),
        )
    } else if merged_over_limit {
        (
            Verdict::Harmful,
            format!("the merged partition is at {:.2} of its limit and rejects requests", after.target_ratio),
        )
    } else if score >= config.effective_gain_ratio {
        (Verdict::Effective, format!("{metric} went from {b:.2} to {a:.2} ({:.0} % better)", score * 100.0))
    } else if kind == ActionKind::Merge && !max_rose {
        // A merge is meant to cut overhead, not load: not making anything hotter is its success.
        (Verdict::Effective, format!("merged without a hotter worker ({metric} {b:.2} → {a:.2})"))
    } else {
        (
            Verdict::NoEffect,
            format!(
                "{metric} went from {b:.2} to {a:.2} ({:+.0} %), under the {:.0} % that counts as effective",
                -score * 100.0,
                config.effective_gain_ratio * 100.0
            ),
        )
    };
    Judgement { score, verdict, metric: metric.to_owned(), why }
}

/// Where the storage, not lb, placed the subject (a group isolation): when it is not where the
/// planner `predicted`, the misprediction is named in the why, and charged as harmful where it
/// overloaded — the worker the storage chose ended over `high_watermark` of its capacity. A
/// dedication (the partition stays, its neighbours leave) and a verdict that is already
/// inconclusive are left alone.
pub fn charge_placement(
    judgement: &mut Judgement,
    subject: &Subject,
    predicted: &WorkerId,
    placed: Option<&PartitionView>,
    after: &Snapshot,
    high_watermark: f64,
) {
    let Some(actual) = placed.map(|p| &p.owner) else { return };
    if subject.dedication || actual == predicted || judgement.verdict == Verdict::Inconclusive {
        return;
    }
    let ratio = after.dest_ratio.unwrap_or(0.0);
    if ratio > high_watermark {
        judgement.verdict = Verdict::Harmful;
        judgement.why = format!(
            "the storage placed it on {actual}, not on {predicted} as lb predicted, and {actual} is at {ratio:.2} of its capacity (over the high watermark {high_watermark:.2})"
        );
    } else {
        judgement.why =
            format!("{}; the storage placed it on {actual}, not on {predicted} as lb predicted", judgement.why);
    }
}

/// The undo of a harmful move: back to where it came from, if that worker is still healthy. At
/// the storage's full rate: the move put load where it hurts, and the sooner it is undone the
/// sooner that stops.
pub fn revert(spec: &ActionSpec, subject: &Subject, input: &PlannerInput) -> Option<ActionSpec> {
    let (ActionSpec::Move { partition, .. }, Some(source)) = (spec, &subject.source) else { return None };
    let healthy = input.workers.iter().any(|w| &w.id == source && w.health != Health::Down);
    let exists = input.partitions.iter().any(|p| &p.id == partition && &p.owner != source);
    (healthy && exists).then(|| ActionSpec::Move {
        partition: partition.clone(),
        to_worker: source.clone(),
        max_bytes_per_sec: None,
    })
}

#[cfg(test)]
mod tests {
    use lb_common::ids::Key;
    use lb_common::protocol::Capacity;

    use super::*;
    use crate::planner::{PartitionView, PartitionWindow, WorkerWindow};

    fn worker(id: &str, ops: f64) -> WorkerView {
        WorkerView {
            id: id.parse().unwrap(),
            capacity: Capacity { ops_per_sec: 1000.0, bytes_per_sec: 1e9 },
            cpu_cores: 0.0,
            group: None,
            health: Health::Healthy,
            zone: None,
            load: WorkerWindow { ops_per_sec: ops, bytes_per_sec: 0.0, cpu_ratio: 0.0, attributed_cpu_cores: None },
        }
    }

    fn partition(id: &str, owner: &str, range: (u64, u64), ops: f64, rejected: f64) -> PartitionView {
        PartitionView {
            id: id.parse().unwrap(),
            tenant: "t".parse().unwrap(),
            table: "x".parse().unwrap(),
            range: KeyRange { start: Key(range.0), end: Key(range.1) },
            owner: owner.parse().unwrap(),
            group: None,
            stored_bytes: 0,
            limit: Some(Capacity { ops_per_sec: 500.0, bytes_per_sec: 1e9 }),
            supported_actions: ActionKind::ALL.to_vec(),
            stats: PartitionWindow { ops_per_sec: ops, rejected_per_sec: rejected, ..Default::default() },
        }
    }

    fn input(workers: Vec<WorkerView>, partitions: Vec<PartitionView>) -> PlannerInput {
        PlannerInput { partitions, workers, ..PlannerInput::default() }
    }

    proptest::proptest! {
        /// The layout index finds what the scan finds: a spec's partitions by id (one listed
        /// twice, one absent), and a subject's key range over two tables whose partitions may
        /// overlap, listed in any order; the snapshots and relief checks are the scan's, to
        /// the bit (the index reads the partitions in input order).
        #[test]
        fn the_layout_index_answers_what_the_scan_does(
            parts in proptest::collection::vec((0u8..2, 0u64..1000, 0u64..300, 0.0f64..900.0, 0.0f64..300.0, 0u8..3, proptest::bool::ANY), 1..60),
            picks in proptest::collection::vec((0usize..80, 0u64..1000, 0u64..400), 1..8),
        ) {
            let mut partitions: Vec<PartitionView> = Vec::new();
            for (i, &(table, start, width, ops, rejected, owner, adjacent)) in parts.iter().enumerate() {
                // Ids repeat now and then: a topology may list one twice. Some partitions start
                // where the one before ended, in its table: a split's pieces.
                let (table, start) = match partitions.last() {
                    Some(prev) if adjacent => (prev.table.clone(), prev.range.end.0 + 1),
                    _ => (format!("x{table}").parse().unwrap(), start),
                };
                let mut p = partition(&format!("p{}", i % 50), &format!("w{owner}"), (start, start + width), ops, rejected);
                p.table = table;
                partitions.push(p);
            }
            let workers = (0..3).map(|w| worker(&format!("w{w}"), 100.0 * f64::from(w))).collect();
            let mut now = input(workers, partitions);
            now.layout = Some(crate::planner::new_layout_id());
            let index = LayoutIndex::of(&now);
            proptest::prop_assert!(index.fits(&now));
            let census = Census::of(&now);
            let ids = crate::planner::IdIndex::of(&now.partitions);
            let map: std::collections::HashMap<&PartitionId, usize> =
                now.partitions.iter().enumerate().map(|(i, p)| (&p.id, i)).collect();
            for k in 0..60 {
                let id: PartitionId = format!("p{k}").parse().unwrap();
                proptest::prop_assert_eq!(ids.last(&id, &now.partitions), map.get(&id).copied());
            }
            for &(k, start, width) in &picks {
                // Whether a multi-way split of a partition shows, on the partitions the index
                // picks against all of them: cut where the partition ends (where a piece may
                // start) and where another one starts, each piece on that one's owner.
                let (p, q) = (&now.partitions[k % now.partitions.len()], &now.partitions[start as usize % now.partitions.len()]);
                let next = now.partitions.iter().find(|x| x.table == p.table && x.range.start.0 == p.range.end.0 + 1);
                let split = ActionSpec::SplitInto {
                    partition: p.id.clone(),
                    split_keys: vec![Key(p.range.end.0 + 1), q.range.start],
                    to_workers: vec![next.map_or_else(|| "w1".parse().unwrap(), |x| x.owner.clone()), q.owner.clone()],
                    group: None,
                    first_to_worker: None,
                };
                let near = index.near(&split, &now).expect("a split's partitions");
                let at = Some(p.range.start);
                // (More than half of the cases have a split that shows.)
                proptest::prop_assert_eq!(
                    crate::executor::shows_near(&split, &near, at),
                    crate::executor::shows_near(&split, &now.partitions, at)
                );
                let spec = ActionSpec::Move { partition: format!("p{k}").parse().unwrap(), to_worker: "w1".parse().unwrap(), max_bytes_per_sec: None };
                let indexed = subject_in(&spec, &now, Some(&index));
                proptest::prop_assert_eq!(&indexed, &subject_of(&spec, &now));
                let mut by_range = indexed.clone();
                let table = if start % 2 == 0 { "x0" } else { "x1" };
                by_range.range = Some(("t".parse().unwrap(), table.parse().unwrap(), KeyRange { start: Key(start), end: Key(start + width) }));
                for subject in [&indexed, &by_range] {
                    proptest::prop_assert_eq!(snapshot_with(subject, &now, &census, Some(&index)), snapshot(subject, &now));
                    proptest::prop_assert_eq!(relieved(&[subject], &now, Some(&index)), relieved(&[subject], &now, None));
                }
            }
        }
    }

    #[test]
    fn a_split_is_judged_on_its_pieces_found_by_range() {
        let before = input(
            vec![worker("a", 800.0), worker("b", 200.0)],
            vec![partition("p1", "a", (0, 99), 500.0, 300.0), partition("p2", "b", (100, 199), 200.0, 0.0)],
        );
        let spec = ActionSpec::Split { partition: "p1".parse().unwrap(), split_key: Key(50) };
        let subject = subject_of(&spec, &before);
        let b = snapshot(&subject, &before);
        assert!((b.target_ratio - 1.6).abs() < 1e-9);
        assert!((b.target_rejected_ratio - 300.0 / 800.0).abs() < 1e-9);
        // p1 became p1 [0,49] and p3 [50,99], the latter moved to b.
        let after = input(
            vec![worker("a", 400.0), worker("b", 600.0)],
            vec![
                partition("p1", "a", (0, 49), 400.0, 0.0),
                partition("p3", "b", (50, 99), 400.0, 0.0),
                partition("p2", "b", (100, 199), 200.0, 0.0),
            ],
        );
        let a = snapshot(&subject, &after);
        assert!((a.target_ratio - 0.8).abs() < 1e-9);
        let j = judge(Some(Policy::PartitionOverload), ActionKind::Split, false, &b, &a, &EvaluationConfig::default());
        assert_eq!(j.verdict, Verdict::Effective, "{j:?}");
        assert!((j.score - 0.5).abs() < 1e-9);
    }

    /// A merge across two workers is judged where it lands, like a move: its streamed side's
    /// owner is the source, the owner it lands on the destination.
    #[test]
    fn a_merge_that_lands_on_a_worker_it_overloads_is_harmful() {
        let before = input(
            vec![worker("a", 400.0), worker("b", 890.0)],
            vec![partition("p1", "a", (0, 99), 100.0, 0.0), partition("p2", "b", (100, 199), 50.0, 0.0)],
        );
        let merge = |to: Option<&str>| ActionSpec::Merge {
            left: "p1".parse().unwrap(),
            right: "p2".parse().unwrap(),
            to_worker: to.map(|w| w.parse().unwrap()),
        };
        let onto_b = subject_of(&merge(Some("b")), &before);
        assert_eq!(
            (onto_b.source.as_ref().map(|w| w.as_str()), onto_b.dest.as_ref().map(|w| w.as_str())),
            (Some("a"), Some("b"))
        );
        let onto_a = subject_of(&merge(None), &before);
        assert_eq!(
            (onto_a.source.as_ref().map(|w| w.as_str()), onto_a.dest.as_ref().map(|w| w.as_str())),
            (Some("b"), Some("a"))
        );
        let same = input(
            vec![worker("a", 400.0), worker("b", 890.0)],
            vec![partition("p1", "a", (0, 99), 100.0, 0.0), partition("p2", "a", (100, 199), 50.0, 0.0)],
        );
        assert_eq!(subject_of(&merge(None), &same).dest, None, "a merge on one worker puts load nowhere new");
        // p1 landed on b: b at 0.99, hotter than a was, and the hottest worker.
        let after =
            input(vec![worker("a", 300.0), worker("b", 990.0)], vec![partition("p1", "b", (0, 199), 150.0, 0.0)]);
        let config = EvaluationConfig::default();
        let (b, a) = (snapshot(&onto_b, &before), snapshot(&onto_b, &after));
        let j = judge(Some(Policy::Merge), ActionKind::Merge, false, &b, &a, &config);
        assert_eq!(j.verdict, Verdict::Harmful, "{j:?}");
    }

    #[test]
    fn a_move_that_carries_the_hotspot_over_is_harmful_and_revertible() {
        let before = input(
            vec![worker("a", 950.0), worker("b", 700.0), worker("c", 300.0)],
            vec![partition("p1", "a", (0, 99), 450.0, 0.0), partition("p2", "b", (100, 199), 200.0, 0.0)],
        );
        let spec = ActionSpec::Move {
            partition: "p1".parse().unwrap(),
            to_worker: "b".parse().unwrap(),
            max_bytes_per_sec: None,
        };
        let subject = subject_of(&spec, &before);
        let b = snapshot(&subject, &before);
        let after = input(
            vec![worker("a", 500.0), worker("b", 1000.0), worker("c", 300.0)],
            vec![partition("p1", "b", (0, 99), 450.0, 100.0), partition("p2", "b", (100, 199), 200.0, 0.0)],
        );
        let a = snapshot(&subject, &after);
        assert_eq!(a.dest_ratio, Some(1.1));
        let j = judge(Some(Policy::WorkerOverload), ActionKind::Move, false, &b, &a, &EvaluationConfig::default());
        assert_eq!(j.verdict, Verdict::Harmful, "{j:?}");
        assert!(j.why.contains("the hotspot moved"), "{}", j.why);
        assert_eq!(
            revert(&spec, &subject, &after),
            Some(ActionSpec::Move {
                partition: "p1".parse().unwrap(),
                to_worker: "a".parse().unwrap(),
                max_bytes_per_sec: None
            })
        );
    }

    #[test]
    fn an_unchanged_cluster_is_no_effect_and_a_relieved_source_is_effective() {
        let cfg = EvaluationConfig::default();
        let s = Snapshot {
            target_ratio: 1.0,
            source_ratio: Some(1.2),
            dest_ratio: Some(0.4),
            cluster_max_ratio: 1.2,
            cluster_mean_ratio: 0.6,
            ..Default::default()
        };
        let j = judge(Some(Policy::WorkerOverload), ActionKind::Move, false, &s, &s, &cfg);
        assert_eq!(j.verdict, Verdict::NoEffect, "{j:?}");
        let better = Snapshot { source_ratio: Some(0.8), dest_ratio: Some(0.7), cluster_max_ratio: 0.8, ..s };
        let j = judge(Some(Policy::WorkerOverload), ActionKind::Move, false, &s, &better, &cfg);
        assert_eq!(j.verdict, Verdict::Effective, "{j:?}");
        // Imbalance moves are judged on max/mean.
        let flat = Snapshot { cluster_max_ratio: 0.66, ..s };
        let j = judge(Some(Policy::Imbalance), ActionKind::Move, false, &s, &flat, &cfg);
        assert_eq!((j.verdict, j.metric.as_str()), (Verdict::Effective, "cluster_max_over_mean"));
    }

    #[test]
    fn a_dedication_is_judged_on_where_the_neighbours_went() {
        // Worker a at 0.93 with a slot of 0.75 and neighbours; after the dedication a holds the
        // slot alone (0.75, out of the pool) and the neighbours sit on b and c at 0.39.
        let cfg = EvaluationConfig::default();
        let mut before_input = input(
            vec![worker("a", 930.0), worker("b", 250.0), worker("c", 250.0)],
            vec![partition("hot", "a", (0, 99), 750.0, 0.0), partition("n", "a", (100, 199), 180.0, 0.0)],
        );
        before_input.new_group_dedicates_owner = true;
        let spec = ActionSpec::Group {
            target: lb_common::protocol::GroupTarget::Partition { partition: "hot".parse().unwrap() },
            group: "dedicated-hot".parse().unwrap(),
        };
        let subject = subject_of(&spec, &before_input);
        assert!(subject.dedication, "{subject:?}");
        let b = snapshot(&subject, &before_input);
        let mut after_input = input(
            vec![worker("a", 750.0), worker("b", 390.0), worker("c", 380.0)],
            vec![partition("hot", "a", (0, 99), 750.0, 0.0), partition("n", "b", (100, 199), 180.0, 0.0)],
        );
        after_input.workers[0].group = Some("dedicated-hot".parse().unwrap());
        after_input.partitions[0].group = Some("dedicated-hot".parse().unwrap());
        let a = snapshot(&subject, &after_input);
        let j = judge(Some(Policy::WorkerOverload), ActionKind::Group, true, &b, &a, &cfg);
        assert_eq!((j.verdict, j.metric.as_str()), (Verdict::Effective, "neighbours_ratio"), "{j:?}");
        assert!((j.score - (0.93 - 0.39) / 0.93).abs() < 1e-9, "{j:?}");
        // Judged as a plain group, the slot's own worker (0.93 -> 0.75) would be all it saw.
        let plain = judge(Some(Policy::WorkerOverload), ActionKind::Group, false, &b, &a, &cfg);
        assert!((plain.score - (0.93 - 0.75) / 0.93).abs() < 1e-9, "{plain:?}");
        // Neighbours landing on a worker hotter than the source was: the hotspot moved.
        after_input.workers[1].load.ops_per_sec = 990.0;
        let a = snapshot(&subject, &after_input);
        let j = judge(Some(Policy::WorkerOverload), ActionKind::Group, true, &b, &a, &cfg);
        assert_eq!(j.verdict, Verdict::Harmful, "{j:?}");
        assert!(j.why.contains("former neighbours"), "{}", j.why);
    }

    #[test]
    fn a_surge_elsewhere_is_not_charged_to_a_split_or_a_move_whose_destination_stays_cool() {
        let cfg = EvaluationConfig::default();
        let before = Snapshot {
            target_ratio: 2.2,
            source_ratio: Some(0.5),
            dest_ratio: Some(0.2),
            cluster_max_ratio: 0.5,
            cluster_mean_ratio: 0.3,
            ..Default::default()
        };
        // Demand kept surging: the hottest worker rose from 0.50 to 0.71 and the target barely moved.
        let after = Snapshot { target_ratio: 2.12, source_ratio: Some(0.71), cluster_max_ratio: 0.71, ..before };
        let j = judge(Some(Policy::PartitionOverload), ActionKind::Split, false, &before, &after, &cfg);
        assert_eq!(j.verdict, Verdict::NoEffect, "{j:?}");
        let j = judge(Some(Policy::WorkerOverload), ActionKind::Move, false, &before, &after, &cfg);
        assert_eq!(j.verdict, Verdict::NoEffect, "the destination (0.2) is not the hottest: {j:?}");
        let dest_hottest = Snapshot { dest_ratio: Some(0.71), source_ratio: Some(0.48), ..after };
        let j = judge(Some(Policy::WorkerOverload), ActionKind::Move, false, &before, &dest_hottest, &cfg);
        assert_eq!(j.verdict, Verdict::Harmful, "{j:?}");
    }

    #[test]
    fn a_move_whose_load_never_arrives_is_inconclusive_not_effective() {
        // Valkey, clients that died instead of following the moved slot: the source cools, the
        // destination stays idle, every ratio falls.
        let before = input(
            vec![worker("a", 950.0), worker("b", 200.0), worker("c", 200.0)],
            vec![partition("p1", "a", (0, 99), 600.0, 0.0), partition("p2", "b", (100, 199), 200.0, 0.0)],
        );
        let spec = ActionSpec::Move {
            partition: "p1".parse().unwrap(),
            to_worker: "c".parse().unwrap(),
            max_bytes_per_sec: None,
        };
        let subject = subject_of(&spec, &before);
        let b = snapshot(&subject, &before);
        assert_eq!(b.target_demand_ops_per_sec, 600.0);
        let gone = input(
            vec![worker("a", 350.0), worker("b", 200.0), worker("c", 200.0)],
            vec![partition("p1", "c", (0, 99), 0.0, 0.0), partition("p2", "b", (100, 199), 200.0, 0.0)],
        );
        let a = snapshot(&subject, &gone);
        let cfg = EvaluationConfig::default();
        let j = judge(Some(Policy::WorkerOverload), ActionKind::Move, false, &b, &a, &cfg);
        assert_eq!(j.verdict, Verdict::Inconclusive, "{j:?}");
        assert!(j.why.contains("moved load did not arrive") && j.why.contains("600 to 0"), "{}", j.why);
        // The same move with the load at its destination is judged on its merits: effective.
        let arrived = input(
            vec![worker("a", 350.0), worker("b", 200.0), worker("c", 800.0)],
            vec![partition("p1", "c", (0, 99), 600.0, 0.0), partition("p2", "b", (100, 199), 200.0, 0.0)],
        );
        let j = judge(Some(Policy::WorkerOverload), ActionKind::Move, false, &b, &snapshot(&subject, &arrived), &cfg);
        assert_eq!(j.verdict, Verdict::Effective, "{j:?}");
    }

    #[test]
    fn a_move_whose_subject_surged_after_it_is_inconclusive_not_harmful() {
        let cfg = EvaluationConfig::default();
        let before = Snapshot {
            target_ratio: 0.55,
            source_ratio: Some(0.42),
            dest_ratio: Some(0.20),
            cluster_max_ratio: 0.42,
            cluster_mean_ratio: 0.21,
            target_demand_ops_per_sec: 4_400.0,
            cluster_demand_ops_per_sec: 100_000.0,
            ..Default::default()
        };
        // The moved partition ramps 3.7x: its destination is the hottest worker, hotter than the
        // source was.
        let ramped = Snapshot {
            target_ratio: 2.06,
            source_ratio: Some(0.31),
            dest_ratio: Some(0.58),
            cluster_max_ratio: 0.58,
            target_demand_ops_per_sec: 16_500.0,
            cluster_demand_ops_per_sec: 112_000.0,
            ..before
        };
        let j = judge(Some(Policy::Imbalance), ActionKind::Move, false, &before, &ramped, &cfg);
        assert_eq!(j.verdict, Verdict::Inconclusive, "{j:?}");
        assert!(j.why.starts_with("demand surged") && j.why.contains("4400 to 16500"), "{}", j.why);
        // The same destination with the subject's demand as before: the move carried the hotspot.
        let steady = Snapshot { target_demand_ops_per_sec: 4_600.0, ..ramped };
        let j = judge(Some(Policy::Imbalance), ActionKind::Move, false, &before, &steady, &cfg);
        assert_eq!(j.verdict, Verdict::Harmful, "{j:?}");
    }

    #[test]
    fn a_split_while_the_whole_cluster_goes_quiet_is_inconclusive() {
        let cfg = EvaluationConfig::default();
        let s = Snapshot {
            target_ratio: 2.0,
            cluster_max_ratio: 1.2,
            cluster_mean_ratio: 0.6,
            target_demand_ops_per_sec: 1000.0,
            cluster_demand_ops_per_sec: 5000.0,
            ..Default::default()
        };
        // The split's pieces keep their demand, but the cluster lost most of its clients.
        let quiet = Snapshot { target_ratio: 1.0, cluster_demand_ops_per_sec: 2000.0, ..s };
        let j = judge(Some(Policy::PartitionOverload), ActionKind::Split, false, &s, &quiet, &cfg);
        assert_eq!(j.verdict, Verdict::Inconclusive, "{j:?}");
        assert!(j.why.contains("cluster's demand went from 5000 to 2000"), "{}", j.why);
        // A demand that merely wobbles is no reason: the split halved the target, effective.
        let wobble =
            Snapshot { target_ratio: 1.0, target_demand_ops_per_sec: 800.0, cluster_demand_ops_per_sec: 4200.0, ..s };
        let j = judge(Some(Policy::PartitionOverload), ActionKind::Split, false, &s, &wobble, &cfg);
        assert_eq!(j.verdict, Verdict::Effective, "{j:?}");
        // Records written before the demand fields existed (0) are judged as before.
        let old = Snapshot { target_demand_ops_per_sec: 0.0, cluster_demand_ops_per_sec: 0.0, ..s };
        let j = judge(
            Some(Policy::PartitionOverload),
            ActionKind::Split,
            false,
            &old,
            &Snapshot { target_ratio: 1.0, ..old },
            &cfg,
        );
        assert_eq!(j.verdict, Verdict::Effective, "{j:?}");
    }

    #[test]
    fn config_errors_name_the_field() {
        let c = EvaluationConfig { window_secs: 0, harmful_margin_ratio: 2.0, ..Default::default() };
        let err = c.validate().expect_err("invalid").to_string();
        assert!(err.contains("evaluation.window_secs = 0"), "{err}");
        assert!(err.contains("evaluation.harmful_margin_ratio = 2"), "{err}");
    }
}
