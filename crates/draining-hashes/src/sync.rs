//! The only module of this crate that names `std::sync` or `loom`.
//!
//! The crate's `loom` feature swaps every primitive for loom's so the loom models (this crate's
//! `tests/loom_*.rs` and the workspace's cross-crate models) can explore interleavings. A crate
//! feature rather than a global `--cfg loom` keeps third-party crates on their normal build.

#[cfg(not(feature = "loom"))]
pub use std::sync::Arc;
#[cfg(not(feature = "loom"))]
pub(crate) use std::sync::{
    atomic::{AtomicU64, Ordering},
    Mutex, MutexGuard,
};

#[cfg(feature = "loom")]
pub use loom::sync::Arc;
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
