//! Reads that complete later: in one seed in four of the scenarios without expect lines, and in
//! the store-fault scenarios, the broker's store is cold (an entry is in memory only among the
//! last 32 a read fetched, so most deliveries ask for a read) and its read requests are held,
//! each completing 1 to 20 ms after it was asked, in the order they come due (not the order
//! asked: the consumers' reads overtake each other, as a store on other machines answers).
//! A read that completes while the store's reads fail fails. A broker crash forgets them.

use super::Run;

/// How many entries the cold store keeps in memory after reading them.
const WARM_ENTRIES: usize = 32;

impl Run {
    /// Sets the broker's store as this run wants it (after a start or a restart).
    pub(super) fn apply_read_mode(&mut self) {
        self.read_due.clear();
        let faults = self.b.store_faults();
        faults.cold_reads(self.hold_reads.then_some(WARM_ENTRIES));
        faults.hold_reads(self.hold_reads);
    }

    /// Gives each newly held read request its completion time.
    pub(super) fn note_reads(&mut self) {
        let held = self.b.store_faults().held_reads();
        while self.read_due.len() < held {
            let due = self.now + self.rng_reads.range(1, 20);
            self.read_due.push(due);
        }
    }

    /// Completes the held reads that are due, the earliest due first (the broker is stepped
    /// by the caller afterwards: a completion wakes the consumer's dispatcher).
    pub(super) fn due_reads(&mut self) {
        self.note_reads();
        loop {
            let next = (self.read_due.iter().enumerate())
                .filter(|(_, &due)| due <= self.now)
                .min_by_key(|(i, &due)| (due, *i))
                .map(|(i, _)| i);
            let Some(i) = next else {
                return;
            };
            self.read_due.remove(i);
            if !self.b.store_faults().complete_read(i) {
                let d = format!("held read {i} was not there to complete");
                return self.simple(crate::sim::check::ViolationKind::Model, d);
            }
        }
    }

    /// When the next held read is due.
    pub(super) fn next_read(&self) -> Option<u64> {
        self.read_due.iter().min().copied()
    }
}
