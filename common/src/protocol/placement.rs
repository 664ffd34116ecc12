//! Placement rules: what the master's placement manager publishes for routers of hash-sharded
//! datasets (`GET /api/v1/placement/rules`).

use serde::{Deserialize, Serialize};

use crate::ids::{DatasetId, TenantId, ZoneId};
use crate::protocol::actions::LoadBalancing;

/// The whole rule set. A router ignores a set older than the one it has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PlacementRules {
    /// Increases with every published set.
    pub version: u64,
    pub created_at_ms: i64,
    /// Sorted by (tenant, dataset). A dataset without a rule uses its tenant's default limits.
    pub datasets: Vec<DatasetPlacement>,
}

/// How one dataset spreads over shards.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DatasetPlacement {
    pub tenant: TenantId,
    pub dataset: DatasetId,
    /// Size of the tenant's subring: the shards any of its datasets may use.
    pub tenant_shard_limit: u32,
    /// Size of the dataset's subring inside the tenant's.
    pub dataset_shard_limit: u32,
    pub load_balancing: LoadBalancing,
    /// The zones the dataset lives in: a router in one of them places in its own zone; a router
    /// elsewhere falls back to these in the order of `lb_common::placement::zones`. Empty (the
    /// default, and what older masters send): every zone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<ZoneId>,
}
