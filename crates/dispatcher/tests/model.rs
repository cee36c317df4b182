//! Reference-model comparison over seeded random event sequences (joins, leaves, flows,
//! publishes, acks, nacks, ordered nacks with delays and the client's releases, redeliver-all,
//! skips, time; dead-letter policies).
//!
//! A plain `BTreeMap` model of what each consumer holds is updated from the commands the core
//! emits and the operations the script applies; after every step it is compared with the real
//! thing and these invariants are checked:
//!
//! * no entry is pending on two consumers; on ordered Key_Shared no hash is pending on two
//!   consumers, and nothing is sent while an earlier entry of its hash waits in replay;
//! * no loss: every published position is acked (or at/below mark-delete), pending, in replay
//!   or not yet read;
//! * ordered nack (ordered Key_Shared): a nacked entry is re-sent before any later entry of its
//!   hash is sent to anyone (until it is re-sent, acked — a dead letter — or dropped by a
//!   mark-delete move); parked entries hold their key the same way;
//! * chunks: the first delivery of every chunk of a message goes to the consumer that got its
//!   chunk 0 while that consumer is connected;
//! * accounting: per consumer, permits + parked = granted − sent messages, unacked = sum of its
//!   pending messages; the subscription's unacked is the sum.
//!
//! At the end every run quiesces (consumers for the whole hash space, permits, acks, time) and
//! the backlog must drain: no stall. On failure the seed and the operations are printed. The legacy mark-delete switch must make
//! the hash-exclusivity check fail on some seed: the checker can fail.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::World;
use cursor::{Ledger, Position};
use dispatcher::{DispatcherConfig, KeySharedConfig, KeySharedMode, SubscriptionType};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

#[derive(Default)]
struct Model {
    /// position → (consumer name, hash, messages)
    pending: BTreeMap<Position, (String, u32, u32)>,
    granted: BTreeMap<String, i64>,
    sent: BTreeMap<String, i64>,
    published: BTreeSet<Position>,
    sends_seen: usize,
    /// uuid → consumer that received its chunk 0 last.
    chunk_owner: BTreeMap<String, String>,
    /// Positions sent at least once.
    sent_once: BTreeSet<Position>,
    /// Ordered nacks not yet re-sent: position → hash.
    nacked: BTreeMap<Position, u32>,
}

fn ordered_key_shared(cfg: &DispatcherConfig) -> bool {
    matches!(cfg.subscription, SubscriptionType::KeyShared(k) if !k.allow_out_of_order)
}

