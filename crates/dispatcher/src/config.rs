//! Configuration, identifiers and the consumer description.

use std::fmt;

use crate::hash::HashRange;

/// A consumer's id within one subscription. Chosen by the caller (e.g. a connection-scoped
/// counter); ids must be unique among the connected consumers of the subscription.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConsumerId(pub u64);

impl fmt::Display for ConsumerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "c{}", self.0)
    }
}

/// Which hash-to-consumer rule a Key_Shared subscription uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeySharedMode {
    /// AUTO_SPLIT with the consistent-hashing ring (Pulsar's default,
    /// `subscriptionKeySharedUseConsistentHashing=true`), `points` per consumer.
    ConsistentHashing {
        /// Ring points per consumer (Pulsar's `subscriptionKeySharedConsistentHashingReplicaPoints`,
        /// default 100; at least 1).
        points: u32,
    },
    /// AUTO_SPLIT with the hash-range auto-split selector
    /// (`subscriptionKeySharedUseConsistentHashing=false`).
    AutoSplit,
    /// STICKY (Pulsar's word; "Exclusive" is a subscription type there): each consumer brings
    /// its own hash ranges ([`ConsumerSpec::ranges`]), which must not overlap.
    Sticky,
}

/// Key_Shared settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeySharedConfig {
    /// Selector mode.
    pub mode: KeySharedMode,
    /// Pulsar's `allowOutOfOrderDelivery` (a consumer's `KeySharedPolicy` setting, taken from
    /// the subscription's first consumer): no draining, replay hashes not ref-counted.
    pub allow_out_of_order: bool,
}

impl Default for KeySharedConfig {
    fn default() -> Self {
        KeySharedConfig {
            mode: KeySharedMode::ConsistentHashing { points: 100 },
            allow_out_of_order: false,
        }
    }
}

/// The subscription type the dispatcher serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubscriptionType {
    /// Any consumer may get any entry (round robin by priority; chunks through the assignor).
    Shared,
    /// Per-key order, one consumer per key at a time (PIP-379 draining).
    KeyShared(KeySharedConfig),
    /// One active consumer gets every entry, in order; the others stand by
    /// ([`crate::Dispatcher::active_consumer`]). Pulsar's Failover.
    Failover(FailoverConfig),
}

/// How a Failover subscription picks its active consumer among the connected ones, as
/// Pulsar's single-active-consumer dispatcher does: the consumers are sorted by priority level
/// (0 first), then by name; only those of the best level are candidates; then
/// [`ActivePick`] chooses one of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FailoverConfig {
    /// The rule among the candidates.
    pub pick: ActivePick,
}

/// The rule that chooses a Failover subscription's active consumer among the candidates
/// (sorted by priority level, then name).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActivePick {
    /// A partition of a partitioned topic: candidate `index % candidates` (so a client's
    /// consumers on the partitions of one topic spread the partitions among themselves).
    Partition(u32),
    /// A topic that is not a partition: the candidate whose point on a ring of consumer
    /// names (100 points each, `key_hash31(name + i)`) follows the topic's hash
    /// ([`FailoverConfig::topic`]).
    TopicHash(u32),
}

impl FailoverConfig {
    /// The rule for partition `index` of a partitioned topic.
    pub fn partition(index: u32) -> Self {
        FailoverConfig {
            pick: ActivePick::Partition(index),
        }
    }

    /// The rule for the topic `name` (its full name, e.g. `persistent://public/default/t`),
    /// when it is not a partition.
    ///
    /// ```
    /// use dispatcher::{ActivePick, FailoverConfig};
    /// let c = FailoverConfig::topic("persistent://public/default/t");
    /// assert!(matches!(c.pick, ActivePick::TopicHash(_)));
    /// ```
    pub fn topic(name: &str) -> Self {
        FailoverConfig {
            pick: ActivePick::TopicHash(crate::hash::key_hash31(name.as_bytes())),
        }
    }
}

