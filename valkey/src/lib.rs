//! lb's foundation for Valkey and Redis Cluster backends.
//!
//! Valkey Cluster spreads keys over 16,384 hash slots, each owned by one primary. lb treats a
//! slot as a partition and a node as a worker; everything it needs from the cluster goes through
//! this crate, talking to one node at a time (no cluster client: lb must see each node's own
//! view, and must know which node a command reached).
//!
//! - [`slot`]: slots, slot ranges and the CRC16 key → slot mapping.
//! - [`naming`]: a slot as lb's partition (`slot-NNNNN` of table `slots`, its key range), for
//!   the agent and the ops server alike.
//! - [`node_id`]: node ids and addresses.
//! - [`connection`]: one node, with a connect timeout, a per-command deadline, optional AUTH,
//!   and errors that say whether a command certainly did not run or may have run.
//! - [`reply`]: pure parsers for `CLUSTER SLOT-STATS`, `INFO`, `CLUSTER MYID`, `CLUSTER NODES`,
//!   `CLUSTER INFO`, `CLUSTER GETSLOTMIGRATIONS` and `CLUSTER MIGRATESLOTS`, each documenting the
//!   exact reply shape of valkey-server 9.1.2.
//! - [`local`]: a [`LocalCluster`] of real `valkey-server` processes on loopback for tests and
//!   the launcher, and how the binary is found (or installed by `scripts/install-valkey.sh`).

pub mod connection;
pub mod local;
pub mod metrics;
pub mod naming;
pub mod node_id;
pub mod reply;
mod resp;
pub mod slot;

pub use connection::{ConnectOptions, NodeClient, NodeError};
pub use local::{LocalCluster, LocalClusterConfig, LocalClusterError, find_valkey_server};
pub use node_id::{NodeAddr, NodeId};
pub use slot::{SLOT_COUNT, Slot, SlotRange, key_slot};
