//! The table itself: entries for partitions, workers, tables and tenants around the series
//! arenas; topology, lineage, eviction and memory accounting.

use std::collections::HashMap;

use lb_common::ids::{GroupId, KeyRange, PartitionId, TableId, TenantId, WorkerId};
pub use lb_common::protocol::MemoryUsage;
use lb_common::protocol::{Capacity, Health, KeySketch, MAX_SKETCH_BUCKETS, MAX_SKETCH_TOP_KEYS, Topology};
use serde::{Deserialize, Serialize};

use super::codec::{LogU8, LogU16, PlainF32};
use super::metric::{PARTITION_AGGS, PARTITION_RANGES, WORKER_AGGS};
use super::ring::{Geometry, SeriesStore};
use super::{MAX_LINEAGE_DEPTH, TableConfig, TableError};

/// What one [`MetricsTable::ingest`] call did with its samples. Every sample is counted in
/// exactly one field.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IngestStats {
    pub accepted_partition: u64,
    pub accepted_host: u64,
    /// `(worker, cursor)` at or below the worker's last ingested cursor: already counted.
    pub duplicate: u64,
    /// Older than the series' open window (its coarse slot is already rolled up).
    pub dropped_late: u64,
    /// Timestamp beyond `now + max_future_skew`.
    pub rejected_future: u64,
    /// Interval of 0 or over the protocol's maximum, or an invalid key range.
    pub invalid: u64,
    /// A new partition or worker over `max_partitions` / `max_workers`.
    pub over_capacity: u64,
}

impl IngestStats {
    pub fn total(&self) -> u64 {
        self.accepted_partition
            + self.accepted_host
            + self.duplicate
            + self.dropped_late
            + self.rejected_future
            + self.invalid
            + self.over_capacity
    }
}

/// How exact a metric's stored values are: relative error at or above `unit`, absolute error
/// `unit × relative error` below it; values above `max` saturate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ErrorBound {
    pub metric: super::Metric,
    pub unit: f64,
    pub max: f64,
    /// Fine ring (u16 codes).
    pub fine_relative_error: f64,
    /// Coarse ring (u8 codes).
    pub coarse_relative_error: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PartState {
    Free,
    Live,
    Gone,
}

#[derive(Debug, Clone)]
pub(crate) struct Parent {
    pub idx: u32,
    /// Share of the parent's rate metrics that the child inherited (key-range fraction for a
    /// split, 1 for a merge).
    pub share: f64,
}

#[derive(Debug, Clone)]
pub(crate) struct PartitionEntry {
    pub id: PartitionId,
    pub table: u32,
    pub range: KeyRange,
    pub owner: Option<u32>,
    pub last_worker: Option<u32>,
    pub group: Option<GroupId>,
    pub limit: Option<Capacity>,
    pub stored_bytes: u64,
    pub latest_ts_ms: Option<i64>,
    pub first_slot: Option<i64>,
    /// When the table first knew this entry: the slot of the topology read that listed it, or
    /// the slot after the newest ingested when a sample made it (`i64::MIN` when the table had
    /// none): a partition the topology listed before it ever reported was idle since then, not
    /// young, for the seconds its worker reported (reports list only active partitions).
    pub created_slot: i64,
    /// Not in the latest topology (split, merged away or dropped); history stays until evicted.
    pub gone: bool,
    pub sketch: Option<Box<KeySketch>>,
    /// The key range the sketch's buckets divide (the partition's range when it was reported).
    pub sketch_range: Option<KeyRange>,
    /// Which of the table's sketches this is ([`MetricsTable::sketch_seq`] when it was kept), so
    /// a reader that copied it can tell it unchanged without comparing it.
    pub sketch_version: u64,
    pub parents: Vec<Parent>,
    pub children: Vec<u32>,
}

