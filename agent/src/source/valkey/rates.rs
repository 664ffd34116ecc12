//! From two readings of a node's cumulative counters to one interval of per-slot and node stats.
//!
//! Pure: [`SlotRates::step`] takes a [`Reading`] (what `CLUSTER SLOT-STATS` and `INFO` said, when
//! and by which clock) and returns what to report for the interval since the previous reading.
//! The poll loop owns the network; tests feed readings directly.
//!
//! # What each partition field means
//!
//! Valkey 9.1.2's `CLUSTER SLOT-STATS` has four counters per slot (`key-count`, `cpu-usec`,
//! `network-bytes-in`, `network-bytes-out`) and no command count, so:
//!
//! | field | from |
//! |---|---|
//! | `cpu_time_us` | the slot's share of the main thread's busy time: the node's busy time over the interval ([`Info::main_thread_busy_secs`]) split over the slots by the mean of their shares of the `cpu-usec`, `network-bytes-in` and `network-bytes-out` deltas (see "CPU" below) |
//! | `write_bytes` | `network-bytes-in` delta (request bytes the slot's commands carried) |
//! | `read_bytes` | `network-bytes-out` delta (reply bytes), so read + write bytes = network in + out |
//! | `read_ops` | an **estimate**: the node's `total_commands_processed` delta, less the [`AGENT_COMMANDS_PER_POLL`] the agent itself sent, split over the slots in proportion to their `cpu-usec` delta (by `network-bytes-in` delta when no slot used measurable CPU), largest remainder first, so the slots' ops sum to the node's |
//! | `write_ops` | 0: Valkey does not say which commands read and which wrote, so all ops are `read_ops` |
//! | `stored_bytes` | an **approximation**: `key-count × used_memory / total keys` (INFO); it spreads the node's whole memory, fixed overhead included, evenly over its keys, so slots with large values read low and a nearly empty node's slots read high |
//! | `latency_*`, `errors`, `rejected` | 0: the server does not measure them per slot |
//!
//! **Only what changed is reported.** A slot with no CPU, network or ops in the interval and
//! the same key count is left out ([`Interval::idle_slots`] counts them): on a cluster whose
//! load touches a tenth of the slots each second that is a tenth of the samples to store,
//! serve, collect and ingest. The master reads a partition absent from a report of its worker
//! as idle for that interval, not as missing data (`docs/protocol.md`, "Reports list what
//! changed"); a slot that arrived or whose counters restarted is reported from its next interval.
//!
//! The ops estimate attributes commands that touch no key (`PING`, `INFO` from other clients)
//! to the slots too, in the same proportion; on a node serving real traffic they are a small
//! share. A slot's CPU is the signal to balance on; its ops follow it by construction.
//!
//! **Slot imports.** A node receiving slots by atomic migration counts one command per
//! imported key in `total_commands_processed` (a 200,000-key slot added 200,000 `SET`s on
//! 9.1.2) while its owned slots' CPU does not show them: split as above, a migration would
//! read as a burst of client load on the slots the receiver already had (it once made lb move
//! a slot off a receiver that was not busy at all). An interval in which
//! `total_net_cluster_slot_import_bytes` rose therefore takes the node's ops from its slots'
//! CPU at the commands per CPU-µs of recent clean intervals ([`SlotRates`] keeps an average),
//! or the raw count when that is lower ([`Interval::import_discounted_ops`] says how many
//! were dropped).
//!
//! # CPU: the node's load
//!
//! A Valkey primary executes every command on one main thread, so its capacity is one core of
//! that thread and its load is the thread's busy time: `used_active_time_main_thread` (the
//! time it spent handling events rather than waiting in `epoll`, Valkey ≥ 8.1), else
//! `used_cpu_user_main_thread + used_cpu_sys_main_thread`, else the process's
//! `used_cpu_user + used_cpu_sys` ([`Info::main_thread_busy_secs`]). I/O threads
//! (`io-threads` > 1) read and write sockets on other cores; their time is in none of the
//! main-thread counters and is not load lb can move (it follows connections, not slots), so
//! lb neither counts it nor plans on it: what the main thread does not hand off is what a
//! slot move relieves.
//!
//! A slot's `cpu-usec` counts only its commands' execution; reading the request, parsing and
//! writing the reply run on the main thread too and are, for small commands, most of its busy
//! time (a `GET` executes in ~0.2 µs of a ~10 µs round). They belong to the slot whose clients
//! cause them and leave with it, so the node's busy time is split over the slots: the slots'
//! `cpu_time_us` sum to the node's busy time, and the master plans on one dimension that adds
//! up (per-slot CPU against one core). No one counter gives the split: on 9.1.2 a script's
//! execution is not in its slot's `cpu-usec` (an `EVAL` of 200 `GET`s, ~190 µs by
//! `INFO commandstats`, showed ~2 µs), a large reply's writing is in none of them but its
//! bytes, and a script's inner replies count in `network-bytes-out`. A slot's share is the
//! mean of its shares of the three deltas: for small commands they agree, and where one
//! misses the work the others carry part of it (measured on the script slot above: 36 % by
//! `cpu-usec`, 60 % by the mean, ~75 % from the node's busy time before and after the scripts
//! began). At most 50 busy µs per `cpu-usec` µs plus 1 per byte of the slots' traffic is
//! attributed, so an idle node's cron and poll time do not land on the one slot that saw a
//! command.
//!
//! During an import the main thread also writes the incoming keys, which no owned slot's
//! counters show: the attributed busy time is then capped at the busy-per-slot-µs ratio of
//! recent clean intervals ([`SlotRates`] keeps an average) and the rest stays unattributed,
//! so a migration never reads as client load on the receiver's own slots (the export side
//! runs in a forked child and costs the source's main thread little).
//!
//! # Node (host) stats
//!
//! `cpu_cores` is 1 and `cpu_ratio` is the main thread's busy time over the interval (clamped to
//! 1), as above.
//! `memory_used_bytes` is `used_memory`, `memory_total_bytes` is `maxmemory`, or the machine's
//! memory when `maxmemory` is 0. Network rates come from `total_net_input_bytes` /
//! `total_net_output_bytes`; disk rates are 0. The node's ops per second
//! ([`Interval::node_ops`]) has no field in `HostStats`: it is the sum of the slots' ops, and a
//! metric.
//!
//! # Resets
//!
//! Counters are cumulative since the node started (`run_id`) or the slot arrived on the node.
//! - `run_id` changed, or a node counter went down (`CONFIG RESETSTAT`): the whole interval is
//!   skipped and the reading becomes the new baseline ([`Step::Reset`]).
//! - A slot counter went down (the slot migrated away and came back between two readings): that
//!   slot is skipped for the interval ([`Interval::reset_slots`]).
//! - A slot missing from the previous reading (migrated in, or slot stats just became
//!   available) only sets its baseline; a slot missing now (migrated away) is forgotten.
//! - An interval longer than [`MAX_REPORT_INTERVAL_MS`] (the node was unreachable for an hour)
//!   is skipped rather than reported as one enormous interval.

