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

use std::collections::{BTreeMap, VecDeque};

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

enum Body {
    Dense {
        base: u64,
        slots: VecDeque<u64>,
    },
    Ordered {
        pairs: VecDeque<(u64, u64)>,
        /// Tombstones among `pairs` (never at either end).
        dead: usize,
    },
    Tree(BTreeMap<u64, u64>),
}

/// An emptied bucket's buffer, kept for the next new bucket (always empty).
#[derive(Default)]
enum Spare {
    #[default]
    None,
    Dense(VecDeque<u64>),
    Ordered(VecDeque<(u64, u64)>),
}

impl Spare {
    /// Keeps the buffer of `s`, a bucket that just emptied, if it is small enough (otherwise
    /// the one kept before stays).
    fn keep(&mut self, s: Segment) {
        let kept = s.into_spare();
        if !matches!(kept, Spare::None) {
            *self = kept;
        }
    }

    fn heap_bytes(&self) -> usize {
        match self {
            Spare::None => 0,
            Spare::Dense(b) => b.capacity() * core::mem::size_of::<u64>(),
            Spare::Ordered(b) => b.capacity() * core::mem::size_of::<(u64, u64)>(),
        }
    }
}

struct Segment {
    id: u64,
    /// Entries present in this bucket.
    live: usize,
    /// Operations while ordered or tree since the last representation check (amortises the way
    /// back to dense and the tree check); reset on each conversion, dense operations skip it.
    churn: usize,
    body: Body,
}

/// Index of `off` among ascending `pairs` (the front checked first: acks mostly come in order).
#[inline]
fn find_pair(pairs: &VecDeque<(u64, u64)>, off: u64) -> Result<usize, usize> {
    match pairs.front() {
        Some(&(f, _)) if f == off => Ok(0),
        Some(&(f, _)) if f > off => Err(0),
        None => Err(0),
        _ => pairs.binary_search_by_key(&off, |p| p.0),
    }
}

#[inline]
fn trim_pairs(pairs: &mut VecDeque<(u64, u64)>, dead: &mut usize) {
    while pairs.front().is_some_and(|p| p.1 == ABSENT) {
        pairs.pop_front();
        *dead -= 1;
    }
    while pairs.back().is_some_and(|p| p.1 == ABSENT) {
        pairs.pop_back();
        *dead -= 1;
    }
}

impl Segment {
    fn new(id: u64, off: u64, v: u64, capacity: usize, spare: Spare) -> Segment {
        let body = if v == ABSENT {
            Body::Tree(BTreeMap::from([(off, v)]))
        } else {
            match spare {
                Spare::Ordered(mut pairs) => {
                    pairs.push_back((off, v));
                    Body::Ordered { pairs, dead: 0 }
                }
                Spare::Dense(mut slots) if slots.capacity() >= capacity => {
                    slots.push_back(v);
                    Body::Dense { base: off, slots }
                }
                _ => {
                    let mut slots = VecDeque::with_capacity(capacity.max(1));
                    slots.push_back(v);
                    Body::Dense { base: off, slots }
                }
            }
        };
        Segment {
            id,
            live: 1,
            churn: 0,
            body,
        }
    }

    /// The emptied bucket's buffer, if small enough to keep.
    fn into_spare(self) -> Spare {
        match self.body {
            Body::Dense { mut slots, .. } if slots.capacity() <= SPARE_MAX => {
                slots.clear();
                Spare::Dense(slots)
            }
            Body::Ordered { mut pairs, .. } if pairs.capacity() <= SPARE_MAX => {
                pairs.clear();
                Spare::Ordered(pairs)
            }
            _ => Spare::None,
        }
    }

    #[inline]
    fn get(&self, off: u64) -> Option<u64> {
        match &self.body {
            Body::Dense { base, slots } => {
                let idx = off.checked_sub(*base)?;
                let v = *slots.get(usize::try_from(idx).ok()?)?;
                (v != ABSENT).then_some(v)
            }
            Body::Ordered { pairs, .. } => {
                let v = pairs[find_pair(pairs, off).ok()?].1;
                (v != ABSENT).then_some(v)
            }
            Body::Tree(m) => m.get(&off).copied(),
        }
    }

