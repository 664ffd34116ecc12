//! Consumers and the optional restriction of which consumers serve which tenant.
//!
//! Loki's shuffle sharding: with `max_consumers_per_tenant = k > 0` and more than `k` registered
//! consumers, each tenant is served only by `k` consumers picked by a PRNG seeded from the tenant
//! name, so the choice is stable while the consumer set is stable and a storm in one tenant
//! occupies at most `k` consumers. Bit-exact agreement with Loki's Go PRNG is not a goal (the
//! reference says so); any deterministic per-tenant PRNG keeps the properties.

use crate::ids::fnv1a_64;
use crate::rng::SplitMix64;
use std::collections::BTreeMap;
use std::fmt;

/// Identity of one consumer (e.g. one executor task of the ops server).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConsumerId(pub u64);

impl fmt::Display for ConsumerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[derive(Debug, Default)]
struct ConsumerState {
    /// Registrations not yet undone (one consumer may run several connections or loops).
    connections: usize,
    /// Announced its shutdown: gets no more work, removed when its last registration goes.
    shutting_down: bool,
}

/// Registered consumers, kept sorted by id (the shuffle input must be in a stable order).
#[derive(Debug, Default)]
pub(crate) struct Consumers {
    by_id: BTreeMap<ConsumerId, ConsumerState>,
}

impl Consumers {
    /// Adds one registration; returns true when the set of consumers changed.
    pub(crate) fn register(&mut self, id: ConsumerId) -> bool {
        let state = self.by_id.entry(id).or_default();
        state.connections += 1;
        state.shutting_down = false;
        state.connections == 1
    }

    /// Removes one registration; returns true when the consumer left the set. Unknown ids are
    /// ignored (returns false).
    pub(crate) fn unregister(&mut self, id: ConsumerId) -> bool {
        let Some(state) = self.by_id.get_mut(&id) else {
            return false;
        };
        state.connections -= 1;
        if state.connections == 0 {
            self.by_id.remove(&id);
            return true;
        }
        false
    }

    /// Marks a consumer as shutting down: from now on it gets no work.
    pub(crate) fn notify_shutdown(&mut self, id: ConsumerId) {
        if let Some(state) = self.by_id.get_mut(&id) {
            state.shutting_down = true;
        }
    }

    pub(crate) fn is_registered(&self, id: ConsumerId) -> bool {
        self.by_id.contains_key(&id)
    }

    pub(crate) fn is_shutting_down(&self, id: ConsumerId) -> bool {
        self.by_id.get(&id).is_some_and(|s| s.shutting_down)
    }

    /// Sorted ids of all registered consumers.
    pub(crate) fn sorted_ids(&self) -> Vec<ConsumerId> {
        self.by_id.keys().copied().collect()
    }
}

/// The consumers allowed to serve `tenant`, sorted; `None` means every consumer.
///
/// `None` when `k == 0` (no restriction) or when there are at most `k` consumers.
pub(crate) fn shard_for(tenant: &str, k: usize, sorted_all: &[ConsumerId]) -> Option<Vec<ConsumerId>> {
    if k == 0 || sorted_all.len() <= k {
        return None;
    }
    let mut rng = SplitMix64::new(fnv1a_64(tenant.as_bytes()));
    let mut pool = sorted_all.to_vec();
    let mut picked = Vec::with_capacity(k);
    for remaining in (pool.len() - k + 1..=pool.len()).rev() {
        // Partial Fisher-Yates: pick from the first `remaining`, move the pick out of range.
        let bound = u64::try_from(remaining).expect("consumer count fits in u64");
        // Modulo, not `below`: the shard of every tenant stays what it has always been.
        let r = usize::try_from(rng.next_u64() % bound).expect("value below a usize bound");
        picked.push(pool[r]);
        pool.swap(r, remaining - 1);
    }
    picked.sort_unstable();
    Some(picked)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: u64) -> Vec<ConsumerId> {
        (0..n).map(ConsumerId).collect()
    }

    /// Loki `TestShuffleConsumers`: k ≥ len gives no restriction; same input, same output.
    #[test]
    fn shard_is_none_without_restriction_and_deterministic() {
        assert_eq!(shard_for("t", 0, &ids(5)), None);
        assert_eq!(shard_for("t", 5, &ids(5)), None);
        assert_eq!(shard_for("t", 6, &ids(5)), None);
        let a = shard_for("tenant", 3, &ids(5)).expect("restricted");
        assert_eq!(a.len(), 3);
        assert!(a.windows(2).all(|w| w[0] < w[1]), "sorted and distinct");
        assert_eq!(shard_for("tenant", 3, &ids(5)), Some(a));
    }

    /// Loki `TestQueuesWithConsumers`: 30 consumers, 1000 tenants, k = 5: every tenant gets
    /// exactly 5 and the load per consumer is even (stddev ≤ 20 % of the mean).
    #[test]
    fn shards_spread_tenants_evenly() {
        let all = ids(30);
        let mut per_consumer = [0_u32; 30];
        for t in 0..1000 {
            let shard = shard_for(&format!("user-{t}"), 5, &all).expect("restricted");
            assert_eq!(shard.len(), 5);
            for c in shard {
                per_consumer[usize::try_from(c.0).expect("small")] += 1;
            }
        }
        let mean = 1000.0 * 5.0 / 30.0;
        let total: u32 = per_consumer.iter().sum();
        assert_eq!(total, 5000);
        let var = per_consumer.iter().map(|&n| (f64::from(n) - mean).powi(2)).sum::<f64>() / 30.0;
        assert!(var.sqrt() <= 0.2 * mean, "stddev {} mean {mean}", var.sqrt());
    }

    #[test]
    fn registration_counts_connections() {
        let mut c = Consumers::default();
        assert!(c.register(ConsumerId(1)));
        assert!(!c.register(ConsumerId(1)));
        c.notify_shutdown(ConsumerId(1));
        assert!(c.is_shutting_down(ConsumerId(1)));
        assert!(!c.unregister(ConsumerId(1)));
        assert!(c.unregister(ConsumerId(1)));
        assert!(!c.is_registered(ConsumerId(1)));
        assert!(!c.unregister(ConsumerId(1)), "unknown ids are ignored");
    }
}