#[derive(Debug, Clone)]
pub(crate) struct WorkerEntry {
    pub id: WorkerId,
    pub last_cursor: Option<lb_common::protocol::Cursor>,
    /// End of the newest sample ingested from this worker (its report time).
    pub last_sample_ms: Option<i64>,
    pub capacity: Option<Capacity>,
    /// Cores of execution when CPU is a capacity dimension (the topology's `cpu_cores`), else 0.
    pub cpu_cores: f64,
    pub health: Option<Health>,
    pub group: Option<GroupId>,
    /// The topology's availability zone of the worker.
    pub zone: Option<lb_common::ids::ZoneId>,
    pub in_topology: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct TableEntry {
    pub tenant: u32,
    pub table: TableId,
    pub partitions: Vec<u32>,
}

/// The master's in-memory metrics: see the module doc.
#[derive(Debug, Clone)]
pub struct MetricsTable {
    pub(crate) config: TableConfig,
    pub(crate) geo: Geometry,
    pub(crate) pseries: SeriesStore<LogU16, LogU8>,
    pub(crate) wseries: SeriesStore<PlainF32, PlainF32>,
    /// Indexed by series id; `None` for freed slots.
    pub(crate) partitions: Vec<Option<PartitionEntry>>,
    pub(crate) partition_index: HashMap<PartitionId, u32>,
    /// Compact copies of each entry's state and table, indexed like `partitions`, so that
    /// scans over 100k partitions do not touch the (large) entries.
    pub(crate) pstate: Vec<PartState>,
    pub(crate) ptable: Vec<u32>,
    /// Indexed by series id; workers are never freed.
    pub(crate) workers: Vec<WorkerEntry>,
    pub(crate) worker_index: HashMap<WorkerId, u32>,
    pub(crate) tables: Vec<TableEntry>,
    pub(crate) table_index: HashMap<(u32, TableId), u32>,
    pub(crate) tenants: Vec<TenantId>,
    pub(crate) tenant_index: HashMap<TenantId, u32>,
    pub(crate) live_partitions: usize,
    /// The newest fine slot any accepted sample reached.
    pub(crate) newest_slot: Option<i64>,
    /// Sketches kept so far (the last one's [`PartitionEntry::sketch_version`]): versions are
    /// unique over the table's life, also across an entry freed and made again.
    pub(crate) sketch_seq: u64,
    /// This table (a copy is another) and how many times it freed partition slots: while both
    /// stay the same, a [`PartitionSlot`] found before still holds its partition.
    instance: Instance,
    slots_freed: u64,
}

/// A table's identity for [`MetricsTable::slots_epoch`]: unique per table, and a copy is another.
#[derive(Debug)]
struct Instance(u64);

impl Instance {
    fn new() -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        Self(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }
}

impl Clone for Instance {
    fn clone(&self) -> Self {
        Self::new()
    }
}

/// When [`PartitionSlot`]s were found ([`MetricsTable::slots_epoch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotsEpoch {
    table: u64,
    freed: u64,
}

/// Where the table keeps a partition's series: found once by id ([`MetricsTable::locate`]) and
/// then read without hashing the id, as the online pass does for every partition each second.
/// It is a hint, checked against the id on every use, so a stale one costs a lookup and never
/// reads another partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionSlot(pub(crate) u32);

impl MetricsTable {
    pub fn new(config: TableConfig) -> Result<Self, TableError> {
        let bad = |m: &str| Err(TableError::InvalidConfig(m.to_owned()));
        let fine_ms = config.fine_step.as_millis();
        let coarse_ms = config.coarse_step.as_millis();
        if fine_ms == 0 || coarse_ms == 0 || !coarse_ms.is_multiple_of(fine_ms) {
            return bad("coarse_step must be a non-zero multiple of a non-zero fine_step (whole millis)");
        }
        let factor = (coarse_ms / fine_ms) as i64;
        if factor > i64::from(u8::MAX) {
            return bad("coarse_step may be at most 255 fine steps (coverage is counted in a byte)");
        }
        if i64::from(config.fine_points) <= factor {
            return bad("fine_points must exceed coarse_step / fine_step so a coarse slot is rolled up whole");
        }
        if config.coarse_points == 0 || config.coarse_points > 100_000 || config.fine_points > 100_000 {
            return bad("coarse_points must be 1..=100000 and fine_points at most 100000");
        }
        let geo = Geometry {
            fine_step_ms: fine_ms as i64,
            fine_len: i64::from(config.fine_points),
            factor,
            coarse_len: i64::from(config.coarse_points),
        };
        let fine_codecs = PARTITION_RANGES.iter().map(|&(u, m)| LogU16::new(u, m)).collect();
        let coarse_codecs = PARTITION_RANGES.iter().map(|&(u, m)| LogU8::new(u, m)).collect();
        let pseries = SeriesStore::new(geo, &PARTITION_AGGS, fine_codecs, coarse_codecs);
        let wseries =
            SeriesStore::new(geo, &WORKER_AGGS, vec![PlainF32; WORKER_AGGS.len()], vec![PlainF32; WORKER_AGGS.len()]);
        Ok(Self {
            config,
            geo,
            pseries,
            wseries,
            partitions: vec![],
            partition_index: HashMap::new(),
            pstate: vec![],
            ptable: vec![],
            workers: vec![],
            worker_index: HashMap::new(),
            tables: vec![],
            table_index: HashMap::new(),
            tenants: vec![],
            tenant_index: HashMap::new(),
            live_partitions: 0,
            newest_slot: None,
            sketch_seq: 0,
            instance: Instance::new(),
            slots_freed: 0,
        })
    }

