//! W6, W6-add, W6-churn: the consistent-hashing selector (`dispatcher::ConsistentHashingSelector`).

use std::hint::black_box;
use std::time::Instant;

use dispatcher::{ConsistentHashingSelector, ConsumerInfo, StickyKeySelector};

use super::rng::SplitMix64;
use super::Workload;

const CONSUMERS: u32 = 100;
const POINTS: u32 = 100;

fn infos() -> Vec<ConsumerInfo<u32>> {
    (0..CONSUMERS)
        .map(|i| ConsumerInfo::new(i, format!("consumer-{i}")))
        .collect()
}

fn w6_ring() -> ConsistentHashingSelector<u32> {
    let mut r = ConsistentHashingSelector::new(POINTS);
    for c in infos() {
        // Ids are unique: cannot fail.
        let _ = r.add_consumer(c);
    }
    r
}

/// W6: 1,000,000 selects on the 100-consumer ring (ring built once, untimed; the SplitMix64
/// draw is inside the timed loop). Checks the sum of selected consumer indexes.
fn w6() -> impl FnMut() -> Result<f64, String> {
    let ring = w6_ring();
    move || {
        let n = 1_000_000u32;
        let mut rng = SplitMix64::new(43);
        let t = Instant::now();
        let mut sum = 0u64;
        for _ in 0..n {
            let h = rng.next_hash();
            sum += u64::from(black_box(&ring).select(h).unwrap_or(u32::MAX));
        }
        let ns = t.elapsed().as_nanos() as f64 / f64::from(n);
        if sum != 48_326_997 {
            return Err(format!("W6 check sum {sum} != 48326997"));
        }
        Ok(ns)
    }
}

/// W6-add: grow an empty ring to 100 consumers, each add returning its impacted consumers.
fn w6_add() -> impl FnMut() -> Result<f64, String> {
    move || {
        let mut ring = ConsistentHashingSelector::new(POINTS);
        let joins = infos();
        let mut moved = 0usize;
        let t = Instant::now();
        for c in joins {
            let id = c.id;
            let imp = ring.add_consumer(c).map_err(|e| e.to_string())?;
            if imp.added.iter().any(|(c, _)| *c != id) {
                return Err(format!("add of {id} gave hashes to another consumer"));
            }
            moved += imp.removed.len();
        }
        let us = t.elapsed().as_nanos() as f64 / 1000.0 / f64::from(CONSUMERS);
        black_box(moved);
        if ring.select(1) != Some(56) {
            return Err("W6-add: select(1) != consumer-56".into());
        }
        Ok(us)
    }
}

/// W6-churn: at 100 consumers, remove consumer k then re-add it (same name, so the same name
/// index), k = 0..99, 3 cycles; figure per operation (600 operations). Ring built untimed.
fn w6_churn() -> impl FnMut() -> Result<f64, String> {
    move || {
        let mut ring = w6_ring();
        let rejoins: Vec<ConsumerInfo<u32>> = (0..3).flat_map(|_| infos()).collect();
        let mut moved = 0usize;
        let t = Instant::now();
        for c in rejoins {
            let id = c.id;
            let out = ring.remove_consumer(id);
            moved += out.added.len();
            let back = ring.add_consumer(c).map_err(|e| e.to_string())?;
            moved += back.removed.len();
        }
        let us = t.elapsed().as_nanos() as f64 / 1000.0 / (3.0 * 2.0 * f64::from(CONSUMERS));
        black_box(moved);
        if ring.consumer_count() != CONSUMERS as usize || moved == 0 {
            return Err("W6-churn: ring lost consumers or nothing moved".into());
        }
        Ok(us)
    }
}

/// The selector rows.
pub fn workloads() -> Vec<Workload> {
    vec![
        Workload::lower("W6", "ns/op", Some(220.0), Some(2.5), w6()),
        Workload::lower("W6-add", "µs/op", Some(480.0), Some(10.0), w6_add()),
        Workload::lower("W6-churn", "µs/op", Some(760.0), Some(10.0), w6_churn()),
    ]
}
