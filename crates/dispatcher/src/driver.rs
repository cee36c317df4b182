//! The one driver: executes a [`Dispatcher`]'s [`DispatchCommand`]s against a [`CursorCell`].
//!
//! Every shell — the threaded [`Runtime`](crate::Runtime), the simulator, the test harness,
//! the benchmark and a network broker — feeds inputs into the core (`handle_*`) and then calls
//! [`Driver::poll`] until it returns `None`. The driver runs what touches the cursor and the
//! ledger itself (reads, replays, rewinds, dead-letter acks) and hands back only what needs the
//! shell: a [`Output::Send`] to deliver, a [`Output::SetTimer`] to arm. The shells differ only
//! in where time comes from and how bytes reach consumers.
//!
//! Also here, once: publishing to the ledger ([`Driver::publish`]), admin operations on the
//! cursor with the core's mark-delete hook ([`Driver::admin`]), and persisting the cursor on a
//! cadence the caller sets ([`Driver::maybe_persist`], time passed in).
//!
//! Per-entry extras a broker puts on the wire (the redelivery count, a batch's already-acked
//! indexes) come from [`Driver::delivery_extras`] right after an [`Output::Send`].
//!
//! Does not: own the core or the cursor (the shell does; both are passed in, so a shell's own
//! state stays borrowable between polls), read the clock, or spawn threads.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use cursor::{CursorError, CursorStore, Entry, EntryMeta, Ledger, MarkDeleteMove, Position};
use tracing::{debug, trace, warn};

use crate::ack::CursorCell;
use crate::config::ConsumerId;
use crate::core::{DispatchCommand, Dispatcher};
use crate::shared::Waker;

/// An administrative operation on the subscription's cursor; the resulting mark-delete move
/// goes through the core's hook ([`Driver::admin`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdminOp {
    /// Skip the next `n` unacked entries.
    Skip(u64),
    /// Drop the whole backlog.
    ClearBacklog,
    /// Expire entries published before this time (ms, the publish-time clock).
    Expire(u64),
    /// Expire entries published more than `age_ms` ago. The driver computes the cutoff from
    /// the `now` it is given, so it is meaningful only where `now` is the publish-time clock
    /// (the simulator); the threaded [`Runtime`](crate::Runtime) turns it into an
    /// [`Expire`](Self::Expire) with the wall clock first.
    ExpireOlderThan {
        /// The age in ms.
        age_ms: u64,
    },
    /// Backlog-quota eviction down to at most this many messages.
    EvictToCount(u64),
    /// Backlog-quota eviction down to at most this many bytes.
    EvictToSize(u64),
    /// Reset the cursor to this position. Disconnect every consumer first (as Pulsar does).
    /// A position the cursor refuses is logged and nothing moves.
    ResetTo(Position),
    /// Reset the cursor to the first entry published at or after this time (ms; past the last
    /// entry when none is, see `ManagedCursor::reset_to_publish_time`). Disconnect every
    /// consumer first, as for [`ResetTo`](Self::ResetTo); a refused reset is logged and
    /// nothing moves.
    ResetToPublishTime(u64),
    /// Drop ledger entries below this position, but never at or above the cursor's
    /// mark-delete + 1 (retention for a runtime that owns its ledger). Moves nothing. A ledger
    /// shared by several runtimes ([`cursor::SharedLedger`]) is trimmed by its owner instead,
    /// below the slowest cursor's mark-delete.
    TrimLedgerBelow(Position),
}

/// A [`Waker`] that raises a flag; a single-threaded shell hands it to the core and to
/// [`Driver::with_wake_flag`], and the driver calls `handle_wake` when it is set.
#[derive(Debug, Default)]
pub struct FlagWaker(AtomicBool);

impl FlagWaker {
    /// Whether a wake is pending; clears it.
    pub fn take(&self) -> bool {
        self.0.swap(false, Ordering::SeqCst)
    }

