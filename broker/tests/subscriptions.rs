//! Subscriptions that exist before their consumers: a producer's initial subscription, and a
//! subscription that changes type while no consumer is connected (both as Pulsar does); and a
//! consumer's figures over CONSUMER_STATS; a Reader rolled back by publish time; a SUBSCRIBE
//! that may not create its topic.

mod common;

use std::time::Duration;

use common::{message_positions, metadata, start_broker, Raw};
use cursor::Position;
use wire::proto::base_command::Type;
use wire::proto::command_subscribe::{InitialPosition, SubType};

fn subscribe(b: &broker::Broker, topic: &str, sub: &str, t: SubType, at: InitialPosition) -> Raw {
    let mut c = Raw::connected(b);
    c.send(&wire::commands::subscribe(topic, sub, 1, 1, t, None, at));
    c.expect(Type::Success);
    c.send(&wire::commands::flow(1, 100));
    c
}

fn receive(c: &mut Raw, n: usize) -> Vec<Position> {
    message_positions(c, n, Duration::from_secs(5))
}

/// No MESSAGE within `ms`.
fn quiet(c: &mut Raw, ms: u64) -> bool {
    message_positions(c, usize::MAX, Duration::from_millis(ms)).is_empty()
}

fn produce(b: &broker::Broker, topic: &str, n: u64, initial_subscription: Option<&str>) {
    let mut c = Raw::connected(b);
    let mut cmd = wire::commands::producer(topic, 1, 1, None);
    if let Some(p) = cmd.producer.as_mut() {
        p.initial_subscription_name = initial_subscription.map(str::to_owned);
    }
    c.send(&cmd);
    let name = c
        .expect(Type::ProducerSuccess)
        .command
        .producer_success
        .unwrap()
        .producer_name;
    for i in 0..n {
        c.send_message(
            &wire::commands::send(1, i, 1),
            &metadata(&name, i, Some(&format!("k{i}"))),
            b"x",
        );
        c.expect(Type::SendReceipt);
    }
}

/// A dead-letter producer's `initial_subscription_name`: the subscription exists from the
/// producer on, at the earliest entry, so a consumer that comes later (at "latest", with any
/// type) still gets every dead letter. Without it the consumer started at the end and got
/// nothing.
#[test]
fn a_producers_initial_subscription_keeps_what_it_publishes() {
    let b = start_broker(&[]);
    let topic = "persistent://public/default/orders-DLQ";
    produce(&b, topic, 3, Some("dlq-readers"));
    let mut c = subscribe(
        &b,
        topic,
        "dlq-readers",
        SubType::KeyShared,
        InitialPosition::Latest,
    );
    assert_eq!(
        receive(&mut c, 3).len(),
        3,
        "the dead letters were not kept"
    );
    // A producer naming a subscription that exists changes nothing.
    produce(&b, topic, 1, Some("dlq-readers"));
    assert_eq!(receive(&mut c, 1).len(), 1);
    b.shutdown(Duration::from_secs(5));
}

