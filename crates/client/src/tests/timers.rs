//! Ack timeout, nack tracker (delay, backoff, precision) and batch-index acks.

use super::{check, consumer, drain, id, msg};
use crate::{
    AckError, Backoff, BatchInfo, Command, ConsumerConfig, EntryId, IncomingMessage, MessageId,
    NackError, RedeliverEntry,
};

fn cfg() -> ConsumerConfig {
    ConsumerConfig {
        receiver_queue_size: 100,
        ..ConsumerConfig::default()
    }
}

fn plain(e: u64) -> RedeliverEntry {
    RedeliverEntry {
        entry: EntryId::new(super::L, e),
        acked_indexes: vec![],
    }
}

#[test]
fn ack_timeout_is_off_by_default() {
    let mut c = consumer(cfg());
    let e = c.connect(0);
    c.on_message(0, msg(e, 1, None)).ok();
    assert!(c.receive(0).is_some());
    assert_eq!(c.next_timer(), None);
    c.on_timer(10_000_000);
    assert!(!drain(&mut c)
        .iter()
        .any(|c| matches!(c, Command::RedeliverUnacked(_))));
}

#[test]
fn ack_timeout_redelivers_in_tick_buckets() {
    let mut c = consumer(ConsumerConfig {
        ack_timeout: Some(1000),
        ack_timeout_tick: 1000,
        ..cfg()
    });
    let e = c.connect(0);
    for i in 1..=3 {
        c.on_message(0, msg(e, i, None)).ok();
    }
    assert!(c.receive(500).is_some()); // 1: due 1500 → bucket 2000
    assert!(c.receive(900).is_some()); // 2: due 1900 → bucket 2000
    assert!(c.receive(1000).is_some()); // 3: due 2000 → bucket 2000
    drain(&mut c);
    assert_eq!(c.ack(1200, id(2)), Ok(()));
    drain(&mut c);
    assert_eq!(c.next_timer(), Some(2000));
    c.on_timer(1999);
    assert!(drain(&mut c).is_empty());
    c.on_timer(2000);
    assert_eq!(
        drain(&mut c),
        vec![Command::RedeliverUnacked(vec![plain(1), plain(3)])]
    );
    assert_eq!(c.stats().ack_timeouts, 2);
    assert_eq!(c.next_timer(), None);
    // Still in the application's hands: a late ack goes through.
    assert_eq!(c.ack(2100, id(1)), Ok(()));
}

#[test]
fn ack_timeout_removes_queued_copies() {
    let mut c = consumer(ConsumerConfig {
        ack_timeout: Some(1000),
        receiver_queue_size: 4,
        ..cfg()
    });
    let e = c.connect(0);
    c.on_message(0, msg(e, 1, None)).ok();
    assert!(c.receive(0).is_some());
    // A copy is already back in the queue (e.g. a redelivery raced the timeout).
    c.on_message(10, msg(e, 1, None)).ok();
    c.on_message(10, msg(e, 2, None)).ok();
    drain(&mut c);
    c.on_timer(1000);
    // The queued copy leaves (its permit returns: 1 taken + 1 removed = 2 ≥ 4/2).
    assert_eq!(
        drain(&mut c),
        vec![Command::Flow(2), Command::RedeliverUnacked(vec![plain(1)])]
    );
    assert_eq!(c.receive(1000).map(|d| d.id), Some(id(2)));
}

#[test]
fn nack_waits_the_delay_truncated_to_the_precision() {
    let out = check(
        cfg(),
        "connect
         push 1
         push 2
         push 3
         recv*
         at 1000
         nack 1
         at 1100
         nack 2
         timer
         at 60927
         timer
         at 60928
         timer
         timer",
    );
    insta::assert_snapshot!(out);
}

