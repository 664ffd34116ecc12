//! Storage admin protocol: what the ops server asks of the storage system. The testbed serves
//! it; a real system implements or adapts it.
//!
//! - `GET /v1/topology` → [`Topology`]
//! - `POST /v1/admin/{split,move,merge,group,reshard}` with an [`AdminRequest`] → [`OperationAccepted`]
//! - `GET /v1/admin/operations/{id}` → [`Operation`]
//!
//! Admin requests carry the action id, so a retried request returns the same operation instead
//! of running the change twice.

use serde::{Deserialize, Serialize};

use crate::ids::{
    ActionId, DatasetId, GroupId, KeyRange, OperationId, PartitionId, RackId, TableId, TenantId, WorkerId, ZoneId,
};
use crate::protocol::actions::{ActionKind, ActionSpec, LoadBalancing};

/// The storage system's layout as it is now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Topology {
    /// Increases on every change; lets a reader tell a stale copy.
    pub version: u64,
    pub workers: Vec<WorkerInfo>,
    pub partitions: Vec<PartitionInfo>,
    #[serde(default)]
    pub datasets: Vec<DatasetInfo>,
    /// What a `group` of one partition does when it names a group no worker is in yet: `true`,
    /// the storage system dedicates the partition's current worker to it (every other partition
    /// of that worker moves to the other healthy ungrouped workers, and the worker and the
    /// partition then show the group), as the Valkey adapter does; `false` (the default), it is
    /// refused and a group must name workers the topology already shows in it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub new_group_dedicates_owner: bool,
    /// The storage system runs `split_into`: many pieces in one action, each new piece created on
    /// the worker the action names (the testbed does; Valkey slots do not split at all).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub multi_way_split: bool,
    /// The storage system throttles a move's stream to the `max_bytes_per_sec` the action names
    /// (the testbed does; Valkey's atomic slot migration has no rate).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub move_rate_limit: bool,
    /// The storage system lands a merge on the `to_worker` it names, an owner of one of the two
    /// sides (the testbed does); `false` (the default), a merge stays on its left side's owner
    /// and a `to_worker` is refused.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub merge_to_worker: bool,
}

