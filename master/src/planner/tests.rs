//! Unit tests of the policies on small hand-built clusters, and a model-only convergence test.

use lb_common::ids::{GroupId, Key, KeyRange, PartitionId, TableId, TenantId, WorkerId};
use lb_common::protocol::{ActionKind, ActionSpec, Capacity, GroupTarget, Health, KeySketch, TopKey};
use proptest::prelude::*;

use super::*;

const ALL: [ActionKind; 4] = [ActionKind::Split, ActionKind::Move, ActionKind::Merge, ActionKind::Group];

pub(crate) fn wid(i: usize) -> WorkerId {
    WorkerId::new(format!("w-{i}")).expect("id")
}

/// `loads[i]` ops/s on partition `i`, owned by `owners[i]`, 1 GiB each, limit 10k ops/s,
/// uniform sketches; workers of 100k ops/s; `groups[w]` for dedicated workers.
pub(crate) fn cluster(loads: &[f64], owners: &[usize], workers: usize, groups: &[(usize, &str)]) -> PlannerInput {
    let n = loads.len() as u64;
    let width = u64::MAX / n;
    let mut worker_ops = vec![0.0; workers];
    let partitions = loads
        .iter()
        .zip(owners)
        .enumerate()
        .map(|(i, (&ops, &owner))| {
            worker_ops[owner] += ops.min(10_000.0);
            let start = i as u64 * width;
            let end = if i as u64 + 1 == n { u64::MAX } else { start + width - 1 };
            PartitionView {
                id: PartitionId::new(format!("p{i}")).expect("id"),
                tenant: TenantId::new("t").expect("id"),
                table: TableId::new("tbl").expect("id"),
                range: KeyRange { start: Key(start), end: Key(end) },
                owner: wid(owner),
                group: None,
                stored_bytes: 1 << 30,
                limit: Some(Capacity { ops_per_sec: 10_000.0, bytes_per_sec: 1e12 }),
                supported_actions: ALL.to_vec(),
                stats: PartitionWindow {
                    ops_per_sec: ops.min(10_000.0),
                    bytes_per_sec: 0.0,
                    cpu_cores: 0.0,
                    rejected_per_sec: (ops - 10_000.0).max(0.0),
                    sketch: Some(KeySketch {
                        bucket_ops: vec![(ops / 16.0) as u64; 16],
                        bucket_bounds: Vec::new(),
                        top_keys: vec![],
                        sequential_write_ratio: 0.0,
                    }),
                },
            }
        })
        .collect();
    let workers = (0..workers)
        .map(|w| WorkerView {
            id: wid(w),
            capacity: Capacity { ops_per_sec: 100_000.0, bytes_per_sec: 1e12 },
            cpu_cores: 0.0,
            group: groups.iter().find(|g| g.0 == w).map(|g| GroupId::new(g.1).expect("id")),
            health: Health::Healthy,
            zone: None,
            load: WorkerWindow { ops_per_sec: worker_ops[w], ..WorkerWindow::default() },
        })
        .collect();
    PlannerInput { partitions, workers, ..PlannerInput::default() }
}

/// Runs `passes` passes one second apart starting at `t0_ms`; returns the last plan.
fn run(input: &PlannerInput, config: &PlannerConfig, state: &mut PlannerState, t0_ms: i64, passes: i64) -> Plan {
    let mut last = Plan::default();
    for k in 0..passes {
        last = plan(input, config, state, t0_ms + k * 1000);
    }
    last
}

#[test]
fn a_hot_partition_is_split_after_n_windows_with_its_why_and_why_not() {
    let input = cluster(&[9_500.0, 1_000.0, 1_000.0, 1_000.0], &[0, 0, 1, 1], 2, &[]);
    let config = PlannerConfig::default();
    let mut state = PlannerState::default();
    assert!(plan(&input, &config, &mut state, 1_000).proposals.is_empty(), "one window is not enough");
    let out = plan(&input, &config, &mut state, 2_000);
    assert_eq!(out.proposals.len(), 1, "{:?}", out.rejected);
    let p = &out.proposals[0];
    let ActionSpec::Split { partition, split_key } = &p.spec else { panic!("{:?}", p.spec) };
    assert_eq!(partition.as_str(), "p0");
    assert!(input.partitions[0].range.split_at(*split_key).is_some());
    assert_eq!(p.policy, Policy::PartitionOverload);
    assert_eq!(p.trigger.hot_windows, 2);
    assert_eq!(p.trigger.partition_demand_ops_per_sec, Some(9_500.0));
    assert!((p.predicted.target_before_ratio - 0.95).abs() < 1e-9);
    assert!(p.predicted.target_after_ratio < 0.7, "{:?}", p.predicted);
    assert!(
        p.rejected_alternatives.iter().any(|a| a.candidate.starts_with("move p0")),
        "{:?}",
        p.rejected_alternatives
    );
    assert!(p.reason.contains("best halves"), "{}", p.reason);
    // The proposal is what the master stores and serves: it round-trips through JSON.
    let json = serde_json::to_string(p).expect("serialise");
    assert_eq!(&serde_json::from_str::<Proposal>(&json).expect("parse"), p);
    assert!(state.in_cooldown(partition, 2_000).is_some());
}

#[test]
fn a_single_hot_key_is_grouped_never_split() {
    // Its worker is half busy, so isolating it gains (an idle worker gains nothing).
    let mut input = cluster(
        &[12_000.0, 8_000.0, 8_000.0, 8_000.0, 8_000.0, 8_000.0, 1_000.0],
        &[0, 0, 0, 0, 0, 0, 1],
        3,
        &[(2, "iso")],
    );
    let sketch = input.partitions[0].stats.sketch.as_mut().expect("sketch");
    sketch.top_keys = vec![TopKey { key: Key(42), share_ratio: 0.8 }];
    let plan = run(&input, &PlannerConfig::default(), &mut PlannerState::default(), 1_000, 2);
    let p = &plan.proposals[0];
    assert_eq!(
        p.spec,
        ActionSpec::Group {
            target: GroupTarget::Partition { partition: PartitionId::new("p0").expect("id") },
            group: GroupId::new("iso").expect("id")
        }
    );
    assert!(p.rejected_alternatives.iter().any(|a| a.why.contains("no split can divide it")));
    assert!(!plan.proposals.iter().any(|p| p.spec.kind() == ActionKind::Split));
}

/// An isolation into a group streams at the storage's own pace: on a storage that throttles
/// moves, it is taken only from a worker that affords a full-rate stream, and the alternative
/// says why where it is not.
#[test]
fn an_isolation_is_not_taken_from_a_worker_that_cannot_afford_a_full_rate_stream() {
    // w-0 at 0.90 (a hot key's partition capped at 10,000 plus ten of 8,000): 0.10 spare.
    let mut loads = vec![12_000.0];
    loads.extend([8_000.0; 10]);
    loads.push(1_000.0);
    let mut owners = vec![0; 11];
    owners.push(1);
    let mut input = cluster(&loads, &owners, 3, &[(2, "iso")]);
    let sketch = input.partitions[0].stats.sketch.as_mut().expect("sketch");
    sketch.top_keys = vec![TopKey { key: Key(42), share_ratio: 0.8 }];
    let grouped = |plan: &Plan| plan.proposals.iter().any(|p| p.spec.kind() == ActionKind::Group);
    let full_rate = run(&input, &PlannerConfig::default(), &mut PlannerState::default(), 1_000, 2);
    assert!(grouped(&full_rate), "an unthrottled storage isolates it: {:?}", full_rate.proposals);
    input.move_rate_limit = true;
    let throttled = run(&input, &PlannerConfig::default(), &mut PlannerState::default(), 1_000, 2);
    assert!(!grouped(&throttled), "{:?}", throttled.proposals);
    let why = |a: &Alternative| {
        a.why.contains("the storage streams it at its full rate, 0.20 of w-0's capacity, which has 0.100 spare")
    };
    let said = throttled.proposals.iter().flat_map(|p| &p.rejected_alternatives).any(why)
        || throttled.rejected.iter().any(|d| d.why.contains("the storage streams it at its full rate"));
    assert!(said, "{:?} / {:?}", throttled.proposals, throttled.rejected);
    for p in throttled.proposals.iter().filter(|p| p.spec.kind() == ActionKind::Move) {
        assert!(matches!(p.spec, ActionSpec::Move { max_bytes_per_sec: Some(_), .. }), "{:?}", p.spec);
    }
}

