//! Clusters, tenants, namespaces and partitioned topics: the admin calls and the binary
//! protocol's answers, as Pulsar gives them.

mod common;

use std::time::Duration;

use common::{http, open_producer, start_broker, Raw};
use wire::proto::{base_command::Type, ServerError};

fn json(b: &broker::Broker, method: &str, path: &str, body: &str) -> (u16, serde_json::Value) {
    let (status, body) = http(b, method, path, body);
    let v = if body.is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{method} {path}: {e}: {body}"))
    };
    (status, v)
}

/// `(status, reason)` of a refused call; panics on a success.
fn refused(b: &broker::Broker, method: &str, path: &str, body: &str) -> (u16, String) {
    let (status, v) = json(b, method, path, body);
    assert!(status >= 400, "{method} {path} answered {status}");
    (status, v["reason"].as_str().unwrap_or_default().to_owned())
}

/// PARTITIONED_METADATA's answer: the count, or the error code.
fn partitions(c: &mut Raw, topic: &str, rid: u64) -> Result<u32, ServerError> {
    c.send(&wire::commands::partitioned_metadata(topic, rid));
    let r = c
        .expect(Type::PartitionedMetadataResponse)
        .command
        .partition_metadata_response
        .unwrap();
    assert_eq!(r.request_id, rid);
    match r.error {
        Some(e) => Err(ServerError::try_from(e).unwrap()),
        None => Ok(r.partitions.unwrap_or(0)),
    }
}

/// PRODUCER's answer: the producer's name, or the error code.
fn producer(c: &mut Raw, topic: &str, id: u64) -> Result<String, ServerError> {
    c.send(&wire::commands::producer(topic, id, id, None));
    let f = loop {
        match c.next(Duration::from_secs(5)) {
            Ok(Some(f)) if matches!(f.command.r#type(), Type::ProducerSuccess | Type::Error) => {
                break f
            }
            Ok(Some(f)) if f.command.r#type() == Type::Ping => {}
            other => panic!("PRODUCER {topic}: {other:?}"),
        }
    };
    match &f.command.error {
        Some(e) => Err(e.error()),
        None => Ok(f.command.producer_success.clone().unwrap().producer_name),
    }
}

