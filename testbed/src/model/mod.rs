//! The simulated storage system's state: workers, range partitions of tables, hash-sharded
//! datasets, and the load they carry.
//!
//! - [`Cluster`] owns everything; partitions and per-step load are structure-of-arrays indexed
//!   by a dense partition index (stable until a merge swap-removes one).
//! - [`load`]: one step of demand → served / rejected, latency and CPU, accumulated for reports.
//! - [`mutate`]: the changes admin operations make (split, move, merge, group, reshard) and the
//!   timeline's (worker lost, worker added), each checked first with a 4xx-mapped error.
//! - [`datasets`]: hash-sharded datasets placed with the placement core.
//! - [`report`]: the protocol's [`Report`](lb_common::protocol::Report) with its key sketch.
//! - [`traffic`]: the real-time mode's sampled requests, recorded through lb-reporter, whose
//!   sketches replace the closed-form ones.
//!
//! Invariants: every table's partitions tile the whole 64-bit key space without gaps or overlap
//! (`tables[t].sorted` is in key order); every partition's owner is a worker that is not down.

pub mod datasets;
pub mod load;
pub mod mutate;
pub mod report;
pub mod traffic;

use std::collections::HashMap;

use lb_common::ids::{GroupId, Key, KeyRange, PartitionId, TableId, TenantId, WorkerId, ZoneId};
use lb_common::placement::nodes::NodeTable;
use lb_common::protocol::{ActionKind, Capacity, Health, PartitionInfo, Topology, WorkerInfo};

use crate::scenario::{Scenario, worker_name};
use crate::workload::Component;
pub use datasets::Dataset;
pub use load::LoadState;

/// Workers, structure-of-arrays.
#[derive(Debug, Clone, Default)]
pub struct Workers {
    pub ids: Vec<WorkerId>,
    pub capacity: Vec<Capacity>,
    pub group: Vec<Option<GroupId>>,
    pub health: Vec<Health>,
    pub zone: Vec<Option<ZoneId>>,
    index: HashMap<WorkerId, usize>,
}

impl Workers {
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    pub fn find(&self, id: &WorkerId) -> Option<usize> {
        self.index.get(id).copied()
    }

    pub fn push(&mut self, id: WorkerId, capacity: Capacity, group: Option<GroupId>, zone: Option<ZoneId>) -> usize {
        let i = self.ids.len();
        self.index.insert(id.clone(), i);
        self.ids.push(id);
        self.capacity.push(capacity);
        self.group.push(group);
        self.health.push(Health::Healthy);
        self.zone.push(zone);
        i
    }

    pub fn is_up(&self, w: usize) -> bool {
        self.health[w] != Health::Down
    }
}

/// Partitions, structure-of-arrays.
#[derive(Debug, Clone, Default)]
pub struct Partitions {
    pub ids: Vec<PartitionId>,
    pub table: Vec<u32>,
    pub start: Vec<u64>,
    pub end: Vec<u64>,
    pub owner: Vec<u32>,
    pub group: Vec<Option<GroupId>>,
    pub stored_bytes: Vec<f64>,
    index: HashMap<PartitionId, usize>,
}

impl Partitions {
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    pub fn find(&self, id: &PartitionId) -> Option<usize> {
        self.index.get(id).copied()
    }

    pub fn range(&self, p: usize) -> KeyRange {
        KeyRange { start: Key(self.start[p]), end: Key(self.end[p]) }
    }

    fn push(&mut self, id: PartitionId, table: u32, start: u64, end: u64, owner: u32, stored_bytes: f64) -> usize {
        let i = self.ids.len();
        self.index.insert(id.clone(), i);
        self.ids.push(id);
        self.table.push(table);
        self.start.push(start);
        self.end.push(end);
        self.owner.push(owner);
        self.group.push(None);
        self.stored_bytes.push(stored_bytes);
        i
    }

