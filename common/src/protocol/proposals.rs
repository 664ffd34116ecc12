//! What analyzers propose: proposals with their why and why-not, what they declined, and the
//! counters of a pass. One vocabulary for every analyzer (online, offline) and for manual
//! actions; the master stores and serves these, and the console and lbctl read them.

use serde::{Deserialize, Serialize};

use super::actions::{ActionSpec, Origin};

/// Whether a policy acts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum PolicyMode {
    Off,
    /// Proposals are produced and explained but marked dry-run; the caller does not execute them.
    DryRun,
    Auto,
}

impl PolicyMode {
    pub const ALL: [PolicyMode; 3] = [PolicyMode::Off, PolicyMode::DryRun, PolicyMode::Auto];

    pub fn as_str(self) -> &'static str {
        match self {
            PolicyMode::Off => "off",
            PolicyMode::DryRun => "dry_run",
            PolicyMode::Auto => "auto",
        }
    }
}

/// The policies, as a bounded set (metric label, history column).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    PartitionOverload,
    WorkerOverload,
    Imbalance,
    /// Reshards of hash-sharded datasets (the master's placement manager).
    DatasetPlacement,
    /// An SRE's action by hand (`POST /api/v1/actions`, `lbctl split|move|…`).
    Manual,
    /// The offline analyzer's merges of neighbours cold over weeks of history.
    Merge,
    /// The offline analyzer's splits ahead of a recurring peak.
    PeakAhead,
}

impl Policy {
    pub const ALL: [Policy; 7] = [
        Policy::PartitionOverload,
        Policy::WorkerOverload,
        Policy::Imbalance,
        Policy::DatasetPlacement,
        Policy::Manual,
        Policy::Merge,
        Policy::PeakAhead,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Policy::PartitionOverload => "partition_overload",
            Policy::WorkerOverload => "worker_overload",
            Policy::Imbalance => "imbalance",
            Policy::DatasetPlacement => "dataset_placement",
            Policy::Manual => "manual",
            Policy::Merge => "merge",
            Policy::PeakAhead => "peak_ahead",
        }
    }
}

/// One proposed action with everything an SRE needs to judge it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Proposal {
    pub spec: ActionSpec,
    pub policy: Policy,
    /// `auto` (the caller executes it) or `dry_run` (shown, not executed).
    pub mode: PolicyMode,
    /// Which path found it: the online analyzers, the offline ones, or an SRE by hand.
    #[serde(default = "online")]
    pub origin: Origin,
    pub reason: String,
    pub trigger: Trigger,
    pub predicted: Prediction,
    pub rejected_alternatives: Vec<Alternative>,
}

fn online() -> Origin {
    Origin::Online
}

/// The numbers that triggered a proposal; absent ones do not apply to its policy.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Trigger {
    pub hot_windows: u32,
    /// When the hot streak began: the first pass whose load window showed the trigger held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub onset_ms: Option<i64>,
    /// When the hysteresis was met (the streak reached `hot_windows`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detected_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition_demand_ops_per_sec: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition_limit_ops_per_sec: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition_rejected_per_sec: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition_growth_ops_per_sec_per_sec: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_key_share_ratio: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequential_write_ratio: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_load_ratio: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_over_mean: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cv: Option<f64>,
    /// A split ahead of a forecast peak (policy `peak_ahead`): the start of the peak's hour. It
    /// is judged in that hour against the forecast (`partition_demand_ops_per_sec` over
    /// `partition_limit_ops_per_sec`), not right after it settles, when the peak has not come yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_at_ms: Option<i64>,
}

/// Predicted loads before and after, as ratios of capacity (partition: of its limit).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Prediction {
    pub target_before_ratio: f64,
    pub target_after_ratio: f64,
    pub source_before_ratio: f64,
    pub source_after_ratio: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dest_before_ratio: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dest_after_ratio: Option<f64>,
    pub cluster_max_before_ratio: f64,
    pub cluster_max_after_ratio: f64,
    pub cluster_mean_ratio: f64,
    /// What the data movement was charged (capacity points), 0 for a split.
    pub cost_ratio: f64,
    /// Where the load lands as the planner predicts it: a move's destination, or the worker the
    /// storage's own placement will pick for a group isolation (the evaluation checks that it
    /// did).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dest_worker: Option<crate::ids::WorkerId>,
}

