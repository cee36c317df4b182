//! Ordered nack on Key_Shared (broker side): scripted scenarios with exact deliveries.
//!
//! The script language is in `common/mod.rs`: `onack A DELAY POS…` is `handle_nack` (the
//! client's `Nack { entries, delay }`), `release A POS…` is `handle_release` (the client's
//! `Release`: later messages of the nacked key it never handed to the application). Ring with
//! 100 points, consumers A and B: `k1` moves from A to B when B joins, `k0` stays with A.

mod common;

use common::{check, run};
use cursor::Position;
use dispatcher::BlockReason;
use insta::assert_snapshot;

fn p(e: u64) -> Position {
    Position::new(1, e)
}

/// Sends of one key's entries, in order (positions' entry ids).
fn sent_entries(w: &common::World) -> Vec<u64> {
    w.sends.iter().map(|(_, e)| e.position.entry_id).collect()
}

/// The scenario: 0..4 of one key; the application gets 0 and nacks it; the client gives
/// back 1..4 (never handed to the application). 0 comes back after the delay and before any
/// later message of the key; a new message of the key published during the hold waits too,
/// while another key flows.
#[test]
fn nack_m0_of_five_same_key_messages_is_resent_first() {
    let script = "key_shared
join A
flow A 20
pub k0*5
onack A 100 1:0
release A 1:1 1:2 1:3 1:4
explain k0
pub k0 k1
nackstats
advance 99
explain k0
advance 1
state
nackstats
";
    let log = check(script);
    assert_snapshot!(log);
    let w = run(script);
    assert_eq!(
        sent_entries(&w),
        vec![0, 1, 2, 3, 4, 6, 0, 1, 2, 3, 4, 5],
        "k0: 0..4, then (k1's 1:6 flows during the hold), then 0 again before 1..5"
    );
}

