//! The leadership seam: whether this master may act (submit, approve, revert, reshard).
//!
//! Every master collects and keeps its table warm and serves the read API; only the leader
//! runs the acting half of the online loop. [`SingleLeader`] — the default, one master and no
//! external service — is always the leader. An elected implementation (etcd, issue 23) answers
//! from its lease and says who leads otherwise; its epoch will fence the actions it submits.

use std::fmt::Debug;

pub use lb_common::protocol::LeadershipStatus;

/// Decides whether this master may act. Cheap to ask: the online loop asks at every pass.
pub trait Leadership: Send + Sync + Debug {
    fn status(&self) -> LeadershipStatus;

    fn is_leader(&self) -> bool {
        self.status().leader
    }
}

/// One master, always the leader (`[leadership] backend = "single"`, the default).
#[derive(Debug, Default, Clone, Copy)]
pub struct SingleLeader;

impl Leadership for SingleLeader {
    fn status(&self) -> LeadershipStatus {
        LeadershipStatus { leader: true, backend: "single".to_owned(), epoch: None, leader_address: None }
    }
}
