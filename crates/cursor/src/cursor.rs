//! The managed cursor: mark-delete, acked set, batch bitsets, read position and every
//! operation that moves them.

use std::cell::Cell;
use std::collections::BTreeMap;

use tracing::{debug, warn};

use crate::ackset::AckSet;
use crate::batch::BatchAcks;
use crate::entry::{Backlog, Entry, Position};
use crate::error::CursorError;
use crate::ledger::Ledger;
use crate::store::{CursorStore, PersistedState};

/// Why the mark-delete position moved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MarkDeleteReason {
    /// Individual acks made a contiguous prefix acked.
    Ack,
    /// A cumulative ack ([`ManagedCursor::mark_delete`]).
    CumulativeAck,
    /// An admin skip of n entries.
    Skip,
    /// An admin clear-backlog.
    ClearBacklog,
    /// Message expiry (TTL).
    Expiry,
    /// Backlog-quota eviction (size, message count or age).
    BacklogQuota,
    /// A reset (seek) to a position, forwards or backwards.
    Reset,
}

/// One move of the mark-delete position, reported to the caller of the operation that made it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MarkDeleteMove {
    /// Mark-delete before the move.
    pub from: Position,
    /// Mark-delete after the move (lower than `from` only for a backwards [`MarkDeleteReason::Reset`]).
    pub to: Position,
    /// Why it moved.
    pub reason: MarkDeleteReason,
    /// Existing entries in `(from, to]` that were neither acked nor had all batch indexes acked:
    /// dropped by skip, clear-backlog, expiry, quota eviction or a forward reset. Always empty
    /// for `Ack` and `CumulativeAck`. Sorted.
    pub dropped: Vec<Position>,
}

/// What an individual or batch-index ack did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AckOutcome {
    /// False when the ack changed nothing: the position was at or below mark-delete, already
    /// acked, or (batch-index acks) every given index was already acked.
    pub newly_acked: bool,
    /// The mark-delete move the ack caused, if any (reason [`MarkDeleteReason::Ack`]).
    pub md_move: Option<MarkDeleteMove>,
}

/// Where a new subscription's cursor starts (Pulsar's `InitialPosition`), for
/// [`ManagedCursor::new_at`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InitialPosition {
    /// At the end: entries already in the ledger count as consumed, only later ones are
    /// delivered (Pulsar's default for a new subscription).
    Latest,
    /// At the beginning: every existing entry is backlog (what [`ManagedCursor::new`] does).
    Earliest,
}

/// How [`ManagedCursor::recover_with_outcome`] used the persisted state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecoveryOutcome {
    /// The persisted state fit the ledger and was restored as saved.
    Restored,
    /// The persisted mark-delete pointed at entries the ledger no longer has (trimmed, or its
    /// ledger lost) and was clamped; a `WARN` was logged and the cursor is dirty (persist it).
    Clamped {
        /// The mark-delete position found in the store.
        stored: Position,
        /// The mark-delete position the cursor uses.
        clamped_to: Position,
        /// Acked positions and batch bitsets dropped because they fell at or below the clamped
        /// mark-delete (or, for a lost tail, beyond the end).
        dropped_acks: u64,
    },
}

/// The result of [`ManagedCursor::replay`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplayResult {
    /// The requested entries that exist and are not acked, sorted by position.
    pub entries: Vec<Entry>,
    /// The requested positions that are acked (or at/below mark-delete): drop them from the
    /// replay set. Sorted.
    pub already_acked: Vec<Position>,
    /// The requested positions above mark-delete that do not exist in the ledger. Sorted.
    pub missing: Vec<Position>,
}

/// A subscription's position over a [`Ledger`]: what has been consumed and what to read next.
///
/// * **Mark-delete** (md): every entry at or below it is consumed. A fresh cursor's md is
///   [`Ledger::before_first`] (for an [`InMemoryLedger`](crate::InMemoryLedger) starting at
///   ledger 1, that is `0:18446744073709551615`, i.e. "just before `1:0`").
/// * **Acked set**: positions acked above md, in a compact [`AckSet`]; md advances over the
///   contiguous acked prefix automatically. A **batch bitset** tracks partially acked batches;
///   such an entry counts as acked only once all its indexes are.
/// * **Read position**: a lower bound for the next [`read`](ManagedCursor::read); always `> md`.
///
/// Every md move is returned as a [`MarkDeleteMove`] with its reason and the positions dropped
/// without an ack. The cursor is single-threaded (`&mut self`); it is `Send` but not `Sync` (a
/// cached total sits in a `Cell`), so share it behind a `Mutex`.
/// State changes stay in memory until [`persist`](ManagedCursor::persist) is called; the caller
/// chooses the cadence (after every change, or throttled as Pulsar does). Recovery restores the
/// last persisted state, so acks after the last persist are redelivered, never lost.
#[derive(Debug)]
pub struct ManagedCursor<S: CursorStore> {
    name: String,
    store: S,
    md: Position,
    read: Position,
    acked: AckSet,
    batches: BTreeMap<Position, BatchAcks>,
    /// Totals of the fully acked entries in `acked`: computed on the first `backlog` call, then
    /// maintained incrementally; `None` while nobody asked (keeps the ack path free of
    /// per-entry metadata lookups).
    acked_totals: Cell<Option<Backlog>>,
    /// Sum of acked indexes over `batches`.
    partial_msgs: u64,
    last_active: u64,
    dirty: bool,
}

