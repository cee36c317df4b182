//! Mark-delete moves without acks (skip, clear-backlog, expiry, eviction), resets, seeks and
//! rewinds, and the move every one of them ends in.
use tracing::{debug, warn};

use super::*;

impl<S: CursorStore> ManagedCursor<S> {
    /// Skips the next `n` un-acked entries after mark-delete (acked ones are not counted), as an
    /// admin skip does. Skipping more than there are clears the backlog. `None` when nothing
    /// moved.
    pub fn skip<L: Ledger + ?Sized>(&mut self, ledger: &L, n: u64) -> Option<MarkDeleteMove> {
        let mut dropped = Vec::new();
        let mut p = self.md;
        while (dropped.len() as u64) < n {
            match self.first_unacked_after(ledger, p) {
                Some(q) => {
                    dropped.push(q);
                    p = q;
                }
                None => break,
            }
        }
        let target = *dropped.last()?;
        Some(self.move_to(ledger, target, MarkDeleteReason::Skip, dropped))
    }

    /// Moves mark-delete to the last entry, dropping every un-acked entry. `None` when the
    /// backlog is already empty.
    pub fn clear_backlog<L: Ledger + ?Sized>(&mut self, ledger: &L) -> Option<MarkDeleteMove> {
        let last = ledger.last_position()?;
        if last <= self.md {
            return None;
        }
        let dropped = self.unacked_in(ledger, last);
        Some(self.move_to(ledger, last, MarkDeleteReason::ClearBacklog, dropped))
    }

    /// Expires messages: moves mark-delete over the entries right after it whose publish time is
    /// `< before_publish_time`, stopping at the first entry that is not (acked entries included
    /// in the scan). `None` when the first entry after md is not expired.
    pub fn expire<L: Ledger + ?Sized>(
        &mut self,
        ledger: &L,
        before_publish_time: u64,
    ) -> Option<MarkDeleteMove> {
        self.expire_with(ledger, before_publish_time, MarkDeleteReason::Expiry)
    }

    pub(super) fn expire_with<L: Ledger + ?Sized>(
        &mut self,
        ledger: &L,
        before: u64,
        reason: MarkDeleteReason,
    ) -> Option<MarkDeleteMove> {
        let mut target = None;
        let mut dropped = Vec::new();
        let mut p = ledger.next_position(self.md);
        while let Some(q) = p {
            let Some(t) = ledger.publish_time(q) else {
                break;
            };
            if t >= before {
                break;
            }
            if !self.acked.contains(q) {
                dropped.push(q);
            }
            target = Some(q);
            p = ledger.next_position(q);
        }
        let target = target?;
        Some(self.move_to(ledger, target, reason, dropped))
    }

    /// Backlog-quota eviction by size: drops the oldest un-acked entries until the backlog is at
    /// most `max_bytes` (pass 90% of the quota to mimic Pulsar). Reason `BacklogQuota`.
    pub fn evict_to_size<L: Ledger + ?Sized>(
        &mut self,
        ledger: &L,
        max_bytes: u64,
    ) -> Option<MarkDeleteMove> {
        let mut over = self.backlog(ledger).bytes.saturating_sub(max_bytes);
        self.evict_while(ledger, |m, _| {
            let take = over > 0;
            over = over.saturating_sub(m.bytes);
            take
        })
    }

    /// Backlog-quota eviction by message count: drops the oldest un-acked entries until the
    /// backlog holds at most `max_messages` messages. Reason `BacklogQuota`.
    pub fn evict_to_count<L: Ledger + ?Sized>(
        &mut self,
        ledger: &L,
        max_messages: u64,
    ) -> Option<MarkDeleteMove> {
        let mut over = self.backlog(ledger).messages.saturating_sub(max_messages);
        self.evict_while(ledger, |m, partial| {
            let take = over > 0;
            over = over.saturating_sub(m.messages - partial);
            take
        })
    }

    /// Backlog-quota eviction by age: drops the entries right after mark-delete published before
    /// `now_ms - max_age_ms` (as [`expire`](Self::expire), with reason `BacklogQuota`).
    pub fn evict_older_than<L: Ledger + ?Sized>(
        &mut self,
        ledger: &L,
        now_ms: u64,
        max_age_ms: u64,
    ) -> Option<MarkDeleteMove> {
        let cutoff = now_ms.checked_sub(max_age_ms)?;
        self.expire_with(ledger, cutoff, MarkDeleteReason::BacklogQuota)
    }

