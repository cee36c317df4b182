use super::*;
use crate::{EntryMeta, InMemoryLedger, MemoryStore, StoreError};

fn pos(l: u64, e: u64) -> Position {
    Position::new(l, e)
}

/// A ledger of `n` single-message entries of 10 bytes, publish time = 100 + index, rolling
/// every `per` entries.
fn ledger(n: u64, per: u64) -> (InMemoryLedger, Vec<Position>) {
    let mut l = InMemoryLedger::new(per);
    let ps = (0..n)
        .map(|i| l.append(EntryMeta::simple(100 + i, 10)))
        .collect();
    (l, ps)
}

fn cursor(l: &InMemoryLedger) -> ManagedCursor<MemoryStore> {
    ManagedCursor::new("c", l, MemoryStore::new())
}

fn ok<L: Ledger>(c: &ManagedCursor<MemoryStore>, l: &L) {
    c.check_invariants(l).expect("invariants hold");
}

#[test]
fn fresh_cursor_sits_before_the_first_entry() {
    let (l, ps) = ledger(3, 100);
    let c = cursor(&l);
    assert_eq!(c.mark_delete_position(), pos(0, u64::MAX));
    assert_eq!(c.mark_delete_position().next(), ps[0]);
    assert_eq!(c.read_position(), ps[0]);
    assert_eq!(
        c.backlog(&l),
        Backlog {
            entries: 3,
            messages: 3,
            bytes: 30
        }
    );
    assert!(c.has_more_entries(&l));
    ok(&c, &l);
}

#[test]
fn fresh_cursor_on_a_trimmed_ledger_starts_at_the_first_remaining_entry() {
    let (mut l, ps) = ledger(5, 100);
    l.trim_below(ps[2]);
    let c = cursor(&l);
    assert_eq!(c.mark_delete_position(), ps[1]);
    assert_eq!(c.backlog(&l).entries, 3);
    let mut empty = InMemoryLedger::new(10);
    let c = ManagedCursor::new("e", &empty, MemoryStore::new());
    assert!(!c.has_more_entries(&empty));
    let p = empty.append(EntryMeta::simple(1, 1));
    assert!(c.has_more_entries(&empty));
    assert_eq!(c.read_position(), p);
}

#[test]
fn ack_at_or_below_mark_delete_is_a_reported_no_op() {
    let (l, ps) = ledger(3, 100);
    let mut c = cursor(&l);
    c.ack(&l, ps[0]).unwrap();
    assert_eq!(c.mark_delete_position(), ps[0]);
    let out = c.ack(&l, ps[0]).unwrap();
    assert_eq!(
        out,
        AckOutcome {
            newly_acked: false,
            md_move: None
        }
    );
    // Even a position that never existed is fine at or below md.
    let out = c.ack(&l, pos(0, 5)).unwrap();
    assert!(!out.newly_acked);
    ok(&c, &l);
}

#[test]
fn duplicate_ack_above_mark_delete_is_a_no_op() {
    let (l, ps) = ledger(3, 100);
    let mut c = cursor(&l);
    assert!(c.ack(&l, ps[2]).unwrap().newly_acked);
    let out = c.ack(&l, ps[2]).unwrap();
    assert_eq!(
        out,
        AckOutcome {
            newly_acked: false,
            md_move: None
        }
    );
    assert_eq!(c.backlog(&l).entries, 2);
    ok(&c, &l);
}

#[test]
fn ack_reports_bad_positions_without_changing_state() {
    let (mut l, ps) = ledger(6, 3);
    let mut c = cursor(&l);
    assert!(matches!(
        c.ack(&l, pos(1, 3)),
        Err(CursorError::BeyondLedger { entries: 3, .. })
    ));
    assert!(matches!(
        c.ack(&l, pos(2, 7)),
        Err(CursorError::BeyondLedger { entries: 3, .. })
    ));
    assert!(matches!(
        c.ack(&l, pos(9, 0)),
        Err(CursorError::UnknownLedger { .. })
    ));
    let e = c.ack(&l, pos(9, 0)).unwrap_err().to_string();
    assert_eq!(e, "unknown ledger 9 (position 9:0)");
    // A trimmed entry above md (trim ran ahead of this cursor) is refused.
    l.trim_below(ps[4]);
    assert!(matches!(c.ack(&l, ps[3]), Err(CursorError::Trimmed { .. })));
    assert_eq!(c.snapshot().acked, AckSet::new());
    assert!(c.acked_set().is_empty());
}

#[test]
fn acks_advance_mark_delete_over_the_contiguous_prefix_across_ledgers() {
    let (l, ps) = ledger(7, 3); // 1:0..2, 2:0..2, 3:0
    let mut c = cursor(&l);
    for &i in &[1usize, 2, 3, 5] {
        assert_eq!(c.ack(&l, ps[i]).unwrap().md_move, None);
    }
    let mv = c.ack(&l, ps[0]).unwrap().md_move.unwrap();
    assert_eq!(mv.from, pos(0, u64::MAX));
    assert_eq!(mv.to, pos(2, 0));
    assert_eq!(mv.reason, MarkDeleteReason::Ack);
    assert!(mv.dropped.is_empty());
    let mv = c.ack(&l, ps[4]).unwrap().md_move.unwrap();
    assert_eq!((mv.from, mv.to), (pos(2, 0), pos(2, 2)));
    assert_eq!(c.read_position(), pos(2, 3));
    assert_eq!(
        c.read(&l, 10)
            .iter()
            .map(|e| e.position)
            .collect::<Vec<_>>(),
        vec![ps[6]]
    );
    ok(&c, &l);
}

