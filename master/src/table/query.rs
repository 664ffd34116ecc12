//! Window queries, top-N, cluster overview and listings. Every result carries its averaging
//! window (`window_secs`).

use std::time::Duration;

use lb_common::ids::{PartitionId, WorkerId};
use lb_common::protocol::{ClusterHistory, ClusterPoint, Health};
pub use lb_common::protocol::{
    ClusterOverview, GroupBy, GroupKey, PartitionRow, TopEntry, TopN, WorkerLoad, WorkerRow,
};
use serde::{Deserialize, Serialize};

use super::codec::Codec;
use super::metric::{MetricColumns, View};
use super::ring::{Point, SeriesStore};
use super::store::{MetricsTable, PartState};
use super::{Metric, TableError};

/// Aggregates of one series over a window.
/// Below this many partitions a scan is too short to be worth a thread (~50 µs to spawn).
const PARALLEL_SCAN_MIN_PARTITIONS: usize = 20_000;
/// Scans use at most this many threads; the master's other loops need a core too.
const MAX_SCAN_THREADS: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WindowStats {
    pub metric: Metric,
    /// Length of the window the figures average over.
    pub window_secs: f64,
    /// Seconds of the window that had data (a coarse point counts for the seconds it covers).
    pub covered_secs: f64,
    /// Rates: events in the window (rate × seconds). Gauges: value × covered seconds.
    pub sum: f64,
    /// Rates: `sum / window_secs` (missing seconds count as zero). Gauges: same as `mean`.
    pub rate_per_sec: f64,
    /// Mean over the covered seconds.
    pub mean: f64,
    /// Largest point (a coarse point is a 1-minute mean for rates, a 1-minute max for latency).
    pub max: f64,
    /// Duration-weighted percentiles over the points; `None` when there is no data.
    pub p50: Option<f64>,
    pub p99: Option<f64>,
}

/// Slots `[a, b]` of the window `last` ending at `now_ms` (exclusive), and its length in seconds.
pub(crate) fn window_slots(table: &MetricsTable, last: Duration, now_ms: i64) -> Result<(i64, i64, f64), TableError> {
    let step = table.geo.fine_step_ms;
    let last_ms = i64::try_from(last.as_millis()).unwrap_or(i64::MAX);
    if last_ms <= 0 {
        return Err(TableError::InvalidQuery("window must be longer than zero".into()));
    }
    let history_ms = table.geo.history_ms();
    if last_ms > history_ms {
        return Err(TableError::InvalidQuery(format!(
            "window_secs: {} s is longer than the table's history ({} s)",
            last.as_secs(),
            history_ms / 1000
        )));
    }
    let n = (last_ms + step - 1) / step;
    let b = table.geo.slot_of(now_ms - 1);
    Ok((b - n + 1, b, (n * step) as f64 / 1000.0))
}

/// Full statistics of one series over slots `[a, b]`.
pub(crate) fn stats_of<F: Codec, K: Codec>(
    store: &SeriesStore<F, K>,
    id: u32,
    view: View,
    metric: Metric,
    (a, b, window_secs): (i64, i64, f64),
) -> WindowStats {
    let step_secs = store.geo.fine_step_ms as f64 / 1000.0;
    let mut points: Vec<Point> = Vec::new();
    store.fold(id, view, a, b, |p| points.push(p));
    let covered_secs = points.iter().map(|p| p.weight).sum::<f64>() * step_secs;
    let sum = points.iter().map(|p| p.value * p.weight).sum::<f64>() * step_secs;
    let max = points.iter().map(|p| p.value).fold(0.0, f64::max);
    let mean = if covered_secs > 0.0 { sum / covered_secs } else { 0.0 };
    let rate_per_sec = if metric.is_rate() { sum / window_secs } else { mean };
    points.sort_by(|x, y| x.value.total_cmp(&y.value));
    let pct = |q: f64| {
        let total: f64 = points.iter().map(|p| p.weight).sum();
        let target = q * total;
        let mut acc = 0.0;
        points.iter().find(|p| {
            acc += p.weight;
            acc >= target - 1e-9
        })
    };
    WindowStats {
        metric,
        window_secs,
        covered_secs,
        sum,
        rate_per_sec,
        mean,
        max,
        p50: pct(0.5).map(|p| p.value),
        p99: pct(0.99).map(|p| p.value),
    }
}