    #[inline]
    fn get_mut(&mut self, off: u64) -> Option<&mut u64> {
        match &mut self.body {
            Body::Dense { base, slots } => {
                let idx = off.checked_sub(*base)?;
                let v = slots.get_mut(usize::try_from(idx).ok()?)?;
                (*v != ABSENT).then_some(v)
            }
            Body::Ordered { pairs, .. } => {
                let i = find_pair(pairs, off).ok()?;
                let v = &mut pairs[i].1;
                (*v != ABSENT).then_some(v)
            }
            Body::Tree(m) => m.get_mut(&off),
        }
    }

    fn first_offset(&self) -> Option<u64> {
        match &self.body {
            Body::Dense { base, slots } => (!slots.is_empty()).then_some(*base),
            Body::Ordered { pairs, .. } => pairs.front().map(|p| p.0),
            Body::Tree(m) => m.keys().next().copied(),
        }
    }

    /// Inserts or overwrites; returns the previous value.
    #[inline]
    fn insert(&mut self, off: u64, v: u64) -> Option<u64> {
        // `churn` only matters while not dense (each conversion resets it).
        let Body::Dense { base, slots } = &mut self.body else {
            return self.insert_other(off, v);
        };
        if v == ABSENT {
            // The value collides with the hole marker: only the tree form can hold it.
            self.make_tree();
            return self.insert_other(off, v);
        }
        if slots.is_empty() {
            *base = off;
            slots.push_back(v);
            self.live += 1;
            return None;
        }
        let len = slots.len() as u64;
        let limit = max_dense_span(self.live + 1);
        if off >= *base {
            let idx = off - *base;
            if idx < len {
                // `idx < len <= usize::MAX`, so the cast is exact.
                let slot = &mut slots[idx as usize];
                let prev = *slot;
                *slot = v;
                if prev == ABSENT {
                    self.live += 1;
                    return None;
                }
                return Some(prev);
            }
            if idx < limit {
                // `idx < limit`, a span that fits in memory (it is bounded by `4 * live + SLACK`).
                slots.resize(idx as usize, ABSENT);
                slots.push_back(v);
                self.live += 1;
                return None;
            }
        } else {
            let extra = *base - off;
            if extra < limit.saturating_sub(len) {
                for _ in 1..extra {
                    slots.push_front(ABSENT);
                }
                slots.push_front(v);
                *base = off;
                self.live += 1;
                return None;
            }
        }
        // Outside the dense bound, but before or after every slot: the ordered form appends or
        // prepends it.
        self.make_ordered();
        self.insert_other(off, v)
    }

    /// The common add (positions ascend): `off` goes right after the last slot of a non-empty
    /// dense bucket and fits its density bound, so the value is appended — what
    /// [`insert`](Self::insert) would do, without its other cases. Returns false (nothing
    /// changed) otherwise.
    #[inline(always)]
    fn try_append(&mut self, off: u64, v: u64) -> bool {
        let Body::Dense { base, slots } = &mut self.body else {
            return self.try_append_ordered(off, v);
        };
        let len = slots.len() as u64;
        if v == ABSENT
            || len == 0
            || off < *base
            || off - *base != len
            || len >= max_dense_span(self.live + 1)
        {
            return false;
        }
        slots.push_back(v);
        self.live += 1;
        true
    }

    /// [`try_append`](Self::try_append) for an ordered bucket: `off` is above its last pair.
    #[inline(always)]
    fn try_append_ordered(&mut self, off: u64, v: u64) -> bool {
        let Body::Ordered { pairs, .. } = &mut self.body else {
            return false;
        };
        if v == ABSENT || pairs.back().is_none_or(|&(last, _)| last >= off) {
            return false;
        }
        pairs.push_back((off, v));
        self.live += 1;
        self.churn = self.churn.saturating_add(1);
        self.maybe_densify();
        true
    }

