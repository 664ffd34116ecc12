//! The zone rules on small hand-built clusters: a partition stays in its owner's zone, crosses
//! only when its zone has no room and `zones.cross` allows it, and each zone balances on its own.

use lb_common::ids::{GroupId, Key, ZoneId};
use lb_common::protocol::{ActionSpec, GroupTarget, TopKey};

use super::config::DEFAULT_CROSS_ZONE_COST_FACTOR;
use super::tests::cluster;
use super::*;

/// `zones[w]` is worker `w`'s zone.
fn zoned(mut input: PlannerInput, zones: &[&str]) -> PlannerInput {
    for (w, z) in input.workers.iter_mut().zip(zones) {
        w.zone = Some(ZoneId::new(*z).expect("zone"));
    }
    input
}

fn config(cross: CrossZone) -> PlannerConfig {
    let mut c = PlannerConfig::default();
    c.zones.cross = cross;
    c
}

fn moves(plan: &Plan) -> Vec<(String, String)> {
    plan.proposals
        .iter()
        .filter_map(|p| match &p.spec {
            ActionSpec::Move { partition, to_worker, .. } => Some((partition.to_string(), to_worker.to_string())),
            _ => None,
        })
        .collect()
}

/// Four workers, w-0 and w-1 in zone a, w-2 and w-3 in zone b, worker `w` holding `n` partitions
/// of 8k ops/s for each `(w, n)` of `counts`.
fn two_zones(counts: &[(usize, usize)]) -> PlannerInput {
    let owners: Vec<usize> = counts.iter().flat_map(|&(w, n)| std::iter::repeat_n(w, n)).collect();
    zoned(cluster(&vec![8_000.0; owners.len()], &owners, 4, &[]), &["a", "a", "b", "b"])
}

fn run(input: &PlannerInput, config: &PlannerConfig, passes: i64) -> Plan {
    let mut state = PlannerState::default();
    let mut last = Plan::default();
    for k in 0..passes {
        last = plan(input, config, &mut state, 1_000 + k * 1000);
    }
    last
}

/// w-0 (zone a) at 0.96 with twelve partitions of 8k; w-1 (a) at `a_cool`; w-2 and w-3
/// (zone b) idle.
fn overloaded_in_a(a_cool: f64) -> PlannerInput {
    let mut loads = vec![8_000.0; 12];
    let mut owners = vec![0usize; 12];
    let cool = (a_cool * 100_000.0 / 8_000.0).round() as usize;
    loads.extend(std::iter::repeat_n(8_000.0, cool));
    owners.extend(std::iter::repeat_n(1usize, cool));
    zoned(cluster(&loads, &owners, 4, &[]), &["a", "a", "b", "b"])
}

#[test]
fn an_overloaded_worker_sheds_inside_its_zone_though_another_zone_is_cooler() {
    // w-1 (zone a) at 0.4 has room; zone b is idle and cooler still.
    let input = overloaded_in_a(0.4);
    for cross in [CrossZone::Never, CrossZone::WhenFull] {
        let plan = run(&input, &config(cross), 2);
        let m = moves(&plan);
        assert!(!m.is_empty(), "{cross:?}: {:?}", plan.rejected);
        assert!(m.iter().all(|(_, to)| to == "w-1"), "{cross:?}: stays in zone a: {m:?}");
        assert!(plan.proposals.iter().all(|p| !p.reason.contains("crosses")), "{cross:?}");
    }
}