/// On a storage that splits into placed pieces, the hot key is cut out instead: one
/// `split_into` whose one-key piece is created on the group's worker as a member; the first
/// piece (the id) goes there when the key is the range's first; a partition too small to be
/// worth a cut, or an append tail, is grouped whole.
#[test]
fn a_hot_key_in_a_large_partition_is_cut_out_onto_the_group_not_moved_whole() {
    let hot = |key: u64, bytes: u64, sequential: f64| {
        let mut input = cluster(
            &[12_000.0, 8_000.0, 8_000.0, 8_000.0, 8_000.0, 8_000.0, 1_000.0],
            &[0, 0, 0, 0, 0, 0, 1],
            3,
            &[(2, "iso")],
        );
        input.multi_way_split = true;
        input.partitions[0].stored_bytes = bytes;
        // 12,000 ops/s: 9,600 on the key (its bucket, the first, counts them), 150 per bucket else.
        let sketch = input.partitions[0].stats.sketch.as_mut().expect("sketch");
        sketch.bucket_ops = std::iter::once(9_750).chain(std::iter::repeat_n(150, 15)).collect();
        sketch.top_keys = vec![TopKey { key: Key(key), share_ratio: 0.8 }];
        sketch.sequential_write_ratio = sequential;
        input
    };
    let (p0, iso) = (PartitionId::new("p0").expect("id"), GroupId::new("iso").expect("id"));
    let input = hot(42, 1 << 30, 0.0);
    let plan = run(&input, &PlannerConfig::default(), &mut PlannerState::default(), 1_000, 2);
    assert_eq!(
        plan.proposals[0].spec,
        ActionSpec::SplitInto {
            partition: p0.clone(),
            split_keys: vec![Key(42), Key(43)],
            to_workers: vec![wid(2), wid(0)],
            group: Some(iso.clone()),
            first_to_worker: None,
        }
    );
    assert_eq!(plan.proposals.len(), 1, "{:?}", plan.proposals);
    let p = &plan.proposals[0];
    // w-0 served 50,000 ops/s (p0 at its 10,000 limit); the key's 9,600 leave it.
    assert!((p.predicted.source_after_ratio - 0.404).abs() < 0.001, "{:?}", p.predicted);
    assert!((p.predicted.dest_after_ratio.expect("dest") - 0.096).abs() < 0.001, "{:?}", p.predicted);
    assert!(p.rejected_alternatives.iter().any(|a| a.candidate.starts_with("isolate p0 whole")));

    // The key as the range's first: the first piece is the key's, and it goes.
    let input = hot(0, 1 << 30, 0.0);
    let plan = run(&input, &PlannerConfig::default(), &mut PlannerState::default(), 1_000, 2);
    assert_eq!(
        plan.proposals[0].spec,
        ActionSpec::SplitInto {
            partition: p0.clone(),
            split_keys: vec![Key(1)],
            to_workers: vec![wid(0)],
            group: Some(iso.clone()),
            first_to_worker: Some(wid(2)),
        }
    );

    // Too small to be worth a cut, or an append tail: grouped whole, the cut's why-not given.
    for (input, why) in [(hot(42, 64 << 20, 0.0), "64 MiB"), (hot(42, 1 << 30, 0.95), "append at the tail")] {
        let plan = run(&input, &PlannerConfig::default(), &mut PlannerState::default(), 1_000, 2);
        let p = &plan.proposals[0];
        assert_eq!(
            p.spec,
            ActionSpec::Group { target: GroupTarget::Partition { partition: p0.clone() }, group: iso.clone() }
        );
        assert!(
            p.rejected_alternatives.iter().any(|a| a.candidate == "cut the hot key out of p0" && a.why.contains(why)),
            "{why}: {:?}",
            p.rejected_alternatives
        );
    }
}

#[test]
fn never_split_without_split_support() {
    let mut input = cluster(&[12_000.0, 80_000.0, 1_000.0], &[0, 0, 1], 2, &[]);
    input.partitions[0].supported_actions = vec![ActionKind::Move];
    let (config, mut state) = (PlannerConfig::default(), PlannerState::default());
    let plans: Vec<Plan> = (1..=3).map(|k| plan(&input, &config, &mut state, k * 1000)).collect();
    assert!(plans[1].proposals.iter().any(|p| p.spec.kind() == ActionKind::Split), "p1 can split");
    for p in plans.iter().flat_map(|p| &p.proposals) {
        assert!(!matches!(&p.spec, ActionSpec::Split { partition, .. } if partition.as_str() == "p0"), "{p:?}");
    }
    let text = format!("{:?}", plans[1]);
    assert!(text.contains("cannot split this partition"), "{text}");
}

#[test]
fn an_overloaded_worker_sheds_to_the_coolest_worker_and_in_flight_counts_as_done() {
    // w-0 at 0.95 (19 partitions of 5k), w-1 at 0.4, w-2 at 0.08.
    let mut loads = vec![5_000.0; 19];
    let mut owners = vec![0; 19];
    loads.extend([8_000.0; 5]);
    owners.extend([1; 5]);
    loads.push(8_000.0);
    owners.push(2);
    let input = cluster(&loads, &owners, 3, &[]);
    let mut config = PlannerConfig::default();
    config.imbalance.mode = PolicyMode::Off;
    let first = run(&input, &config, &mut PlannerState::default(), 1_000, 2);
    let moves: Vec<_> = first.proposals.iter().filter(|p| p.policy == Policy::WorkerOverload).collect();
    assert_eq!(moves.len(), 2, "0.95 -> 0.75 needs 4 partitions of 0.05, capped at 2 per worker: {:?}", first.rejected);
    for m in &moves {
        assert!(matches!(&m.spec, ActionSpec::Move { to_worker, .. } if to_worker.as_str() == "w-2"));
        assert!(m.predicted.dest_after_ratio.expect("dest") <= 0.75);
        assert!(m.predicted.source_after_ratio < m.predicted.source_before_ratio);
    }
    assert!(first.rejected.iter().any(|d| d.why.contains("max_inflight_per_worker")), "{:?}", first.rejected);
    // With those two in flight, the next pass plans around them (no double fix).
    let mut next = input.clone();
    next.in_flight = moves.iter().map(|m| InFlightAction { spec: m.spec.clone(), started_at_ms: 2_000 }).collect();
    let again = plan(&next, &config, &mut PlannerState::default(), 3_000);
    assert!(again.proposals.is_empty(), "{:?}", again.proposals);
}

/// A worker at `ratio` of its capacity in partitions of 0.05, beside a cool one and a cold one,
/// on a storage that throttles a move to the rate it names.
fn shedding_worker(partitions_of_5k: usize) -> PlannerInput {
    let mut loads = vec![5_000.0; partitions_of_5k];
    let mut owners = vec![0; partitions_of_5k];
    loads.extend([8_000.0; 5]);
    owners.extend([1; 5]);
    loads.push(8_000.0);
    owners.push(2);
    PlannerInput { move_rate_limit: true, ..cluster(&loads, &owners, 3, &[]) }
}

#[test]
fn a_worker_that_serves_all_it_is_asked_sheds_only_as_fast_as_its_spare_capacity_pays_for() {
    let mut config = PlannerConfig::default();
    config.imbalance.mode = PolicyMode::Off;
    let full = config.caps.move_stream_bytes_per_sec;
    // At 0.95 with a 20 % full-rate stream cost: one move at a fifth of the full rate (0.05
    // spare, less the 0.01 margin), where an unthrottled storage gets two at the full rate and
    // the worker would serve 0.95 / 0.6 of its capacity while they stream.
    let input = shedding_worker(19);
    let first = run(&input, &config, &mut PlannerState::default(), 1_000, 2);
    let moves: Vec<_> = first.proposals.iter().filter(|p| p.policy == Policy::WorkerOverload).collect();
    assert_eq!(moves.len(), 1, "{:?}", first.rejected);
    let ActionSpec::Move { max_bytes_per_sec: Some(rate), .. } = &moves[0].spec else { panic!("{:?}", moves[0].spec) };
    assert!((*rate as f64 - full / 5.0).abs() < 2.0, "{rate}");
    assert!(
        moves[0].reason.contains("streamed at 20.0 MiB/s, so it takes 0.04 of w-0's capacity"),
        "{}",
        moves[0].reason
    );
    let unthrottled = PlannerInput { move_rate_limit: false, ..input.clone() };
    let old = run(&unthrottled, &config, &mut PlannerState::default(), 1_000, 2);
    assert_eq!(old.proposals.len(), 2);
    assert!(old.proposals.iter().all(|p| matches!(p.spec, ActionSpec::Move { max_bytes_per_sec: None, .. })));

    // With it streaming, w-0 has only the margin spare: no second stream, and the pass says why.
    let mut next = input.clone();
    next.in_flight = vec![InFlightAction { spec: moves[0].spec.clone(), started_at_ms: 2_000 }];
    let again = run(&next, &config, &mut PlannerState::default(), 3_000, 2);
    assert!(again.proposals.is_empty(), "{:?}", again.proposals);
    let why = again.rejected.iter().find(|d| d.subject == "w-0").expect("declined");
    assert_eq!(why.reason, DeclineReason::SourceAtLimit);
    assert!(
        why.why
            .contains("(0.95 with what streams away still on it), 0.010 of it spare with its running streams: one more stream needs 0.035 spare"),
        "{}",
        why.why
    );

    // At exactly its capacity, nothing can stream without a rejection: it waits.
    let at_capacity = run(&shedding_worker(20), &config, &mut PlannerState::default(), 1_000, 2);
    assert!(at_capacity.proposals.is_empty(), "{:?}", at_capacity.proposals);
    assert!(at_capacity.rejected.iter().any(|d| d.subject == "w-0" && d.reason == DeclineReason::SourceAtLimit));

    // Rejecting because its own stream takes more than it has spare (its load rose to 0.98
    // while a 0.04 stream runs): the next stream goes at the full rate, since waiting would
    // leave it rejecting as long as the first one streams.
    let mut rising = shedding_worker(19);
    rising.partitions[1].stats.ops_per_sec = 8_000.0;
    rising.workers[0].load.ops_per_sec = 98_000.0;
    rising.in_flight = vec![InFlightAction { spec: moves[0].spec.clone(), started_at_ms: 2_000 }];
    let rising = run(&rising, &config, &mut PlannerState::default(), 3_000, 2);
    let shed: Vec<_> = rising.proposals.iter().filter(|p| p.policy == Policy::WorkerOverload).collect();
    assert_eq!(shed.len(), 1, "{:?}", rising.rejected);
    assert!(matches!(shed[0].spec, ActionSpec::Move { max_bytes_per_sec: None, .. }), "{:?}", shed[0].spec);

    // Once it rejects, it sheds at the full rate: the sooner the stream ends, the fewer it
    // rejects.
    let rejecting = run(&shedding_worker(22), &config, &mut PlannerState::default(), 1_000, 2);
    let shed: Vec<_> = rejecting.proposals.iter().filter(|p| p.policy == Policy::WorkerOverload).collect();
    assert!(!shed.is_empty(), "{:?}", rejecting.rejected);
    assert!(shed.iter().all(|p| matches!(p.spec, ActionSpec::Move { max_bytes_per_sec: None, .. })), "{shed:?}");
}

