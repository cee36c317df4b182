//! Key_Shared dispatch building blocks: the sticky-key hash and the consumer selectors.
//!
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
//! Does not: dispatch messages, track pending acks or draining hashes, read the clock or spawn
//! threads. Selectors are plain single-threaded values (`Send` when the consumer id is); the
//! dispatcher owns and serialises them.
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
mod error;
mod explain;
mod hash;
mod replay;
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
    ConsumerInfo, ExclusiveRangeSelector, ImpactedConsumers, SelectorError, StickyKeySelector,
    DEFAULT_POINTS_PER_CONSUMER,
};

pub use crate::ack::{AckHandle, AckOutcome, CursorAck, CursorCell};
pub use crate::config::{
    ConsumerId, ConsumerSpec, DispatcherConfig, KeySharedConfig, KeySharedMode, SubscriptionType,
};
pub use crate::core::{BoxedSelector, Command, Dispatcher, Gate, Verdict};
pub use crate::error::{AckError, AddConsumerError};
pub use crate::explain::{BlockReason, ConsumerStats, DispatcherStats, DrainingHashStats};
pub use crate::runtime::{AdminOp, ConsumerHandle, Event, Runtime};
pub use crate::shared::{NoopWaker, Waker};
