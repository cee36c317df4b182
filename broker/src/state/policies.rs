//! The namespace policies' jobs, run by the shell's housekeeping thread with the time it
//! passes in: message TTL (expiry) and backlog quotas with `consumer_backlog_eviction`. Each
//! moves a subscription's mark-delete position without acks, exactly as the admin API's
//! expire and skip do, through the topic (so the dispatcher keeps a draining key with its
//! owner; `--legacy mark-delete-cleanup` shows Pulsar releasing it instead).

use std::sync::atomic::Ordering;

use dispatcher::AdminOp;
use tracing::info;

use super::BrokerState;
use crate::metadata::{NamespacePolicies, QuotaKind};

impl BrokerState {
    /// Expires, on every subscription of a namespace with a message TTL, the messages
    /// published more than the TTL before `now_ms` (ms since the Unix epoch). Returns how many
    /// subscriptions moved.
    pub(crate) fn expire_by_ttl(&self, now_ms: u64) -> usize {
        self.enforce(
            |p| {
                p.message_ttl_in_seconds
                    .map(|secs| AdminOp::Expire(now_ms.saturating_sub(u64::from(secs) * 1000)))
            },
            "message TTL",
            now_ms,
        )
    }

    /// Evicts, on every subscription of a namespace with a backlog quota, the oldest backlog
    /// past the quota: above `limitSize` bytes (`destination_storage`), or older than
    /// `limitTime` seconds (`message_age`). Returns how many subscriptions moved.
    pub(crate) fn enforce_backlog_quotas(&self, now_ms: u64) -> usize {
        let by_size = self.enforce(
            |p| {
                let q = p.backlog_quota_map.get(&QuotaKind::DestinationStorage)?;
                u64::try_from(q.limit_size).ok().map(AdminOp::EvictToSize)
            },
            "backlog quota (size)",
            now_ms,
        );
        let by_age = self.enforce(
            |p| {
                let q = p.backlog_quota_map.get(&QuotaKind::MessageAge)?;
                let secs = u64::try_from(q.limit_time).ok()?;
                Some(AdminOp::Expire(now_ms.saturating_sub(secs * 1000)))
            },
            "backlog quota (age)",
            now_ms,
        );
        by_size + by_age
    }

    /// Drops what each topic's retention lets go (see `Topic::trim`), under its namespace's
    /// retention policy if it has one.
    pub(crate) fn trim_topics(&self, now_ms: u64) {
        let mut by_namespace: std::collections::HashMap<String, Option<crate::topic::Retention>> =
            std::collections::HashMap::new();
        for t in self.topics() {
            let Ok(name) = crate::topic::TopicName::parse(&t.name) else {
                continue;
            };
            let retention = *by_namespace
                .entry(name.namespace_name())
                .or_insert_with(|| {
                    self.metadata()
                        .policies(&name.tenant, &name.namespace)
                        .ok()
                        .and_then(|p| p.retention_policies)
                        .map(|r| r.retention())
                });
            t.trim(now_ms, retention);
        }
    }

    /// Runs the operation `op` gives for each namespace's policies on every subscription of
    /// its topics that has a backlog.
    fn enforce(
        &self,
        op: impl Fn(&NamespacePolicies) -> Option<AdminOp>,
        what: &'static str,
        now_ms: u64,
    ) -> usize {
        let namespaces = self.metadata().enforced_policies();
        let mut moved = 0;
        for (namespace, policies) in namespaces {
            let Some(op) = op(&policies) else { continue };
            for name in self.topic_names_in(&namespace) {
                let Some(topic) = self.existing_topic(&name) else {
                    continue;
                };
                for sub in topic.subscriptions() {
                    if sub.runtime.cursor_view().backlog.entries == 0 {
                        continue;
                    }
                    let Some(mv) = topic.move_cursor(&sub, op) else {
                        continue;
                    };
                    if matches!(op, AdminOp::Expire(_)) {
                        sub.last_expire.store(now_ms, Ordering::Relaxed);
                    }
                    moved += 1;
                    info!(topic = %topic.name, subscription = %sub.name, policy = what, to = %mv.to, "mark-delete moved by a namespace policy");
                }
            }
        }
        moved
    }
}
