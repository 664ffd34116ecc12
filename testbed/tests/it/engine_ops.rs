//! Every admin operation, every invalid one, faults and timeline events, in virtual time.

use lb_common::ids::{ActionId, GroupId, Key, WorkerId};
use lb_common::protocol::{ActionSpec, GroupTarget, Health, LoadBalancing, OperationState};
use lb_testbed::Engine;
use lb_testbed::model::mutate::LayoutError;
use lb_testbed::ops::{AdminError, FaultRule};
use lb_testbed::scenario::FaultKind;

use crate::support::{pid, scenario, step_secs};

const UNIFORM: &str = r#"
[[tables.workloads]]
kind = "uniform"
ops_per_sec = 8000
[[datasets]]
tenant = "acme"
dataset = "ingest"
tenant_shards = 8
dataset_shards = 2
load_balancing = "fingerprint"
ops_per_sec = 1000
"#;

fn engine() -> Engine {
    Engine::new(&scenario(4, 4, UNIFORM))
}

fn w(s: &str) -> WorkerId {
    s.parse().expect("worker id")
}

fn state(engine: &Engine, op: &lb_common::ids::OperationId) -> OperationState {
    engine.operation(op).expect("operation exists").state
}

/// A merge across two workers lands where it names: the other side streams there, costing
/// its own worker, and a worker owning neither side is refused.
#[test]
fn a_merge_lands_on_the_owner_it_names_and_streams_the_other_side() {
    let mut e = engine();
    let (p0, p1) = (pid("acme.orders.p000000"), pid("acme.orders.p000001"));
    let owner = |e: &Engine, id| e.topology().partitions.iter().find(|p| &p.id == id).map(|p| p.owner.clone());
    let lo = owner(&e, &p0).expect("p0");
    if owner(&e, &p1) == Some(lo.clone()) {
        let away = if lo == w("w-0000") { w("w-0001") } else { w("w-0000") };
        e.apply(ActionSpec::Move { partition: p1.clone(), to_worker: away, max_bytes_per_sec: None }).expect("move");
        step_secs(&mut e, 2);
    }
    let ro = owner(&e, &p1).expect("p1");
    assert_ne!(lo, ro);
    let third = ["w-0000", "w-0001", "w-0002"].into_iter().map(w).find(|x| x != &lo && x != &ro).expect("a third");
    let elsewhere = ActionSpec::Merge { left: p0.clone(), right: p1.clone(), to_worker: Some(third) };
    let err = e.apply(elsewhere).expect_err("owns neither side");
    assert!(matches!(err, AdminError::Layout(LayoutError::MergeElsewhere { .. })), "{err:?}");

    let merge =
        e.apply(ActionSpec::Merge { left: p0.clone(), right: p1.clone(), to_worker: Some(ro.clone()) }).expect("merge");
    step_secs(&mut e, 1);
    // The left side (10 MiB) streams from its owner to the right's: a move's time and cost.
    assert_eq!(state(&e, &merge), OperationState::Running);
    let (l, r) = (e.cluster.worker_index(&lo).expect("lo"), e.cluster.worker_index(&ro).expect("ro"));
    assert!(e.cluster.load.worker_capacity_factor[l] < 1.0, "the streaming side's worker pays");
    assert_eq!(e.cluster.load.worker_capacity_factor[r], 1.0, "the destination does not");
    step_secs(&mut e, 1);
    assert_eq!(state(&e, &merge), OperationState::Succeeded);
    assert_eq!(owner(&e, &p0), Some(ro), "the merged partition keeps the left's id, on the worker named");
    assert_eq!(owner(&e, &p1), None);
}

