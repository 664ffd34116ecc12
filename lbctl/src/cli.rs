//! The command line: global flags and one subcommand per task, each `--help` with an example.
//! Value parsers here turn a bad value into clap's usage error (exit 2) before anything is sent.

use std::path::PathBuf;
use std::time::Duration;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand, ValueEnum};
use lb_common::ids::{ActionId, DatasetId, GroupId, Key, PartitionId, TableId, TenantId, WorkerId};
use lb_common::protocol::{ActionState, GroupBy, LoadBalancing, Metric, Policy};

const ABOUT: &str = "Watch and steer lb: cluster status, hot partitions, heatmaps, actions and why they \
                     were (or were not) taken, approvals, manual actions and the halt switch";

const LONG_ABOUT: &str = "\
Watch and steer lb from a terminal, through the master's and the ops server's HTTP APIs.

Addresses and the token come from the flags, else from LB_MASTER_URL, LB_OPS_URL and LB_TOKEN,
else from the config file (--config FILE, else $XDG_CONFIG_HOME/lbctl.toml or
~/.config/lbctl.toml) with the keys master_url, ops_url and token, else the defaults
(http://127.0.0.1:7000 and http://127.0.0.1:7200).

Exit status: 0 done, 1 a request failed (the message names the server, the URL and the
status), 2 a usage error.";

const EXAMPLES: &str = "\
Examples:
  lbctl status
  lbctl top --metric rejected -n 5
  lbctl explain lb-1796128699637-2
  lbctl --master http://lb-master:7000 --token $TOKEN approve lb-1796128699637-10
  lbctl -o json status | jq '.overview.cv'";

#[derive(Debug, Parser)]
#[command(name = "lbctl", version, about = ABOUT, long_about = LONG_ABOUT, after_help = EXAMPLES)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Args)]
pub struct GlobalArgs {
    /// The master's base URL [default: master_url from the config file, else http://127.0.0.1:7000]
    #[arg(long, global = true, env = "LB_MASTER_URL", value_name = "URL")]
    pub master: Option<String>,
    /// The ops server's base URL [default: ops_url from the config file, else http://127.0.0.1:7200]
    #[arg(long, global = true, env = "LB_OPS_URL", value_name = "URL")]
    pub ops: Option<String>,
    /// Bearer token sent to both servers (an `operator` token for writes)
    #[arg(long, global = true, env = "LB_TOKEN", hide_env_values = true, value_name = "TOKEN")]
    pub token: Option<String>,
    /// Config file with master_url, ops_url and token [default: $XDG_CONFIG_HOME/lbctl.toml or ~/.config/lbctl.toml, if it exists]
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Output format: aligned text, or the API's typed reply as JSON (see the README)
    #[arg(long, short = 'o', global = true, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// Deadline of each request (connecting gives up after at most 2 s)
    #[arg(long, global = true, value_name = "DURATION", default_value = "10s", value_parser = duration)]
    pub timeout: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Table,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Per-worker load against capacity, spread, hot partitions, actions in flight, policy modes, halt, stale agents
    #[command(after_help = "Example:\n  lbctl status\n  lbctl status --window 30s -o json | jq '.hot_partitions[].id'")]
    Status(StatusArgs),
    /// The hottest partitions, workers, tables or tenants by a metric
    #[command(after_help = "Example:\n  lbctl top --metric rejected --window 30s -n 5\n  lbctl top --by worker")]
    Top(TopArgs),
    /// A table's key-space heatmap over time (rows: time, oldest first; columns: key ranges)
    #[command(
        after_help = "Example:\n  lbctl heatmap acme/orders --since 10m\n  lbctl heatmap acme/orders --metric rejected --since 2m --step 5s"
    )]
    Heatmap(HeatmapArgs),
    /// A partition's recent series and every action that touched it (or its ancestors)
    #[command(after_help = "Example:\n  lbctl history acme.orders.p000034 --since 30m")]
    History(HistoryArgs),
    /// Actions the ops server keeps, newest last; --follow tails their state changes
    #[command(
        after_help = "Example:\n  lbctl actions --state running\n  lbctl actions --follow --policy partition_overload"
    )]
    Actions(ActionsArgs),
    /// Why an action or proposal was taken, how it ran and how it was judged; for a partition, why nothing is being done
    #[command(after_help = "Example:\n  lbctl explain lb-1796128699637-2\n  lbctl explain acme.orders.p000032")]
    Explain(ExplainArgs),
    /// Dry-run proposals waiting for approval
    #[command(after_help = "Example:\n  lbctl proposals\n  lbctl proposals -o json | jq -r '.proposals[].id'")]
    Proposals,
    /// Approve a pending dry-run proposal (operator token)
    #[command(after_help = "Example:\n  lbctl --token $TOKEN approve lb-1796128699637-10")]
    Approve(IdArgs),
    /// Reject a pending dry-run proposal: it is not offered again for the approval TTL (operator token)
    #[command(after_help = "Example:\n  lbctl --token $TOKEN reject lb-1796128699637-10")]
    Reject(IdArgs),
    /// Split a partition at a key, through the master (tracked and evaluated)
    #[command(
        after_help = "Example:\n  lbctl split acme.orders.p000034 --at 4322d50f1e9da834 --dry-run\n  lbctl split acme.orders.p000034 --at 4322d50f1e9da834 --reason \"INC-123: hot range\""
    )]
    Split(SplitArgs),
    /// Move a partition to another worker, through the master
    #[command(name = "move", after_help = "Example:\n  lbctl move acme.orders.p000034 --to w-0003 --dry-run")]
    Move(MoveArgs),
    /// Merge two adjacent partitions of one table, through the master
    #[command(after_help = "Example:\n  lbctl merge acme.orders.p000033 acme.orders.p000034 --to w-0007")]
    Merge(MergeArgs),
    /// Pin a partition to a group of dedicated workers, through the master
    #[command(after_help = "Example:\n  lbctl group acme.users.p000002 --group isolated")]
    Group(GroupArgs),
    /// Change how many shards a hash-sharded dataset spreads over, through the master
    #[command(
        after_help = "Example:\n  lbctl reshard acme/events --tenant-shards 16 --dataset-shards 8 --load-balancing round_robin"
    )]
    Reshard(ReshardArgs),
    /// Stop the ops server taking actions off its queue (running ones finish)
    #[command(after_help = "Example:\n  lbctl --token $TOKEN halt --reason \"INC-123: storage upgrade\"")]
    Halt(HaltArgs),
    /// Let the ops server take actions off its queue again
    #[command(after_help = "Example:\n  lbctl --token $TOKEN resume")]
    Resume,
    /// The live policy config, its version, source file and last reload outcome
    #[command(after_help = "Example:\n  lbctl policy\n  lbctl policy -o json | jq '.planner.partition_overload'")]
    Policy,
    /// Follow the master's event stream: proposals, action states and verdicts as they happen
    #[command(
        after_help = "Example:\n  lbctl watch\n  lbctl watch --passes -n 10\n  lbctl watch -o json | jq -c 'select(.event == \"record\")'"
    )]
    Watch(WatchArgs),
    /// Registered agents, their last heartbeat and collection lag
    #[command(after_help = "Example:\n  lbctl agents")]
    Agents,
    /// The newest offline pass: merges and pre-splits found, chronically unbalanced tables and tenants, flapping split keys, each worker's day
    #[command(
        after_help = "Example:\n  lbctl offline\n  lbctl --token $TOKEN offline --run\n  lbctl offline -o json | jq '.report.flapping'"
    )]
    Offline(OfflineArgs),
    /// Shell completions on stdout
    #[command(
        after_help = "Example:\n  lbctl completions bash > /etc/bash_completion.d/lbctl\n  lbctl completions zsh > \"${fpath[1]}/_lbctl\""
    )]
    Completions(CompletionsArgs),
}