/// The one figure top-N and listings rank by: rates per second over the whole window, gauges
/// averaged over the covered seconds. `None` when the window has no data.
/// One partition's load over a window (see [`MetricsTable::partition_rates`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PartitionRates {
    pub ops_per_sec: f64,
    pub bytes_per_sec: f64,
    pub cpu_cores: f64,
    pub rejected_per_sec: f64,
    pub errors_per_sec: f64,
    pub latency_p99_us: Option<f64>,
}

/// The columns a [`PartitionRates`] is read from, in the order [`RateReader::rates_from`] takes them.
const RATE_COLS: [usize; 6] = {
    use super::metric::{COL_BYTES, COL_CPU, COL_ERRORS, COL_LATENCY_P99, COL_OPS, COL_REJECTED};
    [COL_OPS, COL_BYTES, COL_CPU, COL_REJECTED, COL_ERRORS, COL_LATENCY_P99]
};

/// The load figures of [`PartitionRates`] that the planner reads (see [`RateReader::loads_many`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PartitionLoad {
    pub ops_per_sec: f64,
    pub bytes_per_sec: f64,
    pub cpu_cores: f64,
    pub rejected_per_sec: f64,
}

impl From<PartitionRates> for PartitionLoad {
    fn from(r: PartitionRates) -> Self {
        Self {
            ops_per_sec: r.ops_per_sec,
            bytes_per_sec: r.bytes_per_sec,
            cpu_cores: r.cpu_cores,
            rejected_per_sec: r.rejected_per_sec,
        }
    }
}

/// What a windowed rate is an average over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateBasis {
    /// The whole window; seconds without a sample count as idle (the API's reading: a partition
    /// that appeared two seconds ago shows two seconds' worth).
    Window,
    /// The seconds of the window since the partition's first sample in which its worker
    /// reported: a partition created by a split a second ago shows its real rate, not a
    /// fraction of it (the analyzer's reading), and a partition its worker left out of a report
    /// (nothing changed: reports list only active partitions) counts as idle for that second,
    /// not as missing data. Seconds the worker itself did not report (it is down, or its data
    /// is not collected yet) are left out of the average, as before.
    Reported,
}

/// Reads [`PartitionRates`] of many partitions over one window: the window's slots and each
/// worker's reported seconds are worked out once, so the analyzer's read of 100k partitions
/// costs one series sum per metric and partition. Made by [`MetricsTable::rate_reader`].
#[derive(Debug)]
pub struct RateReader<'a> {
    table: &'a MetricsTable,
    win: (i64, i64, f64),
    basis: RateBasis,
    /// Per worker index: the fine slots of the window it reported in (any sample); empty for
    /// a one-off read, which sums its worker's on the spot.
    worker_covered: Vec<f64>,
}