impl Topology {
    /// Whether `spec` can run on this layout, checked the way the storage system would refuse
    /// it later: the partitions exist and support the kind, a split key lies strictly inside
    /// the range (`[start, key - 1]` and `[key, end]`), a move goes to another worker that is
    /// not down, a merge joins adjacent partitions of one table, a reshard names a dataset here.
    /// Errors name the field under `spec`.
    pub fn check_action(&self, spec: &ActionSpec) -> Result<(), crate::validate::ValidationError> {
        let mut v = crate::validate::Validator::new();
        let mut s = v.at("spec");
        let partition = |id: &PartitionId| self.partitions.iter().find(|p| &p.id == id);
        let kind = spec.kind();
        let known = |s: &mut crate::validate::Scope<'_>, field: &str, id: &PartitionId| {
            let p = partition(id);
            s.check(p.is_some(), field, id, "is not a partition of the current topology");
            if let Some(p) = p {
                s.check(p.supported_actions.contains(&kind), field, id, "does not support this kind of action");
            }
            p
        };
        match spec {
            ActionSpec::Split { partition, split_key } => {
                if let Some(p) = known(&mut s, "partition", partition) {
                    s.check(
                        p.range.split_at(*split_key).is_some(),
                        "split_key",
                        split_key,
                        &format!("must lie strictly inside the range [{}, {}]", p.range.start, p.range.end),
                    );
                }
            }
            ActionSpec::SplitInto { partition, split_keys, to_workers, group, first_to_worker } => {
                s.check(
                    self.multi_way_split,
                    "kind",
                    "split_into",
                    "is not supported by this storage system (its topology does not say multi_way_split)",
                );
                if let Some(p) = known(&mut s, "partition", partition) {
                    for (i, k) in split_keys.iter().enumerate() {
                        s.check(
                            p.range.split_at(*k).is_some(),
                            &format!("split_keys[{i}]"),
                            k,
                            &format!("must lie strictly inside the range [{}, {}]", p.range.start, p.range.end),
                        );
                    }
                }
                for (i, to) in to_workers.iter().enumerate() {
                    let w = self.workers.iter().find(|w| &w.id == to);
                    let field = format!("to_workers[{i}]");
                    s.check(w.is_some(), &field, to, "is not a worker of the current topology");
                    s.check(w.is_none_or(|w| w.health != Health::Down), &field, to, "is down");
                }
                if let Some(to) = first_to_worker {
                    let w = self.workers.iter().find(|w| &w.id == to);
                    s.check(w.is_some(), "first_to_worker", to, "is not a worker of the current topology");
                    s.check(w.is_none_or(|w| w.health != Health::Down), "first_to_worker", to, "is down");
                }
                if let Some(g) = group {
                    let members =
                        |to: &WorkerId| self.workers.iter().any(|w| &w.id == to && w.group.as_ref() == Some(g));
                    s.check(
                        to_workers.iter().chain(first_to_worker).any(members),
                        "group",
                        g,
                        "must be the group of a worker a new piece goes to",
                    );
                }
            }
            ActionSpec::Move { partition, to_worker, max_bytes_per_sec } => {
                let p = known(&mut s, "partition", partition);
                if let Some(r) = max_bytes_per_sec {
                    s.check(
                        self.move_rate_limit,
                        "max_bytes_per_sec",
                        r,
                        "is not supported by this storage system (its topology does not say move_rate_limit)",
                    );
                    s.check(*r > 0, "max_bytes_per_sec", r, "must be positive");
                }
                let w = self.workers.iter().find(|w| &w.id == to_worker);
                s.check(w.is_some(), "to_worker", to_worker, "is not a worker of the current topology");
                s.check(w.is_none_or(|w| w.health != Health::Down), "to_worker", to_worker, "is down");
                s.check(p.is_none_or(|p| &p.owner != to_worker), "to_worker", to_worker, "already owns the partition");
            }
            ActionSpec::Merge { left, right, to_worker } => {
                let (l, r) = (known(&mut s, "left", left), known(&mut s, "right", right));
                if let Some(to) = to_worker {
                    s.check(
                        self.merge_to_worker,
                        "to_worker",
                        to,
                        "is not supported by this storage system (its topology does not say merge_to_worker)",
                    );
                }
                if let (Some(to), Some(l), Some(r)) = (to_worker, l, r) {
                    s.check(
                        &l.owner == to || &r.owner == to,
                        "to_worker",
                        to,
                        &format!("must own left or right (they are on {} and {})", l.owner, r.owner),
                    );
                    let w = self.workers.iter().find(|w| &w.id == to);
                    s.check(w.is_none_or(|w| w.health != Health::Down), "to_worker", to, "is down");
                }
                if let (Some(l), Some(r)) = (l, r) {
                    s.check(
                        (&l.tenant, &l.table) == (&r.tenant, &r.table),
                        "right",
                        right,
                        "must be in the same table as left",
                    );
                    s.check(
                        l.range.end.0.checked_add(1) == Some(r.range.start.0),
                        "right",
                        right,
                        "must start right after left ends",
                    );
                }
            }
            ActionSpec::Group { target: crate::protocol::actions::GroupTarget::Partition { partition }, .. } => {
                known(&mut s, "target.partition", partition);
            }
            ActionSpec::Group { .. } => {}
            ActionSpec::Reshard { tenant, dataset, .. } => {
                s.check(
                    self.datasets.iter().any(|d| &d.tenant == tenant && &d.dataset == dataset),
                    "dataset",
                    format!("{tenant}/{dataset}"),
                    "is not a hash-sharded dataset of the current topology",
                );
            }
        }
        drop(s);
        v.finish()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerInfo {
    pub id: WorkerId,
    /// What the worker serves before it rejects; a dimension of 0 is not planned on (unknown).
    pub capacity: Capacity,
    /// Cores of execution the worker has, when CPU is a capacity dimension: its load is then
    /// its agent's host CPU (`cpu_ratio × cpu_cores`) and each partition's `cpu_time_us`, and
    /// the tightest of ops, bytes and CPU decides. A Valkey primary has 1 (its main thread);
    /// 0 (the default, and what older ops servers send) leaves CPU out.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cpu_cores: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<GroupId>,
    pub health: Health,
    /// The availability zone the worker sits in. lb keeps a partition in its owner's zone
    /// unless a policy allows crossing; a topology without zones (the default, and what older
    /// storage systems send) is one zone, as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<ZoneId>,
    /// The rack inside the zone, for display and reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rack: Option<RackId>,
}

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

/// What a worker (or a single partition) can serve before it rejects requests.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Capacity {
    pub ops_per_sec: f64,
    pub bytes_per_sec: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Health {
    Healthy,
    /// Serving, but should not receive new partitions.
    Degraded,
    Down,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PartitionInfo {
    pub id: PartitionId,
    pub tenant: TenantId,
    pub table: TableId,
    pub range: KeyRange,
    pub owner: WorkerId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<GroupId>,
    pub stored_bytes: u64,
    /// The single-partition limit, when the storage system has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<Capacity>,
    /// Which actions the storage system supports on this partition (Valkey slots cannot split).
    pub supported_actions: Vec<ActionKind>,
}

/// A hash-sharded dataset and where its shards live.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DatasetInfo {
    pub tenant: TenantId,
    pub dataset: DatasetId,
    pub tenant_shards: u32,
    pub dataset_shards: u32,
    pub load_balancing: LoadBalancing,
    /// Shard ids start at 1; `shards[i]` is the owner of shard `i + 1`.
    pub shard_owners: Vec<WorkerId>,
    /// The zones the dataset lives in (writers of another zone fall back to these); empty, the
    /// default: every zone, each router placing in its own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<ZoneId>,
}

/// `POST /v1/admin/{kind}` body: the action's spec and its id for idempotency.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminRequest {
    pub action_id: ActionId,
    pub spec: ActionSpec,
}

