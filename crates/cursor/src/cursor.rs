//! The managed cursor: mark-delete, acked set, batch bitsets, read position and every
//! operation that moves them.

use std::cell::Cell;
use std::collections::BTreeMap;

use tracing::{debug, trace, warn};

use crate::ackset::AckSet;
use crate::batch::BatchAcks;
use crate::entry::{Backlog, Entry, EntryMeta, Position};
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
            if ledger.meta(*p).map(EntryMeta::messages) != Some(b.batch_size()) {
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
        match self.first_unacked_after(ledger, self.read.before()) {
            Some(p) => p,
            None => ledger
                .last_position()
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

    /// Individually acks `p`. Acking a position at or below mark-delete, or one already acked,
    /// succeeds with `newly_acked == false`. A full ack of a partially batch-acked entry
    /// completes it. When `p` closes the gap after mark-delete, md moves over the contiguous
    /// acked prefix and the move (reason `Ack`) is returned.
    pub fn ack<L: Ledger + ?Sized>(
        &mut self,
        ledger: &L,
        p: Position,
    ) -> Result<AckOutcome, CursorError> {
        if p <= self.md {
            trace!(cursor = %self.name, position = %p, "ack at or below mark-delete ignored");
            return Ok(AckOutcome {
                newly_acked: false,
                md_move: None,
            });
        }
        // Whether `p` is md's successor, asked once per ack (with the existence check, in one
        // ledger lookup): `after_insert` needs it too, and neither md nor the ledger changes in
        // between.
        let Some(is_next) = ledger.follows(self.md, p) else {
            return Err(missing(ledger, p));
        };
        // In-order fast path: `p` is md's successor and nothing at or below it is in the acked
        // set, so md moves onto it directly (the same move `after_insert` would make) without
        // inserting `p` into the acked set only to remove it again. The successor test comes
        // first: it is the cheap one and, for out-of-order acks, the one that fails.
        if is_next && self.acked.first().is_none_or(|f| f > p) {
            if !self.batches.is_empty() {
                if let Some(b) = self.batches.remove(&p) {
                    self.partial_msgs -= u64::from(b.acked_count());
                }
            }
            self.dirty = true;
            trace!(cursor = %self.name, position = %p, "acked");
            let from = self.md;
            self.md = p;
            self.absorb_acked(ledger);
            return Ok(AckOutcome {
                newly_acked: true,
                md_move: Some(self.finish_move(from, MarkDeleteReason::Ack, Vec::new())),
            });
        }
        if !self.acked.insert(p) {
            trace!(cursor = %self.name, position = %p, "duplicate ack");
            return Ok(AckOutcome {
                newly_acked: false,
                md_move: None,
            });
        }
        Ok(AckOutcome {
            newly_acked: true,
            md_move: self.after_insert(ledger, p, is_next),
        })
    }

    /// Bookkeeping after `p` entered the acked set: drop its batch bitset, count it, and move
    /// md if `p` closed the gap after it. `is_next`: `p` is md's successor
    /// (`ledger.next_position(md) == Some(p)`), found by the caller since its last change of md.
    fn after_insert<L: Ledger + ?Sized>(
        &mut self,
        ledger: &L,
        p: Position,
        is_next: bool,
    ) -> Option<MarkDeleteMove> {
        if !self.batches.is_empty() {
            if let Some(b) = self.batches.remove(&p) {
                self.partial_msgs -= u64::from(b.acked_count());
            }
        }
        if let Some(mut t) = self.acked_totals.get() {
            t.add(ledger.stats(p).unwrap_or_default());
            self.acked_totals.set(Some(t));
        }
        self.dirty = true;
        trace!(cursor = %self.name, position = %p, "acked");
        if is_next {
            let from = self.md;
            self.absorb_acked(ledger);
            Some(self.finish_move(from, MarkDeleteReason::Ack, Vec::new()))
        } else {
            None
        }
    }

    /// Acks `indexes` of the batch entry `p` (of `batch_size` messages, which must equal the
    /// entry's `num_messages`). The entry counts as acked once every index is; then it behaves
    /// as an individual ack. Errors for an index `>= batch_size` or a size mismatch, before any
    /// change. Positions at or below md, or already acked, are a no-op (`newly_acked == false`).
    pub fn ack_batch_index<L: Ledger + ?Sized>(
        &mut self,
        ledger: &L,
        p: Position,
        batch_size: u32,
        indexes: &[u32],
    ) -> Result<AckOutcome, CursorError> {
        if p <= self.md {
            return Ok(AckOutcome {
                newly_acked: false,
                md_move: None,
            });
        }
        lookup(ledger, p)?;
        let actual = ledger.meta(p).map_or(1, EntryMeta::messages);
        if batch_size != actual {
            return Err(CursorError::BatchSizeMismatch {
                position: p,
                given: batch_size,
                actual,
            });
        }
        if let Some(&index) = indexes.iter().find(|&&i| i >= batch_size) {
            return Err(CursorError::BatchIndexOutOfRange {
                position: p,
                index,
                batch_size,
            });
        }
        if self.acked.contains(p) {
            return Ok(AckOutcome {
                newly_acked: false,
                md_move: None,
            });
        }
        let b = self
            .batches
            .entry(p)
            .or_insert_with(|| BatchAcks::new(batch_size));
        let mut newly = 0u64;
        for &i in indexes {
            newly += u64::from(b.set(i));
        }
        let complete = b.is_complete();
        if b.acked_count() == 0 {
            self.batches.remove(&p);
        }
        self.partial_msgs += newly;
        if newly > 0 {
            self.dirty = true;
        }
        if complete {
            self.acked.insert(p);
            let is_next = ledger.follows(self.md, p) == Some(true);
            return Ok(AckOutcome {
                newly_acked: true,
                md_move: self.after_insert(ledger, p, is_next),
            });
        }
        trace!(cursor = %self.name, position = %p, newly, "batch indexes acked");
        Ok(AckOutcome {
            newly_acked: newly > 0,
            md_move: None,
        })
    }

    /// Cumulative ack: moves mark-delete to `p` (which must exist), then over any acked entries
    /// that follow.
    ///
    /// * `p` equal to the current mark-delete (a repeated cumulative ack) is an `Ok(None)`
    ///   no-op;
    /// * `p` below it is [`CursorError::MarkDeleteBackwards`] (nothing changes): mark-delete
    ///   never moves backwards, and a caller can tell a stale or confused cumulative ack from a
    ///   repeat;
    /// * `p` above it must exist: [`CursorError::BeyondLedger`], [`CursorError::UnknownLedger`]
    ///   or [`CursorError::Trimmed`] otherwise.
    pub fn mark_delete<L: Ledger + ?Sized>(
        &mut self,
        ledger: &L,
        p: Position,
    ) -> Result<Option<MarkDeleteMove>, CursorError> {
        if p == self.md {
            trace!(cursor = %self.name, position = %p, "cumulative ack of the current mark-delete ignored");
            return Ok(None);
        }
        if p < self.md {
            debug!(cursor = %self.name, position = %p, md = %self.md, "backwards mark-delete refused");
            return Err(CursorError::MarkDeleteBackwards {
                position: p,
                mark_delete: self.md,
            });
        }
        lookup(ledger, p)?;
        Ok(Some(self.move_to(
            ledger,
            p,
            MarkDeleteReason::CumulativeAck,
            Vec::new(),
        )))
    }

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

    fn expire_with<L: Ledger + ?Sized>(
        &mut self,
        ledger: &L,
        before: u64,
        reason: MarkDeleteReason,
    ) -> Option<MarkDeleteMove> {
        let mut target = None;
        let mut dropped = Vec::new();
        let mut p = ledger.next_position(self.md);
        while let Some(q) = p {
            let Some(m) = ledger.meta(q) else { break };
            if m.publish_time >= before {
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
            over = over.saturating_sub(u64::from(m.size));
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
            over = over.saturating_sub(u64::from(m.messages()) - partial);
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
    fn evict_while<L: Ledger + ?Sized>(
        &mut self,
        ledger: &L,
        mut take: impl FnMut(&EntryMeta, u64) -> bool,
    ) -> Option<MarkDeleteMove> {
        let mut dropped = Vec::new();
        let mut p = self.md;
        while let Some(q) = self.first_unacked_after(ledger, p) {
            let Some(m) = ledger.meta(q) else { break };
            let partial = self
                .batches
                .get(&q)
                .map_or(0, |b| u64::from(b.acked_count()));
            if !take(m, partial) {
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
                    if ledger.meta(p).is_none() && p != last.next() {
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
    /// [`EntryMeta::publish_time`]), found with [`Ledger::find_by_publish_time`] (binary search
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
                if let Some(e) = ledger.get(p) {
                    out.push(e);
                }
                next = self.first_unacked_after(ledger, p);
            }
            out
        };
        if let Some(last) = out.last() {
            // The entry the next read returns first, or the position right after the last
            // entry: acked entries right after the read are passed too, as Pulsar's read
            // position never names an acked entry.
            let after = last.position.next();
            self.read = self
                .first_unacked_after(ledger, last.position)
                .unwrap_or_else(|| ledger.last_position().map_or(after, Position::next));
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
            if ledger.meta(a).is_none() || ledger.meta(b).is_none() {
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
    fn acked_totals<L: Ledger + ?Sized>(&self, ledger: &L) -> Backlog {
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
    fn first_unacked_after<L: Ledger + ?Sized>(&self, ledger: &L, p: Position) -> Option<Position> {
        let mut q = ledger.next_position(p.max(self.md))?;
        loop {
            match self.acked.run_end(q) {
                None => return Some(q),
                Some(end) => q = ledger.next_position(end)?,
            }
        }
    }

    /// The un-acked existing entries in `(md, through]`.
    fn unacked_in<L: Ledger + ?Sized>(&self, ledger: &L, through: Position) -> Vec<Position> {
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

    /// Moves md forward to `target` (> md), forgetting acks at or below it, then over the acked
    /// entries that follow; returns the whole move.
    fn move_to<L: Ledger + ?Sized>(
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
    fn absorb_acked<L: Ledger + ?Sized>(&mut self, ledger: &L) {
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

    fn finish_move(
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

#[cfg(test)]
mod tests;
