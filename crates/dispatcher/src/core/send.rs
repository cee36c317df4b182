//! Sending: Shared dispatch, the send step, permit and unacked accounting.

use super::failover::usable_permits;
use super::gate::send_gate;
use super::*;

/// Adapter: the chunk assignor looks at an entry's chunk metadata through this.
pub(super) struct AssignedEntry(pub(super) Entry);

impl AssignEntry for AssignedEntry {
    fn chunk(&self) -> Option<ChunkRef<'_>> {
        self.0.meta.chunk.as_ref().map(|c| ChunkRef {
            uuid: &c.uuid,
            chunk_id: c.chunk_id,
            num_chunks: c.num_chunks,
        })
    }
}

impl Dispatcher {
    /// Permits usable now; none for a Failover consumer standing by.
    pub(super) fn available_permits(&self, c: &Consumer) -> i64 {
        usable_permits(c, self.active)
    }

    pub(super) fn recheck_unacked_blocks(&mut self) {
        for c in &mut self.consumers {
            if c.shared.limit.try_resume() {
                c.permits = c
                    .permits
                    .saturating_add(std::mem::take(&mut c.parked_permits));
                self.read.unsettle();
                debug!(consumer = %c.id, permits = c.permits, "consumer resumed below half its unacked limit");
            }
        }
        if self.shared.limit.try_resume() {
            debug!("subscription resumed below half its unacked limit");
        }
    }

    // ------------------------------------------------------------------ sending

    /// Adds `entries` to the consumer's pending acks and emits the send. Entries refused at send
    /// time (draining conflict, closed map) go back to replay with their hash. Returns the
    /// number of entries sent.
    pub(super) fn send_to(
        &mut self,
        i: usize,
        mut out: Vec<Entry>,
        hashes: &[u32],
        pinned: &[bool],
    ) -> usize {
        let mut messages = 0i64;
        let id = self.consumers[i].id;
        let mut refused_n = 0u64;
        let draining = self.mode.key_shared().and_then(|k| k.draining.clone());
        let key_serial = self.mode.key_shared().and_then(|k| k.key_serial.clone());
        let gated = draining.is_some() || key_serial.is_some();
        let holds_before = self.replay.held_hashes();
        let mut sent_chunk = false;
        {
            let c = &self.consumers[i];
            let replay = &mut self.replay;
            let mode = &mut self.mode;
            let mark_delete = self.mark_delete;
            let mut k = 0usize;
            // A message whose chunk 0 was refused here must not get its later chunks.
            let mut refused_uuids: Vec<String> = Vec::new();
            // One write lock of the consumer's pending acks for the whole send.
            c.shared.pending.add_batch(|batch| out.retain(|e| {
                let hash = hashes.get(k).copied().unwrap_or(0);
                let is_pinned = pinned.get(k).copied().unwrap_or(false);
                k += 1;
                if let Some(ch) = &e.meta.chunk {
                    if ch.chunk_id > 0 && refused_uuids.contains(&ch.uuid) {
                        refused_n += 1;
                        replay.add(e.position, hash, None);
                        return false;
                    }
                }
                let n = e.meta.messages();
                let continuation = e.meta.chunk.as_ref().is_some_and(|c| c.chunk_id > 0);
                let r = if gated {
                    batch.add_if(pending_key(e.position), n, hash, |c, p, h| {
                        send_gate(
                            draining.as_deref(),
                            key_serial.as_deref(),
                            c,
                            p,
                            h,
                            is_pinned,
                            continuation,
                        )
                    })
                } else {
                    batch.add_if_allowed(pending_key(e.position), n, hash)
                };
                match r {
                    Ok(_) => {
                        if !replay.is_empty() {
                            replay.remove(e.position);
                        }
                        if let Mode::KeyShared(key_shared) = mode {
                            note_chunk_sent(key_shared, e, id, hash);
                            sent_chunk |= e.meta.chunk.is_some();
                        }
                        messages += i64::from(n);
                        true
                    }
                    Err(refused) => {
                        refused_n += 1;
                        if let Some(ch) = e.meta.chunk.as_ref().filter(|c| c.chunk_id == 0) {
                            refused_uuids.push(ch.uuid.clone());
                        }
                        debug!(consumer = %id, ledger = e.position.ledger_id, entry = e.position.entry_id, hash, reason = ?refused, "send-time add refused, entry back to replay");
                        let continuation =
                            e.meta.chunk.as_ref().is_some_and(|c| c.chunk_id > 0);
                        let pin = if is_pinned && continuation {
                            Some(id)
                        } else {
                            None
                        };
                        if !matches!(refused, AddRefused::Closed)
                            || mark_delete.is_none_or(|md| e.position > md)
                        {
                            replay.add(e.position, hash, pin);
                        }
                        false
                    }
                }
            }));
        }
        self.counters.send_time_refusals += refused_n;
        if sent_chunk || self.replay.held_hashes() != holds_before {
            // A chunk pinned or unpinned its key, or a re-sent nacked entry ended a hold: replay
            // entries held behind them may go now.
            self.read.unsettle();
        }
        if out.is_empty() {
            return 0;
        }
        self.charge_send(i, messages);
        self.counters.entries_sent += out.len() as u64;
        self.counters.messages_sent += messages as u64;
        let sent = out.len();
        trace!(consumer = %id, entries = sent, messages, "send");
        self.commands.push_back(DispatchCommand::Send {
            consumer: id,
            entries: out,
        });
        sent
    }

