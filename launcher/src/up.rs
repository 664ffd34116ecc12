//! `lb up`: the whole system in one process, each component on its own loopback port
//! and talking real HTTP — the simulated cluster, one agent per worker (each with its own SQLite
//! file), the ops server and the master.
//!
//! Start order follows who needs whose address: the testbed's listener is bound first (the ops
//! server needs the storage URL), then the ops server, the agents (they register with it), the
//! testbed (it pushes reports to the agents) and the master (it collects through the ops server).
//! Stop order is the reverse.
//!
//! Auth is on: every component gets the data directory's tokens (see [`crate::tokens`]), and
//! the banner says where they are.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use lb_common::config::watch::{ConfigHandle, WatchOptions};
use lb_common::ids::WorkerId;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use lb_testbed::Engine;
use lb_testbed::realtime::{self, RealtimeOptions, RunningTestbed};
use lb_testbed::scenario::Scenario;

use crate::tokens::{DemoTokens, TOKENS_FILE, write_lbctl_config};

/// Everything `up` started, for the caller to print and stop.
#[derive(Debug)]
pub struct Running {
    pub testbed: RunningTestbed,
    pub ops_server: lb_ops_server::RunningOpsServer,
    pub agents: Vec<(WorkerId, lb_agent::RunningAgent)>,
    pub master: lb_master::RunningMaster,
    /// The master's live config, read from [`Running::master_config_path`].
    pub master_config: ConfigHandle<lb_master::config::MasterConfig>,
    pub master_config_path: PathBuf,
    /// A `prometheus.yml` that scrapes this system, with lb's alert rules beside it.
    pub prometheus_config_path: PathBuf,
    /// The tokens every component was started with (see [`crate::tokens`]).
    pub tokens: DemoTokens,
    /// `<data dir>/tokens.toml` and `<data dir>/lbctl.toml`.
    pub tokens_path: PathBuf,
    pub lbctl_config_path: PathBuf,
    watch_cancel: CancellationToken,
}

/// Options of `up`.
#[derive(Debug, Clone)]
pub struct UpOptions {
    pub scenario: PathBuf,
    /// Each component's SQLite file goes here.
    pub data_dir: PathBuf,
    /// `127.0.0.1:0` picks free ports; tests and the launcher both use it.
    pub host: String,
    /// Report and collection cadence.
    pub interval: Duration,
}

impl UpOptions {
    /// The tests' and examples' set-up: `scenario` (TOML text) written to `dir`, the data
    /// directory `dir/data`, free loopback ports, reports and collection every 250 ms.
    pub fn loopback(dir: &Path, scenario: &str) -> anyhow::Result<UpOptions> {
        let path = dir.join("scenario.toml");
        std::fs::write(&path, scenario).with_context(|| format!("cannot write {}", path.display()))?;
        Ok(UpOptions {
            scenario: path,
            data_dir: dir.join("data"),
            host: "127.0.0.1".to_owned(),
            interval: Duration::from_millis(250),
        })
    }
}

pub(crate) async fn bind(host: &str) -> anyhow::Result<TcpListener> {
    TcpListener::bind(format!("{host}:0")).await.with_context(|| format!("cannot bind {host}:0"))
}

pub(crate) fn parse<C: lb_common::config::ServiceConfig>(text: &str, what: &str) -> anyhow::Result<C> {
    lb_common::config::parse(text, Path::new(what)).with_context(|| format!("generated {what} is invalid"))
}

/// Extra TOML for the generated configs (tests switch policies to dry-run, add tokens, shorten
/// evaluation windows). The master's is laid over the scenario's `[master]` key by key; its
/// other keys must not repeat generated ones.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub master: String,
    /// Tokens to run with instead of the data directory's own (tests use known ones).
    pub tokens: Option<DemoTokens>,
}

pub async fn up(options: &UpOptions) -> anyhow::Result<Running> {
    up_with(options, &Overrides::default()).await
}

