//! The thin threaded runtime: one dispatcher thread around the sans-IO core.
//!
//! The only place in the library crates with threads, channels and a clock. The dispatcher
//! thread owns the [`Dispatcher`] core and runs one `crossbeam_channel::select!` loop over a
//! closed [`Event`] enum plus the core's timer; it executes the core's commands against the
//! cursor and ledger (behind one mutex it shares with the ack path) and delivers sends on one
//! channel per consumer. Consumers ack on their own threads through [`ConsumerHandle::ack`]
//! (an [`AckHandle`]): cursor ack, then pending-ack removal, which may wake the dispatcher
//! thread with an [`Event::Wake`].
//!
//! ```
//! use std::time::Duration;
//! use cursor::{EntryMeta, InMemoryLedger, ManagedCursor, MemoryStore};
//! use dispatcher::{ConsumerSpec, DispatcherConfig, Runtime};
//!
//! // A subscription over an in-memory ledger, its cursor kept in memory.
//! let ledger = InMemoryLedger::new(10_000);
//! let cursor = ManagedCursor::new("sub", &ledger, MemoryStore::new());
//! let rt = Runtime::start(DispatcherConfig::key_shared(), cursor, ledger);
//!
//! // A consumer joins and grants permits.
//! let c = rt.add_consumer(ConsumerSpec::new(1, "c1")).unwrap();
//! c.flow(100);
//!
//! // A producer publishes; publish_wait returns the positions assigned.
//! let positions = rt.publish_wait(
//!     (0..3)
//!         .map(|i| {
//!             let mut m = EntryMeta::simple(1_000 + i, 16);
//!             m.ordering_key = Some(b"order-42".to_vec());
//!             m
//!         })
//!         .collect(),
//! );
//!
//! // The consumer receives Deliveries (entry + redelivery count + acked batch indexes)...
//! let mut got = Vec::new();
//! while got.len() < positions.len() {
//!     let batch = c.deliveries.recv_timeout(Duration::from_secs(5)).unwrap();
//!     got.extend(batch.iter().map(|d| d.position));
//! }
//! assert_eq!(got, positions);
//!
//! // ...and acks them on its own thread.
//! for p in &got {
//!     c.ack(*p).unwrap();
//! }
//!
//! // The cursor: everything acked, nothing left in the backlog.
//! let view = rt.cursor_view();
//! assert_eq!(view.mark_delete, positions[2]);
//! assert_eq!(view.backlog.entries, 0);
//!
//! c.close();
//! rt.shutdown(); // persists the cursor and joins the dispatcher thread
//! ```

use std::sync::atomic::{AtomicBool, Ordering as StdOrdering};
use std::sync::{Arc as StdArc, Mutex as StdMutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{after, bounded, never, select, unbounded, Receiver, Sender};
use cursor::{
    Backlog, CursorStore, Entry, EntryMeta, Ledger, ManagedCursor, MarkDeleteMove, Position,
};
use tracing::{debug, warn};

use crate::ack::{AckEffect, AckHandle, ConsumerAckHandle, CursorCell};
use crate::config::{ConsumerId, ConsumerSpec, DispatcherConfig};
use crate::core::Dispatcher;
use crate::core::{BlockReason, ConsumerStats, DispatcherStats};
use crate::driver::{AdminOp, Driver, Output, Persist};
use crate::error::{AckHandleError, AddConsumerError};
use crate::shared::Waker;

mod pool;
mod reads;
mod sink;
mod stepped;
pub use pool::DispatchPool;
pub use reads::ReadDelay;
pub use sink::{DeliverySink, Destination, Refused};
pub use stepped::{Livelock, StepClock};

/// One entry handed to a consumer, with what a wire protocol sends beside it.
///
/// Pulsar's `CommandMessage` carries the redelivery count (the client's dead-letter policy
/// reads it) and, for a batch entry some of whose messages were already acknowledged, the
/// acked indexes (as `ack_set`), so the application does not see those messages again.
#[derive(Clone, Debug)]
pub struct Delivery {
    /// The entry.
    pub entry: Entry,
    /// How often the dispatcher took this position back for redelivery (0 on the first send).
    pub redelivery_count: u32,
    /// Batch indexes of this entry that the cursor already holds as acknowledged (empty when
    /// none, and always for single-message entries).
    pub acked_indexes: Vec<u32>,
}

impl std::ops::Deref for Delivery {
    type Target = Entry;

    /// A delivery reads as its entry (`d.position`, `d.meta`).
    fn deref(&self) -> &Entry {
        &self.entry
    }
}

/// What [`Event::WhyBlocked`] asks about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WhyBlockedQuery {
    /// A sticky-key hash slot.
    Hash(u32),
    /// A message key (ordering key or partition key bytes).
    Key(Vec<u8>),
}

/// The cursor's positions and backlog, read under the cursor lock from any thread
/// ([`Runtime::cursor_view`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CursorView {
    /// Every entry at or before this position is acknowledged (or skipped, expired, evicted).
    pub mark_delete: Position,
    /// The next position a normal read starts at, as Pulsar reports a read position: the next
    /// entry that is not acked, or the position right after the last entry
    /// ([`cursor::ManagedCursor::next_read_position`]).
    pub read: Position,
    /// Entries and messages after mark-delete not yet acknowledged.
    pub backlog: Backlog,
}

