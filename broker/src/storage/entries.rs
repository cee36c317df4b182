//! Entry stores: where a topic's entries (their payload sections, as the producer sent them)
//! live once the topic has assigned them a position.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, RwLock};

use cursor::Position;
use tracing::error;

use super::cache::{ReadCache, TopicCache};
use super::log::{ledger_path, read_record, Record, TopicLog};
use super::{StorageError, SyncPolicy};
use crate::sync::{lock, read, write};

/// A topic's entries by position. Appends come in position order from one writer at a time;
/// reads come from any thread (the subscriptions' dispatcher threads).
///
/// What a distributed store implements too: ledgers in Apache BookKeeper would append and read
/// by `(ledger, entry)` the same way.
pub(crate) trait EntryStore: Send + Sync + std::fmt::Debug {
    /// Stores the entry at `p`: readable at once, durable once [`commit`](Self::commit)ted.
    /// `cache`: whether the file store keeps the section in the read cache too. Pass `false`
    /// while the topic has no subscription (as Pulsar caches an added entry only for active
    /// cursors): nobody reads it soon, and a topic written at full speed without readers would
    /// otherwise hold the whole shared budget, so that every other topic's reads go to the disk.
    fn append(&self, p: Position, section: Arc<[u8]>, cache: bool) -> Result<(), StorageError>;

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

impl EntryStore for MemoryEntries {
    fn append(&self, p: Position, section: Arc<[u8]>, _cache: bool) -> Result<(), StorageError> {
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

/// Entries per indexed offset: memory holds where every 16th entry of a ledger file starts
/// (half a byte an entry); a cache miss reads that block of 16 records and caches them all (a
/// reader going forward reads the rest of the block next).
const STRIDE: u64 = 16;

/// Where the entries of one ledger file start, every [`STRIDE`]th of them.
#[derive(Debug)]
struct LedgerIndex {
    path: PathBuf,
    /// Entry id of the first entry in the file.
    base: u64,
    /// `sparse[k]`: where entry `base + k * STRIDE` starts.
    sparse: Vec<u64>,
    /// Entries in the file.
    count: u64,
    /// A read handle, opened on the first cache miss.
    file: OnceLock<Arc<File>>,
}

impl LedgerIndex {
    fn new(dir: &Path, ledger_id: u64, base: u64) -> LedgerIndex {
        LedgerIndex {
            path: ledger_path(dir, ledger_id),
            base,
            sparse: Vec::new(),
            count: 0,
            file: OnceLock::new(),
        }
    }

    /// The next entry (the file's `count`th) starts at `offset`.
    fn push(&mut self, offset: u64) {
        if self.count.is_multiple_of(STRIDE) {
            self.sparse.push(offset);
        }
        self.count += 1;
    }

    /// The block that holds `entry_id`: its first entry, where that starts, and one past its
    /// last entry; `None` when the file does not hold `entry_id`.
    fn block_of(&self, entry_id: u64) -> Option<(u64, u64, u64)> {
        let i = entry_id
            .checked_sub(self.base)
            .filter(|i| *i < self.count)?;
        let k = i / STRIDE;
        let offset = *self.sparse.get(usize::try_from(k).ok()?)?;
        let first = self.base + k * STRIDE;
        Some((first, offset, (first + STRIDE).min(self.base + self.count)))
    }
}

/// A topic's entries in its log files under `--data-dir`: memory holds where every 16th entry
/// starts and the shared [`ReadCache`]; a cache miss reads the records back from that point in
/// the file (checking each CRC) and caches them.
#[derive(Debug)]
pub(crate) struct FileEntries {
    dir: PathBuf,
    log: Mutex<TopicLog>,
    /// An `fsync` of the log runs now (without the log's lock), and its end is signalled.
    syncing: (Mutex<bool>, Condvar),
    /// The ledger of the last append (`u64::MAX` before the first): only a read in it may need
    /// the log's write buffer flushed, so other reads never take the log's lock.
    writing: AtomicU64,
    ledgers: RwLock<BTreeMap<u64, LedgerIndex>>,
    cache: TopicCache,
}

impl FileEntries {
    /// Makes every entry appended so far durable, with group commit: one `fsync` at a time
    /// runs without the log's lock (other connections keep appending meanwhile), and a commit
    /// whose bytes an `fsync` already covered (or one that ran while it waited) returns
    /// without its own. The log's lock and `syncing` are never held together.
    fn group_sync(&self) -> Result<(), StorageError> {
        let target = {
            let mut log = lock(&self.log);
            log.flush()?;
            log.flushed()
        };
        let (busy, done) = &self.syncing;
        loop {
            if lock(&self.log).synced() >= target {
                return Ok(());
            }
            let mut running = lock(busy);
            if *running {
                drop(done.wait(running).unwrap_or_else(|p| p.into_inner()));
                continue;
            }
            *running = true;
            drop(running);
            let result = self.sync_once();
            *lock(busy) = false;
            done.notify_all();
            return result;
        }
    }

    /// One `fsync` of everything handed to the OS so far, outside the log's lock.
    fn sync_once(&self) -> Result<(), StorageError> {
        let t = lock(&self.log).sync_target()?;
        if let Some((f, path)) = &t.file {
            f.sync_data().map_err(super::io_err("sync", path))?;
        }
        lock(&self.log).synced_upto(t.upto);
        Ok(())
    }

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
            writing: AtomicU64::new(log.current_ledger().unwrap_or(u64::MAX)),
            log: Mutex::new(log),
            syncing: (Mutex::new(false), Condvar::new()),
            ledgers: RwLock::new(ledgers),
            cache: TopicCache::new(cache),
        })
    }

