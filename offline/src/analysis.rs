//! The offline analyses over the archive: merges that respect periodic load, and peaks met
//! before they arrive. One pure function, [`analyze`]`(archive, layout, config, now_ms)`: no
//! clock, no network; it reads the look-back's day files one day at a time with polars (so
//! memory holds one day of rows, not the whole look-back). Each archived range gets a small
//! integer id the first time a day holds it, with its mapping to today's partitions (below) made
//! then and kept for the pass; a day's rows add their load to their range's hour slot as they
//! are coded, and the slots flow through the mapping into per-partition slots.
//! A 100k-partition day has ~2.4 M (range, hour) keys, nearly each its own group: dense slots
//! by id, not a hash group-by, are what keep a two-week pass in seconds.
//!
//! **Lineage by key range.** History is attributed to today's partitions by key range, not by
//! id: an archived row whose range overlaps a current partition counts for it. So a table's
//! history survives its re-partitioning (a split child inherits its parent's hours, a merged
//! partition the sum of its parents'). Two shares are kept per overlap:
//! - *upper* (merges): the whole archived peak counts for every current partition it overlaps.
//!   Merging on an over-estimate only delays a merge; merging on an under-estimate makes a
//!   partition that rejects.
//! - *estimate* (peaks ahead): the archived load is shared among the current partitions inside
//!   it by their current load (by key width when they are idle), as the split that made them
//!   shared it.
//!
//! **Merge** (adjacent partitions of one table, both able to merge, neither busy nor in a
//! cooldown): judged on the combined hourly peak over the look-back (the *sum* of the two
//! peaks, an upper bound of the merged partition's peak) against `merge_max_ratio` × the
//! smaller limit. Neither side may have rejected a request in the look-back, nor have been
//! split within `merge_min_age_secs`. A table whose daily profile swings (peak hour over trough
//! hour ≥ `periodic_ratio`) is periodic: the pair is judged only when the look-back holds its
//! peak hour on at least `periodic_min_peaks` days, so a pair is never merged on its trough
//! alone; the profile is read over two weeks at least whatever the look-back, so a short look-back in
//! the trough does not hide the peak. Without the whole look-back (an archive that is younger, files skipped, agents that
//! returned nothing) nothing is merged unless `allow_partial_lookback`, and never on less than
//! `min_history_hours`. Capped per pass and per table; the coolest pairs first; the merged
//! partition goes to the cooler of the two workers.
//!
//! An hour's peak is the served peak (`max_ops_per_sec`), or the hour's mean demand (served and
//! rejected ops over the hour) when that is higher: a partition at its limit serves no more than
//! the limit, however much it is asked.
//!
//! **Peaks ahead**: per partition and hour of the day, each day's mean demand in that hour
//! (served and rejected ops over the hour; not the served peak, which a partition split in the
//! hour shows for the range it had before). An hour whose demand went over `presplit_ratio` ×
//! the limit on at least `presplit_min_recurrences` days of the profile's span (two weeks at
//! least, like the table's profile, whatever the merge look-back) is a recurring peak: daily if
//! those days are of several weekdays (not forecast on a weekday seen quiet at that hour in as
//! many weeks), weekly if they are one weekday's. The next one within `presplit_horizon_hours`
//! is forecast at the mean of those days' peaks, to be split into
//! enough pieces to hold it under `presplit_target_ratio` × the limit, `lead_time_secs` before
//! the hour starts.

use std::collections::HashMap;

use chrono::NaiveDate;
use lb_common::ids::{KeyRange, PartitionId, TableId, TenantId, WorkerId};
use lb_common::protocol::{
    OfflineCoverage, OfflineDeclined, OfflineFindings, OfflineMerge, OfflinePeak, OfflineTableProfile, PeakPattern,
};
use polars::prelude::*;

use crate::archive::{Archive, DAY_MS, HOUR_MS, day_of, day_start_ms};
use crate::report::{DayContext, ReportFolds};

/// The offline policies; `configs/master.toml` `[offline]` documents each default and why.
#[derive(Debug, Clone, PartialEq)]
pub struct OfflineConfig {
    pub lookback_hours: u32,
    pub merge_max_ratio: f64,
    pub merge_min_age_secs: u64,
    pub max_merges_per_pass: u32,
    pub max_merges_per_table: u32,
    pub periodic_ratio: f64,
    pub periodic_min_peaks: u32,
    pub allow_partial_lookback: bool,
    pub min_history_hours: u32,
    pub presplit_ratio: f64,
    pub presplit_target_ratio: f64,
    pub presplit_min_recurrences: u32,
    pub presplit_horizon_hours: u32,
    pub lead_time_secs: u64,
    /// The report: an hour whose spread (busiest worker over the mean per worker) is over this
    /// is unbalanced ([`crate::report`]).
    pub report_imbalance_ratio: f64,
    /// The report: a table or tenant unbalanced in more than this share of its hours is
    /// chronically unbalanced.
    pub report_chronic_share: f64,
}

impl Default for OfflineConfig {
    fn default() -> Self {
        Self {
            lookback_hours: 7 * 24,
            merge_max_ratio: 0.3,
            merge_min_age_secs: 24 * 3600,
            max_merges_per_pass: 16,
            max_merges_per_table: 4,
            periodic_ratio: 3.0,
            periodic_min_peaks: 2,
            allow_partial_lookback: false,
            min_history_hours: 24,
            presplit_ratio: 0.9,
            presplit_target_ratio: 0.6,
            presplit_min_recurrences: 2,
            presplit_horizon_hours: 24,
            lead_time_secs: 1800,
            report_imbalance_ratio: 2.0,
            report_chronic_share: 0.5,
        }
    }
}

/// One partition as the master sees it now.
#[derive(Debug, Clone, PartialEq)]
pub struct LayoutPartition {
    pub id: PartitionId,
    pub tenant: TenantId,
    pub table: TableId,
    pub range: KeyRange,
    pub owner: WorkerId,
    pub limit_ops_per_sec: Option<f64>,
    pub can_merge: bool,
    pub can_split: bool,
    /// When the master last saw it made by a split (or its range shrink), if it did.
    pub split_at_ms: Option<i64>,
    /// In flight or in a cooldown: not a merge candidate now.
    pub busy: bool,
    /// Its current load (shares a split parent's history among its children).
    pub ops_per_sec: f64,
}

