//! Failover subscriptions over the wire: one active consumer gets every message; the others
//! hear ACTIVE_CONSUMER_CHANGE and stand by; when the active one leaves (or a better one
//! joins) the next gets the unacked messages first, in order; cumulative acks are allowed.

mod common;

use std::time::Duration;

use common::{message_positions, produce, start_broker, Raw};
use cursor::Position;
use wire::proto::base_command::Type;
use wire::proto::command_ack::AckType;
use wire::proto::command_subscribe::{InitialPosition, SubType};

/// Subscribes consumer 1 of `c` as `name` with `priority` to the Failover subscription `fo`,
/// grants 100 permits, and returns whether the broker said it is active (SUCCESS and
/// ACTIVE_CONSUMER_CHANGE come in either order).
fn subscribe(c: &mut Raw, topic: &str, name: &str, priority: i32) -> bool {
    let mut cmd = wire::commands::subscribe(
        topic,
        "fo",
        1,
        1,
        SubType::Failover,
        None,
        InitialPosition::Earliest,
    );
    if let Some(s) = cmd.subscribe.as_mut() {
        s.consumer_name = Some(name.to_owned());
        s.priority_level = Some(priority);
    }
    c.send(&cmd);
    let frames = c.expect_all(&[Type::Success, Type::ActiveConsumerChange]);
    c.send(&wire::commands::flow(1, 100));
    frames
        .iter()
        .find_map(|f| f.command.active_consumer_change.as_ref())
        .and_then(|a| a.is_active)
        .unwrap_or(false)
}

/// The next ACTIVE_CONSUMER_CHANGE's `is_active`.
fn active_change(c: &mut Raw) -> bool {
    let f = c.expect(Type::ActiveConsumerChange);
    f.command
        .active_consumer_change
        .and_then(|a| a.is_active)
        .unwrap_or(false)
}

fn ack(c: &mut Raw, p: Position, kind: AckType) {
    let mut cmd = wire::commands::ack(1, wire::convert::message_id(p), None);
    if let Some(a) = cmd.ack.as_mut() {
        a.ack_type = kind as i32;
        a.request_id = Some(9);
    }
    c.send(&cmd);
    let r = c.expect(Type::AckResponse).command.ack_response.unwrap();
    assert_eq!(r.error, None, "{r:?}");
}

fn stats(b: &broker::Broker, topic: &str) -> serde_json::Value {
    common::topic_stats(b, topic)["subscriptions"]["fo"].clone()
}

#[test]
fn the_standby_takes_over_with_the_unacked_messages_in_order() {
    let b = start_broker(&[]);
    let topic = "persistent://public/default/failover";
    let mut a = Raw::connected(&b);
    let mut s = Raw::connected(&b);
    assert!(
        subscribe(&mut a, topic, "a", 0),
        "the first consumer is active"
    );
    assert!(
        !subscribe(&mut s, topic, "s", 1),
        "a worse priority level stands by"
    );
    produce(&b, topic, 5, 5);
    let got = message_positions(&mut a, 5, Duration::from_secs(5));
    assert_eq!(got.len(), 5, "{got:?}");
    assert!(
        message_positions(&mut s, 1, Duration::from_millis(300)).is_empty(),
        "the standby got a message"
    );
    let st = stats(&b, topic);
    assert_eq!(st["type"], "Failover", "{st}");
    assert_eq!(st["activeConsumerName"], "a", "{st}");

    ack(&mut a, got[0], AckType::Individual);
    ack(&mut a, got[1], AckType::Individual);
    drop(a);
    assert!(active_change(&mut s), "the standby is told it is active");
    let rest = message_positions(&mut s, 3, Duration::from_secs(5));
    assert_eq!(rest, got[2..], "the unacked messages, in order");
    assert_eq!(stats(&b, topic)["activeConsumerName"], "s");
    b.shutdown(Duration::from_secs(5));
}

#[test]
fn a_better_priority_takes_over_and_the_old_active_is_told() {
    let b = start_broker(&[]);
    let topic = "persistent://public/default/failover-priority";
    let mut low = Raw::connected(&b);
    assert!(subscribe(&mut low, topic, "low", 2));
    produce(&b, topic, 3, 1);
    let first = message_positions(&mut low, 3, Duration::from_secs(5));
    assert_eq!(first.len(), 3);
    let mut high = Raw::connected(&b);
    assert!(subscribe(&mut high, topic, "high", 0));
    assert!(
        !active_change(&mut low),
        "the old active consumer is told it stands by"
    );
    let again = message_positions(&mut high, 3, Duration::from_secs(5));
    assert_eq!(
        again, first,
        "the new active consumer gets the unacked messages"
    );
    b.shutdown(Duration::from_secs(5));
}

#[test]
fn a_cumulative_ack_is_allowed() {
    let b = start_broker(&[]);
    let topic = "persistent://public/default/failover-cumulative";
    let mut a = Raw::connected(&b);
    assert!(subscribe(&mut a, topic, "a", 0));
    produce(&b, topic, 4, 1);
    let got = message_positions(&mut a, 4, Duration::from_secs(5));
    assert_eq!(got.len(), 4);
    ack(&mut a, got[2], AckType::Cumulative);
    assert_eq!(stats(&b, topic)["msgBacklog"], 1);
    b.shutdown(Duration::from_secs(5));
}