    /// Whether a wake is pending.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

impl Waker for FlagWaker {
    fn wake(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// What [`Driver::poll`] hands back to the shell.
#[derive(Debug)]
pub enum Output {
    /// Deliver these entries, in order, to the consumer.
    Send {
        /// The receiving consumer.
        consumer: ConsumerId,
        /// The entries, ascending.
        entries: Vec<Entry>,
    },
    /// Call [`Dispatcher::handle_timeout`] at or after this time.
    SetTimer {
        /// Absolute time in the caller's unit.
        at: u64,
    },
    /// Failover: tell the consumer whether it is the active one
    /// ([`DispatchCommand::ActiveChanged`]).
    ActiveChanged {
        /// The consumer to tell.
        consumer: ConsumerId,
        /// Whether it is the active consumer now.
        active: bool,
    },
    /// A dead letter was acked on the cursor (the core already forgot it). A broker with a
    /// dead-letter topic publishes the entry (still in the ledger) on this.
    DeadLettered {
        /// The entry's position.
        position: Position,
        /// The cursor's answer to the ack.
        acked: Result<(), CursorError>,
    },
    /// Deferred reads only ([`Driver::with_deferred_reads`]): the core asked for a normal read
    /// of up to `max_entries`; run it later with [`Driver::complete_read`]. The core issues no
    /// other read until then, and every `handle_*` may be called meanwhile.
    ReadIssued {
        /// The read's limit.
        max_entries: usize,
    },
    /// Deferred reads only: the core asked to replay these positions; run it later with
    /// [`Driver::complete_replay`].
    ReplayIssued {
        /// The positions to read again.
        positions: Vec<Position>,
    },
    /// Trace only ([`Driver::with_trace`]): the wake flag was set and `handle_wake` ran.
    Woke,
    /// Trace only: the cursor was rewound.
    Rewound,
    /// Trace only: a normal read ran (its result already went to the core).
    Read {
        /// The read's limit.
        max_entries: usize,
        /// The positions read (empty: end of the topic).
        positions: Vec<Position>,
    },
    /// Trace only: a replay ran (its result already went to the core).
    Replayed {
        /// The positions asked for.
        positions: Vec<Position>,
        /// Those the cursor reported as already acked.
        already_acked: Vec<Position>,
    },
}

/// What a broker sends along with one delivered entry ([`Driver::delivery_extras`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeliveryExtras {
    /// How many times the entry was asked for again ([`Dispatcher::redelivery_count`]).
    pub redelivery_count: u32,
    /// For a partially acked batch entry, the indexes already acked (the consumer skips them).
    pub acked_indexes: Option<Vec<u32>>,
}

/// What [`Driver::maybe_persist`] did.
#[derive(Debug)]
pub enum Persist {
    /// Nothing to persist (the cursor is clean), or no cadence is set.
    Clean,
    /// Dirty, but the cadence allows the next persist only at `due`: call again then.
    NotBefore {
        /// The earliest time of the next persist.
        due: u64,
    },
    /// Persisted now.
    Persisted,
    /// The store refused; the cursor stays dirty.
    Failed(CursorError),
}

/// Executes a core's commands against a cursor cell. See the [module docs](self).
#[derive(Debug, Default)]
pub struct Driver {
    trace: bool,
    deferred: bool,
    wake: Option<Arc<FlagWaker>>,
    persist_every: Option<u64>,
    last_persist: u64,
    executed: u64,
}

impl Driver {
    /// A driver without trace, wake flag or persist cadence.
    pub fn new() -> Self {
        Self::default()
    }

    /// Also hand back the trace outputs (`Woke`, `Rewound`, `Read`, `Replayed`), for shells
    /// that log every step (the simulator, the scripted tests).
    pub fn with_trace(mut self, on: bool) -> Self {
        self.trace = on;
        self
    }

    /// Hand reads back to the shell instead of running them at once ([`Output::ReadIssued`],
    /// [`Output::ReplayIssued`]), for a shell whose storage answers later (an asynchronous
    /// ledger) or a simulator that lets input arrive while a read is in flight. The shell
    /// completes each with [`complete_read`](Self::complete_read) or
    /// [`complete_replay`](Self::complete_replay), then polls again.
    pub fn with_deferred_reads(mut self, on: bool) -> Self {
        self.deferred = on;
        self
    }

    /// Check `flag` before every command and call `handle_wake` when it is set (for shells
    /// without a channel to wake them).
    pub fn with_wake_flag(mut self, flag: Arc<FlagWaker>) -> Self {
        self.wake = Some(flag);
        self
    }

    /// Replaces the wake flag (a restarted core gets a fresh waker).
    pub fn set_wake_flag(&mut self, flag: Arc<FlagWaker>) {
        self.wake = Some(flag);
    }

    /// Persist the cursor at most once per `interval` while it is dirty
    /// ([`maybe_persist`](Self::maybe_persist)).
    pub fn with_persist_every(mut self, interval: u64) -> Self {
        self.persist_every = Some(interval);
        self
    }

    /// Commands executed so far (reads, replays, rewinds, sends, timers), for livelock checks.
    pub fn commands_executed(&self) -> u64 {
        self.executed
    }

