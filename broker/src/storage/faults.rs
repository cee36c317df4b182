//! A store whose writes and reads fail on demand, for the tests and the simulator that show
//! what the broker does when its storage refuses (nothing receipted or dispatched is lost
//! quietly). Every stepped broker's store is wrapped in one (`SteppedBroker::store_faults`);
//! a broker started with `--fail-writes-while-exists PATH` (test suites) in one whose writes
//! fail as on a full disk while that file exists.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use cursor::Position;

use super::{EntryStore, StorageError, SyncPolicy};

/// Which storage operations fail now, for every topic of a stepped broker
/// ([`SteppedBroker::store_faults`](crate::stepped::SteppedBroker::store_faults)), and how
/// reads behave: from memory, or from a store on other machines that answers later.
#[derive(Default)]
pub struct StoreFaults {
    writes: AtomicBool,
    reads: AtomicBool,
    /// Entries are in memory only among the last this many read, per topic; 0: all in memory
    /// (see [`StoreFaults::cold_reads`]).
    cold: AtomicUsize,
    /// Read requests are held until completed by the caller (see [`StoreFaults::hold_reads`]).
    hold: AtomicBool,
    held: Mutex<Vec<HeldRead>>,
    /// Writes also fail while this file exists (`--fail-writes-while-exists`).
    while_exists: Option<std::path::PathBuf>,
}

/// A read request held until its caller completes it (it runs the read then).
pub(crate) type HeldRead = Box<dyn FnOnce() + Send>;

impl std::fmt::Debug for StoreFaults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreFaults")
            .field("writes", &self.writes)
            .field("reads", &self.reads)
            .field("cold", &self.cold)
            .field("hold", &self.hold)
            .field("held", &self.held_reads())
            .finish_non_exhaustive()
    }
}

impl StoreFaults {
    /// Makes writes fail (`true`) or succeed again: a write request then fails whole, its
    /// SENDs' producers are closed, new producers are refused for a while, and the topic
    /// moves on to a new ledger.
    pub fn fail_writes(&self, on: bool) {
        self.writes.store(on, Ordering::SeqCst);
    }

    /// Makes reads of stored entries fail (`true`) or succeed again: deliveries then wait
    /// (the entries stay pending and come once reads work).
    pub fn fail_reads(&self, on: bool) {
        self.reads.store(on, Ordering::SeqCst);
    }

    /// Makes the store cold (`Some(n)`): an entry is in memory only once a read request
    /// fetched it, and only among the last `n` fetched (per topic, at least 1), as with a store
    /// on other machines and a small cache; every delivery of another entry asks for a read.
    /// `None`: every entry in memory again.
    pub fn cold_reads(&self, keep: Option<usize>) {
        self.cold
            .store(keep.map_or(0, |n| n.max(1)), Ordering::SeqCst);
    }

    /// Holds read requests (`true`) until [`complete_read`](Self::complete_read) runs them,
    /// in any order, as a store on other machines answers later; `false` runs later ones at
    /// once (the held ones stay held).
    pub fn hold_reads(&self, on: bool) {
        self.hold.store(on, Ordering::SeqCst);
    }

    /// How many read requests are held.
    pub fn held_reads(&self) -> usize {
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Runs the `i`-th held read request (oldest first), which completes it: with the
    /// faults in force now (a read that fails now fails). False if there is no such request.
    pub fn complete_read(&self, i: usize) -> bool {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if i >= held.len() {
            return false;
        }
        let read = held.remove(i);
        drop(held);
        read();
        true
    }

    /// Drops every held read request without completing it (a crash).
    pub fn forget_reads(&self) {
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// Runs `read` now, or holds it while reads are held.
    pub(crate) fn run_read(&self, read: HeldRead) {
        if self.hold.load(Ordering::SeqCst) {
            self.held
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(read);
        } else {
            read();
        }
    }

    /// Faults that fail every write while `path` exists, with a full disk's error.
    pub(crate) fn while_exists(path: std::path::PathBuf) -> StoreFaults {
        StoreFaults {
            while_exists: Some(path),
            ..StoreFaults::default()
        }
    }

    fn write_fault(&self) -> Option<StorageError> {
        if self.writes.load(Ordering::SeqCst) {
            return Some(StoreFaults::injected("write"));
        }
        let path = self.while_exists.as_ref().filter(|p| p.exists())?;
        Some(StorageError::Io {
            op: "write",
            path: path.clone(),
            source: std::io::Error::new(
                std::io::ErrorKind::StorageFull,
                "No space left on device (injected: the fault file exists)",
            ),
        })
    }

    fn injected(op: &'static str) -> StorageError {
        StorageError::Io {
            op,
            path: "injected-fault".into(),
            source: std::io::Error::other("injected storage fault"),
        }
    }
}

/// `inner`, failing what `faults` says.
#[derive(Debug)]
pub(crate) struct FaultyEntries {
    inner: Arc<dyn EntryStore>,
    faults: Arc<StoreFaults>,
    /// What a cold store has in memory: the entries read last, oldest first.
    warm: Mutex<VecDeque<Position>>,
}

impl FaultyEntries {
    /// `inner`, failing and holding what `faults` says.
    pub(crate) fn new(inner: Arc<dyn EntryStore>, faults: Arc<StoreFaults>) -> FaultyEntries {
        FaultyEntries {
            inner,
            faults,
            warm: Mutex::new(VecDeque::new()),
        }
    }

    fn warm(&self) -> std::sync::MutexGuard<'_, VecDeque<Position>> {
        self.warm.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl EntryStore for FaultyEntries {
    fn write(
        &self,
        batch: &[(Position, Bytes)],
        cache: bool,
        policy: SyncPolicy,
    ) -> Result<(), StorageError> {
        if let Some(e) = self.faults.write_fault() {
            return Err(e);
        }
        self.inner.write(batch, cache, policy)
    }

    fn commit(&self, policy: SyncPolicy) -> Result<(), StorageError> {
        self.inner.commit(policy)
    }

    fn read(&self, p: Position) -> Result<Option<Bytes>, StorageError> {
        if self.faults.reads.load(Ordering::SeqCst) {
            return Err(StoreFaults::injected("read"));
        }
        let r = self.inner.read(p);
        let keep = self.faults.cold.load(Ordering::SeqCst);
        if matches!(r, Ok(Some(_))) && keep > 0 {
            let mut warm = self.warm();
            if !warm.contains(&p) {
                while warm.len() >= keep {
                    warm.pop_front();
                }
                warm.push_back(p);
            }
        }
        r
    }

    /// While reads fail, nothing is had without a read (which then fails): the delivery asks
    /// for one, as it would on a cache miss.
    fn read_cached(&self, p: Position) -> super::entries::Cached {
        if self.faults.reads.load(Ordering::SeqCst) {
            return super::entries::Cached::Miss;
        }
        match self.inner.read_cached(p) {
            super::entries::Cached::Hit(_)
                if self.faults.cold.load(Ordering::SeqCst) > 0 && !self.warm().contains(&p) =>
            {
                super::entries::Cached::Miss
            }
            other => other,
        }
    }

    fn delete_below(&self, below: Position) {
        self.inner.delete_below(below);
    }
}
