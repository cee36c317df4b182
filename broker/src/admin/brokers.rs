//! `/admin/v2/brokers/…`: what health checks and operators ask of a broker. One broker, the
//! leader of its one-broker cluster; no configuration is dynamic.

use super::{json, Request, Response};
use crate::state::BrokerState;

/// Everything under `/admin/v2/brokers`; `segs` are the segments after it.
pub(super) fn route(req: &Request, state: &BrokerState, segs: &[&str]) -> Response {
    if req.method != "GET" {
        return super::no_route(req);
    }
    let id = state.admin_url.trim_start_matches("http://").to_owned();
    match segs {
        ["health"] => health(state, req.received_ms),
        ["ready"] => Response::new(200, "text/plain", "ok"),
        [] | [crate::metadata::CLUSTER] => json(200, &[&id]),
        ["leaderBroker"] => json(
            200,
            &serde_json::json!({ "serviceUrl": state.admin_url, "brokerId": id }),
        ),
        ["configuration"] => json(200, &Vec::<String>::new()),
        ["configuration", "values"] => json(200, &serde_json::json!({})),
        ["configuration", "runtime"] => json(200, &runtime_configuration(state)),
        ["version"] => Response::new(200, "text/plain", state.server_version.clone()),
        _ => super::no_route(req),
    }
}

/// `GET /admin/v2/brokers/health`: 200 "ok", or 500 (as Pulsar's health check answers when
/// its test message cannot be written) while a topic's storage refuses writes: its last write
/// failed, less than a minute ago, and none succeeded since.
fn health(state: &BrokerState, now_ms: u64) -> Response {
    let failing: Vec<String> = state
        .topics()
        .iter()
        .filter_map(|t| {
            let h = t.write_health();
            let e = h.last_error.as_ref().filter(|_| h.failing(now_ms))?;
            Some(format!(
                "{}: {} failed writes in a row, the last: {e}",
                t.name, h.in_row
            ))
        })
        .collect();
    if failing.is_empty() {
        return Response::new(200, "text/plain", "ok");
    }
    let reason = format!(
        "storage refuses writes on {} topic(s): {}",
        failing.len(),
        failing.join("; ")
    );
    json(500, &serde_json::json!({ "reason": reason }))
}

/// The broker's settings under Pulsar's configuration names, as strings (Pulsar's form).
fn runtime_configuration(state: &BrokerState) -> serde_json::Value {
    let c = &state.cfg;
    let s = |v: &dyn ToString| v.to_string();
    serde_json::json!({
        "clusterName": crate::metadata::CLUSTER,
        "brokerServicePort": s(&c.listen.port()),
        "webServicePort": s(&c.admin.port()),
        "allowAutoTopicCreation": s(&c.allow_auto_topic_creation),
        "allowAutoTopicCreationType": if c.auto_topic_partitioned { "partitioned" } else { "non-partitioned" },
        "defaultNumPartitions": s(&c.default_num_partitions),
        "maxNumPartitionsPerPartitionedTopic": s(&c.max_num_partitions),
        "maxMessageSize": s(&c.max_message_size),
        "managedLedgerMaxEntriesPerLedger": s(&c.entries_per_ledger),
        "managedLedgerCacheSizeMB": s(&c.read_cache_mb),
        "keepAliveIntervalSeconds": s(&(c.keep_alive_ms / 1000)),
        "delayedDeliveryEnabled": s(&c.delayed_delivery.enabled),
        "delayedDeliveryTickTimeMillis": s(&c.delayed_delivery.tick),
        "isDelayedDeliveryDeliverAtTimeStrict": s(&c.delayed_delivery.strict),
        "messageExpiryCheckIntervalInMinutes": s(&(c.message_expiry_check_ms / 60_000)),
        "backlogQuotaCheckIntervalInSeconds": s(&(c.backlog_quota_check_ms / 1000)),
        "maxUnackedMessagesPerConsumer": s(&c.dispatch.max_unacked_per_consumer),
        "maxUnackedMessagesPerSubscription": s(&c.dispatch.max_unacked_per_subscription),
        "keySharedLookAheadMsgInReplayThresholdPerConsumer": s(&c.dispatch.look_ahead_per_consumer),
        "keySharedLookAheadMsgInReplayThresholdPerSubscription": s(&c.dispatch.look_ahead_per_subscription),
        "keySharedUnblockingIntervalMs": s(&c.dispatch.unblocking_interval_ms),
        "subscriptionKeySharedUseConsistentHashing": s(&c.dispatch.key_shared_use_consistent_hashing),
        "subscriptionKeySharedConsistentHashingReplicaPoints": s(&c.dispatch.key_shared_replica_points),
    })
}
