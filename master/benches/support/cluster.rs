//! A synthetic cluster that produces partition samples a second at a time, for the table's
//! benchmark and its scale example (`examples/table_scale.rs`).

use lb_common::ids::{Key, KeyRange, PartitionId, TableId, TenantId, WorkerId};
use lb_common::protocol::{Cursor, PartitionStats, Sample, SampleData};
use lb_master::table::MetricsTable;

/// Workers of [`Cluster::new`].
pub const WORKERS: usize = 100;

/// A cluster of `n` partitions over `tables` tables, spread over [`WORKERS`] workers, that
/// produces one second (or `interval_ms`) of samples at a time.
pub struct Cluster {
    pub templates: Vec<PartitionStats>,
    pub workers: Vec<WorkerId>,
    cursors: Vec<u64>,
}

impl Cluster {
    pub fn new(n: usize, tables: usize) -> Self {
        Self::with_workers(n, tables, WORKERS)
    }

    pub fn with_workers(n: usize, tables: usize, workers: usize) -> Self {
        let per_table = n.div_ceil(tables) as u64;
        let width = u64::MAX / per_table;
        let templates = (0..n)
            .map(|i| {
                let j = i as u64 % per_table;
                let end = if j + 1 == per_table { u64::MAX } else { (j + 1) * width - 1 };
                PartitionStats {
                    tenant: TenantId::new(format!("tenant{}", i % 10)).unwrap(),
                    table: TableId::new(format!("table{}", i % tables)).unwrap(),
                    partition_id: PartitionId::new(format!("p{i}")).unwrap(),
                    key_range: KeyRange { start: Key(j * width), end: Key(end) },
                    read_ops: 0,
                    write_ops: 0,
                    read_bytes: 0,
                    write_bytes: 0,
                    errors: 0,
                    rejected: 0,
                    latency_p50_us: 200.0,
                    latency_p99_us: 2_000.0,
                    cpu_time_us: 0,
                    stored_bytes: 1 << 30,
                    sketch: None,
                }
            })
            .collect();
        let cursors = vec![0; workers];
        let workers = (0..workers).map(|w| WorkerId::new(format!("w{w}")).unwrap()).collect();
        Self { templates, workers, cursors }
    }

    /// Per worker, the samples of all partitions for the interval ending at `ts_ms`.
    pub fn batches(&mut self, ts_ms: i64, interval_ms: u64) -> Vec<(WorkerId, Vec<Sample>)> {
        let mut out: Vec<(WorkerId, Vec<Sample>)> = self.workers.iter().map(|w| (w.clone(), Vec::new())).collect();
        let nw = self.workers.len();
        for (i, t) in self.templates.iter().enumerate() {
            let w = i % nw;
            let mut s = t.clone();
            // A skewed, time-varying load so that top-N and the heatmap have something to rank.
            let ops = ((i * 7919 + ts_ms as usize / 1000) % 1000) as u64 * (interval_ms / 1000);
            s.read_ops = ops;
            s.write_ops = ops / 3;
            s.read_bytes = ops * 512;
            s.cpu_time_us = ops * 20;
            s.rejected = ops / 100;
            self.cursors[w] += 1;
            out[w].1.push(Sample {
                cursor: Cursor(self.cursors[w]),
                timestamp_ms: ts_ms,
                interval_ms,
                data: SampleData::Partition(s),
                agent_sampled: false,
            });
        }
        out
    }

    pub fn fill(&mut self, table: &mut MetricsTable, from_ms: i64, secs: i64, interval_ms: u64) -> i64 {
        let step = interval_ms as i64;
        let mut ts = from_ms;
        for _ in 0..(secs * 1000 / step) {
            ts += step;
            for (w, batch) in self.batches(ts, interval_ms) {
                table.ingest(&w, &batch, ts);
            }
        }
        ts
    }
}
