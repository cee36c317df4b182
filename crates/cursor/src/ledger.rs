//! The ledger the cursor runs over: a trait and an in-memory implementation.

use std::cmp::Ordering;
use std::sync::Arc;

use crate::entry::{Backlog, Entry, EntryMeta, Position};

mod segment;
mod shared;
mod window;
use segment::Segment;
pub use shared::SharedLedger;
pub use window::MetaSource;
use window::Window;

/// An append-only log of entries, split into ledgers (segments) with growing ids.
///
/// Contract for implementations: ledger ids are at least 1 (id 0 is reserved for the position
/// before everything, see [`Position`]); inside a ledger, entry ids are dense from 0; trimming
/// only removes a prefix of the whole log. The cursor only reads through `&self`.
pub trait Ledger {
    /// Appends an entry and returns its position.
    fn append(&mut self, meta: EntryMeta) -> Position;

    /// Appends an entry whose metadata is already shared, and returns its position. A broker
    /// that keeps one copy of each entry's metadata for the topic and one ledger per
    /// subscription appends the same `Arc` to each: one allocation per entry instead of one per
    /// subscription, and a ledger dropping its last reference is the one that frees it.
    ///
    /// The default clones the metadata out (when the `Arc` is shared) and calls
    /// [`append`](Self::append); [`InMemoryLedger`] stores the `Arc` itself.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use cursor::{EntryMeta, InMemoryLedger, Ledger};
    /// let meta = Arc::new(EntryMeta::simple(0, 10));
    /// let (mut topic, mut sub) = (InMemoryLedger::new(0), InMemoryLedger::new(0));
    /// let p = topic.append_shared(meta.clone());
    /// assert_eq!(sub.append_shared(meta.clone()), p);
    /// assert_eq!(Arc::strong_count(&meta), 3);
    /// ```
    fn append_shared(&mut self, meta: Arc<EntryMeta>) -> Position {
        self.append(Arc::unwrap_or_clone(meta))
    }

    /// The first entry that still exists (not trimmed), or `None` when there is none.
    fn first_position(&self) -> Option<Position>;

    /// The last entry that still exists, or `None` when there is none.
    fn last_position(&self) -> Option<Position>;

    /// The position just before the first entry that exists or will be appended: the
    /// mark-delete position of a fresh cursor.
    fn before_first(&self) -> Position;

    /// The first existing entry strictly after `p` (crossing ledger boundaries), if any.
    fn next_position(&self, p: Position) -> Option<Position>;

    /// The entry at `p` (its position and shared metadata), if it exists. The trait hands out
    /// owned entries, never references into the ledger, so a ledger behind a lock (see
    /// [`SharedLedger`](crate::SharedLedger)) or on disk can implement it.
    fn get(&self, p: Position) -> Option<Entry>;

    /// Whether the entry at `p` exists. The cursor's ack path calls this for every ack, so
    /// implementations should answer it without touching the entry's metadata.
    fn exists(&self, p: Position) -> bool {
        self.stats(p).is_some()
    }

    /// The publish time of the entry at `p`, if it exists (expiry and resets by time read it).
    fn publish_time(&self, p: Position) -> Option<u64> {
        self.get(p).map(|e| e.meta.publish_time)
    }

    /// `None` when the entry at `p` does not exist; otherwise whether it is the first existing
    /// entry after `after` (`next_position(after) == Some(p)`). The cursor's ack path asks this
    /// once per ack, with `after` its mark-delete position; implementations can answer from the
    /// one lookup that finds `p`, instead of two.
    ///
    /// ```
    /// use cursor::{EntryMeta, InMemoryLedger, Ledger, Position};
    /// let mut l = InMemoryLedger::new(0);
    /// let a = l.append(EntryMeta::simple(0, 10));
    /// let b = l.append(EntryMeta::simple(1, 10));
    /// assert_eq!(l.follows(a, b), Some(true));
    /// assert_eq!(l.follows(a.before(), b), Some(false));
    /// assert_eq!(l.follows(a, Position::new(1, 7)), None);
    /// ```
    fn follows(&self, after: Position, p: Position) -> Option<bool> {
        if !self.exists(p) {
            return None;
        }
        Some(self.next_position(after) == Some(p))
    }

