//! Two-resolution ring buffers for many series in one arena.
//!
//! Time is cut into fine slots (`slot = ts.div_euclid(fine_step)`); `factor` fine slots make one
//! coarse slot. Each series has a `head` (its newest fine slot) and keeps:
//! - the fine ring: slots `(head - fine_len, head]`;
//! - the coarse ring: coarse slots `(kf - coarse_len, kf]` where `kf = final_through(head)` is
//!   the newest coarse slot whose first fine slot has left the fine ring.
//!
//! A coarse slot is rolled up from the fine ring exactly once, just before its first fine slot
//! is overwritten, so it always sees all of its fine slots. A sample may land in any fine slot
//! whose coarse slot is not yet rolled up (`slot >= lowest_open(head)`), which tolerates at least
//! `fine_len - factor` slots of lateness; older samples are refused (the caller counts them).
//! Readers see one seamless series: coarse points up to `kf`, fine points after it.
//!
//! Storage is one flat array per column and resolution (all series' rings of that column side by
//! side), so a query of one metric over 100k series streams through one array with a fixed
//! stride that the hardware prefetcher follows, and nothing is allocated per series. Arrays
//! grow by at most 1/8 (plus one block of series) at a time, so the slack stays under 12.5 %.

use super::codec::Codec;
use super::metric::{Agg, View};

/// Head of a series that has never received a sample.
pub(crate) const EMPTY_HEAD: i64 = i64::MIN;

/// Slot arithmetic shared by every series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub fine_step_ms: i64,
    pub fine_len: i64,
    /// Fine slots per coarse slot.
    pub factor: i64,
    pub coarse_len: i64,
}

impl Geometry {
    /// How far back the table holds data: the coarse ring's span.
    pub(crate) fn history_ms(&self) -> i64 {
        self.coarse_len.saturating_mul(self.factor).saturating_mul(self.fine_step_ms)
    }

    pub(crate) fn slot_of(&self, ts_ms: i64) -> i64 {
        ts_ms.div_euclid(self.fine_step_ms)
    }

    pub(crate) fn coarse_of(&self, slot: i64) -> i64 {
        slot.div_euclid(self.factor)
    }

    /// Newest coarse slot already rolled up when the series' head is `head`.
    pub(crate) fn final_through(&self, head: i64) -> i64 {
        (head - self.fine_len).div_euclid(self.factor)
    }

    /// Oldest fine slot a sample may still be written to.
    pub(crate) fn lowest_open(&self, head: i64) -> i64 {
        if head == EMPTY_HEAD { i64::MIN } else { (self.final_through(head) + 1) * self.factor }
    }
}

/// One value of a series over `slots` fine slots (1 for a fine point, up to `factor` for a
/// coarse point cut by the query range).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Point {
    pub slot: i64,
    pub value: f64,
    pub slots: i64,
    /// Fine slots of the span that had a sample (a coarse point's coverage, capped at the span
    /// when the query cuts it). Rates: `value * weight` is the events in the span; `value` is the mean
    /// over the covered slots.
    pub weight: f64,
}

/// What a read of fine slots `[a, b]` of one series touches ([`SeriesStore::span`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Span {
    /// Nothing: the series has no data in the span (every sum is empty).
    Empty,
    /// Only its fine ring, slots `[a, b]` with `b <= head`: [`SeriesStore::fine_sum`] reads it.
    Fine { head: i64, a: i64, b: i64 },
    /// Its coarse ring too, or an empty series: only [`SeriesStore::sum`] reads it.
    General,
}

/// Every series of one kind (partitions or workers).
#[derive(Debug, Clone)]
pub(crate) struct SeriesStore<F: Codec, K: Codec> {
    pub geo: Geometry,
    aggs: Vec<Agg>,
    fine_codecs: Vec<F>,
    coarse_codecs: Vec<K>,
    /// Per column: `fine_len` codes per series.
    fine: Vec<Vec<F::Code>>,
    /// Per column: `coarse_len` codes per series.
    coarse: Vec<Vec<K::Code>>,
    /// Per series and coarse slot: how many of its fine slots had a sample (≤ factor ≤ 255).
    cover: Vec<u8>,
    heads: Vec<i64>,
    /// Per series: first fine slot not yet rolled up (`(final_through(head) + 1) * factor`) and
    /// the ring position of the head, kept so that queries need no division per series.
    fine_from: Vec<i64>,
    head_pos: Vec<u32>,
    free: Vec<u32>,
}

/// Series added at once when an array must grow, so that growth is amortised at small scale.
const GROW_SERIES: usize = 1024;

