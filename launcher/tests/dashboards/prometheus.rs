//! A real Prometheus (Debian's, installed by `scripts/install-prometheus.sh` when missing) on
//! the `prometheus.yml` that `lb up` writes, scraping the system through the end-to-end hot
//! range until its split has been judged and the hotspot's relief measured. Then every panel
//! query of every shipped dashboard runs as Grafana would run it (a range query over the run)
//! and every alert expression as Prometheus does (instant): each must parse, and each key panel
//! must show data. The rule file must load with every rule healthy, and `promtool` must pass the
//! rules, the generated config and the exposition of `/metrics`.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lb_common::clients::MasterClient;
use lb_common::config::shared::HttpClientConfig;
use lb_common::protocol::{ActionKind, Evaluation, RecordsQuery};
use lb_launcher::dashboards::dashboards;
use lb_launcher::up::{Overrides, UpOptions, up_with};
use serde_json::Value;

const PROMETHEUS: &str = "/usr/bin/prometheus";
const PROMTOOL: &str = "/usr/bin/promtool";
const HOT_RANGE: &str = include_str!("../../../configs/scenarios/e2e-hot-range.toml");
/// Judge an action soon after it ends (the launcher e2e's settings), so the run stays short.
const FAST_EVALUATION: &str = "[analyzer]\nwindow_ms = 2000\n[evaluation]\nsettle_secs = 2\nwindow_secs = 3\n";
/// What `$__rate_interval` is for a 1 s scrape (Grafana: at least four scrape intervals).
const RATE_INTERVAL: &str = "15s";
/// From start until the split is judged and the relief measured.
const BUDGET: Duration = Duration::from_secs(150);

/// Installs Prometheus when the machine lacks it.
fn installed() -> PathBuf {
    if !Path::new(PROMETHEUS).is_file() || !Path::new(PROMTOOL).is_file() {
        crate::install::run_once("install-prometheus.sh").expect("prometheus is installed");
    }
    PathBuf::from(PROMETHEUS)
}

