//! The admin HTTP surface: Pulsar's v2 paths and field names, the operations' effect on the
//! subscription, and Pulsar's status codes for bad requests.

mod common;

use std::time::Duration;

use common::{http, produce, start_broker, Raw};
use wire::proto::base_command::Type;
use wire::proto::command_subscribe::{InitialPosition, SubType};

const TOPIC: &str = "persistent://public/default/admin-t";
const BASE: &str = "/admin/v2/persistent/public/default/admin-t";

fn backlog(b: &broker::Broker, sub: &str) -> u64 {
    let (status, body) = http(b, "GET", &format!("{BASE}/stats"), "");
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    v["subscriptions"][sub]["msgBacklog"].as_u64().unwrap()
}

#[test]
fn stats_and_operations() {
    let b = start_broker(&[]);
    let mut c = Raw::connected(&b);
    c.send(&wire::commands::subscribe(
        TOPIC,
        "sub",
        1,
        1,
        SubType::KeyShared,
        None,
        InitialPosition::Earliest,
    ));
    c.expect(Type::Success);
    produce(&b, TOPIC, 10, 3);

    let (status, body) = http(&b, "GET", &format!("{BASE}/stats"), "");
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["msgInCounter"], 10);
    let sub = &v["subscriptions"]["sub"];
    assert_eq!(sub["type"], "Key_Shared");
    assert_eq!(sub["msgBacklog"], 10);
    assert_eq!(sub["keySharedMode"], "AUTO_SPLIT");
    assert_eq!(sub["consumers"].as_array().unwrap().len(), 1);
    assert_eq!(sub["consumers"][0]["availablePermits"], 0);
    assert!(sub["consumers"][0]["drainingHashes"].is_array());
    // One consumer owns the whole hash space (Pulsar's text form of the ranges).
    let ranges = sub["consumers"][0]["keyHashRanges"].as_array().unwrap();
    assert!(!ranges.is_empty());
    assert!(ranges[0].as_str().unwrap().starts_with('['));

    // Skip 2, then clear the rest.
    assert_eq!(
        http(&b, "POST", &format!("{BASE}/subscription/sub/skip/2"), "").0,
        204
    );
    assert_eq!(backlog(&b, "sub"), 8);
    let (status, body) = http(&b, "GET", &format!("{BASE}/internalStats"), "");
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["cursors"]["sub"]["markDeletePosition"], "1:1");
    assert_eq!(v["entriesAddedCounter"], 10);

    // Reset by message id puts everything back, and closes the consumer (as Pulsar).
    let (status, _) = http(
        &b,
        "POST",
        &format!("{BASE}/subscription/sub/resetcursor"),
        r#"{"ledgerId": 1, "entryId": 0}"#,
    );
    assert_eq!(status, 204);
    assert_eq!(
        c.expect(Type::CloseConsumer)
            .command
            .close_consumer
            .unwrap()
            .consumer_id,
        1
    );
    assert_eq!(backlog(&b, "sub"), 10);
    // Exclusive, as the admin clients send it (`excluded`): the backlog starts after the id.
    let (status, _) = http(
        &b,
        "POST",
        &format!("{BASE}/subscription/sub/resetcursor"),
        r#"{"ledgerId": 1, "entryId": 3, "partitionIndex": -1, "batchIndex": -1, "excluded": true}"#,
    );
    assert_eq!(status, 204);
    assert_eq!(backlog(&b, "sub"), 6);

    // Expire everything older than 0 s: the whole backlog (publish times are in the past).
    assert_eq!(
        http(
            &b,
            "POST",
            &format!("{BASE}/subscription/sub/expireMessages/0"),
            ""
        )
        .0,
        204
    );
    assert_eq!(backlog(&b, "sub"), 0);

    // Reset by time to the beginning, then skip_all.
    assert_eq!(
        http(
            &b,
            "POST",
            &format!("{BASE}/subscription/sub/resetcursor/0"),
            ""
        )
        .0,
        204
    );
    assert_eq!(backlog(&b, "sub"), 10);
    assert_eq!(
        http(&b, "POST", &format!("{BASE}/subscription/sub/skip_all"), "").0,
        204
    );
    assert_eq!(backlog(&b, "sub"), 0);

    // whyBlocked: nobody is connected now.
    let (status, body) = http(
        &b,
        "GET",
        &format!("{BASE}/subscription/sub/whyBlocked?key=k1"),
        "",
    );
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["reason"], "unassignedRange");
    assert!(v["hash"].is_u64());

    // Metrics carry Pulsar's names and ours.
    let (status, body) = http(&b, "GET", "/metrics", "");
    assert_eq!(status, 200);
    for name in [
        "pulsar_subscription_back_log{",
        "pulsar_subscription_unacked_messages{",
        "pulsar_subscription_msg_rate_out{",
        "pulsar_in_messages_total{",
        "keyordered_subscription_draining_hashes{",
        "keyordered_subscription_orphan_chunks_total{",
    ] {
        assert!(body.contains(name), "{name} missing from /metrics");
    }
    b.shutdown(Duration::from_secs(5));
}