fn grow<T: Copy>(v: &mut Vec<T>, add: usize, fill: T) {
    if v.len() + add > v.capacity() {
        v.reserve_exact((v.capacity() / 8).max(add * GROW_SERIES));
    }
    v.resize(v.len() + add, fill);
}

impl<F: Codec, K: Codec> SeriesStore<F, K> {
    pub(crate) fn new(geo: Geometry, aggs: &[Agg], fine_codecs: Vec<F>, coarse_codecs: Vec<K>) -> Self {
        let cols = aggs.len();
        Self {
            geo,
            aggs: aggs.to_vec(),
            fine_codecs,
            coarse_codecs,
            fine: vec![vec![]; cols],
            coarse: vec![vec![]; cols],
            cover: vec![],
            heads: vec![],
            fine_from: vec![],
            head_pos: vec![],
            free: vec![],
        }
    }

    fn cols(&self) -> usize {
        self.aggs.len()
    }

    fn fl(&self) -> usize {
        self.geo.fine_len as usize
    }

    fn cl(&self) -> usize {
        self.geo.coarse_len as usize
    }

    /// A new, empty series.
    pub(crate) fn alloc(&mut self) -> u32 {
        if let Some(id) = self.free.pop() {
            return id;
        }
        let id = self.heads.len() as u32;
        let (fl, cl) = (self.fl(), self.cl());
        grow(&mut self.heads, 1, EMPTY_HEAD);
        grow(&mut self.fine_from, 1, i64::MIN);
        grow(&mut self.head_pos, 1, 0);
        for col in &mut self.fine {
            grow(col, fl, F::ABSENT);
        }
        for col in &mut self.coarse {
            grow(col, cl, K::ABSENT);
        }
        grow(&mut self.cover, cl, 0);
        id
    }

    /// Empties a series and makes its storage reusable.
    pub(crate) fn release(&mut self, id: u32) {
        let (fl, cl) = (self.fl(), self.cl());
        let i = id as usize;
        for col in &mut self.fine {
            col[i * fl..(i + 1) * fl].fill(F::ABSENT);
        }
        for col in &mut self.coarse {
            col[i * cl..(i + 1) * cl].fill(K::ABSENT);
        }
        self.cover[i * cl..(i + 1) * cl].fill(0);
        self.heads[i] = EMPTY_HEAD;
        self.fine_from[i] = i64::MIN;
        self.head_pos[i] = 0;
        self.free.push(id);
    }

    pub(crate) fn head(&self, id: u32) -> i64 {
        self.heads[id as usize]
    }

    /// Bytes held by the arrays (capacity, not length: what the allocator really gave us).
    pub(crate) fn heap_bytes(&self) -> usize {
        self.fine.iter().map(|c| c.capacity() * size_of::<F::Code>()).sum::<usize>()
            + self.coarse.iter().map(|c| c.capacity() * size_of::<K::Code>()).sum::<usize>()
            + self.cover.capacity()
            + self.heads.capacity() * size_of::<i64>()
            + self.fine_from.capacity() * size_of::<i64>()
            + self.head_pos.capacity() * size_of::<u32>()
            + self.free.capacity() * size_of::<u32>()
    }

    /// Bytes of history per series (fine + coarse rings + coverage + head, its ring position
    /// and the start of its fine part).
    pub(crate) fn bytes_per_series(&self) -> usize {
        self.cols() * (self.fl() * size_of::<F::Code>() + self.cl() * size_of::<K::Code>())
            + self.cl()
            + 2 * size_of::<i64>()
            + size_of::<u32>()
    }

    fn fine_index(&self, id: u32, slot: i64) -> usize {
        id as usize * self.fl() + slot.rem_euclid(self.geo.fine_len) as usize
    }

    fn coarse_index(&self, id: u32, k: i64) -> usize {
        id as usize * self.cl() + k.rem_euclid(self.geo.coarse_len) as usize
    }

    /// Prepares the series for a sample at `slot`: moves the head forward if needed (rolling up
    /// the coarse slots that leave the fine ring) and says whether the slot is still writable.
    pub(crate) fn open(&mut self, id: u32, slot: i64) -> bool {
        let head = self.heads[id as usize];
        if head == EMPTY_HEAD {
            self.set_head(id, slot);
            return true;
        }
        if slot > head {
            self.advance(id, head, slot);
            return true;
        }
        slot >= self.geo.lowest_open(head)
    }

