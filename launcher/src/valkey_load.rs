//! A hot-slot load generator for a real Valkey cluster, and the node counters that show its
//! effect.
//!
//! The problem it poses: Valkey Cluster hashes each key to one of 16,384 slots, and keys that
//! share a `{hash tag}` share a slot. A few busy tags therefore pile their traffic onto the
//! one node that owns their slots, while the others idle. [`LoadGenerator`] reproduces that:
//! `clients` tasks issue `SET` / `GET` as fast as the cluster answers (closed loop, like
//! `redis-benchmark`) or at a fixed total rate, on uniform background keys (no tag, spread over
//! all slots) and, from `onset` on, a `hot_share` of them on keys tagged into `hot_slots`.
//!
//! It is a cluster client by hand, no cluster library: a slot → node map read from
//! `CLUSTER NODES`, one multiplexed connection per node (lb-valkey's [`NodeClient`], with its
//! deadlines), `MOVED` updates the map and retries on the named node, `ASK` retries there
//! after `ASKING` on a connection of its own (`ASKING` applies to the next command of its
//! connection, which a shared one cannot promise), `TRYAGAIN` / `CLUSTERDOWN` / a broken
//! connection back off briefly and retry. A command that may have run (timeout, broken
//! connection) is simply sent again: each key has exactly one writer task, which writes it
//! with one value at a time, so repeating a `SET` cannot change what the key ends up holding.
//!
//! What it records, so a test can prove that migrations lose nothing: every acknowledged
//! write (key → value; the last write of a key wins because its writer is sequential), every
//! read that returned something other than the key's last acknowledged value, and each
//! operation's latency in a [`Histogram`] (log-linear, ~3 % resolution) that callers can take
//! per phase.
//!
//! [`NodeCounters`] reads `INFO` on every node: commands processed and CPU seconds, so load per
//! node is measured by Valkey itself, independent of lb's agents.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use anyhow::Context;
use lb_common::rng::SplitMix64;
use lb_valkey::{ConnectOptions, NodeAddr, NodeClient, NodeError, SLOT_COUNT, Slot, key_slot};
use redis::Value;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

/// Pause before retrying after `TRYAGAIN`, `CLUSTERDOWN` or a lost connection: a migration's
/// handover or a reconnect takes milliseconds, and a tight retry loop would only add load.
const RETRY_BACKOFF: Duration = Duration::from_millis(10);
/// Redirections followed for one command before it is counted as failed: more than a couple
/// means the map is churning, and a refresh from `CLUSTER NODES` is due.
const MAX_REDIRECTS: u32 = 5;
/// Attempts for one command (redirects, back-offs, reconnects) before the task gives up on it
/// and records an error; ~10 s of retrying covers a node restart.
const MAX_ATTEMPTS: u32 = 1_000;
/// Threads of the clients' runtime: two keep up with 8 clients at tens of thousands of ops/s
/// (each op is a few µs of client work).
const LOAD_THREADS: usize = 2;
/// The expensive read of [`LoadSpec::hot_read_cost`]: `ARGV[1]` reads of `KEYS[1]`, then its value.
pub const EXPENSIVE_READ: &str =
    "for i = 1, tonumber(ARGV[1]) do redis.call('GET', KEYS[1]) end return redis.call('GET', KEYS[1])";
/// Keys are verified this many at a time, concurrently over the multiplexed connections.
const VERIFY_CONCURRENCY: usize = 64;

