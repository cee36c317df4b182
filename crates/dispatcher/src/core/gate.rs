//! The dispatch predicate: may an entry of a hash go to a consumer, at which gate.

use super::*;

/// Where the dispatch predicate is asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Entries from a normal (cursor) read.
    NormalRead,
    /// Choosing which replay positions to read.
    ReplayPick,
    /// Adding to the consumer's pending acks right before the send (the add handler).
    SendTime,
}

/// The answer of the dispatch predicate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The entry may go to the consumer.
    Allow,
    /// An earlier entry of the hash waits in replay (normal reads only).
    BehindReplay,
    /// Another consumer still drains the hash.
    Draining,
}

/// The draining part of the dispatch predicate, shared with the send-time add handler.
///
/// At the read and replay gates it is the tracker's `should_block` (which counts blocked
/// attempts and lazily drops an entry whose hash came back to its owner). At send time it only
/// looks (the attempt was counted at the first gate, and a pinned chunk may legitimately go to
/// the owner of a draining entry without ending it).
pub(super) fn draining_conflict(
    draining: &DrainingHashes<ConsumerId>,
    gate: Gate,
    consumer: ConsumerId,
    hash: u32,
) -> bool {
    if hash == 0 {
        return false;
    }
    match gate {
        Gate::SendTime => draining.get(hash).is_some_and(|e| e.owner != consumer),
        Gate::NormalRead | Gate::ReplayPick => draining.should_block(consumer, hash),
    }
}

impl Dispatcher {
    /// THE dispatch predicate, used at every gate: may an entry with `hash` go to `consumer`?
    ///
    /// A normal read never sends a hash that waits in replay (ordered mode); no gate sends a
    /// hash that another consumer still drains. Shared subscriptions always allow.
    pub fn can_dispatch(&self, gate: Gate, consumer: ConsumerId, hash: u32) -> Verdict {
        if gate == Gate::NormalRead && self.replay.contains_hash(hash) {
            return Verdict::BehindReplay;
        }
        if let Some(dr) = self.mode.key_shared().and_then(|k| k.draining.as_ref()) {
            if draining_conflict(dr, gate, consumer, hash) {
                return Verdict::Draining;
            }
        }
        Verdict::Allow
    }
}
