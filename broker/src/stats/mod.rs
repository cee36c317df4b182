//! Topic stats, internal stats and metrics, with Pulsar's field and metric names.
//!
//! The JSON shapes follow Pulsar's admin v2 `TopicStats` / `SubscriptionStats` /
//! `ConsumerStats` and `PersistentTopicInternalStats` (field names as Pulsar serialises them);
//! fields this broker has no notion of (replication, compaction, schemas) are left out rather
//! than filled with zeros that would mislead.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use cursor::Position;
use dispatcher::BlockReason;
use serde::Serialize;

use crate::state::BrokerState;
use crate::sync::lock;
use crate::topic::{SubKind, Subscription, Topic};

mod consumer;
pub(crate) use consumer::consumer_stats_response;

/// `ms` since the epoch as RFC 3339 (UTC, millisecond precision), as Pulsar's stats show times.
/// Times after the year 9999 (which RFC 3339 cannot write) show as its last millisecond.
pub(crate) fn rfc3339(ms: u64) -> String {
    const LAST_MS: u64 = 253_402_300_799_999;
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.min(LAST_MS));
    humantime::format_rfc3339_millis(t).to_string()
}

/// Pulsar's text form of a position: `ledger:entry`, with `-1` for "before the first entry".
pub(crate) fn position_text(p: Position) -> String {
    if p.entry_id == u64::MAX {
        format!("{}:-1", p.ledger_id)
    } else {
        format!("{}:{}", p.ledger_id, p.entry_id)
    }
}

#[derive(Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PublisherStats {
    producer_name: String,
    address: String,
    connected_since: String,
    client_version: String,
    metadata: BTreeMap<String, String>,
    /// Pulsar's `accessMode`: Shared, Exclusive, ExclusiveWithFencing or WaitForExclusive.
    access_mode: &'static str,
}

#[derive(Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DrainingHash {
    hash: u32,
    unack_msgs: u32,
    blocked_attempts: u64,
}

#[derive(Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ConsumerStats {
    consumer_name: String,
    address: String,
    connected_since: String,
    client_version: String,
    metadata: BTreeMap<String, String>,
    available_permits: i64,
    unacked_messages: i64,
    blocked_consumer_on_unacked_msgs: bool,
    msg_out_counter: u64,
    bytes_out_counter: u64,
    /// Ours: deliveries whose payload the store could not read (each tried again).
    read_failures: u64,
    priority_level: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    key_hash_ranges: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    draining_hashes: Option<Vec<DrainingHash>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    draining_hashes_count: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    draining_hashes_unacked_messages: Option<u64>,
}

#[derive(Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SubscriptionStats {
    #[serde(rename = "type")]
    kind: &'static str,
    msg_rate_out: f64,
    msg_throughput_out: f64,
    msg_out_counter: u64,
    bytes_out_counter: u64,
    msg_backlog: u64,
    backlog_size: u64,
    unacked_messages: i64,
    msg_rate_redeliver: f64,
    /// Messages waiting for their deliver-at time (Pulsar's `msgDelayed`).
    msg_delayed: usize,
    /// Bytes of the delayed-delivery index (Pulsar's `delayedMessageIndexSizeInBytes`).
    delayed_message_index_size_in_bytes: usize,
    last_expire_timestamp: u64,
    consumers: Vec<ConsumerStats>,
    /// Failover and Exclusive: the consumer that gets the messages.
    #[serde(skip_serializing_if = "Option::is_none")]
    active_consumer_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    key_shared_mode: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    allow_out_of_order_delivery: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    draining_hashes_count: Option<usize>,
    is_durable: bool,
    is_replicated: bool,
    /// This broker's own figures (not in Pulsar's stats).
    replay_size: usize,
    orphan_chunks_dispatched: u64,
    nack_held_hashes: usize,
    redeliveries: u64,
    nacks: u64,
    /// Deliveries whose payload the store could not read, over the connected consumers.
    read_failures: u64,
}

