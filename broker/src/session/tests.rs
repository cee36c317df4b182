//! The session's protocol rules, command by command, without a socket: each test drives one or
//! more [`Session`]s over one in-memory [`BrokerState`] with bytes and a virtual clock, and
//! reads what they transmit back through the strict frame checker (quinn-proto's `Pair` of
//! endpoints is the model).

use std::sync::Mutex;
use std::time::Duration;

use cursor::Position;
use wire::proto::{
    base_command::Type, command_subscribe::InitialPosition as Initial, command_subscribe::SubType,
    BaseCommand, IntRange, KeySharedMeta, MessageIdData, MessageMetadata, ServerError,
};

use super::*;
use crate::config::BrokerConfig;

mod faults;
mod writes;

const T: &str = "persistent://public/default/t";

fn state() -> Arc<BrokerState> {
    Arc::new(BrokerState::new(
        BrokerConfig::default(),
        "pulsar://127.0.0.1:6650".into(),
        Arc::new(crate::shell::ShellRuntimes::threads()),
    ))
}

/// Frames the broker sends a connection on its own (CLOSE_CONSUMER after a seek), and the
/// consumers' MESSAGE frames, which the dispatcher threads offer.
#[derive(Default)]
struct TestOutbox(Mutex<Vec<Vec<u8>>>, Mutex<Vec<Vec<u8>>>);

impl crate::state::Outbox for TestOutbox {
    fn push(&self, frame: Vec<u8>) {
        self.0.lock().unwrap().push(frame);
    }

    fn offer(&self, frames: Vec<u8>) -> crate::state::Offer {
        self.1.lock().unwrap().push(frames);
        crate::state::Offer::Taken
    }

    fn drained(&self) -> bool {
        true
    }
}

/// Every frame in `buf`, each checked as the strictest client reads it.
pub(crate) fn decode_all(buf: &[u8]) -> Vec<wire::Frame> {
    wire::strict::frames(buf)
        .map(|f| {
            let f = f.expect("a whole frame");
            wire::strict::check_frame(f).expect("a frame a strict client reads");
            wire::decode_frame(f).expect("a decodable frame")
        })
        .collect()
}

/// One client connection's session, driven by the test.
struct Peer {
    session: Session,
    now: Now,
    /// MESSAGE frames received and not yet asked for: (consumer id, position, redeliveries).
    messages: Vec<(u64, Position, u32)>,
    outbox: Arc<TestOutbox>,
    closed: Option<Close>,
}

impl Peer {
    fn new(state: &Arc<BrokerState>, id: u64) -> Peer {
        let outbox = Arc::new(TestOutbox::default());
        state.register_outbox(id, outbox.clone());
        let now = Now {
            ms: 0,
            wall_ms: 1_764_000_000_000,
        };
        Peer {
            session: Session::new(
                state.clone(),
                id,
                format!("peer-{id}"),
                "pulsar://b:6650".into(),
                now,
            ),
            now,
            messages: Vec::new(),
            outbox,
            closed: None,
        }
    }

    fn connected(state: &Arc<BrokerState>, id: u64) -> Peer {
        let mut p = Peer::new(state, id);
        let r = p.call(&wire::commands::connect("test", 21));
        assert_eq!(kinds(&r), [Type::Connected]);
        p
    }

    /// Feeds `bytes` and returns what the session transmits.
    fn feed(&mut self, bytes: &[u8]) -> Vec<wire::Frame> {
        if let Err(c) = self.session.handle_bytes(self.now, bytes) {
            self.closed = Some(c);
        }
        self.run_writes();
        self.take()
    }

    /// Runs the session's write requests, as the TCP shell does after each read.
    fn run_writes(&mut self) {
        WriteRequest::run_all(&mut self.session, self.now.wall_ms);
    }

    /// What the session transmits, each frame checked as Java's client reads it.
    fn take(&mut self) -> Vec<wire::Frame> {
        let mut out = Vec::new();
        while let Some(buf) = self.session.poll_transmit() {
            for frame in wire::strict::frames(&buf) {
                let checked = frame.and_then(wire::strict::check_frame);
                assert_eq!(checked, Ok(()), "a frame Java's client refuses");
            }
            out.extend(decode_all(&buf));
        }
        out
    }

