//! Schemas over the wire: GET_SCHEMA, GET_OR_CREATE_SCHEMA and a producer's schema share one
//! per-topic list of versions; PRODUCER_SUCCESS always carries `schema_version`; a schema that
//! is not compatible with the topic's is refused with `IncompatibleSchema` (409 in the admin API).

mod common;

use common::{start_broker, Raw};
use wire::proto::{base_command::Type, schema, BaseCommand, Schema, ServerError};

const TOPIC: &str = "persistent://public/default/schemas";

fn json(data: &str) -> Schema {
    Schema {
        name: "order".into(),
        schema_data: data.as_bytes().to_vec(),
        r#type: schema::Type::Json as i32,
        properties: Vec::new(),
    }
}

fn get_schema(request_id: u64, version: Option<Vec<u8>>) -> BaseCommand {
    BaseCommand {
        r#type: Type::GetSchema as i32,
        get_schema: Some(Box::new(wire::proto::CommandGetSchema {
            request_id,
            topic: TOPIC.into(),
            schema_version: version,
        })),
        ..Default::default()
    }
}

fn get_or_create(request_id: u64, s: Schema) -> BaseCommand {
    BaseCommand {
        r#type: Type::GetOrCreateSchema as i32,
        get_or_create_schema: Some(Box::new(wire::proto::CommandGetOrCreateSchema {
            request_id,
            topic: TOPIC.into(),
            schema: s,
            producer_name: None,
        })),
        ..Default::default()
    }
}

/// Sends GET_SCHEMA and returns its response.
fn ask_schema(
    c: &mut Raw,
    request_id: u64,
    version: Option<Vec<u8>>,
) -> wire::proto::CommandGetSchemaResponse {
    c.send(&get_schema(request_id, version));
    let r = *c
        .expect(Type::GetSchemaResponse)
        .command
        .get_schema_response
        .unwrap();
    assert_eq!(r.request_id, request_id);
    r
}

/// Opens producer `id` with `schema` and returns the schema version PRODUCER_SUCCESS carries.
fn producer_version(c: &mut Raw, id: u64, schema: Option<Schema>) -> Option<Vec<u8>> {
    let mut p = wire::commands::producer(TOPIC, id, 100 + id, None);
    p.producer.as_mut().unwrap().schema = schema;
    c.send(&p);
    c.expect(Type::ProducerSuccess)
        .command
        .producer_success
        .unwrap()
        .schema_version
}

#[test]
fn versions_are_shared_by_producers_and_schema_requests() {
    let b = start_broker(&[]);
    let mut c = Raw::connected(&b);

    // A producer without a schema: an empty version, present (the Java client reads it).
    assert_eq!(producer_version(&mut c, 1, None), Some(Vec::new()));

    // No schema yet: the reply is the response frame the client waits for, with an error code.
    assert_eq!(
        ask_schema(&mut c, 2, None).error_code(),
        ServerError::TopicNotFound
    );

    // GET_OR_CREATE_SCHEMA adds version 0, and asking again finds it.
    for request_id in [3, 4] {
        c.send(&get_or_create(request_id, json("{a}")));
        let r = c
            .expect(Type::GetOrCreateSchemaResponse)
            .command
            .get_or_create_schema_response
            .unwrap();
        assert_eq!(r.request_id, request_id);
        assert_eq!(r.error_code, None);
        assert_eq!(r.schema_version, Some(vec![0; 8]));
    }

    // A producer with another schema gets the next version; with the first, version 0.
    assert_eq!(
        producer_version(&mut c, 2, Some(json("{b}"))),
        Some(vec![0, 0, 0, 0, 0, 0, 0, 1])
    );
    assert_eq!(
        producer_version(&mut c, 3, Some(json("{a}"))),
        Some(vec![0; 8])
    );

    // GET_SCHEMA: the latest without a version, the asked one with it, an error for none.
    let r = ask_schema(&mut c, 7, None);
    assert_eq!(r.schema_version, Some(vec![0, 0, 0, 0, 0, 0, 0, 1]));
    assert_eq!(r.schema.unwrap().schema_data, b"{b}");
    let r = ask_schema(&mut c, 8, Some(vec![0; 8]));
    assert_eq!(r.schema.unwrap().schema_data, b"{a}");
    let r = ask_schema(&mut c, 9, Some(vec![0, 0, 0, 0, 0, 0, 0, 9]));
    assert_eq!(r.error_code(), ServerError::TopicNotFound);
}

