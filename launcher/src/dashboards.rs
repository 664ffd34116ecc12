//! What lb ships for Prometheus and Grafana, written from one definition here:
//!
//! - `dashboards/grafana/*.json`: Grafana dashboards (classic JSON model, `schemaVersion`
//!   [`SCHEMA_VERSION`]): an overview, the decisions, and one per binary. Every panel has a
//!   unit, every query filters on the `$instance` variable and reads the `$datasource` variable,
//!   so a dashboard imports (UI or file provisioning) without edits.
//! - `docs/metrics.md`: every metric each binary exports, with type, labels and HELP text,
//!   from the crates' catalogs ([`catalog`]).
//! - [`scrape_config`]: the `prometheus.yml` that `lb up` writes for the ports it started.
//!
//! The alert rules (`dashboards/prometheus/lb-alerts.yml`) are written by hand (YAML read by
//! `promtool`); [`ALERT_RULES`] embeds them so `lb up` can write them beside its scrape config.
//! `cargo test -p lb-launcher --test dashboards` checks the committed files against this module
//! (`UPDATE_DASHBOARDS=1` rewrites them), every metric name against the catalogs, and every query
//! against a real Prometheus scraping a running system.

use lb_common::telemetry::MetricDef;
use serde_json::{Value, json};

/// Grafana's classic dashboard JSON model version these files are written in (Grafana 10.4+
/// writes 39; newer versions migrate it on load).
pub const SCHEMA_VERSION: u32 = 39;

/// The alert rules, as committed.
pub const ALERT_RULES: &str = include_str!("../../dashboards/prometheus/lb-alerts.yml");

/// Every metric any lb binary exports, from each crate's catalog.
pub fn catalog() -> Vec<(&'static str, MetricDef)> {
    let crates: [(&str, &[MetricDef]); 6] = [
        ("every server (lb-common)", lb_common::telemetry::CATALOG),
        ("lb-agent", lb_agent::metrics::CATALOG),
        ("lb-ops-server", lb_ops_server::metrics::CATALOG),
        ("lb-master", lb_master::metrics::CATALOG),
        ("lb-agent and lb-ops-server on Valkey (lb-valkey)", lb_valkey::metrics::CATALOG),
        ("a storage worker embedding lb-reporter (lb up's testbed does)", lb_reporter::CATALOG),
    ];
    crates.into_iter().flat_map(|(who, defs)| defs.iter().map(move |d| (who, *d))).collect()
}

/// A panel's look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Look {
    /// A line per series over time.
    Lines,
    /// Bars per interval (counts of events).
    Bars,
    /// The latest value, big.
    Stat,
}

/// One panel: queries (PromQL, legend) with a Grafana unit id.
#[derive(Debug, Clone)]
pub struct Panel {
    pub title: &'static str,
    pub description: &'static str,
    pub look: Look,
    /// Grafana unit id: `percentunit`, `s`, `bytes`, `ops`, `cps`, `short`, `suffix:×`, ...
    pub unit: &'static str,
    pub queries: Vec<(&'static str, &'static str)>,
    /// Must show data once a hot range was split and judged (the Prometheus test asserts it).
    pub key: bool,
    /// For a stat of a 0/1 state: what 0 and 1 read as.
    pub states: Option<(&'static str, &'static str)>,
}

#[derive(Debug, Clone)]
pub struct Row {
    pub title: &'static str,
    pub panels: Vec<Panel>,
}

#[derive(Debug, Clone)]
pub struct Dashboard {
    /// File name under `dashboards/grafana/` and the dashboard's uid.
    pub uid: &'static str,
    pub title: &'static str,
    pub description: &'static str,
    /// The metric whose `instance` label values fill the `$instance` variable.
    pub instance_metric: &'static str,
    /// A `$tenant` variable from this metric's `tenant` label.
    pub tenant_metric: Option<&'static str>,
    pub rows: Vec<Row>,
}

fn panel(title: &'static str, look: Look, unit: &'static str, queries: &[(&'static str, &'static str)]) -> Panel {
    Panel { title, description: "", look, unit, queries: queries.to_vec(), key: false, states: None }
}

impl Panel {
    fn key(mut self) -> Self {
        self.key = true;
        self
    }

    fn about(mut self, description: &'static str) -> Self {
        self.description = description;
        self
    }

