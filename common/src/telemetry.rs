//! Logs and metrics set-up, once per process.
//!
//! Logs: `tracing` with text or JSON output; `RUST_LOG` overrides the configured filter.
//! Metrics: the `metrics` facade with a Prometheus recorder whose text the `/metrics` route
//! renders; the HTTP latency histogram gets real buckets so it aggregates across replicas.

use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio_util::sync::CancellationToken;
use tracing_subscriber::EnvFilter;

use crate::config::shared::{LogConfig, LogFormat};

/// Buckets for request latencies: 1 ms to 10 s, covering loopback calls and slow scrapes alike.
const HTTP_LATENCY_BUCKETS_SECS: [f64; 13] =
    [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];
/// Histogram upkeep cadence; the recorder drains and compacts buckets only when asked.
const METRICS_UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// Installs the global tracing subscriber. A second call (tests) is a no-op.
pub fn init_tracing(config: &LogConfig) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&config.filter))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    // Logs go to stderr: stdout stays for what a command prints for people and scripts.
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let result = match config.format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(true).try_init(),
    };
    // Err means a subscriber is already installed (several components in one test process).
    drop(result);
}

/// Installs the global tracing subscriber writing to `path` (appended, no colours): the
/// all-in-one launcher keeps the terminal for its event lines and puts component logs here.
/// A second call is a no-op, as for [`init_tracing`].
pub fn init_tracing_to_file(config: &LogConfig, path: &std::path::Path) -> std::io::Result<()> {
    let file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&config.filter))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder =
        tracing_subscriber::fmt().with_env_filter(filter).with_ansi(false).with_writer(std::sync::Mutex::new(file));
    let result = match config.format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(true).try_init(),
    };
    drop(result);
    Ok(())
}

/// The process's Prometheus recorder, installed on first use. Every component in one process
/// (the all-in-one launcher, tests) shares it.
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Full("lb_http_request_duration_seconds".to_owned()),
                    &HTTP_LATENCY_BUCKETS_SECS,
                )
                .expect("bucket list is non-empty")
                .build_recorder();
            let handle = recorder.handle();
            // Fails only if another recorder was installed first; then our handle renders
            // nothing, which tests would notice at once.
            if let Err(error) = metrics::set_global_recorder(recorder) {
                tracing::warn!(%error, "a metrics recorder was already installed");
            }
            handle
        })
        .clone()
}

/// Keeps the recorder's histograms bounded until `cancel` fires.
pub async fn run_metrics_upkeep(handle: PrometheusHandle, cancel: CancellationToken) {
    let mut tick = tokio::time::interval(METRICS_UPKEEP_INTERVAL);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => handle.run_upkeep(),
        }
    }
}
