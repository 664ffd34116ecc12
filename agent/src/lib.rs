//! lb-agent: the daemon beside every storage worker.
//!
//! - [`http`]: `POST /v1/report` (ingest), `GET /v1/samples` (by cursor), `GET /v1/rollups`.
//! - [`store`]: the SQLite MetricStore: one writer thread, group commit, cursors, rollups,
//!   retention.
//! - [`window`]: the recent samples in memory, hard-bounded.
//! - [`host`]: the `/proc` sampler.
//! - [`source`]: storage nodes the agent polls itself (`[source]`, e.g. a Valkey node), stored
//!   exactly like pushed reports.
//! - [`registration`]: register and heartbeat with the ops server.
//! - [`config`]: the `agent.toml` file.
//!
//! [`start`] runs all of it on a listener; tests start agents in-process on port 0.

pub mod config;
pub mod host;
pub mod http;
pub mod metrics;
pub mod registration;
pub mod source;
pub mod store;
pub mod window;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use lb_common::config::watch::SharedReloadStatus;
use lb_common::http::Readiness;
use lb_common::shutdown::{Shutdown, serve};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::config::AgentConfig;
use crate::store::MetricStore;

/// A running agent.
#[derive(Debug)]
pub struct RunningAgent {
    addr: SocketAddr,
    shutdown: Shutdown,
    store: Arc<MetricStore>,
    readiness: Readiness,
}

/// Opens the store and starts HTTP, the host sampler, maintenance and registration.
pub async fn start(
    config: watch::Receiver<Arc<AgentConfig>>,
    listener: TcpListener,
    config_status: Option<SharedReloadStatus>,
) -> anyhow::Result<RunningAgent> {
    use anyhow::Context;
    let addr = listener.local_addr().context("listener address")?;
    let readiness = Readiness::new();
    let metrics_handle = lb_common::telemetry::install(metrics::CATALOG);
    lb_common::telemetry::describe(lb_valkey::metrics::CATALOG);
    metrics::initialize();
    let store = {
        let config = config.clone();
        tokio::task::spawn_blocking(move || MetricStore::open(config)).await.context("store open task")??
    };
    let store = Arc::new(store);
    readiness.add_check({
        let store = store.clone();
        Arc::new(move || store.write_failure().map(|error| format!("store writes are failing: {error}")))
    });
    readiness.add_check({
        let store = store.clone();
        let path = config.borrow().store.path.display().to_string();
        Arc::new(move || {
            store.damage().map(|damage| {
                format!(
                    "the store {path} is damaged ({damage}): stop the agent and start it with [store] on_corruption = \"move_aside\" (or move the file aside yourself)"
                )
            })
        })
    });
    let shutdown = Shutdown::new();

    let router =
        http::router(http::AppState { store: store.clone(), config: config.clone() }, readiness.clone(), config_status);
    let http_config = config.borrow().http.clone();
    shutdown.spawn(serve_or_log(listener, router, shutdown.token(), http_config));
    shutdown.spawn(host::run(host::ProcRoot::default(), store.clone(), config.clone(), shutdown.token()));
    shutdown.spawn(source::valkey::run(store.clone(), config.clone(), shutdown.token()));
    shutdown.spawn(maintenance(store.clone(), config.clone(), shutdown.token()));
    shutdown.spawn(integrity_checks(store.clone(), config.clone(), shutdown.token()));
    shutdown.spawn(registration::run(config.clone(), addr, store.clone(), shutdown.token()));
    shutdown.spawn(lb_common::telemetry::run_metrics_upkeep(metrics_handle, shutdown.token()));
    readiness.set_ready();
    info!(%addr, worker_id = %config.borrow().worker_id, "agent started");
    Ok(RunningAgent { addr, shutdown, store, readiness })
}

impl RunningAgent {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn store(&self) -> &Arc<MetricStore> {
        &self.store
    }

    /// Stops HTTP (in-flight requests finish), the loops, then flushes and closes the store,
    /// all within `deadline`. Returns whether everything finished in time.
    pub async fn stop(self, deadline: Duration) -> bool {
        self.readiness.set_not_ready("shutting down");
        let started = tokio::time::Instant::now();
        let tasks_done = self.shutdown.stop(deadline).await;
        let left = deadline.saturating_sub(started.elapsed());
        let store_done = tokio::time::timeout(left, self.store.close()).await.is_ok();
        if !store_done {
            warn!("store did not close within the shutdown deadline");
        }
        tasks_done && store_done
    }
}

async fn serve_or_log(
    listener: TcpListener,
    router: axum::Router,
    cancel: tokio_util::sync::CancellationToken,
    http: lb_common::config::shared::HttpServerConfig,
) {
    if let Err(error) = serve(listener, router, cancel, &http).await {
        tracing::error!(%error, "http server failed");
    }
}

async fn maintenance(
    store: Arc<MetricStore>,
    config: watch::Receiver<Arc<AgentConfig>>,
    cancel: tokio_util::sync::CancellationToken,
) {
    loop {
        record_store_size(&config.borrow().store.path);
        let interval = Duration::from_millis(config.borrow().store.maintenance_interval_ms);
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(interval) => {}
        }
        if let Err(error) = store.maintenance(chrono::Utc::now().timestamp_millis()).await {
            warn!(%error, "store maintenance failed");
        }
    }
}

/// Checks the store file every `store.integrity_check_secs` (issue 17 point 17: a page damaged
/// while the agent ran went unnoticed until the next start). A damaged file makes the agent not
/// ready, with what to do, until a check passes.
async fn integrity_checks(
    store: Arc<MetricStore>,
    config: watch::Receiver<Arc<AgentConfig>>,
    cancel: tokio_util::sync::CancellationToken,
) {
    loop {
        let every = config.borrow().store.integrity_check_secs;
        // Off: look again at the config now and then (it reloads).
        let wait = Duration::from_secs(if every == 0 { 60 } else { every });
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        if every == 0 {
            continue;
        }
        let path = config.borrow().store.path.clone();
        let checked = {
            let store = store.clone();
            tokio::task::spawn_blocking(move || store.check_integrity(&path)).await
        };
        let outcome = match checked {
            Ok(Ok(None)) => "ok",
            Ok(Ok(Some(damage))) => {
                tracing::error!(
                    path = %config.borrow().store.path.display(),
                    %damage,
                    "the store file is damaged: the agent is not ready; stop it and start it with [store] on_corruption = \"move_aside\" (or move the file aside yourself)"
                );
                "damaged"
            }
            Ok(Err(error)) => {
                warn!(%error, "cannot check the store's integrity");
                "error"
            }
            Err(error) => {
                warn!(%error, "the integrity check task failed");
                "error"
            }
        };
        ::metrics::counter!("lb_agent_store_integrity_checks_total", "outcome" => outcome).increment(1);
    }
}

/// `lb_agent_store_bytes`: the SQLite file and its write-ahead log, as the disk sees them.
fn record_store_size(path: &std::path::Path) {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    let size = |p: &std::path::Path| std::fs::metadata(p).map_or(0, |m| m.len());
    ::metrics::gauge!("lb_agent_store_bytes").set((size(path) + size(std::path::Path::new(&wal))) as f64);
}

impl lb_common::service::RunningService for RunningAgent {
    fn addr(&self) -> SocketAddr {
        RunningAgent::addr(self)
    }

    fn stop(self, deadline: Duration) -> impl std::future::Future<Output = bool> + Send {
        RunningAgent::stop(self, deadline)
    }
}