/// One random step as a script line (or None to skip).
fn random_op(r: &mut Rng, w: &World, joined: &mut u32) -> Option<String> {
    let names: Vec<String> = w.names.keys().cloned().collect();
    let pick = |r: &mut Rng| names[r.below(names.len() as u64) as usize].clone();
    Some(match r.below(100) {
        0..=7 => {
            if names.len() >= 4 {
                return None;
            }
            *joined += 1;
            if w.cfg.subscription
                == SubscriptionType::KeyShared(KeySharedConfig {
                    mode: KeySharedMode::Sticky,
                    allow_out_of_order: false,
                })
            {
                // One quarter of the hash space each; a taken quarter is refused (typed error).
                let q = u64::from(*joined % 4) * 16_384;
                return Some(format!("join C{joined} ranges={}-{}", q, q + 16_383));
            }
            format!("join C{joined}")
        }
        8..=10 => {
            if names.is_empty() {
                return None;
            }
            format!("leave {}", pick(r))
        }
        11..=24 => {
            if names.is_empty() {
                return None;
            }
            format!("flow {} {}", pick(r), 1 + r.below(6))
        }
        25..=44 => {
            let n = 1 + r.below(4);
            let keys: Vec<String> = (0..n).map(|_| format!("k{}", r.below(8))).collect();
            format!("pub {}", keys.join(" "))
        }
        45..=46 => format!("batch k{} {}", r.below(8), 2 + r.below(3)),
        47..=48 => {
            format!(
                "chunks u{} k{} {}",
                r.next() % 1_000_000,
                r.below(8),
                2 + r.below(3)
            )
        }
        72..=74 => {
            // The ordered client gives back later messages of a key: every pending entry of
            // one hash from a random position on.
            if names.is_empty() {
                return None;
            }
            let c = pick(r);
            let pend = w.d.pending_positions(w.id(&c));
            if pend.is_empty() {
                return None;
            }
            let (from, h) = pend[r.below(pend.len() as u64) as usize];
            let ps: Vec<String> = pend
                .iter()
                .filter(|(p, hh)| *hh == h && *p >= from)
                .map(|(p, _)| p.to_string())
                .collect();
            format!("release {c} {}", ps.join(" "))
        }
        49..=71 => {
            if names.is_empty() {
                return None;
            }
            let c = pick(r);
            let pend = w.d.pending_positions(w.id(&c));
            // Sometimes ack through another consumer (Shared clients may), or an old position.
            let other = pick(r);
            let pos = match (pend.is_empty(), r.below(10)) {
                (_, 0) => {
                    let p = w.d.pending_positions(w.id(&other));
                    p.first().map(|x| x.0)?
                }
                (true, _) => return None,
                (false, _) => pend[r.below(pend.len() as u64) as usize].0,
            };
            format!("ack {c} {pos}")
        }
        75..=77 => {
            if names.is_empty() {
                return None;
            }
            let c = pick(r);
            let pend = w.d.pending_positions(w.id(&c));
            if pend.is_empty() {
                return None;
            }
            format!("nack {c} {}", pend[r.below(pend.len() as u64) as usize].0)
        }
        78..=80 => {
            if names.is_empty() {
                return None;
            }
            let c = pick(r);
            let pend = w.d.pending_positions(w.id(&c));
            if pend.is_empty() {
                return None;
            }
            let delay = match r.below(4) {
                0 => "-".to_string(),
                _ => r.below(15).to_string(),
            };
            let p = pend[r.below(pend.len() as u64) as usize].0;
            format!("onack {c} {delay} {p}")
        }
        81..=82 => {
            if names.is_empty() {
                return None;
            }
            format!("redeliver_all {}", pick(r))
        }
        83..=86 => format!("skip {}", 1 + r.below(3)),
        _ => format!("advance {}", 1 + r.below(12)),
    })
}

/// Runs one seed; returns Err(description) on the first violated invariant.
fn run_seed(cfg: DispatcherConfig, seed: u64, steps: usize) -> Result<(), String> {
    let ordered = ordered_key_shared(&cfg);
    run_seed_checked(cfg, seed, steps, ordered)
}

