//! The engine: one [`Cluster`], its operations and its scenario timeline, stepped by an explicit
//! `dt`. As a library it is the virtual-time engine (no HTTP, no sleeping, deterministic from the
//! scenario's seed); [`crate::realtime`] steps the same engine by wall-clock time behind HTTP.
//!
//! Step order at each `step(dt)`: timeline events due by the new time fire (surges, worker lost
//! or added, faults), running operations advance (finishing ones apply their change), then the
//! load of the step is computed.

use std::time::Duration;

use lb_common::ids::{ActionId, OperationId, PartitionId, WorkerId};
use lb_common::protocol::{Capacity, Operation, Report, Topology};
use serde::Serialize;

use crate::model::Cluster;
use crate::model::traffic::SampledTraffic;
use crate::ops::{AdminError, FaultRule, OpBook};
use crate::scenario::{Event, Scenario, TimelineEvent};

/// The engine over one scenario.
#[derive(Debug, Clone)]
pub struct Engine {
    pub cluster: Cluster,
    ops: OpBook,
    start_ms: i64,
    elapsed_ms: u64,
    worker_capacity: Capacity,
    timeline: Vec<TimelineEvent>,
    next_event: usize,
    /// (table, ends at secs, multiplier) of the surges in force.
    surges: Vec<(usize, f64, f64)>,
    /// Per worker: last report's sequence number and end time.
    report_seq: Vec<u64>,
    last_report_ms: Vec<i64>,
    next_action: u64,
    seed: u64,
    /// Real-time mode: requests sampled through lb-reporter build the sketches.
    traffic: Option<SampledTraffic>,
}

/// One partition's load at the last step, per second.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PartitionLoad {
    pub id: PartitionId,
    pub owner: WorkerId,
    pub demand_ops_per_sec: f64,
    pub served_ops_per_sec: f64,
    pub rejected_ops_per_sec: f64,
    pub latency_p50_us: f64,
}

/// One worker's load at the last step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkerLoad {
    pub id: WorkerId,
    pub served_ops_per_sec: f64,
    /// Demand over (effective) capacity; above 1 the worker rejects.
    pub demand_ratio: f64,
}

/// What [`Engine::view`] returns: the layout plus the load of the last step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClusterView {
    pub now_ms: i64,
    pub topology: Topology,
    pub partitions: Vec<PartitionLoad>,
    pub workers: Vec<WorkerLoad>,
}

/// Cluster-wide figures of the last step over healthy workers.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LoadSummary {
    pub max_demand_ratio: f64,
    pub mean_demand_ratio: f64,
    /// Coefficient of variation of the demand ratios (stddev / mean).
    pub cv: f64,
    pub demand_ops_per_sec: f64,
    pub rejected_ops_per_sec: f64,
}

impl Engine {
    pub fn new(scenario: &Scenario) -> Self {
        let cluster = Cluster::from_scenario(scenario);
        let workers = cluster.workers.len();
        let mut timeline = scenario.timeline.clone();
        timeline.sort_by_key(|e| e.at_secs);
        let mut engine = Self {
            cluster,
            ops: OpBook::default(),
            start_ms: scenario.start_ms,
            elapsed_ms: 0,
            worker_capacity: Capacity {
                ops_per_sec: scenario.cluster.worker_ops_per_sec,
                bytes_per_sec: scenario.cluster.worker_bytes_per_sec,
            },
            timeline,
            next_event: 0,
            surges: Vec::new(),
            report_seq: vec![0; workers],
            last_report_ms: vec![scenario.start_ms; workers],
            next_action: 0,
            seed: scenario.seed,
            traffic: None,
        };
        engine.fire_events(0.0);
        engine.cluster.step_load(0.0, 0.0);
        engine
    }

    pub fn elapsed(&self) -> Duration {
        Duration::from_millis(self.elapsed_ms)
    }

    /// Scenario time in seconds.
    pub fn t_secs(&self) -> f64 {
        self.elapsed_ms as f64 / 1000.0
    }

    /// Epoch millis of "now" in the scenario.
    pub fn now_ms(&self) -> i64 {
        self.start_ms + self.elapsed_ms as i64
    }