pub async fn up_with(options: &UpOptions, overrides: &Overrides) -> anyhow::Result<Running> {
    let scenario = Scenario::load(&options.scenario)?;
    std::fs::create_dir_all(&options.data_dir)
        .with_context(|| format!("cannot create the data directory {}", options.data_dir.display()))?;
    let engine = Engine::new(&scenario);
    let workers: Vec<WorkerId> = engine.topology().workers.into_iter().map(|w| w.id).collect();
    let interval_ms = options.interval.as_millis() as u64;
    let data = |name: &str| options.data_dir.join(name).display().to_string();
    let tokens = match &overrides.tokens {
        Some(tokens) => tokens.clone(),
        None => DemoTokens::load_or_create(&options.data_dir)?,
    };

    let testbed_listener = bind(&options.host).await?;
    let storage_url = format!("http://{}", testbed_listener.local_addr()?);

    let ops_config: lb_ops_server::config::OpsServerConfig = parse(
        &format!(
            "[http]\nlisten = \"{}:0\"\n[audit]\npath = \"{}\"\n[storage]\nurl = \"{storage_url}\"\n\
             [registry]\nheartbeat_interval_ms = {}\ndown_after_ms = {}\n\
             [executor.timeouts]\nmove_ms = 600000\n[limits]\nrequests_per_sec = 100000\n{}",
            options.host,
            data("ops-server-audit.sqlite"),
            interval_ms.max(100),
            (interval_ms * 10).max(1000),
            tokens.ops_server_toml(),
        ),
        "ops-server.toml",
    )?;
    let (_ops_tx, ops_rx) = watch::channel(Arc::new(ops_config));
    let ops_server = lb_ops_server::start(ops_rx, bind(&options.host).await?, None).await?;
    let ops_url = format!("http://{}", ops_server.addr());

    let mut agents = Vec::new();
    let mut agent_urls = BTreeMap::new();
    for worker in &workers {
        let config: lb_agent::config::AgentConfig = parse(
            &format!(
                "worker_id = \"{worker}\"\n[http]\nlisten = \"{}:0\"\n[store]\npath = \"{}\"\n\
                 [host]\nenabled = false\n[ops_server]\nurl = \"{ops_url}\"\ntoken = \"{}\"\n",
                options.host,
                data(&format!("agent-{worker}.sqlite")),
                tokens.agent.token,
            ),
            "agent.toml",
        )?;
        let (_tx, rx) = watch::channel(Arc::new(config));
        let agent = lb_agent::start(rx, bind(&options.host).await?, None).await?;
        agent_urls.insert(worker.clone(), format!("http://{}", agent.addr()));
        agents.push((worker.clone(), agent));
    }

    let mut rt = RealtimeOptions::new(testbed_listener.local_addr()?);
    rt.agents = agent_urls;
    rt.report_interval = options.interval;
    let testbed = realtime::start(engine, testbed_listener, rt).await?;

    // The master's config is a real file in the data directory, watched like the binary's own:
    // edit `<data dir>/master.toml` (policies, thresholds, modes) and the next tick applies it.
    // The scenario's own policies (its `[master]`, checked as `lb sim` checks them) over the
    // master's defaults, with the overrides laid over them: one table, so a section both set is
    // written once.
    crate::sim::policies::online_config(&scenario, lb_master::online::OnlineConfig::default())
        .with_context(|| format!("scenario {}: [master]", options.scenario.display()))?;
    let mut extra = scenario.master.clone();
    let overridden: toml::Table = toml::from_str(&overrides.master).context("the master overrides are not TOML")?;
    crate::sim::policies::overlay(&mut extra, &overridden);
    let extra = toml::to_string(&extra).context("cannot write the master's policies as TOML")?;
    let policies =
        if scenario.master.is_empty() { String::new() } else { "# From the scenario's [master].\n".to_owned() };
    let master_text = format!(
        "# Generated by lb up. Policies, thresholds, caps and modes reload live when this\n\
         # file changes; [http] and [store] need a restart.\n\
         [http]\nlisten = \"{}:0\"\n[ops_server]\nurl = \"{ops_url}\"\ntoken = \"{}\"\n[store]\npath = \"{}\"\n\
         [collector]\ninterval_ms = {}\nstale_after_ms = {}\ntopology_interval_ms = {}\n{policies}{extra}\n{}",
        options.host,
        tokens.service.token,
        data("master-results.sqlite"),
        interval_ms.max(100),
        (interval_ms * 5).max(1000),
        (interval_ms * 2).max(100),
        tokens.master_toml(),
    );
    let WatchedMaster { master, config: master_config, config_path: master_config_path, watch_cancel } =
        start_watched_master(&master_text, &options.data_dir, &options.host).await?;
    let prometheus_config_path = write_prometheus_config(&options.data_dir, master.addr())?;
    let lbctl_config_path = write_lbctl_config(&options.data_dir, "lb up", master.addr(), &ops_url, &tokens)?;
    Ok(Running {
        testbed,
        ops_server,
        agents,
        master,
        master_config,
        master_config_path,
        prometheus_config_path,
        tokens,
        tokens_path: options.data_dir.join(TOKENS_FILE),
        lbctl_config_path,
        watch_cancel,
    })
}

