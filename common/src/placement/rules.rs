//! Placement rules: per dataset the tenant and dataset shard limits and the load-balancing mode.
//!
//! The [`Ruler`] keeps one allocator per `(tenant, dataset)`, turns each [`DistributionStats`] into
//! [`PlacementRules`], carries datasets absent from a batch over with their remembered values, and
//! forgets datasets not seen since a cut-off ([`Ruler::expire`]). Round-robin is sticky under
//! `dynamic`: once chosen it stays until the dataset expires or the configuration says `fingerprint`.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::allocator::{AllocatorLimits, DEFAULT_MAX_DATASET_SHARDS, DEFAULT_MIN_DATASET_SHARDS, ShardAllocator};
use super::distribute::{ShardPick, ShardPolicy};
use super::error::PlacementError;
use super::stats::DistributionStats;
use super::strategy::{LoadBalancing, LoadBalancingMode, load_balancing_strategy};

/// 0 = no tenant limit (the whole ring), the reference default.
pub const DEFAULT_TENANT_SHARDS: u32 = 0;
/// One shard per new dataset until its load is known.
pub const DEFAULT_DATASET_SHARDS: u32 = 1;
/// 15 min: datasets without stats for this long are forgotten (reference default).
pub const DEFAULT_PLACEMENT_RETENTION_PERIOD: Duration = Duration::from_secs(15 * 60);
/// 15 s: rules are rebuilt and published this often (reference default).
pub const DEFAULT_PLACEMENT_UPDATE_INTERVAL: Duration = Duration::from_secs(15);

/// Per-tenant placement limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlacementLimits {
    /// Tenant subring size; 0 = whole ring.
    pub tenant_shards: u32,
    /// Dataset shards before any rule exists.
    pub default_dataset_shards: u32,
    pub allocator: AllocatorLimits,
    pub load_balancing: LoadBalancing,
}

impl Default for PlacementLimits {
    fn default() -> Self {
        Self {
            tenant_shards: DEFAULT_TENANT_SHARDS,
            default_dataset_shards: DEFAULT_DATASET_SHARDS,
            allocator: AllocatorLimits {
                min_shards: DEFAULT_MIN_DATASET_SHARDS,
                max_shards: DEFAULT_MAX_DATASET_SHARDS,
                ..AllocatorLimits::default()
            },
            load_balancing: LoadBalancing::Dynamic,
        }
    }
}

/// A tenant entry of [`PlacementRules`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantPlacement {
    pub tenant_id: String,
}

/// The rule of one dataset.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatasetPlacement {
    /// Index into [`PlacementRules::tenants`].
    pub tenant: u32,
    pub name: String,
    pub tenant_shard_limit: u32,
    pub dataset_shard_limit: u32,
    pub load_balancing: LoadBalancingMode,
    /// The zones the dataset lives in (empty: every zone); see [`super::zones`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<crate::ids::ZoneId>,
}

/// Rules published to routers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacementRules {
    pub tenants: Vec<TenantPlacement>,
    pub datasets: Vec<DatasetPlacement>,
    pub created_at_ms: i64,
}

impl PlacementRules {
    /// The wire form served at `GET /api/v1/placement/rules`: tenants by name instead of by
    /// index, sorted by (tenant, dataset), `unspecified` load balancing sent as `fingerprint`
    /// (what a router does with it). Fails on a tenant or dataset name that is not a valid id.
    pub fn to_wire(&self, version: u64) -> Result<crate::protocol::PlacementRules, PlacementError> {
        use crate::protocol::{DatasetPlacement as WireRule, LoadBalancing as WireLb};
        let id_error = |what, value: &str, e: crate::ids::IdError| PlacementError::InvalidId {
            what,
            value: value.to_owned(),
            reason: e.to_string(),
        };
        let mut datasets = Vec::with_capacity(self.datasets.len());
        for d in &self.datasets {
            let Some(tenant) = self.tenants.get(d.tenant as usize) else { continue };
            datasets.push(WireRule {
                tenant: tenant.tenant_id.parse().map_err(|e| id_error("tenant", &tenant.tenant_id, e))?,
                dataset: d.name.parse().map_err(|e| id_error("dataset", &d.name, e))?,
                tenant_shard_limit: d.tenant_shard_limit,
                dataset_shard_limit: d.dataset_shard_limit,
                load_balancing: match d.load_balancing {
                    LoadBalancingMode::RoundRobin => WireLb::RoundRobin,
                    LoadBalancingMode::Fingerprint | LoadBalancingMode::Unspecified => WireLb::Fingerprint,
                },
                zones: d.zones.clone(),
            });
        }
        datasets.sort_by(|a, b| (&a.tenant, &a.dataset).cmp(&(&b.tenant, &b.dataset)));
        Ok(crate::protocol::PlacementRules { version, created_at_ms: self.created_at_ms, datasets })
    }

