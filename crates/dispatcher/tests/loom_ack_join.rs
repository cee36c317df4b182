//! Loom models of the ack path (on a consumer thread) racing the dispatcher core.
//!
//! Run: `cargo xtask loom dispatcher` (or
//! `LOOM_MAX_PREEMPTIONS=2 cargo test --release -p key-ordered-dispatcher --features loom --test loom_ack_join`).
//! The `loom` feature switches the core's shared state, pending-acks and draining-hashes to
//! loom's primitives.
#![cfg(feature = "loom")]

use std::sync::atomic::{AtomicBool, Ordering};

use cursor::{EntryMeta, InMemoryLedger, Ledger, Position};
use dispatcher::{
    AutoSplitSelector, BatchAck, ConsumerId, ConsumerInfo, ConsumerSpec, CursorAck,
    DispatchCommand, Dispatcher, DispatcherConfig, KeySharedConfig, KeySharedMode,
    StickyKeySelector, SubscriptionType, Waker,
};

/// The cursor half of the ack: not what the model is about, so it always succeeds.
struct NoCursor;

impl CursorAck for NoCursor {
    fn ack(&self, _position: Position) -> Result<bool, cursor::CursorError> {
        Ok(true)
    }

    fn ack_batch_index(
        &self,
        _position: Position,
        batch_size: u32,
        _indexes: &[u32],
    ) -> Result<BatchAck, cursor::CursorError> {
        Ok(BatchAck {
            newly_acked_indexes: batch_size,
            entry_complete: true,
        })
    }
}

#[derive(Default)]
struct Flag(AtomicBool);

