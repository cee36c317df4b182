//! One ledger read by many cursors: an [`InMemoryLedger`] behind a read-write lock.

use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::{InMemoryLedger, Ledger};
use crate::entry::{Backlog, Entry, EntryMeta, Position};

/// A handle to one [`InMemoryLedger`] shared by every holder: a clone is the same ledger, not a
/// copy. A topic with several subscriptions keeps its entries once and gives each
/// subscription's cursor (or dispatcher) a clone of the handle; the topic appends and trims
/// through [`write`](Self::write), and the readers see each append at once.
///
/// Every [`Ledger`] method takes the lock for that one call (a read lock for reads, the write
/// lock for [`append`](Ledger::append) and [`trim_below`](Ledger::trim_below)). A caller that
/// makes many calls in a row can hold [`read`](Self::read) and call the [`InMemoryLedger`]
/// behind it directly, but must not call back into a handle meanwhile (std's lock is not
/// reentrant: a second read waits behind a waiting writer).
///
/// Appends can land between two of a cursor's look-ups. Appends only add entries at the end,
/// and the cursor's read, replay, rewind and ack paths are written for that (an entry appended
/// while a read works out its next read position is read next). Trimming removes entries for
/// every holder: trim below the slowest reader's mark-delete position only, and not while a
/// cursor is reset or recovered. The broker does both, and every cursor move that walks the
/// ledger (skip, clear-backlog, expiry, eviction, reset), under the one lock that orders its
/// appends. A poisoned lock is taken over (the ledger's own methods do not panic halfway
/// through a change).
///
/// ```
/// use cursor::{EntryMeta, InMemoryLedger, Ledger, ManagedCursor, MemoryStore, SharedLedger};
///
/// let topic = SharedLedger::new(InMemoryLedger::new(1000));
/// let (a, b) = (topic.clone(), topic.clone());
/// let mut sub_a = ManagedCursor::new("a", &a, MemoryStore::new());
/// let mut sub_b = ManagedCursor::new("b", &b, MemoryStore::new());
/// let p = topic.write().append(EntryMeta::simple(0, 10));
/// assert_eq!(sub_a.read(&a, 10)[0].position, p);
/// assert_eq!(sub_b.read(&b, 10)[0].position, p);
/// sub_a.ack(&a, p).unwrap();
/// assert_eq!((sub_a.backlog(&a).entries, sub_b.backlog(&b).entries), (0, 1));
/// ```
#[derive(Clone, Debug)]
pub struct SharedLedger(Arc<RwLock<InMemoryLedger>>);

impl SharedLedger {
    /// Shares `ledger`.
    pub fn new(ledger: InMemoryLedger) -> Self {
        SharedLedger(Arc::new(RwLock::new(ledger)))
    }

    /// Reads the ledger; appends and trims wait until the guard is dropped.
    pub fn read(&self) -> RwLockReadGuard<'_, InMemoryLedger> {
        self.0.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Changes the ledger (append, roll over, trim); every reader waits until the guard is
    /// dropped.
    pub fn write(&self) -> RwLockWriteGuard<'_, InMemoryLedger> {
        self.0.write().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Ledger for SharedLedger {
    fn append(&mut self, meta: EntryMeta) -> Position {
        self.write().append(meta)
    }
    fn append_shared(&mut self, meta: Arc<EntryMeta>) -> Position {
        self.write().append_shared(meta)
    }
    fn first_position(&self) -> Option<Position> {
        self.read().first_position()
    }
    fn last_position(&self) -> Option<Position> {
        self.read().last_position()
    }
    fn before_first(&self) -> Position {
        self.read().before_first()
    }
    fn next_position(&self, p: Position) -> Option<Position> {
        self.read().next_position(p)
    }
    fn get(&self, p: Position) -> Option<Entry> {
        self.read().get(p)
    }
    fn exists(&self, p: Position) -> bool {
        self.read().exists(p)
    }
    fn publish_time(&self, p: Position) -> Option<u64> {
        self.read().publish_time(p)
    }
    fn follows(&self, after: Position, p: Position) -> Option<bool> {
        self.read().follows(after, p)
    }
    fn stats(&self, p: Position) -> Option<Backlog> {
        self.read().stats(p)
    }
    fn entry_count(&self, ledger_id: u64) -> Option<u64> {
        self.read().entry_count(ledger_id)
    }
    fn read_range(&self, from: Position, max: usize) -> Vec<Entry> {
        self.read().read_range(from, max)
    }
    fn read_positions(&self, positions: &[Position]) -> Vec<Entry> {
        self.read().read_positions(positions)
    }
    fn totals_in(&self, after: Position, through: Position) -> Backlog {
        self.read().totals_in(after, through)
    }
    fn find_by_publish_time(&self, t: u64) -> Option<Position> {
        self.read().find_by_publish_time(t)
    }
    fn trim_below(&mut self, p: Position) {
        // Taken out under the lock, freed after it.
        let old = self.write().split_off_below(p);
        drop(old);
    }
}
