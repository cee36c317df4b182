//! Conversions between Pulsar's wire types and the `cursor` crate's: message ids and positions,
//! `ack_set` bitsets and acked batch indexes, `MessageMetadata` and [`EntryMeta`].

use cursor::{ChunkMeta, EntryMeta, Position};

use crate::proto::{MessageIdData, MessageMetadata};

/// The entry a message id names: `(ledger_id, entry_id)`. Batch index, batch size, partition and
/// ack set are not part of a position; read them with [`batch_index`], [`batch_size`] and the
/// `ack_set` field.
pub fn position(id: &MessageIdData) -> Position {
    Position::new(id.ledger_id, id.entry_id)
}

/// The message id of a whole entry, as a broker sends it in SEND_RECEIPT and MESSAGE: ledger and
/// entry id, nothing else (partition and batch index stay at their default of -1).
pub fn message_id(position: Position) -> MessageIdData {
    MessageIdData {
        ledger_id: position.ledger_id,
        entry_id: position.entry_id,
        ..MessageIdData::default()
    }
}

/// The batch index a message id carries, if any (absent or negative = none).
pub fn batch_index(id: &MessageIdData) -> Option<u32> {
    id.batch_index.and_then(|i| u32::try_from(i).ok())
}

/// The batch size a message id carries, if any (absent or not positive = none).
pub fn batch_size(id: &MessageIdData) -> Option<u32> {
    id.batch_size
        .and_then(|n| u32::try_from(n).ok())
        .filter(|&n| n > 0)
}

/// The batch indexes an `ack_set` marks as acked, ascending, among `0..batch_size`.
///
/// Polarity: in Pulsar's `ack_set` a **set bit is an index still unacked**, so the acked ones
/// are the clear bits. Words are `java.util.BitSet.toLongArray()`: bit `i` is bit `i % 64` of word
/// `i / 64`, and words missing at the end are all zero. An empty `ack_set` therefore acks every
/// index (in an ACK, no `ack_set` means the whole entry). Bits at or above `batch_size` are ignored.
/// The result has at most `batch_size` elements: pass the stored entry's batch size.
///
/// ```
/// // Acking indexes 0 and 2 of a 5-message batch sends ack_set [26] = 0b11010.
/// assert_eq!(wire::convert::acked_indexes_from_ack_set(&[26], 5), vec![0, 2]);
/// ```
pub fn acked_indexes_from_ack_set(ack_set: &[i64], batch_size: u32) -> Vec<u32> {
    (0..batch_size).filter(|&i| !bit(ack_set, i)).collect()
}

/// The batch indexes an `ack_set` marks as still unacked, ascending, among `0..batch_size` (the
/// complement of [`acked_indexes_from_ack_set`]).
pub fn unacked_indexes_from_ack_set(ack_set: &[i64], batch_size: u32) -> Vec<u32> {
    (0..batch_size).filter(|&i| bit(ack_set, i)).collect()
}

fn bit(words: &[i64], i: u32) -> bool {
    words
        .get((i / 64) as usize)
        .is_some_and(|w| (*w as u64) >> (i % 64) & 1 == 1)
}

/// The `ack_set` for a batch of `batch_size` messages of which `acked` are acked: bits set for
/// every index in `0..batch_size` not in `acked`, trailing zero words dropped (as Java's
/// `BitSet.toLongArray()` does, so a fully acked batch gives `[]`). Indexes at or above
/// `batch_size` are ignored.
///
/// A broker puts this in MESSAGE when it redelivers a partly acked batch.
///
/// ```
/// assert_eq!(wire::convert::ack_set_from_acked(&[0, 2], 5), vec![26]);
/// assert_eq!(wire::convert::ack_set_from_acked(&[0, 1], 2), Vec::<i64>::new());
/// ```
pub fn ack_set_from_acked(acked: &[u32], batch_size: u32) -> Vec<i64> {
    let mut words = vec![0u64; batch_size.div_ceil(64) as usize];
    for i in 0..batch_size {
        words[(i / 64) as usize] |= 1 << (i % 64);
    }
    for &i in acked.iter().filter(|&&i| i < batch_size) {
        words[(i / 64) as usize] &= !(1 << (i % 64));
    }
    trim(words.into_iter().map(|w| w as i64).collect())
}

