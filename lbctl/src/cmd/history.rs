//! `lbctl history PARTITION`: the partition's recent series as a sparkline with its figures,
//! and every action that touched it or one of its ancestors (a split's or merge's parents),
//! with the verdict of those that were evaluated.

use std::collections::BTreeSet;

use lb_common::ids::PartitionId;
use lb_common::protocol::{
    ActionRecord, ActionSpec, Evaluation, GroupTarget, History, HistoryQuery, PartitionRow, PartitionsQuery,
    RecordsQuery,
};
use serde::{Deserialize, Serialize};

use crate::api::{Api, now_ms};
use crate::cli::HistoryArgs;
use crate::cmd::actions;
use crate::error::{AtComponent, CtlError};
use crate::fmt;
use crate::style::{Paint, Style};
use crate::table::{Align, Cell, Table};

/// The sparkline's width: points beyond it are averaged into it.
pub const SPARK_WIDTH: usize = 60;
/// How far back the lineage is followed (a partition split 32 times over is already odd).
const MAX_LINEAGE_DEPTH: usize = 32;
const SPARKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// `lbctl history -o json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryReport {
    /// `GET /api/v1/partitions/{id}/history`.
    pub history: History,
    /// The partition and its ancestors, itself first (from `GET /api/v1/partitions?include_gone=true`).
    pub lineage: Vec<PartitionId>,
    /// Every action the ops server keeps whose spec names the partition, an ancestor, or their
    /// table or tenant (a group), oldest first.
    pub actions: Vec<ActionRecord>,
    /// The evaluations of those actions (`GET /api/v1/records/evaluation`).
    pub evaluations: Vec<Evaluation>,
}

/// The partition and its ancestors, by following `parents` through the rows.
pub fn lineage(id: &PartitionId, rows: &[PartitionRow]) -> Vec<PartitionId> {
    let mut out = vec![id.clone()];
    let mut seen: BTreeSet<PartitionId> = out.iter().cloned().collect();
    let mut frontier = vec![id.clone()];
    for _ in 0..MAX_LINEAGE_DEPTH {
        let next: Vec<PartitionId> = frontier
            .iter()
            .filter_map(|p| rows.iter().find(|r| &r.id == p))
            .flat_map(|r| r.parents.iter().cloned())
            .filter(|p| seen.insert(p.clone()))
            .collect();
        if next.is_empty() {
            break;
        }
        out.extend(next.iter().cloned());
        frontier = next;
    }
    out
}

/// Whether an action's spec names one of `partitions`, or the table or tenant of `row`.
pub fn touches(spec: &ActionSpec, partitions: &[PartitionId], row: Option<&PartitionRow>) -> bool {
    let named = |p: &PartitionId| partitions.contains(p);
    match spec {
        ActionSpec::Split { partition, .. }
        | ActionSpec::SplitInto { partition, .. }
        | ActionSpec::Move { partition, .. } => named(partition),
        ActionSpec::Merge { left, right, .. } => named(left) || named(right),
        ActionSpec::Group { target, .. } => match target {
            GroupTarget::Partition { partition } => named(partition),
            GroupTarget::Table { tenant, table } => row.is_some_and(|r| &r.tenant == tenant && &r.table == table),
            GroupTarget::Tenant { tenant } => row.is_some_and(|r| &r.tenant == tenant),
        },
        ActionSpec::Reshard { .. } => false,
    }
}

pub async fn fetch(api: &Api, args: &HistoryArgs) -> Result<HistoryReport, CtlError> {
    let to_ms = now_ms();
    let query = HistoryQuery {
        metric: Some(args.metric),
        from_ms: Some(to_ms - (args.since * 1000) as i64),
        to_ms: Some(to_ms),
    };
    let all = PartitionsQuery { include_gone: Some(true), ..PartitionsQuery::default() };
    let (history, rows, all_actions, evaluations) = tokio::try_join!(
        async { api.master.history(&args.partition, &query).await.at_master() },
        async { api.master.partitions(&all).await.at_master() },
        async { api.ops.actions(None).await.at_ops() },
        async {
            api.master.records::<Evaluation>(&RecordsQuery { since_ms: None, limit: Some(1000) }).await.at_master()
        },
    )?;
    let lineage = lineage(&args.partition, &rows);
    let row = rows.iter().find(|r| r.id == args.partition);
    let mut touched: Vec<ActionRecord> =
        all_actions.into_iter().filter(|a| touches(&a.request.spec, &lineage, row)).collect();
    touched = actions::select(std::mem::take(&mut touched), None, usize::MAX);
    let evaluations = evaluations
        .into_iter()
        .map(|r| r.body)
        .filter(|e| touched.iter().any(|a| a.request.id.as_str() == e.action_id))
        .collect();
    Ok(HistoryReport { history, lineage, actions: touched, evaluations })
}

