//! The file entry store: the sparse index, the read cache's budget, reads from cache and
//! disk, group commit.

use bytes::Bytes;

use super::*;
use crate::storage::cache::ENTRY_OVERHEAD;

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("broker-entries-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn section(i: u64) -> Bytes {
    Bytes::from(format!("section-{i:04}").into_bytes())
}

/// Every entry reads back whether the cache holds it or not, from the file being written
/// (still in its write buffer) and from older files, and across a reopen.
#[test]
fn the_sparse_index_finds_where_to_start_walking() {
    let mut l = LedgerIndex::new(Path::new("/x"), 3, 5);
    for i in 0..40u64 {
        l.push(1_000 + i * 10..1_010 + i * 10);
    }
    assert_eq!(l.sparse.len(), 3, "entries 5, 21 and 37");
    assert_eq!(l.block_of(5), Some((5, 1_000..1_160)));
    assert_eq!(l.block_of(20), Some((5, 1_000..1_160)));
    assert_eq!(l.block_of(21), Some((21, 1_160..1_320)));
    assert_eq!(
        l.block_of(44),
        Some((37, 1_320..1_400)),
        "the last block is short: it ends where the last entry ends"
    );
    assert_eq!(l.block_of(45), None, "past the last entry");
    assert_eq!(l.block_of(4), None, "before the first");
}

