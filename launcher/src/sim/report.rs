//! Strategies side by side: each runs the same scenario (same seed, same workload, its own
//! engine), and the per-second records become the figures of the comparison.
//!
//! - **Onsets**: the scenario's start, every workload component that starts later (a hot range
//!   ramping up), and every timeline event that changes load or capacity (surge, worker lost or
//!   added, dataset rate). Each opens a window that ends at the next onset or the end of the run.
//! - **Time to relief** of an onset: from the onset to the first second from which, until the
//!   window ends, rejections stay under [`RELIEF_REJECTED_RATIO`] of demand and no worker's demand
//!   is over its capacity. "never hot" when that held throughout; "not relieved" when it does not
//!   hold at the window's end.
//! - **Rejected**: the sum of rejected ops over the run, and its share of the demand.
//! - **Balance**: max/mean of the healthy workers' demand ratios and their CV, at the end, p50
//!   and p99 over the run's seconds.
//! - **Actions** by kind (accepted by the engine) and **bytes moved** by actions that succeeded.
//! - **Thrash** ([`thrash`]): actions that undid one of the run's own within
//!   [`THRASH_WINDOW_SECS`] — a move of a partition back to a worker it left, a merge at a key a
//!   split cut.
//! - **Cut again** ([`recuts`]): splits inside a band the run had cut in one step.
//! - **Safety violations** ([`super::safety`]): seconds where an action of the strategy put a
//!   worker or a group over both its capacity and what no balancer had there. A `none` run is
//!   always made for this baseline (shown only when asked for).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lb_common::protocol::{ActionKind, Proposal};
use serde::Serialize;

use super::safety::{self, Violation};
use super::strategy::{self, Strategy};
use super::{ActionRecord, Outcome, PhaseTimes, Sim, Tick};
use lb_common::ids::WorkerId;
use lb_testbed::scenario::{Event, Scenario, WorkloadKind};

/// Rejections under 1 % of demand count as relieved: the definition of a fixed hotspot.
pub const RELIEF_REJECTED_RATIO: f64 = 0.01;
/// An action undoing one of the same run's within 10 min counts as thrash (issue 24): long
/// enough to catch a cooldown-driven round trip, short against a daily cycle.
pub const THRASH_WINDOW_SECS: u64 = 600;

/// Succeeded actions that undid a succeeded action of the same run at most
/// [`THRASH_WINDOW_SECS`] after it ended: a move of a partition to a worker it had left (a move
/// away from it, or a split piece sent from it), or a merge at a key a split had cut.
pub fn thrash(actions: &[ActionRecord]) -> usize {
    use lb_common::ids::{Key, PartitionId};
    use lb_common::protocol::ActionSpec;
    let ended = |a: &ActionRecord| match a.outcome {
        Outcome::Succeeded { at_secs } => Some(at_secs),
        _ => None,
    };
    let mut left: BTreeMap<&PartitionId, Vec<(u64, u32)>> = BTreeMap::new();
    // Each key's latest cut.
    let mut cut: BTreeMap<Key, u64> = BTreeMap::new();
    let mut undone = 0;
    // Submission order is time order; an undo is submitted after what it undoes ended.
    for a in actions {
        let Some(at) = ended(a) else { continue };
        match &a.spec {
            ActionSpec::Move { partition, .. } => {
                let back = a.landed_on.first().is_some_and(|&to| {
                    left.get(partition).is_some_and(|v| {
                        v.iter().any(|&(t, from)| from == to && t <= a.t_secs && a.t_secs - t <= THRASH_WINDOW_SECS)
                    })
                });
                undone += usize::from(back);
                if let Some(from) = a.source {
                    left.entry(partition).or_default().push((at, from));
                }
            }
            ActionSpec::Merge { .. } => {
                let rejoined = a
                    .keys
                    .iter()
                    .any(|k| cut.get(k).is_some_and(|&t| t <= a.t_secs && a.t_secs - t <= THRASH_WINDOW_SECS));
                undone += usize::from(rejoined);
            }
            ActionSpec::Split { .. } | ActionSpec::SplitInto { .. } => {
                for k in &a.keys {
                    cut.insert(*k, at);
                }
            }
            _ => {}
        }
    }
    undone
}

