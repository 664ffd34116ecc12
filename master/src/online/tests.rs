//! The online core driven in virtual time, pass by pass, with the observations the live loop
//! would make: the three sequencing bugs that once took minute-long end-to-end runs to find.

use lb_common::ids::{ActionId, Key, WorkerId};
use lb_common::protocol::{ActionRecord, ActionRequest, ActionSpec, ActionState, Capacity, Origin};

use super::*;
use crate::planner::tests::wid;
use crate::planner::{PartitionWindow, PlannerInput, Policy, PolicyMode};

fn cluster(loads: &[f64], owners: &[usize], workers: usize) -> PlannerInput {
    crate::planner::tests::cluster(loads, owners, workers, &[])
}

/// A partition's window at `demand` ops/s: served up to its 10k limit, the rest rejected.
fn window(demand: f64) -> PartitionWindow {
    cluster(&[demand], &[0], 1).partitions[0].stats.clone()
}

/// Worker loads as the table reads them: the sum of their partitions' windows.
fn sum_worker_loads(input: &mut PlannerInput) {
    for w in &mut input.workers {
        w.load.ops_per_sec = input.partitions.iter().filter(|p| p.owner == w.id).map(|p| p.stats.ops_per_sec).sum();
    }
}

fn config() -> OnlineConfig {
    let mut config = OnlineConfig::default();
    // Worker overload alone decides in these layouts; imbalance would add moves of its own.
    config.planner.imbalance.mode = PolicyMode::Off;
    config
}

/// The window the live loop would use (the analyzer's 5 s).
const WINDOW_MS: i64 = 5_000;

/// One pass at `now_ms` over `input`, with `updates` from the ops server.
fn pass(core: &mut OnlineCore, input: &mut PlannerInput, updates: Vec<ActionUpdate>, now_ms: i64) -> PassOutput {
    step(core, input, &config(), updates, Vec::new(), now_ms)
}

/// One pass over `input` with everything the loop would have observed.
fn step(
    core: &mut OnlineCore,
    input: &mut PlannerInput,
    config: &OnlineConfig,
    updates: Vec<ActionUpdate>,
    manual: Vec<ManualRequest>,
    now_ms: i64,
) -> PassOutput {
    let observation = Observation {
        window_end_ms: now_ms,
        window_ms: WINDOW_MS,
        input,
        evaluation: EvaluationView::None,
        datasets: &[],
        dataset_usage: &[],
        updates,
        approvals: Vec::new(),
        manual,
    };
    core.step(observation, config, now_ms)
}

/// Passes one second apart from `t0_ms` until one submits something; returns it and its time.
fn first_submission(core: &mut OnlineCore, input: &mut PlannerInput, t0_ms: i64) -> (ActionRecord, i64) {
    for k in 0..10 {
        let now = t0_ms + k * 1000;
        let out = pass(core, input, Vec::new(), now);
        if let Some(request) = out.submissions().next() {
            let record = ActionRecord {
                request: request.clone(),
                state: ActionState::Queued,
                submitted_by: "master".into(),
                created_at_ms: now,
                started_at_ms: None,
                finished_at_ms: None,
                operation_id: None,
                failure: None,
            };
            return (record, now);
        }
    }
    panic!("nothing was submitted in 10 passes");
}

fn succeeded(mut record: ActionRecord, at_ms: i64) -> ActionUpdate {
    record.state = ActionState::Succeeded;
    record.started_at_ms = Some(record.created_at_ms);
    record.finished_at_ms = Some(at_ms);
    ActionUpdate::Record { record: Box::new(record), topology: None }
}

/// w-0 at 0.90 of capacity: one partition of 15k and fifteen of 5k; moving the 15k one brings
/// it to 0.75, the low watermark. w-1 at 0.40, w-2 at 0.08.
fn overloaded_worker() -> PlannerInput {
    let mut loads = vec![15_000.0];
    let mut owners = vec![0];
    loads.extend([5_000.0; 15]);
    owners.extend([0; 15]);
    loads.extend([8_000.0; 5]);
    owners.extend([1; 5]);
    loads.push(8_000.0);
    owners.push(2);
    let mut input = cluster(&loads, &owners, 3);
    // The 15k partition is 1.5x its limit on paper: keep it within its limit so worker
    // overload (not partition overload) acts on it.
    input.partitions[0].limit = Some(Capacity { ops_per_sec: 20_000.0, bytes_per_sec: 1e12 });
    input.partitions[0].stats = PartitionWindow { rejected_per_sec: 0.0, ops_per_sec: 15_000.0, ..window(15_000.0) };
    sum_worker_loads(&mut input);
    input
}

