//! Redelivery, ordered nack, release, parked entries and dead letters.

use super::*;

/// Which pending entries [`Dispatcher::take_back`] takes back.
#[derive(Clone, Copy, Debug)]
pub(super) enum TakeBack<'a> {
    /// These positions (those not pending on the consumer are ignored).
    Positions(&'a [Position]),
    /// Every pending entry of the consumer.
    All,
}

impl Dispatcher {
    /// The consumer asks for these positions again (a nack or ack timeout). Each one pending on
    /// it leaves its pending acks (cause: redelivery) and goes to replay WITH its hash, so on
    /// Key_Shared later entries of the key still wait behind it. Positions not pending on this
    /// consumer are ignored. Returns how many were requeued.
    ///
    /// On Failover every unacked entry of the consumer comes back, as with
    /// [`handle_redeliver_all`](Self::handle_redeliver_all): one alone would be re-sent after
    /// later entries.
    pub fn handle_redeliver(&mut self, now: u64, id: ConsumerId, positions: &[Position]) -> usize {
        if self.is_failover() {
            return self.handle_redeliver_all(now, id);
        }
        self.take_back(
            now,
            id,
            TakeBack::Positions(positions),
            RemovalCause::RedeliveryRequested,
            |d, p, hash| {
                d.requeue_redelivered(p, hash);
            },
        )
    }

    /// The consumer asks for all its unacked entries again (epoch bump): every pending ack is
    /// removed (cause: redelivery) and replayed with its hash. Returns how many.
    pub fn handle_redeliver_all(&mut self, now: u64, id: ConsumerId) -> usize {
        self.take_back(
            now,
            id,
            TakeBack::All,
            RemovalCause::RedeliveryRequested,
            |d, p, hash| {
                d.requeue_redelivered(p, hash);
            },
        )
    }

    /// THE take-back loop, shared by redelivery, redeliver-all, nack and release: the chosen
    /// entries pending on consumer `id` leave its pending acks with `cause` and are handed, with
    /// their hash, to `requeue`; the consumer's unacked count is debited once for all of them;
    /// then its parked permits are released (Pulsar does so on every redelivery) and the read
    /// loop runs. Returns how many were pending (0 for an unknown consumer).
    pub(super) fn take_back(
        &mut self,
        now: u64,
        id: ConsumerId,
        which: TakeBack<'_>,
        cause: RemovalCause,
        mut requeue: impl FnMut(&mut Self, Position, u32),
    ) -> usize {
        let Some(i) = self.find(id) else { return 0 };
        let shared = self.consumers[i].shared.clone();
        let mut n = 0;
        let mut debit = 0;
        match which {
            TakeBack::Positions(positions) => {
                for &p in positions {
                    if let Some(ack) = shared.pending.remove(pending_key(p), cause) {
                        debit += i64::from(ack.remaining);
                        requeue(self, p, ack.hash);
                        n += 1;
                    }
                }
            }
            TakeBack::All => {
                let mut items = Vec::new();
                // One batch: the draining tracker sends one unblock notification for all.
                shared.pending.for_each_and_clear(cause, |pos, ack| {
                    items.push((position_of(pos), ack.hash));
                    debit += i64::from(ack.remaining);
                });
                for (p, hash) in items {
                    requeue(self, p, hash);
                    n += 1;
                }
            }
        }
        shared.debit(&self.shared, debit);
        if cause == RemovalCause::Nacked {
            self.timers.nack = self.replay.next_due(now);
        }
        self.after_redelivery(i);
        self.input_arrived();
        self.read_more(now);
        n
    }

    pub(super) fn requeue_redelivered(&mut self, p: Position, hash: u32) {
        self.counters.redeliveries += 1;
        *self.redelivery_counts.entry(p).or_insert(0) += 1;
        if self.mark_delete.is_none_or(|md| p > md) {
            self.replay.add(p, hash, None);
        }
    }

    pub(super) fn after_redelivery(&mut self, i: usize) {
        // Pulsar unblocks the consumer's parked permits unconditionally on redelivery.
        let c = &mut self.consumers[i];
        c.permits = c
            .permits
            .saturating_add(std::mem::take(&mut c.parked_permits));
        self.recheck_unacked_blocks();
    }