#[test]
fn nack_precision_zero_is_exact_and_more_bits_come_earlier() {
    for (bits, due) in [(0, 61_000), (8, 60_928), (12, 57_344)] {
        let mut c = consumer(ConsumerConfig {
            nack_precision_bits: bits,
            ..cfg()
        });
        let e = c.connect(0);
        c.on_message(0, msg(e, 1, None)).ok();
        let m = c.receive(0).map(|d| d.id).unwrap_or_default();
        assert_eq!(c.nack(1000, m), Ok(()));
        assert_eq!(c.next_timer(), Some(due), "bits {bits}");
    }
}

#[test]
fn nack_backoff_uses_the_redelivery_count() {
    let mut c = consumer(ConsumerConfig {
        nack_backoff: Some(Backoff::Exponential {
            min: 1000,
            max: 10_000,
            multiplier: 3,
        }),
        nack_precision_bits: 0,
        ..cfg()
    });
    let e = c.connect(0);
    let mut dues = Vec::new();
    for (i, count) in [0u32, 1, 2, 3].into_iter().enumerate() {
        let m = IncomingMessage {
            redelivery_count: count,
            ..msg(e, i as u64, None)
        };
        c.on_message(0, m).ok();
        let d = c.receive(0).map(|d| d.id).unwrap_or_default();
        assert_eq!(c.nack(0, d), Ok(()));
        dues.push(c.next_timer());
        c.on_timer(u64::MAX);
        drain(&mut c);
    }
    assert_eq!(dues, vec![Some(1000), Some(3000), Some(9000), Some(10_000)]);
    assert_eq!(Backoff::Fixed(500).delay(7), 500);
}

#[test]
fn nack_of_unknown_or_acked_ids_is_an_error() {
    let mut c = consumer(cfg());
    let e = c.connect(0);
    assert_eq!(c.nack(0, id(1)), Err(NackError::NotOutstanding(id(1))));
    c.on_message(0, msg(e, 1, None)).ok();
    assert_eq!(
        c.nack(0, id(1)),
        Err(NackError::NotOutstanding(id(1))),
        "queued, not handed"
    );
    assert!(c.receive(0).is_some());
    assert_eq!(c.ack(0, id(1)), Ok(()));
    assert_eq!(c.nack(0, id(1)), Err(NackError::NotOutstanding(id(1))));
    assert_eq!(c.ack(0, id(1)), Err(AckError::NotOutstanding(id(1))));
}

fn batch(epoch: u64, e: u64, index: u32, size: u32) -> IncomingMessage {
    IncomingMessage {
        epoch,
        id: MessageId::batched(super::L, e, index),
        batch: Some(BatchInfo { index, size }),
        ..IncomingMessage::default()
    }
}

#[test]
fn batch_indexes_are_acked_one_by_one_then_the_entry() {
    let mut c = consumer(cfg());
    let e = c.connect(0);
    for i in 0..3 {
        c.on_message(0, batch(e, 5, i, 3)).ok();
    }
    let got: Vec<_> = std::iter::from_fn(|| c.receive(0)).map(|d| d.id).collect();
    assert_eq!(got.len(), 3);
    drain(&mut c);
    for i in [2, 0, 1] {
        assert_eq!(c.ack(0, MessageId::batched(super::L, 5, i)), Ok(()));
    }
    // Acks not yet polled share one command.
    assert_eq!(
        drain(&mut c),
        vec![Command::Ack(vec![
            MessageId::batched(super::L, 5, 2),
            MessageId::batched(super::L, 5, 0),
            MessageId::new(super::L, 5),
        ])]
    );
    assert_eq!(
        c.ack(0, MessageId::batched(super::L, 5, 1)),
        Err(AckError::NotOutstanding(MessageId::batched(super::L, 5, 1)))
    );
}