    /// Insert into an ordered or tree bucket (out of line, as `remove_other`).
    #[inline(never)]
    fn insert_other(&mut self, off: u64, v: u64) -> Option<u64> {
        self.churn = self.churn.saturating_add(1);
        let prev = match &mut self.body {
            Body::Dense { .. } => return self.insert(off, v),
            Body::Tree(m) => m.insert(off, v),
            Body::Ordered { pairs, dead } => {
                if v == ABSENT {
                    self.make_tree();
                    return self.insert_other(off, v);
                }
                match pairs.back() {
                    Some(&(last, _)) if last >= off => match find_pair(pairs, off) {
                        Err(0) => {
                            pairs.push_front((off, v));
                            None
                        }
                        Ok(i) => {
                            let prev = core::mem::replace(&mut pairs[i].1, v);
                            if prev != ABSENT {
                                return Some(prev);
                            }
                            *dead -= 1;
                            None
                        }
                        Err(i) if pairs.len() < ORDERED_SHIFT_MAX => {
                            pairs.insert(i, (off, v));
                            None
                        }
                        Err(_) => {
                            self.make_tree();
                            return self.insert_other(off, v);
                        }
                    },
                    _ => {
                        pairs.push_back((off, v));
                        None
                    }
                }
            }
        };
        if prev.is_none() {
            self.live += 1;
        }
        self.maybe_densify();
        prev
    }

    /// The common removal (acks in about the order sent): `off` is the first slot of a dense
    /// bucket or the first pair of an ordered one, which is popped — the case
    /// [`remove`](Self::remove) tries first. `None` (nothing changed) otherwise.
    #[inline(always)]
    fn try_pop_front(&mut self, off: u64) -> Option<u64> {
        let Body::Dense { base, slots } = &mut self.body else {
            return self.try_pop_front_ordered(off);
        };
        if off != *base {
            return None;
        }
        let v = slots.pop_front()?;
        *base = base.wrapping_add(1);
        self.live -= 1;
        trim_front(base, slots);
        self.after_dense_removal();
        Some(v)
    }

    /// [`try_pop_front`](Self::try_pop_front) for an ordered bucket: `off` is its first pair.
    #[inline(always)]
    fn try_pop_front_ordered(&mut self, off: u64) -> Option<u64> {
        let Body::Ordered { pairs, dead } = &mut self.body else {
            return None;
        };
        if pairs.front()?.0 != off {
            return None;
        }
        let (_, v) = pairs.pop_front()?;
        if *dead > 0 {
            trim_pairs(pairs, dead);
        }
        self.live -= 1;
        self.after_other_removal();
        Some(v)
    }

    /// Removes `off`; returns its value.
    #[inline]
    fn remove(&mut self, off: u64) -> Option<u64> {
        // The common case (acks arrive roughly in order): pop the front.
        if let Some(v) = self.try_pop_front(off) {
            return Some(v);
        }
        let Body::Dense { base, slots } = &mut self.body else {
            return self.remove_other(off);
        };
        let idx = usize::try_from(off.checked_sub(*base)?).ok()?;
        let slot = slots.get_mut(idx)?;
        let v = *slot;
        if v == ABSENT {
            return None;
        }
        *slot = ABSENT;
        self.live -= 1;
        // Not the first slot (`try_pop_front` took that case), so only the back can need a trim.
        if idx + 1 == slots.len() {
            trim_back(slots);
        }
        self.after_dense_removal();
        Some(v)
    }

    /// [`remove`](Self::remove) from an ordered or tree bucket (out of line, so the dense path
    /// stays small where it is inlined).
    #[inline(never)]
    fn remove_other(&mut self, off: u64) -> Option<u64> {
        match &mut self.body {
            Body::Dense { .. } => self.remove(off),
            Body::Ordered { pairs, dead } => {
                let i = find_pair(pairs, off).ok()?;
                let v = core::mem::replace(&mut pairs[i].1, ABSENT);
                if v == ABSENT {
                    return None;
                }
                self.live -= 1;
                *dead += 1;
                if i == 0 || i + 1 == pairs.len() {
                    trim_pairs(pairs, dead);
                } else if *dead as u64 > self.live as u64 + SLACK {
                    pairs.retain(|p| p.1 != ABSENT);
                    *dead = 0;
                }
                self.after_other_removal();
                Some(v)
            }
            Body::Tree(m) => {
                let v = m.remove(&off)?;
                self.live -= 1;
                self.after_other_removal();
                Some(v)
            }
        }
    }

