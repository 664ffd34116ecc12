//! The archive's exactly-once and bad-file handling, and the analyses' rules, on real files.

use lb_common::ids::{Key, KeyRange, PartitionId};
use lb_common::protocol::{HourlyRollup, PeakPattern};

use crate::analysis::{Layout, LayoutPartition, LayoutWorker, OfflineConfig, analyze};
use crate::archive::{Archive, DAY_MS, HOUR_MS, day_of};

/// 2026-11-02 00:00 UTC, a Monday.
const T0: i64 = 1_793_577_600_000;
const LIMIT: f64 = 10_000.0;

fn pid(s: &str) -> PartitionId {
    s.parse().expect("valid id")
}

fn range(a: u64, b: u64) -> KeyRange {
    KeyRange { start: Key(a), end: Key(b) }
}

fn rollup(partition: &str, r: KeyRange, hour_start_ms: i64, peak: f64) -> HourlyRollup {
    HourlyRollup {
        hour_start_ms,
        tenant: "acme".parse().expect("valid"),
        table: "orders".parse().expect("valid"),
        partition_id: pid(partition),
        key_range: r,
        sample_count: 360,
        read_ops: (peak * 3600.0) as u64,
        write_ops: 0,
        read_bytes: 0,
        write_bytes: 0,
        errors: 0,
        rejected: 0,
        cpu_time_us: 0,
        max_ops_per_sec: peak,
        max_latency_p99_us: 900.0,
        stored_bytes: 1 << 20,
    }
}

fn part(id: &str, r: KeyRange, owner: &str) -> LayoutPartition {
    LayoutPartition {
        id: pid(id),
        tenant: "acme".parse().expect("valid"),
        table: "orders".parse().expect("valid"),
        range: r,
        owner: owner.parse().expect("valid"),
        limit_ops_per_sec: Some(LIMIT),
        can_merge: true,
        can_split: true,
        split_at_ms: None,
        busy: false,
        ops_per_sec: 100.0,
    }
}

fn worker(id: &str, ops: f64) -> LayoutWorker {
    LayoutWorker { id: id.parse().expect("valid"), capacity_ops_per_sec: 100_000.0, ops_per_sec: ops }
}

const A: KeyRange = KeyRange { start: Key(0), end: Key(999) };
const B: KeyRange = KeyRange { start: Key(1000), end: Key(1999) };

fn two_neighbours() -> Layout {
    Layout {
        partitions: vec![part("a", A, "w1"), part("b", B, "w2")],
        workers: vec![worker("w1", 50_000.0), worker("w2", 20_000.0)],
    }
}

/// `hours` of hourly rows from T0 for a and b (a on w1, b on w2), each at `peak(hour_of_day)`.
fn fill(archive: &Archive, hours: i64, peak: impl Fn(i64) -> f64) {
    for (p, r, w) in [("a", A, "w1"), ("b", B, "w2")] {
        let rows: Vec<_> = (0..hours).map(|h| rollup(p, r, T0 + h * HOUR_MS, peak(h % 24))).collect();
        archive.append(w, &rows).expect("written");
    }
}

fn tmp() -> (tempfile::TempDir, Archive) {
    let dir = tempfile::tempdir().expect("tempdir");
    let archive = Archive::new(dir.path().join("archive"));
    (dir, archive)
}