use std::collections::BTreeMap;
use std::time::Duration;

use lb_common::ids::{TableId, TenantId};
use lb_common::protocol::{HostStats, MAX_REPORT_INTERVAL_MS, PartitionStats};
use lb_valkey::Slot;
use lb_valkey::reply::{Info, SlotStats};

/// Commands the agent itself sends per poll and the node counts in `total_commands_processed`
/// between two `INFO` replies: the previous poll's `INFO` and this poll's `CLUSTER SLOT-STATS`.
pub const AGENT_COMMANDS_PER_POLL: u64 = 2;

/// Slot naming lives in `lb_valkey::naming`, shared with the ops server's adapter.
pub use lb_valkey::naming::{SLOT_KEY_SPACE_SHIFT, SLOT_TABLE, slot_key_range, slot_of_partition, slot_partition_id};

/// One poll's view of the node.
#[derive(Debug, Clone)]
pub struct Reading {
    /// Monotonic time of the reading (intervals are measured with it).
    pub at: tokio::time::Instant,
    /// Wall-clock time of the reading, epoch millis (the report's `timestamp_ms`).
    pub timestamp_ms: i64,
    pub info: Info,
    /// `None` when the node does not offer per-slot counters.
    pub slots: Option<Vec<SlotStats>>,
    /// The machine's memory, used as the node's total when `maxmemory` is 0.
    pub machine_memory_bytes: Option<u64>,
}

/// Names given to slot partitions.
#[derive(Debug, Clone)]
pub struct Naming {
    pub tenant: TenantId,
    pub table: TableId,
}

/// What to do with a reading.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// The first reading (or the first after [`SlotRates::clear`]): nothing to report yet.
    Baseline,
    /// The counters started over (restart, `CONFIG RESETSTAT`) or the interval is too long:
    /// nothing reported, this reading is the new baseline.
    Reset { reason: ResetReason },
    /// One interval to report.
    Interval(Interval),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResetReason {
    /// `run_id` changed: the node restarted.
    Restarted { previous_run_id: String, run_id: String },
    /// A node counter is lower than before with the same `run_id`.
    CounterWentDown { counter: &'static str },
    /// The readings are further apart than a report may span.
    TooLong { elapsed: Duration },
}

impl ResetReason {
    /// Bounded label for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Restarted { .. } => "restarted",
            Self::CounterWentDown { .. } => "counter_went_down",
            Self::TooLong { .. } => "interval_too_long",
        }
    }
}

/// One interval's stats.
#[derive(Debug, Clone, PartialEq)]
pub struct Interval {
    pub timestamp_ms: i64,
    pub interval_ms: u64,
    /// One per slot owned at both readings with sane counters; empty without slot stats.
    pub partitions: Vec<PartitionStats>,
    pub host: HostStats,
    /// `total_commands_processed` delta less the agent's own commands.
    pub node_ops: u64,
    /// Slots whose counters went down (skipped this interval).
    pub reset_slots: Vec<Slot>,
    /// Slots seen for the first time (baseline only).
    pub new_slots: usize,
    /// Slots owned before and not now.
    pub departed_slots: usize,
    /// Owned slots left out of `partitions`: no CPU, network or ops, and the same key count.
    pub idle_slots: usize,
    /// Commands dropped from `node_ops` because slots were being imported (see the module doc).
    pub import_discounted_ops: u64,
}

