//! The offline analyzer in virtual time: the `lb+offline` strategy and the multi-day report
//! that sets it against online-only `lb` in the same run.
//!
//! **`lb+offline`** is the `lb` strategy (the master's online core, same step) with the offline
//! analyzer's findings slot filled: every simulated second it folds the planner input's
//! per-partition figures into the hour's rollups (per worker, as an agent would); at each hour
//! boundary it appends the finished hour to a real archive (Parquet, `date=…/` directories in a
//! temporary directory), asks the core for its layout, and at the next second runs one offline
//! pass ([`lb_master::offline::pass`], the same function the master runs) synchronously — in virtual
//! time nothing waits on a wall clock. The core turns the findings into proposals of origin
//! `offline`, under the same modes, caps and evaluation as the online ones.
//!
//! **The report** ([`report`]): partitions over time (hourly), merges and pre-splits, and the
//! rejected ops in each peak window (each surge in the timeline) for every strategy.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lb_common::ids::{KeyRange, PartitionId, TableId, TenantId, WorkerId};
use lb_common::protocol::{ActionKind, HourlyRollup, Policy};
use lb_master::evaluation::Evaluation;
use lb_master::offline::{Archive, FindingsSlot, HOUR_MS, OfflineSection};
use lb_master::online::OnlineConfig;
use lb_master::planner::{PartitionView, PlannerInput, PlannerState};
use lb_testbed::scenario::{Event, Scenario};

use super::report::{Comparison, Figures, Run, onsets};
use super::strategy::{Context, Decision, HandoverBytes, Lb, Proposed, Strategy};
use super::{Outcome, Sim};

/// The strategy's name in `--strategies`.
pub const NAME: &str = "lb+offline";
/// A baseline: the same core and archive with merges judged the way PD judges them (the last
/// hour's load, an hour after a split, no notion of periodic load) and no peaks ahead.
pub const PD_MERGE: &str = "lb+pd-merge";
/// [`PD_MERGE`] with lb's peaks ahead on: what peaks ahead alone is worth where a merger takes
/// a periodic table's pieces away in its trough.
pub const PD_MERGE_AHEAD: &str = "lb+pd-merge+ahead";
/// Every strategy with the offline analyzer.
pub const NAMES: [&str; 3] = [NAME, PD_MERGE, PD_MERGE_AHEAD];

/// One partition's hour on one worker, being folded.
#[derive(Debug, Clone)]
struct HourAcc {
    tenant: TenantId,
    table: TableId,
    range: KeyRange,
    samples: u32,
    ops: f64,
    rejected: f64,
    peak: f64,
}

/// The hour's rows being folded, one per (worker, partition). A partition's row is found by
/// its position in the planner's input while the layout stands (checked by id and owner: the
/// input is kept in place between layout changes), else by its key; at 100,000 partitions a
/// keyed lookup every second was half of an `lb+offline` run's time.
#[derive(Debug, Default)]
struct HourRows {
    rows: Vec<(WorkerId, PartitionId, HourAcc)>,
    index: HashMap<(WorkerId, PartitionId), usize>,
    /// Input position -> row (`usize::MAX`: none yet).
    slots: Vec<usize>,
}

impl HourRows {
    fn row(&mut self, i: usize, p: &PartitionView) -> &mut HourAcc {
        let rows = &self.rows;
        let hit =
            self.slots.get(i).copied().filter(|&r| rows.get(r).is_some_and(|(w, id, _)| *id == p.id && *w == p.owner));
        let r = match hit {
            Some(r) => r,
            None => {
                let rows = &mut self.rows;
                let r = *self.index.entry((p.owner.clone(), p.id.clone())).or_insert_with(|| {
                    rows.push((
                        p.owner.clone(),
                        p.id.clone(),
                        HourAcc {
                            tenant: p.tenant.clone(),
                            table: p.table.clone(),
                            range: p.range,
                            samples: 0,
                            ops: 0.0,
                            rejected: 0.0,
                            peak: 0.0,
                        },
                    ));
                    rows.len() - 1
                });
                if self.slots.len() <= i {
                    self.slots.resize(i + 1, usize::MAX);
                }
                self.slots[i] = r;
                r
            }
        };
        &mut self.rows[r].2
    }

    /// The hour's rows in (worker, partition) order; empties the fold.
    fn take(&mut self) -> Vec<(WorkerId, PartitionId, HourAcc)> {
        self.index.clear();
        self.slots.clear();
        let mut rows = std::mem::take(&mut self.rows);
        rows.sort_unstable_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        rows
    }
}

