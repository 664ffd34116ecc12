//! lb-reporter: what a storage worker embeds to feed lb.
//!
//! Every request the worker serves is recorded on the request path with
//! [`Recorder::record`] (tens of nanoseconds: no lock shared between threads, no allocation, no
//! I/O, never blocks; a full buffer drops and counts). A background thread aggregates the
//! records into per-partition counters, latency quantiles and the key-access sketch, and pushes
//! one [`Report`](lb_common::protocol::Report) per interval to the worker's lb-agent
//! (`POST /v1/report`), with sequence numbers, retries the agent deduplicates, and bounded
//! backoff while the agent is down.
//!
//! ```no_run
//! use std::time::Duration;
//! use lb_common::ids::{Key, KeyRange};
//! use lb_reporter::{Op, Outcome, PartitionInfo, Reporter, ReporterConfig};
//!
//! let reporter = Reporter::start(ReporterConfig::new("w-1".parse()?, "http://127.0.0.1:7101"))?;
//! let handle = reporter.handle();
//! let partition = PartitionInfo::new("acme".parse()?, "orders".parse()?, "acme.orders.p0".parse()?, KeyRange::FULL);
//! let slot = handle.upsert_partition(partition);
//! let recorder = handle.recorder(); // one per request thread
//! recorder.record(slot, Key(42), Op::Read, 512, Duration::from_micros(180), Outcome::Ok);
//! reporter.shutdown();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Parts:
//! - [`record`](Recorder): the per-thread rings and [`Recorder::record`];
//! - [`ReporterHandle`]: registering partitions ([`PartitionSlot`]) and getting recorders;
//! - [`Aggregator`]: rings → per-partition state → report, synchronous and clock-free;
//! - [`sketch`]: the bounded summaries, each with its error bound and memory;
//! - the push (`push.rs`): outbox, retries, backoff;
//! - [`Reporter`]: the aggregator and the push on one background thread.
//!
//! Keys are lb's 64-bit keys ([`Key`](lb_common::ids::Key)); a worker with byte-string keys maps
//! them with [`key_from_bytes`] (the first 8 bytes, order preserving). Metrics (through the
//! `metrics` crate): `lb_reporter_records_total`, `lb_reporter_records_dropped_total{reason}`,
//! `lb_reporter_reports_total{outcome}`, `lb_reporter_push_retries_total`,
//! `lb_reporter_pending_reports`.

mod aggregate;
mod partition;
mod push;
mod record;
mod reporter;
pub mod sketch;
mod stats;

pub use aggregate::{
    Aggregator, AggregatorConfig, DEFAULT_RING_CAPACITY, DEFAULT_SKETCH_BUCKETS, MIN_TOP_KEY_SHARE_RATIO,
    PARTITION_STATE_BYTES,
};
pub use partition::{PartitionInfo, PartitionSlot, ReporterHandle};
pub use push::Backoff;
pub use record::{Op, Outcome, Recorder, key_from_bytes};
pub use reporter::{
    DEFAULT_DRAIN_INTERVAL, DEFAULT_MAX_PENDING_REPORTS, DEFAULT_REPORT_INTERVAL, DEFAULT_RETRY_INITIAL,
    DEFAULT_RETRY_MAX, DEFAULT_SHUTDOWN_FLUSH, Reporter, ReporterConfig, StartError,
};
pub use stats::{CATALOG, ReporterStats};