#[test]
fn a_throttled_move_in_flight_drains_its_source_in_proportion_and_is_not_presumed_stuck_early() {
    let input = shedding_worker(19);
    let caps = PlannerConfig::default().caps;
    let streams = model::Streams::new(&caps, true);
    let quarter = (caps.move_stream_bytes_per_sec / 4.0) as u64;
    let mv = |p: &str, rate| ActionSpec::Move {
        partition: p.parse().expect("id"),
        to_worker: wid(2),
        max_bytes_per_sec: rate,
    };
    // 4 GiB each, 200 s after they started: the full-rate move is past three times its 41 s,
    // the quarter-rate one has 492 s.
    let mut with = input.clone();
    for p in &mut with.partitions[..2] {
        p.stored_bytes = 4 << 30;
    }
    with.in_flight = vec![
        InFlightAction { spec: mv("p0", Some(quarter)), started_at_ms: 0 },
        InFlightAction { spec: mv("p1", None), started_at_ms: 0 },
    ];
    let m = model::Model::build(&with, streams, 200_000);
    assert!((m.drain_factor(0) - (1.0 - 0.05 - 0.2)).abs() < 1e-9, "{}", m.drain_factor(0));
    assert_eq!(m.owner[0], 2, "the throttled move still counts as landing");
    assert_eq!(m.owner[1], 0, "the full-rate one is presumed stuck: its source keeps it");
    // ... and its destination keeps room for it, in case it lands after all.
    let mut without = input.clone();
    for p in &mut without.partitions[..2] {
        p.stored_bytes = 4 << 30;
    }
    without.in_flight = vec![InFlightAction { spec: mv("p0", Some(quarter)), started_at_ms: 0 }];
    let base = model::Model::build(&without, streams, 200_000);
    assert!(m.worker_ratio(2) > base.worker_ratio(2), "{} against {}", m.worker_ratio(2), base.worker_ratio(2));
    assert_eq!(m.owner[1], base.owner[1]);
    // The least a stuck action may run is `stalled_action_secs`: a small partition's move is
    // not presumed stuck within it, however few its bytes.
    let mut small = input.clone();
    small.partitions[1].stored_bytes = 64 << 20;
    small.in_flight = vec![InFlightAction { spec: mv("p1", None), started_at_ms: 0 }];
    let floor = caps.stalled_action_secs as i64 * 1000;
    assert_eq!(model::Model::build(&small, streams, floor).owner[1], 2);
    assert_eq!(model::Model::build(&small, streams, floor + 1).owner[1], 0);
}

/// An in-flight merge streams only its side not on where it lands: that side counts on the
/// destination, only its owner is drained; a merge on one worker drains nothing.
#[test]
fn an_in_flight_merge_counts_where_it_lands_and_drains_only_the_streaming_side() {
    let input = cluster(&[1_000.0, 2_000.0, 500.0, 500.0], &[0, 1, 1, 2], 3, &[]);
    let streams = model::Streams::unthrottled(0.2);
    let merge = |l: &str, r: &str, to: Option<usize>| InFlightAction {
        spec: ActionSpec::Merge { left: l.parse().expect("id"), right: r.parse().expect("id"), to_worker: to.map(wid) },
        started_at_ms: 0,
    };
    let built = |a: InFlightAction| {
        let mut with = input.clone();
        with.in_flight = vec![a];
        model::Model::build(&with, streams, 1_000)
    };
    // p0 (w-0) + p1 (w-1), landing on w-1: p0 streams from w-0.
    let m = built(merge("p0", "p1", Some(1)));
    assert_eq!((m.owner[0], m.owner[1]), (1, 1));
    assert!((m.drain_factor(0) - 0.8).abs() < 1e-9 && m.drain_factor(1) == 1.0);
    assert_eq!(m.worker_actions[..2], [1, 1], "one action on each worker it touches, not two where it lands");
    // No destination: the left's owner, so p1 streams from w-1 to w-0.
    let m = built(merge("p0", "p1", None));
    assert_eq!((m.owner[0], m.owner[1]), (0, 0));
    assert!(m.drain_factor(0) == 1.0 && (m.drain_factor(1) - 0.8).abs() < 1e-9);
    // p1 + p2, both on w-1: nothing streams.
    let m = built(merge("p1", "p2", None));
    assert_eq!((m.owner[1], m.owner[2]), (1, 1));
    assert!((0..3).all(|w| m.drain_factor(w) == 1.0));
}

/// A split into pieces in flight: the pieces going elsewhere count where they land, but their
/// worker still serves them until the split ends and their stream drains it (the testbed
/// charges it as a move); a worker in that state takes no load meanwhile.
#[test]
fn a_worker_streaming_partitions_away_takes_no_load_until_they_land() {
    // w-0: p0 at 8k being cut into 4 pieces, three of them to w-3 (in flight); p1 2k.
    // w-2: 90k (over the 0.85 watermark). w-1: 40k.
    let mut loads = vec![8_000.0, 2_000.0];
    let mut owners = vec![0, 0];
    loads.extend([10_000.0; 4]);
    owners.extend([1; 4]);
    loads.extend([10_000.0; 9]);
    owners.extend([2; 9]);
    let mut input = cluster(&loads, &owners, 4, &[]);
    input.multi_way_split = true;
    let p0 = &input.partitions[0];
    let quarter = (p0.range.end.0 - p0.range.start.0) / 4;
    let keys: Vec<Key> = (1..4).map(|k| Key(p0.range.start.0 + k * quarter)).collect();
    input.in_flight = vec![InFlightAction {
        spec: ActionSpec::SplitInto {
            partition: p0.id.clone(),
            split_keys: keys,
            to_workers: vec![wid(3); 3],
            group: None,
            first_to_worker: None,
        },
        started_at_ms: 500,
    }];
    let m = model::Model::build(&input, model::Streams::unthrottled(0.2), 1_000);
    assert!((m.worker_ratio(0) - 0.04).abs() < 1e-9, "a quarter of p0 and p1 stay: {}", m.worker_ratio(0));
    assert!((m.load_with_outgoing(0) - 0.10).abs() < 1e-9, "it still serves all of p0: {}", m.load_with_outgoing(0));
    assert!((m.drain_factor(0) - 0.8).abs() < 1e-9, "the pieces' stream drains it");
    assert!(m.shedding(0) && !m.shedding(1) && !m.shedding(2) && !m.shedding(3));

    // w-2 sheds to w-1 (0.40 -> 0.50), not to the coolest, w-0 (0.04), whose pieces have not
    // left (w-3 is at its action cap with three pieces on their way).
    let mut config = PlannerConfig::default();
    config.worker_overload.hot_windows = 1;
    config.imbalance.mode = PolicyMode::Off;
    config.partition_overload.mode = PolicyMode::Off;
    let plan = plan(&input, &config, &mut PlannerState::default(), 1_000);
    let dests: Vec<String> = plan
        .proposals
        .iter()
        .filter_map(|p| match &p.spec {
            ActionSpec::Move { to_worker, .. } => Some(to_worker.to_string()),
            _ => None,
        })
        .collect();
    assert!(!dests.is_empty() && dests.iter().all(|d| d == "w-1"), "{dests:?} {:?}", plan.rejected);
}

#[test]
fn halt_dry_run_and_caps() {
    let input = cluster(&[12_000.0, 12_000.0, 12_000.0, 1_000.0], &[0, 0, 1, 1], 2, &[]);
    let config = PlannerConfig { halt: true, ..PlannerConfig::default() };
    let plan = run(&input, &config, &mut PlannerState::default(), 1_000, 3);
    assert!(plan.proposals.is_empty());
    assert!(plan.rejected.iter().any(|d| d.why.contains("halt")));

    let mut config = PlannerConfig::default();
    config.partition_overload.mode = PolicyMode::DryRun;
    let mut state = PlannerState::default();
    let plan = run(&input, &config, &mut state, 1_000, 2);
    assert_eq!(plan.proposals.len(), 3);
    assert!(plan.proposals.iter().all(|p| p.mode == PolicyMode::DryRun));
    assert!(state.cooldown_until_ms.is_empty(), "dry-run proposals start no cooldown");

    let mut config = PlannerConfig::default();
    config.caps.max_actions_per_pass = 1;
    let plan = run(&input, &config, &mut PlannerState::default(), 1_000, 2);
    assert_eq!(plan.proposals.len(), 1);
    assert!(plan.rejected.iter().any(|d| d.why.contains("max_actions_per_pass")));
}

