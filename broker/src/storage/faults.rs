//! A store whose writes and reads fail on demand, for the tests and the simulator that show
//! what the broker does when its storage refuses (nothing receipted or dispatched is lost
//! quietly). Every stepped broker's store is wrapped in one (`SteppedBroker::store_faults`);
//! a broker started with `--fail-writes-while-exists PATH` (test suites) in one whose writes
//! fail as on a full disk while that file exists.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use cursor::Position;

use super::{EntryStore, StorageError, SyncPolicy};

/// Which storage operations fail now, for every topic of a stepped broker
/// ([`SteppedBroker::store_faults`](crate::stepped::SteppedBroker::store_faults)).
#[derive(Debug, Default)]
pub struct StoreFaults {
    writes: AtomicBool,
    reads: AtomicBool,
    /// Writes also fail while this file exists (`--fail-writes-while-exists`).
    while_exists: Option<std::path::PathBuf>,
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
    pub inner: Arc<dyn EntryStore>,
    pub faults: Arc<StoreFaults>,
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
        self.inner.read(p)
    }

    /// While reads fail, nothing is had without a read (which then fails): the delivery asks
    /// for one, as it would on a cache miss.
    fn read_cached(&self, p: Position) -> super::entries::Cached {
        if self.faults.reads.load(Ordering::SeqCst) {
            return super::entries::Cached::Miss;
        }
        self.inner.read_cached(p)
    }

    fn delete_below(&self, below: Position) {
        self.inner.delete_below(below);
    }
}
