//! Behavioural tests of the public queue: the dequeue orders of the reference (Loki's tests),
//! the limit, depth and name errors, consumers, closing and the async dequeue.

use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::*;

const C1: ConsumerId = ConsumerId(1);
const C2: ConsumerId = ConsumerId(2);

fn queue(config: FairQueueConfig) -> FairQueue<u32> {
    let q = FairQueue::new(config);
    q.register_consumer(C1);
    q
}

fn config_with_limit(limit: usize) -> FairQueueConfig {
    FairQueueConfig { max_outstanding_per_tenant: limit, ..FairQueueConfig::default() }
}

/// Drains everything with one consumer, checking the invariants after every step.
fn drain(q: &FairQueue<u32>, consumer: ConsumerId) -> Vec<u32> {
    let mut cursor = TenantCursor::START;
    let mut out = Vec::new();
    while let Some(d) = q.try_dequeue(consumer, cursor).expect("registered consumer") {
        q.lock().check_consistent();
        cursor = d.cursor;
        out.push(d.item);
    }
    out
}

fn path(p: &str) -> Vec<&str> {
    if p.is_empty() { Vec::new() } else { p.split('|').collect() }
}

/// Loki `TestTreeQueue/enqueue-dequeue`: root[0]; a[1]; b[2]{b0[20], b1[21]};
/// c[3]{c0[30]{c00[300], c01[301]}, c1[31]{c10[310], c11[311]}}.
#[test]
fn tree_enqueue_dequeue_order_matches_loki() {
    let q = queue(FairQueueConfig::default());
    let items = [
        ("", 0),
        ("a", 1),
        ("b", 2),
        ("b|b0", 20),
        ("b|b1", 21),
        ("c", 3),
        ("c|c0", 30),
        ("c|c0|c00", 300),
        ("c|c0|c01", 301),
        ("c|c1", 31),
        ("c|c1|c10", 310),
        ("c|c1|c11", 311),
    ];
    for (p, item) in items {
        q.enqueue("tenant", &path(p), item).expect("valid");
    }
    assert_eq!(drain(&q, C1), vec![0, 1, 2, 3, 20, 30, 21, 31, 300, 310, 301, 311]);
    assert!(q.is_empty());
    assert_eq!(q.lock().forest().live_nodes(), 0, "all nodes released");
}

/// Loki `TestTreeQueue/round-robin` through the public queue.
#[test]
fn round_robin_order_matches_loki() {
    let q = queue(FairQueueConfig::default());
    for (p, item) in [("a", 100), ("a", 101), ("a", 102), ("b", 200), ("c", 300), ("c", 301)] {
        q.enqueue("tenant", &path(p), item).expect("valid");
    }
    assert_eq!(drain(&q, C1), vec![100, 200, 300, 101, 301, 102]);
}

/// Loki `TestQueryFairnessAcrossSameLevel`: the tenant's local queue, `abc` and `xyz` take equal
/// turns, and inside `xyz` its local queue and `123`, `456` do.
#[test]
fn fairness_across_same_level_matches_loki() {
    let q = queue(FairQueueConfig::default());
    let items = [
        ("", 0),
        ("", 1),
        ("", 2),
        ("abc", 10),
        ("abc", 11),
        ("abc", 12),
        ("xyz", 20),
        ("xyz", 21),
        ("xyz", 22),
        ("xyz|123", 200),
        ("xyz|456", 210),
    ];
    for (p, item) in items {
        q.enqueue("tenant1", &path(p), item).expect("valid");
    }
    assert_eq!(drain(&q, C1), vec![0, 10, 20, 1, 11, 200, 2, 12, 210, 21, 22]);
}