    /// Accounting of one send: the consumer's permits, then the consumer's and the
    /// subscription's unacked limits (either may block; a block that the ack path already
    /// undid below half is re-checked at once).
    fn charge_send(&mut self, i: usize, messages: i64) {
        let c = &mut self.consumers[i];
        c.permits = c.permits.saturating_sub(messages);
        if let Charged::Blocked {
            unacked,
            below_half,
        } = c.shared.limit.charge(messages)
        {
            debug!(consumer = %c.id, unacked, "consumer blocked on unacked messages");
            // The ack path may have crossed half before it saw the flag: re-check.
            if below_half {
                self.wake.unacked_unblocked.store(true, Ordering::SeqCst);
            }
        }
        if let Charged::Blocked {
            unacked,
            below_half,
        } = self.shared.limit.charge(messages)
        {
            debug!(unacked, "subscription blocked on unacked messages");
            if below_half {
                self.wake.unacked_unblocked.store(true, Ordering::SeqCst);
            }
        }
        if self.wake.unacked_unblocked.load(Ordering::SeqCst)
            && self.wake.unacked_unblocked.swap(false, Ordering::SeqCst)
        {
            self.recheck_unacked_blocks();
        }
    }

    pub(super) fn dispatch_shared(&mut self, now: u64, entries: Vec<Entry>, from_replay: bool) {
        if self.is_failover() && !from_replay && !self.replay.is_empty() {
            // Failover order: entries came back to replay while this read was in flight (the
            // active consumer changed); the read's entries queue behind them.
            for e in entries {
                self.replay.add(e.position, 0, None);
            }
            return;
        }
        let active = self.active;
        let Mode::Shared(routing) = &mut self.mode else {
            return;
        };
        // The consumers' snapshot for this batch, in a buffer reused across batches (one slot
        // per consumer, in order; on Failover only the active one has permits).
        let mut slots = std::mem::take(&mut routing.slots);
        slots.clear();
        slots.extend(self.consumers.iter().map(|c| ConsumerSlot {
            id: c.id,
            permits: usable_permits(c, active),
            priority: c.priority,
        }));
        if entries.iter().any(|e| e.meta.chunk.is_some()) {
            self.assign_chunked(now, entries, &slots);
        } else {
            self.round_robin_plain(entries, &slots);
        }
        if let Mode::Shared(routing) = &mut self.mode {
            routing.slots = slots;
        }
    }

