//! The request path: [`Recorder::record`] writes one fixed-size event into the calling thread's
//! own bounded ring. No lock, no allocation, no I/O, never blocks; a full ring drops the event
//! and counts it.
//!
//! Each ring is a `crossbeam_queue::ArrayQueue` with one producer (the thread holding the
//! [`Recorder`]) and one consumer (the aggregator): a push is an uncontended compare-and-swap
//! on the ring's tail plus one slot write, on cache lines no other request thread touches.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crossbeam_queue::ArrayQueue;
use lb_common::ids::Key;

use crate::partition::PartitionSlot;

/// What a request did to its partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Read,
    Write,
}

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Served.
    Ok,
    /// Served with an error (counted in `errors`, and as an op: it took the partition's time).
    Error,
    /// Refused because the partition was over its limit (queue full, throttled): counted in
    /// `rejected` only, not as an op, not in latency or the sketch.
    Rejected,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Read,
    Write,
    /// CPU time spent on the partition, outside any one request (`value_ns`).
    Cpu,
}

/// One record: 32 bytes, copied into the ring.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Event {
    pub key: u64,
    /// Latency for reads and writes, CPU time for [`Kind::Cpu`].
    pub value_ns: u64,
    pub slot: PartitionSlot,
    /// Request bytes, saturated at 4 GiB.
    pub bytes: u32,
    pub kind: Kind,
    pub outcome: Outcome,
}

/// One thread's ring and its drop counter.
#[derive(Debug)]
pub(crate) struct Ring {
    pub queue: ArrayQueue<Event>,
    pub dropped: AtomicU64,
}

impl Ring {
    pub fn new(capacity: usize) -> Self {
        Self { queue: ArrayQueue::new(capacity.max(1)), dropped: AtomicU64::new(0) }
    }
}

/// A request thread's handle for recording; get one per thread from
/// [`ReporterHandle::recorder`](crate::ReporterHandle::recorder). `Send`, so it can move into
/// the thread; sharing one between threads works but makes them contend on its ring.
#[derive(Debug)]
pub struct Recorder {
    ring: Arc<Ring>,
}

impl Recorder {
    pub(crate) fn new(ring: Arc<Ring>) -> Self {
        Self { ring }
    }

    /// Records one request to `partition` on `key`: `bytes` read or written, its `latency` and
    /// `outcome`. Costs tens of nanoseconds; a full ring drops the record (counted in
    /// `lb_reporter_records_dropped_total{reason="buffer_full"}`).
    #[inline]
    pub fn record(&self, partition: PartitionSlot, key: Key, op: Op, bytes: u64, latency: Duration, outcome: Outcome) {
        let kind = match op {
            Op::Read => Kind::Read,
            Op::Write => Kind::Write,
        };
        self.push(Event {
            key: key.0,
            value_ns: duration_ns(latency),
            slot: partition,
            bytes: u32::try_from(bytes).unwrap_or(u32::MAX),
            kind,
            outcome,
        });
    }

    /// Adds CPU time spent on `partition` (background work such as compaction, or per-request
    /// CPU measured by the worker); reported as `cpu_time_us`.
    #[inline]
    pub fn record_cpu(&self, partition: PartitionSlot, cpu: Duration) {
        self.push(Event {
            key: 0,
            value_ns: duration_ns(cpu),
            slot: partition,
            bytes: 0,
            kind: Kind::Cpu,
            outcome: Outcome::Ok,
        });
    }

    #[inline]
    fn push(&self, event: Event) {
        if self.ring.queue.push(event).is_err() {
            self.ring.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The lb key of a byte-string key: its first 8 bytes, big-endian, zero-padded. Order
/// preserving (byte order = key order), so ranges and split keys keep their meaning; keys that
/// share their first 8 bytes count as one key in the top-keys sketch.
pub fn key_from_bytes(bytes: &[u8]) -> Key {
    let mut head = [0u8; 8];
    let n = bytes.len().min(8);
    head[..n].copy_from_slice(&bytes[..n]);
    Key(u64::from_be_bytes(head))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_keys_keep_their_order() {
        assert_eq!(key_from_bytes(b""), Key(0));
        assert_eq!(key_from_bytes(&[0x12]), Key(0x1200_0000_0000_0000));
        assert!(key_from_bytes(b"user:01") < key_from_bytes(b"user:02x"));
        assert_eq!(key_from_bytes(b"abcdefgh-1"), key_from_bytes(b"abcdefgh-2"));
        assert_eq!(std::mem::size_of::<Event>(), 32);
    }

    #[test]
    fn a_full_ring_drops_and_counts() {
        let ring = Arc::new(Ring::new(2));
        let rec = Recorder::new(ring.clone());
        let slot = PartitionSlot::new(0, 0);
        for _ in 0..5 {
            rec.record(slot, Key(1), Op::Read, 10, Duration::from_micros(5), Outcome::Ok);
        }
        assert_eq!(ring.queue.len(), 2);
        assert_eq!(ring.dropped.load(Ordering::Relaxed), 3);
    }
}
