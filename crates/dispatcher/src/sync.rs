//! The only module of the dispatcher core that names std or loom sync primitives.
//!
//! With the `loom` feature the shared parts of the core (consumer registry, unacked counters,
//! wake flags) use loom's primitives, together with `pending-acks/loom` and
//! `draining-hashes/loom`, so a loom model can check the ack path racing the dispatcher.
//! The runtime module does not use this facade: it always runs on real threads.

#[cfg(not(feature = "loom"))]
pub(crate) use std::sync::{
    atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering},
    Arc, RwLock, RwLockReadGuard,
};

#[cfg(feature = "loom")]
pub(crate) use loom::sync::{
    atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering},
    Arc, RwLock, RwLockReadGuard,
};
