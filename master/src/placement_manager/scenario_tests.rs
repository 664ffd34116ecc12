//! The placement manager drives the testbed engine in virtual time through the master's real
//! data path: worker reports → MetricsTable → [`dataset_shard_usage`] → observe → plan →
//! `Engine::submit`, one tick per simulated second.

use std::path::Path;
use std::time::Duration;

use lb_common::ids::{ActionId, DatasetId, OperationId, TenantId, WorkerId};
use lb_common::protocol::{ActionSpec, Cursor, OperationState, Sample, SampleData};
use lb_testbed::Engine;
use lb_testbed::scenario::{Event, Scenario, TimelineEvent};

use super::*;
use crate::table::TableConfig;

/// The analyzer's window over the table (the master's default analysis window is a few seconds).
const WINDOW: Duration = Duration::from_secs(5);

fn growing_dataset() -> Scenario {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    Scenario::load(&here.join("../configs/scenarios/growing-dataset.toml")).expect("scenario loads")
}

struct Sim {
    engine: Engine,
    table: MetricsTable,
    manager: PlacementManager,
    config: PlacementManagerConfig,
    cursors: Vec<u64>,
    topology_version: u64,
    /// (t_secs, proposal, operation).
    proposals: Vec<(u64, Proposal, OperationId)>,
    /// Per tick: (t_secs, dataset demand ops/s, dataset rejected ops/s, dataset shards).
    ticks: Vec<(u64, f64, f64, u32)>,
}

impl Sim {
    fn new(scenario: &Scenario, config: PlacementManagerConfig) -> Self {
        let engine = Engine::new(scenario);
        let workers = engine.cluster.workers.len();
        Self {
            engine,
            table: MetricsTable::new(TableConfig::default()).expect("default table config"),
            manager: PlacementManager::new(&config),
            config,
            cursors: vec![0; workers],
            topology_version: 0,
            proposals: Vec::new(),
            ticks: Vec::new(),
        }
    }

    fn tick(&mut self) {
        self.engine.step(Duration::from_secs(1));
        let now = self.engine.now_ms();
        let t = self.engine.elapsed().as_secs();
        let topology = self.engine.topology();
        if topology.version != self.topology_version {
            self.table.apply_topology(&topology);
            self.topology_version = topology.version;
        }
        let ids: Vec<WorkerId> = self.engine.cluster.workers.ids.clone();
        for (w, report) in self.engine.reports_for(&ids).into_iter().enumerate() {
            let samples: Vec<Sample> = report
                .partitions
                .into_iter()
                .map(|p| {
                    self.cursors[w] += 1;
                    Sample {
                        cursor: Cursor(self.cursors[w]),
                        timestamp_ms: report.timestamp_ms,
                        interval_ms: report.interval_ms,
                        data: SampleData::Partition(p),
                        agent_sampled: false,
                    }
                })
                .collect();
            self.table.ingest(&report.worker_id, &samples, now);
        }
        let usage = dataset_shard_usage(&self.table, &topology.datasets, WINDOW, now).expect("table query");
        self.manager.observe(now, &usage);
        for p in self.manager.plan(&topology.datasets, &self.config, now) {
            let id = ActionId::new(format!("pm-{}", self.proposals.len() + 1)).expect("valid id");
            let op = self.engine.submit(id, p.spec.clone()).expect("the testbed accepts the reshard");
            self.proposals.push((t, p, op));
        }
        let d = &self.engine.cluster.datasets[0];
        let rejected = self.engine.cluster.dataset_rejected_ops(self.engine.t_secs());
        self.ticks.push((t, d.rate_at(self.engine.t_secs()), rejected, d.dataset_shards));
    }

    fn shards_of(p: &Proposal) -> (u32, LoadBalancing) {
        match &p.spec {
            ActionSpec::Reshard { dataset_shards, load_balancing, .. } => (*dataset_shards, *load_balancing),
            other => panic!("unexpected spec {other:?}"),
        }
    }

    /// Rejected over demand of the dataset, summed over ticks in `[from, to)`.
    fn rejected_ratio(&self, from: u64, to: u64) -> f64 {
        let (d, r) = self
            .ticks
            .iter()
            .filter(|(t, ..)| (from..to).contains(t))
            .fold((0.0, 0.0), |(d, r), &(_, demand, rejected, _)| (d + demand, r + rejected));
        r / d
    }
}

