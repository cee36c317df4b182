//! Violations and the per-key order checker.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use cursor::Position;

/// Which invariant broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ViolationKind {
    /// Per-key order (Key_Shared): a message started while an earlier one of its key was in an
    /// application's hands, or a message was first started after a later one of its key.
    Order,
    /// At the end a published message was neither acked nor dropped by a recorded operation.
    Loss,
    /// The backlog did not drain within the bound after the last scripted step.
    Stall,
    /// The cursor's mark-delete passed a position that was neither acked nor dropped.
    CursorPassed,
    /// The dispatcher's structures disagree with the simulator's reference model.
    Model,
    /// A scenario `expect` line did not hold.
    Expectation,
    /// The dispatcher kept issuing commands without settling.
    Livelock,
    /// An application was handed a message (a batch index included) whose ack the broker had
    /// already accepted and not lost in a crash.
    AckedRedelivered,
    /// The dispatcher sent a delayed message before its deliver-at time.
    Early,
}

impl ViolationKind {
    /// Lowercase name, as printed and in the JSON report.
    pub fn as_str(self) -> &'static str {
        match self {
            ViolationKind::Order => "order",
            ViolationKind::Loss => "loss",
            ViolationKind::Stall => "stall",
            ViolationKind::CursorPassed => "cursor-passed",
            ViolationKind::Model => "model",
            ViolationKind::Expectation => "expectation",
            ViolationKind::Livelock => "livelock",
            ViolationKind::AckedRedelivered => "acked-redelivered",
            ViolationKind::Early => "early",
        }
    }
}

impl fmt::Display for ViolationKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One broken invariant, with what is needed to understand and reproduce it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Which invariant.
    pub kind: ViolationKind,
    /// Simulated time, ms.
    pub at: u64,
    /// The key involved, if any.
    pub key: Option<String>,
    /// Positions involved.
    pub positions: Vec<String>,
    /// Consumers involved.
    pub consumers: Vec<String>,
    /// Human explanation.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} violation at t={}ms", self.kind, self.at)?;
        if let Some(k) = &self.key {
            write!(f, " key={k}")?;
        }
        if !self.positions.is_empty() {
            write!(f, " positions=[{}]", self.positions.join(" "))?;
        }
        if !self.consumers.is_empty() {
            write!(f, " consumers=[{}]", self.consumers.join(" "))?;
        }
        write!(f, ": {}", self.detail)
    }
}

/// A message: entry position and batch index (`None` for a non-batched entry; the first chunk's
/// position for a chunked message).
pub type MsgRef = (Position, Option<u32>);

/// Formats a message reference.
pub fn msg_str(m: MsgRef) -> String {
    match m.1 {
        Some(i) => format!("{}#{i}", m.0),
        None => m.0.to_string(),
    }
}

/// Key bytes as printed.
pub fn key_str(k: &[u8]) -> String {
    String::from_utf8_lossy(k).into_owned()
}

/// Tracks what every application holds and checks per-key order when one starts a message.
#[derive(Debug, Default)]
pub struct OrderChecker {
    enabled: bool,
    /// key → message (by its last entry) → consumers holding it (started, not finished).
    in_hand: BTreeMap<Vec<u8>, BTreeMap<MsgRef, BTreeSet<String>>>,
    /// consumer → what it holds.
    held: BTreeMap<String, (Option<Vec<u8>>, MsgRef)>,
    /// Every message ever started.
    started: BTreeSet<MsgRef>,
    /// key → (first, last) of the started message whose first entry is the highest so far.
    max_started: BTreeMap<Vec<u8>, (MsgRef, MsgRef)>,
    /// Entry position → time of its first start (any consumer).
    first_start: BTreeMap<Position, u64>,
    /// Entry position → time of its last finish.
    last_finish: BTreeMap<Position, u64>,
    /// Entries the broker dropped.
    dropped_entries: BTreeSet<Position>,
    /// message (last entry) → its first entry, for chunked messages.
    spans: BTreeMap<MsgRef, MsgRef>,
    /// key → nacked messages (last → first) not yet started again: they hold their key.
    nacked: BTreeMap<Vec<u8>, BTreeMap<MsgRef, MsgRef>>,
    /// (consumer, entry) pairs that started.
    started_by: BTreeSet<(String, Position)>,
    /// Entries with a deliver-at time: they are meant to come after later messages of their
    /// key, so they are exempt from the first-start order rule (not from one owner per key).
    delayed: BTreeSet<Position>,
    /// Starts of messages.
    pub starts: u64,
}

