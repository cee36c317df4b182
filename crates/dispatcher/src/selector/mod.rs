//! Key_Shared consumer selectors: who owns which hash slot, and what moved on a join or leave.

mod auto_split;
mod exclusive;
mod ring;
#[cfg(test)]
mod tests;

use std::fmt::Debug;
use std::hash::Hash;

use crate::hash::{key_hash31, slot, HashRange};

pub use auto_split::AutoSplitSelector;
pub use exclusive::ExclusiveRangeSelector;
pub use ring::{ring_point, ConsistentHashingSelector, DEFAULT_POINTS_PER_CONSUMER};

/// Highest hash slot of every selector (slots are 16-bit).
pub(crate) const MAX_SLOT: u32 = 65535;

/// A consumer joining a selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerInfo<C> {
    /// The consumer's id (unique among the selector's consumers).
    pub id: C,
    /// The consumer name; the consistent-hashing ring derives the consumer's points from it.
    pub name: String,
    /// Client-chosen hash ranges; used by [`ExclusiveRangeSelector`] only, ignored by the others.
    pub ranges: Vec<HashRange>,
}

impl<C> ConsumerInfo<C> {
    /// A consumer without client-chosen ranges (for the ring and the auto-split selector).
    pub fn new(id: C, name: impl Into<String>) -> Self {
        ConsumerInfo {
            id,
            name: name.into(),
            ranges: Vec::new(),
        }
    }

    /// A consumer with client-chosen ranges (for [`ExclusiveRangeSelector`]).
    pub fn with_ranges(id: C, name: impl Into<String>, ranges: Vec<HashRange>) -> Self {
        ConsumerInfo {
            id,
            name: name.into(),
            ranges,
        }
    }
}

/// Why a consumer could not be added to a selector.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError<C: Debug> {
    /// A consumer with this id is already in the selector.
    #[error("consumer {0:?} is already in the selector")]
    DuplicateConsumer(C),
    /// An exclusive-range consumer supplied no ranges.
    #[error("no hash ranges supplied")]
    EmptyRanges,
    /// A supplied range has `start > end`.
    #[error("hash range {0} is inverted (start > end)")]
    InvertedRange(HashRange),
    /// Two of the consumer's own ranges overlap.
    #[error("hash ranges {0} and {1} overlap")]
    OverlappingRanges(HashRange, HashRange),
    /// A supplied range overlaps a range another consumer already owns.
    #[error("range conflict with consumer {owner:?} on {range}")]
    RangeConflict {
        /// The supplied range that conflicts.
        range: HashRange,
        /// The consumer that already owns (part of) it.
        owner: C,
    },
    /// The auto-split selector has no range wider than one slot left to split.
    #[error("no more range can be assigned")]
    NoRangeLeftToSplit,
    /// A supplied range ends beyond slot 65535.
    #[error("hash range {0} is outside [0, 65535]")]
    RangeOutOfBounds(HashRange),
    /// The selector already holds 65535 consumers: the consistent-hashing ring's per-slot table
    /// is 16-bit, and the auto-split selector gives each consumer at least one of the 65536
    /// slots ([`AutoSplitSelector::MAX_CONSUMERS`]).
    #[error("too many consumers (at most 65535)")]
    TooManyConsumers,
}

/// Whether `hash` lies in one of `ranges` (sorted, non-overlapping; binary search).
///
/// ```
/// use dispatcher::{ranges_contain, HashRange};
/// let r = [HashRange::new(1, 10), HashRange::new(20, 30)];
/// assert!(ranges_contain(&r, 25));
/// assert!(!ranges_contain(&r, 15));
/// ```
pub fn ranges_contain(ranges: &[HashRange], hash: u32) -> bool {
    let i = ranges.partition_point(|r| r.start <= hash);
    i > 0 && ranges[i - 1].end >= hash
}

/// The hash ranges that moved on one add or remove, grouped per consumer (Pulsar's ImpactedConsumersResult, PIP-379).
///
/// `removed` lists, per consumer, the ranges it lost; `added` the ranges it gained. Ranges are
/// merged (no overlapping or adjacent pair) and sorted; consumers are sorted by id. A Key_Shared
/// dispatcher processes all removals before all additions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImpactedConsumers<C> {
    /// Per consumer, the ranges it lost.
    pub removed: Vec<(C, Ranges)>,
    /// Per consumer, the ranges it gained.
    pub added: Vec<(C, Ranges)>,
}

