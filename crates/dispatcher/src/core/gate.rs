//! The dispatch predicate: may an entry of a hash go to a consumer, at which gate.

use draining_hashes::SendCheck;

use super::*;
use crate::shared::KeySerial;

/// Where the dispatch predicate is asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DispatchGate {
    /// Entries from a normal (cursor) read.
    NormalRead,
    /// Choosing which replay positions to read.
    ReplayPick,
    /// Right before the send, as a query: the send step itself runs `send_gate` inside the
    /// pending-acks lock (same rule, and it counts).
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
    /// Key-serial dispatch: the key already has its allowed number of unacked entries.
    KeySerial,
}

/// The draining part of the dispatch predicate.
///
/// At the read and replay gates it is the tracker's `should_block` (which counts blocked
/// attempts and lazily drops an entry whose hash came back to its owner). At send time it only
/// looks (the attempt was counted at the first gate, and a pinned chunk may legitimately go to
/// the owner of a draining entry without ending it).
pub(super) fn draining_conflict(
    draining: &DrainingHashes<ConsumerId>,
    gate: DispatchGate,
    consumer: ConsumerId,
    hash: u32,
) -> bool {
    if hash == 0 {
        return false;
    }
    match gate {
        DispatchGate::SendTime => draining.get(hash).is_some_and(|e| e.owner != consumer),
        DispatchGate::NormalRead | DispatchGate::ReplayPick => {
            draining.should_block(consumer, hash)
        }
    }
}

impl Dispatcher {
    /// The dispatch predicate at the read and replay gates: may an entry with `hash` go to
    /// `consumer`? A normal read never sends a hash that waits in replay (ordered mode); no gate
    /// sends a hash that another consumer still drains. Shared subscriptions always allow.
    ///
    /// Entries following a pin (a chunked message's later chunks, or a key with a half-sent
    /// chunked message) skip the draining rule here: their consumer already holds the key. Every
    /// send, pinned or not, then passes the send-time gate inside the pending-acks lock; at
    /// [`DispatchGate::SendTime`] this method is that gate's question without its counting.
    pub fn can_dispatch(&self, gate: DispatchGate, consumer: ConsumerId, hash: u32) -> Verdict {
        if gate == DispatchGate::NormalRead && self.replay.contains_hash(hash) {
            return Verdict::BehindReplay;
        }
        if let Some(dr) = self.mode.key_shared().and_then(|k| k.draining.as_ref()) {
            if draining_conflict(dr, gate, consumer, hash) {
                return Verdict::Draining;
            }
        }
        if let Some(ks) = self.mode.key_shared().and_then(|k| k.key_serial.as_ref()) {
            if ks.at_limit(hash) {
                return Verdict::KeySerial;
            }
        }
        Verdict::Allow
    }
}

/// THE send-time gate: runs inside the consumer's pending-acks lock right before an entry is
/// recorded as sent ([`PendingAcks::add_if`](pending_acks::PendingAcks::add_if)), so the check
/// and the draining reference it may take are atomic with the insert. Refuses while another
/// consumer drains `hash`; when this very consumer drains it (a send decided before the range
/// moved) the tracker counts one more reference. A `pinned` entry (a chunk or key pinned to
/// this consumer while its hash maps elsewhere) that finds the hash not draining starts draining
/// it on this consumer, so the new owner waits for it too.
///
/// [`Dispatcher::can_dispatch`] at [`DispatchGate::SendTime`] asks the same question without counting.
pub(super) fn send_gate(
    draining: Option<&DrainingHashes<ConsumerId>>,
    key_serial: Option<&KeySerial>,
    consumer: ConsumerId,
    pos: PendingPos,
    hash: u32,
    pinned: bool,
    continuation: bool,
) -> bool {
    if hash == 0 {
        return true;
    }
    // Key-serial first (it has no side effect until it takes): a continuation chunk is never
    // held (its message started), but it counts.
    if let Some(ks) = key_serial {
        if !continuation && ks.at_limit(hash) {
            debug!(consumer = %consumer, ledger = pos.0, entry = pos.1, hash, "send-time add refused: key at its unacked limit");
            return false;
        }
    }
    let allowed = match draining {
        Some(dr) => draining_gate(dr, consumer, pos, hash, pinned),
        None => true,
    };
    if allowed {
        if let Some(ks) = key_serial {
            ks.take(hash);
        }
    }
    allowed
}

/// The draining half of [`send_gate`].
fn draining_gate(
    draining: &DrainingHashes<ConsumerId>,
    consumer: ConsumerId,
    pos: PendingPos,
    hash: u32,
    pinned: bool,
) -> bool {
    match draining.check_send(consumer, hash) {
        SendCheck::Blocked { owner } => {
            debug!(consumer = %consumer, owner = %owner, ledger = pos.0, entry = pos.1, hash, "send-time add refused: hash drains on another consumer");
            false
        }
        SendCheck::Counted { .. } => true,
        SendCheck::NotDraining => {
            if pinned {
                if let Err(e) = draining.add_entry(consumer, hash) {
                    warn!(consumer = %consumer, hash, error = %e, "could not count a pinned chunk in draining");
                }
            }
            true
        }
    }
}
