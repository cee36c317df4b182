//! One client connection: a reader thread that decodes frames and runs commands, a writer
//! thread that drains a bounded channel of encoded frames into the socket, and one forwarder
//! thread per consumer that turns the dispatcher's deliveries into MESSAGE frames.
//!
//! Ids: producer, consumer and request ids are the client's, per connection, and request ids
//! repeat (the lookup and the subscribe counters are separate), so they are only echoed. Each
//! consumer gets a broker-wide [`ConsumerId`] for its subscription's dispatcher.
//!
//! Acks run on the reader thread of the acking connection, through the consumer's
//! [`ConsumerHandle`] (cursor, then pending acks), as the dispatcher's design expects.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, Sender};
use cursor::Position;
use dispatcher::{
    ConsumerHandle, ConsumerId, ConsumerSpec, HashRange, KeySharedConfig, KeySharedMode,
};
use tracing::{debug, error, info, warn};
use wire::proto::{self, base_command::Type, BaseCommand, ServerError};

use crate::server::Shared;
use crate::topic::{lock, InitialPosition, SubKind, Subscription, Topic, TopicName};

/// The newest protocol version this broker speaks (Pulsar's `ProtocolVersion` v21).
pub const PROTOCOL_VERSION: i32 = 21;

/// Frames queued for the writer before the reader (or a forwarder) waits.
const WRITE_QUEUE: usize = 1024;

/// How often a blocked read wakes up to look at the shutdown flag and the keep-alive.
const READ_TICK: Duration = Duration::from_millis(100);

/// How long a closing connection waits for its queued frames to be written.
const CLOSE_FLUSH: Duration = Duration::from_millis(500);

struct Producer {
    topic: Arc<Topic>,
    name: String,
    /// The version of the producer's schema (empty without one), repeated to a repeated PRODUCER.
    schema_version: Vec<u8>,
    warned_batch: bool,
}

struct Consumer {
    global: ConsumerId,
    topic: Arc<Topic>,
    sub: Arc<Subscription>,
    handle: ConsumerHandle,
    forwarder: Option<JoinHandle<()>>,
    /// A non-durable subscription (a Reader's) goes away with its last consumer, as in Pulsar.
    non_durable: bool,
    /// The last entry this consumer acked cumulatively (Exclusive subscriptions).
    acked_through: Option<Position>,
}

/// Runs one accepted connection to its end (socket closed, protocol error or shutdown).
pub(crate) fn serve(shared: Arc<Shared>, conn_id: u64, stream: TcpStream) {
    let peer = stream
        .peer_addr()
        .map_or_else(|_| "?".to_owned(), |a| a.to_string());
    let service_url = stream
        .local_addr()
        .map_or_else(|_| shared.service_url.clone(), |a| format!("pulsar://{a}"));
    let _ = stream.set_nodelay(true);
    if stream.set_read_timeout(Some(READ_TICK)).is_err() {
        warn!(peer, "cannot set a read timeout; closing");
        return;
    }
    let Ok(write_half) = stream.try_clone() else {
        warn!(peer, "cannot clone the socket; closing");
        return;
    };
    let (tx, rx) = bounded::<Vec<u8>>(WRITE_QUEUE);
    shared.register_writer(conn_id, tx.clone());
    let check = shared.cfg.check_frames;
    let writer = std::thread::Builder::new()
        .name(format!("conn-{conn_id}-write"))
        .spawn(move || write_loop(write_half, rx, check));
    let Ok(writer) = writer else {
        warn!(peer, "cannot spawn the writer thread; closing");
        return;
    };
    let mut conn = Conn {
        shared,
        id: conn_id,
        peer,
        service_url,
        stream,
        out: tx,
        reader: wire::FrameReader::new(0),
        connected: false,
        producers: HashMap::new(),
        consumers: HashMap::new(),
        pending_receipts: Vec::new(),
    };
    conn.reader = wire::FrameReader::new(conn.shared.cfg.max_frame_size());
    conn.run();
    conn.close_all();
    conn.shared.unregister_writer(conn_id);
    let Conn { out, stream, .. } = conn;
    drop(out);
    // Let the writer flush what is queued (CLOSE_* at shutdown), but not forever: a peer that
    // does not read would block it in `write_all` (and the forwarders behind the full queue)
    // for good. Cutting the socket makes the write fail, which ends the writer and them.
    let until = Instant::now() + CLOSE_FLUSH;
    while !writer.is_finished() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = stream.shutdown(Shutdown::Both);
    let _ = writer.join();
}