    pub fn config(&self) -> &TableConfig {
        &self.config
    }

    pub(crate) fn worker_idx_or_insert(&mut self, id: &WorkerId) -> Option<u32> {
        if let Some(&i) = self.worker_index.get(id) {
            return Some(i);
        }
        if self.workers.len() >= self.config.max_workers {
            return None;
        }
        let i = self.wseries.alloc();
        debug_assert_eq!(i as usize, self.workers.len());
        self.workers.push(WorkerEntry {
            id: id.clone(),
            last_cursor: None,
            last_sample_ms: None,
            capacity: None,
            cpu_cores: 0.0,
            health: None,
            group: None,
            zone: None,
            in_topology: false,
        });
        self.worker_index.insert(id.clone(), i);
        Some(i)
    }

    pub(crate) fn table_idx_or_insert(&mut self, tenant: &TenantId, table: &TableId) -> u32 {
        let t = match self.tenant_index.get(tenant) {
            Some(&t) => t,
            None => {
                let t = self.tenants.len() as u32;
                self.tenants.push(tenant.clone());
                self.tenant_index.insert(tenant.clone(), t);
                t
            }
        };
        if let Some(&i) = self.table_index.get(&(t, table.clone())) {
            return i;
        }
        let i = self.tables.len() as u32;
        self.tables.push(TableEntry { tenant: t, table: table.clone(), partitions: vec![] });
        self.table_index.insert((t, table.clone()), i);
        i
    }

    /// Finds or creates a partition's entry; `None` when the table is full.
    pub(crate) fn partition_idx_or_insert(
        &mut self,
        id: &PartitionId,
        tenant: &TenantId,
        table: &TableId,
        range: KeyRange,
        created_slot: Option<i64>,
    ) -> Option<u32> {
        if let Some(&i) = self.partition_index.get(id) {
            return Some(i);
        }
        if self.live_partitions >= self.config.max_partitions {
            return None;
        }
        let table = self.table_idx_or_insert(tenant, table);
        let i = self.pseries.alloc();
        let entry = PartitionEntry {
            id: id.clone(),
            table,
            range,
            owner: None,
            last_worker: None,
            group: None,
            limit: None,
            stored_bytes: 0,
            latest_ts_ms: None,
            first_slot: None,
            created_slot: created_slot.or(self.newest_slot.map(|s| s + 1)).unwrap_or(i64::MIN),
            gone: false,
            sketch: None,
            sketch_range: None,
            sketch_version: 0,
            parents: vec![],
            children: vec![],
        };
        if self.partitions.len() <= i as usize {
            self.partitions.resize(i as usize + 1, None);
            self.pstate.resize(i as usize + 1, PartState::Free);
            self.ptable.resize(i as usize + 1, 0);
        }
        self.pstate[i as usize] = PartState::Live;
        self.ptable[i as usize] = table;
        self.partitions[i as usize] = Some(entry);
        self.partition_index.insert(id.clone(), i);
        self.tables[table as usize].partitions.push(i);
        self.live_partitions += 1;
        Some(i)
    }

    pub(crate) fn entry(&self, idx: u32) -> &PartitionEntry {
        self.partitions[idx as usize].as_ref().expect("indices in the index map point at live entries")
    }

    pub(crate) fn partition_idx(&self, id: &PartitionId) -> Result<u32, TableError> {
        self.partition_index.get(id).copied().ok_or_else(|| TableError::UnknownPartition(id.clone()))
    }

