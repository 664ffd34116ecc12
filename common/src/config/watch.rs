//! Hot reload of one config file.
//!
//! Triggers: a debounced change in the file's *directory* (editors save by writing a temp file
//! and renaming it over the original, which a watch on the file itself would miss), SIGHUP, a
//! slow re-read as a backstop for lost inotify events, and [`ConfigHandle::reload_now`].
//!
//! Each reload is read → parse → validate → diff → publish. The new config goes out through a
//! `watch` channel only when every step passed and something dynamic changed; otherwise the last
//! good config stays live. Every outcome is logged, counted in
//! `lb_config_reloads_total{outcome}` and kept in [`ReloadStatus`].

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use notify::RecursiveMode;
use notify_debouncer_full::{DebounceEventResult, new_debouncer};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{ConfigError, ServiceConfig, changed_fields, parse, static_changes};

/// How the watcher behaves; from the binary's `[runtime]` table.
#[derive(Debug, Clone)]
pub struct WatchOptions {
    pub debounce: Duration,
    pub poll_interval: Duration,
    /// Reload on SIGHUP. Off in tests that cannot own the process's signals.
    pub sighup: bool,
    /// Watch the file's directory. Off only where inotify is unusable (NFS) or in tests that
    /// exercise the other triggers alone.
    pub watch_directory: bool,
}

impl WatchOptions {
    /// Every trigger on, with the `[runtime]` table's cadence.
    pub fn from_runtime(runtime: &super::shared::RuntimeConfig) -> Self {
        Self {
            debounce: Duration::from_millis(runtime.reload_debounce_ms),
            poll_interval: Duration::from_millis(runtime.reload_poll_interval_ms),
            sighup: true,
            watch_directory: true,
        }
    }
}

/// What the last reload attempt did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ReloadOutcome {
    /// The config the process started with.
    Initial,
    Applied,
    /// The file parsed and validated but nothing changed.
    Unchanged,
    Unreadable,
    ParseError,
    Invalid,
    StaticChange,
}

impl ReloadOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            ReloadOutcome::Initial => "initial",
            ReloadOutcome::Applied => "applied",
            ReloadOutcome::Unchanged => "unchanged",
            ReloadOutcome::Unreadable => "unreadable",
            ReloadOutcome::ParseError => "parse_error",
            ReloadOutcome::Invalid => "invalid",
            ReloadOutcome::StaticChange => "static_change",
        }
    }
}

/// The live config's version and the last reload attempt; served at `/v1/config/status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReloadStatus {
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub path: PathBuf,
    /// 1 for the start-up config, +1 for every applied reload.
    pub version: u64,
    /// When the live config was loaded.
    pub loaded_at_ms: i64,
    pub last_attempt_at_ms: i64,
    pub last_outcome: ReloadOutcome,
    /// Why the last attempt was rejected; cleared by the next successful one.
    pub last_error: Option<String>,
    /// Fields the last applied reload changed.
    pub changed_fields: Vec<String>,
}

/// Shared, read-mostly view of the reload status.
pub type SharedReloadStatus = Arc<RwLock<ReloadStatus>>;

/// A reader's handle on the live config. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ConfigHandle<C> {
    rx: watch::Receiver<Arc<C>>,
    status: SharedReloadStatus,
    reload_tx: mpsc::Sender<Trigger>,
}

impl<C> ConfigHandle<C> {
    /// The live config. Loops read it at the top of each tick.
    pub fn current(&self) -> Arc<C> {
        self.rx.borrow().clone()
    }

    /// A receiver that wakes on every applied reload.
    pub fn subscribe(&self) -> watch::Receiver<Arc<C>> {
        self.rx.clone()
    }

    pub fn status(&self) -> ReloadStatus {
        self.status.read().expect("reload status lock is never poisoned").clone()
    }

    pub fn shared_status(&self) -> SharedReloadStatus {
        self.status.clone()
    }

    /// Re-reads the file now and returns the outcome (an admin endpoint, lbctl, tests).
    /// `None` when the watcher has stopped.
    pub async fn reload_now(&self) -> Option<ReloadStatus> {
        let (tx, rx) = oneshot::channel();
        self.reload_tx.send(Trigger::Explicit(tx)).await.ok()?;
        rx.await.ok()
    }
}

