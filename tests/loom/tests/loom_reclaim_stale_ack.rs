//! Model 6: a stale ack races the owner's lazy reclaim of its own draining hash, with the real
//! pending-acks maps and their handlers (the remove handler reduces unconditionally).
//!
//! A holds e0 (hash 7), registered as draining. The hash comes back to A: the dispatcher's filter
//! asks `should_block(A, 7)`, which reclaims the entry while e0 is still pending. Meanwhile e0 is
//! acked on another thread. Afterwards the dispatcher counts a new entry of A with hash 7 — once
//! as a single new reference (a pinned chunk: `add_entry`), once by a registration that rescans
//! all of A's pending entries (`recount_entry`, which meets e0 again if it is still pending).
//! Either way the refcount must equal A's pending entries of hash 7 that were counted, and
//! acking what is left must release the hash with nothing stale left behind.
#![cfg(feature = "loom")]

mod loom_common;

use loom::thread;
use loom_common::*;
use pending_acks::RemovalCause;

/// The pinned-chunk path: e1 is added and counted alone after the reclaim.
#[test]
fn loom_stale_ack_races_reclaim_then_single_count() {
    loom::model(|| {
        let w = World::new();
        let a = w.consumer(A);
        a.add_if_allowed(1, 1, 7).unwrap(); // e0
        assert_eq!(register_lost(&a, &w.tracker, |h| h == 7), 1);
        let a2 = a.clone();
        let ack = thread::spawn(move || a2.remove(1, RemovalCause::Acked).is_some());
        // Dispatcher: the hash came back to A; then e1 of A is sent and counted on its own.
        assert!(!w.tracker.should_block(A, 7));
        a.add_if_allowed(2, 1, 7).unwrap(); // e1 (not draining now: the gate lets it through)
        w.tracker.add_entry(A, 7).unwrap();
        assert!(ack.join().unwrap());

        assert_eq!(pending_with(&a, 7), 1);
        assert_eq!(
            w.refcount(7),
            1,
            "e1 is pending: hash 7 must still drain on A"
        );
        assert!(w.tracker.should_block(B, 7));
        assert!(a.remove(2, RemovalCause::Acked).is_some());
        assert!(w.tracker.is_empty());
        assert_eq!(w.tracker.stale_references(A, 7), 0);
    });
}

/// The registration path: A loses the hash again and every pending entry of 7 is rescanned.
#[test]
fn loom_stale_ack_races_reclaim_then_rescan() {
    loom::model(|| {
        let w = World::new();
        let a = w.consumer(A);
        a.add_if_allowed(1, 1, 7).unwrap(); // e0
        assert_eq!(register_lost(&a, &w.tracker, |h| h == 7), 1);
        let a2 = a.clone();
        let ack = thread::spawn(move || a2.remove(1, RemovalCause::Acked).is_some());
        assert!(!w.tracker.should_block(A, 7));
        a.add_if_allowed(2, 1, 7).unwrap(); // e1
                                            // The rescan runs under A's map lock, so it sees e0 exactly when its ack has not run.
        let t = w.tracker.clone();
        let mut counted = 0;
        a.for_each(|_, ack| {
            if ack.hash == 7 {
                t.recount_entry(A, 7).unwrap();
                counted += 1;
            }
        });
        assert!(ack.join().unwrap());

        assert!(counted >= 1);
        assert_eq!(pending_with(&a, 7), 1);
        assert_eq!(w.refcount(7), 1, "only e1 is pending");
        assert_eq!(w.tracker.stale_references(A, 7), 0);
        assert!(a.remove(2, RemovalCause::Acked).is_some());
        assert!(w.tracker.is_empty());
    });
}
