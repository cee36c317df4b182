//! The dispatcher settings every new subscription starts with: Pulsar's broker settings of the
//! same names, with Pulsar's defaults.

use dispatcher::{DispatcherConfig, KeySharedMode};

use super::values::{boolean, count_u32, number, set};

/// Unacked-message limits, Key_Shared look-ahead, unblocking and AUTO_SPLIT selector for every
/// new subscription's dispatcher (`--max-unacked-messages-per-consumer` and the other flags of
/// the broker's `--help`). The defaults are Pulsar's.
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

/// The flags of [`DispatchLimits`] (each absent one keeps its default).
#[derive(clap::Args, Debug)]
pub(super) struct DispatchArgs {
    /// Block a consumer at N unacked messages, resume at half (default 50000; 0 = off).
    #[arg(long, value_name = "N", value_parser = count_u32)]
    max_unacked_messages_per_consumer: Option<u32>,
    /// Stop reading for a subscription at N unacked messages, resume at half (default 200000;
    /// 0 = off).
    #[arg(long, value_name = "N")]
    max_unacked_messages_per_subscription: Option<u64>,
    /// Key_Shared: entries waiting in replay per consumer before reads pause (default 2000;
    /// 0 = the subscription's value).
    #[arg(long, value_name = "N", value_parser = entries)]
    key_shared_look_ahead_msg_in_replay_threshold_per_consumer: Option<i64>,
    /// Key_Shared: entries waiting in replay for the whole subscription (default 20000; 0 = no
    /// cap).
    #[arg(long, value_name = "N", value_parser = entries)]
    key_shared_look_ahead_msg_in_replay_threshold_per_subscription: Option<i64>,
    /// Key_Shared: gather unblocked keys this long before reading, ms, at most 60000
    /// (default 10).
    #[arg(long, value_name = "N", value_parser = unblocking_ms)]
    key_shared_unblocking_interval_ms: Option<u64>,
    /// Key_Shared AUTO_SPLIT: the consistent-hashing ring (default true) or hash ranges split
    /// in halves as consumers join.
    #[arg(long, value_name = "true|false", value_parser = boolean)]
    subscription_key_shared_use_consistent_hashing: Option<bool>,
    /// Points per consumer on the ring, 1 to 10000 (default 100).
    #[arg(long, value_name = "N", value_parser = replica_points)]
    subscription_key_shared_consistent_hashing_replica_points: Option<u32>,
}

impl DispatchArgs {
    /// Puts every given flag into `d`.
    pub(super) fn apply(self, d: &mut DispatchLimits) {
        set(
            &mut d.max_unacked_per_consumer,
            self.max_unacked_messages_per_consumer,
        );
        set(
            &mut d.max_unacked_per_subscription,
            self.max_unacked_messages_per_subscription,
        );
        set(
            &mut d.look_ahead_per_consumer,
            self.key_shared_look_ahead_msg_in_replay_threshold_per_consumer,
        );
        set(
            &mut d.look_ahead_per_subscription,
            self.key_shared_look_ahead_msg_in_replay_threshold_per_subscription,
        );
        set(
            &mut d.unblocking_interval_ms,
            self.key_shared_unblocking_interval_ms,
        );
        set(
            &mut d.key_shared_use_consistent_hashing,
            self.subscription_key_shared_use_consistent_hashing,
        );
        set(
            &mut d.key_shared_replica_points,
            self.subscription_key_shared_consistent_hashing_replica_points,
        );
    }
}

fn entries(v: &str) -> Result<i64, &'static str> {
    match number(v)? {
        n if n <= 1 << 40 => Ok(n as i64),
        _ => Err("must be at most 1099511627776"),
    }
}

fn unblocking_ms(v: &str) -> Result<u64, &'static str> {
    match number(v)? {
        n @ 0..=60_000 => Ok(n),
        _ => Err("must be at most 60000 (one minute)"),
    }
}

fn replica_points(v: &str) -> Result<u32, &'static str> {
    match number(v)? {
        n @ 1..=10_000 => Ok(n as u32),
        _ => Err("must be from 1 to 10000"),
    }
}
