//! Lineage from topology changes: which new partitions came from which old ones.
//!
//! The storage system reports layouts, not events, so the master compares consecutive
//! topologies. A partition id that is new is linked to the old partitions of the same table whose
//! key ranges overlap it: one old partition that covered it is a split (the child inherits its
//! key-range share of the parent's history), several old partitions inside it are a merge (the
//! child's history is their sum). Ids that persist need nothing: their own history continues.

use std::collections::HashSet;

use lb_common::ids::{KeyRange, PartitionId};
use lb_common::protocol::{PartitionInfo, Topology};

#[derive(Debug, Clone, PartialEq)]
pub enum Lineage {
    /// `share_ratio`: the child's part of the parent's key range before the split.
    Split {
        parent: PartitionId,
        child: PartitionId,
        share_ratio: f64,
    },
    Merge {
        parents: Vec<PartitionId>,
        child: PartitionId,
    },
}

fn overlaps(a: &KeyRange, b: &KeyRange) -> bool {
    a.start <= b.end && b.start <= a.end
}

fn covers(outer: &KeyRange, inner: &KeyRange) -> bool {
    outer.start <= inner.start && inner.end <= outer.end
}

/// The lineage links that take `old` to `new`, in the order of `new`'s partitions.
pub fn lineage(old: &Topology, new: &Topology) -> Vec<Lineage> {
    let known: HashSet<&PartitionId> = old.partitions.iter().map(|p| &p.id).collect();
    let mut links = Vec::new();
    for child in new.partitions.iter().filter(|p| !known.contains(&p.id)) {
        let sources: Vec<&PartitionInfo> = old
            .partitions
            .iter()
            .filter(|p| p.tenant == child.tenant && p.table == child.table && overlaps(&p.range, &child.range))
            .collect();
        match sources.as_slice() {
            [] => {}
            [parent] if covers(&parent.range, &child.range) => links.push(Lineage::Split {
                parent: parent.id.clone(),
                child: child.id.clone(),
                share_ratio: child.range.width() / parent.range.width(),
            }),
            parents => links.push(Lineage::Merge {
                parents: parents.iter().map(|p| p.id.clone()).collect(),
                child: child.id.clone(),
            }),
        }
    }
    links
}

#[cfg(test)]
mod tests {
    use lb_common::ids::Key;
    use lb_common::protocol::ActionKind;

    use super::*;

    fn part(id: &str, start: u64, end: u64) -> PartitionInfo {
        PartitionInfo {
            id: id.parse().expect("id"),
            tenant: "acme".parse().expect("id"),
            table: "orders".parse().expect("id"),
            range: KeyRange { start: Key(start), end: Key(end) },
            owner: "w-1".parse().expect("id"),
            group: None,
            stored_bytes: 0,
            limit: None,
            supported_actions: ActionKind::ALL.to_vec(),
        }
    }

    fn topo(parts: Vec<PartitionInfo>) -> Topology {
        Topology {
            version: 1,
            workers: vec![],
            partitions: parts,
            datasets: vec![],
            new_group_dedicates_owner: false,
            multi_way_split: false,
            move_rate_limit: false,
            merge_to_worker: false,
        }
    }

    fn pid(s: &str) -> PartitionId {
        s.parse().expect("id")
    }

    #[test]
    fn a_split_that_keeps_the_parent_id_links_only_the_new_half() {
        let old = topo(vec![part("a", 0, 99), part("b", 100, 199)]);
        let new = topo(vec![part("a", 0, 49), part("a2", 50, 99), part("b", 100, 199)]);
        assert_eq!(lineage(&old, &new), [Lineage::Split { parent: pid("a"), child: pid("a2"), share_ratio: 0.5 }]);
    }

    #[test]
    fn a_split_into_two_new_ids_links_both() {
        let old = topo(vec![part("a", 0, 99)]);
        let new = topo(vec![part("x", 0, 49), part("y", 50, 99)]);
        assert_eq!(
            lineage(&old, &new),
            [
                Lineage::Split { parent: pid("a"), child: pid("x"), share_ratio: 0.5 },
                Lineage::Split { parent: pid("a"), child: pid("y"), share_ratio: 0.5 }
            ]
        );
    }

    #[test]
    fn a_merge_into_a_new_id_links_every_parent() {
        let old = topo(vec![part("a", 0, 49), part("b", 50, 99), part("c", 100, 199)]);
        let new = topo(vec![part("ab", 0, 99), part("c", 100, 199)]);
        assert_eq!(lineage(&old, &new), [Lineage::Merge { parents: vec![pid("a"), pid("b")], child: pid("ab") }]);
    }

    #[test]
    fn unchanged_and_unrelated_partitions_link_nothing() {
        let old = topo(vec![part("a", 0, 99)]);
        assert!(lineage(&old, &old).is_empty());
        let mut other_table = part("z", 0, 99);
        other_table.table = "events".parse().expect("id");
        assert!(lineage(&old, &topo(vec![part("a", 0, 99), other_table])).is_empty());
    }
}
