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
}

impl Appends {
    pub(super) fn new() -> Appends {
        Appends {
            sections: Vec::new(),
            metas: Vec::new(),
            last_pushed: None,
            taken_through: None,
            failed: VecDeque::new(),
            pushed: dedup::Sequences::default(),
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
    /// it (or a simulator, when it chooses), never the core.
    pub(crate) fn write_through(&self, through: Position) -> Written {
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
            Err(e) => self.failed(first, e.clone()),
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
    fn failed(&self, first: Position, error: Arc<StorageError>) {
        let mut st = lock(&self.state);
        let a = &mut st.appends;
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
            Published::Accepted(p) => self.write_through(p).map(|()| Some(p)),
            _ => Ok(None),
        }
    }

    /// Tells every subscription's dispatcher that entries were appended (it reads all
    /// there are; a notice already waiting makes this one free).
    pub(crate) fn notify_appended(&self) {
        for sub in lock(&self.state).subs.values() {
            sub.runtime.entries_appended();
        }
    }
}