#[test]
fn rows_are_archived_once_per_worker_partition_and_hour_across_refetches_and_late_rollups() {
    let (_dir, archive) = tmp();
    let rows: Vec<_> = (0..30).map(|h| rollup("a", A, T0 + h * HOUR_MS, 100.0)).collect();
    let first = archive.append("w1", &rows).expect("written");
    assert_eq!((first.new_rows, first.replaced_rows, first.files), (30, 0, 2), "30 hours over two days");
    // A restarted master fetches the last hours again; a late, more complete copy of hour 3
    // replaces the earlier one.
    let mut again = rows[20..].to_vec();
    let mut late = rollup("a", A, T0 + 3 * HOUR_MS, 700.0);
    late.sample_count = 720;
    again.push(late);
    let second = archive.append("w1", &again).expect("written");
    assert_eq!((second.new_rows, second.replaced_rows), (0, 11));
    let day = archive.read_day(day_of(T0), None);
    let df = day.frame.expect("a day file");
    assert_eq!(df.height(), 24, "one row per hour of the first day");
    let back = crate::archive::rows_of(&df).expect("rows");
    let hour3 = back.iter().find(|r| r.rollup.hour_start_ms == T0 + 3 * HOUR_MS).expect("hour 3");
    assert_eq!((hour3.rollup.max_ops_per_sec, hour3.rollup.sample_count), (700.0, 720));
    assert_eq!(hour3.worker, "w1");
    // The same partition on another worker in the same hour is its own row.
    archive.append("w2", &rows[..1]).expect("written");
    assert_eq!(archive.read_day(day_of(T0), None).frame.expect("frame").height(), 25);
}

#[test]
fn the_layout_is_hive_style_by_day_and_retention_drops_old_days() {
    let (_dir, archive) = tmp();
    let rows: Vec<_> = (0..40).map(|d| rollup("a", A, T0 + d * DAY_MS, 1.0)).collect();
    archive.append("w1", &rows).expect("written");
    assert!(archive.root().join("date=2026-11-02/w1.parquet").is_file());
    assert_eq!(archive.days().len(), 40);
    let removed = archive.prune(35, T0 + 39 * DAY_MS).expect("pruned");
    assert_eq!(removed, 4, "days 0..=3 are older than 35 days before day 39");
    assert_eq!(archive.days().first().copied(), Some(day_of(T0 + 4 * DAY_MS)));
    assert_eq!(archive.last_hour("w1", T0 + 39 * DAY_MS), Some(T0 + 39 * DAY_MS));
}

#[test]
fn a_corrupt_file_is_skipped_and_reported_then_moved_aside_when_rewritten() {
    let (_dir, archive) = tmp();
    fill(&archive, 8 * 24, |_| 500.0);
    let bad = archive.day_dir(T0 + 2 * DAY_MS).join("w1.parquet");
    std::fs::write(&bad, b"PAR1 this is not parquet").expect("overwrite");
    let now = T0 + 8 * DAY_MS;
    let found = analyze(&archive, &two_neighbours(), &OfflineConfig::default(), now, &[]).expect("pass");
    assert_eq!(found.coverage.files_skipped.len(), 1, "{:?}", found.coverage);
    assert!(found.coverage.partial.iter().any(|p| p.contains("could not be read")), "{:?}", found.coverage.partial);
    assert!(found.merges.is_empty(), "nothing is proposed from a partial look-back");
    assert!(found.declined.iter().any(|d| d.reason.starts_with("partial look-back")), "{:?}", found.declined);
    // Allowed to use a partial look-back, the same pass merges (7 of 8 days still read).
    let partial = OfflineConfig { allow_partial_lookback: true, ..OfflineConfig::default() };
    let found = analyze(&archive, &two_neighbours(), &partial, now, &[]).expect("pass");
    assert_eq!(found.merges.len(), 1, "{:?}", found.declined);
    // Rewriting that day moves the bad file aside instead of losing it.
    let done = archive.append("w1", &[rollup("a", A, T0 + 2 * DAY_MS, 1.0)]).expect("written");
    assert_eq!(done.corrupt_moved, 1);
    let names: Vec<String> = std::fs::read_dir(archive.day_dir(T0 + 2 * DAY_MS))
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().any(|n| n.starts_with("w1.parquet.corrupt-")), "{names:?}");
}

#[test]
fn cold_neighbours_are_merged_onto_the_cooler_worker() {
    let (_dir, archive) = tmp();
    fill(&archive, 7 * 24, |_| 1000.0);
    let found = analyze(&archive, &two_neighbours(), &OfflineConfig::default(), T0 + 7 * DAY_MS, &[]).expect("pass");
    assert_eq!(found.coverage.hours_with_data, 168);
    assert!(found.coverage.partial.is_empty(), "{:?}", found.coverage.partial);
    let [m] = found.merges.as_slice() else { panic!("one merge expected: {found:?}") };
    assert_eq!((m.left.as_str(), m.right.as_str()), ("a", "b"));
    assert_eq!(m.combined_peak_ops_per_sec, 2000.0);
    assert_eq!(m.to_worker.as_str(), "w2", "w2 carries 20% against w1's 50%");
    assert!(!m.periodic);
}

