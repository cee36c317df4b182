//! The read loop: wake and timers, choosing the next read or replay, read results.

use super::*;
use crate::replay::ReplayEntry;
use crate::rng::SplitMix64;

/// Which kind of read is in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ReadKind {
    /// A normal read at the cursor's read position.
    Normal,
    /// A replay read of chosen positions.
    Replay,
}

/// Where the read loop is. At most one read (normal or replay) is in flight; otherwise the loop
/// is idle, parked at the end of the topic, or backing off after a read that dispatched nothing.
///
/// A replay may be issued while parked at the end (and a backoff may follow one), so those two
/// states carry whether the loop returns to `AtEnd` afterwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ReadState {
    /// Nothing in flight: the next `read_more` may issue a read or a replay.
    Idle,
    /// A normal read is in flight; `min_replay` was the first replay position when it was
    /// issued (an earlier one entering replay meanwhile discards the result).
    Reading {
        /// First replay position at issue time.
        min_replay: Option<Position>,
    },
    /// A replay read is in flight.
    Replaying {
        /// The loop was parked at the end of the topic when the replay was issued.
        at_end: bool,
    },
    /// The last normal read found nothing: no normal read until entries are appended (replays
    /// still go out).
    AtEnd,
    /// A read dispatched nothing: nothing is read before `until` unless new input arrives.
    BackingOff {
        /// The retry time.
        until: u64,
        /// Parked at the end of the topic underneath.
        at_end: bool,
    },
}

impl ReadState {
    pub(super) fn in_flight(&self) -> bool {
        matches!(
            self,
            ReadState::Reading { .. } | ReadState::Replaying { .. }
        )
    }

    pub(super) fn at_end(&self) -> bool {
        match *self {
            ReadState::AtEnd => true,
            ReadState::Replaying { at_end } | ReadState::BackingOff { at_end, .. } => at_end,
            ReadState::Idle | ReadState::Reading { .. } => false,
        }
    }

    /// The retry time while backing off.
    pub(super) fn retry_at(&self) -> Option<u64> {
        match *self {
            ReadState::BackingOff { until, .. } => Some(until),
            _ => None,
        }
    }

    /// Parks at (or leaves) the end of the topic, keeping whatever else is resent_nacked on.
    pub(super) fn set_at_end(&mut self, v: bool) {
        *self = match *self {
            ReadState::Idle | ReadState::AtEnd => match v {
                true => ReadState::AtEnd,
                false => ReadState::Idle,
            },
            ReadState::Replaying { .. } => ReadState::Replaying { at_end: v },
            ReadState::BackingOff { until, .. } => ReadState::BackingOff { until, at_end: v },
            reading @ ReadState::Reading { .. } => reading,
        };
    }

    pub(super) fn start_read(&mut self, min_replay: Option<Position>) {
        *self = ReadState::Reading { min_replay };
    }

    pub(super) fn start_replay(&mut self) {
        *self = ReadState::Replaying {
            at_end: self.at_end(),
        };
    }

    /// A read of `kind` completed: back to idle (or at end). For a normal read, returns the
    /// first replay position at issue time; `None` if no read of that kind was in flight.
    pub(super) fn finish(&mut self, kind: ReadKind) -> Option<Option<Position>> {
        match (*self, kind) {
            (ReadState::Reading { min_replay }, ReadKind::Normal) => {
                *self = ReadState::Idle;
                Some(min_replay)
            }
            (ReadState::Replaying { at_end }, ReadKind::Replay) => {
                *self = if at_end {
                    ReadState::AtEnd
                } else {
                    ReadState::Idle
                };
                Some(None)
            }
            _ => None,
        }
    }

    /// Backs off until `until` (replacing an earlier retry time).
    pub(super) fn back_off(&mut self, until: u64) {
        if !self.in_flight() {
            let at_end = self.at_end();
            *self = ReadState::BackingOff { until, at_end };
        }
    }

    /// New input or a due timer ends the backoff.
    pub(super) fn cancel_backoff(&mut self) {
        if let ReadState::BackingOff { at_end, .. } = *self {
            *self = if at_end {
                ReadState::AtEnd
            } else {
                ReadState::Idle
            };
        }
    }
}