/// A Prometheus server process, killed on drop.
struct Server {
    child: Child,
    url: String,
    log: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn start(binary: &Path, config: &Path, dir: &Path) -> Server {
        // A free loopback port: bound, read, released for Prometheus to take.
        let port = TcpListener::bind("127.0.0.1:0").expect("free port").local_addr().expect("addr").port();
        let log = dir.join("prometheus.log");
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("tsdb").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("prometheus starts");
        Server { child, url: format!("http://127.0.0.1:{port}"), log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

async fn get(http: &reqwest::Client, url: &str, query: &[(&str, String)]) -> Value {
    let reply = http.get(url).query(query).send().await.unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = reply.status();
    let body: Value = reply.json().await.unwrap_or_else(|e| panic!("GET {url}: {status}, not JSON: {e}"));
    body
}

/// An instant query's result, or the error Prometheus gave.
async fn instant(http: &reqwest::Client, server: &Server, expr: &str) -> Result<Vec<Value>, String> {
    let body = get(http, &format!("{}/api/v1/query", server.url), &[("query", expr.to_owned())]).await;
    match body["status"].as_str() {
        Some("success") => Ok(body["data"]["result"].as_array().cloned().unwrap_or_default()),
        _ => Err(format!("{}: {}", body["errorType"], body["error"])),
    }
}

/// Whether any point of any series is a number (NaN is what histogram_quantile gives without
/// events: no data to show).
fn has_data(series: &[Value]) -> bool {
    series.iter().any(|s| {
        let points = s["values"].as_array().cloned().unwrap_or_else(|| vec![s["value"].clone()]);
        points.iter().any(|p| p[1].as_str().and_then(|v| v.parse::<f64>().ok()).is_some_and(f64::is_finite))
    })
}

/// The largest value of the series whose labels include every `(name, value)` of `labels`.
fn value_where(series: &[Value], labels: &[(&str, &str)]) -> f64 {
    series
        .iter()
        .filter(|s| labels.iter().all(|(k, v)| s["metric"][*k] == *v))
        .filter_map(|s| s["value"][1].as_str().and_then(|v| v.parse::<f64>().ok()))
        .fold(0.0, f64::max)
}

/// A dashboard query as Grafana sends it for a range ending now.
fn as_grafana_sends_it(expr: &str, range_secs: u64) -> String {
    expr.replace("$__rate_interval", RATE_INTERVAL)
        .replace("$__range", &format!("{range_secs}s"))
        .replace("$instance", ".*")
        .replace("$tenant", ".*")
}

fn promtool(args: &[&str], stdin: Option<&str>) -> (bool, String) {
    use std::io::Write;
    let mut child = Command::new(PROMTOOL)
        .args(args)
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs");
    if let Some(text) = stdin {
        child.stdin.take().expect("stdin").write_all(text.as_bytes()).expect("write stdin");
    }
    let out = child.wait_with_output().expect("promtool output");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_sees_the_split_its_verdict_and_the_relief_on_every_dashboard() {
    let binary = installed();
    lb_common::telemetry::metrics_handle();
    let dir = tempfile::tempdir().expect("dir");
    let options = UpOptions::loopback(dir.path(), HOT_RANGE).expect("scenario");
    let overrides = Overrides { master: FAST_EVALUATION.to_owned(), ..Overrides::default() };
    let running = up_with(&options, &overrides).await.expect("lb starts");
    let config = running.prometheus_config_path.clone();
    assert!(running.urls().iter().any(|(what, url)| what == "prometheus config" && Path::new(url) == config));
    let (ok, out) = promtool(&["check", "config", &config.display().to_string()], None);
    assert!(ok, "promtool check config on the generated file: {out}");
    let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("../dashboards/prometheus/lb-alerts.yml");
    let (ok, out) = promtool(&["check", "rules", &rules.display().to_string()], None);
    assert!(ok, "promtool check rules: {out}");

    let started = Instant::now();
    let server = Server::start(&binary, &config, dir.path());
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().expect("client");
    let master = MasterClient::new(format!("http://{}", running.master.addr()), &HttpClientConfig::default());

    // Until a split was judged and the hotspot's relief reached Prometheus.
    let mut judged = false;
    loop {
        assert!(
            started.elapsed() < BUDGET,
            "not relieved within {BUDGET:?} (judged: {judged}); prometheus log:\n{}",
            server.log()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        if !judged {
            let all = RecordsQuery { since_ms: None, limit: Some(1000) };
            judged = master
                .records::<Evaluation>(&all)
                .await
                .is_ok_and(|r| r.iter().any(|e| e.body.spec.kind() == ActionKind::Split));
            continue;
        }
        let relieved = instant(&http, &server, "sum(lb_master_hotspot_relief_seconds_count)").await;
        if relieved.is_ok_and(|r| value_where(&r, &[]) >= 1.0) {
            break;
        }
    }
    // A few more scrapes, so the last pass's gauges and the verdict's counter are in.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let range_secs = started.elapsed().as_secs() + 1;
    let end = chrono::Utc::now().timestamp();
    let start = end - range_secs as i64;

    let mut broken = Vec::new();
    let mut empty_keys = Vec::new();
    let mut queried = 0;
    for d in dashboards() {
        for row in &d.rows {
            for p in &row.panels {
                for (expr, _) in &p.queries {
                    let expr = as_grafana_sends_it(expr, range_secs);
                    let body = get(
                        &http,
                        &format!("{}/api/v1/query_range", server.url),
                        &[
                            ("query", expr.clone()),
                            ("start", start.to_string()),
                            ("end", end.to_string()),
                            ("step", "1".to_owned()),
                        ],
                    )
                    .await;
                    queried += 1;
                    if body["status"] != "success" {
                        broken.push(format!("{} / {}: {expr}: {}", d.uid, p.title, body["error"]));
                        continue;
                    }
                    let series = body["data"]["result"].as_array().cloned().unwrap_or_default();
                    if p.key && !has_data(&series) {
                        empty_keys.push(format!("{} / {}: {expr}", d.uid, p.title));
                    }
                }
            }
        }
    }
    for (name, expr) in super::alert_rules() {
        queried += 1;
        if let Err(error) = instant(&http, &server, &expr).await {
            broken.push(format!("alert {name}: {expr}: {error}"));
        }
    }
    assert!(broken.is_empty(), "queries Prometheus refused:\n{}", broken.join("\n"));
    assert!(empty_keys.is_empty(), "key panels without data:\n{}", empty_keys.join("\n"));
    assert!(queried > 60, "every panel and rule was asked: {queried}");

    // The decisions dashboard shows the split and its verdict. The split may have ended before
    // Prometheus' first scrape of the ops server (it starts after `lb up`): `increase` then
    // sees its counter start at 1 and reads 0, so the counter's own value is asked.
    let range = format!("{range_secs}s");
    let actions =
        instant(&http, &server, &format!("max by (kind, outcome) (max_over_time(lb_ops_actions_total[{range}]))"))
            .await
            .expect("actions");
    assert!(
        value_where(&actions, &[("kind", "split"), ("outcome", "succeeded")]) > 0.0,
        "a split succeeded: {actions:?}"
    );
    let verdicts =
        instant(&http, &server, &format!("sum by (verdict, policy) (increase(lb_master_evaluations_total[{range}]))"))
            .await
            .expect("verdicts");
    assert!(value_where(&verdicts, &[("policy", "partition_overload")]) > 0.0, "the split was judged: {verdicts:?}");

    // The rule file loaded into this Prometheus, and every rule evaluates without error.
    let body = get(&http, &format!("{}/api/v1/rules", server.url), &[]).await;
    let loaded: Vec<Value> = body["data"]["groups"]
        .as_array()
        .expect("rule groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .collect();
    assert_eq!(loaded.len(), super::alert_rules().len(), "every rule loaded: {body}");
    for rule in &loaded {
        assert_eq!(rule["health"], "ok", "rule {} evaluates: {}", rule["name"], rule["lastError"]);
    }

    // The exposition itself: every lb series has HELP and TYPE, and promtool's linter agrees.
    let exposition = http
        .get(format!("http://{}/metrics", running.master.addr()))
        .send()
        .await
        .expect("scrape")
        .text()
        .await
        .expect("text");
    for line in exposition.lines().filter(|l| l.starts_with("# TYPE lb_")) {
        let name = line.split_whitespace().nth(2).expect("name");
        assert!(exposition.contains(&format!("# HELP {name} ")), "{name} has no HELP text");
    }
    let (ok, out) = promtool(&["check", "metrics"], Some(&exposition));
    assert!(ok, "promtool check metrics: {out}");

    drop(server);
    assert!(running.stop(Duration::from_secs(20)).await, "clean stop");
}
