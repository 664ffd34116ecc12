//! The loop's observations from the MetricsTable: the planner's view of the layout (from the
//! topology) and its load (from the table), built in place between passes.

use std::collections::HashMap;
use std::time::Duration;

use lb_common::protocol::{Health, PartitionInfo, Topology};

use crate::planner::{InFlightAction, PartitionView, PartitionWindow, PlannerInput, WorkerView, WorkerWindow};
use crate::table::{MetricsTable, PartitionLoad, PartitionSlot, RateBasis, SlotsEpoch};

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
    let mut kept = KeptInput::default();
    refresh_planner_input(&mut kept, table, topology, window, now_ms);
    let mut input = kept.input;
    input.in_flight = in_flight;
    input
}

/// The planner's input kept from pass to pass, with what lets the next pass re-read only the
/// load: the topology version its partition views were built from, per view where the table
/// keeps the partition's series and which sketch the view already holds, and when those were
/// read (the table's slot epoch and sketch count).
#[derive(Debug, Default)]
pub struct KeptInput {
    pub input: PlannerInput,
    built_from: Option<u64>,
    /// One per partition view, in the same order.
    reads: Vec<ViewRead>,
    /// The table's [`SlotsEpoch`] and [`MetricsTable::sketches_kept`] when every view's slot and
    /// sketch were last read; `None` after a pass without a window.
    read_at: Option<(SlotsEpoch, u64)>,
}

#[derive(Debug, Clone, Copy, Default)]
struct ViewRead {
    /// A hint, checked against the id on every use ([`MetricsTable::locate`]) unless the
    /// table freed no slot since it was found.
    slot: Option<PartitionSlot>,
    /// The version of the sketch in the view (0: none): an unchanged sketch is not copied again.
    sketch_version: u64,
}

/// [`planner_input`] in place: when `kept`'s partition views were built from this version of
/// `topology`, only their load is re-read, at the table slots found before (no id hashed or
/// cloned, a sketch copied only when a newer one came); otherwise the views are rebuilt.
/// Workers are always rebuilt (a thousand). The caller sets `in_flight`.
pub fn refresh_planner_input(
    kept: &mut KeptInput,
    table: &MetricsTable,
    topology: &Topology,
    window: Duration,
    now_ms: i64,
) {
    let reader = table.rate_reader(window, now_ms, RateBasis::Reported).ok();
    let same_layout =
        kept.built_from == Some(topology.version) && kept.input.partitions.len() == topology.partitions.len();
    let now_at = (table.slots_epoch(), table.sketches_kept());
    // No slot freed since the last read: every slot found then still holds its partition. No
    // sketch kept since either: a view whose slot stands has the sketch it should.
    let slots_hold = same_layout && kept.read_at.is_some_and(|(epoch, _)| epoch == now_at.0);
    let sketches_hold = slots_hold && kept.read_at.is_some_and(|(_, kept)| kept == now_at.1);
    // Each half of the views on its own thread: find the table slots, read every partition's
    // load a column at a time (`RateReader::loads_many`), then fill the views.
    let refresh = |views: &mut [PartitionView], reads: &mut [ViewRead], infos: &[PartitionInfo]| {
        let mut found = vec![false; reads.len()];
        for ((r, p), found) in reads.iter_mut().zip(infos).zip(&mut found) {
            if !(slots_hold && r.slot.is_some()) {
                let was = r.slot;
                r.slot = table.locate(&p.id, was);
                *found = r.slot != was;
            }
        }
        let slots: Vec<Option<PartitionSlot>> = reads.iter().map(|r| r.slot).collect();
        let mut loads = vec![PartitionLoad::default(); slots.len()];
        if let Some(reader) = reader.as_ref() {
            reader.loads_many(&slots, &mut loads);
        }
        for ((((v, r), p), load), found) in views.iter_mut().zip(reads).zip(infos).zip(loads).zip(found) {
            let stats = &mut v.stats;
            let (Some(_), Some(slot)) = (reader.as_ref(), r.slot) else {
                *stats = PartitionWindow::default();
                r.sketch_version = 0;
                continue;
            };
            stats.ops_per_sec = load.ops_per_sec;
            stats.bytes_per_sec = load.bytes_per_sec;
            stats.cpu_cores = load.cpu_cores;
            stats.rejected_per_sec = load.rejected_per_sec;
            if sketches_hold && !found {
                continue;
            }
            match table.sketch_at(slot, p.range) {
                Some((_, version)) if version == r.sketch_version && stats.sketch.is_some() => {}
                Some((sketch, version)) => {
                    stats.sketch = Some(sketch.clone());
                    r.sketch_version = version;
                }
                None => {
                    stats.sketch = None;
                    r.sketch_version = 0;
                }
            }
        }
    };
    let all = &topology.partitions;
    let input = &mut kept.input;
    if !same_layout {
        input.partitions = all
            .iter()
            .map(|p| PartitionView {
                id: p.id.clone(),
                tenant: p.tenant.clone(),
                table: p.table.clone(),
                range: p.range,
                owner: p.owner.clone(),
                group: p.group.clone(),
                stored_bytes: p.stored_bytes,
                limit: p.limit,
                supported_actions: p.supported_actions.clone(),
                stats: PartitionWindow::default(),
            })
            .collect();
        kept.reads = vec![ViewRead::default(); all.len()];
        kept.built_from = Some(topology.version);
        input.layout = Some(crate::planner::new_layout_id());
    }
    if all.len() < PARALLEL_INPUT_PARTITIONS {
        refresh(&mut input.partitions, &mut kept.reads, all);
    } else {
        let mid = all.len() / 2;
        let (lv, rv) = input.partitions.split_at_mut(mid);
        let (lr, rr) = kept.reads.split_at_mut(mid);
        let (li, ri) = all.split_at(mid);
        std::thread::scope(|s| {
            s.spawn(|| refresh(rv, rr, ri));
            refresh(lv, lr, li);
        });
    }
    kept.read_at = reader.is_some().then_some(now_at);
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
    input.move_rate_limit = topology.move_rate_limit;
    input.merge_to_worker = topology.merge_to_worker;
}
