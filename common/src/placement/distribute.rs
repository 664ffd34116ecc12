//! Three-level placement: tenant subring → dataset subring → shard → node.

use xxhash_rust::xxh3::xxh3_64;

use super::ids::{NodeSlot, ShardId};
use super::nodes::NodeTable;
use super::subring::{FallbackShards, Subring};

/// Separator between label names and values when fingerprinting (not valid UTF-8, so unambiguous).
const LABEL_SEPARATOR: u8 = 0xFF;

/// The three hashes a placement needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DistributionKey {
    /// Hash of the tenant id: picks the tenant subring start.
    pub tenant_hash: u64,
    /// Hash of the dataset name: picks the dataset subring start inside the tenant subring.
    pub dataset_hash: u64,
    /// Hash of the series labels: picks the shard under [`ShardPick::Fingerprint`].
    pub fingerprint: u64,
}

impl DistributionKey {
    /// Hashes with XXH3-64: the tenant id, the dataset name, and the labels in the given order as
    /// `name 0xFF value 0xFF …` (the caller decides the order; nothing is sorted).
    pub fn new(tenant_id: &str, dataset_name: &str, labels: &[(&str, &str)]) -> Self {
        let mut buf = Vec::with_capacity(labels.iter().map(|(n, v)| n.len() + v.len() + 2).sum());
        for (name, value) in labels {
            buf.extend_from_slice(name.as_bytes());
            buf.push(LABEL_SEPARATOR);
            buf.extend_from_slice(value.as_bytes());
            buf.push(LABEL_SEPARATOR);
        }
        Self {
            tenant_hash: xxh3_64(tenant_id.as_bytes()),
            dataset_hash: xxh3_64(dataset_name.as_bytes()),
            fingerprint: xxh3_64(&buf),
        }
    }
}

/// How the shard inside the dataset subring is picked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShardPick {
    /// `fingerprint mod dataset_shards`: one series always lands on one shard.
    Fingerprint,
    /// `seq mod dataset_shards`: the caller advances `seq` (a counter; no RNG, no clock here).
    RoundRobin { seq: u64 },
}

/// Requested subring sizes and the pick mode for one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardPolicy {
    /// Tenant subring size; 0 or more than the ring means the whole ring.
    pub tenant_shards: u32,
    /// Dataset subring size; clamped to `1..=tenant size`.
    pub dataset_shards: u32,
    pub pick: ShardPick,
}

/// Where a key goes: its 1-based shard id and the subrings that produced it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardPlacement {
    pub shard: ShardId,
    pub tenant: Subring,
    pub dataset: Subring,
    /// Relative offset of the picked shard inside the dataset subring.
    pub pick_offset: u64,
}

impl ShardPlacement {
    /// 0-based absolute index of [`ShardPlacement::shard`].
    pub fn shard_index(&self) -> u32 {
        self.shard.index().expect("a placement never holds the unassigned shard")
    }

    /// Shards in fallback order (picked shard first, each shard once).
    pub fn fallback_shards(&self) -> FallbackShards {
        FallbackShards::new(self.dataset, self.pick_offset)
    }
}

/// Places `key` on a ring of `shard_count` shards. `None` when the ring has no shards (shard 0).
#[inline]
pub fn place_shard(shard_count: u32, key: &DistributionKey, policy: &ShardPolicy) -> Option<ShardPlacement> {
    if shard_count == 0 {
        return None;
    }
    let s = u64::from(shard_count);
    let t = match u64::from(policy.tenant_shards) {
        0 => s,
        t if t > s => s,
        t => t,
    };
    let d = u64::from(policy.dataset_shards).clamp(1, t);
    let tenant = Subring::whole(s).sub(key.tenant_hash, t);
    let dataset = tenant.sub(key.dataset_hash, d);
    let pick_offset = match policy.pick {
        ShardPick::Fingerprint => key.fingerprint % d,
        ShardPick::RoundRobin { seq } => seq % d,
    };
    let index = u32::try_from(dataset.at(pick_offset)).expect("shard index below shard count");
    Some(ShardPlacement { shard: ShardId::from_index(index), tenant, dataset, pick_offset })
}

