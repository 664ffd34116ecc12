//! The Valkey source: the agent beside a Valkey (or Redis) cluster node polls it and reports
//! each owned hash slot as a partition.
//!
//! Every `source.interval_ms` the loop sends `CLUSTER SLOT-STATS SLOTSRANGE 0 16383` (the node
//! answers for the slots it owns) and then `INFO`, and [`rates::SlotRates`] turns the two
//! readings' cumulative counters into one [`Report`] for the interval: worker = the agent's
//! `worker_id`, one partition per slot (tenant = `source.cluster_name`, table `slots`, id
//! `slot-NNNNN`, key range = the slot's 2^50-wide share of the 64-bit key space), and the node's
//! CPU, memory and network as the report's host stats. The report goes to
//! [`MetricStore::write_report`], exactly like a pushed one. `seq` is the report's timestamp in
//! milliseconds (or the previous `seq` + 1 if that is not larger), so it increases across polls
//! and across agent restarts. `rates` documents every field and how counter resets are handled.
//!
//! Cost: only the slots that changed are reported (CPU, network or ops in the interval, or a
//! new key count); an idle owned slot is left out and the master reads it as zero for that
//! interval, so on the benchmark workload a node sends about a tenth of its 5,461 slots each
//! second (`docs/benchmarks.md`). On valkey-server 9.1.2, `SLOT-STATS` over all 16,384 slots
//! took 2.2 ms of the node's main thread per call (`INFO commandstats`), 0.2 % of a 1 s interval.
//!
//! What the node offers decides what is reported, and the agent says so once, when it changes:
//! - Valkey ≥ 8.0 with `cluster-slot-stats-enabled yes`: per-slot stats and node stats.
//! - The counters are off (`SLOT-STATS` answers `key-count` only), the node is not in cluster
//!   mode, or it has no `CLUSTER SLOT-STATS` (Valkey < 8.0, Redis < 8.2): one warning naming
//!   what is missing and what gives it ([`SlotStatsMissing`]), then node stats only (reports without
//!   partitions; zero-load slots would read as idle, which is not known). The command is tried
//!   again every interval (an error reply costs the node microseconds), so enabling the counters
//!   live (`CONFIG SET cluster-slot-stats-enabled yes`) is picked up without a restart.
//! - The node is down or slow: the poll fails within the connect / command deadline, counted in
//!   `lb_agent_valkey_polls_total{outcome}`, logged when the failure starts or changes kind, and
//!   retried at the next interval on a fresh connection.
//!
//! Metrics: `lb_agent_valkey_polls_total{outcome}` (outcomes in [`PollOutcome::label`]),
//! `lb_agent_valkey_poll_seconds` (connect if needed, `CLUSTER SLOT-STATS`, `INFO`, parsing),
//! `lb_agent_valkey_idle_slots_total` (owned slots left out of a report as unchanged),
//! `lb_agent_valkey_slot_resets_total`, `lb_agent_valkey_node_ops_per_sec`,
//! `lb_agent_valkey_import_discounted_ops_total` (commands of slot imports not counted as load,
//! [`rates`]), `lb_agent_valkey_slot_stats_nodes` (1 or 0).

pub mod rates;

use std::sync::Arc;

use lb_common::ids::{TableId, TenantId, WorkerId};
use lb_common::protocol::Report;
use lb_valkey::reply::SlotStats;
use lb_valkey::{ConnectOptions, NodeAddr, NodeClient, NodeError, SlotRange};
use tokio::sync::watch;
use tokio::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use self::rates::{Naming, Reading, SLOT_TABLE, SlotRates, Step};
use crate::config::{AgentConfig, SourceConfig, ValkeySourceConfig};
use crate::store::MetricStore;

/// Why a node gives no per-slot counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotStatsMissing {
    /// `CLUSTER SLOT-STATS` is unknown: Valkey before 8.0, or Redis before 8.2.
    NoCommand,
    /// The node runs without cluster mode: it has no slots.
    NotClusterMode,
    /// The command exists but the cpu and network counters are off.
    CountersDisabled,
}

