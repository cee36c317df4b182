//! The namespace policies the broker enforces: message TTL and backlog quotas with
//! `consumer_backlog_eviction` move a subscription's mark-delete position without acks, on the
//! housekeeping thread; the producer-side quotas close and refuse producers; the policies it
//! does not enforce are refused by name.

mod common;

use std::time::{Duration, Instant};

use common::{http, produce, start_broker, Raw};
use wire::proto::base_command::Type;
use wire::proto::command_subscribe::{InitialPosition, SubType};

const NS: &str = "/admin/v2/namespaces/public/default";

fn backlog(b: &broker::Broker, topic: &str) -> u64 {
    common::topic_stats(b, topic)["subscriptions"]["sub"]["msgBacklog"]
        .as_u64()
        .unwrap()
}

/// A subscription with `n` messages of backlog (its consumer sends no FLOW).
fn subscription_with_backlog(b: &broker::Broker, topic: &str, n: u64) -> Raw {
    let mut c = Raw::connected(b);
    common::subscribe_shared(&mut c, topic, "sub");
    produce(b, topic, n, 2);
    assert_eq!(backlog(b, topic), n);
    c
}

fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < until, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn message_ttl_expires_the_backlog() {
    let b = start_broker(&["--message-expiry-check-interval-ms", "50"]);
    let topic = "persistent://public/default/ttl";
    let _c = subscription_with_backlog(&b, topic, 5);
    assert_eq!(http(&b, "GET", &format!("{NS}/messageTTL"), "").0, 204);
    assert_eq!(http(&b, "POST", &format!("{NS}/messageTTL"), "-1").0, 412);
    assert_eq!(http(&b, "POST", &format!("{NS}/messageTTL"), "1").0, 204);
    assert_eq!(
        http(&b, "GET", &format!("{NS}/messageTTL"), "").1.trim(),
        "1"
    );
    let (_, policies) = http(&b, "GET", NS, "");
    let policies: serde_json::Value = serde_json::from_str(&policies).unwrap();
    assert_eq!(policies["message_ttl_in_seconds"], 1);
    wait_for(
        "the TTL expired the backlog",
        Duration::from_secs(5),
        || backlog(&b, topic) == 0,
    );
    let path = "/admin/v2/persistent/public/default/ttl/stats";
    let stats: serde_json::Value = serde_json::from_str(&http(&b, "GET", path, "").1).unwrap();
    assert!(stats["subscriptions"]["sub"]["lastExpireTimestamp"].as_u64() > Some(0));

    // Without the policy, nothing expires any more.
    assert_eq!(http(&b, "DELETE", &format!("{NS}/messageTTL"), "").0, 204);
    produce(&b, topic, 3, 1);
    std::thread::sleep(Duration::from_millis(1300));
    assert_eq!(backlog(&b, topic), 3);
    b.shutdown(Duration::from_secs(5));
}

#[test]
fn a_backlog_quota_evicts_the_oldest_backlog() {
    let b = start_broker(&["--backlog-quota-check-interval-ms", "50"]);
    let topic = "persistent://public/default/quota";
    let _c = subscription_with_backlog(&b, topic, 20);
    let quota = format!("{NS}/backlogQuota");
    let (status, body) = http(
        &b,
        "POST",
        &quota,
        r#"{"limitSize": 10, "limitTime": -1, "policy": "no_such_policy"}"#,
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("no_such_policy"), "{body}");
    let (status, body) = http(
        &b,
        "POST",
        &format!("{quota}?backlogQuotaType=destination_storage"),
        r#"{"limitSize": 10, "limitTime": -1, "policy": "consumer_backlog_eviction"}"#,
    );
    assert_eq!(status, 204, "{body}");
    let (_, map) = http(&b, "GET", &format!("{NS}/backlogQuotaMap"), "");
    let map: serde_json::Value = serde_json::from_str(&map).unwrap();
    assert_eq!(map["destination_storage"]["limitSize"], 10);
    // 20 messages of 2 to 3 bytes: at most 10 bytes of backlog are left, the newest.
    wait_for(
        "the quota evicted the backlog",
        Duration::from_secs(5),
        || backlog(&b, topic) <= 5,
    );
    assert!(backlog(&b, topic) > 0, "eviction keeps what fits the quota");
    assert_eq!(http(&b, "DELETE", &quota, "").0, 204);
    let (_, map) = http(&b, "GET", &format!("{NS}/backlogQuotaMap"), "");
    assert_eq!(map.trim(), "{}");
    b.shutdown(Duration::from_secs(5));
}

