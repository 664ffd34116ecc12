//! Finding the `valkey-server` binary, installing it once when it is missing.
//!
//! Order: `$LB_VALKEY_SERVER` (must exist when set), `${LB_TOOLS_DIR:-/var/tmp/lb-tools}/bin/
//! valkey-server` (where `scripts/install-valkey.sh` links it), then `valkey-server` on `PATH`.
//! When none is found, the install script is run once under an exclusive lock file in the tools
//! dir, so test binaries started in parallel do not install over each other, and the search is
//! repeated. If that fails too, the error says what to run.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use tracing::info;

use super::LocalClusterError;

/// Path of a `valkey-server` binary to use instead of searching.
pub const SERVER_ENV: &str = "LB_VALKEY_SERVER";
/// Directory the install script installs into.
pub const TOOLS_DIR_ENV: &str = "LB_TOOLS_DIR";
/// Outside the work tree and kept across builds; `/var/tmp` survives reboots unlike `/tmp`.
pub const DEFAULT_TOOLS_DIR: &str = "/var/tmp/lb-tools";
/// The install script, found from this crate's source directory (the workspace's `scripts/`).
pub const INSTALL_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/install-valkey.sh");

fn tools_dir() -> PathBuf {
    std::env::var_os(TOOLS_DIR_ENV).map(PathBuf::from).unwrap_or_else(|| PathBuf::from(DEFAULT_TOOLS_DIR))
}

/// Where `valkey-server` is, without installing anything.
pub fn locate_valkey_server() -> Result<Option<PathBuf>, LocalClusterError> {
    if let Some(path) = std::env::var_os(SERVER_ENV) {
        let path = PathBuf::from(path);
        return if is_executable(&path) {
            Ok(Some(path))
        } else {
            Err(LocalClusterError::BinaryNotFound {
                detail: format!("{SERVER_ENV}={} is not an executable file", path.display()),
            })
        };
    }
    let in_tools = tools_dir().join("bin").join("valkey-server");
    if is_executable(&in_tools) {
        return Ok(Some(in_tools));
    }
    let on_path = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).map(|dir| dir.join("valkey-server")).find(|p| is_executable(p)));
    Ok(on_path.flatten())
}

/// Finds `valkey-server`, running `scripts/install-valkey.sh` once (under a lock) when it is
/// missing. Blocking: call it from `spawn_blocking` in async code.
pub fn find_valkey_server() -> Result<PathBuf, LocalClusterError> {
    if let Some(path) = locate_valkey_server()? {
        return Ok(path);
    }
    let tools = tools_dir();
    let io_error = |what: String| move |source| LocalClusterError::Io { what, source };
    fs::create_dir_all(&tools).map_err(io_error(format!("creating tools dir {}", tools.display())))?;
    let lock_path = tools.join(".install.lock");
    let lock = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(io_error(format!("opening lock file {}", lock_path.display())))?;
    lock.lock().map_err(io_error(format!("locking {}", lock_path.display())))?;
    // Another process may have installed while this one waited for the lock.
    if let Some(path) = locate_valkey_server()? {
        return Ok(path);
    }
    info!(script = INSTALL_SCRIPT, tools_dir = %tools.display(), "valkey-server not found: running the install script");
    let started = Instant::now();
    let output = Command::new("bash")
        .arg(INSTALL_SCRIPT)
        .env(TOOLS_DIR_ENV, &tools)
        .output()
        .map_err(io_error(format!("running {INSTALL_SCRIPT}")))?;
    info!(
        elapsed_ms = started.elapsed().as_millis() as u64,
        success = output.status.success(),
        "install script finished"
    );
    drop(lock);
    if !output.status.success() {
        return Err(LocalClusterError::BinaryNotFound {
            detail: format!(
                "{INSTALL_SCRIPT} failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ),
        });
    }
    locate_valkey_server()?.ok_or_else(|| LocalClusterError::BinaryNotFound {
        detail: format!("{INSTALL_SCRIPT} succeeded but {} has no valkey-server", tools.join("bin").display()),
    })
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
