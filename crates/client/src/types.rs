//! Plain data exchanged with the broker adapter and the application.

use std::fmt;

/// One entry of a ledger: the unit the broker stores, dispatches, redelivers and acks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EntryId {
    /// Ledger the entry lives in.
    pub ledger_id: u64,
    /// Entry within the ledger.
    pub entry_id: u64,
}

impl EntryId {
    /// Builds an entry id.
    pub const fn new(ledger_id: u64, entry_id: u64) -> Self {
        EntryId {
            ledger_id,
            entry_id,
        }
    }
}

impl fmt::Display for EntryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.ledger_id, self.entry_id)
    }
}

/// One message: an entry, plus the index inside the entry when the entry is a batch.
///
/// Ids order by (ledger, entry, batch index), which is publish order within one topic
/// partition; the ordered-nack key gate relies on that order ("a later message of the key").
/// `batch_index: None` sorts before `Some(0)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MessageId {
    /// Ledger the entry lives in.
    pub ledger_id: u64,
    /// Entry within the ledger.
    pub entry_id: u64,
    /// Index inside a batch entry; `None` for a non-batched entry.
    pub batch_index: Option<u32>,
}

impl MessageId {
    /// A message that is a whole (non-batched) entry.
    pub const fn new(ledger_id: u64, entry_id: u64) -> Self {
        MessageId {
            ledger_id,
            entry_id,
            batch_index: None,
        }
    }

    /// Message `index` of a batch entry.
    pub const fn batched(ledger_id: u64, entry_id: u64, index: u32) -> Self {
        MessageId {
            ledger_id,
            entry_id,
            batch_index: Some(index),
        }
    }

    /// The entry this message belongs to.
    pub const fn entry(&self) -> EntryId {
        EntryId::new(self.ledger_id, self.entry_id)
    }
}

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.batch_index {
            Some(i) => write!(f, "{}:{}#{}", self.ledger_id, self.entry_id, i),
            None => write!(f, "{}:{}", self.ledger_id, self.entry_id),
        }
    }
}

/// Chunk metadata of one entry of a chunked message (all chunks share `uuid`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChunkInfo {
    /// Identifies the chunked message; must not be empty.
    pub uuid: String,
    /// This chunk's index, `0..num_chunks`.
    pub chunk_id: u32,
    /// How many chunks the message has (at least 1).
    pub num_chunks: u32,
    /// Size in bytes of the whole reassembled payload (a capacity hint).
    pub total_size: u32,
}

/// Batch metadata of one message of a batch entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchInfo {
    /// Index of this message inside the entry, `0..size`.
    pub index: u32,
    /// Number of messages in the entry (at least 1).
    pub size: u32,
}

/// A message pushed by the broker, as the adapter decoded it.
///
/// Build it with struct-update syntax: `IncomingMessage { id, epoch, ..Default::default() }`.
/// A batch entry is pushed as one `IncomingMessage` per index (with `batch` set and
/// `id.batch_index == Some(batch.index)`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IncomingMessage {
    /// The connection epoch this message arrived on (the value [`connect`] returned). Messages
    /// of an older connection are dropped: the broker redelivers them on the new one.
    ///
    /// [`connect`]: crate::Consumer::connect
    pub epoch: u64,
    /// Message id (for a chunk: the id of this chunk's entry).
    pub id: MessageId,
    /// Sticky key bytes (ordering key, else partition key); `None` for keyless messages, which
    /// the key gate never holds.
    pub key: Option<Vec<u8>>,
    /// Publish time in ms (same clock as `now`; used by the orphan-chunk expiry rule).
    pub publish_time: u64,
    /// How many times the broker delivered this message before (nacks and ack timeouts count,
    /// releases do not).
    pub redelivery_count: u32,
    /// Set for a message of a batch entry.
    pub batch: Option<BatchInfo>,
    /// Set for a chunk of a chunked message.
    pub chunk: Option<ChunkInfo>,
    /// Payload bytes (a chunk's share for chunked messages).
    pub payload: Vec<u8>,
    /// For a message of a batch entry: the broker says this index is already acknowledged
    /// (Pulsar's `ack_set` on a redelivered batch, where a cleared bit is an acked index). The
    /// consumer records it as acked, returns its permit and never hands it to the application.
    pub already_acked: bool,
}