fn moves_off(out: &PassOutput, input: &PlannerInput, worker: &WorkerId) -> Vec<String> {
    out.submissions()
        .filter(|r| {
            matches!(&r.spec, ActionSpec::Move { partition, .. }
                if input.partitions.iter().any(|p| &p.id == partition && &p.owner == worker))
        })
        .map(|r| format!("{:?}", r.spec))
        .collect()
}

/// Bug 1: a move the ops server reports finished while the master's topology still shows the
/// partition on its source. Planned on that stale layout, the source looked as hot as before
/// and a second partition left it. The core plans such a move as still in flight.
#[test]
fn a_finished_move_the_topology_does_not_show_yet_is_planned_as_in_flight() {
    let mut core = OnlineCore::new(&config(), 0);
    let mut input = overloaded_worker();
    let (record, at) = first_submission(&mut core, &mut input, 1_000);
    let ActionSpec::Move { partition, to_worker, .. } = &record.request.spec else { panic!("a move: {record:?}") };
    assert_eq!((partition.as_str(), to_worker.as_str()), ("p0", "w-2"), "{record:?}");
    // A second later the ops server lists it as done; the topology read (every 5 s) still
    // shows p0 on w-0 and the window still has w-0 at 0.90.
    let mut stale = overloaded_worker();
    let out = pass(&mut core, &mut stale, vec![succeeded(record, at + 800)], at + 1_000);
    assert_eq!(out.ended.len(), 1, "settled first");
    assert!(
        stale
            .in_flight
            .iter()
            .any(|a| matches!(&a.spec, ActionSpec::Move { partition, .. } if partition.as_str() == "p0")),
        "the finished move is planned as in flight: {:?}",
        stale.in_flight
    );
    let w0 = wid(0);
    assert_eq!(moves_off(&out, &stale, &w0), Vec::<String>::new(), "nothing else leaves w-0");
}

/// Bug 2: a move that ended after the ops server's in-flight list was read and before its
/// record was: no longer in flight, not settled, and the topology shows it done while the
/// window still counts its load on the source. Judged on that, a node already relieved lost a
/// third hot slot. The core counts such a move as ending now and corrects both workers.
#[test]
fn a_move_that_ended_between_reads_is_taken_off_its_source() {
    let mut core = OnlineCore::new(&config(), 0);
    let mut input = overloaded_worker();
    let (record, at) = first_submission(&mut core, &mut input, 1_000);
    // The record read still says running; the in-flight list no longer has it; the topology
    // shows p0 on w-2; the 5 s window still has all of p0's load on w-0 and none on w-2.
    let mut running = record.clone();
    running.state = ActionState::Running;
    let mut moved = overloaded_worker();
    moved.partitions[0].owner = wid(2);
    let out = pass(
        &mut core,
        &mut moved,
        vec![ActionUpdate::Record { record: Box::new(running), topology: None }],
        at + 1_000,
    );
    assert!(out.ended.is_empty(), "not settled: the record said running");
    let w = |i: usize| moved.workers[i].load.ops_per_sec;
    assert!((w(0) - 75_000.0).abs() < 1.0 && (w(2) - 23_000.0).abs() < 1.0, "corrected: {} {}", w(0), w(2));
    let w0 = wid(0);
    assert_eq!(moves_off(&out, &moved, &w0), Vec::<String>::new(), "w-0 is relieved already");
}

/// p0 at 2.5x its limit on w-0, which carries 8 more partitions of 7k (0.66 in all); w-1 cool.
fn hot_partition_on_a_busy_worker() -> PlannerInput {
    let mut loads = vec![25_000.0];
    loads.extend([7_000.0; 8]);
    loads.extend([1_000.0; 2]);
    let mut owners = vec![0; 9];
    owners.extend([1, 1]);
    cluster(&loads, &owners, 2)
}