    /// Takes the storage system's layout: owners, groups, limits and stored bytes of partitions,
    /// capacity and health of workers. Known partitions missing from it are marked gone (their
    /// history stays for lineage and the heatmap until [`Self::evict_expired`]); a partition that
    /// comes back is live again. Returns how many partitions were refused for capacity.
    pub fn apply_topology(&mut self, topology: &Topology) -> usize {
        self.apply_topology_at(topology, None)
    }

    /// [`Self::apply_topology`] of a topology read at `read_at_ms`: a partition it lists for the
    /// first time existed then (a split's new side, an idle slot), so its reported-seconds
    /// average starts there. Without a time, the slot after the newest ingested is taken, which
    /// trails the read by the collection lag.
    pub fn apply_topology_at(&mut self, topology: &Topology, read_at_ms: Option<i64>) -> usize {
        let created = read_at_ms.map(|ms| self.geo.slot_of(ms));
        let mut refused = 0;
        for w in &topology.workers {
            if let Some(i) = self.worker_idx_or_insert(&w.id) {
                let e = &mut self.workers[i as usize];
                e.capacity = Some(w.capacity);
                e.cpu_cores = w.cpu_cores;
                e.health = Some(w.health);
                e.group = w.group.clone();
                e.zone = w.zone.clone();
            }
        }
        let mut seen = vec![false; self.partitions.len()];
        for p in &topology.partitions {
            let Some(i) = self.partition_idx_or_insert(&p.id, &p.tenant, &p.table, p.range, created) else {
                refused += 1;
                continue;
            };
            let owner = self.worker_idx_or_insert(&p.owner);
            if seen.len() <= i as usize {
                seen.resize(i as usize + 1, false);
            }
            seen[i as usize] = true;
            let e = self.partitions[i as usize].as_mut().expect("just inserted or found");
            e.range = p.range;
            e.owner = owner;
            e.group = p.group.clone();
            e.limit = p.limit;
            e.stored_bytes = p.stored_bytes;
            e.gone = false;
        }
        for w in self.workers.iter_mut() {
            w.in_topology = false;
        }
        for w in &topology.workers {
            if let Some(&i) = self.worker_index.get(&w.id) {
                self.workers[i as usize].in_topology = true;
            }
        }
        for (i, e) in self.partitions.iter_mut().enumerate() {
            if let Some(e) = e {
                e.gone = !seen.get(i).copied().unwrap_or(false);
                self.pstate[i] = if e.gone { PartState::Gone } else { PartState::Live };
            }
        }
        refused
    }

    /// Records that `parent` split into `children`: before a child's first sample, its history
    /// is the parent's, scaled by the share of the parent's key range the child took.
    pub fn link_split(&mut self, parent: &PartitionId, children: &[PartitionId]) -> Result<(), TableError> {
        let p = self.partition_idx(parent)?;
        let kids = children.iter().map(|c| self.partition_idx(c)).collect::<Result<Vec<_>, _>>()?;
        let prange = self.entry(p).range;
        for (&c, cid) in kids.iter().zip(children) {
            let crange = self.entry(c).range;
            let share = if prange.start <= crange.start && crange.end <= prange.end {
                crange.width() / prange.width()
            } else {
                1.0 / kids.len() as f64
            };
            self.link(p, c, share)
                .map_err(|()| TableError::LineageCycle { parent: parent.clone(), child: cid.clone() })?;
        }
        Ok(())
    }

    /// Records that `child` took `share_ratio` of `parent`'s key range, computed by the caller
    /// from the ranges *before* the split (the parent may have kept its id with a smaller range).
    pub fn link_split_share(
        &mut self,
        parent: &PartitionId,
        child: &PartitionId,
        share_ratio: f64,
    ) -> Result<(), TableError> {
        let p = self.partition_idx(parent)?;
        let c = self.partition_idx(child)?;
        self.link(p, c, share_ratio.clamp(0.0, 1.0))
            .map_err(|()| TableError::LineageCycle { parent: parent.clone(), child: child.clone() })
    }

    /// Records that `parents` merged into `child`: before the child's first sample, its history
    /// is the sum of its parents'.
    pub fn link_merge(&mut self, parents: &[PartitionId], child: &PartitionId) -> Result<(), TableError> {
        let c = self.partition_idx(child)?;
        let ps = parents.iter().map(|p| self.partition_idx(p)).collect::<Result<Vec<_>, _>>()?;
        for (&p, pid) in ps.iter().zip(parents) {
            self.link(p, c, 1.0)
                .map_err(|()| TableError::LineageCycle { parent: pid.clone(), child: child.clone() })?;
        }
        Ok(())
    }

