//! `lbctl explain ID`. For an action or a proposal: the policy, its reason and the numbers that
//! triggered it, the predicted before/after, the alternatives it rejected and why, the ops
//! server's audit trail, and the evaluation with its verdict. For a partition: why nothing is
//! being done about it — what the latest pass declined or proposed for it (or its worker), the
//! declines kept in recent analysis records, and what is in flight or waiting for approval.

use lb_common::ids::{ActionId, PartitionId};
use lb_common::protocol::{
    ActionEntry, ActionRecord, ActionState, AnalysisRecord, AuditEvent, Declined, Evaluation, PartitionRow,
    PartitionsQuery, Pending, Prediction, Proposal, RecordsQuery, Snapshot, Trigger,
};
use serde::{Deserialize, Serialize};

use crate::api::Api;
use crate::cmd::{actions, history};
use crate::error::{AtComponent, CtlError, found, is_not_found};
use crate::fmt;
use crate::style::{Paint, Style, ratio_paint};
use crate::table::{Align, Cell, Table};

/// Analysis records read for a partition's earlier declines (they are written on change and
/// once a minute, so this reaches back well over an hour on a busy cluster).
pub const ANALYSIS_RECORDS_READ: usize = 200;
/// Earlier declines listed (distinct policy and why, newest first).
pub const MAX_EARLIER_DECLINES: usize = 10;

/// `lbctl explain -o json`: tagged by `subject`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "subject", rename_all = "snake_case")]
pub enum Explanation {
    Action(Box<ActionExplanation>),
    Partition(Box<PartitionExplanation>),
}

/// Everything kept about one action or proposal id; each part is absent when there is none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionExplanation {
    pub id: ActionId,
    /// `GET /api/v1/records/proposal/{id}`.
    pub proposal: Option<Proposal>,
    /// The dry-run proposal waiting for approval under this id (`GET /api/v1/proposals/pending`).
    pub pending: Option<Pending>,
    /// `GET /api/v1/records/action/{id}`: how the master submitted and followed it.
    pub entry: Option<ActionEntry>,
    /// `GET /v1/actions/{id}` of the ops server.
    pub record: Option<ActionRecord>,
    /// `GET /v1/actions/{id}/events` of the ops server, oldest first.
    pub events: Vec<AuditEvent>,
    /// `GET /api/v1/records/evaluation/{id}`.
    pub evaluation: Option<Evaluation>,
}

/// Why a partition gets (or does not get) an action.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartitionExplanation {
    /// Its row in `GET /api/v1/partitions?include_gone=true`.
    pub partition: PartitionRow,
    /// The latest pass (`GET /api/v1/pass`): its number and time.
    pub pass: u64,
    pub pass_at_ms: Option<i64>,
    /// What that pass declined about the partition or its worker, and why.
    pub declined_now: Vec<Declined>,
    /// What that pass proposed for it.
    pub proposed_now: Vec<Proposal>,
    /// Declines about it in the recent analysis records, newest first, one per policy and why.
    pub declined_before: Vec<DeclinedAt>,
    /// Queued or running actions on it (ops server).
    pub in_flight: Vec<ActionRecord>,
    /// Dry-run proposals for it waiting for approval.
    pub pending: Vec<Pending>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeclinedAt {
    /// The analysis record's time.
    pub at_ms: i64,
    #[serde(flatten)]
    pub declined: Declined,
}

/// Whether a decline's subject names `id` (subjects are ids, or ids with words around them).
pub fn names(subject: &str, id: &str) -> bool {
    subject
        .split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':' | '@')))
        .any(|token| token == id)
}

fn about(d: &Declined, row: &PartitionRow) -> bool {
    names(&d.subject, row.id.as_str()) || row.owner.as_ref().is_some_and(|w| names(&d.subject, w.as_str()))
}