#[test]
fn producer_and_consumer_limits_refuse_one_too_many() {
    let b = start_broker(&[]);
    let topic = "persistent://public/default/limits";
    for (path, n) in [
        ("maxProducersPerTopic", "1"),
        ("maxConsumersPerTopic", "2"),
        ("maxConsumersPerSubscription", "1"),
    ] {
        assert_eq!(
            http(&b, "POST", &format!("{NS}/{path}"), n).0,
            204,
            "{path}"
        );
        assert_eq!(http(&b, "GET", &format!("{NS}/{path}"), "").1.trim(), n);
    }
    assert_eq!(
        http(&b, "POST", &format!("{NS}/maxProducersPerTopic"), "-1").0,
        412
    );
    let mut c = Raw::connected(&b);
    c.send(&wire::commands::producer(topic, 1, 1, None));
    c.expect(Type::ProducerSuccess);
    c.send(&wire::commands::producer(topic, 2, 2, None));
    let e = c.expect(Type::Error).command.error.unwrap();
    assert_eq!(e.error(), wire::proto::ServerError::ProducerBusy);
    assert_eq!(e.message, "Topic reached max producers limit");

    // SUBSCRIBE's answer: None for SUCCESS, the ERROR's message otherwise.
    let subscribe = |c: &mut Raw, sub: &str, id: u64| {
        c.send(&wire::commands::subscribe(
            topic,
            sub,
            id,
            10 + id,
            SubType::Shared,
            None,
            InitialPosition::Earliest,
        ));
        loop {
            let f = c.next(Duration::from_secs(5)).unwrap().expect("a reply");
            match f.command.r#type() {
                Type::Success => return None,
                Type::Error => return Some(f.command.error.unwrap().message),
                _ => {}
            }
        }
    };
    assert_eq!(subscribe(&mut c, "a", 1), None);
    assert_eq!(
        subscribe(&mut c, "a", 2).as_deref(),
        Some("Subscription reached max consumers limit")
    );
    assert_eq!(subscribe(&mut c, "b", 3), None);
    assert_eq!(
        subscribe(&mut c, "c", 4).as_deref(),
        Some("Topic reached max consumers limit")
    );
    assert_eq!(
        http(&b, "DELETE", &format!("{NS}/maxConsumersPerTopic"), "").0,
        204
    );
    assert_eq!(subscribe(&mut c, "c", 5), None);
    let (_, policies) = http(&b, "GET", NS, "");
    let policies: serde_json::Value = serde_json::from_str(&policies).unwrap();
    assert_eq!(policies["max_producers_per_topic"], 1);
    assert!(policies.get("max_consumers_per_topic").is_none());
    b.shutdown(Duration::from_secs(5));
}

/// Internal stats' ledger count of `topic`.
fn ledgers(b: &broker::Broker, topic: &str) -> usize {
    let path = format!(
        "/admin/v2/persistent/{}/internalStats",
        topic.trim_start_matches("persistent://")
    );
    let v: serde_json::Value = serde_json::from_str(&http(b, "GET", &path, "").1).unwrap();
    v["ledgers"].as_array().map_or(0, Vec::len)
}

#[test]
fn a_retention_policy_keeps_what_was_consumed() {
    let b = start_broker(&["--entries-per-ledger", "2"]);
    let topic = "persistent://public/default/retained";
    let path = format!("{NS}/retention");
    assert_eq!(http(&b, "GET", &path, "").0, 204);
    let bad = r#"{"retentionTimeInMinutes": 0, "retentionSizeInMB": 10}"#;
    assert_eq!(http(&b, "POST", &path, bad).0, 412);
    let forever = r#"{"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}"#;
    assert_eq!(http(&b, "POST", &path, forever).0, 204);
    let (_, got) = http(&b, "GET", &path, "");
    let got: serde_json::Value = serde_json::from_str(&got).unwrap();
    assert_eq!(got["retentionTimeInMinutes"], -1);

    // Everything is consumed (skip_all), and still kept.
    let _c = subscription_with_backlog(&b, topic, 6);
    let clear = "/admin/v2/persistent/public/default/retained/subscription/sub/skip_all";
    assert_eq!(http(&b, "POST", clear, "").0, 204);
    std::thread::sleep(Duration::from_millis(400)); // several retention passes
    assert!(ledgers(&b, topic) >= 3, "consumed ledgers are kept");

    // Without the policy they go (the ledger being written stays).
    assert_eq!(http(&b, "DELETE", &path, "").0, 204);
    wait_for(
        "the consumed ledgers dropped",
        Duration::from_secs(5),
        || ledgers(&b, topic) <= 1,
    );
    b.shutdown(Duration::from_secs(5));
}