    /// Reads the entry at `p` from its file: the records of its block, each checked; the others
    /// go to the cache.
    fn read_from_disk(&self, p: Position) -> Result<Option<Arc<[u8]>>, StorageError> {
        if self.writing.load(Ordering::Acquire) == p.ledger_id {
            // The ledger being written may still have the entry in its write buffer (appended
            // without caching and not committed yet): it goes to the file first.
            let mut log = lock(&self.log);
            if log.current_ledger() == Some(p.ledger_id) {
                log.flush()?;
            }
        }
        // The block's place and a file handle, then the index lock is let go: appends (which
        // take it to index each entry) do not wait for this read's disk I/O.
        let (path, file, (first, mut offset, end)) = {
            let ledgers = read(&self.ledgers);
            let Some((index, block)) = ledgers
                .get(&p.ledger_id)
                .and_then(|l| Some((l, l.block_of(p.entry_id)?)))
            else {
                return Ok(None);
            };
            let file = match index.file.get() {
                Some(f) => f.clone(),
                None => {
                    let f = File::open(&index.path).map_err(super::io_err("open", &index.path))?;
                    index.file.get_or_init(|| Arc::new(f)).clone()
                }
            };
            (index.path.clone(), file, block)
        };
        let mut wanted = None;
        for id in first..end {
            let (at, section, next) = read_record(&file, &path, offset)?;
            let expected = Position::new(p.ledger_id, id);
            if at != expected {
                return Err(StorageError::Corrupt {
                    path: path.clone(),
                    offset,
                    reason: format!("record for {expected} holds {at}"),
                });
            }
            let section: Arc<[u8]> = Arc::from(section);
            if at == p {
                wanted = Some(section.clone());
            }
            self.cache.insert(at, section);
            offset = next;
        }
        Ok(wanted)
    }
}

/// Counts the entry at `p` (starting at `offset`) in its ledger's index; the first entry of a
/// new ledger gives the previous ledger's spare capacity back (it is complete).
fn index_entry(ledgers: &mut BTreeMap<u64, LedgerIndex>, dir: &Path, p: Position, offset: u64) {
    if !ledgers.contains_key(&p.ledger_id) {
        if let Some(last) = ledgers.values_mut().next_back() {
            last.sparse.shrink_to_fit();
        }
        ledgers.insert(p.ledger_id, LedgerIndex::new(dir, p.ledger_id, p.entry_id));
    }
    if let Some(l) = ledgers.get_mut(&p.ledger_id) {
        l.push(offset);
    }
}