/// The hold is enforced even when the client does not release anything: later entries already
/// in replay (e.g. requeued by a disconnect) wait behind the nacked one, on every consumer.
#[test]
fn hold_applies_to_entries_requeued_by_other_means() {
    let w = run("key_shared
join A
flow A 20
pub k0*3
onack A 50 1:0
redeliver_all A
advance 10
");
    // 1:1 and 1:2 went back to replay by redeliver_all; nothing of k0 is re-sent before 1:0.
    assert_eq!(sent_entries(&w), vec![0, 1, 2]);
    assert_eq!(
        w.d.why_blocked_key(b"k0"),
        BlockReason::HeldByNack {
            position: p(0),
            until: 50
        }
    );
    let mut w = w;
    w.step("advance 40");
    assert_eq!(sent_entries(&w), vec![0, 1, 2, 0, 1, 2]);
    assert_eq!(w.d.stats().held_hashes, 0);
    assert_eq!(w.d.redelivery_count(p(0)), 1);
    assert_eq!(
        w.d.redelivery_count(p(1)),
        1,
        "redeliver_all counts, release does not"
    );
}

/// Two consumers, B joins during the hold and takes k1. A still has 1:1 of k1 in the
/// application's hands (pending), so k1 also drains on A: the nacked 1:0 waits for both the
/// delay and A's ack of 1:1, then goes to B, followed by the released 1:2.
#[test]
fn nack_with_a_join_during_the_hold_waits_for_delay_and_draining() {
    assert_snapshot!(check(
        "key_shared
join A
flow A 20
pub k1*3 k0
onack A 30 1:0
release A 1:2
join B
flow B 20
explain k1
advance 30
explain k1
state
ack A 1:1
advance 20
state
nackstats
"
    ));
}

/// The nacked position is skipped by an admin skip: the hold ends (recorded in the stats) and
/// the key flows at once.
#[test]
fn nack_then_skip_past_the_nacked_position_ends_the_hold() {
    let script = "key_shared
interval 0
join A
flow A 20
pub k0*3
onack A 1000 1:0
release A 1:1 1:2
explain k0
skip 1
explain k0
nackstats
state
";
    assert_snapshot!(check(script));
    let w = run(script);
    assert_eq!(w.d.stats().holds_ended_by_mark_delete, 1);
    assert_eq!(sent_entries(&w), vec![0, 1, 2, 1, 2]);
}

/// Nack storm: 10 of 20 keys get their first message nacked with a long delay; the client
/// releases their later messages and returns permits as it processes the rest. The consumer
/// keeps receiving the other 10 keys (all their messages) while the 10 keys are held: permits
/// are never spent on held keys.
#[test]
fn nack_storm_leaves_unrelated_keys_flowing() {
    let mut w = run("key_shared\njoin A\nflow A 10\n");
    w.quiet = true;
    // 20 keys x 5 messages, interleaved: entry = round * 20 + key.
    let mut pubs = String::from("pub");
    for _ in 0..5 {
        for k in 0..20 {
            pubs.push_str(&format!(" key{k}"));
        }
    }
    w.step(&pubs);
    let held = |e: u64| e % 20 < 10;
    let a = w.id("A");
    let mut nacked = std::collections::BTreeSet::new();
    let mut processed = Vec::new();
    let mut seen = 0;
    for _round in 0..200 {
        let new: Vec<Position> = w.sends[seen..].iter().map(|(_, e)| e.position).collect();
        seen = w.sends.len();
        if new.is_empty() {
            break;
        }
        let mut acks = Vec::new();
        let mut rel = Vec::new();
        let mut handed = 0usize;
        for pos in new {
            let k = pos.entry_id % 20;
            if held(pos.entry_id) && !nacked.contains(&k) {
                // The application fails the first message of this key.
                nacked.insert(k);
                handed += 1;
                w.d.handle_nack(w.now, a, &[pos], Some(1_000_000));
            } else if held(pos.entry_id) {
                rel.push(pos); // a later message of a held key: give it back
            } else {
                acks.push(pos);
            }
        }
        w.d.handle_release(w.now, a, &rel);
        w.pump();
        for pos in &acks {
            w.ack.ack(a, *pos).unwrap();
            processed.push(pos.entry_id);
        }
        // The client returns the permit of every message handed to the application (acked or
        // nacked) and of every released one.
        let back = u32::try_from(acks.len() + rel.len() + handed).unwrap();
        if back > 0 {
            w.d.handle_flow(w.now, a, back);
        }
        w.pump();
    }
    processed.sort_unstable();
    let want: Vec<u64> = (0..100).filter(|e| !held(*e)).collect();
    assert_eq!(processed, want, "every message of the unrelated keys");
    let st = w.d.stats();
    assert_eq!(st.held_hashes, 10);
    assert_eq!(st.nacks, 10);
    // Held keys: after its nack, a key's later messages stay in the broker's replay set; only
    // the ones already on their way when the nack arrived were released (none here: the nack
    // comes before the next read).
    assert_eq!(st.releases, 0, "{st:?}");
    let pending = w.d.pending_positions(a);
    assert!(
        pending.is_empty(),
        "nothing of a held key is pending: {pending:?}"
    );
    // After the delay, every held key is re-sent in order (the application now acks all).
    w.step("advance 1000000");
    let mut resent = Vec::new();
    loop {
        let new: Vec<Position> = w.sends[seen..].iter().map(|(_, e)| e.position).collect();
        seen = w.sends.len();
        if new.is_empty() {
            break;
        }
        for pos in &new {
            w.ack.ack(a, *pos).unwrap();
            resent.push(pos.entry_id);
        }
        w.d.handle_flow(w.now, a, u32::try_from(new.len()).unwrap());
        w.pump();
    }
    for k in 0..10 {
        let of_k: Vec<u64> = resent.iter().copied().filter(|e| e % 20 == k).collect();
        let want: Vec<u64> = (0..5).map(|r| r * 20 + k).collect();
        assert_eq!(of_k, want, "key{k} re-sent in order, nacked first");
    }
    assert_eq!(resent.len(), 50);
    assert_eq!(w.d.stats().unacked, 0);
}

/// Dead-letter after 2 deliveries, Continue: the second nack hands 1:0 to the driver (acked on
/// the cursor) and the key continues with 1:1 (a recorded gap).
#[test]
fn dead_letter_continue_hands_the_entry_to_the_driver_and_the_key_flows() {
    assert_snapshot!(check(
        "key_shared
dead_letter 2 continue
join A
flow A 20
pub k0*3
onack A 5 1:0
release A 1:1 1:2
advance 5
onack A 5 1:0
release A 1:1 1:2
nackstats
state
"
    ));
}

/// Dead-letter after 1 delivery, Park: the key waits for the operator (explain says parked),
/// other keys flow; `release_parked` replays it in order.
#[test]
fn dead_letter_park_holds_the_key_until_release_parked() {
    assert_snapshot!(check(
        "key_shared
dead_letter 1 park
join A
flow A 20
pub k0*2
onack A 5 1:0
release A 1:1
pub k0 k1
advance 100
explain k0
nackstats
release_parked k0
nackstats
state
"
    ));
}

/// Park, then the operator dead-letters the parked entry: the key flows again without it.
#[test]
fn dead_letter_park_then_dead_letter_parked() {
    assert_snapshot!(check(
        "key_shared
dead_letter 1 park
join A
flow A 20
pub k0*2
onack A 5 1:0
release A 1:1
dead_letter_parked k0
nackstats
state
"
    ));
}

/// A chunked message (3 chunks) of k1 is nacked as one unit (the client lists all chunk ids);
/// the later k1 entry is released. B joins during the hold and takes k1: after the delay all
/// three chunks go to one consumer (B) in order, then the later entry.
#[test]
fn chunked_nack_resends_all_chunks_to_one_consumer_in_order() {
    let script = "key_shared
join A
flow A 20
chunks u1 k1 3
pub k1
onack A 10 1:0 1:1 1:2
release A 1:3
join B
flow B 1
advance 10
flow B 20
advance 10
state
";
    assert_snapshot!(check(script));
    let w = run(script);
    let to_b: Vec<u64> = w
        .sends
        .iter()
        .filter(|(c, _)| c == "B")
        .map(|(_, e)| e.position.entry_id)
        .collect();
    assert_eq!(to_b, vec![0, 1, 2, 3]);
}

/// Shared: a nack is a delayed redelivery, nothing else waits (no key hold).
#[test]
fn shared_nack_is_a_delayed_redelivery_without_hold() {
    assert_snapshot!(check(
        "shared
join A
flow A 20
pub a a
onack A 10 1:0
pub a
advance 10
state
"
    ));
}

/// Out-of-order Key_Shared: a nack delays the entry but does not hold its key (released later
/// entries go out at once).
#[test]
fn out_of_order_key_shared_nack_does_not_hold() {
    assert_snapshot!(check(
        "key_shared ooo
join A
flow A 20
pub k0*3
onack A 10 1:0
release A 1:1 1:2
advance 10
"
    ));
}

/// Backoff policy when the nack carries no delay: exponential, capped.
#[test]
fn exponential_backoff_by_redelivery_count_with_cap() {
    let mut w = run("key_shared
nack_backoff exp 10 25
join A
flow A 20
pub k0
");
    let a = w.id("A");
    let mut untils = Vec::new();
    for _ in 0..4 {
        w.d.handle_nack(w.now, a, &[p(0)], None);
        w.pump();
        match w.d.why_blocked_key(b"k0") {
            BlockReason::HeldByNack { until, .. } => untils.push(until - w.now),
            other => panic!("not held: {other:?}"),
        }
        w.step("advance 100");
    }
    assert_eq!(untils, vec![10, 20, 25, 25]);
    assert_eq!(w.d.redelivery_count(p(0)), 4);
    assert_eq!(sent_entries(&w), vec![0, 0, 0, 0, 0]);
}

/// Stale input is a no-op: a nack or release of a position not pending on that consumer, or
/// from an unknown consumer, changes nothing.
#[test]
fn stale_nacks_and_releases_are_ignored() {
    let mut w = run("key_shared\njoin A\njoin B\nflow A 5\nflow B 5\npub k0\n");
    let a = w.id("A");
    let b = w.id("B");
    assert_eq!(w.d.handle_nack(w.now, b, &[p(0)], Some(5)), 0);
    assert_eq!(w.d.handle_release(w.now, b, &[p(0)]), 0);
    assert_eq!(
        w.d.handle_nack(w.now, dispatcher::ConsumerId(99), &[p(0)], None),
        0
    );
    assert_eq!(w.d.handle_nack(w.now, a, &[p(7)], None), 0);
    assert_eq!(w.d.release_parked(w.now, 12), 0);
    assert_eq!(w.d.dead_letter_parked(w.now, 12), 0);
    assert_eq!(w.d.poll_dead_letter(), None);
    let st = w.d.stats();
    assert_eq!((st.nacks, st.releases, st.held_hashes), (0, 0, 0));
    assert_eq!(w.d.pending_positions(a).len(), 1);
}

/// Batched: one message (index 1) of a 3-message batch entry is nacked after index 0 was
/// acked. The whole entry is re-sent after the delay (the cursor keeps index 0 acked; the
/// client skips it — it lists acked indexes in its nack, and a driver may attach the cursor's
/// acked indexes to the send); the pending ack counts the entry's 3 messages again until the
/// remaining indexes are acked, which completes the entry and clears it.
#[test]
fn batched_nack_resends_the_entry_and_keeps_acked_indexes() {
    assert_snapshot!(check(
        "key_shared
join A
flow A 20
batch k0 3
pub k0
ackidx A 1:0 3 0
onack A 10 1:0
release A 1:1
state
advance 10
state
ackidx A 1:0 3 1 2
ack A 1:1
state
"
    ));
}
