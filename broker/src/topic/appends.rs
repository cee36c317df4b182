//! Entries on their way into the store, as requests that complete later.
//!
//! A SEND is [`push`](Topic::push)ed: the topic gives it the position it will have and queues
//! it; nothing is stored, dispatched or receipted yet, and the core does no IO. The shell then
//! runs the session's write request, [`write_through`](Topic::write_through): the queued
//! entries go to the [`EntryStore`](crate::storage::EntryStore) in one batch, all or nothing,
//! and only once the store answered are they in the ledger (readable by subscriptions, counted
//! for deduplication and in the chunk index); the session receipts them when the request's
//! completion comes back. A failed batch fails every entry pushed so far (their positions
//! follow the failed ones), and the topic moves on to a new ledger: a position is never
//! written twice, as a BookKeeper writer abandons a ledger after a failed add.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use cursor::{EntryMeta, Ledger, Position};

use super::{dedup, Topic};
use crate::storage::StorageError;
use crate::sync::lock;

/// Failed batches remembered for the sessions whose requests they were part of.
const FAILURES_KEPT: usize = 32;

/// After a failed write, new producers are refused for the topic's refusal time, doubled per
/// failure in a row up to this many times it; a successful write ends it.
const REFUSAL_MAX_FACTOR: u64 = 16;

/// How long after the last failed write (with none succeeding since) the health check and
/// `storageWriteFailing` report the topic's storage as failing.
pub(crate) const FAILING_REPORTED_MS: u64 = 60_000;

/// How the topic's writes fare: what the stats, the metrics and the health check show, and
/// whether a new producer is refused ([`Topic::refuses_producers`]).
#[derive(Clone, Debug, Default)]
pub(crate) struct WriteHealth {
    /// The first refusal's length, ms (`BrokerConfig::write_refusal_ms`).
    pub refusal_ms: u64,
    /// Write batches that failed since the topic was loaded.
    pub failures: u64,
    /// Failed in a row (0: the last write succeeded, or none failed).
    pub in_row: u32,
    /// The last failure's error, and when it happened (ms since the Unix epoch).
    pub last_error: Option<Arc<StorageError>>,
    pub failed_at_ms: u64,
    /// New producers are refused until then.
    pub refused_until_ms: u64,
}

impl WriteHealth {
    fn failed(&mut self, error: Arc<StorageError>, now_ms: u64) {
        self.failures += 1;
        self.in_row = self.in_row.saturating_add(1);
        self.last_error = Some(error);
        self.failed_at_ms = now_ms;
        let doubled = self.refusal_ms << (self.in_row - 1).min(4);
        let window = doubled.min(self.refusal_ms.saturating_mul(REFUSAL_MAX_FACTOR));
        self.refused_until_ms = now_ms.saturating_add(window);
    }

    fn succeeded(&mut self) {
        self.in_row = 0;
        self.refused_until_ms = 0;
    }

    /// How many ms new producers are still refused at `now_ms`, if they are: a write failed
    /// less than its refusal window ago and none succeeded since.
    fn refused_for(&self, now_ms: u64) -> Option<u64> {
        let refusing = self.in_row > 0 && self.failed_at_ms <= now_ms;
        refusing
            .then(|| self.refused_until_ms.saturating_sub(now_ms))
            .filter(|&left| left > 0)
    }

    /// Whether the storage counts as failing at `now_ms`: the last write failed, less than
    /// [`FAILING_REPORTED_MS`] ago.
    pub(crate) fn failing(&self, now_ms: u64) -> bool {
        self.in_row > 0
            && now_ms >= self.failed_at_ms
            && now_ms - self.failed_at_ms < FAILING_REPORTED_MS
    }
}

/// What [`Topic::push`] did with an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Published {
    /// Queued for the store at this position: receipt it once its write completed.
    Accepted(Position),
    /// Not queued: deduplication found its producer's sequence id stored already.
    Duplicate,
    /// Not queued: deduplication found its producer's sequence id in a write that has not
    /// completed (Pulsar answers "cannot determine whether the message is a duplicate").
    InFlight,
    /// Not queued: the topic is terminated.
    Terminated,
    /// Not queued: an earlier entry of its producer failed to be written, and the producer has
    /// not been opened again since. Storing it would put it ahead of the failed ones, which the
    /// client sends again once the producer is open; the session closes the producer when it
    /// hears of the failed write.
    ProducerFailed,
}

/// The outcome of a write request.
pub(crate) type Written = Result<(), Arc<StorageError>>;

/// The entries pushed and not yet in the ledger (part of the topic's state).
#[derive(Debug)]
pub(super) struct Appends {
    /// Pushed, not yet taken by a writer, in position order.
    sections: Vec<(Position, Bytes)>,
    metas: Vec<EntryMeta>,
    /// The last position pushed while any pushed entry is not yet in the ledger.
    last_pushed: Option<Position>,
    /// The last position a writer took (stored or failed).
    taken_through: Option<Position>,
    /// Recent failed batches: first and last position, and why.
    failed: VecDeque<(Position, Position, Arc<StorageError>)>,
    /// Sequence ids pushed and not yet stored (deduplication).
    pushed: dedup::Sequences,
    health: WriteHealth,
    /// Producers (by name) with an entry in a failed write, until they are opened again.
    failed_producers: std::collections::BTreeSet<String>,
}

