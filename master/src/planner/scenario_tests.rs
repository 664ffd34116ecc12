//! Scenario and convergence tests: the planner drives the testbed engine in virtual time, one
//! pass per simulated second, executing every `auto` proposal through `Engine::submit`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use lb_common::ids::{ActionId, OperationId, PartitionId};
use lb_common::protocol::{ActionKind, OperationState, PartitionStats, Report};
use lb_testbed::Engine;
use lb_testbed::scenario::Scenario;
use lb_testbed::virtual_time::ClusterView;

use super::*;

/// The planner's input from the testbed's view and this second's reports (dev-only adapter; the
/// master builds the same struct from its MetricsTable).
pub fn from_testbed_view(view: &ClusterView, reports: &[Report], in_flight: &[InFlightAction]) -> PlannerInput {
    let mut stats: HashMap<&PartitionId, (&PartitionStats, f64)> = HashMap::new();
    for r in reports {
        let secs = r.interval_ms.max(1) as f64 / 1000.0;
        for s in &r.partitions {
            stats.insert(&s.partition_id, (s, secs));
        }
    }
    let partitions = view
        .topology
        .partitions
        .iter()
        .map(|p| {
            let window = stats.get(&p.id).map_or_else(PartitionWindow::default, |&(s, secs)| PartitionWindow {
                ops_per_sec: s.ops() as f64 / secs,
                bytes_per_sec: (s.read_bytes + s.write_bytes) as f64 / secs,
                cpu_cores: s.cpu_time_us as f64 / 1e6 / secs,
                rejected_per_sec: s.rejected as f64 / secs,
                latency_p99_us: s.latency_p99_us,
                sketch: s.sketch.clone(),
            });
            PartitionView {
                id: p.id.clone(),
                tenant: p.tenant.clone(),
                table: p.table.clone(),
                range: p.range,
                owner: p.owner.clone(),
                group: p.group.clone(),
                stored_bytes: p.stored_bytes,
                limit: p.limit,
                supported_actions: p.supported_actions.clone(),
                stats: window,
            }
        })
        .collect();
    let workers = view
        .topology
        .workers
        .iter()
        .zip(&view.workers)
        .map(|(w, l)| WorkerView {
            id: w.id.clone(),
            capacity: w.capacity,
            // The testbed's host cpu_ratio is its demand ratio, already covered by ops: no CPU.
            cpu_cores: 0.0,
            group: w.group.clone(),
            health: w.health,
            load: WorkerWindow { ops_per_sec: l.served_ops_per_sec, bytes_per_sec: 0.0, cpu_ratio: 0.0 },
        })
        .collect();
    PlannerInput { partitions, workers, in_flight: in_flight.to_vec() }
}

/// `configs/scenarios` of the workspace (in `master/`) or of /work/main (in the scratch crate).
pub fn scenarios_dir() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    [here.join("../configs/scenarios"), here.join("configs/scenarios")]
        .into_iter()
        .find(|p| p.is_dir())
        .expect("configs/scenarios exists")
}

pub fn scenario_file(name: &str) -> Scenario {
    Scenario::load(&scenarios_dir().join(format!("{name}.toml"))).expect("scenario file loads")
}

fn scenario_file_text(name: &str) -> String {
    std::fs::read_to_string(scenarios_dir().join(format!("{name}.toml"))).expect("scenario file")
}

pub fn scenario_text(text: &str) -> Scenario {
    Scenario::parse(text, Path::new("test.toml")).expect("test scenario is valid")
}

/// One second of the loop, recorded.
#[derive(Debug, Clone, Copy)]
pub struct Tick {
    pub t_secs: u64,
    pub demand: f64,
    pub rejected: f64,
    pub pool_max: f64,
    pub pool_mean: f64,
    pub max_demand_ratio: f64,
}

pub struct Sim {
    pub engine: Engine,
    pub config: PlannerConfig,
    pub state: PlannerState,
    pub in_flight: Vec<(OperationId, InFlightAction)>,
    pub proposals: Vec<(u64, Proposal)>,
    pub submit_errors: Vec<String>,
    pub ticks: Vec<Tick>,
    next_id: u64,
}