pub async fn fetch(api: &Api, id: &str) -> Result<Explanation, CtlError> {
    let action_id: ActionId = id.parse().map_err(|e| CtlError::Usage(format!("{id:?} is not an id: {e}")))?;
    let (proposal, entry, evaluation, record, pending) = tokio::try_join!(
        async { Ok(api.master.record::<Proposal>(id).await) },
        async { found(api.master.record::<ActionEntry>(id).await).at_master() },
        async { found(api.master.record::<Evaluation>(id).await).at_master() },
        async { found(api.ops.action(&action_id).await).at_ops() },
        async { api.master.pending().await.at_master() },
    )?;
    // Keep the proposal lookup's 404 to report if the id is nothing at all.
    let (proposal, missing) = match proposal {
        Ok(p) => (Some(p), None),
        Err(e) if is_not_found(&e) => (None, Some(e)),
        Err(e) => return Err(CtlError::master(e)),
    };
    let pending = pending.into_iter().find(|p| p.id == action_id);
    if proposal.is_some() || entry.is_some() || evaluation.is_some() || record.is_some() || pending.is_some() {
        let events = match &record {
            Some(_) => api.ops.events(&action_id).await.at_ops()?,
            None => Vec::new(),
        };
        let explanation = ActionExplanation {
            id: action_id,
            proposal: proposal.map(|r| r.body),
            pending,
            entry: entry.map(|r| r.body),
            record,
            events,
            evaluation: evaluation.map(|r| r.body),
        };
        return Ok(Explanation::Action(Box::new(explanation)));
    }
    let all = PartitionsQuery { include_gone: Some(true), ..PartitionsQuery::default() };
    let rows = api.master.partitions(&all).await.at_master()?;
    let partition_id: PartitionId = id.parse().map_err(|e| CtlError::Usage(format!("{id:?} is not an id: {e}")))?;
    let Some(row) = rows.into_iter().find(|r| r.id == partition_id) else {
        let missing = missing.expect("no proposal record was found, so its lookup answered 404");
        return Err(CtlError::master(missing).with_context(format!(
            "no action, proposal or partition has the id {id:?} (not pending, unknown to the ops server and the master's table)"
        )));
    };
    fetch_partition(api, row).await.map(|p| Explanation::Partition(Box::new(p)))
}

async fn fetch_partition(api: &Api, row: PartitionRow) -> Result<PartitionExplanation, CtlError> {
    let query = RecordsQuery { since_ms: None, limit: Some(ANALYSIS_RECORDS_READ) };
    let (pass, analyses, queued, running) = tokio::try_join!(
        async { api.master.pass().await.at_master() },
        async { api.master.records::<AnalysisRecord>(&query).await.at_master() },
        async { api.ops.actions(Some(ActionState::Queued)).await.at_ops() },
        async { api.ops.actions(Some(ActionState::Running)).await.at_ops() },
    )?;
    let ids = std::slice::from_ref(&row.id);
    let declined_now = pass.declined.iter().filter(|d| about(d, &row)).cloned().collect();
    let proposed_now = pass.proposals.iter().filter(|p| history::touches(&p.spec, ids, Some(&row))).cloned().collect();
    let pending =
        pass.pending.iter().filter(|p| history::touches(&p.proposal.spec, ids, Some(&row))).cloned().collect();
    let mut declined_before: Vec<DeclinedAt> = Vec::new();
    for r in &analyses {
        for d in r.body.declined.iter().filter(|d| about(d, &row)) {
            let seen = declined_before.iter().any(|x| x.declined.policy == d.policy && x.declined.why == d.why);
            if !seen && declined_before.len() < MAX_EARLIER_DECLINES {
                declined_before.push(DeclinedAt { at_ms: r.at_ms, declined: d.clone() });
            }
        }
    }
    let in_flight = actions::select(
        queued.into_iter().chain(running).filter(|a| history::touches(&a.request.spec, ids, Some(&row))).collect(),
        None,
        usize::MAX,
    );
    Ok(PartitionExplanation {
        partition: row,
        pass: pass.pass,
        pass_at_ms: pass.at_ms,
        declined_now,
        proposed_now,
        declined_before,
        in_flight,
        pending,
    })
}

pub fn render(e: &Explanation, style: &Style, now_ms: i64) -> String {
    match e {
        Explanation::Action(a) => render_action(a, style, now_ms),
        Explanation::Partition(p) => render_partition(p, style, now_ms),
    }
}

fn heading(style: &Style, text: &str) -> String {
    format!("\n{}\n", style.bold(text))
}

