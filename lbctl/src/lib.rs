//! lbctl: the SRE's command line for lb. It reaches the master and the ops server over their
//! HTTP APIs through lb-common's typed clients, and prints either aligned text (coloured only
//! on a terminal) or the APIs' typed replies as JSON.
//!
//! - [`cli`]: the flags and subcommands (clap), with an example in every `--help`.
//! - [`config`]: where the URLs and the token come from (flag, environment, config file, default).
//! - [`api`]: the two clients; [`error`]: what failed and the exit status it gives.
//! - [`cmd`]: one module per subcommand, each a fetch and a pure `render`.
//! - [`style`], [`table`], [`fmt`]: colours, aligned tables and number/time formatting.
//! - [`out`]: stdout that survives a closed pipe.

pub mod api;
pub mod cli;
pub mod cmd;
pub mod config;
pub mod error;
pub mod fmt;
pub mod out;
pub mod style;
pub mod table;

use cli::{Cli, Command};
use error::CtlError;
use style::Style;

/// Resolves the settings and runs the subcommand.
pub async fn run(cli: Cli) -> Result<(), CtlError> {
    // Completions need no server, so no settings either.
    if let Command::Completions(args) = &cli.command {
        return cmd::completions(args.shell);
    }
    let var = |name: &str| std::env::var(name).ok();
    let default = config::default_config_path(var("XDG_CONFIG_HOME").as_deref(), var("HOME").as_deref());
    let file = config::load_file(cli.global.config.as_deref(), default.as_deref())?;
    let settings = config::resolve(&cli.global, file)?;
    cmd::run(&cli.command, &settings, cli.global.output, &Style::detect()).await
}