impl Sim {
    pub fn new(scenario: &Scenario) -> Self {
        Self {
            engine: Engine::new(scenario),
            config: PlannerConfig::default(),
            state: PlannerState::default(),
            in_flight: Vec::new(),
            proposals: Vec::new(),
            submit_errors: Vec::new(),
            ticks: Vec::new(),
            next_id: 0,
        }
    }

    /// Steps one second, plans, submits the auto proposals; returns the plan.
    pub fn tick(&mut self) -> Plan {
        self.engine.step(Duration::from_secs(1));
        let engine = &self.engine;
        self.in_flight.retain(|(op, _)| {
            engine.operation(op).is_some_and(|o| matches!(o.state, OperationState::Pending | OperationState::Running))
        });
        let ids: Vec<_> = self.engine.cluster.workers.ids.clone();
        let reports = self.engine.reports_for(&ids);
        let view = self.engine.view();
        let inflight: Vec<InFlightAction> = self.in_flight.iter().map(|(_, a)| a.clone()).collect();
        let input = from_testbed_view(&view, &reports, &inflight);
        let plan = plan(&input, &self.config, &mut self.state, view.now_ms);
        let t = self.engine.t_secs() as u64;
        // Invariant: never two actions on one partition in a pass.
        let mut touched: Vec<&PartitionId> =
            plan.proposals.iter().flat_map(|p| model::partitions_of(&p.spec)).collect();
        let before = touched.len();
        touched.sort();
        touched.dedup();
        assert_eq!(before, touched.len(), "a partition got two actions in one pass at {t} s");
        for p in &plan.proposals {
            self.proposals.push((t, p.clone()));
            if p.mode != PolicyMode::Auto {
                continue;
            }
            self.next_id += 1;
            let id = ActionId::new(format!("plan-{}", self.next_id)).expect("valid id");
            match self.engine.submit(id, p.spec.clone()) {
                Ok(op) => {
                    self.in_flight.push((op, InFlightAction { spec: p.spec.clone(), started_at_ms: view.now_ms }))
                }
                Err(e) => self.submit_errors.push(format!("t={t} {:?}: {e}", p.spec)),
            }
        }
        let s = self.engine.summary();
        let (pool_max, pool_mean) = pool_ratios(&view);
        self.ticks.push(Tick {
            t_secs: t,
            demand: s.demand_ops_per_sec,
            rejected: s.rejected_ops_per_sec,
            pool_max,
            pool_mean,
            max_demand_ratio: s.max_demand_ratio,
        });
        plan
    }

    pub fn run_until(&mut self, t_secs: u64) {
        while (self.engine.t_secs() as u64) < t_secs {
            self.tick();
        }
    }

    /// Longest run of consecutive seconds with rejections at or over `share` of demand, and the
    /// first second of the first such run.
    pub fn longest_rejection_episode(&self, from: u64, share: f64) -> (u64, Option<u64>) {
        let (mut longest, mut run, mut first) = (0, 0, None);
        for t in self.ticks.iter().filter(|t| t.t_secs >= from) {
            if t.demand > 0.0 && t.rejected / t.demand >= share {
                run += 1;
                first.get_or_insert(t.t_secs);
                longest = longest.max(run);
            } else {
                run = 0;
            }
        }
        (longest, first)
    }

    pub fn count(&self, kind: ActionKind) -> usize {
        self.proposals.iter().filter(|(_, p)| p.spec.kind() == kind).count()
    }

    /// Every partition's auto actions are at least the cooldown apart.
    pub fn assert_cooldowns_respected(&self) {
        let cooldown = self.config.caps.cooldown_secs;
        let mut last: HashMap<String, u64> = HashMap::new();
        for (t, p) in self.proposals.iter().filter(|(_, p)| p.mode == PolicyMode::Auto) {
            for id in model::partitions_of(&p.spec) {
                if let Some(prev) = last.insert(id.to_string(), *t) {
                    assert!(t - prev >= cooldown, "{id} acted on at {prev} s and again at {t} s: {}", p.reason);
                }
            }
        }
    }
}

