//! The recent window: the newest committed samples in memory, in cursor order, so that pullers
//! that keep up are served without touching SQLite.
//!
//! Invariant: the window holds *every* committed sample with a cursor above `evicted_through`,
//! contiguous and in order (the store's single writer appends right after each commit). So a
//! request for `after >= evicted_through` is answered completely from memory; anything older
//! goes to SQLite. The window is bounded by age and by an estimate of its heap bytes, whichever
//! bites first: the bytes bound is hard, whatever the partition count.

use std::collections::VecDeque;

use lb_common::protocol::{Cursor, Sample, SampleData};

#[derive(Debug)]
pub struct Window {
    samples: VecDeque<Sample>,
    /// Highest cursor no longer in the window (0 when nothing was ever evicted).
    evicted_through: Cursor,
    bytes: usize,
}

impl Window {
    /// An empty window whose older data (up to and including `evicted_through`) lives in SQLite.
    pub fn new(evicted_through: Cursor) -> Self {
        Self { samples: VecDeque::new(), evicted_through, bytes: 0 }
    }

    /// Appends committed samples (cursors increasing) and evicts what is past the bounds.
    pub fn append(
        &mut self,
        samples: impl IntoIterator<Item = Sample>,
        newest_ts_ms: i64,
        max_age_ms: u64,
        max_bytes: usize,
    ) {
        for sample in samples {
            debug_assert!(self.samples.back().is_none_or(|last| last.cursor < sample.cursor));
            self.bytes += estimated_bytes(&sample);
            self.samples.push_back(sample);
        }
        let oldest_kept_ms = newest_ts_ms.saturating_sub(i64::try_from(max_age_ms).unwrap_or(i64::MAX));
        while let Some(front) = self.samples.front() {
            if self.bytes <= max_bytes && front.timestamp_ms >= oldest_kept_ms {
                break;
            }
            let front = self.samples.pop_front().expect("front exists");
            self.bytes -= estimated_bytes(&front);
            self.evicted_through = front.cursor;
        }
    }

    /// Samples with a cursor above `after`, at most `limit`; `None` if some of them are no longer
    /// in memory (read SQLite instead).
    pub fn read_after(&self, after: Cursor, limit: usize) -> Option<Vec<Sample>> {
        if after < self.evicted_through {
            return None;
        }
        let start = self.samples.partition_point(|s| s.cursor <= after);
        Some(self.samples.range(start..).take(limit).cloned().collect())
    }

    /// Drops every sample up to `cursor` (retention removed them from SQLite).
    pub fn evict_through(&mut self, cursor: Cursor) {
        while let Some(front) = self.samples.front().filter(|s| s.cursor <= cursor) {
            self.bytes -= estimated_bytes(front);
            self.samples.pop_front();
        }
        self.evicted_through = self.evicted_through.max(cursor);
    }

    pub fn newest_cursor(&self) -> Cursor {
        self.samples.back().map(|s| s.cursor).unwrap_or(self.evicted_through)
    }

    pub fn len(&self) -> usize {
        self.samples.len()
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

/// Heap and inline bytes of one sample, close enough to bound memory (ids and sketch vectors
/// dominate; allocator overhead is covered by a 16-byte allowance per allocation).
pub fn estimated_bytes(sample: &Sample) -> usize {
    const ALLOC: usize = 16;
    let inline = std::mem::size_of::<Sample>();
    match &sample.data {
        SampleData::Host(_) => inline,
        SampleData::Partition(p) => {
            let ids = p.tenant.as_str().len() + p.table.as_str().len() + p.partition_id.as_str().len() + 3 * ALLOC;
            let sketch = p.sketch.as_ref().map_or(0, |s| {
                std::mem::size_of_val(s)
                    + s.bucket_ops.len() * 8
                    + s.top_keys.len() * std::mem::size_of::<lb_common::protocol::TopKey>()
                    + 3 * ALLOC
            });
            inline + ids + sketch
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lb_common::protocol::HostStats;

    fn host(cursor: u64, ts: i64) -> Sample {
        Sample {
            cursor: Cursor(cursor),
            timestamp_ms: ts,
            interval_ms: 1000,
            data: SampleData::Host(HostStats {
                cpu_ratio: 0.5,
                cpu_cores: 2,
                memory_used_bytes: 1,
                memory_total_bytes: 2,
                net_rx_bytes_per_sec: 0.0,
                net_tx_bytes_per_sec: 0.0,
                disk_read_bytes_per_sec: 0.0,
                disk_write_bytes_per_sec: 0.0,
            }),
        }
    }

    #[test]
    fn serves_from_memory_only_what_it_fully_holds() {
        let mut w = Window::new(Cursor(10));
        w.append((11..=20).map(|c| host(c, c as i64 * 1000)), 20_000, 1_000_000, usize::MAX);
        assert_eq!(w.read_after(Cursor(9), 100), None, "cursor 10 is only in SQLite");
        let all = w.read_after(Cursor(10), 100).expect("in memory");
        assert_eq!(all.first().map(|s| s.cursor), Some(Cursor(11)));
        let page = w.read_after(Cursor(15), 3).expect("in memory");
        assert_eq!(page.iter().map(|s| s.cursor.0).collect::<Vec<_>>(), [16, 17, 18]);
        assert_eq!(w.read_after(Cursor(20), 10), Some(vec![]));
        assert_eq!(w.newest_cursor(), Cursor(20));
    }

    #[test]
    fn evicts_by_age_and_bytes() {
        let mut w = Window::new(Cursor(0));
        w.append((1..=10).map(|c| host(c, c as i64 * 1000)), 10_000, 4_000, usize::MAX);
        assert_eq!(w.len(), 5, "samples at 6..10 s are within 4 s of 10 s");
        assert_eq!(w.read_after(Cursor(4), 10), None);
        assert!(w.read_after(Cursor(5), 10).is_some());
        let one = estimated_bytes(&host(1, 0));
        w.append((11..=12).map(|c| host(c, 10_000)), 10_000, 1_000_000, 3 * one);
        assert_eq!(w.len(), 3);
        assert!(w.bytes() <= 3 * one);
        assert_eq!(w.newest_cursor(), Cursor(12));
    }
}
