//! `lbctl split|move|merge|group|reshard`: an action by hand, submitted through the master
//! (`POST /api/v1/actions`) so it is checked against the current layout, predicted, tracked and
//! evaluated like the analyzers' own. `--dry-run` prints the prediction and submits nothing.

use lb_common::protocol::{ActionSpec, GroupTarget, ManualActionReply, ManualActionRequest};

use crate::api::Api;
use crate::cli::{Command, ManualArgs};
use crate::cmd::{actions, explain};
use crate::error::{AtComponent, CtlError};
use crate::fmt;
use crate::style::{Paint, Style};

/// The request a manual subcommand stands for (`None` for the other subcommands); values the
/// master would refuse anyway but that lbctl can tell alone are usage errors (exit 2).
pub fn request(command: &Command) -> Result<Option<ManualActionRequest>, CtlError> {
    let (spec, manual): (ActionSpec, &ManualArgs) = match command {
        Command::Split(a) => (ActionSpec::Split { partition: a.partition.clone(), split_key: a.at }, &a.manual),
        Command::Move(a) => (
            ActionSpec::Move { partition: a.partition.clone(), to_worker: a.to.clone(), max_bytes_per_sec: None },
            &a.manual,
        ),
        Command::Merge(a) => {
            if a.left == a.right {
                return Err(CtlError::Usage(format!("merge needs two different partitions, got {} twice", a.left)));
            }
            (ActionSpec::Merge { left: a.left.clone(), right: a.right.clone(), to_worker: a.to.clone() }, &a.manual)
        }
        Command::Group(a) => (
            ActionSpec::Group {
                target: GroupTarget::Partition { partition: a.partition.clone() },
                group: a.group.clone(),
            },
            &a.manual,
        ),
        Command::Reshard(a) => {
            if a.tenant_shards < a.dataset_shards {
                return Err(CtlError::Usage(format!(
                    "--tenant-shards {} must be at least --dataset-shards {} (the dataset's subring lies inside the tenant's)",
                    a.tenant_shards, a.dataset_shards
                )));
            }
            let spec = ActionSpec::Reshard {
                tenant: a.dataset.0.clone(),
                dataset: a.dataset.1.clone(),
                tenant_shards: a.tenant_shards,
                dataset_shards: a.dataset_shards,
                load_balancing: a.load_balancing.load_balancing(),
            };
            (spec, &a.manual)
        }
        _ => return Ok(None),
    };
    if manual.reason.trim().is_empty() {
        return Err(CtlError::Usage("--reason must say why".to_owned()));
    }
    Ok(Some(ManualActionRequest { spec, reason: manual.reason.clone(), dry_run: manual.dry_run }))
}

pub async fn submit(api: &Api, request: &ManualActionRequest) -> Result<ManualActionReply, CtlError> {
    api.master.submit_manual(request).await.at_master()
}

pub fn render(reply: &ManualActionReply, style: &Style) -> String {
    let p = &reply.proposal;
    let mut out = match &reply.action {
        None => format!("{} {}: nothing submitted\n", style.paint(Paint::Warn, "dry run:"), fmt::spec(&p.spec)),
        Some(a) => {
            let state = style.paint(actions::state_paint(a.state).unwrap_or(Paint::Bold), actions::state_name(a.state));
            format!(
                "submitted {}: {} ({state}, by {})\nfollow it with `lbctl actions --follow` or `lbctl explain {}`\n",
                a.request.id,
                fmt::spec(&a.request.spec),
                a.submitted_by,
                a.request.id
            )
        }
    };
    out.push_str(&format!("reason: {}\n", fmt::one_line(&p.reason)));
    out.push_str(&format!("\n{}\n", style.bold("predicted (ratio of capacity; the target's of its limit)")));
    out.push_str(&explain::prediction(&p.predicted, style));
    if !p.rejected_alternatives.is_empty() {
        out.push_str(&format!("\n{}\n", style.bold("notes")));
        for a in &p.rejected_alternatives {
            out.push_str(&format!("  - {}: {}\n", a.candidate, fmt::one_line(&a.why)));
        }
    }
    out
}