#[test]
fn batch_index_acks_complete_an_entry() {
    let mut l = InMemoryLedger::new(100);
    let a = l.append(EntryMeta::simple(1, 30).with_messages(3));
    let b = l.append(EntryMeta::simple(2, 10));
    let mut c = cursor(&l);
    let out = c.ack_batch_index(&l, a, 3, &[0, 2]).unwrap();
    assert_eq!(
        out,
        AckOutcome {
            newly_acked: true,
            md_move: None
        }
    );
    assert!(!c.is_acked(a));
    assert_eq!(c.batch_acked_indexes(a), Some(vec![0, 2]));
    assert_eq!(
        c.backlog(&l),
        Backlog {
            entries: 2,
            messages: 2,
            bytes: 40
        }
    );
    // Re-acking the same indexes changes nothing.
    assert!(!c.ack_batch_index(&l, a, 3, &[2]).unwrap().newly_acked);
    // A partially acked entry is still read (the caller sends the acked indexes along).
    assert_eq!(c.read(&l, 1)[0].position, a);
    let mv = c.ack_batch_index(&l, a, 3, &[1]).unwrap().md_move.unwrap();
    assert_eq!((mv.to, mv.reason), (a, MarkDeleteReason::Ack));
    assert_eq!(c.batch_acked_indexes(a), None);
    assert!(c.is_acked(a));
    assert!(!c.ack_batch_index(&l, a, 3, &[0]).unwrap().newly_acked);
    assert_eq!(
        c.backlog(&l),
        Backlog {
            entries: 1,
            messages: 1,
            bytes: 10
        }
    );
    ok(&c, &l);
    let _ = b;
}

#[test]
fn batch_index_errors_are_typed_and_change_nothing() {
    let mut l = InMemoryLedger::new(100);
    let a = l.append(EntryMeta::simple(1, 30).with_messages(3));
    let mut c = cursor(&l);
    let e = c.ack_batch_index(&l, a, 3, &[1, 3]).unwrap_err();
    assert!(matches!(
        e,
        CursorError::BatchIndexOutOfRange {
            index: 3,
            batch_size: 3,
            ..
        }
    ));
    assert_eq!(
        e.to_string(),
        "batch index 3 out of range for batch size 3 at 1:0"
    );
    assert_eq!(
        c.batch_acked_indexes(a),
        None,
        "index 1 must not be applied"
    );
    assert!(matches!(
        c.ack_batch_index(&l, a, 4, &[0]),
        Err(CursorError::BatchSizeMismatch {
            given: 4,
            actual: 3,
            ..
        })
    ));
    assert!(matches!(
        c.ack_batch_index(&l, pos(1, 1), 3, &[0]),
        Err(CursorError::BeyondLedger { .. })
    ));
    ok(&c, &l);
}

#[test]
fn full_ack_of_a_partial_batch_clears_its_bitset() {
    let mut l = InMemoryLedger::new(100);
    let _z = l.append(EntryMeta::simple(1, 1));
    let a = l.append(EntryMeta::simple(1, 30).with_messages(3));
    let mut c = cursor(&l);
    c.ack_batch_index(&l, a, 3, &[0]).unwrap();
    assert!(c.ack(&l, a).unwrap().newly_acked);
    assert_eq!(c.batch_acked_indexes(a), None);
    assert_eq!(c.backlog(&l).messages, 1);
    ok(&c, &l);
}

#[test]
fn backwards_mark_delete_is_an_error_and_repeating_md_is_a_no_op() {
    let (l, ps) = ledger(6, 3);
    let mut c = cursor(&l);
    c.mark_delete(&l, ps[3]).unwrap().unwrap();
    c.ack(&l, ps[5]).unwrap();
    let before = c.snapshot();
    // Below md: refused, distinguishable from a repeat; nothing changes.
    assert!(c.mark_delete(&l, ps[2]).is_err(), "backwards is an error");
    assert!(matches!(
        c.mark_delete(&l, ps[0]),
        Err(CursorError::MarkDeleteBackwards { position, mark_delete })
            if position == ps[0] && mark_delete == ps[3]
    ));
    // Also for positions that do not exist (trimmed, before the first ledger).
    assert!(matches!(
        c.mark_delete(&l, pos(0, 0)),
        Err(CursorError::MarkDeleteBackwards { .. })
    ));
    assert_eq!(
        c.mark_delete(&l, ps[1]).unwrap_err().to_string(),
        "mark-delete cannot move backwards from 2:0 to 1:1"
    );
    // Exactly md: an Ok no-op.
    assert_eq!(c.mark_delete(&l, ps[3]).unwrap(), None);
    assert_eq!(c.snapshot(), before);
    ok(&c, &l);
}

#[test]
fn cumulative_mark_delete_never_moves_backwards() {
    let (l, ps) = ledger(6, 100);
    let mut c = cursor(&l);
    c.ack(&l, ps[4]).unwrap();
    let mv = c.mark_delete(&l, ps[3]).unwrap().unwrap();
    // Absorbs the acked entry that follows.
    assert_eq!((mv.to, mv.reason), (ps[4], MarkDeleteReason::CumulativeAck));
    assert!(mv.dropped.is_empty());
    assert_eq!(c.mark_delete(&l, ps[4]).unwrap(), None);
    assert_eq!(c.mark_delete_position(), ps[4]);
    assert!(matches!(
        c.mark_delete(&l, pos(1, 9)),
        Err(CursorError::BeyondLedger { .. })
    ));
    ok(&c, &l);
}

