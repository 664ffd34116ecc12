//! Placement core benchmarks: `cargo bench --bench placement`.
//!
//! Ring lookups of ours and pingora-ketama run side by side on the same ring and the same keys.

use std::hint::black_box;
use std::net::SocketAddr;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use lb_common::ids::ZoneId;
use lb_common::placement::distribute::{DistributionKey, ShardPick, ShardPolicy};
use lb_common::placement::jump::jump_hash_nonzero;
use lb_common::placement::migration::RingMigration;
use lb_common::placement::nodes::NodeTable;
use lb_common::placement::ring::{DEFAULT_POINTS_PER_WEIGHT, Ring, RingNode};
use lb_common::placement::zones::ZonedNodeTable;
use lb_common::rng::SplitMix64;

/// Number of distinct lookup keys; large enough that key bytes are not all cache-hot.
const KEY_COUNT: usize = 200_000;

/// Bytes per lookup key, as in pingora-ketama's own `continuum_hash` bench.
const KEY_BYTES: usize = 30;

/// `count` random 30-character alphanumeric keys packed back to back in one buffer: the timed loop
/// streams them like freshly received request keys (no pointer chase per key), while every lookup
/// still lands on a random ring position.
fn keys(count: usize) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = SplitMix64::new(7);
    (0..count * KEY_BYTES).map(|_| ALPHABET[(rng.next_u64() % ALPHABET.len() as u64) as usize]).collect()
}

fn key(keys: &[u8], i: usize) -> &[u8] {
    &keys[i * KEY_BYTES..(i + 1) * KEY_BYTES]
}

/// 253 nodes `10.0.x.y:6443`, weight 10 (pingora's memory bench ring: 404 800 points at 160/weight).
fn bench_nodes() -> Vec<RingNode> {
    (0..253u32)
        .map(|i| RingNode { addr: SocketAddr::from(([10, 0, (i / 250) as u8, (i % 250 + 1) as u8], 6443)), weight: 10 })
        .collect()
}

/// The textbook jump loop, as the baseline our implementation must not be slower than.
fn plain_jump(mut key: u64, buckets: i64) -> i64 {
    let (mut b, mut j) = (-1i64, 0i64);
    while j < buckets {
        b = j;
        key = key.wrapping_mul(2862933555777941757).wrapping_add(1);
        j = ((b + 1) as f64 * ((1u64 << 31) as f64 / ((key >> 33) + 1) as f64)) as i64;
    }
    b
}

fn jump(c: &mut Criterion) {
    let mut g = c.benchmark_group("jump_hash");
    let mut rng = SplitMix64::new(1);
    let keys: Vec<u64> = (0..4096).map(|_| rng.next_u64()).collect();
    for buckets in [1024u32, 65536] {
        g.bench_with_input(BenchmarkId::new("ours", buckets), &buckets, |b, &n| {
            let mut i = 0;
            b.iter(|| {
                i = (i + 1) & 4095;
                jump_hash_nonzero(black_box(keys[i]), n)
            })
        });
        g.bench_with_input(BenchmarkId::new("plain_loop", buckets), &buckets, |b, &n| {
            let mut i = 0;
            b.iter(|| {
                i = (i + 1) & 4095;
                plain_jump(black_box(keys[i]), i64::from(n))
            })
        });
    }
    g.finish();
}

