//! A durable managed cursor: what a subscription has consumed from a ledger of entries.
//!
//! [`ManagedCursor`] keeps the **mark-delete** position (everything at or below it is consumed),
//! the positions **acked above it** in a compact [`AckSet`] (run-length blocks or bitmaps, sized by
//! the holes, never capped), **batch-index** bitsets for partially acked batches, a **read
//! position**, and backlog counts. Every move of mark-delete is returned as a
//! [`MarkDeleteMove`] carrying its [`MarkDeleteReason`] (ack, cumulative ack, skip, clear-backlog,
//! expiry, backlog quota, reset) and, when entries were passed without an ack, exactly which ones
//! were dropped — so a dispatcher can react per reason and a simulator can account for every
//! message. The [`Ledger`] trait abstracts the log ([`InMemoryLedger`] implements it, and
//! [`SharedLedger`] shares one between several cursors); the
//! [`CursorStore`] trait abstracts durability ([`FileStore`]: an append-only log of checksummed
//! snapshots with compaction, recovering the last good state after a torn write; [`MemoryStore`]).
//!
//! Does not: read the clock (publish times and "now" are passed in), spawn threads, lock (it is
//! `&mut self`; wrap it in a mutex to share it), persist on its own (call
//! [`ManagedCursor::persist`] at the cadence you want), park reads until entries arrive, or
//! notify anyone: the caller forwards the returned moves to its dispatcher hook.
//!
//! ```
//! use cursor::{EntryMeta, InMemoryLedger, Ledger, ManagedCursor, MarkDeleteReason, MemoryStore};
//!
//! let mut ledger = InMemoryLedger::new(1000);
//! let ps: Vec<_> = (0..5).map(|i| ledger.append(EntryMeta::simple(100 + i, 10))).collect();
//! let mut c = ManagedCursor::new("sub", &ledger, MemoryStore::new());
//!
//! // Read everything, ack out of order: mark-delete moves only over the contiguous prefix.
//! assert_eq!(c.read(&ledger, 10).len(), 5);
//! assert!(c.ack(&ledger, ps[1]).unwrap().md_move.is_none());
//! let mv = c.ack(&ledger, ps[0]).unwrap().md_move.unwrap();
//! assert_eq!((mv.to, mv.reason), (ps[1], MarkDeleteReason::Ack));
//! assert!(!c.ack(&ledger, ps[0]).unwrap().newly_acked); // at or below mark-delete: a no-op
//!
//! // Expire what was published before t = 103: entry 2 is dropped without an ack.
//! c.ack(&ledger, ps[3]).unwrap();
//! let mv = c.expire(&ledger, 103).unwrap();
//! assert_eq!((mv.reason, mv.dropped.clone(), mv.to), (MarkDeleteReason::Expiry, vec![ps[2]], ps[3]));
//! assert_eq!(c.backlog(&ledger).entries, 1);
//!
//! // Persist and recover: the read position restarts at the first un-acked entry.
//! c.persist().unwrap();
//! let store = c.store().clone();
//! let c2 = ManagedCursor::recover(&ledger, store).unwrap();
//! assert_eq!((c2.mark_delete_position(), c2.read_position()), (ps[3], ps[4]));
//! ```

mod ackset;
mod batch;
mod codec;
mod cursor;
mod entry;
mod error;
mod ledger;
mod store;

pub use crate::ackset::AckSet;
pub use crate::batch::BatchAcks;
pub use crate::codec::DecodeError;
pub use crate::cursor::{
    AckOutcome, InitialPosition, ManagedCursor, MarkDeleteMove, MarkDeleteReason, RecoveryOutcome,
    ReplayResult,
};
pub use crate::entry::{Backlog, ChunkMeta, Entry, EntryMeta, Position};
pub use crate::error::{CursorError, StoreError};
pub use crate::ledger::{InMemoryLedger, Ledger, MetaSource, SharedLedger};
pub use crate::store::{CursorStore, FileStore, MemoryStore, PersistedState};

/// The README's example, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