#[test]
fn nack_of_one_batch_index_redelivers_the_entry_with_the_acked_indexes() {
    let out = check(
        ConsumerConfig {
            nack_delay: 1000,
            nack_precision_bits: 0,
            ..cfg()
        },
        "connect
         push 5#0 batch=0/3
         push 5#1 batch=1/3
         push 5#2 batch=2/3
         recv*
         ack 5#0
         nack 5#1
         at 1000
         timer
         # the broker resends the entry; the acked index is skipped by the client too
         push 5#0 batch=0/3 redel=1
         push 5#1 batch=1/3 redel=1
         push 5#2 batch=2/3 redel=1
         recv*
         ack 5#1
         ack 5#2
         stats",
    );
    insta::assert_snapshot!(out);
}

#[test]
fn nacks_of_a_chunked_message_redeliver_all_its_chunks_together() {
    let out = check(
        ConsumerConfig {
            nack_delay: 1000,
            nack_precision_bits: 0,
            ..cfg()
        },
        "connect
         push 1 chunk=u:0/3
         push 2
         push 3 chunk=u:1/3
         push 4 chunk=u:2/3
         recv*
         nack 4
         nack 2
         at 1000
         timer",
    );
    insta::assert_snapshot!(out);
}

#[test]
fn a_huge_claimed_batch_size_costs_nothing_until_acked() {
    let mut c = consumer(cfg());
    let e = c.connect(0);
    c.on_message(0, batch(e, 9, 3, u32::MAX)).ok();
    let d = c.receive(0).map(|d| d.id);
    assert_eq!(d, Some(MessageId::batched(super::L, 9, 3)));
    drain(&mut c);
    assert_eq!(c.ack(0, MessageId::batched(super::L, 9, 3)), Ok(()));
    assert_eq!(
        drain(&mut c),
        vec![Command::Ack(vec![MessageId::batched(super::L, 9, 3)])]
    );
}

#[test]
fn copies_of_recently_acked_messages_are_dropped() {
    let out = check(
        ConsumerConfig {
            receiver_queue_size: 4,
            ..cfg()
        },
        "connect
         push 1
         recv
         # a copy sent before the broker saw the ack: queued, then acked, then dropped on receive
         push 1
         ack 1
         push 2
         recv*
         # a copy arriving after the ack is dropped too
         push 1
         push 3
         recv*
         stats",
    );
    insta::assert_snapshot!(out);
}

/// An ack lost with its connection: the broker redelivers the message on the next one. The
/// copy must not be processed again, and must be acked again, or the broker keeps it pending
/// forever (the simulator's note on the recent-ack filter across reconnects).
#[test]
fn copies_of_acked_messages_after_a_reconnect_are_acked_again() {
    let out = check(
        ConsumerConfig {
            receiver_queue_size: 4,
            ..cfg()
        },
        "connect
         push 1
         push 2#0 batch=0/2
         push 2#1 batch=1/2
         push 3 chunk=u:0/2
         push 4 chunk=u:1/2
         recv*
         ack 1
         ack 2#0
         ack 2#1
         ack 4
         # the acks die with the connection; the broker redelivers all of it
         connect
         push 1
         push 2#0 batch=0/2
         push 2#1 batch=1/2
         push 3 chunk=u:0/2
         push 4 chunk=u:1/2
         push 5
         recv*
         stats",
    );
    insta::assert_snapshot!(out);
}

#[test]
fn due_nacks_are_redelivered_in_groups_of_at_most_1000() {
    let mut c = consumer(ConsumerConfig {
        receiver_queue_size: 2000,
        nack_delay: 1000,
        ..cfg()
    });
    let e = c.connect(0);
    for i in 0..1500 {
        c.on_message(0, msg(e, i, None)).ok();
    }
    while let Some(d) = c.receive(0) {
        assert_eq!(c.nack(0, d.id), Ok(()));
    }
    drain(&mut c);
    c.on_timer(1000);
    let sizes: Vec<usize> = drain(&mut c)
        .iter()
        .map(|cmd| match cmd {
            Command::RedeliverUnacked(es) => es.len(),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(sizes, vec![1000, 500]);
    assert_eq!(c.stats().redeliveries_requested, 1500);
}