#[test]
fn clusters_tenants_and_namespaces() {
    let b = start_broker(&[]);
    assert_eq!(
        json(&b, "GET", "/admin/v2/clusters", "").1,
        serde_json::json!(["standalone"])
    );
    let (status, c) = json(&b, "GET", "/admin/v2/clusters/standalone", "");
    assert_eq!(status, 200);
    assert_eq!(c["brokerServiceUrl"], b.service_url());
    assert_eq!(refused(&b, "GET", "/admin/v2/clusters/other", "").0, 404);

    assert_eq!(
        json(&b, "GET", "/admin/v2/tenants", "").1,
        serde_json::json!(["public", "pulsar"])
    );
    let info = r#"{"adminRoles": ["ops"], "allowedClusters": ["standalone"]}"#;
    assert_eq!(http(&b, "PUT", "/admin/v2/tenants/acme", info).0, 204);
    assert_eq!(
        refused(&b, "PUT", "/admin/v2/tenants/acme", info),
        (409, "Tenant already exist".into())
    );
    let (_, t) = json(&b, "GET", "/admin/v2/tenants/acme", "");
    assert_eq!(t["allowedClusters"], serde_json::json!(["standalone"]));
    assert_eq!(t["adminRoles"], serde_json::json!(["ops"]));
    let bad_cluster = r#"{"allowedClusters": ["nowhere"]}"#;
    assert_eq!(
        refused(&b, "PUT", "/admin/v2/tenants/other", bad_cluster).0,
        412
    );
    assert_eq!(
        refused(&b, "PUT", "/admin/v2/tenants/other", "{nope").0,
        400
    );
    assert_eq!(refused(&b, "GET", "/admin/v2/tenants/nobody", "").0, 404);

    assert_eq!(
        http(&b, "PUT", "/admin/v2/namespaces/acme/orders", "").0,
        204
    );
    assert_eq!(
        refused(&b, "PUT", "/admin/v2/namespaces/acme/orders", ""),
        (409, "Namespace already exists".into())
    );
    assert_eq!(
        refused(&b, "PUT", "/admin/v2/namespaces/nobody/orders", ""),
        (404, "Tenant does not exist".into())
    );
    assert_eq!(
        json(&b, "GET", "/admin/v2/namespaces/acme", "").1,
        serde_json::json!(["acme/orders"])
    );
    let (status, policies) = json(&b, "GET", "/admin/v2/namespaces/acme/orders", "");
    assert_eq!(status, 200);
    assert_eq!(
        policies["replication_clusters"],
        serde_json::json!(["standalone"])
    );
    // A policy is refused by name, not accepted and ignored.
    let (status, reason) = refused(
        &b,
        "POST",
        "/admin/v2/namespaces/acme/orders/schemaCompatibilityStrategy",
        r#""FULL""#,
    );
    assert_eq!(status, 400);
    assert!(reason.contains("schemaCompatibilityStrategy"), "{reason}");

    // A namespace with a topic is not deleted, nor its tenant.
    let topic = "persistent://acme/orders/t";
    let mut c = Raw::connected(&b);
    open_producer(&mut c, topic);
    assert_eq!(
        json(&b, "GET", "/admin/v2/namespaces/acme/orders/topics", "").1,
        serde_json::json!([topic])
    );
    assert_eq!(
        refused(&b, "DELETE", "/admin/v2/namespaces/acme/orders", "").0,
        409
    );
    assert_eq!(
        refused(&b, "DELETE", "/admin/v2/tenants/acme", ""),
        (409, "The tenant still has active namespaces".into())
    );
    // force deletes its topics first (closing their clients).
    assert_eq!(
        http(
            &b,
            "DELETE",
            "/admin/v2/namespaces/acme/orders?force=true",
            ""
        )
        .0,
        204
    );
    c.expect(Type::CloseProducer);
    assert_eq!(http(&b, "DELETE", "/admin/v2/tenants/acme", "").0, 204);
    assert_eq!(refused(&b, "GET", "/admin/v2/tenants/acme", "").0, 404);
    b.shutdown(Duration::from_secs(5));
}

#[test]
fn a_topic_needs_an_existing_namespace() {
    let b = start_broker(&[]);
    let mut c = Raw::connected(&b);
    let topic = "persistent://public/nowhere/t";
    assert_eq!(producer(&mut c, topic, 1), Err(ServerError::TopicNotFound));
    assert_eq!(
        partitions(&mut c, topic, 2),
        Err(ServerError::TopicNotFound)
    );
    let (status, reason) = refused(&b, "GET", "/admin/v2/persistent/public/nowhere", "");
    assert_eq!((status, reason.as_str()), (404, "Namespace does not exist"));
    assert_eq!(
        refused(&b, "PUT", "/admin/v2/persistent/public/nowhere/t", "").0,
        404
    );
    assert_eq!(
        http(&b, "PUT", "/admin/v2/namespaces/public/nowhere", "").0,
        204
    );
    assert!(producer(&mut c, topic, 3).is_ok());
    b.shutdown(Duration::from_secs(5));
}

