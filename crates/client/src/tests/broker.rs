//! A tiny fake broker for one consumer, single-entry messages only: it honours permits,
//! replays the smallest position first, and (when `hold` is on) implements the broker half of
//! ordered nack like the dispatcher: a `Nack` of `m` holds back every later message of its key
//! until `m` is re-sent after its delay (each nacked message holds on its own, as the
//! dispatcher's replay set does); a `Release` re-queues without counting a redelivery.

use std::collections::{BTreeMap, BTreeSet};

use crate::{Command, Consumer, IncomingMessage, MessageId};

pub(crate) struct Broker {
    pub(crate) hold: bool,
    pub(crate) epoch: u64,
    pub(crate) permits: i64,
    /// Every unacked message: key and redelivery count.
    pub(crate) msgs: BTreeMap<MessageId, (Option<Vec<u8>>, u32)>,
    /// Messages ready to (re)send, with their not-before time.
    pub(crate) ready: BTreeMap<MessageId, u64>,
    /// key → the nacked messages that must be re-sent before anything later of the key.
    pub(crate) held: BTreeMap<Vec<u8>, BTreeSet<MessageId>>,
    pub(crate) flows: u64,
    pub(crate) sent: u64,
    /// Every this many re-sends of a held (nacked) message, the key has moved: the message goes
    /// to another consumer, which acks it (0: never).
    pub(crate) elsewhere_every: u64,
    held_resends: u64,
    /// Messages another consumer took and acked.
    pub(crate) went_elsewhere: Vec<MessageId>,
}

impl Broker {
    pub(crate) fn new(hold: bool) -> Self {
        Broker {
            hold,
            epoch: 0,
            permits: 0,
            msgs: BTreeMap::new(),
            ready: BTreeMap::new(),
            held: BTreeMap::new(),
            flows: 0,
            sent: 0,
            elsewhere_every: 0,
            held_resends: 0,
            went_elsewhere: Vec::new(),
        }
    }

    pub(crate) fn publish(&mut self, id: MessageId, key: Option<&[u8]>) {
        self.msgs.insert(id, (key.map(<[u8]>::to_vec), 0));
        self.ready.insert(id, 0);
    }

    /// The consumer (re)connects: everything unacked is ready again.
    pub(crate) fn connect(&mut self, c: &mut Consumer, now: u64) {
        self.epoch = c.connect(now);
        self.permits = 0;
        for (&id, _) in self.msgs.iter() {
            self.ready.entry(id).or_insert(now);
        }
    }

    pub(crate) fn handle(&mut self, now: u64, cmd: &Command) {
        match cmd {
            Command::Flow(n) => {
                self.permits += i64::from(*n);
                self.flows += 1;
            }
            Command::Ack(ids) => {
                for id in ids {
                    self.msgs.remove(id);
                    self.ready.remove(id);
                }
                // An acked message no longer holds its key.
                for h in self.held.values_mut() {
                    h.retain(|m| !ids.contains(m));
                }
                self.held.retain(|_, h| !h.is_empty());
            }
            Command::RedeliverUnacked(es) => {
                for e in es {
                    let id = MessageId::new(e.entry.ledger_id, e.entry.entry_id);
                    if let Some(m) = self.msgs.get_mut(&id) {
                        m.1 += 1;
                        self.ready.insert(id, now);
                    }
                }
            }
            Command::Nack { entries, delay } => {
                for e in entries {
                    let id = MessageId::new(e.entry.ledger_id, e.entry.entry_id);
                    if let Some(m) = self.msgs.get_mut(&id) {
                        m.1 += 1;
                        self.ready.insert(id, now + delay);
                        if let (true, Some(k)) = (self.hold, m.0.clone()) {
                            self.held.entry(k).or_default().insert(id);
                        }
                    }
                }
            }
            Command::Release(es) => {
                for e in es {
                    let id = MessageId::new(e.entry.ledger_id, e.entry.entry_id);
                    if self.msgs.contains_key(&id) {
                        self.ready.entry(id).or_insert(now);
                    }
                }
            }
        }
    }

    /// Drains the consumer's commands into the broker.
    pub(crate) fn pump(&mut self, now: u64, c: &mut Consumer) -> Vec<Command> {
        let cmds: Vec<_> = std::iter::from_fn(|| c.poll_command()).collect();
        for cmd in &cmds {
            self.handle(now, cmd);
        }
        cmds
    }

    /// Sends at most `max` ready messages the permits and holds allow, smallest first.
    pub(crate) fn send(&mut self, now: u64, c: &mut Consumer, max: usize) -> usize {
        let mut n = 0;
        while n < max && self.permits > 0 {
            let pick = self.ready.iter().find(|(id, &nb)| {
                nb <= now
                    && match self.msgs.get(id).and_then(|m| m.0.as_ref()) {
                        Some(k) => self
                            .held
                            .get(k)
                            .is_none_or(|h| h.range(..**id).next().is_none()),
                        None => true,
                    }
            });
            let Some((&id, _)) = pick else { break };
            self.ready.remove(&id);
            let Some((key, count)) = self.msgs.get(&id).cloned() else {
                continue;
            };
            let mut was_held = false;
            if let Some(k) = &key {
                if let Some(h) = self.held.get_mut(k) {
                    was_held = h.remove(&id);
                    if h.is_empty() {
                        self.held.remove(k);
                    }
                }
            }
            if was_held && self.elsewhere_every > 0 {
                self.held_resends += 1;
                if self.held_resends.is_multiple_of(self.elsewhere_every) {
                    self.msgs.remove(&id);
                    self.went_elsewhere.push(id);
                    continue;
                }
            }
            self.permits -= 1;
            self.sent += 1;
            n += 1;
            let m = IncomingMessage {
                epoch: self.epoch,
                id,
                key,
                redelivery_count: count,
                payload: id.entry_id.to_le_bytes().to_vec(),
                ..IncomingMessage::default()
            };
            if let Err(e) = c.on_message(now, m) {
                panic!("fake broker sent a malformed message: {e}");
            }
            self.pump(now, c);
        }
        n
    }

    /// The earliest not-before time of a ready message after `now`.
    pub(crate) fn next_ready(&self, now: u64) -> Option<u64> {
        self.ready.values().copied().filter(|&t| t > now).min()
    }
}