#[test]
fn cooldown_blocks_a_second_action_on_the_same_partition() {
    let input = cluster(&[12_000.0, 1_000.0], &[0, 1], 2, &[]);
    let config = PlannerConfig::default();
    let mut state = PlannerState::default();
    let first = run(&input, &config, &mut state, 1_000, 2);
    assert_eq!(first.proposals.len(), 1);
    // The same (stale) view for the whole cooldown: never acted on again, always explained.
    for k in 0..29 {
        let p = plan(&input, &config, &mut state, 3_000 + k * 1000);
        assert!(p.proposals.is_empty(), "at {k}: {:?}", p.proposals);
        assert!(p.rejected.iter().any(|d| d.why.contains("cooldown")));
    }
    let after = plan(&input, &config, &mut state, 33_000);
    assert_eq!(after.proposals.len(), 1, "acts again after the cooldown");
}

/// Applies every proposal instantly (moves only) and re-plans until a pass proposes nothing.
fn converge(loads: &[f64], owners: &[usize], workers: usize) -> (usize, f64) {
    let mut input = cluster(loads, owners, workers, &[]);
    let config = PlannerConfig::default();
    let mut state = PlannerState::default();
    let mut now = 1_000;
    let mut quiet = 0;
    let mut rounds = 0;
    while quiet < 40 && rounds < 500 {
        now += 1_000;
        let out = plan(&input, &config, &mut state, now);
        if out.proposals.is_empty() {
            quiet += 1;
            continue;
        }
        quiet = 0;
        rounds += 1;
        for p in &out.proposals {
            if let ActionSpec::Move { partition, to_worker, .. } = &p.spec {
                let part = input.partitions.iter_mut().find(|x| &x.id == partition).expect("exists");
                part.owner = to_worker.clone();
            }
        }
        let mut sums = vec![0.0; workers];
        for p in &input.partitions {
            sums[p.owner.as_str()[2..].parse::<usize>().expect("w-N")] += p.stats.ops_per_sec;
        }
        for (w, s) in input.workers.iter_mut().zip(sums) {
            w.load.ops_per_sec = s;
        }
    }
    let (max, mean, _) =
        model::Model::build(&input, model::Streams::unthrottled(0.2), 0).pool_stats(&vec![None; workers]);
    (rounds, max / mean)
}

#[test]
fn imbalance_converges_in_bounded_rounds_and_balanced_gets_nothing() {
    // 64 partitions of 1k..8k ops/s, all on the first 2 of 8 workers.
    let loads: Vec<f64> = (0..64).map(|i| 1_000.0 + (i * 37 % 8) as f64 * 1_000.0).collect();
    let owners: Vec<usize> = (0..64).map(|i| i % 2).collect();
    let (rounds, max_over_mean) = converge(&loads, &owners, 8);
    assert!(rounds <= 60, "{rounds} rounds");
    assert!(max_over_mean <= 1.10, "max/mean {max_over_mean}");

    let even: Vec<usize> = (0..64).map(|i| i % 8).collect();
    let (rounds, max_over_mean) = converge(&[4_000.0; 64], &even, 8);
    assert_eq!(rounds, 0);
    assert!((max_over_mean - 1.0).abs() < 1e-9);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Any placement of 48 partitions of 500..6000 ops/s on 6 workers converges: bounded rounds,
    /// and max/mean within 1.10 unless one partition alone exceeds the mean's 10 % band.
    #[test]
    fn any_placement_converges(loads in proptest::collection::vec(500.0f64..6_000.0, 48), owners in proptest::collection::vec(0usize..6, 48)) {
        let (rounds, max_over_mean) = converge(&loads, &owners, 6);
        prop_assert!(rounds <= 100, "{} rounds", rounds);
        let mean = loads.iter().sum::<f64>() / 6.0;
        let granule = loads.iter().cloned().fold(0.0, f64::max);
        prop_assert!(max_over_mean <= 1.10 || granule / mean > 0.1, "max/mean {}", max_over_mean);
    }
}

/// A Valkey cluster as the ops server's Valkey adapter describes it: 3 nodes of 4,500 ops/s,
/// 10 slots each, slots support move and group only and have no limit (no `slot_limit`),
/// no key sketch; background 60 ops/s per slot; `hot` = (slot, ops/s) overrides.
fn valkey_cluster(hot: &[(usize, f64)]) -> PlannerInput {
    let mut loads = vec![60.0; 30];
    for &(slot, ops) in hot {
        loads[slot] = ops;
    }
    let owners: Vec<usize> = (0..30).map(|s| s / 10).collect();
    let mut input = cluster(&loads, &owners, 3, &[]);
    let mut worker_ops = [0.0; 3];
    for (p, &ops) in input.partitions.iter_mut().zip(&loads) {
        p.limit = None;
        p.supported_actions = vec![ActionKind::Move, ActionKind::Group];
        p.stats.ops_per_sec = ops;
        p.stats.rejected_per_sec = 0.0;
        p.stats.sketch = None;
        p.stored_bytes = 1 << 20;
        worker_ops[p.owner.as_str()[2..].parse::<usize>().expect("w-N")] += ops;
    }
    for (w, ops) in input.workers.iter_mut().zip(worker_ops) {
        w.capacity = Capacity { ops_per_sec: 4_500.0, bytes_per_sec: 1e8 };
        w.load.ops_per_sec = ops;
    }
    input
}

#[test]
fn valkey_hot_slots_are_moved_off_their_node_never_split_or_merged() {
    // Slots 1, 4, 7 of w-0 at 1,400 ops/s: w-0 at 4,620 / 4,500 = 1.03, the others at 0.13.
    let input = valkey_cluster(&[(1, 1_400.0), (4, 1_400.0), (7, 1_400.0)]);
    let config = PlannerConfig::default();
    let first = run(&input, &config, &mut PlannerState::default(), 1_000, 2);
    assert!(!first.proposals.is_empty(), "the overloaded node is relieved: {:?}", first.rejected);
    let mut dests = Vec::new();
    for p in &first.proposals {
        let ActionSpec::Move { partition, to_worker, .. } = &p.spec else {
            panic!("only moves for slots with no dedicated group: {:?}", p.spec)
        };
        assert!(["p1", "p4", "p7"].contains(&partition.as_str()), "a hot slot moves, not {partition}");
        assert_ne!(to_worker.as_str(), "w-0");
        dests.push(to_worker.as_str().to_owned());
    }
    // One move brings w-0 to 0.72, under the low watermark (0.75): worker overload stops there.
    assert_eq!(first.proposals.len(), 1, "{:?}", first.proposals);
    // Once it has landed, imbalance (0.72 against a mean of 0.43) moves a second hot slot to
    // the other cool node after its windows; worker overload does not act again.
    let ActionSpec::Move { partition: moved, to_worker: dest, .. } = &first.proposals[0].spec else { unreachable!() };
    let mut next = input.clone();
    let p = next.partitions.iter_mut().find(|p| &p.id == moved).expect("moved slot");
    p.owner = dest.clone();
    let ops = p.stats.ops_per_sec;
    next.workers[0].load.ops_per_sec -= ops;
    next.workers.iter_mut().find(|w| &w.id == dest).expect("dest").load.ops_per_sec += ops;
    let mut state = PlannerState::default();
    let later = run(&next, &config, &mut state, 3_000, i64::from(config.imbalance.hot_windows) + 1);
    let second: Vec<_> = later.proposals.iter().collect();
    assert_eq!(second.len(), 1, "{:?} / {:?}", later.proposals, later.rejected);
    assert_eq!(second[0].policy, Policy::Imbalance);
    let ActionSpec::Move { partition, to_worker, .. } = &second[0].spec else { panic!("a move: {:?}", second[0].spec) };
    assert!(["p1", "p4", "p7"].contains(&partition.as_str()) && !dests.contains(&partition.as_str().to_owned()));
    dests.push(to_worker.as_str().to_owned());
    dests.sort();
    assert_eq!(dests, ["w-1", "w-2"], "one hot slot per node");
    assert!(
        first.rejected.iter().all(|d| !d.why.contains("split") || d.why.contains("cannot split")),
        "no split was considered possible: {:?}",
        first.rejected
    );
}

/// A 4-node Valkey cluster as the adapter describes it with no capacity configured: one core
/// of main thread per node (`cpu_cores` 1, ops and bytes capacity 0), 10 slots per node at
/// 100 ops/s and 0.003 cores each; `hot` slots of node 0 run an expensive command: the same
/// 100 ops/s, 0.12 cores each. Ops cannot see the hotspot; CPU can.
fn valkey_cpu_cluster(hot: &[usize]) -> PlannerInput {
    let owners: Vec<usize> = (0..40).map(|s| s / 10).collect();
    let mut input = cluster(&[100.0; 40], &owners, 4, &[]);
    for (i, p) in input.partitions.iter_mut().enumerate() {
        p.limit = None;
        p.supported_actions = vec![ActionKind::Move, ActionKind::Group];
        p.stats.sketch = None;
        p.stored_bytes = 1 << 20;
        p.stats.cpu_cores = if hot.contains(&i) { 0.12 } else { 0.003 };
    }
    for w in &mut input.workers {
        w.capacity = Capacity { ops_per_sec: 0.0, bytes_per_sec: 0.0 };
        w.cpu_cores = 1.0;
    }
    settle_cpu(&mut input);
    input
}

/// Each worker's load from its partitions: ops, and CPU as the agent's host ratio of one core.
fn settle_cpu(input: &mut PlannerInput) {
    for w in &mut input.workers {
        let mine = input.partitions.iter().filter(|p| p.owner == w.id);
        let (ops, cpu) = mine.fold((0.0, 0.0), |(o, c), p| (o + p.stats.ops_per_sec, c + p.stats.cpu_cores));
        w.load.ops_per_sec = ops;
        w.load.cpu_ratio = cpu / w.cpu_cores;
    }
}