/// A run's offline passes, shared between its strategy and the report.
pub type PassLogs = Arc<Mutex<Vec<PassLog>>>;

/// One offline pass of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct PassLog {
    pub at_secs: u64,
    pub merges: usize,
    pub peaks: usize,
    pub partial: bool,
    pub wall: Duration,
}

/// `lb` with the offline analyzer fed from virtual time; see the module doc.
#[derive(Debug)]
pub struct LbOffline {
    name: &'static str,
    inner: Lb,
    slot: FindingsSlot,
    archive: Archive,
    dir: PathBuf,
    section: OfflineSection,
    hour: Option<i64>,
    acc: HourRows,
    pass_due: bool,
    start_ms: Option<i64>,
    passes: PassLogs,
}

impl LbOffline {
    /// `section` is the master's `[offline]` as the run uses it.
    pub fn new(section: OfflineSection) -> Self {
        Self::named(NAME, OnlineConfig { offline: section, ..OnlineConfig::default() })
    }

    /// The strategy of [`NAMES`] named `name`: `lb+offline` under `config` (its `offline` the
    /// run's `[offline]`), the PD-like baselines on `config`'s other sections.
    pub fn by_name(name: &str, config: &OnlineConfig) -> Option<Self> {
        match name {
            NAME => Some(Self::named(NAME, config.clone())),
            PD_MERGE => {
                Some(Self::named(PD_MERGE, OnlineConfig { offline: Self::pd_merge_section(), ..config.clone() }))
            }
            PD_MERGE_AHEAD => Some(Self::named(
                PD_MERGE_AHEAD,
                OnlineConfig { offline: Self::pd_merges(config.offline.clone()), ..config.clone() },
            )),
            _ => None,
        }
    }

    /// The PD-like baseline ([`PD_MERGE`]): PD's merges on the master's defaults, no peaks ahead.
    pub fn pd_merge() -> Self {
        Self::by_name(PD_MERGE, &OnlineConfig::default()).expect("one of NAMES")
    }

    /// [`PD_MERGE_AHEAD`]: PD's merges on `section`, whose peaks ahead stay as they are (their
    /// recurrences are counted over the profile's two weeks, not the merges' one-hour look-back).
    pub fn pd_merge_ahead(section: &OfflineSection) -> Self {
        Self::by_name(PD_MERGE_AHEAD, &OnlineConfig { offline: section.clone(), ..OnlineConfig::default() })
            .expect("one of NAMES")
    }

    /// [`PD_MERGE`]'s `[offline]`: PD's merges on the master's defaults, peaks ahead off.
    fn pd_merge_section() -> OfflineSection {
        let base = OfflineSection { peak_ahead_mode: lb_master::planner::PolicyMode::Off, ..OfflineSection::default() };
        Self::pd_merges(base)
    }

    /// `base` with merges judged as PD judges them: the last hour's load, an hour after a
    /// split, no table ever periodic, PD's larger batches.
    fn pd_merges(base: OfflineSection) -> OfflineSection {
        OfflineSection {
            lookback_hours: 1,
            min_history_hours: 1,
            allow_partial_lookback: true,
            merge_min_age_secs: 3600,
            // No table is ever periodic.
            periodic_ratio: f64::MAX,
            max_merges_per_pass: 64,
            max_merges_per_table: 16,
            ..base
        }
    }

