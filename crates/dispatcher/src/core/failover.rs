//! Failover: one active consumer gets every entry (Pulsar's single-active-consumer dispatcher).
//!
//! The active consumer is picked again on every join and leave ([`pick_active`]). When it
//! changes, the entries the previous one still holds unacked go back to replay, so the new one
//! gets them first and in position order (Pulsar rewinds the cursor instead, with the same
//! effect), and every consumer is told whether it is active
//! ([`DispatchCommand::ActiveChanged`]). A consumer that joins without changing it is told alone.
//! A redelivery, nack or release on Failover takes back every unacked entry of the consumer:
//! re-sending one alone would put it after later entries (Pulsar's rule too).

use super::*;
use crate::config::{ActivePick, FailoverConfig};

/// Ring points per consumer name (Pulsar's `CONSUMER_CONSISTENT_HASH_REPLICAS`).
const RING_POINTS: u32 = 100;

/// The active consumer among `consumers` (id, priority level, name) by `pick`, `None` when
/// there is none. Sorted by priority level (lowest first), then by name (a stable sort, so
/// equal names keep the given order); the candidates are the consumers of the best level.
pub(crate) fn pick_active<'a>(
    consumers: impl Iterator<Item = (ConsumerId, i32, &'a str)>,
    pick: ActivePick,
) -> Option<ConsumerId> {
    let mut sorted: Vec<(ConsumerId, i32, &str)> = consumers.collect();
    sorted.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.2.cmp(b.2)));
    let best = sorted.first()?.1;
    let candidates = &sorted[..sorted.iter().take_while(|c| c.1 == best).count()];
    let index = match pick {
        ActivePick::Partition(i) => usize::try_from(i).unwrap_or(0) % candidates.len(),
        ActivePick::TopicHash(h) => {
            // Later points overwrite earlier ones on a collision, as in Pulsar's TreeMap.
            let mut ring = BTreeMap::new();
            for (i, c) in candidates.iter().enumerate() {
                for j in 0..RING_POINTS {
                    ring.insert(crate::hash::key_hash31(format!("{}{j}", c.2).as_bytes()), i);
                }
            }
            let mut at = ring.range(h..).chain(ring.iter());
            *at.next()?.1
        }
    };
    Some(candidates[index].0)
}

/// THE Failover permit rule: `c`'s usable permits, none while another consumer is active
/// (`active` is `None` on Shared and Key_Shared). Every permit count the core reads goes
/// through it.
#[inline]
pub(super) fn usable_permits(c: &Consumer, active: Option<ConsumerId>) -> i64 {
    if active.is_some_and(|a| a != c.id) {
        return 0;
    }
    c.available_permits()
}

impl Dispatcher {
    /// Failover: the consumer that gets every entry now (`None` without consumers, and always
    /// on Shared and Key_Shared).
    pub fn active_consumer(&self) -> Option<ConsumerId> {
        self.active
    }

    fn failover(&self) -> Option<FailoverConfig> {
        match self.cfg.subscription {
            SubscriptionType::Failover(f) => Some(f),
            _ => None,
        }
    }

    /// Whether the subscription is Failover.
    pub(super) fn is_failover(&self) -> bool {
        self.failover().is_some()
    }

