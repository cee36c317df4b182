//! `/admin/v2/schemas/{tenant}/{namespace}/{topic}/…` (`pulsar-admin schemas`): a topic's
//! schemas, the same versions PRODUCER and GET_SCHEMA use. Deleting a schema is refused (its
//! versions are what stored messages name).

use wire::proto::Schema;

use super::topic_error;
use super::{json, Request, Response};
use crate::schema::{type_name, type_of};
use crate::state::BrokerState;
use crate::topic::TopicName;

/// Everything under `/admin/v2/schemas/`; `segs` are the segments after it.
pub(super) fn route(req: &Request, state: &BrokerState, segs: &[&str]) -> Response {
    let [tenant, ns, topic, rest @ ..] = segs else {
        return super::no_route(req);
    };
    let name = match TopicName::parse(&format!("persistent://{tenant}/{ns}/{topic}")) {
        Ok(n) => n,
        Err(e) => return Response::json_error(412, &e.to_string()),
    };
    let t = state.existing_topic(&name.full());
    let versions = t.as_ref().map(|t| t.schemas.all()).unwrap_or_default();
    let not_found = || Response::json_error(404, "Schema not found");
    match (req.method.as_str(), rest) {
        ("GET", ["schema"]) => match versions.last() {
            Some(s) => json(200, &response(s, versions.len() - 1)),
            None => not_found(),
        },
        ("GET", ["schema", v]) => match v.parse::<usize>().ok().and_then(|i| versions.get(i)) {
            Some(s) => json(200, &response(s, v.parse().unwrap_or(0))),
            None => not_found(),
        },
        ("GET", ["schemas"]) => {
            let all: Vec<_> = versions
                .iter()
                .enumerate()
                .map(|(i, s)| response(s, i))
                .collect();
            json(200, &serde_json::json!({ "getSchemaResponses": all }))
        }
        ("POST", ["schema"]) => upload(req, state, &name),
        ("DELETE", ["schema"]) => Response::json_error(
            400,
            "deleting a schema is not supported by this broker (stored messages name its versions)",
        ),
        _ => super::no_route(req),
    }
}

/// Pulsar's `GetSchemaResponse`.
fn response(s: &Schema, version: usize) -> serde_json::Value {
    let properties: serde_json::Map<String, serde_json::Value> = s
        .properties
        .iter()
        .map(|kv| (kv.key.clone(), serde_json::Value::String(kv.value.clone())))
        .collect();
    serde_json::json!({
        "version": version,
        "type": type_name(s.r#type()),
        "timestamp": 0,
        "data": String::from_utf8_lossy(&s.schema_data),
        "properties": properties,
    })
}

/// `POST …/schema` with Pulsar's `PostSchemaPayload` (`{"type", "schema", "properties"}`):
/// the schema's version, added when new (the topic is created if need be).
fn upload(req: &Request, state: &BrokerState, name: &TopicName) -> Response {
    let v: serde_json::Value = match serde_json::from_slice(&req.body) {
        Ok(v) => v,
        Err(e) => return Response::json_error(400, &format!("body is not a schema payload: {e}")),
    };
    let Some(kind) = v
        .get("type")
        .and_then(serde_json::Value::as_str)
        .and_then(type_of)
    else {
        return Response::json_error(400, "a schema payload needs a known `type` (JSON, AVRO, …)");
    };
    let data = v
        .get("schema")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default();
    let properties = v
        .get("properties")
        .and_then(serde_json::Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| wire::proto::KeyValue {
                    key: k.clone(),
                    value: v.as_str().unwrap_or_default().to_owned(),
                })
                .collect()
        })
        .unwrap_or_default();
    let schema = Schema {
        name: name.local.clone(),
        schema_data: data.as_bytes().to_vec(),
        r#type: kind as i32,
        properties,
    };
    let topic = match state.topic_for_client(name) {
        Ok(t) => t,
        Err(e) => return topic_error(e),
    };
    match topic.schema_version(&schema, state.cfg.schema_compatibility) {
        Ok(v) => {
            let n = u64::from_be_bytes(v.try_into().unwrap_or([0; 8]));
            json(200, &serde_json::json!({ "version": { "version": n } }))
        }
        // As Pulsar: an incompatible schema is a conflict.
        Err(e @ crate::schema::SchemaError::Incompatible(_)) => {
            Response::json_error(409, &e.to_string())
        }
        Err(e) => Response::json_error(500, &e.to_string()),
    }
}
