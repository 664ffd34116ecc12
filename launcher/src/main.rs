//! `lb up [--scenario FILE]`: the whole system in one process — the simulated cluster, one
//! agent per worker, the ops server and the master — each on its own loopback port
//! (`--backend valkey`: on a local Valkey cluster). `lb serve --scenario FILE`: the simulated
//! storage system alone, in real time behind the storage admin API, pushing reports to agents.
//! `lb master --config FILE`: one master, as `lb-master` runs it (a second one beside `lb up`'s
//! for high availability on etcd). `lb sim --scenario FILE`: the same scenario in virtual time, balanced by the master's online
//! core and by baselines side by side, written as a markdown table and SVG charts.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

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
        /// A scenario file; without it the built-in one (`configs/scenarios/first-run.toml`,
        /// compiled in: a hot range from 30 s on) is written to the data directory and run.
        #[arg(long)]
        scenario: Option<PathBuf>,
        /// Where every component keeps its SQLite file.
        #[arg(long, default_value = "data/up")]
        data_dir: PathBuf,
        /// Report and collection interval.
        #[arg(long, default_value_t = 1_000)]
        interval_ms: u64,
        /// `sim`: the simulated cluster of `--scenario`; `valkey`: a local Valkey cluster of
        /// `--nodes` real valkey-server processes with a hot-slot workload.
        #[arg(long, default_value = "sim", value_parser = ["sim", "valkey"])]
        backend: String,
        /// Valkey primaries (`--backend valkey`).
        #[arg(long, default_value_t = 3)]
        nodes: usize,
        /// `HOST:PORT` of any node of a Valkey cluster that already runs (`--backend valkey`):
        /// lb attaches to it instead of starting one: an agent per primary, the ops server, the
        /// master, their config files in the data directory; no load is driven.
        #[arg(long, requires = "backend")]
        attach: Option<String>,
        /// ACL user of the attached cluster (`--attach`).
        #[arg(long, requires = "attach")]
        username: Option<String>,
        /// Password of the attached cluster (`--attach`); better from the environment.
        #[arg(long, env = "LB_VALKEY_PASSWORD", hide_env_values = true, requires = "attach")]
        password: Option<String>,
        /// With `--attach`: worker overload and imbalance only propose (`dry_run`): an operator
        /// approves each move (console, lbctl or the API).
        #[arg(long, requires = "attach")]
        dry_run: bool,
        /// Component logs on this terminal (stderr) instead of `<data dir>/lb.log`.
        #[arg(long)]
        verbose: bool,
    },
    /// Runs one master from its config file, as `lb-master --config` does: a second master
    /// beside `lb up`'s (masters elected through etcd, `[leadership] backend = "etcd"`) or a
    /// master of its own. SIGINT or SIGTERM stops it; SIGHUP reloads the config.
    Master {
        #[arg(long)]
        config: PathBuf,
    },
    /// Runs one agent from its config file, as `lb-agent --config` does (e.g. one that
    /// `up --attach` wrote). SIGINT or SIGTERM stops it; SIGHUP reloads the config.
    Agent {
        #[arg(long)]
        config: PathBuf,
    },
    /// Runs the ops server from its config file, as `lb-ops-server --config` does.
    OpsServer {
        #[arg(long)]
        config: PathBuf,
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
    /// Runs a scenario in virtual time under each strategy (the master's planner, no balancer,
    /// a greedy threshold mover) and writes the comparison: a markdown table and SVG charts.
    Sim {
        #[arg(long)]
        scenario: PathBuf,
        /// Partitions in all, scaling the scenario's tables (load per worker kept).
        #[arg(long)]
        partitions: Option<u32>,
        /// Workers, scaling the scenario's cluster (load per worker kept).
        #[arg(long)]
        workers: Option<u32>,
        /// Simulated time: seconds, or with a unit (`90s`, `30m`, `1h`); default the scenario's.
        #[arg(long, value_parser = parse_duration_secs)]
        duration: Option<u64>,
        /// Where the table (`report.md`), `figures.json`, `proposals.jsonl` (every proposal with its
        /// reason and prediction) and the charts go; default `target/sim/<scenario>`.
        #[arg(long)]
        out: Option<PathBuf>,
        #[arg(long, value_delimiter = ',', default_value = "lb,none,greedy")]
        strategies: Vec<String>,
        /// Strategies run in parallel, one per thread; default the machine's cores.
        #[arg(long)]
        threads: Option<usize>,
    },
}