#[test]
fn split_move_merge_group_and_reshard_change_the_layout_when_they_finish() {
    let mut e = engine();
    let p0 = pid("acme.orders.p000000");
    let p1 = pid("acme.orders.p000001");
    let v0 = e.topology().version;

    let split = e.apply(ActionSpec::Split { partition: p0.clone(), split_key: Key(1 << 60) }).expect("split");
    assert_eq!(state(&e, &split), OperationState::Running);
    assert_eq!(e.topology().partitions.len(), 4, "nothing changes before the operation finishes");
    step_secs(&mut e, 2);
    assert_eq!(state(&e, &split), OperationState::Succeeded);
    let topo = e.topology();
    assert_eq!(topo.partitions.len(), 5);
    assert!(topo.version > v0);
    assert!(topo.partitions[0].range.is_left_neighbour_of(&topo.partitions[1].range));
    assert_eq!(topo.partitions[1].range.start, Key(1 << 60));
    let new = topo.partitions[1].id.clone();

    let merge = e.apply(ActionSpec::Merge { left: p0.clone(), right: new.clone(), to_worker: None }).expect("merge");
    step_secs(&mut e, 2);
    assert_eq!(state(&e, &merge), OperationState::Succeeded);
    assert_eq!(e.topology().partitions.len(), 4);
    assert_eq!(e.topology().partitions[0].range.end.0, e.topology().partitions[1].range.start.0 - 1);

    let owner = e.topology().partitions[1].owner.clone();
    let to = if owner == w("w-0000") { w("w-0001") } else { w("w-0000") };
    let mv = e
        .apply(ActionSpec::Move { partition: p1.clone(), to_worker: to.clone(), max_bytes_per_sec: None })
        .expect("move");
    step_secs(&mut e, 1);
    // 10 MiB at 100 MiB/s plus a 1 s handover: still running after 1 s, and draining the source.
    assert_eq!(state(&e, &mv), OperationState::Running);
    let src = e.cluster.worker_index(&owner).expect("owner");
    assert!(e.cluster.load.worker_capacity_factor[src] < 1.0, "a running move costs its source capacity");
    step_secs(&mut e, 1);
    assert_eq!(state(&e, &mv), OperationState::Succeeded);
    assert_eq!(e.cluster.load.worker_capacity_factor[src], 1.0);
    assert_eq!(e.topology().partitions.iter().find(|p| p.id == p1).map(|p| p.owner.clone()), Some(to));

    let gold: GroupId = "gold".parse().expect("id");
    let group = e
        .apply(ActionSpec::Group { target: GroupTarget::Partition { partition: p1.clone() }, group: gold.clone() })
        .expect("group");
    step_secs(&mut e, 3);
    assert_eq!(state(&e, &group), OperationState::Succeeded);
    let topo = e.topology();
    let grouped = topo.partitions.iter().find(|p| p.id == p1).expect("p1");
    assert_eq!(grouped.group.as_ref(), Some(&gold));
    assert_eq!(grouped.owner, w("w-0003"), "the last worker is the gold group");

    let reshard = e
        .apply(ActionSpec::Reshard {
            tenant: "acme".parse().expect("id"),
            dataset: "ingest".parse().expect("id"),
            tenant_shards: 8,
            dataset_shards: 4,
            load_balancing: LoadBalancing::RoundRobin,
        })
        .expect("reshard");
    step_secs(&mut e, 5);
    assert_eq!(state(&e, &reshard), OperationState::Succeeded);
    let ds = &e.topology().datasets[0];
    assert_eq!((ds.dataset_shards, ds.load_balancing), (4, LoadBalancing::RoundRobin));
}

#[test]
fn a_move_takes_time_proportional_to_stored_bytes() {
    let mut e = engine();
    let p = pid("acme.orders.p000002");
    let idx = e.cluster.partitions.find(&p).expect("p");
    e.cluster.partitions.stored_bytes[idx] = 20.0 * 100.0 * 1024.0 * 1024.0; // 20 s of streaming
    let op = e.apply(ActionSpec::Move { partition: p, to_worker: w("w-0001"), max_bytes_per_sec: None }).expect("move");
    step_secs(&mut e, 20);
    let running = e.operation(&op).expect("op").clone();
    assert_eq!(running.state, OperationState::Running);
    assert!(running.progress_ratio > 0.9 && running.progress_ratio < 1.0, "{}", running.progress_ratio);
    step_secs(&mut e, 2);
    assert_eq!(state(&e, &op), OperationState::Succeeded);
}

