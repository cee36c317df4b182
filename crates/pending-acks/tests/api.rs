//! One test per operation and edge case of the pending-acks contract.
#![cfg(not(feature = "loom"))]

mod common;

use std::collections::HashMap;

use common::{ack, Ev, Recorder, VetoMultiples};
use pending_acks::{
    AddOutcome, AddRefused, Arc, PendingAcks, RemainingError, RemovalCause, RemoveHandler,
};

type Map = PendingAcks<(u64, u64), u32>;

fn map_with_recorder() -> (Map, Arc<Recorder>) {
    let m = Map::new(7);
    let r = Arc::new(Recorder::default());
    m.set_remove_handler(r.clone());
    (m, r)
}

fn removed(pos: (u64, u64), a: pending_acks::PendingAck, cause: RemovalCause, closing: bool) -> Ev {
    Ev::Removed {
        consumer: 7,
        pos,
        ack: a,
        cause,
        closing,
    }
}

#[test]
fn add_then_get_contains_len() {
    let m = Map::new(1);
    assert!(m.is_empty());
    assert_eq!(m.add_if_allowed((3, 4), 2, 99), Ok(AddOutcome::Inserted));
    assert_eq!(m.get((3, 4)), Some(ack(2, 99)));
    assert!(m.contains((3, 4)));
    assert!(!m.contains((3, 5)));
    assert_eq!(m.get((4, 4)), None);
    assert_eq!(m.len(), 1);
    assert!(!m.is_empty());
    assert_eq!(m.consumer(), 1);
    assert!(!m.is_closed());
}

#[test]
fn re_adding_a_position_replaces_it_without_a_removal() {
    let (m, r) = map_with_recorder();
    m.add_if_allowed((1, 1), 1, 10).unwrap();
    assert_eq!(
        m.add_if_allowed((1, 1), 3, 11),
        Ok(AddOutcome::Replaced(ack(1, 10)))
    );
    assert_eq!(m.get((1, 1)), Some(ack(3, 11)));
    assert_eq!(m.len(), 1);
    assert!(r.take().is_empty(), "an overwrite is not a removal");
}

#[test]
fn add_handler_veto_refuses_and_sees_consumer_position_and_hash() {
    let m = Map::new(5);
    let v = Arc::new(VetoMultiples::new(2));
    m.set_add_handler(v.clone());
    assert_eq!(m.add_if_allowed((1, 1), 1, 4), Err(AddRefused::Vetoed));
    assert_eq!(m.add_if_allowed((1, 2), 1, 3), Ok(AddOutcome::Inserted));
    assert!(!m.contains((1, 1)));
    assert_eq!(m.len(), 1);
    assert_eq!(*v.calls.lock().unwrap(), [(5, (1, 1), 4), (5, (1, 2), 3)]);
    // A vetoed re-add keeps the old value.
    assert_eq!(m.add_if_allowed((1, 2), 1, 8), Err(AddRefused::Vetoed));
    assert_eq!(m.get((1, 2)), Some(ack(1, 3)));
}

#[test]
fn closed_map_refuses_every_add_forever_without_asking_the_handler() {
    let m = Map::new(5);
    let v = Arc::new(VetoMultiples::new(1_000_000));
    m.set_add_handler(v.clone());
    m.add_if_allowed((1, 1), 1, 1).unwrap();
    assert_eq!(m.for_each_and_close(|_, _| {}), 1);
    let calls_before = v.calls.lock().unwrap().len();
    for i in 0..100 {
        assert_eq!(m.add_if_allowed((2, i), 1, 1), Err(AddRefused::Closed));
    }
    assert_eq!(v.calls.lock().unwrap().len(), calls_before);
    assert!(m.is_closed());
    assert!(m.is_empty());
    assert_eq!(
        m.for_each_and_close(|_, _| {}),
        0,
        "closing again removes nothing"
    );
    assert_eq!(m.for_each_and_clear(RemovalCause::Acked, |_, _| {}), 0);
    assert_eq!(m.add_if_allowed((9, 9), 1, 1), Err(AddRefused::Closed));
}

#[test]
fn refusals_are_typed_errors_with_lowercase_messages() {
    assert_eq!(AddRefused::Closed.to_string(), "pending-acks map is closed");
    assert_eq!(
        AddRefused::Vetoed.to_string(),
        "add handler vetoed the entry"
    );
}

