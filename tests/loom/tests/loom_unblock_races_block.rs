//! Model 4: A's last ack races B's should_block on the same hash.
#![cfg(feature = "loom")]

mod loom_common;

use loom::thread;
use loom_common::*;
use pending_acks::RemovalCause;

/// If B was told to wait (should_block returned true), the release saw that block and the
/// listener fired — called outside the tracker's lock, since it reads the tracker. If B was not
/// blocked, nobody waits and nothing fires.
#[test]
fn loom_last_ack_races_should_block() {
    loom::model(|| {
        let w = World::new();
        let a = w.consumer(A);
        a.add_if_allowed(1, 1, 7).unwrap();
        assert_eq!(register_lost(&a, &w.tracker, |h| h == 7), 1);

        let t2 = w.tracker.clone();
        let dispatcher = thread::spawn(move || t2.should_block(B, 7));
        assert!(a.remove(1, RemovalCause::Acked).is_some());
        let blocked = dispatcher.join().unwrap();

        assert_eq!(
            w.notifications(),
            usize::from(blocked),
            "blocked={blocked}: a block must be followed by exactly one unblock"
        );
        assert!(w.tracker.is_empty());
        assert!(!w.tracker.should_block(B, 7));
    });
}