/// Max and mean demand ratio over healthy ungrouped workers (the pool the planner balances).
pub fn pool_ratios(view: &ClusterView) -> (f64, f64) {
    let (mut n, mut sum, mut max) = (0.0, 0.0, 0.0f64);
    for (info, load) in view.topology.workers.iter().zip(&view.workers) {
        if info.health != lb_common::protocol::Health::Down && info.group.is_none() {
            n += 1.0;
            sum += load.demand_ratio;
            max = max.max(load.demand_ratio);
        }
    }
    (max, if n > 0.0 { sum / n } else { 0.0 })
}

fn small_cluster(workers: u32, partitions: u32, bytes: u64, extra: &str) -> Scenario {
    scenario_text(&format!(
        r#"
name = "test"
seed = 42
[cluster]
workers = {workers}
worker_ops_per_sec = 100000
worker_bytes_per_sec = 1e9
partition_limit_ops_per_sec = 10000
partition_limit_bytes_per_sec = 1e9
[[tables]]
tenant = "acme"
table = "orders"
partitions = {partitions}
stored_bytes_per_partition = {bytes}
{extra}
"#
    ))
}

#[test]
fn hot_range_surge_is_relieved_within_5_s_and_ends_balanced() {
    let mut sim = Sim::new(&scenario_file("hot-range-surge"));
    sim.run_until(2400);
    let (longest, first) = sim.longest_rejection_episode(0, 0.01);
    let last = sim.ticks.last().copied().expect("ticks");
    eprintln!(
        "hot-range-surge: longest episode of rejections >= 1 % of demand: {longest} s (first at {first:?}); splits {}, moves {}, groups {}; final pool max/mean {:.3} (max {:.3}); submit errors {}",
        sim.count(ActionKind::Split),
        sim.count(ActionKind::Move),
        sim.count(ActionKind::Group),
        last.pool_max / last.pool_mean,
        last.pool_max,
        sim.submit_errors.len()
    );
    for t in sim.ticks.iter().filter(|t| t.demand > 0.0 && t.rejected / t.demand >= 0.01) {
        eprintln!(
            "  t={} rejected {:.0} of {:.0} ({:.1} %), pool max {:.2}",
            t.t_secs,
            t.rejected,
            t.demand,
            t.rejected / t.demand * 100.0,
            t.pool_max
        );
    }
    for (t, p) in sim.proposals.iter().filter(|(t, _)| (300..320).contains(t)) {
        eprintln!("  t={t} {:?}: {}", p.spec, p.reason);
    }
    assert!(sim.submit_errors.is_empty(), "{:?}", sim.submit_errors);
    assert!(longest <= 5, "rejections >= 1 % of demand lasted {longest} s");
    assert!(sim.count(ActionKind::Split) >= 2, "the hot range was split");
    sim.assert_cooldowns_respected();
    assert!(last.pool_max / last.pool_mean <= 1.10, "final max/mean {}", last.pool_max / last.pool_mean);
}

#[test]
fn balanced_cluster_gets_zero_actions_over_an_hour() {
    let mut sim =
        Sim::new(&small_cluster(8, 64, 1 << 30, "[[tables.workloads]]\nkind = \"uniform\"\nops_per_sec = 400000\n"));
    let mut max_stats = 0.0f64;
    for _ in 0..3600 {
        let plan = sim.tick();
        max_stats = max_stats.max(plan.stats.max_load_ratio);
        assert!(plan.rejected.is_empty(), "{:?}", plan.rejected);
    }
    eprintln!("balanced: 3600 passes, {} proposals, pool max ratio {max_stats:.3}", sim.proposals.len());
    assert!(sim.proposals.is_empty(), "{:?}", sim.proposals.first());
}

/// The partition of table 0 holding `key`.
fn partition_at(sim: &Sim, key: u64) -> PartitionId {
    let c = &sim.engine.cluster;
    c.partitions.ids[c.partition_at(0, key)].clone()
}

fn actions_on(sim: &Sim, id: &PartitionId, kind: ActionKind) -> usize {
    sim.proposals.iter().filter(|(_, p)| p.spec.kind() == kind && model::partitions_of(&p.spec).contains(&id)).count()
}

/// First second at or after `from` from which the worker max demand ratio stays <= 1 and
/// rejections under 1 % of demand for the rest of the run.
fn relieved_at(sim: &Sim, from: u64, until: u64) -> Option<u64> {
    let mut at = None;
    for t in sim.ticks.iter().filter(|t| t.t_secs >= from && t.t_secs < until) {
        let ok = t.max_demand_ratio <= 1.0 && (t.demand <= 0.0 || t.rejected / t.demand < 0.01);
        if !ok {
            at = None;
        } else if at.is_none() {
            at = Some(t.t_secs);
        }
    }
    at
}