/// A message handed to the application by [`receive`](crate::Consumer::receive).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivered {
    /// The id to [`ack`](crate::Consumer::ack) or [`nack`](crate::Consumer::nack) with. For a
    /// chunked message, the id of its last chunk (as Pulsar's chunk message id compares).
    pub id: MessageId,
    /// Sticky key bytes, if any.
    pub key: Option<Vec<u8>>,
    /// The payload (reassembled for chunked messages).
    pub payload: Vec<u8>,
    /// Publish time in ms (of the first chunk for chunked messages).
    pub publish_time: u64,
    /// How many times the broker delivered this message before.
    pub redelivery_count: u32,
    /// Batch metadata, for a message of a batch entry.
    pub batch: Option<BatchInfo>,
    /// Every chunk id, first to last, for a chunked message; empty otherwise.
    pub chunk_ids: Vec<MessageId>,
}

/// One entry the client gives back to the broker, with the batch indexes already acked so the
/// broker (and the client, on arrival) can skip them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedeliverEntry {
    /// The entry.
    pub entry: EntryId,
    /// Batch indexes of this entry the application already acked, ascending (empty when none
    /// or when the entry is not a batch).
    pub acked_indexes: Vec<u32>,
}

/// A command for the broker. Drain them with [`poll_command`](crate::Consumer::poll_command)
/// after every call into the consumer and send them in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Grant the broker this many more message permits.
    Flow(u32),
    /// Acknowledge these messages. A `MessageId` with `batch_index: Some(i)` is a batch-index
    /// ack (the entry still has unacked indexes); `None` acks the whole entry. A chunked
    /// message is acked by all its chunk ids in one command. Acks made between two polls
    /// with nothing else in between are merged into one command.
    Ack(Vec<MessageId>),
    /// Redeliver these entries now (nack delay elapsed, ack timeout, evicted chunks); the
    /// broker counts a redelivery. At most 1000 entries per command.
    RedeliverUnacked(Vec<RedeliverEntry>),
    /// Ordered mode only: the application nacked a message; redeliver these entries (one
    /// message: a chunked message's entries travel together) not before `delay` ms from now,
    /// and hold the message's key until they are re-sent. Sent at nack time so the broker
    /// holds the key before it sees the [`Release`](Command::Release) that follows.
    Nack {
        /// The nacked message's entries, with their acked batch indexes.
        entries: Vec<RedeliverEntry>,
        /// Redelivery delay in ms (already backoff-computed and precision-truncated).
        delay: u64,
    },
    /// Ordered mode only: give these entries back without counting a redelivery. They are
    /// later messages of a key whose earlier message was nacked and that the application was
    /// never handed; the broker re-queues them in position order behind the nacked one.
    Release(Vec<RedeliverEntry>),
}

/// Counters and gauges of one consumer (a snapshot).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Current connection epoch (0 before the first connect).
    pub epoch: u64,
    /// Messages waiting in the receive queue.
    pub queued: usize,
    /// Messages in the application's hands, not yet acked or nacked.
    pub outstanding: usize,
    /// Chunked messages being reassembled.
    pub pending_chunked: usize,
    /// Keys held by the gate (ordered mode): with a nacked message not yet acked, or a
    /// released message not yet back.
    pub held_keys: usize,
    /// Permits accumulated but not yet sent in a `Flow`.
    pub permits_to_return: u32,
    /// Sum of all `Flow` permits sent.
    pub flow_permits_sent: u64,
    /// Messages (and chunks) accepted from the broker on the current or earlier epochs.
    pub received: u64,
    /// Messages handed to the application.
    pub delivered: u64,
    /// Successful application acks.
    pub acks: u64,
    /// Successful application nacks.
    pub nacks: u64,
    /// Messages taken out of the queue (or refused on arrival) in ordered mode and given back
    /// to the broker: in a `Release`, or with the nacked entry they share.
    pub released: u64,
    /// Entries sent in `RedeliverUnacked` commands.
    pub redeliveries_requested: u64,
    /// Messages whose ack timeout expired.
    pub ack_timeouts: u64,
    /// Acks of a later message of a key while an earlier one was nacked and not yet acked (an
    /// application ordering bug; also logged with `warn`).
    pub out_of_order_acks: u64,
    /// Duplicate chunks dropped.
    pub duplicate_chunks: u64,
    /// Unexpected (orphan or out-of-order) chunks discarded.
    pub unexpected_chunks: u64,
    /// Incomplete chunked messages dropped by the expiry (their chunks acked).
    pub expired_chunked: u64,
    /// Chunked messages evicted (auto-ack) or given back because too many were pending.
    pub evicted_chunked: u64,
    /// Chunked messages completed.
    pub completed_chunked: u64,
    /// Messages dropped because they arrived on an old connection.
    pub dropped_old_epoch: u64,
    /// Messages dropped because they (or their batch index) were already acked.
    pub dropped_already_acked: u64,
    /// Messages rejected by [`on_message`](crate::Consumer::on_message) as malformed.
    pub invalid_messages: u64,
}
