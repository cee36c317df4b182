//! Producers: PRODUCER, SEND and its receipt, CLOSE_PRODUCER.

use std::sync::Arc;

use tracing::{debug, info, warn};
use wire::proto::{BaseCommand, CommandProducer, ServerError};

use super::{Now, Session};
use crate::topic::{
    AccessMode, Admitted, InitialPosition, ProducerGate, ProducerInfo, ProducerRefused,
    ProducerRequest, Promoted, Published, SubKind, SubscribeError, Topic, TopicName,
};

/// A producer open on this connection.
pub(super) struct Producer {
    pub(super) topic: Arc<Topic>,
    name: String,
    /// The version of the producer's schema (empty without one), repeated to a repeated PRODUCER.
    schema_version: Vec<u8>,
    /// Ready, waiting for exclusive access, or fenced (the topic's registry decides).
    gate: ProducerGate,
    /// The topic epoch it was given (exclusive access modes).
    epoch: Option<u64>,
    warned_batch: bool,
    /// Where its SEND sections are stored (see [`Arena`]).
    arena: Arena,
}

/// The most bytes of SEND sections one arena buffer holds.
pub(super) const ARENA: usize = 32 * 1024;

/// Where one producer's SEND sections are copied: each stored section is a slice of a shared
/// buffer, so the entries a producer sends in a row share a few buffers. Each entry used to be
/// an allocation of its own, and retention freeing a rolled-over ledger's tens of thousands of
/// them in one go (milliseconds) stalled every allocating thread: the publish-to-delivery p99 showed a stall at
/// every rollover. A buffer is freed once its last entry is; it holds one producer's entries
/// only, so one topic's backlog never keeps another topic's trimmed entries in memory. Buffers
/// start at 1 KiB and double, up to [`ARENA`], while the producer keeps sending.
#[derive(Default)]
pub(super) struct Arena {
    buf: bytes::BytesMut,
    next: usize,
}

impl Arena {
    /// `section` as it is stored: a copy in the producer's current buffer.
    pub(super) fn keep(&mut self, section: &[u8]) -> bytes::Bytes {
        if self.buf.capacity() < section.len() {
            self.next = (self.next * 2).clamp(1024, ARENA);
            self.buf = bytes::BytesMut::with_capacity(self.next.max(section.len()));
        }
        self.buf.extend_from_slice(section);
        self.buf.split().freeze()
    }
}

/// PRODUCER_SUCCESS with the topic epoch and whether the producer is ready.
fn producer_success(
    request_id: u64,
    name: &str,
    last_sequence: i64,
    schema_version: Vec<u8>,
    epoch: Option<u64>,
    ready: bool,
) -> BaseCommand {
    let mut cmd = wire::commands::producer_success(request_id, name, last_sequence, schema_version);
    if let Some(s) = cmd.producer_success.as_mut() {
        s.topic_epoch = epoch;
        s.producer_ready = Some(ready);
    }
    cmd
}

impl Session {
    pub(super) fn on_producer(&mut self, now: Now, cmd: &BaseCommand) {
        let Some(p) = &cmd.producer else {
            return self.send_error(0, ServerError::UnknownError, "missing body");
        };
        let name = match TopicName::parse(&p.topic) {
            Ok(n) => n,
            Err(e) => return self.send_error(p.request_id, e.code(), &e.to_string()),
        };
        self.writes.closed.remove(&p.producer_id);
        if self.answered_again(p) {
            return;
        }
        let topic = match self.state.topic_for_client(&name) {
            Ok(t) => t,
            Err(e) => {
                return self.send_error(p.request_id, super::topic_error_code(&e), &e.to_string())
            }
        };
        if let Some((code, message)) = self.topic_refuses_producers(&topic, now) {
            return self.send_error(p.request_id, code, &message);
        }
        if let Err(e) = self.create_initial_subscription(&topic, p) {
            let message = format!("could not create the initial subscription: {e}");
            return self.send_error(p.request_id, ServerError::PersistenceError, &message);
        }
        // As Pulsar: the name the client gives, whether its application chose it or the
        // broker gave it earlier (a reconnecting client sends the name it was given, and its
        // messages carry it); a new one otherwise.
        let producer_name = match &p.producer_name {
            Some(n) if !n.is_empty() => n.clone(),
            _ => self.state.producer_name(),
        };
        let info = self.producer_info(now, p, &producer_name);
        if let Some(message) = self.state.producer_limit(&topic) {
            return self.send_error(p.request_id, ServerError::ProducerBusy, message);
        }
        let gate = ProducerGate::default();
        let admitted = match self.admit_producer(&topic, p, info, gate.clone()) {
            Some(a) => a,
            None => return,
        };
        let strategy = self.state.cfg.schema_compatibility;
        let schema_version = match p.schema.as_ref().map(|s| topic.schema_version(s, strategy)) {
            None => Vec::new(),
            Some(Ok(v)) => v,
            Some(Err(e)) => {
                self.producer_gone(&topic, p.producer_id);
                info!(conn = self.id, topic = %topic.name, error = %e, "producer's schema refused");
                return self.send_error(p.request_id, e.code(), &e.to_string());
            }
        };
        let last_sequence = topic.resume_after(&producer_name, p.user_provided_producer_name());
        debug!(conn = self.id, topic = %topic.name, producer = %producer_name, ready = admitted.ready, "producer created");
        self.producers.insert(
            p.producer_id,
            Producer {
                topic,
                name: producer_name.clone(),
                schema_version: schema_version.clone(),
                gate,
                epoch: admitted.epoch,
                warned_batch: false,
                arena: Arena::default(),
            },
        );
        self.send(&producer_success(
            p.request_id,
            &producer_name,
            last_sequence,
            schema_version,
            admitted.epoch,
            admitted.ready,
        ));
    }

