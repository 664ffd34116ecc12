//! An SRE's action by hand (`POST /api/v1/actions`, `lbctl split|move|…`) checked against the
//! planner's current view and turned into a [`Proposal`] with the same prediction numbers the
//! policies give theirs, so it is submitted, tracked and evaluated on one path.
//!
//! The checks are the ones the storage system would otherwise fail on later, answered now with
//! the field that is wrong: the partition exists, a split key lies strictly inside its range
//! (a split makes `[start, key - 1]` and `[key, end]`), a move goes to another healthy worker,
//! a merge joins two adjacent partitions of one table (and lands on a healthy owner of one of
//! them, its `to_worker`), a reshard names a known dataset.

use lb_common::protocol::{ActionSpec, DatasetInfo, GroupTarget, Origin, PolicyMode};

use super::config::PlannerConfig;
use super::input::PlannerInput;
use super::model::{Model, Streams, partitions_of, split_key_share, supports};
use super::proposal::{Policy, Prediction, Proposal, Trigger};

/// Why a manual action does not fit the current layout: the request field and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ManualRefusal {
    pub field: String,
    pub message: String,
}

/// Partition `p` streaming from its worker to `to` (a move, a merge's other side): source and
/// destination before and after, the cost of its bytes, and the cluster's max once it landed,
/// which `model` then shows.
fn predict_stream(
    model: &mut Model,
    predicted: &mut Prediction,
    input: &PlannerInput,
    config: &PlannerConfig,
    groups: &[Option<lb_common::ids::GroupId>],
    p: usize,
    to: usize,
) {
    let from = model.owner[p] as usize;
    predicted.source_before_ratio = model.worker_ratio(from);
    predicted.source_after_ratio = model.ratio_with(from, p, -1.0);
    predicted.dest_before_ratio = Some(model.worker_ratio(to));
    predicted.dest_after_ratio = Some(model.ratio_with(to, p, 1.0));
    let gib = input.partitions[p].stored_bytes as f64 / (1u64 << 30) as f64;
    predicted.cost_ratio = gib * config.caps.move_cost_ratio_per_gib;
    model.apply_move(p, to);
    predicted.cluster_max_after_ratio = model.pool_stats(groups).0;
}

fn refuse(field: &str, message: impl Into<String>) -> ManualRefusal {
    ManualRefusal { field: field.to_owned(), message: message.into() }
}

