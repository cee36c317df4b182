//! F-*: what the locking alone costs on this machine, measured in the same run as the workloads
//! it bounds (see docs/BENCHMARKS.md).
//!
//! The structures are thread-safe and the workloads take their real, uncontended locks, as the
//! Java baseline did. These rows time the same primitives with nothing under them, so a
//! workload's figure can be read as "lock + work":
//!
//! * F-mutex: `std::sync::Mutex` lock and unlock, the draining tracker's lock (W5a, W5c: one per
//!   call).
//! * F-rwlock: `std::sync::RwLock` write lock and unlock, the pending-acks lock (W1, W2: one per
//!   call).
//! * F-atomic: one `fetch_add`, the unit of the counters on the full cycle's path (W8, W9).
//!
//! Each is 1,000,000 operations on one thread; the figure is ns per operation.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::Instant;

use super::Workload;

const OPS: u64 = 1_000_000;

/// Times `op` for `i` in `0..OPS`; ns per call.
fn per_op(mut op: impl FnMut(u64) -> Result<(), String>) -> Result<f64, String> {
    let start = Instant::now();
    for i in 0..OPS {
        op(i)?;
    }
    Ok(start.elapsed().as_nanos() as f64 / OPS as f64)
}

fn mutex() -> Result<f64, String> {
    let m = Mutex::new(0u64);
    let ns = per_op(|i| {
        let mut g = m.lock().map_err(|e| e.to_string())?;
        *g = g.wrapping_add(black_box(i));
        Ok(())
    })?;
    black_box(m.lock().map(|g| *g).map_err(|e| e.to_string())?);
    Ok(ns)
}

fn rwlock() -> Result<f64, String> {
    let m = RwLock::new(0u64);
    let ns = per_op(|i| {
        let mut g = m.write().map_err(|e| e.to_string())?;
        *g = g.wrapping_add(black_box(i));
        Ok(())
    })?;
    black_box(m.read().map(|g| *g).map_err(|e| e.to_string())?);
    Ok(ns)
}

fn atomic() -> Result<f64, String> {
    let a = AtomicU64::new(0);
    let ns = per_op(|i| {
        a.fetch_add(black_box(i), Ordering::SeqCst);
        Ok(())
    })?;
    black_box(a.load(Ordering::SeqCst));
    Ok(ns)
}

/// F-mutex, F-rwlock and F-atomic (no baseline, no goal: they are reference figures).
pub fn workloads() -> Vec<Workload> {
    vec![
        Workload::lower("F-mutex", "ns/op", None, None, mutex),
        Workload::lower("F-rwlock", "ns/op", None, None, rwlock),
        Workload::lower("F-atomic", "ns/op", None, None, atomic),
    ]
}
