//! The load model a pass plans on: per-partition demand and per-worker sums in three additive
//! dimensions (ops, bytes, CPU), with in-flight moves already applied. Every proposal updates
//! it, so later decisions of the same pass see earlier ones as done.

use std::collections::HashMap;

use lb_common::ids::{GroupId, Key, KeyRange, PartitionId, WorkerId};
use lb_common::protocol::{ActionKind, ActionSpec, GroupTarget, Health, KeySketch};

use super::input::PlannerInput;

/// A throttled stream runs at no less than an eighth of the storage's full rate (a 1 GiB move
/// then takes 80 s, at 12.5 MiB/s where the full rate is 100 MiB/s; it is presumed stuck only
/// after [`STALL_SLOWDOWN`] times that). A source with less to spare waits rather than stream
/// for ever.
pub const MIN_STREAM_RATE_RATIO: f64 = 0.125;

/// A stream leaves 1 % of its source's capacity unused: the last window's load is a
/// measurement, and a source planned to exactly its capacity reads a little over it (the
/// zipf-skew scenario's balancing moves left one at 1.002 for 11 s).
pub const STREAM_SPARE_MARGIN: f64 = 0.01;

/// What a move's stream costs its source: at the storage's full rate, `drain_ratio` of the
/// source's capacity; where the storage throttles a move to the rate it names (`throttle`,
/// [`PlannerInput::move_rate_limit`]), a throttled stream costs in proportion to its rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Streams {
    pub drain_ratio: f64,
    pub full_bytes_per_sec: f64,
    pub throttle: bool,
    /// The least time an action may run before it is presumed stuck (busy, but its move not
    /// counted as done); one with more bytes to stream gets [`STALL_SLOWDOWN`] times what they
    /// take at its rate ([`Streams::stuck`]).
    pub stalled_ms: i64,
}

/// An action streaming `b` bytes is presumed stuck once it has run this many times what they
/// take at its rate (and `stalled_action_secs` at least): a stream that slow is not streaming.
/// CockroachDB times its queues' snapshots out the same way, at 10 times their size over the
/// rate; here a wrong guess costs less (the action is not cancelled, only planned around), so
/// a hung move is planned around sooner.
pub const STALL_SLOWDOWN: f64 = 3.0;

impl Streams {
    pub fn new(caps: &super::config::CapsConfig, throttle: bool) -> Self {
        Self {
            drain_ratio: caps.move_source_drain_ratio.clamp(0.0, 0.5),
            full_bytes_per_sec: caps.move_stream_bytes_per_sec,
            throttle,
            stalled_ms: (caps.stalled_action_secs * 1000) as i64,
        }
    }

    /// A stream at the full rate costing `drain_ratio`, never presumed stuck: for tests and
    /// benches that do not care.
    #[cfg(test)]
    pub fn unthrottled(drain_ratio: f64) -> Self {
        Self { drain_ratio, full_bytes_per_sec: 100.0 * 1024.0 * 1024.0, throttle: false, stalled_ms: i64::MAX / 4 }
    }

    /// The rate over the full rate of a move that names `rate` (1 for none).
    fn speed(&self, rate: Option<u64>) -> f64 {
        rate.map_or(1.0, |r| (r as f64 / self.full_bytes_per_sec).clamp(f64::MIN_POSITIVE, 1.0))
    }

    /// Whether an action that started at `started_at_ms` streaming `bytes` at `speed` of the
    /// full rate is presumed stuck at `now_ms`: it has run longer than `stalled_ms` and than
    /// [`STALL_SLOWDOWN`] times what its bytes take at that rate.
    pub fn stuck(&self, bytes: u64, speed: f64, started_at_ms: i64, now_ms: i64) -> bool {
        let streaming_ms = bytes as f64 / (self.full_bytes_per_sec * speed.max(f64::MIN_POSITIVE)) * 1000.0;
        let allowed_ms = (self.stalled_ms as f64).max(STALL_SLOWDOWN * streaming_ms);
        (now_ms.saturating_sub(started_at_ms)) as f64 > allowed_ms
    }
}

/// A move's stream as the planner starts it: the capacity share it takes from its source, and
/// the rate it names (`None`: the storage's full rate).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stream {
    pub share: f64,
    pub max_bytes_per_sec: Option<u64>,
}

/// A partition's own limit and the measurements its demand is judged by against it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OwnLimit {
    /// Ops/s it may serve (infinite without a limit).
    pub limit_ops: f64,
    /// Bytes/s it may serve (0: not a dimension of its limit).
    pub limit_bytes: f64,
    pub ops_per_sec: f64,
    pub bytes_per_sec: f64,
    pub rejected_per_sec: f64,
}

impl OwnLimit {
    fn of(p: &super::input::PartitionView) -> Self {
        let s = &p.stats;
        Self {
            limit_ops: p.limit.map_or(f64::INFINITY, |l| l.ops_per_sec),
            limit_bytes: p.limit.map_or(0.0, |l| l.bytes_per_sec),
            ops_per_sec: s.ops_per_sec,
            bytes_per_sec: s.bytes_per_sec,
            rejected_per_sec: s.rejected_per_sec,
        }
    }
}

/// Each partition's load, demand and own limit, and what each worker serves of its partitions
/// (`owners[i]` is partition `i`'s worker): the pass's one read of every partition's view.
/// (Reading them on two threads past 20,000 partitions was tried and made the planner bench's
/// pass slower, 10.9 -> 17.6 ms: the second thread's fresh allocations fault their pages in.)
fn read_partitions(
    partitions: &[super::input::PartitionView],
    owners: &[u32],
    workers: usize,
) -> (Vec<Load>, Vec<f64>, Vec<OwnLimit>, Vec<Load>) {
    let n = partitions.len();
    let (mut load, mut demand_ops, mut own) = (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
    let mut served = vec![Load::default(); workers];
    for (p, &w) in partitions.iter().zip(owners) {
        own.push(OwnLimit::of(p));
        let s = &p.stats;
        if let Some(sv) = served.get_mut(w as usize) {
            sv.add(Load { ops: s.ops_per_sec, bytes: s.bytes_per_sec, cpu: s.cpu_cores }, 1.0);
        }
        let (l, demand) = measured_load(p);
        load.push(l);
        demand_ops.push(demand);
    }
    (load, demand_ops, own, served)
}

/// Load in the three additive dimensions.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Load {
    pub ops: f64,
    pub bytes: f64,
    pub cpu: f64,
}

impl Load {
    pub fn add(&mut self, o: Load, sign: f64) {
        self.ops += sign * o.ops;
        self.bytes += sign * o.bytes;
        self.cpu += sign * o.cpu;
    }
}

