//! Property tests: fair shares at every level, FIFO per actor, and counters that match a model
//! whatever mix of valid and invalid operations arrives.

use std::collections::HashMap;

use proptest::prelude::*;

use super::*;

const SEGMENTS: [&str; 3] = ["a", "b", "c"];
const TENANTS: [&str; 4] = ["t0", "t1", "t2", "t3"];

/// One queued item: its tenant, its actor path, and its position among that actor's items.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Item {
    tenant: usize,
    path: Vec<&'static str>,
    seq: usize,
}

/// Items of up to 4 tenants with up to 6 actors each (paths up to depth 3), in shuffled
/// arrival order.
fn arrivals() -> impl Strategy<Value = Vec<(usize, Vec<&'static str>)>> {
    let actor = (prop::collection::vec(prop::sample::select(&SEGMENTS[..]), 0..=3), 1..=6_usize);
    prop::collection::vec((0..TENANTS.len(), actor), 1..=16)
        .prop_map(|actors| {
            actors
                .into_iter()
                .flat_map(|(tenant, (path, count))| std::iter::repeat_n((tenant, path), count))
                .collect::<Vec<_>>()
        })
        .prop_shuffle()
}

/// Who served an item at the node `prefix`: its local queue (`None`) or the child it is under.
fn participant(path: &[&'static str], prefix: &[&'static str]) -> Option<&'static str> {
    path.get(prefix.len()).copied()
}

