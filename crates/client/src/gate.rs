//! The per-key gate: how many messages of a key the application holds, and which nacked or
//! released messages of the key block later ones (ordered mode).
//!
//! **When a blocker ends.** A blocker is a message of key `K` this client gave back (nacked,
//! timed out, or released because an earlier one was blocking). It blocks every later message of
//! `K` until it comes back here, or until the broker shows it went elsewhere. The second rule
//! rests on two broker guarantees and on FIFO connections:
//!
//! * after the broker processed the `Nack` of `m` it dispatches no message of `K` until `m` is
//!   re-sent (the hold), and after it processed a `Release` of `r` it dispatches no later
//!   message of `K` before `r` (replay order); a key cannot move to another consumer while this
//!   one has pending entries of it, nor back here while the other one does;
//! * the broker dispatches an entry only while the consumer's permit balance is positive, so an
//!   entry dispatched before the broker read a command starts within the permits granted before
//!   that command (its *fence*: permits granted on the connection when the command was queued;
//!   0 once the connection changed, since the old connection's entries were all redelivered).
//!
//! So a message of `K`, later than a blocker `b` still awaited, whose entry starts beyond `b`'s
//! fence was dispatched after the broker read `b`'s command: `b` was re-sent first, and since it
//! did not arrive here first it went to another consumer (or was dropped), which finished it
//! before `K` came back. `b` stops blocking. A message within the fence was on the wire before
//! the broker read the command: it is released, and becomes a blocker itself (so a message the
//! broker sent before it saw that release cannot overtake it either).

use std::collections::BTreeMap;

use crate::hash::HashMap;

use crate::types::{EntryId, MessageId};

/// Where a blocking message is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Where {
    /// Given back to the broker; later messages of the key that arrive are released.
    Awaiting,
    /// Redelivered and waiting in the receive queue; it is the next message of the key.
    Queued,
    /// Handed to the application again; later messages wait until it is acked (nacked
    /// blockers only: a released one stops blocking once handed).
    Handed,
}

/// A message of the key given back to the broker that later messages must not overtake.
#[derive(Clone, Copy, Debug)]
struct Blocker {
    at: Where,
    /// Released (never handed to the application) rather than nacked.
    released: bool,
    /// Permits granted on the current connection when its command was queued.
    fence: u64,
}

#[derive(Default)]
struct KeyState {
    in_hands: u32,
    blockers: BTreeMap<MessageId, Blocker>,
}

/// What to do with a message of a key on arrival.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Arrival {
    /// Queue it.
    Queue,
    /// Give it back: an earlier message of its key is nacked and not re-sent yet.
    Release,
}

#[derive(Default)]
pub(crate) struct Gate {
    keys: HashMap<Vec<u8>, KeyState>,
}

impl Gate {
    pub(crate) fn held_keys(&self) -> usize {
        self.keys
            .values()
            .filter(|k| !k.blockers.is_empty())
            .count()
    }

    fn gc(&mut self, key: &[u8]) {
        if self
            .keys
            .get(key)
            .is_some_and(|k| k.in_hands == 0 && k.blockers.is_empty())
        {
            self.keys.remove(key);
        }
    }

    /// Ordered mode: classifies an arriving message `id` (first chunk `first`; `id` otherwise)
    /// whose entry starts at permit `seq` of the connection (1-based), ends the blockers it
    /// shows went elsewhere (see the module docs) and marks a returning blocker as queued.
    /// Returns how many blockers ended. Only blockers before `first` can end: the broker's hold
    /// covers entries after the held one, and a chunked message may start before it.
    pub(crate) fn on_arrival(
        &mut self,
        key: &[u8],
        id: MessageId,
        first: MessageId,
        seq: u64,
    ) -> (Arrival, usize) {
        let Some(st) = self.keys.get_mut(key) else {
            return (Arrival::Queue, 0);
        };
        let before = st.blockers.len();
        let mut ended = Vec::new();
        for (b, blk) in st.blockers.range(..first.min(id)) {
            if blk.at == Where::Awaiting && seq > blk.fence {
                ended.push(*b);
            }
        }
        for b in &ended {
            st.blockers.remove(b);
        }
        let ended = before - st.blockers.len();
        if st
            .blockers
            .range(..id)
            .any(|(_, b)| b.at == Where::Awaiting)
        {
            return (Arrival::Release, ended);
        }
        if let Some(b) = st.blockers.get_mut(&id) {
            if b.at == Where::Awaiting {
                b.at = Where::Queued;
            }
        }
        self.gc(key);
        (Arrival::Queue, ended)
    }

