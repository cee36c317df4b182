//! A store whose appends and reads fail on demand, for the tests that show what the broker does
//! when its storage refuses (nothing receipted or dispatched is lost quietly).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use cursor::Position;

use super::{EntryStore, StorageError, SyncPolicy};

/// Which operations fail now; shared by every [`FaultyEntries`] made with it.
#[derive(Debug, Default)]
pub(crate) struct StoreFaults {
    appends: AtomicBool,
    reads: AtomicBool,
}

impl StoreFaults {
    /// Makes appends fail (`true`) or succeed again.
    pub(crate) fn fail_appends(&self, on: bool) {
        self.appends.store(on, Ordering::SeqCst);
    }

    /// Makes reads of stored entries fail (`true`) or succeed again.
    pub(crate) fn fail_reads(&self, on: bool) {
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
        if self.faults.appends.load(Ordering::SeqCst) {
            return Err(StoreFaults::injected("append"));
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