#[derive(Debug, Clone)]
struct Previous {
    at: tokio::time::Instant,
    info: Info,
    slots: BTreeMap<Slot, SlotStats>,
}

/// Weight of the newest clean interval in the commands-per-CPU-µs and busy-per-CPU-µs averages.
const OPS_PER_CPU_SMOOTHING: f64 = 0.3;
/// The most main-thread busy time one µs of a slot's `cpu-usec` may carry: a `GET` of a few
/// bytes costs ~1 µs to execute in a ~10 µs round, so 50 leaves room for the cheapest commands
/// while a node whose slots barely ran (its busy time is cron and the agent's own polls) does
/// not pin that time on the one slot that saw a command.
const MAX_BUSY_PER_SLOT_CPU: f64 = 50.0;
/// The most main-thread busy time (µs) one byte of a slot's network traffic may carry, on top:
/// reading a request and writing its reply cost well under a µs per byte, so traffic whose
/// execution `cpu-usec` misses (scripts, large replies) is covered, and an idle node's busy
/// time is still not pinned on a few bytes.
const MAX_BUSY_PER_SLOT_BYTE: f64 = 1.0;

/// The counter state between readings.
#[derive(Debug, Clone, Default)]
pub struct SlotRates {
    previous: Option<Previous>,
    /// Client commands per µs of slot CPU over recent intervals without slot imports.
    ops_per_cpu_usec: Option<f64>,
    /// Main-thread busy µs per µs of slot CPU over the same intervals.
    busy_per_cpu_usec: Option<f64>,
}

impl SlotRates {
    pub fn new() -> Self {
        Self::default()
    }

    /// Forgets the baseline (another node is watched now).
    pub fn clear(&mut self) {
        self.previous = None;
        self.ops_per_cpu_usec = None;
        self.busy_per_cpu_usec = None;
    }

    /// Turns `now` into the interval since the previous reading and keeps `now` as the baseline.
    pub fn step(&mut self, now: Reading, naming: &Naming) -> Step {
        let slots: BTreeMap<Slot, SlotStats> = now.slots.iter().flatten().map(|stats| (stats.slot, *stats)).collect();
        let next = Previous { at: now.at, info: now.info.clone(), slots };
        let Some(previous) = self.previous.replace(next) else { return Step::Baseline };
        let current = self.previous.as_ref().expect("just stored");

        if previous.info.run_id != now.info.run_id {
            return Step::Reset {
                reason: ResetReason::Restarted { previous_run_id: previous.info.run_id, run_id: now.info.run_id },
            };
        }
        if let Some(counter) = node_counter_went_down(&previous.info, &now.info) {
            return Step::Reset { reason: ResetReason::CounterWentDown { counter } };
        }
        let elapsed = now.at.saturating_duration_since(previous.at);
        let interval_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX).max(1);
        if interval_ms > MAX_REPORT_INTERVAL_MS {
            return Step::Reset { reason: ResetReason::TooLong { elapsed } };
        }

        let raw_ops = now
            .info
            .total_commands_processed
            .saturating_sub(previous.info.total_commands_processed)
            .saturating_sub(AGENT_COMMANDS_PER_POLL);

        let mut deltas = Vec::new();
        let mut reset_slots = Vec::new();
        let mut new_slots = 0;
        for (slot, stats) in &current.slots {
            match previous.slots.get(slot) {
                None => new_slots += 1,
                Some(before) => match slot_delta(before, stats) {
                    Some(delta) => deltas.push((*stats, delta)),
                    None => reset_slots.push(*slot),
                },
            }
        }
        let departed_slots = previous.slots.keys().filter(|slot| !current.slots.contains_key(slot)).count();