/// What load to generate.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    /// Concurrent client tasks (each one command in flight at a time).
    pub clients: usize,
    /// Total target rate over all clients; `None`: as fast as the cluster answers.
    pub rate_ops_per_sec: Option<f64>,
    /// Slots the hot keys hash to (each gets an equal part of the hot share).
    pub hot_slots: Vec<Slot>,
    /// Share of operations on hot keys once the hot phase started (0..=1).
    pub hot_share: f64,
    /// Time after start when the hot phase begins (before: background keys only).
    pub onset: Duration,
    /// Distinct background keys per client.
    pub background_keys_per_client: usize,
    /// Distinct hot keys per client and hot slot.
    pub hot_keys_per_client: usize,
    /// Share of operations that are `SET` (0..=1); the rest are `GET`.
    pub write_ratio: f64,
    /// When above 0, a read of a hot key is an expensive command instead of a plain `GET`: a
    /// script ([`EXPENSIVE_READ`]) that reads the key this many times and returns it, as a
    /// real hotspot's costly commands do (big `HGETALL`s, Lua). The reply is the key's value,
    /// checked like a `GET`'s. ~0.75 µs of main-thread time per read on valkey-server 9.1.2
    /// (200: ~150 µs per command, against ~8 µs for a `GET`).
    pub hot_read_cost: u32,
    pub value_bytes: usize,
    /// Seed of the clients' key and command choices.
    pub seed: u64,
}

impl LoadSpec {
    /// The launcher's and the tests' workload: 8 clients, 70 % of ops on `hot_slots` from
    /// `onset`, half writes, 64-byte values.
    pub fn hot_slots(hot_slots: Vec<Slot>, onset: Duration) -> Self {
        Self {
            clients: 8,
            rate_ops_per_sec: None,
            hot_slots,
            hot_share: 0.7,
            onset,
            background_keys_per_client: 2_000,
            hot_keys_per_client: 50,
            write_ratio: 0.5,
            value_bytes: 64,
            seed: 7,
            hot_read_cost: 0,
        }
    }

    fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.clients > 0, "load: clients must be at least 1");
        anyhow::ensure!((0.0..=1.0).contains(&self.hot_share), "load: hot_share must be within 0..=1");
        anyhow::ensure!((0.0..=1.0).contains(&self.write_ratio), "load: write_ratio must be within 0..=1");
        anyhow::ensure!(self.background_keys_per_client > 0, "load: background_keys_per_client must be at least 1");
        anyhow::ensure!(
            self.hot_slots.is_empty() || self.hot_keys_per_client > 0,
            "load: hot_keys_per_client must be at least 1 when there are hot slots"
        );
        if let Some(rate) = self.rate_ops_per_sec {
            anyhow::ensure!(rate.is_finite() && rate > 0.0, "load: rate_ops_per_sec must be positive");
        }
        Ok(())
    }
}

/// A hash tag (`t<n>`) whose keys land in `slot`: the first of `t0, t1, ...` that hashes there.
pub fn tag_for_slot(slot: Slot) -> String {
    (0u64..)
        .map(|n| format!("t{n}"))
        .find(|t| key_slot(t.as_bytes()) == slot)
        .unwrap_or_else(|| unreachable!("CRC16 over t0.. reaches every one of the 16,384 slots"))
}

/// Latency histogram: log-linear buckets of ~3 % width from 1 µs up to about 70 s.
#[derive(Debug, Clone)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    max_us: u64,
}

/// Sub-buckets per power of two: 32 gives ~2-3 % relative resolution.
const SUB_BUCKETS: u64 = 32;
/// Powers of two covered: 2^26 µs ≈ 67 s.
const OCTAVES: u64 = 26;

impl Default for Histogram {
    fn default() -> Self {
        Self { counts: vec![0; (SUB_BUCKETS * (OCTAVES + 1)) as usize], total: 0, max_us: 0 }
    }
}

impl Histogram {
    fn index(us: u64) -> usize {
        if us < SUB_BUCKETS {
            return us as usize;
        }
        let octave = 63 - u64::from(us.leading_zeros()); // floor(log2 us) >= 5
        let shift = octave - SUB_BUCKETS.trailing_zeros() as u64;
        let sub = (us >> shift) - SUB_BUCKETS; // 0..SUB_BUCKETS
        let index = (octave - SUB_BUCKETS.trailing_zeros() as u64 + 1) * SUB_BUCKETS + sub;
        (index as usize).min((SUB_BUCKETS * (OCTAVES + 1)) as usize - 1)
    }

