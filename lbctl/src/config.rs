//! Where lbctl finds the servers and its token: each setting from the flag, else the
//! environment (`LB_MASTER_URL`, `LB_OPS_URL`, `LB_TOKEN`; clap reads those into the flags),
//! else the config file, else the default.
//!
//! The config file is TOML with three optional keys; an unknown key is an error (a typo must not
//! silently fall back to a default):
//!
//! ```toml
//! master_url = "http://lb-master.internal:7000"
//! ops_url = "http://lb-ops.internal:7200"
//! token = "…"
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use lb_common::config::shared::HttpClientConfig;
use serde::Deserialize;

use crate::cli::GlobalArgs;
use crate::error::CtlError;

/// The master's listen address in `configs/master.toml`.
pub const DEFAULT_MASTER_URL: &str = "http://127.0.0.1:7000";
/// The ops server's listen address in `configs/ops-server.toml`.
pub const DEFAULT_OPS_URL: &str = "http://127.0.0.1:7200";
/// 2 s: a loopback or LAN connect takes milliseconds; an unreachable host should fail fast,
/// well within the request deadline.
pub const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub master_url: Option<String>,
    pub ops_url: Option<String>,
    pub token: Option<String>,
}

/// What lbctl talks to, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub master_url: String,
    pub ops_url: String,
    pub token: Option<String>,
    pub http: HttpClientConfig,
}

/// Where the default config file would be: `$XDG_CONFIG_HOME/lbctl.toml`, else
/// `$HOME/.config/lbctl.toml`.
pub fn default_config_path(xdg_config_home: Option<&str>, home: Option<&str>) -> Option<PathBuf> {
    match (xdg_config_home.filter(|s| !s.is_empty()), home.filter(|s| !s.is_empty())) {
        (Some(xdg), _) => Some(Path::new(xdg).join("lbctl.toml")),
        (None, Some(home)) => Some(Path::new(home).join(".config").join("lbctl.toml")),
        (None, None) => None,
    }
}

/// Reads the config file: the one named (it must exist), else the default one if it exists.
pub fn load_file(explicit: Option<&Path>, default: Option<&Path>) -> Result<FileConfig, CtlError> {
    let path = match (explicit, default) {
        (Some(p), _) => p,
        (None, Some(p)) if p.exists() => p,
        _ => return Ok(FileConfig::default()),
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| CtlError::Usage(format!("cannot read the config file {}: {e}", path.display())))?;
    toml::from_str(&text).map_err(|e| {
        CtlError::Usage(format!("config file {} is invalid: {}", path.display(), crate::fmt::one_line(&e.to_string())))
    })
}

/// Flag (or environment, through clap), else file, else default; URLs must be http(s).
pub fn resolve(global: &GlobalArgs, file: FileConfig) -> Result<Settings, CtlError> {
    let pick = |flag: &Option<String>, file: Option<String>| flag.clone().filter(|s| !s.is_empty()).or(file);
    let master_url = pick(&global.master, file.master_url).unwrap_or_else(|| DEFAULT_MASTER_URL.to_owned());
    let ops_url = pick(&global.ops, file.ops_url).unwrap_or_else(|| DEFAULT_OPS_URL.to_owned());
    let token = pick(&global.token, file.token).filter(|t| !t.is_empty());
    for (what, url) in [("master", &master_url), ("ops server", &ops_url)] {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(CtlError::Usage(format!("the {what} URL {url:?} must start with http:// or https://")));
        }
    }
    let deadline_ms = u64::try_from(global.timeout.as_millis()).unwrap_or(u64::MAX);
    let connect_ms = u64::try_from(MAX_CONNECT_TIMEOUT.min(global.timeout).as_millis()).unwrap_or(u64::MAX);
    Ok(Settings { master_url, ops_url, token, http: HttpClientConfig { connect_timeout_ms: connect_ms, deadline_ms } })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Output;

    fn global(master: Option<&str>) -> GlobalArgs {
        GlobalArgs {
            master: master.map(str::to_owned),
            ops: None,
            token: None,
            config: None,
            output: Output::Table,
            timeout: Duration::from_secs(10),
        }
    }

    #[test]
    fn flags_win_over_the_file_and_the_file_over_defaults() {
        let file = FileConfig {
            master_url: Some("http://from-file:1".into()),
            ops_url: Some("http://ops-file:2".into()),
            token: Some("t".into()),
        };
        let s = resolve(&global(Some("http://flag:9")), file.clone()).expect("valid");
        assert_eq!(
            (s.master_url.as_str(), s.ops_url.as_str(), s.token.as_deref()),
            ("http://flag:9", "http://ops-file:2", Some("t"))
        );
        let s = resolve(&global(None), FileConfig::default()).expect("valid");
        assert_eq!((s.master_url.as_str(), s.ops_url.as_str(), s.token), (DEFAULT_MASTER_URL, DEFAULT_OPS_URL, None));
        assert_eq!(s.http, HttpClientConfig { connect_timeout_ms: 2_000, deadline_ms: 10_000 });
        assert!(matches!(resolve(&global(Some("lb-master:7000")), FileConfig::default()), Err(CtlError::Usage(_))));
    }

    #[test]
    fn the_file_is_strict_and_found_where_xdg_says() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("lbctl.toml");
        std::fs::write(&path, "master_url = \"http://m:1\"\ntoken = \"x\"\n").expect("write");
        let file = load_file(Some(&path), None).expect("valid");
        assert_eq!(file.master_url.as_deref(), Some("http://m:1"));
        std::fs::write(&path, "master = \"http://m:1\"\n").expect("write");
        let err = load_file(Some(&path), None).expect_err("unknown key");
        assert!(err.to_string().contains("master"), "{err}");
        assert!(load_file(Some(&dir.path().join("missing.toml")), None).is_err(), "a named file must exist");
        assert_eq!(
            load_file(None, Some(&dir.path().join("missing.toml"))).expect("absent default"),
            FileConfig::default()
        );
        assert_eq!(default_config_path(Some("/x"), Some("/home/u")), Some(PathBuf::from("/x/lbctl.toml")));
        assert_eq!(default_config_path(None, Some("/home/u")), Some(PathBuf::from("/home/u/.config/lbctl.toml")));
    }
}
