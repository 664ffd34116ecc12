//! The actor trees: one tree per tenant, all nodes in one arena so that nodes (and their queue
//! buffers) are reused instead of reallocated when actors come and go.
//!
//! Dequeue order inside a tree is Loki's `TreeQueue.Dequeue`: at every node the local queue and
//! each non-empty child take equal turns (`local, child0, child1, …`), the cursor persists across
//! calls, and a child that a dequeue leaves empty is removed from the rotation at once.

use std::collections::VecDeque;
use std::sync::Arc;

use super::mapping::{CURSOR_LOCAL, CURSOR_START, Mapping, SlotCursor};

/// Index of a node in the [`Forest`] arena.
pub(crate) type NodeId = usize;

#[derive(Debug)]
struct Node<T> {
    /// Segment name (the tenant name for a root); kept to remove the node from its parent.
    name: Arc<str>,
    /// Items queued at this node itself.
    local: VecDeque<T>,
    /// Non-empty children in rotation order.
    children: Mapping<NodeId>,
    /// Round-robin cursor: `CURSOR_LOCAL` (local queue next), or the slot last served.
    cursor: SlotCursor,
    /// Items in this subtree (local + all descendants).
    len: usize,
}

/// Arena holding the nodes of every tenant tree.
///
/// Invariant: every node reachable from a root through `children` holds at least one item
/// (`len > 0`); a node whose subtree drains is unlinked and returned to the free list.
#[derive(Debug)]
pub(crate) struct Forest<T> {
    nodes: Vec<Node<T>>,
    /// Released nodes, reused before the arena grows.
    free: Vec<NodeId>,
}

impl<T> Default for Forest<T> {
    fn default() -> Self {
        Self { nodes: Vec::new(), free: Vec::new() }
    }
}

impl<T> Forest<T> {
    /// Allocates an empty node named `name`, reusing a released one (and its buffers) if any.
    pub(crate) fn alloc(&mut self, name: Arc<str>) -> NodeId {
        if let Some(id) = self.free.pop() {
            let node = &mut self.nodes[id];
            debug_assert!(node.local.is_empty() && node.children.is_empty() && node.len == 0);
            node.name = name;
            node.cursor = CURSOR_LOCAL;
            node.children.clear();
            return id;
        }
        self.nodes.push(Node {
            name,
            local: VecDeque::new(),
            children: Mapping::default(),
            cursor: CURSOR_LOCAL,
            len: 0,
        });
        self.nodes.len() - 1
    }

    /// Returns an empty node to the free list (its children must already be released).
    pub(crate) fn release(&mut self, id: NodeId) {
        let node = &mut self.nodes[id];
        debug_assert_eq!(node.len, 0, "released node still holds items");
        debug_assert!(node.children.is_empty(), "released node still has children");
        self.free.push(id);
    }

    /// Items in the subtree of `id`.
    pub(crate) fn len(&self, id: NodeId) -> usize {
        self.nodes[id].len
    }

    pub(crate) fn name(&self, id: NodeId) -> &Arc<str> {
        &self.nodes[id].name
    }

    /// Pushes `item` at the node reached from `root` along `path`, creating missing children.
    ///
    /// Infallible on purpose: the caller validates the path and the limits first, so a failed
    /// enqueue never leaves a node behind.
    pub(crate) fn push<S: AsRef<str>>(&mut self, root: NodeId, path: &[S], item: T) {
        let mut id = root;
        self.nodes[id].len += 1;
        for segment in path {
            let segment = segment.as_ref();
            let child = match self.nodes[id].children.get(segment) {
                Some(&child) => child,
                None => {
                    let name: Arc<str> = Arc::from(segment);
                    let child = self.alloc(Arc::clone(&name));
                    self.nodes[id].children.put(name, child);
                    child
                }
            };
            self.nodes[child].len += 1;
            id = child;
        }
        self.nodes[id].local.push_back(item);
    }

