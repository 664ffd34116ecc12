//! The planner's dynamic config: one section per policy plus the shared caps. Every threshold
//! pair has `engage > release` (hysteresis); every default says why it has its value.

pub use lb_common::protocol::PolicyMode;
use lb_common::validate::{Scope, ValidationError, Validator};
use serde::{Deserialize, Serialize};

/// Dry-run by default would hide the planner from the scenario tests; the master's own config
/// file ships `dry_run` (Cruise Control's lesson), the library default is what it was tuned for.
pub const DEFAULT_MODE: PolicyMode = PolicyMode::Auto;
/// 2 one-second windows: one noisy sample never acts, and a split still lands within ~4 s.
pub const DEFAULT_HOT_WINDOWS: u32 = 2;
/// 0.9 of the partition limit: act just before the partition starts rejecting.
pub const DEFAULT_PARTITION_ENGAGE_RATIO: f64 = 0.9;
/// 0.7 of the limit: a split leaves halves near 0.45, well under, so release never flaps.
pub const DEFAULT_PARTITION_RELEASE_RATIO: f64 = 0.7;
/// 1 % of demand rejected counts as overload even under the ops ratio (bytes-bound partitions).
pub const DEFAULT_REJECTED_ENGAGE_RATIO: f64 = 0.01;
/// 100 ops/s: below that a "hot" partition is noise on an idle cluster (CockroachDB's floor).
pub const DEFAULT_MIN_PARTITION_OPS_PER_SEC: f64 = 100.0;
/// Pieces aim at half the limit: room for the load to double before the next split.
pub const DEFAULT_SPLIT_TARGET_RATIO: f64 = 0.5;
/// One key with half the ops: a split cannot divide it (Cosmos DB, Dicer).
pub const DEFAULT_SINGLE_KEY_SHARE_RATIO: f64 = 0.5;
/// 80 % of writes on the tail: an append-only partition, a split only moves the tail.
pub const DEFAULT_SEQUENTIAL_WRITE_RATIO: f64 = 0.8;
/// 0.85 of capacity: latency climbs steeply past it (queueing), rejections start at 1.
pub const DEFAULT_HIGH_WATERMARK_RATIO: f64 = 0.85;
/// 0.75 of capacity: moves bring a worker back here, 10 points under engage (anti-flap).
pub const DEFAULT_LOW_WATERMARK_RATIO: f64 = 0.75;
/// max/mean 1.10 engages: the ±10 % band of CockroachDB and Cruise Control (balance threshold 1.1).
pub const DEFAULT_IMBALANCE_ENGAGE_MAX_OVER_MEAN: f64 = 1.10;
/// Release at 1.05: once engaged, balance well inside the band so a small drift does not re-engage.
pub const DEFAULT_IMBALANCE_RELEASE_MAX_OVER_MEAN: f64 = 1.05;
/// CV 0.25 engages: a clearly uneven spread even when the max is not far out.
pub const DEFAULT_IMBALANCE_ENGAGE_CV: f64 = 0.25;
/// CV 0.10 releases.
pub const DEFAULT_IMBALANCE_RELEASE_CV: f64 = 0.10;
/// 10 windows: imbalance is not urgent; wait out bursts (and a split's settling) before moving data.
pub const DEFAULT_IMBALANCE_WINDOWS: u32 = 10;
/// Mean load 0.05: an almost idle cluster is not worth moving data for.
pub const DEFAULT_IMBALANCE_MIN_MEAN_RATIO: f64 = 0.05;
/// A balancing move may push its source 5 % over capacity while it streams (make-before-break
/// keeps the load there and the stream drains it): stricter blocks all balancing above ~0.8
/// (measured: at 1.0 the zipf-skew scenario ends at max/mean 1.24 instead of under 1.10).
pub const DEFAULT_MAX_SOURCE_TRANSIENT_RATIO: f64 = 1.05;
/// 8 proposals per pass (the offline analyzer's merges and pre-splits of the pass included):
/// neon's storage controller plans up to 64, but lb runs every second.
pub const DEFAULT_MAX_ACTIONS_PER_PASS: u32 = 8;
/// 2 concurrent actions touching one worker: a move drains its source 20 %; two is the ceiling.
pub const DEFAULT_MAX_INFLIGHT_PER_WORKER: u32 = 2;
/// 32 concurrent actions cluster-wide: bounds churn like PD's schedule limits.
pub const DEFAULT_MAX_INFLIGHT_CLUSTER: u32 = 32;
/// The two cluster-wide caps grow with the cluster, to a quarter of its workers (a cluster of
/// 8 keeps 8 a pass and 32 in flight; one of 1,000 gets 250 and 250): hotspots come per worker,
/// so absolute caps make relief time grow with the cluster's size. At 100,000 partitions on
/// 1,000 workers with 125 ramping hot ranges, 8 a pass queued the splits and their scatter moves
/// for 16 s and 110 s, and the workers holding the unscattered pieces went to 2.8 of capacity
/// (`docs/benchmarks.md`, issue 25). A quarter is every eighth worker at its own cap of two; the
/// per-worker cap still bounds what any one worker takes on. Cruise Control allows 1,250
/// partition movements cluster-wide by default, and 5 per broker.
pub const DEFAULT_CLUSTER_CAPS_PER_WORKER: f64 = 0.25;
/// 30 s: longer than a small move and its settle time; short enough to follow a ramping load.
pub const DEFAULT_COOLDOWN_SECS: u64 = 30;
/// A move must cut the pair's max load by 2 points of capacity (PD asks for 5 % of the load).
pub const DEFAULT_MIN_GAIN_RATIO: f64 = 0.02;
/// Each GiB moved costs 1 point of capacity: a 10 GiB move must gain 12 points to be worth it.
pub const DEFAULT_MOVE_COST_RATIO_PER_GIB: f64 = 0.01;
/// A streaming move costs its source 20 % of capacity until it finishes (reads, network,
/// checksums; the testbed's `DEFAULT_MOVE_SOURCE_COST_RATIO`), so in-flight moves lower it.
pub const DEFAULT_MOVE_SOURCE_DRAIN_RATIO: f64 = 0.2;
/// 100 MiB/s: the storage's full stream rate, at which a move costs its source
/// `move_source_drain_ratio` (the testbed's `DEFAULT_MOVE_BYTES_PER_SEC`); a move throttled to
/// its source's spare capacity names that share of it.
pub const DEFAULT_MOVE_STREAM_BYTES_PER_SEC: f64 = 100.0 * 1024.0 * 1024.0;
/// 30 s: three times a 1 GiB move at 100 MiB/s. An action running longer than this and than
/// three times what its bytes take at its rate ([`super::model::STALL_SLOWDOWN`]) is presumed
/// stuck and planned around as possibly never ending (its load stays on its source) and
/// possibly still landing (its destination keeps room for it), until the executor times it out.
pub const DEFAULT_STALLED_ACTION_SECS: u64 = 30;
/// Split children are scattered if they appear within 60 s of their split.
pub const DEFAULT_SCATTER_WINDOW_SECS: u64 = 60;

