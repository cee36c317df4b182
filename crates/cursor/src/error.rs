//! Error types: one for cursor operations, one for stores.

use std::io;
use std::path::PathBuf;

use thiserror::Error;

use crate::entry::Position;

/// Why a cursor operation was refused. The cursor's state is unchanged when one is returned.
#[derive(Debug, Error)]
pub enum CursorError {
    /// The position lies past the last entry of its ledger.
    #[error("position {position} is beyond the end of ledger {} ({entries} entries)", position.ledger_id)]
    BeyondLedger {
        /// The offending position.
        position: Position,
        /// How many entries its ledger has.
        entries: u64,
    },
    /// The position names a ledger the ledger does not know (never created or trimmed away).
    #[error("unknown ledger {} (position {position})", position.ledger_id)]
    UnknownLedger {
        /// The offending position.
        position: Position,
    },
    /// The entry above mark-delete was trimmed from the ledger, so it cannot be acked or read.
    #[error("entry {position} was trimmed from the ledger")]
    Trimmed {
        /// The offending position.
        position: Position,
    },
    /// A batch index is not below the batch size.
    #[error("batch index {index} out of range for batch size {batch_size} at {position}")]
    BatchIndexOutOfRange {
        /// The entry.
        position: Position,
        /// The offending index.
        index: u32,
        /// The entry's batch size.
        batch_size: u32,
    },
    /// The batch size given with a batch-index ack differs from the entry's message count.
    #[error("batch size {given} at {position} does not match the entry's {actual} messages")]
    BatchSizeMismatch {
        /// The entry.
        position: Position,
        /// The size the caller passed.
        given: u32,
        /// The entry's `num_messages`.
        actual: u32,
    },
    /// A cumulative ack ([`ManagedCursor::mark_delete`](crate::ManagedCursor::mark_delete)) named
    /// a position below the current mark-delete: mark-delete never moves backwards (use
    /// [`ManagedCursor::reset`](crate::ManagedCursor::reset) to rewind a subscription). Repeating
    /// the current mark-delete position is not this error but an `Ok(None)` no-op.
    #[error("mark-delete cannot move backwards from {mark_delete} to {position}")]
    MarkDeleteBackwards {
        /// The position asked for.
        position: Position,
        /// The current mark-delete position (above `position`).
        mark_delete: Position,
    },
    /// `recover` found no persisted state in the store.
    #[error("the store holds no persisted cursor state")]
    NothingPersisted,
    /// The persisted state does not fit the ledger (for example its mark-delete is past the end).
    #[error("persisted state does not fit the ledger: {what} at {position}")]
    StateMismatch {
        /// The position that does not fit.
        position: Position,
        /// What is wrong.
        what: &'static str,
    },
    /// The store failed to save or load.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a [`CursorStore`](crate::CursorStore) could not save or load.
#[derive(Debug, Error)]
pub enum StoreError {
    /// An I/O operation on a file failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// What was being done (`"open"`, `"write"`, `"fsync"`, ...).
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The file is damaged and holds no good state before the damage (see
    /// [`FileStore`](crate::FileStore) for the recovery policy).
    #[error("corrupt cursor store {} at byte {offset}: {what}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Byte offset of the first damaged record (or of the header).
        offset: u64,
        /// What was wrong.
        what: String,
    },
    /// A store refused the operation for a reason of its own (used by test and wrapper stores).
    #[error("store unavailable: {0}")]
    Unavailable(String),
}
