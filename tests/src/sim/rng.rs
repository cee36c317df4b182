//! Seeded random streams: one per purpose, derived from the run's seed, so that drawing more
//! numbers for one purpose (say, network delays) never shifts another (the workload).

use crate::bench::rng::SplitMix64;

/// What a stream is used for. Each purpose gets its own generator derived from the seed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// Producers: keys, batching, chunking, publish times.
    Workload = 1,
    /// Fault times, kinds and targets.
    Faults = 2,
    /// Network delays.
    Network = 3,
    /// Application processing times and ack/nack decisions.
    Timing = 4,
    /// When the broker's held storage reads complete.
    Reads = 5,
}

/// One seeded stream.
#[derive(Clone, Debug)]
pub struct Rng(SplitMix64);

impl Rng {
    /// The stream of `purpose` for `seed`.
    pub fn new(seed: u64, purpose: Purpose) -> Self {
        // Mix seed and purpose through one SplitMix64 step so neighbouring seeds and purposes
        // give unrelated streams.
        let mut m = SplitMix64::new(seed ^ (purpose as u64).wrapping_mul(0xA076_1D64_78BD_642F));
        Rng(SplitMix64::new(m.next()))
    }

    /// A raw 64-bit draw.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next()
    }

    /// Uniform in `0..n` (0 when `n == 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.0.next() % n
        }
    }

    /// Uniform in `lo..=hi` (`lo` when `hi <= lo`).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            lo
        } else {
            lo + self.below(hi - lo + 1)
        }
    }

    /// True with probability `permille / 1000`.
    pub fn chance(&mut self, permille: u32) -> bool {
        self.below(1000) < u64::from(permille)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.0.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A Zipf sampler over ranks `0..n` with exponent `s` (rank 0 the most frequent).
#[derive(Clone, Debug)]
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    /// A sampler over `n` ranks (at least 1).
    pub fn new(n: usize, s: f64) -> Self {
        let n = n.max(1);
        let mut acc = 0.0;
        let mut cdf = Vec::with_capacity(n);
        for k in 1..=n {
            acc += 1.0 / (k as f64).powf(s);
            cdf.push(acc);
        }
        for c in &mut cdf {
            *c /= acc;
        }
        Zipf { cdf }
    }

    /// A rank in `0..n`.
    pub fn sample(&self, rng: &mut Rng) -> usize {
        let u = rng.unit();
        self.cdf
            .partition_point(|c| *c <= u)
            .min(self.cdf.len() - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_differ_by_purpose_and_repeat_by_seed() {
        let a: Vec<u64> = (0..4)
            .map(|_| Rng::new(7, Purpose::Workload).next_u64())
            .collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        let mut w = Rng::new(7, Purpose::Workload);
        let mut n = Rng::new(7, Purpose::Network);
        assert_ne!(w.next_u64(), n.next_u64());
    }

    #[test]
    fn zipf_prefers_low_ranks() {
        let z = Zipf::new(100, 1.1);
        let mut r = Rng::new(1, Purpose::Workload);
        let mut counts = [0u32; 100];
        for _ in 0..10_000 {
            counts[z.sample(&mut r)] += 1;
        }
        assert!(counts[0] > counts[10] && counts[10] > 0);
        assert!(counts[0] > 1000, "rank 0 drew {}", counts[0]);
    }
}