impl RateReader<'_> {
    /// One partition's rates; `None` for a partition the table has not heard of.
    pub fn rates(&self, id: &PartitionId) -> Option<PartitionRates> {
        self.table.partition_index.get(id).map(|&i| self.rates_at(i))
    }

    /// [`RateReader::rates`] at a slot from [`MetricsTable::locate`], without hashing the id.
    pub fn rates_in(&self, slot: super::PartitionSlot) -> PartitionRates {
        self.rates_at(slot.0)
    }

    pub(crate) fn rates_at(&self, i: u32) -> PartitionRates {
        let (a, b, _) = self.win;
        // Its newest sample is older than the window (an idle Valkey slot, a partition gone
        // quiet): every figure is zero and the latency unknown, as the sums below would say.
        if self.table.pseries.head(i) < a {
            return PartitionRates::default();
        }
        self.rates_from(i, self.table.pseries.sum_cols(i, RATE_COLS, a, b))
    }

    /// The [`PartitionLoad`] of many partitions, into `out` (as long as `slots`; `None`, a
    /// partition the table has not heard of, reads as idle): what [`RateReader::rates_in`]
    /// gives for each, without the errors and latency the planner does not read. One column at
    /// a time: each metric's rings are read in one pass over the partitions, a single stream
    /// that the hardware prefetcher follows. Read a partition at a time, the columns are arrays
    /// far apart, and the analyzer's pass over 100k partitions waited on memory for most of its
    /// 24 ms (240 ns a partition; 2026-12-05).
    pub fn loads_many(&self, slots: &[Option<super::PartitionSlot>], out: &mut [PartitionLoad]) {
        use super::metric::{COL_BYTES, COL_CPU, COL_OPS, COL_REJECTED};
        use super::ring::Span;
        assert_eq!(slots.len(), out.len(), "one output per slot");
        let store = &self.table.pseries;
        let (a, b, _) = self.win;
        // Where each partition's window lies; one reaching into the coarse ring (a window
        // longer than the fine ring, a series whose head jumped) is read whole, at once.
        let spans: Vec<Option<(u32, i64, i64, i64)>> = slots
            .iter()
            .zip(out.iter_mut())
            .map(|(slot, o)| {
                *o = PartitionLoad::default();
                let s = (*slot)?.0;
                // Newest sample older than the window, or none in it: idle, as in `rates_at`.
                if store.head(s) < a {
                    return None;
                }
                match store.span(s, a, b) {
                    Span::Fine { head, a, b } => Some((s, head, a, b)),
                    Span::Empty => None,
                    Span::General => {
                        *o = PartitionLoad::from(self.rates_at(s));
                        None
                    }
                }
            })
            .collect();
        // One pass a column, each into its own array (sequential writes); the ops column first,
        // since what the rates divide by depends on it.
        let fine = |col: usize, f: &mut dyn FnMut(usize, f64, u32)| {
            for (k, span) in spans.iter().enumerate() {
                if let Some((i, head, a, b)) = *span {
                    let (total, present) = store.fine_sum(i, col, head, a, b);
                    f(k, total, present as u32);
                }
            }
        };
        let n = spans.len();
        let mut denominators = vec![0.0; n];
        let mut ops = vec![0.0; n];
        fine(COL_OPS, &mut |k, total, present| {
            let Some((i, ..)) = spans[k] else { return };
            denominators[k] = self.denominator(i, f64::from(present));
            ops[k] = rate(total, present > 0, denominators[k]);
        });
        let column = |col: usize| {
            let mut v = vec![0.0; n];
            fine(col, &mut |k, total, present| v[k] = rate(total, present > 0, denominators[k]));
            v
        };
        let (bytes, cpu, rejected) = (column(COL_BYTES), column(COL_CPU), column(COL_REJECTED));
        for (k, o) in out.iter_mut().enumerate() {
            if spans[k].is_some() {
                *o = PartitionLoad {
                    ops_per_sec: ops[k],
                    bytes_per_sec: bytes[k],
                    cpu_cores: cpu[k],
                    rejected_per_sec: rejected[k],
                };
            }
        }
    }

    /// The rates of partition `i` from its [`RATE_COLS`] sums over the window.
    fn rates_from(
        &self,
        i: u32,
        [ops, bytes, cpu, rejected, errors, latency]: [(f64, f64, bool); 6],
    ) -> PartitionRates {
        let denominator = self.denominator(i, ops.1);
        let rate = |(total, _, any): (f64, f64, bool)| rate(total, any, denominator);
        PartitionRates {
            ops_per_sec: rate(ops),
            bytes_per_sec: rate(bytes),
            cpu_cores: rate(cpu),
            rejected_per_sec: rate(rejected),
            errors_per_sec: rate(errors),
            latency_p99_us: gauge(latency.0, latency.1, latency.2),
        }
    }

    /// What partition `i`'s rates divide by, given the seconds of the window its ops column has
    /// a value in: the window's seconds, or those its worker reported in.
    fn denominator(&self, i: u32, ops_present: f64) -> f64 {
        use super::metric::COL_OPS;
        let t = self.table;
        let (a, b, _) = self.win;
        match self.basis {
            RateBasis::Window => (b - a + 1) as f64,
            RateBasis::Reported => {
                let e = t.entry(i);
                // Born at its first sample, or earlier when the table knew it before that (the
                // topology listed it while its worker left it out of reports: idle, not new).
                let born = e.first_slot.map(|first| first.min(e.created_slot));
                let by_worker = e.last_worker.map_or(0.0, |w| match born {
                    // Younger than the window: only the seconds since it was born count.
                    Some(born) if born > a => t.wseries.sum(w, View::Col(COL_OPS), born, b).1,
                    // Precomputed for a whole pass; a single read sums its one worker.
                    _ => self
                        .worker_covered
                        .get(w as usize)
                        .copied()
                        .unwrap_or_else(|| t.wseries.sum(w, View::Col(COL_OPS), a, b).1),
                });
                // A sample late for the worker's series may still be in the partition's.
                ops_present.max(by_worker)
            }
        }
    }
}

