//! Enqueue + dequeue throughput of the fair queue with 3 levels (tenant, table, actor) and
//! 1,000 leaves (10 tenants × 10 tables × 10 actors). One operation = one enqueue or one dequeue.

use std::hint::black_box;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use lb_common::fair_queue::{ConsumerId, FairQueue, FairQueueConfig, TenantCursor};

const TENANTS: usize = 10;
const TABLES: usize = 10;
const ACTORS: usize = 10;
const LEAVES: usize = TENANTS * TABLES * ACTORS;
/// Items per leaf kept queued in the steady-state benchmark.
const BACKLOG_PER_LEAF: usize = 8;

/// (tenant, [table, actor]) of every leaf, built once so the benchmark measures the queue only.
fn leaves() -> Vec<(String, [String; 2])> {
    let mut out = Vec::with_capacity(LEAVES);
    for t in 0..TENANTS {
        for table in 0..TABLES {
            for actor in 0..ACTORS {
                out.push((format!("tenant-{t}"), [format!("table-{table}"), format!("actor-{actor}")]));
            }
        }
    }
    out
}

fn new_queue() -> FairQueue<u64> {
    let q = FairQueue::new(FairQueueConfig { max_outstanding_per_tenant: 1 << 20, ..FairQueueConfig::default() });
    q.register_consumer(ConsumerId(0));
    q
}

fn bench(c: &mut Criterion) {
    let leaves = leaves();
    let mut group = c.benchmark_group("fair_queue_3_levels_1000_leaves");

    // Steady state: every leaf holds a backlog; each iteration enqueues one item (leaves in turn)
    // and dequeues one, so no node is created or released.
    group.throughput(Throughput::Elements(2));
    group.bench_function("steady_state_enqueue_dequeue", |b| {
        let q = new_queue();
        for round in 0..BACKLOG_PER_LEAF {
            for (i, (tenant, path)) in leaves.iter().enumerate() {
                q.enqueue(tenant, path, (round * LEAVES + i) as u64).expect("room");
            }
        }
        let mut cursor = TenantCursor::START;
        let mut next_leaf = 0;
        b.iter(|| {
            let (tenant, path) = &leaves[next_leaf];
            next_leaf = (next_leaf + 1) % LEAVES;
            q.enqueue(black_box(tenant), black_box(path), 7).expect("room");
            let d = q.try_dequeue(ConsumerId(0), cursor).expect("registered").expect("backlog is never empty");
            cursor = d.cursor;
            black_box(d.item);
        });
    });

    // Fill and drain: one item per leaf, then dequeue all; every node is created and released
    // once per pass (arena slots and buffers are reused).
    group.throughput(Throughput::Elements(2 * LEAVES as u64));
    group.bench_function("fill_drain_1000_leaves", |b| {
        let q = new_queue();
        b.iter_batched(
            || (),
            |()| {
                for (i, (tenant, path)) in leaves.iter().enumerate() {
                    q.enqueue(black_box(tenant), black_box(path), i as u64).expect("room");
                }
                let mut cursor = TenantCursor::START;
                while let Some(d) = q.try_dequeue(ConsumerId(0), cursor).expect("registered") {
                    cursor = d.cursor;
                    black_box(d.item);
                }
            },
            BatchSize::SmallInput,
        );
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