    /// Drops un-acked entries from the front while `take(meta, acked_batch_indexes)` says so.
    pub(super) fn evict_while<L: Ledger + ?Sized>(
        &mut self,
        ledger: &L,
        mut take: impl FnMut(&Backlog, u64) -> bool,
    ) -> Option<MarkDeleteMove> {
        let mut dropped = Vec::new();
        let mut p = self.md;
        while let Some(q) = self.first_unacked_after(ledger, p) {
            let Some(m) = ledger.stats(q) else { break };
            let partial = self
                .batches
                .get(&q)
                .map_or(0, |b| u64::from(b.acked_count()));
            if !take(&m, partial) {
                break;
            }
            dropped.push(q);
            p = q;
        }
        let target = *dropped.last()?;
        Some(self.move_to(ledger, target, MarkDeleteReason::BacklogQuota, dropped))
    }

    /// Resets (seeks) to `p`: mark-delete becomes the position just before `p`, the read
    /// position becomes `p`, and every individual and batch ack is forgotten (acked entries at
    /// or after `p` will be read again). A forward reset reports the un-acked entries it passes
    /// as dropped.
    ///
    /// `p` may be an entry, or the position right after the last entry of its ledger. Out of the
    /// log's range it is clamped, as Pulsar does:
    ///
    /// * **before the first existing entry** (a trimmed position, an earlier ledger, `0:0`):
    ///   the reset goes to the first entry — mark-delete becomes [`Ledger::before_first`] and
    ///   every entry is backlog again;
    /// * **past the end** (after the position right after the last entry): the reset goes to the
    ///   end — mark-delete becomes the last entry, the read position the one right after it,
    ///   and the backlog is empty;
    /// * with no entry at all, both cases leave mark-delete at [`Ledger::before_first`].
    ///
    /// The move's `to` is the mark-delete actually set, and [`read_position`](Self::read_position)
    /// the read position actually set. Errors (nothing changes) only for a position inside the
    /// log that cannot exist: [`CursorError::BeyondLedger`] past the end of a ledger that is not
    /// the last one, [`CursorError::UnknownLedger`] for a ledger id missing between existing ones.
    pub fn reset<L: Ledger + ?Sized>(
        &mut self,
        ledger: &L,
        p: Position,
    ) -> Result<MarkDeleteMove, CursorError> {
        let requested = p;
        let p = match (ledger.first_position(), ledger.last_position()) {
            (Some(first), Some(last)) => {
                if p < first {
                    first
                } else if p > last.next() {
                    last.next()
                } else {
                    if !ledger.exists(p) && p != last.next() {
                        match ledger.entry_count(p.ledger_id) {
                            Some(n) if p.entry_id <= n => {}
                            Some(n) => {
                                return Err(CursorError::BeyondLedger {
                                    position: p,
                                    entries: n,
                                })
                            }
                            None => return Err(CursorError::UnknownLedger { position: p }),
                        }
                    }
                    p
                }
            }
            _ => ledger.before_first().next(),
        };
        if p != requested {
            debug!(cursor = %self.name, requested = %requested, clamped_to = %p, "reset outside the log clamped");
        }
        let from = self.md;
        let to = p.before();
        let dropped = if to > from {
            self.unacked_in(ledger, to)
        } else {
            Vec::new()
        };
        self.acked.clear();
        self.batches.clear();
        self.acked_totals.set(None);
        self.partial_msgs = 0;
        self.md = to;
        // The position right after a ledger's last entry is the next ledger's first entry, as
        // Pulsar resets it (the end of the log stays the end).
        self.read = ledger.next_position(to).unwrap_or(p);
        self.dirty = true;
        let mv = MarkDeleteMove {
            from,
            to,
            reason: MarkDeleteReason::Reset,
            dropped,
        };
        debug!(cursor = %self.name, from = %from, to = %to, reason = ?mv.reason, dropped = mv.dropped.len(), "mark-delete moved");
        Ok(mv)
    }

