//! Exclusive (client-chosen, STICKY) hash-range selector (Pulsar's HashRangeExclusiveStickyKeyConsumerSelector).

use std::fmt::Debug;
use std::hash::Hash;

use tracing::debug;

use super::{
    Assignment, ConsumerInfo, ImpactedConsumers, SelectorError, StickyKeySelector, MAX_SLOT,
};
use crate::hash::{HashRange, FULL_RANGE};

/// Pulsar's exclusive hash-range selector (Key_Shared STICKY mode): each consumer brings its own
/// ranges.
///
/// * [`add_consumer`](StickyKeySelector::add_consumer) validates the supplied ranges: not empty,
///   `start <= end`, within `[0, 65535]`, not overlapping each other, not overlapping another
///   consumer's ranges ([`SelectorError::RangeConflict`]). Pulsar first checks whether the
///   conflicting consumer's connection is still alive; this selector has no connections, so the
///   caller must remove dead consumers before adding (there is no liveness check here).
/// * [`select`](StickyKeySelector::select) takes `slot % 65536` and returns the owner of the range
///   with the greatest start ≤ slot, if that range contains it. Uncovered slots return `None`: the
///   hash is unassigned and its messages wait in replay.
/// * A join only gains unassigned slots and a leave only frees its own, so the impacted
///   consumers are exact without a snapshot diff.
#[derive(Clone, Debug, Default)]
pub struct ExclusiveRangeSelector<C> {
    /// Ascending by start, disjoint.
    ranges: Vec<(HashRange, C)>,
    consumers: usize,
}

impl<C: Copy + Eq + Hash + Ord + Debug> ExclusiveRangeSelector<C> {
    /// An empty selector.
    pub fn new() -> Self {
        ExclusiveRangeSelector {
            ranges: Vec::new(),
            consumers: 0,
        }
    }

    fn validate(&self, c: &ConsumerInfo<C>) -> Result<Vec<HashRange>, SelectorError<C>> {
        if self.ranges.iter().any(|&(_, o)| o == c.id) {
            return Err(SelectorError::DuplicateConsumer(c.id));
        }
        if c.ranges.is_empty() {
            return Err(SelectorError::EmptyRanges);
        }
        for &r in &c.ranges {
            if r.start > r.end {
                return Err(SelectorError::InvertedRange(r));
            }
            if r.end > MAX_SLOT {
                return Err(SelectorError::RangeOutOfBounds(r));
            }
        }
        let mut own = c.ranges.clone();
        own.sort_unstable();
        if let Some(w) = own.windows(2).find(|w| w[0].end >= w[1].start) {
            return Err(SelectorError::OverlappingRanges(w[0], w[1]));
        }
        for &r in &own {
            let i = self.ranges.partition_point(|(e, _)| e.start <= r.end);
            if let Some(&(e, owner)) = i.checked_sub(1).and_then(|j| self.ranges.get(j)) {
                if e.end >= r.start {
                    return Err(SelectorError::RangeConflict { range: r, owner });
                }
            }
        }
        Ok(own)
    }
}

impl<C: Copy + Eq + Hash + Ord + Debug> StickyKeySelector<C> for ExclusiveRangeSelector<C> {
    fn key_range(&self) -> HashRange {
        FULL_RANGE
    }

    fn add_consumer(
        &mut self,
        c: ConsumerInfo<C>,
    ) -> Result<ImpactedConsumers<C>, SelectorError<C>> {
        let own = self.validate(&c)?;
        let gained: Vec<(C, HashRange)> = own.iter().map(|&r| (c.id, r)).collect();
        for r in own {
            let i = self.ranges.partition_point(|(e, _)| e.start < r.start);
            self.ranges.insert(i, (r, c.id));
        }
        self.consumers += 1;
        debug!(consumer = ?c.id, name = %c.name, ranges = gained.len(), "consumer added to exclusive-range selector");
        Ok(ImpactedConsumers::from_pairs(Vec::new(), gained))
    }

    fn remove_consumer(&mut self, id: C) -> ImpactedConsumers<C> {
        let mut lost = Vec::new();
        self.ranges.retain(|&(r, o)| {
            if o == id {
                lost.push((id, r));
            }
            o != id
        });
        if lost.is_empty() {
            return ImpactedConsumers::default();
        }
        self.consumers -= 1;
        debug!(consumer = ?id, ranges = lost.len(), "consumer removed from exclusive-range selector");
        ImpactedConsumers::from_pairs(lost, Vec::new())
    }

    #[inline]
    fn select(&self, slot: u32) -> Option<C> {
        let s = slot & MAX_SLOT;
        let i = self.ranges.partition_point(|(r, _)| r.start <= s);
        let (r, c) = *self.ranges.get(i.checked_sub(1)?)?;
        r.contains(s).then_some(c)
    }

    fn assignment(&self) -> Assignment<C> {
        Assignment::merged(self.ranges.clone())
    }

    fn consumer_count(&self) -> usize {
        self.consumers
    }
}