/// Checks that the entry at `p` exists, with a typed error saying why not.
fn lookup<L: Ledger + ?Sized>(ledger: &L, p: Position) -> Result<(), CursorError> {
    if ledger.exists(p) {
        return Ok(());
    }
    Err(missing(ledger, p))
}

/// Why the entry at `p`, which does not exist, is missing.
fn missing<L: Ledger + ?Sized>(ledger: &L, p: Position) -> CursorError {
    match ledger.entry_count(p.ledger_id) {
        None => CursorError::UnknownLedger { position: p },
        Some(n) if p.entry_id >= n => CursorError::BeyondLedger {
            position: p,
            entries: n,
        },
        Some(_) => CursorError::Trimmed { position: p },
    }
}

impl<S: CursorStore> ManagedCursor<S> {
    /// A fresh cursor named `name` whose mark-delete is just before the ledger's first entry.
    /// Nothing is persisted until [`persist`](Self::persist).
    pub fn new<L: Ledger + ?Sized>(name: impl Into<String>, ledger: &L, store: S) -> Self {
        let md = ledger.before_first();
        let name = name.into();
        debug!(cursor = %name, md = %md, "cursor created");
        ManagedCursor {
            name,
            store,
            md,
            read: md.next(),
            acked: AckSet::new(),
            batches: BTreeMap::new(),
            acked_totals: Cell::new(None),
            partial_msgs: 0,
            last_active: 0,
            dirty: true,
        }
    }

    /// A fresh cursor for a new subscription starting at `initial`: [`InitialPosition::Earliest`]
    /// is [`new`](Self::new) (mark-delete just before the first entry, everything is backlog);
    /// [`InitialPosition::Latest`] puts mark-delete on the last existing entry (just before the
    /// first entry when there is none), so the backlog is empty and only entries appended later
    /// are read. Nothing is persisted until [`persist`](Self::persist).
    ///
    /// ```
    /// use cursor::{EntryMeta, InMemoryLedger, InitialPosition, Ledger, ManagedCursor, MemoryStore};
    /// let mut l = InMemoryLedger::new(10);
    /// let old = l.append(EntryMeta::simple(1, 10));
    /// let c = ManagedCursor::new_at("sub", &l, MemoryStore::new(), InitialPosition::Latest);
    /// assert_eq!((c.mark_delete_position(), c.backlog(&l).entries), (old, 0));
    /// ```
    pub fn new_at<L: Ledger + ?Sized>(
        name: impl Into<String>,
        ledger: &L,
        store: S,
        initial: InitialPosition,
    ) -> Self {
        let mut c = Self::new(name, ledger, store);
        if initial == InitialPosition::Latest {
            if let Some(last) = ledger.last_position() {
                c.md = c.md.max(last);
                c.read = c.md.next();
            }
        }
        debug!(cursor = %c.name, md = %c.md, initial = ?initial, "cursor opened");
        c
    }

    /// Restores the cursor from the last state in `store`. The read position is the first
    /// un-acked entry after mark-delete. A mark-delete whose entries the ledger no longer has is
    /// clamped (see [`recover_with_outcome`](Self::recover_with_outcome), which also says whether
    /// that happened).
    ///
    /// Errors: [`CursorError::NothingPersisted`] when the store is empty, [`CursorError::Store`]
    /// when it cannot be read (corruption names file and offset), [`CursorError::StateMismatch`]
    /// when the state does not fit a ledger that still exists (mark-delete past the end of its
    /// ledger, an acked position or batch bitset that is not in the ledger, a batch size that
    /// differs from the entry's).
    pub fn recover<L: Ledger + ?Sized>(ledger: &L, store: S) -> Result<Self, CursorError> {
        Self::recover_with_outcome(ledger, store).map(|(c, _)| c)
    }