impl SlotStatsMissing {
    /// Recognises a `CLUSTER SLOT-STATS` failure that means "not offered" (as opposed to a
    /// node that is down or busy).
    pub fn from_error(error: &NodeError) -> Option<Self> {
        match error {
            NodeError::Rejected { message, .. } => {
                let message = message.to_ascii_lowercase();
                if message.contains("unknown subcommand") || message.contains("unknown command") {
                    Some(Self::NoCommand)
                } else if message.contains("cluster support disabled") {
                    Some(Self::NotClusterMode)
                } else {
                    None
                }
            }
            // The parser refuses a reply without `cpu-usec` & co. ("missing (is
            // cluster-slot-stats-enabled on?)"): that is what a node with the counters off sends.
            NodeError::Reply { source, .. } if source.detail.starts_with("missing") => Some(Self::CountersDisabled),
            _ => None,
        }
    }

    /// What is missing and which server gives it.
    pub fn explanation(self) -> &'static str {
        match self {
            Self::NoCommand => {
                "the node has no CLUSTER SLOT-STATS (Valkey 8.0 or later has it, and Redis 8.2 or later; \
                 older Valkey and Redis do not)"
            }
            Self::NotClusterMode => "the node runs without cluster mode (cluster-enabled no), so it owns no slots",
            Self::CountersDisabled => {
                "the node's per-slot cpu and network counters are off: start it with cluster-slot-stats-enabled yes \
                 or run CONFIG SET cluster-slot-stats-enabled yes (Valkey 8.0 or later)"
            }
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::NoCommand => "no_command",
            Self::NotClusterMode => "not_cluster_mode",
            Self::CountersDisabled => "counters_disabled",
        }
    }
}

/// How one poll ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollOutcome {
    /// A report with per-slot partitions was stored.
    Reported,
    /// A report with node stats only was stored (no slot stats on this node).
    NodeOnly,
    /// First reading, or counters started over: the reading is the new baseline, nothing stored.
    Baseline,
    ConnectFailed,
    /// The connect or a command deadline passed.
    Timeout,
    /// The node refused a command, the reply did not parse, or the connection broke.
    Failed,
    /// The report was built but could not be stored.
    StoreFailed,
}

impl PollOutcome {
    pub fn label(self) -> &'static str {
        match self {
            Self::Reported => "reported",
            Self::NodeOnly => "node_only",
            Self::Baseline => "baseline",
            Self::ConnectFailed => "connect_failed",
            Self::Timeout => "timeout",
            Self::Failed => "failed",
            Self::StoreFailed => "store_failed",
        }
    }

    fn of_error(error: &NodeError) -> Self {
        match error {
            NodeError::Connect { .. } => Self::ConnectFailed,
            NodeError::ConnectTimeout { .. } | NodeError::Timeout { .. } => Self::Timeout,
            NodeError::Rejected { .. }
            | NodeError::Io { .. }
            | NodeError::Poisoned { .. }
            | NodeError::Reply { .. } => Self::Failed,
        }
    }
}

/// Polls the configured node every `source.interval_ms` (read live each tick) until cancelled;
/// idles while no `[source]` is configured.
pub async fn run(store: Arc<MetricStore>, mut config: watch::Receiver<Arc<AgentConfig>>, cancel: CancellationToken) {
    let mut poller = Poller::default();
    loop {
        let (worker_id, source) = {
            let config = config.borrow_and_update();
            (config.worker_id.clone(), config.source.clone())
        };
        let Some(SourceConfig::Valkey(source)) = source else {
            poller.forget_node();
            tokio::select! {
                _ = cancel.cancelled() => return,
                changed = config.changed() => if changed.is_err() {
                    // The config sender is gone: nothing will ever configure a source.
                    cancel.cancelled().await;
                    return;
                },
            }
            continue;
        };
        let next_poll = Instant::now() + source.interval();
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = poller.poll_once(&worker_id, &source, &store) => {}
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep_until(next_poll) => {}
        }
    }
}