/// Combines two `ack_set`s of the same entry: an index stays unacked only if it is unacked in
/// both (word-wise AND; a missing word is all zero). This is how Pulsar's cursor merges a new
/// batch-index ack into what it already has: never trust one `ack_set` to be the whole truth.
///
/// ```
/// // {1,3,4} unacked, then the client acks {1,3,4} from a fresh bitmap (ack_set 5 = {0,2} unacked).
/// assert_eq!(wire::convert::merge_ack_sets(&[26], &[5]), Vec::<i64>::new());
/// ```
pub fn merge_ack_sets(a: &[i64], b: &[i64]) -> Vec<i64> {
    trim(a.iter().zip(b).map(|(x, y)| x & y).collect())
}

fn trim(mut words: Vec<i64>) -> Vec<i64> {
    while words.last() == Some(&0) {
        words.pop();
    }
    words
}

/// What one message id of an individual ACK asks for, given the acked entry's batch size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AckRequest {
    /// The whole entry: the id has no `ack_set`, or its `ack_set` leaves nothing unacked.
    Entry(Position),
    /// Some indexes of a batch entry: `acked` (ascending, possibly empty) among `0..batch_size`.
    BatchIndexes {
        /// The batch entry.
        position: Position,
        /// The entry's batch size, as passed in.
        batch_size: u32,
        /// The indexes this ack marks as acked.
        acked: Vec<u32>,
    },
}

/// Classifies one message id of an individual ACK, as Pulsar's broker does with batch-index
/// acknowledgment enabled: an `ack_set` makes it a batch-index ack, its absence acks the whole
/// entry (a `batch_index` without `ack_set` also acks the whole entry). `batch_size` should be
/// the stored entry's message count, not the id's `batch_size` field.
///
/// ```
/// use wire::convert::{ack_request, message_id, AckRequest};
/// let mut id = message_id(cursor::Position::new(1, 0));
/// assert_eq!(ack_request(&id, 5), AckRequest::Entry(cursor::Position::new(1, 0)));
/// id.ack_set = vec![26];
/// assert_eq!(
///     ack_request(&id, 5),
///     AckRequest::BatchIndexes { position: cursor::Position::new(1, 0), batch_size: 5, acked: vec![0, 2] }
/// );
/// ```
pub fn ack_request(id: &MessageIdData, batch_size: u32) -> AckRequest {
    let p = position(id);
    if id.ack_set.is_empty() {
        return AckRequest::Entry(p);
    }
    let acked = acked_indexes_from_ack_set(&id.ack_set, batch_size);
    if acked.len() == batch_size as usize {
        return AckRequest::Entry(p);
    }
    AckRequest::BatchIndexes {
        position: p,
        batch_size,
        acked,
    }
}

/// What the broker needs from a message's `MessageMetadata`: the cursor's [`EntryMeta`] plus the
/// fields `EntryMeta` has no place for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageInfo {
    /// The entry metadata for the ledger and dispatcher.
    pub meta: EntryMeta,
    /// `event_time` (ms), if set and not 0.
    pub event_time: Option<u64>,
    /// `marker_type`, if set: marker entries (replication, transactions) are not for consumers.
    pub marker_type: Option<i32>,
    /// `highest_sequence_id`, if set (a batch's last sequence id).
    pub highest_sequence_id: Option<u64>,
}

