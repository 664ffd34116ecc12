//! Dedication: give a partition that is too hot to share a worker that worker alone.
//!
//! A partition that cannot be split (one hot key, an append tail, a Valkey hash slot) and whose
//! load alone would push any other worker over the high watermark cannot be relieved by a move:
//! the hotspot would only change worker. Isolating it onto a dedicated group needs a group in
//! the topology. When the storage system forms groups itself
//! ([`PlannerInput::new_group_dedicates_owner`](super::PlannerInput), the Valkey adapter does),
//! the planner proposes `group {partition, "dedicated-<partition>"}`: the partition stays where
//! it is, every other partition of its worker moves to the other healthy shared workers, and the
//! worker leaves the shared pool. Nothing else on it is dragged down any more, and what it
//! carried is spread where there is room.
//!
//! It is proposed only when all of these hold (each failure is the reason given):
//! - the storage forms groups and the partition supports `group`;
//! - it carries at least half of its worker's load (a dedication moves everything else, so the
//!   rest must be the smaller part; a worker that looks hot for another reason, such as the
//!   import traffic of a migration, is not handed to one of its ordinary partitions);
//! - no shared worker could take the partition and stay at or under the high watermark;
//! - its worker is shared, has no action in flight, and holds other partitions, none of them
//!   in cooldown (its own cooldown does not count: it stays where it is, and the usual case is
//!   a partition that just landed there, or was just moved in vain);
//! - no receiver ends over the high watermark, and the hottest of the touched workers gains
//!   `min_gain_ratio` after the cost of every byte that moves.
//!
//! The receivers are predicted as the storage fills them: fewest partitions first, in key order
//! ([`Model::dedication_moves`](super::model::Model::dedication_moves)).

use lb_common::ids::{GroupId, PartitionId, derived_id};
use lb_common::protocol::{ActionKind, ActionSpec, GroupTarget};

use super::Pass;
use super::model::supports;
use super::proposal::{Alternative, Policy, Prediction, Proposal, Trigger};
use super::state::PlannerState;

/// Share of its worker's load a partition must carry to get the worker alone.
const MIN_DEDICATED_SHARE: f64 = 0.5;

/// Prefix of the groups the planner forms.
pub const DEDICATED_GROUP_PREFIX: &str = "dedicated-";

/// A dedication that passed every test, ready to propose.
#[derive(Debug, Clone)]
pub struct Dedication {
    pub partition: usize,
    pub worker: usize,
    pub group: GroupId,
    /// `(partition, receiver)` for every partition that leaves the worker.
    pub moves: Vec<(usize, usize)>,
    pub worker_before: f64,
    pub worker_after: f64,
    /// The hottest receiver before and after.
    pub receivers_before: f64,
    pub receivers_after: f64,
    pub receivers: usize,
    /// The shared pool's hottest worker after (the dedicated one has left it).
    pub pool_max_after: f64,
    pub gain: f64,
    pub cost: f64,
}

/// The group a dedication of `partition` forms: `dedicated-<partition>` ([`derived_id`] when
/// that would be over the id limit).
pub fn dedicated_group(partition: &PartitionId) -> GroupId {
    GroupId::new(derived_id(DEDICATED_GROUP_PREFIX, partition.as_str())).expect("derived from a valid id")
}

