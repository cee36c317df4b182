//! Producers: PRODUCER, SEND and its receipt, CLOSE_PRODUCER.

use std::sync::Arc;

use tracing::{debug, info, warn};
use wire::proto::{BaseCommand, CommandProducer, ServerError};

use super::{Now, Session};
use crate::storage::StorageError;
use crate::topic::{
    InitialPosition, ProducerInfo, Published, SubKind, SubscribeError, Topic, TopicName,
};

/// A producer open on this connection.
pub(super) struct Producer {
    pub(super) topic: Arc<Topic>,
    name: String,
    /// The version of the producer's schema (empty without one), repeated to a repeated PRODUCER.
    schema_version: Vec<u8>,
    warned_batch: bool,
}

/// A receipt that waits for its topic's commit.
pub(super) struct PendingReceipt {
    topic: Arc<Topic>,
    producer_id: u64,
    sequence_id: u64,
    receipt: BaseCommand,
}

impl Session {
    pub(super) fn on_producer(&mut self, now: Now, cmd: &BaseCommand) {
        let Some(p) = &cmd.producer else {
            return self.send_error(0, ServerError::UnknownError, "missing body");
        };
        let name = match TopicName::parse(&p.topic) {
            Ok(n) => n,
            Err(e) => {
                return self.send_error(p.request_id, ServerError::InvalidTopicName, &e.to_string())
            }
        };
        if self.answered_again(p) {
            return;
        }
        let topic = match self.state.topic_for_client(&name) {
            Ok(t) => t,
            Err(e) => {
                return self.send_error(p.request_id, super::topic_error_code(&e), &e.to_string())
            }
        };
        if let Err(e) = self.create_initial_subscription(&topic, p) {
            let message = format!("could not create the initial subscription: {e}");
            return self.send_error(p.request_id, ServerError::PersistenceError, &message);
        }
        let producer_name = match (&p.producer_name, p.user_provided_producer_name()) {
            (Some(n), true) if !n.is_empty() => n.clone(),
            _ => self.state.producer_name(),
        };
        let info = ProducerInfo {
            name: producer_name.clone(),
            address: self.peer.clone(),
            connected_since: crate::stats::rfc3339(now.wall_ms),
            client_version: self.client_version.clone(),
            metadata: p
                .metadata
                .iter()
                .map(|kv| (kv.key.clone(), kv.value.clone()))
                .collect(),
        };
        if let Some(message) = self.state.producer_limit(&topic) {
            return self.send_error(p.request_id, ServerError::ProducerBusy, message);
        }
        if !topic.add_producer(self.id, p.producer_id, info) {
            let message = format!(
                "producer with name '{producer_name}' is already connected to topic {}",
                topic.name
            );
            return self.send_error(p.request_id, ServerError::ProducerBusy, &message);
        }
        let schema_version = match p.schema.as_ref().map(|s| topic.schema_version(s)) {
            None => Vec::new(),
            Some(Ok(v)) => v,
            Some(Err(e)) => {
                topic.remove_producer(self.id, p.producer_id);
                return self.send_error(
                    p.request_id,
                    ServerError::PersistenceError,
                    &e.to_string(),
                );
            }
        };
        let last_sequence = topic.resume_after(&producer_name, p.user_provided_producer_name());
        debug!(conn = self.id, topic = %topic.name, producer = %producer_name, "producer created");
        self.producers.insert(
            p.producer_id,
            Producer {
                topic,
                name: producer_name.clone(),
                schema_version: schema_version.clone(),
                warned_batch: false,
            },
        );
        self.send(&wire::commands::producer_success(
            p.request_id,
            &producer_name,
            last_sequence,
            schema_version,
        ));
    }

    /// A repeated PRODUCER for a ready producer: Pulsar answers success again (true). A
    /// producer whose topic was deleted (the broker sent CLOSE_PRODUCER) is forgotten: the
    /// client is opening it again.
    fn answered_again(&mut self, p: &CommandProducer) -> bool {
        if self
            .producers
            .get(&p.producer_id)
            .is_some_and(|existing| existing.topic.is_deleted())
        {
            self.producers.remove(&p.producer_id);
        }
        let Some(existing) = self.producers.get(&p.producer_id) else {
            return false;
        };
        let reply = wire::commands::producer_success(
            p.request_id,
            &existing.name,
            -1,
            existing.schema_version.clone(),
        );
        self.send(&reply);
        true
    }

