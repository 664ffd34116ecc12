//! Config hot reload against real files on disk: a good edit, a bad edit, a rename-over save,
//! a deleted file, a static change, the poll backstop and SIGHUP.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use lb_common::config::shared::HttpServerConfig;
use lb_common::config::watch::{self, ConfigHandle, ReloadOutcome, ReloadStatus, WatchOptions};
use lb_common::config::{ConfigError, ServiceConfig};
use lb_common::validate::{ValidationError, Validator};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TestConfig {
    http: HttpServerConfig,
    policy: Policy,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Policy {
    engage_ratio: f64,
    release_ratio: f64,
}

impl ServiceConfig for TestConfig {
    const STATIC_FIELDS: &'static [&'static str] = &["http"];

    fn validate(&self) -> Result<(), ValidationError> {
        let mut v = Validator::new();
        self.http.validate_into(&mut v.at("http"));
        let mut p = v.at("policy");
        p.ratio("engage_ratio", self.policy.engage_ratio);
        p.ratio("release_ratio", self.policy.release_ratio);
        p.check(
            self.policy.release_ratio < self.policy.engage_ratio,
            "release_ratio",
            self.policy.release_ratio,
            "must be below engage_ratio (hysteresis)",
        );
        drop(p);
        v.finish()
    }
}

fn text(engage: f64) -> String {
    format!("[http]\nlisten = \"127.0.0.1:7000\"\n\n[policy]\nengage_ratio = {engage}\nrelease_ratio = 0.5\n")
}

const GENEROUS: Duration = Duration::from_secs(20);

fn options(watch_directory: bool, poll_interval: Duration, sighup: bool) -> WatchOptions {
    WatchOptions { debounce: Duration::from_millis(50), poll_interval, sighup, watch_directory }
}

