//! The bounded-memory summaries the aggregator keeps per partition, each with its error bound:
//!
//! | summary | answers | bound | memory |
//! |---|---|---|---|
//! | [`LatencySketch`] | latency p50 / p99 | 1 % relative | 4 B per 2 % latency step seen (≈1.4 KiB for 50 µs–50 ms, ≤ 5.6 KiB) |
//! | [`KeyBuckets`] | load per equal-width bucket of the range | exact counts; a median to 1 bucket (1/64 of the range) | 512 B + 48 B |
//! | [`TopKeys`] | the hottest keys and their share | share at most 1/32 (3.1 %) below the truth, never above | 528 B |
//! | [`SequentialWrites`] | share of writes appending at the tail | exact per drain round | 48 B |

mod key_space;
mod latency;
mod top_keys;

pub use key_space::{KeyBuckets, SequentialWrites};
pub use latency::{LATENCY_RELATIVE_ERROR, LatencySketch, MAX_TRACKED_LATENCY_NS};
pub use top_keys::{TOP_KEY_COUNTERS, TopKeys};
