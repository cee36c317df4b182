//! Positions, entry metadata and backlog totals: the plain data the cursor and ledger share.

use std::fmt;
use std::sync::Arc;

/// A position in the ledger: `(ledger_id, entry_id)`, ordered by ledger then entry.
///
/// Ledger id 0 is reserved: `(0, u64::MAX)` is the position "before `(1, 0)`", which is the
/// mark-delete position of a fresh cursor on an [`InMemoryLedger`](crate::InMemoryLedger).
/// In general the position just before `(l, 0)` is `(l - 1, u64::MAX)` (see [`Position::before`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    /// The ledger (segment) id; ids grow as the ledger rolls over.
    pub ledger_id: u64,
    /// The entry id inside the ledger, from 0.
    pub entry_id: u64,
}

impl Position {
    /// `Position { ledger_id, entry_id }`.
    pub const fn new(ledger_id: u64, entry_id: u64) -> Self {
        Position {
            ledger_id,
            entry_id,
        }
    }

    /// The position immediately before this one in the total order: `(l, e - 1)`, or
    /// `(l - 1, u64::MAX)` for `e == 0`. Saturates at `(0, 0)`.
    pub const fn before(self) -> Self {
        if self.entry_id > 0 {
            Position::new(self.ledger_id, self.entry_id - 1)
        } else if self.ledger_id > 0 {
            Position::new(self.ledger_id - 1, u64::MAX)
        } else {
            self
        }
    }

    /// The position immediately after this one in the total order: `(l, e + 1)`, or
    /// `(l + 1, 0)` for `e == u64::MAX`. Saturates at `(u64::MAX, u64::MAX)`.
    pub const fn next(self) -> Self {
        if self.entry_id < u64::MAX {
            Position::new(self.ledger_id, self.entry_id + 1)
        } else if self.ledger_id < u64::MAX {
            Position::new(self.ledger_id + 1, 0)
        } else {
            self
        }
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.ledger_id, self.entry_id)
    }
}

/// Chunk information of an entry that carries one chunk of a large message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkMeta {
    /// Identifies the chunked message; all its chunks share it.
    pub uuid: String,
    /// This chunk's index, from 0.
    pub chunk_id: u32,
    /// How many chunks the message has.
    pub num_chunks: u32,
    /// Size of the whole reassembled message in bytes.
    pub total_size: u32,
}

/// What the dispatcher needs to know about an entry, supplied by the producer path on append.
///
/// `repr(C)` with the fields every dispatch reads first (the message count, the delivery time,
/// the ordering key, the chunk), so that behind an `Arc`'s counts they share as few cache lines
/// as they can: the dispatcher touches each entry's metadata for the first time on its way
/// through, and the lines it pulls in are most of that cost.
#[derive(Clone, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct EntryMeta {
    /// Number of messages in the batch, at least 1 (a value of 0 is treated as 1).
    pub num_messages: u32,
    /// Payload size in bytes (backlog bytes and size-based quota eviction use it).
    pub size: u32,
    /// Not to be dispatched before this time (Pulsar's `deliver_at_time`, which a stock
    /// client's `deliver_after` / `deliver_at` sets), in the same unit as the dispatcher's
    /// `now` (milliseconds since the Unix epoch in the broker). `None`: deliver at once.
    pub deliver_at: Option<u64>,
    /// The ordering key, if the producer set one.
    pub ordering_key: Option<Vec<u8>>,
    /// Chunk information when the entry is one chunk of a chunked message.
    pub chunk: Option<ChunkMeta>,
    /// The partition key, if the producer set one.
    pub partition_key: Option<String>,
    /// The producer's name, if known.
    pub producer_name: Option<String>,
    /// The producer's sequence id, if known.
    pub sequence_id: Option<u64>,
    /// Publish time in milliseconds, from the producer or caller (the cursor never reads a clock).
    pub publish_time: u64,
    /// Whether `partition_key` is base64 encoded bytes.
    pub partition_key_b64: bool,
}

impl EntryMeta {
    /// A plain single-message entry: publish time and size, no keys, no chunk.
    ///
    /// ```
    /// let m = cursor::EntryMeta::simple(1_000, 64);
    /// assert_eq!((m.publish_time, m.size, m.num_messages), (1_000, 64, 1));
    /// ```
    pub fn simple(publish_time: u64, size: u32) -> Self {
        EntryMeta {
            publish_time,
            size,
            num_messages: 1,
            ordering_key: None,
            partition_key: None,
            partition_key_b64: false,
            producer_name: None,
            sequence_id: None,
            chunk: None,
            deliver_at: None,
        }
    }

    /// The same entry as a batch of `n` messages (0 is stored as 1).
    pub fn with_messages(mut self, n: u32) -> Self {
        self.num_messages = n.max(1);
        self
    }

    /// The same entry, not to be dispatched before `at` (see [`EntryMeta::deliver_at`]).
    ///
    /// ```
    /// let m = cursor::EntryMeta::simple(1_000, 64).with_deliver_at(5_000);
    /// assert_eq!(m.deliver_at, Some(5_000));
    /// ```
    pub fn with_deliver_at(mut self, at: u64) -> Self {
        self.deliver_at = Some(at);
        self
    }

    /// The number of messages, never 0.
    pub fn messages(&self) -> u32 {
        self.num_messages.max(1)
    }
}

/// An entry as read from the ledger: its position and shared metadata (cheap to clone).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Where the entry is.
    pub position: Position,
    /// Its metadata, shared with the ledger.
    pub meta: Arc<EntryMeta>,
}

/// Counts over a set of entries: entries, messages (batch sizes summed) and bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Backlog {
    /// Number of entries.
    pub entries: u64,
    /// Number of messages (sum of batch sizes, minus batch indexes already acked).
    pub messages: u64,
    /// Payload bytes.
    pub bytes: u64,
}

impl Backlog {
    pub(crate) fn add(&mut self, o: Backlog) {
        self.entries += o.entries;
        self.messages += o.messages;
        self.bytes += o.bytes;
    }

    pub(crate) fn sub(&mut self, o: Backlog) {
        self.entries = self.entries.saturating_sub(o.entries);
        self.messages = self.messages.saturating_sub(o.messages);
        self.bytes = self.bytes.saturating_sub(o.bytes);
    }

    pub(crate) fn of(meta: &EntryMeta) -> Backlog {
        Backlog {
            entries: 1,
            messages: u64::from(meta.messages()),
            bytes: u64::from(meta.size),
        }
    }
}