    /// [`recover`](Self::recover), also saying whether the persisted mark-delete was used as is.
    ///
    /// When the persisted mark-delete points at entries the ledger no longer has, recovery
    /// clamps it instead of refusing, logs a `WARN` (fields `cursor`, `stored`, `clamped_to`,
    /// `dropped_acks`) and returns [`RecoveryOutcome::Clamped`]:
    ///
    /// * **trimmed** — mark-delete lies below the first existing entry and its ledger is gone,
    ///   or entries after it in its ledger are (the ledger was trimmed past it, e.g. past acks
    ///   that were not persisted before a crash): mark-delete becomes [`Ledger::before_first`],
    ///   so every existing entry is backlog. (A mark-delete on the last entry of a ledger that
    ///   still exists, below the first entry of a later one, is fine and kept as is);
    /// * **lost** — mark-delete's ledger is unknown to the ledger ([`Ledger::entry_count`] is
    ///   `None`) but later entries exist: mark-delete becomes the position just before the next
    ///   existing entry; when nothing exists after it (the lost ledger was the last), it becomes
    ///   the last entry (every existing entry is below the stored mark-delete, so consumed).
    ///
    /// Acks and batch bitsets at or below the clamped mark-delete, and (for a lost tail) above
    /// it, are dropped and counted in `dropped_acks`; the rest must fit the ledger as usual. A
    /// mark-delete past the end of a ledger that still exists stays a
    /// [`CursorError::StateMismatch`]: the state is from another log.
    pub fn recover_with_outcome<L: Ledger + ?Sized>(
        ledger: &L,
        mut store: S,
    ) -> Result<(Self, RecoveryOutcome), CursorError> {
        let mut st = store.load()?.ok_or(CursorError::NothingPersisted)?;
        let floor = ledger.before_first();
        let stored = st.mark_delete;
        let known = ledger.entry_count(stored.ledger_id);
        // Below the first entry is fine while nothing after mark-delete is missing (its ledger
        // ended there); gone entries after it, or a vanished ledger, need the clamp.
        let trimmed = stored < floor && known.is_none_or(|n| stored.entry_id.saturating_add(1) < n);
        let clamped_to = if trimmed {
            Some(floor)
        } else if stored > floor && known.is_none() {
            Some(match ledger.next_position(stored) {
                Some(n) => n.before(),
                None => ledger.last_position().unwrap_or(floor),
            })
        } else {
            None
        };
        let mut outcome = RecoveryOutcome::Restored;
        if let Some(to) = clamped_to {
            let (acks, batches) = (st.acked.len(), st.batch_acks.len() as u64);
            if to < stored {
                // A lost tail: everything above the stored mark-delete is gone too.
                st.acked.clear();
                st.batch_acks.clear();
            } else {
                st.acked.remove_through(to);
                st.batch_acks = st.batch_acks.split_off(&to.next());
            }
            let dropped_acks = acks - st.acked.len() + batches - st.batch_acks.len() as u64;
            warn!(cursor = %st.name, stored = %stored, clamped_to = %to, dropped_acks, "persisted mark-delete points at entries the ledger no longer has; clamped");
            st.mark_delete = to;
            outcome = RecoveryOutcome::Clamped {
                stored,
                clamped_to: to,
                dropped_acks,
            };
        }
        let end = ledger
            .last_position()
            .unwrap_or_else(|| ledger.before_first());
        if st.mark_delete > end.max(ledger.before_first()) {
            return Err(CursorError::StateMismatch {
                position: st.mark_delete,
                what: "mark-delete past the end of the ledger",
            });
        }
        for (a, b) in st.acked.ranges() {
            if lookup(ledger, a).is_err() || lookup(ledger, b).is_err() {
                return Err(CursorError::StateMismatch {
                    position: b,
                    what: "acked position not in the ledger",
                });
            }
        }
        let mut partial_msgs = 0;
        for (p, b) in &st.batch_acks {
            if lookup(ledger, *p).is_err() {
                return Err(CursorError::StateMismatch {
                    position: *p,
                    what: "batch bitset for a position not in the ledger",
                });
            }
            if ledger.stats(*p).map(|s| s.messages) != Some(u64::from(b.batch_size())) {
                return Err(CursorError::StateMismatch {
                    position: *p,
                    what: "batch bitset size differs from the entry's message count",
                });
            }
            partial_msgs += u64::from(b.acked_count());
        }
        let mut c = ManagedCursor {
            name: st.name,
            store,
            md: st.mark_delete,
            read: st.mark_delete.next(),
            acked: st.acked,
            batches: st.batch_acks,
            acked_totals: Cell::new(None),
            partial_msgs,
            last_active: st.last_active,
            dirty: false,
        };
        // A clamped state differs from the store's: persist it on the next call.
        c.dirty = outcome != RecoveryOutcome::Restored;
        c.rewind(ledger);
        debug!(cursor = %c.name, md = %c.md, read = %c.read, holes = c.acked.len(), "cursor recovered");
        Ok((c, outcome))
    }

