//! The broker's settings and its command line.

use std::net::SocketAddr;
use std::path::PathBuf;

mod args;
mod dispatch;
#[cfg(test)]
mod tests;
mod values;

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
    /// Not a Pulsar bug and no `--legacy` value: this broker before its writes were requests,
    /// for the simulator's `--legacy early-receipt`: a SEND_RECEIPT goes out when the entry is
    /// queued, before its write completed (a write that then fails, or a crash, loses a
    /// receipted message).
    pub early_receipt: bool,
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
    /// Worker threads of the dispatch pool that runs every subscription's dispatcher
    /// (`--dispatch-threads`; `None`: the number of CPUs); `Some(0)`: a thread per
    /// subscription.
    pub dispatch_threads: Option<usize>,
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
    /// For test suites (`--fail-writes-while-exists FILE`): while `FILE` exists every write
    /// of entries fails with a full disk's error, so a suite can show what clients see when
    /// storage refuses writes, and that writes resume once it is removed.
    pub fail_writes_while_exists: Option<std::path::PathBuf>,
    /// How long a topic refuses new producers after a failed write, ms ([`WRITE_REFUSAL_MS`];
    /// doubled per failure in a row, up to 16 times this; a successful write ends it). Not a
    /// flag: the simulator shortens it.
    pub write_refusal_ms: u64,
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

/// A topic refuses new producers for this long after a failed write (ms).
pub const WRITE_REFUSAL_MS: u64 = 1_000;

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 6650)),
            admin: SocketAddr::from(([127, 0, 0, 1], 8080)),
            data_dir: None,
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            entries_per_ledger: 50_000,
            read_cache_mb: 64,
            dispatch_threads: None,
            keep_alive_ms: 30_000,
            sync: crate::storage::SyncPolicy::Always,
            legacy: Legacy::default(),
            key_shared_max_unacked_per_key: 0,
            delayed_delivery: dispatcher::DelayedDelivery::default(),
            check_frames: false,
            fail_writes_while_exists: None,
            write_refusal_ms: WRITE_REFUSAL_MS,
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
    /// `--help` was asked for; the caller prints [`usage`] and exits 0.
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

impl BrokerConfig {
    /// Parses the arguments after the program name (`--help` lists them; each absent flag
    /// keeps its default). `Err(ConfigError::Help)` asks the caller to print [`usage`].
    pub fn parse_args<I, S>(args: I) -> Result<BrokerConfig, ConfigError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut cfg = BrokerConfig::default();
        args::Args::parse(args)?.apply(&mut cfg);
        Ok(cfg)
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

/// The command-line help (`broker --help`): every flag with its value and default.
pub fn usage() -> String {
    args::usage()
}
