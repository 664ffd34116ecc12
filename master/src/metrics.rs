//! What the master exports at `/metrics` (besides lb-common's HTTP and config series), and the
//! per-pass gauges: the cluster's spread, the hot partitions, the time from a hotspot to its
//! relief, each worker's load and the declines by reason.
//!
//! Labels stay bounded: policies, modes, kinds, verdicts and reasons are closed sets; `worker`
//! has one value per worker of the cluster (never a partition or an action id).

use std::collections::HashMap;

use lb_common::ids::{TableId, TenantId};
use lb_common::telemetry::MetricDef;
use lb_common::telemetry::MetricKind::{Counter, Gauge, Histogram};

use crate::planner::{Plan, PlannerInput};

pub const CATALOG: &[MetricDef] = &[
    // Leadership.
    MetricDef::new(
        "lb_master_leading_masters",
        Gauge,
        &[],
        "1 while this master leads and may act (always with backend single), 0 while it stands by.",
    ),
    MetricDef::new(
        "lb_master_leadership_changes_total",
        Counter,
        &["to"],
        "Leadership changes of this master (to: leader, standby).",
    ),
    MetricDef::new(
        "lb_master_leadership_sessions_ended_total",
        Counter,
        &[],
        "etcd sessions (lease and campaign) that ended on an error: etcd unreachable, a lost lease, or fenced by the ops server.",
    ),
    MetricDef::new(
        "lb_master_takeovers_total",
        Counter,
        &["state"],
        "Takeovers by a newly elected leader, by where its memory came from (handover: the predecessor's state in etcd; fresh: none).",
    ),
    MetricDef::new(
        "lb_master_handover_saves_total",
        Counter,
        &["outcome"],
        "The leader's state for a successor, by outcome of each save due (saved; unchanged: the same bytes as the last save; failed: etcd refused or did not answer).",
    ),
    MetricDef::new(
        "lb_master_handover_bytes",
        Gauge,
        &[],
        "Size of the leader's state for a successor as last encoded (zstd-compressed JSON); etcd refuses a request over its --max-request-bytes (default 1.5 MiB).",
    ),
    // The offline analyzer and its archive.
    MetricDef::new(
        "lb_master_offline_passes_total",
        Counter,
        &["outcome"],
        "Offline passes by outcome (ok; partial: look-back not whole; no_rollups: the ops server gave none; no_layout; error).",
    ),
    MetricDef::new(
        "lb_master_offline_pass_seconds",
        Gauge,
        &[],
        "Wall time of the last offline round (rollups fetched and archived, one pass over the look-back).",
    ),
    MetricDef::new(
        "lb_master_offline_proposals",
        Gauge,
        &["kind"],
        "What the last offline pass found to propose: merges and peak forecasts (the online pass checks each against its own view first).",
    ),
    MetricDef::new(
        "lb_master_archive_rows_total",
        Counter,
        &["kind"],
        "Archived rollup rows: new, or replaced (a late or refetched copy of its worker, partition and hour).",
    ),
    MetricDef::new(
        "lb_master_archive_files_skipped_total",
        Counter,
        &[],
        "Archive files that could not be read: skipped by a pass, or moved aside before a rewrite.",
    ),
    MetricDef::new(
        "lb_master_archive_catch_up_failures_total",
        Counter,
        &[],
        "Workers whose missed hours could not be fetched when they came back behind the archive: those hours may be missing.",
    ),
    // The analysis pass.
    MetricDef::new(
        "lb_master_analysis_passes_total",
        Counter,
        &["outcome"],
        "Analysis ticks by outcome (ok; standby: not the leader; stale: collection behind; no_ops_server; fenced: the ops server refused this master's epoch at takeover; no_handover: the predecessor's state could not be read from etcd).",
    ),
    MetricDef::new(
        "lb_master_analysis_early_passes_total",
        Counter,
        &[],
        "Passes run before their interval was up because an action the master tracks had ended (the next step follows the end, not the clock).",
    ),
    MetricDef::new(
        "lb_master_analysis_pass_seconds",
        Histogram,
        &[],
        "Time one analysis pass took: building the planner's input from the table, planning, and carrying out its commands.",
    ),
    MetricDef::new(
        "lb_master_analysis_interval_seconds",
        Gauge,
        &[],
        "The configured time between analysis passes (analyzer.interval_ms); a pass slower than this falls behind.",
    ),
    MetricDef::new(
        "lb_master_analysis_data_lag_seconds",
        Gauge,
        &[],
        "How far the last pass's load window ended before the pass ran (waiting for every live worker's reports).",
    ),
    // The cluster as the last pass saw it.
    MetricDef::new(
        "lb_master_cluster_max_load_ratio",
        Gauge,
        &[],
        "The hottest shared worker's load as a ratio of its capacity, as of the last pass.",
    ),
    MetricDef::new(
        "lb_master_cluster_max_mean_ratio",
        Gauge,
        &[],
        "The hottest shared worker's load over the mean worker load (1 is perfectly even), as of the last pass.",
    ),
    MetricDef::new(
        "lb_master_cluster_cv_ratio",
        Gauge,
        &[],
        "Coefficient of variation (standard deviation over mean) of the shared workers' load, as of the last pass.",
    ),
    MetricDef::new(
        "lb_master_cluster_ops_per_second",
        Gauge,
        &[],
        "Ops per second the cluster served over the last pass's window, summed over its partitions.",
    ),
    MetricDef::new(
        "lb_master_cluster_rejected_ratio",
        Gauge,
        &[],
        "Share of the cluster's demand (served plus refused ops) that was refused over the last pass's window.",
    ),
    MetricDef::new(
        "lb_master_worker_load_ratio",
        Gauge,
        &["worker"],
        "Each worker's load as a ratio of its capacity, as of the last pass (one series per worker).",
    ),
    MetricDef::new(
        "lb_master_zone_load_ratio",
        Gauge,
        &["zone"],
        "Each availability zone's load as a ratio of its capacity, as of the last pass: its healthy workers' load ratios weighted by their ops capacity (one series per zone; none without zones).",
    ),
    MetricDef::new(
        "lb_master_hot_partitions",
        Gauge,
        &[],
        "Partitions over their limit's engage threshold in the last pass.",
    ),
    MetricDef::new("lb_master_overloaded_workers", Gauge, &[], "Workers over the high watermark in the last pass."),
    MetricDef::new(
        "lb_master_hotspot_relief_seconds",
        Histogram,
        &[],
        "Time from a table's first hot partition to the pass from which none of its partitions was hot for 5 s (lineage-proof: a split's pieces belong to the same table).",
    ),
    MetricDef::new(
        "lb_master_hotspot_age_seconds",
        Gauge,
        &[],
        "Age of the oldest hotspot not yet relieved (0 when no table has a hot partition).",
    ),
    // Decisions.
    MetricDef::new(
        "lb_master_proposals_total",
        Counter,
        &["policy", "mode"],
        "Proposals by policy and mode (auto: submitted; dry_run: offered for approval).",
    ),
    MetricDef::new(
        "lb_master_declines_total",
        Counter,
        &["policy", "reason"],
        "Triggers that got no action, per pass, by policy and reason (cooldown, cap, in_flight, no_gain, ...).",
    ),
    MetricDef::new("lb_master_pending_proposals", Gauge, &[], "Dry-run proposals waiting for an operator's approval."),
    MetricDef::new(
        "lb_master_cooling_partitions",
        Gauge,
        &[],
        "Partitions in their cooldown after an action: the planner leaves them alone until it ends.",
    ),
    MetricDef::new(
        "lb_master_inflight_actions",
        Gauge,
        &[],
        "Actions submitted to the ops server and not finished, as of the last pass.",
    ),
    MetricDef::new(
        "lb_master_halted_planners",
        Gauge,
        &[],
        "1 while the policy config's global halt switch (halt = true) stops the planner, else 0.",
    ),
    MetricDef::new(
        "lb_master_actions_submitted_total",
        Counter,
        &["kind"],
        "Actions the master submitted to the ops server, by kind.",
    ),
    MetricDef::new(
        "lb_master_actions_ended_total",
        Counter,
        &["applied"],
        "Submitted actions that ended, by whether they were applied (yes) or not (no).",
    ),
    MetricDef::new(
        "lb_master_evaluations_total",
        Counter,
        &["verdict", "policy"],
        "Finished actions scored after their evaluation window, by verdict (effective, no_effect, harmful, ...) and policy.",
    ),
    MetricDef::new(
        "lb_master_placement_proposals_total",
        Counter,
        &["direction"],
        "Reshard proposals of hash-sharded datasets by direction (grow, shrink).",
    ),
    // Collection and the table.
    MetricDef::new(
        "lb_master_collect_rounds_total",
        Counter,
        &["outcome"],
        "Collection rounds through the ops server by outcome (ok, error).",
    ),
    MetricDef::new("lb_master_collected_samples_total", Counter, &[], "Samples collected from the agents."),
    MetricDef::new(
        "lb_master_collect_gaps_total",
        Counter,
        &[],
        "Pulls where an agent had expired data before the master's cursor: samples were lost to retention.",
    ),
    MetricDef::new(
        "lb_master_collection_lag_seconds",
        Gauge,
        &[],
        "How far behind the newest collected sample is, over the agents that are not down.",
    ),
    MetricDef::new(
        "lb_master_collected_agents",
        Gauge,
        &["status"],
        "Agents by the status of their last collection (ok, timeout, error, down); anything but ok is stale data.",
    ),
    MetricDef::new(
        "lb_master_stale_collectors",
        Gauge,
        &[],
        "1 while no collection round succeeded within collector.stale_after_ms (the analyzers hold off), else 0.",
    ),
    MetricDef::new(
        "lb_master_collect_page_samples",
        Gauge,
        &[],
        "The smallest page asked of an agent (smaller than collector.limit_per_agent after a missed deadline).",
    ),
    MetricDef::new(
        "lb_master_table_accepted_total",
        Counter,
        &[],
        "Samples the MetricsTable took in (partition and host stats).",
    ),
    MetricDef::new(
        "lb_master_table_duplicates_total",
        Counter,
        &[],
        "Samples the MetricsTable already had (a retried pull); not counted twice.",
    ),
    MetricDef::new(
        "lb_master_table_dropped_total",
        Counter,
        &[],
        "Samples the MetricsTable refused: too late, dated in the future, invalid, or over its capacity.",
    ),
    MetricDef::new(
        "lb_master_table_bytes",
        Gauge,
        &[],
        "Memory held by the MetricsTable (history, entries, sketches).",
    ),
    MetricDef::new("lb_master_table_partitions", Gauge, &[], "Partitions the MetricsTable holds."),
];

