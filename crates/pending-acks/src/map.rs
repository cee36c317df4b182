//! The thread-safe map: one lock around the store, the closed flag and the handlers.

use tracing::{debug, trace};

use crate::position::SegmentedPosition;
use crate::store::Store;
use crate::sync::{self, Arc, RwLock};
use crate::types::{
    AddHandler, AddOutcome, AddRefused, PendingAck, RemainingError, RemovalCause, RemoveHandler,
};

/// One consumer's entries that were sent and are not yet fully acknowledged:
/// position → [`PendingAck`] (remaining unacked messages, sticky-key hash).
///
/// Thread-safe: every method takes `&self` and runs under one read-write lock. Handlers
/// ([`AddHandler`], [`RemoveHandler`]) and the callbacks passed to the iterating methods run
/// **inside** that lock, so they see the map exactly as the operation does. They must not call
/// back into the same map: the lock is not re-entrant and such a call deadlocks.
///
/// Every removal is reported to the [`RemoveHandler`] exactly once, with its [`RemovalCause`].
/// After [`for_each_and_close`](Self::for_each_and_close) the map stays empty forever.
pub struct PendingAcks<P, C> {
    consumer: C,
    state: RwLock<State<P, C>>,
}

struct State<P, C> {
    store: Store,
    closed: bool,
    add_handler: Option<Arc<dyn AddHandler<P, C>>>,
    remove_handler: Option<Arc<dyn RemoveHandler<P, C>>>,
}

impl<P, C: core::fmt::Debug> core::fmt::Debug for PendingAcks<P, C> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let st = sync::read(&self.state);
        f.debug_struct("PendingAcks")
            .field("consumer", &self.consumer)
            .field("len", &st.store.len())
            .field("closed", &st.closed)
            .field("add_handler", &st.add_handler.is_some())
            .field("remove_handler", &st.remove_handler.is_some())
            .finish()
    }
}

