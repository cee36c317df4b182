//! Unit tests per public operation: typed errors, documented no-ops and edge cases.

mod common;

use std::sync::Arc;

use common::run;
use cursor::{MarkDeleteMove, MarkDeleteReason, Position};
use dispatcher::{
    AckHandleError, AddConsumerError, BlockReason, ConsumerId, ConsumerSpec, DispatchCommand,
    DispatchGate, Dispatcher, DispatcherConfig, HashRange, KeySharedConfig, KeySharedMode,
    NoopWaker, SelectorError, SubscriptionType, Verdict,
};

fn ks(mode: KeySharedMode) -> DispatcherConfig {
    DispatcherConfig::new(SubscriptionType::KeyShared(KeySharedConfig {
        mode,
        allow_out_of_order: false,
    }))
}

#[test]
fn defaults_follow_pulsar() {
    let c = DispatcherConfig::shared();
    assert_eq!((c.min_read_batch, c.max_read_batch), (1, 100));
    assert_eq!(c.max_round_robin_batch, 20);
    assert_eq!(c.max_unacked_per_consumer, 50_000);
    assert_eq!(c.max_unacked_per_subscription, 200_000);
    assert_eq!(c.unblocking_interval, 10);
    assert!(!c.legacy_mark_delete_cleanup);
    assert_eq!(c.draining_timeout, None);
    let k = DispatcherConfig::key_shared();
    assert_eq!(
        k.subscription,
        SubscriptionType::KeyShared(KeySharedConfig {
            mode: KeySharedMode::ConsistentHashing { points: 100 },
            allow_out_of_order: false
        })
    );
}

#[test]
fn duplicate_consumer_is_a_typed_error_and_changes_nothing() {
    let mut d = Dispatcher::new(DispatcherConfig::key_shared(), Arc::new(NoopWaker));
    d.handle_consumer_added(0, ConsumerSpec::new(1, "a"))
        .unwrap();
    let e = d
        .handle_consumer_added(0, ConsumerSpec::new(1, "b"))
        .unwrap_err();
    assert_eq!(e, AddConsumerError::DuplicateConsumer(ConsumerId(1)));
    assert_eq!(e.to_string(), "consumer c1 is already connected");
    assert_eq!(d.consumer_ids(), vec![ConsumerId(1)]);
}

#[test]
fn exclusive_range_conflict_is_a_typed_error() {
    let mut d = Dispatcher::new(ks(KeySharedMode::Sticky), Arc::new(NoopWaker));
    d.handle_consumer_added(
        0,
        ConsumerSpec::new(1, "a").with_ranges(vec![HashRange::new(0, 100)]),
    )
    .unwrap();
    let e = d
        .handle_consumer_added(
            0,
            ConsumerSpec::new(2, "b").with_ranges(vec![HashRange::new(50, 60)]),
        )
        .unwrap_err();
    assert!(matches!(
        e,
        AddConsumerError::Selector(SelectorError::RangeConflict {
            owner: ConsumerId(1),
            ..
        })
    ));
    let e = d
        .handle_consumer_added(0, ConsumerSpec::new(3, "c"))
        .unwrap_err();
    assert_eq!(e, AddConsumerError::Selector(SelectorError::EmptyRanges));
    assert_eq!(d.consumer_ids(), vec![ConsumerId(1)]);
}

#[test]
fn unknown_consumers_are_documented_no_ops() {
    let mut d = Dispatcher::new(DispatcherConfig::shared(), Arc::new(NoopWaker));
    assert!(!d.handle_flow(0, ConsumerId(7), 10));
    assert!(!d.handle_consumer_removed(0, ConsumerId(7)));
    assert_eq!(
        d.handle_redeliver(0, ConsumerId(7), &[Position::new(1, 0)]),
        0
    );
    assert_eq!(d.handle_redeliver_all(0, ConsumerId(7)), 0);
    assert_eq!(d.poll_command(), None);
    assert_eq!(d.poll_timeout(), None);
    assert_eq!(d.why_blocked(5), BlockReason::UnassignedRange);
}

