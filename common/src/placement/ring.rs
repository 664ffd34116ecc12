//! Weighted consistent-hash ring (ketama), compatible with nginx `hash … consistent` and
//! pingora-ketama for IPv4 `ip:port` nodes.
//!
//! Points: node `i` with weight `w` gets `w × points_per_weight` points; point `k` has hash
//! `crc32(ip ++ 0x00 ++ port ++ le_bytes(hash of point k-1))` (the first uses 0). Points are sorted by
//! hash (stable: equal hashes keep input order) and later points with an already-seen hash are
//! dropped. Lookup: the first point with `hash >= crc32(key)`, wrapping to point 0.
//!
//! Layout: 6 bytes per point (`hash: u32 LE`, `node: u16 LE`, no padding) plus an index of
//! `2^bits + 1` u32 entries on the top hash bits (at most 1 byte per point, 4–8 points per bucket),
//! so a lookup reads one index entry and counts, branch-free, the points below the key hash in a
//! fixed window of 12 adjacent points, instead of a ~19-step binary search.
//!
//! Compatibility notes: equal point hashes keep the first generated point (nginx's stable sort;
//! pingora V1 picks a winner by unstable sort, so only collision points can differ). IPv6 nodes hash
//! as `::1` (pingora), not `[::1]` (nginx). [`Ring::node_iter`] yields each point once, where
//! pingora's iterator cycles forever.

use std::net::SocketAddr;

use super::error::PlacementError;
use super::ids::RingNodeIndex;
use super::ring_points::{point_hashes, radix_sort_by_high_u32};

/// Points per weight unit used by nginx and pingora-ketama V1; keeps lookups nginx-compatible.
pub const DEFAULT_POINTS_PER_WEIGHT: u32 = 160;

/// Node indices are stored as u16 (the compact point layout), so at most 65 536 nodes.
pub const MAX_RING_NODES: usize = 1 << 16;

/// Upper bound on points: 6 B/point keeps a full ring under ~400 MiB, and indices fit a u32.
pub const MAX_RING_POINTS: u64 = 1 << 26;

/// Bytes per stored point: 4 (hash) + 2 (node index).
pub const POINT_BYTES: usize = 6;

/// Points compared per lookup without branching: buckets average 4–8 points, so 12 covers ~99 %.
const SCAN_WINDOW: usize = 12;

/// Trailing sentinel point: the largest hash, node 0. A real point with hash `u32::MAX` sorts before it.
const SENTINEL: [u8; POINT_BYTES] = [0xFF, 0xFF, 0xFF, 0xFF, 0, 0];

/// One weighted node of a ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RingNode {
    pub addr: SocketAddr,
    /// Capacity weight, at least 1.
    pub weight: u32,
}

/// An immutable ketama ring.
#[derive(Clone, Debug, Default)]
pub struct Ring {
    /// Sorted points followed by [`SCAN_WINDOW`] sentinels (hash `u32::MAX`), so a fixed-length scan
    /// window never runs off the end.
    points: Vec<[u8; POINT_BYTES]>,
    /// Number of real points.
    len: usize,
    /// `index[b]` = first point whose hash's top bits are `>= b`; `index[2^bits] = len`.
    index: Vec<u32>,
    index_shift: u32,
    addrs: Vec<SocketAddr>,
}

#[inline]
fn point_hash(p: &[u8; POINT_BYTES]) -> u32 {
    u32::from_le_bytes([p[0], p[1], p[2], p[3]])
}

#[inline]
fn point_node(p: &[u8; POINT_BYTES]) -> u16 {
    u16::from_le_bytes([p[4], p[5]])
}