/// The absolute shard indices of a dataset's subring on a ring of `shard_count` shards, in pick
/// order (offset 0 first): where [`place_shard`] sends the dataset's keys under `tenant_shards`
/// and `dataset_shards`. Empty on an empty ring. What a reshard's new subring will be, read
/// before it runs.
pub fn dataset_shard_indices(
    shard_count: u32,
    key: &DistributionKey,
    tenant_shards: u32,
    dataset_shards: u32,
) -> Vec<u32> {
    let policy = ShardPolicy { tenant_shards, dataset_shards, pick: ShardPick::RoundRobin { seq: 0 } };
    let Some(p) = place_shard(shard_count, key, &policy) else { return Vec::new() };
    (0..p.dataset.size()).map(|i| u32::try_from(p.dataset.at(i)).expect("shard index below shard count")).collect()
}

/// A shard placement resolved to its node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodePlacement {
    pub placement: ShardPlacement,
    pub node: NodeSlot,
}

/// Places `key` over an explicit shard → node table (`shard_nodes[i]` owns shard index `i`).
#[inline]
pub fn place_on(shard_nodes: &[NodeSlot], key: &DistributionKey, policy: &ShardPolicy) -> Option<NodePlacement> {
    let count = u32::try_from(shard_nodes.len()).expect("shard table bounded by MAX_SHARDS");
    let placement = place_shard(count, key, policy)?;
    let node = shard_nodes[placement.shard_index() as usize];
    Some(NodePlacement { placement, node })
}

/// Nodes in fallback order for `placement` (one per shard, not de-duplicated).
pub fn fallback_nodes<'a>(
    shard_nodes: &'a [NodeSlot],
    placement: &ShardPlacement,
) -> impl Iterator<Item = NodeSlot> + 'a {
    placement.fallback_shards().map(move |s| shard_nodes[s as usize])
}

