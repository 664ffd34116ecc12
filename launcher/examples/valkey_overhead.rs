//! What lb costs beside a real Valkey cluster: each lb process's CPU from `/proc`, and what the
//! agents send, on the benchmark's workloads.
//!
//! `cargo build --release -p lb-agent -p lb-ops-server -p lb-master --bins && cargo run --release
//! -p lb-launcher --example valkey_overhead [-- --nodes 4 --workload cpu --secs 60]`
//!
//! Unlike `lb up --backend valkey` (everything in one process), every lb component runs here as
//! its own process, from the release binaries next to this example's directory
//! (`target/release/lb-{agent,ops-server,master}`, or `--bin-dir`): a [`LocalCluster`] of
//! `--nodes` real `valkey-server` primaries, one `lb-agent` per node polling it every second,
//! `lb-ops-server` and `lb-master` as `up --backend valkey` configures them (policies in `auto`),
//! each with a config file in the data directory. The load generator runs in this process, so
//! its CPU is nobody's. After `--warmup` seconds (the hot slots' onset is at 10 s, and lb's
//! moves are done by then), for `--secs` seconds:
//! - **CPU**: `utime + stime` of each lb process (`/proc/<pid>/stat`, in the kernel's fixed
//!   100 Hz user ticks), and the Valkey nodes' own CPU from `INFO` (`used_cpu_user` +
//!   `used_cpu_sys` of the main thread's busy time, as the bench reads it);
//! - **what the agents send**: samples served per node per second (`lb_agent_samples_served_total`),
//!   owned slots left out as unchanged (`lb_agent_valkey_idle_slots_total`), and the bytes those
//!   samples take on the wire: each agent's served samples of the window read again from its
//!   `GET /v1/samples` between the master's collection cursors at the window's start and end,
//!   the response bodies' bytes counted: as JSON, and as sent to lb's clients (zstd, what the
//!   ops server pulls, byte for byte).
//!
//! Workloads (from `lb_launcher::valkey_up`): `cpu` is `ValkeyUpOptions::launcher` (8,000 ops/s,
//! half on one expensive hot slot per node, all of them on node 0 from 10 s, no capacity
//! figure); `hot-slots` is `ValkeyUpOptions::ops_capacity` (6,000 ops/s, 70 % on three slots of
//! node 0 from 10 s, nodes of 4,500 ops/s) — the Valkey benchmark's and e2e tests' workload.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser as _;
use lb_launcher::tokens::DemoTokens;
use lb_launcher::valkey_load::{LoadGenerator, NodeCounters};
use lb_launcher::valkey_up::{ValkeyUpOptions, master_sections, ops_server_cadence};
use lb_valkey::{LocalCluster, LocalClusterConfig};

/// The kernel's `/proc` tick (`USER_HZ`): fixed at 100 in the ABI whatever `CONFIG_HZ` is.
const USER_HZ: f64 = 100.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Workload {
    Cpu,
    HotSlots,
}

#[derive(Debug, clap::Parser)]
struct Args {
    #[arg(long, default_value_t = 4)]
    nodes: usize,
    #[arg(long, value_enum, default_value_t = Workload::Cpu)]
    workload: Workload,
    /// Seconds measured.
    #[arg(long, default_value_t = 60)]
    secs: u64,
    /// Seconds from the start of the load before measuring.
    #[arg(long, default_value_t = 30)]
    warmup: u64,
    /// Where lb-agent, lb-ops-server and lb-master are (default: this example's target profile).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// Data directory (default: a fresh temporary one, removed at the end).
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

/// A child process killed when dropped.
struct Proc {
    name: String,
    child: Child,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    fn cpu_secs(&self) -> anyhow::Result<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()))
            .with_context(|| format!("{} (pid {}) is gone", self.name, self.child.id()))?;
        // Fields after the command name (which may hold spaces, closed by the last ')').
        let rest = stat.rsplit_once(')').context("stat without ')'")?.1;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // utime and stime are fields 14 and 15 of stat(5); `rest` starts at field 3.
        let ticks = |i: usize| fields.get(i - 3).and_then(|f| f.parse::<u64>().ok()).context("stat field");
        Ok((ticks(14)? + ticks(15)?) as f64 / USER_HZ)
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn spawn(bin_dir: &Path, bin: &str, config: &Path, log: &Path) -> anyhow::Result<Proc> {
    let log = std::fs::File::create(log)?;
    let child = Command::new(bin_dir.join(bin))
        .arg("--config")
        .arg(config)
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log))
        .spawn()
        .with_context(|| {
            format!("cannot run {} (build it: cargo build --release -p {bin} --bins)", bin_dir.join(bin).display())
        })?;
    Ok(Proc { name: bin.to_owned(), child })
}

