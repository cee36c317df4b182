//! Consumer side of a Shared / Key_Shared subscription, as a sans-IO state machine.
//!
//! A [`Consumer`] models what Pulsar's Java consumer does between the broker connection and
//! the application, plus the client half of ordered nack:
//!
//! * **Receive queue and flow permits.** [`Consumer::connect`] clears the queue and sends
//!   `Flow(receiver_queue_size)`; each message the application takes returns one permit, and a
//!   `Flow(n)` goes out once `n ≥ max(1, size / 2)`. Non-final chunks, discarded chunks,
//!   dropped duplicates and released messages return theirs at once; a completed chunked
//!   message takes one. Messages of an older connection (epoch) return none. A zero-size queue
//!   sends `Flow(1)` when [`Consumer::receive`] finds nothing, plus the debt a batch entry left
//!   (the broker charges its whole message count against the one permit).
//! * **Chunk reassembly** per uuid: in-order append, duplicates dropped, chunk 0 restarting a
//!   uuid, at most `max_pending_chunked_messages` (beyond it the new message is given back,
//!   its later chunks too, for redelivery after the nack delay; or, with auto-ack, the oldest
//!   is evicted and acked), incomplete messages expired and acked, unexpected/orphan chunks
//!   discarded per [`OrphanChunkPolicy`] (default: ack them, which the broker's orphan-chunk
//!   fix relies on).
//! * **Ack timeout** (off by default) in tick-wide buckets: redelivered by id, queued copies
//!   removed.
//! * **Nack tracker** at entry granularity: fixed delay or [`Backoff`] on the redelivery count,
//!   due times truncated to `2^nack_precision_bits` ms, one timer, all due entries (and the
//!   sibling chunks of a chunked message) in one `RedeliverUnacked`.
//! * **Batch-index acks**: one index acked at a time, the entry acked once all are; a nack of
//!   one index redelivers the entry listing the acked indexes, and redelivered copies of acked
//!   indexes are dropped.
//! * **Ordered nack** (`ordered_nack: true`, for Key_Shared): on a nack of message `m` of key
//!   `K`, the client sends `Nack { entries, delay }` at once (the broker holds `K` and re-sends
//!   `m` after the delay), gives back every later message of `K` still in its queue in one
//!   `Release` (their permits return, so the broker's permits keep flowing to other keys),
//!   releases later messages of `K` that still arrive before `m` is re-sent, and never hands
//!   the application a later message of `K` until `m` is acked. A released message blocks later
//!   ones of its key too until it is back. A blocker the broker re-sent to another consumer (the
//!   key moved) ends when a later message of its key arrives beyond the permits granted before
//!   its command: the broker had read it, so it holds nothing back any more. Optionally at most
//!   `max_unacked_per_key` messages of a key are in the application's hands. An ack of a later
//!   message while an earlier one is nacked counts in `out_of_order_acks` (and logs `warn`).
//!
//! Does not: do IO, read the clock (every call takes `now` in ms), spawn threads, batch or
//! delay acks (an `Ack` command is ready at once; consecutive acks not yet polled share one), decompress or decrypt payloads, compute
//! sticky-key hashes (the key bytes are opaque), or depend on the other workspace crates — an
//! adapter maps [`Command`]s to the broker protocol and broker pushes to [`IncomingMessage`]s.
//!
//! # Example
//! ```
//! use client::{Command, Consumer, ConsumerConfig, IncomingMessage, MessageId};
//!
//! let mut c = Consumer::new(ConsumerConfig {
//!     receiver_queue_size: 4,
//!     ordered_nack: true,
//!     nack_delay: 1000,
//!     ..ConsumerConfig::default()
//! })?;
//! let epoch = c.connect(0);
//! assert_eq!(c.poll_command(), Some(Command::Flow(4)));
//!
//! // The broker pushes messages 0..3 of key "k".
//! for e in 0..3 {
//!     let msg = IncomingMessage {
//!         epoch,
//!         id: MessageId::new(1, e),
//!         key: Some(b"k".to_vec()),
//!         ..IncomingMessage::default()
//!     };
//!     c.on_message(0, msg)?;
//! }
//! let m0 = c.receive(0).expect("message 0 is first");
//! c.nack(0, m0.id)?;
//! // The nack goes out at once with its delay, and messages 1 and 2 go back to the broker.
//! assert!(matches!(c.poll_command(), Some(Command::Nack { delay: 768..=1000, .. })));
//! assert!(matches!(c.poll_command(), Some(Command::Release(e)) if e.len() == 2));
//! // Permits: 1 for the message taken + 2 released = 3 ≥ 4 / 2.
//! assert_eq!(c.poll_command(), Some(Command::Flow(3)));
//! // Nothing of key "k" is handed out until message 0 comes back.
//! assert_eq!(c.receive(10), None);
//!
//! // The broker re-sends message 0 (a redelivery), then 1 and 2.
//! for e in 0..3 {
//!     let msg = IncomingMessage {
//!         epoch,
//!         id: MessageId::new(1, e),
//!         key: Some(b"k".to_vec()),
//!         redelivery_count: u32::from(e == 0),
//!         ..IncomingMessage::default()
//!     };
//!     c.on_message(1000, msg)?;
//! }
//! let again = c.receive(1000).expect("message 0 again");
//! assert_eq!((again.id, again.redelivery_count), (MessageId::new(1, 0), 1));
//! assert_eq!(c.receive(1000), None, "1 waits until 0 is acked");
//! c.ack(1000, again.id)?;
//! assert_eq!(c.receive(1000).map(|d| d.id), Some(MessageId::new(1, 1)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod chunks;
mod config;
mod consumer;
mod gate;
mod hash;
mod trackers;
mod types;

#[cfg(test)]
mod tests;

pub use crate::config::{
    Backoff, ConfigError, ConsumerConfig, OrphanChunkPolicy, MIN_ACK_TIMEOUT, MIN_NACK_DELAY,
};
pub use crate::consumer::{AckError, Consumer, MessageError, NackError};
pub use crate::types::{
    BatchInfo, ChunkInfo, ClientStats, Command, Delivered, EntryId, IncomingMessage, MessageId,
    RedeliverEntry,
};