impl NodeTable {
    /// Full tenant → dataset → shard → node placement; `None` when there are no shards.
    #[inline]
    pub fn place(&self, key: &DistributionKey, policy: &ShardPolicy) -> Option<NodePlacement> {
        place_on(self.shard_nodes(), key, policy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const KEY: DistributionKey = DistributionKey {
        tenant_hash: 2651437022102841674,
        dataset_hash: 9799744458953393282,
        fingerprint: 1676327119535413705,
    };

    fn table(v: &[u32]) -> Vec<NodeSlot> {
        v.iter().map(|&s| NodeSlot(s)).collect()
    }

    fn policy(t: u32, d: u32) -> ShardPolicy {
        ShardPolicy { tenant_shards: t, dataset_shards: d, pick: ShardPick::Fingerprint }
    }

    fn order(shards: &[NodeSlot], p: &ShardPlacement, names: &[&str]) -> String {
        fallback_nodes(shards, p).map(|s| names[s.as_index()]).collect::<Vec<_>>().join(" ")
    }

    type Row = (u32, u32, (u64, u64, u64, u64), (u64, u64, u64, u64), u64, u32, &'static str);

    /// End-to-end vectors of reference §1.6 over the reference shard tables.
    #[test]
    fn end_to_end_vectors() {
        let abc = table(&[2, 1, 0, 1, 1, 2, 2, 0, 1, 0, 0, 2]);
        let rows3: [Row; 7] = [
            (0, 1, (0, 12, 7, 19), (7, 19, 8, 9), 0, 9, "b a a c c b a b b c c a"),
            (0, 2, (0, 12, 7, 19), (7, 19, 8, 10), 1, 10, "a b a c c b a b b c c a"),
            (8, 4, (0, 12, 7, 15), (7, 15, 8, 12), 1, 10, "a a c b c b a a b b c c"),
            (8, 3, (0, 12, 7, 15), (7, 15, 8, 11), 1, 10, "a a b c c b a a b b c c"),
            (4, 8, (0, 12, 7, 11), (7, 11, 8, 12), 1, 10, "a a a b c c b a b b c c"),
            (3, 1, (0, 12, 7, 10), (7, 10, 8, 9), 0, 9, "b a a a c c b a b b c c"),
            (100, 100, (0, 12, 7, 19), (7, 19, 8, 20), 1, 10, "a a c c b a b b c c a b"),
        ];
        let five = table(&[2, 1, 0, 4, 3, 2, 3, 0, 3, 4, 0, 4, 1, 4, 1, 2, 2, 0, 3, 1]);
        let rows5: [Row; 3] = [
            (0, 1, (0, 20, 7, 27), (7, 27, 8, 9), 0, 9, "3 4 0 4 1 4 1 2 2 0 3 1 2 1 0 4 3 2 3 0"),
            (8, 4, (0, 20, 7, 15), (7, 15, 8, 12), 1, 10, "4 0 4 3 1 4 1 0 2 2 0 3 1 2 1 0 4 3 2 3"),
            (100, 100, (0, 20, 7, 27), (7, 27, 8, 28), 5, 14, "4 1 2 2 0 3 1 2 1 0 4 3 2 3 0 3 4 0 4 1"),
        ];
        let cases = rows3.iter().map(|r| (&abc, &["a", "b", "c"][..], r));
        let cases = cases.chain(rows5.iter().map(|r| (&five, &["0", "1", "2", "3", "4"][..], r)));
        for (shards, names, &(t, d, ten, ds, pick, id, want)) in cases {
            let n = shards.len() as u64;
            let p = place_on(shards, &KEY, &policy(t, d)).unwrap().placement;
            assert_eq!(p.tenant, Subring::from_parts(n, ten.0, ten.1, ten.2, ten.3), "T={t} D={d}");
            assert_eq!(p.dataset, Subring::from_parts(n, ds.0, ds.1, ds.2, ds.3), "T={t} D={d}");
            assert_eq!(p.pick_offset, pick);
            assert_eq!(p.shard, ShardId(id));
            assert_eq!(order(shards, &p, names), want, "T={t} D={d}");
        }
    }

    /// `Test_Distributor_Distribute` worked example: all hashes 14046587775414411003, T=8, D=4.
    #[test]
    fn distributor_worked_example() {
        let shards = table(&[2, 1, 0, 1, 1, 2, 2, 0, 1, 0, 0, 2]);
        let h = 14046587775414411003;
        let key = DistributionKey { tenant_hash: h, dataset_hash: h, fingerprint: h };
        let want = ["a b b a a", "b b a a a", "b a a b a", "a a b b a"];
        for (seq, w) in want.iter().enumerate() {
            let pol =
                ShardPolicy { tenant_shards: 8, dataset_shards: 4, pick: ShardPick::RoundRobin { seq: seq as u64 } };
            let p = place_on(&shards, &key, &pol).unwrap().placement;
            assert_eq!(p.tenant, Subring::from_parts(12, 0, 12, 8, 16));
            assert_eq!(p.dataset, Subring::from_parts(12, 8, 16, 14, 18));
            let got: Vec<&str> = fallback_nodes(&shards, &p).take(5).map(|s| ["a", "b", "c"][s.as_index()]).collect();
            assert_eq!(got.join(" "), *w);
        }
        // "pick 2 with 13 requested": asking for 13 instances yields exactly the 12 shards.
        let pol = ShardPolicy { tenant_shards: 8, dataset_shards: 4, pick: ShardPick::RoundRobin { seq: 2 } };
        let p = place_on(&shards, &key, &pol).unwrap().placement;
        let got: Vec<&str> = fallback_nodes(&shards, &p).take(13).map(|s| ["a", "b", "c"][s.as_index()]).collect();
        assert_eq!(got.join(" "), "b a a b a c c b b c c a");
    }

    /// `Test_Distribution_AvailableShards` and the empty-ring mapping.
    #[test]
    fn available_shards_and_empty_ring() {
        let shards = table(&[0, 1, 2]);
        for (t, d) in [(0, 0), (1, 1), (1024, 512), (1024, 2048)] {
            let p = place_on(&shards, &KEY, &policy(t, d)).unwrap().placement;
            assert_eq!(p.fallback_shards().count(), 3);
        }
        assert!(place_on(&[], &KEY, &policy(1, 1)).is_none());
        let one = table(&[0]);
        assert_eq!(place_on(&one, &KEY, &policy(1, 1)).unwrap().placement.fallback_shards().count(), 1);
    }

    /// `Test_RingUpdate`: a node without tokens contributes no shards.
    #[test]
    fn ring_update_with_tokenless_node() {
        let mut t = NodeTable::new();
        t.set_tokens("a", 1).unwrap();
        t.set_tokens("b", 0).unwrap();
        let p = t.place(&KEY, &policy(1, 1)).unwrap();
        assert_eq!(p.placement.fallback_shards().count(), 1);
        assert_eq!(t.name(p.node), Some("a"));
    }

    #[test]
    fn large_ring_and_node_table() {
        let mut t = NodeTable::new();
        for i in 0..5 {
            t.set_tokens(&format!("seg-{i}"), 1024).unwrap();
        }
        let key = DistributionKey::new("tenant-a", "my-service", &[("foo", "bar")]);
        let p = t.place(&key, &policy(0, 4)).unwrap();
        assert_eq!(p.node, t.shard_nodes()[p.placement.shard_index() as usize]);
        assert_eq!(p.placement.fallback_shards().count(), 5120);
    }

    proptest! {
        /// Every shard appears exactly once in the fallback order, the picked shard first, the
        /// dataset subring before the rest of the tenant subring before the rest of the ring.
        #[test]
        fn fallback_visits_each_shard_once_in_level_order(
            n in 1u32..200, t in 0u32..250, d in 0u32..250,
            th in any::<u64>(), dh in any::<u64>(), fp in any::<u64>(),
        ) {
            let key = DistributionKey { tenant_hash: th, dataset_hash: dh, fingerprint: fp };
            let p = place_shard(n, &key, &policy(t, d)).unwrap();
            let order: Vec<u64> = p.fallback_shards().collect();
            prop_assert_eq!(order.len(), n as usize);
            prop_assert_eq!(order[0], u64::from(p.shard_index()));
            let mut seen = vec![false; n as usize];
            for &s in &order { prop_assert!(!seen[s as usize]); seen[s as usize] = true; }
            let ds = p.dataset.size() as usize;
            let ts = p.tenant.size() as usize;
            let in_dataset: std::collections::HashSet<u64> = (0..p.dataset.size()).map(|i| p.dataset.at(i)).collect();
            let in_tenant: std::collections::HashSet<u64> = (0..p.tenant.size()).map(|i| p.tenant.at(i)).collect();
            prop_assert!(order[..ds].iter().all(|s| in_dataset.contains(s)));
            prop_assert!(order[..ts].iter().all(|s| in_tenant.contains(s)));
        }

        /// Balance: fingerprint picks spread keys evenly over the dataset subring.
        #[test]
        fn dataset_subring_size_is_clamped(n in 1u32..100, t in 0u32..150, d in 0u32..150) {
            let p = place_shard(n, &KEY, &policy(t, d)).unwrap();
            let ts = if t == 0 || t > n { n } else { t };
            prop_assert_eq!(p.tenant.size(), u64::from(ts));
            prop_assert_eq!(p.dataset.size(), u64::from(d.clamp(1, ts)));
            prop_assert!(p.shard.0 >= 1 && p.shard.0 <= n);
        }
    }

    #[test]
    fn fingerprint_pick_is_balanced() {
        let shards = 64u32;
        let pol = policy(16, 8);
        let mut counts = std::collections::HashMap::new();
        for i in 0..80_000u64 {
            let key = DistributionKey {
                tenant_hash: 7,
                dataset_hash: 11,
                fingerprint: i.wrapping_mul(0x9E37_79B9_7F4A_7C15),
            };
            *counts.entry(place_shard(shards, &key, &pol).unwrap().shard).or_insert(0u32) += 1;
        }
        assert_eq!(counts.len(), 8);
        assert!(counts.values().all(|&c| (9_000..11_000).contains(&c)), "{counts:?}");
    }
}
