//! A reference model (plain `BTreeMap` and linear scans) run side by side with the assignor over
//! seeded random runs: batches with interleaved, redelivered, orphan and malformed chunks, random
//! consumer snapshots (consumers vanish without `remove_consumer`), removals, clears and time.
//!
//! Every step compares the full output, the stats and the pins, and checks invariants that do not
//! depend on the model: the output is a permutation of the input, each list keeps input order, no
//! consumer gets more than its permits, a message's chunks stay on the consumer its chunk 0 went
//! to, and a consumer never gets an earlier chunk after a later one. At the end, with permits for
//! everyone, nothing may stay in replay (no entry is replayed forever). A failure prints the seed
//! and the operations.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use super::*;
use crate::{AssignorConfig, ChunkAssignor, OrphanPolicy};

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
        self.next() % n
    }
}

#[derive(Debug)]
struct MPin {
    consumer: u32,
    last_seen: u64,
    seq: u64,
    held: u64,
}

/// The assignor's rules written as directly as possible.
struct Model {
    cfg: AssignorConfig,
    pins: BTreeMap<String, MPin>,
    seq: u64,
    cursor: usize,
    epoch: u64,
    stats: AssignorStats,
}

impl Model {
    fn new(cfg: AssignorConfig) -> Self {
        Model {
            cfg,
            pins: BTreeMap::new(),
            seq: 0,
            cursor: 0,
            epoch: 0,
            stats: AssignorStats::default(),
        }
    }

    fn oldest(&self) -> Option<String> {
        self.pins
            .iter()
            .min_by_key(|(_, p)| p.seq)
            .map(|(k, _)| k.clone())
    }

    fn touch(&mut self, uuid: &str, now: u64) {
        self.seq += 1;
        let seq = self.seq;
        if let Some(p) = self.pins.get_mut(uuid) {
            p.seq = seq;
            p.last_seen = now;
        }
    }

    /// Round robin: the best level with capacity; rotate from the cursor when the cursor is on
    /// that level, else take the level's first consumer with capacity.
    fn rr(
        &mut self,
        order: &[usize],
        consumers: &[ConsumerSlot<u32>],
        permits: &[i64],
    ) -> Option<usize> {
        let n = order.len();
        let best = order
            .iter()
            .filter(|&&i| permits[i] > 0)
            .map(|&i| consumers[i].priority)
            .min()?;
        if self.cursor >= n {
            self.cursor = 0;
        }
        let at = |p: usize| consumers[order[p]].priority == best && permits[order[p]] > 0;
        let p = if consumers[order[self.cursor]].priority == best {
            (self.cursor..n).chain(0..self.cursor).find(|&p| at(p))
        } else {
            (0..n).find(|&p| at(p))
        }?;
        self.cursor = p + 1;
        Some(order[p])
    }

    fn assign(
        &mut self,
        now: u64,
        entries: Vec<E>,
        consumers: &[ConsumerSlot<u32>],
    ) -> Assignment<u32, E> {
        self.epoch += 1;
        while let Some(o) = self.oldest() {
            if now.saturating_sub(self.pins[&o].last_seen) > self.cfg.max_pin_age {
                self.pins.remove(&o);
                self.stats.pins_evicted_age += 1;
            } else {
                break;
            }
        }
        let mut order: Vec<usize> = (0..consumers.len()).collect();
        order.sort_by_key(|&i| consumers[i].priority);
        let mut permits: Vec<i64> = consumers.iter().map(|c| c.permits.max(0)).collect();
        let mut out = Assignment {
            per_consumer: consumers.iter().map(|c| (c.id, Vec::new())).collect(),
            replay: Vec::new(),
        };
        for e in entries {
            let target = if permits.iter().all(|&p| p <= 0) {
                None
            } else {
                self.route(now, &e, consumers, &order, &permits)
            };
            match target {
                Some(i) => {
                    permits[i] -= 1;
                    out.per_consumer[i].1.push(e);
                    self.stats.entries_assigned += 1;
                }
                None => {
                    out.replay.push(e);
                    self.stats.entries_replayed += 1;
                }
            }
        }
        let cap = self.cfg.max_pins.max(1);
        while self.pins.len() > cap {
            let Some(o) = self.oldest() else { break };
            self.pins.remove(&o);
            self.stats.pins_evicted_count += 1;
        }
        out
    }

