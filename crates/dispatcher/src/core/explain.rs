//! Explain and stats: why a key waits, and the counters a broker exports.

use cursor::Position;

use crate::config::ConsumerId;
use crate::hash::HashRange;

/// Why entries of a hash are not dispatched right now, from
/// [`Dispatcher::why_blocked`](crate::Dispatcher::why_blocked).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockReason {
    /// The hash moved away from `consumer`, which still has `pending` unacked entries of it.
    DrainingOn {
        /// The old owner, draining the hash.
        consumer: ConsumerId,
        /// Its pending entries of the hash.
        pending: u32,
    },
    /// An earlier entry of the hash waits in replay at `position`; later entries queue behind.
    BehindReplay {
        /// The first replay position with this hash.
        position: Position,
    },
    /// A nacked entry of the hash waits in replay (ordered nack): no entry of the hash goes to
    /// anyone until it is re-sent, not before `until` (it may be later: permits, draining).
    HeldByNack {
        /// The first nacked position of the hash.
        position: Position,
        /// Its not-before time (0 = due now).
        until: u64,
    },
    /// A nacked entry of the hash reached the dead-letter threshold and is parked: the key
    /// waits for [`release_parked`](crate::Dispatcher::release_parked) or
    /// [`dead_letter_parked`](crate::Dispatcher::dead_letter_parked).
    Parked {
        /// The first parked position of the hash.
        position: Position,
    },
    /// The owner has no permits (or is blocked on unacked messages).
    NoPermits {
        /// The owner.
        consumer: ConsumerId,
    },
    /// Key-serial dispatch: the key already has `unacked` entries sent and not acknowledged,
    /// its limit ([`DispatcherConfig::max_unacked_per_key`](crate::DispatcherConfig::max_unacked_per_key)).
    KeySerial {
        /// Unacked entries of the key now.
        unacked: u32,
    },
    /// No consumer covers the hash (exclusive ranges, or no consumer at all).
    UnassignedRange,
    /// Nothing holds the hash back.
    NotBlocked,
}

/// One draining hash of a consumer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DrainingHashStats {
    /// The hash.
    pub hash: u32,
    /// The consumer's pending entries of it.
    pub pending: u32,
    /// How often another consumer was refused the hash.
    pub blocked_attempts: u32,
}

/// Who holds what in a dispatcher, from [`Dispatcher::holdings`](crate::Dispatcher::holdings):
/// what a reference model of the deliveries and acks (a simulator's) compares against.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Holdings {
    /// Every connected consumer, in dispatch (priority) order.
    pub consumers: Vec<Holder>,
    /// The draining hashes (Key_Shared): (hash, owner, pending references), ascending by hash.
    pub draining: Vec<(u32, ConsumerId, u32)>,
    /// Chunked messages pinned to the consumer that has their first chunk.
    pub chunk_pins: usize,
}

/// One consumer's share of [`Holdings`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    /// Its id.
    pub id: ConsumerId,
    /// Its name.
    pub name: String,
    /// Unacked messages charged to it (a batch entry counts its messages not acked yet).
    pub unacked: i64,
    /// Its pending entries (sent, not acked, not returned), ascending, with their hashes.
    pub pending: Vec<(Position, u32)>,
}

/// Per-consumer figures, from [`Dispatcher::consumer_stats`](crate::Dispatcher::consumer_stats).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerStats {
    /// Consumer id.
    pub id: ConsumerId,
    /// Consumer name.
    pub name: String,
    /// Priority level.
    pub priority: i32,
    /// Permits left (messages; may be negative).
    pub permits: i64,
    /// Permits granted while it was blocked on unacked messages, applied when it resumes.
    pub parked_permits: i64,
    /// Unacked messages charged to it.
    pub unacked: i64,
    /// Entries in its pending acks.
    pub pending_entries: usize,
    /// Blocked on unacked messages.
    pub blocked_on_unacked: bool,
    /// Hashes it drains (Key_Shared), ascending.
    pub draining: Vec<DrainingHashStats>,
    /// The hash ranges the selector assigns it now (Key_Shared; Pulsar's `keyHashRanges`),
    /// ascending; empty on Shared.
    pub hash_ranges: Vec<HashRange>,
}

