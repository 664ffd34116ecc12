//! What the planner reads: the layout plus the last window's load, and the actions in flight.
//! The master builds it from its MetricsTable; tests build it from the testbed. Nothing here
//! depends on either.

use lb_common::ids::{GroupId, KeyRange, PartitionId, TableId, TenantId, WorkerId, ZoneId};
use lb_common::protocol::{ActionKind, ActionSpec, Capacity, Health, KeySketch};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PlannerInput {
    pub partitions: Vec<PartitionView>,
    pub workers: Vec<WorkerView>,
    /// Submitted and not finished: planned around as if already done.
    pub in_flight: Vec<InFlightAction>,
    /// The storage system dedicates a partition's worker to a group it forms
    /// ([`lb_common::protocol::Topology::new_group_dedicates_owner`]): isolation then needs no
    /// dedicated group in the topology.
    #[serde(default)]
    pub new_group_dedicates_owner: bool,
    /// The storage system runs `split_into` ([`lb_common::protocol::Topology::multi_way_split`]):
    /// a hot partition is cut into all the pieces it needs, spread over workers, in one action.
    #[serde(default)]
    pub multi_way_split: bool,
    /// The storage system throttles a move to the rate it names
    /// ([`lb_common::protocol::Topology::move_rate_limit`]): a move from a worker that still
    /// serves all it is asked streams only as fast as its spare capacity pays for.
    #[serde(default)]
    pub move_rate_limit: bool,
    /// The storage system lands a merge on the owner it names
    /// ([`lb_common::protocol::Topology::merge_to_worker`]): an offline merge lands where the
    /// pair ends cooler, or where the smaller side streams when that is a wash
    /// ([`super::OutsideCheck::merge_landing`]); else it stays on the left side's owner.
    #[serde(default)]
    pub merge_to_worker: bool,
    /// Which layout this is: inputs with the same `Some` id have the same partitions and workers
    /// in the same order, with the same owners and groups (only their load and the actions in
    /// flight differ). The planner then keeps what it derives per position (each partition's
    /// owner, its hysteresis) from one pass to the next instead of looking ids up again; `None`
    /// makes it look them up every pass. Ids come from [`new_layout_id`] and never leave the
    /// process.
    #[serde(skip)]
    pub layout: Option<u64>,
}

/// Partitions' positions by id in one layout ([`PlannerInput::layout`]): (a hash of the id,
/// the position), sorted. A lookup is a binary search confirmed on the id itself, where a pass
/// would otherwise hash every partition's id (a million of them in the simulator's largest
/// runs) to find the few it acts on.
#[derive(Clone, Default)]
pub struct IdIndex(Vec<(u64, u32)>);

/// A summary: the entries are a million lines at the largest scale.
impl std::fmt::Debug for IdIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdIndex").field("partitions", &self.0.len()).finish_non_exhaustive()
    }
}

impl IdIndex {
    pub fn of(partitions: &[PartitionView]) -> Self {
        let mut v: Vec<(u64, u32)> = partitions.iter().enumerate().map(|(i, p)| (id_hash(&p.id), i as u32)).collect();
        v.sort_unstable();
        Self(v)
    }

    /// Positions of the partition named `id` in `partitions` (those this was built over),
    /// ascending.
    pub fn positions<'a>(
        &'a self,
        id: &'a PartitionId,
        partitions: &'a [PartitionView],
    ) -> impl Iterator<Item = usize> + 'a {
        let h = id_hash(id);
        let from = self.0.partition_point(|&(x, _)| x < h);
        let mut found: Vec<usize> = self.0[from..]
            .iter()
            .take_while(move |&&(x, _)| x == h)
            .map(|&(_, i)| i as usize)
            .filter(move |&i| partitions.get(i).is_some_and(|p| &p.id == id))
            .collect();
        found.sort_unstable();
        found.into_iter()
    }

    /// The last position of `id` (a map collected from the partitions in order keeps that one).
    pub fn last(&self, id: &PartitionId, partitions: &[PartitionView]) -> Option<usize> {
        self.positions(id, partitions).last()
    }
}

fn id_hash(id: &PartitionId) -> u64 {
    xxhash_rust::xxh3::xxh3_64(id.as_str().as_bytes())
}

/// A layout id no other input of this process has had ([`PlannerInput::layout`]).
pub fn new_layout_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartitionView {
    pub id: PartitionId,
    pub tenant: TenantId,
    pub table: TableId,
    pub range: KeyRange,
    pub owner: WorkerId,
    pub group: Option<GroupId>,
    pub stored_bytes: u64,
    pub limit: Option<Capacity>,
    pub supported_actions: Vec<ActionKind>,
    pub stats: PartitionWindow,
}

/// One partition's load over the last window, per second.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PartitionWindow {
    /// Served ops.
    pub ops_per_sec: f64,
    pub bytes_per_sec: f64,
    /// CPU spent serving it, in cores (CPU seconds per second).
    pub cpu_cores: f64,
    /// Refused ops (over the partition limit or the worker's capacity): demand = ops + rejected.
    pub rejected_per_sec: f64,
    pub sketch: Option<KeySketch>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerView {
    pub id: WorkerId,
    pub capacity: Capacity,
    /// Cores of the host; 0 when unknown (CPU is then not a load dimension).
    pub cpu_cores: f64,
    pub group: Option<GroupId>,
    pub health: Health,
    pub load: WorkerWindow,
    /// Its availability zone; `None` (a topology without zones) is one zone with every other
    /// worker without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<ZoneId>,
}

/// A worker's own totals over the last window; load beyond its partitions' sum (hash-sharded
/// datasets, compaction) is kept as immovable background.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerWindow {
    pub ops_per_sec: f64,
    pub bytes_per_sec: f64,
    pub cpu_ratio: f64,
    /// CPU (cores) the worker's own reports attributed to partitions over the same window, when
    /// known: its CPU background is then `cpu_ratio × cores` less this, both from the same
    /// reports. Without it the background is `cpu_ratio × cores` less the current partitions'
    /// CPU, which for a window after a move still holds the moved partition on its source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attributed_cpu_cores: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InFlightAction {
    pub spec: ActionSpec,
    pub started_at_ms: i64,
}
