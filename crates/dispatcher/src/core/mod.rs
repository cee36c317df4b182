//! The sans-IO dispatcher core: inputs are `handle_*(now, …)`, outputs are [`DispatchCommand`]s.
//!
//! One struct, [`Dispatcher`], whose state and methods are split by concern:
//!
//! | module | concern |
//! |---|---|
//! | `mod.rs` | the struct, construction, the outputs `poll_command` / `poll_timeout` |
//! | `membership` | consumers join and leave, flow permits, draining registration |
//! | `read_loop` | `ReadState` (one enum), wake and timers, the next read or replay, read results |
//! | `gate` | the dispatch predicate (`can_dispatch`) and the send-time gate (`send_gate`) |
//! | `key_shared` | Key_Shared routing: `route_entry` decides, `send_routed` executes |
//! | `pins` | bounded chunk and key pins (Key_Shared) |
//! | `send` | Shared dispatch, the send step, permit and unacked accounting (`charge_send`) |
//! | `redelivery` | redelivery, ordered nack, release, parked entries and dead letters |
//! | `mark_delete` | the mark-delete hook |
//! | `explain` | `why_blocked`, stats and views, beside their types |
//! | `close` | `handle_close`: hand every held entry back, refuse further input |
//! | `delay` | delayed delivery: hold entries read before their deliver-at time, replay them when due |
//!
//! Method categories: inputs are `handle_*` (every one takes `now`), outputs are `poll_*`,
//! everything else (`stats`, `why_blocked`, `entry_hash`, …) is a query that changes nothing.

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
use crate::hash::{key_hash31, slot, sticky_key_bytes, KeyFields};
use crate::replay::{ReplaySet, PARKED};
use crate::selector::{
    ranges_contain, AutoSplitSelector, ConsistentHashingSelector, ConsumerInfo,
    ExclusiveRangeSelector, ImpactedConsumers, StickyKeySelector,
};
use crate::shared::{
    Charged, ConsumerShared, DrainListener, DrainRemoveHandler, KeySerial, PendingPos, SubShared,
    UnackedLimit, WakeState, Waker,
};
use crate::sync::{Arc, AtomicBool, Ordering, RwLock};

/// Up to this many consumers, `Dispatcher::find` compares every id (branch-free).
const FIND_SCAN_ALL: usize = 16;

/// A boxed selector, as the dispatcher holds it (users may plug their own).
pub type BoxedSelector = Box<dyn StickyKeySelector<ConsumerId> + Send>;

mod close;
mod delay;
mod explain;
mod failover;
mod gate;
mod key_shared;
mod mark_delete;
mod membership;
mod pins;
mod read_loop;
mod redelivery;
mod send;

pub use self::close::{Closed, ReturnedEntry};
pub use self::explain::{
    BlockReason, ConsumerStats, DispatcherStats, DrainingHashStats, Holder, Holdings,
};
pub use self::gate::{DispatchGate, Verdict};
use self::key_shared::*;
use self::pins::ChunkPins;
use self::read_loop::ReadLoop;

/// What the driver must do next. Drain with [`Dispatcher::poll_command`] after every
/// `handle_*` call and execute in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DispatchCommand {
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
    /// Failover: tell the consumer whether it is the active one now (Pulsar's
    /// ACTIVE_CONSUMER_CHANGE). Emitted to every consumer when the active one changes, and to a
    /// consumer that joins without changing it.
    ActiveChanged {
        /// The consumer to tell.
        consumer: ConsumerId,
        /// Whether it is the active consumer.
        active: bool,
    },
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
    /// Key_Shared: a normal read was blocked for this consumer by a hash rule in the last batch.
    blocked_by_hash: bool,
    /// The shell refused a send to it (its delivery queue is full): no permits usable until
    /// [`Dispatcher::handle_consumer_resumed`].
    paused: bool,
}

impl Consumer {
    fn blocked(&self) -> bool {
        self.shared.limit.is_blocked()
    }

    /// Permits usable now: 0 while blocked, else the permits capped by the unacked headroom.
    fn available_permits(&self) -> i64 {
        if self.paused || self.blocked() || self.permits <= 0 {
            return 0;
        }
        let mut p = self.permits;
        if let Some(headroom) = self.shared.limit.headroom() {
            p = p.min(headroom);
        }
        p.max(0)
    }

    fn unacked(&self) -> i64 {
        self.shared.limit.unacked()
    }
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
    delayed_held: u64,
    replay_picks: u64,
    replay_scanned: u64,
}

