//! What lb-valkey exports through whichever binary uses it (the agent's Valkey source, the ops
//! server's Valkey adapter).

use lb_common::telemetry::MetricDef;
use lb_common::telemetry::MetricKind::Counter;

pub const CATALOG: &[MetricDef] = &[
    MetricDef::new(
        "lb_valkey_connects_total",
        Counter,
        &["outcome"],
        "Connections opened to Valkey nodes by outcome (ok, failed, timeout).",
    ),
    MetricDef::new(
        "lb_valkey_commands_total",
        Counter,
        &["command", "outcome"],
        "Commands sent to Valkey nodes by command name (a fixed set) and outcome.",
    ),
];
