//! Explain and stats: why a key waits, and the counters a broker exports.

use cursor::Position;

use crate::config::ConsumerId;

/// Why entries of a hash are not dispatched right now, from
/// [`Dispatcher::why_blocked`](crate::Dispatcher::why_blocked).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockReason {
    /// The hash moved away from `consumer`, which still has `pending` unacked entries of it.
    DrainingOn {
        /// The old owner, draining the hash.
        consumer: ConsumerId,
        /// Its pending entries of the hash.
        pending: u32,
    },
    /// An earlier entry of the hash waits in replay at `position`; later entries queue behind.
    BehindReplay {
        /// The first replay position with this hash.
        position: Position,
    },
    /// A nacked entry of the hash waits in replay (ordered nack): no entry of the hash goes to
    /// anyone until it is re-sent, not before `until` (it may be later: permits, draining).
    HeldByNack {
        /// The first nacked position of the hash.
        position: Position,
        /// Its not-before time (0 = due now).
        until: u64,
    },
    /// A nacked entry of the hash reached the dead-letter threshold and is parked: the key
    /// waits for [`release_parked`](crate::Dispatcher::release_parked) or
    /// [`dead_letter_parked`](crate::Dispatcher::dead_letter_parked).
    Parked {
        /// The first parked position of the hash.
        position: Position,
    },
    /// The owner has no permits (or is blocked on unacked messages).
    NoPermits {
        /// The owner.
        consumer: ConsumerId,
    },
    /// No consumer covers the hash (exclusive ranges, or no consumer at all).
    UnassignedRange,
    /// Nothing holds the hash back.
    NotBlocked,
}

/// One draining hash of a consumer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DrainingHashStats {
    /// The hash.
    pub hash: u32,
    /// The consumer's pending entries of it.
    pub pending: u32,
    /// How often another consumer was refused the hash.
    pub blocked_attempts: u32,
}

/// Per-consumer figures, from [`Dispatcher::consumer_stats`](crate::Dispatcher::consumer_stats).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerStats {
    /// Consumer id.
    pub id: ConsumerId,
    /// Consumer name.
    pub name: String,
    /// Priority level.
    pub priority: i32,
    /// Permits left (messages; may be negative).
    pub permits: i64,
    /// Permits granted while it was blocked on unacked messages, applied when it resumes.
    pub parked_permits: i64,
    /// Unacked messages charged to it.
    pub unacked: i64,
    /// Entries in its pending acks.
    pub pending_entries: usize,
    /// Blocked on unacked messages.
    pub blocked_on_unacked: bool,
    /// Hashes it drains (Key_Shared), ascending.
    pub draining: Vec<DrainingHashStats>,
}

/// Subscription figures, from [`Dispatcher::stats`](crate::Dispatcher::stats).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DispatcherStats {
    /// Connected consumers.
    pub consumers: usize,
    /// Positions waiting in replay.
    pub replay_size: usize,
    /// Key_Shared look-ahead reads taken past blocked keys.
    pub look_ahead_triggers: u64,
    /// Orphan chunks dispatched (not replayed).
    pub orphan_chunks: u64,
    /// Unblock notifications from the draining tracker.
    pub unblock_notifications: u64,
    /// Draining hashes force-released by the draining timeout (each also a WARN).
    pub draining_force_released: u64,
    /// Hashes draining now.
    pub draining_hashes: usize,
    /// Entries sent so far.
    pub entries_sent: u64,
    /// Messages sent so far.
    pub messages_sent: u64,
    /// Key_Shared read results parked in replay because an earlier position entered replay
    /// while the read was in flight.
    pub read_results_discarded: u64,
    /// Entries refused at send time (draining conflict or closed map) and put back to replay.
    pub send_time_refusals: u64,
    /// Positions requeued by redelivery requests (nacks included).
    pub redeliveries: u64,
    /// Positions nacked through [`handle_nack`](crate::Dispatcher::handle_nack).
    pub nacks: u64,
    /// Positions given back through [`handle_release`](crate::Dispatcher::handle_release).
    pub releases: u64,
    /// Positions handed to the driver as dead letters.
    pub dead_letters: u64,
    /// Nack holds ended because a mark-delete move (skip, expiry, …) dropped the nacked entry.
    pub holds_ended_by_mark_delete: u64,
    /// Hashes held by a nacked entry now (ordered Key_Shared).
    pub held_hashes: usize,
    /// Distinct hashes with a parked entry now.
    pub parked_keys: usize,
    /// Parked entries now.
    pub parked_entries: usize,
    /// Unacked messages of the subscription.
    pub unacked: i64,
    /// Normal reads blocked on the subscription's unacked limit.
    pub blocked_on_unacked: bool,
    /// Live chunk pins (uuid → consumer).
    pub chunk_pins: usize,
    /// Current adaptive read batch.
    pub read_batch: usize,
}
