//! Zone-aware placement: one [`NodeTable`] per availability zone, the caller's home zone first,
//! then the other allowed zones in a per-tenant rendezvous order.
//!
//! # Problem
//! Traffic between availability zones is billed per byte by the clouds and adds a network hop, so
//! data written by a router in zone A should land on a node in zone A whenever one is up. One
//! shard ring over all nodes ignores that: Pyroscope v2's segment-writer distribution (reference
//! §1.4–1.7) places over a single ring of every healthy writer, so with distributors and writers
//! spread evenly over three zones about two thirds of the pushes cross a zone. Running it per zone needs placement that
//! knows zones, keeps a zone's keys inside it, and still has a deterministic answer when a whole
//! zone is lost.
//!
//! # The rule
//! Each zone has its own [`NodeTable`] (its own shard count `S_z`, permutation and append-only
//! node slots). A key is placed by trying zones in this order (the *zone order*):
//! 1. the caller's `home` zone, if it is allowed;
//! 2. the other allowed zones by descending rendezvous weight
//!    `xxh3_64_with_seed(zone id bytes, key.tenant_hash)` ([`zone_weight`]); equal weights (a
//!    2⁻⁶⁴ event) by descending zone id.
//!
//! Allowed zones are the dataset's `zones` rule ([`super::rules::DatasetPlacement::zones`]), empty
//! meaning every zone of the table; zones the table does not know have no nodes and are not in
//! the order. Inside a zone the key is placed exactly as [`NodeTable::place`] does over that zone's
//! table (tenant subring → dataset subring → shard, the same policy, clamped to `S_z`), then that
//! zone's fallback order ([`fallback_nodes`]) is walked to the first healthy node. A zone with no
//! healthy node owning shards is skipped as a whole; [`ZonedNodeTable::place`] returns `None`
//! only when no zone in the order has one.
//!
//! The weight depends on the tenant only, so all datasets of a tenant fall back to the same zone
//! (their tenant subring stays together), while the tenants of a lost zone spread evenly over the
//! remaining zones instead of all landing on one ("next zone in name order" would double the
//! load of a single neighbour). Rendezvous hashing also means that losing or disallowing a zone
//! never reorders the others: a tenant's second choice only moves if its first choice was lost.
//!
//! # Membership
//! A node's tokens live in exactly one zone, its zone ([`ZonedNodeTable::zone_of`]). Setting tokens
//! for a node in another zone than its own is refused ([`ZoneError::NodeInOtherZone`]) while it
//! holds tokens there; moving is explicit: [`ZonedNodeTable::remove`] (0 tokens, slot kept in the
//! old zone's table, as slots are append-only) then [`ZonedNodeTable::set_tokens`] in the new
//! zone. So a name may have rows in several zones' tables, but tokens in at most one.
//!
//! # Invariants (each has a test)
//! * One zone (as home, or as the only allowed zone, or with no home) places bit for bit like a
//!   plain [`NodeTable`]: same shard placement, and the first healthy node of its fallback order.
//! * Balance inside a zone: every node owns exactly its token count of its zone's shards.
//! * Zones are independent: changing one zone's tokens by Δ moves at most Δ of that zone's
//!   shards (growth moves them only onto that node) and changes no other zone's shard table; a key
//!   placed in its own home zone elsewhere keeps its placement (health unchanged). Growing zone Z
//!   moves keys (all healthy) only into or inside Z, and a key that keeps its shard only onto the
//!   new node. Keys of Z may change shard when `S_z` changes, because subrings are relative to the
//!   shard count: that is [`NodeTable::place`]'s behaviour too (one node of 16 tokens joining ten
//!   such nodes changes the node of about 59 % of keys at T=0, D=1 and 19 % at T=16, D=4, over
//!   half of them onto old nodes), not something zones add.
//! * The zone order visits each allowed zone the table knows exactly once, home first.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use thiserror::Error;
use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::distribute::{DistributionKey, ShardPlacement, ShardPolicy, fallback_nodes, place_shard};
use super::error::PlacementError;
use super::ids::NodeSlot;
use super::nodes::{MAX_SHARDS, NodeRow, NodeTable};
use crate::ids::ZoneId;

/// Unhealthy shards walked in one zone before checking whether the zone has any healthy node at
/// all. Only a shortcut (the answer is the same without it): it keeps a lost zone at `O(nodes)`
/// health checks instead of `O(shards)`, while a zone with a few nodes down rarely gets this far.
const UNHEALTHY_BEFORE_ZONE_CHECK: u32 = 8;

/// Why a change or a published zone table was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ZoneError {
    /// Tokens for a node that holds tokens in another zone: remove it there first.
    #[error("node {node:?} holds {tokens} tokens in zone {zone}; remove it there before adding it to zone {requested}")]
    NodeInOtherZone { node: String, zone: ZoneId, tokens: u32, requested: ZoneId },
    /// A published table whose zone memberships disagree with its node rows.
    #[error("zone table is inconsistent for node {node:?}: {reason}")]
    InconsistentZones { node: String, reason: &'static str },
    /// A zone's own table was refused (too many shards, or positions that do not match tokens).
    #[error("zone {zone}: {source}")]
    Zone { zone: ZoneId, source: PlacementError },
}