/// Cross-zone bytes cost 4 times same-zone bytes: inter-zone transfer is billed per GB each way
/// (about $0.01/GB on the large clouds, intra-zone free) and runs over the narrower, slower
/// links, so a crossing must gain 4 times as much to be worth it.
pub const DEFAULT_CROSS_ZONE_COST_FACTOR: f64 = 4.0;

/// A harmful action rests its target for 4 cooldowns, and each strike of its policy adds a
/// cooldown to that policy's next ones, up to 4 (a policy doing harm slows down, not stops).
pub const DEFAULT_HARMFUL_COOLDOWN_FACTOR: u32 = 4;
/// Strikes decay after an hour without harm: long enough to span a workload's burst, short
/// enough that one bad afternoon does not slow a policy for days.
pub const DEFAULT_STRIKE_DECAY_SECS: u64 = 3_600;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlannerConfig {
    /// Global halt: no proposals at all; hysteresis is still tracked.
    pub halt: bool,
    pub partition_overload: PartitionOverloadConfig,
    pub worker_overload: WorkerOverloadConfig,
    pub imbalance: ImbalanceConfig,
    pub caps: CapsConfig,
    pub feedback: FeedbackConfig,
    pub zones: ZonesConfig,
    /// A window counts toward a hysteresis only if it ends at least this long after the last
    /// one counted (`Hysteresis::observe`). Not a policy: the master sets it to 3/4 of its pass
    /// interval, so a pass it runs early (an action of its own ended) never hurries an engage;
    /// 0 counts every pass (the simulator's, a second apart).
    #[serde(skip)]
    pub hysteresis_min_gap_ms: i64,
}

