//! Tests: unit tests per rule, the round robin, a reference model over seeded random runs, and a
//! scripted snapshot.

use std::fmt::Write as _;

use crate::{AssignEntry, Assignment, AssignorStats, ChunkRef, ConsumerSlot};

mod logs;
mod model;
mod pins;
mod round_robin;
mod snapshot;
mod unit;

/// A test entry: a position and optional (uuid, chunk id, number of chunks).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct E {
    pub(crate) pos: u32,
    pub(crate) chunk: Option<(String, u32, u32)>,
}

impl AssignEntry for E {
    fn chunk(&self) -> Option<ChunkRef<'_>> {
        self.chunk.as_ref().map(|(u, c, n)| ChunkRef {
            uuid: u.as_str(),
            chunk_id: *c,
            num_chunks: *n,
        })
    }
}

pub(crate) fn plain(pos: u32) -> E {
    E { pos, chunk: None }
}

pub(crate) fn ch(pos: u32, uuid: &str, chunk_id: u32, num_chunks: u32) -> E {
    E {
        pos,
        chunk: Some((uuid.to_owned(), chunk_id, num_chunks)),
    }
}

/// Consumers from `(id, permits, priority)`.
pub(crate) fn cs(spec: &[(u32, i64, i32)]) -> Vec<ConsumerSlot<u32>> {
    spec.iter()
        .map(|&(id, permits, priority)| ConsumerSlot {
            id,
            permits,
            priority,
        })
        .collect()
}

/// `c1=[1 3] c2=[2] replay=[4]` (consumers that got nothing are left out).
pub(crate) fn render(a: &Assignment<u32, E>) -> String {
    let mut s = String::new();
    for (c, es) in &a.per_consumer {
        if !es.is_empty() {
            let _ = write!(s, "c{c}={} ", list(es));
        }
    }
    let _ = write!(s, "replay={}", list(&a.replay));
    s
}

fn list(es: &[E]) -> String {
    let v: Vec<String> = es.iter().map(|e| e.pos.to_string()).collect();
    format!("[{}]", v.join(" "))
}

/// Positions sent to consumer `id`.
pub(crate) fn sent(a: &Assignment<u32, E>, id: u32) -> Vec<u32> {
    a.for_consumer(id).iter().map(|e| e.pos).collect()
}

pub(crate) fn replayed(a: &Assignment<u32, E>) -> Vec<u32> {
    a.replay.iter().map(|e| e.pos).collect()
}

/// Only the non-zero counters, one per line.
pub(crate) fn render_stats(s: &AssignorStats) -> String {
    let all = [
        ("entries_assigned", s.entries_assigned),
        ("entries_replayed", s.entries_replayed),
        ("orphan_chunks", s.orphan_chunks),
        ("orphan_chunks_replayed", s.orphan_chunks_replayed),
        ("stale_pins", s.stale_pins),
        ("malformed_chunks", s.malformed_chunks),
        ("chunks_held_for_pin", s.chunks_held_for_pin),
        ("pins_created", s.pins_created),
        ("pins_repinned", s.pins_repinned),
        ("pins_released", s.pins_released),
        ("pins_evicted_count", s.pins_evicted_count),
        ("pins_evicted_age", s.pins_evicted_age),
        (
            "pins_dropped_consumer_removed",
            s.pins_dropped_consumer_removed,
        ),
        ("pins_cleared", s.pins_cleared),
    ];
    let mut out = String::new();
    for (k, v) in all {
        if v != 0 {
            let _ = writeln!(out, "  {k}: {v}");
        }
    }
    out
}
