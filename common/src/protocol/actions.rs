//! Actions: what the master, lbctl and the console ask the ops server to do
//! (`POST /v1/actions`, `GET /v1/actions/{id}`, `GET /v1/actions?state=`,
//! `POST /v1/actions/{id}/cancel`).
//!
//! Submitting is idempotent by [`ActionId`]: a retry returns the existing action unchanged.

use serde::{Deserialize, Serialize};

use crate::ids::{ActionId, DatasetId, GroupId, Key, OperationId, PartitionId, TableId, TenantId, WorkerId};
use crate::validate::{ValidationError, Validator};

use super::limits::TextLimits;

/// Deepest actor path accepted: tenant, table and two levels below (for example an SRE's name).
pub const MAX_ACTOR_PATH_DEPTH: usize = 4;
/// 4 KiB: a reason is a sentence with its numbers (the planner's longest are ~400 bytes); ten
/// times that still fits, and a submission cannot make the ops server keep megabytes for good.
pub const MAX_REASON_BYTES: usize = 4096;
/// A policy name (`partition_overload`, ...): 64 bytes is room to spare.
pub const MAX_POLICY_BYTES: usize = 64;

/// `POST /v1/actions` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ActionRequest {
    pub id: ActionId,
    pub spec: ActionSpec,
    pub origin: Origin,
    /// Name of the policy that proposed it (`partition_overload`, ...); absent for manual actions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// Human-readable why, shown in the console and the audit log.
    pub reason: String,
    /// Fair-queue path, usually `[tenant, table]`; manual actions use `["manual", <who>]`.
    pub actor_path: Vec<String>,
    /// The leadership term of the master that submitted it (its etcd election key's revision),
    /// when masters run elected (`[leadership] backend = "etcd"`). The ops server refuses an
    /// epoch older than the newest it has seen (409 `stale_epoch`, audited): a leader that was
    /// paused cannot act after another was elected. Absent for a single master, lbctl and the
    /// console (never fenced).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_epoch: Option<u64>,
}

/// `POST /v1/fencing`: a master elected leader announces its term before it acts, so that a
/// late submission of an older leader is refused even before the new one submitted anything.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct FencingRequest {
    pub leader_epoch: u64,
    /// The master's advertised address, for the audit and for people; at most 256 printable
    /// bytes, as any address.
    pub leader: String,
}

impl FencingRequest {
    /// The leader's address within the contract's address limit and printable (it is logged);
    /// the error names the field.
    pub fn validate(&self) -> Result<(), ValidationError> {
        let max = super::registry::MAX_ADDRESS_BYTES;
        let mut v = Validator::new();
        v.at("").check(
            self.leader.len() <= max && self.leader.chars().all(|c| !c.is_control()),
            "leader",
            self.leader.escape_debug(),
            &format!("must be at most {max} printable bytes"),
        );
        v.finish()
    }
}

/// `GET /v1/fencing` (and the answer to `POST`): the newest leadership term the ops server has
/// seen, and the submissions it refused for an older one, newest first (at most
/// [`MAX_FENCING_REFUSALS_LISTED`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FencingStatus {
    pub newest_epoch: Option<u64>,
    /// Who announced or submitted with the newest epoch.
    pub newest_leader: Option<String>,
    pub refused: Vec<StaleEpochRefusal>,
}

/// Refusals `GET /v1/fencing` lists: a paused leader that wakes refuses a pass's worth at most.
pub const MAX_FENCING_REFUSALS_LISTED: usize = 1000;

/// One submission (or announcement) refused for a stale leadership term, as audited.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StaleEpochRefusal {
    pub at_ms: i64,
    /// The action refused; absent for a refused announcement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action_id: Option<ActionId>,
    pub leader_epoch: u64,
    pub newest_epoch: u64,
    /// The caller (a token's name) and, for an announcement, the master it named.
    pub submitted_by: String,
}

