//! One test (or a few) per rule of the assignor.

use super::*;
use crate::{AssignorConfig, ChunkAssignor, OrphanPolicy};

fn assignor() -> ChunkAssignor<u32> {
    ChunkAssignor::new(AssignorConfig::default())
}

fn with(orphan_policy: OrphanPolicy, max_pins: usize, max_pin_age: u64) -> ChunkAssignor<u32> {
    ChunkAssignor::new(AssignorConfig {
        orphan_policy,
        max_pins,
        max_pin_age,
    })
}

// ---- plain entries -------------------------------------------------------------------------

#[test]
fn plain_entries_round_robin_within_a_level() {
    let mut a = assignor();
    let out = a.assign(
        0,
        (1..=7).map(plain).collect(),
        &cs(&[(1, 10, 0), (2, 10, 0), (3, 10, 0)]),
    );
    assert_eq!(render(&out), "c1=[1 4 7] c2=[2 5] c3=[3 6] replay=[]");
    // The rotation continues across calls.
    let out = a.assign(
        0,
        vec![plain(8)],
        &cs(&[(1, 10, 0), (2, 10, 0), (3, 10, 0)]),
    );
    assert_eq!(render(&out), "c2=[8] replay=[]");
}

#[test]
fn a_plain_run_charges_each_pick_and_hands_over_when_the_smallest_permits_could_run_out() {
    let mut a = assignor();
    let out = a.assign(
        0,
        vec![plain(1)],
        &cs(&[(1, 10, 0), (2, 10, 0), (3, 10, 0)]),
    );
    assert_eq!(render(&out), "c1=[1] replay=[]");
    // Smallest permits 2 over 3 consumers: 6 picks from the cursor (c2) without checks, then
    // the checked loop sees c1 at 0, c3 at 1 and c2 at 3, and ends in replay.
    let out = a.assign(
        0,
        (2..=13).map(plain).collect(),
        &cs(&[(1, 2, 0), (2, 5, 0), (3, 3, 0)]),
    );
    assert_eq!(
        render(&out),
        "c1=[4 7] c2=[2 5 8 10 11] c3=[3 6 9] replay=[12 13]"
    );
    // A chunk ends the run: the rotation goes on from where the run stopped.
    let out = a.assign(
        0,
        vec![plain(14), ch(15, "u", 0, 2), plain(16), ch(17, "u", 1, 2)],
        &cs(&[(1, 10, 0), (2, 10, 0), (3, 10, 0)]),
    );
    assert_eq!(render(&out), "c1=[15 17] c2=[16] c3=[14] replay=[]");
}

#[test]
fn permits_are_exact_per_consumer() {
    let mut a = assignor();
    let consumers = cs(&[(1, 1, 0), (2, 3, 0), (3, 0, 0), (4, -5, 0)]);
    let out = a.assign(0, (1..=6).map(plain).collect(), &consumers);
    assert_eq!(sent(&out, 1).len(), 1);
    assert_eq!(sent(&out, 2).len(), 3);
    assert!(sent(&out, 3).is_empty());
    assert!(sent(&out, 4).is_empty());
    assert_eq!(replayed(&out), [5, 6]);
    assert_eq!(render(&out), "c1=[1] c2=[2 3 4] replay=[5 6]");
    assert_eq!(a.stats().entries_assigned, 4);
    assert_eq!(a.stats().entries_replayed, 2);
}

#[test]
fn no_permits_or_no_consumers_replays_everything_in_order() {
    let mut a = assignor();
    let batch = || vec![plain(1), ch(2, "m", 0, 2), ch(3, "m", 1, 2), plain(4)];
    let out = a.assign(0, batch(), &cs(&[(1, 0, 0), (2, -1, 1)]));
    assert_eq!(render(&out), "replay=[1 2 3 4]");
    let out = a.assign(0, batch(), &[]);
    assert_eq!(render(&out), "replay=[1 2 3 4]");
    assert!(out.per_consumer.is_empty());
    assert_eq!(a.pin_count(), 0, "a replayed first chunk pins nothing");
}

