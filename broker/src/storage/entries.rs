//! Entry stores: where a topic's entries (their payload sections, as the producer sent them)
//! live once the topic has assigned them a position.

use std::collections::BTreeMap;
use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, RwLock};

use bytes::Bytes;
use cursor::Position;

use super::cache::{ReadCache, TopicCache};
use super::log::{ledger_path, read_records, Record, TopicLog};
use super::{StorageError, SyncPolicy};
use crate::sync::{lock, read, write};

/// A topic's entries by position. Appends come in position order from one writer at a time;
/// reads come from any thread (the dispatch pool's workers, for the subscriptions).
///
/// What a distributed store implements too: ledgers in Apache BookKeeper would append and read
/// by `(ledger, entry)` the same way.
pub(crate) trait EntryStore: Send + Sync + std::fmt::Debug {
    /// Stores `batch` (entries in position order, following what was stored before), made as
    /// durable as `policy` promises, all or nothing: on `Err` none of the batch is stored
    /// (what reached a file is cut off again) and the store takes its next entries in a later
    /// ledger only (the topic moves on to one). `cache`: whether the file store keeps the
    /// sections in the read cache too. Pass `false` while the topic has no subscription (as
    /// Pulsar caches an added entry only for active cursors): nobody reads them soon, and a
    /// topic written at full speed without readers would otherwise hold the whole shared
    /// budget, so that every other topic's reads go to the disk.
    ///
    /// This is the call that does the IO: the broker's core never makes it; its shell runs a
    /// topic's write request ([`Topic::write_through`](crate::topic::Topic::write_through)),
    /// then hands the completion back to the session.
    fn write(
        &self,
        batch: &[(Position, Bytes)],
        cache: bool,
        policy: SyncPolicy,
    ) -> Result<(), StorageError>;

    /// Makes what was written as durable as `policy` promises (a no-op in memory): the
    /// 100 ms sync of `--sync interval`.
    fn commit(&self, policy: SyncPolicy) -> Result<(), StorageError>;

    /// The section of the entry at `p`: `None` when the store does not have it (never
    /// appended, or deleted below a position); an error when it has it but could not read it
    /// now (the caller keeps the entry and tries again later: it is not lost).
    fn read(&self, p: Position) -> Result<Option<Bytes>, StorageError>;

    /// The section of the entry at `p` if the store has it without IO (in memory, or in the
    /// read cache): what a dispatch worker calls. [`Cached::Miss`]: it is on the disk; ask
    /// for a read ([`ReadRequest`](crate::topic::ReadRequest)), which runs where IO may.
    fn read_cached(&self, p: Position) -> Cached;

    /// Drops the entries below `below` (whole ledgers in the file store, the ledger being
    /// written excepted).
    fn delete_below(&self, below: Position);
}

/// What a store holds for a position without doing IO ([`EntryStore::read_cached`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Cached {
    /// The entry's section.
    Hit(Bytes),
    /// Not in the store (never appended, or deleted below a position).
    Gone,
    /// Stored, but not in memory: a read must fetch it.
    Miss,
}

/// Every entry in memory: the store without `--data-dir`.
#[derive(Debug, Default)]
pub(crate) struct MemoryEntries {
    map: RwLock<BTreeMap<Position, Bytes>>,
}

impl EntryStore for MemoryEntries {
    fn write(
        &self,
        batch: &[(Position, Bytes)],
        _: bool,
        _: SyncPolicy,
    ) -> Result<(), StorageError> {
        let mut map = write(&self.map);
        for (p, section) in batch {
            map.insert(*p, section.clone());
        }
        Ok(())
    }

    fn commit(&self, _: SyncPolicy) -> Result<(), StorageError> {
        Ok(())
    }

    fn read(&self, p: Position) -> Result<Option<Bytes>, StorageError> {
        Ok(read(&self.map).get(&p).cloned())
    }

