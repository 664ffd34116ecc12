//! `lbctl policy`: the master's live policy config — each policy's mode, the planner's halt,
//! the config file, its version and last reload, and every setting of `[planner]`,
//! `[evaluation]` and `[placement]` as loaded.

use lb_common::config::watch::ReloadOutcome;
use lb_common::protocol::PolicyStatus;

use crate::cmd::status::mode_paint;
use crate::fmt;
use crate::style::{Paint, Style};
use crate::table::{Align, Cell, Table};

/// `a.b.c = value` for every leaf of a JSON object, sorted by path.
pub fn flatten(prefix: &str, value: &serde_json::Value, out: &mut Vec<(String, String)>) {
    match value {
        serde_json::Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            for k in keys {
                let path = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                flatten(&path, &map[k], out);
            }
        }
        leaf => out.push((prefix.to_owned(), leaf.to_string())),
    }
}

pub fn render(p: &PolicyStatus, style: &Style, now_ms: i64) -> String {
    let c = &p.config;
    let mut out = format!(
        "{}\n",
        style.bold(&format!(
            "config {} version {}, loaded {}",
            c.path.display(),
            c.version,
            fmt::ago(c.loaded_at_ms, now_ms)
        ))
    );
    let outcome = style.paint(
        match c.last_outcome {
            ReloadOutcome::Initial | ReloadOutcome::Applied | ReloadOutcome::Unchanged => Paint::Good,
            _ => Paint::Bad,
        },
        c.last_outcome.as_str(),
    );
    out.push_str(&format!("last reload attempt {}: {outcome}", fmt::ago(c.last_attempt_at_ms, now_ms)));
    if let Some(e) = &c.last_error {
        out.push_str(&format!(" ({})", fmt::one_line(e)));
    }
    out.push('\n');
    if !c.changed_fields.is_empty() {
        out.push_str(&format!("changed by the last applied reload: {}\n", c.changed_fields.join(", ")));
    }
    out.push('\n');
    let mut t = Table::new(&[("POLICY", Align::Left), ("MODE", Align::Left)]);
    for (policy, mode) in &p.modes {
        t.row(vec![policy.as_str().into(), Cell::painted(mode.as_str(), mode_paint(*mode))]);
    }
    out.push_str(&t.render(style));
    let halt = if p.halted { style.paint(Paint::Bad, "on: no proposals at all") } else { "off".to_owned() };
    out.push_str(&format!("planner halt (planner.caps.halt): {halt}\n"));
    for (name, section) in [("planner", &p.planner), ("evaluation", &p.evaluation), ("placement", &p.placement)] {
        let mut leaves = Vec::new();
        flatten("", section, &mut leaves);
        out.push_str(&format!("\n{}\n", style.bold(&format!("[{name}]"))));
        let width = leaves.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        for (k, v) in leaves {
            out.push_str(&format!("  {k:<width$} = {v}\n"));
        }
    }
    out
}
