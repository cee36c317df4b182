//! Entry stores: where a topic's entries (their payload sections, as the producer sent them)
//! live once the topic has assigned them a position.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use cursor::Position;
use tracing::error;

use super::log::{ledger_path, read_record, Record, TopicLog};
use super::{StorageError, SyncPolicy};
use crate::sync::lock;

/// A topic's entries by position. Appends come in position order from one writer at a time;
/// reads come from any thread (the subscriptions' dispatcher threads).
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

/// Bytes counted per cached entry besides its section (the map's node, the `Arc`).
const ENTRY_OVERHEAD: u64 = 96;

/// The broker's read cache budget for the file stores (`--read-cache-mb`, as Pulsar's
/// `managedLedgerCacheSizeMB`), shared by every topic: each topic caches its recently appended
/// or read sections and, while the broker is over budget, evicts its own oldest positions (a
/// topic with nothing cached does not cache while others hold the whole budget; retention and
/// deletion give the bytes back).
#[derive(Debug)]
pub(crate) struct ReadCache {
    budget: u64,
    used: AtomicU64,
}

impl ReadCache {
    /// A budget of `budget` bytes, none used.
    pub(crate) fn new(budget: u64) -> ReadCache {
        ReadCache {
            budget,
            used: AtomicU64::new(0),
        }
    }

    fn cost(section: &[u8]) -> u64 {
        section.len() as u64 + ENTRY_OVERHEAD
    }

    /// Bytes held (sections and their overhead), over every topic.
    pub(crate) fn bytes(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }
}

/// One topic's cached sections, under the broker-wide budget.
#[derive(Debug)]
struct TopicCache {
    budget: Arc<ReadCache>,
    map: RwLock<BTreeMap<Position, Arc<[u8]>>>,
}

impl TopicCache {
    fn get(&self, p: Position) -> Option<Arc<[u8]>> {
        read(&self.map).get(&p).cloned()
    }

    fn insert(&self, p: Position, section: Arc<[u8]>) {
        let cost = ReadCache::cost(&section);
        if cost > self.budget.budget {
            return;
        }
        let mut map = write(&self.map);
        if map.insert(p, section).is_some() {
            return;
        }
        let used = self.budget.used.fetch_add(cost, Ordering::Relaxed) + cost;
        let mut over = used.saturating_sub(self.budget.budget);
        let mut freed = 0;
        while over > 0 {
            let Some((_, s)) = map.pop_first() else { break };
            let c = ReadCache::cost(&s);
            freed += c;
            over = over.saturating_sub(c);
        }
        self.budget.used.fetch_sub(freed, Ordering::Relaxed);
    }

    fn remove_below(&self, below: Position) {
        let old = {
            let mut map = write(&self.map);
            let keep = map.split_off(&below);
            std::mem::replace(&mut *map, keep)
        };
        let freed: u64 = old.values().map(|s| ReadCache::cost(s)).sum();
        self.budget.used.fetch_sub(freed, Ordering::Relaxed);
    }
}

impl Drop for TopicCache {
    fn drop(&mut self) {
        let held: u64 = read(&self.map).values().map(|s| ReadCache::cost(s)).sum();
        self.budget.used.fetch_sub(held, Ordering::Relaxed);
    }
}

/// Where each entry of one ledger file starts: 4 bytes an entry while the file is under
/// 4 GiB, 8 beyond.
#[derive(Debug)]
enum Offsets {
    Small(Vec<u32>),
    Large(Vec<u64>),
}

impl Offsets {
    fn push(&mut self, offset: u64) {
        match self {
            Offsets::Small(v) => match u32::try_from(offset) {
                Ok(o) => v.push(o),
                Err(_) => {
                    let mut wide: Vec<u64> = v.iter().map(|o| u64::from(*o)).collect();
                    wide.push(offset);
                    *self = Offsets::Large(wide);
                }
            },
            Offsets::Large(v) => v.push(offset),
        }
    }

    fn get(&self, i: usize) -> Option<u64> {
        match self {
            Offsets::Small(v) => v.get(i).map(|o| u64::from(*o)),
            Offsets::Large(v) => v.get(i).copied(),
        }
    }

    fn shrink(&mut self) {
        match self {
            Offsets::Small(v) => v.shrink_to_fit(),
            Offsets::Large(v) => v.shrink_to_fit(),
        }
    }
}

/// Where each entry of one ledger file starts.
#[derive(Debug)]
struct LedgerIndex {
    path: PathBuf,
    /// Entry id of `offsets[0]`.
    base: u64,
    offsets: Offsets,
    /// A read handle, opened on the first cache miss.
    file: OnceLock<File>,
}

impl LedgerIndex {
    fn new(dir: &Path, ledger_id: u64, base: u64) -> LedgerIndex {
        LedgerIndex {
            path: ledger_path(dir, ledger_id),
            base,
            offsets: Offsets::Small(Vec::new()),
            file: OnceLock::new(),
        }
    }

    fn offset(&self, entry_id: u64) -> Option<u64> {
        let i = entry_id.checked_sub(self.base)?;
        self.offsets.get(usize::try_from(i).ok()?)
    }
}

/// A topic's entries in its log files under `--data-dir`: memory holds where each entry starts
/// (4 bytes an entry) and the shared [`ReadCache`]; a cache miss reads the record back from its
/// file and checks its CRC.
#[derive(Debug)]
pub(crate) struct FileEntries {
    dir: PathBuf,
    log: Mutex<TopicLog>,
    ledgers: RwLock<BTreeMap<u64, LedgerIndex>>,
    cache: TopicCache,
}