impl EntryStore for FileEntries {
    fn append(&self, p: Position, section: Arc<[u8]>, cache: bool) -> Result<(), StorageError> {
        let offset = {
            let mut log = lock(&self.log);
            let offset = log.append(p, &section)?;
            // Before the entry is indexed: a reader that finds it sees its ledger here.
            self.writing.store(p.ledger_id, Ordering::Release);
            offset
        };
        index_entry(&mut write(&self.ledgers), &self.dir, p, offset);
        if cache {
            self.cache.insert(p, section);
        }
        Ok(())
    }

    fn commit(&self, policy: SyncPolicy) -> Result<(), StorageError> {
        match policy {
            SyncPolicy::Always => self.group_sync(),
            SyncPolicy::Interval => lock(&self.log).flush(),
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
    use crate::storage::cache::ENTRY_OVERHEAD;

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
    fn the_sparse_index_finds_where_to_start_walking() {
        let mut l = LedgerIndex::new(Path::new("/x"), 3, 5);
        for i in 0..40u64 {
            l.push(1_000 + i * 10);
        }
        assert_eq!(l.sparse.len(), 3, "entries 5, 21 and 37");
        assert_eq!(l.block_of(5), Some((5, 1_000, 21)));
        assert_eq!(l.block_of(20), Some((5, 1_000, 21)));
        assert_eq!(l.block_of(21), Some((21, 1_160, 37)));
        assert_eq!(
            l.block_of(44),
            Some((37, 1_320, 45)),
            "the last block is short"
        );
        assert_eq!(l.block_of(45), None, "past the last entry");
        assert_eq!(l.block_of(4), None, "before the first");
    }

    #[test]
    fn a_topic_without_readers_leaves_the_cache_to_the_others() {
        let budget = 4 * (12 + ENTRY_OVERHEAD);
        let cache = Arc::new(ReadCache::new(budget));
        let quiet = FileEntries::open(&scratch("quiet"), cache.clone(), |_, _| Ok(())).unwrap();
        let read =
            FileEntries::open(&scratch("read-by-some"), cache.clone(), |_, _| Ok(())).unwrap();
        for i in 0..100 {
            quiet
                .append(Position::new(1, i), section(i), false)
                .unwrap();
        }
        assert_eq!(cache.bytes(), 0, "appends nobody will read are not cached");
        for i in 0..4 {
            read.append(Position::new(1, i), section(i), true).unwrap();
        }
        assert_eq!(
            cache.bytes(),
            budget,
            "the whole budget went to the topic with readers"
        );
        assert_eq!(
            read.cache.get(Position::new(1, 0)).as_deref(),
            Some(&*section(0))
        );
        // Uncommitted and uncached: read back through the file all the same.
        assert_eq!(
            quiet.read(Position::new(1, 7)).as_deref(),
            Some(&*section(7))
        );
    }

    /// Group commit: threads append and commit at once; every commit returns only once the
    /// bytes handed to the OS before it began are on the disk, and no commit waits for ever.
    #[test]
    fn concurrent_commits_each_return_after_their_bytes_are_synced() {
        let dir = scratch("group");
        let cache = Arc::new(ReadCache::new(0));
        let store = Arc::new(FileEntries::open(&dir, cache, |_, _| Ok(())).unwrap());
        // Appends in position order, one at a time, as the topic's state lock makes them.
        let next = Arc::new(Mutex::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (store, next) = (store.clone(), next.clone());
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        let target = {
                            let mut n = lock(&next);
                            // 30 entries a ledger: roll-overs happen between the commits.
                            let p = Position::new(1 + *n / 30, *n % 30);
                            store.append(p, section(*n), false).unwrap();
                            *n += 1;
                            let mut log = lock(&store.log);
                            log.flush().unwrap();
                            log.flushed()
                        };
                        store.commit(SyncPolicy::Always).unwrap();
                        let synced = lock(&store.log).synced();
                        assert!(synced >= target, "synced {synced} < {target}");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let log = lock(&store.log);
        assert_eq!(
            log.synced(),
            log.flushed(),
            "everything on the disk at the end"
        );
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
                store.append(*p, section(i as u64), true).unwrap();
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
}