    /// Re-anchors scenario time 0 at epoch millis `start_ms` (the real-time engine anchors it
    /// at the wall clock). Elapsed time, operations and report intervals are unchanged.
    pub fn set_clock_origin(&mut self, start_ms: i64) {
        let shift = start_ms - self.start_ms;
        self.start_ms = start_ms;
        for last in &mut self.last_report_ms {
            *last += shift;
        }
    }

    /// Moves time forward by `dt` (rounded to whole milliseconds).
    pub fn step(&mut self, dt: Duration) {
        let dt_ms = u64::try_from(dt.as_millis()).unwrap_or(u64::MAX);
        self.elapsed_ms = self.elapsed_ms.saturating_add(dt_ms);
        let t = self.t_secs();
        self.fire_events(t);
        let now = self.now_ms();
        self.ops.advance(&mut self.cluster, t, now);
        self.cluster.step_load(t, dt_ms as f64 / 1000.0);
        if let Some(traffic) = &mut self.traffic {
            traffic.step(&self.cluster, t, dt_ms as f64 / 1000.0);
        }
    }

    /// From the next step on, every step samples requests from each partition's workload and
    /// records them through lb-reporter, whose aggregator then builds the reports' key-access
    /// sketches ([`crate::model::traffic`]). The real-time mode turns this on; the virtual-time
    /// simulator keeps the closed-form sketches (at 100k partitions sampling would dominate).
    pub fn sample_traffic(&mut self) {
        self.traffic.get_or_insert_with(|| SampledTraffic::new(self.seed));
    }

    fn fire_events(&mut self, t_secs: f64) {
        while let Some(e) = self.timeline.get(self.next_event) {
            if e.at_secs as f64 > t_secs {
                break;
            }
            let event = e.event.clone();
            self.next_event += 1;
            self.fire(event, t_secs);
        }
        let before = self.surges.len();
        self.surges.retain(|&(_, end, _)| end > t_secs);
        if before != self.surges.len() || !self.surges.is_empty() {
            for table in &mut self.cluster.tables {
                table.surge_multiplier = 1.0;
            }
            for &(t, _, m) in &self.surges {
                self.cluster.tables[t].surge_multiplier *= m;
            }
        }
    }

    fn fire(&mut self, event: Event, t_secs: f64) {
        tracing::info!(t_secs, ?event, "timeline event");
        let result = match event {
            Event::Surge { tenant, table, multiplier, duration_secs } => {
                if let Some(t) = self.cluster.find_table(&tenant, &table) {
                    self.surges.push((t, t_secs + duration_secs as f64, multiplier));
                }
                Ok(())
            }
            Event::WorkerLost { worker } => self.cluster.worker_lost(&worker),
            Event::WorkerAdded { worker, group, zone } => {
                let r = self.cluster.worker_added(&worker, self.worker_capacity, group, zone);
                self.report_seq.resize(self.cluster.workers.len(), 0);
                self.last_report_ms.resize(self.cluster.workers.len(), self.now_ms());
                r
            }
            Event::DatasetRate { tenant, dataset, ops_per_sec, growth_ops_per_sec_per_hour } => {
                self.cluster.set_dataset_rate(&tenant, &dataset, t_secs, ops_per_sec, growth_ops_per_sec_per_hour)
            }
            Event::Fault { kind, fault, count } => {
                self.ops.add_fault(FaultRule { kind, fault, count });
                Ok(())
            }
        };
        if let Err(e) = result {
            tracing::warn!(error = %e, "timeline event had no effect");
        }
    }

    /// Starts an admin operation; idempotent by `action_id`.
    pub fn submit(
        &mut self,
        action_id: ActionId,
        spec: lb_common::protocol::ActionSpec,
    ) -> Result<OperationId, AdminError> {
        let (now, t) = (self.now_ms(), self.t_secs());
        self.ops.submit(&self.cluster, action_id, spec, now, t)
    }

    /// Starts an admin operation under a generated action id (`sim-N`).
    pub fn apply(&mut self, spec: lb_common::protocol::ActionSpec) -> Result<OperationId, AdminError> {
        self.next_action += 1;
        let id = ActionId::new(format!("sim-{}", self.next_action)).expect("generated action ids are valid");
        self.submit(id, spec)
    }

