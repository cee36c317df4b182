//! Shared, Key_Shared (PIP-379) and Failover dispatch for one subscription: a sans-IO core, the one
//! driver that executes its commands, a thin threaded runtime, the sticky-key hash and the
//! consumer selectors.
//!
//! * **Core** ([`Dispatcher`]): single-threaded state machine. Feed it inputs with the current
//!   time (`handle_consumer_added`, `handle_flow`, `handle_read_complete`,
//!   `handle_replay_complete`, `handle_mark_delete_moved`, `handle_redeliver`, `handle_wake`,
//!   `handle_timeout`, …); it answers with [`DispatchCommand`]s (`Read`, `Replay`, `Send`,
//!   `Rewind`, `SetTimer`, `ActiveChanged`). Shared: replay first, adaptive read batch, one priority round robin
//!   (the chunk assignor's) for plain and chunked batches, unacked limits. Key_Shared: selector
//!   per mode, draining registration on every join and leave, the dispatch predicate
//!   ([`Dispatcher::can_dispatch`]) at the read and replay gates and one send-time gate inside
//!   the pending-acks lock, look-ahead, chunked messages that follow their first chunk's
//!   consumer, and a mark-delete hook that keeps draining hashes blocked (Pulsar removes their
//!   pending acks on skip, clear-backlog, expiry and quota eviction, which ends draining early;
//!   [`DispatcherConfig::legacy_mark_delete_cleanup`] restores that for demonstrations).
//! * **Driver** ([`Driver`], module [`driver`]): executes the commands against a [`CursorCell`]
//!   (reads, replays, rewinds, dead-letter acks), hands back sends and timers, and publishes,
//!   runs admin operations and persists the cursor on the caller's cadence. The runtime, the
//!   simulator, the tests and the benchmark all use it.
//! * **Ordered nack** ([`Dispatcher::handle_nack`], [`Dispatcher::handle_release`]): on ordered
//!   Key_Shared a nacked entry goes back to replay with its hash and a not-before time (the
//!   nack's delay or [`DispatcherConfig::nack_backoff`]) and **holds** its key: no entry of the
//!   key goes to anyone until the nacked one is re-sent, while other keys keep flowing (so a
//!   consumer's permits are never spent on a held key). The client gives back later messages of
//!   the key it never handed to its application (`handle_release`: no redelivery counted).
//!   Optional dead-lettering after N deliveries ([`DispatcherConfig::dead_letter`]): `Continue`
//!   (the entry goes to [`Dispatcher::poll_dead_letter`] for the driver to ack) or `Park` (the key
//!   waits for [`Dispatcher::release_parked`] / [`Dispatcher::dead_letter_parked`]). Shared and
//!   out-of-order Key_Shared: a nack is a delayed redelivery, nothing is held.
//! * **Ack path** ([`AckHandle`]): `Send + Sync`, called on the consumer's thread: cursor ack,
//!   then pending-ack removal (even for a position already at or below mark-delete), which may
//!   release a draining hash and call your [`Waker`]. Lock order: cursor (released first) →
//!   pending-acks → draining-hashes.
//! * **Runtime** ([`Runtime`]): one dispatcher thread with a `crossbeam-channel` `select!` loop
//!   around the core and the driver, per-consumer delivery channels, acks on the consumers'
//!   threads ([`ConsumerHandle`]).
//! * **Delayed delivery** ([`DelayedTracker`], [`DispatcherConfig::delayed_delivery`]): an entry
//!   whose `EntryMeta::deliver_at` is in the future is taken out of the read, waits in the
//!   tracker (no permit, no pending ack, no key held) and is replayed when due, on Shared and
//!   Key_Shared alike, as Pulsar 4.x does. On Key_Shared later entries of its key go first; when
//!   due it follows its key's routing and draining, so one consumer per key still holds.
//! * **Explain** ([`Dispatcher::why_blocked`]) and stats ([`Dispatcher::stats`],
//!   [`Dispatcher::consumer_stats`]).
//! * **Sticky key and hash** ([`sticky_key_bytes`], [`key_hash31`], [`slot`]): the key bytes of an
//!   entry in Pulsar's order (ordering key, partition key — base64-decoded when flagged —,
//!   `producer-sequence`, `NONE_KEY`), MurmurHash3 x86_32 with seed 0 masked to 31 bits, and the
//!   two slot rules (`% 65535 + 1` for the ring, `% 65536` with 0 → 1 for the range selectors).
//!   Bit-compatible with Pulsar: the same key lands on the same slot.
//! * **Selectors** ([`StickyKeySelector`]): [`ConsistentHashingSelector`] (Pulsar's default ring,
//!   with the same ring points, name indexes and collision queues), [`AutoSplitSelector`] and
//!   [`ExclusiveRangeSelector`]. Every join and leave returns the [`ImpactedConsumers`]: per
//!   consumer, the hash ranges it lost and gained, which drives draining. [`Assignment`] is a
//!   snapshot for stats; [`diff`] compares two snapshots.
//!
//! Does not: own the cursor or the ledger (the caller does), persist anything (nack holds,
//! redelivery counts, parked keys and the delayed-delivery index live in memory: a restart or
//! the last consumer leaving forgets them; a read delays the entries again), read the clock or
//! spawn threads outside [`Runtime`] (whose clock is wall-clock milliseconds, the unit of
//! deliver-at times), or publish dead letters anywhere (the driver acks them; a broker
//! publishes them).
//! The client crate models the consumer side of ordered nack. Selectors are plain
//! single-threaded values (`Send` when the consumer id is); the dispatcher owns them.
//!
//! Driving the core by hand with the [`Driver`] (what [`Runtime`], the simulator and the tests
//! do): feed an input, then poll the driver until it has nothing left; it runs reads and
//! replays against the cursor and hands back the sends.
//!
//! ```
//! use std::sync::{Arc, Mutex};
//! use cursor::{EntryMeta, InMemoryLedger, Ledger, ManagedCursor, MemoryStore};
//! use dispatcher::{
//!     ConsumerId, ConsumerSpec, CursorCell, Dispatcher, DispatcherConfig, Driver, NoopWaker,
//!     Output,
//! };
//!
//! let mut ledger = InMemoryLedger::new(1_000);
//! for key in ["a", "b", "a"] {
//!     let mut m = EntryMeta::simple(0, 10);
//!     m.ordering_key = Some(key.as_bytes().to_vec());
//!     ledger.append(m);
//! }
//! let cursor = ManagedCursor::new("sub", &ledger, MemoryStore::new());
//! let cell = Arc::new(Mutex::new(CursorCell { cursor, ledger }));
//!
//! let mut d = Dispatcher::new(DispatcherConfig::key_shared(), Arc::new(NoopWaker));
//! let acks = d.ack_handle(cell.clone()); // cloneable, usable from consumer threads
//! let mut driver = Driver::new();
//! d.handle_consumer_added(0, ConsumerSpec::new(1, "consumer-1")).unwrap();
//! d.handle_flow(0, ConsumerId(1), 10);
//!
//! let mut delivered = Vec::new();
//! while let Some(out) = driver.poll(0, &mut d, &cell) {
//!     if let Output::Send { consumer, entries } = out {
//!         for e in entries {
//!             acks.ack(consumer, e.position).unwrap(); // the consumer processed it
//!             delivered.push(e.position);
//!         }
//!     }
//! }
//! assert_eq!(delivered.len(), 3);
//! assert_eq!(d.stats().unacked, 0);
//! ```
//!
//! Ordered nack on Key_Shared: the consumer nacks `a`'s first message with a delay of 50 and
//! gives back the second (never handed to its application); `b` keeps flowing, and `a`'s first
//! message comes back before its second:
//!
//! ```
//! use std::sync::{Arc, Mutex};
//! use cursor::{EntryMeta, InMemoryLedger, Ledger, ManagedCursor, MemoryStore, Position};
//! use dispatcher::{
//!     BlockReason, ConsumerId, ConsumerSpec, CursorCell, Dispatcher, DispatcherConfig, Driver,
//!     NoopWaker, Output,
//! };
//!
//! let mut ledger = InMemoryLedger::new(1_000);
//! for key in ["a", "a", "b"] {
//!     let mut m = EntryMeta::simple(0, 10);
//!     m.ordering_key = Some(key.as_bytes().to_vec());
//!     ledger.append(m);
//! }
//! let cursor = ManagedCursor::new("sub", &ledger, MemoryStore::new());
//! let cell = Mutex::new(CursorCell { cursor, ledger });
//! let mut cfg = DispatcherConfig::key_shared();
//! cfg.min_read_batch = 10;
//! let mut d = Dispatcher::new(cfg, Arc::new(NoopWaker));
//! let mut driver = Driver::new();
//! let c = ConsumerId(1);
//!
//! // Runs the driver; returns the positions sent.
//! let mut run = |d: &mut Dispatcher, now: u64| {
//!     let mut sent = Vec::new();
//!     while let Some(out) = driver.poll(now, d, &cell) {
//!         if let Output::Send { entries, .. } = out {
//!             sent.extend(entries.iter().map(|e| e.position));
//!         }
//!     }
//!     sent
//! };
//! d.handle_consumer_added(0, ConsumerSpec::new(1, "c1")).unwrap();
//! d.handle_flow(0, c, 2);
//! let (a0, a1, b0) = (Position::new(1, 0), Position::new(1, 1), Position::new(1, 2));
//! assert_eq!(run(&mut d, 0), vec![a0, a1]);
//!
//! d.handle_nack(10, c, &[a0], Some(50)); // re-send a0 not before 60, hold key "a"
//! d.handle_release(10, c, &[a1]); // the client gives a1 back
//! d.handle_flow(10, c, 3); // the client returns the permits of a0 and a1, and one more
//! assert_eq!(run(&mut d, 10), vec![b0]); // "b" flows, "a" is held
//! assert_eq!(
//!     d.why_blocked_key(b"a"),
//!     BlockReason::HeldByNack { position: a0, until: 60 }
//! );
//! assert_eq!(d.poll_timeout(), Some(60));
//! d.handle_timeout(60);
//! assert_eq!(run(&mut d, 60), vec![a0, a1]); // the nacked one first
//! assert_eq!(d.redelivery_count(a0), 1);
//! assert_eq!(d.redelivery_count(a1), 0); // a release is not a redelivery
//! ```
//!
//! Selectors on their own:
//!
//! ```
//! use dispatcher::{
//!     sticky_key_bytes, ConsistentHashingSelector, ConsumerInfo, KeyFields, StickyKeySelector,
//! };
//!
//! let mut ring = ConsistentHashingSelector::<u32>::new(100);
//! ring.add_consumer(ConsumerInfo::new(1, "c1")).unwrap();
//! let impacted = ring.add_consumer(ConsumerInfo::new(2, "c2")).unwrap();
//! // c2 only took ranges from c1.
//! assert_eq!(impacted.removed.len(), 1);
//! assert_eq!(impacted.removed[0].0, 1);
//! assert_eq!(impacted.added[0].0, 2);
//!
//! let key = sticky_key_bytes(&KeyFields { ordering_key: Some(b"key-1"), ..Default::default() });
//! assert_eq!(ring.select_key(&key), Some(2)); // slot 11858 → c2's point 11918
//! assert!(impacted.added_contains(2, 11858));
//!
//! // c2 leaves: exactly what it gained goes back to c1.
//! let back = ring.remove_consumer(2);
//! assert_eq!(back.added_ranges(1), impacted.added_ranges(2));
//! ```

