//! Hash-range auto-split selector (Pulsar's HashRangeAutoSplitStickyKeyConsumerSelector).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::hash::Hash;

use ahash::AHashMap;
use tracing::debug;

use super::{
    Assignment, ConsumerInfo, ImpactedConsumers, SelectorError, StickyKeySelector, MAX_SLOT,
};
use crate::hash::{HashRange, FULL_RANGE};

/// The upper bound owned by the first consumer (one past the last slot, as in Pulsar).
const TOP: u32 = MAX_SLOT + 1;

/// Pulsar's auto-split hash-range selector: every consumer owns one contiguous range.
///
/// * The first consumer owns upper bound 65536 (all slots).
/// * Each new consumer splits the widest range (width = bound − previous bound, or − 0; ties go to
///   the lowest range) and takes its lower half: the new bound is
///   `bound - ((bound - lower) >> 1)`, except that a split of the range under 65536 leaves its
///   owner at least slot 65535 (the new bound is at most 65534), so no owner is left with an
///   empty range.
/// * At most [`AutoSplitSelector::MAX_CONSUMERS`] (65,535) consumers: every consumer owns at least one
///   slot, and all 65,536 slots are in use at that count. Adding one more fails with
///   [`SelectorError::TooManyConsumers`] and changes nothing (removing a consumer makes room
///   again). [`SelectorError::NoRangeLeftToSplit`] is kept for a widest range of one slot, which
///   these rules never produce.
/// * Every range in a snapshot or an [`ImpactedConsumers`] satisfies `start <= end <= 65535`.
/// * Removing a consumer drops its bound (its slots go to the next higher bound's owner); if it
///   owned 65536 and others remain, the owner of the next lower bound takes over 65536. Ranges
///   are not rebalanced.
/// * Snapshot ranges are `[previous bound + 1, bound]`, the first one starting at slot 0 and the
///   last one ending at 65535.
/// * [`select`](StickyKeySelector::select) is the owner of the smallest bound ≥ slot (O(log n));
///   slots above 65535 return `None`. [`ConsumerInfo::ranges`] is ignored.
/// * Add and remove are O(log n), including the impacted consumers (one range moves).
#[derive(Clone, Debug)]
pub struct AutoSplitSelector<C> {
    /// Upper bound → owner.
    bounds: BTreeMap<u32, C>,
    /// `(width, bound)` of every range, widest first, then lowest bound first.
    widths: BTreeSet<(Reverse<u32>, u32)>,
    by_id: AHashMap<C, u32>,
}

/// First slot of the range whose previous bound is `lower` (0 for the first range).
fn first_slot(lower: u32) -> u32 {
    if lower == 0 {
        0
    } else {
        lower + 1
    }
}

impl<C: Copy + Eq + Hash + Ord + Debug> Default for AutoSplitSelector<C> {
    fn default() -> Self {
        Self::new()
    }
}

impl<C: Copy + Eq + Hash + Ord + Debug> AutoSplitSelector<C> {
    /// Most consumers the selector holds (65,535), each owning at least one slot: the range
    /// under the top bound 65536 covers one slot fewer than its width (it ends at 65535), the
    /// first range (from slot 0) one more, so 65,535 ranges already use all 65,536 slots.
    pub const MAX_CONSUMERS: usize = MAX_SLOT as usize;

    /// An empty selector.
    pub fn new() -> Self {
        AutoSplitSelector {
            bounds: BTreeMap::new(),
            widths: BTreeSet::new(),
            by_id: AHashMap::new(),
        }
    }

    /// The `(upper bound, owner)` pairs, ascending (the highest bound is 65536).
    pub fn bounds(&self) -> impl Iterator<Item = (u32, C)> + '_ {
        self.bounds.iter().map(|(&b, &c)| (b, c))
    }

    fn lower_of(&self, bound: u32) -> u32 {
        self.bounds
            .range(..bound)
            .next_back()
            .map_or(0, |(&b, _)| b)
    }
}

impl<C: Copy + Eq + Hash + Ord + Debug> StickyKeySelector<C> for AutoSplitSelector<C> {
    fn key_range(&self) -> HashRange {
        FULL_RANGE
    }

