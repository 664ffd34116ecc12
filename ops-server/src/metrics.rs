//! What the ops server exports at `/metrics` (besides lb-common's HTTP and config series;
//! `lb_http_requests_total{route="/v1/actions",status="429"}` counts refused submissions).

use lb_common::protocol::ActionKind;
use lb_common::telemetry::MetricDef;
use lb_common::telemetry::MetricKind::{Counter, Gauge, Histogram};

/// Creates the outcome counters at 0 for every label value, so that Prometheus's `increase()`
/// counts the first of each (see lb-master's `metrics::initialize`).
pub fn initialize() {
    for kind in ActionKind::ALL {
        for outcome in ["succeeded", "failed", "cancelled", "timed_out"] {
            metrics::counter!("lb_ops_actions_total", "kind" => kind.as_str(), "outcome" => outcome).increment(0);
            // Registered empty, so the first action's duration is a rise a rate can see.
            let _ =
                metrics::histogram!("lb_ops_action_duration_seconds", "kind" => kind.as_str(), "outcome" => outcome);
        }
    }
    for call in ["topology", "submit", "operation"] {
        for error in ["rejected", "unreachable", "uncertain"] {
            metrics::counter!("lb_ops_storage_errors_total", "call" => call, "error" => error).increment(0);
        }
    }
    metrics::counter!("lb_ops_stale_epoch_refusals_total").increment(0);
    for reply in ["full", "not_modified"] {
        metrics::counter!("lb_ops_topology_reads_total", "reply" => reply).increment(0);
    }
    metrics::gauge!("lb_ops_halted_executors").set(0.0);
    metrics::gauge!("lb_ops_running_actions").set(0.0);
}

pub const CATALOG: &[MetricDef] = &[
    MetricDef::new(
        "lb_ops_topology_reads_total",
        Counter,
        &["reply"],
        "GET /v1/topology answers: full (the body) or not_modified (the caller's If-None-Match named this topology's tag).",
    ),
    MetricDef::new(
        "lb_ops_actions_total",
        Counter,
        &["kind", "outcome"],
        "Actions that ended, by kind and outcome (succeeded, failed, cancelled, timed_out).",
    ),
    MetricDef::new(
        "lb_ops_action_duration_seconds",
        Histogram,
        &["kind", "outcome"],
        "Time from an action's start against the storage system to its end, by kind and outcome.",
    ),
    MetricDef::new(
        "lb_ops_stale_epoch_refusals_total",
        Counter,
        &[],
        "Submissions and leadership announcements refused (409 stale_epoch) because an elected master's term was older than the newest seen.",
    ),
    MetricDef::new("lb_ops_running_actions", Gauge, &[], "Actions running against the storage system now."),
    MetricDef::new(
        "lb_ops_halted_executors",
        Gauge,
        &[],
        "1 while the executor is halted through the API (POST /v1/halt), else 0; queued actions wait.",
    ),
    MetricDef::new(
        "lb_ops_storage_errors_total",
        Counter,
        &["call", "error"],
        "Storage adapter calls that failed, by call (topology, submit, operation) and error (rejected, unreachable, uncertain).",
    ),
    MetricDef::new(
        "lb_ops_agents",
        Gauge,
        &["state"],
        "Registered agents by state (up: heartbeats fresh, down: missed).",
    ),
    MetricDef::new(
        "lb_ops_collect_agents_total",
        Counter,
        &["status"],
        "Per-agent pulls of the collection fan-out, by result (ok, timeout, error, down).",
    ),
    MetricDef::new(
        "lb_ops_valkey_operations_total",
        Counter,
        &["outcome"],
        "Valkey slot migrations and failovers the adapter finished, by outcome.",
    ),
    MetricDef::new(
        "lb_ops_valkey_operations_adopted_total",
        Counter,
        &[],
        "Valkey operations taken over from the cluster's own state after a restart of the ops server.",
    ),
    MetricDef::new("lb_ops_valkey_keys", Gauge, &[], "Keys stored in the Valkey cluster, summed over its primaries."),
];