/// Bug 3: the new side of a split starts with next to nothing measured. Read as cool, it was
/// scattered to another worker (and so put in a cooldown while it rejected, its own split held
/// back). The core keeps the demand the split left on it until the master has measured it.
#[test]
fn a_hot_young_split_child_is_not_scattered() {
    let mut core = OnlineCore::new(&config(), 0);
    let mut input = hot_partition_on_a_busy_worker();
    let (record, at) = first_submission(&mut core, &mut input, 1_000);
    let ActionSpec::Split { partition, split_key } = record.request.spec.clone() else { panic!("a split: {record:?}") };
    assert_eq!(partition.as_str(), "p0");
    assert_eq!(record.request.origin, Origin::Online);
    // The split is done and the topology shows both sides; the new side p99 has one partial
    // second measured (a quarter of what it carries) and no sketch yet.
    let mut child = input.partitions[0].clone();
    child.id = "p99".parse().expect("id");
    child.range.start = split_key;
    child.stats = PartitionWindow { sketch: None, ..window(4_000.0) };
    input.partitions[0].range.end = Key(split_key.0 - 1);
    input.partitions.push(child);
    let out = pass(&mut core, &mut input, vec![succeeded(record, at + 500)], at + 1_000);
    let touched: Vec<String> = out
        .submissions()
        .filter(|r| crate::planner::partitions_of(&r.spec).iter().any(|id| id.as_str() == "p99"))
        .map(|r| format!("{:?}", r.spec))
        .collect();
    assert_eq!(touched, Vec::<String>::new(), "the unmeasured hot child stays where the split put it");
    assert!(
        core.planner_state().expected_demand.iter().any(|e| e.partition.as_str() == "p99" && e.demand_ops > 10_000.0),
        "it carries the split's demand: {:?}",
        core.planner_state().expected_demand
    );
}

/// A split child that cannot be scattered yet is tried again on later passes; one proposed in dry
/// run waits for approval, and when the policy is edited to `auto` the pending proposal is
/// withdrawn and the next pass moves the child on its own (it was once offered a single time,
/// then never again, and the edit found nothing left to act on).
#[test]
fn a_waiting_scatter_is_retried_and_a_dry_run_one_acts_once_its_policy_is_auto() {
    let auto = config();
    let mut core = OnlineCore::new(&auto, 0);
    let mut input = hot_partition_on_a_busy_worker();
    let (record, at) = first_submission(&mut core, &mut input, 1_000);
    let ActionSpec::Split { split_key, .. } = record.request.spec.clone() else { panic!("a split: {record:?}") };
    let mut child = input.partitions[0].clone();
    child.id = "p99".parse().expect("id");
    child.range.start = split_key;
    child.stats = window(5_000.0);
    input.partitions[0].range.end = Key(split_key.0 - 1);
    input.partitions[0].stats = window(5_000.0);
    input.partitions.push(child);
    sum_worker_loads(&mut input);
    let moves_of_child = |out: &PassOutput| {
        out.submissions()
            .filter(|r| matches!(&r.spec, ActionSpec::Move { partition, .. } if partition.as_str() == "p99"))
            .count()
    };
    // From here the policy is in dry run. Young, the child carries the split's expected demand:
    // hot, so its scatter waits (and its own split is only offered).
    let mut dry_run = auto.clone();
    dry_run.planner.partition_overload.mode = PolicyMode::DryRun;
    let out = step(&mut core, &mut input, &dry_run, vec![succeeded(record, at + 500)], Vec::new(), at + 1_000);
    assert_eq!(moves_of_child(&out), 0);
    assert!(
        out.plan.rejected.iter().any(|d| d.subject == "p99" && d.why.contains("itself hot")),
        "{:?}",
        out.plan.rejected
    );
    assert_eq!(core.planner_state().scatter.len(), 1, "still queued");
    // Measured cool once the expectation lapses: offered for approval every pass, as one
    // pending proposal.
    for k in 0..2 {
        let out = step(&mut core, &mut input, &dry_run, Vec::new(), Vec::new(), at + 12_000 + k * 1000);
        assert_eq!(out.submissions().count(), 0, "dry run acts on nothing");
    }
    let offered: Vec<_> = core.pending().iter().filter(|p| p.proposal.reason.contains("scatter")).collect();
    assert_eq!(offered.len(), 1, "{:?}", core.pending());
    // The edit to auto: the pending proposal is withdrawn and the child moves.
    let out = step(&mut core, &mut input, &auto, Vec::new(), Vec::new(), at + 14_000);
    assert_eq!(moves_of_child(&out), 1, "{:?}", out.plan.rejected);
    assert!(core.pending().is_empty(), "withdrawn: {:?}", core.pending());
    assert!(core.planner_state().scatter.is_empty(), "done: {:?}", core.planner_state().scatter);
}

