//! Layout changes: the ones admin operations make and the ones the timeline makes.
//!
//! Contract: every `check_*` is pure and says why a change is invalid ([`LayoutError`]); the
//! matching `apply_*` re-resolves ids (indices shift on merges) and only then mutates, so an
//! invalid request never changes anything. Every applied change bumps [`Cluster::version`].

use lb_common::ids::{DatasetId, GroupId, Key, PartitionId, TenantId, WorkerId, ZoneId};
use lb_common::protocol::{Capacity, GroupTarget, Health, LoadBalancing};

use super::Cluster;

/// Why a layout change was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error("partition {0} does not exist")]
    UnknownPartition(PartitionId),
    #[error("worker {0} does not exist")]
    UnknownWorker(WorkerId),
    #[error("worker {0} is down")]
    WorkerDown(WorkerId),
    #[error("no table {table} of tenant {tenant}")]
    UnknownTable { tenant: TenantId, table: String },
    #[error("tenant {0} has no partitions")]
    UnknownTenant(TenantId),
    #[error("no dataset {dataset} of tenant {tenant}")]
    UnknownDataset { tenant: TenantId, dataset: DatasetId },
    #[error("group {0} has no healthy worker")]
    EmptyGroup(GroupId),
    #[error("split key {key} is not inside {partition} ({start}..={end}) with both halves non-empty")]
    SplitOutsideRange { partition: PartitionId, key: Key, start: Key, end: Key },
    #[error("partition {0} is already on worker {1}")]
    AlreadyThere(PartitionId, WorkerId),
    #[error(
        "partitions {left} and {right} are not adjacent partitions of one table (left must end right before right starts)"
    )]
    NotAdjacent { left: PartitionId, right: PartitionId },
    #[error("shard counts invalid: {0}")]
    BadShards(String),
    #[error("worker {0} already exists")]
    DuplicateWorker(WorkerId),
    #[error("split keys of {partition} must be strictly ascending with one worker per new piece")]
    BadSplitPieces { partition: PartitionId },
    #[error("no new piece of {partition} goes to a worker of group {group}")]
    NoPieceInGroup { partition: PartitionId, group: GroupId },
    #[error("worker {worker} owns neither {left} nor {right}: a merge lands on the owner of one of its sides")]
    MergeElsewhere { worker: WorkerId, left: PartitionId, right: PartitionId },
}

/// What a group action does: the partitions it pins and the moves it needs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GroupPlan {
    pub members: Vec<PartitionId>,
    /// (partition, destination): members onto the group, others off it.
    pub moves: Vec<(PartitionId, WorkerId)>,
    pub moved_bytes: f64,
}

impl Cluster {
    fn partition(&self, id: &PartitionId) -> Result<usize, LayoutError> {
        self.partitions.find(id).ok_or_else(|| LayoutError::UnknownPartition(id.clone()))
    }

    fn healthy_worker(&self, id: &WorkerId) -> Result<usize, LayoutError> {
        let w = self.workers.find(id).ok_or_else(|| LayoutError::UnknownWorker(id.clone()))?;
        if self.workers.health[w] == Health::Down {
            return Err(LayoutError::WorkerDown(id.clone()));
        }
        Ok(w)
    }

    pub fn check_split(&self, id: &PartitionId, key: Key) -> Result<usize, LayoutError> {
        let p = self.partition(id)?;
        let range = self.partitions.range(p);
        if range.split_at(key).is_none() {
            return Err(LayoutError::SplitOutsideRange {
                partition: id.clone(),
                key,
                start: range.start,
                end: range.end,
            });
        }
        Ok(p)
    }