#[test]
fn higher_priority_level_is_used_first_then_lower_levels() {
    let mut a = assignor();
    // Level 0: consumers 2 and 3; level 1: consumer 1 (listed first, the slice is not sorted).
    let consumers = cs(&[(1, 10, 1), (2, 2, 0), (3, 1, 0)]);
    let out = a.assign(0, (1..=6).map(plain).collect(), &consumers);
    assert_eq!(render(&out), "c1=[4 5 6] c2=[1 3] c3=[2] replay=[]");
}

#[test]
fn lower_level_cursor_returns_to_a_higher_level_with_room() {
    let mut a = assignor();
    let out = a.assign(
        0,
        (1..=3).map(plain).collect(),
        &cs(&[(1, 1, 0), (2, 10, 1)]),
    );
    assert_eq!(render(&out), "c1=[1] c2=[2 3] replay=[]");
    // Consumer 1 got a permit back: it takes precedence again.
    let out = a.assign(
        0,
        (4..=5).map(plain).collect(),
        &cs(&[(1, 1, 0), (2, 10, 1)]),
    );
    assert_eq!(render(&out), "c1=[4] c2=[5] replay=[]");
}

// ---- pins ----------------------------------------------------------------------------------

#[test]
fn first_chunk_pins_later_chunks_follow_and_last_chunk_unpins() {
    let mut a = assignor();
    let consumers = cs(&[(1, 10, 0), (2, 10, 0)]);
    let out = a.assign(
        0,
        vec![plain(1), ch(2, "m", 0, 3), plain(3), ch(4, "m", 1, 3)],
        &consumers,
    );
    assert_eq!(render(&out), "c1=[1 3] c2=[2 4] replay=[]");
    assert_eq!(a.pinned("m"), Some(2));
    let out = a.assign(1, vec![ch(5, "m", 2, 3), plain(6)], &consumers);
    // Chunk 2 follows the pin; the plain entry continues the rotation (cursor on consumer 2).
    assert_eq!(render(&out), "c2=[5 6] replay=[]");
    assert_eq!(a.pinned("m"), None);
    assert_eq!(a.pin_count(), 0);
    let s = a.stats();
    assert_eq!(
        (s.pins_created, s.pins_released, s.orphan_chunks),
        (1, 1, 0)
    );
}

/// Consecutive chunks of one message follow chunk 0 without the pin table (the pin is only
/// put in when something else comes first); the outcome is the same as pin by pin: a message
/// complete in the batch leaves no pin and counts one created and one released, and one cut
/// by its consumer's permits, by another entry or by the end of the batch leaves its pin.
#[test]
fn consecutive_chunks_follow_their_first_chunk_and_a_cut_message_keeps_its_pin() {
    let mut a = assignor();
    let consumers = cs(&[(1, 2, 0), (2, 10, 0)]);
    let out = a.assign(
        0,
        vec![
            ch(1, "a", 0, 3),
            ch(2, "a", 1, 3),
            ch(3, "a", 2, 3),
            ch(4, "b", 0, 3),
            ch(5, "b", 1, 3),
            ch(6, "c", 0, 4),
            ch(7, "c", 1, 4),
        ],
        &consumers,
    );
    // "a" is cut by c1's permits (its chunk 2 waits in replay), "b" by "c", "c" by the end.
    assert_eq!(render(&out), "c1=[1 2] c2=[4 5 6 7] replay=[3]");
    assert_eq!(
        (a.pinned("a"), a.pinned("b"), a.pinned("c")),
        (Some(1), Some(2), Some(2))
    );
    let s = a.stats();
    assert_eq!(
        (s.pins_created, s.pins_released, s.chunks_held_for_pin),
        (3, 0, 1)
    );
    // The pins are followed in the next batch; "d" is complete in it and leaves no pin.
    let out = a.assign(
        1,
        vec![
            ch(3, "a", 2, 3),
            ch(8, "b", 2, 3),
            ch(9, "c", 2, 4),
            ch(10, "d", 0, 2),
            ch(11, "d", 1, 2),
        ],
        &cs(&[(1, 5, 0), (2, 10, 0)]),
    );
    assert_eq!(render(&out), "c1=[3 10 11] c2=[8 9] replay=[]");
    assert_eq!(
        (a.pinned("a"), a.pinned("b"), a.pinned("d")),
        (None, None, None)
    );
    assert_eq!(a.pin_count(), 1);
    let s = a.stats();
    assert_eq!((s.pins_created, s.pins_released), (4, 3));
}

