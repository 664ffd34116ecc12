//! `lbctl status`: the cluster on one screen — per-worker load against capacity and its
//! spread, the partitions hot now, actions in flight, each policy's mode, the halt switches and
//! the agents whose data is stale.

use lb_common::ids::WorkerId;
use lb_common::protocol::{
    ActionRecord, ActionState, AgentInfo, AgentState, ClusterOverview, CollectStatus, CollectorStatus, HaltStatus,
    Metric, OverviewQuery, PartitionRow, PartitionsQuery, PassSnapshot, PolicyMode, PolicyStatus, WindowQuery,
    WorkerRow,
};
use serde::{Deserialize, Serialize};

use crate::api::{Api, now_ms};
use crate::cmd::actions;
use crate::error::{AtComponent, CtlError};
use crate::fmt;
use crate::style::{Paint, Style, ratio_paint};
use crate::table::{Align, Cell, Table};

/// The planner's default `partition_overload.engage_ratio`, when the policy does not say.
pub const DEFAULT_HOT_RATIO: f64 = 0.9;
/// The planner's default `partition_overload.rejected_engage_ratio`.
pub const DEFAULT_HOT_REJECTED_RATIO: f64 = 0.01;
/// The planner's default `partition_overload.min_ops_per_sec`: below it a partition is noise.
pub const DEFAULT_MIN_OPS_PER_SEC: f64 = 100.0;
/// 10 s, the master's default averaging window: data further behind than that leaves the
/// worker out of the window the planner looks at.
pub const STALE_LAG_MS: i64 = 10_000;
/// At most this many hot partitions are listed (the rest are counted).
pub const MAX_HOT_LISTED: usize = 10;

/// `lbctl status -o json`: the replies it is made of, and what lbctl derived from them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    pub master_url: String,
    pub ops_url: String,
    pub window_secs: u64,
    /// `GET /api/v1/overview?metric=ops`.
    pub overview: ClusterOverview,
    /// `GET /api/v1/workers`.
    pub workers: Vec<WorkerRow>,
    /// `GET /api/v1/pass`.
    pub pass: PassSnapshot,
    /// Partitions whose demand (served + rejected) is at or over `hot_ratio` of their limit, or
    /// that reject at least `hot_rejected_ratio` of it, hottest first.
    pub hot_partitions: Vec<PartitionRow>,
    pub hot_ratio: f64,
    pub hot_rejected_ratio: f64,
    /// Queued and running actions (`GET /v1/actions` of the ops server), oldest first.
    pub in_flight: Vec<ActionRecord>,
    /// `GET /api/v1/policy`.
    pub policy: PolicyStatus,
    /// `GET /v1/halt` of the ops server.
    pub halt: HaltStatus,
    /// `GET /v1/agents` of the ops server.
    pub agents: Vec<AgentInfo>,
    /// `GET /api/v1/collector`.
    pub collector: CollectorStatus,
    pub stale_agents: Vec<StaleAgent>,
}

/// An agent whose data the master cannot rely on, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StaleAgent {
    pub worker: WorkerId,
    pub why: String,
}

/// Demand over the partition's ops limit (0 without a limit).
pub fn demand_ratio(p: &PartitionRow) -> f64 {
    match p.limit {
        Some(l) if l.ops_per_sec > 0.0 => (p.ops_per_sec + p.rejected_per_sec) / l.ops_per_sec,
        _ => 0.0,
    }
}

fn rejected_share(p: &PartitionRow) -> f64 {
    let demand = p.ops_per_sec + p.rejected_per_sec;
    if demand > 0.0 { p.rejected_per_sec / demand } else { 0.0 }
}

/// The hot ones, hottest first.
pub fn hot_partitions(mut rows: Vec<PartitionRow>, ratio: f64, rejected_ratio: f64) -> Vec<PartitionRow> {
    rows.retain(|p| !p.gone && (demand_ratio(p) >= ratio || rejected_share(p) >= rejected_ratio));
    rows.sort_by(|a, b| demand_ratio(b).total_cmp(&demand_ratio(a)).then_with(|| a.id.cmp(&b.id)));
    rows
}