/// Loki `TestQueues`: the top-level rotation per consumer cursor, with slot reuse after a
/// tenant leaves.
#[test]
fn tenant_rotation_matches_loki() {
    let q = queue(config_with_limit(100));
    q.register_consumer(C2);
    let mut st = q.lock();
    let add = |st: &mut State<u32>, tenant: &str| st.enqueue(tenant, &[] as &[&str], 0).expect("valid");
    let order = |st: &State<u32>, consumer, mut cursor: TenantCursor, expected: &[&str]| {
        for want in expected {
            let (got, next) = st.next_tenant_name(consumer, cursor);
            assert_eq!(got.as_deref(), Some(*want));
            cursor = next;
        }
        cursor
    };
    add(&mut st, "one");
    let mut last = order(&st, C1, TenantCursor::START, &["one", "one"]);
    add(&mut st, "two");
    last = order(&st, C1, last, &["two", "one", "two", "one"]);
    order(&st, C2, TenantCursor::START, &["one", "two", "one"]);
    add(&mut st, "three");
    last = order(&st, C1, last, &["two", "three", "one"]);
    st.drop_tenant("one");
    last = order(&st, C1, last, &["two", "three", "two"]);
    add(&mut st, "four");
    last = order(&st, C1, last, &["three", "four", "two", "three"]);
    st.drop_tenant("two");
    order(&st, C1, last, &["four", "three", "four"]);
    st.check_consistent();
}

/// Loki `TestQueuesOnTerminatingConsumer`: a consumer that announced its shutdown gets nothing,
/// the others keep cycling.
#[test]
fn shutting_down_consumer_gets_no_work() {
    let q = queue(config_with_limit(100));
    q.register_consumer(C2);
    for tenant in ["one", "two"] {
        for item in 0..4 {
            q.enqueue(tenant, &[] as &[&str], item).expect("valid");
        }
    }
    q.notify_consumer_shutdown(C2);
    assert!(q.try_dequeue(C2, TenantCursor::START).expect("known").is_none());
    let mut cursor = TenantCursor::START;
    for want in ["one", "two", "one", "two"] {
        let d = q.try_dequeue(C1, cursor).expect("known").expect("item");
        assert_eq!(&*d.tenant, want);
        cursor = d.cursor;
    }
}

/// Loki `TestMaxQueueSize`: the limit covers the whole tenant tree.
#[test]
fn tenant_limit_covers_the_whole_tree() {
    let q = queue(config_with_limit(3));
    q.enqueue("tenant", &["user-a"], 1).expect("room");
    q.enqueue("tenant", &["user-b"], 2).expect("room");
    q.enqueue("tenant", &["user-c"], 3).expect("room");
    let err = q.enqueue("tenant", &["user-a"], 4).expect_err("full");
    assert_eq!(err, EnqueueError::TooManyOutstanding { tenant: "tenant".into(), limit: 3 });
    assert_eq!(err.http_status(), 429);
    assert_eq!(q.tenant_len("tenant"), 3);

    let mut cursor = TenantCursor::START;
    for want in [1, 2] {
        let d = q.try_dequeue(C1, cursor).expect("known").expect("item");
        assert_eq!(d.item, want);
        cursor = d.cursor;
    }
    q.enqueue("tenant", &["user-a"], 4).expect("room again");
    q.enqueue("tenant", &["user-b"], 5).expect("room again");
    assert!(matches!(q.enqueue("tenant", &["user-c"], 6), Err(EnqueueError::TooManyOutstanding { .. })));
    // Other tenants have their own budget.
    q.enqueue("other", &["user-c"], 7).expect("separate limit");
    q.lock().check_consistent();
}

/// Loki `TestDequeueAfterEnqueueFails`: with limit 0 nothing is queued, no tenant is created,
/// and a blocking dequeue runs into its deadline.
#[tokio::test(start_paused = true)]
async fn zero_limit_refuses_everything_and_dequeue_times_out() {
    let q = queue(config_with_limit(0));
    assert!(matches!(q.enqueue("tenant", &["a"], 1), Err(EnqueueError::TooManyOutstanding { limit: 0, .. })));
    assert_eq!(q.tenant_count(), 0);
    assert_eq!(q.lock().forest().live_nodes(), 0);
    let cancel = CancellationToken::new();
    let deadline = Instant::now() + Duration::from_secs(1);
    let err = q.dequeue(C1, TenantCursor::START, &cancel, deadline).await.expect_err("nothing to dequeue");
    assert_eq!(err, DequeueError::DeadlineExceeded);
    assert!(Instant::now() >= deadline);
}