    /// Pops the smallest entry if its offset is `<= limit` (any offset when `limit` is None).
    /// Popping from the front never lowers density; the caller checks the form once at the end.
    #[inline]
    fn pop_first_up_to(&mut self, limit: Option<u64>) -> Option<(u64, u64)> {
        match &mut self.body {
            Body::Dense { base, slots } => {
                let off = *base;
                if limit.is_some_and(|l| off > l) {
                    return None;
                }
                let v = slots.pop_front()?;
                *base = base.wrapping_add(1);
                self.live -= 1;
                trim_front(base, slots);
                Some((off, v))
            }
            Body::Ordered { pairs, dead } => {
                let &(off, _) = pairs.front()?;
                if limit.is_some_and(|l| off > l) {
                    return None;
                }
                let (off, v) = pairs.pop_front()?;
                trim_pairs(pairs, dead);
                self.live -= 1;
                Some((off, v))
            }
            Body::Tree(m) => {
                let (&off, _) = m.first_key_value()?;
                if limit.is_some_and(|l| off > l) {
                    return None;
                }
                let (off, v) = m.pop_first()?;
                self.live -= 1;
                Some((off, v))
            }
        }
    }

    /// After removals: shrinks an over-allocated buffer, changes form when density changed.
    fn after_removal(&mut self) {
        if matches!(self.body, Body::Dense { .. }) {
            self.after_dense_removal();
        } else {
            self.after_other_removal();
        }
    }

    /// Shrinks an over-allocated buffer and leaves the dense form when holes dominate.
    #[inline(always)]
    fn after_dense_removal(&mut self) {
        let Body::Dense { slots, .. } = &mut self.body else {
            return;
        };
        let len = slots.len();
        if self.live > 0 && len as u64 > max_dense_span(self.live) {
            self.make_ordered();
            return;
        }
        shrink_if_slack(slots);
    }

    /// Counts the operation, shrinks an ordered bucket's buffer, and goes dense when it can.
    #[inline]
    fn after_other_removal(&mut self) {
        self.churn = self.churn.saturating_add(1);
        if let Body::Ordered { pairs, .. } = &mut self.body {
            shrink_if_slack(pairs);
        }
        self.maybe_densify();
    }

    /// Dense → ordered (every entry kept, in order, no tombstone).
    #[cold]
    #[inline(never)]
    fn make_ordered(&mut self) {
        if let Body::Dense { base, slots } = &mut self.body {
            let mut pairs = VecDeque::with_capacity(self.live + 1);
            for (i, &v) in slots.iter().enumerate() {
                if v != ABSENT {
                    pairs.push_back((base.wrapping_add(i as u64), v));
                }
            }
            tracing::debug!(
                segment = self.id,
                live = self.live,
                span = slots.len(),
                "pending-acks bucket switched to ordered"
            );
            self.body = Body::Ordered { pairs, dead: 0 };
            self.churn = 0;
        }
    }

    /// Dense or ordered → tree.
    #[cold]
    #[inline(never)]
    fn make_tree(&mut self) {
        let mut m = BTreeMap::new();
        self.for_each(|o, v| {
            m.insert(o, v);
        });
        tracing::debug!(
            segment = self.id,
            live = self.live,
            "pending-acks bucket switched to tree"
        );
        self.body = Body::Tree(m);
        self.churn = 0;
    }

    /// Goes back to dense when the offsets are close enough, checked once per `live / 2`
    /// operations (the count test inline, the check out of line).
    #[inline(always)]
    fn maybe_densify(&mut self) {
        if self.churn.saturating_mul(2) >= self.live.max(SLACK as usize) {
            self.densify_check();
        }
    }

    #[inline(never)]
    fn densify_check(&mut self) {
        self.churn = 0;
        if self.live < DENSIFY_MIN_LIVE {
            // Small: the form it has costs little memory, and converting back and forth would
            // allocate each time (a consumer's pending set that keeps emptying and refilling).
            return;
        }
        let (first, last) = match &self.body {
            Body::Dense { .. } => return,
            Body::Ordered { pairs, .. } => match (pairs.front(), pairs.back()) {
                (Some(f), Some(l)) => (f.0, l.0),
                _ => return,
            },
            Body::Tree(m) => match (m.first_key_value(), m.last_key_value()) {
                (Some((&f, _)), Some((&l, _))) => {
                    if m.values().any(|&v| v == ABSENT) {
                        return;
                    }
                    (f, l)
                }
                _ => return,
            },
        };
        let span = last - first;
        if span >= densify_span(self.live) {
            return;
        }
        // `span < 2 * live + SLACK`, which fits in memory because `live` entries already do.
        let mut slots = VecDeque::with_capacity(span as usize + 1);
        let mut next = first;
        self.for_each(|off, v| {
            while next < off {
                slots.push_back(ABSENT);
                next += 1;
            }
            slots.push_back(v);
            next = off.wrapping_add(1);
        });
        tracing::debug!(
            segment = self.id,
            live = self.live,
            span = slots.len(),
            "pending-acks bucket switched to dense"
        );
        self.body = Body::Dense { base: first, slots };
    }

