//! The real-time engine: the [`Engine`] stepped by the wall clock, behind the storage admin API,
//! with a pusher that posts every worker's [`Report`](lb_common::protocol::Report) to its agent.
//!
//! The engine samples requests from each partition's workload and records them through
//! lb-reporter ([`Engine::sample_traffic`]), so the reports' key-access sketches come from the
//! library a real worker embeds, built from keys.
//!
//! Loops follow `run(cancel)` around a `run_once` that tests call directly:
//! - ticker: every `tick`, steps the engine by the time elapsed since the previous tick;
//! - pusher: every `report_interval`, builds each worker's report (under the lock) and posts
//!   them concurrently (outside it) to `POST {agent}/v1/report`. A failed push is logged and
//!   its counters are not re-sent: like a real worker, the testbed does not buffer reports.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lb_common::clients::AgentClient;
use lb_common::config::shared::{HttpClientConfig, HttpServerConfig};
use lb_common::http::{HttpClient, Readiness, with_standard_layers};
use lb_common::ids::WorkerId;
use lb_common::shutdown::{Shutdown, serve};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::Engine;
use crate::http::{AppState, SharedEngine, lock, router};

/// 100 ms: fine enough that operations finish within a tenth of a second of their time.
pub const DEFAULT_TICK_MS: u64 = 100;
/// 1 s: the report interval the agent and the master's online analyzers expect.
pub const DEFAULT_REPORT_INTERVAL_MS: u64 = 1_000;

#[derive(Debug, Clone)]
pub struct RealtimeOptions {
    pub tick: Duration,
    pub report_interval: Duration,
    /// Agent base URL per worker; workers without one are not reported.
    pub agents: BTreeMap<WorkerId, String>,
    pub client: HttpClientConfig,
    pub http: HttpServerConfig,
}

impl RealtimeOptions {
    pub fn new(listen: SocketAddr) -> Self {
        Self {
            tick: Duration::from_millis(DEFAULT_TICK_MS),
            report_interval: Duration::from_millis(DEFAULT_REPORT_INTERVAL_MS),
            agents: BTreeMap::new(),
            client: HttpClientConfig::default(),
            http: HttpServerConfig::on(listen),
        }
    }
}

/// A running testbed.
#[derive(Debug)]
pub struct RunningTestbed {
    addr: SocketAddr,
    engine: SharedEngine,
    shutdown: Shutdown,
}

/// Starts HTTP, the ticker and the pusher on `listener`.
/// Scenario time 0 is anchored at the wall clock, so reports and operations carry real times.
pub async fn start(
    mut engine: Engine,
    listener: TcpListener,
    options: RealtimeOptions,
) -> std::io::Result<RunningTestbed> {
    let addr = listener.local_addr()?;
    engine.sample_traffic();
    let elapsed_ms = i64::try_from(engine.elapsed().as_millis()).unwrap_or(i64::MAX);
    engine.set_clock_origin(chrono::Utc::now().timestamp_millis() - elapsed_ms);
    let engine = Arc::new(Mutex::new(engine));
    let shutdown = Shutdown::new();
    let readiness = Readiness::new();
    // The sampled traffic goes through lb-reporter: its series get their HELP text here.
    let metrics = lb_common::telemetry::install(lb_reporter::CATALOG);
    let app = router(AppState { engine: engine.clone() }).merge(lb_common::http::observability_router(
        metrics,
        readiness.clone(),
        None,
    ));
    let app = with_standard_layers(app, &options.http);
    let token = shutdown.token();
    let http_config = options.http.clone();
    shutdown.spawn(async move {
        if let Err(error) = serve(listener, app, token, &http_config).await {
            warn!(%error, "http server failed");
        }
    });
    shutdown.spawn(run_ticker(engine.clone(), options.tick, shutdown.token().child_token()));
    let pusher = Pusher::new(engine.clone(), &options);
    shutdown.spawn(pusher.run(options.report_interval, shutdown.token().child_token()));
    readiness.set_ready();
    info!(%addr, agents = options.agents.len(), "testbed started");
    Ok(RunningTestbed { addr, engine, shutdown })
}

impl RunningTestbed {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn engine(&self) -> &SharedEngine {
        &self.engine
    }

    /// Stops HTTP and the loops within `deadline`; returns whether everything stopped in time.
    pub async fn stop(self, deadline: Duration) -> bool {
        self.shutdown.stop(deadline).await
    }
}

async fn run_ticker(engine: SharedEngine, tick: Duration, cancel: CancellationToken) {
    let mut interval = tokio::time::interval(tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = tokio::time::Instant::now();
    loop {
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = interval.tick() => {}
        }
        let now = tokio::time::Instant::now();
        lock(&engine).step(now - last);
        last = now;
    }
}

/// Posts each worker's report to its agent.
#[derive(Debug, Clone)]
pub struct Pusher {
    engine: SharedEngine,
    clients: Vec<(WorkerId, AgentClient)>,
}

impl Pusher {
    pub fn new(engine: SharedEngine, options: &RealtimeOptions) -> Self {
        let base = HttpClient::new("http://127.0.0.1", &options.client);
        let clients = options
            .agents
            .iter()
            .map(|(w, url)| (w.clone(), AgentClient::from_http(base.for_peer(url.clone()))))
            .collect();
        Self { engine, clients }
    }

    pub async fn run(self, interval: Duration, cancel: CancellationToken) {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await;
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = ticker.tick() => {}
            }
            self.run_once().await;
        }
    }

    /// Builds and posts one report per worker with an agent; returns how many were acknowledged.
    pub async fn run_once(&self) -> usize {
        let reports: Vec<_> = {
            let mut engine = lock(&self.engine);
            self.clients.iter().filter_map(|(w, client)| engine.report_for(w).map(|r| (client.clone(), r))).collect()
        };
        let mut tasks = tokio::task::JoinSet::new();
        for (client, report) in reports {
            tasks.spawn(async move {
                let result = client.report(&report).await;
                (report.worker_id, report.seq, client.http().base_url().to_owned(), result)
            });
        }
        let mut acked = 0;
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok((worker, seq, _, Ok(ack))) => {
                    acked += 1;
                    debug!(worker = %worker, seq, duplicate = ack.duplicate, "report pushed");
                }
                Ok((worker, seq, agent, Err(error))) => {
                    warn!(worker = %worker, seq, agent, %error, "report push failed");
                }
                Err(error) => warn!(%error, "report push task failed"),
            }
        }
        acked
    }
}
