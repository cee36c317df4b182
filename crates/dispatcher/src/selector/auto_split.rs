//! Hash-range auto-split selector (Pulsar §1.5).

use std::fmt::Debug;
use std::hash::Hash;

use tracing::debug;

use super::{
    diff, Assignment, ConsumerInfo, ImpactedConsumers, SelectorError, StickyKeySelector, MAX_SLOT,
};
use crate::hash::{HashRange, FULL_RANGE};

/// The upper bound owned by the first consumer (one past the last slot, as in Pulsar).
const TOP: u32 = MAX_SLOT + 1;

/// Pulsar's auto-split hash-range selector: every consumer owns one contiguous range.
///
/// * The first consumer owns upper bound 65536 (all slots).
/// * Each new consumer splits the widest range (width = bound − previous bound, or − 0; ties go to
///   the lowest range) and takes its lower half: the new bound is
///   `bound - ((bound - lower) >> 1)`. When the widest range is at most one slot wide, adding
///   fails with [`SelectorError::NoRangeLeftToSplit`].
/// * Removing a consumer drops its bound (its slots go to the next higher bound's owner); if it
///   owned 65536 and others remain, the owner of the next lower bound takes over 65536. Ranges
///   are not rebalanced.
/// * [`select`](StickyKeySelector::select) is a binary search (owner of the smallest bound ≥
///   slot); slots above 65535 return `None`. [`ConsumerInfo::ranges`] is ignored.
/// * Impacted consumers come from [`diff`] of the before/after snapshots (O(consumers)).
#[derive(Clone, Debug, Default)]
pub struct AutoSplitSelector<C> {
    /// Ascending `(upper bound, owner)`.
    bounds: Vec<(u32, C)>,
}

impl<C: Copy + Eq + Hash + Ord + Debug> AutoSplitSelector<C> {
    /// An empty selector.
    pub fn new() -> Self {
        AutoSplitSelector { bounds: Vec::new() }
    }

    /// The `(upper bound, owner)` pairs, ascending (the first consumer's bound is 65536).
    pub fn bounds(&self) -> &[(u32, C)] {
        &self.bounds
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
        if self.bounds.iter().any(|&(_, o)| o == c.id) {
            return Err(SelectorError::DuplicateConsumer(c.id));
        }
        let before = self.assignment();
        if self.bounds.is_empty() {
            self.bounds.push((TOP, c.id));
        } else {
            let mut best = (0usize, 0u32, 0u32); // (index, width, lower)
            let mut lower = 0u32;
            for (i, &(b, _)) in self.bounds.iter().enumerate() {
                let width = b - lower;
                if width > best.1 {
                    best = (i, width, lower);
                }
                lower = b;
            }
            let (i, width, lower) = best;
            if width <= 1 {
                return Err(SelectorError::NoRangeLeftToSplit);
            }
            let bound = self.bounds[i].0;
            let mid = bound - ((bound - lower) >> 1);
            self.bounds.insert(i, (mid, c.id));
        }
        debug!(consumer = ?c.id, name = %c.name, consumers = self.bounds.len(), "consumer added to auto-split selector");
        Ok(diff(&before, &self.assignment()))
    }

    fn remove_consumer(&mut self, id: C) -> ImpactedConsumers<C> {
        let Some(i) = self.bounds.iter().position(|&(_, o)| o == id) else {
            return ImpactedConsumers::default();
        };
        let before = self.assignment();
        let (bound, _) = self.bounds.remove(i);
        if bound == TOP {
            if let Some(last) = self.bounds.last_mut() {
                last.0 = TOP;
            }
        }
        debug!(consumer = ?id, consumers = self.bounds.len(), "consumer removed from auto-split selector");
        diff(&before, &self.assignment())
    }

    #[inline]
    fn select(&self, slot: u32) -> Option<C> {
        let i = self.bounds.partition_point(|&(b, _)| b < slot);
        self.bounds.get(i).map(|&(_, c)| c)
    }

    fn assignment(&self) -> Assignment<C> {
        let mut start = 0u32;
        let mut pairs = Vec::with_capacity(self.bounds.len());
        for &(b, c) in &self.bounds {
            let end = b.min(MAX_SLOT);
            if start <= end {
                pairs.push((HashRange::new(start, end), c));
            }
            start = b + 1;
        }
        Assignment::merged(pairs)
    }

    fn consumer_count(&self) -> usize {
        self.bounds.len()
    }
}