/// One worker as the master sees it now.
#[derive(Debug, Clone, PartialEq)]
pub struct LayoutWorker {
    pub id: WorkerId,
    pub capacity_ops_per_sec: f64,
    pub ops_per_sec: f64,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Layout {
    pub partitions: Vec<LayoutPartition>,
    pub workers: Vec<LayoutWorker>,
}

/// What one pass found (the master serves it at `GET /api/v1/offline`).
pub type Findings = OfflineFindings;
/// How much of the look-back the pass had.
pub type Coverage = OfflineCoverage;
/// Two neighbours to merge.
pub type MergeCandidate = OfflineMerge;
/// A recurring peak to split ahead of.
pub type PeakForecast = OfflinePeak;
/// A table's daily profile over the look-back.
pub type TableProfile = OfflineTableProfile;

/// Declined pairs kept per pass.
pub const MAX_DECLINED: usize = 64;

/// Per current partition, over the look-back.
#[derive(Debug, Clone, Default)]
struct Acc {
    hours: u32,
    rejected: f64,
    /// Hours per hour of the day with data (periodic coverage).
    hod_days: [u32; 24],
    /// Days on which the hour of the day went over the pre-split threshold, and their peaks.
    over_days: [u32; 24],
    over_sum: [f64; 24],
    /// Per hour of the day and weekday (Monday first): days with data, and days over the
    /// pre-split threshold (a weekly peak recurs on one weekday only).
    seen_dow: [[u8; 7]; 24],
    over_dow: [[u8; 7]; 24],
    /// Days over the pre-split threshold in the last week (a peak that stopped is not forecast).
    over_week: [u32; 24],
    /// The newest archived hour of a split ancestor (a strictly wider range over it): it was
    /// split after that hour.
    last_parent_hour: Option<i64>,
    /// Its highest hourly upper peak in the look-back (a run of neighbours is judged on the sum).
    upper_max: f64,
}

#[derive(Debug, Clone, Copy, Default)]
struct PairAcc {
    combined_max: f64,
    hours: u32,
}

/// One offline pass; see the module doc. `silent_sources` names the agents that returned no
/// rollups for the look-back (the pass is then partial).
pub fn analyze(
    archive: &Archive,
    layout: &Layout,
    config: &OfflineConfig,
    now_ms: i64,
    silent_sources: &[String],
) -> PolarsResult<Findings> {
    let to_ms = now_ms.div_euclid(HOUR_MS) * HOUR_MS;
    let from_ms = to_ms - i64::from(config.lookback_hours) * HOUR_MS;
    let mut coverage = Coverage { from_ms, to_ms, hours_expected: config.lookback_hours, ..Default::default() };
    for s in silent_sources {
        coverage.partial.push(format!("{s} returned no rollups"));
    }

    // Current partitions in key order per table: neighbours are consecutive indices.
    let mut order: Vec<usize> = (0..layout.partitions.len()).collect();
    order.sort_by(|&a, &b| {
        let (pa, pb) = (&layout.partitions[a], &layout.partitions[b]);
        (&pa.tenant, &pa.table, pa.range.start).cmp(&(&pb.tenant, &pb.table, pb.range.start))
    });
    let parts: Vec<&LayoutPartition> = order.iter().map(|&i| &layout.partitions[i]).collect();
    let tables = Tables::of(&parts);
    let mut index = RangeIndex::new(&parts, &tables.of);
    let neighbours: Vec<bool> = parts.windows(2).map(|w| same_table(w[0], w[1])).collect();
    let mut report = ReportFolds::default();
    let mut folds = Folds {
        acc: vec![Acc::default(); parts.len()],
        pairs: vec![PairAcc::default(); parts.len()],
        table_hod: vec![[(0.0, 0u32); 24]; tables.names.len()],
        hours_seen: Default::default(),
    };

    // A table's daily profile is read over two weeks at least, whatever the look-back: a short
    // look-back in a table's trough must not hide its peak.
    let profile_from = to_ms - i64::from(config.lookback_hours.max(PROFILE_HOURS)) * HOUR_MS;
    let week_from_ms = to_ms - 7 * DAY_MS;
    let mut day = day_of(profile_from);
    let last_day = day_of(to_ms - 1);
    let mut files_by_day: Vec<(NaiveDate, Vec<String>)> = Vec::new();
    while day <= last_day {
        let mut read = archive.read_day(day, Some(&READ_COLUMNS));
        if day >= day_of(from_ms) {
            files_by_day.push((day, std::mem::take(&mut read.workers)));
        }
        coverage.files_read += read.files_read;
        coverage.files_skipped.extend(read.skipped.iter().map(|(p, e)| format!("{}: {e}", p.display())));
        if let Some(frame) = read.frame {
            let day_from = profile_from.max(day_start_ms(day));
            let day_to = to_ms.min(day_start_ms(day) + DAY_MS);
            let day_frames = day_frames(frame, &mut index, day_from, day_to)?;
            let day_ms = day_start_ms(day);
            let window = Window { from_ms, week_from_ms, day_ms, tables: &tables, neighbours: &neighbours };
            let series = DaySeries::of(&day_frames.ranges, &index, parts.len());
            fold_day(&series, &parts, window, config, &mut folds);
            let context = DayContext {
                day,
                day_ms: day_start_ms(day),
                lookback_hours: window.lookback_hours(),
                tenant_of_table: &tables.tenant_of,
                range_table: &index.range_table,
                range_start: &index.range_start,
                workers: &index.worker_names,
                imbalance_ratio: config.report_imbalance_ratio,
            };
            report.fold_day(context, &day_frames.ranges.hours, &day_frames.spread, &day_frames.workers)?;
        }
        day = day.succ_opt().unwrap_or(NaiveDate::MAX);
    }
    let Folds { acc, pairs, table_hod, hours_seen } = folds;
    coverage.files_skipped.extend(missing_files(archive, &files_by_day));
    coverage.hours_with_data = hours_seen.len() as u32;
    if coverage.hours_with_data < coverage.hours_expected {
        coverage.partial.push(format!(
            "the archive holds {} of the look-back's {} hours",
            coverage.hours_with_data, coverage.hours_expected
        ));
    }
    if !coverage.files_skipped.is_empty() {
        coverage.partial.push(format!("{} archive files could not be read", coverage.files_skipped.len()));
    }

    let profiles = profiles(&tables, &table_hod, config);
    let report = report.finish(&tables.names, &tables.tenants, config.report_chronic_share);
    let mut findings = Findings { at_ms: now_ms, tables: profiles, report, ..Default::default() };
    merges(&parts, &acc, &pairs, layout, config, &coverage, now_ms, &mut findings);
    findings.peaks = peaks(&parts, &acc, config, now_ms);
    findings.coverage = coverage;
    Ok(findings)
}

/// The look-back's day files that are missing: a worker's file absent on a day between days on
/// which it has one, on a day that has other workers' files (a day with no file at all shows as
/// hours without data). A worker that joins or leaves within the look-back has no gap.
fn missing_files(archive: &Archive, files_by_day: &[(NaiveDate, Vec<String>)]) -> Vec<String> {
    let mut days_of: std::collections::BTreeMap<&str, Vec<usize>> = std::collections::BTreeMap::new();
    for (i, (_, workers)) in files_by_day.iter().enumerate() {
        for w in workers {
            days_of.entry(w.as_str()).or_default().push(i);
        }
    }
    let mut out = Vec::new();
    for (worker, days) in days_of {
        let (Some(&first), Some(&last)) = (days.first(), days.last()) else { continue };
        for (i, (day, workers)) in files_by_day.iter().enumerate().take(last).skip(first) {
            if !workers.is_empty() && !days.contains(&i) {
                let path = archive.day_dir(day_start_ms(*day)).join(format!("{worker}.parquet"));
                out.push(format!("{}: missing (the worker has files on days before and after it)", path.display()));
            }
        }
    }
    out
}

/// The shortest span a table's profile and its recurring peaks are read over: two weeks, so a
/// weekly peak is seen twice (`presplit_min_recurrences` = 2) before it is met ahead.
const PROFILE_HOURS: u32 = 14 * 24;

/// What a day's rows are folded against: the look-back's start (earlier rows only feed the
/// tables' profiles) and the tables.
#[derive(Debug, Clone, Copy)]
struct Window<'a> {
    from_ms: i64,
    /// A week before the pass: recurring peaks must have come since.
    week_from_ms: i64,
    /// Midnight (UTC) of the day folded: an hour of the day is an hour of it.
    day_ms: i64,
    tables: &'a Tables,
    /// `neighbours[c]`: partitions `c` and `c + 1` are neighbours in one table.
    neighbours: &'a [bool],
}

