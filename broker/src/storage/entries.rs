//! Entry stores: where a topic's entries (their payload sections, as the producer sent them)
//! live once the topic has assigned them a position.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use cursor::Position;
use tracing::error;

use super::log::{ledger_path, read_record, Record, TopicLog};
use super::{StorageError, SyncPolicy};
use crate::sync::lock;

/// A topic's entries by position. Appends come in position order from one writer at a time;
/// reads come from any thread (the consumers' forwarders).
///
/// What a distributed store implements too: ledgers in Apache BookKeeper would append and read
/// by `(ledger, entry)` the same way.
pub(crate) trait EntryStore: Send + Sync + std::fmt::Debug {
    /// Stores the entry at `p`: readable at once, durable once [`commit`](Self::commit)ted.
    fn append(&self, p: Position, section: Arc<[u8]>) -> Result<(), StorageError>;

    /// Makes what was appended as durable as `policy` promises (a no-op in memory).
    fn commit(&self, policy: SyncPolicy) -> Result<(), StorageError>;

    /// The section of the entry at `p`, if it exists (from memory, the cache or the disk).
    fn read(&self, p: Position) -> Option<Arc<[u8]>>;

    /// Drops the entries below `below` (whole ledgers in the file store, the ledger being
    /// written excepted).
    fn delete_below(&self, below: Position);

    /// Whether entries survive a restart (the sync policy applies to receipts).
    fn durable(&self) -> bool;
}

/// Every entry in memory: the store without `--data-dir`.
#[derive(Debug, Default)]
pub(crate) struct MemoryEntries {
    map: RwLock<BTreeMap<Position, Arc<[u8]>>>,
}

fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|p| p.into_inner())
}

fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|p| p.into_inner())
}

impl EntryStore for MemoryEntries {
    fn append(&self, p: Position, section: Arc<[u8]>) -> Result<(), StorageError> {
        write(&self.map).insert(p, section);
        Ok(())
    }

    fn commit(&self, _: SyncPolicy) -> Result<(), StorageError> {
        Ok(())
    }

    fn read(&self, p: Position) -> Option<Arc<[u8]>> {
        read(&self.map).get(&p).cloned()
    }

    fn delete_below(&self, below: Position) {
        let old = {
            let mut map = write(&self.map);
            let keep = map.split_off(&below);
            std::mem::replace(&mut *map, keep)
        };
        // Freed here, after the lock: readers do not wait for the deallocation.
        drop(old);
    }

    fn durable(&self) -> bool {
        false
    }
}

/// Bytes counted per cached entry besides its section (map and queue slots, the `Arc`).
const ENTRY_OVERHEAD: u64 = 96;

/// The broker's read cache for the file stores: recently appended or read sections, up to a
/// byte budget (`--read-cache-mb`, as Pulsar's `managedLedgerCacheSizeMB`), the oldest
/// inserted evicted first. One cache for every topic.
#[derive(Debug)]
pub(crate) struct ReadCache {
    budget: u64,
    bytes: u64,
    map: HashMap<(u64, Position), Arc<[u8]>>,
    order: VecDeque<(u64, Position)>,
}