#[derive(Debug)]
enum Trigger {
    FileEvent,
    Poll,
    Signal,
    Explicit(oneshot::Sender<ReloadStatus>),
}

impl Trigger {
    fn name(&self) -> &'static str {
        match self {
            Trigger::FileEvent => "file_event",
            Trigger::Poll => "poll",
            Trigger::Signal => "sighup",
            Trigger::Explicit(_) => "explicit",
        }
    }
}

/// Loads `path` (failing if it is bad: a process must not start on a bad config) and keeps
/// reloading it until `cancel` fires.
pub fn spawn<C: ServiceConfig>(
    path: &Path,
    options: WatchOptions,
    cancel: CancellationToken,
) -> Result<(ConfigHandle<C>, tokio::task::JoinHandle<()>), ConfigError> {
    let path = absolute(path);
    let text = std::fs::read_to_string(&path).map_err(|error| ConfigError::Read { path: path.clone(), error })?;
    let config: C = parse(&text, &path)?;
    let now = now_ms();
    let status = Arc::new(RwLock::new(ReloadStatus {
        path: path.clone(),
        version: 1,
        loaded_at_ms: now,
        last_attempt_at_ms: now,
        last_outcome: ReloadOutcome::Initial,
        last_error: None,
        changed_fields: Vec::new(),
    }));
    reload_succeeded();
    let (tx, rx) = watch::channel(Arc::new(config));
    // Capacity 8: triggers coalesce (any one re-reads the file), so a full queue loses nothing.
    let (reload_tx, reload_rx) = mpsc::channel(8);

    let file_events =
        if options.watch_directory { watch_directory(&path, options.debounce, reload_tx.clone()) } else { None };
    // Registered before returning, so a SIGHUP sent right after start-up already reloads.
    let sighup = if options.sighup { hangup_stream() } else { None };
    let reloader = Reloader { path, tx, status: status.clone(), last_seen_text: Some(text) };
    let task = tokio::spawn(reloader.run(reload_rx, options.poll_interval, sighup, cancel, file_events));
    Ok((ConfigHandle { rx, status, reload_tx }, task))
}

struct Reloader<C> {
    path: PathBuf,
    tx: watch::Sender<Arc<C>>,
    status: SharedReloadStatus,
    /// The text of the last attempt, good or bad; `None` after a failed read. File events and
    /// the poll backstop skip a file they have seen (editors and `touch` fire events without
    /// changing a byte); SIGHUP and explicit reloads always re-evaluate.
    last_seen_text: Option<String>,
}

impl<C: ServiceConfig> Reloader<C> {
    async fn run(
        mut self,
        mut triggers: mpsc::Receiver<Trigger>,
        poll_interval: Duration,
        mut sighup: Option<tokio::signal::unix::Signal>,
        cancel: CancellationToken,
        // Dropping the debouncer stops the watch, so the loop owns it.
        _file_events: Option<FileWatcher>,
    ) {
        let mut poll = tokio::time::interval(poll_interval);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        poll.tick().await;
        loop {
            let trigger = tokio::select! {
                _ = cancel.cancelled() => return,
                t = triggers.recv() => match t { Some(t) => t, None => return },
                _ = poll.tick() => Trigger::Poll,
                Some(()) = recv_signal(&mut sighup) => Trigger::Signal,
            };
            let name = trigger.name();
            let skip_if_seen = matches!(trigger, Trigger::Poll | Trigger::FileEvent);
            let outcome = self.reload(skip_if_seen, name).await;
            if let Trigger::Explicit(reply) = trigger {
                let _ = reply.send(outcome);
            }
        }
    }