    /// Why `topic` refuses any new producer now, if it does: it is terminated, its storage
    /// refused its last write a moment ago, or its backlog is over a producer-side quota.
    fn topic_refuses_producers(&self, topic: &Topic, now: Now) -> Option<(ServerError, String)> {
        if topic.is_terminated() {
            let why = "Topic was already terminated";
            return Some((ServerError::TopicTerminatedError, why.into()));
        }
        if let Some((e, left_ms)) = topic.refuses_producers(now.wall_ms) {
            info!(conn = self.id, topic = %topic.name, error = %e, left_ms, "producer refused: the topic's storage refused its last write");
            let message = format!("the topic's storage refused its last write ({e}): producers are refused for {left_ms} ms more");
            return Some((ServerError::ProducerBlockedQuotaExceededException, message));
        }
        let (code, message) = self.state.backlog_quota_refusal(topic, now.wall_ms)?;
        info!(conn = self.id, topic = %topic.name, ?code, "producer refused: the backlog is over the quota");
        Some((code, message.into()))
    }

    /// How the topic's registry and stats describe producer `name` of PRODUCER `p`.
    fn producer_info(&self, now: Now, p: &CommandProducer, name: &str) -> ProducerInfo {
        ProducerInfo {
            name: name.to_owned(),
            address: self.peer.clone(),
            connected_since: crate::stats::rfc3339(now.wall_ms),
            client_version: self.client_version.clone(),
            metadata: p
                .metadata
                .iter()
                .map(|kv| (kv.key.clone(), kv.value.clone()))
                .collect(),
            access: AccessMode::from_wire(p.producer_access_mode),
        }
    }

    /// Registers the producer with its topic by its access mode. A refusal is answered here
    /// (`None`); an ExclusiveWithFencing producer closes the others and refuses the waiting
    /// ones on their connections.
    fn admit_producer(
        &mut self,
        topic: &Topic,
        p: &CommandProducer,
        info: ProducerInfo,
        gate: ProducerGate,
    ) -> Option<Admitted> {
        let access = info.access;
        let request = ProducerRequest {
            key: (self.id, p.producer_id),
            info,
            gate,
            request_id: p.request_id,
            client_epoch: p.topic_epoch,
        };
        let admitted = match topic.add_producer(request) {
            Ok(a) => a,
            Err(e) => {
                info!(conn = self.id, topic = %topic.name, access = access.pulsar_name(), error = %e, "producer refused");
                self.send_error(p.request_id, e.code(), &e.to_string());
                return None;
            }
        };
        for (conn, producer_id) in &admitted.fenced {
            info!(topic = %topic.name, conn, producer_id, "producer fenced by an ExclusiveWithFencing producer");
            self.state
                .push_to(*conn, &wire::commands::close_producer(*producer_id, 0));
        }
        for ((conn, _), request_id) in &admitted.refused_waiters {
            let e = ProducerRefused::FencedOut;
            let refusal = wire::commands::error(*request_id, e.code(), &e.to_string());
            self.state.push_to(*conn, &refusal);
        }
        Some(admitted)
    }

    /// The producer `producer_id` of this connection left its topic; a waiting producer this
    /// made ready is told so on its connection (a second PRODUCER_SUCCESS).
    pub(super) fn producer_gone(&mut self, topic: &Topic, producer_id: u64) {
        if let Some(Promoted {
            key: (conn, _),
            request_id,
            name,
            epoch,
        }) = topic.remove_producer(self.id, producer_id)
        {
            info!(topic = %topic.name, conn, producer = %name, epoch, "waiting exclusive producer is ready");
            let ready = producer_success(request_id, &name, -1, Vec::new(), Some(epoch), true);
            self.state.push_to(conn, &ready);
        }
    }

