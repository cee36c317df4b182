//! The two forms of a 4096-id block of an [`AckSet`](super::AckSet): sorted runs, or a
//! 512-byte bitmap; and the thresholds that move a block between them.

pub(super) const BLOCK_SHIFT: u32 = 12;
pub(super) const BLOCK_BITS: u64 = 1 << BLOCK_SHIFT;
pub(super) const WORDS: usize = (BLOCK_BITS / 64) as usize;
/// A runs container turns into a bitmap above this many runs (4 bytes per run = 512 bytes).
pub(super) const MAX_RUNS: usize = 128;
/// A bitmap turns back into runs at or below this many runs (hysteresis against flapping).
pub(super) const MIN_RUNS: u32 = 64;
/// The head block (the first block of the first ledger: where acks land right above
/// mark-delete, and where mark-delete moves take runs off) turns into a bitmap above this many
/// runs: a bit test instead of a binary search over the runs per ack, for one 512-byte bitmap.
/// A head bitmap stays one while it is the head: its run count rises and falls with every
/// batch of acks and every mark-delete move, and turning it into runs and back each time cost
/// more than the acks themselves.
pub(super) const HEAD_MAX_RUNS: usize = 16;

/// Equality compares the bits only: `runs` and `len` follow from them, and `lo` is a hint.
#[derive(Clone, Debug)]
pub(super) struct Bitmap {
    pub(super) words: [u64; WORDS],
    /// Number of maximal runs of set bits.
    pub(super) runs: u32,
    /// Number of set bits.
    pub(super) len: u32,
    /// Every bit below this index is clear (a lower bound; 0 is always valid).
    pub(super) lo: u32,
}

impl Bitmap {
    #[inline]
    pub(super) fn bit(&self, i: u32) -> bool {
        self.words[(i >> 6) as usize] & (1u64 << (i & 63)) != 0
    }

    pub(super) fn recount(&mut self) {
        let mut len = 0;
        let mut runs = 0;
        let mut prev_top = false;
        for w in &self.words {
            len += w.count_ones();
            // Run starts: bits set whose lower neighbour is clear.
            let starts = w & !((w << 1) | u64::from(prev_top));
            runs += starts.count_ones();
            prev_top = w >> 63 != 0;
        }
        self.len = len;
        self.runs = runs;
    }

    pub(super) fn to_runs(&self) -> Vec<(u16, u16)> {
        let mut out = Vec::with_capacity(self.runs as usize);
        let mut i: u32 = 0;
        while i < BLOCK_BITS as u32 {
            // Find the next set bit at or after i.
            let wi = (i >> 6) as usize;
            let w = self.words[wi] & (!0u64 << (i & 63));
            if w == 0 {
                i = (wi as u32 + 1) * 64;
                continue;
            }
            let start = wi as u32 * 64 + w.trailing_zeros();
            let end = self.run_end(start);
            out.push((start as u16, end as u16));
            i = end + 1;
        }
        out
    }

    /// Clears every bit `<= i`; returns how many were set. Scans only the words from `lo` to
    /// `i`'s, and keeps `len` and `runs` exact without a recount: a mark-delete move clears the
    /// run it absorbed, so this costs about that run's words.
    pub(super) fn clear_through(&mut self, i: u32) -> u32 {
        if self.lo > i {
            return 0;
        }
        // A run crossing `i` loses its start below `i + 1` but goes on from `i + 1`.
        let straddle = self.bit(i) && i + 1 < BLOCK_BITS as u32 && self.bit(i + 1);
        let hi = (i >> 6) as usize;
        let (mut removed, mut starts, mut carry) = (0u32, 0u32, 0u64);
        // The word before `lo`'s is clear (below `lo`), so the carry into it is 0.
        for wi in (self.lo >> 6) as usize..=hi {
            let w = self.words[wi];
            let mask = if wi < hi || i & 63 == 63 {
                !0u64
            } else {
                (1u64 << ((i & 63) + 1)) - 1
            };
            let run_starts = w & !((w << 1) | carry);
            removed += (w & mask).count_ones();
            starts += (run_starts & mask).count_ones();
            carry = w >> 63;
            self.words[wi] = w & !mask;
        }
        self.len -= removed;
        self.runs -= starts - u32::from(straddle);
        self.lo = i + 1;
        removed
    }

    /// The last index of the run of set bits that contains `i` (bit `i` must be set).
    pub(super) fn run_end(&self, i: u32) -> u32 {
        let mut wi = (i >> 6) as usize;
        let mut inv = !self.words[wi] & (!0u64 << (i & 63));
        loop {
            if inv != 0 {
                return wi as u32 * 64 + inv.trailing_zeros() - 1;
            }
            wi += 1;
            if wi == WORDS {
                return BLOCK_BITS as u32 - 1;
            }
            inv = !self.words[wi];
        }
    }

    /// An empty bitmap.
    pub(super) fn empty() -> Box<Bitmap> {
        Box::new(Bitmap {
            words: [0; WORDS],
            runs: 0,
            len: 0,
            lo: 0,
        })
    }

    pub(super) fn from_runs(runs: &[(u16, u16)]) -> Box<Bitmap> {
        let mut b = Bitmap::empty();
        for &(s, e) in runs {
            for i in u32::from(s)..=u32::from(e) {
                b.words[(i >> 6) as usize] |= 1u64 << (i & 63);
            }
        }
        b.recount();
        b
    }
}

