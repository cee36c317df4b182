//! The same workload on the dispatcher's threaded runtime, consumers acking on their own
//! threads, checked from the event log: per-key order and no loss (acked or dropped by an admin
//! operation whose mark-delete move the runtime reported).

use tests::sim::{builtin, run_threaded};

#[test]
fn key_shared_mix_on_threads_keeps_order_and_loses_nothing() {
    for name in ["mix-key-shared", "mix-key-shared-admin", "mix-shared"] {
        let s = builtin(name).expect("shipped");
        let (r, _skipped) = run_threaded(&s, 1, None).expect("runs");
        assert!(r.violations.is_empty(), "{name}: {:?}", r.violations);
        // Admin operations may drop messages before anyone processes them.
        assert!(r.starts > 0, "{name}: messages were processed");
        if name == "mix-key-shared-admin" {
            assert!(
                r.faults > 0,
                "{name}: joins, leaves and admin operations ran"
            );
        }
    }
}