/// Growth from 20k to 80k ops/s over an hour, then a drop to 15k ops/s for the rest: resharded
/// up while it grows with rejections under 1 % of demand, resharded down only after the decay
/// window, never up again.
#[test]
fn growing_dataset_is_resharded_up_then_down_after_its_decay_window() {
    const DROP_SECS: u64 = 3600;
    const END_SECS: u64 = 6300;
    let mut scenario = growing_dataset();
    scenario.timeline.push(TimelineEvent {
        at_secs: DROP_SECS,
        event: Event::DatasetRate {
            tenant: TenantId::new("logs").expect("id"),
            dataset: DatasetId::new("ingest").expect("id"),
            ops_per_sec: 15_000.0,
            growth_ops_per_sec_per_hour: 0.0,
        },
    });
    scenario.validate().expect("the extended scenario is valid");
    let config = PlacementManagerConfig { mode: PolicyMode::Auto, ..PlacementManagerConfig::default() };
    let decay_secs = config.decay_window_secs;
    let mut sim = Sim::new(&scenario, config.clone());
    while sim.engine.elapsed().as_secs() < END_SECS {
        sim.tick();
    }

    let summary: Vec<(u64, u32, LoadBalancing)> = sim
        .proposals
        .iter()
        .map(|(t, p, _)| {
            let (n, lb) = Sim::shards_of(p);
            (*t, n, lb)
        })
        .collect();
    println!("proposals (t, shards, lb): {summary:?}");
    for (_, p, op) in &sim.proposals {
        assert_eq!(p.policy, Policy::DatasetPlacement);
        assert!(!p.reason.is_empty() && !p.rejected_alternatives.is_empty(), "{p:?}");
        let state = sim.engine.operation(op).map(|o| o.state);
        assert_eq!(state, Some(OperationState::Succeeded), "{op}");
    }
    // No two reshards of the dataset inside the minimum interval.
    for w in summary.windows(2) {
        assert!(w[1].0 - w[0].0 >= config.min_reshard_interval_secs, "{w:?}");
    }

    // Up while it grows: the shard count follows the need (just under 80k ops/s after the EWMA's
    // lag of ~1.4k ops/s is 15.7 units of 5k: 16 shards).
    let growth: Vec<_> = summary.iter().filter(|(t, ..)| *t < DROP_SECS).collect();
    assert!(growth.len() >= 3, "{growth:?}");
    assert!(growth.windows(2).all(|w| w[1].1 >= w[0].1), "monotone up while growing: {growth:?}");
    let at_drop = sim.ticks.iter().find(|(t, ..)| *t == DROP_SECS - 1).expect("tick").3;
    assert!(at_drop >= 16, "shards at the end of the growth: {at_drop}");

    // Rejections: under 1 % of the dataset's demand once the first reshard is in place.
    let first_done = summary[0].0 + 10;
    // The control: the same growth with the manager off rejects a sizeable share, so the low
    // figure is the reshards' doing.
    let ratio = sim.rejected_ratio(first_done, DROP_SECS);
    let mut control = Sim::new(&scenario, PlacementManagerConfig { mode: PolicyMode::Off, ..config.clone() });
    while control.engine.elapsed().as_secs() < DROP_SECS {
        control.tick();
    }
    assert!(control.proposals.is_empty());
    let unmanaged = control.rejected_ratio(first_done, DROP_SECS);
    println!("rejected/demand during growth: managed {ratio:.5}, unmanaged {unmanaged:.4}");
    assert!(ratio < 0.01, "rejected {ratio:.4} of demand during growth");
    assert!(unmanaged > 0.05, "the control should saturate: {unmanaged:.4}");

    // Down only after the decay window, then never up again.
    let after: Vec<_> = summary.iter().filter(|(t, ..)| *t >= DROP_SECS).collect();
    let first_down = after.iter().find(|(_, n, _)| *n < at_drop).expect("resharded down after the drop");
    println!("first reshard down {} s after the drop", first_down.0 - DROP_SECS);
    assert!(first_down.0 >= DROP_SECS + decay_secs, "down too early: {first_down:?}");
    assert!(first_down.0 <= DROP_SECS + 2 * decay_secs + 120, "down too late: {first_down:?}");
    assert!(after.windows(2).all(|w| w[1].1 <= w[0].1), "no flapping after the drop: {after:?}");
    let final_shards = sim.ticks.last().expect("ticks").3;
    assert_eq!(final_shards, 4, "15k ops/s at 5k per shard needs 4 shards");
    let tail = sim.rejected_ratio(DROP_SECS, END_SECS);
    println!("rejected/demand after the drop: {tail:.5}");
    assert!(tail < 0.01, "rejected {tail:.4} after the drop");

    // The rules follow the applied layout: one version per layout change (plus the first).
    let now = sim.engine.now_ms();
    let rules = sim.manager.rules(now);
    assert_eq!(rules.version, summary.len() as u64 + 1);
    let rule = &rules.datasets[0];
    assert_eq!((rule.dataset.as_str(), rule.dataset_shard_limit), ("ingest", 4));
    assert_eq!(rule.load_balancing, LoadBalancing::RoundRobin);

    // The planner's input is built from the topology's partitions: the dataset shards in the
    // table never reach it as partitions, but their load is in their workers' load.
    let topology = sim.engine.topology();
    let input = crate::online::observe::planner_input(&sim.table, &topology, Vec::new(), WINDOW, now);
    assert_eq!(input.partitions.len(), topology.partitions.len());
    assert!(input.partitions.iter().all(|p| p.table.as_str() == "index"));
    let usage = dataset_shard_usage(&sim.table, &topology.datasets, WINDOW, now).expect("table query");
    assert_eq!(usage.len(), 4, "one row per shard of the subring");
    let worker_ops: f64 = input.workers.iter().map(|w| w.load.ops_per_sec).sum();
    let partition_ops: f64 = input.partitions.iter().map(|p| p.stats.ops_per_sec).sum();
    let dataset_ops: f64 = usage.iter().map(|u| u.ops_per_sec).sum();
    assert!(
        (worker_ops - partition_ops - dataset_ops).abs() < 0.01 * worker_ops,
        "{worker_ops} {partition_ops} {dataset_ops}"
    );
}

