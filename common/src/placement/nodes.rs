//! Shard → node table with stable, append-only node slots.
//!
//! Shard `j` of `S` maps to token position `permutation(S)[j]`, and each token position belongs to a
//! node slot. A node keeps its slot for life whatever its name sorts like, so:
//! * **adding** `T` tokens (a joining node, or a node getting more tokens) appends `T` positions and
//!   moves at most `T` existing shards, all to that node (the permutation property);
//! * **removing** `T` tokens re-assigns positions so that every surviving shard keeps its owner unless
//!   that owner is over its new token count: at most `T` surviving shards move.
//!
//! The table is a function of the join/leave history, not of the node set alone: one writer (the
//! master) owns it and publishes [`NodeTable::positions`]; readers rebuild with [`NodeTable::from_parts`].

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::error::PlacementError;
use super::ids::NodeSlot;
use super::permutation::permutation;

/// Upper bound on total tokens (= shards); keeps unwrapped subring coordinates and u32 ids safe.
pub const MAX_SHARDS: u32 = 1 << 24;

/// One node's persisted row: its name and current token count (0 = left, slot kept).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRow {
    pub name: String,
    pub tokens: u32,
}

/// Nodes in slot order, token positions, and the derived shard → node table.
#[derive(Clone, Debug, Default)]
pub struct NodeTable {
    nodes: Vec<NodeRow>,
    by_name: HashMap<String, NodeSlot>,
    positions: Vec<NodeSlot>,
    shard_nodes: Vec<NodeSlot>,
}

impl NodeTable {
    /// An empty table (0 shards).
    pub fn new() -> Self {
        Self::default()
    }

    /// Rebuilds a table published by [`NodeTable::nodes`] and [`NodeTable::positions`].
    pub fn from_parts(nodes: Vec<NodeRow>, positions: Vec<NodeSlot>) -> Result<Self, PlacementError> {
        let mut counts = vec![0u32; nodes.len()];
        for p in &positions {
            let c = counts.get_mut(p.as_index()).ok_or(PlacementError::InconsistentNodeTable)?;
            *c += 1;
        }
        if counts.iter().zip(&nodes).any(|(c, n)| *c != n.tokens) {
            return Err(PlacementError::InconsistentNodeTable);
        }
        let mut by_name = HashMap::with_capacity(nodes.len());
        for (i, n) in nodes.iter().enumerate() {
            let slot = NodeSlot(u32::try_from(i).map_err(|_| PlacementError::InconsistentNodeTable)?);
            if by_name.insert(n.name.clone(), slot).is_some() {
                return Err(PlacementError::InconsistentNodeTable);
            }
        }
        let mut table = Self { nodes, by_name, positions, shard_nodes: Vec::new() };
        table.rebuild_shards();
        Ok(table)
    }

    /// Node rows in slot order (slot `i` is `nodes()[i]`).
    pub fn nodes(&self) -> &[NodeRow] {
        &self.nodes
    }

    /// Token position → node slot (what a writer publishes).
    pub fn positions(&self) -> &[NodeSlot] {
        &self.positions
    }

    /// Shard index → node slot.
    pub fn shard_nodes(&self) -> &[NodeSlot] {
        &self.shard_nodes
    }

    /// Total shards `S` (= total tokens).
    pub fn shard_count(&self) -> u32 {
        u32::try_from(self.shard_nodes.len()).expect("shard count bounded by MAX_SHARDS")
    }

    /// The slot of `name`, if it ever joined.
    pub fn slot(&self, name: &str) -> Option<NodeSlot> {
        self.by_name.get(name).copied()
    }

    /// The name in `slot`.
    pub fn name(&self, slot: NodeSlot) -> Option<&str> {
        self.nodes.get(slot.as_index()).map(|n| n.name.as_str())
    }

    /// Joins `name` (new slot appended at the end) or changes its token count; returns its slot.
    pub fn set_tokens(&mut self, name: &str, tokens: u32) -> Result<NodeSlot, PlacementError> {
        let slot = match self.by_name.get(name) {
            Some(s) => *s,
            None => {
                let slot = NodeSlot(u32::try_from(self.nodes.len()).expect("fewer slots than shards"));
                self.nodes.push(NodeRow { name: name.to_owned(), tokens: 0 });
                self.by_name.insert(name.to_owned(), slot);
                slot
            }
        };
        let old = self.nodes[slot.as_index()].tokens;
        if tokens > old {
            let shards = u64::from(self.shard_count()) + u64::from(tokens - old);
            if shards > u64::from(MAX_SHARDS) {
                return Err(PlacementError::TooManyShards { shards, max: u64::from(MAX_SHARDS) });
            }
            self.nodes[slot.as_index()].tokens = tokens;
            self.positions.extend(std::iter::repeat_n(slot, (tokens - old) as usize));
            self.rebuild_shards();
        } else if tokens < old {
            self.nodes[slot.as_index()].tokens = tokens;
            self.shrink();
        }
        Ok(slot)
    }