/// How the threaded runtime runs, beside the dispatcher's own configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuntimeOptions {
    /// Persist the cursor through its [`CursorStore`] this often when it changed (Pulsar's
    /// `managedLedgerCursorPositionFlushSeconds`, default 1 s), and always on shutdown. A crash
    /// loses at most this much of acknowledgement state: those acks are redelivered after a
    /// restart. `None`: only on shutdown.
    pub persist_every: Option<Duration>,
    /// Capacity of each consumer's delivery channel, in sends (one send is one
    /// `Vec<Delivery>` of at most `max_read_batch` entries), default 64; 0 counts as 1.
    ///
    /// This bounds what the runtime holds for a consumer that stops reading, whatever its
    /// permits: at most `delivery_queue × max_read_batch` entries. When a send finds the
    /// channel full the dispatcher thread does not block and loses nothing: the entries go back
    /// to the core ([`Dispatcher::handle_send_refused`]: replay, hashes kept, no redelivery
    /// counted), the consumer counts as having no permits, and it resumes
    /// ([`Dispatcher::handle_consumer_resumed`]) once its channel is at most half full (checked
    /// every turn of the loop, and every few milliseconds while a consumer is paused).
    pub delivery_queue: usize,
    /// Disconnect a consumer that holds unacked entries and shows no sign of life for this
    /// long: no flow, redelivery, nack or release, and its pending entries unchanged (no ack,
    /// no new send). Its entries go to the others, as on [`ConsumerHandle::close`]. Checked
    /// every quarter of the timeout. `None` (the default): never.
    pub consumer_idle_timeout: Option<Duration>,
    /// Every read and replay read the dispatcher issues completes this long after it was
    /// issued (a delay drawn from `min_ms..=max_ms`, in issue order), while events keep
    /// arriving: a slow disk's interleavings, for simulators and tests (a stepped runtime
    /// makes them deterministic). `None` (the default): reads complete at once.
    pub read_delay: Option<ReadDelay>,
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        RuntimeOptions {
            persist_every: Some(Duration::from_secs(1)),
            delivery_queue: 64,
            consumer_idle_timeout: None,
            read_delay: None,
        }
    }
}

/// Milliseconds since the Unix epoch (the clock of [`EntryMeta::publish_time`]); 0 before it.
fn wall_clock_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// How often (ms) the dispatcher loop looks at a paused consumer's channel.
const DRAIN_CHECK_MS: u64 = 5;

type ViewFn = dyn Fn() -> CursorView + Send + Sync;
type RangesFn = dyn Fn() -> Vec<(Position, Position)> + Send + Sync;

/// Everything the dispatcher thread reacts to (besides its timer).
///
/// Kept at 56 bytes (a test holds it): an idle subscription's event channel keeps one block
/// of 31 of them allocated, so every byte here is 31 per subscription.
pub enum Event {
    /// A consumer joins; its deliveries go to `deliveries`; the outcome to `reply`.
    ConsumerAdded {
        /// The consumer (boxed: the largest part of the rarest event).
        spec: Box<ConsumerSpec>,
        /// Where its entries are delivered.
        deliveries: Destination,
        /// The join's outcome.
        reply: Sender<Result<(), AddConsumerError>>,
    },
    /// A consumer leaves.
    ConsumerRemoved(ConsumerId),
    /// A consumer grants permits.
    Flow(ConsumerId, u32),
    /// A consumer asks for positions again (nack).
    Redeliver(ConsumerId, Vec<Position>),
    /// A consumer asks for all its unacked entries again.
    RedeliverAll(ConsumerId),
    /// Ordered nack: positions of one message, re-sent not before `delay` (None: the
    /// configured backoff); the key is held until then ([`Dispatcher::handle_nack`]).
    ///
    /// [`Dispatcher::handle_nack`]: crate::Dispatcher::handle_nack
    Nack(ConsumerId, Vec<Position>, Option<u64>),
    /// Ordered nack: the consumer gives back entries it never handed to its application
    /// ([`Dispatcher::handle_release`](crate::Dispatcher::handle_release)).
    Release(ConsumerId, Vec<Position>),
    /// Append entries to the ledger (a producer).
    Publish(Vec<StdArc<EntryMeta>>),
    /// Someone else appended to the ledger (a [`cursor::SharedLedger`]):
    /// [`Runtime::entries_appended`].
    Appended,
    /// Append entries to the ledger and send back the positions assigned, in order
    /// ([`Runtime::publish_wait`]).
    PublishWait(Vec<EntryMeta>, Sender<Vec<Position>>),
    /// Run an admin operation on the cursor; the resulting mark-delete move (if any) is sent
    /// back, after the core's hook ran.
    Admin(AdminOp, Sender<Option<MarkDeleteMove>>),
    /// The ack path unblocked something.
    Wake,
    /// A message for one consumer's [`DeliverySink`] ([`DeliverySink::receive`]), handed
    /// over on the dispatcher's thread: how work the sink asked for elsewhere completes
    /// without a lock between the two (a consumer that is gone drops it).
    ToSink(ConsumerId, Box<dyn std::any::Any + Send>),
    /// Read the current stats.
    Stats(Sender<(DispatcherStats, Vec<ConsumerStats>)>),
    /// Explain why a hash or key is not dispatched ([`Runtime::why_blocked`]).
    WhyBlocked(WhyBlockedQuery, Sender<BlockReason>),
    /// Stop the dispatcher thread.
    Shutdown,
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Event::ConsumerAdded { spec, .. } => write!(f, "ConsumerAdded({})", spec.id),
            Event::ConsumerRemoved(c) => write!(f, "ConsumerRemoved({c})"),
            Event::Flow(c, n) => write!(f, "Flow({c}, {n})"),
            Event::Redeliver(c, ps) => write!(f, "Redeliver({c}, {} positions)", ps.len()),
            Event::RedeliverAll(c) => write!(f, "RedeliverAll({c})"),
            Event::Nack(c, ps, d) => write!(f, "Nack({c}, {} positions, {d:?})", ps.len()),
            Event::Release(c, ps) => write!(f, "Release({c}, {} positions)", ps.len()),
            Event::Publish(m) => write!(f, "Publish({} entries)", m.len()),
            Event::Appended => f.write_str("Appended"),
            Event::PublishWait(m, _) => write!(f, "PublishWait({} entries)", m.len()),
            Event::Admin(op, _) => write!(f, "Admin({op:?})"),
            Event::Wake => f.write_str("Wake"),
            Event::ToSink(c, _) => write!(f, "ToSink({c})"),
            Event::Stats(_) => f.write_str("Stats"),
            Event::WhyBlocked(q, _) => write!(f, "WhyBlocked({q:?})"),
            Event::Shutdown => f.write_str("Shutdown"),
        }
    }
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("running", &self.thread.is_some())
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for ConsumerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsumerHandle")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// Sends [`Event`]s to a runtime's loop: a clone of [`Runtime::events`]. For a pooled runtime
/// ([`Runtime::start_pooled`]) each send also schedules the loop on a worker.
#[derive(Clone)]
pub struct EventSender {
    tx: Sender<Event>,
    /// A pooled runtime's task (set once it is started; weak: the task owns the loop, which
    /// holds senders).
    wake: StdArc<std::sync::OnceLock<std::sync::Weak<pool::PoolTask>>>,
}

