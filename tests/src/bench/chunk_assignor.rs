//! W7 / W7c: the Shared assignor `chunk-assignor` (see docs/BENCHMARKS.md).
//!
//! * W7: 10 consumers (priority 0, 10^9 permits each), 1,000,000 non-chunk entries assigned in
//!   batches of 100. Figure: ns per entry.
//! * W7c: the same, but every message is split into 4 chunks with uuid `producer-1-<message>`:
//!   250,000 messages × 4 chunks = 1,000,000 entries, consecutive chunks, batches of 100. Figure:
//!   ns per entry (not per message). Each entry carries its own uuid `String` (as Pulsar parses
//!   one per entry); the strings are allocated fresh for every round, *before* the clock starts,
//!   so the figure is the assignor's (pin, follow, unpin), not the allocator's.
//!
//! Both build the entries and a fresh assignor untimed, then time `assign_into` over borrowed
//! entries (the dispatcher hands out references or indices the same way) with one reused
//! `Assignment`. The consumers' snapshot is the same for every batch (10^9 permits never run
//! out). Built-in checks, in an untimed pass with its own assignor over the same entries: every
//! entry is assigned; plain entries are spread exactly evenly (10 per consumer per batch); in W7c
//! every message's 4 chunks reach one consumer, no orphan is seen and no pin is left. The timed
//! pass checks that nothing was replayed (and, in W7c, that no pin is left).

use std::time::Instant;

use chunk_assignor::{
    AssignEntry, Assignment, AssignorConfig, ChunkAssignor, ChunkRef, ConsumerSlot,
};

use super::Workload;

const ENTRIES: usize = 1_000_000;
const BATCH: usize = 100;
const CONSUMERS: u32 = 10;
const CHUNKS: u32 = 4;

struct Plain {
    _pos: u64,
}

impl AssignEntry for Plain {
    fn chunk(&self) -> Option<ChunkRef<'_>> {
        None
    }
}

struct Chunk {
    message: u32,
    uuid: String,
    chunk_id: u32,
}

impl AssignEntry for Chunk {
    fn chunk(&self) -> Option<ChunkRef<'_>> {
        Some(ChunkRef {
            uuid: &self.uuid,
            chunk_id: self.chunk_id,
            num_chunks: CHUNKS,
        })
    }
}

fn consumers() -> Vec<ConsumerSlot<u32>> {
    (0..CONSUMERS)
        .map(|id| ConsumerSlot {
            id,
            permits: 1_000_000_000,
            priority: 0,
        })
        .collect()
}

/// Untimed check pass over the same entries with its own assignor.
fn check_w7(entries: &[Plain], consumers: &[ConsumerSlot<u32>]) -> Result<(), String> {
    let mut a = ChunkAssignor::new(AssignorConfig::default());
    let mut out: Assignment<u32, &Plain> = Assignment::new();
    let (mut assigned, mut uneven) = (0usize, 0usize);
    for batch in entries.chunks(BATCH) {
        a.assign_into(0, batch.iter(), consumers, &mut out);
        assigned += out.assigned_len();
        uneven += out
            .per_consumer
            .iter()
            .filter(|(_, v)| v.len() != BATCH / CONSUMERS as usize)
            .count();
    }
    if assigned != ENTRIES || uneven != 0 {
        return Err(format!(
            "assigned {assigned} of {ENTRIES}, {uneven} uneven batches"
        ));
    }
    Ok(())
}

fn w7() -> Result<f64, String> {
    let entries: Vec<Plain> = (0..ENTRIES as u64).map(|p| Plain { _pos: p }).collect();
    let consumers = consumers();
    check_w7(&entries, &consumers)?;
    let mut a = ChunkAssignor::new(AssignorConfig::default());
    let mut out: Assignment<u32, &Plain> = Assignment::new();
    let mut assigned = 0usize;
    let t = Instant::now();
    for batch in entries.chunks(BATCH) {
        a.assign_into(0, batch.iter(), &consumers, &mut out);
        assigned += out.replay.len();
    }
    let ns = t.elapsed().as_nanos() as f64 / ENTRIES as f64;
    if assigned != 0 {
        return Err(format!("{assigned} entries replayed"));
    }
    Ok(ns)
}

fn w7c() -> Result<f64, String> {
    let messages = (ENTRIES / CHUNKS as usize) as u32;
    let mut entries: Vec<Chunk> = Vec::with_capacity(ENTRIES);
    for m in 0..messages {
        for c in 0..CHUNKS {
            entries.push(Chunk {
                message: m,
                uuid: format!("producer-1-{m}"),
                chunk_id: c,
            });
        }
    }
    let consumers = consumers();
    check_w7c(&entries, &consumers, messages)?;
    let mut a = ChunkAssignor::new(AssignorConfig::default());
    let mut out: Assignment<u32, &Chunk> = Assignment::new();
    let mut replayed = 0usize;
    let t = Instant::now();
    for batch in entries.chunks(BATCH) {
        a.assign_into(0, batch.iter(), &consumers, &mut out);
        replayed += out.replay.len();
    }
    let ns = t.elapsed().as_nanos() as f64 / ENTRIES as f64;
    if replayed != 0 || a.pin_count() != 0 {
        return Err(format!(
            "{replayed} entries replayed, {} pins left",
            a.pin_count()
        ));
    }
    drop(entries);
    Ok(ns)
}

/// Untimed check pass over the same entries with its own assignor.
fn check_w7c(
    entries: &[Chunk],
    consumers: &[ConsumerSlot<u32>],
    messages: u32,
) -> Result<(), String> {
    let mut a = ChunkAssignor::new(AssignorConfig::default());
    let mut out: Assignment<u32, &Chunk> = Assignment::new();
    let mut assigned = 0usize;
    let mut split = 0usize;
    let mut owner = vec![u32::MAX; messages as usize];
    for batch in entries.chunks(BATCH) {
        a.assign_into(0, batch.iter(), consumers, &mut out);
        assigned += out.assigned_len();
        for (c, es) in &out.per_consumer {
            for e in es {
                let o = &mut owner[e.message as usize];
                if *o == u32::MAX {
                    *o = *c;
                } else if *o != *c {
                    split += 1;
                }
            }
        }
    }
    let s = a.stats();
    if assigned != ENTRIES || split != 0 || s.orphan_chunks != 0 || a.pin_count() != 0 {
        return Err(format!(
            "assigned {assigned} of {ENTRIES}, {split} split chunks, {} orphans, {} pins left",
            s.orphan_chunks,
            a.pin_count()
        ));
    }
    Ok(())
}

/// W7 and W7c.
pub fn workloads() -> Vec<Workload> {
    vec![
        Workload::lower("W7", "ns/entry", Some(23.0), Some(5.0), w7),
        Workload::lower("W7c", "ns/entry", Some(82.0), Some(10.0), w7c),
    ]
}
