//! `/admin/v2/persistent/{tenant}/{namespace}/…`: topic lists, non-partitioned and
//! partitioned topics (create, grow, delete, unload), stats; a subscription's paths are in
//! `subscriptions.rs`.

use tracing::info;

use super::{json, no_content, parse_count, parse_query, topic_error, Request, Response};
use crate::metadata::TopicProperties;
use crate::state::{BrokerState, DeleteError};
use crate::topic::{Topic, TopicName};

/// Everything under `/admin/v2/persistent/`; `segs` are the path segments after it.
pub(super) fn route(req: &Request, state: &BrokerState, segs: &[&str]) -> Response {
    let m = req.method.as_str();
    match segs {
        [tenant, ns] if m == "GET" => match namespace(state, tenant, ns) {
            Ok(()) => json(200, &state.topic_names_in(&format!("{tenant}/{ns}"))),
            Err(r) => r,
        },
        [tenant, ns, "partitioned"] if m == "GET" => match namespace(state, tenant, ns) {
            Ok(()) => json(
                200,
                &state.metadata().partitioned_in(&format!("{tenant}/{ns}")),
            ),
            Err(r) => r,
        },
        [tenant, ns, topic, rest @ ..] => {
            let name = match TopicName::parse(&format!("persistent://{tenant}/{ns}/{topic}")) {
                Ok(n) => n,
                Err(e) => return Response::json_error(412, &e.to_string()),
            };
            topic_route(req, state, &name, rest)
        }
        _ => super::no_route(req),
    }
}

/// 404 when `tenant/ns` does not exist, with Pulsar's reason.
fn namespace(state: &BrokerState, tenant: &str, ns: &str) -> Result<(), Response> {
    state
        .metadata()
        .check_namespace(tenant, ns)
        .map_err(|e| Response::json_error(e.status(), &e.to_string()))
}

fn topic_route(req: &Request, state: &BrokerState, name: &TopicName, rest: &[&str]) -> Response {
    let m = req.method.as_str();
    let full = name.full();
    let force = parse_query(&req.query)
        .get("force")
        .is_some_and(|v| v == "true");
    match rest {
        [] if m == "PUT" => match properties_body(&req.body) {
            Ok(properties) => match state.create_topic(name, properties) {
                Ok(_) => no_content(),
                Err(e) => topic_error(e),
            },
            Err(r) => r,
        },
        [] if m == "DELETE" => deleted(state.delete_topic(&full, force), &full),
        ["partitions"] => partitions(req, state, name),
        ["properties"] => properties(req, state, name),
        ["partitioned-stats"] if m == "GET" => partitioned_stats(req, state, &full),
        ["partitioned-internalStats"] if m == "GET" => {
            match crate::stats::partitioned_internal_stats(state, &full) {
                Some(s) => json(200, &s),
                None => Response::json_error(404, &format!("Partitioned Topic {full} not found")),
            }
        }
        ["subscription", sub] if m == "PUT" || m == "DELETE" => {
            super::subscriptions::create_or_delete(req, state, name, sub)
        }
        ["terminate", "partitions"] if m == "POST" => terminate_partitions(state, name),
        ["terminate"] if m == "POST" && matches!(state.partition_count(name), Ok(n) if n > 0) => {
            Response::json_error(405, "Termination of a partitioned topic is not allowed")
        }
        // No bundles move here: unloading is a no-op, answered as Pulsar answers it.
        ["unload"] if m == "PUT" => match state.partition_count(name) {
            Ok(_) => no_content(),
            Err(e) => topic_error(e),
        },
        _ => {
            let Some(t) = state.existing_topic(&full) else {
                return Response::json_error(404, "Topic not found");
            };
            existing_topic_route(req, state, &t, rest)
        }
    }
}

/// `POST …/{topic}/terminate/partitions`: terminates every partition; answers each one's last
/// message id by partition index.
fn terminate_partitions(state: &BrokerState, name: &TopicName) -> Response {
    let n = match state.partition_count(name) {
        Ok(n) if n > 0 => n,
        Ok(_) => return Response::json_error(405, "Topic is not partitioned"),
        Err(e) => return topic_error(e),
    };
    let mut out = serde_json::Map::new();
    for i in 0..n {
        let Some(t) = state.existing_topic(&name.partition(i)) else {
            continue;
        };
        match state.terminate_topic(&t) {
            Ok(last) => {
                out.insert(i.to_string(), super::messages::message_id(last));
            }
            Err(e) => return Response::json_error(500, &e.to_string()),
        }
    }
    json(200, &out)
}

