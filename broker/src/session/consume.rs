//! Consumers: SUBSCRIBE, FLOW, ACK, nacks and redeliveries, SEEK, GET_LAST_MESSAGE_ID,
//! CLOSE_CONSUMER, UNSUBSCRIBE; and the MESSAGE frames of their deliveries.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use cursor::Position;
use dispatcher::{
    AckHandleError, ConsumerHandle, ConsumerId, ConsumerSpec, HashRange, KeySharedConfig,
    KeySharedMode,
};
use tracing::{debug, info};
use wire::proto::{self, BaseCommand, CommandSubscribe, ServerError};

use super::delivery::DeliveryRoute;
use super::{Now, Session};
use crate::sync::lock;
use crate::topic::{
    ConsumerInfo, InitialPosition, OutCounters, SubKind, SubscribeError, Subscription, Topic,
    TopicName,
};

/// A consumer open on this connection.
pub(super) struct Consumer {
    global: ConsumerId,
    topic: Arc<Topic>,
    sub: Arc<Subscription>,
    handle: ConsumerHandle,
    /// A non-durable subscription (a Reader's) goes away with its last consumer, as in Pulsar.
    non_durable: bool,
    /// The last entry this consumer acked cumulatively (Exclusive and Failover subscriptions).
    acked_through: Option<Position>,
    /// Its delivery gate (see `DeliveryRoute::ready`), forgotten when it closes.
    gate: Arc<AtomicBool>,
    /// Set when it closes (see `DeliveryRoute::closed`).
    closed: Arc<AtomicBool>,
}

/// The subscription type a SUBSCRIBE asks for (AUTO_SPLIT with the broker's selector,
/// `auto_split`), with a STICKY consumer's hash ranges; `Err` is the refusal (a negative range
/// is invalid).
fn subscription_kind(
    s: &CommandSubscribe,
    auto_split: KeySharedMode,
) -> Result<(SubKind, Vec<HashRange>), (ServerError, &'static str)> {
    use proto::command_subscribe::SubType;
    let mut ranges = Vec::new();
    let kind = match s.sub_type() {
        SubType::Shared => SubKind::Shared,
        SubType::Exclusive => SubKind::Exclusive,
        SubType::KeyShared => {
            let mut ks = KeySharedConfig {
                mode: auto_split,
                ..KeySharedConfig::default()
            };
            if let Some(m) = &s.key_shared_meta {
                ks.allow_out_of_order = m.allow_out_of_order_delivery();
                if m.key_shared_mode() == proto::KeySharedMode::Sticky {
                    ks.mode = KeySharedMode::Sticky;
                    for r in &m.hash_ranges {
                        let (Ok(start), Ok(end)) = (u32::try_from(r.start), u32::try_from(r.end))
                        else {
                            return Err((ServerError::ConsumerAssignError, "negative hash range"));
                        };
                        ranges.push(HashRange::new(start, end));
                    }
                }
            }
            SubKind::KeyShared(ks)
        }
        SubType::Failover => SubKind::Failover,
    };
    Ok((kind, ranges))
}

/// Where a new subscription starts. A Reader (non-durable, with a start id) starts at the
/// earliest entry and is then moved to its start id: starting it at Latest first would log
/// the whole topic as "dropped without an ack".
fn initial_position(s: &CommandSubscribe) -> InitialPosition {
    use proto::command_subscribe::InitialPosition as Wire;
    match s.initial_position() {
        _ if s.durable == Some(false) && s.start_message_id.is_some() => InitialPosition::Earliest,
        Wire::Earliest => InitialPosition::Earliest,
        Wire::Latest => InitialPosition::Latest,
    }
}

/// The dispatcher's view of a subscribing consumer: its broker-wide id, its name (the client's,
/// or `consumer-<id>`), priority and hash ranges, and on Key_Shared its own mode (the
/// dispatcher takes the mode from the first consumer of an empty subscription and refuses
/// another mode while consumers are connected: `ModeMismatch`).
fn consumer_spec(
    s: &CommandSubscribe,
    global: ConsumerId,
    kind: SubKind,
    ranges: Vec<HashRange>,
) -> ConsumerSpec {
    let name = s
        .consumer_name
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| format!("consumer-{}", global.0));
    let spec = ConsumerSpec::new(global.0, name)
        .with_priority(s.priority_level.unwrap_or(0))
        .with_ranges(ranges);
    match kind {
        SubKind::KeyShared(ks) => spec.with_key_shared(ks),
        _ => spec,
    }
}