    /// `{ entries: 1, messages, bytes }` of the entry at `p`, if it exists. The cursor's ack
    /// path uses this; implementations can serve it from compact arrays without touching the
    /// full metadata.
    fn stats(&self, p: Position) -> Option<Backlog> {
        self.get(p).map(|e| Backlog::of(&e.meta))
    }

    /// How many entries were ever appended to ledger `ledger_id` (trimmed ones included), or
    /// `None` when the ledger is unknown (never created, or trimmed away entirely).
    fn entry_count(&self, ledger_id: u64) -> Option<u64>;

    /// Up to `max` existing entries at positions `>= from`, in order.
    fn read_range(&self, from: Position, max: usize) -> Vec<Entry> {
        let mut out = Vec::new();
        let mut p = self.next_position(from.before());
        while let Some(q) = p {
            if out.len() >= max {
                break;
            }
            if let Some(e) = self.get(q) {
                out.push(e);
            }
            p = self.next_position(q);
        }
        out
    }

    /// The existing entries among `positions`, sorted by position, without duplicates.
    fn read_positions(&self, positions: &[Position]) -> Vec<Entry> {
        let mut ps = positions.to_vec();
        ps.sort_unstable();
        ps.dedup();
        ps.into_iter().filter_map(|p| self.get(p)).collect()
    }

    /// Totals over the existing entries `e` with `after < e.position <= through`.
    fn totals_in(&self, after: Position, through: Position) -> Backlog {
        let mut t = Backlog::default();
        let mut p = self.next_position(after);
        while let Some(q) = p {
            if q > through {
                break;
            }
            if let Some(b) = self.stats(q) {
                t.add(b);
            }
            p = self.next_position(q);
        }
        t
    }

    /// The first existing entry, in log order, whose publish time is at or after `t` (`None`
    /// when every existing entry was published before `t`, or there is none): what a broker
    /// needs to reset a subscription by timestamp.
    ///
    /// Publish times come from producers and are assumed non-decreasing in log order (as a
    /// broker's search by time assumes); then this is exact. With out-of-order times an
    /// implementation that searches returns an entry at or after `t` whose predecessor was
    /// published before `t`, not necessarily the first such entry in log order.
    ///
    /// Cost: this default walks the entries from the first one, O(entries) `meta` look-ups;
    /// [`InMemoryLedger`] overrides it with a binary search, O(log ledgers + log entries).
    fn find_by_publish_time(&self, t: u64) -> Option<Position> {
        let mut p = self.first_position();
        while let Some(q) = p {
            if self.publish_time(q).is_some_and(|pt| pt >= t) {
                return Some(q);
            }
            p = self.next_position(q);
        }
        None
    }

    /// Drops every entry at a position `< p` (the slowest cursor's mark-delete + 1).
    fn trim_below(&mut self, p: Position);
}

/// An in-memory [`Ledger`]: ledger ids start at 1 and the log rolls over to a new ledger id every
/// `entries_per_ledger` entries (or on [`InMemoryLedger::roll_over`]). Lookups are O(1), range
/// totals O(ledgers in range) through running totals every 64 entries. Per entry it keeps 6
/// bytes (size and message count) besides the metadata, which a [`MetaSource`] lets it drop.
///
/// ```
/// use cursor::{EntryMeta, InMemoryLedger, Ledger, Position};
/// let mut l = InMemoryLedger::new(2);
/// let ps: Vec<Position> = (0..3).map(|i| l.append(EntryMeta::simple(i, 10))).collect();
/// assert_eq!(ps, vec![Position::new(1, 0), Position::new(1, 1), Position::new(2, 0)]);
/// assert_eq!(l.next_position(Position::new(1, 1)), Some(Position::new(2, 0)));
/// l.trim_below(Position::new(1, 1));
/// assert_eq!(l.first_position(), Some(Position::new(1, 1)));
/// ```
///
/// A clone shares the entries' metadata (`Arc`) and assigns the same positions to the same
/// appends. To give several cursors one ledger, share it with [`SharedLedger`].
#[derive(Clone, Debug)]
pub struct InMemoryLedger {
    entries_per_ledger: u64,
    /// Ledgers by id, oldest first; ids are contiguous. A `Vec`, not a deque: the ack path
    /// finds a segment by index on every ack, and whole ledgers are trimmed rarely.
    segs: Vec<Segment>,
    next_ledger_id: u64,
    roll_pending: bool,
    last_appended: Option<Position>,
    /// Which entries keep their metadata in memory, and where the others' is read back.
    window: Window,
}

