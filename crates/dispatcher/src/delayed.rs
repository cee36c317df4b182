//! Delayed delivery: entries with a deliver-at time wait in a [`DelayedTracker`] until it passes.
//!
//! The dispatcher core owns one tracker (see [`DelayedDelivery`] for its settings). A normal or
//! replay read hands every entry that carries [`EntryMeta::deliver_at`](cursor::EntryMeta) to
//! [`DelayedTracker::track`]; an entry it keeps is neither sent nor counted as pending — it is
//! only an index entry, and the ledger still holds the message. When its time comes,
//! [`DelayedTracker::pop_due`] hands the position back and the core replays it like a
//! redelivered entry (on Key_Shared its key's routing and draining rules apply then).
//!
//! The semantics are those of Pulsar's in-memory `DelayedDeliveryTracker`:
//! * times are bucketed to a precision of the largest power of two not above `tick`
//!   (1000 → 512), which keeps one small index node per bucket and ledger;
//! * strict (`strict = true`, Pulsar's `isDelayedDeliveryDeliverAtTimeStrict`): an entry is
//!   never dispatched before its time, and at most one precision step after it (its bucket
//!   rounds up);
//! * not strict (Pulsar's default): an entry due within one `tick` of now is dispatched at
//!   once, and a bucket is released up to one tick early.
//!
//! Sans-IO: time is passed in. The tracker is not persisted: after a restart the cursor re-reads
//! the unacked entries and a read tracks them again (Pulsar's in-memory tracker does the same).
//!
//! ```
//! use cursor::Position;
//! use dispatcher::{DelayedDelivery, DelayedTracker};
//!
//! let mut t = DelayedTracker::new(DelayedDelivery { enabled: true, tick: 0, strict: true });
//! assert!(t.track(0, Position::new(1, 5), 100)); // held until 100
//! assert!(!t.track(0, Position::new(1, 6), 0)); // due already: dispatch now
//! assert_eq!(t.next_due(), Some(100));
//! let mut out = Vec::new();
//! t.pop_due(99, &mut out);
//! assert!(out.is_empty());
//! t.pop_due(100, &mut out);
//! assert_eq!(out, vec![Position::new(1, 5)]);
//! assert!(t.is_empty());
//! ```

use std::collections::BTreeMap;

use cursor::Position;

/// Delayed-delivery settings (Pulsar's `delayedDeliveryEnabled`,
/// `delayedDeliveryTickTimeMillis` and `isDelayedDeliveryDeliverAtTimeStrict`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DelayedDelivery {
    /// Honour deliver-at times (default true). Off: every entry is dispatched when read.
    pub enabled: bool,
    /// Timer resolution in the caller's time unit (default 1000, Pulsar's 1 s); times are
    /// bucketed to the largest power of two not above it (0: exact times).
    pub tick: u64,
    /// Never dispatch before the deliver-at time (default true). Pulsar's default is false,
    /// which lets an entry go up to one `tick` early.
    pub strict: bool,
}

impl Default for DelayedDelivery {
    fn default() -> Self {
        DelayedDelivery {
            enabled: true,
            tick: 1000,
            strict: true,
        }
    }
}

/// Positions waiting for their deliver-at time, bucketed by time, then ledger, then entry id.
///
/// Memory is about 8 bytes per delayed entry plus one small node per (time bucket, ledger)
/// ([`memory_bytes`](Self::memory_bytes) estimates it; `cargo xtask bench W13` measures it).
/// Adding a position twice is a no-op, so re-reading an entry (a rewind, a replay) is safe.
#[derive(Clone, Debug)]
pub struct DelayedTracker {
    /// Bucket time → ledger → entry ids, ascending and unique.
    buckets: BTreeMap<u64, BTreeMap<u64, Vec<u64>>>,
    len: usize,
    cfg: DelayedDelivery,
    /// The bucket width, a power of two (1 for exact times).
    precision: u64,
}

impl DelayedTracker {
    /// An empty tracker with these settings.
    pub fn new(cfg: DelayedDelivery) -> Self {
        let precision = match cfg.tick {
            0 => 1,
            t => 1u64 << (63 - t.leading_zeros()),
        };
        DelayedTracker {
            buckets: BTreeMap::new(),
            len: 0,
            cfg,
            precision,
        }
    }

    /// The settings.
    pub fn config(&self) -> DelayedDelivery {
        self.cfg
    }

    /// Whether `deliver_at` is far enough from `now` to hold the entry: strictly after `now`,
    /// or (not strict) after `now + tick`.
    pub fn should_hold(&self, now: u64, deliver_at: u64) -> bool {
        let cutoff = match self.cfg.strict {
            true => now,
            false => now.saturating_add(self.cfg.tick),
        };
        self.cfg.enabled && deliver_at > cutoff
    }

