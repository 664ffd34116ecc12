//! The recent window: the newest committed samples in memory, in cursor order, so that pullers
//! that keep up are served without touching SQLite.
//!
//! Invariant: the window holds *every* committed sample with a cursor above `evicted_through`,
//! in order (the store's single writer appends right after each commit). So a request for
//! `after >= evicted_through` is answered completely from memory; anything older goes to SQLite.
//!
//! Memory is bounded by age and by bytes, whichever bites first; the bytes bound is hard whatever
//! the partition count. Samples are kept compact, about 90 bytes each instead of ~500 as
//! protocol structs: partition identities (tenant, table, id, range) are shared through an `Arc`
//! per partition, and each sample's numbers are varint-encoded into its report's byte buffer.
//! Serving decodes them back, exactly.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use lb_common::ids::{Key, KeyRange, PartitionId, TableId, TenantId};
use lb_common::protocol::{Cursor, HostStats, KeySketch, PartitionStats, Sample, SampleData, TopKey};

/// What a partition sample shares with every other sample of the same partition.
#[derive(Debug, PartialEq)]
struct Identity {
    tenant: TenantId,
    table: TableId,
    partition_id: PartitionId,
    key_range: KeyRange,
}

/// One committed sample, borrowed, as the writer (or the start-up reload) hands it over.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    pub cursor: Cursor,
    pub timestamp_ms: i64,
    pub interval_ms: u64,
    pub data: RecordData<'a>,
}

