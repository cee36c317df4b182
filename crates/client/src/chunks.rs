//! Chunk reassembly: one context per uuid, in-order append, policy-free (the consumer decides
//! what to ack, track or redeliver from the returned [`Step`] and [`Side`] effects).

use std::collections::BTreeMap;

use crate::hash::HashMap;

use crate::types::{ChunkInfo, IncomingMessage, MessageId};

struct Ctx {
    seq: u64,
    /// The connection's permit sequence number of chunk 0.
    first_seq: u64,
    created: u64,
    last: u32,
    num_chunks: u32,
    ids: Vec<MessageId>,
    payload: Vec<u8>,
    key: Option<Vec<u8>>,
    publish_time: u64,
    redelivery_count: u32,
}

/// A completed chunked message.
pub(crate) struct Complete {
    pub(crate) ids: Vec<MessageId>,
    pub(crate) payload: Vec<u8>,
    pub(crate) key: Option<Vec<u8>>,
    pub(crate) publish_time: u64,
    pub(crate) redelivery_count: u32,
    /// The connection's permit sequence number of chunk 0 (see the gate's fences).
    pub(crate) first_seq: u64,
}

/// What happened to one chunk.
pub(crate) enum Step {
    /// Appended; the message is not complete yet.
    Partial,
    /// The final chunk: the whole message.
    Complete(Complete),
    /// A chunk at or below the last appended one; `ack` when it is not one of the recorded ids
    /// (a duplicate publish rather than a redelivery of a recorded chunk).
    Duplicate { ack: bool },
    /// No context, or a chunk that skips ahead; `broken` are the chunk ids of the context it
    /// dropped (empty for an orphan).
    Unexpected { broken: Vec<MessageId> },
    /// A chunk 0 refused because `max_pending` messages are being reassembled (only when the
    /// caller asked to refuse rather than evict).
    Refused,
}

/// Side effects of a chunk 0.
#[derive(Default)]
pub(crate) struct Side {
    /// Chunk ids of a corrupted earlier attempt of the same uuid, to ack.
    pub(crate) ack: Vec<MessageId>,
    /// Chunk ids of contexts evicted because too many were pending (oldest first).
    pub(crate) evicted: Vec<(String, Vec<MessageId>)>,
}

#[derive(Default)]
pub(crate) struct Chunks {
    ctxs: HashMap<String, Ctx>,
    order: BTreeMap<u64, String>,
    next_seq: u64,
}

impl Chunks {
    pub(crate) fn len(&self) -> usize {
        self.ctxs.len()
    }

    pub(crate) fn clear(&mut self) {
        self.ctxs.clear();
        self.order.clear();
    }

    fn remove(&mut self, uuid: &str) -> Option<Ctx> {
        let c = self.ctxs.remove(uuid)?;
        self.order.remove(&c.seq);
        Some(c)
    }

    /// Feeds one validated chunk (`info.chunk_id < info.num_chunks`, non-empty uuid) that is
    /// message `conn_seq` of its connection. When `max_pending` messages are being
    /// reassembled, a new chunk 0 evicts the oldest (into `side.evicted`), or is refused when
    /// `refuse_when_full`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_chunk(
        &mut self,
        now: u64,
        conn_seq: u64,
        msg: IncomingMessage,
        info: &ChunkInfo,
        max_pending: usize,
        refuse_when_full: bool,
        side: &mut Side,
    ) -> Step {
        if info.chunk_id == 0 {
            if let Some(old) = self.remove(&info.uuid) {
                if !old.ids.contains(&msg.id) {
                    side.ack.extend(old.ids);
                }
            }
            if refuse_when_full && info.num_chunks > 1 && self.ctxs.len() >= max_pending {
                return Step::Refused;
            }
            while self.ctxs.len() >= max_pending {
                let Some((_, uuid)) = self.order.pop_first() else {
                    break;
                };
                if let Some(c) = self.ctxs.remove(&uuid) {
                    side.evicted.push((uuid, c.ids));
                }
            }
            let seq = self.next_seq;
            self.next_seq += 1;
            let mut payload = Vec::with_capacity((info.total_size as usize).min(1 << 24));
            payload.extend_from_slice(&msg.payload);
            let ctx = Ctx {
                seq,
                first_seq: conn_seq,
                created: now,
                last: 0,
                num_chunks: info.num_chunks,
                ids: vec![msg.id],
                payload,
                key: msg.key,
                publish_time: msg.publish_time,
                redelivery_count: msg.redelivery_count,
            };
            if info.num_chunks == 1 {
                return Step::Complete(Self::finish(ctx));
            }
            self.order.insert(seq, info.uuid.clone());
            self.ctxs.insert(info.uuid.clone(), ctx);
            return Step::Partial;
        }
        let Some(ctx) = self.ctxs.get_mut(&info.uuid) else {
            return Step::Unexpected { broken: Vec::new() };
        };
        if info.chunk_id <= ctx.last {
            return Step::Duplicate {
                ack: !ctx.ids.contains(&msg.id),
            };
        }
        if info.chunk_id != ctx.last + 1 || info.num_chunks != ctx.num_chunks {
            let broken = self.remove(&info.uuid).map(|c| c.ids).unwrap_or_default();
            return Step::Unexpected { broken };
        }
        ctx.last = info.chunk_id;
        ctx.ids.push(msg.id);
        ctx.payload.extend_from_slice(&msg.payload);
        ctx.redelivery_count = ctx.redelivery_count.max(msg.redelivery_count);
        if info.chunk_id + 1 == ctx.num_chunks {
            if let Some(c) = self.remove(&info.uuid) {
                return Step::Complete(Self::finish(c));
            }
        }
        Step::Partial
    }

    fn finish(c: Ctx) -> Complete {
        Complete {
            ids: c.ids,
            payload: c.payload,
            key: c.key,
            publish_time: c.publish_time,
            redelivery_count: c.redelivery_count,
            first_seq: c.first_seq,
        }
    }

    /// Removes contexts created at or before `now - after` (oldest first) and returns them.
    pub(crate) fn expire(&mut self, now: u64, after: u64) -> Vec<(String, Vec<MessageId>)> {
        let mut out = Vec::new();
        while let Some((_, uuid)) = self.order.first_key_value() {
            let Some(c) = self.ctxs.get(uuid) else { break };
            if c.created.saturating_add(after) > now {
                break;
            }
            let uuid = uuid.clone();
            if let Some(c) = self.remove(&uuid) {
                out.push((uuid, c.ids));
            }
        }
        out
    }

    /// When the oldest context expires.
    pub(crate) fn next_expiry(&self, after: u64) -> Option<u64> {
        let (_, uuid) = self.order.first_key_value()?;
        self.ctxs.get(uuid).map(|c| c.created.saturating_add(after))
    }
}
