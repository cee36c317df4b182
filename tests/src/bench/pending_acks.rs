//! W1–W4: the `pending-acks` map (see docs/BENCHMARKS.md).
//!
//! Entry i of N = 1,000,000: position (ledger = i / 10,000, entry = i mod 10,000), remaining 1,
//! hash = (i × 2654435761) mod 65536 (u64 arithmetic; hash 0 is kept as is, the map does not
//! validate hashes). No handlers are installed (Pulsar's baseline had none), but every call takes
//! the map's real lock, uncontended, as the crate always locks.
//! * W1: fresh map, add i = 0..N ascending (timed), ns/op.
//! * W2: W1's map (untimed), then remove each entry individually in insertion order (timed),
//!   ns/op; every remove must find its entry and the map must end empty.
//! * W3: refill as W1 (untimed), then 100 `remove_all_up_to` calls, call s = 1..=100 up to entry
//!   index s·N/100 − 1, i.e. one whole ledger each (timed), ns/entry; each call must remove
//!   exactly 10,000 entries.
//! * W4: `memory_bytes()` of W1's map divided by N (bytes/entry); computed from the capacities
//!   of the map's buffers, deterministic.

use super::Workload;

mod imp {
    use std::time::Instant;

    use pending_acks::{PendingAcks, RemovalCause};

    use super::Workload;

    const N: u64 = 1_000_000;
    const PER_LEDGER: u64 = 10_000;
    const CALLS: u64 = 100;

    type Map = PendingAcks<(u64, u64), u32>;

    #[inline]
    fn pos(i: u64) -> (u64, u64) {
        (i / PER_LEDGER, i % PER_LEDGER)
    }

    #[inline]
    fn hash(i: u64) -> u32 {
        (i.wrapping_mul(2_654_435_761) % 65_536) as u32
    }

    fn fill(m: &Map) -> Result<(), String> {
        for i in 0..N {
            m.add_if_allowed(pos(i), 1, hash(i))
                .map_err(|e| format!("add {i}: {e}"))?;
        }
        Ok(())
    }

    fn filled() -> Result<Map, String> {
        let m = Map::new(1);
        fill(&m)?;
        Ok(m)
    }

    fn w1() -> Result<f64, String> {
        let start = Instant::now();
        let m = Map::new(1);
        fill(&m)?;
        let ns = start.elapsed().as_nanos() as f64;
        if m.len() != N as usize {
            return Err(format!("{} entries, want {N}", m.len()));
        }
        Ok(ns / N as f64)
    }

    fn w2() -> Result<f64, String> {
        let m = filled()?;
        let mut missing = 0u64;
        let start = Instant::now();
        for i in 0..N {
            missing += u64::from(m.remove(pos(i), RemovalCause::Acked).is_none());
        }
        let ns = start.elapsed().as_nanos() as f64;
        if missing != 0 || !m.is_empty() {
            return Err(format!("{missing} removes found nothing, {} left", m.len()));
        }
        Ok(ns / N as f64)
    }

    fn w3() -> Result<f64, String> {
        let m = filled()?;
        let mut per_call = [(0usize, 0usize); CALLS as usize];
        let start = Instant::now();
        for s in 1..=CALLS {
            let mut seen = 0usize;
            let n = m.remove_all_up_to(
                pos(s * N / CALLS - 1),
                RemovalCause::MarkDeleteAdvanced,
                |_, _| seen += 1,
            );
            per_call[(s - 1) as usize] = (n, seen);
        }
        let ns = start.elapsed().as_nanos() as f64;
        let want = PER_LEDGER as usize;
        if let Some((s, (n, seen))) = per_call
            .iter()
            .enumerate()
            .find(|(_, &(n, seen))| n != want || seen != want)
        {
            return Err(format!(
                "call {} removed {n} (callback saw {seen}), want {want}",
                s + 1
            ));
        }
        if !m.is_empty() {
            return Err(format!("{} entries left", m.len()));
        }
        Ok(ns / N as f64)
    }

    fn w4() -> Result<f64, String> {
        let m = filled()?;
        Ok(m.memory_bytes() as f64 / N as f64)
    }

    pub(super) fn workloads() -> Vec<Workload> {
        vec![
            Workload::lower("W1", "ns/op", Some(213.0), Some(12.0), w1),
            Workload::lower("W2", "ns/op", Some(108.0), Some(10.0), w2),
            Workload::lower("W3", "ns/entry", Some(96.0), Some(3.0), w3),
            Workload::lower("W4", "bytes/entry", Some(40.1), Some(12.0), w4),
        ]
    }
}

/// W1, W2, W3 and W4.
pub fn workloads() -> Vec<Workload> {
    imp::workloads()
}