impl Window<'_> {
    /// The mask of the day's hours inside the look-back (earlier ones only feed the tables'
    /// profiles).
    fn lookback_hours(&self) -> u32 {
        Self::hours_from(self.day_ms, self.from_ms)
    }

    /// The mask of the day's hours in the last week.
    fn last_week_hours(&self) -> u32 {
        Self::hours_from(self.day_ms, self.week_from_ms)
    }

    fn hours_from(day_ms: i64, from_ms: i64) -> u32 {
        (0..24).filter(|&h| day_ms + h * HOUR_MS >= from_ms).fold(0, |m, h| m | 1 << h)
    }
}

const READ_COLUMNS: [&str; 11] = [
    "worker",
    "tenant",
    "table",
    "partition",
    "key_start",
    "key_end",
    "hour_start_ms",
    "read_ops",
    "write_ops",
    "rejected",
    "max_ops_per_sec",
];

/// (tenant, table) → index range into the key-ordered partitions.
fn table_index(parts: &[&LayoutPartition]) -> HashMap<(String, String), (usize, usize)> {
    let mut out: HashMap<(String, String), (usize, usize)> = HashMap::new();
    for (i, p) in parts.iter().enumerate() {
        out.entry((p.tenant.to_string(), p.table.to_string())).and_modify(|e| e.1 = i + 1).or_insert((i, i + 1));
    }
    out
}

/// The range id of a row whose table has no partition today (its history counts for nothing).
const NO_RANGE: u32 = u32::MAX;
/// The group key of a row that a group leaves out: every real key is far below it, and it is a
/// literal polars takes without its 128-bit integers (`u64::MAX` is not).
const NO_KEY: u64 = i64::MAX as u64;

/// A day's rows coded into one integer key per group-by of the report (polars groups on one
/// integer far faster than on several columns): `spread` = table id << 32 | worker id << 5 |
/// hour of the day, `worker` = worker id × 24 + hour of the day. The files are by UTC day, so a
/// day's hour of the day names its hour.
#[derive(Debug, Default)]
struct Keys {
    spread: Vec<u64>,
    worker: Vec<u64>,
}

impl Keys {
    fn push(&mut self, spread: u64, worker: u64) {
        self.spread.push(spread);
        self.worker.push(worker);
    }
}

/// A day's load per archived range and hour of the day, dense by range id: summed over the
/// workers that reported the range in the hour (a partition moved in the hour has rows on
/// both), `hours` the mask of hours it has rows in.
#[derive(Debug, Default)]
struct DayRanges {
    ops: Vec<[f64; 24]>,
    served_peak: Vec<[f64; 24]>,
    rejected: Vec<[f64; 24]>,
    hours: Vec<u32>,
}

impl DayRanges {
    fn add(&mut self, id: usize, hod: usize, ops: f64, served_peak: f64, rejected: f64) {
        if id >= self.hours.len() {
            let n = id + 1;
            self.ops.resize(n, [0.0; 24]);
            self.served_peak.resize(n, [0.0; 24]);
            self.rejected.resize(n, [0.0; 24]);
            self.hours.resize(n, 0);
        }
        self.ops[id][hod] += ops;
        self.served_peak[id][hod] += served_peak;
        self.rejected[id][hod] += rejected;
        self.hours[id] |= 1 << hod;
    }
}

