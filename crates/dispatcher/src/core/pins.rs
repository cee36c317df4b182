//! Key_Shared chunk pins, bounded: which consumer a half-delivered chunked message (and, while
//! it is open, its key) follows.

use std::collections::BTreeMap;

use ahash::AHashMap;
use tracing::warn;

use crate::config::ConsumerId;

/// One pinned chunked message.
#[derive(Clone, Copy, Debug)]
struct UuidPin {
    consumer: ConsumerId,
    hash: u32,
    /// Pin order (for eviction): larger is newer.
    seq: u64,
    /// The consumer a re-sent chunk 0 moved the pin from, until that send is known delivered
    /// or given back ([`ChunkPins::first_chunk_returned`]).
    previous: Option<ConsumerId>,
}

/// uuid → consumer that received chunk 0 of a half-delivered chunked message, and hash →
/// (consumer, open chunked messages of that hash on it). While a chunked message of a key is
/// half-delivered, every later entry of the key follows it to that consumer, so the client
/// completes the messages in position order and nothing waits for something queued behind it.
///
/// **Bound:** at most `max_pins` uuid pins (the chunk assignor's `max_pins`, 100,000 by
/// default). Pinning one more evicts the oldest pin with a WARN: its remaining chunks become
/// orphans (routed by their key, the client discards the incomplete message), and its key pin
/// drops one count. So a last chunk that never comes costs memory only until it is evicted.
/// Hash pins count uuid pins, so they share the bound.
#[derive(Debug)]
pub(super) struct ChunkPins {
    by_uuid: AHashMap<String, UuidPin>,
    by_hash: AHashMap<u32, (ConsumerId, u32)>,
    /// seq → uuid, oldest first.
    order: BTreeMap<u64, String>,
    next_seq: u64,
    max_pins: usize,
    /// The last pins a sent last chunk released (uuid, consumer, hash), newest last, at most
    /// [`RELEASED_KEPT`]: what [`ChunkPins::last_chunk_returned`] may put back.
    released: std::collections::VecDeque<(String, ConsumerId, u32)>,
}

/// Released pins remembered for a last chunk whose delivery comes back.
const RELEASED_KEPT: usize = 64;

impl ChunkPins {
    pub(super) fn new(max_pins: usize) -> Self {
        ChunkPins {
            by_uuid: AHashMap::new(),
            by_hash: AHashMap::new(),
            order: BTreeMap::new(),
            next_seq: 0,
            max_pins: max_pins.max(1),
            released: std::collections::VecDeque::new(),
        }
    }

    /// Uuid pins now.
    pub(super) fn len(&self) -> usize {
        self.by_uuid.len()
    }

    /// The consumer `uuid` is pinned to.
    pub(super) fn consumer_of(&self, uuid: &str) -> Option<ConsumerId> {
        self.by_uuid.get(uuid).map(|p| p.consumer)
    }

    /// The consumer holding a half-delivered chunked message of `hash`.
    pub(super) fn consumer_of_hash(&self, hash: u32) -> Option<ConsumerId> {
        if self.by_hash.is_empty() {
            return None;
        }
        self.by_hash.get(&hash).map(|(c, _)| *c)
    }

    /// Chunk 0 of `uuid` (key `hash`) went to `consumer`. A re-sent chunk 0 re-pins the message
    /// (and its key) to the new consumer.
    pub(super) fn pin(&mut self, uuid: &str, consumer: ConsumerId, hash: u32) {
        let seq = self.next_seq;
        self.next_seq += 1;
        match self.by_uuid.get_mut(uuid) {
            Some(p) => {
                self.order.remove(&p.seq);
                p.previous = Some(p.consumer);
                p.consumer = consumer;
                p.hash = hash;
                p.seq = seq;
                self.order.insert(seq, uuid.to_string());
                if let Some(h) = self.by_hash.get_mut(&hash) {
                    h.0 = consumer;
                }
            }
            None => {
                self.by_uuid.insert(
                    uuid.to_string(),
                    UuidPin {
                        consumer,
                        hash,
                        seq,
                        previous: None,
                    },
                );
                self.order.insert(seq, uuid.to_string());
                let h = self.by_hash.entry(hash).or_insert((consumer, 0));
                h.0 = consumer;
                h.1 += 1;
                while self.by_uuid.len() > self.max_pins {
                    self.evict_oldest();
                }
            }
        }
    }

    /// The last chunk of `uuid` was sent: the message and one count of its key are unpinned.
    pub(super) fn unpin(&mut self, uuid: &str) {
        if let Some(p) = self.by_uuid.remove(uuid) {
            self.order.remove(&p.seq);
            self.unpin_hash(p.hash);
        }
    }

    /// Chunk 0 of `uuid`, sent to `consumer`, never reached it (the delivery was refused or
    /// dropped): the pin its send made is dropped, or the one it moved points back at the
    /// consumer it pointed at before. Nothing when the pin is not `consumer`'s.
    pub(super) fn first_chunk_returned(&mut self, uuid: &str, consumer: ConsumerId) {
        let Some(p) = self.by_uuid.get_mut(uuid) else {
            return;
        };
        if p.consumer != consumer {
            return;
        }
        match p.previous.take() {
            Some(previous) => {
                p.consumer = previous;
                if let Some(h) = self.by_hash.get_mut(&p.hash) {
                    h.0 = previous;
                }
            }
            None => self.unpin(uuid),
        }
    }