/// A rate over the window from a column's sum: 0 without a value in it.
#[inline]
fn rate(total: f64, any: bool, denominator: f64) -> f64 {
    if any && denominator > 0.0 { total / denominator } else { 0.0 }
}

/// A gauge over the window (the mean over the seconds that had a value); `None` without one.
#[inline]
fn gauge(sum: f64, covered: f64, any: bool) -> Option<f64> {
    any.then(|| if covered > 0.0 { sum / covered } else { 0.0 })
}

pub(crate) fn scalar_of<F: Codec, K: Codec>(
    store: &SeriesStore<F, K>,
    id: u32,
    view: View,
    is_rate: bool,
    (a, b, _): (i64, i64, f64),
) -> Option<f64> {
    let (sum, covered, any) = store.sum(id, view, a, b);
    if !any {
        None
    } else if is_rate {
        Some(sum / (b - a + 1) as f64)
    } else if covered > 0.0 {
        Some(sum / covered)
    } else {
        Some(0.0)
    }
}

fn latest_stats(metric: Metric, value: f64, window_secs: f64) -> WindowStats {
    WindowStats {
        metric,
        window_secs,
        covered_secs: 0.0,
        sum: value,
        rate_per_sec: value,
        mean: value,
        max: value,
        p50: Some(value),
        p99: Some(value),
    }
}

/// How old a worker's newest sample may be before it reads stale: `stale_after_ms` before the
/// time asked about, or before `as_of_ms` (the collector's newest round) when that is earlier,
/// since no sample can be newer than the round that brought it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Freshness {
    pub as_of_ms: i64,
    pub stale_after_ms: i64,
}

impl Freshness {
    /// Judged at the time asked about only (no collector round to go by).
    pub fn at_any_time(stale_after_ms: i64) -> Self {
        Self { as_of_ms: i64::MAX, stale_after_ms }
    }

    /// As of the collector's newest successful round while that is recent: a slow round or a
    /// busy machine delays every worker's data alike, and that is the collector's lag, not a
    /// worker gone quiet. Once the collector itself is stale (no round within `stale_after_ms`
    /// of `now_ms`), at the time asked about, so that every worker reads stale then.
    pub fn as_of_round(last_round_ms: Option<i64>, now_ms: i64, stale_after_ms: i64) -> Self {
        match last_round_ms {
            Some(round) if now_ms.saturating_sub(round) <= stale_after_ms => Self { as_of_ms: round, stale_after_ms },
            _ => Self::at_any_time(stale_after_ms),
        }
    }

    /// The oldest newest-sample time that reads fresh at `at_ms`.
    pub fn fresh_from(self, at_ms: i64) -> i64 {
        at_ms.min(self.as_of_ms).saturating_sub(self.stale_after_ms)
    }
}

