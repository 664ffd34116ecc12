//! The offline report: what an SRE reads about the look-back as a whole, beside the merges and
//! pre-splits. Folded day by day from the same per-day frames as the analyses.
//!
//! - **Worker days**: per UTC day and worker, its hourly load (mean ops/s of each hour, over
//!   every partition it served) at p50, p90 and max.
//! - **Chronically unbalanced tables and tenants**: in an hour, a table's (a tenant's) spread is
//!   the load it put on its busiest worker over its mean per worker it used. An hour whose spread
//!   is over `report_imbalance_ratio` is unbalanced; a table or tenant unbalanced in more than
//!   `report_chronic_share` of the hours it was seen on two or more workers is reported, worst
//!   first. One bad hour is a hotspot the online loop handles; most hours of a week is a layout
//!   the online loop keeps failing to fix (a placement rule, a key design, a tenant too big for
//!   its group).
//! - **Flapping split keys**: a table's partition boundaries hour by hour, from the archived key
//!   ranges (lineage, not ids: ids change with every split and merge). A boundary that appears is
//!   a split at that key, one that disappears while the table has rows in the hour is a merge. A
//!   key split and merged back [`FLAP_CHANGES`] times or more in the look-back is flapping: the
//!   merge and split thresholds disagree about that range.

use std::collections::HashMap;

use chrono::NaiveDate;
use lb_common::ids::{Key, TableId, TenantId};
use lb_common::protocol::{OfflineFlap, OfflineImbalance, OfflineReport, OfflineWorkerDay};
use polars::prelude::*;

use crate::archive::HOUR_MS;

/// Boundary changes (splits plus merges) at one key that make it flapping: split, merged back,
/// split again (or merged, split, merged). Two are one round trip, which a surge that came and
/// went explains.
pub const FLAP_CHANGES: u32 = 3;
/// Rows of each list the report keeps (the worst first); the totals count them all.
pub const MAX_REPORT_ROWS: usize = 256;

/// The look-back's report; see the module doc.
pub type Report = OfflineReport;
/// A table or tenant whose load sat on one of its workers in most hours.
pub type Imbalance = OfflineImbalance;
/// A key of a table split and merged back repeatedly.
pub type Flap = OfflineFlap;
/// One worker's day.
pub type WorkerDay = OfflineWorkerDay;

/// A boundary's state across the look-back.
#[derive(Debug, Clone, Copy, Default)]
struct Boundary {
    /// Present in the last hour the table had rows (`None` before the first).
    present: Option<bool>,
    splits: u32,
    merges: u32,
    last_change_ms: i64,
}

/// Spread per hour of one table or tenant.
#[derive(Debug, Clone, Copy, Default)]
struct Spread {
    hours: u32,
    unbalanced: u32,
    sum: f64,
    max: f64,
}

impl Spread {
    fn add(&mut self, loads: &[f64], ratio: f64) {
        let used: Vec<f64> = loads.iter().copied().filter(|&l| l > 0.0).collect();
        if used.len() < 2 {
            return;
        }
        let mean = used.iter().sum::<f64>() / used.len() as f64;
        let spread = used.iter().copied().fold(0.0, f64::max) / mean;
        self.hours += 1;
        self.sum += spread;
        self.max = self.max.max(spread);
        if spread > ratio {
            self.unbalanced += 1;
        }
    }
}

/// The report's accumulators over the days of a pass.
#[derive(Debug, Default)]
pub(crate) struct ReportFolds {
    boundaries: HashMap<(u32, u64), Boundary>,
    tables: HashMap<u32, Spread>,
    tenants: HashMap<u32, Spread>,
    worker_days: Vec<WorkerDay>,
}

/// What a day's frames are folded with: the look-back's start, each table's tenant, the range
/// ids' table and first key, the worker names and the ratio.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DayContext<'a> {
    pub day: NaiveDate,
    /// Midnight (UTC) of `day`: the frames' keys name hours of the day.
    pub day_ms: i64,
    /// The mask of the day's hours inside the look-back (earlier ones only feed the tables'
    /// daily profiles).
    pub lookback_hours: u32,
    pub tenant_of_table: &'a [u32],
    pub range_table: &'a [u32],
    pub range_start: &'a [u64],
    pub workers: &'a [String],
    pub imbalance_ratio: f64,
}