    fn call(&mut self, cmd: &BaseCommand) -> Vec<BaseCommand> {
        let mut bytes = Vec::new();
        wire::encode_command(cmd, &mut bytes);
        self.feed(&bytes).into_iter().map(|f| f.command).collect()
    }

    /// Publishes one message through producer `producer_id` and returns its position.
    fn publish(&mut self, producer_id: u64, seq: u64, meta: MessageMetadata) -> Position {
        let mut bytes = Vec::new();
        wire::encode_with_payload(
            &wire::commands::send(producer_id, seq, 1),
            &meta,
            b"body",
            &mut bytes,
        );
        let r = self.feed(&bytes);
        let receipt = r[0].command.send_receipt.as_ref().expect("a SEND_RECEIPT");
        let id = receipt.message_id.as_ref().unwrap();
        Position::new(id.ledger_id, id.entry_id)
    }

    /// The next `n` MESSAGE frames to consumer `consumer_id`: (position, redelivery count).
    fn receive(&mut self, consumer_id: u64, n: usize) -> Vec<(Position, u32)> {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let offered = std::mem::take(&mut *self.outbox.1.lock().unwrap());
            for f in offered.iter().flat_map(|buf| decode_all(buf)) {
                let m = f.command.message.expect("a MESSAGE");
                assert!(f.payload.is_some(), "a MESSAGE carries its payload");
                self.messages.push((
                    m.consumer_id,
                    Position::new(m.message_id.ledger_id, m.message_id.entry_id),
                    m.redelivery_count.unwrap_or(0),
                ));
            }
            let mine = self.messages.iter().filter(|m| m.0 == consumer_id).count();
            if mine >= n {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{mine} of {n} MESSAGEs to consumer {consumer_id} within 5 s"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        let mut got = Vec::new();
        self.messages.retain(|&(c, p, r)| {
            if c == consumer_id && got.len() < n {
                got.push((p, r));
                return false;
            }
            true
        });
        got
    }
}

fn kinds(cmds: &[BaseCommand]) -> Vec<Type> {
    cmds.iter().map(|c| c.r#type()).collect()
}

fn meta(seq: u64) -> MessageMetadata {
    MessageMetadata {
        producer_name: "p".into(),
        sequence_id: seq,
        publish_time: 1_000 + seq,
        ..Default::default()
    }
}

/// One read's bytes: a SEND with `meta(seq)` for each `(producer id, sequence id)`.
fn sends(of: &[(u64, u64)]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for &(producer, seq) in of {
        let cmd = wire::commands::send(producer, seq, 1);
        wire::encode_with_payload(&cmd, &meta(seq), b"body", &mut bytes);
    }
    bytes
}

/// The default configuration with deduplication on.
fn deduplicating() -> BrokerConfig {
    BrokerConfig {
        deduplication: true,
        ..BrokerConfig::default()
    }
}

fn id(p: Position) -> MessageIdData {
    wire::convert::message_id(p)
}

/// The error a reply carries, whatever its command.
fn error_of(c: &BaseCommand) -> Option<ServerError> {
    let code = match c.r#type() {
        Type::Error => c.error.as_ref().map(|e| e.error),
        Type::LookupResponse => c.lookup_topic_response.as_ref().and_then(|r| r.error),
        Type::PartitionedMetadataResponse => {
            c.partition_metadata_response.as_ref().and_then(|r| r.error)
        }
        Type::AckResponse => c.ack_response.as_ref().and_then(|r| r.error),
        Type::GetSchemaResponse => c.get_schema_response.as_ref().and_then(|r| r.error_code),
        Type::ConsumerStatsResponse => c
            .consumer_stats_response
            .as_ref()
            .and_then(|r| r.error_code),
        Type::SendError => c.send_error.as_ref().map(|e| e.error),
        _ => None,
    };
    code.and_then(|c| ServerError::try_from(c).ok())
}

fn subscribe(sub: &str, consumer_id: u64, request_id: u64, t: SubType) -> BaseCommand {
    wire::commands::subscribe(T, sub, consumer_id, request_id, t, None, Initial::Earliest)
}

fn sticky(ranges: Vec<IntRange>) -> Option<KeySharedMeta> {
    Some(KeySharedMeta {
        key_shared_mode: wire::proto::KeySharedMode::Sticky as i32,
        hash_ranges: ranges,
        ..Default::default()
    })
}

/// A case: its name, set-up commands, the command, the reply's type and error.
type Case = (
    &'static str,
    Vec<BaseCommand>,
    BaseCommand,
    Type,
    Option<ServerError>,
);

/// One command after some set-up commands on a connected session: the reply's type, its
/// error (if any), and that it echoes the command's request id.
#[test]
fn every_command_gets_its_reply() {
    use wire::commands as c;
    let ok = None;
    let unknown_consumer = Some(ServerError::ConsumerNotFound);
    let mut cumulative = c::ack(1, id(Position::new(1, 0)), None);
    if let Some(a) = cumulative.ack.as_mut() {
        a.ack_type = wire::proto::command_ack::AckType::Cumulative as i32;
        a.request_id = Some(9);
    }
    let mut ack_unknown = c::ack(5, id(Position::new(1, 0)), None);
    ack_unknown.ack.as_mut().unwrap().request_id = Some(8);
    let mut unsupported = c::get_last_message_id(1, 77);
    unsupported.r#type = Type::NewTxn as i32;
    unsupported.new_txn = Some(Default::default());
    unsupported.new_txn.as_mut().unwrap().request_id = 77;
    let negative = vec![IntRange { start: -1, end: 10 }];
    let mut sticky_negative = subscribe("s", 1, 4, SubType::KeyShared);
    sticky_negative.subscribe.as_mut().unwrap().key_shared_meta = sticky(negative);
    let failover = |cid, rid| subscribe("s", cid, rid, SubType::Failover);
    let schema = BaseCommand {
        r#type: Type::GetSchema as i32,
        get_schema: Some(Box::new(wire::proto::CommandGetSchema {
            request_id: 6,
            topic: T.into(),
            schema_version: None,
        })),
        ..Default::default()
    };
    let topics = BaseCommand {
        r#type: Type::GetTopicsOfNamespace as i32,
        get_topics_of_namespace: Some(Box::new(wire::proto::CommandGetTopicsOfNamespace {
            request_id: 7,
            namespace: "public/default".into(),
            ..Default::default()
        })),
        ..Default::default()
    };
    let shared = |cid, rid| subscribe("s", cid, rid, SubType::Shared);
    let consumer_stats = |cid, rid| BaseCommand {
        r#type: Type::ConsumerStats as i32,
        consumer_stats: Some(Box::new(wire::proto::CommandConsumerStats {
            request_id: rid,
            consumer_id: cid,
        })),
        ..Default::default()
    };
    let producer = |pid, rid| c::producer(T, pid, rid, Some("p"));
    let moded = |pid: u64, rid, mode: wire::proto::ProducerAccessMode| {
        let mut cmd = c::producer(T, pid, rid, Some(&format!("m{pid}")));
        if let Some(p) = cmd.producer.as_mut() {
            p.producer_access_mode = Some(mode as i32);
        }
        cmd
    };
    use wire::proto::ProducerAccessMode as Mode;
    #[rustfmt::skip]
    let cases: Vec<Case> = vec![
        ("ping", vec![], c::ping(), Type::Pong, ok),
        ("lookup", vec![], c::lookup(T, 1), Type::LookupResponse, ok),
        ("lookup, bad name", vec![], c::lookup("a/t", 1), Type::LookupResponse, Some(ServerError::InvalidTopicName)),
        ("lookup, short name", vec![], c::lookup("t-partition-2", 1), Type::LookupResponse, ok),
        ("lookup, tenant/namespace/topic", vec![], c::lookup("public/default/t", 1), Type::LookupResponse, ok),
        ("lookup, legacy name", vec![], c::lookup("persistent://public/standalone/default/t", 1), Type::LookupResponse, Some(ServerError::TopicNotFound)),
        ("partitions, short name", vec![], c::partitioned_metadata("t", 2), Type::PartitionedMetadataResponse, ok),
        ("partitions", vec![], c::partitioned_metadata(T, 2), Type::PartitionedMetadataResponse, ok),
        ("partitions, bad name", vec![], c::partitioned_metadata("persistent://a/b", 2), Type::PartitionedMetadataResponse, Some(ServerError::InvalidTopicName)),
        ("partitions, non-persistent", vec![], c::partitioned_metadata("non-persistent://public/default/c", 2), Type::PartitionedMetadataResponse, Some(ServerError::TopicNotFound)),
        ("lookup, non-persistent", vec![], c::lookup("non-persistent://public/default/c", 1), Type::LookupResponse, Some(ServerError::TopicNotFound)),
        ("producer, non-persistent", vec![], c::producer("non-persistent://public/default/c", 1, 3, None), Type::Error, Some(ServerError::TopicNotFound)),
        ("partitions, no namespace", vec![], c::partitioned_metadata("persistent://public/none/t", 2), Type::PartitionedMetadataResponse, Some(ServerError::TopicNotFound)),
        ("lookup, no namespace", vec![], c::lookup("persistent://nobody/default/t", 1), Type::LookupResponse, Some(ServerError::TopicNotFound)),
        ("producer, no namespace", vec![], c::producer("persistent://public/none/t", 1, 3, None), Type::Error, Some(ServerError::TopicNotFound)),
        ("subscribe, no namespace", vec![], c::subscribe("persistent://public/none/t", "s", 1, 4, SubType::Shared, None, Initial::Latest), Type::Error, Some(ServerError::TopicNotFound)),
        ("producer", vec![], producer(1, 3), Type::ProducerSuccess, ok),
        ("producer, bad name", vec![], c::producer("a/x", 1, 3, None), Type::Error, Some(ServerError::InvalidTopicName)),
        ("producer, short name", vec![], c::producer("x", 1, 3, None), Type::ProducerSuccess, ok),
        ("producer again", vec![producer(1, 3)], producer(1, 4), Type::ProducerSuccess, ok),
        ("producer, name taken", vec![producer(1, 3)], producer(2, 4), Type::Error, Some(ServerError::ProducerBusy)),
        ("close producer", vec![producer(1, 3)], c::close_producer(1, 5), Type::Success, ok),
        ("producer, Exclusive beside a Shared one", vec![producer(1, 3)], moded(2, 4, Mode::Exclusive), Type::Error, Some(ServerError::ProducerFenced)),
        ("producer, Exclusive beside an Exclusive one", vec![moded(1, 3, Mode::Exclusive)], moded(2, 4, Mode::Exclusive), Type::Error, Some(ServerError::ProducerFenced)),
        ("producer, Shared beside an Exclusive one", vec![moded(1, 3, Mode::Exclusive)], moded(2, 4, Mode::Shared), Type::Error, Some(ServerError::ProducerBusy)),
        ("producer, ExclusiveWithFencing beside an Exclusive one", vec![moded(1, 3, Mode::Exclusive)], moded(2, 4, Mode::ExclusiveWithFencing), Type::ProducerSuccess, ok),
        ("producer, WaitForExclusive beside a Shared one", vec![producer(1, 3)], moded(2, 4, Mode::WaitForExclusive), Type::ProducerSuccess, ok),
        ("send, unknown producer", vec![], c::send(9, 1, 1), Type::SendError, Some(ServerError::NotAllowedError)),
        ("send, no payload", vec![producer(1, 3)], c::send(1, 1, 1), Type::SendError, Some(ServerError::UnknownError)),
        ("subscribe", vec![], shared(1, 4), Type::Success, ok),
        ("subscribe, Failover", vec![], failover(1, 4), Type::Success, ok),
        ("subscribe, second Failover consumer", vec![failover(1, 4)], failover(2, 5), Type::Success, ok),
        ("subscribe, no name", vec![], subscribe("", 1, 4, SubType::Shared), Type::Error, Some(ServerError::NotAllowedError)),
        ("subscribe, bad name", vec![], c::subscribe("a/b/c/t", "s", 1, 4, SubType::Shared, None, Initial::Latest), Type::Error, Some(ServerError::InvalidTopicName)),
        ("subscribe, short name", vec![], c::subscribe("t", "s", 1, 4, SubType::Shared, None, Initial::Latest), Type::Success, ok),
        ("subscribe, negative range", vec![], sticky_negative, Type::Error, Some(ServerError::ConsumerAssignError)),
        ("subscribe, Exclusive taken", vec![subscribe("s", 1, 4, SubType::Exclusive)], subscribe("s", 2, 5, SubType::Exclusive), Type::Error, Some(ServerError::ConsumerBusy)),
        ("subscribe, other type while connected", vec![shared(1, 4)], subscribe("s", 2, 5, SubType::KeyShared), Type::Error, Some(ServerError::ConsumerBusy)),
        ("ack, unknown consumer", vec![], ack_unknown, Type::AckResponse, unknown_consumer),
        ("cumulative ack on Shared", vec![shared(1, 4)], cumulative, Type::AckResponse, Some(ServerError::UnknownError)),
        ("consumer stats", vec![shared(1, 4)], consumer_stats(1, 9), Type::ConsumerStatsResponse, ok),
        ("consumer stats, unknown", vec![], consumer_stats(1, 9), Type::ConsumerStatsResponse, unknown_consumer),
        ("close consumer", vec![shared(1, 4)], c::close_consumer(1, 6), Type::Success, ok),
        ("close consumer, unknown", vec![], c::close_consumer(1, 6), Type::Success, ok),
        ("unsubscribe", vec![shared(1, 4)], c::unsubscribe(1, 7), Type::Success, ok),
        ("unsubscribe, unknown", vec![], c::unsubscribe(1, 7), Type::Error, unknown_consumer),
        ("unsubscribe, others connected", vec![shared(1, 4), shared(2, 5)], c::unsubscribe(1, 7), Type::Error, Some(ServerError::UnknownError)),
        ("seek", vec![shared(1, 4)], c::seek(1, 8, id(Position::new(1, 0))), Type::Success, ok),
        ("seek, unknown", vec![], c::seek(1, 8, id(Position::new(1, 0))), Type::Error, unknown_consumer),
        ("last message id", vec![shared(1, 4)], c::get_last_message_id(1, 9), Type::GetLastMessageIdResponse, ok),
        ("last message id, unknown", vec![], c::get_last_message_id(1, 9), Type::Error, unknown_consumer),
        ("schema of a topic without one", vec![producer(1, 3)], schema, Type::GetSchemaResponse, Some(ServerError::TopicNotFound)),
        ("topics of a namespace", vec![], topics, Type::GetTopicsOfNamespaceResponse, ok),
        ("a command not served", vec![], unsupported, Type::Error, Some(ServerError::NotAllowedError)),
    ];
    for (name, setup, cmd, want, error) in cases {
        let st = state();
        let mut p = Peer::connected(&st, 1);
        for s in &setup {
            p.call(s);
        }
        let r = p.call(&cmd);
        assert_eq!(kinds(&r), [want], "{name}");
        assert_eq!(error_of(&r[0]), error, "{name}");
        assert_eq!(
            wire::strict::command_request_id(&r[0]),
            wire::strict::command_request_id(&cmd),
            "{name}: the reply echoes the request id"
        );
        assert_eq!(p.closed, None, "{name}: the connection stays open");
        p.session.close();
    }
}

#[test]
fn connect_comes_first_and_negotiates_the_version() {
    let st = state();
    let mut p = Peer::new(&st, 1);
    let r = p.call(&wire::commands::lookup(T, 3));
    assert_eq!(kinds(&r), [Type::Error]);
    assert_eq!(p.closed, Some(Close::Protocol));
    for (asked, got) in [(25, PROTOCOL_VERSION), (10, 10)] {
        let mut p = Peer::new(&st, 2);
        let r = p.call(&wire::commands::connect("test", asked));
        assert_eq!(r[0].connected.as_ref().unwrap().protocol_version, Some(got));
    }
}

#[test]
fn an_undecodable_frame_gets_an_error_and_closes() {
    let st = state();
    let mut p = Peer::connected(&st, 1);
    let r = p.feed(&[0, 0, 0, 4, 0, 0, 0, 9]);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].command.r#type(), Type::Error);
    assert_eq!(p.closed, Some(Close::Protocol));
}

