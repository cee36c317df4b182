//! Seeded random operation sequences compared with plain reference models.
//!
//! * Flow permits (Pulsar mode, plain and chunked messages, nacks, reconnects): a model with a
//!   `VecDeque` queue, its own chunk bookkeeping and a permit accumulator predicts every `Flow`
//!   command and every delivery; the permit invariant `broker permits + queued + accumulated ==
//!   queue size` is checked after every step.
//! * The key gate (ordered mode, against the fake broker with the hold): the application is
//!   never handed a message of a key while an earlier message of that key is nacked and not yet
//!   acked, the permit invariant holds, and every message is eventually acked. On some seeds
//!   the broker gives re-sent nacked messages to another consumer (a key move) that acks them:
//!   the client's hold must end and the run must still drain. The same checker run on Pulsar
//!   mode must find violations, so it can fail.
//! * Zero queue with batch entries (a broker that charges whole entries while the balance is
//!   positive): every `Flow` brings the balance back to exactly 1 and everything drains. With
//!   `Flow(1)` only (the old client) it fails on the first batch.
//!
//! A failure prints the seed and the operations so far.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use super::broker::Broker;
use super::{consumer, SplitMix64, L};
use crate::{ChunkInfo, Command, Consumer, ConsumerConfig, IncomingMessage, MessageId};

const SEEDS: u64 = 300;

/// A broker that sends stored entries smallest first and honours permits and redeliveries.
struct EntryBroker {
    epoch: u64,
    permits: i64,
    store: BTreeMap<u64, IncomingMessage>,
    ready: BTreeSet<u64>,
}

impl EntryBroker {
    fn handle(&mut self, cmd: &Command) {
        match cmd {
            Command::Flow(n) => self.permits += i64::from(*n),
            Command::Ack(ids) => {
                for i in ids {
                    self.store.remove(&i.entry_id);
                    self.ready.remove(&i.entry_id);
                }
            }
            Command::RedeliverUnacked(es) => {
                for e in es {
                    if let Some(m) = self.store.get_mut(&e.entry.entry_id) {
                        m.redelivery_count += 1;
                        self.ready.insert(e.entry.entry_id);
                    }
                }
            }
            Command::Nack { .. } | Command::Release(_) => {
                panic!("Pulsar mode sent an ordered-mode command: {cmd:?}")
            }
        }
    }
}

/// The reference model of the consumer's queue and permits.
#[derive(Default)]
struct PermitModel {
    size: u32,
    queue: VecDeque<MessageId>,
    acc: u32,
    flows: Vec<u32>,
    /// uuid → (last chunk id, ids so far)
    ctx: HashMap<String, (u32, Vec<MessageId>)>,
}

impl PermitModel {
    fn give(&mut self, n: u32) {
        self.acc += n;
        if self.acc >= (self.size / 2).max(1) {
            self.flows.push(self.acc);
            self.acc = 0;
        }
    }

    fn on_entry(&mut self, m: &IncomingMessage) {
        let Some(c) = &m.chunk else {
            self.queue.push_back(m.id);
            return;
        };
        if c.chunk_id == 0 {
            if c.num_chunks == 1 {
                self.queue.push_back(m.id);
            } else {
                self.ctx.insert(c.uuid.clone(), (0, vec![m.id]));
                self.give(1);
            }
            return;
        }
        match self.ctx.get_mut(&c.uuid) {
            Some((last, ids)) if c.chunk_id == *last + 1 => {
                *last = c.chunk_id;
                ids.push(m.id);
                if c.chunk_id + 1 == c.num_chunks {
                    self.ctx.remove(&c.uuid);
                    self.queue.push_back(m.id);
                } else {
                    self.give(1);
                }
            }
            Some((last, _)) if c.chunk_id <= *last => self.give(1),
            _ => {
                self.ctx.remove(&c.uuid);
                self.give(1);
            }
        }
    }
}