/// Creates the decision counters at 0 for every label value they can take, and the relief
/// histogram empty: Prometheus's `increase()` cannot count the first event of a series that
/// appears at 1 (the Prometheus docs' "avoid missing metrics"), and the first split and its
/// verdict are the events an SRE looks for.
pub fn initialize() {
    use lb_common::protocol::{ActionKind, DeclineReason, Policy, PolicyMode, Verdict};
    metrics::counter!("lb_master_archive_catch_up_failures_total").increment(0);
    for policy in Policy::ALL {
        for mode in [PolicyMode::DryRun, PolicyMode::Auto] {
            metrics::counter!("lb_master_proposals_total", "policy" => policy.as_str(), "mode" => mode.as_str())
                .increment(0);
        }
        for reason in DeclineReason::ALL {
            metrics::counter!("lb_master_declines_total", "policy" => policy.as_str(), "reason" => reason.as_str())
                .increment(0);
        }
        for verdict in Verdict::ALL {
            metrics::counter!("lb_master_evaluations_total", "verdict" => verdict.as_str(), "policy" => policy.as_str())
                .increment(0);
        }
    }
    for kind in ActionKind::ALL {
        metrics::counter!("lb_master_actions_submitted_total", "kind" => kind.as_str()).increment(0);
    }
    for applied in ["yes", "no"] {
        metrics::counter!("lb_master_actions_ended_total", "applied" => applied).increment(0);
    }
    metrics::counter!("lb_master_collect_gaps_total").increment(0);
    for to in ["leader", "standby"] {
        metrics::counter!("lb_master_leadership_changes_total", "to" => to).increment(0);
    }
    metrics::counter!("lb_master_leadership_sessions_ended_total").increment(0);
    for state in ["handover", "fresh"] {
        metrics::counter!("lb_master_takeovers_total", "state" => state).increment(0);
    }
    for outcome in ["saved", "unchanged", "failed"] {
        metrics::counter!("lb_master_handover_saves_total", "outcome" => outcome).increment(0);
    }
    let _ = metrics::histogram!("lb_master_hotspot_relief_seconds");
    metrics::gauge!("lb_master_hotspot_age_seconds").set(0.0);
}