#[derive(Debug)]
pub struct Model {
    /// Per partition: owner after in-flight moves, its load on that owner, its demand in ops.
    pub owner: Vec<u32>,
    pub load: Vec<Load>,
    pub demand_ops: Vec<f64>,
    /// Per partition: what its demand is judged against, copied out of its view so that the
    /// pass's look at every partition reads one compact array.
    pub own: Vec<OwnLimit>,
    /// Busy with an in-flight action (or proposed this pass).
    pub busy: Vec<bool>,
    /// Per worker: load sum (partitions + background), capacity per dimension, eligibility.
    pub worker_load: Vec<Load>,
    cap: Vec<Load>,
    /// Per worker: `1 / cap` per dimension (0 where the capacity is 0), for
    /// [`Model::ratio_with_bounds`].
    inv_cap: Vec<Load>,
    streams: Streams,
    /// Per worker: capacity share left while its outgoing moves stream (transient only).
    drain: Vec<f64>,
    pub healthy: Vec<bool>,
    /// Per worker: load of partitions streaming away (in flight or proposed): make-before-break
    /// keeps serving them on the source until the move ends.
    pub outgoing: Vec<Load>,
    /// In-flight + proposed actions touching each worker.
    pub worker_actions: Vec<u32>,
    pub cluster_actions: u32,
    /// Partitions per worker (indices), built once.
    pub by_worker_start: Vec<u32>,
    pub by_worker: Vec<u32>,
    /// Workers an in-flight dedication is giving to one partition, with the group it forms.
    pub dedicating: Vec<(usize, GroupId)>,
    /// Partitions per worker, with those on their way (in flight or proposed) counted where
    /// they land: what a storage system's group placement goes by.
    pub held: Vec<u32>,
    /// Changes of the workers' loads and action counts since the model was built: what a view
    /// sorted by load ([`super::destinations`]) was sorted at.
    workers_changed: u64,
}

impl Model {
    /// At `now_ms`: in-flight actions that started longer ago than `streams` allows are presumed
    /// stuck (busy, but their move is not counted as done).
    pub fn build(input: &PlannerInput, streams: Streams, now_ms: i64) -> Self {
        Self::build_with_owners(input, &owner_positions(input), None, streams, now_ms)
    }