impl OrderChecker {
    /// Whether the scenario's `expect` line `e` failed, judged from this checker's record of
    /// starts and finishes (simulated time): why, or `None` when it held.
    pub(crate) fn expectation_failure(&self, e: &crate::sim::scenario::Expect) -> Option<String> {
        use crate::sim::scenario::Expect;
        match e {
            Expect::Start(n, p) => (!self.started_by(n, *p))
                .then(|| format!("expected {n} to start {p}; it never did")),
            Expect::NoStart(n, p) => self
                .started_by(n, *p)
                .then(|| format!("expected {n} never to start {p}; it did")),
            Expect::Order(a, b) => match (self.last_finish(*a), self.first_start(*b)) {
                (Some(fa), Some(sb)) if fa <= sb => None,
                (fa, sb) => Some(format!(
                    "expected {a} finished (t={fa:?}) before {b} first started (t={sb:?})"
                )),
            },
        }
    }

    /// A checker; `enabled` = the subscription promises per-key order (Key_Shared).
    pub fn new(enabled: bool) -> Self {
        OrderChecker {
            enabled,
            ..OrderChecker::default()
        }
    }

    /// `consumer`'s application starts message `m` of `key`. Returns the violations it causes.
    #[cfg(test)]
    pub fn start(
        &mut self,
        now: u64,
        consumer: &str,
        key: Option<&[u8]>,
        m: MsgRef,
    ) -> Vec<Violation> {
        self.start_span(now, consumer, key, m, m)
    }

    /// Like [`start`](Self::start) for a message that spans entries `first..=last` (a chunked
    /// message). A message is *earlier* than another when its last entry precedes the other's
    /// first entry; messages whose spans overlap (another producer's message published between
    /// two chunks) are not ordered against each other: the client hands a chunked message out
    /// when its last chunk arrives, the broker pins it by its first.
    pub fn start_span(
        &mut self,
        now: u64,
        consumer: &str,
        key: Option<&[u8]>,
        first: MsgRef,
        m: MsgRef,
    ) -> Vec<Violation> {
        self.starts += 1;
        let mut out = Vec::new();
        let delayed = self.delayed.contains(&m.0);
        self.first_start.entry(m.0).or_insert(now);
        self.started_by.insert((consumer.to_string(), m.0));
        let first_time = self.started.insert(m);
        if first != m {
            self.spans.insert(m, first);
        }
        if let (true, Some(k)) = (self.enabled, key) {
            if let Some(held) = self.in_hand.get(k) {
                if let Some((earlier, who)) = held.range(..first).next() {
                    let mut consumers: Vec<String> = who.iter().cloned().collect();
                    consumers.push(consumer.to_string());
                    out.push(Violation {
                        kind: ViolationKind::Order,
                        at: now,
                        key: Some(key_str(k)),
                        positions: vec![msg_str(*earlier), msg_str(m)],
                        consumers,
                        detail: format!(
                            "{consumer} started {} while the earlier {} of the same key is still being processed by {}",
                            msg_str(m),
                            msg_str(*earlier),
                            who.iter().cloned().collect::<Vec<_>>().join(",")
                        ),
                    });
                }
            }
            if let Some(nacked) = self.nacked.get_mut(k) {
                nacked.remove(&m);
                if let Some((earlier, _)) = nacked.range(..first).next() {
                    out.push(Violation {
                        kind: ViolationKind::Order,
                        at: now,
                        key: Some(key_str(k)),
                        positions: vec![msg_str(*earlier), msg_str(m)],
                        consumers: vec![consumer.to_string()],
                        detail: format!(
                            "{consumer} started {} while the earlier {} of the same key is nacked and not yet processed again",
                            msg_str(m),
                            msg_str(*earlier)
                        ),
                    });
                }
            }
            if delayed {
                // One owner per key: no later message of its key in another consumer's hands.
                if let Some(held) = self.in_hand.get(k) {
                    if let Some((later, who)) = held
                        .range(m..)
                        .find(|(x, who)| **x != m && who.iter().any(|c| c != consumer))
                    {
                        out.push(Violation {
                            kind: ViolationKind::Order,
                            at: now,
                            key: Some(key_str(k)),
                            positions: vec![msg_str(m), msg_str(*later)],
                            consumers: who.iter().cloned().chain([consumer.to_string()]).collect(),
                            detail: format!(
                                "{consumer} started the delayed {} while the later {} of the same key is being processed by {}",
                                msg_str(m),
                                msg_str(*later),
                                who.iter().cloned().collect::<Vec<_>>().join(",")
                            ),
                        });
                    }
                }
            }
            if first_time && !delayed {
                if let Some((later_first, later)) = self.max_started.get(k) {
                    if *later_first > m {
                        out.push(Violation {
                            kind: ViolationKind::Order,
                            at: now,
                            key: Some(key_str(k)),
                            positions: vec![msg_str(m), msg_str(*later)],
                            consumers: vec![consumer.to_string()],
                            detail: format!(
                                "{consumer} started {} for the first time after the later {} of the same key was already started",
                                msg_str(m),
                                msg_str(*later)
                            ),
                        });
                    }
                }
            }
            let e = self.max_started.entry(k.to_vec()).or_insert((first, m));
            if e.0 < first {
                *e = (first, m);
            }
        }
        if let Some(k) = key {
            self.in_hand
                .entry(k.to_vec())
                .or_default()
                .entry(m)
                .or_default()
                .insert(consumer.to_string());
        }
        self.held
            .insert(consumer.to_string(), (key.map(<[u8]>::to_vec), m));
        out
    }

