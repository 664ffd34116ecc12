//! Peer-modelled strategies (issue 24): TiKV/PD (`pd`) and CockroachDB (`crdb`) as their
//! documented defaults describe them, run against the same engine as `lb`. Sources are in
//! `reference/peer-systems.md` §1.2 (PD) and §1.3 (CRDB), each default below names its setting.
//!
//! **What they see.** Only what the real systems measure: each partition's *served* ops (and
//! bytes) per second, and their means over the systems' own statistics intervals, read from the
//! engine's counters (`load.acc`, cumulative because the peers do not ask for the planner input,
//! whose reads are the only thing that resets them) — never demand a worker rejected before it
//! reached a partition, never the future. Both respect operations in flight ([`Context::busy`]),
//! never send anything to a worker that is down or in a dedicated group (neither system has
//! groups: grouped workers and their partitions are left alone), and count their own moves of
//! the same decision before choosing the next.
//!
//! **Scaling the absolute defaults.** The peers' thresholds are absolute (QPS, MiB); a
//! scenario's partitions have their own limit and size. CockroachDB ships two load-split
//! triggers meant to fire together, 2,500 QPS and 500 ms of CPU per second (half a core), so a
//! range is taken to serve one core, [`REFERENCE_RANGE_OPS_PER_SEC`] = 5,000 ops/s, for both
//! systems (their ranges and regions are alike: one Raft group of ~100–500 MiB). Every QPS
//! default is multiplied by `partition limit / 5,000` ([`PeerScale::load_ratio`]): at the shipped
//! scenarios' 8,000 ops/s partition limit TiKV splits at 4,800 ops/s (0.6 of the limit) and
//! CockroachDB at 4,000 (0.5). TiKV's byte trigger (30 MiB/s) is the same 0.6 of the partition's
//! byte limit. Sizes: each table's mean partition size at the start stands for the size each
//! system splits at (TiKV `region-split-size` 96 MiB, CockroachDB `range_max_bytes` 512 MiB), and
//! the merge sizes keep their ratio to it.
//!
//! **What the engine cannot express.** One copy per partition: every move streams the
//! partition's bytes (neither PD's cheap transfer-leader nor CockroachDB's lease transfer exists
//! here, so both pay a replica move where the real system might pay a lease move). Every op is a
//! point op, so the finders' "contained" criterion never binds. The load dimension is served ops
//! (the engine's CPU is linear in ops), standing for PD's [query, byte] and CockroachDB's QPS.
//!
//! - [`Pd`]: TiKV load-based split, PD's hot-region scheduler, PD's merge checker.
//! - [`Crdb`]: load-based split with the split finder, the store rebalancer, the merge queue.
//! - [`sampled_split_key`]: both finders' choice from 20 sampled keys.

use std::collections::{HashMap, HashSet, VecDeque};

use lb_common::ids::{ActionId, Key, KeyRange, PartitionId};
use lb_common::protocol::ActionSpec;
use lb_testbed::model::Cluster;
use lb_testbed::model::report::sketch_bucket_bounds;

use super::strategy::{Context, Decision, Proposed, Strategy};

/// The strategies' names in `--strategies`.
pub const PD: &str = "pd";
pub const CRDB: &str = "crdb";

/// What one range or region serves, ops/s: CockroachDB's 2,500 QPS split trigger is paired with
/// 500 ms CPU/s (`kv.range_split.load_cpu_threshold`), half a core; one core is 5,000.
pub const REFERENCE_RANGE_OPS_PER_SEC: f64 = 5000.0;
/// Keys both finders sample (TiKV `split.sample-num` 20, CockroachDB `splitKeySampleSize` 20).
pub const SPLIT_SAMPLE_KEYS: usize = 20;
/// A sampled key splits only if the larger side has under 62.5 % of the load: |l − r| / (l + r)
/// < 0.25 (TiKV `split.split-balance-score`, CockroachDB `splitKeyThreshold`).
pub const SPLIT_BALANCE_SCORE: f64 = 0.25;

/// TiKV: a region over a split threshold for this many consecutive seconds is split
/// (`split.detect-times` 10).
pub const TIKV_SPLIT_DETECT_SECS: u32 = 10;
/// TiKV `split.qps-threshold`.
pub const TIKV_SPLIT_QPS: f64 = 3000.0;
/// TiKV `split.byte-threshold` (30 MiB/s) as the share of the partition's byte limit that
/// `split.qps-threshold` is of [`REFERENCE_RANGE_OPS_PER_SEC`] (0.6): both were set for one region.
pub const TIKV_SPLIT_BYTES_LIMIT_RATIO: f64 = TIKV_SPLIT_QPS / REFERENCE_RANGE_OPS_PER_SEC;
/// PD region heartbeat (write stats) and store heartbeat (store loads, read stats) intervals.
pub const PD_REGION_HEARTBEAT_SECS: u64 = 60;
pub const PD_STORE_HEARTBEAT_SECS: u64 = 10;
/// PD `hot-region-cache-hits-threshold`: intervals a peer must be hot before it is scheduled.
/// Reads report through store heartbeats with the threshold ×6 (18 × 10 s): the same 3 minutes
/// as writes' 3 × 60 s, so one 60 s interval models both.
pub const PD_HOT_DEGREE: u32 = 3;
/// PD `hotRegionAntiCount`: cold intervals before a hot peer leaves the cache.
pub const PD_HOT_ANTI_COUNT: u32 = 2;
/// PD `TopNN` and `HotThresholdRatio`: a store's hot threshold is 0.8 × its 60th hottest peer.
pub const PD_TOP_N: usize = 60;
pub const PD_HOT_THRESHOLD_RATIO: f64 = 0.8;
/// PD's `MinHotThresholds` for read queries (128 QPS), scaled like every QPS default.
pub const PD_MIN_HOT_QPS: f64 = 128.0;
/// PD `src-tolerance-ratio` / `dst-tolerance-ratio`.
pub const PD_TOLERANCE_RATIO: f64 = 1.05;
/// PD `great-dec-ratio`: a move must cut the hotter side to 95 % of the source's load.
pub const PD_GREAT_DEC_RATIO: f64 = 0.95;
/// PD `hot-region-schedule-limit`: hot-region operators in flight at once.
pub const PD_HOT_REGION_LIMIT: usize = 4;
/// PD store limit: add-peer and remove-peer operations per minute per store.
pub const PD_STORE_LIMIT_PER_MIN: f64 = 15.0;
/// PD `max-zombie-rounds`: store heartbeats a finished operator's influence may still be
/// counted, until the stores' stats have caught up with it. Here a store's load is its last
/// heartbeat's mean, which has caught up with a move in proportion to the part of the heartbeat
/// after the move ended: that is the share of the influence still counted (counting all of it
/// for 3 rounds would count the move twice and send it back).
pub const PD_ZOMBIE_ROUNDS: u64 = 3;
/// PD `max-movable-hot-peer-size` 512 MiB over TiKV's 96 MiB split size: larger peers are not moved.
pub const PD_MAX_MOVABLE_SIZE_RATIO: f64 = 512.0 / 96.0;
/// PD `max-merge-region-size` 54 MiB over TiKV's 96 MiB split size.
pub const PD_MAX_MERGE_SIZE_RATIO: f64 = 54.0 / 96.0;
/// TiKV `region-max-size` 144 MiB over its 96 MiB split size: a merge may not make a larger region.
pub const PD_MAX_REGION_SIZE_RATIO: f64 = 144.0 / 96.0;
/// PD `split-merge-interval`: a region split less than an hour ago is not merged.
pub const PD_SPLIT_MERGE_INTERVAL_SECS: i64 = 3600;
/// PD `merge-schedule-limit`.
pub const PD_MERGE_LIMIT: usize = 8;
/// How often the model's merge checker looks at every region (PD patrols continuously).
pub const PD_MERGE_PATROL_SECS: u64 = 60;