/// Dry-run proposes (once per interval) but the engine is never told, and off proposes nothing.
#[test]
fn dry_run_proposes_without_acting_and_off_is_silent() {
    let scenario = growing_dataset();
    let config = PlacementManagerConfig { mode: PolicyMode::DryRun, ..PlacementManagerConfig::default() };
    let mut sim = Sim::new(&scenario, config.clone());
    let mut dry = Vec::new();
    for _ in 0..300 {
        sim.engine.step(Duration::from_secs(1));
        let now = sim.engine.now_ms();
        let topology = sim.engine.topology();
        let ids = sim.engine.cluster.workers.ids.clone();
        let usage: Vec<DatasetShardUsage> = sim
            .engine
            .reports_for(&ids)
            .into_iter()
            .flat_map(|r| {
                let worker = r.worker_id.clone();
                r.partitions.into_iter().filter_map(move |p| {
                    let shard = parse_dataset_shard_id(&p.partition_id, &p.tenant, p.table.as_str())?;
                    Some(DatasetShardUsage {
                        tenant: p.tenant.clone(),
                        dataset: DatasetId::new(p.table.as_str()).ok()?,
                        shard,
                        worker: Some(worker.clone()),
                        ops_per_sec: p.ops() as f64,
                        rejected_per_sec: p.rejected as f64,
                        bytes_per_sec: (p.read_bytes + p.write_bytes) as f64,
                    })
                })
            })
            .collect();
        sim.manager.observe(now, &usage);
        dry.extend(sim.manager.plan(&topology.datasets, &config, now));
    }
    assert!(!dry.is_empty(), "a dataset at 4 shards for 20k ops/s gets a proposal");
    assert!(dry.iter().all(|p| p.mode == PolicyMode::DryRun));
    assert!(dry.len() <= 300 / config.min_reshard_interval_secs as usize + 1, "{}", dry.len());
    assert_eq!(sim.engine.topology().datasets[0].dataset_shards, 4, "dry-run changes nothing");

    let off = PlacementManagerConfig { mode: PolicyMode::Off, ..config };
    let topology = sim.engine.topology();
    assert!(sim.manager.plan(&topology.datasets, &off, sim.engine.now_ms() + 60_000).is_empty());
}
