//! The storage behind the map: no locking, no handlers, positions as `(segment, offset)`.
//!
//! Layout (follows the access pattern: positions mostly ascend, removals mostly at the front):
//! * a `VecDeque` of segment buckets sorted by segment id (new segments usually go at the back,
//!   emptied ones leave from the front);
//! * a bucket has one of three forms:
//!   * **dense**: a base offset plus a `VecDeque<u64>` of packed values (`remaining << 32 |
//!     hash`), one slot per offset, [`ABSENT`] marking a hole, never a hole at either end. For
//!     runs of consecutive offsets (a consumer given most of a segment): 8 bytes per entry.
//!   * **ordered**: a `VecDeque<(offset, packed)>` in ascending offset order, a removed pair in
//!     the middle left as a tombstone (value [`ABSENT`]), never one at either end. For ascending
//!     but spread-out offsets (a Key_Shared consumer given one position in ten): adds append,
//!     acks pop the front, lookups binary-search; 16 bytes per entry.
//!   * **tree**: a `BTreeMap<offset, packed>`, for what the other two cannot hold cheaply: an
//!     insert in the middle of a large ordered bucket, or a value equal to the `ABSENT` pattern.
//! * dense → ordered when the slot span would exceed `4 * live + SLACK` (an insert far away, or
//!   many holes); ordered → tree on a middle insert into more than [`ORDERED_SHIFT_MAX`] pairs;
//!   either → tree when a value equals the `ABSENT` pattern; ordered or tree → dense when the
//!   span fits in `2 * live + SLACK` again and it holds at least [`DENSIFY_MIN_LIVE`] entries,
//!   checked only after `live / 2` operations on the bucket, so conversions (O(live)) are
//!   amortised O(1) per operation. An ordered bucket drops
//!   its tombstones once they outnumber its entries (plus `SLACK`), also amortised.
//! * when a new last segment opens, the previous last one is trimmed to its length (it is
//!   usually complete) and the new one starts with that length as capacity.
//! * the buffer of a bucket that empties (if small) is kept for the next new bucket, with its
//!   form: a consumer whose pending set keeps emptying and refilling does not allocate each time.

use std::collections::VecDeque;

use crate::types::PendingAck;

/// Bit pattern of an empty dense slot or an ordered tombstone. A real value with this pattern
/// forces the bucket into the tree form.
const ABSENT: u64 = u64::MAX;
/// Extra slots a dense bucket may hold beyond its density bound (keeps small buckets dense).
const SLACK: u64 = 32;
/// Largest capacity a new last segment inherits from the previous one (512 KiB of slots).
const MAX_HINT: usize = 1 << 16;
/// A buffer is shrunk once its capacity exceeds `4 * len` and this many slots.
const MIN_SHRINK: usize = 64;
/// Largest ordered bucket that takes an insert in its middle by shifting; beyond, it becomes a
/// tree (shifting would cost O(len) per insert).
const ORDERED_SHIFT_MAX: usize = 64;
/// Fewest entries at which an ordered or tree bucket is considered for the dense form.
const DENSIFY_MIN_LIVE: usize = 64;
/// Largest buffer capacity (in entries) kept from an emptied bucket for the next new one.
const SPARE_MAX: usize = 256;
/// Rough heap bytes of one `BTreeMap<u64, u64>` leaf (11 keys, 11 values, parent link, lengths).
const BTREE_NODE_BYTES: usize = 192;
/// Entries per `BTreeMap` node assumed by the estimate (nodes are between half and fully used).
const BTREE_ENTRIES_PER_NODE: usize = 8;

#[inline]
fn pack(a: PendingAck) -> u64 {
    (u64::from(a.remaining) << 32) | u64::from(a.hash)
}

#[inline]
fn unpack(v: u64) -> PendingAck {
    PendingAck {
        remaining: (v >> 32) as u32,
        hash: v as u32,
    }
}

/// Largest dense span allowed for `live` entries before the bucket leaves the dense form.
#[inline]
fn max_dense_span(live: usize) -> u64 {
    (live as u64).saturating_mul(4).saturating_add(SLACK)
}

/// Largest span at which an ordered or tree bucket goes back to dense.
#[inline]
fn densify_span(live: usize) -> u64 {
    (live as u64).saturating_mul(2).saturating_add(SLACK)
}

/// Sorted segment buckets plus an entry count.
#[derive(Default)]
pub(crate) struct Store {
    segs: VecDeque<Segment>,
    len: usize,
    /// Capacity for a new last segment: the length of the last one that was sealed.
    tail_hint: usize,
    /// The buffer of the last bucket that emptied, for the next new one.
    spare: Spare,
}

