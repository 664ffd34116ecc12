//! The body of every binary's `main`: load the config (a bad file stops the process with the
//! field named), set up logs and metrics, keep the config live, bind, start, wait for SIGINT or
//! SIGTERM, stop within the configured deadline.

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::ServiceConfig;
use crate::config::shared::{LogConfig, RuntimeConfig};
use crate::config::watch::{SharedReloadStatus, WatchOptions, spawn};

/// What `run` needs from a binary's config beyond [`ServiceConfig`].
pub trait ServiceBasics: ServiceConfig {
    fn log(&self) -> &LogConfig;
    fn runtime(&self) -> &RuntimeConfig;
    fn listen(&self) -> SocketAddr;
}

/// Implements [`ServiceBasics`] for a config with `log`, `runtime` and `http` fields (the
/// shared tables every binary's file has).
#[macro_export]
macro_rules! impl_service_basics {
    ($config:ty) => {
        impl $crate::service::ServiceBasics for $config {
            fn log(&self) -> &$crate::config::shared::LogConfig {
                &self.log
            }
            fn runtime(&self) -> &$crate::config::shared::RuntimeConfig {
                &self.runtime
            }
            fn listen(&self) -> std::net::SocketAddr {
                self.http.listen
            }
        }
    };
}

/// A started component.
pub trait RunningService: Send {
    fn addr(&self) -> SocketAddr;
    /// Stops within `deadline`; `false` if something did not finish in time.
    fn stop(self, deadline: Duration) -> impl Future<Output = bool> + Send;
}

/// Runs a component until SIGINT or SIGTERM. `start` gets the live config, the bound listener
/// and the reload status to serve at `/v1/config/status`. Prints `<name> listening on <url>` on
/// stdout once started (scripts and tests wait for that line).
pub async fn run<C, R, F, Fut>(name: &str, config_path: &Path, start: F) -> anyhow::Result<()>
where
    C: ServiceBasics,
    R: RunningService,
    F: FnOnce(watch::Receiver<Arc<C>>, TcpListener, SharedReloadStatus) -> Fut,
    Fut: Future<Output = anyhow::Result<R>>,
{
    let initial: C = crate::config::load(config_path)?;
    crate::telemetry::init_tracing(initial.log());
    crate::telemetry::metrics_handle();
    let config_cancel = tokio_util::sync::CancellationToken::new();
    let (handle, _watcher) =
        spawn::<C>(config_path, WatchOptions::from_runtime(initial.runtime()), config_cancel.clone())?;
    let listen = initial.listen();
    let listener =
        TcpListener::bind(listen).await.with_context(|| format!("cannot listen on http.listen = {listen}"))?;
    let running = start(handle.subscribe(), listener, handle.shared_status()).await?;
    println!("{name} listening on http://{}", running.addr());
    let signal = crate::shutdown::wait_for_signal().await;
    tracing::info!(signal, "shutting down");
    let deadline = Duration::from_millis(handle.current().runtime().shutdown_deadline_ms);
    let clean = running.stop(deadline).await;
    config_cancel.cancel();
    anyhow::ensure!(clean, "shutdown did not finish within {} ms", deadline.as_millis());
    Ok(())
}