#[test]
fn a_periodic_table_is_not_merged_in_its_trough() {
    let (_dir, archive) = tmp();
    // Quiet (500 ops/s each, 0.1 of the limit combined) except a daily peak at 12:00 (2,500
    // each: 0.5 combined). The pass runs at 03:00, deep in the trough.
    fill(&archive, 7 * 24 + 3, |hod| if hod == 12 { 2500.0 } else { 500.0 });
    let now = T0 + 7 * DAY_MS + 3 * HOUR_MS;
    let found = analyze(&archive, &two_neighbours(), &OfflineConfig::default(), now, &[]).expect("pass");
    let table = &found.tables[0];
    assert!(table.periodic && table.peak_hour_of_day == 12, "{table:?}");
    assert!(found.merges.is_empty(), "{found:?}");
    let why = &found.declined[0].reason;
    assert!(why.contains("0.50 of the limit") && why.contains("peak hours"), "{why}");

    // With only the trough hours of the last day in reach (a look-back of 14 h ending at
    // 03:00), the table still cannot be merged: its peak hour is not in the look-back twice.
    let short = OfflineConfig { lookback_hours: 14, min_history_hours: 14, ..OfflineConfig::default() };
    let found = analyze(&archive, &two_neighbours(), &short, now, &[]).expect("pass");
    assert!(found.merges.is_empty(), "{found:?}");
    // The same table without its peaks merges: the rule is the peak, not the periodicity.
    let (_dir2, flat) = tmp();
    fill(&flat, 7 * 24 + 3, |_| 500.0);
    let found = analyze(&flat, &two_neighbours(), &OfflineConfig::default(), now, &[]).expect("pass");
    assert_eq!(found.merges.len(), 1, "{:?}", found.declined);
}

#[test]
fn nothing_split_in_the_last_24_hours_is_merged() {
    let (_dir, archive) = tmp();
    // Seven days of a parent p over [0, 1999], cold; then it was split into a and b 10 hours
    // before the pass (their own rows since).
    let p = range(0, 1999);
    let split_at = T0 + 7 * DAY_MS - 10 * HOUR_MS;
    let parent: Vec<_> = (0..7 * 24 - 10).map(|h| rollup("a", p, T0 + h * HOUR_MS, 800.0)).collect::<Vec<_>>();
    archive.append("w1", &parent).expect("written");
    for (id, r, w) in [("a", A, "w1"), ("b", B, "w2")] {
        let rows: Vec<_> = (0..10).map(|h| rollup(id, r, split_at + h * HOUR_MS, 300.0)).collect::<Vec<_>>();
        archive.append(w, &rows).expect("written");
    }
    let now = T0 + 7 * DAY_MS;
    // The master knows nothing of the split (it restarted): the archive's lineage tells.
    let found = analyze(&archive, &two_neighbours(), &OfflineConfig::default(), now, &[]).expect("pass");
    assert!(found.merges.is_empty(), "{found:?}");
    assert!(found.declined[0].reason.starts_with("split less than 24 h ago"), "{:?}", found.declined);
    // The parent's history counts for both children (lineage by key range): a day later the
    // same pair is merged, judged on the parent's peaks as an upper bound (800 for each side).
    let later = now + DAY_MS;
    for (id, r, w) in [("a", A, "w1"), ("b", B, "w2")] {
        let rows: Vec<_> = (10..34).map(|h| rollup(id, r, split_at + h * HOUR_MS, 300.0)).collect::<Vec<_>>();
        archive.append(w, &rows).expect("written");
    }
    let found = analyze(&archive, &two_neighbours(), &OfflineConfig::default(), later, &[]).expect("pass");
    let [m] = found.merges.as_slice() else { panic!("{found:?}") };
    assert_eq!(m.combined_peak_ops_per_sec, 1600.0);
    // And the master's own memory of a split counts as much as the archive's.
    let mut layout = two_neighbours();
    layout.partitions[1].split_at_ms = Some(later - 3_600_000);
    let found = analyze(&archive, &layout, &OfflineConfig::default(), later, &[]).expect("pass");
    assert!(found.merges.is_empty());
}

