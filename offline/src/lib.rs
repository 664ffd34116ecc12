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
