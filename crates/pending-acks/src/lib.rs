//! Per-consumer record of entries sent but not yet acknowledged (Pulsar's `PendingAcksMap`).
//!
//! [`PendingAcks`] maps a position to a [`PendingAck`] (remaining unacked messages, sticky-key
//! hash). It is shared between the dispatcher, which adds an entry when it sends it
//! ([`add_if_allowed`](PendingAcks::add_if_allowed), which an [`AddHandler`] may veto and a
//! closed map refuses), and the consumer's ack path, which removes it. Every removal — single,
//! exact-match, up to a position, clear, close — is reported to the [`RemoveHandler`] exactly
//! once with its [`RemovalCause`], bulk removals inside `start_batch`/`end_batch` brackets.
//!
//! Positions are anything that splits into `(segment, offset)` ([`SegmentedPosition`]:
//! `(ledger, entry)` pairs and plain `u64` are built in). Storage follows the access pattern —
//! positions mostly ascend, removals mostly happen at the front: one bucket per segment, a dense
//! ring buffer of packed 8-byte values per bucket (no per-entry key); an ordered ring of
//! `(offset, value)` pairs for buckets whose offsets ascend but are far apart (a Key_Shared
//! consumer's share of a stream), a `BTreeMap` for inserts in the middle of a large bucket.
//! About 8 bytes per entry for ascending positions
//! ([`memory_bytes`](PendingAcks::memory_bytes)); add at the end and remove at the front are
//! O(1) amortised, lookups O(log segments), `remove_all_up_to` O(removed).
//!
//! **Does not**: read the clock, spawn threads, log with a subscriber of its own, know about
//! cursors, selectors or draining (that is the handlers' job), or validate hashes.
//!
//! **Concurrency**: all methods take `&self` behind one read-write lock; handlers and callbacks
//! run inside it and must not call back into the same map (the lock is not re-entrant: that
//! deadlocks). Lock order across crates: pending-acks → draining-hashes. The lock comes from the
//! private `sync` module, which switches to loom under the `loom` feature. Handlers are passed as
//! [`Arc`] — `pending_acks::Arc`, the standard library's `Arc` in every build (also under `loom`).
//!
//! # Example
//!
//! ```
//! use core::sync::atomic::{AtomicUsize, Ordering};
//! use pending_acks::{
//!     AddHandler, AddOutcome, AddRefused, Arc, PendingAck, PendingAcks, RemovalCause,
//!     RemoveHandler,
//! };
//!
//! /// Refuses hash 13 (say, it is draining on another consumer).
//! struct Veto;
//! impl AddHandler<(u64, u64), u32> for Veto {
//!     fn allow_add(&self, _consumer: u32, _pos: (u64, u64), hash: u32) -> bool {
//!         hash != 13
//!     }
//! }
//!
//! /// Counts removals caused by acks and all removals (a draining tracker would go here).
//! #[derive(Default)]
//! struct Counts { acked: AtomicUsize, all: AtomicUsize }
//! impl RemoveHandler<(u64, u64), u32> for Counts {
//!     fn on_removed(&self, _c: u32, _p: (u64, u64), _a: PendingAck, cause: RemovalCause, _closing: bool) {
//!         if cause == RemovalCause::Acked {
//!             self.acked.fetch_add(1, Ordering::Relaxed);
//!         }
//!         self.all.fetch_add(1, Ordering::Relaxed);
//!     }
//! }
//!
//! let map: PendingAcks<(u64, u64), u32> = PendingAcks::new(7);
//! let counts = Arc::new(Counts::default());
//! map.set_add_handler(Arc::new(Veto));
//! map.set_remove_handler(counts.clone());
//!
//! for entry in 0..4 {
//!     assert_eq!(map.add_if_allowed((1, entry), 1, 100 + entry as u32), Ok(AddOutcome::Inserted));
//! }
//! assert_eq!(map.add_if_allowed((1, 9), 1, 13), Err(AddRefused::Vetoed));
//!
//! // A batch entry of 3 messages, 2 acked by batch index: the entry stays, remaining 1.
//! map.add_if_allowed((2, 0), 3, 200).unwrap();
//! assert_eq!(map.update_remaining((2, 0), 2), Some(1));
//!
//! assert_eq!(map.remove((1, 0), RemovalCause::Acked), Some(PendingAck { remaining: 1, hash: 100 }));
//! let mut below = Vec::new();
//! assert_eq!(map.remove_all_up_to((1, 2), RemovalCause::MarkDeleteAdvanced, |p, _| below.push(p)), 2);
//! assert_eq!(below, [(1, 1), (1, 2)]);
//!
//! assert_eq!(map.for_each_and_close(|_, _| {}), 2); // (1, 3) and (2, 0)
//! assert_eq!(map.add_if_allowed((3, 0), 1, 1), Err(AddRefused::Closed));
//! assert!(map.is_empty() && map.is_closed());
//! // Every removal reported once, with its cause.
//! assert_eq!(counts.all.load(Ordering::Relaxed), 5);
//! assert_eq!(counts.acked.load(Ordering::Relaxed), 1);
//! ```

mod map;
mod position;
mod store;
mod sync;
mod types;

pub use crate::map::{AddBatch, PendingAcks};
pub use crate::position::SegmentedPosition;
pub use crate::sync::Arc;
pub use crate::types::{
    AddHandler, AddOutcome, AddRefused, PendingAck, RemainingError, RemovalCause, RemoveHandler,
};

/// The README's example, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