/// `…/{topic}/partitions`: GET the count, PUT creates, POST grows, DELETE deletes.
fn partitions(req: &Request, state: &BrokerState, name: &TopicName) -> Response {
    let full = name.full();
    match req.method.as_str() {
        // A client given the web URL asks this with `checkAllowAutoCreation=true` (its
        // PARTITIONED_METADATA over HTTP): a missing topic is then created as the binary
        // command would create it.
        "GET"
            if parse_query(&req.query)
                .get("checkAllowAutoCreation")
                .is_some_and(|v| v == "true") =>
        {
            match state.partitioned_metadata(name, true) {
                Ok(n) => json(
                    200,
                    &serde_json::json!({ "partitions": n, "deleted": false }),
                ),
                Err(e) => topic_error(e),
            }
        }
        "GET" => match state.partition_count(name) {
            Ok(n) => {
                let mut body = serde_json::json!({ "partitions": n, "deleted": false });
                let properties = state.metadata().topic_properties(&full);
                if !properties.is_empty() {
                    body["properties"] = serde_json::json!(properties);
                }
                json(200, &body)
            }
            Err(e) => topic_error(e),
        },
        "PUT" | "POST" => {
            let (n, properties) = match partitions_body(&req.body) {
                Ok(body) => body,
                Err(r) => return r,
            };
            let done = if req.method == "PUT" {
                state.create_partitioned(name, n, properties)
            } else {
                state.grow_partitioned(name, n)
            };
            match done {
                Ok(()) => no_content(),
                Err(e) => topic_error(e),
            }
        }
        "DELETE" => {
            let force = parse_query(&req.query)
                .get("force")
                .is_some_and(|v| v == "true");
            deleted(state.delete_partitioned(&full, force), &full)
        }
        _ => super::no_route(req),
    }
}

/// `…/{topic}/properties`: GET them, PUT adds (a JSON object of strings), DELETE `?key=K`
/// removes one; a topic, partitioned or not, that does not exist is 404.
fn properties(req: &Request, state: &BrokerState, name: &TopicName) -> Response {
    let done = match req.method.as_str() {
        "GET" => {
            return match state.topic_properties(name) {
                Ok(p) => json(200, &p),
                Err(e) => topic_error(e),
            }
        }
        "PUT" => match properties_body(&req.body) {
            Ok(p) => state.change_topic_properties(name, p, None),
            Err(r) => return r,
        },
        "DELETE" => match parse_query(&req.query).get("key") {
            Some(key) => state.change_topic_properties(name, TopicProperties::new(), Some(key)),
            None => {
                return Response::json_error(
                    400,
                    "the property's `key` query parameter is required",
                )
            }
        },
        _ => return super::no_route(req),
    };
    match done {
        Ok(()) => no_content(),
        Err(e) => topic_error(e),
    }
}

/// The body of `PUT …/{topic}/partitions` (and `POST`), in either of Pulsar's forms: a JSON
/// number (`application/json`), or `{"partitions": N, "properties": {…}}` (Pulsar's
/// `application/vnd.partitioned-topic-metadata+json`, what the Go admin library sends).
fn partitions_body(body: &[u8]) -> Result<(u32, TopicProperties), Response> {
    let refused = |what: &str| {
        let text = String::from_utf8_lossy(body);
        let reason = format!(
            "body must be the number of partitions or {{\"partitions\": N, \"properties\": {{…}}}}: {what}, got `{}`",
            text.trim()
        );
        Response::json_error(400, &reason)
    };
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|_| refused("not JSON"))?;
    let (count, properties) = match &value {
        serde_json::Value::Number(_) => (&value, TopicProperties::new()),
        serde_json::Value::Object(o) => {
            let count = o
                .get("partitions")
                .ok_or_else(|| refused("no `partitions`"))?;
            let properties = match o.get("properties") {
                None => TopicProperties::new(),
                Some(p) => properties_value(p)?,
            };
            (count, properties)
        }
        _ => return Err(refused("neither a number nor an object")),
    };
    let Some(n) = count.as_i64() else {
        return Err(refused("`partitions` is not an integer"));
    };
    if n <= 0 {
        let reason = crate::metadata::MetadataError::NoPartitions.to_string();
        return Err(Response::json_error(406, &reason));
    }
    u32::try_from(n)
        .map(|n| (n, properties))
        .map_err(|_| Response::json_error(406, "Number of partitions is too large"))
}