/// A harmful verdict rests its partition in the same pass that found it: the planner never
/// proposes on it, and the revert goes first.
#[test]
fn a_harmful_move_is_reverted_before_anything_is_planned_on_its_partition() {
    let mut config = config();
    config.evaluation.revert_harmful_moves = true;
    let mut core = OnlineCore::new(&config, 0);
    // A move of p0 from w-0 to w-1 was made by hand at 0.50 / 0.45 and made w-1 the hottest.
    let before = cluster(&[5_000.0, 45_000.0 / 9.0, 45_000.0 / 9.0], &[0, 1, 2], 3);
    let spec = ActionSpec::Move { partition: "p0".parse().expect("id"), to_worker: wid(1), max_bytes_per_sec: None };
    let id: ActionId = "manual-1".parse().expect("id");
    core.track(id.clone(), &spec, Some(Policy::Imbalance), &before, 1_000);
    let mut after = cluster(&[9_000.0, 9_000.0, 1_000.0], &[1, 1, 2], 3);
    let update = ActionUpdate::Finished { id, applied: true, at_ms: 2_000 };
    let due = 2_000 + (config.evaluation.settle_secs + config.evaluation.window_secs) as i64 * 1000;
    let observation = Observation {
        window_end_ms: due,
        window_ms: WINDOW_MS,
        input: &mut after,
        evaluation: EvaluationView::None,
        datasets: &[],
        dataset_usage: &[],
        updates: vec![update],
        approvals: Vec::new(),
        manual: Vec::new(),
    };
    core.step(observation, &config, 2_000);
    assert!(core.evaluation_due(&config, due));
    let observation = Observation {
        window_end_ms: due,
        window_ms: WINDOW_MS,
        input: &mut after.clone(),
        evaluation: EvaluationView::Window(&after),
        datasets: &[],
        dataset_usage: &[],
        updates: Vec::new(),
        approvals: Vec::new(),
        manual: Vec::new(),
    };
    let out = core.step(observation, &config, due);
    assert_eq!(out.evaluations.len(), 1);
    let submitted: Vec<&ActionSpec> = out.submissions().map(|r| &r.spec).collect();
    let back = ActionSpec::Move { partition: "p0".parse().expect("id"), to_worker: wid(0), max_bytes_per_sec: None };
    assert_eq!(submitted.first(), Some(&&back), "the revert goes first: {submitted:?}");
    assert_eq!(
        submitted.iter().filter(|s| crate::planner::partitions_of(s).iter().any(|id| id.as_str() == "p0")).count(),
        1,
        "nothing else on p0 in the pass that found the harm: {submitted:?}"
    );
    assert!(core.planner_state().in_cooldown(&"p0".parse().expect("id"), due).is_some(), "p0 rests");
}

/// A move of p0 from w-0 to w-1 made by hand on `before` and finished at 2 s: the pass that
/// judges it on `after` once it is due (after the pass that learned it ended).
fn judge_a_manual_move_of_p0_to_w1(config: &OnlineConfig, before: &PlannerInput, after: &PlannerInput) -> PassOutput {
    let mut core = OnlineCore::new(config, 0);
    let spec = ActionSpec::Move { partition: "p0".parse().expect("id"), to_worker: wid(1), max_bytes_per_sec: None };
    let id: ActionId = "manual-1".parse().expect("id");
    core.track(id.clone(), &spec, Some(Policy::Imbalance), before, 1_000);
    let update = ActionUpdate::Finished { id, applied: true, at_ms: 2_000 };
    let due = 2_000 + (config.evaluation.settle_secs + config.evaluation.window_secs) as i64 * 1000;
    let mut observe = |input: &mut PlannerInput, evaluation: Option<&PlannerInput>, updates, at| {
        let observation = Observation {
            window_end_ms: at,
            window_ms: WINDOW_MS,
            input,
            evaluation: evaluation.map_or(EvaluationView::None, EvaluationView::Window),
            datasets: &[],
            dataset_usage: &[],
            updates,
            approvals: Vec::new(),
            manual: Vec::new(),
        };
        core.step(observation, config, at)
    };
    observe(&mut after.clone(), None, vec![update], 2_000);
    observe(&mut after.clone(), Some(after), Vec::new(), due)
}

