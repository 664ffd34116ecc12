//! `lb-agent --config agent.toml`: runs until SIGINT or SIGTERM; SIGHUP reloads the config.

use std::path::PathBuf;

use clap::Parser;
use lb_agent::config::AgentConfig;

#[derive(Debug, Parser)]
#[command(version, about = "lb agent: collects a storage worker's partition metrics")]
struct Args {
    /// Path of agent.toml.
    #[arg(long, env = "LB_AGENT_CONFIG", default_value = "configs/agent.toml")]
    config: PathBuf,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    lb_common::service::run::<AgentConfig, _, _, _>("lb-agent", &args.config, |config, listener, status| {
        lb_agent::start(config, listener, Some(status))
    })
    .await
}
