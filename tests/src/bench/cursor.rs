//! W10 and W10h: the `cursor` crate (see docs/BENCHMARKS.md).
//!
//! One ledger of N = 1,000,000 single-message entries (ledger id 1, no rollover), built once
//! and shared by the rows (setup, untimed).
//! * W10: a fresh cursor acks every position in a seeded random order (SplitMix64 seed 10,
//!   Fisher–Yates over 0..N, shuffled once, untimed); ns/ack. Check: mark-delete ends at the
//!   last entry with no holes left.
//! * W10h-size: a cursor with every even entry id acked (0, 2, …, 999,998 — mark-delete moves
//!   to 1:0 and 500,000 holes remain at the odd ids) is saved through `FileStore`; the figure is
//!   the store file's size in bytes (header + record framing included). Pulsar's encoding of the
//!   same holes is ~16,000,000 bytes.
//! * W10h-time: the same state saved through a fresh `FileStore` in a temp dir (fsync included)
//!   and loaded back by reopening the file; ms for save + open + load. Check: the loaded state
//!   equals the saved one (untimed).

use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Instant;

use cursor::{
    CursorStore, EntryMeta, FileStore, InMemoryLedger, Ledger, ManagedCursor, MemoryStore,
    PersistedState, Position,
};

use super::rng::SplitMix64;
use super::Workload;

const N: u64 = 1_000_000;
const SEED: u64 = 10;

struct Shared {
    ledger: InMemoryLedger,
    order: Vec<Position>,
    holes: Option<PersistedState>,
    dir: PathBuf,
    round: u64,
}

fn shared() -> Rc<RefCell<Option<Shared>>> {
    Rc::new(RefCell::new(None))
}

fn init(s: &Rc<RefCell<Option<Shared>>>) {
    if s.borrow().is_some() {
        return;
    }
    let mut ledger = InMemoryLedger::new(0);
    let mut order: Vec<Position> = (0..N)
        .map(|i| ledger.append(EntryMeta::simple(i, 100)))
        .collect();
    let mut rng = SplitMix64::new(SEED);
    for i in (1..order.len()).rev() {
        let j = (rng.next() % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    let dir = std::env::temp_dir().join(format!("cursor-bench-{}", std::process::id()));
    *s.borrow_mut() = Some(Shared {
        ledger,
        order,
        holes: None,
        dir,
        round: 0,
    });
}

fn holes_state(sh: &mut Shared) -> Result<PersistedState, String> {
    if let Some(h) = &sh.holes {
        return Ok(h.clone());
    }
    let mut c = ManagedCursor::new("w10h", &sh.ledger, MemoryStore::new());
    for e in (0..N).step_by(2) {
        c.ack(&sh.ledger, Position::new(1, e))
            .map_err(|e| e.to_string())?;
    }
    let st = c.snapshot();
    if st.mark_delete != Position::new(1, 0) || st.acked.len() != N / 2 - 1 {
        return Err(format!(
            "md {} with {} acked, want 1:0 and {}",
            st.mark_delete,
            st.acked.len(),
            N / 2 - 1
        ));
    }
    sh.holes = Some(st.clone());
    Ok(st)
}

fn w10(s: &Rc<RefCell<Option<Shared>>>) -> Result<f64, String> {
    init(s);
    let g = s.borrow();
    let sh = g.as_ref().ok_or("no setup")?;
    let l = &sh.ledger;
    let mut c = ManagedCursor::new("w10", l, MemoryStore::new());
    let start = Instant::now();
    for &p in &sh.order {
        c.ack(l, p).map_err(|e| e.to_string())?;
    }
    let ns = start.elapsed().as_nanos() as f64;
    if Some(c.mark_delete_position()) != l.last_position() || !c.acked_set().is_empty() {
        return Err(format!(
            "md {} with {} holes left",
            c.mark_delete_position(),
            c.acked_set().len()
        ));
    }
    Ok(ns / N as f64)
}

/// Saves the holes state into a fresh file; returns (file size, save+load ms).
fn w10h(s: &Rc<RefCell<Option<Shared>>>) -> Result<(f64, f64), String> {
    init(s);
    let mut g = s.borrow_mut();
    let sh = g.as_mut().ok_or("no setup")?;
    let st = holes_state(sh)?;
    std::fs::create_dir_all(&sh.dir).map_err(|e| e.to_string())?;
    sh.round += 1;
    let path = sh.dir.join(format!("w10h-{}.cursor", sh.round));
    let mut store = FileStore::open(&path).map_err(|e| e.to_string())?;
    let start = Instant::now();
    store.save(&st).map_err(|e| e.to_string())?;
    let loaded = FileStore::open(&path)
        .and_then(|mut s| s.load())
        .map_err(|e| e.to_string())?;
    let ms = start.elapsed().as_secs_f64() * 1e3;
    let bytes = std::fs::metadata(&path).map_err(|e| e.to_string())?.len() as f64;
    let _ = std::fs::remove_file(&path);
    if loaded.as_ref() != Some(&st) {
        return Err("loaded state differs from the saved one".into());
    }
    Ok((bytes, ms))
}

/// The cursor rows: W10, W10h-size, W10h-time.
pub fn workloads() -> Vec<Workload> {
    let s = shared();
    let (a, b, c) = (s.clone(), s.clone(), s);
    vec![
        Workload::lower("W10", "ns/ack", None, Some(20.0), move || w10(&a)),
        Workload::lower(
            "W10h-size",
            "bytes",
            Some(16_000_000.0),
            Some(130_000.0),
            move || w10h(&b).map(|(bytes, _)| bytes),
        ),
        Workload::lower("W10h-time", "ms", None, Some(20.0), move || {
            w10h(&c).map(|(_, ms)| ms)
        }),
    ]
}
