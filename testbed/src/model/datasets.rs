//! Hash-sharded datasets, placed with the placement core: tenant subring → dataset subring of
//! `dataset_shards` shards → worker through the cluster's [`NodeTable`].
//!
//! Load model: the dataset's rate (growing linearly with time) spreads over its dataset subring,
//! evenly under round robin and with zipf weights `1/(i+1)^s` under fingerprint placement (a
//! skewed key set lands unevenly). It loads the owning workers, not partitions; a reshard widens
//! or narrows the subring.
//!
//! Reporting: each shard a worker serves is reported as a pseudo-partition (see
//! [`Cluster::dataset_shard_stats`] and `docs/protocol.md`, "Hash-sharded datasets in reports").

use lb_common::ids::{DatasetId, Key, KeyRange, PartitionId, TableId, TenantId, WorkerId};
use lb_common::placement::distribute::{DistributionKey, dataset_shard_indices};
use lb_common::placement::nodes::NodeTable;
use lb_common::protocol::{DatasetInfo, LoadBalancing, PartitionStats};

use super::load::MAX_QUEUEING_UTILIZATION;
use super::load::{DEFAULT_BASE_LATENCY_US, DEFAULT_CPU_US_PER_BYTE, DEFAULT_CPU_US_PER_OP, DEFAULT_P99_OVER_P50};
use super::{Cluster, Workers};
use crate::scenario::DatasetSpec;

/// One shard of a dataset's subring: where it lives and how much of the dataset it takes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShardShare {
    /// 0-based absolute shard index in the ring (the shard id is `index + 1`).
    pub shard_index: u32,
    /// Index of the owning worker.
    pub worker: u32,
    /// Share of the dataset's ops, 0..=1; the shares sum to 1 (less while a shard has no live owner).
    pub share: f64,
}

#[derive(Debug, Clone)]
pub struct Dataset {
    pub tenant: TenantId,
    pub dataset: DatasetId,
    pub tenant_shards: u32,
    pub dataset_shards: u32,
    pub load_balancing: LoadBalancing,
    pub ops_per_sec: f64,
    pub growth_ops_per_sec_per_hour: f64,
    pub value_bytes: f64,
    pub key_skew_exponent: f64,
    key: DistributionKey,
    /// Cached shards of the dataset subring that have a live owner, in pick order, rebuilt on
    /// every placement change.
    pub shares: Vec<ShardShare>,
    /// Scenario time the rate's growth counts from (moved by a `dataset_rate` event).
    pub rate_origin_secs: f64,
    /// Ops per second rejected at the last step.
    pub rejected_ops: f64,
}

impl Dataset {
    pub fn from_spec(spec: &DatasetSpec) -> Self {
        Self {
            tenant: spec.tenant.clone(),
            dataset: spec.dataset.clone(),
            tenant_shards: spec.tenant_shards,
            dataset_shards: spec.dataset_shards,
            load_balancing: spec.load_balancing,
            ops_per_sec: spec.ops_per_sec,
            growth_ops_per_sec_per_hour: spec.growth_ops_per_sec_per_hour,
            value_bytes: spec.value_bytes as f64,
            key_skew_exponent: spec.key_skew_exponent,
            key: DistributionKey::new(spec.tenant.as_str(), spec.dataset.as_str(), &[]),
            shares: Vec::new(),
            rate_origin_secs: 0.0,
            rejected_ops: 0.0,
        }
    }

    pub fn rate_at(&self, t_secs: f64) -> f64 {
        let grown_secs = t_secs - self.rate_origin_secs;
        (self.ops_per_sec + self.growth_ops_per_sec_per_hour * grown_secs / 3600.0).max(0.0)
    }

    /// From `t_secs` on, the rate is `ops_per_sec` growing by `growth_ops_per_sec_per_hour`.
    pub fn set_rate(&mut self, t_secs: f64, ops_per_sec: f64, growth_ops_per_sec_per_hour: f64) {
        self.ops_per_sec = ops_per_sec;
        self.growth_ops_per_sec_per_hour = growth_ops_per_sec_per_hour;
        self.rate_origin_secs = t_secs;
    }

    /// Absolute shard indices of the dataset subring, in pick order.
    pub fn shard_indices(&self, shard_count: u32) -> Vec<u32> {
        dataset_shard_indices(shard_count, &self.key, self.tenant_shards, self.dataset_shards)
    }