#[derive(Debug, Clone, Copy)]
pub enum RecordData<'a> {
    /// `partition_ref` is the store's id of the partition's identity row.
    Partition { partition_ref: i64, stats: &'a PartitionStats },
    /// `agent_sampled`: a reading of the agent's own sampler, not its worker's.
    Host { stats: &'a HostStats, agent_sampled: bool },
}

#[derive(Debug)]
struct Entry {
    cursor: u64,
    /// `None` for a host sample.
    identity: Option<Arc<Identity>>,
    /// Start of the sample's bytes in its segment's buffer; it ends where the next one starts.
    offset: u32,
}

/// Samples sharing one timestamp and interval (one report, or one host reading).
#[derive(Debug)]
struct Segment {
    timestamp_ms: i64,
    interval_ms: u64,
    entries: Vec<Entry>,
    data: Vec<u8>,
}

impl Segment {
    fn first_cursor(&self) -> u64 {
        self.entries.first().map_or(0, |e| e.cursor)
    }

    fn last_cursor(&self) -> u64 {
        self.entries.last().map_or(0, |e| e.cursor)
    }

    fn bytes(&self) -> usize {
        std::mem::size_of::<Segment>() + self.entries.capacity() * std::mem::size_of::<Entry>() + self.data.capacity()
    }

    fn sample(&self, i: usize) -> Sample {
        let entry = &self.entries[i];
        let end = self.entries.get(i + 1).map_or(self.data.len(), |e| e.offset as usize);
        let mut r = Reader(&self.data[entry.offset as usize..end]);
        let (data, agent_sampled) = match &entry.identity {
            Some(id) => (SampleData::Partition(decode_partition(&mut r, id)), false),
            None => {
                let agent_sampled = r.byte() != 0;
                (SampleData::Host(decode_host(&mut r)), agent_sampled)
            }
        };
        Sample {
            cursor: Cursor(entry.cursor),
            timestamp_ms: self.timestamp_ms,
            interval_ms: self.interval_ms,
            data,
            agent_sampled,
        }
    }
}

/// Appends between two prunes of unused identities.
const PRUNE_EVERY_SEGMENTS: u32 = 256;

#[derive(Debug)]
pub struct Window {
    segments: VecDeque<Segment>,
    identities: HashMap<i64, Arc<Identity>>,
    /// Highest cursor no longer in the window (0 when nothing was ever evicted).
    evicted_through: Cursor,
    bytes: usize,
    samples: usize,
    appends_since_prune: u32,
}

impl Window {
    /// An empty window whose older data (up to and including `evicted_through`) lives in SQLite.
    pub fn new(evicted_through: Cursor) -> Self {
        Self {
            segments: VecDeque::new(),
            identities: HashMap::new(),
            evicted_through,
            bytes: 0,
            samples: 0,
            appends_since_prune: 0,
        }
    }

    /// Appends committed records (cursors increasing) and evicts what is past the bounds.
    pub fn append<'a>(&mut self, records: impl IntoIterator<Item = Record<'a>>, max_age_ms: u64, max_bytes: usize) {
        let mut newest_ts = i64::MIN;
        let mut current: Option<Segment> = None;
        for record in records {
            debug_assert!(record.cursor.0 > self.newest_cursor().0);
            newest_ts = newest_ts.max(record.timestamp_ms);
            let same = current
                .as_ref()
                .is_some_and(|s| s.timestamp_ms == record.timestamp_ms && s.interval_ms == record.interval_ms);
            if !same && let Some(done) = current.take() {
                self.push_segment(done);
            }
            let segment = current.get_or_insert_with(|| Segment {
                timestamp_ms: record.timestamp_ms,
                interval_ms: record.interval_ms,
                entries: Vec::new(),
                data: Vec::new(),
            });
            let offset = u32::try_from(segment.data.len()).expect("a report's samples stay far below 4 GiB");
            let identity = match record.data {
                RecordData::Partition { partition_ref, stats } => {
                    encode_partition(&mut segment.data, stats);
                    Some(self.identity(partition_ref, stats))
                }
                RecordData::Host { stats, agent_sampled } => {
                    segment.data.push(u8::from(agent_sampled));
                    encode_host(&mut segment.data, stats);
                    None
                }
            };
            segment.entries.push(Entry { cursor: record.cursor.0, identity, offset });
        }
        if let Some(done) = current {
            self.push_segment(done);
        }
        self.evict(newest_ts.saturating_sub(i64::try_from(max_age_ms).unwrap_or(i64::MAX)), max_bytes);
    }

    fn identity(&mut self, partition_ref: i64, stats: &PartitionStats) -> Arc<Identity> {
        let fresh = || {
            Arc::new(Identity {
                tenant: stats.tenant.clone(),
                table: stats.table.clone(),
                partition_id: stats.partition_id.clone(),
                key_range: stats.key_range,
            })
        };
        self.identities.entry(partition_ref).or_insert_with(fresh).clone()
    }

    fn push_segment(&mut self, mut segment: Segment) {
        segment.entries.shrink_to_fit();
        segment.data.shrink_to_fit();
        self.bytes += segment.bytes();
        self.samples += segment.entries.len();
        self.segments.push_back(segment);
        self.appends_since_prune += 1;
        if self.appends_since_prune >= PRUNE_EVERY_SEGMENTS {
            // Identities only the table still holds belong to partitions no longer in the window.
            self.identities.retain(|_, id| Arc::strong_count(id) > 1);
            self.appends_since_prune = 0;
        }
    }

    fn evict(&mut self, oldest_kept_ms: i64, max_bytes: usize) {
        while let Some(front) = self.segments.front() {
            if self.bytes <= max_bytes && front.timestamp_ms >= oldest_kept_ms {
                break;
            }
            self.pop_front();
        }
    }

    fn pop_front(&mut self) {
        if let Some(front) = self.segments.pop_front() {
            self.bytes -= front.bytes();
            self.samples -= front.entries.len();
            self.evicted_through = Cursor(front.last_cursor());
        }
    }

    /// Drops every sample up to `cursor` (retention removed them from SQLite).
    pub fn evict_through(&mut self, cursor: Cursor) {
        while self.segments.front().is_some_and(|s| s.first_cursor() <= cursor.0) {
            self.pop_front();
        }
        self.evicted_through = self.evicted_through.max(cursor);
    }

    /// Samples with a cursor above `after`, at most `limit`; `None` if some of them are no longer
    /// in memory (read SQLite instead).
    pub fn read_after(&self, after: Cursor, limit: usize) -> Option<Vec<Sample>> {
        if after < self.evicted_through {
            return None;
        }
        let mut out = Vec::new();
        let first = self.segments.partition_point(|s| s.last_cursor() <= after.0);
        for segment in self.segments.range(first..) {
            let start = segment.entries.partition_point(|e| e.cursor <= after.0);
            for i in start..segment.entries.len() {
                if out.len() == limit {
                    return Some(out);
                }
                out.push(segment.sample(i));
            }
        }
        Some(out)
    }

    pub fn newest_cursor(&self) -> Cursor {
        self.segments.back().map_or(self.evicted_through, |s| Cursor(s.last_cursor()))
    }

    pub fn len(&self) -> usize {
        self.samples
    }

    pub fn is_empty(&self) -> bool {
        self.samples == 0
    }

    /// Bytes held by the samples (identities, shared per partition, are not counted).
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

// --- compact encoding -------------------------------------------------------------------------
//
// Integers are LEB128 varints. A float is a varint when it is a whole number below 2^53 (tag 0,
// the common case for microseconds and zero ratios) and its 8 raw bytes otherwise (tag 1), so
// every value round-trips bit for bit.

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_f64(out: &mut Vec<u8>, v: f64) {
    // is_sign_positive keeps -0.0 on the raw path, so it comes back as -0.0.
    if (0.0..9_007_199_254_740_992.0).contains(&v) && v.fract() == 0.0 && v.is_sign_positive() {
        out.push(0);
        put_varint(out, v as u64);
    } else {
        out.push(1);
        out.extend_from_slice(&v.to_bits().to_le_bytes());
    }
}

fn encode_partition(out: &mut Vec<u8>, p: &PartitionStats) {
    for v in [p.read_ops, p.write_ops, p.read_bytes, p.write_bytes, p.errors, p.rejected, p.cpu_time_us, p.stored_bytes]
    {
        put_varint(out, v);
    }
    put_f64(out, p.latency_p50_us);
    put_f64(out, p.latency_p99_us);
    match &p.sketch {
        None => out.push(0),
        Some(s) => {
            // 2: the buckets' inner bounds follow their ops.
            out.push(if s.bucket_bounds.is_empty() { 1 } else { 2 });
            put_varint(out, s.bucket_ops.len() as u64);
            for &b in &s.bucket_ops {
                put_varint(out, b);
            }
            if !s.bucket_bounds.is_empty() {
                put_varint(out, s.bucket_bounds.len() as u64);
                for k in &s.bucket_bounds {
                    out.extend_from_slice(&k.0.to_le_bytes());
                }
            }
            put_varint(out, s.top_keys.len() as u64);
            for t in &s.top_keys {
                out.extend_from_slice(&t.key.0.to_le_bytes());
                put_f64(out, t.share_ratio);
            }
            put_f64(out, s.sequential_write_ratio);
        }
    }
}

fn encode_host(out: &mut Vec<u8>, h: &HostStats) {
    put_f64(out, h.cpu_ratio);
    put_varint(out, u64::from(h.cpu_cores));
    put_varint(out, h.memory_used_bytes);
    put_varint(out, h.memory_total_bytes);
    for v in [h.net_rx_bytes_per_sec, h.net_tx_bytes_per_sec, h.disk_read_bytes_per_sec, h.disk_write_bytes_per_sec] {
        put_f64(out, v);
    }
}

/// Reads what this module wrote; the bytes never leave the process, so a short read is a bug.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn byte(&mut self) -> u8 {
        let (&b, rest) = self.0.split_first().expect("window bytes are written by this module");
        self.0 = rest;
        b
    }

    fn varint(&mut self) -> u64 {
        let mut v = 0u64;
        let mut shift = 0;
        loop {
            let b = self.byte();
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return v;
            }
            shift += 7;
        }
    }

    fn fixed_u64(&mut self) -> u64 {
        let (bytes, rest) = self.0.split_first_chunk::<8>().expect("window bytes are written by this module");
        self.0 = rest;
        u64::from_le_bytes(*bytes)
    }

    fn f64(&mut self) -> f64 {
        match self.byte() {
            0 => self.varint() as f64,
            _ => f64::from_bits(self.fixed_u64()),
        }
    }
}