/// Subscription figures, from [`Dispatcher::stats`](crate::Dispatcher::stats).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DispatcherStats {
    /// Connected consumers.
    pub consumers: usize,
    /// Failover: the active consumer (`None` on Shared and Key_Shared).
    pub active_consumer: Option<ConsumerId>,
    /// Positions waiting in replay.
    pub replay_size: usize,
    /// Key_Shared look-ahead reads taken past blocked keys.
    pub look_ahead_triggers: u64,
    /// Orphan chunks dispatched (not replayed).
    pub orphan_chunks: u64,
    /// Unblock notifications from the draining tracker.
    pub unblock_notifications: u64,
    /// Draining hashes force-released by the draining timeout (each also a WARN).
    pub draining_force_released: u64,
    /// Hashes draining now.
    pub draining_hashes: usize,
    /// Entries sent so far.
    pub entries_sent: u64,
    /// Messages sent so far.
    pub messages_sent: u64,
    /// Key_Shared read results parked in replay because an earlier position entered replay
    /// while the read was in flight.
    pub read_results_discarded: u64,
    /// Entries refused at send time (draining conflict or closed map) and put back to replay.
    pub send_time_refusals: u64,
    /// Positions requeued by redelivery requests (nacks included).
    pub redeliveries: u64,
    /// Positions nacked through [`handle_nack`](crate::Dispatcher::handle_nack).
    pub nacks: u64,
    /// Positions given back through [`handle_release`](crate::Dispatcher::handle_release).
    pub releases: u64,
    /// Positions handed to the driver as dead letters.
    pub dead_letters: u64,
    /// Nack holds ended because a mark-delete move (skip, expiry, …) dropped the nacked entry.
    pub holds_ended_by_mark_delete: u64,
    /// Hashes held by a nacked entry now (ordered Key_Shared).
    pub held_hashes: usize,
    /// Entries waiting for their deliver-at time now (Pulsar's `msgDelayed`).
    pub delayed: usize,
    /// Estimated bytes of the delayed-delivery index (Pulsar's
    /// `delayedMessageIndexSizeInBytes`).
    pub delayed_index_bytes: usize,
    /// Entries held for their deliver-at time so far (a re-read entry counts again).
    pub delayed_held: u64,
    /// Key_Shared replay picks so far (each scans the replay set in order).
    pub replay_picks: u64,
    /// Replay entries those picks looked at (the cost of replay on Key_Shared).
    pub replay_scanned: u64,
    /// Distinct hashes with a parked entry now.
    pub parked_keys: usize,
    /// Parked entries now.
    pub parked_entries: usize,
    /// Unacked messages of the subscription.
    pub unacked: i64,
    /// Normal reads blocked on the subscription's unacked limit.
    pub blocked_on_unacked: bool,
    /// Live chunk pins (uuid → consumer).
    pub chunk_pins: usize,
    /// Current adaptive read batch.
    pub read_batch: usize,
}

use super::*;

impl Dispatcher {
    /// Why an entry with this hash would not be dispatched now (Key_Shared). On Shared every
    /// hash is [`BlockReason::NotBlocked`] unless no consumer has permits.
    pub fn why_blocked(&self, hash: u32) -> BlockReason {
        self.explain(hash, None, true)
    }

    /// Why the entry waiting in replay at `position` is not re-sent now; `None` when it is not
    /// in replay. [`BlockReason::NotBlocked`] means the next replay pick sends it: it is the
    /// first replay entry of its key, nothing holds the key, and its consumer (the one it is
    /// pinned to, else the key's owner) has permits. Costs a scan of the replay set: for
    /// diagnostics and checkers, not for a hot path.
    pub fn why_replay_waits(&self, position: Position) -> Option<BlockReason> {
        let (_, entry) = self
            .replay
            .iter_from(Some(position))
            .next()
            .filter(|(p, _)| *p == position)
            .or_else(|| {
                self.replay
                    .iter_all()
                    .into_iter()
                    .find(|(p, _)| *p == position)
            })?;
        Some(self.explain(entry.hash, Some((position, entry.pinned)), true))
    }

    /// The first replay entry that nothing holds back now ([`why_replay_waits`] would say
    /// [`BlockReason::NotBlocked`]): the next replay pick must send it. `None` when every
    /// replay entry waits for something (permits, a draining key, a nack delay, an earlier
    /// entry of its key). One pass over the replay set, stopping at the first such entry: a
    /// checker calls it whenever the dispatcher is idle to prove it does not sit on work.
    ///
    /// [`why_replay_waits`]: Self::why_replay_waits
    pub fn replay_ready(&self) -> Option<Position> {
        if self.consumers.is_empty() {
            return None;
        }
        let mut seen: AHashSet<u32> = AHashSet::new();
        for (p, e) in self.replay.iter() {
            if e.hash != 0 && !seen.insert(e.hash) {
                continue; // behind the first replay entry of its key
            }
            // First of its hash among the scanned entries; an earlier one kept behind a nack
            // hold makes the hash held, which `explain` reports.
            if self.explain(e.hash, Some((p, e.pinned)), false) == BlockReason::NotBlocked {
                return Some(p);
            }
        }
        None
    }