/// `3600`, `3600s`, `60m` or `1h` as seconds.
fn parse_duration_secs(s: &str) -> Result<u64, String> {
    let (number, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => s.split_at(i),
        None => (s, "s"),
    };
    let n: u64 = number.parse().map_err(|_| format!("{s:?} is not a duration (3600, 3600s, 60m, 1h)"))?;
    let per = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (s, m or h)")),
    };
    n.checked_mul(per).filter(|&d| d > 0).ok_or_else(|| format!("{s:?} must be between 1 s and u64::MAX s"))
}

fn parse_agent(s: &str) -> Result<(WorkerId, String), String> {
    let (worker, url) = s.split_once('=').ok_or_else(|| format!("{s:?} is not WORKER=URL"))?;
    Ok((WorkerId::new(worker).map_err(|e| e.to_string())?, url.to_owned()))
}

/// Where `lb up` writes the components' logs, in its data directory (unless `--verbose`).
const LOG_FILE: &str = "lb.log";

/// The scenario `lb up` runs without `--scenario`, compiled in so the command works from any
/// directory.
const BUILT_IN_SCENARIO: &str = include_str!("../../configs/scenarios/first-run.toml");

/// Writes the built-in scenario to `<data dir>/first-run.toml` (to read, edit and pass back with
/// `--scenario`) and returns its path.
fn write_built_in_scenario(data_dir: &Path) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("cannot create the data directory {}", data_dir.display()))?;
    let path = data_dir.join("first-run.toml");
    std::fs::write(&path, BUILT_IN_SCENARIO).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    match &args.command {
        // `up` keeps the terminal for its banner and event lines; component logs go to a file.
        Command::Up { data_dir, verbose: false, backend, .. } if backend == "sim" => {
            std::fs::create_dir_all(data_dir)
                .with_context(|| format!("cannot create the data directory {}", data_dir.display()))?;
            let log = data_dir.join(LOG_FILE);
            lb_common::telemetry::init_tracing_to_file(&LogConfig::default(), &log)
                .with_context(|| format!("cannot open the log file {}", log.display()))?;
        }
        // The simulation's output is its table; only warnings go to the log there.
        Command::Sim { .. } => {
            lb_common::telemetry::init_tracing(&LogConfig { filter: "warn".to_owned(), ..LogConfig::default() });
        }
        // The services set up their logging from their config's `[log]`.
        Command::Master { .. } | Command::Agent { .. } | Command::OpsServer { .. } => {}
        _ => lb_common::telemetry::init_tracing(&LogConfig::default()),
    }
    match args.command {
        Command::Up { backend, data_dir, interval_ms, attach: Some(seed), username, password, dry_run, .. }
            if backend == "valkey" =>
        {
            let mut options = lb_launcher::valkey_attach::AttachOptions::new(seed, data_dir);
            options.username = username;
            options.password = password;
            options.interval = Duration::from_millis(interval_ms.max(100));
            options.auto = !dry_run;
            lb_launcher::valkey_attach::launch(&options).await
        }
        Command::Up { attach: Some(_), .. } => anyhow::bail!("--attach needs --backend valkey"),
        Command::Up { backend, nodes, data_dir, interval_ms, .. } if backend == "valkey" => {
            lb_launcher::valkey_up::launch(nodes, data_dir, Duration::from_millis(interval_ms.max(100))).await
        }
        Command::Up { scenario, data_dir, interval_ms, verbose, .. } => {
            let scenario = match scenario {
                Some(path) => path,
                None => write_built_in_scenario(&data_dir)?,
            };
            let description = Scenario::load(&scenario).map(|s| s.description).unwrap_or_default();
            let options = lb_launcher::up::UpOptions {
                scenario,
                data_dir,
                host: "127.0.0.1".to_owned(),
                interval: Duration::from_millis(interval_ms.max(100)),
            };
            let started_ms = chrono::Utc::now().timestamp_millis();
            let running = lb_launcher::up::up(&options).await?;
            println!("lb is up (scenario {}); Ctrl-C stops everything.", options.scenario.display());
            if !description.is_empty() {
                println!("  what happens: {description}");
            }
            for (what, url) in running.urls() {
                println!("  {what:<30} {url}");
            }
            if verbose {
                println!("  component logs                 on this terminal (stderr)");
            } else {
                println!("  component logs                 {}", options.data_dir.join(LOG_FILE).display());
            }
            println!("events (minutes:seconds since start):");
            let master = lb_common::clients::MasterClient::new(
                format!("http://{}", running.master.addr()),
                &lb_common::config::shared::HttpClientConfig::default(),
            );
            let stop_events = tokio_util::sync::CancellationToken::new();
            let events = tokio::spawn(lb_launcher::events::follow(master, started_ms, stop_events.clone()));
            let signal = lb_common::shutdown::wait_for_signal().await;
            tracing::info!(signal, "shutting down");
            println!("stopping ({signal})");
            stop_events.cancel();
            let _ = events.await;
            if !running.stop(Duration::from_secs(10)).await {
                anyhow::bail!("shutdown did not finish within 10 s per component");
            }
            println!("stopped");
            Ok(())
        }
        Command::Master { config } => {
            lb_common::service::run::<lb_master::config::MasterConfig, _, _, _>(
                "lb-master",
                &config,
                |config, listener, status| lb_master::start(config, listener, Some(status)),
            )
            .await
        }
        Command::Agent { config } => {
            lb_common::service::run::<lb_agent::config::AgentConfig, _, _, _>(
                "lb-agent",
                &config,
                |config, listener, status| lb_agent::start(config, listener, Some(status)),
            )
            .await
        }
        Command::OpsServer { config } => {
            lb_common::service::run::<lb_ops_server::config::OpsServerConfig, _, _, _>(
                "lb-ops-server",
                &config,
                |config, listener, status| lb_ops_server::start(config, listener, Some(status)),
            )
            .await
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
            println!("lb testbed {} listening on http://{}", scenario.name, testbed.addr());
            let signal = lb_common::shutdown::wait_for_signal().await;
            tracing::info!(signal, "shutting down");
            if !testbed.stop(Duration::from_secs(10)).await {
                anyhow::bail!("shutdown did not finish within 10 s");
            }
            Ok(())
        }
        Command::Sim { scenario, partitions, workers, duration, out, strategies, threads } => {
            let loaded = Scenario::load(&scenario)?;
            let scaled = lb_launcher::sim::scale::scale(&loaded, partitions, workers)
                .with_context(|| format!("cannot scale {} to the requested size", scenario.display()))?;
            let out = out.unwrap_or_else(|| PathBuf::from("target/sim").join(&loaded.name));
            let threads = threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
            run_sim(&scaled, &strategies, duration.unwrap_or(loaded.duration_secs), threads, &out)
        }
    }
}

