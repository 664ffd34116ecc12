//! Config files: TOML, strict, validated, hot-reloaded.
//!
//! Each binary's config is one struct implementing [`ServiceConfig`]: it rejects unknown fields
//! (`#[serde(deny_unknown_fields)]` on every table), names its *static* fields (addresses, paths:
//! a change needs a restart) and validates itself with messages that name the field and value.
//! Everything not static is *dynamic*: policies, thresholds, intervals, caps.
//!
//! [`load`] reads a file once (start-up); [`watch::spawn`] keeps reloading it. A reload is
//! parsed, validated, diffed against the live config and published atomically, or rejected with
//! the last good config kept: a bad file never replaces a good live config.

pub mod shared;
pub mod watch;

use std::fmt::Debug;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::validate::ValidationError;

/// A binary's whole config file.
pub trait ServiceConfig: DeserializeOwned + Serialize + Clone + Debug + Send + Sync + 'static {
    /// Dotted paths of the fields (or whole tables) that cannot change while running, e.g.
    /// `["http.listen", "store.path"]`. A reload that changes one of them is rejected.
    const STATIC_FIELDS: &'static [&'static str];

    /// Checks everything the types cannot: ranges, orderings, cross-field rules.
    fn validate(&self) -> Result<(), ValidationError>;
}

/// Why a config file was not (re)loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {}: {error}", path.display())]
    Read { path: PathBuf, error: std::io::Error },
    #[error("config file {} does not parse: {message}", path.display())]
    Parse { path: PathBuf, message: String },
    #[error("config file {} is invalid: {source}", path.display())]
    Invalid { path: PathBuf, source: ValidationError },
    #[error(
        "config file {} changes {} which need a restart; the running config is kept",
        path.display(),
        fields.join(", ")
    )]
    StaticChange { path: PathBuf, fields: Vec<String> },
}

impl ConfigError {
    /// Bounded label for `lb_config_reloads_total{outcome}`.
    pub fn outcome(&self) -> &'static str {
        match self {
            ConfigError::Read { .. } => "unreadable",
            ConfigError::Parse { .. } => "parse_error",
            ConfigError::Invalid { .. } => "invalid",
            ConfigError::StaticChange { .. } => "static_change",
        }
    }
}

/// Parses and validates config text; `path` only names the source in errors. A float that is
/// not finite (TOML's `inf`, `nan`) is refused wherever it is, naming the field: no threshold,
/// ratio or rate of lb means anything at infinity, and a comparison with NaN is always false.
pub fn parse<C: ServiceConfig>(text: &str, path: &Path) -> Result<C, ConfigError> {
    let config: C = toml::from_str(text)
        .map_err(|e| ConfigError::Parse { path: path.to_owned(), message: parse_message(text, &e) })?;
    let mut finite = crate::validate::Validator::new();
    if let Ok(table) = toml::from_str::<toml::Table>(text) {
        check_finite(&mut finite, "", &toml::Value::Table(table));
    }
    finite.finish().map_err(|source| ConfigError::Invalid { path: path.to_owned(), source })?;
    config.validate().map_err(|source| ConfigError::Invalid { path: path.to_owned(), source })?;
    Ok(config)
}

/// Records every non-finite float under `at`.
fn check_finite(v: &mut crate::validate::Validator, at: &str, value: &toml::Value) {
    match value {
        toml::Value::Float(f) => {
            v.at(at).check(f.is_finite(), "", f, "must be a finite number");
        }
        toml::Value::Table(table) => {
            for (key, value) in table {
                let child = if at.is_empty() { key.clone() } else { format!("{at}.{key}") };
                check_finite(v, &child, value);
            }
        }
        toml::Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                check_finite(v, &format!("{at}[{i}]"), item);
            }
        }
        _ => {}
    }
}

/// Keys whose values are secrets: their line is never quoted in an error.
const SECRET_KEY_PARTS: [&str; 4] = ["token", "secret", "password", "key"];

/// toml's own message quotes the offending line with a caret under the bad token; on a token
/// line that is the secret itself (an unclosed quote, the key written twice, a bad escape). The
/// message names the line and column and what is wrong, quotes the line only when its key is
/// not a secret, and redacts quoted strings from the description when it is.
fn parse_message(text: &str, e: &toml::de::Error) -> String {
    let Some(span) = e.span() else { return e.message().trim_end().to_owned() };
    let before = &text[..span.start.min(text.len())];
    let line_no = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    let line = text.lines().nth(line_no - 1).unwrap_or("");
    let key = line.split('=').next().unwrap_or("").trim().to_ascii_lowercase();
    let secret = SECRET_KEY_PARTS.iter().any(|part| key.contains(part));
    if secret {
        let description = redact_quoted(e.message().trim_end());
        format!("line {line_no}, column {column}: {description} (the line is not shown: it holds a secret)")
    } else {
        format!("line {line_no}, column {column}: {}\n  | {line}", e.message().trim_end())
    }
}

/// `invalid type: string "abc", expected u64` → `invalid type: string <redacted>, expected u64`.
fn redact_quoted(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut quoted = false;
    for c in message.chars() {
        match (c, quoted) {
            ('"', false) => {
                quoted = true;
                out.push_str("<redacted>");
            }
            ('"', true) => quoted = false,
            (_, true) => {}
            (c, false) => out.push(c),
        }
    }
    out
}