    /// [`why_blocked`](Self::why_blocked), or for the replay entry `at` (with its pin) what
    /// [`why_replay_waits`](Self::why_replay_waits) says: only an earlier replay entry of the
    /// hash keeps it behind (looked up when `scan_replay`), and its pin (or the key's pin to a
    /// half-delivered chunked message) names its consumer, as in the replay pick.
    fn explain(
        &self,
        hash: u32,
        at: Option<(Position, Option<ConsumerId>)>,
        scan_replay: bool,
    ) -> BlockReason {
        if self.consumers.is_empty() {
            return BlockReason::UnassignedRange;
        }
        let pin = at.and_then(|(_, pin)| pin.or_else(|| self.hash_pin(hash)));
        let owner = match self.mode.key_shared() {
            Some(k) => match pin.or_else(|| k.selector.select(hash)) {
                Some(o) => Some(o),
                None => return BlockReason::UnassignedRange,
            },
            None => None,
        };
        if let Some(dr) = self.mode.key_shared().and_then(|k| k.draining.as_ref()) {
            if let Some(e) = dr.get(hash) {
                if Some(e.owner) != owner {
                    return BlockReason::DrainingOn {
                        consumer: e.owner,
                        pending: e.ref_count,
                    };
                }
            }
        }
        if let Some(ks) = self.mode.key_shared().and_then(|k| k.key_serial.as_ref()) {
            if ks.at_limit(hash) {
                return BlockReason::KeySerial {
                    unacked: ks.count(hash),
                };
            }
        }
        if let Some((position, until)) = self.replay.first_held(hash) {
            // A replay entry that is itself the held nack waits for its time, like the rest.
            return if until == PARKED {
                BlockReason::Parked { position }
            } else {
                BlockReason::HeldByNack { position, until }
            };
        }
        if scan_replay && self.replay.contains_hash(hash) {
            if let Some((p, _)) = self
                .replay
                .iter_all()
                .into_iter()
                .find(|(_, e)| e.hash == hash)
            {
                if at.is_none_or(|(q, _)| p < q) {
                    return BlockReason::BehindReplay { position: p };
                }
            }
        }
        match owner {
            Some(o) => match self.find(o) {
                Some(i) if self.available_permits(&self.consumers[i]) > 0 => {
                    BlockReason::NotBlocked
                }
                _ => BlockReason::NoPermits { consumer: o },
            },
            None => match self
                .consumers
                .iter()
                .find(|c| self.available_permits(c) > 0)
            {
                Some(_) => BlockReason::NotBlocked,
                None => BlockReason::NoPermits {
                    consumer: self.consumers[0].id,
                },
            },
        }
    }

    /// [`why_blocked`](Self::why_blocked) for a sticky key (ordering key bytes).
    pub fn why_blocked_key(&self, key: &[u8]) -> BlockReason {
        let h = match self.mode.key_shared() {
            Some(key_shared) => slot(key_hash31(key), key_shared.selector.key_range()),
            None => 0,
        };
        self.why_blocked(h)
    }

    /// The consumer owning `hash` now (Key_Shared), if any.
    pub fn owner_of_hash(&self, hash: u32) -> Option<ConsumerId> {
        self.mode.key_shared().and_then(|k| k.selector.select(hash))
    }

    /// Subscription-wide figures.
    pub fn stats(&self) -> DispatcherStats {
        let parked = self.replay.parked();
        DispatcherStats {
            consumers: self.consumers.len(),
            active_consumer: self.active,
            replay_size: self.replay.len(),
            look_ahead_triggers: self.counters.look_ahead_triggers,
            orphan_chunks: self.counters.orphan_chunks,
            unblock_notifications: self.wake.unblock_notifications.load(Ordering::Relaxed),
            draining_force_released: self.counters.draining_force_released,
            draining_hashes: self
                .mode
                .key_shared()
                .and_then(|k| k.draining.as_ref())
                .map_or(0, |d| d.len()),
            entries_sent: self.counters.entries_sent,
            messages_sent: self.counters.messages_sent,
            read_results_discarded: self.counters.read_results_discarded,
            send_time_refusals: self.counters.send_time_refusals,
            redeliveries: self.counters.redeliveries,
            nacks: self.counters.nacks,
            releases: self.counters.releases,
            dead_letters: self.counters.dead_letters,
            holds_ended_by_mark_delete: self.counters.holds_ended_by_mark_delete,
            delayed: self.delayed.len(),
            delayed_index_bytes: self.delayed.memory_bytes(),
            delayed_held: self.counters.delayed_held,
            replay_picks: self.counters.replay_picks,
            replay_scanned: self.counters.replay_scanned,
            held_hashes: self.replay.held_hashes(),
            parked_keys: {
                let mut h: Vec<u32> = parked.iter().map(|(_, h)| *h).collect();
                h.sort_unstable();
                h.dedup();
                h.len()
            },
            parked_entries: parked.len(),
            unacked: self.shared.limit.unacked(),
            blocked_on_unacked: self.shared.limit.is_blocked(),
            chunk_pins: self.chunk_pins(),
            read_batch: self.read.batch,
        }
    }