/// CockroachDB `kv.range_split.load_qps_threshold`.
pub const CRDB_SPLIT_QPS: f64 = 2500.0;
/// The split finder records at least 10 s before it answers (`minSplitSuggestionInterval`).
pub const CRDB_SPLIT_RECORD_SECS: u32 = 10;
/// `kv.allocator.load_based_rebalancing_interval`: the store rebalancer runs once a minute.
pub const CRDB_REBALANCE_SECS: u64 = 60;
/// `kv.allocator.qps_rebalance_threshold`: overfull above the mean by 10 %.
pub const CRDB_REBALANCE_THRESHOLD_RATIO: f64 = 0.1;
/// `minQPSThresholdDifference` (100 QPS), scaled: overfull also needs this much over the mean.
pub const CRDB_MIN_QPS_DIFF: f64 = 100.0;
/// `MinQPSDifferenceForTransfers`: twice the floor, between source (without the replica) and
/// target, "to make transfers less sensitive to jitter".
pub const CRDB_MIN_TRANSFER_DIFF_FACTOR: f64 = 2.0;
/// The store rebalancer ignores replicas under 2 % of its store's load (`minQPSFraction`).
pub const CRDB_MIN_REPLICA_FRACTION: f64 = 0.02;
/// It considers its store's 128 hottest replicas (`numTopReplicasToTrack`).
pub const CRDB_TOP_REPLICAS: usize = 128;
/// `kv.range_split.by_load_merge_delay`: a load split's right side is not merged for 5 min,
/// and merges judge the max QPS over the same 5 min.
pub const CRDB_MERGE_DELAY_SECS: i64 = 300;
/// `range_min_bytes` 128 MiB over `range_max_bytes` 512 MiB: only ranges under it merge.
pub const CRDB_MIN_BYTES_RATIO: f64 = 128.0 / 512.0;
/// How often the model's merge queue looks at every range (CockroachDB's replica scanner
/// visits each range about every 10 min: this is faster, not slower).
pub const CRDB_MERGE_SCAN_SECS: u64 = 60;

/// The peers' absolute defaults scaled to a scenario (see the module doc).
#[derive(Debug, Clone, PartialEq)]
pub struct PeerScale {
    /// The partition's ops limit over [`REFERENCE_RANGE_OPS_PER_SEC`].
    pub load_ratio: f64,
    pub limit_bytes_per_sec: f64,
    /// Per table, its mean partition size at the start: the size the systems split at.
    pub table_bytes: Vec<f64>,
}

impl PeerScale {
    pub fn of(c: &Cluster) -> Self {
        let mut sums = vec![(0.0, 0.0); c.tables.len()];
        for p in 0..c.partitions.len() {
            let s = &mut sums[c.partitions.table[p] as usize];
            s.0 += c.partitions.stored_bytes[p];
            s.1 += 1.0;
        }
        Self {
            load_ratio: c.partition_limit.ops_per_sec / REFERENCE_RANGE_OPS_PER_SEC,
            limit_bytes_per_sec: c.partition_limit.bytes_per_sec,
            table_bytes: sums.into_iter().map(|(b, n)| if n > 0.0 { b / n } else { 0.0 }).collect(),
        }
    }

    /// The split size of table `t`'s partitions.
    pub fn partition_bytes(&self, t: u32) -> f64 {
        self.table_bytes.get(t as usize).copied().unwrap_or(0.0)
    }

    /// A default in QPS, scaled.
    pub fn qps(&self, default_qps: f64) -> f64 {
        default_qps * self.load_ratio
    }
}

/// Served ops/s of partition `p` in the last second.
fn served_ops(c: &Cluster, p: usize) -> f64 {
    c.served_ops(p)
}

fn served_bytes(c: &Cluster, p: usize) -> f64 {
    (c.load.demand_read_bytes[p] + c.load.demand_write_bytes[p]) * c.load.served_ratio[p]
}

/// Served ops of partition `p` since the run began (follows splits and merges).
fn cumulative_ops(c: &Cluster, p: usize) -> f64 {
    c.load.acc.read_ops[p] + c.load.acc.write_ops[p]
}

/// Workers that may receive or give load: up and not in a dedicated group.
fn balanced_workers(c: &Cluster) -> Vec<usize> {
    (0..c.workers.len()).filter(|&w| c.workers.is_up(w) && c.workers.group[w].is_none()).collect()
}

/// Why a finder found no split key.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum NoSplitKey {
    /// Nothing was sampled.
    NoLoad,
    /// No sampled key leaves the larger side under 62.5 %: one key (TiKV's and CockroachDB's
    /// "no split key found", a popular key) or a load the range's keys cannot halve.
    Unbalanced { best_score: f64 },
}