    fn link(&mut self, parent: u32, child: u32, share: f64) -> Result<(), ()> {
        if parent == child || self.is_ancestor(child, parent, 0) {
            return Err(());
        }
        let c = self.partitions[child as usize].as_mut().expect("resolved above");
        if let Some(existing) = c.parents.iter_mut().find(|x| x.idx == parent) {
            existing.share = share;
            return Ok(());
        }
        c.parents.push(Parent { idx: parent, share });
        self.partitions[parent as usize].as_mut().expect("resolved above").children.push(child);
        Ok(())
    }

    fn is_ancestor(&self, candidate: u32, of: u32, depth: usize) -> bool {
        if depth > MAX_LINEAGE_DEPTH * 4 {
            return true; // treat absurd depth as a cycle rather than recurse without bound
        }
        self.entry(of).parents.iter().any(|p| p.idx == candidate || self.is_ancestor(candidate, p.idx, depth + 1))
    }

    /// Frees gone partitions (and partitions never heard from) whose newest sample is older than
    /// the coarse history (`coarse_step * coarse_points` before `now_ms`). Returns how many.
    pub fn evict_expired(&mut self, now_ms: i64) -> usize {
        let span_ms = self.geo.fine_step_ms * self.geo.factor * self.geo.coarse_len;
        let cutoff = now_ms.saturating_sub(span_ms);
        let victims: Vec<u32> = self
            .partitions
            .iter()
            .enumerate()
            .filter_map(|(i, e)| {
                let e = e.as_ref()?;
                (e.gone && e.latest_ts_ms.is_none_or(|t| t < cutoff)).then_some(i as u32)
            })
            .collect();
        self.slots_freed += u64::from(!victims.is_empty());
        for &v in &victims {
            let e = self.partitions[v as usize].take().expect("victims are live");
            for c in &e.children {
                if let Some(ce) = self.partitions[*c as usize].as_mut() {
                    ce.parents.retain(|p| p.idx != v);
                }
            }
            for p in &e.parents {
                if let Some(pe) = self.partitions[p.idx as usize].as_mut() {
                    pe.children.retain(|&c| c != v);
                }
            }
            self.tables[e.table as usize].partitions.retain(|&x| x != v);
            self.partition_index.remove(&e.id);
            self.pseries.release(v);
            self.pstate[v as usize] = PartState::Free;
            self.live_partitions -= 1;
        }
        victims.len()
    }

    /// Keeps a partition's newest sketch, truncated to the protocol's bounds.
    pub(crate) fn keep_sketch(entry: &mut PartitionEntry, sketch: &KeySketch, range: KeyRange, seq: &mut u64) {
        *seq += 1;
        entry.sketch_version = *seq;
        entry.sketch_range = Some(range);
        let mut s = sketch.clone();
        s.bucket_ops.truncate(MAX_SKETCH_BUCKETS);
        s.top_keys.truncate(MAX_SKETCH_TOP_KEYS);
        // Bounds that no longer match the buckets would misplace every one: equal widths then.
        if s.bucket_bounds.len() + 1 != s.bucket_ops.len() {
            s.bucket_bounds = Vec::new();
        }
        s.bucket_ops.shrink_to_fit();
        s.bucket_bounds.shrink_to_fit();
        s.top_keys.shrink_to_fit();
        match &mut entry.sketch {
            Some(old) => **old = s,
            None => entry.sketch = Some(Box::new(s)),
        }
    }

    /// The newest key sketch of a partition (for the split analyzer).
    pub fn sketch(&self, partition: &PartitionId) -> Option<&KeySketch> {
        let i = self.partition_index.get(partition)?;
        self.entry(*i).sketch.as_deref()
    }

    /// The newest sketch, only if it describes `range`: right after a split the partition's
    /// last sketch still divides its old, wider range, and split keys read from it would be
    /// wrong until the next report.
    pub fn sketch_for(&self, partition: &PartitionId, range: KeyRange) -> Option<&KeySketch> {
        let e = self.entry(*self.partition_index.get(partition)?);
        e.sketch.as_deref().filter(|_| e.sketch_range == Some(range))
    }