async fn wait_ready(http: &reqwest::Client, url: &str, proc: &mut Proc) -> anyhow::Result<()> {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = proc.child.try_wait()? {
            anyhow::bail!("{} exited ({status}) before it was ready; see its log", proc.name);
        }
        if http.get(format!("{url}/ready")).send().await.is_ok_and(|r| r.status().is_success()) {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < until, "{} not ready at {url} within 30 s", proc.name);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The sum of a metric's samples (all label sets) in a Prometheus text page.
fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

/// Per agent: (samples served, idle slots left out, polls).
async fn agent_counters(http: &reqwest::Client, agents: &[(String, String)]) -> anyhow::Result<Vec<[f64; 3]>> {
    let mut out = Vec::new();
    for (_, url) in agents {
        let text = http.get(format!("{url}/metrics")).send().await?.text().await?;
        out.push([
            metric_sum(&text, "lb_agent_samples_served_total"),
            metric_sum(&text, "lb_agent_valkey_idle_slots_total"),
            metric_sum(&text, "lb_agent_valkey_polls_total"),
        ]);
    }
    Ok(out)
}

/// The master's collection cursor per worker.
async fn cursors(http: &reqwest::Client, master: &str) -> anyhow::Result<BTreeMap<String, u64>> {
    let v: serde_json::Value = http.get(format!("{master}/api/v1/collector")).send().await?.json().await?;
    let agents = v["agents"].as_object().context("collector without agents")?;
    Ok(agents.iter().filter_map(|(w, a)| Some((w.clone(), a["cursor"].as_u64()?))).collect())
}

/// (bytes as sent, bytes of JSON, samples) of an agent's served samples after `from` up to
/// `to`, read again page by page as the collector reads them: each page once as lb's clients
/// receive it (`Accept-Encoding: zstd`, the compressed body counted) and once as plain JSON.
async fn served_bytes(
    http: &reqwest::Client,
    agent: &str,
    token: &str,
    from: u64,
    to: u64,
) -> anyhow::Result<(u64, u64, u64)> {
    let (mut sent, mut json, mut samples, mut after) = (0u64, 0u64, 0u64, from);
    while after < to {
        let url = format!("{agent}/v1/samples?after={after}&limit=2000");
        let get = |encoding: &'static str| {
            http.get(&url).bearer_auth(token).header(reqwest::header::ACCEPT_ENCODING, encoding).send()
        };
        let compressed = get("zstd").await?.error_for_status()?.bytes().await?;
        let body = get("identity").await?.error_for_status()?.bytes().await?;
        let page: serde_json::Value = serde_json::from_slice(&body)?;
        let n = page["samples"].as_array().map_or(0, Vec::len) as u64;
        let next = page["next_cursor"].as_u64().context("next_cursor")?;
        anyhow::ensure!(next > after && n > 0, "agent {agent}: no progress after cursor {after}");
        sent += compressed.len() as u64;
        json += body.len() as u64;
        samples += n;
        after = next;
    }
    Ok((sent, json, samples))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let bin_dir = match &args.bin_dir {
        Some(dir) => dir.clone(),
        None => std::env::current_exe()?.parent().and_then(Path::parent).context("no target dir")?.to_path_buf(),
    };
    let temp = match &args.data_dir {
        Some(_) => None,
        None => Some(tempfile_dir()?),
    };
    let dir = args.data_dir.clone().or_else(|| temp.clone()).context("data dir")?;
    std::fs::create_dir_all(&dir)?;
    let options = match args.workload {
        Workload::Cpu => ValkeyUpOptions::launcher(args.nodes, dir.clone()),
        Workload::HotSlots => ValkeyUpOptions::ops_capacity(args.nodes, dir.clone()),
    };
    let data = |name: &str| dir.join(name).display().to_string();
    let tokens = DemoTokens::load_or_create(&dir)?;
    // Decompresses nothing: `served_bytes` asks for each encoding itself.
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).no_zstd().build()?;

    let mut cluster = LocalCluster::start(LocalClusterConfig::new(args.nodes, dir.join("valkey"))).await?;
    let seeds: Vec<String> = cluster.addrs().iter().map(|a| format!("\"{a}\"")).collect();
    let mut procs = Vec::new();

    let ops_port = free_port()?;
    let ops_url = format!("http://127.0.0.1:{ops_port}");
    let ops_toml = dir.join("ops-server.toml");
    std::fs::write(
        &ops_toml,
        format!(
            "[http]\nlisten = \"127.0.0.1:{ops_port}\"\n[audit]\npath = \"{audit}\"\n[storage]\nkind = \"valkey\"\n\
             [storage.valkey]\nseeds = [{seeds}]\nworker_ids = \"port\"\n{ops}poll_interval_ms = 50\n{cadence}{tokens}",
            audit = data("ops-server-audit.sqlite"),
            seeds = seeds.join(", "),
            ops = options.node_ops_per_sec.map_or(String::new(), |ops| format!("node_ops_per_sec = {ops}\n")),
            cadence = ops_server_cadence(1000),
            tokens = tokens.ops_server_toml(),
        ),
    )?;
    let mut ops = spawn(&bin_dir, "lb-ops-server", &ops_toml, &dir.join("ops-server.log"))?;
    wait_ready(&http, &ops_url, &mut ops).await?;
    procs.push(ops);

    let mut agents = Vec::new();
    for addr in cluster.addrs() {
        let worker = lb_launcher::valkey_up::worker_id(addr.port)?.to_string();
        let port = free_port()?;
        let url = format!("http://127.0.0.1:{port}");
        let path = dir.join(format!("agent-{worker}.toml"));
        std::fs::write(
            &path,
            format!(
                "worker_id = \"{worker}\"\n[http]\nlisten = \"127.0.0.1:{port}\"\n[store]\npath = \"{store}\"\n\
                 [host]\nenabled = false\n[source]\nkind = \"valkey\"\naddress = \"{addr}\"\ninterval_ms = 1000\n\
                 [ops_server]\nurl = \"{ops_url}\"\nadvertise_url = \"{url}\"\ntoken = \"{token}\"\n",
                store = data(&format!("agent-{worker}.sqlite")),
                token = tokens.agent.token,
            ),
        )?;
        let mut agent = spawn(&bin_dir, "lb-agent", &path, &dir.join(format!("agent-{worker}.log")))?;
        agent.name = format!("lb-agent {worker}");
        wait_ready(&http, &url, &mut agent).await?;
        procs.push(agent);
        agents.push((worker, url));
    }

    let master_port = free_port()?;
    let master_url = format!("http://127.0.0.1:{master_port}");
    let master_toml = dir.join("master.toml");
    std::fs::write(
        &master_toml,
        format!(
            "[http]\nlisten = \"127.0.0.1:{master_port}\"\n[ops_server]\nurl = \"{ops_url}\"\ntoken = \"{service}\"\n\
             [store]\npath = \"{store}\"\n{sections}\n{people}",
            service = tokens.service.token,
            store = data("master-results.sqlite"),
            sections = master_sections(1000, "auto"),
            people = tokens.master_toml(),
        ),
    )?;
    let mut master = spawn(&bin_dir, "lb-master", &master_toml, &dir.join("master.log"))?;
    wait_ready(&http, &master_url, &mut master).await?;
    procs.push(master);

    let spec = options.load.clone().context("workload without load")?;
    let load = LoadGenerator::start(cluster.addrs(), cluster.connect_options(), spec).await?;
    println!(
        "{} nodes, workload {:?}: lb started as {} processes; warming up {} s, then measuring {} s",
        args.nodes,
        args.workload,
        procs.len(),
        args.warmup,
        args.secs
    );
    tokio::time::sleep(Duration::from_secs(args.warmup)).await;

    let mut nodes = NodeCounters::new(cluster.addrs(), cluster.connect_options());
    nodes.sample().await;
    let cpu0 = procs.iter().map(Proc::cpu_secs).collect::<anyhow::Result<Vec<_>>>()?;
    let counters0 = agent_counters(&http, &agents).await?;
    let cursors0 = cursors(&http, &master_url).await?;
    let started = Instant::now();
    let mut node_cpu = vec![0.0; args.nodes];
    let mut node_ops = vec![0.0; args.nodes];
    let mut ticks = 0u32;
    while started.elapsed() < Duration::from_secs(args.secs) {
        tokio::time::sleep(Duration::from_secs(5)).await;
        for (i, r) in nodes.sample().await.into_iter().enumerate() {
            if let Some(r) = r {
                node_cpu[i] += r.cpu_cores;
                node_ops[i] += r.ops_per_sec;
            }
        }
        ticks += 1;
    }
    let secs = started.elapsed().as_secs_f64();
    let cpu1 = procs.iter().map(Proc::cpu_secs).collect::<anyhow::Result<Vec<_>>>()?;
    let counters1 = agent_counters(&http, &agents).await?;
    let cursors1 = cursors(&http, &master_url).await?;
    let report = load.stop().await;

    println!("\n| lb process | CPU (cores) |\n|---|---:|");
    let mut total = 0.0;
    for (p, (a, b)) in procs.iter().zip(cpu0.iter().zip(&cpu1)) {
        let cores = (b - a) / secs;
        total += cores;
        println!("| {} | {cores:.4} |", p.name);
    }
    println!("| **all lb processes** | **{total:.4}** |");
    let ticks = f64::from(ticks.max(1));
    println!(
        "\nvalkey nodes' main-thread CPU (cores): {} (sum {:.4}); commands/s: {} ({} client ops in all, {} errors)",
        node_cpu.iter().map(|c| format!("{:.3}", c / ticks)).collect::<Vec<_>>().join(", "),
        node_cpu.iter().sum::<f64>() / ticks,
        node_ops.iter().map(|o| format!("{:.0}", o / ticks)).collect::<Vec<_>>().join(", "),
        report.ops,
        report.errors,
    );

    println!(
        "\n| node | samples served / s (changed slots + 1 host) | idle slots left out / s | polls / s | JSON bytes / sample | JSON bytes / s | bytes sent / s (zstd) |\n|---|---:|---:|---:|---:|---:|---:|"
    );
    for (i, (worker, url)) in agents.iter().enumerate() {
        let d = |k: usize| (counters1[i][k] - counters0[i][k]) / secs;
        let (from, to) = (cursors0.get(worker).copied().unwrap_or(0), cursors1.get(worker).copied().unwrap_or(0));
        let (sent, json, samples) = served_bytes(&http, url, &tokens.agent.token, from, to).await?;
        let per_sample = json as f64 / samples.max(1) as f64;
        let sent_per_sample = sent as f64 / samples.max(1) as f64;
        println!(
            "| {worker} | {:.0} | {:.0} | {:.2} | {per_sample:.0} | {:.0} | {:.0} |",
            d(0),
            d(1),
            d(2),
            per_sample * d(0),
            sent_per_sample * d(0)
        );
    }
    drop(procs);
    cluster.shutdown();
    if let Some(temp) = temp {
        let _ = std::fs::remove_dir_all(temp);
    }
    Ok(())
}

fn tempfile_dir() -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("lb-overhead-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