/// The key TiKV's and CockroachDB's finders pick for partition `p`: 20 keys sampled by load (here
/// at the load's 20 quantiles, where samples land on average, read from the same sketch `lb`
/// gets: 16 buckets, uniform inside each, and the hot single keys), each scored
/// |left − right| / (left + right) with the sample key going right; the best-balanced key wins
/// if its score is under [`SPLIT_BALANCE_SCORE`] — about the weighted median.
pub fn sampled_split_key(c: &Cluster, p: usize, t_secs: f64) -> Result<Key, NoSplitKey> {
    let range = c.partitions.range(p);
    let sketch = c.sketch(p, 1 << 30, t_secs);
    let total: f64 = sketch.bucket_ops.iter().map(|&b| b as f64).sum();
    if total <= 0.0 {
        return Err(NoSplitKey::NoLoad);
    }
    // Inclusive key pieces with their load, in key order: each bucket's uniform rest around its
    // hot single keys, and each hot key as a one-key piece.
    let mut pieces: Vec<(u64, u64, f64)> = Vec::new();
    let bounds = sketch_bucket_bounds(range.start.0, range.end.0, &sketch);
    for (&(a, b), &ops) in bounds.iter().zip(&sketch.bucket_ops) {
        let mut points: Vec<(u64, f64)> = sketch
            .top_keys
            .iter()
            .filter(|k| a <= k.key.0 && k.key.0 <= b)
            .map(|k| (k.key.0, k.share_ratio * total))
            .collect();
        points.sort_by_key(|&(k, _)| k);
        let rest = (ops as f64 - points.iter().map(|&(_, m)| m).sum::<f64>()).max(0.0);
        let width = (u128::from(b - a) + 1) as f64;
        let uniform = |from: u64, to: u64| rest * ((u128::from(to - from) + 1) as f64) / width;
        let mut cursor = Some(a);
        for (k, mass) in points {
            if let Some(from) = cursor.filter(|&from| from < k) {
                pieces.push((from, k - 1, uniform(from, k - 1)));
            }
            pieces.push((k, k, mass));
            cursor = k.checked_add(1).filter(|&next| next <= b);
        }
        if let Some(from) = cursor {
            pieces.push((from, b, uniform(from, b)));
        }
    }
    let left_of = |key: u64| -> f64 {
        pieces
            .iter()
            .map(|&(a, b, m)| {
                if b < key {
                    m
                } else if a >= key {
                    0.0
                } else {
                    m * ((key - a) as f64) / ((u128::from(b - a) + 1) as f64)
                }
            })
            .sum()
    };
    let at_quantile = |q: f64| -> Option<u64> {
        let target = q * total;
        let mut below = 0.0;
        for &(a, b, m) in &pieces {
            if m > 0.0 && below + m >= target {
                let frac = ((target - below) / m).clamp(0.0, 1.0);
                let offset = (frac * ((u128::from(b - a) + 1) as f64)) as u64;
                return Some(a.saturating_add(offset).min(b));
            }
            below += m;
        }
        None
    };
    let mut best: Option<(f64, u64)> = None;
    for i in 0..SPLIT_SAMPLE_KEYS {
        let Some(key) = at_quantile((i as f64 + 0.5) / SPLIT_SAMPLE_KEYS as f64) else { continue };
        if range.split_at(Key(key)).is_none() {
            continue;
        }
        let score = (total - 2.0 * left_of(key)).abs() / total;
        if best.is_none_or(|(s, _)| score < s) {
            best = Some((score, key));
        }
    }
    match best {
        Some((score, key)) if score < SPLIT_BALANCE_SCORE => Ok(Key(key)),
        Some((score, _)) => Err(NoSplitKey::Unbalanced { best_score: score }),
        None => Err(NoSplitKey::Unbalanced { best_score: 1.0 }),
    }
}

/// Consecutive seconds each partition has been over a split threshold; a partition under it,
/// or whose range changed, starts over.
#[derive(Debug, Default)]
struct Streaks {
    secs: HashMap<PartitionId, (KeyRange, u32)>,
}

impl Streaks {
    /// Counts this second; returns the partitions at `need` seconds or more.
    fn update(&mut self, c: &Cluster, need: u32, over: impl Fn(usize) -> bool) -> Vec<usize> {
        let mut next = HashMap::with_capacity(self.secs.len());
        let mut ready = Vec::new();
        for p in 0..c.partitions.len() {
            if !over(p) {
                continue;
            }
            let (id, range) = (&c.partitions.ids[p], c.partitions.range(p));
            let secs = match self.secs.get(id) {
                Some((r, s)) if *r == range => s + 1,
                _ => 1,
            };
            if secs >= need {
                ready.push(p);
            }
            next.insert(id.clone(), (range, secs));
        }
        self.secs = next;
        ready
    }

    /// The finder answered (with a key or without): it records afresh.
    fn restart(&mut self, id: &PartitionId) {
        self.secs.remove(id);
    }
}

/// A statistics interval: every partition's cumulative served ops at its start.
#[derive(Debug, Default)]
struct Interval {
    started_ms: Option<i64>,
    at_start: HashMap<PartitionId, (KeyRange, f64)>,
}

impl Interval {
    /// Ends the interval: each partition's mean served ops/s over it (`None` for a partition
    /// that is new or whose range changed: no full interval of its own), and starts the next.
    fn roll(&mut self, c: &Cluster, now_ms: i64) -> Vec<Option<f64>> {
        let secs = self.started_ms.map(|s| (now_ms - s) as f64 / 1000.0).filter(|&s| s > 0.0);
        let n = c.partitions.len();
        let mut means = Vec::with_capacity(n);
        let mut next = HashMap::with_capacity(n);
        for p in 0..n {
            let (id, range, total) = (&c.partitions.ids[p], c.partitions.range(p), cumulative_ops(c, p));
            let mean = match (secs, self.at_start.get(id)) {
                (Some(s), Some((r, before))) if *r == range => Some(((total - before) / s).max(0.0)),
                _ => None,
            };
            means.push(mean);
            next.insert(id.clone(), (range, total));
        }
        self.at_start = next;
        self.started_ms = Some(now_ms);
        means
    }
}

/// Served ops per worker summed over the seconds of a store interval: everything the store
/// served (its partitions and any dataset shards on it), as a store heartbeat reports it.
#[derive(Debug, Default)]
struct StoreLoads {
    sums: Vec<f64>,
    secs: u32,
}

impl StoreLoads {
    fn add_second(&mut self, c: &Cluster) {
        self.sums.resize(c.workers.len(), 0.0);
        let load = &c.load;
        for (w, sum) in self.sums.iter_mut().enumerate() {
            *sum += load.worker_ops[w] * load.worker_scale[w];
        }
        self.secs += 1;
    }

    /// Each worker's mean served ops/s over the interval; starts the next.
    fn roll(&mut self) -> Vec<f64> {
        let secs = f64::from(self.secs.max(1));
        let means = self.sums.iter().map(|s| s / secs).collect();
        self.sums.iter_mut().for_each(|s| *s = 0.0);
        self.secs = 0;
        means
    }
}

/// Split keys by (table, key) with when they were cut: boundaries younger than some interval.
#[derive(Debug, Default)]
struct SplitCache {
    at_ms: HashMap<(u32, u64), i64>,
}

impl SplitCache {
    fn record(&mut self, table: u32, key: u64, at_ms: i64) {
        self.at_ms.insert((table, key), at_ms);
    }

    fn expire(&mut self, before_ms: i64) {
        self.at_ms.retain(|_, at| *at >= before_ms);
    }

    /// Whether partition `p` starts at a recorded split key (it is a split's right side).
    fn starts_at_split(&self, c: &Cluster, p: usize) -> bool {
        self.at_ms.contains_key(&(c.partitions.table[p], c.partitions.start[p]))
    }

    /// Whether either of `p`'s boundaries is a recorded split key (it is a piece of a split).
    fn is_piece(&self, c: &Cluster, p: usize) -> bool {
        let t = c.partitions.table[p];
        self.starts_at_split(c, p)
            || c.partitions.end[p].checked_add(1).is_some_and(|k| self.at_ms.contains_key(&(t, k)))
    }
}

/// One decision's bookkeeping: partitions it touched, the actions, ids.
struct Out<'a> {
    busy: HashSet<&'a PartitionId>,
    touched: HashSet<PartitionId>,
    actions: Vec<Proposed>,
}

