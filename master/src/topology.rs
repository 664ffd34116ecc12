//! The topology loop: the storage system's layout, as the ops server reads it, into the table
//! and the shared state the analyzers and the API read.

use std::sync::Arc;
use std::time::Duration;

use lb_common::http::Conditional;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::{Shared, lineage};

/// Every `collector.topology_interval_ms`, and at once when the online loop says an action
/// changed the layout ([`Shared::topology_wake`]): read the topology through the ops server,
/// apply it to the table, and link the history of the partitions that were split or merged
/// since the last read.
///
/// The read is conditional: the ops server tags each topology, and while it is the one this loop
/// has (`304 Not Modified`, no body), the kept copy is applied again — the table learns the read
/// time and drops partitions the storage no longer lists — and nothing is parsed or linked.
pub async fn run(shared: Shared, cancel: CancellationToken) {
    // The last topology read and its tag.
    let mut kept: Option<(String, Arc<lb_common::protocol::Topology>)> = None;
    loop {
        let cfg = shared.config.borrow().clone();
        let etag = kept.as_ref().map(|(tag, _)| tag.as_str());
        match shared.ops_client().topology_if_changed(etag).await {
            Ok(Conditional::NotModified) => {
                let read_at_ms = chrono::Utc::now().timestamp_millis();
                if let Some((_, topology)) = &kept {
                    let mut table = shared.table.write().expect("table lock is never poisoned");
                    table.apply_topology_at(topology, Some(read_at_ms));
                }
            }
            Ok(Conditional::Modified { value: topology, etag }) => {
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
                let topology = Arc::new(topology);
                kept = etag.map(|tag| (tag, topology.clone()));
                *shared.topology.write().expect("topology lock is never poisoned") = Some(topology);
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
