//! Which topics exist and may be used: the namespace rule, creation on first use, partitioned
//! topics (their partitions are ordinary topics named `{topic}-partition-{i}`) and deletion.

use std::sync::Arc;

use tracing::info;

use super::BrokerState;
use crate::metadata::{MetadataError, TopicProperties};
use crate::storage::StorageError;
use crate::sync::lock;
use crate::topic::{partition_name, Topic, TopicName};
use cursor::Position;

/// Why a client cannot use a topic.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TopicError {
    /// Its tenant or namespace does not exist (or the metadata could not be kept).
    #[error(transparent)]
    Metadata(#[from] MetadataError),
    /// It does not exist and may not be created on first use.
    #[error("Topic {0} does not exist")]
    NotFound(String),
    /// It is a partitioned topic: clients use its partitions.
    #[error("Found partitioned metadata for non-partitioned topic: {0}")]
    Partitioned(String),
    /// A partition past its topic's count.
    #[error("Illegal topic partition name {name} with max allowed {partitions} partitions")]
    IllegalPartition {
        /// The partition's name.
        name: String,
        /// Its topic's count.
        partitions: u32,
    },
    /// A partition's name given to the admin API where a topic's is expected.
    #[error("Partitioned Topic Name should not contain '-partition-'")]
    PartitionName,
    /// Its storage failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Why a topic cannot be deleted.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DeleteError {
    /// No such topic.
    #[error("Topic {0} not found")]
    NotFound(String),
    /// Producers or consumers are connected (and `force` was not given).
    #[error("Topic has {0} connected producers/consumers")]
    Busy(usize),
    /// A partitioned topic's partitions are connected (and `force` was not given).
    #[error("Topic has active producers/subscriptions")]
    PartitionsBusy,
    /// `DELETE …/{topic}` of a partitioned topic.
    #[error("{0} is a partitioned topic, instead of calling delete topic, please call delete-partitioned-topic.")]
    Partitioned(String),
    /// `DELETE …/{topic}/partitions` of a non-partitioned topic.
    #[error("{0} is a non-partitioned topic. Instead of calling delete-partitioned-topic please call delete.")]
    NotPartitioned(String),
    /// The metadata or the storage failed.
    #[error(transparent)]
    Metadata(#[from] MetadataError),
}

impl DeleteError {
    /// The HTTP status Pulsar answers.
    pub(crate) fn status(&self) -> u16 {
        match self {
            DeleteError::NotFound(_) => 404,
            DeleteError::Busy(_) | DeleteError::PartitionsBusy => 412,
            DeleteError::Partitioned(_) | DeleteError::NotPartitioned(_) => 409,
            DeleteError::Metadata(e) => e.status(),
        }
    }
}

impl BrokerState {
    /// The topic a producer or a consumer asks for, created on first use when the broker
    /// allows it (a partition of a partitioned topic always is). Refused when its namespace
    /// does not exist, when it is a partitioned topic itself, or when it is a partition past
    /// its topic's count.
    /// Whether topic `name` exists for a client that asks not to create it (SUBSCRIBE's
    /// `force_topic_creation = false`): it is open, or it is a partition of a partitioned topic
    /// (whose partitions all exist as far as clients can tell).
    pub(crate) fn topic_exists(&self, name: &TopicName) -> bool {
        self.existing_topic(&name.full()).is_some()
            || self.metadata().is_partition(name.partition_of())
    }

    pub(crate) fn topic_for_client(&self, name: &TopicName) -> Result<Arc<Topic>, TopicError> {
        let full = name.full();
        if let Some(t) = self.existing_topic(&full) {
            return Ok(t);
        }
        {
            let m = self.metadata();
            m.check_namespace(&name.tenant, &name.namespace)?;
            if m.partitions(&full).is_some() {
                return Err(TopicError::Partitioned(full));
            }
            match name
                .partition_of()
                .and_then(|(base, i)| Some((m.partitions(&base)?, i)))
            {
                Some((n, i)) if i < n => {}
                Some((partitions, _)) => {
                    return Err(TopicError::IllegalPartition {
                        name: full,
                        partitions,
                    })
                }
                None if !self.cfg.allow_auto_topic_creation => {
                    return Err(TopicError::NotFound(full))
                }
                None => {}
            }
        }
        Ok(self.topic(name)?)
    }

    /// PARTITIONED_METADATA: the topic's partition count, 0 when it is not partitioned. With
    /// creation on first use allowed by the broker and by the client (`auto_create`, the
    /// command's `metadata_auto_creation_enabled`), a topic that does not exist is 0, or
    /// becomes a partitioned topic of `--default-num-partitions` when that is the type the
    /// broker creates; otherwise it is `NotFound`, as Pulsar answers.
    pub(crate) fn partitioned_metadata(
        &self,
        name: &TopicName,
        auto_create: bool,
    ) -> Result<u32, TopicError> {
        let full = name.full();
        let auto_create = auto_create && self.cfg.allow_auto_topic_creation;
        {
            let m = self.metadata();
            m.check_namespace(&name.tenant, &name.namespace)?;
            if let Some(n) = m.partitions(&full) {
                return Ok(n);
            }
            if m.is_partition(name.partition_of()) || self.existing_topic(&full).is_some() {
                return Ok(0);
            }
            if !auto_create {
                return Err(TopicError::NotFound(full));
            }
            if !self.cfg.auto_topic_partitioned || name.partition_of().is_some() {
                return Ok(0);
            }
        }
        let n = self.cfg.default_num_partitions;
        let limit = self.cfg.partition_limit();
        match self.change_metadata(|m| m.create_partitioned(&full, n, limit, false)) {
            Ok(()) => {
                info!(topic = %full, partitions = n, "partitioned topic created on first use");
                Ok(n)
            }
            // Created by someone else meanwhile.
            Err(MetadataError::TopicExists) => Ok(self.metadata().partitions(&full).unwrap_or(0)),
            Err(e) => Err(e.into()),
        }
    }

    /// The admin API's `GET …/{topic}/partitions`: the count, 0 for a non-partitioned topic,
    /// `NotFound` when there is no such topic.
    pub(crate) fn partition_count(&self, name: &TopicName) -> Result<u32, TopicError> {
        let full = name.full();
        let m = self.metadata();
        m.check_namespace(&name.tenant, &name.namespace)?;
        match m.partitions(&full) {
            Some(n) => Ok(n),
            None if self.existing_topic(&full).is_some() => Ok(0),
            None => Err(TopicError::NotFound(full)),
        }
    }

    /// The admin API's `PUT …/{topic}`: a non-partitioned topic, or a missing partition of a
    /// partitioned topic, with `properties` (kept in the metadata).
    pub(crate) fn create_topic(
        &self,
        name: &TopicName,
        properties: TopicProperties,
    ) -> Result<Arc<Topic>, TopicError> {
        let full = name.full();
        {
            let m = self.metadata();
            m.check_namespace(&name.tenant, &name.namespace)?;
            if m.partitions(&full).is_some() || self.existing_topic(&full).is_some() {
                return Err(MetadataError::TopicExists.into());
            }
            if let Some((base, i)) = name.partition_of() {
                match m.partitions(&base) {
                    Some(n) if i < n => {}
                    _ => {
                        return Err(MetadataError::InvalidName(
                            "Invalid partition topic name: no partitioned topic has that partition",
                        )
                        .into())
                    }
                }
            }
        }
        let topic = self.topic(name)?;
        self.change_metadata(|m| {
            m.add_topic_properties(&full, properties);
            Ok(())
        })?;
        Ok(topic)
    }

    /// The admin API's `GET …/{topic}/properties`: what topic `name` (partitioned or not) was
    /// created or updated with; `NotFound` when there is no such topic.
    pub(crate) fn topic_properties(&self, name: &TopicName) -> Result<TopicProperties, TopicError> {
        self.partition_count(name)?;
        Ok(self.metadata().topic_properties(&name.full()))
    }

    /// The admin API's `PUT …/{topic}/properties` (`properties` added, values of keys it has
    /// replaced) and `DELETE …/{topic}/properties?key=K` (`remove`).
    pub(crate) fn change_topic_properties(
        &self,
        name: &TopicName,
        properties: TopicProperties,
        remove: Option<&str>,
    ) -> Result<(), TopicError> {
        self.partition_count(name)?;
        let full = name.full();
        self.change_metadata(|m| {
            m.add_topic_properties(&full, properties);
            if let Some(key) = remove {
                m.remove_topic_property(&full, key);
            }
            Ok(())
        })?;
        Ok(())
    }

    /// The admin API's `PUT …/{topic}/partitions`: a partitioned topic of `n` partitions with
    /// `properties`, each partition created at once (as Pulsar does).
    pub(crate) fn create_partitioned(
        &self,
        name: &TopicName,
        n: u32,
        properties: TopicProperties,
    ) -> Result<(), TopicError> {
        let full = name.full();
        if full.contains(crate::topic::PARTITION_SUFFIX) {
            return Err(TopicError::PartitionName);
        }
        let limit = self.cfg.partition_limit();
        self.change_metadata(|m| {
            m.check_namespace(&name.tenant, &name.namespace)?;
            let exists = self.existing_topic(&full).is_some();
            m.create_partitioned(&full, n, limit, exists)?;
            m.add_topic_properties(&full, properties);
            Ok(())
        })?;
        info!(topic = %full, partitions = n, "partitioned topic created");
        self.open_partitions(name, 0..n)
    }

    /// The admin API's `POST …/{topic}/partitions`: grows a partitioned topic to `n`.
    pub(crate) fn grow_partitioned(&self, name: &TopicName, n: u32) -> Result<(), TopicError> {
        let full = name.full();
        let limit = self.cfg.partition_limit();
        let before = self.change_metadata(|m| m.grow_partitioned(&full, n, limit))?;
        info!(topic = %full, from = before, to = n, "partitioned topic grown");
        self.open_partitions(name, before..n)
    }

    fn open_partitions(
        &self,
        name: &TopicName,
        range: std::ops::Range<u32>,
    ) -> Result<(), TopicError> {
        for i in range {
            let p = TopicName::parse(&name.partition(i)).map_err(|_| {
                TopicError::NotFound(name.partition(i)) // unreachable: built from a valid name
            })?;
            self.topic(&p)?;
        }
        Ok(())
    }

    /// The admin API's `DELETE …/{topic}`: closes the topic and deletes its storage. With
    /// connected producers or consumers it is refused, unless `force`, which closes them
    /// (each client gets CLOSE_PRODUCER or CLOSE_CONSUMER, and reconnects to a new topic of
    /// that name if it may be created).
    pub(crate) fn delete_topic(&self, full: &str, force: bool) -> Result<(), DeleteError> {
        if self.metadata().partitions(full).is_some() {
            return Err(DeleteError::Partitioned(full.to_owned()));
        }
        let topic = self
            .existing_topic(full)
            .ok_or_else(|| DeleteError::NotFound(full.to_owned()))?;
        let clients = topic.clients();
        if !force && clients > 0 {
            return Err(DeleteError::Busy(clients));
        }
        self.remove_topic(&topic)?;
        self.change_metadata(|m| {
            m.forget_topic(full);
            Ok(())
        })?;
        Ok(())
    }

    /// The admin API's `DELETE …/{topic}/partitions`: deletes every partition, then the
    /// partitioned topic.
    pub(crate) fn delete_partitioned(&self, full: &str, force: bool) -> Result<(), DeleteError> {
        let Some(n) = self.metadata().partitions(full) else {
            return Err(match self.existing_topic(full) {
                Some(_) => DeleteError::NotPartitioned(full.to_owned()),
                None => DeleteError::NotFound(full.to_owned()),
            });
        };
        let partitions: Vec<Arc<Topic>> = (0..n)
            .filter_map(|i| self.existing_topic(&partition_name(full, i)))
            .collect();
        if !force && partitions.iter().any(|t| t.clients() > 0) {
            return Err(DeleteError::PartitionsBusy);
        }
        for t in &partitions {
            self.remove_topic(t)?;
        }
        self.change_metadata(|m| Ok(m.delete_partitioned(full)))?;
        info!(topic = %full, partitions = n, "partitioned topic deleted");
        Ok(())
    }

    /// Sends CLOSE_PRODUCER to every producer of `topic` (its client reconnects, and meets
    /// what changed: a deleted topic, a terminated one, a backlog over its quota). The
    /// producers leave the topic's registry, so the reopening PRODUCER is decided anew.
    pub(crate) fn close_producers(&self, topic: &Topic) {
        for (conn, producer_id) in topic.producer_ids() {
            let _ = topic.remove_producer(conn, producer_id);
            self.push_to(conn, &wire::commands::close_producer(producer_id, 0));
        }
    }

    /// Terminates `topic` (the admin API's `terminate`): no entry is appended any more, its
    /// producers are closed (reconnecting, they are refused with `TopicTerminatedError`), and
    /// consumers that acknowledged everything hear REACHED_END_OF_TOPIC
    /// ([`notify_end_of_topics`](Self::notify_end_of_topics)). Returns the last entry's position.
    pub(crate) fn terminate_topic(&self, topic: &Topic) -> Result<Position, StorageError> {
        let last = topic.terminate()?;
        self.close_producers(topic);
        info!(topic = %topic.name, last = %last, "topic terminated");
        Ok(last)
    }

    /// Tells every consumer of a terminated topic whose subscription acknowledged everything
    /// that it reached the end of the topic (REACHED_END_OF_TOPIC, once per consumer), as
    /// Pulsar does when such a consumer's read finds nothing more. Not sent to the Go client,
    /// which closes its connection on a command it does not handle (v0.21), and with it its
    /// other producers and consumers. Run by the housekeeping thread.
    pub(crate) fn notify_end_of_topics(&self) {
        let terminated: Vec<Arc<Topic>> = lock(&self.topics)
            .values()
            .filter(|t| t.is_terminated())
            .cloned()
            .collect();
        for t in terminated {
            for sub in t.subscriptions() {
                if sub.runtime.cursor_view().backlog.messages > 0 {
                    continue;
                }
                for c in lock(&sub.consumers).values() {
                    if c.client_version.starts_with("Pulsar-Go")
                        || c.reached_end
                            .swap(true, std::sync::atomic::Ordering::SeqCst)
                    {
                        continue;
                    }
                    self.push_to(c.conn, &wire::commands::reached_end_of_topic(c.client_id));
                }
            }
        }
    }

    fn remove_topic(&self, topic: &Arc<Topic>) -> Result<(), DeleteError> {
        lock(&self.topics).remove(&topic.name);
        topic.mark_deleted();
        self.close_producers(topic);
        for sub in topic.subscriptions() {
            self.kick_subscription(&sub);
        }
        topic.close();
        self.backend
            .delete_topic(&topic.name)
            .map_err(MetadataError::from)?;
        info!(topic = %topic.name, "topic deleted");
        Ok(())
    }

    /// The namespace policies of topic `name` (defaults when its namespace is gone).
    pub(crate) fn policies_of(&self, name: &str) -> crate::metadata::NamespacePolicies {
        let Ok(n) = TopicName::parse(name) else {
            return Default::default();
        };
        self.metadata()
            .policies(&n.tenant, &n.namespace)
            .cloned()
            .unwrap_or_default()
    }

    /// Why one more producer is refused by the namespace's limit, if it is.
    pub(crate) fn producer_limit(&self, topic: &Topic) -> Option<&'static str> {
        let p = self.policies_of(&topic.name);
        let max = crate::metadata::NamespacePolicies::limit(p.max_producers_per_topic);
        max.is_some_and(|m| topic.producer_ids().len() >= m)
            .then_some("Topic reached max producers limit")
    }

    /// Why one more consumer is refused by the namespace's limits, if it is.
    pub(crate) fn consumer_limit(
        &self,
        topic: &Topic,
        sub: &crate::topic::Subscription,
    ) -> Option<&'static str> {
        let p = self.policies_of(&topic.name);
        let on_sub = lock(&sub.consumers).len();
        let per_sub = crate::metadata::NamespacePolicies::limit(p.max_consumers_per_subscription);
        if per_sub.is_some_and(|m| on_sub >= m) {
            return Some("Subscription reached max consumers limit");
        }
        let on_topic: usize = topic
            .subscriptions()
            .iter()
            .map(|s| lock(&s.consumers).len())
            .sum();
        if crate::metadata::NamespacePolicies::limit(p.max_consumers_per_topic)
            .is_some_and(|m| on_topic >= m)
        {
            return Some("Topic reached max consumers limit");
        }
        None
    }

    /// Whether namespace `tenant/ns` has a topic.
    pub(crate) fn namespace_has_topics(&self, namespace: &str) -> bool {
        !self.topic_names_in(namespace).is_empty()
    }
}