    /// `lb` with the offline analyzer under `config`, its findings slot fed by this strategy.
    fn named(name: &'static str, config: OnlineConfig) -> Self {
        static RUN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("lb-sim-archive-{}-{n}", std::process::id()));
        let slot = FindingsSlot::fed();
        let analyzers = lb_master::online::analyzer::registered_with(&config, slot.clone());
        let section = config.offline.clone();
        Self {
            name,
            inner: Lb::with_analyzers(config, analyzers),
            slot,
            archive: Archive::new(dir.join("archive")),
            dir,
            section,
            hour: None,
            acc: HourRows::default(),
            pass_due: false,
            start_ms: None,
            passes: Default::default(),
        }
    }

    /// The run's offline passes (shared: the report reads it after the strategy moved into
    /// its simulator).
    pub fn passes(&self) -> PassLogs {
        Arc::clone(&self.passes)
    }

    /// The simulator's default: the master's `[offline]` except that a run starts with no
    /// history, so a pass may judge a look-back the archive does not wholly hold yet (never less
    /// than `min_history_hours`), and the look-back is a day (a run lasts days, not weeks).
    pub fn sim_section() -> OfflineSection {
        OfflineSection {
            lookback_hours: 24,
            min_history_hours: 24,
            allow_partial_lookback: true,
            periodic_min_peaks: 1,
            ..OfflineSection::default()
        }
    }

    /// The master's defaults with [`LbOffline::sim_section`]: what a scenario's `[master]` is
    /// laid over for the offline strategies.
    pub fn sim_config() -> OnlineConfig {
        OnlineConfig { offline: Self::sim_section(), ..OnlineConfig::default() }
    }

    pub fn archive(&self) -> &Archive {
        &self.archive
    }

    fn fold(&mut self, input: &PlannerInput, now_ms: i64) {
        let hour = now_ms.div_euclid(HOUR_MS) * HOUR_MS;
        if let Some(prev) = self.hour.filter(|&h| h != hour) {
            self.flush(prev);
            self.slot.request_layout();
            self.pass_due = true;
        }
        self.hour = Some(hour);
        for (i, p) in input.partitions.iter().enumerate() {
            let a = self.acc.row(i, p);
            // A split that keeps the id shrinks the range: the hour's row is the newest range's.
            a.range = p.range;
            a.samples += 1;
            a.ops += p.stats.ops_per_sec;
            a.rejected += p.stats.rejected_per_sec;
            a.peak = a.peak.max(p.stats.ops_per_sec);
        }
    }

    fn flush(&mut self, hour_start_ms: i64) {
        let mut by_worker: BTreeMap<WorkerId, Vec<HourlyRollup>> = BTreeMap::new();
        for (worker, id, a) in self.acc.take() {
            by_worker.entry(worker).or_default().push(HourlyRollup {
                hour_start_ms,
                tenant: a.tenant,
                table: a.table,
                partition_id: id,
                key_range: a.range,
                sample_count: a.samples,
                read_ops: a.ops.round() as u64,
                write_ops: 0,
                read_bytes: 0,
                write_bytes: 0,
                errors: 0,
                rejected: a.rejected.round() as u64,
                cpu_time_us: 0,
                max_ops_per_sec: a.peak,
                max_latency_p99_us: 0.0,
                stored_bytes: 0,
            });
        }
        for (worker, rows) in by_worker {
            if let Err(error) = self.archive.append(worker.as_str(), &rows) {
                tracing::warn!(%error, "sim archive not written");
            }
        }
    }

    fn run_pass(&mut self) {
        let Some((at_ms, layout)) = self.slot.layout() else { return };
        self.pass_due = false;
        let started = Instant::now();
        match lb_master::offline::pass(&self.archive, &layout, &self.section, at_ms, &[]) {
            Ok(found) => {
                let start = self.start_ms.unwrap_or(at_ms);
                self.passes.lock().unwrap_or_else(|e| e.into_inner()).push(PassLog {
                    at_secs: ((at_ms - start) / 1000) as u64,
                    merges: found.merges.len(),
                    peaks: found.peaks.len(),
                    partial: !found.coverage.partial.is_empty(),
                    wall: started.elapsed(),
                });
                self.slot.publish(found);
            }
            Err(error) => tracing::warn!(%error, "sim offline pass failed"),
        }
    }
}

impl Drop for LbOffline {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Strategy for LbOffline {
    fn name(&self) -> &str {
        self.name
    }

    fn needs_input(&self) -> bool {
        true
    }

    fn decide(&mut self, ctx: &mut Context<'_>) -> Decision {
        self.start_ms.get_or_insert(ctx.now_ms);
        if self.pass_due {
            self.run_pass();
        }
        if let Some(input) = ctx.input.as_deref() {
            self.fold(input, ctx.now_ms);
        }
        self.inner.decide(ctx)
    }

    fn submitted(
        &mut self,
        id: &lb_common::ids::ActionId,
        action: &Proposed,
        input: Option<&PlannerInput>,
        now_ms: i64,
    ) {
        self.inner.submitted(id, action, input, now_ms);
    }

    fn refused(&mut self, id: &lb_common::ids::ActionId) {
        self.inner.refused(id);
    }

    fn finished(&mut self, id: &lb_common::ids::ActionId, applied: bool, at_ms: i64) {
        self.inner.finished(id, applied, at_ms);
    }