    /// How many times `position` was asked for again (0 if never).
    pub fn redelivery_count(&self, position: Position) -> u32 {
        self.redelivery_counts.get(&position).copied().unwrap_or(0)
    }

    // ------------------------------------------------------------------ ordered nack

    /// The consumer negatively acknowledged these positions (one message: a chunked message
    /// lists all its chunk entries). Each one pending on it leaves its pending acks (cause:
    /// nacked), its redelivery count increments, and it enters replay with its hash, not to be
    /// re-sent before `now + delay` (`delay: None` takes [`DispatcherConfig::nack_backoff`] on
    /// the new count). A [`DispatchCommand::SetTimer`] fires at that time.
    ///
    /// On ordered Key_Shared the hash is **held**: no entry of it is sent to anyone until the
    /// nacked entry has been re-sent (later entries queue behind it in position order, whatever
    /// their consumer); other hashes keep flowing. On Shared and out-of-order Key_Shared a nack
    /// is a delayed redelivery, nothing waits for it.
    ///
    /// With a [`DispatcherConfig::dead_letter`] policy, an entry nacked after `max_deliveries`
    /// deliveries is not redelivered: `Continue` hands it to
    /// [`poll_dead_letter`](Self::poll_dead_letter), `Park` keeps it (and its key) until
    /// [`release_parked`](Self::release_parked) or [`dead_letter_parked`](Self::dead_letter_parked).
    ///
    /// Positions not pending on this consumer are ignored (a stale nack); unknown consumer:
    /// no-op. Returns how many positions were nacked. On Failover: every unacked entry of the
    /// consumer comes back at once (see [`handle_redeliver`](Self::handle_redeliver)).
    pub fn handle_nack(
        &mut self,
        now: u64,
        id: ConsumerId,
        positions: &[Position],
        delay: Option<u64>,
    ) -> usize {
        if self.is_failover() {
            return self.handle_redeliver_all(now, id);
        }
        self.take_back(
            now,
            id,
            TakeBack::Positions(positions),
            RemovalCause::Nacked,
            |d, p, hash| {
                d.requeue_nacked(now, id, p, hash, delay);
            },
        )
    }

    /// A nacked entry: count the delivery, then dead-letter, park or hold it in replay.
    fn requeue_nacked(
        &mut self,
        now: u64,
        id: ConsumerId,
        p: Position,
        hash: u32,
        delay: Option<u64>,
    ) {
        self.counters.nacks += 1;
        self.counters.redeliveries += 1;
        let count = {
            let c = self.redelivery_counts.entry(p).or_insert(0);
            *c = c.saturating_add(1);
            *c
        };
        if self.mark_delete.is_some_and(|md| p <= md) {
            return;
        }
        let dead = self
            .cfg
            .dead_letter
            .filter(|d| count >= d.max_deliveries.max(1));
        match dead.map(|d| d.action) {
            Some(DeadLetterAction::Continue) => {
                warn!(consumer = %id, ledger = p.ledger_id, entry = p.entry_id, hash, deliveries = count, "dead letter: entry handed to the driver, its key continues without it");
                self.counters.dead_letters += 1;
                self.dead_letters.push_back(p);
            }
            Some(DeadLetterAction::Park) => {
                warn!(consumer = %id, ledger = p.ledger_id, entry = p.entry_id, hash, deliveries = count, "dead letter: entry parked, its key waits for an operator");
                self.replay.add_nacked(p, hash, PARKED);
            }
            None => {
                let d = delay.unwrap_or_else(|| self.cfg.nack_backoff.delay(count));
                let not_before = if d == 0 { 0 } else { now.saturating_add(d) };
                debug!(consumer = %id, ledger = p.ledger_id, entry = p.entry_id, hash, redeliveries = count, not_before, "nacked: held until re-sent");
                self.replay.add_nacked(p, hash, not_before);
            }
        }
    }

