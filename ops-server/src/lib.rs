//! lb-ops-server: the thin command layer between the master (and SREs) and the storage system.
//!
//! - [`registry`]: agents register and heartbeat; down after a grace period.
//! - [`collect`]: one call fans out to every agent in parallel with per-agent deadlines.
//! - [`actions`]: the action book (idempotent submission, state machine, SQLite audit log) and
//!   the executor (hierarchical fair queue → storage, concurrency limits, timeouts, stall
//!   detection, halt switch, "maybe executed" handling, recovery after restart), and the
//!   fencing of elected masters' leadership terms (stale epochs refused).
//! - [`storage`]: the storage adapter trait, its HTTP implementation (the storage admin
//!   protocol, as the testbed serves it) and the Valkey / Redis cluster adapter
//!   (`[storage] kind = "valkey"`: primaries are workers, hash slots are partitions).
//! - [`auth`]: bearer tokens with roles, constant-time comparison, per-caller rate limit.
//! - [`http`]: the routes; [`config`]: `ops-server.toml`.

pub mod actions;
pub mod auth;
pub mod collect;
pub mod config;
pub mod http;
pub mod metrics;
pub mod registry;
pub mod storage;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use lb_common::config::watch::SharedReloadStatus;
use lb_common::http::{HttpClient, Readiness};
use lb_common::shutdown::{Shutdown, serve};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::actions::audit::Audit;
use crate::actions::book::ActionBook;
use crate::actions::executor::Executor;
use crate::actions::fencing::Fencing;
use crate::config::OpsServerConfig;

/// A running ops server.
#[derive(Debug)]
pub struct RunningOpsServer {
    addr: SocketAddr,
    http: Shutdown,
    executor: Shutdown,
    readiness: Readiness,
    pub executor_handle: Arc<Executor>,
}

pub async fn start(
    config: watch::Receiver<Arc<OpsServerConfig>>,
    listener: TcpListener,
    config_status: Option<SharedReloadStatus>,
) -> anyhow::Result<RunningOpsServer> {
    let addr = listener.local_addr().context("listener address")?;
    let metrics_handle = lb_common::telemetry::install(metrics::CATALOG);
    lb_common::telemetry::describe(lb_valkey::metrics::CATALOG);
    metrics::initialize();
    let cfg = config.borrow().clone();
    if cfg.auth.tokens.is_empty() {
        warn!("no auth tokens configured: every caller may do everything");
    }
    let audit_path = cfg.audit.path.clone();
    let (book, fencing) = tokio::task::spawn_blocking(move || {
        let audit = Audit::open(&audit_path)?;
        Ok::<_, actions::audit::AuditError>((ActionBook::open(audit.clone())?, Fencing::open(audit)?))
    })
    .await
    .context("audit open task")?
    .with_context(|| format!("cannot open the audit log at audit.path = {}", cfg.audit.path.display()))?;
    let book = Arc::new(book);
    let executor = Arc::new(Executor::new(book.clone(), config.clone()));
    let readiness = Readiness::new();
    let state = http::AppState {
        config: config.clone(),
        registry: Arc::new(registry::Registry::default()),
        book,
        fencing: Arc::new(fencing),
        executor: executor.clone(),
        // Only its connection pool and timeouts are used: collection aims it at each agent with
        // `for_peer`, so the base URL here is never called.
        agents_client: HttpClient::new("http://127.0.0.1", &cfg.client),
        rate_limiter: Arc::new(auth::RateLimiter::default()),
    };
    // Two shutdown scopes: HTTP stops first, then the executor (running actions get the rest
    // of the deadline).
    let http_scope = Shutdown::new();
    let executor_scope = Shutdown::new();
    executor.recover(&executor_scope.token()).await;
    executor_scope.spawn(executor.clone().run(executor_scope.token()));
    let router = http::router(state, readiness.clone(), config_status);
    let token = http_scope.token();
    let http_config = cfg.http.clone();
    http_scope.spawn(async move {
        if let Err(error) = serve(listener, router, token, &http_config).await {
            tracing::error!(%error, "http server failed");
        }
    });
    http_scope.spawn(lb_common::telemetry::run_metrics_upkeep(metrics_handle, http_scope.token()));
    readiness.set_ready();
    info!(%addr, "ops server started");
    Ok(RunningOpsServer { addr, http: http_scope, executor: executor_scope, readiness, executor_handle: executor })
}

impl RunningOpsServer {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops HTTP, then the executor (running actions are noted as interrupted and resume after
    /// a restart), within `deadline`.
    pub async fn stop(self, deadline: Duration) -> bool {
        self.readiness.set_not_ready("shutting down");
        let started = tokio::time::Instant::now();
        let http_done = self.http.stop(deadline).await;
        let executor_done = self.executor.stop(deadline.saturating_sub(started.elapsed())).await;
        http_done && executor_done
    }
}

impl lb_common::service::RunningService for RunningOpsServer {
    fn addr(&self) -> SocketAddr {
        RunningOpsServer::addr(self)
    }

    fn stop(self, deadline: Duration) -> impl std::future::Future<Output = bool> + Send {
        RunningOpsServer::stop(self, deadline)
    }
}
