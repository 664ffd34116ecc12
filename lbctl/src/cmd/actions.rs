//! `lbctl actions [--follow] [--policy P] [--state S]`: the ops server's actions, oldest first;
//! `--follow` polls once a second and prints each action whose state changed.

use std::collections::HashMap;
use std::time::Duration;

use lb_common::ids::ActionId;
use lb_common::protocol::{ActionRecord, ActionState, ActionsResponse, Origin};

use crate::api::{Api, now_ms};
use crate::cli::{ActionsArgs, Output};
use crate::error::{AtComponent, CtlError};
use crate::fmt;
use crate::out;
use crate::style::{Paint, Style};
use crate::table::{Align, Cell, Table};

/// Once a second, as the issue asks: actions change state on the executor's tick, not faster.
pub const FOLLOW_POLL: Duration = Duration::from_secs(1);

/// The policy of an action as the ops server has it (`manual` for an action by hand).
pub fn policy_name(record: &ActionRecord) -> &str {
    match (&record.request.policy, record.request.origin) {
        (Some(p), _) => p,
        (None, Origin::Manual) => "manual",
        (None, _) => "-",
    }
}

pub fn state_paint(state: ActionState) -> Option<Paint> {
    match state {
        ActionState::Queued => Some(Paint::Warn),
        ActionState::Running => Some(Paint::Busy),
        ActionState::Succeeded => Some(Paint::Good),
        ActionState::Failed | ActionState::TimedOut => Some(Paint::Bad),
        ActionState::Cancelled => Some(Paint::Dim),
    }
}

pub fn state_name(state: ActionState) -> &'static str {
    match state {
        ActionState::Queued => "queued",
        ActionState::Running => "running",
        ActionState::Succeeded => "succeeded",
        ActionState::Failed => "failed",
        ActionState::Cancelled => "cancelled",
        ActionState::TimedOut => "timed_out",
    }
}

/// The selected actions, oldest first, at most `n` (the newest).
pub fn select(mut actions: Vec<ActionRecord>, policy: Option<&str>, n: usize) -> Vec<ActionRecord> {
    actions.retain(|a| policy.is_none_or(|p| policy_name(a) == p));
    actions.sort_by(|a, b| (a.created_at_ms, a.request.id.as_str()).cmp(&(b.created_at_ms, b.request.id.as_str())));
    let skip = actions.len().saturating_sub(n);
    actions.split_off(skip)
}

/// How long an action has taken so far (or took).
fn took(record: &ActionRecord, now_ms: i64) -> String {
    match (record.started_at_ms, record.finished_at_ms) {
        (Some(s), Some(f)) => fmt::duration_ms(f - s),
        (Some(s), None) => format!("{}…", fmt::duration_ms(now_ms - s)),
        _ => String::new(),
    }
}

/// The actions as a table: id, action, state, who, age, duration and failure.
pub fn render(actions: &[ActionRecord], style: &Style, now_ms: i64) -> String {
    if actions.is_empty() {
        return "no actions\n".to_owned();
    }
    let mut t = Table::new(&[
        ("ID", Align::Left),
        ("KIND", Align::Left),
        ("TARGET", Align::Left),
        ("DETAIL", Align::Left),
        ("STATE", Align::Left),
        ("POLICY", Align::Left),
        ("BY", Align::Left),
        ("CREATED", Align::Right),
        ("TOOK", Align::Right),
        ("FAILURE", Align::Left),
    ]);
    for a in actions {
        let failure = a.failure.as_ref().map(|f| {
            let how = serde_json::to_value(f.execution).ok().and_then(|v| v.as_str().map(str::to_owned));
            format!("{} ({})", fmt::one_line(&f.message), how.unwrap_or_default())
        });
        t.row(vec![
            a.request.id.as_str().into(),
            a.request.spec.kind().as_str().into(),
            fmt::target(&a.request.spec).into(),
            fmt::detail(&a.request.spec).into(),
            Cell::painted(state_name(a.state), state_paint(a.state)),
            policy_name(a).into(),
            a.submitted_by.as_str().into(),
            fmt::ago(a.created_at_ms, now_ms).into(),
            took(a, now_ms).into(),
            Cell::painted(failure.unwrap_or_default(), Some(Paint::Bad)),
        ]);
    }
    t.render(style)
}

/// One line for an action that appeared or changed state while following.
pub fn change_line(record: &ActionRecord, before: Option<ActionState>, style: &Style) -> String {
    let at = record.finished_at_ms.or(record.started_at_ms).unwrap_or(record.created_at_ms);
    let state = style.paint(state_paint(record.state).unwrap_or(Paint::Bold), state_name(record.state));
    let change = match before {
        Some(b) => format!("{} -> {state}", state_name(b)),
        None => format!("new, {state}"),
    };
    let failure = record.failure.as_ref().map(|f| format!(": {}", fmt::one_line(&f.message))).unwrap_or_default();
    format!(
        "{}  {}  {}  {change}  ({}){failure}\n",
        fmt::clock_ms(at),
        record.request.id,
        fmt::spec(&record.request.spec),
        policy_name(record)
    )
}

/// What changed between two polls: new actions and state changes, oldest first.
pub fn changes<'a>(
    seen: &HashMap<ActionId, ActionState>,
    now: &'a [ActionRecord],
) -> Vec<(&'a ActionRecord, Option<ActionState>)> {
    now.iter()
        .filter_map(|a| match seen.get(&a.request.id) {
            Some(&s) if s == a.state => None,
            before => Some((a, before.copied())),
        })
        .collect()
}

pub async fn run(api: &Api, args: &ActionsArgs, output: Output, style: &Style) -> Result<(), CtlError> {
    let policy = args.policy.map(|p| p.policy().as_str());
    let state = args.state.map(|s| s.state());
    let fetch = || async { api.ops.actions(state).await.at_ops() };
    if !args.follow {
        let actions = select(fetch().await?, policy, usize::from(args.n));
        return match output {
            Output::Json => out::json(&ActionsResponse { actions }),
            Output::Table => out::text(&render(&actions, style, now_ms())),
        };
    }
    // Follow: everything selected now, then every change; one JSON record per line in JSON.
    // Ctrl-C ends it at any point, mid-request too.
    tokio::select! {
        result = follow(fetch, policy, output, style) => result,
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}

async fn follow<F, Fut>(fetch: F, policy: Option<&str>, output: Output, style: &Style) -> Result<(), CtlError>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<Vec<ActionRecord>, CtlError>>,
{
    let mut seen: HashMap<ActionId, ActionState> = HashMap::new();
    let mut first = true;
    loop {
        let actions = select(fetch().await?, policy, usize::MAX);
        let changed = changes(&seen, &actions);
        match output {
            Output::Json => {
                for (a, _) in &changed {
                    out::json_line(a)?;
                }
            }
            Output::Table if first => out::text(&render(&actions, style, now_ms()))?,
            Output::Table => {
                for (a, before) in &changed {
                    out::text(&change_line(a, *before, style))?;
                }
            }
        }
        for a in &actions {
            seen.insert(a.request.id.clone(), a.state);
        }
        first = false;
        tokio::time::sleep(FOLLOW_POLL).await;
    }
}
