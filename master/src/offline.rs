//! The offline analyzer in the master: `[offline]` in `master.toml`, the analyzer that turns an
//! offline pass's findings ([`lb_offline::Findings`]) into proposals of origin `offline`, and the
//! slot through which a pass hands them over.
//!
//! **Shape.** The analyses themselves ([`lb_offline::analyze`]: polars over the archive) are
//! slow and run off the online loop: live on a blocking thread every `offline.interval_secs`
//! ([`crate::archiver`]), in the simulator hourly in virtual time. Either way the result lands in
//! a [`FindingsSlot`]; [`OfflineAnalyzer`], one of the core's registered analyzers, reads the
//! newest findings at every online pass and proposes from them, checked against the pass's own
//! view (both partitions still there and adjacent, neither in flight nor in a cooldown, not hot
//! right now). So an offline proposal goes down the same path as an online one: its policy's
//! mode (`off | dry_run | auto`), approval, submission, tracking and evaluation. The online pass
//! never waits for an offline one: it reads whatever findings are there, or none.
//!
//! - **merge** ([`lb_common::protocol::Policy::Merge`]): each merge of a pass is proposed once,
//!   at the first online pass after the findings arrive.
//! - **peaks ahead** ([`lb_common::protocol::Policy::PeakAhead`]): from `act_at_ms`
//!   (`lead_time_secs` before the forecast peak) until the peak hour ends, every partition inside
//!   the forecast's range whose share of the predicted peak (shared by current load) is over
//!   `presplit_target_ratio` × its limit is split at its load median, one piece at a time, at
//!   most `max_presplits_per_hour` an hour.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use lb_common::ids::{Key, KeyRange, PartitionId, WorkerId};
use lb_common::protocol::{ActionKind, ActionSpec, KeySketch, Origin};
use lb_common::validate::Scope;
pub use lb_offline::{Findings, HOUR_MS, Layout, LayoutPartition, LayoutWorker, OfflineConfig};
use serde::{Deserialize, Serialize};

pub use lb_offline::{Archive, ArchiveError, Coverage, MergeCandidate, PeakForecast};

use crate::online::OnlineConfig;
use crate::online::analyzer::{AnalysisContext, Analyzer, Findings as AnalyzerFindings};
use crate::planner::{
    DeclineReason, MergeLanding, OutsideCheck, PlannerInput, PlannerState, Policy, PolicyMode, Prediction, Proposal,
    Trigger,
};

/// `[offline]`: the offline analyzer's cadence, archive and policies. `configs/master.toml`
/// says why each default is what it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OfflineSection {
    pub merge_mode: PolicyMode,
    pub peak_ahead_mode: PolicyMode,
    pub interval_secs: u64,
    /// Where the archive lives; default `archive/` next to `store.path`.
    pub archive_dir: Option<PathBuf>,
    pub retention_days: u32,
    pub lookback_hours: u32,
    pub merge_max_ratio: f64,
    pub merge_min_age_secs: u64,
    pub max_merges_per_pass: u32,
    pub max_merges_per_table: u32,
    pub periodic_ratio: f64,
    pub periodic_min_peaks: u32,
    pub allow_partial_lookback: bool,
    pub min_history_hours: u32,
    pub presplit_ratio: f64,
    pub presplit_target_ratio: f64,
    pub presplit_min_recurrences: u32,
    pub presplit_horizon_hours: u32,
    pub lead_time_secs: u64,
    pub max_presplits_per_hour: u32,
    pub report_imbalance_ratio: f64,
    pub report_chronic_share: f64,
}

impl Default for OfflineSection {
    fn default() -> Self {
        let a = OfflineConfig::default();
        Self {
            merge_mode: PolicyMode::Auto,
            peak_ahead_mode: PolicyMode::Auto,
            interval_secs: 3600,
            archive_dir: None,
            retention_days: 35,
            lookback_hours: a.lookback_hours,
            merge_max_ratio: a.merge_max_ratio,
            merge_min_age_secs: a.merge_min_age_secs,
            max_merges_per_pass: a.max_merges_per_pass,
            max_merges_per_table: a.max_merges_per_table,
            periodic_ratio: a.periodic_ratio,
            periodic_min_peaks: a.periodic_min_peaks,
            allow_partial_lookback: a.allow_partial_lookback,
            min_history_hours: a.min_history_hours,
            presplit_ratio: a.presplit_ratio,
            presplit_target_ratio: a.presplit_target_ratio,
            presplit_min_recurrences: a.presplit_min_recurrences,
            presplit_horizon_hours: a.presplit_horizon_hours,
            lead_time_secs: a.lead_time_secs,
            max_presplits_per_hour: 32,
            report_imbalance_ratio: a.report_imbalance_ratio,
            report_chronic_share: a.report_chronic_share,
        }
    }
}