#[test]
fn merges_are_capped_per_pass_and_per_table_and_skip_hot_or_busy_pairs() {
    let (_dir, archive) = tmp();
    let n = 12u64;
    let ranges: Vec<KeyRange> = (0..n).map(|i| range(i * 1000, i * 1000 + 999)).collect();
    for (i, r) in ranges.iter().enumerate() {
        let id = format!("p{i:02}");
        let mut rows: Vec<_> = (0..7 * 24).map(|h| rollup(&id, *r, T0 + h * HOUR_MS, 200.0)).collect();
        if i == 4 {
            rows[30].rejected = 5;
        }
        archive.append("w1", &rows).expect("written");
    }
    let mut layout = Layout {
        partitions: ranges.iter().enumerate().map(|(i, r)| part(&format!("p{i:02}"), *r, "w1")).collect(),
        workers: vec![worker("w1", 10_000.0)],
    };
    layout.partitions[8].busy = true;
    let config = OfflineConfig { max_merges_per_table: 3, ..OfflineConfig::default() };
    let found = analyze(&archive, &layout, &config, T0 + 7 * DAY_MS, &[]).expect("pass");
    assert_eq!(found.merges.len(), 3, "{found:?}");
    let touched: Vec<&str> = found.merges.iter().flat_map(|m| [m.left.as_str(), m.right.as_str()]).collect();
    assert!(!touched.contains(&"p04") && !touched.contains(&"p08"), "{touched:?}");
    let mut sorted = touched.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), touched.len(), "a partition is in one merge at most");
    assert!(found.declined.iter().any(|d| d.reason.contains("rejected")));
    assert!(found.declined.iter().any(|d| d.reason.starts_with("busy")));
    assert!(found.declined.iter().any(|d| d.reason.starts_with("cap: 3 merges per table")));
    let per_pass = OfflineConfig { max_merges_per_pass: 1, ..OfflineConfig::default() };
    let found = analyze(&archive, &layout, &per_pass, T0 + 7 * DAY_MS, &[]).expect("pass");
    assert_eq!(found.merges.len(), 1);
}

#[test]
fn a_silent_agent_makes_the_pass_partial() {
    let (_dir, archive) = tmp();
    fill(&archive, 7 * 24, |_| 100.0);
    let found = analyze(&archive, &two_neighbours(), &OfflineConfig::default(), T0 + 7 * DAY_MS, &["w3".to_owned()])
        .expect("pass");
    assert!(found.coverage.partial.iter().any(|p| p == "w3 returned no rollups"));
    assert!(found.merges.is_empty());
}