    pub fn info(&self, nodes: &NodeTable, workers: &Workers) -> DatasetInfo {
        let shard_owners: Vec<WorkerId> = nodes
            .shard_nodes()
            .iter()
            .filter_map(|slot| nodes.name(*slot).and_then(|n| WorkerId::new(n).ok()))
            .filter(|w| workers.find(w).is_some())
            .collect();
        DatasetInfo {
            tenant: self.tenant.clone(),
            dataset: self.dataset.clone(),
            tenant_shards: self.tenant_shards,
            dataset_shards: self.dataset_shards,
            load_balancing: self.load_balancing,
            shard_owners,
            // The testbed's datasets live in every zone.
            zones: Vec::new(),
        }
    }
}

impl Cluster {
    /// A `dataset_rate` timeline event: from `t_secs` on the dataset's rate is `ops_per_sec`
    /// growing by `growth_ops_per_sec_per_hour`.
    pub fn set_dataset_rate(
        &mut self,
        tenant: &TenantId,
        dataset: &DatasetId,
        t_secs: f64,
        ops_per_sec: f64,
        growth_ops_per_sec_per_hour: f64,
    ) -> Result<(), super::mutate::LayoutError> {
        let d = self.datasets.iter_mut().find(|d| &d.tenant == tenant && &d.dataset == dataset).ok_or_else(|| {
            super::mutate::LayoutError::UnknownDataset { tenant: tenant.clone(), dataset: dataset.clone() }
        })?;
        d.set_rate(t_secs, ops_per_sec, growth_ops_per_sec_per_hour);
        Ok(())
    }

    /// Recomputes every dataset's worker shares from the node table.
    pub fn place_datasets(&mut self) {
        let shard_nodes = self.nodes.shard_nodes();
        let shard_count = shard_nodes.len() as u32;
        for d in &mut self.datasets {
            let shards = d.shard_indices(shard_count);
            let weights: Vec<f64> = match d.load_balancing {
                LoadBalancing::RoundRobin => vec![1.0; shards.len()],
                LoadBalancing::Fingerprint => {
                    (0..shards.len()).map(|i| 1.0 / ((i + 1) as f64).powf(d.key_skew_exponent)).collect()
                }
            };
            let total: f64 = weights.iter().sum();
            d.shares.clear();
            for (shard, weight) in shards.iter().zip(&weights) {
                let slot = shard_nodes[*shard as usize];
                let Some(w) =
                    self.nodes.name(slot).and_then(|n| WorkerId::new(n).ok()).and_then(|w| self.workers.find(&w))
                else {
                    continue;
                };
                d.shares.push(ShardShare { shard_index: *shard, worker: w as u32, share: weight / total });
            }
        }
        self.load.mark_dirty();
    }

    /// Adds every dataset's load to its workers for this step.
    pub(super) fn add_dataset_load(&mut self, t_secs: f64) {
        for d in &self.datasets {
            let rate = d.rate_at(t_secs);
            for s in &d.shares {
                self.load.worker_ops[s.worker as usize] += rate * s.share;
                self.load.worker_bytes[s.worker as usize] += rate * s.share * d.value_bytes;
            }
        }
    }

    /// Rejected dataset ops per second at the last step (after the worker scale is known).
    pub fn dataset_rejected_ops(&self, t_secs: f64) -> f64 {
        self.datasets
            .iter()
            .map(|d| {
                let rate = d.rate_at(t_secs);
                d.shares.iter().map(|s| rate * s.share * (1.0 - self.load.worker_scale[s.worker as usize])).sum::<f64>()
            })
            .sum()
    }
}

/// The pseudo-partition id of shard `shard_index` (0-based) of a dataset:
/// `<tenant>.<dataset>.s<shard id>`, the shard id being 1-based as in the placement core.
pub fn dataset_shard_partition_id(tenant: &TenantId, dataset: &DatasetId, shard_index: u32) -> PartitionId {
    let shard_id = u64::from(shard_index) + 1;
    PartitionId::new(format!("{tenant}.{dataset}.s{shard_id}")).expect("tenant and dataset are valid ids")
}