/// A subscription with no consumer connected takes the type of the next subscribe, keeping its
/// cursor (what was acked is not sent again); with a consumer connected, another type is
/// refused. In memory and with `--data-dir`.
#[test]
fn an_idle_subscription_changes_type_and_keeps_its_cursor() {
    let dir = std::env::temp_dir().join(format!("broker-retype-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.to_string_lossy().into_owned();
    for args in [vec![], vec!["--data-dir", d.as_str()]] {
        let b = start_broker(&args);
        let topic = "persistent://public/default/retype";
        produce(&b, topic, 4, None);
        let mut c = subscribe(&b, topic, "s", SubType::Shared, InitialPosition::Earliest);
        let got = receive(&mut c, 4);
        assert_eq!(got.len(), 4, "{args:?}");
        for p in &got[..2] {
            c.send(&wire::commands::ack(1, wire::convert::message_id(*p), None));
        }
        // Another type while the Shared consumer is connected: refused.
        let mut other = Raw::connected(&b);
        other.send(&wire::commands::subscribe(
            topic,
            "s",
            2,
            2,
            SubType::Exclusive,
            None,
            InitialPosition::Earliest,
        ));
        let e = other.expect(Type::Error);
        assert_eq!(
            e.command.error.unwrap().error(),
            wire::proto::ServerError::ConsumerBusy,
            "{args:?}"
        );
        c.send(&wire::commands::close_consumer(1, 9));
        c.expect(Type::Success);
        // No consumer now: Exclusive is taken, and only the two unacked entries come back.
        let mut x = subscribe(
            &b,
            topic,
            "s",
            SubType::Exclusive,
            InitialPosition::Earliest,
        );
        let mut again = receive(&mut x, 2);
        again.sort();
        assert_eq!(again, got[2..].to_vec(), "{args:?}");
        assert!(quiet(&mut x, 300), "{args:?}: an acked entry came back");
        b.shutdown(Duration::from_secs(5));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// CONSUMER_STATS answers the consumer's permits, unacked messages, type and the backlog.
#[test]
fn consumer_stats_answers_the_consumers_figures() {
    let b = start_broker(&[]);
    let topic = "persistent://public/default/consumer-stats";
    let mut c = subscribe(&b, topic, "sub", SubType::Shared, InitialPosition::Earliest);
    produce(&b, topic, 3, None);
    assert_eq!(receive(&mut c, 3).len(), 3);
    let ask = wire::proto::BaseCommand {
        r#type: Type::ConsumerStats as i32,
        consumer_stats: Some(Box::new(wire::proto::CommandConsumerStats {
            request_id: 42,
            consumer_id: 1,
        })),
        ..Default::default()
    };
    c.send(&ask);
    let r = c
        .expect(Type::ConsumerStatsResponse)
        .command
        .consumer_stats_response
        .unwrap();
    assert_eq!(r.request_id, 42);
    assert_eq!(r.error_code, None);
    assert_eq!(r.available_permits, Some(97));
    assert_eq!(r.unacked_messages, Some(3));
    assert_eq!(r.msg_backlog, Some(3));
    assert_eq!(r.r#type.as_deref(), Some("Shared"));
    assert!(r.consumer_name.is_some_and(|n| !n.is_empty()));
    b.shutdown(Duration::from_secs(5));
}

/// A Reader's `start_message_rollback_duration_sec` (Java's
/// `startMessageFromRollbackDuration`) starts its subscription at the first entry published
/// within that many seconds before now, as Pulsar's does. (Before, the field was ignored: a
/// Reader from the latest id got nothing.)
#[test]
fn a_reader_rolls_back_by_publish_time() {
    let b = common::start_broker(&[]);
    let topic = "persistent://public/default/rollback";
    let mut p = Raw::connected(&b);
    let name = common::open_producer(&mut p, topic);
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let hours_ago = |h: u64| now_ms - h * 3_600_000;
    let mut positions = Vec::new();
    for (i, at) in [hours_ago(3), hours_ago(2), now_ms - 1_000, now_ms]
        .into_iter()
        .enumerate()
    {
        let mut meta = common::metadata(&name, i as u64, None);
        meta.publish_time = at;
        p.send_message(&wire::commands::send(1, i as u64, 1), &meta, b"m");
        let r = p.expect(Type::SendReceipt).command.send_receipt.unwrap();
        let id = r.message_id.unwrap();
        positions.push(Position::new(id.ledger_id, id.entry_id));
    }
    let mut cmd = wire::commands::subscribe(
        topic,
        "reader",
        1,
        1,
        SubType::Exclusive,
        None,
        InitialPosition::Latest,
    );
    if let Some(s) = cmd.subscribe.as_mut() {
        s.durable = Some(false);
        s.start_message_rollback_duration_sec = Some(3_600);
    }
    let mut r = Raw::connected(&b);
    r.send(&cmd);
    r.expect(Type::Success);
    r.send(&wire::commands::flow(1, 10));
    assert_eq!(receive(&mut r, 2), positions[2..]);
    assert!(quiet(&mut r, 200), "nothing older than an hour");
    b.shutdown(Duration::from_secs(5));
}

/// SUBSCRIBE with `force_topic_creation = false` (Java's pattern and multi-topic consumers)
/// is refused with `TopicNotFound` while the topic does not exist, and accepted once it does,
/// as Pulsar does. (Before, the field was ignored and the topic created.)
#[test]
fn a_subscribe_that_may_not_create_its_topic_is_refused_until_it_exists() {
    let b = start_broker(&[]);
    let topic = "persistent://public/default/no-force";
    let cmd = |request_id| {
        let mut cmd = wire::commands::subscribe(
            topic,
            "s",
            1,
            request_id,
            SubType::Shared,
            None,
            InitialPosition::Earliest,
        );
        if let Some(s) = cmd.subscribe.as_mut() {
            s.force_topic_creation = Some(false);
        }
        cmd
    };
    let mut c = Raw::connected(&b);
    c.send(&cmd(1));
    let e = c.expect(Type::Error).command.error.unwrap();
    assert_eq!(e.error(), wire::proto::ServerError::TopicNotFound);
    let stats = common::http(
        &b,
        "GET",
        "/admin/v2/persistent/public/default/no-force/stats",
        "",
    );
    assert_eq!(stats.0, 404, "the topic was not created");
    produce(&b, topic, 1, None);
    c.send(&cmd(2));
    c.expect(Type::Success);
    b.shutdown(Duration::from_secs(5));
}