/// Dispatcher configuration. Defaults follow Pulsar's broker defaults (its ServiceConfiguration).
///
/// Time values are in the caller's time unit, the same unit as the `now` passed to every
/// `handle_*` call (milliseconds in the runtime and the tests).
#[derive(Clone, Debug)]
pub struct DispatcherConfig {
    /// Shared or Key_Shared.
    pub subscription: SubscriptionType,
    /// Smallest read batch (entries); the batch doubles on every successful read. Pulsar's
    /// `dispatcherMinReadBatchSize` (default 1; at least 1).
    pub min_read_batch: usize,
    /// Largest read batch (entries). Pulsar's `dispatcherMaxReadBatchSize` (default 100; at
    /// least `min_read_batch`).
    pub max_read_batch: usize,
    /// Shared: at most this many entries go to one consumer per round-robin turn. Pulsar's
    /// `dispatcherMaxRoundRobinBatchSize` (default 20; at least 1).
    pub max_round_robin_batch: usize,
    /// Block a consumer at this many unacked messages, resume at half (0 = off). Pulsar's
    /// `maxUnackedMessagesPerConsumer` (default 50,000).
    pub max_unacked_per_consumer: u32,
    /// Block the subscription's normal reads at this many unacked messages, resume at half
    /// (0 = off). Pulsar's `maxUnackedMessagesPerSubscription` (default 200,000).
    pub max_unacked_per_subscription: u64,
    /// Key_Shared look-ahead: replay entries allowed per consumer (× consumers); ≤ 0 uses the
    /// per-subscription value. Pulsar's `keySharedLookAheadMsgInReplayThresholdPerConsumer`
    /// (default 2,000).
    pub look_ahead_per_consumer: i64,
    /// Key_Shared look-ahead cap for the whole subscription (≤ 0 = no cap). Pulsar's
    /// `keySharedLookAheadMsgInReplayThresholdPerSubscription` (default 20,000).
    pub look_ahead_per_subscription: i64,
    /// Key_Shared: unblock notifications are coalesced over this interval before reading.
    /// Pulsar's `keySharedUnblockingIntervalMs` (default 10 ms).
    pub unblocking_interval: u64,
    /// LEGACY, only to demonstrate Pulsar's mark-delete cleanup bug (no Pulsar setting: it
    /// is Pulsar's behaviour): on Key_Shared, a mark-delete move by skip,
    /// clear-backlog, expiry or quota eviction also removes pending acks at or below the new
    /// mark-delete, which releases draining hashes early and breaks per-key order.
    pub legacy_mark_delete_cleanup: bool,
    /// LEGACY, only to show that the simulator catches a regression this crate once had (no
    /// Pulsar setting): on Key_Shared, input that arrives while a replay read is in flight (a
    /// redelivery, a flow) does not stop that read's completion from settling the replay loop,
    /// so an entry redelivered during the read can wait forever once the cursor is at its end
    /// (Pulsar's `testLookAheadNotEngagedWhenCursorHasNoMoreEntries`, apache/pulsar#21554).
    pub legacy_replay_settle: bool,
    /// Key_Shared: force-release a draining hash that has blocked dispatch for this long
    /// (`None` = never, the default). Trades per-key order for liveness when an owner never
    /// acks; every release is a WARN and counts in [`crate::DispatcherStats`]. Pulsar has no
    /// such setting (a draining hash waits for its owner however long).
    pub draining_timeout: Option<u64>,
    /// Shared chunk assignor settings (pins and the orphan-chunk policy). Pulsar has no
    /// settings for these: its pins are unbounded and an orphan chunk is replayed forever.
    pub assignor: chunk_assignor::AssignorConfig,
    /// Nack redelivery delay when a nack carries none
    /// ([`Dispatcher::handle_nack`](crate::Dispatcher::handle_nack) with `delay: None`).
    /// Default: no delay. In Pulsar this is the client's `negativeAckRedeliveryDelay` /
    /// `negativeAckRedeliveryBackoff`, not a broker setting.
    pub nack_backoff: NackBackoff,
    /// Dead-letter policy for nacked entries (`None` = off, the default). In Pulsar this is the
    /// client's `DeadLetterPolicy` (`maxRedeliverCount`), not a broker setting.
    pub dead_letter: Option<DeadLetterPolicy>,
    /// Key_Shared key-serial dispatch: at most this many entries of one key are sent and
    /// unacknowledged at a time (0 = off, the default; no Pulsar setting). A later entry of the
    /// key waits, in order, until an earlier one is acked, nacked or given back. With 1 a
    /// stock client that nacks a message gets it again before the next message of its key:
    /// full per-key order on nack, at the price of one ack round trip per message and key.
    /// Continuation chunks of a chunked message count but are not held (the client acks a
    /// chunked message only once it has all of it).
    pub max_unacked_per_key: u32,
    /// First wait of the read loop's back-off (after a read that dispatched nothing, or a
    /// failed read: [`Dispatcher::handle_read_failed`](crate::Dispatcher::handle_read_failed)),
    /// in the caller's time unit; it doubles per further step up to
    /// [`read_backoff_max`](Self::read_backoff_max). Default 1 (0 counts as 1).
    pub read_backoff_initial: u64,
    /// Largest back-off step. Default 10 (less than the initial step counts as the initial).
    pub read_backoff_max: u64,
    /// Up to this much is added to each back-off step, drawn from a SplitMix64 seeded with
    /// [`read_backoff_seed`](Self::read_backoff_seed) (the core has no other randomness).
    /// Default 0: no jitter, today's fixed steps.
    pub read_backoff_jitter: u64,
    /// Seed of the back-off jitter (so a run is reproducible).
    pub read_backoff_seed: u64,
    /// Delayed delivery: an entry whose [`EntryMeta::deliver_at`](cursor::EntryMeta) is in the
    /// future is not dispatched before it, on Shared and on Key_Shared (as Pulsar 4.x does;
    /// see [`DelayedTracker`](crate::DelayedTracker)). Default: on, tick 1000, strict.
    pub delayed_delivery: crate::DelayedDelivery,
}