/// An individual ack of one id: the whole entry, or the indexes its `ack_set` marks as acked.
fn ack_one(c: &Consumer, id: &proto::MessageIdData) -> Result<(), AckHandleError> {
    let pos = Position::new(id.ledger_id, id.entry_id);
    if id.ack_set.is_empty() {
        return c.handle.ack(pos).map(|_| ());
    }
    let size = match id.batch_size {
        Some(n) if n > 0 => n as u32,
        _ => c
            .topic
            .messages(pos)
            .map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX)),
    };
    if size == 0 {
        return Ok(());
    }
    let acked = wire::convert::acked_indexes_from_ack_set(&id.ack_set, size);
    c.handle.ack_batch_index(pos, size, &acked).map(|_| ())
}

impl Session {
    pub(super) fn on_subscribe(&mut self, now: Now, cmd: &BaseCommand) {
        let Some(s) = &cmd.subscribe else {
            return self.send_error(0, ServerError::UnknownError, "missing body");
        };
        let rid = s.request_id;
        let name = match TopicName::parse(&s.topic) {
            Ok(n) => n,
            Err(e) => return self.send_error(rid, e.code(), &e.to_string()),
        };
        if s.subscription.is_empty() {
            return self.send_error(rid, ServerError::NotAllowedError, "empty subscription name");
        }
        let (kind, ranges) = match subscription_kind(s, self.state.cfg.dispatch.auto_split_mode()) {
            Ok(k) => k,
            Err((code, message)) => return self.send_error(rid, code, message),
        };
        if let Some(old) = self.consumers.remove(&s.consumer_id) {
            // A re-subscribe after the broker closed the consumer (seek): the old one is gone.
            self.drop_consumer(old);
        }
        if s.force_topic_creation == Some(false) && !self.state.topic_exists(&name) {
            // As Pulsar: a consumer that asks not to create its topic (Java's pattern and
            // multi-topic consumers do) is refused when it does not exist.
            return self.send_error(rid, ServerError::TopicNotFound, "Topic does not exist");
        }
        let topic = match self.state.topic_for_client(&name) {
            Ok(t) => t,
            Err(e) => return self.send_error(rid, super::topic_error_code(&e), &e.to_string()),
        };
        if let Err(e) = self.check_consumer_schema(&topic, s) {
            return self.send_error(rid, e.code(), &e.to_string());
        }
        let fresh = topic.get_subscription(&s.subscription).is_none();
        let sub = match topic.subscription(&s.subscription, kind, initial_position(s)) {
            Ok(sub) => sub,
            Err(e) => {
                let code = match e {
                    SubscribeError::ExclusiveBusy(_) | SubscribeError::TypeMismatch { .. } => {
                        ServerError::ConsumerBusy
                    }
                    SubscribeError::Storage(_) => ServerError::PersistenceError,
                };
                return self.send_error(rid, code, &e.to_string());
            }
        };
        if let Some(message) = self.state.consumer_limit(&topic, &sub) {
            return self.send_error(rid, ServerError::ConsumerBusy, message);
        }
        let non_durable = s.durable == Some(false);
        if let (true, true, Some(id)) = (fresh, non_durable, &s.start_message_id) {
            // A Reader: its non-durable subscription starts at the given id (inclusive; the
            // client drops the start entry itself when the start is exclusive).
            let start = topic.resolve_message_id(id.ledger_id, id.entry_id);
            topic.reset(&sub, start);
        }
        if let (true, Some(secs)) = (
            fresh,
            s.start_message_rollback_duration_sec.filter(|&d| d > 0),
        ) {
            // A Reader's `startMessageFromRollbackDuration`: as Pulsar, its subscription starts
            // at the first entry published within that many seconds before now.
            let since = now.wall_ms.saturating_sub(secs.saturating_mul(1000));
            topic.reset(&sub, topic.position_at_time(since));
        }
        self.start_consumer(now, s, topic, sub, (kind, ranges));
    }

    /// A SUBSCRIBE's schema (none, or AUTO_CONSUME: nothing to check) must read the topic's
    /// (see [`Topic::check_consumer_schema`]).
    fn check_consumer_schema(
        &self,
        topic: &Topic,
        s: &CommandSubscribe,
    ) -> Result<(), crate::schema::SchemaError> {
        use wire::proto::schema::Type;
        match &s.schema {
            Some(schema) if !matches!(schema.r#type(), Type::None | Type::AutoConsume) => {
                let strategy = self.state.cfg.schema_compatibility;
                topic.check_consumer_schema(schema, strategy).inspect_err(|e| {
                    info!(conn = self.id, topic = %topic.name, error = %e, "consumer's schema refused");
                })
            }
            _ => Ok(()),
        }
    }