impl MetricsTable {
    /// Statistics of one partition's metric over the `last` window before `now_ms`.
    /// `StoredBytes` has no history: every field is its latest value.
    pub fn window(
        &self,
        partition: &PartitionId,
        metric: Metric,
        last: Duration,
        now_ms: i64,
    ) -> Result<WindowStats, TableError> {
        let i = self.partition_idx(partition)?;
        let w = window_slots(self, last, now_ms)?;
        if metric == Metric::StoredBytes {
            return Ok(latest_stats(metric, self.entry(i).stored_bytes as f64, w.2));
        }
        let view = metric.partition_view().ok_or(TableError::MetricNotAvailable { metric, scope: "partition" })?;
        Ok(stats_of(&self.pseries, i, view, metric, w))
    }

    /// Statistics of one worker's load: its partitions' samples added up (as served by it), or
    /// its host stats. `StoredBytes` is the sum over the partitions it owns now.
    pub fn worker_load(
        &self,
        worker: &WorkerId,
        metric: Metric,
        last: Duration,
        now_ms: i64,
    ) -> Result<WindowStats, TableError> {
        let w = *self.worker_index.get(worker).ok_or_else(|| TableError::UnknownWorker(worker.clone()))?;
        let win = window_slots(self, last, now_ms)?;
        if metric == Metric::StoredBytes {
            return Ok(latest_stats(metric, self.owned_stored_bytes()[w as usize], win.2));
        }
        let view = metric.worker_view().ok_or(TableError::MetricNotAvailable { metric, scope: "worker" })?;
        Ok(stats_of(&self.wseries, w, view, metric, win))
    }

    fn owned_stored_bytes(&self) -> Vec<f64> {
        let mut out = vec![0.0; self.workers.len()];
        for e in self.partitions.iter().flatten().filter(|e| !e.gone) {
            if let Some(w) = e.owner.or(e.last_worker) {
                out[w as usize] += e.stored_bytes as f64;
            }
        }
        out
    }

    /// Per-worker values of a metric (`None` when the worker had no data in the window).
    fn worker_values(&self, metric: Metric, win: (i64, i64, f64)) -> Result<Vec<Option<f64>>, TableError> {
        if metric == Metric::StoredBytes {
            return Ok(self.owned_stored_bytes().into_iter().map(Some).collect());
        }
        let view = metric.worker_view().ok_or(TableError::MetricNotAvailable { metric, scope: "worker" })?;
        Ok((0..self.workers.len() as u32).map(|w| scalar_of(&self.wseries, w, view, metric.is_rate(), win)).collect())
    }

    /// Per-partition values of a metric for live partitions (index, value).
    pub(crate) fn partition_values(&self, metric: Metric, win: (i64, i64, f64)) -> Result<Vec<(u32, f64)>, TableError> {
        let mut out = Vec::with_capacity(self.live_partitions);
        if metric == Metric::StoredBytes {
            for (i, e) in self.partitions.iter().enumerate() {
                if let Some(e) = e.as_ref().filter(|e| !e.gone) {
                    out.push((i as u32, e.stored_bytes as f64));
                }
            }
            return Ok(out);
        }
        let view = metric.partition_view().ok_or(TableError::MetricNotAvailable { metric, scope: "partition" })?;
        let scan = |range: std::ops::Range<usize>| {
            let mut part = Vec::with_capacity(range.len());
            for i in range {
                if self.pstate[i] == PartState::Live
                    && let Some(v) = scalar_of(&self.pseries, i as u32, view, metric.is_rate(), win)
                {
                    part.push((i as u32, v));
                }
            }
            part
        };
        let len = self.pstate.len();
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(MAX_SCAN_THREADS);
        if threads < 2 || len < PARALLEL_SCAN_MIN_PARTITIONS {
            out.extend(scan(0..len));
            return Ok(out);
        }
        // Every partition's window is independent: scan disjoint ranges on scoped threads.
        let chunk = len.div_ceil(threads);
        std::thread::scope(|s| {
            let scan = &scan;
            let parts: Vec<_> =
                (0..threads).map(|t| s.spawn(move || scan(t * chunk..((t + 1) * chunk).min(len)))).collect();
            for part in parts {
                out.extend(part.join().expect("a scan thread does not panic"));
            }
        });
        Ok(out)
    }