#[test]
fn chunks_wait_in_replay_in_order_while_the_pinned_consumer_has_no_permits() {
    let mut a = assignor();
    let out = a.assign(0, vec![ch(1, "m", 0, 4)], &cs(&[(1, 1, 0), (2, 5, 0)]));
    assert_eq!(render(&out), "c1=[1] replay=[]");
    // Consumer 1 is out of permits: chunks 1..3 go to replay in order; others still flow.
    let out = a.assign(
        1,
        vec![
            ch(2, "m", 1, 4),
            plain(3),
            ch(4, "m", 2, 4),
            ch(5, "m", 3, 4),
        ],
        &cs(&[(1, 0, 0), (2, 5, 0)]),
    );
    assert_eq!(render(&out), "c2=[3] replay=[2 4 5]");
    assert_eq!(a.pinned("m"), Some(1), "a held last chunk keeps the pin");
    assert_eq!(a.stats().chunks_held_for_pin, 3);
    // Permits come back: the replayed chunks follow the pin.
    let out = a.assign(
        2,
        vec![ch(2, "m", 1, 4), ch(4, "m", 2, 4), ch(5, "m", 3, 4)],
        &cs(&[(1, 3, 0), (2, 5, 0)]),
    );
    assert_eq!(render(&out), "c1=[2 4 5] replay=[]");
    assert_eq!(a.pin_count(), 0);
}

#[test]
fn pinned_consumer_running_out_mid_batch_holds_the_rest_of_the_message() {
    let mut a = assignor();
    let consumers = cs(&[(1, 2, 0), (2, 10, 0)]);
    let out = a.assign(
        0,
        vec![
            ch(1, "m", 0, 4),
            ch(2, "m", 1, 4),
            ch(3, "m", 2, 4),
            ch(4, "m", 3, 4),
        ],
        &consumers,
    );
    assert_eq!(render(&out), "c1=[1 2] replay=[3 4]");
}

#[test]
fn once_a_chunk_is_held_later_chunks_of_the_uuid_in_the_batch_are_held_even_after_a_repin() {
    let mut a = assignor();
    a.assign(0, vec![ch(1, "m", 0, 3)], &cs(&[(1, 1, 0), (2, 5, 0)]));
    assert_eq!(a.pinned("m"), Some(1));
    // Chunk 1 is held (consumer 1 has no permits); chunk 0 is then redelivered and re-pins to
    // consumer 2; chunk 2 must not overtake the held chunk 1.
    let out = a.assign(
        1,
        vec![ch(2, "m", 1, 3), ch(1, "m", 0, 3), ch(3, "m", 2, 3)],
        &cs(&[(1, 0, 0), (2, 5, 0)]),
    );
    assert_eq!(render(&out), "c2=[1] replay=[2 3]");
    assert_eq!(a.pinned("m"), Some(2));
    assert_eq!(a.stats().pins_repinned, 1);
    // Next batch (the replay): chunks 1 and 2 follow the new pin, in order.
    let out = a.assign(
        2,
        vec![ch(2, "m", 1, 3), ch(3, "m", 2, 3)],
        &cs(&[(1, 0, 0), (2, 5, 0)]),
    );
    assert_eq!(render(&out), "c2=[2 3] replay=[]");
    assert_eq!(a.pin_count(), 0);
}

#[test]
fn redelivered_first_chunk_repins_to_the_chosen_consumer() {
    let mut a = assignor();
    let consumers = cs(&[(1, 10, 0), (2, 10, 0)]);
    a.assign(0, vec![ch(1, "m", 0, 3), ch(2, "m", 1, 3)], &consumers);
    assert_eq!(a.pinned("m"), Some(1));
    // Redelivery of the whole message (e.g. after a nack): chunk 0 goes round robin (consumer 2)
    // and the rest follows it there.
    let out = a.assign(
        1,
        vec![ch(1, "m", 0, 3), ch(2, "m", 1, 3), ch(3, "m", 2, 3)],
        &consumers,
    );
    assert_eq!(render(&out), "c2=[1 2 3] replay=[]");
    assert_eq!(a.pin_count(), 0);
    assert_eq!(a.stats().pins_repinned, 1);
    assert_eq!(a.stats().pins_created, 1);
}