        let slot_cpu: u64 = deltas.iter().map(|(_, d)| d.cpu_usec).sum();
        let importing =
            match (previous.info.total_net_cluster_slot_import_bytes, now.info.total_net_cluster_slot_import_bytes) {
                (Some(before), Some(after)) => after > before,
                _ => false,
            };
        let node_ops = if importing {
            // Commands the owned slots' CPU explains; unknown before a clean interval was seen.
            let explained = self.ops_per_cpu_usec.map(|k| (k * slot_cpu as f64).round() as u64);
            explained.map_or(raw_ops, |e| e.min(raw_ops))
        } else {
            if slot_cpu > 0 && !deltas.is_empty() {
                let k = raw_ops as f64 / slot_cpu as f64;
                self.ops_per_cpu_usec =
                    Some(self.ops_per_cpu_usec.map_or(k, |old| old + OPS_PER_CPU_SMOOTHING * (k - old)));
            }
            raw_ops
        };
        let busy_us = busy_delta_secs(&previous.info, &now.info).max(0.0) * 1e6;
        let slot_bytes: u64 = deltas.iter().map(|(_, d)| d.bytes_in.saturating_add(d.bytes_out)).sum();
        let attributed_us = if importing {
            // The import's writes are not the owned slots' load (see the module doc).
            busy_us.min(self.busy_per_cpu_usec.unwrap_or(1.0) * slot_cpu as f64)
        } else {
            let cap = MAX_BUSY_PER_SLOT_CPU * slot_cpu as f64 + MAX_BUSY_PER_SLOT_BYTE * slot_bytes as f64;
            let attributed = busy_us.min(cap);
            if slot_cpu > 0 {
                let k = attributed / slot_cpu as f64;
                self.busy_per_cpu_usec =
                    Some(self.busy_per_cpu_usec.map_or(k, |old| old + OPS_PER_CPU_SMOOTHING * (k - old)));
            }
            attributed
        };
        let busy_shares = busy_shares(&deltas);
        let ops = split_ops(node_ops, &deltas);
        let total_keys = now.info.total_keys();
        let mut idle_slots = 0;
        let partitions = deltas
            .iter()
            .zip(ops)
            .zip(busy_shares)
            .filter(|(((stats, delta), ops), _)| {
                // Only what changed: an idle slot whose key count held is left out, and the
                // master reads it as zero for this interval (the node reported, the slot is absent).
                let keys_held = previous.slots.get(&stats.slot).is_some_and(|b| b.key_count == stats.key_count);
                let idle = *ops == 0 && delta.is_zero() && keys_held;
                idle_slots += usize::from(idle);
                !idle
            })
            .map(|(((stats, delta), ops), share)| PartitionStats {
                tenant: naming.tenant.clone(),
                table: naming.table.clone(),
                partition_id: slot_partition_id(stats.slot),
                key_range: slot_key_range(stats.slot),
                read_ops: ops,
                write_ops: 0,
                read_bytes: delta.bytes_out,
                write_bytes: delta.bytes_in,
                errors: 0,
                rejected: 0,
                latency_p50_us: 0.0,
                latency_p99_us: 0.0,
                cpu_time_us: (attributed_us * share).round() as u64,
                stored_bytes: approximate_stored_bytes(stats.key_count, now.info.used_memory_bytes, total_keys),
                sketch: None,
            })
            .collect();

        Step::Interval(Interval {
            timestamp_ms: now.timestamp_ms,
            interval_ms,
            partitions,
            host: node_host_stats(&previous.info, &now.info, elapsed, now.machine_memory_bytes),
            node_ops,
            reset_slots,
            new_slots,
            departed_slots,
            idle_slots,
            import_discounted_ops: raw_ops - node_ops,
        })
    }
}

/// A slot's counter increases over one interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SlotDelta {
    cpu_usec: u64,
    bytes_in: u64,
    bytes_out: u64,
}

impl SlotDelta {
    fn is_zero(&self) -> bool {
        self.cpu_usec == 0 && self.bytes_in == 0 && self.bytes_out == 0
    }
}

/// `None` when any counter went down: the slot left and came back, so the difference means
/// nothing.
fn slot_delta(before: &SlotStats, now: &SlotStats) -> Option<SlotDelta> {
    Some(SlotDelta {
        cpu_usec: now.cpu_usec.checked_sub(before.cpu_usec)?,
        bytes_in: now.network_bytes_in.checked_sub(before.network_bytes_in)?,
        bytes_out: now.network_bytes_out.checked_sub(before.network_bytes_out)?,
    })
}

fn node_counter_went_down(before: &Info, now: &Info) -> Option<&'static str> {
    if now.total_commands_processed < before.total_commands_processed {
        Some("total_commands_processed")
    } else if now.total_net_input_bytes < before.total_net_input_bytes {
        Some("total_net_input_bytes")
    } else if now.total_net_output_bytes < before.total_net_output_bytes {
        Some("total_net_output_bytes")
    } else if now.used_cpu_user_secs + now.used_cpu_sys_secs < before.used_cpu_user_secs + before.used_cpu_sys_secs {
        Some("used_cpu_user + used_cpu_sys")
    } else if busy_delta_secs(before, now) < 0.0 {
        Some("used_active_time_main_thread")
    } else {
        None
    }
}

/// Each slot's share of the main thread's busy time: the mean of its shares of the slots'
/// `cpu-usec`, `network-bytes-in` and `network-bytes-out` (of those any slot moved), so the
/// shares sum to 1 whenever any slot did something. Each counter misses some of the work: a
/// script's own execution is not in its slot's `cpu-usec` on 9.1.2 (an `EVAL` of 200 `GET`s
/// showed ~2 µs of a ~190 µs call), nor is the writing of a large reply, while the replies of
/// a script's inner calls count in `network-bytes-out`; for the small commands of most
/// traffic the three agree.
fn busy_shares(deltas: &[(SlotStats, SlotDelta)]) -> Vec<f64> {
    let columns: [fn(&SlotDelta) -> u64; 3] = [|d| d.cpu_usec, |d| d.bytes_in, |d| d.bytes_out];
    let totals = columns.map(|column| deltas.iter().map(|(_, d)| column(d) as f64).sum::<f64>());
    let used = totals.iter().filter(|&&t| t > 0.0).count();
    deltas
        .iter()
        .map(|(_, d)| {
            let shares = columns.iter().zip(totals).filter(|(_, t)| *t > 0.0).map(|(column, t)| column(d) as f64 / t);
            if used == 0 { 0.0 } else { shares.sum::<f64>() / used as f64 }
        })
        .collect()
}