impl EventSender {
    fn new(tx: Sender<Event>) -> EventSender {
        EventSender {
            tx,
            wake: StdArc::default(),
        }
    }

    /// Sends `ev` to the loop (and schedules a pooled one); an error when the loop is gone.
    pub fn send(&self, ev: Event) -> Result<(), crossbeam_channel::SendError<Event>> {
        self.tx.send(ev)?;
        if let Some(task) = self.wake.get().and_then(std::sync::Weak::upgrade) {
            task.schedule();
        }
        Ok(())
    }
}

impl std::fmt::Debug for EventSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EventSender")
    }
}

struct ChannelWaker {
    events: EventSender,
    pending: AtomicBool,
    /// An [`Event::Appended`] is in the channel (one at a time).
    appended: AtomicBool,
}

impl Waker for ChannelWaker {
    fn wake(&self) {
        // Coalesce: one Wake in the channel at a time.
        if !self.pending.swap(true, StdOrdering::SeqCst) {
            let _ = self.events.send(Event::Wake);
        }
    }
}

/// A running subscription: the dispatcher thread and the handles to talk to it.
pub struct Runtime {
    events: EventSender,
    waker: StdArc<ChannelWaker>,
    ack: AckHandle,
    view: StdArc<ViewFn>,
    ranges: StdArc<RangesFn>,
    thread: Option<JoinHandle<()>>,
    /// A stepped runtime's loop ([`Runtime::start_stepped`]); `None` for a threaded one.
    stepped: Option<stepped::SteppedLoop>,
    /// A pooled runtime's task ([`Runtime::start_pooled`]).
    pooled: Option<pool::Pooled>,
    delivery_queue: usize,
}

/// The receiving end of one consumer's deliveries: each item is one send, in order. The
/// channel ends when the consumer is removed or the runtime stops.
pub type Deliveries = Receiver<Vec<Delivery>>;

/// One connected consumer: receives entries, acks on the caller's thread.
pub struct ConsumerHandle {
    /// The consumer's id.
    pub id: ConsumerId,
    /// Entries the dispatcher sent to this consumer, in order.
    pub deliveries: Deliveries,
    ack: AckHandle,
    fast: Option<ConsumerAckHandle>,
    events: EventSender,
}

impl ConsumerHandle {
    /// Acknowledges `position` on this thread (see [`AckHandle::ack`]).
    pub fn ack(&self, position: Position) -> Result<AckEffect, AckHandleError> {
        match &self.fast {
            Some(f) => f.ack(position),
            None => self.ack.ack(self.id, position),
        }
    }

    /// Acknowledges `indexes` of the batch entry at `position` (see
    /// [`AckHandle::ack_batch_index`]).
    pub fn ack_batch_index(
        &self,
        position: Position,
        batch_size: u32,
        indexes: &[u32],
    ) -> Result<AckEffect, AckHandleError> {
        self.ack
            .ack_batch_index(self.id, position, batch_size, indexes)
    }

    /// Grants `permits` more messages.
    pub fn flow(&self, permits: u32) {
        let _ = self.events.send(Event::Flow(self.id, permits));
    }

