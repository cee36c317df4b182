//! Writes the starting corpus of every fuzz target into `fuzz/corpus/<target>/`
//! (`cargo run --manifest-path fuzz/Cargo.toml --example seeds`): the captured client frames and frames of our encoders, admin
//! requests for every path, a data directory and a cursor file as the broker writes them,
//! typical command lines, and the shipped simulator scenarios. Existing files are kept.

use std::fs;
use std::path::{Path, PathBuf};

use cursor::{EntryMeta, FileStore, InMemoryLedger, Ledger, ManagedCursor, Position};
use kod_fuzz::join_parts;
use wire::proto::{command_subscribe, KeySharedMeta, MessageMetadata};
use wire::{commands, convert, encode_command, encode_with_payload, encode_with_section};

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

fn frames(repo: &Path) -> Vec<Vec<u8>> {
    let golden = fs::read_to_string(repo.join("crates/wire/tests/frames/produce-frames.hex"))
        .expect("the golden frames");
    let mut out: Vec<Vec<u8>> = golden
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| unhex(l.trim()))
        .collect();
    let meta = MessageMetadata {
        producer_name: "p-1".into(),
        sequence_id: 9,
        publish_time: 1_764_547_200_000,
        num_messages_in_batch: Some(5),
        uuid: Some("p-1-9".into()),
        chunk_id: Some(0),
        num_chunks_from_msg: Some(2),
        total_chunk_msg_size: Some(10),
        partition_key: Some("k".into()),
        ..Default::default()
    };
    let mut send = Vec::new();
    encode_with_payload(&commands::send(2, 9, 5), &meta, b"0123456789", &mut send);
    let section = wire::decode_frame(&send).unwrap().payload.unwrap().section;
    let id = convert::message_id(Position::new(3, 4));
    let mut msg = Vec::new();
    encode_with_section(&commands::message(1, id.clone(), 2, Some(vec![26, -1])), &section, &mut msg);
    out.push(msg);
    out.push(send);
    for cmd in [
        commands::subscribe(
            "persistent://public/default/t",
            "sub",
            1,
            2,
            command_subscribe::SubType::KeyShared,
            Some(KeySharedMeta {
                key_shared_mode: 1,
                hash_ranges: vec![wire::proto::IntRange { start: 0, end: 32767 }],
                allow_out_of_order_delivery: Some(false),
            }),
            command_subscribe::InitialPosition::Earliest,
        ),
        commands::ack(1, id.clone(), Some(vec![26])),
        commands::redeliver_unacknowledged(1, vec![id.clone(), id]),
        commands::flow(1, 1000),
        commands::ping(),
    ] {
        let mut b = Vec::new();
        encode_command(&cmd, &mut b);
        out.push(b);
    }
    // Two frames back to back, as a socket delivers them.
    let two = [out[0].clone(), out[1].clone()].concat();
    out.push(two);
    out
}

