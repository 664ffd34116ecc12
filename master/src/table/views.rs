//! Console views: the key-space heatmap of a table and a partition's history through lineage.

use std::collections::BTreeMap;

use lb_common::ids::{Key, KeyRange, PartitionId, TableId, TenantId};
pub use lb_common::protocol::{Heatmap, History, HistoryPoint};

use super::metric::{MetricColumns, View};
use super::store::MetricsTable;
use super::{MAX_LINEAGE_DEPTH, Metric, TableError};
use crate::config::ApiLimits;

impl MetricsTable {
    /// Time × key-range heatmap of `metric` for one table over `[from_ms, to_ms)`, in cells of
    /// `step_ms` (a multiple of the fine step) and `key_buckets` equal key ranges.
    #[allow(clippy::too_many_arguments)]
    pub fn heatmap(
        &self,
        tenant: &TenantId,
        table: &TableId,
        metric: Metric,
        from_ms: i64,
        to_ms: i64,
        step_ms: i64,
        key_buckets: usize,
        limits: &ApiLimits,
    ) -> Result<Heatmap, TableError> {
        let bad = |m: String| Err(TableError::InvalidQuery(m));
        let fine = self.geo.fine_step_ms;
        if step_ms <= 0 || !(step_ms as u64).is_multiple_of(fine as u64) || to_ms <= from_ms {
            return bad(format!("step_ms must be a positive multiple of {fine} and to_ms > from_ms"));
        }
        let history_ms = self.geo.history_ms();
        let span_ms = to_ms.checked_sub(from_ms).filter(|&s| s <= history_ms);
        let Some(span_ms) = span_ms else {
            return bad(format!("from_ms..to_ms spans more than the table's history ({} s)", history_ms / 1000));
        };
        if step_ms > span_ms {
            return bad(format!("step_ms: {step_ms} is longer than from_ms..to_ms ({span_ms} ms)"));
        }
        let (max_buckets, max_cells) = (limits.max_heatmap_key_buckets, limits.max_heatmap_cells);
        if key_buckets == 0 || key_buckets > max_buckets {
            return bad(format!("key_buckets must be 1..={max_buckets} ([api] max_heatmap_key_buckets)"));
        }
        let rows = (span_ms + step_ms - 1) / step_ms;
        if rows as usize > max_cells / key_buckets {
            return bad(format!("heatmap over {max_cells} cells ([api] max_heatmap_cells)"));
        }
        let view = metric.partition_view().ok_or(TableError::MetricNotAvailable { metric, scope: "partition" })?;
        let unknown = || TableError::UnknownTable { tenant: tenant.clone(), table: table.clone() };
        let t = *self.tenant_index.get(tenant).ok_or_else(unknown)?;
        let ti = *self.table_index.get(&(t, table.clone())).ok_or_else(unknown)?;
        let members = &self.tables[ti as usize].partitions;
        let rows = rows as usize;
        let times_ms: Vec<i64> = (0..rows as i64).map(|r| from_ms + r * step_ms).collect();
        let (span_start, span_end) = members
            .iter()
            .map(|&i| self.entry(i).range)
            .fold((u64::MAX, 0u64), |(s, e), r| (s.min(r.start.0), e.max(r.end.0)));
        if members.is_empty() {
            let key_buckets = vec![];
            return Ok(Heatmap {
                tenant: tenant.clone(),
                table: table.clone(),
                metric,
                step_ms,
                times_ms,
                key_buckets,
                values: vec![],
                bucket_partitions: vec![],
            });
        }
        let span = u128::from(span_end - span_start) + 1;
        // A span narrower than the bucket count gets one bucket per key.
        let nb = (key_buckets as u128).min(span);
        let key_buckets = nb as usize;
        let mut values = vec![0.0f32; rows * key_buckets];
        let buckets: Vec<KeyRange> = (0..nb)
            .map(|b| {
                let (s, e) = (b * span / nb, (b + 1) * span / nb - 1);
                KeyRange { start: Key(span_start + s as u64), end: Key(span_start + e as u64) }
            })
            .collect();
        let cell_slots = step_ms / fine;
        let first_slot = self.geo.slot_of(from_ms);
        let last_slot = first_slot + rows as i64 * cell_slots - 1;
        let is_rate = metric.is_rate();
        let mut sums = vec![0.0f64; rows];
        let mut covered = vec![0.0f64; rows];
        let mut overlaps: Vec<(usize, f64)> = Vec::new();
        let mut bucket_partitions: Vec<Option<PartitionId>> = vec![None; key_buckets];
        for &i in members {
            let e = self.entry(i);
            if e.gone {
                continue;
            }
            let b0 = ((u128::from(e.range.start.0 - span_start) * nb / span) as usize).saturating_sub(1);
            let b1 = ((u128::from(e.range.end.0 - span_start) * nb / span) as usize + 1).min(key_buckets - 1);
            for b in b0..=b1 {
                if e.range.contains(buckets[b].start) {
                    bucket_partitions[b] = Some(e.id.clone());
                }
            }
        }
        for &i in members {
            sums.fill(0.0);
            covered.fill(0.0);
            let mut any = false;
            self.pseries.fold(i, view, first_slot, last_slot, |p| {
                any = true;
                let (mut s, mut left) = (p.slot, p.slots);
                while left > 0 {
                    let row = ((s - first_slot) / cell_slots) as usize;
                    let row_end = first_slot + (row as i64 + 1) * cell_slots;
                    let take = left.min(row_end - s);
                    let w = p.weight * take as f64 / p.slots as f64;
                    sums[row] += p.value * w;
                    covered[row] += w;
                    s += take;
                    left -= take;
                }
            });
            if !any {
                continue;
            }
            let r = self.entry(i).range;
            let width = r.width();
            // Integer division may put an edge one bucket off; the overlap test below settles it.
            let b0 = ((u128::from(r.start.0 - span_start) * nb / span) as usize).saturating_sub(1);
            let b1 = ((u128::from(r.end.0 - span_start) * nb / span) as usize + 1).min(key_buckets - 1);
            overlaps.clear();
            for (b, kr) in buckets.iter().enumerate().take(b1 + 1).skip(b0) {
                let lo = kr.start.0.max(r.start.0);
                let hi = kr.end.0.min(r.end.0);
                if lo <= hi {
                    overlaps.push((b, (hi - lo) as f64 + 1.0));
                }
            }
            for row in 0..rows {
                if covered[row] <= 0.0 {
                    continue;
                }
                let cell = &mut values[row * key_buckets..(row + 1) * key_buckets];
                if is_rate {
                    let rate = sums[row] / cell_slots as f64;
                    for &(b, w) in &overlaps {
                        cell[b] += (rate * w / width) as f32;
                    }
                } else {
                    let mean = (sums[row] / covered[row]) as f32;
                    for &(b, _) in &overlaps {
                        cell[b] = cell[b].max(mean);
                    }
                }
            }
        }
        Ok(Heatmap {
            tenant: tenant.clone(),
            table: table.clone(),
            metric,
            step_ms,
            times_ms,
            key_buckets: buckets,
            values,
            bucket_partitions,
        })
    }