    /// The upper bound (µs) of bucket `index`.
    fn upper(index: usize) -> u64 {
        let index = index as u64;
        if index < SUB_BUCKETS {
            return index;
        }
        let block = index / SUB_BUCKETS; // >= 1
        let sub = index % SUB_BUCKETS;
        let shift = block - 1;
        ((SUB_BUCKETS + sub + 1) << shift) - 1
    }

    pub fn record(&mut self, latency: Duration) {
        let us = latency.as_micros().min(u128::from(u64::MAX)) as u64;
        self.counts[Self::index(us)] += 1;
        self.total += 1;
        self.max_us = self.max_us.max(us);
    }

    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.total += other.total;
        self.max_us = self.max_us.max(other.max_us);
    }

    pub fn count(&self) -> u64 {
        self.total
    }

    /// The latency at quantile `q` (0..=1), as the upper bound of its bucket; zero when empty.
    pub fn quantile(&self, q: f64) -> Duration {
        if self.total == 0 {
            return Duration::ZERO;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Duration::from_micros(Self::upper(i).min(self.max_us));
            }
        }
        Duration::from_micros(self.max_us)
    }
}

/// Slot → node map and one shared connection per node.
#[derive(Debug)]
struct Router {
    seeds: Vec<NodeAddr>,
    options: ConnectOptions,
    owners: RwLock<Vec<Option<NodeAddr>>>,
    connections: tokio::sync::Mutex<HashMap<NodeAddr, NodeClient>>,
    refreshes: AtomicU64,
    /// Stops retrying: a stopped generator must not wait out a dead cluster.
    cancel: CancellationToken,
}

/// How one attempt ended.
enum Attempt {
    Done(Value),
    /// Try again on (possibly) another node after the map changed.
    Retry,
    /// Try again after a short pause.
    Backoff,
    /// The node answered with an error that retrying does not fix.
    Failed(String),
}

impl Router {
    async fn new(seeds: Vec<NodeAddr>, options: ConnectOptions, cancel: CancellationToken) -> anyhow::Result<Self> {
        anyhow::ensure!(!seeds.is_empty(), "load: no seed nodes");
        let router = Self {
            seeds,
            options,
            owners: RwLock::new(vec![None; usize::from(SLOT_COUNT)]),
            connections: tokio::sync::Mutex::new(HashMap::new()),
            refreshes: AtomicU64::new(0),
            cancel,
        };
        router.refresh().await.context("load: cannot read the cluster's slot map")?;
        Ok(router)
    }

    /// Rebuilds the map from the first seed that answers `CLUSTER NODES`.
    async fn refresh(&self) -> anyhow::Result<()> {
        let mut last = None;
        for seed in &self.seeds {
            match NodeClient::connect(seed, &self.options).await {
                Ok(mut client) => match client.cluster_nodes().await {
                    Ok(nodes) => {
                        let mut owners = vec![None; usize::from(SLOT_COUNT)];
                        for node in nodes.iter().filter(|n| n.is_primary() && n.is_healthy()) {
                            let Some(addr) = node.addr.clone().or_else(|| node.flags.myself.then(|| seed.clone()))
                            else {
                                continue;
                            };
                            for slot in node.slots.iter().flat_map(|r| r.slots()) {
                                owners[usize::from(slot.get())] = Some(addr.clone());
                            }
                        }
                        *self.owners.write().unwrap_or_else(|e| e.into_inner()) = owners;
                        self.refreshes.fetch_add(1, Ordering::Relaxed);
                        return Ok(());
                    }
                    Err(e) => last = Some(e),
                },
                Err(e) => last = Some(e),
            }
        }
        Err(last.map_or_else(|| anyhow::anyhow!("no seeds"), anyhow::Error::from))
    }