/// Safety at scale (#25): the move back of a harmful move is load put somewhere too. When the
/// source has filled up since, the revert is not sent, and the evaluation says why.
#[test]
fn a_harmful_move_is_not_moved_back_onto_a_source_that_filled_up() {
    let mut config = config();
    config.evaluation.revert_harmful_moves = true;
    let owners = |p0: usize| [vec![p0], vec![1; 9], vec![0; 10]].concat();
    // p0 (10k) left w-0 at 0.50 for w-1, which then carried 1.00: the hotspot moved (harmful).
    let loads = |rest: f64| [vec![10_000.0; 10], vec![rest; 10]].concat();
    let before = cluster(&loads(4_000.0), &owners(0), 3);
    // Meanwhile w-0's own partitions grew to 0.95 of it: p0 back would put it at 1.05.
    let after = cluster(&loads(9_500.0), &owners(1), 3);
    let out = judge_a_manual_move_of_p0_to_w1(&config, &before, &after);
    let [e] = out.evaluations.as_slice() else { panic!("{:?}", out.evaluations) };
    assert_eq!(e.judgement.verdict, crate::evaluation::Verdict::Harmful, "{e:?}");
    assert_eq!(e.revert, None, "{e:?}");
    assert!(e.judgement.why.contains("not moved back: destination overloaded: the move lands on w-0"), "{e:?}");
    let back = ActionSpec::Move { partition: "p0".parse().expect("id"), to_worker: wid(0), max_bytes_per_sec: None };
    assert!(out.submissions().all(|r| r.spec != back), "no move back");
}

/// Safety at scale (#25): the move back goes out first, and what the planner proposes in the
/// same pass counts it where it lands: nothing else is moved onto the worker it refills.
#[test]
fn the_planner_counts_a_move_back_of_its_pass_where_it_lands() {
    let mut config = config();
    config.evaluation.revert_harmful_moves = true;
    config.planner.worker_overload.hot_windows = 1;
    // On 100k workers: p0 (10k) left w-0 (0.76) for w-1 (0.78), which then carried 0.88: the
    // hotspot moved (harmful). Without p0, w-0 is the cool place, at 0.66.
    let owners = |p0: usize| [vec![p0], vec![0; 11], vec![1; 13]].concat();
    let loads = [vec![10_000.0], vec![6_000.0; 24]].concat();
    let before = cluster(&loads, &owners(0), 2);
    let after = cluster(&loads, &owners(1), 2);
    let out = judge_a_manual_move_of_p0_to_w1(&config, &before, &after);
    let [e] = out.evaluations.as_slice() else { panic!("{:?}", out.evaluations) };
    assert_eq!(e.judgement.verdict, crate::evaluation::Verdict::Harmful, "{e:?}");
    let submitted: Vec<&ActionSpec> = out.submissions().map(|r| &r.spec).collect();
    let back = ActionSpec::Move { partition: "p0".parse().expect("id"), to_worker: wid(0), max_bytes_per_sec: None };
    assert_eq!(submitted.first(), Some(&&back), "the revert goes first: {submitted:?}");
    // With p0 on its way back, w-1 is at 0.78 again: nothing of it is moved to w-0 as well.
    let onto_w0: Vec<&&ActionSpec> = submitted[1..]
        .iter()
        .filter(|s| matches!(s, ActionSpec::Move { to_worker, .. } if *to_worker == wid(0)))
        .collect();
    assert!(onto_w0.is_empty(), "nothing else lands on the worker the revert refills: {submitted:?}");
}

