//! What the agent's Valkey source pays per poll to read one node's slots: RESP parsing of a
//! `CLUSTER SLOT-STATS` reply for 5,461 slots (a third of the cluster, one node of three) and
//! lb's typed parse of it.
//!
//! `cargo bench -p lb-valkey --bench reply` (optimised); `cargo bench -p lb-valkey --bench reply
//! --profile dev` shows what the test profile pays (`redis` and `combine` are optimised there
//! too, see the workspace `Cargo.toml`).

use criterion::{Criterion, criterion_group, criterion_main};

/// A reply shaped like valkey-server 9.1.2's (`src/fixtures/slot_stats_range.resp`).
fn slot_stats_reply(slots: u32) -> Vec<u8> {
    let mut resp = format!("*{slots}\r\n");
    for s in 0..slots {
        resp.push_str(&format!(
            "*2\r\n:{s}\r\n*8\r\n$9\r\nkey-count\r\n:12\r\n$8\r\ncpu-usec\r\n:{}\r\n$16\r\nnetwork-bytes-in\r\n:{}\r\n\
             $17\r\nnetwork-bytes-out\r\n:{}\r\n",
            s * 7,
            s * 100,
            s * 33
        ));
    }
    resp.into_bytes()
}

fn bench(c: &mut Criterion) {
    let bytes = slot_stats_reply(5_461);
    let mut group = c.benchmark_group("slot_stats_5461_slots");
    group.sample_size(20);
    group.bench_function("resp_parse", |b| b.iter(|| redis::parse_redis_value(&bytes).expect("valid RESP")));
    let value = redis::parse_redis_value(&bytes).expect("valid RESP");
    group.bench_function("typed_parse", |b| {
        b.iter(|| lb_valkey::reply::parse_slot_stats(&value).expect("valid reply").len())
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