    /// [`Model::build`] with each partition's owner's position already known
    /// ([`owner_positions`], kept per layout by the planner's state), and the partitions'
    /// positions by id when kept too (else hashed here when actions are in flight).
    pub fn build_with_owners(
        input: &PlannerInput,
        owners: &[u32],
        ids: Option<&super::IdIndex>,
        streams: Streams,
        now_ms: i64,
    ) -> Self {
        let nw = input.workers.len();
        let (mut worker_index, mut partition_index) = (HashMap::new(), HashMap::new());
        if !input.in_flight.is_empty() {
            worker_index = input.workers.iter().enumerate().map(|(i, w)| (&w.id, i as u32)).collect();
            if ids.is_none() {
                partition_index = input.partitions.iter().enumerate().map(|(i, p)| (&p.id, i)).collect();
            }
        }
        let position = |id: &PartitionId| match ids {
            Some(ids) => ids.last(id, &input.partitions),
            None => partition_index.get(id).copied(),
        };
        let n = input.partitions.len();
        let mut owner = owners.to_vec();
        let (mut load, demand_ops, own, served) = read_partitions(&input.partitions, owners, nw);
        let mut cap = Vec::with_capacity(nw);
        let mut worker_load = Vec::with_capacity(nw);
        let mut healthy = Vec::with_capacity(nw);
        for (w, info) in input.workers.iter().enumerate() {
            cap.push(Load { ops: info.capacity.ops_per_sec, bytes: info.capacity.bytes_per_sec, cpu: info.cpu_cores });
            let reported_cpu = info.load.cpu_ratio * info.cpu_cores;
            // Background: what the worker serves beyond its partitions (never negative).
            worker_load.push(Load {
                ops: (info.load.ops_per_sec - served[w].ops).max(0.0),
                bytes: (info.load.bytes_per_sec - served[w].bytes).max(0.0),
                cpu: (reported_cpu - info.load.attributed_cpu_cores.unwrap_or(served[w].cpu)).max(0.0),
            });
            healthy.push(info.health == Health::Healthy);
        }
        let mut busy = vec![false; n];
        let mut worker_actions = vec![0u32; nw];
        let mut outgoing = vec![Load::default(); nw];
        let mut drain = vec![1.0f64; nw];
        // Partitions per worker, counting those on their way (a storage's group placement).
        let mut held = vec![0u32; nw];
        for &w in &owner {
            if let Some(h) = held.get_mut(w as usize) {
                *h += 1;
            }
        }
        // Load already on its way somewhere that no owner change shows: new split pieces.
        let mut arriving = vec![Load::default(); nw];
        for a in &input.in_flight {
            for id in partitions_of(&a.spec) {
                if let Some(i) = position(id) {
                    busy[i] = true;
                    if matches!(a.spec, ActionSpec::Split { .. }) {
                        continue;
                    }
                    if let ActionSpec::SplitInto { split_keys, to_workers, first_to_worker, .. } = &a.spec {
                        let p = &input.partitions[i];
                        let shares = piece_shares(p.range, p.stats.sketch.as_ref(), split_keys);
                        let whole = load[i];
                        let src = owner[i] as usize;
                        // Its leaving pieces are still served here while they stream, unless
                        // it is presumed stuck (as a move is) on the bytes that leave: the pieces
                        // bound for other workers, the first one too if it goes elsewhere (the
                        // sketch's load shares stand for their bytes).
                        let elsewhere = |to: &WorkerId| worker_index.get(to).is_some_and(|&w| w != owner[i]);
                        let mut leaving_share: f64 =
                            shares[1..].iter().zip(to_workers).filter(|(_, to)| elsewhere(to)).map(|(s, _)| s).sum();
                        if first_to_worker.as_ref().is_some_and(elsewhere) {
                            leaving_share += shares[0];
                        }
                        let leaving_bytes = (p.stored_bytes as f64 * leaving_share.clamp(0.0, 1.0)) as u64;
                        let streaming = !streams.stuck(leaving_bytes, 1.0, a.started_at_ms, now_ms);
                        load[i] = piece_load(p, whole, demand_ops[i], shares[0]);
                        // Pieces going elsewhere are still served here until the split ends, and
                        // their stream takes its share of this worker's capacity (as a move's).
                        let mut leaving = false;
                        for (share, to) in shares[1..].iter().zip(to_workers) {
                            if let Some(&w) = worker_index.get(to) {
                                let piece = piece_load(p, whole, demand_ops[i], *share);
                                arriving[w as usize].add(piece, 1.0);
                                if w != owner[i] {
                                    worker_actions[w as usize] += 1;
                                    if streaming && let Some(o) = outgoing.get_mut(owner[i] as usize) {
                                        o.add(piece, 1.0);
                                    }
                                    leaving = true;
                                }
                            }
                        }
                        if let Some(c) = worker_actions.get_mut(owner[i] as usize) {
                            *c += 1;
                        }
                        // The first piece going elsewhere is there already, as a move's partition.
                        if let Some(&w) = first_to_worker.as_ref().and_then(|to| worker_index.get(to)) {
                            // The partition's worker keeps a piece only if one stays there.
                            if !to_workers.iter().any(|t| worker_index.get(t) == Some(&owner[i]))
                                && let Some(h) = held.get_mut(owner[i] as usize)
                            {
                                *h = h.saturating_sub(1);
                            }
                            held[w as usize] += 1;
                            if w as usize != src {
                                if streaming {
                                    outgoing[src].add(load[i], 1.0);
                                }
                                leaving = true;
                            }
                            owner[i] = w;
                            if w as usize != src {
                                worker_actions[w as usize] += 1;
                            }
                        }
                        if leaving {
                            drain[src] = (drain[src] - streams.drain_ratio).max(0.5);
                        }
                        continue;
                    }
                    if let Some(c) = worker_actions.get_mut(owner[i] as usize) {
                        *c += 1;
                    }
                    // A merge streams only the side not on where it lands (its `to_worker`, else
                    // the left's owner), like a move; the side already there streams nothing.
                    let merge_dest = match &a.spec {
                        ActionSpec::Merge { left, to_worker, .. } => to_worker
                            .as_ref()
                            .or_else(|| position(left).map(|l| &input.partitions[l].owner))
                            .and_then(|w| worker_index.get(w).copied()),
                        _ => None,
                    };
                    if matches!(a.spec, ActionSpec::Merge { .. }) && merge_dest.is_none_or(|d| d == owner[i]) {
                        continue;
                    }
                    // The source streams until the move ends: it has less capacity meanwhile, as
                    // much less as the stream is fast; a throttled one runs longer.
                    let rate = match &a.spec {
                        ActionSpec::Move { max_bytes_per_sec, .. } => *max_bytes_per_sec,
                        _ => None,
                    };
                    let speed = streams.speed(rate);
                    if let Some(d) = drain.get_mut(owner[i] as usize) {
                        *d = (*d - streams.drain_ratio * speed).max(0.5);
                    }
                    // Where it lands: a move's destination; an isolation into a group the
                    // topology shows, where the storage puts it (its fewest-partitions worker).
                    let to = match &a.spec {
                        ActionSpec::Move { to_worker, .. } => worker_index.get(to_worker).copied(),
                        ActionSpec::Merge { .. } => merge_dest,
                        ActionSpec::Group { group, .. } => group_placement(input, group, &held, owner[i] as usize),
                        _ => None,
                    };
                    // Presumed stuck, it is planned as if it may never end (its source keeps
                    // the partition) and as if it may still land (its destination keeps room
                    // for it): both ways are safe.
                    if let Some(w) = to
                        && streams.stuck(input.partitions[i].stored_bytes, speed, a.started_at_ms, now_ms)
                    {
                        arriving[w as usize].add(load[i], 1.0);
                        // A merge counted its action on the side already there.
                        if !matches!(a.spec, ActionSpec::Merge { .. }) {
                            worker_actions[w as usize] += 1;
                        }
                        continue;
                    }
                    if let Some(w) = to {
                        if let Some(o) = outgoing.get_mut(owner[i] as usize) {
                            o.add(load[i], 1.0);
                        }
                        if let Some(h) = held.get_mut(owner[i] as usize) {
                            *h = h.saturating_sub(1);
                        }
                        // A merge's other side is on `w` already: it counted the action there,
                        // and the two end as one partition.
                        if !matches!(a.spec, ActionSpec::Merge { .. }) {
                            held[w as usize] += 1;
                            worker_actions[w as usize] += 1;
                        }
                        owner[i] = w;
                    }
                }
            }
        }
        for (i, &w) in owner.iter().enumerate() {
            if let Some(wl) = worker_load.get_mut(w as usize) {
                wl.add(load[i], 1.0);
            }
        }
        for (wl, a) in worker_load.iter_mut().zip(&arriving) {
            wl.add(*a, 1.0);
        }
        let mut by_worker_start = vec![0u32; nw + 1];
        for &w in &owner {
            if (w as usize) < nw {
                by_worker_start[w as usize + 1] += 1;
            }
        }
        for w in 0..nw {
            by_worker_start[w + 1] += by_worker_start[w];
        }
        let mut fill = by_worker_start.clone();
        let mut by_worker = vec![0u32; by_worker_start[nw] as usize];
        for (i, &w) in owner.iter().enumerate() {
            if (w as usize) < nw {
                by_worker[fill[w as usize] as usize] = i as u32;
                fill[w as usize] += 1;
            }
        }
        // A dedication in flight (a group the topology does not show yet) moves every other
        // partition off the target's worker: none of them is free for another action, and the
        // worker has left the shared pool.
        let mut dedicating = Vec::new();
        for a in &input.in_flight {
            if let Some((p, group)) = dedication_target(&a.spec, input)
                && let Some(i) = position(p)
                && (owner[i] as usize) < nw
            {
                let w = owner[i] as usize;
                for &q in &by_worker[by_worker_start[w] as usize..by_worker_start[w + 1] as usize] {
                    busy[q as usize] = true;
                }
                dedicating.push((w, group.clone()));
            }
        }
        let cluster_actions = input.in_flight.len() as u32;
        let inv = |c: f64| if c > 0.0 { 1.0 / c } else { 0.0 };
        let inv_cap = cap.iter().map(|c| Load { ops: inv(c.ops), bytes: inv(c.bytes), cpu: inv(c.cpu) }).collect();
        Self {
            held,
            inv_cap,
            owner,
            load,
            demand_ops,
            own,
            busy,
            worker_load,
            cap,
            streams,
            drain,
            healthy,
            outgoing,
            worker_actions,
            cluster_actions,
            by_worker_start,
            by_worker,
            dedicating,
            workers_changed: 0,
        }
    }

    /// Load over capacity in the tightest dimension.
    pub fn ratio_of(&self, w: usize, l: Load) -> f64 {
        ratio(l, self.cap[w])
    }

    /// Worker `w`'s ratio while its outgoing moves still stream: their load is still there and
    /// each stream takes its share of its capacity.
    pub fn transient_ratio(&self, w: usize) -> f64 {
        self.load_with_outgoing(w) / self.drain[w]
    }

    /// [`Model::transient_ratio`] if one more move started streaming from `w`.
    pub fn transient_ratio_with_one_more_move(&self, w: usize) -> f64 {
        self.with_one_more_move(w, self.transient_ratio(w))
    }

    /// `ratio`, a load ratio of worker `w` over what its streams leave it, once one more move
    /// streams from it ([`Model::next_stream`]; at the full rate where none may start).
    pub fn with_one_more_move(&self, w: usize, ratio: f64) -> f64 {
        let share = self.next_stream(w).map_or(self.streams.drain_ratio, |s| s.share);
        ratio * self.drain[w] / (self.drain[w] - share).max(0.5)
    }

