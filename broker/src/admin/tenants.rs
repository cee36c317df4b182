//! `/admin/v2/clusters`, `/admin/v2/tenants` and `/admin/v2/namespaces`: the one cluster,
//! tenants and namespaces (create, list, read, delete), and the namespace policies the broker
//! enforces (message TTL, backlog quotas with `consumer_backlog_eviction`, producer and
//! consumer limits). Any other policy is a 400 that names it, never a silent success.

use super::{json, no_content, parse_query, Request, Response};
use crate::metadata::{
    BacklogQuota, MetadataError, NamespacePolicies, QuotaKind, RetentionPolicies, TenantInfo,
    CLUSTER, LIMITS,
};
use crate::state::BrokerState;

fn refused(e: MetadataError) -> Response {
    Response::json_error(e.status(), &e.to_string())
}

fn done(r: Result<(), MetadataError>) -> Response {
    r.map_or_else(refused, |()| no_content())
}

/// `/admin/v2/clusters[/{cluster}]`.
pub(super) fn clusters(req: &Request, state: &BrokerState, segs: &[&str]) -> Response {
    match (req.method.as_str(), segs) {
        ("GET", []) => json(200, &[CLUSTER]),
        ("GET", [c]) if *c == CLUSTER => json(
            200,
            &serde_json::json!({
                "serviceUrl": state.admin_url,
                "brokerServiceUrl": state.service_url,
            }),
        ),
        ("GET", [_]) => refused(MetadataError::NoSuchCluster),
        _ => super::no_route(req),
    }
}

/// `/admin/v2/tenants[/{tenant}]`.
pub(super) fn tenants(req: &Request, state: &BrokerState, segs: &[&str]) -> Response {
    match (req.method.as_str(), segs) {
        ("GET", []) => json(200, &state.metadata().tenants()),
        ("GET", [t]) => match state.metadata().tenant(t) {
            Ok(info) => json(200, info),
            Err(e) => refused(e),
        },
        ("PUT" | "POST", [t]) => {
            let info = match tenant_info(&req.body) {
                Ok(i) => i,
                Err(r) => return r,
            };
            if req.method == "PUT" {
                done(state.change_metadata(|m| m.create_tenant(t, info)))
            } else {
                done(state.change_metadata(|m| m.update_tenant(t, info)))
            }
        }
        ("DELETE", [t]) => done(state.change_metadata(|m| m.delete_tenant(t))),
        _ => super::no_route(req),
    }
}

/// A `TenantInfo` body; an empty body is a tenant with no roles and no clusters.
fn tenant_info(body: &[u8]) -> Result<TenantInfo, Response> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(TenantInfo::default());
    }
    serde_json::from_slice(body)
        .map_err(|e| Response::json_error(400, &format!("body is not a TenantInfo: {e}")))
}

/// `/admin/v2/namespaces/{tenant}[/{namespace}[/…]]`.
pub(super) fn namespaces(req: &Request, state: &BrokerState, segs: &[&str]) -> Response {
    match (req.method.as_str(), segs) {
        ("GET", [t]) => match state.metadata().namespaces(t) {
            Ok(list) => json(200, &list),
            Err(e) => refused(e),
        },
        ("PUT", [t, ns]) => done(state.change_metadata(|m| m.create_namespace(t, ns))),
        ("GET", [t, ns]) => match state.metadata().policies(t, ns) {
            Ok(p) => json(200, &policies(p)),
            Err(e) => refused(e),
        },
        ("DELETE", [t, ns]) => delete_namespace(req, state, t, ns),
        ("GET", [t, ns, "topics"]) => {
            let known = state.metadata().check_namespace(t, ns);
            match known {
                Ok(()) => json(200, &state.topic_names_in(&format!("{t}/{ns}"))),
                Err(e) => refused(e),
            }
        }
        (_, [t, ns, "messageTTL" | "backlogQuota" | "backlogQuotaMap"]) => {
            enforced_policy(req, state, t, ns, segs[2])
        }
        (_, [t, ns, limit]) if LIMITS.contains(limit) => limit_policy(req, state, t, ns, limit),
        (_, [t, ns, "retention"]) => retention_policy(req, state, t, ns),
        (_, [t, ns, "deduplication"]) => deduplication_policy(req, state, t, ns),
        (_, [_, _, policy, ..]) => Response::json_error(
            400,
            &format!("namespace policy `{policy}` is not supported by this broker"),
        ),
        _ => super::no_route(req),
    }
}

