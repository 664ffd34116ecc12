//! Per-(tenant, dataset, shard, owner) EWMA byte rates and the distribution statistics built from them.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::ewma::EwmaRate;
use super::ids::ShardId;
use super::strategy::std_dev_u64;

/// 3 min EWMA half-life: smooths 15 s publishing ticks without hiding a real shift (reference default).
pub const DEFAULT_STATS_AGGREGATION_WINDOW: Duration = Duration::from_secs(3 * 60);
/// 15 min: counters not folded for this long are dropped (reference default).
pub const DEFAULT_STATS_RETENTION_PERIOD: Duration = Duration::from_secs(15 * 60);

/// A tenant entry of [`DistributionStats`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantStats {
    pub tenant_id: String,
}

/// One dataset: indices of its shards and their usage (same order).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatasetStats {
    /// Index into [`DistributionStats::tenants`].
    pub tenant: u32,
    pub name: String,
    /// Indices into [`DistributionStats::shards`].
    pub shards: Vec<u32>,
    pub usage_bytes_per_sec: Vec<u64>,
    /// EWMA of the per-shard usage standard deviation (lags one build behind).
    pub std_dev_bytes_per_sec: u64,
}

/// A shard as seen from one owner (a shard may appear with several owners).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardStats {
    pub id: ShardId,
    pub owner: String,
}

/// Statistics snapshot the ruler turns into placement rules.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DistributionStats {
    pub tenants: Vec<TenantStats>,
    pub datasets: Vec<DatasetStats>,
    pub shards: Vec<ShardStats>,
    pub created_at_ms: i64,
}

/// Counter key; the derived order is the build order (tenant, dataset, shard id, owner).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct CounterKey {
    tenant: String,
    dataset: String,
    shard: ShardId,
    owner: String,
}

/// Tracks byte rates from block samples. `shard == 0` keys are the per-dataset std-dev counters.
#[derive(Clone, Debug)]
pub struct StatsTracker {
    half_life: Duration,
    counters: BTreeMap<CounterKey, EwmaRate>,
}

impl StatsTracker {
    /// A tracker whose rates have half-life `aggregation_window`.
    pub fn new(aggregation_window: Duration) -> Self {
        Self { half_life: aggregation_window, counters: BTreeMap::new() }
    }

    /// Records `size_bytes` written to `shard` of `(tenant, dataset)` by `owner` at `now_ms`.
    /// Samples for [`ShardId::UNASSIGNED`] are ignored (that id is reserved).
    pub fn record(&mut self, tenant: &str, dataset: &str, shard: ShardId, owner: &str, size_bytes: u64, now_ms: i64) {
        if shard.is_unassigned() {
            return;
        }
        let key = CounterKey { tenant: tenant.to_owned(), dataset: dataset.to_owned(), shard, owner: owner.to_owned() };
        self.counter(key).update(size_bytes as f64, now_ms);
    }

    fn counter(&mut self, key: CounterKey) -> &mut EwmaRate {
        let half_life = self.half_life;
        self.counters.entry(key).or_insert_with(|| EwmaRate::with_half_life(half_life))
    }

    /// Drops counters whose last fold is before `before_ms`.
    pub fn expire(&mut self, before_ms: i64) {
        self.counters.retain(|_, c| c.last_update_ms() >= before_ms);
    }

    /// Builds the statistics at `now_ms` (also feeds each dataset's std-dev counter).
    pub fn build(&mut self, now_ms: i64) -> DistributionStats {
        let mut stats = DistributionStats { created_at_ms: now_ms, ..Default::default() };
        let mut tenants: HashMap<&str, u32> = HashMap::new();
        let mut datasets: HashMap<(&str, &str), usize> = HashMap::new();
        let mut shards: HashMap<(&str, ShardId), u32> = HashMap::new();
        for (k, c) in self.counters.iter().filter(|(k, _)| !k.shard.is_unassigned()) {
            let tenant = *tenants.entry(&k.tenant).or_insert_with(|| {
                stats.tenants.push(TenantStats { tenant_id: k.tenant.clone() });
                index_u32(stats.tenants.len() - 1)
            });
            let ds = *datasets.entry((&k.tenant, &k.dataset)).or_insert_with(|| {
                stats.datasets.push(DatasetStats {
                    tenant,
                    name: k.dataset.clone(),
                    shards: Vec::new(),
                    usage_bytes_per_sec: Vec::new(),
                    std_dev_bytes_per_sec: 0,
                });
                stats.datasets.len() - 1
            });
            let shard = *shards.entry((&k.owner, k.shard)).or_insert_with(|| {
                stats.shards.push(ShardStats { id: k.shard, owner: k.owner.clone() });
                index_u32(stats.shards.len() - 1)
            });
            let d = &mut stats.datasets[ds];
            d.shards.push(shard);
            d.usage_bytes_per_sec.push(c.value(now_ms).round() as u64);
        }
        for d in &mut stats.datasets {
            let key = CounterKey {
                tenant: stats.tenants[d.tenant as usize].tenant_id.clone(),
                dataset: d.name.clone(),
                shard: ShardId::UNASSIGNED,
                owner: String::new(),
            };
            let half_life = self.half_life;
            let c = self.counters.entry(key).or_insert_with(|| EwmaRate::with_half_life(half_life));
            c.update(std_dev_u64(&d.usage_bytes_per_sec) as f64, now_ms);
            d.std_dev_bytes_per_sec = c.value(now_ms).round() as u64;
        }
        stats
    }
}