    /// Failover: picks the active consumer after a join (`joined`) or a leave. On a change the
    /// previous active consumer's unacked entries go back to replay (it may still ack them) and
    /// everyone is told; a join that changes nothing is told to the joiner alone.
    pub(super) fn repick_active(&mut self, joined: Option<ConsumerId>) {
        let Some(f) = self.failover() else { return };
        let next = pick_active(
            self.consumers
                .iter()
                .map(|c| (c.id, c.priority, c.name.as_str())),
            f.pick,
        );
        let before = std::mem::replace(&mut self.active, next);
        if before == next {
            if let (Some(id), Some(active)) = (joined, next) {
                self.commands.push_back(DispatchCommand::ActiveChanged {
                    consumer: id,
                    active: id == active,
                });
            }
            return;
        }
        debug!(from = ?before, to = ?next, "Failover: active consumer changed");
        if let Some(i) = before.and_then(|b| self.find(b)) {
            self.take_back_for_failover(i);
        }
        for c in &self.consumers {
            self.commands.push_back(DispatchCommand::ActiveChanged {
                consumer: c.id,
                active: Some(c.id) == next,
            });
        }
        if let Mode::Shared(routing) = &mut self.mode {
            // Chunks pinned to the previous consumer go to the new one (their first chunk came
            // back to replay with the rest).
            if let Some(b) = before {
                routing.assignor.remove_consumer(b);
            }
        }
        self.input_arrived();
    }

    /// Every entry pending on consumer `i` goes back to replay, without counting a
    /// redelivery (the consumer did not ask for it).
    fn take_back_for_failover(&mut self, i: usize) {
        let shared = self.consumers[i].shared.clone();
        let mut debit = 0i64;
        let mut items = Vec::new();
        shared
            .pending
            .for_each_and_clear(RemovalCause::RedeliveryRequested, |pos, ack| {
                items.push(position_of(pos));
                debit += i64::from(ack.remaining);
            });
        for p in items {
            if self.mark_delete.is_none_or(|md| p > md) {
                self.replay.add(p, 0, None);
            }
        }
        shared.debit(&self.shared, debit);
        self.after_redelivery(i);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pick(cs: &[(u64, i32, &str)], how: ActivePick) -> Option<u64> {
        pick_active(cs.iter().map(|c| (ConsumerId(c.0), c.1, c.2)), how).map(|c| c.0)
    }

    #[test]
    fn partition_index_modulo_the_best_level_sorted_by_name() {
        let cs = [(1, 0, "b"), (2, 0, "a"), (3, 1, "0"), (4, 0, "c")];
        // Best level 0: a(2), b(1), c(4); consumer 3 (level 1) is no candidate.
        assert_eq!(pick(&cs, ActivePick::Partition(0)), Some(2));
        assert_eq!(pick(&cs, ActivePick::Partition(1)), Some(1));
        assert_eq!(pick(&cs, ActivePick::Partition(5)), Some(4));
        assert_eq!(pick(&[], ActivePick::Partition(0)), None);
    }

    #[test]
    fn topic_hash_follows_the_ring_and_ignores_join_order() {
        let how = FailoverConfig::topic("persistent://public/default/t").pick;
        let a = pick(&[(1, 0, "x"), (2, 0, "y"), (3, 0, "z")], how);
        let b = pick(&[(3, 0, "z"), (1, 0, "x"), (2, 0, "y")], how);
        assert_eq!(a, b);
        // Over many topics, each of three names is picked for some.
        let mut seen = std::collections::BTreeSet::new();
        for t in 0..64 {
            let how = FailoverConfig::topic(&format!("t{t}")).pick;
            seen.insert(pick(&[(1, 0, "x"), (2, 0, "y"), (3, 0, "z")], how));
        }
        assert_eq!(seen.len(), 3);
        // A lower priority level wins whatever the ring says.
        assert_eq!(pick(&[(1, 1, "x"), (2, 0, "y")], how), Some(2));
    }

    #[test]
    fn ring_point_past_the_last_wraps_to_the_first() {
        let cs = [(1, 0, "x"), (2, 0, "y")];
        let first = (0..RING_POINTS)
            .flat_map(|j| {
                ["x", "y"].map(|n| (crate::hash::key_hash31(format!("{n}{j}").as_bytes()), n))
            })
            .min()
            .map(|(_, n)| if n == "x" { 1 } else { 2 });
        assert_eq!(pick(&cs, ActivePick::TopicHash(u32::MAX)), first);
        assert_eq!(pick(&cs, ActivePick::TopicHash(0)), first);
    }
}