    /// Runs the core's commands until one needs the shell, and returns it; `None` when the core
    /// has nothing left (then the dead letters are drained, one per call). Call after every
    /// `handle_*` until it returns `None`.
    pub fn poll<S: CursorStore, L: Ledger>(
        &mut self,
        now: u64,
        core: &mut Dispatcher,
        cell: &Mutex<CursorCell<S, L>>,
    ) -> Option<Output> {
        loop {
            if self.wake.as_ref().is_some_and(|w| w.take()) {
                core.handle_wake(now);
                if self.trace {
                    return Some(Output::Woke);
                }
            }
            let Some(cmd) = core.poll_command() else {
                if self.wake.as_ref().is_some_and(|w| w.is_set()) {
                    continue;
                }
                return self.dead_letter(core, cell);
            };
            self.executed += 1;
            match cmd {
                DispatchCommand::Rewind => {
                    CursorCell::lock(cell).rewind();
                    if self.trace {
                        return Some(Output::Rewound);
                    }
                }
                DispatchCommand::Read { max_entries } if self.deferred => {
                    return Some(Output::ReadIssued { max_entries })
                }
                DispatchCommand::Replay { positions } if self.deferred => {
                    return Some(Output::ReplayIssued { positions })
                }
                DispatchCommand::Read { max_entries } => {
                    if let Some(out) = self.complete_read(now, core, cell, max_entries) {
                        return Some(out);
                    }
                }
                DispatchCommand::Replay { positions } => {
                    if let Some(out) = self.complete_replay(now, core, cell, positions) {
                        return Some(out);
                    }
                }
                DispatchCommand::Send { consumer, entries } => {
                    return Some(Output::Send { consumer, entries })
                }
                DispatchCommand::SetTimer { at } => return Some(Output::SetTimer { at }),
                DispatchCommand::ActiveChanged { consumer, active } => {
                    return Some(Output::ActiveChanged { consumer, active })
                }
            }
        }
    }

    /// Runs a normal read of up to `max_entries` on the cursor and hands the result to the
    /// core. [`poll`](Self::poll) calls it for every read unless reads are deferred; a shell
    /// with [`with_deferred_reads`](Self::with_deferred_reads) calls it once the read it got
    /// as [`Output::ReadIssued`] is due. Returns the trace output, if tracing.
    pub fn complete_read<S: CursorStore, L: Ledger>(
        &mut self,
        now: u64,
        core: &mut Dispatcher,
        cell: &Mutex<CursorCell<S, L>>,
        max_entries: usize,
    ) -> Option<Output> {
        let (entries, more) = CursorCell::lock(cell).read(max_entries);
        let positions = match self.trace {
            true => entries.iter().map(|e| e.position).collect(),
            false => Vec::new(),
        };
        core.handle_read_complete(now, entries, more);
        self.trace.then_some(Output::Read {
            max_entries,
            positions,
        })
    }

    /// Replays `positions` from the cursor and hands the result to the core; the deferred
    /// counterpart of [`Output::ReplayIssued`], as [`complete_read`](Self::complete_read) is of
    /// [`Output::ReadIssued`]. Returns the trace output, if tracing.
    pub fn complete_replay<S: CursorStore, L: Ledger>(
        &mut self,
        now: u64,
        core: &mut Dispatcher,
        cell: &Mutex<CursorCell<S, L>>,
        positions: Vec<Position>,
    ) -> Option<Output> {
        let r = CursorCell::lock(cell).replay(&positions);
        core.handle_replay_complete(now, r.entries, &r.already_acked);
        self.trace.then_some(Output::Replayed {
            positions,
            already_acked: r.already_acked,
        })
    }

    /// Runs [`poll`](Self::poll) to the end, handing every output to `on_output`.
    pub fn run<S: CursorStore, L: Ledger>(
        &mut self,
        now: u64,
        core: &mut Dispatcher,
        cell: &Mutex<CursorCell<S, L>>,
        mut on_output: impl FnMut(&mut Dispatcher, Output),
    ) {
        while let Some(out) = self.poll(now, core, cell) {
            on_output(core, out);
        }
    }

    fn dead_letter<S: CursorStore, L: Ledger>(
        &mut self,
        core: &mut Dispatcher,
        cell: &Mutex<CursorCell<S, L>>,
    ) -> Option<Output> {
        let position = core.poll_dead_letter()?;
        let acked = {
            let mut g = CursorCell::lock(cell);
            let (cursor, ledger) = g.parts();
            cursor.ack(ledger, position).map(|_| ())
        };
        match &acked {
            Ok(()) => debug!(
                ledger = position.ledger_id,
                entry = position.entry_id,
                "dead letter acked on the cursor"
            ),
            Err(e) => {
                warn!(ledger = position.ledger_id, entry = position.entry_id, error = %e, "dead letter: cursor ack failed")
            }
        }
        Some(Output::DeadLettered { position, acked })
    }

