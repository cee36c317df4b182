//! The read loop: wake and timers, choosing the next read or replay, read results.

use super::*;

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
    pub(super) fn back_off(&mut self, now: u64) {
        self.retry_backoff = (self.retry_backoff * 2).clamp(1, 10);
        self.retry_timer = Some(now.saturating_add(self.retry_backoff));
    }

    /// New input may allow progress: cancel the retry backoff.
    pub(super) fn input_arrived(&mut self) {
        self.retry_timer = None;
        self.replay_settled = false;
    }

    /// New entries were appended to the ledger: a read parked at the end of the topic resumes.
    pub fn handle_entries_appended(&mut self, now: u64) {
        self.at_end = false;
        self.input_arrived();
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

    pub(super) fn read_more(&mut self, now: u64) {
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
    pub(super) fn pick_replay(&mut self, now: u64, n: usize) -> Vec<Position> {
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

    pub(super) fn after_dispatch(&mut self, now: u64, sent_before: u64) {
        if self.counters.entries_sent > sent_before
            || self.skip_next_replay
            || std::mem::take(&mut self.skip_backoff)
        {
            self.retry_backoff = 0;
        } else {
            self.back_off(now);
        }
    }
}
