//! The leadership seam: whether this master may act (submit, approve, revert, reshard).
//!
//! Every master collects and keeps its table warm and serves the read API; only the leader
//! runs the acting half of the online loop. [`SingleLeader`] — the default, one master and no
//! external service — is always the leader. An elected implementation (etcd, issue 23) answers
//! from its lease and says who leads otherwise; its epoch will fence the actions it submits.

use std::fmt::Debug;

/// What a master knows about leadership right now.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LeadershipStatus {
    /// This master may act.
    pub leader: bool,
    /// The backend deciding it (`single`, later `etcd`).
    pub backend: String,
    /// The current leadership term, when the backend has terms (fencing epoch).
    pub epoch: Option<u64>,
    /// Who leads, when it is not this master and the backend knows.
    pub leader_address: Option<String>,
}

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
