//! Ingest: samples of one worker into the partition and worker series, exactly once.

use lb_common::ids::WorkerId;
use lb_common::protocol::{HostStats, MAX_REPORT_INTERVAL_MS, PartitionStats, Sample, SampleData};

use super::metric::{
    COL_BYTES, COL_CPU, COL_ERRORS, COL_HOST_CPU, COL_LATENCY_P99, COL_NET_BYTES, COL_OPS, COL_REJECTED, COL_WRITE_OPS,
};
use super::store::{IngestStats, MetricsTable};

impl MetricsTable {
    /// Ingests samples served by `worker`, in cursor order (as `AgentCollect` delivers them).
    ///
    /// Idempotent per `(worker, cursor)`: the table remembers each worker's highest ingested
    /// cursor and counts anything at or below it as a duplicate, so a re-delivered batch changes
    /// nothing. `now_ms` only bounds clock skew (samples far in the future are refused).
    pub fn ingest(&mut self, worker: &WorkerId, samples: &[Sample], now_ms: i64) -> IngestStats {
        let mut stats = IngestStats::default();
        let Some(w) = self.worker_idx_or_insert(worker) else {
            stats.over_capacity = samples.len() as u64;
            return stats;
        };
        let max_ts = now_ms.saturating_add(self.config.max_future_skew.as_millis() as i64);
        for sample in samples {
            let last = self.workers[w as usize].last_cursor;
            if last.is_some_and(|c| sample.cursor <= c) {
                stats.duplicate += 1;
                continue;
            }
            self.workers[w as usize].last_cursor = Some(sample.cursor);
            if sample.interval_ms == 0 || sample.interval_ms > MAX_REPORT_INTERVAL_MS {
                stats.invalid += 1;
                continue;
            }
            if sample.timestamp_ms > max_ts {
                stats.rejected_future += 1;
                continue;
            }
            // The agent's own host readings say the host is up, not that the worker reported.
            if !sample.agent_sampled {
                let newest = &mut self.workers[w as usize].last_sample_ms;
                *newest = Some(newest.map_or(sample.timestamp_ms, |t| t.max(sample.timestamp_ms)));
            }
            let slot = self.geo.slot_of(sample.timestamp_ms - 1);
            self.newest_slot = Some(self.newest_slot.map_or(slot, |s| s.max(slot)));
            match &sample.data {
                SampleData::Partition(p) => self.ingest_partition(w, sample, p, &mut stats),
                SampleData::Host(h) => self.ingest_host(w, sample, h, &mut stats),
            }
        }
        stats
    }

    /// The end of the newest fine step that every worker heard from within `horizon_ms` has
    /// delivered. Reports reach the table a collection round after they were made, so a window
    /// ending at `now_ms` would count the seconds still on their way as idle and under-read
    /// every rate (by a fifth over a 5 s window); the online analyzer ends its windows here.
    /// Workers silent for longer than the horizon (dead, or with nothing to report) do not
    /// hold it back. Without any recent worker it is `now_ms`.
    pub fn complete_until_ms(&self, now_ms: i64, horizon_ms: i64) -> i64 {
        let step = self.geo.fine_step_ms;
        self.workers
            .iter()
            .filter_map(|w| w.last_sample_ms)
            .filter(|&t| t >= now_ms - horizon_ms)
            .min()
            .map_or(now_ms, |t| t.min(now_ms).div_euclid(step) * step)
    }

    /// The collector calls this when an agent's cursors were reset (its store was lost), so
    /// that its new, lower cursors are not taken for duplicates.
    pub fn forget_cursor(&mut self, worker: &WorkerId) {
        if let Some(&w) = self.worker_index.get(worker) {
            self.workers[w as usize].last_cursor = None;
        }
    }