/// A day per current partition and hour of the day (dense by partition index): `hours` the mask
/// of hours with history, `upper` the hour's peak (every archived range over the partition
/// counted whole), `est` its mean demand shared as the split that made it shared it, `ops` its
/// served ops shared so, `rejected` (upper), `wider` the mask of hours with a row of a range
/// strictly wider than the partition's (it was split since).
#[derive(Debug)]
struct DaySeries {
    hours: Vec<u32>,
    upper: Vec<[f64; 24]>,
    est: Vec<[f64; 24]>,
    ops: Vec<[f64; 24]>,
    rejected: Vec<[f64; 24]>,
    wider: Vec<u32>,
}

impl DaySeries {
    /// Lineage: each archived range's hours scattered over the current partitions it overlaps
    /// ([`RangeIndex`]'s mapping).
    fn of(ranges: &DayRanges, index: &RangeIndex<'_>, partitions: usize) -> Self {
        let mut out = DaySeries {
            hours: vec![0; partitions],
            upper: vec![[0.0; 24]; partitions],
            est: vec![[0.0; 24]; partitions],
            ops: vec![[0.0; 24]; partitions],
            rejected: vec![[0.0; 24]; partitions],
            wider: vec![0; partitions],
        };
        for (id, &hours) in ranges.hours.iter().enumerate().filter(|(_, h)| **h != 0) {
            for m in index.mapping(id) {
                let (c, share, wider) = (index.cur[m] as usize, index.share[m], index.wider[m]);
                out.hours[c] |= hours;
                if wider {
                    out.wider[c] |= hours;
                }
                for hod in hours_in(hours) {
                    let (ops, rejected) = (ranges.ops[id][hod], ranges.rejected[id][hod]);
                    let mean_demand = (ops + rejected) / 3600.0;
                    // The served peak stops at the limit; an hour that rejected shows its demand
                    // in its mean (served + rejected over the hour), which a peak cannot be under.
                    out.upper[c][hod] += ranges.served_peak[id][hod].max(mean_demand);
                    out.est[c][hod] += mean_demand * share;
                    out.ops[c][hod] += ops * share;
                    out.rejected[c][hod] += rejected;
                }
            }
        }
        out
    }
}

/// The hours of the day set in a 24-bit mask, earliest first.
pub(crate) fn hours_in(mask: u32) -> impl Iterator<Item = usize> {
    (0..24).filter(move |h| mask & (1 << h) != 0)
}

/// The hour of the day (UTC) of an epoch-ms hour.
fn hour_of_day(hour_ms: i64) -> u64 {
    hour_ms.div_euclid(HOUR_MS).rem_euclid(24) as u64
}

/// An archived (tenant, table, partition id, key range).
type RangeKey = (String, String, String, u64, u64);
/// A [`RangeKey`] as a row of a frame holds it.
type RangeRef<'a> = (&'a str, &'a str, &'a str, u64, u64);

/// The archived ranges of a pass, each with a small integer id, and what each id maps to today:
/// every current partition of its table that it overlaps, with the share of the archived load the
/// estimate gives it, and whether the archived range is strictly wider (a split ancestor).
///
/// The mapping depends on the range and today's layout only, so it is made once per range per
/// pass, the first time a day holds it; each day's load per range id flows through it
/// ([`DaySeries::of`]).
#[derive(Debug)]
struct RangeIndex<'a> {
    parts: &'a [&'a LayoutPartition],
    /// The table (index into [`Tables::names`]) of each current partition.
    table_of: &'a [usize],
    by_table: HashMap<(String, String), (usize, usize)>,
    ids: HashMap<RangeKey, u32>,
    next: u32,
    /// Per range id: its table and first key (the report's boundaries).
    range_table: Vec<u32>,
    range_start: Vec<u64>,
    /// Worker names ↔ small ids, as files name them.
    workers: HashMap<String, u32>,
    worker_names: Vec<String>,
    /// The mapping's rows (current partition, share, wider), a range id's consecutive from
    /// `map_from[id]` to the next id's start.
    map_from: Vec<usize>,
    cur: Vec<u32>,
    share: Vec<f64>,
    wider: Vec<bool>,
}