#[test]
fn single_hot_key_is_isolated_once_never_split() {
    let mut sim = Sim::new(&scenario_file("single-hot-key"));
    sim.run_until(1200);
    let hot = partition_at(&sim, 0x2a00_0000_0000_0042);
    let groups = actions_on(&sim, &hot, ActionKind::Group);
    let relief = relieved_at(&sim, 300, u64::MAX);
    let owner = &sim.engine.cluster.workers.group
        [sim.engine.cluster.partitions.owner[sim.engine.cluster.partitions.find(&hot).expect("exists")] as usize];
    eprintln!(
        "single-hot-key: {hot} split {} times, grouped {groups} times, moved {} times; relieved at {relief:?} (onset 300 s); owner's group {owner:?}; all actions {}",
        actions_on(&sim, &hot, ActionKind::Split),
        actions_on(&sim, &hot, ActionKind::Move),
        sim.proposals.len()
    );
    for (t, p) in &sim.proposals {
        eprintln!("  t={t} {:?}: {}", p.spec, p.reason);
    }
    assert_eq!(actions_on(&sim, &hot, ActionKind::Split), 0);
    assert_eq!(groups, 1);
    assert!(owner.is_some(), "the hot partition ends on the dedicated group");
    // A 1 GiB move streams for 11.2 s in the testbed: relief is detection + that.
    assert!(relief.is_some_and(|t| t <= 300 + 16), "relieved at {relief:?}");
    sim.assert_cooldowns_respected();
}

#[test]
fn overloaded_worker_with_small_partitions_is_relieved_within_10_s() {
    // The single-hot-key case with 64 MiB partitions: moves take 1.6 s, so relief is bounded
    // by detection (2 windows) and the planner, not by streaming.
    let text = scenario_file_text("single-hot-key")
        .replace("partitions = 32", "partitions = 32\nstored_bytes_per_partition = 67108864");
    let mut sim = Sim::new(&scenario_text(&text));
    sim.run_until(600);
    let relief = relieved_at(&sim, 300, u64::MAX);
    eprintln!(
        "worker overload (64 MiB partitions): relieved at {relief:?} (onset 300 s), {} actions",
        sim.proposals.len()
    );
    assert!(relief.is_some_and(|t| t <= 310), "relieved at {relief:?}");
}

#[test]
fn worker_loss_overload_is_relieved() {
    // With the file's faults the first move fails and the second hangs for ever: relief then
    // waits for `stalled_action_secs` (120 s) before the hung move stops counting as done.
    for (name, bytes, bound) in
        [("worker-loss", None, 140), ("worker-loss 64 MiB without faults", Some(67_108_864u64), 10)]
    {
        let mut text = scenario_file_text("worker-loss");
        if let Some(b) = bytes {
            // Without the injected faults (a move that hangs forever holds a worker's action
            // slot until an executor times it out), to measure the planner itself.
            let cut = text.find("[[timeline]]").expect("timeline");
            text.truncate(cut);
            text = text.replace("partitions = 64", &format!("partitions = 64\nstored_bytes_per_partition = {b}"));
            text.push_str("[[timeline]]\nat_secs = 600\nevent = \"worker_lost\"\nworker = \"w-0003\"\n");
            text.push_str("[[timeline]]\nat_secs = 1200\nevent = \"worker_added\"\nworker = \"w-0008\"\n");
        }
        let mut sim = Sim::new(&scenario_text(&text));
        sim.run_until(1500);
        // Until w-0008 joins at 1200 s; from then on the run must stay clean as well.
        let relief = relieved_at(&sim, 600, 1200);
        let after_join = relieved_at(&sim, 1200, u64::MAX);
        let last = sim.ticks.last().copied().expect("ticks");
        eprintln!(
            "{name}: relieved at {relief:?} (loss at 600 s), after the join clean from {after_join:?}; moves {}; submit errors {}; final pool max/mean {:.3}",
            sim.count(ActionKind::Move),
            sim.submit_errors.len(),
            last.pool_max / last.pool_mean
        );
        assert!(relief.is_some_and(|t| t <= 600 + bound), "{name}: relieved at {relief:?}");
        assert!(after_join.is_some_and(|t| t <= 1260), "{name}: after the join: {after_join:?}");
        sim.assert_cooldowns_respected();
    }
}

