//! Scripted scenarios: every read, replay and send of the core, as insta snapshots.
//!
//! The script language is described in `common/mod.rs`. Ledger ids start at 1, so the first
//! entry is `1:0`. In the Key_Shared scripts (ring, 100 points, consumers named A, B, C), key
//! `k1` belongs to A alone, moves to B when B joins and to C when C joins; `k2` moves to B and
//! stays there; `k3` stays with A when B joins and moves to C; `k0` stays with A throughout.

mod common;

use common::{check, run};
use insta::assert_snapshot;

// ---------------------------------------------------------------- seed 000 (the fix)

/// Seed 000: A holds M (key k1), B joins (k1 moves to B, draining on A), the mark-delete passes
/// M by `op`. A new k1 message must wait until A acks M (an ack below mark-delete).
fn seed000(op: &str, legacy: bool) -> String {
    check(&format!(
        "key_shared\n{}\njoin A\nflow A 10\npub k1\njoin B\nflow B 10\nadvance 5\n{op}\npub k1\nadvance 10\nexplain k1\nstate\nack A 1:0\nadvance 10\nstate\n",
        if legacy { "legacy" } else { "" }
    ))
}

#[test]
fn seed000_skip_keeps_draining_until_the_old_owner_acks() {
    assert_snapshot!(seed000("skip 1", false));
}

#[test]
fn seed000_expiry_keeps_draining_until_the_old_owner_acks() {
    assert_snapshot!(seed000("expire 1", false));
}

#[test]
fn seed000_quota_eviction_keeps_draining_until_the_old_owner_acks() {
    assert_snapshot!(seed000("evict_count 0", false));
}

#[test]
fn seed000_clear_backlog_keeps_draining_until_the_old_owner_acks() {
    assert_snapshot!(seed000("clear", false));
}

#[test]
fn seed000_old_owner_disconnect_releases_the_key() {
    assert_snapshot!(check(
        "key_shared\njoin A\nflow A 10\npub k1\njoin B\nflow B 10\nskip 1\npub k1\nadvance 10\nstate\nleave A\nadvance 10\nstate\n"
    ));
}

#[test]
fn seed000_legacy_switch_releases_the_key_early() {
    // With Pulsar's cleanup the new k1 message reaches B while A still holds M.
    let log = seed000("skip 1", true);
    assert!(log.contains("send B: 1:1(k1)"), "{log}");
    assert_snapshot!(log);
}

#[test]
fn seed000_every_variant_blocks_b_until_the_ack() {
    for op in ["skip 1", "expire 1", "evict_count 0", "clear"] {
        let log = seed000(op, false);
        let ack_at = log.find("> ack A 1:0").unwrap();
        let sent_at = log
            .find("send B: 1:1(k1)")
            .unwrap_or_else(|| panic!("{op}: {log}"));
        assert!(
            sent_at > ack_at,
            "{op}: k1 reached B before A acked M\n{log}"
        );
        let legacy = seed000(op, true);
        let sent_at = legacy.find("send B: 1:1(k1)").unwrap();
        let ack_at = legacy.find("> ack A 1:0").unwrap();
        assert!(
            sent_at < ack_at,
            "{op} legacy: expected the violation\n{legacy}"
        );
    }
}

#[test]
fn shared_mark_delete_hook_removes_pending_acks_and_debits_unacked() {
    let w = run("shared\njoin A\njoin B\nflow A 3\nflow B 3\npub a b c d\nskip 2\nstate\n");
    let s = w.d.stats();
    let total: i64 = w.d.consumer_stats().iter().map(|c| c.unacked).sum();
    assert_eq!(s.unacked, 2);
    assert_eq!(total, 2);
    assert_snapshot!(check(
        "shared\njoin A\njoin B\nflow A 3\nflow B 3\npub a b c d\nstate\nskip 2\nstate\nexpire 1000\nstate\nack A 1:0\nstate\n"
    ));
}

// ---------------------------------------------------------------- flows F1–F10

#[test]
fn f1_join_drains_moved_keys() {
    assert_snapshot!(check(
        "key_shared\njoin A\nflow A 10\npub k1 k2 k1\njoin B\nflow B 10\npub k1 k2 k3\nexplain k1\nstate\nack A 1:0\nadvance 10\nack A 1:2\nstate\nadvance 10\nack A 1:1\nadvance 10\nstate\n"
    ));
}

