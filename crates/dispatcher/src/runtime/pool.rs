//! Many runtimes on a few threads: a [`DispatchPool`] runs each pooled runtime's loop on one of
//! its worker threads when the runtime has an event or something due, so a broker with 10,000
//! subscriptions runs a handful of dispatcher threads, not 10,000.
//!
//! Each pooled runtime is a task: its loop (the stepped loop, on the real clock) behind a
//! mutex, and a `scheduled` flag. Whoever sends the runtime an event schedules the task (puts
//! it on the ready queue once, however many events follow); a worker takes it, clears the flag,
//! runs one step (every event queued, then whatever is due) and registers the loop's next
//! deadline with the timer thread, which schedules the task again at that time. A task is
//! stepped by one worker at a time (its mutex), so its events are handled in order, as on its
//! own thread.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, Sender};
use cursor::{CursorStore, Ledger, ManagedCursor};
use tracing::{debug, warn};

use super::stepped::{Step, Stepper};
use super::{LoopClock, Runtime, RuntimeOptions};
use crate::config::DispatcherConfig;

/// Worker threads that run pooled runtimes ([`Runtime::start_pooled`]), and one timer thread.
/// Shut the runtimes down before dropping the pool: dropping it stops its threads, and a
/// pooled runtime still alive then never runs again (its shutdown returns at once, without
/// persisting its cursor).
pub struct DispatchPool {
    /// Taken when the pool is dropped.
    shared: Option<Arc<Shared>>,
    /// Never sent on: dropped with the pool, which ends its threads and every wait for a
    /// pooled loop (a runtime still alive then does not run again).
    closing: Option<Sender<()>>,
    closed: Receiver<()>,
    workers: Vec<JoinHandle<()>>,
    timer: Option<JoinHandle<()>>,
}

/// What the pool's threads and its tasks share.
struct Shared {
    ready: Sender<Arc<PoolTask>>,
    timers: Sender<Timer>,
    /// The pool's time base: deadlines are milliseconds since this instant.
    epoch: Instant,
}

/// A task's wake-up at `at` (ms since the pool's epoch); stale once the task registered
/// another time.
struct Timer {
    at: u64,
    task: Weak<PoolTask>,
}

/// One pooled runtime's loop and its scheduling state.
pub(super) struct PoolTask {
    stepper: Mutex<Box<dyn Step + Send>>,
    /// On the ready queue, or about to be: further events need not schedule it again.
    scheduled: AtomicBool,
    /// The wake-up registered with the timer thread (ms since the epoch; `u64::MAX`: none).
    timer_at: AtomicU64,
    /// Dropped by the worker that saw the loop stop: [`Runtime::stop`] waits for it.
    done: Mutex<Option<Sender<()>>>,
    /// A step panicked: the loop never runs again (as a threaded runtime's thread that
    /// panicked), and the pool's worker goes on with the others.
    failed: AtomicBool,
    shared: Arc<Shared>,
}

thread_local! {
    /// Set on a pool's worker threads: a runtime stopped from one (a sink dropping the last
    /// handle) must not wait for a worker.
    static ON_WORKER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl DispatchPool {
    /// A pool of `workers` threads (at least one), named `dispatch-N`, and its timer thread.
    pub fn new(workers: usize) -> DispatchPool {
        let (ready, ready_rx) = unbounded::<Arc<PoolTask>>();
        let (timers, timers_rx) = unbounded::<Timer>();
        let (closing, closed) = unbounded::<()>();
        let shared = Arc::new(Shared {
            ready,
            timers,
            epoch: Instant::now(),
        });
        let workers: Vec<JoinHandle<()>> = (0..workers.max(1))
            .filter_map(|i| {
                let (rx, closed) = (ready_rx.clone(), closed.clone());
                let spawned = std::thread::Builder::new()
                    .name(format!("dispatch-{i}"))
                    .spawn(move || work(&rx, &closed));
                spawned
                    .map_err(|e| warn!(error = %e, "could not spawn a dispatch worker"))
                    .ok()
            })
            .collect();
        let epoch = shared.epoch;
        let timer_closed = closed.clone();
        let timer = std::thread::Builder::new()
            .name("dispatch-timer".into())
            .spawn(move || time(&timers_rx, &timer_closed, epoch))
            .map_err(|e| warn!(error = %e, "could not spawn the dispatch timer"))
            .ok();
        DispatchPool {
            shared: Some(shared),
            closing: Some(closing),
            closed,
            workers,
            timer,
        }
    }

    /// The number of worker threads.
    pub fn workers(&self) -> usize {
        self.workers.len()
    }
}

impl Drop for DispatchPool {
    fn drop(&mut self) {
        drop(self.shared.take());
        drop(self.closing.take());
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
        if let Some(t) = self.timer.take() {
            let _ = t.join();
        }
    }
}

impl std::fmt::Debug for DispatchPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DispatchPool")
            .field("workers", &self.workers.len())
            .finish()
    }
}