    fn advance(&mut self, id: u32, h0: i64, h1: i64) {
        let g = self.geo;
        let (kf0, kf1) = (g.final_through(h0), g.final_through(h1));
        let first = (kf0 + 1).max(kf1 - g.coarse_len + 1);
        for k in first..=kf1 {
            self.roll_up(id, k, h0);
        }
        let first_clear = (h0 + 1).max(h1 - g.fine_len + 1);
        for s in first_clear..=h1 {
            let i = self.fine_index(id, s);
            for col in &mut self.fine {
                col[i] = F::ABSENT;
            }
        }
        self.set_head(id, h1);
    }

    fn set_head(&mut self, id: u32, head: i64) {
        let i = id as usize;
        self.heads[i] = head;
        self.fine_from[i] = (self.geo.final_through(head) + 1) * self.geo.factor;
        self.head_pos[i] = head.rem_euclid(self.geo.fine_len) as u32;
    }

    /// Writes coarse slot `k` from the fine ring as it is at head `h0` (slots after `h0` are empty).
    /// Rates keep their mean over the covered slots (the coverage is stored beside), gauges
    /// the max or mean of their present slots.
    fn roll_up(&mut self, id: u32, k: i64, h0: i64) {
        let g = self.geo;
        let start = k * g.factor;
        let end = (start + g.factor - 1).min(h0);
        let covered = (start..=end)
            .filter(|&s| {
                let i = self.fine_index(id, s);
                self.fine.iter().any(|col| F::is_present(col[i]))
            })
            .count();
        let ci = self.coarse_index(id, k);
        self.cover[ci] = covered as u8;
        for col in 0..self.cols() {
            let codec = &self.fine_codecs[col];
            let (mut sum, mut max, mut present) = (0.0f64, 0.0f64, 0usize);
            for s in start..=end {
                let code = self.fine[col][self.fine_index(id, s)];
                if F::is_present(code) {
                    let v = codec.decode(code);
                    sum += v;
                    max = max.max(v);
                    present += 1;
                }
            }
            let code = if present == 0 {
                K::ABSENT
            } else {
                let v = match self.aggs[col] {
                    Agg::Rate => sum / covered as f64,
                    Agg::Max => max,
                    Agg::Mean => sum / present as f64,
                };
                self.coarse_codecs[col].encode(v)
            };
            self.coarse[col][ci] = code;
        }
    }

    /// Merges `value` into fine `slot` of column `col`. The slot must have been opened.
    pub(crate) fn write(&mut self, id: u32, col: usize, slot: i64, value: f64) {
        let i = self.fine_index(id, slot);
        let codec = &self.fine_codecs[col];
        let old = self.fine[col][i];
        let merged = if F::is_present(old) {
            let prev = codec.decode(old);
            match self.aggs[col] {
                Agg::Rate => prev + value,
                Agg::Max => prev.max(value),
                Agg::Mean => value,
            }
        } else {
            value
        };
        self.fine[col][i] = codec.encode(merged);
    }

    #[inline]
    fn read_fine_at(&self, view: View, i: usize) -> Option<f64> {
        let read = |col: usize| {
            let code = self.fine[col][i];
            F::is_present(code).then(|| self.fine_codecs[col].decode(code))
        };
        match view {
            View::Col(c) => read(c),
            View::Diff(a, b) => read(a).map(|x| (x - read(b).unwrap_or(0.0)).max(0.0)),
        }
    }

    #[inline]
    fn read_coarse_at(&self, view: View, i: usize) -> Option<f64> {
        let read = |col: usize| {
            let code = self.coarse[col][i];
            K::is_present(code).then(|| self.coarse_codecs[col].decode(code))
        };
        match view {
            View::Col(c) => read(c),
            View::Diff(a, b) => read(a).map(|x| (x - read(b).unwrap_or(0.0)).max(0.0)),
        }
    }

    /// Calls `f` for every present point of the series in fine slots `[a, b]`, oldest first.
    #[inline]
    pub(crate) fn fold(&self, id: u32, view: View, a: i64, b: i64, mut f: impl FnMut(Point)) {
        let head = self.heads[id as usize];
        if head == EMPTY_HEAD || b < a {
            return;
        }
        let g = self.geo;
        let kf = g.final_through(head);
        let oldest = (kf - g.coarse_len + 1) * g.factor;
        let mut s = a.max(oldest);
        let b = b.min(head);
        // Coarse part: whole or cut minutes up to `kf`.
        let fine_from = (kf + 1) * g.factor;
        while s <= b && s < fine_from {
            let k = g.coarse_of(s);
            let end = (k * g.factor + g.factor - 1).min(b);
            let ci = self.coarse_index(id, k);
            if let Some(value) = self.read_coarse_at(view, ci) {
                let slots = end - s + 1;
                // A query that cuts the minute gets at most its own length of the coverage:
                // exact when the data runs up to the cut (a series that starts, or a full
                // minute), an overestimate only for a gap inside the cut minute.
                let weight = i64::from(self.cover[ci]).min(slots) as f64;
                f(Point { slot: s, value, slots, weight });
            }
            s = end + 1;
        }
        // Fine part: walk the ring without a division per slot.
        if s > b {
            return;
        }
        let fl = self.fl();
        let base = id as usize * fl;
        let mut r = s.rem_euclid(g.fine_len) as usize;
        for slot in s..=b {
            if let Some(value) = self.read_fine_at(view, base + r) {
                f(Point { slot, value, slots: 1, weight: 1.0 });
            }
            r += 1;
            if r == fl {
                r = 0;
            }
        }
    }