impl Ring {
    /// Builds a ring with `points_per_weight` points per weight unit (160 = nginx compatible).
    ///
    /// No nodes or `points_per_weight == 0` give an empty ring (every lookup returns `None`).
    pub fn build(nodes: &[RingNode], points_per_weight: u32) -> Result<Self, PlacementError> {
        if nodes.len() > MAX_RING_NODES {
            return Err(PlacementError::TooManyRingNodes { count: nodes.len(), max: MAX_RING_NODES });
        }
        if let Some(index) = nodes.iter().position(|n| n.weight == 0) {
            return Err(PlacementError::ZeroWeight { index });
        }
        let total: u64 = nodes.iter().map(|n| u64::from(n.weight) * u64::from(points_per_weight)).sum();
        if total > MAX_RING_POINTS {
            return Err(PlacementError::TooManyPoints { points: total, max: MAX_RING_POINTS });
        }
        let mut keyed = Vec::with_capacity(total as usize);
        for (i, node) in nodes.iter().enumerate() {
            let count = node.weight * points_per_weight;
            keyed.extend(point_hashes(&node.addr, count).map(|h| (u64::from(h) << 32) | i as u64));
        }
        radix_sort_by_high_u32(&mut keyed);

        let bits = index_bits(keyed.len());
        let index_shift = 32 - bits;
        let mut index = Vec::with_capacity((1 << bits) + 1);
        let mut points: Vec<[u8; POINT_BYTES]> = Vec::with_capacity(keyed.len());
        let mut last_hash: Option<u32> = None;
        for x in keyed {
            let hash = (x >> 32) as u32;
            if last_hash == Some(hash) {
                continue; // later point with an already-seen hash: dropped (nginx, pingora)
            }
            last_hash = Some(hash);
            let bucket = (u64::from(hash) >> index_shift) as usize;
            let at = u32::try_from(points.len()).expect("points bounded by MAX_RING_POINTS");
            while index.len() <= bucket {
                index.push(at);
            }
            let h = hash.to_le_bytes();
            let n = (x as u16).to_le_bytes();
            points.push([h[0], h[1], h[2], h[3], n[0], n[1]]);
        }
        let len = points.len();
        index.resize((1 << bits) + 1, u32::try_from(len).expect("points bounded by MAX_RING_POINTS"));
        points.extend(std::iter::repeat_n(SENTINEL, SCAN_WINDOW));
        Ok(Self { points, len, index, index_shift, addrs: nodes.iter().map(|n| n.addr).collect() })
    }

    /// Number of points after dropping hash collisions.
    pub fn point_count(&self) -> usize {
        self.len
    }

    /// Node addresses in input order.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// Bytes held by the points (6 per point).
    pub fn points_bytes(&self) -> usize {
        self.len * POINT_BYTES
    }

    /// Bytes of lookup acceleration: the top-bits index (at most 1 per point) plus the sentinels.
    pub fn index_bytes(&self) -> usize {
        self.index.len() * std::mem::size_of::<u32>() + SCAN_WINDOW * POINT_BYTES
    }

    /// The point at `position`: its hash and node.
    pub fn point(&self, position: usize) -> Option<(u32, RingNodeIndex)> {
        self.points[..self.len].get(position).map(|p| (point_hash(p), RingNodeIndex(point_node(p))))
    }

    /// Position of the first point with `hash >= key_hash` (wrapping to 0); `None` on an empty ring.
    #[inline]
    pub fn position_for_hash(&self, key_hash: u32) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        let bucket = (u64::from(key_hash) >> self.index_shift) as usize;
        let lo = self.index[bucket] as usize;
        // Fixed-length, branch-free scan: points past the bucket (or the trailing sentinels) have
        // hashes above `key_hash`'s bucket and never count, so no bucket end is needed. A branch-free
        // window keeps mispredictions (which would also cancel the next lookup's loads) away.
        let window = &self.points[lo..lo + SCAN_WINDOW];
        let mut below = 0;
        for p in window {
            below += usize::from(point_hash(p) < key_hash);
        }
        let mut i = lo + below;
        if below == SCAN_WINDOW {
            // Rare crowded bucket: continue one point at a time (the sentinels stop the scan).
            while point_hash(&self.points[i]) < key_hash {
                i += 1;
            }
        }
        Some(if i >= self.len { 0 } else { i })
    }

    /// Position of the point owning `key` (hashing it with CRC-32).
    #[inline]
    pub fn position(&self, key: &[u8]) -> Option<usize> {
        self.position_for_hash(crc32fast::hash(key))
    }

    /// Index of the node owning `key`.
    #[inline]
    pub fn node_index(&self, key: &[u8]) -> Option<RingNodeIndex> {
        let p = self.position(key)?;
        Some(RingNodeIndex(point_node(&self.points[p])))
    }

    /// Address of the node owning `key`.
    #[inline]
    pub fn node(&self, key: &[u8]) -> Option<SocketAddr> {
        let p = self.position(key)?;
        Some(self.addrs[point_node(&self.points[p]) as usize])
    }

    /// Failover order for `key`: the nodes of successive points starting at its point, each point
    /// once (`point_count` items; duplicates included, as in pingora's `node_iter`, which never ends).
    pub fn node_iter(&self, key: &[u8]) -> impl Iterator<Item = SocketAddr> + '_ {
        let start = self.position(key).unwrap_or(0);
        let len = self.len;
        (0..len).map(move |k| self.addrs[point_node(&self.points[(start + k) % len]) as usize])
    }
}

