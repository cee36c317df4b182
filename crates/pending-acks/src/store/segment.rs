//! One segment's bucket: the dense, ordered and tree forms and the conversions between them
//! (the layout is described in the parent module).

use std::collections::{BTreeMap, VecDeque};

use super::*;

pub(super) enum Body {
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
pub(super) enum Spare {
    #[default]
    None,
    Dense(VecDeque<u64>),
    Ordered(VecDeque<(u64, u64)>),
}

impl Spare {
    /// Keeps the buffer of `s`, a bucket that just emptied, if it is small enough (otherwise
    /// the one kept before stays).
    pub(super) fn keep(&mut self, s: Segment) {
        let kept = s.into_spare();
        if !matches!(kept, Spare::None) {
            *self = kept;
        }
    }

    pub(super) fn heap_bytes(&self) -> usize {
        match self {
            Spare::None => 0,
            Spare::Dense(b) => b.capacity() * core::mem::size_of::<u64>(),
            Spare::Ordered(b) => b.capacity() * core::mem::size_of::<(u64, u64)>(),
        }
    }
}

pub(super) struct Segment {
    pub(super) id: u64,
    /// Entries present in this bucket.
    pub(super) live: usize,
    /// Operations while ordered or tree since the last representation check (amortises the way
    /// back to dense and the tree check); reset on each conversion, dense operations skip it.
    pub(super) churn: usize,
    pub(super) body: Body,
}

/// Index of `off` among ascending `pairs` (the front checked first: acks mostly come in order).
#[inline]
pub(super) fn find_pair(pairs: &VecDeque<(u64, u64)>, off: u64) -> Result<usize, usize> {
    match pairs.front() {
        Some(&(f, _)) if f == off => Ok(0),
        Some(&(f, _)) if f > off => Err(0),
        None => Err(0),
        _ => pairs.binary_search_by_key(&off, |p| p.0),
    }
}

#[inline]
pub(super) fn trim_pairs(pairs: &mut VecDeque<(u64, u64)>, dead: &mut usize) {
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
    pub(super) fn new(id: u64, off: u64, v: u64, capacity: usize, spare: Spare) -> Segment {
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
    pub(super) fn into_spare(self) -> Spare {
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
    pub(super) fn get(&self, off: u64) -> Option<u64> {
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
    pub(super) fn get_mut(&mut self, off: u64) -> Option<&mut u64> {
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

    pub(super) fn first_offset(&self) -> Option<u64> {
        match &self.body {
            Body::Dense { base, slots } => (!slots.is_empty()).then_some(*base),
            Body::Ordered { pairs, .. } => pairs.front().map(|p| p.0),
            Body::Tree(m) => m.keys().next().copied(),
        }
    }

    /// Inserts or overwrites; returns the previous value.
    #[inline]
    pub(super) fn insert(&mut self, off: u64, v: u64) -> Option<u64> {
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
    pub(super) fn try_append(&mut self, off: u64, v: u64) -> bool {
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
    pub(super) fn try_append_ordered(&mut self, off: u64, v: u64) -> bool {
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
    pub(super) fn insert_other(&mut self, off: u64, v: u64) -> Option<u64> {
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
    pub(super) fn try_pop_front(&mut self, off: u64) -> Option<u64> {
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
    pub(super) fn try_pop_front_ordered(&mut self, off: u64) -> Option<u64> {
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
    pub(super) fn remove(&mut self, off: u64) -> Option<u64> {
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
    pub(super) fn remove_other(&mut self, off: u64) -> Option<u64> {
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
    pub(super) fn pop_first_up_to(&mut self, limit: Option<u64>) -> Option<(u64, u64)> {
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
    pub(super) fn after_removal(&mut self) {
        if matches!(self.body, Body::Dense { .. }) {
            self.after_dense_removal();
        } else {
            self.after_other_removal();
        }
    }

    /// Shrinks an over-allocated buffer and leaves the dense form when holes dominate.
    #[inline(always)]
    pub(super) fn after_dense_removal(&mut self) {
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
    pub(super) fn after_other_removal(&mut self) {
        self.churn = self.churn.saturating_add(1);
        if let Body::Ordered { pairs, .. } = &mut self.body {
            shrink_if_slack(pairs);
        }
        self.maybe_densify();
    }

    /// Dense → ordered (every entry kept, in order, no tombstone).
    #[cold]
    #[inline(never)]
    pub(super) fn make_ordered(&mut self) {
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
    pub(super) fn make_tree(&mut self) {
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
    pub(super) fn maybe_densify(&mut self) {
        if self.churn.saturating_mul(2) >= self.live.max(SLACK as usize) {
            self.densify_check();
        }
    }

    #[inline(never)]
    pub(super) fn densify_check(&mut self) {
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
    pub(super) fn seal(&mut self) {
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

    pub(super) fn for_each(&self, mut f: impl FnMut(u64, u64)) {
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

    pub(super) fn heap_bytes(&self) -> usize {
        match &self.body {
            Body::Dense { slots, .. } => slots.capacity() * core::mem::size_of::<u64>(),
            Body::Ordered { pairs, .. } => pairs.capacity() * core::mem::size_of::<(u64, u64)>(),
            Body::Tree(m) => m.len().div_ceil(BTREE_ENTRIES_PER_NODE) * BTREE_NODE_BYTES,
        }
    }

    /// 0 dense, 1 ordered, 2 tree.
    #[cfg(test)]
    pub(super) fn form(&self) -> usize {
        match self.body {
            Body::Dense { .. } => 0,
            Body::Ordered { .. } => 1,
            Body::Tree(_) => 2,
        }
    }
}

/// The front slots of a dense bucket that [`Store::drain_up_to`] has passed to its callback:
/// dropping it removes them (also when the callback panics), with the counts.
pub(super) struct FrontDrain<'a> {
    pub(super) base: &'a mut u64,
    pub(super) slots: &'a mut VecDeque<u64>,
    pub(super) live: &'a mut usize,
    pub(super) store_len: &'a mut usize,
    /// Slots read from the front (entries and holes).
    pub(super) done: usize,
    /// Entries among them (unless `no_holes`).
    pub(super) removed: usize,
    /// The bucket has no hole, so every slot read is an entry (`removed` is then not kept).
    pub(super) no_holes: bool,
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
pub(super) fn shrink_if_slack<T>(buf: &mut VecDeque<T>) {
    if buf.capacity() > MIN_SHRINK && buf.capacity() / 4 > buf.len() {
        shrink(buf);
    }
}

#[cold]
#[inline(never)]
pub(super) fn shrink<T>(buf: &mut VecDeque<T>) {
    buf.shrink_to(buf.len() * 2);
}

#[inline(always)]
pub(super) fn trim_front(base: &mut u64, slots: &mut VecDeque<u64>) {
    while slots.front() == Some(&ABSENT) {
        slots.pop_front();
        *base = base.wrapping_add(1);
    }
}

#[inline]
pub(super) fn trim_back(slots: &mut VecDeque<u64>) {
    while slots.back() == Some(&ABSENT) {
        slots.pop_back();
    }
}
