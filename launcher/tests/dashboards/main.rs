//! What lb ships for Prometheus and Grafana (`dashboards/`, `docs/metrics.md`), checked three
//! ways: the committed files are what `lb_launcher::dashboards` writes; every metric the code
//! records is in a catalog with HELP text and a unit suffix, and every metric a dashboard or an
//! alert rule reads is exported; and in a real Prometheus scraping a running system through a
//! hotspot, every query parses and the key panels show data ([`prometheus`]).
//!
//! `UPDATE_DASHBOARDS=1 cargo test -p lb-launcher --test dashboards` rewrites the generated files.

#[path = "../support/install.rs"]
mod install;
mod prometheus;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use lb_common::telemetry::MetricKind;
use lb_launcher::dashboards::{self, catalog, dashboards, grafana_json, metric_names};
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every PromQL expression shipped: (where, expression).
fn shipped_expressions() -> Vec<(String, String)> {
    let mut exprs = Vec::new();
    for d in dashboards() {
        for row in &d.rows {
            for p in &row.panels {
                for (expr, _) in &p.queries {
                    exprs.push((format!("{} / {}", d.uid, p.title), (*expr).to_owned()));
                }
            }
        }
    }
    for (name, expr) in alert_rules() {
        exprs.push((format!("alert {name}"), expr));
    }
    exprs
}

/// (alert name, expr) of the shipped rule file, read with a line scanner: the file's layout is
/// ours (`- alert:` then `expr:` on one line or as a `|` block).
fn alert_rules() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo().join("dashboards/prometheus/lb-alerts.yml")).expect("rule file");
    let mut rules = Vec::new();
    let mut lines = text.lines().peekable();
    let mut name = None;
    while let Some(line) = lines.next() {
        let t = line.trim();
        if let Some(n) = t.strip_prefix("- alert:") {
            name = Some(n.trim().to_owned());
        } else if let Some(e) = t.strip_prefix("expr:") {
            let e = e.trim();
            let expr = if e == "|" {
                // The block is every following line indented deeper than `expr:`.
                let indent = line.len() - line.trim_start().len();
                let mut block = Vec::new();
                while let Some(next) = lines.peek() {
                    if next.len() - next.trim_start().len() <= indent {
                        break;
                    }
                    block.push(lines.next().expect("peeked").trim().to_owned());
                }
                block.join(" ")
            } else {
                e.to_owned()
            };
            rules.push((name.take().expect("expr after an alert name"), expr));
        }
    }
    assert!(rules.len() >= 6, "the rule file has its alerts: {rules:?}");
    rules
}

/// The generated files and what they should contain.
fn generated() -> Vec<(PathBuf, String)> {
    let mut files: Vec<(PathBuf, String)> = dashboards()
        .iter()
        .map(|d| {
            let json = serde_json::to_string_pretty(&grafana_json(d)).expect("json") + "\n";
            (repo().join(format!("dashboards/grafana/{}.json", d.uid)), json)
        })
        .collect();
    files.push((repo().join("docs/metrics.md"), dashboards::metrics_reference()));
    files
}

#[test]
fn the_committed_dashboards_and_metrics_reference_are_generated() {
    let update = std::env::var_os("UPDATE_DASHBOARDS").is_some();
    let mut stale = Vec::new();
    for (path, want) in generated() {
        if update {
            std::fs::write(&path, &want).expect("write");
            continue;
        }
        if std::fs::read_to_string(&path).ok().as_deref() != Some(want.as_str()) {
            stale.push(path.display().to_string());
        }
    }
    assert!(stale.is_empty(), "stale, rerun with UPDATE_DASHBOARDS=1: {stale:?}");
    // Nothing else sits in dashboards/grafana: a dashboard removed from the code goes.
    let listed: BTreeSet<String> = dashboards().iter().map(|d| format!("{}.json", d.uid)).collect();
    for entry in std::fs::read_dir(repo().join("dashboards/grafana")).expect("dir") {
        let name = entry.expect("entry").file_name().to_string_lossy().into_owned();
        assert!(listed.contains(&name) || name == "README.md", "dashboards/grafana/{name} is not generated");
    }
}