    /// The entry at `p` carries a deliver-at time.
    pub fn mark_delayed(&mut self, p: Position) {
        self.delayed.insert(p);
    }

    /// `consumer`'s application finished what it held (acked or nacked it).
    pub fn finish(&mut self, now: u64, consumer: &str) {
        if let Some((_, m)) = self.held.get(consumer) {
            self.last_finish.insert(m.0, now);
        }
        self.abandon(consumer);
    }

    /// `consumer`'s application nacked what it held. On an ordered subscription the message
    /// keeps holding its key until it is started again (ordered nack), or the broker drops it.
    pub fn nack(&mut self, now: u64, consumer: &str) {
        if self.enabled {
            if let Some((Some(k), m)) = self.held.get(consumer).cloned() {
                let first = self.spans.get(&m).copied().unwrap_or(m);
                // A message the broker already dropped never comes back: it holds nothing.
                if !self.dropped_entries.contains(&m.0) && !self.dropped_entries.contains(&first.0)
                {
                    self.nacked.entry(k).or_default().insert(m, first);
                }
            }
        }
        self.finish(now, consumer);
    }

    /// The broker dropped the entry at `p` (skip, clear, expiry, eviction): a nacked message of
    /// it no longer holds its key (no consumer holds it).
    pub fn dropped(&mut self, p: Position) {
        self.dropped_entries.insert(p);
        for nacked in self.nacked.values_mut() {
            nacked.retain(|m, first| m.0 != p && first.0 != p);
        }
    }

    /// `consumer`'s application lost what it held (crash, broker restart).
    pub fn abandon(&mut self, consumer: &str) {
        let Some((key, m)) = self.held.remove(consumer) else {
            return;
        };
        if let Some(k) = key {
            if let Some(held) = self.in_hand.get_mut(&k) {
                if let Some(who) = held.get_mut(&m) {
                    who.remove(consumer);
                    if who.is_empty() {
                        held.remove(&m);
                    }
                }
                if held.is_empty() {
                    self.in_hand.remove(&k);
                }
            }
        }
    }

    /// Whether `consumer` ever started the entry at `p`.
    pub fn started_by(&self, consumer: &str, p: Position) -> bool {
        self.started_by.contains(&(consumer.to_string(), p))
    }

    /// When the entry at `p` was first started.
    pub fn first_start(&self, p: Position) -> Option<u64> {
        self.first_start.get(&p).copied()
    }