impl Store {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Index of segment `id`, or where it would be inserted. Checks the ends first.
    #[inline]
    fn find(&self, id: u64) -> Result<usize, usize> {
        match self.segs.back() {
            None => return Err(0),
            Some(s) if s.id == id => return Ok(self.segs.len() - 1),
            Some(s) if s.id < id => return Err(self.segs.len()),
            Some(_) => {}
        }
        if let Some(s) = self.segs.front() {
            if s.id == id {
                return Ok(0);
            }
            if s.id > id {
                return Err(0);
            }
        }
        self.segs.binary_search_by_key(&id, |s| s.id)
    }

    #[inline]
    pub(crate) fn get(&self, seg: u64, off: u64) -> Option<PendingAck> {
        let i = self.find(seg).ok()?;
        self.segs[i].get(off).map(unpack)
    }

    /// Inserts or overwrites; returns the previous value.
    #[inline]
    pub(crate) fn insert(&mut self, seg: u64, off: u64, ack: PendingAck) -> Option<PendingAck> {
        let v = pack(ack);
        // Fast path: most adds go to the last segment.
        if let Some(last) = self.segs.back_mut() {
            if last.id == seg && last.try_append(off, v) {
                self.len += 1;
                return None;
            }
        }
        match self.find(seg) {
            Ok(i) => {
                let prev = self.segs[i].insert(off, v);
                if prev.is_none() {
                    self.len += 1;
                }
                prev.map(unpack)
            }
            Err(i) => {
                let capacity = if i == self.segs.len() {
                    if let Some(last) = self.segs.back_mut() {
                        last.seal();
                        if let Body::Dense { slots, .. } = &last.body {
                            self.tail_hint = slots.len().min(MAX_HINT);
                        }
                    }
                    self.tail_hint
                } else {
                    1
                };
                let spare = core::mem::take(&mut self.spare);
                self.segs
                    .insert(i, Segment::new(seg, off, v, capacity, spare));
                self.len += 1;
                None
            }
        }
    }

    /// Lowers `remaining` by `delta` (saturating at 0); returns the new remaining count.
    #[inline]
    pub(crate) fn update_remaining(&mut self, seg: u64, off: u64, delta: u32) -> Option<u32> {
        let i = self.find(seg).ok()?;
        let slot = self.segs[i].get_mut(off)?;
        let mut ack = unpack(*slot);
        ack.remaining = ack.remaining.saturating_sub(delta);
        // Never produces `ABSENT` from a present dense value: `remaining` can only drop, and an
        // unchanged value was stored already.
        *slot = pack(ack);
        Some(ack.remaining)
    }

    /// Lowers `remaining` by `delta` only when it does not go below 0: `Some(Ok(new))`, or
    /// `Some(Err(current))` with the value left unchanged; `None` when absent.
    #[inline]
    pub(crate) fn lower_remaining_exact(
        &mut self,
        seg: u64,
        off: u64,
        delta: u32,
    ) -> Option<Result<u32, u32>> {
        let i = self.find(seg).ok()?;
        let slot = self.segs[i].get_mut(off)?;
        let mut ack = unpack(*slot);
        let Some(r) = ack.remaining.checked_sub(delta) else {
            return Some(Err(ack.remaining));
        };
        ack.remaining = r;
        // As in `update_remaining`: a lowered count never packs to `ABSENT`.
        *slot = pack(ack);
        Some(Ok(r))
    }

    #[inline]
    pub(crate) fn remove(&mut self, seg: u64, off: u64) -> Option<PendingAck> {
        // Most removals (acks in about the order sent) hit the first segment.
        let (i, s) = match self.segs.front_mut() {
            Some(s) if s.id == seg => (0, s),
            _ => {
                let i = self.find(seg).ok()?;
                (i, &mut self.segs[i])
            }
        };
        let v = s.remove(off)?;
        self.len -= 1;
        if s.live == 0 {
            if let Some(s) = self.segs.remove(i) {
                self.spare.keep(s);
            }
            self.shrink_bucket_list();
        }
        Some(unpack(v))
    }

    /// Whether some entry is at or below `(seg, off)`.
    pub(crate) fn has_any_up_to(&self, seg: u64, off: u64) -> bool {
        self.segs.iter().find(|s| s.live > 0).is_some_and(|s| {
            s.id < seg || (s.id == seg && s.first_offset().is_some_and(|o| o <= off))
        })
    }