mod ack;
mod config;
mod core;
mod delayed;
pub mod driver;
mod error;
mod hash;
mod replay;
mod rng;
mod runtime;
mod selector;
mod shared;
mod sync;

pub use crate::hash::{
    key_hash31, murmur3_x86_32, slot, sticky_key_bytes, HashRange, KeyFields, CONSISTENT_RANGE,
    FULL_RANGE, NONE_KEY,
};
pub use crate::selector::{
    diff, ranges_contain, ring_point, Assignment, AutoSplitSelector, ConsistentHashingSelector,
    ConsumerInfo, ExclusiveRangeSelector, ImpactedConsumers, Ranges, SelectorError,
    StickyKeySelector, DEFAULT_POINTS_PER_CONSUMER,
};

pub use crate::ack::{AckEffect, AckHandle, BatchAck, ConsumerAckHandle, CursorAck, CursorCell};
pub use crate::config::{
    ActivePick, ConsumerId, ConsumerSpec, DeadLetterAction, DeadLetterPolicy, DispatcherConfig,
    FailoverConfig, InvalidConfig, KeySharedConfig, KeySharedMode, NackBackoff, SubscriptionType,
};
pub use crate::core::{BlockReason, ConsumerStats, DispatcherStats, DrainingHashStats};
pub use crate::core::{BoxedSelector, DispatchCommand, DispatchGate, Dispatcher, Verdict};
pub use crate::core::{Closed, ReturnedEntry};
pub use crate::delayed::{DelayedDelivery, DelayedTracker};
pub use crate::driver::{AdminOp, DeliveryExtras, Driver, FlagWaker, Output, Persist};
pub use crate::error::{AckHandleError, AddConsumerError};
pub use crate::runtime::{
    ConsumerHandle, CursorView, Deliveries, Delivery, DeliverySink, Destination, Event, Refused,
    Runtime, RuntimeOptions, WhyBlockedQuery,
};
pub use crate::shared::{NoopWaker, Waker};