    fn owner(&self, slot: Slot) -> Option<NodeAddr> {
        self.owners.read().unwrap_or_else(|e| e.into_inner())[usize::from(slot.get())].clone()
    }

    fn set_owner(&self, slot: Slot, addr: NodeAddr) {
        self.owners.write().unwrap_or_else(|e| e.into_inner())[usize::from(slot.get())] = Some(addr);
    }

    async fn connection(&self, addr: &NodeAddr) -> Result<NodeClient, NodeError> {
        let mut connections = self.connections.lock().await;
        if let Some(c) = connections.get(addr).filter(|c| !c.is_poisoned()) {
            return Ok(c.clone());
        }
        let client = NodeClient::connect(addr, &self.options).await?;
        connections.insert(addr.clone(), client.clone());
        Ok(client)
    }

    /// Sends `cmd` for a key in `slot` to whichever node serves it, following redirects.
    async fn send(&self, name: &'static str, slot: Slot, cmd: &redis::Cmd) -> Result<Value, String> {
        let mut redirects = 0;
        let mut last = String::new();
        for _ in 0..MAX_ATTEMPTS {
            if self.cancel.is_cancelled() {
                return Err(format!("{name} on slot {slot}: stopped while retrying (last: {last})"));
            }
            let Some(addr) = self.owner(slot) else {
                tokio::time::sleep(RETRY_BACKOFF).await;
                let _ = self.refresh().await;
                continue;
            };
            let attempt = match self.connection(&addr).await {
                Ok(mut client) => self.classify(client.query(name, cmd).await, slot, name, cmd, &mut redirects).await,
                Err(e) => {
                    last = e.to_string();
                    Attempt::Backoff
                }
            };
            match attempt {
                Attempt::Done(value) => return Ok(value),
                Attempt::Retry => {}
                Attempt::Backoff => {
                    tokio::time::sleep(RETRY_BACKOFF).await;
                    if let Err(e) = self.refresh().await {
                        last = e.to_string();
                    }
                }
                Attempt::Failed(message) => return Err(message),
            }
            if redirects > MAX_REDIRECTS {
                redirects = 0;
                let _ = self.refresh().await;
            }
        }
        Err(format!("{name} on slot {slot}: gave up after {MAX_ATTEMPTS} attempts (last: {last})"))
    }

    async fn classify(
        &self,
        result: Result<Value, NodeError>,
        slot: Slot,
        name: &'static str,
        cmd: &redis::Cmd,
        redirects: &mut u32,
    ) -> Attempt {
        let message = match result {
            Ok(value) => return Attempt::Done(value),
            Err(NodeError::Rejected { message, .. }) => message,
            Err(e) => {
                debug!(error = %e, "load: command failed; retrying");
                return Attempt::Backoff;
            }
        };
        let mut words = message.split_whitespace();
        match words.next() {
            Some("MOVED") => {
                *redirects += 1;
                match words.nth(1).and_then(parse_addr) {
                    Some(addr) => {
                        self.set_owner(slot, addr);
                        Attempt::Retry
                    }
                    None => Attempt::Backoff,
                }
            }
            Some("ASK") => {
                *redirects += 1;
                let Some(addr) = words.nth(1).and_then(parse_addr) else { return Attempt::Backoff };
                match self.asking(&addr, name, cmd).await {
                    Ok(value) => Attempt::Done(value),
                    Err(_) => Attempt::Backoff,
                }
            }
            Some("TRYAGAIN" | "CLUSTERDOWN" | "LOADING") => Attempt::Backoff,
            _ => Attempt::Failed(message),
        }
    }

    /// `ASKING` then `cmd` on a fresh connection of their own (see the module docs).
    async fn asking(&self, addr: &NodeAddr, name: &'static str, cmd: &redis::Cmd) -> Result<Value, NodeError> {
        let mut client = NodeClient::connect(addr, &self.options).await?;
        client.query("ASKING", &redis::cmd("ASKING")).await?;
        client.query(name, cmd).await
    }
}