impl<'a> Out<'a> {
    fn new(ctx: &Context<'a>) -> Self {
        Self { busy: ctx.busy.iter().collect(), touched: HashSet::new(), actions: Vec::new() }
    }

    fn free(&self, id: &PartitionId) -> bool {
        !self.busy.contains(id) && !self.touched.contains(id)
    }

    fn push(&mut self, id: ActionId, spec: ActionSpec, reason: String) {
        self.touched.extend(spec.partitions().into_iter().cloned());
        self.actions.push(Proposed { spec, submit: true, reason, policy: None, id: Some(id) });
    }
}

fn next_action_id(counter: &mut u64, prefix: &str) -> ActionId {
    *counter += 1;
    ActionId::new(format!("{prefix}-{counter}")).expect("a strategy name and a number make a valid id")
}

fn in_flight(own: &HashMap<ActionId, Own>, f: impl Fn(&Own) -> bool) -> usize {
    own.values().filter(|o| f(o)).count()
}

/// What a peer's own action in flight is, for its limits and its pending influence.
#[derive(Debug, Clone)]
enum Own {
    Split { table: u32, key: u64 },
    HotMove { src: usize, dst: usize, load: f64 },
    Merge,
    Rebalance { src: usize },
}

/// TiKV and PD with their defaults; see the module doc and each constant.
///
/// Every second: TiKV's load-based split (a region whose served ops or bytes were over the
/// threshold for 10 consecutive seconds is split at [`sampled_split_key`]). Every 60 s (region
/// heartbeat): the hot cache — a peer over its store's hot threshold gains a hot degree, one
/// that is not loses one. Every 10 s (store heartbeat): the hot-region scheduler — stores over
/// the mean × 1.05 give their hottest peers of degree ≥ 3 to stores under the mean / 1.05, a
/// move only if it brings the hotter side to ≤ 95 % of the source, at most 4 in flight, each
/// store within 15 added and 15 removed peers a minute, moves in flight (and 3 heartbeats after)
/// counted on both stores. Every 60 s: the merge checker — a region under 54/96 of the split
/// size, not hot and not split within the hour merges into its smaller such neighbour, at most
/// 8 merges in flight.
#[derive(Debug, Default)]
pub struct Pd {
    scale: Option<PeerScale>,
    streaks: Streaks,
    region_interval: Interval,
    store_loads: StoreLoads,
    /// Partition → (hot degree, anti count, last interval's served ops/s; `None` after its
    /// range changed, until it has a full interval again).
    hot: HashMap<PartitionId, (u32, u32, Option<f64>)>,
    /// Per worker: add-peer and remove-peer tokens.
    tokens: Vec<(f64, f64)>,
    own: HashMap<ActionId, Own>,
    /// Finished hot moves still counted: (src, dst, load, finished at ms).
    zombies: Vec<(usize, usize, f64, i64)>,
    splits: SplitCache,
    next_id: u64,
    /// Load splits the finder refused (no split key found), for tests and reasons.
    pub no_split_key: usize,
}

impl Pd {
    fn id(&mut self) -> ActionId {
        next_action_id(&mut self.next_id, PD)
    }

    fn in_flight(&self, f: impl Fn(&Own) -> bool) -> usize {
        in_flight(&self.own, f)
    }

    fn load_split(&mut self, c: &Cluster, t_secs: f64, out: &mut Out<'_>, scale: &PeerScale) {
        let (qps, bytes) = (scale.qps(TIKV_SPLIT_QPS), TIKV_SPLIT_BYTES_LIMIT_RATIO * scale.limit_bytes_per_sec);
        let ready =
            self.streaks.update(c, TIKV_SPLIT_DETECT_SECS, |p| served_ops(c, p) >= qps || served_bytes(c, p) >= bytes);
        for p in ready {
            let id = c.partitions.ids[p].clone();
            if !out.free(&id) {
                continue;
            }
            self.streaks.restart(&id);
            match sampled_split_key(c, p, t_secs) {
                Ok(key) => {
                    let reason = format!(
                        "pd: tikv load split of {id}: {:.0} ops/s for {TIKV_SPLIT_DETECT_SECS} s over {qps:.0} (split.qps-threshold 3000 scaled), at the sampled keys' balanced key",
                        served_ops(c, p)
                    );
                    let action = self.id();
                    self.own.insert(action.clone(), Own::Split { table: c.partitions.table[p], key: key.0 });
                    out.push(action, ActionSpec::Split { partition: id, split_key: key }, reason);
                }
                Err(_) => self.no_split_key += 1,
            }
        }
    }

    /// The region heartbeat: hot degrees from the interval's mean served ops.
    fn update_hot_cache(&mut self, c: &Cluster, now_ms: i64, scale: &PeerScale) {
        let means = self.region_interval.roll(c, now_ms);
        let min_hot = scale.qps(PD_MIN_HOT_QPS);
        let mut per_store: Vec<Vec<f64>> = vec![Vec::new(); c.workers.len()];
        for (p, m) in means.iter().enumerate() {
            if let Some(m) = m {
                per_store[c.partitions.owner[p] as usize].push(*m);
            }
        }
        let thresholds: Vec<f64> = per_store
            .iter_mut()
            .map(|loads| {
                if loads.len() < PD_TOP_N {
                    return min_hot;
                }
                loads.sort_by(|a, b| b.total_cmp(a));
                (loads[PD_TOP_N - 1] * PD_HOT_THRESHOLD_RATIO).max(min_hot)
            })
            .collect();
        let mut next = HashMap::new();
        for (p, m) in means.iter().enumerate() {
            let id = &c.partitions.ids[p];
            let old = self.hot.get(id).copied();
            let entry = match (m, old) {
                // No full interval (new or re-cut): keep what the cache had.
                (None, old) => old.map(|(d, anti, _)| (d, anti, None)),
                (Some(m), old) if *m >= thresholds[c.partitions.owner[p] as usize] => {
                    Some((old.map_or(1, |(d, _, _)| d + 1), PD_HOT_ANTI_COUNT, Some(*m)))
                }
                (Some(m), Some((d, anti, _))) if anti > 1 => Some((d.saturating_sub(1), anti - 1, Some(*m))),
                (Some(_), _) => None,
            };
            if let Some(e) = entry {
                next.insert(id.clone(), e);
            }
        }
        self.hot = next;
    }