#[derive(Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TopicStats {
    msg_rate_in: f64,
    msg_throughput_in: f64,
    msg_rate_out: f64,
    msg_throughput_out: f64,
    msg_in_counter: u64,
    bytes_in_counter: u64,
    msg_out_counter: u64,
    bytes_out_counter: u64,
    average_msg_size: f64,
    storage_size: u64,
    backlog_size: u64,
    publishers: Vec<PublisherStats>,
    subscriptions: BTreeMap<String, SubscriptionStats>,
    /// This broker's own figures (not in Pulsar's stats): write batches the store refused
    /// since the topic was loaded, and in a row (0 once a write succeeds; while it is not, new
    /// producers are refused for a while after each failure).
    storage_write_failures: u64,
    storage_write_failures_in_a_row: u32,
}

/// One consumer's stats, from the dispatcher's figures and the registry's.
fn consumer_stats(
    c: &dispatcher::ConsumerStats,
    info: Option<&crate::topic::ConsumerInfo>,
    key_shared: bool,
) -> ConsumerStats {
    let (m, b, f) = info.map_or((0, 0, 0), |i| {
        (
            i.out.messages.load(Ordering::Relaxed),
            i.out.bytes.load(Ordering::Relaxed),
            i.out.read_failures.load(Ordering::Relaxed),
        )
    });
    let draining: Vec<DrainingHash> = c
        .draining
        .iter()
        .map(|d| DrainingHash {
            hash: d.hash,
            unack_msgs: d.pending,
            blocked_attempts: u64::from(d.blocked_attempts),
        })
        .collect();
    ConsumerStats {
        consumer_name: c.name.clone(),
        address: info.map(|i| i.address.clone()).unwrap_or_default(),
        connected_since: info.map(|i| i.connected_since.clone()).unwrap_or_default(),
        client_version: info.map(|i| i.client_version.clone()).unwrap_or_default(),
        metadata: info.map(|i| i.metadata.clone()).unwrap_or_default(),
        available_permits: c.permits,
        unacked_messages: c.unacked,
        blocked_consumer_on_unacked_msgs: c.blocked_on_unacked,
        msg_out_counter: m,
        bytes_out_counter: b,
        read_failures: f,
        priority_level: c.priority,
        draining_hashes_count: key_shared.then_some(draining.len()),
        draining_hashes_unacked_messages: key_shared
            .then(|| draining.iter().map(|d| u64::from(d.unack_msgs)).sum()),
        draining_hashes: key_shared.then_some(draining),
        // Pulsar's text form, e.g. "[0, 32767]".
        key_hash_ranges: key_shared.then(|| {
            c.hash_ranges
                .iter()
                .map(|r| format!("[{}, {}]", r.start, r.end))
                .collect()
        }),
    }
}

fn subscription_stats(s: &Subscription) -> Option<SubscriptionStats> {
    let (ds, cs) = s.runtime.stats()?;
    let view = s.runtime.cursor_view();
    let infos = lock(&s.consumers).clone();
    let key_shared = matches!(s.kind, SubKind::KeyShared(_));
    let consumers: Vec<ConsumerStats> = cs
        .iter()
        .map(|c| consumer_stats(c, infos.get(&c.id), key_shared))
        .collect();
    let out_msgs = consumers.iter().map(|c| c.msg_out_counter).sum();
    let out_bytes = consumers.iter().map(|c| c.bytes_out_counter).sum();
    let read_failures = consumers.iter().map(|c| c.read_failures).sum();
    let (rate_m, rate_b) = *lock(&s.rate_out);
    let active = match s.kind {
        SubKind::Failover => ds.active_consumer,
        SubKind::Exclusive => cs.first().map(|c| c.id),
        _ => None,
    };
    let active_consumer_name = active
        .and_then(|a| cs.iter().find(|c| c.id == a))
        .map(|c| c.name.clone());
    let mode = s.kind.key_shared_mode_name();
    let ooo = match s.kind {
        SubKind::KeyShared(k) => Some(k.allow_out_of_order),
        _ => None,
    };
    Some(SubscriptionStats {
        kind: s.kind.pulsar_name(),
        msg_rate_out: rate_m.per_sec,
        msg_throughput_out: rate_b.per_sec,
        msg_out_counter: out_msgs,
        bytes_out_counter: out_bytes,
        msg_backlog: view.backlog.messages,
        backlog_size: view.backlog.bytes,
        unacked_messages: cs.iter().map(|c| c.unacked).sum(),
        msg_rate_redeliver: 0.0,
        msg_delayed: ds.delayed,
        delayed_message_index_size_in_bytes: ds.delayed_index_bytes,
        last_expire_timestamp: s.last_expire.load(Ordering::Relaxed),
        consumers,
        active_consumer_name,
        key_shared_mode: mode,
        allow_out_of_order_delivery: ooo,
        draining_hashes_count: key_shared.then_some(ds.draining_hashes),
        is_durable: true,
        is_replicated: false,
        replay_size: ds.replay_size,
        orphan_chunks_dispatched: ds.orphan_chunks,
        nack_held_hashes: ds.held_hashes,
        redeliveries: ds.redeliveries,
        nacks: ds.nacks,
        read_failures,
    })
}