/// Whether load may leave its zone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CrossZone {
    /// A partition, its split pieces and its isolation stay in its owner's zone: when the zone
    /// has no room, the action is declined and says so. The default: a crossing trades latency
    /// and transfer cost for balance, which an operator chooses, not the balancer.
    #[default]
    Never,
    /// A partition crosses only when no worker of its own zone has the room for it (every one
    /// would pass the high watermark; one merely at its action cap keeps it home, as that
    /// passes): then to the coolest zone, charged `cross_zone_cost_factor` times the move cost.
    WhenFull,
    /// As `when_full`, and zones are balanced too: while the hottest zone's load is over the
    /// imbalance policy's `engage_max_over_mean` times the zones' mean, partitions move from its
    /// hottest worker to the coolest worker of the coolest zone (until under
    /// `release_max_over_mean`), each charged the crossing's cost and under the imbalance
    /// policy's mode.
    Balance,
}

/// Zones (the topology's `zone` per worker): a topology without zones is one zone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ZonesConfig {
    pub cross: CrossZone,
    /// Move cost of a cross-zone move over a same-zone one of the same bytes.
    pub cross_zone_cost_factor: f64,
}

impl Default for ZonesConfig {
    fn default() -> Self {
        Self { cross: CrossZone::Never, cross_zone_cost_factor: DEFAULT_CROSS_ZONE_COST_FACTOR }
    }
}

/// How action evaluations feed back into planning.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FeedbackConfig {
    /// Cooldowns a harmful action's target rests; also the cap of a policy's cooldown factor.
    pub harmful_cooldown_factor: u32,
    pub strike_decay_secs: u64,
}