    fn add_consumer(
        &mut self,
        c: ConsumerInfo<C>,
    ) -> Result<ImpactedConsumers<C>, SelectorError<C>> {
        if self.by_id.contains_key(&c.id) {
            return Err(SelectorError::DuplicateConsumer(c.id));
        }
        let Some(&(Reverse(width), bound)) = self.widths.first() else {
            self.bounds.insert(TOP, c.id);
            self.widths.insert((Reverse(TOP), TOP));
            self.by_id.insert(c.id, TOP);
            debug!(consumer = ?c.id, name = %c.name, bound = TOP, "consumer added to auto-split selector");
            let all = HashRange::new(0, MAX_SLOT);
            return Ok(ImpactedConsumers::from_pairs(Vec::new(), vec![(c.id, all)]));
        };
        if self.by_id.len() >= Self::MAX_CONSUMERS {
            return Err(SelectorError::TooManyConsumers);
        }
        if width <= 1 {
            return Err(SelectorError::NoRangeLeftToSplit);
        }
        let Some(&old) = self.bounds.get(&bound) else {
            return Err(SelectorError::NoRangeLeftToSplit);
        };
        let lower = bound - width;
        let mut mid = bound - (width >> 1);
        if bound == TOP {
            // The range under TOP ends at 65535: keep slot 65535 for its owner.
            mid = mid.min(MAX_SLOT - 1);
        }
        if mid <= lower {
            return Err(SelectorError::NoRangeLeftToSplit);
        }
        self.widths.remove(&(Reverse(width), bound));
        self.widths.insert((Reverse(bound - mid), bound));
        self.widths.insert((Reverse(mid - lower), mid));
        self.bounds.insert(mid, c.id);
        self.by_id.insert(c.id, mid);
        debug!(consumer = ?c.id, name = %c.name, bound = mid, split_from = ?old, "consumer added to auto-split selector");
        let moved = HashRange::new(first_slot(lower), mid);
        Ok(ImpactedConsumers::from_pairs(
            vec![(old, moved)],
            vec![(c.id, moved)],
        ))
    }

    fn remove_consumer(&mut self, id: C) -> ImpactedConsumers<C> {
        let Some(bound) = self.by_id.remove(&id) else {
            return ImpactedConsumers::default();
        };
        let lower = self.lower_of(bound);
        self.widths.remove(&(Reverse(bound - lower), bound));
        self.bounds.remove(&bound);
        let lost = HashRange::new(first_slot(lower), bound.min(MAX_SLOT));
        let heir = if bound == TOP {
            // The next lower bound's owner moves up to 65536.
            self.bounds.pop_last().map(|(lb, heir)| {
                let lower2 = self.lower_of(lb);
                self.widths.remove(&(Reverse(lb - lower2), lb));
                self.widths.insert((Reverse(TOP - lower2), TOP));
                self.bounds.insert(TOP, heir);
                self.by_id.insert(heir, TOP);
                heir
            })
        } else {
            // The next higher bound's range grows down over the freed one.
            let next = self.bounds.range(bound + 1..).next().map(|(&b, &c)| (b, c));
            next.map(|(nb, heir)| {
                self.widths.remove(&(Reverse(nb - bound), nb));
                self.widths.insert((Reverse(nb - lower), nb));
                heir
            })
        };
        debug!(consumer = ?id, bound, heir = ?heir, "consumer removed from auto-split selector");
        let gained = heir.map(|h| vec![(h, lost)]).unwrap_or_default();
        ImpactedConsumers::from_pairs(vec![(id, lost)], gained)
    }

    #[inline]
    fn select(&self, slot: u32) -> Option<C> {
        self.bounds.range(slot..).next().map(|(_, &c)| c)
    }

    fn assignment(&self) -> Assignment<C> {
        let mut lower = 0u32;
        let mut pairs = Vec::with_capacity(self.bounds.len());
        for (&b, &c) in &self.bounds {
            pairs.push((HashRange::new(first_slot(lower), b.min(MAX_SLOT)), c));
            lower = b;
        }
        Assignment::merged(pairs)
    }

    fn consumer_count(&self) -> usize {
        self.by_id.len()
    }
}
