//! The cursor's durable store: the input is a `FileStore` file's contents. Opening and loading
//! it either works or returns a typed error. A cursor recovered from it over a small ledger
//! must survive reads, acks and a persist, and recover again to the same mark-delete and acks.
#![no_main]

use cursor::{EntryMeta, FileStore, InMemoryLedger, Ledger, ManagedCursor, PersistedState, Position};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = PersistedState::decode(data);
    let dir = kod_fuzz::scratch("cursor");
    let path = dir.join("s.cursor");
    std::fs::write(&path, data).unwrap();
    let mut ledger = InMemoryLedger::new(4);
    for i in 0..12u64 {
        ledger.append(EntryMeta::simple(i, 10));
    }
    let Ok(store) = FileStore::open(&path) else {
        return;
    };
    if let Ok(mut c) = ManagedCursor::recover(&ledger, store) {
        let _ = c.backlog(&ledger);
        let read = c.read(&ledger, 3);
        for e in read.iter().step_by(2) {
            let _ = c.ack(&ledger, e.position);
        }
        let _ = c.ack(&ledger, Position::new(2, 1));
        if c.persist().is_ok() {
            let md = c.mark_delete_position();
            let acked: Vec<bool> = (1..=3u64)
                .flat_map(|l| (0..4).map(move |e| Position::new(l, e)))
                .map(|p| c.is_acked(p))
                .collect();
            drop(c);
            let again = ManagedCursor::recover(&ledger, FileStore::open(&path).unwrap())
                .expect("a persisted cursor recovers");
            assert_eq!(again.mark_delete_position(), md);
            let acked_again: Vec<bool> = (1..=3u64)
                .flat_map(|l| (0..4).map(move |e| Position::new(l, e)))
                .map(|p| again.is_acked(p))
                .collect();
            assert_eq!(acked_again, acked);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
});
