//! The namespace policies' jobs, run by the shell's housekeeping thread with the time it
//! passes in: message TTL (expiry) and backlog quotas. Expiry and `consumer_backlog_eviction`
//! move a subscription's mark-delete position without acks, exactly as the admin API's
//! expire and skip do, through the topic (so the dispatcher keeps a draining key with its
//! owner; `--legacy mark-delete-cleanup` shows Pulsar releasing it instead).
//! `producer_request_hold` and `producer_exception` close the producers of a topic whose
//! backlog is over the quota, and PRODUCER is refused while it is
//! ([`BrokerState::backlog_quota_refusal`]).

use std::sync::atomic::Ordering;

use dispatcher::AdminOp;
use tracing::info;

use super::BrokerState;
use crate::metadata::{BacklogQuota, NamespacePolicies, QuotaKind, EVICTION, EXCEPTION, HOLD};
use crate::topic::Topic;

/// Why a PRODUCER is refused under a producer-side backlog quota: the error code Pulsar
/// answers with, and its words.
pub(crate) type QuotaRefusal = (wire::proto::ServerError, &'static str);

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
        let eviction = |p: &NamespacePolicies, kind| {
            p.backlog_quota_map
                .get(&kind)
                .filter(|q| q.policy == EVICTION)
                .cloned()
        };
        let by_size = self.enforce(
            |p| {
                let q = eviction(p, QuotaKind::DestinationStorage)?;
                u64::try_from(q.limit_size).ok().map(AdminOp::EvictToSize)
            },
            "backlog quota (size)",
            now_ms,
        );
        let by_age = self.enforce(
            |p| {
                let q = eviction(p, QuotaKind::MessageAge)?;
                let secs = u64::try_from(q.limit_time).ok()?;
                Some(AdminOp::Expire(now_ms.saturating_sub(secs * 1000)))
            },
            "backlog quota (age)",
            now_ms,
        );
        self.close_producers_over_quota(now_ms);
        by_size + by_age
    }

    /// Closes the producers of every topic over a producer-side backlog quota (as Pulsar's
    /// quota check disconnects them); their clients reopen and are refused while it lasts.
    fn close_producers_over_quota(&self, now_ms: u64) {
        for t in self.topics() {
            if t.producer_ids().is_empty() {
                continue;
            }
            if let Some((_, why)) = self.backlog_quota_refusal(&t, now_ms) {
                info!(topic = %t.name, reason = why, "producers closed: the backlog is over a producer-side quota");
                self.close_producers(&t);
            }
        }
    }

    /// Whether `topic` refuses new producers at `now_ms` under its namespace's
    /// `producer_request_hold` or `producer_exception` backlog quota: its slowest
    /// subscription's backlog is over `limitSize` bytes (`destination_storage`), or its oldest
    /// unacknowledged entry was published more than `limitTime` seconds ago (`message_age`).
    pub(crate) fn backlog_quota_refusal(&self, topic: &Topic, now_ms: u64) -> Option<QuotaRefusal> {
        let name = crate::topic::TopicName::parse(&topic.name).ok()?;
        // Only the producer-side quotas, copied out of the metadata lock: most namespaces have
        // none, and a PRODUCER then costs no more than this look-up.
        let quotas: Vec<(QuotaKind, BacklogQuota, wire::proto::ServerError)> = self
            .metadata()
            .policies(&name.tenant, &name.namespace)
            .ok()?
            .backlog_quota_map
            .iter()
            .filter_map(|(&kind, q)| {
                let code = match q.policy.as_str() {
                    HOLD => wire::proto::ServerError::ProducerBlockedQuotaExceededError,
                    EXCEPTION => wire::proto::ServerError::ProducerBlockedQuotaExceededException,
                    _ => return None,
                };
                Some((kind, q.clone(), code))
            })
            .collect();
        let over = |q: &BacklogQuota, kind: QuotaKind| match kind {
            QuotaKind::DestinationStorage => u64::try_from(q.limit_size).is_ok_and(|limit| {
                topic
                    .subscriptions()
                    .iter()
                    .any(|s| s.runtime.cursor_view().backlog.bytes > limit)
            }),
            QuotaKind::MessageAge => u64::try_from(q.limit_time).is_ok_and(|secs| {
                let before = now_ms.saturating_sub(secs * 1000);
                topic.subscriptions().iter().any(|s| {
                    let view = s.runtime.cursor_view();
                    view.backlog.entries > 0
                        && topic
                            .meta(view.read)
                            .is_some_and(|m| m.publish_time < before)
                })
            }),
        };
        quotas.into_iter().find_map(|(kind, q, code)| {
            over(&q, kind).then_some((
                code,
                "Cannot create producer on topic with backlog quota exceeded",
            ))
        })
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
