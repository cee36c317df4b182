//! The command line, declared once: each flag's name, value, check and help line is one field
//! of [`Args`] (clap derives the parser and `--help` from it); [`Args::apply`] puts what was
//! given into a [`BrokerConfig`], whose defaults stand for what was not.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::error::{ContextKind, ErrorKind};
use clap::{ArgAction, CommandFactory, Parser};

use super::values::{boolean, count_u32, number, set, Checked};
use super::{BrokerConfig, ConfigError};
use crate::storage::SyncPolicy;

/// What `--help` ends with.
const AFTER_HELP: &str = "The first two lines on stdout are the service URL and the admin URL. \
Logs go to stderr (RUST_LOG sets the filter, default info).";

/// The broker's flags. Every value is optional: an absent flag keeps
/// [`BrokerConfig::default`]'s value.
#[derive(Parser, Debug)]
#[command(
    name = "broker",
    about = "A Pulsar-protocol broker with key-ordered shared consumption.",
    after_help = AFTER_HELP,
    args_override_self = true,
    allow_negative_numbers = true,
    disable_version_flag = true
)]
pub(super) struct Args {
    /// Binary protocol address (default 127.0.0.1:6650; port 0 = any).
    #[arg(long, value_name = "ADDR", value_parser = address)]
    listen: Option<SocketAddr>,
    /// Admin HTTP address (default 127.0.0.1:8080; port 0 = any).
    #[arg(long, value_name = "ADDR", value_parser = address)]
    admin: Option<SocketAddr>,
    /// Keep state in DIR (default: in memory).
    #[arg(long, value_name = "DIR", value_parser = directory)]
    data_dir: Option<PathBuf>,
    /// Largest message, 1024 to 268435456 (default 5242880); clients chunk above it.
    #[arg(long, value_name = "BYTES", value_parser = message_size)]
    max_message_size: Option<u32>,
    /// With --data-dir: fsync before each receipt (always, the default) or every 100 ms
    /// (interval: a machine crash may lose the last 100 ms of receipted messages; killing the
    /// broker does not).
    #[arg(long, value_name = "always|interval", value_parser = sync_policy)]
    sync: Option<SyncPolicy>,
    /// Ledger rollover, entries (default 50000).
    #[arg(long, value_name = "N", value_parser = at_least_one)]
    entries_per_ledger: Option<u64>,
    /// With --data-dir: payloads kept in memory for reads, MiB (default 64); older entries are
    /// read back from their log files.
    #[arg(long, value_name = "N", value_parser = cache_mb)]
    read_cache_mb: Option<u64>,
    /// Threads that run every subscription's dispatcher (default: the number of CPUs); 0 gives
    /// each subscription a thread of its own.
    #[arg(long, value_name = "N", value_parser = dispatch_threads)]
    dispatch_threads: Option<usize>,
    /// Key_Shared key-serial dispatch: at most N unacked entries per key (default 0 = off); 1
    /// gives stock clients per-key order on nack.
    #[arg(long, value_name = "N", value_parser = count_u32)]
    key_shared_max_unacked_per_key: Option<u32>,
    /// Honour deliver_after / deliver_at on Shared and Key_Shared (default true; Exclusive
    /// always dispatches at once, as Pulsar).
    #[arg(long, value_name = "true|false", value_parser = boolean)]
    delayed_delivery_enabled: Option<bool>,
    /// Delay resolution, ms, at most 3600000 (default 1000): times are bucketed to the largest
    /// power of two not above N (512 ms); 0 = exact.
    #[arg(long, value_name = "N", value_parser = tick_ms)]
    delayed_delivery_tick_ms: Option<u64>,
    /// true (default): never before the deliver-at time, at most one bucket after it; false
    /// (Pulsar's default): up to one tick early.
    #[arg(long, value_name = "true|false", value_parser = boolean)]
    delayed_delivery_strict: Option<bool>,
    #[command(flatten)]
    dispatch: super::dispatch::DispatchArgs,
    /// Bring back a Pulsar bug, for demonstrations and tests only (repeatable):
    /// mark-delete-cleanup (Key_Shared skip/expiry releases draining keys), orphan-chunk-replay
    /// (Shared stalls on an orphan chunk), unordered-nack (nack as Pulsar: no key-serial, no
    /// PIP-493 order), no-batch-ack-set (a redelivered batch without its acked indexes).
    #[arg(long, value_name = "NAME", action = ArgAction::Append, value_parser = legacy)]
    legacy: Vec<&'static str>,
    /// Create a topic on first use (default true); false: topics must be created with the
    /// admin API first.
    #[arg(long, value_name = "true|false", value_parser = boolean)]
    allow_auto_topic_creation: Option<bool>,
    /// What a topic created on first use is (default non-partitioned).
    #[arg(long, value_name = "non-partitioned|partitioned", value_parser = topic_type)]
    allow_auto_topic_creation_type: Option<bool>,
    /// Partitions of a topic created on first use when the type is partitioned (default 1).
    #[arg(long, value_name = "N", value_parser = partitions)]
    default_num_partitions: Option<u32>,
    /// The most partitions a topic may have (default 0 = no limit).
    #[arg(long, value_name = "N", value_parser = count_u32)]
    max_num_partitions_per_partitioned_topic: Option<u32>,
    /// How often namespaces' message TTLs are applied, ms, 10 to 86400000 (default 300000).
    #[arg(long, value_name = "N", value_parser = interval)]
    message_expiry_check_interval_ms: Option<u64>,
    /// How often namespaces' backlog quotas are applied, ms, 10 to 86400000 (default 60000).
    #[arg(long, value_name = "N", value_parser = interval)]
    backlog_quota_check_interval_ms: Option<u64>,
    /// Drop a producer's resent messages (its sequence ids) on every topic whose namespace
    /// does not say otherwise (default false).
    #[arg(long, value_name = "true|false", value_parser = boolean)]
    broker_deduplication_enabled: Option<bool>,
    /// How a new schema is checked against a topic's: FULL (default), BACKWARD, FORWARD, their
    /// _TRANSITIVE forms, ALWAYS_COMPATIBLE or ALWAYS_INCOMPATIBLE.
    #[arg(long, value_name = "S", value_parser = strategy)]
    schema_compatibility_strategy: Option<crate::schema::Strategy>,
    /// For test suites: check every frame written as Pulsar's Java client reads it (no
    /// repeated non-repeated field, every required field); a frame that fails is logged at
    /// ERROR and its connection closed.
    #[arg(long)]
    check_frames: bool,
    /// For test suites: while FILE exists, every write of entries fails as on a full disk.
    #[arg(long, value_name = "FILE")]
    fail_writes_while_exists: Option<PathBuf>,
}