    /// May a queued message `id` of `key` be handed to the application now?
    pub(crate) fn eligible(&self, key: &[u8], id: MessageId, max_in_hands: Option<u32>) -> bool {
        let Some(st) = self.keys.get(key) else {
            return true;
        };
        if let Some((&b, blk)) = st.blockers.first_key_value() {
            if id > b || (id == b && blk.at == Where::Handed) {
                return false;
            }
        }
        max_in_hands.is_none_or(|n| st.in_hands < n)
    }

    /// The application was handed `id`; `fresh` is false when it already held that id;
    /// `count` when the per-key limit is on (in-hands counts are kept only then).
    pub(crate) fn on_handed(&mut self, key: &[u8], id: MessageId, fresh: bool, count: bool) {
        if let Some(st) = self.keys.get_mut(key) {
            if fresh && count {
                st.in_hands += 1;
            }
            match st.blockers.get(&id) {
                Some(b) if b.released => {
                    st.blockers.remove(&id);
                }
                Some(_) => {
                    if let Some(b) = st.blockers.get_mut(&id) {
                        b.at = Where::Handed;
                    }
                }
                None => {}
            }
            self.gc(key);
        } else if fresh && count {
            self.keys.insert(
                key.to_vec(),
                KeyState {
                    in_hands: 1,
                    blockers: BTreeMap::new(),
                },
            );
        }
    }

    /// The application gave `id` back (acked when `acked`, else nacked): one fewer in its
    /// hands. Returns whether an earlier message of the key is still blocking (an out-of-order
    /// ack).
    pub(crate) fn on_left_hands(
        &mut self,
        key: &[u8],
        id: MessageId,
        acked: bool,
        count: bool,
    ) -> bool {
        let Some(st) = self.keys.get_mut(key) else {
            return false;
        };
        if count {
            st.in_hands = st.in_hands.saturating_sub(1);
        }
        let mut earlier = false;
        if acked {
            st.blockers.remove(&id);
            earlier = st.blockers.range(..id).any(|(_, b)| !b.released);
        }
        self.gc(key);
        earlier
    }

    /// Ordered mode: `id` of `key` was nacked (or timed out), or released when `released`; it
    /// now blocks later messages. `fence`: permits granted on the connection so far.
    /// A nacked message released again (an earlier one was nacked meanwhile) stays a nacked
    /// blocker: later messages still wait until it is acked.
    pub(crate) fn block(&mut self, key: &[u8], id: MessageId, released: bool, fence: u64) {
        let blockers = &mut self.keys.entry(key.to_vec()).or_default().blockers;
        let released = released && blockers.get(&id).is_none_or(|b| b.released);
        blockers.insert(
            id,
            Blocker {
                at: Where::Awaiting,
                released,
                fence,
            },
        );
    }

    /// Stops waiting for every nacked message of `entry` (the broker dropped it). Returns
    /// whether one was blocking.
    pub(crate) fn unblock_entry(&mut self, entry: EntryId) -> bool {
        let mut hit = false;
        for st in self.keys.values_mut() {
            let before = st.blockers.len();
            st.blockers.retain(|id, _| id.entry() != entry);
            hit |= st.blockers.len() != before;
        }
        if hit {
            self.keys
                .retain(|_, st| st.in_hands > 0 || !st.blockers.is_empty());
        }
        hit
    }

    /// A new connection: redelivered blockers in the (cleared) queue are awaited again, and
    /// every awaited blocker's fence drops to 0 (whatever the new connection brings was
    /// dispatched after the broker read, or lost with the old connection, the commands).
    pub(crate) fn on_reconnect(&mut self) {
        for st in self.keys.values_mut() {
            for b in st.blockers.values_mut() {
                if b.at == Where::Queued {
                    b.at = Where::Awaiting;
                }
                if b.at == Where::Awaiting {
                    b.fence = 0;
                }
            }
        }
    }
}
