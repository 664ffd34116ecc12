//! The leadership seam: whether this master may act (submit, approve, revert, reshard).
//!
//! Every master collects and keeps its table warm and serves the read API; only the leader
//! runs the acting half of the online loop. [`SingleLeader`] — the default, one master and no
//! external service — is always the leader. [`etcd::EtcdLeadership`] (`[leadership] backend =
//! "etcd"`) campaigns in an etcd election: it leads while it holds the election and its lease
//! was renewed recently enough (it stops acting a third of the TTL before the lease can lapse
//! on the server), says who leads otherwise, and its epoch — the election key's create
//! revision, which grows with every term — fences the actions it submits at the ops server.
//! It also keeps the leader's memory (cooldowns, strikes, tracked actions, pending proposals)
//! in etcd for the next leader ([`Handover`]).

pub mod etcd;

use std::fmt::Debug;

use futures_util::future::BoxFuture;
pub use lb_common::protocol::LeadershipStatus;

/// Decides whether this master may act. Cheap to ask: the online loop asks at every pass and
/// before every submission.
pub trait Leadership: Send + Sync + Debug {
    fn status(&self) -> LeadershipStatus;

    fn is_leader(&self) -> bool {
        self.status().leader
    }

    /// The ops server refused this master's epoch (a newer leader spoke): stop acting now.
    fn fenced(&self) {}

    /// Where the leader keeps what its successor needs, when the backend has successors.
    fn handover(&self) -> Option<&dyn Handover> {
        None
    }
}

/// The leader's memory kept outside the process, written by the leader of `epoch` only.
pub trait Handover: Send + Sync + Debug {
    /// The last state a leader saved, if any.
    fn load(&self) -> BoxFuture<'_, Result<Option<Vec<u8>>, String>>;
    /// Saves `state` if this master still holds the term `epoch` (else an error).
    fn save(&self, epoch: u64, state: Vec<u8>) -> BoxFuture<'_, Result<(), String>>;
}

/// One master, always the leader (`[leadership] backend = "single"`, the default).
#[derive(Debug, Default, Clone, Copy)]
pub struct SingleLeader;

impl Leadership for SingleLeader {
    fn status(&self) -> LeadershipStatus {
        LeadershipStatus { leader: true, backend: "single".to_owned(), epoch: None, leader_address: None }
    }
}
