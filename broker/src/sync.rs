//! The broker's one locking helper.

use std::sync::{Mutex, MutexGuard};

/// Locks a mutex, recovering the data if a thread panicked while holding it (the data is a
/// registry whose invariants hold between statements).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}
