//! The tracker: hash → draining entry, batching and notification.

use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::Hash;

use tracing::{debug, trace, warn};

use crate::sync::{lock, Arc, AtomicU64, Mutex, OnceLock, Ordering};
use crate::table::{FxBuild, Table, TableReduce, DENSE_LIMIT};

/// Told that at least one draining hash was released while it was blocking another consumer.
///
/// Calls are coalesced: one call may stand for many released hashes (always exactly one per
/// outermost [`DrainingHashes::end_batch`] that saw a release). The tracker calls it after
/// releasing its own lock, so an implementation may call back into the tracker; it must not
/// block for long, as it runs on the thread that released the hash (often an ack path).
pub trait UnblockListener: Send + Sync {
    /// Something unblocked: a dispatcher should retry the entries it held back.
    fn hashes_unblocked(&self);
}

/// A snapshot of one draining hash, as returned by [`DrainingHashes::get`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DrainingEntry<C> {
    /// The consumer that still has pending entries of the hash (the old owner).
    pub owner: C,
    /// How many of the owner's pending entries with this hash remain; always at least 1.
    pub ref_count: u32,
    /// How many times [`DrainingHashes::should_block`] refused the hash to another consumer
    /// (saturates at `u32::MAX`).
    pub blocked_attempts: u32,
}

/// Why [`DrainingHashes::add_entry`] refused a reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AddEntryError<C: Debug> {
    /// Hash 0 means "no hash": such entries never drain.
    #[error("hash 0 means no hash and cannot drain")]
    ZeroHash,
    /// Another consumer is already draining this hash (at most one owner per hash).
    #[error("hash is already draining on consumer {owner:?}")]
    OwnedByOther {
        /// The consumer that owns the draining entry.
        owner: C,
    },
    /// The owner already holds `u32::MAX` references to this hash.
    #[error("reference count of the draining hash would overflow")]
    RefCountOverflow,
}

/// Why [`DrainingHashes::reduce_ref_count`] refused to drop a reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReduceError<C: Debug> {
    /// The hash drains on another consumer; the entry is left untouched.
    #[error("hash is draining on consumer {owner:?}, not on the caller")]
    OwnedByOther {
        /// The consumer that owns the draining entry.
        owner: C,
    },
}

/// What [`DrainingHashes::reduce_ref_count`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduced {
    /// The hash is not draining (or is 0): no draining entry changed. This is the common case
    /// for acks. Also the answer when the reference was a *stale* one — counted by an entry the
    /// owner already reclaimed ([`DrainingHashes::should_block`] by the owner, or
    /// [`DrainingHashes::force_release`]): that reference is paid off and any newer entry of the
    /// same owner and hash is left alone.
    NotDraining,
    /// One reference dropped; `remaining` (≥ 1) are left.
    Decremented {
        /// References left on the entry.
        remaining: u32,
    },
    /// The last reference dropped: the entry is gone and the hash may go to its new owner.
    Released {
        /// The entry had blocked another consumer at least once. Unless the caller was closing,
        /// the listener was (or, inside a batch, will be) notified.
        was_blocking: bool,
    },
}

/// The verdict of [`DrainingHashes::check_send`] for an entry about to become pending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendCheck<C> {
    /// The hash is not draining (or is 0): send it, nothing was counted.
    NotDraining,
    /// The hash drains on this very consumer (a send decided before the range moved): send it;
    /// it was counted as one more reference, so the drain waits for it too.
    Counted {
        /// References on the entry after counting this one.
        ref_count: u32,
    },
    /// The hash drains on another consumer: do not send (put the entry back for replay). One
    /// blocked attempt was counted, so the release will notify.
    Blocked {
        /// The consumer that drains the hash.
        owner: C,
    },
}

/// Draining figures for one consumer, from [`DrainingHashes::consumer_stats`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConsumerDrainingStats {
    /// Number of hashes this consumer is draining now.
    pub draining_hashes_count: usize,
    /// Those hashes, ascending.
    pub draining_hashes: Vec<u32>,
    /// Pending (unacked) entries of this consumer in those hashes: the sum of their refcounts.
    pub unacked_in_draining: u64,
    /// Sum of the blocked attempts on the hashes this consumer drains now.
    pub blocked_attempts: u64,
    /// Draining entries of this consumer released so far (last reference or lazy removal),
    /// since the tracker was created, cleared, or [`DrainingHashes::consumer_removed`].
    pub cleared_total: u64,
}