/// Writes `<data dir>/prometheus.yml` scraping `target` (every component of this process
/// shares one registry, see [`crate::dashboards::scrape_config`]) and the alert rules it loads,
/// `<data dir>/lb-alerts.yml`; returns the config's path.
pub fn write_prometheus_config(data_dir: &Path, target: std::net::SocketAddr) -> anyhow::Result<PathBuf> {
    let rules = data_dir.join("lb-alerts.yml");
    std::fs::write(&rules, crate::dashboards::ALERT_RULES)
        .with_context(|| format!("cannot write {}", rules.display()))?;
    let path = data_dir.join("prometheus.yml");
    let rules = std::path::absolute(&rules).unwrap_or(rules);
    std::fs::write(&path, crate::dashboards::scrape_config(&target.to_string(), &rules.display().to_string()))
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// A master started from a config file it watches, and what stops the watch.
pub(crate) struct WatchedMaster {
    pub master: lb_master::RunningMaster,
    pub config: ConfigHandle<lb_master::config::MasterConfig>,
    pub config_path: PathBuf,
    pub watch_cancel: CancellationToken,
}

/// Validates `text`, writes it to `<data_dir>/master.toml`, watches that file like the binary
/// does (edits apply on the next tick), and starts the master on a free port of `host`.
pub(crate) async fn start_watched_master(text: &str, data_dir: &Path, host: &str) -> anyhow::Result<WatchedMaster> {
    start_watched_master_on(text, data_dir, bind(host).await?).await
}

/// [`start_watched_master`] on a listener already bound (its port is in `text`).
pub(crate) async fn start_watched_master_on(
    text: &str,
    data_dir: &Path,
    listener: TcpListener,
) -> anyhow::Result<WatchedMaster> {
    let _: lb_master::config::MasterConfig = parse(text, "master.toml")?;
    let config_path = data_dir.join("master.toml");
    std::fs::write(&config_path, text).with_context(|| format!("cannot write {}", config_path.display()))?;
    let watch_cancel = CancellationToken::new();
    let options = WatchOptions {
        debounce: MASTER_RELOAD_DEBOUNCE,
        poll_interval: MASTER_RELOAD_POLL,
        sighup: false,
        watch_directory: true,
    };
    let (config, _watcher) =
        lb_common::config::watch::spawn::<lb_master::config::MasterConfig>(&config_path, options, watch_cancel.clone())
            .with_context(|| format!("cannot watch {}", config_path.display()))?;
    let master = lb_master::start(config.subscribe(), listener, Some(config.shared_status())).await?;
    Ok(WatchedMaster { master, config, config_path, watch_cancel })
}

/// 200 ms: an editor's save settles well within it, and a test sees the reload within a tick.
const MASTER_RELOAD_DEBOUNCE: Duration = Duration::from_millis(200);
/// 2 s: the backstop if a file event is missed.
const MASTER_RELOAD_POLL: Duration = Duration::from_secs(2);

impl Running {
    /// Stops everything, newest first, each within `deadline`. Returns whether all stopped clean.
    pub async fn stop(self, deadline: Duration) -> bool {
        let mut clean = self.master.stop(deadline).await;
        self.watch_cancel.cancel();
        clean &= self.testbed.stop(deadline).await;
        for (_, agent) in self.agents {
            clean &= agent.stop(deadline).await;
        }
        clean & self.ops_server.stop(deadline).await
    }

    /// The URLs to print.
    pub fn urls(&self) -> Vec<(String, String)> {
        let mut urls = vec![
            ("console".to_owned(), format!("http://{}/console/", self.master.addr())),
            ("master API (/api/v1)".to_owned(), format!("http://{}", self.master.addr())),
            ("master config (edited live)".to_owned(), self.master_config_path.display().to_string()),
            ("prometheus config".to_owned(), self.prometheus_config_path.display().to_string()),
            ("tokens (operator, viewer, ...)".to_owned(), self.tokens_path.display().to_string()),
            ("lbctl config (operator token)".to_owned(), self.lbctl_config_path.display().to_string()),
            ("ops server".to_owned(), format!("http://{}", self.ops_server.addr())),
            ("storage admin (testbed)".to_owned(), format!("http://{}", self.testbed.addr())),
        ];
        for (worker, agent) in &self.agents {
            urls.push((format!("agent {worker}"), format!("http://{}", agent.addr())));
        }
        urls
    }
}