#[test]
fn skip_counts_only_unacked_entries() {
    let (l, ps) = ledger(8, 100);
    let mut c = cursor(&l);
    c.ack(&l, ps[1]).unwrap();
    c.ack(&l, ps[2]).unwrap();
    c.ack(&l, ps[5]).unwrap();
    // Skip 2 un-acked: 0 and 3 (1 and 2 are acked and not counted).
    let mv = c.skip(&l, 2).unwrap();
    assert_eq!(mv.reason, MarkDeleteReason::Skip);
    assert_eq!(mv.dropped, vec![ps[0], ps[3]]);
    assert_eq!(mv.to, ps[3]);
    assert_eq!(c.skip(&l, 0), None);
    // Skip past the end = clear: 4, 6, 7 dropped (5 acked), md at the last entry.
    let mv = c.skip(&l, 100).unwrap();
    assert_eq!(mv.dropped, vec![ps[4], ps[6], ps[7]]);
    assert_eq!(mv.to, ps[7]);
    assert_eq!(c.skip(&l, 1), None);
    assert_eq!(c.backlog(&l), Backlog::default());
    ok(&c, &l);
}

#[test]
fn skip_absorbs_acked_entries_right_after_the_target() {
    let (l, ps) = ledger(5, 100);
    let mut c = cursor(&l);
    c.ack(&l, ps[1]).unwrap();
    c.ack(&l, ps[2]).unwrap();
    let mv = c.skip(&l, 1).unwrap();
    assert_eq!((mv.to, mv.dropped.clone()), (ps[2], vec![ps[0]]));
    ok(&c, &l);
}

#[test]
fn clear_backlog_drops_every_unacked_entry() {
    let (l, ps) = ledger(5, 2);
    let mut c = cursor(&l);
    c.ack(&l, ps[2]).unwrap();
    c.ack_batch_index(&l, ps[3], 1, &[]).unwrap();
    let mv = c.clear_backlog(&l).unwrap();
    assert_eq!(mv.reason, MarkDeleteReason::ClearBacklog);
    assert_eq!(mv.dropped, vec![ps[0], ps[1], ps[3], ps[4]]);
    assert_eq!(mv.to, ps[4]);
    assert_eq!(c.clear_backlog(&l), None);
    assert!(!c.has_more_entries(&l));
    let mut empty = InMemoryLedger::new(3);
    let mut c = ManagedCursor::new("e", &empty, MemoryStore::new());
    assert_eq!(c.clear_backlog(&empty), None);
    empty.append(EntryMeta::simple(1, 1));
    assert!(c.clear_backlog(&empty).is_some());
}

#[test]
fn expire_in_the_past_and_the_future() {
    let (l, ps) = ledger(6, 100); // publish times 100..105
    let mut c = cursor(&l);
    assert_eq!(c.expire(&l, 100), None, "nothing published before 100");
    c.ack(&l, ps[1]).unwrap();
    let mv = c.expire(&l, 103).unwrap();
    assert_eq!(mv.reason, MarkDeleteReason::Expiry);
    assert_eq!(mv.dropped, vec![ps[0], ps[2]]);
    assert_eq!(mv.to, ps[2]);
    assert_eq!(c.expire(&l, 103), None);
    // A time in the future expires everything.
    let mv = c.expire(&l, u64::MAX).unwrap();
    assert_eq!(mv.to, ps[5]);
    assert_eq!(mv.dropped, vec![ps[3], ps[4], ps[5]]);
    ok(&c, &l);
}

#[test]
fn expire_stops_at_the_first_unexpired_entry() {
    let mut l = InMemoryLedger::new(100);
    let a = l.append(EntryMeta::simple(10, 1));
    let _b = l.append(EntryMeta::simple(50, 1));
    let _c = l.append(EntryMeta::simple(20, 1)); // out-of-order publish time is not expired past b
    let mut c = cursor(&l);
    let mv = c.expire(&l, 30).unwrap();
    assert_eq!((mv.to, mv.dropped), (a, vec![a]));
}

#[test]
fn evict_by_size_count_and_age() {
    let mut l = InMemoryLedger::new(4);
    let ps: Vec<Position> = (0..6)
        .map(|i| l.append(EntryMeta::simple(1000 + i * 100, 10).with_messages(2)))
        .collect();
    let mut c = cursor(&l);
    c.ack(&l, ps[1]).unwrap();
    assert_eq!(
        c.backlog(&l),
        Backlog {
            entries: 5,
            messages: 10,
            bytes: 50
        }
    );
    assert_eq!(c.evict_to_size(&l, 50), None);
    // 50 bytes -> at most 25: drop 0, (1 acked), 2, 3 → 20 bytes left.
    let mv = c.evict_to_size(&l, 25).unwrap();
    assert_eq!(mv.reason, MarkDeleteReason::BacklogQuota);
    assert_eq!(mv.dropped, vec![ps[0], ps[2], ps[3]]);
    assert_eq!(c.backlog(&l).bytes, 20);
    // Count: 3 messages left (one index of 5 acked); keep at most 1 → drop 4 only.
    c.ack_batch_index(&l, ps[5], 2, &[0]).unwrap();
    assert_eq!(c.backlog(&l).messages, 3);
    let mv = c.evict_to_count(&l, 1).unwrap();
    assert_eq!(mv.dropped, vec![ps[4]]);
    assert_eq!(c.backlog(&l).messages, 1);
    let mv = c.evict_to_count(&l, 0).unwrap();
    assert_eq!(
        mv.dropped,
        vec![ps[5]],
        "a partial batch that is passed is dropped"
    );
    assert_eq!(c.backlog(&l), Backlog::default());
    ok(&c, &l);

    let mut c = cursor(&l);
    assert_eq!(c.evict_older_than(&l, 100, 1000), None, "now < max age");
    assert_eq!(
        c.evict_older_than(&l, 2000, 1000),
        None,
        "nothing older than 1000"
    );
    let mv = c.evict_older_than(&l, 2250, 1000).unwrap();
    assert_eq!(mv.reason, MarkDeleteReason::BacklogQuota);
    assert_eq!(mv.dropped, vec![ps[0], ps[1], ps[2]]);
    ok(&c, &l);
}