    /// Splits into `[start, key-1]` (keeps the id) and `[key, end]` (a new id on the same
    /// owner). Stored bytes and accumulated counters divide by key width and current demand.
    pub fn apply_split(&mut self, id: &PartitionId, key: Key, t_secs: f64) -> Result<PartitionId, LayoutError> {
        let p = self.check_split(id, key)?;
        let t = self.partitions.table[p] as usize;
        let (start, end) = (self.partitions.start[p], self.partitions.end[p]);
        let right_width_ratio = ((end - key.0) as f64 + 1.0) / ((end - start) as f64 + 1.0);
        let total = self.demand_in(t, start, end, t_secs);
        let right_demand_ratio =
            if total > 0.0 { self.demand_in(t, key.0, end, t_secs) / total } else { right_width_ratio };
        let table = &mut self.tables[t];
        let seq = table.next_seq;
        table.next_seq += 1;
        let new_id = super::partition_id(&table.tenant, &table.table, seq);
        let bytes = self.partitions.stored_bytes[p];
        let owner = self.partitions.owner[p];
        self.partitions.end[p] = key.0 - 1;
        self.partitions.stored_bytes[p] = bytes * (1.0 - right_width_ratio);
        let q = self.partitions.push(new_id.clone(), t as u32, key.0, end, owner, bytes * right_width_ratio);
        self.partitions.group[q] = self.partitions.group[p].clone();
        self.load.push_partition();
        self.load.transfer_acc(p, q, right_demand_ratio);
        self.insert_after(t, p, q);
        self.version += 1;
        Ok(new_id)
    }

    /// Checks a multi-way split: every key strictly inside the range, ascending, and one healthy
    /// worker per new piece. Returns the partition and the bytes that leave its worker.
    pub fn check_split_into(
        &self,
        id: &PartitionId,
        keys: &[Key],
        to: &[WorkerId],
        first_to: Option<&WorkerId>,
    ) -> Result<(usize, f64), LayoutError> {
        let p = self.partition(id)?;
        if keys.is_empty() || keys.len() != to.len() || keys.windows(2).any(|w| w[0] >= w[1]) {
            return Err(LayoutError::BadSplitPieces { partition: id.clone() });
        }
        for &k in keys {
            self.check_split(id, k)?;
        }
        let (start, end) = (self.partitions.start[p], self.partitions.end[p]);
        let width = (end - start) as f64 + 1.0;
        let bytes = self.partitions.stored_bytes[p];
        let owner = self.partitions.owner[p] as usize;
        let mut leaving = 0.0;
        for (i, (k, w)) in keys.iter().zip(to).enumerate() {
            let w = self.healthy_worker(w)?;
            if w != owner {
                let piece_end = keys.get(i + 1).map_or(end, |n| n.0 - 1);
                leaving += bytes * ((piece_end - k.0) as f64 + 1.0) / width;
            }
        }
        if let Some(w) = first_to
            && self.healthy_worker(w)? != owner
        {
            leaving += bytes * ((keys[0].0 - start) as f64) / width;
        }
        Ok((p, leaving))
    }

    /// Cuts the partition at every key (ascending: the new pieces get ascending ids) and puts
    /// each new piece on its worker; the first piece keeps the id, and the owner unless
    /// `first_to` names another worker.
    pub fn apply_split_into(
        &mut self,
        id: &PartitionId,
        keys: &[Key],
        to: &[WorkerId],
        first_to: Option<&WorkerId>,
        t_secs: f64,
    ) -> Result<Vec<PartitionId>, LayoutError> {
        self.check_split_into(id, keys, to, first_to)?;
        let mut pieces = Vec::with_capacity(keys.len());
        let mut rest = id.clone();
        for &k in keys {
            rest = self.apply_split(&rest, k, t_secs)?;
            pieces.push(rest.clone());
        }
        for (piece, w) in std::iter::once(id).zip(first_to).chain(pieces.iter().zip(to)) {
            if let (Some(q), Ok(w)) = (self.partitions.find(piece), self.healthy_worker(w)) {
                self.partitions.owner[q] = w as u32;
            }
        }
        self.version += 1;
        Ok(pieces)
    }