/// `DELETE /admin/v2/namespaces/{t}/{ns}[?force=true]`: refused while the namespace has
/// topics, unless `force`, which deletes them first (closing their clients).
fn delete_namespace(req: &Request, state: &BrokerState, t: &str, ns: &str) -> Response {
    let namespace = format!("{t}/{ns}");
    let force = parse_query(&req.query)
        .get("force")
        .is_some_and(|v| v == "true");
    if force && state.metadata().check_namespace(t, ns).is_ok() {
        let partitioned = state.metadata().partitioned_in(&namespace);
        for p in partitioned {
            if let Err(e) = state.delete_partitioned(&p, true) {
                return Response::json_error(e.status(), &e.to_string());
            }
        }
        for topic in state.topic_names_in(&namespace) {
            if let Err(e) = state.delete_topic(&topic, true) {
                return Response::json_error(e.status(), &e.to_string());
            }
        }
    }
    let has_topics = state.namespace_has_topics(&namespace);
    done(state.change_metadata(|m| m.delete_namespace(t, ns, has_topics)))
}

/// The policies the broker enforces: message TTL (`messageTTL`) and backlog quotas with
/// `consumer_backlog_eviction` (`backlogQuota`, `backlogQuotaMap`).
fn enforced_policy(req: &Request, state: &BrokerState, t: &str, ns: &str, what: &str) -> Response {
    let query = parse_query(&req.query);
    let kind = QuotaKind::parse(query.get("backlogQuotaType").map(String::as_str));
    let Some(kind) = kind else {
        return Response::json_error(
            400,
            "backlogQuotaType must be destination_storage or message_age",
        );
    };
    let change = |f: &dyn Fn(&mut NamespacePolicies)| {
        done(state.change_metadata(|m| m.change_policies(t, ns, f)))
    };
    match (req.method.as_str(), what) {
        ("GET", "messageTTL") => match state.metadata().policies(t, ns) {
            Ok(p) => match p.message_ttl_in_seconds {
                Some(secs) => json(200, &secs),
                None => no_content(),
            },
            Err(e) => refused(e),
        },
        ("POST", "messageTTL") => match String::from_utf8_lossy(&req.body).trim().parse::<i64>() {
            Ok(secs) if (0..=i64::from(u32::MAX)).contains(&secs) => {
                change(&|p| p.message_ttl_in_seconds = Some(secs as u32))
            }
            _ => Response::json_error(412, "Invalid value for message TTL"),
        },
        ("DELETE", "messageTTL") => change(&|p| p.message_ttl_in_seconds = None),
        ("GET", "backlogQuotaMap") => match state.metadata().policies(t, ns) {
            Ok(p) => json(200, &p.backlog_quota_map),
            Err(e) => refused(e),
        },
        ("POST", "backlogQuota") => match BacklogQuota::from_body(&req.body) {
            Ok(q) => change(&|p| {
                p.backlog_quota_map.insert(kind, q.clone());
            }),
            Err(e) => Response::json_error(400, &e.to_string()),
        },
        ("DELETE", "backlogQuota") => change(&|p| {
            p.backlog_quota_map.remove(&kind);
        }),
        _ => super::no_route(req),
    }
}

/// `deduplication`: POST `true` or `false`, GET it (204 when unset: the broker's flag
/// applies), DELETE it. Open topics of the namespace follow at once.
fn deduplication_policy(req: &Request, state: &BrokerState, t: &str, ns: &str) -> Response {
    let set = |value: Option<bool>| {
        let r = state
            .change_metadata(|m| m.change_policies(t, ns, |p| p.deduplication_enabled = value));
        if r.is_ok() {
            state.apply_deduplication(t, ns);
        }
        done(r)
    };
    match req.method.as_str() {
        "GET" => match state.metadata().policies(t, ns) {
            Ok(p) => match p.deduplication_enabled {
                Some(on) => json(200, &on),
                None => no_content(),
            },
            Err(e) => refused(e),
        },
        "POST" => match String::from_utf8_lossy(&req.body).trim() {
            "true" => set(Some(true)),
            "false" => set(Some(false)),
            other => Response::json_error(
                400,
                &format!("deduplication must be true or false, got `{other}`"),
            ),
        },
        "DELETE" => set(None),
        _ => super::no_route(req),
    }
}