impl<P: SegmentedPosition, C: Copy + Send + Sync + 'static> PendingAcks<P, C> {
    /// An empty, open map for `consumer`, without handlers.
    pub fn new(consumer: C) -> Self {
        PendingAcks {
            consumer,
            state: RwLock::new(State {
                store: Store::default(),
                closed: false,
                add_handler: None,
                remove_handler: None,
            }),
        }
    }

    #[inline]
    fn write(&self) -> sync::RwLockWriteGuard<'_, State<P, C>> {
        let (mut guard, poisoned) = sync::write(&self.state);
        if poisoned {
            Self::repair(&mut guard);
        }
        guard
    }

    /// The poisoned-lock path of [`write`](Self::write), kept out of line.
    #[cold]
    #[inline(never)]
    fn repair(st: &mut State<P, C>) {
        tracing::warn!("pending-acks lock was poisoned by a panicking callback; repaired");
        st.store.repair();
    }

    /// Installs (or replaces) the handler that may veto adds. Build it with
    /// [`pending_acks::Arc`](crate::Arc)`::new(handler)`.
    pub fn set_add_handler(&self, h: Arc<dyn AddHandler<P, C>>) {
        self.write().add_handler = Some(h);
        debug!("pending-acks add handler installed");
    }

    /// Installs (or replaces) the handler told about every removal. Build it with
    /// [`pending_acks::Arc`](crate::Arc)`::new(handler)`.
    pub fn set_remove_handler(&self, h: Arc<dyn RemoveHandler<P, C>>) {
        self.write().remove_handler = Some(h);
        debug!("pending-acks remove handler installed");
    }

    /// Records `pos` as sent with `remaining` unacked messages and sticky-key `hash`, unless the
    /// map is closed ([`AddRefused::Closed`]) or the add handler vetoes it
    /// ([`AddRefused::Vetoed`]). Re-adding a present position overwrites it and returns
    /// [`AddOutcome::Replaced`] with the old value (not a removal: no handler call).
    pub fn add_if_allowed(
        &self,
        pos: P,
        remaining: u32,
        hash: u32,
    ) -> Result<AddOutcome, AddRefused> {
        self.add_batch(|b| b.add_if_allowed(pos, remaining, hash))
    }

    /// Like [`add_if_allowed`](Self::add_if_allowed), but `check(consumer, pos, hash)` decides
    /// instead of the installed add handler, for this add only. It runs inside the map's lock,
    /// so whatever it records (for example a draining reference) is atomic with the insert; it
    /// must not call back into this map.
    pub fn add_if(
        &self,
        pos: P,
        remaining: u32,
        hash: u32,
        check: impl FnOnce(C, P, u32) -> bool,
    ) -> Result<AddOutcome, AddRefused> {
        self.add_batch(|b| b.add_if(pos, remaining, hash, check))
    }

    /// Several adds under one write lock (a send of many entries to one consumer): `f` gets an
    /// [`AddBatch`] whose [`add_if`](AddBatch::add_if) and
    /// [`add_if_allowed`](AddBatch::add_if_allowed) behave exactly as this map's, one entry at
    /// a time. The lock is held until `f` returns: `f` must not call back into this map.
    ///
    /// ```
    /// let m: pending_acks::PendingAcks<(u64, u64), u32> = pending_acks::PendingAcks::new(7);
    /// let added = m.add_batch(|b| {
    ///     (0..3u64)
    ///         .filter(|e| b.add_if((1, *e), 1, 9, |_, (_, e), _| e != 1).is_ok())
    ///         .count()
    /// });
    /// assert_eq!((added, m.len()), (2, 2));
    /// ```
    #[inline]
    pub fn add_batch<R>(&self, f: impl FnOnce(&mut AddBatch<'_, P, C>) -> R) -> R {
        let mut st = self.write();
        let mut batch = AddBatch {
            consumer: self.consumer,
            st: &mut st,
        };
        f(&mut batch)
    }

    #[inline]
    fn insert_locked(
        st: &mut State<P, C>,
        pos: P,
        remaining: u32,
        hash: u32,
    ) -> Result<AddOutcome, AddRefused> {
        let ack = PendingAck { remaining, hash };
        match st.store.insert(pos.segment(), pos.offset(), ack) {
            None => {
                trace!(pos = ?pos, remaining, hash, "pending ack added");
                Ok(AddOutcome::Inserted)
            }
            Some(prev) => {
                debug!(
                    pos = ?pos,
                    remaining,
                    hash,
                    prev_remaining = prev.remaining,
                    prev_hash = prev.hash,
                    "pending ack replaced"
                );
                Ok(AddOutcome::Replaced(prev))
            }
        }
    }

    /// Lowers the remaining count of `pos` by `acked_delta` (batch-index acks), saturating at 0.
    /// Returns the new count, or `None` if `pos` is absent. Never removes the entry, even at 0:
    /// the caller removes it with [`remove`](Self::remove) when the whole entry is acked.
    ///
    /// Saturation hides an over-ack: `Some(0)` is returned both for an exact final ack and for
    /// one that acked more messages than remained. Use
    /// [`try_update_remaining`](Self::try_update_remaining) to tell them apart.
    pub fn update_remaining(&self, pos: P, acked_delta: u32) -> Option<u32> {
        let r = self
            .write()
            .store
            .update_remaining(pos.segment(), pos.offset(), acked_delta);
        trace!(pos = ?pos, acked_delta, remaining = ?r, "pending ack remaining updated");
        r
    }

    /// Lowers the remaining count of `pos` by `acked_delta`, refusing to go below zero: unlike
    /// [`update_remaining`](Self::update_remaining), an over-ack (more messages acked than
    /// remain, e.g. a batch index acked twice by a confused client) is reported, not saturated,
    /// so it can be told apart from an exact final ack.
    ///
    /// Returns the new count (`Ok(0)`: the entry is now fully acked; remove it with
    /// [`remove`](Self::remove)). Errors: [`RemainingError::Absent`] when `pos` is not in the
    /// map, [`RemainingError::Underflow`] (with the count still stored) when `acked_delta`
    /// exceeds it — the entry is then left **unchanged**, and the caller decides (typically:
    /// treat the entry as fully acked and remove it, and log the client's mistake). Never removes
    /// the entry and never calls a handler.
    ///
    /// ```
    /// use pending_acks::{PendingAcks, RemainingError};
    /// let map: PendingAcks<u64, u32> = PendingAcks::new(1);
    /// map.add_if_allowed(5, 3, 0).unwrap();
    /// assert_eq!(map.try_update_remaining(5, 2), Ok(1));
    /// assert_eq!(
    ///     map.try_update_remaining(5, 2),
    ///     Err(RemainingError::Underflow { remaining: 1, acked_delta: 2 })
    /// );
    /// assert_eq!(map.try_update_remaining(5, 1), Ok(0)); // exact: distinguishable
    /// assert_eq!(map.try_update_remaining(6, 1), Err(RemainingError::Absent));
    /// ```
    pub fn try_update_remaining(&self, pos: P, acked_delta: u32) -> Result<u32, RemainingError> {
        let r = self
            .write()
            .store
            .lower_remaining_exact(pos.segment(), pos.offset(), acked_delta);
        match r {
            None => {
                trace!(pos = ?pos, acked_delta, "pending ack to update not found");
                Err(RemainingError::Absent)
            }
            Some(Ok(remaining)) => {
                trace!(pos = ?pos, acked_delta, remaining, "pending ack remaining updated");
                Ok(remaining)
            }
            Some(Err(remaining)) => {
                debug!(pos = ?pos, acked_delta, remaining, "pending ack over-acked; left unchanged");
                Err(RemainingError::Underflow {
                    remaining,
                    acked_delta,
                })
            }
        }
    }

    /// Removes `pos` and reports it to the remove handler with `cause`. Returns the removed
    /// value, or `None` (a no-op, no handler call) if `pos` is absent.
    #[inline]
    pub fn remove(&self, pos: P, cause: RemovalCause) -> Option<PendingAck> {
        let mut st = self.write();
        let ack = st.store.remove(pos.segment(), pos.offset());
        match ack {
            Some(ack) => {
                trace!(pos = ?pos, %cause, hash = ack.hash, "pending ack removed");
                if let Some(h) = &st.remove_handler {
                    h.on_removed(self.consumer, pos, ack, cause, st.closed);
                }
            }
            None => trace!(pos = ?pos, %cause, "pending ack to remove not found"),
        }
        ack
    }

    /// Removes `pos` only if its value equals `expected` exactly, reporting it with `cause`.
    /// Returns whether it was removed (false: absent or different value; nothing changes).
    pub fn remove_if_matches(&self, pos: P, expected: PendingAck, cause: RemovalCause) -> bool {
        let mut st = self.write();
        let (seg, off) = (pos.segment(), pos.offset());
        if st.store.get(seg, off) != Some(expected) {
            trace!(pos = ?pos, %cause, "pending ack not removed: value differs or absent");
            return false;
        }
        let removed = st.store.remove(seg, off).is_some();
        if removed {
            trace!(pos = ?pos, %cause, hash = expected.hash, "pending ack removed");
            if let Some(h) = &st.remove_handler {
                h.on_removed(self.consumer, pos, expected, cause, st.closed);
            }
        }
        removed
    }

    /// Removes every entry at or below `pos` (inclusive), in ascending order. Per entry: the
    /// remove handler with `cause`, then `f`. Handler calls are bracketed by
    /// `start_batch`/`end_batch` when at least one entry is removed. Costs O(removed), not
    /// O(len). Returns the number removed.
    pub fn remove_all_up_to(
        &self,
        pos: P,
        cause: RemovalCause,
        mut f: impl FnMut(P, PendingAck),
    ) -> usize {
        let (seg, off) = (pos.segment(), pos.offset());
        // Cheap check under the read lock first: usually nothing is below a mark-delete move.
        if !sync::read(&self.state).store.has_any_up_to(seg, off) {
            return 0;
        }
        let mut st = self.write();
        let consumer = self.consumer;
        let State {
            store,
            closed,
            remove_handler,
            ..
        } = &mut *st;
        if !store.has_any_up_to(seg, off) {
            return 0;
        }
        let closing = *closed;
        let h = remove_handler.as_deref();
        if let Some(h) = h {
            h.start_batch();
        }
        let n = store.drain_up_to(seg, off, |s, o, ack| {
            let p = P::from_parts(s, o);
            trace!(pos = ?p, %cause, hash = ack.hash, "pending ack removed");
            if let Some(h) = h {
                h.on_removed(consumer, p, ack, cause, closing);
            }
            f(p, ack);
        });
        if let Some(h) = h {
            h.end_batch();
        }
        debug!(up_to = ?pos, %cause, removed = n, "pending acks removed up to position");
        n
    }

    /// Visits every entry in ascending position order, under the read lock. `f` must not call
    /// methods of this map that write (deadlock).
    pub fn for_each(&self, mut f: impl FnMut(P, PendingAck)) {
        self.fold_then((), |_, p, ack| f(p, ack), |_| ())
    }

    /// Folds every entry (ascending) into `init` with `f`, then calls `then` with the result
    /// before the map's lock is released: what `then` records from the walk (for example
    /// draining references of the hashes it saw) cannot be overtaken by a removal of those
    /// entries. Neither closure may call back into this map.
    ///
    /// ```
    /// let m: pending_acks::PendingAcks<(u64, u64), u32> = pending_acks::PendingAcks::new(7);
    /// m.add_if_allowed((1, 0), 1, 5).unwrap();
    /// let hashes = m.fold_then(Vec::new(), |v, _, ack| v.push(ack.hash), |v| v);
    /// assert_eq!(hashes, vec![5]);
    /// ```
    pub fn fold_then<S, R>(
        &self,
        init: S,
        mut f: impl FnMut(&mut S, P, PendingAck),
        then: impl FnOnce(S) -> R,
    ) -> R {
        let st = sync::read(&self.state);
        let mut acc = init;
        st.store
            .for_each(|s, o, ack| f(&mut acc, P::from_parts(s, o), ack));
        let r = then(acc);
        drop(st);
        r
    }

    /// Removes every entry in ascending order. Per entry: `f`, then the remove handler with
    /// `cause`; bracketed by `start_batch`/`end_batch` when at least one entry is removed. The
    /// map stays open. Returns the number removed.
    pub fn for_each_and_clear(&self, cause: RemovalCause, f: impl FnMut(P, PendingAck)) -> usize {
        self.drain(cause, false, f)
    }

    /// Closes the map, then removes every entry like
    /// [`for_each_and_clear`](Self::for_each_and_clear) with cause
    /// [`RemovalCause::ConsumerClosed`] and `closing = true`. Every later add is refused with
    /// [`AddRefused::Closed`], so the map stays empty. Returns the number removed (0 when
    /// called again).
    pub fn for_each_and_close(&self, f: impl FnMut(P, PendingAck)) -> usize {
        self.drain(RemovalCause::ConsumerClosed, true, f)
    }

    fn drain(&self, cause: RemovalCause, close: bool, mut f: impl FnMut(P, PendingAck)) -> usize {
        let mut st = self.write();
        let consumer = self.consumer;
        let State {
            store,
            closed,
            remove_handler,
            ..
        } = &mut *st;
        if close && !*closed {
            *closed = true;
            debug!(pending = store.len(), "pending-acks map closed");
        }
        if store.len() == 0 {
            return 0;
        }
        let closing = *closed;
        let h = remove_handler.as_deref();
        if let Some(h) = h {
            h.start_batch();
        }
        let n = store.drain_all(|s, o, ack| {
            let p = P::from_parts(s, o);
            f(p, ack);
            trace!(pos = ?p, %cause, hash = ack.hash, "pending ack removed");
            if let Some(h) = h {
                h.on_removed(consumer, p, ack, cause, closing);
            }
        });
        if let Some(h) = h {
            h.end_batch();
        }
        debug!(%cause, removed = n, "pending acks cleared");
        n
    }

    /// Whether `pos` is pending. O(log segments) plus O(1) in a dense bucket.
    pub fn contains(&self, pos: P) -> bool {
        self.get(pos).is_some()
    }

    /// The value recorded for `pos`, if pending.
    pub fn get(&self, pos: P) -> Option<PendingAck> {
        sync::read(&self.state)
            .store
            .get(pos.segment(), pos.offset())
    }

    /// Number of pending entries, O(1).
    pub fn len(&self) -> usize {
        sync::read(&self.state).store.len()
    }

    /// Whether no entry is pending.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether [`for_each_and_close`](Self::for_each_and_close) ran; a closed map refuses
    /// every add.
    pub fn is_closed(&self) -> bool {
        sync::read(&self.state).closed
    }

    /// The consumer this map belongs to (passed to the handlers).
    pub fn consumer(&self) -> C {
        self.consumer
    }

    /// Heap bytes the map retains, computed from its buffers' capacities (dense and ordered
    /// buckets, and a spare buffer kept from an emptied bucket: exact; tree buckets: estimated
    /// from their entry count). Not counting the handlers.
    pub fn memory_bytes(&self) -> usize {
        sync::read(&self.state).store.memory_bytes()
    }
}

