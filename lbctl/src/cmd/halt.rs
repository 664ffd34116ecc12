//! `lbctl halt [--reason R]`, `lbctl resume`: the ops server's API halt switch. While halted the
//! executor takes nothing off its queue (running actions finish); the master keeps proposing
//! and submitting, and the queue waits.

use lb_common::protocol::HaltStatus;

use crate::fmt;
use crate::style::{Paint, Style};

pub fn render(h: &HaltStatus, style: &Style) -> String {
    let mut out = if h.halted {
        style.paint(Paint::Bad, "executor halted: no new actions start; running ones finish")
    } else {
        style.paint(Paint::Good, "executor running: queued actions start as the queue allows")
    };
    out.push('\n');
    let switch = if h.halted_by_api { "on" } else { "off" };
    let who = h.changed_by.as_deref().map(|w| format!(", last changed by {w}")).unwrap_or_default();
    let why = h.reason.as_deref().map(|r| format!(": {}", fmt::one_line(r))).unwrap_or_default();
    out.push_str(&format!("api switch {switch}{who}{why}\n"));
    if h.halted_by_config {
        out.push_str("executor.halted is set in the ops server's config: `lbctl resume` cannot lift that one\n");
    }
    out.push_str(&format!("{} queued\n", h.queued));
    out
}
