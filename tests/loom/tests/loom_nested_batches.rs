//! Model 5: nested batches on two threads.
#![cfg(feature = "loom")]

mod loom_common;

use loom::thread;
use loom_common::*;
use pending_acks::RemovalCause;

/// A drains hash 5 and C drains hash 6, B was blocked on both. One thread opens a batch and
/// inside it removes A's entries with remove_all_up_to (which nests its own batch); the other
/// clears C's map (its own batch). Both releases happen inside batches, so notifications fire
/// only when the shared batch level drops to zero: once if the batches overlapped, twice if
/// not — never zero (none lost), never more. Afterwards nothing is left armed.
#[test]
fn loom_nested_batches_on_two_threads() {
    loom::model(|| {
        let w = World::new();
        let a = w.consumer(A);
        let c = w.consumer(C);
        a.add_if_allowed(1, 1, 5).unwrap();
        c.add_if_allowed(1, 1, 6).unwrap();
        assert_eq!(register_lost(&a, &w.tracker, |h| h == 5), 1);
        assert_eq!(register_lost(&c, &w.tracker, |h| h == 6), 1);
        assert!(w.tracker.should_block(B, 5));
        assert!(w.tracker.should_block(B, 6));

        let (t2, a2) = (w.tracker.clone(), a.clone());
        let outer = thread::spawn(move || {
            t2.start_batch();
            let n = a2.remove_all_up_to(1, RemovalCause::MarkDeleteAdvanced, |_, _| {});
            t2.end_batch();
            n
        });
        let cleared = c.for_each_and_clear(RemovalCause::RedeliveryRequested, |_, _| {});
        assert_eq!(outer.join().unwrap(), 1);
        assert_eq!(cleared, 1);

        let n = w.notifications();
        assert!(
            (1..=2).contains(&n),
            "{n} notifications for two batched releases"
        );
        assert!(w.tracker.is_empty());
        // Nothing stays armed: an empty batch is silent, a lone release notifies once.
        w.tracker.start_batch();
        w.tracker.end_batch();
        assert_eq!(w.notifications(), n);
    });
}