    /// The cursor's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The mark-delete position: everything at or below it is consumed.
    pub fn mark_delete_position(&self) -> Position {
        self.md
    }

    /// The raw read position: a lower bound — the next [`read`](Self::read) returns entries at
    /// or after it. A read leaves it on the first entry the next read returns (past acked
    /// entries, into the next ledger) or right after the last entry, and a reset to the position
    /// right after a ledger's last entry puts it on the next ledger's first entry, as Pulsar
    /// reports them. It is not normalised after that: it may name an entry acked since (acks do
    /// not move it), or a position past a ledger's end after entries were appended. For stats
    /// and admin output use [`next_read_position`](Self::next_read_position).
    pub fn read_position(&self) -> Position {
        self.read
    }

    /// The read position normalised against `ledger`: the first existing entry at or after
    /// [`read_position`](Self::read_position) that is not fully acked (a partially acked batch
    /// counts as not acked: a read returns it) — the entry the next [`read`](Self::read) returns
    /// first. When there is none, the position right after the last entry (where the next
    /// append to the current ledger lands), and never at or below mark-delete. What a broker
    /// shows as a subscription's read position. Costs one walk over the acked ranges at the read
    /// position (O(1) lookups per range for an [`InMemoryLedger`](crate::InMemoryLedger)).
    ///
    /// ```
    /// use cursor::{EntryMeta, InMemoryLedger, Ledger, ManagedCursor, MemoryStore, Position};
    /// let mut l = InMemoryLedger::new(2);
    /// let ps: Vec<_> = (0..3).map(|i| l.append(EntryMeta::simple(i, 1))).collect();
    /// let mut c = ManagedCursor::new("sub", &l, MemoryStore::new());
    /// c.read(&l, 2); // 1:0 and 1:1
    /// assert_eq!(c.read_position(), Position::new(2, 0)); // a read leaves it on the next entry
    /// c.seek(&l, Position::new(1, 2)); // raw: past ledger 1's end
    /// assert_eq!(c.next_read_position(&l), Position::new(2, 0));
    /// c.ack(&l, ps[2]).unwrap();
    /// assert_eq!(c.next_read_position(&l), Position::new(2, 1)); // 2:0 is acked: the end
    /// ```
    pub fn next_read_position<L: Ledger + ?Sized>(&self, ledger: &L) -> Position {
        // The end first, as in `read`: an entry appended between the two look-ups is not
        // passed.
        let end = ledger.last_position();
        match self.first_unacked_after(ledger, self.read.before()) {
            Some(p) => p,
            None => end
                .map_or(self.md.next(), Position::next)
                .max(self.md.next()),
        }
    }

    /// Whether `p` counts as acked: at or below mark-delete, individually acked, or (for a
    /// batch) all indexes acked.
    pub fn is_acked(&self, p: Position) -> bool {
        p <= self.md || self.acked.contains(p)
    }

    /// The acked indexes of a partially acked batch entry; `None` when `p` has no partial acks.
    pub fn batch_acked_indexes(&self, p: Position) -> Option<Vec<u32>> {
        self.batches.get(&p).map(BatchAcks::acked_indexes)
    }

    /// The acked positions above mark-delete.
    pub fn acked_set(&self) -> &AckSet {
        &self.acked
    }

    /// Whether state changed since the last successful [`persist`](Self::persist).
    pub fn is_dirty(&self) -> bool {
        self.dirty
    }

    /// Records the caller's notion of "now" as the last-active time (milliseconds).
    pub fn set_last_active(&mut self, now_ms: u64) {
        if self.last_active != now_ms {
            self.last_active = now_ms;
            self.dirty = true;
        }
    }

    /// The last-active time set by the caller.
    pub fn last_active(&self) -> u64 {
        self.last_active
    }

    /// The store, for inspection.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The persisted form of the current state.
    pub fn snapshot(&self) -> PersistedState {
        PersistedState {
            name: self.name.clone(),
            mark_delete: self.md,
            acked: self.acked.clone(),
            batch_acks: self.batches.clone(),
            last_active: self.last_active,
        }
    }

    /// Saves the current state to the store. On error the state stays dirty and in memory; the
    /// store still holds the previous state (for [`FileStore`](crate::FileStore)).
    pub fn persist(&mut self) -> Result<(), CursorError> {
        let st = self.snapshot();
        self.store.save(&st)?;
        self.dirty = false;
        debug!(cursor = %self.name, md = %self.md, ranges = self.acked.containers(), "cursor persisted");
        Ok(())
    }
}

mod ack;
mod moves;
mod read;
#[cfg(test)]
mod tests;