#[test]
fn a_daily_peak_over_the_limit_is_forecast_before_it_arrives() {
    let (_dir, archive) = tmp();
    // a peaks at 14:00 at 2.4x its limit on each of 3 days; b never.
    for (p, r, w, peak) in [("a", A, "w1", 24_000.0), ("b", B, "w2", 0.0)] {
        let rows: Vec<_> =
            (0..3 * 24).map(|h| rollup(p, r, T0 + h * HOUR_MS, if h % 24 == 14 { peak } else { 2000.0 })).collect();
        archive.append(w, &rows).expect("written");
    }
    let config = OfflineConfig::default();
    // At 09:00 on day 4: the peak is 5 h ahead, to be met at 13:30.
    let now = T0 + 3 * DAY_MS + 9 * HOUR_MS;
    let found = analyze(&archive, &two_neighbours(), &config, now, &[]).expect("pass");
    let [f] = found.peaks.as_slice() else { panic!("{:?}", found.peaks) };
    assert_eq!(f.partition.as_str(), "a");
    assert_eq!(f.peak_at_ms, T0 + 3 * DAY_MS + 14 * HOUR_MS);
    assert_eq!(f.act_at_ms, f.peak_at_ms - 30 * 60_000);
    assert_eq!((f.recurrences, f.predicted_peak_ops_per_sec), (3, 24_000.0));
    assert_eq!(f.pieces, 4, "24,000 under 0.6 x 10,000 takes 4 pieces");
    // A one-off surge is not a pattern when two recurrences are asked for.
    let (_dir2, once) = tmp();
    let rows: Vec<_> =
        (0..3 * 24).map(|h| rollup("a", A, T0 + h * HOUR_MS, if h == 14 { 24_000.0 } else { 2000.0 })).collect();
    once.append("w1", &rows).expect("written");
    let two = OfflineConfig { presplit_min_recurrences: 2, ..config.clone() };
    assert!(analyze(&once, &two_neighbours(), &two, now, &[]).expect("pass").peaks.is_empty());
    // A merge look-back of one hour (PD's) does not forget the peaks: they are counted over the
    // profile's two weeks, so the same three days forecast the same peak.
    let short = OfflineConfig { lookback_hours: 1, allow_partial_lookback: true, min_history_hours: 1, ..config };
    let found = analyze(&archive, &two_neighbours(), &short, now, &[]).expect("pass");
    let [f] = found.peaks.as_slice() else { panic!("{:?}", found.peaks) };
    assert_eq!((f.partition.as_str(), f.recurrences, f.peak_at_ms), ("a", 3, T0 + 3 * DAY_MS + 14 * HOUR_MS));
}

/// A peak that comes on Mondays only (T0 is a Monday) is weekly: after two Mondays it is met
/// ahead on the third, and not on the days between; a peak of several weekdays is daily.
#[test]
fn a_weekly_peak_is_forecast_for_its_weekday_only() {
    let (_dir, archive) = tmp();
    // a peaks at 09:00 on Mondays at 2.4x its limit, for two weeks; b at 09:00 every weekday.
    let monday = |h: i64| h % (7 * 24) == 9;
    let weekday = |h: i64| h % 24 == 9 && (h / 24) % 7 < 5;
    for (p, r, w, hot) in [("a", A, "w1", &monday as &dyn Fn(i64) -> bool), ("b", B, "w2", &weekday)] {
        let rows: Vec<_> =
            (0..14 * 24).map(|h| rollup(p, r, T0 + h * HOUR_MS, if hot(h) { 24_000.0 } else { 2000.0 })).collect();
        archive.append(w, &rows).expect("written");
    }
    let config = OfflineConfig::default();
    let at = |day: i64| {
        let now = T0 + day * DAY_MS + 6 * HOUR_MS;
        let found = analyze(&archive, &two_neighbours(), &config, now, &[]).expect("pass");
        found.peaks.into_iter().filter(|f| f.peak_at_ms == T0 + day * DAY_MS + 9 * HOUR_MS).collect::<Vec<_>>()
    };
    // The third Monday, at 06:00: both are forecast for 09:00, a as weekly (two Mondays), b as
    // daily (ten weekdays).
    let monday3 = at(14);
    let pattern = |p: &str| monday3.iter().find(|f| f.partition.as_str() == p).map(|f| (f.pattern, f.recurrences));
    assert_eq!(pattern("a"), Some((PeakPattern::Weekly, 2)), "{monday3:?}");
    assert_eq!(pattern("b"), Some((PeakPattern::Daily, 10)), "{monday3:?}");
    // The second Tuesday (two Mondays in the span, which made a daily peak before): b only.
    // Saturday: neither (b was quiet on two since its first peak).
    let tuesday: Vec<_> = at(8).iter().map(|f| f.partition.as_str().to_owned()).collect();
    assert_eq!(tuesday, ["b"]);
    assert!(at(19).is_empty(), "saturday: {:?}", at(19));
}

