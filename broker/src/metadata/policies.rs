//! The namespace policies the broker enforces: message TTL and backlog quotas with
//! `consumer_backlog_eviction` (the two ways besides an admin skip through which a
//! subscription's mark-delete position moves without acks), and the producer and consumer
//! limits. Pulsar's JSON names.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A namespace's policies (only those the broker enforces are kept).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct NamespacePolicies {
    /// Messages older than this many seconds are expired from every subscription.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_ttl_in_seconds: Option<u32>,
    /// Backlog quotas by kind (`destination_storage`, `message_age`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub backlog_quota_map: BTreeMap<QuotaKind, BacklogQuota>,
    /// Deduplication on or off (unset: the broker's `--broker-deduplication-enabled`).
    #[serde(
        default,
        rename = "deduplicationEnabled",
        skip_serializing_if = "Option::is_none"
    )]
    pub deduplication_enabled: Option<bool>,
    /// Consumed ledgers kept for a time or up to a size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_policies: Option<RetentionPolicies>,
    /// At most this many producers per topic (0: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_producers_per_topic: Option<u32>,
    /// At most this many consumers per topic (0: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_consumers_per_topic: Option<u32>,
    /// At most this many consumers per subscription (0: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_consumers_per_subscription: Option<u32>,
}

/// The limit policies, by their admin path names.
pub(crate) const LIMITS: [&str; 3] = [
    "maxProducersPerTopic",
    "maxConsumersPerTopic",
    "maxConsumersPerSubscription",
];

impl NamespacePolicies {
    /// Whether a job has anything to do for this namespace.
    pub(crate) fn has_jobs(&self) -> bool {
        self.message_ttl_in_seconds.is_some() || !self.backlog_quota_map.is_empty()
    }

    /// The limit a path of [`LIMITS`] names.
    pub(crate) fn limit_mut(&mut self, path: &str) -> Option<&mut Option<u32>> {
        match path {
            "maxProducersPerTopic" => Some(&mut self.max_producers_per_topic),
            "maxConsumersPerTopic" => Some(&mut self.max_consumers_per_topic),
            "maxConsumersPerSubscription" => Some(&mut self.max_consumers_per_subscription),
            _ => None,
        }
    }

    /// A limit that is set and not 0 (0 is no limit, as in Pulsar).
    pub(crate) fn limit(value: Option<u32>) -> Option<usize> {
        value.filter(|n| *n > 0).map(|n| n as usize)
    }
}

/// Pulsar's `RetentionPolicies`: consumed messages are kept up to this time and size (-1: no
/// limit; 0 and 0: none kept, the default).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RetentionPolicies {
    /// Minutes (-1: no time limit).
    pub retention_time_in_minutes: i64,
    /// MiB (-1: no size limit).
    #[serde(rename = "retentionSizeInMB")]
    pub retention_size_in_mb: i64,
}

impl RetentionPolicies {
    /// Pulsar's rule: time and size are both 0 or both not 0.
    pub(crate) fn valid(&self) -> bool {
        (self.retention_time_in_minutes == 0) == (self.retention_size_in_mb == 0)
    }

    /// As the topic's retention applies it.
    pub(crate) fn retention(&self) -> crate::topic::Retention {
        let non_negative = |v: i64| u64::try_from(v).ok();
        crate::topic::Retention {
            time_ms: non_negative(self.retention_time_in_minutes).map(|m| m.saturating_mul(60_000)),
            size_bytes: non_negative(self.retention_size_in_mb)
                .map(|mb| mb.saturating_mul(1024 * 1024)),
        }
    }
}

/// Pulsar's `BacklogQuotaType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum QuotaKind {
    /// A limit on a subscription's backlog in bytes (`limitSize`).
    DestinationStorage,
    /// A limit on the age of a subscription's oldest unacked message (`limitTime`, seconds).
    MessageAge,
}

impl QuotaKind {
    /// The `backlogQuotaType` query parameter (absent: `destination_storage`, as Pulsar).
    pub(crate) fn parse(s: Option<&str>) -> Option<QuotaKind> {
        match s {
            None | Some("destination_storage") => Some(QuotaKind::DestinationStorage),
            Some("message_age") => Some(QuotaKind::MessageAge),
            Some(_) => None,
        }
    }
}

/// A backlog quota, as Pulsar's admin API sends it: `consumer_backlog_eviction` moves the
/// slowest subscriptions on; `producer_request_hold` and `producer_exception` close the
/// topic's producers and refuse new ones while the backlog is over the quota.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct BacklogQuota {
    /// Bytes (`destination_storage`); -1 = none.
    #[serde(default = "minus_one")]
    pub limit_size: i64,
    /// Seconds (`message_age`); -1 = none.
    #[serde(default = "minus_one")]
    pub limit_time: i64,
    /// `consumer_backlog_eviction`, `producer_request_hold` or `producer_exception`.
    pub policy: String,
}

fn minus_one() -> i64 {
    -1
}

/// The backlog-quota policy that moves subscriptions on.
pub(crate) const EVICTION: &str = "consumer_backlog_eviction";
/// The backlog-quota policy whose refused producers wait (`ProducerBlockedQuotaExceededError`).
pub(crate) const HOLD: &str = "producer_request_hold";
/// The backlog-quota policy whose refused producers fail their pending messages
/// (`ProducerBlockedQuotaExceededException`).
pub(crate) const EXCEPTION: &str = "producer_exception";

/// Why a backlog quota is refused (the admin API answers 400 with the message).
#[derive(Debug, thiserror::Error)]
pub(crate) enum QuotaError {
    /// Not JSON.
    #[error("body is not a BacklogQuota: {0}")]
    NotJson(#[from] serde_json::Error),
    /// No `policy` field.
    #[error("a BacklogQuota needs a `policy`")]
    NoPolicy,
    /// A policy Pulsar does not have.
    #[error("backlog quota policy `{0}` is not one of {EVICTION}, {HOLD}, {EXCEPTION}")]
    Unsupported(String),
}

impl BacklogQuota {
    /// Reads a request body: Pulsar's `BacklogQuota` JSON (`limitSize`, or the older `limit`,
    /// `limitTime`, `policy`).
    pub(crate) fn from_body(body: &[u8]) -> Result<BacklogQuota, QuotaError> {
        let v: serde_json::Value = serde_json::from_slice(body)?;
        let int = |k: &str| v.get(k).and_then(serde_json::Value::as_i64);
        let policy = v
            .get("policy")
            .and_then(serde_json::Value::as_str)
            .ok_or(QuotaError::NoPolicy)?;
        if ![EVICTION, HOLD, EXCEPTION].contains(&policy) {
            return Err(QuotaError::Unsupported(policy.to_owned()));
        }
        Ok(BacklogQuota {
            limit_size: int("limitSize")
                .filter(|n| *n >= 0)
                .or(int("limit"))
                .unwrap_or(-1),
            limit_time: int("limitTime").unwrap_or(-1),
            policy: policy.to_owned(),
        })
    }
}