#[test]
fn evict_by_count_exact_fit_keeps_the_rest() {
    let (l, ps) = ledger(5, 100);
    let mut c = cursor(&l);
    let mv = c.evict_to_count(&l, 3).unwrap();
    assert_eq!(mv.dropped, vec![ps[0], ps[1]]);
    assert_eq!(c.backlog(&l).messages, 3);
}

#[test]
fn reset_clears_holes_and_moves_both_ways() {
    let (l, ps) = ledger(8, 3);
    let mut c = cursor(&l);
    c.ack(&l, ps[0]).unwrap();
    c.ack(&l, ps[3]).unwrap();
    c.ack_batch_index(&l, ps[5], 1, &[]).unwrap();
    c.ack(&l, ps[6]).unwrap();
    // Forward: md = just before ps[5] = 2:1; drops 1, 2, 4 (3 acked).
    let mv = c.reset(&l, ps[5]).unwrap();
    assert_eq!(mv.reason, MarkDeleteReason::Reset);
    assert_eq!((mv.from, mv.to), (ps[0], ps[4]));
    assert_eq!(mv.dropped, vec![ps[1], ps[2], ps[4]]);
    assert_eq!(c.read_position(), ps[5]);
    // Holes above are gone: 6 is no longer acked.
    assert!(!c.is_acked(ps[6]));
    assert_eq!(c.backlog(&l).entries, 3);
    // Backward to the very beginning.
    let mv = c.reset(&l, ps[0]).unwrap();
    assert_eq!((mv.from, mv.to), (ps[4], pos(0, u64::MAX)));
    assert!(mv.dropped.is_empty());
    assert_eq!(c.read(&l, 100).len(), 8);
    // Reset to the end of a ledger (just after its last entry) is allowed.
    let mv = c.reset(&l, pos(3, 2)).unwrap();
    assert_eq!(mv.to, ps[7]);
    assert!(!c.has_more_entries(&l));
    assert!(matches!(
        c.reset(&l, pos(1, 4)),
        Err(CursorError::BeyondLedger { .. })
    ));
    ok(&c, &l);
}

#[test]
fn reset_outside_the_log_clamps_and_keeps_the_invariants() {
    let (mut l, ps) = ledger(8, 3);
    let mut c = cursor(&l);
    c.ack(&l, ps[0]).unwrap();
    c.ack(&l, ps[2]).unwrap();
    // Before the first entry: everything becomes backlog.
    let mv = c.reset(&l, pos(0, 0)).unwrap();
    ok(&c, &l);
    assert_eq!((mv.from, mv.to), (ps[0], l.before_first()));
    assert_eq!(c.read_position(), ps[0]);
    assert_eq!(c.backlog(&l).entries, 8);
    assert_eq!(c.read(&l, 100).len(), 8);
    // Past the end: clamped to the end, nothing left.
    let mv = c.reset(&l, pos(3, 3)).unwrap();
    ok(&c, &l);
    assert_eq!(mv.to, ps[7]);
    assert_eq!(mv.dropped, ps.clone());
    assert_eq!(c.read_position(), ps[7].next());
    assert_eq!(c.backlog(&l).entries, 0);
    for far in [pos(7, 0), pos(3, u64::MAX), pos(u64::MAX, u64::MAX)] {
        let mv = c.reset(&l, far).unwrap();
        assert_eq!((mv.to, c.read_position()), (ps[7], pos(3, 2)), "{far}");
        ok(&c, &l);
    }
    // Into the trimmed prefix: clamped to the first entry that still exists.
    c.reset(&l, ps[5]).unwrap();
    l.trim_below(ps[5]);
    let mv = c.reset(&l, ps[1]).unwrap();
    ok(&c, &l);
    assert_eq!((mv.to, c.read_position()), (ps[4], ps[5]));
    assert_eq!(c.backlog(&l).entries, 3);
    // With no entry at all: md stays before the (future) first entry.
    l.trim_below(pos(9, 0));
    let mv = c.reset(&l, pos(0, 0)).unwrap();
    ok(&c, &l);
    assert_eq!(mv.to, l.before_first());
    let mv = c.reset(&l, pos(99, 0)).unwrap();
    assert_eq!(mv.to, l.before_first());
    ok(&c, &l);
}