#[test]
fn no_read_without_permits_then_adaptive_batch() {
    let mut d = Dispatcher::new(DispatcherConfig::shared(), Arc::new(NoopWaker));
    d.handle_consumer_added(0, ConsumerSpec::new(1, "a"))
        .unwrap();
    assert_eq!(d.poll_command(), None);
    d.handle_flow(0, ConsumerId(1), 3);
    assert_eq!(
        d.poll_command(),
        Some(DispatchCommand::Read { max_entries: 1 })
    );
    // Only one read at a time.
    d.handle_flow(0, ConsumerId(1), 3);
    assert_eq!(d.poll_command(), None);
}

#[test]
fn ack_errors_are_typed_and_leave_pending_untouched() {
    let mut w = run("shared\njoin A\nflow A 5\npub a b\n");
    let a = w.id("A");
    let e = w.ack.ack(a, Position::new(1, 99)).unwrap_err();
    assert!(
        matches!(e, AckHandleError::Cursor { position, .. } if position == Position::new(1, 99))
    );
    assert_eq!(w.d.pending_positions(a).len(), 2);
    // First ack clears, a duplicate only reaches the cursor.
    let o = w.ack.ack(a, Position::new(1, 0)).unwrap();
    assert!(o.newly_acked);
    assert_eq!(o.cleared_on, Some(a));
    assert_eq!(o.messages, 1);
    let o = w.ack.ack(a, Position::new(1, 0)).unwrap();
    assert!(!o.newly_acked);
    assert_eq!(o.cleared_on, None);
    w.step("state");
    assert_eq!(w.d.stats().unacked, 1);
}

#[test]
fn shared_ack_through_another_consumer_clears_the_owner() {
    let w = run("shared\njoin A\njoin B\nflow A 1\nflow B 1\npub a b\n");
    let (a, b) = (w.id("A"), w.id("B"));
    let on_b = w.d.pending_positions(b)[0].0;
    let o = w.ack.ack(a, on_b).unwrap();
    assert_eq!(o.cleared_on, Some(b));
    assert!(w.d.pending_positions(b).is_empty());
}

#[test]
fn redeliver_only_requeues_what_the_consumer_holds() {
    let mut w = run("shared\njoin A\njoin B\nflow A 1\nflow B 1\npub a b\n");
    let (a, b) = (w.id("A"), w.id("B"));
    let on_b = w.d.pending_positions(b)[0].0;
    assert_eq!(w.d.handle_redeliver(0, a, &[on_b]), 0);
    assert_eq!(w.d.handle_redeliver(0, b, &[on_b]), 1);
    assert_eq!(w.d.redelivery_count(on_b), 1);
    assert_eq!(w.d.replay_positions(), vec![(on_b, 0)]);
}

#[test]
fn ack_moves_need_no_hook_and_reset_clears_replay() {
    let mut w = run("shared\njoin A\nflow A 2\npub a b\nnack A 1:1\n");
    let a = w.id("A");
    // Ack-reason move: pending acks stay (acks clear their own entries).
    let mv = MarkDeleteMove {
        from: Position::new(1, 0),
        to: Position::new(1, 0),
        reason: MarkDeleteReason::Ack,
        dropped: vec![],
    };
    let before = w.d.pending_positions(a);
    w.d.handle_mark_delete_moved(0, &mv);
    assert_eq!(w.d.pending_positions(a), before);
    // Reset (the caller disconnects consumers first; here one entry still waits in replay).
    assert_eq!(w.d.replay_positions().len(), 1);
    let mv = MarkDeleteMove {
        from: Position::new(1, 0),
        to: Position::new(0, 0),
        reason: MarkDeleteReason::Reset,
        dropped: vec![],
    };
    w.d.handle_mark_delete_moved(0, &mv);
    assert!(w.d.replay_positions().is_empty());
}