fn admin() -> Vec<Vec<u8>> {
    let t = "/admin/v2/persistent/public/default/t";
    let mut reqs: Vec<String> = [
        "GET / HTTP/1.1".to_string(),
        "GET /metrics HTTP/1.1".into(),
        "GET /admin/v2/clusters HTTP/1.1".into(),
        "GET /admin/v2/persistent/public/default HTTP/1.1".into(),
        "GET /admin/v2/persistent/public/default/partitioned HTTP/1.1".into(),
        "GET /admin/v2/non-persistent/public/default HTTP/1.1".into(),
        "PUT /admin/v2/persistent/public/default/new%20topic HTTP/1.1".into(),
        format!("PUT {t}/partitions HTTP/1.1"),
        format!("GET {t}/stats HTTP/1.1"),
        format!("GET {t}/internalStats HTTP/1.1"),
        format!("GET {t}/subscriptions HTTP/1.1"),
        format!("POST {t}/subscription/ks/skip/2 HTTP/1.1"),
        format!("POST {t}/subscription/sh/skip_all HTTP/1.1"),
        format!("POST {t}/subscription/ks/expireMessages/0 HTTP/1.1"),
        format!("POST {t}/subscription/ex/resetcursor/1700000000003 HTTP/1.1"),
        format!("GET {t}/subscription/ks/whyBlocked?key=a HTTP/1.1"),
        format!("GET {t}/subscription/ks/whyBlocked?hash=7 HTTP/1.1"),
        format!("GET {t}/subscription/ks/whyBlocked?key=k%201 HTTP/1.1"),
    ]
    .into_iter()
    .map(|l| format!("{l}\r\nHost: localhost\r\n\r\n"))
    .collect();
    let body = r#"{"ledgerId":1,"entryId":2,"isExcluded":true}"#;
    reqs.push(format!(
        "POST {t}/subscription/ks/resetcursor HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    ));
    reqs.into_iter().map(String::into_bytes).collect()
}

fn data_dir() -> Vec<Vec<u8>> {
    let dir = kod_fuzz::scratch("seed-data-dir");
    broker::fuzzing::write_sample_data_dir(&dir).expect("a sample data directory");
    let topic = dir
        .join("topics")
        .join(broker::fuzzing::topic_dir_name(broker::fuzzing::ADMIN_TOPIC));
    let mut ledgers: Vec<PathBuf> = fs::read_dir(&topic)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    ledgers.sort();
    let read = |p: &Path| fs::read(p).unwrap_or_default();
    let l1 = ledgers.first().map(|p| read(p)).unwrap_or_default();
    let json = read(&topic.join("subscriptions/s.json"));
    let cur = read(&topic.join("subscriptions/s.cursor"));
    let _ = fs::remove_dir_all(&dir);
    vec![
        join_parts(&[&l1, b"", &json, &cur]),
        join_parts(&[&l1, &l1[..l1.len() / 2]]),
        join_parts(&[&l1]),
    ]
}

fn cursor_file() -> Vec<Vec<u8>> {
    let dir = kod_fuzz::scratch("seed-cursor");
    let path = dir.join("s.cursor");
    let mut ledger = InMemoryLedger::new(4);
    for i in 0..12u64 {
        ledger.append(EntryMeta::simple(i, 10));
    }
    let mut c = ManagedCursor::new("s", &ledger, FileStore::open(&path).unwrap());
    let mut out = Vec::new();
    c.persist().unwrap();
    out.push(fs::read(&path).unwrap());
    for p in [Position::new(1, 0), Position::new(1, 2), Position::new(2, 1), Position::new(3, 3)] {
        c.ack(&ledger, p).unwrap();
    }
    c.persist().unwrap();
    out.push(fs::read(&path).unwrap());
    let _ = fs::remove_dir_all(&dir);
    out
}

fn flags() -> Vec<Vec<u8>> {
    let lines: [&[&str]; 5] = [
        &["--listen", "127.0.0.1:6650", "--admin", "127.0.0.1:8080"],
        &["--data-dir", "/tmp/x", "--sync", "always", "--entries-per-ledger", "1000"],
        &["--legacy", "mark-delete-cleanup,orphan-chunk-replay", "--check-frames"],
        &["--max-message-size=5242880", "--key-shared-max-unacked-per-key", "1"],
        &["--delayed-delivery-enabled", "true", "--delayed-delivery-tick-ms", "1000", "--delayed-delivery-strict", "false"],
    ];
    lines
        .iter()
        .map(|l| join_parts(&l.iter().map(|a| a.as_bytes()).collect::<Vec<_>>()))
        .collect()
}

fn scenarios(repo: &Path) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for e in fs::read_dir(repo.join("tests/scenarios")).unwrap().flatten() {
        if e.path().extension().is_some_and(|x| x == "sim") {
            out.push(fs::read(e.path()).unwrap());
        }
    }
    out
}

fn main() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let sets: [(&str, Vec<Vec<u8>>); 6] = [
        ("frame", frames(&repo)),
        ("admin_http", admin()),
        ("data_dir", data_dir()),
        ("cursor_store", cursor_file()),
        ("broker_flags", flags()),
        ("scenario", scenarios(&repo)),
    ];
    for (target, seeds) in sets {
        let dir = repo.join("fuzz/corpus").join(target);
        fs::create_dir_all(&dir).unwrap();
        for (i, s) in seeds.iter().enumerate() {
            fs::write(dir.join(format!("seed-{i:03}")), s).unwrap();
        }
        println!("{target}: {} seeds", seeds.len());
    }
}