/// One consumer's ranges in [`ImpactedConsumers`]: a vector that keeps up to two ranges inline
/// (a join or leave on a ring moves one or two arcs of most consumers it touches, so most lists
/// need no allocation of their own). Derefs to `[HashRange]`; build one with
/// `Ranges::from_slice`, `Ranges::from_vec` or `collect()`.
pub type Ranges = smallvec::SmallVec<[HashRange; 2]>;

impl<C> Default for ImpactedConsumers<C> {
    fn default() -> Self {
        ImpactedConsumers {
            removed: Vec::new(),
            added: Vec::new(),
        }
    }
}

impl<C: Copy + Ord> ImpactedConsumers<C> {
    /// Whether nothing moved.
    pub fn is_empty(&self) -> bool {
        self.removed.is_empty() && self.added.is_empty()
    }

    /// The ranges consumer `c` lost (empty when it lost none).
    pub fn removed_ranges(&self, c: C) -> &[HashRange] {
        find(&self.removed, c)
    }

    /// The ranges consumer `c` gained (empty when it gained none).
    pub fn added_ranges(&self, c: C) -> &[HashRange] {
        find(&self.added, c)
    }

    /// Whether consumer `c` lost `hash` (binary search).
    pub fn removed_contains(&self, c: C, hash: u32) -> bool {
        ranges_contain(self.removed_ranges(c), hash)
    }

    /// Whether consumer `c` gained `hash` (binary search).
    pub fn added_contains(&self, c: C, hash: u32) -> bool {
        ranges_contain(self.added_ranges(c), hash)
    }

    /// Builds the result from `(consumer, range)` pairs in any order (ids may repeat).
    pub(crate) fn from_pairs(removed: Vec<(C, HashRange)>, added: Vec<(C, HashRange)>) -> Self {
        ImpactedConsumers {
            removed: group(removed),
            added: group(added),
        }
    }
}

fn find<C: Copy + Ord>(list: &[(C, Ranges)], c: C) -> &[HashRange] {
    match list.binary_search_by(|(id, _)| id.cmp(&c)) {
        Ok(i) => &list[i].1,
        Err(_) => &[],
    }
}

/// Groups pairs per consumer (ascending ids), with each consumer's ranges sorted and merged.
fn group<C: Copy + Ord>(mut pairs: Vec<(C, HashRange)>) -> Vec<(C, Ranges)> {
    if !pairs.is_sorted() {
        pairs.sort_unstable();
    }
    pairs
        .chunk_by(|a, b| a.0 == b.0)
        .map(|run| (run[0].0, merged(run.iter().map(|&(_, r)| r).collect())))
        .collect()
}

/// `rs` sorted, with overlapping or adjacent ranges merged.
pub(super) fn merged(mut rs: Ranges) -> Ranges {
    let n = merge_in_place(&mut rs);
    rs.truncate(n);
    rs
}

/// Sorts `rs` (when it is not sorted already) and merges overlapping or adjacent ranges into
/// `rs[..n]`; returns `n`.
pub(super) fn merge_in_place(rs: &mut [HashRange]) -> usize {
    if !rs.is_sorted() {
        rs.sort_unstable();
    }
    let mut n = 0usize;
    for i in 0..rs.len() {
        let r = rs[i];
        if n > 0 && u64::from(r.start) <= u64::from(rs[n - 1].end) + 1 {
            rs[n - 1].end = rs[n - 1].end.max(r.end);
            continue;
        }
        rs[n] = r;
        n += 1;
    }
    n
}

/// A snapshot of a selector's assignment: sorted, non-overlapping `(range, owner)` pairs, with
/// adjacent ranges of the same owner merged. Slots not covered are unassigned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assignment<C> {
    ranges: Vec<(HashRange, C)>,
}

impl<C: Copy + Eq> Assignment<C> {
    /// Builds a snapshot from sorted, non-overlapping pairs, merging adjacent pairs of one owner.
    ///
    /// Returns `None` when the pairs are unsorted, overlapping or contain an inverted range.
    pub fn from_sorted(pairs: impl IntoIterator<Item = (HashRange, C)>) -> Option<Self> {
        let pairs: Vec<(HashRange, C)> = pairs.into_iter().collect();
        let valid = pairs.iter().all(|(r, _)| r.start <= r.end)
            && pairs.windows(2).all(|w| w[0].0.end < w[1].0.start);
        valid.then(|| Self::merged(pairs))
    }