#[test]
fn too_deep_paths_are_rejected_not_queued() {
    let q = queue(config_with_limit(10));
    q.enqueue("t", &["a", "b", "c"], 1).expect("depth 3 is allowed");
    let err = q.enqueue("t", &["a", "b", "c", "d"], 2).expect_err("too deep");
    assert_eq!(err, EnqueueError::PathTooDeep { depth: 4, max: 3 });
    assert_eq!(err.http_status(), 422);
    assert_eq!(q.tenant_len("t"), 1);
    // A too-deep first item creates no tenant either.
    assert!(q.enqueue("fresh", &["a", "b", "c", "d"], 3).is_err());
    assert_eq!(q.tenant_count(), 1);
    q.lock().check_consistent();
    assert_eq!(drain(&q, C1), vec![1]);
}

#[test]
fn max_depth_is_capped_and_zero_allows_only_the_tenant() {
    let q: FairQueue<u32> = FairQueue::new(FairQueueConfig { max_depth: usize::MAX, ..FairQueueConfig::default() });
    let deep = vec!["x"; MAX_DEPTH + 1];
    assert_eq!(q.enqueue("t", &deep, 1), Err(EnqueueError::PathTooDeep { depth: MAX_DEPTH + 1, max: MAX_DEPTH }));
    let flat = queue(FairQueueConfig { max_depth: 0, ..FairQueueConfig::default() });
    flat.enqueue("t", &[] as &[&str], 1).expect("tenant queue itself");
    assert!(flat.enqueue("t", &["a"], 2).is_err());
}

#[test]
fn empty_names_are_rejected_not_lost() {
    let q = queue(config_with_limit(10));
    assert_eq!(q.enqueue("t", &["joe", ""], 1), Err(EnqueueError::EmptySegment { index: 1 }));
    assert_eq!(q.enqueue("t", &["", "b"], 2), Err(EnqueueError::EmptySegment { index: 0 }));
    assert_eq!(q.enqueue("", &["a"], 3), Err(EnqueueError::EmptyTenant));
    assert_eq!(q.len(), 0);
    assert_eq!(q.tenant_count(), 0);
    assert_eq!(q.lock().forest().live_nodes(), 0);
    // The same tenant still has its full budget.
    for item in 0..10 {
        q.enqueue("t", &["joe"], item).expect("full budget left");
    }
}

#[test]
fn hierarchy_off_ignores_the_path_and_keeps_fifo() {
    let q = queue(FairQueueConfig { hierarchy_enabled: false, ..config_with_limit(10) });
    q.enqueue("t", &["a"], 1).expect("valid");
    q.enqueue("t", &["a"], 2).expect("valid");
    q.enqueue("t", &["b"], 3).expect("valid");
    q.enqueue("t", &["x", "y", "z", "too", "deep"], 4).expect("path ignored");
    q.enqueue("t", &[""], 5).expect("path ignored");
    assert_eq!(q.lock().forest().live_nodes(), 1, "only the tenant root");
    assert_eq!(drain(&q, C1), vec![1, 2, 3, 4, 5]);
}

#[test]
fn reuse_last_serves_the_same_tenant_again() {
    let q = queue(config_with_limit(10));
    for tenant in ["one", "two"] {
        for item in 0..3 {
            q.enqueue(tenant, &[] as &[&str], item).expect("valid");
        }
    }
    let first = q.try_dequeue(C1, TenantCursor::START).expect("known").expect("item");
    assert_eq!(&*first.tenant, "one");
    let again = q.try_dequeue(C1, first.cursor.reuse_last()).expect("known").expect("item");
    assert_eq!(&*again.tenant, "one");
    let next = q.try_dequeue(C1, again.cursor).expect("known").expect("item");
    assert_eq!(&*next.tenant, "two");
}