#[test]
fn f2_leave_hands_keys_over_in_order() {
    // A leaves mid-drain: its pending k1 entries go to replay and reach B before the later k1.
    let log = check(
        "key_shared\njoin A\nflow A 10\npub k1 k1\njoin B\nflow B 10\npub k1\nstate\nleave A\nstate\n",
    );
    let w = run("key_shared\njoin A\nflow A 10\npub k1 k1\njoin B\nflow B 10\npub k1\nleave A\n");
    let got: Vec<String> = w.received["B"].iter().map(|p| p.to_string()).collect();
    assert_eq!(got, ["1:0", "1:1", "1:2"]);
    assert_snapshot!(log);
}

#[test]
fn f2_last_consumer_leaves_then_rewind() {
    assert_snapshot!(check(
        "shared\njoin A\nflow A 10\npub a b c\nack A 1:0\nleave A\nstate\njoin B\nflow B 10\nstate\n"
    ));
}

#[test]
fn f3_ack_updates_unacked_and_resumes_blocked_consumer() {
    assert_snapshot!(check(
        "shared\nmax_unacked_consumer 4\njoin A\nflow A 100\npub a*6\nstate\nack A 1:0 1:1\nstate\nack A 1:2\nstate\n"
    ));
}

#[test]
fn f4_nack_on_key_shared_keeps_the_hash_so_later_entries_wait() {
    assert_snapshot!(check(
        "key_shared\njoin A\nflow A 10\npub k3\nnack A 1:0\nstate\npub k3\nstate\n"
    ));
}

#[test]
fn f4_nack_on_shared_goes_round_robin() {
    assert_snapshot!(check(
        "shared\njoin A\njoin B\nflow A 10\npub a b\nflow B 10\nnack A 1:0 1:1\nstate\n"
    ));
}

#[test]
fn f5_redeliver_all() {
    assert_snapshot!(check(
        "key_shared\njoin A\nflow A 10\npub k1 k3 k1\nredeliver_all A\nstate\n"
    ));
}

#[test]
fn f6_read_loop_batches_and_permits() {
    // Adaptive batch 1, 2, 4, …; permits bound every read; negative permits are possible with
    // batched entries (dispatch is per entry, at least one).
    assert_snapshot!(check(
        "shared\njoin A\npub a*10\nflow A 9\nstate\nbatch big 5\nflow A 2\nstate\n"
    ));
}

#[test]
fn f6_priority_levels_and_round_robin_slices() {
    assert_snapshot!(check(
        "shared\njoin A prio=1\njoin B prio=0\njoin C prio=0\nflow A 100\nflow B 2\nflow C 2\npub m*8\nstate\n"
    ));
}

#[test]
fn f6_subscription_unacked_limit_blocks_normal_reads() {
    assert_snapshot!(check(
        "shared\nmax_unacked_sub 4\njoin A\nflow A 100\npub m*8\nstate\nack A 1:0 1:1 1:2 1:3\nstate\nack A 1:4\nstate\n"
    ));
}

#[test]
fn f7_normal_read_never_sends_a_hash_waiting_in_replay() {
    // k3 1:0 nacked and A has no permits left for the replay; a later k3 waits behind it.
    assert_snapshot!(check(
        "key_shared\njoin A\nflow A 1\npub k3\nnack A 1:0\npub k3 k1\nexplain k3\nstate\nflow A 5\nstate\n"
    ));
}

#[test]
fn f8_expiry_of_undelivered_entries_on_shared() {
    assert_snapshot!(check(
        "shared\njoin A\npub a b c\nadvance 5\npub d\nexpire 3\nflow A 10\nstate\n"
    ));
}

#[test]
fn f9_chunks_on_shared_stay_on_one_consumer() {
    assert_snapshot!(check(
        "shared\njoin A\njoin B\nflow A 10\nflow B 10\nchunks u1 x 3\npub a b\nchunks u2 y 2\nstate\n"
    ));
}

#[test]
fn f10_restart_orphan_chunk_is_dispatched_not_replayed() {
    // Chunk 0 acked before the restart: the pin is gone; the rest is dispatched with a WARN.
    let log = check(
        "shared\njoin A\nflow A 1\nchunks u1 x 3\nack A 1:0\nrestart\njoin B\nflow B 10\nstate\n",
    );
    assert!(log.contains("send B: 1:1(x[u1#1/3])"), "{log}");
    assert!(log.contains("send B: 1:2(x[u1#2/3])"), "{log}");
    assert!(!log.contains("  replay "), "{log}");
    assert_snapshot!(log);
}