    /// Dequeues the next item of the subtree of `id` in Loki's hierarchical round-robin order.
    pub(crate) fn pop(&mut self, id: NodeId) -> Option<T> {
        if self.nodes[id].children.is_empty() {
            // Leaf shortcut: only the local queue (the cursor is left alone, as in Loki).
            let node = &mut self.nodes[id];
            let item = node.local.pop_front()?;
            node.len -= 1;
            return Some(item);
        }
        // One full rotation visits the local queue and every slot once, empty slots included.
        let turns = self.nodes[id].children.slot_count() + 1;
        for _ in 0..turns {
            let node = &mut self.nodes[id];
            if node.cursor == CURSOR_LOCAL {
                node.cursor = CURSOR_START;
                if let Some(item) = node.local.pop_front() {
                    node.len -= 1;
                    return Some(item);
                }
            }
            let Some((slot, &child)) = node.children.get_next(node.cursor) else {
                node.cursor = CURSOR_LOCAL;
                continue;
            };
            node.cursor = isize::try_from(slot).expect("slot count fits in isize");
            // Recursion depth is bounded by the configured maximum path depth.
            if let Some(item) = self.pop(child) {
                if self.nodes[child].len == 0 {
                    let name = Arc::clone(&self.nodes[child].name);
                    self.nodes[id].children.remove(&name);
                    self.release(child);
                }
                self.nodes[id].len -= 1;
                return Some(item);
            }
        }
        None
    }

    /// Removes the first item that `matches` from the local queue of the node reached from
    /// `root` along `path`, and unlinks every node below the root that the removal left empty
    /// (the caller releases the root), exactly as [`Forest::pop`] does when it drains a child.
    /// Freed slots are never compacted, so every cursor stays valid. `None` (nothing changed)
    /// when the path or the item is not there.
    pub(crate) fn remove<S: AsRef<str>>(
        &mut self,
        root: NodeId,
        path: &[S],
        matches: impl FnMut(&T) -> bool,
    ) -> Option<T> {
        let mut chain = Vec::with_capacity(path.len() + 1);
        let mut id = root;
        chain.push(id);
        for segment in path {
            id = *self.nodes[id].children.get(segment.as_ref())?;
            chain.push(id);
        }
        let local = &mut self.nodes[id].local;
        let position = local.iter().position(matches)?;
        let item = local.remove(position).expect("position came from this queue");
        for &node in &chain {
            self.nodes[node].len -= 1;
        }
        // Bottom-up: a node emptied by the removal had only the chain below it.
        for pair in chain.windows(2).rev() {
            let (parent, child) = (pair[0], pair[1]);
            if self.nodes[child].len > 0 {
                break;
            }
            let name = Arc::clone(&self.nodes[child].name);
            self.nodes[parent].children.remove(&name);
            self.release(child);
        }
        Some(item)
    }

    /// Checks the tree invariants below `id` and returns its item count (tests only).
    #[cfg(test)]
    pub(crate) fn check_subtree(&self, id: NodeId) -> usize {
        let node = &self.nodes[id];
        node.children.check_consistent();
        let mut total = node.local.len();
        for &child in node.children.values() {
            let child_len = self.check_subtree(child);
            assert!(child_len > 0, "empty child {} left in rotation", self.nodes[child].name);
            total += child_len;
        }
        assert_eq!(total, node.len, "cached len of {}", node.name);
        total
    }

    /// Number of nodes in the subtree of `id`, itself included (tests only).
    #[cfg(test)]
    pub(crate) fn subtree_node_count(&self, id: NodeId) -> usize {
        1 + self.nodes[id].children.values().map(|&child| self.subtree_node_count(child)).sum::<usize>()
    }

    /// Number of nodes currently in use (tests only).
    #[cfg(test)]
    pub(crate) fn live_nodes(&self) -> usize {
        self.nodes.len() - self.free.len()
    }