/// Equality is of the positions held, whichever form holds them (the form depends on the
/// block's history: the head block's thresholds, the hysteresis between the two).
#[derive(Clone, Debug)]
pub(super) enum Container {
    /// Sorted, disjoint, non-adjacent inclusive runs.
    Runs(Vec<(u16, u16)>),
    Bitmap(Box<Bitmap>),
}

impl PartialEq for Bitmap {
    fn eq(&self, other: &Self) -> bool {
        self.words == other.words
    }
}

impl Eq for Bitmap {}

impl PartialEq for Container {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Container::Runs(a), Container::Runs(b)) => a == b,
            (Container::Bitmap(a), Container::Bitmap(b)) => a == b,
            (Container::Runs(r), Container::Bitmap(b))
            | (Container::Bitmap(b), Container::Runs(r)) => *r == b.to_runs(),
        }
    }
}

impl Eq for Container {}

impl Container {
    pub(super) fn len(&self) -> u64 {
        match self {
            Container::Runs(r) => r
                .iter()
                .map(|&(s, e)| u64::from(e) - u64::from(s) + 1)
                .sum(),
            Container::Bitmap(b) => u64::from(b.len),
        }
    }

    #[inline]
    pub(super) fn contains(&self, i: u32) -> bool {
        match self {
            Container::Runs(r) => {
                let idx = r.partition_point(|&(s, _)| u32::from(s) <= i);
                idx > 0 && u32::from(r[idx - 1].1) >= i
            }
            Container::Bitmap(b) => b.bit(i),
        }
    }

    /// Inserts `i`; returns whether it was new. `head`: this is the head block (see
    /// [`HEAD_MAX_RUNS`]), which turns into a bitmap at fewer runs and never back.
    #[inline]
    pub(super) fn insert(&mut self, i: u32, head: bool) -> bool {
        match self {
            Container::Runs(r) => {
                let idx = r.partition_point(|&(s, _)| u32::from(s) <= i);
                if idx > 0 && u32::from(r[idx - 1].1) >= i {
                    return false;
                }
                let left = idx > 0 && u32::from(r[idx - 1].1) + 1 == i;
                let right = idx < r.len() && u32::from(r[idx].0) == i + 1;
                match (left, right) {
                    (true, true) => {
                        r[idx - 1].1 = r[idx].1;
                        r.remove(idx);
                    }
                    (true, false) => r[idx - 1].1 = i as u16,
                    (false, true) => r[idx].0 = i as u16,
                    (false, false) => {
                        r.insert(idx, (i as u16, i as u16));
                        if r.len() > MAX_RUNS || (head && r.len() > HEAD_MAX_RUNS) {
                            *self = Container::Bitmap(Bitmap::from_runs(r));
                        }
                    }
                }
                true
            }
            Container::Bitmap(b) => {
                if b.bit(i) {
                    return false;
                }
                let left = i > 0 && b.bit(i - 1);
                let right = i + 1 < BLOCK_BITS as u32 && b.bit(i + 1);
                b.words[(i >> 6) as usize] |= 1u64 << (i & 63);
                b.len += 1;
                if i < b.lo {
                    b.lo = i;
                }
                b.runs = b.runs + 1 - u32::from(left) - u32::from(right);
                if !head && b.runs <= MIN_RUNS {
                    *self = Container::Runs(b.to_runs());
                }
                true
            }
        }
    }

    /// The end of the run containing `i` (which must be in the set).
    pub(super) fn run_end(&self, i: u32) -> u32 {
        match self {
            Container::Runs(r) => {
                let idx = r.partition_point(|&(s, _)| u32::from(s) <= i);
                if idx == 0 {
                    return i;
                }
                u32::from(r[idx - 1].1).max(i)
            }
            Container::Bitmap(b) => b.run_end(i),
        }
    }

    /// Removes every element `<= i`; returns how many were removed. Only ever called on the
    /// head block (the one a mark-delete move ends in), so a bitmap stays a bitmap.
    pub(super) fn remove_through(&mut self, i: u32) -> u64 {
        let before = self.len();
        match self {
            Container::Runs(r) => {
                let keep_from = r.partition_point(|&(_, e)| u32::from(e) <= i);
                r.drain(..keep_from);
                if let Some(first) = r.first_mut() {
                    if u32::from(first.0) <= i {
                        first.0 = (i + 1) as u16;
                    }
                }
            }
            Container::Bitmap(b) => {
                b.clear_through(i);
            }
        }
        before - self.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        match self {
            Container::Runs(r) => r.is_empty(),
            Container::Bitmap(b) => b.len == 0,
        }
    }

    pub(super) fn runs(&self) -> Vec<(u16, u16)> {
        match self {
            Container::Runs(r) => r.clone(),
            Container::Bitmap(b) => b.to_runs(),
        }
    }
}

/// Keeps `c`'s bitmap, cleared, as the spare when there is none yet.
pub(super) fn keep_spare(spare: &mut Option<Box<Bitmap>>, c: Container) {
    if let (None, Container::Bitmap(mut b)) = (&spare, c) {
        if b.len != 0 {
            b.words = [0; WORDS];
        }
        b.len = 0;
        b.runs = 0;
        b.lo = BLOCK_BITS as u32;
        *spare = Some(b);
    }
}