#[test]
fn f10_restart_orphan_chunk_legacy_policy_stalls() {
    let w = run("shared\norphan_replay\njoin A\nflow A 1\nchunks u1 x 3\nack A 1:0\nrestart\njoin B\nflow B 10\npub a\n");
    assert!(
        !w.received.contains_key("B"),
        "legacy policy should stall: {}",
        w.out
    );
    assert!(w.d.stats().replay_size >= 1);
}

#[test]
fn shared_consumer_removal_drops_its_pins() {
    // A got chunk 0 of u1 and leaves; chunks 1..2 go to B (re-pinned through replay, no stall).
    assert_snapshot!(check(
        "shared\njoin A\njoin B\nflow A 10\nflow B 10\nchunk u1 x 0/3\nleave A\nchunk u1 x 1/3\nchunk u1 x 2/3\npub a\nstate\n"
    ));
}

// ---------------------------------------------------------------- Key_Shared specifics

#[test]
fn hash_moves_twice_a_to_b_to_c() {
    // k1: A → B (drains on A), then B → C while B holds a k1 entry (drains on B).
    let log = check(
        "key_shared\njoin A\nflow A 10\npub k1 k0\njoin B\nflow B 10\npub k1\nack A 1:0\nadvance 10\njoin C\nflow C 10\npub k1\nexplain k1\nstate\nack B 1:2\nadvance 10\nstate\n",
    );
    assert!(
        log.find("send C: 1:3(k1)").unwrap() > log.find("> ack B 1:2").unwrap(),
        "{log}"
    );
    assert_snapshot!(log);
}

#[test]
fn hash_moves_twice_before_the_first_drain_ends() {
    // k1 moves A → B → C while A still holds 1:0: C waits for A; 1:1 and 1:2 reach C in order.
    let log = check(
        "key_shared\njoin A\nflow A 10\npub k1\njoin B\nflow B 10\npub k1\njoin C\nflow C 10\npub k1\nexplain k1\nstate\nack A 1:0\nadvance 10\nstate\n",
    );
    assert!(log.contains("send C: 1:1(k1) 1:2(k1)"), "{log}");
    assert_snapshot!(log);
}

#[test]
fn out_of_order_mode_has_no_draining() {
    assert_snapshot!(check(
        "key_shared ooo\njoin A\nflow A 10\npub k1 k2\njoin B\nflow B 10\npub k1 k2\nstate\n"
    ));
}

#[test]
fn exclusive_mode_unassigned_hashes_wait_in_replay() {
    // A covers [0, 32767] only; keys whose slot is above wait in replay until C covers them.
    assert_snapshot!(check(
        "key_shared exclusive\njoin A ranges=0-32767\nflow A 10\npub k1 k2 k3 k4 k5 k6\nstate\nexplain k1\njoin B ranges=100-200\njoin C ranges=32768-65535\nflow C 10\nstate\n"
    ));
}

#[test]
fn chunked_message_half_delivered_when_a_consumer_joins() {
    // A gets chunk 0 of u1 (key k1); B joins and k1 moves to B. The rest of u1 goes to A; the
    // next k1 message waits until A acked all of u1, then goes to B.
    let log = check(
        "key_shared\njoin A\nflow A 10\nchunk u1 k1 0/3\njoin B\nflow B 10\nchunk u1 k1 1/3\nchunk u1 k1 2/3\npub k1\nstate\nack A 1:0 1:1\nadvance 10\nstate\nack A 1:2\nadvance 10\nstate\n",
    );
    assert!(log.contains("send A: 1:1(k1[u1#1/3])"), "{log}");
    assert!(log.contains("send A: 1:2(k1[u1#2/3])"), "{log}");
    let b = log.find("send B: 1:3(k1)").expect("k1 reaches B");
    assert!(b > log.find("> ack A 1:2").unwrap(), "{log}");
    assert_snapshot!(log);
}

#[test]
fn look_ahead_reads_past_blocked_keys_within_the_limit() {
    assert_snapshot!(check(
        "key_shared\nlook_ahead 2 0\njoin A\nflow A 10\npub k1\njoin B\nflow B 10\npub k1 k1 k1 k1 k1 k3 k3\nstate\n"
    ));
}