#[test]
fn a_topic_without_readers_leaves_the_cache_to_the_others() {
    let budget = 4 * (12 + ENTRY_OVERHEAD);
    let cache = Arc::new(ReadCache::new(budget));
    let quiet = FileEntries::open(&scratch("quiet"), cache.clone(), |_, _| Ok(())).unwrap();
    let read = FileEntries::open(&scratch("read-by-some"), cache.clone(), |_, _| Ok(())).unwrap();
    for i in 0..100 {
        quiet
            .append(Position::new(1, i), &section(i), false)
            .unwrap();
    }
    assert_eq!(cache.bytes(), 0, "appends nobody will read are not cached");
    for i in 0..4 {
        read.append(Position::new(1, i), &section(i), true).unwrap();
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
        quiet.read_ok(Position::new(1, 7)).as_deref(),
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
                        store.append(p, &section(*n), false).unwrap();
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
            store.append(*p, &section(i as u64), true).unwrap();
        }
        assert_eq!(cache.bytes(), budget, "the cache keeps to its budget");
        for (i, p) in ps.iter().enumerate().rev() {
            assert_eq!(
                store.read_ok(*p).as_deref(),
                Some(&*section(i as u64)),
                "{p}"
            );
        }
        assert_eq!(store.read_ok(Position::new(9, 0)), None);
        store.commit(SyncPolicy::Always).unwrap();
        store.delete_below(Position::new(3, 0));
        assert_eq!(store.read_ok(ps[0]), None, "a deleted ledger");
        assert_eq!(store.read_ok(ps[8]).as_deref(), Some(&*section(8)));
    }
    let mut seen = Vec::new();
    let store = FileEntries::open(&dir, Arc::new(ReadCache::new(0)), |p, _| {
        seen.push(p);
        Ok(())
    })
    .unwrap();
    assert_eq!(seen, ps[8..].to_vec(), "ledgers 1 and 2 were deleted");
    assert_eq!(
        store.read_ok(ps[9]).as_deref(),
        Some(&*section(9)),
        "no cache: from disk"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// With no cache every read goes to the file: each block of 16 records is one read, checked
/// record by record, from the file being written (still in its write buffer) and after a
/// reopen; a damaged record fails its block's reads and no other block's.
#[test]
fn blocks_read_back_whole_and_a_damaged_one_alone_fails() {
    let dir = scratch("blocks");
    let n = 40u64; // blocks of 16, 16 and 8
    {
        let store = FileEntries::open(&dir, Arc::new(ReadCache::new(0)), |_, _| Ok(())).unwrap();
        for i in 0..n {
            store
                .append(Position::new(1, i), &section(i), true)
                .unwrap();
        }
        for i in (0..n).rev() {
            assert_eq!(
                store.read_ok(Position::new(1, i)).as_deref(),
                Some(&*section(i)),
                "{i} while written"
            );
        }
        store.commit(SyncPolicy::Always).unwrap();
    }
    let path = ledger_path(&dir, 1);
    let mut bytes = std::fs::read(&path).unwrap();
    let record = (bytes.len() - 8) / n as usize; // equal sections: equal records
    bytes[8 + 20 * record + 30] ^= 0x10; // inside entry 20's section, in the second block
    std::fs::write(&path, &bytes).unwrap();
    // Recovery reads the whole file and refuses the damage; the store's reads are checked by
    // themselves, so they are tried on the index of a store opened before the damage.
    let fresh = scratch("blocks-fresh");
    let store = FileEntries::open(&fresh, Arc::new(ReadCache::new(0)), |_, _| Ok(())).unwrap();
    {
        let mut ledgers = write(&store.ledgers);
        let mut index = LedgerIndex::new(&dir, 1, 0);
        for i in 0..n {
            let start = 8 + i * record as u64;
            index.push(start..start + record as u64);
        }
        ledgers.insert(1, index);
    }
    for i in 0..n {
        let got = store.read(Position::new(1, i));
        if (16..32).contains(&i) {
            let e = got.expect_err("its block holds the damaged record");
            assert!(matches!(e, StorageError::Corrupt { .. }), "{i}: {e}");
        } else {
            assert_eq!(got.unwrap().as_deref(), Some(&*section(i)), "{i}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&fresh);
}

/// Reads in tests: an I/O error fails the test.
trait ReadOk {
    fn read_ok(&self, p: Position) -> Option<Bytes>;
}

impl<T: EntryStore + ?Sized> ReadOk for T {
    fn read_ok(&self, p: Position) -> Option<Bytes> {
        self.read(p).unwrap_or_else(|e| panic!("read {p}: {e}"))
    }
}

/// A write that fails half way is taken back whole: the ledger it continued is cut where the
/// batch began, the ledger it started is removed, and the index forgets both. The store reopens
/// without a corrupt-log error and holds exactly the entries written before, and a later
/// ledger is written as usual. (Without the cut, the failed records would sit in the middle of
/// the log once a later ledger is written, and the broker would refuse to start.)
#[test]
fn a_failed_batch_is_taken_back_out_of_the_files() {
    let dir = scratch("take-back");
    let cache = Arc::new(ReadCache::new(1 << 20));
    let store = FileEntries::open(&dir, cache.clone(), |_, _| Ok(())).unwrap();
    let kept = [
        (Position::new(1, 0), section(0)),
        (Position::new(1, 1), section(1)),
    ];
    store.write(&kept, true, SyncPolicy::Always).unwrap();
    // What a batch that failed after these appends leaves behind, then its take-back.
    let cut = store
        .append(Position::new(1, 2), &section(2), true)
        .unwrap();
    let started = store
        .append(Position::new(2, 0), &section(3), true)
        .unwrap();
    lock(&store.log).flush().unwrap();
    store.take_back(&[(1, 2, cut), (2, 0, started)]);
    assert!(
        !ledger_path(&dir, 2).exists(),
        "the ledger the batch started is gone"
    );
    store
        .write(
            &[(Position::new(3, 0), section(4))],
            true,
            SyncPolicy::Always,
        )
        .unwrap();
    drop(store);
    let mut seen = Vec::new();
    let reopened = FileEntries::open(&dir, Arc::new(ReadCache::new(0)), |p, _| {
        seen.push(p);
        Ok(())
    })
    .unwrap();
    assert_eq!(
        seen,
        [
            Position::new(1, 0),
            Position::new(1, 1),
            Position::new(3, 0)
        ]
    );
    assert_eq!(reopened.read(Position::new(1, 2)).unwrap(), None);
    assert_eq!(
        reopened.read(Position::new(1, 1)).unwrap(),
        Some(section(1))
    );
}