    /// `(tenant_id, dataset) → rule` for lookups on the routing path.
    pub fn index(&self) -> HashMap<(String, String), DatasetPlacement> {
        self.datasets
            .iter()
            .filter_map(|d| {
                let tenant = self.tenants.get(d.tenant as usize)?;
                Some(((tenant.tenant_id.clone(), d.name.clone()), d.clone()))
            })
            .collect()
    }
}

/// The shard policy of a key: its rule if any, else the tenant's defaults. `seq` feeds round-robin.
pub fn shard_policy(rule: Option<&DatasetPlacement>, limits: &PlacementLimits, seq: u64) -> ShardPolicy {
    let (tenant_shards, dataset_shards, round_robin) = match rule {
        Some(r) => (r.tenant_shard_limit, r.dataset_shard_limit, r.load_balancing == LoadBalancingMode::RoundRobin),
        None => {
            (limits.tenant_shards, limits.default_dataset_shards, limits.load_balancing == LoadBalancing::RoundRobin)
        }
    };
    let pick = if round_robin { ShardPick::RoundRobin { seq } } else { ShardPick::Fingerprint };
    ShardPolicy { tenant_shards, dataset_shards, pick }
}

#[derive(Clone, Debug)]
struct RulerEntry {
    allocator: ShardAllocator,
    last_update_ms: i64,
    tenant_shards: u32,
    dataset_shards: u32,
    load_balancing: LoadBalancingMode,
}

/// Builds placement rules from statistics; one per leader.
#[derive(Clone, Debug, Default)]
pub struct Ruler {
    entries: BTreeMap<(String, String), RulerEntry>,
}

impl Ruler {
    /// An empty ruler.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of remembered datasets.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no dataset is remembered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Restores entries from stored rules (after a leader change): each stored dataset limit is a
    /// floor for at least one decay window after the rules' creation time.
    pub fn load(
        &mut self,
        rules: &PlacementRules,
        limits: impl Fn(&str) -> PlacementLimits,
    ) -> Result<(), PlacementError> {
        for d in &rules.datasets {
            let Some(tenant) = rules.tenants.get(d.tenant as usize) else {
                continue;
            };
            let l = limits(&tenant.tenant_id);
            let entry = RulerEntry {
                allocator: ShardAllocator::restored(l.allocator, rules.created_at_ms, d.dataset_shard_limit)?,
                last_update_ms: rules.created_at_ms,
                tenant_shards: d.tenant_shard_limit,
                dataset_shards: d.dataset_shard_limit,
                load_balancing: d.load_balancing,
            };
            self.entries.insert((tenant.tenant_id.clone(), d.name.clone()), entry);
        }
        Ok(())
    }

    /// Turns `stats` into rules stamped `stats.created_at_ms`; remembered datasets absent from
    /// `stats` follow in `(tenant, dataset)` order with their last values.
    pub fn build_rules(
        &mut self,
        stats: &DistributionStats,
        limits: impl Fn(&str) -> PlacementLimits,
    ) -> Result<PlacementRules, PlacementError> {
        let now_ms = stats.created_at_ms;
        let mut rules = PlacementRules {
            tenants: stats.tenants.iter().map(|t| TenantPlacement { tenant_id: t.tenant_id.clone() }).collect(),
            datasets: Vec::with_capacity(stats.datasets.len()),
            created_at_ms: now_ms,
        };
        for ds in &stats.datasets {
            // Stats may come from storage: a dataset pointing at no tenant is skipped, not a panic.
            let Some(tenant_id) = stats.tenants.get(ds.tenant as usize).map(|t| &t.tenant_id) else {
                continue;
            };
            let l = limits(tenant_id);
            let key = (tenant_id.clone(), ds.name.clone());
            let entry = match self.entries.entry(key) {
                std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
                std::collections::btree_map::Entry::Vacant(v) => v.insert(RulerEntry {
                    allocator: ShardAllocator::new(l.allocator)?,
                    last_update_ms: now_ms,
                    tenant_shards: l.tenant_shards,
                    dataset_shards: l.default_dataset_shards,
                    load_balancing: l.load_balancing.into(),
                }),
            };
            entry.last_update_ms = now_ms;
            entry.allocator.set_limits(l.allocator)?;
            entry.tenant_shards = l.tenant_shards;
            let usage: u64 = ds.usage_bytes_per_sec.iter().fold(0u64, |a, &u| a.saturating_add(u));
            entry.dataset_shards = entry.allocator.observe(usage, now_ms);
            if l.load_balancing != LoadBalancing::Dynamic {
                entry.load_balancing = l.load_balancing.into();
            } else if entry.load_balancing != LoadBalancingMode::RoundRobin {
                entry.load_balancing = load_balancing_strategy(
                    &ds.usage_bytes_per_sec,
                    ds.std_dev_bytes_per_sec,
                    l.allocator.unit_size_bytes_per_sec,
                    entry.allocator.target(),
                )?;
            }
            rules.datasets.push(placement(ds.tenant, &ds.name, entry));
        }
        let mut tenant_index: HashMap<String, u32> =
            rules.tenants.iter().enumerate().map(|(i, t)| (t.tenant_id.clone(), index_u32(i))).collect();
        for ((tenant_id, name), entry) in self.entries.iter().filter(|(_, e)| e.last_update_ms < now_ms) {
            let tenant = *tenant_index.entry(tenant_id.clone()).or_insert_with(|| {
                rules.tenants.push(TenantPlacement { tenant_id: tenant_id.clone() });
                index_u32(rules.tenants.len() - 1)
            });
            rules.datasets.push(placement(tenant, name, entry));
        }
        Ok(rules)
    }