#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    /// The averaging window
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = whole_secs)]
    pub window: u64,
}

#[derive(Debug, Clone, Args)]
pub struct TopArgs {
    #[arg(long, value_name = "METRIC", default_value = "ops", value_parser = metric())]
    pub metric: Metric,
    /// The averaging window
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = whole_secs)]
    pub window: u64,
    /// What to rank
    #[arg(long, value_name = "BY", default_value = "partition", value_parser = group_by())]
    pub by: GroupBy,
    /// How many (1..=1000)
    #[arg(short = 'n', long = "limit", value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub n: u16,
}

#[derive(Debug, Clone, Args)]
pub struct HeatmapArgs {
    /// TENANT/TABLE
    #[arg(value_name = "TENANT/TABLE", value_parser = tenant_table)]
    pub table: (TenantId, TableId),
    #[arg(long, value_name = "METRIC", default_value = "ops", value_parser = metric())]
    pub metric: Metric,
    /// How far back
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = whole_secs)]
    pub since: u64,
    /// Time per row [default: --since / 20, whole seconds]
    #[arg(long, value_name = "DURATION", value_parser = whole_secs)]
    pub step: Option<u64>,
    /// Key-range columns (1..=200)
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=200))]
    pub buckets: u16,
}

#[derive(Debug, Clone, Args)]
pub struct HistoryArgs {
    pub partition: PartitionId,
    #[arg(long, value_name = "METRIC", default_value = "ops", value_parser = metric())]
    pub metric: Metric,
    /// How far back
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = whole_secs)]
    pub since: u64,
}

