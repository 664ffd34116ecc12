//! Errors of the placement core.

use thiserror::Error;

/// Why a placement input was rejected. Nothing here is transient: retrying with the same input fails again.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PlacementError {
    /// A unit size of zero would divide by zero in the shard allocator.
    #[error("unit size must be at least 1 byte per second")]
    ZeroUnitSize,
    /// `min_shards` above `max_shards`.
    #[error("min shards {min_shards} exceeds max shards {max_shards}")]
    InvalidShardBounds { min_shards: u32, max_shards: u32 },
    /// A ring node with weight 0 would own no points.
    #[error("ring node {index} has weight 0")]
    ZeroWeight { index: usize },
    /// Ring node indices are stored as u16.
    #[error("ring has {count} nodes, at most {max} are supported")]
    TooManyRingNodes { count: usize, max: usize },
    /// `Σ weight × points_per_weight` does not fit the point index type.
    #[error("ring would have {points} points, at most {max} are supported")]
    TooManyPoints { points: u64, max: u64 },
    /// Total tokens (shards) above the supported shard count.
    #[error("node table would have {shards} shards, at most {max} are supported")]
    TooManyShards { shards: u64, max: u64 },
    /// A migration fraction above 1 000 000 ppm.
    #[error("migration fraction {fraction_ppm} ppm exceeds 1000000")]
    InvalidFraction { fraction_ppm: u32 },
    /// Unknown load-balancing option in configuration.
    #[error("invalid load balancing option: {0}; valid options: fingerprint, round-robin, dynamic")]
    InvalidLoadBalancing(String),
    /// A persisted node table whose positions do not match the token counts.
    #[error("placement rule names an invalid {what} id {value:?}: {reason}")]
    InvalidId { what: &'static str, value: String, reason: String },
    #[error("node table positions do not match token counts")]
    InconsistentNodeTable,
}
