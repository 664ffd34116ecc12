//! Newtype ids that cross the placement API.

use serde::{Deserialize, Serialize};

/// A 1-based shard id; 0 ([`ShardId::UNASSIGNED`]) means "no shard".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ShardId(pub u32);

impl ShardId {
    /// The "no shard" sentinel (empty ring, or a dataset-wide statistics counter).
    pub const UNASSIGNED: ShardId = ShardId(0);

    /// Shard id of the 0-based absolute shard index `index`.
    pub fn from_index(index: u32) -> Self {
        ShardId(index.checked_add(1).expect("shard index below u32::MAX"))
    }

    /// 0-based shard index, `None` for [`ShardId::UNASSIGNED`].
    pub fn index(self) -> Option<u32> {
        self.0.checked_sub(1)
    }

    /// Whether this is the unassigned sentinel.
    pub fn is_unassigned(self) -> bool {
        self.0 == 0
    }
}

/// A node's stable, append-only slot in a [`super::nodes::NodeTable`]; never reused for another name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NodeSlot(pub u32);

impl NodeSlot {
    /// Slot as a vector index.
    pub fn as_index(self) -> usize {
        self.0 as usize
    }
}

/// Index of a node (bucket) in a [`super::ring::Ring`], in the order the nodes were given.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RingNodeIndex(pub u16);
