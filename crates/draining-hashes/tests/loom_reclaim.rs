//! Loom model of a stale reference racing a lazy reclaim and a re-registration
//! (`cargo xtask loom draining-hashes`).
//!
//! Consumer A's pending entry e0 of hash 7 drains (one reference). On one thread A's dispatcher
//! path asks `should_block(A, 7)` — the hash came back to A, so the entry is reclaimed lazily
//! while e0 is still pending — and then registers a new pending entry e1 of A with the hash
//! (`add_entry`). On the other thread e0 is acked: the remove handler calls
//! `reduce_ref_count(A, 7)` unconditionally. Whatever the interleaving, e1 is still pending at
//! the end, so the hash must still drain on A with exactly one reference, and e1's own ack must
//! release it and leave nothing behind.
#![cfg(feature = "loom")]

use draining_hashes::{Arc, DrainingHashes, Reduced, UnblockListener};

struct Nop;

impl UnblockListener for Nop {
    fn hashes_unblocked(&self) {}
}

const A: u32 = 1;
const B: u32 = 2;

#[test]
fn loom_stale_reduce_races_reclaim_and_reregistration() {
    loom::model(|| {
        let t: Arc<DrainingHashes<u32>> = Arc::new(DrainingHashes::new(Arc::new(Nop)));
        t.add_entry(A, 7).unwrap(); // e0
        let t2 = t.clone();
        // e0's ack.
        let acker = loom::thread::spawn(move || t2.reduce_ref_count(A, 7, false).unwrap());
        // The hash comes back to A (lazy reclaim), then e1 of A starts draining.
        assert!(!t.should_block(A, 7));
        t.add_entry(A, 7).unwrap(); // e1
        let e0_ack = acker.join().unwrap();
        let e = t.get(7);
        assert_eq!(
            e.map(|e| (e.owner, e.ref_count)),
            Some((A, 1)),
            "e1 is pending, so hash 7 must still drain on A (e0's ack: {e0_ack:?})"
        );
        assert!(t.should_block(B, 7));
        // e1's ack releases the hash; no stale reference is left over.
        assert_eq!(
            t.reduce_ref_count(A, 7, false),
            Ok(Reduced::Released { was_blocking: true })
        );
        assert!(t.is_empty());
        assert_eq!(t.stale_references(A, 7), 0);
    });
}
