//! `lbctl watch [--passes] [-n N]`: follows the master's event stream (`GET /api/v1/stream`) and
//! prints one line per event — every proposal, action state and evaluation as the master writes
//! it, and with `--passes` a line per online pass. `-o json` prints each event as one JSON line
//! (`{"event": "record", "data": {...}}`). Ends when the master does, or after `-n` events.

use lb_common::protocol::{ActionEntry, Evaluation, PassSnapshot, Proposal, RecordKind, StreamEvent, Verdict};
use serde::Serialize;

use crate::api::Api;
use crate::cli::{Output, WatchArgs};
use crate::error::{AtComponent, CtlError};
use crate::fmt;
use crate::out;
use crate::style::{Paint, Style};

/// An event as `-o json` prints it.
#[derive(Debug, Serialize)]
struct JsonEvent<'a, T: Serialize> {
    event: &'a str,
    data: &'a T,
}

pub async fn run(api: &Api, args: &WatchArgs, output: Output, style: &Style) -> Result<(), CtlError> {
    let mut events = api.master.stream().await.at_master()?;
    let mut printed = 0usize;
    while args.n.is_none_or(|n| printed < n) {
        let Some(event) = events.next().await else {
            return Err(CtlError::Usage("the master ended the stream (it is shutting down)".to_owned()));
        };
        let event = event.at_master()?;
        if matches!(event, StreamEvent::Pass(_)) && !args.passes {
            continue;
        }
        if matches!(event, StreamEvent::Hello(_)) && output == Output::Table {
            continue;
        }
        match output {
            Output::Json => print_json(&event)?,
            Output::Table => out::text(&line(&event, style))?,
        }
        printed += 1;
    }
    Ok(())
}

fn print_json(event: &StreamEvent) -> Result<(), CtlError> {
    match event {
        StreamEvent::Hello(h) => out::json_line(&JsonEvent { event: "hello", data: h }),
        StreamEvent::Pass(p) => out::json_line(&JsonEvent { event: "pass", data: p.as_ref() }),
        StreamEvent::Record(r) => out::json_line(&JsonEvent { event: "record", data: r }),
        StreamEvent::Lagged(l) => out::json_line(&JsonEvent { event: "lagged", data: l }),
    }
}

/// One line per event, time first.
pub fn line(event: &StreamEvent, style: &Style) -> String {
    match event {
        StreamEvent::Hello(h) => format!("{}  connected at pass {}\n", fmt::clock_ms(h.server_ms), h.pass),
        StreamEvent::Pass(p) => pass_line(p),
        StreamEvent::Lagged(l) => {
            format!("{}\n", style.paint(Paint::Warn, &format!("fell behind: {} records not shown", l.missed)))
        }
        StreamEvent::Record(r) => {
            let at = fmt::clock_ms(r.at_ms);
            let body = r.body.clone();
            match r.kind {
                RecordKind::Proposal => match serde_json::from_value::<Proposal>(body) {
                    Ok(p) => format!(
                        "{at}  {}  proposed {} ({}, {}): {}\n",
                        r.key,
                        fmt::spec(&p.spec),
                        p.policy.as_str(),
                        p.mode.as_str(),
                        fmt::one_line(&p.reason)
                    ),
                    Err(e) => format!("{at}  {}  proposal (unreadable: {e})\n", r.key),
                },
                RecordKind::Action => match serde_json::from_value::<ActionEntry>(body) {
                    Ok(a) => {
                        let state = a.record.as_ref().map_or("-", |rec| crate::cmd::actions::state_name(rec.state));
                        format!("{at}  {}  {}  {state} ({})\n", r.key, fmt::spec(&a.request.spec), a.outcome.as_str())
                    }
                    Err(e) => format!("{at}  {}  action (unreadable: {e})\n", r.key),
                },
                RecordKind::Evaluation => match serde_json::from_value::<Evaluation>(body) {
                    Ok(e) => {
                        let v = e.judgement.verdict;
                        let paint = match v {
                            Verdict::Effective => Paint::Good,
                            Verdict::NoEffect | Verdict::Inconclusive => Paint::Warn,
                            Verdict::Harmful => Paint::Bad,
                        };
                        format!(
                            "{at}  {}  {}  {}: {}\n",
                            r.key,
                            fmt::spec(&e.spec),
                            style.paint(paint, v.as_str()),
                            fmt::one_line(&e.judgement.why)
                        )
                    }
                    Err(e) => format!("{at}  {}  evaluation (unreadable: {e})\n", r.key),
                },
                RecordKind::ConfigReload => format!("{at}  config reload {}\n", r.key),
                RecordKind::Analysis => format!("{at}  analysis {}\n", r.key),
            }
        }
    }
}

fn pass_line(p: &PassSnapshot) -> String {
    let s = &p.stats;
    format!(
        "{}  pass {}: {} hot partitions, {} overloaded workers, max {} / mean {} (cv {:.2}), {} in flight, {} proposals, {} pending\n",
        fmt::clock_ms(p.at_ms.unwrap_or_default()),
        p.pass,
        s.hot_partitions,
        s.overloaded_workers,
        fmt::ratio(s.max_load_ratio),
        fmt::ratio(s.mean_load_ratio),
        s.cv,
        s.in_flight,
        p.proposals.len(),
        p.pending.len()
    )
}
