//! Background upkeep: table eviction and store retention, and the record of every config
//! reload attempt.

use std::time::Duration;

use lb_common::config::watch::SharedReloadStatus;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::Shared;

/// Table maintenance (evicting partitions gone for longer than the history) and store
/// retention run this often.
pub const MAINTENANCE_INTERVAL: Duration = Duration::from_secs(60);

/// Every [`MAINTENANCE_INTERVAL`]: evict partitions gone longer than the history, expire old
/// records.
pub async fn run(shared: Shared, cancel: CancellationToken) {
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(MAINTENANCE_INTERVAL) => {}
        }
        let evicted = shared.table.write().expect("table lock is never poisoned").evict_expired(crate::now_ms());
        let retention_ms = shared.config.borrow().store.retention_days as i64 * 86_400_000;
        match shared.store.expire(crate::now_ms() - retention_ms).await {
            Ok(expired) if expired > 0 || evicted > 0 => info!(expired, evicted, "maintenance done"),
            Ok(_) => {}
            Err(error) => warn!(%error, "result store retention failed"),
        }
    }
}

/// Every config reload attempt (applied or rejected) goes to the ResultDataStore.
pub async fn record_config_reloads(shared: Shared, status: SharedReloadStatus, cancel: CancellationToken) {
    let mut last_attempt = None;
    loop {
        let current = status.read().expect("reload status lock is never poisoned").clone();
        if last_attempt != Some(current.last_attempt_at_ms) {
            last_attempt = Some(current.last_attempt_at_ms);
            let key = format!("{}-{}", current.last_attempt_at_ms, current.version);
            if let Err(error) = shared.store.put_record(&key, current.last_attempt_at_ms, &current).await {
                warn!(%error, "cannot record config reload");
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}