/// The read loop's state plus the hints that shape its next decision.
#[derive(Debug)]
pub(super) struct ReadLoop {
    /// Where the loop is.
    pub(super) state: ReadState,
    /// The adaptive read batch (doubles per non-empty read up to the configured maximum).
    pub(super) batch: usize,
    /// The last backoff step (1, 2, 4 … 10); 0 after progress.
    pub(super) backoff_step: u64,
    /// Issue a [`DispatchCommand::Rewind`] as soon as nothing is in flight (the last consumer left).
    pub(super) rewind_pending: bool,
    /// Look-ahead: the next read skips the replay set and reads past blocked keys.
    pub(super) look_ahead_next: bool,
    /// Key_Shared: the last replay pick found nothing dispatchable and nothing relevant changed
    /// since (the pick scans the replay set, so it is not repeated for nothing).
    pub(super) replay_settled: bool,
    /// Key_Shared: the last replay pick scanned the whole replay set (it stopped for neither
    /// the read size nor the permits), so once its replay read is dispatched nothing else in
    /// replay can go until new input arrives: the loop settles as if the pick found nothing.
    pub(super) pick_scanned_all: bool,
    /// While settled: the consumers that had no usable permits when the loop settled. A flow
    /// to any other consumer cannot unblock a replay entry (each entry waiting for that
    /// consumer waits for something else than permits), so it leaves the loop settled.
    pub(super) starved: Vec<ConsumerId>,
    /// Key_Shared: the last replay pick stopped (read size or permits reached) before this
    /// position, and nothing that could unblock an earlier entry happened since (the same
    /// events unsettle the loop and clear it): the next pick resumes here, with the last
    /// pick's marks, instead of scanning the entries it already found waiting.
    pub(super) pick_resume: Option<Position>,
    /// The last read result was discarded into replay (not a reason to back off).
    pub(super) discarded_read: bool,
    /// The back-off jitter's random stream (seeded from the configuration).
    pub(super) jitter: SplitMix64,
    /// Moving average of messages per entry read, in thousandths (0: nothing read yet);
    /// Pulsar's `avgMessagesPerEntry`. Permits and unacked limits count messages, reads count
    /// entries: a read asks for the permits divided by this.
    pub(super) avg_messages_milli: u64,
    /// [`DispatcherConfig::legacy_replay_settle`](crate::DispatcherConfig::legacy_replay_settle):
    /// [`unsettle`](Self::unsettle) leaves `pick_scanned_all` alone (the regression).
    pub(super) legacy_keep_scanned_all: bool,
    /// [`ReplaySet::adds`] when the replay read in flight was issued.
    pub(super) replay_adds_at_issue: u64,
}

impl ReadLoop {
    /// Something may have unblocked a replay entry: the next pick scans the replay set from
    /// its start. A pick whose replay read is still in flight no longer covers everything in
    /// replay (the input may have added or unblocked entries it never saw), so its completion
    /// must not settle the loop.
    pub(super) fn unsettle(&mut self) {
        self.replay_settled = false;
        self.pick_resume = None;
        if !self.legacy_keep_scanned_all {
            self.pick_scanned_all = false;
        }
    }

    pub(super) fn new(batch: usize, seed: u64) -> Self {
        ReadLoop {
            jitter: SplitMix64::new(seed),
            avg_messages_milli: 0,
            state: ReadState::Idle,
            batch,
            backoff_step: 0,
            rewind_pending: false,
            look_ahead_next: false,
            replay_settled: false,
            pick_scanned_all: false,
            starved: Vec::new(),
            pick_resume: None,
            discarded_read: false,
            legacy_keep_scanned_all: false,
            replay_adds_at_issue: 0,
        }
    }
}

impl Dispatcher {
    // ------------------------------------------------------------------ wake and timers