#[test]
fn dispatch_predicate_per_gate() {
    // A holds k1; B joins and k1 drains on A.
    let w = run("key_shared\njoin A\nflow A 10\npub k1\njoin B\nflow B 10\n");
    let (a, b) = (w.id("A"), w.id("B"));
    let h = w.d.pending_positions(a)[0].1;
    assert_eq!(
        w.d.can_dispatch(DispatchGate::SendTime, b, h),
        Verdict::Draining
    );
    assert_eq!(
        w.d.can_dispatch(DispatchGate::SendTime, a, h),
        Verdict::Allow
    );
    assert_eq!(
        w.d.can_dispatch(DispatchGate::ReplayPick, b, h),
        Verdict::Draining
    );
    assert_eq!(
        w.d.why_blocked(h),
        BlockReason::DrainingOn {
            consumer: a,
            pending: 1
        }
    );
    assert_eq!(w.d.owner_of_hash(h), Some(b));
    let st = w.d.consumer_stats();
    let sa = st.iter().find(|c| c.id == a).unwrap();
    assert_eq!(sa.draining.len(), 1);
    assert_eq!(sa.draining[0].hash, h);
    assert_eq!(sa.draining[0].pending, 1);
    assert!(sa.draining[0].blocked_attempts >= 1);
    // Shared always allows.
    let s = Dispatcher::new(DispatcherConfig::shared(), Arc::new(NoopWaker));
    assert_eq!(
        s.can_dispatch(DispatchGate::NormalRead, a, 77),
        Verdict::Allow
    );
}

#[test]
fn unblock_notifications_are_coalesced_into_one_timer() {
    let mut w = run("key_shared\njoin A\nflow A 10\npub k1 k2\njoin B\nflow B 10\npub k1 k2\n");
    let a = w.id("A");
    assert_eq!(w.d.stats().draining_hashes, 2);
    let ps: Vec<Position> = w.d.pending_positions(a).iter().map(|x| x.0).collect();
    for p in ps {
        w.ack.ack(a, p).unwrap();
    }
    w.d.handle_wake(w.now);
    assert_eq!(w.d.stats().unblock_notifications, 2);
    // One timer, at now + interval; nothing replayed before it.
    let t = w.d.poll_timeout().unwrap();
    assert_eq!(t, w.now + 10);
    let mut timers = 0;
    while let Some(c) = w.d.poll_command() {
        assert!(matches!(c, DispatchCommand::SetTimer { .. }), "{c:?}");
        timers += 1;
    }
    assert_eq!(timers, 1);
    w.step("advance 10");
    assert_eq!(w.received["B"].len(), 2);
}

#[test]
fn batch_index_acks_reduce_then_clear_the_pending_ack() {
    let mut w = run("key_shared\njoin A\nflow A 10\nbatch k1 3\n");
    let a = w.id("A");
    let p = Position::new(1, 0);
    assert_eq!(w.d.stats().unacked, 3);
    let e = w.ack.ack_batch_index(a, p, 3, &[3]).unwrap_err();
    assert!(matches!(e, AckHandleError::Cursor { .. }));
    let o = w.ack.ack_batch_index(a, p, 3, &[0]).unwrap();
    assert_eq!(
        (o.newly_acked, o.cleared_on, o.messages),
        (false, Some(a), 1)
    );
    assert_eq!(w.d.stats().unacked, 2);
    // A duplicate index changes nothing.
    let o = w.ack.ack_batch_index(a, p, 3, &[0]).unwrap();
    assert_eq!(o.messages, 0);
    assert_eq!(w.d.stats().unacked, 2);
    let o = w.ack.ack_batch_index(a, p, 3, &[1, 2]).unwrap();
    assert!(o.newly_acked);
    assert_eq!(o.cleared_on, Some(a));
    assert_eq!(w.d.stats().unacked, 0);
    assert!(w.d.pending_positions(a).is_empty());
    w.step("state");
}

#[test]
fn normal_read_gate_refuses_a_hash_waiting_in_replay() {
    // A nacks a k3 entry while it has no permits: the entry waits in replay with its hash.
    let w = run("key_shared\njoin A\nflow A 1\npub k3\nnack A 1:0\n");
    let a = w.id("A");
    let (p, h) = w.d.replay_positions()[0];
    assert_eq!(p, Position::new(1, 0));
    assert_eq!(
        w.d.can_dispatch(DispatchGate::NormalRead, a, h),
        Verdict::BehindReplay
    );
    assert_eq!(
        w.d.can_dispatch(DispatchGate::ReplayPick, a, h),
        Verdict::Allow
    );
    assert_eq!(
        w.d.can_dispatch(DispatchGate::SendTime, a, h),
        Verdict::Allow
    );
    // Out-of-order mode does not count replay hashes.
    let w = run("key_shared ooo\njoin A\nflow A 1\npub k3\nnack A 1:0\n");
    let (_, h) = w.d.replay_positions()[0];
    assert_eq!(
        w.d.can_dispatch(DispatchGate::NormalRead, w.id("A"), h),
        Verdict::Allow
    );
}