    /// Whether a split into pieces on `to` (the first on `first_to`) may have its pieces join
    /// `group` there: one of the workers is the group's.
    pub fn check_pieces_join(
        &self,
        id: &PartitionId,
        to: &[WorkerId],
        first_to: Option<&WorkerId>,
        group: &GroupId,
    ) -> Result<(), LayoutError> {
        let of_group =
            |w: &WorkerId| self.workers.find(w).is_some_and(|w| self.workers.group[w].as_ref() == Some(group));
        if to.iter().chain(first_to).any(of_group) {
            Ok(())
        } else {
            Err(LayoutError::NoPieceInGroup { partition: id.clone(), group: group.clone() })
        }
    }

    /// The new pieces on a worker of `group` join it (a split into pieces with a group).
    pub fn join_pieces(&mut self, pieces: &[PartitionId], group: &GroupId) {
        for piece in pieces {
            if let Some(q) = self.partitions.find(piece)
                && self.workers.group[self.partitions.owner[q] as usize].as_ref() == Some(group)
            {
                self.partitions.group[q] = Some(group.clone());
            }
        }
        self.version += 1;
    }

    pub fn check_move(&self, id: &PartitionId, to: &WorkerId) -> Result<(usize, usize), LayoutError> {
        let p = self.partition(id)?;
        let w = self.healthy_worker(to)?;
        if self.partitions.owner[p] as usize == w {
            return Err(LayoutError::AlreadyThere(id.clone(), to.clone()));
        }
        Ok((p, w))
    }

    pub fn apply_move(&mut self, id: &PartitionId, to: &WorkerId) -> Result<(), LayoutError> {
        let p = self.partition(id)?;
        let w = self.healthy_worker(to)?;
        self.partitions.owner[p] = w as u32;
        self.version += 1;
        Ok(())
    }

    /// Checks a merge: `(left, right, w)`, with `w` the worker the merged partition lands on
    /// (`to`, which must be up and own one of the two; the left's owner without it).
    pub fn check_merge(
        &self,
        left: &PartitionId,
        right: &PartitionId,
        to: Option<&WorkerId>,
    ) -> Result<(usize, usize, usize), LayoutError> {
        let l = self.partition(left)?;
        let r = self.partition(right)?;
        let adjacent = self.partitions.table[l] == self.partitions.table[r]
            && self.partitions.range(l).is_left_neighbour_of(&self.partitions.range(r));
        if !adjacent {
            return Err(LayoutError::NotAdjacent { left: left.clone(), right: right.clone() });
        }
        let (lw, rw) = (self.partitions.owner[l] as usize, self.partitions.owner[r] as usize);
        let w = match to {
            None => lw,
            Some(to) => {
                let w = self.healthy_worker(to)?;
                if w != lw && w != rw {
                    return Err(LayoutError::MergeElsewhere {
                        worker: to.clone(),
                        left: left.clone(),
                        right: right.clone(),
                    });
                }
                w
            }
        };
        Ok((l, r, w))
    }

    /// The side of a checked merge that streams to where it lands (the one not there already);
    /// `None` when both are on one worker.
    pub fn merge_streamed(
        &self,
        left: &PartitionId,
        right: &PartitionId,
        to: Option<&WorkerId>,
    ) -> Result<Option<usize>, LayoutError> {
        let (l, r, w) = self.check_merge(left, right, to)?;
        let owner = &self.partitions.owner;
        Ok(if owner[l] == owner[r] {
            None
        } else if owner[l] as usize == w {
            Some(r)
        } else {
            Some(l)
        })
    }