/// How long a table must show no hot partition before its hotspot counts as relieved: a
/// partition flickering around its threshold is one hotspot, not many.
pub const RELIEF_HOLD_MS: i64 = 5_000;

/// Hotspots per table, from the first pass one of its partitions was hot to the pass from
/// which none was for [`RELIEF_HOLD_MS`]. Keyed by table, so a split's pieces (same table)
/// continue their parent's hotspot.
#[derive(Debug, Default)]
pub struct ReliefClock {
    open: HashMap<(TenantId, TableId), Episode>,
}

#[derive(Debug, Clone, Copy)]
struct Episode {
    since_ms: i64,
    /// When the table was last seen hot.
    last_hot_ms: i64,
}

impl ReliefClock {
    /// Notes which tables are hot at `now_ms`; returns the relief times (seconds) of the
    /// hotspots that ended.
    pub fn observe(&mut self, hot: impl IntoIterator<Item = (TenantId, TableId)>, now_ms: i64) -> Vec<f64> {
        for key in hot {
            self.open.entry(key).or_insert(Episode { since_ms: now_ms, last_hot_ms: now_ms }).last_hot_ms = now_ms;
        }
        let mut relieved = Vec::new();
        self.open.retain(|_, e| {
            if now_ms - e.last_hot_ms < RELIEF_HOLD_MS {
                return true;
            }
            // Relieved at the first pass it was no longer hot: the hold only confirms it.
            relieved.push((e.last_hot_ms - e.since_ms).max(0) as f64 / 1000.0);
            false
        });
        relieved
    }