#[test]
fn bad_requests_get_pulsar_status_codes() {
    let b = start_broker(&[]);
    produce(&b, TOPIC, 1, 1);
    let mut c = Raw::connected(&b);
    common::subscribe_shared(&mut c, TOPIC, "sub");
    let cases: &[(&str, String, &str, u16)] = &[
        (
            "GET",
            "/admin/v2/persistent/public/default/nope/stats".into(),
            "",
            404,
        ),
        ("POST", format!("{BASE}/subscription/nope/skip/1"), "", 404),
        ("POST", format!("{BASE}/subscription/sub/skip/abc"), "", 400),
        ("POST", format!("{BASE}/subscription/sub/skip/-3"), "", 412),
        (
            "POST",
            format!("{BASE}/subscription/sub/expireMessages/-1"),
            "",
            412,
        ),
        (
            "POST",
            format!("{BASE}/subscription/sub/resetcursor"),
            "not json",
            400,
        ),
        (
            "POST",
            format!("{BASE}/subscription/sub/resetcursor"),
            "{\"x\": 1}",
            400,
        ),
        (
            "GET",
            format!("{BASE}/subscription/sub/whyBlocked"),
            "",
            400,
        ),
        (
            "GET",
            format!("{BASE}/subscription/sub/whyBlocked?hash=70000"),
            "",
            400,
        ),
        ("DELETE", format!("{BASE}/stats"), "", 405),
        ("GET", "/nothing/here".into(), "", 404),
    ];
    for (method, path, body, want) in cases {
        let (status, reply) = http(&b, method, path, body);
        assert_eq!(status, *want, "{method} {path}: {reply}");
        let v: serde_json::Value = serde_json::from_str(&reply).unwrap();
        assert!(v["reason"].is_string(), "{method} {path}: {reply}");
    }
    // A request that never finishes its head is cut off, and the server still answers.
    let addr = b.admin_url().trim_start_matches("http://").to_owned();
    let _slow = std::net::TcpStream::connect(addr).unwrap();
    assert_eq!(http(&b, "GET", &format!("{BASE}/stats"), "").0, 200);
    b.shutdown(Duration::from_secs(5));
}

/// What admin clients ask before anything else (Spring's `PulsarAdministration`, readiness
/// checks): the cluster list, both topic listings, the partitioned list, and creating a topic.
#[test]
fn listings_and_topic_creation() {
    let b = start_broker(&[]);
    let list = |path: &str| {
        let (status, body) = http(&b, "GET", path, "");
        assert_eq!(status, 200, "{path}: {body}");
        serde_json::from_str::<Vec<String>>(&body).unwrap()
    };
    assert_eq!(list("/admin/v2/clusters"), ["standalone"]);
    assert!(list("/admin/v2/non-persistent/public/default").is_empty());
    assert!(list("/admin/v2/persistent/public/default/partitioned").is_empty());
    assert!(list("/admin/v2/persistent/public/default").is_empty());

    let created = "/admin/v2/persistent/public/default/made";
    assert_eq!(http(&b, "PUT", created, "").0, 204);
    let (status, body) = http(&b, "PUT", created, "");
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("already exists"), "{body}");
    assert_eq!(
        list("/admin/v2/persistent/public/default"),
        ["persistent://public/default/made"]
    );
    assert_eq!(http(&b, "GET", &format!("{created}/stats"), "").0, 200);

    // The same name cannot become a partitioned topic.
    let (status, body) = http(&b, "PUT", &format!("{created}/partitions"), "2");
    assert_eq!(status, 409, "{body}");
    b.shutdown(Duration::from_secs(5));
}

