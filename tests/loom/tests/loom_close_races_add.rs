//! Model 3: closing a consumer (for_each_and_close) races a concurrent add to it.
#![cfg(feature = "loom")]

mod loom_common;

use loom::thread;
use loom_common::*;

/// A drains hash 7 (entry 1, B was blocked once). A leaves while entry 2 (hash 7) is being
/// sent to it. The add is refused (the caller replays it) or the close drains it: either way
/// both entries end up in replay exactly once, A's map is empty and closed, the drain is gone
/// and — A closing — nobody is notified.
#[test]
fn loom_close_races_add() {
    loom::model(|| {
        let w = World::new();
        let a = w.consumer(A);
        a.add_if_allowed(1, 1, 7).unwrap();
        assert_eq!(register_lost(&a, &w.tracker, |h| h == 7), 1);
        assert!(w.tracker.should_block(B, 7));

        let (a2, r2) = (a.clone(), w.replay.clone());
        let leave = thread::spawn(move || close_consumer(&a2, &r2));
        if a.add_if_allowed(2, 1, 7).is_err() {
            w.replay.push(2);
        }
        leave.join().unwrap();

        assert_eq!(
            w.replay.sorted(),
            vec![1, 2],
            "every entry refused or drained, once"
        );
        assert!(a.is_empty() && a.is_closed());
        assert_eq!(w.tracker.get(7), None);
        assert_eq!(w.notifications(), 0, "releases while closing do not notify");
    });
}
