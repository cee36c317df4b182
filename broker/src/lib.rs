//! A broker that speaks Apache Pulsar's binary protocol, built on this workspace's crates, so
//! unmodified Pulsar clients (the `pulsar-client` Python wheel, the C++ and Java clients, the
//! Rust `pulsar` crate) produce to and consume from the key-ordered dispatcher.
//!
//! It is built as quinn-proto is: a sans-IO core that decides and thin shells that move
//! bytes and time. Each connection's protocol is a `Session` (bytes and the time in, frames and
//! events out; every command handler and protocol rule lives there), over a shared
//! `BrokerState` (the topics, their subscriptions and producers). The shells own the sockets,
//! the threads and the clock. Everything that decides which consumer gets which entry, when a
//! key may move, and what mark-delete means lives in the sans-IO crates (`dispatcher`,
//! `cursor`, `chunk-assignor`, `draining-hashes`, `pending-acks`); the frame codec is `wire`.
//!
//! * One acceptor thread; per connection a reader thread (reads, runs its session, acks on this
//!   thread) and a writer thread (a bounded queue of encoded frames drained into the socket);
//!   a subscription's dispatcher (on a worker of the dispatch pool) encodes its consumers'
//!   deliveries into MESSAGE frames in that queue (a [`dispatcher::DeliverySink`]).
//! * One dispatcher [`dispatcher::Runtime`] per subscription, its cursor over its topic's one
//!   ledger ([`cursor::SharedLedger`]). Entries and their payloads are stored once per topic,
//!   payloads verbatim, and sent back after each MESSAGE.
//! * Tenants, namespaces and partitioned topics as Pulsar standalone keeps them (the
//!   `metadata` module); topics (`persistent://tenant/namespace/topic`) are created on first
//!   use inside an existing namespace, and a partitioned topic's partitions are topics.
//!
//! Does not: authenticate, encrypt (no TLS), serve transactions,
//! geo-replication or most namespace policies. Without `--data-dir`
//! everything is in memory.
//!
//! ```no_run
//! use std::time::Duration;
//! let cfg = broker::BrokerConfig::parse_args(["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])?;
//! let b = broker::Broker::start(cfg)?;
//! println!("{}\n{}", b.service_url(), b.admin_url());
//! // … clients connect to b.service_url() …
//! b.shutdown(Duration::from_secs(5));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod admin;
mod config;
#[doc(hidden)]
pub mod fuzzing;
mod metadata;
mod schema;
mod session;
mod shell;
mod state;
mod stats;
pub mod stepped;
mod storage;
mod sync;
mod topic;

pub use config::{
    usage, BrokerConfig, ConfigError, DispatchLimits, Legacy, DEFAULT_MAX_MESSAGE_SIZE,
    FRAME_PADDING,
};
pub use session::PROTOCOL_VERSION;
pub use shell::{Broker, StartError};
pub use storage::{StorageError, StoreFaults, SyncPolicy};
