//! CL1: the `client` consumer's per-message cost (no Java baseline and no goal; see
//! docs/BENCHMARKS.md).
//!
//! 1,000,000 single-entry messages over 10,000 keys (SplitMix64 seed 44), receive queue 1000.
//! The messages are built before the clock starts. Timed: the broker side pushes 100 messages,
//! the application receives and acks until the queue is empty, every command is drained (the
//! `Flow`s are summed for the check). Checks: every message is delivered and acked once, and
//! the permits the consumer returned add up to the messages it took.
//! * `CL1`: `ordered_nack: true` (every message goes through the key gate's bookkeeping).
//! * `CL1-pulsar`: `ordered_nack: false`.

use std::time::Instant;

use client::{Command, Consumer, ConsumerConfig, IncomingMessage, MessageId};

use super::rng::SplitMix64;
use super::Workload;

const N: u64 = 1_000_000;
const KEYS: u64 = 10_000;
const QUEUE: u32 = 1000;
const PUSH: u64 = 100;

fn messages() -> Vec<IncomingMessage> {
    let mut rng = SplitMix64::new(44);
    let keys: Vec<Vec<u8>> = (0..KEYS).map(|k| format!("key-{k}").into_bytes()).collect();
    (0..N)
        .map(|i| IncomingMessage {
            epoch: 1,
            id: MessageId::new(i / 10_000, i % 10_000),
            key: Some(keys[(rng.next() % KEYS) as usize].clone()),
            publish_time: i,
            ..IncomingMessage::default()
        })
        .collect()
}

fn round(ordered: bool) -> Result<f64, String> {
    let msgs = messages();
    let mut c = Consumer::new(ConsumerConfig {
        receiver_queue_size: QUEUE,
        ordered_nack: ordered,
        ..ConsumerConfig::default()
    })
    .map_err(|e| e.to_string())?;
    let epoch = c.connect(0);
    if epoch != 1 {
        return Err(format!("epoch {epoch}, want 1"));
    }
    let mut flowed = 0u64;
    let mut acks = 0u64;
    let mut it = msgs.into_iter();
    let start = Instant::now();
    loop {
        let mut pushed = 0;
        for m in it.by_ref().take(PUSH as usize) {
            c.on_message(0, m).map_err(|e| e.to_string())?;
            pushed += 1;
        }
        while let Some(d) = c.receive(0) {
            c.ack(0, d.id).map_err(|e| e.to_string())?;
        }
        while let Some(cmd) = c.poll_command() {
            match cmd {
                Command::Flow(n) => flowed += u64::from(n),
                Command::Ack(ids) => acks += ids.len() as u64,
                other => return Err(format!("unexpected command {other:?}")),
            }
        }
        if pushed == 0 {
            break;
        }
    }
    let ns = start.elapsed().as_nanos() as f64;
    let s = c.stats();
    if s.delivered != N || acks != N {
        return Err(format!("delivered {}, acked {acks}, want {N}", s.delivered));
    }
    let returned = flowed - u64::from(QUEUE) + u64::from(s.permits_to_return);
    if returned != N {
        return Err(format!("permits returned {returned}, want {N}"));
    }
    Ok(ns / N as f64)
}

/// The client rows.
pub fn workloads() -> Vec<Workload> {
    vec![
        Workload::lower("CL1", "ns/message", None, None, || round(true)),
        Workload::lower("CL1-pulsar", "ns/message", None, None, || round(false)),
    ]
}
