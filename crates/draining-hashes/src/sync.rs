//! The only module of this crate that names `std::sync` or `loom`.
//!
//! The crate's `loom` feature swaps every primitive for loom's so the loom models (this crate's
//! `tests/loom_*.rs` and the workspace's cross-crate models) can explore interleavings. A crate
//! feature rather than a global `--cfg loom` keeps third-party crates on their normal build.

/// The shared pointer the listener is passed in (re-exported as `draining_hashes::Arc`).
///
/// It is the standard library's `Arc` in every build, also under `loom`: the tracker clones it
/// only at construction and never races on its count, and std's `Arc` coerces to
/// `Arc<dyn UnblockListener>` where loom's cannot (the same choice as `pending_acks::Arc`).
pub use std::sync::Arc;

/// The cell the occupancy bitmap is allocated in on first use. The standard library's in every
/// build: loom has none. Readers look into it only after seeing a count the first mark
/// published (a `Release` store after the cell was set), and that ordering is loom's to check.
pub(crate) use std::sync::OnceLock;

#[cfg(not(feature = "loom"))]
pub(crate) use std::sync::{
    atomic::{AtomicU64, Ordering},
    Mutex, MutexGuard,
};

#[cfg(feature = "loom")]
pub(crate) use loom::sync::{
    atomic::{AtomicU64, Ordering},
    Mutex, MutexGuard,
};

/// Locks `m`, recovering the data if another thread panicked while holding it.
///
/// Every mutation of the tracker's state is completed before a guard is dropped and no code
/// under the lock calls out (the listener runs after release), so a poisoned lock still guards a
/// consistent state.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}