#[test]
fn tenant_drained_is_reported_and_the_tenant_leaves() {
    let q = queue(config_with_limit(10));
    q.enqueue("t", &["a"], 1).expect("valid");
    q.enqueue("t", &["b"], 2).expect("valid");
    let d = q.try_dequeue(C1, TenantCursor::START).expect("known").expect("item");
    assert!(!d.tenant_drained);
    let d = q.try_dequeue(C1, d.cursor).expect("known").expect("item");
    assert!(d.tenant_drained);
    assert_eq!(q.tenant_count(), 0);
    assert_eq!(q.tenant_len("t"), 0);
}

#[test]
fn unknown_consumer_is_an_error() {
    let q = queue(FairQueueConfig::default());
    assert_eq!(
        q.try_dequeue(ConsumerId(9), TenantCursor::START).map(|d| d.is_some()),
        Err(DequeueError::UnknownConsumer(ConsumerId(9)))
    );
    q.unregister_consumer(C1);
    assert!(q.try_dequeue(C1, TenantCursor::START).is_err());
}

#[test]
fn shuffle_sharding_restricts_and_reshards() {
    let q = queue(FairQueueConfig { max_consumers_per_tenant: 1, ..config_with_limit(10) });
    q.register_consumer(C2);
    q.enqueue("tenant", &[] as &[&str], 1).expect("valid");
    let shard = q.lock().consumers_of("tenant").expect("tenant").expect("restricted");
    assert_eq!(shard.len(), 1);
    let (owner, other) = if shard[0] == C1 { (C1, C2) } else { (C2, C1) };
    assert!(q.try_dequeue(other, TenantCursor::START).expect("known").is_none());
    // The owner leaves: with one consumer left there is no restriction any more.
    q.unregister_consumer(owner);
    assert_eq!(q.lock().consumers_of("tenant"), Some(None));
    let d = q.try_dequeue(other, TenantCursor::START).expect("known").expect("item");
    assert_eq!(d.item, 1);
}

#[test]
fn close_refuses_new_items_and_drains_the_rest() {
    let q = queue(config_with_limit(10));
    q.enqueue("t", &["a"], 1).expect("valid");
    q.close();
    assert!(q.is_closed());
    assert_eq!(q.enqueue("t", &["a"], 2), Err(EnqueueError::Closed));
    let d = q.try_dequeue(C1, TenantCursor::START).expect("known").expect("item");
    assert_eq!(d.item, 1);
    assert_eq!(q.try_dequeue(C1, d.cursor).map(|d| d.is_some()), Err(DequeueError::Closed));
}

