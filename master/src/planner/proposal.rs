//! What the planner outputs: its proposals, what it declined, and its counters (the vocabulary
//! lives in [`lb_common::protocol::proposals`]).

pub use lb_common::protocol::proposals::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub proposals: Vec<Proposal>,
    pub rejected: Vec<Declined>,
    pub stats: PlanStats,
}