    fn ingest_partition(&mut self, w: u32, sample: &Sample, p: &PartitionStats, stats: &mut IngestStats) {
        if !p.key_range.is_valid() {
            stats.invalid += 1;
            return;
        }
        let Some(i) = self.partition_idx_or_insert(&p.partition_id, &p.tenant, &p.table, p.key_range, None) else {
            stats.over_capacity += 1;
            return;
        };
        let geo = self.geo;
        // The sample covers `[ts - interval, ts)`: file it under the slot of its last milli and
        // spread it over the slots its interval covers.
        let last_slot = geo.slot_of(sample.timestamp_ms - 1);
        if !self.pseries.open(i, last_slot) {
            stats.dropped_late += 1;
            return;
        }
        let head = self.pseries.head(i);
        let covered = (sample.interval_ms as i64 / geo.fine_step_ms).max(1);
        let lowest = geo.lowest_open(head).max(last_slot - (geo.fine_len - geo.factor) + 1);
        let n = covered.min(last_slot - lowest + 1).max(1);
        let per_slot_secs = (n * geo.fine_step_ms) as f64 / 1000.0;
        let latency = if p.latency_p99_us.is_finite() { p.latency_p99_us.max(0.0) } else { 0.0 };
        let values = [
            (COL_OPS, p.ops() as f64 / per_slot_secs),
            (COL_WRITE_OPS, p.write_ops as f64 / per_slot_secs),
            (COL_BYTES, p.read_bytes.saturating_add(p.write_bytes) as f64 / per_slot_secs),
            (COL_CPU, p.cpu_time_us as f64 / 1e6 / per_slot_secs),
            (COL_REJECTED, p.rejected as f64 / per_slot_secs),
            (COL_ERRORS, p.errors as f64 / per_slot_secs),
            (COL_LATENCY_P99, latency),
        ];
        for s in last_slot - n + 1..=last_slot {
            for &(col, v) in &values {
                self.pseries.write(i, col, s, v);
            }
        }
        // The worker's series: the same values added up over its partitions. Its head runs ahead
        // of any one partition's, so a sample late for the worker is still kept for the partition.
        if self.wseries.open(w, last_slot) {
            let first = (last_slot - n + 1).max(geo.lowest_open(self.wseries.head(w)));
            // Fewer open slots than the partition got: put the same total into them.
            let stretch = n as f64 / (last_slot - first + 1) as f64;
            for s in first..=last_slot {
                for &(col, v) in &values {
                    let v = if col == COL_LATENCY_P99 { v } else { v * stretch };
                    self.wseries.write(w, col, s, v);
                }
            }
        }
        let e = self.partitions[i as usize].as_mut().expect("index points at a live entry");
        e.first_slot = Some(e.first_slot.map_or(last_slot - n + 1, |f| f.min(last_slot - n + 1)));
        if e.latest_ts_ms.is_none_or(|t| sample.timestamp_ms >= t) {
            e.latest_ts_ms = Some(sample.timestamp_ms);
            e.stored_bytes = p.stored_bytes;
            e.range = p.key_range;
            e.last_worker = Some(w);
            if let Some(sketch) = &p.sketch {
                Self::keep_sketch(e, sketch, p.key_range, &mut self.sketch_seq);
            }
        }
        stats.accepted_partition += 1;
    }

    fn ingest_host(&mut self, w: u32, sample: &Sample, h: &HostStats, stats: &mut IngestStats) {
        let slot = self.geo.slot_of(sample.timestamp_ms - 1);
        if !self.wseries.open(w, slot) {
            stats.dropped_late += 1;
            return;
        }
        let finite = |x: f64| if x.is_finite() { x.max(0.0) } else { 0.0 };
        // The worker reported this second: its load columns read zero unless partition samples
        // add to them, so a report that listed no partition (all idle) still counts as one. A
        // reading of the agent's own sampler says only that the host is up.
        if !sample.agent_sampled {
            for col in [COL_OPS, COL_WRITE_OPS, COL_BYTES, COL_CPU, COL_REJECTED, COL_ERRORS] {
                self.wseries.write(w, col, slot, 0.0);
            }
        }
        self.wseries.write(w, COL_HOST_CPU, slot, finite(h.cpu_ratio));
        self.wseries.write(w, COL_NET_BYTES, slot, finite(h.net_rx_bytes_per_sec) + finite(h.net_tx_bytes_per_sec));
        stats.accepted_host += 1;
    }
}
