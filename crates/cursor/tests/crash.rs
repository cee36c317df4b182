//! Crash safety of `FileStore`: cut the file at every byte offset of the last record, flip every
//! byte of it, damage the header and the only record, leave compaction debris, and inject save
//! failures. Recovery must yield exactly the previous or the new state, or a `Corrupt` error
//! naming file and offset when nothing good remains — never a different state.

use std::fs;
use std::path::{Path, PathBuf};

use cursor::{
    CursorError, CursorStore, EntryMeta, FileStore, InMemoryLedger, Ledger, ManagedCursor,
    PersistedState, Position, StoreError,
};

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let p = std::env::temp_dir().join(format!("cursor-crash-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }
    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A ledger of 600 entries (some batches) and two cursor states A and B with holes (a bitmap
/// block in B) and batch bitsets.
fn states() -> (InMemoryLedger, PersistedState, PersistedState) {
    let mut l = InMemoryLedger::new(400);
    let ps: Vec<Position> = (0..600)
        .map(|i| l.append(EntryMeta::simple(i, 10).with_messages(if i % 50 == 7 { 3 } else { 1 })))
        .collect();
    let mut c = ManagedCursor::new("crash", &l, cursor::MemoryStore::new());
    for i in (3..40).step_by(3) {
        c.ack(&l, ps[i]).unwrap();
    }
    c.ack_batch_index(&l, ps[57], 3, &[1]).unwrap();
    c.set_last_active(1);
    let a = c.snapshot();
    c.ack(&l, ps[0]).unwrap();
    for i in (100..500).step_by(2) {
        c.ack(&l, ps[i]).unwrap();
    }
    c.ack_batch_index(&l, ps[107], 3, &[0, 2]).unwrap();
    c.set_last_active(2);
    let b = c.snapshot();
    assert_ne!(a, b);
    (l, a, b)
}

fn load(path: &Path) -> Result<Option<PersistedState>, StoreError> {
    FileStore::open(path)?.load()
}

#[test]
fn every_cut_of_the_last_record_recovers_the_previous_or_the_new_state() {
    let dir = TempDir::new("cut");
    let (_, a, b) = states();
    let main = dir.file("main");
    let mut s = FileStore::open(&main).unwrap();
    s.save(&a).unwrap();
    let after_a = fs::metadata(&main).unwrap().len() as usize;
    s.save(&b).unwrap();
    let full = fs::read(&main).unwrap();
    assert!(
        full.len() - after_a > 600,
        "the last record is big enough to matter"
    );
    let cut = dir.file("cut");
    for k in after_a..=full.len() {
        fs::write(&cut, &full[..k]).unwrap();
        let got = load(&cut).unwrap_or_else(|e| panic!("cut at {k}: {e}"));
        let want = if k == full.len() { &b } else { &a };
        assert_eq!(got.as_ref(), Some(want), "cut at {k}");
    }
    // After a cut, the next save drops the torn tail and lands cleanly.
    for k in (after_a + 1..full.len()).step_by(97) {
        fs::write(&cut, &full[..k]).unwrap();
        let mut s = FileStore::open(&cut).unwrap();
        assert_eq!(s.load().unwrap(), Some(a.clone()));
        s.save(&b).unwrap();
        assert_eq!(
            load(&cut).unwrap(),
            Some(b.clone()),
            "save after cut at {k}"
        );
        assert_eq!(
            fs::read(&cut).unwrap(),
            full,
            "file after re-save of cut at {k}"
        );
    }
}

#[test]
fn every_flipped_byte_of_the_last_record_recovers_the_previous_state() {
    let dir = TempDir::new("flip");
    let (_, a, b) = states();
    let main = dir.file("main");
    let mut s = FileStore::open(&main).unwrap();
    s.save(&a).unwrap();
    let after_a = fs::metadata(&main).unwrap().len() as usize;
    s.save(&b).unwrap();
    let full = fs::read(&main).unwrap();
    let bad = dir.file("bad");
    for i in after_a..full.len() {
        for mask in [0x01u8, 0xff] {
            let mut f = full.clone();
            f[i] ^= mask;
            fs::write(&bad, &f).unwrap();
            let got = load(&bad).unwrap_or_else(|e| panic!("flip {mask:#x} at {i}: {e}"));
            assert_eq!(got, Some(a.clone()), "flip {mask:#x} at {i}");
        }
    }
}

#[test]
fn damage_with_nothing_good_left_is_an_error_naming_file_and_offset() {
    let dir = TempDir::new("nothing");
    let (_, a, _) = states();
    let main = dir.file("main");
    FileStore::open(&main).unwrap().save(&a).unwrap();
    let full = fs::read(&main).unwrap();
    let bad = dir.file("bad");
    // Header only: an empty store.
    fs::write(&bad, &full[..8]).unwrap();
    assert_eq!(load(&bad).unwrap(), None);
    // Any cut or flip inside the only record: Corrupt at offset 8.
    for k in 9..full.len() {
        fs::write(&bad, &full[..k]).unwrap();
        match load(&bad) {
            Err(StoreError::Corrupt { path, offset, .. }) => {
                assert_eq!((path.as_path(), offset), (bad.as_path(), 8), "cut at {k}");
            }
            other => panic!("cut at {k}: {other:?}"),
        }
    }
    let mut f = full.clone();
    f[20] ^= 0x10;
    fs::write(&bad, &f).unwrap();
    let e = load(&bad).unwrap_err().to_string();
    assert!(
        e.contains(&bad.display().to_string()) && e.contains("at byte 8"),
        "{e}"
    );
    // A damaged or torn header: Corrupt at offset 0.
    for k in 0..8 {
        fs::write(&bad, &full[..k]).unwrap();
        assert!(
            matches!(load(&bad), Err(StoreError::Corrupt { offset: 0, .. })),
            "header cut at {k}"
        );
    }
    let mut f = full.clone();
    f[0] = b'X';
    fs::write(&bad, &f).unwrap();
    assert!(matches!(
        load(&bad),
        Err(StoreError::Corrupt { offset: 0, .. })
    ));
    // A file of the first format (CRC-32 records, version byte 1) is refused, not misread.
    let mut f = full.clone();
    f[7] = 1;
    fs::write(&bad, &f).unwrap();
    assert!(matches!(
        load(&bad),
        Err(StoreError::Corrupt { offset: 0, .. })
    ));
    // A save over a damaged header rewrites the file.
    let mut s = FileStore::open(&bad).unwrap();
    s.save(&a).unwrap();
    assert_eq!(load(&bad).unwrap(), Some(a));
}

#[test]
fn recover_through_the_cursor_reports_corruption() {
    let dir = TempDir::new("recover");
    let (l, a, _) = states();
    let main = dir.file("main");
    FileStore::open(&main).unwrap().save(&a).unwrap();
    let mut f = fs::read(&main).unwrap();
    let n = f.len();
    f[n - 1] ^= 1;
    fs::write(&main, &f).unwrap();
    match ManagedCursor::recover(&l, FileStore::open(&main).unwrap()) {
        Err(CursorError::Store(StoreError::Corrupt { offset: 8, .. })) => {}
        other => panic!("{:?}", other.map(|c| c.snapshot())),
    }
}

#[test]
fn compaction_keeps_only_the_last_state_and_ignores_debris() {
    let dir = TempDir::new("compact");
    let (l, _, _) = states();
    let main = dir.file("main");
    // Debris of a compaction that crashed before its rename.
    fs::write(dir.file("main.compact"), b"garbage").unwrap();
    let mut c = ManagedCursor::new(
        "c",
        &l,
        FileStore::open(&main)
            .unwrap()
            .with_compaction_threshold(2_000),
    );
    let mut p = l.first_position();
    let mut last = None;
    for i in 0..300 {
        let q = p.unwrap();
        if i % 3 != 0 {
            c.ack(&l, q).unwrap();
        }
        c.persist().unwrap();
        last = Some(c.snapshot());
        p = l.next_position(q);
    }
    assert!(c.store().compactions() > 5, "{}", c.store().compactions());
    assert!(fs::metadata(&main).unwrap().len() <= 2_000);
    assert_eq!(load(&main).unwrap(), last);
    let r = ManagedCursor::recover(&l, FileStore::open(&main).unwrap()).unwrap();
    assert_eq!(Some(r.snapshot()), last);
}

/// Fails saves number `fail_from..` (0-based) without touching the inner store.
struct FailingStore {
    inner: FileStore,
    saves: u32,
    fail_from: u32,
    fail_until: u32,
}

impl CursorStore for FailingStore {
    fn save(&mut self, s: &PersistedState) -> Result<(), StoreError> {
        let n = self.saves;
        self.saves += 1;
        if (self.fail_from..self.fail_until).contains(&n) {
            return Err(StoreError::Unavailable(format!(
                "injected failure of save {n}"
            )));
        }
        self.inner.save(s)
    }
    fn load(&mut self) -> Result<Option<PersistedState>, StoreError> {
        self.inner.load()
    }
}

#[test]
fn injected_save_failures_leave_the_last_good_state_and_are_retried() {
    let dir = TempDir::new("inject");
    let (l, _, _) = states();
    let main = dir.file("main");
    let store = FailingStore {
        inner: FileStore::open(&main).unwrap(),
        saves: 0,
        fail_from: 2,
        fail_until: 4,
    };
    let mut c = ManagedCursor::new("c", &l, store);
    let p0 = l.first_position().unwrap();
    let p1 = l.next_position(p0).unwrap();
    let p2 = l.next_position(p1).unwrap();
    c.persist().unwrap();
    c.ack(&l, p0).unwrap();
    c.persist().unwrap();
    let good = c.snapshot();
    c.ack(&l, p1).unwrap();
    assert!(matches!(
        c.persist(),
        Err(CursorError::Store(StoreError::Unavailable(_)))
    ));
    assert!(c.is_dirty());
    // A crash now recovers the last good state: p1's ack is redelivered, not lost.
    assert_eq!(load(&main).unwrap(), Some(good.clone()));
    let r = ManagedCursor::recover(&l, FileStore::open(&main).unwrap()).unwrap();
    assert_eq!((r.mark_delete_position(), r.read_position()), (p0, p1));
    c.ack(&l, p2).unwrap();
    assert!(c.persist().is_err());
    c.persist().unwrap();
    assert!(!c.is_dirty());
    assert_eq!(load(&main).unwrap(), Some(c.snapshot()));
    assert_eq!(c.mark_delete_position(), p2);
}