/// The state one watched node needs between polls.
#[derive(Debug, Default)]
pub struct Poller {
    client: Option<NodeClient>,
    /// The settings `client` was opened with; a change reconnects.
    connected_with: Option<ValkeySourceConfig>,
    rates: SlotRates,
    /// `Some(None)`: slot stats available; `Some(Some(_))`: missing; `None`: not known yet.
    slot_stats: Option<Option<SlotStatsMissing>>,
    /// The outcome of the failure being logged, so a node that stays down is logged once.
    failing: Option<PollOutcome>,
    last_seq: u64,
    machine_memory_bytes: Option<u64>,
}

impl Poller {
    /// Forgets the connection and the counter baseline.
    pub fn forget_node(&mut self) {
        self.client = None;
        self.connected_with = None;
        self.rates.clear();
        self.slot_stats = None;
        self.failing = None;
    }

    /// One poll: read the node, store the interval's report when there is one, record metrics.
    pub async fn poll_once(
        &mut self,
        worker_id: &WorkerId,
        source: &ValkeySourceConfig,
        store: &MetricStore,
    ) -> PollOutcome {
        let Some((host, port)) = source.host_port() else {
            // Config validation refuses such an address; a config that skipped it is counted, not a panic.
            if self.failing.replace(PollOutcome::Failed) != Some(PollOutcome::Failed) {
                warn!(address = %source.address, "source.address is not host:port; not polling");
            }
            metrics::counter!("lb_agent_valkey_polls_total", "outcome" => PollOutcome::Failed.label()).increment(1);
            return PollOutcome::Failed;
        };
        let addr = NodeAddr::new(host, port);
        let started = Instant::now();
        let read = self.read(&addr, source).await;
        // The node's part only; storing the report is timed by `lb_agent_store_commit_seconds`.
        metrics::histogram!("lb_agent_valkey_poll_seconds").record(started.elapsed().as_secs_f64());
        let outcome = match read {
            Ok(reading) => self.report(worker_id, source, reading, store).await,
            Err(error) => {
                let outcome = PollOutcome::of_error(&error);
                if self.failing != Some(outcome) {
                    warn!(address = %source.address, %error, outcome = outcome.label(), "valkey poll failed; retrying every interval");
                } else {
                    debug!(address = %source.address, %error, "valkey poll failed again");
                }
                self.failing = Some(outcome);
                if !matches!(error, NodeError::Rejected { .. } | NodeError::Reply { .. }) {
                    self.client = None;
                }
                outcome
            }
        };
        if !matches!(
            outcome,
            PollOutcome::ConnectFailed | PollOutcome::Timeout | PollOutcome::Failed | PollOutcome::StoreFailed
        ) && self.failing.take().is_some()
        {
            info!(address = %source.address, "valkey node answers again");
        }
        metrics::counter!("lb_agent_valkey_polls_total", "outcome" => outcome.label()).increment(1);
        outcome
    }

    async fn connection(&mut self, addr: &NodeAddr, source: &ValkeySourceConfig) -> Result<&mut NodeClient, NodeError> {
        let previous = self.connected_with.as_ref();
        if !previous.is_some_and(|old| same_connection(old, source)) {
            if let Some(old) = previous.filter(|old| old.address != source.address) {
                info!(from = %old.address, to = %source.address, "valkey source address changed: starting a fresh baseline");
                self.rates.clear();
                self.slot_stats = None;
            }
            self.client = None;
            // Adopted even if the connect below fails, so a retry is not taken for a change.
            self.connected_with = Some(source.clone());
        }
        if self.client.as_ref().is_some_and(NodeClient::is_poisoned) {
            self.client = None;
        }
        let client = match self.client.take() {
            Some(client) => client,
            None => {
                let options = ConnectOptions {
                    connect_timeout: Duration::from_millis(source.connect_timeout_ms),
                    command_timeout: Duration::from_millis(source.command_timeout_ms),
                    username: source.username.clone(),
                    password: source.password.clone(),
                };
                NodeClient::connect(addr, &options).await?
            }
        };
        Ok(self.client.insert(client))
    }