impl<'a> RangeIndex<'a> {
    fn new(parts: &'a [&'a LayoutPartition], table_of: &'a [usize]) -> Self {
        Self {
            parts,
            table_of,
            by_table: table_index(parts),
            ids: HashMap::new(),
            next: 0,
            range_table: Vec::new(),
            range_start: Vec::new(),
            workers: HashMap::new(),
            worker_names: Vec::new(),
            map_from: Vec::new(),
            cur: Vec::new(),
            share: Vec::new(),
            wider: Vec::new(),
        }
    }

    /// Codes every row of `frame` inside `[from_ms, to_ms)`: its range id (found or made;
    /// [`NO_RANGE`] for a null key or a table without partitions today), whose load it adds to
    /// the day's [`DayRanges`], and the report's group [`Keys`] ([`NO_KEY`] outside the window,
    /// and for the spread of a row of no range). A file's rows come grouped by partition, so a
    /// row with the key of the row before it is not looked up again.
    fn code_day(&mut self, frame: &DataFrame, from_ms: i64, to_ms: i64) -> PolarsResult<(Keys, DayRanges)> {
        let wids = self.code_workers(frame)?;
        let tenant = frame.column("tenant")?.str()?;
        let table = frame.column("table")?.str()?;
        let partition = frame.column("partition")?.str()?;
        let start = frame.column("key_start")?.u64()?;
        let end = frame.column("key_end")?.u64()?;
        let hour = frame.column("hour_start_ms")?.i64()?;
        let (reads, writes) = (frame.column("read_ops")?.u64()?, frame.column("write_ops")?.u64()?);
        let (rejected, served) = (frame.column("rejected")?.u64()?, frame.column("max_ops_per_sec")?.f64()?);
        let n = frame.height();
        let mut keys = Keys { spread: Vec::with_capacity(n), worker: Vec::with_capacity(n) };
        let mut day = DayRanges::default();
        let mut last: Option<(RangeRef<'_>, u32)> = None;
        let rows = tenant.iter().zip(table.iter()).zip(partition.iter()).zip(start.iter()).zip(end.iter());
        let loads = reads.iter().zip(writes.iter()).zip(rejected.iter()).zip(served.iter());
        for (((((((tn, tb), pid), s), e), h), &w), (((r, wr), rej), sp)) in rows.zip(hour.iter()).zip(&wids).zip(loads)
        {
            let Some(h) = h.filter(|&h| from_ms <= h && h < to_ms) else {
                keys.push(NO_KEY, NO_KEY);
                continue;
            };
            let hod = hour_of_day(h);
            let worker = u64::from(w) * 24 + hod;
            let (Some(tn), Some(tb), Some(pid), Some(s), Some(e)) = (tn, tb, pid, s, e) else {
                keys.push(NO_KEY, worker);
                continue;
            };
            let key = (tn, tb, pid, s, e);
            let id = match last {
                Some((k, id)) if k == key => id,
                _ => self.id(key),
            };
            last = Some((key, id));
            if id == NO_RANGE {
                keys.push(NO_KEY, worker);
                continue;
            }
            let ops = (r.unwrap_or(0) + wr.unwrap_or(0)) as f64;
            day.add(id as usize, hod as usize, ops, sp.unwrap_or(0.0), rej.unwrap_or(0) as f64);
            let tid = u64::from(self.range_table[id as usize]);
            keys.push(tid << 32 | u64::from(w) << 5 | hod, worker);
        }
        Ok((keys, day))
    }

    fn id(&mut self, (tn, tb, pid, s, e): RangeRef<'_>) -> u32 {
        let key: RangeKey = (tn.to_owned(), tb.to_owned(), pid.to_owned(), s, e);
        if let Some(&id) = self.ids.get(&key) {
            return id;
        }
        let Some(&(lo, hi)) = self.by_table.get(&(key.0.clone(), key.1.clone())) else {
            self.ids.insert(key, NO_RANGE);
            return NO_RANGE;
        };
        let id = self.next;
        self.next += 1;
        self.ids.insert(key, id);
        self.range_table.push(self.table_of[lo] as u32);
        self.range_start.push(s);
        self.map_from.push(self.cur.len());
        let parts = self.parts;
        // Partitions of the table are in key order: the first one that ends at or after `s`.
        let first = lo + parts[lo..hi].partition_point(|p| p.range.end.0 < s);
        let overlapping: Vec<usize> = (first..hi).take_while(|&j| parts[j].range.start.0 <= e).collect();
        let width = |a: u64, b: u64| (b - a) as f64 + 1.0;
        let load: f64 = overlapping.iter().map(|&j| parts[j].ops_per_sec.max(0.0)).sum();
        for &j in &overlapping {
            let p = parts[j];
            let (a, b) = (p.range.start.0.max(s), p.range.end.0.min(e));
            let inside = p.range.start.0 >= s && p.range.end.0 <= e;
            // Inside the archived range (a split child): by current load; otherwise by width.
            let sh = if inside && overlapping.len() > 1 && load > 0.0 {
                p.ops_per_sec.max(0.0) / load
            } else {
                width(a, b) / width(s, e)
            };
            self.cur.push(j as u32);
            self.share.push(sh);
            self.wider.push(inside && (s, e) != (p.range.start.0, p.range.end.0));
        }
        id
    }

    /// The worker id of every row (the `worker` column coded).
    fn code_workers(&mut self, frame: &DataFrame) -> PolarsResult<Vec<u32>> {
        let worker = frame.column("worker")?.str()?;
        let mut out = Vec::with_capacity(frame.height());
        let mut last: Option<(&str, u32)> = None;
        for w in worker.iter() {
            let w = w.unwrap_or_default();
            let id = match last {
                Some((name, id)) if name == w => id,
                _ => match self.workers.get(w) {
                    Some(&id) => id,
                    None => {
                        let id = self.worker_names.len() as u32;
                        self.workers.insert(w.to_owned(), id);
                        self.worker_names.push(w.to_owned());
                        id
                    }
                },
            };
            last = Some((w, id));
            out.push(id);
        }
        Ok(out)
    }

    /// The mapping rows of range `id`.
    fn mapping(&self, id: usize) -> std::ops::Range<usize> {
        self.map_from[id]..self.map_from.get(id + 1).copied().unwrap_or(self.cur.len())
    }
}

/// One day: its load per archived range and hour ([`DayRanges`], for the analyses), and for the
/// report the ops per table, worker and hour (`spread`: `sk`, `ops`) and per worker and hour
/// (`workers`: `wk`, `ops`), grouped by polars (row order arbitrary).
#[derive(Debug)]
struct DayFrames {
    ranges: DayRanges,
    spread: DataFrame,
    workers: DataFrame,
}

fn day_frames(frame: DataFrame, index: &mut RangeIndex<'_>, from_ms: i64, to_ms: i64) -> PolarsResult<DayFrames> {
    let (keys, ranges) = index.code_day(&frame, from_ms, to_ms)?;
    let mut columns = vec![Column::new("sk".into(), keys.spread), Column::new("wk".into(), keys.worker)];
    for name in ["read_ops", "write_ops"] {
        columns.push(frame.column(name)?.clone());
    }
    let rows = DataFrame::new(frame.height(), columns)?;
    drop(frame);
    let ops = || (col("read_ops") + col("write_ops")).sum().cast(DataType::Float64).alias("ops");
    let by = |key: &str| rows.clone().lazy().filter(col(key).neq(lit(NO_KEY))).group_by([col(key)]).agg([ops()]);
    Ok(DayFrames { ranges, spread: by("sk").collect()?, workers: by("wk").collect()? })
}