/// The subscription type's routing state: Shared and Key_Shared as one enum, so each mode's
/// state exists only in that mode.
// One value per dispatcher, built once and never moved on a hot path: boxing a variant would
// only add an indirection to every dispatch.
#[allow(clippy::large_enum_variant)]
enum Mode {
    /// Shared: round robin by priority; chunked messages through the chunk assignor.
    Shared(SharedRouting),
    /// Key_Shared: selector, draining, chunk and hash pins.
    KeyShared(KeySharedRouting),
}

/// Shared routing state.
struct SharedRouting {
    /// Chunked messages stay on one consumer; its PriorityRoundRobin is the one rotation for
    /// plain and chunked batches.
    assignor: ChunkAssignor<ConsumerId>,
    /// The consumers' snapshot of the current batch (a buffer reused across batches).
    slots: Vec<ConsumerSlot<ConsumerId>>,
    /// Chunked messages whose first chunk came back undelivered with no pin to fall back on
    /// (uuid, the first chunk's position): their later chunks wait in replay until it is
    /// assigned again (else they would go out as orphans ahead of it, and the message would
    /// be split across consumers). An entry ends when its first chunk is assigned, or is
    /// neither in replay nor in the batch (acked or dropped).
    awaiting_first: Vec<(String, Position)>,
}

impl Mode {
    fn is_key_shared(&self) -> bool {
        matches!(self, Mode::KeyShared(_))
    }

    fn key_shared(&self) -> Option<&KeySharedRouting> {
        match self {
            Mode::KeyShared(k) => Some(k),
            Mode::Shared(_) => None,
        }
    }

    fn key_shared_mut(&mut self) -> Option<&mut KeySharedRouting> {
        match self {
            Mode::KeyShared(k) => Some(k),
            Mode::Shared(_) => None,
        }
    }

    /// Chunk pins of the Shared assignor (0 on Key_Shared).
    fn shared_pin_count(&self) -> usize {
        match self {
            Mode::Shared(s) => s.assignor.pin_count(),
            Mode::KeyShared(_) => 0,
        }
    }
}

/// The core's timers besides the read loop's retry; [`Dispatcher::poll_timeout`] is the
/// earliest of them and the retry.
#[derive(Debug, Default)]
struct Timers {
    /// Coalesces draining-hash releases (the unblocking interval).
    unblock: Option<u64>,
    /// The earliest draining timeout.
    draining: Option<u64>,
    /// Earliest not-before time of a delayed (nacked) replay entry.
    nack: Option<u64>,
    /// The last time sent as a [`DispatchCommand::SetTimer`] (not re-sent while unchanged).
    last_sent: Option<u64>,
}

/// The sans-IO dispatcher of one subscription (Shared or Key_Shared).
///
/// Single-threaded (`&mut self`), no clock, no threads: every input is a `handle_*` call with
/// the current time, every output a [`DispatchCommand`] from [`poll_command`](Self::poll_command).
/// The driver owns the cursor and the ledger. Acks do not go through the core: they run on the
/// consumer's thread through an [`AckHandle`](crate::AckHandle) and, when they unblock
/// something, call the [`Waker`]; the driver then calls [`handle_wake`](Self::handle_wake).
pub struct Dispatcher {
    cfg: DispatcherConfig,
    /// Shared or Key_Shared routing state.
    mode: Mode,
    shared: Arc<SubShared>,
    wake: Arc<WakeState>,
    /// Sorted by priority (stable: join order within a level).
    consumers: Vec<Consumer>,
    /// `consumers[i].id`, densely, for fast look-ups.
    ids: Vec<ConsumerId>,
    replay: ReplaySet<Position, ConsumerId>,
    commands: VecDeque<DispatchCommand>,
    /// The read loop: one state enum plus the hints for its next decision.
    read: ReadLoop,
    /// The timers besides the read loop's retry (see [`Timers`]).
    timers: Timers,
    scratch_blocked: AHashSet<u32>,
    /// The replay pick's (consumer, hash) marks of pinned entries, kept with `scratch_blocked`
    /// for a pick that resumes where the last one stopped.
    scratch_pinned_blocked: AHashSet<(ConsumerId, u32)>,
    /// Key_Shared: the batch tables' buffers, reused from batch to batch.
    route_scratch: RouteScratch,
    mark_delete: Option<Position>,
    redelivery_counts: BTreeMap<Position, u32>,
    /// Dead letters for the driver (see `poll_dead_letter`).
    dead_letters: VecDeque<Position>,
    counters: Counters,
    /// Entries waiting for their deliver-at time (not sent, not pending).
    delayed: crate::DelayedTracker,
    /// Failover: the consumer that gets every entry (`None` on Shared and Key_Shared).
    active: Option<ConsumerId>,
    /// [`Dispatcher::handle_close`] ran: no input is taken, no output produced.
    closed: bool,
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("subscription", &self.cfg.subscription)
            .field("consumers", &self.ids)
            .field("replay", &self.replay.len())
            .field("read", &self.read.state)
            .field("commands", &self.commands.len())
            .finish_non_exhaustive()
    }
}

