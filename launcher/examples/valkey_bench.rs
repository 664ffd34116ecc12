//! Hot slots on a real Valkey cluster: no balancing vs `redis-cli --cluster rebalance` vs lb,
//! in one go, on the same workload and cluster size.
//!
//! `cargo run -p lb-launcher --example valkey_bench [-- --secs-after-onset 60] [--workload too-hot]`
//!
//! Each run starts a fresh 3-node cluster with lb beside it ([`up_valkey`] with the launcher's
//! workload: 6,000 ops/s, 70 % on 3 slots of node 0 from 10 s; with `--workload too-hot`, 50 %
//! on one slot of node 0 and nodes of 4,000 ops/s, so that slot alone (3,000) would overload
//! any node it shares). lb's agents, ops server and
//! master run in all three so they cost the same CPU everywhere; only the lb run has its
//! policies in `auto` (the others `off`). The `redis-cli` run calls
//! `redis-cli --cluster rebalance` once, 5 s after onset (the stock tool, balancing slot
//! counts). Figures come from outside lb: node commands/s and CPU from `INFO` every second,
//! client latency from the load generator's histogram, slots moved from `CLUSTER NODES`
//! before and after. Relief: every node under worker overload's high watermark (0.85 of the
//! configured node capacity) for 3 s in a row; "steady" figures are over the last 20 s.

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
    client_ops: u64,
    errors: u64,
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

async fn run(strategy: &str, after_onset: Duration, too_hot: bool) -> anyhow::Result<Figures> {
    let dir = tempfile::tempdir().context("temp dir")?;
    let mut options = ValkeyUpOptions::launcher(3, dir.path().join("data"));
    if too_hot {
        options.node_ops_per_sec = 4_000.0;
        let load = options.load.as_mut().context("load")?;
        load.hot_slots = hot_slots_on(3, 0, 1);
        load.hot_share = 0.5;
    }
    options.balance = strategy == "lb";
    let capacity = options.node_ops_per_sec;
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
        if strategy == "redis-cli" && !rebalanced && now >= onset + REBALANCE_AFTER_ONSET {
            rebalanced = true;
            let seed = running.cluster.addr(0).to_string();
            let out = tokio::task::spawn_blocking(move || {
                std::process::Command::new("redis-cli").args(["--cluster", "rebalance", &seed]).output()
            })
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
            good = if max / capacity < HIGH_WATERMARK { good + 1 } else { 0 };
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
            "{strategy}: t={:+.0}s node ops/s {:.0?} cpu {:.2?} max/mean {:.2}",
            (now.saturating_duration_since(onset).as_secs_f64() - onset.saturating_duration_since(now).as_secs_f64()),
            ops,
            cpu,
            max_over_mean(&ops)
        );
    }
    let n = steady.len().max(1) as f64;
    let nodes = running.cluster.len();
    let ops: Vec<f64> = (0..nodes).map(|i| steady.iter().map(|s| s.0[i]).sum::<f64>() / n).collect();
    let cpu: Vec<f64> = (0..nodes).map(|i| steady.iter().map(|s| s.1[i]).sum::<f64>() / n).collect();
    figures.ops_max_over_mean = max_over_mean(&ops);
    figures.cpu_max_over_mean = max_over_mean(&cpu);
    figures.max_node_ops = ops.iter().copied().fold(0.0, f64::max);
    figures.max_node_load = figures.max_node_ops / capacity;
    let load = running.load.take().context("load")?;
    figures.p99_ms = load.take_histogram().quantile(0.99).as_secs_f64() * 1e3;
    let report = load.stop().await;
    figures.client_ops = report.ops;
    figures.errors = report.errors;
    let after = owners(&running).await?;
    figures.slots_moved = before.iter().filter(|(s, o)| after.get(s) != Some(o)).count();
    let ops_server = lb_common::clients::OpsClient::new(
        format!("http://{}", running.ops_server.addr()),
        &lb_common::config::shared::HttpClientConfig::default(),
    );
    let done =
        ops_server.actions(Some(lb_common::protocol::ActionState::Succeeded)).await.context("ops server actions")?;
    figures.migrations = done.len();
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
    /// a node.
    #[arg(long, value_enum, default_value_t = Workload::HotSlots)]
    workload: Workload,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Workload {
    HotSlots,
    TooHot,
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
    let too_hot = args.workload == Workload::TooHot;
    let mut rows = Vec::new();
    for strategy in ["none", "redis-cli", "lb"] {
        let f = run(strategy, Duration::from_secs(after_onset), too_hot).await?;
        rows.push((strategy, f));
    }
    println!(
        "\n| strategy | node ops max/mean | node CPU max/mean | busiest node ops/s (of capacity) | client p99 (ms) | slots moved (net) | lb migrations | onset → relief | client ops | errors |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (s, f) in &rows {
        println!(
            "| {s} | {:.2} | {:.2} | {:.0} ({:.2}) | {:.2} | {} | {} | {} | {} | {} |",
            f.ops_max_over_mean,
            f.cpu_max_over_mean,
            f.max_node_ops,
            f.max_node_load,
            f.p99_ms,
            f.slots_moved,
            f.migrations,
            f.relief_secs.map_or("never".to_owned(), |s| format!("{s:.0} s")),
            f.client_ops,
            f.errors
        );
    }
    if let Some((_, f)) = rows.iter().find(|(s, _)| *s == "redis-cli") {
        println!("\nredis-cli --cluster rebalance said: {}", f.note);
    }
    Ok(())
}