    fn handover_bytes_max(&self) -> Option<HandoverBytes> {
        self.inner.handover_bytes_max()
    }

    fn evaluations(&self) -> &[Evaluation] {
        self.inner.evaluations()
    }

    fn planner_state(&self) -> Option<&PlannerState> {
        self.inner.planner_state()
    }
}

/// One strategy's multi-day figures.
#[derive(Debug, Clone, PartialEq)]
pub struct DayRun {
    pub strategy: String,
    /// Partitions at each whole hour (index = hour).
    pub partitions_hourly: Vec<usize>,
    pub merges: usize,
    /// Splits of the peak-ahead policy (offline), and every split.
    pub presplits: usize,
    pub splits: usize,
    /// Rejected ops inside each peak window.
    pub rejected_at_peaks: Vec<f64>,
    /// Rejected ops while a merged partition was the one rejecting: merges that hurt.
    pub merge_failures: usize,
    pub offline_passes: usize,
    pub offline_pass_wall_max: Duration,
}

/// The peak windows of a scenario: each surge in its timeline, `[at, at + duration)`.
pub fn peak_windows(scenario: &Scenario) -> Vec<(u64, u64)> {
    scenario
        .timeline
        .iter()
        .filter_map(|e| match &e.event {
            Event::Surge { duration_secs, .. } => Some((e.at_secs, e.at_secs + duration_secs)),
            _ => None,
        })
        .collect()
}

/// Every strategy's run and the multi-day figures.
#[derive(Debug)]
pub struct Report {
    pub comparison: Comparison,
    pub days: Vec<DayRun>,
    pub peaks: Vec<(u64, u64)>,
}

/// Runs `strategies` (as [`super::report::compare`] does, each `lb` under the scenario's
/// `[master]`, the offline ones over [`LbOffline::sim_section`], every run's safety violations
/// judged against a no-balancer run made even when not asked for) and gathers the multi-day
/// figures.
pub fn report(
    scenario: &Scenario,
    strategies: &[String],
    duration_secs: u64,
    threads: usize,
) -> Result<Report, super::report::CompareError> {
    let config = super::policies::online_config(scenario, LbOffline::sim_config())
        .map_err(super::report::CompareError::Policies)?;
    let mut built: Vec<(Box<dyn Strategy>, Option<PassLogs>)> = Vec::new();
    for name in strategies {
        if let Some(s) = LbOffline::by_name(name, &config) {
            let passes = s.passes();
            built.push((Box::new(s), Some(passes)));
        } else {
            built.push((super::strategy::by_name(name, scenario)?, None));
        }
    }
    if built.is_empty() {
        return Err(super::report::CompareError::NoStrategy);
    }
    // The safety check's baseline: no balancer, run even when not asked for (and then not shown).
    let shown = built.len();
    if !strategies.iter().any(|s| s == super::report::BASELINE) {
        built.push((super::strategy::by_name(super::report::BASELINE, scenario)?, None));
    }
    let peaks = peak_windows(scenario);
    let onsets = onsets(scenario, duration_secs);
    let started = Instant::now();
    type Slot = Mutex<Option<(Box<dyn Strategy>, Option<PassLogs>)>>;
    let slots: Vec<Slot> = built.into_iter().map(|s| Mutex::new(Some(s))).collect();
    let results: Vec<Mutex<Option<(Run, DayRun)>>> = slots.iter().map(|_| Default::default()).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..threads.clamp(1, slots.len()) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(slot) = slots.get(i) else { break };
                    let Some((strategy, passes)) = slot.lock().expect("no panics while held").take() else {
                        continue;
                    };
                    let out = run_one(scenario, strategy, passes, duration_secs, &peaks, &onsets);
                    *results[i].lock().expect("no panics while held") = Some(out);
                }
            });
        }
    });
    let (mut runs, mut days): (Vec<Run>, Vec<DayRun>) =
        results.into_iter().filter_map(|r| r.into_inner().expect("no panics while held")).unzip();
    super::report::judge_against_baseline(&mut runs);
    runs.truncate(shown);
    days.truncate(shown);
    let comparison = Comparison {
        scenario: scenario.name.clone(),
        partitions: scenario.tables.iter().map(|t| t.partitions as usize).sum(),
        workers: scenario.cluster.workers as usize,
        duration_secs,
        onsets,
        runs,
        zones: scenario.cluster.zones.len(),
        wall: started.elapsed(),
    };
    Ok(Report { comparison, days, peaks })
}

