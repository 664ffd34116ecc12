//! `lb-ops-server --config ops-server.toml`: runs until SIGINT or SIGTERM; SIGHUP reloads the config.

use std::path::PathBuf;

use clap::Parser;
use lb_ops_server::config::OpsServerConfig;

#[derive(Debug, Parser)]
#[command(version, about = "lb ops server: agent registry, collection fan-out, safe action execution")]
struct Args {
    /// Path of ops-server.toml.
    #[arg(long, env = "LB_OPS_SERVER_CONFIG", default_value = "configs/ops-server.toml")]
    config: PathBuf,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    lb_common::service::run::<OpsServerConfig, _, _, _>("lb-ops-server", &args.config, |config, listener, status| {
        lb_ops_server::start(config, listener, Some(status))
    })
    .await
}
