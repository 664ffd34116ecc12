//! `lb-testbed up [--scenario FILE]`: the whole system in one process — the simulated cluster,
//! one agent per worker, the ops server and the master — each on its own loopback port.
//! `lb-testbed serve --scenario FILE`: the simulated storage system alone, in real time behind
//! the storage admin API, pushing reports to agents. `lb-testbed sim --scenario FILE`: the same
//! scenario in virtual time, printing per-minute cluster load.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Parser, Subcommand};
use lb_common::config::shared::LogConfig;
use lb_common::ids::WorkerId;
use lb_testbed::Engine;
use lb_testbed::realtime::{self, RealtimeOptions};
use lb_testbed::scenario::Scenario;

#[derive(Debug, Parser)]
#[command(version, about = "lb testbed: a simulated partitioned storage system")]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Starts the simulated cluster, its agents, the ops server and the master, all on loopback.
    Up {
        #[arg(long, default_value = "configs/scenarios/hot-range-surge.toml")]
        scenario: PathBuf,
        /// Where every component keeps its SQLite file.
        #[arg(long, default_value = "data/up")]
        data_dir: PathBuf,
        /// Report and collection interval.
        #[arg(long, default_value_t = 1_000)]
        interval_ms: u64,
    },
    /// Runs a scenario in real time with the admin API and report pushing.
    Serve {
        #[arg(long)]
        scenario: PathBuf,
        #[arg(long, default_value = "127.0.0.1:7300")]
        listen: SocketAddr,
        /// `WORKER=URL` of the agent beside a worker; repeat per worker.
        #[arg(long = "agent", value_parser = parse_agent)]
        agents: Vec<(WorkerId, String)>,
        /// Agents on loopback: worker `w-NNNN` reports to `http://127.0.0.1:{BASE + NNNN}`
        /// (workers named explicitly with `--agent` win).
        #[arg(long)]
        agent_port_base: Option<u16>,
        #[arg(long, default_value_t = realtime::DEFAULT_REPORT_INTERVAL_MS)]
        report_interval_ms: u64,
    },
    /// Runs a scenario in virtual time and prints per-minute load.
    Sim {
        #[arg(long)]
        scenario: PathBuf,
        /// Simulated seconds per step.
        #[arg(long, default_value_t = 1.0)]
        step_secs: f64,
        /// Overrides the scenario's duration.
        #[arg(long)]
        duration_secs: Option<u64>,
    },
}

fn parse_agent(s: &str) -> Result<(WorkerId, String), String> {
    let (worker, url) = s.split_once('=').ok_or_else(|| format!("{s:?} is not WORKER=URL"))?;
    Ok((WorkerId::new(worker).map_err(|e| e.to_string())?, url.to_owned()))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // The simulation's output is its table; only warnings go to the log there.
    let filter = if matches!(args.command, Command::Sim { .. }) { "warn" } else { "info" };
    lb_common::telemetry::init_tracing(&LogConfig { filter: filter.to_owned(), ..LogConfig::default() });
    match args.command {
        Command::Up { scenario, data_dir, interval_ms } => {
            let options = lb_testbed::up::UpOptions {
                scenario,
                data_dir,
                host: "127.0.0.1".to_owned(),
                interval: Duration::from_millis(interval_ms.max(100)),
            };
            let running = lb_testbed::up::up(&options).await?;
            println!("lb is up (scenario {}); Ctrl-C stops everything.", options.scenario.display());
            for (what, url) in running.urls() {
                println!("  {what:<30} {url}");
            }
            let signal = lb_common::shutdown::wait_for_signal().await;
            tracing::info!(signal, "shutting down");
            if !running.stop(Duration::from_secs(10)).await {
                anyhow::bail!("shutdown did not finish within 10 s per component");
            }
            Ok(())
        }
        Command::Serve { scenario, listen, agents, agent_port_base, report_interval_ms } => {
            let scenario = Scenario::load(&scenario)?;
            let mut options = RealtimeOptions::new(listen);
            let mut by_worker = BTreeMap::new();
            if let Some(base) = agent_port_base {
                for i in 0..scenario.cluster.workers {
                    let port = u32::from(base) + i;
                    anyhow::ensure!(port <= u32::from(u16::MAX), "--agent-port-base {base} + {i} is past port 65535");
                    by_worker.insert(lb_testbed::scenario::worker_name(i), format!("http://127.0.0.1:{port}"));
                }
            }
            by_worker.extend(agents);
            options.agents = by_worker;
            options.report_interval = Duration::from_millis(report_interval_ms.max(1));
            let listener =
                tokio::net::TcpListener::bind(listen).await.with_context(|| format!("cannot listen on {listen}"))?;
            let testbed = realtime::start(Engine::new(&scenario), listener, options).await?;
            println!("lb-testbed {} listening on http://{}", scenario.name, testbed.addr());
            let signal = lb_common::shutdown::wait_for_signal().await;
            tracing::info!(signal, "shutting down");
            if !testbed.stop(Duration::from_secs(10)).await {
                anyhow::bail!("shutdown did not finish within 10 s");
            }
            Ok(())
        }
        Command::Sim { scenario, step_secs, duration_secs } => {
            let scenario = Scenario::load(&scenario)?;
            anyhow::ensure!(step_secs > 0.0 && step_secs.is_finite(), "--step-secs must be > 0");
            run_sim(&scenario, Duration::from_secs_f64(step_secs), duration_secs.unwrap_or(scenario.duration_secs));
            Ok(())
        }
    }
}

fn run_sim(scenario: &Scenario, step: Duration, duration_secs: u64) {
    let started = Instant::now();
    let mut engine = Engine::new(scenario);
    println!("minute  max_ratio  mean_ratio     cv  demand_ops/s  rejected_ops/s");
    let end = Duration::from_secs(duration_secs);
    let mut next_minute = Duration::from_secs(60);
    while engine.elapsed() < end {
        engine.step(step);
        if engine.elapsed() >= next_minute {
            let s = engine.summary();
            println!(
                "{:>6}  {:>9.3}  {:>10.3}  {:>5.3}  {:>12.0}  {:>14.0}",
                next_minute.as_secs() / 60,
                s.max_demand_ratio,
                s.mean_demand_ratio,
                s.cv,
                s.demand_ops_per_sec,
                s.rejected_ops_per_sec
            );
            next_minute += Duration::from_secs(60);
        }
    }
    println!("simulated {duration_secs} s in {:.2} s", started.elapsed().as_secs_f64());
}