#[test]
fn single_chunk_message_creates_no_pin_and_releases_a_leftover() {
    let mut a = assignor();
    let consumers = cs(&[(1, 10, 0)]);
    a.assign(0, vec![ch(1, "s", 0, 1)], &consumers);
    assert_eq!(a.pin_count(), 0);
    a.assign(0, vec![ch(2, "m", 0, 3)], &consumers);
    assert_eq!(a.pin_count(), 1);
    a.assign(0, vec![ch(3, "m", 0, 1)], &consumers);
    assert_eq!(a.pin_count(), 0);
    assert_eq!(a.stats().pins_released, 1);
}

#[test]
fn interleaved_messages_with_tight_permits_each_stay_on_one_consumer() {
    // Three producers interleave 4-chunk messages; consumers get 2 permits per round. The loop
    // plays the dispatcher: replay first, then new entries.
    let mut a = assignor();
    let mut pending: Vec<E> = Vec::new();
    for c in 0..4u32 {
        for m in 0..3u32 {
            pending.push(ch(c * 10 + m, &format!("m{m}"), c, 4));
        }
    }
    pending.insert(5, plain(100));
    pending.insert(9, plain(101));
    let mut delivered: Vec<(u32, E)> = Vec::new();
    let mut rounds = 0;
    while !pending.is_empty() {
        rounds += 1;
        assert!(rounds < 50, "no progress: {pending:?}");
        let batch = std::mem::take(&mut pending);
        let out = a.assign(rounds, batch, &cs(&[(1, 2, 0), (2, 2, 0), (3, 1, 0)]));
        for (c, es) in out.per_consumer {
            delivered.extend(es.into_iter().map(|e| (c, e)));
        }
        pending = out.replay;
    }
    for m in 0..3u32 {
        let uuid = format!("m{m}");
        let got: Vec<(u32, u32)> = delivered
            .iter()
            .filter_map(|(c, e)| match &e.chunk {
                Some((u, id, _)) if *u == uuid => Some((*c, *id)),
                _ => None,
            })
            .collect();
        let ids: Vec<u32> = got.iter().map(|g| g.1).collect();
        assert_eq!(
            ids,
            [0, 1, 2, 3],
            "{uuid}: chunks out of order or missing: {got:?}"
        );
        assert!(
            got.iter().all(|g| g.0 == got[0].0),
            "{uuid}: split over consumers: {got:?}"
        );
    }
    assert_eq!(delivered.len(), 14);
    assert_eq!(a.pin_count(), 0);
    assert_eq!(a.stats().orphan_chunks, 0);
}

// ---- orphans -------------------------------------------------------------------------------

#[test]
fn orphan_last_and_middle_chunks_are_dispatched_not_replayed() {
    let mut a = assignor();
    let consumers = cs(&[(1, 10, 0), (2, 10, 0)]);
    let out = a.assign(0, vec![ch(1, "last", 3, 4)], &consumers);
    assert_eq!(render(&out), "c1=[1] replay=[]");
    let out = a.assign(0, vec![ch(2, "middle", 1, 4)], &consumers);
    assert_eq!(render(&out), "c2=[2] replay=[]");
    assert_eq!(a.stats().orphan_chunks, 2);
    assert_eq!(a.pin_count(), 0, "an orphan does not pin");
}

#[test]
fn orphan_without_any_permits_is_replayed_until_permits_come() {
    let mut a = assignor();
    let out = a.assign(0, vec![ch(1, "o", 2, 3)], &cs(&[(1, 0, 0)]));
    assert_eq!(render(&out), "replay=[1]");
    assert_eq!(a.stats().orphan_chunks, 0);
    let out = a.assign(1, vec![ch(1, "o", 2, 3)], &cs(&[(1, 1, 0)]));
    assert_eq!(render(&out), "c1=[1] replay=[]");
    assert_eq!(a.stats().orphan_chunks, 1);
}

