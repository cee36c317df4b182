//! The two broker-side source incidents, end to end over the wire with the broker's legacy
//! switches as the control: each scenario passes on our behaviour and fails with the switch
//! that restores Pulsar's.
//!
//! * Seed 000: on Key_Shared, an admin skip passes entries a consumer still holds; with the
//!   fix the key stays with its draining old owner, with `--legacy mark-delete-cleanup` the new
//!   owner gets later messages of the key while the old owner still holds earlier ones.
//! * Seed 001: on Shared, a chunked message whose first chunk was acked before a restart;
//!   with the fix the orphan chunks are dispatched and the subscription keeps going, with
//!   `--legacy orphan-chunk-replay` it stalls.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::{http, metadata, produce, start_broker, Raw};
use cursor::Position;
use wire::proto::base_command::Type;
use wire::proto::command_subscribe::{InitialPosition, SubType};
use wire::proto::MessageMetadata;

/// Every MESSAGE arriving within `window`: (position, key, body).
fn collect(c: &mut Raw, window: Duration) -> Vec<(Position, String, Vec<u8>)> {
    collect_n(c, usize::MAX, window)
}

/// MESSAGEs until `n` arrived or `deadline` passed (for counts a test knows; a loaded machine
/// only makes it slower, never flaky).
fn collect_n(c: &mut Raw, n: usize, deadline: Duration) -> Vec<(Position, String, Vec<u8>)> {
    let mut got = Vec::new();
    let until = Instant::now() + deadline;
    while got.len() < n && Instant::now() < until {
        if let Ok(Some(f)) = c.next(Duration::from_millis(20)) {
            if f.command.r#type() == Type::Message {
                let id = f.command.message.unwrap().message_id;
                let p = f.payload.unwrap();
                let key = p.metadata.partition_key.clone().unwrap_or_default();
                got.push((
                    Position::new(id.ledger_id, id.entry_id),
                    key,
                    p.body().to_vec(),
                ));
            }
        }
    }
    got
}

fn subscribe(b: &broker::Broker, topic: &str, sub: &str, id: u64, t: SubType) -> Raw {
    let mut c = Raw::connected(b);
    c.send(&wire::commands::subscribe(
        topic,
        sub,
        id,
        1,
        t,
        None,
        InitialPosition::Earliest,
    ));
    c.expect(Type::Success);
    c.send(&wire::commands::flow(id, 1000));
    c
}

/// Seed 000. Returns the keys c2 received while c1 still held an earlier message of the key.
fn seed_000(legacy: bool) -> BTreeSet<String> {
    const TOPIC: &str = "persistent://public/default/seed-000";
    let b = if legacy {
        start_broker(&["--legacy", "mark-delete-cleanup"])
    } else {
        start_broker(&[])
    };
    let mut c1 = subscribe(&b, TOPIC, "ks", 1, SubType::KeyShared);
    // Ten keys with one message each (positions 0..9, which the skip will pass), then ten
    // other keys with three each: c1 gets all 40 and acks none (it is still processing).
    let mut p = Raw::connected(&b);
    let name = common::open_producer(&mut p, TOPIC);
    let mut seq = 0;
    let mut send = |p: &mut Raw, key: &str| {
        p.send_message(
            &wire::commands::send(1, seq, 1),
            &metadata(&name, seq, Some(key)),
            format!("{key}-{seq}").as_bytes(),
        );
        p.expect(Type::SendReceipt);
        seq += 1;
    };
    for k in 0..10 {
        send(&mut p, &format!("a{k}"));
    }
    for round in 0..3 {
        let _ = round;
        for k in 0..10 {
            send(&mut p, &format!("b{k}"));
        }
    }
    let held = collect_n(&mut c1, 40, Duration::from_secs(10));
    assert_eq!(held.len(), 40, "c1 holds everything");
    // c2 joins: some keys move to it, but c1 still drains them.
    let mut c2 = subscribe(&b, TOPIC, "ks", 2, SubType::KeyShared);
    // The operator skips 10 messages: exactly the single messages of keys a0..a9.
    let (status, _) = http(
        &b,
        "POST",
        "/admin/v2/persistent/public/default/seed-000/subscription/ks/skip/10",
        "",
    );
    assert_eq!(status, 204);
    // More of every key.
    for k in 0..10 {
        send(&mut p, &format!("a{k}"));
        send(&mut p, &format!("b{k}"));
    }
    let early = collect(&mut c2, Duration::from_millis(1500));
    let held_keys: BTreeSet<String> = held.iter().map(|(_, k, _)| k.clone()).collect();
    let violated: BTreeSet<String> = early
        .iter()
        .map(|(_, k, _)| k.clone())
        .filter(|k| held_keys.contains(k))
        .collect();
    // c1 finishes: acks all it holds. Then c2 must get its keys' messages, in order.
    let ids: Vec<_> = held
        .iter()
        .map(|(p, _, _)| wire::convert::message_id(*p))
        .collect();
    c1.send(&wire::commands::ack_ids(1, ids));
    // Everything c2 owns arrives now (at least one key moved to it; bounded wait).
    let mut late = collect_n(&mut c2, 1, Duration::from_secs(10));
    late.extend(collect(&mut c2, Duration::from_millis(500)));
    let mut last: BTreeMap<String, Position> = BTreeMap::new();
    for (p, k, _) in early.iter().chain(&late) {
        if let Some(prev) = last.insert(k.clone(), *p) {
            assert!(prev < *p, "key {k}: {prev} then {p} on c2");
        }
    }
    if !legacy {
        assert!(!late.is_empty(), "c2 gets its keys once c1 acked");
    }
    b.shutdown(Duration::from_secs(5));
    violated
}

