//! The topology loop: the storage system's layout, as the ops server reads it, into the table
//! and the shared state the analyzers and the API read.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::{Shared, lineage};

/// Every `collector.topology_interval_ms`, and at once when the online loop says an action
/// changed the layout ([`Shared::topology_wake`]): read the topology through the ops server,
/// apply it to the table, and link the history of the partitions that were split or merged
/// since the last read.
pub async fn run(shared: Shared, cancel: CancellationToken) {
    loop {
        let cfg = shared.config.borrow().clone();
        match crate::ops_client(&cfg).topology().await {
            Ok(topology) => {
                let read_at_ms = chrono::Utc::now().timestamp_millis();
                let previous = shared.topology.read().expect("topology lock is never poisoned").clone();
                let mut table = shared.table.write().expect("table lock is never poisoned");
                table.apply_topology_at(&topology, Some(read_at_ms));
                // Splits and merges keep their history linked.
                for link in previous.map(|old| lineage::lineage(&old, &topology)).unwrap_or_default() {
                    let result = match &link {
                        lineage::Lineage::Split { parent, child, share_ratio } => {
                            table.link_split_share(parent, child, *share_ratio)
                        }
                        lineage::Lineage::Merge { parents, child } => table.link_merge(parents, child),
                    };
                    match result {
                        Ok(()) => info!(?link, "partition lineage linked"),
                        Err(error) => warn!(?link, %error, "cannot link partition lineage"),
                    }
                }
                drop(table);
                *shared.topology.write().expect("topology lock is never poisoned") = Some(Arc::new(topology));
            }
            Err(error) => warn!(%error, "cannot refresh the topology"),
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(cfg.collector.topology_interval_ms)) => {}
            _ = shared.topology_wake.notified() => {}
        }
    }
}