/// Rendezvous weight of `zone` for a tenant: `xxh3_64_with_seed(zone id bytes, tenant_hash)`.
/// Fallback zones are tried by descending weight.
#[inline]
pub fn zone_weight(zone: &ZoneId, tenant_hash: u64) -> u64 {
    xxh3_64_with_seed(zone.as_str().as_bytes(), tenant_hash)
}

/// One zone's published table: [`NodeTable::nodes`] and [`NodeTable::positions`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZoneTableParts {
    pub nodes: Vec<NodeRow>,
    pub positions: Vec<NodeSlot>,
}

/// What the writer publishes and readers rebuild with [`ZonedNodeTable::from_parts`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZonedTableParts {
    /// Every zone's table, by zone id.
    pub zones: BTreeMap<ZoneId, ZoneTableParts>,
    /// Every node name that has a row in any zone's table → its zone (where its tokens are, or,
    /// with 0 tokens, the zone it joined last).
    pub node_zones: BTreeMap<String, ZoneId>,
}

/// Per-zone node tables and each node's zone.
#[derive(Clone, Debug, Default)]
pub struct ZonedNodeTable {
    zones: BTreeMap<ZoneId, NodeTable>,
    node_zones: HashMap<String, ZoneId>,
}

/// Where a key went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZonedPlacement<'a> {
    /// The zone placed in.
    pub zone: &'a ZoneId,
    /// The node's slot in that zone's table.
    pub node: NodeSlot,
    /// The node's name.
    pub node_name: &'a str,
    /// The key's shard placement over the zone's ring; its shard is the picked one even when
    /// [`ZonedPlacement::shard_rank`] > 0 (the node writes into that shard for locality).
    pub placement: ShardPlacement,
    /// Whether `zone` is the caller's home zone.
    pub home: bool,
    /// Zones tried before this one in the zone order (0: the first choice, the home zone when it is
    /// allowed and known). Above 0 the key fell back to another zone.
    pub zone_rank: u32,
    /// Shards skipped in the zone's fallback order because their node was unhealthy (0: the picked
    /// shard's node).
    pub shard_rank: u32,
}

impl ZonedPlacement<'_> {
    /// Whether the key left its first choice: another zone, or another node than the picked shard's.
    pub fn fell_back(&self) -> bool {
        self.zone_rank > 0 || self.shard_rank > 0
    }
}

impl ZonedNodeTable {
    /// No zones, no nodes.
    pub fn new() -> Self {
        Self::default()
    }

    /// Rebuilds a table published by [`ZonedNodeTable::parts`]. Checks every zone's table, that
    /// every named node has a row in its zone and no tokens elsewhere, and that every row's name
    /// has a zone.
    pub fn from_parts(parts: ZonedTableParts) -> Result<Self, ZoneError> {
        let mut zones = BTreeMap::new();
        for (zone, p) in parts.zones {
            let table = NodeTable::from_parts(p.nodes, p.positions)
                .map_err(|source| ZoneError::Zone { zone: zone.clone(), source })?;
            zones.insert(zone, table);
        }
        for (zone, table) in &zones {
            for row in table.nodes() {
                match parts.node_zones.get(&row.name) {
                    None => {
                        return Err(ZoneError::InconsistentZones { node: row.name.clone(), reason: "it has no zone" });
                    }
                    Some(z) if z != zone && row.tokens > 0 => {
                        return Err(ZoneError::InconsistentZones {
                            node: row.name.clone(),
                            reason: "it holds tokens outside its zone",
                        });
                    }
                    Some(_) => {}
                }
            }
        }
        for (node, zone) in &parts.node_zones {
            if zones.get(zone).and_then(|t| t.slot(node)).is_none() {
                return Err(ZoneError::InconsistentZones { node: node.clone(), reason: "its zone has no row for it" });
            }
        }
        Ok(Self { zones, node_zones: parts.node_zones.into_iter().collect() })
    }

    /// The published form: every zone's rows and positions, and every node's zone.
    pub fn parts(&self) -> ZonedTableParts {
        ZonedTableParts {
            zones: self
                .zones
                .iter()
                .map(|(z, t)| {
                    (z.clone(), ZoneTableParts { nodes: t.nodes().to_vec(), positions: t.positions().to_vec() })
                })
                .collect(),
            node_zones: self.node_zones.iter().map(|(n, z)| (n.clone(), z.clone())).collect(),
        }
    }

    /// Zones in id order with their tables (a zone stays once created, even with no tokens left).
    pub fn zones(&self) -> impl Iterator<Item = (&ZoneId, &NodeTable)> {
        self.zones.iter()
    }

    /// One zone's table.
    pub fn zone(&self, zone: &ZoneId) -> Option<&NodeTable> {
        self.zones.get(zone)
    }

    /// The zone of `node`: where its tokens are, or, with none, the zone it joined last.
    pub fn zone_of(&self, node: &str) -> Option<&ZoneId> {
        self.node_zones.get(node)
    }