#[test]
fn valkey_without_a_capacity_figure_balances_main_thread_cpu() {
    // Four hot slots on w-0: it runs at 0.50 of its core, the others at 0.03 (mean 0.15, over
    // the idle floor of 0.05); every node serves the same 1,000 ops/s.
    let mut input = valkey_cpu_cluster(&[1, 3, 5, 7]);
    let config = PlannerConfig::default();
    let mut state = PlannerState::default();
    let (max, mean, _) = model::Model::build(&input, model::Streams::unthrottled(0.2), 0).pool_stats(&vec![None; 4]);
    assert!((max - 0.498).abs() < 1e-9 && max / mean > 3.0, "CPU is the dimension: {max} / {mean}");
    let mut moved = Vec::new();
    for second in 1..=60 {
        let out = plan(&input, &config, &mut state, second * 1_000);
        for p in &out.proposals {
            let ActionSpec::Move { partition, to_worker, .. } = &p.spec else { panic!("moves only: {:?}", p.spec) };
            moved.push(partition.as_str().to_owned());
            input.partitions.iter_mut().find(|x| &x.id == partition).expect("slot").owner = to_worker.clone();
        }
        settle_cpu(&mut input);
    }
    let (max, mean, _) = model::Model::build(&input, model::Streams::unthrottled(0.2), 0).pool_stats(&vec![None; 4]);
    assert!(max / mean <= 1.15, "max/mean {:.2} after moving {moved:?}", max / mean);
    assert_eq!(moved.len(), 3, "one hot slot to each other node, nothing else: {moved:?}");
    assert!(moved.iter().all(|m| ["p1", "p3", "p5", "p7"].contains(&m.as_str())), "{moved:?}");

    // The same cluster with a hand-set ops capacity as well: the tightest dimension decides,
    // and at 1,000 of 60,000 ops/s that is still CPU.
    let mut capped = valkey_cpu_cluster(&[1, 3, 5, 7]);
    for w in &mut capped.workers {
        w.capacity.ops_per_sec = 60_000.0;
    }
    let (max, _, _) = model::Model::build(&capped, model::Streams::unthrottled(0.2), 0).pool_stats(&vec![None; 4]);
    assert!((max - 0.498).abs() < 1e-9, "{max}");
}

#[test]
fn a_moved_slots_load_in_its_old_nodes_window_is_not_background() {
    // Three of w-0's hot slots moved a moment ago: the master's window still has them in w-0's
    // host CPU (0.50), and w-0's reports attributed them (0.48 of it); the slots are now owned
    // elsewhere. w-0 carries one hot slot and six cool ones: 0.138, not 0.50.
    let mut input = valkey_cpu_cluster(&[1, 3, 5, 7]);
    for (p, to) in [(1, 1), (3, 2), (5, 3)] {
        input.partitions[p].owner = wid(to);
    }
    input.workers[0].load.attributed_cpu_cores = Some(0.498);
    let model = model::Model::build(&input, model::Streams::unthrottled(0.2), 0);
    assert!((model.worker_ratio(0) - 0.138).abs() < 1e-9, "no phantom background: {}", model.worker_ratio(0));
    // Without what the reports attributed, the moved slots read as immovable background.
    input.workers[0].load.attributed_cpu_cores = None;
    assert!(model::Model::build(&input, model::Streams::unthrottled(0.2), 0).worker_ratio(0) > 0.49);
}

#[test]
fn valkey_a_slot_bigger_than_a_node_is_not_moved_around() {
    // Slot 3 alone at 5,000 ops/s: 1.11 of any node. Moving it only moves the overload (and the
    // destination would be over the watermark), and without a dedicated group in the topology
    // there is nowhere to isolate it: the planner proposes nothing for it and says why.
    let input = valkey_cluster(&[(3, 5_000.0)]);
    let mut config = PlannerConfig::default();
    config.imbalance.mode = PolicyMode::Off;
    let plan = run(&input, &config, &mut PlannerState::default(), 1_000, 3);
    assert!(
        !plan
            .proposals
            .iter()
            .any(|p| matches!(&p.spec, ActionSpec::Move { partition, .. } if partition.as_str() == "p3")),
        "the oversized slot is not moved to another shared node: {:?}",
        plan.proposals
    );
    assert!(
        plan.proposals.iter().all(|p| matches!(p.spec, ActionSpec::Move { .. })),
        "nothing but moves: {:?}",
        plan.proposals
    );
    assert!(
        plan.rejected.iter().any(|d| d.policy == Policy::WorkerOverload && d.why.contains("move p3")),
        "the decline names the oversized slot: {:?}",
        plan.rejected
    );
}

#[test]
fn valkey_a_slot_bigger_than_a_node_gets_its_node_alone_when_the_storage_forms_groups() {
    // Slot 3 at 5,000 ops/s, as above, but the adapter dedicates a slot's node to a new group:
    // w-0's nine other slots go to w-1 and w-2 (five and four, fewest slots first), and slot 3
    // stays where it is. The dedication is proposed once and nothing else touches w-0.
    let mut input = valkey_cluster(&[(3, 5_000.0)]);
    input.new_group_dedicates_owner = true;
    let mut config = PlannerConfig::default();
    config.imbalance.mode = PolicyMode::Off;
    let mut state = PlannerState::default();
    let plan = run(&input, &config, &mut state, 1_000, i64::from(config.worker_overload.hot_windows));
    assert_eq!(plan.proposals.len(), 1, "{:?} / {:?}", plan.proposals, plan.rejected);
    let proposal = &plan.proposals[0];
    assert_eq!(proposal.policy, Policy::WorkerOverload);
    let ActionSpec::Group { target: GroupTarget::Partition { partition }, group } = &proposal.spec else {
        panic!("a group of the slot: {:?}", proposal.spec)
    };
    assert_eq!(partition.as_str(), "p3");
    assert_eq!(group, &dedicated_group(partition));
    assert_eq!(group.as_str(), "dedicated-p3");
    let p = &proposal.predicted;
    // w-0: (5,000 + 9 x 60) / 4,500 = 1.23 before, 5,000 / 4,500 = 1.11 after; the receivers go
    // from 600 / 4,500 = 0.13 to (600 + 5 x 60) / 4,500 = 0.20.
    assert!((p.source_before_ratio - 5_540.0 / 4_500.0).abs() < 1e-9, "{p:?}");
    assert!((p.source_after_ratio - 5_000.0 / 4_500.0).abs() < 1e-9, "{p:?}");
    assert!((p.dest_after_ratio.expect("receivers") - 900.0 / 4_500.0).abs() < 1e-9, "{p:?}");
    assert!((p.cluster_max_after_ratio - 900.0 / 4_500.0).abs() < 1e-9, "w-0 left the pool: {p:?}");
    assert!(proposal.reason.contains("dedicate worker w-0"), "{}", proposal.reason);
    assert!(
        proposal.rejected_alternatives.iter().any(|a| a.candidate == "move p3"),
        "{:?}",
        proposal.rejected_alternatives
    );

    // A slot that just landed on w-0 (its cooldown running, say after a move judged harmful)
    // still gets the node: a dedication leaves it where it is.
    let mut resting = PlannerState::default();
    resting.cooldown_until_ms.insert(partition.clone(), 1_000_000);
    let plan = run(&input, &config, &mut resting, 1_000, i64::from(config.worker_overload.hot_windows));
    assert!(
        plan.proposals.iter().any(|p| matches!(&p.spec, ActionSpec::Group { .. })),
        "{:?} / {:?}",
        plan.proposals,
        plan.rejected
    );

    // While it runs, w-0 and its slots are off limits for every policy, imbalance included.
    let mut running = input.clone();
    running.in_flight.push(InFlightAction { spec: proposal.spec.clone(), started_at_ms: 3_000 });
    config.imbalance.mode = PolicyMode::Auto;
    let during = run(&running, &config, &mut state, 4_000, 20);
    assert!(during.proposals.is_empty(), "nothing else while it runs: {:?}", during.proposals);
}

