#![doc = include_str!("../README.md")]

mod assignor;
mod pins;
mod round_robin;
mod types;

#[cfg(test)]
mod tests;

pub use crate::assignor::ChunkAssignor;
pub use crate::round_robin::PriorityRoundRobin;
pub use crate::types::{
    AssignEntry, Assignment, AssignorConfig, AssignorStats, ChunkRef, ConsumerSlot, OrphanPolicy,
};