#[test]
fn consumer_bound_ack_handle_falls_back_to_the_owner() {
    let w = run("shared\njoin A\njoin B\nflow A 1\nflow B 1\npub a b\n");
    let (a, b) = (w.id("A"), w.id("B"));
    assert!(w.ack.for_consumer(ConsumerId(99)).is_none());
    let ha = w.ack.for_consumer(a).unwrap();
    assert_eq!(ha.consumer(), a);
    let on_a = w.d.pending_positions(a)[0].0;
    let on_b = w.d.pending_positions(b)[0].0;
    let o = ha.ack(on_a).unwrap();
    assert_eq!(
        (o.newly_acked, o.cleared_on, o.messages),
        (true, Some(a), 1)
    );
    // Not pending on A: the owner's pending ack is cleared (Shared clients may do this).
    let o = ha.ack(on_b).unwrap();
    assert_eq!(o.cleared_on, Some(b));
    assert_eq!(w.d.stats().unacked, 0);
    assert!(ha.ack(Position::new(1, 50)).is_err());
}

#[test]
fn delivery_extras_carry_the_redelivery_count_and_the_acked_batch_indexes() {
    let w = run(
        "key_shared\njoin A\nflow A 20\nbatch k0 3\nackidx A 1:0 3 0\nonack A 10 1:0\nadvance 10\n",
    );
    let (name, resent) = w.sends.last().cloned().unwrap();
    assert_eq!(name, "A");
    assert_eq!(resent.position, Position::new(1, 0));
    let extras = w.driver.delivery_extras(&w.d, &w.cell, &[resent]);
    assert_eq!(
        extras,
        vec![dispatcher::DeliveryExtras {
            redelivery_count: 1,
            acked_indexes: Some(vec![0]),
        }]
    );
}

/// A configuration out of range is a typed error from `try_new`; `new` raises it to the
/// nearest valid values (and logs a WARN) instead of building a dispatcher that never reads.
#[test]
fn invalid_configs_are_refused_by_try_new() {
    use dispatcher::{InvalidConfig, KeySharedConfig, KeySharedMode, SubscriptionType};
    let waker = std::sync::Arc::new(dispatcher::NoopWaker);
    let mut cfg = DispatcherConfig::key_shared();
    cfg.subscription = SubscriptionType::KeyShared(KeySharedConfig {
        mode: KeySharedMode::ConsistentHashing { points: 0 },
        allow_out_of_order: false,
    });
    assert_eq!(
        Dispatcher::try_new(cfg.clone(), waker.clone()).err(),
        Some(InvalidConfig::Zero("points"))
    );
    let mut c = DispatcherConfig::shared();
    c.min_read_batch = 10;
    c.max_read_batch = 5;
    assert_eq!(
        Dispatcher::try_new(c, waker.clone()).err(),
        Some(InvalidConfig::ReadBatchOrder { min: 10, max: 5 })
    );
    let mut c = DispatcherConfig::shared();
    c.max_round_robin_batch = 0;
    assert_eq!(
        Dispatcher::try_new(c, waker.clone()).err(),
        Some(InvalidConfig::Zero("max_round_robin_batch"))
    );
    assert!(Dispatcher::try_new(DispatcherConfig::key_shared(), waker).is_ok());
}

fn drain(d: &mut Dispatcher) -> Vec<DispatchCommand> {
    std::iter::from_fn(|| d.poll_command()).collect()
}

fn entry(e: u64, key: &str) -> cursor::Entry {
    let mut m = cursor::EntryMeta::simple(0, 10);
    m.ordering_key = Some(key.as_bytes().to_vec());
    cursor::Entry {
        position: Position::new(1, e),
        meta: std::sync::Arc::new(m),
    }
}

