#![doc = include_str!("../README.md")]

mod sync;
mod table;
mod tracker;

pub use crate::sync::Arc;
pub use crate::tracker::{
    AddEntryError, ConsumerDrainingStats, DrainingEntry, DrainingHashes, ReduceError, Reduced,
    SendCheck, UnblockListener,
};