#[test]
fn keep_alive_pings_after_one_interval_and_closes_after_two() {
    let st = state();
    let ka = st.cfg.keep_alive_ms;
    let mut p = Peer::connected(&st, 1);
    let at = |ms| Now { ms, wall_ms: 0 };
    assert_eq!(p.session.handle_timeout(at(ka - 1)), Ok(()));
    assert!(p.take().is_empty());
    assert_eq!(p.session.handle_timeout(at(ka)), Ok(()));
    assert_eq!(p.take()[0].command.r#type(), Type::Ping);
    assert_eq!(p.session.handle_timeout(at(ka + 10)), Ok(()));
    assert!(p.take().is_empty(), "one PING per silence");
    // Any input restarts the count.
    p.now = at(2 * ka - 1);
    p.call(&wire::commands::pong());
    assert_eq!(p.session.handle_timeout(at(2 * ka + 10)), Ok(()));
    assert_eq!(p.session.handle_timeout(at(4 * ka - 2)), Ok(()));
    assert_eq!(p.session.handle_timeout(at(4 * ka - 1)), Err(Close::Idle));
}

/// Sets up producer 1 and publishes `n` messages; returns their positions.
fn publish_n(p: &mut Peer, n: u64) -> Vec<Position> {
    p.call(&wire::commands::producer(T, 1, 1, None));
    (0..n).map(|i| p.publish(1, i, meta(i))).collect()
}

/// A client that sends FLOW right behind SUBSCRIBE (one read holds both) gets no MESSAGE
/// before the SUBSCRIBE's SUCCESS: the dispatcher thread writes MESSAGE frames to the
/// connection's queue itself, so a consumer's deliveries wait until the shell has taken the
/// frames queued before them.
#[test]
fn no_message_overtakes_the_subscribe_reply() {
    let st = state();
    let mut p = Peer::connected(&st, 1);
    publish_n(&mut p, 3);
    let mut bytes = Vec::new();
    wire::encode_command(&subscribe("s", 1, 2, SubType::Shared), &mut bytes);
    wire::encode_command(&wire::commands::flow(1, 100), &mut bytes);
    p.session.handle_bytes(p.now, &bytes).unwrap();
    p.run_writes();
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        p.outbox.1.lock().unwrap().is_empty(),
        "no MESSAGE while the SUCCESS is still queued in the session"
    );
    assert_eq!(
        kinds(&p.take().into_iter().map(|f| f.command).collect::<Vec<_>>()),
        [Type::Success]
    );
    assert_eq!(p.receive(1, 3).len(), 3);
    p.session.close();
}