#[test]
fn next_read_position_is_the_next_entry_neither_acked_nor_past_the_end() {
    let mut l = InMemoryLedger::new(2);
    let ps: Vec<Position> = (0..5)
        .map(|i| l.append(EntryMeta::simple(100 + i, 10)))
        .collect();
    let mut c = cursor(&l);
    assert_eq!(c.next_read_position(&l), ps[0]);
    // A read leaves the raw position on the next entry (2:0); a raw position past the end of
    // ledger 1 (set by a seek) reads as 2:0 too.
    c.read(&l, 2);
    assert_eq!(c.read_position(), pos(2, 0));
    c.seek(&l, pos(1, 2));
    assert_eq!(c.read_position(), pos(1, 2));
    assert_eq!(c.next_read_position(&l), pos(2, 0));
    // Acked entries at the read position are skipped (a partial batch is not).
    c.ack(&l, ps[2]).unwrap();
    c.ack(&l, ps[3]).unwrap();
    assert_eq!(c.next_read_position(&l), ps[4]);
    // Nothing left: the position right after the last entry.
    c.ack(&l, ps[4]).unwrap();
    assert_eq!(c.next_read_position(&l), ps[4].next());
    // New entries appear in a new ledger: found without any cursor call.
    l.roll_over();
    let p5 = l.append(EntryMeta::simple(200, 10));
    assert_eq!(c.next_read_position(&l), p5);
    // Above mark-delete even when md covers everything and the log is trimmed.
    c.mark_delete(&l, p5).unwrap();
    l.trim_below(p5.next());
    assert_eq!(c.next_read_position(&l), p5.next());
    assert!(c.next_read_position(&l) > c.mark_delete_position());
    ok(&c, &l);
    // A fresh cursor over an empty log: right after before_first.
    let e = InMemoryLedger::new(2);
    assert_eq!(cursor(&e).next_read_position(&e), pos(1, 0));
}

#[test]
fn open_at_latest_or_earliest() {
    let (mut l, ps) = ledger(5, 2);
    let c = ManagedCursor::new_at("e", &l, MemoryStore::new(), InitialPosition::Earliest);
    let fresh = cursor(&l);
    assert_eq!(
        (c.mark_delete_position(), c.read_position()),
        (fresh.mark_delete_position(), fresh.read_position())
    );
    assert_eq!(c.backlog(&l).entries, 5);
    let mut c = ManagedCursor::new_at("l", &l, MemoryStore::new(), InitialPosition::Latest);
    ok(&c, &l);
    assert_eq!(c.mark_delete_position(), ps[4]);
    assert_eq!(c.backlog(&l).entries, 0);
    assert!(c.read(&l, 10).is_empty());
    let p = l.append(EntryMeta::simple(500, 10));
    assert_eq!(c.read(&l, 10).len(), 1);
    assert_eq!(c.ack(&l, p).unwrap().md_move.map(|m| m.to), Some(p));
    // Over an empty log, Latest is Earliest.
    let e = InMemoryLedger::new(2);
    let c = ManagedCursor::new_at("x", &e, MemoryStore::new(), InitialPosition::Latest);
    assert_eq!(c.mark_delete_position(), e.before_first());
    ok(&c, &e);
}

#[test]
fn seek_moves_only_the_read_position() {
    let (l, ps) = ledger(8, 3);
    let mut c = cursor(&l);
    c.ack(&l, ps[0]).unwrap();
    c.ack(&l, ps[3]).unwrap();
    c.read(&l, 10);
    let before = (c.snapshot(), c.backlog(&l));
    // Back to 1:2: the same entries are read again, acked ones still skipped.
    assert_eq!(c.seek(&l, ps[2]), ps[2]);
    assert_eq!((c.snapshot(), c.backlog(&l)), before);
    let again: Vec<Position> = c.read(&l, 3).iter().map(|e| e.position).collect();
    assert_eq!(again, vec![ps[2], ps[4], ps[5]]);
    // At or below md: just after md. Past the end: right after the last entry.
    assert_eq!(c.seek(&l, pos(0, 0)), ps[1]);
    assert_eq!(c.seek(&l, pos(9, 9)), ps[7].next());
    assert!(!c.has_more_entries(&l));
    ok(&c, &l);
}

#[test]
fn reset_to_publish_time_finds_the_first_entry_at_or_after_t() {
    // Publish times 100..=107.
    let (l, ps) = ledger(8, 3);
    let mut c = cursor(&l);
    c.ack(&l, ps[6]).unwrap();
    let mv = c.reset_to_publish_time(&l, 103).unwrap();
    assert_eq!((mv.to, c.read_position()), (ps[3].before(), ps[3]));
    assert_eq!(mv.dropped, vec![ps[0], ps[1], ps[2]]);
    assert!(!c.is_acked(ps[6]), "acks are forgotten, as for any reset");
    // Before everything: the whole log is backlog again; after everything: the end.
    c.reset_to_publish_time(&l, 0).unwrap();
    assert_eq!(c.backlog(&l).entries, 8);
    let mv = c.reset_to_publish_time(&l, 1_000).unwrap();
    assert_eq!(mv.to, ps[7]);
    assert_eq!(c.backlog(&l).entries, 0);
    ok(&c, &l);
}

#[test]
fn rewind_goes_back_to_the_first_unacked_entry() {
    let (l, ps) = ledger(5, 100);
    let mut c = cursor(&l);
    c.ack(&l, ps[0]).unwrap();
    c.ack(&l, ps[2]).unwrap();
    assert_eq!(c.read(&l, 10).len(), 3);
    assert!(!c.has_more_entries(&l));
    c.rewind(&l);
    assert_eq!(c.read_position(), ps[1]);
    let got: Vec<_> = c.read(&l, 10).into_iter().map(|e| e.position).collect();
    assert_eq!(got, vec![ps[1], ps[3], ps[4]]);
    c.clear_backlog(&l).unwrap();
    c.rewind(&l);
    assert_eq!(c.read_position(), ps[4].next());
    ok(&c, &l);
}

