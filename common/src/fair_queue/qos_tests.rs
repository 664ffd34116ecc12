//! QoS scenario of the reference (Loki's `BenchmarkQueryFairness`, §2.7), replayed under paused
//! tokio time with the real async dequeue: one tenant; actor `""` (the tenant's own queue) has
//! 123 requests of 50 ms, actor `a` 123 of 100 ms, actor `b` 45 of 50 ms, queued in that order;
//! 5 consumers each run one request at a time.
//!
//! Reference replay: hierarchy off → `""` done at 1.25 s, `a` 3.75 s, `b` 4.15 s; on → `b` done
//! at 1.8 s, `""` 4.1 s, `a` 4.2 s. Total ≈ 4.2 s either way: the small actor finishing early is
//! the whole benefit.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::*;

const CONSUMERS: u64 = 5;

/// (actor path, request count, request duration).
const ACTORS: [(&str, usize, Duration); 3] = [
    ("", 123, Duration::from_millis(50)),
    ("a", 123, Duration::from_millis(100)),
    ("b", 45, Duration::from_millis(50)),
];

/// Runs the scenario and returns each actor's completion time since the start.
async fn run(hierarchy_enabled: bool) -> HashMap<&'static str, Duration> {
    let q = Arc::new(FairQueue::new(FairQueueConfig { hierarchy_enabled, ..FairQueueConfig::default() }));
    for c in 0..CONSUMERS {
        q.register_consumer(ConsumerId(c));
    }
    for (actor, count, duration) in ACTORS {
        let path: &[&str] = if actor.is_empty() { &[] } else { &[actor] };
        for _ in 0..count {
            q.enqueue("tenant", path, (actor, duration)).expect("within limits");
        }
    }
    q.close(); // Consumers drain, then stop.

    let start = Instant::now();
    let cancel = CancellationToken::new();
    let mut tasks = Vec::new();
    for c in 0..CONSUMERS {
        let (q, cancel) = (Arc::clone(&q), cancel.clone());
        tasks.push(tokio::spawn(async move {
            let mut done: Vec<(&'static str, Duration)> = Vec::new();
            let mut cursor = TenantCursor::START;
            let far = start + Duration::from_secs(3600);
            while let Ok(d) = q.dequeue(ConsumerId(c), cursor, &cancel, far).await {
                cursor = d.cursor;
                let (actor, duration) = d.item;
                tokio::time::sleep(duration).await;
                done.push((actor, start.elapsed()));
            }
            done
        }));
    }
    let mut finished: HashMap<&'static str, Duration> = HashMap::new();
    let mut processed = 0;
    for task in tasks {
        for (actor, at) in task.await.expect("consumer task ran") {
            processed += 1;
            let t = finished.entry(actor).or_default();
            *t = (*t).max(at);
        }
    }
    assert_eq!(processed, 291, "every request processed");
    finished
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

#[tokio::test(start_paused = true)]
async fn small_actor_finishes_early_only_with_hierarchy() {
    let on = run(true).await;
    let (b, own, a) = (secs(on["b"]), secs(on[""]), secs(on["a"]));
    // Reference: b 1.8 s, "" 4.1 s, a 4.2 s.
    assert!((b - 1.8).abs() <= 0.05, "hierarchy on: b done at {b} s");
    assert!(b * 2.0 < own.min(a), "b {b} s well before \"\" {own} s and a {a} s");
    assert!((own - 4.1).abs() <= 0.05 && (a - 4.2).abs() <= 0.05, "{own} s, {a} s");

    let off = run(false).await;
    let (b, own, a) = (secs(off["b"]), secs(off[""]), secs(off["a"]));
    // Reference: "" 1.25 s, a 3.75 s, b 4.15 s: the small actor waits behind everyone.
    assert!(b >= a && b >= own, "hierarchy off: b {b} s is last");
    assert!((b - 4.15).abs() <= 0.05, "hierarchy off: b done at {b} s");
    assert!((own - 1.25).abs() <= 0.05 && (a - 3.75).abs() <= 0.05, "{own} s, {a} s");
}
