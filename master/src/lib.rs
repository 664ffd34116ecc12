//! lb-master: the master's picture of the cluster and, later, its decisions.
//!
//! - [`analysis`]: the online loop: table + topology → planner → proposals recorded, `auto` ones
//!   submitted to the ops server.
//! - [`collector`]: pulls samples from every agent through the ops server, exactly once.
//! - [`table`]: the in-memory MetricsTable (fine and coarse history per partition and worker,
//!   top-N, heatmap, lineage across splits and merges).
//! - [`planner`]: the online analyzer and planner — pure: cluster view + config + state + now →
//!   proposals (split, isolate, move) with reasons, numbers and rejected alternatives.
//! - [`executor`]: follows submitted actions to their end (settling "maybe executed" by the
//!   topology), keeps dry-run proposals for approval; [`evaluation`]: scores finished actions
//!   (effective / no effect / harmful) and feeds harm back into the planner.
//! - [`lineage`]: which new partitions came from which old ones, from consecutive topologies.
//! - [`store`]: the ResultDataStore (SQLite) for analyses, proposals, actions, evaluations and
//!   config reloads, with retention.
//! - [`http`]: the read API under `/api/v1`; [`config`]: `master.toml`.

pub mod collector;
pub mod config;
pub mod evaluation;
pub mod executor;
pub mod http;
pub mod lineage;
pub mod online;
pub mod placement_manager;
pub mod planner;
pub mod store;
pub mod table;

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context;
use lb_common::config::watch::SharedReloadStatus;
use lb_common::http::{HttpClient, Readiness};
use lb_common::protocol::Topology;
use lb_common::shutdown::{Shutdown, serve};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::collector::{Collector, CollectorStatus};
use crate::config::MasterConfig;
use crate::store::{RecordKind, ResultStore};
use crate::table::MetricsTable;

/// Everything the loops and the API share.
#[derive(Debug, Clone)]
pub struct Shared {
    pub config: watch::Receiver<Arc<MasterConfig>>,
    pub table: Arc<RwLock<MetricsTable>>,
    pub topology: Arc<RwLock<Option<Arc<Topology>>>>,
    pub collector: Arc<RwLock<CollectorStatus>>,
    pub store: ResultStore,
    /// Dry-run proposals waiting for approval, as of the last pass.
    pub pending: Arc<RwLock<Vec<executor::Pending>>>,
    /// The placement rules routers read (`GET /api/v1/placement/rules`), as of the last pass.
    pub placement_rules: Arc<RwLock<Option<lb_common::protocol::PlacementRules>>>,
    /// Approvals to the online loop, which submits them at its next pass.
    pub approvals: tokio::sync::mpsc::Sender<online::Approval>,
}

/// Approvals queued for the online loop; more than this at once is an SRE script gone wrong.
const APPROVAL_QUEUE: usize = 64;

/// Table maintenance (evicting partitions gone for longer than the history) and store
/// retention run this often.
const MAINTENANCE_INTERVAL: Duration = Duration::from_secs(60);

#[derive(Debug)]
pub struct RunningMaster {
    addr: SocketAddr,
    shutdown: Shutdown,
    readiness: Readiness,
    pub shared: Shared,
}

pub async fn start(
    config: watch::Receiver<Arc<MasterConfig>>,
    listener: TcpListener,
    config_status: Option<SharedReloadStatus>,
) -> anyhow::Result<RunningMaster> {
    let addr = listener.local_addr().context("listener address")?;
    let cfg = config.borrow().clone();
    let table = MetricsTable::new(cfg.table.to_table_config()).context("table config")?;
    let store_path = cfg.store.path.clone();
    let store =
        tokio::task::spawn_blocking(move || ResultStore::open(&store_path))
            .await
            .context("store open task")?
            .with_context(|| format!("cannot open the result store at store.path = {}", cfg.store.path.display()))?;
    let (approvals_tx, approvals_rx) = tokio::sync::mpsc::channel(APPROVAL_QUEUE);
    let shared = Shared {
        config: config.clone(),
        table: Arc::new(RwLock::new(table)),
        topology: Arc::new(RwLock::new(None)),
        collector: Arc::new(RwLock::new(CollectorStatus::default())),
        store,
        pending: Arc::new(RwLock::new(Vec::new())),
        placement_rules: Arc::new(RwLock::new(None)),
        approvals: approvals_tx,
    };
    if cfg.auth.tokens.is_empty() {
        warn!("no auth tokens configured: approving proposals is open to anyone who can reach the API");
    }
    let readiness = Readiness::new();
    let shutdown = Shutdown::new();
    let router = http::router(shared.clone(), readiness.clone(), config_status.clone());
    let token = shutdown.token();
    shutdown.spawn(async move {
        if let Err(error) = serve(listener, router, token).await {
            tracing::error!(%error, "http server failed");
        }
    });
    shutdown.spawn(collect_loop(shared.clone(), shutdown.token()));
    shutdown.spawn(topology_loop(shared.clone(), shutdown.token()));
    shutdown.spawn(maintenance_loop(shared.clone(), shutdown.token()));
    let config_for_ops = shared.config.clone();
    shutdown.spawn(online::run(
        shared.clone(),
        move || ops_client(&config_for_ops.borrow()),
        approvals_rx,
        shutdown.token(),
    ));
    if let Some(status) = config_status {
        shutdown.spawn(record_config_reloads(shared.clone(), status, shutdown.token()));
    }
    shutdown.spawn(lb_common::telemetry::run_metrics_upkeep(lb_common::telemetry::metrics_handle(), shutdown.token()));
    readiness.set_ready();
    info!(%addr, "master started");
    Ok(RunningMaster { addr, shutdown, readiness, shared })
}