impl OfflineSection {
    /// The analyses' part of the section.
    pub fn analysis(&self) -> OfflineConfig {
        OfflineConfig {
            lookback_hours: self.lookback_hours,
            merge_max_ratio: self.merge_max_ratio,
            merge_min_age_secs: self.merge_min_age_secs,
            max_merges_per_pass: self.max_merges_per_pass,
            max_merges_per_table: self.max_merges_per_table,
            periodic_ratio: self.periodic_ratio,
            periodic_min_peaks: self.periodic_min_peaks,
            allow_partial_lookback: self.allow_partial_lookback,
            min_history_hours: self.min_history_hours,
            presplit_ratio: self.presplit_ratio,
            presplit_target_ratio: self.presplit_target_ratio,
            presplit_min_recurrences: self.presplit_min_recurrences,
            presplit_horizon_hours: self.presplit_horizon_hours,
            lead_time_secs: self.lead_time_secs,
            report_imbalance_ratio: self.report_imbalance_ratio,
            report_chronic_share: self.report_chronic_share,
        }
    }

    /// The archive's directory for a store at `store_path`.
    pub fn archive_dir(&self, store_path: &std::path::Path) -> PathBuf {
        self.archive_dir
            .clone()
            .unwrap_or_else(|| store_path.parent().map_or_else(|| PathBuf::from("archive"), |p| p.join("archive")))
    }

    pub fn validate_into(&self, v: &mut Scope<'_>) {
        v.range_u64("interval_secs", self.interval_secs, 60, 7 * 86_400);
        v.range_u64("retention_days", u64::from(self.retention_days), 1, 3650);
        v.range_u64("lookback_hours", u64::from(self.lookback_hours), 1, 24 * 35);
        v.check(
            u64::from(self.lookback_hours) <= u64::from(self.retention_days) * 24,
            "lookback_hours",
            self.lookback_hours,
            "must fit in retention_days",
        );
        for (name, value) in
            [("merge_max_ratio", self.merge_max_ratio), ("presplit_target_ratio", self.presplit_target_ratio)]
        {
            v.check(value.is_finite() && value > 0.0 && value < 1.0, name, value, "must be in (0, 1)");
        }
        v.check(
            self.presplit_ratio.is_finite() && self.presplit_ratio > self.presplit_target_ratio,
            "presplit_ratio",
            self.presplit_ratio,
            "must be finite and over presplit_target_ratio",
        );
        v.check(
            self.periodic_ratio.is_finite() && self.periodic_ratio > 1.0,
            "periodic_ratio",
            self.periodic_ratio,
            "must be over 1",
        );
        v.range_u64("merge_min_age_secs", self.merge_min_age_secs, 0, 30 * 86_400);
        v.range_u64("max_merges_per_pass", u64::from(self.max_merges_per_pass), 0, 10_000);
        v.range_u64("max_merges_per_table", u64::from(self.max_merges_per_table), 0, 10_000);
        v.range_u64("periodic_min_peaks", u64::from(self.periodic_min_peaks), 1, 35);
        v.check(
            self.min_history_hours >= 1 && self.min_history_hours <= self.lookback_hours,
            "min_history_hours",
            self.min_history_hours,
            "must be 1..=lookback_hours",
        );
        v.range_u64("presplit_min_recurrences", u64::from(self.presplit_min_recurrences), 1, 35);
        v.range_u64("presplit_horizon_hours", u64::from(self.presplit_horizon_hours), 1, 24 * 7);
        v.range_u64("lead_time_secs", self.lead_time_secs, 0, 86_400);
        v.range_u64("max_presplits_per_hour", u64::from(self.max_presplits_per_hour), 0, 10_000);
        v.check(
            self.report_imbalance_ratio.is_finite() && self.report_imbalance_ratio > 1.0,
            "report_imbalance_ratio",
            self.report_imbalance_ratio,
            "must be finite and over 1",
        );
        v.check(
            self.report_chronic_share.is_finite() && (0.0..1.0).contains(&self.report_chronic_share),
            "report_chronic_share",
            self.report_chronic_share,
            "must be in [0, 1)",
        );
    }
}

/// One offline pass with `section`'s analysis policies ([`lb_offline::analyze`]). Slow: live it
/// runs on a blocking thread, never inside the online loop.
pub fn pass(
    archive: &Archive,
    layout: &Layout,
    section: &OfflineSection,
    now_ms: i64,
    silent_sources: &[String],
) -> Result<Findings, String> {
    lb_offline::analyze(archive, layout, &section.analysis(), now_ms, silent_sources).map_err(|e| e.to_string())
}

#[derive(Debug, Default)]
struct SlotState {
    /// Something fills this slot (the archiver, the simulator): without it the analyzer does
    /// nothing, not even its bookkeeping, so an online-only core costs what it did.
    fed: bool,
    findings: Option<Arc<Findings>>,
    layout: Option<(i64, Arc<Layout>)>,
    want_layout: bool,
}