/// How long a nacked entry waits before it is re-sent, by its redelivery count (1 on the first
/// nack). Times are in the caller's time unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NackBackoff {
    /// Always `delay`.
    Fixed {
        /// The delay.
        delay: u64,
    },
    /// `base × 2^(count − 1)`, at most `max`.
    Exponential {
        /// Delay of the first redelivery.
        base: u64,
        /// Cap.
        max: u64,
    },
}

impl NackBackoff {
    /// The delay for the `count`-th redelivery (count 0 is treated as 1).
    pub fn delay(&self, count: u32) -> u64 {
        match *self {
            NackBackoff::Fixed { delay } => delay,
            NackBackoff::Exponential { base, max } => {
                let shift = count.saturating_sub(1).min(63);
                base.saturating_mul(1u64 << shift).min(max)
            }
        }
    }
}

impl Default for NackBackoff {
    fn default() -> Self {
        NackBackoff::Fixed { delay: 0 }
    }
}

/// What happens to a nacked entry that reached the dead-letter threshold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeadLetterAction {
    /// Hand it to the driver ([`Dispatcher::poll_dead_letter`](crate::Dispatcher::poll_dead_letter)),
    /// which publishes it to a dead-letter topic and acks it on the cursor; the key keeps
    /// flowing without it (a recorded gap in the key's sequence).
    Continue,
    /// Keep it in replay and hold its key until an operator calls
    /// [`release_parked`](crate::Dispatcher::release_parked) (replay it) or
    /// [`dead_letter_parked`](crate::Dispatcher::dead_letter_parked).
    Park,
}

/// Dead-letter policy: an entry nacked after `max_deliveries` deliveries is not redelivered
/// but handled per `action`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeadLetterPolicy {
    /// Deliveries after which a nack dead-letters the entry (1 = the first nack already does;
    /// 0 behaves as 1).
    pub max_deliveries: u32,
    /// What happens to the entry and its key.
    pub action: DeadLetterAction,
}

/// A [`DispatcherConfig`] the dispatcher cannot run with.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidConfig {
    /// A setting that must be at least 1 is 0.
    #[error("`{0}` must be at least 1")]
    Zero(&'static str),
    /// `min_read_batch` above `max_read_batch`.
    #[error("min_read_batch ({min}) is above max_read_batch ({max})")]
    ReadBatchOrder {
        /// The minimum given.
        min: usize,
        /// The maximum given.
        max: usize,
    },
}

impl DispatcherConfig {
    /// Checks the settings that have a valid range: `points`, the read and round-robin batch
    /// sizes, and `min_read_batch <= max_read_batch`. The runtime and the broker call it before
    /// starting a dispatcher.
    ///
    /// ```
    /// let mut c = dispatcher::DispatcherConfig::shared();
    /// assert!(c.validate().is_ok());
    /// c.max_read_batch = 0;
    /// assert!(c.validate().is_err());
    /// ```
    pub fn validate(&self) -> Result<(), InvalidConfig> {
        if let SubscriptionType::KeyShared(KeySharedConfig {
            mode: KeySharedMode::ConsistentHashing { points: 0 },
            ..
        }) = self.subscription
        {
            return Err(InvalidConfig::Zero("points"));
        }
        for (name, v) in [
            ("min_read_batch", self.min_read_batch),
            ("max_read_batch", self.max_read_batch),
            ("max_round_robin_batch", self.max_round_robin_batch),
        ] {
            if v == 0 {
                return Err(InvalidConfig::Zero(name));
            }
        }
        if self.min_read_batch > self.max_read_batch {
            return Err(InvalidConfig::ReadBatchOrder {
                min: self.min_read_batch,
                max: self.max_read_batch,
            });
        }
        Ok(())
    }