    /// Merges adjacent same-owner pairs of an ascending, disjoint list (checked by callers).
    pub(crate) fn merged(pairs: Vec<(HashRange, C)>) -> Self {
        let mut ranges: Vec<(HashRange, C)> = Vec::with_capacity(pairs.len());
        for (r, c) in pairs {
            match ranges.last_mut() {
                Some((last, owner))
                    if *owner == c && u64::from(r.start) == u64::from(last.end) + 1 =>
                {
                    last.end = r.end
                }
                _ => ranges.push((r, c)),
            }
        }
        Assignment { ranges }
    }

    /// The `(range, owner)` pairs, ascending.
    pub fn ranges(&self) -> &[(HashRange, C)] {
        &self.ranges
    }

    /// Number of (merged) ranges.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Whether no slot is assigned.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The owner of `slot`, if assigned (binary search).
    pub fn owner(&self, slot: u32) -> Option<C> {
        let i = self.ranges.partition_point(|(r, _)| r.start <= slot);
        if i == 0 {
            return None;
        }
        let (r, c) = self.ranges[i - 1];
        r.contains(slot).then_some(c)
    }

    /// The ranges consumer `c` owns, ascending.
    pub fn ranges_of(&self, c: C) -> Vec<HashRange> {
        self.ranges
            .iter()
            .filter(|(_, o)| *o == c)
            .map(|(r, _)| *r)
            .collect()
    }
}

/// The difference between two snapshots as impacted consumers: every sub-range whose owner
/// changed is lost by its old owner (if any) and gained by its new owner (if any).
///
/// Linear in the number of ranges of both snapshots.
pub fn diff<C: Copy + Ord>(before: &Assignment<C>, after: &Assignment<C>) -> ImpactedConsumers<C> {
    let (a, b) = (before.ranges(), after.ranges());
    let (mut i, mut j) = (0usize, 0usize);
    let mut pos: u64 = 0;
    let mut removed = Vec::new();
    let mut added = Vec::new();
    // Sweep the slot line, one segment of constant (before, after) owners at a time.
    while i < a.len() || j < b.len() {
        while i < a.len() && u64::from(a[i].0.end) < pos {
            i += 1;
        }
        while j < b.len() && u64::from(b[j].0.end) < pos {
            j += 1;
        }
        if i >= a.len() && j >= b.len() {
            break;
        }
        let seg = |r: Option<&(HashRange, C)>| -> (Option<C>, u64) {
            match r {
                Some((r, c)) if u64::from(r.start) <= pos => (Some(*c), u64::from(r.end) + 1),
                Some((r, _)) => (None, u64::from(r.start)),
                None => (None, u64::MAX),
            }
        };
        let (oa, na) = seg(a.get(i));
        let (ob, nb) = seg(b.get(j));
        let next = na.min(nb);
        if oa != ob {
            let r = HashRange::new(pos as u32, (next - 1) as u32);
            if let Some(c) = oa {
                removed.push((c, r));
            }
            if let Some(c) = ob {
                added.push((c, r));
            }
        }
        pos = next;
    }
    ImpactedConsumers::from_pairs(removed, added)
}

/// A Key_Shared consumer selector: maps a hash slot to the consumer that owns it.
///
/// Implemented by [`ConsistentHashingSelector`], [`AutoSplitSelector`] and
/// [`ExclusiveRangeSelector`]; a dispatcher can take any implementation (for example a
/// `Box<dyn StickyKeySelector<C> + Send>`), so users can plug in their own.
pub trait StickyKeySelector<C: Copy + Eq + Hash + Ord + Debug> {
    /// The key hash range whose slot rule ([`slot`]) this selector uses.
    fn key_range(&self) -> HashRange;

    /// Adds a consumer and returns the ranges that moved (to it, and from whom).
    fn add_consumer(
        &mut self,
        c: ConsumerInfo<C>,
    ) -> Result<ImpactedConsumers<C>, SelectorError<C>>;

    /// Removes a consumer and returns the ranges that moved (from it, and to whom). An unknown id
    /// is a no-op returning an empty result.
    fn remove_consumer(&mut self, id: C) -> ImpactedConsumers<C>;

    /// The consumer owning `slot`, or `None` (no consumer, or an unassigned slot). Never allocates.
    fn select(&self, slot: u32) -> Option<C>;

    /// A snapshot of the current assignment (for stats, explain and tests).
    fn assignment(&self) -> Assignment<C>;

    /// Number of consumers in the selector.
    fn consumer_count(&self) -> usize;

    /// The consumer for a sticky key: [`select`](Self::select) of the key's slot under
    /// [`key_range`](Self::key_range).
    fn select_key(&self, key: &[u8]) -> Option<C> {
        self.select(slot(key_hash31(key), self.key_range()))
    }
}