#[test]
fn try_update_remaining_reports_an_over_ack_apart_from_an_exact_ack() {
    let (m, r) = map_with_recorder();
    m.add_if_allowed((1, 1), 5, 9).unwrap();
    m.add_if_allowed((1, 2), 2, 8).unwrap();
    assert_eq!(m.try_update_remaining((1, 1), 2), Ok(3));
    assert_eq!(m.try_update_remaining((1, 1), 0), Ok(3));
    // 4 > 3: an over-ack, reported with the count still stored; nothing changes.
    assert_eq!(
        m.try_update_remaining((1, 1), 4),
        Err(RemainingError::Underflow {
            remaining: 3,
            acked_delta: 4
        })
    );
    assert_eq!(m.get((1, 1)), Some(ack(3, 9)), "left unchanged");
    // The exact final ack is `Ok(0)`, distinguishable from the over-ack above.
    assert_eq!(m.try_update_remaining((1, 1), 3), Ok(0));
    assert_eq!(
        m.try_update_remaining((1, 1), 1),
        Err(RemainingError::Underflow {
            remaining: 0,
            acked_delta: 1
        })
    );
    assert_eq!(m.get((1, 1)), Some(ack(0, 9)), "never removed, hash kept");
    assert_eq!(
        m.try_update_remaining((1, 2), u32::MAX),
        Err(RemainingError::Underflow {
            remaining: 2,
            acked_delta: u32::MAX
        })
    );
    assert_eq!(
        m.try_update_remaining((1, 3), 1),
        Err(RemainingError::Absent)
    );
    assert_eq!(
        m.try_update_remaining((2, 1), 0),
        Err(RemainingError::Absent)
    );
    assert_eq!(
        RemainingError::Underflow {
            remaining: 1,
            acked_delta: 2
        }
        .to_string(),
        "over-ack: 2 messages acked but only 1 remain"
    );
    assert_eq!(m.len(), 2);
    assert!(r.take().is_empty(), "no handler call");
}

#[test]
fn update_remaining_saturates_never_removes_and_ignores_absent() {
    let (m, r) = map_with_recorder();
    m.add_if_allowed((1, 1), 5, 9).unwrap();
    assert_eq!(m.update_remaining((1, 1), 2), Some(3));
    assert_eq!(m.update_remaining((1, 1), 0), Some(3));
    assert_eq!(m.update_remaining((1, 1), 10), Some(0));
    assert_eq!(m.update_remaining((1, 1), 1), Some(0));
    assert_eq!(m.get((1, 1)), Some(ack(0, 9)), "stays at 0, hash kept");
    assert_eq!(m.update_remaining((1, 2), 1), None);
    assert_eq!(m.update_remaining((2, 1), 1), None);
    assert_eq!(m.len(), 1);
    assert!(r.take().is_empty());
}

#[test]
fn remove_reports_once_with_cause_and_absent_is_a_silent_no_op() {
    let (m, r) = map_with_recorder();
    m.add_if_allowed((1, 1), 2, 9).unwrap();
    assert_eq!(m.remove((1, 1), RemovalCause::Nacked), Some(ack(2, 9)));
    assert_eq!(
        m.remove((1, 1), RemovalCause::Acked),
        None,
        "double removal"
    );
    assert_eq!(m.remove((8, 8), RemovalCause::Acked), None, "never added");
    assert_eq!(
        r.take(),
        [removed((1, 1), ack(2, 9), RemovalCause::Nacked, false)]
    );
    assert!(m.is_empty());
}

#[test]
fn remove_if_matches_needs_the_exact_value() {
    let (m, r) = map_with_recorder();
    m.add_if_allowed((1, 1), 2, 9).unwrap();
    let c = RemovalCause::RedeliveryRequested;
    assert!(
        !m.remove_if_matches((1, 1), ack(1, 9), c),
        "remaining differs"
    );
    assert!(!m.remove_if_matches((1, 1), ack(2, 8), c), "hash differs");
    assert!(!m.remove_if_matches((1, 2), ack(2, 9), c), "absent");
    assert!(r.take().is_empty());
    assert_eq!(m.get((1, 1)), Some(ack(2, 9)));
    assert!(m.remove_if_matches((1, 1), ack(2, 9), c));
    assert!(!m.remove_if_matches((1, 1), ack(2, 9), c), "already gone");
    assert_eq!(r.take(), [removed((1, 1), ack(2, 9), c, false)]);
}

