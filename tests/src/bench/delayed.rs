//! W13 / W13-pop / W13-mem: the dispatcher's delayed-delivery tracker (no Pulsar baseline).
//!
//! 1,000,000 positions in ascending order over 10 ledgers of 100,000 entries (as a read hands
//! them over), each with a deliver-at time drawn uniformly from [10 s, 70 s) with SplitMix64
//! seed 44; tick 1000, strict (512 ms buckets, about 118 of them).
//! * W13: `track` of every position into a fresh tracker (ns/entry).
//! * W13-pop: `pop_due` of everything, one call per bucket step of 512 ms (ns/entry); must return
//!   1,000,000 positions in total.
//! * W13-mem: `memory_bytes()` after W13 divided by N (bytes/entry): the index costs one `u64` per
//!   entry plus a node per (bucket, ledger) and the vectors' spare capacity.
//!
//! The tracker lives inside the single-threaded dispatcher core: no lock to take.

use std::time::Instant;

use cursor::Position;
use dispatcher::{DelayedDelivery, DelayedTracker};

use super::rng::SplitMix64;
use super::Workload;

const N: u64 = 1_000_000;
const PER_LEDGER: u64 = 100_000;

fn input() -> Vec<(Position, u64)> {
    let mut r = SplitMix64::new(44);
    (0..N)
        .map(|i| {
            let p = Position::new(1 + i / PER_LEDGER, i % PER_LEDGER);
            (p, 10_000 + r.next() % 60_000)
        })
        .collect()
}

fn filled(items: &[(Position, u64)]) -> DelayedTracker {
    let mut t = DelayedTracker::new(DelayedDelivery {
        enabled: true,
        tick: 1000,
        strict: true,
    });
    for (p, at) in items {
        t.track(0, *p, *at);
    }
    t
}

/// The W13 workloads.
pub fn workloads() -> Vec<Workload> {
    let items = std::rc::Rc::new(input());
    let a = items.clone();
    let b = items.clone();
    let c = items;
    vec![
        Workload::lower("W13", "ns/entry", None, None, move || {
            let start = Instant::now();
            let t = filled(&a);
            let ns = start.elapsed().as_nanos() as f64 / N as f64;
            if t.len() as u64 != N {
                return Err(format!("W13: {} tracked, expected {N}", t.len()));
            }
            Ok(ns)
        }),
        Workload::lower("W13-pop", "ns/entry", None, None, move || {
            let mut t = filled(&b);
            let mut out = Vec::with_capacity(N as usize);
            let start = Instant::now();
            let mut now = 0;
            while !t.is_empty() {
                now += 512;
                t.pop_due(now, &mut out);
            }
            let ns = start.elapsed().as_nanos() as f64 / N as f64;
            if out.len() as u64 != N {
                return Err(format!("W13-pop: {} popped, expected {N}", out.len()));
            }
            Ok(ns)
        }),
        Workload::lower("W13-mem", "bytes/entry", None, None, move || {
            let t = filled(&c);
            Ok(t.memory_bytes() as f64 / N as f64)
        }),
    ]
}