    /// Forgets datasets whose last stats are older than `before_ms`.
    pub fn expire(&mut self, before_ms: i64) {
        self.entries.retain(|_, e| e.last_update_ms >= before_ms);
    }
}

fn placement(tenant: u32, name: &str, e: &RulerEntry) -> DatasetPlacement {
    DatasetPlacement {
        tenant,
        name: name.to_owned(),
        tenant_shard_limit: e.tenant_shards,
        dataset_shard_limit: e.dataset_shards,
        load_balancing: e.load_balancing,
        zones: Vec::new(),
    }
}

fn index_u32(i: usize) -> u32 {
    u32::try_from(i).expect("fewer than 2^32 tenants")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::stats::{DatasetStats, TenantStats};
    use LoadBalancingMode::{Fingerprint as FP, RoundRobin as RR};

    const U: u64 = 512 * 1024;

    fn limits(tenant: &str) -> PlacementLimits {
        let mut l = PlacementLimits {
            tenant_shards: 10,
            default_dataset_shards: 2,
            allocator: AllocatorLimits {
                unit_size_bytes_per_sec: U,
                min_shards: 1,
                max_shards: 10,
                burst_window: Duration::from_secs(17 * 60),
                decay_window: Duration::from_secs(19 * 60),
            },
            load_balancing: LoadBalancing::Dynamic,
        };
        match tenant {
            "tenant-a" => {
                l.tenant_shards = 20;
                l.default_dataset_shards = 3;
            }
            "tenant-b" => l.load_balancing = LoadBalancing::Fingerprint,
            "tenant-d" => {
                l.allocator.min_shards = 5;
                l.load_balancing = LoadBalancing::RoundRobin;
            }
            _ => {}
        }
        l
    }

    fn tenants(ids: &[&str]) -> Vec<TenantPlacement> {
        ids.iter().map(|t| TenantPlacement { tenant_id: (*t).to_owned() }).collect()
    }

    fn rule(tenant: u32, name: &str, t: u32, d: u32, lb: LoadBalancingMode) -> DatasetPlacement {
        DatasetPlacement {
            tenant,
            name: name.to_owned(),
            tenant_shard_limit: t,
            dataset_shard_limit: d,
            load_balancing: lb,
            zones: Vec::new(),
        }
    }

    fn ds(tenant: u32, name: &str, usage: &[u64]) -> DatasetStats {
        DatasetStats {
            tenant,
            name: name.to_owned(),
            shards: (0..usage.len() as u32).collect(),
            usage_bytes_per_sec: usage.to_vec(),
            std_dev_bytes_per_sec: 0,
        }
    }

    /// `Test_Ruler`.
    #[test]
    fn ruler_vectors() {
        let old = PlacementRules {
            tenants: tenants(&["tenant-a", "tenant-b", "tenant-c"]),
            datasets: vec![
                rule(0, "dataset-a", 2, 5, RR),
                rule(1, "dataset-b", 2, 3, RR),
                rule(2, "dataset-c", 2, 3, FP),
            ],
            created_at_ms: 0,
        };
        let mut ruler = Ruler::new();
        ruler.load(&old, limits).unwrap();
        let stats = DistributionStats {
            tenants: ["tenant-a", "tenant-b", "tenant-c", "tenant-d"]
                .iter()
                .map(|t| TenantStats { tenant_id: (*t).into() })
                .collect(),
            datasets: vec![
                ds(0, "dataset-a", &[U, U, U, U, U / 2]),
                ds(1, "dataset-b", &[U, U, U]),
                ds(2, "dataset-c", &[U, U, U / 2]),
                ds(3, "dataset-d", &[U]),
            ],
            shards: vec![],
            created_at_ms: 1,
        };
        let want = vec![
            rule(0, "dataset-a", 20, 5, RR),
            rule(1, "dataset-b", 10, 4, FP),
            rule(2, "dataset-c", 10, 3, FP),
            rule(3, "dataset-d", 10, 5, RR),
        ];
        let rules = ruler.build_rules(&stats, limits).unwrap();
        assert_eq!(rules.datasets, want);
        assert_eq!(rules.created_at_ms, 1);

        let only_a = DistributionStats {
            tenants: vec![TenantStats { tenant_id: "tenant-a".into() }],
            datasets: vec![ds(0, "dataset-a", &[U, U, U, U, U / 2])],
            shards: vec![],
            created_at_ms: 2,
        };
        let rules = ruler.build_rules(&only_a, limits).unwrap();
        assert_eq!(rules.tenants, tenants(&["tenant-a", "tenant-b", "tenant-c", "tenant-d"]));
        assert_eq!(rules.datasets, want);

        ruler.expire(3);
        let empty = DistributionStats { created_at_ms: 3, ..Default::default() };
        let rules = ruler.build_rules(&empty, limits).unwrap();
        assert_eq!(rules, PlacementRules { created_at_ms: 3, ..Default::default() });
    }

    #[test]
    fn policy_lookup_and_wire_format() {
        let rules =
            PlacementRules { tenants: tenants(&["t"]), datasets: vec![rule(0, "d", 4, 2, RR)], created_at_ms: 7 };
        let index = rules.index();
        let r = index.get(&("t".to_owned(), "d".to_owned()));
        let p = shard_policy(r, &PlacementLimits::default(), 9);
        assert_eq!(p, ShardPolicy { tenant_shards: 4, dataset_shards: 2, pick: ShardPick::RoundRobin { seq: 9 } });
        let p = shard_policy(None, &PlacementLimits::default(), 9);
        assert_eq!(p, ShardPolicy { tenant_shards: 0, dataset_shards: 1, pick: ShardPick::Fingerprint });
        let json = serde_json::to_string(&rules).unwrap();
        assert_eq!(
            json,
            r#"{"tenants":[{"tenant_id":"t"}],"datasets":[{"tenant":0,"name":"d","tenant_shard_limit":4,"dataset_shard_limit":2,"load_balancing":"round_robin"}],"created_at_ms":7}"#
        );
        let back: PlacementRules = serde_json::from_str(&json).unwrap();
        assert_eq!(back, rules);
    }

    #[test]
    fn zero_unit_is_rejected() {
        let mut ruler = Ruler::new();
        let stats = DistributionStats {
            tenants: vec![TenantStats { tenant_id: "t".into() }],
            datasets: vec![ds(0, "d", &[1])],
            shards: vec![],
            created_at_ms: 1,
        };
        let zero = |_: &str| {
            let mut l = PlacementLimits::default();
            l.allocator.unit_size_bytes_per_sec = 0;
            l
        };
        assert_eq!(ruler.build_rules(&stats, zero).unwrap_err(), PlacementError::ZeroUnitSize);
    }

    #[test]
    fn wire_form_names_tenants_and_sorts() {
        let rules = PlacementRules {
            tenants: vec![TenantPlacement { tenant_id: "zeta".into() }, TenantPlacement { tenant_id: "acme".into() }],
            datasets: vec![
                DatasetPlacement {
                    tenant: 0,
                    name: "clicks".into(),
                    tenant_shard_limit: 10,
                    dataset_shard_limit: 5,
                    load_balancing: LoadBalancingMode::RoundRobin,
                    zones: Vec::new(),
                },
                DatasetPlacement {
                    tenant: 1,
                    name: "profiles".into(),
                    tenant_shard_limit: 20,
                    dataset_shard_limit: 8,
                    load_balancing: LoadBalancingMode::Unspecified,
                    zones: vec!["eu-1a".parse().expect("valid zone")],
                },
            ],
            created_at_ms: 7,
        };
        let wire = rules.to_wire(3).expect("valid ids");
        assert_eq!((wire.version, wire.created_at_ms), (3, 7));
        let names: Vec<_> = wire.datasets.iter().map(|d| (d.tenant.as_str(), d.dataset.as_str())).collect();
        assert_eq!(names, [("acme", "profiles"), ("zeta", "clicks")]);
        assert_eq!(wire.datasets[0].load_balancing, crate::protocol::LoadBalancing::Fingerprint);
        assert_eq!(wire.datasets[1].load_balancing, crate::protocol::LoadBalancing::RoundRobin);
        assert_eq!(wire.datasets[0].zones.iter().map(|z| z.as_str()).collect::<Vec<_>>(), ["eu-1a"]);
        assert!(wire.datasets[1].zones.is_empty());

        let mut bad = rules;
        bad.datasets[0].name = "has space".into();
        assert!(matches!(bad.to_wire(1), Err(PlacementError::InvalidId { what: "dataset", .. })));
    }
}