    /// `CLUSTER SLOT-STATS` then `INFO` (so `INFO`'s command count covers the slot stats
    /// request, which [`rates::AGENT_COMMANDS_PER_POLL`] subtracts).
    async fn read(&mut self, addr: &NodeAddr, source: &ValkeySourceConfig) -> Result<Reading, NodeError> {
        let client = self.connection(addr, source).await?;
        let slots = match client.slot_stats(SlotRange::all()).await {
            Ok(slots) => Ok(slots),
            Err(error) => match SlotStatsMissing::from_error(&error) {
                Some(missing) => Err(missing),
                None => return Err(error),
            },
        };
        let info = client.info().await?;
        let timestamp_ms = chrono::Utc::now().timestamp_millis();
        let at = Instant::now();
        let slots = self.note_slot_stats(source, slots, &info);
        if info.maxmemory_bytes == 0 && self.machine_memory_bytes.is_none() {
            self.machine_memory_bytes = machine_memory_bytes().await;
        }
        Ok(Reading { at, timestamp_ms, info, slots, machine_memory_bytes: self.machine_memory_bytes })
    }

    /// Logs when slot stats become available or missing (once per change).
    fn note_slot_stats(
        &mut self,
        source: &ValkeySourceConfig,
        slots: Result<Vec<SlotStats>, SlotStatsMissing>,
        info: &lb_valkey::reply::Info,
    ) -> Option<Vec<SlotStats>> {
        let now = slots.as_ref().err().copied();
        if self.slot_stats != Some(now) {
            let version = info
                .valkey_version
                .as_deref()
                .map_or_else(|| format!("redis {}", info.redis_version), |valkey| format!("valkey {valkey}"));
            match now {
                Some(missing) => warn!(
                    address = %source.address,
                    server = %version,
                    missing = missing.label(),
                    "no per-slot stats from this node: {}; reporting node stats only (cpu, ops, memory, network)",
                    missing.explanation()
                ),
                None => {
                    info!(address = %source.address, server = %version, "per-slot stats available: reporting every owned slot that changed")
                }
            }
            metrics::gauge!("lb_agent_valkey_slot_stats_nodes").set(if now.is_none() { 1.0 } else { 0.0 });
            self.slot_stats = Some(now);
        }
        slots.ok()
    }

    async fn report(
        &mut self,
        worker_id: &WorkerId,
        source: &ValkeySourceConfig,
        reading: Reading,
        store: &MetricStore,
    ) -> PollOutcome {
        let naming = Naming {
            tenant: TenantId::new(source.cluster_name.as_str()).expect("validated: source.cluster_name is an id"),
            table: TableId::new(SLOT_TABLE).expect("a valid id"),
        };
        let with_slots = reading.slots.is_some();
        let interval = match self.rates.step(reading, &naming) {
            Step::Baseline => return PollOutcome::Baseline,
            Step::Reset { reason } => {
                warn!(address = %source.address, reason = reason.label(), detail = ?reason, "valkey counters started over: skipping this interval");
                return PollOutcome::Baseline;
            }
            Step::Interval(interval) => interval,
        };
        if let Some(first) = interval.reset_slots.first() {
            warn!(
                address = %source.address,
                slots = interval.reset_slots.len(),
                first_slot = %first,
                "slot counters went down (the slot migrated away and back): skipping this interval for those slots"
            );
            metrics::counter!("lb_agent_valkey_slot_resets_total").increment(interval.reset_slots.len() as u64);
        }
        if interval.new_slots > 0 || interval.departed_slots > 0 {
            info!(
                address = %source.address,
                arrived = interval.new_slots,
                departed = interval.departed_slots,
                "owned slots changed; arrived slots are reported from the next interval"
            );
        }
        if interval.import_discounted_ops > 0 {
            debug!(
                address = %source.address,
                dropped = interval.import_discounted_ops,
                kept = interval.node_ops,
                "slots were imported this interval: their keys' commands are not counted as client load"
            );
            metrics::counter!("lb_agent_valkey_import_discounted_ops_total").increment(interval.import_discounted_ops);
        }
        metrics::counter!("lb_agent_valkey_idle_slots_total").increment(interval.idle_slots as u64);
        let secs = (interval.interval_ms as f64 / 1000.0).max(1e-3);
        metrics::gauge!("lb_agent_valkey_node_ops_per_second").set(interval.node_ops as f64 / secs);
        self.last_seq = (self.last_seq + 1).max(u64::try_from(interval.timestamp_ms).unwrap_or(0));
        let report = Report {
            worker_id: worker_id.clone(),
            seq: self.last_seq,
            timestamp_ms: interval.timestamp_ms,
            interval_ms: interval.interval_ms,
            partitions: interval.partitions,
            host: Some(interval.host),
        };
        if let Err(error) = report.validate() {
            // Every field is built from counters above; a failure here is a bug worth seeing.
            warn!(%error, "valkey source built an invalid report; dropping it");
            return PollOutcome::Failed;
        }
        match store.write_report(report).await {
            Ok(_) if with_slots => PollOutcome::Reported,
            Ok(_) => PollOutcome::NodeOnly,
            Err(error) => {
                warn!(%error, "cannot store the valkey source's report");
                PollOutcome::StoreFailed
            }
        }
    }
}