#[test]
fn every_dashboard_is_grafana_json_that_imports_without_edits() {
    let mut uids = BTreeSet::new();
    for d in dashboards() {
        let json = grafana_json(&d);
        let uid = json["uid"].as_str().expect("uid");
        assert!(uid.len() <= 40, "{uid}: Grafana refuses uids over 40 characters");
        assert!(uids.insert(uid.to_owned()), "{uid} twice");
        assert_eq!(json["id"], Value::Null, "{uid}: a shipped dashboard has no id");
        assert_eq!(json["schemaVersion"], dashboards::SCHEMA_VERSION);
        let text = json.to_string();
        assert!(!text.contains("__inputs") && !text.contains("DS_PROMETHEUS"), "{uid}: no import placeholders");
        let vars = json["templating"]["list"].as_array().expect("variables");
        assert!(vars.iter().any(|v| v["type"] == "datasource" && v["name"] == "datasource"), "{uid}: $datasource");
        assert!(vars.iter().any(|v| v["name"] == "instance"), "{uid}: $instance");
        let own_prefix: String = d.instance_metric.splitn(3, '_').take(2).collect::<Vec<_>>().join("_") + "_";
        let mut ids = BTreeSet::new();
        for p in json["panels"].as_array().expect("panels") {
            assert!(ids.insert(p["id"].as_u64().expect("id")), "{uid}: panel ids are unique");
            let w = p["gridPos"]["w"].as_u64().expect("w") + p["gridPos"]["x"].as_u64().expect("x");
            assert!(w <= 24, "{uid}: {} runs off the 24-column grid", p["title"]);
            if p["type"] == "row" {
                continue;
            }
            let title = p["title"].as_str().expect("title");
            let unit = p["fieldConfig"]["defaults"]["unit"].as_str().unwrap_or_default();
            assert!(!unit.is_empty(), "{uid} / {title}: every panel has a unit");
            assert_eq!(p["datasource"]["uid"], "${datasource}", "{uid} / {title}");
            for t in p["targets"].as_array().expect("targets") {
                let expr = t["expr"].as_str().expect("expr");
                assert_eq!(t["datasource"]["uid"], "${datasource}", "{uid} / {title}");
                // A query of the dashboard's own binary (or the shared HTTP and config series)
                // follows $instance; the overview and decisions dashboards also read the ops
                // server's series, which live on another instance in a real deployment.
                let own = metric_names(expr, &[])
                    .iter()
                    .any(|n| n.starts_with(&own_prefix) || n.starts_with("lb_http_") || n.starts_with("lb_config_"));
                assert!(!own || expr.contains("$instance"), "{uid} / {title}: {expr} ignores $instance");
            }
        }
    }
    assert_eq!(uids.len(), 5, "overview, decisions and one per binary");
}

/// `counter!("lb_…"`, `gauge!(` and `histogram!(` calls in our sources, and metric names kept
/// in `…_METRIC` constants: (name, kind when the call shows it, file).
fn recorded_in_source() -> Vec<(String, Option<MetricKind>, String)> {
    let mut found = Vec::new();
    for dir in [
        "agent/src",
        "common/src",
        "launcher/src",
        "lbctl/src",
        "master/src",
        "ops-server/src",
        "reporter/src",
        "testbed/src",
        "valkey/src",
    ] {
        let mut stack = vec![repo().join(dir)];
        while let Some(path) = stack.pop() {
            if path.is_dir() {
                stack.extend(std::fs::read_dir(&path).expect("dir").map(|e| e.expect("entry").path()));
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("source");
            // Names kept in a constant (the fair queue's), recorded through it.
            let constant = "_METRIC: &str = \"";
            for (at, _) in text.match_indices(constant) {
                let name: String = text[at + constant.len()..].chars().take_while(|&c| c != '"').collect();
                found.push((name, None, path.strip_prefix(repo()).unwrap_or(&path).display().to_string()));
            }
            for (macro_name, kind) in [
                ("counter!(", MetricKind::Counter),
                ("gauge!(", MetricKind::Gauge),
                ("histogram!(", MetricKind::Histogram),
            ] {
                for (at, _) in text.match_indices(macro_name) {
                    let rest = text[at + macro_name.len()..].trim_start();
                    let Some(quoted) = rest.strip_prefix('"') else { continue };
                    let name: String = quoted.chars().take_while(|&c| c != '"').collect();
                    if name.starts_with("lb_") {
                        found.push((
                            name,
                            Some(kind),
                            path.strip_prefix(repo()).unwrap_or(&path).display().to_string(),
                        ));
                    }
                }
            }
        }
    }
    found
}

#[test]
fn every_metric_the_code_records_is_catalogued_with_help_and_a_unit() {
    let catalog = catalog();
    let mut by_name = BTreeMap::new();
    for (who, d) in &catalog {
        assert!(by_name.insert(d.name, (*who, d.kind)).is_none(), "{} is catalogued twice", d.name);
        if let Some(problem) = d.naming_problem() {
            panic!("{problem}");
        }
    }
    let recorded = recorded_in_source();
    assert!(recorded.len() > 50, "the scan finds the metrics: {}", recorded.len());
    for (name, kind, file) in &recorded {
        match by_name.get(name.as_str()) {
            None => panic!("{file} records {name}, which no catalog lists (its HELP text would be missing)"),
            Some((who, k)) => assert!(
                kind.is_none_or(|kind| kind == *k),
                "{file}: {name} is recorded as {kind:?}, catalogued ({who}) as {k:?}"
            ),
        }
    }
    let recorded: BTreeSet<&str> = recorded.iter().map(|(n, ..)| n.as_str()).collect();
    for name in by_name.keys() {
        assert!(recorded.contains(name), "{name} is catalogued but never recorded");
    }
}

#[test]
fn every_metric_a_dashboard_or_alert_reads_is_exported() {
    let catalog = catalog();
    let known: Vec<&str> = catalog.iter().map(|(_, d)| d.name).collect();
    for (place, expr) in shipped_expressions() {
        let names = metric_names(&expr, &known);
        assert!(!names.is_empty(), "{place}: reads no lb metric: {expr}");
        for name in names {
            assert!(known.contains(&name.as_str()), "{place}: {name} is exported by no binary ({expr})");
            let histogram = catalog.iter().any(|(_, d)| d.name == name && d.kind == MetricKind::Histogram);
            if histogram {
                assert!(expr.contains(&format!("{name}_")), "{place}: a histogram is read by its _bucket/_count/_sum");
            }
        }
    }
}
