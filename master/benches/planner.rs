//! One analysis + planning pass over 100,000 partitions on 1,000 workers (target: <= 20 ms).
//! `CARGO_TARGET_DIR=/work/scratch/target-planner cargo bench --bench planner`

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use lb_common::ids::{Key, KeyRange, PartitionId, TableId, TenantId, WorkerId};
use lb_common::protocol::{ActionKind, Capacity, Health, KeySketch, TopKey};
use lb_master::planner::{
    PartitionView, PartitionWindow, PlannerConfig, PlannerInput, PlannerState, WorkerView, WorkerWindow, plan,
};

const PARTITIONS: u64 = 100_000;
const WORKERS: u64 = 1_000;

/// Uniform load with skew: every 97th partition runs hot over its limit (a third of those on
/// one key), worker 0 is overloaded and workers 1..50 are hotter than the rest.
fn input() -> PlannerInput {
    let width = u64::MAX / PARTITIONS;
    let tenant = TenantId::new("acme").expect("id");
    let table = TableId::new("orders").expect("id");
    let mut worker_ops = vec![0.0; WORKERS as usize];
    let partitions: Vec<PartitionView> = (0..PARTITIONS)
        .map(|i| {
            let owner = if i % 500 == 0 { 0 } else { i % WORKERS };
            let hot = i % 97 == 0;
            let ops = if hot {
                9_500.0
            } else if owner < 50 {
                900.0
            } else {
                600.0
            };
            worker_ops[owner as usize] += ops;
            let start = i * width;
            let end = if i + 1 == PARTITIONS { u64::MAX } else { start + width - 1 };
            let mut bucket_ops = vec![(ops / 16.0) as u64; 16];
            bucket_ops[3] *= 4;
            let top_keys =
                if hot && i % 3 == 0 { vec![TopKey { key: Key(start + 7), share_ratio: 0.7 }] } else { vec![] };
            PartitionView {
                id: PartitionId::new(format!("acme.orders.p{i:06}")).expect("id"),
                tenant: tenant.clone(),
                table: table.clone(),
                range: KeyRange { start: Key(start), end: Key(end) },
                owner: WorkerId::new(format!("w-{owner:04}")).expect("id"),
                group: None,
                stored_bytes: 64 << 20,
                limit: Some(Capacity { ops_per_sec: 10_000.0, bytes_per_sec: 1e8 }),
                supported_actions: vec![ActionKind::Split, ActionKind::Move, ActionKind::Merge, ActionKind::Group],
                stats: PartitionWindow {
                    ops_per_sec: ops,
                    bytes_per_sec: ops * 1024.0,
                    cpu_cores: ops * 20e-6,
                    rejected_per_sec: 0.0,
                    sketch: Some(KeySketch {
                        bucket_ops,
                        bucket_bounds: Vec::new(),
                        top_keys,
                        sequential_write_ratio: 0.0,
                    }),
                },
            }
        })
        .collect();
    let workers = (0..WORKERS)
        .map(|w| WorkerView {
            id: WorkerId::new(format!("w-{w:04}")).expect("id"),
            capacity: Capacity { ops_per_sec: 100_000.0, bytes_per_sec: 1e9 },
            cpu_cores: 8.0,
            group: None,
            health: Health::Healthy,
            zone: None,
            load: WorkerWindow {
                ops_per_sec: worker_ops[w as usize],
                bytes_per_sec: worker_ops[w as usize] * 1024.0,
                cpu_ratio: worker_ops[w as usize] * 20e-6 / 8.0,
                attributed_cpu_cores: None,
            },
        })
        .collect();
    PlannerInput { partitions, workers, ..PlannerInput::default() }
}

fn bench(c: &mut Criterion) {
    let input = input();
    let config = PlannerConfig::default();
    // Warm state: every trigger engaged, so the pass does the full work (hot partitions,
    // overloaded worker and imbalance all act).
    let mut warm = PlannerState::default();
    let mut now = 1_000_000;
    for _ in 0..12 {
        now += 1000;
        let mut s = warm.clone();
        s.cooldown_until_ms.clear();
        let _ = plan(&input, &config, &mut s, now);
        s.cooldown_until_ms.clear();
        s.pending_children.clear();
        warm = s;
    }
    let first = plan(&input, &config, &mut warm.clone(), now + 1000);
    eprintln!(
        "pass: {} proposals, {} declined, {} hot partitions, {} overloaded workers, imbalance {}",
        first.proposals.len(),
        first.rejected.len(),
        first.stats.hot_partitions,
        first.stats.overloaded_workers,
        first.stats.imbalance_engaged
    );
    c.bench_function("plan_100k_partitions_1k_workers", |b| {
        b.iter_batched(
            || warm.clone(),
            |mut state| black_box(plan(black_box(&input), &config, &mut state, now + 1000)),
            criterion::BatchSize::LargeInput,
        )
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