/// Where an offline pass leaves its findings and finds the layout to judge against. The
/// analyzer publishes a layout only when one is asked for ([`FindingsSlot::request_layout`]),
/// so a 100k-partition pass does not copy its view every second.
#[derive(Clone, Default)]
pub struct FindingsSlot {
    state: Arc<Mutex<SlotState>>,
    /// Wakes the archiver for a pass on demand (`POST /api/v1/offline/pass`).
    wake: Arc<tokio::sync::Notify>,
}

impl std::fmt::Debug for FindingsSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.lock();
        f.debug_struct("FindingsSlot")
            .field("findings_at_ms", &s.findings.as_ref().map(|f| f.at_ms))
            .field("layout_at_ms", &s.layout.as_ref().map(|l| l.0))
            .finish()
    }
}

impl FindingsSlot {
    /// A slot that an offline pass will fill.
    pub fn fed() -> Self {
        let slot = Self::default();
        slot.lock().fed = true;
        slot
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SlotState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn publish(&self, findings: Findings) {
        self.lock().findings = Some(Arc::new(findings));
    }

    pub fn latest(&self) -> Option<Arc<Findings>> {
        self.lock().findings.clone()
    }

    /// Whether something runs passes into this slot (the archiver, the simulator).
    pub fn is_fed(&self) -> bool {
        self.lock().fed
    }

    /// Asks for a pass now instead of at the next interval (a request made while a pass runs
    /// gets one more right after it).
    pub fn request_pass(&self) {
        self.wake.notify_one();
    }

    /// Resolves when a pass is asked for.
    pub async fn pass_requested(&self) {
        self.wake.notified().await;
    }

    /// Asks the next online pass to publish its layout.
    pub fn request_layout(&self) {
        let mut s = self.lock();
        s.want_layout = true;
        s.layout = None;
    }

    /// The layout published since the last request, with the pass's time.
    pub fn layout(&self) -> Option<(i64, Arc<Layout>)> {
        self.lock().layout.clone()
    }
}

/// Turns offline findings into proposals; see the module doc.
#[derive(Debug, Default)]
pub struct OfflineAnalyzer {
    slot: FindingsSlot,
    /// Each partition's range at the last pass, to notice splits.
    ranges: HashMap<PartitionId, KeyRange>,
    /// The layout `ranges` was taken from ([`PlannerInput::layout`]): the same layout has the
    /// same partitions and ranges, so nothing was split since.
    ranges_layout: Option<u64>,
    /// When this master saw each partition made by a split (or shrink).
    split_at_ms: HashMap<PartitionId, i64>,
    /// The findings whose merges were proposed.
    merges_from_ms: Option<i64>,
    /// Their merges declined only for a cap (the pass's, or in flight): tried again every pass
    /// until proposed or declined for another reason.
    merges_capped: Vec<(PartitionId, PartitionId)>,
    /// (hour, pre-splits proposed in it).
    presplits: (i64, u32),
}

impl OfflineAnalyzer {
    pub fn new(slot: FindingsSlot) -> Self {
        Self { slot, ..Self::default() }
    }

    fn track_splits(&mut self, input: &PlannerInput, now_ms: i64) {
        if input.layout.is_some() && input.layout == self.ranges_layout {
            return;
        }
        self.ranges_layout = input.layout;
        let first = self.ranges.is_empty();
        let mut next = HashMap::with_capacity(input.partitions.len());
        for p in &input.partitions {
            let shrunk = match self.ranges.get(&p.id) {
                Some(old) => old.start < p.range.start || p.range.end < old.end,
                // New, and inside a range this master knew: a split child.
                None => !first && self.ranges.values().any(|r| r.start <= p.range.start && p.range.end <= r.end),
            };
            if shrunk {
                self.split_at_ms.insert(p.id.clone(), now_ms);
            }
            next.insert(p.id.clone(), p.range);
        }
        self.split_at_ms.retain(|id, _| next.contains_key(id));
        self.ranges = next;
    }

    fn publish_layout(&self, ctx: &AnalysisContext<'_>) {
        let mut s = self.slot.lock();
        if s.want_layout {
            s.want_layout = false;
            s.layout =
                Some((ctx.now_ms, Arc::new(layout(ctx.input, ctx.planner_state, &self.split_at_ms, ctx.now_ms))));
        }
    }
}

/// The layout an offline pass judges against: the pass's partitions and workers, busy where an
/// action is in flight or a cooldown runs.
pub fn layout(
    input: &PlannerInput,
    state: &PlannerState,
    split_at_ms: &HashMap<PartitionId, i64>,
    now_ms: i64,
) -> Layout {
    let busy = busy_set(input, state, now_ms);
    Layout {
        partitions: input
            .partitions
            .iter()
            .map(|p| LayoutPartition {
                id: p.id.clone(),
                tenant: p.tenant.clone(),
                table: p.table.clone(),
                range: p.range,
                owner: p.owner.clone(),
                limit_ops_per_sec: p.limit.map(|l| l.ops_per_sec).filter(|&l| l > 0.0),
                can_merge: p.supported_actions.contains(&ActionKind::Merge),
                can_split: p.supported_actions.contains(&ActionKind::Split),
                split_at_ms: split_at_ms.get(&p.id).copied(),
                busy: busy.contains(&p.id),
                ops_per_sec: p.stats.ops_per_sec + p.stats.rejected_per_sec,
            })
            .collect(),
        workers: input
            .workers
            .iter()
            .map(|w| LayoutWorker {
                id: w.id.clone(),
                capacity_ops_per_sec: w.capacity.ops_per_sec,
                ops_per_sec: w.load.ops_per_sec,
            })
            .collect(),
    }
}

/// Where a merge puts the merged partition: its `to_worker`, else the left's owner.
fn merge_destination<'s>(spec: &'s ActionSpec, left_owner: &'s WorkerId) -> &'s WorkerId {
    match spec {
        ActionSpec::Merge { to_worker: Some(w), .. } => w,
        _ => left_owner,
    }
}

/// How a merge's destination was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Landing {
    /// By [`OutsideCheck::merge_landing`].
    Chosen(MergeLanding),
    /// The other owner: the one chosen has no room for the other side.
    OtherFull,
    /// The left side's owner: the storage does not place merges.
    LeftOnly,
}

