//! Glue a Key_Shared dispatcher puts between `pending-acks` and `draining-hashes`, shared by the
//! cross-crate loom models (`tests/loom/tests/loom_*.rs`).
//!
//! * [`Gate`]: the pending-acks add handler. It asks the tracker's atomic
//!   [`DrainingHashes::check_send`]: a hash draining on another consumer is refused and recorded
//!   for replay; a late send of a hash draining on the sender itself is counted.
//! * [`Drain`]: the pending-acks remove handler. Every removal drops one draining reference
//!   (`reduce_ref_count(consumer, hash, closing)`), batch brackets forwarded. It runs under the
//!   map's lock: lock order pending-acks → draining-hashes.
//! * [`register_lost`]: draining registration on a join: iterates a consumer's pending acks
//!   under the map's read lock (`for_each`) and adds one reference per entry in a lost range.
//! * [`close_consumer`]: a leave: `for_each_and_close`, every entry goes to replay.
//!
//! Threads, locks and atomics that matter come from loom; the tracker and the maps switch to
//! loom through their `loom` features.
#![allow(dead_code)]

use draining_hashes::{DrainingHashes, SendCheck, UnblockListener};
use loom::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use loom::sync::Mutex;
use pending_acks::{AddHandler, Arc, PendingAck, PendingAcks, RemovalCause, RemoveHandler};
use std::sync::{OnceLock, Weak};

/// Positions: plain `u64` (segment 0).
pub type Pos = u64;
/// Consumer ids.
pub type Cid = u32;

/// The old owner of the hash that moves.
pub const A: Cid = 1;
/// The consumer that joins and gains the hash.
pub const B: Cid = 2;
/// A third consumer.
pub const C: Cid = 3;

/// The dispatcher's wake-up: counts calls and, like a dispatcher re-running its filter, reads
/// the tracker from inside the call (which would deadlock if the tracker still held its lock).
pub struct Wake {
    pub calls: AtomicUsize,
    tracker: OnceLock<Weak<DrainingHashes<Cid>>>,
}

impl UnblockListener for Wake {
    fn hashes_unblocked(&self) {
        if let Some(t) = self.tracker.get().and_then(Weak::upgrade) {
            let _ = t.len();
        }
        self.calls.fetch_add(1, SeqCst);
    }
}

/// Entries refused or returned, in the order they were recorded.
#[derive(Default)]
pub struct Replay(Mutex<Vec<Pos>>);

impl Replay {
    pub fn push(&self, p: Pos) {
        self.0.lock().unwrap().push(p);
    }

    pub fn sorted(&self) -> Vec<Pos> {
        let mut v = self.0.lock().unwrap().clone();
        v.sort_unstable();
        v
    }
}

/// The pending-acks add handler.
pub struct Gate {
    tracker: Arc<DrainingHashes<Cid>>,
    replay: Arc<Replay>,
}

impl AddHandler<Pos, Cid> for Gate {
    fn allow_add(&self, consumer: Cid, pos: Pos, hash: u32) -> bool {
        match self.tracker.check_send(consumer, hash) {
            SendCheck::NotDraining | SendCheck::Counted { .. } => true,
            SendCheck::Blocked { .. } => {
                self.replay.push(pos);
                false
            }
        }
    }
}

/// The pending-acks remove handler.
pub struct Drain {
    tracker: Arc<DrainingHashes<Cid>>,
}

impl RemoveHandler<Pos, Cid> for Drain {
    fn on_removed(
        &self,
        consumer: Cid,
        _pos: Pos,
        ack: PendingAck,
        _c: RemovalCause,
        closing: bool,
    ) {
        // In these models every reduce names the owner: an error is a bug in the glue.
        if let Err(e) = self.tracker.reduce_ref_count(consumer, ack.hash, closing) {
            panic!("reduce_ref_count: {e}");
        }
    }

    fn start_batch(&self) {
        self.tracker.start_batch();
    }

    fn end_batch(&self) {
        self.tracker.end_batch();
    }
}

/// One subscription: the tracker, its listener and the replay set.
pub struct World {
    pub tracker: Arc<DrainingHashes<Cid>>,
    pub wake: Arc<Wake>,
    pub replay: Arc<Replay>,
}

impl World {
    pub fn new() -> Self {
        let wake = Arc::new(Wake {
            calls: AtomicUsize::new(0),
            tracker: OnceLock::new(),
        });
        let tracker = Arc::new(DrainingHashes::new(wake.clone()));
        let _ = wake.tracker.set(Arc::downgrade(&tracker));
        World {
            tracker,
            wake,
            replay: Arc::new(Replay::default()),
        }
    }

    /// A consumer's pending-acks map with the gate and the drain installed.
    pub fn consumer(&self, c: Cid) -> Arc<PendingAcks<Pos, Cid>> {
        let m = Arc::new(PendingAcks::new(c));
        m.set_add_handler(Arc::new(Gate {
            tracker: self.tracker.clone(),
            replay: self.replay.clone(),
        }));
        m.set_remove_handler(Arc::new(Drain {
            tracker: self.tracker.clone(),
        }));
        m
    }

    pub fn notifications(&self) -> usize {
        self.wake.calls.load(SeqCst)
    }

    /// The tracker's refcount for `hash` (0 when not draining).
    pub fn refcount(&self, hash: u32) -> usize {
        self.tracker.get(hash).map_or(0, |e| e.ref_count as usize)
    }
}

/// Draining registration for a consumer that lost the hashes matching `lost`: one reference per
/// pending entry, counted while `for_each` holds the map's read lock, so no ack can slip between
/// seeing an entry and counting it. Returns the number of references added.
pub fn register_lost(
    map: &PendingAcks<Pos, Cid>,
    tracker: &DrainingHashes<Cid>,
    lost: impl Fn(u32) -> bool,
) -> usize {
    let c = map.consumer();
    let mut n = 0;
    map.for_each(|_, ack| {
        if ack.hash != 0 && lost(ack.hash) {
            tracker
                .add_entry(c, ack.hash)
                .unwrap_or_else(|e| panic!("add_entry: {e}"));
            n += 1;
        }
    });
    n
}

/// A consumer leaves: close its map; every pending entry goes to replay.
pub fn close_consumer(map: &PendingAcks<Pos, Cid>, replay: &Replay) -> usize {
    map.for_each_and_close(|p, _| replay.push(p))
}

/// How many of `map`'s pending entries carry `hash`.
pub fn pending_with(map: &PendingAcks<Pos, Cid>, hash: u32) -> usize {
    let mut n = 0;
    map.for_each(|_, a| n += usize::from(a.hash == hash));
    n
}