#[test]
fn read_skips_acked_entries_and_advances() {
    let (l, ps) = ledger(10, 4);
    let mut c = cursor(&l);
    for i in [1, 2, 3, 4, 7] {
        c.ack(&l, ps[i]).unwrap();
    }
    let got: Vec<_> = c.read(&l, 2).into_iter().map(|e| e.position).collect();
    assert_eq!(got, vec![ps[0], ps[5]]);
    assert_eq!(c.read_position(), ps[5].next());
    let got: Vec<_> = c.read(&l, 10).into_iter().map(|e| e.position).collect();
    assert_eq!(got, vec![ps[6], ps[8], ps[9]]);
    assert!(c.read(&l, 10).is_empty());
    assert!(c.read(&l, 0).is_empty());
    ok(&c, &l);
}

#[test]
fn replay_returns_the_already_acked_subset() {
    let (l, ps) = ledger(5, 100);
    let mut c = cursor(&l);
    c.ack(&l, ps[0]).unwrap();
    c.ack(&l, ps[3]).unwrap();
    let r = c.replay(&l, &[ps[4], ps[3], ps[0], ps[1], pos(1, 99), ps[1]]);
    assert_eq!(
        r.entries.iter().map(|e| e.position).collect::<Vec<_>>(),
        vec![ps[1], ps[4]]
    );
    assert_eq!(r.already_acked, vec![ps[0], ps[3]]);
    assert_eq!(r.missing, vec![pos(1, 99)]);
    assert_eq!(
        c.read_position(),
        ps[1],
        "replay does not move the read position"
    );
}

#[test]
fn backlog_counts_entries_messages_and_bytes() {
    let mut l = InMemoryLedger::new(2);
    let a = l.append(EntryMeta::simple(1, 100).with_messages(4));
    let b = l.append(EntryMeta::simple(1, 50).with_messages(2));
    let _c = l.append(EntryMeta::simple(1, 7));
    let mut c = cursor(&l);
    assert_eq!(
        c.backlog(&l),
        Backlog {
            entries: 3,
            messages: 7,
            bytes: 157
        }
    );
    c.ack(&l, b).unwrap();
    c.ack_batch_index(&l, a, 4, &[0, 1, 2]).unwrap();
    assert_eq!(
        c.backlog(&l),
        Backlog {
            entries: 2,
            messages: 2,
            bytes: 107
        }
    );
    c.ack_batch_index(&l, a, 4, &[3]).unwrap();
    assert_eq!(
        c.backlog(&l),
        Backlog {
            entries: 1,
            messages: 1,
            bytes: 7
        }
    );
    ok(&c, &l);
}

#[test]
fn last_active_is_what_the_caller_says() {
    let (l, _) = ledger(1, 10);
    let mut c = cursor(&l);
    c.persist().unwrap();
    assert!(!c.is_dirty());
    c.set_last_active(42);
    assert!(c.is_dirty());
    assert_eq!(c.last_active(), 42);
    c.persist().unwrap();
    let c2 = ManagedCursor::recover(&l, c.store().clone()).unwrap();
    assert_eq!(c2.last_active(), 42);
    assert_eq!(c2.name(), "c");
}

#[test]
fn recover_restores_holes_batches_and_read_position() {
    let mut l = InMemoryLedger::new(3);
    let ps: Vec<Position> = (0..8)
        .map(|i| l.append(EntryMeta::simple(i, 10).with_messages(2)))
        .collect();
    let mut c = cursor(&l);
    c.ack(&l, ps[0]).unwrap();
    c.ack(&l, ps[1]).unwrap();
    c.ack(&l, ps[2]).unwrap();
    c.ack(&l, ps[4]).unwrap();
    c.ack_batch_index(&l, ps[5], 2, &[1]).unwrap();
    c.ack(&l, ps[3]).unwrap_or_else(|e| panic!("{e}"));
    c.persist().unwrap();
    let before = (c.mark_delete_position(), c.backlog(&l), c.snapshot());
    let r = ManagedCursor::recover(&l, c.store().clone()).unwrap();
    assert_eq!(
        (r.mark_delete_position(), r.backlog(&l), r.snapshot()),
        before
    );
    assert_eq!(r.read_position(), ps[5], "first un-acked entry after md");
    assert_eq!(r.batch_acked_indexes(ps[5]), Some(vec![1]));
    r.check_invariants(&l).unwrap();
}

#[test]
fn recover_errors() {
    let (l, _) = ledger(3, 10);
    assert!(matches!(
        ManagedCursor::recover(&l, MemoryStore::new()),
        Err(CursorError::NothingPersisted)
    ));
    // A state from a longer ledger does not fit a shorter one.
    let (long, lps) = ledger(10, 10);
    let mut c = cursor(&long);
    c.mark_delete(&long, lps[6]).unwrap();
    c.ack(&long, lps[8]).unwrap();
    c.persist().unwrap();
    assert!(matches!(
        ManagedCursor::recover(&l, c.store().clone()),
        Err(CursorError::StateMismatch { .. })
    ));
}

/// Runs `f` with a tracing subscriber that records WARN and above; returns `f`'s result and the
/// log text.
fn with_warnings<T>(f: impl FnOnce() -> T) -> (T, String) {
    use std::sync::{Arc, Mutex};
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let w = buf.clone();
    let sub = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_writer(move || w.clone())
        .finish();
    let out = tracing::subscriber::with_default(sub, f);
    let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    (out, text)
}

