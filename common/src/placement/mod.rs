//! Placement core: where a key's data lives, as pure functions of their inputs.
//!
//! # Problem
//! Hash-sharded datasets must be spread over storage nodes so that a tenant's and a dataset's load
//! can be widened or narrowed without moving everything, nodes can join and leave moving only their
//! own share, and capacity-weighted node choice stays compatible with nginx/pingora ketama rings.
//!
//! # Parts
//! * [`jump`]: jump consistent hash, bit-exact with the reference vectors.
//! * [`subring`], [`distribute`]: tenant subring → dataset subring → shard over nested contiguous
//!   subrings, 1-based [`ids::ShardId`] (0 = unassigned), fingerprint or round-robin pick, and the
//!   fallback order (rest of dataset subring → rest of tenant subring → rest of the ring).
//! * [`permutation`], [`nodes`]: shard → node through a fixed-seed portable permutation (a pure
//!   function of the shard count) and stable, append-only node slots.
//! * [`ring`], [`ring_points`], [`migration`]: the weighted ketama ring (6-byte points plus a
//!   top-bits index; nginx/pingora compatible for IPv4 `ip:port` nodes, pingora compatible for IPv6)
//!   and per-key ramps between two ring versions.
//! * [`allocator`], [`ewma`], [`stats`], [`strategy`], [`rules`]: adaptive shard counts, EWMA byte
//!   rates per (tenant, dataset, shard), the fingerprint/round-robin decision, and placement rules.
//! * [`zones`]: zone-aware placement: one node table per availability zone, the caller's home zone
//!   first, then the dataset's other allowed zones in a per-tenant rendezvous order, each zone
//!   placed and walked exactly like a plain node table.
//!
//! # Contracts
//! * No I/O, no clock reads, no global state: time is an argument (`now_ms`, epoch milliseconds).
//! * Invalid inputs are errors ([`error::PlacementError`]), never panics: zero unit size, zero
//!   ring weight, too many ring nodes or points, bad shard bounds, fractions above 1 000 000 ppm.
//!
//! # Invariants (each has a property test)
//! * `jump_hash(k, n) < n`; growing `n` moves a key only to the new bucket.
//! * `permutation(n+1)` differs from `permutation(n)` in at most one old slot.
//! * Changing one node's token count by Δ changes the owner of at most |Δ| surviving shards, and
//!   growth moves shards only onto that node; every node owns exactly its token count of shards.
//! * The fallback order visits every shard exactly once, dataset subring first, then tenant subring.
//! * Ring lookups equal a lower-bound binary search over the sorted points; adding a ring node moves
//!   keys only onto it.
//! * Migration: raising the fraction only moves keys old → new; lowering only new → old.
//! * The allocator's output stays in `[min, max]` and never lags a scale-out.
//! * Zones: one zone places bit for bit like a plain node table; every node owns exactly its
//!   token count of its zone's shards; changing one zone's tokens by Δ moves at most Δ of that
//!   zone's shards, only onto the node when it grows, and changes no other zone's table nor
//!   (all healthy) the placement of a key that is in its own home zone elsewhere.

pub mod allocator;
pub mod distribute;
pub mod error;
pub mod ewma;
pub mod ids;
pub mod jump;
pub mod migration;
pub mod nodes;
pub mod permutation;
pub mod ring;
pub mod ring_points;
pub mod rules;
pub mod stats;
pub mod strategy;
pub mod subring;
pub mod zones;