    fn route(
        &mut self,
        now: u64,
        e: &E,
        consumers: &[ConsumerSlot<u32>],
        order: &[usize],
        permits: &[i64],
    ) -> Option<usize> {
        let Some((uuid, id, n)) = e.chunk.clone() else {
            return self.rr(order, consumers, permits);
        };
        if uuid.is_empty() || n == 0 || id >= n {
            self.stats.malformed_chunks += 1;
            return self.rr(order, consumers, permits);
        }
        if id == 0 {
            let i = self.rr(order, consumers, permits)?;
            if n == 1 {
                if self.pins.remove(&uuid).is_some() {
                    self.stats.pins_released += 1;
                }
            } else if let Some(p) = self.pins.get_mut(&uuid) {
                p.consumer = consumers[i].id;
                self.stats.pins_repinned += 1;
                self.touch(&uuid, now);
            } else {
                self.seq += 1;
                let pin = MPin {
                    consumer: consumers[i].id,
                    last_seen: now,
                    seq: self.seq,
                    held: 0,
                };
                self.pins.insert(uuid, pin);
                self.stats.pins_created += 1;
            }
            return Some(i);
        }
        if self.pins.contains_key(&uuid) {
            self.touch(&uuid, now);
            let pin = &self.pins[&uuid];
            if pin.held == self.epoch {
                self.stats.chunks_held_for_pin += 1;
                return None;
            }
            match consumers.iter().position(|c| c.id == pin.consumer) {
                Some(i) if permits[i] > 0 => {
                    if id + 1 == n {
                        self.pins.remove(&uuid);
                        self.stats.pins_released += 1;
                    }
                    return Some(i);
                }
                Some(_) => {
                    let epoch = self.epoch;
                    if let Some(p) = self.pins.get_mut(&uuid) {
                        p.held = epoch;
                    }
                    self.stats.chunks_held_for_pin += 1;
                    return None;
                }
                None => {
                    self.pins.remove(&uuid);
                    self.stats.stale_pins += 1;
                }
            }
        }
        match self.cfg.orphan_policy {
            OrphanPolicy::DispatchToDefault => {
                let i = self.rr(order, consumers, permits)?;
                self.stats.orphan_chunks += 1;
                Some(i)
            }
            OrphanPolicy::Replay => {
                self.stats.orphan_chunks_replayed += 1;
                None
            }
        }
    }

    fn remove_consumer(&mut self, id: u32) -> usize {
        let before = self.pins.len();
        self.pins.retain(|_, p| p.consumer != id);
        let n = before - self.pins.len();
        self.stats.pins_dropped_consumer_removed += n as u64;
        n
    }

    fn clear(&mut self) {
        self.stats.pins_cleared += self.pins.len() as u64;
        self.pins.clear();
    }
}