#[test]
fn remove_all_up_to_is_inclusive_ascending_across_segments_and_bracketed() {
    let (m, r) = map_with_recorder();
    // Inserted out of order, across three segments.
    for p in [(3, 0), (1, 5), (2, 7), (1, 2), (2, 0), (2, 8), (0, 9)] {
        m.add_if_allowed(p, 1, (p.0 * 10 + p.1) as u32).unwrap();
    }
    let rr = r.clone();
    let n = m.remove_all_up_to((2, 7), RemovalCause::MarkDeleteAdvanced, |p, _| {
        rr.push(Ev::Callback(p));
    });
    assert_eq!(n, 5);
    let c = RemovalCause::MarkDeleteAdvanced;
    let mut want = vec![Ev::Start];
    for p in [(0, 9), (1, 2), (1, 5), (2, 0), (2, 7)] {
        want.push(removed(p, ack(1, (p.0 * 10 + p.1) as u32), c, false));
        want.push(Ev::Callback(p));
    }
    want.push(Ev::End);
    assert_eq!(
        r.take(),
        want,
        "handler then callback, ascending, inside one batch"
    );
    let mut left = Vec::new();
    m.for_each(|p, _| left.push(p));
    assert_eq!(left, [(2, 8), (3, 0)]);
}

#[test]
fn remove_all_up_to_with_nothing_below_has_no_brackets() {
    let (m, r) = map_with_recorder();
    assert_eq!(
        m.remove_all_up_to((9, 9), RemovalCause::Acked, |_, _| {}),
        0
    );
    m.add_if_allowed((5, 5), 1, 1).unwrap();
    assert_eq!(
        m.remove_all_up_to((5, 4), RemovalCause::Acked, |_, _| {}),
        0
    );
    assert_eq!(
        m.remove_all_up_to((4, u64::MAX), RemovalCause::Acked, |_, _| {}),
        0
    );
    assert!(r.take().is_empty());
    assert_eq!(
        m.remove_all_up_to((5, 5), RemovalCause::Acked, |_, _| {}),
        1
    );
    assert_eq!(r.take().len(), 3);
}

#[test]
fn for_each_is_ascending_and_leaves_the_map_alone() {
    let (m, r) = map_with_recorder();
    let ps = [(2, 1), (0, u64::MAX), (2, 0), (1, 3), (0, 0), (1_000, 1)];
    for p in ps {
        m.add_if_allowed(p, 1, 1).unwrap();
    }
    let mut seen = Vec::new();
    m.for_each(|p, a| seen.push((p, a)));
    let mut sorted = ps.to_vec();
    sorted.sort();
    assert_eq!(seen.iter().map(|s| s.0).collect::<Vec<_>>(), sorted);
    assert_eq!(m.len(), ps.len());
    assert!(r.take().is_empty());
}

#[test]
fn for_each_and_clear_calls_processor_then_handler_and_keeps_the_map_open() {
    let (m, r) = map_with_recorder();
    assert_eq!(
        m.for_each_and_clear(RemovalCause::RedeliveryRequested, |_, _| {}),
        0
    );
    assert!(r.take().is_empty(), "no brackets when nothing is removed");
    m.add_if_allowed((1, 1), 1, 3).unwrap();
    m.add_if_allowed((0, 4), 2, 4).unwrap();
    let rr = r.clone();
    let c = RemovalCause::RedeliveryRequested;
    assert_eq!(m.for_each_and_clear(c, |p, _| rr.push(Ev::Callback(p))), 2);
    assert_eq!(
        r.take(),
        [
            Ev::Start,
            Ev::Callback((0, 4)),
            removed((0, 4), ack(2, 4), c, false),
            Ev::Callback((1, 1)),
            removed((1, 1), ack(1, 3), c, false),
            Ev::End
        ]
    );
    assert!(m.is_empty());
    assert!(!m.is_closed());
    assert_eq!(m.add_if_allowed((1, 1), 1, 3), Ok(AddOutcome::Inserted));
}

#[test]
fn for_each_and_close_reports_consumer_closed_with_closing_true() {
    let (m, r) = map_with_recorder();
    m.add_if_allowed((1, 1), 1, 3).unwrap();
    m.add_if_allowed((1, 0), 1, 2).unwrap();
    let mut seen = Vec::new();
    assert_eq!(m.for_each_and_close(|p, a| seen.push((p, a))), 2);
    assert_eq!(seen, [((1, 0), ack(1, 2)), ((1, 1), ack(1, 3))]);
    let c = RemovalCause::ConsumerClosed;
    assert_eq!(
        r.take(),
        [
            Ev::Start,
            removed((1, 0), ack(1, 2), c, true),
            removed((1, 1), ack(1, 3), c, true),
            Ev::End
        ]
    );
    assert!(m.is_closed());
    assert!(m.is_empty());
    assert_eq!(m.remove((1, 1), RemovalCause::Acked), None);
}

