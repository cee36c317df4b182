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

/// One dense slot: the owner and its reference count, 0 when the slot is vacant (a live entry
/// always has at least one reference). The blocked-attempt counts, which only blocking paths
/// touch, live in their own array, so the slots of hashes a few apart share cache lines (8 bytes
/// a slot for a `u32` consumer id, against 16 for an `Option<DrainingEntry>`).
#[derive(Clone, Copy)]
struct Slot<C> {
    owner: C,
    ref_count: u32,
}

struct Page<C> {
    live: usize,
    /// Inline in the page's allocation: a look-up follows one pointer (the page's), not two.
    slots: [Slot<C>; PAGE_SLOTS],
    blocked: [u32; PAGE_SLOTS],
}

/// A draining entry in place, as [`Table::get_mut`] lends it: the owner by value (it never
/// changes in place) and the two counts by reference.
pub(crate) struct EntryMut<'a, C> {
    pub(crate) owner: C,
    pub(crate) ref_count: &'a mut u32,
    pub(crate) blocked_attempts: &'a mut u32,
}

/// What [`Table::reduce`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TableReduce<C> {
    /// No entry at the hash.
    Missing,
    /// The entry belongs to this owner, not to the consumer; it is unchanged.
    Other(C),
    /// One reference dropped; this many remain (at least 1).
    Decremented(u32),
    /// The last reference dropped: the entry is gone. It had been blocked this many times.
    Removed { blocked_attempts: u32 },
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
    /// An empty table. The page index (2 KiB) is allocated with the first dense entry: an
    /// idle subscription's tracker holds none.
    pub(crate) fn new() -> Self {
        Table {
            pages: Box::default(),
            overflow: HashMap::default(),
            len: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Test check: whether the page index is still unallocated.
    #[cfg(test)]
    pub(crate) fn is_unallocated(&self) -> bool {
        self.pages.is_empty()
    }

    /// Test check: how many dense pages are allocated.
    #[cfg(test)]
    fn pages_allocated(&self) -> usize {
        self.pages.iter().filter(|p| p.is_some()).count()
    }

    /// The entry at `hash`, copied out.
    #[inline]
    pub(crate) fn get(&self, hash: u32) -> Option<DrainingEntry<C>> {
        if hash < DENSE_LIMIT {
            let (p, s) = split(hash);
            let page = self.pages.get(p)?.as_ref()?;
            let slot = page.slots.get(s)?;
            (slot.ref_count != 0).then(|| DrainingEntry {
                owner: slot.owner,
                ref_count: slot.ref_count,
                blocked_attempts: page.blocked.get(s).copied().unwrap_or(0),
            })
        } else {
            self.overflow.get(&hash).copied()
        }
    }

    /// Whether `hash` has an entry.
    #[inline]
    pub(crate) fn contains(&self, hash: u32) -> bool {
        if hash < DENSE_LIMIT {
            let (p, s) = split(hash);
            self.pages
                .get(p)
                .and_then(|page| page.as_ref())
                .and_then(|page| page.slots.get(s))
                .is_some_and(|slot| slot.ref_count != 0)
        } else {
            self.overflow.contains_key(&hash)
        }
    }

    /// The entry at `hash`, in place.
    #[inline]
    pub(crate) fn get_mut(&mut self, hash: u32) -> Option<EntryMut<'_, C>> {
        if hash < DENSE_LIMIT {
            let (p, s) = split(hash);
            let page = self.pages.get_mut(p)?.as_mut()?;
            let Page { slots, blocked, .. } = &mut **page;
            let slot = slots.get_mut(s)?;
            if slot.ref_count == 0 {
                return None;
            }
            Some(EntryMut {
                owner: slot.owner,
                ref_count: &mut slot.ref_count,
                blocked_attempts: blocked.get_mut(s)?,
            })
        } else {
            let e = self.overflow.get_mut(&hash)?;
            Some(EntryMut {
                owner: e.owner,
                ref_count: &mut e.ref_count,
                blocked_attempts: &mut e.blocked_attempts,
            })
        }
    }

    /// Inserts `entry` at `hash`, which the caller has checked is vacant. `entry.ref_count`
    /// must be at least 1 (0 marks a vacant slot); an entry with 0 is not stored.
    #[inline]
    pub(crate) fn insert_vacant(&mut self, hash: u32, entry: DrainingEntry<C>) {
        if entry.ref_count == 0 {
            return;
        }
        if hash < DENSE_LIMIT {
            let (p, s) = split(hash);
            if self.pages.is_empty() {
                self.pages = (0..PAGES).map(|_| None).collect();
            }
            let Some(page_slot) = self.pages.get_mut(p) else {
                return;
            };
            let page = page_slot.get_or_insert_with(|| {
                // Vacant slots need some owner value; they are told apart by their count.
                Box::new(Page {
                    live: 0,
                    slots: [Slot {
                        owner: entry.owner,
                        ref_count: 0,
                    }; PAGE_SLOTS],
                    blocked: [0; PAGE_SLOTS],
                })
            });
            let Page {
                live,
                slots,
                blocked,
            } = &mut **page;
            if let (Some(slot), Some(b)) = (slots.get_mut(s), blocked.get_mut(s)) {
                if slot.ref_count == 0 {
                    *live += 1;
                    self.len += 1;
                }
                *slot = Slot {
                    owner: entry.owner,
                    ref_count: entry.ref_count,
                };
                *b = entry.blocked_attempts;
            }
        } else if self.overflow.insert(hash, entry).is_none() {
            self.len += 1;
        }
    }

    /// Drops one reference of `consumer` at `hash`, in one look-up: the entry's count goes down,
    /// or the entry goes (its page with it when it was the page's last) when that was its last
    /// reference. An entry of another owner is left as it is.
    #[inline]
    pub(crate) fn reduce(&mut self, hash: u32, consumer: C) -> TableReduce<C> {
        let removed = if hash < DENSE_LIMIT {
            let (p, s) = split(hash);
            let Some(page_slot) = self.pages.get_mut(p) else {
                return TableReduce::Missing;
            };
            let Some(slot) = page_slot.as_mut().and_then(|page| page.slots.get_mut(s)) else {
                return TableReduce::Missing;
            };
            if let Some(done) = drop_ref(slot.owner, &mut slot.ref_count, consumer) {
                return done;
            }
            vacate(page_slot, s)
        } else {
            let Some(e) = self.overflow.get_mut(&hash) else {
                return TableReduce::Missing;
            };
            if let Some(done) = drop_ref(e.owner, &mut e.ref_count, consumer) {
                return done;
            }
            self.overflow.remove(&hash)
        };
        match removed {
            Some(e) => {
                self.len -= 1;
                TableReduce::Removed {
                    blocked_attempts: e.blocked_attempts,
                }
            }
            None => TableReduce::Missing,
        }
    }

    /// Removes and returns the entry at `hash`; frees its page when it was the page's last.
    #[inline]
    pub(crate) fn remove(&mut self, hash: u32) -> Option<DrainingEntry<C>> {
        let removed = if hash < DENSE_LIMIT {
            let (p, s) = split(hash);
            vacate(self.pages.get_mut(p)?, s)?
        } else {
            self.overflow.remove(&hash)?
        };
        self.len -= 1;
        Some(removed)
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
            for (s, (slot, blocked)) in page.slots.iter().zip(page.blocked.iter()).enumerate() {
                if slot.ref_count != 0 {
                    let e = DrainingEntry {
                        owner: slot.owner,
                        ref_count: slot.ref_count,
                        blocked_attempts: *blocked,
                    };
                    out.push((((p << PAGE_BITS) | s) as u32, e));
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

/// [`Table::reduce`]'s step on an entry of `owner` with `count` references (0: a vacant dense
/// slot): the outcome, or `None` when this is the consumer's last reference and the caller
/// removes the entry.
#[inline]
fn drop_ref<C: Copy + Eq>(owner: C, count: &mut u32, consumer: C) -> Option<TableReduce<C>> {
    if *count == 0 {
        Some(TableReduce::Missing)
    } else if owner != consumer {
        Some(TableReduce::Other(owner))
    } else if *count > 1 {
        *count -= 1;
        Some(TableReduce::Decremented(*count))
    } else {
        None
    }
}

/// Empties dense slot `s` of the page in `page_slot` and returns its entry, freeing the page
/// when that was its last entry; `None` when there is no page or the slot is vacant.
#[inline]
fn vacate<C: Copy>(page_slot: &mut Option<Box<Page<C>>>, s: usize) -> Option<DrainingEntry<C>> {
    let Page {
        live,
        slots,
        blocked,
    } = &mut **page_slot.as_mut()?;
    let (slot, b) = (slots.get_mut(s)?, blocked.get_mut(s)?);
    if slot.ref_count == 0 {
        return None;
    }
    let removed = DrainingEntry {
        owner: slot.owner,
        ref_count: slot.ref_count,
        blocked_attempts: *b,
    };
    slot.ref_count = 0;
    *b = 0;
    *live -= 1;
    if *live == 0 {
        *page_slot = None;
    }
    Some(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(owner: u32, ref_count: u32, blocked_attempts: u32) -> DrainingEntry<u32> {
        DrainingEntry {
            owner,
            ref_count,
            blocked_attempts,
        }
    }

    /// A vacant dense slot is one with count 0: every field of an entry survives a round trip
    /// through the split arrays, a removed slot reads as vacant, and a slot reused by another
    /// owner shows that owner's counts, not the last one's.
    #[test]
    fn dense_slots_round_trip_and_reuse() {
        let mut t: Table<u32> = Table::new();
        for hash in [7, 8, 300, DENSE_LIMIT + 5] {
            assert!(t.get(hash).is_none() && !t.contains(hash));
            t.insert_vacant(hash, entry(1, 3, 5));
            assert_eq!(t.get(hash), Some(entry(1, 3, 5)));
            assert!(t.contains(hash));
        }
        assert_eq!(t.len(), 4);
        if let Some(e) = t.get_mut(8) {
            *e.ref_count += 1;
            *e.blocked_attempts = 0;
        }
        assert_eq!(t.get(8), Some(entry(1, 4, 0)));
        assert_eq!(t.remove(7), Some(entry(1, 3, 5)));
        assert!(t.get(7).is_none() && t.get_mut(7).is_none() && t.remove(7).is_none());
        t.insert_vacant(7, entry(2, 1, 9));
        assert_eq!(t.get(7), Some(entry(2, 1, 9)));
        assert_eq!(t.remove(7), Some(entry(2, 1, 9)));
        t.insert_vacant(7, entry(3, 1, 0));
        assert_eq!(t.get(7), Some(entry(3, 1, 0)));
        // A count of 0 would read as vacant: such an entry is not stored.
        t.insert_vacant(9, entry(1, 0, 0));
        assert!(t.get(9).is_none());
        assert_eq!(
            t.sorted_entries(),
            vec![
                (7, entry(3, 1, 0)),
                (8, entry(1, 4, 0)),
                (300, entry(1, 3, 5)),
                (DENSE_LIMIT + 5, entry(1, 3, 5)),
            ]
        );
        assert_eq!(t.len(), 4);
    }

    /// `reduce` in one look-up, dense and overflow alike: another owner's entry is left alone,
    /// a count above 1 goes down, the last reference removes the entry and reports its blocked
    /// attempts, and a slot reused afterwards starts clean.
    #[test]
    fn reduce_decrements_removes_and_leaves_other_owners_alone() {
        let mut t: Table<u32> = Table::new();
        for hash in [7, DENSE_LIMIT + 5] {
            assert_eq!(t.reduce(hash, 1), TableReduce::Missing);
            t.insert_vacant(hash, entry(1, 2, 4));
            assert_eq!(t.reduce(hash, 2), TableReduce::Other(1));
            assert_eq!(t.get(hash), Some(entry(1, 2, 4)));
            assert_eq!(t.reduce(hash, 1), TableReduce::Decremented(1));
            assert_eq!(t.get(hash), Some(entry(1, 1, 4)));
            assert_eq!(
                t.reduce(hash, 1),
                TableReduce::Removed {
                    blocked_attempts: 4
                }
            );
            assert!(t.get(hash).is_none() && !t.contains(hash));
            assert_eq!(t.reduce(hash, 1), TableReduce::Missing);
            t.insert_vacant(hash, entry(2, 1, 0));
            assert_eq!(
                t.reduce(hash, 2),
                TableReduce::Removed {
                    blocked_attempts: 0
                }
            );
        }
        assert_eq!(t.len(), 0);
        assert!(t.sorted_entries().is_empty());
        assert_eq!(t.pages_allocated(), 0, "an emptied page is freed");
    }
}