    /// Removes partition `p`; the last partition takes index `p`.
    fn swap_remove(&mut self, p: usize) {
        self.index.remove(&self.ids[p]);
        self.ids.swap_remove(p);
        self.table.swap_remove(p);
        self.start.swap_remove(p);
        self.end.swap_remove(p);
        self.owner.swap_remove(p);
        self.group.swap_remove(p);
        self.stored_bytes.swap_remove(p);
        if p < self.ids.len() {
            self.index.insert(self.ids[p].clone(), p);
        }
    }
}

/// A range-partitioned table.
#[derive(Debug, Clone)]
pub struct Table {
    pub tenant: TenantId,
    pub table: TableId,
    /// Indices into [`Cluster::components`].
    pub components: Vec<usize>,
    /// Partition indices in key order.
    pub sorted: Vec<u32>,
    /// Multiplies every component while a surge lasts.
    pub surge_multiplier: f64,
    /// Next number for a partition id of this table (`tenant.table.pNNNNNN`).
    next_seq: u64,
}

/// The whole simulated storage system.
#[derive(Debug, Clone)]
pub struct Cluster {
    pub workers: Workers,
    pub partitions: Partitions,
    pub tables: Vec<Table>,
    pub components: Vec<Component>,
    pub datasets: Vec<Dataset>,
    /// Shard → worker table for hash-sharded datasets (worker names are node names).
    pub nodes: NodeTable,
    pub tokens_per_worker: u32,
    pub partition_limit: Capacity,
    /// Increases on every layout change.
    pub version: u64,
    pub load: LoadState,
}

impl Cluster {
    /// Builds the initial layout: equal-width partitions per table, placed round robin.
    pub fn from_scenario(scenario: &Scenario) -> Self {
        let spec = &scenario.cluster;
        let capacity = Capacity { ops_per_sec: spec.worker_ops_per_sec, bytes_per_sec: spec.worker_bytes_per_sec };
        let mut workers = Workers::default();
        let mut group_of = vec![None; spec.workers as usize];
        let mut next = spec.workers as usize;
        for g in &spec.groups {
            for _ in 0..g.workers {
                next -= 1;
                group_of[next] = Some(g.group.clone());
            }
        }
        let zone_of = spec.zones.iter().flat_map(|z| std::iter::repeat_n(Some(z.zone.clone()), z.workers as usize));
        let zone_of = zone_of.chain(std::iter::repeat(None));
        for ((i, group), zone) in group_of.into_iter().enumerate().zip(zone_of) {
            workers.push(worker_name(i as u32), capacity, group, zone);
        }
        let ungrouped: Vec<u32> = (0..workers.len() as u32).filter(|&w| workers.group[w as usize].is_none()).collect();
        let placeable = if ungrouped.is_empty() { (0..workers.len() as u32).collect() } else { ungrouped };

        let mut partitions = Partitions::default();
        let mut tables = Vec::new();
        let mut components = Vec::new();
        let mut round_robin = 0usize;
        for (t, table) in scenario.tables.iter().enumerate() {
            let n = u64::from(table.partitions);
            let width = u64::MAX / n;
            let mut sorted = Vec::with_capacity(n as usize);
            for i in 0..n {
                let start = i * width;
                let end = if i + 1 == n { u64::MAX } else { start + width - 1 };
                let id = partition_id(&table.tenant, &table.table, i);
                let owner = placeable[round_robin % placeable.len()];
                round_robin += 1;
                let p = partitions.push(id, t as u32, start, end, owner, table.stored_bytes_per_partition as f64);
                sorted.push(p as u32);
            }
            let mut table_components = Vec::new();
            for (j, w) in table.workloads.iter().enumerate() {
                let seed = scenario.seed ^ ((t as u64) << 32) ^ j as u64;
                table_components.push(components.len());
                components.push(Component::from_spec(t, w, seed));
            }
            tables.push(Table {
                tenant: table.tenant.clone(),
                table: table.table.clone(),
                components: table_components,
                sorted,
                surge_multiplier: 1.0,
                next_seq: n,
            });
        }
        let mut nodes = NodeTable::new();
        for id in &workers.ids {
            nodes
                .set_tokens(id.as_str(), spec.tokens_per_worker)
                .expect("validated token counts stay under MAX_SHARDS");
        }
        let datasets = scenario.datasets.iter().map(Dataset::from_spec).collect();
        let load = LoadState::new(partitions.len(), workers.len());
        let mut cluster = Self {
            workers,
            partitions,
            tables,
            components,
            datasets,
            nodes,
            tokens_per_worker: spec.tokens_per_worker,
            partition_limit: Capacity {
                ops_per_sec: spec.partition_limit_ops_per_sec,
                bytes_per_sec: spec.partition_limit_bytes_per_sec,
            },
            version: 1,
            load,
        };
        cluster.place_datasets();
        cluster
    }

