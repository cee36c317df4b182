//! The replay set: positions waiting to be re-sent, ordered by position, with hash refcounts.
//!
//! Every position carries the sticky-key hash it was dispatched with (0 on Shared, or when the
//! hash is unknown) and, for a continuation chunk that must follow its message's first chunk on
//! Key_Shared, the consumer it is pinned to. When ordering is enforced (Key_Shared, not
//! out-of-order) the set also counts positions per hash, so the dispatcher can answer "is an
//! earlier entry of this hash waiting?" in O(1): a normal read never sends such a hash.
//!
//! Ordered nack: an entry may carry a not-before time (a nack delay; `u64::MAX` = parked by the
//! dead-letter policy) and a `nacked` flag. With ordering enforced, the nacked positions are also
//! indexed per hash: the hash is *held* — no later entry of it may be sent — until the nacked
//! entry leaves the set (re-sent, acked, or dropped by a mark-delete move).
//!
//! Entries added while an earlier nacked entry of their hash waits are kept *behind* it, in a
//! side map the replay pick does not scan (a hot held key would otherwise make every pick walk
//! its whole backlog); they return to the scanned map when the hold ends. Everything else
//! (membership, counts, pins, mark-delete drops, `iter_all`) covers both maps.

use std::collections::btree_map::Entry as MapEntry;
use std::collections::{BTreeMap, BTreeSet};

use ahash::AHashMap;

/// One replay entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ReplayEntry<C> {
    /// Sticky-key hash, 0 when none.
    pub hash: u32,
    /// Consumer a Key_Shared continuation chunk is pinned to.
    pub pinned: Option<C>,
    /// Not to be re-sent before this time (0 = at once; `u64::MAX` = parked).
    pub not_before: u64,
    /// Entered through a nack (holds its hash until re-sent, when ordering is enforced).
    pub nacked: bool,
}

/// The not-before time of a parked entry.
pub(crate) const PARKED: u64 = u64::MAX;

/// Ordered replay set with hash refcounts.
#[derive(Debug)]
pub(crate) struct ReplaySet<P, C> {
    entries: BTreeMap<P, ReplayEntry<C>>,
    hash_counts: AHashMap<u32, u32>,
    /// Pinned entries per (consumer, hash): a pinned continuation chunk must not overtake an
    /// earlier pinned chunk of its key on the same consumer.
    pinned_counts: AHashMap<(C, u32), u32>,
    /// Ordered mode: nacked positions per hash (the hash is held while any is here).
    held: AHashMap<u32, BTreeSet<P>>,
    /// Entries with a not-before time (`(time, position)`); entries whose time passed are
    /// pruned by [`next_due`](Self::next_due).
    delays: BTreeSet<(u64, P)>,
    /// Non-nacked entries behind an earlier nacked entry of their hash (not scanned).
    behind: BTreeMap<P, ReplayEntry<C>>,
    /// `behind`'s positions per hash.
    behind_by_hash: AHashMap<u32, BTreeSet<P>>,
    count_hashes: bool,
    /// Calls to [`add`](Self::add) so far, never reset: a replay read compares it with its
    /// value when the read was issued to learn whether anything entered replay meanwhile.
    adds: u64,
}

impl<P: Ord + Copy, C: Copy + Eq + std::hash::Hash> ReplaySet<P, C> {
    /// A set that ref-counts hashes iff `count_hashes` (ordering enforced).
    pub fn new(count_hashes: bool) -> Self {
        ReplaySet {
            entries: BTreeMap::new(),
            hash_counts: AHashMap::new(),
            pinned_counts: AHashMap::new(),
            held: AHashMap::new(),
            delays: BTreeSet::new(),
            behind: BTreeMap::new(),
            behind_by_hash: AHashMap::new(),
            count_hashes,
            adds: 0,
        }
    }

    fn inc(&mut self, hash: u32) {
        if self.count_hashes && hash != 0 {
            *self.hash_counts.entry(hash).or_insert(0) += 1;
        }
    }

    fn pin_inc(&mut self, e: ReplayEntry<C>) {
        if let Some(c) = e.pinned {
            *self.pinned_counts.entry((c, e.hash)).or_insert(0) += 1;
        }
    }