fn decode_partition(r: &mut Reader<'_>, id: &Identity) -> PartitionStats {
    let mut n = [0u64; 8];
    for v in &mut n {
        *v = r.varint();
    }
    let latency_p50_us = r.f64();
    let latency_p99_us = r.f64();
    let tag = r.byte();
    let sketch = (tag != 0).then(|| {
        let buckets = r.varint() as usize;
        let bucket_ops = (0..buckets).map(|_| r.varint()).collect();
        let bucket_bounds = if tag == 2 {
            let bounds = r.varint() as usize;
            (0..bounds).map(|_| Key(r.fixed_u64())).collect()
        } else {
            Vec::new()
        };
        let keys = r.varint() as usize;
        let top_keys = (0..keys).map(|_| TopKey { key: Key(r.fixed_u64()), share_ratio: r.f64() }).collect();
        KeySketch { bucket_ops, bucket_bounds, top_keys, sequential_write_ratio: r.f64() }
    });
    PartitionStats {
        tenant: id.tenant.clone(),
        table: id.table.clone(),
        partition_id: id.partition_id.clone(),
        key_range: id.key_range,
        read_ops: n[0],
        write_ops: n[1],
        read_bytes: n[2],
        write_bytes: n[3],
        errors: n[4],
        rejected: n[5],
        cpu_time_us: n[6],
        stored_bytes: n[7],
        latency_p50_us,
        latency_p99_us,
        sketch,
    }
}

