//! The broker's sans-IO core driven by its caller: no socket, no thread, no clock.
//!
//! [`SteppedBroker`] is the state the TCP and admin shells share (topics, subscriptions,
//! producers, the metadata) with every subscription's dispatcher loop stepped by the caller
//! instead of running on a thread; [`Connection`] is one client connection's protocol
//! ([`Connection::handle_bytes`] in, [`Connection::poll_transmit`] out), the same session the
//! TCP shell runs. The caller owns the time ([`SteppedBroker::set_time`]) and decides when the
//! dispatchers run ([`SteppedBroker::step`]) and when the housekeeping jobs run
//! ([`SteppedBroker::housekeeping`]). Storage is in memory ([`SteppedBroker::new`]) or under
//! the configuration's `data_dir` ([`SteppedBroker::open`], which reads back what is stored, as
//! the TCP broker does at start: a restart). A deterministic simulator drives the broker through
//! this; so can a test.
//!
//! ```
//! use broker::stepped::SteppedBroker;
//!
//! let mut b = SteppedBroker::new(broker::BrokerConfig::default(), 1_764_000_000_000);
//! let mut c = b.connect("client-1");
//! let mut connect = Vec::new();
//! wire::encode_command(&wire::commands::connect("doc", 21), &mut connect);
//! c.handle_bytes(&connect).unwrap();
//! let reply = c.poll_transmit().unwrap();
//! let frame = wire::decode_frame(&reply).unwrap();
//! assert_eq!(frame.command.r#type(), wire::proto::base_command::Type::Connected);
//! b.set_time(1_764_000_001_000);
//! while b.step() {}
//! ```

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use dispatcher::{RuntimeOptions, StepClock};

use crate::config::BrokerConfig;
use crate::session::{Close, Now, Session, WriteRequest};
use crate::state::{BrokerState, Offer, Outbox};
use crate::storage::{StorageError, StoreFaults};
use crate::sync::lock;

#[cfg(test)]
mod tests;

/// Frames a connection's queue holds before it refuses a consumer's deliveries (they wait in
/// the dispatcher until the caller took some), as the TCP shell's write queue does.
const QUEUE_LIMIT: usize = 768;

/// The broker's state with stepped dispatchers and the caller's clock (see the module doc).
pub struct SteppedBroker {
    state: Arc<BrokerState>,
    clock: StepClock,
    next_conn: u64,
    faults: Arc<StoreFaults>,
}

impl std::fmt::Debug for SteppedBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SteppedBroker")
            .field("now", &self.clock.now())
            .finish_non_exhaustive()
    }
}

impl SteppedBroker {
    /// An in-memory broker with `cfg`'s settings (its listeners and `data_dir` are not used)
    /// whose clock reads `now_ms`: wall-clock milliseconds, as publish times are.
    pub fn new(mut cfg: BrokerConfig, now_ms: u64) -> SteppedBroker {
        cfg.data_dir = None;
        Self::build(cfg, now_ms, RuntimeOptions::default())
    }

    /// A broker over `cfg.data_dir` (in memory without one): the topics, subscriptions,
    /// cursors and metadata stored there are read back first, as the TCP broker does at start.
    /// A restart is [`crash`](Self::crash) (or a drop), then `open` on the same directory.
    pub fn open(cfg: BrokerConfig, now_ms: u64) -> Result<SteppedBroker, StorageError> {
        Self::open_with(cfg, now_ms, RuntimeOptions::default())
    }

    /// [`open`](Self::open) with every subscription's dispatcher runtime started with
    /// `options` instead of the defaults the TCP broker uses: a simulator's cursor-persist
    /// cadence or read delays ([`RuntimeOptions::read_delay`]).
    pub fn open_with(
        cfg: BrokerConfig,
        now_ms: u64,
        options: RuntimeOptions,
    ) -> Result<SteppedBroker, StorageError> {
        let b = Self::build(cfg, now_ms, options);
        b.state.recover_topics()?;
        Ok(b)
    }

    fn build(cfg: BrokerConfig, now_ms: u64, options: RuntimeOptions) -> SteppedBroker {
        let clock = StepClock::new(now_ms);
        let url = format!("pulsar://{}", cfg.listen);
        let faults = Arc::new(StoreFaults::default());
        SteppedBroker {
            state: Arc::new(BrokerState::new_stepped(
                cfg,
                url,
                clock.clone(),
                options,
                &faults,
            )),
            clock,
            next_conn: 0,
            faults,
        }
    }

    /// Ends this broker as a killed process ends: no dispatcher runs again, so no cursor is
    /// persisted beyond what its cadence already wrote (dropping the broker instead shuts the
    /// dispatchers down, which persists every cursor). Drop the connections too; then
    /// [`open`](Self::open) the same `data_dir` to restart. Its files are closed once the
    /// connections are gone.
    pub fn crash(self) {
        self.faults.forget_reads();
        for t in self.state.topics() {
            for s in t.subscriptions() {
                s.runtime.abandon();
            }
        }
    }

