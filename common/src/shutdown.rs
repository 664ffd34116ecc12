//! Graceful shutdown: one root cancellation token, a task tracker, HTTP stopped first, and a
//! deadline on the whole sequence.
//!
//! A binary's `main` does: `let shutdown = Shutdown::new();` → start HTTP with
//! [`serve`] on `shutdown.token()` → spawn loops on `shutdown.tracker()` with child tokens →
//! `wait_for_signal().await` → `shutdown.stop(deadline).await`. SIGHUP is *not* a shutdown
//! signal: it reloads config.

use std::future::Future;
use std::time::Duration;

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;
use tracing::{info, warn};

use crate::config::shared::HttpServerConfig;
use crate::http::parse_errors::JsonParseErrors;

/// The process's root token and tracker.
#[derive(Debug, Clone, Default)]
pub struct Shutdown {
    token: CancellationToken,
    tracker: TaskTracker,
}

impl Shutdown {
    pub fn new() -> Self {
        Self::default()
    }

    /// The root token; subsystems take `token().child_token()`.
    pub fn token(&self) -> CancellationToken {
        self.token.clone()
    }

    pub fn tracker(&self) -> &TaskTracker {
        &self.tracker
    }

    /// Spawns a tracked task.
    pub fn spawn<F>(&self, task: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.tracker.spawn(task)
    }

    /// Cancels everything and waits for tracked tasks, at most `deadline`. Returns whether all
    /// tasks finished in time.
    pub async fn stop(&self, deadline: Duration) -> bool {
        self.token.cancel();
        self.tracker.close();
        match tokio::time::timeout(deadline, self.tracker.wait()).await {
            Ok(()) => {
                info!("shutdown complete");
                true
            }
            Err(_) => {
                warn!(
                    deadline_ms = deadline.as_millis() as u64,
                    remaining_tasks = self.tracker.len(),
                    "shutdown deadline passed with tasks still running"
                );
                false
            }
        }
    }
}

/// Waits for SIGINT (Ctrl-C) or SIGTERM and returns its name.
pub async fn wait_for_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(error) => {
            warn!(%error, "cannot listen for SIGTERM, only Ctrl-C stops this process");
            let _ = tokio::signal::ctrl_c().await;
            return "sigint";
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "sigint",
        _ = term.recv() => "sigterm",
    }
}

/// Serves `router` on `listener` until `cancel` fires, then stops accepting and lets in-flight
/// requests finish (the caller bounds the wait with [`Shutdown::stop`]).
///
/// Each connection must send a request head within `http.head_timeout_ms` — the first one and
/// every later one on a kept-alive connection — or it is closed (a slowloris, an idle client);
/// at most `http.max_connections` are served at once, the others wait in the listen backlog.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    cancel: CancellationToken,
    http: &HttpServerConfig,
) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    info!(%addr, max_connections = http.max_connections, head_timeout_ms = http.head_timeout_ms, "http server listening");
    let slots = Arc::new(Semaphore::new(usize::try_from(http.max_connections).unwrap_or(usize::MAX)));
    let connections = TaskTracker::new();
    // HTTP/1.1 only, like every lb client: hyper-util's auto builder would first wait, with no
    // timeout, for the bytes that tell HTTP/2 from HTTP/1, and a silent connection would hold
    // its slot forever.
    let mut builder = http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(http.head_timeout());
    let builder = Arc::new(builder);
    loop {
        let slot = tokio::select! {
            () = cancel.cancelled() => break,
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
        };
        let (stream, _peer) = tokio::select! {
            () = cancel.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors, or a connection reset before accept: back off a
                    // little rather than spin.
                    warn!(%error, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone().map_request(|req: Request<Incoming>| req.map(Body::new)));
        let (builder, cancel) = (builder.clone(), cancel.clone());
        connections.spawn(async move {
            let _slot = slot;
            let conn = builder.serve_connection(TokioIo::new(JsonParseErrors::new(stream)), service);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                () = cancel.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
    drop(listener);
    connections.close();
    connections.wait().await;
    info!(%addr, "http server stopped");
    Ok(())
}

/// After a failed accept (EMFILE), wait this long before the next: the condition rarely clears
/// faster, and a tight loop would burn a core.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
