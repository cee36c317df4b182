//! A compact set of positions: blocks of 4096 entry ids, each stored as sorted runs or as a
//! bitmap, whichever is smaller (a roaring-style hybrid with run containers).

use std::collections::VecDeque;

use crate::codec::{DecodeError, Reader, Writer};
use crate::entry::Position;

const BLOCK_SHIFT: u32 = 12;
const BLOCK_BITS: u64 = 1 << BLOCK_SHIFT;
const WORDS: usize = (BLOCK_BITS / 64) as usize;
/// A runs container turns into a bitmap above this many runs (4 bytes per run = 512 bytes).
const MAX_RUNS: usize = 128;
/// A bitmap turns back into runs at or below this many runs (hysteresis against flapping).
const MIN_RUNS: u32 = 64;
/// The head block (the first block of the first ledger: where acks land right above
/// mark-delete, and where mark-delete moves take runs off) turns into a bitmap above this many
/// runs: a bit test instead of a binary search over the runs per ack, for one 512-byte bitmap.
/// A head bitmap stays one while it is the head: its run count rises and falls with every
/// batch of acks and every mark-delete move, and turning it into runs and back each time cost
/// more than the acks themselves.
const HEAD_MAX_RUNS: usize = 16;

/// Equality compares the bits only: `runs` and `len` follow from them, and `lo` is a hint.
#[derive(Clone, Debug)]
struct Bitmap {
    words: [u64; WORDS],
    /// Number of maximal runs of set bits.
    runs: u32,
    /// Number of set bits.
    len: u32,
    /// Every bit below this index is clear (a lower bound; 0 is always valid).
    lo: u32,
}

impl Bitmap {
    #[inline]
    fn bit(&self, i: u32) -> bool {
        self.words[(i >> 6) as usize] & (1u64 << (i & 63)) != 0
    }