/// Model-independent checks on one batch.
fn check_invariants(
    batch: &[E],
    consumers: &[ConsumerSlot<u32>],
    out: &Assignment<u32, E>,
) -> Result<(), String> {
    let index: HashMap<u32, usize> = batch.iter().enumerate().map(|(i, e)| (e.pos, i)).collect();
    let mut seen: Vec<u32> = out.replay.iter().map(|e| e.pos).collect();
    for (c, es) in &out.per_consumer {
        seen.extend(es.iter().map(|e| e.pos));
        let _ = c;
    }
    let mut want: Vec<u32> = batch.iter().map(|e| e.pos).collect();
    seen.sort_unstable();
    want.sort_unstable();
    if seen != want {
        return Err(format!(
            "not a permutation of the input: {seen:?} vs {want:?}"
        ));
    }
    let lists = out
        .per_consumer
        .iter()
        .map(|(_, v)| v)
        .chain(std::iter::once(&out.replay));
    for l in lists {
        let idx: Vec<usize> = l.iter().map(|e| index[&e.pos]).collect();
        if idx.windows(2).any(|w| w[0] >= w[1]) {
            return Err(format!("input order lost: {idx:?}"));
        }
    }
    if out.per_consumer.len() != consumers.len() {
        return Err("per_consumer not aligned with consumers".into());
    }
    for ((c, es), slot) in out.per_consumer.iter().zip(consumers) {
        if *c != slot.id {
            return Err(format!("per_consumer id {c} at the slot of {}", slot.id));
        }
        if es.len() as i64 > slot.permits.max(0) {
            return Err(format!(
                "consumer {c} got {} entries with {} permits",
                es.len(),
                slot.permits
            ));
        }
    }
    // Stickiness within the batch: after a chunk 0 goes to X, the uuid's later dispatched chunks
    // go to X (until another chunk 0). Ordering per consumer: chunk ids never go back except to 0.
    let mut dest: HashMap<u32, u32> = HashMap::new();
    for (c, es) in &out.per_consumer {
        for e in es {
            dest.insert(e.pos, *c);
        }
        let mut last: HashMap<&str, u32> = HashMap::new();
        for e in es {
            if let Some((u, id, n)) = &e.chunk {
                if u.is_empty() || *n == 0 || id >= n {
                    continue;
                }
                if let Some(prev) = last.insert(u.as_str(), *id) {
                    if *id != 0 && *id < prev {
                        return Err(format!(
                            "consumer {c} got chunk {id} of {u} after chunk {prev}"
                        ));
                    }
                }
            }
        }
    }
    let mut owner: HashMap<&str, u32> = HashMap::new();
    for e in batch {
        let Some((u, id, n)) = &e.chunk else { continue };
        if u.is_empty() || *n == 0 || id >= n {
            continue;
        }
        let Some(&c) = dest.get(&e.pos) else { continue };
        if *id == 0 {
            if *n > 1 {
                owner.insert(u.as_str(), c);
            }
        } else if let Some(&o) = owner.get(u.as_str()) {
            if o != c {
                return Err(format!("chunk {id} of {u} went to {c}, its chunk 0 to {o}"));
            }
        }
    }
    Ok(())
}