/// The analysis's reason for `m` (which names the cooler owner when it ran), and where the
/// merged partition lands and why.
fn merge_reason(m: &lb_common::protocol::OfflineMerge, lands_on: &WorkerId, landing: Landing) -> String {
    let why = match landing {
        Landing::Chosen(MergeLanding::Cooler) if lands_on == &m.to_worker => return m.reason.clone(),
        Landing::Chosen(MergeLanding::Cooler) => "the pair ends cooler there now".to_owned(),
        Landing::Chosen(MergeLanding::FewerBytes) => {
            "the pair ends about as balanced either way, and the smaller side streams".to_owned()
        }
        Landing::Chosen(MergeLanding::Healthy) => "the other owner is not healthy".to_owned(),
        Landing::OtherFull => "the other owner has no room for it".to_owned(),
        Landing::LeftOnly if lands_on == &m.to_worker => return m.reason.clone(),
        Landing::LeftOnly => "the left side's owner (the storage system does not place merges)".to_owned(),
    };
    format!("{}; the merged partition lands on {lands_on}: {why}", m.reason)
}

/// How a forecast peak was seen: "a daily peak, seen on 3 days", "a weekly peak, seen on 2
/// Mondays".
fn seen(f: &PeakForecast) -> String {
    match f.pattern {
        lb_common::protocol::PeakPattern::Daily => format!("a daily peak, seen on {} days", f.recurrences),
        lb_common::protocol::PeakPattern::Weekly => {
            let day = chrono::DateTime::<chrono::Utc>::from_timestamp_millis(f.peak_at_ms)
                .map_or_else(|| "weekday".to_owned(), |t| t.format("%A").to_string());
            format!("a weekly peak, seen on {} {day}s", f.recurrences)
        }
    }
}

fn busy_set(input: &PlannerInput, state: &PlannerState, now_ms: i64) -> HashSet<PartitionId> {
    let mut busy: HashSet<PartitionId> =
        input.in_flight.iter().flat_map(|a| crate::planner::partitions_of(&a.spec)).cloned().collect();
    busy.extend(state.cooldown_until_ms.iter().filter(|&(_, &until)| until > now_ms).map(|(p, _)| p.clone()));
    busy
}