#[test]
fn legacy_replay_policy_stalls_on_an_orphan() {
    let mut a = with(OrphanPolicy::Replay, 100, u64::MAX);
    let consumers = cs(&[(1, 10, 0), (2, 10, 0)]);
    // The orphan comes back first on every replay read and is never assigned.
    for t in 0..5 {
        let out = a.assign(t, vec![ch(1, "m", 3, 4), ch(2, "n", 1, 4)], &consumers);
        assert_eq!(render(&out), "replay=[1 2]");
    }
    assert_eq!(a.stats().orphan_chunks_replayed, 10);
    assert_eq!(a.stats().orphan_chunks, 0);
}

#[test]
fn remove_consumer_sends_the_rest_of_its_message_to_another_consumer() {
    let mut a = assignor();
    let out = a.assign(
        0,
        vec![ch(1, "m", 0, 3), ch(2, "n", 0, 2)],
        &cs(&[(1, 10, 0), (2, 10, 0)]),
    );
    assert_eq!(render(&out), "c1=[1] c2=[2] replay=[]");
    assert_eq!(a.remove_consumer(1), 1);
    assert_eq!(a.remove_consumer(1), 0);
    assert_eq!(a.pinned("m"), None);
    assert_eq!(a.pinned("n"), Some(2));
    let out = a.assign(
        1,
        vec![ch(3, "m", 1, 3), ch(4, "m", 2, 3)],
        &cs(&[(2, 10, 0), (3, 10, 0)]),
    );
    assert_eq!(sent(&out, 2).len() + sent(&out, 3).len(), 2);
    assert!(out.replay.is_empty());
    assert_eq!(a.stats().orphan_chunks, 2);
    assert_eq!(a.stats().pins_dropped_consumer_removed, 1);
}

#[test]
fn pin_to_a_consumer_missing_from_the_snapshot_is_stale_and_dropped() {
    let mut a = assignor();
    a.assign(0, vec![ch(1, "m", 0, 3)], &cs(&[(1, 10, 0)]));
    assert_eq!(a.pinned("m"), Some(1));
    // Consumer 1 disconnected but remove_consumer was not called.
    let out = a.assign(
        1,
        vec![ch(2, "m", 1, 3), ch(3, "m", 2, 3)],
        &cs(&[(2, 10, 0)]),
    );
    assert_eq!(render(&out), "c2=[2 3] replay=[]");
    assert_eq!(a.pinned("m"), None);
    let s = a.stats();
    assert_eq!((s.stale_pins, s.orphan_chunks), (1, 2));
}

#[test]
fn pinned_consumer_found_at_a_new_index() {
    let mut a = assignor();
    a.assign(0, vec![ch(1, "m", 0, 3)], &cs(&[(7, 10, 0), (8, 10, 0)]));
    assert_eq!(a.pinned("m"), Some(7));
    // The consumer list changed order and grew: the pin is still found.
    let out = a.assign(
        1,
        vec![ch(2, "m", 1, 3)],
        &cs(&[(9, 10, 0), (8, 10, 0), (7, 10, 0)]),
    );
    assert_eq!(render(&out), "c7=[2] replay=[]");
    assert_eq!(a.stats().stale_pins, 0);
}

#[test]
fn clear_empties_the_pins() {
    let mut a = assignor();
    let consumers = cs(&[(1, 10, 0), (2, 10, 0)]);
    a.assign(
        0,
        vec![ch(1, "a", 0, 2), ch(2, "b", 0, 2), ch(3, "c", 0, 2)],
        &consumers,
    );
    assert_eq!(a.pin_count(), 3);
    a.clear();
    assert_eq!(a.pin_count(), 0);
    assert_eq!(a.pinned("a"), None);
    assert_eq!(a.stats().pins_cleared, 3);
    // Still usable afterwards.
    a.assign(1, vec![ch(4, "d", 0, 2)], &consumers);
    assert_eq!(a.pin_count(), 1);
}

// ---- bounds --------------------------------------------------------------------------------