/// Split actions that cut a table inside the span of a multi-way cut (`split_into`) the run
/// made of it before, between that cut's first and last key: a hot range cut in one step is
/// never cut again (issue 25; a piece outside the band, such as the part before its first key
/// that keeps the partition's id, may be cut later as its load grows).
pub fn recuts(actions: &[ActionRecord]) -> usize {
    use lb_common::ids::Key;
    use lb_common::protocol::ActionSpec;
    let table = |spec: &ActionSpec| {
        let p = match spec {
            ActionSpec::Split { partition, .. } | ActionSpec::SplitInto { partition, .. } => partition.as_str(),
            _ => "",
        };
        p.rsplit_once('.').map_or(p, |(t, _)| t).to_owned()
    };
    let mut spans: BTreeMap<String, Vec<(Key, Key)>> = BTreeMap::new();
    let mut again = 0;
    for a in actions {
        if !matches!(a.spec, ActionSpec::Split { .. } | ActionSpec::SplitInto { .. }) {
            continue;
        }
        let t = table(&a.spec);
        let inside = spans.get(&t).is_some_and(|v| a.keys.iter().any(|k| v.iter().any(|(lo, hi)| lo <= k && k <= hi)));
        again += usize::from(inside);
        if let (ActionSpec::SplitInto { .. }, Some(lo), Some(hi)) = (&a.spec, a.keys.iter().min(), a.keys.iter().max())
            && a.keys.len() >= 2
        {
            spans.entry(t).or_default().push((*lo, *hi));
        }
    }
    again
}

/// Something that changes the load or the capacity at `at_secs`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Onset {
    pub at_secs: u64,
    pub what: String,
}

/// The onsets of `scenario` before `duration_secs`, in time order, one per second.
pub fn onsets(scenario: &Scenario, duration_secs: u64) -> Vec<Onset> {
    let mut by_time: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    by_time.entry(0).or_default().push("start".to_owned());
    for t in &scenario.tables {
        for w in t.workloads.iter().filter(|w| w.start_secs > 0) {
            let kind = match w.kind {
                WorkloadKind::Uniform {} => "uniform load",
                WorkloadKind::Zipf { .. } => "zipf load",
                WorkloadKind::HotRange { .. } => "hot range",
                WorkloadKind::HotKey { .. } => "hot key",
                WorkloadKind::SequentialAppend { .. } => "sequential append",
            };
            let what = format!("{kind} on {}.{} starts", t.tenant, t.table);
            by_time.entry(w.start_secs).or_default().push(what);
        }
    }
    for e in &scenario.timeline {
        let what = match &e.event {
            Event::Surge { tenant, table, multiplier, .. } => format!("surge {tenant}.{table} x{multiplier}"),
            Event::WorkerLost { worker } => format!("{worker} lost"),
            Event::WorkerAdded { worker, .. } => format!("{worker} added"),
            Event::DatasetRate { tenant, dataset, .. } => format!("{tenant}.{dataset} rate changes"),
            Event::Fault { .. } => continue,
        };
        by_time.entry(e.at_secs).or_default().push(what);
    }
    by_time
        .into_iter()
        .filter(|(t, _)| *t < duration_secs)
        .map(|(at_secs, mut whats)| {
            whats.dedup();
            Onset { at_secs, what: whats.join(", ") }
        })
        .collect()
}

/// How one onset's window went.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Relief {
    pub onset: Onset,
    pub window_end_secs: u64,
    /// Seconds after the onset of the first second that broke the relief condition.
    pub first_trouble_after_secs: Option<u64>,
    /// Seconds from the onset until relief held for the rest of the window.
    pub relieved_after_secs: Option<u64>,
}

impl Relief {
    pub fn describe(&self) -> String {
        match (self.first_trouble_after_secs, self.relieved_after_secs) {
            (None, _) => "never hot".to_owned(),
            (Some(first), Some(after)) => format!("{after} s (hot from +{first} s)"),
            (Some(first), None) => format!("not relieved (hot from +{first} s)"),
        }
    }
}

/// Whether a second meets the relief condition.
pub fn relieved(t: &Tick) -> bool {
    t.max_demand_ratio <= 1.0 && t.rejected_ratio() < RELIEF_REJECTED_RATIO
}

