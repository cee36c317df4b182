//! Round robin over consumers by priority level (Pulsar's `ConsumerPrioritySelector` behaviour).

use crate::types::ConsumerSlot;

/// Picks the next consumer for an ordinary entry: the highest priority level that has an
/// available consumer wins, consumers rotate within a level, lower levels are used only when no
/// consumer of a higher level is available.
///
/// The state is one cursor into the priority-ordered consumer list (as in Pulsar), kept across
/// calls. The list order is the `consumers` slice stably sorted by `priority` (lower number
/// first); pass an already sorted slice (as Pulsar's dispatcher keeps it) and a call costs O(1)
/// while the consumer at the cursor is available, otherwise the order is rebuilt in an internal
/// buffer on each call.
///
/// ```
/// use chunk_assignor::{ConsumerSlot, PriorityRoundRobin};
///
/// let consumers = [
///     ConsumerSlot { id: "a", permits: 5, priority: 0 },
///     ConsumerSlot { id: "b", permits: 5, priority: 0 },
///     ConsumerSlot { id: "low", permits: 5, priority: 1 },
/// ];
/// let mut rr = PriorityRoundRobin::new();
/// let mut permits = [5i64, 5, 5];
/// let mut picks = Vec::new();
/// for _ in 0..4 {
///     let i = rr.next(&consumers, |i| permits[i] > 0).unwrap();
///     permits[i] -= 1;
///     picks.push(consumers[i].id);
/// }
/// assert_eq!(picks, ["a", "b", "a", "b"]); // the lower level is not used while level 0 has room
/// permits[0] = 0;
/// permits[1] = 0;
/// assert_eq!(rr.next(&consumers, |i| permits[i] > 0), Some(2));
/// ```
#[derive(Clone, Debug, Default)]
pub struct PriorityRoundRobin {
    pub(crate) cursor: usize,
    order: Vec<u32>,
}

impl PriorityRoundRobin {
    /// A selector whose cursor starts at the first consumer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves the cursor back to the first consumer (for example after the consumer list changed
    /// wholesale).
    pub fn reset(&mut self) {
        self.cursor = 0;
    }

    /// The index (into `consumers`) of the next consumer to receive an entry, or `None` when
    /// `has_capacity` is false for every consumer (or the slice is empty).
    ///
    /// `has_capacity(i)` tells whether `consumers[i]` can take an entry now (typically
    /// `permits > 0` as tracked by the caller). The caller accounts the entry itself.
    pub fn next<C>(
        &mut self,
        consumers: &[ConsumerSlot<C>],
        mut has_capacity: impl FnMut(usize) -> bool,
    ) -> Option<usize> {
        if is_sorted_by_priority(consumers) {
            self.pick(
                consumers.len(),
                |p| consumers[p].priority,
                &mut has_capacity,
            )
        } else {
            let mut order = std::mem::take(&mut self.order);
            fill_priority_order(consumers, &mut order);
            let got = self.pick(
                order.len(),
                |p| consumers[order[p] as usize].priority,
                |p| has_capacity(order[p] as usize),
            );
            let got = got.map(|p| order[p] as usize);
            self.order = order;
            got
        }
    }

    /// The selection over positions `0..n` of a priority-sorted view; returns a position.
    pub(crate) fn pick(
        &mut self,
        n: usize,
        prio: impl Fn(usize) -> i32,
        mut avail: impl FnMut(usize) -> bool,
    ) -> Option<usize> {
        if n == 0 {
            return None;
        }
        if self.cursor >= n {
            self.cursor = 0;
        }
        let cur = self.cursor;
        let level = prio(cur);
        // Fast path: the consumer at the cursor is available and nothing above it could be.
        if level == prio(0) && avail(cur) {
            self.cursor = cur + 1;
            return Some(cur);
        }
        let found = self.scan(n, cur, level, &prio, &mut avail);
        if let Some(p) = found {
            self.cursor = p + 1;
        }
        found
    }

    fn scan(
        &self,
        n: usize,
        cur: usize,
        level: i32,
        prio: &impl Fn(usize) -> i32,
        avail: &mut impl FnMut(usize) -> bool,
    ) -> Option<usize> {
        // 1. A consumer at a higher level (only positions before the cursor can be higher).
        if level != prio(0) {
            for p in 0..cur {
                if prio(p) >= level {
                    break;
                }
                if avail(p) {
                    return Some(p);
                }
            }
        }
        // 2. The cursor's level, from the cursor to the level's end.
        let mut p = cur;
        while p < n && prio(p) == level {
            if avail(p) {
                return Some(p);
            }
            p += 1;
        }
        let level_end = p;
        // 3. The cursor's level, wrapping from its start up to the cursor.
        let mut start = cur;
        while start > 0 && prio(start - 1) == level {
            start -= 1;
        }
        if let Some(p) = (start..cur).find(|&p| avail(p)) {
            return Some(p);
        }
        // 4. Lower levels, in list order.
        (level_end..n).find(|&p| avail(p))
    }
}

pub(crate) fn is_sorted_by_priority<C>(consumers: &[ConsumerSlot<C>]) -> bool {
    consumers.windows(2).all(|w| w[0].priority <= w[1].priority)
}

/// `order` := indices of `consumers`, stably sorted by priority.
pub(crate) fn fill_priority_order<C>(consumers: &[ConsumerSlot<C>], order: &mut Vec<u32>) {
    order.clear();
    order.extend(0..consumers.len() as u32);
    if !is_sorted_by_priority(consumers) {
        order.sort_by_key(|&i| consumers[i as usize].priority);
    }
}
