//! The mark-delete hook.

use super::*;

impl Dispatcher {
    /// The cursor's mark-delete moved (the driver ran skip, clear-backlog, expiry, quota
    /// eviction or reset on the cursor, or an ack moved it). The hook per reason:
    ///
    /// * every reason: replay entries at or below the new mark-delete are dropped;
    /// * Skip / ClearBacklog / Expiry / BacklogQuota on **Shared**: pending acks at or below it
    ///   are removed (cause: mark-delete advanced) and unacked counts debited;
    /// * the same on **Key_Shared**: pending acks are KEPT, so a draining hash stays blocked
    ///   until its old owner acks, nacks, asks for redelivery or disconnects (the fix for
    ///   Pulsar's mark-delete cleanup, which ends draining early; [`DispatcherConfig::legacy_mark_delete_cleanup`] restores the bug);
    ///   a read is scheduled after the unblocking interval;
    /// * Ack / CumulativeAck: nothing more (acks clear their own pending entries);
    /// * Reset: the caller must disconnect every consumer before resetting the cursor (as
    ///   Pulsar does); the replay set is cleared.
    pub fn handle_mark_delete_moved(&mut self, now: u64, mv: &MarkDeleteMove) {
        let md = mv.to;
        if mv.reason == MarkDeleteReason::Reset {
            self.replay.clear();
            // The read position moved: a read tracks the delayed entries after it again.
            self.delayed.clear();
            self.timers.nack = None;
            self.redelivery_counts.clear();
            self.mark_delete = Some(md);
            self.read.state.set_at_end(false);
            self.input_arrived();
            self.read_more(now);
            return;
        }
        self.mark_delete = Some(self.mark_delete.map_or(md, |m| m.max(md)));
        let (dropped, ended) = self.replay.remove_all_up_to(md);
        for (p, hash) in &ended {
            debug!(ledger = p.ledger_id, entry = p.entry_id, hash, reason = ?mv.reason, "nack hold ended: the nacked entry was dropped by a mark-delete move");
        }
        self.counters.holds_ended_by_mark_delete += ended.len() as u64;
        if !ended.is_empty() {
            self.timers.nack = self.replay.next_due(now);
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
            let forgotten = self.delayed.remove_up_to(md);
            if forgotten > 0 {
                debug!(forgotten, "delayed entries acked by the mark-delete move");
            }
            let clean = !self.mode.is_key_shared() || self.cfg.legacy_mark_delete_cleanup;
            if clean {
                let mut removed_total = 0usize;
                for c in &self.consumers {
                    let mut debit = 0i64;
                    removed_total += c.shared.pending.remove_all_up_to(
                        pending_key(md),
                        RemovalCause::MarkDeleteAdvanced,
                        |_, ack| debit += i64::from(ack.remaining),
                    );
                    c.shared.debit(&self.shared, debit);
                }
                if self.mode.is_key_shared() && removed_total > 0 {
                    warn!(removed = removed_total, "legacy mark-delete cleanup removed Key_Shared pending acks (Pulsar's behaviour)");
                }
                self.recheck_unacked_blocks();
            }
            if self.mode.is_key_shared() && self.cfg.unblocking_interval > 0 {
                if self.timers.unblock.is_none() {
                    self.timers.unblock = Some(now.saturating_add(self.cfg.unblocking_interval));
                }
                self.arm_timer_command();
                return;
            }
        }
        self.input_arrived();
        self.read_more(now);
    }
}