    /// Something unblocked off-thread (see [`Waker`]): consumers or the subscription below half
    /// their unacked limit resume now; a released draining hash schedules a read after the
    /// coalescing interval.
    pub fn handle_wake(&mut self, now: u64) {
        self.input_arrived();
        if self.wake.unacked_unblocked.swap(false, Ordering::SeqCst) {
            self.recheck_unacked_blocks();
        }
        if self.wake.key_released.swap(false, Ordering::SeqCst) {
            // Key-serial: the next entry of a key may go now; its wait was one ack, not a
            // handover, so there is nothing to coalesce.
            self.read.look_ahead_next = false;
            self.read.state.set_at_end(false);
        }
        if self.wake.hashes_unblocked.swap(false, Ordering::SeqCst) {
            if self.cfg.unblocking_interval == 0 {
                self.read.look_ahead_next = false;
            } else if self.timers.unblock.is_none() {
                self.timers.unblock = Some(now.saturating_add(self.cfg.unblocking_interval));
            }
        }
        if self.timers.unblock.is_none() {
            self.read_more(now);
        }
        self.arm_timer_command();
    }

    /// A timer armed through [`DispatchCommand::SetTimer`] is due.
    pub fn handle_timeout(&mut self, now: u64) {
        self.read.unsettle();
        if self.timers.unblock.is_some_and(|t| t <= now) {
            self.timers.unblock = None;
            self.read.look_ahead_next = false;
            // Pulsar cancels a parked read so the replay of unblocked entries is not starved.
            self.read.state.set_at_end(false);
        }
        if self.timers.draining.is_some_and(|t| t <= now) {
            self.timers.draining = None;
            self.force_release_expired(now);
        }
        if self.read.state.retry_at().is_some_and(|t| t <= now) {
            self.read.state.cancel_backoff();
        }
        if self.timers.nack.is_some_and(|t| t <= now) {
            self.timers.nack = self.replay.next_due(now);
            trace!(next = ?self.timers.nack, "nack delay elapsed");
            // Delayed entries became due: a read backing off must not wait for its retry.
            self.read.state.cancel_backoff();
        }
        if self.delayed.next_due().is_some_and(|t| t <= now) {
            // Deliver-at times passed: the same.
            self.read.state.cancel_backoff();
        }
        self.read_more(now);
    }

    /// After a read that dispatched nothing (or failed): wait before reading again
    /// (`read_backoff_initial`, doubling up to `read_backoff_max`: 1, 2, 4 … 10 time units by
    /// default, plus the configured jitter), unless new input (flow, wake, join, leave,
    /// appended entries) arrives first.
    pub(super) fn back_off(&mut self, now: u64) {
        let initial = self.cfg.read_backoff_initial.max(1);
        let max = self.cfg.read_backoff_max.max(initial);
        self.read.backoff_step = self.read.backoff_step.saturating_mul(2).clamp(initial, max);
        let jitter = match self.cfg.read_backoff_jitter {
            0 => 0,
            j => self.read.jitter.next() % j.saturating_add(1),
        };
        self.read.state.back_off(
            now.saturating_add(self.read.backoff_step)
                .saturating_add(jitter),
        );
    }

    /// The read (normal or replay) that the last [`DispatchCommand::Read`] or
    /// [`DispatchCommand::Replay`] asked for failed (the ledger or the store returned an
    /// error). Nothing it would have returned is lost: a normal read is issued again from the
    /// cursor's read position, replay positions stay in replay. The loop backs off
    /// (`read_backoff_initial` doubling up to `read_backoff_max`, with the configured jitter)
    /// and a [`DispatchCommand::SetTimer`] fires the retry; new input (a flow, a join, appended
    /// entries…) retries at once. Returns false (no-op) when no read was in flight.
    pub fn handle_read_failed(&mut self, now: u64) -> bool {
        let kind = match self.read.state {
            ReadState::Reading { .. } => ReadKind::Normal,
            ReadState::Replaying { .. } => ReadKind::Replay,
            _ => return false,
        };
        self.read.state.finish(kind);
        debug!(?kind, "read failed; backing off");
        self.back_off(now);
        self.read_more(now);
        true
    }

    /// New input may allow progress: cancel the retry backoff.
    pub(super) fn input_arrived(&mut self) {
        self.read.state.cancel_backoff();
        self.read.unsettle();
    }