impl InMemoryLedger {
    /// A ledger that starts a new ledger id every `entries_per_ledger` entries (0 means never).
    pub fn new(entries_per_ledger: u64) -> Self {
        InMemoryLedger {
            entries_per_ledger: if entries_per_ledger == 0 {
                u64::MAX
            } else {
                entries_per_ledger
            },
            segs: Vec::new(),
            next_ledger_id: 1,
            roll_pending: false,
            last_appended: None,
            window: Window::default(),
        }
    }

    /// Removes every entry at a position `< p`, as [`Ledger::trim_below`] does, and returns them
    /// as a ledger of their own, at the same positions (appending to it starts a new ledger
    /// id). Taking whole ledgers out costs O(ledgers): the entries are moved, not touched, so a
    /// caller under a lock can take them out there and drop them (or hand them to another
    /// thread to drop) after the lock is released.
    ///
    /// ```
    /// use cursor::{EntryMeta, InMemoryLedger, Ledger, Position};
    /// let mut l = InMemoryLedger::new(2);
    /// for i in 0..5 {
    ///     l.append(EntryMeta::simple(i, 10));
    /// }
    /// let old = l.split_off_below(Position::new(2, 1));
    /// assert_eq!((old.first_position(), old.last_position()),
    ///            (Some(Position::new(1, 0)), Some(Position::new(2, 0))));
    /// assert_eq!((old.len(), l.len()), (3, 2));
    /// assert_eq!(l.first_position(), Some(Position::new(2, 1)));
    /// ```
    pub fn split_off_below(&mut self, p: Position) -> InMemoryLedger {
        let gone = self.segs.partition_point(|s| s.id < p.ledger_id);
        let mut segs: Vec<Segment> = self.segs.drain(..gone).collect();
        if let Some(s) = self.segs.first_mut() {
            if s.id == p.ledger_id && s.base < p.entry_id && !s.is_empty() {
                segs.push(s.split_front(p.entry_id - s.base));
            }
        }
        let mut out = InMemoryLedger {
            entries_per_ledger: self.entries_per_ledger,
            segs,
            next_ledger_id: self.next_ledger_id,
            roll_pending: true,
            last_appended: None,
            window: self.window_for_split(),
        };
        out.last_appended = out.last_position();
        out.recount_kept();
        self.recount_kept();
        out
    }

    /// Makes the next append start a new ledger id (as a broker does on ledger rollover).
    pub fn roll_over(&mut self) {
        self.roll_pending = true;
    }

    /// Makes the next append start a new ledger whose id is at least `id` (and above every id
    /// used so far): a broker whose write to ledger `id - 1` failed never writes there again,
    /// as a BookKeeper client abandons a ledger after a failed add.
    ///
    /// The ids skipped get empty segments (as [`restore`](Self::restore) does for a gap
    /// between stored ledgers): ledger ids stay contiguous, which lookups by position rely on.
    pub fn roll_over_to(&mut self, id: u64) {
        while self.next_ledger_id < id {
            if let Some(s) = self.segs.last_mut() {
                s.shrink();
            }
            self.segs.push(Segment::starting_at(self.next_ledger_id, 0));
            self.next_ledger_id += 1;
        }
        self.roll_pending = true;
    }

