//! Loom models of the tracker alone (`cargo xtask loom draining-hashes`). The cross-crate races
//! (with pending acks) are in the workspace's `tests/loom/tests/loom_*.rs`.
#![cfg(feature = "loom")]

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

use draining_hashes::{Arc, DrainingHashes, Reduced, UnblockListener};

/// Counts calls. Plain std atomics: the listener is outside the tracker, and loom only needs to
/// see the tracker's own primitives.
#[derive(Default)]
struct Count(AtomicUsize);

impl UnblockListener for Count {
    fn hashes_unblocked(&self) {
        self.0.fetch_add(1, SeqCst);
    }
}

fn tracker() -> (Arc<Count>, Arc<DrainingHashes<u32>>) {
    let c = Arc::new(Count::default());
    (c.clone(), Arc::new(DrainingHashes::new(c)))
}

const A: u32 = 1;
const B: u32 = 2;

/// Two threads drop the last two references of one hash: exactly one of them sees `Released`,
/// the entry is gone, and the single blocked attempt yields exactly one notification.
#[test]
fn loom_two_reducers_release_once() {
    loom::model(|| {
        let (count, t) = tracker();
        t.add_entry(A, 7).unwrap();
        t.add_entry(A, 7).unwrap();
        assert!(t.should_block(B, 7));
        let t2 = t.clone();
        let h = loom::thread::spawn(move || t2.reduce_ref_count(A, 7, false).unwrap());
        let mine = t.reduce_ref_count(A, 7, false).unwrap();
        let theirs = h.join().unwrap();
        let released = [mine, theirs]
            .iter()
            .filter(|r| matches!(r, Reduced::Released { was_blocking: true }))
            .count();
        assert_eq!(released, 1, "{mine:?} / {theirs:?}");
        assert!(t.get(7).is_none());
        assert!(t.is_empty());
        assert_eq!(count.0.load(SeqCst), 1);
    });
}

/// A release races a new block on the same hash (lock-free fast path vs. locked removal): if the
/// block was counted (true), the release saw it and notified; if not, nothing was blocked.
#[test]
fn loom_block_races_release() {
    loom::model(|| {
        let (count, t) = tracker();
        t.add_entry(A, 7).unwrap();
        let t2 = t.clone();
        let h = loom::thread::spawn(move || t2.should_block(B, 7));
        let r = t.reduce_ref_count(A, 7, false).unwrap();
        let blocked = h.join().unwrap();
        assert_eq!(
            r,
            Reduced::Released {
                was_blocking: blocked
            }
        );
        assert_eq!(count.0.load(SeqCst), usize::from(blocked));
        assert!(!t.should_block(B, 7));
    });
}

/// Nested batches on two threads: one notification, only after the last batch closes, for two
/// blocking releases made inside.
#[test]
fn loom_nested_batches_notify_once_after_the_outermost_end() {
    loom::model(|| {
        let (count, t) = tracker();
        for h in [5, 6] {
            t.add_entry(A, h).unwrap();
            assert!(t.should_block(B, h));
        }
        t.start_batch();
        let t2 = t.clone();
        let c2 = count.clone();
        let h = loom::thread::spawn(move || {
            t2.start_batch();
            t2.reduce_ref_count(A, 6, false).unwrap();
            t2.end_batch();
            c2.0.load(SeqCst)
        });
        t.reduce_ref_count(A, 5, false).unwrap();
        let seen_by_inner = h.join().unwrap();
        assert_eq!(
            seen_by_inner, 0,
            "no notification while the outer batch is open"
        );
        assert_eq!(count.0.load(SeqCst), 0);
        t.end_batch();
        assert_eq!(count.0.load(SeqCst), 1);
    });
}