impl Appends {
    pub(super) fn new(refusal_ms: u64) -> Appends {
        Appends {
            sections: Vec::new(),
            metas: Vec::new(),
            last_pushed: None,
            taken_through: None,
            failed: VecDeque::new(),
            pushed: dedup::Sequences::default(),
            health: WriteHealth {
                refusal_ms,
                ..WriteHealth::default()
            },
            failed_producers: std::collections::BTreeSet::new(),
        }
    }

    /// What became of a write through `p`, once a writer took it.
    fn outcome(&self, p: Position) -> Option<Written> {
        if self.taken_through.is_none_or(|t| t < p) {
            return None;
        }
        Some(
            match self.failed.iter().find(|(a, b, _)| *a <= p && p <= *b) {
                Some((_, _, e)) => Err(e.clone()),
                None => Ok(()),
            },
        )
    }
}

impl Topic {
    /// Queues one entry for the store (see the module doc): its position, or why it was not
    /// queued. With `deduplicate`, a sequence id already stored or in flight is not queued.
    pub(crate) fn push(&self, meta: EntryMeta, section: Bytes) -> Published {
        let deduplicate = self.is_deduplicating();
        let mut st = lock(&self.state);
        if self.is_terminated() {
            return Published::Terminated;
        }
        let failed = &st.appends.failed_producers;
        if !failed.is_empty()
            && meta
                .producer_name
                .as_ref()
                .is_some_and(|n| failed.contains(n))
        {
            return Published::ProducerFailed;
        }
        if deduplicate {
            if st.sequences.is_duplicate(&meta) {
                return Published::Duplicate;
            }
            if st.appends.pushed.is_duplicate(&meta) {
                return Published::InFlight;
            }
            st.appends.pushed.record(&meta);
        }
        let pos = {
            let ledger = self.ledger.read();
            match st.appends.last_pushed {
                Some(last) => ledger.append_position_after(last),
                None => ledger.next_append_position(),
            }
        };
        let a = &mut st.appends;
        a.last_pushed = Some(pos);
        a.sections.push((pos, section));
        a.metas.push(meta);
        Published::Accepted(pos)
    }

    /// Runs a write request: stores the entries pushed up to `through` that no writer took yet,
    /// then puts them in the ledger and wakes the subscriptions (an entry is dispatched no
    /// earlier than the write that asked for it completes).
    /// Returns what became of the entry at `through`. Blocks on the store: the shell calls
    /// it (or a simulator, when it chooses), never the core. `now_ms` (since the Unix epoch)
    /// dates a failure: new producers are refused for a while after it.
    pub(crate) fn write_through(&self, through: Position, now_ms: u64) -> Written {
        let _writer = lock(&self.writer);
        let (sections, metas, readers) = {
            let mut st = lock(&self.state);
            if let Some(done) = st.appends.outcome(through) {
                return done;
            }
            let a = &mut st.appends;
            let n = a.sections.partition_point(|(p, _)| *p <= through);
            let sections: Vec<(Position, Bytes)> = a.sections.drain(..n).collect();
            let metas: Vec<EntryMeta> = a.metas.drain(..n).collect();
            (sections, metas, !st.subs.is_empty())
        };
        let Some(&(first, _)) = sections.first() else {
            return Ok(());
        };
        let result = self
            .entries
            .write(&sections, readers, self.sync)
            .map_err(Arc::new);
        match &result {
            Ok(()) => self.stored(&sections, metas),
            Err(e) => self.failed(first, &metas, e.clone(), now_ms),
        }
        lock(&self.state).appends.outcome(through).unwrap_or(result)
    }

    /// The batch `written` (with its entries' `metas`) is stored: into the ledger, the chunk
    /// index, the deduplication record and the counters; the subscriptions are told.
    fn stored(&self, written: &[(Position, Bytes)], metas: Vec<EntryMeta>) {
        let (mut messages, mut bytes, entries) = (0, 0, metas.len() as u64);
        {
            let mut st = lock(&self.state);
            let mut ledger = self.ledger.write();
            for (&(at, _), meta) in written.iter().zip(metas) {
                messages += u64::from(meta.messages());
                bytes += u64::from(meta.size);
                st.sequences.record(&meta);
                let chunk = meta.chunk.as_ref().map(|c| c.uuid.clone());
                let pos = ledger.append(meta);
                if pos != at {
                    tracing::error!(topic = %self.name, %pos, written = %at, "an entry went into the ledger at another position than it was written at");
                }
                if let Some(uuid) = chunk {
                    st.chunks.entry(uuid).or_default().push(pos);
                }
            }
            drop(ledger);
            let a = &mut st.appends;
            a.health.succeeded();
            a.taken_through = written.last().map(|w| w.0);
            if a.sections.is_empty() {
                a.last_pushed = None;
                a.pushed = dedup::Sequences::default();
            }
        }
        let mut c = lock(&self.counters);
        c.msg_in += messages;
        c.bytes_in += bytes;
        c.entries_in += entries;
        drop(c);
        self.notify_appended();
    }

