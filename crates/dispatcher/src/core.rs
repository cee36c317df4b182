//! The sans-IO dispatcher core: inputs are `handle_*(now, …)`, outputs are [`Command`]s.

use std::collections::{BTreeMap, VecDeque};

use ahash::{AHashMap, AHashSet};
use chunk_assignor::{AssignEntry, ChunkAssignor, ChunkRef, ConsumerSlot};
use cursor::{Entry, MarkDeleteMove, MarkDeleteReason, Position};
use draining_hashes::{DrainingHashes, Reduced};
use pending_acks::{AddRefused, PendingAcks, RemovalCause};
use tracing::{debug, trace, warn};

use crate::config::{
    ConsumerId, ConsumerSpec, DeadLetterAction, DispatcherConfig, KeySharedConfig, KeySharedMode,
    SubscriptionType,
};
use crate::error::AddConsumerError;
use crate::explain::{BlockReason, ConsumerStats, DispatcherStats, DrainingHashStats};
use crate::hash::{key_hash31, slot, sticky_key_bytes, KeyFields};
use crate::replay::{ReplaySet, PARKED};
use crate::selector::{
    ranges_contain, AutoSplitSelector, ConsistentHashingSelector, ConsumerInfo,
    ExclusiveRangeSelector, ImpactedConsumers, StickyKeySelector,
};
use crate::shared::{
    ConsumerShared, DrainAddHandler, DrainListener, DrainRemoveHandler, PaPos, SubShared,
    WakeState, Waker,
};
use crate::sync::{Arc, AtomicBool, AtomicI64, Ordering, RwLock};

/// A boxed selector, as the dispatcher holds it (users may plug their own).
pub type BoxedSelector = Box<dyn StickyKeySelector<ConsumerId> + Send>;

/// What the driver must do next. Drain with [`Dispatcher::poll_command`] after every
/// `handle_*` call and execute in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Rewind the cursor (`cursor.rewind`): the last consumer left (or a read completed after
    /// it left), so the next read starts at the first unacked entry again. Emitted once no read
    /// is in flight.
    Rewind,
    /// Read up to `max_entries` entries from the cursor's read position and pass them to
    /// [`Dispatcher::handle_read_complete`]. At the end of the topic the driver reports an empty
    /// result; the dispatcher then waits for [`Dispatcher::handle_entries_appended`].
    Read {
        /// Largest number of entries to read.
        max_entries: usize,
    },
    /// Read these positions (`cursor.replay`) and pass the result to
    /// [`Dispatcher::handle_replay_complete`].
    Replay {
        /// Ascending positions.
        positions: Vec<Position>,
    },
    /// Deliver these entries, in order, to the consumer.
    Send {
        /// The receiving consumer.
        consumer: ConsumerId,
        /// The entries, ascending within one command.
        entries: Vec<Entry>,
    },
    /// Call [`Dispatcher::handle_timeout`] at or after this time (replaces earlier timers; see
    /// also [`Dispatcher::poll_timeout`]).
    SetTimer {
        /// Absolute time in the caller's unit.
        at: u64,
    },
}

/// Where the dispatch predicate is asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Entries from a normal (cursor) read.
    NormalRead,
    /// Choosing which replay positions to read.
    ReplayPick,
    /// Adding to the consumer's pending acks right before the send (the add handler).
    SendTime,
}

/// The answer of the dispatch predicate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The entry may go to the consumer.
    Allow,
    /// An earlier entry of the hash waits in replay (normal reads only).
    BehindReplay,
    /// Another consumer still drains the hash.
    Draining,
}

/// The draining part of the dispatch predicate, shared with the send-time add handler.
///
/// At the read and replay gates it is the tracker's `should_block` (which counts blocked
/// attempts and lazily drops an entry whose hash came back to its owner). At send time it only
/// looks (the attempt was counted at the first gate, and a pinned chunk may legitimately go to
/// the owner of a draining entry without ending it).
pub(crate) fn draining_conflict(
    draining: &DrainingHashes<ConsumerId>,
    gate: Gate,
    consumer: ConsumerId,
    hash: u32,
) -> bool {
    if hash == 0 {
        return false;
    }
    match gate {
        Gate::SendTime => draining.get(hash).is_some_and(|e| e.owner != consumer),
        Gate::NormalRead | Gate::ReplayPick => draining.should_block(consumer, hash),
    }
}

/// Adapter: the chunk assignor looks at an entry's chunk metadata through this.
struct Item(Entry);

impl AssignEntry for Item {
    fn chunk(&self) -> Option<ChunkRef<'_>> {
        self.0.meta.chunk.as_ref().map(|c| ChunkRef {
            uuid: &c.uuid,
            chunk_id: c.chunk_id,
            num_chunks: c.num_chunks,
        })
    }
}

/// Core-side consumer state.
struct Consumer {
    id: ConsumerId,
    name: String,
    priority: i32,
    /// Permits in messages; may go negative (dispatch is per entry, at least one).
    permits: i64,
    /// Permits received while blocked on unacked messages.
    parked_permits: i64,
    shared: Arc<ConsumerShared>,
    count_next: Arc<AtomicBool>,
    /// Key_Shared: a normal read was blocked for this consumer by a hash rule in the last batch.
    blocked_by_hash: bool,
}

impl Consumer {
    fn blocked(&self) -> bool {
        self.shared.blocked.load(Ordering::SeqCst)
    }

    fn unacked(&self) -> i64 {
        self.shared.unacked.load(Ordering::SeqCst)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReadKind {
    Normal,
    Replay,
}

#[derive(Default)]
struct Counters {
    look_ahead_triggers: u64,
    orphan_chunks: u64,
    draining_force_released: u64,
    entries_sent: u64,
    messages_sent: u64,
    read_results_discarded: u64,
    send_time_refusals: u64,
    redeliveries: u64,
    nacks: u64,
    releases: u64,
    dead_letters: u64,
    holds_ended_by_mark_delete: u64,
}

struct KeyShared {
    cfg: KeySharedConfig,
    selector: BoxedSelector,
    draining: Option<Arc<DrainingHashes<ConsumerId>>>,
    /// uuid → consumer that received chunk 0 of a half-delivered chunked message.
    pins: AHashMap<String, (ConsumerId, u32)>,
    /// hash → (consumer, open chunked messages of that hash on it): while a chunked message of
    /// a key is half-delivered, every later entry of the key follows it to that consumer, so
    /// the client completes the messages in position order (a chunked message counts at its
    /// last chunk) and nothing waits for something queued behind it.
    hash_pins: AHashMap<u32, (ConsumerId, u32)>,
    /// Hash → time it was first refused by a draining rule (draining timeout only).
    blocked_since: AHashMap<u32, u64>,
}

impl KeyShared {
    fn ordered(&self) -> bool {
        !self.cfg.allow_out_of_order
    }
}

/// Key_Shared chunk pins: chunk 0 of a multi-chunk message pins its uuid (and its hash) to the
/// consumer, the last chunk unpins them.
fn note_chunk_sent(ks: &mut KeyShared, e: &Entry, c: ConsumerId, hash: u32) {
    let Some(ch) = &e.meta.chunk else { return };
    if ch.num_chunks <= 1 || ch.chunk_id >= ch.num_chunks || ch.uuid.is_empty() {
        return;
    }
    if ch.chunk_id == 0 {
        match ks.pins.insert(ch.uuid.clone(), (c, hash)) {
            None => {
                let p = ks.hash_pins.entry(hash).or_insert((c, 0));
                p.0 = c;
                p.1 += 1;
            }
            // A re-sent chunk 0 re-pins the message (and its hash) to the new consumer.
            Some(_) => {
                if let Some(p) = ks.hash_pins.get_mut(&hash) {
                    p.0 = c;
                }
            }
        }
    } else if ch.chunk_id + 1 == ch.num_chunks {
        if let Some((_, h)) = ks.pins.remove(&ch.uuid) {
            unpin_hash(ks, h);
        }
    }
}

fn unpin_hash(ks: &mut KeyShared, h: u32) {
    if let Some(p) = ks.hash_pins.get_mut(&h) {
        p.1 = p.1.saturating_sub(1);
        if p.1 == 0 {
            ks.hash_pins.remove(&h);
        }
    }
}

/// The sans-IO dispatcher of one subscription (Shared or Key_Shared).
///
/// Single-threaded (`&mut self`), no clock, no threads: every input is a `handle_*` call with
/// the current time, every output a [`Command`] from [`poll_command`](Self::poll_command).
/// The driver owns the cursor and the ledger. Acks do not go through the core: they run on the
/// consumer's thread through an [`AckHandle`](crate::AckHandle) and, when they unblock
/// something, call the [`Waker`]; the driver then calls [`handle_wake`](Self::handle_wake).
pub struct Dispatcher {
    cfg: DispatcherConfig,
    ks: Option<KeyShared>,
    shared: Arc<SubShared>,
    wake: Arc<WakeState>,
    /// Sorted by priority (stable: join order within a level).
    consumers: Vec<Consumer>,
    /// `consumers[i].id`, densely, for fast look-ups.
    ids: Vec<ConsumerId>,
    replay: ReplaySet<Position, ConsumerId>,
    assignor: ChunkAssignor<ConsumerId>,
    rr_last: Option<ConsumerId>,
    commands: VecDeque<Command>,
    pending_read: Option<ReadKind>,
    read_batch: usize,
    at_end: bool,
    rewind_pending: bool,
    min_replay_at_read: Option<Position>,
    skip_next_replay: bool,
    unblock_timer: Option<u64>,
    draining_timer: Option<u64>,
    /// A read that dispatched nothing backs off (Pulsar's retry backoff) instead of spinning.
    retry_timer: Option<u64>,
    retry_backoff: u64,
    skip_backoff: bool,
    /// Key_Shared: the last replay pick found nothing dispatchable and nothing relevant changed
    /// since (the pick scans the replay set, so it is not repeated for nothing).
    replay_settled: bool,
    scratch_blocked: AHashSet<u32>,
    last_timer_sent: Option<u64>,
    last_md: Option<Position>,
    redelivery_counts: BTreeMap<Position, u32>,
    /// Earliest not-before time of a delayed (nacked) replay entry.
    nack_timer: Option<u64>,
    /// Dead letters for the driver (see `poll_dead_letter`).
    dead_letters: VecDeque<Position>,
    counters: Counters,
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("subscription", &self.cfg.subscription)
            .field("consumers", &self.ids)
            .field("replay", &self.replay.len())
            .field("pending_read", &self.pending_read)
            .field("commands", &self.commands.len())
            .finish_non_exhaustive()
    }
}

fn pa(p: Position) -> PaPos {
    (p.ledger_id, p.entry_id)
}

fn from_pa(p: PaPos) -> Position {
    Position::new(p.0, p.1)
}

impl Dispatcher {
    /// A dispatcher for `cfg`, waking its driver through `waker`.
    ///
    /// On Key_Shared the selector follows `cfg`'s mode; use
    /// [`with_selector`](Self::with_selector) to plug in your own.
    pub fn new(cfg: DispatcherConfig, waker: std::sync::Arc<dyn Waker>) -> Self {
        let selector: Option<BoxedSelector> = match cfg.subscription {
            SubscriptionType::Shared => None,
            SubscriptionType::KeyShared(k) => Some(match k.mode {
                KeySharedMode::ConsistentHashing { points } => {
                    Box::new(ConsistentHashingSelector::new(points))
                }
                KeySharedMode::AutoSplit => Box::new(AutoSplitSelector::new()),
                KeySharedMode::Exclusive => Box::new(ExclusiveRangeSelector::new()),
            }),
        };
        Self::build(cfg, waker, selector)
    }