    /// Joins `node` to `zone` or changes its token count there; returns its slot in the zone's table.
    ///
    /// Refused with [`ZoneError::NodeInOtherZone`] while the node holds tokens in another zone. A
    /// node with 0 tokens in its old zone moves (its old row stays, slots are append-only).
    pub fn set_tokens(&mut self, zone: &ZoneId, node: &str, tokens: u32) -> Result<NodeSlot, ZoneError> {
        if let Some(current) = self.node_zones.get(node).filter(|z| *z != zone) {
            let held = self.tokens_in(current, node);
            if held > 0 {
                return Err(ZoneError::NodeInOtherZone {
                    node: node.to_owned(),
                    zone: current.clone(),
                    tokens: held,
                    requested: zone.clone(),
                });
            }
        }
        // Checked here so that a refused change leaves no trace (no new zone, no new row).
        let shards = u64::from(self.zones.get(zone).map_or(0, NodeTable::shard_count))
            - u64::from(self.tokens_in(zone, node))
            + u64::from(tokens);
        if shards > u64::from(MAX_SHARDS) {
            let source = PlacementError::TooManyShards { shards, max: u64::from(MAX_SHARDS) };
            return Err(ZoneError::Zone { zone: zone.clone(), source });
        }
        let table = self.zones.entry(zone.clone()).or_default();
        let slot = table.set_tokens(node, tokens).expect("the shard limit was checked above");
        match self.node_zones.get_mut(node) {
            Some(z) => z.clone_from(zone),
            None => {
                self.node_zones.insert(node.to_owned(), zone.clone());
            }
        }
        Ok(slot)
    }

    /// Takes all tokens from `node` in its zone (its slot there is kept). Returns its zone and slot.
    pub fn remove(&mut self, node: &str) -> Option<(ZoneId, NodeSlot)> {
        let zone = self.node_zones.get(node)?.clone();
        let slot = self.zones.get_mut(&zone)?.remove(node)?;
        Some((zone, slot))
    }

    fn tokens_in(&self, zone: &ZoneId, node: &str) -> u32 {
        self.zones.get(zone).and_then(|t| t.slot(node).map(|s| t.nodes()[s.as_index()].tokens)).unwrap_or_default()
    }

    /// The zone order for a key of tenant hash `tenant_hash` (see the module doc): `home` if
    /// allowed, then the other allowed zones the table knows by descending [`zone_weight`].
    pub fn zone_order<'a, 'b>(
        &'a self,
        home: Option<&ZoneId>,
        allowed: &'b [ZoneId],
        tenant_hash: u64,
    ) -> impl Iterator<Item = (&'a ZoneId, &'a NodeTable)> + use<'a, 'b> {
        let home = self.allowed_home(home, allowed);
        home.into_iter().chain(self.rendezvous(home, allowed, tenant_hash))
    }

    /// `home` and its table when the table knows it and it is allowed.
    #[inline]
    fn allowed_home(&self, home: Option<&ZoneId>, allowed: &[ZoneId]) -> Option<(&ZoneId, &NodeTable)> {
        let home = home?;
        let (zone, table) = self.zones.get_key_value(home)?;
        (allowed.is_empty() || allowed.contains(home)).then_some((zone, table))
    }

    fn rendezvous<'a, 'b>(
        &'a self,
        home: Option<(&'a ZoneId, &'a NodeTable)>,
        allowed: &'b [ZoneId],
        tenant_hash: u64,
    ) -> Rendezvous<'a, 'b> {
        Rendezvous { table: self, allowed, tenant_hash, skip: home.map(|(z, _)| z), last: None }
    }

    /// Places `key` zone-aware (see the module doc): in the first zone of the zone order that has
    /// a healthy node owning shards, on the first healthy node of that zone's fallback order.
    /// `healthy` is asked by node name. `None` when no allowed zone has a healthy node.
    pub fn place(
        &self,
        home: Option<&ZoneId>,
        allowed: &[ZoneId],
        key: &DistributionKey,
        policy: &ShardPolicy,
        healthy: impl Fn(&str) -> bool,
    ) -> Option<ZonedPlacement<'_>> {
        let home = self.allowed_home(home, allowed);
        if let Some((zone, table)) = home
            && let Some(p) = place_in_zone(zone, table, true, 0, key, policy, &healthy)
        {
            return Some(p);
        }
        let first = u32::from(home.is_some());
        (first..)
            .zip(self.rendezvous(home, allowed, key.tenant_hash))
            .find_map(|(rank, (z, t))| place_in_zone(z, t, false, rank, key, policy, &healthy))
    }
}

/// Places `key` in one zone's table and walks its fallback order to the first healthy node;
/// `None` when the zone has no healthy node owning shards.
#[inline]
fn place_in_zone<'a>(
    zone: &'a ZoneId,
    table: &'a NodeTable,
    home: bool,
    zone_rank: u32,
    key: &DistributionKey,
    policy: &ShardPolicy,
    healthy: &impl Fn(&str) -> bool,
) -> Option<ZonedPlacement<'a>> {
    let placement = place_shard(table.shard_count(), key, policy)?;
    let mut shard_rank = 0u32;
    for node in fallback_nodes(table.shard_nodes(), &placement) {
        let node_name = table.name(node).expect("a shard's node has a row");
        if healthy(node_name) {
            return Some(ZonedPlacement { zone, node, node_name, placement, home, zone_rank, shard_rank });
        }
        shard_rank += 1;
        if shard_rank == UNHEALTHY_BEFORE_ZONE_CHECK && !table.nodes().iter().any(|n| n.tokens > 0 && healthy(&n.name))
        {
            return None;
        }
    }
    None
}