/// The proposal of a manual action on `input` (origin and policy `manual`, mode `auto`).
pub fn manual_proposal(
    spec: &ActionSpec,
    reason: &str,
    input: &PlannerInput,
    datasets: &[DatasetInfo],
    config: &PlannerConfig,
    now_ms: i64,
) -> Result<Proposal, ManualRefusal> {
    if reason.trim().is_empty() {
        return Err(refuse("reason", "must say why"));
    }
    if reason.len() > lb_common::protocol::MAX_REASON_BYTES {
        return Err(refuse("reason", format!("must be at most {} bytes", lb_common::protocol::MAX_REASON_BYTES)));
    }
    for id in partitions_of(spec) {
        if input.in_flight.iter().any(|a| partitions_of(&a.spec).contains(&id)) {
            return Err(refuse("spec", format!("{id} has an action in flight; wait for it to end")));
        }
    }
    let index = |field: &str, id: &lb_common::ids::PartitionId| {
        input
            .partitions
            .iter()
            .position(|p| &p.id == id)
            .ok_or_else(|| refuse(field, format!("no partition {id} in the current topology")))
    };
    let mut model = Model::build(input, Streams::new(&config.caps, input.move_rate_limit), now_ms);
    let groups: Vec<_> = input.workers.iter().map(|w| w.group.clone()).collect();
    let (max_before, mean, _) = model.pool_stats(&groups);
    let target_ratio = |p: usize| {
        let view = &input.partitions[p];
        let limit = view.limit.map_or(0.0, |l| l.ops_per_sec);
        if limit > 0.0 { (view.stats.ops_per_sec + view.stats.rejected_per_sec) / limit } else { 0.0 }
    };
    let mut predicted =
        Prediction { cluster_max_before_ratio: max_before, cluster_mean_ratio: mean, ..Prediction::default() };
    match spec {
        ActionSpec::Split { partition, split_key } => {
            let p = index("spec.partition", partition)?;
            let range = input.partitions[p].range;
            if range.split_at(*split_key).is_none() {
                return Err(refuse(
                    "spec.split_key",
                    format!(
                        "{split_key} is not strictly inside {partition}'s range [{}, {}] (a split makes [start, key - 1] and [key, end])",
                        range.start, range.end
                    ),
                ));
            }
            let share = split_key_share(range, input.partitions[p].stats.sketch.as_ref(), *split_key);
            let before = target_ratio(p);
            let source = model.worker_ratio(model.owner[p] as usize);
            predicted.target_before_ratio = before;
            predicted.target_after_ratio = before * share.max(1.0 - share);
            (predicted.source_before_ratio, predicted.source_after_ratio) = (source, source);
            predicted.cluster_max_after_ratio = max_before;
        }
        ActionSpec::SplitInto { .. } => {
            return Err(refuse(
                "spec.kind",
                "split_into is the planner's (it sizes and places the pieces from the sketch); split manually one key at a time"
                    .to_owned(),
            ));
        }
        ActionSpec::Move { partition, to_worker, .. } => {
            let p = index("spec.partition", partition)?;
            let to =
                input.workers.iter().position(|w| &w.id == to_worker).ok_or_else(|| {
                    refuse("spec.to_worker", format!("no worker {to_worker} in the current topology"))
                })?;
            let from = model.owner[p] as usize;
            if from == to {
                return Err(refuse("spec.to_worker", format!("{partition} is already on {to_worker}")));
            }
            if !model.healthy[to] {
                return Err(refuse("spec.to_worker", format!("{to_worker} is not healthy")));
            }
            predicted.target_before_ratio = target_ratio(p);
            predicted.target_after_ratio = predicted.target_before_ratio;
            predict_stream(&mut model, &mut predicted, input, config, &groups, p, to);
        }
        ActionSpec::Merge { left, right, to_worker } => {
            let (l, r) = (index("spec.left", left)?, index("spec.right", right)?);
            let (lv, rv) = (&input.partitions[l], &input.partitions[r]);
            if (&lv.tenant, &lv.table) != (&rv.tenant, &rv.table) {
                return Err(refuse(
                    "spec.right",
                    format!("{right} is not in {left}'s table {}/{}", lv.tenant, lv.table),
                ));
            }
            if lv.range.end.0.checked_add(1) != Some(rv.range.start.0) {
                return Err(refuse(
                    "spec.right",
                    format!("{right} does not start right after {left} ends ({})", lv.range.end),
                ));
            }
            let limit = lv.limit.map_or(0.0, |c| c.ops_per_sec);
            let demand = |v: &super::input::PartitionView| v.stats.ops_per_sec + v.stats.rejected_per_sec;
            predicted.target_before_ratio = target_ratio(l).max(target_ratio(r));
            predicted.target_after_ratio = if limit > 0.0 { (demand(lv) + demand(rv)) / limit } else { 0.0 };
            // The side not on the destination streams there: a move's prediction.
            let (lw, rw) = (model.owner[l] as usize, model.owner[r] as usize);
            if let Some(to) = to_worker
                && !input.merge_to_worker
            {
                return Err(refuse(
                    "spec.to_worker",
                    format!(
                        "{to}: the storage system does not place merges (its topology does not say merge_to_worker)"
                    ),
                ));
            }
            let dest = match to_worker {
                None => lw,
                Some(to) => match input.workers.iter().position(|w| &w.id == to) {
                    None => return Err(refuse("spec.to_worker", format!("no worker {to} in the current topology"))),
                    Some(w) if w != lw && w != rw => {
                        return Err(refuse(
                            "spec.to_worker",
                            format!("{to} owns neither {left} nor {right} (a merge lands on one of their owners)"),
                        ));
                    }
                    Some(w) if !model.healthy[w] => {
                        return Err(refuse("spec.to_worker", format!("{to} is not healthy")));
                    }
                    Some(w) => w,
                },
            };
            let streamed = if dest == lw { r } else { l };
            if model.owner[streamed] as usize == dest {
                predicted.source_before_ratio = model.worker_ratio(dest);
                predicted.source_after_ratio = predicted.source_before_ratio;
                predicted.cluster_max_after_ratio = max_before;
            } else {
                predict_stream(&mut model, &mut predicted, input, config, &groups, streamed, dest);
            }
        }
        ActionSpec::Group { target, .. } => {
            if let GroupTarget::Partition { partition } = target {
                let p = index("spec.target.partition", partition)?;
                predicted.target_before_ratio = target_ratio(p);
                predicted.target_after_ratio = predicted.target_before_ratio;
                predicted.source_before_ratio = model.worker_ratio(model.owner[p] as usize);
                predicted.source_after_ratio = model.ratio_with(model.owner[p] as usize, p, -1.0);
            }
            predicted.cluster_max_after_ratio = max_before;
        }
        ActionSpec::Reshard { tenant, dataset, tenant_shards, dataset_shards, .. } => {
            if !datasets.iter().any(|d| &d.tenant == tenant && &d.dataset == dataset) {
                return Err(refuse(
                    "spec.dataset",
                    format!("no hash-sharded dataset {tenant}/{dataset} in the topology"),
                ));
            }
            if *tenant_shards == 0 || *dataset_shards == 0 || dataset_shards > tenant_shards {
                return Err(refuse(
                    "spec.dataset_shards",
                    format!("needs 1 <= dataset_shards ({dataset_shards}) <= tenant_shards ({tenant_shards})"),
                ));
            }
            predicted.cluster_max_after_ratio = max_before;
        }
    }
    for (i, id) in partitions_of(spec).into_iter().enumerate() {
        let p = index(if i == 0 { "spec.partition" } else { "spec.right" }, id)?;
        if !supports(&input.partitions[p].supported_actions, spec.kind()) {
            return Err(refuse(
                "spec.kind",
                format!("{id} does not support {} in this storage system", spec.kind().as_str()),
            ));
        }
    }
    Ok(Proposal {
        spec: spec.clone(),
        policy: Policy::Manual,
        mode: PolicyMode::Auto,
        origin: Origin::Manual,
        reason: reason.to_owned(),
        trigger: Trigger::default(),
        predicted,
        rejected_alternatives: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use lb_common::protocol::Health;

    use super::*;
    use crate::planner::tests::{cluster, wid};

    /// A manual merge lands on a healthy owner of one of its sides, and is predicted where it
    /// lands: its streamed side leaves its worker for the destination.
    #[test]
    fn a_manual_merge_is_refused_off_its_owners_and_predicted_where_it_lands() {
        let mut input = cluster(&[1_000.0, 3_000.0, 500.0], &[0, 1, 2], 3, &[]);
        input.merge_to_worker = true;
        let config = PlannerConfig::default();
        let merge = |to: Option<usize>| ActionSpec::Merge {
            left: "p0".parse().expect("id"),
            right: "p1".parse().expect("id"),
            to_worker: to.map(wid),
        };
        let propose = |input: &PlannerInput, to| manual_proposal(&merge(to), "cold", input, &[], &config, 1_000);
        let refusal = propose(&input, Some(2)).expect_err("w-2 owns neither");
        assert_eq!(refusal.field, "spec.to_worker");
        assert!(refusal.message.contains("owns neither p0 nor p1"), "{refusal}");
        let refusal = propose(&input, Some(7)).expect_err("no such worker");
        assert_eq!(refusal.message, "no worker w-7 in the current topology");
        // Onto w-0: p1 (0.03 of a worker) streams from w-1.
        let p = propose(&input, Some(0)).expect("fits");
        assert!((p.predicted.source_before_ratio - 0.03).abs() < 1e-9, "{:?}", p.predicted);
        assert!(p.predicted.source_after_ratio.abs() < 1e-9, "{:?}", p.predicted);
        assert_eq!(p.predicted.dest_before_ratio, Some(0.01));
        assert!(p.predicted.dest_after_ratio.is_some_and(|r| (r - 0.04).abs() < 1e-9), "{:?}", p.predicted);
        assert!(p.predicted.cost_ratio > 0.0, "1 GiB streams");
        input.workers[0].health = Health::Down;
        let refusal = propose(&input, Some(0)).expect_err("down");
        assert_eq!(refusal.message, "w-0 is not healthy");
        input.merge_to_worker = false;
        let refusal = propose(&input, Some(1)).expect_err("not placed by this storage");
        assert!(refusal.message.contains("does not say merge_to_worker"), "{refusal}");
        assert!(propose(&input, None).is_ok(), "without a destination it stays on the left's owner");
    }
}
