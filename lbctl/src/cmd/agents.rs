//! `lbctl agents`: the agents registered with the ops server, their last heartbeat, and how the
//! master's collection from each is going (lag, gaps, page).

use lb_common::protocol::{AgentInfo, AgentState, CollectStatus, CollectorStatus};
use serde::{Deserialize, Serialize};

use crate::api::Api;
use crate::error::{AtComponent, CtlError};
use crate::fmt;
use crate::style::{Paint, Style};
use crate::table::{Align, Cell, Table};

/// `lbctl agents -o json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentsReport {
    /// `GET /v1/agents` of the ops server.
    pub agents: Vec<AgentInfo>,
    /// `GET /api/v1/collector` of the master.
    pub collector: CollectorStatus,
}

pub async fn fetch(api: &Api) -> Result<AgentsReport, CtlError> {
    let (agents, collector) = tokio::try_join!(async { api.ops.agents().await.at_ops() }, async {
        api.master.collector().await.at_master()
    },)?;
    Ok(AgentsReport { agents: agents.agents, collector })
}

fn name<T: Serialize>(v: &T) -> String {
    serde_json::to_value(v).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
}

pub fn render(r: &AgentsReport, style: &Style, now_ms: i64) -> String {
    let c = &r.collector;
    let mut out = String::new();
    let last = c.last_success_ms.map(|t| fmt::ago(t, now_ms)).unwrap_or_else(|| "never".to_owned());
    let state = if c.stale { style.paint(Paint::Bad, "STALE") } else { style.paint(Paint::Good, "ok") };
    out.push_str(&format!(
        "{} {state}: last success {last}, {} failures in a row, {} samples, max lag {}\n",
        style.bold("collector"),
        c.consecutive_failures,
        c.samples_total,
        c.max_lag_ms.map(fmt::duration_ms).unwrap_or_else(|| "-".to_owned())
    ));
    if let Some(e) = &c.last_error {
        out.push_str(&format!("last error: {}\n", fmt::one_line(e)));
    }
    if r.agents.is_empty() {
        out.push_str("no agents registered\n");
        return out;
    }
    let mut t = Table::new(&[
        ("WORKER", Align::Left),
        ("STATE", Align::Left),
        ("ADDRESS", Align::Left),
        ("VERSION", Align::Left),
        ("HEARTBEAT", Align::Right),
        ("CURSOR", Align::Right),
        ("COLLECTED", Align::Left),
        ("LAG", Align::Right),
        ("GAPS", Align::Right),
        ("PAGE", Align::Right),
        ("ERROR", Align::Left),
    ]);
    for a in &r.agents {
        let col = c.agents.get(&a.worker_id);
        let state_paint = if a.state == AgentState::Up { Some(Paint::Good) } else { Some(Paint::Bad) };
        let status = col.and_then(|x| x.status);
        let status_paint = match status {
            Some(CollectStatus::Ok) => None,
            Some(_) => Some(Paint::Bad),
            None => Some(Paint::Warn),
        };
        t.row(vec![
            a.worker_id.as_str().into(),
            Cell::painted(name(&a.state), state_paint),
            a.address.as_str().into(),
            a.version.as_str().into(),
            fmt::ago(a.last_heartbeat_ms, now_ms).into(),
            a.latest_cursor.0.to_string().into(),
            Cell::painted(status.map(|s| name(&s)).unwrap_or_else(|| "not yet".to_owned()), status_paint),
            col.and_then(|x| x.lag_ms).map(fmt::duration_ms).unwrap_or_else(|| "-".to_owned()).into(),
            col.map(|x| x.gaps.to_string()).unwrap_or_default().into(),
            col.map(|x| x.page_limit.to_string()).unwrap_or_default().into(),
            Cell::painted(
                col.and_then(|x| x.last_error.as_deref()).map(fmt::one_line).unwrap_or_default(),
                Some(Paint::Bad),
            ),
        ]);
    }
    out.push_str(&t.render(style));
    out
}