impl ReadCache {
    /// An empty cache holding at most `budget` bytes.
    pub(crate) fn new(budget: u64) -> ReadCache {
        ReadCache {
            budget,
            bytes: 0,
            map: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    fn cost(section: &[u8]) -> u64 {
        section.len() as u64 + ENTRY_OVERHEAD
    }

    fn insert(&mut self, topic: u64, p: Position, section: Arc<[u8]>) {
        let cost = Self::cost(&section);
        if cost > self.budget || self.map.contains_key(&(topic, p)) {
            return;
        }
        self.map.insert((topic, p), section);
        self.order.push_back((topic, p));
        self.bytes += cost;
        while self.bytes > self.budget {
            let Some(k) = self.order.pop_front() else {
                break;
            };
            if let Some(s) = self.map.remove(&k) {
                self.bytes -= Self::cost(&s);
            }
        }
    }

    fn get(&self, topic: u64, p: Position) -> Option<Arc<[u8]>> {
        self.map.get(&(topic, p)).cloned()
    }

    fn remove_below(&mut self, topic: u64, below: Position) {
        let gone = |k: &(u64, Position)| k.0 == topic && k.1 < below;
        let mut freed = 0;
        self.map.retain(|k, s| {
            let keep = !gone(k);
            if !keep {
                freed += Self::cost(s);
            }
            keep
        });
        self.order.retain(|k| !gone(k));
        self.bytes -= freed;
    }

    /// Bytes held (sections and their overhead).
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// Where each entry of one ledger file starts.
#[derive(Debug)]
struct LedgerIndex {
    path: PathBuf,
    /// Entry id of `offsets[0]`.
    base: u64,
    offsets: Vec<u64>,
    /// A read handle, opened on the first cache miss.
    file: OnceLock<File>,
}

impl LedgerIndex {
    fn new(dir: &Path, ledger_id: u64, base: u64) -> LedgerIndex {
        LedgerIndex {
            path: ledger_path(dir, ledger_id),
            base,
            offsets: Vec::new(),
            file: OnceLock::new(),
        }
    }

    fn offset(&self, entry_id: u64) -> Option<u64> {
        let i = entry_id.checked_sub(self.base)?;
        self.offsets.get(usize::try_from(i).ok()?).copied()
    }
}

/// A topic's entries in its log files under `--data-dir`: memory holds where each entry starts
/// (8 bytes an entry) and the shared [`ReadCache`]; a cache miss reads the record back from its
/// file and checks its CRC.
#[derive(Debug)]
pub(crate) struct FileEntries {
    topic: u64,
    log: Mutex<TopicLog>,
    ledgers: RwLock<BTreeMap<u64, LedgerIndex>>,
    cache: Arc<Mutex<ReadCache>>,
}

impl FileEntries {
    /// Opens the log in `dir` (creating it), handing every stored entry to `visit` in order.
    /// `topic` tells this topic's entries apart in the shared `cache`.
    pub(crate) fn open(
        dir: &Path,
        topic: u64,
        cache: Arc<Mutex<ReadCache>>,
        mut visit: impl FnMut(Position, &[u8]) -> Result<(), StorageError>,
    ) -> Result<FileEntries, StorageError> {
        let mut ledgers: BTreeMap<u64, LedgerIndex> = BTreeMap::new();
        let (log, _) = TopicLog::open(dir, |r: Record<'_>| {
            let p = r.position;
            ledgers
                .entry(p.ledger_id)
                .or_insert_with(|| LedgerIndex::new(dir, p.ledger_id, p.entry_id))
                .offsets
                .push(r.offset);
            visit(p, r.section)
        })?;
        Ok(FileEntries {
            topic,
            log: Mutex::new(log),
            ledgers: RwLock::new(ledgers),
            cache,
        })
    }

    /// Reads the entry at `p` from its file.
    fn read_from_disk(&self, p: Position) -> Result<Option<Arc<[u8]>>, StorageError> {
        {
            // The ledger being written may still have the entry in its write buffer.
            let mut log = lock(&self.log);
            if log.current_ledger() == Some(p.ledger_id) {
                log.flush()?;
            }
        }
        let ledgers = read(&self.ledgers);
        let Some((index, offset)) = ledgers
            .get(&p.ledger_id)
            .and_then(|l| Some((l, l.offset(p.entry_id)?)))
        else {
            return Ok(None);
        };
        let file = match index.file.get() {
            Some(f) => f,
            None => {
                let f = File::open(&index.path).map_err(super::io_err("open", &index.path))?;
                index.file.get_or_init(|| f)
            }
        };
        let (at, section) = read_record(file, &index.path, offset)?;
        if at != p {
            return Err(StorageError::Corrupt {
                path: index.path.clone(),
                offset,
                reason: format!("record for {p} holds {at}"),
            });
        }
        Ok(Some(Arc::from(section)))
    }
}

impl EntryStore for FileEntries {
    fn append(&self, p: Position, section: Arc<[u8]>) -> Result<(), StorageError> {
        let (offset, dir) = {
            let mut log = lock(&self.log);
            let offset = log.append(p, &section)?;
            (offset, log.dir().to_path_buf())
        };
        write(&self.ledgers)
            .entry(p.ledger_id)
            .or_insert_with(|| LedgerIndex::new(&dir, p.ledger_id, p.entry_id))
            .offsets
            .push(offset);
        lock(&self.cache).insert(self.topic, p, section);
        Ok(())
    }

    fn commit(&self, policy: SyncPolicy) -> Result<(), StorageError> {
        let mut log = lock(&self.log);
        match policy {
            SyncPolicy::Always => log.sync(),
            SyncPolicy::Interval => log.flush(),
        }
    }

    fn read(&self, p: Position) -> Option<Arc<[u8]>> {
        if let Some(s) = lock(&self.cache).get(self.topic, p) {
            return Some(s);
        }
        match self.read_from_disk(p) {
            Ok(Some(s)) => {
                lock(&self.cache).insert(self.topic, p, s.clone());
                Some(s)
            }
            Ok(None) => None,
            Err(e) => {
                error!(position = %p, error = %e, "an entry could not be read back from its log");
                None
            }
        }
    }

    fn delete_below(&self, below: Position) {
        let current = {
            let mut log = lock(&self.log);
            log.delete_below(below);
            log.current_ledger()
        };
        let old: Vec<LedgerIndex> = {
            let mut ledgers = write(&self.ledgers);
            let ids: Vec<u64> = ledgers
                .range(..below.ledger_id)
                .map(|(id, _)| *id)
                .filter(|id| Some(*id) != current)
                .collect();
            ids.iter().filter_map(|id| ledgers.remove(id)).collect()
        };
        drop(old);
        lock(&self.cache).remove_below(self.topic, below);
    }

    fn durable(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("broker-entries-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn section(i: u64) -> Arc<[u8]> {
        Arc::from(format!("section-{i:04}").into_bytes())
    }

    /// Every entry reads back whether the cache holds it or not, from the file being written
    /// (still in its write buffer) and from older files, and across a reopen.
    #[test]
    fn entries_read_back_from_cache_and_disk() {
        let dir = scratch("read");
        // A cache of three entries.
        let budget = 3 * (12 + ENTRY_OVERHEAD);
        let cache = Arc::new(Mutex::new(ReadCache::new(budget)));
        let ps: Vec<Position> = (0..10).map(|i| Position::new(1 + i / 4, i % 4)).collect();
        {
            let store = FileEntries::open(&dir, 7, cache.clone(), |_, _| Ok(())).unwrap();
            for (i, p) in ps.iter().enumerate() {
                store.append(*p, section(i as u64)).unwrap();
            }
            assert_eq!(
                lock(&cache).bytes(),
                budget,
                "the cache keeps to its budget"
            );
            for (i, p) in ps.iter().enumerate().rev() {
                assert_eq!(store.read(*p).as_deref(), Some(&*section(i as u64)), "{p}");
            }
            assert_eq!(store.read(Position::new(9, 0)), None);
            store.commit(SyncPolicy::Always).unwrap();
            store.delete_below(Position::new(3, 0));
            assert_eq!(store.read(ps[0]), None, "a deleted ledger");
            assert_eq!(store.read(ps[8]).as_deref(), Some(&*section(8)));
        }
        let mut seen = Vec::new();
        let store = FileEntries::open(&dir, 7, Arc::new(Mutex::new(ReadCache::new(0))), |p, _| {
            seen.push(p);
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, ps[8..].to_vec(), "ledgers 1 and 2 were deleted");
        assert_eq!(
            store.read(ps[9]).as_deref(),
            Some(&*section(9)),
            "no cache: from disk"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_cache_evicts_the_oldest_and_forgets_deleted_entries() {
        let mut c = ReadCache::new(2 * (12 + ENTRY_OVERHEAD));
        for i in 0..3 {
            c.insert(1, Position::new(1, i), section(i));
        }
        assert!(c.get(1, Position::new(1, 0)).is_none());
        assert!(c.get(1, Position::new(1, 2)).is_some());
        c.insert(2, Position::new(1, 0), section(0));
        c.remove_below(1, Position::new(2, 0));
        assert!(c.get(1, Position::new(1, 2)).is_none());
        assert!(
            c.get(2, Position::new(1, 0)).is_some(),
            "another topic's entry stays"
        );
        assert_eq!(c.bytes(), 12 + ENTRY_OVERHEAD);
    }
}