#[test]
fn a_throttled_move_streams_at_its_rate_and_costs_its_source_in_proportion() {
    let mut e = engine();
    let p = pid("acme.orders.p000002");
    let idx = e.cluster.partitions.find(&p).expect("p");
    let src = e.cluster.partitions.owner[idx] as usize;
    let mib = 1024.0 * 1024.0;
    e.cluster.partitions.stored_bytes[idx] = 100.0 * mib; // 1 s at the full 100 MiB/s
    assert!(e.topology().move_rate_limit, "the testbed says it honours a move's rate");
    // A quarter of the full rate: 4 s of streaming plus the 1 s handover, at a quarter of the
    // full-rate stream's 20 % cost.
    let rate = Some((25.0 * mib) as u64);
    let op = e.apply(ActionSpec::Move { partition: p, to_worker: w("w-0001"), max_bytes_per_sec: rate }).expect("move");
    step_secs(&mut e, 4);
    assert_eq!(state(&e, &op), OperationState::Running, "a full-rate stream would have ended after 2 s");
    let factor = e.cluster.load.worker_capacity_factor[src];
    assert!((factor - 0.95).abs() < 1e-9, "the source keeps 95 % of its capacity, not 80 %: {factor}");
    step_secs(&mut e, 2);
    assert_eq!(state(&e, &op), OperationState::Succeeded);
    assert_eq!(e.cluster.load.worker_capacity_factor[src], 1.0);
}

/// Whether an error is the one a case expects.
type IsExpected = fn(&AdminError) -> bool;

#[test]
fn invalid_operations_are_refused_and_change_nothing() {
    let mut e = engine();
    let before = e.topology();
    let p0 = pid("acme.orders.p000000");
    let p2 = pid("acme.orders.p000002");
    let end0 = before.partitions[0].range.end;
    let cases: Vec<(ActionSpec, IsExpected)> = vec![
        (ActionSpec::Split { partition: p0.clone(), split_key: Key(end0.0 + 10) }, |e| {
            matches!(e, AdminError::Layout(LayoutError::SplitOutsideRange { .. }))
        }),
        (ActionSpec::Split { partition: p0.clone(), split_key: Key(0) }, |e| {
            matches!(e, AdminError::Layout(LayoutError::SplitOutsideRange { .. }))
        }),
        (ActionSpec::Split { partition: pid("nope"), split_key: Key(5) }, |e| {
            matches!(e, AdminError::Layout(LayoutError::UnknownPartition(_)))
        }),
        (ActionSpec::Merge { left: p0.clone(), right: p2.clone(), to_worker: None }, |e| {
            matches!(e, AdminError::Layout(LayoutError::NotAdjacent { .. }))
        }),
        (ActionSpec::Merge { left: pid("acme.orders.p000001"), right: p0.clone(), to_worker: None }, |e| {
            matches!(e, AdminError::Layout(LayoutError::NotAdjacent { .. }))
        }),
        (ActionSpec::Move { partition: p0.clone(), to_worker: w("w-9999"), max_bytes_per_sec: None }, |e| {
            matches!(e, AdminError::Layout(LayoutError::UnknownWorker(_)))
        }),
        (ActionSpec::Move { partition: p0.clone(), to_worker: w("w-0000"), max_bytes_per_sec: None }, |e| {
            matches!(e, AdminError::Layout(LayoutError::AlreadyThere(..)))
        }),
        (
            ActionSpec::Group {
                target: GroupTarget::Partition { partition: p0.clone() },
                group: "silver".parse().expect("id"),
            },
            |e| matches!(e, AdminError::Layout(LayoutError::EmptyGroup(_))),
        ),
        (
            ActionSpec::Group {
                target: GroupTarget::Table { tenant: "acme".parse().expect("id"), table: "nope".parse().expect("id") },
                group: "gold".parse().expect("id"),
            },
            |e| matches!(e, AdminError::Layout(LayoutError::UnknownTable { .. })),
        ),
        (
            ActionSpec::Reshard {
                tenant: "acme".parse().expect("id"),
                dataset: "nope".parse().expect("id"),
                tenant_shards: 4,
                dataset_shards: 2,
                load_balancing: LoadBalancing::Fingerprint,
            },
            |e| matches!(e, AdminError::Layout(LayoutError::UnknownDataset { .. })),
        ),
        (
            ActionSpec::Reshard {
                tenant: "acme".parse().expect("id"),
                dataset: "ingest".parse().expect("id"),
                tenant_shards: 2,
                dataset_shards: 4,
                load_balancing: LoadBalancing::Fingerprint,
            },
            |e| matches!(e, AdminError::Layout(LayoutError::BadShards(_))),
        ),
    ];
    for (spec, expected) in cases {
        let err = e.apply(spec.clone()).expect_err("invalid action refused");
        assert!(expected(&err), "{spec:?} gave {err:?}");
    }
    step_secs(&mut e, 30);
    assert_eq!(e.topology(), before, "refused actions changed nothing");
    assert_eq!(e.running_operations(), 0);
}