    /// The consumer gives back entries it received but never handed to its application (in
    /// ordered-nack mode: later messages of a nacked key). Each one pending on it leaves its
    /// pending acks (cause: redelivery requested) and re-enters replay with its hash, in
    /// position order behind the nacked entry, **without** counting a redelivery and without
    /// delay. Positions not pending on this consumer are ignored. Returns how many. On
    /// Failover: every unacked entry of the consumer comes back (a redelivery).
    pub fn handle_release(&mut self, now: u64, id: ConsumerId, positions: &[Position]) -> usize {
        if self.is_failover() {
            return self.handle_redeliver_all(now, id);
        }
        let n = self.take_back(
            now,
            id,
            TakeBack::Positions(positions),
            RemovalCause::RedeliveryRequested,
            |d, p, hash| {
                d.counters.releases += 1;
                if d.mark_delete.is_none_or(|md| p > md) {
                    d.replay.add(p, hash, None);
                }
            },
        );
        debug!(consumer = %id, released = n, "entries released back to replay");
        n
    }

    /// The shell could not deliver these sent entries to consumer `id` (its delivery queue is
    /// full; the consumer stopped reading). They leave its pending acks (cause: redelivery
    /// requested) and go back to replay with their hash, like a
    /// [`handle_release`](Self::handle_release) but counted neither as a redelivery nor as a
    /// release; the consumer gets back the permits they took and is **paused**: it counts as
    /// having no permits (nothing more is sent to it, on Key_Shared its keys wait) until
    /// [`handle_consumer_resumed`](Self::handle_consumer_resumed). Positions not pending on it
    /// are ignored; unknown consumer: no-op. Returns how many were taken back.
    pub fn handle_send_refused(
        &mut self,
        now: u64,
        id: ConsumerId,
        positions: &[Position],
    ) -> usize {
        let Some(i) = self.find(id) else { return 0 };
        let c = &mut self.consumers[i];
        c.paused = true;
        let messages: i64 = positions
            .iter()
            .filter_map(|p| c.shared.pending.get(pending_key(*p)))
            .map(|a| i64::from(a.remaining))
            .sum();
        c.permits = c.permits.saturating_add(messages);
        let n = self.take_back(
            now,
            id,
            TakeBack::Positions(positions),
            RemovalCause::RedeliveryRequested,
            |d, p, hash| {
                if d.mark_delete.is_none_or(|md| p > md) {
                    d.replay.add(p, hash, None);
                }
            },
        );
        debug!(consumer = %id, refused = n, "send refused by the shell; consumer paused");
        n
    }

    /// These entries, sent to consumer `id`, never reached it: the shell refused or dropped
    /// the delivery. Call it before
    /// [`handle_send_refused`](Self::handle_send_refused) (or, for a dropped delivery, before
    /// the consumer's removal), so the chunk pins name the consumer that has a message's
    /// earlier chunks again: a first chunk's send undoes the pin it made or moved, a last
    /// chunk's send pins its message to `id` again (Shared: the chunk assignor's pins;
    /// Key_Shared: the uuid and key pins), and a Shared orphan chunk is taken off the
    /// orphan count (it counts when it is sent again). Plain entries, single-chunk messages
    /// and pinned middle chunks: nothing.
    pub fn handle_chunks_undelivered(&mut self, now: u64, id: ConsumerId, entries: &[Entry]) {
        if self.find(id).is_none() {
            return;
        }
        // Undone in reverse: a send with a message's first and last chunks pinned, then
        // unpinned it. A Shared orphan chunk that comes back is not counted as dispatched (it
        // is counted again when it is sent again).
        let mut orphans_back = 0;
        // Key_Shared first chunks whose pin left `id`: (hash, position).
        let mut left = Vec::new();
        for e in entries.iter().rev() {
            let Some(ch) = key_shared::multi_chunk(e) else {
                continue;
            };
            let first = ch.chunk_id == 0;
            let last = ch.chunk_id + 1 == ch.num_chunks;
            let key_shared_first = first && matches!(self.mode, Mode::KeyShared(_));
            let hash = if key_shared_first {
                self.entry_hash(e)
            } else {
                0
            };
            match &mut self.mode {
                Mode::Shared(r) if first => {
                    r.assignor.first_chunk_returned(&ch.uuid, id);
                    let unpinned = r.assignor.pinned(&ch.uuid).is_none();
                    if unpinned && !r.awaiting_first.iter().any(|(u, _)| *u == ch.uuid) {
                        r.awaiting_first.push((ch.uuid.clone(), e.position));
                    }
                }
                Mode::Shared(r) if last => {
                    let pinned_again = r.assignor.last_chunk_returned(now, &ch.uuid, id);
                    let orphan = !pinned_again && r.assignor.pinned(&ch.uuid).is_none();
                    orphans_back += u64::from(orphan);
                }
                Mode::Shared(r) if r.assignor.pinned(&ch.uuid).is_none() => orphans_back += 1,
                Mode::KeyShared(k) if first => {
                    k.pins.first_chunk_returned(&ch.uuid, id);
                    if k.pins.consumer_of(&ch.uuid) != Some(id) {
                        left.push((hash, e.position));
                    }
                }
                Mode::KeyShared(k) if last => k.pins.last_chunk_returned(&ch.uuid, id),
                _ => {}
            }
        }
        self.counters.orphan_chunks = self.counters.orphan_chunks.saturating_sub(orphans_back);
        // A continuation refused earlier kept a pin to `id` in replay; its first chunk did not
        // reach `id` after all and goes wherever it goes next: the continuation follows it
        // (by its message's pin when routed), and until then holds its key for everyone.
        for (hash, first) in left {
            self.replay.unpin_after(id, hash, first);
        }
    }