    /// The store heartbeat's scheduling round.
    fn schedule_hot(&mut self, c: &Cluster, now_ms: i64, out: &mut Out<'_>, scale: &PeerScale) {
        let mut load = self.store_loads.roll();
        load.resize(c.workers.len(), 0.0);
        let heartbeat_ms = (PD_STORE_HEARTBEAT_SECS * 1000) as f64;
        let zombie_ms = (PD_ZOMBIE_ROUNDS * PD_STORE_HEARTBEAT_SECS * 1000) as i64;
        self.zombies.retain(|z| now_ms - z.3 < zombie_ms.min(heartbeat_ms as i64));
        let uncaught = |finished_ms: i64| (1.0 - (now_ms - finished_ms) as f64 / heartbeat_ms).clamp(0.0, 1.0);
        let influences = self
            .own
            .values()
            .filter_map(|o| match o {
                Own::HotMove { src, dst, load } => Some((*src, *dst, *load)),
                _ => None,
            })
            .chain(self.zombies.iter().map(|z| (z.0, z.1, z.2 * uncaught(z.3))))
            .collect::<Vec<_>>();
        for (src, dst, l) in influences {
            if src < load.len() && dst < load.len() {
                load[src] -= l;
                load[dst] += l;
            }
        }
        let stores = balanced_workers(c);
        if stores.len() < 2 {
            return;
        }
        let expect = stores.iter().map(|&w| load[w]).sum::<f64>() / stores.len() as f64;
        let mut srcs: Vec<usize> = stores.iter().copied().filter(|&w| load[w] > expect * PD_TOLERANCE_RATIO).collect();
        srcs.sort_by(|&a, &b| load[b].total_cmp(&load[a]));
        if srcs.is_empty() {
            return;
        }
        let mut peers: Vec<Vec<(usize, f64)>> = vec![Vec::new(); c.workers.len()];
        for p in 0..c.partitions.len() {
            let id = &c.partitions.ids[p];
            if let Some(&(d, _, Some(l))) = self.hot.get(id)
                && d >= PD_HOT_DEGREE
                && c.partitions.group[p].is_none()
                && c.partitions.stored_bytes[p]
                    <= PD_MAX_MOVABLE_SIZE_RATIO * scale.partition_bytes(c.partitions.table[p])
            {
                peers[c.partitions.owner[p] as usize].push((p, l));
            }
        }
        for src in srcs {
            let mut hot = std::mem::take(&mut peers[src]);
            hot.sort_by(|a, b| b.1.total_cmp(&a.1));
            for (p, x) in hot {
                if self.in_flight(|o| matches!(o, Own::HotMove { .. })) >= PD_HOT_REGION_LIMIT {
                    return;
                }
                let id = &c.partitions.ids[p];
                if !out.free(id) || self.tokens[src].1 < 1.0 {
                    continue;
                }
                let mut dsts: Vec<usize> = stores
                    .iter()
                    .copied()
                    .filter(|&w| w != src && load[w] * PD_TOLERANCE_RATIO < expect && self.tokens[w].0 >= 1.0)
                    .collect();
                dsts.sort_by(|&a, &b| load[a].total_cmp(&load[b]));
                let before = load[src];
                let Some(dst) =
                    dsts.into_iter().find(|&w| (before - x).max(load[w] + x) <= PD_GREAT_DEC_RATIO * before)
                else {
                    continue;
                };
                let reason = format!(
                    "pd: hot region {id} ({x:.0} ops/s, hot degree >= {PD_HOT_DEGREE}) from store {} ({before:.0} ops/s > mean {expect:.0} x {PD_TOLERANCE_RATIO}) to {} ({:.0})",
                    c.workers.ids[src], c.workers.ids[dst], load[dst]
                );
                load[src] -= x;
                load[dst] += x;
                self.tokens[src].1 -= 1.0;
                self.tokens[dst].0 -= 1.0;
                let action = self.id();
                self.own.insert(action.clone(), Own::HotMove { src, dst, load: x });
                out.push(
                    action,
                    ActionSpec::Move {
                        partition: id.clone(),
                        to_worker: c.workers.ids[dst].clone(),
                        max_bytes_per_sec: None,
                    },
                    reason,
                );
            }
        }
    }

    /// The merge checker's patrol.
    fn check_merges(&mut self, c: &Cluster, now_ms: i64, out: &mut Out<'_>, scale: &PeerScale) {
        self.splits.expire(now_ms - PD_SPLIT_MERGE_INTERVAL_SECS * 1000);
        let (hot, splits) = (&self.hot, &self.splits);
        let ok = |p: usize, out: &Out<'_>| {
            let id = &c.partitions.ids[p];
            c.partitions.group[p].is_none()
                && c.workers.is_up(c.partitions.owner[p] as usize)
                && out.free(id)
                && hot.get(id).is_none_or(|&(d, _, _)| d < PD_HOT_DEGREE)
                && !splits.is_piece(c, p)
        };
        for (t, table) in c.tables.iter().enumerate() {
            let max_merge = PD_MAX_MERGE_SIZE_RATIO * scale.partition_bytes(t as u32);
            let max_region = PD_MAX_REGION_SIZE_RATIO * scale.partition_bytes(t as u32);
            let sorted = &table.sorted;
            for (i, &p) in sorted.iter().enumerate() {
                if in_flight(&self.own, |o| matches!(o, Own::Merge)) >= PD_MERGE_LIMIT {
                    return;
                }
                let p = p as usize;
                let size = c.partitions.stored_bytes[p];
                if size >= max_merge || !ok(p, out) {
                    continue;
                }
                let fits = |q: usize| ok(q, out) && size + c.partitions.stored_bytes[q] <= max_region;
                let prev = i.checked_sub(1).map(|j| sorted[j] as usize).filter(|&q| fits(q));
                let next = sorted.get(i + 1).map(|&q| q as usize).filter(|&q| fits(q));
                let target = match (prev, next) {
                    (Some(a), Some(b)) if c.partitions.stored_bytes[a] < c.partitions.stored_bytes[b] => Some(a),
                    (_, Some(b)) => Some(b),
                    (a, None) => a,
                };
                let Some(q) = target else { continue };
                let (left, right) = if c.partitions.start[q] < c.partitions.start[p] { (q, p) } else { (p, q) };
                let reason = format!(
                    "pd: merge checker: {} ({:.0} MiB < max-merge-region-size 54/96 of a partition) into its neighbour {}, neither hot nor split within the hour",
                    c.partitions.ids[p],
                    size / f64::from(1u32 << 20),
                    c.partitions.ids[q]
                );
                let action = next_action_id(&mut self.next_id, PD);
                self.own.insert(action.clone(), Own::Merge);
                let spec = ActionSpec::Merge {
                    left: c.partitions.ids[left].clone(),
                    right: c.partitions.ids[right].clone(),
                    to_worker: None,
                };
                out.push(action, spec, reason);
            }
        }
    }
}

impl Strategy for Pd {
    fn name(&self) -> &str {
        PD
    }

    fn needs_input(&self) -> bool {
        false
    }

