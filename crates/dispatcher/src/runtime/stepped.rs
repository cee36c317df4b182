//! A runtime without a thread: the caller runs the dispatcher loop by calling
//! [`Runtime::step`] with a clock it sets, so a deterministic simulator (or a test) can drive a
//! program written against [`Runtime`] — a broker — with no thread, channel wait or real time
//! in between.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crossbeam_channel::Receiver;
use cursor::{CursorStore, Ledger, ManagedCursor, Position};

use super::{Event, Loop, LoopClock, Runtime, RuntimeOptions};
use crate::config::DispatcherConfig;
use crate::core::Holdings;

/// The clock of stepped runtimes: wall-clock milliseconds (publish and deliver-at times are
/// wall-clock milliseconds) that the caller sets and that must never go back. Clones share
/// one time.
#[derive(Clone, Debug, Default)]
pub struct StepClock(Arc<AtomicU64>);

impl StepClock {
    /// A clock that reads `now_ms`.
    pub fn new(now_ms: u64) -> StepClock {
        StepClock(Arc::new(AtomicU64::new(now_ms)))
    }

    /// The time now, ms.
    pub fn now(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }

    /// Moves the clock to `now_ms` (never back: an earlier time is ignored).
    pub fn set(&self, now_ms: u64) {
        self.0.fetch_max(now_ms, Ordering::SeqCst);
    }
}

/// What a stepped runtime keeps in place of its thread: the loop (its cursor and ledger types
/// erased) and the end of its event channel.
pub(super) struct SteppedLoop {
    inner: Arc<Mutex<Box<dyn Step + Send>>>,
    /// [`Runtime::abandon`] was called: the loop never runs again, not even to shut down.
    abandoned: std::sync::atomic::AtomicBool,
}

/// A [`Loop`] over any cursor store and ledger.
pub(super) trait Step {
    /// Handles every queued event and whatever is due now; whether anything happened.
    fn step(&mut self) -> bool;
    /// When something is due without an event.
    fn deadline(&mut self) -> Option<u64>;
    /// How long from now until something is due without an event, in ms.
    fn due_in_ms(&mut self) -> Option<u64>;
    /// Whether events wait in the loop's queue (a step handles a bounded number).
    fn has_events(&self) -> bool;
    /// Whether the loop ended (a shutdown was handled).
    fn stopped(&self) -> bool;
    /// [`Runtime::replay_idle`].
    fn replay_idle(&self) -> Option<Position>;
    /// [`Runtime::holdings`].
    fn holdings(&self) -> Option<Holdings>;
    /// [`Runtime::livelock`].
    fn livelock(&self) -> Option<Livelock>;
}

/// Commands one event (or one due moment) may make the core execute before the loop counts as
/// livelocked: far above what any healthy turn issues (a read, a send per consumer, a timer).
const MAX_COMMANDS_PER_TURN: u64 = 200_000;

/// Productive steps in a row (each handled an event or something due) before the loop counts
/// as livelocked: with no new event from outside, a healthy loop settles within a few.
const MAX_STEPS_UNSETTLED: u64 = 100_000;

/// How a stepped runtime's loop failed to settle, from [`Runtime::livelock`]. The loop does not
/// run again after either.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Livelock {
    /// One event or due moment made the core execute more than this many commands.
    Commands(u64),
    /// This many steps in a row each did something, with no quiet step between.
    Steps(u64),
}

impl std::fmt::Display for Livelock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Livelock::Commands(n) => write!(
                f,
                "the dispatcher executed more than {n} commands for one event without settling"
            ),
            Livelock::Steps(n) => write!(
                f,
                "the dispatcher loop did something in {n} steps in a row without settling"
            ),
        }
    }
}

pub(super) struct Stepper<S: CursorStore, L: Ledger> {
    lp: Loop<S, L>,
    rx: Receiver<Event>,
    stopped: bool,
    /// Productive steps since the last quiet one.
    unsettled: u64,
    livelock: Option<Livelock>,
    /// A pool's loop: it runs on when it does not settle (a busy subscription is productive
    /// step after step) and handles at most [`POOLED_EVENTS_PER_STEP`] events a step; a
    /// simulator's stepped loop is stopped as livelocked and handles every queued event.
    pooled: bool,
}

/// Events a pooled loop handles per step, so that one busy subscription does not keep a
/// worker from the others.
const POOLED_EVENTS_PER_STEP: usize = 1_024;

