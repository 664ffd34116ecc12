//! The master's planner driving the testbed in virtual time through the public simulator
//! (`lb_launcher::sim`): one pass per simulated second, every `auto` proposal executed through
//! `Engine::submit`. Scenario files in, expected actions and relief times out; plus the
//! convergence tests (bounded rounds, a balanced end state, no actions on a balanced cluster).

use std::collections::HashMap;
use std::path::Path;

use lb_common::ids::{Key, PartitionId};
use lb_common::protocol::{ActionKind, ActionSpec};
use lb_launcher::sim::{Lb, Outcome, Proposed, Sim, partitions_of};
use lb_master::evaluation::{EvaluationConfig, Verdict};
use lb_master::online::OnlineConfig;
use lb_master::planner::{CrossZone, DeclineReason, Plan, PlannerConfig, Policy, PolicyMode};
use lb_testbed::scenario::Scenario;

use crate::support::scenarios_dir;

fn scenario_file(name: &str) -> Scenario {
    Scenario::load(&scenarios_dir().join(format!("{name}.toml"))).expect("scenario file loads")
}

fn scenario_file_text(name: &str) -> String {
    std::fs::read_to_string(scenarios_dir().join(format!("{name}.toml"))).expect("scenario file")
}

fn scenario_text(text: &str) -> Scenario {
    Scenario::parse(text, Path::new("test.toml")).expect("test scenario is valid")
}

/// One pass of the planner (the lb strategy always returns its plan).
fn tick(sim: &mut Sim) -> Plan {
    sim.tick().plan.expect("the lb strategy returns its plan every tick")
}

/// No pass gave a partition two actions, every partition's auto actions are at least the
/// cooldown apart, and every action that succeeded early enough to be judged has its evaluation.
fn assert_invariants(sim: &Sim) {
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
    let unsafe_actions = lb_launcher::sim::safety::against_no_balancer(sim);
    assert!(
        unsafe_actions.is_empty(),
        "actions overloaded the place they put load:\n{}",
        unsafe_actions.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n")
    );
    let eval = EvaluationConfig::default();
    let end = sim.engine.t_secs() as u64;
    let evaluated: HashMap<&str, &str> =
        sim.evaluations().iter().map(|e| (e.action_id.as_str(), e.judgement.verdict.as_str())).collect();
    let mut verdicts: HashMap<&str, usize> = HashMap::new();
    for a in &sim.actions {
        if let Outcome::Succeeded { at_secs } = a.outcome
            && at_secs + eval.settle_secs + eval.window_secs < end
        {
            let verdict = evaluated.get(a.action_id.as_str()).unwrap_or_else(|| {
                panic!("{} ({:?}, succeeded at {at_secs} s) has no evaluation", a.action_id, a.spec)
            });
            *verdicts.entry(verdict).or_default() += 1;
        }
    }
    eprintln!("  evaluations: {verdicts:?}");
    // Every evaluated action's stages run forward in time, and a detected one has its onset.
    for e in sim.evaluations() {
        let named = e.stages.named();
        let times: Vec<(&str, i64)> = named.iter().filter_map(|&(n, t)| t.map(|t| (n, t))).collect();
        assert!(
            times.windows(2).all(|w| w[0].1 <= w[1].1),
            "{} ({:?}): stages out of order: {times:?}",
            e.action_id,
            e.spec
        );
        assert_eq!(
            e.stages.onset_ms.is_some(),
            e.stages.detected_ms.is_some(),
            "{} ({}): {:?}",
            e.action_id,
            e.spec,
            e.stages
        );
        assert!(e.stages.finished_ms.is_some() && e.stages.visible_ms.is_some(), "{}: {:?}", e.action_id, e.stages);
    }
    // A move's cooldown holds back the next move, not the split of a partition over its own
    // limit (a move does not change that demand).
    let cooldown = PlannerConfig::default().caps.cooldown_secs;
    let mut last: HashMap<String, (u64, ActionKind)> = HashMap::new();
    for (t, p) in sim.proposals.iter().filter(|(_, p)| p.mode == PolicyMode::Auto) {
        let kind = p.spec.kind();
        for id in partitions_of(&p.spec) {
            if let Some((prev, prev_kind)) = last.insert(id.to_string(), (*t, kind))
                && !(prev_kind == ActionKind::Move && kind == ActionKind::Split)
            {
                assert!(t - prev >= cooldown, "{id} acted on at {prev} s and again at {t} s: {}", p.reason);
            }
        }
    }
}