#[test]
fn a_cumulative_ack_acks_everything_up_to_the_id() {
    let st = state();
    let mut p = Peer::connected(&st, 1);
    let ps = publish_n(&mut p, 5);
    p.call(&subscribe("x", 1, 2, SubType::Exclusive));
    p.call(&wire::commands::flow(1, 100));
    assert_eq!(p.receive(1, 5).len(), 5);
    let mut cumulative = wire::commands::ack(1, id(ps[2]), None);
    cumulative.ack.as_mut().unwrap().ack_type =
        wire::proto::command_ack::AckType::Cumulative as i32;
    p.call(&cumulative);
    let topic = st.existing_topic(T).unwrap();
    let sub = topic.get_subscription("x").unwrap();
    assert_eq!(sub.runtime.cursor_view().mark_delete, ps[2]);
    p.session.close();
}

#[test]
fn a_reader_starts_at_its_start_id() {
    let st = state();
    let mut p = Peer::connected(&st, 1);
    let ps = publish_n(&mut p, 5);
    let mut reader = subscribe("reader-1", 1, 2, SubType::Exclusive);
    let s = reader.subscribe.as_mut().unwrap();
    s.durable = Some(false);
    s.start_message_id = Some(id(ps[3]));
    s.initial_position = Some(Initial::Latest as i32);
    assert_eq!(kinds(&p.call(&reader)), [Type::Success]);
    p.call(&wire::commands::flow(1, 100));
    assert_eq!(p.receive(1, 2), [(ps[3], 0), (ps[4], 0)]);
    // Its subscription goes with its consumer.
    p.call(&wire::commands::close_consumer(1, 3));
    assert!(st
        .existing_topic(T)
        .unwrap()
        .get_subscription("reader-1")
        .is_none());
}