#[test]
fn closing_an_empty_map_closes_it_without_brackets() {
    let (m, r) = map_with_recorder();
    assert_eq!(m.for_each_and_close(|_, _| {}), 0);
    assert!(m.is_closed());
    assert!(r.take().is_empty());
}

#[test]
fn every_cause_is_reported_exactly_once() {
    let (m, r) = map_with_recorder();
    for e in 0..7 {
        m.add_if_allowed((1, e), 1, e as u32).unwrap();
    }
    m.remove((1, 0), RemovalCause::Acked);
    m.remove((1, 1), RemovalCause::Nacked);
    assert!(m.remove_if_matches((1, 2), ack(1, 2), RemovalCause::RedeliveryRequested));
    m.remove_all_up_to((1, 3), RemovalCause::MarkDeleteAdvanced, |_, _| {});
    m.for_each_and_clear(RemovalCause::Acked, |p, _| {
        assert!(p == (1, 4) || p == (1, 5) || p == (1, 6));
    });
    m.add_if_allowed((2, 0), 1, 9).unwrap();
    m.for_each_and_close(|_, _| {});
    let mut per_pos: HashMap<(u64, u64), Vec<RemovalCause>> = HashMap::new();
    for e in r.take() {
        if let Ev::Removed { pos, cause, .. } = e {
            per_pos.entry(pos).or_default().push(cause);
        }
    }
    use RemovalCause::*;
    let want = [
        ((1, 0), Acked),
        ((1, 1), Nacked),
        ((1, 2), RedeliveryRequested),
        ((1, 3), MarkDeleteAdvanced),
        ((1, 4), Acked),
        ((1, 5), Acked),
        ((1, 6), Acked),
        ((2, 0), ConsumerClosed),
    ];
    assert_eq!(per_pos.len(), want.len());
    for (p, c) in want {
        assert_eq!(per_pos[&p], [c], "position {p:?}");
    }
}

#[test]
fn a_replaced_remove_handler_no_longer_hears_removals() {
    let (m, old) = map_with_recorder();
    let new = Arc::new(Recorder::default());
    m.add_if_allowed((1, 1), 1, 1).unwrap();
    m.set_remove_handler(new.clone());
    m.remove((1, 1), RemovalCause::Acked);
    assert!(old.take().is_empty());
    assert_eq!(new.take().len(), 1);
}

#[test]
fn works_without_handlers() {
    let m = Map::new(0);
    for e in 0..10 {
        m.add_if_allowed((0, e), 1, 0).unwrap();
    }
    assert_eq!(m.remove((0, 3), RemovalCause::Acked), Some(ack(1, 0)));
    assert_eq!(
        m.remove_all_up_to((0, 5), RemovalCause::Acked, |_, _| {}),
        5
    );
    assert_eq!(m.for_each_and_clear(RemovalCause::Nacked, |_, _| {}), 4);
    assert!(m.is_empty());
}

#[test]
fn plain_u64_positions_are_one_segment() {
    let m: PendingAcks<u64, &'static str> = PendingAcks::new("c");
    for p in [5u64, 1, 3, u64::MAX, 0] {
        m.add_if_allowed(p, 1, 1).unwrap();
    }
    let mut seen = Vec::new();
    m.for_each(|p, _| seen.push(p));
    assert_eq!(seen, [0, 1, 3, 5, u64::MAX]);
    assert_eq!(m.remove_all_up_to(3, RemovalCause::Acked, |_, _| {}), 3);
    assert_eq!(m.consumer(), "c");
    assert!(m.contains(u64::MAX));
}

#[test]
fn extreme_values_round_trip() {
    let m = Map::new(0);
    let big = ack(u32::MAX, u32::MAX);
    m.add_if_allowed((u64::MAX, u64::MAX), u32::MAX, u32::MAX)
        .unwrap();
    m.add_if_allowed((u64::MAX, 0), 0, 0).unwrap();
    m.add_if_allowed((0, 0), u32::MAX, u32::MAX).unwrap();
    assert_eq!(m.get((u64::MAX, u64::MAX)), Some(big));
    assert_eq!(m.get((u64::MAX, 0)), Some(ack(0, 0)));
    assert_eq!(m.get((0, 0)), Some(big));
    let mut n = 0;
    assert_eq!(
        m.remove_all_up_to((u64::MAX, u64::MAX), RemovalCause::Acked, |_, _| n += 1),
        3
    );
    assert_eq!(n, 3);
}