#[test]
fn a_dedication_needs_the_storage_to_form_groups_and_room_for_the_rest() {
    let mut config = PlannerConfig::default();
    config.imbalance.mode = PolicyMode::Off;
    // Without the storage's support, the decline says why no dedication.
    let input = valkey_cluster(&[(3, 5_000.0)]);
    let plan = run(&input, &config, &mut PlannerState::default(), 1_000, 3);
    assert!(plan.proposals.is_empty(), "{:?}", plan.proposals);
    assert!(
        plan.rejected.iter().any(|d| d.why.contains("dedicate w-0 to p3: the storage system does not dedicate")),
        "{:?}",
        plan.rejected
    );
    // The other nodes are too full to take w-0's other slots under the high watermark.
    let mut input = valkey_cluster(&[(3, 5_000.0), (12, 3_000.0), (24, 3_000.0), (5, 2_000.0)]);
    input.new_group_dedicates_owner = true;
    let plan = run(&input, &config, &mut PlannerState::default(), 1_000, 3);
    assert!(!plan.proposals.iter().any(|p| matches!(p.spec, ActionSpec::Group { .. })), "{:?}", plan.proposals);
    assert!(
        plan.rejected.iter().any(|d| d.why.contains("would put a receiver at")),
        "the decline names the full receivers: {:?}",
        plan.rejected
    );
    // A worker that is hot without one dominant slot (here: 30 slots of 150, all on w-0 while
    // the others are nearly as full) never gets handed to one of its ordinary slots.
    let mut input = valkey_cluster(&[]);
    for p in input.partitions.iter_mut().filter(|p| p.owner.as_str() == "w-0") {
        p.stats.ops_per_sec = 410.0;
    }
    input.workers[0].load.ops_per_sec = 4_100.0;
    for w in &mut input.workers[1..] {
        w.load.ops_per_sec += 3_300.0; // background the planner cannot move
    }
    input.new_group_dedicates_owner = true;
    let plan = run(&input, &config, &mut PlannerState::default(), 1_000, 3);
    assert!(!plan.proposals.iter().any(|p| matches!(p.spec, ActionSpec::Group { .. })), "{:?}", plan.proposals);
    assert!(
        plan.rejected.iter().any(|d| d.why.contains("under half, moving the rest away")),
        "the decline says why not: {:?}",
        plan.rejected
    );
    // A hot slot another node can take under the high watermark is moved, not given a node.
    let mut input = valkey_cluster(&[(1, 1_400.0), (4, 1_400.0), (7, 1_400.0)]);
    input.new_group_dedicates_owner = true;
    let plan = run(&input, &config, &mut PlannerState::default(), 1_000, 2);
    assert!(!plan.proposals.is_empty());
    assert!(plan.proposals.iter().all(|p| matches!(p.spec, ActionSpec::Move { .. })), "{:?}", plan.proposals);
}

#[test]
fn a_partition_over_its_own_limit_is_split_never_moved() {
    // w-0: p0 at 1.5x its limit and p1..p4 at 0.8 (42 % of the worker); w-1 and w-2 nearly
    // idle. Imbalance's ideal candidate is p0 (0.10 of w-0, nearest half the gap), but a move
    // cannot lower p0's demand against its own limit and would rest it for a cooldown: only
    // the others move. Imbalance engages at once, partition overload only after 5 windows, so
    // for the first passes p0 is over its limit and free.
    let input = cluster(&[15_000.0, 8_000.0, 8_000.0, 8_000.0, 8_000.0, 500.0, 500.0], &[0, 0, 0, 0, 0, 1, 2], 3, &[]);
    let mut config = PlannerConfig::default();
    config.partition_overload.hot_windows = 5;
    config.imbalance.hot_windows = 1;
    let mut state = PlannerState::default();
    let (mut moved, mut split_proposed, mut why_not) = (Vec::new(), false, Vec::new());
    for k in 0..6 {
        let plan = plan(&input, &config, &mut state, 1_000 + k * 1000);
        for p in &plan.proposals {
            match &p.spec {
                ActionSpec::Move { partition, .. } => moved.push(partition.as_str().to_owned()),
                ActionSpec::Split { partition, .. } if partition.as_str() == "p0" => split_proposed = true,
                _ => {}
            }
            why_not.extend(p.rejected_alternatives.iter().filter(|a| a.candidate == "move p0").map(|a| a.why.clone()));
        }
    }
    assert!(split_proposed, "p0 is split (no move put it in cooldown first): moved {moved:?}");
    assert!(!moved.is_empty(), "imbalance moved something");
    assert!(!moved.contains(&"p0".to_owned()), "p0 is never moved: {moved:?}");
    assert!(why_not.iter().any(|w| w.contains("over its own limit")), "{why_not:?}");
}

#[test]
fn an_overloaded_worker_that_serves_all_waits_for_the_imminent_cut_of_its_hot_partition() {
    // w-0 at 0.88 of capacity, over the high watermark (0.85) and serving all: p0 at 0.96 of
    // its limit (0.096 of w-0) is over its split threshold; its cut into pieces spread over
    // other workers takes at least half of it off (0.83). Partition overload waits 4 windows,
    // worker overload 1: without the wait it would stream p1.. off w-0 meanwhile.
    let mut loads = vec![9_600.0];
    loads.extend([8_700.0; 9]);
    loads.extend([500.0, 500.0]);
    let mut owners = vec![0; 10];
    owners.extend([1, 2]);
    let mut input = cluster(&loads, &owners, 3, &[]);
    input.multi_way_split = true;
    let mut config = PlannerConfig::default();
    config.partition_overload.hot_windows = 4;
    config.worker_overload.hot_windows = 1;
    config.imbalance.mode = PolicyMode::Off;
    let moves = |plan: &Plan| -> Vec<String> {
        plan.proposals
            .iter()
            .filter_map(|p| match &p.spec {
                ActionSpec::Move { partition, .. } => Some(partition.as_str().to_owned()),
                _ => None,
            })
            .collect()
    };
    let mut state = PlannerState::default();
    for k in 0..3 {
        let plan = plan(&input, &config, &mut state, 1_000 + k * 1000);
        assert!(plan.proposals.is_empty(), "pass {k}: {:?}", moves(&plan));
        let wait = plan.rejected.iter().find(|d| d.subject == "w-0").expect("w-0 declined");
        assert_eq!(wait.reason, DeclineReason::SplitFirst);
        assert!(
            wait.why.contains("partition p0 (0.10 of it) is over its own limit and about to be split"),
            "{}",
            wait.why
        );
    }
    // The fourth window: p0 is cut, its pieces spread.
    let cut = plan(&input, &config, &mut state, 4_000);
    assert!(
        matches!(&cut.proposals[0].spec, ActionSpec::SplitInto { partition, .. } if partition.as_str() == "p0"),
        "{:?}",
        cut.proposals[0].spec
    );

    // Where a split leaves both halves on the worker (no multi-way split), it does not wait.
    input.multi_way_split = false;
    let mut state = PlannerState::default();
    assert!(!moves(&plan(&input, &config, &mut state, 1_000)).is_empty());
    // Nor for a partition with no key sketch to cut it by.
    input.multi_way_split = true;
    input.partitions[0].stats.sketch = None;
    let mut state = PlannerState::default();
    assert!(!moves(&plan(&input, &config, &mut state, 1_000)).is_empty());

    // Nor does a worker that rejects: w-0 of 12k ops/s carries p0's 9,600 and p1's 2,500
    // (1.01); p0's cut would bring it to 0.61, but it rejects meanwhile. p1 moves.
    let mut input = cluster(&[9_600.0, 2_500.0, 500.0, 500.0], &[0, 0, 1, 2], 3, &[]);
    input.multi_way_split = true;
    input.workers[0].capacity.ops_per_sec = 12_000.0;
    let mut state = PlannerState::default();
    let rejecting = plan(&input, &config, &mut state, 1_000);
    assert_eq!(moves(&rejecting), ["p1"], "{:?}", rejecting.rejected);
}

#[test]
fn a_new_split_child_carries_its_expected_load_until_measured() {
    // p0 at 2.5x its limit peels a share into the side that keeps the id; the new side starts
    // with nothing measured. It must not be scattered (it is hot), not be moved, and it is
    // taken as hot for the split policy at once.
    let mut input = cluster(&[25_000.0, 1_000.0, 1_000.0], &[0, 1, 1], 2, &[]);
    let config = PlannerConfig::default();
    let mut state = PlannerState::default();
    let first = run(&input, &config, &mut state, 1_000, 2);
    let Some(ActionSpec::Split { split_key, .. }) = first.proposals.first().map(|p| &p.spec) else {
        panic!("a split of p0: {:?}", first.proposals)
    };
    // The layout after the split: p0 keeps [start, key), the child p9 has [key, end], no
    // measurements yet and no sketch.
    let mut child = input.partitions[0].clone();
    child.id = "p9".parse().expect("id");
    child.range.start = *split_key;
    child.stats = PartitionWindow::default();
    input.partitions[0].range.end = lb_common::ids::Key(split_key.0 - 1);
    input.partitions.push(child);
    let next = plan(&input, &config, &mut state, 3_000);
    assert!(
        !next.proposals.iter().any(|p| crate::planner::partitions_of(&p.spec).iter().any(|id| id.as_str() == "p9")),
        "the unmeasured hot child is neither scattered nor moved: {:?}",
        next.proposals
    );
    assert!(
        next.rejected.iter().any(|d| d.subject == "p9"
            && (d.why.contains("split child is itself hot") || d.why.contains("waiting for its first key sketch"))),
        "{:?}",
        next.rejected
    );
    let expected =
        state.expected_demand.iter().find(|e| e.partition.as_str() == "p9").expect("expected load kept").demand_ops;
    assert!(expected > 10_000.0, "the new side carries most of 25,000 ops/s: {expected}");
    // Once the expectation has expired the measurement rules again: a cool child is scattered.
    // (The load its split placed on it is still held, through its cooldown.)
    let later = plan(&input, &config, &mut state, 20_000);
    assert!(state.expected_demand.iter().all(|e| e.until_ms <= 20_000), "expired: {:?}", state.expected_demand);
    assert!(state.expected_demand.iter().all(|e| e.load_until_ms > 20_000), "held: {:?}", state.expected_demand);
    assert!(!later.rejected.iter().any(|d| d.subject == "p9" && d.why.contains("itself hot")), "{:?}", later.rejected);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Kept per layout (owners and hysteresis by position, `PlannerInput::layout`), the planner
    /// plans pass for pass what it plans looking every id up, across load changes and a layout
    /// change that drops, reorders and moves partitions.
    #[test]
    fn a_planner_kept_per_layout_plans_what_one_looking_ids_up_does(
        loads in prop::collection::vec(prop::collection::vec(0.0f64..14_000.0, 12), 8),
    ) {
        let owners = [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3];
        let first = cluster(&loads[0], &owners, 4, &[(3, "iso")]);
        // The second layout: p5 gone, the rest reversed, p0 on w-2.
        let mut second = first.clone();
        second.partitions.remove(5);
        second.partitions.reverse();
        let last = second.partitions.len() - 1;
        second.partitions[last].owner = wid(2);
        let config = PlannerConfig::default();
        let (mut by_position, mut by_id) = (PlannerState::default(), PlannerState::default());
        for (k, pass_loads) in loads.iter().enumerate() {
            let (mut input, layout) = if k < 4 { (first.clone(), 1) } else { (second.clone(), 2) };
            for p in &mut input.partitions {
                let i: usize = p.id.as_str()[1..].parse().expect("p<i>");
                p.stats.ops_per_sec = pass_loads[i].min(10_000.0);
                p.stats.rejected_per_sec = (pass_loads[i] - 10_000.0).max(0.0);
            }
            let now = 1_000 + k as i64 * 1_000;
            let kept = plan(&PlannerInput { layout: Some(layout + 1_000_000), ..input.clone() }, &config, &mut by_position, now);
            let looked_up = plan(&input, &config, &mut by_id, now);
            prop_assert_eq!(&kept.proposals, &looked_up.proposals, "pass {}", k);
            prop_assert_eq!(&kept.rejected, &looked_up.rejected, "pass {}", k);
            prop_assert_eq!(&by_position, &by_id, "pass {}", k);
        }
    }
}

