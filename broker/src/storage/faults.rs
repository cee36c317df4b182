//! A store whose writes and reads fail on demand, for the tests and the simulator that show
//! what the broker does when its storage refuses (nothing receipted or dispatched is lost
//! quietly). Every stepped broker's store is wrapped in one (`SteppedBroker::store_faults`).

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
}

impl StoreFaults {
    /// Makes writes fail (`true`) or succeed again: a write request then fails whole, its
    /// SENDs get SEND_ERROR and the topic moves on to a new ledger.
    pub fn fail_writes(&self, on: bool) {
        self.writes.store(on, Ordering::SeqCst);
    }

    /// Makes reads of stored entries fail (`true`) or succeed again: deliveries then wait
    /// (the entries stay pending and come once reads work).
    pub fn fail_reads(&self, on: bool) {
        self.reads.store(on, Ordering::SeqCst);
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
        if self.faults.writes.load(Ordering::SeqCst) {
            return Err(StoreFaults::injected("write"));
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

    fn delete_below(&self, below: Position) {
        self.inner.delete_below(below);
    }
}