    /// Whether partitions are streaming away from worker `w` (moves, isolations, split pieces in
    /// flight or planned): it still serves them until they land, so it takes no load meanwhile.
    pub fn shedding(&self, w: usize) -> bool {
        let o = self.outgoing[w];
        o.ops > 0.0 || o.bytes > 0.0 || o.cpu > 0.0
    }

    /// Worker `w`'s load over its capacity with the partitions streaming away still on it (what
    /// it serves until they land), streams' cost aside.
    pub fn load_with_outgoing(&self, w: usize) -> f64 {
        let mut l = self.worker_load[w];
        l.add(self.outgoing[w], 1.0);
        self.ratio_of(w, l)
    }

    /// Worker `w`'s capacity share that its load and running streams leave (negative: it
    /// rejects).
    pub fn spare(&self, w: usize) -> f64 {
        self.drain[w] - self.load_with_outgoing(w)
    }

    /// The least spare capacity a source needs to start a stream: the slowest stream's share
    /// ([`MIN_STREAM_RATE_RATIO`] of the full rate's) and the margin it leaves.
    pub fn min_stream_spare(&self) -> f64 {
        self.streams.drain_ratio * MIN_STREAM_RATE_RATIO + STREAM_SPARE_MARGIN
    }

    /// A stream at the storage's full rate.
    pub fn full_stream(&self) -> Stream {
        Stream { share: self.streams.drain_ratio, max_bytes_per_sec: None }
    }

    /// The stream a move from worker `w` would start, given what its running streams leave it.
    /// At the full rate where the storage cannot throttle, or where `w` already rejects, its
    /// streams counted: the sooner a stream ends, the sooner that stops, and waiting for room
    /// would leave it rejecting as long as its running streams last (a hung one for good; the
    /// worker-loss scenario's rejections grew tenfold when it waited). Otherwise at the rate
    /// its spare capacity pays for, less [`STREAM_SPARE_MARGIN`], so that a worker that serves
    /// all it is asked does not reject because it sheds. `None` when that rate would be under
    /// [`MIN_STREAM_RATE_RATIO`] of the full one: the worker is at its capacity, and streaming
    /// from it would make it reject where, left alone, it rejects nothing.
    pub fn next_stream(&self, w: usize) -> Option<Stream> {
        let full = self.full_stream();
        let spare = self.spare(w);
        // Never below the half of its capacity a source keeps however many streams drain it.
        let budget = (spare - STREAM_SPARE_MARGIN).min(self.drain[w] - 0.5);
        if !self.streams.throttle || spare < 0.0 || budget >= full.share {
            return Some(full);
        }
        let speed = budget / full.share;
        (speed >= MIN_STREAM_RATE_RATIO).then(|| Stream {
            share: budget,
            max_bytes_per_sec: Some((self.streams.full_bytes_per_sec * speed).max(1.0) as u64),
        })
    }

    /// The largest `1 / capacity` in each dimension over all workers: a partition adds at most
    /// its load times this to any worker's ratio.
    pub fn max_inv_cap(&self) -> Load {
        self.inv_cap.iter().fold(Load::default(), |m, c| Load {
            ops: m.ops.max(c.ops),
            bytes: m.bytes.max(c.bytes),
            cpu: m.cpu.max(c.cpu),
        })
    }

    pub fn worker_ratio(&self, w: usize) -> f64 {
        self.ratio_of(w, self.worker_load[w])
    }

    /// Worker `w`'s ratio with partition `p` added (`sign` 1) or removed (`sign` -1).
    #[inline]
    pub fn ratio_with(&self, w: usize, p: usize, sign: f64) -> f64 {
        let mut l = self.worker_load[w];
        l.add(self.load[p], sign);
        self.ratio_of(w, l)
    }

    /// Bounds of [`Model::ratio_with`]`(w, p, 1.0)` from three multiplications instead of three
    /// divisions: the exact ratio lies in `[lo, hi]`. A scan over every worker decides most of
    /// them on the bounds and divides only where a threshold or the best so far falls between.
    #[inline]
    pub fn ratio_with_bounds(&self, w: usize, p: usize) -> (f64, f64) {
        let (l, a, inv) = (self.worker_load[w], self.load[p], self.inv_cap[w]);
        // As `ratio`: ops from 0 when it has no capacity, the other dimensions only where they
        // have one.
        let mut r = (l.ops + a.ops) * inv.ops;
        if inv.bytes > 0.0 {
            r = r.max((l.bytes + a.bytes) * inv.bytes);
        }
        if inv.cpu > 0.0 {
            r = r.max((l.cpu + a.cpu) * inv.cpu);
        }
        // A product of a rounded reciprocal is within 2 ulps of the quotient; 1e-12 is far wider.
        let slack = r.abs() * 1e-12;
        (r - slack, r + slack)
    }

    /// Partitions currently on worker `w` (as built; moves this pass are not reflected).
    pub fn partitions_on(&self, w: usize) -> &[u32] {
        &self.by_worker[self.by_worker_start[w] as usize..self.by_worker_start[w + 1] as usize]
    }

    /// Where a storage system puts a partition grouped into `group` ([`group_placement`]).
    pub fn group_destination(&self, input: &PlannerInput, group: &GroupId, p: usize) -> Option<usize> {
        group_placement(input, group, &self.held, self.owner[p] as usize).map(|w| w as usize)
    }

    /// The ratio of all of `group`'s healthy workers together (load over capacity in the tightest
    /// dimension), with `extra` added: a group is one place, and its capacity is all its workers'.
    pub fn group_ratio_with(&self, groups: &[Option<GroupId>], group: &GroupId, extra: Load) -> f64 {
        self.ratio_of_workers_with(|w| groups.get(w).is_some_and(|g| g.as_ref() == Some(group)), extra)
    }

    /// The share of worker `w`'s capacity left while the streams from it run (1 without any).
    pub fn drain_factor(&self, w: usize) -> f64 {
        self.drain[w]
    }

    /// The load over the capacity of the healthy workers `keep` accepts, taken together (one
    /// zone's), in the tightest dimension; infinite without capacity.
    pub fn ratio_of_workers(&self, keep: impl Fn(usize) -> bool) -> f64 {
        self.ratio_of_workers_with(keep, Load::default())
    }

    /// [`Model::ratio_of_workers`] with `extra` load added to theirs.
    fn ratio_of_workers_with(&self, keep: impl Fn(usize) -> bool, extra: Load) -> f64 {
        let (mut l, mut c) = (extra, Load::default());
        for w in (0..self.cap.len()).filter(|&w| self.healthy[w] && keep(w)) {
            l.add(self.worker_load[w], 1.0);
            c.add(self.cap[w], 1.0);
        }
        if c.ops <= 0.0 && c.bytes <= 0.0 && c.cpu <= 0.0 {
            return f64::INFINITY;
        }
        ratio(l, c)
    }