    pub fn operation(&self, id: &OperationId) -> Option<&Operation> {
        self.ops.get(id)
    }

    pub fn running_operations(&self) -> usize {
        self.ops.running()
    }

    pub fn add_fault(&mut self, rule: FaultRule) {
        self.ops.add_fault(rule);
    }

    pub fn pending_faults(&self) -> Vec<FaultRule> {
        self.ops.pending_faults()
    }

    pub fn topology(&self) -> Topology {
        self.cluster.topology()
    }

    /// The layout and the last step's load.
    pub fn view(&self) -> ClusterView {
        let c = &self.cluster;
        let topology = c.topology();
        // Topology lists partitions table by table in key order: the same walk, by index.
        let order = c.tables.iter().flat_map(|t| t.sorted.iter().map(|&p| p as usize));
        let partitions = topology
            .partitions
            .iter()
            .zip(order)
            .map(|(info, p)| {
                let demand = c.demand_ops(p);
                let served = c.served_ops(p);
                PartitionLoad {
                    id: info.id.clone(),
                    owner: info.owner.clone(),
                    demand_ops_per_sec: demand,
                    served_ops_per_sec: served,
                    rejected_ops_per_sec: demand - served,
                    latency_p50_us: c.load.latency_p50_us[p],
                }
            })
            .collect();
        let workers = (0..c.workers.len())
            .map(|w| WorkerLoad {
                id: c.workers.ids[w].clone(),
                served_ops_per_sec: c.load.worker_ops[w] * c.load.worker_scale[w],
                demand_ratio: c.load.worker_demand_ratio[w],
            })
            .collect();
        ClusterView { now_ms: self.now_ms(), topology, partitions, workers }
    }

    /// Max, mean and CV of healthy workers' demand ratios, and the cluster's rejected ops.
    pub fn summary(&self) -> LoadSummary {
        let c = &self.cluster;
        let ratios = (0..c.workers.len()).filter(|&w| c.workers.is_up(w)).map(|w| c.load.worker_demand_ratio[w]);
        let (mut n, mut sum, mut sum_sq, mut max) = (0.0, 0.0, 0.0, 0.0f64);
        for r in ratios {
            n += 1.0;
            sum += r;
            sum_sq += r * r;
            max = max.max(r);
        }
        let mean = if n > 0.0 { sum / n } else { 0.0 };
        let var = if n > 0.0 { (sum_sq / n - mean * mean).max(0.0) } else { 0.0 };
        let cv = if mean > 0.0 { var.sqrt() / mean } else { 0.0 };
        let dataset_demand: f64 = c.datasets.iter().map(|d| d.rate_at(self.t_secs())).sum();
        LoadSummary {
            max_demand_ratio: max,
            mean_demand_ratio: mean,
            cv,
            demand_ops_per_sec: c.load.demand_ops + dataset_demand,
            rejected_ops_per_sec: c.load.rejected_ops + c.dataset_rejected_ops(self.t_secs()),
        }
    }

    /// The report `worker` would push now: totals since its previous report.
    pub fn report_for(&mut self, worker: &WorkerId) -> Option<Report> {
        self.reports_for(std::slice::from_ref(worker)).pop()
    }

    /// The reports of `workers` (unknown ones skipped), with one pass over the partitions.
    pub fn reports_for(&mut self, workers: &[WorkerId]) -> Vec<Report> {
        let by_owner = self.cluster.partitions_by_owner();
        let now = self.now_ms();
        let t = self.t_secs();
        let mut reports = Vec::with_capacity(workers.len());
        for worker in workers {
            let Some(w) = self.cluster.worker_index(worker) else { continue };
            self.report_seq[w] += 1;
            let interval_ms = u64::try_from(now - self.last_report_ms[w]).unwrap_or(0).max(1);
            self.last_report_ms[w] = now;
            let mut report = self.cluster.report_for(w, &by_owner[w], self.report_seq[w], now, interval_ms, t);
            if let Some(traffic) = &mut self.traffic {
                traffic.apply_sketches(w, &mut report);
            }
            reports.push(report);
        }
        reports
    }
}