fn decode_host(r: &mut Reader<'_>) -> HostStats {
    HostStats {
        cpu_ratio: r.f64(),
        cpu_cores: u32::try_from(r.varint()).expect("written from a u32"),
        memory_used_bytes: r.varint(),
        memory_total_bytes: r.varint(),
        net_rx_bytes_per_sec: r.f64(),
        net_tx_bytes_per_sec: r.f64(),
        disk_read_bytes_per_sec: r.f64(),
        disk_write_bytes_per_sec: r.f64(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(cpu: f64) -> HostStats {
        HostStats {
            cpu_ratio: cpu,
            cpu_cores: 2,
            memory_used_bytes: 1,
            memory_total_bytes: u64::MAX,
            net_rx_bytes_per_sec: 1.5,
            net_tx_bytes_per_sec: 0.0,
            disk_read_bytes_per_sec: 1e300,
            disk_write_bytes_per_sec: 3.0,
        }
    }

    fn partition(i: u64) -> PartitionStats {
        PartitionStats {
            tenant: "t".parse().expect("id"),
            table: "tbl".parse().expect("id"),
            partition_id: format!("p{i}").parse().expect("id"),
            key_range: KeyRange { start: Key(i * 100), end: Key(i * 100 + 99) },
            read_ops: i,
            write_ops: u64::MAX,
            read_bytes: 0,
            write_bytes: 1 << 40,
            errors: 1,
            rejected: 127,
            latency_p50_us: 12.25,
            latency_p99_us: 900.0,
            cpu_time_us: 128,
            stored_bytes: 1 << 33,
            sketch: i.is_multiple_of(2).then(|| KeySketch {
                bucket_ops: vec![0, 300, u64::MAX],
                // Every other sketch with bounds: both encodings round-trip.
                bucket_bounds: if i.is_multiple_of(4) {
                    vec![Key(i * 100 + 10), Key(i * 100 + 20)]
                } else {
                    Vec::new()
                },
                top_keys: vec![TopKey { key: Key(i * 100 + 3), share_ratio: 0.125 }],
                sequential_write_ratio: -0.0,
            }),
        }
    }

    /// Host samples at cursors `cursors`, each a second apart.
    fn append_hosts(w: &mut Window, cursors: std::ops::RangeInclusive<u64>, max_age_ms: u64, max_bytes: usize) {
        let stats = host(0.5);
        let records: Vec<_> = cursors
            .map(|c| Record {
                cursor: Cursor(c),
                timestamp_ms: c as i64 * 1000,
                interval_ms: 1000,
                data: RecordData::Host { stats: &stats, agent_sampled: false },
            })
            .collect();
        w.append(records, max_age_ms, max_bytes);
    }

    #[test]
    fn round_trips_every_value_exactly() {
        let parts: Vec<_> = (0..4).map(partition).collect();
        let hosts = [host(0.1), host(1.0)];
        let mut w = Window::new(Cursor(0));
        let mut records: Vec<_> = parts
            .iter()
            .enumerate()
            .map(|(i, p)| Record {
                cursor: Cursor(i as u64 + 1),
                timestamp_ms: 5000,
                interval_ms: 1000,
                data: RecordData::Partition { partition_ref: i as i64, stats: p },
            })
            .collect();
        records.push(Record {
            cursor: Cursor(9),
            timestamp_ms: 6000,
            interval_ms: 250,
            data: RecordData::Host { stats: &hosts[0], agent_sampled: true },
        });
        records.push(Record {
            cursor: Cursor(10),
            timestamp_ms: 6000,
            interval_ms: 250,
            data: RecordData::Host { stats: &hosts[1], agent_sampled: false },
        });
        w.append(records, u64::MAX, usize::MAX);
        let served = w.read_after(Cursor(0), 100).expect("in memory");
        assert_eq!(served.len(), 6);
        for (s, p) in served.iter().zip(&parts) {
            let SampleData::Partition(got) = &s.data else { panic!("partition expected") };
            assert_eq!(got, p);
            assert_eq!(got.latency_p50_us.to_bits(), p.latency_p50_us.to_bits());
            assert_eq!(s.timestamp_ms, 5000);
        }
        assert_eq!(served[4].data, SampleData::Host(hosts[0].clone()));
        assert_eq!((served[5].cursor, served[5].interval_ms), (Cursor(10), 250));
        // The agent's own reading is told from the report's.
        assert_eq!((served[4].agent_sampled, served[5].agent_sampled), (true, false));
        assert!(served[..4].iter().all(|s| !s.agent_sampled));
        let sketch = parts[0].sketch.as_ref().expect("even partitions have one");
        let SampleData::Partition(first) = &served[0].data else { panic!() };
        assert!(first.sketch.as_ref().expect("sketch").sequential_write_ratio.is_sign_negative(), "-0.0 kept");
        assert_eq!(first.sketch.as_ref().expect("sketch").bucket_ops, sketch.bucket_ops);
    }

    #[test]
    fn serves_from_memory_only_what_it_fully_holds() {
        let mut w = Window::new(Cursor(10));
        append_hosts(&mut w, 11..=20, 1_000_000, usize::MAX);
        assert_eq!(w.read_after(Cursor(9), 100), None, "cursor 10 is only in SQLite");
        let all = w.read_after(Cursor(10), 100).expect("in memory");
        assert_eq!(all.first().map(|s| s.cursor), Some(Cursor(11)));
        let page = w.read_after(Cursor(15), 3).expect("in memory");
        assert_eq!(page.iter().map(|s| s.cursor.0).collect::<Vec<_>>(), [16, 17, 18]);
        assert_eq!(w.read_after(Cursor(20), 10), Some(vec![]));
        assert_eq!(w.newest_cursor(), Cursor(20));
    }

    #[test]
    fn evicts_by_age_and_bytes_and_retention() {
        let mut w = Window::new(Cursor(0));
        append_hosts(&mut w, 1..=10, 4_000, usize::MAX);
        assert_eq!(w.len(), 5, "samples at 6..10 s are within 4 s of 10 s");
        assert_eq!(w.read_after(Cursor(4), 10), None);
        assert!(w.read_after(Cursor(5), 10).is_some());
        let before = w.bytes();
        let one = before / 5;
        append_hosts(&mut w, 11..=12, 1_000_000, 3 * one);
        assert_eq!(w.len(), 3);
        assert!(w.bytes() <= 3 * one);
        assert_eq!(w.newest_cursor(), Cursor(12));
        w.evict_through(Cursor(11));
        assert_eq!(w.len(), 1);
        assert_eq!(w.read_after(Cursor(10), 10), None);
        assert_eq!(w.read_after(Cursor(11), 10).map(|v| v.len()), Some(1));
    }

    #[test]
    fn a_partition_sample_is_compact() {
        let p = partition(2);
        let mut buf = Vec::new();
        encode_partition(&mut buf, &p);
        assert!(buf.len() < 90, "{} bytes", buf.len());
    }
}