    /// Number of entries that currently exist (not trimmed).
    pub fn len(&self) -> usize {
        self.segs
            .iter()
            .map(|s| usize::try_from(s.len()).unwrap_or(usize::MAX))
            .sum()
    }

    /// Per ledger id that still has entries: its id and the totals of its existing entries,
    /// oldest first. O(ledgers): what a broker's storage stats need without walking entries.
    ///
    /// ```
    /// use cursor::{EntryMeta, InMemoryLedger, Ledger};
    /// let mut l = InMemoryLedger::new(2);
    /// for i in 0..3 {
    ///     l.append(EntryMeta::simple(i, 10));
    /// }
    /// let t = l.ledger_totals();
    /// assert_eq!((t.len(), t[0].0, t[0].1.entries, t[0].1.bytes), (2, 1, 2, 20));
    /// ```
    pub fn ledger_totals(&self) -> Vec<(u64, Backlog)> {
        self.segs
            .iter()
            .map(|s| (s.id, s.totals(s.base, s.end().saturating_sub(1))))
            .filter(|(_, t)| t.entries > 0)
            .collect()
    }

    /// Whether no entry exists.
    pub fn is_empty(&self) -> bool {
        self.segs.iter().all(Segment::is_empty)
    }

    /// Appends `meta` at exactly `position`, for rebuilding a ledger from a durable log.
    /// Positions must ascend: either the next entry of the current ledger, or the first
    /// entry kept of a later ledger (ledger ids skipped in between stay empty, entries before
    /// it count as trimmed). After the last restored entry, call [`InMemoryLedger::roll_over`]
    /// so that new appends start a fresh ledger id and never reuse a position.
    ///
    /// ```
    /// use cursor::{EntryMeta, InMemoryLedger, Ledger, Position};
    /// let mut l = InMemoryLedger::new(100);
    /// l.restore(Position::new(3, 7), EntryMeta::simple(0, 1)).unwrap();
    /// l.restore(Position::new(3, 8), EntryMeta::simple(0, 1)).unwrap();
    /// l.roll_over();
    /// assert_eq!(l.first_position(), Some(Position::new(3, 7)));
    /// assert_eq!(l.append(EntryMeta::simple(0, 1)), Position::new(4, 0));
    /// assert!(l.restore(Position::new(3, 1), EntryMeta::simple(0, 1)).is_err());
    /// ```
    pub fn restore(&mut self, position: Position, meta: EntryMeta) -> Result<(), Position> {
        let expected_next = self.segs.last().map(|s| Position::new(s.id, s.end()));
        match self.segs.last() {
            Some(s) if s.id == position.ledger_id && s.end() == position.entry_id => {}
            Some(s) if position.ledger_id > s.id => {
                for id in s.id + 1..position.ledger_id {
                    self.segs.push(Segment::starting_at(id, 0));
                }
                self.push_restored_segment(position);
            }
            None => self.push_restored_segment(position),
            Some(_) => return Err(expected_next.unwrap_or(position)),
        }
        let seg = self.segs.last_mut().expect("a segment was just ensured");
        seg.push(Arc::new(meta));
        self.next_ledger_id = position.ledger_id + 1;
        self.last_appended = Some(position);
        self.roll_pending = false;
        self.after_push();
        Ok(())
    }

    fn push_restored_segment(&mut self, position: Position) {
        if let Some(s) = self.segs.last_mut() {
            s.shrink();
        }
        self.segs
            .push(Segment::starting_at(position.ledger_id, position.entry_id));
    }

    /// The position the next [`Ledger::append`] will assign (a durable log writes the entry
    /// there first, then appends).
    pub fn next_append_position(&self) -> Position {
        match self.segs.last() {
            Some(s) if !self.roll_pending && s.end() < self.entries_per_ledger => {
                Position::new(s.id, s.end())
            }
            _ => Position::new(self.next_ledger_id, 0),
        }
    }