/// What to do. Each kind names its own target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ActionSpec {
    /// Split a partition into `[start, split_key - 1]` and `[split_key, end]`.
    Split { partition: PartitionId, split_key: Key },
    /// Split a partition into `split_keys.len() + 1` pieces in one action, and create each new
    /// piece (the one starting at `split_keys[i]`) on `to_workers[i]` (the partition's own
    /// worker keeps it where it is). The first piece keeps the id and the worker. For a hot
    /// range at k times what a piece may carry: cut once, spread at once, judged as one action.
    /// Only on a storage system whose topology says `multi_way_split`. With `group`, each piece
    /// created on a worker of that group joins it (a hot key cut out alone onto an isolation
    /// group's worker: a member stays there, where a non-member would be moved out when the
    /// group next changes). With `first_to_worker`, the first piece (the id) goes there too (a
    /// hot key that is the partition's first key: its one-key piece is the first).
    SplitInto {
        partition: PartitionId,
        split_keys: Vec<Key>,
        to_workers: Vec<WorkerId>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        group: Option<GroupId>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        first_to_worker: Option<WorkerId>,
    },
    /// Move a partition to another worker. With `max_bytes_per_sec`, its stream is throttled to
    /// that rate (Cruise Control's replication throttle, CockroachDB's snapshot rate, per move):
    /// the planner sets it so the stream takes no more of its source's capacity than the source
    /// has spare, and a source that still serves all it is asked does not start rejecting
    /// because it sheds. Only on a storage system whose topology says `move_rate_limit`.
    Move {
        partition: PartitionId,
        to_worker: WorkerId,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "openapi", schema(minimum = 1))]
        max_bytes_per_sec: Option<u64>,
    },
    /// Merge two adjacent partitions of one table; `left` ends right before `right` starts.
    /// The merged partition keeps `left`'s id and lands on `to_worker`, which must own one of
    /// the two (the other side streams there like a move); without it, on `left`'s owner.
    Merge {
        left: PartitionId,
        right: PartitionId,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        to_worker: Option<WorkerId>,
    },
    /// Pin a partition, a table or a tenant to a group of dedicated workers, evacuating the rest.
    Group { target: GroupTarget, group: GroupId },
    /// Change how many shards a hash-sharded dataset spreads over.
    Reshard {
        tenant: TenantId,
        dataset: DatasetId,
        tenant_shards: u32,
        dataset_shards: u32,
        load_balancing: LoadBalancing,
    },
}

impl ActionSpec {
    /// The partitions the action names (a group of a table or tenant names none).
    pub fn partitions(&self) -> Vec<&PartitionId> {
        match self {
            ActionSpec::Split { partition, .. }
            | ActionSpec::SplitInto { partition, .. }
            | ActionSpec::Move { partition, .. } => vec![partition],
            ActionSpec::Merge { left, right, .. } => vec![left, right],
            ActionSpec::Group { target: GroupTarget::Partition { partition }, .. } => vec![partition],
            _ => vec![],
        }
    }

    pub fn kind(&self) -> ActionKind {
        match self {
            ActionSpec::Split { .. } | ActionSpec::SplitInto { .. } => ActionKind::Split,
            ActionSpec::Move { .. } => ActionKind::Move,
            ActionSpec::Merge { .. } => ActionKind::Merge,
            ActionSpec::Group { .. } => ActionKind::Group,
            ActionSpec::Reshard { .. } => ActionKind::Reshard,
        }
    }
}

/// An action in one line: `split acme.orders.p000034 at 4322d50f1e9da834`, `move p to w-0003`.
impl std::fmt::Display for ActionSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ActionSpec::Split { partition, split_key } => write!(f, "split {partition} at {split_key}"),
            ActionSpec::SplitInto { partition, split_keys, to_workers, group, first_to_worker } => {
                write!(f, "split {partition} into {} pieces", split_keys.len() + 1)?;
                if let Some(w) = first_to_worker {
                    write!(f, ", the first to {w}")?;
                }
                for (k, w) in split_keys.iter().zip(to_workers) {
                    write!(f, ", {k} to {w}")?;
                }
                if let Some(g) = group {
                    write!(f, " (joining group {g} there)")?;
                }
                Ok(())
            }
            ActionSpec::Move { partition, to_worker, max_bytes_per_sec } => {
                write!(f, "move {partition} to {to_worker}")?;
                match max_bytes_per_sec {
                    Some(r) => write!(f, " at {:.1} MiB/s", *r as f64 / (1024.0 * 1024.0)),
                    None => Ok(()),
                }
            }
            ActionSpec::Merge { left, right, to_worker } => {
                write!(f, "merge {left} + {right}")?;
                match to_worker {
                    Some(w) => write!(f, " on {w}"),
                    None => Ok(()),
                }
            }
            ActionSpec::Group { target, group } => write!(f, "group {target} into {group}"),
            ActionSpec::Reshard { tenant, dataset, tenant_shards, dataset_shards, load_balancing } => {
                let lb = match load_balancing {
                    LoadBalancing::Fingerprint => "fingerprint",
                    LoadBalancing::RoundRobin => "round_robin",
                };
                write!(
                    f,
                    "reshard {tenant}/{dataset} to {tenant_shards} tenant / {dataset_shards} dataset shards ({lb})"
                )
            }
        }
    }
}