impl Analyzer for OfflineAnalyzer {
    fn name(&self) -> &'static str {
        "offline"
    }

    fn analyze(&mut self, ctx: &mut AnalysisContext<'_>, config: &OnlineConfig) -> AnalyzerFindings {
        let now = ctx.now_ms;
        if !self.slot.lock().fed {
            return AnalyzerFindings::default();
        }
        self.track_splits(ctx.input, now);
        self.publish_layout(ctx);
        let Some(found) = self.slot.latest() else { return AnalyzerFindings::default() };
        let section = &config.offline;
        let mut busy = busy_set(ctx.input, ctx.planner_state, now);
        // What the planner proposed in this pass acts on its partitions too.
        busy.extend(ctx.earlier.iter().flat_map(crate::planner::partitions_of).cloned());
        let mut proposals = Vec::new();
        // Built only when a merge is due: at a million partitions it is a pass's worth of work.
        let mut index: Option<HashMap<&PartitionId, usize>> = None;
        let mut position = |id: &PartitionId| {
            index
                .get_or_insert_with(|| ctx.input.partitions.iter().enumerate().map(|(i, p)| (&p.id, i)).collect())
                .get(id)
                .copied()
        };
        // The planner's in-flight caps and its destination rule, on its model: the other side's
        // load lands on the owner the merged partition lands on.
        // `pick` builds the action on the check's view (a merge's destination is the owner
        // that is cooler with this pass's earlier actions counted).
        let mut check = None;
        let mut admit = |pick: &dyn Fn(&OutsideCheck<'_>) -> ActionSpec| {
            let check = check.get_or_insert_with(|| {
                OutsideCheck::new(ctx.input, &config.planner, now)
                    .with_datasets(ctx.datasets, ctx.dataset_usage)
                    .after(&ctx.earlier)
            });
            let spec = pick(check);
            let admitted = check.admit(&spec);
            (spec, admitted)
        };
        // Only what is finally declined is logged and counted (not a first destination a
        // merge then lands beside).
        let declined = |policy: Policy, spec: &ActionSpec, admitted: Result<(), (DeclineReason, String)>| {
            admitted.map_err(|(reason, why)| {
                tracing::info!(spec = ?spec, policy = policy.as_str(), %why, "offline proposal declined");
                metrics::counter!("lb_master_declines_total", "policy" => policy.as_str(), "reason" => reason.as_str())
                    .increment(1);
                reason
            })
        };
        let fresh = self.merges_from_ms != Some(found.at_ms);
        if section.merge_mode != PolicyMode::Off && (fresh || !self.merges_capped.is_empty()) {
            self.merges_from_ms = Some(found.at_ms);
            let retry = std::mem::take(&mut self.merges_capped);
            let due = |m: &&lb_common::protocol::OfflineMerge| {
                fresh || retry.iter().any(|(l, r)| l == &m.left && r == &m.right)
            };
            for m in found.merges.iter().filter(due) {
                let (Some(l), Some(r)) = (position(&m.left), position(&m.right)) else { continue };
                let (lp, rp) = (&ctx.input.partitions[l], &ctx.input.partitions[r]);
                let now_demand =
                    lp.stats.ops_per_sec + lp.stats.rejected_per_sec + rp.stats.ops_per_sec + rp.stats.rejected_per_sec;
                let cold_now = now_demand < section.merge_max_ratio * m.limit_ops_per_sec;
                if !lp.range.is_left_neighbour_of(&rp.range)
                    || busy.contains(&lp.id)
                    || busy.contains(&rp.id)
                    || !cold_now
                {
                    continue;
                }
                // Where the pair ends cooler, or streams fewer bytes when that is a wash (this
                // pass's earlier actions counted); on the other owner if that one has no room
                // for the other side. Where the storage does not place merges, on the left's.
                let on = |w: &WorkerId| ActionSpec::Merge {
                    left: m.left.clone(),
                    right: m.right.clone(),
                    to_worker: (w != &lp.owner).then(|| w.clone()),
                };
                let placed = ctx.input.merge_to_worker && lp.owner != rp.owner;
                let min_gain = config.planner.caps.min_gain_ratio;
                let chosen = std::cell::Cell::new(Landing::LeftOnly);
                let (mut spec, mut admitted) =
                    admit(&|c| match c.merge_landing(&lp.id, &rp.id, min_gain).filter(|_| placed) {
                        Some((w, why)) => {
                            chosen.set(Landing::Chosen(why));
                            on(w)
                        }
                        None => on(&lp.owner),
                    });
                let mut landing = chosen.get();
                let healthy = |w: &WorkerId| {
                    ctx.input.workers.iter().any(|v| &v.id == w && v.health == lb_common::protocol::Health::Healthy)
                };
                if placed && matches!(admitted, Err((DeclineReason::DestinationOverloaded, _))) {
                    let first = merge_destination(&spec, &lp.owner).clone();
                    let other = if first == lp.owner { &rp.owner } else { &lp.owner };
                    if healthy(other) {
                        (spec, admitted) = admit(&|_| on(other));
                        landing = Landing::OtherFull;
                    }
                }
                let admitted = declined(Policy::Merge, &spec, admitted);
                let lands_on = merge_destination(&spec, &lp.owner).clone();
                match admitted {
                    Ok(()) => {}
                    Err(DeclineReason::Cap) => {
                        self.merges_capped.push((m.left.clone(), m.right.clone()));
                        continue;
                    }
                    Err(_) => continue,
                }
                busy.insert(lp.id.clone());
                busy.insert(rp.id.clone());
                proposals.push(Proposal {
                    spec,
                    policy: Policy::Merge,
                    mode: section.merge_mode,
                    origin: Origin::Offline,
                    reason: merge_reason(m, &lands_on, landing),
                    trigger: Trigger {
                        partition_demand_ops_per_sec: Some(m.combined_peak_ops_per_sec),
                        partition_limit_ops_per_sec: Some(m.limit_ops_per_sec),
                        ..Trigger::default()
                    },
                    predicted: Prediction {
                        target_before_ratio: now_demand / m.limit_ops_per_sec,
                        target_after_ratio: m.combined_peak_ops_per_sec / m.limit_ops_per_sec,
                        ..Prediction::default()
                    },
                    rejected_alternatives: Vec::new(),
                });
            }
        }
        if section.peak_ahead_mode != PolicyMode::Off {
            let hour = now.div_euclid(HOUR_MS);
            if self.presplits.0 != hour {
                self.presplits = (hour, 0);
            }
            for f in found.peaks.iter().filter(|f| f.act_at_ms <= now && now < f.peak_at_ms + HOUR_MS) {
                let inside: Vec<usize> = ctx
                    .input
                    .partitions
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| {
                        p.tenant == f.tenant
                            && p.table == f.table
                            && f.range.start <= p.range.start
                            && p.range.end <= f.range.end
                    })
                    .map(|(i, _)| i)
                    .collect();
                let load: f64 = inside.iter().map(|&i| demand(&ctx.input.partitions[i])).sum();
                for &i in &inside {
                    let p = &ctx.input.partitions[i];
                    let share = if load > 0.0 { demand(p) / load } else { p.range.width() / range_width(&f.range) };
                    let predicted = f.predicted_peak_ops_per_sec * share;
                    let Some(limit) = p.limit.map(|l| l.ops_per_sec).filter(|&l| l > 0.0) else { continue };
                    if predicted <= section.presplit_target_ratio * limit
                        || busy.contains(&p.id)
                        || !p.supported_actions.contains(&ActionKind::Split)
                        || self.presplits.1 >= section.max_presplits_per_hour
                    {
                        continue;
                    }
                    let Some(key) = median_key(p.range, p.stats.sketch.as_ref()) else {
                        continue;
                    };
                    let (spec, admitted) = admit(&|_| ActionSpec::Split { partition: p.id.clone(), split_key: key });
                    if declined(Policy::PeakAhead, &spec, admitted).is_err() {
                        continue;
                    }
                    busy.insert(p.id.clone());
                    self.presplits.1 += 1;
                    proposals.push(Proposal {
                        spec,
                        policy: Policy::PeakAhead,
                        mode: section.peak_ahead_mode,
                        origin: Origin::Offline,
                        reason: format!(
                            "ahead of a recurring peak: {} ops/s expected at {} ({}), {:.0} of it on this partition, {:.2} of its limit {limit:.0}; split now, {} min before",
                            f.predicted_peak_ops_per_sec.round(),
                            chrono::DateTime::<chrono::Utc>::from_timestamp_millis(f.peak_at_ms)
                                .map_or_else(String::new, |t| t.format("%H:%M UTC").to_string()),
                            seen(f),
                            predicted,
                            predicted / limit,
                            (f.peak_at_ms - now).max(0) / 60_000,
                        ),
                        trigger: Trigger {
                            partition_demand_ops_per_sec: Some(predicted),
                            partition_limit_ops_per_sec: Some(limit),
                            peak_at_ms: Some(f.peak_at_ms),
                            ..Trigger::default()
                        },
                        predicted: Prediction {
                            target_before_ratio: predicted / limit,
                            target_after_ratio: predicted / 2.0 / limit,
                            ..Prediction::default()
                        },
                        rejected_alternatives: Vec::new(),
                    });
                }
            }
        }
        // An auto proposal rests its partitions like the planner's own.
        let until = now + (config.planner.caps.cooldown_secs * 1000) as i64;
        for p in proposals.iter().filter(|p| p.mode == PolicyMode::Auto) {
            for id in crate::planner::partitions_of(&p.spec) {
                ctx.planner_state.cooldown_until_ms.insert(id.clone(), until);
            }
        }
        AnalyzerFindings { proposals, plan: None }
    }
}