struct Fixture {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    handle: ConfigHandle<TestConfig>,
    cancel: CancellationToken,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

fn start(options: WatchOptions) -> Fixture {
    lb_common::telemetry::metrics_handle();
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("test.toml");
    std::fs::write(&path, text(0.8)).expect("write config");
    let cancel = CancellationToken::new();
    let (handle, _task) = watch::spawn::<TestConfig>(&path, options, cancel.clone()).expect("initial config is good");
    Fixture { _dir: dir, path, handle, cancel }
}

/// Waits until the status satisfies `done`; the bound only keeps a broken build from hanging.
async fn wait_for(handle: &ConfigHandle<TestConfig>, done: impl Fn(&ReloadStatus) -> bool) -> ReloadStatus {
    let started = tokio::time::Instant::now();
    loop {
        let status = handle.status();
        if done(&status) {
            return status;
        }
        assert!(started.elapsed() < GENEROUS, "reload never happened; last status {status:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn engage(handle: &ConfigHandle<TestConfig>) -> f64 {
    handle.current().policy.engage_ratio
}

#[tokio::test]
async fn good_edit_is_applied_and_published() {
    let f = start(options(true, Duration::from_secs(3600), false));
    let mut rx = f.handle.subscribe();
    assert_eq!(f.handle.status().version, 1);
    std::fs::write(&f.path, text(0.9)).expect("edit");
    let status = wait_for(&f.handle, |s| s.version == 2).await;
    assert_eq!(status.last_outcome, ReloadOutcome::Applied);
    assert_eq!(status.changed_fields, ["policy.engage_ratio"]);
    rx.changed().await.expect("subscriber woken");
    assert_eq!(rx.borrow().policy.engage_ratio, 0.9);
    assert_eq!(engage(&f.handle), 0.9);
}

#[tokio::test]
async fn bad_edit_keeps_the_live_config_and_names_the_field() {
    let f = start(options(true, Duration::from_secs(3600), false));
    std::fs::write(&f.path, text(1.5)).expect("edit");
    let status = wait_for(&f.handle, |s| s.last_outcome == ReloadOutcome::Invalid).await;
    let error = status.last_error.expect("error kept");
    assert!(error.contains("policy.engage_ratio = 1.5: must be within 0..=1"), "{error}");
    assert_eq!(status.version, 1);
    assert_eq!(engage(&f.handle), 0.8);

    // Unknown fields and broken TOML are rejected the same way, naming what is wrong.
    std::fs::write(&f.path, text(0.8).replace("release_ratio", "relase_ratio")).expect("edit");
    let status = wait_for(&f.handle, |s| s.last_outcome == ReloadOutcome::ParseError).await;
    let error = status.last_error.expect("error kept");
    assert!(error.contains("unknown field `relase_ratio`"), "{error}");
    assert_eq!(engage(&f.handle), 0.8);

    // Fixing the file recovers, and the error is cleared.
    std::fs::write(&f.path, text(0.7)).expect("edit");
    let status = wait_for(&f.handle, |s| s.version == 2).await;
    assert_eq!((status.last_outcome, status.last_error), (ReloadOutcome::Applied, None));
    assert_eq!(engage(&f.handle), 0.7);

    let metrics = lb_common::telemetry::metrics_handle().render();
    assert!(metrics.contains("lb_config_reloads_total{outcome=\"invalid\"}"), "{metrics}");
    assert!(metrics.contains("lb_config_reloads_total{outcome=\"parse_error\"}"), "{metrics}");
}

#[tokio::test]
async fn rename_over_save_is_seen() {
    let f = start(options(true, Duration::from_secs(3600), false));
    // What vim and most editors do: write a temp file beside the original, rename it over.
    for (i, engage_ratio) in [0.6, 0.65, 0.7].into_iter().enumerate() {
        let tmp = f.path.with_extension("toml.swp");
        std::fs::write(&tmp, text(engage_ratio)).expect("write temp");
        std::fs::rename(&tmp, &f.path).expect("rename over");
        let status = wait_for(&f.handle, |s| s.version == 2 + i as u64).await;
        assert_eq!(status.last_outcome, ReloadOutcome::Applied);
        assert_eq!(engage(&f.handle), engage_ratio);
    }
}

#[tokio::test]
async fn deleted_file_keeps_the_live_config_until_it_returns() {
    let f = start(options(true, Duration::from_secs(3600), false));
    std::fs::remove_file(&f.path).expect("delete");
    let status = wait_for(&f.handle, |s| s.last_outcome == ReloadOutcome::Unreadable).await;
    assert!(status.last_error.expect("error").contains("cannot read config file"));
    assert_eq!(engage(&f.handle), 0.8);
    std::fs::write(&f.path, text(0.85)).expect("recreate");
    wait_for(&f.handle, |s| s.version == 2).await;
    assert_eq!(engage(&f.handle), 0.85);
}

#[tokio::test]
async fn static_change_is_rejected() {
    let f = start(options(true, Duration::from_secs(3600), false));
    std::fs::write(&f.path, text(0.9).replace("7000", "7001")).expect("edit");
    let status = wait_for(&f.handle, |s| s.last_outcome == ReloadOutcome::StaticChange).await;
    let error = status.last_error.expect("error");
    assert!(error.contains("http.listen") && error.contains("need a restart"), "{error}");
    // The dynamic change in the same file is not applied half-way either.
    assert_eq!(engage(&f.handle), 0.8);
    assert_eq!(f.handle.current().http.listen.port(), 7000);
}

#[tokio::test]
async fn poll_backstop_reloads_without_file_events() {
    let f = start(options(false, Duration::from_millis(100), false));
    std::fs::write(&f.path, text(0.95)).expect("edit");
    let status = wait_for(&f.handle, |s| s.version == 2).await;
    assert_eq!(status.last_outcome, ReloadOutcome::Applied);
    assert_eq!(engage(&f.handle), 0.95);
}

#[tokio::test]
async fn sighup_reloads() {
    let f = start(options(false, Duration::from_secs(3600), true));
    std::fs::write(&f.path, text(0.75)).expect("edit");
    let status =
        std::process::Command::new("kill").args(["-HUP", &std::process::id().to_string()]).status().expect("run kill");
    assert!(status.success());
    let status = wait_for(&f.handle, |s| s.version == 2).await;
    assert_eq!(status.last_outcome, ReloadOutcome::Applied);
    assert_eq!(engage(&f.handle), 0.75);
}

#[tokio::test]
async fn touching_the_file_without_changing_it_keeps_the_last_outcome() {
    let f = start(options(true, Duration::from_secs(3600), false));
    std::fs::write(&f.path, text(0.9)).expect("edit");
    wait_for(&f.handle, |s| s.version == 2).await;
    // Rewrite the same bytes several times: no reload is reported, the outcome stays "applied".
    for _ in 0..3 {
        std::fs::write(&f.path, text(0.9)).expect("same bytes");
        tokio::time::sleep(Duration::from_millis(120)).await;
    }
    let status = f.handle.status();
    assert_eq!((status.version, status.last_outcome), (2, ReloadOutcome::Applied));
}

#[tokio::test]
async fn recreating_a_deleted_file_with_the_same_text_recovers() {
    let f = start(options(true, Duration::from_secs(3600), false));
    std::fs::remove_file(&f.path).expect("delete");
    wait_for(&f.handle, |s| s.last_outcome == ReloadOutcome::Unreadable).await;
    std::fs::write(&f.path, text(0.8)).expect("recreate, same text as the live config");
    let status = wait_for(&f.handle, |s| s.last_outcome != ReloadOutcome::Unreadable).await;
    assert_eq!((status.last_outcome, status.last_error), (ReloadOutcome::Unchanged, None));
}

#[tokio::test]
async fn explicit_reload_reports_unchanged_and_errors() {
    let f = start(options(false, Duration::from_secs(3600), false));
    let status = f.handle.reload_now().await.expect("watcher running");
    assert_eq!((status.last_outcome, status.version), (ReloadOutcome::Unchanged, 1));
    std::fs::write(&f.path, "[http\n").expect("edit");
    let status = f.handle.reload_now().await.expect("watcher running");
    assert_eq!(status.last_outcome, ReloadOutcome::ParseError);
    assert!(status.last_error.expect("error").contains("line 1"), "toml errors carry a position");
}

#[test]
fn a_bad_file_fails_start_up_with_the_field_named() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, text(0.4)).expect("write");
    let err = lb_common::config::load::<TestConfig>(&path).unwrap_err();
    assert!(matches!(err, ConfigError::Invalid { .. }));
    assert!(err.to_string().contains("policy.release_ratio = 0.5: must be below engage_ratio"), "{err}");
    let missing = lb_common::config::load::<TestConfig>(Path::new("/nonexistent/lb.toml")).unwrap_err();
    assert_eq!(missing.outcome(), "unreadable");
}

#[tokio::test]
async fn stops_on_cancel() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("test.toml");
    std::fs::write(&path, text(0.8)).expect("write config");
    let cancel = CancellationToken::new();
    let (handle, task) =
        watch::spawn::<TestConfig>(&path, options(true, Duration::from_secs(3600), false), cancel.clone())
            .expect("good config");
    cancel.cancel();
    tokio::time::timeout(GENEROUS, task).await.expect("watcher stops").expect("no panic");
    assert!(handle.reload_now().await.is_none());
    let _: Arc<TestConfig> = handle.current();
}