impl<S: CursorStore, L: Ledger> Stepper<S, L> {
    /// A pool's loop: no livelock bound, a bounded number of events per step.
    pub(super) fn unbounded(lp: Loop<S, L>, rx: Receiver<Event>) -> Self {
        Stepper {
            lp,
            rx,
            stopped: false,
            unsettled: 0,
            livelock: None,
            pooled: true,
        }
    }

    /// Executes the core's commands (bounded for a stepped runtime: a livelock ends the
    /// loop).
    fn execute(&mut self) {
        if self.pooled {
            self.lp.execute();
        } else if !self.lp.execute_at_most(MAX_COMMANDS_PER_TURN) {
            self.livelock = Some(Livelock::Commands(MAX_COMMANDS_PER_TURN));
        }
    }
}

impl<S: CursorStore, L: Ledger> Step for Stepper<S, L> {
    fn step(&mut self) -> bool {
        if self.stopped || self.livelock.is_some() {
            return false;
        }
        let mut did = false;
        let mut handled = 0;
        let max_events = if self.pooled {
            POOLED_EVENTS_PER_STEP
        } else {
            usize::MAX
        };
        while handled < max_events {
            let Ok(ev) = self.rx.try_recv() else { break };
            handled += 1;
            did = true;
            if !self.lp.on_event(ev) {
                self.stopped = true;
                self.lp.finish();
                return true;
            }
            self.execute();
            if self.livelock.is_some() {
                return true;
            }
        }
        let now = self.lp.now();
        if self.lp.next_deadline(now).is_some_and(|at| at <= now) {
            self.lp.on_due(now);
            self.execute();
            did = true;
        }
        self.unsettled = if did { self.unsettled + 1 } else { 0 };
        if !self.pooled && self.unsettled > MAX_STEPS_UNSETTLED && self.livelock.is_none() {
            self.livelock = Some(Livelock::Steps(MAX_STEPS_UNSETTLED));
        }
        did
    }

    fn deadline(&mut self) -> Option<u64> {
        if self.stopped {
            return None;
        }
        let now = self.lp.now();
        self.lp.next_deadline(now)
    }

    fn due_in_ms(&mut self) -> Option<u64> {
        let now = self.lp.now();
        self.deadline().map(|at| at.saturating_sub(now))
    }

    fn has_events(&self) -> bool {
        !self.rx.is_empty()
    }

    fn stopped(&self) -> bool {
        self.stopped
    }

    fn replay_idle(&self) -> Option<Position> {
        if self.stopped || self.livelock.is_some() {
            return None;
        }
        self.lp.replay_idle()
    }

    fn holdings(&self) -> Option<Holdings> {
        (!self.stopped).then(|| self.lp.core.holdings())
    }

    fn livelock(&self) -> Option<Livelock> {
        self.livelock
    }
}

