//! lb-master: the master's picture of the cluster and its decisions.
//!
//! Data side:
//! - [`collector`]: pulls samples from every agent through the ops server, exactly once (its
//!   loop: [`collector::run`]).
//! - [`topology`]: the storage layout through the ops server into the table, with lineage
//!   ([`lineage`]) across splits and merges (its loop: [`topology::run`]).
//! - [`table`]: the in-memory MetricsTable (fine and coarse history per partition and worker,
//!   top-N, heatmap, lineage).
//!
//! Decision side:
//! - [`online`]: the online loop — a pure core ([`online::OnlineCore::step`]) in a thin shell
//!   ([`online::run`]) — and the analyzer seam ([`online::analyzer`]); each pass publishes a
//!   [`online::PassSnapshot`].
//! - [`planner`]: the online planner — pure: cluster view + config + state + now → proposals
//!   (split, isolate, move) with reasons, numbers and rejected alternatives.
//! - [`placement_manager`]: reshards of hash-sharded datasets and the placement rules.
//! - [`executor`]: follows submitted actions to their end, keeps dry-run proposals for
//!   approval; [`evaluation`]: scores finished actions and feeds harm back.
//! - [`leadership`]: whether this master may act (single by default).
//!
//! Around them: [`store`] (the ResultDataStore, SQLite), [`maintenance`] (eviction, retention,
//! config reload records), [`http`] (the API under `/api/v1`, described by the OpenAPI document
//! it serves), [`config`] (`master.toml`).

pub mod archiver;
pub mod collector;
pub mod config;
pub mod evaluation;
pub mod executor;
pub mod http;
pub mod leadership;
pub mod lineage;
pub mod maintenance;
pub mod metrics;
pub mod offline;
pub mod online;
pub mod placement_manager;
pub mod planner;
pub mod store;
pub mod table;
pub mod topology;

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context;
use lb_common::clients::OpsClient;
use lb_common::config::watch::SharedReloadStatus;
use lb_common::http::Readiness;
use lb_common::protocol::Topology;
use lb_common::shutdown::{Shutdown, serve};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::collector::CollectorStatus;
use crate::config::{LeadershipBackend, MasterConfig};
use crate::leadership::etcd::EtcdLeadership;
use crate::leadership::{Leadership, SingleLeader};
use crate::online::PassSnapshot;
use crate::store::ResultStore;
use crate::table::MetricsTable;

/// Everything the loops and the API share.
#[derive(Debug, Clone)]
pub struct Shared {
    pub config: watch::Receiver<Arc<MasterConfig>>,
    pub table: Arc<RwLock<MetricsTable>>,
    pub topology: Arc<RwLock<Option<Arc<Topology>>>>,
    pub collector: Arc<RwLock<CollectorStatus>>,
    pub store: ResultStore,
    /// The latest online pass: pending proposals, placement rules, counters, declines.
    pub snapshot: watch::Receiver<Arc<PassSnapshot>>,
    /// Whether this master may act.
    pub leadership: Arc<dyn Leadership>,
    /// SREs' requests (approve, reject, act by hand) to the online loop, answered at its next
    /// pass.
    pub approvals: tokio::sync::mpsc::Sender<online::Request>,
    /// The config file's version and last reload, when started from a file.
    pub config_status: Option<SharedReloadStatus>,
    /// The offline passes' findings for the online loop's offline analyzer ([`archiver`]).
    pub offline: offline::FindingsSlot,
    /// Woken by the online loop when an action it follows has changed the layout: the topology
    /// loop reads the topology again at once instead of at its next interval, so the next
    /// pass plans on (and sees) the action's effect.
    pub topology_wake: Arc<tokio::sync::Notify>,
    /// The client towards the ops server, kept while its URL, timeouts and token hold
    /// ([`Shared::ops_client`]).
    pub ops_client: Arc<lb_common::http::KeptClient>,
}

/// Requests queued for the online loop; more than this at once is an SRE script gone wrong.
const APPROVAL_QUEUE: usize = 64;

#[derive(Debug)]
pub struct RunningMaster {
    addr: SocketAddr,
    shutdown: Shutdown,
    readiness: Readiness,
    pub shared: Shared,
}

