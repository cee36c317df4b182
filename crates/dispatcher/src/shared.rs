//! State shared between the dispatcher core (one thread) and the ack path (consumer threads).
//!
//! Lock order, everywhere: the driver's cursor lock (always released before the rest), then a
//! consumer's pending-acks lock, then the draining-hashes lock. The consumer registry lock is
//! only held to clone an `Arc` out of it, never while calling into the maps.

use draining_hashes::{DrainingHashes, UnblockListener};
use pending_acks::{PendingAck, PendingAcks, RemovalCause, RemoveHandler};
use tracing::warn;

use crate::config::ConsumerId;
use crate::sync::{Arc, AtomicBool, AtomicI64, AtomicU64, Ordering, RwLock};

/// Position as the pending-acks map stores it: (ledger id, entry id).
pub(crate) type PendingPos = (u64, u64);

/// Tells whoever runs the dispatcher core that it should call
/// [`Dispatcher::handle_wake`](crate::Dispatcher::handle_wake) soon.
///
/// Called from consumer threads (the ack path) and from inside the draining tracker's listener,
/// possibly while a pending-acks lock is held: an implementation must be quick and must not call
/// back into the dispatcher. The runtime sends a message on a channel; a single-threaded driver
/// sets a flag.
pub trait Waker: Send + Sync {
    /// Something may have unblocked (a draining hash was released, or a consumer or the
    /// subscription fell to half its unacked limit).
    fn wake(&self);
}

/// A [`Waker`] that does nothing; for drivers that call `handle_wake` after every ack anyway.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoopWaker;

impl Waker for NoopWaker {
    fn wake(&self) {}
}

/// Flags the core reads in `handle_wake`, plus the waker to call.
pub(crate) struct WakeState {
    pub hashes_unblocked: AtomicBool,
    /// A key-serial key went back under its limit (read again at once, no coalescing).
    pub key_released: AtomicBool,
    pub unacked_unblocked: AtomicBool,
    pub unblock_notifications: AtomicU64,
    pub waker: std::sync::Arc<dyn Waker>,
}

impl WakeState {
    pub fn wake_unacked(&self) {
        self.unacked_unblocked.store(true, Ordering::SeqCst);
        self.waker.wake();
    }
}

/// The draining tracker's listener: remember and wake.
pub(crate) struct DrainListener(pub Arc<WakeState>);

impl UnblockListener for DrainListener {
    fn hashes_unblocked(&self) {
        self.0.unblock_notifications.fetch_add(1, Ordering::Relaxed);
        self.0.hashes_unblocked.store(true, Ordering::SeqCst);
        self.0.waker.wake();
    }
}

/// An unacked-messages limit with Pulsar's hysteresis: charging up to `max` blocks, debiting
/// down to half of it lets the core resume. One for each consumer and one for the subscription.
///
/// The counter is charged by the core (on send) and debited by the ack path (any thread).
/// `debit` only *reports* that half was crossed while blocked (the caller wakes the core); the
/// core clears the block in [`try_resume`](Self::try_resume), on its own thread.
pub(crate) struct UnackedLimit {
    /// Unacked messages (sum of the remaining counts charged and not yet debited).
    unacked: AtomicI64,
    /// Blocked on unacked messages (set by the core at `max`).
    blocked: AtomicBool,
    /// Block threshold (0 = off).
    max: i64,
}

/// What a [`UnackedLimit::charge`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Charged {
    /// Still below the limit (or already blocked, or no limit).
    Open,
    /// The charge reached the limit and blocked it.
    Blocked {
        /// Unacked messages after the charge.
        unacked: i64,
        /// The ack path already debited below half before it could see the block: the caller
        /// must re-check (it would otherwise wait for a wake that never comes).
        below_half: bool,
    },
}

impl UnackedLimit {
    pub fn new(max: i64) -> Self {
        UnackedLimit {
            unacked: AtomicI64::new(0),
            blocked: AtomicBool::new(false),
            max,
        }
    }

    /// The threshold (0 = no limit).
    pub fn max(&self) -> i64 {
        self.max
    }

    pub fn unacked(&self) -> i64 {
        self.unacked.load(Ordering::SeqCst)
    }

    pub fn is_blocked(&self) -> bool {
        self.blocked.load(Ordering::SeqCst)
    }