#[test]
fn flow_permits_match_the_reference_model() {
    for seed in 0..SEEDS {
        let mut rng = SplitMix64(seed);
        let size = [1u32, 2, 5, 10][rng.below(4) as usize];
        let mut c = consumer(ConsumerConfig {
            receiver_queue_size: size,
            nack_delay: 100,
            nack_precision_bits: 0,
            max_pending_chunked_messages: 1000,
            expire_incomplete_chunked_after: None,
            ..ConsumerConfig::default()
        });
        let mut b = EntryBroker {
            epoch: 0,
            permits: 0,
            store: BTreeMap::new(),
            ready: BTreeSet::new(),
        };
        let mut m = PermitModel {
            size,
            ..PermitModel::default()
        };
        let mut hands: Vec<MessageId> = Vec::new();
        let mut acked: BTreeSet<MessageId> = BTreeSet::new();
        let mut next_entry = 0u64;
        let mut now = 0u64;
        let mut ops: Vec<String> = Vec::new();
        let mut got_flows: Vec<u32> = Vec::new();
        for step in 0..400 {
            let op = rng.below(100);
            let (flows_before, label);
            flows_before = got_flows.len();
            if step == 0 || op < 3 {
                label = "connect".to_string();
                b.epoch = c.connect(now);
                b.permits = 0;
                b.ready.extend(b.store.keys().copied());
                m.queue.clear();
                m.ctx.clear();
                m.acc = 0;
                m.flows.push(size);
            } else if op < 25 {
                // Publish a plain message or a chunked one (2..=3 chunks).
                let chunks = if rng.below(4) == 0 {
                    2 + rng.below(2) as u32
                } else {
                    0
                };
                label = format!("publish {next_entry} chunks={chunks}");
                let uuid = format!("u{next_entry}");
                for i in 0..chunks.max(1) {
                    let e = next_entry;
                    next_entry += 1;
                    let msg = IncomingMessage {
                        epoch: 0,
                        id: MessageId::new(L, e),
                        chunk: (chunks > 0).then(|| ChunkInfo {
                            uuid: uuid.clone(),
                            chunk_id: i,
                            num_chunks: chunks,
                            total_size: chunks,
                        }),
                        ..IncomingMessage::default()
                    };
                    b.store.insert(e, msg);
                    b.ready.insert(e);
                }
            } else if op < 55 {
                label = "send".to_string();
                if b.permits > 0 {
                    if let Some(e) = b.ready.pop_first() {
                        if let Some(stored) = b.store.get(&e) {
                            let msg = IncomingMessage {
                                epoch: b.epoch,
                                ..stored.clone()
                            };
                            b.permits -= 1;
                            m.on_entry(&msg);
                            if let Err(err) = c.on_message(now, msg) {
                                panic!("seed {seed}: rejected: {err}\nops: {ops:?}");
                            }
                        }
                    }
                }
            } else if op < 75 {
                label = "receive".to_string();
                let got = c.receive(now).map(|d| d.id);
                // Copies of acked messages are dropped (their permit returns).
                while m.queue.front().is_some_and(|f| acked.contains(f)) {
                    m.queue.pop_front();
                    m.give(1);
                }
                let want = m.queue.pop_front();
                if want.is_some() {
                    m.give(1);
                }
                assert_eq!(got, want, "seed {seed}: delivery differs\nops: {ops:?}");
                if let Some(id) = got {
                    if !hands.contains(&id) {
                        hands.push(id);
                    }
                }
            } else if op < 87 {
                label = "ack".to_string();
                if !hands.is_empty() {
                    let id = hands.swap_remove(rng.below(hands.len() as u64) as usize);
                    assert_eq!(c.ack(now, id), Ok(()), "seed {seed}\nops: {ops:?}");
                    acked.insert(id);
                }
            } else if op < 93 {
                label = "nack".to_string();
                if !hands.is_empty() {
                    let id = hands.swap_remove(rng.below(hands.len() as u64) as usize);
                    assert_eq!(c.nack(now, id), Ok(()), "seed {seed}\nops: {ops:?}");
                }
            } else {
                now += 50;
                label = format!("time {now}");
                c.on_timer(now);
            }
            ops.push(label);
            while let Some(cmd) = c.poll_command() {
                if let Command::Flow(n) = cmd {
                    got_flows.push(n);
                }
                b.handle(&cmd);
            }
            assert_eq!(
                got_flows,
                m.flows,
                "seed {seed}: flow commands differ after {:?} (new: {:?})\nops: {ops:?}",
                ops.last(),
                &got_flows[flows_before..]
            );
            let s = c.stats();
            assert_eq!(s.queued, m.queue.len(), "seed {seed}\nops: {ops:?}");
            assert_eq!(s.permits_to_return, m.acc, "seed {seed}\nops: {ops:?}");
            assert_eq!(
                b.permits + s.queued as i64 + i64::from(s.permits_to_return),
                i64::from(size),
                "seed {seed}: permit invariant\nops: {ops:?}"
            );
        }
    }
}

