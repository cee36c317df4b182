//! The broker's settings and its command line.

use std::net::SocketAddr;
use std::path::PathBuf;

mod dispatch;
#[cfg(test)]
mod tests;

pub use dispatch::DispatchLimits;

/// Pulsar's default `maxMessageSize` (5 MiB).
pub const DEFAULT_MAX_MESSAGE_SIZE: u32 = 5 * 1024 * 1024;

/// Bytes a frame may carry beyond `max_message_size` (command and metadata), as Pulsar's
/// `Commands.MESSAGE_SIZE_FRAME_PADDING`.
pub const FRAME_PADDING: u32 = 10 * 1024;

/// Switches that bring back one of Pulsar's known bugs, so a test with stock clients can be seen
/// failing on Pulsar's behaviour (`--legacy NAME`, repeatable). Never for production.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Legacy {
    /// `mark-delete-cleanup`: on Key_Shared, a mark-delete move without acks (skip, clear
    /// backlog, expiry) drops pending acks below it and so releases draining keys early.
    pub mark_delete_cleanup: bool,
    /// `orphan-chunk-replay`: on Shared, a chunk whose message start is gone is replayed
    /// forever instead of dispatched (the subscription stalls).
    pub orphan_chunk_replay: bool,
    /// `unordered-nack`: nack as Pulsar does it: no key-serial limit, and PIP-493's
    /// `CommandNegativeAck` treated as a plain redelivery of the nacked messages (the given
    /// back ones are left to the client, which processes them first).
    pub unordered_nack: bool,
    /// `no-batch-ack-set`: a redelivered batch carries no `ack_set`, as from Pulsar with
    /// `acknowledgmentAtBatchIndexLevelEnabled=false`: the client hands the batch's acked
    /// messages to the application again.
    pub no_batch_ack_set: bool,
    /// Not a Pulsar bug and no `--legacy` value: a regression of this project's dispatcher
    /// ([`DispatcherConfig::legacy_replay_settle`](dispatcher::DispatcherConfig::legacy_replay_settle)),
    /// for the simulator's `--legacy replay-settle` through this broker: with reads that
    /// complete later, a Key_Shared subscription can stall.
    pub replay_settle: bool,
}