    fn pin_dec(&mut self, e: ReplayEntry<C>) {
        if let Some(c) = e.pinned {
            if let Some(n) = self.pinned_counts.get_mut(&(c, e.hash)) {
                *n -= 1;
                if *n == 0 {
                    self.pinned_counts.remove(&(c, e.hash));
                }
            }
        }
    }

    fn dec(&mut self, hash: u32) {
        if self.count_hashes && hash != 0 {
            if let Some(n) = self.hash_counts.get_mut(&hash) {
                *n -= 1;
                if *n == 0 {
                    self.hash_counts.remove(&hash);
                }
            }
        }
    }

    /// Adds `pos`; returns true if it was new. Re-adding updates the hash (a known hash wins
    /// over 0) and the pin.
    pub fn add(&mut self, pos: P, hash: u32, pinned: Option<C>) -> bool {
        self.adds = self.adds.wrapping_add(1);
        if let Some(old) = self.behind.get(&pos).copied() {
            // Behind a hold: merge like below, re-placing it if the hash changed.
            let new = ReplayEntry {
                hash: if hash != 0 { hash } else { old.hash },
                pinned: pinned.or(old.pinned),
                ..old
            };
            if new != old {
                self.remove(pos);
                self.add(pos, new.hash, new.pinned);
            }
            return false;
        }
        let behind_hold = self.count_hashes
            && hash != 0
            && !self.held.is_empty()
            && self
                .held
                .get(&hash)
                .and_then(|s| s.iter().next())
                .is_some_and(|first| *first < pos);
        if behind_hold && !self.entries.contains_key(&pos) {
            let e = ReplayEntry {
                hash,
                pinned,
                not_before: 0,
                nacked: false,
            };
            self.behind.insert(pos, e);
            self.behind_by_hash.entry(hash).or_default().insert(pos);
            self.inc(hash);
            self.pin_inc(e);
            return true;
        }
        match self.entries.entry(pos) {
            MapEntry::Vacant(v) => {
                let e = ReplayEntry {
                    hash,
                    pinned,
                    not_before: 0,
                    nacked: false,
                };
                v.insert(e);
                self.inc(hash);
                self.pin_inc(e);
                true
            }
            MapEntry::Occupied(mut o) => {
                let old = *o.get();
                let new = ReplayEntry {
                    hash: if hash != 0 { hash } else { old.hash },
                    pinned: pinned.or(old.pinned),
                    not_before: old.not_before,
                    nacked: old.nacked,
                };
                o.insert(new);
                if new.hash != old.hash {
                    self.dec(old.hash);
                    self.inc(new.hash);
                    if old.nacked {
                        self.unhold(pos, old);
                        self.hold(pos, new);
                        self.release_behind(old.hash);
                    }
                }
                if new != old {
                    self.pin_dec(old);
                    self.pin_inc(new);
                }
                false
            }
        }
    }

    fn hold(&mut self, pos: P, e: ReplayEntry<C>) {
        if e.nacked && self.count_hashes && e.hash != 0 {
            self.held.entry(e.hash).or_default().insert(pos);
        }
    }

    fn unhold(&mut self, pos: P, e: ReplayEntry<C>) {
        if e.nacked {
            if let Some(s) = self.held.get_mut(&e.hash) {
                s.remove(&pos);
                if s.is_empty() {
                    self.held.remove(&e.hash);
                }
            }
        }
        if e.not_before != 0 {
            self.delays.remove(&(e.not_before, pos));
        }
    }

    /// Adds (or updates) a nacked `pos`: not to be re-sent before `not_before` (`PARKED` =
    /// until [`set_not_before`](Self::set_not_before)); in ordered mode its hash is held until
    /// it leaves the set. Returns true if it was new.
    pub fn add_nacked(&mut self, pos: P, hash: u32, not_before: u64) -> bool {
        let new = self.add(pos, hash, None);
        // Nacked entries are always scanned: out of the side map.
        if let Some(e) = self.behind.remove(&pos) {
            self.unbehind_index(pos, e.hash);
            self.entries.insert(pos, e);
        }
        if let Some(old) = self.entries.get(&pos).copied() {
            self.unhold(pos, old);
            let e = ReplayEntry {
                not_before,
                nacked: true,
                ..old
            };
            self.entries.insert(pos, e);
            self.hold(pos, e);
            if not_before != 0 {
                self.delays.insert((not_before, pos));
            }
        }
        new
    }