    /// A Key_Shared dispatcher with a caller-supplied selector (the mode in `cfg` then only
    /// decides whether draining is required: AUTO_SPLIT modes and not out-of-order). On a
    /// Shared `cfg` the selector is ignored.
    pub fn with_selector(
        cfg: DispatcherConfig,
        waker: std::sync::Arc<dyn Waker>,
        selector: BoxedSelector,
    ) -> Self {
        Self::build(cfg, waker, Some(selector))
    }

    fn build(
        cfg: DispatcherConfig,
        waker: std::sync::Arc<dyn Waker>,
        selector: Option<BoxedSelector>,
    ) -> Self {
        let wake = Arc::new(WakeState {
            hashes_unblocked: AtomicBool::new(false),
            unacked_unblocked: AtomicBool::new(false),
            unblock_notifications: crate::sync::AtomicU64::new(0),
            waker,
        });
        let (ks, count_hashes) = match (cfg.subscription, selector) {
            (SubscriptionType::KeyShared(k), Some(selector)) => {
                let draining_required =
                    !k.allow_out_of_order && !matches!(k.mode, KeySharedMode::Exclusive);
                let draining = draining_required.then(|| {
                    let listener: draining_hashes::Arc<dyn draining_hashes::UnblockListener> =
                        draining_hashes::Arc::new(DrainListener(wake.clone()));
                    Arc::new(DrainingHashes::new(listener))
                });
                (
                    Some(KeyShared {
                        cfg: k,
                        selector,
                        draining,
                        pins: AHashMap::new(),
                        hash_pins: AHashMap::new(),
                        blocked_since: AHashMap::new(),
                    }),
                    !k.allow_out_of_order,
                )
            }
            _ => (None, false),
        };
        let shared = Arc::new(SubShared {
            consumers: RwLock::new(Vec::new()),
            unacked: AtomicI64::new(0),
            blocked: AtomicBool::new(false),
            max_unacked: i64::try_from(cfg.max_unacked_per_subscription).unwrap_or(i64::MAX),
            wake: wake.clone(),
        });
        let read_batch = cfg.min_read_batch.max(1);
        let assignor = ChunkAssignor::new(cfg.assignor);
        Dispatcher {
            cfg,
            ks,
            shared,
            wake,
            consumers: Vec::new(),
            ids: Vec::new(),
            replay: ReplaySet::new(count_hashes),
            assignor,
            rr_last: None,
            commands: VecDeque::new(),
            pending_read: None,
            read_batch,
            at_end: false,
            rewind_pending: false,
            min_replay_at_read: None,
            skip_next_replay: false,
            unblock_timer: None,
            draining_timer: None,
            retry_timer: None,
            retry_backoff: 0,
            skip_backoff: false,
            replay_settled: false,
            scratch_blocked: AHashSet::new(),
            last_timer_sent: None,
            last_md: None,
            redelivery_counts: BTreeMap::new(),
            nack_timer: None,
            dead_letters: VecDeque::new(),
            counters: Counters::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &DispatcherConfig {
        &self.cfg
    }

    pub(crate) fn sub_shared(&self) -> Arc<SubShared> {
        self.shared.clone()
    }

    // ------------------------------------------------------------------ outputs

    /// The next command for the driver, if any.
    pub fn poll_command(&mut self) -> Option<Command> {
        self.commands.pop_front()
    }

    /// The earliest armed timer: call [`handle_timeout`](Self::handle_timeout) at or after it.
    pub fn poll_timeout(&self) -> Option<u64> {
        [
            self.unblock_timer,
            self.draining_timer,
            self.retry_timer,
            self.nack_timer,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn arm_timer_command(&mut self) {
        let t = self.poll_timeout();
        if t.is_some() && t != self.last_timer_sent {
            if let Some(at) = t {
                self.commands.push_back(Command::SetTimer { at });
            }
        }
        self.last_timer_sent = t;
    }

    // ------------------------------------------------------------------ consumers

    fn find(&self, id: ConsumerId) -> Option<usize> {
        self.ids.iter().position(|c| *c == id)
    }

    fn publish_registry(&self) {
        self.shared
            .set_consumers(self.consumers.iter().map(|c| c.shared.clone()).collect());
    }

    /// A consumer joins. On Key_Shared the selector places it and, when draining is required,
    /// every other consumer's pending acks whose hash moved to it start draining.
    pub fn handle_consumer_added(
        &mut self,
        now: u64,
        spec: ConsumerSpec,
    ) -> Result<(), AddConsumerError> {
        if self.find(spec.id).is_some() {
            return Err(AddConsumerError::DuplicateConsumer(spec.id));
        }
        let impacted = match &mut self.ks {
            Some(ks) => {
                let info =
                    ConsumerInfo::with_ranges(spec.id, spec.name.clone(), spec.ranges.clone());
                Some(
                    ks.selector
                        .add_consumer(info)
                        .map_err(AddConsumerError::Selector)?,
                )
            }
            None => None,
        };
        if self.consumers.is_empty() {
            // Pulsar §8.1: the first consumer starts from a clean slate (the rewind was already
            // issued when the last consumer left).
            self.replay.clear();
            self.at_end = false;
        }
        let pending = PendingAcks::new(spec.id);
        let count_next = Arc::new(AtomicBool::new(false));
        if let Some(dr) = self.ks.as_ref().and_then(|k| k.draining.clone()) {
            let add: pending_acks::Arc<dyn pending_acks::AddHandler<PaPos, ConsumerId>> =
                pending_acks::Arc::new(DrainAddHandler {
                    draining: dr.clone(),
                    count_next: count_next.clone(),
                });
            let remove: pending_acks::Arc<dyn pending_acks::RemoveHandler<PaPos, ConsumerId>> =
                pending_acks::Arc::new(DrainRemoveHandler { draining: dr });
            pending.set_add_handler(add);
            pending.set_remove_handler(remove);
        }
        let max_unacked = i64::from(self.cfg.max_unacked_per_consumer);
        let shared = Arc::new(ConsumerShared {
            id: spec.id,
            pending,
            unacked: AtomicI64::new(0),
            blocked: AtomicBool::new(false),
            max_unacked,
        });
        let c = Consumer {
            id: spec.id,
            name: spec.name,
            priority: spec.priority,
            permits: 0,
            parked_permits: 0,
            shared,
            count_next,
            blocked_by_hash: false,
        };
        let at = self.consumers.partition_point(|x| x.priority <= c.priority);
        debug!(consumer = %c.id, name = %c.name, priority = c.priority, "consumer added");
        self.consumers.insert(at, c);
        self.ids.insert(at, spec.id);
        self.publish_registry();
        if let Some(imp) = impacted {
            self.register_draining(&imp, spec.id);
        }
        self.input_arrived();
        self.read_more(now);
        Ok(())
    }

    /// PIP-379 registration (Pulsar §4): for every consumer other than `changed`, pending acks
    /// whose hash lies in a range it lost start draining on it; pending acks whose hash came back
    /// to the consumer that drains it release that draining entry.
    fn register_draining(&mut self, imp: &ImpactedConsumers<ConsumerId>, changed: ConsumerId) {
        let Some(dr) = self.ks.as_ref().and_then(|k| k.draining.clone()) else {
            return;
        };
        for (cid, ranges) in &imp.removed {
            if *cid == changed {
                continue;
            }
            let Some(i) = self.find(*cid) else { continue };
            let c = &self.consumers[i];
            let mut n = 0u32;
            c.shared.pending.for_each(|pos, ack| {
                if ack.hash == 0 {
                    warn!(consumer = %c.id, ledger = pos.0, entry = pos.1, "pending ack without hash on Key_Shared, not draining");
                    return;
                }
                if ranges_contain(ranges, ack.hash) {
                    match dr.recount_entry(c.id, ack.hash) {
                        Ok(()) => n += 1,
                        Err(e) => warn!(consumer = %c.id, hash = ack.hash, error = %e, "draining registration refused"),
                    }
                }
            });
            debug!(consumer = %c.id, references = n, "draining registered");
        }
        for (cid, ranges) in &imp.added {
            if *cid == changed {
                continue;
            }
            let Some(i) = self.find(*cid) else { continue };
            let c = &self.consumers[i];
            c.shared.pending.for_each(|_, ack| {
                if ack.hash != 0
                    && ranges_contain(ranges, ack.hash)
                    && dr.get(ack.hash).is_some_and(|e| e.owner == c.id)
                {
                    let _ = dr.reduce_ref_count(c.id, ack.hash, false);
                }
            });
        }
    }

    /// A consumer leaves (close or disconnect). Its pending acks go to replay with their hash
    /// (their draining references drop without an unblock notification); on Shared its chunk
    /// pins are dropped. When it was the last consumer: replay, pins and draining are cleared
    /// and the next read is preceded by a [`Command::Rewind`]. Unknown id: no-op, returns false.
    pub fn handle_consumer_removed(&mut self, now: u64, id: ConsumerId) -> bool {
        let Some(i) = self.find(id) else {
            return false;
        };
        let impacted = self.ks.as_mut().map(|ks| ks.selector.remove_consumer(id));
        let c = self.consumers.remove(i);
        self.ids.remove(i);
        self.publish_registry();
        let last = self.consumers.is_empty();
        let mut requeued = Vec::new();
        let mut debit = 0i64;
        c.shared.pending.for_each_and_close(|pos, ack| {
            debit += i64::from(ack.remaining);
            requeued.push((from_pa(pos), ack.hash));
        });
        c.shared.unacked.fetch_sub(debit, Ordering::SeqCst);
        self.shared.debit(debit);
        self.assignor.remove_consumer(id);
        if let Some(ks) = &mut self.ks {
            ks.pins.retain(|_, (c, _)| *c != id);
            ks.hash_pins.retain(|_, (c, _)| *c != id);
        }
        self.replay.unpin(|p| p == id);
        if self.rr_last == Some(id) {
            self.rr_last = None;
        }
        debug!(consumer = %id, requeued = requeued.len(), last, "consumer removed");
        if last {
            self.replay.clear();
            self.nack_timer = None;
            self.assignor.clear();
            if let Some(ks) = &mut self.ks {
                ks.pins.clear();
                ks.hash_pins.clear();
                ks.blocked_since.clear();
                if let Some(dr) = &ks.draining {
                    dr.clear();
                }
            }
            self.shared.unacked.store(0, Ordering::SeqCst);
            self.shared.blocked.store(false, Ordering::SeqCst);
            self.rewind_pending = true;
            self.at_end = false;
            self.skip_next_replay = false;
            self.read_more(now);
            return true;
        }
        for (p, h) in requeued {
            if self.last_md.is_none_or(|md| p > md) {
                self.replay.add(p, h, None);
            }
        }
        if let Some(imp) = impacted {
            self.register_draining(&imp, id);
        }
        if let Some(dr) = self.ks.as_ref().and_then(|k| k.draining.as_ref()) {
            dr.consumer_removed(id);
        }
        self.input_arrived();
        self.read_more(now);
        true
    }

    /// A consumer grants `permits` more messages (a client Flow). While the consumer is blocked
    /// on unacked messages the permits are parked until it resumes. Unknown id: no-op, false.
    pub fn handle_flow(&mut self, now: u64, id: ConsumerId, permits: u32) -> bool {
        let Some(i) = self.find(id) else {
            return false;
        };
        let c = &mut self.consumers[i];
        if c.blocked() {
            c.parked_permits = c.parked_permits.saturating_add(i64::from(permits));
        } else {
            c.permits = c.permits.saturating_add(i64::from(permits));
        }
        trace!(consumer = %id, permits, total = c.permits, "flow");
        self.input_arrived();
        self.read_more(now);
        true
    }

    // ------------------------------------------------------------------ wake and timers

    /// Something unblocked off-thread (see [`Waker`]): consumers or the subscription below half
    /// their unacked limit resume now; a released draining hash schedules a read after the
    /// coalescing interval.
    pub fn handle_wake(&mut self, now: u64) {
        self.input_arrived();
        if self.wake.unacked_unblocked.swap(false, Ordering::SeqCst) {
            self.recheck_unacked_blocks();
        }
        if self.wake.hashes_unblocked.swap(false, Ordering::SeqCst) {
            if self.cfg.unblocking_interval == 0 {
                self.skip_next_replay = false;
            } else if self.unblock_timer.is_none() {
                self.unblock_timer = Some(now.saturating_add(self.cfg.unblocking_interval));
            }
        }
        if self.unblock_timer.is_none() {
            self.read_more(now);
        }
        self.arm_timer_command();
    }

    /// A timer armed through [`Command::SetTimer`] is due.
    pub fn handle_timeout(&mut self, now: u64) {
        self.replay_settled = false;
        if self.unblock_timer.is_some_and(|t| t <= now) {
            self.unblock_timer = None;
            self.skip_next_replay = false;
            // Pulsar cancels a parked read so the replay of unblocked entries is not starved.
            self.at_end = false;
        }
        if self.draining_timer.is_some_and(|t| t <= now) {
            self.draining_timer = None;
            self.force_release_expired(now);
        }
        if self.retry_timer.is_some_and(|t| t <= now) {
            self.retry_timer = None;
        }
        if self.nack_timer.is_some_and(|t| t <= now) {
            self.nack_timer = self.replay.next_due(now);
            trace!(next = ?self.nack_timer, "nack delay elapsed");
            // Delayed entries became due: a read backing off must not wait for its retry.
            self.retry_timer = None;
        }
        self.read_more(now);
    }

    /// After a read that dispatched nothing: wait before reading again (1, 2, 4 … up to 10
    /// time units), unless new input (flow, wake, join, leave, appended entries) arrives first.
    fn back_off(&mut self, now: u64) {
        self.retry_backoff = (self.retry_backoff * 2).clamp(1, 10);
        self.retry_timer = Some(now.saturating_add(self.retry_backoff));
    }

    /// New input may allow progress: cancel the retry backoff.
    fn input_arrived(&mut self) {
        self.retry_timer = None;
        self.replay_settled = false;
    }

    /// New entries were appended to the ledger: a read parked at the end of the topic resumes.
    pub fn handle_entries_appended(&mut self, now: u64) {
        self.at_end = false;
        self.input_arrived();
        self.read_more(now);
    }

    fn recheck_unacked_blocks(&mut self) {
        for c in &mut self.consumers {
            if c.shared.max_unacked > 0 && c.blocked() && c.unacked() <= c.shared.max_unacked / 2 {
                c.shared.blocked.store(false, Ordering::SeqCst);
                c.permits = c
                    .permits
                    .saturating_add(std::mem::take(&mut c.parked_permits));
                self.replay_settled = false;
                debug!(consumer = %c.id, permits = c.permits, "consumer resumed below half its unacked limit");
            }
        }
        let max = self.shared.max_unacked;
        if max > 0
            && self.shared.blocked.load(Ordering::SeqCst)
            && self.shared.unacked.load(Ordering::SeqCst) <= max / 2
        {
            self.shared.blocked.store(false, Ordering::SeqCst);
            debug!("subscription resumed below half its unacked limit");
        }
    }

    fn force_release_expired(&mut self, now: u64) {
        let Some(timeout) = self.cfg.draining_timeout else {
            return;
        };
        let Some(ks) = &mut self.ks else { return };
        let Some(dr) = ks.draining.clone() else {
            return;
        };
        let mut next: Option<u64> = None;
        let mut released = 0u64;
        ks.blocked_since.retain(|hash, since| {
            let Some(e) = dr.get(*hash) else { return false };
            if now.saturating_sub(*since) < timeout {
                let due = since.saturating_add(timeout);
                next = Some(next.map_or(due, |n: u64| n.min(due)));
                return true;
            }
            warn!(hash = *hash, owner = %e.owner, pending = e.ref_count, "draining timeout: hash force-released; per-key order is no longer guaranteed for it");
            for _ in 0..e.ref_count {
                match dr.reduce_ref_count(e.owner, *hash, false) {
                    Ok(Reduced::Released { .. }) | Ok(Reduced::NotDraining) | Err(_) => break,
                    Ok(Reduced::Decremented { .. }) => {}
                }
            }
            released += 1;
            false
        });
        self.counters.draining_force_released += released;
        self.draining_timer = next;
    }

    // ------------------------------------------------------------------ redelivery

    /// The consumer asks for these positions again (a nack or ack timeout). Each one pending on
    /// it leaves its pending acks (cause: redelivery) and goes to replay WITH its hash, so on
    /// Key_Shared later entries of the key still wait behind it. Positions not pending on this
    /// consumer are ignored. Returns how many were requeued.
    pub fn handle_redeliver(&mut self, now: u64, id: ConsumerId, positions: &[Position]) -> usize {
        let Some((i, n)) = self.take_back_pending(id, positions, |d, p, hash| {
            d.requeue_redelivered(p, hash);
        }) else {
            return 0;
        };
        self.after_redelivery(i);
        self.input_arrived();
        self.read_more(now);
        n
    }

    /// The consumer asks for all its unacked entries again (epoch bump): every pending ack is
    /// removed (cause: redelivery) and replayed with its hash. Returns how many.
    pub fn handle_redeliver_all(&mut self, now: u64, id: ConsumerId) -> usize {
        let Some(i) = self.find(id) else { return 0 };
        let shared = self.consumers[i].shared.clone();
        let mut items = Vec::new();
        shared
            .pending
            .for_each_and_clear(RemovalCause::RedeliveryRequested, |pos, ack| {
                items.push((from_pa(pos), ack));
            });
        let debit: i64 = items.iter().map(|(_, a)| i64::from(a.remaining)).sum();
        shared.debit(&self.shared, debit);
        for (p, ack) in &items {
            self.requeue_redelivered(*p, ack.hash);
        }
        self.after_redelivery(i);
        self.input_arrived();
        self.read_more(now);
        items.len()
    }

    /// Takes `positions` back from consumer `id`: each one pending on it leaves its pending acks
    /// (cause: redelivery requested) and is handed, with its hash, to `requeue`; the consumer's
    /// unacked count is debited once for all of them. Returns the consumer's index and how many
    /// were pending, or `None` for an unknown consumer. Shared by redelivery and release.
    fn take_back_pending(
        &mut self,
        id: ConsumerId,
        positions: &[Position],
        mut requeue: impl FnMut(&mut Self, Position, u32),
    ) -> Option<(usize, usize)> {
        let i = self.find(id)?;
        let shared = self.consumers[i].shared.clone();
        let mut n = 0;
        let mut debit = 0;
        for &p in positions {
            if let Some(ack) = shared
                .pending
                .remove(pa(p), RemovalCause::RedeliveryRequested)
            {
                debit += i64::from(ack.remaining);
                requeue(self, p, ack.hash);
                n += 1;
            }
        }
        shared.debit(&self.shared, debit);
        Some((i, n))
    }

    fn requeue_redelivered(&mut self, p: Position, hash: u32) {
        self.counters.redeliveries += 1;
        *self.redelivery_counts.entry(p).or_insert(0) += 1;
        if self.last_md.is_none_or(|md| p > md) {
            self.replay.add(p, hash, None);
        }
    }

    fn after_redelivery(&mut self, i: usize) {
        // Pulsar unblocks the consumer's parked permits unconditionally on redelivery.
        let c = &mut self.consumers[i];
        c.permits = c
            .permits
            .saturating_add(std::mem::take(&mut c.parked_permits));
        self.recheck_unacked_blocks();
    }

    /// How many times `position` was asked for again (0 if never).
    pub fn redelivery_count(&self, position: Position) -> u32 {
        self.redelivery_counts.get(&position).copied().unwrap_or(0)
    }

    // ------------------------------------------------------------------ ordered nack

    /// The consumer negatively acknowledged these positions (one message: a chunked message
    /// lists all its chunk entries). Each one pending on it leaves its pending acks (cause:
    /// nacked), its redelivery count increments, and it enters replay with its hash, not to be
    /// re-sent before `now + delay` (`delay: None` takes [`DispatcherConfig::nack_backoff`] on
    /// the new count). A [`Command::SetTimer`] fires at that time.
    ///
    /// On ordered Key_Shared the hash is **held**: no entry of it is sent to anyone until the
    /// nacked entry has been re-sent (later entries queue behind it in position order, whatever
    /// their consumer); other hashes keep flowing. On Shared and out-of-order Key_Shared a nack
    /// is a delayed redelivery, nothing waits for it.
    ///
    /// With a [`DispatcherConfig::dead_letter`] policy, an entry nacked after `max_deliveries`
    /// deliveries is not redelivered: `Continue` hands it to
    /// [`poll_dead_letter`](Self::poll_dead_letter), `Park` keeps it (and its key) until
    /// [`release_parked`](Self::release_parked) or [`dead_letter_parked`](Self::dead_letter_parked).
    ///
    /// Positions not pending on this consumer are ignored (a stale nack); unknown consumer:
    /// no-op. Returns how many positions were nacked.
    pub fn handle_nack(
        &mut self,
        now: u64,
        id: ConsumerId,
        positions: &[Position],
        delay: Option<u64>,
    ) -> usize {
        let Some(i) = self.find(id) else { return 0 };
        let shared = self.consumers[i].shared.clone();
        let mut n = 0;
        let mut debit = 0;
        for &p in positions {
            let Some(ack) = shared.pending.remove(pa(p), RemovalCause::Nacked) else {
                continue;
            };
            debit += i64::from(ack.remaining);
            n += 1;
            self.counters.nacks += 1;
            self.counters.redeliveries += 1;
            let count = {
                let c = self.redelivery_counts.entry(p).or_insert(0);
                *c = c.saturating_add(1);
                *c
            };
            if self.last_md.is_some_and(|md| p <= md) {
                continue;
            }
            let dead = self
                .cfg
                .dead_letter
                .filter(|d| count >= d.max_deliveries.max(1));
            match dead.map(|d| d.action) {
                Some(DeadLetterAction::Continue) => {
                    warn!(consumer = %id, ledger = p.ledger_id, entry = p.entry_id, hash = ack.hash, deliveries = count, "dead letter: entry handed to the driver, its key continues without it");
                    self.counters.dead_letters += 1;
                    self.dead_letters.push_back(p);
                }
                Some(DeadLetterAction::Park) => {
                    warn!(consumer = %id, ledger = p.ledger_id, entry = p.entry_id, hash = ack.hash, deliveries = count, "dead letter: entry parked, its key waits for an operator");
                    self.replay.add_nacked(p, ack.hash, PARKED);
                }
                None => {
                    let d = delay.unwrap_or_else(|| self.cfg.nack_backoff.delay(count));
                    let not_before = if d == 0 { 0 } else { now.saturating_add(d) };
                    debug!(consumer = %id, ledger = p.ledger_id, entry = p.entry_id, hash = ack.hash, redeliveries = count, not_before, "nacked: held until re-sent");
                    self.replay.add_nacked(p, ack.hash, not_before);
                }
            }
        }
        shared.debit(&self.shared, debit);
        self.nack_timer = self.replay.next_due(now);
        self.after_redelivery(i);
        self.input_arrived();
        self.read_more(now);
        n
    }

    /// The consumer gives back entries it received but never handed to its application (in
    /// ordered-nack mode: later messages of a nacked key). Each one pending on it leaves its
    /// pending acks (cause: redelivery requested) and re-enters replay with its hash, in
    /// position order behind the nacked entry, **without** counting a redelivery and without
    /// delay. Positions not pending on this consumer are ignored. Returns how many.
    pub fn handle_release(&mut self, now: u64, id: ConsumerId, positions: &[Position]) -> usize {
        let Some((i, n)) = self.take_back_pending(id, positions, |d, p, hash| {
            if d.last_md.is_none_or(|md| p > md) {
                d.replay.add(p, hash, None);
            }
        }) else {
            return 0;
        };
        self.counters.releases += n as u64;
        debug!(consumer = %id, released = n, "entries released back to replay");
        self.after_redelivery(i);
        self.input_arrived();
        self.read_more(now);
        n
    }

    /// Operator action: the parked entries of `hash` (dead-letter policy `Park`) are replayed
    /// now, in position order; their key stays held until they are re-sent. Their redelivery
    /// counts restart at 0 (a fresh chance). On Shared the hash of every entry is 0. Returns
    /// how many entries were released (0: nothing parked under that hash).
    pub fn release_parked(&mut self, now: u64, hash: u32) -> usize {
        let ps: Vec<Position> = self
            .replay
            .parked()
            .into_iter()
            .filter(|(_, h)| *h == hash)
            .map(|(p, _)| p)
            .collect();
        for p in &ps {
            self.replay.set_not_before(*p, 0);
            self.redelivery_counts.remove(p);
        }
        debug!(
            hash,
            released = ps.len(),
            "parked entries released by the operator"
        );
        self.input_arrived();
        self.read_more(now);
        ps.len()
    }

    /// Operator action: the parked entries of `hash` become dead letters
    /// ([`poll_dead_letter`](Self::poll_dead_letter)) and the key flows again. Returns how
    /// many.
    pub fn dead_letter_parked(&mut self, now: u64, hash: u32) -> usize {
        let ps: Vec<Position> = self
            .replay
            .parked()
            .into_iter()
            .filter(|(_, h)| *h == hash)
            .map(|(p, _)| p)
            .collect();
        for p in &ps {
            self.replay.remove(*p);
            self.dead_letters.push_back(*p);
        }
        self.counters.dead_letters += ps.len() as u64;
        debug!(
            hash,
            dead_letters = ps.len(),
            "parked entries dead-lettered by the operator"
        );
        self.input_arrived();
        self.read_more(now);
        ps.len()
    }

    /// The next dead letter for the driver, if any: publish it to the dead-letter topic, then
    /// ack it on the cursor (the dispatcher already forgot it: it is neither pending nor in
    /// replay). Drain after [`handle_nack`](Self::handle_nack) and
    /// [`dead_letter_parked`](Self::dead_letter_parked) when a dead-letter policy is set.
    pub fn poll_dead_letter(&mut self) -> Option<Position> {
        self.dead_letters.pop_front()
    }

    /// Parked entries (position, hash), ascending.
    pub fn parked_positions(&self) -> Vec<(Position, u32)> {
        self.replay.parked()
    }

    // ------------------------------------------------------------------ mark-delete hook

    /// The cursor's mark-delete moved (the driver ran skip, clear-backlog, expiry, quota
    /// eviction or reset on the cursor, or an ack moved it). The hook per reason:
    ///
    /// * every reason: replay entries at or below the new mark-delete are dropped;
    /// * Skip / ClearBacklog / Expiry / BacklogQuota on **Shared**: pending acks at or below it
    ///   are removed (cause: mark-delete advanced) and unacked counts debited;
    /// * the same on **Key_Shared**: pending acks are KEPT, so a draining hash stays blocked
    ///   until its old owner acks, nacks, asks for redelivery or disconnects (the fix for
    ///   Pulsar bug B-1; [`DispatcherConfig::legacy_mark_delete_cleanup`] restores the bug);
    ///   a read is scheduled after the unblocking interval;
    /// * Ack / CumulativeAck: nothing more (acks clear their own pending entries);
    /// * Reset: the caller must disconnect every consumer before resetting the cursor (as
    ///   Pulsar does); the replay set is cleared.
    pub fn handle_mark_delete_moved(&mut self, now: u64, mv: &MarkDeleteMove) {
        let md = mv.to;
        if mv.reason == MarkDeleteReason::Reset {
            self.replay.clear();
            self.nack_timer = None;
            self.redelivery_counts.clear();
            self.last_md = Some(md);
            self.at_end = false;
            self.input_arrived();
            self.read_more(now);
            return;
        }
        self.last_md = Some(self.last_md.map_or(md, |m| m.max(md)));
        let (dropped, ended) = self.replay.remove_all_up_to(md);
        for (p, hash) in &ended {
            debug!(ledger = p.ledger_id, entry = p.entry_id, hash, reason = ?mv.reason, "nack hold ended: the nacked entry was dropped by a mark-delete move");
        }
        self.counters.holds_ended_by_mark_delete += ended.len() as u64;
        if !ended.is_empty() {
            self.nack_timer = self.replay.next_due(now);
        }
        self.redelivery_counts = self.redelivery_counts.split_off(&md.next());
        let admin = matches!(
            mv.reason,
            MarkDeleteReason::Skip
                | MarkDeleteReason::ClearBacklog
                | MarkDeleteReason::Expiry
                | MarkDeleteReason::BacklogQuota
        );
        debug!(reason = ?mv.reason, ledger = md.ledger_id, entry = md.entry_id, replay_dropped = dropped, "mark-delete moved");
        if admin {
            let clean = self.ks.is_none() || self.cfg.legacy_mark_delete_cleanup;
            if clean {
                let mut removed_total = 0usize;
                for c in &self.consumers {
                    let mut debit = 0i64;
                    removed_total += c.shared.pending.remove_all_up_to(
                        pa(md),
                        RemovalCause::MarkDeleteAdvanced,
                        |_, ack| debit += i64::from(ack.remaining),
                    );
                    c.shared.debit(&self.shared, debit);
                }
                if self.ks.is_some() && removed_total > 0 {
                    warn!(removed = removed_total, "legacy mark-delete cleanup removed Key_Shared pending acks (Pulsar bug B-1 behaviour)");
                }
                self.recheck_unacked_blocks();
            }
            if self.ks.is_some() && self.cfg.unblocking_interval > 0 {
                if self.unblock_timer.is_none() {
                    self.unblock_timer = Some(now.saturating_add(self.cfg.unblocking_interval));
                }
                self.arm_timer_command();
                return;
            }
        }
        self.input_arrived();
        self.read_more(now);
    }

    // ------------------------------------------------------------------ read loop

    fn available_permits(&self, c: &Consumer) -> i64 {
        if c.blocked() || c.permits <= 0 {
            return 0;
        }
        let mut p = c.permits;
        if c.shared.max_unacked > 0 {
            p = p.min(c.shared.max_unacked - c.unacked());
        }
        p.max(0)
    }

    fn look_ahead_limit(&self) -> usize {
        let per_c = self.cfg.look_ahead_per_consumer;
        let per_s = self.cfg.look_ahead_per_subscription;
        let n = self.consumers.len() as i64;
        let mut limit = if per_c <= 0 {
            per_s
        } else {
            let l = per_c.saturating_mul(n);
            if per_s > 0 {
                l.min(per_s)
            } else {
                l
            }
        };
        if limit <= 0 {
            let a = self.shared.max_unacked;
            let b = i64::from(self.cfg.max_unacked_per_consumer).saturating_mul(n);
            limit = match (a > 0, b > 0) {
                (true, true) => a.min(b),
                (true, false) => a,
                (false, true) => b,
                (false, false) => i64::MAX,
            };
        }
        usize::try_from(limit).unwrap_or(usize::MAX)
    }

    fn read_more(&mut self, now: u64) {
        self.arm_timer_command();
        if self.pending_read.is_some() {
            return;
        }
        if std::mem::take(&mut self.rewind_pending) {
            // The last consumer left (Pulsar rewinds when the next one joins; rewinding as soon
            // as no read is in flight is equivalent and keeps every unacked entry accounted
            // for: it is ahead of the read position again).
            self.commands.push_back(Command::Rewind);
            self.at_end = false;
        }
        if self.consumers.is_empty() || self.retry_timer.is_some() {
            return;
        }
        let total: i64 = self
            .consumers
            .iter()
            .map(|c| self.available_permits(c))
            .sum();
        if total <= 0 {
            return;
        }
        let n = usize::try_from(total)
            .unwrap_or(usize::MAX)
            .min(self.read_batch)
            .max(1);
        let settled = self.ks.is_some() && self.replay_settled;
        if !self.replay.is_empty() && !std::mem::take(&mut self.skip_next_replay) && !settled {
            let positions = self.pick_replay(now, n);
            if !positions.is_empty() {
                trace!(count = positions.len(), "replay read");
                self.pending_read = Some(ReadKind::Replay);
                self.commands.push_back(Command::Replay { positions });
                return;
            }
        }
        if self.at_end {
            return;
        }
        let max = self.cfg.max_unacked_per_subscription;
        if max > 0 && self.shared.blocked.load(Ordering::SeqCst) {
            return;
        }
        let mut n = n;
        if self.ks.is_some() {
            let limit = self.look_ahead_limit();
            if self.replay.len() >= limit {
                return;
            }
            n = n.min(limit - self.replay.len()).max(1);
        }
        self.min_replay_at_read = self.replay.first();
        self.pending_read = Some(ReadKind::Normal);
        trace!(max_entries = n, "normal read");
        self.commands.push_back(Command::Read { max_entries: n });
    }

    /// Replay positions to read now: ascending; on Key_Shared filtered by the dispatch
    /// predicate with a per-pass permit snapshot (Pulsar's replay position filter).
    fn pick_replay(&mut self, now: u64, n: usize) -> Vec<Position> {
        if self.ks.is_none() {
            // Shared: a nacked entry waits for its delay; nothing else waits for it.
            let out: Vec<Position> = self
                .replay
                .iter()
                .filter(|(_, e)| e.not_before <= now)
                .take(n)
                .map(|(p, _)| p)
                .collect();
            return out;
        }
        let mut snapshot: Vec<(ConsumerId, i64)> = self
            .consumers
            .iter()
            .map(|c| (c.id, self.available_permits(c)))
            .collect();
        let mut capacity: i64 = snapshot.iter().map(|(_, p)| *p).sum();
        let mut blocked = std::mem::replace(&mut self.scratch_blocked, AHashSet::new());
        blocked.clear();
        let mut pinned_blocked: AHashSet<(ConsumerId, u32)> = AHashSet::new();
        let mut out = Vec::new();
        let ordered = self.ks.as_ref().is_some_and(|k| k.ordered());
        let holds = self.replay.has_holds();
        // Nacked entries picked in this pass (later entries of their key may follow them).
        let mut going: Vec<Position> = Vec::new();
        for (p, e) in self.replay.iter() {
            if out.len() >= n || capacity <= 0 {
                break;
            }
            if e.not_before > now {
                // A nack delay (or a park): not yet. Its hash stays held (ordered mode).
                if ordered && e.hash != 0 {
                    blocked.insert(e.hash);
                }
                continue;
            }
            if e.hash == 0 {
                out.push(p);
                continue;
            }
            // Pinned entries (a chunked message's continuation, or any entry of a key whose
            // chunked message is half-delivered) are ordered per (consumer, hash) only: that
            // message started before the hash's other waiting entries (which may wait for it).
            let pin = e.pinned.or_else(|| self.hash_pin(e.hash));
            let held = match pin {
                Some(c) => pinned_blocked.contains(&(c, e.hash)),
                None => blocked.contains(&e.hash),
            };
            if held {
                continue;
            }
            // Ordered nack: an earlier nacked entry of the hash (or an entry kept behind one)
            // still waits and is not re-sent in this pass.
            if holds && self.replay.held_before(e.hash, p, &going) {
                if pin.is_none() {
                    blocked.insert(e.hash);
                }
                continue;
            }
            let target = match pin {
                Some(c) => Some(c),
                None => self.ks.as_ref().and_then(|k| k.selector.select(e.hash)),
            };
            let slot = target.and_then(|t| snapshot.iter().position(|(c, _)| *c == t));
            let ok = match (target, slot) {
                (Some(t), Some(i)) => {
                    snapshot[i].1 > 0
                        && (pin.is_some()
                            || self.can_dispatch(Gate::ReplayPick, t, e.hash) == Verdict::Allow)
                }
                _ => false,
            };
            if ok {
                if let Some(i) = slot {
                    snapshot[i].1 -= 1;
                    capacity -= 1;
                }
                if e.nacked {
                    going.push(p);
                }
                out.push(p);
            } else {
                // A held-back pinned entry also holds back later entries of its hash (they may
                // be later chunks of the same message), even in out-of-order mode.
                if ordered || pin.is_some() {
                    blocked.insert(e.hash);
                }
                if let Some(c) = pin {
                    pinned_blocked.insert((c, e.hash));
                }
            }
        }
        self.scratch_blocked = blocked;
        if out.is_empty() {
            // Nothing in replay can go now; only new permits, an unblock, a membership change or
            // new redeliveries can change that (entries a dispatch pass holds back cannot).
            self.replay_settled = true;
        }
        out
    }

    /// THE dispatch predicate, used at every gate: may an entry with `hash` go to `consumer`?
    ///
    /// A normal read never sends a hash that waits in replay (ordered mode); no gate sends a
    /// hash that another consumer still drains. Shared subscriptions always allow.
    pub fn can_dispatch(&self, gate: Gate, consumer: ConsumerId, hash: u32) -> Verdict {
        if gate == Gate::NormalRead && self.replay.contains_hash(hash) {
            return Verdict::BehindReplay;
        }
        if let Some(dr) = self.ks.as_ref().and_then(|k| k.draining.as_ref()) {
            if draining_conflict(dr, gate, consumer, hash) {
                return Verdict::Draining;
            }
        }
        Verdict::Allow
    }

    /// The sticky-key hash (slot) of an entry under the current selector; 0 on Shared.
    pub fn entry_hash(&self, entry: &Entry) -> u32 {
        match &self.ks {
            Some(ks) => {
                let m = &entry.meta;
                let f = KeyFields {
                    ordering_key: m.ordering_key.as_deref(),
                    partition_key: m.partition_key.as_deref(),
                    partition_key_b64: m.partition_key_b64,
                    producer_name: m.producer_name.as_deref(),
                    sequence_id: m.sequence_id,
                };
                slot(key_hash31(&sticky_key_bytes(&f)), ks.selector.key_range())
            }
            None => 0,
        }
    }

    /// A normal read finished: `entries` were read from the cursor (possibly none: end of
    /// topic, the read parks until [`handle_entries_appended`](Self::handle_entries_appended));
    /// `has_more_entries` is the cursor's answer after the read (look-ahead is only taken while
    /// it is true).
    pub fn handle_read_complete(&mut self, now: u64, entries: Vec<Entry>, has_more_entries: bool) {
        if self.pending_read == Some(ReadKind::Normal) {
            self.pending_read = None;
        }
        if self.consumers.is_empty() {
            // Nobody to send to: drop them and rewind, so they are read again later.
            self.rewind_pending = true;
            self.read_more(now);
            return;
        }
        if entries.is_empty() {
            self.at_end = true;
            self.read_more(now);
            return;
        }
        self.read_batch = (self.read_batch * 2).min(self.cfg.max_read_batch.max(1));
        let mut entries = entries;
        if let Some(md) = self.last_md {
            entries.retain(|e| e.position > md);
        }
        let before = self.counters.entries_sent;
        match self.ks.is_some() {
            true => self.dispatch_key_shared(now, entries, false, has_more_entries),
            false => self.dispatch_shared(now, entries, false),
        }
        self.after_dispatch(now, before);
        self.read_more(now);
    }

    /// A replay read finished: `entries` (ascending) and the positions the cursor reported as
    /// already acked (dropped from replay).
    pub fn handle_replay_complete(
        &mut self,
        now: u64,
        entries: Vec<Entry>,
        already_acked: &[Position],
    ) {
        if self.pending_read == Some(ReadKind::Replay) {
            self.pending_read = None;
        }
        self.replay_settled = false;
        for p in already_acked {
            self.replay.remove(*p);
        }
        // Only what is still waiting in replay (a mark-delete move may have dropped some).
        let mut entries = entries;
        entries.retain(|e| self.replay.contains(e.position));
        entries.sort_by_key(|e| e.position);
        let before = self.counters.entries_sent;
        if !entries.is_empty() && !self.consumers.is_empty() {
            match self.ks.is_some() {
                true => self.dispatch_key_shared(now, entries, true, true),
                false => self.dispatch_shared(now, entries, true),
            }
        }
        if !already_acked.is_empty() && self.counters.entries_sent == before {
            // Progress of a kind: acked positions left replay. Read again at once.
            self.retry_backoff = 0;
        } else {
            self.after_dispatch(now, before);
        }
        self.read_more(now);
    }

    fn after_dispatch(&mut self, now: u64, sent_before: u64) {
        if self.counters.entries_sent > sent_before
            || self.skip_next_replay
            || std::mem::take(&mut self.skip_backoff)
        {
            self.retry_backoff = 0;
        } else {
            self.back_off(now);
        }
    }

    // ------------------------------------------------------------------ sending

    /// Adds `entries` to the consumer's pending acks and emits the send. Entries refused at send
    /// time (draining conflict, closed map) go back to replay with their hash. Returns the
    /// number of entries sent.
    fn send_to(&mut self, i: usize, mut out: Vec<Entry>, hashes: &[u32], pinned: &[bool]) -> usize {
        let mut messages = 0i64;
        let id = self.consumers[i].id;
        let mut refused_n = 0u64;
        {
            let c = &self.consumers[i];
            let replay = &mut self.replay;
            let ks = &mut self.ks;
            let last_md = self.last_md;
            let mut k = 0usize;
            // A message whose chunk 0 was refused here must not get its later chunks.
            let mut refused_uuids: Vec<String> = Vec::new();
            out.retain(|e| {
                let hash = hashes.get(k).copied().unwrap_or(0);
                let is_pinned = pinned.get(k).copied().unwrap_or(false);
                k += 1;
                if let Some(ch) = &e.meta.chunk {
                    if ch.chunk_id > 0 && refused_uuids.contains(&ch.uuid) {
                        refused_n += 1;
                        replay.add(e.position, hash, None);
                        return false;
                    }
                }
                let n = e.meta.messages();
                if is_pinned {
                    c.count_next.store(true, Ordering::SeqCst);
                }
                let r = c.shared.pending.add_if_allowed(pa(e.position), n, hash);
                if is_pinned {
                    c.count_next.store(false, Ordering::SeqCst);
                }
                match r {
                    Ok(_) => {
                        if !replay.is_empty() {
                            replay.remove(e.position);
                        }
                        if let Some(ks) = ks.as_mut() {
                            note_chunk_sent(ks, e, id, hash);
                        }
                        messages += i64::from(n);
                        true
                    }
                    Err(refused) => {
                        refused_n += 1;
                        if let Some(ch) = e.meta.chunk.as_ref().filter(|c| c.chunk_id == 0) {
                            refused_uuids.push(ch.uuid.clone());
                        }
                        debug!(consumer = %id, ledger = e.position.ledger_id, entry = e.position.entry_id, hash, reason = ?refused, "send-time add refused, entry back to replay");
                        let continuation =
                            e.meta.chunk.as_ref().is_some_and(|c| c.chunk_id > 0);
                        let pin = if is_pinned && continuation {
                            Some(id)
                        } else {
                            None
                        };
                        if !matches!(refused, AddRefused::Closed)
                            || last_md.is_none_or(|md| e.position > md)
                        {
                            replay.add(e.position, hash, pin);
                        }
                        false
                    }
                }
            });
        }
        self.counters.send_time_refusals += refused_n;
        if out.is_empty() {
            return 0;
        }
        let c = &mut self.consumers[i];
        c.permits = c.permits.saturating_sub(messages);
        c.shared.unacked.fetch_add(messages, Ordering::SeqCst);
        let unacked_sub = self.shared.unacked.fetch_add(messages, Ordering::SeqCst) + messages;
        if c.shared.max_unacked > 0 && c.unacked() >= c.shared.max_unacked && !c.blocked() {
            c.shared.blocked.store(true, Ordering::SeqCst);
            debug!(consumer = %c.id, unacked = c.unacked(), "consumer blocked on unacked messages");
            // The ack path may have crossed half before it saw the flag: re-check.
            if c.unacked() <= c.shared.max_unacked / 2 {
                self.wake.unacked_unblocked.store(true, Ordering::SeqCst);
            }
        }
        let max = self.shared.max_unacked;
        if max > 0 && unacked_sub >= max && !self.shared.blocked.load(Ordering::SeqCst) {
            self.shared.blocked.store(true, Ordering::SeqCst);
            debug!(
                unacked = unacked_sub,
                "subscription blocked on unacked messages"
            );
            if self.shared.unacked.load(Ordering::SeqCst) <= max / 2 {
                self.wake.unacked_unblocked.store(true, Ordering::SeqCst);
            }
        }
        if self.wake.unacked_unblocked.load(Ordering::SeqCst)
            && self.wake.unacked_unblocked.swap(false, Ordering::SeqCst)
        {
            self.recheck_unacked_blocks();
        }
        self.counters.entries_sent += out.len() as u64;
        self.counters.messages_sent += messages as u64;
        let sent = out.len();
        trace!(consumer = %id, entries = sent, messages, "send");
        self.commands.push_back(Command::Send {
            consumer: id,
            entries: out,
        });
        sent
    }

    fn dispatch_shared(&mut self, now: u64, entries: Vec<Entry>, from_replay: bool) {
        if entries.iter().any(|e| e.meta.chunk.is_some()) {
            let slots: Vec<ConsumerSlot<ConsumerId>> = self
                .consumers
                .iter()
                .map(|c| ConsumerSlot {
                    id: c.id,
                    permits: self.available_permits(c),
                    priority: c.priority,
                })
                .collect();
            let before = self.assignor.stats().orphan_chunks;
            let items = entries.into_iter().map(Item);
            let a = self.assignor.assign(now, items.collect(), &slots);
            self.counters.orphan_chunks += self.assignor.stats().orphan_chunks - before;
            for (cid, list) in a.per_consumer {
                if list.is_empty() {
                    continue;
                }
                if let Some(i) = self.find(cid) {
                    let v: Vec<Entry> = list.into_iter().map(|it| it.0).collect();
                    self.send_to(i, v, &[], &[]);
                } else {
                    for it in list {
                        self.replay.add(it.0.position, 0, None);
                    }
                }
            }
            for it in a.replay {
                self.replay.add(it.0.position, 0, None);
            }
            return;
        }
        let total = entries.len();
        let mut consumed = 0usize;
        let mut rest = entries.into_iter().peekable();
        while rest.peek().is_some() {
            let Some(i) = self.next_round_robin() else {
                break;
            };
            let avail = self.available_permits(&self.consumers[i]);
            let cap = self.cfg.max_round_robin_batch.max(1);
            let limit = avail.max(1);
            let mut take = Vec::with_capacity(cap.min(total - consumed));
            let mut msgs = 0i64;
            while let Some(e) = rest.peek() {
                let n = i64::from(e.meta.messages());
                if !take.is_empty() && (msgs + n > limit || take.len() >= cap) {
                    break;
                }
                msgs += n;
                if let Some(e) = rest.next() {
                    take.push(e);
                }
            }
            consumed += take.len();
            self.rr_last = Some(self.consumers[i].id);
            self.send_to(i, take, &[], &[]);
        }
        let _ = from_replay;
        for e in rest {
            self.replay.add(e.position, 0, None);
        }
    }

    /// Pulsar's ConsumerPrioritySelector: the highest priority level with an available consumer,
    /// rotating within the level after the last consumer served.
    fn next_round_robin(&self) -> Option<usize> {
        let avail = |c: &Consumer| self.available_permits(c) > 0;
        let level = self.consumers.iter().find(|c| avail(c))?.priority;
        // Consumers are sorted by priority: the level is one contiguous run.
        let lo = self.consumers.partition_point(|c| c.priority < level);
        let hi = self.consumers.partition_point(|c| c.priority <= level);
        let len = hi - lo;
        let start = self
            .rr_last
            .and_then(|l| self.consumers[lo..hi].iter().position(|c| c.id == l))
            .map_or(0, |p| p + 1);
        (0..len)
            .map(|k| lo + (start + k) % len)
            .find(|&i| avail(&self.consumers[i]))
    }

    fn dispatch_key_shared(
        &mut self,
        now: u64,
        entries: Vec<Entry>,
        from_replay: bool,
        has_more: bool,
    ) {
        let ordered = self.ks.as_ref().is_some_and(|k| k.ordered());
        if !from_replay && ordered {
            let first = self.replay.first();
            let earlier = match (first, self.min_replay_at_read) {
                (Some(f), Some(m)) => f < m,
                (Some(_), None) => true,
                _ => false,
            };
            if earlier {
                // Something earlier entered replay while this read was in flight: park the
                // whole result in replay so the earlier positions go first.
                self.counters.read_results_discarded += 1;
                self.skip_backoff = true;
                debug!(
                    entries = entries.len(),
                    "read result discarded: an earlier position entered replay meanwhile"
                );
                for e in entries {
                    let h = self.entry_hash(&e);
                    self.replay.add(e.position, h, None);
                }
                return;
            }
        }
        let mut snapshot: Vec<i64> = self
            .consumers
            .iter()
            .map(|c| self.available_permits(c))
            .collect();
        for c in &mut self.consumers {
            c.blocked_by_hash = false;
        }
        let n = entries.len();
        let nc = self.consumers.len();
        const HELD: u32 = u32::MAX;
        let mut targets: Vec<bool> = vec![false; nc];
        let mut counts: Vec<usize> = vec![0; nc];
        let mut decision: Vec<u32> = Vec::with_capacity(n);
        let mut hashes: Vec<u32> = Vec::with_capacity(n);
        let mut pins: Vec<bool> = Vec::new();
        let mut blocked: AHashSet<u32> = AHashSet::new();
        let mut dispatched = 0usize;
        let draining_on = self.ks.as_ref().is_some_and(|k| k.draining.is_some());
        // Pass 1: decide per entry (entries held back go to replay with their hash).
        // Chunk pins decided in this batch (chunk 0 accepted into a send group) and messages
        // whose chunk 0 was held back in this batch.
        let mut batch_pins: AHashMap<&str, ConsumerId> = AHashMap::new();
        let mut batch_hash_pins: AHashMap<u32, ConsumerId> = AHashMap::new();
        let mut held_uuids: AHashSet<&str> = AHashSet::new();
        // Pinned continuation chunks are ordered per (consumer, hash), not behind the hash's
        // other entries: their message started before them, on that consumer.
        let mut pinned_blocked: AHashSet<(ConsumerId, u32)> = AHashSet::new();
        // Ordered nack: nacked entries accepted in this batch (later entries of their key in
        // the batch may follow them); any other earlier nacked entry of a key holds it.
        let holds = ordered && self.replay.has_holds();
        let mut going_nacked: Vec<Position> = Vec::new();
        for (k, e) in entries.iter().enumerate() {
            let hash = self.entry_hash(e);
            hashes.push(hash);
            let chunk =
                e.meta.chunk.as_ref().filter(|c| {
                    c.num_chunks > 1 && c.chunk_id < c.num_chunks && !c.uuid.is_empty()
                });
            let continuation = chunk.is_some_and(|c| c.chunk_id > 0);
            if chunk.is_some_and(|c| c.chunk_id > 0 && held_uuids.contains(c.uuid.as_str())) {
                // Its chunk 0 was held back in this batch: follow it to replay.
                self.replay.add(e.position, hash, None);
                decision.push(HELD);
                continue;
            }
            // A continuation chunk follows the consumer that received chunk 0; any other entry
            // of a key with a half-delivered chunked message follows that message.
            // An entry held back under a pin keeps it (the replay pick chose it for that
            // consumer, and that consumer still holds the key).
            let stored = if from_replay {
                self.replay
                    .pinned_of(e.position)
                    .filter(|c| self.find(*c).is_some())
            } else {
                None
            };
            let pin = match stored {
                Some(c) => Some(c),
                None => match chunk {
                    Some(c) if c.chunk_id > 0 => match batch_pins.get(c.uuid.as_str()) {
                        Some(p) => Some(*p),
                        None => self.chunk_pin(e, now),
                    },
                    _ => batch_hash_pins
                        .get(&hash)
                        .copied()
                        .or_else(|| self.hash_pin(hash)),
                },
            };
            fn hold<'a>(held: &mut AHashSet<&'a str>, chunk: Option<&'a cursor::ChunkMeta>) {
                if let Some(c) = chunk.filter(|c| c.chunk_id == 0) {
                    held.insert(c.uuid.as_str());
                }
            }
            let blocked_here = match pin {
                Some(pc) => pinned_blocked.contains(&(pc, hash)),
                None => !blocked.is_empty() && blocked.contains(&hash),
            } || (holds
                && hash != 0
                && (from_replay || pin.is_some())
                && self.replay.held_before(hash, e.position, &going_nacked));
            if blocked_here {
                // Only a continuation chunk keeps its pin in replay; other entries re-resolve
                // the key's live pin (it ends with the half-delivered message).
                self.replay
                    .add(e.position, hash, pin.filter(|_| continuation));
                hold(&mut held_uuids, chunk);
                decision.push(HELD);
                continue;
            }
            let selected = self.ks.as_ref().and_then(|k| k.selector.select(hash));
            let Some(t) = pin.or(selected).and_then(|t| self.find(t)) else {
                blocked.insert(hash);
                self.replay.add(e.position, hash, None);
                hold(&mut held_uuids, chunk);
                decision.push(HELD);
                continue;
            };
            targets[t] = true;
            let verdict = if snapshot[t] <= 0 {
                None
            } else {
                let gate = if from_replay {
                    Gate::ReplayPick
                } else {
                    Gate::NormalRead
                };
                let v = match pin {
                    // A continuation chunk only waits for earlier pinned entries of its key on
                    // its consumer (its message started first); any other pinned entry waits
                    // for every earlier entry of its key (e.g. a nacked one).
                    Some(pc) => {
                        let behind = if continuation {
                            self.replay.contains_pinned(pc, hash)
                        } else {
                            self.replay.contains_hash(hash)
                        };
                        if gate == Gate::NormalRead && behind {
                            Verdict::BehindReplay
                        } else {
                            Verdict::Allow
                        }
                    }
                    None => self.can_dispatch(gate, self.consumers[t].id, hash),
                };
                Some(v)
            };
            match verdict {
                Some(Verdict::Allow) => {
                    snapshot[t] -= i64::from(e.meta.messages());
                    if holds && from_replay && self.replay.first_held(hash).is_some() {
                        going_nacked.push(e.position);
                    }
                    if pin.is_some() && selected != pin && draining_on {
                        if pins.is_empty() {
                            pins = vec![false; n];
                        }
                        pins[k] = true;
                    }
                    if let Some(c) = chunk.filter(|c| c.chunk_id == 0) {
                        batch_pins.insert(c.uuid.as_str(), self.consumers[t].id);
                        batch_hash_pins.insert(hash, self.consumers[t].id);
                    }
                    decision.push(t as u32);
                    counts[t] += 1;
                    dispatched += 1;
                }
                other => {
                    if ordered || chunk.is_some() {
                        blocked.insert(hash);
                    }
                    if let Some(pc) = pin {
                        pinned_blocked.insert((pc, hash));
                    }
                    if matches!(other, Some(Verdict::Draining)) {
                        self.note_draining_block(now, hash);
                    }
                    if other.is_some() && !from_replay {
                        self.consumers[t].blocked_by_hash = true;
                    }
                    self.replay
                        .add(e.position, hash, pin.filter(|_| continuation));
                    hold(&mut held_uuids, chunk);
                    decision.push(HELD);
                }
            }
        }
        // Pass 2: group per consumer (exact capacities) and send.
        let mut groups: Vec<(Vec<Entry>, Vec<u32>, Vec<bool>)> = counts
            .iter()
            .map(|&c| (Vec::with_capacity(c), Vec::with_capacity(c), Vec::new()))
            .collect();
        for (k, e) in entries.into_iter().enumerate() {
            let t = decision[k];
            if t == HELD {
                continue;
            }
            let g = &mut groups[t as usize];
            g.0.push(e);
            g.1.push(hashes[k]);
            if !pins.is_empty() {
                g.2.push(pins[k]);
            }
        }
        for (i, (es, hs, ps)) in groups.into_iter().enumerate() {
            if !es.is_empty() {
                self.send_to(i, es, &hs, &ps);
            }
        }
        // Look-ahead (Pulsar §9.3): nothing went out, yet someone could take more.
        if dispatched == 0 && !from_replay && self.replay.len() < self.look_ahead_limit() {
            let someone =
                self.consumers.iter().enumerate().any(|(i, c)| {
                    (c.blocked_by_hash || !targets[i]) && self.available_permits(c) > 0
                });
            if someone && has_more {
                self.counters.look_ahead_triggers += 1;
                self.skip_next_replay = true;
                debug!(
                    replay = self.replay.len(),
                    "look-ahead: reading past blocked keys"
                );
            }
        }
    }

    fn note_draining_block(&mut self, now: u64, hash: u32) {
        let Some(timeout) = self.cfg.draining_timeout else {
            return;
        };
        let Some(ks) = &mut self.ks else { return };
        ks.blocked_since.entry(hash).or_insert(now);
        let due = now.saturating_add(timeout);
        if self.draining_timer.is_none_or(|t| t > due) {
            let earliest = ks.blocked_since.values().min().copied().unwrap_or(now);
            self.draining_timer = Some(earliest.saturating_add(timeout));
        }
    }

    /// The consumer holding a half-delivered chunked message of this hash, if connected.
    fn hash_pin(&self, hash: u32) -> Option<ConsumerId> {
        let ks = self.ks.as_ref()?;
        if ks.hash_pins.is_empty() {
            return None;
        }
        let (c, _) = ks.hash_pins.get(&hash)?;
        self.find(*c).map(|_| *c)
    }

    /// Key_Shared chunk routing: the consumer a continuation chunk must follow, if its chunk 0
    /// was sent and that consumer is still connected. A continuation without a pin (an orphan,
    /// e.g. after a restart) is routed by its hash like any entry, with a WARN and a counter.
    fn chunk_pin(&mut self, e: &Entry, _now: u64) -> Option<ConsumerId> {
        let ch = e.meta.chunk.as_ref()?;
        if ch.chunk_id == 0 || ch.chunk_id >= ch.num_chunks || ch.uuid.is_empty() {
            return None;
        }
        let ks = self.ks.as_ref()?;
        match ks.pins.get(ch.uuid.as_str()) {
            Some((c, _)) if self.find(*c).is_some() => Some(*c),
            _ => {
                self.counters.orphan_chunks += 1;
                warn!(uuid = %ch.uuid, chunk_id = ch.chunk_id, num_chunks = ch.num_chunks, "orphan chunk on Key_Shared routed by its key");
                None
            }
        }
    }

    // ------------------------------------------------------------------ explain and stats

    /// Why an entry with this hash would not be dispatched now (Key_Shared). On Shared every
    /// hash is [`BlockReason::NotBlocked`] unless no consumer has permits.
    pub fn why_blocked(&self, hash: u32) -> BlockReason {
        if self.consumers.is_empty() {
            return BlockReason::UnassignedRange;
        }
        let owner = match &self.ks {
            Some(k) => match k.selector.select(hash) {
                Some(o) => Some(o),
                None => return BlockReason::UnassignedRange,
            },
            None => None,
        };
        if let Some(dr) = self.ks.as_ref().and_then(|k| k.draining.as_ref()) {
            if let Some(e) = dr.get(hash) {
                if Some(e.owner) != owner {
                    return BlockReason::DrainingOn {
                        consumer: e.owner,
                        pending: e.ref_count,
                    };
                }
            }
        }
        if let Some((position, until)) = self.replay.first_held(hash) {
            return if until == PARKED {
                BlockReason::Parked { position }
            } else {
                BlockReason::HeldByNack { position, until }
            };
        }
        if self.replay.contains_hash(hash) {
            if let Some((p, _)) = self
                .replay
                .iter_all()
                .into_iter()
                .find(|(_, e)| e.hash == hash)
            {
                return BlockReason::BehindReplay { position: p };
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
        let h = match &self.ks {
            Some(ks) => slot(key_hash31(key), ks.selector.key_range()),
            None => 0,
        };
        self.why_blocked(h)
    }

    /// The consumer owning `hash` now (Key_Shared), if any.
    pub fn owner_of_hash(&self, hash: u32) -> Option<ConsumerId> {
        self.ks.as_ref().and_then(|k| k.selector.select(hash))
    }

    /// Subscription-wide figures.
    pub fn stats(&self) -> DispatcherStats {
        let parked = self.replay.parked();
        DispatcherStats {
            consumers: self.consumers.len(),
            replay_size: self.replay.len(),
            look_ahead_triggers: self.counters.look_ahead_triggers,
            orphan_chunks: self.counters.orphan_chunks,
            unblock_notifications: self.wake.unblock_notifications.load(Ordering::Relaxed),
            draining_force_released: self.counters.draining_force_released,
            draining_hashes: self
                .ks
                .as_ref()
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
            held_hashes: self.replay.held_hashes(),
            parked_keys: {
                let mut h: Vec<u32> = parked.iter().map(|(_, h)| *h).collect();
                h.sort_unstable();
                h.dedup();
                h.len()
            },
            parked_entries: parked.len(),
            unacked: self.shared.unacked.load(Ordering::SeqCst),
            blocked_on_unacked: self.shared.blocked.load(Ordering::SeqCst),
            chunk_pins: self
                .ks
                .as_ref()
                .map_or(self.assignor.pin_count(), |k| k.pins.len()),
            read_batch: self.read_batch,
        }
    }

    /// Per-consumer figures, in dispatch (priority) order.
    pub fn consumer_stats(&self) -> Vec<ConsumerStats> {
        let dr = self.ks.as_ref().and_then(|k| k.draining.as_ref());
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
                .for_each(|p, a| v.push((from_pa(p), a.hash)));
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
        match self.ks.as_ref().and_then(|k| k.draining.as_ref()) {
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
}