/// `pulsar-admin schemas`: upload, get (latest, by version, all) share the wire's versions;
/// delete is refused by name.
#[test]
fn the_admin_api_reads_and_uploads_the_same_versions() {
    // Versions only: a JSON, then an AVRO schema (incompatible under the default FULL).
    let b = start_broker(&["--schema-compatibility-strategy", "ALWAYS_COMPATIBLE"]);
    let path = "/admin/v2/schemas/public/default/schemas";
    let (status, body) = common::http(&b, "GET", &format!("{path}/schema"), "");
    assert_eq!(status, 404, "{body}");
    let mut c = Raw::connected(&b);
    assert_eq!(
        producer_version(&mut c, 1, Some(json("{\"type\":\"record\"}"))),
        Some(0u64.to_be_bytes().to_vec())
    );
    let upload = r#"{"type": "AVRO", "schema": "{\"type\":\"record\",\"name\":\"v1\"}", "properties": {"a": "b"}}"#;
    let (status, body) = common::http(&b, "POST", &format!("{path}/schema"), upload);
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["version"]["version"], 1);
    let (_, latest) = common::http(&b, "GET", &format!("{path}/schema"), "");
    let latest: serde_json::Value = serde_json::from_str(&latest).unwrap();
    assert_eq!(latest["type"], "AVRO");
    assert_eq!(latest["version"], 1);
    assert_eq!(latest["properties"]["a"], "b");
    let (_, first) = common::http(&b, "GET", &format!("{path}/schema/0"), "");
    let first: serde_json::Value = serde_json::from_str(&first).unwrap();
    assert_eq!(first["type"], "JSON");
    assert_eq!(first["data"], "{\"type\":\"record\"}");
    let (_, all) = common::http(&b, "GET", &format!("{path}/schemas"), "");
    let all: serde_json::Value = serde_json::from_str(&all).unwrap();
    assert_eq!(all["getSchemaResponses"].as_array().map(Vec::len), Some(2));
    // GET_SCHEMA over the wire sees the uploaded version.
    let r = ask_schema(&mut c, 9, Some(1u64.to_be_bytes().to_vec()));
    assert_eq!(r.schema.unwrap().r#type(), schema::Type::Avro);
    assert_eq!(
        common::http(&b, "POST", &format!("{path}/schema"), r#"{"type": "NOPE"}"#).0,
        400
    );
    let (status, body) = common::http(&b, "DELETE", &format!("{path}/schema"), "");
    assert_eq!(status, 400);
    assert!(body.contains("deleting a schema"), "{body}");
    b.shutdown(std::time::Duration::from_secs(5));
}

fn avro(fields: &str) -> Schema {
    Schema {
        name: "order".into(),
        schema_data: format!(
            r#"{{"type":"record","name":"Order","namespace":"t","fields":[{fields}]}}"#
        )
        .into_bytes(),
        r#type: schema::Type::Avro as i32,
        properties: Vec::new(),
    }
}

/// The error a PRODUCER (or SUBSCRIBE) with `request_id` got, if any.
fn refused(c: &mut Raw) -> ServerError {
    c.expect(Type::Error).command.error.unwrap().error()
}

#[test]
fn an_incompatible_schema_is_refused_by_producers_consumers_and_the_admin_api() {
    let b = start_broker(&[]);
    let mut c = Raw::connected(&b);
    let v1 = avro(r#"{"name":"id","type":"int"},{"name":"item","type":"string"}"#);
    let added = avro(
        r#"{"name":"id","type":"int"},{"name":"item","type":"string"},{"name":"qty","type":"int","default":1}"#,
    );
    let needs_qty = avro(r#"{"name":"id","type":"int"},{"name":"qty","type":"int"}"#);
    assert_eq!(
        producer_version(&mut c, 1, Some(v1.clone())),
        Some(vec![0; 8])
    );
    // FULL: a field without a default is refused; with a default it is the next version.
    let mut p = wire::commands::producer(TOPIC, 2, 102, None);
    p.producer.as_mut().unwrap().schema = Some(needs_qty.clone());
    c.send(&p);
    assert_eq!(refused(&mut c), ServerError::IncompatibleSchema);
    c.send(&get_or_create(3, needs_qty.clone()));
    let r = c
        .expect(Type::GetOrCreateSchemaResponse)
        .command
        .get_or_create_schema_response
        .unwrap();
    assert_eq!(r.error_code(), ServerError::IncompatibleSchema);
    assert_eq!(
        producer_version(&mut c, 4, Some(added)),
        Some(1u64.to_be_bytes().to_vec())
    );
    // A consumer whose schema cannot read the latest version is refused; one that can is not.
    let sub = |cid: u64, s: Schema| {
        let mut cmd = wire::commands::subscribe(
            TOPIC,
            &format!("s{cid}"),
            cid,
            200 + cid,
            wire::proto::command_subscribe::SubType::Shared,
            None,
            wire::proto::command_subscribe::InitialPosition::Earliest,
        );
        cmd.subscribe.as_mut().unwrap().schema = Some(s);
        cmd
    };
    let needs_price = avro(r#"{"name":"id","type":"int"},{"name":"price","type":"double"}"#);
    c.send(&sub(1, needs_price));
    assert_eq!(refused(&mut c), ServerError::IncompatibleSchema);
    c.send(&sub(2, v1));
    c.expect(Type::Success);
    // The admin API: 409, as Pulsar answers an incompatible upload.
    let upload = r#"{"type": "JSON", "schema": "{}"}"#;
    let path = "/admin/v2/schemas/public/default/schemas/schema";
    let (status, body) = common::http(&b, "POST", path, upload);
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("exists schema type AVRO"), "{body}");
    b.shutdown(std::time::Duration::from_secs(5));
}