#[test]
fn a_full_zone_declines_with_the_zone_reason_unless_crossing_is_allowed() {
    // w-1 (zone a) at 0.88: no worker of zone a has room for an 8k partition.
    let input = overloaded_in_a(0.88);
    let plan = run(&input, &config(CrossZone::Never), 2);
    assert!(moves(&plan).is_empty(), "zones.cross = never: {:?}", moves(&plan));
    let declined = plan.rejected.iter().find(|d| d.subject == "w-0").expect("w-0's overload is declined");
    assert_eq!(declined.reason, DeclineReason::CrossZone, "{}", declined.why);
    assert!(declined.why.contains("zones.cross = never: it stays in zone a"), "{}", declined.why);

    let plan = run(&input, &config(CrossZone::WhenFull), 2);
    let m = moves(&plan);
    assert!(!m.is_empty(), "{:?}", plan.rejected);
    assert!(m.iter().all(|(_, to)| to == "w-2" || to == "w-3"), "crosses into zone b: {m:?}");
    let p = &plan.proposals[0];
    assert!(p.reason.contains("crosses from zone a to zone b"), "{}", p.reason);
    assert!(p.reason.contains("no worker of zone a has room"), "{}", p.reason);
    // Charged as a crossing: the cost is cross_zone_cost_factor times the same move's in a zone.
    let in_zone = PlannerConfig::default().caps.move_cost_ratio_per_gib;
    assert!((p.predicted.cost_ratio - in_zone * DEFAULT_CROSS_ZONE_COST_FACTOR).abs() < 1e-12, "{:?}", p.predicted);
}

#[test]
fn the_coolest_zone_takes_a_crossing() {
    // Zone a full as above; zone b at 0.6 on both workers, zone c at 0.3 on one and 0.0 on the
    // other is the coolest zone, and the crossing goes to its coolest worker.
    let mut loads = vec![8_000.0; 12 + 11 + 8 + 8 + 4];
    let mut owners = vec![0usize; 12];
    owners.extend(std::iter::repeat_n(1usize, 11));
    owners.extend(std::iter::repeat_n(2usize, 8));
    owners.extend(std::iter::repeat_n(3usize, 8));
    owners.extend(std::iter::repeat_n(4usize, 4));
    loads.truncate(owners.len());
    let input = zoned(cluster(&loads, &owners, 6, &[]), &["a", "a", "b", "b", "c", "c"]);
    let plan = run(&input, &config(CrossZone::WhenFull), 2);
    let m = moves(&plan);
    assert!(!m.is_empty(), "{:?}", plan.rejected);
    assert_eq!(m[0].1, "w-5", "the coolest worker of the coolest zone: {m:?}");
}

#[test]
fn each_zone_balances_on_its_own_and_zones_unequal_in_load_move_nothing() {
    // Zone a: both workers at 0.64; zone b: both at 0.16. The pool's max/mean is 1.6, but each
    // zone is balanced: nothing moves unless `zones.cross = balance` (balancing is not relief).
    let input = two_zones(&[(0, 8), (1, 8), (2, 2), (3, 2)]);
    for cross in [CrossZone::Never, CrossZone::WhenFull] {
        let plan = run(&input, &config(cross), 15);
        assert!(plan.proposals.is_empty(), "{cross:?}: {:?}", moves(&plan));
        assert!(!plan.stats.imbalance_engaged, "{cross:?}: judged per zone");
    }
    // One zone uneven inside: it balances, inside that zone.
    let input = two_zones(&[(0, 10), (1, 4), (2, 2), (3, 2)]);
    let plan = run(&input, &config(CrossZone::WhenFull), 15);
    let m = moves(&plan);
    assert!(!m.is_empty() && m.iter().all(|(_, to)| to == "w-1"), "{m:?}");
    assert!(plan.proposals[0].reason.contains("in zone a"), "{}", plan.proposals[0].reason);
}

