#![doc = include_str!("../README.md")]

mod ackset;
mod batch;
mod codec;
mod cursor;
mod entry;
mod error;
mod ledger;
pub mod segment;
mod store;

pub use crate::ackset::AckSet;
pub use crate::batch::BatchAcks;
pub use crate::codec::DecodeError;
pub use crate::cursor::{
    AckOutcome, InitialPosition, ManagedCursor, MarkDeleteMove, MarkDeleteReason, RecoveryOutcome,
    ReplayResult,
};
pub use crate::entry::{Backlog, ChunkMeta, Entry, EntryMeta, Position};
pub use crate::error::{CursorError, StoreError};
pub use crate::ledger::{InMemoryLedger, Ledger, MetaSource, SharedLedger};
pub use crate::store::{CursorStore, FileStore, MemoryStore, PersistedState};