impl DayContext<'_> {
    /// Whether hour `hod` of the day is inside the look-back (earlier hours only feed the
    /// tables' daily profiles).
    fn in_lookback(&self, hod: u64) -> bool {
        self.lookback_hours & (1 << hod) != 0
    }
}

impl ReportFolds {
    /// Folds one day: `range_hours` the mask of hours each archived range id has rows in,
    /// `spread` the `ops` per `sk` (table id << 32 | worker id << 5 | hour of the day), `workers`
    /// the `ops` per `wk` (worker id × 24 + hour of the day).
    pub(crate) fn fold_day(
        &mut self,
        ctx: DayContext<'_>,
        range_hours: &[u32],
        spread: &DataFrame,
        workers: &DataFrame,
    ) -> PolarsResult<()> {
        self.fold_boundaries(ctx, range_hours);
        self.fold_spread(ctx, spread)?;
        self.fold_workers(ctx, workers)
    }

    fn fold_boundaries(&mut self, ctx: DayContext<'_>, range_hours: &[u32]) {
        // The day's hours (in the look-back) per boundary and per table.
        let mut present: HashMap<(u32, u64), u32> = HashMap::new();
        let mut table_hours: HashMap<u32, u32> = HashMap::new();
        let seen = range_hours.iter().map(|h| h & ctx.lookback_hours).enumerate().filter(|(_, h)| *h != 0);
        for (rid, hours) in seen {
            let t = ctx.range_table[rid];
            *present.entry((t, ctx.range_start[rid])).or_default() |= hours;
            *table_hours.entry(t).or_default() |= hours;
        }
        for key in present.keys() {
            self.boundaries.entry(*key).or_default();
        }
        for (&(t, k), b) in &mut self.boundaries {
            let Some(&hours) = table_hours.get(&t) else { continue };
            let mask = present.get(&(t, k)).copied().unwrap_or(0);
            for h in crate::analysis::hours_in(hours) {
                let now = mask & (1 << h) != 0;
                match b.present {
                    Some(false) if now => b.splits += 1,
                    Some(true) if !now => b.merges += 1,
                    _ => {}
                }
                if b.present.is_some_and(|was| was != now) {
                    b.last_change_ms = ctx.day_ms + h as i64 * HOUR_MS;
                }
                b.present = Some(now);
            }
        }
    }

    fn fold_spread(&mut self, ctx: DayContext<'_>, spread: &DataFrame) -> PolarsResult<()> {
        let keys = spread.column("sk")?.u64()?;
        let ops = spread.column("ops")?.f64()?;
        // (table, hour of day) → load per worker; the same per tenant.
        let mut by_table: HashMap<(u32, u64), HashMap<u32, f64>> = HashMap::new();
        let mut by_tenant: HashMap<(u32, u64), HashMap<u32, f64>> = HashMap::new();
        for (k, o) in keys.iter().zip(ops.iter()) {
            let (Some(k), Some(o)) = (k, o) else { continue };
            let (t, w, hod) = ((k >> 32) as u32, ((k >> 5) & ((1 << 27) - 1)) as u32, k & 31);
            if !ctx.in_lookback(hod) {
                continue;
            }
            let per_sec = o / 3600.0;
            *by_table.entry((t, hod)).or_default().entry(w).or_default() += per_sec;
            let tenant = ctx.tenant_of_table[t as usize];
            *by_tenant.entry((tenant, hod)).or_default().entry(w).or_default() += per_sec;
        }
        for ((t, _), loads) in by_table {
            self.tables.entry(t).or_default().add(&loads.into_values().collect::<Vec<_>>(), ctx.imbalance_ratio);
        }
        for ((tenant, _), loads) in by_tenant {
            self.tenants.entry(tenant).or_default().add(&loads.into_values().collect::<Vec<_>>(), ctx.imbalance_ratio);
        }
        Ok(())
    }

