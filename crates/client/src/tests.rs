//! Unit tests: a script helper (`check`), per-behaviour tests, a fake broker and seeded
//! reference-model comparisons.

mod broker;
mod chunking;
mod model;
mod ordered;
mod permits;
mod timers;

use std::fmt::Write as _;

use crate::{BatchInfo, ChunkInfo, Command, Consumer, ConsumerConfig, IncomingMessage, MessageId};

/// Ledger used by every scripted message.
pub(crate) const L: u64 = 1;

pub(crate) fn id(e: u64) -> MessageId {
    MessageId::new(L, e)
}

pub(crate) fn msg(epoch: u64, e: u64, key: Option<&str>) -> IncomingMessage {
    IncomingMessage {
        epoch,
        id: id(e),
        key: key.map(|k| k.as_bytes().to_vec()),
        payload: format!("m{e}").into_bytes(),
        ..IncomingMessage::default()
    }
}

pub(crate) fn consumer(cfg: ConsumerConfig) -> Consumer {
    match Consumer::new(cfg) {
        Ok(c) => c,
        Err(e) => panic!("test config rejected: {e}"),
    }
}

pub(crate) fn drain(c: &mut Consumer) -> Vec<Command> {
    std::iter::from_fn(|| c.poll_command()).collect()
}