/// `check_nacks`: check the ordered-nack rule (on for ordered Key_Shared; forced on for the
/// test that shows the checker fires when the dispatcher does not hold keys).
fn run_seed_checked(
    cfg: DispatcherConfig,
    seed: u64,
    steps: usize,
    check_nacks: bool,
) -> Result<(), String> {
    let ordered = ordered_key_shared(&cfg);
    let shared = matches!(cfg.subscription, SubscriptionType::Shared);
    let mut w = World::new(cfg);
    w.quiet = true;
    let mut r = Rng(seed);
    let mut m = Model::default();
    let mut ops: Vec<String> = Vec::new();
    let mut joined = 0u32;
    let fail = |ops: &[String], msg: String| -> Result<(), String> {
        Err(format!("seed {seed}: {msg}\nops:\n{}", ops.join("\n")))
    };
    for _ in 0..steps {
        let Some(op) = random_op(&mut r, &w, &mut joined) else {
            continue;
        };
        ops.push(op.clone());
        let words: Vec<&str> = op.split_whitespace().collect();
        // Pre-step model updates for operations that remove pending entries.
        match words[0] {
            "leave" => {
                m.pending.retain(|_, v| v.0 != words[1]);
                m.granted.remove(words[1]);
                m.sent.remove(words[1]);
            }
            "redeliver_all" => m.pending.retain(|_, v| v.0 != words[1]),
            "nack" => {
                let p = parse(words[2]);
                if m.pending.get(&p).is_some_and(|v| v.0 == words[1]) {
                    m.pending.remove(&p);
                }
            }
            "onack" | "release" => {
                let from = if words[0] == "onack" { 3 } else { 2 };
                for s in &words[from..] {
                    let p = parse(s);
                    if m.pending.get(&p).is_some_and(|v| v.0 == words[1]) {
                        let v = m.pending.remove(&p);
                        if words[0] == "onack" {
                            if let Some(v) = v {
                                m.nacked.insert(p, v.1);
                            }
                        }
                    }
                }
            }
            "ack" => {
                m.pending.remove(&parse(words[2]));
            }
            "flow" => {
                *m.granted.entry(words[1].to_string()).or_default() +=
                    words[2].parse::<i64>().unwrap();
            }
            _ => {}
        }
        let before_pub = w.cell.lock().unwrap().ledger.last_position();
        w.step(&op);
        let g = w.cell.lock().unwrap();
        if words[0] == "pub" || words[0] == "batch" || words[0] == "chunks" {
            let last = g.ledger.last_position().unwrap();
            let mut p = before_pub.map_or(Position::new(1, 0), |b| b.next());
            while p <= last {
                m.published.insert(p);
                p = p.next();
            }
        }
        let md = g.cursor.mark_delete_position();
        let read_pos = g.cursor.read_position();
        let acked: BTreeSet<Position> = m
            .published
            .iter()
            .copied()
            .filter(|p| g.cursor.is_acked(*p))
            .collect();
        drop(g);
        if words[0] == "skip" && shared {
            m.pending.retain(|p, _| *p > md);
        }
        // A nack hold ends when the entry is dropped by a mark-delete move or acked (a dead
        // letter acked by the driver).
        m.nacked.retain(|p, _| *p > md && !acked.contains(p));
        // New sends, in order.
        let replay: BTreeMap<Position, u32> = w.d.replay_positions().into_iter().collect();
        for (name, e) in w.sends[m.sends_seen..].iter().cloned() {
            let hash = w.d.entry_hash(&e);
            if let Some(prev) = m.pending.get(&e.position) {
                return fail(
                    &ops,
                    format!("{} sent to {name} while pending on {}", e.position, prev.0),
                );
            }
            if ordered {
                if let Some((q, v)) = m.pending.iter().find(|(_, v)| v.1 == hash && v.0 != name) {
                    return fail(
                        &ops,
                        format!(
                            "hash {hash}: {} sent to {name} while {q} is pending on {}",
                            e.position, v.0
                        ),
                    );
                }
                // A continuation chunk following its chunk 0 to the same consumer may pass
                // the hash's other waiting entries: its message started first (and those
                // entries may be waiting for it to complete).
                let pinned_follow = e.meta.chunk.as_ref().is_some_and(|c| {
                    c.chunk_id > 0 && m.chunk_owner.get(&c.uuid).is_some_and(|o| *o == name)
                });
                if let Some((q, _)) = replay
                    .iter()
                    .find(|(q, h)| **h == hash && **q < e.position && !pinned_follow)
                {
                    return fail(
                        &ops,
                        format!(
                            "hash {hash}: {} sent to {name} while earlier {q} waits in replay",
                            e.position
                        ),
                    );
                }
            }
            if check_nacks {
                if let Some((q, _)) = m
                    .nacked
                    .iter()
                    .find(|(q, h)| **h == hash && **q < e.position)
                {
                    return fail(
                        &ops,
                        format!(
                            "hash {hash}: {} sent to {name} before the nacked {q} was re-sent",
                            e.position
                        ),
                    );
                }
                m.nacked.remove(&e.position);
            }
            if let Some(ch) = &e.meta.chunk {
                if ch.chunk_id == 0 {
                    m.chunk_owner.insert(ch.uuid.clone(), name.clone());
                } else if let Some(owner) = m.chunk_owner.get(&ch.uuid) {
                    // First deliveries only: a redelivered chunk whose pin was already released
                    // by the last chunk is routed like an orphan (as in Pulsar).
                    let first = !m.sent_once.contains(&e.position);
                    // The chunks of one message are published back to back: the previous
                    // chunk must have gone out first (or been dropped by a skip).
                    let prev = Position::new(e.position.ledger_id, e.position.entry_id - 1);
                    // Only while chunk 0's consumer is connected: after it left, the rest
                    // are orphans (the Shared assignor may spread them; the client discards
                    // them).
                    if first
                        && !m.sent_once.contains(&prev)
                        && prev > md
                        && w.names.contains_key(owner)
                    {
                        return fail(
                            &ops,
                            format!(
                                "chunk {} of {} ({}) sent before chunk {}",
                                ch.chunk_id,
                                ch.uuid,
                                e.position,
                                ch.chunk_id - 1
                            ),
                        );
                    }
                    if first && *owner != name && w.names.contains_key(owner) {
                        return fail(&ops, format!("chunk {} of {} sent to {name}, chunk 0 went to {owner} (still connected)", ch.chunk_id, ch.uuid));
                    }
                }
            }
            m.sent_once.insert(e.position);
            let n = e.meta.messages();
            m.pending.insert(e.position, (name.clone(), hash, n));
            *m.sent.entry(name.clone()).or_default() += i64::from(n);
        }
        m.sends_seen = w.sends.len();
        // Compare pending with the real maps.
        let mut real: BTreeMap<Position, String> = BTreeMap::new();
        for name in w.names.keys() {
            for (p, _) in w.d.pending_positions(w.id(name)) {
                if let Some(other) = real.insert(p, name.clone()) {
                    return fail(&ops, format!("{p} pending on {name} and {other}"));
                }
            }
        }
        let model: BTreeMap<Position, String> =
            m.pending.iter().map(|(p, v)| (*p, v.0.clone())).collect();
        if real != model {
            return fail(
                &ops,
                format!("pending differs\nreal:  {real:?}\nmodel: {model:?}"),
            );
        }
        // No loss.
        for p in &m.published {
            let ok = *p <= md
                || acked.contains(p)
                || m.pending.contains_key(p)
                || replay.contains_key(p)
                || *p >= read_pos;
            if !ok {
                return fail(&ops, format!("{p} lost (md {md}, read {read_pos})"));
            }
        }
        // Accounting.
        let stats = w.d.consumer_stats();
        let mut total = 0i64;
        for c in &stats {
            let name = w.name(c.id);
            let want_unacked: i64 = m
                .pending
                .values()
                .filter(|v| v.0 == name)
                .map(|v| i64::from(v.2))
                .sum();
            if c.unacked != want_unacked {
                return fail(
                    &ops,
                    format!("{name}: unacked {} != model {want_unacked}", c.unacked),
                );
            }
            let want_permits = m.granted.get(&name).copied().unwrap_or(0)
                - m.sent.get(&name).copied().unwrap_or(0);
            if c.permits + c.parked_permits != want_permits {
                return fail(
                    &ops,
                    format!(
                        "{name}: permits {}+{} != model {want_permits}",
                        c.permits, c.parked_permits
                    ),
                );
            }
            total += c.unacked;
        }
        if w.d.stats().unacked != total {
            return fail(
                &ops,
                format!("subscription unacked {} != {total}", w.d.stats().unacked),
            );
        }
    }
    // Liveness: once faults stop and consumers keep acking, the backlog drains.
    let exclusive = w.cfg.subscription
        == SubscriptionType::KeyShared(KeySharedConfig {
            mode: KeySharedMode::Sticky,
            allow_out_of_order: false,
        });
    for q in 0..4u64 {
        let line = if exclusive {
            format!("join Q{q} ranges={}-{}", q * 16_384, q * 16_384 + 16_383)
        } else {
            format!("join Q{q}")
        };
        if w.names.len() < 4 || exclusive {
            ops.push(line.clone());
            w.step(&line);
        }
    }
    // The operator releases parked keys (dead-letter policy Park).
    let parked: BTreeSet<u32> = w.d.parked_positions().into_iter().map(|(_, h)| h).collect();
    for h in parked {
        w.d.release_parked(w.now, h);
        w.pump();
    }
    for _ in 0..100 {
        for (_, h) in w.d.parked_positions() {
            w.d.release_parked(w.now, h);
            w.pump();
        }
        w.drain_dead_letters();
        let names: Vec<String> = w.names.keys().cloned().collect();
        for n in names {
            let line = format!("flow {n} 50");
            w.step(&line);
            let id = w.id(&n);
            for (p, _) in w.d.pending_positions(id) {
                let _ = w.ack.ack(id, p);
            }
            // As every driver must: an ack that unblocked something woke the driver.
            if w.waker.take() {
                w.d.handle_wake(w.now);
                w.pump();
            }
        }
        w.step("advance 20");
        let g = w.cell.lock().unwrap();
        if g.cursor.backlog(&g.ledger).entries == 0 {
            return Ok(());
        }
    }
    let g = w.cell.lock().unwrap();
    let backlog = g.cursor.backlog(&g.ledger);
    drop(g);
    fail(
        &ops,
        format!(
            "stall: backlog {backlog:?} after the quiesce phase; replay {:?}; draining {:?}",
            w.d.replay_positions(),
            w.d.draining_hashes()
        ),
    )
}