/// A failed read backs off (1, 2, 4 … by default) and is retried at the timer; a failure with
/// no read in flight is a no-op.
#[test]
fn a_failed_read_is_retried_with_back_off() {
    let mut d = Dispatcher::new(DispatcherConfig::shared(), Arc::new(NoopWaker));
    d.handle_consumer_added(0, ConsumerSpec::new(1, "a"))
        .unwrap();
    d.handle_flow(0, ConsumerId(1), 10);
    assert!(matches!(drain(&mut d)[..], [DispatchCommand::Read { .. }]));
    assert!(d.handle_read_failed(100));
    assert_eq!(drain(&mut d), vec![DispatchCommand::SetTimer { at: 101 }]);
    assert!(!d.handle_read_failed(100), "no read in flight");
    d.handle_timeout(101);
    assert!(matches!(drain(&mut d)[..], [DispatchCommand::Read { .. }]));
    assert!(d.handle_read_failed(101));
    assert_eq!(drain(&mut d), vec![DispatchCommand::SetTimer { at: 103 }]);
}

/// The back-off is configurable; jitter comes from the configured seed only.
#[test]
fn read_back_off_is_configurable_and_jitter_is_seeded() {
    let retry_times = |seed: u64| {
        let mut cfg = DispatcherConfig::shared();
        cfg.read_backoff_initial = 50;
        cfg.read_backoff_max = 200;
        cfg.read_backoff_jitter = 10;
        cfg.read_backoff_seed = seed;
        let mut d = Dispatcher::new(cfg, Arc::new(NoopWaker));
        d.handle_consumer_added(0, ConsumerSpec::new(1, "a"))
            .unwrap();
        d.handle_flow(0, ConsumerId(1), 10);
        let mut now = 0;
        let mut steps = Vec::new();
        for _ in 0..5 {
            assert!(matches!(drain(&mut d)[..], [DispatchCommand::Read { .. }]));
            d.handle_read_failed(now);
            let at = d.poll_timeout().unwrap();
            steps.push(at - now);
            now = at;
            drain(&mut d);
            d.handle_timeout(now);
        }
        steps
    };
    let a = retry_times(7);
    assert_eq!(a, retry_times(7), "same seed, same jitter");
    for (s, base) in a.iter().zip([50, 100, 200, 200, 200]) {
        assert!((base..=base + 10).contains(s), "{a:?}");
    }
    assert_ne!(a, retry_times(8));
}

/// Closing hands back every pending and replayed entry; afterwards joins are refused with a
/// typed error, other input is ignored and polls return nothing.
#[test]
fn close_returns_every_held_entry_and_refuses_input() {
    let mut d = Dispatcher::new(DispatcherConfig::key_shared(), Arc::new(NoopWaker));
    d.handle_consumer_added(0, ConsumerSpec::new(1, "a"))
        .unwrap();
    d.handle_flow(0, ConsumerId(1), 3);
    drain(&mut d);
    d.handle_read_complete(0, (0..3).map(|e| entry(e, "k")).collect(), true);
    drain(&mut d);
    // Entry 1 goes back to replay (a redelivery), 0 and 2 stay pending.
    d.handle_redeliver(0, ConsumerId(1), &[Position::new(1, 1)]);
    let returned = d.handle_close(5).unwrap();
    let got: Vec<_> = returned
        .iter()
        .map(|r| (r.position.entry_id, r.consumer))
        .collect();
    assert_eq!(
        got,
        vec![
            (0, Some(ConsumerId(1))),
            (1, None),
            (2, Some(ConsumerId(1)))
        ]
    );
    assert!(returned
        .iter()
        .all(|r| r.hash == returned[0].hash && r.hash != 0));
    assert_eq!(d.handle_close(6), Err(dispatcher::Closed));
    assert_eq!(
        d.handle_consumer_added(6, ConsumerSpec::new(2, "b")),
        Err(AddConsumerError::Closed)
    );
    assert!(!d.handle_flow(6, ConsumerId(1), 10));
    d.handle_entries_appended(6);
    d.handle_wake(6);
    d.handle_timeout(100);
    assert_eq!(d.poll_command(), None);
    assert_eq!(d.poll_timeout(), None);
    assert_eq!(d.poll_dead_letter(), None);
    assert_eq!(d.ensure_open(), Err(dispatcher::Closed));
}

