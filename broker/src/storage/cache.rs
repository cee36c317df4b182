//! The broker's read cache for the file stores: one byte budget over every topic, the oldest
//! arrival evicted first whichever topic holds it.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use bytes::Bytes;
use cursor::Position;

use crate::sync::{lock, read, write};

/// Bytes counted per cached entry besides its section (the map's node, the `Arc`).
pub(super) const ENTRY_OVERHEAD: u64 = 96;

/// The broker's read cache for the file stores (`--read-cache-mb`, as Pulsar's
/// `managedLedgerCacheSizeMB`), shared by every topic. Each topic keeps its cached sections in a
/// map of its own; the cache keeps one queue of every section's arrival over all topics, and
/// while the broker is over budget it evicts the oldest arrival, whichever topic holds it (as
/// Pulsar's cache manager evicts by insertion order). So a topic that appends fast, or whose
/// subscription nobody reads, cannot keep the other topics' recent entries out.
///
/// Bytes are counted when a section enters a topic's map and given back by whoever takes it out
/// (eviction, retention, the topic's end), under that map's lock: each exactly once.
/// Lock order: the arrival queue, then one topic's map at a time; a topic's map is never held
/// while the queue is taken.
#[derive(Debug)]
pub(crate) struct ReadCache {
    budget: u64,
    used: AtomicU64,
    /// Sections in the topics' maps.
    entries: AtomicU64,
    /// Every cached section's arrival, oldest first. An arrival whose section retention or the
    /// topic's end took out already is stale: skipped when it comes to the front, and dropped
    /// when the stale ones outnumber the live ones (see [`ReadCache::admit`]).
    arrivals: Mutex<VecDeque<Arrival>>,
}

/// One section's arrival in a topic's map.
#[derive(Debug)]
struct Arrival {
    owner: Weak<RwLock<CacheMap>>,
    p: Position,
}

/// A topic's cached sections by position.
type CacheMap = BTreeMap<Position, Bytes>;

/// Stale arrivals tolerated beyond the live ones before the queue is compacted.
const STALE_SLACK: usize = 1024;

impl ReadCache {
    /// A budget of `budget` bytes, none used.
    pub(crate) fn new(budget: u64) -> ReadCache {
        ReadCache {
            budget,
            used: AtomicU64::new(0),
            entries: AtomicU64::new(0),
            arrivals: Mutex::new(VecDeque::new()),
        }
    }

    fn cost(section: &[u8]) -> u64 {
        section.len() as u64 + ENTRY_OVERHEAD
    }

    /// Bytes held (sections and their overhead), over every topic.
    pub(crate) fn bytes(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// `owner` took in a section at `p` (already counted): queues its arrival, then evicts the
    /// oldest arrivals over all topics until the broker is within budget.
    fn admit(&self, owner: Weak<RwLock<CacheMap>>, p: Position) {
        let mut evicted = Vec::new();
        let mut q = lock(&self.arrivals);
        q.push_back(Arrival { owner, p });
        while self.used.load(Ordering::Relaxed) > self.budget {
            let Some(oldest) = q.pop_front() else {
                break;
            };
            let Some(map) = oldest.owner.upgrade() else {
                continue; // the topic is gone, and gave its bytes back
            };
            let removed = write(&map).remove(&oldest.p);
            if let Some(s) = removed {
                self.forget(&s);
                evicted.push(s);
            }
        }
        let live = usize::try_from(self.entries.load(Ordering::Relaxed)).unwrap_or(usize::MAX);
        if q.len() > live.saturating_mul(2).saturating_add(STALE_SLACK) {
            q.retain(|a| {
                a.owner
                    .upgrade()
                    .is_some_and(|m| read(&m).contains_key(&a.p))
            });
        }
        drop(q);
        // Freed after the locks: other topics' inserts do not wait for the deallocation.
        drop(evicted);
    }

    /// Gives back what one section taken out of a topic's map held.
    fn forget(&self, section: &[u8]) {
        self.used.fetch_sub(Self::cost(section), Ordering::Relaxed);
        self.entries.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One topic's cached sections, under the broker-wide [`ReadCache`].
#[derive(Debug)]
pub(super) struct TopicCache {
    budget: Arc<ReadCache>,
    map: Arc<RwLock<CacheMap>>,
}

impl TopicCache {
    pub(super) fn new(budget: Arc<ReadCache>) -> TopicCache {
        TopicCache {
            budget,
            map: Arc::new(RwLock::new(BTreeMap::new())),
        }
    }

    pub(super) fn get(&self, p: Position) -> Option<Bytes> {
        read(&self.map).get(&p).cloned()
    }

    pub(super) fn insert(&self, p: Position, section: Bytes) {
        let cost = ReadCache::cost(&section);
        if cost > self.budget.budget {
            return;
        }
        {
            let mut map = write(&self.map);
            if map.insert(p, section).is_some() {
                return; // cached already, and its arrival queued
            }
            // Counted under the lock, so that whoever takes it out gives back after this.
            self.budget.used.fetch_add(cost, Ordering::Relaxed);
            self.budget.entries.fetch_add(1, Ordering::Relaxed);
        }
        self.budget.admit(Arc::downgrade(&self.map), p);
    }

    pub(super) fn remove_below(&self, below: Position) {
        let old = {
            let mut map = write(&self.map);
            let keep = map.split_off(&below);
            std::mem::replace(&mut *map, keep)
        };
        for s in old.values() {
            self.budget.forget(s);
        }
    }
}

impl Drop for TopicCache {
    fn drop(&mut self) {
        // Taken out under the lock: an eviction that upgraded this map just now finds nothing
        // left to give back twice.
        let held = std::mem::take(&mut *write(&self.map));
        for s in held.values() {
            self.budget.forget(s);
        }
    }
}

#[cfg(test)]
mod tests;
