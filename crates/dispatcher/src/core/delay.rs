//! Delayed delivery in the core: entries read before their deliver-at time wait in the
//! [`DelayedTracker`](crate::DelayedTracker); when due they enter replay.
//!
//! What Pulsar 4.x does, on Shared and on Key_Shared alike (its tracker lives in the
//! multiple-consumers dispatcher that Key_Shared extends): a delayed entry is filtered out of
//! the read before routing, so it is neither sent nor pending and holds no key; later entries of
//! its key are dispatched past it. When due it is replayed without a recorded hash, and on
//! Key_Shared the routing decides it then: it goes to its key's current owner, behind the
//! key's draining and nack holds like any replayed entry.

use super::*;

impl Dispatcher {
    /// Takes the entries of a read that must wait for their deliver-at time out of `entries`
    /// (and, for a replay read, out of replay); returns how many it took.
    pub(super) fn hold_delayed(
        &mut self,
        now: u64,
        entries: &mut Vec<Entry>,
        from_replay: bool,
    ) -> usize {
        // A read without delayed entries (the common case) is only looked at, not retained:
        // measured cheaper on the Shared cycle (W9) than a retain that keeps everything.
        if !self.delayed.config().enabled || entries.iter().all(|e| e.meta.deliver_at.is_none()) {
            return 0;
        }
        let before = entries.len();
        let delayed = &mut self.delayed;
        let replay = &mut self.replay;
        entries.retain(|e| {
            let Some(at) = e.meta.deliver_at else {
                return true;
            };
            if !delayed.track(now, e.position, at) {
                return true;
            }
            if from_replay {
                replay.remove(e.position);
            }
            trace!(
                ledger = e.position.ledger_id,
                entry = e.position.entry_id,
                deliver_at = at,
                "delayed"
            );
            false
        });
        let held = before - entries.len();
        self.counters.delayed_held += held as u64;
        held
    }

    /// Moves the delayed entries due at `now` into replay (without a hash: the replay read
    /// routes them); returns how many.
    pub(super) fn release_delayed(&mut self, now: u64) -> usize {
        if self.delayed.next_due().is_none_or(|t| t > now) {
            return 0;
        }
        let mut due = Vec::new();
        self.delayed.pop_due(now, &mut due);
        let mut n = 0;
        for p in due {
            if self.mark_delete.is_none_or(|md| p > md) && self.replay.add(p, 0, None) {
                n += 1;
            }
        }
        if n > 0 {
            debug!(count = n, "delayed entries due: to replay");
            self.read.unsettle();
        }
        n
    }

    /// Delayed entries waiting now.
    pub fn delayed_len(&self) -> usize {
        self.delayed.len()
    }
}