/// A worker: runs tasks as they become ready, until the pool is dropped.
fn work(ready: &Receiver<Arc<PoolTask>>, closed: &Receiver<()>) {
    ON_WORKER.with(|w| w.set(true));
    loop {
        crossbeam_channel::select! {
            recv(ready) -> task => match task {
                Ok(task) => {
                    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| task.run()));
                    if ran.is_err() {
                        task.fail();
                    }
                }
                Err(_) => return,
            },
            recv(closed) -> _ => return,
        }
    }
}

/// The timer thread: schedules each task at the time it registered; a task that registered
/// a later time since, or is gone, is skipped.
fn time(timers: &Receiver<Timer>, closed: &Receiver<()>, epoch: Instant) {
    let mut heap: BinaryHeap<Reverse<(u64, u64)>> = BinaryHeap::new();
    let mut tasks: std::collections::HashMap<u64, Weak<PoolTask>> = Default::default();
    let mut seq = 0u64;
    loop {
        let now = ms_since(epoch);
        while let Some(&Reverse((at, id))) = heap.peek() {
            if at > now {
                break;
            }
            heap.pop();
            if let Some(task) = tasks.remove(&id).and_then(|w| w.upgrade()) {
                if task
                    .timer_at
                    .compare_exchange(at, u64::MAX, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
                {
                    task.schedule();
                }
            }
        }
        let wait = match heap.peek() {
            Some(&Reverse((at, _))) => crossbeam_channel::after(Duration::from_millis(at - now)),
            None => crossbeam_channel::never(),
        };
        crossbeam_channel::select! {
            recv(timers) -> t => match t {
                Ok(t) => {
                    seq += 1;
                    heap.push(Reverse((t.at, seq)));
                    tasks.insert(seq, t.task);
                }
                Err(_) => return,
            },
            recv(closed) -> _ => return,
            recv(wait) -> _ => {}
        }
    }
}

fn ms_since(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl PoolTask {
    /// Puts the task on the ready queue unless it is there already.
    pub(super) fn schedule(self: &Arc<Self>) {
        if !self.scheduled.swap(true, Ordering::SeqCst) {
            let _ = self.shared.ready.send(self.clone());
        }
    }

    /// After a panic in one of its steps: the loop is stopped for good.
    fn fail(&self) {
        self.failed.store(true, Ordering::SeqCst);
        warn!("a pooled dispatcher loop panicked: it stops (its consumers get nothing more)");
        drop(self.done.lock().unwrap_or_else(|p| p.into_inner()).take());
    }

    /// One step of the loop, on a worker; then its next wake-up.
    fn run(self: &Arc<Self>) {
        if self.failed.load(Ordering::SeqCst) {
            return;
        }
        let mut stepper = self.stepper.lock().unwrap_or_else(|p| p.into_inner());
        // Events sent from here on schedule the task again.
        self.scheduled.store(false, Ordering::SeqCst);
        stepper.step();
        if stepper.stopped() {
            drop(stepper);
            let done = self.done.lock().unwrap_or_else(|p| p.into_inner()).take();
            drop(done);
            return;
        }
        if stepper.has_events() {
            // More than one step handles: the rest waits behind the other ready tasks.
            self.schedule();
        }
        let Some(due_in) = stepper.due_in_ms() else {
            return;
        };
        drop(stepper);
        let at = ms_since(self.shared.epoch).saturating_add(due_in);
        // Register only an earlier time than the one registered: a later one is found when
        // the earlier wake-up steps the loop.
        let registered = self.timer_at.fetch_min(at, Ordering::SeqCst);
        if at < registered {
            let timer = Timer {
                at,
                task: Arc::downgrade(self),
            };
            let _ = self.shared.timers.send(timer);
        }
    }
}

/// A pooled runtime's task, kept by its [`Runtime`].
pub(super) struct Pooled {
    /// The runtime owns its task (senders hold it weakly).
    _task: Arc<PoolTask>,
    done: Receiver<()>,
    /// The pool's: disconnected once the pool is dropped.
    closed: Receiver<()>,
}

impl Pooled {
    /// The loop's answer on `rx`; `None` when the loop stopped (or panicked), or the pool is
    /// gone: a loop that will not run again.
    pub(super) fn answer<T>(&self, rx: &Receiver<T>) -> Option<T> {
        crossbeam_channel::select! {
            recv(rx) -> v => v.ok(),
            recv(self.done) -> _ => rx.try_recv().ok(),
            recv(self.closed) -> _ => None,
        }
    }

    /// Waits until a worker saw the loop stop, or the pool is gone (not on a worker thread,
    /// where it would wait for itself).
    pub(super) fn wait_stopped(&self) {
        if !ON_WORKER.with(std::cell::Cell::get) {
            crossbeam_channel::select! {
                recv(self.done) -> _ => {}
                recv(self.closed) -> _ => {}
            }
        }
    }
}

impl Runtime {
    /// Starts a runtime whose loop runs on `pool`'s worker threads instead of a thread of its
    /// own: when it has an event, or at the time something is due (the core's timer, a cursor
    /// persist, an idle check, a look at a paused consumer). It behaves as a threaded runtime
    /// ([`Runtime::start_with`]) in every other way; a [`DeliverySink`](super::DeliverySink)
    /// is called on a worker thread and must not call back into the runtime.
    ///
    /// ```
    /// use std::time::Duration;
    /// use cursor::{EntryMeta, InMemoryLedger, ManagedCursor, MemoryStore};
    /// use dispatcher::{ConsumerSpec, DispatchPool, DispatcherConfig, Runtime, RuntimeOptions};
    ///
    /// let pool = DispatchPool::new(2);
    /// let runtimes: Vec<Runtime> = (0..100)
    ///     .map(|i| {
    ///         let ledger = InMemoryLedger::new(10_000);
    ///         let cursor = ManagedCursor::new(format!("sub-{i}"), &ledger, MemoryStore::new());
    ///         Runtime::start_pooled(DispatcherConfig::shared(), cursor, ledger, RuntimeOptions::default(), &pool)
    ///     })
    ///     .collect();
    /// let c = runtimes[42].add_consumer(ConsumerSpec::new(1, "c1")).unwrap();
    /// c.flow(10);
    /// runtimes[42].publish(vec![EntryMeta::simple(1_000, 16)]);
    /// let got = c.deliveries.recv_timeout(Duration::from_secs(5)).unwrap();
    /// assert_eq!(got.len(), 1);
    /// drop(c);
    /// drop(runtimes); // each shuts down on its worker
    /// drop(pool);
    /// ```
    pub fn start_pooled<S, L>(
        cfg: DispatcherConfig,
        cursor: ManagedCursor<S>,
        ledger: L,
        options: RuntimeOptions,
        pool: &DispatchPool,
    ) -> Runtime
    where
        S: CursorStore + Send + 'static,
        L: Ledger + Send + 'static,
    {
        let real = LoopClock::real();
        let (mut rt, lp, rx) = Self::assemble(cfg, cursor, ledger, options, real);
        let (done_tx, done) = unbounded();
        let task = Arc::new(PoolTask {
            stepper: Mutex::new(Box::new(Stepper::unbounded(lp, rx))),
            scheduled: AtomicBool::new(false),
            timer_at: AtomicU64::new(u64::MAX),
            done: Mutex::new(Some(done_tx)),
            failed: AtomicBool::new(false),
            shared: match &pool.shared {
                Some(s) => s.clone(),
                None => unreachable!("a pool's shared state is taken only when it is dropped"),
            },
        });
        // Every sender shares the one cell: the runtime's, the core's waker's, the consumers'.
        let _ = rt.events.wake.set(Arc::downgrade(&task));
        // The first step sets the loop's timers (the cursor's persist cadence).
        task.schedule();
        debug!("pooled dispatcher started");
        rt.pooled = Some(Pooled {
            _task: task,
            done,
            closed: pool.closed.clone(),
        });
        rt
    }
}