    /// New entries were appended to the ledger: a read parked at the end of the topic resumes.
    pub fn handle_entries_appended(&mut self, now: u64) {
        self.read.state.set_at_end(false);
        // A new entry unblocks no replay entry: the replay pick stays settled (a producer's
        // every append would otherwise rescan the replay set).
        self.read.state.cancel_backoff();
        self.read_more(now);
    }
    pub(super) fn look_ahead_limit(&self) -> usize {
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
            let a = self.shared.limit.max();
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

    pub(super) fn read_more(&mut self, now: u64) {
        if self.closed {
            return;
        }
        self.arm_timer_command();
        if self.read.state.in_flight() {
            return;
        }
        self.release_delayed(now);
        if std::mem::take(&mut self.read.rewind_pending) {
            // The last consumer left (Pulsar rewinds when the next one joins; rewinding as soon
            // as no read is in flight is equivalent and keeps every unacked entry accounted
            // for: it is ahead of the read position again).
            self.commands.push_back(DispatchCommand::Rewind);
            self.read.state.set_at_end(false);
        }
        if self.consumers.is_empty() || self.read.state.retry_at().is_some() {
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
        // Permits count messages, a read counts entries (batch entries carry several).
        let total = match self.read.avg_messages_milli {
            0..=1000 => total,
            avg => i64::try_from(i128::from(total) * 1000 / i128::from(avg)).unwrap_or(i64::MAX),
        };
        let n = usize::try_from(total)
            .unwrap_or(usize::MAX)
            .min(self.read.batch)
            .max(1);
        let settled = self.mode.is_key_shared() && self.read.replay_settled;
        if !self.replay.is_empty() && !std::mem::take(&mut self.read.look_ahead_next) && !settled {
            let positions = self.pick_replay(now, n);
            if !positions.is_empty() {
                trace!(count = positions.len(), "replay read");
                self.read.state.start_replay();
                self.read.replay_adds_at_issue = self.replay.adds();
                self.commands
                    .push_back(DispatchCommand::Replay { positions });
                return;
            }
        }
        if self.read.state.at_end() {
            return;
        }
        let max = self.cfg.max_unacked_per_subscription;
        if max > 0 && self.shared.limit.is_blocked() {
            return;
        }
        let mut n = n;
        if self.mode.is_key_shared() {
            let limit = self.look_ahead_limit();
            if self.replay.len() >= limit {
                return;
            }
            n = n.min(limit - self.replay.len()).max(1);
        }
        self.read.state.start_read(self.replay.first());
        trace!(max_entries = n, "normal read");
        self.commands
            .push_back(DispatchCommand::Read { max_entries: n });
    }

    /// Replay positions to read now: ascending; on Key_Shared filtered by the dispatch
    /// predicate with a per-pass permit snapshot (Pulsar's replay position filter).
    pub(super) fn pick_replay(&mut self, now: u64, n: usize) -> Vec<Position> {
        if !self.mode.is_key_shared() {
            // Shared: a nacked entry waits for its delay; nothing else waits for it.
            return self.replay.due(now).take(n).collect();
        }
        let holds = self.replay.has_holds();
        // Resume where the last pick stopped, with its marks (see `ReadLoop::pick_resume`).
        let resume = self.read.pick_resume.take().filter(|_| !holds);
        let mut pass = self.start_replay_pass(holds, resume.is_some());
        let mut stopped_at = None;
        let mut scanned = 0u64;
        for (p, e) in self.replay.iter_from(resume) {
            if pass.out.len() >= n || pass.capacity <= 0 {
                stopped_at = Some(p);
                break;
            }
            scanned += 1;
            self.judge_replay_entry(&mut pass, now, p, e);
        }
        self.finish_replay_pass(pass, stopped_at, scanned)
    }

    /// A Key_Shared replay pick's working state: each consumer's permits, and the hashes the
    /// pass holds back (kept from the last pass when it resumes).
    fn start_replay_pass(&mut self, holds: bool, resumed: bool) -> ReplayPass {
        let snapshot: Vec<(ConsumerId, i64)> = self
            .consumers
            .iter()
            .map(|c| (c.id, self.available_permits(c)))
            .collect();
        let mut blocked = std::mem::replace(&mut self.scratch_blocked, AHashSet::new());
        let mut pinned_blocked =
            std::mem::replace(&mut self.scratch_pinned_blocked, AHashSet::new());
        if !resumed {
            blocked.clear();
            pinned_blocked.clear();
        }
        ReplayPass {
            capacity: snapshot.iter().map(|(_, p)| *p).sum(),
            snapshot,
            blocked,
            pinned_blocked,
            resent_nacked: Vec::new(),
            ordered: self.mode.key_shared().is_some_and(|k| k.ordered()),
            holds,
            out: Vec::new(),
        }
    }

    /// Takes replay entry `p` into the pass's picks, or holds it back (and, where later
    /// entries of its hash must wait behind it, marks the hash).
    fn judge_replay_entry(
        &self,
        pass: &mut ReplayPass,
        now: u64,
        p: Position,
        e: ReplayEntry<ConsumerId>,
    ) {
        if e.not_before > now {
            // A nack delay (or a park): not yet. Its hash stays held (ordered mode).
            if pass.ordered && e.hash != 0 {
                pass.blocked.insert(e.hash);
            }
            return;
        }
        if e.hash == 0 {
            pass.out.push(p);
            return;
        }
        // Pinned entries (a chunked message's continuation, or any entry of a key whose
        // chunked message is half-delivered) are ordered per (consumer, hash) only: that
        // message started before the hash's other waiting entries (which may wait for it).
        let pin = e.pinned.or_else(|| self.hash_pin(e.hash));
        let held = match pin {
            Some(c) => pass.pinned_blocked.contains(&(c, e.hash)),
            None => pass.blocked.contains(&e.hash),
        };
        if held {
            return;
        }
        // Ordered nack: an earlier nacked entry of the hash (or an entry kept behind one)
        // still waits and is not re-sent in this pass.
        if pass.holds && self.replay.held_before(e.hash, p, &pass.resent_nacked) {
            if pin.is_none() {
                pass.blocked.insert(e.hash);
            }
            return;
        }
        let target = match pin {
            Some(c) => Some(c),
            None => self
                .mode
                .key_shared()
                .and_then(|k| k.selector.select(e.hash)),
        };
        let slot = target.and_then(|t| pass.snapshot.iter().position(|(c, _)| *c == t));
        if slot.is_some_and(|i| pass.snapshot[i].1 <= 0) && pin.is_none() {
            // Its target has no permits left in this pass. Every later unpinned entry of the
            // hash has the same target (the selector does not change during a pass), so it
            // waits too without being marked; pinned entries of the hash are ordered by
            // `pinned_blocked`, which an unpinned entry never marks. Skipping the mark keeps a
            // long replay set cheap to scan for the consumers that have permits.
            return;
        }
        let ok = match (target, slot) {
            (Some(t), Some(i)) => {
                pass.snapshot[i].1 > 0
                    && (pin.is_some()
                        || self.can_dispatch(DispatchGate::ReplayPick, t, e.hash) == Verdict::Allow)
            }
            _ => false,
        };
        if ok {
            if let Some(i) = slot {
                pass.snapshot[i].1 -= 1;
                pass.capacity -= 1;
            }
            if e.nacked {
                pass.resent_nacked.push(p);
            }
            pass.out.push(p);
            return;
        }
        // A held-back pinned entry also holds back later entries of its hash (they may be
        // later chunks of the same message), even in out-of-order mode.
        if pass.ordered || pin.is_some() {
            pass.blocked.insert(e.hash);
        }
        if let Some(c) = pin {
            pass.pinned_blocked.insert((c, e.hash));
        }
    }

    /// Keeps the pass's marks for a resumed pick, counts it, and settles the replay loop when
    /// nothing could go; returns the picks.
    fn finish_replay_pass(
        &mut self,
        pass: ReplayPass,
        stopped_at: Option<Position>,
        scanned: u64,
    ) -> Vec<Position> {
        let ReplayPass {
            blocked,
            pinned_blocked,
            holds,
            out,
            ..
        } = pass;
        self.scratch_blocked = blocked;
        self.scratch_pinned_blocked = pinned_blocked;
        self.counters.replay_picks += 1;
        self.counters.replay_scanned += scanned;
        self.read.pick_scanned_all = stopped_at.is_none() && !out.is_empty();
        // Not with nack holds: a pass's re-sent nacked entries change what later entries of
        // their key may do, and those are not carried over.
        self.read.pick_resume = stopped_at.filter(|_| !holds);
        if out.is_empty() {
            // Nothing in replay can go now; only new permits, an unblock, a membership change or
            // new redeliveries can change that (entries a dispatch pass holds back cannot).
            self.settle_replay();
        }
        out
    }

    /// A normal read finished: `entries` were read from the cursor (possibly none: end of
    /// topic, the read parks until [`handle_entries_appended`](Self::handle_entries_appended));
    /// `has_more_entries` is the cursor's answer after the read (look-ahead is only taken while
    /// it is true).
    pub fn handle_read_complete(&mut self, now: u64, entries: Vec<Entry>, has_more_entries: bool) {
        let min_replay_at_read = self.read.state.finish(ReadKind::Normal).flatten();
        if self.consumers.is_empty() {
            // Nobody to send to: drop them and rewind, so they are read again later.
            self.read.rewind_pending = true;
            self.read_more(now);
            return;
        }
        if entries.is_empty() {
            self.read.state.set_at_end(true);
            self.read_more(now);
            return;
        }
        self.read.batch = (self.read.batch * 2).min(self.cfg.max_read_batch.max(1));
        self.observe_messages_per_entry(&entries);
        let mut entries = entries;
        if let Some(md) = self.mark_delete {
            entries.retain(|e| e.position > md);
        }
        if self.hold_delayed(now, &mut entries, false) > 0 && entries.is_empty() {
            // Progress of a kind: the read position moved past entries that wait for their
            // time. Read on at once.
            self.read.backoff_step = 0;
            self.read_more(now);
            return;
        }
        let before = self.counters.entries_sent;
        match self.mode.is_key_shared() {
            true => {
                self.dispatch_key_shared(now, entries, false, has_more_entries, min_replay_at_read)
            }
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
        self.read.state.finish(ReadKind::Replay);
        // Settled when the pick that issued this read took everything it could, unless the
        // dispatch below can unblock replay entries by itself: a re-sent nacked entry releases
        // the entries kept behind it, a chunk pins or unpins its key. Anything else that
        // unblocks an entry (a flow, an ack's wake, a timer, a membership change) unsettles the
        // loop again.
        let full = std::mem::take(&mut self.read.pick_scanned_all);
        let settle =
            full && !self.replay.has_holds() && entries.iter().all(|e| e.meta.chunk.is_none());
        self.read.replay_settled = settle;
        for p in already_acked {
            self.replay.remove(*p);
        }
        // Only what is still waiting in replay (a mark-delete move may have dropped some).
        let mut entries = entries;
        entries.retain(|e| self.replay.contains(e.position));
        entries.sort_by_key(|e| e.position);
        let kept = match self.replay.adds() != self.read.replay_adds_at_issue
            && self.mode.key_shared().is_some_and(|k| k.ordered())
        {
            true => self.withhold_overtaken_replay(&mut entries),
            false => 0,
        };
        if kept > 0 {
            self.read.replay_settled = false;
        }
        let delayed = self.hold_delayed(now, &mut entries, true);
        let before = self.counters.entries_sent;
        if !entries.is_empty() && !self.consumers.is_empty() {
            match self.mode.is_key_shared() {
                true => self.dispatch_key_shared(now, entries, true, true, None),
                false => self.dispatch_shared(now, entries, true),
            }
        }
        if self.read.replay_settled {
            // Still settled after the dispatch: note who is out of permits now.
            self.settle_replay();
        }
        if (!already_acked.is_empty() || delayed > 0 || kept > 0)
            && self.counters.entries_sent == before
        {
            // Progress of a kind: acked positions left replay, or entries wait behind earlier
            // ones of their key that the next pick sends first. Read again at once.
            self.read.backoff_step = 0;
        } else {
            self.after_dispatch(now, before);
        }
        self.read_more(now);
    }

    /// Ordered Key_Shared, when something entered replay while a replay read was in flight (a
    /// consumer left and its unacked entries came back, a redelivery, a nack): an entry that
    /// came back may be earlier than an entry of the same key this read returned, which the
    /// pick chose when that earlier entry was still out on a consumer. Such read entries stay
    /// in replay, so the next pick sends the earlier one first. Returns how many were kept.
    /// A read that completes at once (the [`Driver`](crate::Driver)'s default) never gets here.
    fn withhold_overtaken_replay(&self, entries: &mut Vec<Entry>) -> usize {
        let Some(last) = entries.last().map(|e| e.position) else {
            return 0;
        };
        let read: AHashSet<Position> = entries.iter().map(|e| e.position).collect();
        // Per hash, the first replay position below the read's last that the read lacks.
        let mut first_outside: AHashMap<u32, Position> = AHashMap::new();
        for (p, e) in self.replay.iter_from(None) {
            if p >= last {
                break;
            }
            if e.hash != 0 && !read.contains(&p) {
                first_outside.entry(e.hash).or_insert(p);
            }
        }
        if first_outside.is_empty() {
            return 0;
        }
        let before = entries.len();
        entries.retain(|e| {
            let h = self.entry_hash(e);
            first_outside.get(&h).is_none_or(|q| *q >= e.position)
        });
        let kept = before - entries.len();
        if kept > 0 {
            debug!(
                kept,
                "replay read entries kept in replay behind earlier entries of their key"
            );
        }
        kept
    }

    /// The replay loop settles: no replay entry can go until new input arrives. Notes the
    /// consumers without usable permits (only a flow to one of them unsettles the loop).
    pub(super) fn settle_replay(&mut self) {
        self.read.replay_settled = true;
        let mut starved = std::mem::take(&mut self.read.starved);
        starved.clear();
        starved.extend(
            self.consumers
                .iter()
                .filter(|c| c.available_permits() <= 0)
                .map(|c| c.id),
        );
        self.read.starved = starved;
    }

    /// Folds a read's messages per entry into the moving average (the first read sets it,
    /// then each read weighs a quarter).
    fn observe_messages_per_entry(&mut self, entries: &[Entry]) {
        if entries.is_empty() {
            return;
        }
        let messages: u64 = entries.iter().map(|e| u64::from(e.meta.messages())).sum();
        let obs = messages.saturating_mul(1000) / entries.len() as u64;
        let avg = &mut self.read.avg_messages_milli;
        *avg = match *avg {
            0 => obs,
            a => (a.saturating_mul(3).saturating_add(obs)) / 4,
        };
    }

    pub(super) fn after_dispatch(&mut self, now: u64, sent_before: u64) {
        if self.counters.entries_sent > sent_before
            || self.read.look_ahead_next
            || std::mem::take(&mut self.read.discarded_read)
        {
            self.read.backoff_step = 0;
        } else {
            self.back_off(now);
        }
    }
}

/// One Key_Shared replay pick's working state ([`Dispatcher::pick_replay`]).
struct ReplayPass {
    /// Each consumer's permits left in this pass.
    snapshot: Vec<(ConsumerId, i64)>,
    /// Permits left over every consumer.
    capacity: i64,
    /// Hashes whose later entries wait in this pass.
    blocked: AHashSet<u32>,
    /// (consumer, hash) pairs whose later pinned entries wait in this pass.
    pinned_blocked: AHashSet<(ConsumerId, u32)>,
    /// Nacked entries picked in this pass (later entries of their key may follow them).
    resent_nacked: Vec<Position>,
    /// Ordered Key_Shared.
    ordered: bool,
    /// The replay set holds nacked entries' keys.
    holds: bool,
    /// The picks, in order.
    out: Vec<Position>,
}