/// internalStats' `readPosition` as Pulsar reports it: after individual acks and a read of
/// everything, past the last entry, never on an acked entry.
#[test]
fn read_position_is_never_an_acked_entry() {
    let b = start_broker(&[]);
    let topic = "persistent://public/default/read-pos";
    let base = "/admin/v2/persistent/public/default/read-pos";
    let mut c = Raw::connected(&b);
    common::subscribe_shared(&mut c, topic, "sub");
    produce(&b, topic, 20, 1);
    let read_position = || {
        let (status, body) = http(&b, "GET", &format!("{base}/internalStats"), "");
        assert_eq!(status, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        v["cursors"]["sub"]["readPosition"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(read_position(), "1:0");
    // Receive 10 and ack some of them; ack 1:19 before the consumer reads it, then read the
    // rest: the read stops at 1:18, and the position after it is past the acked 1:19.
    c.send(&wire::commands::flow(1, 10));
    let got = c.expect_all(&[Type::Message; 10]);
    let ids: Vec<_> = got
        .iter()
        .map(|f| f.command.message.as_ref().unwrap().message_id.clone())
        .collect();
    for i in [1, 4, 5, 8, 9] {
        c.send(&wire::commands::ack(1, ids[i].clone(), None));
    }
    let last = wire::convert::message_id(cursor::Position::new(ids[0].ledger_id, 19));
    c.send(&wire::commands::ack(1, last, None));
    c.send(&wire::commands::flow(1, 100));
    c.expect_all(&[Type::Message; 9]);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while read_position() != format!("{}:20", ids[0].ledger_id) {
        assert!(
            std::time::Instant::now() < deadline,
            "readPosition {} (1:19 is acked)",
            read_position()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `(status, head, body)` of one request: the head carries a message read's `X-Pulsar-*`.
fn http_with_head(b: &broker::Broker, path: &str) -> (u16, String, String) {
    use std::io::{Read, Write};
    let addr = b.admin_url().trim_start_matches("http://").to_owned();
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let (head, body) = resp.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head.to_owned(), body.to_owned())
}

/// `get-message-by-id`, `peek-messages`, `examine-message`, `last-message-id` and
/// `get-message-id`: payloads as bodies, metadata as Pulsar's `X-Pulsar-*` headers.
#[test]
fn messages_are_read_back_as_pulsar_answers_them() {
    let b = start_broker(&[]);
    let base = "/admin/v2/persistent/public/default/read-back";
    let topic = "persistent://public/default/read-back";
    let mut c = Raw::connected(&b);
    common::subscribe_shared(&mut c, topic, "sub");
    produce(&b, topic, 3, 3);
    let (status, last) = http(&b, "GET", &format!("{base}/lastMessageId"), "");
    assert_eq!(status, 200, "{last}");
    let last: serde_json::Value = serde_json::from_str(&last).unwrap();
    let ledger = last["ledgerId"].as_u64().unwrap();
    assert_eq!(last["entryId"], 2);

    let (status, head, body) = http_with_head(&b, &format!("{base}/ledger/{ledger}/entry/1"));
    assert_eq!((status, body.as_str()), (200, "m1"), "{head}");
    assert!(
        head.contains(&format!("X-Pulsar-Message-ID: {ledger}:1")),
        "{head}"
    );
    assert!(head.contains("X-Pulsar-partition-key: k1"), "{head}");
    assert!(head.contains("X-Pulsar-sequence-id: 1"), "{head}");
    assert!(
        head.contains("X-Pulsar-publish-time: 1970-01-01T00:00:01.001Z"),
        "{head}"
    );
    assert_eq!(
        http(&b, "GET", &format!("{base}/ledger/{ledger}/entry/9"), "").0,
        404
    );

    // Peek counts the unacknowledged backlog: after a skip of 1, the first is m1.
    let peek = |n: u32| http_with_head(&b, &format!("{base}/subscription/sub/position/{n}"));
    assert_eq!(peek(1).2, "m0");
    assert_eq!(peek(3).2, "m2");
    assert_eq!(peek(4).0, 404);
    assert_eq!(
        http(&b, "POST", &format!("{base}/subscription/sub/skip/1"), "").0,
        204
    );
    assert_eq!(peek(1).2, "m1");

    let examine = |q: &str| http_with_head(&b, &format!("{base}/examinemessage?{q}")).2;
    assert_eq!(examine("initialPosition=earliest&messagePosition=1"), "m0");
    assert_eq!(examine("initialPosition=latest&messagePosition=1"), "m2");

    // The first message published at or after a time (the test producer's times are 1000 + seq).
    let (_, id) = http(&b, "GET", &format!("{base}/messageid/1002"), "");
    let id: serde_json::Value = serde_json::from_str(&id).unwrap();
    assert_eq!(id["entryId"], 2);
    assert_eq!(
        http(&b, "GET", &format!("{base}/messageid/5000"), "").0,
        404
    );
    b.shutdown(Duration::from_secs(5));
}