impl Args {
    /// Parses the arguments after the program name.
    pub(super) fn parse<I, S>(args: I) -> Result<Args, ConfigError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let argv = std::iter::once("broker".to_owned())
            .chain(args.into_iter().map(|s| s.as_ref().to_owned()));
        Args::try_parse_from(argv).map_err(config_error)
    }

    /// Puts every given flag into `cfg`.
    pub(super) fn apply(self, cfg: &mut BrokerConfig) {
        set(&mut cfg.listen, self.listen);
        set(&mut cfg.admin, self.admin);
        cfg.data_dir = self.data_dir.or(cfg.data_dir.take());
        set(&mut cfg.max_message_size, self.max_message_size);
        set(&mut cfg.sync, self.sync);
        set(&mut cfg.entries_per_ledger, self.entries_per_ledger);
        set(&mut cfg.read_cache_mb, self.read_cache_mb);
        cfg.dispatch_threads = self.dispatch_threads.or(cfg.dispatch_threads);
        set(
            &mut cfg.key_shared_max_unacked_per_key,
            self.key_shared_max_unacked_per_key,
        );
        set(
            &mut cfg.delayed_delivery.enabled,
            self.delayed_delivery_enabled,
        );
        set(
            &mut cfg.delayed_delivery.tick,
            self.delayed_delivery_tick_ms,
        );
        set(
            &mut cfg.delayed_delivery.strict,
            self.delayed_delivery_strict,
        );
        self.dispatch.apply(&mut cfg.dispatch);
        for name in self.legacy {
            let l = &mut cfg.legacy;
            match name {
                "mark-delete-cleanup" => l.mark_delete_cleanup = true,
                "orphan-chunk-replay" => l.orphan_chunk_replay = true,
                "unordered-nack" => l.unordered_nack = true,
                _ => l.no_batch_ack_set = true,
            }
        }
        set(
            &mut cfg.allow_auto_topic_creation,
            self.allow_auto_topic_creation,
        );
        set(
            &mut cfg.auto_topic_partitioned,
            self.allow_auto_topic_creation_type,
        );
        set(&mut cfg.default_num_partitions, self.default_num_partitions);
        set(
            &mut cfg.max_num_partitions,
            self.max_num_partitions_per_partitioned_topic,
        );
        set(
            &mut cfg.message_expiry_check_ms,
            self.message_expiry_check_interval_ms,
        );
        set(
            &mut cfg.backlog_quota_check_ms,
            self.backlog_quota_check_interval_ms,
        );
        set(&mut cfg.deduplication, self.broker_deduplication_enabled);
        set(
            &mut cfg.schema_compatibility,
            self.schema_compatibility_strategy,
        );
        cfg.check_frames |= self.check_frames;
        if let Some(f) = &self.fail_writes_while_exists {
            cfg.fail_writes_while_exists = Some(f.clone());
        }
    }
}