#[test]
fn busy_partitions_conflict_and_action_ids_are_idempotent() {
    let mut e = engine();
    let p0 = pid("acme.orders.p000000");
    let spec = ActionSpec::Move { partition: p0.clone(), to_worker: w("w-0001"), max_bytes_per_sec: None };
    let id: ActionId = "a-1".parse().expect("id");
    let op = e.submit(id.clone(), spec.clone()).expect("move");
    assert_eq!(e.submit(id.clone(), spec).expect("retry"), op, "a retry returns the same operation");
    let other = ActionSpec::Split { partition: p0.clone(), split_key: Key(1 << 60) };
    assert!(matches!(e.submit(id, other.clone()), Err(AdminError::ActionReused(_))));
    assert!(matches!(e.apply(other.clone()), Err(AdminError::Busy { .. })));
    step_secs(&mut e, 2);
    e.apply(other).expect("free again once the move finished");
}

#[test]
fn faults_fail_hang_or_time_out_operations() {
    let mut e = engine();
    let v = e.topology().version;
    e.add_fault(FaultRule { kind: Some(lb_common::protocol::ActionKind::Split), fault: FaultKind::Fail, count: 1 });
    e.add_fault(FaultRule { kind: None, fault: FaultKind::Hang, count: 1 });
    e.add_fault(FaultRule { kind: None, fault: FaultKind::Timeout, count: 1 });
    let failed =
        e.apply(ActionSpec::Split { partition: pid("acme.orders.p000000"), split_key: Key(1 << 60) }).expect("a");
    let hung = e
        .apply(ActionSpec::Move {
            partition: pid("acme.orders.p000001"),
            to_worker: w("w-0000"),
            max_bytes_per_sec: None,
        })
        .expect("b");
    let timed_out = e
        .apply(ActionSpec::Move {
            partition: pid("acme.orders.p000002"),
            to_worker: w("w-0000"),
            max_bytes_per_sec: None,
        })
        .expect("c");
    step_secs(&mut e, 600);
    let f = e.operation(&failed).expect("op");
    assert_eq!(f.state, OperationState::Failed);
    assert!(f.error.as_deref().is_some_and(|m| m.contains("not applied")));
    assert_eq!(state(&e, &hung), OperationState::Running, "a hung operation never finishes");
    assert!(e.apply(ActionSpec::Split { partition: pid("acme.orders.p000001"), split_key: Key(5 << 60) }).is_err());
    let t = e.operation(&timed_out).expect("op");
    assert_eq!(t.state, OperationState::Failed);
    assert!(t.error.as_deref().is_some_and(|m| m.contains("timed out")));
    let topo = e.topology();
    assert_eq!(topo.partitions.len(), 4, "the failed split did not apply");
    assert_eq!(topo.partitions[2].owner, w("w-0000"), "the timed-out move did apply");
    assert_eq!(topo.partitions[1].owner, w("w-0001"), "the hung move did not apply");
    assert_eq!(topo.version, v + 1);
}

#[test]
fn timeline_loses_and_adds_workers_and_injects_faults() {
    let extra = format!(
        "{UNIFORM}\n{}",
        r#"
[[timeline]]
at_secs = 10
event = "worker_lost"
worker = "w-0001"
[[timeline]]
at_secs = 20
event = "worker_added"
worker = "w-new"
[[timeline]]
at_secs = 20
event = "fault"
fault = "fail"
"#
    );
    let mut e = Engine::new(&scenario(4, 6, &extra));
    step_secs(&mut e, 10);
    let topo = e.topology();
    let lost = topo.workers.iter().find(|x| x.id == w("w-0001")).expect("still listed");
    assert_eq!(lost.health, Health::Down);
    assert!(topo.partitions.iter().all(|p| p.owner != w("w-0001")), "partitions failed over");
    assert!(topo.datasets[0].shard_owners.iter().all(|o| *o != w("w-0001")), "shards left the lost worker");
    assert!(
        e.apply(ActionSpec::Move {
            partition: pid("acme.orders.p000000"),
            to_worker: w("w-0001"),
            max_bytes_per_sec: None
        })
        .is_err()
    );
    step_secs(&mut e, 10);
    let new = w("w-new");
    assert!(e.topology().workers.iter().any(|x| x.id == new && x.health == Health::Healthy));
    let op = e
        .apply(ActionSpec::Move { partition: pid("acme.orders.p000000"), to_worker: new, max_bytes_per_sec: None })
        .expect("move");
    step_secs(&mut e, 3);
    assert_eq!(state(&e, &op), OperationState::Failed, "the timeline's fault hit it");
}