/// The built-in selector of a Key_Shared mode.
fn builtin_selector(mode: KeySharedMode) -> BoxedSelector {
    match mode {
        KeySharedMode::ConsistentHashing { points } => {
            Box::new(ConsistentHashingSelector::new(points))
        }
        KeySharedMode::AutoSplit => Box::new(AutoSplitSelector::new()),
        KeySharedMode::Sticky => Box::new(ExclusiveRangeSelector::new()),
    }
}

fn pending_key(p: Position) -> PendingPos {
    (p.ledger_id, p.entry_id)
}

fn position_of(p: PendingPos) -> Position {
    Position::new(p.0, p.1)
}

impl Dispatcher {
    /// A dispatcher for `cfg`, refusing a configuration out of range
    /// ([`DispatcherConfig::validate`]).
    ///
    /// ```
    /// let mut cfg = dispatcher::DispatcherConfig::shared();
    /// cfg.max_read_batch = 0;
    /// let waker = std::sync::Arc::new(dispatcher::NoopWaker);
    /// assert!(dispatcher::Dispatcher::try_new(cfg, waker).is_err());
    /// ```
    pub fn try_new(
        cfg: DispatcherConfig,
        waker: std::sync::Arc<dyn Waker>,
    ) -> Result<Self, crate::config::InvalidConfig> {
        cfg.validate()?;
        Ok(Self::new(cfg, waker))
    }

    /// A dispatcher for `cfg`, waking its driver through `waker`.
    ///
    /// On Key_Shared the selector follows `cfg`'s mode; use
    /// [`with_selector`](Self::with_selector) to plug in your own. A setting out of range
    /// (see [`DispatcherConfig::validate`]) is raised to its smallest valid value with a WARN;
    /// [`try_new`](Self::try_new) refuses it instead.
    pub fn new(mut cfg: DispatcherConfig, waker: std::sync::Arc<dyn Waker>) -> Self {
        if let Err(e) = cfg.validate() {
            warn!(error = %e, "invalid dispatcher configuration; using the nearest valid values");
            cfg.min_read_batch = cfg.min_read_batch.max(1);
            cfg.max_read_batch = cfg.max_read_batch.max(cfg.min_read_batch);
            cfg.max_round_robin_batch = cfg.max_round_robin_batch.max(1);
            if let SubscriptionType::KeyShared(KeySharedConfig {
                mode: KeySharedMode::ConsistentHashing { points },
                ..
            }) = &mut cfg.subscription
            {
                *points = (*points).max(1);
            }
        }
        let selector: Option<BoxedSelector> = match cfg.subscription {
            SubscriptionType::Shared | SubscriptionType::Failover(_) => None,
            SubscriptionType::KeyShared(k) => Some(builtin_selector(k.mode)),
        };
        Self::build(cfg, waker, selector)
    }

    /// Key_Shared routing state for `k` (a fresh draining tracker when `k` requires draining).
    fn key_shared_routing(
        k: KeySharedConfig,
        selector: BoxedSelector,
        max_pins: usize,
        max_unacked_per_key: u32,
        wake: &Arc<WakeState>,
    ) -> KeySharedRouting {
        let draining_required = !k.allow_out_of_order && !matches!(k.mode, KeySharedMode::Sticky);
        let draining = draining_required.then(|| {
            let listener: draining_hashes::Arc<dyn draining_hashes::UnblockListener> =
                draining_hashes::Arc::new(DrainListener(wake.clone()));
            Arc::new(DrainingHashes::new(listener))
        });
        let key_serial = (max_unacked_per_key > 0)
            .then(|| Arc::new(KeySerial::new(max_unacked_per_key, wake.clone())));
        KeySharedRouting {
            cfg: k,
            selector,
            draining,
            key_serial,
            pins: ChunkPins::new(max_pins),
            blocked_since: AHashMap::new(),
        }
    }