    fn read_cached(&self, p: Position) -> Cached {
        read(&self.map)
            .get(&p)
            .cloned()
            .map_or(Cached::Gone, Cached::Hit)
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
    /// Where the last entry's record ends.
    end: u64,
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
            end: 0,
            file: OnceLock::new(),
        }
    }

    /// Forgets the entries from `entry_id` on, whose records began at `offset`.
    fn truncate(&mut self, entry_id: u64, offset: u64) {
        self.count = entry_id.saturating_sub(self.base);
        let blocks = usize::try_from(self.count.div_ceil(STRIDE)).unwrap_or(usize::MAX);
        self.sparse.truncate(blocks);
        self.end = offset;
    }

    /// The next entry (the file's `count`th) lies at `bytes`.
    fn push(&mut self, bytes: Range<u64>) {
        if self.count.is_multiple_of(STRIDE) {
            self.sparse.push(bytes.start);
        }
        self.count += 1;
        self.end = bytes.end;
    }

    /// The block that holds `entry_id`: its first entry and where its records lie in the
    /// file; `None` when the file does not hold `entry_id`.
    fn block_of(&self, entry_id: u64) -> Option<(u64, Range<u64>)> {
        let i = entry_id
            .checked_sub(self.base)
            .filter(|i| *i < self.count)?;
        let k = usize::try_from(i / STRIDE).ok()?;
        let start = *self.sparse.get(k)?;
        let end = self.sparse.get(k + 1).copied().unwrap_or(self.end);
        Some((self.base + k as u64 * STRIDE, start..end))
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
            index_entry(&mut ledgers, dir, p, r.bytes);
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

    /// Reads the entry at `p` from its file: the records of its block, in one read, each
    /// checked; the others go to the cache.
    fn read_from_disk(&self, p: Position) -> Result<Option<Bytes>, StorageError> {
        // The block's place and a file handle, then the index lock is let go: appends (which
        // take it to index each entry) do not wait for this read's disk I/O.
        let (path, file, (first, bytes)) = {
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
        if self.writing.load(Ordering::Acquire) == p.ledger_id {
            // The ledger being written may still have some of the block in its write buffer:
            // everything indexed was appended before, so this flush puts the block in the file.
            let mut log = lock(&self.log);
            if log.current_ledger() == Some(p.ledger_id) {
                log.flush()?;
            }
        }
        let mut wanted = None;
        for (i, (at, section)) in read_records(&file, &path, bytes.clone())?
            .into_iter()
            .enumerate()
        {
            let expected = Position::new(p.ledger_id, first + i as u64);
            if at != expected {
                return Err(StorageError::Corrupt {
                    path: path.clone(),
                    offset: bytes.start,
                    reason: format!("the block of {expected} holds {at} in its place"),
                });
            }
            if at == p {
                wanted = Some(section.clone());
            }
            self.cache.insert(at, section);
        }
        Ok(wanted)
    }
}

/// Counts the entry at `p` (starting at `offset`) in its ledger's index; the first entry of a
/// new ledger gives the previous ledger's spare capacity back (it is complete).
fn index_entry(
    ledgers: &mut BTreeMap<u64, LedgerIndex>,
    dir: &Path,
    p: Position,
    bytes: Range<u64>,
) {
    if !ledgers.contains_key(&p.ledger_id) {
        if let Some(last) = ledgers.values_mut().next_back() {
            last.sparse.shrink_to_fit();
        }
        ledgers.insert(p.ledger_id, LedgerIndex::new(dir, p.ledger_id, p.entry_id));
    }
    if let Some(l) = ledgers.get_mut(&p.ledger_id) {
        l.push(bytes);
    }
}

impl FileEntries {
    /// Appends one entry to the log's write buffer and indexes it; returns where its record
    /// starts in its ledger's file.
    pub(super) fn append(
        &self,
        p: Position,
        section: &Bytes,
        cache: bool,
    ) -> Result<u64, StorageError> {
        let bytes = {
            let mut log = lock(&self.log);
            let bytes = log.append(p, section)?;
            // Before the entry is indexed: a reader that finds it sees its ledger here.
            self.writing.store(p.ledger_id, Ordering::Release);
            bytes
        };
        let start = bytes.start;
        index_entry(&mut write(&self.ledgers), &self.dir, p, bytes);
        if cache {
            self.cache.insert(p, section.clone());
        }
        Ok(start)
    }

    /// Takes back the entries of a failed batch: every ledger file the batch started is
    /// removed, the one it continued is cut where the batch's first record began, and the
    /// index forgets them. `starts`: per ledger the batch wrote to, its first entry id there
    /// and where that record started.
    fn take_back(&self, starts: &[(u64, u64, u64)]) {
        let mut log = lock(&self.log);
        log.abandon();
        let mut ledgers = write(&self.ledgers);
        for &(ledger, first, offset) in starts {
            let path = ledger_path(&self.dir, ledger);
            let cut = ledgers.get_mut(&ledger).filter(|l| l.base < first);
            let result = match cut {
                Some(index) => {
                    index.truncate(first, offset);
                    std::fs::OpenOptions::new()
                        .write(true)
                        .open(&path)
                        .and_then(|f| f.set_len(offset).and_then(|()| f.sync_all()))
                }
                None => {
                    ledgers.remove(&ledger);
                    match std::fs::remove_file(&path) {
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                        r => r,
                    }
                }
            };
            if let Err(e) = result {
                tracing::error!(file = %path.display(), error = %e, "cannot take a failed write back out of a ledger file; its entries are not receipted, but a restart may refuse the file");
            }
        }
    }
}

impl EntryStore for FileEntries {
    fn write(
        &self,
        batch: &[(Position, Bytes)],
        cache: bool,
        policy: SyncPolicy,
    ) -> Result<(), StorageError> {
        let mut starts: Vec<(u64, u64, u64)> = Vec::new();
        let mut result = Ok(());
        for (p, section) in batch {
            let fresh = starts.last().is_none_or(|s| s.0 != p.ledger_id);
            // Cached below, once the whole batch is in: a failed one leaves nothing there.
            match self.append(*p, section, false) {
                Ok(start) if fresh => starts.push((p.ledger_id, p.entry_id, start)),
                Ok(_) => {}
                Err(e) => {
                    if fresh {
                        // Nothing of this ledger's part is in: a new file goes, an old one
                        // is cut where this record would have started.
                        let end = read(&self.ledgers).get(&p.ledger_id).map(|l| l.end);
                        starts.push((p.ledger_id, p.entry_id, end.unwrap_or(0)));
                    }
                    result = Err(e);
                    break;
                }
            }
        }
        let result = result.and_then(|()| self.commit(policy));
        match result {
            Ok(()) if cache => batch
                .iter()
                .for_each(|(p, section)| self.cache.insert(*p, section.clone())),
            Ok(()) => {}
            Err(_) => self.take_back(&starts),
        }
        result
    }

    fn commit(&self, policy: SyncPolicy) -> Result<(), StorageError> {
        match policy {
            SyncPolicy::Always => self.group_sync(),
            SyncPolicy::Interval => lock(&self.log).flush(),
        }
    }

    fn read(&self, p: Position) -> Result<Option<Bytes>, StorageError> {
        if let Some(s) = self.cache.get(p) {
            return Ok(Some(s));
        }
        self.read_from_disk(p)
    }

    fn read_cached(&self, p: Position) -> Cached {
        if let Some(s) = self.cache.get(p) {
            return Cached::Hit(s);
        }
        let indexed = read(&self.ledgers)
            .get(&p.ledger_id)
            .is_some_and(|l| l.block_of(p.entry_id).is_some());
        if indexed {
            Cached::Miss
        } else {
            Cached::Gone
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
}

#[cfg(test)]
mod tests;