/// Agents the registry marks down, whose last collection failed, or whose data lags.
pub fn stale_agents(agents: &[AgentInfo], collector: &CollectorStatus, now_ms: i64) -> Vec<StaleAgent> {
    let mut stale = Vec::new();
    for a in agents {
        let mut why = Vec::new();
        if a.state == AgentState::Down {
            why.push(format!("down: last heartbeat {}", fmt::ago(a.last_heartbeat_ms, now_ms)));
        }
        match collector.agents.get(&a.worker_id) {
            Some(c) => {
                if let Some(status) = c.status.filter(|s| !matches!(s, CollectStatus::Ok | CollectStatus::Down)) {
                    let name = serde_json::to_value(status).ok().and_then(|v| v.as_str().map(str::to_owned));
                    let error = c.last_error.as_deref().map(|e| format!(" ({})", fmt::one_line(e))).unwrap_or_default();
                    why.push(format!("last collection {}{error}", name.unwrap_or_default()));
                }
                if let Some(lag) = c.lag_ms.filter(|&l| l > STALE_LAG_MS) {
                    why.push(format!("its data is {} behind", fmt::duration_ms(lag)));
                }
            }
            None => why.push("not collected yet".to_owned()),
        }
        if !why.is_empty() {
            stale.push(StaleAgent { worker: a.worker_id.clone(), why: why.join("; ") });
        }
    }
    stale
}

fn planner_f64(policy: &PolicyStatus, pointer: &str) -> Option<f64> {
    policy.planner.pointer(pointer).and_then(serde_json::Value::as_f64)
}

pub async fn fetch(api: &Api, master_url: &str, ops_url: &str, window_secs: u64) -> Result<Status, CtlError> {
    let w = Some(window_secs);
    let (overview, workers, pass, policy, collector, halt, queued, running, agents) = tokio::try_join!(
        async { api.master.overview(&OverviewQuery { metric: Some(Metric::Ops), window_secs: w }).await.at_master() },
        async { api.master.workers(&WindowQuery { window_secs: w }).await.at_master() },
        async { api.master.pass().await.at_master() },
        async { api.master.policy().await.at_master() },
        async { api.master.collector().await.at_master() },
        async { api.ops.halt_status().await.at_ops() },
        async { api.ops.actions(Some(ActionState::Queued)).await.at_ops() },
        async { api.ops.actions(Some(ActionState::Running)).await.at_ops() },
        async { api.ops.agents().await.at_ops() },
    )?;
    let hot_ratio = planner_f64(&policy, "/partition_overload/engage_ratio").unwrap_or(DEFAULT_HOT_RATIO);
    let hot_rejected_ratio =
        planner_f64(&policy, "/partition_overload/rejected_engage_ratio").unwrap_or(DEFAULT_HOT_REJECTED_RATIO);
    let min_ops = planner_f64(&policy, "/partition_overload/min_ops_per_sec").unwrap_or(DEFAULT_MIN_OPS_PER_SEC);
    let query = PartitionsQuery { window_secs: w, min_ops_per_sec: Some(min_ops), ..PartitionsQuery::default() };
    let partitions = api.master.partitions(&query).await.at_master()?;
    let in_flight = actions::select(queued.into_iter().chain(running).collect(), None, usize::MAX);
    let stale_agents = stale_agents(&agents.agents, &collector, now_ms());
    Ok(Status {
        master_url: master_url.to_owned(),
        ops_url: ops_url.to_owned(),
        window_secs,
        overview,
        workers,
        pass,
        hot_partitions: hot_partitions(partitions, hot_ratio, hot_rejected_ratio),
        hot_ratio,
        hot_rejected_ratio,
        in_flight,
        policy,
        halt,
        agents: agents.agents,
        collector,
        stale_agents,
    })
}

pub fn mode_paint(mode: PolicyMode) -> Option<Paint> {
    match mode {
        PolicyMode::Auto => Some(Paint::Good),
        PolicyMode::DryRun => Some(Paint::Warn),
        PolicyMode::Off => Some(Paint::Dim),
    }
}

