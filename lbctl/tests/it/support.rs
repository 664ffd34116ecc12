//! Running `lbctl` as a process: with a clean environment (no `LB_*` variables, a `HOME` and
//! `XDG_CONFIG_HOME` without a config file, `NO_COLOR`), from async tests without blocking
//! the runtime the system under test runs on.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What one run printed and how it ended.
#[derive(Debug, Clone)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub took: Duration,
}

impl Run {
    /// Asserts exit 0 and returns stdout.
    pub fn ok(&self) -> &str {
        assert_eq!(self.code, 0, "lbctl failed:\nstdout:\n{}\nstderr:\n{}", self.stdout, self.stderr);
        &self.stdout
    }

    /// Asserts `code`, nothing on stdout, one line on stderr, and returns that line.
    pub fn fails(&self, code: i32) -> &str {
        assert_eq!(self.code, code, "exit status:\nstdout:\n{}\nstderr:\n{}", self.stdout, self.stderr);
        assert!(self.stdout.is_empty(), "a failure prints nothing on stdout: {}", self.stdout);
        self.stderr.trim_end()
    }

    pub fn json<T: serde::de::DeserializeOwned>(&self) -> T {
        serde_json::from_str(self.ok()).unwrap_or_else(|e| panic!("not the typed reply: {e}:\n{}", self.stdout))
    }
}

/// A command for the binary with a clean environment plus `env`.
pub fn command(args: &[&str], env: &[(&str, &str)]) -> Command {
    let home: PathBuf = std::env::temp_dir().join("lbctl-test-home-without-config");
    let mut c = Command::new(env!("CARGO_BIN_EXE_lbctl"));
    c.args(args)
        .env_remove("LB_MASTER_URL")
        .env_remove("LB_OPS_URL")
        .env_remove("LB_TOKEN")
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", &home)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

pub fn lbctl_with(args: &[&str], env: &[(&str, &str)]) -> Run {
    let started = Instant::now();
    let out = command(args, env).output().expect("the lbctl binary runs");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        took: started.elapsed(),
    }
}

/// Runs lbctl on a blocking thread (the system under test keeps its runtime).
pub async fn lbctl(args: &[&str]) -> Run {
    let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        lbctl_with(&args, &[])
    })
    .await
    .expect("the runner thread does not panic")
}

/// Polls `check` every 250 ms until it gives a value, or panics with `what` after `within`.
pub async fn eventually<T, F, Fut>(within: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let started = tokio::time::Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(started.elapsed() < within, "{what} did not happen within {within:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
