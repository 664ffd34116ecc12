//! Scenario files (`configs/scenarios/*.toml`): the cluster's shape, its tables and datasets with
//! their workloads, and a timeline of events.
//!
//! Contract: parsing is strict (`deny_unknown_fields` on every table) and [`Scenario::validate`]
//! names every bad field (`tables[1].workloads[0].ramp_secs`), so a typo never silently turns
//! into a default. A scenario that parses and validates always builds a cluster.

use std::path::{Path, PathBuf};

use lb_common::ids::{DatasetId, GroupId, Key, TableId, TenantId, WorkerId, ZoneId};
use lb_common::protocol::{ActionKind, LoadBalancing};
use lb_common::validate::{Scope, ValidationError, Validator};
use serde::{Deserialize, Serialize};

/// 2025-12-01T00:00:00Z: a fixed epoch so virtual runs print the same timestamps every time.
pub const DEFAULT_START_MS: i64 = 1_764_547_200_000;
/// One hour: the length the benchmark and most scenarios run for.
pub const DEFAULT_DURATION_SECS: u64 = 3_600;
/// 1 GiB per partition: a move then takes ~10 s at the default move rate, visible but not slow.
pub const DEFAULT_STORED_BYTES_PER_PARTITION: u64 = 1 << 30;
/// 4 tokens per worker: enough shards per worker for hash-sharded datasets to spread.
pub const DEFAULT_TOKENS_PER_WORKER: u32 = 4;
/// 1 KiB per op: a typical small-record key-value workload.
pub const DEFAULT_VALUE_BYTES: u64 = 1024;
/// 80 % reads: the common read-heavy mix.
pub const DEFAULT_READ_RATIO: f64 = 0.8;
/// 1024 zipf segments: fine enough that a split always finds load on both sides.
pub const DEFAULT_ZIPF_SEGMENTS: u32 = 1024;
/// 1.0: classic zipf, the segment of rank `r` gets weight `1/r`.
pub const DEFAULT_ZIPF_EXPONENT: f64 = 1.0;
/// A day: the period of the daily modulation.
pub const DEFAULT_PERIOD_SECS: u64 = 86_400;
/// Classic zipf skew of keys over a dataset's shards under fingerprint placement.
pub const DEFAULT_KEY_SKEW_EXPONENT: f64 = 1.0;
/// Most partitions one table may start with; keeps a typo from allocating gigabytes.
pub const MAX_PARTITIONS_PER_TABLE: u32 = 1_000_000;
/// Most workers in a cluster: far beyond the 1,000 the benchmark needs.
pub const MAX_WORKERS: u32 = 100_000;

/// Why a scenario file was not loaded.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("cannot read scenario {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("scenario {} does not parse: {message}", path.display())]
    Parse { path: PathBuf, message: String },
    #[error("scenario {} is invalid: {source}", path.display())]
    Invalid { path: PathBuf, source: ValidationError },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Seeds every generator: the same seed gives the same run.
    #[serde(default)]
    pub seed: u64,
    #[serde(default = "default_start_ms")]
    pub start_ms: i64,
    #[serde(default = "default_duration_secs")]
    pub duration_secs: u64,
    pub cluster: ClusterSpec,
    #[serde(default)]
    pub tables: Vec<TableSpec>,
    #[serde(default)]
    pub datasets: Vec<DatasetSpec>,
    #[serde(default)]
    pub timeline: Vec<TimelineEvent>,
    /// The master's policies this scenario is balanced under: `[master.planner]`,
    /// `[master.evaluation]`, `[master.placement]` and `[master.offline]`, with the keys of
    /// `master.toml`, laid over the defaults. The testbed does not read it: `lb sim` balances
    /// the scenario with it (peer strategies ignore it) and `lb up` writes it into the master's
    /// config file. Empty (the default): the master's defaults.
    #[serde(default, skip_serializing_if = "toml::Table::is_empty")]
    pub master: toml::Table,
}