    /// Holds `pos` until `deliver_at` if [`should_hold`](Self::should_hold) says so; returns
    /// whether it is held (false: dispatch it now). A position already held stays held, once,
    /// until [`pop_due`](Self::pop_due) releases it (so an entry read twice is never both
    /// dispatched and held).
    pub fn track(&mut self, now: u64, pos: Position, deliver_at: u64) -> bool {
        if !self.cfg.enabled {
            return false;
        }
        let bucket = self.bucket_of(deliver_at);
        if !self.should_hold(now, deliver_at) {
            // Held already (an entry's deliver-at never changes, so it sits in this bucket):
            // it stays held until its bucket is released, even if its time is within reach.
            return self
                .buckets
                .get(&bucket)
                .and_then(|l| l.get(&pos.ledger_id))
                .is_some_and(|ids| ids.binary_search(&pos.entry_id).is_ok());
        }
        let ids = self
            .buckets
            .entry(bucket)
            .or_default()
            .entry(pos.ledger_id)
            .or_default();
        // Reads mostly come in ascending order: append, else insert in place (once).
        match ids.last() {
            Some(&last) if last >= pos.entry_id => {
                if let Err(i) = ids.binary_search(&pos.entry_id) {
                    ids.insert(i, pos.entry_id);
                    self.len += 1;
                }
            }
            _ => {
                ids.push(pos.entry_id);
                self.len += 1;
            }
        }
        true
    }

    /// The bucket of a deliver-at time: rounded up to the precision when strict (never released
    /// before its time), down otherwise (released up to one tick early, as Pulsar does).
    fn bucket_of(&self, deliver_at: u64) -> u64 {
        match self.cfg.strict {
            true => deliver_at
                .checked_next_multiple_of(self.precision)
                .unwrap_or(!(self.precision - 1)),
            false => deliver_at & !(self.precision - 1),
        }
    }

    /// The bucket time's release time: its own time when strict, else one tick before its last
    /// millisecond (Pulsar's non-strict cutoff).
    fn release_at(&self, bucket: u64) -> u64 {
        match self.cfg.strict {
            true => bucket,
            false => bucket
                .saturating_add(self.precision - 1)
                .saturating_sub(self.cfg.tick),
        }
    }

    /// The earliest time at which [`pop_due`](Self::pop_due) returns something (`None` when
    /// empty). It may be in the past if nothing was popped since.
    pub fn next_due(&self) -> Option<u64> {
        self.buckets.keys().next().map(|b| self.release_at(*b))
    }

    /// Moves every position due at `now` into `out` (ascending within each bucket; buckets in
    /// time order); returns how many.
    pub fn pop_due(&mut self, now: u64, out: &mut Vec<Position>) -> usize {
        let mut n = 0;
        while let Some((&bucket, _)) = self.buckets.first_key_value() {
            if self.release_at(bucket) > now {
                break;
            }
            if let Some((_, ledgers)) = self.buckets.pop_first() {
                for (ledger, ids) in ledgers {
                    n += ids.len();
                    out.extend(ids.into_iter().map(|e| Position::new(ledger, e)));
                }
            }
        }
        self.len -= n;
        n
    }

    /// Forgets every position at or below `upto` (a mark-delete move acked them without a
    /// delivery: skip, clear-backlog, expiry); returns how many.
    pub fn remove_up_to(&mut self, upto: Position) -> usize {
        let mut n = 0;
        self.buckets.retain(|_, ledgers| {
            ledgers.retain(|&ledger, ids| {
                if ledger < upto.ledger_id {
                    n += ids.len();
                    return false;
                }
                if ledger == upto.ledger_id {
                    let cut = ids.partition_point(|&e| e <= upto.entry_id);
                    n += cut;
                    ids.drain(..cut);
                }
                !ids.is_empty()
            });
            !ledgers.is_empty()
        });
        self.len -= n;
        n
    }

    /// Forgets everything (the cursor was reset or rewound: a read tracks the entries again).
    pub fn clear(&mut self) {
        self.buckets.clear();
        self.len = 0;
    }