    /// Trims a buffer to its length when the slack is worth a reallocation (> 1/8).
    fn seal(&mut self) {
        fn trim<T>(buf: &mut VecDeque<T>) {
            if buf.capacity() - buf.len() > buf.len() / 8 {
                buf.shrink_to_fit();
            }
        }
        match &mut self.body {
            Body::Dense { slots, .. } => trim(slots),
            Body::Ordered { pairs, .. } => trim(pairs),
            Body::Tree(_) => {}
        }
    }

    fn for_each(&self, mut f: impl FnMut(u64, u64)) {
        match &self.body {
            Body::Dense { base, slots } => {
                let mut off = *base;
                for &v in slots {
                    if v != ABSENT {
                        f(off, v);
                    }
                    off = off.wrapping_add(1);
                }
            }
            Body::Ordered { pairs, .. } => {
                for &(off, v) in pairs {
                    if v != ABSENT {
                        f(off, v);
                    }
                }
            }
            Body::Tree(m) => {
                for (&off, &v) in m {
                    f(off, v);
                }
            }
        }
    }

    fn heap_bytes(&self) -> usize {
        match &self.body {
            Body::Dense { slots, .. } => slots.capacity() * core::mem::size_of::<u64>(),
            Body::Ordered { pairs, .. } => pairs.capacity() * core::mem::size_of::<(u64, u64)>(),
            Body::Tree(m) => m.len().div_ceil(BTREE_ENTRIES_PER_NODE) * BTREE_NODE_BYTES,
        }
    }

    /// 0 dense, 1 ordered, 2 tree.
    #[cfg(test)]
    fn form(&self) -> usize {
        match self.body {
            Body::Dense { .. } => 0,
            Body::Ordered { .. } => 1,
            Body::Tree(_) => 2,
        }
    }
}

/// The front slots of a dense bucket that [`Store::drain_up_to`] has passed to its callback:
/// dropping it removes them (also when the callback panics), with the counts.
struct FrontDrain<'a> {
    base: &'a mut u64,
    slots: &'a mut VecDeque<u64>,
    live: &'a mut usize,
    store_len: &'a mut usize,
    /// Slots read from the front (entries and holes).
    done: usize,
    /// Entries among them (unless `no_holes`).
    removed: usize,
    /// The bucket has no hole, so every slot read is an entry (`removed` is then not kept).
    no_holes: bool,
}

impl Drop for FrontDrain<'_> {
    fn drop(&mut self) {
        let removed = if self.no_holes {
            self.done
        } else {
            self.removed
        };
        self.slots.drain(..self.done);
        *self.base = self.base.wrapping_add(self.done as u64);
        *self.live -= removed;
        *self.store_len -= removed;
        trim_front(self.base, self.slots);
    }
}

/// Gives back most of a buffer whose capacity exceeds `MIN_SHRINK` and four times its length
/// (the test inline, the shrink out of line: rare).
#[inline(always)]
fn shrink_if_slack<T>(buf: &mut VecDeque<T>) {
    if buf.capacity() > MIN_SHRINK && buf.capacity() / 4 > buf.len() {
        shrink(buf);
    }
}

#[cold]
#[inline(never)]
fn shrink<T>(buf: &mut VecDeque<T>) {
    buf.shrink_to(buf.len() * 2);
}

#[inline(always)]
fn trim_front(base: &mut u64, slots: &mut VecDeque<u64>) {
    while slots.front() == Some(&ABSENT) {
        slots.pop_front();
        *base = base.wrapping_add(1);
    }
}

#[inline]
fn trim_back(slots: &mut VecDeque<u64>) {
    while slots.back() == Some(&ABSENT) {
        slots.pop_back();
    }
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

#[cfg(test)]
mod tests;
