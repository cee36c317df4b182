//! The ack path: runs on the acking consumer's thread, not on the dispatcher's.

use std::sync::{Mutex as StdMutex, MutexGuard};

use cursor::{CursorStore, Entry, Ledger, ManagedCursor, Position, ReplayResult};
use tracing::trace;

use crate::config::ConsumerId;
use crate::error::AckHandleError;
use crate::shared::{ConsumerShared, SubShared};
use crate::sync::Arc;
use pending_acks::RemovalCause;

/// The durable half of an ack: what an [`AckHandle`] calls first.
///
/// Implementations lock whatever guards the cursor, ack, and unlock before returning; the
/// handle touches the pending acks only after that, so the cursor lock is never held together
/// with a pending-acks or draining lock.
pub trait CursorAck: Send + Sync {
    /// Acknowledges `position` on the cursor. `Ok(true)` if newly acked, `Ok(false)` if it was
    /// already acked or at or below the mark-delete position.
    fn ack(&self, position: Position) -> Result<bool, cursor::CursorError>;

    /// Acknowledges `indexes` of the batch entry at `position` (of `batch_size` messages).
    fn ack_batch_index(
        &self,
        position: Position,
        batch_size: u32,
        indexes: &[u32],
    ) -> Result<BatchAck, cursor::CursorError>;
}

/// What a batch-index ack did on the cursor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchAck {
    /// Indexes that were not acked before.
    pub newly_acked_indexes: u32,
    /// The ack completed the entry (every index acked now, and not before).
    pub entry_complete: bool,
}

/// A cursor and its ledger behind one std mutex: the shape the [`Driver`](crate::Driver), the
/// runtime and the ack path share. Lock it with [`CursorCell::lock`] (poison-tolerant).
pub struct CursorCell<S: CursorStore, L: Ledger> {
    /// The cursor.
    pub cursor: ManagedCursor<S>,
    /// The ledger the cursor reads.
    pub ledger: L,
}

impl<S: CursorStore, L: Ledger> CursorCell<S, L> {
    /// Locks `cell`. A panic on another thread while it held the lock does not poison it for
    /// the others: the cursor's own operations leave it consistent, so the guard is recovered.
    pub fn lock(cell: &StdMutex<Self>) -> MutexGuard<'_, Self> {
        match cell.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// The cursor and the ledger, borrowed apart (for cursor calls that need both).
    pub fn parts(&mut self) -> (&mut ManagedCursor<S>, &mut L) {
        (&mut self.cursor, &mut self.ledger)
    }

    /// Reads up to `max_entries` at the read position; also answers `has_more_entries`.
    pub fn read(&mut self, max_entries: usize) -> (Vec<Entry>, bool) {
        let entries = self.cursor.read(&self.ledger, max_entries);
        let more = self.cursor.has_more_entries(&self.ledger);
        (entries, more)
    }

    /// Reads these positions again.
    pub fn replay(&self, positions: &[Position]) -> ReplayResult {
        self.cursor.replay(&self.ledger, positions)
    }

    /// Moves the read position back to the first unacked entry.
    pub fn rewind(&mut self) {
        self.cursor.rewind(&self.ledger);
    }
}

impl<S, L> CursorAck for StdMutex<CursorCell<S, L>>
where
    S: CursorStore + Send,
    L: Ledger + Send,
{
    fn ack(&self, position: Position) -> Result<bool, cursor::CursorError> {
        let mut g = CursorCell::lock(self);
        let (cursor, ledger) = g.parts();
        cursor.ack(ledger, position).map(|o| o.newly_acked)
    }

    fn ack_batch_index(
        &self,
        position: Position,
        batch_size: u32,
        indexes: &[u32],
    ) -> Result<BatchAck, cursor::CursorError> {
        let mut g = CursorCell::lock(self);
        let (cursor, ledger) = g.parts();
        let was_acked = cursor.is_acked(position);
        let before = cursor
            .batch_acked_indexes(position)
            .map_or(0, |v| v.len() as u32);
        cursor.ack_batch_index(ledger, position, batch_size, indexes)?;
        let complete = !was_acked && cursor.is_acked(position);
        let after = match complete {
            true => batch_size,
            false => cursor
                .batch_acked_indexes(position)
                .map_or(before, |v| v.len() as u32),
        };
        Ok(BatchAck {
            newly_acked_indexes: after.saturating_sub(before),
            entry_complete: complete,
        })
    }
}

/// What an ack did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AckEffect {
    /// The cursor newly recorded the ack (false: already acked or at or below mark-delete).
    pub newly_acked: bool,
    /// The consumer whose pending ack was cleared or reduced (the acking one, or another one:
    /// Shared clients may ack through any consumer), if the position was pending anywhere.
    pub cleared_on: Option<ConsumerId>,
    /// The unacked messages that were debited. `newly_acked` stays false for a batch-index ack
    /// that did not complete its entry.
    pub messages: u32,
}

/// A cloneable, `Send + Sync` handle that acknowledges on the caller's thread.
///
/// `ack` locks the cursor (through [`CursorAck`]) and acks, releases that lock, then removes
/// the position from the owner's pending acks (cause: acked) — **even when the cursor said the
/// position was already at or below mark-delete**, because on Key_Shared the pending ack is what
/// keeps a draining hash blocked and only the owner's ack may release it. The removal runs the
/// pending-acks remove handler, which drops a draining reference and, if that released a hash
/// another consumer was waiting for, calls the dispatcher's [`Waker`](crate::Waker). Unacked
/// counts are atomics shared with the core; crossing half a limit also wakes it.
///
/// Lock order: cursor (released first) → pending-acks → draining-hashes.
#[derive(Clone)]
pub struct AckHandle {
    shared: Arc<SubShared>,
    cursor: std::sync::Arc<dyn CursorAck>,
}