#[test]
fn partitioned_topics_from_creation_to_deletion() {
    let b = start_broker(&[]);
    let base = "/admin/v2/persistent/public/default/orders";
    let topic = "persistent://public/default/orders";
    let p = |i: u32| format!("{topic}-partition-{i}");
    assert_eq!(
        refused(&b, "PUT", &format!("{base}/partitions"), "0").0,
        406
    );
    assert_eq!(
        refused(&b, "PUT", &format!("{base}/partitions"), "x").0,
        400
    );
    assert_eq!(http(&b, "PUT", &format!("{base}/partitions"), "3").0, 204);
    assert_eq!(
        refused(&b, "PUT", &format!("{base}/partitions"), "3").0,
        409
    );
    assert_eq!(refused(&b, "PUT", base, "").0, 409);
    assert_eq!(refused(&b, "DELETE", base, "").0, 409);
    assert_eq!(
        refused(&b, "PUT", &format!("{base}-partition-7"), "").0,
        412
    );
    assert_eq!(
        refused(&b, "PUT", &format!("{base}-partition-0/partitions"), "2").0,
        412
    );
    assert_eq!(
        json(&b, "GET", &format!("{base}/partitions"), "").1["partitions"],
        3
    );
    assert_eq!(
        json(
            &b,
            "GET",
            "/admin/v2/persistent/public/default/partitioned",
            ""
        )
        .1,
        serde_json::json!([topic])
    );
    assert_eq!(
        json(&b, "GET", "/admin/v2/persistent/public/default", "").1,
        serde_json::json!([p(0), p(1), p(2)])
    );

    let mut c = Raw::connected(&b);
    assert_eq!(partitions(&mut c, topic, 1), Ok(3));
    assert_eq!(partitions(&mut c, &p(1), 2), Ok(0));
    assert_eq!(
        producer(&mut c, topic, 1),
        Err(ServerError::NotAllowedError)
    );
    assert_eq!(
        producer(&mut c, &p(3), 2),
        Err(ServerError::NotAllowedError)
    );
    let name = producer(&mut c, &p(1), 3).unwrap();
    for i in 0..4 {
        c.send_message(
            &wire::commands::send(3, i, 1),
            &common::metadata(&name, i, Some("k")),
            b"m",
        );
        c.expect(Type::SendReceipt);
    }

    // Grow only.
    assert_eq!(
        refused(&b, "POST", &format!("{base}/partitions"), "2").0,
        422
    );
    assert_eq!(http(&b, "POST", &format!("{base}/partitions"), "4").0, 204);
    assert_eq!(partitions(&mut c, topic, 4), Ok(4));
    assert!(producer(&mut c, &p(3), 5).is_ok());

    let (status, stats) = json(&b, "GET", &format!("{base}/partitioned-stats"), "");
    assert_eq!(status, 200);
    assert_eq!(stats["metadata"]["partitions"], 4);
    assert_eq!(stats["msgInCounter"], 4);
    assert_eq!(stats["publishers"].as_array().unwrap().len(), 2);
    assert_eq!(stats["partitions"][p(1)]["msgInCounter"], 4);
    let publisher = &stats["partitions"][p(1)]["publishers"][0];
    assert_eq!(publisher["clientVersion"], "test-client");
    assert!(publisher["metadata"].is_object(), "{publisher}");
    assert_eq!(stats["partitions"][p(0)]["msgInCounter"], 0);
    let (_, totals) = json(
        &b,
        "GET",
        &format!("{base}/partitioned-stats?perPartition=false"),
        "",
    );
    assert_eq!(totals["partitions"], serde_json::json!({}));
    // Rates of a partition without subscriptions are 0.0, not the -0.0 of an empty f64 sum.
    let raw = http(&b, "GET", &format!("{base}/partitioned-stats"), "").1;
    assert!(!raw.contains("-0.0"), "{raw}");
    let (status, internal) = json(&b, "GET", &format!("{base}/partitioned-internalStats"), "");
    assert_eq!(status, 200);
    assert!(internal["partitions"][p(1)]["numberOfEntries"].is_number());

    // Connected producers keep it, unless forced.
    assert_eq!(
        refused(&b, "DELETE", &format!("{base}/partitions"), ""),
        (412, "Topic has active producers/subscriptions".into())
    );
    assert_eq!(
        http(&b, "DELETE", &format!("{base}/partitions?force=true"), "").0,
        204
    );
    let closed = c.expect_all(&[Type::CloseProducer, Type::CloseProducer]);
    assert_eq!(closed.len(), 2);
    assert_eq!(partitions(&mut c, topic, 6), Ok(0));
    assert_eq!(
        refused(&b, "DELETE", &format!("{base}/partitions"), "").0,
        404
    );
    assert_eq!(
        json(&b, "GET", "/admin/v2/persistent/public/default", "").1,
        serde_json::json!([])
    );
    b.shutdown(Duration::from_secs(5));
}

