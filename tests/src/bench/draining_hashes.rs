//! W5a / W5b / W5c: the `draining-hashes` tracker (see docs/BENCHMARKS.md).
//!
//! h_j = 1 + 6j for j in 0..10,000, consumer A = 1 drains them, consumer B = 2 asks.
//! * W5a: fresh tracker, 10 passes of `add_entry(A, h_j)` (timed).
//! * W5b: after W5a's adds (untimed), 1,000,000 `should_block(B, x)` with x from SplitMix64
//!   seed 42 mapped to [1, 65535]; must answer true exactly 152,166 times. The x values are drawn
//!   before the clock starts, so the figure is the tracker's, not the generator's.
//! * W5c: after W5a's adds and W5b's blocks (untimed; the blocks give every entry
//!   blocked_attempts > 0), 10 passes of `reduce_ref_count(A, h_j, false)` (timed); the last pass
//!   must fire exactly 10,000 listener calls (not batching: one per release).
//!
//! Every call takes the tracker's real (uncontended) lock where it would in production; W5b's
//! misses take the lock-free "not draining" path, which is the design, not a shortcut.

use super::Workload;

mod imp {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

    use draining_hashes::{Arc, DrainingHashes, Reduced, UnblockListener};

    use super::super::rng::SplitMix64;
    use super::Workload;

    const A: u32 = 1;
    const B: u32 = 2;
    const HASHES: u32 = 10_000;
    const PASSES: u32 = 10;
    const QUERIES: usize = 1_000_000;
    const EXPECTED_BLOCKED: usize = 152_166;

    #[derive(Default)]
    struct Count(AtomicUsize);

    impl UnblockListener for Count {
        fn hashes_unblocked(&self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn h(j: u32) -> u32 {
        1 + 6 * j
    }

    fn fresh() -> (Arc<Count>, DrainingHashes<u32>) {
        let c = Arc::new(Count::default());
        let t = DrainingHashes::new(c.clone());
        (c, t)
    }

    fn adds(t: &DrainingHashes<u32>) -> Result<(), String> {
        for _ in 0..PASSES {
            for j in 0..HASHES {
                t.add_entry(A, h(j))
                    .map_err(|e| format!("add_entry: {e}"))?;
            }
        }
        Ok(())
    }

    fn queries() -> Vec<u32> {
        let mut r = SplitMix64::new(42);
        (0..QUERIES).map(|_| r.next_hash()).collect()
    }

    fn blocks(t: &DrainingHashes<u32>, xs: &[u32]) -> usize {
        let mut n = 0;
        for &x in xs {
            n += usize::from(t.should_block(B, std::hint::black_box(x)));
        }
        n
    }

    fn w5a() -> Result<f64, String> {
        let (_, t) = fresh();
        let start = Instant::now();
        adds(&t)?;
        let ns = start.elapsed().as_nanos() as f64;
        if t.len() != HASHES as usize {
            return Err(format!("{} draining hashes, want {HASHES}", t.len()));
        }
        Ok(ns / f64::from(PASSES * HASHES))
    }

    fn w5b(xs: &[u32]) -> Result<f64, String> {
        let (_, t) = fresh();
        adds(&t)?;
        let start = Instant::now();
        let n = blocks(&t, xs);
        let ns = start.elapsed().as_nanos() as f64;
        if n != EXPECTED_BLOCKED {
            return Err(format!(
                "should_block answered true {n} times, want {EXPECTED_BLOCKED}"
            ));
        }
        Ok(ns / QUERIES as f64)
    }

    fn w5c(xs: &[u32]) -> Result<f64, String> {
        let (count, t) = fresh();
        adds(&t)?;
        let n = blocks(&t, xs);
        if n != EXPECTED_BLOCKED {
            return Err(format!(
                "should_block answered true {n} times, want {EXPECTED_BLOCKED}"
            ));
        }
        let mut released = 0u32;
        let start = Instant::now();
        for pass in 0..PASSES {
            if pass + 1 == PASSES {
                // Only the last pass may notify; checked below, outside the timed part.
                released = count.0.load(Ordering::Relaxed) as u32;
            }
            for j in 0..HASHES {
                match t.reduce_ref_count(A, h(j), false) {
                    Ok(Reduced::Decremented { .. }) | Ok(Reduced::Released { .. }) => {}
                    other => return Err(format!("reduce({}) = {other:?}", h(j))),
                }
            }
        }
        let ns = start.elapsed().as_nanos() as f64;
        let total = count.0.load(Ordering::Relaxed);
        if released != 0 || total != HASHES as usize {
            return Err(format!(
                "{released} notifications before the last pass and {total} in all, want 0 and {HASHES}"
            ));
        }
        if !t.is_empty() {
            return Err(format!("{} hashes still draining", t.len()));
        }
        Ok(ns / f64::from(PASSES * HASHES))
    }

    pub(super) fn workloads() -> Vec<Workload> {
        let xs = std::rc::Rc::new(queries());
        let xs_b = xs.clone();
        vec![
            Workload::lower("W5a", "ns/op", Some(38.0), Some(8.0), w5a),
            Workload::lower("W5b", "ns/op", Some(39.0), Some(5.0), move || w5b(&xs_b)),
            Workload::lower("W5c", "ns/op", Some(40.0), Some(8.0), move || w5c(&xs)),
        ]
    }
}

/// W5a, W5b and W5c.
pub fn workloads() -> Vec<Workload> {
    imp::workloads()
}
