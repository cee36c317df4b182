//! Entry stores: where a topic's entries (their payload sections, as the producer sent them)
//! live once the topic has assigned them a position.

use std::collections::{BTreeMap, VecDeque};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};

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

fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|p| p.into_inner())
}

fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|p| p.into_inner())
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

/// Bytes counted per cached entry besides its section (the map's node, the `Arc`).
const ENTRY_OVERHEAD: u64 = 96;

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
type CacheMap = BTreeMap<Position, Arc<[u8]>>;

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
struct TopicCache {
    budget: Arc<ReadCache>,
    map: Arc<RwLock<CacheMap>>,
}

impl TopicCache {
    fn new(budget: Arc<ReadCache>) -> TopicCache {
        TopicCache {
            budget,
            map: Arc::new(RwLock::new(BTreeMap::new())),
        }
    }

    fn get(&self, p: Position) -> Option<Arc<[u8]>> {
        read(&self.map).get(&p).cloned()
    }

    fn insert(&self, p: Position, section: Arc<[u8]>) {
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

    fn remove_below(&self, below: Position) {
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
    /// The ledger of the last append (`u64::MAX` before the first): only a read in it may need
    /// the log's write buffer flushed, so other reads never take the log's lock.
    writing: AtomicU64,
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
            writing: AtomicU64::new(log.current_ledger().unwrap_or(u64::MAX)),
            log: Mutex::new(log),
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

    #[test]
    fn the_cache_evicts_the_oldest_arrival_over_all_topics() {
        let one = 12 + ENTRY_OVERHEAD;
        let budget = Arc::new(ReadCache::new(2 * one));
        let cache = |budget: &Arc<ReadCache>| TopicCache::new(budget.clone());
        let (a, b) = (cache(&budget), cache(&budget));
        for i in 0..3 {
            a.insert(Position::new(1, i), section(i));
        }
        assert!(
            a.get(Position::new(1, 0)).is_none(),
            "the oldest went first"
        );
        assert!(a.get(Position::new(1, 2)).is_some());
        assert_eq!(budget.bytes(), 2 * one);
        // Oldest by arrival, not by position: an old entry read back (a consumer far behind)
        // stays, and the earliest arrival goes.
        a.insert(Position::new(0, 5), section(5));
        assert!(a.get(Position::new(0, 5)).is_some(), "just read back: kept");
        assert!(
            a.get(Position::new(1, 1)).is_none(),
            "the earliest arrival went"
        );
        assert!(a.get(Position::new(1, 2)).is_some());
        // Another topic's new entry evicts the oldest arrival over all topics: a's.
        b.insert(Position::new(1, 0), section(0));
        assert!(b.get(Position::new(1, 0)).is_some(), "b's entry is kept");
        assert!(a.get(Position::new(1, 2)).is_none(), "a's oldest went");
        assert!(a.get(Position::new(0, 5)).is_some());
        assert!(
            a.get(Position::new(1, 0)).is_none(),
            "topics are told apart"
        );
        assert_eq!(budget.bytes(), 2 * one);
        a.remove_below(Position::new(2, 0));
        assert_eq!(budget.bytes(), one, "retention gives a's bytes back");
        drop(b);
        assert_eq!(budget.bytes(), 0, "a dropped topic gives its bytes back");
        let none = cache(&Arc::new(ReadCache::new(0)));
        none.insert(Position::new(1, 0), section(0));
        assert_eq!(none.budget.bytes(), 0, "a zero budget caches nothing");
    }

    /// A topic written fast whose subscription nobody reads holds the whole budget; a second
    /// topic's new entries still stay cached (each evicts the first topic's oldest), where
    /// self-eviction within a topic left the second one nothing. The test fails with a cache
    /// that makes room only from the inserting topic's own entries.
    #[test]
    fn a_topic_nobody_reads_cannot_keep_the_others_out() {
        let one = 12 + ENTRY_OVERHEAD;
        let budget = Arc::new(ReadCache::new(100 * one));
        let idle = TopicCache::new(budget.clone());
        let busy = TopicCache::new(budget.clone());
        for i in 0..1_000 {
            idle.insert(Position::new(1, i), section(i));
        }
        assert_eq!(budget.bytes(), 100 * one, "the idle topic fills the budget");
        for i in 0..50 {
            busy.insert(Position::new(1, i), section(i));
        }
        let kept = (0..50)
            .filter(|i| busy.get(Position::new(1, *i)).is_some())
            .count();
        assert_eq!(kept, 50, "every new entry of the read topic is cached");
        let idle_kept = (0..1_000)
            .filter(|i| idle.get(Position::new(1, *i)).is_some())
            .count();
        assert_eq!(idle_kept, 50, "the idle topic kept its 50 newest");
        assert!(idle.get(Position::new(1, 999)).is_some());
        assert_eq!(budget.bytes(), 100 * one);
    }

    /// Arrivals of sections that retention took out do not pile up in the queue while the cache
    /// stays under budget (a topic read and trimmed as fast as it is written).
    #[test]
    fn stale_arrivals_are_dropped_from_the_queue() {
        let budget = Arc::new(ReadCache::new(1 << 30));
        let t = TopicCache::new(budget.clone());
        for i in 0..100_000u64 {
            t.insert(Position::new(1, i), section(i));
            t.remove_below(Position::new(1, i + 1));
        }
        assert_eq!(budget.bytes(), 0);
        let queued = lock(&budget.arrivals).len();
        assert!(queued <= STALE_SLACK + 1, "{queued} arrivals queued");
    }

    /// Topics inserting, trimming and going away on several threads at once: the count of
    /// bytes held stays what the maps hold, and the budget holds once the threads are done.
    #[test]
    fn concurrent_topics_keep_the_count_true() {
        let one = 12 + ENTRY_OVERHEAD;
        let budget = Arc::new(ReadCache::new(64 * one));
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let budget = budget.clone();
                std::thread::spawn(move || {
                    let mut kept = Vec::new();
                    for round in 0..20u64 {
                        let c = TopicCache::new(budget.clone());
                        for i in 0..200u64 {
                            c.insert(Position::new(round, i), section(i));
                            if i % 50 == 49 {
                                c.remove_below(Position::new(round, i - 10));
                            }
                        }
                        if round % 2 == t % 2 {
                            kept.push(c);
                        }
                    }
                    kept
                })
            })
            .collect();
        let kept: Vec<TopicCache> = threads
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        let held: u64 = kept
            .iter()
            .flat_map(|c| {
                read(&c.map)
                    .values()
                    .map(|s| ReadCache::cost(s))
                    .collect::<Vec<_>>()
            })
            .sum();
        assert_eq!(budget.bytes(), held);
        assert!(held <= 64 * one, "{held} bytes held");
        drop(kept);
        assert_eq!(budget.bytes(), 0);
        assert_eq!(budget.entries.load(Ordering::Relaxed), 0);
    }
}