pub(crate) fn fmt_cmd(cmd: &Command) -> String {
    fn entries(es: &[crate::RedeliverEntry]) -> String {
        es.iter()
            .map(|e| {
                if e.acked_indexes.is_empty() {
                    e.entry.to_string()
                } else {
                    format!("{}[acked {:?}]", e.entry, e.acked_indexes)
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
    match cmd {
        Command::Flow(n) => format!("flow {n}"),
        Command::Ack(ids) => format!(
            "ack {}",
            ids.iter()
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        ),
        Command::RedeliverUnacked(es) => format!("redeliver {}", entries(es)),
        Command::Nack { entries: es, delay } => format!("nack delay={delay} {}", entries(es)),
        Command::Release(es) => format!("release {}", entries(es)),
    }
}

fn parse_id(s: &str) -> MessageId {
    match s.split_once('#') {
        Some((e, i)) => MessageId::batched(L, num(e), num(i) as u32),
        None => id(num(s)),
    }
}

fn num(s: &str) -> u64 {
    match s.parse() {
        Ok(n) => n,
        Err(_) => panic!("bad number in script: {s:?}"),
    }
}

fn frac(s: &str) -> (u32, u32) {
    match s.split_once('/') {
        Some((a, b)) => (num(a) as u32, num(b) as u32),
        None => panic!("expected a/b, got {s:?}"),
    }
}

/// Runs a script against a consumer and returns a transcript: each input line, then the
/// commands it produced and what the application got.
///
/// Lines: `connect`, `at T`, `push E[#I] [key=K] [redel=N] [batch=I/S] [chunk=U:I/N] [pub=T]
/// [epoch=N]`, `recv` (one), `recv*` (until nothing), `ack ID`, `nack ID`, `timer`,
/// `dropped ID`, `stats`; `#` starts a comment line.
pub(crate) fn check(cfg: ConsumerConfig, script: &str) -> String {
    let mut c = consumer(cfg);
    let mut now = 0u64;
    let mut epoch = 0u64;
    let mut out = String::new();
    for line in script.lines().map(str::trim) {
        if line.is_empty() || line.starts_with("# ") {
            continue;
        }
        let _ = writeln!(out, "> {line}");
        let mut words = line.split_whitespace();
        let verb = words.next().unwrap_or_default();
        let args: Vec<&str> = words.collect();
        match verb {
            "connect" => {
                epoch = c.connect(now);
                let _ = writeln!(out, "  epoch {epoch}");
            }
            "at" => now = num(args[0]),
            "push" => {
                let mid = parse_id(args[0]);
                let mut m = IncomingMessage {
                    epoch,
                    id: mid,
                    payload: format!("[{mid}]").into_bytes(),
                    ..IncomingMessage::default()
                };
                for a in &args[1..] {
                    let Some((k, v)) = a.split_once('=') else {
                        panic!("bad push arg {a:?}")
                    };
                    match k {
                        "key" => m.key = Some(v.as_bytes().to_vec()),
                        "redel" => m.redelivery_count = num(v) as u32,
                        "pub" => m.publish_time = num(v),
                        "epoch" => m.epoch = num(v),
                        "batch" => {
                            let (index, size) = frac(v);
                            m.batch = Some(BatchInfo { index, size });
                        }
                        "chunk" => {
                            let Some((u, f)) = v.split_once(':') else {
                                panic!("bad chunk {v:?}")
                            };
                            let (chunk_id, num_chunks) = frac(f);
                            m.chunk = Some(ChunkInfo {
                                uuid: u.to_string(),
                                chunk_id,
                                num_chunks,
                                total_size: 0,
                            });
                        }
                        _ => panic!("unknown push arg {k}"),
                    }
                }
                if let Err(e) = c.on_message(now, m) {
                    let _ = writeln!(out, "  err: {e}");
                }
            }
            "recv" | "recv*" => loop {
                match c.receive(now) {
                    Some(d) => {
                        let key = d
                            .key
                            .as_deref()
                            .map(|k| String::from_utf8_lossy(k).into_owned())
                            .unwrap_or_else(|| "-".into());
                        let _ = writeln!(
                            out,
                            "  got {} key={key} redel={} payload={}",
                            d.id,
                            d.redelivery_count,
                            String::from_utf8_lossy(&d.payload)
                        );
                        if verb == "recv" {
                            for cmd in drain(&mut c) {
                                let _ = writeln!(out, "  {}", fmt_cmd(&cmd));
                            }
                            break;
                        }
                    }
                    None => {
                        let _ = writeln!(out, "  none");
                        break;
                    }
                }
            },
            "ack" => {
                if let Err(e) = c.ack(now, parse_id(args[0])) {
                    let _ = writeln!(out, "  err: {e}");
                }
            }
            "nack" => {
                if let Err(e) = c.nack(now, parse_id(args[0])) {
                    let _ = writeln!(out, "  err: {e}");
                }
            }
            "timer" => {
                let _ = writeln!(out, "  next_timer {:?}", c.next_timer());
                c.on_timer(now);
            }
            "dropped" => {
                let known = c.on_dropped_by_broker(now, parse_id(args[0]).entry());
                let _ = writeln!(out, "  known {known}");
            }
            "stats" => {
                let s = c.stats();
                let _ = writeln!(
                    out,
                    "  queued={} outstanding={} pending_chunked={} held_keys={} permits_to_return={} released={} out_of_order_acks={}",
                    s.queued, s.outstanding, s.pending_chunked, s.held_keys, s.permits_to_return, s.released, s.out_of_order_acks
                );
            }
            other => panic!("unknown script verb {other:?}"),
        }
        for cmd in drain(&mut c) {
            let _ = writeln!(out, "  {}", fmt_cmd(&cmd));
        }
    }
    out
}

/// Seeded generator for the model tests (SplitMix64).
pub(crate) struct SplitMix64(pub(crate) u64);

impl SplitMix64 {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

#[test]
fn config_is_validated() {
    use crate::{Backoff, ConfigError};
    let bad = |f: fn(&mut ConsumerConfig)| {
        let mut cfg = ConsumerConfig::default();
        f(&mut cfg);
        Consumer::new(cfg).err()
    };
    assert_eq!(
        bad(|c| c.ack_timeout = Some(999)),
        Some(ConfigError::AckTimeoutTooSmall(999))
    );
    assert_eq!(
        bad(|c| c.ack_timeout_tick = 0),
        Some(ConfigError::ZeroAckTimeoutTick)
    );
    assert_eq!(
        bad(|c| c.nack_delay = 99),
        Some(ConfigError::NackDelayTooSmall(99))
    );
    assert_eq!(
        bad(|c| c.nack_backoff = Some(Backoff::Exponential {
            min: 500,
            max: 100,
            multiplier: 2
        })),
        Some(ConfigError::InvalidBackoff("min above max"))
    );
    assert_eq!(
        bad(|c| c.nack_backoff = Some(Backoff::Exponential {
            min: 100,
            max: 100,
            multiplier: 0
        })),
        Some(ConfigError::InvalidBackoff("zero multiplier"))
    );
    assert_eq!(
        bad(|c| c.nack_backoff = Some(Backoff::Fixed(5))),
        Some(ConfigError::InvalidBackoff("fixed delay below 100 ms"))
    );
    assert_eq!(
        bad(|c| c.nack_precision_bits = 33),
        Some(ConfigError::PrecisionBitsTooLarge(33))
    );
    assert_eq!(
        bad(|c| c.max_pending_chunked_messages = 0),
        Some(ConfigError::ZeroMaxPendingChunked)
    );
    assert_eq!(
        bad(|c| c.max_unacked_per_key = Some(0)),
        Some(ConfigError::ZeroMaxUnackedPerKey)
    );
    assert_eq!(bad(|c| c.ack_timeout = Some(1000)), None);
    assert_eq!(bad(|_| {}), None);
}

#[test]
fn malformed_messages_are_rejected_with_their_permit_returned() {
    let out = check(
        ConsumerConfig {
            receiver_queue_size: 2,
            ..ConsumerConfig::default()
        },
        "connect
         push 1 chunk=u:3/3
         push 2 chunk=:0/2
         push 3 chunk=u:0/0
         push 4#5 batch=5/5
         push 5#1 batch=2/3
         push 6 batch=0/1
         push 7#0 chunk=u:0/2 batch=0/1
         stats",
    );
    insta::assert_snapshot!(out);
}

/// A redelivered batch entry whose indexes 0 and 2 were acked before (by this or another
/// consumer, as the broker's `ack_set` says): the application gets only 1, 3 and 4, their
/// permits come back, and acking those three sends the whole-entry ack.
#[test]
fn already_acked_batch_indexes_are_skipped_and_count_as_acked() {
    let mut c = consumer(ConsumerConfig::default());
    let epoch = c.connect(0);
    let _ = drain(&mut c);
    for i in 0..5u32 {
        let m = IncomingMessage {
            id: MessageId::batched(L, 7, i),
            batch: Some(BatchInfo { index: i, size: 5 }),
            already_acked: i == 0 || i == 2,
            ..msg(epoch, 7, Some("k"))
        };
        c.on_message(0, m).unwrap();
    }
    let mut got = Vec::new();
    while let Some(d) = c.receive(0) {
        got.push(d);
    }
    let idx: Vec<u32> = got.iter().map(|d| d.batch.unwrap().index).collect();
    assert_eq!(
        idx,
        [1, 3, 4],
        "acked indexes are not handed to the application"
    );
    assert_eq!(c.stats().dropped_already_acked, 2);
    for d in &got {
        c.ack(0, d.id).unwrap();
    }
    let acks: Vec<String> = drain(&mut c)
        .iter()
        .map(fmt_cmd)
        .filter(|s| s.starts_with("ack"))
        .collect();
    let last = acks.last().and_then(|a| a.split(' ').next_back());
    assert_eq!(
        last,
        Some("1:7"),
        "the last id acked is the whole entry: {acks:?}"
    );
}