    /// Number of children in rotation at the node reached by `path` (tests only).
    #[cfg(test)]
    pub(crate) fn child_count(&self, root: NodeId, path: &[&str]) -> Option<usize> {
        let mut id = root;
        for segment in path {
            id = *self.nodes[id].children.get(segment)?;
        }
        Some(self.nodes[id].children.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(forest: &mut Forest<u32>, root: NodeId) -> Vec<u32> {
        std::iter::from_fn(|| forest.pop(root)).collect()
    }

    /// Loki `TestTreeQueue/round-robin`.
    #[test]
    fn children_take_turns_round_robin() {
        let mut f = Forest::default();
        let root = f.alloc("t".into());
        for item in [100, 101, 102] {
            f.push(root, &["a"], item);
        }
        f.push(root, &["b"], 200);
        for item in [300, 301] {
            f.push(root, &["c"], item);
        }
        assert_eq!(drain(&mut f, root), vec![100, 200, 300, 101, 301, 102]);
        assert_eq!(f.check_subtree(root), 0);
    }

    /// Loki `TestTreeQueue/empty sub-queues are removed`.
    #[test]
    fn drained_children_leave_the_rotation() {
        let mut f = Forest::default();
        let root = f.alloc("t".into());
        f.push(root, &["a"], 1);
        f.push(root, &["b"], 2);
        assert_eq!(f.child_count(root, &[]), Some(2));
        assert_eq!(f.pop(root), Some(1));
        assert_eq!(f.child_count(root, &[]), Some(1));
        assert_eq!(f.pop(root), Some(2));
        assert_eq!(f.child_count(root, &[]), Some(0));
        assert_eq!(f.live_nodes(), 1, "only the root is left");
    }

    /// Loki `TestTreeQueue/add sub queues recursively`.
    #[test]
    fn shared_prefixes_share_nodes() {
        let mut f = Forest::default();
        let root = f.alloc("t".into());
        f.push(root, &["l0", "l1", "l3"], 1);
        f.push(root, &["l0", "l2", "l3"], 2);
        assert_eq!(f.child_count(root, &[]), Some(1));
        assert_eq!(f.child_count(root, &["l0"]), Some(2));
        assert_eq!(f.check_subtree(root), 2);
    }

    /// Issue 17 item 11: a removal unlinks the nodes it empties and leaves the rest in turn.
    #[test]
    fn remove_takes_one_item_and_unlinks_emptied_nodes() {
        let mut f = Forest::default();
        let root = f.alloc("t".into());
        f.push(root, &["a", "x"], 1);
        f.push(root, &["a"], 2);
        f.push(root, &["b"], 3);
        assert_eq!(f.remove(root, &["a", "x"], |&i| i == 2), None, "not at that node");
        assert_eq!(f.remove(root, &["zz"], |_| true), None, "no such node");
        assert_eq!(f.remove(root, &["a", "x"], |&i| i == 1), Some(1));
        assert_eq!(f.child_count(root, &["a"]), Some(0), "the emptied leaf is unlinked");
        assert_eq!(f.check_subtree(root), 2);
        assert_eq!(f.remove(root, &["a"], |&i| i == 2), Some(2));
        assert_eq!(f.child_count(root, &[]), Some(1), "the emptied child is unlinked");
        assert_eq!(f.live_nodes(), 2, "root and b");
        assert_eq!(drain(&mut f, root), vec![3]);
    }

    #[test]
    fn released_nodes_are_reused() {
        let mut f = Forest::default();
        let root = f.alloc("t".into());
        f.push(root, &["a", "b"], 1);
        assert_eq!(f.live_nodes(), 3);
        assert_eq!(f.pop(root), Some(1));
        assert_eq!(f.live_nodes(), 1);
        f.push(root, &["c", "d"], 2);
        assert_eq!(f.live_nodes(), 3);
        assert_eq!(f.nodes.len(), 3, "arena did not grow");
    }
}