/// Reads, parses and validates a config file.
pub fn load<C: ServiceConfig>(path: &Path) -> Result<C, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read { path: path.to_owned(), error })?;
    parse(&text, path)
}

/// Dotted paths of every leaf that differs between `old` and `new`, sorted.
pub fn changed_fields<C: Serialize>(old: &C, new: &C) -> Vec<String> {
    let old = serde_json::to_value(old).expect("config types serialise to JSON");
    let new = serde_json::to_value(new).expect("config types serialise to JSON");
    let mut out = Vec::new();
    diff_values("", &old, &new, &mut out);
    out.sort();
    out
}

/// The changed paths that fall under one of `C::STATIC_FIELDS`.
pub fn static_changes<C: ServiceConfig>(changed: &[String]) -> Vec<String> {
    changed.iter().filter(|path| C::STATIC_FIELDS.iter().any(|s| is_under(path, s))).cloned().collect()
}

fn is_under(path: &str, prefix: &str) -> bool {
    path == prefix || path.strip_prefix(prefix).is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
}

fn diff_values(path: &str, old: &serde_json::Value, new: &serde_json::Value, out: &mut Vec<String>) {
    use serde_json::Value;
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, va) in a {
                let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                match b.get(k) {
                    Some(vb) => diff_values(&p, va, vb, out),
                    None => out.push(p),
                }
            }
            for k in b.keys().filter(|k| !a.contains_key(*k)) {
                out.push(if path.is_empty() { k.clone() } else { format!("{path}.{k}") });
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (va, vb)) in a.iter().zip(b).enumerate() {
                diff_values(&format!("{path}[{i}]"), va, vb, out);
            }
        }
        _ if old != new => out.push(path.to_owned()),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Serialize, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Tokens {
        #[serde(default)]
        listen: String,
        #[serde(default)]
        token: String,
    }

    impl ServiceConfig for Tokens {
        const STATIC_FIELDS: &'static [&'static str] = &[];
        fn validate(&self) -> Result<(), ValidationError> {
            Ok(())
        }
    }

    /// Issue 17: a syntax error on a token line put the token into `last_error` (served
    /// unauthenticated at `/v1/config/status`) and the log.
    #[test]
    fn a_syntax_error_on_a_token_line_never_shows_the_token() {
        let secret = "s3cr3t-operator-token-0123";
        for text in [
            format!("token = \"{secret}\n"),
            format!("token = \"{secret}\"\ntoken = \"{secret}\"\n"),
            format!("token = \"{secret}\\q\"\n"),
            format!("token = [\"{secret}\"]\n"),
        ] {
            let err = parse::<Tokens>(&text, Path::new("t.toml")).expect_err("does not parse").to_string();
            assert!(!err.contains(secret) && !err.contains("s3cr3t"), "{err}");
            assert!(err.contains("line "), "the error still says where: {err}");
        }
        let err = parse::<Tokens>("listen = 0.0.0.0:80\n", Path::new("t.toml")).expect_err("bad").to_string();
        assert!(
            err.contains("line 1, column") && err.contains("| listen = 0.0.0.0:80"),
            "a line without a secret is quoted: {err}"
        );
    }

    #[derive(Debug, Clone, Serialize, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Ratios {
        planner: Planner,
        #[serde(default)]
        steps: Vec<f64>,
    }

    #[derive(Debug, Clone, Serialize, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Planner {
        max_shards_to_target_ratio: f64,
    }

    impl ServiceConfig for Ratios {
        const STATIC_FIELDS: &'static [&'static str] = &[];
        fn validate(&self) -> Result<(), ValidationError> {
            Ok(())
        }
    }

    /// Issue 17: `max_shards_to_target_ratio = inf` was accepted; every config float must be
    /// finite, whether or not its own validation thought of it.
    #[test]
    fn a_float_that_is_not_finite_is_refused_naming_the_field() {
        for bad in ["inf", "+inf", "-inf", "nan"] {
            let text = format!("steps = [1.0, {bad}]\n[planner]\nmax_shards_to_target_ratio = {bad}\n");
            let err = parse::<Ratios>(&text, Path::new("t.toml")).expect_err("not finite").to_string();
            assert!(err.contains("planner.max_shards_to_target_ratio = "), "{err}");
            assert!(err.contains("steps[1] = ") && err.contains("must be a finite number"), "{err}");
        }
        parse::<Ratios>("[planner]\nmax_shards_to_target_ratio = 2.5\n", Path::new("t.toml")).expect("finite");
    }

    #[test]
    fn diff_names_leaves_and_static_prefixes() {
        let a = serde_json::json!({"http": {"listen": "a", "body_limit_bytes": 1}, "p": [1, 2], "x": {"y": 1}});
        let b = serde_json::json!({"http": {"listen": "b", "body_limit_bytes": 1}, "p": [1, 3], "z": 1});
        let changed = changed_fields(&a, &b);
        assert_eq!(changed, ["http.listen", "p[1]", "x", "z"]);
        assert!(is_under("http.listen", "http"));
        assert!(is_under("http.listen", "http.listen"));
        assert!(!is_under("https.listen", "http"));
        assert!(is_under("peers[0]", "peers"));
    }
}