#[test]
fn partition_hysteresis_is_kept_by_position_and_serialised_by_id() {
    let mut input = cluster(&[9_500.0, 9_500.0, 1_000.0], &[0, 0, 1], 2, &[]);
    input.layout = Some(7);
    let mut h = state::PartitionHysteresis::default();
    h.bind(&input);
    h.at_mut(1, &input.partitions[1].id).windows = 3;
    h.at_mut(2, &input.partitions[2].id).windows = 1;
    assert_eq!(h.at_mut(1, &input.partitions[1].id).windows, 3, "the same entry again");
    // A new layout: p2 first, p1 gone.
    let mut next = input.clone();
    next.partitions = vec![input.partitions[2].clone(), input.partitions[0].clone()];
    next.layout = Some(8);
    h.bind(&next);
    assert_eq!(h.at_mut(0, &next.partitions[0].id).windows, 1, "p2 found at its new position");
    assert_eq!(h.at_mut(1, &next.partitions[1].id).windows, 0, "p0 had none");
    h.retain(|x| x.windows > 0);
    assert_eq!(h.len(), 2, "p1 (3 windows) and p2 (1) are kept");
    assert_eq!(h.at_mut(0, &next.partitions[0].id).windows, 1, "positions survive the removal");
    let json = serde_json::to_value(&h).expect("serialise");
    assert_eq!(json["p1"]["windows"], 3);
    assert_eq!(json["p2"]["windows"], 1);
    let back: state::PartitionHysteresis = serde_json::from_value(json).expect("parse");
    assert_eq!(back, h);
}

proptest! {
    /// The multiplied bounds a destination scan decides on hold the divided ratio.
    #[test]
    fn a_ratio_lies_within_its_multiplied_bounds(
        worker_ops in 0.0f64..2e6, worker_bytes in 0.0f64..1e10, part_ops in 0.0f64..1e5, part_bytes in 0.0f64..1e9,
        cap_ops in prop_oneof![Just(0.0), 1.0f64..1e6], cap_bytes in prop_oneof![Just(0.0), 1.0f64..1e10],
    ) {
        let mut input = cluster(&[part_ops.min(10_000.0)], &[0], 2, &[]);
        input.partitions[0].stats.bytes_per_sec = part_bytes;
        input.partitions[0].limit = None;
        input.partitions[0].stats.ops_per_sec = part_ops;
        input.partitions[0].stats.rejected_per_sec = 0.0;
        input.workers[1].capacity = Capacity { ops_per_sec: cap_ops, bytes_per_sec: cap_bytes };
        input.workers[1].load = WorkerWindow { ops_per_sec: worker_ops, bytes_per_sec: worker_bytes, ..WorkerWindow::default() };
        let m = model::Model::build(&input, model::Streams::unthrottled(0.2), 0);
        let exact = m.ratio_with(1, 0, 1.0);
        let (lo, hi) = m.ratio_with_bounds(1, 0);
        prop_assert!(lo <= exact && exact <= hi, "{lo} <= {exact} <= {hi}");
    }
}

/// A topology that lists one id twice (a storage bug) must not break the positions: each
/// position gets an entry of its own, and dropping one leaves the other intact.
#[test]
fn partition_hysteresis_survives_a_duplicated_id() {
    let mut input = cluster(&[9_500.0, 9_500.0, 1_000.0], &[0, 0, 1], 2, &[]);
    input.partitions[1].id = input.partitions[0].id.clone();
    input.layout = Some(9);
    let mut h = state::PartitionHysteresis::default();
    h.bind(&input);
    h.at_mut(0, &input.partitions[0].id).windows = 2;
    h.at_mut(2, &input.partitions[2].id).windows = 5;
    // Re-bound by id (a state restored after a handover), both duplicates point at one entry.
    let mut restored: state::PartitionHysteresis =
        serde_json::from_value(serde_json::to_value(&h).expect("serialise")).expect("parse");
    restored.bind(&input);
    restored.at_mut(1, &input.partitions[1].id).last_ms = 1;
    restored.retain(|x| x.last_ms == 1);
    assert_eq!(restored.len(), 1);
    // The same layout again: positions 0 and 2 lost their entries and get fresh ones.
    restored.bind(&input);
    assert_eq!(restored.at_mut(0, &input.partitions[0].id).windows, 0);
    assert_eq!(restored.at_mut(2, &input.partitions[2].id).windows, 0);
    assert_eq!(restored.at_mut(1, &input.partitions[1].id).last_ms, 1);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The destination scan over the workers sorted by load ratio answers what the look at every
    /// worker answers (the coolest that fits, the counts at the cap and too hot, whether any has
    /// room), across capacities in two dimensions, zones (and workers without one), unhealthy,
    /// grouped and capped workers, ties, and each partition's own worker at its cap or not.
    #[test]
    fn the_sorted_destination_scan_answers_what_the_full_one_does(
        workers in prop::collection::vec((1u8..4, 0u8..2, 0u8..4, 0u8..10, 0u32..3, 0u8..6), 2..14),
        parts in prop::collection::vec((0.0f64..30_000.0, 0.0f64..2e8, 0usize..14), 1..40),
        cap in 1u32..3,
    ) {
        let n = workers.len();
        // And an idle partition, which adds nothing: its destinations tie with their ratio now.
        let parts: Vec<_> = parts.into_iter().chain([(0.0, 0.0, 0)]).collect();
        let loads: Vec<f64> = parts.iter().map(|p| p.0).collect();
        let owners: Vec<usize> = parts.iter().map(|p| p.2 % n).collect();
        let mut input = cluster(&loads, &owners, n, &[]);
        for (p, part) in input.partitions.iter_mut().zip(&parts) {
            p.stats.bytes_per_sec = part.1;
        }
        let zones = ["a", "b", "c"];
        for (w, &(cap_ops, bytes_cap, zone, health, _, group)) in input.workers.iter_mut().zip(&workers) {
            // Capacities repeat, so that ratios tie.
            w.capacity = Capacity { ops_per_sec: f64::from(cap_ops) * 50_000.0, bytes_per_sec: if bytes_cap == 0 { 0.0 } else { 5e8 } };
            w.zone = zones.get(usize::from(zone)).map(|z| lb_common::ids::ZoneId::new(*z).expect("id"));
            w.health = if health == 0 { Health::Down } else { Health::Healthy };
            w.group = (group == 0).then(|| GroupId::new("iso").expect("id"));
        }
        let mut config = PlannerConfig::default();
        config.caps.max_inflight_per_worker = cap;
        let model = Model::build(&input, model::Streams::unthrottled(config.caps.move_source_drain_ratio), 0);
        let groups: Vec<Option<GroupId>> = input.workers.iter().map(|w| w.group.clone()).collect();
        let mut pass = Pass {
            input: &input,
            config: &config,
            now_ms: 0,
            model,
            groups,
            zones: Zones::of(&input),
            splitting: vec![false; input.partitions.len()],
            plan: Plan::default(),
            proposed_this_pass: 0,
            destinations: Default::default(),
            recent_low: Vec::new(),
        };
        for (w, &(.., actions, _)) in workers.iter().enumerate() {
            pass.model.worker_actions[w] = actions;
        }
        let high = config.worker_overload.high_watermark_ratio;
        for p in 0..input.partitions.len() {
            let src_ratio = pass.model.worker_ratio(pass.model.owner[p] as usize);
            for max_after in [high, src_ratio.min(high), src_ratio, 1.0, f64::INFINITY] {
                let sorted = pass.home_sorted(p, None, max_after).expect("a shared-pool move with loads at or over zero");
                let mut all = rebalance::Scan::default();
                pass.scan_all(p, None, max_after, false, &mut all);
                prop_assert_eq!(sorted, all, "partition {} max_after {}", p, max_after);
            }
            // A move changes the model: the next scan sorts again and still agrees.
            if p % 3 == 0 {
                let to = (pass.model.owner[p] as usize + 1) % n;
                pass.model.apply_move(p, to);
            }
        }
    }
}