/// `retention`: POST Pulsar's `RetentionPolicies`, GET it (204 when unset), DELETE it.
fn retention_policy(req: &Request, state: &BrokerState, t: &str, ns: &str) -> Response {
    let set = |value: Option<RetentionPolicies>| {
        done(state.change_metadata(|m| m.change_policies(t, ns, |p| p.retention_policies = value)))
    };
    match req.method.as_str() {
        "GET" => match state.metadata().policies(t, ns) {
            Ok(p) => match p.retention_policies {
                Some(r) => json(200, &r),
                None => no_content(),
            },
            Err(e) => refused(e),
        },
        "POST" => match serde_json::from_slice::<RetentionPolicies>(&req.body) {
            Ok(r) if r.valid() => set(Some(r)),
            Ok(_) => Response::json_error(
                412,
                "Invalid retention policy: size limit must be set if time limit is set, and vice versa",
            ),
            Err(e) => Response::json_error(400, &format!("body is not a RetentionPolicies: {e}")),
        },
        "DELETE" => set(None),
        _ => super::no_route(req),
    }
}

/// `maxProducersPerTopic`, `maxConsumersPerTopic`, `maxConsumersPerSubscription`: POST a
/// number (0: no limit), GET it (204 when unset), DELETE it.
fn limit_policy(req: &Request, state: &BrokerState, t: &str, ns: &str, name: &str) -> Response {
    let set = |value: Option<u32>| {
        done(state.change_metadata(|m| {
            m.change_policies(t, ns, |p| {
                if let Some(v) = p.limit_mut(name) {
                    *v = value;
                }
            })
        }))
    };
    match req.method.as_str() {
        "GET" => match state.metadata().policies(t, ns) {
            Ok(p) => match p.clone().limit_mut(name).and_then(|v| *v) {
                Some(n) => json(200, &n),
                None => no_content(),
            },
            Err(e) => refused(e),
        },
        "POST" => match String::from_utf8_lossy(&req.body).trim().parse::<u32>() {
            Ok(n) => set(Some(n)),
            Err(_) => Response::json_error(412, &format!("{name} must be a number of at least 0")),
        },
        "DELETE" => set(None),
        _ => super::no_route(req),
    }
}

/// A namespace's policies as Pulsar returns those of a fresh namespace on standalone, with the
/// ones set here (message TTL, backlog quotas).
fn policies(p: &NamespacePolicies) -> serde_json::Value {
    let mut v = fresh_policies();
    v["backlog_quota_map"] = serde_json::json!(p.backlog_quota_map);
    if let Some(secs) = p.message_ttl_in_seconds {
        v["message_ttl_in_seconds"] = serde_json::json!(secs);
    }
    if let Some(on) = p.deduplication_enabled {
        v["deduplicationEnabled"] = serde_json::json!(on);
    }
    if let Some(r) = p.retention_policies {
        v["retention_policies"] = serde_json::json!(r);
    }
    for (key, value) in [
        ("max_producers_per_topic", p.max_producers_per_topic),
        ("max_consumers_per_topic", p.max_consumers_per_topic),
        (
            "max_consumers_per_subscription",
            p.max_consumers_per_subscription,
        ),
    ] {
        if let Some(n) = value {
            v[key] = serde_json::json!(n);
        }
    }
    v
}

fn fresh_policies() -> serde_json::Value {
    serde_json::json!({
        "auth_policies": {
            "namespace_auth": {},
            "destination_auth": {},
            "subscription_auth_roles": {}
        },
        "replication_clusters": [CLUSTER],
        "allowed_clusters": [],
        "bundles": {
            "boundaries": ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"],
            "numBundles": 4
        },
        "backlog_quota_map": {},
        "clusterDispatchRate": {},
        "topicDispatchRate": {},
        "subscriptionDispatchRate": {},
        "replicatorDispatchRate": {},
        "clusterSubscribeRate": {},
        "publishMaxMessageRate": {},
        "latency_stats_sample_rate": {},
        "deleted": false,
        "encryption_required": false,
        "subscription_auth_mode": "None",
        "offload_threshold": -1,
        "offload_threshold_in_seconds": -1,
        "schema_compatibility_strategy": "UNDEFINED",
        "is_allow_auto_update_schema": true,
        "schema_validation_enforced": false,
        "subscription_types_enabled": [],
        "allowed_topic_properties_for_metrics": [],
        "properties": {},
        "migrated": false
    })
}
