//! Hash-sharded datasets, placed with the placement core: tenant subring → dataset subring of
//! `dataset_shards` shards → worker through the cluster's [`NodeTable`].
//!
//! Load model: the dataset's rate (growing linearly with time) spreads over its dataset subring,
//! evenly under round robin and with zipf weights `1/(i+1)^s` under fingerprint placement (a
//! skewed key set lands unevenly). It loads the owning workers, not partitions; a reshard widens
//! or narrows the subring.

use lb_common::ids::{DatasetId, TenantId, WorkerId};
use lb_common::placement::distribute::DistributionKey;
use lb_common::placement::nodes::NodeTable;
use lb_common::placement::subring::Subring;
use lb_common::protocol::{DatasetInfo, LoadBalancing};

use super::{Cluster, Workers};
use crate::scenario::DatasetSpec;

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
    /// Cached (worker index, share of the dataset's ops), rebuilt on every placement change.
    pub shares: Vec<(u32, f64)>,
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
            rejected_ops: 0.0,
        }
    }

    pub fn rate_at(&self, t_secs: f64) -> f64 {
        (self.ops_per_sec + self.growth_ops_per_sec_per_hour * t_secs / 3600.0).max(0.0)
    }

    /// Absolute shard indices of the dataset subring, in pick order.
    pub fn shard_indices(&self, shard_count: u32) -> Vec<u64> {
        if shard_count == 0 {
            return Vec::new();
        }
        let s = u64::from(shard_count);
        let t = u64::from(self.tenant_shards).clamp(1, s);
        let d = u64::from(self.dataset_shards).clamp(1, t);
        let dataset = Subring::whole(s).sub(self.key.tenant_hash, t).sub(self.key.dataset_hash, d);
        (0..d).map(|i| dataset.at(i)).collect()
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
        }
    }
}

impl Cluster {
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
                d.shares.push((w as u32, weight / total));
            }
        }
        self.load.mark_dirty();
    }

    /// Adds every dataset's load to its workers for this step.
    pub(super) fn add_dataset_load(&mut self, t_secs: f64) {
        for d in &self.datasets {
            let rate = d.rate_at(t_secs);
            for &(w, share) in &d.shares {
                self.load.worker_ops[w as usize] += rate * share;
                self.load.worker_bytes[w as usize] += rate * share * d.value_bytes;
            }
        }
    }

    /// Rejected dataset ops per second at the last step (after the worker scale is known).
    pub fn dataset_rejected_ops(&self, t_secs: f64) -> f64 {
        self.datasets
            .iter()
            .map(|d| {
                let rate = d.rate_at(t_secs);
                d.shares
                    .iter()
                    .map(|&(w, share)| rate * share * (1.0 - self.load.worker_scale[w as usize]))
                    .sum::<f64>()
            })
            .sum()
    }
}