    /// Age of the oldest hotspot not relieved yet (seconds), 0 without one.
    pub fn oldest_age_secs(&self, now_ms: i64) -> f64 {
        self.open.values().map(|e| (now_ms - e.since_ms).max(0) as f64 / 1000.0).fold(0.0, f64::max)
    }
}

/// The gauges and counters of one finished pass.
pub fn record_pass(plan: &Plan, input: &PlannerInput, relief: &mut ReliefClock, now_ms: i64) {
    let s = &plan.stats;
    metrics::gauge!("lb_master_cluster_max_load_ratio").set(s.max_load_ratio);
    metrics::gauge!("lb_master_cluster_max_mean_ratio").set(if s.mean_load_ratio > 0.0 {
        s.max_load_ratio / s.mean_load_ratio
    } else {
        0.0
    });
    metrics::gauge!("lb_master_cluster_cv_ratio").set(s.cv);
    metrics::gauge!("lb_master_hot_partitions").set(s.hot_partitions as f64);
    metrics::gauge!("lb_master_overloaded_workers").set(s.overloaded_workers as f64);
    metrics::gauge!("lb_master_inflight_actions").set(s.in_flight as f64);
    let (ops, rejected) =
        input.partitions.iter().fold((0.0, 0.0), |(o, r), p| (o + p.stats.ops_per_sec, r + p.stats.rejected_per_sec));
    metrics::gauge!("lb_master_cluster_ops_per_second").set(ops);
    metrics::gauge!("lb_master_cluster_rejected_ratio").set(if ops + rejected > 0.0 {
        rejected / (ops + rejected)
    } else {
        0.0
    });
    for (w, ratio) in input.workers.iter().zip(&plan.worker_load_ratios) {
        metrics::gauge!("lb_master_worker_load_ratio", "worker" => w.id.as_str().to_owned()).set(*ratio);
    }
    for (zone, ratio) in zone_load_ratios(input, &plan.worker_load_ratios) {
        metrics::gauge!("lb_master_zone_load_ratio", "zone" => zone).set(ratio);
    }
    for &(policy, reason, n) in &plan.declined_counts {
        metrics::counter!("lb_master_declines_total", "policy" => policy.as_str(), "reason" => reason.as_str())
            .increment(u64::from(n));
    }
    let hot = plan.hot.iter().filter_map(|&i| input.partitions.get(i)).map(|p| (p.tenant.clone(), p.table.clone()));
    for secs in relief.observe(hot, now_ms) {
        metrics::histogram!("lb_master_hotspot_relief_seconds").record(secs);
    }
    metrics::gauge!("lb_master_hotspot_age_seconds").set(relief.oldest_age_secs(now_ms));
}

