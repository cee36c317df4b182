//! Acks: individual, batch-index, and the mark-delete they move.
use tracing::{debug, trace};

use super::*;

impl<S: CursorStore> ManagedCursor<S> {
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
    pub(super) fn after_insert<L: Ledger + ?Sized>(
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
        let actual = ledger
            .stats(p)
            .map_or(1, |s| u32::try_from(s.messages).unwrap_or(u32::MAX));
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
}
