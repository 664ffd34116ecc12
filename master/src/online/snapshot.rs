//! What each online pass publishes: one immutable [`PassSnapshot`] on a `watch` channel, which
//! the read API serves and a live stream (the console's) can follow without locking anything
//! the loop uses. The type is the API's (`lb_common::protocol::PassSnapshot`).

pub use lb_common::protocol::PassSnapshot;

use super::core::MAX_DECLINED_RECORDED;
use crate::planner::Declined;

/// The first declined items as a snapshot keeps them, and how many there were.
pub(crate) fn declined_of(rejected: &[Declined], dropped: usize) -> (Vec<Declined>, usize) {
    (rejected[..rejected.len().min(MAX_DECLINED_RECORDED)].to_vec(), rejected.len() + dropped)
}