    fn recount(&mut self) {
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

    fn to_runs(&self) -> Vec<(u16, u16)> {
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
    fn clear_through(&mut self, i: u32) -> u32 {
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
    fn run_end(&self, i: u32) -> u32 {
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
    fn empty() -> Box<Bitmap> {
        Box::new(Bitmap {
            words: [0; WORDS],
            runs: 0,
            len: 0,
            lo: 0,
        })
    }

    fn from_runs(runs: &[(u16, u16)]) -> Box<Bitmap> {
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
enum Container {
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
    fn len(&self) -> u64 {
        match self {
            Container::Runs(r) => r
                .iter()
                .map(|&(s, e)| u64::from(e) - u64::from(s) + 1)
                .sum(),
            Container::Bitmap(b) => u64::from(b.len),
        }
    }

    #[inline]
    fn contains(&self, i: u32) -> bool {
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
    fn insert(&mut self, i: u32, head: bool) -> bool {
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
    fn run_end(&self, i: u32) -> u32 {
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
    fn remove_through(&mut self, i: u32) -> u64 {
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

    fn is_empty(&self) -> bool {
        match self {
            Container::Runs(r) => r.is_empty(),
            Container::Bitmap(b) => b.len == 0,
        }
    }

    fn runs(&self) -> Vec<(u16, u16)> {
        match self {
            Container::Runs(r) => r.clone(),
            Container::Bitmap(b) => b.to_runs(),
        }
    }
}

/// A set of positions whose memory and persisted size scale with the number of ranges (holes),
/// capped at one bit per position of the span it covers.
///
/// Positions are grouped per ledger into blocks of 4096 entry ids; a block is a sorted list of
/// runs (4 bytes per run) until it has more than 128 runs, then a 512-byte bitmap. The cursor
/// uses it for the positions acked above mark-delete.
///
/// ```
/// use cursor::{AckSet, Position};
/// let mut s = AckSet::new();
/// assert!(s.insert(Position::new(1, 5)));
/// assert!(s.insert(Position::new(1, 6)));
/// assert!(!s.insert(Position::new(1, 6)));
/// assert_eq!(s.ranges(), vec![(Position::new(1, 5), Position::new(1, 6))]);
/// ```
#[derive(Debug, Default)]
pub struct AckSet {
    /// Per ledger, sorted by ledger id; never an empty `Blocks`.
    ledgers: Vec<Blocks>,
    len: u64,
    /// A cleared bitmap kept from the last bitmap block dropped, for the next head block: the
    /// head empties and refills with every mark-delete move that catches up with the acks.
    spare: Option<Box<Bitmap>>,
}

/// Equality is of the positions held (the spare bitmap holds none).
impl PartialEq for AckSet {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.ledgers == other.ledgers
    }
}

impl Eq for AckSet {}

/// A clone holds the same positions, without the spare bitmap.
impl Clone for AckSet {
    fn clone(&self) -> Self {
        AckSet {
            ledgers: self.ledgers.clone(),
            len: self.len,
            spare: None,
        }
    }
}

/// Keeps `c`'s bitmap, cleared, as the spare when there is none yet.
fn keep_spare(spare: &mut Option<Box<Bitmap>>, c: Container) {
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

/// One ledger's non-empty blocks, sorted by block number (binary search on contiguous keys is
/// much faster than a tree walk on the ack path; blocks are created and dropped rarely).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Blocks {
    ledger_id: u64,
    blocks: VecDeque<(u64, Container)>,
}

/// Index of block `b` (or where it would go). Blocks are usually dense, so the slot at
/// `b - first` is tried before a binary search.
#[inline(always)]
fn find_block(blocks: &VecDeque<(u64, Container)>, b: u64) -> Result<usize, usize> {
    if let Some((first, _)) = blocks.front() {
        if let Some(guess) = b.checked_sub(*first) {
            if let Some((gb, _)) = usize::try_from(guess).ok().and_then(|g| blocks.get(g)) {
                if *gb == b {
                    return Ok(guess as usize);
                }
            }
        }
    }
    blocks.binary_search_by_key(&b, |(x, _)| *x)
}

/// One block's runs: kind 0, the count, then each run as (gap from the last end, length - 1).
fn encode_runs(w: &mut Writer, runs: &[(u16, u16)]) {
    w.byte(0);
    w.varint(runs.len() as u64);
    let mut next_free = 0u64;
    for &(s, e) in runs {
        w.varint(u64::from(s) - next_free);
        w.varint(u64::from(e - s));
        next_free = u64::from(e) + 1;
    }
}

#[inline]
fn split(p: Position) -> ((u64, u64), u32) {
    (
        (p.ledger_id, p.entry_id >> BLOCK_SHIFT),
        (p.entry_id & (BLOCK_BITS - 1)) as u32,
    )
}

impl AckSet {
    #[inline]
    fn ledger_idx(&self, l: u64) -> Result<usize, usize> {
        // Usually one or two ledgers: check the last one first.
        match self.ledgers.last() {
            Some(b) if b.ledger_id == l => Ok(self.ledgers.len() - 1),
            _ => self.ledgers.binary_search_by_key(&l, |b| b.ledger_id),
        }
    }

    #[inline]
    fn block(&self, k: (u64, u64)) -> Option<&Container> {
        let lb = &self.ledgers[self.ledger_idx(k.0).ok()?];
        let i = find_block(&lb.blocks, k.1).ok()?;
        Some(&lb.blocks[i].1)
    }

    fn iter_blocks(&self) -> impl Iterator<Item = ((u64, u64), &Container)> + '_ {
        self.ledgers
            .iter()
            .flat_map(|lb| lb.blocks.iter().map(move |(b, c)| ((lb.ledger_id, *b), c)))
    }

    /// An empty set.
    pub fn new() -> Self {
        AckSet::default()
    }

    /// Number of positions in the set.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `p` is in the set.
    #[inline]
    pub fn contains(&self, p: Position) -> bool {
        let (k, i) = split(p);
        self.block(k).is_some_and(|c| c.contains(i))
    }

    /// Adds `p`; returns whether it was not there before.
    #[inline]
    pub fn insert(&mut self, p: Position) -> bool {
        let (k, i) = split(p);
        let li = match self.ledger_idx(k.0) {
            Ok(li) => li,
            Err(li) => {
                self.ledgers.insert(
                    li,
                    Blocks {
                        ledger_id: k.0,
                        blocks: VecDeque::new(),
                    },
                );
                li
            }
        };
        let blocks = &mut self.ledgers[li].blocks;
        let bi = match find_block(blocks, k.1) {
            Ok(bi) => bi,
            Err(bi) => {
                // A new head block takes the spare bitmap (see `HEAD_MAX_RUNS`).
                let c = match (li, bi, self.spare.take()) {
                    (0, 0, Some(b)) => Container::Bitmap(b),
                    (_, _, spare) => {
                        self.spare = spare;
                        Container::Runs(Vec::new())
                    }
                };
                blocks.insert(bi, (k.1, c));
                bi
            }
        };
        let new = blocks[bi].1.insert(i, li == 0 && bi == 0);
        self.len += u64::from(new);
        new
    }

    /// The smallest position in the set.
    #[inline]
    pub fn first(&self) -> Option<Position> {
        let ((l, b), c) = self.iter_blocks().next()?;
        let i = match c {
            Container::Runs(r) => u64::from(r.first()?.0),
            Container::Bitmap(bm) => {
                // No bit below `lo` is set: start there.
                let from = (bm.lo >> 6) as usize;
                let (wi, w) = bm
                    .words
                    .iter()
                    .enumerate()
                    .skip(from)
                    .find(|(_, w)| **w != 0)?;
                wi as u64 * 64 + u64::from(w.trailing_zeros())
            }
        };
        Some(Position::new(l, (b << BLOCK_SHIFT) + i))
    }

    /// The largest position in the set.
    #[inline]
    pub fn last(&self) -> Option<Position> {
        let lb = self.ledgers.last()?;
        let (b, c) = lb.blocks.back()?;
        let i = match c {
            Container::Runs(r) => u64::from(r.last()?.1),
            Container::Bitmap(bm) => {
                let (wi, w) = bm.words.iter().enumerate().rev().find(|(_, w)| **w != 0)?;
                wi as u64 * 64 + 63 - u64::from(w.leading_zeros())
            }
        };
        Some(Position::new(lb.ledger_id, (b << BLOCK_SHIFT) + i))
    }

    /// For `p` in the set: the last position `q >= p` in the same ledger such that every entry
    /// id from `p` to `q` is in the set. `None` when `p` is not in the set.
    pub fn run_end(&self, p: Position) -> Option<Position> {
        let (mut k, i) = split(p);
        let c = self.block(k)?;
        if !c.contains(i) {
            return None;
        }
        let mut end = c.run_end(i);
        loop {
            if u64::from(end) != BLOCK_BITS - 1 {
                return Some(Position::new(k.0, (k.1 << BLOCK_SHIFT) + u64::from(end)));
            }
            let Some(nk) = k.1.checked_add(1).map(|b| (k.0, b)) else {
                return Some(Position::new(k.0, (k.1 << BLOCK_SHIFT) + u64::from(end)));
            };
            match self.block(nk) {
                Some(nc) if nc.contains(0) => {
                    k = nk;
                    end = nc.run_end(0);
                }
                _ => return Some(Position::new(k.0, (k.1 << BLOCK_SHIFT) + u64::from(end))),
            }
        }
    }

    /// Removes every position `<= p`; returns how many were removed.
    pub fn remove_through(&mut self, p: Position) -> u64 {
        let (pk, pi) = split(p);
        let mut removed = 0;
        while let Some(lb) = self.ledgers.first_mut() {
            if lb.ledger_id > pk.0 {
                break;
            }
            let whole_ledger = lb.ledger_id < pk.0;
            while let Some((b, c)) = lb.blocks.front_mut() {
                if !whole_ledger && *b > pk.1 {
                    break;
                }
                if whole_ledger || *b < pk.1 {
                    removed += c.len();
                    if let Some((_, c)) = lb.blocks.pop_front() {
                        keep_spare(&mut self.spare, c);
                    }
                    continue;
                }
                removed += c.remove_through(pi);
                if c.is_empty() {
                    if let Some((_, c)) = lb.blocks.pop_front() {
                        keep_spare(&mut self.spare, c);
                    }
                }
                break;
            }
            if lb.blocks.is_empty() {
                self.ledgers.remove(0);
            }
            if !whole_ledger {
                break;
            }
        }
        self.len -= removed;
        removed
    }

    /// Test check: every bitmap's run and bit counts match a recount, and no bit is below its
    /// `lo` bound.
    #[cfg(test)]
    fn check_bitmaps(&self) {
        for lb in &self.ledgers {
            for (b, c) in &lb.blocks {
                if let Container::Bitmap(bm) = c {
                    let mut fresh = bm.clone();
                    fresh.recount();
                    assert_eq!((bm.runs, bm.len), (fresh.runs, fresh.len), "block {b}");
                    assert!(
                        (0..bm.lo.min(BLOCK_BITS as u32)).all(|i| !bm.bit(i)),
                        "lo {}",
                        bm.lo
                    );
                }
            }
        }
    }

    /// Removes everything.
    pub fn clear(&mut self) {
        self.ledgers.clear();
        self.len = 0;
    }

    /// The set as inclusive ranges `(first, last)`, in order; a range never spans two ledgers.
    pub fn ranges(&self) -> Vec<(Position, Position)> {
        let mut out: Vec<(Position, Position)> = Vec::new();
        for ((l, b), c) in self.iter_blocks() {
            let base = b << BLOCK_SHIFT;
            for (s, e) in c.runs() {
                let s = Position::new(l, base + u64::from(s));
                let e = Position::new(l, base + u64::from(e));
                match out.last_mut() {
                    Some(last) if last.1.ledger_id == l && last.1.entry_id + 1 == s.entry_id => {
                        last.1 = e;
                    }
                    _ => out.push((s, e)),
                }
            }
        }
        out
    }

    /// The ranges that intersect `(.., through]`, clipped at `through`.
    pub(crate) fn ranges_through(&self, through: Position) -> Vec<(Position, Position)> {
        let (tk, _) = split(through);
        let mut out: Vec<(Position, Position)> = Vec::new();
        for ((l, b), c) in self.iter_blocks().take_while(|(k, _)| *k <= tk) {
            let base = b << BLOCK_SHIFT;
            for (s, e) in c.runs() {
                let s = Position::new(l, base + u64::from(s));
                if s > through {
                    break;
                }
                let e = Position::new(l, base + u64::from(e)).min(through);
                out.push((s, e));
            }
        }
        out
    }

    /// Number of 4096-id blocks held (each a run list or a bitmap): a rough measure of size.
    pub fn containers(&self) -> usize {
        self.ledgers.iter().map(|lb| lb.blocks.len()).sum()
    }

    pub(crate) fn encode(&self, w: &mut Writer) {
        // Per ledger: ledger id delta, block count; per block: block delta, kind, contents.
        let mut ledgers: Vec<(u64, Vec<(u64, &Container)>)> = Vec::new();
        for ((l, b), c) in self.iter_blocks() {
            match ledgers.last_mut() {
                Some((ll, v)) if *ll == l => v.push((b, c)),
                _ => ledgers.push((l, vec![(b, c)])),
            }
        }
        w.varint(ledgers.len() as u64);
        let mut prev_l = 0;
        for (l, blocks) in &ledgers {
            w.varint(l - prev_l);
            prev_l = *l;
            w.varint(blocks.len() as u64);
            let mut prev_b = 0;
            for (b, c) in blocks {
                w.varint(b - prev_b);
                prev_b = *b;
                match c {
                    Container::Runs(r) => encode_runs(w, r),
                    // A bitmap with few runs (the head keeps its bitmap) is written as runs,
                    // so the encoding follows the contents, not the form.
                    Container::Bitmap(bm) if bm.runs <= MIN_RUNS => {
                        encode_runs(w, &bm.to_runs());
                    }
                    Container::Bitmap(bm) => {
                        w.byte(1);
                        for word in &bm.words {
                            w.bytes(&word.to_le_bytes());
                        }
                    }
                }
            }
        }
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<AckSet, DecodeError> {
        let mut set = AckSet::new();
        let n_ledgers = r.varint()?;
        let mut l = 0u64;
        for li in 0..n_ledgers {
            let d = r.varint()?;
            if li > 0 && d == 0 {
                return Err(r.error("ledger ids not increasing"));
            }
            l = l
                .checked_add(d)
                .ok_or_else(|| r.error("ledger id overflow"))?;
            let n_blocks = r.varint()?;
            if n_blocks == 0 {
                return Err(r.error("ledger without blocks"));
            }
            let mut b = 0u64;
            for bi in 0..n_blocks {
                let d = r.varint()?;
                if bi > 0 && d == 0 {
                    return Err(r.error("block ids not increasing"));
                }
                b = b
                    .checked_add(d)
                    .ok_or_else(|| r.error("block id overflow"))?;
                if b > (u64::MAX >> BLOCK_SHIFT) {
                    return Err(r.error("block id out of range"));
                }
                let c = match r.byte()? {
                    0 => {
                        let n = r.varint()?;
                        if n == 0 || n > BLOCK_BITS / 2 {
                            return Err(r.error("bad run count"));
                        }
                        let mut runs = Vec::with_capacity(n as usize);
                        let mut next_free = 0u64;
                        for _ in 0..n {
                            let s = next_free
                                .checked_add(r.varint()?)
                                .ok_or_else(|| r.error("run start overflow"))?;
                            let e = s
                                .checked_add(r.varint()?)
                                .ok_or_else(|| r.error("run end overflow"))?;
                            if e >= BLOCK_BITS || (next_free > 0 && s == next_free) {
                                return Err(r.error("run out of range or adjacent"));
                            }
                            runs.push((s as u16, e as u16));
                            next_free = e + 1;
                        }
                        if runs.len() > MAX_RUNS {
                            Container::Bitmap(Bitmap::from_runs(&runs))
                        } else {
                            Container::Runs(runs)
                        }
                    }
                    1 => {
                        let mut bm = Bitmap::empty();
                        for w in bm.words.iter_mut() {
                            let bytes = r.take(8)?;
                            let mut a = [0u8; 8];
                            a.copy_from_slice(bytes);
                            *w = u64::from_le_bytes(a);
                        }
                        bm.recount();
                        if bm.len == 0 {
                            return Err(r.error("empty bitmap block"));
                        }
                        if bm.runs <= MIN_RUNS {
                            Container::Runs(bm.to_runs())
                        } else {
                            Container::Bitmap(bm)
                        }
                    }
                    _ => return Err(r.error("unknown block kind")),
                };
                set.len += c.len();
                match set.ledgers.last_mut() {
                    Some(lb) if lb.ledger_id == l => lb.blocks.push_back((b, c)),
                    _ => set.ledgers.push(Blocks {
                        ledger_id: l,
                        blocks: VecDeque::from([(b, c)]),
                    }),
                }
            }
        }
        Ok(set)
    }
}

#[cfg(test)]
mod tests;