#[test]
fn recover_clamps_a_mark_delete_whose_ledger_was_trimmed() {
    let (mut l, ps) = ledger(9, 3);
    let mut c = cursor(&l);
    c.mark_delete(&l, ps[1]).unwrap();
    c.ack(&l, ps[3]).unwrap();
    c.ack(&l, ps[6]).unwrap();
    c.persist().unwrap();
    // Later acks were not persisted, but the ledger was trimmed past them: ledger 1 and 2:0 are
    // gone, so the persisted mark-delete 1:1 and the hole 2:0 name entries that no longer exist.
    l.trim_below(ps[4]);
    assert_eq!(l.entry_count(1), None);
    let store = c.store().clone();
    let recovered = ManagedCursor::recover(&l, store.clone());
    assert!(recovered.is_ok(), "{:?}", recovered.err());
    let ((r, outcome), log) =
        with_warnings(|| ManagedCursor::recover_with_outcome(&l, store).unwrap());
    assert_eq!(
        outcome,
        RecoveryOutcome::Clamped {
            stored: ps[1],
            clamped_to: ps[3],
            dropped_acks: 1
        }
    );
    assert!(log.contains("WARN"), "{log}");
    assert!(
        log.contains("stored=1:1") && log.contains("clamped_to=2:0") && log.contains("cursor=c"),
        "{log}"
    );
    assert_eq!(r.mark_delete_position(), l.before_first());
    assert_eq!(r.read_position(), ps[4]);
    assert!(r.is_acked(ps[6]), "acks above the clamp are kept");
    assert_eq!(r.backlog(&l).entries, 4);
    assert!(r.is_dirty(), "the clamped state is not in the store yet");
    ok(&r, &l);
    // recover() clamps the same way.
    assert_eq!(recovered.unwrap().snapshot(), r.snapshot());
    // An unclamped recovery says so and logs nothing.
    let (mut r, _) = ManagedCursor::recover_with_outcome(&l, c.store().clone()).unwrap();
    r.persist().unwrap();
    let ((_, outcome), log) =
        with_warnings(|| ManagedCursor::recover_with_outcome(&l, r.store().clone()).unwrap());
    assert_eq!(outcome, RecoveryOutcome::Restored);
    assert!(log.is_empty(), "{log}");
}

#[test]
fn recover_clamps_a_mark_delete_whose_ledger_was_lost() {
    // A state saved over ledgers 1..3, recovered over a log whose ledger 3 is gone.
    let (long, lps) = ledger(9, 3);
    let mut c = cursor(&long);
    c.mark_delete(&long, lps[6]).unwrap();
    c.ack(&long, lps[8]).unwrap();
    c.persist().unwrap();
    let (short, sps) = ledger(6, 3);
    let plain = ManagedCursor::recover(&short, c.store().clone());
    assert!(plain.is_ok(), "lost ledger: {:?}", plain.err());
    let (r, outcome) = ManagedCursor::recover_with_outcome(&short, c.store().clone()).unwrap();
    assert_eq!(
        outcome,
        RecoveryOutcome::Clamped {
            stored: lps[6],
            clamped_to: sps[5],
            dropped_acks: 1
        }
    );
    assert_eq!(r.mark_delete_position(), sps[5]);
    assert_eq!(r.backlog(&short).entries, 0);
    ok(&r, &short);
    // A state whose mark-delete's ledger still exists but is shorter is still refused.
    let mut c = cursor(&long);
    c.mark_delete(&long, lps[5]).unwrap();
    c.persist().unwrap();
    let (shorter, _) = ledger(4, 3);
    assert!(matches!(
        ManagedCursor::recover(&shorter, c.store().clone()),
        Err(CursorError::StateMismatch { .. })
    ));
}

/// A store that fails every save after the first `ok_saves`.
struct Flaky {
    inner: MemoryStore,
    ok_saves: u32,
}

impl CursorStore for Flaky {
    fn save(&mut self, s: &PersistedState) -> Result<(), StoreError> {
        if self.ok_saves == 0 {
            return Err(StoreError::Unavailable("injected".into()));
        }
        self.ok_saves -= 1;
        self.inner.save(s)
    }
    fn load(&mut self) -> Result<Option<PersistedState>, StoreError> {
        self.inner.load()
    }
}

#[test]
fn a_failed_persist_keeps_the_previous_state_and_stays_dirty() {
    let (l, ps) = ledger(4, 10);
    let mut c = ManagedCursor::new(
        "f",
        &l,
        Flaky {
            inner: MemoryStore::new(),
            ok_saves: 1,
        },
    );
    c.ack(&l, ps[0]).unwrap();
    c.persist().unwrap();
    c.ack(&l, ps[1]).unwrap();
    let e = c.persist().unwrap_err();
    assert!(matches!(e, CursorError::Store(StoreError::Unavailable(_))));
    assert!(c.is_dirty());
    let r = ManagedCursor::recover(&l, c.store().inner.clone()).unwrap();
    assert_eq!(r.mark_delete_position(), ps[0]);
}

#[test]
fn trim_below_the_slowest_cursor_keeps_cursors_working() {
    let (mut l, ps) = ledger(9, 3);
    let mut c = cursor(&l);
    c.ack(&l, ps[0]).unwrap();
    c.ack(&l, ps[1]).unwrap();
    c.ack(&l, ps[2]).unwrap();
    c.ack(&l, ps[3]).unwrap();
    c.ack(&l, ps[5]).unwrap();
    l.trim_below(c.mark_delete_position().next());
    assert_eq!(l.first_position(), Some(ps[4]));
    assert_eq!(c.backlog(&l).entries, 4);
    let mv = c.ack(&l, ps[4]).unwrap().md_move.unwrap();
    assert_eq!(mv.to, ps[5]);
    ok(&c, &l);
}

