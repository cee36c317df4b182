//! Pulsar's short topic names on every command, and topic properties through the admin API
//! (the Go admin library's partitioned-topic body among them).

mod common;

use std::time::Duration;

use common::{http, message_positions, open_producer, start_broker, subscribe_shared, Raw};
use wire::proto::base_command::Type;

fn json(b: &broker::Broker, method: &str, path: &str, body: &str) -> (u16, serde_json::Value) {
    let (status, body) = http(b, method, path, body);
    let v = serde_json::from_str(&body).unwrap_or(serde_json::Value::Null);
    (status, v)
}

/// A partitioned topic given by its short names (`orders`, `orders-partition-1`,
/// `public/default/orders`) is the same topic as its full name: the Go client sends the name
/// the application gave, with `-partition-N` appended, on PARTITIONED_METADATA and LOOKUP.
#[test]
fn short_names_reach_the_full_named_topic() {
    let b = start_broker(&[]);
    let base = "/admin/v2/persistent/public/default/orders";
    assert_eq!(http(&b, "PUT", &format!("{base}/partitions"), "3").0, 204);
    let mut c = Raw::connected(&b);
    for (rid, short) in [(1, "orders"), (2, "public/default/orders")] {
        c.send(&wire::commands::partitioned_metadata(short, rid));
        let r = c.expect(Type::PartitionedMetadataResponse);
        let r = r.command.partition_metadata_response.unwrap();
        assert_eq!((r.error, r.partitions), (None, Some(3)), "{short}");
    }
    c.send(&wire::commands::lookup("orders-partition-2", 3));
    let r = c.expect(Type::LookupResponse).command;
    assert_eq!(r.lookup_topic_response.unwrap().error, None);

    // A producer on the short name, a consumer on the full name: one topic.
    let mut consumer = Raw::connected(&b);
    subscribe_shared(
        &mut consumer,
        "persistent://public/default/orders-partition-1",
        "s",
    );
    consumer.send(&wire::commands::flow(1, 10));
    let name = open_producer(&mut c, "orders-partition-1");
    for i in 0..3 {
        let meta = common::metadata(&name, i, Some("k"));
        c.send_message(&wire::commands::send(1, i, 1), &meta, b"m");
        c.expect(Type::SendReceipt);
    }
    assert_eq!(
        message_positions(&mut consumer, 3, Duration::from_secs(5)).len(),
        3
    );
    let stats = common::topic_stats(&b, "persistent://public/default/orders-partition-1");
    assert_eq!(stats["msgInCounter"], 3);
    assert_eq!(
        json(&b, "GET", "/admin/v2/persistent/public/default", "").1,
        serde_json::json!([
            "persistent://public/default/orders-partition-0",
            "persistent://public/default/orders-partition-1",
            "persistent://public/default/orders-partition-2"
        ])
    );
    b.shutdown(Duration::from_secs(5));
}

/// `PUT …/partitions` takes Pulsar's `{"partitions": N, "properties": {…}}` as well as a bare
/// number; properties are returned, updated and removed through `…/properties`, for
/// partitioned and non-partitioned topics alike, and survive a restart.
#[test]
fn topic_properties_are_kept() {
    let d = std::env::temp_dir().join(format!("broker-properties-it-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    let dir = d.to_str().unwrap();
    let orders = "/admin/v2/persistent/public/default/orders";
    let plain = "/admin/v2/persistent/public/default/plain";
    {
        let b = start_broker(&["--data-dir", dir]);
        let body = r#"{"properties": {"owner": "ops", "tier": 2}, "partitions": 2}"#;
        assert_eq!(
            http(&b, "PUT", &format!("{orders}/partitions"), body).0,
            204
        );
        let (status, meta) = json(&b, "GET", &format!("{orders}/partitions"), "");
        assert_eq!(status, 200);
        assert_eq!(meta["partitions"], 2);
        assert_eq!(
            meta["properties"],
            serde_json::json!({"owner": "ops", "tier": "2"})
        );
        // The Go admin library's body without properties, and a bad one.
        let none = r#"{"properties": null, "partitions": 1}"#;
        let other = "/admin/v2/persistent/public/default/other/partitions";
        assert_eq!(http(&b, "PUT", other, none).0, 204);
        assert_eq!(
            json(&b, "GET", other, "").1,
            serde_json::json!({"partitions": 1, "deleted": false})
        );
        for bad in [r#"{"properties": {}}"#, r#"{"partitions": "2"}"#, "[2]"] {
            let (status, body) = http(
                &b,
                "PUT",
                "/admin/v2/persistent/public/default/x/partitions",
                bad,
            );
            assert_eq!(status, 400, "{bad}: {body}");
        }
        let nested = r#"{"partitions": 2, "properties": {"a": {"b": 1}}}"#;
        let x = "/admin/v2/persistent/public/default/x/partitions";
        assert_eq!(http(&b, "PUT", x, nested).0, 400);
        assert_eq!(http(&b, "PUT", x, r#"{"partitions": 0}"#).0, 406);

        // Update merges, delete removes one key.
        let props = format!("{orders}/properties");
        assert_eq!(
            http(&b, "PUT", &props, r#"{"tier": "1", "team": "a"}"#).0,
            204
        );
        assert_eq!(http(&b, "DELETE", &format!("{props}?key=owner"), "").0, 204);
        assert_eq!(http(&b, "DELETE", &props, "").0, 400);

        // A non-partitioned topic: created with properties (the Go library's PUT body), or
        // with `null`.
        assert_eq!(http(&b, "PUT", plain, r#"{"k": "v"}"#).0, 204);
        assert_eq!(
            http(
                &b,
                "PUT",
                "/admin/v2/persistent/public/default/bare",
                "null"
            )
            .0,
            204
        );
        assert_eq!(
            json(
                &b,
                "GET",
                "/admin/v2/persistent/public/default/bare/properties",
                ""
            )
            .1,
            serde_json::json!({})
        );
        let missing = "/admin/v2/persistent/public/default/missing/properties";
        assert_eq!(http(&b, "GET", missing, "").0, 404);
        assert_eq!(http(&b, "PUT", missing, r#"{"a": "b"}"#).0, 404);
        b.shutdown(Duration::from_secs(5));
    }
    let b = start_broker(&["--data-dir", dir]);
    assert_eq!(
        json(&b, "GET", &format!("{orders}/properties"), "").1,
        serde_json::json!({"team": "a", "tier": "1"})
    );
    assert_eq!(
        json(&b, "GET", &format!("{plain}/properties"), "").1,
        serde_json::json!({"k": "v"})
    );
    // Deleting a topic forgets its properties: a new one of that name has none.
    assert_eq!(http(&b, "DELETE", plain, "").0, 204);
    assert_eq!(http(&b, "PUT", plain, "").0, 204);
    assert_eq!(
        json(&b, "GET", &format!("{plain}/properties"), "").1,
        serde_json::json!({})
    );
    assert_eq!(
        http(&b, "DELETE", &format!("{orders}/partitions"), "").0,
        204
    );
    assert_eq!(http(&b, "PUT", &format!("{orders}/partitions"), "1").0, 204);
    assert_eq!(
        json(&b, "GET", &format!("{orders}/properties"), "").1,
        serde_json::json!({})
    );
    b.shutdown(Duration::from_secs(5));
    let _ = std::fs::remove_dir_all(&d);
}
