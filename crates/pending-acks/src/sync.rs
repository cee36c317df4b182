//! The only module that names `std::sync` or loom primitives (`cargo xtask tidy` enforces it).
//!
//! Under the crate feature `loom` the lock comes from loom so the model checker can explore every
//! interleaving; otherwise it is the standard library's. The feature (rather than a global
//! `--cfg loom`) keeps third-party crates on their normal build.

#[cfg(feature = "loom")]
pub(crate) use loom::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
#[cfg(not(feature = "loom"))]
pub(crate) use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// The shared pointer handlers are installed with (re-exported as `pending_acks::Arc`).
///
/// It is the standard library's `Arc` in every build, including under the `loom` feature: a
/// handler is installed and read only under the map's lock, so its reference count is not part of
/// any race the models need to explore, and std's `Arc` coerces to `Arc<dyn AddHandler<..>>` /
/// `Arc<dyn RemoveHandler<..>>` where loom's cannot. Build handlers with `pending_acks::Arc::new`.
pub use std::sync::Arc;

/// Takes the read lock. A lock poisoned by a panicking handler is recovered: every operation
/// leaves the map consistent before it calls out (see `Store::repair`).
#[inline]
pub(crate) fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    match lock.read() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// Takes the write lock; the flag is true when the lock was poisoned (and is now cleared), so the
/// caller can repair what an interrupted operation left behind.
#[inline]
pub(crate) fn write<T>(lock: &RwLock<T>) -> (RwLockWriteGuard<'_, T>, bool) {
    match lock.write() {
        Ok(g) => (g, false),
        Err(poisoned) => {
            #[cfg(not(feature = "loom"))]
            lock.clear_poison();
            (poisoned.into_inner(), true)
        }
    }
}