/// Time to relief of every onset over `ticks` (see the module doc).
pub fn reliefs(ticks: &[Tick], onsets: &[Onset], end_secs: u64) -> Vec<Relief> {
    onsets
        .iter()
        .enumerate()
        .map(|(i, onset)| {
            let window_end_secs = onsets.get(i + 1).map_or(end_secs, |o| o.at_secs);
            let window = ticks.iter().filter(|t| t.t_secs >= onset.at_secs && t.t_secs < window_end_secs);
            let (mut first_trouble, mut relieved_at) = (None, None);
            for t in window {
                if relieved(t) {
                    relieved_at.get_or_insert(t.t_secs);
                } else {
                    first_trouble.get_or_insert(t.t_secs - onset.at_secs);
                    relieved_at = None;
                }
            }
            Relief {
                onset: onset.clone(),
                window_end_secs,
                first_trouble_after_secs: first_trouble,
                relieved_after_secs: relieved_at.filter(|_| first_trouble.is_some()).map(|t| t - onset.at_secs),
            }
        })
        .collect()
}

/// Final, median and 99th percentile of a per-second series.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Spread {
    pub last: f64,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(values: impl Iterator<Item = f64>) -> Self {
        let mut v: Vec<f64> = values.collect();
        let Some(&last) = v.last() else { return Self::default() };
        v.sort_by(f64::total_cmp);
        let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
        Self { last, p50: at(0.5), p99: at(0.99), max: at(1.0) }
    }
}

/// One strategy's figures over a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Figures {
    pub strategy: String,
    pub seconds: u64,
    pub reliefs: Vec<Relief>,
    pub demand_ops: f64,
    pub rejected_ops: f64,
    pub max_over_mean: Spread,
    pub cv: Spread,
    pub max_demand_ratio: Spread,
    /// Accepted actions by kind (`split`, `move`, …).
    pub actions: BTreeMap<&'static str, usize>,
    pub failed_actions: usize,
    pub submit_errors: usize,
    /// Actions that undid one of the run's own within 10 min ([`thrash`]).
    pub thrash: usize,
    /// Splits inside a band the run had cut in one step ([`recuts`]).
    pub recuts: usize,
    pub bytes_moved: u64,
    /// Succeeded actions that streamed data from one zone into another, and its bytes.
    pub cross_zone_actions: usize,
    pub cross_zone_bytes: u64,
    /// The hottest zone's load over the zones' mean, per second (1 without zones).
    pub zone_max_over_mean: Spread,
    /// Against the no-balancer run of the same scenario ([`super::safety::check`]).
    pub violations: Vec<Violation>,
}

impl Figures {
    pub fn of(sim: &Sim, onsets: &[Onset]) -> Self {
        let ticks = &sim.ticks;
        let end = ticks.last().map_or(0, |t| t.t_secs + 1);
        let mut actions = BTreeMap::new();
        for a in &sim.actions {
            *actions.entry(a.spec.kind().as_str()).or_insert(0) += 1;
        }
        Self {
            strategy: sim.strategy_name().to_owned(),
            seconds: ticks.len() as u64,
            reliefs: reliefs(ticks, onsets, end),
            // Each tick is one second: ops per second sum to ops.
            demand_ops: ticks.iter().map(|t| t.demand).sum(),
            rejected_ops: ticks.iter().map(|t| t.rejected).sum(),
            max_over_mean: Spread::of(ticks.iter().map(Tick::max_over_mean)),
            cv: Spread::of(ticks.iter().map(|t| t.cv)),
            max_demand_ratio: Spread::of(ticks.iter().map(|t| t.max_demand_ratio)),
            actions,
            failed_actions: sim.actions.iter().filter(|a| matches!(a.outcome, Outcome::Failed { .. })).count(),
            submit_errors: sim.submit_errors.len(),
            thrash: thrash(&sim.actions),
            recuts: recuts(&sim.actions),
            bytes_moved: sim.bytes_moved(),
            cross_zone_actions: sim.actions.iter().filter(|a| a.cross_zone_bytes > 0).count(),
            cross_zone_bytes: sim.actions.iter().map(|a| a.cross_zone_bytes).sum(),
            zone_max_over_mean: Spread::of(ticks.iter().map(|t| t.zone_max_over_mean)),
            violations: Vec::new(),
        }
    }

    pub fn rejected_ratio(&self) -> f64 {
        if self.demand_ops > 0.0 { self.rejected_ops / self.demand_ops } else { 0.0 }
    }
}