#[test]
fn pins_are_bounded_by_count_evicting_the_least_recently_seen() {
    let mut a = with(OrphanPolicy::DispatchToDefault, 2, u64::MAX);
    let consumers = cs(&[(1, 100, 0)]);
    a.assign(0, vec![ch(1, "a", 0, 3), ch(2, "b", 0, 3)], &consumers);
    a.assign(1, vec![ch(3, "a", 1, 3)], &consumers); // "a" is now more recent than "b"
    a.assign(2, vec![ch(4, "c", 0, 3)], &consumers);
    assert_eq!(a.pin_count(), 2);
    assert_eq!(a.pinned("b"), None);
    assert_eq!(a.pinned("a"), Some(1));
    assert_eq!(a.pinned("c"), Some(1));
    assert_eq!(a.stats().pins_evicted_count, 1);
    // Within one batch the bound is applied at the end of the call.
    a.assign(
        3,
        vec![ch(5, "d", 0, 2), ch(6, "e", 0, 2), ch(7, "d", 1, 2)],
        &consumers,
    );
    assert_eq!(a.pin_count(), 2);
    assert_eq!(a.stats().orphan_chunks, 0);
    assert_eq!(a.stats().pins_evicted_count, 2);
}

#[test]
fn zero_max_pins_is_treated_as_one() {
    let mut a = with(OrphanPolicy::DispatchToDefault, 0, u64::MAX);
    a.assign(
        0,
        vec![ch(1, "a", 0, 3), ch(2, "b", 0, 3)],
        &cs(&[(1, 100, 0)]),
    );
    assert_eq!(a.pin_count(), 1);
    assert_eq!(a.pinned("b"), Some(1));
}

#[test]
fn idle_pins_are_evicted_by_age_and_seen_chunks_refresh_them() {
    let mut a = with(OrphanPolicy::DispatchToDefault, 100, 10);
    let consumers = cs(&[(1, 100, 0)]);
    a.assign(0, vec![ch(1, "a", 0, 4), ch(2, "b", 0, 4)], &consumers);
    a.assign(8, vec![ch(3, "a", 1, 4)], &consumers); // "a" seen at 8
    a.assign(10, vec![plain(4)], &consumers); // idle 10: not yet older than 10
    assert_eq!(a.pin_count(), 2);
    a.assign(11, vec![plain(5)], &consumers); // "b" idle 11 > 10: evicted
    assert_eq!(a.pinned("b"), None);
    assert_eq!(a.pinned("a"), Some(1));
    assert_eq!(a.stats().pins_evicted_age, 1);
    // A time that goes backwards evicts nothing.
    a.assign(3, vec![plain(6)], &consumers);
    assert_eq!(a.pinned("a"), Some(1));
    // The evicted message's next chunk is an orphan, still dispatched.
    let out = a.assign(40, vec![ch(7, "b", 1, 4)], &consumers);
    assert_eq!(render(&out), "c1=[7] replay=[]");
    assert_eq!(a.pin_count(), 0);
    assert_eq!(a.stats().pins_evicted_age, 2);
}

// ---- malformed metadata --------------------------------------------------------------------

#[test]
fn malformed_chunk_metadata_is_a_counted_plain_entry() {
    let mut a = assignor();
    let consumers = cs(&[(1, 10, 0), (2, 10, 0)]);
    a.assign(0, vec![ch(1, "m", 0, 3)], &consumers);
    assert_eq!(a.pinned("m"), Some(1));
    let out = a.assign(
        1,
        vec![
            ch(2, "m", 3, 3),        // chunk_id == num_chunks
            ch(3, "x", 0, 0),        // zero chunks
            ch(4, "", 1, 3),         // empty uuid
            ch(5, "m", u32::MAX, 0), // both
            plain(6),
        ],
        &consumers,
    );
    // Plain round robin (continuing after consumer 1), no pin followed, none created.
    assert_eq!(render(&out), "c1=[3 5] c2=[2 4 6] replay=[]");
    assert_eq!(a.stats().malformed_chunks, 4);
    assert_eq!(
        a.pinned("m"),
        Some(1),
        "a malformed entry leaves the pin alone"
    );
    assert_eq!(a.pin_count(), 1);
}

