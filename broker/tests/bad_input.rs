//! Bad input never takes the broker down: each broken frame or misuse gets an ERROR reply or
//! a closed connection, and another connection keeps producing and consuming throughout.

mod common;

use std::time::Duration;

use common::{metadata, start_broker, Raw};
use wire::proto::base_command::Type;
use wire::proto::command_subscribe::{InitialPosition, SubType};

const TOPIC: &str = "persistent://public/default/bad-input";

/// A healthy round trip on a fresh connection: produce one message, consume it.
fn healthy_round_trip(b: &broker::Broker, n: u64) {
    let mut c = Raw::connected(b);
    let name = common::open_producer(&mut c, TOPIC);
    c.send(&wire::commands::subscribe(
        TOPIC,
        &format!("healthy-{n}"),
        2,
        2,
        SubType::Shared,
        None,
        InitialPosition::Latest,
    ));
    c.expect(Type::Success);
    c.send(&wire::commands::flow(2, 10));
    c.send_message(
        &wire::commands::send(1, n, 1),
        &metadata(&name, n, Some("k")),
        b"ok",
    );
    let frames = c.expect_all(&[Type::SendReceipt, Type::Message]);
    let m = frames
        .into_iter()
        .find(|f| f.command.r#type() == Type::Message)
        .unwrap();
    assert_eq!(m.payload.unwrap().body(), b"ok");
}

/// Every case on its own connection; each must end with an ERROR frame or a close, never a
/// hang, and the broker serves a healthy client afterwards.
#[test]
fn broken_frames_and_misuse_are_refused_per_connection() {
    let b = start_broker(&["--max-message-size", "10240"]);
    healthy_round_trip(&b, 0);

    // Garbage bytes where a frame should be: the size fields are nonsense.
    let mut c = Raw::open(&b);
    c.send_bytes(&[0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 1, 9, 9, 9, 9])
        .unwrap();
    assert!(c.closed_by_broker(), "garbage must close the connection");

    // A size field over the maximum frame size: refused before buffering.
    let mut c = Raw::open(&b);
    c.send_bytes(&u32::MAX.to_be_bytes()).unwrap();
    assert!(
        c.closed_by_broker(),
        "an oversized frame must close the connection"
    );

    // A wrong CRC32C on a SEND.
    let mut c = Raw::connected(&b);
    c.send(&wire::commands::producer(TOPIC, 1, 1, None));
    c.expect(Type::ProducerSuccess);
    let mut frame = Vec::new();
    wire::encode_with_payload(
        &wire::commands::send(1, 0, 1),
        &metadata("p", 0, None),
        b"payload",
        &mut frame,
    );
    let last = frame.len() - 1;
    frame[last] ^= 0xff; // the payload no longer matches its checksum
    c.send_bytes(&frame).unwrap();
    assert!(
        c.closed_by_broker(),
        "a checksum mismatch must close the connection"
    );

    // A truncated frame followed by the client going away: the broker just drops it.
    let mut c = Raw::open(&b);
    let mut out = Vec::new();
    wire::encode_command(&wire::commands::connect("x", 20), &mut out);
    c.send_bytes(&out[..out.len() / 2]).unwrap();
    drop(c);

    // A command before CONNECT.
    let mut c = Raw::open(&b);
    c.send(&wire::commands::flow(0, 10));
    assert_eq!(
        c.next(Duration::from_secs(5))
            .unwrap()
            .unwrap()
            .command
            .r#type(),
        Type::Error
    );
    assert!(c.closed_by_broker());

    // An unknown command type (a number the proto does not define).
    let mut c = Raw::connected(&b);
    let mut bytes = Vec::new();
    let body = [0x08u8, 0x63]; // BaseCommand { type: 99 }
    bytes.extend_from_slice(&(4 + body.len() as u32).to_be_bytes());
    bytes.extend_from_slice(&(body.len() as u32).to_be_bytes());
    bytes.extend_from_slice(&body);
    c.send_bytes(&bytes).unwrap();
    assert!(
        c.closed_by_broker(),
        "an unknown command type must close the connection"
    );

    // A supported command type the broker does not serve gets ERROR and the connection lives.
    let mut c = Raw::connected(&b);
    let watch = wire::proto::BaseCommand {
        r#type: Type::WatchTopicList as i32,
        watch_topic_list: Some(Box::new(wire::proto::CommandWatchTopicList {
            request_id: 7,
            watcher_id: 1,
            namespace: "public/default".into(),
            topics_pattern: ".*".into(),
            topics_hash: None,
        })),
        ..Default::default()
    };
    c.send(&watch);
    let e = c.expect(Type::Error);
    assert_eq!(e.command.error.unwrap().request_id, 7);
    c.send(&wire::commands::ping());
    c.expect(Type::Pong);

    // Transactions and the topic-list watcher are not served: the ERROR names the request, so
    // the client fails that request at once (an id of 0 could fail an unrelated request 0).
    let tc = wire::proto::BaseCommand {
        r#type: Type::TcClientConnectRequest as i32,
        tc_client_connect_request: Some(Box::new(wire::proto::CommandTcClientConnectRequest {
            request_id: 11,
            ..Default::default()
        })),
        ..Default::default()
    };
    let new_txn = wire::proto::BaseCommand {
        r#type: Type::NewTxn as i32,
        new_txn: Some(Box::new(wire::proto::CommandNewTxn {
            request_id: 12,
            ..Default::default()
        })),
        ..Default::default()
    };
    let watch = wire::proto::BaseCommand {
        r#type: Type::WatchTopicList as i32,
        watch_topic_list: Some(Box::new(wire::proto::CommandWatchTopicList {
            request_id: 13,
            watcher_id: 1,
            namespace: "public/default".into(),
            topics_pattern: ".*".into(),
            ..Default::default()
        })),
        ..Default::default()
    };
    for (cmd, id) in [(tc, 11), (new_txn, 12), (watch, 13)] {
        c.send(&cmd);
        let e = c.expect(Type::Error);
        assert_eq!(e.command.error.unwrap().request_id, id);
    }
    c.send(&wire::commands::ping());
    c.expect(Type::Pong);

    // SEND before PRODUCER: SEND_ERROR, connection lives.
    let mut c = Raw::connected(&b);
    c.send_message(
        &wire::commands::send(5, 0, 1),
        &metadata("p", 0, None),
        b"x",
    );
    c.expect(Type::SendError);
    c.send(&wire::commands::ping());
    c.expect(Type::Pong);

    // ACK, FLOW and REDELIVER for a consumer that does not exist: ignored (an ACK with a
    // request id gets an ACK_RESPONSE with an error); the connection lives.
    let mut c = Raw::connected(&b);
    c.send(&wire::commands::ack(
        42,
        wire::convert::message_id(cursor::Position::new(1, 0)),
        None,
    ));
    c.send(&wire::commands::flow(42, 0));
    c.send(&wire::commands::flow(42, u32::MAX));
    c.send(&wire::commands::redeliver_unacknowledged(42, Vec::new()));
    c.send(&wire::commands::ping());
    c.expect(Type::Pong);

    // FLOW with 0 and with 2^32-1 permits on a real consumer.
    let mut c = Raw::connected(&b);
    c.send(&wire::commands::subscribe(
        TOPIC,
        "flows",
        3,
        3,
        SubType::Shared,
        None,
        InitialPosition::Latest,
    ));
    c.expect(Type::Success);
    c.send(&wire::commands::flow(3, 0));
    c.send(&wire::commands::flow(3, u32::MAX));
    c.send(&wire::commands::flow(3, u32::MAX));
    c.send(&wire::commands::ping());
    c.expect(Type::Pong);

    // A topic name of none of Pulsar's forms (`topic`, `tenant/namespace/topic`, full).
    let mut c = Raw::connected(&b);
    c.send(&wire::commands::producer("not/a-topic", 1, 9, None));
    assert_eq!(c.expect(Type::Error).command.error.unwrap().request_id, 9);

    healthy_round_trip(&b, 1);
    b.shutdown(Duration::from_secs(5));
}
