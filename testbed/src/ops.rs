//! Admin operations: validation at submit, progress over (real or virtual) time, and injected
//! faults.
//!
//! Contract:
//! - [`OpBook::submit`] checks the action against the layout; an invalid one is an
//!   [`AdminError`] and changes nothing. A resubmitted action id returns the same operation.
//! - A valid action becomes a `running` operation that finishes after a realistic time: a move
//!   takes `stored_bytes / move rate` (and costs its source worker capacity while it runs; a
//!   move that names `max_bytes_per_sec` below the rate streams at it, longer, and costs its
//!   source in proportion to it), a
//!   split or reshard a few seconds, a merge a few seconds on one worker or, across two, the
//!   move time of the side not on its `to_worker` (the left's owner when it names none), a group the moves
//!   its plan needs. The change is applied when the operation succeeds
//!   (make-before-break), never before.
//! - A partition in a running operation is busy: a second action on it gets 409.
//! - Faults (from the scenario timeline or `POST /v1/admin/faults`) make the next operations
//!   fail (nothing applied), hang (running forever, partitions stay busy) or time out (applied,
//!   but reported failed: the "maybe executed" case).

use std::collections::{HashMap, VecDeque};

use lb_common::ids::{ActionId, OperationId, PartitionId};
use lb_common::protocol::{ActionKind, ActionSpec, Operation, OperationState};
use serde::{Deserialize, Serialize};

use crate::model::Cluster;
use crate::model::mutate::{GroupPlan, LayoutError};
use crate::scenario::FaultKind;

/// 100 MiB/s: a move streams at roughly one disk's or one 1 GbE link's rate.
pub const DEFAULT_MOVE_BYTES_PER_SEC: f64 = 100.0 * 1024.0 * 1024.0;
/// A move's source loses 20 % of its capacity while it streams (reads, network, checksums).
pub const DEFAULT_MOVE_SOURCE_COST_RATIO: f64 = 0.2;
/// Sources keep at least half their capacity however many moves drain them.
pub const MIN_CAPACITY_FACTOR: f64 = 0.5;
/// 2 s: a split or merge on one worker is a metadata change plus a flush.
pub const DEFAULT_METADATA_OP_SECS: f64 = 2.0;
/// 1 s: every data-moving operation has a fixed handover cost on top of streaming.
pub const DEFAULT_HANDOVER_SECS: f64 = 1.0;
/// 5 s: a reshard republishes placement rules and waits for routers to pick them up.
pub const DEFAULT_RESHARD_SECS: f64 = 5.0;

/// Why an admin request was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AdminError {
    #[error(transparent)]
    Layout(#[from] LayoutError),
    #[error("partition {partition} is busy with operation {operation}")]
    Busy { partition: PartitionId, operation: OperationId },
    #[error("action {0} was already submitted with a different spec")]
    ActionReused(ActionId),
}

/// A fault waiting for the next matching operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultRule {
    /// Only operations of this kind; any kind when absent.
    #[serde(default)]
    pub kind: Option<ActionKind>,
    pub fault: FaultKind,
    /// How many operations it hits.
    pub count: u32,
}

#[derive(Debug, Clone)]
struct OpRecord {
    op: Operation,
    spec: ActionSpec,
    started_secs: f64,
    duration_secs: f64,
    fault: Option<FaultKind>,
    plan: Option<GroupPlan>,
    busy: Vec<PartitionId>,
    /// Workers drained while the operation runs (move sources), each with the share of its
    /// capacity the stream takes.
    sources: Vec<(usize, f64)>,
}

/// Every operation the storage system ran, and the pending faults.
#[derive(Debug, Clone, Default)]
pub struct OpBook {
    records: Vec<OpRecord>,
    by_id: HashMap<OperationId, usize>,
    by_action: HashMap<ActionId, usize>,
    busy: HashMap<PartitionId, usize>,
    running: Vec<usize>,
    faults: VecDeque<FaultRule>,
}

impl OpBook {
    /// Per worker: partitions that running group operations are moving onto it.
    fn incoming(&self, cluster: &Cluster) -> Vec<u32> {
        let mut incoming = vec![0; cluster.workers.len()];
        for plan in self.running.iter().filter_map(|&r| self.records[r].plan.as_ref()) {
            for (_, to) in &plan.moves {
                if let Some(w) = cluster.workers.find(to) {
                    incoming[w] += 1;
                }
            }
        }
        incoming
    }

    pub fn add_fault(&mut self, rule: FaultRule) {
        if rule.count > 0 {
            self.faults.push_back(rule);
        }
    }

    pub fn pending_faults(&self) -> Vec<FaultRule> {
        self.faults.iter().cloned().collect()
    }