    /// A Shared batch with chunks: the chunk assignor decides (pins, round robin, replay).
    fn assign_chunked(
        &mut self,
        now: u64,
        entries: Vec<Entry>,
        slots: &[ConsumerSlot<ConsumerId>],
    ) {
        let Mode::Shared(routing) = &mut self.mode else {
            return;
        };
        let entries = match routing.awaiting_first.is_empty() {
            true => entries,
            false => hold_for_first_chunks(routing, &mut self.replay, entries),
        };
        let before = routing.assignor.stats().orphan_chunks;
        let items = entries.into_iter().map(AssignedEntry);
        let a = routing.assignor.assign(now, items.collect(), slots);
        self.counters.orphan_chunks += routing.assignor.stats().orphan_chunks - before;
        if !routing.awaiting_first.is_empty() {
            // A first chunk assigned again: its message's chunks follow its pin from now on.
            let assigned = a.per_consumer.iter().flat_map(|(_, l)| l.iter());
            for e in assigned.filter_map(|e| e.0.meta.chunk.as_ref()) {
                if e.chunk_id == 0 {
                    routing.awaiting_first.retain(|(u, _)| *u != e.uuid);
                }
            }
        }
        for (cid, list) in a.per_consumer {
            if list.is_empty() {
                continue;
            }
            if let Some(i) = self.find(cid) {
                let v: Vec<Entry> = list.into_iter().map(|it| it.0).collect();
                self.send_to(i, v, &[], &[]);
            } else {
                for it in list {
                    self.replay.add(it.0.position, 0, None);
                }
            }
        }
        for it in a.replay {
            self.replay.add(it.0.position, 0, None);
        }
    }

    /// A plain Shared batch: slices of up to `max_round_robin_batch` entries per consumer, the
    /// consumer chosen by the assignor's PriorityRoundRobin (the one Shared rotation).
    fn round_robin_plain(&mut self, entries: Vec<Entry>, slots: &[ConsumerSlot<ConsumerId>]) {
        let total = entries.len();
        let mut consumed = 0usize;
        let mut rest = entries.into_iter().peekable();
        while rest.peek().is_some() {
            let Mode::Shared(routing) = &mut self.mode else {
                break;
            };
            let consumers = &self.consumers;
            let active = self.active;
            let Some(i) = routing
                .assignor
                .next_consumer(slots, |i| usable_permits(&consumers[i], active) > 0)
            else {
                break;
            };
            let avail = self.consumers[i].available_permits();
            let cap = self.cfg.max_round_robin_batch.max(1);
            let limit = avail.max(1);
            let mut take = Vec::with_capacity(cap.min(total - consumed));
            let mut msgs = 0i64;
            while let Some(e) = rest.peek() {
                let n = i64::from(e.meta.messages());
                if !take.is_empty() && (msgs + n > limit || take.len() >= cap) {
                    break;
                }
                msgs += n;
                if let Some(e) = rest.next() {
                    take.push(e);
                }
            }
            consumed += take.len();
            self.send_to(i, take, &[], &[]);
        }
        for e in rest {
            self.replay.add(e.position, 0, None);
        }
    }
}

/// The entries of a Shared batch to assign: a later chunk of a message whose first chunk came
/// back undelivered ([`SharedRouting::awaiting_first`]) goes back to replay unless that first
/// chunk comes before it in this batch. Forgets the messages whose first chunk is neither in
/// replay nor in the batch (acked, or dropped by a cursor move): their chunks go as before.
fn hold_for_first_chunks(
    routing: &mut SharedRouting,
    replay: &mut ReplaySet<Position, ConsumerId>,
    entries: Vec<Entry>,
) -> Vec<Entry> {
    routing.awaiting_first.retain(|(_, first)| {
        replay.contains(*first) || entries.iter().any(|e| e.position == *first)
    });
    // The awaited messages whose first chunk this batch has (their later chunks follow it).
    let mut seen: Vec<String> = Vec::new();
    let mut out = Vec::with_capacity(entries.len());
    for e in entries {
        let waiting = e.meta.chunk.as_ref().filter(|c| {
            routing.awaiting_first.iter().any(|(u, _)| *u == c.uuid) && !seen.contains(&c.uuid)
        });
        match waiting {
            Some(c) if c.chunk_id == 0 => seen.push(c.uuid.clone()),
            Some(_) => {
                replay.add(e.position, 0, None);
                continue;
            }
            None => {}
        }
        out.push(e);
    }
    out
}