/// Adds under one held write lock; see [`PendingAcks::add_batch`].
pub struct AddBatch<'a, P, C> {
    consumer: C,
    st: &'a mut State<P, C>,
}

impl<P: SegmentedPosition, C: Copy + Send + Sync + 'static> AddBatch<'_, P, C> {
    /// [`PendingAcks::add_if`] inside the batch's lock.
    #[inline]
    pub fn add_if(
        &mut self,
        pos: P,
        remaining: u32,
        hash: u32,
        check: impl FnOnce(C, P, u32) -> bool,
    ) -> Result<AddOutcome, AddRefused> {
        self.add_checked(pos, remaining, hash, "the add check", |_, c, p, h| {
            check(c, p, h)
        })
    }

    /// [`PendingAcks::add_if_allowed`] inside the batch's lock.
    #[inline]
    pub fn add_if_allowed(
        &mut self,
        pos: P,
        remaining: u32,
        hash: u32,
    ) -> Result<AddOutcome, AddRefused> {
        self.add_checked(pos, remaining, hash, "add handler", |st, c, p, h| {
            st.add_handler.as_ref().is_none_or(|a| a.allow_add(c, p, h))
        })
    }

    /// The one add: refused when the map is closed or `allowed` says no (`by` names the veto
    /// in the log), inserted otherwise.
    #[inline]
    fn add_checked(
        &mut self,
        pos: P,
        remaining: u32,
        hash: u32,
        by: &'static str,
        allowed: impl FnOnce(&State<P, C>, C, P, u32) -> bool,
    ) -> Result<AddOutcome, AddRefused> {
        if self.st.closed {
            debug!(pos = ?pos, hash, "pending ack refused: map closed");
            return Err(AddRefused::Closed);
        }
        if !allowed(self.st, self.consumer, pos, hash) {
            debug!(pos = ?pos, hash, by, "pending ack vetoed");
            return Err(AddRefused::Vetoed);
        }
        PendingAcks::<P, C>::insert_locked(self.st, pos, remaining, hash)
    }
}
