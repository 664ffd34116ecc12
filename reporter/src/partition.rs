//! The partitions a worker serves, and the shared handle request threads and the worker's
//! control code use: register partitions (getting a [`PartitionSlot`] to record with), update or
//! remove them, and get a [`Recorder`] per thread.
//!
//! The registry sits behind a mutex that only these control calls and the aggregator take, never
//! [`Recorder::record`]. The aggregator re-reads it only when its version moved.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use lb_common::ids::{KeyRange, PartitionId, TableId, TenantId};

use crate::record::{Recorder, Ring};

/// A partition as the report names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionInfo {
    pub tenant: TenantId,
    pub table: TableId,
    pub partition_id: PartitionId,
    pub key_range: KeyRange,
    pub stored_bytes: u64,
}

impl PartitionInfo {
    /// A partition with no stored bytes yet (set them with
    /// [`ReporterHandle::set_stored_bytes`] or the next upsert).
    pub fn new(tenant: TenantId, table: TableId, partition_id: PartitionId, key_range: KeyRange) -> Self {
        Self { tenant, table, partition_id, key_range, stored_bytes: 0 }
    }
}

/// What a request thread records against: a registered partition's slot. `Copy`, 8 bytes; a
/// slot of a removed partition is never confused with a later one (its generation differs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PartitionSlot {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

impl PartitionSlot {
    pub(crate) fn new(index: u32, generation: u32) -> Self {
        Self { index, generation }
    }
}

#[derive(Debug, Default)]
pub(crate) struct SlotEntry {
    pub generation: u32,
    /// `None` once removed, until the aggregator has reported it and released the slot.
    pub info: Option<PartitionInfo>,
    /// Removed and reported: on the free list.
    pub released: bool,
}

#[derive(Debug, Default)]
pub(crate) struct Registry {
    pub slots: Vec<SlotEntry>,
    free: Vec<u32>,
    by_id: HashMap<PartitionId, u32>,
}

/// What the handle and the aggregator share.
#[derive(Debug)]
pub(crate) struct Hub {
    pub rings: Mutex<Vec<Arc<Ring>>>,
    pub ring_capacity: usize,
    registry: Mutex<Registry>,
    version: AtomicU64,
}

impl Hub {
    pub fn new(ring_capacity: usize) -> Self {
        Self {
            rings: Mutex::new(Vec::new()),
            ring_capacity,
            registry: Mutex::new(Registry::default()),
            version: AtomicU64::new(0),
        }
    }

    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    pub fn registry(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn lock_rings(&self) -> MutexGuard<'_, Vec<Arc<Ring>>> {
        self.rings.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn changed(&self) {
        self.version.fetch_add(1, Ordering::AcqRel);
    }

    /// Makes a removed partition's slot reusable (the aggregator has reported it).
    pub fn release(&self, slots: &[u32]) {
        let mut reg = self.registry();
        for &i in slots {
            let entry = &mut reg.slots[i as usize];
            if entry.info.is_none() && !entry.released {
                entry.released = true;
                entry.generation = entry.generation.wrapping_add(1);
                reg.free.push(i);
            }
        }
    }
}

/// The handle a storage worker keeps: cheap to clone, `Send + Sync`.
#[derive(Debug, Clone)]
pub struct ReporterHandle {
    hub: Arc<Hub>,
}

impl ReporterHandle {
    pub(crate) fn new(hub: Arc<Hub>) -> Self {
        Self { hub }
    }

    /// A recorder with a ring of its own, for one request thread. Keep it for the thread's
    /// life (e.g. in a `thread_local!` or the thread's state): creating one takes a lock.
    /// Dropping it is fine: what it recorded is still aggregated.
    pub fn recorder(&self) -> Recorder {
        let ring = Arc::new(Ring::new(self.hub.ring_capacity));
        self.hub.lock_rings().push(ring.clone());
        Recorder::new(ring)
    }

    /// Registers a partition, or updates the one with the same id (its range after a split,
    /// its stored bytes, its table); returns the slot to record with (the same one on update).
    /// A changed range starts the partition's sketch afresh.
    pub fn upsert_partition(&self, info: PartitionInfo) -> PartitionSlot {
        let mut reg = self.hub.registry();
        let slot = if let Some(&i) = reg.by_id.get(&info.partition_id) {
            let entry = &mut reg.slots[i as usize];
            entry.info = Some(info);
            PartitionSlot::new(i, entry.generation)
        } else {
            let i = match reg.free.pop() {
                Some(i) => i,
                None => {
                    reg.slots.push(SlotEntry::default());
                    u32::try_from(reg.slots.len() - 1).expect("fewer than 4 billion partitions on one worker")
                }
            };
            reg.by_id.insert(info.partition_id.clone(), i);
            let entry = &mut reg.slots[i as usize];
            entry.info = Some(info);
            entry.released = false;
            PartitionSlot::new(i, entry.generation)
        };
        drop(reg);
        self.hub.changed();
        slot
    }

    /// Sets a registered partition's stored bytes; `false` if the slot is not (or no longer)
    /// registered.
    pub fn set_stored_bytes(&self, slot: PartitionSlot, stored_bytes: u64) -> bool {
        let mut reg = self.hub.registry();
        let Some(entry) = reg.slots.get_mut(slot.index as usize).filter(|e| e.generation == slot.generation) else {
            return false;
        };
        let Some(info) = entry.info.as_mut() else { return false };
        info.stored_bytes = stored_bytes;
        drop(reg);
        self.hub.changed();
        true
    }

    /// Stops reporting a partition (moved away, merged). What was recorded for it up to now is
    /// still in the next report; later records with its slot are dropped and counted.
    pub fn remove_partition(&self, id: &PartitionId) -> bool {
        let mut reg = self.hub.registry();
        let Some(i) = reg.by_id.remove(id) else { return false };
        reg.slots[i as usize].info = None;
        drop(reg);
        self.hub.changed();
        true
    }

    /// The slot of a registered partition.
    pub fn slot_of(&self, id: &PartitionId) -> Option<PartitionSlot> {
        let reg = self.hub.registry();
        reg.by_id.get(id).map(|&i| PartitionSlot::new(i, reg.slots[i as usize].generation))
    }
}