    /// Connects the subscribed consumer (of the type and ranges it asked for) to its
    /// subscription's dispatcher, registers it for stats and seeks, and answers SUCCESS.
    fn start_consumer(
        &mut self,
        now: Now,
        s: &CommandSubscribe,
        topic: Arc<Topic>,
        sub: Arc<Subscription>,
        (kind, ranges): (SubKind, Vec<HashRange>),
    ) {
        let global = ConsumerId(self.state.next_consumer.fetch_add(1, Ordering::SeqCst));
        let spec = consumer_spec(s, global, kind, ranges);
        let consumer_name = spec.name.clone();
        let Some(out) = self.state.outbox(self.id) else {
            return self.send_error(
                s.request_id,
                ServerError::ServiceNotReady,
                "the connection is closing",
            );
        };
        let counters = Arc::new(OutCounters::default());
        let ready = Arc::new(AtomicBool::new(false));
        let closed = Arc::new(AtomicBool::new(false));
        let route = DeliveryRoute {
            consumer_id: s.consumer_id,
            counters: counters.clone(),
            topic: topic.clone(),
            out,
            ready: ready.clone(),
            closed: closed.clone(),
            send_ack_set: !self.state.cfg.legacy.no_batch_ack_set,
            reads: Default::default(),
            events: sub.runtime.events(),
            dispatcher_id: global,
        };
        let handle = match sub.runtime.add_consumer_with_sink(spec, Box::new(route)) {
            Ok(h) => h,
            Err(e) => {
                return self.send_error(
                    s.request_id,
                    ServerError::ConsumerAssignError,
                    &e.to_string(),
                )
            }
        };
        self.unopened.push(ready.clone());
        lock(&sub.consumers).insert(
            global,
            ConsumerInfo {
                conn: self.id,
                client_id: s.consumer_id,
                address: self.peer.clone(),
                connected_since: crate::stats::rfc3339(now.wall_ms),
                client_version: self.client_version.clone(),
                metadata: s
                    .metadata
                    .iter()
                    .map(|kv| (kv.key.clone(), kv.value.clone()))
                    .collect(),
                out: counters.clone(),
                reached_end: Arc::default(),
            },
        );
        info!(conn = self.id, topic = %topic.name, subscription = %sub.name, consumer = %consumer_name, id = %global, "consumer subscribed");
        self.consumers.insert(
            s.consumer_id,
            Consumer {
                global,
                topic,
                sub,
                handle,
                non_durable: s.durable == Some(false),
                acked_through: None,
                gate: ready,
                closed,
            },
        );
        self.send_success(s.request_id);
    }

    pub(super) fn on_flow(&mut self, cmd: &BaseCommand) {
        let Some(f) = &cmd.flow else {
            return self.send_error(0, ServerError::UnknownError, "missing body");
        };
        match self.consumers.get(&f.consumer_id) {
            Some(c) if f.message_permits > 0 => c.handle.flow(f.message_permits),
            Some(_) => {}
            None => debug!(
                conn = self.id,
                consumer_id = f.consumer_id,
                "FLOW for an unknown consumer"
            ),
        }
    }

    pub(super) fn on_ack(&mut self, cmd: &BaseCommand) {
        let Some(a) = &cmd.ack else {
            return self.send_error(0, ServerError::UnknownError, "missing body");
        };
        let Some(c) = self.consumers.get_mut(&a.consumer_id) else {
            debug!(
                conn = self.id,
                consumer_id = a.consumer_id,
                "ACK for an unknown consumer"
            );
            if let Some(rid) = a.request_id {
                self.send(&wire::commands::ack_response(
                    a.consumer_id,
                    rid,
                    Some((ServerError::ConsumerNotFound, "no consumer with this id")),
                ));
            }
            return;
        };
        let failure = if a.ack_type() == proto::command_ack::AckType::Cumulative {
            if !matches!(c.sub.kind, SubKind::Exclusive | SubKind::Failover) {
                Some("cumulative ack is not allowed on Shared and Key_Shared".to_owned())
            } else {
                a.message_id
                    .last()
                    .and_then(|id| ack_cumulative(self.id, c, id).err())
                    .map(|e| e.to_string())
            }
        } else {
            let mut failure = None;
            for id in &a.message_id {
                if let Err(e) = ack_one(c, id) {
                    debug!(conn = self.id, ledger = id.ledger_id, entry = id.entry_id, error = %e, "ack refused");
                    failure.get_or_insert(e.to_string());
                }
            }
            failure
        };
        if let Some(rid) = a.request_id {
            let err = failure.as_deref().map(|m| (ServerError::UnknownError, m));
            self.send(&wire::commands::ack_response(a.consumer_id, rid, err));
        }
    }

