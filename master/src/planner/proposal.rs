//! What the planner outputs: its proposals, what it declined, and its counters (the vocabulary
//! lives in [`lb_common::protocol::proposals`]).

pub use lb_common::protocol::proposals::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub proposals: Vec<Proposal>,
    /// The first [`super::MAX_DECLINED_PER_PASS`] declines, with why.
    pub rejected: Vec<Declined>,
    /// Every decline of the pass counted by policy and reason, those beyond the kept list too.
    pub declined_counts: Vec<(Policy, DeclineReason, u32)>,
    pub stats: PlanStats,
    /// The hot partitions the pass saw (indices into the input's partitions).
    pub hot: Vec<usize>,
    /// Each worker's load as a ratio of its capacity, as the pass measured it (input order).
    pub worker_load_ratios: Vec<f64>,
}