/// Checks that along `served` (the participants, in dequeue order) every two participants that
/// still have items differ by at most one serving: one item per participant per round.
fn assert_round_robin<K: std::hash::Hash + Eq + Copy + std::fmt::Debug>(served: &[K], what: &str) {
    let mut total: HashMap<K, usize> = HashMap::new();
    for &k in served {
        *total.entry(k).or_default() += 1;
    }
    let mut got: HashMap<K, usize> = HashMap::new();
    for (step, &k) in served.iter().enumerate() {
        *got.entry(k).or_default() += 1;
        let active = total
            .iter()
            .filter(|&(p, &t)| got.get(p).copied().unwrap_or(0) < t)
            .map(|(p, _)| got.get(p).copied().unwrap_or(0));
        let (lo, hi) = active.fold((usize::MAX, 0), |(lo, hi), n| (lo.min(n), hi.max(n)));
        assert!(
            lo == usize::MAX || hi - lo <= 1,
            "{what}: shares drift by {} after step {step}: {got:?} of {total:?}",
            hi - lo
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// No actor's share deviates from its fair share by more than one item per round, at every
    /// node of every tenant tree and across tenants; FIFO within each actor; nothing lost.
    #[test]
    fn every_level_is_round_robin_within_one_item(arrivals in arrivals()) {
        let q: FairQueue<Item> = FairQueue::new(FairQueueConfig {
            max_outstanding_per_tenant: 10_000,
            ..FairQueueConfig::default()
        });
        let consumer = ConsumerId(1);
        q.register_consumer(consumer);
        let mut seq: HashMap<(usize, Vec<&str>), usize> = HashMap::new();
        for (tenant, path) in &arrivals {
            let n = seq.entry((*tenant, path.clone())).or_default();
            let item = Item { tenant: *tenant, path: path.clone(), seq: *n };
            *n += 1;
            q.enqueue(TENANTS[*tenant], path, item).expect("valid item");
        }

        let mut order = Vec::new();
        let mut cursor = TenantCursor::START;
        while let Some(d) = q.try_dequeue(consumer, cursor).expect("registered") {
            cursor = d.cursor;
            order.push(d.item);
        }
        prop_assert_eq!(order.len(), arrivals.len());
        prop_assert_eq!(q.lock().forest().live_nodes(), 0);

        // FIFO per actor.
        let mut next: HashMap<(usize, Vec<&str>), usize> = HashMap::new();
        for item in &order {
            let n = next.entry((item.tenant, item.path.clone())).or_default();
            prop_assert_eq!(item.seq, *n);
            *n += 1;
        }
        // Across tenants.
        let tenants: Vec<usize> = order.iter().map(|i| i.tenant).collect();
        assert_round_robin(&tenants, "tenants");
        // At every node of every tenant tree.
        for tenant in 0..TENANTS.len() {
            let mine: Vec<&Item> = order.iter().filter(|i| i.tenant == tenant).collect();
            let mut prefixes: Vec<Vec<&'static str>> = mine
                .iter()
                .flat_map(|i| (0..=i.path.len()).map(|n| i.path[..n].to_vec()))
                .collect();
            prefixes.sort();
            prefixes.dedup();
            for prefix in prefixes {
                let served: Vec<Option<&str>> = mine
                    .iter()
                    .filter(|i| i.path.starts_with(&prefix))
                    .map(|i| participant(&i.path, &prefix))
                    .collect();
                assert_round_robin(&served, &format!("tenant {tenant} node {prefix:?}"));
            }
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    /// Tenant index 3 and segment index 3 stand for the empty name.
    Enqueue {
        tenant: usize,
        path: Vec<usize>,
    },
    Dequeue {
        consumer: usize,
    },
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        3 => (0..4_usize, prop::collection::vec(0..4_usize, 0..=5))
            .prop_map(|(tenant, path)| Op::Enqueue { tenant, path }),
        2 => (0..2_usize).prop_map(|consumer| Op::Dequeue { consumer }),
    ];
    prop::collection::vec(op, 1..200)
}

const LIMIT: usize = 4;
const NAMES: [&str; 4] = ["a", "b", "c", ""];

/// The error the model expects for an enqueue, if any.
fn expected_error(tenant: &str, path: &[&str], outstanding: usize) -> Option<EnqueueError> {
    if tenant.is_empty() {
        return Some(EnqueueError::EmptyTenant);
    }
    if path.len() > DEFAULT_MAX_DEPTH {
        return Some(EnqueueError::PathTooDeep { depth: path.len(), max: DEFAULT_MAX_DEPTH });
    }
    if let Some(index) = path.iter().position(|s| s.is_empty()) {
        return Some(EnqueueError::EmptySegment { index });
    }
    (outstanding >= LIMIT).then(|| EnqueueError::TooManyOutstanding { tenant: tenant.to_owned(), limit: LIMIT })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Counters never leak: after any mix of accepted and refused enqueues and dequeues by two
    /// consumers, lengths match a model, the invariants hold, and draining frees every node.
    #[test]
    fn counters_match_a_model_on_every_path(ops in ops()) {
        let q: FairQueue<u32> = FairQueue::new(FairQueueConfig {
            max_outstanding_per_tenant: LIMIT,
            ..FairQueueConfig::default()
        });
        let consumers = [ConsumerId(1), ConsumerId(2)];
        for c in consumers {
            q.register_consumer(c);
        }
        let mut cursors = [TenantCursor::START; 2];
        let mut model: HashMap<&str, usize> = HashMap::new();
        for op in ops {
            match op {
                Op::Enqueue { tenant, path } => {
                    let tenant = NAMES[tenant];
                    let path: Vec<&str> = path.into_iter().map(|s| NAMES[s]).collect();
                    let outstanding = model.get(tenant).copied().unwrap_or(0);
                    let want = expected_error(tenant, &path, outstanding);
                    let got = q.enqueue(tenant, &path, 0).err();
                    prop_assert_eq!(&got, &want);
                    if want.is_none() {
                        *model.entry(tenant).or_default() += 1;
                    }
                }
                Op::Dequeue { consumer } => {
                    let got = q.try_dequeue(consumers[consumer], cursors[consumer]).expect("registered");
                    let total: usize = model.values().sum();
                    prop_assert_eq!(got.is_some(), total > 0);
                    if let Some(d) = got {
                        cursors[consumer] = d.cursor;
                        let n = model.get_mut(&*d.tenant).expect("tenant in model");
                        *n -= 1;
                        prop_assert_eq!(d.tenant_drained, *n == 0);
                    }
                }
            }
            q.lock().check_consistent();
            prop_assert_eq!(q.len(), model.values().sum::<usize>());
            for (tenant, &n) in &model {
                prop_assert_eq!(q.tenant_len(tenant), n);
            }
        }
        while q.try_dequeue(consumers[0], cursors[0]).expect("registered").is_some() {}
        prop_assert_eq!(q.tenant_count(), 0);
        prop_assert_eq!(q.lock().forest().live_nodes(), 0);
    }
}
