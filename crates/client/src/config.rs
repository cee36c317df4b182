//! Consumer configuration, validated once by [`Consumer::new`](crate::Consumer::new).

/// Smallest accepted ack timeout, in ms (Pulsar's minimum).
pub const MIN_ACK_TIMEOUT: u64 = 1000;
/// Smallest accepted nack delay, in ms (Pulsar's minimum).
pub const MIN_NACK_DELAY: u64 = 100;

/// Redelivery delay as a function of a message's redelivery count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backoff {
    /// Always the same delay, in ms.
    Fixed(u64),
    /// `min * multiplier^redelivery_count`, capped at `max` (all in ms).
    Exponential {
        /// Delay of the first redelivery.
        min: u64,
        /// Upper bound of the delay.
        max: u64,
        /// Growth factor per redelivery (at least 1).
        multiplier: u32,
    },
}

impl Backoff {
    /// The delay in ms for a message delivered `redelivery_count` times before.
    ///
    /// ```
    /// use client::Backoff;
    /// let b = Backoff::Exponential { min: 100, max: 1000, multiplier: 2 };
    /// assert_eq!([0, 1, 2, 3, 4, 60].map(|n| b.delay(n)), [100, 200, 400, 800, 1000, 1000]);
    /// let flat = Backoff::Exponential { min: 100, max: 1000, multiplier: 1 };
    /// assert_eq!(flat.delay(u32::MAX), 100);
    /// ```
    pub fn delay(&self, redelivery_count: u32) -> u64 {
        match *self {
            Backoff::Fixed(d) => d,
            Backoff::Exponential {
                min,
                max,
                multiplier,
            } => {
                let mut d = min;
                for _ in 0..redelivery_count {
                    // Bounded: with a multiplier of at least 2 this reaches `max` (or saturates)
                    // within 64 steps, whatever count the broker sent.
                    if d >= max || multiplier <= 1 {
                        break;
                    }
                    d = d.saturating_mul(u64::from(multiplier));
                }
                d.min(max)
            }
        }
    }
}

/// What to do with an unexpected chunk: a chunk with `chunk_id > 0` and no reassembly context
/// (an orphan, e.g. its chunk 0 was acked before a broker restart), or a chunk that skips ahead.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OrphanChunkPolicy {
    /// Discard the chunk and ack it at once, together with the chunks of any reassembly it
    /// broke. The default: the message can never be completed on this connection, and leaving
    /// the chunk unacked either pins the subscription's mark-delete forever or (with an ack
    /// timeout) replays it forever. The broker's orphan-chunk fix relies on the client doing
    /// this. The loss is counted (`unexpected_chunks`) and logged with `warn`.
    #[default]
    Ack,
    /// Pulsar's client: ack the chunk only if it is older than the incomplete-chunk expiry
    /// (`now > publish_time + expiry`); otherwise track it in the ack-timeout tracker
    /// (redelivered after the ack timeout, or left unacked when the ack timeout is off).
    /// Chunks of a broken reassembly are left unacked.
    Pulsar,
}

/// Consumer settings. `ConsumerConfig::default()` is Pulsar's client defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerConfig {
    /// Receive queue size: the initial `Flow` on connect; permits are returned in a `Flow` once
    /// at least half of it accumulated. `0` is a zero-queue consumer: one permit out at a time,
    /// sent by a [`receive`](crate::Consumer::receive) that finds the queue empty (`Flow(1)`,
    /// plus the debt a batch entry left: the broker charges its whole message count). Default
    /// 1000.
    pub receiver_queue_size: u32,
    /// Most chunked messages reassembled at once. When it is reached, a new chunked message is
    /// given back (see `auto_ack_oldest_chunked_on_queue_full`). Default 10.
    pub max_pending_chunked_messages: usize,
    /// When `max_pending_chunked_messages` are being reassembled: evict the oldest and ack its
    /// chunks (true, Pulsar's option; the message is lost), or give the new one back (false,
    /// the default): its chunk 0, and its later chunks as they arrive, are redelivered after the
    /// nack delay, while the messages already in reassembly keep their room and complete.
    pub auto_ack_oldest_chunked_on_queue_full: bool,
    /// Drop (and ack) a chunked message still incomplete this many ms after its first chunk
    /// arrived; `None` never expires. Default `Some(60_000)`.
    pub expire_incomplete_chunked_after: Option<u64>,
    /// Redeliver a message handed to the application but not acked within this many ms
    /// (rounded up to a multiple of `ack_timeout_tick`). `None` (default) is off; at least 1000.
    pub ack_timeout: Option<u64>,
    /// Bucket width of the ack-timeout tracker, ms. Default 1000.
    pub ack_timeout_tick: u64,
    /// Nack redelivery delay, ms, when `nack_backoff` is `None`. Default 60 000, at least 100.
    pub nack_delay: u64,
    /// Delay from the message's redelivery count instead of `nack_delay`.
    pub nack_backoff: Option<Backoff>,
    /// Nack due times are truncated to a multiple of `2^bits` ms (so a message may come back up
    /// to that much early). Default 8 (256 ms); at most 32.
    pub nack_precision_bits: u32,
    /// `false` (default): Pulsar's behaviour, no ordering after a nack. `true`: the key gate
    /// (see the crate docs): later messages of a nacked key are released to the broker and
    /// never handed out before the nacked message is acked.
    pub ordered_nack: bool,
    /// At most this many un-acked messages per key in the application's hands; later ones wait
    /// in the queue without blocking other keys. `None` (default) is unlimited; not 0.
    pub max_unacked_per_key: Option<u32>,
    /// What to do with an unexpected chunk. Default [`OrphanChunkPolicy::Ack`].
    pub orphan_chunk_policy: OrphanChunkPolicy,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        ConsumerConfig {
            receiver_queue_size: 1000,
            max_pending_chunked_messages: 10,
            auto_ack_oldest_chunked_on_queue_full: false,
            expire_incomplete_chunked_after: Some(60_000),
            ack_timeout: None,
            ack_timeout_tick: 1000,
            nack_delay: 60_000,
            nack_backoff: None,
            nack_precision_bits: 8,
            ordered_nack: false,
            max_unacked_per_key: None,
            orphan_chunk_policy: OrphanChunkPolicy::Ack,
        }
    }
}