/// Each zone's load ratio: its healthy workers' ratios weighted by their ops capacity (each
/// worker's ratio is its tightest dimension's), in zone order.
pub fn zone_load_ratios(input: &PlannerInput, worker_ratios: &[f64]) -> Vec<(String, f64)> {
    let mut zones: std::collections::BTreeMap<&str, (f64, f64)> = std::collections::BTreeMap::new();
    for (w, ratio) in input.workers.iter().zip(worker_ratios) {
        if let Some(zone) = &w.zone
            && w.health == lb_common::protocol::Health::Healthy
        {
            let weight = w.capacity.ops_per_sec.max(f64::MIN_POSITIVE);
            let e = zones.entry(zone.as_str()).or_default();
            e.0 += ratio * weight;
            e.1 += weight;
        }
    }
    zones.into_iter().map(|(z, (sum, weight))| (z.to_owned(), sum / weight)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zone_load_is_the_capacity_weighted_mean_of_its_healthy_workers() {
        let mut input = crate::planner::tests::cluster(&[1.0, 1.0, 1.0, 1.0], &[0, 1, 2, 3], 4, &[]);
        for (w, z) in input.workers.iter_mut().zip(["a", "a", "b", "b"]) {
            w.zone = Some(z.parse().expect("zone"));
        }
        input.workers[1].capacity.ops_per_sec *= 3.0;
        input.workers[3].health = lb_common::protocol::Health::Down;
        let ratios = zone_load_ratios(&input, &[0.8, 0.4, 0.6, 0.9]);
        assert_eq!(ratios.len(), 2);
        assert_eq!(ratios[0].0, "a");
        assert!((ratios[0].1 - (0.8 + 3.0 * 0.4) / 4.0).abs() < 1e-12, "{ratios:?}");
        assert_eq!(ratios[1], ("b".to_owned(), 0.6), "the down worker is left out");
        input.workers.iter_mut().for_each(|w| w.zone = None);
        assert!(zone_load_ratios(&input, &[0.8, 0.4, 0.6, 0.9]).is_empty(), "no zones, no series");
    }

    fn key(t: &str) -> (TenantId, TableId) {
        (TenantId::new("acme").expect("valid"), TableId::new(t).expect("valid"))
    }

    #[test]
    fn a_hotspot_is_relieved_once_its_table_stays_cool_for_the_hold() {
        let mut clock = ReliefClock::default();
        assert!(clock.observe([key("orders")], 10_000).is_empty());
        // A flicker within the hold is the same hotspot.
        assert!(clock.observe([], 12_000).is_empty());
        assert!(clock.observe([key("orders")], 13_000).is_empty());
        assert_eq!(clock.oldest_age_secs(14_000), 4.0);
        assert!(clock.observe([], 17_000).is_empty(), "4 s cool is within the hold");
        // Relief is dated at the last hot pass (13 s), 3 s after the onset.
        assert_eq!(clock.observe([], 18_000), vec![3.0]);
        assert_eq!(clock.oldest_age_secs(18_000), 0.0);
    }

    #[test]
    fn tables_are_timed_on_their_own() {
        let mut clock = ReliefClock::default();
        clock.observe([key("a")], 0);
        clock.observe([key("a"), key("b")], 1_000);
        assert_eq!(clock.oldest_age_secs(2_000), 2.0);
        assert_eq!(clock.observe([key("b")], 6_000), vec![1.0], "a was last hot at 1 s");
        assert_eq!(clock.observe([], 11_000), vec![5.0]);
    }
}
