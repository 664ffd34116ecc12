//! Which slots a group action sends where: pure, so it is tested without a cluster.
//!
//! Group gives a hot slot its node alone: every other slot of that node moves away. "Coolest"
//! is by slot count: the receivers are filled lowest first until their counts are as even as
//! the moved slots allow (water filling). Slot count is what the cluster itself reports
//! consistently on every node; load per node is the master's business, and a group is the
//! master's answer to one slot too hot to share a node, so evening out the rest by count keeps
//! the other nodes' share of ordinary slots fair. Each receiver gets one contiguous run of the
//! moved slots (in slot order), so every migration is a few ranges, not thousands.

use lb_valkey::{Slot, SlotRange};

/// One receiver's share: its index in the caller's list and the ranges it receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Share {
    pub receiver: usize,
    pub ranges: Vec<SlotRange>,
}

/// Splits `moved` (slots in ascending order) over receivers holding `counts` slots each.
/// Receivers that get nothing are left out.
pub fn spread(moved: &[Slot], counts: &[u32]) -> Vec<Share> {
    if counts.is_empty() || moved.is_empty() {
        return Vec::new();
    }
    let mut levels: Vec<u64> = counts.iter().map(|&c| u64::from(c)).collect();
    let mut take = vec![0usize; counts.len()];
    for _ in moved {
        // Lowest level first; ties go to the earlier receiver, so the plan is deterministic.
        let (i, _) = levels.iter().enumerate().min_by_key(|&(i, l)| (*l, i)).expect("counts is not empty");
        levels[i] += 1;
        take[i] += 1;
    }
    let mut out = Vec::new();
    let mut next = 0;
    for (receiver, n) in take.into_iter().enumerate() {
        if n == 0 {
            continue;
        }
        out.push(Share { receiver, ranges: runs(&moved[next..next + n]) });
        next += n;
    }
    out
}

/// Contiguous runs of ascending slots.
pub fn runs(slots: &[Slot]) -> Vec<SlotRange> {
    let mut out: Vec<SlotRange> = Vec::new();
    for &slot in slots {
        match out.last_mut() {
            Some(last) if last.end().get().checked_add(1) == Some(slot.get()) => {
                *last = SlotRange::new(last.start(), slot).expect("start <= slot");
            }
            _ => out.push(SlotRange::single(slot)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots(range: std::ops::RangeInclusive<u16>) -> Vec<Slot> {
        range.map(|n| Slot::new(n).expect("slot")).collect()
    }

    #[test]
    fn the_moved_slots_even_out_the_receivers_in_contiguous_runs() {
        // The hot node owned 0..=5460 and keeps 100: 5,460 others go to two nodes of 5,461
        // and 5,462 slots.
        let mut moved = slots(0..=99);
        moved.extend(slots(101..=5460));
        let shares = spread(&moved, &[5_462, 5_461]);
        let sizes: Vec<u32> = shares.iter().map(|s| s.ranges.iter().map(|r| u32::from(r.len())).sum()).collect();
        assert_eq!(sizes.iter().sum::<u32>(), 5_460);
        assert_eq!([5_462 + sizes[0], 5_461 + sizes[1]], [8_192, 8_191], "counts end within one slot: {sizes:?}");
        assert_eq!(shares[0].ranges.len(), 2, "the first share spans the kept slot: {:?}", shares[0].ranges);
        assert_eq!(shares[1].ranges.len(), 1);
        assert_eq!(shares[1].ranges[0].end().get(), 5460);
    }

    #[test]
    fn a_much_fuller_receiver_gets_nothing() {
        let shares = spread(&slots(10..=19), &[1_000, 0]);
        assert_eq!(shares, vec![Share { receiver: 1, ranges: runs(&slots(10..=19)) }]);
        assert!(spread(&[], &[1, 2]).is_empty());
        assert!(spread(&slots(1..=2), &[]).is_empty());
    }
}