    /// Raises partition `p`'s load (and its owner's with it) to at least `floor` in each
    /// dimension: what a recent split placed on a piece that is not measured at it yet.
    pub fn raise_load(&mut self, p: usize, floor: Load) {
        self.workers_changed += 1;
        let was = self.load[p];
        let raised =
            Load { ops: was.ops.max(floor.ops), bytes: was.bytes.max(floor.bytes), cpu: was.cpu.max(floor.cpu) };
        if let Some(wl) = self.worker_load.get_mut(self.owner[p] as usize) {
            wl.add(raised, 1.0);
            wl.add(was, -1.0);
        }
        self.load[p] = raised;
    }

    /// Raises worker `w`'s load by what `planned` exceeds `counted` in each dimension: a piece
    /// on its way there, counted at its measured share, that was placed for more.
    pub fn raise_arriving(&mut self, w: usize, counted: Load, planned: Load) {
        self.workers_changed += 1;
        let more = Load {
            ops: (planned.ops - counted.ops).max(0.0),
            bytes: (planned.bytes - counted.bytes).max(0.0),
            cpu: (planned.cpu - counted.cpu).max(0.0),
        };
        if let Some(wl) = self.worker_load.get_mut(w) {
            wl.add(more, 1.0);
        }
    }

    /// Worker `w`'s ratio with `extra` load added.
    pub fn ratio_plus(&self, w: usize, extra: Load) -> f64 {
        let mut l = self.worker_load[w];
        l.add(extra, 1.0);
        self.ratio_of(w, l)
    }

    /// Applies a multi-way split of `p`: the first piece (`shares[0]` of its demand) stays, or
    /// goes to `first_to`; the piece `i` goes to `dests[i - 1]`, each under its own limit. One
    /// action: counted once on the partition's worker and once per piece on each other worker.
    pub fn apply_split_into(
        &mut self,
        input: &PlannerInput,
        p: usize,
        shares: &[f64],
        dests: &[usize],
        first_to: Option<usize>,
    ) {
        self.workers_changed += 1;
        let w = self.owner[p] as usize;
        let (whole, demand) = (self.load[p], self.demand_ops[p]);
        let info = &input.partitions[p];
        self.worker_load[w].add(whole, -1.0);
        self.load[p] = piece_load(info, whole, demand, shares[0]);
        let first = first_to.unwrap_or(w);
        self.worker_load[first].add(self.load[p], 1.0);
        self.demand_ops[p] = demand * shares[0];
        if first != w {
            self.outgoing[w].add(self.load[p], 1.0);
            self.held[first] += 1;
            self.worker_actions[first] += 1;
            self.owner[p] = first as u32;
            // The partition's worker keeps a piece only if one stays there.
            if !dests.contains(&w) {
                self.held[w] = self.held[w].saturating_sub(1);
            }
        }
        for (&share, &d) in shares[1..].iter().zip(dests) {
            let l = piece_load(info, whole, demand, share);
            self.worker_load[d].add(l, 1.0);
            if d != w {
                self.outgoing[w].add(l, 1.0);
                self.held[d] += 1;
                self.worker_actions[d] += 1;
            }
        }
        // Pieces leaving stream from `w` like a move, at the storage's full rate.
        if first != w || dests.iter().any(|&d| d != w) {
            self.drain[w] = (self.drain[w] - self.streams.drain_ratio).max(0.5);
        }
        self.busy[p] = true;
        self.worker_actions[w] += 1;
        self.cluster_actions += 1;
    }

    /// A move the storage streams at its full rate (an isolation, a manual move, one seen done
    /// outside lb).
    pub fn apply_move(&mut self, p: usize, to: usize) {
        self.apply_stream(p, to, self.full_stream());
    }

    /// A move that streams as `stream` says ([`Model::next_stream`]).
    pub fn apply_stream(&mut self, p: usize, to: usize, stream: Stream) {
        self.workers_changed += 1;
        let from = self.owner[p] as usize;
        self.held[from] = self.held[from].saturating_sub(1);
        self.held[to] += 1;
        let l = self.load[p];
        self.worker_load[from].add(l, -1.0);
        self.worker_load[to].add(l, 1.0);
        self.outgoing[from].add(l, 1.0);
        self.drain[from] = (self.drain[from] - stream.share).max(0.5);
        self.owner[p] = to as u32;
        self.busy[p] = true;
        self.worker_actions[from] += 1;
        self.worker_actions[to] += 1;
        self.cluster_actions += 1;
    }

    /// Where a dedication of `p`'s worker sends its other partitions, as a storage system that
    /// forms the group does it (the Valkey adapter): in key order, filling the receivers with
    /// the fewest partitions first until their counts are as even as the moved partitions
    /// allow. `(partition, receiver)` pairs.
    pub fn dedication_moves(&self, p: usize, receivers: &[usize]) -> Vec<(usize, usize)> {
        let w = self.owner[p] as usize;
        let mut moved: Vec<usize> = self
            .partitions_on(w)
            .iter()
            .map(|&q| q as usize)
            .filter(|&q| q != p && self.owner[q] as usize == w)
            .collect();
        moved.sort_unstable();
        if receivers.is_empty() {
            return Vec::new();
        }
        let mut levels: Vec<usize> = receivers.iter().map(|&r| self.partitions_on(r).len()).collect();
        let mut take = vec![0usize; receivers.len()];
        for _ in &moved {
            let (k, _) = levels.iter().enumerate().min_by_key(|&(k, l)| (*l, k)).expect("receivers is not empty");
            levels[k] += 1;
            take[k] += 1;
        }
        let mut out = Vec::with_capacity(moved.len());
        let mut next = moved.iter();
        for (k, n) in take.into_iter().enumerate() {
            out.extend(next.by_ref().take(n).map(|&q| (q, receivers[k])));
        }
        out
    }

    /// Worker ratios after `moves`: `(worker, before, after)` for every worker they touch.
    pub fn ratios_after(&self, moves: &[(usize, usize)]) -> Vec<(usize, f64, f64)> {
        let mut delta: HashMap<usize, Load> = HashMap::new();
        for &(q, to) in moves {
            delta.entry(self.owner[q] as usize).or_default().add(self.load[q], -1.0);
            delta.entry(to).or_default().add(self.load[q], 1.0);
        }
        let mut out: Vec<(usize, f64, f64)> = delta
            .into_iter()
            .map(|(w, d)| {
                let mut l = self.worker_load[w];
                l.add(d, 1.0);
                (w, self.worker_ratio(w), self.ratio_of(w, l))
            })
            .collect();
        out.sort_unstable_by_key(|&(w, _, _)| w);
        out
    }

    /// The workers a dedication of worker `w` sends its other partitions to, as the storage
    /// picks them: every other healthy worker of the shared pool (`shared`).
    pub fn dedication_receivers(&self, w: usize, shared: impl Fn(usize) -> bool) -> Vec<usize> {
        (0..self.healthy.len()).filter(|&r| r != w && self.healthy[r] && shared(r)).collect()
    }