#[test]
fn recover_rejects_batch_bitsets_that_do_not_fit_the_entry() {
    let mut a = InMemoryLedger::new(10);
    a.append(EntryMeta::simple(1, 1));
    let p = a.append(EntryMeta::simple(1, 1).with_messages(3));
    let mut c = cursor(&a);
    c.ack_batch_index(&a, p, 3, &[1]).unwrap();
    c.persist().unwrap();
    let (b, _) = ledger(2, 10); // same positions, single-message entries
    assert!(matches!(
        ManagedCursor::recover(&b, c.store().clone()),
        Err(CursorError::StateMismatch { position, .. }) if position == p
    ));
}

#[test]
fn the_cursor_can_move_between_threads() {
    fn assert_send<T: Send>() {}
    assert_send::<ManagedCursor<MemoryStore>>();
    assert_send::<ManagedCursor<crate::FileStore>>();
}

/// Pulsar's ManagedCursor tests: after individual acks and a read of everything, the read
/// position is past the last entry, never on an acked entry; a reset to the position right after
/// a ledger's last entry lands on the next ledger's first entry.
#[test]
fn read_positions_as_pulsar_reports_them() {
    let (l, ps) = ledger(20, 100);
    let mut c = cursor(&l);
    for i in [1, 4, 5, 8, 9, 10, 15, 17, 19] {
        c.ack(&l, ps[i]).unwrap();
    }
    let got = c.read(&l, 100);
    assert_eq!(got.len(), 11);
    assert_eq!(c.read_position(), pos(1, 20), "past the acked 1:19");
    ok(&c, &l);
    // A read that stops before an acked run: the run is passed.
    let mut c = cursor(&l);
    for i in [1, 4, 5, 8, 9, 10, 15, 17, 19] {
        c.ack(&l, ps[i]).unwrap();
    }
    c.read(&l, 7); // 1:0 1:2 1:3 1:6 1:7 1:11 1:12
    assert_eq!(c.read_position(), pos(1, 13));
    c.read(&l, 1); // 1:13, then 1:14 is not acked
    assert_eq!(c.read_position(), pos(1, 14));
    c.read(&l, 2); // 1:14 1:16, then 1:17 is acked
    assert_eq!(c.read_position(), pos(1, 18));
    ok(&c, &l);

    let (l, _) = ledger(6, 3);
    let mut c = cursor(&l);
    let mv = c.reset(&l, pos(1, 3)).unwrap();
    assert_eq!((mv.to, c.read_position()), (pos(1, 2), pos(2, 0)));
    ok(&c, &l);
    // The end of the log stays the end.
    let mv = c.reset(&l, pos(2, 3)).unwrap();
    assert_eq!((mv.to, c.read_position()), (pos(2, 2), pos(2, 3)));
    ok(&c, &l);
}

/// A ledger that someone else appends to between two of the cursor's calls: the first time
/// `next_position` finds nothing after the last entry, one entry is appended right after the
/// answer (as a producer on another thread can, with a `SharedLedger`). Its `read_range` is
/// the inner ledger's, so the append lands after the read, while the cursor looks for the next
/// read position.
struct AppendsMeanwhile {
    inner: std::cell::RefCell<InMemoryLedger>,
    armed: std::cell::Cell<bool>,
}

impl Ledger for AppendsMeanwhile {
    fn append(&mut self, meta: EntryMeta) -> Position {
        self.inner.get_mut().append(meta)
    }
    fn first_position(&self) -> Option<Position> {
        self.inner.borrow().first_position()
    }
    fn last_position(&self) -> Option<Position> {
        self.inner.borrow().last_position()
    }
    fn before_first(&self) -> Position {
        self.inner.borrow().before_first()
    }
    fn next_position(&self, p: Position) -> Option<Position> {
        let next = self.inner.borrow().next_position(p);
        if next.is_none() && self.armed.replace(false) {
            self.inner.borrow_mut().append(EntryMeta::simple(1, 10));
        }
        next
    }
    fn get(&self, p: Position) -> Option<Entry> {
        self.inner.borrow().get(p)
    }
    fn read_range(&self, from: Position, max: usize) -> Vec<Entry> {
        self.inner.borrow().read_range(from, max)
    }
    fn entry_count(&self, ledger_id: u64) -> Option<u64> {
        self.inner.borrow().entry_count(ledger_id)
    }
    fn trim_below(&mut self, p: Position) {
        self.inner.get_mut().trim_below(p);
    }
}

/// An entry appended while a read works out its next read position is read next, not passed
/// (the read looks up the end before it looks for the next entry; the other order passed it).
#[test]
fn an_entry_appended_during_a_read_is_read_next() {
    for per in [2, 1_000] {
        let (inner, ps) = ledger(1, per);
        let l = AppendsMeanwhile {
            inner: std::cell::RefCell::new(inner),
            armed: std::cell::Cell::new(false),
        };
        let mut c = ManagedCursor::new("c", &l, MemoryStore::new());
        l.armed.set(true);
        let got = c.read(&l, 10);
        assert_eq!(got.iter().map(|e| e.position).collect::<Vec<_>>(), ps);
        let appended = l.last_position().unwrap();
        assert_ne!(appended, ps[0], "the ledger appended during the read");
        assert_eq!(c.next_read_position(&l), appended);
        let again = c.read(&l, 10);
        assert_eq!(
            again.iter().map(|e| e.position).collect::<Vec<_>>(),
            vec![appended],
            "entries per ledger {per}: the entry appended meanwhile is read next"
        );
        l.armed.set(true);
        assert_eq!(c.next_read_position(&l), appended.next());
        assert_eq!(
            c.read(&l, 10).len(),
            1,
            "next_read_position's look-up appended one more; the read gets it"
        );
    }
}