impl Cluster {
    /// The dataset shards worker `w` serves, as report entries over the last `interval_ms`.
    ///
    /// Convention (docs/protocol.md): `table` is the dataset id, `partition_id` is
    /// `<tenant>.<dataset>.s<shard id>`, `key_range` is the whole key space (a hash shard takes
    /// keys from everywhere), no sketch, no stored bytes. Datasets are ingest traffic: every op
    /// is a write of `value_bytes`. The counters are the last step's rates times the interval
    /// (a dataset's rate changes slowly; the virtual-time engine steps and reports every second,
    /// where this is exact).
    pub fn dataset_shard_stats(&self, w: usize, interval_ms: u64, t_secs: f64) -> Vec<PartitionStats> {
        let secs = interval_ms as f64 / 1000.0;
        let load = &self.load;
        let scale = load.worker_scale.get(w).copied().unwrap_or(1.0);
        let util = load.worker_demand_ratio.get(w).copied().unwrap_or(0.0).clamp(0.0, MAX_QUEUEING_UTILIZATION);
        let p50 = DEFAULT_BASE_LATENCY_US / (1.0 - util);
        let mut out = Vec::new();
        for d in &self.datasets {
            let rate = d.rate_at(t_secs);
            for s in d.shares.iter().filter(|s| s.worker as usize == w) {
                let demand = rate * s.share * secs;
                let served = demand * scale;
                let write_ops = served.round() as u64;
                let write_bytes = (write_ops as f64 * d.value_bytes).round() as u64;
                let cpu = write_ops as f64 * DEFAULT_CPU_US_PER_OP + write_bytes as f64 * DEFAULT_CPU_US_PER_BYTE;
                out.push(PartitionStats {
                    tenant: d.tenant.clone(),
                    table: TableId::new(d.dataset.as_str()).expect("a dataset id is a valid table id"),
                    partition_id: dataset_shard_partition_id(&d.tenant, &d.dataset, s.shard_index),
                    key_range: KeyRange { start: Key(0), end: Key(u64::MAX) },
                    read_ops: 0,
                    write_ops,
                    read_bytes: 0,
                    write_bytes,
                    errors: 0,
                    rejected: (demand - served).max(0.0).round() as u64,
                    latency_p50_us: p50,
                    latency_p99_us: p50 * DEFAULT_P99_OVER_P50,
                    cpu_time_us: cpu as u64,
                    stored_bytes: 0,
                    sketch: None,
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use crate::scenario::Scenario;
    use crate::virtual_time::Engine;

    /// Two workers of 1000 ops/s, a dataset of 3000 ops/s on 4 shards: the workers saturate.
    const SCENARIO: &str = r#"
name = "t"
[cluster]
workers = 2
worker_ops_per_sec = 1000
worker_bytes_per_sec = 1e9
partition_limit_ops_per_sec = 500
partition_limit_bytes_per_sec = 1e9
[[datasets]]
tenant = "logs"
dataset = "ingest"
tenant_shards = 8
dataset_shards = 4
load_balancing = "round_robin"
ops_per_sec = 3000
value_bytes = 100
[[timeline]]
at_secs = 3
event = "dataset_rate"
tenant = "logs"
dataset = "ingest"
ops_per_sec = 1000
"#;

    fn dataset_entries(engine: &mut Engine) -> Vec<lb_common::protocol::PartitionStats> {
        let ids = engine.cluster.workers.ids.clone();
        engine
            .reports_for(&ids)
            .into_iter()
            .flat_map(|r| r.partitions)
            .filter(|p| p.table.as_str() == "ingest")
            .collect()
    }

    #[test]
    fn every_served_shard_is_reported_once_and_demand_adds_up() {
        let scenario = Scenario::parse(SCENARIO, Path::new("t.toml")).expect("valid");
        let mut engine = Engine::new(&scenario);
        engine.step(Duration::from_secs(1));
        let entries = dataset_entries(&mut engine);
        assert_eq!(entries.len(), 4, "one entry per shard of the subring");
        let mut ids: Vec<_> = entries.iter().map(|p| p.partition_id.to_string()).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 4);
        assert!(ids.iter().all(|id| id.starts_with("logs.ingest.s")), "{ids:?}");
        let served: u64 = entries.iter().map(|p| p.write_ops).sum();
        let rejected: u64 = entries.iter().map(|p| p.rejected).sum();
        // 3000 ops/s of demand on 2000 ops/s of capacity: at least 1000 rejected (more when the
        // subring's shards sit unevenly on the two workers), as the engine counts them.
        let want_rejected = engine.cluster.dataset_rejected_ops(engine.t_secs());
        assert!(want_rejected >= 999.0, "{want_rejected}");
        assert!((rejected as f64 - want_rejected).abs() <= 4.0, "rejected {rejected} vs {want_rejected}");
        assert!((served + rejected) as i64 - 3000 <= 4 && 3000 - (served + rejected) as i64 <= 4, "{served}");
        assert!(entries.iter().all(|p| p.write_bytes == p.write_ops * 100 && p.sketch.is_none()));

        // The timeline drops the rate to 1000 ops/s at 3 s: nothing rejected any more.
        let mut entries = Vec::new();
        for _ in 0..3 {
            engine.step(Duration::from_secs(1));
            entries = dataset_entries(&mut engine);
        }
        let served: u64 = entries.iter().map(|p| p.write_ops).sum();
        assert!((served as i64 - 1000).abs() <= 4, "served {served}");
        assert_eq!(entries.iter().map(|p| p.rejected).sum::<u64>(), 0);
    }
}
