//! Graceful shutdown: one root cancellation token, a task tracker, HTTP stopped first, and a
//! deadline on the whole sequence.
//!
//! A binary's `main` does: `let shutdown = Shutdown::new();` → start HTTP with
//! [`serve`] on `shutdown.token()` → spawn loops on `shutdown.tracker()` with child tokens →
//! `wait_for_signal().await` → `shutdown.stop(deadline).await`. SIGHUP is *not* a shutdown
//! signal: it reloads config.

use std::future::Future;
use std::time::Duration;

use axum::Router;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

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
pub async fn serve(listener: TcpListener, router: Router, cancel: CancellationToken) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    info!(%addr, "http server listening");
    axum::serve(listener, router).with_graceful_shutdown(async move { cancel.cancelled().await }).await?;
    info!(%addr, "http server stopped");
    Ok(())
}