    /// Asks for these positions again.
    pub fn redeliver(&self, positions: Vec<Position>) {
        let _ = self.events.send(Event::Redeliver(self.id, positions));
    }

    /// Negatively acknowledges one message (all its chunk positions): re-sent after `delay`
    /// (None: the configured backoff); on ordered Key_Shared its key is held until then.
    pub fn nack(&self, positions: Vec<Position>, delay: Option<u64>) {
        let _ = self.events.send(Event::Nack(self.id, positions, delay));
    }

    /// Gives back entries received but never handed to the application (later messages of a
    /// nacked key); no redelivery is counted.
    pub fn release(&self, positions: Vec<Position>) {
        let _ = self.events.send(Event::Release(self.id, positions));
    }

    /// Asks for every entry this consumer holds unacknowledged again (Pulsar's
    /// `redeliverUnacknowledgedMessages()` without ids).
    pub fn redeliver_all(&self) {
        let _ = self.events.send(Event::RedeliverAll(self.id));
    }

    /// Leaves the subscription; undelivered and unacked entries go to the others (their
    /// hashes kept, so ordering holds) and the hashes this consumer drained are released.
    ///
    /// Dropping the handle does the same: a consumer whose thread panicked or forgot to close
    /// is disconnected like one that closed.
    pub fn close(self) {
        drop(self);
    }
}

impl Drop for ConsumerHandle {
    /// Disconnects the consumer ([`Event::ConsumerRemoved`]); a no-op when the dispatcher
    /// thread is gone.
    fn drop(&mut self) {
        let _ = self.events.send(Event::ConsumerRemoved(self.id));
    }
}

impl Runtime {
    /// Starts the dispatcher thread for `cursor` over `ledger` with the default
    /// [`RuntimeOptions`] (the cursor is persisted every second and on shutdown).
    pub fn start<S, L>(cfg: DispatcherConfig, cursor: ManagedCursor<S>, ledger: L) -> Runtime
    where
        S: CursorStore + Send + 'static,
        L: Ledger + Send + 'static,
    {
        Self::start_with(cfg, cursor, ledger, RuntimeOptions::default())
    }

    /// Starts the dispatcher thread with explicit [`RuntimeOptions`].
    pub fn start_with<S, L>(
        cfg: DispatcherConfig,
        cursor: ManagedCursor<S>,
        ledger: L,
        options: RuntimeOptions,
    ) -> Runtime
    where
        S: CursorStore + Send + 'static,
        L: Ledger + Send + 'static,
    {
        let (mut rt, lp, rx) = Self::assemble(cfg, cursor, ledger, options, LoopClock::real());
        rt.thread = std::thread::Builder::new()
            .name("dispatcher".into())
            .spawn(move || lp.run(rx))
            .ok();
        if rt.thread.is_none() {
            warn!("could not spawn the dispatcher thread");
        }
        rt
    }