#[test]
fn topics_created_on_first_use_follow_the_flags() {
    let b = start_broker(&[
        "--allow-auto-topic-creation-type",
        "partitioned",
        "--default-num-partitions",
        "2",
    ]);
    let mut c = Raw::connected(&b);
    let topic = "persistent://public/default/auto";
    assert_eq!(partitions(&mut c, topic, 1), Ok(2));
    assert!(producer(&mut c, &format!("{topic}-partition-1"), 1).is_ok());
    // A client that does not let the look-up create it learns that it does not exist.
    let mut no_create = wire::commands::partitioned_metadata("persistent://public/default/x", 2);
    no_create
        .partition_metadata
        .as_mut()
        .unwrap()
        .metadata_auto_creation_enabled = Some(false);
    c.send(&no_create);
    let r = c.expect(Type::PartitionedMetadataResponse);
    let r = r.command.partition_metadata_response.unwrap();
    assert_eq!(r.error, Some(ServerError::TopicNotFound as i32));
    b.shutdown(Duration::from_secs(5));

    let b = start_broker(&["--allow-auto-topic-creation", "false"]);
    let mut c = Raw::connected(&b);
    let topic = "persistent://public/default/manual";
    assert_eq!(producer(&mut c, topic, 1), Err(ServerError::TopicNotFound));
    assert_eq!(
        partitions(&mut c, topic, 2),
        Err(ServerError::TopicNotFound)
    );
    assert_eq!(
        http(&b, "PUT", "/admin/v2/persistent/public/default/manual", "").0,
        204
    );
    assert!(producer(&mut c, topic, 3).is_ok());
    b.shutdown(Duration::from_secs(5));
}

#[test]
fn deleting_a_topic_closes_its_clients_when_forced() {
    let b = start_broker(&[]);
    let path = "/admin/v2/persistent/public/default/gone";
    let topic = "persistent://public/default/gone";
    let mut c = Raw::connected(&b);
    producer(&mut c, topic, 1).unwrap();
    assert_eq!(refused(&b, "DELETE", path, "").0, 412);
    assert_eq!(http(&b, "DELETE", &format!("{path}?force=true"), "").0, 204);
    c.expect(Type::CloseProducer);
    assert_eq!(refused(&b, "GET", &format!("{path}/stats"), "").0, 404);
    // The client opens its producer again, under the same id: a new topic of that name.
    assert!(producer(&mut c, topic, 1).is_ok());
    assert_eq!(http(&b, "GET", &format!("{path}/stats"), "").0, 200);
    assert_eq!(
        refused(&b, "DELETE", "/admin/v2/persistent/public/default/none", "").0,
        404
    );
    b.shutdown(Duration::from_secs(5));
}

