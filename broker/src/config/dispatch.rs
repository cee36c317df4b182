//! The dispatcher settings every new subscription starts with: Pulsar's broker settings of the
//! same names, with Pulsar's defaults.

use dispatcher::{DispatcherConfig, KeySharedMode};

/// Unacked-message limits, Key_Shared look-ahead, unblocking and AUTO_SPLIT selector for every
/// new subscription's dispatcher (`--max-unacked-messages-per-consumer` and the other flags of
/// [`DispatchLimits::FLAGS`]). The defaults are Pulsar's.
///
/// ```
/// let cfg = broker::BrokerConfig::parse_args(["--max-unacked-messages-per-consumer", "100"]).unwrap();
/// assert_eq!(cfg.dispatch.max_unacked_per_consumer, 100);
/// assert_eq!(cfg.dispatch.max_unacked_per_subscription, 200_000);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DispatchLimits {
    /// Block a consumer at this many unacked messages, resume at half; 0 = off
    /// (`--max-unacked-messages-per-consumer`, Pulsar's `maxUnackedMessagesPerConsumer`,
    /// default 50,000).
    pub max_unacked_per_consumer: u32,
    /// Stop reading for a subscription at this many unacked messages, resume at half; 0 = off
    /// (`--max-unacked-messages-per-subscription`, Pulsar's
    /// `maxUnackedMessagesPerSubscription`, default 200,000).
    pub max_unacked_per_subscription: u64,
    /// Key_Shared: replay entries allowed per consumer before reads pause; 0 uses the
    /// subscription's value (`--key-shared-look-ahead-msg-in-replay-threshold-per-consumer`,
    /// Pulsar's `keySharedLookAheadMsgInReplayThresholdPerConsumer`, default 2,000).
    pub look_ahead_per_consumer: i64,
    /// Key_Shared: replay entries allowed for the whole subscription; 0 = no cap
    /// (`--key-shared-look-ahead-msg-in-replay-threshold-per-subscription`, Pulsar's
    /// `keySharedLookAheadMsgInReplayThresholdPerSubscription`, default 20,000).
    pub look_ahead_per_subscription: i64,
    /// Key_Shared: unblock notices are gathered this long before a read, ms
    /// (`--key-shared-unblocking-interval-ms`, Pulsar's `keySharedUnblockingIntervalMs`,
    /// default 10).
    pub unblocking_interval_ms: u64,
    /// Key_Shared AUTO_SPLIT: the consistent-hashing ring (`true`) or hash ranges split in
    /// halves as consumers join (`--subscription-key-shared-use-consistent-hashing`, Pulsar's
    /// `subscriptionKeySharedUseConsistentHashing`, default true).
    pub key_shared_use_consistent_hashing: bool,
    /// Key_Shared AUTO_SPLIT on the ring: points per consumer
    /// (`--subscription-key-shared-consistent-hashing-replica-points`, Pulsar's
    /// `subscriptionKeySharedConsistentHashingReplicaPoints`, default 100).
    pub key_shared_replica_points: u32,
}

impl Default for DispatchLimits {
    fn default() -> Self {
        let d = DispatcherConfig::shared();
        DispatchLimits {
            max_unacked_per_consumer: d.max_unacked_per_consumer,
            max_unacked_per_subscription: d.max_unacked_per_subscription,
            look_ahead_per_consumer: d.look_ahead_per_consumer,
            look_ahead_per_subscription: d.look_ahead_per_subscription,
            unblocking_interval_ms: d.unblocking_interval,
            key_shared_use_consistent_hashing: true,
            key_shared_replica_points: match dispatcher::KeySharedConfig::default().mode {
                KeySharedMode::ConsistentHashing { points } => points,
                _ => 100,
            },
        }
    }
}

impl DispatchLimits {
    /// The flags that set these limits (each takes a number).
    pub const FLAGS: &'static [&'static str] = &[
        "--max-unacked-messages-per-consumer",
        "--max-unacked-messages-per-subscription",
        "--key-shared-look-ahead-msg-in-replay-threshold-per-consumer",
        "--key-shared-look-ahead-msg-in-replay-threshold-per-subscription",
        "--key-shared-unblocking-interval-ms",
        "--subscription-key-shared-use-consistent-hashing",
        "--subscription-key-shared-consistent-hashing-replica-points",
    ];

    /// Sets the flag `name` (one of [`FLAGS`](Self::FLAGS)) to `value`; `Err` says why the
    /// value is refused.
    pub(super) fn set(&mut self, name: &str, value: &str) -> Result<(), &'static str> {
        let number = |v: &str| v.parse::<u64>().map_err(|_| "not a number (0 or more)");
        let entries = |v: &str| match number(v)? {
            n if n <= 1 << 40 => Ok(n as i64),
            _ => Err("must be at most 1099511627776"),
        };
        match name {
            "--max-unacked-messages-per-consumer" => {
                self.max_unacked_per_consumer =
                    u32::try_from(number(value)?).map_err(|_| "must be at most 4294967295")?;
            }
            "--max-unacked-messages-per-subscription" => {
                self.max_unacked_per_subscription = number(value)?;
            }
            "--key-shared-look-ahead-msg-in-replay-threshold-per-consumer" => {
                self.look_ahead_per_consumer = entries(value)?;
            }
            "--key-shared-look-ahead-msg-in-replay-threshold-per-subscription" => {
                self.look_ahead_per_subscription = entries(value)?;
            }
            "--subscription-key-shared-use-consistent-hashing" => {
                self.key_shared_use_consistent_hashing = match value {
                    "true" => true,
                    "false" => false,
                    _ => return Err("must be `true` or `false`"),
                }
            }
            "--subscription-key-shared-consistent-hashing-replica-points" => {
                self.key_shared_replica_points = match number(value)? {
                    n @ 1..=10_000 => n as u32,
                    _ => return Err("must be from 1 to 10000"),
                }
            }
            _ => match number(value)? {
                n if n <= 60_000 => self.unblocking_interval_ms = n,
                _ => return Err("must be at most 60000 (one minute)"),
            },
        }
        Ok(())
    }

    /// What a Key_Shared AUTO_SPLIT subscription uses: the ring with its points, or hash-range
    /// auto-split.
    pub fn auto_split_mode(&self) -> KeySharedMode {
        match self.key_shared_use_consistent_hashing {
            true => KeySharedMode::ConsistentHashing {
                points: self.key_shared_replica_points,
            },
            false => KeySharedMode::AutoSplit,
        }
    }

    /// Puts these limits into a subscription's dispatcher configuration.
    pub(crate) fn apply(&self, cfg: &mut DispatcherConfig) {
        cfg.max_unacked_per_consumer = self.max_unacked_per_consumer;
        cfg.max_unacked_per_subscription = self.max_unacked_per_subscription;
        cfg.look_ahead_per_consumer = self.look_ahead_per_consumer;
        cfg.look_ahead_per_subscription = self.look_ahead_per_subscription;
        cfg.unblocking_interval = self.unblocking_interval_ms;
    }
}
