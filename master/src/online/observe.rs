//! The loop's observations from the MetricsTable: the planner's view of the layout (from the
//! topology) and its load (from the table), built in place between passes.

use std::collections::HashMap;
use std::time::Duration;

use lb_common::protocol::{Health, Topology};

use crate::planner::{InFlightAction, PartitionView, PartitionWindow, PlannerInput, WorkerView, WorkerWindow};
use crate::table::{MetricsTable, RateBasis};

/// Past 20,000 partitions the input is built on two threads (a single core takes ~10 ms).
const PARALLEL_INPUT_PARTITIONS: usize = 20_000;

/// Builds the planner's input: the layout from the topology, the load over the last `window`
/// from the table, each partition's averaged over the seconds its worker reported since the
/// partition's first sample ([`RateBasis::Reported`]: a split's new side shows its real rate
/// from its first report, a partition left out of a report counts as idle for that second, a
/// partition without samples yet counts as idle).
pub fn planner_input(
    table: &MetricsTable,
    topology: &Topology,
    in_flight: Vec<InFlightAction>,
    window: Duration,
    now_ms: i64,
) -> PlannerInput {
    let mut input = PlannerInput {
        partitions: Vec::new(),
        workers: Vec::new(),
        in_flight,
        new_group_dedicates_owner: false,
        multi_way_split: false,
    };
    refresh_planner_input(&mut input, None, table, topology, window, now_ms);
    input
}

/// [`planner_input`] in place: when `built_from` is the version of `topology` that `input`'s
/// partitions were built from, only their load is re-read (no ids cloned, nothing allocated
/// but sketches); otherwise the views are rebuilt. Workers are always rebuilt (a thousand).
pub fn refresh_planner_input(
    input: &mut PlannerInput,
    built_from: Option<u64>,
    table: &MetricsTable,
    topology: &Topology,
    window: Duration,
    now_ms: i64,
) {
    let reader = table.rate_reader(window, now_ms, RateBasis::Reported).ok();
    let stats = |p: &lb_common::protocol::PartitionInfo| {
        let rates = reader.as_ref().and_then(|r| r.rates(&p.id));
        rates.map_or_else(PartitionWindow::default, |r| PartitionWindow {
            ops_per_sec: r.ops_per_sec,
            bytes_per_sec: r.bytes_per_sec,
            cpu_cores: r.cpu_cores,
            rejected_per_sec: r.rejected_per_sec,
            latency_p99_us: r.latency_p99_us.unwrap_or(0.0),
            sketch: table.sketch_for(&p.id, p.range).cloned(),
        })
    };
    let all = &topology.partitions;
    let same_layout = built_from == Some(topology.version) && input.partitions.len() == all.len();
    if same_layout {
        let refresh = |views: &mut [PartitionView], infos: &[lb_common::protocol::PartitionInfo]| {
            for (v, p) in views.iter_mut().zip(infos) {
                v.stats = stats(p);
            }
        };
        if all.len() < PARALLEL_INPUT_PARTITIONS {
            refresh(&mut input.partitions, all);
        } else {
            let mid = all.len() / 2;
            let (lv, rv) = input.partitions.split_at_mut(mid);
            let (li, ri) = all.split_at(mid);
            std::thread::scope(|s| {
                s.spawn(|| refresh(rv, ri));
                refresh(lv, li);
            });
        }
    } else {
        let view = |p: &lb_common::protocol::PartitionInfo| PartitionView {
            id: p.id.clone(),
            tenant: p.tenant.clone(),
            table: p.table.clone(),
            range: p.range,
            owner: p.owner.clone(),
            group: p.group.clone(),
            stored_bytes: p.stored_bytes,
            limit: p.limit,
            supported_actions: p.supported_actions.clone(),
            stats: stats(p),
        };
        input.partitions = if all.len() < PARALLEL_INPUT_PARTITIONS {
            all.iter().map(view).collect()
        } else {
            let (left, right) = all.split_at(all.len() / 2);
            std::thread::scope(|s| {
                let other = s.spawn(|| right.iter().map(view).collect::<Vec<_>>());
                let mut out: Vec<PartitionView> = left.iter().map(view).collect();
                out.extend(other.join().unwrap_or_else(|_| right.iter().map(view).collect()));
                out
            })
        };
    }
    let loads: HashMap<_, _> =
        table.workers(window, now_ms).unwrap_or_default().into_iter().map(|w| (w.id.clone(), w)).collect();
    let workers = topology
        .workers
        .iter()
        .map(|w| {
            let load = loads.get(&w.id);
            // A worker that reported before and nothing in this window is not idle: its data is
            // missing (its agent stopped, or collection is behind). Unknown load is not 0: it
            // takes no new partitions and stays out of the pool's spread, like a degraded one.
            let silent = load.is_some_and(|l| l.last_sample_ms.is_some() && l.covered_secs == 0.0);
            let health = if silent && w.health == Health::Healthy { Health::Degraded } else { w.health };
            WorkerView {
                id: w.id.clone(),
                capacity: w.capacity,
                // CPU is a dimension where the storage says how many cores execute its work (a
                // Valkey primary: its main thread); elsewhere ops and bytes carry the decision.
                cpu_cores: w.cpu_cores,
                group: w.group.clone(),
                health,
                zone: w.zone.clone(),
                load: load.map_or_else(WorkerWindow::default, |l| {
                    // The host's CPU is a mean over the seconds it reported, the partitions'
                    // a rate over the whole window (a missing second reads 0): the same basis
                    // for both, so a collection lag is not mistaken for background.
                    let covered = if l.window_secs > 0.0 { (l.covered_secs / l.window_secs).min(1.0) } else { 1.0 };
                    WorkerWindow {
                        ops_per_sec: l.ops_per_sec,
                        bytes_per_sec: l.bytes_per_sec,
                        cpu_ratio: l.host_cpu_ratio.unwrap_or(0.0) * covered,
                        attributed_cpu_cores: (w.cpu_cores > 0.0).then_some(l.cpu_cores),
                    }
                }),
            }
        })
        .collect();
    input.workers = workers;
    input.new_group_dedicates_owner = topology.new_group_dedicates_owner;
    input.multi_way_split = topology.multi_way_split;
}