#[derive(Debug, Clone, Args)]
pub struct ActionsArgs {
    /// Keep polling (once a second) and print each action as it changes state; Ctrl-C stops
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Only actions of this policy (`manual` for actions by hand)
    #[arg(long, value_enum, value_name = "POLICY")]
    pub policy: Option<PolicyArg>,
    /// Only actions in this state
    #[arg(long, value_enum, value_name = "STATE")]
    pub state: Option<StateArg>,
    /// At most this many, the newest (without --follow)
    #[arg(short = 'n', long = "limit", value_name = "N", default_value_t = 50, value_parser = clap::value_parser!(u16).range(1..))]
    pub n: u16,
}

#[derive(Debug, Clone, Args)]
pub struct ExplainArgs {
    /// An action id, a proposal id, or a partition id
    pub id: String,
}

#[derive(Debug, Clone, Args)]
pub struct OfflineArgs {
    /// Ask the leader for a pass now (operator token) and wait for it
    #[arg(long)]
    pub run: bool,
    /// With --run, how long to wait for the pass
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = duration)]
    pub wait: Duration,
}

#[derive(Debug, Clone, Args)]
pub struct IdArgs {
    /// The proposal's id (as `lbctl proposals` shows it)
    pub id: ActionId,
}

/// What every manual action takes.
#[derive(Debug, Clone, Args)]
pub struct ManualArgs {
    /// Why, for the audit trail
    #[arg(long, default_value = "manual via lbctl")]
    pub reason: String,
    /// Print the master's prediction and submit nothing
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Clone, Args)]
pub struct SplitArgs {
    pub partition: PartitionId,
    /// The first key of the right half, 16 hex digits (keys are shown that way everywhere)
    #[arg(long, value_name = "KEY", value_parser = key)]
    pub at: Key,
    #[command(flatten)]
    pub manual: ManualArgs,
}

#[derive(Debug, Clone, Args)]
pub struct MoveArgs {
    pub partition: PartitionId,
    /// The destination worker
    #[arg(long, value_name = "WORKER")]
    pub to: WorkerId,
    #[command(flatten)]
    pub manual: ManualArgs,
}

#[derive(Debug, Clone, Args)]
pub struct MergeArgs {
    pub left: PartitionId,
    /// The partition that starts right after LEFT ends
    pub right: PartitionId,
    /// The owner of LEFT or RIGHT the merged partition lands on (the other side streams
    /// there); LEFT's owner when not given
    #[arg(long, value_name = "WORKER")]
    pub to: Option<WorkerId>,
    #[command(flatten)]
    pub manual: ManualArgs,
}

#[derive(Debug, Clone, Args)]
pub struct GroupArgs {
    pub partition: PartitionId,
    #[arg(long, value_name = "GROUP")]
    pub group: GroupId,
    #[command(flatten)]
    pub manual: ManualArgs,
}

#[derive(Debug, Clone, Args)]
pub struct ReshardArgs {
    /// TENANT/DATASET
    #[arg(value_name = "TENANT/DATASET", value_parser = tenant_dataset)]
    pub dataset: (TenantId, DatasetId),
    /// Size of the tenant's subring (at least --dataset-shards)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub tenant_shards: u32,
    /// Size of the dataset's subring inside the tenant's
    #[arg(long, value_name = "M", value_parser = clap::value_parser!(u32).range(1..))]
    pub dataset_shards: u32,
    #[arg(long, value_enum, value_name = "HOW", default_value_t = LoadBalancingArg::Fingerprint)]
    pub load_balancing: LoadBalancingArg,
    #[command(flatten)]
    pub manual: ManualArgs,
}

#[derive(Debug, Clone, Args)]
pub struct WatchArgs {
    /// Also a line per online pass (about one a second)
    #[arg(long)]
    pub passes: bool,
    /// Stop after this many events (default: until the master ends the stream)
    #[arg(short = 'n', long)]
    pub n: Option<usize>,
}