/// Everything [`crate::Broker::start`] needs.
///
/// ```
/// let cfg = broker::BrokerConfig::parse_args(["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"]).unwrap();
/// assert_eq!(cfg.listen.port(), 0);
/// assert!(cfg.data_dir.is_none());
/// ```
#[derive(Clone, Debug)]
pub struct BrokerConfig {
    /// Where the binary protocol listens (`--listen`, default `127.0.0.1:6650`; port 0 lets the
    /// OS choose).
    pub listen: SocketAddr,
    /// Where the admin HTTP server listens (`--admin`, default `127.0.0.1:8080`).
    pub admin: SocketAddr,
    /// Where durable state lives (`--data-dir`); `None` keeps everything in memory.
    pub data_dir: Option<PathBuf>,
    /// The largest message a producer may send (`--max-message-size`), told to clients in
    /// CONNECTED; larger payloads are chunked by the client when it has chunking enabled.
    pub max_message_size: u32,
    /// Entries per ledger before the topic rolls over to a new ledger id (Pulsar's
    /// `managedLedgerMaxEntriesPerLedger`, default 50,000).
    pub entries_per_ledger: u64,
    /// The durable topics' read cache, MiB (`--read-cache-mb`, Pulsar's
    /// `managedLedgerCacheSizeMB`; default 64): recently written or read payloads; a miss reads
    /// the entry back from its log file. Without `--data-dir` every entry is in memory anyway.
    pub read_cache_mb: u64,
    /// Idle time after which the broker pings a connection (ms); twice that without any
    /// frame closes it. Pulsar's `keepAliveIntervalSeconds` (30 s).
    pub keep_alive_ms: u64,
    /// With `--data-dir`: when a receipted entry is on the disk (`--sync always|interval`).
    pub sync: crate::storage::SyncPolicy,
    /// Pulsar-bug switches (`--legacy`).
    pub legacy: Legacy,
    /// Key_Shared key-serial dispatch (`--key-shared-max-unacked-per-key N`, 0 = off): at
    /// most N unacked entries per key; with 1 a stock client gets full per-key order on nack.
    pub key_shared_max_unacked_per_key: u32,
    /// Delayed delivery on Shared and Key_Shared (`--delayed-delivery-enabled true|false`,
    /// `--delayed-delivery-tick-ms N`, `--delayed-delivery-strict true|false`; Pulsar's
    /// `delayedDeliveryEnabled`, `delayedDeliveryTickTimeMillis`,
    /// `isDelayedDeliveryDeliverAtTimeStrict`). Default on, 1000 ms, strict (never early;
    /// Pulsar's default is not strict: up to one tick early).
    pub delayed_delivery: dispatcher::DelayedDelivery,
    /// Check every frame written against the protocol's field rules as Pulsar's Java client
    /// reads them (`--check-frames`, for test suites): a frame with a repeated non-repeated
    /// field or a missing required field is logged at ERROR and its connection closed, so a
    /// test with any client fails on it. Costs a protobuf walk per frame.
    pub check_frames: bool,
    /// Topics created on first use by a producer, a consumer or a partition look-up
    /// (`--allow-auto-topic-creation true|false`, Pulsar's `allowAutoTopicCreation`, default
    /// true). Off, a topic must be created with the admin API first.
    pub allow_auto_topic_creation: bool,
    /// What a topic created on first use is (`--allow-auto-topic-creation-type
    /// non-partitioned|partitioned`, Pulsar's `allowAutoTopicCreationType`, default
    /// non-partitioned).
    pub auto_topic_partitioned: bool,
    /// Partitions of a partitioned topic created on first use (`--default-num-partitions N`,
    /// Pulsar's `defaultNumPartitions`, default 1).
    pub default_num_partitions: u32,
    /// The most partitions a topic may have (`--max-num-partitions-per-partitioned-topic N`,
    /// Pulsar's `maxNumPartitionsPerPartitionedTopic`; default 0 = no limit).
    pub max_num_partitions: u32,
    /// How often namespaces' message TTLs are applied, ms (`--message-expiry-check-interval-ms`;
    /// Pulsar's `messageExpiryCheckIntervalInMinutes`, 5 minutes).
    pub message_expiry_check_ms: u64,
    /// How often namespaces' backlog quotas are applied, ms (`--backlog-quota-check-interval-ms`;
    /// Pulsar's `backlogQuotaCheckIntervalInSeconds`, 60 s).
    pub backlog_quota_check_ms: u64,
    /// Deduplication on every topic whose namespace does not say otherwise
    /// (`--broker-deduplication-enabled true|false`, Pulsar's `brokerDeduplicationEnabled`,
    /// default false).
    pub deduplication: bool,
    /// How a new schema is checked against a topic's (`--schema-compatibility-strategy`,
    /// Pulsar's `schemaCompatibilityStrategy`, default FULL).
    pub schema_compatibility: crate::schema::Strategy,
    /// Unacked-message limits, Key_Shared look-ahead, unblocking and AUTO_SPLIT selector for
    /// every new subscription (`--max-unacked-messages-per-consumer` and the flags beside it).
    pub dispatch: DispatchLimits,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 6650)),
            admin: SocketAddr::from(([127, 0, 0, 1], 8080)),
            data_dir: None,
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            entries_per_ledger: 50_000,
            read_cache_mb: 64,
            keep_alive_ms: 30_000,
            sync: crate::storage::SyncPolicy::Always,
            legacy: Legacy::default(),
            key_shared_max_unacked_per_key: 0,
            delayed_delivery: dispatcher::DelayedDelivery::default(),
            check_frames: false,
            allow_auto_topic_creation: true,
            auto_topic_partitioned: false,
            default_num_partitions: 1,
            max_num_partitions: 0,
            message_expiry_check_ms: 5 * 60 * 1000,
            backlog_quota_check_ms: 60 * 1000,
            deduplication: false,
            schema_compatibility: crate::schema::Strategy::Full,
            dispatch: DispatchLimits::default(),
        }
    }
}