    /// A repeated PRODUCER for a producer of this connection: Pulsar answers success again
    /// (true). A producer whose topic was deleted, or that was fenced (the broker sent
    /// CLOSE_PRODUCER either way), is forgotten: the client is opening it again.
    fn answered_again(&mut self, p: &CommandProducer) -> bool {
        if self.producers.get(&p.producer_id).is_some_and(|existing| {
            existing.topic.is_deleted() || !existing.topic.has_producer(self.id, p.producer_id)
        }) {
            self.producers.remove(&p.producer_id);
        }
        let Some(existing) = self.producers.get(&p.producer_id) else {
            return false;
        };
        let reply = producer_success(
            p.request_id,
            &existing.name,
            -1,
            existing.schema_version.clone(),
            existing.epoch,
            existing.gate.is_ready(),
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
            if self.writes.closed.contains(&producer_id) {
                // Sent before the client read our CLOSE_PRODUCER: it resends it.
                debug!(
                    conn = self.id,
                    producer_id,
                    sequence_id,
                    "SEND for a producer closed after a failed write: dropped"
                );
                return;
            }
            warn!(conn = self.id, producer_id, "SEND for an unknown producer");
            let reply = send_error(
                ServerError::NotAllowedError,
                "no producer with this id on this connection",
            );
            return self.send(&reply);
        };
        if !producer.gate.is_ready() {
            return self.send(&send_error(
                ServerError::NotAllowedError,
                "the producer is not ready: waiting for exclusive access, or fenced",
            ));
        }
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
        let section = producer.arena.keep(&payload.section);
        let published = topic.push(meta, section);
        self.answer_push(&topic, s, published);
    }

    /// What a SEND gets for what its topic did with the entry (see [`Published`]).
    fn answer_push(&mut self, topic: &Arc<Topic>, s: &wire::proto::CommandSend, p: Published) {
        let (producer_id, sequence_id) = (s.producer_id, s.sequence_id);
        let receipt =
            |id| wire::commands::send_receipt(producer_id, sequence_id, s.highest_sequence_id, id);
        let refuse = |error, message: &str| {
            wire::commands::send_error(producer_id, sequence_id, error, message)
        };
        match p {
            Published::Accepted(pos) => {
                let r = receipt(wire::convert::message_id(pos));
                self.hold_receipt(topic, pos, &r, (producer_id, sequence_id));
            }
            // Receipted as Pulsar does, with the id -1:-1.
            Published::Duplicate => self.send(&receipt(wire::proto::MessageIdData {
                ledger_id: u64::MAX,
                entry_id: u64::MAX,
                ..Default::default()
            })),
            // Pulsar's words: the producer resends later, once the write completed.
            Published::InFlight => self.send(&refuse(
                ServerError::PersistenceError,
                "Cannot determine whether the message is a duplicate at this time",
            )),
            Published::Terminated => self.send(&refuse(
                ServerError::TopicTerminatedError,
                "Topic was already terminated",
            )),
            // An earlier entry of its producer failed, in a write of this session whose
            // completion is still to come: that closes the producer (its CLOSE_PRODUCER in
            // its place among the replies), and the client resends this after the failed ones.
            Published::ProducerFailed => {
                debug!(
                    conn = self.id,
                    producer_id, sequence_id, "SEND after a failed one of its producer: dropped"
                );
            }
        }
    }

    pub(super) fn on_close_producer(&mut self, cmd: &BaseCommand) {
        let Some(c) = &cmd.close_producer else {
            return self.send_error(0, ServerError::UnknownError, "missing body");
        };
        if let Some(p) = self.producers.remove(&c.producer_id) {
            self.producer_gone(&p.topic, c.producer_id);
        }
        self.writes.closed.remove(&c.producer_id);
        self.send_success(c.request_id);
    }
}

#[cfg(test)]
mod tests {
    use super::{Arena, ARENA};

    #[test]
    fn sections_share_arena_buffers() {
        let mut arena = Arena::default();
        let a = arena.keep(b"first");
        let b = arena.keep(b"second");
        assert_eq!((&a[..], &b[..]), (&b"first"[..], &b"second"[..]));
        let next = |x: &bytes::Bytes, y: &bytes::Bytes| {
            x.as_ptr() as usize + x.len() == y.as_ptr() as usize
        };
        assert!(next(&a, &b), "one buffer, side by side");
        // 1 KiB, then 2, 4, … up to the cap: a buffer of 1,000-byte sections never holds more
        // than the cap.
        let mut last = arena.keep(&[1u8; 1000]);
        let mut run = 1;
        let mut longest = 0;
        for _ in 0..200 {
            let s = arena.keep(&[1u8; 1000]);
            run = if next(&last, &s) { run + 1 } else { 1 };
            longest = longest.max(run);
            last = s;
        }
        assert_eq!(
            longest,
            ARENA / 1000,
            "buffers grew to the cap, not past it"
        );
        let big = vec![7u8; ARENA + 1];
        let c = arena.keep(&big);
        assert_eq!(&c[..], &big[..]);
        let d = arena.keep(b"after");
        assert!(!next(&c, &d), "the big one filled its own buffer");
        drop(arena);
        assert_eq!(&a[..], b"first", "kept sections outlive the arena");
    }
}