    fn decide(&mut self, ctx: &mut Context<'_>) -> Decision {
        let c = &ctx.engine.cluster;
        let (now_ms, t) = (ctx.now_ms, ctx.engine.t_secs());
        let scale = self.scale.get_or_insert_with(|| PeerScale::of(c)).clone();
        self.tokens.resize(c.workers.len(), (PD_STORE_LIMIT_PER_MIN, PD_STORE_LIMIT_PER_MIN));
        for tk in &mut self.tokens {
            tk.0 = (tk.0 + PD_STORE_LIMIT_PER_MIN / 60.0).min(PD_STORE_LIMIT_PER_MIN);
            tk.1 = (tk.1 + PD_STORE_LIMIT_PER_MIN / 60.0).min(PD_STORE_LIMIT_PER_MIN);
        }
        if self.region_interval.started_ms.is_none() {
            self.region_interval.roll(c, now_ms);
        }
        self.store_loads.add_second(c);
        let mut out = Out::new(ctx);
        self.load_split(c, t, &mut out, &scale);
        let secs = t.round() as u64;
        if secs.is_multiple_of(PD_REGION_HEARTBEAT_SECS) {
            self.update_hot_cache(c, now_ms, &scale);
        }
        if secs.is_multiple_of(PD_STORE_HEARTBEAT_SECS) {
            self.schedule_hot(c, now_ms, &mut out, &scale);
        }
        if secs.is_multiple_of(PD_MERGE_PATROL_SECS) {
            self.check_merges(c, now_ms, &mut out, &scale);
        }
        Decision { actions: out.actions, plan: None }
    }

    fn refused(&mut self, id: &ActionId) {
        self.own.remove(id);
    }

    fn finished(&mut self, id: &ActionId, applied: bool, at_ms: i64) {
        match self.own.remove(id) {
            Some(Own::HotMove { src, dst, load }) if applied => {
                self.zombies.push((src, dst, load, at_ms));
            }
            Some(Own::Split { table, key }) if applied => self.splits.record(table, key, at_ms),
            _ => {}
        }
    }
}

/// One range's max served ops/s per minute over the last minutes (CockroachDB's max QPS
/// tracker for merges), kept only for ranges small enough to merge.
#[derive(Debug, Clone)]
struct MaxQps {
    range: KeyRange,
    since_ms: i64,
    /// (minute, max ops/s in it), newest last.
    minutes: VecDeque<(i64, f64)>,
}

impl MaxQps {
    fn record(&mut self, now_ms: i64, qps: f64) {
        let minute = now_ms.div_euclid(60_000);
        match self.minutes.back_mut() {
            Some((m, max)) if *m == minute => *max = max.max(qps),
            _ => self.minutes.push_back((minute, qps)),
        }
        let keep = CRDB_MERGE_DELAY_SECS / 60 + 1;
        while self.minutes.front().is_some_and(|(m, _)| *m < minute - keep + 1) {
            self.minutes.pop_front();
        }
    }

    /// The max over the merge delay, once it has been measured that long.
    fn max(&self, now_ms: i64) -> Option<f64> {
        (now_ms - self.since_ms >= CRDB_MERGE_DELAY_SECS * 1000)
            .then(|| self.minutes.iter().map(|&(_, q)| q).fold(0.0, f64::max))
    }
}

/// CockroachDB with its defaults; see the module doc and each constant.
///
/// Every second: load-based split (a range over 2,500 QPS scaled for 10 s asks the finder,
/// [`sampled_split_key`]). Once a minute: each store's rebalancer — a store over the mean by
/// more than 10 % (and the scaled 100 QPS floor) takes its 128 hottest replicas, skips those
/// under 2 % of its load, and sends each to the coolest store when the coolest is under the mean
/// and the source without the replica is still twice the floor above it, until it is no longer
/// overfull; a store relocates one replica at a time (the rebalancer waits for each), the rest
/// of its list waits. Once a minute: the merge queue — a range under 128/512 of the split size
/// whose right neighbour is too, the right side not a load split of the last 5 min, and both
/// sides' max QPS over the last 5 min summing under half the split threshold, merges; one merge
/// in flight per store.
#[derive(Debug, Default)]
pub struct Crdb {
    scale: Option<PeerScale>,
    streaks: Streaks,
    interval: Interval,
    store_loads: StoreLoads,
    /// Per source store, the minute's remaining list: (partition, target store, its load).
    queues: Vec<VecDeque<(PartitionId, usize, f64)>>,
    own: HashMap<ActionId, Own>,
    /// Stores with a merge in flight (by the left side's store).
    merging: HashMap<ActionId, usize>,
    sticky: SplitCache,
    max_qps: HashMap<PartitionId, MaxQps>,
    next_id: u64,
    /// Load splits the finder refused (no split key found).
    pub no_split_key: usize,
    /// Store rebalancer passes run (tests).
    pub passes: usize,
}

impl Crdb {
    fn id(&mut self) -> ActionId {
        next_action_id(&mut self.next_id, CRDB)
    }

    fn load_split(&mut self, c: &Cluster, t_secs: f64, out: &mut Out<'_>, scale: &PeerScale) {
        let qps = scale.qps(CRDB_SPLIT_QPS);
        let ready = self.streaks.update(c, CRDB_SPLIT_RECORD_SECS, |p| served_ops(c, p) >= qps);
        for p in ready {
            let id = c.partitions.ids[p].clone();
            if !out.free(&id) {
                continue;
            }
            self.streaks.restart(&id);
            match sampled_split_key(c, p, t_secs) {
                Ok(key) => {
                    let reason = format!(
                        "crdb: load-based split of {id}: {:.0} QPS over {qps:.0} (load_qps_threshold 2500 scaled) for {CRDB_SPLIT_RECORD_SECS} s, at the finder's key",
                        served_ops(c, p)
                    );
                    let action = self.id();
                    self.own.insert(action.clone(), Own::Split { table: c.partitions.table[p], key: key.0 });
                    out.push(action, ActionSpec::Split { partition: id, split_key: key }, reason);
                }
                Err(_) => self.no_split_key += 1,
            }
        }
    }

    /// Every store's rebalancer pass, hottest store first, each seeing the others' choices.
    fn rebalance(&mut self, c: &Cluster, now_ms: i64, scale: &PeerScale) {
        self.passes += 1;
        let means = self.interval.roll(c, now_ms);
        let mut load = self.store_loads.roll();
        load.resize(c.workers.len(), 0.0);
        self.queues = vec![VecDeque::new(); c.workers.len()];
        let stores = balanced_workers(c);
        if stores.len() < 2 {
            return;
        }
        let mean = stores.iter().map(|&w| load[w]).sum::<f64>() / stores.len() as f64;
        let floor = scale.qps(CRDB_MIN_QPS_DIFF);
        let overfull = (mean * (1.0 + CRDB_REBALANCE_THRESHOLD_RATIO)).max(mean + floor);
        let min_diff = CRDB_MIN_TRANSFER_DIFF_FACTOR * floor;
        let mut replicas: Vec<Vec<(usize, f64)>> = vec![Vec::new(); c.workers.len()];
        for (p, m) in means.iter().enumerate() {
            if let Some(m) = m
                && c.partitions.group[p].is_none()
            {
                replicas[c.partitions.owner[p] as usize].push((p, *m));
            }
        }
        let mut order = stores.clone();
        order.sort_by(|&a, &b| load[b].total_cmp(&load[a]));
        for src in order {
            if load[src] <= overfull {
                continue;
            }
            let mut hottest = std::mem::take(&mut replicas[src]);
            hottest.sort_by(|a, b| b.1.total_cmp(&a.1));
            hottest.truncate(CRDB_TOP_REPLICAS);
            for (p, r) in hottest {
                if load[src] <= overfull {
                    break;
                }
                if r < CRDB_MIN_REPLICA_FRACTION * load[src] {
                    continue;
                }
                let Some(&coldest) =
                    stores.iter().filter(|&&w| w != src).min_by(|&&a, &&b| load[a].total_cmp(&load[b]))
                else {
                    continue;
                };
                if load[coldest] >= mean || (load[src] - r).max(0.0) - load[coldest] < min_diff {
                    continue;
                }
                load[src] -= r;
                load[coldest] += r;
                self.queues[src].push_back((c.partitions.ids[p].clone(), coldest, r));
            }
        }
    }