fn demand(p: &crate::planner::PartitionView) -> f64 {
    p.stats.ops_per_sec + p.stats.rejected_per_sec
}

fn range_width(r: &KeyRange) -> f64 {
    r.width().max(1.0)
}

/// The key that halves the sketch's ops (interpolated in the crossing bucket), or the middle of
/// the range without one; `None` when the range holds one key.
pub fn median_key(range: KeyRange, sketch: Option<&KeySketch>) -> Option<Key> {
    if range.start >= range.end {
        return None;
    }
    if let Some((key, _)) = sketch.and_then(|s| crate::planner::split_key(range, s, 0.5)) {
        return Some(key);
    }
    let offset = range.width() / 2.0;
    Some(Key(range.start.0.saturating_add(offset as u64).clamp(range.start.0 + 1, range.end.0)))
}

#[cfg(test)]
mod tests {
    use lb_common::protocol::{Capacity, Health, OfflineMerge};

    use super::*;
    use crate::planner::{PartitionView, PartitionWindow, WorkerView, WorkerWindow};

    /// Ten cold neighbours on one worker of 10,000 ops/s, and an offline pass that found the
    /// five pairs among them to merge.
    fn cold_table() -> (PlannerInput, Findings) {
        let w0: lb_common::ids::WorkerId = "w0".parse().expect("id");
        let input = PlannerInput {
            workers: vec![WorkerView {
                id: w0.clone(),
                capacity: Capacity { ops_per_sec: 10_000.0, bytes_per_sec: 1e12 },
                cpu_cores: 0.0,
                group: None,
                health: Health::Healthy,
                zone: None,
                load: WorkerWindow { ops_per_sec: 100.0, ..Default::default() },
            }],
            partitions: (0..10u64)
                .map(|i| PartitionView {
                    id: format!("p{i}").parse().expect("id"),
                    tenant: "t".parse().expect("id"),
                    table: "x".parse().expect("id"),
                    range: KeyRange { start: Key(i * 100), end: Key(i * 100 + 99) },
                    owner: w0.clone(),
                    group: None,
                    stored_bytes: 0,
                    limit: Some(Capacity { ops_per_sec: 1_000.0, bytes_per_sec: 1e12 }),
                    supported_actions: ActionKind::ALL.to_vec(),
                    stats: PartitionWindow { ops_per_sec: 10.0, ..Default::default() },
                })
                .collect(),
            in_flight: Vec::new(),
            new_group_dedicates_owner: false,
            multi_way_split: false,
            layout: None,
            move_rate_limit: false,
            merge_to_worker: false,
        };
        let merges = (0..5)
            .map(|k| OfflineMerge {
                tenant: "t".parse().expect("id"),
                table: "x".parse().expect("id"),
                left: format!("p{}", 2 * k).parse().expect("id"),
                right: format!("p{}", 2 * k + 1).parse().expect("id"),
                combined_peak_ops_per_sec: 20.0,
                limit_ops_per_sec: 1_000.0,
                hours_judged: 168,
                periodic: false,
                to_worker: w0.clone(),
                reason: "cold".into(),
            })
            .collect();
        (input, Findings { at_ms: 1, merges, ..Default::default() })
    }