impl Default for FeedbackConfig {
    fn default() -> Self {
        Self { harmful_cooldown_factor: DEFAULT_HARMFUL_COOLDOWN_FACTOR, strike_decay_secs: DEFAULT_STRIKE_DECAY_SECS }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PartitionOverloadConfig {
    pub mode: PolicyMode,
    /// Demand over the partition limit that counts as hot.
    pub engage_ratio: f64,
    pub release_ratio: f64,
    pub rejected_engage_ratio: f64,
    pub min_ops_per_sec: f64,
    pub hot_windows: u32,
    pub split_target_ratio: f64,
    pub single_key_share_ratio: f64,
    pub sequential_write_ratio: f64,
    pub scatter_window_secs: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkerOverloadConfig {
    pub mode: PolicyMode,
    pub high_watermark_ratio: f64,
    pub low_watermark_ratio: f64,
    pub hot_windows: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ImbalanceConfig {
    pub mode: PolicyMode,
    pub engage_max_over_mean: f64,
    pub release_max_over_mean: f64,
    pub engage_cv: f64,
    pub release_cv: f64,
    pub min_mean_ratio: f64,
    pub hot_windows: u32,
    /// Highest load ratio a source may reach while a balancing move drains it.
    pub max_source_transient_ratio: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CapsConfig {
    /// At least this many proposals a pass; more on a large cluster
    /// (`max_actions_per_pass_per_worker`).
    pub max_actions_per_pass: u32,
    pub max_inflight_per_worker: u32,
    /// At least this many actions in flight cluster-wide; more on a large cluster
    /// (`max_inflight_cluster_per_worker`).
    pub max_inflight_cluster: u32,
    /// Proposals a pass per worker of the topology, when that is more than
    /// `max_actions_per_pass`; 0 keeps the absolute cap.
    pub max_actions_per_pass_per_worker: f64,
    /// Actions in flight per worker of the topology, when that is more than
    /// `max_inflight_cluster`; 0 keeps the absolute cap.
    pub max_inflight_cluster_per_worker: f64,
    pub cooldown_secs: u64,
    pub min_gain_ratio: f64,
    pub move_cost_ratio_per_gib: f64,
    /// Capacity share an in-flight move takes from its source worker (floored at half).
    pub move_source_drain_ratio: f64,
    /// The storage's full stream rate, at which a move takes `move_source_drain_ratio`. Where
    /// the storage throttles a move to the rate it names, the planner names the rate its
    /// source's spare capacity pays for.
    pub move_stream_bytes_per_sec: f64,
    /// In-flight actions older than this, and than three times what their bytes take at their
    /// rate, are presumed stuck: not counted as done, their destination still keeping room.
    pub stalled_action_secs: u64,
}

impl Default for PartitionOverloadConfig {
    fn default() -> Self {
        Self {
            mode: DEFAULT_MODE,
            engage_ratio: DEFAULT_PARTITION_ENGAGE_RATIO,
            release_ratio: DEFAULT_PARTITION_RELEASE_RATIO,
            rejected_engage_ratio: DEFAULT_REJECTED_ENGAGE_RATIO,
            min_ops_per_sec: DEFAULT_MIN_PARTITION_OPS_PER_SEC,
            hot_windows: DEFAULT_HOT_WINDOWS,
            split_target_ratio: DEFAULT_SPLIT_TARGET_RATIO,
            single_key_share_ratio: DEFAULT_SINGLE_KEY_SHARE_RATIO,
            sequential_write_ratio: DEFAULT_SEQUENTIAL_WRITE_RATIO,
            scatter_window_secs: DEFAULT_SCATTER_WINDOW_SECS,
        }
    }
}

impl Default for WorkerOverloadConfig {
    fn default() -> Self {
        Self {
            mode: DEFAULT_MODE,
            high_watermark_ratio: DEFAULT_HIGH_WATERMARK_RATIO,
            low_watermark_ratio: DEFAULT_LOW_WATERMARK_RATIO,
            hot_windows: DEFAULT_HOT_WINDOWS,
        }
    }
}

impl Default for ImbalanceConfig {
    fn default() -> Self {
        Self {
            mode: DEFAULT_MODE,
            engage_max_over_mean: DEFAULT_IMBALANCE_ENGAGE_MAX_OVER_MEAN,
            release_max_over_mean: DEFAULT_IMBALANCE_RELEASE_MAX_OVER_MEAN,
            engage_cv: DEFAULT_IMBALANCE_ENGAGE_CV,
            release_cv: DEFAULT_IMBALANCE_RELEASE_CV,
            min_mean_ratio: DEFAULT_IMBALANCE_MIN_MEAN_RATIO,
            hot_windows: DEFAULT_IMBALANCE_WINDOWS,
            max_source_transient_ratio: DEFAULT_MAX_SOURCE_TRANSIENT_RATIO,
        }
    }
}

impl Default for CapsConfig {
    fn default() -> Self {
        Self {
            max_actions_per_pass: DEFAULT_MAX_ACTIONS_PER_PASS,
            max_inflight_per_worker: DEFAULT_MAX_INFLIGHT_PER_WORKER,
            max_inflight_cluster: DEFAULT_MAX_INFLIGHT_CLUSTER,
            max_actions_per_pass_per_worker: DEFAULT_CLUSTER_CAPS_PER_WORKER,
            max_inflight_cluster_per_worker: DEFAULT_CLUSTER_CAPS_PER_WORKER,
            cooldown_secs: DEFAULT_COOLDOWN_SECS,
            min_gain_ratio: DEFAULT_MIN_GAIN_RATIO,
            move_cost_ratio_per_gib: DEFAULT_MOVE_COST_RATIO_PER_GIB,
            move_source_drain_ratio: DEFAULT_MOVE_SOURCE_DRAIN_RATIO,
            move_stream_bytes_per_sec: DEFAULT_MOVE_STREAM_BYTES_PER_SEC,
            stalled_action_secs: DEFAULT_STALLED_ACTION_SECS,
        }
    }
}

fn engage_above_release(s: &mut Scope<'_>, engage_field: &str, engage: f64, release: f64) {
    s.check(engage > release, engage_field, engage, &format!("must be greater than the release threshold ({release})"));
}

impl CapsConfig {
    /// `max_actions_per_pass` on a topology of `workers` workers.
    pub fn actions_per_pass(&self, workers: usize) -> u32 {
        scaled(self.max_actions_per_pass, self.max_actions_per_pass_per_worker, workers)
    }

    /// `max_inflight_cluster` on a topology of `workers` workers.
    pub fn inflight_cluster(&self, workers: usize) -> u32 {
        scaled(self.max_inflight_cluster, self.max_inflight_cluster_per_worker, workers)
    }
}

/// `floor`, or `per_worker × workers` rounded up when that is more.
fn scaled(floor: u32, per_worker: f64, workers: usize) -> u32 {
    let grown = (per_worker * workers as f64).ceil();
    if grown > f64::from(floor) { grown.min(f64::from(u32::MAX)) as u32 } else { floor }
}

impl PlannerConfig {
    /// Checks what serde cannot; every error names its field (`partition_overload.engage_ratio`).
    pub fn validate(&self) -> Result<(), ValidationError> {
        let mut v = Validator::new();
        {
            let p = &self.partition_overload;
            let mut s = v.at("partition_overload");
            s.positive("engage_ratio", p.engage_ratio).positive("release_ratio", p.release_ratio);
            engage_above_release(&mut s, "engage_ratio", p.engage_ratio, p.release_ratio);
            s.ratio("rejected_engage_ratio", p.rejected_engage_ratio);
            s.non_negative("min_ops_per_sec", p.min_ops_per_sec);
            s.range_u64("hot_windows", u64::from(p.hot_windows), 1, 600);
            s.check(
                p.split_target_ratio > 0.0 && p.split_target_ratio < p.engage_ratio,
                "split_target_ratio",
                p.split_target_ratio,
                "must be > 0 and below engage_ratio (pieces must end up cooler than hot)",
            );
            s.ratio("single_key_share_ratio", p.single_key_share_ratio);
            s.ratio("sequential_write_ratio", p.sequential_write_ratio);
        }
        {
            let w = &self.worker_overload;
            let mut s = v.at("worker_overload");
            s.positive("high_watermark_ratio", w.high_watermark_ratio)
                .positive("low_watermark_ratio", w.low_watermark_ratio);
            engage_above_release(&mut s, "high_watermark_ratio", w.high_watermark_ratio, w.low_watermark_ratio);
            s.range_u64("hot_windows", u64::from(w.hot_windows), 1, 600);
        }
        {
            let i = &self.imbalance;
            let mut s = v.at("imbalance");
            s.check(i.release_max_over_mean >= 1.0, "release_max_over_mean", i.release_max_over_mean, "must be >= 1");
            engage_above_release(&mut s, "engage_max_over_mean", i.engage_max_over_mean, i.release_max_over_mean);
            s.positive("engage_cv", i.engage_cv).non_negative("release_cv", i.release_cv);
            engage_above_release(&mut s, "engage_cv", i.engage_cv, i.release_cv);
            s.ratio("min_mean_ratio", i.min_mean_ratio);
            s.range_u64("hot_windows", u64::from(i.hot_windows), 1, 3600);
            s.positive("max_source_transient_ratio", i.max_source_transient_ratio);
        }
        {
            let c = &self.caps;
            let mut s = v.at("caps");
            s.range_u64("max_actions_per_pass", u64::from(c.max_actions_per_pass), 1, 10_000);
            s.range_u64("max_inflight_per_worker", u64::from(c.max_inflight_per_worker), 1, 1_000);
            s.range_u64("max_inflight_cluster", u64::from(c.max_inflight_cluster), 1, 100_000);
            for (field, value) in [
                ("max_actions_per_pass_per_worker", c.max_actions_per_pass_per_worker),
                ("max_inflight_cluster_per_worker", c.max_inflight_cluster_per_worker),
            ] {
                s.check(
                    (0.0..=f64::from(c.max_inflight_per_worker)).contains(&value),
                    field,
                    value,
                    "must be within 0..=max_inflight_per_worker (0 keeps the absolute cap)",
                );
            }
            s.range_u64("cooldown_secs", c.cooldown_secs, 0, 86_400);
            s.range_u64("stalled_action_secs", c.stalled_action_secs, 1, 86_400);
            s.check(
                (0.0..0.5).contains(&c.move_source_drain_ratio),
                "move_source_drain_ratio",
                c.move_source_drain_ratio,
                "must be within 0..0.5",
            );
            s.non_negative("min_gain_ratio", c.min_gain_ratio)
                .non_negative("move_cost_ratio_per_gib", c.move_cost_ratio_per_gib)
                .positive("move_stream_bytes_per_sec", c.move_stream_bytes_per_sec);
        }
        {
            let z = &self.zones;
            let mut s = v.at("zones");
            s.check(
                z.cross_zone_cost_factor >= 1.0 && z.cross_zone_cost_factor.is_finite(),
                "cross_zone_cost_factor",
                z.cross_zone_cost_factor,
                "must be >= 1 (a crossing never costs less than a move inside a zone)",
            );
        }
        {
            let f = &self.feedback;
            let mut s = v.at("feedback");
            s.range_u64("harmful_cooldown_factor", u64::from(f.harmful_cooldown_factor), 1, 100);
            s.range_u64("strike_decay_secs", f.strike_decay_secs, 1, 30 * 86_400);
        }
        v.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_round_trip() {
        let c = PlannerConfig::default();
        c.validate().expect("defaults are valid");
        let json = serde_json::to_string(&c).expect("serialise");
        assert_eq!(serde_json::from_str::<PlannerConfig>(&json).expect("parse"), c);
    }

    #[test]
    fn unknown_fields_and_inverted_hysteresis_are_rejected() {
        assert!(serde_json::from_str::<PlannerConfig>(r#"{"imbalance":{"engage":1.2}}"#).is_err());
        let mut c = PlannerConfig::default();
        c.partition_overload.release_ratio = 0.95;
        c.worker_overload.low_watermark_ratio = 0.9;
        c.caps.max_actions_per_pass = 0;
        let err = c.validate().expect_err("invalid");
        let fields: Vec<_> = err.errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            ["partition_overload.engage_ratio", "worker_overload.high_watermark_ratio", "caps.max_actions_per_pass"]
        );
    }

    #[test]
    fn modes_are_snake_case() {
        let c: PlannerConfig = serde_json::from_str(r#"{"imbalance":{"mode":"dry_run"}}"#).expect("parse");
        assert_eq!(c.imbalance.mode, PolicyMode::DryRun);
    }
}