impl Pass<'_> {
    /// Whether partition `p` should get its worker alone; why not otherwise. See the module doc.
    pub fn dedication(&self, state: &PlannerState, p: usize) -> Result<Dedication, String> {
        let info = &self.input.partitions[p];
        if !self.input.new_group_dedicates_owner {
            return Err("the storage system does not dedicate a worker to a new group".into());
        }
        if !supports(&info.supported_actions, ActionKind::Group) {
            return Err("the storage system cannot group this partition".into());
        }
        let w = self.model.owner[p] as usize;
        let Some(worker) = self.input.workers.get(w) else {
            return Err("its worker is not in the topology".into());
        };
        if let Some(g) = &self.groups[w] {
            return Err(format!("its worker {} is already dedicated to group {g}", worker.id));
        }
        if self.model.worker_actions[w] > 0 {
            return Err(format!("its worker {} has {} actions in flight", worker.id, self.model.worker_actions[w]));
        }
        let (share, worker_ratio) = (self.model.ratio_of(w, self.model.load[p]), self.model.worker_ratio(w));
        if share < MIN_DEDICATED_SHARE * worker_ratio {
            return Err(format!(
                "it carries {share:.2} of worker {}'s {worker_ratio:.2}: under half, moving the rest away would cost more than it relieves",
                worker.id
            ));
        }
        let high = self.config.worker_overload.high_watermark_ratio;
        let receivers = self.model.dedication_receivers(w, |r| self.groups[r].is_none());
        // The storage spreads the rest over every shared worker, whatever its zone.
        let away = receivers.iter().filter(|&&r| !self.zones.same(w, r)).count();
        if away > 0 && !self.may_cross_zones() {
            return Err(format!(
                "the storage would spread its worker's other partitions over {away} workers of other zones (zones.cross = never)"
            ));
        }
        if let Some(&r) = receivers.iter().find(|&&r| self.model.ratio_with(r, p, 1.0) <= high) {
            return Err(format!(
                "worker {} could take it at {:.2} of capacity (high watermark {high:.2}): it is not too hot to share a worker",
                self.input.workers[r].id,
                self.model.ratio_with(r, p, 1.0)
            ));
        }
        let moves = self.model.dedication_moves(p, &receivers);
        if moves.is_empty() {
            return Err(if receivers.is_empty() {
                "no other healthy shared worker can take the rest of its worker".into()
            } else {
                format!("it is already alone on worker {}", worker.id)
            });
        }
        if let Some(why) = moves
            .iter()
            .find_map(|&(q, _)| self.blocked(state, q).map(|(_, why)| (q, why)))
            .map(|(q, why)| format!("partition {} of its worker {}: {why}", self.input.partitions[q].id, worker.id))
        {
            return Err(why);
        }
        let ratios = self.model.ratios_after(&moves);
        let (mut worker_before, mut worker_after) = (self.model.worker_ratio(w), self.model.worker_ratio(w));
        let (mut receivers_before, mut receivers_after, mut touched) = (0.0f64, 0.0f64, 0usize);
        for &(r, before, after) in &ratios {
            if r == w {
                (worker_before, worker_after) = (before, after);
            } else {
                receivers_before = receivers_before.max(before);
                receivers_after = receivers_after.max(after);
                touched += 1;
            }
        }
        if receivers_after > high {
            return Err(format!(
                "the rest of worker {} would put a receiver at {receivers_after:.2} of capacity (high watermark {high:.2})",
                worker.id
            ));
        }
        let pool_max_after = receivers
            .iter()
            .map(|&r| ratios.iter().find(|t| t.0 == r).map_or_else(|| self.model.worker_ratio(r), |t| t.2))
            .fold(0.0, f64::max);
        let cost: f64 = moves.iter().map(|&(q, _)| self.move_cost(q)).sum();
        let gain = worker_before.max(receivers_before) - worker_after.max(receivers_after);
        if gain - cost < self.config.caps.min_gain_ratio {
            return Err(format!(
                "gain {gain:.3} minus cost {cost:.3} of moving {} partitions is under min_gain_ratio {:.3}",
                moves.len(),
                self.config.caps.min_gain_ratio
            ));
        }
        Ok(Dedication {
            partition: p,
            worker: w,
            group: dedicated_group(&info.id),
            moves,
            worker_before,
            worker_after,
            receivers_before,
            receivers_after,
            receivers: touched,
            pool_max_after,
            gain,
            cost,
        })
    }

    /// Proposes `d` and applies it to the model: the worker leaves the shared pool.
    pub fn propose_dedication(
        &mut self,
        state: &mut PlannerState,
        d: Dedication,
        policy: Policy,
        why_hot: String,
        trigger: Trigger,
        mut alts: Vec<Alternative>,
    ) {
        // Only the two overload policies isolate.
        let mode = if policy == Policy::PartitionOverload {
            self.config.partition_overload.mode
        } else {
            self.config.worker_overload.mode
        };
        let info = &self.input.partitions[d.partition];
        let wid = &self.input.workers[d.worker].id;
        let (max, mean, _) = self.model.pool_stats(&self.groups);
        let reason = format!(
            "{why_hot}; no shared worker can take {} under the high watermark, so dedicate worker {wid} to it (group {}): its {} other partitions move to {} workers, {wid} {:.2} -> {:.2}, hottest receiver {:.2} -> {:.2} (gain {:.3} after a cost of {:.3})",
            info.id,
            d.group,
            d.moves.len(),
            d.receivers,
            d.worker_before,
            d.worker_after,
            d.receivers_before,
            d.receivers_after,
            d.gain,
            d.cost
        );
        alts.insert(
            0,
            Alternative {
                candidate: format!("move {}", info.id),
                why: "it would make any shared worker it lands on overloaded: the hotspot would only change worker"
                    .into(),
            },
        );
        let spec =
            ActionSpec::Group { target: GroupTarget::Partition { partition: info.id.clone() }, group: d.group.clone() };
        let predicted = Prediction {
            target_before_ratio: d.worker_before,
            target_after_ratio: d.worker_after,
            source_before_ratio: d.worker_before,
            source_after_ratio: d.worker_after,
            dest_before_ratio: Some(d.receivers_before),
            dest_after_ratio: Some(d.receivers_after),
            cluster_max_before_ratio: max,
            cluster_max_after_ratio: d.pool_max_after,
            cluster_mean_ratio: mean,
            cost_ratio: d.cost,
            dest_worker: None,
        };
        let origin = lb_common::protocol::Origin::Online;
        let proposal = Proposal { spec, policy, mode, origin, reason, trigger, predicted, rejected_alternatives: alts };
        self.model.apply_dedication(d.partition, &d.moves);
        self.groups[d.worker] = Some(d.group);
        self.destinations.get_mut().invalidate();
        self.propose(state, d.partition, mode, proposal);
    }
}