fn run_one(
    scenario: &Scenario,
    strategy: Box<dyn Strategy>,
    passes: Option<PassLogs>,
    duration_secs: u64,
    peaks: &[(u64, u64)],
    onsets: &[super::report::Onset],
) -> (Run, DayRun) {
    let started = Instant::now();
    let mut sim = Sim::new(scenario, strategy);
    let mut partitions_hourly = vec![sim.engine.cluster.partitions.len()];
    let mut rejected_at_peaks = vec![0.0; peaks.len()];
    while (sim.engine.t_secs() as u64) < duration_secs {
        sim.tick();
        let t = sim.engine.t_secs() as u64;
        if t.is_multiple_of(3600) {
            partitions_hourly.push(sim.engine.cluster.partitions.len());
        }
        if let Some(tick) = sim.ticks.last() {
            for (i, &(from, to)) in peaks.iter().enumerate() {
                if (from..to).contains(&tick.t_secs) {
                    rejected_at_peaks[i] += tick.rejected;
                }
            }
        }
    }
    let succeeded = |a: &&super::ActionRecord| matches!(a.outcome, Outcome::Succeeded { .. });
    let merges = sim.actions.iter().filter(succeeded).filter(|a| a.spec.kind() == ActionKind::Merge).count();
    let splits = sim.actions.iter().filter(succeeded).filter(|a| a.spec.kind() == ActionKind::Split).count();
    let presplits = sim
        .actions
        .iter()
        .filter(succeeded)
        .filter(|a| a.spec.kind() == ActionKind::Split && a.reason.starts_with("ahead of a recurring peak"))
        .count();
    let merge_failures = sim
        .evaluations()
        .iter()
        .filter(|e| e.policy == Some(Policy::Merge) && e.judgement.verdict == lb_master::evaluation::Verdict::Harmful)
        .count();
    let (offline_passes, offline_pass_wall_max) = passes.map_or((0, Duration::ZERO), |p| {
        let p = p.lock().unwrap_or_else(|e| e.into_inner());
        (p.len(), p.iter().map(|p| p.wall).max().unwrap_or_default())
    });
    let day = DayRun {
        strategy: sim.strategy_name().to_owned(),
        partitions_hourly,
        merges,
        presplits,
        splits,
        rejected_at_peaks,
        merge_failures,
        offline_passes,
        offline_pass_wall_max,
    };
    let figures = Figures::of(&sim, onsets);
    let run = Run::take(&mut sim, figures, started.elapsed());
    (run, day)
}

impl Report {
    /// The multi-day table: per strategy, merges, splits (pre-splits), partitions at start,
    /// peak and end, and rejected ops in each peak window; then partitions every 6 hours.
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "\n### Online only against online + offline\n");
        s.push_str("| strategy | merges | splits (ahead of a peak) | partitions start / max / end | harmful merges | offline passes (slowest) |");
        for (i, (from, to)) in self.peaks.iter().enumerate() {
            let _ = write!(s, " rejected at peak {} ({}–{} h) |", i + 1, from / 3600, to.div_ceil(3600));
        }
        s.push_str("\n|---|---:|---:|---|---:|---:|");
        s.push_str(&"---:|".repeat(self.peaks.len()));
        s.push('\n');
        for d in &self.days {
            let start = d.partitions_hourly.first().copied().unwrap_or(0);
            let max = d.partitions_hourly.iter().copied().max().unwrap_or(0);
            let end = d.partitions_hourly.last().copied().unwrap_or(0);
            let _ = write!(
                s,
                "| {} | {} | {} ({}) | {start} / {max} / {end} | {} | {} ({:.2} s) |",
                d.strategy,
                d.merges,
                d.splits,
                d.presplits,
                d.merge_failures,
                d.offline_passes,
                d.offline_pass_wall_max.as_secs_f64()
            );
            for r in &d.rejected_at_peaks {
                let _ = write!(s, " {r:.0} |");
            }
            s.push('\n');
        }
        let _ = writeln!(s, "\nPartitions every 6 simulated hours:\n");
        for d in &self.days {
            let every: Vec<String> = d.partitions_hourly.iter().step_by(6).map(|n| n.to_string()).collect();
            let _ = writeln!(s, "- {}: {}", d.strategy, every.join(" → "));
        }
        s
    }
}
