//! Model 2: a send-time add races B's join registering A's draining.
#![cfg(feature = "loom")]

mod loom_common;

use loom::sync::Mutex;
use loom::thread;
use loom_common::*;

/// The dispatcher monitor: which consumer hash 7 maps to. The join changes it and registers
/// draining while holding it; a send picks its target under it, then adds the pending ack after
/// releasing it (the add happens on the send path, as a runtime's write would).
struct Selector {
    owner_of_7: Cid,
}

/// A has entry 1 of hash 7. Entry 2 (hash 7) is being sent while B joins and takes hash 7.
/// Whatever the order, entry 2 is either refused (and in replay) or pending on exactly one
/// consumer; hash 7 is never pending on B while A still has it; and while A has entries of 7
/// the refcount equals their number — a send decided before the join and added after it is
/// counted, never left out of the drain.
#[test]
fn loom_send_races_join() {
    loom::model(|| {
        let w = World::new();
        let a = w.consumer(A);
        let b = w.consumer(B);
        a.add_if_allowed(1, 1, 7).unwrap();
        let monitor = std::sync::Arc::new(Mutex::new(Selector { owner_of_7: A }));

        let (m2, a2, t2) = (monitor.clone(), a.clone(), w.tracker.clone());
        let join = thread::spawn(move || {
            let mut sel = m2.lock().unwrap();
            sel.owner_of_7 = B;
            register_lost(&a2, &t2, |h| h == 7);
        });

        let target = monitor.lock().unwrap().owner_of_7;
        let map = if target == A { &a } else { &b };
        let sent = map.add_if_allowed(2, 1, 7).is_ok();
        join.join().unwrap();

        let on_a = a.contains(2);
        let on_b = b.contains(2);
        let replayed = w.replay.sorted() == vec![2];
        assert_eq!(
            usize::from(on_a) + usize::from(on_b) + usize::from(replayed),
            1,
            "entry 2 must be pending on one consumer or replayed (sent={sent} a={on_a} b={on_b})"
        );
        let a7 = pending_with(&a, 7);
        assert!(
            !(on_b && a7 > 0),
            "hash 7 pending on B while A still drains it"
        );
        assert_eq!(
            w.refcount(7),
            a7,
            "refcount must equal A's pending entries of 7"
        );
    });
}
