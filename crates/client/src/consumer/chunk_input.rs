//! Chunked input: a chunk's step in the reassembly and what the consumer does about it.

use tracing::{debug, trace, warn};

use super::{Consumer, GIVEN_BACK_MAX};
use crate::chunks::{Side, Step};
use crate::config::OrphanChunkPolicy;
use crate::types::{ChunkInfo, Delivered, IncomingMessage, MessageId};

impl Consumer {
    pub(super) fn on_chunk(
        &mut self,
        now: u64,
        msg: IncomingMessage,
        info: &ChunkInfo,
    ) -> Option<(Delivered, u64)> {
        let id = msg.id;
        let publish_time = msg.publish_time;
        let mut side = Side::default();
        let step = self.chunks.on_chunk(
            now,
            self.charged,
            msg,
            info,
            self.cfg.max_pending_chunked_messages,
            !self.cfg.auto_ack_oldest_chunked_on_queue_full,
            &mut side,
        );
        if !side.ack.is_empty() {
            warn!(uuid = %info.uuid, chunks = side.ack.len(), "chunk 0 restarts a corrupted chunked message; acking its chunks");
            self.send_ack(side.ack);
        }
        for (uuid, ids) in side.evicted {
            self.stats.evicted_chunked += 1;
            warn!(uuid = %uuid, chunks = ids.len(), auto_ack = self.cfg.auto_ack_oldest_chunked_on_queue_full, "too many pending chunked messages; evicting the oldest");
            if self.cfg.auto_ack_oldest_chunked_on_queue_full {
                self.send_ack(ids);
            } else {
                let entries: Vec<_> = ids.iter().map(MessageId::entry).collect();
                let delay = self.cfg.nack_delay;
                self.schedule_nack(now, entries, delay);
            }
        }
        match step {
            Step::Partial => {
                if info.chunk_id == 0 {
                    self.given_back.remove(&info.uuid);
                }
                trace!(uuid = %info.uuid, chunk_id = info.chunk_id, "chunk appended");
                self.return_permits(1);
                None
            }
            Step::Complete(c) => {
                self.given_back.remove(&info.uuid);
                self.stats.completed_chunked += 1;
                trace!(uuid = %info.uuid, chunks = c.ids.len(), "chunked message complete");
                let last = c.ids.last().copied().unwrap_or(id);
                let d = Delivered {
                    id: last,
                    key: c.key,
                    payload: c.payload,
                    publish_time: c.publish_time,
                    redelivery_count: c.redelivery_count,
                    batch: None,
                    chunk_ids: c.ids,
                };
                Some((d, c.first_seq))
            }
            Step::Duplicate { ack } => {
                self.stats.duplicate_chunks += 1;
                debug!(uuid = %info.uuid, chunk_id = info.chunk_id, id = %id, ack, "duplicate chunk dropped");
                self.return_permits(1);
                if ack {
                    self.send_ack(vec![id]);
                }
                None
            }
            Step::Refused => {
                self.on_refused_chunk(now, id, info);
                None
            }
            Step::Unexpected { broken }
                if broken.is_empty()
                    && self
                        .given_back
                        .get(&info.uuid)
                        .is_some_and(|&until| now <= until) =>
            {
                // A later chunk of a message refused for lack of room: it goes back too (acking
                // it would make the message impossible to complete).
                debug!(uuid = %info.uuid, chunk_id = info.chunk_id, id = %id, "later chunk of a given-back chunked message given back");
                self.return_permits(1);
                self.give_back_chunk(now, id);
                None
            }
            Step::Unexpected { broken } => {
                self.on_unexpected_chunk(now, id, info, publish_time, broken);
                None
            }
        }
    }

    /// Schedules chunk `id` of a chunked message refused for lack of room for redelivery after
    /// the nack delay.
    fn give_back_chunk(&mut self, now: u64, id: MessageId) {
        let delay = self.cfg.nack_delay;
        self.schedule_nack(now, vec![id.entry()], delay);
    }

    /// A chunked message refused for lack of room: given back, and its later chunks with it.
    fn on_refused_chunk(&mut self, now: u64, id: MessageId, info: &ChunkInfo) {
        self.stats.evicted_chunked += 1;
        warn!(uuid = %info.uuid, id = %id, pending = self.chunks.len(), "too many pending chunked messages; giving the new one back");
        self.return_permits(1);
        // Its later chunks go back too for as long as the message could still be
        // reassembled somewhere: after the nack delay and an incomplete-chunk expiry any
        // context of it is gone, and a late chunk is an orphan like any other.
        let until = self
            .cfg
            .expire_incomplete_chunked_after
            .map_or(u64::MAX, |e| {
                now.saturating_add(self.cfg.nack_delay).saturating_add(e)
            });
        if self.given_back.insert(info.uuid.clone(), until).is_none() {
            self.given_back_order.push_back(info.uuid.clone());
            while self.given_back_order.len() > GIVEN_BACK_MAX {
                if let Some(old) = self.given_back_order.pop_front() {
                    self.given_back.remove(&old);
                }
            }
        }
        self.give_back_chunk(now, id);
    }

    /// An orphan or out-of-order chunk: discarded, then acked or left to the ack timeout as
    /// the orphan policy says.
    fn on_unexpected_chunk(
        &mut self,
        now: u64,
        id: MessageId,
        info: &ChunkInfo,
        publish_time: u64,
        broken: Vec<MessageId>,
    ) {
        self.stats.unexpected_chunks += 1;
        warn!(uuid = %info.uuid, chunk_id = info.chunk_id, num_chunks = info.num_chunks, id = %id, broken = broken.len(), policy = ?self.cfg.orphan_chunk_policy, "unexpected chunk discarded");
        // Deviation from Pulsar's client: a discarded chunk always returns its permit.
        self.return_permits(1);
        match self.cfg.orphan_chunk_policy {
            OrphanChunkPolicy::Ack => {
                let mut ids = broken;
                ids.push(id);
                self.send_ack(ids);
            }
            OrphanChunkPolicy::Pulsar => {
                let old = self
                    .cfg
                    .expire_incomplete_chunked_after
                    .is_some_and(|e| now > publish_time.saturating_add(e));
                if old {
                    self.send_ack(vec![id]);
                } else {
                    self.ack_timeouts.add(now, id);
                }
            }
        }
    }
}
