#![doc = include_str!("../README.md")]

mod chunks;
mod config;
mod consumer;
mod gate;
mod hash;
mod trackers;
mod types;

#[cfg(test)]
mod tests;

pub use crate::config::{
    Backoff, ConfigError, ConsumerConfig, OrphanChunkPolicy, MIN_ACK_TIMEOUT, MIN_NACK_DELAY,
};
pub use crate::consumer::{AckError, Consumer, MessageError, NackError};
pub use crate::types::{
    BatchInfo, ChunkInfo, ClientStats, Command, Delivered, EntryId, IncomingMessage, MessageId,
    RedeliverEntry,
};