fn parse_addr(text: &str) -> Option<NodeAddr> {
    let (host, port) = text.rsplit_once(':')?;
    Some(NodeAddr::new(host.trim_start_matches('[').trim_end_matches(']'), port.parse().ok()?))
}

/// Counters shared by the client tasks.
#[derive(Debug, Default)]
struct Shared {
    ops: AtomicU64,
    hot_ops: AtomicU64,
    errors: AtomicU64,
    stale_reads: AtomicU64,
    histogram: Mutex<Histogram>,
    /// Hot slots whose clients have gone ([`LoadGenerator::silence`]).
    silenced: Mutex<Vec<Slot>>,
}

/// A running load generator.
#[derive(Debug)]
pub struct LoadGenerator {
    /// The clients' own runtime (threads named `load`): lb's tasks in the same process must not
    /// delay the clients' timers and replies, or the latency measured would be lb's, not the
    /// cluster's. `None` only after stop.
    runtime: Option<tokio::runtime::Runtime>,
    router: Arc<Router>,
    shared: Arc<Shared>,
    cancel: CancellationToken,
    tasks: JoinSet<HashMap<String, String>>,
    started: Instant,
    onset: Duration,
}

/// What a stopped generator did.
#[derive(Debug)]
pub struct LoadReport {
    pub ops: u64,
    pub hot_ops: u64,
    /// Commands that failed for good (after retries) or came back with an unexpected reply.
    pub errors: u64,
    /// `GET`s that returned something other than the key's last acknowledged value.
    pub stale_reads: u64,
    /// Every acknowledged write: key → its last value.
    pub written: HashMap<String, String>,
    /// Latency since the last [`LoadGenerator::take_histogram`].
    pub histogram: Histogram,
    /// Slot-map reloads from `CLUSTER NODES` (the first one included).
    pub refreshes: u64,
}

impl LoadGenerator {
    /// Reads the slot map from `seeds` and starts the client tasks.
    pub async fn start(seeds: Vec<NodeAddr>, options: ConnectOptions, spec: LoadSpec) -> anyhow::Result<Self> {
        spec.validate()?;
        let cancel = CancellationToken::new();
        let router = Arc::new(Router::new(seeds, options, cancel.clone()).await?);
        let shared = Arc::new(Shared::default());
        let started = Instant::now();
        let hot_tags: Arc<Vec<(Slot, String)>> =
            Arc::new(spec.hot_slots.iter().map(|&s| (s, tag_for_slot(s))).collect());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(LOAD_THREADS)
            .thread_name("load")
            .enable_all()
            .build()
            .context("load: cannot start the clients' runtime")?;
        let mut tasks = JoinSet::new();
        for client in 0..spec.clients {
            let (router, shared, cancel, hot_tags, spec) =
                (router.clone(), shared.clone(), cancel.clone(), hot_tags.clone(), spec.clone());
            tasks.spawn_on(
                async move { run_client(client, router, shared, cancel, hot_tags, spec, started).await },
                runtime.handle(),
            );
        }
        Ok(Self { runtime: Some(runtime), router, shared, cancel, tasks, started, onset: spec.onset })
    }

    /// When the hot phase begins (or began).
    pub fn onset_at(&self) -> Instant {
        self.started + self.onset
    }

    /// The clients of hot slot `slot` go away: from now on no command is sent to it, as when
    /// a moved slot's clients die instead of following it (the clients' other commands go on).
    pub fn silence(&self, slot: Slot) {
        self.shared.silenced.lock().unwrap_or_else(|e| e.into_inner()).push(slot);
    }

    /// Operations so far.
    pub fn ops(&self) -> u64 {
        self.shared.ops.load(Ordering::Relaxed)
    }