    /// [`SeriesStore::sum`] of several plain columns of one series over the same slots, with
    /// the series' bounds checked once (a partition's [`PartitionRates`](super::PartitionRates)
    /// read on its own; the online pass reads a column at a time, `RateReader::loads_many`).
    pub(crate) fn sum_cols<const N: usize>(&self, id: u32, cols: [usize; N], a: i64, b: i64) -> [(f64, f64, bool); N] {
        match self.span(id, a, b) {
            // Empty, or reaching back into the coarse ring: the general path.
            Span::General => cols.map(|c| self.sum(id, View::Col(c), a, b)),
            Span::Empty => [(0.0, 0.0, false); N],
            Span::Fine { head, a, b } => cols.map(|c| {
                let (total, present) = self.fine_sum(id, c, head, a, b);
                (total, present as f64, present > 0)
            }),
        }
    }

    /// Where [`SeriesStore::sum_cols`] would read fine slots `[a, b]` of series `id` from.
    #[inline]
    pub(crate) fn span(&self, id: u32, a: i64, b: i64) -> Span {
        let head = self.heads[id as usize];
        if head == EMPTY_HEAD || b < a || a < self.fine_from[id as usize] {
            return Span::General;
        }
        let b = b.min(head);
        if a > b { Span::Empty } else { Span::Fine { head, a, b } }
    }

    /// Sum and number of present codes of column `c` over fine slots `[s, b]` of a series whose
    /// head is `head` (`fine_from <= s <= b <= head`). The span is at most one ring: two
    /// contiguous runs, summed without branches.
    #[inline]
    pub(crate) fn fine_sum(&self, id: u32, c: usize, head: i64, s: i64, b: i64) -> (f64, usize) {
        let fl = self.fl();
        let n = (b - s + 1) as usize;
        // `head - s < fine_len`, so one conditional add replaces a modulo.
        let back = self.head_pos[id as usize] as i64 - (head - s);
        let r = if back < 0 { back + fl as i64 } else { back } as usize;
        let ring = &self.fine[c][id as usize * fl..(id as usize + 1) * fl];
        let codec = &self.fine_codecs[c];
        let first = &ring[r..(r + n).min(fl)];
        let (s1, p1) = codec.sum_codes(first);
        let (s2, p2) = codec.sum_codes(&ring[..n - first.len()]);
        (s1 + s2, p1 + p2)
    }

    pub(crate) fn sum(&self, id: u32, view: View, a: i64, b: i64) -> (f64, f64, bool) {
        let c = match view {
            View::Col(c) => c,
            // Rates are linear, so the difference of the sums is the sum of the differences (up
            // to the per-point clamp at zero, which only quantisation noise can trigger).
            View::Diff(x, y) => {
                let (sx, cx, ax) = self.sum(id, View::Col(x), a, b);
                let (sy, _, _) = self.sum(id, View::Col(y), a, b);
                return ((sx - sy).max(0.0), cx, ax);
            }
        };
        let head = self.heads[id as usize];
        if head == EMPTY_HEAD || b < a {
            return (0.0, 0.0, false);
        }
        let fine_from = self.fine_from[id as usize];
        let b = b.min(head);
        let (mut sum, mut covered, mut any) = (0.0, 0.0, false);
        let mut s = a;
        if a < fine_from {
            self.fold(id, view, a, b.min(fine_from - 1), |p| {
                sum += p.value * p.weight;
                covered += p.weight;
                any = true;
            });
            s = fine_from;
        }
        if s > b {
            return (sum, covered, any);
        }
        let (fine_sum, present) = self.fine_sum(id, c, head, s, b);
        sum += fine_sum;
        covered += present as f64;
        (sum, covered, any || present > 0)
    }
}