/// `GET …/stats`.
pub(crate) fn topic_stats(t: &Topic) -> TopicStats {
    let c = t.counters();
    let (rate_m, rate_b) = *lock(&t.rate_in);
    let (storage, _) = t.storage();
    let health = t.write_health();
    let subscriptions: BTreeMap<String, SubscriptionStats> = t
        .subscriptions()
        .iter()
        .filter_map(|s| Some((s.name.clone(), subscription_stats(s)?)))
        .collect();
    let publishers = lock(&t.producers)
        .infos()
        .map(|p| PublisherStats {
            producer_name: p.name.clone(),
            address: p.address.clone(),
            connected_since: p.connected_since.clone(),
            client_version: p.client_version.clone(),
            metadata: p.metadata.clone(),
            access_mode: p.access.pulsar_name(),
        })
        .collect();
    TopicStats {
        msg_rate_in: rate_m.per_sec,
        msg_throughput_in: rate_b.per_sec,
        // A fold from 0.0: `Sum` of no f64 is -0.0, which JSON shows as `-0.0`.
        msg_rate_out: subscriptions.values().fold(0.0, |a, s| a + s.msg_rate_out),
        msg_throughput_out: subscriptions
            .values()
            .fold(0.0, |a, s| a + s.msg_throughput_out),
        msg_in_counter: c.msg_in,
        bytes_in_counter: c.bytes_in,
        msg_out_counter: subscriptions.values().map(|s| s.msg_out_counter).sum(),
        bytes_out_counter: subscriptions.values().map(|s| s.bytes_out_counter).sum(),
        average_msg_size: if c.msg_in == 0 {
            0.0
        } else {
            c.bytes_in as f64 / c.msg_in as f64
        },
        storage_size: storage.bytes,
        backlog_size: subscriptions.values().map(|s| s.backlog_size).sum(),
        publishers,
        subscriptions,
        storage_write_failures: health.failures,
        storage_write_failures_in_a_row: health.in_row,
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LedgerInfo {
    ledger_id: u64,
    entries: u64,
    size: u64,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CursorStats {
    mark_delete_position: String,
    read_position: String,
    individually_deleted_messages: String,
    total_non_contiguous_deleted_messages_range: usize,
    messages_consumed_counter: u64,
    number_of_entries_since_first_not_acked_message: u64,
    state: &'static str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct InternalStats {
    entries_added_counter: u64,
    number_of_entries: u64,
    total_size: u64,
    last_confirmed_entry: String,
    state: &'static str,
    ledgers: Vec<LedgerInfo>,
    cursors: BTreeMap<String, CursorStats>,
}

/// Pulsar's text form of the acked runs above mark-delete: `[(a..b], (c..d]]`, each range
/// open at the position before its first acked entry and closed at its last.
pub(crate) fn deleted_ranges_text(ranges: &[(Position, Position)]) -> String {
    let parts: Vec<String> = ranges
        .iter()
        .map(|(a, b)| format!("({}..{}]", position_text(a.before()), position_text(*b)))
        .collect();
    format!("[{}]", parts.join(", "))
}

/// `GET …/internalStats`.
pub(crate) fn internal_stats(t: &Topic) -> InternalStats {
    let (storage, ledgers) = t.storage();
    let counters = t.counters();
    let cursors = t
        .subscriptions()
        .iter()
        .map(|s| {
            let v = s.runtime.cursor_view();
            let ranges = s.runtime.acked_ranges();
            (
                s.name.clone(),
                CursorStats {
                    mark_delete_position: position_text(v.mark_delete),
                    read_position: position_text(v.read),
                    individually_deleted_messages: deleted_ranges_text(&ranges),
                    total_non_contiguous_deleted_messages_range: ranges.len(),
                    messages_consumed_counter: counters
                        .entries_in
                        .saturating_sub(v.backlog.entries),
                    number_of_entries_since_first_not_acked_message: v.backlog.entries,
                    state: "Open",
                },
            )
        })
        .collect();
    InternalStats {
        entries_added_counter: counters.entries_in,
        number_of_entries: storage.entries,
        total_size: storage.bytes,
        last_confirmed_entry: position_text(t.last_position()),
        state: "LedgerOpened",
        ledgers: ledgers
            .into_iter()
            .map(|(id, n, b)| LedgerInfo {
                ledger_id: id,
                entries: n,
                size: b,
            })
            .collect(),
        cursors,
    }
}

/// `GET …/whyBlocked`: the typed reason as JSON.
pub(crate) fn why_blocked_json(reason: BlockReason, hash: Option<u32>) -> serde_json::Value {
    use serde_json::json;
    let mut v = match reason {
        BlockReason::DrainingOn { consumer, pending } => json!({
            "reason": "draining",
            "consumerId": consumer.0,
            "pendingEntries": pending,
            "explanation": format!("the key moved away from consumer {consumer}, which still has {pending} unacked entries of it"),
        }),
        BlockReason::BehindReplay { position } => json!({
            "reason": "behindReplay",
            "position": position_text(position),
            "explanation": "an earlier entry of the key waits in replay; later entries queue behind it",
        }),
        BlockReason::HeldByNack { position, until } => json!({
            "reason": "heldByNack",
            "position": position_text(position),
            "untilDispatcherMs": until,
            "explanation": "a nacked entry of the key waits to be re-sent; no entry of the key goes out before it",
        }),
        BlockReason::Parked { position } => json!({
            "reason": "parked",
            "position": position_text(position),
            "explanation": "a nacked entry reached the dead-letter threshold and is parked",
        }),
        BlockReason::NoPermits { consumer } => json!({
            "reason": "noPermits",
            "consumerId": consumer.0,
            "explanation": format!("the key's owner {consumer} has no permits or is blocked on unacked messages"),
        }),
        BlockReason::KeySerial { unacked } => json!({
            "reason": "keySerial",
            "unackedEntries": unacked,
            "explanation": format!("key-serial dispatch: the key has {unacked} unacked entries, its limit; the next waits for an ack"),
        }),
        BlockReason::UnassignedRange => json!({
            "reason": "unassignedRange",
            "explanation": "no connected consumer covers the key's hash",
        }),
        BlockReason::NotBlocked => json!({
            "reason": "notBlocked",
            "explanation": "nothing holds the key back",
        }),
    };
    if let (Some(h), Some(obj)) = (hash, v.as_object_mut()) {
        obj.insert("hash".into(), json!(h));
    }
    v
}

/// Feeds the rate meters (called once per housekeeping interval).
pub(crate) fn update_rates(state: &BrokerState, secs: f64) {
    for t in state.topics() {
        let c = t.counters();
        {
            let mut r = lock(&t.rate_in);
            r.0.update(c.msg_in, secs);
            r.1.update(c.bytes_in, secs);
        }
        for s in t.subscriptions() {
            let (m, b) = lock(&s.consumers).values().fold((0, 0), |(m, b), i| {
                (
                    m + i.out.messages.load(Ordering::Relaxed),
                    b + i.out.bytes.load(Ordering::Relaxed),
                )
            });
            let mut r = lock(&s.rate_out);
            r.0.update(m, secs);
            r.1.update(b, secs);
        }
    }
}

mod metrics;
mod partitioned;

pub(crate) use metrics::metrics;
pub(crate) use partitioned::{partitioned_internal_stats, partitioned_stats};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(rfc3339(1_796_110_000_000), "2026-12-01T07:26:40.000Z");
        assert_eq!(rfc3339(u64::MAX), "9999-12-31T23:59:59.999Z");
    }

    #[test]
    fn pulsar_text_forms() {
        assert_eq!(position_text(Position::new(3, u64::MAX)), "3:-1");
        let ranges = [
            (Position::new(1, 2), Position::new(1, 4)),
            (Position::new(1, 7), Position::new(1, 7)),
        ];
        assert_eq!(deleted_ranges_text(&ranges), "[(1:1..1:4], (1:6..1:7]]");
        assert_eq!(deleted_ranges_text(&[]), "[]");
    }
}