    /// Merges `right` into `left`, which keeps its id and lands on `to` (see
    /// [`Cluster::check_merge`]).
    pub fn apply_merge(
        &mut self,
        left: &PartitionId,
        right: &PartitionId,
        to: Option<&WorkerId>,
    ) -> Result<(), LayoutError> {
        let (l, r, w) = self.check_merge(left, right, to)?;
        self.partitions.owner[l] = w as u32;
        self.partitions.end[l] = self.partitions.end[r];
        self.partitions.stored_bytes[l] += self.partitions.stored_bytes[r];
        self.load.transfer_acc(r, l, 1.0);
        self.load.acc.latency_p99_max_us[l] =
            self.load.acc.latency_p99_max_us[l].max(self.load.acc.latency_p99_max_us[r]);
        let t = self.partitions.table[l] as usize;
        self.partitions.swap_remove(r);
        self.load.swap_remove_partition(r);
        // The swap moved the last partition to index r; every table's sorted list must follow.
        for table in 0..self.tables.len() {
            self.resort(table);
        }
        debug_assert!(self.tables[t].sorted.windows(2).all(|w| w[0] != w[1]));
        self.version += 1;
        Ok(())
    }

    /// Plans a group action; pure.
    pub fn plan_group(&self, target: &GroupTarget, group: &GroupId) -> Result<GroupPlan, LayoutError> {
        self.plan_group_with(target, group, &[])
    }

    /// [`Cluster::plan_group`] knowing `incoming[w]`, the partitions already on their way to
    /// worker `w` (group operations still running). Members go to the group worker with the
    /// fewest partitions, counting those and the ones this plan sends, so that many isolations
    /// in a row spread over the group instead of all landing on its first worker.
    pub fn plan_group_with(
        &self,
        target: &GroupTarget,
        group: &GroupId,
        incoming: &[u32],
    ) -> Result<GroupPlan, LayoutError> {
        let p = &self.partitions;
        let members: Vec<usize> = match target {
            GroupTarget::Partition { partition } => vec![self.partition(partition)?],
            GroupTarget::Table { tenant, table } => {
                let t = self
                    .find_table(tenant, table)
                    .ok_or_else(|| LayoutError::UnknownTable { tenant: tenant.clone(), table: table.to_string() })?;
                self.tables[t].sorted.iter().map(|&i| i as usize).collect()
            }
            GroupTarget::Tenant { tenant } => {
                let v: Vec<usize> =
                    (0..p.len()).filter(|&i| &self.tables[p.table[i] as usize].tenant == tenant).collect();
                if v.is_empty() {
                    return Err(LayoutError::UnknownTenant(tenant.clone()));
                }
                v
            }
        };
        let in_group = |w: usize| self.workers.group[w].as_ref() == Some(group) && self.workers.is_up(w);
        let group_workers: Vec<usize> = (0..self.workers.len()).filter(|&w| in_group(w)).collect();
        if group_workers.is_empty() {
            return Err(LayoutError::EmptyGroup(group.clone()));
        }
        let others: Vec<usize> =
            (0..self.workers.len()).filter(|&w| self.workers.is_up(w) && self.workers.group[w].is_none()).collect();
        let mut is_member = vec![false; p.len()];
        for &m in &members {
            is_member[m] = true;
        }
        let mut plan =
            GroupPlan { members: members.iter().map(|&m| p.ids[m].clone()).collect(), ..GroupPlan::default() };
        let mut held: Vec<u32> = (0..self.workers.len()).map(|w| incoming.get(w).copied().unwrap_or(0)).collect();
        for &owner in &p.owner {
            held[owner as usize] += 1;
        }
        let mut rr_out = 0usize;
        for (i, &member) in is_member.iter().enumerate() {
            let owner = p.owner[i] as usize;
            let dest = if member && !in_group(owner) {
                let to = group_workers.iter().copied().min_by_key(|&w| (held[w], w));
                if let Some(to) = to {
                    held[to] += 1;
                    held[owner] = held[owner].saturating_sub(1);
                }
                to
            } else if !member && in_group(owner) && p.group[i].as_ref() != Some(group) && !others.is_empty() {
                rr_out += 1;
                Some(others[(rr_out - 1) % others.len()])
            } else {
                None
            };
            if let Some(w) = dest {
                plan.moves.push((p.ids[i].clone(), self.workers.ids[w].clone()));
                plan.moved_bytes += p.stored_bytes[i];
            }
        }
        Ok(plan)
    }

