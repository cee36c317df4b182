//! Shared-subscription assignment: which consumer gets each entry of a batch, keeping every
//! chunk of a chunked message on one consumer, and never stalling.
//!
//! [`ChunkAssignor::assign`] takes a batch of entries (anything implementing [`AssignEntry`]) and
//! a snapshot of the consumers ([`ConsumerSlot`]: id, permits, priority level) and returns an
//! [`Assignment`]: per consumer, the entries to send in input order, plus the entries to put back
//! for replay, in input order.
//!
//! * Plain entries round robin over consumers with permits, higher priority levels first
//!   ([`PriorityRoundRobin`], Pulsar's `ConsumerPrioritySelector`, also usable on its own).
//!   Each assigned entry decrements exactly its own consumer's permits.
//! * Chunk 0 pins its uuid to the consumer it goes to; later chunks follow the pin (or go back to
//!   replay, in order, while that consumer has no permits); the last chunk releases the pin.
//! * An *orphan chunk* (id > 0 and no pin, for example after a broker restart when chunk 0 was
//!   already acknowledged) is dispatched to the next consumer with a WARN and a counter instead of
//!   being replayed forever. [`OrphanPolicy::Replay`] keeps the old stall
//!   for demonstrations only.
//! * Malformed chunk metadata (`chunk_id >= num_chunks`, `num_chunks == 0`, empty uuid) is logged,
//!   counted and the entry treated as a plain one.
//! * Pins are dropped by [`ChunkAssignor::remove_consumer`] and [`ChunkAssignor::clear`], and are
//!   bounded by count and idle age ([`AssignorConfig`]); a pin to a consumer missing from the
//!   snapshot is dropped as stale.
//!
//! Does not: read the clock (pass `now`), spawn threads, lock (it is `&mut self`), know about
//! cursors, ledgers, acks or the replay set itself (the caller re-queues `replay`), or cap a
//! consumer at anything but the permits in the snapshot. Key_Shared does not use it.
//!
//! ```
//! use chunk_assignor::{AssignEntry, AssignorConfig, ChunkAssignor, ChunkRef, ConsumerSlot};
//!
//! struct Entry { pos: u64, chunk: Option<(&'static str, u32, u32)> }
//! impl AssignEntry for Entry {
//!     fn chunk(&self) -> Option<ChunkRef<'_>> {
//!         self.chunk.map(|(uuid, chunk_id, num_chunks)| ChunkRef { uuid, chunk_id, num_chunks })
//!     }
//! }
//! let e = |pos, chunk| Entry { pos, chunk };
//!
//! let mut assignor = ChunkAssignor::new(AssignorConfig::default());
//! let consumers = [
//!     ConsumerSlot { id: 1u32, permits: 10, priority: 0 },
//!     ConsumerSlot { id: 2u32, permits: 10, priority: 0 },
//! ];
//! let batch = vec![
//!     e(1, Some(("m", 0, 3))), // pins "m" to consumer 1
//!     e(2, None),              // round robin: consumer 2
//!     e(3, Some(("m", 1, 3))), // follows the pin
//!     e(4, None),              // consumer 1
//! ];
//! let out = assignor.assign(0, batch, &consumers);
//! let positions = |id| out.for_consumer(id).iter().map(|e| e.pos).collect::<Vec<_>>();
//! assert_eq!(positions(1), [1, 3, 4]);
//! assert_eq!(positions(2), [2]);
//! assert_eq!(assignor.pinned("m"), Some(1));
//!
//! // The broker restarted: the pin is gone, chunk 0 was acknowledged. The last chunk is an
//! // orphan and is dispatched (with a WARN), not replayed forever.
//! let mut fresh = ChunkAssignor::new(AssignorConfig::default());
//! let out = fresh.assign(1, vec![e(5, Some(("m", 2, 3)))], &consumers);
//! assert!(out.replay.is_empty());
//! assert_eq!(fresh.stats().orphan_chunks, 1);
//! ```

mod assignor;
mod pins;
mod round_robin;
mod types;

#[cfg(test)]
mod tests;

pub use crate::assignor::ChunkAssignor;
pub use crate::round_robin::PriorityRoundRobin;
pub use crate::types::{
    AssignEntry, Assignment, AssignorConfig, AssignorStats, ChunkRef, ConsumerSlot, OrphanPolicy,
};

/// The README's example, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctest;