/// The broker's `--help`.
pub(super) fn usage() -> String {
    Args::command().render_help().to_string()
}

/// clap's refusal as the broker's typed error.
fn config_error(e: clap::Error) -> ConfigError {
    let context = |k: ContextKind| e.get(k).map(|v| v.to_string()).unwrap_or_default();
    // `--listen <ADDR>`: the flag alone.
    let flag = || {
        let arg = context(ContextKind::InvalidArg);
        arg.split([' ', '=']).next().unwrap_or_default().to_owned()
    };
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            ConfigError::Help
        }
        ErrorKind::InvalidValue if context(ContextKind::InvalidValue).is_empty() => {
            ConfigError::MissingValue(flag())
        }
        ErrorKind::InvalidValue | ErrorKind::ValueValidation | ErrorKind::TooManyValues => {
            let reason = match e.kind() {
                ErrorKind::TooManyValues => "takes no value".to_owned(),
                _ => std::error::Error::source(&e)
                    .map(ToString::to_string)
                    .unwrap_or_else(|| "not one of the values the flag takes".to_owned()),
            };
            ConfigError::InvalidValue {
                flag: flag(),
                value: context(ContextKind::InvalidValue),
                reason,
            }
        }
        _ => ConfigError::UnknownArgument(context(ContextKind::InvalidArg)),
    }
}

fn address(v: &str) -> Checked<SocketAddr> {
    v.parse().map_err(|_| "not an IP:PORT")
}

fn directory(v: &str) -> Checked<PathBuf> {
    match v {
        "" => Err("empty path"),
        _ => Ok(PathBuf::from(v)),
    }
}

fn at_least_one(v: &str) -> Checked<u64> {
    match number(v)? {
        0 => Err("must be at least 1"),
        n => Ok(n),
    }
}

fn message_size(v: &str) -> Checked<u32> {
    match number(v)? {
        n @ 1024..=268_435_456 => Ok(n as u32),
        _ => Err("must be between 1024 and 268435456"),
    }
}

fn cache_mb(v: &str) -> Checked<u64> {
    match number(v)? {
        n @ 0..=1_048_576 => Ok(n),
        _ => Err("must be at most 1048576 (1 TiB)"),
    }
}

fn dispatch_threads(v: &str) -> Checked<usize> {
    match number(v)? {
        n @ 0..=1024 => Ok(n as usize),
        _ => Err("must be at most 1024"),
    }
}

fn tick_ms(v: &str) -> Checked<u64> {
    match number(v)? {
        n @ 0..=3_600_000 => Ok(n),
        _ => Err("must be at most 3600000 (one hour)"),
    }
}

fn partitions(v: &str) -> Checked<u32> {
    match count_u32(v)? {
        0 => Err("must be at least 1"),
        n => Ok(n),
    }
}

fn interval(v: &str) -> Checked<u64> {
    match v.parse::<u64>() {
        Ok(n) if (10..=24 * 3_600_000).contains(&n) => Ok(n),
        _ => Err("must be a number of ms from 10 to 86400000 (one day)"),
    }
}

fn sync_policy(v: &str) -> Checked<SyncPolicy> {
    match v {
        "always" => Ok(SyncPolicy::Always),
        "interval" => Ok(SyncPolicy::Interval),
        _ => Err("must be `always` or `interval`"),
    }
}

fn legacy(v: &str) -> Checked<&'static str> {
    ["mark-delete-cleanup", "orphan-chunk-replay", "unordered-nack", "no-batch-ack-set"]
        .into_iter()
        .find(|n| *n == v)
        .ok_or("must be `mark-delete-cleanup`, `orphan-chunk-replay`, `unordered-nack` or `no-batch-ack-set`")
}

fn topic_type(v: &str) -> Checked<bool> {
    match v {
        "non-partitioned" => Ok(false),
        "partitioned" => Ok(true),
        _ => Err("must be `non-partitioned` or `partitioned`"),
    }
}

fn strategy(v: &str) -> Checked<crate::schema::Strategy> {
    crate::schema::Strategy::parse(v).ok_or(
        "must be FULL, BACKWARD, FORWARD, FULL_TRANSITIVE, BACKWARD_TRANSITIVE, FORWARD_TRANSITIVE, ALWAYS_COMPATIBLE or ALWAYS_INCOMPATIBLE",
    )
}