#[test]
fn zones_unequal_in_load_are_balanced_across_only_under_cross_balance() {
    // Zone a at 0.64 on both workers, zone b at 0.16: balanced inside, 1.6 times apart.
    let input = two_zones(&[(0, 8), (1, 8), (2, 2), (3, 2)]);
    let windows = i64::from(PlannerConfig::default().imbalance.hot_windows);
    assert!(run(&input, &config(CrossZone::Balance), windows - 1).proposals.is_empty(), "engaged after its windows");
    let plan = run(&input, &config(CrossZone::Balance), windows);
    let m = moves(&plan);
    assert!(!m.is_empty(), "{:?}", plan.rejected);
    for (p, to) in &m {
        assert!(to == "w-2" || to == "w-3", "{p} goes to zone b: {m:?}");
    }
    let p = &plan.proposals[0];
    assert_eq!(p.policy, Policy::Imbalance);
    assert!(
        p.reason.contains("zone imbalance: zone a at 0.64") && p.reason.contains("zones.cross = balance"),
        "{}",
        p.reason
    );
    assert!((p.predicted.cost_ratio - PlannerConfig::default().caps.move_cost_ratio_per_gib * 4.0).abs() < 1e-12);
    // It stops at the release band: the zones' loads after the moves are within 1.05 of their
    // mean, or the caps stopped it.
    assert!(m.len() <= PlannerConfig::default().caps.max_actions_per_pass as usize);
}

#[test]
fn a_hot_key_is_not_isolated_onto_a_group_in_another_zone() {
    // The dedicated group's only worker (w-2) sits in zone b; the hot key's worker in zone a.
    let mut input = cluster(
        &[12_000.0, 8_000.0, 8_000.0, 8_000.0, 8_000.0, 8_000.0, 1_000.0],
        &[0, 0, 0, 0, 0, 0, 1],
        3,
        &[(2, "iso")],
    );
    input.partitions[0].stats.sketch.as_mut().expect("sketch").top_keys =
        vec![TopKey { key: Key(42), share_ratio: 0.8 }];
    let group = ActionSpec::Group {
        target: GroupTarget::Partition { partition: input.partitions[0].id.clone() },
        group: GroupId::new("iso").expect("id"),
    };
    let same = zoned(input.clone(), &["a", "a", "a"]);
    let plan = run(&same, &config(CrossZone::Never), 2);
    assert!(plan.proposals.iter().any(|p| p.spec == group), "same zone: isolated on the group");
    let apart = zoned(input, &["a", "a", "b"]);
    let plan = run(&apart, &config(CrossZone::Never), 2);
    assert!(!plan.proposals.iter().any(|p| p.spec == group), "{:?}", plan.proposals);
    assert!(
        plan.proposals.iter().all(|p| match &p.spec {
            ActionSpec::Move { to_worker, .. } => to_worker.as_str() != "w-2",
            _ => true,
        }),
        "{:?}",
        plan.proposals
    );
}

#[test]
fn an_offline_merge_across_zones_is_declined_unless_crossing_is_allowed() {
    let input = zoned(cluster(&[1_000.0, 1_000.0, 1_000.0], &[0, 1, 2], 3, &[]), &["a", "b", "a"]);
    let merge = |l: usize, r: usize| ActionSpec::Merge {
        left: input.partitions[l].id.clone(),
        right: input.partitions[r].id.clone(),
        to_worker: None,
    };
    let never = config(CrossZone::Never);
    let mut check = OutsideCheck::new(&input, &never, 1_000);
    let (reason, why) = check.admit(&merge(0, 1)).expect_err("p1 would cross from zone b into zone a");
    assert_eq!(reason, DeclineReason::CrossZone, "{why}");
    assert!(why.contains("from zone b") && why.contains("in zone a"), "{why}");
    let when_full = config(CrossZone::WhenFull);
    assert!(OutsideCheck::new(&input, &when_full, 1_000).admit(&merge(0, 1)).is_ok());
}

#[test]
fn crossing_config_is_validated_by_field() {
    let mut c = PlannerConfig::default();
    assert_eq!(c.zones.cross, CrossZone::Never, "staying in the zone is the default");
    c.zones.cross_zone_cost_factor = 0.5;
    let err = c.validate().expect_err("a crossing cheaper than a move in a zone");
    assert_eq!(err.errors[0].field, "zones.cross_zone_cost_factor");
    let parsed: PlannerConfig = serde_json::from_str(r#"{"zones":{"cross":"when_full"}}"#).expect("parse");
    assert_eq!(parsed.zones.cross, CrossZone::WhenFull);
}