    /// Changes the not-before time of `pos` (e.g. releasing a parked entry with 0). Returns
    /// false if `pos` is not in the set.
    pub fn set_not_before(&mut self, pos: P, not_before: u64) -> bool {
        let Some(old) = self.entries.get(&pos).copied() else {
            return false;
        };
        if old.not_before != 0 {
            self.delays.remove(&(old.not_before, pos));
        }
        if not_before != 0 {
            self.delays.insert((not_before, pos));
        }
        self.entries.insert(pos, ReplayEntry { not_before, ..old });
        true
    }

    fn unbehind_index(&mut self, pos: P, hash: u32) {
        if let Some(s) = self.behind_by_hash.get_mut(&hash) {
            s.remove(&pos);
            if s.is_empty() {
                self.behind_by_hash.remove(&hash);
            }
        }
    }

    /// A hold of `hash` ended or moved: entries behind it that are no longer behind a nacked
    /// entry of the hash go back to the scanned map.
    fn release_behind(&mut self, hash: u32) {
        let Some(set) = self.behind_by_hash.get_mut(&hash) else {
            return;
        };
        let first_held = self.held.get(&hash).and_then(|s| s.iter().next().copied());
        let moved: BTreeSet<P> = match first_held {
            Some(f) => {
                let keep = set.split_off(&f);
                std::mem::replace(set, keep)
            }
            None => std::mem::take(set),
        };
        if set.is_empty() {
            self.behind_by_hash.remove(&hash);
        }
        for p in moved {
            if let Some(e) = self.behind.remove(&p) {
                self.entries.insert(p, e);
            }
        }
    }

    /// Removes `pos`, returning its entry.
    pub fn remove(&mut self, pos: P) -> Option<ReplayEntry<C>> {
        if let Some(e) = self.entries.remove(&pos) {
            self.dec(e.hash);
            self.pin_dec(e);
            self.unhold(pos, e);
            if e.nacked {
                self.release_behind(e.hash);
            }
            return Some(e);
        }
        if self.behind.is_empty() {
            return None;
        }
        let e = self.behind.remove(&pos)?;
        self.unbehind_index(pos, e.hash);
        self.dec(e.hash);
        self.pin_dec(e);
        Some(e)
    }

    /// Whether any hash is held by a nacked entry (fast path for the dispatch loops).
    pub fn has_holds(&self) -> bool {
        !self.held.is_empty() || !self.behind.is_empty()
    }

    /// Whether a nacked entry of `hash` earlier than `pos` waits, ignoring the positions in
    /// `resent_nacked` (nacked entries being re-sent in the same pass, ahead of `pos`).
    ///
    /// Also true when an entry of `hash` earlier than `pos` is kept behind a hold (it is not
    /// scanned this pass, so nothing later of its hash may overtake it).
    pub fn held_before(&self, hash: u32, pos: P, resent_nacked: &[P]) -> bool {
        let held = match self.held.get(&hash) {
            Some(s) => s.range(..pos).any(|p| !resent_nacked.contains(p)),
            None => false,
        };
        held || self
            .behind_by_hash
            .get(&hash)
            .and_then(|s| s.iter().next())
            .is_some_and(|first| *first < pos)
    }

    /// The first nacked position of `hash` and its not-before time (explain).
    pub fn first_held(&self, hash: u32) -> Option<(P, u64)> {
        let p = *self.held.get(&hash)?.iter().next()?;
        self.entries.get(&p).map(|e| (p, e.not_before))
    }

    /// Hashes held by a nacked entry now.
    pub fn held_hashes(&self) -> usize {
        self.held.len()
    }

    /// Parked positions (not-before `PARKED`), ascending by position, with their hash.
    pub fn parked(&self) -> Vec<(P, u32)> {
        let mut v: Vec<(P, u32)> = self
            .delays
            .iter()
            .rev()
            .take_while(|(t, _)| *t == PARKED)
            .filter_map(|(_, p)| self.entries.get(p).map(|e| (*p, e.hash)))
            .collect();
        v.sort_by_key(|a| a.0);
        v
    }

