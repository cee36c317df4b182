//! The two timer-driven trackers: nacks (entry granularity, one due time per entry) and ack
//! timeouts (tick-wide buckets of message ids).

use std::collections::{BTreeMap, BTreeSet};

use crate::hash::HashMap;

use crate::types::{EntryId, MessageId};

/// Nacked entries waiting for their redelivery time.
#[derive(Default)]
pub(crate) struct NackTracker {
    due_of: HashMap<EntryId, u64>,
    by_due: BTreeSet<(u64, EntryId)>,
}

impl NackTracker {
    pub(crate) fn len(&self) -> usize {
        self.due_of.len()
    }

    /// Schedules `entry` at `due`; an entry already scheduled keeps the earlier time.
    pub(crate) fn add(&mut self, entry: EntryId, due: u64) {
        if let Some(&old) = self.due_of.get(&entry) {
            if old <= due {
                return;
            }
            self.by_due.remove(&(old, entry));
        }
        self.due_of.insert(entry, due);
        self.by_due.insert((due, entry));
    }

    pub(crate) fn remove(&mut self, entry: EntryId) -> bool {
        match self.due_of.remove(&entry) {
            Some(d) => self.by_due.remove(&(d, entry)),
            None => false,
        }
    }

    /// Removes and returns every entry due at or before `now`, in entry order.
    pub(crate) fn take_due(&mut self, now: u64) -> Vec<EntryId> {
        let mut out = Vec::new();
        while let Some(&(d, e)) = self.by_due.first() {
            if d > now {
                break;
            }
            self.by_due.pop_first();
            self.due_of.remove(&e);
            out.push(e);
        }
        out.sort_unstable();
        out
    }

    pub(crate) fn next(&self) -> Option<u64> {
        self.by_due.first().map(|&(d, _)| d)
    }
}

/// Messages in the application's hands (and tracked orphan chunks), bucketed by the tick at
/// which their ack timeout expires.
pub(crate) struct AckTimeouts {
    timeout: Option<u64>,
    tick: u64,
    bucket_of: HashMap<MessageId, u64>,
    buckets: BTreeMap<u64, BTreeSet<MessageId>>,
}

impl AckTimeouts {
    pub(crate) fn new(timeout: Option<u64>, tick: u64) -> Self {
        AckTimeouts {
            timeout,
            tick: tick.max(1),
            bucket_of: HashMap::default(),
            buckets: BTreeMap::new(),
        }
    }

    /// Tracks `id` (no-op when the ack timeout is off or `id` is already tracked).
    pub(crate) fn add(&mut self, now: u64, id: MessageId) {
        let Some(t) = self.timeout else { return };
        if self.bucket_of.contains_key(&id) {
            return;
        }
        let at = now
            .saturating_add(t)
            .div_ceil(self.tick)
            .saturating_mul(self.tick);
        self.bucket_of.insert(id, at);
        self.buckets.entry(at).or_default().insert(id);
    }

    pub(crate) fn remove(&mut self, id: MessageId) {
        if let Some(at) = self.bucket_of.remove(&id) {
            if let Some(b) = self.buckets.get_mut(&at) {
                b.remove(&id);
                if b.is_empty() {
                    self.buckets.remove(&at);
                }
            }
        }
    }

    /// Stops tracking the ids of `entry` that `keep` rejects.
    pub(crate) fn remove_entry(&mut self, entry: EntryId, keep: impl Fn(&MessageId) -> bool) {
        let ids: Vec<MessageId> = self
            .bucket_of
            .keys()
            .filter(|id| id.entry() == entry && !keep(id))
            .copied()
            .collect();
        for id in ids {
            self.remove(id);
        }
    }

    /// Removes and returns every id whose bucket expired at or before `now`, in id order.
    pub(crate) fn take_expired(&mut self, now: u64) -> Vec<MessageId> {
        let mut out = Vec::new();
        while let Some((&at, _)) = self.buckets.first_key_value() {
            if at > now {
                break;
            }
            if let Some((_, ids)) = self.buckets.pop_first() {
                for id in &ids {
                    self.bucket_of.remove(id);
                }
                out.extend(ids);
            }
        }
        out.sort_unstable();
        out
    }

    pub(crate) fn next(&self) -> Option<u64> {
        self.buckets.first_key_value().map(|(&at, _)| at)
    }
}
