//! One ledger id's entries, in a compact layout: per entry its size (4 bytes) and message count
//! (2 bytes); running totals every [`BLOCK`] entries; the metadata of the newest entries only.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use crate::entry::{Backlog, EntryMeta, Position};

/// Entries per running-totals checkpoint. A range total sums at most two partial blocks
/// entry by entry (under `2 * BLOCK` additions) and takes the rest from the checkpoints.
const BLOCK: u64 = 64;

/// A message count stored in `msgs` as this value lives in `big_msgs`.
const BIG: u16 = u16::MAX;

/// Makes room for one more element: doubling up to 4,096, then 4,096 more at a time. A ledger
/// of tens of thousands of entries then ends with at most 4,095 spare slots, instead of up to
/// its size again; the spare capacity a complete ledger gives back (`shrink`) would otherwise
/// stay behind as holes in the heap, which the next ledgers' growth only partly fills.
fn room<T>(v: &mut VecDeque<T>) {
    if v.len() == v.capacity() {
        v.reserve_exact(v.len().clamp(16, 4096));
    }
}

/// The entries of one ledger id that still exist, `[base, end)`.
#[derive(Clone, Debug)]
pub(super) struct Segment {
    pub(super) id: u64,
    /// Entries ever appended to this ledger: the existing ones are `[base, end)`.
    end: u64,
    /// The first existing entry id (entries below were trimmed, or never restored).
    pub(super) base: u64,
    /// Payload bytes of each existing entry, from `base`.
    sizes: VecDeque<u32>,
    /// Message count of each existing entry, from `base` ([`BIG`]: see `big_msgs`).
    msgs: VecDeque<u16>,
    /// Message counts of [`BIG`] or more, by entry id.
    big_msgs: BTreeMap<u64, u32>,
    /// `ckpt[k]`: (messages, bytes) of entries `[0, k * BLOCK)` (entries before the segment's
    /// first restored entry count as empty). Only differences are used, and only between
    /// checkpoints at or above the first entry a total covers.
    ckpt: Vec<(u64, u64)>,
    /// (messages, bytes) of entries `[0, end)`, counted as `ckpt` is.
    running: (u64, u64),
    /// The first entry whose metadata is kept: `metas` holds `[kept_from, end)`.
    pub(super) kept_from: u64,
    metas: VecDeque<Arc<EntryMeta>>,
}

impl Segment {
    /// An empty ledger `id` whose first entry will be `base` (0 for a new ledger; a restored
    /// ledger may start later).
    pub(super) fn starting_at(id: u64, base: u64) -> Segment {
        let blocks = usize::try_from(base.div_ceil(BLOCK)).unwrap_or(0);
        Segment {
            id,
            end: base,
            base,
            sizes: VecDeque::new(),
            msgs: VecDeque::new(),
            big_msgs: BTreeMap::new(),
            ckpt: vec![(0, 0); blocks],
            running: (0, 0),
            kept_from: base,
            metas: VecDeque::new(),
        }
    }

    /// One past the last entry id.
    #[inline]
    pub(super) fn end(&self) -> u64 {
        self.end
    }

