//! Logs and metrics set-up, once per process.
//!
//! Logs: `tracing` with text or JSON output; `RUST_LOG` overrides the configured filter.
//! Metrics: the `metrics` facade with a Prometheus recorder whose text the `/metrics` route
//! renders. Every histogram gets real buckets (not the exporter's default summary) so that it
//! aggregates across replicas with `histogram_quantile`. Each crate lists what it exports in a
//! catalog of [`MetricDef`]s: the HELP text `/metrics` shows, and what the shipped dashboards and
//! the naming test (`lb-launcher`'s `dashboards` test) check against.

use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use MetricKind::{Counter, Gauge, Histogram};
use tokio_util::sync::CancellationToken;
use tracing_subscriber::EnvFilter;

use crate::config::shared::{LogConfig, LogFormat};

/// Buckets of every histogram (all of lb's are durations in seconds): 1 ms to 1 h, covering a
/// loopback request, an SQLite commit, an analysis pass, a move that streams for minutes and a
/// hotspot that takes long to relieve, with one bucket list so every series aggregates alike.
pub const DURATION_BUCKETS_SECS: [f64; 20] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
    1800.0, 3600.0,
];
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
                .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), &DURATION_BUCKETS_SECS)
                .expect("bucket list is non-empty")
                .build_recorder();
            let handle = recorder.handle();
            // Fails only if another recorder was installed first; then our handle renders
            // nothing, which tests would notice at once.
            if let Err(error) = metrics::set_global_recorder(recorder) {
                tracing::warn!(%error, "a metrics recorder was already installed");
            }
            describe(CATALOG);
            handle
        })
        .clone()
}

/// The process's recorder (installed on first use) with the HELP text of `catalog` registered:
/// what each component's `start` calls with its own catalog.
pub fn install(catalog: &[MetricDef]) -> PrometheusHandle {
    let handle = metrics_handle();
    describe(catalog);
    handle
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

/// What a metric is, for its `describe_*` call and the naming rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    Counter,
    Gauge,
    Histogram,
}

impl MetricKind {
    /// The name Prometheus's `# TYPE` line uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Counter => "counter",
            Gauge => "gauge",
            Histogram => "histogram",
        }
    }
}

/// One exported metric: name, type, label names and the HELP text `/metrics` shows.
#[derive(Debug, Clone, Copy)]
pub struct MetricDef {
    pub name: &'static str,
    pub kind: MetricKind,
    /// Label names; each label's values are a bounded set (never a partition or an action id).
    pub labels: &'static [&'static str],
    pub help: &'static str,
}

impl MetricDef {
    pub const fn new(
        name: &'static str,
        kind: MetricKind,
        labels: &'static [&'static str],
        help: &'static str,
    ) -> Self {
        Self { name, kind, labels, help }
    }

    /// Why the name breaks the naming rules, if it does: `lb_` first; a counter ends in
    /// `_total`; anything else ends in its unit ([`UNIT_SUFFIXES`]) or, for a count of things,
    /// the plural of the thing counted ([`COUNTED_THINGS`]); HELP text is a sentence.
    pub fn naming_problem(&self) -> Option<String> {
        let name = self.name;
        if !name.starts_with("lb_") || !name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            return Some(format!("{name}: names are lb_ then lowercase snake case"));
        }
        if self.help.trim().len() < 10 {
            return Some(format!("{name}: HELP text missing or too short"));
        }
        let last = name.rsplit('_').next().unwrap_or_default();
        match self.kind {
            Counter if last != "total" => Some(format!("{name}: a counter's name ends in _total")),
            Counter => None,
            Histogram if !name.ends_with("_seconds") => {
                Some(format!("{name}: histograms are durations in seconds (their buckets are DURATION_BUCKETS_SECS)"))
            }
            _ if last == "total" => Some(format!("{name}: only counters end in _total")),
            _ if UNIT_SUFFIXES.iter().chain(COUNTED_THINGS).any(|u| name.ends_with(&format!("_{u}"))) => None,
            _ => Some(format!(
                "{name}: a {} ends in a unit ({}) or the plural of what it counts ({})",
                self.kind.as_str(),
                UNIT_SUFFIXES.join(", "),
                COUNTED_THINGS.join(", ")
            )),
        }
    }
}

/// Base units a gauge's or histogram's name may end in (Prometheus's naming guide: base units,
/// plural; `ratio` for 0..1 shares, `per_second` for a rate the binary measured itself).
pub const UNIT_SUFFIXES: &[&str] = &["seconds", "bytes", "ratio", "per_second", "info"];
/// Things a gauge may count, as the plural unit of its name (`lb_ops_queued_actions`).
pub const COUNTED_THINGS: &[&str] = &[
    "actions",
    "agents",
    "collectors",
    "executors",
    "files",
    "items",
    "keys",
    "masters",
    "nodes",
    "partitions",
    "planners",
    "proposals",
    "reports",
    "samples",
    "workers",
];

/// Registers the HELP text of `defs` with the installed recorder.
pub fn describe(defs: &[MetricDef]) {
    for d in defs {
        match d.kind {
            Counter => metrics::describe_counter!(d.name, d.help),
            Gauge => metrics::describe_gauge!(d.name, d.help),
            Histogram => metrics::describe_histogram!(d.name, d.help),
        }
    }
}

/// What lb-common itself exports (every server's HTTP layer and config watcher).
pub const CATALOG: &[MetricDef] = &[
    MetricDef::new(
        "lb_http_requests_total",
        Counter,
        &["method", "route", "status"],
        "HTTP requests answered, by method, route template and status code.",
    ),
    MetricDef::new(
        "lb_http_request_duration_seconds",
        Histogram,
        &["method", "route"],
        "Time from a request's arrival to its response, by method and route template.",
    ),
    MetricDef::new(
        "lb_fair_queue_items",
        Gauge,
        &["tenant"],
        "Items waiting in the fair queue per tenant (the ops server: actions, by the first element of their actor path); tenants beyond fair_queue.max_tenant_labels share the label __other__.",
    ),
    MetricDef::new(
        "lb_fair_queue_rejections_total",
        Counter,
        &["reason"],
        "Enqueues the fair queue refused, by reason (queue full for the tenant or overall, path too deep, closed).",
    ),
    MetricDef::new(
        "lb_config_reloads_total",
        Counter,
        &["outcome"],
        "Config file reloads by outcome (applied, unchanged, or why it was rejected).",
    ),
    MetricDef::new(
        "lb_config_failed_files",
        Gauge,
        &[],
        "1 while the last reload of the watched config file failed (the previous config stays live), else 0.",
    ),
    MetricDef::new(
        "lb_config_last_reload_timestamp_seconds",
        Gauge,
        &[],
        "When the config file was last reloaded with success (Unix time).",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_naming_rules_catch_what_they_name() {
        let ok = MetricDef::new("lb_x_queued_actions", Gauge, &[], "Actions waiting in the queue.");
        assert_eq!(ok.naming_problem(), None);
        let counter = MetricDef::new("lb_x_actions", Counter, &[], "Actions ever submitted.");
        assert!(counter.naming_problem().is_some_and(|p| p.contains("_total")));
        let unitless = MetricDef::new("lb_x_halted", Gauge, &[], "Whether the executor is halted.");
        assert!(unitless.naming_problem().is_some_and(|p| p.contains("ends in a unit")));
        let no_help = MetricDef::new("lb_x_lag_seconds", Gauge, &[], "");
        assert!(no_help.naming_problem().is_some_and(|p| p.contains("HELP")));
        for d in CATALOG {
            assert_eq!(d.naming_problem(), None);
        }
    }
}
