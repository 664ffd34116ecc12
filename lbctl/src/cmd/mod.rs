//! One module per subcommand. Each fetches typed replies through [`Api`] and hands them to a
//! pure `render` (typed data and `now` in, text out) or prints them as JSON.

pub mod actions;
pub mod agents;
pub mod explain;
pub mod halt;
pub mod heatmap;
pub mod history;
pub mod manual;
pub mod offline;
pub mod policy;
pub mod proposals;
pub mod status;
pub mod top;
pub mod watch;

use clap::CommandFactory;

use crate::api::{Api, now_ms};
use crate::cli::{Cli, Command, Output};
use crate::config::Settings;
use crate::error::{AtComponent, CtlError};
use crate::out;
use crate::style::Style;

/// Prints `data` as JSON, or renders it.
fn show<T: serde::Serialize>(output: Output, data: &T, render: impl FnOnce(&T) -> String) -> Result<(), CtlError> {
    match output {
        Output::Json => out::json(data),
        Output::Table => out::text(&render(data)),
    }
}

/// Runs one subcommand against the servers in `settings`.
pub async fn run(command: &Command, settings: &Settings, output: Output, style: &Style) -> Result<(), CtlError> {
    let api = Api::new(settings);
    let now = now_ms();
    if let Some(request) = manual::request(command)? {
        let reply = manual::submit(&api, &request).await?;
        return show(output, &reply, |r| manual::render(r, style));
    }
    match command {
        Command::Status(args) => {
            let status = status::fetch(&api, &settings.master_url, &settings.ops_url, args.window).await?;
            show(output, &status, |s| status::render(s, style, now))
        }
        Command::Top(args) => show(output, &top::fetch(&api, args).await?, |t| top::render(t, style)),
        Command::Heatmap(args) => show(output, &heatmap::fetch(&api, args).await?, |h| heatmap::render(h, style)),
        Command::History(args) => show(output, &history::fetch(&api, args).await?, |h| history::render(h, style, now)),
        Command::Actions(args) => actions::run(&api, args, output, style).await,
        Command::Explain(args) => {
            show(output, &explain::fetch(&api, &args.id).await?, |e| explain::render(e, style, now))
        }
        Command::Proposals => {
            let proposals = api.master.pending().await.at_master()?;
            let reply = lb_common::protocol::PendingResponse { proposals };
            show(output, &reply, |r| proposals::render(&r.proposals, style, now))
        }
        Command::Approve(args) => {
            let record = api.master.approve(&args.id).await.at_master()?;
            show(output, &record, |r| proposals::render_approved(r, style))
        }
        Command::Reject(args) => {
            let pending = api.master.reject(&args.id).await.at_master()?;
            show(output, &pending, |p| proposals::render_rejected(p, style))
        }
        Command::Halt(args) => {
            let status = api.ops.set_halt(true, args.reason.clone()).await.at_ops()?;
            show(output, &status, |h| halt::render(h, style))
        }
        Command::Resume => {
            let status = api.ops.set_halt(false, None).await.at_ops()?;
            show(output, &status, |h| halt::render(h, style))
        }
        Command::Policy => show(output, &api.master.policy().await.at_master()?, |p| policy::render(p, style, now)),
        Command::Watch(args) => watch::run(&api, args, output, style).await,
        Command::Agents => show(output, &agents::fetch(&api).await?, |a| agents::render(a, style, now)),
        Command::Offline(args) => {
            let found = offline::fetch(&api, args.run, args.wait).await?;
            show(output, &found, |f| offline::render(f, style, now))
        }
        Command::Split(_) | Command::Move(_) | Command::Merge(_) | Command::Group(_) | Command::Reshard(_) => {
            unreachable!("manual subcommands are handled above")
        }
        Command::Completions(args) => completions(args.shell),
    }
}

/// `lbctl completions SHELL`: the completion script on stdout.
pub fn completions(shell: clap_complete::Shell) -> Result<(), CtlError> {
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "lbctl", &mut buf);
    out::text(&String::from_utf8_lossy(&buf))
}