    pub(super) fn on_redeliver(&mut self, cmd: &BaseCommand) {
        let Some(r) = &cmd.redeliver_unacknowledged_messages else {
            return self.send_error(0, ServerError::UnknownError, "missing body");
        };
        let Some(c) = self.consumers.get(&r.consumer_id) else {
            return debug!(
                conn = self.id,
                consumer_id = r.consumer_id,
                "REDELIVER for an unknown consumer"
            );
        };
        if r.message_ids.is_empty() {
            c.handle.redeliver_all();
            return;
        }
        // A nacked chunk stands for its whole message: some clients (C++ 4.2.0) name only the
        // last chunk, so every chunk of the uuid goes back (positions not pending on this
        // consumer are ignored by the dispatcher).
        c.handle.redeliver(whole_messages(&c.topic, &r.message_ids));
    }

    /// PIP-493's CommandNegativeAck: nacked messages are re-sent with their key held until
    /// then (the dispatcher's ordered nack, with its configured backoff), returned ones are
    /// re-sent without counting a redelivery. A nacked or returned chunk stands for every
    /// chunk of its message.
    pub(super) fn on_negative_ack(&mut self, cmd: Option<wire::pip493::CommandNegativeAck>) {
        let Some(n) = cmd else {
            return self.send_error(
                0,
                ServerError::UnknownError,
                "NEGATIVE_ACK without its body",
            );
        };
        let Some(c) = self.consumers.get(&n.consumer_id) else {
            return debug!(
                conn = self.id,
                consumer_id = n.consumer_id,
                "NEGATIVE_ACK for an unknown consumer"
            );
        };
        let nacked = whole_messages(&c.topic, &n.negative_acked);
        let returned = whole_messages(&c.topic, &n.returned);
        if self.state.cfg.legacy.unordered_nack {
            // Pulsar's way: the nacked messages are simply redelivered; what the client gave
            // back stays with it (a stock client processes it before the redelivered one).
            if !nacked.is_empty() {
                c.handle.redeliver(nacked);
            }
            return;
        }
        if !nacked.is_empty() {
            c.handle.nack(nacked, None);
        }
        if !returned.is_empty() {
            c.handle.release(returned);
        }
    }

    pub(super) fn on_close_consumer(&mut self, cmd: &BaseCommand) {
        let Some(c) = &cmd.close_consumer else {
            return self.send_error(0, ServerError::UnknownError, "missing body");
        };
        if let Some(consumer) = self.consumers.remove(&c.consumer_id) {
            self.drop_consumer(consumer);
        }
        self.send_success(c.request_id);
    }

    /// CONSUMER_STATS: the consumer's figures, or `ConsumerNotFound` in the response.
    pub(super) fn on_consumer_stats(&mut self, cmd: &BaseCommand) {
        let Some(q) = &cmd.consumer_stats else {
            return self.send_error(0, ServerError::UnknownError, "missing body");
        };
        let target = self
            .consumers
            .get(&q.consumer_id)
            .map(|c| (c.sub.as_ref(), c.global));
        let reply = crate::stats::consumer_stats_response(q.request_id, target);
        self.send(&reply);
    }

    pub(super) fn on_unsubscribe(&mut self, cmd: &BaseCommand) {
        let Some(u) = &cmd.unsubscribe else {
            return self.send_error(0, ServerError::UnknownError, "missing body");
        };
        let Some(c) = self.consumers.get(&u.consumer_id) else {
            return self.send_error(
                u.request_id,
                ServerError::ConsumerNotFound,
                "no consumer with this id",
            );
        };
        let others = lock(&c.sub.consumers).len() > 1;
        if others && !u.force.unwrap_or(false) {
            return self.send_error(
                u.request_id,
                ServerError::UnknownError,
                "subscription has other connected consumers",
            );
        }
        let Some(consumer) = self.consumers.remove(&u.consumer_id) else {
            return;
        };
        let (topic, sub_name) = (consumer.topic.clone(), consumer.sub.name.clone());
        self.drop_consumer(consumer);
        if let Some(sub) = topic.remove_subscription(&sub_name) {
            if let Ok(sub) = Arc::try_unwrap(sub) {
                sub.runtime.shutdown();
            }
        }
        self.send_success(u.request_id);
    }

