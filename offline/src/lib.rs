//! lb's offline analyzer: the hourly-rollup archive ([`archive`]: Parquet partitioned by day,
//! exactly once per (worker, partition, hour)) and the analyses over weeks of it ([`analysis`]:
//! merges that respect periodic load, peaks met before they arrive), with polars lazy frames.
//!
//! Only `lb-master` links this crate (polars is built once, here): the master fills the archive
//! from the agents' rollups and runs [`analysis::analyze`] on a blocking thread, hourly; its
//! offline analyzer turns the findings into proposals of origin `offline` that go through the
//! same modes, caps, approval, execution and evaluation as the online ones. The simulator drives
//! the same code in virtual time through the master's library.

pub mod analysis;
pub mod archive;
pub mod report;
#[doc(hidden)]
pub mod synthetic;

pub use analysis::{
    Coverage, Findings, Layout, LayoutPartition, LayoutWorker, MergeCandidate, OfflineConfig, PeakForecast,
    TableProfile, analyze,
};
pub use archive::{Appended, Archive, ArchiveError, ArchiveRow, DAY_MS, DayRead, HOUR_MS};
pub use report::{Flap, Imbalance, Report, WorkerDay};

#[cfg(test)]
mod tests;

/// Runs `f` (an offline pass) on a thread of its own at the lowest OS priority and returns what
/// it returned: the pass then takes only CPU the online loop leaves (on Linux its nice value is
/// 19). A priority the OS refuses is logged and the pass runs all the same.
pub fn at_low_priority<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> std::io::Result<T> {
    std::thread::Builder::new()
        .name("lb-offline-pass".to_owned())
        .spawn(move || {
            lower_this_threads_priority();
            f()
        })?
        .join()
        .map_err(|_| std::io::Error::other("the offline pass panicked"))
}

/// Puts the calling thread at the lowest OS priority (see [`at_low_priority`]).
pub fn lower_this_threads_priority() {
    if let Err(error) = thread_priority::set_current_thread_priority(thread_priority::ThreadPriority::Min) {
        tracing::warn!(?error, "cannot lower the offline pass's priority; it runs at the normal one");
    }
}
