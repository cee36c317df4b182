//! The only module of the dispatcher core that names std or loom sync primitives.
//!
//! With the `loom` feature the shared parts of the core (consumer registry, unacked counters,
//! wake flags) use loom's primitives, together with `pending-acks/loom` and
//! `draining-hashes/loom`, so a loom model can check the ack path racing the dispatcher.
//! The runtime module does not use this facade: it always runs on real threads.

#[cfg(not(feature = "loom"))]
pub(crate) use std::sync::{
    atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering},
    Arc, RwLock,
};

#[cfg(feature = "loom")]
pub(crate) use loom::sync::{
    atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering},
    Arc, RwLock,
};

/// Turns a std `Arc` (which coerces to a trait object on stable Rust) into the facade's `Arc`.
/// Handlers and listeners handed to pending-acks and draining-hashes are built this way, so the
/// same code works with loom's `Arc` (which cannot coerce unsized types itself).
#[cfg(not(feature = "loom"))]
pub(crate) fn dyn_arc<T: ?Sized>(a: std::sync::Arc<T>) -> Arc<T> {
    a
}

/// See the non-loom variant.
#[cfg(feature = "loom")]
pub(crate) fn dyn_arc<T: ?Sized>(a: std::sync::Arc<T>) -> Arc<T> {
    Arc::from_std(a)
}