/// Runs one random ordered-nack world; returns the first order violation, if any.
/// Also returns how many nacked messages went to another consumer.
fn gate_world(seed: u64, ordered: bool) -> Result<(crate::ClientStats, usize), String> {
    let mut rng = SplitMix64(seed);
    let size = [2u32, 4, 10][rng.below(3) as usize];
    let max_per_key = [None, Some(1), Some(3)][rng.below(3) as usize];
    let cfg = ConsumerConfig {
        receiver_queue_size: size,
        nack_delay: 100 + 100 * rng.below(5),
        nack_precision_bits: rng.below(6) as u32,
        ordered_nack: ordered,
        max_unacked_per_key: max_per_key,
        ..ConsumerConfig::default()
    };
    let keys = 1 + rng.below(5);
    let mut b = Broker::new(true);
    b.elsewhere_every = [0, 2, 5][rng.below(3) as usize];
    let n = 20 + rng.below(40);
    for e in 0..n {
        let key = if rng.below(10) == 0 {
            None
        } else {
            Some(format!("k{}", rng.below(keys)).into_bytes())
        };
        b.publish(MessageId::new(L, e), key.as_deref());
    }
    let mut c: Consumer = consumer(cfg);
    b.connect(&mut c, 0);
    let mut now = 0u64;
    let mut ops: Vec<String> = Vec::new();
    let mut hands: Vec<(MessageId, Option<Vec<u8>>)> = Vec::new();
    let mut nacked: BTreeMap<Vec<u8>, BTreeSet<MessageId>> = BTreeMap::new();
    let mut gone: BTreeSet<MessageId> = BTreeSet::new();
    let mut reconnects = 0;
    let mut step = 0;
    while !b.msgs.is_empty() {
        step += 1;
        if step > 20_000 {
            return Err(format!(
                "seed {seed}: did not drain: left {:?}, ready {:?}, held {:?}, permits {}, client {:?}\nops: {ops:?}",
                b.msgs, b.ready, b.held, b.permits, c.stats()
            ));
        }
        b.pump(now, &mut c);
        b.send(now, &mut c, 1 + rng.below(3) as usize);
        b.pump(now, &mut c);
        // Nacked messages another consumer took and acked no longer hold their key.
        for id in std::mem::take(&mut b.went_elsewhere) {
            ops.push(format!("elsewhere {id}"));
            for s in nacked.values_mut() {
                s.remove(&id);
            }
            gone.insert(id);
        }
        let s = c.stats();
        if b.permits + s.queued as i64 + i64::from(s.permits_to_return) != i64::from(size) {
            return Err(format!(
                "seed {seed}: permit invariant: broker {} + queued {} + to return {} != {size}\nops: {ops:?}",
                b.permits, s.queued, s.permits_to_return
            ));
        }
        let op = rng.below(100);
        if op < 45 {
            if let Some(d) = c.receive(now) {
                ops.push(format!("recv {}", d.id));
                if let Some(k) = &d.key {
                    if let Some(y) = nacked.get(k).and_then(|s| s.range(..d.id).next()) {
                        return Err(format!(
                            "seed {seed}: order violation: {} handed out while earlier {y} of its key is nacked\nops: {ops:?}",
                            d.id
                        ));
                    }
                }
                if !hands.iter().any(|(i, _)| *i == d.id) {
                    hands.push((d.id, d.key));
                }
            }
        } else if op < 75 {
            if !hands.is_empty() {
                let (id, key) = hands.swap_remove(rng.below(hands.len() as u64) as usize);
                ops.push(format!("ack {id}"));
                if c.ack(now, id).is_err() {
                    return Err(format!("seed {seed}: ack {id} refused\nops: {ops:?}"));
                }
                if let Some(k) = key {
                    if let Some(s) = nacked.get_mut(&k) {
                        s.remove(&id);
                    }
                }
            }
        } else if op < 85 {
            if !hands.is_empty() {
                let (id, key) = hands.swap_remove(rng.below(hands.len() as u64) as usize);
                ops.push(format!("nack {id}"));
                if c.nack(now, id).is_err() {
                    return Err(format!("seed {seed}: nack {id} refused\nops: {ops:?}"));
                }
                // A stale copy (the fake broker re-sends held messages on a reconnect) of a
                // message another consumer acked holds nothing: the broker no longer has it.
                if let (Some(k), false) = (key, gone.contains(&id)) {
                    nacked.entry(k).or_default().insert(id);
                }
            }
        } else if op < 86 && reconnects < 2 {
            reconnects += 1;
            ops.push("reconnect".into());
            b.connect(&mut c, now);
        } else {
            let next = [c.next_timer(), b.next_ready(now)]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(now + 10);
            now = next.max(now + 1).min(now + 200);
            ops.push(format!("time {now}"));
            c.on_timer(now);
        }
    }
    Ok((c.stats(), gone.len()))
}

#[test]
fn key_gate_keeps_per_key_order_and_drains() {
    let (mut nacks, mut released, mut dups, mut reconnects) = (0, 0, 0, 0);
    let mut elsewhere = 0;
    for seed in 0..SEEDS {
        match gate_world(seed, true) {
            Ok((s, gone)) => {
                elsewhere += gone;
                nacks += s.nacks;
                released += s.released;
                dups += s.dropped_already_acked;
                reconnects += u64::from(s.epoch > 1);
            }
            Err(e) => panic!("{e}"),
        }
    }
    // The runs exercise what they claim to.
    assert!(
        nacks > 1000 && released > 1000,
        "nacks {nacks}, released {released}"
    );
    assert!(
        dups > 0 && reconnects > SEEDS / 4,
        "dups {dups}, reconnects {reconnects}"
    );
    assert!(
        elsewhere > 100,
        "nacked messages taken elsewhere: {elsewhere}"
    );
}