#[test]
fn the_metadata_survives_a_restart() {
    let d = std::env::temp_dir().join(format!("broker-metadata-it-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    let dir = d.to_str().unwrap();
    {
        let b = start_broker(&["--data-dir", dir]);
        let info = r#"{"allowedClusters": ["standalone"]}"#;
        assert_eq!(http(&b, "PUT", "/admin/v2/tenants/acme", info).0, 204);
        assert_eq!(
            http(&b, "PUT", "/admin/v2/namespaces/acme/orders", "").0,
            204
        );
        assert_eq!(
            http(
                &b,
                "PUT",
                "/admin/v2/persistent/acme/orders/p/partitions",
                "2"
            )
            .0,
            204
        );
        b.shutdown(Duration::from_secs(5));
    }
    let b = start_broker(&["--data-dir", dir]);
    assert_eq!(
        json(&b, "GET", "/admin/v2/namespaces/acme", "").1,
        serde_json::json!(["acme/orders"])
    );
    let mut c = Raw::connected(&b);
    assert_eq!(partitions(&mut c, "persistent://acme/orders/p", 1), Ok(2));
    assert_eq!(
        json(&b, "GET", "/admin/v2/persistent/acme/orders", "").1,
        serde_json::json!([
            "persistent://acme/orders/p-partition-0",
            "persistent://acme/orders/p-partition-1"
        ])
    );
    b.shutdown(Duration::from_secs(5));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn subscriptions_are_created_and_deleted_by_the_admin_api() {
    let b = start_broker(&[]);
    let base = "/admin/v2/persistent/public/default/subs";
    let topic = "persistent://public/default/subs";
    assert_eq!(http(&b, "PUT", base, "").0, 204);
    common::produce(&b, topic, 2, 1);
    // Latest (no body): the 2 earlier messages are not its backlog; earliest: they are.
    assert_eq!(
        http(&b, "PUT", &format!("{base}/subscription/late"), "").0,
        204
    );
    let earliest = r#"{"ledgerId": -1, "entryId": -1, "partitionIndex": -1}"#;
    assert_eq!(
        http(&b, "PUT", &format!("{base}/subscription/early"), earliest).0,
        204
    );
    assert_eq!(
        refused(&b, "PUT", &format!("{base}/subscription/late"), ""),
        (409, "Subscription already exists for topic".into())
    );
    common::produce(&b, topic, 3, 1);
    let (_, stats) = json(&b, "GET", &format!("{base}/stats"), "");
    assert_eq!(stats["subscriptions"]["late"]["msgBacklog"], 3);
    assert_eq!(stats["subscriptions"]["early"]["msgBacklog"], 5);

    // A connected consumer keeps it, unless forced.
    let mut c = Raw::connected(&b);
    c.send(&wire::commands::subscribe(
        topic,
        "late",
        1,
        1,
        wire::proto::command_subscribe::SubType::Shared,
        None,
        wire::proto::command_subscribe::InitialPosition::Latest,
    ));
    c.expect(Type::Success);
    assert_eq!(
        refused(&b, "DELETE", &format!("{base}/subscription/late"), "").0,
        412
    );
    assert_eq!(
        http(
            &b,
            "DELETE",
            &format!("{base}/subscription/late?force=true"),
            ""
        )
        .0,
        204
    );
    c.expect(Type::CloseConsumer);
    assert_eq!(
        json(&b, "GET", &format!("{base}/subscriptions"), "").1,
        serde_json::json!(["early"])
    );
    assert_eq!(
        refused(&b, "DELETE", &format!("{base}/subscription/late"), "").0,
        404
    );
    assert_eq!(http(&b, "PUT", &format!("{base}/unload"), "").0, 204);
    for (method, path, named) in [
        ("POST", "retention", "retention"),
        ("GET", "maxProducers", "maxProducers"),
        ("PUT", "compaction", "compaction"),
    ] {
        let (status, reason) = refused(&b, method, &format!("{base}/{path}"), "{}");
        assert_eq!(status, 400);
        assert!(reason.contains(named), "{reason}");
    }
    assert_eq!(http(&b, "GET", "/admin/v2/brokers/health", "").1, "ok");
    let (_, leader) = json(&b, "GET", "/admin/v2/brokers/leaderBroker", "");
    assert_eq!(leader["serviceUrl"], b.admin_url());
    let (_, brokers) = json(&b, "GET", "/admin/v2/brokers/standalone", "");
    assert_eq!(brokers.as_array().map(Vec::len), Some(1));
    let (_, conf) = json(&b, "GET", "/admin/v2/brokers/configuration/runtime", "");
    assert_eq!(conf["allowAutoTopicCreation"], "true");
    assert_eq!(
        refused(
            &b,
            "PUT",
            "/admin/v2/persistent/public/default/none/unload",
            ""
        )
        .0,
        404
    );

    // On a partitioned topic: on every partition.
    let p = "/admin/v2/persistent/public/default/subs-p";
    assert_eq!(http(&b, "PUT", &format!("{p}/partitions"), "2").0, 204);
    assert_eq!(http(&b, "PUT", &format!("{p}/subscription/s"), "").0, 204);
    for i in 0..2 {
        assert_eq!(
            json(&b, "GET", &format!("{p}-partition-{i}/subscriptions"), "").1,
            serde_json::json!(["s"])
        );
    }
    assert_eq!(
        http(&b, "DELETE", &format!("{p}/subscription/s"), "").0,
        204
    );
    assert_eq!(
        json(&b, "GET", &format!("{p}-partition-1/subscriptions"), "").1,
        serde_json::json!([])
    );
    b.shutdown(Duration::from_secs(5));
}