    /// The `n` highest values of `metric` over the `last` window, per partition or grouped.
    /// Rates are per-second averages over the window and add up in a group; gauges are means
    /// over the covered seconds and a group takes their max.
    pub fn top_n(
        &self,
        metric: Metric,
        n: usize,
        group_by: GroupBy,
        last: Duration,
        now_ms: i64,
    ) -> Result<TopN, TableError> {
        let win = window_slots(self, last, now_ms)?;
        let merge = |acc: &mut Option<f64>, v: f64| {
            *acc = Some(match *acc {
                None => v,
                Some(a) if metric.is_rate() || metric == Metric::StoredBytes => a + v,
                Some(a) => a.max(v),
            })
        };
        let mut ranked: Vec<(f64, u32)> = match group_by {
            GroupBy::None => self.partition_values(metric, win)?.into_iter().map(|(i, v)| (v, i)).collect(),
            GroupBy::Worker => self
                .worker_values(metric, win)?
                .into_iter()
                .enumerate()
                .filter_map(|(i, v)| v.map(|v| (v, i as u32)))
                .collect(),
            GroupBy::Table | GroupBy::Tenant => {
                let per_table = self.partition_values(metric, win)?;
                let groups = if group_by == GroupBy::Table { self.tables.len() } else { self.tenants.len() };
                let mut acc = vec![None; groups];
                for (i, v) in per_table {
                    let t = self.ptable[i as usize] as usize;
                    let g = if group_by == GroupBy::Table { t } else { self.tables[t].tenant as usize };
                    merge(&mut acc[g], v);
                }
                acc.into_iter().enumerate().filter_map(|(g, v)| v.map(|v| (v, g as u32))).collect()
            }
        };
        let desc = |x: &(f64, u32), y: &(f64, u32)| y.0.total_cmp(&x.0).then(x.1.cmp(&y.1));
        if n == 0 {
            ranked.clear();
        } else if ranked.len() > n {
            ranked.select_nth_unstable_by(n - 1, desc);
            ranked.truncate(n);
        }
        ranked.sort_unstable_by(desc);
        let entries =
            ranked.into_iter().map(|(value, i)| TopEntry { key: self.group_key(group_by, i), value }).collect();
        Ok(TopN { metric, group_by, window_secs: win.2, entries })
    }

    fn group_key(&self, group_by: GroupBy, i: u32) -> GroupKey {
        match group_by {
            GroupBy::None => GroupKey::Partition { partition: self.entry(i).id.clone() },
            GroupBy::Worker => GroupKey::Worker { worker: self.workers[i as usize].id.clone() },
            GroupBy::Table => {
                let t = &self.tables[i as usize];
                GroupKey::Table { tenant: self.tenants[t.tenant as usize].clone(), table: t.table.clone() }
            }
            GroupBy::Tenant => GroupKey::Tenant { tenant: self.tenants[i as usize].clone() },
        }
    }