/// Splits `node_ops` over the slots by CPU share (network-in share when no slot used measurable
/// CPU), largest remainder first, so the parts sum to `node_ops` whenever any slot has weight.
fn split_ops(node_ops: u64, deltas: &[(SlotStats, SlotDelta)]) -> Vec<u64> {
    let by_cpu: u128 = deltas.iter().map(|(_, d)| u128::from(d.cpu_usec)).sum();
    let weight = |d: &SlotDelta| if by_cpu > 0 { u128::from(d.cpu_usec) } else { u128::from(d.bytes_in) };
    let total: u128 = deltas.iter().map(|(_, d)| weight(d)).sum();
    if total == 0 || node_ops == 0 {
        return vec![0; deltas.len()];
    }
    let mut parts: Vec<(u64, u128)> = deltas
        .iter()
        .map(|(_, d)| {
            let exact = u128::from(node_ops) * weight(d);
            let part = u64::try_from(exact / total).expect("a share of a u64 fits a u64");
            (part, exact % total)
        })
        .collect();
    let assigned: u64 = parts.iter().map(|(part, _)| part).sum();
    let mut left = node_ops - assigned;
    let mut by_remainder: Vec<usize> = (0..parts.len()).collect();
    by_remainder.sort_by(|&a, &b| parts[b].1.cmp(&parts[a].1).then(a.cmp(&b)));
    for index in by_remainder {
        if left == 0 || parts[index].1 == 0 {
            break;
        }
        parts[index].0 += 1;
        left -= 1;
    }
    parts.into_iter().map(|(part, _)| part).collect()
}

/// `key_count × used_memory / total_keys`; 0 when the node holds no key.
fn approximate_stored_bytes(key_count: u64, used_memory_bytes: u64, total_keys: u64) -> u64 {
    if total_keys == 0 {
        return 0;
    }
    let bytes = u128::from(key_count) * u128::from(used_memory_bytes) / u128::from(total_keys);
    u64::try_from(bytes).unwrap_or(u64::MAX)
}

/// The main thread's busy seconds between two readings ([`Info::main_thread_busy_secs`]),
/// from the same counter on both sides (the process's CPU if they disagree).
fn busy_delta_secs(before: &Info, now: &Info) -> f64 {
    let ((b, before_source), (n, now_source)) = (before.main_thread_busy_secs(), now.main_thread_busy_secs());
    if before_source == now_source {
        n - b
    } else {
        (now.used_cpu_user_secs + now.used_cpu_sys_secs) - (before.used_cpu_user_secs + before.used_cpu_sys_secs)
    }
}

fn node_host_stats(before: &Info, now: &Info, elapsed: Duration, machine_memory_bytes: Option<u64>) -> HostStats {
    let secs = elapsed.as_secs_f64().max(1e-3);
    let cpu_secs = busy_delta_secs(before, now);
    let per_sec = |a: u64, b: u64| b.saturating_sub(a) as f64 / secs;
    let total = if now.maxmemory_bytes > 0 { now.maxmemory_bytes } else { machine_memory_bytes.unwrap_or(0) };
    HostStats {
        cpu_ratio: if cpu_secs.is_finite() { (cpu_secs / secs).clamp(0.0, 1.0) } else { 0.0 },
        cpu_cores: 1,
        memory_used_bytes: now.used_memory_bytes,
        memory_total_bytes: total.max(now.used_memory_bytes),
        net_rx_bytes_per_sec: per_sec(before.total_net_input_bytes, now.total_net_input_bytes),
        net_tx_bytes_per_sec: per_sec(before.total_net_output_bytes, now.total_net_output_bytes),
        disk_read_bytes_per_sec: 0.0,
        disk_write_bytes_per_sec: 0.0,
    }
}

#[cfg(test)]
mod tests {
    use lb_valkey::reply::KeyspaceDb;

    use super::*;

    fn naming() -> Naming {
        Naming { tenant: "valkey".parse().expect("id"), table: SLOT_TABLE.parse().expect("id") }
    }