    /// Submits each store's next relocation when it has none in flight.
    fn relocate(&mut self, c: &Cluster, out: &mut Out<'_>) {
        let relocating: HashSet<usize> = self
            .own
            .values()
            .filter_map(|o| match o {
                Own::Rebalance { src } => Some(*src),
                _ => None,
            })
            .collect();
        for src in 0..self.queues.len() {
            if relocating.contains(&src) {
                continue;
            }
            while let Some((id, dst, r)) = self.queues[src].pop_front() {
                let Some(p) = c.partitions.find(&id) else { continue };
                let dst_ok = dst < c.workers.len() && c.workers.is_up(dst) && c.workers.group[dst].is_none();
                if c.partitions.owner[p] as usize != src || !dst_ok || !out.free(&id) {
                    continue;
                }
                let reason = format!(
                    "crdb: store rebalancer: {id} ({r:.0} QPS) from overfull store {} to the coolest store {}",
                    c.workers.ids[src], c.workers.ids[dst]
                );
                let action = self.id();
                self.own.insert(action.clone(), Own::Rebalance { src });
                out.push(
                    action,
                    ActionSpec::Move { partition: id, to_worker: c.workers.ids[dst].clone(), max_bytes_per_sec: None },
                    reason,
                );
                break;
            }
        }
    }

    /// Records the small ranges' QPS each second; once a minute, the merge queue's pass.
    fn merges(&mut self, c: &Cluster, now_ms: i64, out: &mut Out<'_>, scale: &PeerScale, scan: bool) {
        let min_bytes = |p: usize| CRDB_MIN_BYTES_RATIO * scale.partition_bytes(c.partitions.table[p]);
        let mut seen = HashMap::with_capacity(self.max_qps.len());
        for p in 0..c.partitions.len() {
            if c.partitions.stored_bytes[p] >= min_bytes(p) {
                continue;
            }
            let (id, range) = (&c.partitions.ids[p], c.partitions.range(p));
            let mut tracker = match self.max_qps.remove(id) {
                Some(t) if t.range == range => t,
                _ => MaxQps { range, since_ms: now_ms, minutes: VecDeque::new() },
            };
            tracker.record(now_ms, served_ops(c, p));
            seen.insert(id.clone(), tracker);
        }
        self.max_qps = seen;
        if !scan {
            return;
        }
        self.sticky.expire(now_ms - CRDB_MERGE_DELAY_SECS * 1000);
        let merge_below = 0.5 * scale.qps(CRDB_SPLIT_QPS);
        let mut stores_merging: HashSet<usize> = self.merging.values().copied().collect();
        for table in &c.tables {
            for pair in table.sorted.windows(2) {
                let (l, r) = (pair[0] as usize, pair[1] as usize);
                let store = c.partitions.owner[l] as usize;
                let (lid, rid) = (&c.partitions.ids[l], &c.partitions.ids[r]);
                if stores_merging.contains(&store)
                    || !out.free(lid)
                    || !out.free(rid)
                    || c.partitions.group[l].is_some()
                    || c.partitions.group[r].is_some()
                    || !c.workers.is_up(store)
                    || self.sticky.starts_at_split(c, r)
                {
                    continue;
                }
                // Tracked only while under range_min_bytes: both sides must be.
                let (Some(lq), Some(rq)) = (
                    self.max_qps.get(lid).and_then(|t| t.max(now_ms)),
                    self.max_qps.get(rid).and_then(|t| t.max(now_ms)),
                ) else {
                    continue;
                };
                if lq + rq >= merge_below {
                    continue;
                }
                let reason = format!(
                    "crdb: merge queue: {lid} + {rid} under range_min_bytes (128/512 of a partition), max QPS over 5 min {lq:.0} + {rq:.0} < {merge_below:.0}"
                );
                let action = self.id();
                self.own.insert(action.clone(), Own::Merge);
                self.merging.insert(action.clone(), store);
                stores_merging.insert(store);
                out.push(action, ActionSpec::Merge { left: lid.clone(), right: rid.clone(), to_worker: None }, reason);
            }
        }
    }
}

impl Strategy for Crdb {
    fn name(&self) -> &str {
        CRDB
    }

    fn needs_input(&self) -> bool {
        false
    }

    fn decide(&mut self, ctx: &mut Context<'_>) -> Decision {
        let c = &ctx.engine.cluster;
        let (now_ms, t) = (ctx.now_ms, ctx.engine.t_secs());
        let scale = self.scale.get_or_insert_with(|| PeerScale::of(c)).clone();
        if self.interval.started_ms.is_none() {
            self.interval.roll(c, now_ms);
        }
        self.store_loads.add_second(c);
        let mut out = Out::new(ctx);
        self.load_split(c, t, &mut out, &scale);
        let secs = t.round() as u64;
        if secs.is_multiple_of(CRDB_REBALANCE_SECS) {
            self.rebalance(c, now_ms, &scale);
        }
        self.relocate(c, &mut out);
        self.merges(c, now_ms, &mut out, &scale, secs.is_multiple_of(CRDB_MERGE_SCAN_SECS));
        Decision { actions: out.actions, plan: None }
    }

    fn refused(&mut self, id: &ActionId) {
        self.own.remove(id);
        self.merging.remove(id);
    }

