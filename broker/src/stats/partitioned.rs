//! A partitioned topic's stats: its partitions' stats summed (Pulsar's `partitioned-stats`,
//! with the per-partition stats under `partitions` when asked), and its partitions' internal
//! stats side by side (`partitioned-internalStats`).

use std::collections::BTreeMap;

use serde::Serialize;

use super::{internal_stats, topic_stats, InternalStats, SubscriptionStats, TopicStats};
use crate::state::BrokerState;
use crate::topic::partition_name;

/// What `partitioned-stats` and `partitioned-internalStats` say about the topic itself.
#[derive(Clone, Copy, Serialize)]
pub(crate) struct PartitionedMetadata {
    partitions: u32,
}

/// `GET …/{topic}/partitioned-stats`.
#[derive(Serialize)]
pub(crate) struct PartitionedStats {
    #[serde(flatten)]
    total: TopicStats,
    metadata: PartitionedMetadata,
    partitions: BTreeMap<String, TopicStats>,
}

/// `GET …/{topic}/partitioned-internalStats`.
#[derive(Serialize)]
pub(crate) struct PartitionedInternalStats {
    metadata: PartitionedMetadata,
    partitions: BTreeMap<String, InternalStats>,
}

impl SubscriptionStats {
    /// Adds another partition's figures for the same subscription.
    fn add(&mut self, o: SubscriptionStats) {
        self.msg_rate_out += o.msg_rate_out;
        self.msg_throughput_out += o.msg_throughput_out;
        self.msg_out_counter += o.msg_out_counter;
        self.bytes_out_counter += o.bytes_out_counter;
        self.msg_backlog += o.msg_backlog;
        self.backlog_size += o.backlog_size;
        self.unacked_messages += o.unacked_messages;
        self.msg_rate_redeliver += o.msg_rate_redeliver;
        self.msg_delayed += o.msg_delayed;
        self.delayed_message_index_size_in_bytes += o.delayed_message_index_size_in_bytes;
        self.last_expire_timestamp = self.last_expire_timestamp.max(o.last_expire_timestamp);
        self.consumers.extend(o.consumers);
        self.draining_hashes_count = match (self.draining_hashes_count, o.draining_hashes_count) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        self.replay_size += o.replay_size;
        self.orphan_chunks_dispatched += o.orphan_chunks_dispatched;
        self.nack_held_hashes += o.nack_held_hashes;
        self.redeliveries += o.redeliveries;
        self.nacks += o.nacks;
        self.read_failures += o.read_failures;
    }
}

impl TopicStats {
    /// Adds another partition's figures.
    fn add(&mut self, o: TopicStats) {
        self.msg_rate_in += o.msg_rate_in;
        self.msg_throughput_in += o.msg_throughput_in;
        self.msg_rate_out += o.msg_rate_out;
        self.msg_throughput_out += o.msg_throughput_out;
        self.msg_in_counter += o.msg_in_counter;
        self.bytes_in_counter += o.bytes_in_counter;
        self.msg_out_counter += o.msg_out_counter;
        self.bytes_out_counter += o.bytes_out_counter;
        self.storage_size += o.storage_size;
        self.backlog_size += o.backlog_size;
        self.average_msg_size = if self.msg_in_counter == 0 {
            0.0
        } else {
            self.bytes_in_counter as f64 / self.msg_in_counter as f64
        };
        self.publishers.extend(o.publishers);
        for (name, s) in o.subscriptions {
            match self.subscriptions.get_mut(&name) {
                Some(mine) => mine.add(s),
                None => {
                    self.subscriptions.insert(name, s);
                }
            }
        }
    }
}

/// The stats of partitioned topic `full` (`None` when it is not one); a partition not
/// opened yet counts as empty.
pub(crate) fn partitioned_stats(
    state: &BrokerState,
    full: &str,
    per_partition: bool,
) -> Option<PartitionedStats> {
    let n = state.metadata().partitions(full)?;
    let mut total = TopicStats::default();
    let mut partitions = BTreeMap::new();
    for i in 0..n {
        let name = partition_name(full, i);
        let stats = state
            .existing_topic(&name)
            .map(|t| topic_stats(&t))
            .unwrap_or_default();
        if per_partition {
            partitions.insert(name, stats.clone());
        }
        total.add(stats);
    }
    Some(PartitionedStats {
        total,
        metadata: PartitionedMetadata { partitions: n },
        partitions,
    })
}

/// The internal stats of each opened partition of partitioned topic `full`.
pub(crate) fn partitioned_internal_stats(
    state: &BrokerState,
    full: &str,
) -> Option<PartitionedInternalStats> {
    let n = state.metadata().partitions(full)?;
    let partitions = (0..n)
        .filter_map(|i| {
            let name = partition_name(full, i);
            let t = state.existing_topic(&name)?;
            Some((name, internal_stats(&t)))
        })
        .collect();
    Some(PartitionedInternalStats {
        metadata: PartitionedMetadata { partitions: n },
        partitions,
    })
}