#[test]
fn the_order_checker_catches_pulsar_mode() {
    let failing: Vec<u64> = (0..SEEDS)
        .filter(|&s| gate_world(s, false).is_err_and(|e| e.contains("order violation")))
        .collect();
    assert!(
        failing.len() > SEEDS as usize / 10,
        "Pulsar mode should break per-key order on many seeds; it did on {failing:?}"
    );
}

/// One zero-queue world: entries of 1–5 messages (a batch when more than one), a broker that
/// dispatches whole entries while the balance is positive and charges their message count,
/// an application that acks what it gets, and reconnects. Every `Flow` must bring the broker's
/// balance to exactly 1 (one permit out, the batch debt repaid), and everything must drain.
fn zero_queue_world(seed: u64) -> Result<u64, String> {
    let mut rng = SplitMix64(seed);
    let mut c = consumer(ConsumerConfig {
        receiver_queue_size: 0,
        ..ConsumerConfig::default()
    });
    let n = 5 + rng.below(30);
    // entry -> (size, acked indexes)
    let mut store: BTreeMap<u64, (u32, BTreeSet<u32>)> = (0..n)
        .map(|e| (e, (1 + rng.below(5) as u32, BTreeSet::new())))
        .collect();
    let mut ready: BTreeSet<u64> = store.keys().copied().collect();
    let mut permits = 0i64;
    let mut epoch = c.connect(0);
    let mut ops: Vec<String> = Vec::new();
    let mut flows = 0u64;
    for step in 0..20_000u64 {
        if store.is_empty() {
            return Ok(flows);
        }
        while let Some(cmd) = c.poll_command() {
            match cmd {
                Command::Flow(p) => {
                    permits += i64::from(p);
                    flows += 1;
                    ops.push(format!("flow {p}"));
                    if permits != 1 {
                        return Err(format!(
                            "seed {seed}: balance {permits} after a flow, expected 1\nops: {ops:?}"
                        ));
                    }
                }
                Command::Ack(ids) => {
                    for id in ids {
                        match id.batch_index {
                            None => {
                                store.remove(&id.entry_id);
                            }
                            Some(i) => {
                                if let Some((size, acked)) = store.get_mut(&id.entry_id) {
                                    acked.insert(i);
                                    if acked.len() as u32 >= *size {
                                        store.remove(&id.entry_id);
                                    }
                                }
                            }
                        }
                    }
                }
                other => return Err(format!("seed {seed}: unexpected {other:?}\nops: {ops:?}")),
            }
        }
        // The broker dispatches while the balance is positive, charging whole entries.
        while permits > 0 {
            let Some(e) = ready.pop_first() else { break };
            let Some(&(size, _)) = store.get(&e) else {
                continue;
            };
            permits -= i64::from(size);
            ops.push(format!("send {e} x{size}"));
            for i in 0..size {
                let m = if size == 1 {
                    IncomingMessage {
                        epoch,
                        id: MessageId::new(L, e),
                        ..IncomingMessage::default()
                    }
                } else {
                    IncomingMessage {
                        epoch,
                        id: MessageId::batched(L, e, i),
                        batch: Some(crate::BatchInfo { index: i, size }),
                        ..IncomingMessage::default()
                    }
                };
                if let Err(err) = c.on_message(step, m) {
                    return Err(format!("seed {seed}: refused: {err}\nops: {ops:?}"));
                }
            }
        }
        if rng.below(40) == 0 {
            ops.push("reconnect".into());
            epoch = c.connect(step);
            permits = 0;
            ready = store.keys().copied().collect();
            continue;
        }
        if let Some(d) = c.receive(step) {
            ops.push(format!("recv {}", d.id));
            if let Err(err) = c.ack(step, d.id) {
                return Err(format!("seed {seed}: ack refused: {err}\nops: {ops:?}"));
            }
        }
    }
    Err(format!(
        "seed {seed}: did not drain: left {:?}, balance {permits}\nops: {ops:?}",
        store.keys().collect::<Vec<_>>()
    ))
}

#[test]
fn zero_queue_with_batches_keeps_one_permit_out_and_drains() {
    let mut flows = 0;
    for seed in 0..SEEDS {
        match zero_queue_world(seed) {
            Ok(f) => flows += f,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(flows > SEEDS * 10, "the runs exercise flows: {flows}");
}