    /// Pins the plan's members to `group` and makes its moves.
    pub fn apply_group(&mut self, plan: &GroupPlan, group: &GroupId) -> Result<(), LayoutError> {
        for id in &plan.members {
            if let Some(p) = self.partitions.find(id) {
                self.partitions.group[p] = Some(group.clone());
            }
        }
        for (id, to) in &plan.moves {
            // A partition merged away or a worker lost meanwhile is skipped, not fatal.
            if let (Some(p), Ok(w)) = (self.partitions.find(id), self.healthy_worker(to)) {
                self.partitions.owner[p] = w as u32;
            }
        }
        self.version += 1;
        Ok(())
    }

    pub fn check_reshard(
        &self,
        tenant: &TenantId,
        dataset: &DatasetId,
        tenant_shards: u32,
        dataset_shards: u32,
    ) -> Result<usize, LayoutError> {
        let d = self
            .datasets
            .iter()
            .position(|d| &d.tenant == tenant && &d.dataset == dataset)
            .ok_or_else(|| LayoutError::UnknownDataset { tenant: tenant.clone(), dataset: dataset.clone() })?;
        let shards = self.nodes.shard_count();
        if dataset_shards == 0 || tenant_shards < dataset_shards || tenant_shards > shards {
            return Err(LayoutError::BadShards(format!(
                "need 1 <= dataset_shards ({dataset_shards}) <= tenant_shards ({tenant_shards}) <= ring shards ({shards})"
            )));
        }
        Ok(d)
    }

    pub fn apply_reshard(
        &mut self,
        tenant: &TenantId,
        dataset: &DatasetId,
        tenant_shards: u32,
        dataset_shards: u32,
        load_balancing: LoadBalancing,
    ) -> Result<(), LayoutError> {
        let d = self.check_reshard(tenant, dataset, tenant_shards, dataset_shards)?;
        let ds = &mut self.datasets[d];
        ds.tenant_shards = tenant_shards;
        ds.dataset_shards = dataset_shards;
        ds.load_balancing = load_balancing;
        self.place_datasets();
        self.version += 1;
        Ok(())
    }

    /// A worker goes down: each of its partitions fails over to the next healthy worker (by
    /// index, wrapping) of its own zone, as a replica there would take over, or of any zone when
    /// its zone has none left; its shards leave the node table.
    pub fn worker_lost(&mut self, id: &WorkerId) -> Result<(), LayoutError> {
        let w = self.healthy_worker(id)?;
        self.workers.health[w] = Health::Down;
        let n = self.workers.len();
        let next_up = || (1..n).map(|k| (w + k) % n).filter(|&x| self.workers.is_up(x));
        let zone = &self.workers.zone[w];
        let Some(heir) = next_up().find(|&x| &self.workers.zone[x] == zone).or_else(|| next_up().next()) else {
            return Ok(());
        };
        for owner in &mut self.partitions.owner {
            if *owner as usize == w {
                *owner = heir as u32;
            }
        }
        self.nodes.remove(id.as_str());
        self.place_datasets();
        self.version += 1;
        Ok(())
    }

    /// A new worker joins, empty, with the cluster's token count for datasets.
    pub fn worker_added(
        &mut self,
        id: &WorkerId,
        capacity: Capacity,
        group: Option<GroupId>,
        zone: Option<ZoneId>,
    ) -> Result<(), LayoutError> {
        if self.workers.find(id).is_some() {
            return Err(LayoutError::DuplicateWorker(id.clone()));
        }
        self.workers.push(id.clone(), capacity, group, zone);
        self.load.resize_workers(self.workers.len());
        self.nodes
            .set_tokens(id.as_str(), self.tokens_per_worker)
            .map_err(|e| LayoutError::BadShards(e.to_string()))?;
        self.place_datasets();
        self.version += 1;
        Ok(())
    }
}