impl RunningMaster {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub async fn stop(self, deadline: Duration) -> bool {
        self.readiness.set_not_ready("shutting down");
        self.shutdown.stop(deadline).await
    }
}

fn ops_client(config: &MasterConfig) -> HttpClient {
    let client = HttpClient::new(&config.ops_server.url, &config.client);
    match &config.ops_server.token {
        Some(token) => client.with_bearer_token(token),
        None => client,
    }
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

async fn collect_loop(shared: Shared, cancel: CancellationToken) {
    let mut collector: Option<(String, Collector)> = None;
    loop {
        let cfg = shared.config.borrow().clone();
        // A new ops server URL starts from fresh cursors only if the URL changed.
        if collector.as_ref().is_none_or(|(url, _)| *url != cfg.ops_server.url) {
            collector = Some((cfg.ops_server.url.clone(), Collector::new(ops_client(&cfg))));
        }
        let (_, c) = collector.as_mut().expect("set above");
        let table = shared.table.clone();
        let mut sink = |worker: &lb_common::ids::WorkerId, samples: &[lb_common::protocol::Sample], reset: bool| {
            // Held for one agent's page at a time, so readers are never blocked for long.
            let mut table = table.write().expect("table lock is never poisoned");
            if reset {
                table.forget_cursor(worker);
            }
            let stats = table.ingest(worker, samples, now_ms());
            metrics::counter!("lb_master_table_accepted_total")
                .increment(stats.accepted_partition + stats.accepted_host);
            metrics::counter!("lb_master_table_duplicates_total").increment(stats.duplicate);
            metrics::counter!("lb_master_table_dropped_total")
                .increment(stats.dropped_late + stats.rejected_future + stats.invalid + stats.over_capacity);
        };
        let _ = c.run_once(&cfg.collector, now_ms(), &mut sink).await;
        *shared.collector.write().expect("collector status lock is never poisoned") = c.status.clone();
        let delay = c.next_delay(&cfg.collector);
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

async fn topology_loop(shared: Shared, cancel: CancellationToken) {
    loop {
        let cfg = shared.config.borrow().clone();
        match ops_client(&cfg).get::<Topology>("/v1/topology").await {
            Ok(topology) => {
                let previous = shared.topology.read().expect("topology lock is never poisoned").clone();
                let mut table = shared.table.write().expect("table lock is never poisoned");
                table.apply_topology(&topology);
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
        }
    }
}

async fn maintenance_loop(shared: Shared, cancel: CancellationToken) {
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(MAINTENANCE_INTERVAL) => {}
        }
        let evicted = shared.table.write().expect("table lock is never poisoned").evict_expired(now_ms());
        let retention_ms = shared.config.borrow().store.retention_days as i64 * 86_400_000;
        match shared.store.expire(now_ms() - retention_ms).await {
            Ok(expired) if expired > 0 || evicted > 0 => info!(expired, evicted, "maintenance done"),
            Ok(_) => {}
            Err(error) => warn!(%error, "result store retention failed"),
        }
    }
}

/// Every config reload attempt (applied or rejected) goes to the ResultDataStore.
async fn record_config_reloads(shared: Shared, status: SharedReloadStatus, cancel: CancellationToken) {
    let mut last_attempt = None;
    loop {
        let current = status.read().expect("reload status lock is never poisoned").clone();
        if last_attempt != Some(current.last_attempt_at_ms) {
            last_attempt = Some(current.last_attempt_at_ms);
            let key = format!("{}-{}", current.last_attempt_at_ms, current.version);
            if let Err(error) =
                shared.store.put(RecordKind::ConfigReload, &key, current.last_attempt_at_ms, &current).await
            {
                warn!(%error, "cannot record config reload");
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

impl lb_common::service::RunningService for RunningMaster {
    fn addr(&self) -> SocketAddr {
        RunningMaster::addr(self)
    }

    fn stop(self, deadline: Duration) -> impl std::future::Future<Output = bool> + Send {
        RunningMaster::stop(self, deadline)
    }
}
