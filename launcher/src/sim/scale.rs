//! A scenario scaled to `N` partitions and `M` workers, with the same load per worker and the
//! same hotspots per worker.
//!
//! Scaling only the counts would dissolve the hotspots: a hot range that covers half of one of
//! 32 partitions covers 780 of 100,000, each lukewarm. So, with `kw = M / M0` and
//! `kp = N / N0` (`M0`, `N0` the scenario's own counts):
//! - each table keeps its share of the partitions (`partitions × kp`, at least 1); partition
//!   sizes and limits, worker capacities do not change;
//! - *background* components (uniform, zipf) carry `kw ×` their rate, so the load per worker is
//!   the scenario's; zipf gets `kp ×` its segments, so a segment spans as many partitions;
//! - *hot* components (hot range, hot key, sequential append) are replicated `round(kw)` times at
//!   their own rate: replica `i` starts in a partition drawn (from the scenario's seed) inside the
//!   `i`-th of `kw` equal slices of the table, at the same place inside that partition as the
//!   original inside its own, and a hot range keeps its width *in partitions* (an append moves
//!   through as many partitions per second). Each replica is a hotspot as strong as the
//!   original, and there are as many per worker. (Evenly spaced replicas would line up with the
//!   round-robin placement and pile onto a handful of workers.);
//! - datasets are hotspots too (their few shards' workers saturate): each is replicated
//!   `round(kw)` times at its own rate and growth, replica `i > 0` in a tenant of its own
//!   (`<tenant>@<i>`), so its subring lands on other workers (scaled down, the one dataset
//!   carries `kw ×` its rate); dedicated groups get
//!   `round(g × kw)` workers, and zones their shares of the workers;
//! - the timeline is kept, except that a `worker_added` beyond the scenario's workers is renamed
//!   past the scaled ones and a dataset's rate change applies to each of its replicas. A lost
//!   worker stays one worker (at 1,000 workers that is a small event, which is what it is).

use lb_common::ids::Key;

use lb_common::validate::{FieldError, ValidationError};

use lb_common::ids::TenantId;
use lb_testbed::scenario::{DatasetSpec, Event, Scenario, WorkloadKind, worker_name};
use lb_testbed::workload::rng::SplitMix64;

/// The scenario validator's bound on zipf segments.
const MAX_ZIPF_SEGMENTS: u32 = 1 << 20;
/// Mixed into the scenario's seed for replica placement, so it draws its own sequence.
const HOT_PLACEMENT_SALT: u64 = 0x5ca1_ab1e_0000_0000;

/// A table's partition grid before and after scaling, laid out as
/// [`Cluster::from_scenario`](lb_testbed::model::Cluster::from_scenario) does (equal widths).
#[derive(Debug, Clone, Copy)]
struct Grid {
    old: u32,
    new: u32,
}

impl Grid {
    fn width_old(self) -> u64 {
        u64::MAX / u64::from(self.old)
    }

    fn width_new(self) -> u64 {
        u64::MAX / u64::from(self.new)
    }

    /// Where `key` sits inside its old partition, scaled to a new partition's width, and how
    /// many new partitions a range of `width` keys starting there spans (1 for a point).
    fn offset_and_span(self, key: u64, width: Option<u128>) -> (u128, u64) {
        let (wo, wn) = (u128::from(self.width_old()), u128::from(self.width_new()));
        let index = (u128::from(key) / wo).min(u128::from(self.old) - 1);
        let offset = (u128::from(key) - index * wo) * wn / wo;
        let span = width.map_or(1, |w| (offset + w).div_ceil(wn).max(1));
        (offset, u64::try_from(span).unwrap_or(u64::MAX))
    }
}

/// Replica `i` of dataset `j`'s tenant: the tenant itself for the first, else `<tenant>@<i>`,
/// refused if that is not a valid id or is a tenant of the scenario already.
fn replica_tenant(scenario: &Scenario, j: usize, i: u64) -> Result<TenantId, ValidationError> {
    let tenant = &scenario.datasets[j].tenant;
    if i == 0 {
        return Ok(tenant.clone());
    }
    let name = format!("{tenant}@{i}");
    let taken = scenario.tables.iter().any(|t| t.tenant.as_str() == name)
        || scenario.datasets.iter().any(|d| d.tenant.as_str() == name);
    let refused = |message: String| ValidationError {
        errors: vec![FieldError { field: format!("datasets[{j}].tenant"), value: tenant.to_string(), message }],
    };
    if taken {
        return Err(refused(format!("its replica's tenant {name:?} is a tenant of the scenario already")));
    }
    TenantId::new(name).map_err(|e| refused(format!("cannot name its replicas: {e}")))
}