/// Index size: the largest `2^bits <= points / 4` (so the index costs at most 1 byte per point),
/// capped at 2^20 entries.
fn index_bits(points: usize) -> u32 {
    let quarter = (points / 4).max(1);
    (usize::BITS - 1 - quarter.leading_zeros()).min(20)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn ring(addrs: &[&str], weight: u32) -> Ring {
        let nodes: Vec<RingNode> = addrs.iter().map(|a| RingNode { addr: addr(a), weight }).collect();
        Ring::build(&nodes, DEFAULT_POINTS_PER_WEIGHT).unwrap()
    }

    fn port(r: &Ring, key: &str) -> u16 {
        r.node(key.as_bytes()).unwrap().port()
    }

    #[test]
    fn three_node_ring_vectors() {
        let r = ring(&["127.0.0.1:7777", "127.0.0.1:7778", "127.0.0.1:7779"], 1);
        assert_eq!(r.point_count(), 480);
        assert_eq!(r.point(480), None);
        let first: Vec<(u32, u16)> =
            (0..5).map(|i| r.point(i).unwrap()).map(|(h, n)| (h, r.addrs()[n.0 as usize].port())).collect();
        assert_eq!(
            first,
            vec![(1475464, 7777), (14414652, 7778), (29299196, 7778), (50042253, 7778), (66278312, 7777)]
        );
        let (h, n) = r.point(479).unwrap();
        assert_eq!((h, r.addrs()[n.0 as usize].port()), (4287822884, 7779));
        assert_eq!(r.position(b"doghash"), Some(366));
        let iter: Vec<u16> = r.node_iter(b"doghash").take(8).map(|a| a.port()).collect();
        assert_eq!(iter, vec![7778, 7779, 7779, 7777, 7777, 7778, 7778, 7779]);
        let two = ring(&["127.0.0.1:7777", "127.0.0.1:7779"], 1);
        let iter: Vec<u16> = two.node_iter(b"doghash").take(5).map(|a| a.port()).collect();
        assert_eq!(iter, vec![7779, 7779, 7777, 7777, 7779]);
        let v6 = ring(&["[::1]:7777", "[::1]:7778", "[::1]:7779"], 1);
        let iter: Vec<u16> = v6.node_iter(b"doghash").take(7).map(|a| a.port()).collect();
        assert_eq!(iter, vec![7777, 7778, 7777, 7778, 7778, 7777, 7779]);
        let single = ring(&["127.0.0.1:7777"], 1);
        assert_eq!(single.node_iter(b"doghash").count(), single.point_count());
    }

    #[test]
    fn crate_vectors() {
        let hosts: Vec<String> = (1..=10).map(|i| format!("127.0.0.{i}:6443")).collect();
        let refs: Vec<&str> = hosts.iter().map(String::as_str).collect();
        let r = ring(&refs, 1);
        assert_eq!(r.node(b"a"), Some(addr("127.0.0.10:6443")));
        assert_eq!(r.node(b"b"), Some(addr("127.0.0.5:6443")));
        let mut more = refs.clone();
        more.push("127.0.0.11:6443");
        let r = ring(&more, 1);
        assert_eq!(r.node(b"a"), Some(addr("127.0.0.10:6443")));
        assert_eq!(r.node(b"b"), Some(addr("127.0.0.5:6443")));

        let r = ring(&["127.0.0.1:7777", "127.0.0.1:7778"], 1);
        let cases = [
            ("/some/path", 7778),
            ("/some/longer/path", 7777),
            ("/sad/zaidoon", 7778),
            ("/g", 7777),
            ("/pingora/team/is/cool/and/this/is/a/long/uri", 7778),
            ("/i/am/not/confident/in/this/code", 7777),
        ];
        for (k, want) in cases {
            assert_eq!(port(&r, k), want, "{k}");
        }
    }

    #[test]
    fn load_balancing_test_ketama_vectors() {
        let r = ring(&["1.1.1.1:80", "1.0.0.1:80", "1.0.0.255:80"], 1);
        let want = [
            "1.0.0.1",
            "1.1.1.1",
            "1.1.1.1",
            "1.1.1.1",
            "1.1.1.1",
            "1.0.0.255",
            "1.1.1.1",
            "1.0.0.255",
            "1.1.1.1",
            "1.0.0.1",
        ];
        for (i, w) in want.iter().enumerate() {
            assert_eq!(r.node(format!("test{i}").as_bytes()).unwrap().ip().to_string(), *w, "test{i}");
        }
        let r2 = ring(&["1.1.1.1:80", "1.0.0.1:80"], 1);
        for i in 0..10 {
            let k = format!("test{i}");
            let (a, b) = (r.node(k.as_bytes()).unwrap(), r2.node(k.as_bytes()).unwrap());
            match i {
                5 => assert_eq!(b, addr("1.0.0.1:80")),
                7 => assert_eq!(b, addr("1.1.1.1:80")),
                _ => assert_eq!(a, b, "{k}"),
            }
        }
    }

    #[test]
    fn empty_and_invalid() {
        let empty = Ring::build(&[], 160).unwrap();
        assert_eq!(empty.node(b"x"), None);
        assert_eq!(empty.point(0), None);
        assert_eq!(empty.node_iter(b"x").count(), 0);
        let no_points = Ring::build(&[RingNode { addr: addr("10.0.0.1:1"), weight: 1 }], 0).unwrap();
        assert_eq!(no_points.node(b"x"), None);
        let zero = Ring::build(&[RingNode { addr: addr("10.0.0.1:1"), weight: 0 }], 160);
        assert_eq!(zero.unwrap_err(), PlacementError::ZeroWeight { index: 0 });
    }

    /// The bench ring: 253 nodes × weight 10 × 160 points matches pingora-ketama key by key (only
    /// hash collisions may differ: pingora's V1 collision winner depends on an unstable sort).
    #[test]
    fn matches_pingora_on_bench_ring() {
        let nodes: Vec<RingNode> = (0..253u32)
            .map(|i| RingNode {
                addr: SocketAddr::from(([10, 0, (i / 250) as u8, (i % 250 + 1) as u8], 6443)),
                weight: 10,
            })
            .collect();
        let ours = Ring::build(&nodes, DEFAULT_POINTS_PER_WEIGHT).unwrap();
        assert!(ours.points_bytes() / ours.point_count() <= 6);
        assert!(ours.index_bytes() <= ours.point_count());
        let buckets: Vec<pingora_ketama::Bucket> =
            nodes.iter().map(|n| pingora_ketama::Bucket::new(n.addr, n.weight)).collect();
        let theirs = pingora_ketama::Continuum::new(&buckets);
        let mut mismatches = 0;
        for i in 0..200_000u32 {
            let key = format!("key-{i}-{}", i.wrapping_mul(2654435761));
            if ours.node(key.as_bytes()) != theirs.node(key.as_bytes()) {
                mismatches += 1;
            }
        }
        assert!(mismatches <= 20, "mismatches {mismatches}");
    }

    /// On a large ring (~850 buckets hold more than the 12-point window) every lookup equals a
    /// plain lower bound, including hashes at point values and bucket boundaries.
    #[test]
    fn large_ring_index_equals_binary_search() {
        let nodes: Vec<RingNode> =
            (0..100u8).map(|i| RingNode { addr: SocketAddr::from(([10, 7, 0, i], 6443)), weight: 25 }).collect();
        let r = Ring::build(&nodes, DEFAULT_POINTS_PER_WEIGHT).unwrap();
        let hashes: Vec<u32> = (0..r.point_count()).map(|i| r.point(i).unwrap().0).collect();
        let mut probes: Vec<u32> = hashes.iter().flat_map(|&h| [h, h.wrapping_add(1), h.wrapping_sub(1)]).collect();
        probes.extend((0..=u16::MAX).map(|b| u32::from(b) << 16));
        probes.extend([0, u32::MAX]);
        for k in probes {
            let lb = hashes.partition_point(|&h| h < k);
            let want = if lb == hashes.len() { 0 } else { lb };
            assert_eq!(r.position_for_hash(k), Some(want), "hash {k}");
        }
    }

    proptest! {
        /// Lookup through the index equals a plain lower-bound binary search over the points.
        #[test]
        fn index_lookup_equals_binary_search(n in 1usize..40, pm in 1u32..50, keys in proptest::collection::vec(any::<u32>(), 50)) {
            let nodes: Vec<RingNode> = (0..n).map(|i| RingNode { addr: SocketAddr::from(([10, 1, (i / 200) as u8, (i % 200) as u8], 80)), weight: 1 + (i as u32 % 3) }).collect();
            let r = Ring::build(&nodes, pm).unwrap();
            let hashes: Vec<u32> = (0..r.point_count()).map(|i| r.point(i).unwrap().0).collect();
            prop_assert!(hashes.windows(2).all(|w| w[0] < w[1]));
            for k in keys.into_iter().chain([0, u32::MAX, hashes[0], hashes[hashes.len() - 1]]) {
                let lb = hashes.partition_point(|&h| h < k);
                let want = if lb == hashes.len() { 0 } else { lb };
                prop_assert_eq!(r.position_for_hash(k), Some(want));
            }
        }

        /// Minimal movement: adding a node only moves keys onto the new node.
        #[test]
        fn adding_a_node_only_moves_keys_to_it(n in 2usize..20, pm in 1u32..40) {
            let nodes: Vec<RingNode> = (0..=n).map(|i| RingNode { addr: SocketAddr::from(([10, 2, 0, i as u8], 80)), weight: 1 }).collect();
            let before = Ring::build(&nodes[..n], pm).unwrap();
            let after = Ring::build(&nodes, pm).unwrap();
            for k in 0..500u32 {
                let key = k.to_le_bytes();
                let (a, b) = (before.node(&key).unwrap(), after.node(&key).unwrap());
                prop_assert!(a == b || b == nodes[n].addr);
            }
        }
    }

    #[test]
    fn weight_proportional_balance() {
        let nodes: Vec<RingNode> = (0..10u8)
            .map(|i| RingNode { addr: SocketAddr::from(([10, 3, 0, i], 80)), weight: if i == 0 { 3 } else { 1 } })
            .collect();
        let r = Ring::build(&nodes, DEFAULT_POINTS_PER_WEIGHT).unwrap();
        let mut counts: HashMap<SocketAddr, u32> = HashMap::new();
        for k in 0..120_000u32 {
            *counts.entry(r.node(format!("k{k}").as_bytes()).unwrap()).or_default() += 1;
        }
        let heavy = f64::from(counts[&nodes[0].addr]);
        let light: f64 = (1..10).map(|i| f64::from(counts[&nodes[i].addr])).sum::<f64>() / 9.0;
        assert!((heavy / light - 3.0).abs() < 0.6, "ratio {}", heavy / light);
    }
}
