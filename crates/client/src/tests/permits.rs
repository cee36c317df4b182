//! Receive queue and flow permits.

use super::{check, consumer, drain, msg};
use crate::{BatchInfo, Command, ConsumerConfig, IncomingMessage, MessageId};

fn q(n: u32) -> ConsumerConfig {
    ConsumerConfig {
        receiver_queue_size: n,
        ..ConsumerConfig::default()
    }
}

#[test]
fn connect_flows_the_queue_size_and_refills_at_half() {
    let out = check(
        q(6),
        "connect
         push 1
         push 2
         push 3
         push 4
         recv
         recv
         recv
         recv
         recv",
    );
    insta::assert_snapshot!(out);
}

#[test]
fn queue_of_one_returns_every_permit_at_once() {
    let mut c = consumer(q(1));
    let e = c.connect(0);
    assert_eq!(drain(&mut c), vec![Command::Flow(1)]);
    for i in 0..3 {
        c.on_message(0, msg(e, i, None)).ok();
        assert!(c.receive(0).is_some());
        assert_eq!(drain(&mut c), vec![Command::Flow(1)]);
    }
}

#[test]
fn zero_queue_sends_one_permit_per_receive_that_waits() {
    let mut c = consumer(q(0));
    assert_eq!(c.receive(0), None, "not connected");
    assert!(drain(&mut c).is_empty(), "no flow before connect");
    let e = c.connect(0);
    assert!(
        drain(&mut c).is_empty(),
        "a zero queue sends no initial flow"
    );
    assert_eq!(c.receive(0), None);
    assert_eq!(drain(&mut c), vec![Command::Flow(1)]);
    assert_eq!(c.receive(1), None);
    assert!(drain(&mut c).is_empty(), "one permit outstanding at a time");
    c.on_message(2, msg(e, 7, None)).ok();
    assert_eq!(c.receive(2).map(|d| d.id), Some(super::id(7)));
    assert!(
        drain(&mut c).is_empty(),
        "taking the message returns nothing"
    );
    assert_eq!(c.receive(3), None);
    assert_eq!(drain(&mut c), vec![Command::Flow(1)]);
}

/// Bug found by the simulator (known-issues/zero-queue-batch, seed 4): the broker charges a
/// batch entry its whole message count against the one permit, so the balance goes negative;
/// a zero-queue client that only ever sent `Flow(1)` never repaid the debt and stalled.
#[test]
fn zero_queue_repays_the_debt_of_a_batch_entry() {
    let mut c = consumer(q(0));
    let e = c.connect(0);
    assert_eq!(c.receive(0), None);
    assert_eq!(drain(&mut c), vec![Command::Flow(1)]);
    // One permit, one batch entry of 3 messages: the broker's balance is 1 - 3 = -2.
    for i in 0..3 {
        let m = IncomingMessage {
            epoch: e,
            id: MessageId::batched(super::L, 5, i),
            batch: Some(BatchInfo { index: i, size: 3 }),
            ..IncomingMessage::default()
        };
        assert_eq!(c.on_message(1, m), Ok(()));
    }
    for i in 0..3 {
        let got = c.receive(2).map(|d| d.id);
        assert_eq!(got, Some(MessageId::batched(super::L, 5, i)));
        assert!(drain(&mut c).is_empty(), "no flow while messages wait");
    }
    // Empty: repay 2 and ask for 1, so the broker's balance is 1 again.
    assert_eq!(c.receive(3), None);
    assert_eq!(drain(&mut c), vec![Command::Flow(3)]);
    assert_eq!(c.receive(4), None);
    assert!(drain(&mut c).is_empty(), "one permit outstanding at a time");
    c.on_message(5, msg(e, 6, None)).ok();
    assert_eq!(c.receive(5).map(|d| d.id), Some(super::id(6)));
    assert_eq!(c.receive(6), None);
    assert_eq!(drain(&mut c), vec![Command::Flow(1)], "no debt left");
    // A new connection starts a new balance.
    let _ = c.connect(7);
    assert_eq!(c.receive(7), None);
    assert_eq!(drain(&mut c), vec![Command::Flow(1)]);
}

#[test]
fn reconnect_clears_the_queue_and_ignores_the_old_connection() {
    let mut c = consumer(q(4));
    let e1 = c.connect(0);
    for i in 0..3 {
        c.on_message(0, msg(e1, i, None)).ok();
    }
    let m0 = c.receive(0).map(|d| d.id);
    assert_eq!(m0, Some(super::id(0)));
    drain(&mut c);
    let e2 = c.connect(5);
    assert_eq!(e2, e1 + 1);
    assert_eq!(
        drain(&mut c),
        vec![Command::Flow(4)],
        "fresh flow, accumulated permit dropped"
    );
    assert_eq!(c.stats().queued, 0);
    assert_eq!(
        c.stats().outstanding,
        1,
        "the application still holds message 0"
    );
    // In flight on the old connection: dropped, no permit back.
    c.on_message(6, msg(e1, 1, None)).ok();
    assert_eq!(c.stats().dropped_old_epoch, 1);
    assert_eq!(c.receive(6), None);
    assert!(drain(&mut c).is_empty());
    // The old message can still be acked on the new connection.
    assert_eq!(c.ack(7, super::id(0)), Ok(()));
    assert_eq!(drain(&mut c), vec![Command::Ack(vec![super::id(0)])]);
    // A message before any connect is dropped too.
    let mut fresh = consumer(q(4));
    fresh.on_message(0, msg(0, 1, None)).ok();
    assert_eq!(fresh.stats().dropped_old_epoch, 1);
}

#[test]
fn chunks_return_permits_at_once_and_the_message_takes_one() {
    let out = check(
        q(4),
        "connect
         push 1 chunk=u:0/3
         push 2 chunk=u:1/3
         stats
         push 3 chunk=u:2/3
         stats
         recv
         ack 3",
    );
    insta::assert_snapshot!(out);
}
