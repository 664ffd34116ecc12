//! The planner's input from the engine, kept in place.
//!
//! The master builds a [`PlannerInput`] from its MetricsTable (rates over a window, the latest
//! sketch) and the topology; the simulator builds the same struct from the engine: per
//! partition the counters its owner's report would carry for the interval since the previous
//! read (rounded exactly as a report rounds them), per worker the served ops of the last step.
//!
//! At 100,000 partitions rebuilding 100,000 [`PartitionView`]s with cloned ids every second
//! costs more than the planner itself, so [`InputBuilder`] rebuilds the views only when the
//! layout changes ([`Cluster::version`](lb_testbed::model::Cluster)) and otherwise overwrites their
//! stats in place, walking the partitions in topology order by dense index.

use lb_common::protocol::{ActionKind, KeySketch};
use lb_master::planner::{PartitionView, PartitionWindow, PlannerInput, WorkerView, WorkerWindow};

use lb_testbed::Engine;
use lb_testbed::model::Cluster;
use lb_testbed::model::report::SketchCache;

/// Keeps one [`PlannerInput`] in step with an engine. See the module doc.
#[derive(Debug)]
pub struct InputBuilder {
    input: PlannerInput,
    /// Cluster partition index of each `input.partitions[i]` (topology order).
    order: Vec<u32>,
    /// Sketch bucket masses of each `input.partitions[i]`, kept while its range holds.
    caches: Vec<SketchCache>,
    /// (table, start, owner index) of each `input.partitions[i]` when it was last refreshed.
    idents: Vec<(u32, u64, u32)>,
    /// The previous views' buffer, reused by the next rebuild (no 30 MB allocation per split).
    spare_views: Vec<PartitionView>,
    /// Layout version the views were built from; 0 = never built.
    version: u64,
    last_read_ms: Option<i64>,
    /// Times the views were rebuilt (layout changes seen), for profiling.
    pub rebuilds: u64,
    /// Threads reading partitions (1 = on the caller's thread only).
    pub threads: usize,
}

/// Below this many partitions per thread, a thread costs more than it saves.
const MIN_PARTITIONS_PER_THREAD: usize = 8192;

impl Default for InputBuilder {
    fn default() -> Self {
        Self::new(1)
    }
}

impl InputBuilder {
    /// Reads partitions on up to `threads` threads.
    pub fn new(threads: usize) -> Self {
        Self {
            // The testbed cuts a partition into many pieces in one action (its topology says so).
            input: PlannerInput {
                multi_way_split: true,
                move_rate_limit: true,
                merge_to_worker: true,
                ..PlannerInput::default()
            },
            order: Vec::new(),
            caches: Vec::new(),
            spare_views: Vec::new(),
            idents: Vec::new(),
            version: 0,
            last_read_ms: None,
            rebuilds: 0,
            threads: threads.max(1),
        }
    }

    /// Reads the engine's counters since the previous call (and resets them, as a report
    /// does), refreshes the input and returns it. The caller sets `in_flight`.
    /// The input as of the last [`InputBuilder::update`].
    pub fn current(&self) -> &PlannerInput {
        &self.input
    }

    pub fn update(&mut self, engine: &mut Engine) -> &mut PlannerInput {
        let now_ms = engine.now_ms();
        let t_secs = engine.t_secs();
        // A report's interval is at least 1 ms; the first read covers one step.
        let interval_ms = self.last_read_ms.map_or(1000, |last| (now_ms - last).max(1));
        self.last_read_ms = Some(now_ms);
        let secs = interval_ms as f64 / 1000.0;
        if self.version != engine.cluster.version || self.order.len() != engine.cluster.partitions.len() {
            self.rebuild_views(engine);
        }
        let cluster = &engine.cluster;
        // Every partition is read, so the counters reset in bulk after; the reads split over
        // `threads` scoped threads (the sketches are most of a tick at 100k partitions).
        let chunk = self.input.partitions.len().div_ceil(self.threads.max(1)).max(MIN_PARTITIONS_PER_THREAD);
        let read = |views: &mut [PartitionView], caches: &mut [SketchCache], order: &[u32]| {
            for ((view, cache), &p) in views.iter_mut().zip(caches).zip(order) {
                read_partition(cluster, p as usize, secs, t_secs, view, cache);
            }
        };
        std::thread::scope(|scope| {
            let mut parts = self
                .input
                .partitions
                .chunks_mut(chunk)
                .zip(self.caches.chunks_mut(chunk))
                .zip(self.order.chunks(chunk));
            let first = parts.next();
            for ((views, caches), order) in parts {
                scope.spawn(move || read(views, caches, order));
            }
            if let Some(((views, caches), order)) = first {
                read(views, caches, order);
            }
        });
        engine.cluster.load.reset_all_acc();
        let cluster = &engine.cluster;
        let load = &cluster.load;
        for (w, view) in self.input.workers.iter_mut().enumerate() {
            // The testbed's host cpu_ratio is its demand ratio, already covered by ops: no CPU.
            view.load = WorkerWindow {
                ops_per_sec: load.worker_ops[w] * load.worker_scale[w],
                bytes_per_sec: 0.0,
                cpu_ratio: 0.0,
                attributed_cpu_cores: None,
            };
        }
        &mut self.input
    }

    /// The input as of the last [`InputBuilder::update`].
    pub fn input(&self) -> &PlannerInput {
        &self.input
    }