    /// The last chunk of `uuid` was sent: its message and one count of its key are unpinned,
    /// and the release is remembered for [`last_chunk_returned`](Self::last_chunk_returned).
    pub(super) fn last_chunk_sent(&mut self, uuid: &str) {
        let Some(p) = self.by_uuid.get(uuid).copied() else {
            return;
        };
        self.unpin(uuid);
        if self.released.len() == RELEASED_KEPT {
            self.released.pop_front();
        }
        self.released
            .push_back((uuid.to_string(), p.consumer, p.hash));
    }

    /// The last chunk of `uuid`, sent to `consumer`, never reached it: the pin its send
    /// released is put back (the message is half-delivered on `consumer` again). Nothing when
    /// its send released none (an orphan last chunk) or the uuid is pinned.
    pub(super) fn last_chunk_returned(&mut self, uuid: &str, consumer: ConsumerId) {
        if self.by_uuid.contains_key(uuid) {
            return;
        }
        let Some(k) = self
            .released
            .iter()
            .rposition(|r| r.0 == uuid && r.1 == consumer)
        else {
            return;
        };
        if let Some((_, _, hash)) = self.released.remove(k) {
            self.pin(uuid, consumer, hash);
        }
    }

    fn evict_oldest(&mut self) {
        let Some((_, uuid)) = self.order.pop_first() else {
            return;
        };
        if let Some(p) = self.by_uuid.remove(&uuid) {
            warn!(uuid = %uuid, consumer = %p.consumer, hash = p.hash, max_pins = self.max_pins, "Key_Shared chunk pin evicted: more than max_pins half-delivered chunked messages");
            self.unpin_hash(p.hash);
        }
    }

    fn unpin_hash(&mut self, hash: u32) {
        if let Some(h) = self.by_hash.get_mut(&hash) {
            h.1 = h.1.saturating_sub(1);
            if h.1 == 0 {
                self.by_hash.remove(&hash);
            }
        }
    }

    /// Drops every pin to `consumer` (it left).
    pub(super) fn remove_consumer(&mut self, consumer: ConsumerId) {
        let order = &mut self.order;
        self.by_uuid.retain(|_, p| {
            let keep = p.consumer != consumer;
            if !keep {
                order.remove(&p.seq);
            }
            keep
        });
        self.by_hash.retain(|_, (c, _)| *c != consumer);
    }

    /// Drops every pin (the last consumer left).
    pub(super) fn clear(&mut self) {
        self.by_uuid.clear();
        self.by_hash.clear();
        self.order.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_pin_is_evicted_beyond_the_bound_and_its_key_pin_counts_down() {
        let (a, b) = (ConsumerId(1), ConsumerId(2));
        let mut p = ChunkPins::new(2);
        p.pin("u1", a, 7);
        p.pin("u2", a, 7);
        p.pin("u3", b, 9);
        assert_eq!(p.len(), 2);
        assert_eq!(p.consumer_of("u1"), None);
        assert_eq!(p.consumer_of_hash(7), Some(a)); // u2 still open
        p.unpin("u2");
        assert_eq!(p.consumer_of_hash(7), None);
        assert_eq!(p.consumer_of_hash(9), Some(b));
        p.remove_consumer(b);
        assert_eq!(p.len(), 0);
        assert_eq!(p.consumer_of_hash(9), None);
    }

    /// A send that never reached its consumer gives the pins back: a new chunk 0's pin goes, a
    /// re-sent chunk 0's pin (and its key's) points back at the consumer before, a last chunk
    /// pins its message (and key) to the consumer that has its first chunks again; a chunk 0
    /// of a pin now another consumer's changes nothing.
    #[test]
    fn an_undelivered_chunk_gives_its_pin_back() {
        let (a, b) = (ConsumerId(1), ConsumerId(2));
        let mut p = ChunkPins::new(10);
        p.pin("u", a, 7);
        p.first_chunk_returned("u", a);
        assert_eq!((p.len(), p.consumer_of_hash(7)), (0, None));

        p.pin("u", a, 7);
        p.pin("u", b, 7); // chunk 0 re-sent to b
        p.first_chunk_returned("u", a);
        assert_eq!(p.consumer_of("u"), Some(b), "not a's pin any more");
        p.first_chunk_returned("u", b);
        assert_eq!(p.consumer_of("u"), Some(a));
        assert_eq!(p.consumer_of_hash(7), Some(a));

        p.last_chunk_sent("u"); // the last chunk went to a...
        assert_eq!(p.len(), 0);
        p.last_chunk_returned("u", b);
        assert_eq!(p.len(), 0, "b's send released nothing");
        p.last_chunk_returned("u", a); // ...and never reached it
        assert_eq!(
            (p.consumer_of("u"), p.consumer_of_hash(7)),
            (Some(a), Some(a))
        );
        p.last_chunk_returned("orphan", a);
        assert_eq!(
            p.len(),
            1,
            "an orphan last chunk released no pin, so none comes back"
        );
    }
}