    /// The position the append after one at `p` gets, when no roll-over is asked for in
    /// between: for a writer that hands out positions before it appends their entries (the
    /// first is [`next_append_position`](Self::next_append_position), each next one this).
    pub fn append_position_after(&self, p: Position) -> Position {
        if p.entry_id.saturating_add(1) < self.entries_per_ledger {
            Position::new(p.ledger_id, p.entry_id + 1)
        } else {
            Position::new(p.ledger_id + 1, 0)
        }
    }

    /// The id the next new ledger gets (after a roll-over).
    pub fn next_ledger_id(&self) -> u64 {
        self.next_ledger_id
    }

    /// The metadata of the entry at `p`, borrowed from the ledger, if it exists and keeps its
    /// metadata in memory (all do, unless a [`MetaSource`] is set: then use
    /// [`get`](Ledger::get), which reads it back). The [`Ledger`] trait only hands out owned
    /// [`Entry`]s.
    pub fn meta(&self, p: Position) -> Option<&EntryMeta> {
        self.seg(p.ledger_id)?.kept(p.entry_id).map(|m| &**m)
    }

    #[inline]
    fn seg(&self, ledger_id: u64) -> Option<&Segment> {
        let first = self.segs.first()?.id;
        let idx = ledger_id.checked_sub(first)?;
        self.segs.get(usize::try_from(idx).ok()?)
    }

    #[inline]
    fn first_from(&self, idx: usize) -> Option<Position> {
        self.segs.iter().skip(idx).find_map(Segment::first)
    }
}

impl Ledger for InMemoryLedger {
    fn append(&mut self, meta: EntryMeta) -> Position {
        self.append_shared(Arc::new(meta))
    }

    fn append_shared(&mut self, meta: Arc<EntryMeta>) -> Position {
        let need_new = match self.segs.last() {
            None => true,
            Some(s) => self.roll_pending || s.end() >= self.entries_per_ledger,
        };
        if need_new {
            if let Some(s) = self.segs.last_mut() {
                // Complete: its spare capacity goes back.
                s.shrink();
            }
            self.segs.push(Segment::starting_at(self.next_ledger_id, 0));
            self.next_ledger_id += 1;
            self.roll_pending = false;
        }
        let seg = self.segs.last_mut().expect("a segment was just ensured");
        let pos = seg.push(meta);
        self.last_appended = Some(pos);
        self.after_push();
        pos
    }

    #[inline]
    fn first_position(&self) -> Option<Position> {
        self.first_from(0)
    }

    fn last_position(&self) -> Option<Position> {
        self.segs
            .iter()
            .rev()
            .find(|s| !s.is_empty())
            .map(|s| Position::new(s.id, s.end() - 1))
    }

    fn before_first(&self) -> Position {
        match (self.first_position(), self.last_appended) {
            (Some(f), _) => f.before(),
            (None, Some(l)) => l,
            (None, None) => Position::new(self.next_ledger_id, 0).before(),
        }
    }

    #[inline]
    fn next_position(&self, p: Position) -> Option<Position> {
        let first_id = self.segs.first()?.id;
        if p.ledger_id < first_id {
            return self.first_position();
        }
        let idx = usize::try_from(p.ledger_id - first_id).ok()?;
        let seg = self.segs.get(idx)?;
        if let Some(e) = p.entry_id.checked_add(1) {
            let e = e.max(seg.base);
            if e < seg.end() {
                return Some(Position::new(seg.id, e));
            }
        }
        self.first_from(idx + 1)
    }

    fn publish_time(&self, p: Position) -> Option<u64> {
        let seg = self.seg(p.ledger_id)?;
        match seg.kept(p.entry_id) {
            Some(m) => Some(m.publish_time),
            None => self.meta_at(seg, p.entry_id).map(|m| m.publish_time),
        }
    }