/// Opens the store, builds the shared state and starts the HTTP server and every loop.
pub async fn start(
    config: watch::Receiver<Arc<MasterConfig>>,
    listener: TcpListener,
    config_status: Option<SharedReloadStatus>,
) -> anyhow::Result<RunningMaster> {
    let addr = listener.local_addr().context("listener address")?;
    let metrics_handle = lb_common::telemetry::install(metrics::CATALOG);
    metrics::initialize();
    let cfg = config.borrow().clone();
    let table = MetricsTable::new(cfg.table.to_table_config()).context("table config")?;
    let store_path = cfg.store.path.clone();
    let store =
        tokio::task::spawn_blocking(move || ResultStore::open(&store_path))
            .await
            .context("store open task")?
            .with_context(|| format!("cannot open the result store at store.path = {}", cfg.store.path.display()))?;
    let etcd = (cfg.leadership.backend == LeadershipBackend::Etcd).then(|| {
        let advertise = cfg.leadership.advertise.clone().unwrap_or_else(|| format!("http://{addr}"));
        EtcdLeadership::new(cfg.leadership.clone(), advertise)
    });
    let leadership: Arc<dyn Leadership> = match &etcd {
        None => Arc::new(SingleLeader),
        Some(etcd) => Arc::new(etcd.clone()),
    };
    ::metrics::gauge!("lb_master_leading_masters").set(if leadership.is_leader() { 1.0 } else { 0.0 });
    let (approvals_tx, approvals_rx) = tokio::sync::mpsc::channel(APPROVAL_QUEUE);
    let (snapshot_tx, snapshot_rx) = watch::channel(Arc::new(PassSnapshot::default()));
    let shared = Shared {
        config: config.clone(),
        table: Arc::new(RwLock::new(table)),
        topology: Arc::new(RwLock::new(None)),
        collector: Arc::new(RwLock::new(CollectorStatus::default())),
        store,
        snapshot: snapshot_rx,
        leadership: leadership.clone(),
        approvals: approvals_tx,
        config_status: config_status.clone(),
        offline: offline::FindingsSlot::fed(),
        topology_wake: Arc::new(tokio::sync::Notify::new()),
        ops_client: Arc::default(),
    };
    if cfg.auth.tokens.is_empty() {
        warn!("no auth tokens configured: approving proposals is open to anyone who can reach the API");
    }
    let readiness = Readiness::new();
    readiness.add_check({
        let leadership = leadership.clone();
        Arc::new(move || {
            let status = leadership.status();
            (!status.leader).then(|| match status.leader_address {
                Some(leader) => format!("standby: {leader} leads"),
                None => "standby: no master leads".to_owned(),
            })
        })
    });
    let shutdown = Shutdown::new();
    let router = http::router(shared.clone(), readiness.clone(), config_status.clone(), shutdown.token());
    let token = shutdown.token();
    let http_config = cfg.http.clone();
    shutdown.spawn(async move {
        if let Err(error) = serve(listener, router, token, &http_config).await {
            tracing::error!(%error, "http server failed");
        }
    });
    if let Some(etcd) = etcd {
        // The same state as `shared.leadership`: this handle runs the campaign.
        shutdown.spawn(etcd.run(shutdown.token()));
    }
    shutdown.spawn(collector::run(shared.clone(), shutdown.token()));
    shutdown.spawn(topology::run(shared.clone(), shutdown.token()));
    shutdown.spawn(maintenance::run(shared.clone(), shutdown.token()));
    let for_ops = shared.clone();
    shutdown.spawn(online::run(
        shared.clone(),
        move || for_ops.ops_client(),
        approvals_rx,
        snapshot_tx,
        shutdown.token(),
    ));
    let for_archiver = shared.clone();
    shutdown.spawn(archiver::run(
        shared.clone(),
        move || for_archiver.ops_client(),
        shared.offline.clone(),
        shutdown.token(),
    ));
    if let Some(status) = config_status {
        shutdown.spawn(maintenance::record_config_reloads(shared.clone(), status, shutdown.token()));
    }
    shutdown.spawn(lb_common::telemetry::run_metrics_upkeep(metrics_handle, shutdown.token()));
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

impl Shared {
    /// The client for the ops server, with the service token when one is configured: the same
    /// client (and connection pool) for every call while the config's URL, timeouts and token
    /// hold.
    pub(crate) fn ops_client(&self) -> OpsClient {
        let config = self.config.borrow().clone();
        OpsClient::from_http(self.ops_client.get(
            &config.ops_server.url,
            &config.client,
            config.ops_server.token.as_deref(),
        ))
    }
}

pub(crate) fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

impl lb_common::service::RunningService for RunningMaster {
    fn addr(&self) -> SocketAddr {
        RunningMaster::addr(self)
    }

    fn stop(self, deadline: Duration) -> impl std::future::Future<Output = bool> + Send {
        RunningMaster::stop(self, deadline)
    }
}