    /// The analysis names the cooler of the two workers; the proposal says so when the merged
    /// partition lands on the other.
    #[test]
    fn a_merge_says_where_the_merged_partition_lands() {
        let (_, found) = cold_table();
        let m = found.merges[0].clone();
        let other: WorkerId = "w-right".parse().expect("id");
        let cooler = Landing::Chosen(MergeLanding::Cooler);
        assert_eq!(merge_reason(&m, &m.to_worker, cooler), "cold");
        assert_eq!(
            merge_reason(&m, &other, cooler),
            "cold; the merged partition lands on w-right: the pair ends cooler there now"
        );
        assert_eq!(
            merge_reason(&m, &other, Landing::Chosen(MergeLanding::FewerBytes)),
            "cold; the merged partition lands on w-right: the pair ends about as balanced either way, and the smaller side streams"
        );
        assert_eq!(
            merge_reason(&m, &other, Landing::OtherFull),
            "cold; the merged partition lands on w-right: the other owner has no room for it"
        );
        assert_eq!(
            merge_reason(&m, &other, Landing::LeftOnly),
            "cold; the merged partition lands on w-right: the left side's owner (the storage system does not place merges)"
        );
    }

    /// A pair across two workers merges where the pair ends cooler, carrying the other side
    /// there; where that is a wash, streaming the smaller side; onto the other owner when the
    /// first has no room; and on the left's owner where the storage does not place merges.
    #[test]
    fn a_merge_lands_where_the_pair_ends_cooler_or_the_smaller_side_streams() {
        let (mut input, mut found) = cold_table();
        let w1: WorkerId = "w1".parse().expect("id");
        let mut second = input.workers[0].clone();
        second.id = w1.clone();
        input.workers.push(second);
        input.partitions[1].owner = w1.clone();
        input.merge_to_worker = true;
        found.merges.truncate(1);
        let propose = |input: &PlannerInput| {
            let slot = FindingsSlot::fed();
            slot.publish(found.clone());
            let mut analyzer = OfflineAnalyzer::new(slot);
            let mut config = OnlineConfig::default();
            config.offline.merge_mode = PolicyMode::Auto;
            let mut state = PlannerState::default();
            let mut ctx = AnalysisContext {
                input,
                datasets: &[],
                dataset_usage: &[],
                window_end_ms: 1_000,
                planner_state: &mut state,
                now_ms: 1_000,
                earlier: Vec::new(),
            };
            let mut proposals = analyzer.analyze(&mut ctx, &config).proposals;
            assert_eq!(proposals.len(), 1, "{proposals:?}");
            let p = proposals.remove(0);
            let ActionSpec::Merge { to_worker, .. } = &p.spec else { panic!("a merge: {:?}", p.spec) };
            (to_worker.as_ref().map(|w| w.to_string()), p.reason)
        };
        let set = |input: &mut PlannerInput, w: [f64; 2], p: [f64; 2], gib: [u64; 2]| {
            for i in 0..2 {
                input.workers[i].load.ops_per_sec = w[i];
                input.partitions[i].stats.ops_per_sec = p[i];
                input.partitions[i].stored_bytes = gib[i] << 30;
            }
        };
        // w0 at 0.30 carrying p0 (250 ops/s), w1 at 0.05 with p1 (20): on w1 the busier of the
        // two ends at 0.275, on w0 at 0.302. p0 streams to w1.
        set(&mut input, [3_000.0, 500.0], [250.0, 20.0], [1, 1]);
        assert_eq!(
            propose(&input),
            (
                Some("w1".to_owned()),
                "cold; the merged partition lands on w1: the pair ends cooler there now".to_owned()
            )
        );
        // Both at 0.30, p0 10 ops/s of 2 GiB, p1 20 of 1 GiB: a wash; the smaller p1 streams.
        set(&mut input, [3_000.0, 3_000.0], [10.0, 20.0], [2, 1]);
        let (to, why) = propose(&input);
        assert_eq!(to, None, "onto w0, the left's owner: {why}");
        assert!(why.ends_with("the smaller side streams"), "{why}");
        // Both at 0.845: p1 (60 ops/s, 1 GiB) onto w0 would pass the 0.85 watermark; p0 (40, 2
        // GiB) onto w1 does not.
        set(&mut input, [8_450.0, 8_450.0], [40.0, 60.0], [2, 1]);
        assert_eq!(
            propose(&input),
            (
                Some("w1".to_owned()),
                "cold; the merged partition lands on w1: the other owner has no room for it".to_owned()
            )
        );
        // A storage system that does not place merges keeps the merged partition on the left's.
        input.merge_to_worker = false;
        set(&mut input, [3_000.0, 500.0], [250.0, 20.0], [1, 1]);
        // (The analysis named w0 as the cooler, so the reason is the analysis's own.)
        assert_eq!(propose(&input), (None, "cold".to_owned()));
    }