/// Longest run of consecutive seconds with rejections at or over `share` of demand, and the
/// first second of the first such run.
fn longest_rejection_episode(sim: &Sim, from: u64, share: f64) -> (u64, Option<u64>) {
    let (mut longest, mut run, mut first) = (0, 0, None);
    for t in sim.ticks.iter().filter(|t| t.t_secs >= from) {
        if t.demand > 0.0 && t.rejected / t.demand >= share {
            run += 1;
            first.get_or_insert(t.t_secs);
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    (longest, first)
}

fn small_cluster(workers: u32, partitions: u32, bytes: u64, extra: &str) -> Scenario {
    scenario_text(&format!(
        r#"
name = "test"
seed = 42
[cluster]
workers = {workers}
worker_ops_per_sec = 100000
worker_bytes_per_sec = 1e9
partition_limit_ops_per_sec = 10000
partition_limit_bytes_per_sec = 1e9
[[tables]]
tenant = "acme"
table = "orders"
partitions = {partitions}
stored_bytes_per_partition = {bytes}
{extra}
"#
    ))
}

#[test]
fn hot_range_surge_is_relieved_within_5_s_and_ends_balanced() {
    let mut sim = Sim::lb(&scenario_file("hot-range-surge"));
    sim.run_until(2400);
    let (longest, first) = longest_rejection_episode(&sim, 0, 0.01);
    let last = sim.ticks.last().copied().expect("ticks");
    eprintln!(
        "hot-range-surge: longest episode of rejections >= 1 % of demand: {longest} s (first at {first:?}); splits {}, moves {}, groups {}; final pool max/mean {:.3} (max {:.3}); submit errors {}",
        sim.proposed(ActionKind::Split),
        sim.proposed(ActionKind::Move),
        sim.proposed(ActionKind::Group),
        last.pool_max / last.pool_mean,
        last.pool_max,
        sim.submit_errors.len()
    );
    for t in sim.ticks.iter().filter(|t| t.demand > 0.0 && t.rejected / t.demand >= 0.01) {
        eprintln!(
            "  t={} rejected {:.0} of {:.0} ({:.1} %), pool max {:.2}",
            t.t_secs,
            t.rejected,
            t.demand,
            t.rejected / t.demand * 100.0,
            t.pool_max
        );
    }
    for (t, p) in sim.proposals.iter().filter(|(t, _)| (300..320).contains(t)) {
        eprintln!("  t={t} {:?}: {}", p.spec, p.reason);
    }
    assert!(sim.submit_errors.is_empty(), "{:?}", sim.submit_errors);
    assert!(longest <= 5, "rejections >= 1 % of demand lasted {longest} s");
    assert!(sim.proposed(ActionKind::Split) >= 2, "the hot range was split");
    assert_invariants(&sim);
    assert!(last.pool_max / last.pool_mean <= 1.10, "final max/mean {}", last.pool_max / last.pool_mean);
    // The first split's time from the hot range's first hot second to its relief, stage by
    // stage: virtual time has no collection, submission or topology lag, so what is left is
    // the hysteresis and the split's own run (its pieces' copy to other workers).
    let first = sim
        .evaluations()
        .iter()
        .filter(|e| matches!(e.spec, ActionSpec::Split { .. } | ActionSpec::SplitInto { .. }))
        .min_by_key(|e| e.stages.proposed_ms)
        .expect("the first split was evaluated");
    eprintln!("  first split's stages: {}", first.stages.describe());
    let s = first.stages;
    assert!(s.onset_ms.is_some() && s.relieved_ms.is_some(), "the first split was detected and relieved: {s:?}");
}

#[test]
fn a_split_whose_hot_range_stops_right_after_is_inconclusive_not_effective() {
    // The clients of the hot range go away 3 s after the split: every ratio falls, and a naive
    // evaluation would call that the best split of all.
    let mut sim = Sim::lb(&small_cluster(
        4,
        8,
        16 << 20,
        r#"
[[tables.workloads]]
kind = "uniform"
ops_per_sec = 40000
[[tables.workloads]]
kind = "hot_range"
ops_per_sec = 30000
start_key = "4000000000000000"
end_key = "43ffffffffffffff"
start_secs = 5
end_secs = 12
"#,
    ));
    sim.run_until(80);
    // The splits of the hot range, made on its measured load (a split child may still be split
    // afterwards on the demand it inherited; that one's load stays, so it is judged as usual).
    let splits: Vec<_> = sim
        .evaluations()
        .iter()
        .filter(|e| e.spec.kind() == ActionKind::Split && e.before.target_ratio > 1.0)
        .collect();
    assert!(!splits.is_empty(), "the hot range was split and judged: {:?}", sim.evaluations());
    for e in splits {
        eprintln!("split {}: {} ({})", e.action_id, e.judgement.verdict.as_str(), e.judgement.why);
        assert_eq!(e.judgement.verdict, Verdict::Inconclusive, "{:?}", e.judgement);
        assert!(e.judgement.why.contains("demand fell"), "{}", e.judgement.why);
    }
}

#[test]
fn balanced_cluster_gets_zero_actions_over_an_hour() {
    let mut sim =
        Sim::lb(&small_cluster(8, 64, 1 << 30, "[[tables.workloads]]\nkind = \"uniform\"\nops_per_sec = 400000\n"));
    let mut max_stats = 0.0f64;
    for _ in 0..3600 {
        let plan = tick(&mut sim);
        max_stats = max_stats.max(plan.stats.max_load_ratio);
        assert!(plan.rejected.is_empty(), "{:?}", plan.rejected);
    }
    eprintln!("balanced: 3600 passes, {} proposals, pool max ratio {max_stats:.3}", sim.proposals.len());
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
    assert!(sim.proposals.is_empty(), "{:?}", sim.proposals.first());
}

/// The partition of table 0 holding `key`.
fn partition_at(sim: &Sim, key: u64) -> PartitionId {
    let c = &sim.engine.cluster;
    c.partitions.ids[c.partition_at(0, key)].clone()
}

fn actions_on(sim: &Sim, id: &PartitionId, kind: ActionKind) -> usize {
    sim.proposals.iter().filter(|(_, p)| p.spec.kind() == kind && partitions_of(&p.spec).contains(&id)).count()
}

/// First second at or after `from` from which the worker max demand ratio stays <= 1 and
/// rejections under 1 % of demand for the rest of the run.
fn relieved_at(sim: &Sim, from: u64, until: u64) -> Option<u64> {
    let mut at = None;
    for t in sim.ticks.iter().filter(|t| t.t_secs >= from && t.t_secs < until) {
        let ok = t.max_demand_ratio <= 1.0 && (t.demand <= 0.0 || t.rejected / t.demand < 0.01);
        if !ok {
            at = None;
        } else if at.is_none() {
            at = Some(t.t_secs);
        }
    }
    at
}

/// A hot key in a 1 GiB partition: its key is cut out into a piece of its own, and only that
/// piece goes to the dedicated group's worker, in one action. Moving the partition whole
/// streamed 1 GiB for 11.2 s first (relieved at 313 s); no other split can divide one key.
#[test]
fn single_hot_key_is_cut_out_onto_the_group_in_one_action() {
    const KEY: u64 = 0x2a00_0000_0000_0042;
    let mut sim = Sim::lb(&scenario_file("single-hot-key"));
    sim.run_until(1200);
    let piece = partition_at(&sim, KEY);
    let relief = relieved_at(&sim, 300, u64::MAX);
    let c = &sim.engine.cluster;
    let i = c.partitions.find(&piece).expect("exists");
    let owner = &c.workers.group[c.partitions.owner[i] as usize];
    eprintln!("single-hot-key: the key's piece {piece} on group {owner:?}; relieved at {relief:?} (onset 300 s)");
    for (t, p) in &sim.proposals {
        eprintln!("  t={t} {:?}: {}", p.spec, p.reason);
    }
    let cuts: Vec<&ActionSpec> = sim
        .proposals
        .iter()
        .map(|(_, p)| &p.spec)
        .filter(|s| matches!(s, ActionSpec::SplitInto { split_keys, .. } if split_keys.contains(&Key(KEY))))
        .collect();
    assert_eq!(cuts.len(), 1, "one cut of the hot key: {cuts:?}");
    let ActionSpec::SplitInto { partition: parent, split_keys, to_workers, group, .. } = cuts[0] else {
        unreachable!()
    };
    assert_eq!(split_keys, &[Key(KEY), Key(KEY + 1)], "the key alone in its piece");
    let group_worker = c.workers.ids.iter().position(|w| w == &to_workers[0]).expect("a worker");
    assert!(c.workers.group[group_worker].is_some(), "the key's piece goes to the group: {to_workers:?}");
    assert!(owner.is_some(), "the key's piece ends on the dedicated group");
    // It joins the group in the same action, so the storage keeps it there.
    assert_eq!(group.as_ref().map(|g| g.as_str()), Some("isolated"));
    assert_eq!(c.partitions.group[i].as_ref().map(|g| g.as_str()), Some("isolated"), "a member of the group");
    assert_eq!(
        sim.proposals
            .iter()
            .filter(|(_, p)| partitions_of(&p.spec).iter().any(|&id| id == parent || id == &piece))
            .count(),
        1,
        "nothing else on the key's partition or its piece"
    );
    // Detection (one window over) plus the cut: one key streams, in the handover second.
    assert!(relief.is_some_and(|t| t <= 300 + 5), "relieved at {relief:?}");
    assert_invariants(&sim);

    // The hot key as its partition's first key (as a cut at that key leaves it): the first
    // piece, the id, is the key's, and it goes to the group; the rest stays.
    let first = {
        let c = &Sim::lb(&scenario_file("single-hot-key")).engine.cluster;
        c.partitions.range(c.partition_at(0, KEY)).start.0
    };
    let text = scenario_file_text("single-hot-key").replace("2a00000000000042", &format!("{first:016x}"));
    let mut sim = Sim::lb(&scenario_text(&text));
    sim.run_until(600);
    let relief = relieved_at(&sim, 300, u64::MAX);
    let c = &sim.engine.cluster;
    let piece = partition_at(&sim, first);
    let i = c.partitions.find(&piece).expect("exists");
    let cuts: Vec<String> = sim
        .proposals
        .iter()
        .filter(|(_, p)| matches!(&p.spec, ActionSpec::SplitInto { partition, .. } if partition == &piece))
        .map(|(_, p)| p.spec.to_string())
        .collect();
    eprintln!("first key: {cuts:?}, relieved at {relief:?}");
    assert_eq!(cuts.len(), 1, "{cuts:?}");
    assert!(
        cuts[0].contains(&format!("into 2 pieces, the first to {}", c.workers.ids[c.partitions.owner[i] as usize])),
        "{cuts:?}"
    );
    assert_eq!(
        c.partitions.range(i),
        lb_common::ids::KeyRange { start: Key(first), end: Key(first) },
        "the id is the one key"
    );
    assert_eq!(c.partitions.group[i].as_ref().map(|g| g.as_str()), Some("isolated"), "a member of the group");
    assert!(relief.is_some_and(|t| t <= 300 + 5), "relieved at {relief:?}");
    assert_invariants(&sim);
}

#[test]
fn overloaded_worker_with_small_partitions_is_relieved_within_10_s() {
    // The single-hot-key case with 64 MiB partitions: moves take 1.6 s, so relief is bounded
    // by detection (2 windows) and the planner, not by streaming.
    let text = scenario_file_text("single-hot-key")
        .replace("partitions = 32", "partitions = 32\nstored_bytes_per_partition = 67108864");
    let mut sim = Sim::lb(&scenario_text(&text));
    sim.run_until(600);
    let relief = relieved_at(&sim, 300, u64::MAX);
    eprintln!(
        "worker overload (64 MiB partitions): relieved at {relief:?} (onset 300 s), {} actions",
        sim.proposals.len()
    );
    assert!(relief.is_some_and(|t| t <= 310), "relieved at {relief:?}");
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
}

#[test]
fn worker_loss_overload_is_relieved() {
    // With the file's faults the first move fails and the second hangs for ever: the hung move
    // stops counting as done once it has run three times what its 1 GiB takes (31 s; it was a
    // flat 120 s and relief took 134 s), and until the executor times it out it holds one of
    // its source's action slots, so the other moves go one at a time (85 s).
    for (name, bytes, bound) in
        [("worker-loss", None, 90), ("worker-loss 64 MiB without faults", Some(67_108_864u64), 10)]
    {
        let mut text = scenario_file_text("worker-loss");
        if let Some(b) = bytes {
            // Without the injected faults (a move that hangs forever holds a worker's action
            // slot until an executor times it out), to measure the planner itself.
            let cut = text.find("[[timeline]]").expect("timeline");
            text.truncate(cut);
            text = text.replace("partitions = 64", &format!("partitions = 64\nstored_bytes_per_partition = {b}"));
            text.push_str("[[timeline]]\nat_secs = 600\nevent = \"worker_lost\"\nworker = \"w-0003\"\n");
            text.push_str("[[timeline]]\nat_secs = 1200\nevent = \"worker_added\"\nworker = \"w-0008\"\n");
        }
        let mut sim = Sim::lb(&scenario_text(&text));
        sim.run_until(1500);
        // Until w-0008 joins at 1200 s; from then on the run must stay clean as well.
        let relief = relieved_at(&sim, 600, 1200);
        let after_join = relieved_at(&sim, 1200, u64::MAX);
        let last = sim.ticks.last().copied().expect("ticks");
        eprintln!(
            "{name}: relieved at {relief:?} (loss at 600 s), after the join clean from {after_join:?}; moves {}; submit errors {}; final pool max/mean {:.3}",
            sim.proposed(ActionKind::Move),
            sim.submit_errors.len(),
            last.pool_max / last.pool_mean
        );
        assert!(relief.is_some_and(|t| t <= 600 + bound), "{name}: relieved at {relief:?}");
        assert!(after_join.is_some_and(|t| t <= 1260), "{name}: after the join: {after_join:?}");
        assert_invariants(&sim);
    }
}

#[test]
fn sequential_append_is_never_split_and_isolated_when_a_group_exists() {
    let mut sim = Sim::lb(&scenario_file("sequential-append"));
    sim.run_until(900);
    let tail = partition_at(&sim, 0x8000_0000_0000_0000);
    let plan = tick(&mut sim);
    eprintln!(
        "sequential-append: splits {}, actions on the tail partition {}, all actions {}; declined now: {:?}",
        sim.proposed(ActionKind::Split),
        sim.proposals.iter().filter(|(_, p)| partitions_of(&p.spec).contains(&&tail)).count(),
        sim.proposals.len(),
        plan.rejected.iter().map(|d| &d.why).collect::<Vec<_>>()
    );
    assert_eq!(sim.proposed(ActionKind::Split), 0);
    assert!(plan.rejected.iter().any(|d| d.why.contains("no split can divide it")), "the why-not is explained");

    let text = scenario_file_text("sequential-append").replace(
        "partition_limit_bytes_per_sec = 100e6",
        "partition_limit_bytes_per_sec = 100e6\ngroups = [{ group = \"tail\", workers = 1 }]",
    );
    let mut sim = Sim::lb(&scenario_text(&text));
    sim.run_until(900);
    let tail = partition_at(&sim, 0x8000_0000_0000_0000);
    eprintln!(
        "sequential-append + group: splits {}, groups of the tail {}, all actions {}",
        sim.proposed(ActionKind::Split),
        actions_on(&sim, &tail, ActionKind::Group),
        sim.proposals.len()
    );
    assert_eq!(sim.proposed(ActionKind::Split), 0);
    assert_eq!(actions_on(&sim, &tail, ActionKind::Group), 1);
    assert_invariants(&sim);
}

#[test]
fn zipf_skew_converges_to_balanced_in_bounded_rounds() {
    let mut sim = Sim::lb(&scenario_file("zipf-skew"));
    let mut quiet = 0;
    let mut rounds = 0;
    while quiet < 120 && sim.engine.t_secs() < 3600.0 {
        let plan = tick(&mut sim);
        if plan.proposals.is_empty() && sim.in_flight.is_empty() {
            quiet += 1;
        } else {
            quiet = 0;
            rounds += usize::from(!plan.proposals.is_empty());
        }
    }
    let last = sim.ticks.last().copied().expect("ticks");
    eprintln!(
        "zipf-skew: quiet after {} s, {rounds} passes with proposals, splits {}, moves {}; final pool max/mean {:.3}, max {:.3}",
        sim.engine.t_secs(),
        sim.proposed(ActionKind::Split),
        sim.proposed(ActionKind::Move),
        last.pool_max / last.pool_mean,
        last.pool_max
    );
    assert!(quiet >= 120, "still acting after an hour");
    assert!(rounds <= 200, "{rounds} passes with proposals");
    assert!(last.pool_max / last.pool_mean <= 1.10, "final max/mean {}", last.pool_max / last.pool_mean);
    assert_invariants(&sim);
}

#[test]
fn other_scenarios_run_clean() {
    // Smoke: the remaining scenario files run for 30 simulated minutes without a rejected
    // submission, a double action in a pass or a cooldown violation.
    for name in ["tenant-isolation", "growing-dataset"] {
        let mut sim = Sim::lb(&scenario_file(name));
        sim.run_until(1800);
        let last = sim.ticks.last().copied().expect("ticks");
        eprintln!(
            "{name}: {} proposals ({} splits, {} moves, {} groups), submit errors {:?}, final pool max/mean {:.3}, rejected {:.1} %",
            sim.proposals.len(),
            sim.proposed(ActionKind::Split),
            sim.proposed(ActionKind::Move),
            sim.proposed(ActionKind::Group),
            sim.submit_errors,
            last.pool_max / last.pool_mean,
            last.rejected / last.demand * 100.0
        );
        assert!(sim.submit_errors.is_empty());
        assert_invariants(&sim);
    }
}

#[test]
fn a_growing_dataset_in_auto_is_resharded_where_its_new_shards_fit() {
    // The placement manager acting (it ships in dry run): every reshard goes through the same
    // check as the planner's actions, on where its new subring's shards land, and the simulator
    // charges it for the workers they land on.
    let mut config = OnlineConfig::default();
    config.placement.mode = PolicyMode::Auto;
    let mut sim = Sim::new(&scenario_file("growing-dataset"), Box::new(Lb::with_config(config)));
    sim.run_until(1800);
    let reshards: Vec<_> = sim
        .actions
        .iter()
        .filter(|a| a.spec.kind() == ActionKind::Reshard && matches!(a.outcome, Outcome::Succeeded { .. }))
        .map(|a| (a.t_secs, a.spec.to_string(), a.landed_on.len()))
        .collect();
    eprintln!("growing-dataset in auto: reshards {reshards:?}, submit errors {:?}", sim.submit_errors);
    assert!(!reshards.is_empty(), "the growing dataset was resharded");
    assert!(reshards.iter().all(|&(.., on)| on > 0), "each reshard is charged where its shards landed");
    assert!(sim.submit_errors.is_empty(), "{:?}", sim.submit_errors);
    assert_invariants(&sim);
}

/// The harmful-action feedback path in virtual time: a move that makes its destination the
/// hottest worker (injected as if the imbalance policy had made it) is evaluated harmful, moved
/// back automatically (`revert_harmful_moves`), and its partition is left alone for the
/// penalty's four cooldowns.
#[test]
fn a_harmful_move_is_judged_harmful_reverted_and_its_partition_rested() {
    // 32 partitions at 7,500 ops/s (0.75 of their limit) on 4 workers at 0.6 of capacity.
    let scenario = small_cluster(4, 32, 64 << 20, "[[tables.workloads]]\nkind = \"uniform\"\nops_per_sec = 240000\n");
    let mut lb = Lb::default();
    lb.config.evaluation.revert_harmful_moves = true;
    // Nothing else may touch the partition before the verdict: the imbalance the bad move
    // creates would otherwise be fixed by the planner first.
    lb.config.planner.imbalance.mode = PolicyMode::Off;
    let cooldown = lb.config.planner.caps.cooldown_secs;
    let factor = u64::from(lb.config.planner.feedback.harmful_cooldown_factor);
    let mut sim = Sim::new(&scenario, Box::new(lb));
    sim.run_until(20);
    assert!(sim.actions.is_empty(), "a balanced cluster: nothing to do");
    // Every worker sits at 0.6; moving one of w-0000's partitions onto w-0001 makes w-0001
    // the hottest (0.675) and the cluster less balanced (max/mean 1.0 -> 1.125).
    let c = &sim.engine.cluster;
    let p = (0..c.partitions.len())
        .find(|&i| c.workers.ids[c.partitions.owner[i] as usize].as_str() == "w-0000")
        .expect("a partition on w-0000");
    let victim = c.partitions.ids[p].clone();
    let bad = Proposed {
        spec: ActionSpec::Move {
            partition: victim.clone(),
            to_worker: "w-0001".parse().expect("id"),
            max_bytes_per_sec: None,
        },
        submit: true,
        reason: "test: a move that makes its destination the hottest worker".into(),
        policy: Some(Policy::Imbalance),
        id: None,
    };
    let id = sim.inject(&bad).expect("the engine accepts the move");
    let mut judged_at = None;
    while sim.engine.t_secs() < 400.0 {
        tick(&mut sim);
        if judged_at.is_none() && sim.evaluations().iter().any(|e| e.action_id == id.as_str()) {
            let now_ms = sim.engine.now_ms();
            judged_at = Some(sim.engine.t_secs() as u64);
            // The feedback, read from the planner's own state right after the verdict.
            let state = sim.strategy.planner_state().expect("lb keeps planner state");
            let rest = state.in_cooldown(&victim, now_ms).expect("the partition rests");
            assert!(rest >= now_ms + ((factor * cooldown - 1) * 1000) as i64, "rests {} ms", rest - now_ms);
            assert_eq!(state.strikes.get(&Policy::Imbalance).map(|s| s.count), Some(1), "the policy got a strike");
        }
    }
    let e = sim.evaluations().iter().find(|e| e.action_id == id.as_str()).expect("the injected move was evaluated");
    eprintln!("harmful move: {} ({}), revert {:?}", e.judgement.verdict.as_str(), e.judgement.why, e.revert);
    assert_eq!(e.judgement.verdict, Verdict::Harmful, "{:?}", e.judgement);
    let back = ActionSpec::Move {
        partition: victim.clone(),
        to_worker: "w-0000".parse().expect("id"),
        max_bytes_per_sec: None,
    };
    assert_eq!(e.revert.as_ref(), Some(&back));
    let judged_at = judged_at.expect("judged");
    let revert = sim.actions.iter().find(|a| a.spec == back).expect("the revert was submitted");
    assert!(revert.reason.starts_with("revert of harmful action"), "{}", revert.reason);
    assert!(matches!(revert.outcome, Outcome::Succeeded { .. }), "the revert ran: {:?}", revert.outcome);
    // Rested: no planner action on the partition for the penalty (4 cooldowns) after the verdict.
    let rest_until = judged_at + factor * cooldown;
    for (t, p) in sim.proposals.iter().filter(|(_, p)| !p.reason.starts_with("revert of harmful action")) {
        if (judged_at..rest_until).contains(t) && partitions_of(&p.spec).contains(&&victim) {
            panic!("{victim} acted on at {t} s, inside its penalty (judged at {judged_at} s): {}", p.reason);
        }
    }
    assert!(sim.submit_errors.is_empty(), "{:?}", sim.submit_errors);
}

/// Issue 25's mixed scenario (three tenants, every kind of hotspot, a worker lost and one added,
/// a one-worker isolation group): no action overloads the place it puts load (checked against
/// no balancer second by second), and the hot range at 4.4x its limit is cut into all its pieces
/// and spread in single actions, relieved within 10 s of reaching 4x.
#[test]
fn mixed_tenants_every_action_is_safe_and_the_hot_range_is_cut_and_spread() {
    let scenario = scenario_file("mixed-tenants");
    let mut sim = Sim::lb(&scenario);
    sim.run_until(2400);
    assert_invariants(&sim);
    // gamma.orders (the third table): the partition the range starts in keeps its id.
    let c = &sim.engine.cluster;
    let hot = c.partitions.ids[c.partition_at(2, 0x6000_0000_0000_0000)].clone();
    let cuts: Vec<_> = sim
        .actions
        .iter()
        .filter(|a| a.spec.kind() == ActionKind::Split && a.spec.partitions().contains(&&hot))
        .collect();
    eprintln!(
        "mixed-tenants: cuts of {hot}: {:?}",
        cuts.iter().map(|a| (a.t_secs, a.spec.to_string())).collect::<Vec<_>>()
    );
    // One cut: the testbed's sketch draws the band (1/2048 of the partition) in buckets of its
    // own, so the first multi-way split cuts inside it and spreads the pieces, and no piece of
    // the range is ever cut again (issue 25: one split action per partition).
    assert_eq!(cuts.len(), 1, "one cut of the hot partition");
    let ActionSpec::SplitInto { split_keys, to_workers, .. } = &cuts[0].spec else {
        panic!("a multi-way split: {}", cuts[0].spec)
    };
    let band = 0x6000_0000_0000_0000u64..=0x6000_ffff_ffff_ffff;
    assert!(split_keys.iter().filter(|k| band.contains(&k.0)).count() >= 4, "cuts inside the band: {}", cuts[0].spec);
    let mut spread = to_workers.clone();
    spread.sort();
    spread.dedup();
    assert!(spread.len() >= 3, "pieces spread over workers with room: {}", cuts[0].spec);
    let again: Vec<_> = sim
        .actions
        .iter()
        .filter(|a| a.t_secs > cuts[0].t_secs)
        .filter(|a| match &a.spec {
            ActionSpec::Split { split_key, .. } => band.contains(&split_key.0),
            ActionSpec::SplitInto { split_keys, .. } => split_keys.iter().any(|k| band.contains(&k.0)),
            _ => false,
        })
        .map(|a| (a.t_secs, a.spec.to_string()))
        .collect();
    assert!(again.is_empty(), "the band was cut again: {again:?}");
    // Relieved within 10 s of the cut (the second the range was detected: the split is its
    // first action) and for good: from then until the worker loss at 1500 s, the cluster rejects
    // no more than before the range started (1.6 %, what the hot key beyond its limit brings),
    // through the rest of the ramp to 4.4x.
    let cut = cuts[0].t_secs;
    let before = sim.ticks.iter().find(|t| t.t_secs == 899).expect("tick").rejected_ratio();
    let worse = |t: &&lb_launcher::sim::Tick| t.t_secs < 1500 && t.rejected_ratio() > before + 0.001;
    let relieved =
        sim.ticks.iter().filter(|t| t.t_secs >= cut).filter(worse).map(|t| t.t_secs + 1).max().unwrap_or(cut);
    let worst = sim
        .ticks
        .iter()
        .filter(|t| t.t_secs >= relieved && t.t_secs < 1500)
        .map(|t| t.rejected_ratio())
        .fold(0.0, f64::max);
    eprintln!(
        "mixed-tenants: rejected {:.2} % before the hot range; cut at {cut} s, back at that level from {relieved} s (at most {:.2} % after)",
        before * 100.0,
        worst * 100.0
    );
    assert!(relieved <= cut + 10, "relieved at {relieved} s, more than 10 s after the cut at {cut} s");
}

/// Issue 25 at scale: the mixed scenario at 9,600 partitions on 120 workers (the issue's second
/// row, where lb once relieved the hot range in 197 s and drove a worker to 6.6x its capacity):
/// no action overloads the place it puts load, the hot range is cut in one action, and it is
/// relieved — under 1 % rejected and no worker over its capacity — within 10 s of that cut.
/// (`scripts/peer-table.sh` measures the same at 100,000 partitions, too slow for a debug build:
/// one cut, relieved 10 s after it.)
#[test]
fn mixed_tenants_at_9600_partitions_cuts_its_hot_range_once_and_is_relieved_within_10_s() {
    let scenario =
        lb_launcher::sim::scale::scale(&scenario_file("mixed-tenants"), Some(9_600), Some(120)).expect("scales");
    let mut sim = Sim::lb(&scenario);
    sim.run_until(1_000);
    assert_invariants(&sim);
    // Scaled, the scenario has several hot ranges in gamma.orders: each is cut once into all
    // its pieces, and no key inside a cut is cut again.
    let keys = |spec: &ActionSpec| match spec {
        ActionSpec::Split { split_key, .. } => vec![split_key.0],
        ActionSpec::SplitInto { split_keys, .. } => split_keys.iter().map(|k| k.0).collect(),
        _ => Vec::new(),
    };
    let cuts: Vec<_> = sim
        .actions
        .iter()
        .filter(|a| (900..1_500).contains(&a.t_secs) && matches!(a.spec, ActionSpec::SplitInto { .. }))
        .filter(|a| a.spec.partitions().iter().all(|p| p.as_str().starts_with("gamma.orders.")))
        .collect();
    assert!(cuts.len() >= 5, "the hot ranges were cut: {} cuts", cuts.len());
    for cut in &cuts {
        let ks = keys(&cut.spec);
        let span = ks[0]..=ks[ks.len() - 1];
        assert!(ks.len() >= 4, "a hot range at 4.4x is cut into all its pieces at once: {}", cut.spec);
        let again: Vec<_> = sim
            .actions
            .iter()
            .filter(|a| a.t_secs > cut.t_secs && keys(&a.spec).iter().any(|k| span.contains(k)))
            .map(|a| (a.t_secs, a.spec.to_string()))
            .collect();
        assert!(again.is_empty(), "{} was cut again: {again:?}", cut.spec);
    }
    let last = cuts.iter().map(|a| a.t_secs).max().expect("a cut");
    let relief = relieved_at(&sim, 900, 1_500).expect("relieved before the worker loss");
    eprintln!(
        "mixed-tenants at 9,600 partitions: {} hot-range cuts, the last at {last} s; relieved from {relief} s",
        cuts.len()
    );
    assert!(relief <= last + 10, "relieved at {relief} s, more than 10 s after the last cut at {last} s");
}

/// Runs `scenario` under lb with `zones.cross = cross` to `until`, collecting the declines'
/// reasons on the way.
fn run_zoned(scenario: &Scenario, cross: CrossZone, until: u64) -> (Sim, Vec<DeclineReason>) {
    let mut config = OnlineConfig::default();
    config.planner.zones.cross = cross;
    let mut sim = Sim::new(scenario, Box::new(Lb::with_config(config)));
    let mut declines = Vec::new();
    while (sim.engine.t_secs() as u64) < until {
        declines.extend(tick(&mut sim).rejected.into_iter().map(|d| d.reason));
    }
    (sim, declines)
}

/// The zone of engine worker `w`.
fn zone_of(sim: &Sim, w: u32) -> &str {
    sim.engine.cluster.workers.zone[w as usize].as_ref().map_or("-", |z| z.as_str())
}

/// The succeeded actions that streamed data into another zone: (second, source zone, reason).
fn crossings(sim: &Sim) -> Vec<(u64, String, String)> {
    sim.actions
        .iter()
        .filter(|a| a.cross_zone_bytes > 0)
        .map(|a| {
            let reason = sim.proposals.iter().find(|(_, p)| p.spec == a.spec).map_or("", |(_, p)| p.reason.as_str());
            (a.t_secs, a.source.map_or("-", |s| zone_of(sim, s)).to_owned(), reason.to_owned())
        })
        .collect()
}

#[test]
fn zones_relieve_a_lost_worker_and_a_hot_range_in_their_own_zone_and_cross_only_when_full() {
    let shipped = scenario_file("zones");
    // Each zone has room for its trouble: no byte crosses, whether crossing is allowed or not.
    for cross in [CrossZone::Never, CrossZone::WhenFull] {
        let (sim, _) = run_zoned(&shipped, cross, 1500);
        let loss = relieved_at(&sim, 300, 900);
        let hot = relieved_at(&sim, 900, u64::MAX);
        let moved: Vec<String> = sim
            .actions
            .iter()
            .filter(|a| a.bytes_to_move > 0)
            .map(|a| format!("{}@{}", a.spec.kind().as_str(), a.t_secs))
            .collect();
        eprintln!(
            "zones ({cross:?}): loss relieved at {loss:?}, hot range relieved at {hot:?}; actions that moved data: {moved:?}; crossings {:?}",
            crossings(&sim)
        );
        assert!(loss.is_some_and(|t| t <= 300 + 60), "{cross:?}: the lost worker's zone relieved at {loss:?}");
        assert!(hot.is_some_and(|t| t <= 900 + 60), "{cross:?}: the hot range relieved at {hot:?}");
        assert!(!moved.is_empty(), "{cross:?}: relief took actions that moved data");
        assert_eq!(crossings(&sim), Vec::new(), "{cross:?}: nothing crosses zones while each zone has room");
        assert_invariants(&sim);
        // No balancer leaves the lost worker's heir at exactly its capacity and rejects nothing
        // there: lb's worst worker, its streams' cost counted, never goes above that (issue 25;
        // before moves were throttled to their source's spare capacity, two full-rate streams
        // from the heir at 1.00 took it to 1.67).
        let mut none = Sim::new(&shipped, Box::new(lb_launcher::sim::NoBalancer));
        none.run_until(1500);
        let worst = |sim: &Sim| sim.ticks.iter().map(|t| t.max_demand_ratio).fold(0.0, f64::max);
        let (ours, theirs) = (worst(&sim), worst(&none));
        eprintln!("zones ({cross:?}): worst worker {ours:.3} of its capacity, {theirs:.3} with no balancer");
        assert!(theirs <= 1.0 + 1e-9, "no balancer's worst is within capacity: {theirs}");
        assert!(ours <= theirs + 1e-9, "{cross:?}: lb's worst worker {ours:.3} is over no balancer's {theirs:.3}");
    }
    // The hot range twice as strong: zone eu-1b cannot carry it (its workers would pass the high
    // watermark). Allowed to cross, lb sends what does not fit to another zone, and only that;
    // not allowed, nothing crosses and the declines say why.
    let tight = scenario_text(
        &scenario_file_text("zones")
            .replace("kind = \"hot_range\"\nops_per_sec = 32000", "kind = \"hot_range\"\nops_per_sec = 64000"),
    );
    let (sim, _) = run_zoned(&tight, CrossZone::WhenFull, 1500);
    let crossed = crossings(&sim);
    let hot = relieved_at(&sim, 900, u64::MAX);
    eprintln!("zones, hot range 6.4x (when_full): crossings {crossed:#?}, relieved at {hot:?}");
    assert!(!crossed.is_empty(), "the hot range's zone is full: some of it crosses");
    for (t, from, reason) in &crossed {
        assert!(*t >= 900, "only the hot range crosses, not the lost worker's load (crossing at {t} s)");
        assert_eq!(from, "eu-1b", "only the full zone's load crosses: {reason}");
        assert!(reason.contains("no worker of zone eu-1b has room"), "the reason says why it crosses: {reason}");
    }
    assert!(hot.is_some_and(|t| t <= 900 + 120), "relieved across zones at {hot:?}");
    assert_invariants(&sim);
    let (sim, declines) = run_zoned(&tight, CrossZone::Never, 1500);
    eprintln!("zones, hot range 6.4x (never): crossings {:?}", crossings(&sim));
    assert_eq!(crossings(&sim), Vec::new(), "zones.cross = never: nothing crosses");
    assert!(declines.contains(&DeclineReason::CrossZone), "a decline says only other zones have room");
}

/// Issue 25's "a mixed run with all action kinds", at the scenario's own size (the 100,000-
/// partition run is `scripts/peer-table.sh`'s): the shipped all-action-kinds scenario under
/// `lb+offline` and its own `[master]` (the placement manager acting, merges over an hour's
/// look-back) splits (the hot range in one cut), moves, isolates, merges the surge's pieces back
/// and reshards the growing dataset, and no action overloads the place it puts load.
#[test]
fn all_action_kinds_in_one_run_and_none_overloads_where_it_puts_load() {
    let scenario = scenario_file("all-action-kinds");
    let strategy = lb_launcher::sim::strategy::by_name("lb+offline", &scenario).expect("its [master] is valid");
    let mut sim = Sim::new(&scenario, strategy);
    sim.run_until(scenario.duration_secs);
    let mut kinds: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for a in sim.actions.iter().filter(|a| matches!(a.outcome, Outcome::Succeeded { .. })) {
        *kinds.entry(a.spec.kind().as_str()).or_default() += 1;
    }
    eprintln!("all-action-kinds under lb+offline: {kinds:?}, submit errors {:?}", sim.submit_errors);
    for kind in ActionKind::ALL {
        assert!(kinds.get(kind.as_str()).is_some_and(|&n| n > 0), "no {} succeeded: {kinds:?}", kind.as_str());
    }
    assert!(
        sim.actions
            .iter()
            .any(|a| matches!(a.spec, ActionSpec::SplitInto { ref split_keys, .. } if split_keys.len() >= 4)),
        "the hot range at 4.4x its limit is cut into its pieces in one action"
    );
    // Nothing merges before a whole hour of history; the surge's pieces (2,400–3,600 s) come
    // back once an hour without it is the look-back, and nothing split in the hour before.
    let merges: Vec<_> = sim.actions.iter().filter(|a| a.spec.kind() == ActionKind::Merge).collect();
    assert!(merges.iter().all(|a| a.t_secs >= 3600), "{merges:?}");
    let carts: Vec<_> =
        merges.iter().filter(|a| a.spec.partitions().iter().all(|p| p.as_str().starts_with("delta.carts."))).collect();
    assert!(!carts.is_empty(), "the surge's pieces were merged back");
    assert!(carts.iter().all(|a| a.t_secs >= 2 * 3600), "merged inside the surge's look-back: {carts:?}");
    assert!(sim.submit_errors.is_empty(), "{:?}", sim.submit_errors);
    assert_invariants(&sim);
}