#[test]
fn random_splits_merges_and_moves_keep_every_table_tiling_the_key_space() {
    use lb_testbed::workload::rng::SplitMix64;
    let mut e = Engine::new(&scenario(5, 8, UNIFORM));
    let mut rng = SplitMix64::new(9);
    let total_demand = e.summary().demand_ops_per_sec;
    for round in 0..300 {
        let topo = e.topology();
        let n = topo.partitions.len() as u64;
        let i = rng.below(n) as usize;
        let p = &topo.partitions[i];
        let spec = match rng.below(3) {
            0 => {
                let width = p.range.end.0 - p.range.start.0;
                ActionSpec::Split {
                    partition: p.id.clone(),
                    split_key: Key(p.range.start.0 + rng.below(width.max(1)) + 1),
                }
            }
            1 if i + 1 < topo.partitions.len() => {
                ActionSpec::Merge { left: p.id.clone(), right: topo.partitions[i + 1].id.clone(), to_worker: None }
            }
            _ => ActionSpec::Move {
                partition: p.id.clone(),
                to_worker: topo.workers[rng.below(3) as usize].id.clone(),
                max_bytes_per_sec: None,
            },
        };
        let _ = e.apply(spec);
        step_secs(&mut e, 1 + rng.below(3));
        let topo = e.topology();
        let parts = &topo.partitions;
        assert_eq!(parts[0].range.start, Key::MIN, "round {round}");
        assert_eq!(parts[parts.len() - 1].range.end, Key::MAX, "round {round}");
        assert!(parts.windows(2).all(|w| w[0].range.is_left_neighbour_of(&w[1].range)), "round {round}");
        let demand = e.summary().demand_ops_per_sec;
        assert!((demand - total_demand).abs() < 1e-6 * total_demand, "demand is conserved: {demand}");
    }
}

#[test]
fn zones_show_in_the_topology_and_a_lost_workers_partitions_fail_over_inside_its_zone() {
    let path = crate::support::scenarios_dir().join("zones.toml");
    let s = lb_testbed::scenario::Scenario::load(&path).expect("zones.toml loads");
    let mut e = Engine::new(&s);
    let zone_of = |e: &Engine, id: &WorkerId| {
        e.topology().workers.iter().find(|x| &x.id == id).and_then(|x| x.zone.clone()).map(|z| z.to_string())
    };
    // Four workers per zone, in order.
    for (i, zone) in
        ["eu-1a", "eu-1a", "eu-1a", "eu-1a", "eu-1b", "eu-1b", "eu-1b", "eu-1b", "eu-1c"].iter().enumerate()
    {
        assert_eq!(zone_of(&e, &w(&format!("w-{i:04}"))).as_deref(), Some(*zone), "w-{i:04}");
    }
    let lost = w("w-0001");
    let held: Vec<_> = e.topology().partitions.iter().filter(|p| p.owner == lost).map(|p| p.id.clone()).collect();
    assert!(!held.is_empty());
    step_secs(&mut e, 301);
    let topo = e.topology();
    for id in &held {
        let owner = &topo.partitions.iter().find(|p| &p.id == id).expect("still there").owner;
        assert_eq!(zone_of(&e, owner).as_deref(), Some("eu-1a"), "{id} failed over to {owner}, in its own zone");
    }
    // A zone with no worker left fails over to another zone: its data must go somewhere.
    let mut e = Engine::new(&s);
    let mut gone = Vec::new();
    for i in 0..4 {
        gone.push(w(&format!("w-{i:04}")));
    }
    for id in &gone[..3] {
        e.cluster.worker_lost(id).expect("lost");
    }
    let last = e.topology().partitions.iter().filter(|p| p.owner == gone[3]).count();
    assert!(last > 0, "the zone's survivor holds its partitions");
    e.cluster.worker_lost(&gone[3]).expect("lost");
    assert!(e.topology().partitions.iter().all(|p| !gone.contains(&p.owner)), "they left for another zone");
}
