//! A compact set of positions: blocks of 4096 entry ids, each stored as sorted runs or as a
//! bitmap, whichever is smaller (a roaring-style hybrid with run containers).

use std::collections::VecDeque;

use crate::entry::Position;

mod codec;
mod container;

use container::{keep_spare, Bitmap, Container, BLOCK_BITS, BLOCK_SHIFT};

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
}

#[cfg(test)]
mod tests;