/// One strategy's run.
#[derive(Debug, Clone)]
pub struct Run {
    pub figures: Figures,
    pub ticks: Vec<Tick>,
    pub times: PhaseTimes,
    /// Layout rebuilds of the planner input (0 for strategies that do not read it).
    pub input_rebuilds: u64,
    /// The largest leader state handed over through etcd (`lb` strategies).
    pub handover_bytes_max: Option<strategy::HandoverBytes>,
    pub wall: Duration,
    /// What the safety check reads (see [`Sim::safety_record`]).
    pub actions: Vec<ActionRecord>,
    pub group_ratios: Vec<Vec<f64>>,
    pub group_ids: Vec<String>,
    pub worker_ids: Vec<WorkerId>,
    /// The core's proposals with the second each was made (`lb` strategies; else empty).
    pub proposals: Vec<(u64, Proposal)>,
}

impl Run {
    /// Takes `sim`'s records (ticks, actions, groups) into a run.
    pub fn take(sim: &mut Sim, figures: Figures, wall: Duration) -> Self {
        Run {
            figures,
            ticks: std::mem::take(&mut sim.ticks),
            times: sim.times,
            input_rebuilds: sim.input.rebuilds,
            handover_bytes_max: sim.strategy.handover_bytes_max(),
            wall,
            actions: std::mem::take(&mut sim.actions),
            group_ratios: std::mem::take(&mut sim.group_ratios),
            group_ids: std::mem::take(&mut sim.group_ids),
            worker_ids: sim.engine.cluster.workers.ids.clone(),
            proposals: std::mem::take(&mut sim.proposals),
        }
    }

    fn safety_record(&self) -> safety::RunRecord<'_> {
        safety::RunRecord {
            ticks: &self.ticks,
            actions: &self.actions,
            group_ratios: &self.group_ratios,
            group_ids: &self.group_ids,
            worker_ids: &self.worker_ids,
        }
    }
}

/// Every strategy's run over one scenario.
#[derive(Debug, Clone)]
pub struct Comparison {
    pub scenario: String,
    pub partitions: usize,
    pub workers: usize,
    pub duration_secs: u64,
    pub onsets: Vec<Onset>,
    pub runs: Vec<Run>,
    pub wall: Duration,
    /// Zones the cluster's workers sit in (0 without zones).
    pub zones: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    #[error("unknown strategy {0:?} (known: lb, lb+offline, lb+pd-merge, lb+pd-merge+ahead, none, greedy, pd, crdb)")]
    UnknownStrategy(String),
    #[error("no strategy to run")]
    NoStrategy,
    #[error("the scenario's [master] is invalid: {0}")]
    Policies(lb_common::validate::ValidationError),
}

/// Runs `strategies` (names for [`strategy::by_name`]) over `scenario` for `duration_secs`,
/// on up to `threads` threads (one strategy per thread at a time; each run is deterministic).
pub fn compare(
    scenario: &Scenario,
    strategies: &[String],
    duration_secs: u64,
    threads: usize,
) -> Result<Comparison, CompareError> {
    let mut built: Vec<Mutex<Option<Box<dyn Strategy>>>> = Vec::new();
    for name in strategies {
        built.push(Mutex::new(Some(strategy::by_name(name, scenario)?)));
    }
    if built.is_empty() {
        return Err(CompareError::NoStrategy);
    }
    // The safety check's baseline: no balancer, run even when not asked for (and then not shown).
    let shown = built.len();
    if !strategies.iter().any(|s| s == BASELINE) {
        built.push(Mutex::new(Some(strategy::by_name(BASELINE, scenario)?)));
    }
    let onsets = onsets(scenario, duration_secs);
    let started = Instant::now();
    let next = AtomicUsize::new(0);
    let results: Vec<Mutex<Option<Run>>> = built.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..threads.clamp(1, built.len()) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(slot) = built.get(i) else { break };
                    let Some(strategy) = slot.lock().expect("no panics while held").take() else { continue };
                    let run_started = Instant::now();
                    let mut sim = Sim::new(scenario, strategy);
                    sim.run_until(duration_secs);
                    let figures = Figures::of(&sim, &onsets);
                    let run = Run::take(&mut sim, figures, run_started.elapsed());
                    *results[i].lock().expect("no panics while held") = Some(run);
                }
            });
        }
    });
    let wall = started.elapsed();
    let mut runs: Vec<Run> =
        results.into_iter().filter_map(|r| r.into_inner().expect("no panics while held")).collect();
    judge_against_baseline(&mut runs);
    runs.truncate(shown);
    Ok(Comparison {
        scenario: scenario.name.clone(),
        partitions: scenario.tables.iter().map(|t| t.partitions as usize).sum(),
        workers: scenario.cluster.workers as usize,
        duration_secs,
        onsets,
        runs,
        zones: scenario.cluster.zones.len(),
        wall,
    })
}

