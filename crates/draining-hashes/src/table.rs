//! Storage for draining entries: a paged, directly indexed table for hashes below
//! [`DENSE_LIMIT`] and a small hash map for anything larger.
//!
//! Sticky-key hashes live in `[1, 65535]`, so the dense part covers every hash a dispatcher
//! produces. Pages of [`PAGE_SLOTS`] slots are allocated on first use and freed when their last
//! entry goes, so memory follows the number of regions that drain, not the hash space. Larger
//! hashes (a caller with its own hash function) still work through the overflow map.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::tracker::DrainingEntry;

/// Bits of hash covered by the dense table. Loom builds use a small dense range so models create
/// few atomics; the overflow path is the same code either way.
#[cfg(not(feature = "loom"))]
pub(crate) const DENSE_BITS: u32 = 16;
#[cfg(feature = "loom")]
pub(crate) const DENSE_BITS: u32 = 8;

/// Hashes below this go to the dense table (and the lock-free occupancy bitmap).
pub(crate) const DENSE_LIMIT: u32 = 1 << DENSE_BITS;

const PAGE_BITS: u32 = 8;
/// Slots per lazily allocated page.
pub(crate) const PAGE_SLOTS: usize = 1 << PAGE_BITS;
const PAGES: usize = (DENSE_LIMIT as usize) >> PAGE_BITS;

/// A multiply-rotate hasher for small keys (hashes, consumer ids): one multiply per word, no
/// per-process seed. Only our own integer keys go through it, so flooding is not a concern.
#[derive(Default, Clone, Copy)]
pub(crate) struct FxHasher {
    state: u64,
}

const FX_K: u64 = 0xF135_7AEA_2E62_A9C5;

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.state = (self.state.rotate_left(5) ^ word).wrapping_mul(FX_K);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn finish(&self) -> u64 {
        // Move the well-mixed high bits down, where the table takes its bucket index.
        self.state.rotate_left(26)
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(w));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
}

/// `BuildHasher` for [`FxHasher`].
pub(crate) type FxBuild = BuildHasherDefault<FxHasher>;

struct Page<C> {
    live: usize,
    /// Inline in the page's allocation: a look-up follows one pointer (the page's), not two.
    slots: [Option<DrainingEntry<C>>; PAGE_SLOTS],
}

/// hash → draining entry.
pub(crate) struct Table<C> {
    pages: Box<[Option<Box<Page<C>>>]>,
    overflow: HashMap<u32, DrainingEntry<C>, FxBuild>,
    len: usize,
}

#[inline]
fn split(hash: u32) -> (usize, usize) {
    (
        (hash >> PAGE_BITS) as usize,
        (hash as usize) & (PAGE_SLOTS - 1),
    )
}

impl<C: Copy + Eq> Table<C> {
    pub(crate) fn new() -> Self {
        Table {
            pages: (0..PAGES).map(|_| None).collect(),
            overflow: HashMap::default(),
            len: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub(crate) fn get(&self, hash: u32) -> Option<&DrainingEntry<C>> {
        if hash < DENSE_LIMIT {
            let (p, s) = split(hash);
            self.pages.get(p)?.as_ref()?.slots.get(s)?.as_ref()
        } else {
            self.overflow.get(&hash)
        }
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, hash: u32) -> Option<&mut DrainingEntry<C>> {
        if hash < DENSE_LIMIT {
            let (p, s) = split(hash);
            self.pages.get_mut(p)?.as_mut()?.slots.get_mut(s)?.as_mut()
        } else {
            self.overflow.get_mut(&hash)
        }
    }

    /// Inserts `entry` at `hash`, which the caller has checked is vacant.
    #[inline]
    pub(crate) fn insert_vacant(&mut self, hash: u32, entry: DrainingEntry<C>) {
        if hash < DENSE_LIMIT {
            let (p, s) = split(hash);
            let Some(page_slot) = self.pages.get_mut(p) else {
                return;
            };
            let page = page_slot.get_or_insert_with(|| {
                Box::new(Page {
                    live: 0,
                    slots: [None; PAGE_SLOTS],
                })
            });
            if let Some(slot) = page.slots.get_mut(s) {
                if slot.replace(entry).is_none() {
                    page.live += 1;
                    self.len += 1;
                }
            }
        } else if self.overflow.insert(hash, entry).is_none() {
            self.len += 1;
        }
    }

    /// Removes and returns the entry at `hash`; frees its page when it was the page's last.
    #[inline]
    pub(crate) fn remove(&mut self, hash: u32) -> Option<DrainingEntry<C>> {
        if hash < DENSE_LIMIT {
            let (p, s) = split(hash);
            let page_slot = self.pages.get_mut(p)?;
            let page = page_slot.as_mut()?;
            let removed = page.slots.get_mut(s)?.take()?;
            page.live -= 1;
            if page.live == 0 {
                *page_slot = None;
            }
            self.len -= 1;
            Some(removed)
        } else {
            let removed = self.overflow.remove(&hash)?;
            self.len -= 1;
            Some(removed)
        }
    }

    pub(crate) fn clear(&mut self) {
        for p in self.pages.iter_mut() {
            *p = None;
        }
        self.overflow.clear();
        self.len = 0;
    }

    /// Every entry, in ascending hash order.
    pub(crate) fn sorted_entries(&self) -> Vec<(u32, DrainingEntry<C>)> {
        let mut out = Vec::with_capacity(self.len);
        for (p, page) in self.pages.iter().enumerate() {
            let Some(page) = page else { continue };
            for (s, slot) in page.slots.iter().enumerate() {
                if let Some(e) = slot {
                    out.push((((p << PAGE_BITS) | s) as u32, *e));
                }
            }
        }
        let mut big: Vec<(u32, DrainingEntry<C>)> =
            self.overflow.iter().map(|(h, e)| (*h, *e)).collect();
        big.sort_unstable_by_key(|(h, _)| *h);
        out.extend(big);
        out
    }
}