    /// No consumer is connected: take `k` as the subscription's Key_Shared settings (the
    /// built-in selector of its mode, a fresh draining tracker, pins and replay set).
    pub(super) fn adopt_key_shared(&mut self, k: KeySharedConfig) {
        debug!(from = ?self.cfg.subscription, to = ?k, "Key_Shared settings taken from the first consumer");
        self.cfg.subscription = SubscriptionType::KeyShared(k);
        self.mode = Mode::KeyShared(Self::key_shared_routing(
            k,
            builtin_selector(k.mode),
            self.cfg.assignor.max_pins,
            self.cfg.max_unacked_per_key,
            &self.wake,
        ));
        self.replay = ReplaySet::new(!k.allow_out_of_order);
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
        mut cfg: DispatcherConfig,
        waker: std::sync::Arc<dyn Waker>,
        selector: Option<BoxedSelector>,
    ) -> Self {
        if matches!(cfg.subscription, SubscriptionType::Failover(_)) {
            // As in Pulsar: a single-active-consumer subscription delivers a delayed message
            // at once.
            cfg.delayed_delivery.enabled = false;
        }
        let wake = Arc::new(WakeState {
            hashes_unblocked: AtomicBool::new(false),
            key_released: AtomicBool::new(false),
            unacked_unblocked: AtomicBool::new(false),
            unblock_notifications: crate::sync::AtomicU64::new(0),
            waker,
        });
        let (mode, count_hashes) = match (cfg.subscription, selector) {
            (SubscriptionType::KeyShared(k), Some(selector)) => (
                Mode::KeyShared(Self::key_shared_routing(
                    k,
                    selector,
                    cfg.assignor.max_pins,
                    cfg.max_unacked_per_key,
                    &wake,
                )),
                !k.allow_out_of_order,
            ),
            _ => (
                Mode::Shared(SharedRouting {
                    assignor: ChunkAssignor::new(cfg.assignor),
                    slots: Vec::new(),
                    awaiting_first: Vec::new(),
                }),
                false,
            ),
        };
        let shared = Arc::new(SubShared {
            consumers: RwLock::new(Vec::new()),
            limit: UnackedLimit::new(
                i64::try_from(cfg.max_unacked_per_subscription).unwrap_or(i64::MAX),
            ),
            wake: wake.clone(),
        });
        let read_batch = cfg.min_read_batch.max(1);
        let read_seed = cfg.read_backoff_seed;
        let delayed = crate::DelayedTracker::new(cfg.delayed_delivery);
        let legacy_keep_scanned_all = cfg.legacy_replay_settle;
        Dispatcher {
            delayed,
            cfg,
            mode,
            shared,
            wake,
            consumers: Vec::new(),
            ids: Vec::new(),
            replay: ReplaySet::new(count_hashes),
            commands: VecDeque::new(),
            read: ReadLoop {
                legacy_keep_scanned_all,
                ..ReadLoop::new(read_batch, read_seed)
            },
            timers: Timers::default(),
            scratch_blocked: AHashSet::new(),
            scratch_pinned_blocked: AHashSet::new(),
            route_scratch: RouteScratch::default(),
            mark_delete: None,
            redelivery_counts: BTreeMap::new(),
            dead_letters: VecDeque::new(),
            counters: Counters::default(),
            active: None,
            closed: false,
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
    pub fn poll_command(&mut self) -> Option<DispatchCommand> {
        if self.closed {
            return None;
        }
        self.commands.pop_front()
    }

    /// The earliest armed timer: call [`handle_timeout`](Self::handle_timeout) at or after it.
    pub fn poll_timeout(&self) -> Option<u64> {
        if self.closed {
            return None;
        }
        [
            self.timers.unblock,
            self.timers.draining,
            self.read.state.retry_at(),
            self.timers.nack,
            self.delayed.next_due(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn arm_timer_command(&mut self) {
        let t = self.poll_timeout();
        if t.is_some() && t != self.timers.last_sent {
            if let Some(at) = t {
                self.commands.push_back(DispatchCommand::SetTimer { at });
            }
        }
        self.timers.last_sent = t;
    }

    /// The index of consumer `id`. Called per routed entry with a target that changes from one
    /// entry to the next, so for a few consumers the whole list is compared without an early
    /// exit (no mispredicted branch; ids are unique, so the one match is the answer).
    #[inline]
    fn find(&self, id: ConsumerId) -> Option<usize> {
        if self.ids.len() <= FIND_SCAN_ALL {
            let mut found = usize::MAX;
            for (i, c) in self.ids.iter().enumerate() {
                if *c == id {
                    found = i;
                }
            }
            return (found != usize::MAX).then_some(found);
        }
        self.ids.iter().position(|c| *c == id)
    }
}