    /// The runtime's handles and its loop, not yet running.
    fn assemble<S, L>(
        cfg: DispatcherConfig,
        cursor: ManagedCursor<S>,
        ledger: L,
        options: RuntimeOptions,
        clock: LoopClock,
    ) -> (Runtime, Loop<S, L>, Receiver<Event>)
    where
        S: CursorStore + Send + 'static,
        L: Ledger + Send + 'static,
    {
        let (tx, rx) = unbounded::<Event>();
        let tx = EventSender::new(tx);
        let waker = StdArc::new(ChannelWaker {
            events: tx.clone(),
            pending: AtomicBool::new(false),
            appended: AtomicBool::new(false),
        });
        let cell = StdArc::new(StdMutex::new(CursorCell { cursor, ledger }));
        let view: StdArc<ViewFn> = {
            let cell = cell.clone();
            StdArc::new(move || {
                let g = CursorCell::lock(&cell);
                CursorView {
                    mark_delete: g.cursor.mark_delete_position(),
                    read: g.cursor.next_read_position(&g.ledger),
                    backlog: g.cursor.backlog(&g.ledger),
                }
            })
        };
        let ranges: StdArc<RangesFn> = {
            let cell = cell.clone();
            StdArc::new(move || CursorCell::lock(&cell).cursor.acked_set().ranges())
        };
        let core = Dispatcher::new(cfg, waker.clone());
        let ack = core.ack_handle(cell.clone());
        let persist_ms = options
            .persist_every
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1));
        let mut driver = Driver::new().with_deferred_reads(options.read_delay.is_some());
        if let Some(ms) = persist_ms {
            driver = driver.with_persist_every(ms);
        }
        let idle_ms = options
            .consumer_idle_timeout
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1));
        let mut lp = Loop {
            idle_ms,
            core,
            driver,
            persist_ms,
            cell,
            waker: waker.clone(),
            consumers: Vec::new(),
            clock,
            next_persist: None,
            next_idle_check: None,
            next_drain_check: None,
            reads: options.read_delay.map(reads::InFlight::new),
        };
        lp.next_persist = persist_ms.map(|ms| lp.now().saturating_add(ms));
        let rt = Runtime {
            events: tx,
            waker,
            ack,
            view,
            ranges,
            thread: None,
            stepped: None,
            pooled: None,
            delivery_queue: options.delivery_queue.max(1),
        };
        (rt, lp, rx)
    }

    /// Connects a consumer; waits for the dispatcher thread's answer.
    pub fn add_consumer(&self, spec: ConsumerSpec) -> Result<ConsumerHandle, AddConsumerError> {
        let (dtx, drx) = bounded(self.delivery_queue);
        self.add(spec, Destination::Channel(dtx), drx)
    }

    /// Connects a consumer whose deliveries go to `sink`, called on the dispatcher thread with
    /// each send (see [`DeliverySink`]); waits for the dispatcher thread's answer. The handle's
    /// [`deliveries`](ConsumerHandle::deliveries) channel is closed: nothing is sent there.
    pub fn add_consumer_with_sink(
        &self,
        spec: ConsumerSpec,
        sink: Box<dyn DeliverySink>,
    ) -> Result<ConsumerHandle, AddConsumerError> {
        let (_, drx) = bounded(0);
        self.add(spec, Destination::Sink(sink), drx)
    }

    fn add(
        &self,
        spec: ConsumerSpec,
        target: Destination,
        drx: Deliveries,
    ) -> Result<ConsumerHandle, AddConsumerError> {
        let id = spec.id;
        let (rtx, rrx) = unbounded();
        let _ = self.events.send(Event::ConsumerAdded {
            spec: Box::new(spec),
            deliveries: target,
            reply: rtx,
        });
        match self.answer(rrx) {
            Some(Ok(())) => Ok(ConsumerHandle {
                id,
                deliveries: drx,
                ack: self.ack.clone(),
                fast: self.ack.for_consumer(id),
                events: self.events.clone(),
            }),
            Some(Err(e)) => Err(e),
            None => Err(AddConsumerError::DispatcherStopped),
        }
    }

    /// Appends entries to the ledger (fire and forget: the dispatcher thread appends them in
    /// event order).
    pub fn publish(&self, entries: Vec<EntryMeta>) {
        let _ = self.events.send(Event::Publish(
            entries.into_iter().map(StdArc::new).collect(),
        ));
    }

    /// Tells the dispatcher thread that entries were appended to its ledger by someone else:
    /// a topic that keeps one [`cursor::SharedLedger`] for all its subscriptions appends
    /// through [`SharedLedger::write`](cursor::SharedLedger::write) and then calls this on
    /// each subscription's runtime. Cheap to call per entry: while one such notice waits in
    /// the channel, further calls send nothing (the dispatcher reads every entry there is when
    /// it handles the notice).
    pub fn entries_appended(&self) {
        if !self.waker.appended.swap(true, StdOrdering::SeqCst) {
            let _ = self.events.send(Event::Appended);
        }
    }

    /// Appends entries to the ledger and waits for the positions the dispatcher thread
    /// assigned them, in order. Empty when the dispatcher thread is gone.
    pub fn publish_wait(&self, entries: Vec<EntryMeta>) -> Vec<Position> {
        let (tx, rx) = unbounded();
        let _ = self.events.send(Event::PublishWait(entries, tx));
        self.answer(rx).unwrap_or_default()
    }

    /// Runs an admin operation on the cursor and returns the mark-delete move it caused (with
    /// the positions it dropped), after the dispatcher's hook handled it. `None` when nothing
    /// moved (or the dispatcher thread is gone).
    pub fn admin(&self, op: AdminOp) -> Option<MarkDeleteMove> {
        let (tx, rx) = unbounded();
        let _ = self.events.send(Event::Admin(op, tx));
        self.answer(rx).flatten()
    }

    /// The core's stats, read on the dispatcher thread.
    pub fn stats(&self) -> Option<(DispatcherStats, Vec<ConsumerStats>)> {
        let (tx, rx) = unbounded();
        let _ = self.events.send(Event::Stats(tx));
        self.answer(rx)
    }

    /// The cursor's mark-delete and read positions and the backlog, now, from any thread
    /// (takes the cursor lock that acks take; does not wait for the dispatcher thread).
    pub fn cursor_view(&self) -> CursorView {
        (self.view)()
    }

    /// The acknowledged runs above mark-delete (`(first, last)` inclusive, ascending): the
    /// holes' complement, what Pulsar's internal stats call `individuallyDeletedMessages`.
    pub fn acked_ranges(&self) -> Vec<(Position, Position)> {
        (self.ranges)()
    }

    /// Why entries of sticky-key hash `hash` are not dispatched right now, read on the
    /// dispatcher thread ([`Dispatcher::why_blocked`]); `None` when the thread is gone.
    pub fn why_blocked(&self, hash: u32) -> Option<BlockReason> {
        let (tx, rx) = unbounded();
        let _ = self
            .events
            .send(Event::WhyBlocked(WhyBlockedQuery::Hash(hash), tx));
        self.answer(rx)
    }

    /// [`Runtime::why_blocked`] for a key (hashed as the subscription's selector hashes it).
    pub fn why_blocked_key(&self, key: &[u8]) -> Option<BlockReason> {
        let (tx, rx) = unbounded();
        let _ = self
            .events
            .send(Event::WhyBlocked(WhyBlockedQuery::Key(key.to_vec()), tx));
        self.answer(rx)
    }

    /// A clone of the event sender, for custom producers of events.
    pub fn events(&self) -> EventSender {
        self.events.clone()
    }

    /// Stops the dispatcher thread and waits for it.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if self.stepped.is_some() && self.stepped_stopped() {
            return;
        }
        let _ = self.events.send(Event::Shutdown);
        self.pump();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(p) = &self.pooled {
            p.wait_stopped();
        }
    }

    /// The dispatcher loop's answer: waited for from a threaded runtime; a stepped one runs
    /// its loop first, so the answer is there unless the loop has ended.
    fn answer<T>(&self, rx: Receiver<T>) -> Option<T> {
        if self.stepped.is_some() {
            self.pump();
            rx.try_recv().ok()
        } else if let Some(p) = &self.pooled {
            p.answer(&rx)
        } else {
            rx.recv().ok()
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.stop();
    }
}