    /// The table and the times it freed slots: a slot [`MetricsTable::locate`] found at the same
    /// epoch still holds the same partition (slots are only ever freed by eviction), so a reader
    /// of every partition each second need not check its hints while the epoch stands.
    pub fn slots_epoch(&self) -> SlotsEpoch {
        SlotsEpoch { table: self.instance.0, freed: self.slots_freed }
    }

    /// How many key sketches the table has kept: the same count, no sketch changed.
    pub fn sketches_kept(&self) -> u64 {
        self.sketch_seq
    }

    /// The slot of partition `id`: `hint` when it still holds `id` (no hashing), else looked up.
    /// `None` for a partition the table has not heard of.
    pub fn locate(&self, id: &PartitionId, hint: Option<PartitionSlot>) -> Option<PartitionSlot> {
        let holds =
            |s: PartitionSlot| self.partitions.get(s.0 as usize).and_then(Option::as_ref).is_some_and(|e| e.id == *id);
        match hint {
            Some(s) if holds(s) => Some(s),
            _ => self.partition_index.get(id).map(|&i| PartitionSlot(i)),
        }
    }

    /// [`MetricsTable::sketch_for`] at a slot from [`MetricsTable::locate`], with its version
    /// (the same version is the same sketch).
    pub fn sketch_at(&self, slot: PartitionSlot, range: KeyRange) -> Option<(&KeySketch, u64)> {
        let e = self.entry(slot.0);
        e.sketch.as_deref().filter(|_| e.sketch_range == Some(range)).map(|s| (s, e.sketch_version))
    }

    /// Memory held by the table.
    pub fn memory_usage(&self) -> MemoryUsage {
        let mut entry_heap = 0usize;
        let mut sketch_bytes = 0usize;
        for e in self.partitions.iter().flatten() {
            entry_heap += e.id.as_str().len()
                + e.parents.capacity() * size_of::<Parent>()
                + e.children.capacity() * size_of::<u32>();
            if let Some(s) = &e.sketch {
                sketch_bytes += size_of::<KeySketch>()
                    + s.bucket_ops.capacity() * size_of::<u64>()
                    + s.bucket_bounds.capacity() * size_of::<lb_common::ids::Key>()
                    + s.top_keys.capacity() * size_of::<lb_common::protocol::TopKey>();
            }
        }
        let index_bytes = self.partition_index.capacity() * (size_of::<PartitionId>() + size_of::<u32>() + 8)
            + self.partition_index.keys().map(|k| k.as_str().len()).sum::<usize>();
        let entries = self.partitions.capacity() * size_of::<Option<PartitionEntry>>() + entry_heap + index_bytes;
        let worker_bytes = self.workers.capacity() * size_of::<WorkerEntry>()
            + self.worker_index.capacity() * (size_of::<WorkerId>() + 12)
            + self.wseries.heap_bytes();
        let table_bytes: usize =
            self.tables.iter().map(|t| size_of::<TableEntry>() + t.partitions.capacity() * 4).sum();
        let n = self.live_partitions;
        MemoryUsage {
            partitions: n,
            workers: self.workers.len(),
            history_bytes_per_partition: self.pseries.bytes_per_series(),
            entry_bytes_per_partition: entries.checked_div(n).unwrap_or(0),
            sketch_bytes,
            total_bytes: self.pseries.heap_bytes() + entries + sketch_bytes + worker_bytes + table_bytes,
        }
    }

    /// The quantisation error of every metric with history, at each resolution.
    pub fn error_bounds(&self) -> Vec<ErrorBound> {
        use super::Metric;
        let metrics = [
            Metric::Ops,
            Metric::WriteOps,
            Metric::Bytes,
            Metric::Cpu,
            Metric::Rejected,
            Metric::Errors,
            Metric::LatencyP99,
        ];
        metrics
            .iter()
            .zip(PARTITION_RANGES)
            .map(|(&metric, (unit, max))| ErrorBound {
                metric,
                unit,
                max,
                fine_relative_error: LogU16::new(unit, max).max_relative_error(),
                coarse_relative_error: LogU8::new(unit, max).max_relative_error(),
            })
            .collect()
    }

    /// Total bytes held (see [`Self::memory_usage`]).
    pub fn memory_bytes(&self) -> usize {
        self.memory_usage().total_bytes
    }
}
