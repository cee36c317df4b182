//! The interop scenarios: the unmodified `pulsar` crate against the broker.
//!
//! One test binary; each `#[tokio::test]` is one scenario that starts its own broker
//! (`BROKER_BIN`, plus `BROKER_ARGS`) and prints `scenario <name>: <result> messages=<n> <s>s`.
//! Scenarios run one at a time (see `scenario::run`). `cargo test -- NAME` runs a subset.

mod batches;
mod client_features;
mod consumer_stats;
mod delayed;
mod dlq;
mod key_shared;
mod nack;
mod partitioned;
mod protocol;
mod reader_seek;
mod seed_000_skip;
mod seed_001_orphan_chunk;
mod seed_002_key_serial;
mod shared;