/// A daily peak that begins after weeks of quiet is forecast from its third day, as it is
/// without the history (quiet days before its first peak do not count against a weekday), and
/// a peak that stopped more than a week ago is not forecast.
#[test]
fn a_new_daily_peak_after_quiet_weeks_is_forecast_and_a_stopped_one_is_not() {
    let (_dir, archive) = tmp();
    // a: 14 quiet days, then 12:00 at 2.4x its limit on days 14, 15 and 16, then quiet again.
    let hot = |h: i64| (14..17).contains(&(h / 24)) && h % 24 == 12;
    let rows: Vec<_> =
        (0..26 * 24).map(|h| rollup("a", A, T0 + h * HOUR_MS, if hot(h) { 24_000.0 } else { 2000.0 })).collect();
    archive.append("w1", &rows).expect("written");
    let config = OfflineConfig::default();
    let forecast = |day: i64| {
        let now = T0 + day * DAY_MS + 6 * HOUR_MS;
        let found = analyze(&archive, &two_neighbours(), &config, now, &[]).expect("pass");
        found.peaks.iter().find(|f| f.partition.as_str() == "a").map(|f| (f.pattern, f.recurrences, f.peak_at_ms))
    };
    // Day 17, a Thursday: the two Thursdays before were quiet, before the first peak.
    assert_eq!(forecast(17), Some((PeakPattern::Daily, 3, T0 + 17 * DAY_MS + 12 * HOUR_MS)));
    // Day 25: the last peak was 9 days ago.
    assert_eq!(forecast(25), None);
}

/// `rollup` in table `table`.
fn rollup_in(table: &str, partition: &str, r: KeyRange, hour_start_ms: i64, peak: f64) -> HourlyRollup {
    HourlyRollup { table: table.parse().expect("valid"), ..rollup(partition, r, hour_start_ms, peak) }
}

#[test]
fn a_key_split_and_merged_back_repeatedly_is_reported_as_flapping() {
    let (_dir, archive) = tmp();
    let (c, d) = (range(2000, 2999), range(3000, 3999));
    let (ab, cd) = (range(0, 1999), range(2000, 3999));
    // Day by day: a|b|c|d, then ab|c|d (merged at 1000), a|b|c|d (split at 1000 again), ab|cd
    // (merged at 1000 again; 3000 merged once, after a single surge's split).
    let days: [&[(&str, KeyRange)]; 4] = [
        &[("a", A), ("b", B), ("c", c), ("d", d)],
        &[("ab", ab), ("c", c), ("d", d)],
        &[("a2", A), ("b2", B), ("c", c), ("d", d)],
        &[("ab2", ab), ("cd", cd)],
    ];
    let mut rows = Vec::new();
    for (day, parts) in days.iter().enumerate() {
        for (id, r) in parts.iter() {
            rows.extend((0..24).map(|h| rollup(id, *r, T0 + day as i64 * DAY_MS + h * HOUR_MS, 100.0)));
        }
    }
    archive.append("w1", &rows).expect("written");
    let layout =
        Layout { partitions: vec![part("ab2", ab, "w1"), part("cd", cd, "w1")], workers: vec![worker("w1", 0.0)] };
    let config = OfflineConfig { lookback_hours: 4 * 24, ..OfflineConfig::default() };
    let report = analyze(&archive, &layout, &config, T0 + 4 * DAY_MS, &[]).expect("pass").report;
    let [flap] = report.flapping.as_slice() else { panic!("{:?}", report.flapping) };
    assert_eq!((flap.table.as_str(), flap.key), ("orders", Key(1000)));
    assert_eq!((flap.splits, flap.merges), (1, 2), "merged, split again, merged again");
    assert_eq!(flap.last_change_ms, T0 + 3 * DAY_MS, "gone from the first hour of day 4");
    assert_eq!(report.flapping_total, 1, "3000 was split and merged once: a surge, not a flap");
}