/// A command line the broker cannot run with.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// `--help` was asked for; the caller prints [`USAGE`] and exits 0.
    #[error("help requested")]
    Help,
    /// A flag the broker does not know.
    #[error("unknown argument `{0}`")]
    UnknownArgument(String),
    /// A flag without its value.
    #[error("`{0}` needs a value")]
    MissingValue(String),
    /// A value that does not parse.
    #[error("invalid value `{value}` for `{flag}`: {reason}")]
    InvalidValue {
        /// The flag.
        flag: String,
        /// What was given.
        value: String,
        /// Why it is refused.
        reason: String,
    },
}

/// The command-line help.
pub const USAGE: &str = "\
usage: broker [--listen ADDR] [--admin ADDR] [--data-dir DIR] [--max-message-size BYTES]

  --listen ADDR             binary protocol address (default 127.0.0.1:6650; port 0 = any)
  --admin ADDR              admin HTTP address (default 127.0.0.1:8080; port 0 = any)
  --data-dir DIR            keep state in DIR (default: in memory)
  --max-message-size BYTES  largest message (default 5242880); clients chunk above it
  --sync always|interval    with --data-dir: fsync before each receipt (always, the
                            default) or every 100 ms (interval: a machine crash may lose
                            the last 100 ms of receipted messages; killing the broker does not)
  --entries-per-ledger N    ledger rollover (default 50000)
  --read-cache-mb N         with --data-dir: payloads kept in memory for reads, MiB
                            (default 64); older entries are read back from their log files
  --key-shared-max-unacked-per-key N
                            Key_Shared key-serial dispatch: at most N unacked entries per
                            key (default 0 = off); 1 gives stock clients per-key order on nack
  --delayed-delivery-enabled true|false
                            honour deliver_after / deliver_at on Shared and Key_Shared
                            (default true; Exclusive always dispatches at once, as Pulsar)
  --delayed-delivery-tick-ms N
                            delay resolution (default 1000): times are bucketed to the
                            largest power of two not above N (512 ms); 0 = exact
  --delayed-delivery-strict true|false
                            true (default): never before the deliver-at time, at most one
                            bucket after it; false (Pulsar's default): up to N ms early
  --max-unacked-messages-per-consumer N
                            block a consumer at N unacked messages, resume at half
                            (default 50000; 0 = off)
  --max-unacked-messages-per-subscription N
                            stop reading for a subscription at N unacked messages
                            (default 200000; 0 = off)
  --key-shared-look-ahead-msg-in-replay-threshold-per-consumer N
  --key-shared-look-ahead-msg-in-replay-threshold-per-subscription N
                            Key_Shared: entries waiting in replay before reads pause, per
                            consumer (default 2000; 0 = the subscription's) and in all
                            (default 20000; 0 = no cap)
  --key-shared-unblocking-interval-ms N
                            Key_Shared: gather unblocked keys this long before reading
                            (default 10)
  --subscription-key-shared-use-consistent-hashing true|false
                            Key_Shared AUTO_SPLIT: the consistent-hashing ring (default
                            true) or hash ranges split in halves as consumers join
  --subscription-key-shared-consistent-hashing-replica-points N
                            points per consumer on the ring (default 100)
  --legacy NAME             bring back a Pulsar bug, for demonstrations and tests only:
                            mark-delete-cleanup (Key_Shared skip/expiry releases draining
                            keys), orphan-chunk-replay (Shared stalls on an orphan chunk),
                            unordered-nack (nack as Pulsar: no key-serial, no PIP-493 order),
                            no-batch-ack-set (a redelivered batch without its acked indexes)
  --allow-auto-topic-creation true|false
                            create a topic on first use (default true); false: topics
                            must be created with the admin API first
  --allow-auto-topic-creation-type non-partitioned|partitioned
                            what a topic created on first use is (default non-partitioned)
  --default-num-partitions N
                            partitions of a topic created on first use when the type is
                            partitioned (default 1)
  --max-num-partitions-per-partitioned-topic N
                            the most partitions a topic may have (default 0 = no limit)
  --message-expiry-check-interval-ms N
                            how often namespaces' message TTLs are applied (default 300000)
  --backlog-quota-check-interval-ms N
                            how often namespaces' backlog quotas are applied (default 60000)
  --broker-deduplication-enabled true|false
                            drop a producer's resent messages (its sequence ids) on every
                            topic whose namespace does not say otherwise (default false)
  --schema-compatibility-strategy S
                            how a new schema is checked against a topic's: FULL (default),
                            BACKWARD, FORWARD, their _TRANSITIVE forms, ALWAYS_COMPATIBLE or
                            ALWAYS_INCOMPATIBLE
  --check-frames            for test suites: check every frame written as Pulsar's Java client
                            reads it (no repeated non-repeated field, every required field);
                            a frame that fails is logged at ERROR and its connection closed

The first two lines on stdout are the service URL and the admin URL. Logs go to stderr
(RUST_LOG sets the filter, default info).";

/// The flags that take a value (`--flag VALUE` or `--flag=VALUE`).
const FLAGS_WITH_VALUE: &[&str] = &[
    "--listen",
    "--admin",
    "--data-dir",
    "--max-message-size",
    "--entries-per-ledger",
    "--read-cache-mb",
    "--sync",
    "--legacy",
    "--key-shared-max-unacked-per-key",
    "--delayed-delivery-enabled",
    "--delayed-delivery-tick-ms",
    "--delayed-delivery-strict",
    "--allow-auto-topic-creation",
    "--allow-auto-topic-creation-type",
    "--default-num-partitions",
    "--max-num-partitions-per-partitioned-topic",
    "--message-expiry-check-interval-ms",
    "--backlog-quota-check-interval-ms",
    "--broker-deduplication-enabled",
    "--schema-compatibility-strategy",
];

impl BrokerConfig {
    /// Parses the arguments after the program name.
    pub fn parse_args<I, S>(args: I) -> Result<BrokerConfig, ConfigError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut cfg = BrokerConfig::default();
        let mut it = args.into_iter().map(|s| s.as_ref().to_owned());
        while let Some(flag) = it.next() {
            let (name, inline) = match flag.split_once('=') {
                Some((n, v)) if n.starts_with("--") => (n.to_owned(), Some(v.to_owned())),
                _ => (flag.clone(), None),
            };
            if name == "--help" || name == "-h" {
                return Err(ConfigError::Help);
            }
            if flag == "--check-frames" {
                cfg.check_frames = true;
                continue;
            }
            if !FLAGS_WITH_VALUE.contains(&name.as_str())
                && !DispatchLimits::FLAGS.contains(&name.as_str())
            {
                return Err(ConfigError::UnknownArgument(flag));
            }
            let value = match inline.or_else(|| it.next()) {
                Some(v) => v,
                None => return Err(ConfigError::MissingValue(name)),
            };
            cfg.set(&name, &value)
                .map_err(|reason| ConfigError::InvalidValue {
                    flag: name.clone(),
                    value: value.clone(),
                    reason: reason.to_owned(),
                })?;
        }
        Ok(cfg)
    }

    /// Sets the flag `name` (one of [`FLAGS_WITH_VALUE`] or [`DispatchLimits::FLAGS`]) to `value`; `Err` says why the value
    /// is refused.
    fn set(&mut self, name: &str, value: &str) -> Result<(), &'static str> {
        let number = |v: &str| v.parse::<u64>().map_err(|_| "not a number");
        let boolean = |v: &str| match v {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err("must be `true` or `false`"),
        };
        match name {
            "--listen" => self.listen = value.parse().map_err(|_| "not an IP:PORT")?,
            "--admin" => self.admin = value.parse().map_err(|_| "not an IP:PORT")?,
            "--data-dir" if value.is_empty() => return Err("empty path"),
            "--data-dir" => self.data_dir = Some(PathBuf::from(value)),
            "--max-message-size" => {
                let n = number(value)?;
                if !(1024..=256 * 1024 * 1024).contains(&n) {
                    return Err("must be between 1024 and 268435456");
                }
                self.max_message_size = n as u32;
            }
            "--legacy" => {
                match value {
                    "mark-delete-cleanup" => self.legacy.mark_delete_cleanup = true,
                    "orphan-chunk-replay" => self.legacy.orphan_chunk_replay = true,
                    "unordered-nack" => self.legacy.unordered_nack = true,
                    "no-batch-ack-set" => self.legacy.no_batch_ack_set = true,
                    _ => return Err(
                        "must be `mark-delete-cleanup`, `orphan-chunk-replay`, `unordered-nack` or `no-batch-ack-set`",
                    ),
                }
            }
            "--key-shared-max-unacked-per-key" => {
                self.key_shared_max_unacked_per_key =
                    u32::try_from(number(value)?).map_err(|_| "not a number")?;
            }
            "--delayed-delivery-enabled" => self.delayed_delivery.enabled = boolean(value)?,
            "--delayed-delivery-strict" => self.delayed_delivery.strict = boolean(value)?,
            "--delayed-delivery-tick-ms" => {
                let n = number(value)?;
                if n > 3_600_000 {
                    return Err("must be at most 3600000 (one hour)");
                }
                self.delayed_delivery.tick = n;
            }
            "--sync" => {
                self.sync = match value {
                    "always" => crate::storage::SyncPolicy::Always,
                    "interval" => crate::storage::SyncPolicy::Interval,
                    _ => return Err("must be `always` or `interval`"),
                }
            }
            "--read-cache-mb" => {
                let n = number(value)?;
                if n > 1024 * 1024 {
                    return Err("must be at most 1048576 (1 TiB)");
                }
                self.read_cache_mb = n;
            }
            "--entries-per-ledger" => {
                let n = number(value)?;
                if n == 0 {
                    return Err("must be at least 1");
                }
                self.entries_per_ledger = n;
            }
            "--allow-auto-topic-creation"
            | "--allow-auto-topic-creation-type"
            | "--default-num-partitions"
            | "--max-num-partitions-per-partitioned-topic"
            | "--message-expiry-check-interval-ms"
            | "--backlog-quota-check-interval-ms"
            | "--broker-deduplication-enabled" => self.set_namespace_flag(name, value)?,
            "--schema-compatibility-strategy" => {
                self.schema_compatibility = crate::schema::Strategy::parse(value).ok_or(
                    "must be FULL, BACKWARD, FORWARD, FULL_TRANSITIVE, BACKWARD_TRANSITIVE, FORWARD_TRANSITIVE, ALWAYS_COMPATIBLE or ALWAYS_INCOMPATIBLE",
                )?
            }
            n if DispatchLimits::FLAGS.contains(&n) => self.dispatch.set(n, value)?,
            _ => return Err("not a flag with a value"),
        }
        Ok(())
    }

    /// The flags of topic creation on first use, partition counts and the namespace
    /// policies' jobs.
    fn set_namespace_flag(&mut self, name: &str, value: &str) -> Result<(), &'static str> {
        let number = |v: &str| {
            v.parse::<u32>()
                .map_err(|_| "not a number (0 to 4294967295)")
        };
        let interval = |v: &str| match v.parse::<u64>() {
            Ok(n) if (10..=24 * 3_600_000).contains(&n) => Ok(n),
            _ => Err("must be a number of ms from 10 to 86400000 (one day)"),
        };
        match name {
            "--message-expiry-check-interval-ms" => self.message_expiry_check_ms = interval(value)?,
            "--broker-deduplication-enabled" => {
                self.deduplication = match value {
                    "true" => true,
                    "false" => false,
                    _ => return Err("must be `true` or `false`"),
                }
            }
            "--backlog-quota-check-interval-ms" => self.backlog_quota_check_ms = interval(value)?,
            "--allow-auto-topic-creation" => {
                self.allow_auto_topic_creation = match value {
                    "true" => true,
                    "false" => false,
                    _ => return Err("must be `true` or `false`"),
                }
            }
            "--allow-auto-topic-creation-type" => {
                self.auto_topic_partitioned = match value {
                    "non-partitioned" => false,
                    "partitioned" => true,
                    _ => return Err("must be `non-partitioned` or `partitioned`"),
                }
            }
            "--default-num-partitions" => match number(value)? {
                0 => return Err("must be at least 1"),
                n => self.default_num_partitions = n,
            },
            _ => self.max_num_partitions = number(value)?,
        }
        Ok(())
    }

    /// The most partitions a topic may have (`u32::MAX` when there is no limit).
    pub fn partition_limit(&self) -> u32 {
        match self.max_num_partitions {
            0 => u32::MAX,
            n => n,
        }
    }

    /// The largest frame the broker reads: the message size plus Pulsar's frame padding.
    pub fn max_frame_size(&self) -> usize {
        (self.max_message_size as usize) + FRAME_PADDING as usize
    }
}