    pub fn get(&self, id: &OperationId) -> Option<&Operation> {
        self.by_id.get(id).map(|&i| &self.records[i].op)
    }

    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Validates `spec` and starts an operation for it; idempotent by `action_id`.
    pub fn submit(
        &mut self,
        cluster: &Cluster,
        action_id: ActionId,
        spec: ActionSpec,
        now_ms: i64,
        t_secs: f64,
    ) -> Result<OperationId, AdminError> {
        if let Some(&i) = self.by_action.get(&action_id) {
            let record = &self.records[i];
            return if record.spec == spec {
                Ok(record.op.id.clone())
            } else {
                Err(AdminError::ActionReused(action_id))
            };
        }
        let p = &cluster.partitions;
        let (busy, duration_secs, plan, sources) = match &spec {
            ActionSpec::Split { partition, split_key } => {
                cluster.check_split(partition, *split_key)?;
                (vec![partition.clone()], DEFAULT_METADATA_OP_SECS, None, vec![])
            }
            ActionSpec::SplitInto { partition, split_keys, to_workers, group, first_to_worker } => {
                // The new pieces stream from the partition's worker like one move of their bytes.
                let first_to = first_to_worker.as_ref();
                let (i, leaving) = cluster.check_split_into(partition, split_keys, to_workers, first_to)?;
                if let Some(g) = group {
                    cluster.check_pieces_join(partition, to_workers, first_to, g)?;
                }
                let secs = if leaving > 0.0 {
                    DEFAULT_HANDOVER_SECS + leaving / DEFAULT_MOVE_BYTES_PER_SEC
                } else {
                    DEFAULT_METADATA_OP_SECS
                };
                let sources =
                    if leaving > 0.0 { vec![(p.owner[i] as usize, DEFAULT_MOVE_SOURCE_COST_RATIO)] } else { vec![] };
                (vec![partition.clone()], secs, None, sources)
            }
            ActionSpec::Move { partition, to_worker, max_bytes_per_sec } => {
                let (i, _) = cluster.check_move(partition, to_worker)?;
                // A throttled stream takes longer and costs its source in proportion to its rate.
                let rate = max_bytes_per_sec
                    .map_or(DEFAULT_MOVE_BYTES_PER_SEC, |r| (r as f64).min(DEFAULT_MOVE_BYTES_PER_SEC));
                let secs = DEFAULT_HANDOVER_SECS + p.stored_bytes[i] / rate;
                let cost = DEFAULT_MOVE_SOURCE_COST_RATIO * rate / DEFAULT_MOVE_BYTES_PER_SEC;
                (vec![partition.clone()], secs, None, vec![(p.owner[i] as usize, cost)])
            }
            ActionSpec::Merge { left, right, to_worker } => {
                // The side not on the destination streams there like a move.
                let (secs, sources) = match cluster.merge_streamed(left, right, to_worker.as_ref())? {
                    None => (DEFAULT_METADATA_OP_SECS, vec![]),
                    Some(s) => (
                        DEFAULT_HANDOVER_SECS + p.stored_bytes[s] / DEFAULT_MOVE_BYTES_PER_SEC,
                        vec![(p.owner[s] as usize, DEFAULT_MOVE_SOURCE_COST_RATIO)],
                    ),
                };
                (vec![left.clone(), right.clone()], secs, None, sources)
            }
            ActionSpec::Group { target, group } => {
                let plan = cluster.plan_group_with(target, group, &self.incoming(cluster))?;
                let mut busy = plan.members.clone();
                busy.extend(plan.moves.iter().map(|(id, _)| id.clone()));
                let sources = plan
                    .moves
                    .iter()
                    .filter_map(|(id, _)| p.find(id))
                    .map(|i| (p.owner[i] as usize, DEFAULT_MOVE_SOURCE_COST_RATIO))
                    .collect();
                let secs = DEFAULT_HANDOVER_SECS + plan.moved_bytes / DEFAULT_MOVE_BYTES_PER_SEC;
                (busy, secs, Some(plan), sources)
            }
            ActionSpec::Reshard { tenant, dataset, tenant_shards, dataset_shards, .. } => {
                cluster.check_reshard(tenant, dataset, *tenant_shards, *dataset_shards)?;
                (vec![], DEFAULT_RESHARD_SECS, None, vec![])
            }
        };
        if let Some((partition, &i)) = busy.iter().find_map(|id| self.busy.get_key_value(id)) {
            return Err(AdminError::Busy { partition: partition.clone(), operation: self.records[i].op.id.clone() });
        }
        let fault = self.take_fault(spec.kind());
        let index = self.records.len();
        let id = OperationId::new(format!("op-{:06}", index + 1)).expect("generated operation ids are valid");
        for b in &busy {
            self.busy.insert(b.clone(), index);
        }
        tracing::info!(operation = %id, action = %action_id, kind = spec.kind().as_str(), duration_secs, ?fault, "operation started");
        self.records.push(OpRecord {
            op: Operation {
                id: id.clone(),
                action_id: action_id.clone(),
                kind: spec.kind(),
                state: OperationState::Running,
                started_at_ms: now_ms,
                finished_at_ms: None,
                progress_ratio: 0.0,
                error: None,
            },
            spec,
            started_secs: t_secs,
            duration_secs,
            fault,
            plan,
            busy,
            sources,
        });
        self.by_id.insert(id.clone(), index);
        self.by_action.insert(action_id, index);
        self.running.push(index);
        Ok(id)
    }

