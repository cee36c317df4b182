//! Reads, replays, backlog totals and the invariant check.

use super::*;

impl<S: CursorStore> ManagedCursor<S> {
    /// Reads up to `n` entries from the read position, skipping acked ones (partially acked
    /// batches are returned; see [`batch_acked_indexes`](Self::batch_acked_indexes)), and
    /// advances the read position past them.
    pub fn read<L: Ledger + ?Sized>(&mut self, ledger: &L, n: usize) -> Vec<Entry> {
        let Some(start) = self.first_unacked_after(ledger, self.read.before()) else {
            return Vec::new();
        };
        let out = if self.acked.last().is_none_or(|l| l < start) {
            // The usual case: nothing is acked at or after `start` (acks are of entries already
            // read), so the read is the ledger's next `n` entries.
            ledger.read_range(start, n)
        } else {
            // Sized up front (capped, so a huge `n` does not reserve memory it may never fill).
            let mut out = Vec::with_capacity(n.min(1024));
            let mut next = Some(start);
            while out.len() < n {
                let Some(p) = next else {
                    break;
                };
                // An entry that exists but cannot be read (its metadata did not load, see
                // `MetaSource`) ends the read before it, as `read_range` does: the next read
                // starts there again instead of passing it.
                let Some(e) = ledger.get(p) else {
                    break;
                };
                out.push(e);
                next = self.first_unacked_after(ledger, p);
            }
            out
        };
        if let Some(last) = out.last() {
            // The entry the next read returns first, or the position right after the last
            // entry: acked entries right after the read are passed too, as Pulsar's read
            // position never names an acked entry. The end is looked up first: with a ledger
            // that others append to meanwhile (`SharedLedger`), an entry appended between the
            // two look-ups is then read next instead of being passed.
            let end = ledger.last_position();
            let after = last.position.next();
            self.read = self
                .first_unacked_after(ledger, last.position)
                .unwrap_or_else(|| end.map_or(after, Position::next).max(after));
        }
        out
    }

    /// Reads specific positions (a replay) without moving the read position. Positions at or
    /// below md or acked go to `already_acked`; positions that do not exist go to `missing`.
    pub fn replay<L: Ledger + ?Sized>(&self, ledger: &L, positions: &[Position]) -> ReplayResult {
        let mut ps = positions.to_vec();
        ps.sort_unstable();
        ps.dedup();
        let mut r = ReplayResult::default();
        for p in ps {
            if self.is_acked(p) {
                r.already_acked.push(p);
            } else if let Some(e) = ledger.get(p) {
                r.entries.push(e);
            } else {
                r.missing.push(p);
            }
        }
        r
    }

    /// Whether a [`read`](Self::read) would return something now.
    pub fn has_more_entries<L: Ledger + ?Sized>(&self, ledger: &L) -> bool {
        self.first_unacked_after(ledger, self.read.before())
            .is_some()
    }

    /// Entries, messages and bytes between mark-delete and the last entry that are not acked
    /// (acked batch indexes are subtracted from messages). O(ledgers) for an
    /// [`InMemoryLedger`](crate::InMemoryLedger).
    pub fn backlog<L: Ledger + ?Sized>(&self, ledger: &L) -> Backlog {
        let Some(last) = ledger.last_position() else {
            return Backlog::default();
        };
        let mut t = ledger.totals_in(self.md, last);
        t.sub(self.acked_totals(ledger));
        t.messages = t.messages.saturating_sub(self.partial_msgs);
        t
    }

    /// Checks the internal invariants; `Err` describes the first one broken. Used by tests and
    /// simulations after every step (O(acked ranges + batches)).
    ///
    /// * the read position is above mark-delete;
    /// * every acked position and batch bitset is above md and exists in the ledger;
    /// * the entry right after md is not acked (md always covers the contiguous acked prefix);
    /// * no batch bitset is complete or duplicates an acked position;
    /// * the cached acked totals match the ledger.
    pub fn check_invariants<L: Ledger + ?Sized>(&self, ledger: &L) -> Result<(), String> {
        if self.read <= self.md {
            return Err(format!("read {} not above md {}", self.read, self.md));
        }
        if let Some(f) = self.acked.first() {
            if f <= self.md {
                return Err(format!("acked {f} at or below md {}", self.md));
            }
        }
        if let Some(n) = ledger.next_position(self.md) {
            if self.acked.contains(n) {
                return Err(format!("entry {n} right after md {} is acked", self.md));
            }
        }
        let mut totals = Backlog::default();
        for (a, b) in self.acked.ranges() {
            if !ledger.exists(a) || !ledger.exists(b) {
                return Err(format!("acked range {a}..{b} not in the ledger"));
            }
            totals.add(ledger.totals_in(a.before(), b));
        }
        if let Some(cached) = self.acked_totals.get() {
            if totals != cached {
                return Err(format!("acked totals {cached:?} != recomputed {totals:?}"));
            }
        }
        let mut partial = 0;
        for (p, b) in &self.batches {
            if *p <= self.md || self.acked.contains(*p) || b.is_complete() || b.acked_count() == 0 {
                return Err(format!("bad batch bitset at {p}"));
            }
            partial += u64::from(b.acked_count());
        }
        if partial != self.partial_msgs {
            return Err(format!("partial count {} != {partial}", self.partial_msgs));
        }
        Ok(())
    }

    /// Totals of the acked set, computed once from its ranges and cached.
    pub(super) fn acked_totals<L: Ledger + ?Sized>(&self, ledger: &L) -> Backlog {
        if let Some(t) = self.acked_totals.get() {
            return t;
        }
        let mut t = Backlog::default();
        for (a, b) in self.acked.ranges() {
            t.add(ledger.totals_in(a.before(), b));
        }
        self.acked_totals.set(Some(t));
        t
    }

    /// The first existing, not fully acked entry strictly after `p` (and after md).
    pub(super) fn first_unacked_after<L: Ledger + ?Sized>(
        &self,
        ledger: &L,
        p: Position,
    ) -> Option<Position> {
        let mut q = ledger.next_position(p.max(self.md))?;
        loop {
            match self.acked.run_end(q) {
                None => return Some(q),
                Some(end) => q = ledger.next_position(end)?,
            }
        }
    }

    /// The un-acked existing entries in `(md, through]`.
    pub(super) fn unacked_in<L: Ledger + ?Sized>(
        &self,
        ledger: &L,
        through: Position,
    ) -> Vec<Position> {
        let mut out = Vec::new();
        let mut p = self.md;
        while let Some(q) = self.first_unacked_after(ledger, p) {
            if q > through {
                break;
            }
            out.push(q);
            p = q;
        }
        out
    }
}