fn run_sim(
    scenario: &Scenario,
    strategies: &[String],
    duration_secs: u64,
    threads: usize,
    out: &Path,
) -> anyhow::Result<()> {
    // With `lb+offline` the runs also record partitions over time, merges, pre-splits and
    // rejections at each peak (the offline report).
    let with_offline = |s: &String| lb_launcher::sim::offline::NAMES.contains(&s.as_str());
    let (comparison, offline) = if strategies.iter().any(with_offline) {
        let r = lb_launcher::sim::offline::report(scenario, strategies, duration_secs, threads)?;
        let table = r.markdown();
        (r.comparison, table)
    } else {
        (lb_launcher::sim::report::compare(scenario, strategies, duration_secs, threads)?, String::new())
    };
    let table = comparison.markdown() + &offline;
    print!("{table}\n{}", comparison.timings());
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let report = out.join("report.md");
    std::fs::write(&report, format!("{table}\n```\n{}```\n", comparison.timings()))
        .with_context(|| format!("cannot write {}", report.display()))?;
    let json = out.join("figures.json");
    std::fs::write(&json, serde_json::to_string_pretty(&comparison.figures_json())?)
        .with_context(|| format!("cannot write {}", json.display()))?;
    let proposals = out.join("proposals.jsonl");
    std::fs::write(&proposals, comparison.proposals_jsonl()?)
        .with_context(|| format!("cannot write {}", proposals.display()))?;
    for (name, svg) in comparison.charts() {
        let path = out.join(name);
        std::fs::write(&path, svg).with_context(|| format!("cannot write {}", path.display()))?;
    }
    println!("wrote {} and its charts", report.display());
    Ok(())
}