    /// Applies a dedication of `p`'s worker: `moves` leave it, as one action.
    pub fn apply_dedication(&mut self, p: usize, moves: &[(usize, usize)]) {
        self.workers_changed += 1;
        let from = self.owner[p] as usize;
        let mut receivers = Vec::new();
        for &(q, to) in moves {
            let l = self.load[q];
            self.worker_load[from].add(l, -1.0);
            self.worker_load[to].add(l, 1.0);
            self.outgoing[from].add(l, 1.0);
            self.owner[q] = to as u32;
            self.busy[q] = true;
            if !receivers.contains(&to) {
                receivers.push(to);
            }
        }
        for to in receivers {
            self.worker_actions[to] += 1;
        }
        self.drain[from] = (self.drain[from] - self.streams.drain_ratio).max(0.5);
        self.busy[p] = true;
        self.worker_actions[from] += 1;
        self.cluster_actions += 1;
    }

    /// An action that changes partition `p` in place on worker `w`: counted there too.
    pub fn count_in_place(&mut self, p: usize, w: usize) {
        self.mark_action(p);
        self.worker_actions[w] += 1;
        self.workers_changed += 1;
    }

    /// How many times the workers' loads or action counts changed since the model was built.
    pub fn workers_changed(&self) -> u64 {
        self.workers_changed
    }

    /// Load that arrives on (or leaves, negative) worker `w` with no partition of the view moving:
    /// a reshard's dataset shards.
    pub fn shift_worker_load(&mut self, w: usize, l: Load) {
        self.worker_load[w].add(l, 1.0);
        self.workers_changed += 1;
    }

    /// A metadata action (split): busy partition, counted cluster-wide, not per worker.
    pub fn mark_action(&mut self, p: usize) {
        self.busy[p] = true;
        self.cluster_actions += 1;
    }

    /// Max, mean and CV of the ratios of the healthy ungrouped workers (the shared pool).
    pub fn pool_stats(&self, groups: &[Option<GroupId>]) -> (f64, f64, f64) {
        self.pool_stats_where(groups, |_| true)
    }

    /// [`Model::pool_stats`] over the pool workers `keep` accepts (one zone's).
    pub fn pool_stats_where(&self, groups: &[Option<GroupId>], keep: impl Fn(usize) -> bool) -> (f64, f64, f64) {
        let (mut n, mut sum, mut sq, mut max) = (0.0, 0.0, 0.0, 0.0f64);
        for (w, group) in groups.iter().enumerate().take(self.cap.len()) {
            if self.healthy[w] && group.is_none() && keep(w) {
                let r = self.worker_ratio(w);
                n += 1.0;
                sum += r;
                sq += r * r;
                max = max.max(r);
            }
        }
        if n == 0.0 {
            return (0.0, 0.0, 0.0);
        }
        let mean = sum / n;
        let cv = if mean > 0.0 { ((sq / n - mean * mean).max(0.0)).sqrt() / mean } else { 0.0 };
        (max, mean, cv)
    }
}

/// Per partition of `input`, its owner's position among the workers (`u32::MAX` for a worker
/// the input does not have).
pub fn owner_positions(input: &PlannerInput) -> Vec<u32> {
    let worker_index: HashMap<&WorkerId, u32> =
        input.workers.iter().enumerate().map(|(i, w)| (&w.id, i as u32)).collect();
    input.partitions.iter().map(|p| worker_index.get(&p.owner).copied().unwrap_or(u32::MAX)).collect()
}

/// `l` over `c` in the tightest dimension; a dimension of capacity 0 is not one (unknown).
fn ratio(l: Load, c: Load) -> f64 {
    let mut r = if c.ops > 0.0 { l.ops / c.ops } else { 0.0 };
    if c.bytes > 0.0 {
        r = r.max(l.bytes / c.bytes);
    }
    if c.cpu > 0.0 {
        r = r.max(l.cpu / c.cpu);
    }
    r
}

/// Where a storage system places a partition grouped into `group`, as the testbed does: the
/// group's healthy worker holding the fewest partitions (those on their way counted), lowest
/// index first. `None` when the group has no healthy worker, or the partition is already on one.
pub fn group_placement(input: &PlannerInput, group: &GroupId, held: &[u32], from: usize) -> Option<u32> {
    let in_group = |w: &super::input::WorkerView| w.group.as_ref() == Some(group) && w.health == Health::Healthy;
    if input.workers.get(from).is_some_and(in_group) {
        return None;
    }
    input
        .workers
        .iter()
        .enumerate()
        .filter(|(_, w)| in_group(w))
        .min_by_key(|&(i, _)| (held.get(i).copied().unwrap_or(0), i))
        .map(|(i, _)| i as u32)
}

/// Each piece's share of the demand when `range` is cut at `keys` (ascending): from the sketch,
/// uniform without one. `keys.len() + 1` shares summing to 1.
pub fn piece_shares(range: KeyRange, sketch: Option<&KeySketch>, keys: &[Key]) -> Vec<f64> {
    let mut out = Vec::with_capacity(keys.len() + 1);
    let mut below = 0.0;
    for &k in keys {
        let left = split_key_share(range, sketch, k).max(below);
        out.push(left - below);
        below = left;
    }
    out.push((1.0 - below).max(0.0));
    out
}

/// The load of a piece carrying `share` of a partition's demand (`whole` is its load now, under
/// its limit): the piece gets a limit of its own, so it serves up to that, not a share of `whole`.
/// A partition's load as its window shows it, its rejected demand served up to its limit, and
/// its demand in ops.
pub fn measured_load(p: &super::input::PartitionView) -> (Load, f64) {
    let s = &p.stats;
    let demand = s.ops_per_sec + s.rejected_per_sec;
    let scale = if s.ops_per_sec > 0.0 { demand / s.ops_per_sec } else { 1.0 };
    let (lim_ops, lim_bytes) = p.limit.map_or((f64::INFINITY, f64::INFINITY), |l| (l.ops_per_sec, l.bytes_per_sec));
    let ops = demand.min(lim_ops);
    let bytes = (s.bytes_per_sec * scale).min(lim_bytes);
    let cpu = if s.ops_per_sec > 0.0 { s.cpu_cores * ops / s.ops_per_sec } else { s.cpu_cores };
    (Load { ops, bytes, cpu }, demand)
}

pub fn piece_load(p: &super::input::PartitionView, whole: Load, demand_ops: f64, share: f64) -> Load {
    let (lim_ops, lim_bytes) = p.limit.map_or((f64::INFINITY, f64::INFINITY), |l| (l.ops_per_sec, l.bytes_per_sec));
    let ops = (demand_ops * share).min(lim_ops);
    let per_op = |v: f64| if whole.ops > 0.0 { v / whole.ops } else { 0.0 };
    Load { ops, bytes: (per_op(whole.bytes) * ops).min(lim_bytes), cpu: per_op(whole.cpu) * ops }
}

/// The partitions an action keeps busy (group of a table or tenant: none resolved here).
pub fn partitions_of(spec: &ActionSpec) -> Vec<&lb_common::ids::PartitionId> {
    spec.partitions()
}