/// Each run's safety violations against the [`BASELINE`] run among `runs` (none without it).
pub(crate) fn judge_against_baseline(runs: &mut [Run]) {
    let Some(b) = runs.iter().position(|r| r.figures.strategy == BASELINE) else { return };
    let found: Vec<Vec<Violation>> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| if i == b { Vec::new() } else { safety::check(r.safety_record(), runs[b].safety_record()) })
        .collect();
    for (run, v) in runs.iter_mut().zip(found) {
        run.figures.violations = v;
    }
}

/// Violations listed in the markdown report (figures.json has all).
const MAX_VIOLATIONS_LISTED: usize = 20;

/// The strategy the safety invariant compares with.
pub const BASELINE: &str = "none";

const KINDS: [ActionKind; 5] =
    [ActionKind::Split, ActionKind::Move, ActionKind::Group, ActionKind::Merge, ActionKind::Reshard];

impl Comparison {
    /// The comparison as markdown: a figures table and a time-to-relief table.
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "Scenario `{}`: {} partitions (at start), {} workers, {} simulated seconds; wall time {:.1} s for all strategies.\n",
            self.scenario,
            self.partitions,
            self.workers,
            self.duration_secs,
            self.wall.as_secs_f64()
        );
        s.push_str("| strategy | rejected ops | rejected % of demand | max/mean final / p50 / p99 | CV final / p50 / p99 | worst worker p99 / max | safety violations | splits | moves | groups | merges | reshards | failed | thrash (undone ≤ 10 min) | cut again | bytes moved | wall s |\n");
        s.push_str("|---|---:|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for run in &self.runs {
            let f = &run.figures;
            let kinds: Vec<String> =
                KINDS.iter().map(|k| f.actions.get(k.as_str()).copied().unwrap_or(0).to_string()).collect();
            let _ = writeln!(
                s,
                "| {} | {:.0} | {:.3} % | {:.2} / {:.2} / {:.2} | {:.3} / {:.3} / {:.3} | {:.2} / {:.2} | {} | {} | {:.2} GiB | {:.1} |",
                f.strategy,
                f.rejected_ops,
                f.rejected_ratio() * 100.0,
                f.max_over_mean.last,
                f.max_over_mean.p50,
                f.max_over_mean.p99,
                f.cv.last,
                f.cv.p50,
                f.cv.p99,
                f.max_demand_ratio.p99,
                f.max_demand_ratio.max,
                f.violations.len(),
                kinds.join(" | ") + &format!(" | {} | {} | {}", f.failed_actions + f.submit_errors, f.thrash, f.recuts),
                f.bytes_moved as f64 / f64::from(1u32 << 30),
                run.wall.as_secs_f64()
            );
        }
        if self.zones > 0 {
            let _ = writeln!(s, "\nZones ({}): data streamed across zones, and the zones' spread:\n", self.zones);
            s.push_str(
                "| strategy | cross-zone actions | cross-zone bytes moved | zone max/mean final / p99 / max |\n",
            );
            s.push_str("|---|---:|---:|---|\n");
            for run in &self.runs {
                let f = &run.figures;
                let z = &f.zone_max_over_mean;
                let _ = writeln!(
                    s,
                    "| {} | {} | {:.2} GiB | {:.2} / {:.2} / {:.2} |",
                    f.strategy,
                    f.cross_zone_actions,
                    f.cross_zone_bytes as f64 / f64::from(1u32 << 30),
                    z.last,
                    z.p99,
                    z.max
                );
            }
        }
        let violations: Vec<String> = self
            .runs
            .iter()
            .flat_map(|r| r.figures.violations.iter().map(move |v| format!("- {}: {v}", r.figures.strategy)))
            .collect();
        if !violations.is_empty() {
            s.push_str(
                "\nSafety violations (an action put a worker or a group over its capacity and over no balancer):\n\n",
            );
            for v in violations.iter().take(MAX_VIOLATIONS_LISTED) {
                s.push_str(v);
                s.push('\n');
            }
            if violations.len() > MAX_VIOLATIONS_LISTED {
                let _ = writeln!(
                    s,
                    "- … and {} more (figures.json has them all)",
                    violations.len() - MAX_VIOLATIONS_LISTED
                );
            }
        }
        s.push_str(
            "\nTime to relief (rejections < 1 % of demand and no worker over capacity, until the next onset):\n\n",
        );
        let names: Vec<&str> = self.runs.iter().map(|r| r.figures.strategy.as_str()).collect();
        let _ = writeln!(s, "| onset | {} |", names.join(" | "));
        let _ = writeln!(s, "|---|{}", "---|".repeat(names.len()));
        for (i, onset) in self.onsets.iter().enumerate() {
            let cells: Vec<String> = self
                .runs
                .iter()
                .map(|r| r.figures.reliefs.get(i).map_or_else(|| "-".to_owned(), Relief::describe))
                .collect();
            let _ = writeln!(s, "| {} s: {} | {} |", onset.at_secs, onset.what, cells.join(" | "));
        }
        s
    }

    /// Per-phase wall time of each run (engine step, planner input, decision, recording).
    pub fn timings(&self) -> String {
        let mut s = String::new();
        for run in &self.runs {
            let t = &run.times;
            let _ = writeln!(
                s,
                "{}: {:.1} s wall (engine {:.1} s, input {:.1} s in {} rebuilds, decide {:.1} s, record {:.1} s)",
                run.figures.strategy,
                run.wall.as_secs_f64(),
                t.engine.as_secs_f64(),
                t.input.as_secs_f64(),
                run.input_rebuilds,
                t.decide.as_secs_f64(),
                t.record.as_secs_f64()
            );
            if let Some(bytes) = run.handover_bytes_max {
                let _ = writeln!(
                    s,
                    "  leader state handed over through etcd: at most {} bytes saved (zstd), from {} bytes of JSON",
                    bytes.saved, bytes.json
                );
            }
        }
        s
    }

    /// Every run's figures as JSON (for scripts and tests), with the wall times in seconds.
    pub fn figures_json(&self) -> serde_json::Value {
        let runs: Vec<serde_json::Value> = self
            .runs
            .iter()
            .map(|r| serde_json::json!({ "figures": r.figures, "rejected_ratio": r.figures.rejected_ratio(), "wall_secs": r.wall.as_secs_f64() }))
            .collect();
        serde_json::json!({
            "scenario": self.scenario,
            "partitions": self.partitions,
            "workers": self.workers,
            "duration_secs": self.duration_secs,
            "wall_secs": self.wall.as_secs_f64(),
            "runs": runs,
        })
    }

    /// Every run's proposals as JSON lines, `{"strategy", "t_secs", "proposal"}`, in the order
    /// made: what each action was, why, and what it was predicted to do.
    pub fn proposals_jsonl(&self) -> Result<String, serde_json::Error> {
        let mut out = String::new();
        for r in &self.runs {
            for (t, p) in &r.proposals {
                let line = serde_json::json!({ "strategy": r.figures.strategy, "t_secs": t, "proposal": p });
                out.push_str(&serde_json::to_string(&line)?);
                out.push('\n');
            }
        }
        Ok(out)
    }

    /// The charts: rejected % of demand, and max/mean worker load, over time; one line per
    /// strategy. File name → SVG text.
    pub fn charts(&self) -> Vec<(&'static str, String)> {
        let series = |f: fn(&Tick) -> f64| -> Vec<super::svg::Series> {
            self.runs
                .iter()
                .map(|r| super::svg::Series {
                    name: r.figures.strategy.clone(),
                    points: super::svg::downsample_max(r.ticks.iter().map(|t| (t.t_secs as f64, f(t))), 600),
                })
                .collect()
        };
        let title = |what: &str| {
            format!("{what} — {} ({} partitions, {} workers)", self.scenario, self.partitions, self.workers)
        };
        vec![
            (
                "rejected.svg",
                super::svg::line_chart(
                    &title("rejected % of demand"),
                    "simulated seconds",
                    "rejected %",
                    &series(|t| t.rejected_ratio() * 100.0),
                ),
            ),
            (
                "max-over-mean.svg",
                super::svg::line_chart(
                    &title("max / mean worker load"),
                    "simulated seconds",
                    "max / mean",
                    &series(Tick::max_over_mean),
                ),
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use lb_common::ids::{ActionId, Key, OperationId, PartitionId, WorkerId};
    use lb_common::protocol::ActionSpec;

    use super::*;

    fn record(t_secs: u64, ended: u64, spec: ActionSpec, source: u32, landed: u32, keys: Vec<Key>) -> ActionRecord {
        ActionRecord {
            t_secs,
            action_id: ActionId::new(format!("a-{t_secs}")).expect("valid"),
            operation: OperationId::new(format!("op-{t_secs}")).expect("valid"),
            spec,
            reason: String::new(),
            bytes_to_move: 0,
            outcome: Outcome::Succeeded { at_secs: ended },
            landed_on: vec![landed],
            into_group: None,
            source: Some(source),
            cross_zone_bytes: 0,
            keys,
        }
    }

    fn mv(partition: &str, to: u32) -> ActionSpec {
        ActionSpec::Move {
            partition: PartitionId::new(partition).expect("valid"),
            to_worker: WorkerId::new(format!("w-{to:04}")).expect("valid"),
            max_bytes_per_sec: None,
        }
    }

    #[test]
    fn thrash_counts_moves_back_and_merges_of_fresh_cuts_within_ten_minutes() {
        let p = |s: &str| PartitionId::new(s).expect("valid");
        let split = ActionSpec::Split { partition: p("a"), split_key: Key(100) };
        let merge = ActionSpec::Merge { left: p("a"), right: p("b"), to_worker: None };
        let actions = vec![
            // a: 0 -> 1 at 10 s, back 1 -> 0 at 300 s (thrash), to 2 at 2000 s (not back).
            record(0, 10, mv("a", 1), 0, 1, vec![]),
            record(300, 310, mv("a", 0), 1, 0, vec![]),
            record(2000, 2010, mv("a", 2), 0, 2, vec![]),
            // c: 0 -> 1, back after 11 min: not thrash.
            record(20, 30, mv("c", 1), 0, 1, vec![]),
            record(700, 710, mv("c", 0), 1, 0, vec![]),
            // A cut at 100 merged back after 5 min (thrash); a cut at 200 merged after an hour.
            record(40, 42, split.clone(), 0, 0, vec![Key(100)]),
            record(342, 344, merge.clone(), 0, 0, vec![Key(100)]),
            record(400, 402, ActionSpec::Split { partition: p("a"), split_key: Key(200) }, 0, 0, vec![Key(200)]),
            record(4000, 4002, merge, 0, 0, vec![Key(200)]),
        ];
        assert_eq!(thrash(&actions), 2);
    }

    #[test]
    fn recuts_count_splits_inside_a_band_cut_in_one_step_of_the_same_table() {
        let p = |s: &str| PartitionId::new(s).expect("valid");
        let into = |partition: &str, keys: &[u64]| ActionSpec::SplitInto {
            partition: p(partition),
            split_keys: keys.iter().map(|&k| Key(k)).collect(),
            to_workers: Vec::new(),
            group: None,
            first_to_worker: None,
        };
        let split = |partition: &str, k: u64| ActionSpec::Split { partition: p(partition), split_key: Key(k) };
        let keys = |ks: &[u64]| ks.iter().map(|&k| Key(k)).collect::<Vec<_>>();
        let actions = vec![
            record(10, 12, into("t.a.p1", &[100, 200, 300]), 0, 0, keys(&[100, 200, 300])),
            // Before the band's first key (the id-keeping piece) and in another table: not again.
            record(50, 52, split("t.a.p1", 50), 0, 0, keys(&[50])),
            record(60, 62, split("t.b.p1", 150), 0, 0, keys(&[150])),
            // Inside the band: cut again.
            record(70, 72, split("t.a.p2", 250), 0, 0, keys(&[250])),
            record(80, 82, into("t.a.p3", &[120, 140]), 0, 0, keys(&[120, 140])),
        ];
        assert_eq!(recuts(&actions), 2);
    }
}