    /// Per-consumer figures, in dispatch (priority) order.
    pub fn consumer_stats(&self) -> Vec<ConsumerStats> {
        let dr = self.mode.key_shared().and_then(|k| k.draining.as_ref());
        let assignment = self.mode.key_shared().map(|k| k.selector.assignment());
        self.consumers
            .iter()
            .map(|c| {
                let draining = dr
                    .map(|d| {
                        d.consumer_stats(c.id)
                            .draining_hashes
                            .into_iter()
                            .filter_map(|h| {
                                d.get(h).map(|e| DrainingHashStats {
                                    hash: h,
                                    pending: e.ref_count,
                                    blocked_attempts: e.blocked_attempts,
                                })
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                ConsumerStats {
                    id: c.id,
                    name: c.name.clone(),
                    priority: c.priority,
                    permits: c.permits,
                    parked_permits: c.parked_permits,
                    unacked: c.unacked(),
                    pending_entries: c.shared.pending.len(),
                    blocked_on_unacked: c.blocked(),
                    draining,
                    hash_ranges: assignment
                        .as_ref()
                        .map(|a| a.ranges_of(c.id))
                        .unwrap_or_default(),
                }
            })
            .collect()
    }

    /// The positions pending on a consumer (ascending), e.g. for a debug dump or a test.
    pub fn pending_positions(&self, id: ConsumerId) -> Vec<(Position, u32)> {
        let mut v = Vec::new();
        if let Some(i) = self.find(id) {
            self.consumers[i]
                .shared
                .pending
                .for_each(|p, a| v.push((position_of(p), a.hash)));
        }
        v
    }

    /// The replay set (ascending positions with their hash).
    pub fn replay_positions(&self) -> Vec<(Position, u32)> {
        self.replay
            .iter_all()
            .into_iter()
            .map(|(p, e)| (p, e.hash))
            .collect()
    }

    /// The draining hashes now: (hash, owner, pending references), ascending by hash.
    pub fn draining_hashes(&self) -> Vec<(u32, ConsumerId, u32)> {
        match self.mode.key_shared().and_then(|k| k.draining.as_ref()) {
            Some(d) => {
                let mut v: Vec<_> = d
                    .entries()
                    .into_iter()
                    .map(|(h, e)| (h, e.owner, e.ref_count))
                    .collect();
                v.sort_unstable();
                v
            }
            None => Vec::new(),
        }
    }

    /// Connected consumer ids, in dispatch order.
    pub fn consumer_ids(&self) -> Vec<ConsumerId> {
        self.consumers.iter().map(|c| c.id).collect()
    }

    /// Who holds what now: every consumer's pending entries and unacked charge, the draining
    /// hashes and the chunk pins, for a reference model to compare against.
    ///
    /// ```
    /// use dispatcher::{ConsumerSpec, Dispatcher, DispatcherConfig, NoopWaker};
    /// use std::sync::Arc;
    ///
    /// let mut d = Dispatcher::new(DispatcherConfig::shared(), Arc::new(NoopWaker));
    /// d.handle_consumer_added(0, ConsumerSpec::new(1, "c1")).unwrap();
    /// let h = d.holdings();
    /// assert_eq!(h.consumers.len(), 1);
    /// assert!(h.consumers[0].pending.is_empty() && h.draining.is_empty());
    /// ```
    pub fn holdings(&self) -> Holdings {
        Holdings {
            consumers: self
                .consumers
                .iter()
                .map(|c| Holder {
                    id: c.id,
                    name: c.name.clone(),
                    unacked: c.unacked(),
                    pending: self.pending_positions(c.id),
                })
                .collect(),
            draining: self.draining_hashes(),
            chunk_pins: self.chunk_pins(),
        }
    }

    fn chunk_pins(&self) -> usize {
        self.mode
            .key_shared()
            .map_or_else(|| self.mode.shared_pin_count(), |k| k.pins.len())
    }
}