/// The partition and group of `spec` when it is a dedication: a group of one partition naming
/// a group no worker of `input` is in, on a storage system that forms such groups from the
/// partition's own worker.
pub fn dedication_target<'a>(spec: &'a ActionSpec, input: &PlannerInput) -> Option<(&'a PartitionId, &'a GroupId)> {
    match spec {
        ActionSpec::Group { target: GroupTarget::Partition { partition }, group }
            if input.new_group_dedicates_owner && !input.workers.iter().any(|w| w.group.as_ref() == Some(group)) =>
        {
            Some((partition, group))
        }
        _ => None,
    }
}

pub fn supports(actions: &[ActionKind], kind: ActionKind) -> bool {
    actions.contains(&kind)
}

/// What the sketch says about where a partition's load sits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SketchShape {
    pub top_key_share_ratio: f64,
    pub sequential_write_ratio: f64,
}

pub fn sketch_shape(sketch: Option<&KeySketch>) -> SketchShape {
    match sketch {
        Some(s) => SketchShape {
            top_key_share_ratio: s.top_keys.iter().map(|k| k.share_ratio).fold(0.0, f64::max),
            sequential_write_ratio: s.sequential_write_ratio,
        },
        None => SketchShape { top_key_share_ratio: 0.0, sequential_write_ratio: 0.0 },
    }
}

/// The share of a partition's ops below `key` (the left side of a split there): from the
/// sketch's buckets (see [`share_left_of`]); uniform over the range without a sketch.
pub fn split_key_share(range: KeyRange, sketch: Option<&KeySketch>, key: Key) -> f64 {
    let offset = key.0.saturating_sub(range.start.0) as f64;
    match sketch.filter(|s| s.bucket_ops.iter().any(|&b| b > 0)) {
        Some(s) => share_left_of(range, s, key),
        None => (offset / range.width()).clamp(0.0, 1.0),
    }
}

/// The share of `sketch`'s ops below `key`, uniform inside a bucket except for its top keys:
/// each is a point (its ops counted whole on its side of `key`), so a cut at a hot key and the
/// key after it finds the key's load in the one-key piece. The sketch has some ops.
fn share_left_of(range: KeyRange, sketch: &KeySketch, key: Key) -> f64 {
    let offset = key.0.saturating_sub(range.start.0) as f64;
    let total: f64 = sketch.bucket_ops.iter().map(|&b| b as f64).sum();
    let mut left = 0.0;
    for (&ops, (a, w)) in sketch.bucket_ops.iter().zip(sketch.bucket_spans(range)) {
        if offset >= a + w {
            left += ops as f64;
            continue;
        }
        if offset > a && w > 0.0 {
            let (mut points, mut below) = (0.0, 0.0);
            for t in sketch.top_keys.iter().filter(|t| range.contains(t.key)) {
                let at = (t.key.0 - range.start.0) as f64;
                if at >= a && at < a + w {
                    let t_ops = t.share_ratio * total;
                    points += t_ops;
                    if t.key < key {
                        below += t_ops;
                    }
                }
            }
            let spread = (ops as f64 - points).max(0.0);
            left += spread * (offset - a) / w + below.min(ops as f64);
        }
        break;
    }
    (left / total).clamp(0.0, 1.0)
}

/// A cold end is at least this share of a partition's keys (and so, roughly, of its bytes).
pub const MIN_COLD_END_WIDTH_RATIO: f64 = 0.1;
/// A bucket is cold below this share of the partition's mean load per key.
pub const COLD_DENSITY_RATIO: f64 = 0.5;

/// Where the load of a partition whose heat sits in a band starts and ends: the start of its
/// first bucket, and the end of its last, that carry at least [`COLD_DENSITY_RATIO`] of the
/// partition's mean load per key. Each side is `Some` only when the cold run before (or after)
/// it spans at least [`MIN_COLD_END_WIDTH_RATIO`] of the range: cut there, that wide cold end
/// can stay where it is while the hot band's narrow pieces (few bytes) go elsewhere. The
/// second key is the first key of the cold end on the right.
pub fn cold_ends(range: KeyRange, sketch: &KeySketch) -> (Option<Key>, Option<Key>) {
    let total: f64 = sketch.bucket_ops.iter().map(|&b| b as f64).sum();
    let width = range.width();
    if total <= 0.0 || width <= 0.0 {
        return (None, None);
    }
    let cold_below = COLD_DENSITY_RATIO * total / width;
    let spans: Vec<(f64, f64)> = sketch.bucket_spans(range).collect();
    let warm = |i: usize| spans[i].1 > 0.0 && sketch.bucket_ops[i] as f64 / spans[i].1 >= cold_below;
    let (Some(first), Some(last)) = ((0..spans.len()).find(|&i| warm(i)), (0..spans.len()).rfind(|&i| warm(i))) else {
        return (None, None);
    };
    let key_at = |offset: f64| {
        let key = Key(range.start.0.saturating_add(offset as u64));
        range.split_at(key).map(|_| key)
    };
    let wide = |w: f64| w >= MIN_COLD_END_WIDTH_RATIO * width;
    let left = spans[first].0;
    let right = spans[last].0 + spans[last].1;
    let start = if wide(left) { key_at(left) } else { None };
    let end = if wide(width - right) { key_at(right) } else { None };
    (start, end)
}