    /// A batch starting at `first` failed: it and everything pushed after it fail (their
    /// positions follow it), and the next entry starts a ledger after every one they used.
    fn failed(&self, first: Position, taken: &[EntryMeta], error: Arc<StorageError>, now_ms: u64) {
        let mut st = lock(&self.state);
        let a = &mut st.appends;
        a.health.failed(error.clone(), now_ms);
        let names = taken
            .iter()
            .chain(&a.metas)
            .filter_map(|m| m.producer_name.clone());
        a.failed_producers.extend(names);
        let last = a.last_pushed.unwrap_or(first);
        tracing::warn!(topic = %self.name, %first, %last, error = %error, "a write failed: its entries and those queued after them are refused, the topic moves on to a new ledger");
        a.sections.clear();
        a.metas.clear();
        a.last_pushed = None;
        a.taken_through = Some(last);
        a.pushed = dedup::Sequences::default();
        if a.failed.len() == FAILURES_KEPT {
            a.failed.pop_front();
        }
        a.failed.push_back((first, last, error));
        self.ledger.write().roll_over_to(last.ledger_id + 1);
    }

    /// Pushes one entry and runs its write at once (tests, the fuzzer, tools): its position,
    /// or `None` when the topic is terminated (or deduplication dropped it).
    pub(crate) fn publish(
        &self,
        meta: EntryMeta,
        section: Bytes,
    ) -> Result<Option<Position>, Arc<StorageError>> {
        match self.push(meta, section) {
            Published::Accepted(p) => self.write_through(p, 0).map(|()| Some(p)),
            _ => Ok(None),
        }
    }

    /// Producer `name` was opened (again): its SENDs are queued again after a failed write
    /// (see [`Published::ProducerFailed`]).
    pub(crate) fn producer_opened(&self, name: &str) {
        lock(&self.state).appends.failed_producers.remove(name);
    }

    /// How the topic's writes fare (stats, metrics, the health check).
    pub(crate) fn write_health(&self) -> WriteHealth {
        lock(&self.state).appends.health.clone()
    }

    /// Whether a new producer is refused at `now_ms` (ms since the Unix epoch), and if so the
    /// store's last error and how many ms the refusal lasts: a write failed less than the
    /// refusal time ago (a second by default, doubled per failure in a row up to 16 times that)
    /// and none succeeded since. Pulsar's
    /// clients back off from the refusal and fail the messages they hold, as they do for a
    /// producer over a backlog quota.
    pub(crate) fn refuses_producers(&self, now_ms: u64) -> Option<(Arc<StorageError>, u64)> {
        let st = lock(&self.state);
        let h = &st.appends.health;
        let left = h.refused_for(now_ms)?;
        Some((h.last_error.clone()?, left))
    }

    /// Tells every subscription's dispatcher that entries were appended (it reads all
    /// there are; a notice already waiting makes this one free).
    pub(crate) fn notify_appended(&self) {
        for sub in lock(&self.state).subs.values() {
            sub.runtime.entries_appended();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each failure in a row doubles how long new producers are refused, 1 s up to 16 s; a
    /// successful write ends the refusal; the storage counts as failing for a minute after the
    /// last failure, unless a write succeeded since.
    #[test]
    fn refusals_double_per_failure_in_a_row_and_end_on_success() {
        let error = || {
            Arc::new(StorageError::Io {
                op: "write",
                path: "t".into(),
                source: std::io::Error::other("full"),
            })
        };
        let mut h = WriteHealth {
            refusal_ms: 1_000,
            ..WriteHealth::default()
        };
        let windows: Vec<u64> = (0..6)
            .map(|i| {
                let now = 100_000 * i;
                h.failed(error(), now);
                let left = h.refused_for(now).unwrap_or(0);
                assert_eq!(h.refused_for(now + left), None, "over after its window");
                left
            })
            .collect();
        assert_eq!(windows, [1_000, 2_000, 4_000, 8_000, 16_000, 16_000]);
        assert_eq!((h.failures, h.in_row), (6, 6));
        let last = h.failed_at_ms;
        assert!(h.failing(last + FAILING_REPORTED_MS - 1));
        assert!(!h.failing(last + FAILING_REPORTED_MS));
        assert!(
            !h.failing(last - 1),
            "a clock that went back reports nothing"
        );
        assert_eq!(
            h.refused_for(last - 1),
            None,
            "a clock that went back refuses nothing"
        );
        h.succeeded();
        assert!(!h.failing(last));
        assert_eq!(h.refused_for(last), None, "a success ends the refusal");
        assert_eq!((h.failures, h.in_row, h.refused_until_ms), (6, 0, 0));
        h.failed(error(), last + 1);
        assert_eq!(
            h.refused_until_ms - h.failed_at_ms,
            1_000,
            "back to a second"
        );
    }
}
