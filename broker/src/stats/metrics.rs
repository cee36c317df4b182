//! `GET /metrics`: Prometheus text, written from two tables (one row per family: name, type,
//! help and how to read the figure from the stats the admin API serves).

use std::collections::BTreeMap;
use std::fmt::Write;

use super::{topic_stats, SubscriptionStats, TopicStats};
use crate::state::BrokerState;

/// One metric family: name, Prometheus type, help, and the figure.
type Family<S> = (&'static str, &'static str, &'static str, fn(&S) -> f64);

const GAUGE: &str = "gauge";
const COUNTER: &str = "counter";

/// Per topic, labelled `cluster`, `namespace`, `topic`.
#[rustfmt::skip]
const TOPIC: &[Family<TopicStats>] = &[
    ("pulsar_rate_in", GAUGE, "Messages per second published to the topic.", |t| t.msg_rate_in),
    ("pulsar_rate_out", GAUGE, "Messages per second dispatched from the topic.", |t| t.msg_rate_out),
    ("pulsar_throughput_in", GAUGE, "Bytes per second published to the topic.", |t| t.msg_throughput_in),
    ("pulsar_throughput_out", GAUGE, "Bytes per second dispatched from the topic.", |t| t.msg_throughput_out),
    ("pulsar_in_messages_total", COUNTER, "Messages published to the topic.", |t| t.msg_in_counter as f64),
    ("pulsar_in_bytes_total", COUNTER, "Bytes published to the topic.", |t| t.bytes_in_counter as f64),
    ("pulsar_out_messages_total", COUNTER, "Messages dispatched from the topic.", |t| t.msg_out_counter as f64),
    ("pulsar_storage_size", GAUGE, "Bytes of entries the topic stores.", |t| t.storage_size as f64),
    ("pulsar_producers_count", GAUGE, "Connected producers.", |t| t.publishers.len() as f64),
    ("pulsar_subscriptions_count", GAUGE, "Subscriptions of the topic.", |t| t.subscriptions.len() as f64),
    ("pulsar_msg_backlog", GAUGE, "Messages in the backlogs of all subscriptions.", |t| {
        t.subscriptions.values().map(|s| s.msg_backlog).sum::<u64>() as f64
    }),
    ("keyordered_storage_write_failures_total", COUNTER, "Write batches the topic's storage refused.", |t| t.storage_write_failures as f64),
    ("keyordered_storage_write_failures_in_a_row", GAUGE, "Write batches refused since the topic's last successful write (0: writing).", |t| t.storage_write_failures_in_a_row as f64),
    ("pulsar_consumers_count", GAUGE, "Connected consumers.", |t| {
        t.subscriptions.values().map(|s| s.consumers.len()).sum::<usize>() as f64
    }),
];

/// Per subscription, labelled as its topic and `subscription`.
#[rustfmt::skip]
const SUBSCRIPTION: &[Family<SubscriptionStats>] = &[
    ("pulsar_subscription_back_log", GAUGE, "Messages in the subscription's backlog.", |s| s.msg_backlog as f64),
    ("pulsar_subscription_delayed", GAUGE, "Messages waiting for their deliver-at time.", |s| s.msg_delayed as f64),
    ("pulsar_subscription_unacked_messages", GAUGE, "Messages sent and not yet acknowledged.", |s| s.unacked_messages as f64),
    ("pulsar_subscription_msg_rate_out", GAUGE, "Messages per second dispatched to the subscription.", |s| s.msg_rate_out),
    ("pulsar_subscription_msg_throughput_out", GAUGE, "Bytes per second dispatched to the subscription.", |s| s.msg_throughput_out),
    ("pulsar_subscription_consumers_count", GAUGE, "Consumers of the subscription.", |s| s.consumers.len() as f64),
    ("pulsar_subscription_blocked_on_unacked_messages", GAUGE, "Consumers blocked on unacked messages.", |s| {
        s.consumers.iter().filter(|c| c.blocked_consumer_on_unacked_msgs).count() as f64
    }),
    ("keyordered_subscription_draining_hashes", GAUGE, "Key_Shared hashes draining (moved, old owner still has unacked entries).", |s| {
        s.draining_hashes_count.unwrap_or(0) as f64
    }),
    ("keyordered_subscription_orphan_chunks_total", COUNTER, "Chunks whose message start was gone, dispatched instead of replayed.", |s| {
        s.orphan_chunks_dispatched as f64
    }),
    ("keyordered_subscription_nack_held_hashes", GAUGE, "Key_Shared hashes held by an ordered nack.", |s| s.nack_held_hashes as f64),
    ("keyordered_subscription_replay_size", GAUGE, "Positions waiting in replay.", |s| s.replay_size as f64),
    ("keyordered_subscription_redeliveries_total", COUNTER, "Entries taken back for redelivery.", |s| s.redeliveries as f64),
    ("keyordered_subscription_read_failures_total", COUNTER, "Deliveries whose payload could not be read from storage (kept and tried again), over the connected consumers.", |s| s.read_failures as f64),
];

/// Per broker, labelled `cluster`.
#[rustfmt::skip]
const BROKER: &[Family<BrokerState>] = &[
    ("keyordered_read_cache_bytes", GAUGE, "Bytes of payloads the durable topics' read cache holds (--read-cache-mb).", |b| {
        b.read_cache.bytes() as f64
    }),
];

/// Sample lines by family name, with the family's type and help.
#[derive(Default)]
struct Families(BTreeMap<&'static str, (&'static str, &'static str, Vec<String>)>);

impl Families {
    fn add<S>(&mut self, table: &[Family<S>], labels: &str, stats: &S) {
        for (name, kind, help, figure) in table {
            let v = figure(stats);
            self.0
                .entry(name)
                .or_insert_with(|| (kind, help, Vec::new()))
                .2
                .push(format!("{name}{{{labels}}} {v}"));
        }
    }

    fn write(self) -> String {
        let mut out = String::new();
        for (name, (kind, help, lines)) in self.0 {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for l in lines {
                let _ = writeln!(out, "{l}");
            }
        }
        out
    }
}

/// `GET /metrics`: Prometheus text. Pulsar's metric names where Pulsar has the figure
/// (`pulsar_*`, labelled `cluster`, `namespace`, `topic`, `subscription`), this broker's own
/// under `keyordered_*`.
pub(crate) fn metrics(state: &BrokerState) -> String {
    let mut families = Families::default();
    for t in state.topics() {
        let ns = crate::topic::TopicName::parse(&t.name)
            .map(|n| format!("{}/{}", n.tenant, n.namespace))
            .unwrap_or_default();
        let labels = format!(
            "cluster=\"standalone\",namespace=\"{ns}\",topic=\"{}\"",
            t.name
        );
        let st = topic_stats(&t);
        families.add(TOPIC, &labels, &st);
        for (name, s) in &st.subscriptions {
            families.add(
                SUBSCRIPTION,
                &format!("{labels},subscription=\"{name}\""),
                s,
            );
        }
    }
    families.add(BROKER, "cluster=\"standalone\"", state);
    families.write()
}