    fn info(run_id: &str, commands: u64, cpu_secs: f64, keys: u64) -> Info {
        Info {
            redis_version: "7.2.4".to_owned(),
            valkey_version: Some("9.1.2".to_owned()),
            run_id: run_id.to_owned(),
            uptime_secs: 10,
            used_cpu_user_secs: cpu_secs,
            used_cpu_sys_secs: 0.0,
            main_thread_cpu_secs: Some(cpu_secs * 1.1),
            main_thread_active_secs: Some(cpu_secs),
            total_commands_processed: commands,
            used_memory_bytes: 1_000_000,
            maxmemory_bytes: 0,
            total_net_input_bytes: commands * 30,
            total_net_output_bytes: commands * 10,
            total_net_cluster_slot_import_bytes: Some(0),
            keyspace: vec![KeyspaceDb { db: 0, keys, expires: 0, avg_ttl_ms: 0 }],
        }
    }

    fn slot(n: u16, keys: u64, cpu: u64, bytes_in: u64) -> SlotStats {
        SlotStats {
            slot: Slot::new(n).expect("slot"),
            key_count: keys,
            cpu_usec: cpu,
            network_bytes_in: bytes_in,
            network_bytes_out: bytes_in / 3,
        }
    }

    fn reading(at: tokio::time::Instant, info: Info, slots: Option<Vec<SlotStats>>) -> Reading {
        Reading { at, timestamp_ms: 1_764_478_800_000, info, slots, machine_memory_bytes: Some(8_000_000) }
    }

    fn interval(step: Step) -> Interval {
        match step {
            Step::Interval(interval) => interval,
            other => panic!("expected an interval, got {other:?}"),
        }
    }

    #[test]
    fn deltas_become_partition_stats_and_ops_follow_cpu() {
        let t0 = tokio::time::Instant::now();
        let mut rates = SlotRates::new();
        let first = reading(t0, info("a", 100, 1.0, 40), Some(vec![slot(1, 10, 100, 1000), slot(2, 30, 50, 500)]));
        assert_eq!(rates.step(first, &naming()), Step::Baseline);
        // 1,002 commands in 2 s: 1,000 from clients, 2 from the agent; slot 1 used 3× slot 2's
        // CPU, and the main thread was busy 4× the slots' CPU (2,000 µs of active time).
        let now = reading(
            t0 + Duration::from_secs(2),
            info("a", 1_102, 1.002, 40),
            Some(vec![slot(1, 10, 400, 4000), slot(2, 30, 150, 1500)]),
        );
        let i = interval(rates.step(now, &naming()));
        assert_eq!((i.interval_ms, i.node_ops), (2000, 1000));
        let [p1, p2] = &i.partitions[..] else { panic!("two partitions: {:?}", i.partitions) };
        assert_eq!((p1.partition_id.as_str(), p1.cpu_time_us, p1.read_ops), ("slot-00001", 1500, 750));
        assert_eq!((p2.cpu_time_us, p2.read_ops, p2.write_ops), (500, 250, 0), "the busy time split by cpu-usec");
        assert_eq!((p1.write_bytes, p1.read_bytes), (3000, 4000 / 3 - 1000 / 3));
        assert_eq!((p1.stored_bytes, p2.stored_bytes), (250_000, 750_000), "key share of used_memory");
        assert_eq!(p1.tenant.as_str(), "valkey");
        assert!((i.host.cpu_ratio - 0.001).abs() < 1e-9, "active time over the interval: {}", i.host.cpu_ratio);
        assert_eq!((i.host.cpu_cores, i.host.memory_total_bytes), (1, 8_000_000));
        assert_eq!(i.host.net_rx_bytes_per_sec, 1002.0 * 30.0 / 2.0);
    }

    #[test]
    fn an_import_does_not_read_as_client_load_on_the_receiver() {
        let t0 = tokio::time::Instant::now();
        let mut rates = SlotRates::new();
        let at = |secs: u64| t0 + Duration::from_secs(secs);
        let with_import = |mut i: Info, bytes: u64| {
            i.total_net_cluster_slot_import_bytes = Some(bytes);
            i
        };
        let slots = |cpu: u64| Some(vec![slot(1, 10, cpu, cpu * 10), slot(2, 10, cpu, cpu * 10)]);
        assert_eq!(rates.step(reading(at(0), info("a", 0, 1.0, 20), slots(0)), &naming()), Step::Baseline);
        // Clean: 1,000 client commands for 2,000 µs of slot CPU (0.5 per µs).
        let clean = interval(rates.step(reading(at(1), info("a", 1_002, 1.08, 20), slots(1_000)), &naming()));
        assert_eq!((clean.node_ops, clean.import_discounted_ops), (1_000, 0));
        // The same client load while 5,000 keys arrive: 6,002 commands, the slots' CPU unchanged.
        let during = reading(at(2), with_import(info("a", 7_004, 1.24, 20), 640_000), slots(2_000));
        let during = interval(rates.step(during, &naming()));
        assert_eq!((during.node_ops, during.import_discounted_ops), (1_000, 5_000));
        assert_eq!(during.partitions.iter().map(|p| p.read_ops).sum::<u64>(), 1_000);
        // Busy 0.08 s before (40 busy µs per slot µs), 0.16 s while importing: the slots keep
        // the clean ratio, the import's writes stay unattributed.
        assert_eq!(clean.partitions.iter().map(|p| p.cpu_time_us).sum::<u64>(), 80_000);
        assert_eq!(during.partitions.iter().map(|p| p.cpu_time_us).sum::<u64>(), 80_000);
        assert!((during.host.cpu_ratio - 0.16).abs() < 1e-9, "the node itself was busy: {}", during.host.cpu_ratio);
        // Quiet again: the raw count is the load, and a real surge is never discounted.
        let after = reading(at(3), with_import(info("a", 10_006, 1.4, 20), 640_000), slots(3_000));
        let after = interval(rates.step(after, &naming()));
        assert_eq!((after.node_ops, after.import_discounted_ops), (3_000, 0));
    }