#[derive(Clone, Copy, Default)]
struct Counters {
    cleared_total: u64,
}

struct Inner<C> {
    table: Table<C>,
    batch_level: u32,
    unblocked_while_batching: bool,
    stats: HashMap<C, Counters, FxBuild>,
    /// Releases of the consumer that released last, not yet added to `stats`: releases come in
    /// runs of one consumer (its acks), and a map update per release cost a third of it.
    cleared_run: Option<(C, u64)>,
    /// Stale references per hash: `(owner, n)` = `n` references that an entry of `owner` had
    /// counted when it was removed early (a lazy reclaim or a forced release). The owner's pending
    /// entries behind them still exist and each will call `reduce_ref_count` once; those calls
    /// pay these off first, so they cannot drop references of a newer entry.
    stale: HashMap<u32, Vec<(C, u32)>, FxBuild>,
}

impl<C: Copy + Eq + Hash> Inner<C> {
    fn count_cleared(&mut self, consumer: C) {
        match &mut self.cleared_run {
            Some((c, n)) if *c == consumer => *n += 1,
            run => {
                if let Some((c, n)) = run.replace((consumer, 1)) {
                    self.stats.entry(c).or_default().cleared_total += n;
                }
            }
        }
    }

    /// `consumer`'s releases so far: its stats plus the open run.
    fn cleared_total(&self, consumer: C) -> u64 {
        let run = match self.cleared_run {
            Some((c, n)) if c == consumer => n,
            _ => 0,
        };
        self.stats.get(&consumer).map_or(0, |c| c.cleared_total) + run
    }

    /// Records `n` stale references of `owner` on `hash`.
    fn add_stale(&mut self, owner: C, hash: u32, n: u32) {
        if n == 0 {
            return;
        }
        let v = self.stale.entry(hash).or_default();
        match v.iter_mut().find(|(o, _)| *o == owner) {
            Some((_, k)) => *k = k.saturating_add(n),
            None => v.push((owner, n)),
        }
    }

    /// Pays off one stale reference of `owner` on `hash`; false when it has none.
    fn take_stale(&mut self, owner: C, hash: u32) -> bool {
        if self.stale.is_empty() {
            // The common case: no reclaim left anything behind; skip the hashing.
            return false;
        }
        let Some(v) = self.stale.get_mut(&hash) else {
            return false;
        };
        let Some(i) = v.iter().position(|(o, _)| *o == owner) else {
            return false;
        };
        v[i].1 -= 1;
        if v[i].1 == 0 {
            v.swap_remove(i);
            if v.is_empty() {
                self.stale.remove(&hash);
            }
        }
        true
    }

    /// Whether `hash` has an entry or stale references (its occupancy bit must stay set).
    fn occupied(&self, hash: u32) -> bool {
        self.table.contains(hash) || self.has_stale(hash)
    }

    /// Whether `hash` has stale references.
    fn has_stale(&self, hash: u32) -> bool {
        !self.stale.is_empty() && self.stale.contains_key(&hash)
    }
}

/// Per-subscription record of hashes in handover (Pulsar's PIP-379 draining hashes).
///
/// When a hash moves from consumer A to consumer B while A still has pending (sent, unacked)
/// entries with it, the dispatcher calls [`add_entry`](Self::add_entry) once per such entry; A
/// now *drains* the hash. [`should_block`](Self::should_block) then refuses the hash to every
/// other consumer until A's references are gone, which happens through
/// [`reduce_ref_count`](Self::reduce_ref_count) from A's pending-acks remove handler.
///
/// **Stale references.** Every reference stands for one pending entry of the owner, and every
/// removal of such an entry calls `reduce_ref_count` once, unconditionally. When an entry goes
/// before its count reaches zero — the owner asks [`should_block`](Self::should_block) (the hash
/// came back to it) or [`force_release`](Self::force_release) — its remaining count is kept as
/// *stale references* of that owner and hash. The owner's next `reduce_ref_count` calls on the
/// hash pay those off (answering [`Reduced::NotDraining`]) before they touch a draining entry, so
/// an ack of an entry counted before the reclaim cannot release an entry registered after it.
/// A registration that scans *all* pending entries of the owner again (and so counts the
/// entries behind stale references a second time) uses [`recount_entry`](Self::recount_entry),
/// which turns a stale reference back into a live one instead. Stale references are not
/// entries: [`get`](Self::get), [`len`](Self::len) and [`entries`](Self::entries) ignore them;
/// [`stale_references`](Self::stale_references) reports them; [`clear`](Self::clear) drops them.
///
/// Thread-safe: every method takes `&self`, state sits behind one mutex, and the common
/// "not draining" answer of `should_block`, `check_send` and `reduce_ref_count` is read without
/// locking: from a count of occupied hashes (0 while nothing drains) and an atomic bitmap. The tracker never calls into pending acks; it calls the
/// [`UnblockListener`] only after releasing its lock.
pub struct DrainingHashes<C> {
    inner: Mutex<Inner<C>>,
    /// One bit per dense hash: set while that hash has an entry. Written only under `inner`'s
    /// lock; read without it for the fast "not draining" path. Allocated (8 KiB) by the first
    /// mark: an idle subscription's tracker has none.
    occupied: OnceLock<Box<[AtomicU64]>>,
    /// How many bits of `occupied` are set; written only under `inner`'s lock. The lock-free
    /// path reads it first: while nothing drains (most of a subscription's life) every check is
    /// one load of this always-cached word instead of a bitmap word per hash.
    occupied_bits: AtomicU64,
    listener: Arc<dyn UnblockListener>,
}