#[test]
fn chunk_ref_helpers() {
    let c = |uuid, chunk_id, num_chunks| ChunkRef {
        uuid,
        chunk_id,
        num_chunks,
    };
    assert!(c("u", 0, 1).is_well_formed());
    assert!(c("u", 0, 1).is_last());
    assert!(!c("u", 1, 1).is_well_formed());
    assert!(!c("", 0, 1).is_well_formed());
    assert!(!c("u", 0, 0).is_well_formed());
    assert!(!c("u", u32::MAX, 0).is_last());
    assert!(c("u", u32::MAX - 1, u32::MAX).is_last());
}

// ---- API shape -----------------------------------------------------------------------------

#[test]
fn assign_into_clears_and_reuses_the_output() {
    let mut a = assignor();
    let mut out = Assignment::new();
    a.assign_into(
        0,
        (1..=4).map(plain),
        &cs(&[(1, 10, 0), (2, 10, 0), (3, 1, 0)]),
        &mut out,
    );
    assert_eq!(render(&out), "c1=[1 4] c2=[2] c3=[3] replay=[]");
    a.assign_into(0, vec![plain(5), plain(6)], &cs(&[(4, 1, 0)]), &mut out);
    assert_eq!(out.per_consumer.len(), 1);
    assert_eq!(render(&out), "c4=[5] replay=[6]");
    a.assign_into(0, Vec::new(), &cs(&[(1, 1, 0), (2, 1, 0)]), &mut out);
    assert_eq!(
        out.per_consumer.iter().map(|p| p.0).collect::<Vec<_>>(),
        [1, 2]
    );
    assert_eq!(render(&out), "replay=[]");
    assert_eq!(out.assigned_len(), 0);
}

#[test]
fn entries_can_be_assigned_by_reference() {
    let mut a = assignor();
    let owned = [ch(1, "m", 0, 2), ch(2, "m", 1, 2)];
    let out = a.assign(0, owned.iter().collect(), &cs(&[(1, 1, 0), (2, 5, 0)]));
    assert_eq!(out.for_consumer(1).len(), 1);
    assert_eq!(out.replay.len(), 1);
    assert_eq!(out.replay[0].pos, 2);
}

#[test]
fn duplicate_consumer_ids_do_not_panic() {
    let mut a = assignor();
    let consumers = cs(&[(1, 1, 0), (1, 1, 0)]);
    let out = a.assign(
        0,
        vec![ch(1, "m", 0, 3), ch(2, "m", 1, 3), plain(3)],
        &consumers,
    );
    assert_eq!(out.assigned_len() + out.replay.len(), 3);
    assert_eq!(out.per_consumer.len(), 2);
    assert!(out.per_consumer.iter().all(|(_, v)| v.len() <= 1));
}

/// A first chunk that never reached its consumer undoes what its assignment did to the pin: a
/// pin it created is dropped, a pin it moved (a redelivered first chunk) points back at the
/// consumer that had the chunk before; a later call for the same consumer changes nothing.
#[test]
fn a_first_chunk_given_back_undelivered_undoes_its_pin() {
    let mut a = assignor();
    let consumers = cs(&[(1, 10, 0), (2, 10, 0)]);
    let out = a.assign(0, vec![ch(1, "m", 0, 3)], &consumers);
    assert_eq!(render(&out), "c1=[1] replay=[]");
    assert!(a.first_chunk_returned("m", 1));
    assert_eq!(
        (a.pinned("m"), a.pin_count()),
        (None, 0),
        "a new pin is dropped"
    );

    let out = a.assign(1, vec![ch(1, "m", 0, 3)], &consumers);
    let first = a.pinned("m").expect("pinned again");
    assert_eq!(render(&out), format!("c{first}=[1] replay=[]"));
    // The consumer returned it; with no permits left there, the redelivery goes to the other.
    let other = 3 - first;
    let busy = if first == 1 {
        cs(&[(1, 0, 0), (2, 10, 0)])
    } else {
        cs(&[(1, 10, 0), (2, 0, 0)])
    };
    let out = a.assign(2, vec![ch(1, "m", 0, 3)], &busy);
    assert_eq!(render(&out), format!("c{other}=[1] replay=[]"));
    assert_eq!(a.pinned("m"), Some(other), "moved by the assignment");
    assert!(
        !a.first_chunk_returned("m", first),
        "not the pin's consumer"
    );
    assert!(a.first_chunk_returned("m", other));
    assert_eq!(a.pinned("m"), Some(first), "back where the first chunk was");
    assert!(
        a.first_chunk_returned("m", first),
        "its own pin, made by no move: dropped"
    );
    assert_eq!(a.pin_count(), 0);
}