    #[test]
    fn busy_time_without_slot_work_is_not_pinned_on_one_slot() {
        let t0 = tokio::time::Instant::now();
        let mut rates = SlotRates::new();
        let slots = |cpu: u64| Some(vec![slot(1, 10, cpu, 0), slot(2, 10, 0, 0)]);
        rates.step(reading(t0, info("a", 0, 1.0, 20), slots(0)), &naming());
        // 10 ms of busy time (cron, the agent's polls) and 1 µs of slot CPU: at most 50 µs on it.
        let i = interval(rates.step(reading(t0 + Duration::from_secs(1), info("a", 3, 1.01, 20), slots(1)), &naming()));
        assert_eq!(i.partitions.iter().map(|p| p.cpu_time_us).collect::<Vec<_>>(), [50]);
        assert!((i.host.cpu_ratio - 0.01).abs() < 1e-9, "{}", i.host.cpu_ratio);
    }

    #[test]
    fn a_script_slot_gets_the_busy_time_its_cpu_usec_misses() {
        // Two seconds measured on valkey-server 9.1.2: slot 1097 served `EVAL`s of 200 `GET`s
        // (~190 µs each by INFO commandstats) and showed 1,860 cpu-usec; 4,095 other slots
        // served plain GET/SET, here as one slot with their sums. Busy: 295,017 µs.
        let t0 = tokio::time::Instant::now();
        let mut rates = SlotRates::new();
        let stats = |n: u16, cpu: u64, bytes_in: u64, bytes_out: u64| SlotStats {
            slot: Slot::new(n).expect("slot"),
            key_count: 400,
            cpu_usec: cpu,
            network_bytes_in: bytes_in,
            network_bytes_out: bytes_out,
        };
        let first = vec![stats(1097, 0, 0, 0), stats(5000, 0, 0, 0)];
        rates.step(reading(t0, info("a", 0, 1.0, 800), Some(first)), &naming());
        let now = vec![stats(1097, 1_860, 111_060, 13_990_880), stats(5000, 3_344, 130_917, 75_547)];
        let i = interval(
            rates.step(reading(t0 + Duration::from_secs(2), info("a", 10_002, 1.295_017, 800), Some(now)), &naming()),
        );
        let cpu: Vec<u64> = i.partitions.iter().map(|p| p.cpu_time_us).collect();
        assert_eq!(cpu.iter().sum::<u64>(), 295_017, "all of the busy time is the slots' (cpu-usec × 50 would cap it)");
        // cpu-usec alone gives the script slot 36 %; with its network shares (46 % in, 99 % out)
        // it gets 60 %. The node was busy ~0.04 of a core before the scripts started: ~75 %.
        let share = cpu[0] as f64 / 295_017.0;
        assert!((0.59..0.62).contains(&share), "{share}");
    }

    #[test]
    fn the_ops_split_sums_to_the_node_total_and_falls_back_to_network_in() {
        let d = |cpu, bytes_in| (slot(0, 0, 0, 0), SlotDelta { cpu_usec: cpu, bytes_in, bytes_out: 0 });
        let parts = split_ops(10, &[d(1, 0), d(1, 0), d(1, 0)]);
        assert_eq!(parts.iter().sum::<u64>(), 10, "{parts:?}");
        assert!(parts.iter().all(|p| (3..=4).contains(p)), "{parts:?}");
        assert_eq!(split_ops(9, &[d(0, 100), d(0, 200)]), vec![3, 6], "by network-in without CPU");
        assert_eq!(split_ops(9, &[d(0, 0), d(0, 0)]), vec![0, 0], "nothing to attribute to");
        assert_eq!(split_ops(u64::MAX, &[d(u64::MAX, 0), d(1, 0)]).iter().sum::<u64>(), u64::MAX, "no overflow");
    }

    #[test]
    fn a_restart_or_a_stats_reset_skips_the_interval_and_rebases() {
        let t0 = tokio::time::Instant::now();
        let mut rates = SlotRates::new();
        rates.step(reading(t0, info("a", 1_000_000, 50.0, 1), Some(vec![slot(1, 1, 9_000_000, 1 << 30)])), &naming());
        let restarted = reading(t0 + Duration::from_secs(1), info("b", 5, 0.01, 0), Some(vec![slot(1, 0, 10, 100)]));
        let step = rates.step(restarted, &naming());
        assert!(matches!(step, Step::Reset { reason: ResetReason::Restarted { .. } }), "{step:?}");
        let after = reading(t0 + Duration::from_secs(2), info("b", 107, 0.01004, 0), Some(vec![slot(1, 0, 30, 300)]));
        let i = interval(rates.step(after, &naming()));
        assert_eq!((i.node_ops, i.partitions[0].cpu_time_us, i.partitions[0].read_ops), (100, 40, 100));

        let resetstat = reading(t0 + Duration::from_secs(3), info("b", 3, 0.03, 0), Some(vec![slot(1, 0, 0, 0)]));
        let step = rates.step(resetstat, &naming());
        assert_eq!(step, Step::Reset { reason: ResetReason::CounterWentDown { counter: "total_commands_processed" } });
    }

