//! Where a move may go, found without looking at every worker.
//!
//! [`Pass::best_destination`](super::Pass::best_destination) runs once per hot partition and
//! per worker-overload candidate, and each run looked at every worker: 60 % of a pass over 100k
//! partitions on 1,000 workers (`cargo bench -p lb-master --bench table -- analysis_pass`,
//! 2026-12-05). Its answer within the owner's zone is the coolest worker that fits, how many
//! are at their action cap, how many would end too hot, and whether any could take the load at
//! all. With the workers sorted by their load ratio, most of that follows from two facts:
//! adding a partition never lowers a worker's ratio, and raises it by at most the partition's
//! load over the smallest capacity. So the workers cool enough to fit for sure, and those too hot
//! to fit at all, are counted by binary search; only the band between, and the few coolest while
//! they may still win, are worked out one by one.
//!
//! The order is kept while nothing it depends on changes: the model counts every change of the
//! workers' loads and action counts ([`Model::workers_changed`]), and a worker leaving the shared
//! pool in a pass invalidates it ([`Destinations::invalidate`]). Debug builds check a kept order
//! against a copy of what it was sorted from.

use lb_common::ids::GroupId;

use super::Zones;
use super::model::{Load, Model};

/// The shared-pool workers of one zone (every worker, without zones), for moves out of it.
#[derive(Debug)]
pub(crate) struct ZoneOrder {
    /// Healthy workers under their action cap and not streaming partitions away, ascending by
    /// (load ratio, index).
    pub order: Vec<(f64, u32)>,
    /// How many healthy workers are at their action cap.
    pub capped: usize,
    /// How many others are streaming partitions away (they take no load until those land).
    pub shedding: usize,
}

/// What a pass's orders were sorted from: per worker its load, action count, health, whether
/// it is shared, and whether it is streaming partitions away.
#[cfg(debug_assertions)]
type SortedFrom = (Vec<Load>, Vec<u32>, Vec<bool>, Vec<bool>, Vec<bool>);

/// The sorted workers of a pass, per zone of the source, with what they were sorted at.
#[derive(Debug, Default)]
pub(crate) struct Destinations {
    /// [`Model::workers_changed`] and the action cap the orders were sorted at.
    sorted_at: Option<(u64, u32)>,
    /// The largest `1 / capacity` in each dimension over all workers.
    max_inv_cap: Load,
    /// Per zone index (the last slot: a source without a zone, which shares every zone).
    zones: Vec<Option<ZoneOrder>>,
    /// What the orders were sorted from (debug builds: checked on every use).
    #[cfg(debug_assertions)]
    seen: SortedFrom,
}

impl Destinations {
    /// Forgets the orders: a worker left the shared pool.
    pub fn invalidate(&mut self) {
        self.sorted_at = None;
    }

    /// The order of the workers that share a zone with `src` (sorted again first if the model
    /// changed since), with the largest `1 / capacity` in each dimension.
    pub fn home_of(
        &mut self,
        model: &Model,
        groups: &[Option<GroupId>],
        zones: &Zones,
        cap: u32,
        src: usize,
    ) -> (&ZoneOrder, Load) {
        #[cfg(debug_assertions)]
        let now = (
            model.worker_load.clone(),
            model.worker_actions.clone(),
            model.healthy.clone(),
            groups.iter().map(Option::is_none).collect::<Vec<_>>(),
            (0..model.healthy.len()).map(|w| model.shedding(w)).collect::<Vec<_>>(),
        );
        if self.sorted_at != Some((model.workers_changed(), cap)) {
            self.sorted_at = Some((model.workers_changed(), cap));
            self.max_inv_cap = model.max_inv_cap();
            self.zones.clear();
            self.zones.resize_with(zones.names.len() + 1, || None);
            #[cfg(debug_assertions)]
            {
                self.seen = now;
            }
        } else {
            #[cfg(debug_assertions)]
            assert!(self.seen == now, "the workers changed without Model::workers_changed or Destinations::invalidate");
        }
        let z = zones.of[src];
        let slot = if z == Zones::NONE { zones.names.len() } else { z as usize };
        let order = self.zones[slot].get_or_insert_with(|| {
            let (mut order, mut capped, mut shedding) = (Vec::new(), 0, 0);
            for (w, group) in groups.iter().enumerate() {
                if !model.healthy[w] || group.is_some() || !zones.same(src, w) {
                    continue;
                }
                if model.worker_actions[w] >= cap {
                    capped += 1;
                } else if model.shedding(w) {
                    shedding += 1;
                } else {
                    order.push((model.worker_ratio(w), w as u32));
                }
            }
            order.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            ZoneOrder { order, capped, shedding }
        });
        (order, self.max_inv_cap)
    }
}