#[test]
fn deduplication_drops_a_producers_resent_messages() {
    let b = start_broker(&[]);
    let topic = "persistent://public/default/dedup";
    let stats = "/admin/v2/persistent/public/default/dedup/stats";
    let msg_in = || {
        let v: serde_json::Value = serde_json::from_str(&http(&b, "GET", stats, "").1).unwrap();
        v["msgInCounter"].as_u64().unwrap()
    };
    assert_eq!(http(&b, "GET", &format!("{NS}/deduplication"), "").0, 204);
    assert_eq!(
        http(&b, "POST", &format!("{NS}/deduplication"), "yes").0,
        400
    );
    assert_eq!(
        http(&b, "POST", &format!("{NS}/deduplication"), "true").0,
        204
    );
    let mut c = Raw::connected(&b);
    c.send(&wire::commands::producer(topic, 1, 1, Some("dedup-p")));
    let ok = c
        .expect(Type::ProducerSuccess)
        .command
        .producer_success
        .unwrap();
    assert_eq!(ok.last_sequence_id, Some(-1));
    // Sends seq and returns the receipt's ledger id.
    let send = |c: &mut Raw, seq: u64| {
        c.send_message(
            &wire::commands::send(1, seq, 1),
            &common::metadata("dedup-p", seq, Some("k")),
            b"m",
        );
        let r = c.expect(Type::SendReceipt).command.send_receipt.unwrap();
        r.message_id.unwrap().ledger_id
    };
    for seq in 0..3 {
        assert_ne!(send(&mut c, seq), u64::MAX);
    }
    assert_eq!(
        send(&mut c, 1),
        u64::MAX,
        "a resent message: receipted as -1:-1"
    );
    assert_eq!(msg_in(), 3);

    // The producer comes back under its name: it resumes after sequence 2.
    let mut again = Raw::connected(&b);
    drop(c);
    std::thread::sleep(Duration::from_millis(200));
    again.send(&wire::commands::producer(topic, 1, 1, Some("dedup-p")));
    let ok = again
        .expect(Type::ProducerSuccess)
        .command
        .producer_success
        .unwrap();
    assert_eq!(ok.last_sequence_id, Some(2));

    assert_eq!(
        http(&b, "POST", &format!("{NS}/deduplication"), "false").0,
        204
    );
    assert_ne!(
        send(&mut again, 1),
        u64::MAX,
        "without deduplication it is stored"
    );
    assert_eq!(msg_in(), 4);
    b.shutdown(Duration::from_secs(5));
}

/// The producer-side backlog quotas, as Pulsar's: once the backlog is over a
/// `producer_exception` quota the topic's producers are closed (CLOSE_PRODUCER) and a reopen is
/// refused with `ProducerBlockedQuotaExceededException` (the client fails what it holds);
/// under `producer_request_hold` with `ProducerBlockedQuotaExceededError` (the client waits and
/// retries); once the backlog is cleared the producer opens again. (Before, both policies were
/// refused by the admin API.)
#[test]
fn producer_side_quotas_close_and_refuse_producers() {
    let b = start_broker(&["--backlog-quota-check-interval-ms", "50"]);
    let topic = "persistent://public/default/quota-producers";
    let _sub = subscription_with_backlog(&b, topic, 20);
    let mut p = Raw::connected(&b);
    p.send(&wire::commands::producer(topic, 1, 1, Some("qp")));
    p.expect(Type::ProducerSuccess);
    let quota = |policy: &str| {
        let body = format!(r#"{{"limitSize": 10, "limitTime": -1, "policy": "{policy}"}}"#);
        assert_eq!(
            http(&b, "POST", &format!("{NS}/backlogQuota"), &body).0,
            204
        );
    };
    quota("producer_exception");
    p.expect(Type::CloseProducer);
    let reopen = |p: &mut Raw, request_id| {
        p.send(&wire::commands::producer(topic, 1, request_id, Some("qp")));
        p.next(Duration::from_secs(5)).unwrap().unwrap().command
    };
    let refused = reopen(&mut p, 2).error.expect("an ERROR");
    assert_eq!(
        refused.error(),
        wire::proto::ServerError::ProducerBlockedQuotaExceededException
    );
    assert_eq!(
        refused.message,
        "Cannot create producer on topic with backlog quota exceeded"
    );
    quota("producer_request_hold");
    let held = reopen(&mut p, 3).error.expect("an ERROR");
    assert_eq!(
        held.error(),
        wire::proto::ServerError::ProducerBlockedQuotaExceededError
    );
    let skip_all = "/admin/v2/persistent/public/default/quota-producers/subscription/sub/skip_all";
    assert_eq!(http(&b, "POST", skip_all, "").0, 204);
    assert_eq!(reopen(&mut p, 4).r#type(), Type::ProducerSuccess);
    b.shutdown(Duration::from_secs(5));
}
