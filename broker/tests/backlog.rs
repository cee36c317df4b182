//! A backlog larger than the read cache lives on disk: the broker binary, with `--data-dir` and
//! a 16 MiB read cache, takes 200 MiB of messages for a subscription with no consumer, and
//! its resident memory stays under 128 MiB while the backlog builds and while a consumer then
//! reads all of it back, in order, from the log files. The entries' metadata does not stay in
//! memory either (a few bytes an entry do): 20,000,000 messages of 100 bytes fit under 256 MiB
//! (`BACKLOG_MESSAGES=20000000 BACKLOG_SIZE=100 BACKLOG_RSS_LIMIT_MIB=256`).
//!
//! `BACKLOG_MESSAGES`, `BACKLOG_SIZE` (bytes) and `BACKLOG_RSS_LIMIT_MIB` change the run (a
//! release build, `cargo test --release -p broker --test backlog -- --nocapture`, for large
//! ones); it prints what it measured.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{metadata, Raw};
use wire::proto::{base_command::Type, command_subscribe};

const TOPIC: &str = "persistent://public/default/backlog";
/// `name` from the environment, or `default`.
fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The broker binary in its own process, killed when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Process {
    fn rss_mib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.0.id())).unwrap();
        let kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS in /proc/<pid>/status");
        kb / 1024
    }
}

fn start(dir: &std::path::Path) -> (Process, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_broker"))
        .args(["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
        .args(["--sync", "interval", "--read-cache-mb", "16", "--data-dir"])
        .arg(dir)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the broker binary starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("pulsar://"), "first line {line:?}");
    (Process(child), line.trim().to_owned())
}

#[test]
fn a_backlog_larger_than_the_cache_is_read_back_from_disk() {
    let messages = setting("BACKLOG_MESSAGES", 20_000);
    let size = setting("BACKLOG_SIZE", 10 * 1024) as usize;
    let limit = setting("BACKLOG_RSS_LIMIT_MIB", 128);
    let dir = std::env::temp_dir().join(format!("broker-backlog-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (broker, url) = start(&dir);
    let subscribe = |c: &mut Raw| {
        c.send(&wire::commands::subscribe(
            TOPIC,
            "s",
            1,
            1,
            command_subscribe::SubType::Shared,
            None,
            command_subscribe::InitialPosition::Earliest,
        ));
        c.expect(Type::Success);
    };
    // The subscription exists; its consumer leaves.
    let mut c = Raw::connected_url(&url);
    subscribe(&mut c);
    c.send(&wire::commands::close_consumer(1, 2));
    c.expect(Type::Success);

    let mut p = Raw::connected_url(&url);
    let name = common::open_producer(&mut p, TOPIC);
    let body = vec![b'x'; size];
    let mut peak = broker.rss_mib();
    const WINDOW: u64 = 100;
    for i in 0..messages {
        p.send_message(
            &wire::commands::send(1, i, 1),
            &metadata(&name, i, None),
            &body,
        );
        if i >= WINDOW {
            p.expect(Type::SendReceipt);
        }
        if i % 1000 == 0 {
            peak = peak.max(broker.rss_mib());
        }
    }
    for _ in 0..WINDOW {
        p.expect(Type::SendReceipt);
    }
    let built = broker.rss_mib().max(peak);
    eprintln!(
        "{messages} messages of {size} bytes: {built} MiB resident (peak) after the backlog built"
    );
    assert!(
        built < limit,
        "{built} MiB resident with {} MiB of backlog",
        (messages * size as u64) >> 20
    );

    // A new connection: the first one sat unread while the backlog built, and the broker's
    // keep-alive closes a connection that answers no PING for two intervals.
    drop(c);
    let mut c = Raw::connected_url(&url);
    subscribe(&mut c);
    let draining = std::time::Instant::now();
    let mut next = 0u64;
    let mut last = None;
    while next < messages {
        c.send(&wire::commands::flow(1, 500));
        let mut got = 0;
        // Acked 500 at a time in one ACK (as clients group acks), so the broker, not this
        // client, sets the pace.
        let mut acks = Vec::with_capacity(500);
        while got < 500 && next < messages {
            let f = c
                .next(Duration::from_secs(30))
                .unwrap()
                .expect("a MESSAGE within 30 s");
            let Some(m) = f.command.message else { continue };
            let pos = cursor::Position::new(m.message_id.ledger_id, m.message_id.entry_id);
            assert!(last < Some(pos), "in order: {pos} after {last:?}");
            let payload = f.payload.expect("a payload");
            assert_eq!(
                payload.metadata.sequence_id, next,
                "message {next} in order"
            );
            assert_eq!(payload.body().len(), size);
            acks.push(m.message_id);
            last = Some(pos);
            next += 1;
            got += 1;
        }
        c.send(&wire::commands::ack_ids(1, acks));
        peak = peak.max(broker.rss_mib());
    }
    eprintln!(
        "resident while it drained: {peak} MiB (peak); drained in {:.1} s",
        draining.elapsed().as_secs_f64()
    );
    assert!(
        peak < limit,
        "{peak} MiB resident while the backlog drained"
    );
    drop(broker);
    let _ = std::fs::remove_dir_all(&dir);
}