/// Chunk fields of a `MessageMetadata` that do not describe a valid chunk.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MetadataError {
    /// Some but not all of `uuid`, `chunk_id`, `num_chunks_from_msg` are set, or they are
    /// out of range (negative, zero chunks, or `chunk_id >= num_chunks_from_msg`).
    #[error("invalid chunk fields: uuid {uuid:?}, chunk_id {chunk_id:?}, num_chunks_from_msg {num_chunks:?}, total_chunk_msg_size {total_size:?}")]
    InvalidChunk {
        /// `uuid` as received.
        uuid: Option<String>,
        /// `chunk_id` as received.
        chunk_id: Option<i32>,
        /// `num_chunks_from_msg` as received.
        num_chunks: Option<i32>,
        /// `total_chunk_msg_size` as received.
        total_size: Option<i32>,
    },
    /// The payload is larger than 4 GiB (cannot come from a frame).
    #[error("payload of {0} bytes does not fit a u32 size")]
    PayloadTooLarge(usize),
}

/// Builds a [`MessageInfo`] from a message's metadata and its payload length (the body after the
/// metadata, which becomes `EntryMeta::size`).
///
/// * Keys: `ordering_key` bytes; `partition_key` with `partition_key_b64_encoded` (default false).
/// * Batch size: `num_messages_in_batch` (default 1; 0 or negative is stored as 1).
/// * Chunk: when `uuid`, `chunk_id` and `num_chunks_from_msg` are all set and consistent,
///   `total_chunk_msg_size` defaulting to 0; when none is set, no chunk; anything in between is a
///   [`MetadataError::InvalidChunk`].
/// * `publish_time`, `producer_name`, `sequence_id` as sent (proto2 required fields).
/// * `deliver_at_time` (ms since the epoch) as `EntryMeta::deliver_at`, when set and not negative.
pub fn message_info(
    metadata: &MessageMetadata,
    body_len: usize,
) -> Result<MessageInfo, MetadataError> {
    let m = metadata;
    let size = u32::try_from(body_len).map_err(|_| MetadataError::PayloadTooLarge(body_len))?;
    let chunk = chunk_meta(m)?;
    let meta = EntryMeta {
        publish_time: m.publish_time,
        size,
        num_messages: u32::try_from(m.num_messages_in_batch()).unwrap_or(1).max(1),
        ordering_key: m.ordering_key.clone(),
        partition_key: m.partition_key.clone(),
        partition_key_b64: m.partition_key_b64_encoded(),
        producer_name: Some(m.producer_name.clone()),
        sequence_id: Some(m.sequence_id),
        chunk,
        deliver_at: m.deliver_at_time.and_then(|t| u64::try_from(t).ok()),
    };
    Ok(MessageInfo {
        meta,
        event_time: m.event_time.filter(|&t| t != 0),
        marker_type: m.marker_type,
        highest_sequence_id: m.highest_sequence_id,
    })
}

fn chunk_meta(m: &MessageMetadata) -> Result<Option<ChunkMeta>, MetadataError> {
    let invalid = || MetadataError::InvalidChunk {
        uuid: m.uuid.clone(),
        chunk_id: m.chunk_id,
        num_chunks: m.num_chunks_from_msg,
        total_size: m.total_chunk_msg_size,
    };
    match (&m.uuid, m.chunk_id, m.num_chunks_from_msg) {
        (None, None, None) => Ok(None),
        (Some(uuid), Some(chunk_id), Some(num_chunks)) => {
            let chunk_id = u32::try_from(chunk_id).map_err(|_| invalid())?;
            let num_chunks = u32::try_from(num_chunks).map_err(|_| invalid())?;
            let total_size =
                u32::try_from(m.total_chunk_msg_size.unwrap_or(0)).map_err(|_| invalid())?;
            if num_chunks == 0 || chunk_id >= num_chunks {
                return Err(invalid());
            }
            Ok(Some(ChunkMeta {
                uuid: uuid.clone(),
                chunk_id,
                num_chunks,
                total_size,
            }))
        }
        _ => Err(invalid()),
    }
}

impl crate::Payload {
    /// [`message_info`] for this payload's metadata and body.
    pub fn info(&self) -> Result<MessageInfo, MetadataError> {
        message_info(&self.metadata, self.body().len())
    }
}
