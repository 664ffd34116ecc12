//! `lb-master --config master.toml`: runs until SIGINT or SIGTERM; SIGHUP reloads the config.

use std::path::PathBuf;

use clap::Parser;
use lb_master::config::MasterConfig;

#[derive(Debug, Parser)]
#[command(version, about = "lb master: collects, analyses and balances")]
struct Args {
    /// Path of master.toml.
    #[arg(long, env = "LB_MASTER_CONFIG", default_value = "configs/master.toml")]
    config: PathBuf,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    lb_common::service::run::<MasterConfig, _, _, _>("lb-master", &args.config, |config, listener, status| {
        lb_master::start(config, listener, Some(status))
    })
    .await
}