struct Loop<S: CursorStore, L: Ledger> {
    core: Dispatcher,
    driver: Driver,
    /// The persist cadence in ms (the driver holds the same cadence).
    persist_ms: Option<u64>,
    /// [`RuntimeOptions::consumer_idle_timeout`] in ms.
    idle_ms: Option<u64>,
    cell: StdArc<StdMutex<CursorCell<S, L>>>,
    waker: StdArc<ChannelWaker>,
    consumers: Vec<Outlet>,
    clock: LoopClock,
    /// When the cursor is persisted next (if it changed).
    next_persist: Option<u64>,
    /// When idle consumers are looked for next ([`RuntimeOptions::consumer_idle_timeout`]).
    next_idle_check: Option<u64>,
    /// While a consumer is paused: when its destination is looked at again (no event says it
    /// drained).
    next_drain_check: Option<u64>,
    /// The reads in flight ([`RuntimeOptions::read_delay`]; `None`: reads complete at once).
    reads: Option<reads::InFlight>,
}

/// Where the loop's `now` comes from: wall-clock milliseconds that never go back (deliver-at
/// and publish times are wall-clock milliseconds).
enum LoopClock {
    /// The threaded runtime: [`wall_clock_ms`] at `start`, counted on the monotonic clock.
    Real { start: Instant, start_wall: u64 },
    /// A stepped runtime: the caller's clock ([`StepClock`]).
    Stepped(StepClock),
}

/// One consumer's destination, as the dispatcher thread sees it.
struct Outlet {
    id: ConsumerId,
    tx: Destination,
    /// A send found no room; the core holds the consumer paused until there is.
    paused: bool,
    /// The last time it showed a sign of life (an event from it, or its pending count moved).
    last_active: u64,
    /// Its pending entries at the last idle check.
    last_pending: usize,
}

impl LoopClock {
    /// The system's wall clock from now on, counted on the monotonic clock.
    fn real() -> LoopClock {
        LoopClock::Real {
            start: Instant::now(),
            start_wall: wall_clock_ms(),
        }
    }
}

impl<S: CursorStore, L: Ledger> Loop<S, L> {
    /// [`Runtime::replay_idle`] for this loop.
    fn replay_idle(&self) -> Option<Position> {
        let busy = self.core.poll_timeout().is_some()
            || self.reads.as_ref().is_some_and(|r| r.next_due().is_some())
            || self.consumers.iter().any(|o| o.paused);
        if busy {
            return None;
        }
        self.core.replay_ready()
    }

    fn now(&self) -> u64 {
        match &self.clock {
            LoopClock::Real { start, start_wall } => {
                let elapsed = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
                start_wall.saturating_add(elapsed)
            }
            LoopClock::Stepped(c) => c.now(),
        }
    }

    /// The wall clock (publish times are wall-clock ms): the system's for a threaded runtime,
    /// the caller's for a stepped one.
    fn wall_ms(&self) -> u64 {
        match &self.clock {
            LoopClock::Real { .. } => wall_clock_ms(),
            LoopClock::Stepped(c) => c.now(),
        }
    }