#[test]
fn the_report_names_chronically_unbalanced_tables_and_each_workers_day() {
    let (_dir, archive) = tmp();
    let (e, f) = (range(2000, 2999), range(3000, 3999));
    // orders: a on w1 carries 1,000 + 100 h ops/s, b and c on w2 and w3 10 each: its busiest
    // worker has over twice its mean per worker in every hour. users: 1,000 on each worker.
    let tables = [
        ("orders", "a", A, "w1", None),
        ("orders", "b", B, "w2", Some(10.0)),
        ("orders", "c", e, "w3", Some(10.0)),
        ("users", "d", A, "w1", Some(1000.0)),
        ("users", "e", B, "w2", Some(1000.0)),
        ("users", "f", f, "w3", Some(1000.0)),
    ];
    for (table, id, r, w, load) in tables {
        let rows: Vec<_> = (0..24)
            .map(|h| rollup_in(table, id, r, T0 + h * HOUR_MS, load.unwrap_or(1000.0 + 100.0 * h as f64)))
            .collect();
        archive.append(w, &rows).expect("written");
    }
    let layout = Layout {
        partitions: tables
            .iter()
            .map(|&(table, id, r, w, _)| LayoutPartition { table: table.parse().expect("valid"), ..part(id, r, w) })
            .collect(),
        workers: vec![worker("w1", 0.0), worker("w2", 0.0), worker("w3", 0.0)],
    };
    let config = OfflineConfig { lookback_hours: 24, ..OfflineConfig::default() };
    let report = analyze(&archive, &layout, &config, T0 + DAY_MS, &[]).expect("pass").report;

    let [t] = report.tables.as_slice() else { panic!("{:?}", report.tables) };
    assert_eq!(t.table.as_ref().map(|t| t.as_str()), Some("orders"));
    assert_eq!((t.hours_judged, t.hours_unbalanced), (24, 24));
    // Hour 0: 1,000 against a mean of 340; hour 23: 3,300 against 1,106.7.
    assert!((t.max_spread - 3300.0 / (3320.0 / 3.0)).abs() < 1e-9, "{t:?}");
    assert!(t.mean_spread > 2.9 && t.mean_spread < t.max_spread, "{t:?}");
    // The tenant's busiest worker (w1: orders and users) is over twice its mean only from 21:00.
    assert!(report.tenants.is_empty(), "{:?}", report.tenants);

    let w1 = report.worker_days.iter().find(|d| d.worker == "w1").expect("w1's day");
    assert_eq!(w1.day, day_of(T0));
    assert_eq!(w1.hours, 24);
    // w1 carries 2,000 + 100 h: p50 is the 13th of 24 sorted hours, p90 the 22nd.
    assert_eq!((w1.p50_ops_per_sec, w1.p90_ops_per_sec, w1.max_ops_per_sec), (3200.0, 4100.0, 4300.0));
    assert_eq!(report.worker_days.len(), 3);
}

#[test]
fn a_file_of_another_shape_is_skipped_counted_and_makes_the_pass_partial() {
    use polars::prelude::{DataType, ParquetWriter};
    let (_dir, archive) = tmp();
    fill(&archive, 7 * 24, |_| 100.0);
    // A third worker's file of the first day with `key_start` retyped (a hand edit, another
    // version's writer): it reads, but cannot stand beside the day's other files.
    let rows: Vec<_> = (0..24).map(|h| rollup("c", range(2000, 2999), T0 + h * HOUR_MS, 100.0)).collect();
    let mut df = crate::archive::frame_of("w3", rows.iter()).expect("frame");
    let retyped = df.column("key_start").expect("column").cast(&DataType::Int64).expect("cast");
    df.with_column(retyped).expect("replaced");
    let file = std::fs::File::create(archive.day_dir(T0).join("w3.parquet")).expect("file");
    ParquetWriter::new(file).finish(&mut df).expect("written");
    let found = analyze(&archive, &two_neighbours(), &OfflineConfig::default(), T0 + 7 * DAY_MS, &[]).expect("pass");
    let [skipped] = found.coverage.files_skipped.as_slice() else { panic!("{:?}", found.coverage) };
    assert!(skipped.contains("w3.parquet") && skipped.contains("another shape"), "{skipped}");
    assert!(found.coverage.partial.iter().any(|p| p == "1 archive files could not be read"), "{:?}", found.coverage);
    assert!(found.merges.is_empty(), "nothing merged on a partial look-back: {:?}", found.merges);
}