fn parse(s: &str) -> Position {
    let (l, e) = s.split_once(':').unwrap();
    Position::new(l.parse().unwrap(), e.parse().unwrap())
}

fn key_shared(mode: KeySharedMode) -> DispatcherConfig {
    let mut c = DispatcherConfig::new(SubscriptionType::KeyShared(KeySharedConfig {
        mode,
        allow_out_of_order: false,
    }));
    c.max_unacked_per_consumer = 6;
    c.look_ahead_per_consumer = 4;
    c.nack_backoff = dispatcher::NackBackoff::Exponential { base: 2, max: 16 };
    c
}

#[test]
fn key_shared_ring_matches_the_model() {
    for seed in 0..150 {
        run_seed(
            key_shared(KeySharedMode::ConsistentHashing { points: 20 }),
            seed,
            250,
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn key_shared_auto_split_matches_the_model() {
    for seed in 0..100 {
        run_seed(key_shared(KeySharedMode::AutoSplit), seed, 250).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn key_shared_exclusive_matches_the_model() {
    for seed in 0..100 {
        run_seed(key_shared(KeySharedMode::Sticky), seed, 250).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn key_shared_out_of_order_keeps_accounting_and_loses_nothing() {
    for seed in 0..100 {
        let mut c = key_shared(KeySharedMode::ConsistentHashing { points: 20 });
        c.subscription = SubscriptionType::KeyShared(KeySharedConfig {
            mode: KeySharedMode::ConsistentHashing { points: 20 },
            allow_out_of_order: true,
        });
        run_seed(c, seed, 250).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn shared_matches_the_model() {
    for seed in 0..150 {
        let mut c = DispatcherConfig::shared();
        c.max_unacked_per_consumer = 6;
        c.max_unacked_per_subscription = 12;
        run_seed(c, seed, 250).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn the_checker_catches_the_legacy_mark_delete_cleanup() {
    let mut failures = 0;
    for seed in 0..150 {
        let mut c = key_shared(KeySharedMode::ConsistentHashing { points: 20 });
        c.legacy_mark_delete_cleanup = true;
        if let Err(e) = run_seed(c, seed, 250) {
            assert!(
                e.contains("hash") || e.contains("pending") || e.contains("unacked"),
                "{e}"
            );
            failures += 1;
        }
    }
    assert!(
        failures > 0,
        "the legacy switch never broke an invariant: the checker is blind"
    );
}

#[test]
fn key_shared_ring_with_dead_letter_continue_matches_the_model() {
    for seed in 0..100 {
        let mut c = key_shared(KeySharedMode::ConsistentHashing { points: 20 });
        c.dead_letter = Some(dispatcher::DeadLetterPolicy {
            max_deliveries: 2,
            action: dispatcher::DeadLetterAction::Continue,
        });
        run_seed(c, seed, 250).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn key_shared_auto_split_with_dead_letter_park_matches_the_model() {
    for seed in 0..100 {
        let mut c = key_shared(KeySharedMode::AutoSplit);
        c.dead_letter = Some(dispatcher::DeadLetterPolicy {
            max_deliveries: 2,
            action: dispatcher::DeadLetterAction::Park,
        });
        run_seed(c, seed, 250).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// Out-of-order Key_Shared does not hold nacked keys (Pulsar's behaviour): the ordered-nack
/// check, forced on, must fire on some seed — the checker is not blind.
#[test]
fn the_nack_order_checker_fires_without_the_hold() {
    let mut failures = 0;
    for seed in 0..100 {
        let mut c = key_shared(KeySharedMode::ConsistentHashing { points: 20 });
        c.subscription = SubscriptionType::KeyShared(KeySharedConfig {
            mode: KeySharedMode::ConsistentHashing { points: 20 },
            allow_out_of_order: true,
        });
        if let Err(e) = run_seed_checked(c, seed, 250, true) {
            assert!(e.contains("before the nacked"), "{e}");
            failures += 1;
        }
    }
    assert!(
        failures > 0,
        "the nack-order check never fired without the hold"
    );
}