/// What a group action pins: `acme.orders.p000034`, `table acme/orders`, `tenant acme`.
impl std::fmt::Display for GroupTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GroupTarget::Partition { partition } => write!(f, "{partition}"),
            GroupTarget::Table { tenant, table } => write!(f, "table {tenant}/{table}"),
            GroupTarget::Tenant { tenant } => write!(f, "tenant {tenant}"),
        }
    }
}

/// The action kinds, as a bounded set for metric labels and topology capabilities.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ActionKind {
    Split,
    Move,
    Merge,
    Group,
    Reshard,
}

impl ActionKind {
    pub const ALL: [ActionKind; 5] =
        [ActionKind::Split, ActionKind::Move, ActionKind::Merge, ActionKind::Group, ActionKind::Reshard];

    pub fn as_str(self) -> &'static str {
        match self {
            ActionKind::Split => "split",
            ActionKind::Move => "move",
            ActionKind::Merge => "merge",
            ActionKind::Group => "group",
            ActionKind::Reshard => "reshard",
        }
    }
}

/// What a group action pins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "scope", rename_all = "snake_case", deny_unknown_fields)]
pub enum GroupTarget {
    Partition { partition: PartitionId },
    Table { tenant: TenantId, table: TableId },
    Tenant { tenant: TenantId },
}

/// How writes of a hash-sharded dataset pick a shard within its subring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum LoadBalancing {
    /// By key fingerprint: a key always lands on the same shard (locality).
    Fingerprint,
    /// Round robin: spreads a skewed key distribution evenly, giving up locality.
    RoundRobin,
}

/// Who proposed an action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    Online,
    Offline,
    Manual,
}

/// Life cycle: `queued → running → succeeded | failed | cancelled | timed_out`; a queued action
/// can also be cancelled directly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ActionState {
    Queued,
    Running,
    Succeeded,
    Failed,
    Cancelled,
    TimedOut,
}

impl ActionState {
    pub fn is_terminal(self) -> bool {
        !matches!(self, ActionState::Queued | ActionState::Running)
    }

    /// Whether the state machine allows `self → next`.
    pub fn can_become(self, next: ActionState) -> bool {
        use ActionState::*;
        matches!(
            (self, next),
            (Queued, Running) | (Queued, Cancelled) | (Running, Succeeded | Failed | Cancelled | TimedOut)
        )
    }
}

/// Whether a failed action touched the storage system. "maybe" forces a topology re-read before
/// anything retries or plans around the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Execution {
    /// The storage system certainly did not apply it (rejected, never sent).
    NotExecuted,
    /// It may have been applied (timeout or lost connection after sending).
    MaybeExecuted,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ActionFailure {
    pub message: String,
    pub execution: Execution,
}

/// An action as the ops server tracks it: `POST /v1/actions` and `GET /v1/actions/{id}` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ActionRecord {
    pub request: ActionRequest,
    pub state: ActionState,
    /// Who submitted it (the token's name), never the token.
    pub submitted_by: String,
    pub created_at_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation_id: Option<OperationId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<ActionFailure>,
}

/// Reply of `GET /v1/actions?state=`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ActionsResponse {
    pub actions: Vec<ActionRecord>,
}

/// `GET /v1/actions`: every action the ops server keeps, or only those in `state`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct ActionsQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<ActionState>,
}

/// One line of an action's history (`GET /v1/actions/{id}/events`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditEvent {
    pub at_ms: i64,
    pub state: ActionState,
    /// Who caused it: a token name, or `executor`.
    pub actor: String,
    pub detail: String,
}

/// Reply of `GET /v1/actions/{id}/events`: oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EventsResponse {
    pub events: Vec<AuditEvent>,
}

/// `POST /v1/halt`: stop (or resume) taking actions off the queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct HaltRequest {
    pub halted: bool,
    /// Why, shown in `GET /v1/halt` and the audit log until the next change; at most the
    /// server's `max_reason_bytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl HaltRequest {
    /// The reason within `limits`; the error names the field.
    pub fn validate_with(&self, limits: &TextLimits) -> Result<(), ValidationError> {
        let len = self.reason.as_ref().map_or(0, String::len);
        let mut v = Validator::new();
        v.at("").check(
            len <= limits.max_reason_bytes,
            "reason",
            format!("{len} bytes"),
            &format!("must be at most {} bytes", limits.max_reason_bytes),
        );
        v.finish()
    }
}