    /// Pulsar's defaults for the given subscription type.
    pub fn new(subscription: SubscriptionType) -> Self {
        DispatcherConfig {
            subscription,
            min_read_batch: 1,
            max_read_batch: 100,
            max_round_robin_batch: 20,
            max_unacked_per_consumer: 50_000,
            max_unacked_per_subscription: 200_000,
            look_ahead_per_consumer: 2_000,
            look_ahead_per_subscription: 20_000,
            unblocking_interval: 10,
            legacy_mark_delete_cleanup: false,
            legacy_replay_settle: false,
            draining_timeout: None,
            assignor: chunk_assignor::AssignorConfig::default(),
            nack_backoff: NackBackoff::default(),
            dead_letter: None,
            max_unacked_per_key: 0,
            read_backoff_initial: 1,
            read_backoff_max: 10,
            read_backoff_jitter: 0,
            read_backoff_seed: 0,
            delayed_delivery: crate::DelayedDelivery::default(),
        }
    }

    /// Defaults for Shared.
    pub fn shared() -> Self {
        Self::new(SubscriptionType::Shared)
    }

    /// Defaults for Failover with `failover`'s rule for the active consumer.
    pub fn failover(failover: FailoverConfig) -> Self {
        Self::new(SubscriptionType::Failover(failover))
    }

    /// Defaults for Key_Shared with the consistent-hashing ring (100 points), ordered.
    pub fn key_shared() -> Self {
        Self::new(SubscriptionType::KeyShared(KeySharedConfig::default()))
    }
}

/// A consumer joining the subscription.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerSpec {
    /// Unique id among connected consumers.
    pub id: ConsumerId,
    /// Consumer name (the consistent-hashing ring places points by name).
    pub name: String,
    /// Priority level: lower number = higher priority (Shared round robin).
    pub priority: i32,
    /// Key_Shared STICKY mode only: the hash ranges this consumer asks for.
    pub ranges: Vec<HashRange>,
    /// The Key_Shared settings this consumer subscribes with (a SUBSCRIBE's `KeySharedMeta`),
    /// see [`with_key_shared`](Self::with_key_shared); `None`: whatever the subscription has.
    pub key_shared: Option<KeySharedConfig>,
}

impl ConsumerSpec {
    /// A consumer with priority 0 and no ranges.
    pub fn new(id: u64, name: impl Into<String>) -> Self {
        ConsumerSpec {
            id: ConsumerId(id),
            name: name.into(),
            key_shared: None,
            priority: 0,
            ranges: Vec::new(),
        }
    }

    /// Sets the priority level.
    pub fn with_priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// Sets the STICKY-mode ranges.
    pub fn with_ranges(mut self, ranges: Vec<HashRange>) -> Self {
        self.ranges = ranges;
        self
    }

    /// Subscribes with these Key_Shared settings (Pulsar's `KeySharedPolicy`). On a Key_Shared
    /// dispatcher with no consumer connected, the first consumer's settings are adopted (mode
    /// and allow-out-of-order; the selector is rebuilt for the mode); while consumers are
    /// connected, a consumer asking for another **mode** is refused with
    /// [`AddConsumerError::ModeMismatch`](crate::AddConsumerError::ModeMismatch) and its
    /// allow-out-of-order is ignored (the subscription's holds, as in Pulsar). Ignored on a
    /// Shared dispatcher (the shell checks the subscription type).
    ///
    /// ```
    /// use dispatcher::{ConsumerSpec, KeySharedConfig, KeySharedMode};
    /// let spec = ConsumerSpec::new(1, "c1").with_key_shared(KeySharedConfig {
    ///     mode: KeySharedMode::AutoSplit,
    ///     allow_out_of_order: true,
    /// });
    /// assert!(spec.key_shared.is_some());
    /// ```
    pub fn with_key_shared(mut self, key_shared: KeySharedConfig) -> Self {
        self.key_shared = Some(key_shared);
        self
    }
}
