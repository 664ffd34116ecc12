//! `lbctl proposals`, `lbctl approve ID`, `lbctl reject ID`: the dry-run proposals waiting for
//! an operator, and the operator's answer.

use lb_common::protocol::{ActionRecord, Pending};

use crate::cmd::{actions, explain};
use crate::fmt;
use crate::style::{Paint, Style, ratio_paint};
use crate::table::{Align, Cell, Table};

/// The pending proposals: a table, then each one's reason.
pub fn render(pending: &[Pending], style: &Style, now_ms: i64) -> String {
    if pending.is_empty() {
        return "no proposals waiting for approval\n".to_owned();
    }
    let mut t = Table::new(&[
        ("ID", Align::Left),
        ("POLICY", Align::Left),
        ("ACTION", Align::Left),
        ("TARGET NOW", Align::Right),
        ("AFTER", Align::Right),
        ("FIRST SEEN", Align::Right),
        ("LAST SEEN", Align::Right),
    ]);
    for p in pending {
        let pr = &p.proposal.predicted;
        t.row(vec![
            p.id.as_str().into(),
            p.proposal.policy.as_str().into(),
            fmt::spec(&p.proposal.spec).into(),
            Cell::painted(fmt::ratio(pr.target_before_ratio), ratio_paint(pr.target_before_ratio)),
            Cell::painted(fmt::ratio(pr.target_after_ratio), ratio_paint(pr.target_after_ratio)),
            fmt::ago(p.first_proposed_at_ms, now_ms).into(),
            fmt::ago(p.last_proposed_at_ms, now_ms).into(),
        ]);
    }
    let mut out = t.render(style);
    out.push('\n');
    for p in pending {
        out.push_str(&format!("{}: {}\n", style.bold(p.id.as_str()), fmt::one_line(&p.proposal.reason)));
    }
    out.push_str(
        "\napprove with `lbctl approve ID`, reject with `lbctl reject ID`; `lbctl explain ID` shows the numbers\n",
    );
    out
}

/// The ops server's record of an approved proposal, now an action.
pub fn render_approved(record: &ActionRecord, style: &Style) -> String {
    let state =
        style.paint(actions::state_paint(record.state).unwrap_or(Paint::Bold), actions::state_name(record.state));
    format!(
        "approved {}: {} submitted ({state}, by {})\nreason: {}\nfollow it with `lbctl actions --follow` or `lbctl explain {}`\n",
        record.request.id,
        fmt::spec(&record.request.spec),
        record.submitted_by,
        fmt::one_line(&record.request.reason),
        record.request.id
    )
}

/// The proposal a reject dropped.
pub fn render_rejected(pending: &Pending, style: &Style) -> String {
    let mut out = format!(
        "rejected {}: {} ({}); it is not offered again for the approval TTL\n\n",
        pending.id,
        fmt::spec(&pending.proposal.spec),
        pending.proposal.policy.as_str()
    );
    out.push_str(&explain::proposal_body(&pending.proposal, style));
    out
}