    fn fold_workers(&mut self, ctx: DayContext<'_>, workers: &DataFrame) -> PolarsResult<()> {
        let keys = workers.column("wk")?.u64()?;
        let ops = workers.column("ops")?.f64()?;
        let mut hours: HashMap<u32, Vec<f64>> = HashMap::new();
        for (k, o) in keys.iter().zip(ops.iter()) {
            let (Some(k), Some(o)) = (k, o) else { continue };
            if ctx.in_lookback(k % 24) {
                hours.entry((k / 24) as u32).or_default().push(o / 3600.0);
            }
        }
        let mut day: Vec<WorkerDay> = hours
            .into_iter()
            .map(|(w, mut loads)| {
                loads.sort_by(f64::total_cmp);
                let at = |q: f64| loads[((loads.len() - 1) as f64 * q).round() as usize];
                WorkerDay {
                    day: ctx.day,
                    worker: ctx.workers[w as usize].clone(),
                    hours: loads.len() as u32,
                    p50_ops_per_sec: at(0.5),
                    p90_ops_per_sec: at(0.9),
                    max_ops_per_sec: at(1.0),
                }
            })
            .collect();
        day.sort_by(|a, b| a.worker.cmp(&b.worker));
        self.worker_days.extend(day);
        Ok(())
    }

    /// The report of the look-back.
    pub(crate) fn finish(
        self,
        table_names: &[(TenantId, TableId)],
        tenant_names: &[TenantId],
        chronic_share: f64,
    ) -> Report {
        let chronic = |s: &Spread| s.hours > 0 && f64::from(s.unbalanced) > chronic_share * f64::from(s.hours);
        let row = |tenant: TenantId, table: Option<TableId>, s: &Spread| Imbalance {
            tenant,
            table,
            hours_judged: s.hours,
            hours_unbalanced: s.unbalanced,
            mean_spread: s.sum / f64::from(s.hours.max(1)),
            max_spread: s.max,
        };
        let worst_first = |a: &Imbalance, b: &Imbalance| {
            b.mean_spread.total_cmp(&a.mean_spread).then((&a.tenant, &a.table).cmp(&(&b.tenant, &b.table)))
        };
        let mut tables: Vec<Imbalance> = self
            .tables
            .iter()
            .filter(|(_, s)| chronic(s))
            .map(|(&t, s)| {
                let (tenant, table) = table_names[t as usize].clone();
                row(tenant, Some(table), s)
            })
            .collect();
        tables.sort_by(worst_first);
        let mut tenants: Vec<Imbalance> = self
            .tenants
            .iter()
            .filter(|(_, s)| chronic(s))
            .map(|(&t, s)| row(tenant_names[t as usize].clone(), None, s))
            .collect();
        tenants.sort_by(worst_first);
        let mut flapping: Vec<Flap> = self
            .boundaries
            .iter()
            .filter(|(_, b)| b.splits >= 1 && b.merges >= 1 && b.splits + b.merges >= FLAP_CHANGES)
            .map(|(&(t, key), b)| {
                let (tenant, table) = table_names[t as usize].clone();
                Flap {
                    tenant,
                    table,
                    key: Key(key),
                    splits: b.splits,
                    merges: b.merges,
                    last_change_ms: b.last_change_ms,
                }
            })
            .collect();
        flapping.sort_by(|a, b| {
            (b.splits + b.merges)
                .cmp(&(a.splits + a.merges))
                .then((&a.tenant, &a.table, a.key.0).cmp(&(&b.tenant, &b.table, b.key.0)))
        });
        let (tables_total, tenants_total, flapping_total) = (tables.len(), tenants.len(), flapping.len());
        tables.truncate(MAX_REPORT_ROWS);
        tenants.truncate(MAX_REPORT_ROWS);
        flapping.truncate(MAX_REPORT_ROWS);
        Report { tables, tables_total, tenants, tenants_total, flapping, flapping_total, worker_days: self.worker_days }
    }
}
