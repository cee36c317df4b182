//! The per-key gate: how many messages of a key the application holds, and which nacked
//! messages of the key block later ones (ordered mode).

use std::collections::BTreeMap;

use crate::hash::HashMap;

use crate::types::{EntryId, MessageId};

/// Where a nacked (blocking) message is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Blocker {
    /// Given back to the broker; later messages of the key that arrive are released.
    Awaiting,
    /// Redelivered and waiting in the receive queue; it is the next message of the key.
    Queued,
    /// Handed to the application again; later messages wait until it is acked.
    Handed,
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

    /// Ordered mode: classifies an arriving message and marks a returning blocker as queued.
    pub(crate) fn on_arrival(&mut self, key: &[u8], id: MessageId) -> Arrival {
        let Some(st) = self.keys.get_mut(key) else {
            return Arrival::Queue;
        };
        if st
            .blockers
            .range(..id)
            .any(|(_, b)| *b == Blocker::Awaiting)
        {
            return Arrival::Release;
        }
        if let Some(b) = st.blockers.get_mut(&id) {
            if *b == Blocker::Awaiting {
                *b = Blocker::Queued;
            }
        }
        Arrival::Queue
    }

    /// May a queued message `id` of `key` be handed to the application now?
    pub(crate) fn eligible(&self, key: &[u8], id: MessageId, max_in_hands: Option<u32>) -> bool {
        let Some(st) = self.keys.get(key) else {
            return true;
        };
        if let Some((&b, &state)) = st.blockers.first_key_value() {
            if id > b || (id == b && state == Blocker::Handed) {
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
            if let Some(b) = st.blockers.get_mut(&id) {
                *b = Blocker::Handed;
            }
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
            earlier = st.blockers.range(..id).next().is_some();
        }
        self.gc(key);
        earlier
    }

    /// Ordered mode: `id` of `key` was nacked (or timed out); it now blocks later messages.
    pub(crate) fn block(&mut self, key: &[u8], id: MessageId) {
        self.keys
            .entry(key.to_vec())
            .or_default()
            .blockers
            .insert(id, Blocker::Awaiting);
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

    /// A new connection: redelivered blockers in the (cleared) queue are awaited again.
    pub(crate) fn on_reconnect(&mut self) {
        for st in self.keys.values_mut() {
            for b in st.blockers.values_mut() {
                if *b == Blocker::Queued {
                    *b = Blocker::Awaiting;
                }
            }
        }
    }
}
