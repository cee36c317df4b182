//! Where topics are stored: a [`Backend`] opens each topic's entry store and subscription
//! catalog and lists the topics it holds. [`MemoryBackend`] without `--data-dir`,
//! [`FileBackend`] with it (`DIR/topics/<topic, percent-encoded>/`).

use std::path::PathBuf;
use std::sync::Arc;

use cursor::Position;
use tracing::warn;

use super::catalog::{FileCatalog, MemoryCatalog, TopicCatalog};
use crate::storage::{
    decode_name, encode_name, EntryStore, FileEntries, MemoryEntries, ReadCache, StorageError,
};

/// Called with every stored entry of a topic being opened, in order.
pub(crate) type Visit<'a> = &'a mut dyn FnMut(Position, &[u8]) -> Result<(), StorageError>;

/// A topic's storage, as a backend opens it.
pub(crate) type TopicStorage = (Arc<dyn EntryStore>, Box<dyn TopicCatalog>);

/// The broker's storage: what a distributed store would implement too (see `docs/SCALING.md`).
pub(crate) trait Backend: Send + Sync + std::fmt::Debug {
    /// The full names of the topics stored, to recover them at start.
    fn topics(&self) -> Result<Vec<String>, StorageError>;

    /// Opens (creating) the storage of topic `full`, handing every stored entry to `visit`.
    fn open_topic(&self, full: &str, visit: Visit<'_>) -> Result<TopicStorage, StorageError>;

    /// Deletes topic `full`'s storage (the admin API's topic deletion); the topic is closed.
    fn delete_topic(&self, full: &str) -> Result<(), StorageError>;
}

/// Everything in memory: no topic survives the process.
#[derive(Debug, Default)]
pub(crate) struct MemoryBackend;

impl Backend for MemoryBackend {
    fn topics(&self) -> Result<Vec<String>, StorageError> {
        Ok(Vec::new())
    }

    fn open_topic(&self, _: &str, _: Visit<'_>) -> Result<TopicStorage, StorageError> {
        Ok((
            Arc::new(MemoryEntries::default()),
            Box::new(MemoryCatalog::default()),
        ))
    }

    fn delete_topic(&self, _: &str) -> Result<(), StorageError> {
        Ok(())
    }
}

/// Topics as directories under `--data-dir`: their log files ([`FileEntries`], reading
/// through the broker's `cache`) and their `subscriptions/` ([`FileCatalog`]).
#[derive(Debug)]
pub(crate) struct FileBackend {
    dir: PathBuf,
    cache: Arc<ReadCache>,
}

impl FileBackend {
    /// Topics in `dir` (created if missing).
    pub(crate) fn new(dir: PathBuf, cache: Arc<ReadCache>) -> FileBackend {
        FileBackend { dir, cache }
    }
}

impl Backend for FileBackend {
    fn topics(&self) -> Result<Vec<String>, StorageError> {
        let io = |op| {
            let path = self.dir.clone();
            move |source| StorageError::Io { op, path, source }
        };
        std::fs::create_dir_all(&self.dir).map_err(io("create"))?;
        let mut names = Vec::new();
        for e in std::fs::read_dir(&self.dir).map_err(io("list"))?.flatten() {
            let fname = e.file_name().to_string_lossy().into_owned();
            match decode_name(&fname) {
                Some(full) => names.push(full),
                None => warn!(dir = %e.path().display(), "not a topic directory; skipped"),
            }
        }
        names.sort();
        Ok(names)
    }

    fn open_topic(&self, full: &str, visit: Visit<'_>) -> Result<TopicStorage, StorageError> {
        let dir = self.dir.join(encode_name(full));
        let entries = FileEntries::open(&dir, self.cache.clone(), |p, s| visit(p, s))?;
        Ok((Arc::new(entries), Box::new(FileCatalog::new(&dir))))
    }

    fn delete_topic(&self, full: &str) -> Result<(), StorageError> {
        let dir = self.dir.join(encode_name(full));
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => crate::storage::sync_dir(&self.dir),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(StorageError::Io {
                op: "delete",
                path: dir,
                source,
            }),
        }
    }
}

/// `inner`'s topics, whose entry stores fail what `faults` says (the stepped broker's, and
/// tests').
#[derive(Debug)]
pub(crate) struct FaultyBackend {
    pub inner: Box<dyn Backend>,
    pub faults: Arc<crate::storage::StoreFaults>,
}

impl Backend for FaultyBackend {
    fn topics(&self) -> Result<Vec<String>, StorageError> {
        self.inner.topics()
    }

    fn open_topic(&self, full: &str, visit: Visit<'_>) -> Result<TopicStorage, StorageError> {
        let (inner, catalog) = self.inner.open_topic(full, visit)?;
        let entries = crate::storage::FaultyEntries::new(inner, self.faults.clone());
        Ok((Arc::new(entries), catalog))
    }

    fn delete_topic(&self, full: &str) -> Result<(), StorageError> {
        self.inner.delete_topic(full)
    }
}
