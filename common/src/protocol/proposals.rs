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
}

impl Policy {
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::PartitionOverload => "partition_overload",
            Policy::WorkerOverload => "worker_overload",
            Policy::Imbalance => "imbalance",
            Policy::DatasetPlacement => "dataset_placement",
            Policy::Manual => "manual",
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
}

/// Predicted loads before and after, as ratios of capacity (partition: of its limit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
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
    pub why: String,
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