    /// Takes all tokens from `name` (its slot is kept for a later re-join). Returns its slot.
    pub fn remove(&mut self, name: &str) -> Option<NodeSlot> {
        let slot = self.slot(name)?;
        self.set_tokens(name, 0).expect("removing tokens cannot exceed the shard limit");
        Some(slot)
    }

    fn rebuild_shards(&mut self) {
        let perm = permutation(u32::try_from(self.positions.len()).expect("bounded by MAX_SHARDS"));
        self.shard_nodes = perm.iter().map(|&p| self.positions[p as usize]).collect();
    }

    /// Re-assigns positions after token counts dropped: each surviving shard keeps its owner while
    /// that owner has capacity left; freed positions go to nodes with spare tokens (lowest slot first).
    fn shrink(&mut self) {
        let new_shards: u32 = self.nodes.iter().map(|n| n.tokens).sum();
        let perm = permutation(new_shards);
        let mut assigned = vec![0u32; self.nodes.len()];
        let mut positions: Vec<Option<NodeSlot>> = vec![None; new_shards as usize];
        for (shard, &position) in perm.iter().enumerate() {
            let owner = self.shard_nodes[shard];
            let i = owner.as_index();
            if assigned[i] < self.nodes[i].tokens {
                assigned[i] += 1;
                positions[position as usize] = Some(owner);
            }
        }
        let mut spare =
            self.nodes.iter().enumerate().flat_map(|(i, n)| std::iter::repeat_n(i, (n.tokens - assigned[i]) as usize));
        self.positions = positions
            .into_iter()
            .map(|p| {
                p.unwrap_or_else(|| {
                    let i = spare.next().expect("spare tokens equal free positions");
                    NodeSlot(u32::try_from(i).expect("slot fits u32"))
                })
            })
            .collect();
        self.rebuild_shards();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn moved(before: &[NodeSlot], after: &[NodeSlot]) -> usize {
        before.iter().zip(after).filter(|(a, b)| a != b).count()
    }

    fn owned_counts(t: &NodeTable) -> Vec<u32> {
        let mut c = vec![0u32; t.nodes().len()];
        for s in t.shard_nodes() {
            c[s.as_index()] += 1;
        }
        c
    }

    #[test]
    fn seg_10_joining_moves_only_its_tokens() {
        let mut t = NodeTable::new();
        for i in 0..10 {
            t.set_tokens(&format!("seg-{i}"), 4).unwrap();
        }
        let before = t.shard_nodes().to_vec();
        t.set_tokens("seg-10", 4).unwrap();
        let after = t.shard_nodes();
        assert!(moved(&before, after) <= 4, "Pyroscope moves 31 of 40 here");
        let new_slot = t.slot("seg-10").unwrap();
        assert!(before.iter().zip(after).all(|(a, b)| a == b || *b == new_slot));
    }

    #[test]
    fn rejoin_keeps_slot_and_roundtrip() {
        let mut t = NodeTable::new();
        for n in ["a", "b", "c"] {
            t.set_tokens(n, 4).unwrap();
        }
        let b = t.remove("b").unwrap();
        assert_eq!(t.shard_count(), 8);
        assert!(t.shard_nodes().iter().all(|s| *s != b));
        assert_eq!(t.set_tokens("b", 2).unwrap(), b);
        let copy = NodeTable::from_parts(t.nodes().to_vec(), t.positions().to_vec()).unwrap();
        assert_eq!(copy.shard_nodes(), t.shard_nodes());
        assert!(NodeTable::from_parts(t.nodes().to_vec(), vec![]).is_err());
    }

    #[derive(Debug, Clone)]
    enum Op {
        Set(usize, u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        (0usize..12, 0u32..9).prop_map(|(n, t)| Op::Set(n, t))
    }

    proptest! {
        /// Minimal movement: changing one node's tokens by Δ moves at most |Δ| of the surviving
        /// shards; balance: every node owns exactly its token count of shards.
        #[test]
        fn minimal_movement_and_balance(ops in proptest::collection::vec(op(), 1..40)) {
            let mut t = NodeTable::new();
            for Op::Set(node, tokens) in ops {
                let name = format!("node-{}", (node * 7919) % 97);
                let old = t.slot(&name).map_or(0, |s| t.nodes()[s.as_index()].tokens);
                let before = t.shard_nodes().to_vec();
                let slot = t.set_tokens(&name, tokens).unwrap();
                let after = t.shard_nodes();
                let delta = old.abs_diff(tokens) as usize;
                prop_assert!(moved(&before, after) <= delta, "moved {} > delta {}", moved(&before, after), delta);
                if tokens > old {
                    // Growth only ever moves shards onto the changed node.
                    prop_assert!(before.iter().zip(after).all(|(a, b)| a == b || *b == slot));
                }
                let counts = owned_counts(&t);
                for (i, n) in t.nodes().iter().enumerate() {
                    prop_assert_eq!(counts[i], n.tokens);
                }
            }
        }
    }
}