fn write_loop(mut stream: TcpStream, rx: Receiver<Vec<u8>>, check: bool) {
    let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
    while let Ok(first) = rx.recv() {
        if check && !frames_pass(&first) {
            let _ = stream.shutdown(Shutdown::Both);
            return;
        }
        buf.extend_from_slice(&first);
        while buf.len() < 256 * 1024 {
            match rx.try_recv() {
                Ok(more) if check && !frames_pass(&more) => {
                    let _ = stream.shutdown(Shutdown::Both);
                    return;
                }
                Ok(more) => buf.extend_from_slice(&more),
                Err(_) => break,
            }
        }
        if let Err(e) = stream.write_all(&buf) {
            debug!(error = %e, "write failed; closing the connection");
            let _ = stream.shutdown(Shutdown::Both);
            return;
        }
        buf.clear();
    }
    let _ = stream.flush();
}

/// `--check-frames`: whether every frame of a queued buffer reads as the strictest client
/// reads it; a failure is logged with the frame's command type.
fn frames_pass(buf: &[u8]) -> bool {
    for frame in wire::strict::frames(buf) {
        let failed = match frame {
            Ok(f) => wire::strict::check_frame(f).err().map(|e| (e, Some(f))),
            Err(e) => Some((e, None)),
        };
        if let Some((e, f)) = failed {
            let command = f
                .and_then(|f| wire::decode_frame(f).ok())
                .map(|f| f.command.r#type());
            error!(error = %e, ?command, "--check-frames: a frame a strict client cannot read; closing the connection");
            return false;
        }
    }
    true
}

struct Conn {
    shared: Arc<Shared>,
    id: u64,
    peer: String,
    service_url: String,
    stream: TcpStream,
    out: Sender<Vec<u8>>,
    reader: wire::FrameReader,
    connected: bool,
    producers: HashMap<u64, Producer>,
    consumers: HashMap<u64, Consumer>,
    /// Receipts waiting for their topic's fsync (sync policy `always`).
    pending_receipts: Vec<(Arc<Topic>, u64, u64, BaseCommand)>,
}

/// Why the reader stops.
enum Stop {
    Eof,
    Error,
    Shutdown,
}

fn command(t: Type) -> BaseCommand {
    BaseCommand {
        r#type: t as i32,
        ..Default::default()
    }
}

impl Conn {
    fn run(&mut self) {
        let mut buf = vec![0u8; 64 * 1024];
        let mut last_read = Instant::now();
        let mut pinged = false;
        let stop = loop {
            if self.shared.closing.load(Ordering::SeqCst) {
                break Stop::Shutdown;
            }
            match self.stream.read(&mut buf) {
                Ok(0) => break Stop::Eof,
                Ok(n) => {
                    last_read = Instant::now();
                    pinged = false;
                    self.reader.feed(&buf[..n]);
                    if !self.drain_frames() {
                        break Stop::Error;
                    }
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    let idle = last_read.elapsed();
                    let keep_alive = Duration::from_millis(self.shared.cfg.keep_alive_ms);
                    if idle >= keep_alive * 2 {
                        info!(conn = self.id, peer = %self.peer, "no frame for two keep-alive intervals; closing");
                        break Stop::Error;
                    }
                    if idle >= keep_alive && !pinged && self.connected {
                        pinged = true;
                        // Never wait for room: a full write queue means the peer does not
                        // read, and a reader blocked here would never reach the close above.
                        let mut out = Vec::with_capacity(16);
                        wire::encode_command(&command(Type::Ping), &mut out);
                        let _ = self.out.try_send(out);
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    debug!(conn = self.id, error = %e, "read failed");
                    break Stop::Error;
                }
            }
        };
        match stop {
            Stop::Eof => {
                debug!(conn = self.id, peer = %self.peer, "connection closed by the client")
            }
            Stop::Error => {
                debug!(conn = self.id, peer = %self.peer, "connection closed by the broker")
            }
            Stop::Shutdown => self.send_closes(),
        }
    }

    /// Handles every whole frame buffered; false when the connection must close.
    fn drain_frames(&mut self) -> bool {
        loop {
            match self.reader.next_frame() {
                Ok(Some(frame)) => {
                    if !self.handle(frame) {
                        self.flush_receipts();
                        return false;
                    }
                }
                Ok(None) => {
                    self.flush_receipts();
                    return true;
                }
                Err(e) => {
                    self.flush_receipts();
                    warn!(conn = self.id, peer = %self.peer, error = %e, "undecodable frame; closing the connection");
                    self.send_error(0, ServerError::UnknownError, &format!("bad frame: {e}"));
                    return false;
                }
            }
        }
    }

    fn send(&self, cmd: &BaseCommand) {
        let mut out = Vec::with_capacity(64);
        wire::encode_command(cmd, &mut out);
        let _ = self.out.send(out);
    }

    fn send_error(&self, request_id: u64, error: ServerError, message: &str) {
        self.send(&wire::commands::error(request_id, error, message));
    }

    fn send_success(&self, request_id: u64) {
        self.send(&wire::commands::success(request_id));
    }

    /// Runs one command; false when the connection must close.
    fn handle(&mut self, frame: wire::Frame) -> bool {
        if frame.command.r#type == wire::pip493::NEGATIVE_ACK && self.connected {
            self.on_negative_ack(frame.negative_ack);
            return true;
        }
        let wire::Frame {
            command: cmd,
            payload,
            ..
        } = frame;
        let t = cmd.r#type();
        if !self.connected && t != Type::Connect {
            warn!(conn = self.id, command = ?t, "command before CONNECT; closing");
            self.send_error(0, ServerError::NotAllowedError, "CONNECT must come first");
            return false;
        }
        match t {
            Type::Connect => self.on_connect(&cmd),
            Type::Ping => self.send(&command(Type::Pong)),
            Type::Pong => {}
            Type::PartitionedMetadata => self.on_partitioned_metadata(&cmd),
            Type::Lookup => self.on_lookup(&cmd),
            Type::Producer => self.on_producer(&cmd),
            Type::Send => self.on_send(&cmd, payload),
            Type::CloseProducer => self.on_close_producer(&cmd),
            Type::Subscribe => self.on_subscribe(&cmd),
            Type::Flow => self.on_flow(&cmd),
            Type::Ack => self.on_ack(&cmd),
            Type::RedeliverUnacknowledgedMessages => self.on_redeliver(&cmd),
            Type::CloseConsumer => self.on_close_consumer(&cmd),
            Type::Unsubscribe => self.on_unsubscribe(&cmd),
            Type::Seek => self.on_seek(&cmd),
            Type::GetLastMessageId => self.on_get_last_message_id(&cmd),
            Type::GetSchema => self.on_get_schema(&cmd),
            Type::GetTopicsOfNamespace => self.on_get_topics_of_namespace(&cmd),
            Type::GetOrCreateSchema => self.on_get_or_create_schema(&cmd),
            other => {
                debug!(conn = self.id, command = ?other, "unsupported command");
                self.send_error(
                    request_id_of(&cmd),
                    ServerError::NotAllowedError,
                    &format!(
                        "command {} is not supported by this broker",
                        other.as_str_name()
                    ),
                );
            }
        }
        true
    }

    fn on_connect(&mut self, cmd: &BaseCommand) {
        let Some(c) = &cmd.connect else {
            self.send_error(0, ServerError::UnknownError, "CONNECT without its body");
            return;
        };
        let version = c.protocol_version().min(PROTOCOL_VERSION);
        self.connected = true;
        debug!(conn = self.id, client = %c.client_version, protocol = version, "connected");
        // CONNECTED advertises PIP-493's key-ordered negative ack (a client that does not
        // know the flag skips it).
        if let Some(connected) = wire::commands::connected(
            &self.shared.server_version,
            version,
            self.shared.cfg.max_message_size as i32,
        )
        .connected
        {
            let mut out = Vec::with_capacity(64);
            wire::pip493::encode_connected_with_flag(*connected, &mut out);
            let _ = self.out.send(out);
        }
    }

    /// PIP-493's CommandNegativeAck: nacked messages are re-sent with their key held until
    /// then (the dispatcher's ordered nack, with its configured backoff), returned ones are
    /// re-sent without counting a redelivery. A nacked or returned chunk stands for every
    /// chunk of its message.
    fn on_negative_ack(&mut self, cmd: Option<wire::pip493::CommandNegativeAck>) {
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
        let expand = |ids: &[proto::MessageIdData]| {
            let mut ps: Vec<Position> = ids
                .iter()
                .flat_map(|id| {
                    c.topic
                        .chunk_siblings(Position::new(id.ledger_id, id.entry_id))
                })
                .collect();
            ps.sort_unstable();
            ps.dedup();
            ps
        };
        let nacked = expand(&n.negative_acked);
        let returned = expand(&n.returned);
        if self.shared.cfg.legacy.unordered_nack {
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

    fn on_partitioned_metadata(&mut self, cmd: &BaseCommand) {
        let Some(m) = &cmd.partition_metadata else {
            return self.send_error(0, ServerError::UnknownError, "missing body");
        };
        match TopicName::parse(&m.topic) {
            Ok(_) => self.send(&wire::commands::partitioned_metadata_response(
                m.request_id,
                0,
            )),
            Err(e) => self.send(&wire::commands::partitioned_metadata_failed(
                m.request_id,
                ServerError::InvalidTopicName,
                &e,
            )),
        }
    }

    fn on_lookup(&mut self, cmd: &BaseCommand) {
        let Some(l) = &cmd.lookup_topic else {
            return self.send_error(0, ServerError::UnknownError, "missing body");
        };
        match TopicName::parse(&l.topic) {
            Ok(_) => self.send(&wire::commands::lookup_response(
                l.request_id,
                &self.service_url,
                true,
            )),
            Err(e) => self.send(&wire::commands::lookup_failed(
                l.request_id,
                ServerError::InvalidTopicName,
                &e,
            )),
        }
    }

    /// GET_TOPICS_OF_NAMESPACE (every client's pattern subscription, and its periodic
    /// rediscovery): the namespace's persistent topics, unfiltered (the client applies its
    /// pattern); none in NON_PERSISTENT mode, as none are served.
    fn on_get_topics_of_namespace(&mut self, cmd: &BaseCommand) {
        let Some(g) = &cmd.get_topics_of_namespace else {
            return self.send_error(0, ServerError::UnknownError, "missing body");
        };
        use proto::command_get_topics_of_namespace::Mode;
        let topics = match g.mode() {
            Mode::NonPersistent => Vec::new(),
            Mode::Persistent | Mode::All => self.shared.topic_names_in(&g.namespace),
        };
        self.send(&wire::commands::get_topics_of_namespace_response(
            g.request_id,
            topics,
        ));
    }

    /// GET_SCHEMA: the topic's schema of the asked version (the latest without one); a topic
    /// without it is answered `TopicNotFound` in GET_SCHEMA_RESPONSE, as Pulsar does, which
    /// clients read as "no schema".
    fn on_get_schema(&mut self, cmd: &BaseCommand) {
        let Some(g) = &cmd.get_schema else {
            return self.send_error(0, ServerError::UnknownError, "missing body");
        };
        let found = TopicName::parse(&g.topic)
            .ok()
            .and_then(|n| self.shared.existing_topic(&n.full()))
            .and_then(|t| t.schemas.get(g.schema_version.as_deref()));
        self.send(&match found {
            Some((schema, version)) => {
                wire::commands::get_schema_response(g.request_id, schema, version)
            }
            None => wire::commands::get_schema_failed(
                g.request_id,
                ServerError::TopicNotFound,
                "Topic not found or no-schema",
            ),
        });
    }

    /// GET_OR_CREATE_SCHEMA (a producer whose message carries another schema than its own, as
    /// the Java client's dead-letter producer with AUTO_PRODUCE_BYTES): the schema's version,
    /// added to the topic when it is new.
    fn on_get_or_create_schema(&mut self, cmd: &BaseCommand) {
        let Some(g) = &cmd.get_or_create_schema else {
            return self.send_error(0, ServerError::UnknownError, "missing body");
        };
        let failed = |error, message: &str| {
            wire::commands::get_or_create_schema_failed(g.request_id, error, message)
        };
        let reply = match TopicName::parse(&g.topic) {
            Err(e) => failed(ServerError::InvalidTopicName, &e),
            Ok(name) => match self.shared.topic(&name) {
                Err(e) => failed(ServerError::PersistenceError, &e.to_string()),
                Ok(topic) => wire::commands::get_or_create_schema_response(
                    g.request_id,
                    topic.schemas.get_or_create(&g.schema),
                ),
            },
        };
        self.send(&reply);
    }

    fn on_producer(&mut self, cmd: &BaseCommand) {
        let Some(p) = &cmd.producer else {
            return self.send_error(0, ServerError::UnknownError, "missing body");
        };
        let name = match TopicName::parse(&p.topic) {
            Ok(n) => n,
            Err(e) => return self.send_error(p.request_id, ServerError::InvalidTopicName, &e),
        };
        if let Some(existing) = self.producers.get(&p.producer_id) {
            // A repeated PRODUCER for a ready producer: Pulsar answers success again.
            return self.send(&wire::commands::producer_success(
                p.request_id,
                &existing.name,
                -1,
                existing.schema_version.clone(),
            ));
        }
        let topic = match self.shared.topic(&name) {
            Ok(t) => t,
            Err(e) => {
                return self.send_error(p.request_id, ServerError::PersistenceError, &e.to_string())
            }
        };
        // A dead- or retry-letter producer names the subscription that must keep what it
        // publishes until someone reads it: Pulsar creates it first, at the earliest entry.
        if let Some(initial) = p
            .initial_subscription_name
            .as_deref()
            .filter(|n| !n.is_empty())
        {
            if topic.get_subscription(initial).is_none() {
                if let Err(e) = topic.subscription(
                    initial,
                    crate::topic::SubKind::Shared,
                    crate::topic::InitialPosition::Earliest,
                ) {
                    return self.send_error(
                        p.request_id,
                        ServerError::PersistenceError,
                        &format!("could not create the initial subscription {initial}: {e}"),
                    );
                }
                info!(conn = self.id, topic = %topic.name, subscription = initial, "initial subscription created for a producer");
            }
        }
        let producer_name = match (&p.producer_name, p.user_provided_producer_name()) {
            (Some(n), true) if !n.is_empty() => n.clone(),
            _ => self.shared.producer_name(),
        };
        let info = crate::topic::ProducerInfo {
            name: producer_name.clone(),
            address: self.peer.clone(),
            connected_since: crate::stats::now_rfc3339(),
        };
        if !topic.add_producer(self.id, p.producer_id, info) {
            return self.send_error(
                p.request_id,
                ServerError::ProducerBusy,
                &format!(
                    "producer with name '{producer_name}' is already connected to topic {}",
                    topic.name
                ),
            );
        }
        let schema_version = p
            .schema
            .as_ref()
            .map(|s| topic.schemas.get_or_create(s))
            .unwrap_or_default();
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
            -1,
            schema_version,
        ));
    }

    fn on_send(&mut self, cmd: &BaseCommand, payload: Option<wire::Payload>) {
        let Some(s) = &cmd.send else {
            return self.send_error(0, ServerError::UnknownError, "missing body");
        };
        let Some(producer) = self.producers.get_mut(&s.producer_id) else {
            warn!(
                conn = self.id,
                producer_id = s.producer_id,
                "SEND for an unknown producer"
            );
            return self.send(&wire::commands::send_error(
                s.producer_id,
                s.sequence_id,
                ServerError::NotAllowedError,
                "no producer with this id on this connection",
            ));
        };
        let Some(payload) = payload else {
            return self.send(&wire::commands::send_error(
                s.producer_id,
                s.sequence_id,
                ServerError::UnknownError,
                "SEND without a payload",
            ));
        };
        let meta = match wire::convert::message_info(&payload.metadata, payload.body().len()) {
            Ok(info) => info.meta,
            Err(e) => {
                warn!(conn = self.id, producer = %producer.name, error = %e, "SEND with invalid metadata refused");
                return self.send(&wire::commands::send_error(
                    s.producer_id,
                    s.sequence_id,
                    ServerError::NotAllowedError,
                    &format!("invalid message metadata: {e}"),
                ));
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
        match topic.publish(meta, Arc::from(payload.section)) {
            Ok(pos) => {
                let receipt = wire::commands::send_receipt(
                    s.producer_id,
                    s.sequence_id,
                    s.highest_sequence_id,
                    wire::convert::message_id(pos),
                );
                if topic.sync_policy().is_some() {
                    // Group commit: receipts wait until the entries of this read's frames are
                    // written (and, with `--sync always`, fsynced) in one go.
                    self.pending_receipts
                        .push((topic, s.producer_id, s.sequence_id, receipt));
                } else {
                    self.send(&receipt);
                }
            }
            Err(e) => {
                warn!(topic = %topic.name, error = %e, "entry not stored");
                self.send(&wire::commands::send_error(
                    s.producer_id,
                    s.sequence_id,
                    ServerError::PersistenceError,
                    &format!("not stored: {e}"),
                ));
            }
        }
    }

    /// Commits the topics written since the last call (see `Topic::commit`), then sends their
    /// receipts (or SEND_ERROR when the commit failed).
    fn flush_receipts(&mut self) {
        if self.pending_receipts.is_empty() {
            return;
        }
        let pending = std::mem::take(&mut self.pending_receipts);
        let mut synced: Vec<(Arc<Topic>, Result<(), String>)> = Vec::new();
        for (topic, producer_id, sequence_id, receipt) in pending {
            let result = match synced.iter().find(|(t, _)| Arc::ptr_eq(t, &topic)) {
                Some((_, r)) => r.clone(),
                None => {
                    let r = topic.commit().map_err(|e| e.to_string());
                    synced.push((topic.clone(), r.clone()));
                    r
                }
            };
            match result {
                Ok(()) => self.send(&receipt),
                Err(e) => self.send(&wire::commands::send_error(
                    producer_id,
                    sequence_id,
                    ServerError::PersistenceError,
                    &format!("not synced: {e}"),
                )),
            }
        }
    }

    fn on_close_producer(&mut self, cmd: &BaseCommand) {
        let Some(c) = &cmd.close_producer else {
            return self.send_error(0, ServerError::UnknownError, "missing body");
        };
        if let Some(p) = self.producers.remove(&c.producer_id) {
            p.topic.remove_producer(self.id, c.producer_id);
        }
        self.send_success(c.request_id);
    }

    fn on_subscribe(&mut self, cmd: &BaseCommand) {
        let Some(s) = &cmd.subscribe else {
            return self.send_error(0, ServerError::UnknownError, "missing body");
        };
        let name = match TopicName::parse(&s.topic) {
            Ok(n) => n,
            Err(e) => return self.send_error(s.request_id, ServerError::InvalidTopicName, &e),
        };
        if s.subscription.is_empty() {
            return self.send_error(
                s.request_id,
                ServerError::NotAllowedError,
                "empty subscription name",
            );
        }
        use proto::command_subscribe::SubType;
        let mut ranges = Vec::new();
        let kind = match s.sub_type() {
            SubType::Shared => SubKind::Shared,
            SubType::Exclusive => SubKind::Exclusive,
            SubType::KeyShared => {
                let mut ks = KeySharedConfig::default();
                if let Some(m) = &s.key_shared_meta {
                    ks.allow_out_of_order = m.allow_out_of_order_delivery();
                    if m.key_shared_mode() == proto::KeySharedMode::Sticky {
                        ks.mode = KeySharedMode::Sticky;
                        for r in &m.hash_ranges {
                            let (Ok(start), Ok(end)) =
                                (u32::try_from(r.start), u32::try_from(r.end))
                            else {
                                return self.send_error(
                                    s.request_id,
                                    ServerError::ConsumerAssignError,
                                    "negative hash range",
                                );
                            };
                            ranges.push(HashRange::new(start, end));
                        }
                    }
                }
                SubKind::KeyShared(ks)
            }
            SubType::Failover => {
                return self.send_error(
                    s.request_id,
                    ServerError::NotAllowedError,
                    "Failover subscriptions are not supported by this broker (Shared, Key_Shared and Exclusive are)",
                );
            }
        };
        if let Some(old) = self.consumers.remove(&s.consumer_id) {
            // A re-subscribe after the broker closed the consumer (seek): the old one is gone.
            self.drop_consumer(old);
        }
        let non_durable = s.durable == Some(false);
        let initial = match s.initial_position() {
            // A Reader is positioned at its start id below; starting it at Latest first would
            // log the whole topic as "dropped without an ack".
            _ if non_durable && s.start_message_id.is_some() => InitialPosition::Earliest,
            proto::command_subscribe::InitialPosition::Earliest => InitialPosition::Earliest,
            proto::command_subscribe::InitialPosition::Latest => InitialPosition::Latest,
        };
        let topic = match self.shared.topic(&name) {
            Ok(t) => t,
            Err(e) => {
                return self.send_error(s.request_id, ServerError::PersistenceError, &e.to_string())
            }
        };
        let fresh = topic.get_subscription(&s.subscription).is_none();
        let sub = match topic.subscription(&s.subscription, kind, initial) {
            Ok(sub) => sub,
            Err(e) => {
                let code = match e {
                    crate::topic::SubscribeError::ExclusiveBusy(_) => ServerError::ConsumerBusy,
                    crate::topic::SubscribeError::TypeMismatch { .. } => ServerError::ConsumerBusy,
                    crate::topic::SubscribeError::Storage(_) => ServerError::PersistenceError,
                };
                return self.send_error(s.request_id, code, &e.to_string());
            }
        };
        if let (true, true, Some(id)) = (fresh, non_durable, &s.start_message_id) {
            // A Reader: its non-durable subscription starts at the given id (inclusive; the
            // client drops the start entry itself when the start is exclusive).
            let start = topic.resolve_message_id(id.ledger_id, id.entry_id);
            sub.runtime.admin(dispatcher::AdminOp::ResetTo(start));
        }
        let global = ConsumerId(self.shared.next_consumer.fetch_add(1, Ordering::SeqCst));
        let consumer_name = s
            .consumer_name
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| format!("consumer-{}", global.0));
        let mut spec = ConsumerSpec::new(global.0, consumer_name.clone())
            .with_priority(s.priority_level.unwrap_or(0))
            .with_ranges(ranges);
        if let SubKind::KeyShared(ks) = kind {
            // The dispatcher takes the mode from the first consumer of an empty subscription
            // and refuses another mode while consumers are connected (ModeMismatch).
            spec = spec.with_key_shared(ks);
        }
        let handle = match sub.runtime.add_consumer(spec) {
            Ok(h) => h,
            Err(e) => {
                return self.send_error(
                    s.request_id,
                    ServerError::ConsumerAssignError,
                    &e.to_string(),
                );
            }
        };
        let out_counters = Arc::new(crate::topic::OutCounters::default());
        lock(&sub.consumers).insert(
            global,
            crate::topic::ConsumerInfo {
                conn: self.id,
                client_id: s.consumer_id,
                address: self.peer.clone(),
                connected_since: crate::stats::now_rfc3339(),
                out: out_counters.clone(),
            },
        );
        let forwarder = spawn_forwarder(
            s.consumer_id,
            out_counters,
            handle.deliveries.clone(),
            topic.clone(),
            self.out.clone(),
        );
        info!(conn = self.id, topic = %topic.name, subscription = %sub.name, consumer = %consumer_name, id = %global, "consumer subscribed");
        self.consumers.insert(
            s.consumer_id,
            Consumer {
                global,
                topic,
                sub,
                handle,
                forwarder,
                non_durable,
                acked_through: None,
            },
        );
        self.send_success(s.request_id);
    }

    fn on_flow(&mut self, cmd: &BaseCommand) {
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

    fn on_ack(&mut self, cmd: &BaseCommand) {
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
        let mut failure: Option<String> = None;
        if a.ack_type() == proto::command_ack::AckType::Cumulative {
            match a.message_id.last() {
                _ if c.sub.kind != SubKind::Exclusive => {
                    failure = Some("cumulative ack is not allowed on Shared and Key_Shared".into());
                }
                Some(id) => {
                    // Everything up to the id is acked (the id itself only in part when it
                    // carries an ack_set); entries acked before are acked again, harmlessly.
                    let upto = Position::new(id.ledger_id, id.entry_id);
                    for pos in c.topic.positions_between(c.acked_through, upto) {
                        if pos < upto {
                            if let Err(e) = c.handle.ack(pos) {
                                debug!(conn = self.id, position = %pos, error = %e, "cumulative ack refused");
                            }
                        }
                    }
                    if let Err(e) = ack_one(c, id) {
                        debug!(conn = self.id, position = %upto, error = %e, "ack refused");
                        failure = Some(e);
                    }
                    let through = if id.ack_set.is_empty() {
                        upto
                    } else {
                        upto.before()
                    };
                    c.acked_through = c.acked_through.max(Some(through));
                }
                None => {}
            }
        } else {
            for id in &a.message_id {
                if let Err(e) = ack_one(c, id) {
                    debug!(conn = self.id, ledger = id.ledger_id, entry = id.entry_id, error = %e, "ack refused");
                    failure.get_or_insert(e);
                }
            }
        }
        if let Some(rid) = a.request_id {
            let err = failure.as_deref().map(|m| (ServerError::UnknownError, m));
            self.send(&wire::commands::ack_response(a.consumer_id, rid, err));
        }
    }

    fn on_redeliver(&mut self, cmd: &BaseCommand) {
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
        let mut positions: Vec<Position> = Vec::new();
        for id in &r.message_ids {
            let p = Position::new(id.ledger_id, id.entry_id);
            positions.extend(c.topic.chunk_siblings(p));
        }
        positions.sort_unstable();
        positions.dedup();
        c.handle.redeliver(positions);
    }

    fn on_close_consumer(&mut self, cmd: &BaseCommand) {
        let Some(c) = &cmd.close_consumer else {
            return self.send_error(0, ServerError::UnknownError, "missing body");
        };
        if let Some(consumer) = self.consumers.remove(&c.consumer_id) {
            self.drop_consumer(consumer);
        }
        self.send_success(c.request_id);
    }

    fn on_unsubscribe(&mut self, cmd: &BaseCommand) {
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

    fn on_seek(&mut self, cmd: &BaseCommand) {
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
        self.shared.kick_subscription(&sub);
        sub.runtime.admin(dispatcher::AdminOp::ResetTo(target));
        self.send_success(s.request_id);
    }

    fn on_get_last_message_id(&mut self, cmd: &BaseCommand) {
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
    fn drop_consumer(&mut self, c: Consumer) {
        let last = {
            let mut consumers = lock(&c.sub.consumers);
            consumers.remove(&c.global).is_some() && consumers.is_empty()
        };
        let Consumer {
            handle,
            forwarder,
            topic,
            sub,
            non_durable,
            ..
        } = c;
        handle.close();
        // The forwarder ends when the dispatcher drops the delivery channel.
        drop(forwarder);
        if non_durable && last {
            let name = sub.name.clone();
            drop(sub);
            // Dropping the last reference stops the subscription's runtime.
            drop(topic.remove_subscription(&name));
        }
    }

    /// Tells the client its producers and consumers are closed (broker shutdown). Gives up
    /// when the write queue stays full (the peer does not read), so shutdown is not held up.
    fn send_closes(&mut self) {
        let cmds = self
            .producers
            .keys()
            .map(|&id| wire::commands::close_producer(id, 0))
            .chain(
                self.consumers
                    .keys()
                    .map(|&id| wire::commands::close_consumer(id, 0)),
            );
        for cmd in cmds {
            let mut out = Vec::with_capacity(64);
            wire::encode_command(&cmd, &mut out);
            if self.out.send_timeout(out, CLOSE_FLUSH).is_err() {
                debug!(conn = self.id, peer = %self.peer, "write queue full at shutdown; not telling the client");
                return;
            }
        }
    }

    fn close_all(&mut self) {
        let consumers: Vec<_> = self.consumers.drain().map(|(_, c)| c).collect();
        for c in consumers {
            self.drop_consumer(c);
        }
        for (id, p) in self.producers.drain() {
            p.topic.remove_producer(self.id, id);
        }
    }
}

/// An individual ack of one id: the whole entry, or the indexes its `ack_set` marks as acked.
fn ack_one(c: &Consumer, id: &proto::MessageIdData) -> Result<(), String> {
    let pos = Position::new(id.ledger_id, id.entry_id);
    let result = if id.ack_set.is_empty() {
        c.handle.ack(pos).map(|_| ())
    } else {
        let size = match id.batch_size {
            Some(n) if n > 0 => n as u32,
            _ => c.topic.meta(pos).map_or(0, |m| m.messages()),
        };
        if size == 0 {
            return Ok(());
        }
        let acked = wire::convert::acked_indexes_from_ack_set(&id.ack_set, size);
        c.handle.ack_batch_index(pos, size, &acked).map(|_| ())
    };
    result.map_err(|e| e.to_string())
}

/// The request id of a command that carries one (for ERROR replies to unsupported commands).
/// The request id of any command that has one (0 otherwise), for the ERROR that refuses it.
fn request_id_of(cmd: &BaseCommand) -> u64 {
    wire::strict::command_request_id(cmd).unwrap_or(0)
}

/// Turns the dispatcher's deliveries for one consumer into MESSAGE frames.
fn spawn_forwarder(
    client_consumer_id: u64,
    counters: Arc<crate::topic::OutCounters>,
    deliveries: Receiver<Vec<dispatcher::Delivery>>,
    topic: Arc<Topic>,
    out: Sender<Vec<u8>>,
) -> Option<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("consumer-{client_consumer_id}"))
        .spawn(move || {
            for batch in deliveries.iter() {
                let mut frames = Vec::with_capacity(batch.len() * 128);
                for d in &batch {
                    let Some(section) = topic.payload(d.position) else {
                        warn!(position = %d.position, "no stored payload for a delivered entry");
                        continue;
                    };
                    let ack_set = (!d.acked_indexes.is_empty()).then(|| {
                        wire::convert::ack_set_from_acked(&d.acked_indexes, d.meta.messages())
                    });
                    let cmd = wire::commands::message(
                        client_consumer_id,
                        wire::convert::message_id(d.position),
                        d.redelivery_count,
                        ack_set,
                    );
                    wire::encode_with_section(&cmd, &section, &mut frames);
                    let unacked = d.meta.messages() as usize
                        - d.acked_indexes.len().min(d.meta.messages() as usize);
                    counters
                        .messages
                        .fetch_add(unacked as u64, Ordering::Relaxed);
                    counters
                        .bytes
                        .fetch_add(u64::from(d.meta.size), Ordering::Relaxed);
                }
                if frames.is_empty() {
                    continue;
                }
                if out.send(frames).is_err() {
                    return;
                }
            }
        })
        .ok()
}