impl SteppedLoop {
    fn is_abandoned(&self) -> bool {
        self.abandoned.load(Ordering::SeqCst)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Box<dyn Step + Send>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Runtime {
    /// Starts a runtime whose dispatcher loop runs only when the caller calls
    /// [`step`](Runtime::step), at the time `clock` reads. Every other method works as on a
    /// threaded runtime; those that wait for an answer (adding a consumer, an admin operation,
    /// stats) run the loop once themselves first. A consumer's deliveries are made during a
    /// step, on the caller's thread (to a channel or a [`DeliverySink`](super::DeliverySink),
    /// which must not call back into this runtime).
    ///
    /// ```
    /// use cursor::{EntryMeta, InMemoryLedger, ManagedCursor, MemoryStore};
    /// use dispatcher::{ConsumerSpec, DispatcherConfig, Runtime, RuntimeOptions, StepClock};
    ///
    /// let clock = StepClock::new(1_000);
    /// let ledger = InMemoryLedger::new(10_000);
    /// let cursor = ManagedCursor::new("sub", &ledger, MemoryStore::new());
    /// let rt = Runtime::start_stepped(
    ///     DispatcherConfig::shared(),
    ///     cursor,
    ///     ledger,
    ///     RuntimeOptions::default(),
    ///     clock.clone(),
    /// );
    /// let c = rt.add_consumer(ConsumerSpec::new(1, "c1")).unwrap();
    /// c.flow(10);
    /// rt.publish(vec![EntryMeta::simple(1_000, 16)]);
    /// assert!(c.deliveries.try_recv().is_err(), "nothing runs between steps");
    /// while rt.step() {}
    /// assert_eq!(c.deliveries.try_recv().unwrap().len(), 1);
    ///
    /// // The cursor is persisted every second of the caller's clock.
    /// clock.set(2_500);
    /// assert!(rt.next_deadline().is_some_and(|at| at <= 2_500));
    /// rt.step();
    /// ```
    pub fn start_stepped<S, L>(
        cfg: DispatcherConfig,
        cursor: ManagedCursor<S>,
        ledger: L,
        options: RuntimeOptions,
        clock: StepClock,
    ) -> Runtime
    where
        S: CursorStore + Send + 'static,
        L: Ledger + Send + 'static,
    {
        let (mut rt, lp, rx) =
            Self::assemble(cfg, cursor, ledger, options, LoopClock::Stepped(clock));
        let stepper: Box<dyn Step + Send> = Box::new(Stepper {
            lp,
            rx,
            stopped: false,
            unsettled: 0,
            livelock: None,
            pooled: false,
        });
        rt.stepped = Some(SteppedLoop {
            inner: Arc::new(Mutex::new(stepper)),
            abandoned: std::sync::atomic::AtomicBool::new(false),
        });
        rt
    }

    /// A stepped runtime: handles every event queued so far and whatever is due at its clock's
    /// time, then returns whether it did anything (call it until it returns `false` to reach a
    /// quiet state). A threaded runtime: does nothing and returns `false`.
    pub fn step(&self) -> bool {
        self.stepped
            .as_ref()
            .is_some_and(|s| !s.is_abandoned() && s.lock().step())
    }

    /// A stepped runtime: its loop never runs again, not even the shutdown that persists the
    /// cursor, as if its process had been killed (a simulated crash: the cursor's store keeps
    /// what was persisted before). A threaded runtime: nothing.
    pub fn abandon(&self) {
        if let Some(s) = &self.stepped {
            s.abandoned.store(true, Ordering::SeqCst);
        }
    }

    /// A stepped runtime: the earliest clock time at which [`step`](Runtime::step) has
    /// something to do without a new event (the core's timer, a cursor persist, an idle
    /// check); `None` when nothing is scheduled, and always for a threaded runtime.
    pub fn next_deadline(&self) -> Option<u64> {
        self.stepped.as_ref().and_then(|s| s.lock().deadline())
    }

    /// A stepped runtime: the first entry in replay that nothing holds back (first of its
    /// key, the key neither draining nor held by a nack, its consumer with permits) while the
    /// loop has nothing scheduled that could send it (no timer, no read in flight, no consumer
    /// paused on a full channel). Called when every step is done (`step` returned `false`),
    /// `Some` is a stall: the loop sits on work that no later input is bound to unblock.
    /// `None` for a threaded runtime.
    pub fn replay_idle(&self) -> Option<Position> {
        self.stepped
            .as_ref()
            .filter(|s| !s.is_abandoned())
            .and_then(|s| s.lock().replay_idle())
    }

    /// A stepped runtime: who holds what in its dispatcher now (every consumer's pending
    /// entries and unacked charge, the draining hashes, the chunk pins), for a reference model
    /// of the deliveries and acks to compare against after a step. `None` for a threaded
    /// runtime and once the loop has stopped.
    pub fn holdings(&self) -> Option<Holdings> {
        self.stepped
            .as_ref()
            .filter(|s| !s.is_abandoned())
            .and_then(|s| s.lock().holdings())
    }

    /// A stepped runtime: whether its loop failed to settle (see [`Livelock`]); it then no
    /// longer runs, and [`step`](Runtime::step) returns `false`. A simulator checks this
    /// after stepping. `None` for a threaded runtime.
    pub fn livelock(&self) -> Option<Livelock> {
        self.stepped.as_ref().and_then(|s| s.lock().livelock())
    }

    /// Whether this runtime is stepped ([`Runtime::start_stepped`]).
    pub fn is_stepped(&self) -> bool {
        self.stepped.is_some()
    }

    /// Before waiting for an answer: a stepped runtime runs its loop so the answer is there.
    pub(super) fn pump(&self) {
        if let Some(s) = self.stepped.as_ref().filter(|s| !s.is_abandoned()) {
            let mut g = s.lock();
            while g.step() {}
        }
    }

    /// Whether a stepped runtime's loop has ended.
    pub(super) fn stepped_stopped(&self) -> bool {
        self.stepped
            .as_ref()
            .is_some_and(|s| s.is_abandoned() || s.lock().stopped())
    }
}
