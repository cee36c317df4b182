//! Reads that complete later than they are issued ([`RuntimeOptions::read_delay`]): the
//! runtime's loop keeps each read the core issued with the time it is due, and completes the
//! due ones, in issue order, through the [`Driver`].

use cursor::{CursorStore, Ledger, Position};

use super::{CursorCell, Dispatcher, Driver, StdArc, StdMutex};
use crate::rng::SplitMix64;

/// Storage reads that complete later than they are issued (see
/// [`RuntimeOptions::read_delay`](super::RuntimeOptions::read_delay)).
///
/// ```
/// use dispatcher::{ReadDelay, RuntimeOptions};
/// let slow = RuntimeOptions {
///     read_delay: Some(ReadDelay { min_ms: 1, max_ms: 30, seed: 7 }),
///     ..RuntimeOptions::default()
/// };
/// assert!(slow.read_delay.is_some());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadDelay {
    /// The shortest delay, ms.
    pub min_ms: u64,
    /// The longest delay, ms (inclusive; below `min_ms` counts as `min_ms`).
    pub max_ms: u64,
    /// The seed of the delays' random sequence (the same seed, the same delays).
    pub seed: u64,
}

/// One read the core issued and the driver handed back.
#[derive(Debug)]
enum Read {
    /// A normal read of at most this many entries.
    Normal(usize),
    /// A replay read of these positions.
    Replay(Vec<Position>),
}

/// The reads in flight, each with the time it completes.
pub(super) struct InFlight {
    delay: ReadDelay,
    rng: SplitMix64,
    /// In issue order; a read is never completed before one issued earlier.
    reads: Vec<(u64, Read)>,
}

impl InFlight {
    pub(super) fn new(delay: ReadDelay) -> InFlight {
        InFlight {
            delay,
            rng: SplitMix64::new(delay.seed),
            reads: Vec::new(),
        }
    }

    /// Keeps a normal read issued at `now`.
    pub(super) fn read(&mut self, now: u64, max_entries: usize) {
        self.push(now, Read::Normal(max_entries));
    }

    /// Keeps a replay read issued at `now`.
    pub(super) fn replay(&mut self, now: u64, positions: Vec<Position>) {
        self.push(now, Read::Replay(positions));
    }

    fn push(&mut self, now: u64, read: Read) {
        let (lo, hi) = (self.delay.min_ms, self.delay.max_ms.max(self.delay.min_ms));
        let delay = lo + self.rng.next() % (hi - lo + 1);
        // Never before a read issued earlier: storage answers in order.
        let after = self.reads.last().map_or(0, |r| r.0);
        self.reads
            .push((now.saturating_add(delay).max(after), read));
    }

    /// When the first read in flight completes.
    pub(super) fn next_due(&self) -> Option<u64> {
        self.reads.first().map(|r| r.0)
    }

    /// Completes, in issue order, every read due at `now`.
    pub(super) fn complete_due<S: CursorStore, L: Ledger>(
        &mut self,
        now: u64,
        driver: &mut Driver,
        core: &mut Dispatcher,
        cell: &StdArc<StdMutex<CursorCell<S, L>>>,
    ) {
        let due = self.reads.iter().take_while(|r| r.0 <= now).count();
        for (_, read) in self.reads.drain(..due) {
            match read {
                Read::Normal(n) => driver.complete_read(now, core, cell, n),
                Read::Replay(ps) => driver.complete_replay(now, core, cell, ps),
            };
        }
    }
}
