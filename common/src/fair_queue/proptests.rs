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

/// A queue for the fairness tests (no limit in the way) with one registered consumer, holding
/// `arrivals` as [`Item`]s numbered per actor; returns them in arrival order.
fn queue_of(arrivals: &[(usize, Vec<&'static str>)]) -> (FairQueue<Item>, Vec<Item>) {
    let q = FairQueue::new(FairQueueConfig { max_outstanding_per_tenant: 10_000, ..FairQueueConfig::default() });
    q.register_consumer(CONSUMER);
    let mut seq: HashMap<(usize, Vec<&str>), usize> = HashMap::new();
    let mut items = Vec::new();
    for (tenant, path) in arrivals {
        let n = seq.entry((*tenant, path.clone())).or_default();
        let item = Item { tenant: *tenant, path: path.clone(), seq: *n };
        *n += 1;
        q.enqueue(TENANTS[*tenant], path, item.clone()).expect("valid item");
        items.push(item);
    }
    (q, items)
}

/// Dequeues everything, in order.
fn drain_all(q: &FairQueue<Item>) -> Vec<Item> {
    let mut order = Vec::new();
    let mut cursor = TenantCursor::START;
    while let Some(d) = q.try_dequeue(CONSUMER, cursor).expect("registered") {
        cursor = d.cursor;
        order.push(d.item);
    }
    order
}

const CONSUMER: ConsumerId = ConsumerId(1);

/// FIFO within each actor (sequence numbers strictly increase), round robin across tenants and
/// at every node of every tenant tree.
fn assert_fair_order(order: &[Item]) {
    let mut last: HashMap<(usize, &[&str]), usize> = HashMap::new();
    for item in order {
        if let Some(prev) = last.insert((item.tenant, &item.path), item.seq) {
            assert!(prev < item.seq, "FIFO broken for {item:?} after seq {prev}");
        }
    }
    let tenants: Vec<usize> = order.iter().map(|i| i.tenant).collect();
    assert_round_robin(&tenants, "tenants");
    for tenant in 0..TENANTS.len() {
        let mine: Vec<&Item> = order.iter().filter(|i| i.tenant == tenant).collect();
        let mut prefixes: Vec<Vec<&'static str>> =
            mine.iter().flat_map(|i| (0..=i.path.len()).map(|n| i.path[..n].to_vec())).collect();
        prefixes.sort();
        prefixes.dedup();
        for prefix in prefixes {
            let served: Vec<Option<&str>> =
                mine.iter().filter(|i| i.path.starts_with(&prefix)).map(|i| participant(&i.path, &prefix)).collect();
            assert_round_robin(&served, &format!("tenant {tenant} node {prefix:?}"));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// No actor's share deviates from its fair share by more than one item per round, at every
    /// node of every tenant tree and across tenants; FIFO within each actor; nothing lost.
    #[test]
    fn every_level_is_round_robin_within_one_item(arrivals in arrivals()) {
        let (q, _) = queue_of(&arrivals);
        let order = drain_all(&q);
        prop_assert_eq!(order.len(), arrivals.len());
        prop_assert_eq!(q.lock().forest().live_nodes(), 0);
        assert_fair_order(&order);
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
    /// Withdraws the oldest item queued at this tenant and path (a cancel).
    Remove {
        tenant: usize,
        path: Vec<usize>,
    },
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        3 => (0..4_usize, prop::collection::vec(0..4_usize, 0..=5))
            .prop_map(|(tenant, path)| Op::Enqueue { tenant, path }),
        2 => (0..2_usize).prop_map(|consumer| Op::Dequeue { consumer }),
        1 => (0..4_usize, prop::collection::vec(0..4_usize, 0..=2))
            .prop_map(|(tenant, path)| Op::Remove { tenant, path }),
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

    /// Counters never leak: after any mix of accepted and refused enqueues, dequeues by two
    /// consumers and removals, lengths match a model, the invariants hold, a removal takes the
    /// oldest item of its actor, and draining frees every node.
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
        // Queued items by id (ids grow, so the smallest of an actor is its oldest).
        let mut model: std::collections::BTreeMap<u32, (&str, Vec<&str>)> = Default::default();
        let mut next_id = 0_u32;
        let outstanding = |model: &std::collections::BTreeMap<u32, (&str, Vec<&str>)>, tenant: &str| {
            model.values().filter(|(t, _)| *t == tenant).count()
        };
        for op in ops {
            match op {
                Op::Enqueue { tenant, path } => {
                    let tenant = NAMES[tenant];
                    let path: Vec<&str> = path.into_iter().map(|s| NAMES[s]).collect();
                    let want = expected_error(tenant, &path, outstanding(&model, tenant));
                    let got = q.enqueue(tenant, &path, next_id).err();
                    prop_assert_eq!(&got, &want);
                    if want.is_none() {
                        model.insert(next_id, (tenant, path));
                    }
                    next_id += 1;
                }
                Op::Dequeue { consumer } => {
                    let got = q.try_dequeue(consumers[consumer], cursors[consumer]).expect("registered");
                    prop_assert_eq!(got.is_some(), !model.is_empty());
                    if let Some(d) = got {
                        cursors[consumer] = d.cursor;
                        let (tenant, _) = model.remove(&d.item).expect("a queued item");
                        prop_assert_eq!(&*d.tenant, tenant);
                        prop_assert_eq!(d.tenant_drained, outstanding(&model, tenant) == 0);
                    }
                }
                Op::Remove { tenant, path } => {
                    let tenant = NAMES[tenant];
                    let path: Vec<&str> = path.into_iter().map(|s| NAMES[s]).collect();
                    let want = model.iter().find(|(_, (t, p))| *t == tenant && *p == path).map(|(&id, _)| id);
                    let got = q.remove(tenant, &path, |_| true);
                    prop_assert_eq!(got, want);
                    if let Some(id) = got {
                        model.remove(&id);
                    }
                }
            }
            q.lock().check_consistent();
            prop_assert_eq!(q.len(), model.len());
            for tenant in NAMES {
                prop_assert_eq!(q.tenant_len(tenant), outstanding(&model, tenant));
            }
        }
        while q.try_dequeue(consumers[0], cursors[0]).expect("registered").is_some() {}
        prop_assert_eq!(q.tenant_count(), 0);
        prop_assert_eq!(q.lock().forest().live_nodes(), 0);
    }

    /// After withdrawing any subset of the queued items, the rest still drain round robin at
    /// every level, FIFO per actor, and nothing else is lost.
    #[test]
    fn removals_keep_the_rotation_fair(arrivals in arrivals(), keep in prop::collection::vec(any::<bool>(), 96)) {
        let (q, items) = queue_of(&arrivals);
        let mut kept = Vec::new();
        for (i, item) in items.into_iter().enumerate() {
            if keep[i % keep.len()] {
                kept.push(item);
            } else {
                let removed = q.remove(TENANTS[item.tenant], &item.path, |queued| *queued == item);
                prop_assert_eq!(removed.as_ref(), Some(&item));
                q.lock().check_consistent();
            }
        }
        prop_assert_eq!(q.len(), kept.len());
        let order = drain_all(&q);
        prop_assert_eq!(order.len(), kept.len());
        prop_assert_eq!(q.lock().forest().live_nodes(), 0);
        assert_fair_order(&order);
    }
}