/// The key below which `quantile` of the sketch's ops fall, interpolated inside the crossing
/// bucket (its own width, where the sketch draws its buckets), and the share actually left of
/// it. `None` when the sketch is empty or the key would leave one side empty.
pub fn split_key(range: KeyRange, sketch: &KeySketch, quantile: f64) -> Option<(Key, f64)> {
    let total: f64 = sketch.bucket_ops.iter().map(|&b| b as f64).sum();
    if total <= 0.0 || range.start >= range.end {
        return None;
    }
    let target = total * quantile;
    let mut below = 0.0;
    for (&ops, (a, w)) in sketch.bucket_ops.iter().zip(sketch.bucket_spans(range)) {
        let ops = ops as f64;
        if ops > 0.0 && below + ops >= target {
            let frac = ((target - below) / ops).clamp(0.0, 1.0);
            let offset = a + frac * w;
            let key = range.start.0.saturating_add(offset as u64);
            let key = Key(key.clamp(range.start.0.saturating_add(1), range.end.0));
            range.split_at(key)?;
            return Some((key, share_left_of(range, sketch, key)));
        }
        below += ops;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A sketch of equal-width buckets.
    fn equal(buckets: &[u64]) -> KeySketch {
        KeySketch {
            bucket_ops: buckets.to_vec(),
            bucket_bounds: Vec::new(),
            top_keys: Vec::new(),
            sequential_write_ratio: 0.0,
        }
    }

    #[test]
    fn a_band_narrower_than_a_bucket_is_cut_inside_where_the_sketch_draws_its_buckets() {
        // A million keys; 90 % of the load in 100 keys at 500,000: 1/10,000 of the range.
        let range = KeyRange { start: Key(0), end: Key(999_999) };
        let fine = KeySketch {
            bucket_ops: vec![10, 0, 900, 90],
            bucket_bounds: vec![Key(100_000), Key(500_000), Key(500_100)],
            ..equal(&[])
        };
        let (key, left) = split_key(range, &fine, 0.5).expect("splittable");
        assert_eq!(key, Key(500_054));
        assert!((left - 0.496).abs() < 1e-9, "{left}");
        // Nine pieces: every cut inside the band, each piece about a ninth of the load.
        let keys: Vec<Key> = (1..9).map(|i| split_key(range, &fine, f64::from(i) / 9.0).expect("a cut").0).collect();
        assert!(keys.iter().all(|k| (500_000..500_100).contains(&k.0)), "{keys:?}");
        let shares = piece_shares(range, Some(&fine), &keys);
        assert!(shares[1..8].iter().all(|s| (s - 1.0 / 9.0).abs() < 0.01), "{shares:?}");
        // Equal-width buckets cannot place it: 16 buckets put the whole band in one.
        let coarse: Vec<u64> = (0..16).map(|i| if i == 8 { 910 } else { 6 }).collect();
        let keys: Vec<Key> =
            (1..9).map(|i| split_key(range, &equal(&coarse), f64::from(i) / 9.0).expect("a cut").0).collect();
        let in_band = keys.iter().filter(|k| (500_000..500_100).contains(&k.0)).count();
        assert!(in_band <= 1, "{keys:?}");
        // Bounds that do not match the buckets are read as equal widths.
        let odd = KeySketch { bucket_bounds: vec![Key(500_000)], ..fine.clone() };
        assert_eq!(split_key(range, &odd, 0.5), split_key(range, &equal(&fine.bucket_ops), 0.5));
    }

    #[test]
    fn a_hot_key_is_a_point_of_its_bucket_so_its_one_key_piece_carries_its_load() {
        // The whole 2^64 key space in 4 buckets; 80 % of the load on one key of bucket 2.
        let range = KeyRange { start: Key(0), end: Key(u64::MAX) };
        let key = Key(0x9000_0000_0000_0042);
        let sketch = KeySketch {
            top_keys: vec![lb_common::protocol::TopKey { key, share_ratio: 0.8 }],
            ..equal(&[50, 50, 850, 50])
        };
        let shares = piece_shares(range, Some(&sketch), &[key, Key(key.0 + 1)]);
        assert!((shares[1] - 0.8).abs() < 1e-9, "the key's piece: {shares:?}");
        assert!((shares.iter().sum::<f64>() - 1.0).abs() < 1e-9, "{shares:?}");
        // Around the key the rest of its bucket is uniform, the key counted on its side.
        let just_below = split_key_share(range, Some(&sketch), key);
        let just_after = split_key_share(range, Some(&sketch), Key(key.0 + 1));
        assert!((just_after - just_below - 0.8).abs() < 1e-9, "{just_below} {just_after}");
        // Without the top key the bucket is spread evenly: a one-key piece carries nothing.
        let plain = equal(&[50, 50, 850, 50]);
        assert!(piece_shares(range, Some(&plain), &[key, Key(key.0 + 1)])[1] < 1e-9);
    }

    #[test]
    fn cold_ends_are_the_wide_runs_under_half_the_mean_load_per_key_before_and_after_the_load() {
        let range = KeyRange { start: Key(0), end: Key(1_599) };
        // Buckets of 100 keys: load in buckets 4..=6, a trickle elsewhere.
        let band = equal(&[1, 1, 1, 1, 300, 300, 300, 1, 1, 1, 1, 1, 1, 1, 1, 1]);
        assert_eq!(cold_ends(range, &band), (Some(Key(400)), Some(Key(700))));
        // A cold run narrower than a tenth of the range is no cold end.
        let edge = equal(&[300, 300, 300, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]);
        assert_eq!(cold_ends(range, &edge), (None, Some(Key(300))));
        let narrow = equal(&[1, 300, 300, 300, 300, 300, 300, 300, 300, 300, 300, 300, 300, 300, 300, 300]);
        assert_eq!(cold_ends(range, &narrow), (None, None));
        // Even load, or none: nothing is cold.
        assert_eq!(cold_ends(range, &equal(&[50; 16])), (None, None));
        assert_eq!(cold_ends(range, &equal(&[0; 16])), (None, None));
        // Variable-width buckets: the band is the refined bucket.
        let fine = KeySketch { bucket_ops: vec![5, 900, 5], bucket_bounds: vec![Key(800), Key(810)], ..equal(&[]) };
        assert_eq!(cold_ends(range, &fine), (Some(Key(800)), Some(Key(810))));
    }

    proptest! {
        /// Invariant: a split key always leaves both sides non-empty, and the share left of it
        /// is a ratio.
        #[test]
        fn split_keys_lie_strictly_inside(start in 0u64..u64::MAX / 2, len in 1u64..u64::MAX / 2,
                                          buckets in proptest::collection::vec(0u64..10_000, 1..64),
                                          q in 0.01f64..0.99) {
            let range = KeyRange { start: Key(start), end: Key(start + len) };
            if let Some((key, left)) = split_key(range, &equal(&buckets), q) {
                prop_assert!(range.split_at(key).is_some(), "{key:?} outside {range:?}");
                prop_assert!((0.0..=1.0).contains(&left), "{left}");
            }
        }
    }

    #[test]
    fn split_key_halves_a_skewed_sketch() {
        let range = KeyRange { start: Key(0), end: Key(1599) };
        // 100 ops per bucket of 100 keys, except bucket 2 with 500: median inside bucket 2.
        let buckets = [100, 100, 500, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100];
        let (key, left) = split_key(range, &equal(&buckets), 0.5).expect("splittable");
        // total 2000, half 1000: 200 before bucket 2, 800 more of its 500? no: 1000-200 = 800 > 500,
        // so the crossing is later: 200 + 500 = 700 after bucket 2, then 3 more buckets -> 1000.
        assert_eq!(key, Key(600));
        assert!((left - 0.5).abs() < 1e-9, "{left}");
        let (key, left) = split_key(range, &equal(&buckets), 0.25).expect("splittable");
        assert_eq!(key, Key(260));
        assert!((left - 0.25).abs() < 1e-9);
    }

    #[test]
    fn split_key_of_the_full_range_and_empty_sketches() {
        let (key, left) = split_key(KeyRange::FULL, &equal(&[1; 16]), 0.5).expect("splittable");
        assert_eq!(key, Key(1 << 63));
        assert!((left - 0.5).abs() < 1e-9);
        assert!(split_key(KeyRange::FULL, &equal(&[0; 16]), 0.5).is_none());
        let one = KeyRange { start: Key(5), end: Key(5) };
        assert!(split_key(one, &equal(&[10]), 0.5).is_none());
    }
}
