//! Behaviour of the whole table: exactly-once ingest, windows across both resolutions, top-N,
//! the memory budget, topology, lineage, heatmap and eviction.

use crate::config::ApiLimits;
use std::time::Duration;

use lb_common::ids::{Key, KeyRange, PartitionId, TableId, TenantId, WorkerId};
use lb_common::protocol::{
    Capacity, Cursor, Health, HostStats, KeySketch, PartitionInfo, PartitionStats, Sample, SampleData, Topology,
    WorkerInfo,
};
use proptest::prelude::*;

use super::*;

const T0_MS: i64 = 1_700_000_000_000;

fn pid(s: &str) -> PartitionId {
    PartitionId::new(s).expect("valid id")
}
fn wid(s: &str) -> WorkerId {
    WorkerId::new(s).expect("valid id")
}
fn range(a: u64, b: u64) -> KeyRange {
    KeyRange { start: Key(a), end: Key(b) }
}

fn pstats(id: &str, table: &str, r: KeyRange, ops: u64) -> PartitionStats {
    PartitionStats {
        tenant: TenantId::new("acme").expect("valid"),
        table: TableId::new(table).expect("valid"),
        partition_id: pid(id),
        key_range: r,
        read_ops: ops - ops / 4,
        write_ops: ops / 4,
        read_bytes: ops * 100,
        write_bytes: 0,
        errors: 0,
        rejected: 0,
        latency_p50_us: 100.0,
        latency_p99_us: 1000.0,
        cpu_time_us: ops * 10,
        stored_bytes: 1 << 20,
        sketch: None,
    }
}

fn sample(cursor: u64, ts_ms: i64, stats: PartitionStats) -> Sample {
    Sample {
        cursor: Cursor(cursor),
        timestamp_ms: ts_ms,
        interval_ms: 1000,
        data: SampleData::Partition(stats),
        agent_sampled: false,
    }
}