/// Reply of `GET` and `POST /v1/halt`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HaltStatus {
    /// Whether the executor takes new actions off the queue.
    pub halted: bool,
    pub halted_by_api: bool,
    pub halted_by_config: bool,
    pub queued: usize,
    /// Who last flipped the API switch (a token's name), and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Most pieces one `split_into` makes: a hot range at 16 times a piece's load is past what one
/// cut should try; it is cut again once measured.
pub const MAX_SPLIT_PIECES: usize = 16;

impl ActionRequest {
    /// Checks what serde cannot, with the contract's text limits; the error names the field.
    pub fn validate(&self) -> Result<(), ValidationError> {
        self.validate_with(&TextLimits::default())
    }

    /// [`ActionRequest::validate`] with a server's configured text limits.
    pub fn validate_with(&self, limits: &TextLimits) -> Result<(), ValidationError> {
        let (max_reason, max_policy) = (limits.max_reason_bytes, limits.max_policy_bytes);
        let mut v = Validator::new();
        let mut root = v.at("");
        root.check(!self.reason.trim().is_empty(), "reason", "\"\"", "must say why");
        root.check(
            self.reason.len() <= max_reason,
            "reason",
            format!("{} bytes", self.reason.len()),
            &format!("must be at most {max_reason} bytes"),
        );
        root.check(
            self.policy.as_ref().is_none_or(|p| p.len() <= max_policy && crate::ids::validate_id(p).is_ok()),
            "policy",
            format!("{} bytes", self.policy.as_ref().map_or(0, String::len)),
            &format!("must be a policy name (an id of at most {max_policy} bytes)"),
        );
        root.check(
            (1..=MAX_ACTOR_PATH_DEPTH).contains(&self.actor_path.len()),
            "actor_path",
            format!("{:?}", self.actor_path),
            "must have 1..=4 segments",
        );
        for (i, seg) in self.actor_path.iter().enumerate() {
            root.check(
                crate::ids::validate_id(seg).is_ok(),
                &format!("actor_path[{i}]"),
                format!("{seg:?}"),
                "must be a valid id (non-empty; letters, digits, - _ . : @)",
            );
        }
        root.check(
            (self.origin == Origin::Manual) == self.policy.is_none(),
            "policy",
            format!("{:?}", self.policy),
            "must be set exactly when origin is not manual",
        );
        match &self.spec {
            ActionSpec::Split { split_key, .. } => {
                root.check(split_key.0 > 0, "spec.split_key", split_key, "must be > 0 (the left half would be empty)");
            }
            ActionSpec::SplitInto { split_keys, to_workers, .. } => {
                root.check(
                    (1..MAX_SPLIT_PIECES).contains(&split_keys.len()),
                    "spec.split_keys",
                    format!("{} keys", split_keys.len()),
                    &format!("must hold 1..={} keys (at most {MAX_SPLIT_PIECES} pieces)", MAX_SPLIT_PIECES - 1),
                );
                root.check(
                    split_keys.first().is_none_or(|k| k.0 > 0),
                    "spec.split_keys",
                    format!("{split_keys:?}"),
                    "must start > 0 (the first piece would be empty)",
                );
                root.check(
                    split_keys.windows(2).all(|w| w[0] < w[1]),
                    "spec.split_keys",
                    format!("{split_keys:?}"),
                    "must be strictly ascending",
                );
                root.check(
                    to_workers.len() == split_keys.len(),
                    "spec.to_workers",
                    format!("{} workers", to_workers.len()),
                    &format!("must name one worker per new piece ({})", split_keys.len()),
                );
            }
            ActionSpec::Merge { left, right, .. } => {
                root.check(left != right, "spec.right", right, "must differ from spec.left");
            }
            ActionSpec::Reshard { tenant_shards, dataset_shards, .. } => {
                root.check(*dataset_shards > 0, "spec.dataset_shards", dataset_shards, "must be > 0");
                root.check(
                    tenant_shards >= dataset_shards,
                    "spec.tenant_shards",
                    tenant_shards,
                    "must be >= spec.dataset_shards",
                );
            }
            ActionSpec::Move { max_bytes_per_sec, .. } => {
                if let Some(r) = max_bytes_per_sec {
                    root.check(*r > 0, "spec.max_bytes_per_sec", r, "must be > 0");
                }
            }
            ActionSpec::Group { .. } => {}
        }
        drop(root);
        v.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_machine_allows_only_forward_steps() {
        use ActionState::*;
        assert!(Queued.can_become(Running));
        assert!(Queued.can_become(Cancelled));
        assert!(Running.can_become(TimedOut));
        assert!(!Queued.can_become(Succeeded));
        assert!(!Succeeded.can_become(Running));
        assert!(!Failed.can_become(Failed));
        assert!(Cancelled.is_terminal() && !Running.is_terminal());
    }

    #[test]
    fn free_text_is_bounded_and_never_echoed_whole() {
        let mut request: ActionRequest =
            serde_json::from_str(include_str!("../../../docs/examples/action_request_split.json")).expect("example");
        request.reason = "x".repeat(7 << 20);
        let err = request.validate().expect_err("7 MiB reason").to_string();
        assert!(err.contains("reason = 7340032 bytes: must be at most 4096 bytes"), "{err}");
        request.reason = "fine".to_owned();
        request.policy = Some("p".repeat(1 << 20));
        let err = request.validate().expect_err("1 MiB policy").to_string();
        assert!(err.contains("policy") && err.len() < 400, "{} bytes", err.len());
    }

    #[test]
    fn split_into_example_parses_and_bad_pieces_are_named() {
        let mut request: ActionRequest =
            serde_json::from_str(include_str!("../../../docs/examples/action_request_split_into.json"))
                .expect("example");
        request.validate().expect("the example is valid");
        assert_eq!(request.spec.kind(), ActionKind::Split);
        assert!(request.spec.to_string().starts_with("split gamma.orders.p000012 into 4 pieces"));
        let ActionSpec::SplitInto { split_keys, to_workers, .. } = &mut request.spec else { panic!("split_into") };
        split_keys.swap(0, 1);
        to_workers.pop();
        let err = request.validate().expect_err("unsorted keys, a worker short").to_string();
        assert!(err.contains("spec.split_keys") && err.contains("strictly ascending"), "{err}");
        assert!(err.contains("spec.to_workers") && err.contains("one worker per new piece"), "{err}");
    }

    #[test]
    fn validate_names_bad_fields() {
        let req = ActionRequest {
            id: ActionId::new("a-1").expect("id"),
            spec: ActionSpec::Reshard {
                tenant: TenantId::new("t").expect("id"),
                dataset: DatasetId::new("d").expect("id"),
                tenant_shards: 2,
                dataset_shards: 4,
                load_balancing: LoadBalancing::Fingerprint,
            },
            origin: Origin::Online,
            policy: None,
            reason: " ".into(),
            actor_path: vec!["t".into(), "".into()],
            leader_epoch: None,
        };
        let err = req.validate().unwrap_err();
        let fields: Vec<_> = err.errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["reason", "actor_path[1]", "policy", "spec.tenant_shards"]);
    }