    /// The earliest time something is due without an event: the core's timer, the next
    /// persist, the next idle check, or (while a consumer is paused) a look at its channel.
    fn next_deadline(&mut self, now: u64) -> Option<u64> {
        self.next_idle_check = match self.idle_ms {
            Some(ms) if !self.consumers.is_empty() => Some(
                self.next_idle_check
                    .unwrap_or_else(|| now.saturating_add((ms / 4).max(1))),
            ),
            _ => None,
        };
        // A paused consumer drains its channel without telling anyone: look again soon (at a
        // time kept until it comes, so that a loop stepped at that time finds it due).
        let paused = self.consumers.iter().any(|o| o.paused);
        self.next_drain_check = match self.next_drain_check {
            _ if !paused => None,
            Some(at) => Some(at),
            None => Some(now.saturating_add(DRAIN_CHECK_MS)),
        };
        let drain = self.next_drain_check;
        [
            self.core.poll_timeout(),
            self.next_persist,
            self.next_idle_check,
            drain,
            self.reads.as_ref().and_then(reads::InFlight::next_due),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Runs what is due at `now` (see [`Loop::next_deadline`]); the caller then executes the
    /// core's commands.
    fn on_due(&mut self, now: u64) {
        if self.next_drain_check.is_some_and(|at| at <= now) {
            // The look itself is the next execute's (it resumes the consumers with room).
            self.next_drain_check = None;
        }
        if let Some(r) = &mut self.reads {
            r.complete_due(now, &mut self.driver, &mut self.core, &self.cell);
        }
        if self.core.poll_timeout().is_some_and(|at| at <= now) {
            self.core.handle_timeout(now);
        }
        if self.next_idle_check.is_some_and(|at| at <= now) {
            self.disconnect_idle(now);
            self.next_idle_check = self.idle_ms.map(|ms| now.saturating_add((ms / 4).max(1)));
        }
        if self.next_persist.is_some_and(|at| at <= now) {
            match self.driver.maybe_persist(now, &self.cell) {
                Persist::Failed(e) => warn!(error = %e, "cursor persist failed; will retry"),
                Persist::NotBefore { due } => self.next_persist = Some(due),
                Persist::Clean | Persist::Persisted => {}
            }
            if !matches!(self.next_persist, Some(due) if due > now) {
                self.next_persist = self.persist_ms.map(|ms| now.saturating_add(ms));
            }
        }
    }

    fn run(mut self, rx: Receiver<Event>) {
        debug!("dispatcher thread started");
        loop {
            let now = self.now();
            let wake = match self.next_deadline(now) {
                Some(at) => after(Duration::from_millis(at.saturating_sub(now))),
                None => never(),
            };
            select! {
                recv(rx) -> ev => {
                    let Ok(ev) = ev else { break };
                    if !self.on_event(ev) {
                        break;
                    }
                }
                recv(wake) -> _ => {
                    let now = self.now();
                    self.on_due(now);
                }
            }
            self.execute();
        }
        self.finish();
    }

    /// Shutdown (or every sender gone): whatever changed since the last save is saved.
    fn finish(&mut self) {
        if CursorCell::lock(&self.cell).cursor.is_dirty() {
            let now = self.now();
            if let Err(e) = self.driver.persist_now(now, &self.cell) {
                warn!(error = %e, "cursor persist at shutdown failed");
            }
        }
        debug!("dispatcher loop stopped");
    }

    fn on_event(&mut self, ev: Event) -> bool {
        let now = self.now();
        if let Event::Flow(id, _)
        | Event::Redeliver(id, _)
        | Event::RedeliverAll(id)
        | Event::Nack(id, _, _)
        | Event::Release(id, _) = &ev
        {
            if let Some(o) = self.consumers.iter_mut().find(|o| o.id == *id) {
                o.last_active = now;
            }
        }
        match ev {
            Event::ConsumerAdded {
                spec,
                deliveries,
                reply,
            } => {
                let id = spec.id;
                let r = self.core.handle_consumer_added(now, *spec);
                if r.is_ok() {
                    self.consumers.push(Outlet {
                        id,
                        tx: deliveries,
                        paused: false,
                        last_active: now,
                        last_pending: 0,
                    });
                }
                let _ = reply.send(r);
            }
            Event::ConsumerRemoved(id) => {
                self.core.handle_consumer_removed(now, id);
                self.consumers.retain(|o| o.id != id);
            }
            Event::Flow(id, n) => {
                self.core.handle_flow(now, id, n);
            }
            Event::Redeliver(id, ps) => {
                self.core.handle_redeliver(now, id, &ps);
            }
            Event::RedeliverAll(id) => {
                self.core.handle_redeliver_all(now, id);
            }
            Event::Nack(id, ps, delay) => {
                self.core.handle_nack(now, id, &ps, delay);
            }
            Event::Release(id, ps) => {
                self.core.handle_release(now, id, &ps);
            }
            Event::Publish(metas) => {
                self.driver.publish(now, &mut self.core, &self.cell, metas);
            }
            Event::Appended => {
                // Cleared first: an append after this point sends a new notice.
                self.waker.appended.store(false, StdOrdering::SeqCst);
                self.core.handle_entries_appended(now);
            }
            Event::PublishWait(metas, reply) => {
                let positions = self.driver.publish(now, &mut self.core, &self.cell, metas);
                let _ = reply.send(positions);
            }
            Event::Admin(op, reply) => {
                // Publish times are wall-clock ms; the loop's `now` is not.
                let op = match op {
                    AdminOp::ExpireOlderThan { age_ms } => {
                        AdminOp::Expire(self.wall_ms().saturating_sub(age_ms))
                    }
                    op => op,
                };
                let mv = self.driver.admin(now, &mut self.core, &self.cell, op);
                let _ = reply.send(mv);
            }
            Event::Wake => {
                self.waker.pending.store(false, StdOrdering::SeqCst);
                self.core.handle_wake(now);
            }
            Event::ToSink(id, message) => {
                if let Some(o) = self.consumers.iter_mut().find(|o| o.id == id) {
                    o.tx.receive(message);
                }
            }
            Event::Stats(reply) => {
                let _ = reply.send((self.core.stats(), self.core.consumer_stats()));
            }
            Event::WhyBlocked(q, reply) => {
                let r = match q {
                    WhyBlockedQuery::Hash(h) => self.core.why_blocked(h),
                    WhyBlockedQuery::Key(k) => self.core.why_blocked_key(&k),
                };
                let _ = reply.send(r);
            }
            Event::Shutdown => return false,
        }
        true
    }

    /// Wraps sent entries with their redelivery count and, for batch entries, the indexes the
    /// cursor holds as acked ([`Driver::delivery_extras`], one cursor lock per send, taken
    /// only when the send has a batch entry).
    fn deliveries(&self, entries: Vec<Entry>) -> Vec<Delivery> {
        if entries.iter().any(|e| e.meta.messages() > 1) {
            let extras = self
                .driver
                .delivery_extras(&self.core, &self.cell, &entries);
            entries
                .into_iter()
                .zip(extras)
                .map(|(entry, x)| Delivery {
                    entry,
                    redelivery_count: x.redelivery_count,
                    acked_indexes: x.acked_indexes.unwrap_or_default(),
                })
                .collect()
        } else {
            entries
                .into_iter()
                .map(|entry| Delivery {
                    redelivery_count: self.core.redelivery_count(entry.position),
                    acked_indexes: Vec::new(),
                    entry,
                })
                .collect()
        }
    }

    /// Hands one send to the consumer's channel without blocking; a full channel (or a paused
    /// consumer: later sends must not overtake refused ones) gives the entries back to the core.
    fn deliver(&mut self, now: u64, consumer: ConsumerId, entries: Vec<Entry>) {
        let Some(k) = self.consumers.iter().position(|o| o.id == consumer) else {
            return;
        };
        let refused: Vec<Entry> = if self.consumers[k].paused {
            entries
        } else {
            // A dropped send's chunks give their pins back too: keep them (an `Arc` each)
            // while the send is out, only when it has any.
            let chunks: Vec<Entry> = entries
                .iter()
                .filter(|e| e.meta.chunk.is_some())
                .cloned()
                .collect();
            let deliveries = self.deliveries(entries);
            match self.consumers[k].tx.deliver(deliveries) {
                Ok(()) => return,
                Err(Refused::Closed) => {
                    // The handle is gone; its ConsumerRemoved is on the way.
                    debug!(consumer = %consumer, "consumer channel closed");
                    self.core.handle_chunks_undelivered(now, consumer, &chunks);
                    return;
                }
                Err(Refused::Full(d)) => d.into_iter().map(|d| d.entry).collect(),
            }
        };
        self.core.handle_chunks_undelivered(now, consumer, &refused);
        let refused: Vec<Position> = refused.iter().map(|e| e.position).collect();
        self.consumers[k].paused = true;
        let n = self.core.handle_send_refused(now, consumer, &refused);
        debug!(consumer = %consumer, refused = n, "delivery channel full; consumer paused");
    }

    /// Disconnects consumers that hold entries and showed no sign of life for the idle
    /// timeout ([`RuntimeOptions::consumer_idle_timeout`]).
    fn disconnect_idle(&mut self, now: u64) {
        let Some(timeout) = self.idle_ms else { return };
        let stats = self.core.consumer_stats();
        let mut idle = Vec::new();
        for o in &mut self.consumers {
            let pending = stats
                .iter()
                .find(|s| s.id == o.id)
                .map_or(0, |s| s.pending_entries);
            if pending == 0 || pending != o.last_pending {
                o.last_pending = pending;
                o.last_active = now;
            } else if now.saturating_sub(o.last_active) >= timeout {
                idle.push(o.id);
            }
        }
        for id in idle {
            warn!(consumer = %id, timeout_ms = timeout, "consumer idle while holding entries; disconnected");
            self.core.handle_consumer_removed(now, id);
            self.consumers.retain(|o| o.id != id);
        }
    }

    /// Resumes every paused consumer whose channel is at most half full (or whose sink has
    /// room).
    fn resume_drained(&mut self) {
        let now = self.now();
        for o in &mut self.consumers {
            if o.paused && o.tx.has_room() {
                o.paused = false;
                self.core.handle_consumer_resumed(now, o.id);
            }
        }
    }

    /// Executes the core's commands until it has none (through the shared [`Driver`]).
    fn execute(&mut self) {
        self.execute_at_most(u64::MAX);
    }

    /// [`execute`](Self::execute), stopping after `max` commands; whether the core settled
    /// (had none left) within them. More is a livelock: a stepped runtime reports it.
    fn execute_at_most(&mut self, max: u64) -> bool {
        self.resume_drained();
        let start = self.driver.commands_executed();
        loop {
            if self.driver.commands_executed() - start > max {
                return false;
            }
            let now = self.now();
            let Some(out) = self.driver.poll(now, &mut self.core, &self.cell) else {
                return true;
            };
            match out {
                Output::Send { consumer, entries } => {
                    self.deliver(now, consumer, entries);
                }
                Output::ActiveChanged { consumer, active } => {
                    if let Some(o) = self.consumers.iter_mut().find(|o| o.id == consumer) {
                        o.tx.active_changed(active);
                    }
                }
                // The select! loop re-reads poll_timeout every turn; this runtime has no
                // dead-letter topic (the driver already acked the entry on the cursor).
                Output::SetTimer { .. } | Output::DeadLettered { .. } => {}
                Output::Woke | Output::Rewound | Output::Read { .. } | Output::Replayed { .. } => {}
                // Deferred only with a read delay: completed when due (`on_due`).
                Output::ReadIssued { max_entries } => {
                    if let Some(r) = &mut self.reads {
                        r.read(now, max_entries);
                    }
                }
                Output::ReplayIssued { positions } => {
                    if let Some(r) = &mut self.reads {
                        r.replay(now, positions);
                    }
                }
            }
        }
    }
}