/// Why [`Consumer::new`](crate::Consumer::new) refused a configuration.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `ack_timeout` is below [`MIN_ACK_TIMEOUT`].
    #[error("ack timeout {0} ms is below the minimum of 1000 ms")]
    AckTimeoutTooSmall(u64),
    /// `ack_timeout_tick` is 0.
    #[error("ack timeout tick must be at least 1 ms")]
    ZeroAckTimeoutTick,
    /// `nack_delay` is below [`MIN_NACK_DELAY`].
    #[error("nack delay {0} ms is below the minimum of 100 ms")]
    NackDelayTooSmall(u64),
    /// `nack_backoff` has `min > max`, `min` below [`MIN_NACK_DELAY`] or a zero multiplier.
    #[error("nack backoff is invalid: {0}")]
    InvalidBackoff(&'static str),
    /// `nack_precision_bits` is above 32.
    #[error("nack precision bits {0} is above 32")]
    PrecisionBitsTooLarge(u32),
    /// `max_pending_chunked_messages` is 0.
    #[error("max pending chunked messages must be at least 1")]
    ZeroMaxPendingChunked,
    /// `max_unacked_per_key` is `Some(0)`, which would hold every key forever.
    #[error("max unacked per key must be at least 1")]
    ZeroMaxUnackedPerKey,
}

impl ConsumerConfig {
    /// Checks the settings; [`Consumer::new`](crate::Consumer::new) calls it.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(t) = self.ack_timeout {
            if t < MIN_ACK_TIMEOUT {
                return Err(ConfigError::AckTimeoutTooSmall(t));
            }
        }
        if self.ack_timeout_tick == 0 {
            return Err(ConfigError::ZeroAckTimeoutTick);
        }
        if self.nack_delay < MIN_NACK_DELAY {
            return Err(ConfigError::NackDelayTooSmall(self.nack_delay));
        }
        match self.nack_backoff {
            Some(Backoff::Fixed(d)) if d < MIN_NACK_DELAY => {
                return Err(ConfigError::InvalidBackoff("fixed delay below 100 ms"))
            }
            Some(Backoff::Exponential {
                min,
                max,
                multiplier,
            }) => {
                if min < MIN_NACK_DELAY {
                    return Err(ConfigError::InvalidBackoff("min below 100 ms"));
                }
                if min > max {
                    return Err(ConfigError::InvalidBackoff("min above max"));
                }
                if multiplier == 0 {
                    return Err(ConfigError::InvalidBackoff("zero multiplier"));
                }
            }
            _ => {}
        }
        if self.nack_precision_bits > 32 {
            return Err(ConfigError::PrecisionBitsTooLarge(self.nack_precision_bits));
        }
        if self.max_pending_chunked_messages == 0 {
            return Err(ConfigError::ZeroMaxPendingChunked);
        }
        if self.max_unacked_per_key == Some(0) {
            return Err(ConfigError::ZeroMaxUnackedPerKey);
        }
        Ok(())
    }

    /// Nack delay for a message delivered `redelivery_count` times before.
    pub(crate) fn nack_delay_for(&self, redelivery_count: u32) -> u64 {
        match self.nack_backoff {
            Some(b) => b.delay(redelivery_count),
            None => self.nack_delay,
        }
    }

    /// `t` truncated to the nack precision.
    pub(crate) fn truncate(&self, t: u64) -> u64 {
        t & !((1u64 << self.nack_precision_bits) - 1)
    }
}