    /// Per-worker load with max, mean, max/mean and CV. Lists the workers of the latest
    /// topology that are not down and any other worker that sent data; a worker whose newest
    /// sample is too old by `freshness` is marked stale and left out of the spread (missing
    /// data is not an idle worker).
    pub fn cluster_overview(
        &self,
        metric: Metric,
        last: Duration,
        now_ms: i64,
        freshness: Freshness,
    ) -> Result<ClusterOverview, TableError> {
        let win = window_slots(self, last, now_ms)?;
        let values = self.worker_values(metric, win)?;
        let fresh_from_ms = freshness.fresh_from(now_ms);
        let mut workers = Vec::new();
        for (w, v) in self.workers.iter().zip(values) {
            let counted = if w.in_topology { w.health != Some(Health::Down) } else { v.is_some() };
            if !counted {
                continue;
            }
            let value = v.unwrap_or(0.0);
            let cap = match metric {
                Metric::Ops => w.capacity.map(|c| c.ops_per_sec),
                Metric::Bytes => w.capacity.map(|c| c.bytes_per_sec),
                // Cores used against cores of execution; the host's ratio is its own.
                Metric::Cpu => Some(w.cpu_cores),
                Metric::HostCpu => (w.cpu_cores > 0.0).then_some(1.0),
                _ => None,
            };
            let capacity_ratio = cap.filter(|c| *c > 0.0).map(|c| value / c);
            let stale = w.last_sample_ms.is_none_or(|t| t < fresh_from_ms);
            workers.push(WorkerLoad { worker: w.id.clone(), value, capacity_ratio, stale });
        }
        let fresh: Vec<f64> = workers.iter().filter(|w| !w.stale).map(|w| w.value).collect();
        let n = fresh.len() as f64;
        let mean = if n > 0.0 { fresh.iter().sum::<f64>() / n } else { 0.0 };
        let max = fresh.iter().copied().fold(0.0, f64::max);
        let var = if n > 0.0 { fresh.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n } else { 0.0 };
        let (max_over_mean, cv) = if mean > 0.0 { (max / mean, var.sqrt() / mean) } else { (0.0, 0.0) };
        let stale_workers = workers.len() - fresh.len();
        Ok(ClusterOverview { metric, window_secs: win.2, workers, max, mean, max_over_mean, cv, stale_workers })
    }

    /// The cluster's spread over `[from_ms, to_ms)`: one overview per `step_ms`, at most
    /// `max_points` (`[api] max_history_points`). Steps older than the table keeps are left out.
    pub fn cluster_history(
        &self,
        metric: Metric,
        from_ms: i64,
        to_ms: i64,
        step_ms: i64,
        freshness: Freshness,
        max_points: usize,
    ) -> Result<ClusterHistory, TableError> {
        if !(1_000..=86_400_000).contains(&step_ms) || to_ms <= from_ms {
            return Err(TableError::InvalidQuery("step_ms must be 1000..=86400000 and to_ms after from_ms".into()));
        }
        let span = to_ms.saturating_sub(from_ms);
        if span > self.geo.history_ms() {
            return Err(TableError::InvalidQuery(format!(
                "from_ms..to_ms spans more than the table's history ({} s)",
                self.geo.history_ms() / 1000
            )));
        }
        let steps = (span + step_ms - 1) / step_ms;
        if steps > max_points as i64 {
            return Err(TableError::InvalidQuery(format!(
                "{steps} steps of {step_ms} ms: at most {max_points} ([api] max_history_points; use a longer step)"
            )));
        }
        let mut points = Vec::with_capacity(steps as usize);
        for k in 1..=steps {
            let end = from_ms.saturating_add(k * step_ms);
            let o = self.cluster_overview(metric, Duration::from_millis(step_ms as u64), end, freshness)?;
            points.push(ClusterPoint {
                ts_ms: end,
                max: o.max,
                mean: o.mean,
                max_over_mean: o.max_over_mean,
                cv: o.cv,
            });
        }
        Ok(ClusterHistory { metric, step_ms, points })
    }

    /// Every partition the table knows (live and gone), with its figures over the `last` window.
    pub fn partitions(&self, last: Duration, now_ms: i64) -> Result<Vec<PartitionRow>, TableError> {
        self.partitions_with(last, now_ms, RateBasis::Window)
    }

    /// One partition's rates over the `last` window ending at `now_ms`, read by id without
    /// building a row. `None` for a partition the table has not heard of. Reading many
    /// partitions (the online analyzer's pass) goes through [`MetricsTable::rate_reader`], which
    /// works out every worker's reported seconds once; this reads only its partition's worker.
    pub fn partition_rates(
        &self,
        id: &PartitionId,
        last: Duration,
        now_ms: i64,
        basis: RateBasis,
    ) -> Result<Option<PartitionRates>, TableError> {
        let win = window_slots(self, last, now_ms)?;
        Ok(RateReader { table: self, win, basis, worker_covered: Vec::new() }.rates(id))
    }