/// Whether two source configs open the same connection (interval and naming do not matter).
fn same_connection(a: &ValkeySourceConfig, b: &ValkeySourceConfig) -> bool {
    a.address == b.address
        && a.username == b.username
        && a.password == b.password
        && a.connect_timeout_ms == b.connect_timeout_ms
        && a.command_timeout_ms == b.command_timeout_ms
}

/// `MemTotal` of this machine, the node's memory bound when it has no `maxmemory`.
async fn machine_memory_bytes() -> Option<u64> {
    let text = tokio::fs::read_to_string("/proc/meminfo").await.ok()?;
    let mut counters = crate::host::Counters::default();
    crate::host::parse_meminfo(&text, &mut counters);
    (counters.memory_total_bytes > 0).then_some(counters.memory_total_bytes)
}

#[cfg(test)]
mod tests {
    use lb_valkey::reply::ParseError;

    use super::*;

    fn addr() -> NodeAddr {
        NodeAddr::new("127.0.0.1", 7000)
    }

    #[test]
    fn missing_slot_stats_are_told_apart_from_a_failing_node() {
        let rejected = |message: &str| NodeError::Rejected {
            addr: addr(),
            command: "CLUSTER SLOT-STATS",
            message: message.to_owned(),
        };
        let redis = rejected("ERR unknown subcommand 'SLOT-STATS'. Try CLUSTER HELP.");
        assert_eq!(SlotStatsMissing::from_error(&redis), Some(SlotStatsMissing::NoCommand));
        let standalone = rejected("ERR This instance has cluster support disabled");
        assert_eq!(SlotStatsMissing::from_error(&standalone), Some(SlotStatsMissing::NotClusterMode));
        let disabled = NodeError::Reply {
            addr: addr(),
            command: "CLUSTER SLOT-STATS",
            source: ParseError {
                command: "CLUSTER SLOT-STATS",
                field: "entry 0 cpu-usec".to_owned(),
                detail: "missing (is cluster-slot-stats-enabled on?)".to_owned(),
            },
        };
        assert_eq!(SlotStatsMissing::from_error(&disabled), Some(SlotStatsMissing::CountersDisabled));
        assert_eq!(SlotStatsMissing::from_error(&rejected("LOADING Valkey is loading the dataset")), None);
        let timeout =
            NodeError::Timeout { addr: addr(), command: "CLUSTER SLOT-STATS", timeout: Duration::from_secs(1) };
        assert_eq!(SlotStatsMissing::from_error(&timeout), None);
        assert_eq!(PollOutcome::of_error(&timeout), PollOutcome::Timeout);
        assert!(SlotStatsMissing::NoCommand.explanation().contains("Valkey 8.0"));
    }
}
