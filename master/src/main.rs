//! `lb-master --config master.toml`: runs until SIGINT or SIGTERM; SIGHUP reloads.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use lb_common::config::watch::{self, WatchOptions};
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
    let initial: MasterConfig = lb_common::config::load(&args.config)?;
    lb_common::telemetry::init_tracing(&initial.log);
    lb_common::telemetry::metrics_handle();
    let config_cancel = tokio_util::sync::CancellationToken::new();
    let (handle, _watcher) = watch::spawn::<MasterConfig>(
        &args.config,
        WatchOptions::from_runtime(&initial.runtime),
        config_cancel.clone(),
    )?;
    let listener = tokio::net::TcpListener::bind(initial.http.listen)
        .await
        .with_context(|| format!("cannot listen on http.listen = {}", initial.http.listen))?;
    let master = lb_master::start(handle.subscribe(), listener, Some(handle.shared_status())).await?;
    println!("lb-master listening on http://{}", master.addr());
    let signal = lb_common::shutdown::wait_for_signal().await;
    tracing::info!(signal, "shutting down");
    let deadline = Duration::from_millis(handle.current().runtime.shutdown_deadline_ms);
    let clean = master.stop(deadline).await;
    config_cancel.cancel();
    if !clean {
        anyhow::bail!("shutdown did not finish within {} ms", deadline.as_millis());
    }
    Ok(())
}
