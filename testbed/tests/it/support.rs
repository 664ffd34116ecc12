//! Shared helpers: small scenarios, partition lookups, stepping.

use std::path::{Path, PathBuf};
use std::time::Duration;

use lb_common::ids::{Key, PartitionId};
use lb_testbed::Engine;
use lb_testbed::scenario::Scenario;

/// `configs/scenarios` next to the crate (scratch) or at the workspace root (main).
pub fn scenarios_dir() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    [here.join("configs/scenarios"), here.join("../configs/scenarios")]
        .into_iter()
        .find(|p| p.is_dir())
        .expect("configs/scenarios exists next to the crate or at the workspace root")
}

/// A cluster of `workers` workers (capacity 100k ops/s) with one table of `partitions`
/// partitions (10 MiB each, limit 10k ops/s) and the given workload/timeline TOML appended.
pub fn scenario(workers: u32, partitions: u32, extra: &str) -> Scenario {
    let text = format!(
        r#"
name = "test"
seed = 42
[cluster]
workers = {workers}
worker_ops_per_sec = 100000
worker_bytes_per_sec = 1e9
partition_limit_ops_per_sec = 10000
partition_limit_bytes_per_sec = 1e9
groups = [{{ group = "gold", workers = 1 }}]
[[tables]]
tenant = "acme"
table = "orders"
partitions = {partitions}
stored_bytes_per_partition = 10485760
{extra}
"#
    );
    Scenario::parse(&text, Path::new("test.toml")).expect("test scenario is valid")
}

pub fn step_secs(engine: &mut Engine, secs: u64) {
    for _ in 0..secs {
        engine.step(Duration::from_secs(1));
    }
}

pub fn pid(s: &str) -> PartitionId {
    s.parse().expect("partition id")
}

/// The id of the partition of table 0 that holds `key`.
pub fn partition_at(engine: &Engine, key: u64) -> PartitionId {
    let c = &engine.cluster;
    c.partitions.ids[c.partition_at(0, key)].clone()
}

pub fn demand(engine: &Engine, id: &PartitionId) -> f64 {
    let c = &engine.cluster;
    c.demand_ops(c.partitions.find(id).expect("partition exists"))
}

/// The key below which half the sketch's ops fall, interpolated inside the crossing bucket.
pub fn sketch_median(range_start: u64, range_end: u64, sketch: &lb_common::protocol::KeySketch) -> Key {
    let total: u64 = sketch.bucket_ops.iter().sum();
    let bounds = lb_testbed::model::report::sketch_bucket_bounds(range_start, range_end, sketch);
    let mut below = 0.0;
    for (&(a, b), &ops) in bounds.iter().zip(&sketch.bucket_ops) {
        let ops = ops as f64;
        if below + ops >= total as f64 / 2.0 {
            let frac = (total as f64 / 2.0 - below) / ops;
            return Key(a + ((b - a) as f64 * frac) as u64);
        }
        below += ops;
    }
    Key(range_end)
}