    /// The earliest not-before time after `now` (parked entries excluded); entries that are due
    /// are forgotten by the index (their time no longer matters).
    pub fn next_due(&mut self, now: u64) -> Option<u64> {
        while let Some(&(t, p)) = self.delays.iter().next() {
            if t > now {
                break;
            }
            self.delays.remove(&(t, p));
            if let Some(e) = self.entries.get_mut(&p) {
                e.not_before = 0;
            }
        }
        self.delays
            .iter()
            .next()
            .map(|(t, _)| *t)
            .filter(|t| *t != PARKED)
    }

    /// Drops every position `<= upto`; returns how many, and the nacked ones among them
    /// (position, hash) — their holds end here.
    pub fn remove_all_up_to(&mut self, upto: P) -> (usize, Vec<(P, u32)>) {
        use std::ops::Bound::{Excluded, Unbounded};
        let first_kept = self.entries.range((Excluded(upto), Unbounded)).next();
        let keep = match first_kept {
            Some((p, _)) => {
                let p = *p;
                self.entries.split_off(&p)
            }
            None => BTreeMap::new(),
        };
        let dropped = std::mem::replace(&mut self.entries, keep);
        let mut ended = Vec::new();
        for (p, e) in &dropped {
            self.dec(e.hash);
            self.pin_dec(*e);
            if e.nacked || e.not_before != 0 {
                self.unhold(*p, *e);
                if e.nacked {
                    ended.push((*p, e.hash));
                }
            }
        }
        let mut n = dropped.len();
        if !self.behind.is_empty() {
            let keep = match self.behind.range((Excluded(upto), Unbounded)).next() {
                Some((p, _)) => {
                    let p = *p;
                    self.behind.split_off(&p)
                }
                None => BTreeMap::new(),
            };
            let dropped_behind = std::mem::replace(&mut self.behind, keep);
            n += dropped_behind.len();
            for (p, e) in &dropped_behind {
                self.unbehind_index(*p, e.hash);
                self.dec(e.hash);
                self.pin_dec(*e);
            }
        }
        for (_, h) in &ended {
            self.release_behind(*h);
        }
        (n, ended)
    }

    /// Whether an entry with this hash waits (only when hashes are counted; hash 0 never).
    pub fn contains_hash(&self, hash: u32) -> bool {
        self.count_hashes
            && hash != 0
            && !self.hash_counts.is_empty()
            && self.hash_counts.contains_key(&hash)
    }

    /// The consumer the entry at `pos` is pinned to, if any.
    pub fn pinned_of(&self, pos: P) -> Option<C> {
        self.entries
            .get(&pos)
            .or_else(|| self.behind.get(&pos))
            .and_then(|e| e.pinned)
    }

    /// Whether a continuation chunk pinned to `c` with this hash waits.
    pub fn contains_pinned(&self, c: C, hash: u32) -> bool {
        !self.pinned_counts.is_empty() && self.pinned_counts.contains_key(&(c, hash))
    }

    /// First (smallest) position.
    pub fn first(&self) -> Option<P> {
        let a = self.entries.keys().next().copied();
        let b = self.behind.keys().next().copied();
        match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether `pos` is in the set.
    pub fn contains(&self, pos: P) -> bool {
        self.entries.contains_key(&pos) || self.behind.contains_key(&pos)
    }

    /// Number of positions.
    pub fn len(&self) -> usize {
        self.entries.len() + self.behind.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.behind.is_empty()
    }

    /// Ascending iteration over the entries the replay pick may consider: everything except
    /// the entries kept behind a held key (they cannot be picked while the hold lasts).
    pub fn iter(&self) -> impl Iterator<Item = (P, ReplayEntry<C>)> + '_ {
        self.entries.iter().map(|(p, e)| (*p, *e))
    }

    /// How many times [`add`](Self::add) was called (a change signal).
    pub fn adds(&self) -> u64 {
        self.adds
    }

