//! What the agent exports at `/metrics` (besides lb-common's HTTP and config series).

use lb_common::telemetry::MetricDef;
use lb_common::telemetry::MetricKind::{Counter, Gauge, Histogram};

/// Creates the counters of rare events at 0, so that Prometheus's `increase()` counts the first
/// of each (see lb-master's `metrics::initialize`).
pub fn initialize() {
    for outcome in ["accepted", "duplicate", "invalid"] {
        metrics::counter!("lb_agent_reports_total", "outcome" => outcome).increment(0);
    }
    for outcome in ["ok", "error"] {
        metrics::counter!("lb_agent_store_commits_total", "outcome" => outcome).increment(0);
    }
    metrics::counter!("lb_agent_sample_gaps_total").increment(0);
}

pub const CATALOG: &[MetricDef] = &[
    MetricDef::new(
        "lb_agent_reports_total",
        Counter,
        &["outcome"],
        "Reports pushed by the worker, by outcome (accepted, duplicate, invalid).",
    ),
    MetricDef::new(
        "lb_agent_partition_stats_total",
        Counter,
        &[],
        "Partition-stats entries of accepted reports: the agent's ingest rate.",
    ),
    MetricDef::new(
        "lb_agent_store_commits_total",
        Counter,
        &["outcome"],
        "SQLite write transactions of the store by outcome (ok, error); a report is acknowledged only after its commit.",
    ),
    MetricDef::new(
        "lb_agent_store_commit_seconds",
        Histogram,
        &[],
        "Time one store write transaction took, fsync included.",
    ),
    MetricDef::new("lb_agent_store_rows_total", Counter, &[], "Rows written to the store (samples and rollup folds)."),
    MetricDef::new(
        "lb_agent_store_expired_rows_total",
        Counter,
        &[],
        "Rows removed by retention (samples past the raw retention, rollups past theirs).",
    ),
    MetricDef::new(
        "lb_agent_store_bytes",
        Gauge,
        &[],
        "Size on disk of the agent's store: the SQLite file plus its write-ahead log.",
    ),
    MetricDef::new(
        "lb_agent_store_lost_samples_total",
        Counter,
        &[],
        "Acknowledged samples found missing at start-up (a lost or damaged -wal file, a replaced store): told to pullers as a gap.",
    ),
    MetricDef::new(
        "lb_agent_store_integrity_checks_total",
        Counter,
        &["outcome"],
        "Integrity checks of the store file while the agent runs ([store] integrity_check_secs), by outcome: ok, damaged (the agent is not ready until one passes), error (the check could not run).",
    ),
    MetricDef::new(
        "lb_agent_store_moved_aside_total",
        Counter,
        &[],
        "Damaged store files moved aside at start-up ([store] on_corruption = \"move_aside\") and replaced by an empty store.",
    ),
    MetricDef::new(
        "lb_agent_window_samples",
        Gauge,
        &[],
        "Samples held in memory for pullers (the recent window served without reading SQLite).",
    ),
    MetricDef::new("lb_agent_window_bytes", Gauge, &[], "Approximate memory of the in-memory sample window."),
    MetricDef::new(
        "lb_agent_samples_served_total",
        Counter,
        &[],
        "Samples returned to pullers (the master's collector).",
    ),
    MetricDef::new(
        "lb_agent_sample_gaps_total",
        Counter,
        &[],
        "Pulls answered with gap=true: the puller's cursor was older than what the store still holds.",
    ),
    MetricDef::new(
        "lb_agent_heartbeats_total",
        Counter,
        &["outcome"],
        "Registration heartbeats to the ops server by outcome (ok, or the error's kind).",
    ),
    MetricDef::new(
        "lb_agent_valkey_polls_total",
        Counter,
        &["outcome"],
        "Polls of the Valkey node beside the agent by outcome (reported, node_only, baseline, timeout, ...).",
    ),
    MetricDef::new(
        "lb_agent_valkey_poll_seconds",
        Histogram,
        &[],
        "Time one poll of the Valkey node (CLUSTER SLOT-STATS and INFO) took.",
    ),
    MetricDef::new(
        "lb_agent_valkey_slot_stats_nodes",
        Gauge,
        &[],
        "1 when the Valkey node serves per-slot statistics (CLUSTER SLOT-STATS), 0 when the agent falls back to node totals.",
    ),
    MetricDef::new(
        "lb_agent_valkey_slot_resets_total",
        Counter,
        &[],
        "Slots whose counters went backwards between polls (restart, RESETSTAT): skipped, not reported as rates.",
    ),
    MetricDef::new(
        "lb_agent_valkey_import_discounted_ops_total",
        Counter,
        &[],
        "Ops a slot import (migration traffic) caused on the node, left out of the slot's load.",
    ),
    MetricDef::new("lb_agent_valkey_idle_slots_total", Counter, &[], "Owned slots that saw no command in a poll."),
    MetricDef::new(
        "lb_agent_valkey_node_ops_per_second",
        Gauge,
        &[],
        "Commands per second the Valkey node executed over the last poll interval.",
    ),
];