    /// Messages that may still be charged before the limit (`None`: no limit).
    pub fn headroom(&self) -> Option<i64> {
        (self.max > 0).then(|| self.max - self.unacked())
    }

    /// Charges `n` sent messages; blocks at the limit.
    pub fn charge(&self, n: i64) -> Charged {
        let now = self.unacked.fetch_add(n, Ordering::SeqCst) + n;
        if self.max > 0 && now >= self.max && !self.is_blocked() {
            self.blocked.store(true, Ordering::SeqCst);
            return Charged::Blocked {
                unacked: now,
                below_half: self.unacked() <= self.max / 2,
            };
        }
        Charged::Open
    }

    /// Debits `n` messages; true when the limit is blocked and now at or below half (the
    /// caller wakes the core, which then calls [`try_resume`](Self::try_resume)).
    pub fn debit(&self, n: i64) -> bool {
        let left = self.unacked.fetch_sub(n, Ordering::SeqCst) - n;
        self.max > 0 && left <= self.max / 2 && self.is_blocked()
    }

    /// Core side: clears the block if the count is at or below half. True if it resumed.
    pub fn try_resume(&self) -> bool {
        if self.max > 0 && self.is_blocked() && self.unacked() <= self.max / 2 {
            self.blocked.store(false, Ordering::SeqCst);
            return true;
        }
        false
    }

    /// Forgets every charge and the block (the last consumer left).
    pub fn reset(&self) {
        self.unacked.store(0, Ordering::SeqCst);
        self.blocked.store(false, Ordering::SeqCst);
    }
}

/// The shared half of one consumer.
pub(crate) struct ConsumerShared {
    pub id: ConsumerId,
    pub pending: PendingAcks<PendingPos, ConsumerId>,
    /// This consumer's unacked messages and its limit.
    pub limit: UnackedLimit,
}

impl ConsumerShared {
    /// Debits `n` unacked messages from this consumer and the subscription, waking the core
    /// when either crosses half its limit while blocked.
    pub fn debit(&self, sub: &SubShared, n: i64) {
        if n == 0 {
            return;
        }
        if self.limit.debit(n) {
            sub.wake.wake_unacked();
        }
        sub.debit(n);
    }
}

/// The shared half of the subscription.
pub(crate) struct SubShared {
    pub consumers: RwLock<Vec<Arc<ConsumerShared>>>,
    /// The subscription's unacked messages and its limit.
    pub limit: UnackedLimit,
    pub wake: Arc<WakeState>,
}

impl SubShared {
    pub fn debit(&self, n: i64) {
        if self.limit.debit(n) {
            self.wake.wake_unacked();
        }
    }

    /// The shared half of a connected consumer.
    pub fn consumer(&self, id: ConsumerId) -> Option<Arc<ConsumerShared>> {
        self.read_registry().iter().find(|c| c.id == id).cloned()
    }

    fn read_registry(&self) -> crate::sync::RwLockReadGuard<'_, Vec<Arc<ConsumerShared>>> {
        match self.consumers.read() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Removes `pos` (cause: acked) from the pending acks of `first`, or else of whichever other
    /// consumer has it (Shared clients may ack through another consumer), and debits its unacked
    /// messages. Lock order: registry (read) → pending-acks → draining-hashes; the core takes
    /// the registry's write lock only to publish a new list, never while holding a map lock.
    pub fn remove_acked(
        &self,
        first: ConsumerId,
        pos: PendingPos,
    ) -> Option<(ConsumerId, PendingAck)> {
        let g = self.read_registry();
        let mine = g.iter().filter(|c| c.id == first);
        let others = g.iter().filter(|c| c.id != first);
        for c in mine.chain(others) {
            if let Some(ack) = c.pending.remove(pos, RemovalCause::Acked) {
                c.debit(self, i64::from(ack.remaining));
                return Some((c.id, ack));
            }
        }
        None
    }