impl std::fmt::Debug for AckHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AckHandle").finish_non_exhaustive()
    }
}

/// An [`AckHandle`] bound to one consumer: skips the consumer look-up on the common path (the
/// position is pending on the acking consumer). Same semantics as [`AckHandle::ack`]; falls back
/// to the other consumers when the position is not pending on this one. Get it from
/// [`AckHandle::for_consumer`].
#[derive(Clone)]
pub struct ConsumerAckHandle {
    id: ConsumerId,
    consumer: Arc<ConsumerShared>,
    inner: AckHandle,
}

impl std::fmt::Debug for ConsumerAckHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsumerAckHandle")
            .field("consumer", &self.id)
            .finish_non_exhaustive()
    }
}

impl ConsumerAckHandle {
    /// The consumer this handle acks for.
    pub fn consumer(&self) -> ConsumerId {
        self.id
    }

    /// Acknowledges the whole entry at `position` (see [`AckHandle::ack`]).
    pub fn ack(&self, position: Position) -> Result<AckEffect, AckHandleError> {
        let newly_acked = self
            .inner
            .cursor
            .ack(position)
            .map_err(|source| AckHandleError::Cursor { position, source })?;
        let pos = (position.ledger_id, position.entry_id);
        if let Some(ack) = self.consumer.pending.remove(pos, RemovalCause::Acked) {
            self.consumer
                .debit(&self.inner.shared, i64::from(ack.remaining));
            return Ok(AckEffect {
                newly_acked,
                cleared_on: Some(self.id),
                messages: ack.remaining,
            });
        }
        Ok(self.inner.clear_pending(self.id, position, newly_acked))
    }

    /// A batch-index ack (see [`AckHandle::ack_batch_index`]).
    pub fn ack_batch_index(
        &self,
        position: Position,
        batch_size: u32,
        indexes: &[u32],
    ) -> Result<AckEffect, AckHandleError> {
        self.inner
            .ack_batch_index(self.id, position, batch_size, indexes)
    }
}

impl crate::Dispatcher {
    /// An ack handle for this subscription, acking through `cursor`.
    pub fn ack_handle(&self, cursor: std::sync::Arc<dyn CursorAck>) -> AckHandle {
        AckHandle {
            shared: self.sub_shared(),
            cursor,
        }
    }
}

impl AckHandle {
    /// A handle bound to `consumer` (faster acks for it), or `None` if it is not connected.
    pub fn for_consumer(&self, consumer: ConsumerId) -> Option<ConsumerAckHandle> {
        let c = self.shared.consumer(consumer)?;
        Some(ConsumerAckHandle {
            id: consumer,
            consumer: c,
            inner: self.clone(),
        })
    }

    /// `consumer` acknowledges the whole entry at `position`.
    ///
    /// Errors only when the cursor refuses the ack (nothing changed then). Acking a position
    /// that is pending nowhere (a duplicate ack, or an ack after the consumer left) only reaches
    /// the cursor and reports `cleared_on: None`.
    pub fn ack(
        &self,
        consumer: ConsumerId,
        position: Position,
    ) -> Result<AckEffect, AckHandleError> {
        let newly_acked = self
            .cursor
            .ack(position)
            .map_err(|source| AckHandleError::Cursor { position, source })?;
        Ok(self.clear_pending(consumer, position, newly_acked))
    }

    /// `consumer` acknowledges some messages (`indexes`) of the batch entry at `position`, which
    /// holds `batch_size` messages (batch-index ack). The pending ack's remaining count drops by
    /// the newly acked indexes; the ack that completes the entry removes it like [`ack`](Self::ack).
    pub fn ack_batch_index(
        &self,
        consumer: ConsumerId,
        position: Position,
        batch_size: u32,
        indexes: &[u32],
    ) -> Result<AckEffect, AckHandleError> {
        let r = self
            .cursor
            .ack_batch_index(position, batch_size, indexes)
            .map_err(|source| AckHandleError::Cursor { position, source })?;
        if r.entry_complete {
            return Ok(self.clear_pending(consumer, position, true));
        }
        let pos = (position.ledger_id, position.entry_id);
        let cleared_on = match r.newly_acked_indexes {
            0 => None,
            n => self.shared.partial_ack(consumer, pos, n),
        };
        Ok(AckEffect {
            newly_acked: false,
            cleared_on,
            messages: if cleared_on.is_some() {
                r.newly_acked_indexes
            } else {
                0
            },
        })
    }

    /// The pending-acks half of an ack alone, for drivers that already acked the cursor
    /// themselves (for example inside a larger cursor transaction).
    pub fn clear_pending(
        &self,
        consumer: ConsumerId,
        position: Position,
        newly_acked: bool,
    ) -> AckEffect {
        let pos = (position.ledger_id, position.entry_id);
        let mut out = AckEffect {
            newly_acked,
            cleared_on: None,
            messages: 0,
        };
        if let Some((owner, ack)) = self.shared.remove_acked(consumer, pos) {
            out.cleared_on = Some(owner);
            out.messages = ack.remaining;
        }
        trace!(consumer = %consumer, ledger = position.ledger_id, entry = position.entry_id, newly_acked, cleared = out.cleared_on.is_some(), "ack");
        out
    }
}