fn table() -> MetricsTable {
    MetricsTable::new(TableConfig::default()).expect("default config is valid")
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// `n` one-second samples of one partition ending at `T0 + 1 s ..= T0 + n s`, cursors from `c0`.
fn steady(id: &str, ops: u64, n: i64, c0: u64) -> Vec<Sample> {
    (0..n).map(|k| sample(c0 + k as u64, T0_MS + (k + 1) * 1000, pstats(id, "t", range(0, 99), ops))).collect()
}

#[test]
fn config_is_validated() {
    let c = TableConfig { coarse_step: Duration::from_millis(1500), ..TableConfig::default() };
    assert!(matches!(MetricsTable::new(c), Err(TableError::InvalidConfig(_))));
    let c = TableConfig { fine_points: 60, ..TableConfig::default() };
    assert!(matches!(MetricsTable::new(c), Err(TableError::InvalidConfig(_))), "fine ring must outlive a coarse slot");
    let c = TableConfig { coarse_step: Duration::from_secs(600), fine_points: 700, ..TableConfig::default() };
    assert!(matches!(MetricsTable::new(c), Err(TableError::InvalidConfig(_))), "coverage fits a byte");
}

#[test]
fn memory_budget_holds_and_does_not_grow_with_time() {
    let mut t = table();
    let m = t.memory_usage();
    assert!(m.history_bytes_per_partition <= 4096, "history {} B over 4 KiB", m.history_bytes_per_partition);
    let w = wid("w1");
    t.ingest(&w, &steady("p1", 100, 10, 1), T0_MS + 10_000);
    let before = t.memory_bytes();
    let late: Vec<Sample> = (0..7200)
        .map(|k| sample(100 + k as u64, T0_MS + 20_000 + k * 1000, pstats("p1", "t", range(0, 99), 100)))
        .collect();
    t.ingest(&w, &late, T0_MS + 8_000_000);
    assert_eq!(t.memory_bytes(), before, "two hours of samples must not grow memory");
}

#[test]
fn redelivered_batches_change_nothing() {
    let mut t = table();
    let w = wid("w1");
    let batch = steady("p1", 100, 30, 1);
    let now = T0_MS + 31_000;
    let first = t.ingest(&w, &batch, now);
    assert_eq!(first.accepted_partition, 30);
    let before = t.window(&pid("p1"), Metric::Ops, secs(60), now).expect("known");
    let again = t.ingest(&w, &batch, now);
    assert_eq!(again, IngestStats { duplicate: 30, ..IngestStats::default() });
    assert_eq!(t.window(&pid("p1"), Metric::Ops, secs(60), now).expect("known"), before);
    // The same cursors from another worker are another worker's samples.
    let other = t.ingest(&wid("w2"), &batch[..1], now);
    assert_eq!(other.accepted_partition, 1);
}

#[test]
fn windows_report_rates_sums_and_their_window() {
    let mut t = table();
    let now = T0_MS + 30_000;
    t.ingest(&wid("w1"), &steady("p1", 100, 30, 1), now);
    let s = t.window(&pid("p1"), Metric::Ops, secs(10), now).expect("known");
    assert_eq!(s.window_secs, 10.0);
    assert_eq!(s.covered_secs, 10.0);
    assert!((s.sum - 1000.0).abs() < 0.5, "{s:?}");
    assert!((s.rate_per_sec - 100.0).abs() < 0.05);
    assert!((s.max - 100.0).abs() < 0.05);
    assert!(s.p99.is_some_and(|p| (p - 100.0).abs() < 0.05));
    let r = t.window(&pid("p1"), Metric::ReadOps, secs(10), now).expect("known");
    assert!((r.rate_per_sec - 75.0).abs() < 0.05, "{r:?}");
    // A 60 s window over 30 s of data: the rate counts missing seconds as zero, the mean does not.
    let s = t.window(&pid("p1"), Metric::Ops, secs(60), now).expect("known");
    assert!((s.rate_per_sec - 50.0).abs() < 0.05 && (s.mean - 100.0).abs() < 0.05, "{s:?}");
    let lat = t.window(&pid("p1"), Metric::LatencyP99, secs(10), now).expect("known");
    assert!((lat.rate_per_sec - 1000.0).abs() < 1.0, "gauges average: {lat:?}");
    let sb = t.window(&pid("p1"), Metric::StoredBytes, secs(10), now).expect("known");
    assert_eq!(sb.max, (1u64 << 20) as f64);
    assert!(matches!(t.window(&pid("p1"), Metric::HostCpu, secs(10), now), Err(TableError::MetricNotAvailable { .. })));
    assert!(matches!(t.window(&pid("nope"), Metric::Ops, secs(10), now), Err(TableError::UnknownPartition(_))));
}

#[test]
fn windows_ending_at_the_complete_watermark_read_full_rates_while_reports_are_in_flight() {
    let mut t = table();
    // w1 has delivered up to T0+30 s, w2 (slower collection) up to T0+28.6 s; it is T0+31.2 s.
    t.ingest(&wid("w1"), &steady("p1", 100, 30, 1), T0_MS + 30_000);
    let w2: Vec<Sample> = (0..28)
        .map(|k| sample(1 + k as u64, T0_MS + 600 + (k + 1) * 1000, pstats("p2", "t", range(100, 199), 100)))
        .collect();
    t.ingest(&wid("w2"), &w2, T0_MS + 30_000);
    let now = T0_MS + 31_200;
    let at = t.complete_until_ms(now, 5_000);
    assert_eq!(at, T0_MS + 28_000, "the newest second both workers delivered in full");
    let ending_now = t.window(&pid("p1"), Metric::Ops, secs(5), now).expect("known");
    let ending_at = t.window(&pid("p1"), Metric::Ops, secs(5), at).expect("known");
    assert!(ending_now.rate_per_sec < 90.0, "a window ending now counts seconds in flight as idle: {ending_now:?}");
    assert!((ending_at.rate_per_sec - 100.0).abs() < 0.5, "{ending_at:?}");
    // A worker silent for longer than the horizon does not hold the watermark back.
    assert_eq!(t.complete_until_ms(T0_MS + 34_500, 5_000), T0_MS + 30_000);
    assert_eq!(t.complete_until_ms(T0_MS + 99_000, 5_000), T0_MS + 99_000, "nobody recent: now");
}

/// A host sample of worker `w` for the second ending at `T0 + k s`.
fn host_at(cursor: u64, k: i64) -> Sample {
    let h = HostStats {
        cpu_ratio: 0.5,
        cpu_cores: 1,
        memory_used_bytes: 1,
        memory_total_bytes: 2,
        net_rx_bytes_per_sec: 0.0,
        net_tx_bytes_per_sec: 0.0,
        disk_read_bytes_per_sec: 0.0,
        disk_write_bytes_per_sec: 0.0,
    };
    Sample {
        cursor: Cursor(cursor),
        timestamp_ms: T0_MS + k * 1000,
        interval_ms: 1000,
        data: SampleData::Host(h),
        agent_sampled: false,
    }
}

#[test]
fn a_partition_left_out_of_its_workers_reports_reads_idle_and_a_silent_worker_still_reads_stale() {
    let mut t = table();
    let w = wid("w1");
    // 30 s of reports from w1, each with its host stats; p1 is busy throughout, p2 (a sparse
    // reporter's idle slot) is listed only when it had work: 100 ops in one second of every 5.
    let mut samples = Vec::new();
    let mut c = 1;
    for k in 1..=30 {
        samples.push(host_at(c, k));
        samples.push(sample(c + 1, T0_MS + k * 1000, pstats("p1", "t", range(0, 99), 50)));
        c += 2;
        if k % 5 == 0 {
            samples.push(sample(c, T0_MS + k * 1000, pstats("p2", "t", range(100, 199), 100)));
            c += 1;
        }
    }
    t.ingest(&w, &samples, T0_MS + 30_000);
    let reported = |t: &MetricsTable, id: &str, now| {
        t.partition_rates(&pid(id), secs(10), now, RateBasis::Reported).expect("query").expect("known").ops_per_sec
    };
    let p2 = reported(&t, "p2", T0_MS + 30_000);
    assert!((p2 - 20.0).abs() < 0.1, "idle seconds read as zero, not as missing: {p2}");
    assert!((reported(&t, "p1", T0_MS + 30_000) - 50.0).abs() < 0.1);
    let rows = t.partitions_with(secs(10), T0_MS + 30_000, RateBasis::Reported).expect("rows");
    let row = rows.iter().find(|r| r.id.as_str() == "p2").expect("row");
    assert!((row.ops_per_sec - p2).abs() < 1e-9, "rows read the same: {}", row.ops_per_sec);
    let worker = &t.workers(secs(10), T0_MS + 30_000).expect("workers")[0];
    assert_eq!((worker.covered_secs, worker.last_sample_ms), (10.0, Some(T0_MS + 30_000)));

    // The worker goes silent for 5 s (down, or its data not collected yet): those seconds are
    // not zeros for its partitions, and the worker's row says its window is incomplete.
    let now = T0_MS + 35_000;
    assert!((reported(&t, "p1", now) - 50.0).abs() < 0.1, "the seconds it did report still read 50");
    let worker = &t.workers(secs(10), now).expect("workers")[0];
    assert_eq!(worker.covered_secs, 5.0, "half the window is missing");
    assert!((worker.ops_per_sec - 35.0).abs() < 0.1, "(5 x 50 + 100) over 10 s: {}", worker.ops_per_sec);
}

#[test]
fn the_agents_own_host_readings_do_not_make_a_silent_worker_look_reported() {
    let mut t = table();
    let w = wid("w1");
    // A pushing worker (its reports carry no host stats) reports p1 for 20 s and then stops;
    // its agent's own sampler goes on every second.
    let mut samples = Vec::new();
    for k in 1..=30i64 {
        let mut own = host_at(2 * k as u64, k);
        own.agent_sampled = true;
        samples.push(own);
        if k <= 20 {
            samples.push(sample(2 * k as u64 + 1, T0_MS + k * 1000, pstats("p1", "t", range(0, 99), 50)));
        }
    }
    t.ingest(&w, &samples, T0_MS + 30_000);
    let worker = &t.workers(secs(10), T0_MS + 30_000).expect("workers")[0];
    assert_eq!(worker.covered_secs, 0.0, "the last 10 s are missing data, not idle seconds");
    assert_eq!(worker.last_sample_ms, Some(T0_MS + 20_000), "its newest sample is its last report");
    let p1 =
        t.partition_rates(&pid("p1"), secs(10), T0_MS + 30_000, RateBasis::Reported).expect("query").expect("known");
    assert_eq!(p1.ops_per_sec, 0.0, "nothing reported, nothing read");
    // The host readings still feed the worker's host series.
    let cpu = t.worker_load(&w, Metric::HostCpu, secs(10), T0_MS + 30_000).expect("known");
    assert!((cpu.mean - 0.5).abs() < 1e-6, "{cpu:?}");
    // Over a window that reaches back into the reported seconds, p1 reads what it served then.
    let p1 =
        t.partition_rates(&pid("p1"), secs(20), T0_MS + 30_000, RateBasis::Reported).expect("query").expect("known");
    assert!((p1.ops_per_sec - 50.0).abs() < 0.1, "{}", p1.ops_per_sec);
}

#[test]
fn a_partition_the_topology_listed_before_its_first_report_is_idle_since_then_not_new() {
    let mut t = table();
    let w = wid("w1");
    // The topology lists p1 and p2 from the start; w1 reports for 30 s, each second with its
    // host stats and p1, and leaves p2 out (idle) until one burst of 100 ops in its 30th second.
    t.apply_topology(&topo(&[("p1", range(0, 99), "w1"), ("p2", range(100, 199), "w1")]));
    let mut samples = Vec::new();
    for k in 1..=30u64 {
        samples.push(host_at(3 * k, k as i64));
        samples.push(sample(3 * k + 1, T0_MS + k as i64 * 1000, pstats("p1", "t", range(0, 99), 50)));
    }
    samples.push(sample(200, T0_MS + 30_000, pstats("p2", "t", range(100, 199), 100)));
    t.ingest(&w, &samples, T0_MS + 30_000);
    let p2 =
        t.partition_rates(&pid("p2"), secs(10), T0_MS + 30_000, RateBasis::Reported).expect("query").expect("known");
    // One busy second of ten: 10 ops/s, not the 100 of a partition born a second ago.
    assert!((p2.ops_per_sec - 10.0).abs() < 0.1, "{}", p2.ops_per_sec);
    let rows = t.partitions_with(secs(10), T0_MS + 30_000, RateBasis::Reported).expect("rows");
    let row = rows.iter().find(|r| r.id.as_str() == "p2").expect("row");
    assert!((row.ops_per_sec - 10.0).abs() < 0.1, "the pass's reader agrees: {}", row.ops_per_sec);

    // A split's new side, listed by a topology read at 32 s while the table's data reaches only
    // 30 s (the collection lag): it is young from the read, not from the newest data.
    t.apply_topology_at(
        &topo(&[("p1", range(0, 99), "w1"), ("p2", range(100, 149), "w1"), ("p3", range(150, 199), "w1")]),
        Some(T0_MS + 32_000),
    );
    let mut later = Vec::new();
    for k in 31..=34u64 {
        later.push(host_at(300 + 3 * k, k as i64));
        if k >= 33 {
            later.push(sample(300 + 3 * k + 1, T0_MS + k as i64 * 1000, pstats("p3", "t", range(150, 199), 300)));
        }
    }
    t.ingest(&w, &later, T0_MS + 34_000);
    let p3 =
        t.partition_rates(&pid("p3"), secs(10), T0_MS + 34_000, RateBasis::Reported).expect("query").expect("known");
    assert!((p3.ops_per_sec - 300.0).abs() < 0.5, "its real rate over its own two seconds: {}", p3.ops_per_sec);
}

#[test]
fn a_partition_two_seconds_old_reads_its_real_rate_over_the_seconds_it_reported() {
    let mut t = table();
    // p1 reported for 30 s; p2 (a split's new side) only for the last 2.
    t.ingest(&wid("w1"), &steady("p1", 100, 30, 1), T0_MS + 30_000);
    let young: Vec<Sample> = (28..30)
        .map(|k| sample(100 + k as u64, T0_MS + (k + 1) * 1000, pstats("p2", "t", range(100, 199), 300)))
        .collect();
    t.ingest(&wid("w1"), &young, T0_MS + 30_000);
    let rate = |basis| {
        let rows = t.partitions_with(secs(5), T0_MS + 30_000, basis).expect("rows");
        let r = |id: &str| rows.iter().find(|r| r.id.as_str() == id).expect("row").ops_per_sec;
        (r("p1"), r("p2"))
    };
    let (p1, p2) = rate(RateBasis::Window);
    assert!((p1 - 100.0).abs() < 0.5 && (p2 - 120.0).abs() < 1.0, "window basis: {p1} {p2}");
    let (p1, p2) = rate(RateBasis::Reported);
    assert!((p1 - 100.0).abs() < 0.5 && (p2 - 300.0).abs() < 2.0, "reported basis: {p1} {p2}");
    // The analyzer's lookup by id reads the same numbers as the rows.
    let direct = t.partition_rates(&pid("p2"), secs(5), T0_MS + 30_000, RateBasis::Reported).expect("query");
    assert!(direct.is_some_and(|r| (r.ops_per_sec - p2).abs() < 1e-9), "{direct:?}");
    let unknown = t.partition_rates(&pid("nope"), secs(5), T0_MS + 30_000, RateBasis::Reported).expect("query");
    assert_eq!(unknown, None);
}

#[test]
fn long_windows_read_the_coarse_ring_within_its_error_bound() {
    let mut t = table();
    let n = 1800; // 30 minutes
    let now = T0_MS + n * 1000;
    let stats = t.ingest(&wid("w1"), &steady("p1", 100, n, 1), now);
    assert_eq!(stats.accepted_partition, n as u64);
    let bound = t.error_bounds().iter().find(|b| b.metric == Metric::Ops).map(|b| b.coarse_relative_error);
    let bound = bound.expect("ops has a bound");
    assert!(bound < 0.04, "u8 ops error {bound}");
    let s = t.window(&pid("p1"), Metric::Ops, secs(1800), now).expect("known");
    assert!((s.rate_per_sec - 100.0).abs() <= 100.0 * bound + 0.01, "{s:?}");
    assert!((s.covered_secs - 1800.0).abs() < 1e-9, "every second covered exactly once: {s:?}");
    let h = t.history(&pid("p1"), Metric::Ops, T0_MS, now).expect("known");
    let covered: i64 = h.points.iter().map(|p| p.step_ms).sum();
    assert_eq!(covered, n * 1000, "history points tile the data without overlap");
    assert!(h.points.iter().any(|p| p.step_ms == 60_000) && h.points.iter().any(|p| p.step_ms == 1000));
}

#[test]
fn late_samples_are_kept_inside_the_open_window_and_counted_outside_it() {
    let mut t = table();
    let w = wid("w1");
    let now = T0_MS + 200_000;
    t.ingest(&w, &[sample(1, now, pstats("p1", "t", range(0, 99), 10))], now);
    // 15 s late: its minute is still open (the open window is at least fine_points − 60 s).
    let late = t.ingest(&w, &[sample(2, now - 15_000, pstats("p1", "t", range(0, 99), 10))], now);
    assert_eq!(late.accepted_partition, 1);
    // 10 minutes late: its minute was rolled up long ago.
    let old = t.ingest(&w, &[sample(3, now - 600_000, pstats("p1", "t", range(0, 99), 10))], now);
    assert_eq!(old.dropped_late, 1);
    let future = t.ingest(&w, &[sample(4, now + 3_600_000, pstats("p1", "t", range(0, 99), 10))], now);
    assert_eq!(future.rejected_future, 1);
    let mut bad = sample(5, now, pstats("p1", "t", range(0, 99), 10));
    bad.interval_ms = 0;
    assert_eq!(t.ingest(&w, &[bad], now).invalid, 1);
    let s = t.window(&pid("p1"), Metric::Ops, secs(60), now).expect("known");
    assert!((s.sum - 20.0).abs() < 0.01, "two accepted samples: {s:?}");
}

#[test]
fn long_intervals_spread_over_their_seconds() {
    let mut t = table();
    let now = T0_MS + 100_000;
    let mut s = sample(1, now, pstats("p1", "t", range(0, 99), 1000));
    s.interval_ms = 10_000;
    t.ingest(&wid("w1"), &[s], now);
    let w = t.window(&pid("p1"), Metric::Ops, secs(10), now).expect("known");
    assert!((w.sum - 1000.0).abs() < 0.5 && (w.max - 100.0).abs() < 0.05, "{w:?}");
}

#[test]
fn host_samples_feed_the_worker_series() {
    let mut t = table();
    let now = T0_MS + 10_000;
    let host = HostStats {
        cpu_ratio: 0.5,
        cpu_cores: 8,
        memory_used_bytes: 1,
        memory_total_bytes: 2,
        net_rx_bytes_per_sec: 100.0,
        net_tx_bytes_per_sec: 50.0,
        disk_read_bytes_per_sec: 0.0,
        disk_write_bytes_per_sec: 0.0,
    };
    let s = Sample {
        cursor: Cursor(1),
        timestamp_ms: now,
        interval_ms: 1000,
        data: SampleData::Host(host),
        agent_sampled: false,
    };
    let st = t.ingest(&wid("w1"), &[s], now);
    assert_eq!(st.accepted_host, 1);
    let l = t.worker_load(&wid("w1"), Metric::HostCpu, secs(5), now).expect("known");
    assert!((l.mean - 0.5).abs() < 1e-6);
    let n = t.worker_load(&wid("w1"), Metric::NetBytes, secs(5), now).expect("known");
    assert!((n.mean - 150.0).abs() < 1e-3);
}

#[test]
fn top_n_ranks_partitions_and_groups() {
    let mut t = table();
    let now = T0_MS + 10_000;
    let mut c = 0;
    for (w, p, tbl, ops) in [("w1", "a", "t1", 10), ("w1", "b", "t1", 30), ("w2", "c", "t2", 20), ("w2", "d", "t2", 5)]
    {
        let batch: Vec<Sample> = (0..10)
            .map(|k| {
                c += 1;
                sample(c, T0_MS + (k + 1) * 1000, pstats(p, tbl, range(0, 99), ops))
            })
            .collect();
        t.ingest(&wid(w), &batch, now);
    }
    let top = t.top_n(Metric::Ops, 2, GroupBy::None, secs(10), now).expect("ok");
    assert_eq!(top.window_secs, 10.0);
    let keys: Vec<_> = top.entries.iter().map(|e| e.key.clone()).collect();
    assert_eq!(keys, vec![GroupKey::Partition { partition: pid("b") }, GroupKey::Partition { partition: pid("c") }]);
    let by_table = t.top_n(Metric::Ops, 10, GroupBy::Table, secs(10), now).expect("ok");
    assert_eq!(by_table.entries.len(), 2);
    assert!((by_table.entries[0].value - 40.0).abs() < 0.01, "{by_table:?}");
    let by_worker = t.top_n(Metric::Ops, 10, GroupBy::Worker, secs(10), now).expect("ok");
    assert_eq!(by_worker.entries[0].key, GroupKey::Worker { worker: wid("w1") });
    assert!((by_worker.entries[0].value - 40.0).abs() < 1e-3);
    let by_tenant = t.top_n(Metric::Ops, 10, GroupBy::Tenant, secs(10), now).expect("ok");
    assert!((by_tenant.entries[0].value - 65.0).abs() < 0.02);
    let lat = t.top_n(Metric::LatencyP99, 10, GroupBy::Table, secs(10), now).expect("ok");
    assert!((lat.entries[0].value - 1000.0).abs() < 1.0, "gauges group by max: {lat:?}");
    let overview = t.cluster_overview(Metric::Ops, secs(10), now, Freshness::at_any_time(5_000)).expect("ok");
    assert!((overview.mean - 32.5).abs() < 1e-3 && (overview.max_over_mean - 40.0 / 32.5).abs() < 1e-3);
    assert!((overview.cv - 7.5 / 32.5).abs() < 1e-3, "{overview:?}");
}

/// A worker whose data is not collected up to now is stale, not idle: listed and flagged, left
/// out of the spread (it read as 0 ops/s and halved the mean).
#[test]
fn a_worker_not_collected_yet_is_stale_in_the_overview_not_zero() {
    let mut t = table();
    let now = T0_MS + 20_000;
    t.apply_topology(&topo(&[("a", range(0, 49), "w1"), ("b", range(50, 99), "w2")]));
    let batch = |p: &str, r: KeyRange, secs: i64| -> Vec<Sample> {
        (0..secs).map(|k| sample(k as u64 + 1, T0_MS + (k + 1) * 1000, pstats(p, "t", r, 10))).collect()
    };
    t.ingest(&wid("w1"), &batch("a", range(0, 49), 20), now);
    // w2's newest sample is 12 s old: its last 10 s are not in yet.
    t.ingest(&wid("w2"), &batch("b", range(50, 99), 8), now);
    let o = t.cluster_overview(Metric::Ops, secs(10), now, Freshness::at_any_time(5_000)).expect("ok");
    let w2 = o.workers.iter().find(|w| w.worker == wid("w2")).expect("w2 listed");
    assert!(w2.stale && w2.value == 0.0, "{o:?}");
    assert!(!o.workers.iter().find(|w| w.worker == wid("w1")).expect("w1").stale);
    assert_eq!(o.stale_workers, 1);
    assert!(
        (o.mean - 10.0).abs() < 1e-3 && (o.max_over_mean - 1.0).abs() < 1e-3,
        "w2's missing data is not a 0: {o:?}"
    );
    // Within the grace, the same worker is fresh.
    let o = t.cluster_overview(Metric::Ops, secs(10), now, Freshness::at_any_time(15_000)).expect("ok");
    assert_eq!(o.stale_workers, 0, "{o:?}");
    // So it is when the collector's newest round began 8 s ago: nothing newer could be in.
    let as_of_round = Freshness { as_of_ms: now - 8_000, stale_after_ms: 5_000 };
    let o = t.cluster_overview(Metric::Ops, secs(10), now, as_of_round).expect("ok");
    assert_eq!(o.stale_workers, 0, "{o:?}");
    let h = t.cluster_history(Metric::Ops, now - 10_000, now, 10_000, as_of_round, 1_440).expect("ok");
    assert!((h.points[0].mean - 5.0).abs() < 1e-3, "both in the spread, w2 idle in its last 10 s: {h:?}");
}

/// Freshness is judged where the data could reach: a slow round makes no worker stale, a
/// stale collector makes every one.
#[test]
fn freshness_is_judged_at_the_newest_round_while_it_is_recent() {
    let now = 1_000_000;
    let from = |round: Option<i64>| Freshness::as_of_round(round, now, 5_000).fresh_from(now);
    assert_eq!(from(Some(now - 4_000)), now - 9_000);
    assert_eq!(from(Some(now - 5_000)), now - 10_000);
    assert_eq!(from(Some(now - 5_001)), now - 5_000, "the collector is stale");
    assert_eq!(from(None), now - 5_000, "no round yet");
    assert_eq!(from(Some(now + 3_000)), now - 5_000, "never ahead of the clock");
}

/// The planner's input does not read a silent worker as an idle one: it may not receive
/// partitions (degraded) and leaves the pool's spread, until it reports again.
#[test]
fn the_planner_input_marks_a_worker_whose_data_stopped_degraded_not_idle() {
    let mut t = table();
    let now = T0_MS + 20_000;
    let batch = |p: &str, r: KeyRange, secs: i64| -> Vec<Sample> {
        (0..secs).map(|k| sample(k as u64 + 1, T0_MS + (k + 1) * 1000, pstats(p, "t", r, 10))).collect()
    };
    t.ingest(&wid("w1"), &batch("a", range(0, 49), 20), now);
    t.ingest(&wid("w2"), &batch("b", range(50, 99), 8), now);
    let info = |id: &str, owner: &str| PartitionInfo {
        id: pid(id),
        tenant: TenantId::new("acme").expect("valid"),
        table: TableId::new("t").expect("valid"),
        range: if id == "a" { range(0, 49) } else { range(50, 99) },
        owner: wid(owner),
        group: None,
        stored_bytes: 0,
        limit: None,
        supported_actions: Vec::new(),
    };
    let worker = |id: &str| WorkerInfo {
        id: wid(id),
        capacity: Capacity { ops_per_sec: 100.0, bytes_per_sec: 1e9 },
        cpu_cores: 0.0,
        group: None,
        health: Health::Healthy,
        zone: None,
        rack: None,
    };
    let mut zoned = worker("w3");
    zoned.zone = Some("eu-1b".parse().expect("zone"));
    let topology = Topology {
        version: 1,
        workers: vec![worker("w1"), worker("w2"), zoned],
        partitions: vec![info("a", "w1"), info("b", "w2")],
        datasets: Vec::new(),
        new_group_dedicates_owner: false,
        multi_way_split: false,
        move_rate_limit: false,
        merge_to_worker: false,
    };
    let input = crate::online::observe::planner_input(&t, &topology, Vec::new(), secs(5), now);
    let health: Vec<Health> = input.workers.iter().map(|w| w.health).collect();
    // w3 never reported (a new, empty worker): nothing to miss, it stays a destination.
    assert_eq!(health, vec![Health::Healthy, Health::Degraded, Health::Healthy]);
    // The planner sees each worker's zone as the topology gives it.
    let zones: Vec<Option<&str>> = input.workers.iter().map(|w| w.zone.as_ref().map(|z| z.as_str())).collect();
    assert_eq!(zones, [None, None, Some("eu-1b")]);
}

/// The online pass keeps its input and re-reads only the load at the table slots it found
/// before: what it reads must be what a fresh build reads, as samples, sketches and partitions
/// the table did not know yet arrive.
#[test]
fn a_kept_planner_input_refreshed_in_place_reads_what_a_fresh_one_does() {
    use crate::online::observe::{KeptInput, planner_input, refresh_planner_input};
    let mut t = table();
    let info = |id: &str, r: KeyRange| PartitionInfo {
        id: pid(id),
        tenant: TenantId::new("acme").expect("valid"),
        table: TableId::new("t").expect("valid"),
        range: r,
        owner: wid("w1"),
        group: None,
        stored_bytes: 0,
        limit: None,
        supported_actions: Vec::new(),
    };
    let topology = Topology {
        version: 7,
        workers: vec![WorkerInfo {
            id: wid("w1"),
            capacity: Capacity { ops_per_sec: 1000.0, bytes_per_sec: 1e9 },
            cpu_cores: 0.0,
            group: None,
            health: Health::Healthy,
            zone: None,
            rack: None,
        }],
        partitions: vec![info("a", range(0, 49)), info("b", range(50, 99))],
        datasets: Vec::new(),
        new_group_dedicates_owner: false,
        multi_way_split: false,
        move_rate_limit: false,
        merge_to_worker: false,
    };
    let with_sketch = |cursor: u64, at: i64, id: &str, r: KeyRange, ops: u64, buckets: Vec<u64>| {
        let mut stats = pstats(id, "t", r, ops);
        stats.sketch = Some(KeySketch {
            bucket_ops: buckets,
            bucket_bounds: Vec::new(),
            top_keys: Vec::new(),
            sequential_write_ratio: 0.0,
        });
        sample(cursor, at, stats)
    };
    let mut kept = KeptInput::default();
    // Only "a" reports at first: "b" is not in the table, and reads as idle.
    let mut cursor = 0;
    for second in 1..=12i64 {
        let at = T0_MS + second * 1000;
        cursor += 1;
        let mut batch = vec![with_sketch(cursor, at, "a", range(0, 49), 10 * second as u64, vec![1, second as u64])];
        if second > 6 {
            cursor += 1;
            batch.push(with_sketch(cursor, at, "b", range(50, 99), 40, vec![3, 1]));
        }
        t.ingest(&wid("w1"), &batch, at);
        refresh_planner_input(&mut kept, &t, &topology, secs(5), at);
        let fresh = planner_input(&t, &topology, Vec::new(), secs(5), at);
        assert_eq!(kept.input.partitions, fresh.partitions, "second {second}");
        assert_eq!(kept.input.workers, fresh.workers, "second {second}");
        let a = &kept.input.partitions[0].stats;
        assert_eq!(a.sketch.as_ref().map(|s| s.bucket_ops.clone()), Some(vec![1, second as u64]), "the newest sketch");
        assert!(a.ops_per_sec > 0.0);
        assert_eq!(kept.input.partitions[1].stats.ops_per_sec > 0.0, second > 6, "second {second}");
    }
    // Seconds without a new sketch: the views keep theirs without looking (no sketch kept).
    for second in 13..=16i64 {
        let at = T0_MS + second * 1000;
        cursor += 1;
        t.ingest(&wid("w1"), &[sample(cursor, at, pstats("a", "t", range(0, 49), 70))], at);
        refresh_planner_input(&mut kept, &t, &topology, secs(5), at);
        let fresh = planner_input(&t, &topology, Vec::new(), secs(5), at);
        assert_eq!(kept.input.partitions, fresh.partitions, "second {second}");
    }
    // The table drops "b" (gone from its topology, then evicted) and reuses its slot for "c":
    // the kept view of "b" must not read "c" there.
    let b_slot = t.locate(&pid("b"), None).expect("known");
    let mut without_b = topology.clone();
    without_b.partitions.truncate(1);
    without_b.version = 8;
    t.apply_topology(&without_b);
    let far = T0_MS + 7 * 24 * 3_600_000;
    assert!(t.evict_expired(far) >= 1);
    let at = far + 1000;
    cursor += 1;
    t.ingest(&wid("w1"), &[with_sketch(cursor, at, "c", range(50, 99), 900, vec![5, 5])], at);
    assert_eq!(t.locate(&pid("c"), None), Some(b_slot), "the freed slot is reused");
    refresh_planner_input(&mut kept, &t, &topology, secs(5), at);
    let fresh = planner_input(&t, &topology, Vec::new(), secs(5), at);
    assert_eq!(kept.input.partitions, fresh.partitions);
    assert_eq!(
        kept.input.partitions[1].stats,
        crate::planner::PartitionWindow::default(),
        "b is not in the table: idle"
    );
}

/// One point per step, each the overview of its own step: w1 serves 10 ops/s for 10 s and 30
/// after; w2 a steady 10.
#[test]
fn cluster_history_is_the_overview_of_each_step() {
    let mut t = table();
    let now = T0_MS + 20_000;
    for (w, p) in [("w1", "a"), ("w2", "b")] {
        let batch: Vec<Sample> = (0..20)
            .map(|k| {
                let ops = if w == "w1" && k >= 10 { 30 } else { 10 };
                sample(k as u64 + 1, T0_MS + (k + 1) * 1000, pstats(p, "t", range(0, 99), ops))
            })
            .collect();
        t.ingest(&wid(w), &batch, now);
    }
    let h = t.cluster_history(Metric::Ops, T0_MS, now, 10_000, Freshness::at_any_time(5_000), 1_440).expect("ok");
    assert_eq!(h.points.iter().map(|p| p.ts_ms).collect::<Vec<_>>(), vec![T0_MS + 10_000, now]);
    let (quiet, busy) = (&h.points[0], &h.points[1]);
    assert!((quiet.max - 10.0).abs() < 1e-6 && quiet.cv.abs() < 1e-6, "{quiet:?}");
    assert!((busy.max - 30.0).abs() < 1e-6 && (busy.mean - 20.0).abs() < 1e-6, "{busy:?}");
    assert!((busy.max_over_mean - 1.5).abs() < 1e-6 && (busy.cv - 0.5).abs() < 1e-6, "{busy:?}");
    for bad in [
        t.cluster_history(Metric::Ops, T0_MS, now, 999, Freshness::at_any_time(5_000), 1_440),
        t.cluster_history(Metric::Ops, now, T0_MS, 10_000, Freshness::at_any_time(5_000), 1_440),
        t.cluster_history(Metric::Ops, i64::MIN, i64::MAX, 60_000, Freshness::at_any_time(5_000), 1_440),
        t.cluster_history(Metric::Ops, now - 86_400_000, now, 1_000, Freshness::at_any_time(5_000), 1_440),
    ] {
        assert!(matches!(bad, Err(TableError::InvalidQuery(_))), "{bad:?}");
    }
}

fn topo(parts: &[(&str, KeyRange, &str)]) -> Topology {
    let cap = Capacity { ops_per_sec: 1000.0, bytes_per_sec: 1e6 };
    Topology {
        version: 1,
        workers: ["w1", "w2"]
            .iter()
            .map(|w| WorkerInfo {
                id: wid(w),
                capacity: cap,
                cpu_cores: 0.0,
                group: None,
                health: Health::Healthy,
                zone: None,
                rack: None,
            })
            .collect(),
        partitions: parts
            .iter()
            .map(|(p, r, w)| PartitionInfo {
                id: pid(p),
                tenant: TenantId::new("acme").expect("valid"),
                table: TableId::new("t").expect("valid"),
                range: *r,
                owner: wid(w),
                group: None,
                stored_bytes: 42,
                limit: None,
                supported_actions: vec![],
            })
            .collect(),
        datasets: vec![],
        new_group_dedicates_owner: false,
        multi_way_split: false,
        move_rate_limit: false,
        merge_to_worker: false,
    }
}

#[test]
fn split_children_inherit_history_and_the_heatmap_shows_the_split() {
    let mut t = table();
    t.apply_topology(&topo(&[("p", range(0, 99), "w1")]));
    let w = wid("w1");
    // The parent serves 100 ops/s for 120 s, then splits into l [0,24] and r [25,99].
    let parent: Vec<Sample> =
        (0..120).map(|k| sample(k as u64 + 1, T0_MS + (k + 1) * 1000, pstats("p", "t", range(0, 99), 100))).collect();
    t.ingest(&w, &parent, T0_MS + 120_000);
    t.apply_topology(&topo(&[("l", range(0, 24), "w1"), ("r", range(25, 99), "w2")]));
    t.link_split(&pid("p"), &[pid("l"), pid("r")]).expect("known");
    assert!(t.partitions(secs(10), T0_MS + 120_000).expect("ok").iter().any(|r| r.id == pid("p") && r.gone));
    let mut c = 1000;
    for k in 120..180 {
        c += 1;
        t.ingest(&w, &[sample(c, T0_MS + (k + 1) * 1000, pstats("l", "t", range(0, 24), 40))], T0_MS + 180_000);
        t.ingest(
            &wid("w2"),
            &[sample(c, T0_MS + (k + 1) * 1000, pstats("r", "t", range(25, 99), 60))],
            T0_MS + 180_000,
        );
    }
    let h = t.history(&pid("l"), Metric::Ops, T0_MS, T0_MS + 180_000).expect("known");
    let inherited: Vec<_> = h.points.iter().filter(|p| p.ts_ms < T0_MS + 120_000).collect();
    assert!(!inherited.is_empty());
    assert!(inherited.iter().all(|p| (p.value - 25.0).abs() < 1.0), "a quarter of the parent: {inherited:?}");
    assert!(h.points.iter().filter(|p| p.ts_ms >= T0_MS + 120_000).all(|p| (p.value - 40.0).abs() < 0.1));
    assert!(t.link_split(&pid("l"), &[pid("p")]).is_err(), "cycles are refused");

    let tenant = TenantId::new("acme").expect("valid");
    let tbl = TableId::new("t").expect("valid");
    let hm =
        t.heatmap(&tenant, &tbl, Metric::Ops, T0_MS, T0_MS + 180_000, 60_000, 4, &ApiLimits::default()).expect("ok");
    assert_eq!(hm.times_ms.len(), 3);
    assert_eq!(hm.key_buckets.len(), 4);
    assert_eq!(hm.key_buckets[0], range(0, 24));
    for row in 0..3 {
        let total: f32 = hm.values[row * 4..row * 4 + 4].iter().sum();
        assert!((total - 100.0).abs() < 4.0, "row {row} sums to the table's rate: {total}");
    }
    // After the split, bucket 0 holds l's 40 ops/s; before it, a quarter of p's 100.
    assert!((hm.values[2 * 4] - 40.0).abs() < 0.1, "{:?}", hm.values);
    assert!((hm.values[0] - 25.0).abs() < 1.5, "{:?}", hm.values);

    // Six hours on, the gone parent is evicted and the link with it.
    assert_eq!(t.evict_expired(T0_MS + 7 * 3_600_000), 1);
    assert!(matches!(t.window(&pid("p"), Metric::Ops, secs(1), T0_MS), Err(TableError::UnknownPartition(_))));
    assert!(t.partitions(secs(1), T0_MS).expect("ok").iter().all(|r| r.parents.is_empty()));
}

#[test]
fn merges_sum_their_parents() {
    let mut t = table();
    let w = wid("w1");
    let mut batch = vec![];
    for k in 0..10 {
        batch.push(sample(2 * k as u64 + 1, T0_MS + (k + 1) * 1000, pstats("a", "t", range(0, 49), 10)));
        batch.push(sample(2 * k as u64 + 2, T0_MS + (k + 1) * 1000, pstats("b", "t", range(50, 99), 20)));
    }
    t.ingest(&w, &batch, T0_MS + 10_000);
    t.ingest(&w, &[sample(100, T0_MS + 11_000, pstats("m", "t", range(0, 99), 30))], T0_MS + 11_000);
    t.link_merge(&[pid("a"), pid("b")], &pid("m")).expect("known");
    let h = t.history(&pid("m"), Metric::Ops, T0_MS, T0_MS + 11_000).expect("known");
    assert_eq!(h.points.len(), 11);
    assert!(h.points.iter().all(|p| (p.value - 30.0).abs() < 0.01), "{h:?}");
}

#[test]
fn sketches_are_kept_per_partition() {
    let mut t = table();
    let mut st = pstats("p", "t", range(0, 99), 10);
    st.sketch = Some(KeySketch {
        bucket_ops: vec![1; 200],
        bucket_bounds: vec![],
        top_keys: vec![],
        sequential_write_ratio: 0.0,
    });
    t.ingest(&wid("w1"), &[sample(1, T0_MS + 1000, st)], T0_MS + 1000);
    assert_eq!(t.sketch(&pid("p")).map(|s| s.bucket_ops.len()), Some(64), "truncated to the protocol bound");
    assert!(t.memory_usage().sketch_bytes > 0);
}

#[derive(Debug, Clone)]
struct Op {
    partition: usize,
    ops: u64,
    delay_secs: i64,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Every sample is counted exactly once however the collector slices, repeats and overlaps
    /// its batches: the window sums equal the sums of the distinct samples, per partition and
    /// per worker, and the ingest stats account for every delivered sample.
    #[test]
    fn every_sample_is_counted_exactly_once(
        ops in prop::collection::vec((0usize..3, 0u64..10_000, 0i64..5), 1..200),
        cuts in prop::collection::vec((0usize..200, 0usize..40), 1..30),
    ) {
        let ops: Vec<Op> = ops.into_iter().map(|(partition, ops, delay_secs)| Op { partition, ops, delay_secs }).collect();
        let names = ["p0", "p1", "p2"];
        // Sample k is stamped k seconds after T0 minus a small delay (out of order within 5 s).
        let samples: Vec<Sample> = ops
            .iter()
            .enumerate()
            .map(|(k, o)| {
                let ts = T0_MS + (k as i64 + 10 - o.delay_secs) * 1000;
                sample(k as u64 + 1, ts, pstats(names[o.partition], "t", range(0, 99), o.ops))
            })
            .collect();
        let now = T0_MS + (samples.len() as i64 + 10) * 1000;
        let mut t = table();
        let w = wid("w1");
        let mut delivered = 0u64;
        let mut accepted = 0u64;
        // Deliver overlapping, repeated slices in increasing start order, then everything again.
        let mut sorted = cuts.clone();
        sorted.sort();
        for (start, len) in sorted {
            let start = start.min(samples.len());
            let end = (start + len).min(samples.len());
            let st = t.ingest(&w, &samples[start..end], now);
            prop_assert_eq!(st.total(), (end - start) as u64);
            delivered += st.total();
            accepted += st.accepted_partition;
        }
        let st = t.ingest(&w, &samples, now);
        prop_assert_eq!(st.total(), samples.len() as u64);
        accepted += st.accepted_partition;
        delivered += st.total();
        prop_assert!(delivered >= samples.len() as u64);
        // Slices may skip ahead (the table only keeps a high-water mark), so count what the table
        // took; with the final full delivery that is every sample not skipped by a later slice.
        let taken: std::collections::BTreeSet<u64> = {
            let mut seen = std::collections::BTreeSet::new();
            let mut sorted = cuts.clone();
            sorted.sort();
            let mut last = 0u64;
            for (start, len) in sorted.into_iter().map(|(s, l)| (s.min(samples.len()), l)).chain([(0, samples.len())]) {
                let end = (start + len).min(samples.len());
                for s in &samples[start..end] {
                    if s.cursor.0 > last {
                        seen.insert(s.cursor.0);
                        last = s.cursor.0;
                    }
                }
            }
            seen
        };
        prop_assert_eq!(accepted, taken.len() as u64);
        let window = secs(samples.len() as u64 + 60);
        let bound = t.error_bounds()[0].coarse_relative_error;
        let mut worker_total = 0.0;
        for (p, name) in names.iter().enumerate() {
            let want: u64 = samples
                .iter()
                .zip(&ops)
                .filter(|(s, o)| o.partition == p && taken.contains(&s.cursor.0))
                .map(|(_, o)| o.ops)
                .sum();
            worker_total += want as f64;
            // Partition series: exact up to the u8 coarse error for the part older than the fine ring.
            match t.window(&pid(name), Metric::Ops, window, now) {
                Ok(s) => prop_assert!((s.sum - want as f64).abs() <= want as f64 * bound + 1e-6, "{} {} {:?}", name, want, s),
                Err(_) => prop_assert_eq!(want, 0),
            }
        }
        let wl = t.worker_load(&w, Metric::Ops, window, now).expect("worker known");
        prop_assert!((wl.sum - worker_total).abs() <= worker_total * 1e-5 + 1e-3, "{} {:?}", worker_total, wl);
    }

    /// The online pass's fused read of six columns is the per-column read, for any window
    /// (inside the fine ring, reaching into the coarse one, before or after the newest sample).
    #[test]
    fn the_fused_column_read_is_the_per_column_read(
        ops in prop::collection::vec(0u64..50_000, 1..300),
        gaps in prop::collection::vec(0i64..3, 1..300),
        from_back in 0i64..400,
        len in 1i64..200,
    ) {
        use super::metric::{COL_BYTES, COL_CPU, COL_ERRORS, COL_LATENCY_P99, COL_OPS, COL_REJECTED};
        use super::metric::View;
        let mut t = table();
        let mut at = T0_MS;
        let samples: Vec<Sample> = ops
            .iter()
            .zip(gaps.iter().cycle())
            .enumerate()
            .map(|(k, (&o, &gap))| {
                at += (1 + gap) * 1000;
                let mut st = pstats("p1", "t", range(0, 99), o.max(4));
                st.errors = o / 7;
                st.latency_p99_us = o as f64;
                sample(k as u64 + 1, at, st)
            })
            .collect();
        t.ingest(&wid("w1"), &samples, at);
        let i = t.partition_idx(&pid("p1")).expect("known");
        let b = t.geo.slot_of(at - 1) - from_back + 20;
        let a = b - len + 1;
        let cols = [COL_OPS, COL_BYTES, COL_CPU, COL_REJECTED, COL_ERRORS, COL_LATENCY_P99];
        let fused = t.pseries.sum_cols(i, cols, a, b);
        for (c, got) in cols.iter().zip(fused) {
            let want = t.pseries.sum(i, View::Col(*c), a, b);
            prop_assert_eq!(got.2, want.2, "column {} any", c);
            prop_assert!((got.0 - want.0).abs() <= 1e-9 * (1.0 + want.0.abs()), "column {}: {:?} vs {:?}", c, got, want);
            prop_assert!((got.1 - want.1).abs() < 1e-9, "column {} covered: {:?} vs {:?}", c, got, want);
        }
    }

    /// The analyzer's read of many partitions a column at a time gives each one's load as its
    /// own read does: partitions with gaps, young ones, quiet ones whose newest sample is older
    /// than the window, one not in the table, and windows inside the fine ring or reaching into
    /// the coarse one.
    #[test]
    fn the_column_at_a_time_read_of_many_is_each_ones_read(
        series in prop::collection::vec((prop::collection::vec(0u64..50_000, 1..120), 0i64..3, 0i64..200), 1..8),
        from_back in 0i64..300,
        len in 1i64..150,
    ) {
        let mut t = table();
        let mut now = T0_MS;
        for (k, (ops, gap, start)) in series.iter().enumerate() {
            let id = format!("p{k}");
            let mut at = T0_MS + start * 1000;
            let samples: Vec<Sample> = ops
                .iter()
                .enumerate()
                .map(|(j, &o)| {
                    at += (1 + gap) * 1000;
                    let mut st = pstats(&id, "t", range(k as u64 * 100, k as u64 * 100 + 99), o);
                    st.rejected = o / 9;
                    sample(j as u64 + 1, at, st)
                })
                .collect();
            now = now.max(at);
            t.ingest(&wid(&format!("w{}", k % 3)), &samples, at);
        }
        let end = now - from_back * 1000;
        let reader = t.rate_reader(secs(len as u64), end, RateBasis::Reported).expect("reader");
        let mut slots: Vec<Option<PartitionSlot>> = (0..series.len()).map(|k| t.locate(&pid(&format!("p{k}")), None)).collect();
        slots.push(None);
        let mut many = vec![PartitionLoad::default(); slots.len()];
        reader.loads_many(&slots, &mut many);
        for (slot, got) in slots.iter().zip(&many) {
            let want = slot.map(|s| PartitionLoad::from(reader.rates_in(s))).unwrap_or_default();
            prop_assert_eq!(got, &want, "slot {:?}", slot);
        }
    }

    /// Windows never count a second twice: covered seconds never exceed the window.
    #[test]
    fn coverage_never_exceeds_the_window(n in 1i64..400, last in 1u64..3000, lag in 0i64..400) {
        let mut t = table();
        let now = T0_MS + (n + lag) * 1000;
        t.ingest(&wid("w1"), &steady("p1", 7, n, 1), now);
        let s = t.window(&pid("p1"), Metric::Ops, secs(last), now).expect("known");
        prop_assert!(s.covered_secs <= s.window_secs);
        prop_assert!(s.covered_secs <= n as f64 + 1e-9);
        // The top-N fast path agrees with the full window statistics.
        let top = t.top_n(Metric::Ops, 1, GroupBy::None, secs(last), now).expect("ok");
        match top.entries.first() {
            Some(e) => prop_assert!((e.value - s.rate_per_sec).abs() <= 1e-9 * (1.0 + s.rate_per_sec), "{:?} {:?}", e, s),
            None => prop_assert_eq!(s.covered_secs, 0.0),
        }
        let r = t.window(&pid("p1"), Metric::ReadOps, secs(last), now).expect("known");
        let top = t.top_n(Metric::ReadOps, 1, GroupBy::None, secs(last), now).expect("ok");
        if let Some(e) = top.entries.first() {
            prop_assert!((e.value - r.rate_per_sec).abs() <= 1e-3 * (1.0 + r.rate_per_sec), "{:?} {:?}", e, r);
        }
    }
}

#[test]
fn unknown_table_and_bad_heatmaps_are_refused() {
    let t = table();
    let tenant = TenantId::new("x").expect("valid");
    let tbl = TableId::new("y").expect("valid");
    assert!(matches!(
        t.heatmap(&tenant, &tbl, Metric::Ops, 0, 1000, 1000, 4, &ApiLimits::default()),
        Err(TableError::UnknownTable { .. })
    ));
    assert!(matches!(
        t.heatmap(&tenant, &tbl, Metric::Ops, 0, 1000, 1500, 4, &ApiLimits::default()),
        Err(TableError::InvalidQuery(_))
    ));
    assert!(matches!(
        t.heatmap(&tenant, &tbl, Metric::Ops, 0, 1000, 1000, 0, &ApiLimits::default()),
        Err(TableError::InvalidQuery(_))
    ));
}

/// Queries beyond what the table holds are refused by name (422), not answered with zeros, a
/// negative window or hundreds of megabytes (issue 17: 46-day heatmaps, window_secs 9.2e15,
/// from/to at the i64 extremes).
#[test]
fn queries_beyond_the_history_or_at_the_extremes_are_refused() {
    let mut t = table();
    t.ingest(&wid("w1"), &[sample(1, T0_MS, pstats("p1", "orders", range(0, 99), 100))], T0_MS);
    let (tenant, tbl) = (TenantId::new("acme").expect("valid"), TableId::new("orders").expect("valid"));
    let history = t.geo.history_ms();
    let invalid = |r: Result<_, TableError>, what: &str| match r {
        Err(TableError::InvalidQuery(m)) => assert!(m.contains(what), "{m}"),
        other => panic!("expected a refusal naming {what}: {other:?}"),
    };
    let now = T0_MS + 1_000;
    invalid(t.workers(Duration::from_millis(history as u64 + 1_000), now).map(|_| ()), "window_secs");
    invalid(
        t.cluster_overview(Metric::Ops, Duration::from_secs(9_200_000_000_000_000), now, Freshness::at_any_time(5_000))
            .map(|_| ()),
        "window_secs",
    );
    invalid(t.top_n(Metric::Ops, 5, GroupBy::None, Duration::from_secs(u64::MAX), now).map(|_| ()), "window_secs");
    let day46 = 46 * 86_400_000;
    invalid(
        t.heatmap(&tenant, &tbl, Metric::Ops, now - day46, now, 1_000, 4, &ApiLimits::default()).map(|_| ()),
        "history",
    );
    invalid(
        t.heatmap(&tenant, &tbl, Metric::Ops, i64::MIN, i64::MAX, 1_000, 4, &ApiLimits::default()).map(|_| ()),
        "history",
    );
    invalid(
        t.heatmap(&tenant, &tbl, Metric::Ops, now - 60_000, now, 1_000 * 1_000_000, 4, &ApiLimits::default())
            .map(|_| ()),
        "step_ms",
    );
    invalid(
        t.heatmap(&tenant, &tbl, Metric::Ops, now - history, now, 1_000, 4096, &ApiLimits::default()).map(|_| ()),
        "cells",
    );
    invalid(t.history(&pid("p1"), Metric::Ops, i64::MIN, i64::MAX).map(|_| ()), "history");
    assert!(
        t.heatmap(&tenant, &tbl, Metric::Ops, now - 60_000, now, 1_000, 64, &ApiLimits::default()).is_ok(),
        "a minute of seconds is fine"
    );
    // The limits are the config's: a smaller [api] max_heatmap_cells refuses the same grid.
    let small = ApiLimits { max_heatmap_cells: 100, ..ApiLimits::default() };
    let refused = t.heatmap(&tenant, &tbl, Metric::Ops, now - 60_000, now, 1_000, 64, &small);
    assert!(
        matches!(&refused, Err(TableError::InvalidQuery(m)) if m.contains("[api] max_heatmap_cells")),
        "{refused:?}"
    );
    let few = ApiLimits { max_heatmap_key_buckets: 8, ..ApiLimits::default() };
    let refused = t.heatmap(&tenant, &tbl, Metric::Ops, now - 60_000, now, 1_000, 64, &few);
    assert!(matches!(&refused, Err(TableError::InvalidQuery(m)) if m.contains("1..=8")), "{refused:?}");
}

#[test]
fn parallel_top_n_over_many_partitions_matches_the_sequential_answer() {
    // Above PARALLEL_SCAN_MIN_PARTITIONS the scan runs on several threads: the five hot
    // partitions sit in different threads' ranges and must all be found, in order.
    let mut t = table();
    let n = 25_000u64;
    let hot =
        [(24_990u64, 9_000_000u64), (10, 7_000_000), (13_000, 5_000_000), (7_000, 3_000_000), (19_000, 1_000_000)];
    let ops_of = |i: u64| hot.iter().find(|(h, _)| *h == i).map_or(100 + i % 1000, |(_, ops)| *ops);
    let samples: Vec<Sample> = (0..n)
        .map(|i| sample(i + 1, T0_MS, pstats(&format!("p{i}"), "orders", range(i * 10, i * 10 + 9), ops_of(i))))
        .collect();
    t.ingest(&wid("w1"), &samples, T0_MS);
    let top = t.top_n(Metric::Ops, 5, GroupBy::None, secs(10), T0_MS + 1_000).expect("top");
    let got: Vec<String> = top
        .entries
        .iter()
        .map(|e| match &e.key {
            GroupKey::Partition { partition } => partition.to_string(),
            other => panic!("unexpected key {other:?}"),
        })
        .collect();
    let want: Vec<String> = hot.iter().map(|(i, _)| format!("p{i}")).collect();
    assert_eq!(got, want);
    for (entry, (i, _)) in top.entries.iter().zip(&hot) {
        let one = t.window(&pid(&format!("p{i}")), Metric::Ops, secs(10), T0_MS + 1_000).expect("window");
        assert!((entry.value - one.rate_per_sec).abs() < 1e-6, "top-N agrees with window for p{i}");
    }
}