    /// A reader of many partitions' rates over the `last` window ending at `now_ms`.
    pub fn rate_reader(&self, last: Duration, now_ms: i64, basis: RateBasis) -> Result<RateReader<'_>, TableError> {
        let win = window_slots(self, last, now_ms)?;
        let worker_covered = match basis {
            RateBasis::Window => Vec::new(),
            RateBasis::Reported => (0..self.workers.len() as u32)
                .map(|w| self.wseries.sum(w, View::Col(super::metric::COL_OPS), win.0, win.1).1)
                .collect(),
        };
        Ok(RateReader { table: self, win, basis, worker_covered })
    }

    /// [`MetricsTable::partitions`] with a choice of what a rate is averaged over.
    pub fn partitions_with(
        &self,
        last: Duration,
        now_ms: i64,
        basis: RateBasis,
    ) -> Result<Vec<PartitionRow>, TableError> {
        let reader = self.rate_reader(last, now_ms, basis)?;
        let win = reader.win;
        let worker = |w: Option<u32>| w.map(|w| self.workers[w as usize].id.clone());
        let mut rows = Vec::with_capacity(self.live_partitions);
        for (i, e) in self.partitions.iter().enumerate() {
            let Some(e) = e else { continue };
            let i = i as u32;
            let t = &self.tables[e.table as usize];
            let rates = reader.rates_at(i);
            rows.push(PartitionRow {
                id: e.id.clone(),
                tenant: self.tenants[t.tenant as usize].clone(),
                table: t.table.clone(),
                key_range: e.range,
                owner: worker(e.owner),
                last_worker: worker(e.last_worker),
                gone: e.gone,
                parents: e.parents.iter().map(|p| self.entry(p.idx).id.clone()).collect(),
                stored_bytes: e.stored_bytes,
                limit: e.limit,
                window_secs: win.2,
                ops_per_sec: rates.ops_per_sec,
                bytes_per_sec: rates.bytes_per_sec,
                cpu_cores: rates.cpu_cores,
                rejected_per_sec: rates.rejected_per_sec,
                errors_per_sec: rates.errors_per_sec,
                latency_p99_us: rates.latency_p99_us,
                has_sketch: e.sketch.is_some(),
            });
        }
        Ok(rows)
    }

    /// Every worker the table knows, with its figures over the `last` window.
    pub fn workers(&self, last: Duration, now_ms: i64) -> Result<Vec<WorkerRow>, TableError> {
        let win = window_slots(self, last, now_ms)?;
        let v =
            |i: u32, m: Metric| m.worker_view().and_then(|view| scalar_of(&self.wseries, i, view, m.is_rate(), win));
        Ok(self
            .workers
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let i = i as u32;
                WorkerRow {
                    id: w.id.clone(),
                    in_topology: w.in_topology,
                    health: w.health,
                    zone: w.zone.clone(),
                    capacity: w.capacity,
                    window_secs: win.2,
                    ops_per_sec: v(i, Metric::Ops).unwrap_or(0.0),
                    bytes_per_sec: v(i, Metric::Bytes).unwrap_or(0.0),
                    cpu_cores: v(i, Metric::Cpu).unwrap_or(0.0),
                    rejected_per_sec: v(i, Metric::Rejected).unwrap_or(0.0),
                    latency_p99_us: v(i, Metric::LatencyP99),
                    host_cpu_ratio: v(i, Metric::HostCpu),
                    net_bytes_per_sec: v(i, Metric::NetBytes),
                    covered_secs: self.wseries.sum(i, View::Col(super::metric::COL_OPS), win.0, win.1).1
                        * self.geo.fine_step_ms as f64
                        / 1000.0,
                    last_sample_ms: w.last_sample_ms,
                }
            })
            .collect())
    }
}