#[test]
fn memory_shrinks_after_removals() {
    let m = Map::new(0);
    for i in 0..200_000u64 {
        m.add_if_allowed((i / 10_000, i % 10_000), 1, 1).unwrap();
    }
    let full = m.memory_bytes();
    assert!(
        full >= 200_000 * 8,
        "{full} counts at least the 8-byte slots"
    );
    assert!(
        full <= 200_000 * 12,
        "{full} bytes for 200k ascending entries"
    );
    m.remove_all_up_to((18, 9_999), RemovalCause::Acked, |_, _| {});
    let after_bulk = m.memory_bytes();
    assert!(after_bulk < full / 10, "{after_bulk} vs {full}");
    for e in 0..9_990 {
        m.remove((19, e), RemovalCause::Acked);
    }
    assert_eq!(m.len(), 10);
    assert!(m.memory_bytes() < 2_000, "{}", m.memory_bytes());
    m.for_each_and_clear(RemovalCause::Acked, |_, _| {});
    assert!(m.memory_bytes() < 200, "{}", m.memory_bytes());
}

struct Panicky;
impl RemoveHandler<(u64, u64), u32> for Panicky {
    fn on_removed(
        &self,
        _: u32,
        pos: (u64, u64),
        _: pending_acks::PendingAck,
        _: RemovalCause,
        _: bool,
    ) {
        if pos.1 == 1 {
            panic!("handler failure at {pos:?}");
        }
    }
}

#[test]
fn a_panicking_handler_leaves_a_consistent_usable_map() {
    let m = Map::new(0);
    m.set_remove_handler(Arc::new(Panicky));
    for e in 0..3 {
        m.add_if_allowed((0, e), 1, 1).unwrap();
    }
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        m.remove_all_up_to((0, 2), RemovalCause::Acked, |_, _| {})
    }));
    assert!(r.is_err());
    // (0,0) and (0,1) were removed (and reported, the second one panicking); (0,2) remains.
    assert_eq!(m.len(), 1);
    assert_eq!(m.get((0, 2)), Some(ack(1, 1)));
    m.set_remove_handler(Arc::new(Recorder::default()));
    assert_eq!(m.add_if_allowed((0, 3), 1, 1), Ok(AddOutcome::Inserted));
    assert_eq!(m.for_each_and_clear(RemovalCause::Acked, |_, _| {}), 2);
    assert!(m.is_empty());
}

#[test]
fn is_send_and_sync_and_shared_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Map>();
    let m = Arc::new(Map::new(0));
    let r = Arc::new(Recorder::default());
    m.set_remove_handler(r.clone());
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let m = m.clone();
            std::thread::spawn(move || {
                for e in 0..1_000 {
                    m.add_if_allowed((t, e), 1, 1).unwrap();
                }
                for e in (0..1_000).step_by(2) {
                    assert!(m.remove((t, e), RemovalCause::Acked).is_some());
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(m.len(), 2_000);
    assert_eq!(m.for_each_and_close(|_, _| {}), 2_000);
    let removals = r
        .take()
        .into_iter()
        .filter(|e| matches!(e, Ev::Removed { .. }))
        .count();
    assert_eq!(removals, 4_000);
}

#[test]
fn debug_shows_the_summary() {
    let m = Map::new(3);
    m.add_if_allowed((0, 0), 1, 1).unwrap();
    let s = format!("{m:?}");
    assert!(
        s.contains("consumer: 3") && s.contains("len: 1") && s.contains("closed: false"),
        "{s}"
    );
}

#[test]
fn add_if_check_decides_instead_of_the_handler_and_sees_the_arguments() {
    let m = Map::new(7);
    m.set_add_handler(Arc::new(VetoMultiples::new(1))); // the handler would veto everything
    let mut seen = None;
    let r = m.add_if((1, 2), 3, 40, |c, p, h| {
        seen = Some((c, p, h));
        true
    });
    assert_eq!(r, Ok(AddOutcome::Inserted));
    assert_eq!(seen, Some((7, (1, 2), 40)));
    assert_eq!(
        m.add_if((1, 3), 1, 40, |_, _, _| false),
        Err(AddRefused::Vetoed)
    );
    assert!(!m.contains((1, 3)));
    m.for_each_and_close(|_, _| {});
    assert_eq!(
        m.add_if((1, 4), 1, 40, |_, _, _| true),
        Err(AddRefused::Closed)
    );
}