fn run(seed: u64) -> Result<(), String> {
    let mut rng = Rng(seed);
    let cfg = AssignorConfig {
        orphan_policy: if rng.below(6) == 0 {
            OrphanPolicy::Replay
        } else {
            OrphanPolicy::DispatchToDefault
        },
        max_pins: rng.below(6) as usize,
        max_pin_age: [2, 8, u64::MAX][rng.below(3) as usize],
    };
    let mut real = ChunkAssignor::new(cfg);
    let mut model = Model::new(cfg);
    let mut now = 0u64;
    let mut pos = 0u32;
    let mut msgs = 0u32;
    let mut open: Vec<(String, u32, u32)> = Vec::new();
    let mut uuids: Vec<String> = Vec::new();
    let mut carried: Vec<E> = Vec::new();
    let mut new_pos = || {
        pos += 1;
        pos
    };
    for _step in 0..40 {
        now += rng.below(4);
        match rng.below(20) {
            0 => {
                let id = 1 + rng.below(5) as u32;
                let (r, m) = (real.remove_consumer(id), model.remove_consumer(id));
                if r != m {
                    return Err(format!("remove_consumer({id}): {r} vs model {m}"));
                }
            }
            1 => {
                real.clear();
                model.clear();
            }
            _ => {
                let mut consumers = Vec::new();
                for id in 1..=5u32 {
                    if rng.below(4) != 0 {
                        let permits = rng.below(7) as i64 - 1;
                        let priority = rng.below(2) as i32;
                        consumers.push(ConsumerSlot {
                            id,
                            permits,
                            priority,
                        });
                    }
                }
                if consumers.len() > 1 && rng.below(2) == 0 {
                    let a = rng.below(consumers.len() as u64) as usize;
                    let b = rng.below(consumers.len() as u64) as usize;
                    consumers.swap(a, b);
                }
                let mut batch = std::mem::take(&mut carried);
                for _ in 0..rng.below(10) {
                    let r = rng.below(12);
                    let e = if r < 5 && !open.is_empty() {
                        let k = rng.below(open.len() as u64) as usize;
                        let (u, next, n) = open[k].clone();
                        if next + 1 >= n {
                            open.swap_remove(k);
                        } else {
                            open[k].1 += 1;
                        }
                        ch(new_pos(), &u, next, n)
                    } else if r < 8 {
                        msgs += 1;
                        let u = format!("u{msgs}");
                        let n = 1 + rng.below(4) as u32;
                        if n > 1 {
                            open.push((u.clone(), 1, n));
                        }
                        uuids.push(u.clone());
                        ch(new_pos(), &u, 0, n)
                    } else if r == 8 {
                        msgs += 1;
                        let u = format!("o{msgs}");
                        uuids.push(u.clone());
                        ch(new_pos(), &u, 1 + rng.below(3) as u32, 4)
                    } else if r == 9 && !open.is_empty() {
                        let k = rng.below(open.len() as u64) as usize;
                        // A redelivered chunk 0; the message's later chunks keep coming once each.
                        let (u, _, n) = open[k].clone();
                        ch(new_pos(), &u, 0, n)
                    } else if r == 10 {
                        match rng.below(3) {
                            0 => ch(new_pos(), "u1", 5, 5),
                            1 => ch(new_pos(), "m", 0, 0),
                            _ => ch(new_pos(), "", 1, 3),
                        }
                    } else {
                        plain(new_pos())
                    };
                    batch.push(e);
                }
                let got = real.assign(now, batch.clone(), &consumers);
                let want = model.assign(now, batch.clone(), &consumers);
                check_invariants(&batch, &consumers, &got).map_err(|e| {
                    format!(
                        "{e}\n  at {now} with {consumers:?}\n  batch {batch:?}\n  got {}",
                        render(&got)
                    )
                })?;
                if render(&got) != render(&want) {
                    return Err(format!(
                        "assign at {now} with {consumers:?}\n  batch {batch:?}\n  got   {}\n  model {}",
                        render(&got),
                        render(&want)
                    ));
                }
                carried = got.replay;
            }
        }
        if real.stats() != model.stats {
            return Err(format!(
                "stats differ:\n{:?}\n{:?}",
                real.stats(),
                model.stats
            ));
        }
        if real.pin_count() != model.pins.len() {
            return Err(format!(
                "pin count {} vs model {}",
                real.pin_count(),
                model.pins.len()
            ));
        }
        for u in &uuids {
            let m = model.pins.get(u).map(|p| p.consumer);
            if real.pinned(u) != m {
                return Err(format!("pinned({u}) = {:?} vs model {m:?}", real.pinned(u)));
            }
        }
    }
    // No entry is replayed forever: with permits for every consumer, replay drains at once.
    if cfg.orphan_policy == OrphanPolicy::DispatchToDefault {
        let everyone = cs(&[
            (1, 1000, 0),
            (2, 1000, 1),
            (3, 1000, 0),
            (4, 1000, 1),
            (5, 1000, 0),
        ]);
        let out = real.assign(now, std::mem::take(&mut carried), &everyone);
        if !out.replay.is_empty() {
            return Err(format!(
                "still replayed with permits for everyone: {}",
                render(&out)
            ));
        }
    }
    Ok(())
}

#[test]
fn assignor_matches_the_reference_model_over_seeded_random_runs() {
    let mut failures = String::new();
    for seed in 0..2000u64 {
        if let Err(e) = run(seed) {
            let _ = writeln!(failures, "seed {seed}: {e}");
            break;
        }
    }
    assert!(failures.is_empty(), "reproduce with run(seed):\n{failures}");
}