fn placement(c: &mut Criterion) {
    let mut g = c.benchmark_group("placement");
    let mut table = NodeTable::new();
    for i in 0..64 {
        table.set_tokens(&format!("node-{i}"), 16).expect("bench table fits");
    }
    let mut rng = SplitMix64::new(3);
    let keys: Vec<DistributionKey> = (0..4096)
        .map(|_| DistributionKey {
            tenant_hash: rng.next_u64() % 50,
            dataset_hash: rng.next_u64() % 500,
            fingerprint: rng.next_u64(),
        })
        .collect();
    let policy = ShardPolicy { tenant_shards: 64, dataset_shards: 8, pick: ShardPick::Fingerprint };
    g.bench_function("tenant_dataset_shard_node_1024_shards", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) & 4095;
            table.place(black_box(&keys[i]), black_box(&policy)).map(|p| p.node)
        })
    });
    let big = {
        let mut t = NodeTable::new();
        for i in 0..256 {
            t.set_tokens(&format!("node-{i}"), 256).expect("bench table fits");
        }
        t
    };
    g.bench_function("tenant_dataset_shard_node_65536_shards", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) & 4095;
            big.place(black_box(&keys[i]), black_box(&policy)).map(|p| p.node)
        })
    });

    // Zone-aware placement, home zone `az-a`, same keys and policy. Two layouts: the same 256 nodes
    // × 256 tokens dealt round-robin over 3 zones (86 + 85 + 85 nodes, 65,536 shards in all), and 3
    // zones of 65,536 shards each (each zone's ring is the plain benchmark's).
    let zones = ["az-a", "az-b", "az-c"].map(|z| ZoneId::new(z).expect("valid zone id"));
    let home = &zones[0];
    let zoned = |nodes: usize, zone_of: fn(usize) -> usize| {
        let mut t = ZonedNodeTable::new();
        for i in 0..nodes {
            let zone = &zones[zone_of(i)];
            t.set_tokens(zone, &format!("{zone}/node-{i}"), 256).expect("bench table fits");
        }
        t
    };
    let total = zoned(256, |i| i % 3);
    let per_zone = zoned(3 * 256, |i| i / 256);
    let all_healthy = |_: &str| true;
    g.bench_function("zoned_tenant_dataset_shard_node_65536_shards", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) & 4095;
            total.place(Some(home), &[], black_box(&keys[i]), black_box(&policy), all_healthy).map(|p| p.node)
        })
    });
    g.bench_function("zoned_tenant_dataset_shard_node_3x65536_shards", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) & 4095;
            per_zone.place(Some(home), &[], black_box(&keys[i]), black_box(&policy), all_healthy).map(|p| p.node)
        })
    });
    // Every node of the home zone down: 8 unhealthy shards, a health check of its 86 nodes, then
    // the tenant's first rendezvous zone.
    let home_down = |n: &str| !n.starts_with("az-a/");
    g.bench_function("zoned_home_down_fallback_65536_shards", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) & 4095;
            total.place(Some(home), &[], black_box(&keys[i]), black_box(&policy), home_down).map(|p| p.node)
        })
    });
    // No home zone: the rendezvous order decides on every lookup.
    g.bench_function("zoned_no_home_65536_shards", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) & 4095;
            total.place(None, &[], black_box(&keys[i]), black_box(&policy), all_healthy).map(|p| p.node)
        })
    });
    g.finish();
}

fn ring_lookup(c: &mut Criterion) {
    let nodes = bench_nodes();
    let ours = Ring::build(&nodes, DEFAULT_POINTS_PER_WEIGHT).expect("bench ring is valid");
    let buckets: Vec<pingora_ketama::Bucket> =
        nodes.iter().map(|n| pingora_ketama::Bucket::new(n.addr, n.weight)).collect();
    let theirs = pingora_ketama::Continuum::new(&buckets);
    let points = ours.point_count();
    println!(
        "ring 253x10 @160: points {points}, points bytes {} ({:.3} B/point), index bytes {} ({:.3} B/point), total {:.3} B/point",
        ours.points_bytes(),
        ours.points_bytes() as f64 / points as f64,
        ours.index_bytes(),
        ours.index_bytes() as f64 / points as f64,
        (ours.points_bytes() + ours.index_bytes()) as f64 / points as f64,
    );
    let keys = keys(KEY_COUNT);
    let mut g = c.benchmark_group("ring_lookup_253x10_160");
    g.bench_function("ours", |b| {
        let mut i = 0;
        b.iter(|| {
            i = if i + 1 == KEY_COUNT { 0 } else { i + 1 };
            ours.node(black_box(key(&keys, i)))
        })
    });
    g.bench_function("pingora_ketama", |b| {
        let mut i = 0;
        b.iter(|| {
            i = if i + 1 == KEY_COUNT { 0 } else { i + 1 };
            theirs.node(black_box(key(&keys, i)))
        })
    });
    // Per-key migration at 50 %: XXH3 of the key picks the ring version, then the lookup.
    let mut grown = nodes.clone();
    grown.push(RingNode { addr: SocketAddr::from(([10, 0, 1, 4], 6443)), weight: 10 });
    let migration = RingMigration::new(
        ours.clone(),
        Ring::build(&grown, DEFAULT_POINTS_PER_WEIGHT).expect("bench ring is valid"),
        500_000,
    )
    .expect("valid fraction");
    g.bench_function("ours_migration_50pct", |b| {
        let mut i = 0;
        b.iter(|| {
            i = if i + 1 == KEY_COUNT { 0 } else { i + 1 };
            migration.node(black_box(key(&keys, i)))
        })
    });
    // Breakdown: the key hash alone (both rings pay it).
    g.bench_function("crc32_of_key_only", |b| {
        let mut i = 0;
        b.iter(|| {
            i = if i + 1 == KEY_COUNT { 0 } else { i + 1 };
            crc32fast::hash(black_box(key(&keys, i)))
        })
    });
    g.finish();

    let mut g = c.benchmark_group("ring_build_253x10_160");
    g.sample_size(20);
    g.bench_function("ours", |b| b.iter(|| Ring::build(black_box(&nodes), DEFAULT_POINTS_PER_WEIGHT)));
    g.bench_function("pingora_ketama", |b| b.iter(|| pingora_ketama::Continuum::new(black_box(&buckets))));
    g.finish();
}

fn config() -> Criterion {
    Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3)).sample_size(30)
}

criterion_group! { name = benches; config = config(); targets = jump, placement, ring_lookup }
criterion_main!(benches);