/// A last chunk that never reached its consumer pins its message there again (the consumer has
/// its earlier chunks); a uuid that is pinned keeps its pin.
#[test]
fn a_last_chunk_given_back_undelivered_pins_its_message_again() {
    let mut a = assignor();
    let consumers = cs(&[(1, 10, 0), (2, 10, 0)]);
    let out = a.assign(0, vec![ch(1, "m", 0, 2), ch(2, "m", 1, 2)], &consumers);
    assert_eq!(render(&out), "c1=[1 2] replay=[]");
    assert_eq!(a.pin_count(), 0, "the last chunk released the pin");
    assert!(a.last_chunk_returned(1, "m", 1));
    assert_eq!(a.pinned("m"), Some(1));
    let out = a.assign(2, vec![ch(2, "m", 1, 2)], &consumers);
    assert_eq!(
        render(&out),
        "c1=[2] replay=[]",
        "the replayed last chunk follows the pin"
    );
    assert_eq!(a.pin_count(), 0);
    let out = a.assign(3, vec![ch(3, "n", 0, 2)], &consumers);
    let first = a.pinned("n").unwrap();
    assert_eq!(render(&out), format!("c{first}=[3] replay=[]"));
    assert!(!a.last_chunk_returned(4, "n", 3 - first), "pinned already");
    assert_eq!(a.pinned("n"), Some(first));
}

/// A redelivered message whose first and last chunks both come back undelivered (undone last
/// chunk first): the pin goes back to the consumer that had the first chunk before, not away.
/// The last chunk's return restores the pin as it was before its release, `previous` included.
#[test]
fn a_whole_redelivery_given_back_leaves_the_pin_where_it_was() {
    let mut a = assignor();
    let consumers = cs(&[(1, 10, 0), (2, 10, 0)]);
    let out = a.assign(0, vec![ch(1, "m", 0, 2)], &consumers);
    let first = a.pinned("m").expect("pinned");
    assert_eq!(render(&out), format!("c{first}=[1] replay=[]"));
    // The consumer gives the first chunk back (a redelivery); it comes again with the last.
    let out = a.assign(1, vec![ch(1, "m", 0, 2), ch(2, "m", 1, 2)], &consumers);
    let again = if out.for_consumer(1).is_empty() { 2 } else { 1 };
    assert_eq!(out.for_consumer(again).len(), 2);
    assert_eq!(a.pin_count(), 0, "the last chunk released the pin");
    // Both refused by the shell: undone last chunk first.
    assert!(a.last_chunk_returned(2, "m", again));
    assert!(a.first_chunk_returned("m", again));
    assert_eq!(
        a.pinned("m"),
        Some(first),
        "back on the consumer the first chunk reached"
    );
}

/// An orphan last chunk (its message has no pin) released nothing: when it comes back
/// undelivered it pins nothing, even though the same consumer released that message's pin in
/// an earlier delivery.
#[test]
fn an_orphan_last_chunk_given_back_pins_nothing() {
    let mut a = assignor();
    let consumers = cs(&[(1, 10, 0)]);
    let out = a.assign(0, vec![ch(1, "m", 0, 2), ch(2, "m", 1, 2)], &consumers);
    assert_eq!(render(&out), "c1=[1 2] replay=[]");
    assert_eq!(a.pin_count(), 0);
    // Redelivered: the last chunk alone now (the first was acked), an orphan.
    let out = a.assign(1, vec![ch(2, "m", 1, 2)], &consumers);
    assert_eq!(render(&out), "c1=[2] replay=[]");
    assert!(
        !a.last_chunk_returned(2, "m", 1),
        "its assignment released no pin"
    );
    assert_eq!(a.pin_count(), 0);
}