    async fn reload(&mut self, skip_if_seen: bool, trigger: &'static str) -> ReloadStatus {
        let text = match tokio::fs::read_to_string(&self.path).await {
            Ok(text) => text,
            Err(error) => {
                self.last_seen_text = None;
                let err = ConfigError::Read { path: self.path.clone(), error };
                return self.reject(err, trigger);
            }
        };
        if skip_if_seen && self.last_seen_text.as_ref() == Some(&text) {
            return self.status();
        }
        self.last_seen_text = Some(text.clone());
        let candidate: C = match parse(&text, &self.path) {
            Ok(c) => c,
            Err(err) => return self.reject(err, trigger),
        };
        let live = self.tx.borrow().clone();
        let changed = changed_fields(live.as_ref(), &candidate);
        let statics = static_changes::<C>(&changed);
        if !statics.is_empty() {
            let err = ConfigError::StaticChange { path: self.path.clone(), fields: statics };
            return self.reject(err, trigger);
        }
        let now = now_ms();
        let mut status = self.status.write().expect("reload status lock is never poisoned");
        status.last_attempt_at_ms = now;
        status.last_error = None;
        if changed.is_empty() {
            status.last_outcome = ReloadOutcome::Unchanged;
            info!(trigger, version = status.version, "config unchanged");
        } else {
            status.version += 1;
            status.loaded_at_ms = now;
            status.last_outcome = ReloadOutcome::Applied;
            info!(trigger, version = status.version, changed = ?changed, "config reloaded");
            status.changed_fields = changed;
            self.tx.send_replace(Arc::new(candidate));
        }
        metrics::counter!("lb_config_reloads_total", "outcome" => status.last_outcome.as_str()).increment(1);
        reload_succeeded();
        status.clone()
    }

    fn reject(&self, err: ConfigError, trigger: &'static str) -> ReloadStatus {
        let outcome = match &err {
            ConfigError::Read { .. } => ReloadOutcome::Unreadable,
            ConfigError::Parse { .. } => ReloadOutcome::ParseError,
            ConfigError::Invalid { .. } => ReloadOutcome::Invalid,
            ConfigError::StaticChange { .. } => ReloadOutcome::StaticChange,
        };
        let mut status = self.status.write().expect("reload status lock is never poisoned");
        warn!(trigger, outcome = outcome.as_str(), version = status.version, error = %err, "config reload rejected, keeping the live config");
        status.last_attempt_at_ms = now_ms();
        status.last_outcome = outcome;
        status.last_error = Some(err.to_string());
        metrics::counter!("lb_config_reloads_total", "outcome" => outcome.as_str()).increment(1);
        metrics::gauge!("lb_config_failed_files").set(1.0);
        status.clone()
    }

    fn status(&self) -> ReloadStatus {
        self.status.read().expect("reload status lock is never poisoned").clone()
    }
}

type FileWatcher =
    notify_debouncer_full::Debouncer<notify::RecommendedWatcher, notify_debouncer_full::RecommendedCache>;

/// Watches the directory holding `path` and sends a trigger for events that touch the file.
/// `None` (with a warning) if the platform cannot watch: the poll backstop still reloads.
fn watch_directory(path: &Path, debounce: Duration, tx: mpsc::Sender<Trigger>) -> Option<FileWatcher> {
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."));
    let file_name = path.file_name().map(|n| n.to_os_string());
    let handler = move |result: DebounceEventResult| match result {
        Ok(events) => {
            let touches_file = events
                .iter()
                .flat_map(|e| e.paths.iter())
                .any(|p| p.file_name().map(|n| n.to_os_string()) == file_name);
            if touches_file {
                // A full queue already holds a pending re-read; dropping this one loses nothing.
                let _ = tx.try_send(Trigger::FileEvent);
            }
        }
        Err(errors) => {
            for error in errors {
                warn!(%error, "config watcher error");
            }
            let _ = tx.try_send(Trigger::FileEvent);
        }
    };
    let mut debouncer = match new_debouncer(debounce, None, handler) {
        Ok(d) => d,
        Err(error) => {
            warn!(%error, "cannot watch config directory, relying on the poll backstop");
            return None;
        }
    };
    if let Err(error) = debouncer.watch(&dir, RecursiveMode::NonRecursive) {
        warn!(%error, dir = %dir.display(), "cannot watch config directory, relying on the poll backstop");
        return None;
    }
    Some(debouncer)
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// The file's config is live as written: clear the failure flag, stamp the time.
fn reload_succeeded() {
    metrics::gauge!("lb_config_failed_files").set(0.0);
    metrics::gauge!("lb_config_last_reload_timestamp_seconds").set(now_ms() as f64 / 1000.0);
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn hangup_stream() -> Option<tokio::signal::unix::Signal> {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(error) => {
            warn!(%error, "cannot listen for SIGHUP");
            None
        }
    }
}

async fn recv_signal(s: &mut Option<tokio::signal::unix::Signal>) -> Option<()> {
    match s {
        Some(s) => s.recv().await,
        None => std::future::pending().await,
    }
}