#[test]
fn a_workers_missing_day_file_is_reported_and_makes_the_pass_partial() {
    let (_dir, archive) = tmp();
    fill(&archive, 7 * 24, |_| 100.0);
    // w2's file of the fourth day is gone (a disk swap, a hand clean-up); a worker that joined on
    // the last day has no gap before it.
    std::fs::remove_file(archive.day_dir(T0 + 3 * DAY_MS).join("w2.parquet")).expect("removed");
    let late: Vec<_> = (0..24).map(|h| rollup("c", range(2000, 2999), T0 + 6 * DAY_MS + h * HOUR_MS, 100.0)).collect();
    archive.append("w3", &late).expect("written");
    let found = analyze(&archive, &two_neighbours(), &OfflineConfig::default(), T0 + 7 * DAY_MS, &[]).expect("pass");
    let [missing] = found.coverage.files_skipped.as_slice() else { panic!("{:?}", found.coverage) };
    assert!(missing.contains("date=2026-11-05") && missing.contains("w2.parquet: missing"), "{missing}");
    assert!(found.coverage.partial.iter().any(|p| p == "1 archive files could not be read"), "{:?}", found.coverage);
    assert!(found.merges.is_empty(), "nothing merged on a partial look-back: {:?}", found.merges);
}

/// Six cold pieces of equal load (the three pieces of each of two partitions after a surge):
/// a run of three fits under the merge ratio, four do not. The pass merges the first two of each
/// run, not every disjoint pair; the next pass merges each result with its third piece, and the
/// table is back at two partitions (merging every pair at once left three of two thirds each,
/// no two of which fit).
#[test]
fn a_run_of_cold_pieces_is_packed_into_as_few_partitions_as_the_ratio_allows() {
    let (_dir, archive) = tmp();
    // 0.09 of the limit each: three are 0.27, under 0.3; four are 0.36.
    let peak = 0.09 * LIMIT;
    let ids = ["p0", "p1", "p2", "p3", "p4", "p5"];
    let r = |i: u64| range(i * 1000, i * 1000 + 999);
    for (i, id) in ids.iter().enumerate() {
        let rows: Vec<_> = (0..7 * 24 + 1).map(|h| rollup(id, r(i as u64), T0 + h * HOUR_MS, peak)).collect();
        archive.append("w1", &rows).expect("written");
    }
    let layout = |parts: Vec<LayoutPartition>| Layout { partitions: parts, workers: vec![worker("w1", 10_000.0)] };
    let config = OfflineConfig { max_merges_per_table: 16, ..OfflineConfig::default() };
    let now = T0 + 7 * DAY_MS;
    let six = layout(ids.iter().enumerate().map(|(i, id)| part(id, r(i as u64), "w1")).collect());
    let found = analyze(&archive, &six, &config, now, &[]).expect("pass");
    let pairs: Vec<_> = found.merges.iter().map(|m| (m.left.as_str(), m.right.as_str())).collect();
    assert_eq!(pairs, [("p0", "p1"), ("p3", "p4")], "{:?}", found.declined);
    let why = |pair: &str| found.declined.iter().find(|d| d.pair == pair).map(|d| d.reason.clone());
    assert!(why("p1+p2").expect("p1+p2 declined").starts_with("waits for the next pass"));
    assert!(why("p2+p3").expect("p2+p3 declined").starts_with("ends a run of 3 neighbours"));
    // The next pass, on the merged layout (the merged partitions keep the left ids).
    let four = layout(vec![
        part("p0", range(0, 1999), "w1"),
        part("p2", r(2), "w1"),
        part("p3", range(3000, 4999), "w1"),
        part("p5", r(5), "w1"),
    ]);
    let found = analyze(&archive, &four, &config, now + HOUR_MS, &[]).expect("pass");
    let pairs: Vec<_> = found.merges.iter().map(|m| (m.left.as_str(), m.right.as_str())).collect();
    assert_eq!(pairs, [("p0", "p2"), ("p3", "p5")], "{:?}", found.declined);
}
