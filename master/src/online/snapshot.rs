//! What each online pass publishes: one immutable [`PassSnapshot`] on a `watch` channel, which
//! the read API serves and a live stream (the console's) can follow without locking anything
//! the loop uses.

use lb_common::protocol::PlacementRules;
use serde::{Deserialize, Serialize};

use super::core::MAX_DECLINED_RECORDED;
use crate::executor::Pending;
use crate::leadership::LeadershipStatus;
use crate::planner::{Declined, PlanStats, Proposal};

/// The outcome of the latest online pass.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PassSnapshot {
    /// Passes published since the master started (0: none yet).
    pub pass: u64,
    /// When the pass ran, and where its load windows ended.
    pub at_ms: Option<i64>,
    pub window_end_ms: Option<i64>,
    /// Who may act; a standby publishes snapshots without proposals.
    pub leadership: Option<LeadershipStatus>,
    /// The online planner's counters: hot partitions, overloaded workers, pool max/mean and CV.
    pub stats: PlanStats,
    /// Every proposal of the pass, from every analyzer (submitted or offered).
    pub proposals: Vec<Proposal>,
    /// The first declined items with why (as in the analysis record).
    pub declined: Vec<Declined>,
    pub declined_total: usize,
    /// Dry-run proposals waiting for approval.
    pub pending: Vec<Pending>,
    /// The placement rules routers read.
    pub placement_rules: Option<PlacementRules>,
}

impl PassSnapshot {
    pub(crate) fn declined_of(rejected: &[Declined], dropped: usize) -> (Vec<Declined>, usize) {
        (rejected[..rejected.len().min(MAX_DECLINED_RECORDED)].to_vec(), rejected.len() + dropped)
    }
}