/// Reply of `POST /v1/admin/{kind}` (202).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperationAccepted {
    pub operation_id: OperationId,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OperationState {
    Pending,
    Running,
    Succeeded,
    Failed,
}

/// Reply of `GET /v1/admin/operations/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Operation {
    pub id: OperationId,
    pub action_id: ActionId,
    pub kind: ActionKind,
    pub state: OperationState,
    pub started_at_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at_ms: Option<i64>,
    /// 0..=1, for long moves.
    pub progress_ratio: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::Key;
    use crate::protocol::actions::GroupTarget;

    fn topology() -> Topology {
        let worker = |id: &str, health| WorkerInfo {
            id: id.parse().expect("id"),
            capacity: Capacity { ops_per_sec: 1.0, bytes_per_sec: 1.0 },
            cpu_cores: 0.0,
            group: None,
            health,
            zone: None,
            rack: None,
        };
        let partition = |id: &str, table: &str, start: u64, kinds: &[ActionKind]| PartitionInfo {
            id: id.parse().expect("id"),
            tenant: "t".parse().expect("id"),
            table: table.parse().expect("id"),
            range: KeyRange { start: Key(start), end: Key(start + 99) },
            owner: "w-1".parse().expect("id"),
            group: None,
            stored_bytes: 0,
            limit: None,
            supported_actions: kinds.to_vec(),
        };
        Topology {
            version: 1,
            workers: vec![worker("w-1", Health::Healthy), worker("w-2", Health::Healthy), worker("w-3", Health::Down)],
            partitions: vec![
                partition("a", "x", 0, &ActionKind::ALL),
                partition("b", "x", 100, &ActionKind::ALL),
                partition("c", "y", 200, &ActionKind::ALL),
                partition("slot", "x", 300, &[ActionKind::Move]),
            ],
            datasets: vec![],
            new_group_dedicates_owner: false,
            multi_way_split: false,
            move_rate_limit: false,
            merge_to_worker: false,
        }
    }

    #[test]
    fn actions_that_do_not_fit_the_layout_are_refused_naming_the_field() {
        let t = topology();
        fn id<T: std::str::FromStr>(s: &str) -> T
        where
            T::Err: std::fmt::Debug,
        {
            s.parse().expect("id")
        }
        let ok = [
            ActionSpec::Split { partition: id("a"), split_key: Key(50) },
            ActionSpec::Split { partition: id("a"), split_key: Key(99) },
            ActionSpec::Move { partition: id("a"), to_worker: id("w-2"), max_bytes_per_sec: None },
            ActionSpec::Merge { left: id("a"), right: id("b"), to_worker: None },
            ActionSpec::Group { target: GroupTarget::Partition { partition: id("a") }, group: id("g") },
        ];
        for spec in ok {
            assert!(t.check_action(&spec).is_ok(), "{spec:?}");
        }
        let refused = [
            (ActionSpec::Split { partition: id("a"), split_key: Key(0) }, "spec.split_key"),
            (ActionSpec::Split { partition: id("a"), split_key: Key(100) }, "spec.split_key"),
            (ActionSpec::Split { partition: id("slot"), split_key: Key(350) }, "does not support"),
            (ActionSpec::Split { partition: id("zz"), split_key: Key(1) }, "spec.partition"),
            (ActionSpec::Move { partition: id("a"), to_worker: id("w-1"), max_bytes_per_sec: None }, "already owns"),
            (ActionSpec::Move { partition: id("a"), to_worker: id("w-3"), max_bytes_per_sec: None }, "is down"),
            (ActionSpec::Move { partition: id("a"), to_worker: id("w-9"), max_bytes_per_sec: None }, "spec.to_worker"),
            (ActionSpec::Merge { left: id("a"), right: id("c"), to_worker: None }, "spec.right"),
            (ActionSpec::Merge { left: id("b"), right: id("a"), to_worker: None }, "right after left"),
            (
                ActionSpec::Group { target: GroupTarget::Partition { partition: id("q") }, group: id("g") },
                "spec.target.partition",
            ),
        ];
        for (spec, why) in refused {
            let err = t.check_action(&spec).expect_err("refused").to_string();
            assert!(err.contains(why), "{spec:?}: {err}");
        }
    }

    #[test]
    fn a_split_into_joins_a_group_only_of_a_worker_a_piece_goes_to() {
        let mut t = Topology { multi_way_split: true, ..topology() };
        t.workers[1].group = Some("iso".parse().expect("id"));
        let cut = |group: &str| ActionSpec::SplitInto {
            partition: "a".parse().expect("id"),
            split_keys: vec![Key(42), Key(43)],
            to_workers: vec!["w-2".parse().expect("id"), "w-1".parse().expect("id")],
            group: Some(group.parse().expect("id")),
            first_to_worker: None,
        };
        assert!(t.check_action(&cut("iso")).is_ok());
        let err = t.check_action(&cut("other")).expect_err("no piece goes to it").to_string();
        assert!(
            err.contains("spec.group") && err.contains("must be the group of a worker a new piece goes to"),
            "{err}"
        );
    }

    #[test]
    fn a_merge_lands_only_on_a_live_owner_of_one_of_its_sides() {
        let mut t = Topology { merge_to_worker: true, ..topology() };
        t.partitions[1].owner = "w-2".parse().expect("id");
        let merge = |to: &str| ActionSpec::Merge {
            left: "a".parse().expect("id"),
            right: "b".parse().expect("id"),
            to_worker: Some(to.parse().expect("id")),
        };
        assert!(t.check_action(&merge("w-1")).is_ok());
        assert!(t.check_action(&merge("w-2")).is_ok());
        let err = t.check_action(&merge("w-3")).expect_err("owns neither").to_string();
        assert!(
            err.contains("spec.to_worker") && err.contains("must own left or right (they are on w-1 and w-2)"),
            "{err}"
        );
        t.partitions[1].owner = "w-3".parse().expect("id");
        let err = t.check_action(&merge("w-3")).expect_err("down").to_string();
        assert!(err.contains("spec.to_worker") && err.contains("is down"), "{err}");
        t.merge_to_worker = false;
        let err = t.check_action(&merge("w-1")).expect_err("not supported").to_string();
        assert!(err.contains("spec.to_worker") && err.contains("merge_to_worker"), "{err}");
    }

    #[test]
    fn a_move_names_a_rate_only_where_the_storage_honours_one() {
        let throttled = |r: u64| ActionSpec::Move {
            partition: "a".parse().expect("id"),
            to_worker: "w-2".parse().expect("id"),
            max_bytes_per_sec: Some(r),
        };
        let err = topology().check_action(&throttled(1 << 20)).expect_err("no rate limit").to_string();
        assert!(err.contains("spec.max_bytes_per_sec") && err.contains("move_rate_limit"), "{err}");
        let t = Topology { move_rate_limit: true, ..topology() };
        assert!(t.check_action(&throttled(1 << 20)).is_ok());
        let err = t.check_action(&throttled(0)).expect_err("zero").to_string();
        assert!(err.contains("spec.max_bytes_per_sec") && err.contains("must be positive"), "{err}");
    }
}