/// The numbers that triggered a proposal, one per line, only those its policy uses.
pub fn trigger_lines(t: &Trigger) -> Vec<(&'static str, String)> {
    let mut lines = vec![("hot windows", t.hot_windows.to_string())];
    let mut add = |name, v: Option<f64>, f: fn(f64) -> String| {
        if let Some(v) = v {
            lines.push((name, f(v)));
        }
    };
    add("partition demand", t.partition_demand_ops_per_sec, |v| format!("{} ops/s", fmt::num(v)));
    add("partition limit", t.partition_limit_ops_per_sec, |v| format!("{} ops/s", fmt::num(v)));
    add("partition rejected", t.partition_rejected_per_sec, |v| format!("{}/s", fmt::num(v)));
    add("partition growth", t.partition_growth_ops_per_sec_per_sec, |v| format!("{v:+.1} ops/s per s"));
    add("top key share", t.top_key_share_ratio, fmt::percent);
    add("sequential writes", t.sequential_write_ratio, fmt::percent);
    add("worker load", t.worker_load_ratio, |v| format!("{} of capacity", fmt::ratio(v)));
    add("max / mean", t.max_over_mean, fmt::ratio);
    add("cv", t.cv, fmt::ratio);
    lines
}

fn pairs(lines: &[(&str, String)]) -> String {
    let width = lines.iter().map(|(k, _)| k.chars().count()).max().unwrap_or(0);
    lines.iter().map(|(k, v)| format!("  {k:<width$}  {v}\n")).collect()
}

