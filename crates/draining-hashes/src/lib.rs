//! Per-subscription refcounts of sticky-key hashes in handover (Pulsar's PIP-379 "draining
//! hashes"), for Key_Shared dispatch.
//!
//! When a hash range moves from consumer A to consumer B, B must not receive a key of that range
//! while A still has earlier messages of the key un-acknowledged. [`DrainingHashes`] records,
//! per hash, the old owner and how many of its pending entries carry the hash:
//!
//! * [`DrainingHashes::add_entry`]: one reference per pending entry of A with the hash (called by
//!   the dispatcher's registration when A loses the range — through
//!   [`recount_entry`](DrainingHashes::recount_entry) when that registration rescans all of A's
//!   pending entries — or for a single send counted on its own);
//! * [`DrainingHashes::reduce_ref_count`]: one reference less (called from A's pending-acks
//!   remove handler); at zero the entry goes and, if it had blocked someone and A is not
//!   closing, the [`UnblockListener`] is told, coalesced inside
//!   [`start_batch`](DrainingHashes::start_batch)/[`end_batch`](DrainingHashes::end_batch) and
//!   always outside the tracker's lock;
//! * [`DrainingHashes::should_block`]: whether a consumer must not get the hash now (counts
//!   blocked attempts; a hash that came back to its draining owner is released lazily);
//! * [`DrainingHashes::check_send`]: the atomic check a pending-acks add handler makes (refuse
//!   a hash draining elsewhere; count a late send of a hash draining on the sender itself);
//! * [`DrainingHashes::recount_entry`]: [`add_entry`](DrainingHashes::add_entry) for a
//!   registration that scans all of the owner's pending entries (re-counts a stale reference);
//! * [`DrainingHashes::force_release`]: drop an entry whatever its count (a draining timeout);
//! * [`DrainingHashes::consumer_stats`], [`DrainingHashes::get`], [`DrainingHashes::clear`],
//!   [`DrainingHashes::stale_references`].
//!
//! An entry removed before its count reaches zero (lazily by its owner, or forced) leaves its
//! count behind as *stale references* of the owner: the owner's next `reduce_ref_count` calls on
//! the hash pay those off first, so a late ack cannot release a newer entry of the same owner and
//! hash (see [`DrainingHashes`]).
//!
//! Invariants: at most one owner per draining hash (a second owner is an
//! [`AddEntryError::OwnedByOther`], never a panic); hash 0 means "no hash" and never drains;
//! an entry exists exactly while its refcount is ≥ 1.
//!
//! Does not: know about positions, selectors or pending acks (it never calls into them), read
//! the clock, spawn threads or decide what to dispatch. Lock order with pending acks:
//! pending-acks → draining-hashes (the remove handler calls in while holding the map's lock).
//!
//! Concurrency: `&self` methods behind one mutex, plus an atomic occupancy bitmap that answers
//! the common "this hash is not draining" without locking. Primitives come from a private
//! `sync` module that switches to loom under the crate's `loom` feature. [`Arc`] is re-exported
//! from it (the standard library's `Arc` in every build, so it coerces to
//! `Arc<dyn UnblockListener>` under loom too).
//!
//! # Example
//!
//! ```
//! use core::sync::atomic::{AtomicUsize, Ordering};
//! use draining_hashes::{AddEntryError, Arc, DrainingHashes, Reduced, UnblockListener};
//!
//! #[derive(Default)]
//! struct Wake(AtomicUsize);
//! impl UnblockListener for Wake {
//!     fn hashes_unblocked(&self) {
//!         self.0.fetch_add(1, Ordering::SeqCst);
//!     }
//! }
//!
//! let wake = Arc::new(Wake::default());
//! let tracker: DrainingHashes<u32> = DrainingHashes::new(wake.clone());
//! const A: u32 = 1;
//! const B: u32 = 2;
//!
//! // Hash 7 moved from A to B while A holds two unacked entries with it.
//! tracker.add_entry(A, 7)?;
//! tracker.add_entry(A, 7)?;
//! assert_eq!(tracker.add_entry(B, 7), Err(AddEntryError::OwnedByOther { owner: A }));
//!
//! // The dispatcher may not send hash 7 to B yet.
//! assert!(tracker.should_block(B, 7));
//! assert!(!tracker.should_block(B, 8));
//!
//! // A acks both entries: the second ack releases the hash and wakes the dispatcher.
//! assert_eq!(tracker.reduce_ref_count(A, 7, false)?, Reduced::Decremented { remaining: 1 });
//! assert_eq!(tracker.reduce_ref_count(A, 7, false)?, Reduced::Released { was_blocking: true });
//! assert_eq!(wake.0.load(Ordering::SeqCst), 1);
//! assert!(!tracker.should_block(B, 7));
//! assert_eq!(tracker.consumer_stats(A).cleared_total, 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod sync;
mod table;
mod tracker;

pub use crate::sync::Arc;
pub use crate::tracker::{
    AddEntryError, ConsumerDrainingStats, DrainingEntry, DrainingHashes, ReduceError, Reduced,
    SendCheck, UnblockListener,
};