    #[test]
    fn a_move_at_no_rate_is_refused_and_a_rate_round_trips() {
        let json = r#"{"kind":"move","partition":"p1","to_worker":"w2","max_bytes_per_sec":0}"#;
        let spec: ActionSpec = serde_json::from_str(json).expect("parses");
        let req = ActionRequest {
            id: ActionId::new("a-1").expect("id"),
            spec,
            origin: Origin::Online,
            policy: Some("worker_overload".into()),
            reason: "why".into(),
            actor_path: vec!["t".into()],
            leader_epoch: None,
        };
        let err = req.validate().expect_err("no rate").to_string();
        assert!(err.contains("spec.max_bytes_per_sec") && err.contains("must be > 0"), "{err}");
        let throttled = r#"{"kind":"move","partition":"p1","to_worker":"w2","max_bytes_per_sec":20971520}"#;
        let spec: ActionSpec = serde_json::from_str(throttled).expect("parses");
        assert_eq!(spec.to_string(), "move p1 to w2 at 20.0 MiB/s");
        assert_eq!(serde_json::to_string(&spec).expect("json"), throttled);
        let plain: ActionSpec =
            serde_json::from_str(r#"{"kind":"move","partition":"p1","to_worker":"w2"}"#).expect("parses");
        assert!(
            !serde_json::to_string(&plain).expect("json").contains("max_bytes_per_sec"),
            "an older reader sees no new field"
        );
    }

    #[test]
    fn unknown_kind_and_fields_are_rejected() {
        let bad_kind = r#"{"kind":"explode","partition":"p1"}"#;
        assert!(serde_json::from_str::<ActionSpec>(bad_kind).is_err());
        let extra = r#"{"kind":"move","partition":"p1","to_worker":"w2","force":true}"#;
        assert!(serde_json::from_str::<ActionSpec>(extra).is_err());
    }
}