#[test]
fn read_result_discarded_when_an_earlier_position_entered_replay() {
    use cursor::Position;
    use dispatcher::{ConsumerSpec, DispatchCommand, Dispatcher, DispatcherConfig, NoopWaker};
    use std::sync::Arc;
    let mut d = Dispatcher::new(DispatcherConfig::key_shared(), Arc::new(NoopWaker));
    d.handle_consumer_added(0, ConsumerSpec::new(1, "A"))
        .unwrap();
    d.handle_flow(0, dispatcher::ConsumerId(1), 10);
    let mut ledger = cursor::InMemoryLedger::new(100);
    let mut cur = cursor::ManagedCursor::new("s", &ledger, cursor::MemoryStore::new());
    use cursor::Ledger;
    let mut meta = cursor::EntryMeta::simple(0, 1);
    meta.ordering_key = Some(b"k3".to_vec());
    for _ in 0..3 {
        ledger.append(meta.clone());
    }
    // First read: one entry, sent.
    assert_eq!(
        d.poll_command(),
        Some(DispatchCommand::Read { max_entries: 1 })
    );
    let e = cur.read(&ledger, 1);
    d.handle_read_complete(0, e, true);
    assert!(matches!(
        d.poll_command(),
        Some(DispatchCommand::Send { .. })
    ));
    // Second read in flight; meanwhile A nacks 1:0 (an earlier position enters replay).
    assert_eq!(
        d.poll_command(),
        Some(DispatchCommand::Read { max_entries: 2 })
    );
    let e = cur.read(&ledger, 2);
    d.handle_redeliver(0, dispatcher::ConsumerId(1), &[Position::new(1, 0)]);
    d.handle_read_complete(0, e, false);
    assert_eq!(d.stats().read_results_discarded, 1);
    assert_eq!(
        d.poll_command(),
        Some(DispatchCommand::Replay {
            positions: vec![
                Position::new(1, 0),
                Position::new(1, 1),
                Position::new(1, 2)
            ]
        })
    );
}

#[test]
fn draining_timeout_force_releases_with_a_counter() {
    let w = run("key_shared\ndraining_timeout 100\njoin A\nflow A 10\npub k1\njoin B\nflow B 10\npub k1\nadvance 50\nadvance 60\n");
    assert_eq!(w.d.stats().draining_force_released, 1, "{}", w.out);
    assert!(
        w.received.get("B").is_some_and(|v| !v.is_empty()),
        "{}",
        w.out
    );
    // Off by default: nothing released.
    let w = run("key_shared\njoin A\nflow A 10\npub k1\njoin B\nflow B 10\npub k1\nadvance 500\n");
    assert_eq!(w.d.stats().draining_force_released, 0);
    assert!(!w.received.contains_key("B"));
}

#[test]
fn why_blocked_reports_each_reason() {
    let log = check(
        "key_shared exclusive\njoin A ranges=0-32767\nexplain k3\nexplain k1\nflow A 1\npub k1 k1\nexplain k1\nnack A 1:0\nexplain k1\njoin B ranges=40000-40001\n",
    );
    assert_snapshot!(log);
}

#[test]
fn chunk_pin_decided_within_the_read_batch() {
    // Found by the simulator: chunk 0 and chunk 1 of u1 (k1, owned by B) arrive in one read and
    // B has one permit. Chunk 1 must wait in replay pinned to B (not count as an orphan) and
    // follow B after C joins and k1 moves to C (draining on B), instead of waiting for C.
    let script = "key_shared\njoin A\njoin B\nflow A 10\npub k0 k0 k0\nflow B 1\nchunks u1 k1 2\nstate\njoin C\nflow C 5\nflow B 1\nstate\n";
    let log = check(script);
    assert!(log.contains("1:3 1:4"), "both chunks in one read: {log}");
    assert!(log.contains("send B: 1:4(k1[u1#1/2])"), "{log}");
    assert_eq!(run(script).d.stats().orphan_chunks, 0);
    assert_snapshot!(log);
}