#[derive(Debug, Clone, Args)]
pub struct HaltArgs {
    /// Why, shown with the halt status until the next change
    #[arg(long)]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub struct CompletionsArgs {
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum PolicyArg {
    PartitionOverload,
    WorkerOverload,
    Imbalance,
    DatasetPlacement,
    Manual,
}

impl PolicyArg {
    pub fn policy(self) -> Policy {
        match self {
            PolicyArg::PartitionOverload => Policy::PartitionOverload,
            PolicyArg::WorkerOverload => Policy::WorkerOverload,
            PolicyArg::Imbalance => Policy::Imbalance,
            PolicyArg::DatasetPlacement => Policy::DatasetPlacement,
            PolicyArg::Manual => Policy::Manual,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum StateArg {
    Queued,
    Running,
    Succeeded,
    Failed,
    Cancelled,
    TimedOut,
}

impl StateArg {
    pub fn state(self) -> ActionState {
        match self {
            StateArg::Queued => ActionState::Queued,
            StateArg::Running => ActionState::Running,
            StateArg::Succeeded => ActionState::Succeeded,
            StateArg::Failed => ActionState::Failed,
            StateArg::Cancelled => ActionState::Cancelled,
            StateArg::TimedOut => ActionState::TimedOut,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum LoadBalancingArg {
    Fingerprint,
    RoundRobin,
}

impl LoadBalancingArg {
    pub fn load_balancing(self) -> LoadBalancing {
        match self {
            LoadBalancingArg::Fingerprint => LoadBalancing::Fingerprint,
            LoadBalancingArg::RoundRobin => LoadBalancing::RoundRobin,
        }
    }
}

fn metric() -> impl TypedValueParser<Value = Metric> {
    PossibleValuesParser::new(Metric::ALL.map(Metric::as_str)).try_map(|s| s.parse::<Metric>())
}

fn group_by() -> impl TypedValueParser<Value = GroupBy> {
    PossibleValuesParser::new(["partition", "worker", "table", "tenant"]).try_map(|s| s.parse::<GroupBy>())
}

/// `10s`, `5m`, `1h`, `2d`, `250ms`, or bare seconds.
pub fn duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let value: f64 = number.parse().map_err(|_| format!("{s:?} is not a duration like 10s, 5m, 1h or 250ms"))?;
    let scale_ms = match unit.trim() {
        "ms" => 1.0,
        "" | "s" => 1e3,
        "m" | "min" => 60e3,
        "h" => 3_600e3,
        "d" => 86_400e3,
        other => return Err(format!("unknown unit {other:?} in {s:?} (use ms, s, m, h or d)")),
    };
    let ms = value * scale_ms;
    if !(ms.is_finite() && ms > 0.0 && ms < 1e13) {
        return Err(format!("{s:?} must be a positive duration"));
    }
    Ok(Duration::from_millis(ms.round() as u64))
}

/// A duration in whole seconds (the master's windows are counted in seconds).
fn whole_secs(s: &str) -> Result<u64, String> {
    let d = duration(s)?;
    if d.subsec_millis() != 0 || d.as_secs() == 0 {
        return Err(format!("{s:?} must be a whole number of seconds, at least 1s"));
    }
    Ok(d.as_secs())
}

fn key(s: &str) -> Result<Key, String> {
    s.parse::<Key>()
}

fn pair(s: &str, what: &str) -> Result<(String, String), String> {
    match s.split_once('/') {
        Some((a, b)) if !a.is_empty() && !b.is_empty() && !b.contains('/') => Ok((a.to_owned(), b.to_owned())),
        _ => Err(format!("{s:?} must be {what}")),
    }
}

fn tenant_table(s: &str) -> Result<(TenantId, TableId), String> {
    let (t, n) = pair(s, "TENANT/TABLE")?;
    Ok((t.parse().map_err(|e| format!("tenant: {e}"))?, n.parse().map_err(|e| format!("table: {e}"))?))
}

fn tenant_dataset(s: &str) -> Result<(TenantId, DatasetId), String> {
    let (t, d) = pair(s, "TENANT/DATASET")?;
    Ok((t.parse().map_err(|e| format!("tenant: {e}"))?, d.parse().map_err(|e| format!("dataset: {e}"))?))
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_cli_is_consistent_and_every_subcommand_has_an_example() {
        Cli::command().debug_assert();
        for sub in Cli::command().get_subcommands() {
            let help = sub.get_after_help().map(|h| h.to_string()).unwrap_or_default();
            assert!(help.contains("lbctl "), "{} has no example", sub.get_name());
        }
    }

    #[test]
    fn durations_and_pairs_parse_or_say_why() {
        assert_eq!(duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(duration("1.5m"), Ok(Duration::from_secs(90)));
        assert_eq!(duration("2"), Ok(Duration::from_secs(2)));
        assert!(duration("10x").expect_err("unit").contains("unknown unit"));
        assert!(duration("0s").is_err() && duration("").is_err());
        assert_eq!(whole_secs("1m"), Ok(60));
        assert!(whole_secs("500ms").is_err());
        assert!(tenant_table("acme/orders").is_ok());
        assert!(tenant_table("acme").is_err() && tenant_table("a/b/c").is_err() && tenant_table("/b").is_err());
    }
}