    /// Removes every entry at or below `(seg, off)` in ascending order, calling `emit` once per
    /// removed entry, in order. `emit` cannot reach the store (it runs under the map's lock), so
    /// a dense bucket's slots are read in place and dropped in one step after the last call; if
    /// `emit` panics, the entries already passed to it (the panicking one included) are dropped
    /// during the unwind, so the store is consistent afterwards, apart from a possibly emptied
    /// first bucket, which [`Store::repair`] drops. Returns the count removed.
    pub(crate) fn drain_up_to(
        &mut self,
        seg: u64,
        off: u64,
        mut emit: impl FnMut(u64, u64, PendingAck),
    ) -> usize {
        let mut n = 0;
        let Store {
            segs, len, spare, ..
        } = self;
        while let Some(s) = segs.front_mut() {
            if s.id > seg {
                break;
            }
            let limit = (s.id == seg).then_some(off);
            let id = s.id;
            if let Body::Dense { base, slots } = &mut s.body {
                // Slots `[0, k)` hold the offsets `<= limit`.
                let k = match limit {
                    None => slots.len(),
                    Some(l) => match l.checked_sub(*base) {
                        None => 0,
                        Some(d) => usize::try_from(d)
                            .map_or(slots.len(), |d| d.saturating_add(1).min(slots.len())),
                    },
                };
                let first = *base;
                let no_holes = s.live == slots.len();
                let mut g = FrontDrain {
                    base,
                    slots,
                    live: &mut s.live,
                    store_len: &mut *len,
                    done: 0,
                    removed: 0,
                    no_holes,
                };
                let (a, b) = g.slots.as_slices();
                let (a, b) = if k <= a.len() {
                    (&a[..k], &b[..0])
                } else {
                    (a, &b[..k - a.len()])
                };
                if no_holes {
                    // Every slot holds an entry (the usual case): no hole test per slot.
                    for &v in a.iter().chain(b) {
                        let o = first.wrapping_add(g.done as u64);
                        g.done += 1;
                        emit(id, o, unpack(v));
                    }
                    n += g.done;
                } else {
                    for &v in a.iter().chain(b) {
                        let o = first.wrapping_add(g.done as u64);
                        g.done += 1;
                        if v != ABSENT {
                            g.removed += 1;
                            emit(id, o, unpack(v));
                        }
                    }
                    n += g.removed;
                }
                drop(g);
            } else {
                while let Some((o, v)) = s.pop_first_up_to(limit) {
                    *len -= 1;
                    n += 1;
                    emit(id, o, unpack(v));
                }
            }
            if s.live == 0 {
                if let Some(s) = segs.pop_front() {
                    spare.keep(s);
                }
            } else {
                s.after_removal();
                break;
            }
        }
        self.shrink_bucket_list();
        n
    }

    /// Gives back bucket-list capacity once it is mostly unused.
    fn shrink_bucket_list(&mut self) {
        if self.segs.capacity() > 8 && self.segs.capacity() / 4 > self.segs.len() {
            self.segs.shrink_to(self.segs.len() * 2);
        }
    }

    /// Removes everything in ascending order, calling `emit` after each removal.
    pub(crate) fn drain_all(&mut self, emit: impl FnMut(u64, u64, PendingAck)) -> usize {
        let n = self.drain_up_to(u64::MAX, u64::MAX, emit);
        self.segs = VecDeque::new();
        self.tail_hint = 0;
        self.spare = Spare::None;
        n
    }

    /// Visits every entry in ascending order.
    pub(crate) fn for_each(&self, mut f: impl FnMut(u64, u64, PendingAck)) {
        for s in &self.segs {
            let id = s.id;
            s.for_each(|o, v| f(id, o, unpack(v)));
        }
    }

    /// Heap bytes held: bucket list capacity plus each bucket's buffer (dense and ordered: exact capacity;
    /// tree: an estimate from the entry count, as `BTreeMap` does not expose its nodes).
    pub(crate) fn memory_bytes(&self) -> usize {
        self.segs.capacity() * core::mem::size_of::<Segment>()
            + self.segs.iter().map(Segment::heap_bytes).sum::<usize>()
            + self.spare.heap_bytes()
    }

    /// Drops buckets left empty by an operation interrupted by a panicking callback.
    pub(crate) fn repair(&mut self) {
        self.segs.retain(|s| s.live > 0);
        self.len = self.segs.iter().map(|s| s.live).sum();
    }

    /// (dense, ordered, tree) bucket counts, for tests.
    #[cfg(test)]
    pub(crate) fn shape(&self) -> (usize, usize, usize) {
        let mut n = [0; 3];
        for s in &self.segs {
            n[s.form()] += 1;
        }
        (n[0], n[1], n[2])
    }
}

mod segment;

use segment::{Body, FrontDrain, Segment, Spare};

#[cfg(test)]
mod tests;