/// The sections a scenario's `[master]` may set: the policies, never where the master listens
/// or stores.
pub const MASTER_POLICY_SECTIONS: [&str; 4] = ["planner", "evaluation", "placement", "offline"];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSpec {
    /// Workers are named `w-0000`, `w-0001`, ...
    pub workers: u32,
    pub worker_ops_per_sec: f64,
    pub worker_bytes_per_sec: f64,
    pub partition_limit_ops_per_sec: f64,
    pub partition_limit_bytes_per_sec: f64,
    #[serde(default = "default_tokens_per_worker")]
    pub tokens_per_worker: u32,
    /// Dedicated groups: each takes the last `workers` not yet grouped.
    #[serde(default)]
    pub groups: Vec<GroupSpec>,
    /// Availability zones: each takes the next `workers` in order (`w-0000` first), so the
    /// first zone gets the first workers. Empty (the default): no zones. When given, the zones'
    /// workers add up to all of them.
    #[serde(default)]
    pub zones: Vec<ZoneSpec>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZoneSpec {
    pub zone: ZoneId,
    pub workers: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupSpec {
    pub group: GroupId,
    pub workers: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableSpec {
    pub tenant: TenantId,
    pub table: TableId,
    /// Equal-width partitions over the whole 64-bit key space, placed round robin on workers.
    pub partitions: u32,
    #[serde(default = "default_stored_bytes")]
    pub stored_bytes_per_partition: u64,
    #[serde(default)]
    pub workloads: Vec<WorkloadSpec>,
}

/// One component of a table's workload: the fields every kind has, and its [`WorkloadKind`]
/// with the fields of that kind. (serde cannot combine `flatten` with `deny_unknown_fields`; the
/// flattened [`WorkloadKind`] denies unknown fields itself, so a field that belongs to another
/// kind, or to none, is refused by name.)
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadSpec {
    /// `kind = "..."` and the fields of that kind.
    #[serde(flatten)]
    pub kind: WorkloadKind,
    /// Peak rate of this component over the whole table.
    pub ops_per_sec: f64,
    #[serde(default = "default_read_ratio")]
    pub read_ratio: f64,
    #[serde(default = "default_value_bytes")]
    pub value_bytes: u64,
    /// Active from this time; with `ramp_secs` the rate rises linearly from 0.
    #[serde(default)]
    pub start_secs: u64,
    #[serde(default)]
    pub ramp_secs: u64,
    /// Inactive from this time on.
    #[serde(default)]
    pub end_secs: Option<u64>,
    /// Daily period: the rate swings by this share around its mean, peaking at `peak_at_secs`.
    #[serde(default)]
    pub period_amplitude_ratio: f64,
    #[serde(default = "default_period_secs")]
    pub period_secs: u64,
    #[serde(default)]
    pub peak_at_secs: u64,
}

/// Where a workload component's ops fall in the key space; see [`crate::workload`]. Each kind
/// takes its own fields and no other.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum WorkloadKind {
    /// Spread evenly over the key space. (`{}`: a unit variant would ignore unknown fields.)
    Uniform {},
    /// Zipf over `segments` equal key-space segments, ranked from the scenario's seed.
    Zipf {
        /// Skew exponent; 1.0 is classic zipf.
        #[serde(default = "default_zipf_exponent")]
        exponent: f64,
        #[serde(default = "default_zipf_segments")]
        segments: u32,
    },
    /// Uniform inside `[start_key, end_key]`.
    HotRange { start_key: Key, end_key: Key },
    /// Every op on one key.
    HotKey { key: Key },
    /// Every op on the tail, which starts at `start_key` and advances `keys_per_sec`.
    SequentialAppend { start_key: Key, keys_per_sec: f64 },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatasetSpec {
    pub tenant: TenantId,
    pub dataset: DatasetId,
    pub tenant_shards: u32,
    pub dataset_shards: u32,
    pub load_balancing: LoadBalancing,
    pub ops_per_sec: f64,
    /// Linear growth of `ops_per_sec`, per hour of scenario time.
    #[serde(default)]
    pub growth_ops_per_sec_per_hour: f64,
    #[serde(default = "default_value_bytes")]
    pub value_bytes: u64,
    /// Key skew under fingerprint placement: shard `i` of the subring gets weight `1/(i+1)^s`.
    #[serde(default = "default_key_skew")]
    pub key_skew_exponent: f64,
}

/// What happens at `at_secs`. (serde cannot combine `flatten` with `deny_unknown_fields`; the
/// flattened [`Event`] denies unknown fields itself.)
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimelineEvent {
    pub at_secs: u64,
    #[serde(flatten)]
    pub event: Event,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case", deny_unknown_fields)]
pub enum Event {
    /// Multiplies every workload of a table for a while.
    Surge { tenant: TenantId, table: TableId, multiplier: f64, duration_secs: u64 },
    /// The worker goes down; its partitions fail over to the next healthy worker.
    WorkerLost { worker: WorkerId },
    /// A new, empty worker joins (optionally in a group, and in a zone).
    WorkerAdded {
        worker: WorkerId,
        #[serde(default)]
        group: Option<GroupId>,
        #[serde(default)]
        zone: Option<ZoneId>,
    },
    /// A dataset's rate changes: from now on `ops_per_sec`, growing `growth_ops_per_sec_per_hour`.
    DatasetRate {
        tenant: TenantId,
        dataset: DatasetId,
        ops_per_sec: f64,
        #[serde(default)]
        growth_ops_per_sec_per_hour: f64,
    },
    /// The next `count` admin operations (of `kind`, or any) fail, hang or time out.
    Fault {
        #[serde(default)]
        kind: Option<ActionKind>,
        fault: FaultKind,
        #[serde(default = "default_fault_count")]
        count: u32,
    },
}

/// How an injected fault breaks an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// Runs its full time, then fails without changing anything.
    Fail,
    /// Stays `running` forever.
    Hang,
    /// Applies the change but reports failure ("timed out"): the "maybe executed" case.
    Timeout,
}

impl Scenario {
    /// Reads, parses and validates a scenario file.
    pub fn load(path: &Path) -> Result<Self, ScenarioError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ScenarioError::Read { path: path.to_owned(), source })?;
        Self::parse(&text, path)
    }

    /// Parses and validates scenario text; `path` only names the source in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ScenarioError> {
        let scenario: Scenario = toml::from_str(text).map_err(|e| ScenarioError::Parse {
            path: path.to_owned(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        scenario.validate().map_err(|source| ScenarioError::Invalid { path: path.to_owned(), source })?;
        Ok(scenario)
    }

    /// Checks what serde cannot; the error names every bad field.
    pub fn validate(&self) -> Result<(), ValidationError> {
        let mut v = Validator::new();
        {
            let mut root = v.at("");
            root.check(!self.name.trim().is_empty(), "name", "\"\"", "must not be empty");
            root.check(self.start_ms > 0, "start_ms", self.start_ms, "must be > 0 (epoch millis)");
            root.range_u64("duration_secs", self.duration_secs, 1, 30 * 86_400);
        }
        self.cluster.validate_into(&mut v.at("cluster"));
        let grouped: u32 = self.cluster.groups.iter().map(|g| g.workers).sum();
        v.at("cluster").check(
            grouped <= self.cluster.workers,
            "groups",
            grouped,
            "must not take more than all workers",
        );
        if !self.cluster.zones.is_empty() {
            let zoned: u32 = self.cluster.zones.iter().map(|z| z.workers).sum();
            v.at("cluster").check(
                zoned == self.cluster.workers,
                "zones",
                zoned,
                &format!(
                    "must give every worker a zone: the zones' workers add up to {zoned}, the cluster has {}",
                    self.cluster.workers
                ),
            );
            for (i, z) in self.cluster.zones.iter().enumerate() {
                let dup = self.cluster.zones[..i].iter().any(|o| o.zone == z.zone);
                v.at("cluster").at_index("zones", i).check(!dup, "zone", &z.zone, "must not repeat an earlier zone");
            }
        }
        for (i, t) in self.tables.iter().enumerate() {
            let mut s = v.at_index("tables", i);
            s.range_u64("partitions", u64::from(t.partitions), 1, u64::from(MAX_PARTITIONS_PER_TABLE));
            for (j, w) in t.workloads.iter().enumerate() {
                w.validate_into(&mut s.at_index("workloads", j));
            }
        }
        for (i, d) in self.datasets.iter().enumerate() {
            let mut s = v.at_index("datasets", i);
            s.check(d.dataset_shards > 0, "dataset_shards", d.dataset_shards, "must be > 0");
            s.check(d.tenant_shards >= d.dataset_shards, "tenant_shards", d.tenant_shards, "must be >= dataset_shards");
            s.non_negative("ops_per_sec", d.ops_per_sec);
            s.check(
                d.growth_ops_per_sec_per_hour.is_finite(),
                "growth_ops_per_sec_per_hour",
                d.growth_ops_per_sec_per_hour,
                "must be finite",
            );
            s.non_negative("key_skew_exponent", d.key_skew_exponent);
        }
        for (key, value) in &self.master {
            let mut s = v.at("master");
            s.check(
                MASTER_POLICY_SECTIONS.contains(&key.as_str()),
                key,
                "…",
                "is not a policy section: a scenario's [master] sets planner, evaluation, placement or offline",
            );
            s.check(value.is_table(), key, value, "must be a table, as in master.toml");
        }
        for (i, e) in self.timeline.iter().enumerate() {
            let mut s = v.at_index("timeline", i);
            s.check(e.at_secs <= self.duration_secs, "at_secs", e.at_secs, "must be within duration_secs");
            match &e.event {
                Event::Surge { tenant, table, multiplier, .. } => {
                    s.non_negative("multiplier", *multiplier);
                    let known = self.tables.iter().any(|t| &t.tenant == tenant && &t.table == table);
                    s.check(known, "table", table, "must name a table of the scenario");
                }
                Event::WorkerLost { worker } => {
                    let known = worker_index(worker).is_some_and(|i| i < self.cluster.workers)
                        || self
                            .timeline
                            .iter()
                            .any(|o| matches!(&o.event, Event::WorkerAdded { worker: w, .. } if w == worker));
                    s.check(known, "worker", worker, "must name a worker of the cluster");
                }
                Event::WorkerAdded { worker, zone, .. } => {
                    let exists = worker_index(worker).is_some_and(|i| i < self.cluster.workers);
                    s.check(!exists, "worker", worker, "must not name a worker the cluster starts with");
                    if let Some(zone) = zone {
                        let known = self.cluster.zones.iter().any(|z| &z.zone == zone);
                        s.check(known, "zone", zone, "must name a zone of cluster.zones");
                    }
                }
                Event::DatasetRate { tenant, dataset, ops_per_sec, growth_ops_per_sec_per_hour } => {
                    s.non_negative("ops_per_sec", *ops_per_sec);
                    s.check(
                        growth_ops_per_sec_per_hour.is_finite(),
                        "growth_ops_per_sec_per_hour",
                        growth_ops_per_sec_per_hour,
                        "must be finite",
                    );
                    let known = self.datasets.iter().any(|d| &d.tenant == tenant && &d.dataset == dataset);
                    s.check(known, "dataset", dataset, "must name a dataset of the scenario");
                }
                Event::Fault { count, .. } => {
                    s.check(*count > 0, "count", count, "must be > 0");
                }
            }
        }
        v.finish()
    }
}

impl ClusterSpec {
    fn validate_into(&self, s: &mut Scope<'_>) {
        s.range_u64("workers", u64::from(self.workers), 1, u64::from(MAX_WORKERS));
        s.positive("worker_ops_per_sec", self.worker_ops_per_sec);
        s.positive("worker_bytes_per_sec", self.worker_bytes_per_sec);
        s.positive("partition_limit_ops_per_sec", self.partition_limit_ops_per_sec);
        s.positive("partition_limit_bytes_per_sec", self.partition_limit_bytes_per_sec);
        s.range_u64("tokens_per_worker", u64::from(self.tokens_per_worker), 1, 1024);
    }
}

impl WorkloadSpec {
    fn validate_into(&self, s: &mut Scope<'_>) {
        s.non_negative("ops_per_sec", self.ops_per_sec);
        s.ratio("read_ratio", self.read_ratio);
        s.ratio("period_amplitude_ratio", self.period_amplitude_ratio);
        s.check(self.period_secs > 0, "period_secs", self.period_secs, "must be > 0");
        if let Some(end) = self.end_secs {
            s.check(end > self.start_secs, "end_secs", end, "must be after start_secs");
        }
        match self.kind {
            WorkloadKind::Uniform {} | WorkloadKind::HotKey { .. } => {}
            WorkloadKind::Zipf { exponent, segments } => {
                s.check(exponent.is_finite() && exponent >= 0.0, "exponent", exponent, "must be a finite number >= 0");
                s.range_u64("segments", u64::from(segments), 1, 1 << 20);
            }
            WorkloadKind::HotRange { start_key, end_key } => {
                s.check(start_key <= end_key, "end_key", end_key, "must be >= start_key");
            }
            WorkloadKind::SequentialAppend { keys_per_sec, .. } => {
                s.check(
                    keys_per_sec.is_finite() && keys_per_sec >= 0.0,
                    "keys_per_sec",
                    keys_per_sec,
                    "must be a finite number >= 0",
                );
            }
        }
    }
}

/// The generated name of worker `i`.
pub fn worker_name(i: u32) -> WorkerId {
    WorkerId::new(format!("w-{i:04}")).expect("generated worker names are valid ids")
}

/// The index `i` of a generated name `w-{i}`.
fn worker_index(worker: &WorkerId) -> Option<u32> {
    worker.as_str().strip_prefix("w-")?.parse().ok()
}

// Every table of a scenario has a required field (`name`, the capacities, `partitions`,
// `ops_per_sec`, ...), so defaulted fields keep a default each: a struct-level
// `#[serde(default)]` would make the required ones optional too.
fn default_start_ms() -> i64 {
    DEFAULT_START_MS
}
fn default_duration_secs() -> u64 {
    DEFAULT_DURATION_SECS
}
fn default_tokens_per_worker() -> u32 {
    DEFAULT_TOKENS_PER_WORKER
}
fn default_stored_bytes() -> u64 {
    DEFAULT_STORED_BYTES_PER_PARTITION
}
fn default_read_ratio() -> f64 {
    DEFAULT_READ_RATIO
}
fn default_value_bytes() -> u64 {
    DEFAULT_VALUE_BYTES
}
fn default_zipf_exponent() -> f64 {
    DEFAULT_ZIPF_EXPONENT
}
fn default_zipf_segments() -> u32 {
    DEFAULT_ZIPF_SEGMENTS
}
fn default_period_secs() -> u64 {
    DEFAULT_PERIOD_SECS
}
fn default_key_skew() -> f64 {
    DEFAULT_KEY_SKEW_EXPONENT
}
fn default_fault_count() -> u32 {
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
name = "t"
[cluster]
workers = 2
worker_ops_per_sec = 1000
worker_bytes_per_sec = 1e6
partition_limit_ops_per_sec = 500
partition_limit_bytes_per_sec = 1e6
[[tables]]
tenant = "acme"
table = "orders"
partitions = 4
[[tables.workloads]]
kind = "hot_range"
ops_per_sec = 100
start_key = "1000000000000000"
end_key = "0fffffffffffffff"
[[timeline]]
at_secs = 10
event = "worker_lost"
worker = "w-0009"
"#;

    #[test]
    fn validation_names_every_bad_field() {
        let err = Scenario::parse(MINIMAL, Path::new("t.toml")).unwrap_err();
        let ScenarioError::Invalid { source, .. } = err else { panic!("expected invalid, got {err}") };
        let fields: Vec<_> = source.errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["tables[0].workloads[0].end_key", "timeline[0].worker"]);
    }

    #[test]
    fn zones_give_every_worker_one_and_a_new_worker_a_known_one() {
        let good = MINIMAL
            .replace("worker = \"w-0009\"", "worker = \"w-0001\"")
            .replace("end_key = \"0fffffffffffffff\"", "end_key = \"2000000000000000\"");
        let zones = |spec: &str| good.replace("[[tables]]", &format!("{spec}\n[[tables]]"));
        let ok = zones("[[cluster.zones]]\nzone = \"a\"\nworkers = 1\n[[cluster.zones]]\nzone = \"b\"\nworkers = 1");
        let s = Scenario::parse(&ok, Path::new("t.toml")).expect("valid");
        assert_eq!(s.cluster.zones.len(), 2);
        let short = zones("[[cluster.zones]]\nzone = \"a\"\nworkers = 1");
        let err = Scenario::parse(&short, Path::new("t.toml")).unwrap_err();
        assert!(err.to_string().contains("cluster.zones"), "{err}");
        let twice = zones("[[cluster.zones]]\nzone = \"a\"\nworkers = 1\n[[cluster.zones]]\nzone = \"a\"\nworkers = 1");
        let err = Scenario::parse(&twice, Path::new("t.toml")).unwrap_err();
        assert!(err.to_string().contains("cluster.zones[1].zone"), "{err}");
        let added =
            format!("{ok}\n[[timeline]]\nat_secs = 5\nevent = \"worker_added\"\nworker = \"w-0007\"\nzone = \"z\"\n");
        let err = Scenario::parse(&added, Path::new("t.toml")).unwrap_err();
        assert!(err.to_string().contains("timeline[1].zone"), "{err}");
    }

    #[test]
    fn a_scenarios_master_sets_policy_sections_only() {
        let good = MINIMAL
            .replace("worker = \"w-0009\"", "worker = \"w-0001\"")
            .replace("end_key = \"0fffffffffffffff\"", "end_key = \"2000000000000000\"");
        let s = Scenario::parse(&format!("{good}\n[master.placement]\nmode = \"auto\"\n"), Path::new("t.toml"))
            .expect("valid");
        assert_eq!(s.master["placement"]["mode"].as_str(), Some("auto"));
        let err = Scenario::parse(&format!("{good}\n[master.http]\nlisten = \"0.0.0.0:1\"\n"), Path::new("t.toml"))
            .unwrap_err();
        assert!(err.to_string().contains("master.http") && err.to_string().contains("not a policy section"), "{err}");
        let err = Scenario::parse(&format!("{good}\n[master]\noffline = 3\n"), Path::new("t.toml")).unwrap_err();
        assert!(err.to_string().contains("master.offline = 3: must be a table"), "{err}");
    }

    #[test]
    fn timeline_events_reject_unknown_fields_and_kinds() {
        let good = MINIMAL
            .replace("worker = \"w-0009\"", "worker = \"w-0001\"")
            .replace("end_key = \"0fffffffffffffff\"", "end_key = \"2000000000000000\"");
        Scenario::parse(&good, Path::new("t.toml")).expect("valid");
        let extra = good.replace("worker = \"w-0001\"", "worker = \"w-0001\"\nreason = \"x\"");
        assert!(matches!(Scenario::parse(&extra, Path::new("t.toml")), Err(ScenarioError::Parse { .. })));
        let kind = good.replace("event = \"worker_lost\"", "event = \"meteor\"");
        assert!(matches!(Scenario::parse(&kind, Path::new("t.toml")), Err(ScenarioError::Parse { .. })));
    }

    #[test]
    fn dataset_rate_events_name_a_dataset_and_a_finite_rate() {
        let text = r#"
name = "t"
[cluster]
workers = 2
worker_ops_per_sec = 1000
worker_bytes_per_sec = 1e6
partition_limit_ops_per_sec = 500
partition_limit_bytes_per_sec = 1e6
[[datasets]]
tenant = "logs"
dataset = "ingest"
tenant_shards = 4
dataset_shards = 2
load_balancing = "fingerprint"
ops_per_sec = 100
[[timeline]]
at_secs = 10
event = "dataset_rate"
tenant = "logs"
dataset = "ingest"
ops_per_sec = 50
"#;
        Scenario::parse(text, Path::new("t.toml")).expect("valid");
        let bad = text.replace("dataset = \"ingest\"\nops_per_sec = 50", "dataset = \"other\"\nops_per_sec = -5");
        let err = Scenario::parse(&bad, Path::new("t.toml")).unwrap_err();
        let ScenarioError::Invalid { source, .. } = err else { panic!("expected invalid, got {err}") };
        let fields: Vec<_> = source.errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["timeline[0].ops_per_sec", "timeline[0].dataset"]);
    }

    #[test]
    fn a_workload_takes_the_fields_of_its_kind_and_no_other() {
        let good = MINIMAL
            .replace("worker = \"w-0009\"", "worker = \"w-0001\"")
            .replace("end_key = \"0fffffffffffffff\"", "end_key = \"2000000000000000\"");
        let scenario = Scenario::parse(&good, Path::new("t.toml")).expect("valid");
        let kind = scenario.tables[0].workloads[0].kind;
        assert_eq!(kind, WorkloadKind::HotRange { start_key: Key(1 << 60), end_key: Key(2 << 60) });
        let parse_error = |text: &str| match Scenario::parse(text, Path::new("t.toml")) {
            Err(ScenarioError::Parse { message, .. }) => message,
            other => panic!("expected a parse error, got {other:?}"),
        };
        // A field of another kind (zipf's exponent on a hot range) is refused by name.
        let other_kind = good.replace("ops_per_sec = 100\n", "ops_per_sec = 100\nexponent = 2.0\n");
        let message = parse_error(&other_kind);
        assert!(message.contains("unknown field `exponent`"), "{message}");
        // So is one on a kind that has no fields of its own.
        let uniform = good
            .replace("kind = \"hot_range\"", "kind = \"uniform\"")
            .replace("start_key = \"1000000000000000\"\nend_key = \"2000000000000000\"\n", "key = \"1\"\n");
        let message = parse_error(&uniform);
        assert!(message.contains("unknown field `key`"), "{message}");
        // And a typo of a field every kind has.
        let typo = good.replace("ops_per_sec = 100\n", "ops_per_sec = 100\nread_ration = 0.5\n");
        assert!(parse_error(&typo).contains("unknown field `read_ration`"));
        // A field the kind needs is named when it is missing.
        let missing = good.replace("end_key = \"2000000000000000\"\n", "");
        let message = parse_error(&missing);
        assert!(message.contains("missing field `end_key`"), "{message}");
        let unknown_kind = good.replace("kind = \"hot_range\"", "kind = \"hot_ranges\"");
        assert!(parse_error(&unknown_kind).contains("hot_ranges"));
    }

    #[test]
    fn unknown_fields_are_rejected() {
        let text = MINIMAL.replace("partitions = 4", "partitions = 4\nshards = 3");
        let err = Scenario::parse(&text, Path::new("t.toml")).unwrap_err();
        assert!(matches!(err, ScenarioError::Parse { .. }), "{err}");
        assert!(err.to_string().contains("shards"), "{err}");
    }
}