/// The first consumer of an empty Key_Shared subscription sets its mode and
/// allow-out-of-order; while it is connected another mode is refused with a typed error;
/// once the subscription is empty again the next consumer's mode is taken.
#[test]
fn key_shared_mode_comes_from_the_first_consumer() {
    let sticky = KeySharedConfig {
        mode: KeySharedMode::Sticky,
        allow_out_of_order: true,
    };
    let auto = KeySharedConfig {
        mode: KeySharedMode::AutoSplit,
        allow_out_of_order: false,
    };
    let mut d = Dispatcher::new(DispatcherConfig::key_shared(), Arc::new(NoopWaker));
    d.handle_consumer_added(
        0,
        ConsumerSpec::new(1, "a")
            .with_ranges(vec![HashRange::new(0, 100)])
            .with_key_shared(sticky),
    )
    .unwrap();
    assert_eq!(d.config().subscription, SubscriptionType::KeyShared(sticky));
    // The Sticky selector is in use: a conflicting range is refused.
    assert!(matches!(
        d.handle_consumer_added(
            0,
            ConsumerSpec::new(2, "b")
                .with_ranges(vec![HashRange::new(50, 60)])
                .with_key_shared(sticky)
        ),
        Err(AddConsumerError::Selector(_))
    ));
    assert_eq!(
        d.handle_consumer_added(0, ConsumerSpec::new(3, "c").with_key_shared(auto)),
        Err(AddConsumerError::ModeMismatch {
            subscription: KeySharedMode::Sticky,
            consumer: ConsumerId(3),
            requested: KeySharedMode::AutoSplit,
        })
    );
    // The same mode with another allow-out-of-order joins; the subscription's setting holds.
    d.handle_consumer_added(
        0,
        ConsumerSpec::new(4, "d")
            .with_ranges(vec![HashRange::new(200, 300)])
            .with_key_shared(KeySharedConfig {
                allow_out_of_order: false,
                ..sticky
            }),
    )
    .unwrap();
    assert_eq!(d.config().subscription, SubscriptionType::KeyShared(sticky));
    d.handle_consumer_removed(0, ConsumerId(1));
    d.handle_consumer_removed(0, ConsumerId(4));
    d.handle_consumer_added(0, ConsumerSpec::new(5, "e").with_key_shared(auto))
        .unwrap();
    assert_eq!(d.config().subscription, SubscriptionType::KeyShared(auto));
}

/// A first consumer whose adoption fails in the selector leaves the subscription's settings
/// as they were.
#[test]
fn a_refused_first_consumer_changes_no_mode() {
    let before = DispatcherConfig::key_shared().subscription;
    let mut d = Dispatcher::new(DispatcherConfig::key_shared(), Arc::new(NoopWaker));
    let sticky = KeySharedConfig {
        mode: KeySharedMode::Sticky,
        allow_out_of_order: false,
    };
    assert!(d
        .handle_consumer_added(0, ConsumerSpec::new(1, "a").with_key_shared(sticky))
        .is_err());
    assert_eq!(d.config().subscription, before);
}

fn batch_entry(e: u64, messages: u32) -> cursor::Entry {
    let mut m = cursor::EntryMeta::simple(0, 10);
    m.num_messages = messages;
    cursor::Entry {
        position: Position::new(1, e),
        meta: std::sync::Arc::new(m),
    }
}

/// Reads are sized in entries: a consumer at 50 of 100 unacked messages with 10-message
/// entries asks for about 5 entries, not 50 (which would send 5 and park 45 in replay).
#[test]
fn reads_divide_permits_by_messages_per_entry() {
    let mut cfg = DispatcherConfig::shared();
    cfg.max_unacked_per_consumer = 100;
    cfg.min_read_batch = 100;
    let mut d = Dispatcher::new(cfg, Arc::new(NoopWaker));
    d.handle_consumer_added(0, ConsumerSpec::new(1, "a"))
        .unwrap();
    d.handle_flow(0, ConsumerId(1), 1000);
    assert_eq!(
        drain(&mut d),
        vec![DispatchCommand::Read { max_entries: 100 }]
    );
    // The topic has 5 entries of 10 messages: 50 unacked.
    d.handle_read_complete(0, (0..5).map(|e| batch_entry(e, 10)).collect(), false);
    let cmds = drain(&mut d);
    assert!(matches!(cmds[0], DispatchCommand::Send { .. }));
    let read = cmds.iter().find_map(|c| match c {
        DispatchCommand::Read { max_entries } => Some(*max_entries),
        _ => None,
    });
    assert_eq!(read, Some(5), "{cmds:?}");
}
