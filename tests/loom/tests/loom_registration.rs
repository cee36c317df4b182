//! Model 1: draining registration (iterating A's pending acks when B joins) races A acking.
#![cfg(feature = "loom")]

mod loom_common;

use loom::thread;
use loom_common::*;
use pending_acks::RemovalCause;

/// A holds two entries of hash 7 (and one of hash 8, which stays). B's join registers hash 7 as
/// draining on A while A acks one of them: afterwards the refcount equals A's remaining pending
/// entries of hash 7, whichever ran first.
#[test]
fn loom_registration_races_one_ack() {
    loom::model(|| {
        let w = World::new();
        let a = w.consumer(A);
        for (p, h) in [(1, 7), (2, 7), (3, 8)] {
            a.add_if_allowed(p, 1, h).unwrap();
        }
        let (a2, t2) = (a.clone(), w.tracker.clone());
        let join = thread::spawn(move || register_lost(&a2, &t2, |h| h == 7));
        assert!(a.remove(1, RemovalCause::Acked).is_some());
        join.join().unwrap();

        let pending = pending_with(&a, 7);
        assert_eq!(pending, 1);
        assert_eq!(
            w.refcount(7),
            pending,
            "refcount must equal A's pending entries of 7"
        );
        assert_eq!(w.tracker.get(8), None, "hash 8 did not move");
        assert!(w.tracker.should_block(B, 7));
    });
}

/// Both entries of hash 7 are acked on two threads while the join registers: zero pending
/// means no entry at all (B is free to take hash 7), never a stale count.
#[test]
fn loom_registration_races_two_acks() {
    loom::model(|| {
        let w = World::new();
        let a = w.consumer(A);
        a.add_if_allowed(1, 1, 7).unwrap();
        a.add_if_allowed(2, 1, 7).unwrap();
        let (a2, t2) = (a.clone(), w.tracker.clone());
        let join = thread::spawn(move || register_lost(&a2, &t2, |h| h == 7));
        let a3 = a.clone();
        let ack = thread::spawn(move || a3.remove(2, RemovalCause::Acked).is_some());
        assert!(a.remove(1, RemovalCause::Acked).is_some());
        assert!(ack.join().unwrap());
        join.join().unwrap();

        assert_eq!(pending_with(&a, 7), 0);
        assert_eq!(
            w.tracker.get(7),
            None,
            "no pending entry of 7 left: nothing may drain"
        );
        assert!(!w.tracker.should_block(B, 7));
    });
}