/// Folds one day's series into the look-back's accumulators. A day is UTC, so an hour's slot
/// in the day is its hour of the day; the day's values sit in dense `[_; 24]` rows per
/// partition (a 100k-partition day is 2.4 M slots: no hashing per row).
fn fold_day(
    day: &DaySeries,
    parts: &[&LayoutPartition],
    window: Window<'_>,
    config: &OfflineConfig,
    folds: &mut Folds,
) {
    let Folds { acc, pairs, table_hod, hours_seen } = folds;
    let tables = window.tables;
    let look = window.lookback_hours();
    let mut table_hours = vec![0u32; tables.names.len()];
    let mut day_hours = 0u32;
    for (c, &hours) in day.hours.iter().enumerate().filter(|(_, h)| **h != 0) {
        let t = tables.of[c];
        for hod in hours_in(hours) {
            table_hod[t][hod].0 += day.ops[c][hod] / 3600.0;
        }
        table_hours[t] |= hours;
        let inside = hours & look;
        day_hours |= inside;
        let a = &mut acc[c];
        a.hours += inside.count_ones();
        for hod in hours_in(inside) {
            a.hod_days[hod] += 1;
            a.rejected += day.rejected[c][hod];
            a.upper_max = a.upper_max.max(day.upper[c][hod]);
        }
        let wider = day.wider[c] & look;
        if wider != 0 {
            let h = window.day_ms + i64::from(31 - wider.leading_zeros()) * HOUR_MS;
            a.last_parent_hour = Some(a.last_parent_hour.map_or(h, |f| f.max(h)));
        }
    }
    for (t, &hours) in table_hours.iter().enumerate() {
        for hod in hours_in(hours) {
            table_hod[t][hod].1 += 1;
        }
    }
    for hod in hours_in(day_hours) {
        hours_seen.insert(window.day_ms + hod as i64 * HOUR_MS);
    }
    // Neighbours: the sum of the two upper peaks, hour by hour.
    for (c, pa) in pairs.iter_mut().enumerate().take(parts.len().saturating_sub(1)) {
        if !window.neighbours[c] {
            continue;
        }
        let both = day.hours[c] & day.hours[c + 1] & look;
        for hod in hours_in(both) {
            pa.combined_max = pa.combined_max.max(day.upper[c][hod] + day.upper[c + 1][hod]);
            pa.hours += 1;
        }
    }
    // Recurring peaks are counted over the profile's span (two weeks at least), not the merge
    // look-back: a merge judged on a short look-back must not make yesterday's peak forgotten.
    let (dow, last_week) = (weekday(window.day_ms), window.last_week_hours());
    for (c, p) in parts.iter().enumerate() {
        let Some(limit) = p.limit_ops_per_sec else { continue };
        for hod in hours_in(day.hours[c]) {
            let a = &mut acc[c];
            let peak = day.est[c][hod];
            if peak > config.presplit_ratio * limit {
                a.over_days[hod] += 1;
                a.over_sum[hod] += peak;
                a.over_dow[hod][dow] = a.over_dow[hod][dow].saturating_add(1);
                if last_week & (1 << hod) != 0 {
                    a.over_week[hod] += 1;
                }
            }
            // A weekday counts as seen at this hour from the hour's first peak on (days fold
            // oldest first): quiet weeks before a peak began say nothing of its pattern.
            if a.over_days[hod] > 0 {
                a.seen_dow[hod][dow] = a.seen_dow[hod][dow].saturating_add(1);
            }
        }
    }
}

/// The look-back's accumulators: per partition, per neighbour pair (indexed by the left one),
/// per table and hour of the day (load sum, hours seen), and the hours with data.
#[derive(Debug)]
struct Folds {
    acc: Vec<Acc>,
    pairs: Vec<PairAcc>,
    table_hod: Vec<[(f64, u32); 24]>,
    hours_seen: std::collections::BTreeSet<i64>,
}

/// The tables of the key-ordered partitions: `of[c]` indexes `names`; `tenant_of[t]` indexes
/// `tenants`.
#[derive(Debug, Default)]
struct Tables {
    names: Vec<(TenantId, TableId)>,
    of: Vec<usize>,
    tenants: Vec<TenantId>,
    tenant_of: Vec<u32>,
}

impl Tables {
    fn of(parts: &[&LayoutPartition]) -> Self {
        let mut t = Tables::default();
        for p in parts {
            let key = (p.tenant.clone(), p.table.clone());
            if t.names.last() != Some(&key) {
                t.names.push(key);
                // Partitions are sorted by tenant first: a tenant's tables are consecutive.
                if t.tenants.last() != Some(&p.tenant) {
                    t.tenants.push(p.tenant.clone());
                }
                t.tenant_of.push(t.tenants.len() as u32 - 1);
            }
            t.of.push(t.names.len() - 1);
        }
        t
    }
}

fn same_table(a: &LayoutPartition, b: &LayoutPartition) -> bool {
    a.tenant == b.tenant && a.table == b.table && a.range.is_left_neighbour_of(&b.range)
}

fn profiles(tables: &Tables, table_hod: &[[(f64, u32); 24]], config: &OfflineConfig) -> Vec<TableProfile> {
    let mut out: Vec<TableProfile> = tables
        .names
        .iter()
        .zip(table_hod)
        .filter(|(_, slots)| slots.iter().any(|&(_, n)| n > 0))
        .map(|((tenant, table), slots)| {
            let means: Vec<Option<f64>> =
                slots.iter().map(|&(sum, n)| if n > 0 { Some(sum / f64::from(n)) } else { None }).collect();
            let covered = means.iter().filter(|m| m.is_some()).count();
            let (peak_hod, peak) = means
                .iter()
                .enumerate()
                .filter_map(|(i, m)| m.map(|m| (i, m)))
                .fold((0, f64::MIN), |best, (i, m)| if m > best.1 { (i, m) } else { best });
            let trough = means.iter().flatten().copied().fold(f64::MAX, f64::min);
            let ratio = if covered == 0 { 1.0 } else { peak.max(0.0) / trough.max(1e-9).max(peak * 1e-6) };
            TableProfile {
                tenant: tenant.clone(),
                table: table.clone(),
                // A day's swing is seen only with every hour of the day seen.
                periodic: covered == 24 && ratio >= config.periodic_ratio,
                peak_hour_of_day: peak_hod as u32,
                peak_over_trough: ratio,
            }
        })
        .collect();
    out.sort_by(|a, b| (&a.tenant, &a.table).cmp(&(&b.tenant, &b.table)));
    out
}

