//! Frame, batch and JSON helpers: strict frame parsing, batch sections written and read as a
//! client does, MESSAGE frames decoded into the client's messages, `internalStats` fields.

use client::{BatchInfo, ChunkInfo, IncomingMessage, MessageId};
use cursor::Position;
use prost::Message as _;
use wire::proto::{MessageMetadata, SingleMessageMetadata};

use crate::sim::check::key_str;

/// Every frame in `buf`, each checked as the strictest client reads it.
pub(super) fn frames_of(buf: &[u8]) -> Result<Vec<wire::Frame>, String> {
    wire::strict::frames(buf)
        .map(|f| {
            let f = f.map_err(|e| e.to_string())?;
            wire::strict::check_frame(f).map_err(|e| e.to_string())?;
            wire::decode_frame(f).map_err(|e| e.to_string())
        })
        .collect()
}

/// A batch section: per message `[u32 size][SingleMessageMetadata][payload]`.
pub(super) fn batch_body(m: &MessageMetadata, n: u32) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..n {
        let body = format!("{}-{}#{i}", m.producer_name, m.sequence_id).into_bytes();
        let single = SingleMessageMetadata {
            payload_size: body.len() as i32,
            ordering_key: m.ordering_key.clone(),
            ..Default::default()
        }
        .encode_to_vec();
        out.extend_from_slice(&(single.len() as u32).to_be_bytes());
        out.extend_from_slice(&single);
        out.extend_from_slice(&body);
    }
    out
}

/// Reads a batch section as a client does; the number of messages found.
pub(super) fn read_batch(mut body: &[u8]) -> Result<u32, String> {
    let mut n = 0;
    while !body.is_empty() {
        let size = body
            .get(..4)
            .map(|s| u32::from_be_bytes([s[0], s[1], s[2], s[3]]) as usize)
            .ok_or("truncated size")?;
        let meta = body.get(4..4 + size).ok_or("truncated metadata")?;
        let single = SingleMessageMetadata::decode(meta).map_err(|e| e.to_string())?;
        let end = 4 + size + usize::try_from(single.payload_size).map_err(|e| e.to_string())?;
        body = body.get(end..).ok_or("truncated payload")?;
        n += 1;
    }
    Ok(n)
}

/// `L:E` of `internalStats` (`L:-1`: before the ledger's first entry).
pub(super) fn parse_position(s: &str) -> Option<Position> {
    let (l, e) = s.split_once(':')?;
    let e = if e == "-1" { u64::MAX } else { e.parse().ok()? };
    Some(Position::new(l.parse().ok()?, e))
}

pub(super) fn key_of(m: &MessageMetadata) -> Option<Vec<u8>> {
    m.ordering_key
        .clone()
        .or_else(|| m.partition_key.clone().map(String::into_bytes))
}

pub(super) fn key_text(k: Option<&[u8]>) -> String {
    k.map(key_str).unwrap_or_else(|| "-".into())
}

/// The messages a client decodes from one MESSAGE frame (batch indexes its `ack_set` marks
/// as acked flagged so the client skips them).
pub(super) fn incoming(epoch: u64, f: &wire::Frame) -> Result<Vec<IncomingMessage>, String> {
    let m = f.command.message.as_ref().ok_or("not a MESSAGE")?;
    let p = f.payload.as_ref().ok_or("a MESSAGE without its payload")?;
    let md = &p.metadata;
    let (l, e) = (m.message_id.ledger_id, m.message_id.entry_id);
    let chunk = md.uuid.as_ref().map(|u| ChunkInfo {
        uuid: u.clone(),
        chunk_id: md.chunk_id.unwrap_or(0) as u32,
        num_chunks: md.num_chunks_from_msg.unwrap_or(1) as u32,
        total_size: md.total_chunk_msg_size.unwrap_or(0) as u32,
    });
    let n = md.num_messages_in_batch.unwrap_or(1).max(1) as u32;
    let base = IncomingMessage {
        epoch,
        id: MessageId::new(l, e),
        key: key_of(md),
        publish_time: md.publish_time,
        redelivery_count: m.redelivery_count.unwrap_or(0),
        batch: None,
        chunk,
        payload: Vec::new(),
        already_acked: false,
    };
    if n <= 1 || base.chunk.is_some() {
        return Ok(vec![base]);
    }
    let found = read_batch(p.body()).map_err(|e| format!("unreadable batch: {e}"))?;
    if found != n {
        return Err(format!("batch of {n} holds {found} messages"));
    }
    let acked = if m.ack_set.is_empty() {
        Vec::new()
    } else {
        wire::convert::acked_indexes_from_ack_set(&m.ack_set, n)
    };
    Ok((0..n)
        .map(|i| IncomingMessage {
            id: MessageId::batched(l, e, i),
            batch: Some(BatchInfo { index: i, size: n }),
            already_acked: acked.contains(&i),
            ..base.clone()
        })
        .collect())
}