    /// [`iter`](Self::iter) from `from` on (inclusive; `None`: from the start).
    pub fn iter_from(&self, from: Option<P>) -> impl Iterator<Item = (P, ReplayEntry<C>)> + '_ {
        use std::ops::Bound::{Included, Unbounded};
        let start = from.map_or(Unbounded, Included);
        self.entries
            .range((start, Unbounded))
            .map(|(p, e)| (*p, *e))
    }

    /// Positions whose not-before time is due at `now`, ascending.
    pub fn due(&self, now: u64) -> impl Iterator<Item = P> + '_ {
        self.iter()
            .filter(move |(_, e)| e.not_before <= now)
            .map(|(p, _)| p)
    }

    /// Every entry, ascending (explain, stats, tests).
    pub fn iter_all(&self) -> Vec<(P, ReplayEntry<C>)> {
        let mut v: Vec<(P, ReplayEntry<C>)> = self
            .entries
            .iter()
            .chain(self.behind.iter())
            .map(|(p, e)| (*p, *e))
            .collect();
        v.sort_by_key(|(p, _)| *p);
        v
    }

    /// Drops everything.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.behind.clear();
        self.behind_by_hash.clear();
        self.hash_counts.clear();
        self.pinned_counts.clear();
        self.held.clear();
        self.delays.clear();
    }

    /// Drops the pin to `c` of the entries of `hash` after `after` (continuation chunks whose
    /// message's first chunk, at `after`, did not reach `c` after all).
    pub fn unpin_after(&mut self, c: C, hash: u32, after: P) {
        let mut dropped = 0;
        for (_, e) in self
            .entries
            .range_mut((std::ops::Bound::Excluded(after), std::ops::Bound::Unbounded))
            .chain(
                self.behind
                    .range_mut((std::ops::Bound::Excluded(after), std::ops::Bound::Unbounded)),
            )
        {
            if e.pinned == Some(c) && e.hash == hash {
                e.pinned = None;
                dropped += 1;
            }
        }
        if dropped > 0 {
            if let Some(n) = self.pinned_counts.get_mut(&(c, hash)) {
                *n = n.saturating_sub(dropped);
                if *n == 0 {
                    self.pinned_counts.remove(&(c, hash));
                }
            }
        }
    }

    /// Drops the pin of every entry pinned to `c`.
    pub fn unpin(&mut self, mut is_c: impl FnMut(C) -> bool) {
        for e in self.entries.values_mut().chain(self.behind.values_mut()) {
            if e.pinned.is_some_and(&mut is_c) {
                e.pinned = None;
            }
        }
        self.pinned_counts.retain(|(c, _), _| !is_c(*c));
    }

    /// Count of positions with this hash (tests and explain).
    #[cfg(test)]
    pub fn hash_count(&self, hash: u32) -> u32 {
        self.hash_counts.get(&hash).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Set = ReplaySet<u64, u8>;

    #[test]
    fn add_remove_counts() {
        let mut s = Set::new(true);
        assert!(s.add(5, 7, None));
        assert!(s.add(3, 7, None));
        assert!(!s.add(3, 7, None));
        assert_eq!(s.hash_count(7), 2);
        assert!(s.contains_hash(7));
        assert_eq!(s.first(), Some(3));
        assert_eq!(s.remove(3).map(|e| e.hash), Some(7));
        assert_eq!(s.hash_count(7), 1);
        assert_eq!(s.remove(3), None);
        assert_eq!(s.remove(5).map(|e| e.hash), Some(7));
        assert!(!s.contains_hash(7));
        assert!(s.is_empty());
    }

    #[test]
    fn readd_with_hash_replaces_zero() {
        let mut s = Set::new(true);
        s.add(1, 0, None);
        assert!(!s.contains_hash(9));
        s.add(1, 9, Some(2));
        assert!(s.contains_hash(9));
        s.add(1, 0, None);
        assert_eq!(
            s.iter().next(),
            Some((
                1,
                ReplayEntry {
                    hash: 9,
                    pinned: Some(2),
                    not_before: 0,
                    nacked: false,
                }
            ))
        );
    }

    #[test]
    fn out_of_order_mode_does_not_count() {
        let mut s = Set::new(false);
        s.add(1, 9, None);
        assert!(!s.contains_hash(9));
        assert_eq!(s.iter().next().map(|(_, e)| e.hash), Some(9));
    }

    #[test]
    fn remove_all_up_to_is_inclusive() {
        let mut s = Set::new(true);
        for p in 1..=10 {
            s.add(p, (p % 3) as u32 + 1, None);
        }
        assert_eq!(s.remove_all_up_to(4).0, 4);
        assert_eq!(s.first(), Some(5));
        assert_eq!(s.len(), 6);
        let total: u32 = (1..=3).map(|h| s.hash_count(h)).sum();
        assert_eq!(total, 6);
        assert_eq!(s.remove_all_up_to(100).0, 6);
        assert!(s.is_empty());
        assert_eq!((1..=3).map(|h| s.hash_count(h)).sum::<u32>(), 0);
        assert_eq!(s.remove_all_up_to(100).0, 0);
    }

    #[test]
    fn unpin_and_clear() {
        let mut s = Set::new(true);
        s.add(1, 4, Some(1));
        s.add(2, 4, Some(2));
        assert!(s.contains_pinned(1, 4));
        assert!(!s.contains_pinned(1, 5));
        s.unpin(|c| c == 1);
        assert!(!s.contains_pinned(1, 4));
        assert!(s.contains_pinned(2, 4));
        let pins: Vec<_> = s.iter().map(|(_, e)| e.pinned).collect();
        assert_eq!(pins, vec![None, Some(2)]);
        s.clear();
        assert!(s.is_empty());
        assert!(!s.contains_hash(4));
        assert!(!s.contains_pinned(2, 4));
    }

    #[test]
    fn pinned_counts_follow_removals() {
        let mut s = Set::new(true);
        s.add(1, 4, Some(1));
        s.add(2, 4, Some(1));
        s.remove(1);
        assert!(s.contains_pinned(1, 4));
        s.remove_all_up_to(5);
        assert!(!s.contains_pinned(1, 4));
        // A re-add that only adds the pin counts once.
        s.add(3, 4, None);
        s.add(3, 4, Some(2));
        s.add(3, 4, Some(2));
        assert!(s.contains_pinned(2, 4));
        s.remove(3);
        assert!(!s.contains_pinned(2, 4));
    }

    /// A first chunk that did not reach its consumer drops the pins to it of its key's
    /// later entries only: earlier ones, other keys and other consumers keep theirs.
    #[test]
    fn unpin_after_drops_one_keys_later_pins_to_one_consumer() {
        let mut s = Set::new(true);
        s.add(2, 4, Some(1)); // before the first chunk: kept
        s.add(6, 4, Some(1)); // the continuation: dropped
        s.add(7, 5, Some(1)); // another key: kept
        s.add(8, 4, Some(2)); // another consumer: kept
        s.unpin_after(1, 4, 5);
        assert_eq!(s.pinned_of(6), None);
        assert_eq!(s.pinned_of(2), Some(1));
        assert_eq!(s.pinned_of(7), Some(1));
        assert_eq!(s.pinned_of(8), Some(2));
        assert!(s.contains_pinned(1, 4), "2 still pins key 4 to 1");
        s.remove(2);
        assert!(!s.contains_pinned(1, 4));
        assert!(s.contains(6), "the continuation stays in replay, unpinned");
    }

    #[test]
    fn nacked_entries_hold_their_hash_until_removed() {
        let mut s = Set::new(true);
        s.add(7, 4, None); // a later entry of the key, released
        assert!(s.add_nacked(3, 4, 100));
        assert!(s.has_holds());
        assert!(s.held_before(4, 7, &[]));
        assert!(
            !s.held_before(4, 3, &[]),
            "the nacked entry itself is not behind itself"
        );
        assert!(!s.held_before(4, 7, &[3]), "re-sent in the same pass");
        assert!(!s.held_before(5, 7, &[]));
        assert_eq!(s.first_held(4), Some((3, 100)));
        assert_eq!(s.next_due(50), Some(100));
        assert_eq!(s.next_due(100), None, "due: the index forgets it");
        assert_eq!(s.first_held(4), Some((3, 0)), "still held until re-sent");
        s.remove(3);
        assert!(!s.has_holds());
        assert_eq!(s.held_hashes(), 0);
    }

    #[test]
    fn parked_entries_and_mark_delete_end_holds() {
        let mut s = Set::new(true);
        s.add_nacked(2, 4, PARKED);
        s.add_nacked(5, 6, 30);
        assert_eq!(s.parked(), vec![(2, 4)]);
        assert_eq!(s.next_due(0), Some(30), "parked entries have no due time");
        assert!(s.set_not_before(2, 0));
        assert!(s.parked().is_empty());
        assert!(
            s.held_before(4, 9, &[]),
            "released from park, still held until re-sent"
        );
        let (n, ended) = s.remove_all_up_to(5);
        assert_eq!((n, ended), (2, vec![(2, 4), (5, 6)]));
        assert!(!s.has_holds());
        assert_eq!(s.next_due(0), None);
        assert!(!s.set_not_before(2, 0));
    }

    #[test]
    fn out_of_order_mode_delays_without_holding() {
        let mut s = Set::new(false);
        s.add_nacked(1, 4, 10);
        assert!(!s.has_holds());
        assert_eq!(s.next_due(0), Some(10));
        assert_eq!(s.iter().next().map(|(_, e)| e.not_before), Some(10));
    }

    /// Reference model: a plain BTreeMap (position → hash, nacked) recomputing the counts; also
    /// checks the side map's invariant: an entry is kept behind only if it is not nacked and an
    /// earlier nacked entry of its hash waits, and every entry is in exactly one map.
    #[test]
    fn matches_reference_model() {
        for seed in 0..80u64 {
            let mut rng = crate::rng::SplitMix64::new(seed);
            let mut next = move || rng.next();
            let mut s = Set::new(true);
            let mut m: BTreeMap<u64, (u32, bool)> = BTreeMap::new();
            for step in 0..400 {
                let p = next() % 40;
                let h = (next() % 4) as u32;
                match next() % 6 {
                    0 | 1 => {
                        s.add(p, h, None);
                        let e = m.entry(p).or_insert((h, false));
                        if h != 0 {
                            e.0 = h;
                        }
                    }
                    2 => {
                        s.add_nacked(p, h, next() % 3);
                        let e = m.entry(p).or_insert((h, true));
                        if h != 0 {
                            e.0 = h;
                        }
                        e.1 = true;
                    }
                    3 | 4 => {
                        assert_eq!(
                            s.remove(p).map(|e| (e.hash, e.nacked)),
                            m.remove(&p),
                            "seed {seed} step {step}"
                        );
                    }
                    _ => {
                        let n = m.range(..=p).count();
                        m.retain(|k, _| *k > p);
                        assert_eq!(s.remove_all_up_to(p).0, n, "seed {seed} step {step}");
                    }
                }
                for h in 1..4 {
                    let want = m.values().filter(|v| v.0 == h).count() as u32;
                    assert_eq!(s.hash_count(h), want, "seed {seed} step {step} hash {h}");
                }
                let all: Vec<(u64, u32, bool)> = s
                    .iter_all()
                    .into_iter()
                    .map(|(p, e)| (p, e.hash, e.nacked))
                    .collect();
                let want: Vec<(u64, u32, bool)> =
                    m.iter().map(|(p, (h, n))| (*p, *h, *n)).collect();
                assert_eq!(all, want, "seed {seed} step {step}");
                assert_eq!(s.len(), m.len(), "seed {seed} step {step}");
                assert_eq!(
                    s.first(),
                    m.keys().next().copied(),
                    "seed {seed} step {step}"
                );
                for (p, e) in &s.behind {
                    assert!(
                        !s.entries.contains_key(p),
                        "seed {seed} step {step}: {p} twice"
                    );
                    assert!(!e.nacked, "seed {seed} step {step}: nacked {p} kept behind");
                    assert!(
                        m.range(..*p).any(|(_, (h, n))| *n && *h == e.hash),
                        "seed {seed} step {step}: {p} kept behind without an earlier nack"
                    );
                    assert!(s.behind_by_hash[&e.hash].contains(p));
                }
                let indexed: usize = s.behind_by_hash.values().map(|v| v.len()).sum();
                assert_eq!(indexed, s.behind.len(), "seed {seed} step {step}");
                // Holds: a hash is held iff a nacked entry of it waits.
                for h in 1..4 {
                    let held = m.values().any(|v| v.1 && v.0 == h);
                    assert_eq!(
                        s.held.contains_key(&h),
                        held,
                        "seed {seed} step {step} hash {h}"
                    );
                }
            }
        }
    }
}