    #[test]
    fn slots_that_move_are_skipped_or_start_from_their_first_reading() {
        let t0 = tokio::time::Instant::now();
        let mut rates = SlotRates::new();
        let before = vec![slot(1, 1, 500, 5000), slot(2, 1, 500, 5000), slot(3, 1, 10, 10)];
        rates.step(reading(t0, info("a", 100, 1.0, 3), Some(before)), &naming());
        // Slot 1 left and came back (counters restarted low), slot 2 is steady, slot 3 left,
        // slot 4 arrived with large counters from its life elsewhere.
        let now = vec![slot(1, 1, 20, 200), slot(2, 1, 700, 7000), slot(4, 1, 1_000_000, 1 << 20)];
        let i =
            interval(rates.step(reading(t0 + Duration::from_secs(1), info("a", 202, 1.0004, 3), Some(now)), &naming()));
        assert_eq!(i.reset_slots, vec![Slot::new(1).expect("slot")]);
        assert_eq!((i.new_slots, i.departed_slots), (1, 1));
        let ids: Vec<&str> = i.partitions.iter().map(|p| p.partition_id.as_str()).collect();
        assert_eq!(ids, ["slot-00002"], "only the slot with a sane delta is reported");
        assert_eq!((i.partitions[0].cpu_time_us, i.partitions[0].read_ops), (400, 100), "busy 2× its cpu-usec");
        let later = vec![slot(1, 1, 50, 500), slot(2, 1, 700, 7000), slot(4, 1, 1_000_300, (1 << 20) + 3000)];
        let i = interval(
            rates.step(reading(t0 + Duration::from_secs(2), info("a", 302, 1.00139, 3), Some(later)), &naming()),
        );
        let cpu: Vec<(&str, u64)> = i.partitions.iter().map(|p| (p.partition_id.as_str(), p.cpu_time_us)).collect();
        assert_eq!(cpu, [("slot-00001", 90), ("slot-00004", 900)], "idle slot 2 is left out");
        assert_eq!(i.idle_slots, 1);
    }

    #[test]
    fn only_slots_that_changed_are_reported() {
        let t0 = tokio::time::Instant::now();
        let mut rates = SlotRates::new();
        let at = |secs: u64| t0 + Duration::from_secs(secs);
        let slots = |busy_cpu: u64, quiet_keys: u64| {
            Some(vec![slot(1, 5, busy_cpu, busy_cpu * 10), slot(2, quiet_keys, 7, 70), slot(3, 9, 3, 30)])
        };
        rates.step(reading(at(0), info("a", 100, 1.0, 23), slots(100, 9)), &naming());
        // Slot 1 served commands; slots 2 and 3 did nothing.
        let i = interval(rates.step(reading(at(1), info("a", 152, 1.1, 23), slots(200, 9)), &naming()));
        let ids: Vec<&str> = i.partitions.iter().map(|p| p.partition_id.as_str()).collect();
        assert_eq!(ids, ["slot-00001"]);
        assert_eq!((i.idle_slots, i.partitions[0].read_ops), (2, 50), "the busy slot has all the ops");
        // Keys expired or were deleted in slot 2 without a command of its own to show: reported.
        let i = interval(rates.step(reading(at(2), info("a", 154, 1.2, 22), slots(200, 8)), &naming()));
        let ids: Vec<(&str, u64)> = i.partitions.iter().map(|p| (p.partition_id.as_str(), p.read_ops)).collect();
        assert_eq!(ids, [("slot-00002", 0)]);
        assert_eq!(i.idle_slots, 2);
    }

    #[test]
    fn without_slot_stats_only_node_stats_are_reported_and_a_long_gap_rebases() {
        let t0 = tokio::time::Instant::now();
        let mut rates = SlotRates::new();
        rates.step(reading(t0, info("a", 100, 1.0, 0), None), &naming());
        let i = interval(rates.step(reading(t0 + Duration::from_secs(1), info("a", 302, 1.5, 0), None), &naming()));
        assert!(i.partitions.is_empty());
        assert_eq!(i.node_ops, 200);
        assert!((i.host.cpu_ratio - 0.5).abs() < 1e-9);
        let late = reading(t0 + Duration::from_secs(2 * 3600), info("a", 400, 2.0, 0), None);
        assert!(matches!(rates.step(late, &naming()), Step::Reset { reason: ResetReason::TooLong { .. } }));
    }
}