fn index_u32(i: usize) -> u32 {
    u32::try_from(i).expect("fewer than 2^32 stats entries")
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1000;

    fn view(stats: &DistributionStats) -> Vec<(u32, String, Vec<u32>, Vec<u64>)> {
        stats
            .datasets
            .iter()
            .map(|d| (d.tenant, d.name.clone(), d.shards.clone(), d.usage_bytes_per_sec.clone()))
            .collect()
    }

    fn row(t: u32, n: &str, s: &[u32], u: &[u64]) -> (u32, String, Vec<u32>, Vec<u64>) {
        (t, n.to_owned(), s.to_vec(), u.to_vec())
    }

    fn ids(stats: &DistributionStats) -> Vec<u32> {
        stats.shards.iter().map(|s| s.id.0).collect()
    }

    /// `Test_StatsTracker`.
    #[test]
    fn stats_tracker_vectors() {
        let mut t = StatsTracker::new(Duration::from_secs(10));
        let mut now = 0;
        for _ in 0..10 {
            t.record("tenant-a", "dataset-a", ShardId(1), "", 10, now);
            t.record("tenant-a", "dataset-b", ShardId(1), "", 10, now);
            now += S;
        }
        let s = t.build(now);
        assert_eq!(view(&s), vec![row(0, "dataset-a", &[0], &[5]), row(0, "dataset-b", &[0], &[5])]);
        assert_eq!(ids(&s), vec![1]);
        for _ in 0..10 {
            t.record("tenant-a", "dataset-a", ShardId(2), "", 10, now);
            t.record("tenant-a", "dataset-b", ShardId(1), "", 10, now);
            t.record("tenant-b", "dataset-c", ShardId(2), "", 10, now);
            now += S;
        }
        let s = t.build(now);
        assert_eq!(
            view(&s),
            vec![
                row(0, "dataset-a", &[0, 1], &[3, 5]),
                row(0, "dataset-b", &[0], &[8]),
                row(1, "dataset-c", &[1], &[5])
            ]
        );
        assert_eq!(ids(&s), vec![1, 2]);
        assert!(s.datasets.iter().all(|d| d.std_dev_bytes_per_sec == 0));
        for _ in 0..40 {
            t.record("tenant-a", "dataset-a", ShardId(2), "", 10, now);
            t.record("tenant-a", "dataset-b", ShardId(1), "", 10, now);
            t.record("tenant-b", "dataset-c", ShardId(2), "", 10, now);
            now += S;
        }
        let s = t.build(now);
        assert_eq!(
            view(&s),
            vec![
                row(0, "dataset-a", &[0, 1], &[0, 10]),
                row(0, "dataset-b", &[0], &[10]),
                row(1, "dataset-c", &[1], &[10])
            ]
        );
        t.expire(40 * S);
        t.build(now);
        let s = t.build(now);
        assert_eq!(
            view(&s),
            vec![row(0, "dataset-a", &[0], &[10]), row(0, "dataset-b", &[1], &[10]), row(1, "dataset-c", &[0], &[10])]
        );
        assert_eq!(ids(&s), vec![2, 1]);
        t.expire(now);
        assert!(t.build(now).datasets.is_empty());
    }

    /// `Test_StatsTracker_SameDatasetNameAcrossTenants`.
    #[test]
    fn same_dataset_name_across_tenants() {
        let mut t = StatsTracker::new(Duration::from_secs(10));
        let mut now = 0;
        for _ in 0..10 {
            t.record("tenant-a", "dataset", ShardId(1), "", 10, now);
            t.record("tenant-b", "dataset", ShardId(1), "", 30, now);
            now += S;
        }
        let s = t.build(now);
        assert_eq!(view(&s), vec![row(0, "dataset", &[0], &[5]), row(1, "dataset", &[0], &[15])]);
    }

    #[test]
    fn stats_serialize_snake_case() {
        let s = DistributionStats { created_at_ms: 5, ..Default::default() };
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(json, r#"{"tenants":[],"datasets":[],"shards":[],"created_at_ms":5}"#);
    }
}