impl Waker for Flag {
    fn wake(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

fn cfg() -> DispatcherConfig {
    DispatcherConfig::new(SubscriptionType::KeyShared(KeySharedConfig {
        mode: KeySharedMode::AutoSplit,
        allow_out_of_order: false,
    }))
}

/// A key that belongs to consumer 1 alone and moves to consumer 2 when it joins.
fn moving_key() -> String {
    for i in 0..100 {
        let k = format!("k{i}");
        let mut s = AutoSplitSelector::<ConsumerId>::new();
        s.add_consumer(ConsumerInfo::new(ConsumerId(1), "A"))
            .unwrap();
        s.add_consumer(ConsumerInfo::new(ConsumerId(2), "B"))
            .unwrap();
        if s.select_key(k.as_bytes()) == Some(ConsumerId(2)) {
            return k;
        }
    }
    panic!("no moving key among k0..k99");
}

fn entries(key: &str, n: usize) -> Vec<cursor::Entry> {
    let mut l = InMemoryLedger::new(100);
    (0..n)
        .map(|_| {
            let mut m = EntryMeta::simple(0, 1);
            m.ordering_key = Some(key.as_bytes().to_vec());
            let p = l.append(m);
            l.get(p).unwrap()
        })
        .collect()
}

const A: ConsumerId = ConsumerId(1);
const B: ConsumerId = ConsumerId(2);

/// Key_Shared with consumer A holding `held` entries of the key, sent through the core.
fn setup(key: &str, held: usize, waker: std::sync::Arc<Flag>) -> (Dispatcher, Vec<cursor::Entry>) {
    let mut d = Dispatcher::new(cfg(), waker);
    d.handle_consumer_added(0, ConsumerSpec::new(1, "A"))
        .unwrap();
    d.handle_flow(0, A, 10);
    let all = entries(key, held + 1);
    let mut fed = 0;
    while let Some(c) = d.poll_command() {
        if let DispatchCommand::Read { max_entries } = c {
            // At the end of what A should hold, report an empty read (the read parks).
            let take = max_entries.min(held - fed);
            d.handle_read_complete(0, all[fed..fed + take].to_vec(), take > 0);
            fed += take;
        }
    }
    (d, all)
}

/// B's join registers A's pending entries of the key as draining while A acks one of them on
/// its own thread: afterwards the refcount equals A's pending entries of the hash (no entry
/// when none are left).
#[test]
fn loom_join_registration_races_ack() {
    let key = moving_key();
    loom::model(move || {
        let waker = std::sync::Arc::new(Flag::default());
        let (mut d, all) = setup(&key, 2, waker);
        let ack = d.ack_handle(std::sync::Arc::new(NoCursor));
        let p0 = all[0].position;
        let t = loom::thread::spawn(move || {
            ack.ack(A, p0).unwrap();
        });
        d.handle_consumer_added(0, ConsumerSpec::new(2, "B"))
            .unwrap();
        t.join().unwrap();
        let hash = d.entry_hash(&all[0]);
        let pending = d
            .pending_positions(A)
            .iter()
            .filter(|(_, h)| *h == hash)
            .count() as u32;
        let draining: Vec<_> = d
            .draining_hashes()
            .into_iter()
            .filter(|(h, _, _)| *h == hash)
            .collect();
        match pending {
            0 => assert!(draining.is_empty(), "{draining:?}"),
            n => assert_eq!(draining, vec![(hash, A, n)]),
        }
    });
}

/// A's last ack (consumer thread) races B's join followed by a read of a new entry of the key:
/// the new entry never reaches B while A still holds the old one, and if it was held back in
/// replay after the hash was released, the dispatcher was woken (no lost unblock).
#[test]
fn loom_last_ack_races_join_and_send() {
    let key = moving_key();
    loom::model(move || {
        let waker = std::sync::Arc::new(Flag::default());
        let (mut d, all) = setup(&key, 1, waker.clone());
        let ack = d.ack_handle(std::sync::Arc::new(NoCursor));
        let p0 = all[0].position;
        let t = loom::thread::spawn(move || {
            ack.ack(A, p0).unwrap();
        });
        d.handle_consumer_added(0, ConsumerSpec::new(2, "B"))
            .unwrap();
        d.handle_flow(0, B, 10);
        d.handle_entries_appended(0);
        let mut sent_to_b = false;
        let mut read = false;
        while let Some(c) = d.poll_command() {
            match c {
                DispatchCommand::Read { .. } => {
                    let e = if read { vec![] } else { vec![all[1].clone()] };
                    read = true;
                    d.handle_read_complete(0, e, false);
                }
                DispatchCommand::Send { consumer, .. } => sent_to_b |= consumer == B,
                _ => {}
            }
        }
        assert!(read, "the new entry was never read");
        let a_held = !d.pending_positions(A).is_empty();
        t.join().unwrap();
        if sent_to_b {
            assert!(!a_held, "B got the key while A held it");
        }
        let in_replay = d
            .replay_positions()
            .iter()
            .any(|(p, _)| *p == all[1].position);
        if in_replay && d.draining_hashes().is_empty() {
            assert!(
                waker.0.load(Ordering::SeqCst),
                "released while held back, but no wake"
            );
        }
    });
}

/// Three threads: two acks of the same hash (two consumer-side threads) race B's join, whose
/// registration counts A's pending entries of the hash as draining. Afterwards the refcount
/// equals A's pending entries of the hash, and with both acked no draining entry is left.
/// (Seen to fail when the registration collects the pending hashes under the map's lock and
/// counts them after releasing it: an ack in between leaves a reference with nothing pending.)
#[test]
fn loom_two_acks_race_join_registration() {
    let key = moving_key();
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = runs.clone();
    loom::model(move || {
        counted.fetch_add(1, Ordering::Relaxed);
        let waker = std::sync::Arc::new(Flag::default());
        let (mut d, all) = setup(&key, 2, waker);
        let ack1 = d.ack_handle(std::sync::Arc::new(NoCursor));
        let ack2 = d.ack_handle(std::sync::Arc::new(NoCursor));
        let (p0, p1) = (all[0].position, all[1].position);
        let t1 = loom::thread::spawn(move || {
            ack1.ack(A, p0).unwrap();
        });
        let t2 = loom::thread::spawn(move || {
            ack2.ack(A, p1).unwrap();
        });
        d.handle_consumer_added(0, ConsumerSpec::new(2, "B"))
            .unwrap();
        t1.join().unwrap();
        t2.join().unwrap();
        let hash = d.entry_hash(&all[0]);
        assert!(d.pending_positions(A).is_empty(), "both entries were acked");
        let draining: Vec<_> = d
            .draining_hashes()
            .into_iter()
            .filter(|(h, _, r)| *h == hash && *r > 0)
            .collect();
        assert!(
            draining.is_empty(),
            "a draining reference outlived every pending entry: {draining:?}"
        );
    });
    eprintln!(
        "loom_two_acks_race_join_registration: {} interleavings",
        runs.load(Ordering::Relaxed)
    );
}

/// Three threads: the dispatcher closes (`handle_close` returns every held entry) while two
/// consumer-side threads ack A's two pending entries. Every entry leaves A's pending acks
/// exactly once: returned by the close or cleared by its ack, never both, never neither.
/// (Seen to fail when the close reads the pending entries and clears them in two steps: an
/// ack in between is returned by the close and cleared by the ack.)
#[test]
fn loom_close_races_two_acks() {
    let key = moving_key();
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = runs.clone();
    loom::model(move || {
        counted.fetch_add(1, Ordering::Relaxed);
        let waker = std::sync::Arc::new(Flag::default());
        let (mut d, all) = setup(&key, 2, waker);
        let ack1 = d.ack_handle(std::sync::Arc::new(NoCursor));
        let ack2 = d.ack_handle(std::sync::Arc::new(NoCursor));
        let (p0, p1) = (all[0].position, all[1].position);
        let t1 = loom::thread::spawn(move || ack1.ack(A, p0).unwrap().cleared_on);
        let t2 = loom::thread::spawn(move || ack2.ack(A, p1).unwrap().cleared_on);
        let returned: Vec<Position> = d
            .handle_close(0)
            .unwrap()
            .into_iter()
            .map(|e| e.position)
            .collect();
        let cleared = [t1.join().unwrap(), t2.join().unwrap()];
        for (p, by_ack) in [(p0, cleared[0]), (p1, cleared[1])] {
            let by_close = returned.contains(&p);
            assert!(
                by_close != by_ack.is_some(),
                "{p}: returned by the close {by_close}, cleared by its ack {by_ack:?}"
            );
        }
        assert!(d.pending_positions(A).is_empty());
    });
    eprintln!(
        "loom_close_races_two_acks: {} interleavings",
        runs.load(Ordering::Relaxed)
    );
}