#[inline]
fn bit(hash: u32) -> (usize, u64) {
    ((hash >> 6) as usize, 1u64 << (hash & 63))
}

impl<C: Copy + Eq + Hash + Debug + Send + Sync + 'static> DrainingHashes<C> {
    /// An empty tracker that reports unblocked hashes to `listener`.
    pub fn new(listener: Arc<dyn UnblockListener>) -> Self {
        DrainingHashes {
            inner: Mutex::new(Inner {
                table: Table::new(),
                batch_level: 0,
                unblocked_while_batching: false,
                stats: HashMap::default(),
                cleared_run: None,
                stale: HashMap::default(),
            }),
            occupied: OnceLock::new(),
            occupied_bits: AtomicU64::new(0),
            listener,
        }
    }

    /// `false` only when the hash certainly has no entry (dense hashes, read without the lock).
    #[inline]
    fn maybe_draining(&self, hash: u32) -> bool {
        if hash >= DENSE_LIMIT {
            return true;
        }
        // A mark counts before it sets its bit and an unmark clears before it uncounts, so a
        // count of 0 means no bit was set when it was read.
        if self.occupied_bits.load(Ordering::Acquire) == 0 {
            return false;
        }
        let (w, m) = bit(hash);
        // Set up before the first count was published; `None` cannot be seen after a count.
        self.occupied.get().is_none_or(|words| {
            words
                .get(w)
                .is_some_and(|a| a.load(Ordering::Acquire) & m != 0)
        })
    }

    /// Called under the lock when an entry is created. Every writer of the bitmap holds the
    /// lock, so a plain load and store update the word (no read-modify-write instruction needed);
    /// lock-free readers see the word before or after, as with `fetch_or`.
    #[inline]
    fn mark(&self, hash: u32) {
        if hash < DENSE_LIMIT {
            let (w, m) = bit(hash);
            let words = self.occupied.get_or_init(|| {
                (0..(DENSE_LIMIT as usize).div_ceil(64))
                    .map(|_| AtomicU64::new(0))
                    .collect()
            });
            if let Some(a) = words.get(w) {
                let word = a.load(Ordering::Relaxed);
                if word & m == 0 {
                    let n = self.occupied_bits.load(Ordering::Relaxed);
                    self.occupied_bits.store(n + 1, Ordering::Release);
                    a.store(word | m, Ordering::Release);
                }
            }
        }
    }

    /// Called under the lock when an entry is removed (a plain load and store, as in `mark`).
    #[inline]
    fn unmark(&self, hash: u32) {
        if hash < DENSE_LIMIT {
            let (w, m) = bit(hash);
            if let Some(a) = self.occupied.get().and_then(|words| words.get(w)) {
                let word = a.load(Ordering::Relaxed);
                if word & m != 0 {
                    a.store(word & !m, Ordering::Release);
                    let n = self.occupied_bits.load(Ordering::Relaxed);
                    self.occupied_bits
                        .store(n.saturating_sub(1), Ordering::Release);
                }
            }
        }
    }

    /// Adds one reference of `consumer` to `hash` for a pending entry that was not counted
    /// before (a send counted on its own). Creates the draining entry on the first reference.
    /// A registration that rescans every pending entry of `consumer` when the hash leaves its
    /// range should call [`recount_entry`](Self::recount_entry) per entry instead: after a lazy
    /// reclaim, such a scan meets entries that still hold stale references, and `add_entry`
    /// would count them twice (the hash would then never be released).
    ///
    /// Errors (nothing changes): [`AddEntryError::ZeroHash`] for hash 0,
    /// [`AddEntryError::OwnedByOther`] when another consumer already drains the hash,
    /// [`AddEntryError::RefCountOverflow`] past `u32::MAX` references.
    pub fn add_entry(&self, consumer: C, hash: u32) -> Result<(), AddEntryError<C>> {
        if hash == 0 {
            warn!(consumer = ?consumer, "draining entry for hash 0 refused");
            return Err(AddEntryError::ZeroHash);
        }
        let mut g = lock(&self.inner);
        self.add_locked(&mut g, consumer, hash)
    }

    /// [`add_entry`](Self::add_entry) for a registration that scans **every** pending entry of
    /// `consumer` (the dispatcher's when `consumer` loses a range): such a scan also meets the
    /// pending entries behind `consumer`'s stale references on `hash` (see the type's docs), so
    /// each call first turns one stale reference back into a live one, and only adds a new
    /// reference when there is none. Use `add_entry` for a reference that was never counted (a
    /// new send).
    ///
    /// Same errors as `add_entry`; on an error nothing changes (a stale reference stays stale).
    ///
    /// ```
    /// use draining_hashes::{Arc, DrainingHashes, Reduced, UnblockListener};
    /// struct Nop;
    /// impl UnblockListener for Nop { fn hashes_unblocked(&self) {} }
    /// let t: DrainingHashes<u32> = DrainingHashes::new(Arc::new(Nop));
    /// t.add_entry(1, 7)?;              // consumer 1's pending entry e0 starts draining
    /// assert!(!t.should_block(1, 7));  // the hash came back: the entry is reclaimed
    /// assert_eq!(t.stale_references(1, 7), 1); // e0 is still pending
    /// t.recount_entry(1, 7)?;          // the hash leaves 1 again: the scan meets e0
    /// assert_eq!(t.stale_references(1, 7), 0);
    /// assert_eq!(t.reduce_ref_count(1, 7, false)?, Reduced::Released { was_blocking: false });
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn recount_entry(&self, consumer: C, hash: u32) -> Result<(), AddEntryError<C>> {
        if hash == 0 {
            warn!(consumer = ?consumer, "draining entry for hash 0 refused");
            return Err(AddEntryError::ZeroHash);
        }
        self.recount_locked(&mut lock(&self.inner), consumer, hash)
    }

    /// `recount_entry` under the held lock: adds the reference, then turns one stale reference
    /// back into a live one (see `recount_entry`).
    fn recount_locked(
        &self,
        g: &mut Inner<C>,
        consumer: C,
        hash: u32,
    ) -> Result<(), AddEntryError<C>> {
        self.add_locked(g, consumer, hash)?;
        if g.take_stale(consumer, hash) {
            debug!(hash, consumer = ?consumer, "stale draining reference counted again");
        }
        Ok(())
    }

    /// [`recount_entry`](Self::recount_entry) for every hash of `hashes` under one lock (a
    /// join's registration over a consumer's pending acks); returns how many were counted. A
    /// refused hash (0, or another owner's) is skipped with the same WARN as one refused by
    /// `recount_entry`.
    ///
    /// ```
    /// use draining_hashes::{Arc, DrainingHashes, UnblockListener};
    /// struct Quiet;
    /// impl UnblockListener for Quiet {
    ///     fn hashes_unblocked(&self) {}
    /// }
    /// let d: DrainingHashes<u32> = DrainingHashes::new(Arc::new(Quiet));
    /// assert_eq!(d.recount_entries(1, [5, 5, 0, 9]), 3);
    /// assert_eq!(d.get(5).map(|e| e.ref_count), Some(2));
    /// ```
    pub fn recount_entries(&self, consumer: C, hashes: impl IntoIterator<Item = u32>) -> usize {
        let mut g = lock(&self.inner);
        let mut n = 0;
        for hash in hashes {
            if hash == 0 {
                warn!(consumer = ?consumer, "draining entry for hash 0 refused");
                continue;
            }
            match self.recount_locked(&mut g, consumer, hash) {
                Ok(()) => n += 1,
                Err(e) => {
                    warn!(consumer = ?consumer, hash, error = %e, "draining registration refused")
                }
            }
        }
        n
    }

    /// The owner's stale references on `hash`: references of an entry removed early whose
    /// `reduce_ref_count` calls are still to come (see the type's docs). 0 for hash 0.
    pub fn stale_references(&self, consumer: C, hash: u32) -> u32 {
        if hash == 0 || !self.maybe_draining(hash) {
            return 0;
        }
        let g = lock(&self.inner);
        g.stale
            .get(&hash)
            .and_then(|v| v.iter().find(|(o, _)| *o == consumer))
            .map_or(0, |(_, n)| *n)
    }

    /// Removes the draining entry of `hash` whatever its count (a draining timeout), so every
    /// consumer may get the hash again. Its remaining references become stale references of the
    /// owner (the owner's pending entries still exist; their acks will not touch a newer entry).
    /// If the entry had blocked someone the listener is notified (after the lock is released, or
    /// at the end of the outermost batch). Returns the removed entry; `None` (nothing changes)
    /// when the hash is not draining.
    pub fn force_release(&self, hash: u32) -> Option<DrainingEntry<C>> {
        if hash == 0 || !self.maybe_draining(hash) {
            return None;
        }
        let (e, notify) = {
            let mut g = lock(&self.inner);
            let e = g.table.remove(hash)?;
            g.add_stale(e.owner, hash, e.ref_count);
            g.count_cleared(e.owner);
            let notify = e.blocked_attempts > 0 && self.note_unblocked(&mut g);
            warn!(hash, owner = ?e.owner, ref_count = e.ref_count, "draining hash force-released");
            (e, notify)
        };
        if notify {
            self.listener.hashes_unblocked();
        }
        Some(e)
    }

    /// A blocking entry was released: true when the listener must be called now (outside any
    /// batch), else the outermost batch is armed.
    fn note_unblocked(&self, g: &mut Inner<C>) -> bool {
        if g.batch_level > 0 {
            g.unblocked_while_batching = true;
            false
        } else {
            true
        }
    }

    /// `add_entry`'s body, under the lock.
    fn add_locked(&self, g: &mut Inner<C>, consumer: C, hash: u32) -> Result<(), AddEntryError<C>> {
        match g.table.get_mut(hash) {
            Some(e) if e.owner != consumer => {
                let owner = e.owner;
                warn!(hash, consumer = ?consumer, owner = ?owner, "hash already drains on another consumer");
                Err(AddEntryError::OwnedByOther { owner })
            }
            Some(e) => {
                *e.ref_count = e
                    .ref_count
                    .checked_add(1)
                    .ok_or(AddEntryError::RefCountOverflow)?;
                trace!(hash, consumer = ?consumer, ref_count = *e.ref_count, "draining reference added");
                Ok(())
            }
            None => {
                g.table.insert_vacant(
                    hash,
                    DrainingEntry {
                        owner: consumer,
                        ref_count: 1,
                        blocked_attempts: 0,
                    },
                );
                self.mark(hash);
                debug!(hash, consumer = ?consumer, "hash starts draining");
                Ok(())
            }
        }
    }

    /// Drops one reference of `consumer` to `hash`: call it from the pending-acks remove handler
    /// for every removed entry. At zero the entry is removed; if it had blocked someone and
    /// `closing` is false, the listener is notified (after the lock is released, or once at the
    /// end of the outermost batch).
    ///
    /// Hash 0 and hashes that are not draining are a no-op returning [`Reduced::NotDraining`].
    /// A stale reference of `consumer` on `hash` (left by an entry removed early, see the type's
    /// docs) is paid off first, also answering `NotDraining`: the call stands for a pending entry
    /// counted by that older entry, so a newer entry of the same owner keeps its count.
    /// Errors: [`ReduceError::OwnedByOther`] when another consumer drains the hash (unchanged).
    #[inline]
    pub fn reduce_ref_count(
        &self,
        consumer: C,
        hash: u32,
        closing: bool,
    ) -> Result<Reduced, ReduceError<C>> {
        if hash == 0 || !self.maybe_draining(hash) {
            return Ok(Reduced::NotDraining);
        }
        self.reduce_locked(consumer, hash, closing)
    }

    /// [`reduce_ref_count`](Self::reduce_ref_count) for a hash that may be draining: the part
    /// under the lock.
    #[inline]
    fn reduce_locked(
        &self,
        consumer: C,
        hash: u32,
        closing: bool,
    ) -> Result<Reduced, ReduceError<C>> {
        let notify;
        let outcome = {
            let mut g = lock(&self.inner);
            if g.take_stale(consumer, hash) {
                trace!(hash, consumer = ?consumer, "stale draining reference dropped");
                if !g.occupied(hash) {
                    self.unmark(hash);
                }
                return Ok(Reduced::NotDraining);
            }
            let was_blocking = match g.table.reduce(hash, consumer) {
                TableReduce::Missing => return Ok(Reduced::NotDraining),
                TableReduce::Other(owner) => {
                    warn!(hash, consumer = ?consumer, owner = ?owner, "reduce for a hash draining on another consumer");
                    return Err(ReduceError::OwnedByOther { owner });
                }
                TableReduce::Decremented(remaining) => {
                    trace!(hash, consumer = ?consumer, remaining, "draining reference dropped");
                    return Ok(Reduced::Decremented { remaining });
                }
                TableReduce::Removed { blocked_attempts } => blocked_attempts > 0,
            };
            // The entry is gone: only stale references can keep the bit.
            if !g.has_stale(hash) {
                self.unmark(hash);
            }
            g.count_cleared(consumer);
            notify = was_blocking && !closing && self.note_unblocked(&mut g);
            debug!(hash, consumer = ?consumer, was_blocking, closing, "draining hash released");
            Reduced::Released { was_blocking }
        };
        if notify {
            self.listener.hashes_unblocked();
        }
        Ok(outcome)
    }

    /// Whether `consumer` must not receive `hash` now because another consumer drains it.
    ///
    /// A refusal counts one blocked attempt on the entry. If `consumer` is the entry's own owner
    /// (the hash came back to it), the entry is removed lazily (no notification) and the answer
    /// is `false`; its remaining count becomes stale references of the owner, paid off by the
    /// owner's next `reduce_ref_count` calls on the hash (see the type's docs). Hash 0 is never
    /// blocked (a warning is logged).
    #[inline]
    pub fn should_block(&self, consumer: C, hash: u32) -> bool {
        if hash == 0 {
            Self::should_block_zero(consumer);
            return false;
        }
        if !self.maybe_draining(hash) {
            return false;
        }
        self.should_block_locked(consumer, hash)
    }

    #[cold]
    #[inline(never)]
    fn should_block_zero(consumer: C) {
        warn!(consumer = ?consumer, "should_block asked for hash 0");
    }

    /// [`should_block`](Self::should_block) for a hash that may be draining: the part under the
    /// lock, out of line so that callers inline only the lock-free test.
    #[inline(never)]
    fn should_block_locked(&self, consumer: C, hash: u32) -> bool {
        let mut g = lock(&self.inner);
        let Some(e) = g.table.get_mut(hash) else {
            return false;
        };
        if e.owner == consumer {
            let n = *e.ref_count;
            g.table.remove(hash);
            // The bit stays set: the stale references keep the hash on the slow path.
            g.add_stale(consumer, hash, n);
            g.count_cleared(consumer);
            debug!(hash, consumer = ?consumer, stale = n, "hash came back to its draining owner; entry removed");
            return false;
        }
        *e.blocked_attempts = e.blocked_attempts.saturating_add(1);
        trace!(hash, consumer = ?consumer, owner = ?e.owner, "hash blocked while draining");
        true
    }

    /// The send-time check for a pending-acks add handler: may `consumer` get a new pending
    /// entry with `hash`? One atomic step, so a registration or release cannot slip between the
    /// look-up and the count:
    ///
    /// * not draining (or hash 0) → [`SendCheck::NotDraining`];
    /// * draining on `consumer` itself → one more reference, [`SendCheck::Counted`] (unlike
    ///   [`should_block`](Self::should_block), this never releases the entry: a send decided
    ///   before the range moved must be waited for, not treated as "the hash came back");
    /// * draining on another consumer → one blocked attempt, [`SendCheck::Blocked`]. Also the
    ///   answer (with `owner` = `consumer`, and a warning) if counting would overflow `u32`.
    pub fn check_send(&self, consumer: C, hash: u32) -> SendCheck<C> {
        if hash == 0 || !self.maybe_draining(hash) {
            return SendCheck::NotDraining;
        }
        let mut g = lock(&self.inner);
        let Some(e) = g.table.get_mut(hash) else {
            return SendCheck::NotDraining;
        };
        if e.owner != consumer {
            *e.blocked_attempts = e.blocked_attempts.saturating_add(1);
            trace!(hash, consumer = ?consumer, owner = ?e.owner, "send refused: hash draining");
            return SendCheck::Blocked { owner: e.owner };
        }
        match e.ref_count.checked_add(1) {
            Some(n) => {
                *e.ref_count = n;
                debug!(hash, consumer = ?consumer, ref_count = n, "send of a hash draining on its own consumer counted");
                SendCheck::Counted { ref_count: n }
            }
            None => {
                warn!(hash, consumer = ?consumer, "draining refcount would overflow; send refused");
                SendCheck::Blocked { owner: consumer }
            }
        }
    }

    /// Opens a (nestable) batch: releases inside it notify once, after the outermost
    /// [`end_batch`](Self::end_batch). Bulk removals (pending-acks' batch brackets) use it.
    pub fn start_batch(&self) {
        let mut g = lock(&self.inner);
        g.batch_level = g.batch_level.saturating_add(1);
    }

    /// Closes a batch. When the outermost batch closes and a blocking hash was released inside
    /// it, the listener is called once (after the lock is released). Without an open batch this
    /// is a no-op (a warning is logged).
    pub fn end_batch(&self) {
        let notify = {
            let mut g = lock(&self.inner);
            if g.batch_level == 0 {
                warn!("end_batch without a matching start_batch ignored");
                return;
            }
            g.batch_level -= 1;
            if g.batch_level == 0 && g.unblocked_while_batching {
                g.unblocked_while_batching = false;
                true
            } else {
                false
            }
        };
        if notify {
            self.listener.hashes_unblocked();
        }
    }

    /// The draining entry of `hash`, if any.
    pub fn get(&self, hash: u32) -> Option<DrainingEntry<C>> {
        if hash == 0 || !self.maybe_draining(hash) {
            return None;
        }
        lock(&self.inner).table.get(hash)
    }

    /// Drops every entry, every stale reference and every consumer's stats, without notifying
    /// (for when the last consumer has left). An open batch stays open.
    pub fn clear(&self) {
        let mut g = lock(&self.inner);
        g.table.clear();
        g.stats.clear();
        g.cleared_run = None;
        g.stale.clear();
        for a in self
            .occupied
            .get()
            .into_iter()
            .flat_map(|words| words.iter())
        {
            a.store(0, Ordering::Release);
        }
        self.occupied_bits.store(0, Ordering::Release);
        debug!("draining hashes cleared");
    }

    /// Forgets `consumer`'s stats (its cleared total). Its draining entries and stale references,
    /// if any, stay: they go away as its pending acks are removed (closing).
    pub fn consumer_removed(&self, consumer: C) {
        let mut g = lock(&self.inner);
        g.stats.remove(&consumer);
        if g.cleared_run.is_some_and(|(c, _)| c == consumer) {
            g.cleared_run = None;
        }
    }

    /// Draining figures for `consumer` (a scan of the draining entries; meant for stats calls,
    /// not for a per-message path).
    pub fn consumer_stats(&self, consumer: C) -> ConsumerDrainingStats {
        let g = lock(&self.inner);
        let mut s = ConsumerDrainingStats {
            cleared_total: g.cleared_total(consumer),
            ..ConsumerDrainingStats::default()
        };
        for (h, e) in g.table.sorted_entries() {
            if e.owner == consumer {
                s.draining_hashes.push(h);
                s.unacked_in_draining += u64::from(e.ref_count);
                s.blocked_attempts += u64::from(e.blocked_attempts);
            }
        }
        s.draining_hashes_count = s.draining_hashes.len();
        s
    }

    /// Every draining entry, ascending by hash (for explain/debug output and tests).
    pub fn entries(&self) -> Vec<(u32, DrainingEntry<C>)> {
        lock(&self.inner).table.sorted_entries()
    }

    /// Number of draining hashes.
    pub fn len(&self) -> usize {
        lock(&self.inner).table.len()
    }

    /// Whether no hash is draining.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<C: Copy + Eq + Debug> Debug for DrainingHashes<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let g = lock(&self.inner);
        f.debug_struct("DrainingHashes")
            .field("len", &g.table.len())
            .field("batch_level", &g.batch_level)
            .finish_non_exhaustive()
    }
}

// The unit tests use the std primitives; under `loom` only the loom models run.
#[cfg(all(test, not(feature = "loom")))]
mod tests;