    /// After a layout change: the views in the new topology order.
    ///
    /// Moves and group changes keep the order: views are refreshed in place. Splits only add
    /// partitions (new dense indices, the rest keep theirs and their relative order): one pass
    /// moves the kept views into a spare buffer and builds only the new ones. Anything else (a
    /// merge renumbers a partition) builds every view afresh.
    fn rebuild_views(&mut self, engine: &Engine) {
        let c = &engine.cluster;
        let p = &c.partitions;
        let order: Vec<u32> = c.tables.iter().flat_map(|t| t.sorted.iter().copied()).collect();
        // (table, start) identifies a partition within a layout and survives a split of it
        // (the left side keeps id and start); a merge's renumbered partition fails it. Plain
        // numbers: comparing 100,000 ids would chase 100,000 pointers per rebuild.
        let ident = |i: u32| {
            let i = i as usize;
            (p.table[i], p.start[i], p.owner[i])
        };
        let kept_ids = self.order.len() == self.input.partitions.len()
            && self.order.len() == self.idents.len()
            && self.order.iter().zip(&self.idents).all(|(&i, &(t, start, _))| {
                (i as usize) < p.len() && p.table[i as usize] == t && p.start[i as usize] == start
            });
        if kept_ids && order == self.order {
            for ((view, &i), known) in self.input.partitions.iter_mut().zip(&order).zip(&mut self.idents) {
                refresh_view(c, i as usize, view, known.2);
                *known = ident(i);
            }
        } else if kept_ids && is_subsequence(&self.order, &order) {
            let mut views = std::mem::take(&mut self.spare_views);
            views.clear();
            views.reserve(order.len());
            let mut caches = Vec::with_capacity(order.len());
            let mut idents = Vec::with_capacity(order.len());
            let mut old_views = std::mem::take(&mut self.input.partitions);
            {
                let old_idents = self.idents.iter();
                let mut old =
                    self.order.iter().zip(old_views.drain(..).zip(self.caches.drain(..)).zip(old_idents)).peekable();
                for &i in &order {
                    idents.push(ident(i));
                    match old.next_if(|(o, _)| **o == i) {
                        Some((_, ((mut view, cache), known))) => {
                            refresh_view(c, i as usize, &mut view, known.2);
                            views.push(view);
                            caches.push(cache);
                        }
                        None => {
                            views.push(new_view(c, i as usize));
                            caches.push(SketchCache::default());
                        }
                    }
                }
            }
            self.spare_views = old_views;
            self.input.partitions = views;
            self.caches = caches;
            self.idents = idents;
        } else {
            self.input.partitions = order.iter().map(|&i| new_view(c, i as usize)).collect();
            self.caches = order.iter().map(|_| SketchCache::default()).collect();
            self.idents = order.iter().map(|&i| ident(i)).collect();
        }
        self.order = order;
        let w = &c.workers;
        self.input.workers = (0..w.len())
            .map(|i| WorkerView {
                id: w.ids[i].clone(),
                capacity: w.capacity[i],
                cpu_cores: 0.0,
                group: w.group[i].clone(),
                health: w.health[i],
                zone: w.zone[i].clone(),
                load: WorkerWindow::default(),
            })
            .collect();
        self.version = c.version;
        self.rebuilds += 1;
        self.input.layout = Some(lb_master::planner::new_layout_id());
    }
}

/// Whether `a` is `b` with elements removed (same relative order).
fn is_subsequence(a: &[u32], b: &[u32]) -> bool {
    let mut b = b.iter();
    a.iter().all(|x| b.any(|y| y == x))
}

/// A view of partition `p` with empty stats.
fn new_view(c: &Cluster, p: usize) -> PartitionView {
    let parts = &c.partitions;
    let table = &c.tables[parts.table[p] as usize];
    PartitionView {
        id: parts.ids[p].clone(),
        tenant: table.tenant.clone(),
        table: table.table.clone(),
        range: parts.range(p),
        owner: c.workers.ids[parts.owner[p] as usize].clone(),
        group: parts.group[p].clone(),
        stored_bytes: parts.stored_bytes[p] as u64,
        limit: Some(c.partition_limit),
        supported_actions: vec![ActionKind::Split, ActionKind::Move, ActionKind::Merge, ActionKind::Group],
        stats: PartitionWindow::default(),
    }
}

/// Owner, group, range and size of partition `p` into its existing view, whose owner was
/// worker `known_owner` (the owner's id is cloned only when it changed).
fn refresh_view(c: &Cluster, p: usize, view: &mut PartitionView, known_owner: u32) {
    let parts = &c.partitions;
    if parts.owner[p] != known_owner {
        view.owner = c.workers.ids[parts.owner[p] as usize].clone();
    }
    if view.group != parts.group[p] {
        view.group = parts.group[p].clone();
    }
    view.range = parts.range(p);
    view.stored_bytes = parts.stored_bytes[p] as u64;
}

/// Partition `p`'s window into `view`: what its owner's report would say (see the module doc).
fn read_partition(
    cluster: &Cluster,
    p: usize,
    secs: f64,
    t_secs: f64,
    view: &mut PartitionView,
    cache: &mut SketchCache,
) {
    let c = cluster.window_counters(p);
    // The sketch's buffers are reused from the previous second.
    let mut sketch = view.stats.sketch.take().unwrap_or_else(empty_sketch);
    cluster.sketch_cached(p, c.read_ops + c.write_ops, t_secs, cache, &mut sketch);
    view.stored_bytes = cluster.partitions.stored_bytes[p] as u64;
    view.stats = PartitionWindow {
        ops_per_sec: (c.read_ops + c.write_ops) as f64 / secs,
        bytes_per_sec: (c.read_bytes + c.write_bytes) as f64 / secs,
        cpu_cores: c.cpu_time_us as f64 / 1e6 / secs,
        rejected_per_sec: c.rejected as f64 / secs,
        sketch: Some(sketch),
    };
}

fn empty_sketch() -> KeySketch {
    KeySketch { bucket_ops: Vec::new(), bucket_bounds: Vec::new(), top_keys: Vec::new(), sequential_write_ratio: 0.0 }
}