fn before_after(rows: &[(&'static str, Option<f64>, Option<f64>)], style: &Style) -> String {
    let mut t = Table::new(&[("", Align::Left), ("BEFORE", Align::Right), ("AFTER", Align::Right)]);
    for (name, before, after) in rows {
        let cell = |v: &Option<f64>| match v {
            Some(v) => Cell::painted(fmt::ratio(*v), ratio_paint(*v)),
            None => Cell::from("-"),
        };
        t.row(vec![Cell::from(format!("  {name}")), cell(before), cell(after)]);
    }
    t.render(style)
}

/// Predicted ratios of capacity before and after (a partition's: of its limit).
pub fn prediction(p: &Prediction, style: &Style) -> String {
    let mut out = before_after(
        &[
            ("target", Some(p.target_before_ratio), Some(p.target_after_ratio)),
            ("source worker", Some(p.source_before_ratio), Some(p.source_after_ratio)),
            ("destination", p.dest_before_ratio, p.dest_after_ratio),
            ("cluster max", Some(p.cluster_max_before_ratio), Some(p.cluster_max_after_ratio)),
            // Splits and moves do not change the total: the mean is the same after.
            ("cluster mean", Some(p.cluster_mean_ratio), Some(p.cluster_mean_ratio)),
        ],
        style,
    );
    out.push_str(&format!("  data movement charged {} of capacity\n", fmt::ratio(p.cost_ratio)));
    out
}

fn snapshots(before: &Snapshot, after: &Snapshot, style: &Style) -> String {
    before_after(
        &[
            ("target", Some(before.target_ratio), Some(after.target_ratio)),
            ("target rejected share", Some(before.target_rejected_ratio), Some(after.target_rejected_ratio)),
            ("source worker", before.source_ratio, after.source_ratio),
            ("destination", before.dest_ratio, after.dest_ratio),
            ("cluster max", Some(before.cluster_max_ratio), Some(after.cluster_max_ratio)),
            ("cluster mean", Some(before.cluster_mean_ratio), Some(after.cluster_mean_ratio)),
            ("cluster cv", Some(before.cluster_cv), Some(after.cluster_cv)),
        ],
        style,
    )
}

/// A proposal's why: policy, reason, trigger, prediction and rejected alternatives.
pub fn proposal_body(p: &Proposal, style: &Style) -> String {
    let origin = serde_json::to_value(p.origin).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
    let mut out = format!("policy {} · mode {} · origin {origin}\n", p.policy.as_str(), p.mode.as_str());
    out.push_str(&format!("reason: {}\n", fmt::one_line(&p.reason)));
    out.push_str(&heading(style, "trigger"));
    out.push_str(&pairs(&trigger_lines(&p.trigger)));
    out.push_str(&heading(style, "predicted (ratio of capacity; the target's of its limit)"));
    out.push_str(&prediction(&p.predicted, style));
    out.push_str(&heading(style, &format!("rejected alternatives: {}", p.rejected_alternatives.len())));
    for a in &p.rejected_alternatives {
        out.push_str(&format!("  - {}: {}\n", a.candidate, fmt::one_line(&a.why)));
    }
    out
}

fn render_action(a: &ActionExplanation, style: &Style, now_ms: i64) -> String {
    let spec = a
        .proposal
        .as_ref()
        .map(|p| &p.spec)
        .or(a.pending.as_ref().map(|p| &p.proposal.spec))
        .or(a.entry.as_ref().map(|e| &e.request.spec))
        .or(a.record.as_ref().map(|r| &r.request.spec))
        .or(a.evaluation.as_ref().map(|e| &e.spec));
    let mut out = format!(
        "{}\n",
        style.bold(&format!("action {}: {}", a.id, spec.map(fmt::spec).unwrap_or_else(|| "?".to_owned())))
    );
    let mut state = Vec::new();
    if let Some(r) = &a.record {
        state.push(format!(
            "state {} (ops server)",
            style.paint(actions::state_paint(r.state).unwrap_or(Paint::Bold), actions::state_name(r.state))
        ));
    }
    if let Some(e) = &a.entry {
        state.push(format!("outcome {} (master)", e.outcome.as_str()));
    }
    if let Some(p) = &a.pending {
        state.push(style.paint(
            Paint::Warn,
            &format!("pending approval since {} (lbctl approve {})", fmt::ago(p.first_proposed_at_ms, now_ms), a.id),
        ));
    }
    if !state.is_empty() {
        out.push_str(&format!("{}\n", state.join(" · ")));
    }
    if let Some(note) = a.entry.as_ref().and_then(|e| e.note.as_deref()) {
        out.push_str(&format!("note: {}\n", fmt::one_line(note)));
    }
    if let Some(f) = a.record.as_ref().and_then(|r| r.failure.as_ref()) {
        out.push_str(&style.paint(Paint::Bad, &format!("failure: {}\n", fmt::one_line(&f.message))));
    }
    match a.proposal.as_ref().or(a.pending.as_ref().map(|p| &p.proposal)) {
        Some(p) => out.push_str(&proposal_body(p, style)),
        None => {
            let request = a.record.as_ref().map(|r| &r.request).or(a.entry.as_ref().map(|e| &e.request));
            if let Some(r) = request {
                out.push_str(&format!(
                    "policy {} · submitted by {}\n",
                    r.policy.as_deref().unwrap_or("manual"),
                    a.record.as_ref().map(|r| r.submitted_by.as_str()).unwrap_or("?")
                ));
                out.push_str(&format!("reason: {}\n", fmt::one_line(&r.reason)));
            }
            out.push_str("(no proposal record: it was not proposed through the master's analyzers)\n");
        }
    }

    out.push_str(&heading(style, "execution (ops server audit)"));
    if a.events.is_empty() {
        out.push_str("  none: the ops server has no such action\n");
    } else {
        let mut t =
            Table::new(&[("  AT", Align::Left), ("STATE", Align::Left), ("BY", Align::Left), ("DETAIL", Align::Left)]);
        for e in &a.events {
            t.row(vec![
                format!("  {}", fmt::clock_ms(e.at_ms)).into(),
                Cell::painted(actions::state_name(e.state), actions::state_paint(e.state)),
                e.actor.as_str().into(),
                fmt::one_line(&e.detail).into(),
            ]);
        }
        out.push_str(&t.render(style));
    }

    match &a.evaluation {
        Some(ev) => {
            let j = &ev.judgement;
            let verdict = style.paint(history::verdict_paint(j.verdict), j.verdict.as_str());
            out.push_str(&format!(
                "\n{} {verdict} {}\n",
                style.bold("evaluation:"),
                style.bold(&format!("(score {:+.2} on {})", j.score, j.metric))
            ));
            out.push_str(&format!(
                "  evaluated {} ({} s to settle, {} s windows); {}\n",
                fmt::clock(ev.evaluated_at_ms),
                ev.settle_secs,
                ev.window_secs,
                fmt::one_line(&j.why)
            ));
            out.push_str(&snapshots(&ev.before, &ev.after, style));
            let stages = ev.stages.describe();
            if !stages.is_empty() {
                out.push_str(&format!("  where the time went: {stages}\n"));
            }
            if let Some(revert) = &ev.revert {
                out.push_str(&format!("  reverted by: {}\n", fmt::spec(revert)));
            }
        }
        None => {
            let why = match a.entry.as_ref().map(|e| e.outcome) {
                Some(lb_common::protocol::ActionOutcome::Applied) => "not yet: it is evaluated once it has settled",
                Some(
                    lb_common::protocol::ActionOutcome::Submitted | lb_common::protocol::ActionOutcome::Unanswered,
                ) => "not yet: it has not ended",
                Some(_) => "none: the action was not applied",
                None if a.pending.is_some() => "none: it waits for approval",
                None => "none: the master does not follow this action",
            };
            out.push_str(&heading(style, &format!("evaluation: {why}")));
        }
    }
    out
}

fn render_partition(p: &PartitionExplanation, style: &Style, now_ms: i64) -> String {
    let r = &p.partition;
    let owner = r.owner.as_ref().map(|w| w.to_string()).unwrap_or_else(|| "no owner".to_owned());
    let mut out = format!(
        "{}\n",
        style.bold(&format!(
            "partition {}: {}/{} [{}, {}] on {owner}{}",
            r.id,
            r.tenant,
            r.table,
            r.key_range.start,
            r.key_range.end,
            if r.gone { " (gone: split or merged away)" } else { "" }
        ))
    );
    let demand = r.ops_per_sec + r.rejected_per_sec;
    let load = match r.limit {
        Some(l) if l.ops_per_sec > 0.0 => {
            let ratio = demand / l.ops_per_sec;
            format!(
                ", {} of its limit of {}/s",
                style.paint(ratio_paint(ratio).unwrap_or(Paint::Bold), &fmt::ratio(ratio)),
                fmt::num(l.ops_per_sec)
            )
        }
        _ => ", no limit known".to_owned(),
    };
    out.push_str(&format!(
        "now: demand {}/s ({}/s rejected) over {} s{load}\n",
        fmt::num(demand),
        fmt::num(r.rejected_per_sec),
        fmt::num(r.window_secs)
    ));
    let when = p.pass_at_ms.map(|at| fmt::ago(at, now_ms)).unwrap_or_else(|| "never".to_owned());
    out.push_str(&heading(style, &format!("latest pass (pass {}, {when})", p.pass)));
    if p.declined_now.is_empty() && p.proposed_now.is_empty() {
        out.push_str("  no policy proposed or declined anything about it\n");
    }
    for d in &p.declined_now {
        out.push_str(&format!("  declined by {} ({}): {}\n", d.policy.as_str(), d.subject, fmt::one_line(&d.why)));
    }
    for pr in &p.proposed_now {
        out.push_str(&format!(
            "  proposed by {} ({}): {}\n",
            pr.policy.as_str(),
            pr.mode.as_str(),
            fmt::spec(&pr.spec)
        ));
    }
    if !p.in_flight.is_empty() {
        out.push_str(&heading(style, "in flight"));
        for a in &p.in_flight {
            out.push_str(&format!(
                "  {} {} ({}, {})\n",
                a.request.id,
                fmt::spec(&a.request.spec),
                actions::state_name(a.state),
                actions::policy_name(a)
            ));
        }
    }
    if !p.pending.is_empty() {
        out.push_str(&heading(style, "waiting for approval"));
        for pe in &p.pending {
            out.push_str(&format!("  {} {} (lbctl approve {})\n", pe.id, fmt::spec(&pe.proposal.spec), pe.id));
        }
    }
    out.push_str(&heading(style, "earlier declines (analysis records)"));
    if p.declined_before.is_empty() {
        out.push_str("  none kept\n");
    }
    for d in &p.declined_before {
        out.push_str(&format!(
            "  {}  {} ({}): {}\n",
            fmt::clock(d.at_ms),
            d.declined.policy.as_str(),
            d.declined.subject,
            fmt::one_line(&d.declined.why)
        ));
    }
    if p.declined_now.is_empty() && p.proposed_now.is_empty() && p.in_flight.is_empty() && p.pending.is_empty() {
        out.push_str("\nno policy considers it hot right now, so nothing is being done about it\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::names;

    #[test]
    fn a_subject_names_an_id_only_as_a_whole_token() {
        assert!(names("acme.orders.p000032", "acme.orders.p000032"));
        assert!(names("acme.orders.p000032 -> w-0001", "w-0001"));
        assert!(!names("acme.orders.p0000321", "acme.orders.p000032"));
    }
}