    pub(super) fn on_seek(&mut self, cmd: &BaseCommand) {
        let Some(s) = &cmd.seek else {
            return self.send_error(0, ServerError::UnknownError, "missing body");
        };
        let Some(c) = self.consumers.get(&s.consumer_id) else {
            return self.send_error(
                s.request_id,
                ServerError::ConsumerNotFound,
                "no consumer with this id",
            );
        };
        let target = if let Some(id) = &s.message_id {
            c.topic.resolve_message_id(id.ledger_id, id.entry_id)
        } else if let Some(t) = s.message_publish_time {
            c.topic.position_at_time(t)
        } else {
            return self.send_error(
                s.request_id,
                ServerError::UnknownError,
                "SEEK needs a message id or a publish time",
            );
        };
        // As Pulsar does: every consumer of the subscription is closed by the broker first (the
        // clients subscribe again, clearing their receive queues), then the cursor moves, then
        // the SEEK succeeds. The other order let the dispatcher send the reset range to the
        // still-attached consumers and replay it again after the close (seen twice by the app).
        let sub = c.sub.clone();
        self.state.kick_subscription(&sub);
        c.topic.reset(&sub, target);
        self.send_success(s.request_id);
    }

    pub(super) fn on_get_last_message_id(&mut self, cmd: &BaseCommand) {
        let Some(g) = &cmd.get_last_message_id else {
            return self.send_error(0, ServerError::UnknownError, "missing body");
        };
        let Some(c) = self.consumers.get(&g.consumer_id) else {
            return self.send_error(
                g.request_id,
                ServerError::ConsumerNotFound,
                "no consumer with this id",
            );
        };
        // With the subscription's mark-delete position, which clients compare with the last
        // id for `hasMessageAvailable` (the Go client dereferences it after a seek by time).
        let last = c.topic.last_position();
        let mark_delete = c.sub.runtime.cursor_view().mark_delete;
        self.send(&wire::commands::get_last_message_id_response(
            g.request_id,
            wire::convert::message_id(last),
            Some(wire::convert::message_id(mark_delete)),
        ));
    }

    /// A consumer leaves: its unacked entries go back to the others; a non-durable subscription
    /// it leaves without consumers is removed. A consumer the broker already closed (a seek or
    /// reset-cursor closes every consumer of the subscription) is no longer registered: its
    /// removal, by the client's re-subscribe or its own CLOSE_CONSUMER, leaves a Reader's
    /// subscription where the seek put it, as Pulsar keeps it when the removal comes from a
    /// reset.
    pub(super) fn drop_consumer(&mut self, c: Consumer) {
        let last = {
            let mut consumers = lock(&c.sub.consumers);
            consumers.remove(&c.global).is_some() && consumers.is_empty()
        };
        let Consumer {
            handle,
            topic,
            sub,
            non_durable,
            gate,
            closed,
            ..
        } = c;
        // No MESSAGE for it is written after this: a send its dispatcher makes before it
        // handles the removal is refused as closed (its entries come back with the removal,
        // a first chunk's pin moves back).
        closed.store(true, Ordering::Release);
        self.unopened.retain(|g| !Arc::ptr_eq(g, &gate));
        handle.close();
        if non_durable && last {
            let name = sub.name.clone();
            drop(sub);
            // Dropping the last reference stops the subscription's runtime.
            drop(topic.remove_subscription(&name));
        }
    }
}

/// A cumulative ack through `id` (Exclusive, Failover): everything up to the id is acked, the id itself
/// only in part when it carries an `ack_set`; entries acked before are acked again, harmlessly.
fn ack_cumulative(
    conn: u64,
    c: &mut Consumer,
    id: &proto::MessageIdData,
) -> Result<(), AckHandleError> {
    let upto = Position::new(id.ledger_id, id.entry_id);
    for pos in c.topic.positions_between(c.acked_through, upto) {
        if pos < upto {
            if let Err(e) = c.handle.ack(pos) {
                debug!(conn, position = %pos, error = %e, "cumulative ack refused");
            }
        }
    }
    let result = ack_one(c, id);
    if let Err(e) = &result {
        debug!(conn, position = %upto, error = %e, "ack refused");
    }
    let through = if id.ack_set.is_empty() {
        upto
    } else {
        upto.before()
    };
    c.acked_through = c.acked_through.max(Some(through));
    result
}

/// The positions `ids` stand for, each chunk expanded to every chunk of its message, sorted
/// and without duplicates.
fn whole_messages(topic: &Topic, ids: &[proto::MessageIdData]) -> Vec<Position> {
    let mut ps: Vec<Position> = ids
        .iter()
        .flat_map(|id| topic.chunk_siblings(Position::new(id.ledger_id, id.entry_id)))
        .collect();
    ps.sort_unstable();
    ps.dedup();
    ps
}