    /// A dead- or retry-letter producer names the subscription that must keep what it
    /// publishes until someone reads it: Pulsar creates it first, Shared, at the earliest
    /// entry.
    fn create_initial_subscription(
        &self,
        topic: &Topic,
        p: &CommandProducer,
    ) -> Result<(), SubscribeError> {
        let Some(initial) = p
            .initial_subscription_name
            .as_deref()
            .filter(|n| !n.is_empty())
        else {
            return Ok(());
        };
        if topic.get_subscription(initial).is_some() {
            return Ok(());
        }
        topic.subscription(initial, SubKind::Shared, InitialPosition::Earliest)?;
        info!(conn = self.id, topic = %topic.name, subscription = initial, "initial subscription created for a producer");
        Ok(())
    }

    pub(super) fn on_send(&mut self, cmd: &BaseCommand, payload: Option<wire::Payload>) {
        let Some(s) = &cmd.send else {
            return self.send_error(0, ServerError::UnknownError, "missing body");
        };
        let (producer_id, sequence_id) = (s.producer_id, s.sequence_id);
        let send_error = |error, message: &str| {
            wire::commands::send_error(producer_id, sequence_id, error, message)
        };
        let Some(producer) = self.producers.get_mut(&producer_id) else {
            warn!(conn = self.id, producer_id, "SEND for an unknown producer");
            let reply = send_error(
                ServerError::NotAllowedError,
                "no producer with this id on this connection",
            );
            return self.send(&reply);
        };
        let Some(payload) = payload else {
            return self.send(&send_error(
                ServerError::UnknownError,
                "SEND without a payload",
            ));
        };
        let meta = match wire::convert::message_info(&payload.metadata, payload.body().len()) {
            Ok(info) => info.meta,
            Err(e) => {
                warn!(conn = self.id, producer = %producer.name, error = %e, "SEND with invalid metadata refused");
                let message = format!("invalid message metadata: {e}");
                return self.send(&send_error(ServerError::NotAllowedError, &message));
            }
        };
        if meta.messages() > 1 && !producer.warned_batch && producer.topic.had_key_shared() {
            producer.warned_batch = true;
            warn!(
                topic = %producer.topic.name,
                producer = %producer.name,
                "batched entry on a topic with a Key_Shared subscription: the entry's key is its first message's key; producers for Key_Shared should batch by key"
            );
        }
        let topic = producer.topic.clone();
        match topic.publish_once(meta, Arc::from(payload.section)) {
            Ok(published) => {
                // A duplicate is receipted as Pulsar does, with the id -1:-1.
                let id = match published {
                    Published::Stored(pos) => wire::convert::message_id(pos),
                    Published::Duplicate => wire::proto::MessageIdData {
                        ledger_id: u64::MAX,
                        entry_id: u64::MAX,
                        ..Default::default()
                    },
                };
                let receipt = wire::commands::send_receipt(
                    producer_id,
                    sequence_id,
                    s.highest_sequence_id,
                    id,
                );
                if topic.sync_policy().is_some() {
                    // Group commit: receipts wait until the entries of this read's frames are
                    // written (and, with `--sync always`, fsynced) in one go.
                    self.pending_receipts.push(PendingReceipt {
                        topic,
                        producer_id,
                        sequence_id,
                        receipt,
                    });
                } else {
                    self.send(&receipt);
                }
            }
            Err(e) => {
                warn!(topic = %topic.name, error = %e, "entry not stored");
                self.send(&send_error(
                    ServerError::PersistenceError,
                    &format!("not stored: {e}"),
                ));
            }
        }
    }

    /// Commits the topics written since the last call (see `Topic::commit`), then queues their
    /// receipts (or SEND_ERROR when the commit failed).
    pub(super) fn commit_receipts(&mut self) {
        if self.pending_receipts.is_empty() {
            return;
        }
        let pending = std::mem::take(&mut self.pending_receipts);
        type Committed = Result<(), Arc<StorageError>>;
        let mut committed: Vec<(Arc<Topic>, Committed)> = Vec::new();
        for p in pending {
            let result = match committed.iter().find(|(t, _)| Arc::ptr_eq(t, &p.topic)) {
                Some((_, r)) => r.clone(),
                None => {
                    let r = p.topic.commit().map_err(Arc::new);
                    committed.push((p.topic.clone(), r.clone()));
                    r
                }
            };
            match result {
                Ok(()) => self.send(&p.receipt),
                Err(e) => self.send(&wire::commands::send_error(
                    p.producer_id,
                    p.sequence_id,
                    ServerError::PersistenceError,
                    &format!("not synced: {e}"),
                )),
            }
        }
    }

    pub(super) fn on_close_producer(&mut self, cmd: &BaseCommand) {
        let Some(c) = &cmd.close_producer else {
            return self.send_error(0, ServerError::UnknownError, "missing body");
        };
        if let Some(p) = self.producers.remove(&c.producer_id) {
            p.topic.remove_producer(self.id, c.producer_id);
        }
        self.send_success(c.request_id);
    }
}