    /// The switches that make every topic's store refuse writes or reads, as a full disk or a
    /// storage on other machines that fails would (see [`StoreFaults`]).
    pub fn store_faults(&self) -> &StoreFaults {
        &self.faults
    }

    /// Moves the clock to `now_ms` (an earlier time is ignored: the clock never goes back).
    pub fn set_time(&self, now_ms: u64) {
        self.clock.set(now_ms);
    }

    /// The clock's time, ms.
    pub fn now(&self) -> u64 {
        self.clock.now()
    }

    /// A new client connection (its id is the next number from 1).
    pub fn connect(&mut self, peer: &str) -> Connection {
        self.next_conn += 1;
        let id = self.next_conn;
        let queue = Arc::new(Queue::default());
        self.state.register_outbox(id, queue.clone());
        let session = Session::new(
            self.state.clone(),
            id,
            peer.to_owned(),
            self.state.service_url.clone(),
            self.time(),
        );
        Connection {
            state: self.state.clone(),
            clock: self.clock.clone(),
            id,
            session,
            queue,
            hold_writes: false,
            writes: Vec::new(),
        }
    }

    /// Runs every subscription's dispatcher until none has anything left to do at the
    /// clock's time (deliveries land in the connections' queues); whether anything ran.
    pub fn step(&self) -> bool {
        self.state.step()
    }

    /// The earliest clock time at which [`step`](Self::step) has something to do without a
    /// new command (a nack's delay, a deliver-at time, a cursor persist); `None` if nothing
    /// is scheduled.
    pub fn next_deadline(&self) -> Option<u64> {
        self.state.next_deadline()
    }

    /// Once [`step`](Self::step) returned `false`: the first subscription whose dispatcher sits
    /// on a replay entry that nothing holds back (first of its key, the key neither draining
    /// nor held by a nack, its consumer with permits) with nothing scheduled that could send
    /// it: `(topic, subscription, entry)`. `Some` is a stall no later input is bound to
    /// unblock (the simulator checks it after every step).
    pub fn replay_idle(&self) -> Option<(String, String, cursor::Position)> {
        self.state.replay_idle()
    }

    /// The mark-delete position of `topic`'s (its full name) subscription `sub`, read from
    /// its cursor; `None` if either is unknown.
    pub fn mark_delete(&self, topic: &str, sub: &str) -> Option<cursor::Position> {
        self.state.mark_delete(topic, sub)
    }

    /// Who holds what in the dispatcher of `topic`'s (its full name) subscription `sub`: every
    /// consumer's pending entries and unacked charge, the draining hashes, the chunk pins
    /// ([`dispatcher::Holdings`]), for a reference model of the deliveries and acks to compare
    /// against after [`step`](Self::step); `None` if either is unknown.
    pub fn holdings(&self, topic: &str, sub: &str) -> Option<dispatcher::Holdings> {
        self.state.holdings(topic, sub)
    }

    /// The first subscription whose dispatcher loop failed to settle during a step (more
    /// commands for one event, or more productive steps in a row, than a healthy loop ever
    /// needs; that loop no longer runs): `(topic, subscription, how)`. `None` while every
    /// loop settles; the simulator checks it after every round of steps.
    pub fn livelock(&self) -> Option<(String, String, dispatcher::Livelock)> {
        self.state.livelock()
    }

    /// The housekeeping thread's jobs, once, at the clock's time: the logs' sync (with a
    /// `data_dir`), retention, message expiry by the namespaces' TTLs, backlog quotas,
    /// REACHED_END_OF_TOPIC for terminated topics.
    pub fn housekeeping(&self) {
        let now = self.clock.now();
        if self.state.cfg.data_dir.is_some() {
            self.state.sync_topics();
        }
        self.state.trim_topics(now);
        self.state.expire_by_ttl(now);
        self.state.enforce_backlog_quotas(now);
        self.state.notify_end_of_topics();
    }

    /// One admin REST request answered at the clock's time: `method` (`GET`, `PUT`, `POST`,
    /// `DELETE`), `target` (the path with its query, as in an HTTP request line, e.g.
    /// `/admin/v2/persistent/public/default/t/stats`) and the body. Returns the status and the
    /// body of the answer.
    pub fn admin(&self, method: &str, target: &str, body: &[u8]) -> (u16, Vec<u8>) {
        let req = crate::admin::Request::new(method, target, body.to_vec(), self.clock.now());
        let r = crate::admin::route(&req, &self.state);
        (r.status, r.body)
    }

    fn time(&self) -> Now {
        let ms = self.clock.now();
        Now { ms, wall_ms: ms }
    }
}