/// The values squeezed into at most `width` cells (averages), as spark characters scaled from 0
/// to the largest.
pub fn sparkline(values: &[f64], width: usize) -> String {
    if values.is_empty() || width == 0 {
        return String::new();
    }
    let cells = values.len().min(width);
    let avg: Vec<f64> = (0..cells)
        .map(|i| {
            let (a, b) = (i * values.len() / cells, ((i + 1) * values.len() / cells).max(i * values.len() / cells + 1));
            values[a..b].iter().sum::<f64>() / (b - a) as f64
        })
        .collect();
    let max = avg.iter().copied().fold(0.0f64, f64::max);
    avg.iter()
        .map(|&v| {
            if max <= 0.0 {
                SPARKS[0]
            } else {
                SPARKS[((v / max * (SPARKS.len() - 1) as f64).round() as usize).min(SPARKS.len() - 1)]
            }
        })
        .collect()
}

pub fn render(r: &HistoryReport, style: &Style, now_ms: i64) -> String {
    let h = &r.history;
    let mut out = format!("{}\n", style.bold(&format!("{} {}", h.partition, h.metric)));
    if r.lineage.len() > 1 {
        out.push_str(&format!(
            "ancestors: {}\n",
            r.lineage[1..].iter().map(|p| p.as_str()).collect::<Vec<_>>().join(", ")
        ));
    }
    let values: Vec<f64> = h.points.iter().map(|p| p.value).collect();
    match (h.points.first(), h.points.last()) {
        (Some(first), Some(last)) => {
            let max = values.iter().copied().fold(f64::MIN, f64::max);
            let min = values.iter().copied().fold(f64::MAX, f64::min);
            let mean = values.iter().sum::<f64>() / values.len() as f64;
            out.push_str(&format!(
                "{} → {}  {}  (from {}, {} points)\n",
                fmt::clock(first.ts_ms),
                fmt::clock(last.ts_ms + last.step_ms),
                sparkline(&values, SPARK_WIDTH),
                fmt::ago(first.ts_ms, now_ms),
                h.points.len()
            ));
            out.push_str(&format!(
                "now {} · min {} · mean {} · max {}\n",
                fmt::metric_value(h.metric, last.value),
                fmt::metric_value(h.metric, min),
                fmt::metric_value(h.metric, mean),
                fmt::metric_value(h.metric, max)
            ));
        }
        _ => out.push_str("no points in the window\n"),
    }
    out.push('\n');
    out.push_str(&format!("{}\n", style.bold(&format!("actions that touched it: {}", r.actions.len()))));
    if r.actions.is_empty() {
        return out;
    }
    let mut t = Table::new(&[
        ("CREATED", Align::Left),
        ("ID", Align::Left),
        ("ACTION", Align::Left),
        ("STATE", Align::Left),
        ("POLICY", Align::Left),
        ("VERDICT", Align::Left),
    ]);
    for a in &r.actions {
        let verdict = r.evaluations.iter().find(|e| e.action_id == a.request.id.as_str()).map(|e| {
            let v = e.judgement.verdict;
            Cell::painted(format!("{} ({:+.2})", v.as_str(), e.judgement.score), Some(verdict_paint(v)))
        });
        t.row(vec![
            fmt::date_time(a.created_at_ms).into(),
            a.request.id.as_str().into(),
            fmt::spec(&a.request.spec).into(),
            Cell::painted(actions::state_name(a.state), actions::state_paint(a.state)),
            actions::policy_name(a).into(),
            verdict.unwrap_or_else(|| "".into()),
        ]);
    }
    out.push_str(&t.render(style));
    out
}

pub fn verdict_paint(v: lb_common::protocol::Verdict) -> Paint {
    match v {
        lb_common::protocol::Verdict::Effective => Paint::Good,
        lb_common::protocol::Verdict::NoEffect | lb_common::protocol::Verdict::Inconclusive => Paint::Warn,
        lb_common::protocol::Verdict::Harmful => Paint::Bad,
    }
}
