//! Hot slots on a real Valkey cluster: no balancing vs `redis-cli --cluster rebalance` vs lb,
//! in one go, on the same workload and cluster size.
//!
//! `cargo run -p lb-launcher --example valkey_bench [-- --secs-after-onset 60] [--workload too-hot|cpu]`
//!
//! Each run starts a fresh cluster with lb beside it ([`up_valkey`]). `hot-slots` (default):
//! 3 nodes of a hand-set 4,500 ops/s, 6,000 ops/s of load, 70 % on 3 slots of node 0 from 10 s;
//! `too-hot`: 50 % on one slot of node 0 and nodes of 4,000 ops/s, so that slot alone (3,000)
//! would overload any node it shares; `cpu`: the launcher's own setup with **no capacity
//! figure** on 4 nodes, 4 hot slots on node 0 whose reads are expensive (lb plans on the main
//! thread's busy time), and a fourth strategy, `redis-cli --cluster rebalance` with node 0
//! weighted down to 0.25 (what an operator who sees it hot would try). lb's agents, ops server and
//! master run in all three so they cost the same CPU everywhere; only the lb run has its
//! policies in `auto` (the others `off`). The `redis-cli` run calls
//! `redis-cli --cluster rebalance` once, 5 s after onset (the stock tool, balancing slot
//! counts). Figures come from outside lb: node commands/s and CPU from `INFO` every second,
//! client latency from the load generator's histogram, slots moved from `CLUSTER NODES`
//! before and after, every acknowledged write read back at the end. Relief: every node under
//! worker overload's high watermark (0.85 of the configured node capacity) for 3 s in a row;
//! with `cpu`, node main-thread CPU max/mean (`INFO` `used_active_time_main_thread`, per
//! second) at or under 1.15 for 3 s in a row, and "kept" is the share of seconds from then on
//! that stayed there. "Steady" figures are over the last 20 s.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser as _;
use lb_launcher::up::Overrides;
use lb_launcher::valkey_load::{NodeCounters, max_over_mean};
use lb_launcher::valkey_up::{ValkeyUpOptions, hot_slots_on, up_valkey};

/// Worker overload's default high watermark (master/src/planner/config.rs).
const HIGH_WATERMARK: f64 = 0.85;
/// Consecutive 1 s windows under the watermark that count as relief.
const RELIEF_WINDOWS: u32 = 3;
/// The window the steady figures average over, at the end of each run.
const STEADY_SECS: u64 = 20;
/// When the redis-cli run rebalances: after the hotspot has clearly formed.
const REBALANCE_AFTER_ONSET: Duration = Duration::from_secs(5);
/// The CPU target of issue 29: node main-thread CPU max/mean at or under this.
const CPU_MAX_OVER_MEAN: f64 = 1.15;
/// The weight the weighted redis-cli run gives the hot node (the others keep 1).
const HOT_NODE_WEIGHT: f64 = 0.25;

#[derive(Debug, Default)]
struct Figures {
    ops_max_over_mean: f64,
    cpu_max_over_mean: f64,
    max_node_ops: f64,
    /// The busiest node's ops over the configured node capacity.
    max_node_load: f64,
    p99_ms: f64,
    /// Slots whose owner differs between the start and the end of the run.
    slots_moved: usize,
    /// Migrations lb ran (succeeded actions at the ops server), back-and-forth ones included.
    migrations: usize,
    relief_secs: Option<f64>,
    /// Seconds from relief to the end at or under the target, of all such seconds.
    kept: (u32, u32),
    client_ops: u64,
    errors: u64,
    stale_reads: u64,
    /// Acknowledged writes read back intact, of all.
    intact: (usize, usize),
    note: String,
}

async fn owners(running: &lb_launcher::valkey_up::RunningValkey) -> anyhow::Result<BTreeMap<u16, String>> {
    let mut client = running.cluster.connect(0).await?;
    let nodes = client.cluster_nodes().await?;
    let mut map = BTreeMap::new();
    for n in nodes.iter().filter(|n| n.is_primary()) {
        for s in n.slots.iter().flat_map(|r| r.slots()) {
            map.insert(s.get(), n.id.as_str().to_owned());
        }
    }
    Ok(map)
}

