//! Loom models of the map's own races (the cross-crate ones, with draining-hashes, live in
//! `tests/loom/tests/loom_*.rs`). Each model asserts the invariant at the end.
//!
//! Run: `CARGO_TARGET_DIR=target/loom LOOM_MAX_PREEMPTIONS=2 cargo test --release -p key-ordered-pending-acks
//! --features loom --test loom_map` (or `cargo xtask loom pending-acks`).
#![cfg(feature = "loom")]

use loom::sync::Mutex;
use loom::thread;

use pending_acks::{
    AddOutcome, AddRefused, Arc, PendingAck, PendingAcks, RemovalCause, RemoveHandler,
};

type Pos = (u64, u64);
type Map = PendingAcks<Pos, u32>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ev {
    Start,
    End,
    Removed(Pos, RemovalCause, bool),
}

#[derive(Default)]
struct Rec(Mutex<Vec<Ev>>);

impl Rec {
    fn events(&self) -> Vec<Ev> {
        self.0.lock().unwrap().clone()
    }
    fn removed(&self) -> Vec<Pos> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                Ev::Removed(p, ..) => Some(p),
                _ => None,
            })
            .collect()
    }
}

impl RemoveHandler<Pos, u32> for Rec {
    fn on_removed(&self, _: u32, pos: Pos, _: PendingAck, cause: RemovalCause, closing: bool) {
        self.0
            .lock()
            .unwrap()
            .push(Ev::Removed(pos, cause, closing));
    }
    fn start_batch(&self) {
        self.0.lock().unwrap().push(Ev::Start);
    }
    fn end_batch(&self) {
        self.0.lock().unwrap().push(Ev::End);
    }
}

fn map_with_recorder() -> (Arc<Map>, Arc<Rec>) {
    let m = Arc::new(Map::new(1));
    let r = Arc::new(Rec::default());
    m.set_remove_handler(r.clone());
    (m, r)
}

/// An add racing `remove_all_up_to` over the same position: the entry ends up either still in
/// the map (added after the sweep) or removed and reported by the sweep (added before) — never
/// both, never neither. An entry above the bound is never touched, and the sweep's reports sit
/// inside one start/end bracket, in ascending order, matching its callback.
#[test]
fn loom_add_races_remove_all_up_to() {
    loom::model(|| {
        let (m, rec) = map_with_recorder();
        m.add_if_allowed((1, 0), 1, 5).unwrap();
        m.add_if_allowed((2, 0), 1, 7).unwrap();

        let m2 = m.clone();
        let adder = thread::spawn(move || m2.add_if_allowed((1, 1), 1, 6));

        let mut swept = Vec::new();
        let n = m.remove_all_up_to((1, 1), RemovalCause::MarkDeleteAdvanced, |p, _| {
            swept.push(p)
        });
        assert_eq!(adder.join().unwrap(), Ok(AddOutcome::Inserted));

        let removed = rec.removed();
        assert_eq!(removed, swept, "handler and callback agree, in order");
        assert_eq!(n, removed.len());
        assert_eq!(removed[0], (1, 0), "the older entry is always swept, first");
        let reported = removed.iter().filter(|p| **p == (1, 1)).count();
        assert_eq!(
            reported + usize::from(m.contains((1, 1))),
            1,
            "the raced entry is either swept or still pending"
        );
        assert!(m.contains((2, 0)), "above the bound: untouched");
        let ev = rec.events();
        assert_eq!(ev.first(), Some(&Ev::Start));
        assert_eq!(ev.last(), Some(&Ev::End));
        assert_eq!(ev.len(), removed.len() + 2);
        assert_eq!(m.len(), 3 - n);
    });
}

/// `for_each_and_close` racing an add: the add is either refused (`Closed`, never reported) or
/// accepted and then drained by the close (reported once, `ConsumerClosed`, closing = true). The
/// entry is never lost, the map ends empty and closed, and refuses adds afterwards.
#[test]
fn loom_close_races_add() {
    loom::model(|| {
        let (m, rec) = map_with_recorder();
        m.add_if_allowed((0, 0), 1, 3).unwrap();

        let m2 = m.clone();
        let adder = thread::spawn(move || m2.add_if_allowed((0, 1), 1, 4));

        let mut drained = Vec::new();
        let n = m.for_each_and_close(|p, _| drained.push(p));
        let added = adder.join().unwrap();

        let removed = rec.removed();
        assert_eq!(removed, drained);
        assert_eq!(n, removed.len());
        match added {
            Ok(AddOutcome::Inserted) => {
                assert_eq!(
                    removed,
                    [(0, 0), (0, 1)],
                    "accepted, so drained by the close"
                )
            }
            Err(AddRefused::Closed) => assert_eq!(removed, [(0, 0)], "refused, so not reported"),
            other => panic!("unexpected add result {other:?}"),
        }
        for e in rec.events() {
            if let Ev::Removed(_, cause, closing) = e {
                assert_eq!((cause, closing), (RemovalCause::ConsumerClosed, true));
            }
        }
        assert!(m.is_empty() && m.is_closed());
        assert_eq!(m.add_if_allowed((0, 2), 1, 5), Err(AddRefused::Closed));
    });
}

/// Two removals of one entry (an ack and an exact-match redelivery): exactly one wins and the
/// handler hears exactly one removal, with the winner's cause.
#[test]
fn loom_two_removals_report_once() {
    loom::model(|| {
        let (m, rec) = map_with_recorder();
        let value = PendingAck {
            remaining: 2,
            hash: 9,
        };
        m.add_if_allowed((4, 4), value.remaining, value.hash)
            .unwrap();

        let m2 = m.clone();
        let acker = thread::spawn(move || m2.remove((4, 4), RemovalCause::Acked));
        let redelivered = m.remove_if_matches((4, 4), value, RemovalCause::RedeliveryRequested);
        let acked = acker.join().unwrap();

        assert!(acked.is_some() != redelivered, "exactly one removal wins");
        let want = if redelivered {
            RemovalCause::RedeliveryRequested
        } else {
            RemovalCause::Acked
        };
        assert_eq!(rec.events(), [Ev::Removed((4, 4), want, false)]);
        assert!(m.is_empty());
    });
}

/// A reader (`for_each`, `len`) racing an add and a remove sees a whole state: ascending, and
/// its count equals what `len` reported in the same view.
#[test]
fn loom_reader_sees_whole_states() {
    loom::model(|| {
        let (m, _rec) = map_with_recorder();
        m.add_if_allowed((0, 5), 1, 1).unwrap();
        let m2 = m.clone();
        let writer = thread::spawn(move || {
            m2.add_if_allowed((0, 3), 1, 1).unwrap();
            m2.remove((0, 5), RemovalCause::Acked);
        });
        let mut seen = Vec::new();
        m.for_each(|p, _| seen.push(p));
        writer.join().unwrap();
        assert!(
            seen == [(0, 5)] || seen == [(0, 3), (0, 5)] || seen == [(0, 3)],
            "a torn or unordered view: {seen:?}"
        );
        assert_eq!(m.len(), 1);
        assert!(m.contains((0, 3)));
    });
}
