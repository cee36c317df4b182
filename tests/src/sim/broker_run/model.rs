//! The reference model of a broker run: who holds what, from what crossed the wire alone,
//! compared after every round of steps with what the subscription's dispatcher holds
//! ([`broker::stepped::SteppedBroker::holdings`]), as the world compares its own model.
//!
//! A consumer connection holds every entry a MESSAGE frame gave it (its lost frames too: a
//! crashed client's) until the broker accepts an ack of it, the broker reads a REDELIVER or a
//! NEGATIVE_ACK of it from that connection (a chunk stands for every chunk of its message, as
//! the broker expands it), the consumer leaves (CLOSE_CONSUMER, or its connection is dropped), or
//! on Shared a mark-delete move passes it (Key_Shared keeps it pending: the fix). A batch entry
//! is charged its messages when sent, less each index ack the broker accepted while the entry
//! was open (not acked, not passed by the mark-delete). A chunked message is pinned to the
//! consumer that got its first chunk until its last chunk goes out or that consumer goes.
//!
//! Checked: the connected consumers (by name, with connections counted), each one's pending
//! entries, its unacked charge, every draining hash's references against its owner's pending
//! entries of that hash, and the number of chunk pins.

use std::collections::{BTreeMap, BTreeSet};

use cursor::Position;
use dispatcher::Holdings;

/// A consumer connection: its name and the broker's connection id.
pub(super) type Holder = (String, u64);

/// What the model found different from the dispatcher.
#[derive(Debug)]
pub(super) struct Mismatch {
    pub(super) detail: String,
    pub(super) positions: Vec<String>,
    pub(super) consumers: Vec<String>,
}

/// See the module doc.
#[derive(Debug, Default)]
pub(super) struct Model {
    held: BTreeMap<Holder, BTreeSet<Position>>,
    /// Messages of each held entry not acked since it was sent.
    remaining: BTreeMap<Position, u32>,
    /// Chunked messages (by uuid) whose first chunk went out and last not yet.
    pins: BTreeMap<String, Holder>,
}

impl Model {
    /// A consumer subscribed on connection `h`.
    pub(super) fn subscribed(&mut self, h: Holder) {
        self.held.entry(h).or_default();
    }

    /// The consumer on `h` is gone: what it held goes back, its pins end.
    pub(super) fn gone(&mut self, h: &Holder) {
        for p in self.held.remove(h).unwrap_or_default() {
            self.remaining.remove(&p);
        }
        self.pins.retain(|_, o| o != h);
    }

    /// A broker restart: nothing is held.
    pub(super) fn clear(&mut self) {
        *self = Model::default();
    }

    /// Who holds `p`.
    pub(super) fn holder_of(&self, p: Position) -> Option<&Holder> {
        self.held
            .iter()
            .find(|(_, s)| s.contains(&p))
            .map(|(h, _)| h)
    }

    /// A MESSAGE for `p` (`messages` in it; a chunk: its uuid, index and count) went to `h`.
    /// `Err`: `p` was still held (by the holder returned).
    pub(super) fn sent(
        &mut self,
        h: &Holder,
        p: Position,
        messages: u32,
        chunk: Option<(&str, u32, u32)>,
    ) -> Result<(), Holder> {
        if let Some(other) = self.holder_of(p) {
            return Err(other.clone());
        }
        self.held.entry(h.clone()).or_default().insert(p);
        self.remaining.insert(p, messages);
        if let Some((uuid, id, n)) = chunk.filter(|c| c.2 > 1) {
            if id + 1 == n {
                self.pins.remove(uuid);
            } else if id == 0 {
                self.pins.insert(uuid.to_string(), h.clone());
            }
        }
        Ok(())
    }

    /// The broker's dispatcher handled a REDELIVER or NEGATIVE_ACK of `ps` from `h` (the run
    /// steps it right after such a command, so no send comes between).
    pub(super) fn returned(&mut self, h: &Holder, ps: &[Position]) {
        if let Some(set) = self.held.get_mut(h) {
            for p in ps {
                if set.remove(p) {
                    self.remaining.remove(p);
                }
            }
        }
    }

    /// The broker accepted an ack of the whole entry `p` (or the one that completed it).
    pub(super) fn acked(&mut self, p: Position) {
        for set in self.held.values_mut() {
            set.remove(&p);
        }
        self.remaining.remove(&p);
    }

    /// The broker accepted an ack of a batch index of `p`, new and with `p` open.
    pub(super) fn index_acked(&mut self, p: Position) {
        if let Some(r) = self.remaining.get_mut(&p) {
            *r = r.saturating_sub(1);
        }
    }

    /// A mark-delete move to `md` that drops pending entries (Shared): nothing at or below it
    /// is held any more.
    pub(super) fn passed(&mut self, md: Position) {
        for set in self.held.values_mut() {
            let keep = set.split_off(&md.next());
            for p in std::mem::replace(set, keep) {
                self.remaining.remove(&p);
            }
        }
    }