/// `scenario` at `partitions` partitions in all and `workers` workers (`None` keeps its own).
pub fn scale(scenario: &Scenario, partitions: Option<u32>, workers: Option<u32>) -> Result<Scenario, ValidationError> {
    let mut s = scenario.clone();
    let n0: u64 = scenario.tables.iter().map(|t| u64::from(t.partitions)).sum();
    let m0 = scenario.cluster.workers;
    let n = partitions.map_or(n0, u64::from);
    let m = workers.unwrap_or(m0);
    if n == n0 && m == m0 {
        return Ok(s);
    }
    let kp = n as f64 / n0.max(1) as f64;
    let kw = f64::from(m) / f64::from(m0.max(1));
    let replicas = (kw.round() as u64).max(1);
    s.cluster.workers = m;
    for g in &mut s.cluster.groups {
        g.workers = ((f64::from(g.workers) * kw).round() as u32).max(1);
    }
    // Zones keep their shares of the workers; the last zone takes what rounding leaves.
    let zones = s.cluster.zones.len();
    let mut given = 0u32;
    for (i, z) in s.cluster.zones.iter_mut().enumerate() {
        z.workers = if i + 1 == zones {
            m.saturating_sub(given).max(1)
        } else {
            ((f64::from(z.workers) * kw).round() as u32).max(1).min(m.saturating_sub(given))
        };
        given += z.workers;
    }
    for (t, table) in s.tables.iter_mut().enumerate() {
        let p0 = table.partitions;
        table.partitions = ((f64::from(p0) * kp).round() as u32).max(1);
        // Width of a hot range in partitions stays: scale by old over new partition count.
        let narrow = |w: u128| (w * u128::from(p0) / u128::from(table.partitions)).max(1);
        let mut scaled = Vec::with_capacity(table.workloads.len());
        for (j, w) in table.workloads.iter().enumerate() {
            match w.kind {
                WorkloadKind::Uniform {} | WorkloadKind::Zipf { .. } => {
                    let mut w = w.clone();
                    w.ops_per_sec *= kw;
                    if let WorkloadKind::Zipf { segments, .. } = &mut w.kind {
                        *segments = ((f64::from(*segments) * kp).round() as u32).clamp(1, MAX_ZIPF_SEGMENTS);
                    }
                    scaled.push(w);
                }
                WorkloadKind::HotRange { .. } | WorkloadKind::HotKey { .. } | WorkloadKind::SequentialAppend { .. } => {
                    let grid = Grid { old: p0, new: table.partitions };
                    let copies = replicas.min(u64::from(table.partitions));
                    let slice = u64::from(table.partitions) / copies;
                    let salt = HOT_PLACEMENT_SALT ^ ((t as u64) << 32) ^ j as u64;
                    let mut rng = SplitMix64::new(scenario.seed ^ salt);
                    for i in 0..copies {
                        let mut r = w.clone();
                        let width = match w.kind {
                            WorkloadKind::HotRange { start_key: a, end_key: b } => {
                                Some(narrow(u128::from(b.0 - a.0) + 1))
                            }
                            _ => None,
                        };
                        let mut place = |k: Key| {
                            let (offset, span) = grid.offset_and_span(k.0, width);
                            let room = slice.saturating_sub(span).saturating_add(1).max(1);
                            let partition = i * slice + rng.below(room);
                            Key((u128::from(partition) * u128::from(grid.width_new()) + offset)
                                .min(u128::from(u64::MAX)) as u64)
                        };
                        match &mut r.kind {
                            WorkloadKind::HotRange { start_key, end_key } => {
                                *start_key = place(*start_key);
                                if let Some(width) = width {
                                    *end_key =
                                        Key((u128::from(start_key.0) + width - 1).min(u128::from(u64::MAX)) as u64);
                                }
                            }
                            WorkloadKind::HotKey { key } => *key = place(*key),
                            WorkloadKind::SequentialAppend { start_key, keys_per_sec } => {
                                *start_key = place(*start_key);
                                *keys_per_sec = *keys_per_sec * f64::from(p0) / f64::from(table.partitions);
                            }
                            WorkloadKind::Uniform {} | WorkloadKind::Zipf { .. } => unreachable!("a hot kind"),
                        }
                        scaled.push(r);
                    }
                }
            }
        }
        table.workloads = scaled;
    }
    // A dataset is a hotspot of its own (its few shards' workers saturate): replicated like
    // the hot components, each replica a tenant of its own so its subring lands elsewhere.
    // Scaled down (fewer workers), the one dataset carries `kw ×` its rate instead.
    let rate_factor = kw.min(1.0);
    let mut datasets = Vec::with_capacity(scenario.datasets.len() * replicas as usize);
    for (j, d) in scenario.datasets.iter().enumerate() {
        for i in 0..replicas {
            datasets.push(DatasetSpec {
                tenant: replica_tenant(scenario, j, i)?,
                ops_per_sec: d.ops_per_sec * rate_factor,
                growth_ops_per_sec_per_hour: d.growth_ops_per_sec_per_hour * rate_factor,
                ..d.clone()
            });
        }
    }
    s.datasets = datasets;
    let mut timeline = Vec::with_capacity(s.timeline.len());
    for mut e in std::mem::take(&mut s.timeline) {
        match &mut e.event {
            Event::WorkerAdded { worker, .. } => {
                let index = worker.as_str().strip_prefix("w-").and_then(|n| n.parse::<u32>().ok());
                if let Some(i) = index.filter(|&i| i >= m0) {
                    *worker = worker_name(m + (i - m0));
                }
            }
            Event::DatasetRate { tenant, dataset, ops_per_sec, growth_ops_per_sec_per_hour } => {
                *ops_per_sec *= rate_factor;
                *growth_ops_per_sec_per_hour *= rate_factor;
                let j = scenario.datasets.iter().position(|d| &d.tenant == tenant && &d.dataset == dataset);
                for i in 1..replicas {
                    let mut replica = e.clone();
                    if let (Event::DatasetRate { tenant, .. }, Some(j)) = (&mut replica.event, j) {
                        *tenant = replica_tenant(scenario, j, i)?;
                        timeline.push(replica);
                    }
                }
            }
            _ => {}
        }
        timeline.push(e);
    }
    timeline.sort_by_key(|e| e.at_secs);
    s.timeline = timeline;
    s.validate()?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dataset_is_replicated_per_workers_scale_in_tenants_of_its_own_at_its_own_rate() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../configs/scenarios/growing-dataset.toml");
        let mut scenario = Scenario::load(std::path::Path::new(path)).expect("loads");
        let d0 = scenario.datasets[0].clone();
        scenario.timeline.push(lb_testbed::scenario::TimelineEvent {
            at_secs: 600,
            event: Event::DatasetRate {
                tenant: d0.tenant.clone(),
                dataset: d0.dataset.clone(),
                ops_per_sec: 5_000.0,
                growth_ops_per_sec_per_hour: 0.0,
            },
        });
        // 16 workers -> 64: four of each dataset, each as strong as the original.
        let scaled = scale(&scenario, Some(128), Some(64)).expect("scales");
        let tenants: Vec<&str> = scaled.datasets.iter().map(|d| d.tenant.as_str()).collect();
        assert_eq!(tenants, ["logs", "logs@1", "logs@2", "logs@3"]);
        for d in &scaled.datasets {
            assert_eq!(
                (d.ops_per_sec, d.growth_ops_per_sec_per_hour),
                (d0.ops_per_sec, d0.growth_ops_per_sec_per_hour)
            );
            assert_eq!(
                (d.dataset_shards, d.tenant_shards, &d.dataset),
                (d0.dataset_shards, d0.tenant_shards, &d0.dataset)
            );
        }
        // The rate change reaches every replica, unscaled.
        let changes: Vec<(&str, f64)> = scaled
            .timeline
            .iter()
            .filter_map(|e| match &e.event {
                Event::DatasetRate { tenant, ops_per_sec, .. } => Some((tenant.as_str(), *ops_per_sec)),
                _ => None,
            })
            .collect();
        assert_eq!(changes, [("logs@1", 5_000.0), ("logs@2", 5_000.0), ("logs@3", 5_000.0), ("logs", 5_000.0)]);
        // The engine places each replica's subring on its own workers.
        let engine = lb_testbed::Engine::new(&scaled);
        let owners: Vec<std::collections::BTreeSet<u32>> =
            engine.cluster.datasets.iter().map(|d| d.shares.iter().map(|s| s.worker).collect()).collect();
        assert_eq!(owners.len(), 4);
        let all: std::collections::BTreeSet<u32> = owners.iter().flatten().copied().collect();
        assert!(all.len() > owners[0].len(), "the replicas do not all sit on the original's workers: {owners:?}");
        // Scaled down, the one dataset carries its share of the rate.
        let half = scale(&scenario, Some(16), Some(8)).expect("scales");
        assert_eq!(half.datasets.len(), 1);
        assert_eq!(half.datasets[0].ops_per_sec, d0.ops_per_sec / 2.0);
        // A replica's name may not be a tenant already.
        let mut clash = scenario.clone();
        clash.tables[0].tenant = TenantId::new("logs@1").expect("valid");
        let err = scale(&clash, Some(128), Some(64)).unwrap_err();
        assert!(err.to_string().contains("datasets[0].tenant"), "{err}");
    }
}