#[test]
fn a_half_delivered_chunked_message_keeps_its_key_on_its_consumer() {
    // Found by the simulator: chunk 0 of u1 (k1) on A; B joins (k1 drains on A); message X of
    // k1 (published between the chunks) and chunk 1 follow u1 to A, so A's client completes X
    // and then u1 in position order (a chunked message counts at its last chunk) and nothing
    // waits for something queued behind it. Once u1's last chunk is out, k1 is B's again and
    // waits for A's acks.
    let log = check(
        "key_shared\njoin A\nflow A 10\nchunk u1 k1 0/2\njoin B\nflow B 10\npub k1\nchunk u1 k1 1/2\npub k1\nstate\nack A 1:0 1:1 1:2\nadvance 10\nstate\n",
    );
    assert!(log.contains("send A: 1:1(k1)"), "{log}");
    assert!(log.contains("send A: 1:2(k1[u1#1/2])"), "{log}");
    let later = log.find("send B: 1:3(k1)").expect("the next k1 reaches B");
    assert!(later > log.find("> ack A 1:0 1:1 1:2").unwrap(), "{log}");
    assert_snapshot!(log);
}

#[test]
fn a_later_chunk_waits_for_its_first_chunk_back_in_replay() {
    // Found by the simulator (broker reads that complete later): a message's first chunk went
    // to a consumer whose send the shell refused, so it went back to replay (no pin left),
    // while a read holding the message's last chunk was in flight. Dispatched as it came, that
    // last chunk went out as an orphan ahead of its first chunk, and the message was split
    // across consumers. The later chunk now waits in replay until its first chunk is assigned
    // again (and pins the message).
    use cursor::{ChunkMeta, EntryMeta, Ledger, Position};
    use dispatcher::{
        ConsumerId, ConsumerSpec, DispatchCommand, Dispatcher, DispatcherConfig, NoopWaker,
    };
    use std::sync::Arc;
    let mut d = Dispatcher::new(DispatcherConfig::shared(), Arc::new(NoopWaker));
    for id in [1, 2] {
        let name = if id == 1 { "A" } else { "B" };
        d.handle_consumer_added(0, ConsumerSpec::new(id, name))
            .unwrap();
        d.handle_flow(0, ConsumerId(id), 10);
    }
    let mut ledger = cursor::InMemoryLedger::new(100);
    let mut cur = cursor::ManagedCursor::new("s", &ledger, cursor::MemoryStore::new());
    let chunk = |chunk_id| {
        let mut m = EntryMeta::simple(0, 1);
        m.chunk = Some(ChunkMeta {
            uuid: "u1".into(),
            chunk_id,
            num_chunks: 2,
            total_size: 2,
        });
        m
    };
    ledger.append(chunk(0));
    ledger.append(EntryMeta::simple(0, 1));
    ledger.append(chunk(1));
    assert_eq!(
        d.poll_command(),
        Some(DispatchCommand::Read { max_entries: 1 })
    );
    d.handle_read_complete(0, cur.read(&ledger, 1), true);
    let Some(DispatchCommand::Send { consumer, entries }) = d.poll_command() else {
        panic!("the first chunk is sent");
    };
    // The next read goes out; meanwhile the shell refuses the first chunk's send.
    assert_eq!(
        d.poll_command(),
        Some(DispatchCommand::Read { max_entries: 2 })
    );
    let read = cur.read(&ledger, 2);
    d.handle_chunks_undelivered(0, consumer, &entries);
    d.handle_send_refused(0, consumer, &[Position::new(1, 0)]);
    d.handle_read_complete(0, read, true);
    let mut sent = Vec::new();
    for _ in 0..100 {
        let Some(c) = d.poll_command() else { break };
        match c {
            DispatchCommand::Send { consumer, entries } => {
                sent.extend(entries.iter().map(|e| (e.position, consumer)));
            }
            DispatchCommand::Replay { positions } => {
                let e = cur.replay(&ledger, &positions);
                d.handle_replay_complete(0, e.entries, &e.already_acked);
            }
            DispatchCommand::SetTimer { at } => d.handle_timeout(at),
            DispatchCommand::Read { .. } => break,
            _ => {}
        }
    }
    let first = sent.iter().position(|(p, _)| *p == Position::new(1, 0));
    let last = sent.iter().position(|(p, _)| *p == Position::new(1, 2));
    assert!(
        first.is_some() && first < last,
        "first chunk before the last: {sent:?}"
    );
    let (_, to) = sent[first.unwrap()];
    assert_eq!(
        sent[last.unwrap()].1,
        to,
        "one consumer for the message: {sent:?}"
    );
    assert_eq!(d.stats().orphan_chunks, 0);
}