#[test]
fn length_gauge_overflow_label_sums_late_tenants() {
    let q = queue(FairQueueConfig { max_tenant_labels: 1, ..config_with_limit(10) });
    q.enqueue("first", &[] as &[&str], 1).expect("valid");
    q.enqueue("second", &[] as &[&str], 2).expect("valid");
    q.enqueue("third", &[] as &[&str], 3).expect("valid");
    assert_eq!(q.lock().labels().other_len(), 2);
    drain(&q, C1);
    assert_eq!(q.lock().labels().other_len(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocked_dequeue_wakes_on_enqueue() {
    let q = Arc::new(queue(config_with_limit(10)));
    let cancel = CancellationToken::new();
    let consumer = {
        let (q, cancel) = (Arc::clone(&q), cancel.clone());
        tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            q.dequeue(C1, TenantCursor::START, &cancel, deadline).await
        })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    q.enqueue("t", &["a"], 42).expect("valid");
    let d = consumer.await.expect("task ran").expect("item");
    assert_eq!((d.item, &*d.tenant), (42, "t"));
}

#[tokio::test(start_paused = true)]
async fn blocked_dequeue_ends_on_cancel_and_on_close() {
    let q = Arc::new(queue(config_with_limit(10)));
    let far = Instant::now() + Duration::from_secs(3600);
    let cancel = CancellationToken::new();
    let waiter = {
        let (q, cancel) = (Arc::clone(&q), cancel.clone());
        tokio::spawn(async move { q.dequeue(C1, TenantCursor::START, &cancel, far).await })
    };
    tokio::task::yield_now().await;
    cancel.cancel();
    assert_eq!(waiter.await.expect("task ran").map(|d| d.item), Err(DequeueError::Cancelled));

    let cancel = CancellationToken::new();
    let waiter = {
        let (q, cancel) = (Arc::clone(&q), cancel.clone());
        tokio::spawn(async move { q.dequeue(C1, TenantCursor::START, &cancel, far).await })
    };
    tokio::task::yield_now().await;
    q.close();
    assert_eq!(waiter.await.expect("task ran").map(|d| d.item), Err(DequeueError::Closed));
    assert_eq!(q.waiting.load(std::sync::atomic::Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn cancelled_consumer_takes_no_item() {
    let q = queue(config_with_limit(10));
    q.enqueue("t", &["a"], 1).expect("valid");
    let cancel = CancellationToken::new();
    cancel.cancel();
    let far = Instant::now() + Duration::from_secs(10);
    assert_eq!(q.dequeue(C1, TenantCursor::START, &cancel, far).await.map(|d| d.item), Err(DequeueError::Cancelled));
    assert_eq!(q.len(), 1, "the item stays queued");
}

/// The motivation: one tenant's storm does not starve another tenant's fix, and manual
/// commands (their own actor) get their own share inside a tenant.
#[test]
fn a_storm_does_not_starve_late_arrivals() {
    let q = queue(config_with_limit(1000));
    for item in 0..600 {
        let table = format!("table-{}", item % 6);
        q.enqueue("storm", &[table.as_str(), "hotspot"], item).expect("room");
    }
    q.enqueue("quiet", &["table-0"], 10_000).expect("room");
    q.enqueue("storm", &["manual"], 20_000).expect("room");
    let mut cursor = TenantCursor::START;
    let first: Vec<u32> = (0..14)
        .map(|_| {
            let d = q.try_dequeue(C1, cursor).expect("known").expect("item");
            cursor = d.cursor;
            d.item
        })
        .collect();
    // Every other dequeue goes to "quiet" while it has work: its fix is at most second.
    assert!(first[..2].contains(&10_000), "{first:?}");
    // Inside "storm", "manual" is one of 7 children: served within the first 7 storm turns.
    assert!(first.contains(&20_000), "{first:?}");
}

/// Loki `Test_Queue_DequeueMany`-style: concurrent producers and blocking consumers on a
/// multi-threaded runtime; every tenant receives exactly its tasks (no lost wake-up, no loss,
/// no duplicate).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_producers_and_consumers_lose_nothing() {
    const TENANTS: u32 = 10;
    const TASKS_PER_TENANT: u32 = 50;
    const CONSUMERS: u64 = 4;
    let q = Arc::new(FairQueue::new(config_with_limit(100)));
    for c in 0..CONSUMERS {
        q.register_consumer(ConsumerId(c));
    }
    let cancel = CancellationToken::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut consumers = Vec::new();
    for c in 0..CONSUMERS {
        let (q, cancel) = (Arc::clone(&q), cancel.clone());
        consumers.push(tokio::spawn(async move {
            let mut got = Vec::new();
            let mut cursor = TenantCursor::START;
            while let Ok(d) = q.dequeue(ConsumerId(c), cursor, &cancel, deadline).await {
                assert_eq!(*d.tenant, format!("tenant-{}", d.item / TASKS_PER_TENANT));
                cursor = d.cursor;
                got.push(d.item);
            }
            got
        }));
    }
    let mut producers = Vec::new();
    for t in 0..TENANTS {
        let q = Arc::clone(&q);
        producers.push(tokio::spawn(async move {
            let tenant = format!("tenant-{t}");
            for i in 0..TASKS_PER_TENANT {
                let actor = format!("actor-{}", i % 3);
                q.enqueue(&tenant, &[actor], t * TASKS_PER_TENANT + i).expect("below the limit");
                tokio::task::yield_now().await;
            }
        }));
    }
    for p in producers {
        p.await.expect("producer ran");
    }
    q.close(); // consumers stop once everything is drained
    let mut all: Vec<u32> = Vec::new();
    for c in consumers {
        all.extend(c.await.expect("consumer ran"));
    }
    all.sort_unstable();
    assert_eq!(all, (0..TENANTS * TASKS_PER_TENANT).collect::<Vec<_>>());
}