async fn run(strategy: &str, after_onset: Duration, workload: Workload) -> anyhow::Result<Figures> {
    let dir = tempfile::tempdir().context("temp dir")?;
    let data = dir.path().join("data");
    let mut options = match workload {
        Workload::Cpu => ValkeyUpOptions::launcher(4, data),
        Workload::HotSlots | Workload::TooHot => ValkeyUpOptions::ops_capacity(3, data),
    };
    if workload == Workload::TooHot {
        options.node_ops_per_sec = Some(4_000.0);
        let load = options.load.as_mut().context("load")?;
        load.hot_slots = hot_slots_on(3, 0, 1);
        load.hot_share = 0.5;
    }
    options.balance = strategy == "lb";
    // The CPU run has no capacity: its relief is judged on CPU max/mean alone.
    let capacity = options.node_ops_per_sec.unwrap_or(f64::INFINITY);
    let mut running = up_valkey(&options, &Overrides::default()).await?;
    let before = owners(&running).await?;
    let onset = running.load.as_ref().context("load")?.onset_at();
    let end = onset + after_onset;
    let mut counters = NodeCounters::new(running.cluster.addrs(), running.cluster.connect_options());
    counters.sample().await;
    let (mut good, mut relief, mut rebalanced) = (0u32, None, false);
    let mut steady: Vec<(Vec<f64>, Vec<f64>)> = Vec::new();
    let mut steady_started = false;
    let mut figures = Figures::default();
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = Instant::now();
        if strategy.starts_with("redis-cli") && !rebalanced && now >= onset + REBALANCE_AFTER_ONSET {
            rebalanced = true;
            let mut args = vec!["--cluster".to_owned(), "rebalance".to_owned(), running.cluster.addr(0).to_string()];
            if strategy == "redis-cli-weighted" {
                args.push("--cluster-weight".to_owned());
                args.push(format!("{}={HOT_NODE_WEIGHT}", running.cluster.node_id(0).as_str()));
            }
            let out = tokio::task::spawn_blocking(move || std::process::Command::new("redis-cli").args(&args).output())
                .await?
                .context("running redis-cli --cluster rebalance (scripts/install-valkey.sh installs it)")?;
            let text = String::from_utf8_lossy(&out.stdout);
            let moving = text.lines().filter(|l| l.contains("Moving slot")).count();
            let verdict = text
                .lines()
                .map(|l| l.replace("\u{1b}[0m", "").replace("\u{1b}[29;1m", "").trim().to_owned())
                .rfind(|l| !l.is_empty() && !l.contains("Moving slot"))
                .unwrap_or_default();
            figures.note = format!("{verdict} ({moving} \"Moving slot\" lines)");
            println!("{strategy}: redis-cli --cluster rebalance: {}", figures.note);
        }
        let rates = counters.sample().await;
        let ops: Vec<f64> = rates.iter().map(|r| r.as_ref().map_or(0.0, |r| r.ops_per_sec)).collect();
        let cpu: Vec<f64> = rates.iter().map(|r| r.as_ref().map_or(0.0, |r| r.cpu_cores)).collect();
        let max = ops.iter().copied().fold(0.0, f64::max);
        if now > onset + Duration::from_secs(1) {
            let meets = if workload == Workload::Cpu {
                rates.iter().all(Option::is_some) && max_over_mean(&cpu) <= CPU_MAX_OVER_MEAN
            } else {
                max / capacity < HIGH_WATERMARK
            };
            if relief.is_some() {
                figures.kept.1 += 1;
                figures.kept.0 += u32::from(meets);
            }
            good = if meets { good + 1 } else { 0 };
            if good >= RELIEF_WINDOWS && relief.is_none() {
                relief = Some((now - onset).as_secs_f64() - (RELIEF_WINDOWS - 1) as f64);
            }
        }
        if end.saturating_duration_since(now) <= Duration::from_secs(STEADY_SECS) {
            if !steady_started {
                steady_started = true;
                running.load.as_ref().context("load")?.take_histogram();
            }
            steady.push((ops.clone(), cpu.clone()));
        }
        println!(
            "{strategy}: t={:+.0}s node ops/s {:.0?} max/mean {:.2}, main-thread cpu {:.2?} max/mean {:.2}",
            (now.saturating_duration_since(onset).as_secs_f64() - onset.saturating_duration_since(now).as_secs_f64()),
            ops,
            max_over_mean(&ops),
            cpu,
            max_over_mean(&cpu)
        );
    }
    let n = steady.len().max(1) as f64;
    let nodes = running.cluster.len();
    let ops: Vec<f64> = (0..nodes).map(|i| steady.iter().map(|s| s.0[i]).sum::<f64>() / n).collect();
    let cpu: Vec<f64> = (0..nodes).map(|i| steady.iter().map(|s| s.1[i]).sum::<f64>() / n).collect();
    figures.ops_max_over_mean = max_over_mean(&ops);
    figures.cpu_max_over_mean = max_over_mean(&cpu);
    figures.max_node_ops = ops.iter().copied().fold(0.0, f64::max);
    figures.max_node_load = figures.max_node_ops / capacity; // 0: no capacity figure
    let load = running.load.take().context("load")?;
    figures.p99_ms = load.take_histogram().quantile(0.99).as_secs_f64() * 1e3;
    let report = load.stop().await;
    figures.client_ops = report.ops;
    figures.errors = report.errors;
    figures.stale_reads = report.stale_reads;
    let verified =
        lb_launcher::valkey_load::verify(running.cluster.addrs(), running.cluster.connect_options(), &report.written)
            .await
            .context("reading every write back")?;
    figures.intact = (verified.checked - verified.wrong_count, report.written.len());
    let after = owners(&running).await?;
    figures.slots_moved = before.iter().filter(|(s, o)| after.get(s) != Some(o)).count();
    let ops_server = lb_common::clients::OpsClient::new(
        format!("http://{}", running.ops_server.addr()),
        &lb_common::config::shared::HttpClientConfig::default(),
    )
    .with_bearer_token(&running.tokens.viewer.token);
    let done =
        ops_server.actions(Some(lb_common::protocol::ActionState::Succeeded)).await.context("ops server actions")?;
    figures.migrations = done.len();
    if strategy == "lb" {
        // What lb did and why, in order, seconds from the onset.
        let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis() as i64;
        let onset_ms = now_ms - onset.elapsed().as_millis() as i64;
        let mut all = ops_server.actions(None).await.context("ops server actions")?;
        all.sort_by_key(|a| a.created_at_ms);
        for a in &all {
            println!(
                "lb: action at {:+.1}s {:?} {:?}: {}",
                (a.created_at_ms - onset_ms) as f64 / 1e3,
                a.state,
                a.request.spec,
                a.request.reason
            );
        }
    }
    figures.relief_secs = relief;
    running.stop(Duration::from_secs(20)).await;
    Ok(figures)
}

