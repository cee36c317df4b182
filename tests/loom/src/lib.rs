//! Cross-crate loom models: `tests/loom_*.rs` check the glue a Key_Shared dispatcher puts between
//! `pending-acks` (the per-consumer pending map) and `draining-hashes` (the hashes in handover):
//! draining registration racing acks, sends racing joins, a close racing adds, nested batches,
//! a stale ack racing a reclaim, an unblock racing a block. `tests/loom_common/mod.rs` is the glue.
//!
//! Run them with `cargo xtask loom loom-models` (or `cargo xtask loom` for every model); without
//! the `loom` feature this package builds nothing.