    fn finished(&mut self, id: &ActionId, applied: bool, at_ms: i64) {
        self.merging.remove(id);
        if let Some(Own::Split { table, key }) = self.own.remove(id)
            && applied
        {
            self.sticky.record(table, key, at_ms);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use lb_common::protocol::ActionKind;
    use lb_testbed::scenario::Scenario;

    use super::*;
    use crate::sim::{Outcome, Sim};

    /// A cluster of `workers` with an 8,000 ops/s partition limit (TiKV splits at 4,800 served
    /// ops/s, CockroachDB at 4,000) and one table; `extra` adds workloads and timeline events.
    fn scenario(workers: u32, partitions: u32, extra: &str) -> Scenario {
        let text = format!(
            r#"
name = "peers-test"
seed = 3
[cluster]
workers = {workers}
worker_ops_per_sec = 40000
worker_bytes_per_sec = 4e9
partition_limit_ops_per_sec = 8000
partition_limit_bytes_per_sec = 1e9
[[tables]]
tenant = "acme"
table = "orders"
partitions = {partitions}
{extra}
"#
        );
        Scenario::parse(&text, Path::new("peers-test.toml")).expect("valid scenario")
    }

    fn run(scenario: &Scenario, strategy: &str, secs: u64) -> Sim {
        let mut sim = Sim::new(scenario, crate::sim::strategy::by_name(strategy, scenario).expect("registered"));
        sim.run_until(secs);
        assert!(sim.violations.is_empty(), "{:?}", sim.violations);
        assert!(sim.submit_errors.is_empty(), "{:?}", sim.submit_errors);
        sim
    }

    fn splits_at(sim: &Sim) -> Vec<u64> {
        sim.actions.iter().filter(|a| a.spec.kind() == ActionKind::Split).map(|a| a.t_secs).collect()
    }

    /// A band inside partition 0 at 6,000 ops/s from 20 s: over TiKV's scaled 4,800, under the
    /// partition's limit (so served is what is asked).
    const HOT_BAND: &str = r#"
[[tables.workloads]]
kind = "uniform"
ops_per_sec = 4000
[[tables.workloads]]
kind = "hot_range"
ops_per_sec = 6000
start_key = "0800000000000000"
end_key = "0800ffffffffffff"
start_secs = 20
"#;

    #[test]
    fn pd_splits_a_hot_region_after_ten_seconds_over_the_threshold_and_not_before() {
        let s = scenario(2, 4, HOT_BAND);
        let sim = run(&s, PD, 40);
        let splits = splits_at(&sim);
        // Over the threshold from the step at 20 s: the 10th consecutive second is 29 s.
        assert_eq!(splits.first().copied(), Some(29), "{splits:?}");
        let key = match &sim.actions[0].spec {
            ActionSpec::Split { split_key, .. } => *split_key,
            other => panic!("{other:?}"),
        };
        // The band fills the third of the partition's 16 sketch buckets: the median is in it.
        assert!((0x0800_0000_0000_0000..0x0c00_0000_0000_0000).contains(&key.0), "{key:?}");
    }

    #[test]
    fn crdb_splits_a_hot_range_after_ten_seconds_of_recording_and_not_before() {
        let s = scenario(2, 4, HOT_BAND);
        let sim = run(&s, CRDB, 40);
        assert_eq!(splits_at(&sim).first().copied(), Some(29), "{:?}", splits_at(&sim));
    }

    #[test]
    fn a_single_hot_key_is_not_split_by_either_no_split_key_found() {
        // 7,000 ops/s on one key of partition 0 (under its limit, over both split thresholds):
        // every sampled key leaves the key's side with ~95 % of the load.
        let s = scenario(
            2,
            4,
            r#"
[[tables.workloads]]
kind = "uniform"
ops_per_sec = 1600
[[tables.workloads]]
kind = "hot_key"
ops_per_sec = 7000
key = "1000000000000000"
"#,
        );
        for name in [PD, CRDB] {
            let sim = run(&s, name, 120);
            assert!(splits_at(&sim).is_empty(), "{name} split a single hot key: {:?}", sim.actions);
            let c = &sim.engine.cluster;
            let p = (0..c.partitions.len()).find(|&p| c.partitions.start[p] == 0).expect("partition 0");
            assert!(served_ops(c, p) >= 4800.0, "the key's partition is over both thresholds");
            assert!(
                matches!(sampled_split_key(c, p, sim.engine.t_secs()), Err(NoSplitKey::Unbalanced { best_score }) if best_score > 0.8),
                "no split key found"
            );
        }
    }

    #[test]
    fn the_finder_picks_the_weighted_median_of_a_spread_load() {
        // A uniform table: partition 0's median is its middle key.
        let s = scenario(2, 4, "[[tables.workloads]]\nkind = \"uniform\"\nops_per_sec = 4000\n");
        let engine = lb_testbed::Engine::new(&s);
        let c = &engine.cluster;
        let key = sampled_split_key(c, 0, 0.0).expect("a balanced key");
        let mid = (c.partitions.start[0] / 2) + (c.partitions.end[0] / 2);
        assert!(key.0.abs_diff(mid) <= (c.partitions.end[0] - c.partitions.start[0]) / 20, "{key:?} vs {mid:#x}");
    }

    #[test]
    fn crdb_rebalances_only_on_the_minute_and_never_its_hottest_replica_when_that_overshoots() {
        // Partition 0 (on w-0000) at 3,500 ops/s, under CockroachDB's split threshold; every
        // other partition at 500. w-0000 (4,000) is overfull against the mean (1,750): moving
        // partition 0 would leave it under the coolest store, so the rebalancer sends
        // partition 4 instead — and only on the minute.
        let s = scenario(
            4,
            8,
            r#"
[[tables.workloads]]
kind = "uniform"
ops_per_sec = 4000
[[tables.workloads]]
kind = "hot_range"
ops_per_sec = 3000
start_key = "0000000000000000"
end_key = "1fffffffffffffff"
"#,
        );
        let sim = run(&s, CRDB, 185);
        let moves: Vec<&crate::sim::ActionRecord> =
            sim.actions.iter().filter(|a| a.spec.kind() == ActionKind::Move).collect();
        assert!(!moves.is_empty(), "an overfull store sheds load");
        for m in &moves {
            assert_eq!(m.t_secs % CRDB_REBALANCE_SECS, 0, "a move off the minute: {m:?}");
            let ActionSpec::Move { partition, .. } = &m.spec else { unreachable!() };
            assert_ne!(partition.as_str(), sim.engine.cluster.partitions.ids[0].as_str(), "the hottest overshoots");
        }
        assert_eq!(moves[0].t_secs, 60, "the first pass is at the first minute");
    }

    #[test]
    fn pd_keeps_at_most_four_hot_region_operators_in_flight() {
        // Two loaded workers, six empty ones joining at 1 s: more hot peers want to move than
        // the limit allows. Peers become schedulable after 3 region heartbeats (180 s).
        let mut extra = String::from("[[tables.workloads]]\nkind = \"uniform\"\nops_per_sec = 48000\n");
        for w in 2..8 {
            extra.push_str(&format!("[[timeline]]\nat_secs = 1\nevent = \"worker_added\"\nworker = \"w-{w:04}\"\n"));
        }
        let s = scenario(2, 16, &extra);
        let sim = run(&s, PD, 400);
        let moves: Vec<&crate::sim::ActionRecord> =
            sim.actions.iter().filter(|a| a.spec.kind() == ActionKind::Move).collect();
        assert!(moves.len() > PD_HOT_REGION_LIMIT, "the limit binds: {} moves", moves.len());
        assert!(moves.iter().all(|m| m.t_secs >= 180), "no peer is hot before 3 intervals");
        for t in 0..400 {
            let running = moves
                .iter()
                .filter(|m| {
                    m.t_secs <= t
                        && match m.outcome {
                            Outcome::Succeeded { at_secs } | Outcome::Failed { at_secs } => at_secs > t,
                            Outcome::InFlight => true,
                        }
                })
                .count();
            assert!(running <= PD_HOT_REGION_LIMIT, "{running} hot-region operators at {t} s");
        }
    }
}
