//! Number, time and action formatting shared by the renderers. Every function is pure: times
//! are shown relative to a `now_ms` the caller passes in.

use chrono::{DateTime, Utc};
use lb_common::protocol::{ActionSpec, Metric};

/// A rate or count, short: `950`, `12.3`, `8.0k`, `1.25M`.
pub fn num(v: f64) -> String {
    let a = v.abs();
    if !v.is_finite() {
        "-".to_owned()
    } else if a >= 1e9 {
        format!("{:.2}G", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if a >= 10_000.0 {
        format!("{:.1}k", v / 1e3)
    } else if a >= 100.0 || v == v.trunc() {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// Bytes with a decimal unit: `512 B`, `28.6 MB`.
pub fn bytes(v: f64) -> String {
    let units = [("GB", 1e9), ("MB", 1e6), ("kB", 1e3)];
    for (unit, scale) in units {
        if v.abs() >= scale {
            return format!("{:.1} {unit}", v / scale);
        }
    }
    format!("{v:.0} B")
}

/// A ratio (of capacity, of a limit) with two decimals.
pub fn ratio(v: f64) -> String {
    format!("{v:.2}")
}

/// A share as a percentage: `12.5 %`.
pub fn percent(v: f64) -> String {
    format!("{:.1} %", v * 100.0)
}

/// A metric's value with its unit.
pub fn metric_value(metric: Metric, v: f64) -> String {
    match metric.unit() {
        "per_sec" => format!("{}/s", num(v)),
        "bytes_per_sec" => format!("{}/s", bytes(v)),
        "bytes" => bytes(v),
        "cores" => format!("{v:.2} cores"),
        "us" => format!("{} µs", num(v)),
        "ratio" => ratio(v),
        _ => num(v),
    }
}

/// A duration in milliseconds, short: `850 ms`, `4.2 s`, `3 min`, `2.5 h`, `3 d`.
pub fn duration_ms(ms: i64) -> String {
    let a = ms.unsigned_abs();
    if a < 1_000 {
        format!("{ms} ms")
    } else if a < 60_000 {
        format!("{:.1} s", ms as f64 / 1e3)
    } else if a < 3_600_000 {
        format!("{} min", ms / 60_000)
    } else if a < 86_400_000 {
        format!("{:.1} h", ms as f64 / 3.6e6)
    } else {
        format!("{} d", ms / 86_400_000)
    }
}

/// How long ago `at_ms` was: `4.2 s ago` (`in 1.0 s` for a clock a little ahead).
pub fn ago(at_ms: i64, now_ms: i64) -> String {
    let d = now_ms - at_ms;
    if d >= 0 { format!("{} ago", duration_ms(d)) } else { format!("in {}", duration_ms(-d)) }
}

/// A timestamp as UTC wall time to the second: `13:02:11`.
pub fn clock(at_ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(at_ms).map_or_else(|| "-".to_owned(), |t| t.format("%H:%M:%S").to_string())
}

/// A timestamp as UTC wall time to the millisecond: `13:02:11.870`.
pub fn clock_ms(at_ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(at_ms)
        .map_or_else(|| "-".to_owned(), |t| t.format("%H:%M:%S%.3f").to_string())
}

/// A full UTC timestamp: `2026-12-01 13:02:11Z`.
pub fn date_time(at_ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(at_ms)
        .map_or_else(|| "-".to_owned(), |t| t.format("%Y-%m-%d %H:%M:%SZ").to_string())
}

/// An action in one line: `split acme.orders.p000034 at 4322d50f1e9da834`.
pub fn spec(spec: &ActionSpec) -> String {
    spec.to_string()
}

/// What an action is done to, without the verb: `acme.orders.p000034`.
pub fn target(spec: &ActionSpec) -> String {
    match spec {
        ActionSpec::Split { partition, .. }
        | ActionSpec::SplitInto { partition, .. }
        | ActionSpec::Move { partition, .. } => partition.to_string(),
        ActionSpec::Merge { left, right, .. } => format!("{left} + {right}"),
        ActionSpec::Group { target, .. } => target.to_string(),
        ActionSpec::Reshard { tenant, dataset, .. } => format!("{tenant}/{dataset}"),
    }
}

/// The action's parameters beyond its target: `at 4322d50f1e9da834`, `to w-0003`.
pub fn detail(spec: &ActionSpec) -> String {
    match spec {
        ActionSpec::Split { split_key, .. } => format!("at {split_key}"),
        ActionSpec::SplitInto { split_keys, .. } => format!("into {} pieces", split_keys.len() + 1),
        ActionSpec::Move { to_worker, max_bytes_per_sec: None, .. } => format!("to {to_worker}"),
        ActionSpec::Move { to_worker, max_bytes_per_sec: Some(r), .. } => {
            format!("to {to_worker} at {:.1} MiB/s", *r as f64 / (1024.0 * 1024.0))
        }
        ActionSpec::Merge { to_worker: Some(w), .. } => format!("on {w}"),
        ActionSpec::Merge { to_worker: None, .. } => String::new(),
        ActionSpec::Group { group, .. } => format!("into {group}"),
        ActionSpec::Reshard { tenant_shards, dataset_shards, .. } => {
            format!("{tenant_shards}/{dataset_shards} shards")
        }
    }
}

/// A server's text on one line (error bodies and reasons may hold newlines).
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_short_and_keep_their_magnitude() {
        assert_eq!(num(0.0), "0");
        assert_eq!(num(12.34), "12.3");
        assert_eq!(num(950.4), "950");
        assert_eq!(num(9_999.0), "9999");
        assert_eq!(num(27_929.6), "27.9k");
        assert_eq!(num(1_250_000.0), "1.25M");
        assert_eq!(bytes(28_600_022.2), "28.6 MB");
        assert_eq!(bytes(512.0), "512 B");
        assert_eq!(metric_value(Metric::Ops, 8000.0), "8000/s");
        assert_eq!(metric_value(Metric::LatencyP99, 50_000.0), "50.0k µs");
    }

    #[test]
    fn times_are_relative_to_the_given_now() {
        assert_eq!(ago(1_000, 5_200), "4.2 s ago");
        assert_eq!(ago(0, 600), "600 ms ago");
        assert_eq!(ago(0, 180_000), "3 min ago");
        assert_eq!(ago(2_000, 1_000), "in 1.0 s");
        assert_eq!(clock(1_796_128_774_280), "12:39:34");
        assert_eq!(clock_ms(1_796_128_774_280), "12:39:34.280");
    }
}