    /// Positions held now.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// An estimate of the heap bytes the index uses (entry-id vectors by capacity, plus about 64
    /// bytes per bucket and per ledger node).
    pub fn memory_bytes(&self) -> usize {
        self.buckets
            .values()
            .map(|l| 64 + l.values().map(|ids| 64 + ids.capacity() * 8).sum::<usize>())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(e: u64) -> Position {
        Position::new(1, e)
    }

    fn strict(tick: u64) -> DelayedTracker {
        DelayedTracker::new(DelayedDelivery {
            enabled: true,
            tick,
            strict: true,
        })
    }

    #[test]
    fn strict_never_early_and_at_most_one_step_late() {
        let mut t = strict(1000); // precision 512
        assert!(t.track(0, p(1), 1001));
        assert_eq!(t.next_due(), Some(1024));
        let mut out = Vec::new();
        assert_eq!(t.pop_due(1023, &mut out), 0);
        assert_eq!(t.pop_due(1024, &mut out), 1);
        assert_eq!(out, vec![p(1)]);
    }

    #[test]
    fn not_strict_goes_up_to_one_tick_early() {
        let mut t = DelayedTracker::new(DelayedDelivery {
            enabled: true,
            tick: 1000,
            strict: false,
        });
        assert!(!t.track(0, p(1), 1000), "within one tick: at once");
        assert!(t.track(0, p(2), 3000));
        // Bucket 2560..3071, released when its last ms is within one tick: 2071.
        assert_eq!(t.next_due(), Some(2071));
    }

    #[test]
    fn duplicates_and_out_of_order_adds() {
        let mut t = strict(0);
        for e in [5, 3, 5, 9, 3, 4] {
            assert!(t.track(0, p(e), 10));
        }
        assert_eq!(t.len(), 4);
        let mut out = Vec::new();
        t.pop_due(10, &mut out);
        assert_eq!(out, vec![p(3), p(4), p(5), p(9)]);
    }

    #[test]
    fn remove_up_to_and_disabled() {
        let mut t = strict(0);
        for e in 0..10 {
            t.track(0, p(e), 10 + e % 3);
        }
        t.track(0, Position::new(2, 0), 11);
        assert_eq!(t.remove_up_to(p(4)), 5);
        assert_eq!(t.len(), 6);
        let mut out = Vec::new();
        t.pop_due(100, &mut out);
        assert!(out.iter().all(|q| *q > p(4)));
        assert_eq!(out.len(), 6);
        let off = DelayedTracker::new(DelayedDelivery {
            enabled: false,
            ..DelayedDelivery::default()
        });
        assert!(!off.should_hold(0, u64::MAX));
    }

    /// Random tracks, pops, forgets and clears against a plain list of (position, deliver-at):
    /// strict, never early and at most one precision step late; lenient, never more than one
    /// tick early; every held position comes out exactly once unless forgotten or cleared.
    #[test]
    fn matches_a_reference_list() {
        let mut rng = crate::rng::SplitMix64::new(0x5EED);
        let mut next = move || rng.next();
        for case in 0..200u64 {
            let cfg = DelayedDelivery {
                enabled: true,
                tick: [0, 1, 7, 16, 100, 1000][(case % 6) as usize],
                strict: case % 2 == 0,
            };
            let precision = match cfg.tick {
                0 => 1,
                t => 1u64 << (63 - t.leading_zeros()),
            };
            let mut t = DelayedTracker::new(cfg);
            // The reference: position → deliver-at of what is held.
            let mut held: std::collections::BTreeMap<Position, u64> = Default::default();
            let mut now = 0u64;
            for _ in 0..300 {
                match next() % 10 {
                    0..=5 => {
                        let p = Position::new(1 + next() % 3, next() % 50);
                        let at = now + next() % 3000;
                        let was = held.contains_key(&p);
                        let hold = t.track(now, p, held.get(&p).copied().unwrap_or(at));
                        let expect = was || t.should_hold(now, at);
                        assert_eq!(hold, expect, "case {case}: track {p} at {at}, now {now}");
                        if hold && !was {
                            held.insert(p, at);
                        }
                    }
                    6 | 7 => {
                        now += next() % 700;
                        let mut out = Vec::new();
                        t.pop_due(now, &mut out);
                        for p in &out {
                            let at = held.remove(p).unwrap_or_else(|| {
                                panic!("case {case}: {p} popped twice or never held")
                            });
                            if cfg.strict {
                                assert!(at <= now, "case {case}: {p} due {at} popped at {now}");
                            } else {
                                assert!(
                                    at <= now + cfg.tick,
                                    "case {case}: {p} due {at} popped at {now}, tick {}",
                                    cfg.tick
                                );
                            }
                        }
                        if cfg.strict {
                            // Nothing due a whole precision step ago is still held.
                            assert!(
                                held.values().all(|at| at + precision > now),
                                "case {case}: late at {now}"
                            );
                        }
                    }
                    8 => {
                        let upto = Position::new(1 + next() % 3, next() % 50);
                        let n = t.remove_up_to(upto);
                        let before = held.len();
                        held.retain(|p, _| *p > upto);
                        assert_eq!(n, before - held.len(), "case {case}");
                    }
                    _ => {
                        if next() % 8 == 0 {
                            t.clear();
                            held.clear();
                        }
                    }
                }
                assert_eq!(t.len(), held.len(), "case {case}");
            }
        }
    }

    #[test]
    fn far_future_does_not_overflow() {
        let mut t = strict(1000);
        assert!(t.track(0, p(1), u64::MAX - 3));
        assert!(t.next_due().is_some_and(|d| d >= u64::MAX - 512));
        let mut out = Vec::new();
        assert_eq!(t.pop_due(u64::MAX - 600, &mut out), 0);
    }
}