/// HA (#23): a leader that died between submitting an action and saving its state leaves a
/// successor no trace of it once it has finished (not in flight, not in the handover): the
/// successor rests its partitions from the ops server's record, for a cooldown from when it
/// finished, and so plans nothing on them at once.
#[test]
fn a_successor_rests_the_partitions_of_its_predecessors_finished_action() {
    let config = config();
    let mut core = OnlineCore::new(&config, 0);
    let split = ActionSpec::Split { partition: "p0".parse().expect("id"), split_key: Key(1 << 62) };
    let mut record = ActionRecord {
        request: ActionRequest {
            id: "lb-1000-1".parse().expect("id"),
            spec: split,
            origin: Origin::Online,
            policy: Some("partition_overload".to_owned()),
            reason: "hot".into(),
            actor_path: vec!["t".into()],
            leader_epoch: Some(7),
        },
        state: ActionState::Succeeded,
        submitted_by: "master".into(),
        created_at_ms: 9_000,
        started_at_ms: Some(9_100),
        finished_at_ms: Some(10_000),
        operation_id: None,
        failure: None,
    };
    let cooldown_ms = (config.planner.caps.cooldown_secs * 1000) as i64;
    assert!(core.rest_after_predecessor(&record, &config, 12_000));
    let p0 = "p0".parse().expect("id");
    assert_eq!(core.planner_state().in_cooldown(&p0, 12_000), Some(10_000 + cooldown_ms));
    assert!(!core.rest_after_predecessor(&record, &config, 12_000), "once");
    // Not once its cooldown is over, not another system's action, not one that failed.
    let mut fresh = OnlineCore::new(&config, 0);
    assert!(!fresh.rest_after_predecessor(&record, &config, 10_000 + cooldown_ms));
    record.state = ActionState::Failed;
    assert!(!fresh.rest_after_predecessor(&record, &config, 12_000));
    record.state = ActionState::Succeeded;
    record.request.id = "manual-1".parse().expect("id");
    assert!(!fresh.rest_after_predecessor(&record, &config, 12_000));
}

/// One pass with the SREs' manual requests.
fn manual_pass(core: &mut OnlineCore, input: &mut PlannerInput, manual: Vec<ManualRequest>, now_ms: i64) -> PassOutput {
    step(core, input, &config(), Vec::new(), manual, now_ms)
}

fn by_hand(key: &str, spec: ActionSpec, dry_run: bool) -> ManualRequest {
    ManualRequest { key: key.to_owned(), spec, reason: "drill".to_owned(), requested_by: "sre".to_owned(), dry_run }
}