    pub fn find_table(&self, tenant: &TenantId, table: &TableId) -> Option<usize> {
        self.tables.iter().position(|t| &t.tenant == tenant && &t.table == table)
    }

    /// The partition of table `t` whose range holds `key` (tables tile the key space).
    pub fn partition_at(&self, t: usize, key: u64) -> usize {
        let sorted = &self.tables[t].sorted;
        let i = sorted.partition_point(|&p| self.partitions.start[p as usize] <= key);
        sorted[i.saturating_sub(1)] as usize
    }

    /// Puts partition `q`, just cut from the right end of `p`, right after `p` in table `t`'s
    /// order and marks cached masses stale: a split keeps the order, so it needs no re-sort (one
    /// of a million-partition table's was most of a simulated split).
    fn insert_after(&mut self, t: usize, p: usize, q: usize) {
        let starts = &self.partitions.start;
        let sorted = &mut self.tables[t].sorted;
        let at = sorted.partition_point(|&x| starts[x as usize] <= starts[p]);
        sorted.insert(at, q as u32);
        debug_assert!(
            sorted.windows(2).all(|w| starts[w[0] as usize] < starts[w[1] as usize]),
            "table {t} out of order"
        );
        self.load.mark_dirty();
    }

    /// Re-sorts table `t`'s partitions after a merge and marks cached masses stale.
    fn resort(&mut self, t: usize) {
        let starts = &self.partitions.start;
        let mut sorted: Vec<u32> =
            (0..self.partitions.len() as u32).filter(|&p| self.partitions.table[p as usize] as usize == t).collect();
        sorted.sort_by_key(|&p| starts[p as usize]);
        self.tables[t].sorted = sorted;
        self.load.mark_dirty();
    }

    /// The storage admin protocol's view of the layout.
    pub fn topology(&self) -> Topology {
        let w = &self.workers;
        let workers = (0..w.len())
            .map(|i| WorkerInfo {
                id: w.ids[i].clone(),
                capacity: w.capacity[i],
                cpu_cores: 0.0,
                group: w.group[i].clone(),
                health: w.health[i],
                zone: w.zone[i].clone(),
                rack: None,
            })
            .collect();
        let p = &self.partitions;
        let partitions = self
            .tables
            .iter()
            .flat_map(|t| t.sorted.iter())
            .map(|&i| {
                let i = i as usize;
                let table = &self.tables[p.table[i] as usize];
                PartitionInfo {
                    id: p.ids[i].clone(),
                    tenant: table.tenant.clone(),
                    table: table.table.clone(),
                    range: p.range(i),
                    owner: w.ids[p.owner[i] as usize].clone(),
                    group: p.group[i].clone(),
                    stored_bytes: p.stored_bytes[i] as u64,
                    limit: Some(self.partition_limit),
                    supported_actions: vec![ActionKind::Split, ActionKind::Move, ActionKind::Merge, ActionKind::Group],
                }
            })
            .collect();
        let datasets = self.datasets.iter().map(|d| d.info(&self.nodes, &self.workers)).collect();
        // A group must name a group of the scenario: the testbed does not form new ones.
        Topology {
            version: self.version,
            workers,
            partitions,
            datasets,
            new_group_dedicates_owner: false,
            multi_way_split: true,
            move_rate_limit: true,
            merge_to_worker: true,
        }
    }
}

/// `tenant.table.pNNNNNN`: unique across tables, sortable within one.
fn partition_id(tenant: &TenantId, table: &TableId, seq: u64) -> PartitionId {
    PartitionId::new(format!("{tenant}.{table}.p{seq:06}")).expect("tenant and table are valid ids")
}