    /// A partition's series over `[from_ms, to_ms)` at the resolution stored (coarse points for
    /// the older part, fine for the recent). Before the partition's first sample the points are
    /// its ancestors': a split child inherits its key-range share of the parent's rates, a
    /// merged child the sum of its parents' (gauges: the max), up to [`MAX_LINEAGE_DEPTH`].
    pub fn history(
        &self,
        partition: &PartitionId,
        metric: Metric,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<History, TableError> {
        let i = self.partition_idx(partition)?;
        let view = metric.partition_view().ok_or(TableError::MetricNotAvailable { metric, scope: "partition" })?;
        if to_ms <= from_ms {
            return Err(TableError::InvalidQuery("to_ms must be after from_ms".into()));
        }
        let history_ms = self.geo.history_ms();
        if to_ms.checked_sub(from_ms).is_none_or(|span| span > history_ms) {
            return Err(TableError::InvalidQuery(format!(
                "from_ms..to_ms spans more than the table's history ({} s)",
                history_ms / 1000
            )));
        }
        let a = self.geo.slot_of(from_ms);
        let b = self.geo.slot_of(to_ms - 1);
        let mut acc: BTreeMap<i64, (i64, f64)> = BTreeMap::new();
        self.history_into(i, view, metric.is_rate(), a, b, 1.0, 0, &mut acc);
        let step = self.geo.fine_step_ms;
        let points = acc
            .into_iter()
            .map(|(slot, (slots, value))| HistoryPoint { ts_ms: slot * step, step_ms: slots * step, value })
            .collect();
        Ok(History { partition: partition.clone(), metric, points })
    }

    #[allow(clippy::too_many_arguments)]
    fn history_into(
        &self,
        i: u32,
        view: View,
        is_rate: bool,
        a: i64,
        b: i64,
        scale: f64,
        depth: usize,
        acc: &mut BTreeMap<i64, (i64, f64)>,
    ) {
        let e = self.entry(i);
        let born = e.first_slot.unwrap_or(i64::MAX);
        self.pseries.fold(i, view, a.max(born), b, |p| {
            // Rates over the point's whole span (uncovered seconds as zero), like fine points.
            let v = if is_rate { p.value * scale * p.weight / p.slots as f64 } else { p.value };
            acc.entry(p.slot)
                .and_modify(|(_, old)| *old = if is_rate { *old + v } else { old.max(v) })
                .or_insert((p.slots, v));
        });
        if a < born && depth < MAX_LINEAGE_DEPTH {
            let end = b.min(born.saturating_sub(1));
            for parent in &e.parents {
                self.history_into(parent.idx, view, is_rate, a, end, scale * parent.share, depth + 1, acc);
            }
        }
    }
}