    /// A partial batch-index ack: lowers the remaining count of `pos` on `first` (or the
    /// consumer that has it) by `delta` and debits that many unacked messages.
    pub fn partial_ack(
        &self,
        first: ConsumerId,
        pos: PendingPos,
        delta: u32,
    ) -> Option<ConsumerId> {
        let g = self.read_registry();
        let mine = g.iter().filter(|c| c.id == first);
        let others = g.iter().filter(|c| c.id != first);
        for c in mine.chain(others) {
            if let Some(ack) = c.pending.get(pos) {
                let d = delta.min(ack.remaining);
                if c.pending.update_remaining(pos, d).is_some() {
                    c.debit(self, i64::from(d));
                    return Some(c.id);
                }
            }
        }
        None
    }

    pub fn set_consumers(&self, list: Vec<Arc<ConsumerShared>>) {
        match self.consumers.write() {
            Ok(mut g) => *g = list,
            Err(p) => *p.into_inner() = list,
        }
    }
}

/// Key-serial dispatch ([`DispatcherConfig::max_unacked_per_key`]): the subscription-wide
/// count of sent, unacknowledged entries per hash. Taken on the dispatcher thread inside a
/// consumer's pending-acks lock (the send gate), released by the remove handler on any thread;
/// a release that brings a hash back under the limit wakes the dispatcher, as a draining
/// unblock does.
///
/// [`DispatcherConfig::max_unacked_per_key`]: crate::DispatcherConfig::max_unacked_per_key
pub(crate) struct KeySerial {
    max: u32,
    counts: RwLock<ahash::AHashMap<u32, u32>>,
    wake: Arc<WakeState>,
}

impl KeySerial {
    pub fn new(max: u32, wake: Arc<WakeState>) -> Self {
        KeySerial {
            max,
            counts: RwLock::new(ahash::AHashMap::new()),
            wake,
        }
    }

    /// Unacked entries of `hash` now.
    pub fn count(&self, hash: u32) -> u32 {
        match self.counts.read() {
            Ok(c) => c.get(&hash).copied().unwrap_or(0),
            Err(p) => p.into_inner().get(&hash).copied().unwrap_or(0),
        }
    }

    /// Whether `hash` is at its limit (a new entry of it must wait).
    pub fn at_limit(&self, hash: u32) -> bool {
        hash != 0 && self.count(hash) >= self.max
    }

    /// Counts one more sent entry of `hash`.
    pub fn take(&self, hash: u32) {
        if hash == 0 {
            return;
        }
        let mut c = match self.counts.write() {
            Ok(c) => c,
            Err(p) => p.into_inner(),
        };
        *c.entry(hash).or_insert(0) += 1;
    }

    /// One entry of `hash` is no longer unacked (acked, taken back, or its consumer left).
    pub fn release(&self, hash: u32) {
        if hash == 0 {
            return;
        }
        let was = {
            let mut c = match self.counts.write() {
                Ok(c) => c,
                Err(p) => p.into_inner(),
            };
            match c.get_mut(&hash) {
                Some(n) => {
                    let was = *n;
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        c.remove(&hash);
                    }
                    was
                }
                None => 0,
            }
        };
        if was == self.max {
            self.wake.key_released.store(true, Ordering::SeqCst);
            self.wake.waker.wake();
        }
    }
}

/// Every removal from a Key_Shared pending-acks map drops one draining reference and, with
/// key-serial dispatch, one count of its hash.
pub(crate) struct DrainRemoveHandler {
    pub draining: Option<Arc<DrainingHashes<ConsumerId>>>,
    pub key_serial: Option<Arc<KeySerial>>,
}

impl RemoveHandler<PendingPos, ConsumerId> for DrainRemoveHandler {
    fn on_removed(
        &self,
        consumer: ConsumerId,
        pos: PendingPos,
        ack: PendingAck,
        cause: RemovalCause,
        closing: bool,
    ) {
        if ack.hash == 0 {
            return;
        }
        if let Some(ks) = &self.key_serial {
            ks.release(ack.hash);
        }
        if let Some(dr) = &self.draining {
            if let Err(e) = dr.reduce_ref_count(consumer, ack.hash, closing) {
                warn!(consumer = %consumer, ledger = pos.0, entry = pos.1, hash = ack.hash, ?cause, error = %e, "draining reference not dropped");
            }
        }
    }

    fn start_batch(&self) {
        if let Some(dr) = &self.draining {
            dr.start_batch();
        }
    }

    fn end_batch(&self) {
        if let Some(dr) = &self.draining {
            dr.end_batch();
        }
    }
}