#[allow(clippy::too_many_arguments)]
fn merges(
    parts: &[&LayoutPartition],
    acc: &[Acc],
    pairs: &[PairAcc],
    layout: &Layout,
    config: &OfflineConfig,
    coverage: &Coverage,
    now_ms: i64,
    findings: &mut Findings,
) {
    let needed_hours = if config.allow_partial_lookback {
        config.min_history_hours.min(config.lookback_hours)
    } else {
        config.lookback_hours
    };
    let min_age_ms = (config.merge_min_age_secs * 1000) as i64;
    let periodic: HashMap<(TenantId, TableId), TableProfile> =
        findings.tables.iter().map(|t| ((t.tenant.clone(), t.table.clone()), t.clone())).collect();
    let mut eligible = Vec::new();
    for c in 0..parts.len().saturating_sub(1) {
        let (l, r) = (parts[c], parts[c + 1]);
        if !same_table(l, r) {
            continue;
        }
        let name = format!("{}+{}", l.id, r.id);
        if !(l.can_merge && r.can_merge) {
            continue;
        }
        if l.busy || r.busy {
            decline(name, "busy: an action in flight or a cooldown".to_owned(), findings);
            continue;
        }
        let young = |p: &LayoutPartition, a: &Acc| {
            let archived = a.last_parent_hour.map(|h| h + HOUR_MS);
            p.split_at_ms.into_iter().chain(archived).any(|t| now_ms - t < min_age_ms)
        };
        if young(l, &acc[c]) || young(r, &acc[c + 1]) {
            decline(name, format!("split less than {} h ago", config.merge_min_age_secs / 3600), findings);
            continue;
        }
        if !coverage.partial.is_empty() && !config.allow_partial_lookback {
            decline(name, format!("partial look-back: {}", coverage.partial.join("; ")), findings);
            continue;
        }
        let pa = pairs[c];
        if pa.hours < needed_hours {
            decline(name, format!("{} hours of history, {} needed", pa.hours, needed_hours), findings);
            continue;
        }
        let (Some(ll), Some(rl)) = (l.limit_ops_per_sec, r.limit_ops_per_sec) else {
            decline(name, "no partition limit to judge against".to_owned(), findings);
            continue;
        };
        let limit = ll.min(rl);
        if acc[c].rejected > 0.0 || acc[c + 1].rejected > 0.0 {
            decline(name, "rejected requests in the look-back".to_owned(), findings);
            continue;
        }
        let profile = periodic.get(&(l.tenant.clone(), l.table.clone()));
        let is_periodic = profile.is_some_and(|p| p.periodic);
        if let Some(p) = profile.filter(|p| p.periodic) {
            let hod = p.peak_hour_of_day as usize;
            let seen = acc[c].hod_days[hod].min(acc[c + 1].hod_days[hod]);
            if seen < config.periodic_min_peaks {
                decline(
                    name,
                    format!(
                        "periodic table (peak at {hod:02}:00, {:.1}x its trough): its peak hour is in the look-back on {seen} days, {} needed",
                        p.peak_over_trough, config.periodic_min_peaks
                    ),
                    findings,
                );
                continue;
            }
        }
        let ratio = pa.combined_max / limit;
        if ratio >= config.merge_max_ratio {
            decline(
                name,
                format!(
                    "combined hourly peak {:.0} ops/s is {ratio:.2} of the limit {limit:.0} (merge under {:.2}){}",
                    pa.combined_max,
                    config.merge_max_ratio,
                    if is_periodic { ", judged on its peak hours" } else { "" }
                ),
                findings,
            );
            continue;
        }
        eligible.push((c, ratio, limit, is_periodic));
    }
    let eligible = packed(eligible, parts, acc, pairs, config, findings);
    let load_ratio = |w: &WorkerId| {
        layout.workers.iter().find(|x| &x.id == w).map_or(f64::MAX, |x| {
            if x.capacity_ops_per_sec > 0.0 { x.ops_per_sec / x.capacity_ops_per_sec } else { f64::MAX }
        })
    };
    let mut taken = vec![false; parts.len()];
    let mut per_table: HashMap<(&TenantId, &TableId), u32> = HashMap::new();
    for (c, ratio, limit, is_periodic) in eligible {
        let (l, r) = (parts[c], parts[c + 1]);
        let name = format!("{}+{}", l.id, r.id);
        if taken[c] || taken[c + 1] {
            continue;
        }
        if findings.merges.len() as u32 >= config.max_merges_per_pass {
            decline(name, format!("cap: {} merges per pass", config.max_merges_per_pass), findings);
            continue;
        }
        let n = per_table.entry((&l.tenant, &l.table)).or_default();
        if *n >= config.max_merges_per_table {
            decline(name, format!("cap: {} merges per table per pass", config.max_merges_per_table), findings);
            continue;
        }
        *n += 1;
        taken[c] = true;
        taken[c + 1] = true;
        let to_worker = if load_ratio(&r.owner) < load_ratio(&l.owner) { r.owner.clone() } else { l.owner.clone() };
        let pa = pairs[c];
        findings.merges.push(MergeCandidate {
            tenant: l.tenant.clone(),
            table: l.table.clone(),
            left: l.id.clone(),
            right: r.id.clone(),
            combined_peak_ops_per_sec: pa.combined_max,
            limit_ops_per_sec: limit,
            hours_judged: pa.hours,
            periodic: is_periodic,
            to_worker: to_worker.clone(),
            reason: format!(
                "cold neighbours: their combined hourly peak over {} h was {:.0} ops/s, {ratio:.2} of the limit {limit:.0} (merge under {:.2}){}; the cooler of the two workers is {to_worker}",
                pa.hours,
                pa.combined_max,
                config.merge_max_ratio,
                if is_periodic { ", its daily peaks included" } else { "" }
            ),
        });
    }
}

/// Records a declined pair: counted always, kept among the first [`MAX_DECLINED`].
fn decline(pair: String, why: String, findings: &mut Findings) {
    findings.declined_total += 1;
    if findings.declined.len() < MAX_DECLINED {
        findings.declined.push(OfflineDeclined { pair, reason: why });
    }
}