/// A manual action is checked against the view (the refusal names the field), predicted like
/// a policy's, and submitted as `manual` on the SRE's fair-queue path and tracked for
/// evaluation; a dry run only predicts.
#[test]
fn a_manual_action_is_checked_predicted_submitted_and_tracked() {
    let mut core = OnlineCore::new(&config(), 0);
    let mut input = cluster(&[6_000.0, 2_000.0, 2_000.0], &[0, 0, 1], 2);
    sum_worker_loads(&mut input);
    let p0 = input.partitions[0].clone();
    let outside = ActionSpec::Split { partition: p0.id.clone(), split_key: p0.range.start };
    let to_self = ActionSpec::Move { partition: p0.id.clone(), to_worker: wid(0), max_bytes_per_sec: None };
    let dry = ActionSpec::Move { partition: p0.id.clone(), to_worker: wid(1), max_bytes_per_sec: None };
    let out = manual_pass(
        &mut core,
        &mut input,
        vec![by_hand("m1", outside, false), by_hand("m2", to_self, false), by_hand("m3", dry.clone(), true)],
        1_000,
    );
    let results: Vec<_> =
        out.manual.iter().map(|(k, r)| (k.as_str(), r.as_ref().map_err(|e| e.field.as_str()))).collect();
    assert_eq!(results[0].1.as_ref().err(), Some(&"spec.split_key"), "{results:?}");
    assert_eq!(results[1].1.as_ref().err(), Some(&"spec.to_worker"), "{results:?}");
    let predicted = &results[2].1.as_ref().expect("the dry run fits").predicted;
    assert!((predicted.source_before_ratio - 0.08).abs() < 1e-9, "w-0 carries 8k of 100k: {predicted:?}");
    assert!((predicted.source_after_ratio - 0.02).abs() < 1e-9, "{predicted:?}");
    assert_eq!(predicted.dest_after_ratio.map(|r| (r * 100.0).round()), Some(8.0), "{predicted:?}");
    assert_eq!(out.submissions().count(), 0, "nothing refused or dry is submitted");

    let out = manual_pass(&mut core, &mut input, vec![by_hand("m4", dry, false)], 2_000);
    let proposal = out.manual[0].1.as_ref().expect("fits");
    assert_eq!((proposal.origin, proposal.policy), (Origin::Manual, Policy::Manual));
    let submitted: Vec<_> = out
        .commands
        .iter()
        .filter_map(|c| match c {
            Command::Submit { request, approval } => Some((request, approval.as_deref())),
            _ => None,
        })
        .collect();
    assert_eq!(submitted.len(), 1);
    let (request, approval) = submitted[0];
    assert_eq!(approval, Some("m4"), "the reply waits on the submission");
    assert_eq!((request.origin, request.policy.as_deref()), (Origin::Manual, None));
    assert_eq!(request.actor_path, ["manual", "sre"]);
    assert!(request.reason.starts_with("drill (by hand, sre)"), "{}", request.reason);
    assert_eq!(core.open_actions(), vec![request.id.clone()], "tracked for settling and evaluation");
    assert!(core.planner_state().in_cooldown(&p0.id, 2_000).is_some(), "its partition rests like after any action");
    input.in_flight.push(crate::planner::InFlightAction { spec: request.spec.clone(), started_at_ms: 2_000 });
    let again = ActionSpec::Move { partition: p0.id.clone(), to_worker: wid(1), max_bytes_per_sec: None };
    let out = manual_pass(&mut core, &mut input, vec![by_hand("m5", again, true)], 3_000);
    let refusal = out.manual[0].1.as_ref().expect_err("busy");
    assert!(refusal.message.contains("in flight"), "{refusal}");
}

/// A rejected dry-run proposal is dropped and not offered again while the planner keeps
/// proposing it, until the approval TTL has passed.
#[test]
fn a_rejected_proposal_is_not_offered_again_within_the_ttl() {
    let mut config = config();
    config.planner.partition_overload.mode = PolicyMode::DryRun;
    let mut core = OnlineCore::new(&config, 0);
    let mut input = cluster(&[14_000.0, 2_000.0], &[0, 1], 2);
    sum_worker_loads(&mut input);
    let mut now = 0;
    while core.pending().is_empty() {
        now += 1_000;
        assert!(now < 10_000, "a dry-run split is offered");
        step(&mut core, &mut input, &config, Vec::new(), Vec::new(), now);
    }
    let id = core.pending()[0].id.to_string();
    assert!(core.reject(&id, &config, now).is_ok());
    assert!(core.reject(&id, &config, now).is_err(), "gone after one rejection");
    for _ in 0..5 {
        now += 1_000;
        step(&mut core, &mut input, &config, Vec::new(), Vec::new(), now);
        assert!(core.pending().is_empty(), "not offered again at {now}");
    }
    now += (config.approval_ttl_secs * 1000) as i64;
    step(&mut core, &mut input, &config, Vec::new(), Vec::new(), now);
    assert_eq!(core.pending().len(), 1, "offered again once the TTL has passed");
}