impl FileEntries {
    /// Opens the log in `dir` (creating it), handing every stored entry to `visit` in order;
    /// its cache counts against the broker's `cache` budget.
    pub(crate) fn open(
        dir: &Path,
        cache: Arc<ReadCache>,
        mut visit: impl FnMut(Position, &[u8]) -> Result<(), StorageError>,
    ) -> Result<FileEntries, StorageError> {
        let mut ledgers: BTreeMap<u64, LedgerIndex> = BTreeMap::new();
        let (log, _) = TopicLog::open(dir, |r: Record<'_>| {
            let p = r.position;
            index_entry(&mut ledgers, dir, p, r.offset);
            visit(p, r.section)
        })?;
        Ok(FileEntries {
            dir: dir.to_path_buf(),
            log: Mutex::new(log),
            ledgers: RwLock::new(ledgers),
            cache: TopicCache {
                budget: cache,
                map: RwLock::new(BTreeMap::new()),
            },
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

/// Records where the entry at `p` starts; the first entry of a new ledger gives the previous
/// ledger's spare capacity back (it is complete).
fn index_entry(ledgers: &mut BTreeMap<u64, LedgerIndex>, dir: &Path, p: Position, offset: u64) {
    if !ledgers.contains_key(&p.ledger_id) {
        if let Some(last) = ledgers.values_mut().next_back() {
            last.offsets.shrink();
        }
        ledgers.insert(p.ledger_id, LedgerIndex::new(dir, p.ledger_id, p.entry_id));
    }
    if let Some(l) = ledgers.get_mut(&p.ledger_id) {
        l.offsets.push(offset);
    }
}

impl EntryStore for FileEntries {
    fn append(&self, p: Position, section: Arc<[u8]>) -> Result<(), StorageError> {
        let offset = lock(&self.log).append(p, &section)?;
        index_entry(&mut write(&self.ledgers), &self.dir, p, offset);
        self.cache.insert(p, section);
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
        if let Some(s) = self.cache.get(p) {
            return Some(s);
        }
        match self.read_from_disk(p) {
            Ok(Some(s)) => {
                self.cache.insert(p, s.clone());
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
        self.cache.remove_below(below);
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
    fn offsets_widen_past_four_gib_and_keep_every_value() {
        let mut o = Offsets::Small(Vec::new());
        let values = [0, 17, u64::from(u32::MAX), u64::from(u32::MAX) + 1, 1 << 40];
        for v in values {
            o.push(v);
        }
        assert!(matches!(o, Offsets::Large(_)));
        o.shrink();
        for (i, v) in values.iter().enumerate() {
            assert_eq!(o.get(i), Some(*v));
        }
        assert_eq!(o.get(values.len()), None);
    }

    #[test]
    fn entries_read_back_from_cache_and_disk() {
        let dir = scratch("read");
        // A cache of three entries.
        let budget = 3 * (12 + ENTRY_OVERHEAD);
        let cache = Arc::new(ReadCache::new(budget));
        let ps: Vec<Position> = (0..10).map(|i| Position::new(1 + i / 4, i % 4)).collect();
        {
            let store = FileEntries::open(&dir, cache.clone(), |_, _| Ok(())).unwrap();
            for (i, p) in ps.iter().enumerate() {
                store.append(*p, section(i as u64)).unwrap();
            }
            assert_eq!(cache.bytes(), budget, "the cache keeps to its budget");
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
        let store = FileEntries::open(&dir, Arc::new(ReadCache::new(0)), |p, _| {
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
    fn the_cache_evicts_the_oldest_first_within_the_broker_budget() {
        let budget = Arc::new(ReadCache::new(2 * (12 + ENTRY_OVERHEAD)));
        let cache = |budget: &Arc<ReadCache>| TopicCache {
            budget: budget.clone(),
            map: RwLock::new(BTreeMap::new()),
        };
        let (a, b) = (cache(&budget), cache(&budget));
        for i in 0..3 {
            a.insert(Position::new(1, i), section(i));
        }
        assert!(
            a.get(Position::new(1, 0)).is_none(),
            "the oldest went first"
        );
        assert!(a.get(Position::new(1, 2)).is_some());
        assert_eq!(budget.bytes(), 2 * (12 + ENTRY_OVERHEAD));
        // Over the shared budget, a topic makes room from its own entries: b has none to
        // give, so its new entry is not kept; once a's are gone, b caches again.
        b.insert(Position::new(1, 0), section(0));
        assert!(b.get(Position::new(1, 0)).is_none());
        a.remove_below(Position::new(2, 0));
        assert_eq!(budget.bytes(), 0);
        b.insert(Position::new(1, 0), section(0));
        assert!(
            b.get(Position::new(1, 0)).is_some(),
            "topics are told apart"
        );
        assert!(a.get(Position::new(1, 0)).is_none());
        assert_eq!(budget.bytes(), 12 + ENTRY_OVERHEAD);
        drop(b);
        assert_eq!(budget.bytes(), 0, "a dropped topic gives its bytes back");
        let none = cache(&Arc::new(ReadCache::new(0)));
        none.insert(Position::new(1, 0), section(0));
        assert_eq!(none.budget.bytes(), 0, "a zero budget caches nothing");
    }
}
