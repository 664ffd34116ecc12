//! Metrics of the fair queue, with a bounded `tenant` label set.
//!
//! `lb_fair_queue_items{tenant}` (gauge): the first `max_tenant_labels` distinct tenants the
//! queue sees get their own label value for the life of the process; every later tenant is
//! summed into the single value [`OTHER_TENANTS_LABEL`]. So the series count is at most
//! `max_tenant_labels + 1` whatever tenants arrive. The ops server has a handful of configured
//! tenants, so in practice every tenant gets its own series.
//!
//! `lb_fair_queue_rejections_total{reason}` (counter): one increment per refused enqueue,
//! `reason` from the fixed set of [`EnqueueError::reason`](super::EnqueueError::reason).
//!
//! Gauge handles are registered once per label and kept, so the per-operation cost is one store
//! (nothing at all without a recorder).

use std::collections::HashMap;
use std::sync::Arc;

use metrics::Gauge;

/// Name of the per-tenant queue length gauge.
pub const QUEUE_LENGTH_METRIC: &str = "lb_fair_queue_items";
/// Name of the rejection counter.
pub const REJECTIONS_METRIC: &str = "lb_fair_queue_rejections_total";
/// Label value shared by all tenants beyond the label cap.
pub const OTHER_TENANTS_LABEL: &str = "__other__";

/// Which series a tenant's length is reported under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LabelSlot {
    /// Own series, index into `TenantLabels::gauges`.
    Own(usize),
    /// The shared overflow series.
    Other,
}

#[derive(Debug)]
pub(crate) struct TenantLabels {
    max_labels: usize,
    slot_by_tenant: HashMap<Arc<str>, usize>,
    gauges: Vec<Gauge>,
    other: Gauge,
    /// Items of all tenants reported under the overflow label.
    other_len: usize,
}

impl TenantLabels {
    pub(crate) fn new(max_labels: usize) -> Self {
        Self {
            max_labels,
            slot_by_tenant: HashMap::new(),
            gauges: Vec::new(),
            other: metrics::gauge!(QUEUE_LENGTH_METRIC, "tenant" => OTHER_TENANTS_LABEL),
            other_len: 0,
        }
    }

    /// The series of `tenant`, giving it its own label while the cap allows.
    pub(crate) fn slot_for(&mut self, tenant: &Arc<str>) -> LabelSlot {
        if let Some(&slot) = self.slot_by_tenant.get(tenant) {
            return LabelSlot::Own(slot);
        }
        if self.gauges.len() >= self.max_labels {
            return LabelSlot::Other;
        }
        let slot = self.gauges.len();
        self.gauges.push(metrics::gauge!(QUEUE_LENGTH_METRIC, "tenant" => tenant.to_string()));
        self.slot_by_tenant.insert(Arc::clone(tenant), slot);
        LabelSlot::Own(slot)
    }

    /// Reports that one item was added to a tenant that now holds `tenant_len` items.
    pub(crate) fn added(&mut self, slot: LabelSlot, tenant_len: usize) {
        match slot {
            LabelSlot::Own(i) => self.gauges[i].set(len_f64(tenant_len)),
            LabelSlot::Other => {
                self.other_len += 1;
                self.other.set(len_f64(self.other_len));
            }
        }
    }

    /// Reports that one item was removed from a tenant that now holds `tenant_len` items.
    pub(crate) fn removed(&mut self, slot: LabelSlot, tenant_len: usize) {
        match slot {
            LabelSlot::Own(i) => self.gauges[i].set(len_f64(tenant_len)),
            LabelSlot::Other => {
                self.other_len -= 1;
                self.other.set(len_f64(self.other_len));
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn other_len(&self) -> usize {
        self.other_len
    }
}

/// Queue lengths are far below 2^53, so the conversion is exact.
fn len_f64(len: usize) -> f64 {
    len as f64
}

/// Counts one refused enqueue.
pub(crate) fn count_rejection(reason: &'static str) {
    metrics::counter!(REJECTIONS_METRIC, "reason" => reason).increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_capped_and_overflow_is_summed() {
        let mut labels = TenantLabels::new(2);
        let (a, b, c): (Arc<str>, Arc<str>, Arc<str>) = ("a".into(), "b".into(), "c".into());
        assert_eq!(labels.slot_for(&a), LabelSlot::Own(0));
        assert_eq!(labels.slot_for(&b), LabelSlot::Own(1));
        assert_eq!(labels.slot_for(&c), LabelSlot::Other);
        assert_eq!(labels.slot_for(&a), LabelSlot::Own(0), "labels are kept");
        labels.added(LabelSlot::Other, 1);
        labels.added(LabelSlot::Other, 2);
        labels.removed(LabelSlot::Other, 1);
        assert_eq!(labels.other_len(), 1);
    }
}