/// A topic's properties in a request body: a JSON object whose values are strings (numbers
/// and booleans are taken as their text, as Pulsar's JSON reader takes them); an empty body
/// or `null` is none.
fn properties_body(body: &[u8]) -> Result<TopicProperties, Response> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(TopicProperties::new());
    }
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|e| {
        Response::json_error(400, &format!("properties must be a JSON object: {e}"))
    })?;
    properties_value(&value)
}

fn properties_value(value: &serde_json::Value) -> Result<TopicProperties, Response> {
    use serde_json::Value;
    let refused = || Response::json_error(400, "properties must be an object of strings");
    match value {
        Value::Null => Ok(TopicProperties::new()),
        Value::Object(o) => o
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                Value::Number(_) | Value::Bool(_) => Ok((k.clone(), v.to_string())),
                _ => Err(refused()),
            })
            .collect(),
        _ => Err(refused()),
    }
}

fn deleted(r: Result<(), DeleteError>, full: &str) -> Response {
    match r {
        Ok(()) => {
            info!(topic = %full, "admin delete");
            no_content()
        }
        Err(e) => Response::json_error(e.status(), &e.to_string()),
    }
}

/// `…/{topic}/partitioned-stats?perPartition=true|false` (default true).
fn partitioned_stats(req: &Request, state: &BrokerState, full: &str) -> Response {
    let per_partition = parse_query(&req.query)
        .get("perPartition")
        .is_none_or(|v| v != "false");
    match crate::stats::partitioned_stats(state, full, per_partition) {
        Some(s) => json(200, &s),
        None => Response::json_error(404, &format!("Partitioned Topic {full} not found")),
    }
}

fn existing_topic_route(req: &Request, state: &BrokerState, t: &Topic, rest: &[&str]) -> Response {
    let get = req.method == "GET";
    match rest {
        ["stats"] if get => json(200, &crate::stats::topic_stats(t)),
        ["internalStats"] if get => json(200, &crate::stats::internal_stats(t)),
        ["lastMessageId"] if get => super::messages::last_message_id(t),
        ["messageid", ms] if get => match parse_count(ms) {
            Ok(ms) => super::messages::at_time(t, ms),
            Err(r) => r,
        },
        ["ledger", l, "entry", e] if get => match (parse_count(l), parse_count(e)) {
            (Ok(l), Ok(e)) => super::messages::entry(t, cursor::Position::new(l, e)),
            (Err(r), _) | (_, Err(r)) => r,
        },
        ["examinemessage"] if get => {
            let q = parse_query(&req.query);
            let latest = q.get("initialPosition").is_some_and(|v| v == "latest");
            match parse_count(q.get("messagePosition").map_or("1", String::as_str)) {
                Ok(n) => super::messages::examine(t, latest, n),
                Err(r) => r,
            }
        }
        ["terminate"] if req.method == "POST" => match state.terminate_topic(t) {
            Ok(last) => json(200, &super::messages::message_id(last)),
            Err(e) => Response::json_error(500, &e.to_string()),
        },
        ["subscriptions"] if get => {
            let names: Vec<String> = t.subscriptions().iter().map(|s| s.name.clone()).collect();
            json(200, &names)
        }
        ["subscription", sub, op @ ..] => {
            let Some(s) = t.get_subscription(sub) else {
                return Response::json_error(404, "Subscription not found");
            };
            super::subscriptions::route(req, state, t, &s, op)
        }
        ["stats" | "internalStats" | "subscriptions"] => {
            Response::json_error(405, "method not allowed")
        }
        ["compaction"] => Response::json_error(
            400,
            "topic compaction is not supported by this broker (readCompacted reads the whole topic)",
        ),
        // Topic policies (`…/{topic}/retention`, `messageTTL`, `maxProducers`, …) and the
        // operations not served (`truncate`, …): refused by name, never ignored.
        [what] => Response::json_error(
            400,
            &format!("`{what}` on a topic (a topic policy or operation) is not supported by this broker"),
        ),
        _ => super::no_route(req),
    }
}