    #[test]
    fn merges_over_the_pass_cap_wait_for_the_next_pass_and_share_it_with_the_planner() {
        let (input, found) = cold_table();
        let slot = FindingsSlot::fed();
        slot.publish(found);
        let mut analyzer = OfflineAnalyzer::new(slot);
        let mut config = OnlineConfig::default();
        config.offline.merge_mode = PolicyMode::Auto;
        config.planner.caps.max_actions_per_pass = 2;
        config.planner.caps.max_inflight_per_worker = 100;
        let mut state = PlannerState::default();
        let mut pass = |earlier: Vec<ActionSpec>, now_ms: i64| -> Vec<String> {
            let mut ctx = AnalysisContext {
                input: &input,
                datasets: &[],
                dataset_usage: &[],
                window_end_ms: now_ms,
                planner_state: &mut state,
                now_ms,
                earlier,
            };
            let found = analyzer.analyze(&mut ctx, &config);
            found
                .proposals
                .iter()
                .map(|p| match &p.spec {
                    ActionSpec::Merge { left, .. } => left.to_string(),
                    other => panic!("a merge expected: {other:?}"),
                })
                .collect()
        };
        // The planner took one of the pass's two actions: one merge now, the others wait. It
        // splits p1, so the first pair is not merged in the same pass.
        let planned = ActionSpec::Split { partition: "p1".parse().expect("id"), split_key: Key(150) };
        assert_eq!(pass(vec![planned], 1_000), ["p2"]);
        // The next passes propose the ones that waited (the proposed one is not repeated).
        assert_eq!(pass(Vec::new(), 2_000), ["p4", "p6"]);
        assert_eq!(pass(Vec::new(), 3_000), ["p8"]);
        assert!(pass(Vec::new(), 4_000).is_empty(), "all but the split's pair proposed, none twice");
    }

    #[test]
    fn the_median_key_follows_the_sketch_and_stays_inside_the_range() {
        let r = KeyRange { start: Key(0), end: Key(999) };
        assert_eq!(median_key(r, None), Some(Key(500)));
        // All ops in the last quarter: the median is in its middle.
        let late = KeySketch {
            bucket_ops: vec![0, 0, 0, 100],
            bucket_bounds: Vec::new(),
            top_keys: Vec::new(),
            sequential_write_ratio: 0.0,
        };
        assert_eq!(median_key(r, Some(&late)), Some(Key(875)));
        assert_eq!(median_key(KeyRange { start: Key(7), end: Key(7) }, None), None);
        assert_eq!(median_key(KeyRange { start: Key(7), end: Key(8) }, None), Some(Key(8)));
    }

    #[test]
    fn bad_offline_values_name_their_field() {
        let bad = OfflineSection {
            merge_max_ratio: 1.5,
            lookback_hours: 24 * 40,
            min_history_hours: 0,
            presplit_ratio: 0.5,
            report_imbalance_ratio: 0.9,
            report_chronic_share: 1.0,
            ..OfflineSection::default()
        };
        let mut v = lb_common::validate::Validator::new();
        bad.validate_into(&mut v.at("offline"));
        let err = v.finish().expect_err("invalid").to_string();
        for field in [
            "offline.merge_max_ratio",
            "offline.lookback_hours",
            "offline.min_history_hours",
            "offline.presplit_ratio",
            "offline.report_imbalance_ratio",
            "offline.report_chronic_share",
        ] {
            assert!(err.contains(field), "{field} in {err}");
        }
        let mut v = lb_common::validate::Validator::new();
        OfflineSection::default().validate_into(&mut v.at("offline"));
        v.finish().expect("the defaults are valid");
    }
}