/// A candidate the planner considered and did not take.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Alternative {
    pub candidate: String,
    pub why: String,
}

/// A trigger that got no action this pass, and why (cooldown, cap, no destination, ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Declined {
    pub policy: Policy,
    pub subject: String,
    /// The kind of reason, a bounded set (`lb_master_declines_total{policy,reason}`).
    #[serde(default)]
    pub reason: DeclineReason,
    /// The reason in words, with its numbers.
    pub why: String,
}

/// Why a trigger got no action, as a bounded set: what TiKV's split controller counts per
/// rejection reason, for the decisions dashboard.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum DeclineReason {
    /// The global halt switch is on.
    Halted,
    /// An action on the subject is in flight.
    InFlight,
    /// The subject was acted on recently and waits out its cooldown.
    Cooldown,
    /// A cap on actions (per pass, in flight in the cluster or per worker) is reached.
    Cap,
    /// The partition is already isolated in a group: only more capacity helps.
    AlreadyIsolated,
    /// A new split child waits for its first key sketch before it is split again.
    AwaitingSketch,
    /// A split child is itself hot: it is split before it is moved.
    SplitFirst,
    /// No move or split passes the gain test (nothing worth its cost).
    NoGain,
    /// Every remedy (split, move, isolation) was considered and none is possible.
    #[default]
    NoRemedy,
    /// Every worker a move could drain is at its action cap or would overload while streaming.
    SourceAtLimit,
    /// Every place the action could put its load (a move's destination, a split's pieces, a
    /// group's workers) would pass the high watermark, with the load already in flight there
    /// counted, and is not a lesser evil (under capacity and cooler than the source).
    DestinationOverloaded,
    /// The action would carry load out of its zone (only other zones have room, or a merge or
    /// isolation would land in another zone), and `zones.cross` keeps load in its zone.
    CrossZone,
}

impl DeclineReason {
    pub const ALL: [DeclineReason; 12] = [
        DeclineReason::Halted,
        DeclineReason::InFlight,
        DeclineReason::Cooldown,
        DeclineReason::Cap,
        DeclineReason::AlreadyIsolated,
        DeclineReason::AwaitingSketch,
        DeclineReason::SplitFirst,
        DeclineReason::NoGain,
        DeclineReason::NoRemedy,
        DeclineReason::SourceAtLimit,
        DeclineReason::DestinationOverloaded,
        DeclineReason::CrossZone,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DeclineReason::Halted => "halted",
            DeclineReason::InFlight => "in_flight",
            DeclineReason::Cooldown => "cooldown",
            DeclineReason::Cap => "cap",
            DeclineReason::AlreadyIsolated => "already_isolated",
            DeclineReason::AwaitingSketch => "awaiting_sketch",
            DeclineReason::SplitFirst => "split_first",
            DeclineReason::NoGain => "no_gain",
            DeclineReason::NoRemedy => "no_remedy",
            DeclineReason::SourceAtLimit => "source_at_limit",
            DeclineReason::DestinationOverloaded => "destination_overloaded",
            DeclineReason::CrossZone => "cross_zone",
        }
    }
}

/// Counters of one pass, for metrics and the console.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PlanStats {
    pub partitions: usize,
    pub workers: usize,
    pub hot_partitions: usize,
    pub overloaded_workers: usize,
    pub imbalance_engaged: bool,
    pub max_load_ratio: f64,
    pub mean_load_ratio: f64,
    pub cv: f64,
    pub in_flight: usize,
    /// Declined items beyond the kept list (bounded to keep a pass cheap).
    pub declined_dropped: usize,
}
