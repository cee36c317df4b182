//! The stepped broker: a producer and a consumer connection driven by bytes and the caller's
//! clock, with no thread anywhere: nothing is delivered until the caller steps, a nack's delay
//! is the caller's clock, and the admin API works on the same state.

use cursor::Position;
use wire::proto::{
    base_command::Type, command_subscribe::InitialPosition, command_subscribe::SubType,
    BaseCommand, MessageMetadata,
};

use super::*;

const T0: u64 = 1_764_000_000_000;
const TOPIC: &str = "persistent://public/default/stepped";

/// SUBSCRIBE to the test topic's Shared subscription `s` from the earliest entry.
fn subscribe(consumer_id: u64, request_id: u64) -> BaseCommand {
    wire::commands::subscribe(
        TOPIC,
        "s",
        consumer_id,
        request_id,
        SubType::Shared,
        None,
        InitialPosition::Earliest,
    )
}

fn drain(c: &mut Connection) -> Vec<wire::Frame> {
    let mut out = Vec::new();
    while let Some(buf) = c.poll_transmit() {
        out.extend(crate::session::tests::decode_all(&buf));
    }
    out
}

fn call(c: &mut Connection, cmd: &BaseCommand) -> Vec<Type> {
    let mut bytes = Vec::new();
    wire::encode_command(cmd, &mut bytes);
    c.handle_bytes(&bytes).expect("an open connection");
    drain(c).iter().map(|f| f.command.r#type()).collect()
}

/// Message positions of the MESSAGE frames among `fs`.
fn messages(fs: &[wire::Frame]) -> Vec<Position> {
    fs.iter()
        .filter_map(|f| f.command.message.as_ref())
        .map(|m| Position::new(m.message_id.ledger_id, m.message_id.entry_id))
        .collect()
}

fn publish(p: &mut Connection, seq: u64, key: &str) {
    let meta = MessageMetadata {
        producer_name: "p".into(),
        sequence_id: seq,
        publish_time: T0,
        partition_key: Some(key.into()),
        ..Default::default()
    };
    let mut bytes = Vec::new();
    wire::encode_with_payload(&wire::commands::send(1, seq, 1), &meta, b"m", &mut bytes);
    p.handle_bytes(&bytes).expect("an open connection");
    let kinds: Vec<Type> = drain(p).iter().map(|f| f.command.r#type()).collect();
    assert_eq!(kinds, [Type::SendReceipt]);
}

fn setup() -> (SteppedBroker, Connection, Connection) {
    setup_with(BrokerConfig::default())
}

fn setup_with(cfg: BrokerConfig) -> (SteppedBroker, Connection, Connection) {
    let mut b = SteppedBroker::new(cfg, T0);
    let mut p = b.connect("producer");
    let mut c = b.connect("consumer");
    for conn in [&mut p, &mut c] {
        assert_eq!(
            call(conn, &wire::commands::connect("t", 21)),
            [Type::Connected]
        );
    }
    let producer = wire::commands::producer(TOPIC, 1, 1, None);
    assert_eq!(call(&mut p, &producer), [Type::ProducerSuccess]);
    assert_eq!(call(&mut c, &subscribe(7, 2)), [Type::Success]);
    (b, p, c)
}

#[test]
fn deliveries_wait_for_a_step() {
    let (b, mut p, mut c) = setup();
    assert!(call(&mut c, &wire::commands::flow(7, 100)).is_empty());
    for seq in 0..3 {
        publish(&mut p, seq, "k");
    }
    assert!(messages(&drain(&mut c)).is_empty(), "nothing before a step");
    assert!(b.step());
    let got = messages(&drain(&mut c));
    assert_eq!(got.len(), 3);
    assert!(!b.step(), "quiet after the step");
}

#[test]
fn a_redelivery_after_a_connection_is_lost_and_an_admin_skip() {
    let (mut b, mut p, mut c) = setup();
    call(&mut c, &wire::commands::flow(7, 100));
    for seq in 0..4 {
        publish(&mut p, seq, "k");
    }
    while b.step() {}
    let first = messages(&drain(&mut c));
    assert_eq!(first.len(), 4);
    // The consumer's connection is lost: its four unacked entries go to the next consumer.
    drop(c);
    let mut c2 = b.connect("consumer-2");
    call(&mut c2, &wire::commands::connect("t", 21));
    assert_eq!(call(&mut c2, &subscribe(8, 3)), [Type::Success]);
    let skip = "/admin/v2/persistent/public/default/stepped/subscription/s/skip/2";
    let (status, body) = b.admin("POST", skip, b"");
    assert_eq!(status, 204, "{}", String::from_utf8_lossy(&body));
    call(&mut c2, &wire::commands::flow(8, 100));
    while b.step() {}
    assert_eq!(
        messages(&drain(&mut c2)),
        first[2..].to_vec(),
        "the two skipped entries are not redelivered"
    );
}

/// A partly acked batch comes back with its acked indexes as the MESSAGE's `ack_set`, so the
/// client skips them; `--legacy no-batch-ack-set` leaves the `ack_set` out.
#[test]
fn a_redelivered_batch_carries_its_acked_indexes() {
    for legacy in [false, true] {
        let mut cfg = BrokerConfig::default();
        cfg.legacy.no_batch_ack_set = legacy;
        let (b, mut p, mut c) = setup_with(cfg);
        call(&mut c, &wire::commands::flow(7, 100));
        let meta = MessageMetadata {
            producer_name: "p".into(),
            sequence_id: 0,
            publish_time: T0,
            num_messages_in_batch: Some(3),
            ..Default::default()
        };
        let mut bytes = Vec::new();
        wire::encode_with_payload(&wire::commands::send(1, 0, 3), &meta, b"abc", &mut bytes);
        p.handle_bytes(&bytes).expect("an open connection");
        while b.step() {}
        let first = messages(&drain(&mut c));
        assert_eq!(first.len(), 1);
        let mut id = wire::convert::message_id(first[0]);
        id.batch_index = Some(0);
        id.batch_size = Some(3);
        let ack = wire::commands::ack(7, id, Some(wire::convert::ack_set_from_acked(&[0], 3)));
        call(&mut c, &ack);
        call(
            &mut c,
            &wire::commands::redeliver_unacknowledged(7, Vec::new()),
        );
        while b.step() {}
        let again = drain(&mut c);
        let m = again
            .iter()
            .find_map(|f| f.command.message.as_ref())
            .expect("the batch is redelivered");
        let want = match legacy {
            false => wire::convert::ack_set_from_acked(&[0], 3),
            true => Vec::new(),
        };
        assert_eq!(m.ack_set, want, "legacy {legacy}");
    }
}

/// `--max-unacked-messages-per-consumer` reaches the subscription's dispatcher: a consumer
/// with permits for everything stops at the limit until it acks.
#[test]
fn the_unacked_limit_per_consumer_holds_deliveries_back() {
    let mut cfg = BrokerConfig::default();
    cfg.dispatch.max_unacked_per_consumer = 2;
    let (b, mut p, mut c) = setup_with(cfg);
    call(&mut c, &wire::commands::flow(7, 100));
    for seq in 0..6 {
        publish(&mut p, seq, "k");
        while b.step() {}
    }
    let first = messages(&drain(&mut c));
    assert_eq!(first.len(), 2, "blocked at the limit");
    let ids = first
        .iter()
        .map(|p| wire::convert::message_id(*p))
        .collect();
    call(&mut c, &wire::commands::ack_ids(7, ids));
    while b.step() {}
    assert!(
        !messages(&drain(&mut c)).is_empty(),
        "resumed after the acks"
    );
}

/// The hash ranges each of two AUTO_SPLIT consumers holds (from the topic's stats).
fn auto_split_ranges(use_ring: bool) -> Vec<usize> {
    let mut cfg = BrokerConfig::default();
    cfg.dispatch.key_shared_use_consistent_hashing = use_ring;
    let mut b = SteppedBroker::new(cfg, T0);
    let mut c = b.connect("consumer");
    call(&mut c, &wire::commands::connect("t", 21));
    for id in [1, 2] {
        let sub = wire::commands::subscribe(
            TOPIC,
            "ks",
            id,
            id,
            SubType::KeyShared,
            None,
            InitialPosition::Earliest,
        );
        assert_eq!(call(&mut c, &sub), [Type::Success]);
    }
    let (status, body) = b.admin(
        "GET",
        "/admin/v2/persistent/public/default/stepped/stats",
        b"",
    );
    assert_eq!(status, 200);
    let stats: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let consumers = stats["subscriptions"]["ks"]["consumers"]
        .as_array()
        .unwrap()
        .clone();
    consumers
        .iter()
        .map(|c| c["keyHashRanges"].as_array().map_or(0, Vec::len))
        .collect()
}

/// `--subscription-key-shared-use-consistent-hashing false`: AUTO_SPLIT splits the hash range
/// in halves (one range each) instead of placing ring points (many ranges each).
#[test]
fn auto_split_follows_the_selector_flag() {
    assert_eq!(auto_split_ranges(false), [1, 1]);
    assert!(auto_split_ranges(true).iter().all(|&n| n > 10));
}

#[test]
fn the_keep_alive_follows_the_callers_clock() {
    let (b, _p, mut c) = setup();
    let keep_alive = BrokerConfig::default().keep_alive_ms;
    b.set_time(T0 + keep_alive);
    c.handle_timeout()
        .expect("one interval: a PING, not a close");
    let kinds: Vec<Type> = drain(&mut c).iter().map(|f| f.command.r#type()).collect();
    assert_eq!(kinds, [Type::Ping]);
    b.set_time(T0 + 2 * keep_alive);
    assert_eq!(c.handle_timeout(), Err(Closed::Idle));
}

/// A broker over `dir` with a producer and a consumer (id 7, 100 permits) on [`TOPIC`], and
/// its configuration.
fn on_disk(dir: &std::path::Path) -> (SteppedBroker, BrokerConfig, Connection, Connection) {
    let cfg = BrokerConfig {
        data_dir: Some(dir.to_path_buf()),
        ..BrokerConfig::default()
    };
    let mut b = SteppedBroker::open(cfg.clone(), T0).unwrap();
    let mut p = b.connect("producer");
    let mut c = b.connect("consumer");
    for conn in [&mut p, &mut c] {
        call(conn, &wire::commands::connect("t", 21));
    }
    call(&mut p, &wire::commands::producer(TOPIC, 1, 1, None));
    assert_eq!(call(&mut c, &subscribe(7, 2)), [Type::Success]);
    call(&mut c, &wire::commands::flow(7, 100));
    (b, cfg, p, c)
}

/// A restart over a data directory: a crash keeps what was acked and persisted, the stored
/// entries come back, and the unacked ones are delivered again.
#[test]
fn a_crash_and_open_on_the_same_data_dir_recovers_the_backlog() {
    let dir = std::env::temp_dir().join(format!("broker-stepped-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (b, cfg, mut p, mut c) = on_disk(&dir);
    for seq in 0..4 {
        publish(&mut p, seq, "k");
    }
    while b.step() {}
    let got = messages(&drain(&mut c));
    assert_eq!(got.len(), 4);
    let mut ack = Vec::new();
    wire::encode_command(
        &wire::commands::ack(7, wire::convert::message_id(got[0]), None),
        &mut ack,
    );
    c.handle_bytes(&ack).unwrap();
    // Past the cursor's persist cadence (1 s), so the ack is on disk before the crash.
    b.set_time(T0 + 1_500);
    while b.step() {}
    b.housekeeping();
    drop((p, c));
    b.crash();
    let mut b = SteppedBroker::open(cfg, T0 + 2_000).unwrap();
    let mut c = b.connect("consumer");
    call(&mut c, &wire::commands::connect("t", 21));
    assert_eq!(call(&mut c, &subscribe(8, 2)), [Type::Success]);
    call(&mut c, &wire::commands::flow(8, 100));
    while b.step() {}
    assert_eq!(messages(&drain(&mut c)), got[1..].to_vec());
    drop(c);
    drop(b);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Open files under `dir` (Linux: the process's descriptors).
#[cfg(target_os = "linux")]
fn open_files_under(dir: &std::path::Path) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|fds| {
            fds.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .filter(|target| target.starts_with(dir))
                .count()
        })
        .unwrap_or(0)
}

/// A broker with a consumer connected lets its files go, crashed or dropped: a consumer's
/// delivery route refers to its topic, so without the broker closing its topics the topic,
/// its log and its cursor file would live on (a simulator of thousands of restarts ran out of
/// descriptors).
#[cfg(target_os = "linux")]
#[test]
fn a_crashed_or_dropped_broker_closes_its_files() {
    let dir = std::env::temp_dir().join(format!("broker-stepped-fds-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for crash in [true, false] {
        let dir = dir.join(if crash { "crash" } else { "drop" });
        let (b, _, mut p, mut c) = on_disk(&dir);
        publish(&mut p, 0, "k");
        while b.step() {}
        assert_eq!(messages(&drain(&mut c)).len(), 1);
        assert!(open_files_under(&dir) > 0, "the log is open");
        if crash {
            b.crash();
        } else {
            drop(b);
        }
        drop((p, c));
        assert_eq!(open_files_under(&dir), 0, "crash={crash}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
