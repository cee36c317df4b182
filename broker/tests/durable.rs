//! `--data-dir`: entries, subscriptions and their acks come back after a restart; retention
//! removes what every subscription acknowledged.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{produce, start_broker, Raw};
use cursor::Position;
use wire::proto::base_command::Type;
use wire::proto::command_subscribe::{InitialPosition, SubType};

const TOPIC: &str = "persistent://public/default/durable";

fn scratch(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("broker-durable-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn subscribe(b: &broker::Broker, sub: &str, t: SubType) -> Raw {
    let mut c = Raw::connected(b);
    c.send(&wire::commands::subscribe(
        TOPIC,
        sub,
        1,
        1,
        t,
        None,
        InitialPosition::Earliest,
    ));
    c.expect(Type::Success);
    c
}

/// Receives MESSAGE frames until `n` arrived (or 5 s passed): (position, payload body).
fn receive(c: &mut Raw, n: usize) -> Vec<(Position, Vec<u8>)> {
    let mut got = Vec::new();
    let until = Instant::now() + Duration::from_secs(5);
    while got.len() < n && Instant::now() < until {
        if let Ok(Some(f)) = c.next(Duration::from_millis(100)) {
            if f.command.r#type() == Type::Message {
                let id = f.command.message.unwrap().message_id;
                got.push((
                    Position::new(id.ledger_id, id.entry_id),
                    f.payload.unwrap().body().to_vec(),
                ));
            }
        }
    }
    got
}

#[test]
fn entries_subscriptions_and_acks_survive_a_restart() {
    let dir = scratch("restart");
    let d = dir.to_string_lossy().into_owned();
    let first: Vec<(Position, Vec<u8>)>;
    {
        let b = start_broker(&["--data-dir", &d]);
        let mut c = subscribe(&b, "s", SubType::Shared);
        produce(&b, TOPIC, 10, 2);
        c.send(&wire::commands::flow(1, 100));
        first = receive(&mut c, 10);
        assert_eq!(first.len(), 10);
        for (p, _) in &first[..4] {
            c.send(&wire::commands::ack(1, wire::convert::message_id(*p), None));
        }
        c.send(&wire::commands::ping());
        c.expect(Type::Pong);
        b.shutdown(Duration::from_secs(5));
    }
    {
        let b = start_broker(&["--data-dir", &d]);
        let mut c = subscribe(&b, "s", SubType::Shared);
        c.send(&wire::commands::flow(1, 100));
        let again = receive(&mut c, 6);
        assert_eq!(
            again,
            first[4..].to_vec(),
            "the unacked six come back, same ids and bytes"
        );
        // New entries go to a new ledger id: no position is reused.
        produce(&b, TOPIC, 1, 1);
        let new = receive(&mut c, 1);
        assert_eq!(new.len(), 1);
        assert!(new[0].0.ledger_id > first[9].0.ledger_id);
        // A subscription created before the restart keeps its type: Key_Shared is refused.
        let mut k = Raw::connected(&b);
        k.send(&wire::commands::subscribe(
            TOPIC,
            "s",
            5,
            5,
            SubType::KeyShared,
            None,
            InitialPosition::Earliest,
        ));
        k.expect(Type::Error);
        b.shutdown(Duration::from_secs(5));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn retention_removes_acknowledged_ledgers() {
    let dir = scratch("retention");
    let d = dir.to_string_lossy().into_owned();
    let b = start_broker(&[
        "--data-dir",
        &d,
        "--entries-per-ledger",
        "5",
        "--sync",
        "interval",
    ]);
    let mut c = subscribe(&b, "s", SubType::Shared);
    produce(&b, TOPIC, 20, 3);
    c.send(&wire::commands::flow(1, 100));
    let got = receive(&mut c, 20);
    assert_eq!(got.len(), 20);
    let ledgers: BTreeSet<u64> = got.iter().map(|(p, _)| p.ledger_id).collect();
    assert_eq!(ledgers.len(), 4);
    for (p, _) in &got {
        c.send(&wire::commands::ack(1, wire::convert::message_id(*p), None));
    }
    let topic_dir = std::fs::read_dir(dir.join("topics"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let logs = || {
        std::fs::read_dir(&topic_dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".log"))
            })
            .count()
    };
    assert_eq!(logs(), 4);
    let until = Instant::now() + Duration::from_secs(10);
    while logs() > 1 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(logs(), 1, "only the ledger being written stays");
    b.shutdown(Duration::from_secs(5));
    let _ = std::fs::remove_dir_all(&dir);
}