    fn states(mut self, off: &'static str, on: &'static str) -> Self {
        self.states = Some((off, on));
        self
    }
}

/// The shipped dashboards.
pub fn dashboards() -> Vec<Dashboard> {
    use Look::{Bars, Lines, Stat};
    vec![
        Dashboard {
            uid: "lb-overview",
            title: "lb overview",
            description: "Is the cluster's load even, are requests refused, and how fast does lb relieve a hotspot.",
            instance_metric: "lb_master_analysis_passes_total",
            tenant_metric: None,
            rows: vec![
                Row {
                    title: "Spread of worker load",
                    panels: vec![
                        panel("Hottest worker / mean", Stat, "suffix:×", &[(
                            r#"max(lb_master_cluster_max_mean_ratio{instance=~"$instance"})"#,
                            "max/mean",
                        )])
                        .key()
                        .about("The hottest shared worker's load over the mean; 1 is perfectly even."),
                        panel("CV of worker load", Stat, "percentunit", &[(
                            r#"max(lb_master_cluster_cv_ratio{instance=~"$instance"})"#,
                            "cv",
                        )])
                        .key()
                        .about("Standard deviation over mean of the shared workers' load."),
                        panel("Hottest worker", Stat, "percentunit", &[(
                            r#"max(lb_master_cluster_max_load_ratio{instance=~"$instance"})"#,
                            "hottest",
                        )])
                        .key()
                        .about("The hottest worker's load as a share of its capacity."),
                        panel("Refused requests", Stat, "percentunit", &[(
                            r#"max(lb_master_cluster_rejected_ratio{instance=~"$instance"})"#,
                            "refused",
                        )])
                        .key()
                        .about("Share of the cluster's demand refused (over a partition's limit or a worker's capacity)."),
                        panel("Spread over time", Lines, "suffix:×", &[
                            (r#"max(lb_master_cluster_max_mean_ratio{instance=~"$instance"})"#, "max/mean"),
                            (r#"max(lb_master_cluster_cv_ratio{instance=~"$instance"})"#, "cv"),
                        ])
                        .key(),
                        panel("Refused share of demand", Lines, "percentunit", &[(
                            r#"max(lb_master_cluster_rejected_ratio{instance=~"$instance"})"#,
                            "refused",
                        )])
                        .key(),
                        panel("Ten hottest workers", Lines, "percentunit", &[(
                            r#"topk(10, max by (worker) (lb_master_worker_load_ratio{instance=~"$instance"}))"#,
                            "{{worker}}",
                        )])
                        .key()
                        .about("Load as a share of capacity; the high watermark is the worker-overload policy's."),
                        panel("Zone load", Lines, "percentunit", &[(
                            r#"max by (zone) (lb_master_zone_load_ratio{instance=~"$instance"})"#,
                            "{{zone}}",
                        )])
                        .about("Each availability zone's load as a share of its capacity (empty without zones): lb balances inside a zone and crosses only under [planner.zones] cross = when_full."),
                        panel("Cluster throughput", Lines, "ops", &[(
                            r#"max(lb_master_cluster_ops_per_second{instance=~"$instance"})"#,
                            "served ops/s",
                        )])
                        .key(),
                    ],
                },
                Row {
                    title: "Hotspots",
                    panels: vec![
                        panel("Hot partitions and overloaded workers", Lines, "short", &[
                            (r#"max(lb_master_hot_partitions{instance=~"$instance"})"#, "hot partitions"),
                            (r#"max(lb_master_overloaded_workers{instance=~"$instance"})"#, "overloaded workers"),
                        ])
                        .key(),
                        panel("Time from hotspot to relief", Stat, "s", &[
                            (
                                r#"histogram_quantile(0.5, sum by (le) (increase(lb_master_hotspot_relief_seconds_bucket{instance=~"$instance"}[$__range])))"#,
                                "median",
                            ),
                            (
                                r#"histogram_quantile(0.9, sum by (le) (increase(lb_master_hotspot_relief_seconds_bucket{instance=~"$instance"}[$__range])))"#,
                                "p90",
                            ),
                        ])
                        .key()
                        .about("From a table's first hot partition to the pass from which none was hot for 5 s, over the dashboard's range."),
                        panel("Hotspots relieved", Stat, "short", &[(
                            r#"sum(increase(lb_master_hotspot_relief_seconds_count{instance=~"$instance"}[$__range]))"#,
                            "relieved",
                        )])
                        .key(),
                        panel("Oldest hotspot not relieved", Lines, "s", &[(
                            r#"max(lb_master_hotspot_age_seconds{instance=~"$instance"})"#,
                            "age",
                        )])
                        .key()
                        .about("0 when no table has a hot partition; the LbHotspotNotRelieved alert fires past 10 minutes."),
                        panel("Actions that succeeded", Bars, "short", &[(
                            r#"sum by (kind) (increase(lb_ops_actions_total{outcome="succeeded"}[$__rate_interval]))"#,
                            "{{kind}}",
                        )])
                        .key(),
                    ],
                },
            ],
        },
        Dashboard {
            uid: "lb-decisions",
            title: "lb decisions",
            description: "What lb proposed, did and declined, and how its actions were judged.",
            instance_metric: "lb_master_analysis_passes_total",
            tenant_metric: None,
            rows: vec![
                Row {
                    title: "Proposals and actions",
                    panels: vec![
                        panel("Proposals by policy and mode", Bars, "short", &[(
                            r#"sum by (policy, mode) (increase(lb_master_proposals_total{instance=~"$instance"}[$__rate_interval]))"#,
                            "{{policy}} {{mode}}",
                        )])
                        .key(),
                        panel("Actions by kind and outcome", Stat, "short", &[(
                            r#"sum by (kind, outcome) (increase(lb_ops_actions_total[$__range]))"#,
                            "{{kind}} {{outcome}}",
                        )])
                        .key()
                        .about("Actions that ended on the ops server over the dashboard's range."),
                        panel("Evaluations by verdict", Stat, "short", &[(
                            r#"sum by (verdict, policy) (increase(lb_master_evaluations_total{instance=~"$instance"}[$__range]))"#,
                            "{{policy}} {{verdict}}",
                        )])
                        .key()
                        .about("Every finished action is scored after its evaluation window: effective, no_effect or harmful."),
                        panel("Actions submitted by kind", Bars, "short", &[(
                            r#"sum by (kind) (increase(lb_master_actions_submitted_total{instance=~"$instance"}[$__rate_interval]))"#,
                            "{{kind}}",
                        )])
                        .key(),
                        panel("Harmful verdicts", Bars, "short", &[(
                            r#"sum by (policy) (increase(lb_master_evaluations_total{instance=~"$instance", verdict="harmful"}[$__rate_interval]))"#,
                            "{{policy}}",
                        )])
                        .about("A harmful action is reverted and its policy's cooldown grows."),
                    ],
                },
                Row {
                    title: "What held lb back",
                    panels: vec![
                        panel("Declines by reason", Bars, "cps", &[(
                            r#"sum by (policy, reason) (rate(lb_master_declines_total{instance=~"$instance"}[$__rate_interval]))"#,
                            "{{policy}}: {{reason}}",
                        )])
                        .key()
                        .about("Triggers that got no action, per pass: cooldown, cap, in_flight, no_gain, no_remedy, ..."),
                        panel("Partitions in cooldown", Lines, "short", &[(
                            r#"max(lb_master_cooling_partitions{instance=~"$instance"})"#,
                            "cooling",
                        )])
                        .key(),
                        panel("Actions in flight and waiting for approval", Lines, "short", &[
                            (r#"max(lb_master_inflight_actions{instance=~"$instance"})"#, "in flight"),
                            (r#"max(lb_master_pending_proposals{instance=~"$instance"})"#, "awaiting approval"),
                        ])
                        .key(),
                        panel("Executor halted", Stat, "short", &[(r#"max(lb_ops_halted_executors)"#, "executor")])
                            .key()
                            .states("running", "HALTED")
                            .about("The ops server's halt switch (POST /v1/halt, lbctl halt)."),
                        panel("Planner halted", Stat, "short", &[(
                            r#"max(lb_master_halted_planners{instance=~"$instance"})"#,
                            "planner",
                        )])
                        .key()
                        .states("running", "HALTED")
                        .about("The policy config's global halt = true."),
                    ],
                },
                Row {
                    title: "The analysis pass",
                    panels: vec![
                        panel("Pass duration against its interval", Lines, "s", &[
                            (
                                r#"histogram_quantile(0.99, sum by (le) (rate(lb_master_analysis_pass_seconds_bucket{instance=~"$instance"}[$__rate_interval])))"#,
                                "p99",
                            ),
                            (
                                r#"histogram_quantile(0.5, sum by (le) (rate(lb_master_analysis_pass_seconds_bucket{instance=~"$instance"}[$__rate_interval])))"#,
                                "median",
                            ),
                            (r#"max(lb_master_analysis_interval_seconds{instance=~"$instance"})"#, "interval"),
                        ])
                        .key(),
                        panel("Passes by outcome", Bars, "short", &[(
                            r#"sum by (outcome) (increase(lb_master_analysis_passes_total{instance=~"$instance"}[$__rate_interval]))"#,
                            "{{outcome}}",
                        )])
                        .key(),
                    ],
                },
            ],
        },
        Dashboard {
            uid: "lb-agent",
            title: "lb agent",
            description: "One agent per storage worker: what it ingests, how fast it commits, what it holds.",
            instance_metric: "lb_agent_reports_total",
            tenant_metric: None,
            rows: vec![Row {
                title: "Ingest and store",
                panels: vec![
                    panel("Ingest rate", Lines, "cps", &[(
                        r#"sum by (instance) (rate(lb_agent_partition_stats_total{instance=~"$instance"}[$__rate_interval]))"#,
                        "{{instance}} partition-stats/s",
                    )])
                    .key(),
                    panel("Reports by outcome", Bars, "short", &[(
                        r#"sum by (outcome) (increase(lb_agent_reports_total{instance=~"$instance"}[$__rate_interval]))"#,
                        "{{outcome}}",
                    )])
                    .key(),
                    panel("Commit latency", Lines, "s", &[
                        (
                            r#"histogram_quantile(0.99, sum by (le, instance) (rate(lb_agent_store_commit_seconds_bucket{instance=~"$instance"}[$__rate_interval])))"#,
                            "{{instance}} p99",
                        ),
                        (
                            r#"histogram_quantile(0.5, sum by (le, instance) (rate(lb_agent_store_commit_seconds_bucket{instance=~"$instance"}[$__rate_interval])))"#,
                            "{{instance}} median",
                        ),
                    ])
                    .key()
                    .about("A report is acknowledged only once its commit is durable."),
                    panel("Commits by outcome", Bars, "short", &[(
                        r#"sum by (outcome) (increase(lb_agent_store_commits_total{instance=~"$instance"}[$__rate_interval]))"#,
                        "{{outcome}}",
                    )])
                    .key(),
                    panel("Store size on disk", Lines, "bytes", &[(
                        r#"max by (instance) (lb_agent_store_bytes{instance=~"$instance"})"#,
                        "{{instance}}",
                    )])
                    .key(),
                    panel("In-memory window", Lines, "short", &[(
                        r#"max by (instance) (lb_agent_window_samples{instance=~"$instance"})"#,
                        "{{instance}} samples",
                    )])
                    .key(),
                    panel("In-memory window size", Lines, "bytes", &[(
                        r#"max by (instance) (lb_agent_window_bytes{instance=~"$instance"})"#,
                        "{{instance}}",
                    )])
                    .key(),
                    panel("Samples served and gaps", Lines, "cps", &[
                        (
                            r#"sum by (instance) (rate(lb_agent_samples_served_total{instance=~"$instance"}[$__rate_interval]))"#,
                            "{{instance}} served/s",
                        ),
                        (
                            r#"sum by (instance) (rate(lb_agent_sample_gaps_total{instance=~"$instance"}[$__rate_interval]))"#,
                            "{{instance}} gaps/s",
                        ),
                    ])
                    .key(),
                    panel("Heartbeats by outcome", Bars, "short", &[(
                        r#"sum by (outcome) (increase(lb_agent_heartbeats_total{instance=~"$instance"}[$__rate_interval]))"#,
                        "{{outcome}}",
                    )])
                    .key(),
                ],
            }],
        },
        Dashboard {
            uid: "lb-ops-server",
            title: "lb ops server",
            description: "The fair queue, the actions against the storage system and the adapter's errors.",
            instance_metric: "lb_ops_agents",
            tenant_metric: Some("lb_fair_queue_items"),
            rows: vec![Row {
                title: "Queue and execution",
                panels: vec![
                    panel("Fair-queue length per tenant", Lines, "short", &[(
                        r#"sum by (tenant) (lb_fair_queue_items{instance=~"$instance", tenant=~"$tenant"})"#,
                        "{{tenant}}",
                    )])
                    .key()
                    .about("Actions waiting in the ops server's fair queue (halted, or every slot busy)."),
                    panel("Queue refusals by reason", Bars, "short", &[(
                        r#"sum by (reason) (increase(lb_fair_queue_rejections_total{instance=~"$instance"}[$__rate_interval]))"#,
                        "{{reason}}",
                    )]),
                    panel("Running actions", Lines, "short", &[(
                        r#"sum(lb_ops_running_actions{instance=~"$instance"})"#,
                        "running",
                    )])
                    .key(),
                    panel("Refused with 429", Bars, "cps", &[(
                        r#"sum by (route) (rate(lb_http_requests_total{instance=~"$instance", status="429"}[$__rate_interval]))"#,
                        "{{route}}",
                    )])
                    .about("Submissions over the queue's bound (queue_full) and callers over their rate limit."),
                    panel("Action duration by kind", Lines, "s", &[(
                        r#"histogram_quantile(0.9, sum by (le, kind) (rate(lb_ops_action_duration_seconds_bucket{instance=~"$instance"}[$__rate_interval])))"#,
                        "{{kind}} p90",
                    )])
                    .key(),
                    panel("Actions ended by outcome", Bars, "short", &[(
                        r#"sum by (outcome) (increase(lb_ops_actions_total{instance=~"$instance"}[$__rate_interval]))"#,
                        "{{outcome}}",
                    )])
                    .key(),
                    panel("Actions failed or timed out", Bars, "short", &[(
                        r#"sum by (kind, outcome) (increase(lb_ops_actions_total{instance=~"$instance", outcome=~"failed|timed_out"}[$__rate_interval]))"#,
                        "{{kind}} {{outcome}}",
                    )]),
                    panel("Storage adapter errors", Bars, "cps", &[(
                        r#"sum by (call, error) (rate(lb_ops_storage_errors_total{instance=~"$instance"}[$__rate_interval]))"#,
                        "{{call}} {{error}}",
                    )]),
                    panel("Agents", Lines, "short", &[(
                        r#"sum by (state) (lb_ops_agents{instance=~"$instance"})"#,
                        "{{state}}",
                    )])
                    .key(),
                    panel("Executor halted", Stat, "short", &[(
                        r#"max(lb_ops_halted_executors{instance=~"$instance"})"#,
                        "halted",
                    )])
                    .key()
                    .states("running", "HALTED"),
                ],
            }],
        },
        Dashboard {
            uid: "lb-master",
            title: "lb master",
            description: "Collection from the agents, the MetricsTable and the analysis pass.",
            instance_metric: "lb_master_analysis_passes_total",
            tenant_metric: None,
            rows: vec![Row {
                title: "Collection and table",
                panels: vec![
                    panel("Collection lag", Lines, "s", &[(
                        r#"max(lb_master_collection_lag_seconds{instance=~"$instance"})"#,
                        "lag",
                    )])
                    .key()
                    .about("How far behind the newest collected sample is, over the agents that are not down."),
                    panel("Stale agents", Lines, "short", &[(
                        r#"sum by (status) (lb_master_collected_agents{instance=~"$instance", status!="ok"})"#,
                        "{{status}}",
                    )])
                    .key()
                    .about("Agents whose last collection timed out, failed or that the registry marks down."),
                    panel("Collection stale", Stat, "short", &[(
                        r#"max(lb_master_stale_collectors{instance=~"$instance"})"#,
                        "stale",
                    )])
                    .key()
                    .states("fresh", "STALE"),
                    panel("Leading", Stat, "short", &[(
                        r#"max(lb_master_leading_masters{instance=~"$instance"})"#,
                        "leading",
                    )])
                    .key()
                    .states("standby", "LEADING")
                    .about("Whether this master may act: always with [leadership] backend = \"single\"; with etcd, the one holding the election."),
                    panel("Leadership changes", Bars, "short", &[(
                        r#"sum by (to) (increase(lb_master_leadership_changes_total{instance=~"$instance"}[$__rate_interval]))"#,
                        "to {{to}}",
                    )])
                    .about("Terms won and lost (etcd backend): a change is a failover, or etcd unreachable."),
                    panel("Samples collected", Lines, "cps", &[
                        (
                            r#"sum(rate(lb_master_collected_samples_total{instance=~"$instance"}[$__rate_interval]))"#,
                            "collected/s",
                        ),
                        (
                            r#"sum(rate(lb_master_table_dropped_total{instance=~"$instance"}[$__rate_interval]))"#,
                            "dropped/s",
                        ),
                    ])
                    .key(),
                    panel("Table memory", Lines, "bytes", &[(
                        r#"max(lb_master_table_bytes{instance=~"$instance"})"#,
                        "MetricsTable",
                    )])
                    .key(),
                    panel("Table partitions", Lines, "short", &[(
                        r#"max(lb_master_table_partitions{instance=~"$instance"})"#,
                        "partitions",
                    )])
                    .key(),
                    panel("Pass duration", Lines, "s", &[
                        (
                            r#"histogram_quantile(0.99, sum by (le) (rate(lb_master_analysis_pass_seconds_bucket{instance=~"$instance"}[$__rate_interval])))"#,
                            "p99",
                        ),
                        (r#"max(lb_master_analysis_interval_seconds{instance=~"$instance"})"#, "interval"),
                    ])
                    .key(),
                    panel("API latency by route", Lines, "s", &[(
                        r#"histogram_quantile(0.99, sum by (le, route) (rate(lb_http_request_duration_seconds_bucket{instance=~"$instance", route=~"/api/.*"}[$__rate_interval])))"#,
                        "{{route}} p99",
                    )])
                    .key(),
                    panel("Config reload failing", Stat, "short", &[(
                        r#"max(lb_config_failed_files{instance=~"$instance"})"#,
                        "failing",
                    )])
                    .states("ok", "FAILING")
                    .about("The last edit of the watched config file was rejected; the previous config stays live."),
                ],
            }],
        },
    ]
}

/// The Grafana JSON of `d`.
pub fn grafana_json(d: &Dashboard) -> Value {
    let datasource = json!({"type": "prometheus", "uid": "${datasource}"});
    let mut panels = Vec::new();
    let mut id = 0;
    let mut y = 0;
    for row in &d.rows {
        id += 1;
        panels.push(json!({
            "id": id, "type": "row", "title": row.title, "collapsed": false,
            "gridPos": {"x": 0, "y": y, "w": 24, "h": 1}, "panels": [],
        }));
        y += 1;
        let mut x = 0;
        for p in &row.panels {
            id += 1;
            let (w, h) = if p.look == Look::Stat { (6, 4) } else { (12, 8) };
            if x + w > 24 {
                x = 0;
                y += 8;
            }
            panels.push(panel_json(p, id, x, y, w, h, &datasource));
            x += w;
        }
        y += 8;
    }
    let mut variables = vec![
        json!({"type": "datasource", "name": "datasource", "label": "Prometheus", "query": "prometheus",
               "current": {}, "hide": 0, "refresh": 1, "options": [], "regex": ""}),
        query_variable("instance", &format!("label_values({}, instance)", d.instance_metric), &datasource),
    ];
    if let Some(metric) = d.tenant_metric {
        variables.push(query_variable("tenant", &format!("label_values({metric}, tenant)"), &datasource));
    }
    json!({
        "id": null,
        "uid": d.uid,
        "title": d.title,
        "description": d.description,
        "tags": ["lb"],
        "timezone": "browser",
        "editable": true,
        "graphTooltip": 1,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": variables},
        "annotations": {"list": []},
        "links": [{"type": "dashboards", "tags": ["lb"], "title": "lb dashboards", "asDropdown": true,
                   "includeVars": true, "keepTime": true}],
        "panels": panels,
    })
}

fn query_variable(name: &str, query: &str, datasource: &Value) -> Value {
    json!({
        "type": "query", "name": name, "label": name, "datasource": datasource,
        "definition": query,
        "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "refresh": 2, "includeAll": true, "multi": true, "allValue": ".*", "sort": 1, "hide": 0,
        "current": {"selected": true, "text": ["All"], "value": ["$__all"]}, "options": [], "regex": "",
    })
}

fn panel_json(p: &Panel, id: u32, x: u32, y: u32, w: u32, h: u32, datasource: &Value) -> Value {
    let refs = ["A", "B", "C", "D", "E", "F"];
    let targets: Vec<Value> = p
        .queries
        .iter()
        .zip(refs)
        .map(|((expr, legend), r)| {
            json!({"refId": r, "datasource": datasource, "expr": expr, "legendFormat": legend, "range": true})
        })
        .collect();
    let mut defaults = json!({"unit": p.unit});
    if let Some((off, on)) = p.states {
        defaults["mappings"] = json!([{"type": "value", "options": {
            "0": {"text": off, "color": "green", "index": 0},
            "1": {"text": on, "color": "red", "index": 1},
        }}]);
    }
    let (kind, options) = match p.look {
        Look::Stat => (
            "stat",
            json!({"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": false},
                   "colorMode": "value", "graphMode": "area", "textMode": "auto", "justifyMode": "auto",
                   "orientation": "auto"}),
        ),
        Look::Lines | Look::Bars => {
            defaults["custom"] = if p.look == Look::Bars {
                json!({"drawStyle": "bars", "fillOpacity": 60, "stacking": {"mode": "normal", "group": "A"}})
            } else {
                json!({"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10, "spanNulls": true})
            };
            (
                "timeseries",
                json!({"legend": {"displayMode": "list", "placement": "bottom", "showLegend": true},
                       "tooltip": {"mode": "multi", "sort": "desc"}}),
            )
        }
    };
    json!({
        "id": id, "type": kind, "title": p.title, "description": p.description, "datasource": datasource,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": options,
        "targets": targets,
    })
}

/// `docs/metrics.md`: every exported metric by binary.
pub fn metrics_reference() -> String {
    let mut out = String::from(
        "# Metrics\n\n\
         Every lb binary serves Prometheus text at `GET /metrics` (no token needed). This list is \
         generated from the crates' metric catalogs by `UPDATE_DASHBOARDS=1 cargo test -p lb-launcher \
         --test dashboards`; a test fails when the code records a metric that is not listed, or lists \
         one it never records.\n\n\
         Naming: `lb_` then the component; counters end in `_total`; gauges and histograms end in \
         their unit (`_seconds`, `_bytes`, `_ratio` for a 0..1 share, `_per_second`) or the plural of \
         what they count (`_actions`, `_agents`, `_partitions`, ...); a 0/1 state is a count of \
         the things in that state (`lb_ops_halted_executors`). Every histogram is a duration in \
         seconds with the same buckets (1 ms to 1 h). Labels are bounded sets; `worker` has one value \
         per worker, `tenant` one per tenant, never a partition or an action.\n\n\
         In `lb up` every component runs in one process and shares one registry: any component's \
         `/metrics` shows all of them, so the generated `prometheus.yml` scrapes one target.\n",
    );
    let mut current = "";
    for (who, d) in catalog() {
        if who != current {
            out.push_str(&format!("\n## {who}\n\n| metric | type | labels | meaning |\n|---|---|---|---|\n"));
            current = who;
        }
        let labels = if d.labels.is_empty() { "–".to_owned() } else { d.labels.join(", ") };
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            d.name,
            d.kind.as_str(),
            labels,
            d.help.replace('|', "\\|")
        ));
    }
    out
}

/// The `prometheus.yml` for a system whose every component shares one process (`lb up`): one
/// scrape target, every second, with the alert rules at `rules_file`.
pub fn scrape_config(target: &str, rules_file: &str) -> String {
    format!(
        "# Written by lb up: scrapes the lb system it started. Run\n\
         #   prometheus --config.file=<this file> --storage.tsdb.path=<a directory>\n\
         # Every component of lb up runs in one process and shares one metrics registry, so one\n\
         # target serves them all (scraping each port would count every series several times).\n\
         # For a real deployment start from dashboards/prometheus/prometheus.yml instead.\n\
         global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
         rule_files:\n  - {rules_file}\n\
         scrape_configs:\n  - job_name: lb\n    metrics_path: /metrics\n    static_configs:\n      - targets: [\"{target}\"]\n"
    )
}

/// Every `lb_*` metric name `expr` reads, with histogram suffixes (`_bucket`, `_sum`, `_count`)
/// taken back to the histogram's own name when `known` has it.
pub fn metric_names(expr: &str, known: &[&str]) -> Vec<String> {
    let mut names = Vec::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while let Some(at) = expr[i..].find("lb_") {
        let start = i + at;
        let starts_word = start == 0 || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
        let mut end = start;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
            end += 1;
        }
        if starts_word {
            let name = &expr[start..end];
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s).filter(|b| known.contains(b)))
                .unwrap_or(name);
            names.push(base.to_owned());
        }
        i = end;
    }
    names
}