/// The eligible merges `(left index, ratio, limit, periodic)` of this pass, coolest first, that
/// pack each run of mergeable neighbours into as few partitions as the merge ratio allows.
///
/// Runs are read left to right: a pair that may merge starts a run, and the run takes in its
/// next neighbour while the sum of the members' hourly peaks stays under `merge_max_ratio` ×
/// the limit (the sum bounds the merged partition's peak). Within a run, disjoint pairs merge
/// now and the results merge at the next passes, so the run ends as one partition. Merging every
/// disjoint pair at once instead stalls: a surge's three equal pieces per partition become
/// pairs of two thirds, and no two of those fit under the ratio (measured: 48 pieces of 16
/// partitions came back to 24, not 16, and stayed there).
fn packed(
    eligible: Vec<(usize, f64, f64, bool)>,
    parts: &[&LayoutPartition],
    acc: &[Acc],
    pairs: &[PairAcc],
    config: &OfflineConfig,
    findings: &mut Findings,
) -> Vec<(usize, f64, f64, bool)> {
    let by_left: HashMap<usize, (f64, f64, bool)> = eligible.iter().map(|&(c, r, l, p)| (c, (r, l, p))).collect();
    let mut out = Vec::new();
    let mut c = 0;
    while c < parts.len() {
        let Some(&(_, mut limit, _)) = by_left.get(&c) else {
            c += 1;
            continue;
        };
        // The run [c, end]: the pair itself, then neighbours while the sum of peaks fits under
        // the smallest limit of the run.
        let (mut end, mut sum) = (c + 1, pairs[c].combined_max);
        while let Some(&(_, next_limit, _)) = by_left.get(&end) {
            let l = limit.min(next_limit);
            if sum + acc[end + 1].upper_max >= config.merge_max_ratio * l {
                break;
            }
            (sum, limit, end) = (sum + acc[end + 1].upper_max, l, end + 1);
        }
        for left in (c..end).step_by(2) {
            let (r, l, p) = by_left[&left];
            out.push((left, r, l, p));
        }
        let pair = |left: usize| format!("{}+{}", parts[left].id, parts[left + 1].id);
        let members = end - c + 1;
        // Pairs inside the run that straddle two of this pass's merges wait for the next pass.
        for left in (c + 1..end).step_by(2) {
            let why = format!(
                "waits for the next pass: its run of {members} neighbours merges pair by pair into one partition"
            );
            decline(pair(left), why, findings);
        }
        // The pair across the run's end may merge on its own, but it would join two runs whose
        // peaks sum over the ratio.
        if by_left.contains_key(&end) {
            let why = format!(
                "ends a run of {members} neighbours whose hourly peaks sum to {sum:.0} ops/s: one more would pass {:.2} of the limit",
                config.merge_max_ratio
            );
            decline(pair(end), why, findings);
        }
        c = end + 1;
    }
    out.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    out
}

/// The weekday of `ms` (UTC), Monday 0. 1970-01-01 was a Thursday.
fn weekday(ms: i64) -> usize {
    (ms.div_euclid(DAY_MS) + 3).rem_euclid(7) as usize
}

/// Whether hour of the day `hod` on weekday `dow` is a recurring peak of `a`, and how. Only an
/// hour that went over the threshold in the last week recurs (a peak that stopped is not
/// forecast). Then:
/// - **weekly**: over it at this hour on this weekday in at least `min` weeks;
/// - **daily**: over it at this hour on at least `min` days of the last week, of more than one
///   weekday (with `min` = 1, one day is enough), unless this weekday was seen quiet at this
///   hour in `min` weeks since the hour's first peak (a weekday-only peak is not forecast for
///   the weekend).
///
/// A peak that came on one weekday only is not daily: with two Mondays in the span it would
/// otherwise be split ahead of every day at that hour, in vain six days of seven.
fn recurring(a: &Acc, hod: usize, dow: usize, min: u32) -> Option<(PeakPattern, u32)> {
    let min = min.max(1);
    if a.over_week[hod] == 0 {
        return None;
    }
    let weekdays = a.over_dow[hod].iter().filter(|&&n| n > 0).count() as u32;
    if u32::from(a.over_dow[hod][dow]) >= min {
        let pattern = if weekdays > 1 { PeakPattern::Daily } else { PeakPattern::Weekly };
        return Some((pattern, a.over_days[hod]));
    }
    let quiet_here = u32::from(a.seen_dow[hod][dow] - a.over_dow[hod][dow]);
    (a.over_week[hod] >= min && weekdays >= min.min(2) && quiet_here < min)
        .then_some((PeakPattern::Daily, a.over_week[hod]))
}

fn peaks(parts: &[&LayoutPartition], acc: &[Acc], config: &OfflineConfig, now_ms: i64) -> Vec<PeakForecast> {
    let lead_ms = (config.lead_time_secs * 1000) as i64;
    // The horizon's hour starts from the first whose act time is not past: (start, hour of the
    // day, weekday).
    let first = (now_ms + lead_ms).div_euclid(HOUR_MS) * HOUR_MS + HOUR_MS;
    let first = if first - lead_ms - HOUR_MS >= now_ms { first - HOUR_MS } else { first };
    let horizon: Vec<(i64, usize, usize)> = (0..i64::from(config.presplit_horizon_hours))
        .map(|k| first + k * HOUR_MS)
        .map(|at| (at, at.div_euclid(HOUR_MS).rem_euclid(24) as usize, weekday(at)))
        .collect();
    let mut out = Vec::new();
    for (c, p) in parts.iter().enumerate() {
        let (Some(limit), true) = (p.limit_ops_per_sec, p.can_split) else { continue };
        let a = &acc[c];
        let next = horizon.iter().find_map(|&(peak_at, hod, dow)| {
            recurring(a, hod, dow, config.presplit_min_recurrences).map(|r| (peak_at, hod, r))
        });
        let Some((peak_at, hod, (pattern, recurrences))) = next else { continue };
        let predicted = a.over_sum[hod] / f64::from(a.over_days[hod]);
        let pieces = (predicted / (config.presplit_target_ratio * limit)).ceil().max(2.0) as u32;
        out.push(PeakForecast {
            tenant: p.tenant.clone(),
            table: p.table.clone(),
            partition: p.id.clone(),
            range: p.range,
            peak_at_ms: peak_at,
            act_at_ms: peak_at - lead_ms,
            predicted_peak_ops_per_sec: predicted,
            limit_ops_per_sec: limit,
            recurrences,
            pieces,
            pattern,
        });
    }
    out
}