    /// The shell can deliver to consumer `id` again (its delivery queue drained): a consumer
    /// paused by [`handle_send_refused`](Self::handle_send_refused) uses its permits again.
    /// Unknown or not paused: no-op, false.
    pub fn handle_consumer_resumed(&mut self, now: u64, id: ConsumerId) -> bool {
        let Some(i) = self.find(id) else { return false };
        if !std::mem::take(&mut self.consumers[i].paused) {
            return false;
        }
        debug!(consumer = %id, "consumer resumed by the shell");
        self.input_arrived();
        self.read_more(now);
        true
    }

    /// Whether the shell paused consumer `id` ([`handle_send_refused`](Self::handle_send_refused)).
    pub fn is_paused(&self, id: ConsumerId) -> bool {
        self.find(id).is_some_and(|i| self.consumers[i].paused)
    }

    /// The parked entries of `hash`, ascending.
    fn parked_of(&self, hash: u32) -> Vec<Position> {
        self.replay
            .parked()
            .into_iter()
            .filter(|(_, h)| *h == hash)
            .map(|(p, _)| p)
            .collect()
    }

    /// Operator action: the parked entries of `hash` (dead-letter policy `Park`) are replayed
    /// now, in position order; their key stays held until they are re-sent. Their redelivery
    /// counts restart at 0 (a fresh chance). On Shared the hash of every entry is 0. Returns
    /// how many entries were released (0: nothing parked under that hash).
    pub fn release_parked(&mut self, now: u64, hash: u32) -> usize {
        let ps = self.parked_of(hash);
        for p in &ps {
            self.replay.set_not_before(*p, 0);
            self.redelivery_counts.remove(p);
        }
        debug!(
            hash,
            released = ps.len(),
            "parked entries released by the operator"
        );
        self.input_arrived();
        self.read_more(now);
        ps.len()
    }

    /// Operator action: the parked entries of `hash` become dead letters
    /// ([`poll_dead_letter`](Self::poll_dead_letter)) and the key flows again. Returns how
    /// many.
    pub fn dead_letter_parked(&mut self, now: u64, hash: u32) -> usize {
        let ps = self.parked_of(hash);
        for p in &ps {
            self.replay.remove(*p);
            self.dead_letters.push_back(*p);
        }
        self.counters.dead_letters += ps.len() as u64;
        debug!(
            hash,
            dead_letters = ps.len(),
            "parked entries dead-lettered by the operator"
        );
        self.input_arrived();
        self.read_more(now);
        ps.len()
    }

    /// The next dead letter for the driver, if any: publish it to the dead-letter topic, then
    /// ack it on the cursor (the dispatcher already forgot it: it is neither pending nor in
    /// replay). Drain after [`handle_nack`](Self::handle_nack) and
    /// [`dead_letter_parked`](Self::dead_letter_parked) when a dead-letter policy is set.
    pub fn poll_dead_letter(&mut self) -> Option<Position> {
        if self.closed {
            return None;
        }
        self.dead_letters.pop_front()
    }

    /// Parked entries (position, hash), ascending.
    pub fn parked_positions(&self) -> Vec<(Position, u32)> {
        self.replay.parked()
    }
}
