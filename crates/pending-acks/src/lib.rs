#![doc = include_str!("../README.md")]

mod map;
mod position;
mod store;
mod sync;
mod types;

pub use crate::map::{AddBatch, PendingAcks};
pub use crate::position::SegmentedPosition;
pub use crate::sync::Arc;
pub use crate::types::{
    AddHandler, AddOutcome, AddRefused, PendingAck, RemainingError, RemovalCause, RemoveHandler,
};