    /// Existing entries.
    #[inline]
    pub(super) fn len(&self) -> u64 {
        self.end - self.base
    }

    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.end == self.base
    }

    #[inline]
    pub(super) fn first(&self) -> Option<Position> {
        (!self.is_empty()).then(|| Position::new(self.id, self.base))
    }

    #[inline]
    pub(super) fn contains(&self, entry_id: u64) -> bool {
        entry_id >= self.base && entry_id < self.end
    }

    /// Appends the next entry (id `end`), keeping its metadata.
    pub(super) fn push(&mut self, meta: Arc<EntryMeta>) -> Position {
        let e = self.end;
        if e.is_multiple_of(BLOCK) {
            self.ckpt.push(self.running);
        }
        room(&mut self.msgs);
        room(&mut self.sizes);
        let messages = meta.messages();
        let small = u16::try_from(messages).ok().filter(|m| *m != BIG);
        self.msgs.push_back(small.unwrap_or(BIG));
        if small.is_none() {
            self.big_msgs.insert(e, messages);
        }
        self.sizes.push_back(meta.size);
        self.running.0 += u64::from(messages);
        self.running.1 += u64::from(meta.size);
        self.metas.push_back(meta);
        self.end += 1;
        Position::new(self.id, e)
    }

    /// `(messages, bytes)` of the existing entry `e` (the caller checked it exists).
    #[inline]
    fn value(&self, e: u64) -> (u64, u64) {
        let i = (e - self.base) as usize;
        let m = match self.msgs[i] {
            BIG => self.big_msgs.get(&e).copied().unwrap_or(u32::from(BIG)),
            m => u32::from(m),
        };
        (u64::from(m), u64::from(self.sizes[i]))
    }

    /// One entry's figures, if it exists.
    #[inline]
    pub(super) fn stats(&self, e: u64) -> Option<Backlog> {
        if !self.contains(e) {
            return None;
        }
        let (messages, bytes) = self.value(e);
        Some(Backlog {
            entries: 1,
            messages,
            bytes,
        })
    }

    /// Sum of the existing entries `[a, b)`, entry by entry.
    fn sum(&self, a: u64, b: u64) -> (u64, u64) {
        (a..b).fold((0, 0), |(m, s), e| {
            let (em, es) = self.value(e);
            (m + em, s + es)
        })
    }

    /// Running totals at checkpoint `k` (`k * BLOCK <= end`).
    fn at_block(&self, k: u64) -> (u64, u64) {
        match usize::try_from(k).ok().and_then(|k| self.ckpt.get(k)) {
            Some(c) => *c,
            None => self.running,
        }
    }

    /// Totals of existing entries with `lo <= id <= hi`.
    pub(super) fn totals(&self, lo: u64, hi: u64) -> Backlog {
        let a = lo.max(self.base);
        let b = hi.saturating_add(1).min(self.end);
        if a >= b {
            return Backlog::default();
        }
        let (first_full, last_full) = (a.div_ceil(BLOCK), b / BLOCK);
        let (messages, bytes) = if first_full >= last_full {
            self.sum(a, b)
        } else {
            let head = self.sum(a, first_full * BLOCK);
            let tail = self.sum(last_full * BLOCK, b);
            let (hi_m, hi_b) = self.at_block(last_full);
            let (lo_m, lo_b) = self.at_block(first_full);
            (
                head.0 + (hi_m - lo_m) + tail.0,
                head.1 + (hi_b - lo_b) + tail.1,
            )
        };
        Backlog {
            entries: b - a,
            messages,
            bytes,
        }
    }

    /// The kept metadata of entry `e`, if it exists and is kept.
    #[inline]
    pub(super) fn kept(&self, e: u64) -> Option<&Arc<EntryMeta>> {
        if e < self.kept_from {
            return None;
        }
        self.metas.get(usize::try_from(e - self.kept_from).ok()?)
    }

    /// Entries whose metadata is kept.
    pub(super) fn kept_len(&self) -> usize {
        self.metas.len()
    }

    /// Drops the oldest kept metadata; false when none is kept.
    pub(super) fn drop_oldest_kept(&mut self) -> bool {
        if self.metas.pop_front().is_none() {
            return false;
        }
        self.kept_from += 1;
        true
    }

    /// Takes the entries `[base, base + n)` out as a segment of their own (same id, same
    /// positions); this segment keeps the rest.
    pub(super) fn split_front(&mut self, n: u64) -> Segment {
        let n = n.min(self.len());
        let cut = self.base + n;
        let k = usize::try_from(cut.saturating_sub(self.kept_from))
            .unwrap_or(usize::MAX)
            .min(self.metas.len());
        let big_rest = self.big_msgs.split_off(&cut);
        // The checkpoints of the blocks that start before `cut`.
        let blocks = usize::try_from(cut.div_ceil(BLOCK)).unwrap_or(usize::MAX);
        let mut part = Segment {
            id: self.id,
            end: cut,
            base: self.base,
            sizes: self.sizes.drain(..n as usize).collect(),
            msgs: self.msgs.drain(..n as usize).collect(),
            big_msgs: std::mem::replace(&mut self.big_msgs, big_rest),
            ckpt: self.ckpt[..blocks.min(self.ckpt.len())].to_vec(),
            running: (0, 0),
            kept_from: self.kept_from.min(cut),
            metas: self.metas.drain(..k).collect(),
        };
        // The part's running totals: its last checkpoint plus the entries after it (only
        // those at or above its base exist; see `ckpt`).
        let last = (part.ckpt.len() as u64).saturating_sub(1);
        let from = (last * BLOCK).max(part.base);
        let tail = part.sum(from.min(cut), cut);
        let c = part.ckpt.last().copied().unwrap_or((0, 0));
        part.running = (c.0 + tail.0, c.1 + tail.1);
        self.base = cut;
        self.kept_from = self.kept_from.max(cut);
        part
    }

    /// Gives back the spare capacity of a ledger that is complete (no more appends).
    pub(super) fn shrink(&mut self) {
        self.sizes.shrink_to_fit();
        self.msgs.shrink_to_fit();
        self.ckpt.shrink_to_fit();
        self.metas.shrink_to_fit();
    }
}