/// The allowed zones (all of the table's when `allowed` is empty) except `skip`, by descending
/// `(weight, zone id)`; picks the next one by a scan each step, so it allocates nothing (zones
/// are few, and only a lost zone asks for more than the first).
struct Rendezvous<'a, 'b> {
    table: &'a ZonedNodeTable,
    allowed: &'b [ZoneId],
    tenant_hash: u64,
    skip: Option<&'a ZoneId>,
    /// The last zone yielded: the next one is the greatest below it.
    last: Option<(u64, &'a ZoneId)>,
}

impl<'a> Iterator for Rendezvous<'a, '_> {
    type Item = (&'a ZoneId, &'a NodeTable);

    fn next(&mut self) -> Option<Self::Item> {
        let mut best: Option<(u64, &'a ZoneId, &'a NodeTable)> = None;
        let mut consider = |zone: &'a ZoneId, table: &'a NodeTable| {
            if self.skip == Some(zone) {
                return;
            }
            let key = (zone_weight(zone, self.tenant_hash), zone);
            if self.last.is_some_and(|last| key >= last) {
                return;
            }
            if best.is_none_or(|(w, z, _)| key > (w, z)) {
                best = Some((key.0, zone, table));
            }
        };
        if self.allowed.is_empty() {
            self.table.zones.iter().for_each(|(z, t)| consider(z, t));
        } else {
            for z in self.allowed {
                if let Some((z, t)) = self.table.zones.get_key_value(z) {
                    consider(z, t);
                }
            }
        }
        let (w, z, t) = best?;
        self.last = Some((w, z));
        Some((z, t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::distribute::ShardPick;
    use crate::placement::ids::ShardId;
    use crate::rng::SplitMix64;
    use proptest::prelude::*;

    /// Reference §1.6 key (tenant-a, my-service, [foo=bar, baz=qux, service_name=my-service]).
    const KEY: DistributionKey = DistributionKey {
        tenant_hash: 2651437022102841674,
        dataset_hash: 9799744458953393282,
        fingerprint: 1676327119535413705,
    };

    fn z(s: &str) -> ZoneId {
        ZoneId::new(s).unwrap()
    }

    fn policy(t: u32, d: u32) -> ShardPolicy {
        ShardPolicy { tenant_shards: t, dataset_shards: d, pick: ShardPick::Fingerprint }
    }

    fn all(_: &str) -> bool {
        true
    }

    /// Zones `eu-1a`, `eu-1b`, `eu-1c`, each with nodes `<zone>/a`, `<zone>/b`, `<zone>/c` × 4 tokens
    /// joined in that order, so every zone's shard → node table is `c b c a a a b a c c b b`.
    fn three_zones() -> ZonedNodeTable {
        let mut t = ZonedNodeTable::new();
        for zone in ["eu-1a", "eu-1b", "eu-1c"] {
            for n in ["a", "b", "c"] {
                t.set_tokens(&z(zone), &format!("{zone}/{n}"), 4).unwrap();
            }
        }
        t
    }

    fn order<'a>(t: &'a ZonedNodeTable, home: Option<&ZoneId>, allowed: &'a [ZoneId], tenant: u64) -> Vec<&'a str> {
        t.zone_order(home, allowed, tenant).map(|(z, _)| z.as_str()).collect()
    }

    /// Pinned rendezvous weights and orders: any change to the weight function fails here.
    #[test]
    fn pinned_zone_weights_and_order() {
        let t = three_zones();
        let weights: Vec<u64> =
            ["eu-1a", "eu-1b", "eu-1c"].iter().map(|s| zone_weight(&z(s), KEY.tenant_hash)).collect();
        assert_eq!(weights, PINNED_WEIGHTS);
        assert_eq!(order(&t, None, &[], KEY.tenant_hash), PINNED_ORDER_NO_HOME);
        assert_eq!(order(&t, Some(&z("eu-1b")), &[], KEY.tenant_hash), PINNED_ORDER_HOME_B);
        let other = DistributionKey::new("tenant-b", "my-service", &[]).tenant_hash;
        assert_eq!(other, 3343601787605537307);
        assert_eq!(order(&t, None, &[], other), PINNED_ORDER_TENANT_B);
    }

    /// `zone_weight` of `eu-1a`, `eu-1b`, `eu-1c` for `KEY.tenant_hash` (xxhash-rust 0.8.21).
    const PINNED_WEIGHTS: [u64; 3] = [16427974391940422523, 12762363907333070734, 14805417682816302158];
    /// Descending weight: a > c > b.
    const PINNED_ORDER_NO_HOME: [&str; 3] = ["eu-1a", "eu-1c", "eu-1b"];
    /// Home first, then the rest by weight.
    const PINNED_ORDER_HOME_B: [&str; 3] = ["eu-1b", "eu-1a", "eu-1c"];
    /// Tenant `tenant-b` (XXH3 3343601787605537307): b 4261166294212510005 > c 3075005883955065087
    /// > a 2586300848030566844.
    const PINNED_ORDER_TENANT_B: [&str; 3] = ["eu-1b", "eu-1c", "eu-1a"];

    /// Home healthy → home; home all down → the next zone of the pinned order; then the one after.
    ///
    /// `KEY`, T=8, D=4 over a zone's 12 shards: shard id 10 (as reference §1.6), fallback nodes
    /// `c b b c c b c a a a a b`.
    #[test]
    fn fallback_order_home_then_rendezvous() {
        let t = three_zones();
        let home = z("eu-1b");
        let pol = policy(8, 4);
        let p = t.place(Some(&home), &[], &KEY, &pol, all).unwrap();
        assert_eq!((p.zone.as_str(), p.node_name, p.placement.shard), ("eu-1b", "eu-1b/c", ShardId(10)));
        assert_eq!((p.zone_rank, p.shard_rank), (0, 0));
        assert!(p.home && !p.fell_back());

        // The picked shard's node down: the next node of the zone's fallback order (c → b).
        let p = t.place(Some(&home), &[], &KEY, &pol, |n| n != "eu-1b/c").unwrap();
        assert_eq!((p.zone.as_str(), p.node_name, p.zone_rank, p.shard_rank), ("eu-1b", "eu-1b/b", 0, 1));
        assert!(p.home && p.fell_back());
        // Only `a` up: seven shards skipped.
        let p = t.place(Some(&home), &[], &KEY, &pol, |n| n == "eu-1b/a").unwrap();
        assert_eq!((p.node_name, p.shard_rank), ("eu-1b/a", 7));

        // The whole home zone down: the tenant's first other zone, eu-1a (weight a > c).
        let down_b = |n: &str| !n.starts_with("eu-1b/");
        let p = t.place(Some(&home), &[], &KEY, &pol, down_b).unwrap();
        assert_eq!((p.zone.as_str(), p.node_name, p.zone_rank, p.shard_rank), ("eu-1a", "eu-1a/c", 1, 0));
        assert!(!p.home && p.fell_back());
        assert_eq!(p.placement.shard, ShardId(10));

        // Home and eu-1a down: eu-1c.
        let p = t.place(Some(&home), &[], &KEY, &pol, |n| n.starts_with("eu-1c/")).unwrap();
        assert_eq!((p.zone.as_str(), p.node_name, p.zone_rank, p.shard_rank), ("eu-1c", "eu-1c/c", 2, 0));
        // No home: eu-1a is the first choice, not a fallback.
        let p = t.place(None, &[], &KEY, &pol, all).unwrap();
        assert_eq!((p.zone.as_str(), p.zone_rank, p.home, p.fell_back()), ("eu-1a", 0, false, false));

        // Nothing healthy.
        assert!(t.place(Some(&home), &[], &KEY, &pol, |_| false).is_none());
    }

    /// A home zone the dataset is not allowed in is not tried; the allowed zones follow the
    /// rendezvous order; unknown zones are skipped; nothing allowed and healthy → `None`.
    #[test]
    fn allowed_zones_exclude_home() {
        let t = three_zones();
        let pol = policy(0, 1);
        let allowed = [z("eu-1c"), z("eu-1a"), z("eu-1c"), z("us-2x")];
        let want: Vec<&str> = PINNED_ORDER_NO_HOME.iter().copied().filter(|s| *s != "eu-1b").collect();
        assert_eq!(order(&t, Some(&z("eu-1b")), &allowed, KEY.tenant_hash), want);
        let p = t.place(Some(&z("eu-1b")), &allowed, &KEY, &pol, all).unwrap();
        assert_eq!((p.zone.as_str(), p.zone_rank, p.home), (want[0], 0, false));
        // Allowed home first, whatever its weight.
        assert_eq!(order(&t, Some(&z("eu-1c")), &allowed, KEY.tenant_hash)[0], "eu-1c");
        // Only an unknown zone allowed, or all allowed zones down.
        assert!(t.place(None, &[z("us-2x")], &KEY, &pol, all).is_none());
        assert!(t.place(Some(&z("eu-1b")), &allowed, &KEY, &pol, |n| n.starts_with("eu-1b/")).is_none());
        // A home unknown to the table is not in the order.
        assert_eq!(order(&t, Some(&z("us-2x")), &[], KEY.tenant_hash), PINNED_ORDER_NO_HOME);
    }

    /// Reference §1.6 end-to-end rows (3 nodes × 4 tokens) through a single zone: the reference
    /// shard id, and the placement and node of a plain `NodeTable` built the same way.
    #[test]
    fn single_zone_matches_reference_vectors() {
        let mut t = ZonedNodeTable::new();
        let mut plain = NodeTable::new();
        for n in ["a", "b", "c"] {
            t.set_tokens(&z("only"), n, 4).unwrap();
            plain.set_tokens(n, 4).unwrap();
        }
        let rows = [(0, 1, 9), (0, 2, 10), (8, 4, 10), (8, 3, 10), (4, 8, 10), (3, 1, 9), (100, 100, 10)];
        for (tn, d, shard) in rows {
            let want = plain.place(&KEY, &policy(tn, d)).unwrap();
            assert_eq!(want.placement.shard, ShardId(shard));
            for home in [None, Some(z("only")), Some(z("elsewhere"))] {
                let p = t.place(home.as_ref(), &[], &KEY, &policy(tn, d), all).unwrap();
                assert_eq!((p.placement, p.node, p.zone_rank, p.shard_rank), (want.placement, want.node, 0, 0));
            }
        }
        assert!(ZonedNodeTable::new().place(None, &[], &KEY, &policy(0, 1), all).is_none());
    }

    /// A single zone equals a plain `NodeTable` bit for bit over random keys, policies and health.
    #[test]
    fn single_zone_equals_plain_node_table() {
        let mut rng = SplitMix64::new(27);
        let mut plain = NodeTable::new();
        let mut zoned = ZonedNodeTable::new();
        let zone = z("z");
        for i in 0..40 {
            let tokens = rng.below(9) as u32;
            plain.set_tokens(&format!("n{i}"), tokens).unwrap();
            zoned.set_tokens(&zone, &format!("n{i}"), tokens).unwrap();
        }
        assert_eq!(zoned.zone(&zone).unwrap().shard_nodes(), plain.shard_nodes());
        for _ in 0..20_000 {
            let key = DistributionKey {
                tenant_hash: rng.next_u64(),
                dataset_hash: rng.next_u64(),
                fingerprint: rng.next_u64(),
            };
            let pol = policy(rng.below(300) as u32, rng.below(300) as u32);
            let want = plain.place(&key, &pol).unwrap();
            for home in [None, Some(&zone)] {
                let got = zoned.place(home, &[], &key, &pol, all).unwrap();
                assert_eq!((got.placement, got.node, got.shard_rank), (want.placement, want.node, 0));
            }
            // Some nodes down: the first healthy node of the plain fallback order.
            // About a quarter of the nodes down, or all but a few (long walks past the zone
            // check), a different set per key.
            let down = match rng.below(2) {
                0 => rng.next_u64() & rng.next_u64(),
                _ => rng.next_u64() | rng.next_u64() | rng.next_u64() | rng.next_u64(),
            };
            let healthy = |n: &str| (down >> n[1..].parse::<u32>().unwrap()) & 1 == 0;
            let plain_first = fallback_nodes(plain.shard_nodes(), &want.placement)
                .position(|s| healthy(plain.name(s).unwrap()))
                .map(|rank| (fallback_nodes(plain.shard_nodes(), &want.placement).nth(rank).unwrap(), rank as u32));
            let got = zoned.place(Some(&zone), &[], &key, &pol, healthy).map(|p| (p.node, p.shard_rank));
            assert_eq!(got, plain_first);
        }
    }

    /// The tenants of a lost zone spread over the remaining zones instead of landing on one.
    #[test]
    fn lost_zone_tenants_spread_over_the_rest() {
        let mut t = ZonedNodeTable::new();
        let zones = ["az-1", "az-2", "az-3", "az-4"];
        for zone in zones {
            t.set_tokens(&z(zone), &format!("{zone}/n"), 4).unwrap();
        }
        let home = z("az-1");
        let mut counts = HashMap::new();
        let mut rng = SplitMix64::new(5);
        for _ in 0..30_000 {
            let key = DistributionKey { tenant_hash: rng.next_u64(), dataset_hash: 1, fingerprint: 2 };
            let p = t.place(Some(&home), &[], &key, &policy(0, 1), |n| n != "az-1/n").unwrap();
            *counts.entry(p.zone.as_str()).or_insert(0u32) += 1;
            // Losing another zone never reorders a tenant whose first fallback is still up.
            let q = t.place(Some(&home), &[], &key, &policy(0, 1), |n| n != "az-1/n" && n != "az-4/n").unwrap();
            if p.zone.as_str() != "az-4" {
                assert_eq!(q.zone, p.zone);
            }
        }
        assert_eq!(counts.len(), 3);
        assert!(counts.values().all(|&c| (9_400..10_600).contains(&c)), "{counts:?}");
    }

    #[test]
    fn membership_moves_only_after_remove_and_parts_round_trip() {
        let mut t = three_zones();
        let err = t.set_tokens(&z("eu-1c"), "eu-1a/a", 4).unwrap_err();
        assert_eq!(
            err,
            ZoneError::NodeInOtherZone { node: "eu-1a/a".into(), zone: z("eu-1a"), tokens: 4, requested: z("eu-1c") }
        );
        assert_eq!(t.remove("eu-1a/a"), Some((z("eu-1a"), NodeSlot(0))));
        assert_eq!(t.zone(&z("eu-1a")).unwrap().shard_count(), 8);
        assert_eq!(t.set_tokens(&z("eu-1c"), "eu-1a/a", 2).unwrap(), NodeSlot(3));
        assert_eq!(t.zone_of("eu-1a/a"), Some(&z("eu-1c")));
        assert_eq!(t.zone(&z("eu-1c")).unwrap().shard_count(), 14);
        assert!(t.remove("nobody").is_none());
        // A refused change leaves no trace.
        let err = t.set_tokens(&z("eu-big"), "huge", MAX_SHARDS + 1).unwrap_err();
        assert!(matches!(err, ZoneError::Zone { source: PlacementError::TooManyShards { .. }, .. }));
        assert!(t.zone(&z("eu-big")).is_none() && t.zone_of("huge").is_none());

        let parts = t.parts();
        let json = serde_json::to_string(&parts).unwrap();
        let back = ZonedNodeTable::from_parts(serde_json::from_str(&json).unwrap()).unwrap();
        assert_eq!(back.parts(), parts);
        for (zone, table) in t.zones() {
            assert_eq!(back.zone(zone).unwrap().shard_nodes(), table.shard_nodes());
        }
        assert_eq!(back.zone_of("eu-1a/a"), Some(&z("eu-1c")));

        let mut bad = parts.clone();
        bad.node_zones.insert("eu-1b/a".into(), z("eu-1c"));
        assert!(matches!(ZonedNodeTable::from_parts(bad), Err(ZoneError::InconsistentZones { .. })));
        let mut bad = parts.clone();
        bad.node_zones.remove("eu-1b/b");
        assert!(matches!(ZonedNodeTable::from_parts(bad), Err(ZoneError::InconsistentZones { .. })));
        let mut bad = parts;
        bad.zones.get_mut(&z("eu-1b")).unwrap().positions.pop();
        assert!(matches!(ZonedNodeTable::from_parts(bad), Err(ZoneError::Zone { .. })));
    }

    // ---- properties ----

    const ZONES: [&str; 3] = ["az-a", "az-b", "az-c"];

    fn node_name(zone: usize, n: usize) -> String {
        format!("{}-n{n}", ZONES[zone])
    }

    /// A zoned table from `(zone, node, tokens)` sets; names are unique per zone.
    fn build(sets: &[(usize, usize, u32)]) -> ZonedNodeTable {
        let mut t = ZonedNodeTable::new();
        for &(zone, n, tokens) in sets {
            t.set_tokens(&z(ZONES[zone]), &node_name(zone, n), tokens).unwrap();
        }
        t
    }

    fn sets() -> impl Strategy<Value = Vec<(usize, usize, u32)>> {
        proptest::collection::vec((0usize..3, 0usize..8, 0u32..9), 1..30)
    }

    /// Keys with a home zone (`None` = no home) drawn from `seed`.
    fn keys(seed: u64, count: usize) -> Vec<(Option<ZoneId>, DistributionKey)> {
        let mut rng = SplitMix64::new(seed);
        (0..count)
            .map(|_| {
                let home = match rng.below(4) {
                    3 => None,
                    i => Some(z(ZONES[i as usize])),
                };
                let key = DistributionKey {
                    tenant_hash: rng.next_u64() % 64,
                    dataset_hash: rng.next_u64() % 16,
                    fingerprint: rng.next_u64(),
                };
                (home, key)
            })
            .collect()
    }

    /// Zone, node name and shard placement of one key.
    type Placed = (String, String, ShardPlacement);

    /// Where every key goes under `healthy`.
    fn placements(
        t: &ZonedNodeTable,
        keys: &[(Option<ZoneId>, DistributionKey)],
        pol: &ShardPolicy,
        healthy: impl Fn(&str) -> bool,
    ) -> Vec<Option<Placed>> {
        keys.iter()
            .map(|(home, key)| {
                t.place(home.as_ref(), &[], key, pol, &healthy)
                    .map(|p| (p.zone.to_string(), p.node_name.to_owned(), p.placement))
            })
            .collect()
    }

    proptest! {
        /// Balance: every node owns exactly its token count of its zone's shards, and its tokens
        /// are in its zone only.
        #[test]
        fn balance_within_each_zone(sets in sets()) {
            let t = build(&sets);
            for (zone, table) in t.zones() {
                let mut counts = vec![0u32; table.nodes().len()];
                for s in table.shard_nodes() {
                    counts[s.as_index()] += 1;
                }
                for (i, row) in table.nodes().iter().enumerate() {
                    prop_assert_eq!(counts[i], row.tokens);
                    prop_assert_eq!(t.zone_of(&row.name), Some(zone));
                }
            }
        }

        /// Growing zone Z by a node: Z's shards change owner only onto the new node, no other
        /// zone's table changes, keys move only into or inside Z (all healthy), a key that keeps
        /// its shard moves only onto the new node, and a key placed in its own home zone elsewhere
        /// does not move (with nodes down too). Keys of Z may change shard: subrings are relative
        /// to the zone's shard count, exactly as with a plain `NodeTable`.
        #[test]
        fn growing_a_zone_moves_keys_only_in_it(
            sets in sets(), grow in 0usize..3, tokens in 1u32..9, seed in any::<u64>(), down in any::<u32>(),
        ) {
            let mut t = build(&sets);
            let keys = keys(seed, 300);
            let pol = policy(6, 2);
            let zid = z(ZONES[grow]);
            let healthy = |n: &str| !n.ends_with(char::from(b'0' + (down % 8) as u8));
            let tables_before: BTreeMap<ZoneId, Vec<NodeSlot>> =
                t.zones().map(|(z, tb)| (z.clone(), tb.shard_nodes().to_vec())).collect();
            let before = placements(&t, &keys, &pol, all);
            let before_down = placements(&t, &keys, &pol, healthy);
            let new = node_name(grow, 100);
            let new_slot = t.set_tokens(&zid, &new, tokens).unwrap();
            let after = placements(&t, &keys, &pol, all);
            let after_down = placements(&t, &keys, &pol, healthy);
            for (z, tb) in t.zones() {
                let old = tables_before.get(z).map_or(&[][..], Vec::as_slice);
                if *z == zid {
                    prop_assert!(old.iter().zip(tb.shard_nodes()).all(|(a, b)| a == b || *b == new_slot));
                } else {
                    prop_assert_eq!(old, tb.shard_nodes());
                }
            }
            let in_home_elsewhere = |home: &Option<ZoneId>, p: &Option<Placed>| {
                home.as_ref().is_some_and(|h| *h != zid && p.as_ref().is_some_and(|p| p.0 == h.as_str()))
            };
            for (i, (home, _)) in keys.iter().enumerate() {
                if before[i] != after[i] {
                    let (zone, node, placement) = after[i].as_ref().unwrap();
                    prop_assert_eq!(zone.as_str(), ZONES[grow]);
                    prop_assert!(!in_home_elsewhere(home, &before[i]), "home {:?}", home);
                    if let Some((z0, n0, p0)) = &before[i]
                        && z0 == zone
                        && p0.shard == placement.shard
                    {
                        prop_assert!(n0 == node || *node == new, "{} -> {}", n0, node);
                    }
                }
                if in_home_elsewhere(home, &before_down[i]) {
                    prop_assert_eq!(&before_down[i], &after_down[i]);
                }
            }
        }

        /// The zone order is every allowed zone the table knows exactly once, an allowed home first.
        #[test]
        fn zone_order_visits_each_allowed_zone_once(
            sets in sets(), allowed in proptest::collection::vec(0usize..4, 0..6), home in 0usize..5, tenant in any::<u64>(),
        ) {
            let t = build(&sets);
            let names = ["az-a", "az-b", "az-c", "az-unknown", "az-none"];
            let allowed: Vec<ZoneId> = allowed.iter().map(|&i| z(names[i])).collect();
            let home = z(names[home]);
            let got: Vec<&ZoneId> = t.zone_order(Some(&home), &allowed, tenant).map(|(z, _)| z).collect();
            let mut want: Vec<&ZoneId> =
                t.zones().map(|(z, _)| z).filter(|z| allowed.is_empty() || allowed.contains(z)).collect();
            let mut sorted = got.clone();
            sorted.sort();
            want.sort();
            prop_assert_eq!(&sorted, &want);
            if want.contains(&&home) {
                prop_assert_eq!(got[0], &home);
            }
            let rest = if got.first() == Some(&&home) { &got[1..] } else { &got[..] };
            let weights: Vec<u64> = rest.iter().map(|z| zone_weight(z, tenant)).collect();
            prop_assert!(weights.windows(2).all(|w| w[0] >= w[1]));
        }

        /// Changing one node's tokens by Δ moves at most Δ of its zone's surviving shards and
        /// nothing in other zones: their shard tables and (all healthy) their keys' placements are
        /// identical.
        #[test]
        fn token_change_stays_in_its_zone(
            sets in sets(), zone in 0usize..3, node in 0usize..8, tokens in 0u32..9, seed in any::<u64>(),
        ) {
            let mut t = build(&sets);
            let keys = keys(seed, 300);
            let pol = policy(5, 3);
            let name = node_name(zone, node);
            let zid = z(ZONES[zone]);
            let old = t.zone(&zid).and_then(|tb| tb.slot(&name).map(|s| tb.nodes()[s.as_index()].tokens)).unwrap_or(0);
            let tables_before: BTreeMap<ZoneId, Vec<NodeSlot>> =
                t.zones().map(|(z, tb)| (z.clone(), tb.shard_nodes().to_vec())).collect();
            let before = placements(&t, &keys, &pol, all);
            t.set_tokens(&zid, &name, tokens).unwrap();
            let after = placements(&t, &keys, &pol, all);
            for (z, tb) in t.zones() {
                if *z == zid {
                    let moved = tables_before.get(z).map_or(0, |b| b.iter().zip(tb.shard_nodes()).filter(|(x, y)| x != y).count());
                    prop_assert!(moved <= old.abs_diff(tokens) as usize, "moved {} > delta", moved);
                } else {
                    prop_assert_eq!(tables_before.get(z).map(Vec::as_slice), Some(tb.shard_nodes()));
                }
            }
            for (i, (home, _)) in keys.iter().enumerate() {
                // Placed in its own home zone, and that is another zone than the changed one.
                let home_elsewhere = home.as_ref().is_some_and(|h| {
                    *h != zid && before[i].as_ref().is_some_and(|p| p.0 == h.as_str())
                });
                if home_elsewhere {
                    prop_assert_eq!(&before[i], &after[i]);
                }
            }
        }
    }
}