    /// The per-entry extras of a send (aligned with `entries`), read under one cursor lock.
    pub fn delivery_extras<S: CursorStore, L: Ledger>(
        &self,
        core: &Dispatcher,
        cell: &Mutex<CursorCell<S, L>>,
        entries: &[Entry],
    ) -> Vec<DeliveryExtras> {
        let g = CursorCell::lock(cell);
        entries
            .iter()
            .map(|e| DeliveryExtras {
                redelivery_count: core.redelivery_count(e.position),
                acked_indexes: g.cursor.batch_acked_indexes(e.position),
            })
            .collect()
    }

    /// Appends `metas` to the ledger and tells the core; returns the assigned positions.
    /// Takes `EntryMeta`s or shared `Arc<EntryMeta>`s (see [`Ledger::append_shared`]).
    pub fn publish<S: CursorStore, L: Ledger, M: Into<Arc<EntryMeta>>>(
        &mut self,
        now: u64,
        core: &mut Dispatcher,
        cell: &Mutex<CursorCell<S, L>>,
        metas: impl IntoIterator<Item = M>,
    ) -> Vec<Position> {
        let positions: Vec<Position> = {
            let mut g = CursorCell::lock(cell);
            metas
                .into_iter()
                .map(|m| g.ledger.append_shared(m.into()))
                .collect()
        };
        trace!(entries = positions.len(), "published");
        core.handle_entries_appended(now);
        positions
    }

    /// Runs `op` on the cursor and, if mark-delete moved, the core's hook, then persists the
    /// cursor whatever the cadence: an operator's skip, clear, expiry, eviction or reset is
    /// kept before it is answered, so a crash does not bring the dropped entries back (a failed
    /// persist is logged and retried at the cadence). Returns the move.
    pub fn admin<S: CursorStore, L: Ledger>(
        &mut self,
        now: u64,
        core: &mut Dispatcher,
        cell: &Mutex<CursorCell<S, L>>,
        op: AdminOp,
    ) -> Option<MarkDeleteMove> {
        let mv = {
            let mut g = CursorCell::lock(cell);
            let (cursor, ledger) = g.parts();
            match op {
                AdminOp::Skip(n) => cursor.skip(ledger, n),
                AdminOp::ClearBacklog => cursor.clear_backlog(ledger),
                AdminOp::Expire(t) => cursor.expire(ledger, t),
                AdminOp::ExpireOlderThan { age_ms } => {
                    cursor.expire(ledger, now.saturating_sub(age_ms))
                }
                AdminOp::EvictToCount(n) => cursor.evict_to_count(ledger, n),
                AdminOp::EvictToSize(n) => cursor.evict_to_size(ledger, n),
                AdminOp::ResetTo(p) => match cursor.reset(ledger, p) {
                    Ok(mv) => Some(mv),
                    Err(e) => {
                        warn!(position = %p, error = %e, "reset refused");
                        None
                    }
                },
                AdminOp::ResetToPublishTime(t) => match cursor.reset_to_publish_time(ledger, t) {
                    Ok(mv) => Some(mv),
                    Err(e) => {
                        warn!(publish_time = t, error = %e, "reset by publish time refused");
                        None
                    }
                },
                AdminOp::TrimLedgerBelow(p) => {
                    ledger.trim_below(p.min(cursor.mark_delete_position().next()));
                    None
                }
            }
        };
        if let Some(mv) = &mv {
            core.handle_mark_delete_moved(now, mv);
            if let Err(e) = self.persist_now(now, cell) {
                warn!(error = %e, "cursor persist after an admin operation failed; will retry");
            }
        }
        mv
    }

    /// Persists the cursor if it is dirty and the cadence ([`with_persist_every`]) allows it
    /// at `now`. Without a cadence: always [`Persist::Clean`] (persist with
    /// [`persist_now`](Self::persist_now) instead).
    ///
    /// [`with_persist_every`]: Self::with_persist_every
    pub fn maybe_persist<S: CursorStore, L: Ledger>(
        &mut self,
        now: u64,
        cell: &Mutex<CursorCell<S, L>>,
    ) -> Persist {
        let Some(every) = self.persist_every else {
            return Persist::Clean;
        };
        let mut g = CursorCell::lock(cell);
        if !g.cursor.is_dirty() {
            return Persist::Clean;
        }
        let due = self.last_persist.saturating_add(every);
        if now < due {
            return Persist::NotBefore { due };
        }
        let r = g.cursor.persist();
        self.last_persist = now;
        match r {
            Ok(()) => Persist::Persisted,
            Err(e) => Persist::Failed(e),
        }
    }

    /// Persists the cursor now (for example on shutdown), whatever the cadence.
    pub fn persist_now<S: CursorStore, L: Ledger>(
        &mut self,
        now: u64,
        cell: &Mutex<CursorCell<S, L>>,
    ) -> Result<(), CursorError> {
        self.last_persist = now;
        CursorCell::lock(cell).cursor.persist()
    }
}