    /// When the entry at `p` was last finished.
    pub fn last_finish(&self, p: Position) -> Option<u64> {
        self.last_finish.get(&p).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(e: u64) -> MsgRef {
        (Position::new(1, e), None)
    }

    #[test]
    fn overlap_with_an_earlier_message_is_a_violation() {
        let mut c = OrderChecker::new(true);
        assert!(c.start(0, "a", Some(b"k"), m(0)).is_empty());
        let v = c.start(1, "b", Some(b"k"), m(1));
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].kind, ViolationKind::Order);
        assert_eq!(v[0].consumers, vec!["a".to_string(), "b".to_string()]);
        // Another key, or a keyless message, is not ordered.
        assert!(c.start(2, "c", Some(b"j"), m(2)).is_empty());
        assert!(c.start(3, "d", None, m(3)).is_empty());
    }

    #[test]
    fn finish_and_abandon_release_the_key() {
        let mut c = OrderChecker::new(true);
        c.start(0, "a", Some(b"k"), m(0));
        c.finish(5, "a");
        assert!(c.start(6, "b", Some(b"k"), m(1)).is_empty());
        c.abandon("b");
        assert!(c.held.is_empty());
        // A redelivery of an earlier, already started message is fine.
        assert!(c.start(7, "a", Some(b"k"), m(0)).is_empty());
        assert_eq!(c.last_finish(Position::new(1, 0)), Some(5));
        assert_eq!(c.first_start(Position::new(1, 1)), Some(6));
    }

    #[test]
    fn first_start_after_a_later_one_is_a_violation() {
        let mut c = OrderChecker::new(true);
        c.start(0, "a", Some(b"k"), m(5));
        c.finish(1, "a");
        let v = c.start(2, "b", Some(b"k"), m(3));
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].detail.contains("first time"));
    }

    #[test]
    fn a_chunked_message_is_unordered_against_messages_inside_its_span() {
        let mut c = OrderChecker::new(true);
        // Chunked message spanning 1:1..=1:5; 1:3 of another producer was published between.
        assert!(c.start(0, "b", Some(b"k"), m(3)).is_empty());
        c.finish(1, "b");
        assert!(c.start_span(2, "a", Some(b"k"), m(1), m(5)).is_empty());
        // Held by a; 1:4 (inside the span) may start, 1:6 (after it) may not.
        assert!(c.start(3, "c", Some(b"k"), m(4)).is_empty());
        let v = c.start(4, "d", Some(b"k"), m(6));
        assert_eq!(v.len(), 1, "{v:?}");
        // A message entirely before the span, first started after it, is out of order.
        let v = c.start(5, "e", Some(b"k"), m(0));
        assert!(v.iter().any(|v| v.detail.contains("first time")), "{v:?}");
    }

    #[test]
    fn a_nacked_message_holds_its_key_until_started_again() {
        let mut c = OrderChecker::new(true);
        c.start(0, "a", Some(b"k"), m(0));
        c.nack(1, "a");
        let v = c.start(2, "a", Some(b"k"), m(1));
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].detail.contains("nacked"));
        c.finish(3, "a");
        // Processed again: the hold ends (1:1 was already started, so no new violation).
        assert!(c.start(4, "b", Some(b"k"), m(0)).is_empty());
        c.finish(5, "b");
        assert!(c.start(6, "b", Some(b"k"), m(2)).is_empty());
        // A nacked message the broker drops stops holding the key.
        c.finish(7, "b");
        c.start(8, "a", Some(b"k"), m(3));
        c.nack(9, "a");
        c.dropped(Position::new(1, 3));
        assert!(c.start(10, "a", Some(b"k"), m(4)).is_empty());
    }

    #[test]
    fn a_delayed_message_may_come_late_but_never_beside_a_later_one() {
        let mut c = OrderChecker::new(true);
        c.mark_delayed(Position::new(1, 0));
        assert!(c.start(0, "a", Some(b"k"), m(1)).is_empty());
        c.finish(1, "a");
        // Late by design: no first-start violation.
        assert!(c.start(2, "a", Some(b"k"), m(0)).is_empty());
        c.finish(3, "a");
        // Beside a later message of its key on another consumer: a violation.
        c.mark_delayed(Position::new(1, 2));
        assert!(c.start(4, "b", Some(b"k"), m(3)).is_empty());
        let v = c.start(5, "a", Some(b"k"), m(2));
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].detail.contains("delayed"), "{v:?}");
        // Not delayed, it would have been a first-start violation.
        let mut plain = OrderChecker::new(true);
        plain.start(0, "a", Some(b"k"), m(1));
        plain.finish(1, "a");
        assert_eq!(plain.start(2, "a", Some(b"k"), m(0)).len(), 1);
    }

    #[test]
    fn shared_subscriptions_are_not_ordered() {
        let mut c = OrderChecker::new(false);
        c.start(0, "a", Some(b"k"), m(1));
        assert!(c.start(1, "b", Some(b"k"), m(0)).is_empty());
    }
}