    fn take_fault(&mut self, kind: ActionKind) -> Option<FaultKind> {
        let i = self.faults.iter().position(|f| f.kind.is_none_or(|k| k == kind))?;
        let rule = &mut self.faults[i];
        rule.count -= 1;
        let fault = rule.fault;
        if rule.count == 0 {
            self.faults.remove(i);
        }
        Some(fault)
    }

    /// Advances running operations to `t_secs`, applying the ones that finish, and sets each
    /// worker's capacity factor from the moves draining it.
    pub fn advance(&mut self, cluster: &mut Cluster, t_secs: f64, now_ms: i64) {
        cluster.load.worker_capacity_factor.fill(1.0);
        let mut still = Vec::with_capacity(self.running.len());
        for &i in &self.running {
            let r = &mut self.records[i];
            let elapsed = t_secs - r.started_secs;
            let done = elapsed >= r.duration_secs && r.fault != Some(FaultKind::Hang);
            let progress = if r.duration_secs > 0.0 { (elapsed / r.duration_secs).clamp(0.0, 1.0) } else { 1.0 };
            r.op.progress_ratio = if r.fault == Some(FaultKind::Hang) { progress.min(0.5) } else { progress };
            if !done {
                for &(w, cost) in &r.sources {
                    if let Some(f) = cluster.load.worker_capacity_factor.get_mut(w) {
                        *f = (*f - cost).max(MIN_CAPACITY_FACTOR);
                    }
                }
                still.push(i);
                continue;
            }
            let outcome = match r.fault {
                Some(FaultKind::Fail) => Err("injected failure: the change was not applied".to_owned()),
                _ => apply(cluster, &r.spec, r.plan.as_ref(), t_secs).map_err(|e| e.to_string()),
            };
            let outcome = match (outcome, r.fault) {
                (Ok(()), Some(FaultKind::Timeout)) => {
                    Err(format!("timed out after {:.0} s; the change may have been applied", r.duration_secs))
                }
                (other, _) => other,
            };
            r.op.finished_at_ms = Some(now_ms);
            match outcome {
                Ok(()) => r.op.state = OperationState::Succeeded,
                Err(e) => {
                    r.op.state = OperationState::Failed;
                    r.op.error = Some(e);
                }
            }
            tracing::info!(operation = %r.op.id, state = ?r.op.state, error = r.op.error.as_deref(), "operation finished");
            for b in &r.busy {
                self.busy.remove(b);
            }
        }
        self.running = still;
    }
}

fn apply(cluster: &mut Cluster, spec: &ActionSpec, plan: Option<&GroupPlan>, t_secs: f64) -> Result<(), LayoutError> {
    match spec {
        ActionSpec::Split { partition, split_key } => cluster.apply_split(partition, *split_key, t_secs).map(|_| ()),
        ActionSpec::SplitInto { partition, split_keys, to_workers, group, first_to_worker } => {
            let mut pieces =
                cluster.apply_split_into(partition, split_keys, to_workers, first_to_worker.as_ref(), t_secs)?;
            if let Some(g) = group {
                pieces.push(partition.clone());
                cluster.join_pieces(&pieces, g);
            }
            Ok(())
        }
        ActionSpec::Move { partition, to_worker, .. } => cluster.apply_move(partition, to_worker),
        ActionSpec::Merge { left, right, to_worker } => cluster.apply_merge(left, right, to_worker.as_ref()),
        ActionSpec::Group { group, .. } => match plan {
            Some(plan) => cluster.apply_group(plan, group),
            None => Ok(()),
        },
        ActionSpec::Reshard { tenant, dataset, tenant_shards, dataset_shards, load_balancing } => {
            cluster.apply_reshard(tenant, dataset, *tenant_shards, *dataset_shards, *load_balancing)
        }
    }
}