/// Every topic lets its subscriptions go: each dispatcher is shut down (its cursor persisted,
/// unless [`crash`](SteppedBroker::crash) abandoned it) once no connection holds it. Without
/// this a dispatcher with consumers would keep its topic (and its files) alive: a consumer's
/// delivery route refers to the topic, and a stepped dispatcher only lets its consumers go when
/// it is stepped.
impl Drop for SteppedBroker {
    fn drop(&mut self) {
        self.faults.forget_reads();
        for t in self.state.topics() {
            t.close();
        }
    }
}

/// Why a [`Connection`] wants to be closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Closed {
    /// The client broke the protocol (the queued ERROR should still be delivered).
    Protocol,
    /// No frame for two keep-alive intervals.
    Idle,
}

impl From<Close> for Closed {
    fn from(c: Close) -> Closed {
        match c {
            Close::Protocol => Closed::Protocol,
            Close::Idle => Closed::Idle,
        }
    }
}

/// One client connection to a [`SteppedBroker`]. Dropping it is the connection's loss: its
/// consumers leave their subscriptions (their unacked entries go to the others) and its
/// producers their topics.
pub struct Connection {
    state: Arc<BrokerState>,
    clock: StepClock,
    id: u64,
    session: Session,
    queue: Arc<Queue>,
    /// See [`Connection::hold_writes`].
    hold_writes: bool,
    writes: Vec<WriteRequest>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// The connection's id (the broker's numbering).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Bytes from the client, at the broker's clock: every whole frame runs; the replies are
    /// queued for [`poll_transmit`](Self::poll_transmit). `Err`: the connection must close
    /// (after the queued frames are delivered).
    pub fn handle_bytes(&mut self, bytes: &[u8]) -> Result<(), Closed> {
        let r = self.session.handle_bytes(self.now(), bytes);
        if self.hold_writes {
            self.writes
                .extend(std::iter::from_fn(|| self.session.poll_write()));
        } else {
            let now_ms = self.now().wall_ms;
            WriteRequest::run_all(&mut self.session, now_ms);
        }
        self.take_replies();
        r.map_err(Closed::from)
    }

    /// Whether the writes this connection's SENDs ask for wait for the caller
    /// ([`complete_write`](Self::complete_write)) instead of running at once, as a store
    /// on other machines completes later. Their receipts, and every reply after them, wait too;
    /// their entries are neither stored nor dispatched until then. Writes still waiting when
    /// the connection is dropped never run (a crash): their entries go with the topic's next
    /// write, unreceipted, or not at all.
    pub fn hold_writes(&mut self, on: bool) {
        self.hold_writes = on;
    }

    /// How many writes wait for the caller.
    pub fn held_writes(&self) -> usize {
        self.writes.len()
    }

    /// Runs the `i`th waiting write (in any order: writes of different topics complete in
    /// any order) and hands its outcome to the session. `None` when there is no such write;
    /// else whether the store took it.
    pub fn complete_write(&mut self, i: usize) -> Option<bool> {
        if i >= self.writes.len() {
            return None;
        }
        let w = self.writes.remove(i);
        let outcome = w.run(self.now().wall_ms);
        self.session.handle_written(w.id, &outcome);
        self.take_replies();
        Some(outcome.is_ok())
    }

    /// Time passed without input: a keep-alive PING, or `Err` after two intervals.
    pub fn handle_timeout(&mut self) -> Result<(), Closed> {
        let r = self.session.handle_timeout(self.now());
        self.take_replies();
        r.map_err(Closed::from)
    }

    /// The next bytes for the client (one or more whole frames), in order: the session's
    /// replies and, after them, MESSAGE frames the dispatchers delivered during a step.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.take_replies();
        lock(&self.queue.frames).pop_front()
    }

    /// The session's replies move into the queue, as the TCP shell moves them into its write
    /// queue; once the session has none left its new consumers' deliveries may start.
    fn take_replies(&mut self) {
        while let Some(f) = self.session.poll_transmit() {
            lock(&self.queue.frames).push_back(f);
        }
    }

    fn now(&self) -> Now {
        let ms = self.clock.now();
        Now { ms, wall_ms: ms }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.session.close();
        self.state.unregister_outbox(self.id);
    }
}

/// A connection's frames waiting for the caller (the TCP shell's write queue).
#[derive(Default)]
struct Queue {
    frames: Mutex<VecDeque<Vec<u8>>>,
}

impl Outbox for Queue {
    fn push(&self, frame: Vec<u8>) {
        lock(&self.frames).push_back(frame);
    }

    fn offer(&self, frames: Vec<u8>) -> Offer {
        let mut q = lock(&self.frames);
        if q.len() >= QUEUE_LIMIT {
            return Offer::Full;
        }
        q.push_back(frames);
        Offer::Taken
    }

    fn drained(&self) -> bool {
        lock(&self.frames).len() <= QUEUE_LIMIT / 2
    }
}