/// Flags (see the module doc).
#[derive(Debug, clap::Parser)]
struct Args {
    /// How long each run goes on after the onset, in seconds (more than the steady window).
    #[arg(long, default_value_t = 60)]
    secs_after_onset: u64,
    /// `hot-slots`: 70 % of the load on 3 slots of node 0; `too-hot`: one slot too hot to share
    /// a node; `cpu`: 4 nodes, no capacity figure, expensive reads on 4 hot slots of node 0.
    #[arg(long, value_enum, default_value_t = Workload::HotSlots)]
    workload: Workload,
    /// Run only these strategies (repeatable): `none`, `redis-cli`, `redis-cli-weighted`, `lb`.
    #[arg(long)]
    strategy: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Workload {
    HotSlots,
    TooHot,
    Cpu,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    lb_common::telemetry::init_tracing(&lb_common::config::shared::LogConfig {
        filter: "warn".to_owned(),
        ..Default::default()
    });
    lb_common::telemetry::metrics_handle();
    let args = Args::parse();
    let after_onset = args.secs_after_onset;
    anyhow::ensure!(after_onset > STEADY_SECS, "--secs-after-onset must exceed the {STEADY_SECS} s steady window");
    let strategies: &[&str] = if args.workload == Workload::Cpu {
        &["none", "redis-cli", "redis-cli-weighted", "lb"]
    } else {
        &["none", "redis-cli", "lb"]
    };
    let mut rows = Vec::new();
    for &strategy in strategies.iter().filter(|s| args.strategy.is_empty() || args.strategy.iter().any(|a| a == *s)) {
        let f = run(strategy, Duration::from_secs(after_onset), args.workload).await?;
        rows.push((strategy, f));
    }
    println!(
        "\n| strategy | node ops max/mean | node CPU max/mean | busiest node ops/s (of capacity) | client p99 (ms) | slots moved (net) | lb migrations | onset → relief | kept after relief | client ops | errors | stale reads | writes intact |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (s, f) in &rows {
        println!(
            "| {s} | {:.2} | {:.2} | {:.0} ({}) | {:.2} | {} | {} | {} | {} | {} | {} | {} | {} / {} |",
            f.ops_max_over_mean,
            f.cpu_max_over_mean,
            f.max_node_ops,
            if f.max_node_load > 0.0 { format!("{:.2}", f.max_node_load) } else { "none set".to_owned() },
            f.p99_ms,
            f.slots_moved,
            f.migrations,
            f.relief_secs.map_or("never".to_owned(), |s| format!("{s:.0} s")),
            if f.relief_secs.is_some() { format!("{} / {} s", f.kept.0, f.kept.1) } else { "-".to_owned() },
            f.client_ops,
            f.errors,
            f.stale_reads,
            f.intact.0,
            f.intact.1
        );
    }
    for (s, f) in rows.iter().filter(|(s, _)| s.starts_with("redis-cli")) {
        println!("\n{s}: redis-cli --cluster rebalance said: {}", f.note);
    }
    Ok(())
}