#[test]
fn a_seek_closes_every_consumer_of_the_subscription_first() {
    let st = state();
    let mut a = Peer::connected(&st, 1);
    let mut b = Peer::connected(&st, 2);
    let ps = publish_n(&mut a, 3);
    a.call(&subscribe("s", 1, 2, SubType::Shared));
    b.call(&subscribe("s", 7, 2, SubType::Shared));
    let r = a.call(&wire::commands::seek(1, 3, id(ps[1])));
    assert_eq!(kinds(&r), [Type::Success]);
    let closes: Vec<u64> = [&a, &b]
        .iter()
        .flat_map(|p| p.outbox.0.lock().unwrap().clone())
        .flat_map(|buf| decode_all(&buf))
        .map(|f| {
            f.command
                .close_consumer
                .expect("CLOSE_CONSUMER")
                .consumer_id
        })
        .collect();
    assert_eq!(
        closes,
        [1, 7],
        "both consumers, each by its own connection's id"
    );
    let sub = st.existing_topic(T).unwrap().get_subscription("s").unwrap();
    assert_eq!(sub.runtime.cursor_view().mark_delete, ps[0]);
}

#[test]
fn a_redelivery_naming_one_chunk_brings_back_the_whole_message() {
    let st = state();
    let mut p = Peer::connected(&st, 1);
    p.call(&wire::commands::producer(T, 1, 1, None));
    let chunks: Vec<Position> = (0..3)
        .map(|i| {
            let mut m = meta(0);
            m.uuid = Some("p-0".into());
            m.chunk_id = Some(i);
            m.num_chunks_from_msg = Some(3);
            m.total_chunk_msg_size = Some(12);
            p.publish(1, 0, m)
        })
        .collect();
    p.call(&subscribe("s", 1, 2, SubType::Shared));
    p.call(&wire::commands::flow(1, 100));
    assert_eq!(p.receive(1, 3).len(), 3);
    p.call(&wire::commands::redeliver_unacknowledged(
        1,
        vec![id(chunks[2])],
    ));
    let again = p.receive(1, 3);
    assert_eq!(again, chunks.iter().map(|c| (*c, 1)).collect::<Vec<_>>());
    p.session.close();
}

#[test]
fn a_closed_session_leaves_its_topics() {
    let st = state();
    let mut p = Peer::connected(&st, 1);
    publish_n(&mut p, 1);
    p.call(&subscribe("s", 1, 2, SubType::Shared));
    let topic = st.existing_topic(T).unwrap();
    let sub = topic.get_subscription("s").unwrap();
    assert_eq!(sub.consumers.lock().unwrap().len(), 1);
    assert_eq!(topic.producers.lock().unwrap().len(), 1);
    p.session.handle_shutdown();
    let closes = kinds(&p.take().into_iter().map(|f| f.command).collect::<Vec<_>>());
    assert_eq!(closes, [Type::CloseProducer, Type::CloseConsumer]);
    p.session.close();
    assert!(sub.consumers.lock().unwrap().is_empty());
    assert!(topic.producers.lock().unwrap().len() == 0);
}