/// A load bar of `width` cells for a ratio of capacity (full at 1).
fn bar(ratio: f64, width: usize) -> String {
    let filled = ((ratio.clamp(0.0, 1.0) * width as f64).round() as usize).min(width);
    format!("{}{}", "█".repeat(filled), "░".repeat(width - filled))
}

pub fn render(s: &Status, style: &Style, now_ms: i64) -> String {
    let mut out = String::new();
    out.push_str(&format!("{}  master {}  ops server {}\n", style.bold("lb status"), s.master_url, s.ops_url));

    // What the loop and the switches are doing.
    let pass = match s.pass.at_ms {
        Some(at) if s.pass.pass > 0 => format!("pass {}, {}", s.pass.pass, fmt::ago(at, now_ms)),
        _ => "no pass yet".to_owned(),
    };
    let leader = match &s.pass.leadership {
        Some(l) if l.leader => "leader".to_owned(),
        Some(l) => format!("standby (leader {})", l.leader_address.as_deref().unwrap_or("unknown")),
        None => "leadership unknown".to_owned(),
    };
    let collector = if s.collector.stale {
        style.paint(Paint::Bad, "collector STALE")
    } else {
        let lag = s.collector.max_lag_ms.map(|l| format!(", max lag {}", fmt::duration_ms(l))).unwrap_or_default();
        format!("collector ok{lag}")
    };
    out.push_str(&format!("{pass} · {leader} · {collector}\n"));
    let executor = if s.halt.halted {
        let mut by = Vec::new();
        if s.halt.halted_by_api {
            let who = s.halt.changed_by.as_deref().unwrap_or("unknown");
            let why = s.halt.reason.as_deref().map(|r| format!(": {}", fmt::one_line(r))).unwrap_or_default();
            by.push(format!("api switch by {who}{why}"));
        }
        if s.halt.halted_by_config {
            by.push("executor.halted in the ops server's config".to_owned());
        }
        style.paint(Paint::Bad, &format!("executor HALTED ({})", by.join("; ")))
    } else {
        "executor running".to_owned()
    };
    out.push_str(&format!("{executor}, {} queued\n", s.halt.queued));
    let modes: Vec<String> = s
        .policy
        .modes
        .iter()
        .map(|(policy, mode)| {
            format!("{policy} {}", style.paint(mode_paint(*mode).unwrap_or(Paint::Bold), mode.as_str()))
        })
        .collect();
    let planner_halt =
        if s.policy.halted { style.paint(Paint::Bad, " · planner HALTED (planner.caps.halt)") } else { String::new() };
    out.push_str(&format!("policies: {}{planner_halt} · config v{}\n", modes.join(" · "), s.policy.config.version));

    // Workers.
    out.push('\n');
    out.push_str(&format!("{}\n", style.bold(&format!("workers (ops over {} s)", s.window_secs))));
    // A ZONE column only where the topology has zones (most clusters' tables stay as narrow).
    let zoned = s.workers.iter().any(|w| w.zone.is_some());
    let mut columns = vec![("WORKER", Align::Left), ("HEALTH", Align::Left)];
    if zoned {
        columns.push(("ZONE", Align::Left));
    }
    columns.extend([
        ("OPS/S", Align::Right),
        ("REJECTED/S", Align::Right),
        ("CAPACITY/S", Align::Right),
        ("LOAD", Align::Right),
        ("", Align::Left),
        ("COVERED", Align::Right),
    ]);
    let mut t = Table::new(&columns);
    for load in &s.overview.workers {
        let row = s.workers.iter().find(|w| w.id == load.worker);
        let health = row.and_then(|w| w.health).map(|h| {
            let name = serde_json::to_value(h).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
            let paint = match h {
                lb_common::protocol::Health::Healthy => None,
                lb_common::protocol::Health::Degraded => Some(Paint::Warn),
                lb_common::protocol::Health::Down => Some(Paint::Bad),
            };
            Cell::painted(name, paint)
        });
        let ratio = load.capacity_ratio.filter(|_| !load.stale);
        let mut cells = vec![load.worker.as_str().into(), health.unwrap_or_else(|| "-".into())];
        if zoned {
            cells.push(row.and_then(|w| w.zone.as_ref()).map_or_else(|| "-".to_owned(), |z| z.to_string()).into());
        }
        cells.extend([
            // Not collected yet: the load is unknown, not 0.
            if load.stale { Cell::painted("stale".to_owned(), Some(Paint::Warn)) } else { fmt::num(load.value).into() },
            row.map(|w| fmt::num(w.rejected_per_sec)).unwrap_or_default().into(),
            row.and_then(|w| w.capacity).map(|c| fmt::num(c.ops_per_sec)).unwrap_or_else(|| "-".to_owned()).into(),
            Cell::painted(ratio.map(fmt::ratio).unwrap_or_else(|| "-".to_owned()), ratio.and_then(ratio_paint)),
            Cell::painted(ratio.map(|r| bar(r, 10)).unwrap_or_default(), ratio.and_then(ratio_paint)),
            row.map(|w| format!("{:.0}/{:.0} s", w.covered_secs, w.window_secs)).unwrap_or_default().into(),
        ]);
        t.row(cells);
    }
    if t.is_empty() {
        out.push_str("no workers reported yet\n");
    } else {
        out.push_str(&t.render(style));
    }
    let o = &s.overview;
    let st = &s.pass.stats;
    out.push_str(&format!(
        "max {}/s · mean {}/s · max/mean {} · cv {} (planner's pool: max {}, mean {}, cv {})\n",
        fmt::num(o.max),
        fmt::num(o.mean),
        fmt::ratio(o.max_over_mean),
        fmt::ratio(o.cv),
        fmt::ratio(st.max_load_ratio),
        fmt::ratio(st.mean_load_ratio),
        fmt::ratio(st.cv)
    ));
    if o.stale_workers > 0 {
        out.push_str(&format!(
            "{} worker(s) stale: their data for the window is not collected yet, left out of max and mean\n",
            o.stale_workers
        ));
    }

    // Hot partitions.
    out.push('\n');
    out.push_str(&format!(
        "{} (demand at or over {} of the limit, or rejecting at least {} of it); the planner counted {} in its last pass\n",
        style.bold(&format!("hot partitions: {}", s.hot_partitions.len())),
        fmt::ratio(s.hot_ratio),
        fmt::percent(s.hot_rejected_ratio),
        st.hot_partitions
    ));
    if !s.hot_partitions.is_empty() {
        let mut t = Table::new(&[
            ("PARTITION", Align::Left),
            ("OWNER", Align::Left),
            ("DEMAND/S", Align::Right),
            ("REJECTED/S", Align::Right),
            ("LIMIT/S", Align::Right),
            ("LOAD", Align::Right),
        ]);
        for p in s.hot_partitions.iter().take(MAX_HOT_LISTED) {
            let r = demand_ratio(p);
            t.row(vec![
                p.id.as_str().into(),
                p.owner.as_ref().map(|w| w.to_string()).unwrap_or_else(|| "-".to_owned()).into(),
                fmt::num(p.ops_per_sec + p.rejected_per_sec).into(),
                fmt::num(p.rejected_per_sec).into(),
                p.limit.map(|l| fmt::num(l.ops_per_sec)).unwrap_or_else(|| "-".to_owned()).into(),
                Cell::painted(fmt::ratio(r), ratio_paint(r)),
            ]);
        }
        out.push_str(&t.render(style));
        if s.hot_partitions.len() > MAX_HOT_LISTED {
            out.push_str(&format!("… and {} more\n", s.hot_partitions.len() - MAX_HOT_LISTED));
        }
    }

    // Actions in flight.
    out.push('\n');
    out.push_str(&format!("{}\n", style.bold(&format!("actions in flight: {}", s.in_flight.len()))));
    if !s.in_flight.is_empty() {
        out.push_str(&actions::render(&s.in_flight, style, now_ms));
    }

    // Agents.
    out.push('\n');
    let stale = format!("{} stale", s.stale_agents.len());
    let stale = if s.stale_agents.is_empty() { stale } else { style.paint(Paint::Bad, &stale) };
    out.push_str(&format!("{}, {stale}\n", style.bold(&format!("agents: {} registered", s.agents.len()))));
    for a in &s.stale_agents {
        out.push_str(&format!("  {}  {}\n", a.worker, a.why));
    }
    out
}