#[test]
fn seed_000_skip_does_not_release_a_draining_key() {
    let fixed = seed_000(false);
    assert!(fixed.is_empty(), "c2 got keys c1 still held: {fixed:?}");
    let legacy = seed_000(true);
    assert!(
        !legacy.is_empty(),
        "with --legacy mark-delete-cleanup c2 must get a key c1 still holds (Pulsar's bug)"
    );
}

fn chunk_meta(
    producer: &str,
    seq: u64,
    uuid: &str,
    id: i32,
    n: i32,
    total: i32,
) -> MessageMetadata {
    MessageMetadata {
        uuid: Some(uuid.to_owned()),
        chunk_id: Some(id),
        num_chunks_from_msg: Some(n),
        total_chunk_msg_size: Some(total),
        ..metadata(producer, seq, Some("kc"))
    }
}

/// Seed 001. Returns how many of the later plain messages c2 received after the restart.
fn seed_001(legacy: bool) -> (usize, u64) {
    const TOPIC: &str = "persistent://public/default/seed-001";
    let dir = std::env::temp_dir().join(format!("broker-seed001-{}-{legacy}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.to_string_lossy().into_owned();
    let mut args = vec!["--data-dir", d.as_str()];
    if legacy {
        args.extend(["--legacy", "orphan-chunk-replay"]);
    }
    {
        let b = start_broker(&args);
        let mut c1 = subscribe(&b, TOPIC, "sh", 1, SubType::Shared);
        let mut p = Raw::connected(&b);
        p.send(&wire::commands::producer(TOPIC, 1, 1, Some("prod")));
        p.expect(Type::ProducerSuccess);
        for chunk in 0..3 {
            let mut cmd = wire::commands::send(1, 0, 1);
            if let Some(s) = cmd.send.as_mut() {
                s.is_chunk = Some(true);
            }
            p.send_message(
                &cmd,
                &chunk_meta("prod", 0, "prod-0", chunk, 3, 30),
                &[b'x'; 10],
            );
            p.expect(Type::SendReceipt);
        }
        let got = collect_n(&mut c1, 3, Duration::from_secs(10));
        assert_eq!(got.len(), 3);
        // Only the first chunk is acked before the broker goes down.
        c1.send(&wire::commands::ack(
            1,
            wire::convert::message_id(got[0].0),
            None,
        ));
        c1.send(&wire::commands::ping());
        c1.expect(Type::Pong);
        b.shutdown(Duration::from_secs(5));
    }
    let b = start_broker(&args);
    let mut c2 = subscribe(&b, TOPIC, "sh", 1, SubType::Shared);
    produce(&b, TOPIC, 5, 1);
    // Ours: the 5 plain messages arrive (bounded wait); legacy: nothing within 2 s.
    let window = if legacy {
        Duration::from_secs(2)
    } else {
        Duration::from_secs(10)
    };
    let mut got = Vec::new();
    let until = Instant::now() + window;
    while Instant::now() < until
        && got
            .iter()
            .filter(|(_, _, body): &&(Position, String, Vec<u8>)| body.starts_with(b"m"))
            .count()
            < 5
    {
        got.extend(collect(&mut c2, Duration::from_millis(50)));
    }
    let plain = got
        .iter()
        .filter(|(_, _, body)| body.starts_with(b"m"))
        .count();
    let (_, stats) = http(
        &b,
        "GET",
        "/admin/v2/persistent/public/default/seed-001/stats",
        "",
    );
    let v: serde_json::Value = serde_json::from_str(&stats).unwrap();
    let orphans = v["subscriptions"]["sh"]["orphanChunksDispatched"]
        .as_u64()
        .unwrap_or(0);
    b.shutdown(Duration::from_secs(5));
    let _ = std::fs::remove_dir_all(&dir);
    (plain, orphans)
}

#[test]
fn seed_001_orphan_chunk_after_restart_does_not_stall() {
    let (plain, orphans) = seed_001(false);
    assert_eq!(
        plain, 5,
        "the subscription keeps delivering after the restart"
    );
    assert_eq!(orphans, 2, "chunks 1 and 2 were dispatched as orphans");
    let (plain, _) = seed_001(true);
    assert_eq!(
        plain, 0,
        "with --legacy orphan-chunk-replay the subscription stalls"
    );
}

/// Seed 002 (c): PIP-493's proposed CommandNegativeAck, sent by a small client of our own (no
/// released client sends it). The application nacks K0 and the client gives back K1..K4 that
/// it holds unprocessed: the broker re-sends K0 (redelivery count 1) before K1..K4 (count 0),
/// so the application processes K0, K0', K1, K2, K3, K4. With a stock client (REDELIVER of K0
/// only) the client processes K1..K4 first: K0, K1, K2, K3, K4, K0'.
#[test]
fn seed_002_pip_493_negative_ack_keeps_key_order() {
    let e = seed_002_pip_493(&[]);
    assert_eq!(
        e,
        vec![(0, 1), (1, 0), (2, 0), (3, 0), (4, 0)],
        "K0' first (count 1), then the returned K1..K4 (not counted)"
    );
    // Pulsar's way (`--legacy unordered-nack`): only K0 comes back; the client processes the
    // K1..K4 it holds first, so the application order is K0, K1..K4, K0'.
    let legacy = seed_002_pip_493(&["--legacy", "unordered-nack"]);
    assert_eq!(legacy, vec![(0, 1)]);
}

/// Runs the PIP-493 exchange; returns (index of the message, redelivery count) of what the
/// broker re-sent after the CommandNegativeAck, in order.
fn seed_002_pip_493(args: &[&str]) -> Vec<(u64, u32)> {
    const TOPIC: &str = "persistent://public/default/seed-002";
    let b = start_broker(args);
    let mut c = Raw::open(&b);
    let mut connect = Vec::new();
    wire::pip493::encode_connect_with_flag(
        wire::commands::connect("pip-493-test", 21),
        &mut connect,
    );
    c.send_bytes(&connect).unwrap();
    let connected = c.expect(Type::Connected);
    assert!(
        connected.supports_negative_ack,
        "the broker advertises the PIP-493 flag"
    );
    c.send(&wire::commands::subscribe(
        TOPIC,
        "ks",
        1,
        1,
        SubType::KeyShared,
        None,
        InitialPosition::Earliest,
    ));
    c.expect(Type::Success);
    c.send(&wire::commands::flow(1, 100));
    produce(&b, TOPIC, 5, 1);
    let first = collect_n(&mut c, 5, Duration::from_secs(10));
    assert_eq!(first.len(), 5);
    let ids: Vec<_> = first
        .iter()
        .map(|(p, _, _)| wire::convert::message_id(*p))
        .collect();
    let mut out = Vec::new();
    wire::pip493::encode_negative_ack(
        &wire::pip493::CommandNegativeAck {
            consumer_id: 1,
            negative_acked: vec![ids[0].clone()],
            returned: ids[1..].to_vec(),
        },
        &mut out,
    );
    c.send_bytes(&out).unwrap();
    // The redelivered frames, in order, with their redelivery counts.
    let mut again = Vec::new();
    let until = Instant::now() + Duration::from_millis(1500);
    while again.len() < 5 && Instant::now() < until {
        if let Ok(Some(f)) = c.next(Duration::from_millis(20)) {
            if f.command.r#type() == Type::Message {
                let m = f.command.message.unwrap();
                again.push((m.message_id.entry_id, m.redelivery_count.unwrap_or(0)));
            }
        }
    }
    let base = first[0].0.entry_id;
    b.shutdown(Duration::from_secs(5));
    again.into_iter().map(|(e, rc)| (e - base, rc)).collect()
}

/// Seed 002 (a): key-serial dispatch with a stock-client-like consumer. The client prefetches
/// (FLOW 100), nacks K0 through REDELIVER (all a stock client can do) and acks every other
/// message as soon as it processes it. Returns the application's processing order of key K.
fn seed_002_key_serial(args: &[&str]) -> (Vec<String>, f64) {
    const TOPIC: &str = "persistent://public/default/seed-002-serial";
    let b = start_broker(args);
    let mut c = subscribe(&b, TOPIC, "ks", 1, SubType::KeyShared);
    produce(&b, TOPIC, 6, 1);
    // The client's receive queue, and what the application processed, in order.
    let mut queue: std::collections::VecDeque<(Position, u32, Vec<u8>)> = Default::default();
    let mut processed: Vec<String> = Vec::new();
    let mut nacked = false;
    let until = Instant::now() + Duration::from_secs(5);
    while processed.len() < 7 && Instant::now() < until {
        while let Ok(Some(f)) = c.next(Duration::from_millis(5)) {
            if f.command.r#type() == Type::Message {
                let m = f.command.message.unwrap();
                let p = Position::new(m.message_id.ledger_id, m.message_id.entry_id);
                queue.push_back((
                    p,
                    m.redelivery_count.unwrap_or(0),
                    f.payload.unwrap().body().to_vec(),
                ));
            }
        }
        let Some((p, rc, body)) = queue.pop_front() else {
            continue;
        };
        let name = String::from_utf8_lossy(&body).into_owned();
        processed.push(if rc > 0 { format!("{name}'") } else { name });
        if !nacked {
            nacked = true;
            c.send(&wire::commands::redeliver_unacknowledged(
                1,
                vec![wire::convert::message_id(p)],
            ));
        } else {
            c.send(&wire::commands::ack(1, wire::convert::message_id(p), None));
        }
    }
    // The cost: one key, 200 messages, each acked as soon as it arrives.
    let (topic, n) = ("persistent://public/default/seed-002-rate", 200u64);
    let mut r = subscribe(&b, topic, "ks", 1, SubType::KeyShared);
    produce(&b, topic, n, 1);
    let started = Instant::now();
    let mut got = 0;
    while got < n && started.elapsed() < Duration::from_secs(10) {
        if let Ok(Some(f)) = r.next(Duration::from_millis(5)) {
            if f.command.r#type() == Type::Message {
                let id = f.command.message.unwrap().message_id;
                r.send(&wire::commands::ack(1, id, None));
                got += 1;
            }
        }
    }
    let rate = got as f64 / started.elapsed().as_secs_f64();
    b.shutdown(Duration::from_secs(5));
    (processed, rate)
}

#[test]
fn seed_002_key_serial_gives_a_stock_client_per_key_order_on_nack() {
    let (order, rate) = seed_002_key_serial(&["--key-shared-max-unacked-per-key", "1"]);
    assert_eq!(order, ["m0", "m0'", "m1", "m2", "m3", "m4", "m5"]);
    let (plain, plain_rate) = seed_002_key_serial(&[]);
    let (legacy, _) = seed_002_key_serial(&[
        "--key-shared-max-unacked-per-key",
        "1",
        "--legacy",
        "unordered-nack",
    ]);
    // Without key-serial (and with the legacy switch) the prefetched messages come first.
    for o in [&plain, &legacy] {
        assert_eq!(o[0], "m0");
        assert_eq!(o.last().map(String::as_str), Some("m0'"), "{o:?}");
    }
    eprintln!(
        "key-serial: one key at {rate:.0} msg/s with immediate acks over loopback, {plain_rate:.0} msg/s without"
    );
}
