//! SplitMix64: the crate's one random generator (the core's back-off jitter, seeded from the
//! configuration; the randomized tests).

/// SplitMix64 (`state += 0x9E3779B97F4A7C15`, then two xor-shift-multiply rounds).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64-bit output.
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// The next output below `n` (`next() % n`; `n` must not be 0).
    #[cfg(test)]
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