    /// Copies runs of each segment's entries at once (one segment lookup per segment).
    fn read_range(&self, from: Position, max: usize) -> Vec<Entry> {
        let mut out = Vec::with_capacity(max.min(1024));
        let mut next = self.next_position(from.before());
        while let Some(q) = next {
            if out.len() >= max {
                break;
            }
            let Some(seg) = self.seg(q.ledger_id) else {
                break;
            };
            // `next_position` only returns existing positions: `base <= entry_id < end`.
            let take = ((max - out.len()) as u64).min(seg.end().saturating_sub(q.entry_id));
            if take == 0 {
                break;
            }
            for e in q.entry_id..q.entry_id + take {
                // An entry whose metadata cannot be read back ends the read before it.
                let Some(meta) = self.meta_at(seg, e) else {
                    return out;
                };
                out.push(Entry {
                    position: Position::new(seg.id, e),
                    meta,
                });
            }
            next = self.next_position(Position::new(seg.id, q.entry_id + take - 1));
        }
        out
    }

    fn get(&self, p: Position) -> Option<Entry> {
        let meta = self.meta_at(self.seg(p.ledger_id)?, p.entry_id)?;
        Some(Entry { position: p, meta })
    }

    fn entry_count(&self, ledger_id: u64) -> Option<u64> {
        self.seg(ledger_id).map(Segment::end)
    }

    #[inline]
    fn exists(&self, p: Position) -> bool {
        self.seg(p.ledger_id)
            .is_some_and(|s| s.contains(p.entry_id))
    }

    #[inline]
    fn follows(&self, after: Position, p: Position) -> Option<bool> {
        let seg = self.seg(p.ledger_id)?;
        if !seg.contains(p.entry_id) {
            return None;
        }
        // In `p`'s own ledger the entry after `after` is `max(after + 1, base)` when that is
        // below the end (and in a later ledger otherwise, so not `p`). From an earlier ledger,
        // only the ledger's first existing entry can follow.
        Some(match after.ledger_id.cmp(&p.ledger_id) {
            Ordering::Equal => {
                after.entry_id.checked_add(1).map(|e| e.max(seg.base)) == Some(p.entry_id)
            }
            Ordering::Less if p.entry_id != seg.base => false,
            Ordering::Less => self.next_position(after) == Some(p),
            Ordering::Greater => false,
        })
    }

    #[inline]
    fn stats(&self, p: Position) -> Option<Backlog> {
        self.seg(p.ledger_id)?.stats(p.entry_id)
    }

    fn totals_in(&self, after: Position, through: Position) -> Backlog {
        let mut t = Backlog::default();
        if through <= after {
            return t;
        }
        for s in &self.segs {
            if s.id < after.ledger_id || s.id > through.ledger_id {
                continue;
            }
            let lo = if s.id == after.ledger_id {
                match after.entry_id.checked_add(1) {
                    Some(e) => e,
                    None => continue,
                }
            } else {
                0
            };
            let hi = if s.id == through.ledger_id {
                through.entry_id
            } else {
                u64::MAX
            };
            t.add(s.totals(lo, hi));
        }
        t
    }

    /// Binary search: first over the ledgers (by their last entry's publish time), then inside
    /// the one found; O(log ledgers + log entries).
    fn find_by_publish_time(&self, t: u64) -> Option<Position> {
        // An entry whose metadata cannot be read back counts as published at the end of time.
        let time = |s: &Segment, e: u64| self.meta_at(s, e).map_or(u64::MAX, |m| m.publish_time);
        // Ledgers whose entries were all published before `t` (empty ones count as such).
        let i = self
            .segs
            .partition_point(|s| s.is_empty() || time(s, s.end() - 1) < t);
        let seg = self.segs.iter().skip(i).find(|s| !s.is_empty())?;
        let (mut lo, mut hi) = (seg.base, seg.end());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if time(seg, mid) < t {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Some(Position::new(seg.id, lo))
    }

    fn trim_below(&mut self, p: Position) {
        drop(self.split_off_below(p));
    }
}

#[cfg(test)]
mod tests;
