//! Runs one of the project's `scripts/install-*.sh` at most once per test binary: the tests
//! install what they drive (Chromium, Prometheus) on a machine that skipped `.ci/run`'s step.

use std::path::Path;
use std::process::Command;
use std::sync::{Mutex, OnceLock};

/// Each script run so far, with its outcome.
type Outcomes = Vec<(String, Result<(), String>)>;

/// Runs `scripts/<script>` once per binary and script; every caller gets the first outcome.
pub fn run_once(script: &str) -> Result<(), String> {
    static DONE: OnceLock<Mutex<Outcomes>> = OnceLock::new();
    let mut done = DONE.get_or_init(Default::default).lock().expect("install lock is never poisoned");
    if let Some((_, outcome)) = done.iter().find(|(s, _)| s == script) {
        return outcome.clone();
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts").join(script);
    let outcome = match Command::new(&path).status() {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(format!("{} failed ({status})", path.display())),
        Err(error) => Err(format!("running {}: {error}", path.display())),
    };
    done.push((script.to_owned(), outcome.clone()));
    outcome
}