    /// The model against the dispatcher's `h`: `Err` with the first difference.
    pub(super) fn check(&self, h: &Holdings) -> Result<(), Mismatch> {
        let mut model: BTreeMap<&str, (usize, BTreeSet<Position>, i64)> = BTreeMap::new();
        for ((name, _), set) in &self.held {
            let e = model.entry(name).or_default();
            e.0 += 1;
            for p in set {
                e.1.insert(*p);
                e.2 += i64::from(self.remaining.get(p).copied().unwrap_or(0));
            }
        }
        let mut real: BTreeMap<&str, (usize, BTreeSet<Position>, i64)> = BTreeMap::new();
        for c in &h.consumers {
            let e = real.entry(&c.name).or_default();
            e.0 += 1;
            e.1.extend(c.pending.iter().map(|(p, _)| *p));
            e.2 += c.unacked;
        }
        let count = |m: &BTreeMap<&str, (usize, BTreeSet<Position>, i64)>| -> Vec<String> {
            m.iter().map(|(n, e)| format!("{n}×{}", e.0)).collect()
        };
        if count(&model) != count(&real) {
            return Err(Mismatch {
                detail: format!(
                    "connected consumers {:?}, the model has {:?}",
                    count(&real),
                    count(&model)
                ),
                positions: Vec::new(),
                consumers: Vec::new(),
            });
        }
        for (name, (_, expected, charge)) in &model {
            let (_, pending, unacked) = &real[name];
            if pending != expected {
                let list = |a: &BTreeSet<Position>, b: &BTreeSet<Position>| -> Vec<String> {
                    a.difference(b).take(5).map(Position::to_string).collect()
                };
                let (extra, missing) = (list(pending, expected), list(expected, pending));
                return Err(Mismatch {
                    detail: format!(
                        "pending acks of {name} differ from the model: unexpected [{}], missing [{}]",
                        extra.join(" "),
                        missing.join(" ")
                    ),
                    positions: extra.into_iter().chain(missing).collect(),
                    consumers: vec![name.to_string()],
                });
            }
            if unacked != charge {
                return Err(Mismatch {
                    detail: format!("{name} is charged {unacked} unacked messages, its pending entries hold {charge}"),
                    positions: Vec::new(),
                    consumers: vec![name.to_string()],
                });
            }
        }
        draining_refs(h)?;
        if h.chunk_pins != self.pins.len() {
            return Err(Mismatch {
                detail: format!(
                    "the chunk assignor holds {} pins, the model {} ({:?})",
                    h.chunk_pins,
                    self.pins.len(),
                    self.pins.keys().take(5).collect::<Vec<_>>()
                ),
                positions: Vec::new(),
                consumers: Vec::new(),
            });
        }
        Ok(())
    }
}

/// Every draining hash's references against its owner's pending entries of that hash.
fn draining_refs(h: &Holdings) -> Result<(), Mismatch> {
    for (hash, owner, refs) in &h.draining {
        let holder = h.consumers.iter().find(|c| c.id == *owner);
        let pending = holder.map_or(0, |c| c.pending.iter().filter(|(_, x)| x == hash).count());
        if pending != *refs as usize {
            let name = holder.map_or_else(|| owner.to_string(), |c| c.name.clone());
            return Err(Mismatch {
                detail: format!("hash {hash} drains on {name} with {refs} references, but {name} has {pending} pending entries of it"),
                positions: Vec::new(),
                consumers: vec![name],
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use dispatcher::{ConsumerId, Holder as Held};

    use super::*;

    fn p(e: u64) -> Position {
        Position::new(1, e)
    }

    fn c1() -> Holder {
        ("c1".to_string(), 2)
    }

    /// c1 holds 1:0 (one message) and 1:1 (a batch of 3 with one index acked).
    fn model() -> Model {
        let mut m = Model::default();
        m.subscribed(c1());
        m.sent(&c1(), p(0), 1, None).unwrap();
        m.sent(&c1(), p(1), 3, None).unwrap();
        m.index_acked(p(1));
        m
    }

    fn holdings(pending: &[u64], unacked: i64) -> Holdings {
        Holdings {
            consumers: vec![Held {
                id: ConsumerId(1),
                name: "c1".into(),
                unacked,
                pending: pending.iter().map(|e| (p(*e), 7)).collect(),
            }],
            draining: Vec::new(),
            chunk_pins: 0,
        }
    }

    #[test]
    fn agreement_and_each_kind_of_difference() {
        let m = model();
        m.check(&holdings(&[0, 1], 3)).unwrap();
        let extra = m.check(&holdings(&[0, 1, 2], 4)).unwrap_err();
        assert!(
            extra.detail.contains("unexpected [1:2], missing []"),
            "{extra:?}"
        );
        let missing = m.check(&holdings(&[0], 1)).unwrap_err();
        assert!(missing.detail.contains("missing [1:1]"), "{missing:?}");
        let charge = m.check(&holdings(&[0, 1], 4)).unwrap_err();
        assert!(charge.detail.contains("charged 4 unacked"), "{charge:?}");
        let mut drains = holdings(&[0, 1], 3);
        drains.draining = vec![(7, ConsumerId(1), 1)];
        let refs = m.check(&drains).unwrap_err();
        assert!(refs.detail.contains("with 1 references"), "{refs:?}");
        let mut none = holdings(&[], 0);
        none.consumers.clear();
        let gone = m.check(&none).unwrap_err();
        assert!(gone.detail.contains("connected consumers"), "{gone:?}");
    }

    #[test]
    fn returns_acks_leaves_moves_and_pins() {
        let mut m = model();
        assert_eq!(m.sent(&("c2".into(), 3), p(0), 1, None), Err(c1()));
        m.returned(&c1(), &[p(0)]);
        m.check(&holdings(&[1], 2)).unwrap();
        m.acked(p(1));
        m.check(&holdings(&[], 0)).unwrap();
        m.sent(&c1(), p(5), 1, Some(("u", 0, 2))).unwrap();
        assert!(m.check(&holdings(&[5], 1)).is_err(), "one pin, none shown");
        let mut pinned = holdings(&[5], 1);
        pinned.chunk_pins = 1;
        m.check(&pinned).unwrap();
        m.passed(p(5));
        m.check(&holdings(&[], 0)).unwrap_err(); // the pin outlives the move
        m.gone(&c1());
        let mut none = holdings(&[], 0);
        none.consumers.clear();
        m.check(&none).unwrap();
    }
}