#[test]
fn a_partition_moved_a_moment_ago_is_still_split_when_it_goes_over_its_own_limit() {
    let config = PlannerConfig::default();
    let input = cluster(&[12_000.0, 1_000.0, 1_000.0, 1_000.0], &[0, 0, 1, 1], 2, &[]);
    let p0 = PartitionId::new("p0").expect("id");
    // A balancing move of p0 started its cooldown a few seconds ago.
    let mut moved = moved_state(&p0);
    let plan = run(&input, &config, &mut moved, 1_000, i64::from(config.partition_overload.hot_windows));
    assert!(
        plan.proposals.iter().any(|p| p.spec.kind() == ActionKind::Split && p.spec.partitions() == [&p0]),
        "split within the move's cooldown: {:?} / {:?}",
        plan.proposals,
        plan.rejected
    );
    assert!(!moved.moved_until_ms.contains_key(&p0), "the split's own cooldown replaces the move's");
    // The same cooldown from a split (or a harmful verdict's rest) holds it back.
    let mut split = PlannerState::default();
    split.cooldown_until_ms.insert(p0.clone(), 30_000);
    let plan = run(&input, &config, &mut split, 1_000, i64::from(config.partition_overload.hot_windows));
    assert!(plan.proposals.iter().all(|p| p.spec.partitions() != [&p0]), "{:?}", plan.proposals);
    assert!(
        plan.rejected.iter().any(|d| d.subject == "p0" && d.reason == DeclineReason::Cooldown),
        "{:?}",
        plan.rejected
    );
    let mut rested = moved_state(&p0);
    rested.penalize([&p0], Some(Policy::Imbalance), 40_000, 0);
    assert!(!rested.cooling_from_a_move_only(&p0, 1_000), "a harmful verdict's rest is a full cooldown");
}

fn moved_state(p: &PartitionId) -> PlannerState {
    let mut s = PlannerState::default();
    s.cooldown_until_ms.insert(p.clone(), 30_000);
    s.moved_until_ms.insert(p.clone(), 30_000);
    s
}

#[test]
fn the_cluster_wide_caps_grow_with_the_cluster_and_keep_their_floors() {
    let caps = config::CapsConfig::default();
    assert_eq!((caps.actions_per_pass(8), caps.inflight_cluster(8)), (8, 32), "a small cluster keeps the floors");
    assert_eq!((caps.actions_per_pass(1_000), caps.inflight_cluster(1_000)), (250, 250));
    assert_eq!(caps.inflight_cluster(10_000), 2_500);
    let absolute = config::CapsConfig { max_inflight_cluster_per_worker: 0.0, ..caps.clone() };
    assert_eq!(absolute.inflight_cluster(10_000), 32, "0 keeps the absolute cap");
    // Over the per-worker cap is refused, naming the field.
    let mut bad = PlannerConfig::default();
    bad.caps.max_actions_per_pass_per_worker = 3.0;
    let err = bad.validate().expect_err("over max_inflight_per_worker").to_string();
    assert!(err.contains("caps.max_actions_per_pass_per_worker"), "{err}");
    // On 40 workers (10 a pass) one pass proposes up to 10 splits, not 8.
    let loads: Vec<f64> = (0..40).map(|i| if i < 12 { 12_000.0 } else { 1_000.0 }).collect();
    let owners: Vec<usize> = (0..40).collect();
    let input = cluster(&loads, &owners, 40, &[]);
    let config = PlannerConfig::default();
    let plan =
        run(&input, &config, &mut PlannerState::default(), 1_000, i64::from(config.partition_overload.hot_windows));
    let splits = plan.proposals.iter().filter(|p| p.spec.kind() == ActionKind::Split).count();
    assert_eq!(splits, 10, "{:?}", plan.rejected.iter().map(|d| &d.why).collect::<Vec<_>>());
    assert!(
        plan.rejected.iter().any(|d| d.why.contains("max_actions_per_pass (10 for 40 workers)")),
        "{:?}",
        plan.rejected
    );
}

#[test]
fn balancing_leaves_a_quarter_of_the_cluster_cap_to_relief() {
    let config = PlannerConfig::default();
    // 24 of the 32 cluster-wide slots in flight (splits of partitions elsewhere).
    let busy = |input: &mut PlannerInput, n: usize| {
        input.in_flight = (0..n)
            .map(|i| InFlightAction {
                spec: ActionSpec::Split {
                    partition: PartitionId::new(format!("x{i}")).expect("id"),
                    split_key: Key(1),
                },
                started_at_ms: 0,
            })
            .collect();
    };
    // An imbalanced pool: w-0 at 0.6, the others at 0.1 (no partition over its limit).
    let mut skewed = cluster(
        &[9_000.0; 8].iter().chain(&[1_000.0; 8]).copied().collect::<Vec<_>>(),
        &[0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 3, 3],
        4,
        &[],
    );
    busy(&mut skewed, 24);
    let plan = run(&skewed, &config, &mut PlannerState::default(), 1_000, 12);
    assert!(plan.proposals.is_empty(), "{:?}", plan.proposals);
    assert!(
        plan.rejected.iter().any(|d| d.policy == Policy::Imbalance && d.why.contains("kept for relief")),
        "{:?}",
        plan.rejected
    );
    // A partition over its own limit still gets its split from the reserve.
    let mut hot = cluster(&[12_000.0, 1_000.0, 1_000.0, 1_000.0], &[0, 0, 1, 1], 4, &[]);
    busy(&mut hot, 31);
    let plan =
        run(&hot, &config, &mut PlannerState::default(), 1_000, i64::from(config.partition_overload.hot_windows));
    assert!(plan.proposals.iter().any(|p| p.spec.kind() == ActionKind::Split), "{:?}", plan.rejected);
    busy(&mut hot, 32);
    let plan =
        run(&hot, &config, &mut PlannerState::default(), 1_000, i64::from(config.partition_overload.hot_windows));
    assert!(plan.proposals.is_empty(), "the reserve is all there is: {:?}", plan.proposals);
}

#[test]
fn balancing_takes_from_the_worker_hot_for_a_while_not_the_one_that_heated_this_second() {
    // w-0 has stood at 0.68 of capacity, w-1 at 0.60, w-2 and w-3 at 0.20: an imbalance.
    let mut loads = vec![4_000.0; 17 + 15 + 5 + 5];
    let owners: Vec<usize> =
        [(0, 17), (1, 15), (2, 5), (3, 5)].iter().flat_map(|&(w, n)| std::iter::repeat_n(w, n)).collect();
    let before = cluster(&loads, &owners, 4, &[]);
    let config = PlannerConfig::default();
    let mut state = PlannerState::default();
    let windows = i64::from(config.imbalance.hot_windows);
    let quiet = run(&before, &config, &mut state, 1_000, windows - 1);
    assert!(quiet.proposals.is_empty(), "not engaged yet: {:?}", quiet.proposals);
    // This second three of w-1's partitions ramp to 8.5k each (a range heating up, under their
    // own limit): w-1 reads 0.735, the hottest now. Balancing moves from w-0, hot all along; the
    // heating partitions stay put for their own policy if they keep on.
    loads[17..20].fill(8_500.0);
    let heated = cluster(&loads, &owners, 4, &[]);
    let plan = run(&heated, &config, &mut state, 1_000 + windows * 1_000, 1);
    let moves: Vec<&Proposal> = plan.proposals.iter().filter(|p| p.policy == Policy::Imbalance).collect();
    assert!(!moves.is_empty(), "imbalance engaged: {:?}", plan.rejected);
    for m in &moves {
        let ActionSpec::Move { partition, .. } = &m.spec else { panic!("{:?}", m.spec) };
        let i: usize = partition.as_str()[1..].parse().expect("pN");
        assert_eq!(owners[i], 0, "balancing moved {partition} off w-{}: {}", owners[i], m.reason);
    }
    // Once w-1 has stood at 0.735 for the policy's windows, balancing takes from it too.
    let from_w1 = (1..=windows + 1).any(|k| {
        let later = run(&heated, &config, &mut state, 1_000 + (windows + k) * 1_000, 1);
        later.proposals.iter().any(|p| {
            p.policy == Policy::Imbalance
                && p.spec.partitions().iter().any(|id| owners[id.as_str()[1..].parse::<usize>().expect("pN")] == 1)
        })
    });
    assert!(from_w1, "w-1 is balanced once its load holds");
}

#[test]
fn a_worker_just_over_capacity_sheds_a_small_partition_that_ends_its_rejections() {
    // w-0 at 1.004 of capacity in 40 partitions of 2.5k (0.025 each); the others at 0.60. One
    // move brings it to 0.98: a gain of 0.025 less the 0.01 cost of its GiB, under
    // min_gain_ratio (0.02), but it ends the rejections on all 39 partitions left.
    let mut loads = vec![2_510.0; 40];
    let mut owners = vec![0; 40];
    for w in 1..4 {
        loads.extend([4_000.0; 15]);
        owners.extend([w; 15]);
    }
    let input = cluster(&loads, &owners, 4, &[]);
    let plan = run(&input, &PlannerConfig::default(), &mut PlannerState::default(), 1_000, 3);
    let moves: Vec<&Proposal> = plan.proposals.iter().filter(|p| p.policy == Policy::WorkerOverload).collect();
    assert!(!moves.is_empty(), "{:?}", plan.rejected);
    assert!(moves[0].predicted.source_after_ratio <= 1.0, "{:?}", moves[0].predicted);
}