    pub fn errors(&self) -> u64 {
        self.shared.errors.load(Ordering::Relaxed)
    }

    pub fn stale_reads(&self) -> u64 {
        self.shared.stale_reads.load(Ordering::Relaxed)
    }

    /// The latency histogram since the last call (a fresh one starts now).
    pub fn take_histogram(&self) -> Histogram {
        std::mem::take(&mut *self.shared.histogram.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Stops the clients (each finishes its command in flight) and returns what they did.
    pub async fn stop(mut self) -> LoadReport {
        self.cancel.cancel();
        let mut written = HashMap::new();
        while let Some(done) = self.tasks.join_next().await {
            match done {
                Ok(w) => written.extend(w),
                Err(e) => warn!(error = %e, "load client task failed"),
            }
        }
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
        LoadReport {
            ops: self.shared.ops.load(Ordering::Relaxed),
            hot_ops: self.shared.hot_ops.load(Ordering::Relaxed),
            errors: self.shared.errors.load(Ordering::Relaxed),
            stale_reads: self.shared.stale_reads.load(Ordering::Relaxed),
            written,
            histogram: self.take_histogram(),
            refreshes: self.router.refreshes.load(Ordering::Relaxed),
        }
    }
}

impl Drop for LoadGenerator {
    fn drop(&mut self) {
        self.cancel.cancel();
        // A runtime cannot be dropped (it would block) inside another runtime's task.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

async fn run_client(
    client: usize,
    router: Arc<Router>,
    shared: Arc<Shared>,
    cancel: CancellationToken,
    hot_tags: Arc<Vec<(Slot, String)>>,
    spec: LoadSpec,
    started: Instant,
) -> HashMap<String, String> {
    // Seeded (choices need not be cryptographic, only reproducible and cheap), one stream per client.
    let mut rng = SplitMix64::new(spec.seed ^ (client as u64).wrapping_mul(0x2545_F491_4F6C_DD1D));
    let mut written: HashMap<String, String> = HashMap::new();
    let mut local = Histogram::default();
    let interval = spec.rate_ops_per_sec.map(|r| Duration::from_secs_f64(spec.clients as f64 / r));
    let mut next_at = tokio::time::Instant::now();
    let mut seq: u64 = 0;
    while !cancel.is_cancelled() {
        if let Some(interval) = interval {
            next_at += interval;
            let now = tokio::time::Instant::now();
            // Behind by more than a second: the cluster cannot keep up; do not queue a burst.
            if next_at + Duration::from_secs(1) < now {
                next_at = now;
            }
            tokio::select! {
                () = tokio::time::sleep_until(next_at) => {}
                () = cancel.cancelled() => break,
            }
        }
        let hot = !hot_tags.is_empty() && started.elapsed() >= spec.onset && rng.next_f64() < spec.hot_share;
        let key = if hot {
            let (slot, tag) = &hot_tags[rng.below(hot_tags.len() as u64) as usize];
            if shared.silenced.lock().unwrap_or_else(|e| e.into_inner()).contains(slot) {
                // Its clients are gone: this command is never sent.
                tokio::task::yield_now().await;
                continue;
            }
            format!("{{{tag}}}:c{client}:{}", rng.below(spec.hot_keys_per_client as u64))
        } else {
            format!("bg:c{client}:{}", rng.below(spec.background_keys_per_client as u64))
        };
        let slot = key_slot(key.as_bytes());
        let write = rng.next_f64() < spec.write_ratio;
        let begun = Instant::now();
        let outcome = if write {
            seq += 1;
            let mut value = format!("{key}#{seq}#");
            while value.len() < spec.value_bytes {
                value.push('x');
            }
            let result = router.send("SET", slot, redis::cmd("SET").arg(&key).arg(&value)).await;
            match result {
                Ok(Value::Okay) => {
                    written.insert(key, value);
                    Ok(())
                }
                Ok(other) => Err(format!("SET {key}: unexpected reply {other:?}")),
                Err(e) => Err(e),
            }
        } else {
            let (name, mut read) = if hot && spec.hot_read_cost > 0 {
                let mut cmd = redis::cmd("EVAL");
                cmd.arg(EXPENSIVE_READ).arg(1);
                ("EVAL", cmd)
            } else {
                ("GET", redis::cmd("GET"))
            };
            read.arg(&key);
            if name == "EVAL" {
                read.arg(spec.hot_read_cost);
            }
            match router.send(name, slot, &read).await {
                Ok(value) => {
                    let got = match &value {
                        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
                        _ => None,
                    };
                    if got.as_deref() != written.get(&key).map(String::as_str) {
                        shared.stale_reads.fetch_add(1, Ordering::Relaxed);
                        warn!(key, ?got, expected = ?written.get(&key), "load: read did not return the last write");
                    }
                    Ok(())
                }
                Err(e) => Err(e),
            }
        };
        if outcome.is_err() && cancel.is_cancelled() {
            break; // cut short by stop(): neither done nor failed
        }
        local.record(begun.elapsed());
        shared.ops.fetch_add(1, Ordering::Relaxed);
        if hot {
            shared.hot_ops.fetch_add(1, Ordering::Relaxed);
        }
        if let Err(e) = outcome {
            shared.errors.fetch_add(1, Ordering::Relaxed);
            warn!(error = %e, "load: command failed");
        }
        // Merge in small batches: one lock per 64 ops keeps the clients off each other's toes.
        if local.count() >= 64 {
            shared.histogram.lock().unwrap_or_else(|e| e.into_inner()).merge(&local);
            local = Histogram::default();
        }
    }
    shared.histogram.lock().unwrap_or_else(|e| e.into_inner()).merge(&local);
    written
}

/// What reading every recorded write back found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Verification {
    pub checked: usize,
    /// Keys that read back with another value or none: `(key, expected, got)`, at most 20.
    pub wrong: Vec<(String, String, Option<String>)>,
    pub wrong_count: usize,
}

/// Reads every key of `written` back through a fresh slot map and compares values.
pub async fn verify(
    seeds: Vec<NodeAddr>,
    options: ConnectOptions,
    written: &HashMap<String, String>,
) -> anyhow::Result<Verification> {
    let router = Arc::new(Router::new(seeds, options, CancellationToken::new()).await?);
    let entries: Vec<(String, String)> = written.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let mut result = Verification::default();
    for chunk in entries.chunks(VERIFY_CONCURRENCY) {
        let mut reads = JoinSet::new();
        for (key, expected) in chunk.iter().cloned() {
            let router = router.clone();
            reads.spawn(async move {
                let slot = key_slot(key.as_bytes());
                let got = match router.send("GET", slot, redis::cmd("GET").arg(&key)).await {
                    Ok(Value::BulkString(bytes)) => Some(String::from_utf8_lossy(&bytes).into_owned()),
                    _ => None,
                };
                (key, expected, got)
            });
        }
        while let Some(done) = reads.join_next().await {
            let (key, expected, got) = done.context("verify: a read task failed")?;
            result.checked += 1;
            if got.as_deref() != Some(expected.as_str()) {
                result.wrong_count += 1;
                if result.wrong.len() < 20 {
                    result.wrong.push((key, expected, got));
                }
            }
        }
    }
    Ok(result)
}

/// One node's cumulative counters at one moment.
#[derive(Debug, Clone, Copy)]
struct Reading {
    at: Instant,
    commands: u64,
    cpu_secs: f64,
}

/// Per-node rates from `INFO`: commands/s and the main thread's busy time (cores: busy
/// seconds per second, [`lb_valkey::reply::Info::main_thread_busy_secs`]) between two readings.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRates {
    pub addr: NodeAddr,
    pub ops_per_sec: f64,
    pub cpu_cores: f64,
}

/// Reads `INFO` on every node and turns two readings into rates.
#[derive(Debug)]
pub struct NodeCounters {
    addrs: Vec<NodeAddr>,
    options: ConnectOptions,
    last: Vec<Option<Reading>>,
}

impl NodeCounters {
    pub fn new(addrs: Vec<NodeAddr>, options: ConnectOptions) -> Self {
        let last = vec![None; addrs.len()];
        Self { addrs, options, last }
    }

    /// Rates since the previous call (`None` for a node on the first call or when it did not
    /// answer); the reading taken now is the base of the next call.
    pub async fn sample(&mut self) -> Vec<Option<NodeRates>> {
        let mut out = Vec::with_capacity(self.addrs.len());
        for (i, addr) in self.addrs.iter().enumerate() {
            let reading = match NodeClient::connect(addr, &self.options).await {
                Ok(mut c) => c.info().await.ok().map(|info| Reading {
                    at: Instant::now(),
                    commands: info.total_commands_processed,
                    cpu_secs: info.main_thread_busy_secs().0,
                }),
                Err(_) => None,
            };
            let rates = match (self.last[i], reading) {
                (Some(a), Some(b)) if b.at > a.at && b.commands >= a.commands => {
                    let secs = (b.at - a.at).as_secs_f64();
                    Some(NodeRates {
                        addr: addr.clone(),
                        ops_per_sec: (b.commands - a.commands) as f64 / secs,
                        cpu_cores: (b.cpu_secs - a.cpu_secs).max(0.0) / secs,
                    })
                }
                _ => None,
            };
            self.last[i] = reading;
            out.push(rates);
        }
        out
    }
}

/// Max over mean of `values` (1.0 for an empty or all-zero list).
pub fn max_over_mean(values: &[f64]) -> f64 {
    let mean = values.iter().sum::<f64>() / values.len().max(1) as f64;
    if mean <= 0.0 {
        return 1.0;
    }
    values.iter().copied().fold(0.0, f64::max) / mean
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_quantiles_are_within_a_bucket() {
        let mut h = Histogram::default();
        for us in 1..=10_000u64 {
            h.record(Duration::from_micros(us));
        }
        let p50 = h.quantile(0.5).as_micros() as f64;
        let p99 = h.quantile(0.99).as_micros() as f64;
        assert!((p50 - 5_000.0).abs() / 5_000.0 < 0.04, "p50 {p50}");
        assert!((p99 - 9_900.0).abs() / 9_900.0 < 0.04, "p99 {p99}");
        assert_eq!(h.quantile(1.0), Duration::from_micros(10_000));
        assert_eq!(Histogram::default().quantile(0.99), Duration::ZERO);
    }

    #[test]
    fn histogram_buckets_are_monotonic_and_cover_their_values() {
        let mut last = 0;
        for us in [0u64, 1, 31, 32, 33, 63, 64, 65, 1_000, 123_456, 10_000_000] {
            let i = Histogram::index(us);
            assert!(i >= last, "index of {us} went down");
            assert!(Histogram::upper(i) >= us, "bucket {i} upper {} < {us}", Histogram::upper(i));
            last = i;
        }
    }

    #[test]
    fn tags_land_in_their_slot_and_redirects_parse() {
        let slot = Slot::new(12_345).expect("slot");
        let tag = tag_for_slot(slot);
        assert_eq!(key_slot(format!("{{{tag}}}:c0:1").as_bytes()), slot);
        assert_eq!(parse_addr("127.0.0.1:7001"), Some(NodeAddr::new("127.0.0.1", 7001)));
        assert_eq!(parse_addr("nonsense"), None);
        assert!((max_over_mean(&[3.0, 1.0, 2.0]) - 1.5).abs() < 1e-9);
        assert_eq!(max_over_mean(&[]), 1.0);
    }
}