/// A takeover with the predecessor's handover: the successor plans the finished move as in
/// flight (as its predecessor would have), where a core without it moves a second partition off
/// the same worker on the same stale window.
#[test]
fn a_successor_restored_from_the_handover_does_not_repeat_its_predecessors_move() {
    let mut old = OnlineCore::new(&config(), 0);
    let mut input = overloaded_worker();
    let (record, at) = first_submission(&mut old, &mut input, 1_000);
    let bytes = old.handover().encode().expect("encodes");
    let handover = Handover::decode(&bytes).expect("decodes");
    assert_eq!(handover, old.handover(), "survives the trip through etcd");

    let mut new = OnlineCore::new(&config(), 1);
    new.restore(handover);
    let mut stale = overloaded_worker();
    let out = pass(&mut new, &mut stale, vec![succeeded(record.clone(), at + 800)], at + 1_000);
    assert_eq!(out.ended.len(), 1, "the successor follows its predecessor's action to its end");
    assert!(moves_off(&out, &overloaded_worker(), &wid(0)).is_empty(), "{:?}", out.submissions().collect::<Vec<_>>());

    // Nor does it move the same partition again while the window still shows it hot (its
    // cooldown came with the handover) ...
    let ActionSpec::Move { partition, .. } = &record.request.spec else { panic!("a move: {record:?}") };
    for k in 2..12 {
        let out = pass(&mut new, &mut stale, Vec::new(), at + k * 1_000);
        assert!(out.submissions().all(|r| !crate::planner::partitions_of(&r.spec).contains(&partition)));
    }
    // ... which a core without the handover does, on the same view.
    let mut forgetful = OnlineCore::new(&config(), 2);
    let mut stale = overloaded_worker();
    let (again, _) = first_submission(&mut forgetful, &mut stale, at + 1_000);
    assert_eq!(again.request.spec, record.request.spec, "without the handover the same move is submitted twice");
}

/// The saved handover is compressed JSON, a fraction of the JSON's size (at 100,000 partitions
/// the JSON alone is over etcd's default 1.5 MiB request limit), and the plain JSON a master
/// before compression saved still decodes: a rolling upgrade hands over across the two.
#[test]
fn the_handover_is_saved_compressed_and_plain_json_from_an_older_master_still_decodes() {
    let mut core = OnlineCore::new(&config(), 0);
    let mut input = overloaded_worker();
    first_submission(&mut core, &mut input, 1_000);
    let handover = core.handover();
    assert!(!handover.tracked.is_empty() && !handover.planner.cooldown_until_ms.is_empty(), "{handover:?}");
    let json = serde_json::to_vec(&handover).expect("json");
    let encoded = handover.encode().expect("encodes");
    assert!(encoded.len() * 3 < json.len(), "{} bytes compressed from {}", encoded.len(), json.len());
    assert_eq!(Handover::decode(&encoded).expect("decodes"), handover);
    assert_eq!(Handover::decode(&json).expect("plain JSON decodes"), handover);
    let mut torn = encoded.clone();
    torn.truncate(encoded.len() / 2);
    let error = Handover::decode(&torn).expect_err("a torn frame is refused");
    assert!(error.starts_with("decompress"), "{error}");
    assert!(Handover::decode(b"{\"planner\":").expect_err("torn JSON").starts_with("decode"));
}

/// A takeover without the handover of an action still in flight at the ops server: adopted
/// once, its partition rests, and it is not proposed again.
#[test]
fn an_action_in_flight_at_the_ops_server_is_adopted_once_and_not_repeated() {
    let mut old = OnlineCore::new(&config(), 0);
    let mut input = overloaded_worker();
    let (record, at) = first_submission(&mut old, &mut input, 1_000);
    let ActionSpec::Move { partition, .. } = &record.request.spec else { panic!("a move: {record:?}") };

    let mut new = OnlineCore::new(&config(), 1);
    let mut input = overloaded_worker();
    let cfg = config();
    assert!(new.adopt(&record, &input, &cfg, at + 500));
    assert!(!new.adopt(&record, &input, &cfg, at + 600), "adopted once");
    assert_eq!(new.open_actions(), vec![record.request.id.clone()]);
    assert!(new.planner_state().in_cooldown(partition, at + 600).is_some());
    let manual = ActionRecord {
        request: ActionRequest { id: "m-1".parse().expect("id"), ..record.request.clone() },
        ..record.clone()
    };
    assert!(!new.adopt(&manual, &input, &cfg, at + 600), "only the masters' own actions");
    input.in_flight = vec![crate::planner::InFlightAction { started_at_ms: at, spec: record.request.spec.clone() }];
    let out = pass(&mut new, &mut input, Vec::new(), at + 1_000);
    assert!(
        out.submissions().all(|r| !crate::planner::partitions_of(&r.spec).contains(&partition)),
        "{:?}",
        out.submissions().collect::<Vec<_>>()
    );
}