    /// Resets (seeks) to the first entry published at or after `t` (milliseconds, compared with
    /// [`EntryMeta::publish_time`](crate::EntryMeta::publish_time)), found with [`Ledger::find_by_publish_time`] (binary search
    /// on an [`InMemoryLedger`](crate::InMemoryLedger), assuming non-decreasing publish times);
    /// when every entry was published before `t`, to the end (empty backlog). Otherwise exactly
    /// [`reset`](Self::reset): acks are forgotten, a forward move reports what it drops. What a
    /// broker's reset-cursor by timestamp does.
    pub fn reset_to_publish_time<L: Ledger + ?Sized>(
        &mut self,
        ledger: &L,
        t: u64,
    ) -> Result<MarkDeleteMove, CursorError> {
        let target = ledger.find_by_publish_time(t).unwrap_or_else(|| {
            ledger
                .last_position()
                .map_or_else(|| ledger.before_first().next(), Position::next)
        });
        debug!(cursor = %self.name, publish_time = t, target = %target, "reset by publish time");
        self.reset(ledger, target)
    }

    /// Moves only the read position to `p` (Pulsar's cursor `seek`): mark-delete, acks and the
    /// backlog stay as they are, so acked entries are still skipped by the next
    /// [`read`](Self::read). `p` is clamped to just after mark-delete when at or below it, and
    /// to the position right after the last entry when past it. Returns the read position set.
    /// For a dispatcher that wants to re-read from a position (SEEK without dropping acks).
    pub fn seek<L: Ledger + ?Sized>(&mut self, ledger: &L, p: Position) -> Position {
        let end = ledger
            .last_position()
            .map_or(self.md.next(), Position::next)
            .max(self.md.next());
        self.read = p.clamp(self.md.next(), end);
        debug!(cursor = %self.name, requested = %p, read = %self.read, "read position moved");
        self.read
    }

    /// Moves the read position back to the first un-acked entry after mark-delete (or just
    /// after md when there is none), so unacked entries are read again.
    pub fn rewind<L: Ledger + ?Sized>(&mut self, ledger: &L) {
        self.read = self
            .first_unacked_after(ledger, self.md)
            .unwrap_or_else(|| self.md.next());
        debug!(cursor = %self.name, read = %self.read, "rewound");
    }

    /// Moves md forward to `target` (> md), forgetting acks at or below it, then over the acked
    /// entries that follow; returns the whole move.
    pub(super) fn move_to<L: Ledger + ?Sized>(
        &mut self,
        ledger: &L,
        target: Position,
        reason: MarkDeleteReason,
        dropped: Vec<Position>,
    ) -> MarkDeleteMove {
        let from = self.md;
        if let Some(mut t) = self.acked_totals.get() {
            for (a, b) in self.acked.ranges_through(target) {
                t.sub(ledger.totals_in(a.before(), b));
            }
            self.acked_totals.set(Some(t));
        }
        self.acked.remove_through(target);
        let rest = self.batches.split_off(&target.next());
        for b in std::mem::replace(&mut self.batches, rest).values() {
            self.partial_msgs -= u64::from(b.acked_count());
        }
        self.md = target;
        self.absorb_acked(ledger);
        self.finish_move(from, reason, dropped)
    }

    /// Advances md over the acked entries right after it.
    pub(super) fn absorb_acked<L: Ledger + ?Sized>(&mut self, ledger: &L) {
        while let Some(n) = ledger.next_position(self.md) {
            let Some(end) = self.acked.run_end(n) else {
                break;
            };
            if let Some(mut t) = self.acked_totals.get() {
                t.sub(ledger.totals_in(self.md, end));
                self.acked_totals.set(Some(t));
            }
            self.acked.remove_through(end);
            self.md = end;
        }
    }

    pub(super) fn finish_move(
        &mut self,
        from: Position,
        reason: MarkDeleteReason,
        dropped: Vec<Position>,
    ) -> MarkDeleteMove {
        if self.read <= self.md {
            self.read = self.md.next();
        }
        self.dirty = true;
        debug!(cursor = %self.name, from = %from, to = %self.md, reason = ?reason, dropped = dropped.len(), "mark-delete moved");
        if !dropped.is_empty() && reason != MarkDeleteReason::Reset {
            warn_dropped(&self.name, reason, &dropped);
        }
        MarkDeleteMove {
            from,
            to: self.md,
            reason,
            dropped,
        }
    }
}

fn warn_dropped(name: &str, reason: MarkDeleteReason, dropped: &[Position]) {
    if let (Some(first), Some(last)) = (dropped.first(), dropped.last()) {
        warn!(cursor = %name, reason = ?reason, count = dropped.len(), first = %first, last = %last, "entries dropped without an ack");
    }
}