#[test]
fn sequential_append_is_never_split_and_isolated_when_a_group_exists() {
    let mut sim = Sim::new(&scenario_file("sequential-append"));
    sim.run_until(900);
    let tail = partition_at(&sim, 0x8000_0000_0000_0000);
    let plan = sim.tick();
    eprintln!(
        "sequential-append: splits {}, actions on the tail partition {}, all actions {}; declined now: {:?}",
        sim.count(ActionKind::Split),
        sim.proposals.iter().filter(|(_, p)| model::partitions_of(&p.spec).contains(&&tail)).count(),
        sim.proposals.len(),
        plan.rejected.iter().map(|d| &d.why).collect::<Vec<_>>()
    );
    assert_eq!(sim.count(ActionKind::Split), 0);
    assert!(plan.rejected.iter().any(|d| d.why.contains("no split can divide it")), "the why-not is explained");

    let text = scenario_file_text("sequential-append").replace(
        "partition_limit_bytes_per_sec = 100e6",
        "partition_limit_bytes_per_sec = 100e6\ngroups = [{ group = \"tail\", workers = 1 }]",
    );
    let mut sim = Sim::new(&scenario_text(&text));
    sim.run_until(900);
    let tail = partition_at(&sim, 0x8000_0000_0000_0000);
    eprintln!(
        "sequential-append + group: splits {}, groups of the tail {}, all actions {}",
        sim.count(ActionKind::Split),
        actions_on(&sim, &tail, ActionKind::Group),
        sim.proposals.len()
    );
    assert_eq!(sim.count(ActionKind::Split), 0);
    assert_eq!(actions_on(&sim, &tail, ActionKind::Group), 1);
    sim.assert_cooldowns_respected();
}

#[test]
fn zipf_skew_converges_to_balanced_in_bounded_rounds() {
    let mut sim = Sim::new(&scenario_file("zipf-skew"));
    let mut quiet = 0;
    let mut rounds = 0;
    while quiet < 120 && sim.engine.t_secs() < 3600.0 {
        let plan = sim.tick();
        if plan.proposals.is_empty() && sim.in_flight.is_empty() {
            quiet += 1;
        } else {
            quiet = 0;
            rounds += usize::from(!plan.proposals.is_empty());
        }
    }
    let last = sim.ticks.last().copied().expect("ticks");
    eprintln!(
        "zipf-skew: quiet after {} s, {rounds} passes with proposals, splits {}, moves {}; final pool max/mean {:.3}, max {:.3}",
        sim.engine.t_secs(),
        sim.count(ActionKind::Split),
        sim.count(ActionKind::Move),
        last.pool_max / last.pool_mean,
        last.pool_max
    );
    assert!(quiet >= 120, "still acting after an hour");
    assert!(rounds <= 200, "{rounds} passes with proposals");
    assert!(last.pool_max / last.pool_mean <= 1.10, "final max/mean {}", last.pool_max / last.pool_mean);
    sim.assert_cooldowns_respected();
}

#[test]
fn other_scenarios_run_clean() {
    // Smoke: the remaining scenario files run for 30 simulated minutes without a rejected
    // submission, a double action in a pass or a cooldown violation.
    for name in ["tenant-isolation", "growing-dataset"] {
        let mut sim = Sim::new(&scenario_file(name));
        sim.run_until(1800);
        let last = sim.ticks.last().copied().expect("ticks");
        eprintln!(
            "{name}: {} proposals ({} splits, {} moves, {} groups), submit errors {:?}, final pool max/mean {:.3}, rejected {:.1} %",
            sim.proposals.len(),
            sim.count(ActionKind::Split),
            sim.count(ActionKind::Move),
            sim.count(ActionKind::Group),
            sim.submit_errors,
            last.pool_max / last.pool_mean,
            last.rejected / last.demand * 100.0
        );
        assert!(sim.submit_errors.is_empty());
        sim.assert_cooldowns_respected();
    }
}
