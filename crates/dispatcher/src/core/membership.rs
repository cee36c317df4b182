//! Membership: consumers join and leave, flow permits, draining registration.

use super::*;

impl Dispatcher {
    pub(super) fn publish_registry(&self) {
        self.shared
            .set_consumers(self.consumers.iter().map(|c| c.shared.clone()).collect());
    }

    /// A consumer joins. On Key_Shared the selector places it and, when draining is required,
    /// every other consumer's pending acks whose hash moved to it start draining.
    pub fn handle_consumer_added(
        &mut self,
        now: u64,
        spec: ConsumerSpec,
    ) -> Result<(), AddConsumerError> {
        if self.closed {
            return Err(AddConsumerError::Closed);
        }
        if self.find(spec.id).is_some() {
            return Err(AddConsumerError::DuplicateConsumer(spec.id));
        }
        let mut adopted_from = None;
        if let (Some(want), Some(have)) = (spec.key_shared, self.mode.key_shared().map(|k| k.cfg)) {
            if self.consumers.is_empty() {
                if want != have {
                    self.adopt_key_shared(want);
                    adopted_from = Some(have);
                }
            } else if want.mode != have.mode {
                return Err(AddConsumerError::ModeMismatch {
                    subscription: have.mode,
                    consumer: spec.id,
                    requested: want.mode,
                });
            }
        }
        let impacted = match self.mode.key_shared_mut() {
            Some(key_shared) => {
                let info =
                    ConsumerInfo::with_ranges(spec.id, spec.name.clone(), spec.ranges.clone());
                match key_shared.selector.add_consumer(info) {
                    Ok(imp) => Some(imp),
                    Err(e) => {
                        // Unchanged after an error: back to the settings before the adoption.
                        if let Some(have) = adopted_from {
                            self.adopt_key_shared(have);
                        }
                        return Err(AddConsumerError::Selector(e));
                    }
                }
            }
            None => None,
        };
        if self.consumers.is_empty() {
            // As in Pulsar: the first consumer starts from a clean slate (the rewind was already
            // issued when the last consumer left).
            self.replay.clear();
            self.read.state.set_at_end(false);
        }
        let pending = PendingAcks::new(spec.id);
        // The send-time gate is passed per add (`send_gate`); removals drop draining references.
        if let Some(k) = self.mode.key_shared() {
            if k.draining.is_some() || k.key_serial.is_some() {
                let remove: pending_acks::Arc<
                    dyn pending_acks::RemoveHandler<PendingPos, ConsumerId>,
                > = pending_acks::Arc::new(DrainRemoveHandler {
                    draining: k.draining.clone(),
                    key_serial: k.key_serial.clone(),
                });
                pending.set_remove_handler(remove);
            }
        }
        let max_unacked = i64::from(self.cfg.max_unacked_per_consumer);
        let shared = Arc::new(ConsumerShared {
            id: spec.id,
            pending,
            limit: UnackedLimit::new(max_unacked),
        });
        let c = Consumer {
            id: spec.id,
            name: spec.name,
            priority: spec.priority,
            permits: 0,
            parked_permits: 0,
            shared,
            blocked_by_hash: false,
            paused: false,
        };
        let at = self.consumers.partition_point(|x| x.priority <= c.priority);
        debug!(consumer = %c.id, name = %c.name, priority = c.priority, "consumer added");
        self.consumers.insert(at, c);
        self.ids.insert(at, spec.id);
        self.publish_registry();
        if let Some(imp) = impacted {
            self.register_draining(&imp, spec.id);
        }
        self.repick_active(Some(spec.id));
        self.input_arrived();
        self.read_more(now);
        Ok(())
    }

    /// PIP-379 draining registration: for every consumer other than `changed`, pending acks
    /// whose hash lies in a range it lost start draining on it; pending acks whose hash came back
    /// to the consumer that drains it release that draining entry.
    pub(super) fn register_draining(
        &mut self,
        imp: &ImpactedConsumers<ConsumerId>,
        changed: ConsumerId,
    ) {
        let Some(dr) = self.mode.key_shared().and_then(|k| k.draining.clone()) else {
            return;
        };
        for (cid, ranges) in &imp.removed {
            if *cid == changed {
                continue;
            }
            let Some(i) = self.find(*cid) else { continue };
            let c = &self.consumers[i];
            // The lost slots as a bitmap (8 KiB): one bit test per pending entry instead of a
            // search of the ranges; the matching hashes are counted under one draining lock,
            // still inside the pending map's lock (an ack in between would remove an entry
            // whose reference is not counted yet, and the reference would outlive it).
            let lost = SlotBits::of(ranges);
            let n = c.shared.pending.fold_then(
                Vec::new(),
                |moved, pos, ack| {
                    if ack.hash == 0 {
                        warn!(consumer = %c.id, ledger = pos.0, entry = pos.1, "pending ack without hash on Key_Shared, not draining");
                        return;
                    }
                    if lost.contains(ack.hash) {
                        moved.push(ack.hash);
                    }
                },
                |moved| dr.recount_entries(c.id, moved),
            );
            debug!(consumer = %c.id, references = n, "draining registered");
        }
        for (cid, ranges) in &imp.added {
            if *cid == changed {
                continue;
            }
            let Some(i) = self.find(*cid) else { continue };
            let c = &self.consumers[i];
            c.shared.pending.for_each(|_, ack| {
                if ack.hash != 0
                    && ranges_contain(ranges, ack.hash)
                    && dr.get(ack.hash).is_some_and(|e| e.owner == c.id)
                {
                    let _ = dr.reduce_ref_count(c.id, ack.hash, false);
                }
            });
        }
    }

    /// A consumer leaves (close or disconnect). Its pending acks go to replay with their hash
    /// (their draining references drop without an unblock notification); on Shared its chunk
    /// pins are dropped. When it was the last consumer: replay, pins and draining are cleared
    /// and the next read is preceded by a [`DispatchCommand::Rewind`]. Unknown id: no-op, returns false.
    pub fn handle_consumer_removed(&mut self, now: u64, id: ConsumerId) -> bool {
        let Some(i) = self.find(id) else {
            return false;
        };
        let impacted = self
            .mode
            .key_shared_mut()
            .map(|key_shared| key_shared.selector.remove_consumer(id));
        let c = self.consumers.remove(i);
        self.ids.remove(i);
        self.publish_registry();
        let last = self.consumers.is_empty();
        let mut requeued = Vec::new();
        let mut debit = 0i64;
        c.shared.pending.for_each_and_close(|pos, ack| {
            debit += i64::from(ack.remaining);
            requeued.push((position_of(pos), ack.hash));
        });
        // The consumer is gone: nobody waits for its half-limit wake.
        let _ = c.shared.limit.debit(debit);
        self.shared.debit(debit);
        if let Mode::Shared(routing) = &mut self.mode {
            routing.assignor.remove_consumer(id);
        }
        if let Some(key_shared) = self.mode.key_shared_mut() {
            key_shared.pins.remove_consumer(id);
        }
        self.replay.unpin(|p| p == id);
        debug!(consumer = %id, requeued = requeued.len(), last, "consumer removed");
        if last {
            self.active = None;
            self.replay.clear();
            // The rewind re-reads every unacked entry, the delayed ones included.
            self.delayed.clear();
            self.timers.nack = None;
            if let Mode::Shared(routing) = &mut self.mode {
                routing.assignor.clear();
            }
            if let Some(key_shared) = self.mode.key_shared_mut() {
                key_shared.pins.clear();
                key_shared.blocked_since.clear();
                if let Some(dr) = &key_shared.draining {
                    dr.clear();
                }
            }
            self.shared.limit.reset();
            self.read.rewind_pending = true;
            self.read.state.set_at_end(false);
            self.read.look_ahead_next = false;
            self.read_more(now);
            return true;
        }
        for (p, h) in requeued {
            if self.mark_delete.is_none_or(|md| p > md) {
                self.replay.add(p, h, None);
            }
        }
        if let Some(imp) = impacted {
            self.register_draining(&imp, id);
        }
        if let Some(dr) = self.mode.key_shared().and_then(|k| k.draining.as_ref()) {
            dr.consumer_removed(id);
        }
        self.repick_active(None);
        self.input_arrived();
        self.read_more(now);
        true
    }

    /// A consumer grants `permits` more messages (a client Flow). While the consumer is blocked
    /// on unacked messages the permits are parked until it resumes. Unknown id: no-op, false.
    pub fn handle_flow(&mut self, now: u64, id: ConsumerId, permits: u32) -> bool {
        let Some(i) = self.find(id) else {
            return false;
        };
        // A settled replay stays settled if this consumer had usable permits when it settled
        // and still has (permits only grow by a flow, which would have unsettled it): every
        // entry waiting for it waits for something else than permits.
        let keep = self.read.replay_settled
            && !self.read.starved.contains(&id)
            && self.consumers[i].available_permits() > 0;
        let c = &mut self.consumers[i];
        if c.blocked() {
            c.parked_permits = c.parked_permits.saturating_add(i64::from(permits));
        } else {
            c.permits = c.permits.saturating_add(i64::from(permits));
        }
        trace!(consumer = %id, permits, total = c.permits, "flow");
        let resume = self.read.pick_resume;
        self.input_arrived();
        if keep {
            self.read.replay_settled = true;
            self.read.pick_resume = resume;
        }
        self.read_more(now);
        true
    }
}

/// A set of hash slots in [0, 65535] as a bitmap.
struct SlotBits(Box<[u64; 1024]>);

impl SlotBits {
    fn of(ranges: &[crate::HashRange]) -> SlotBits {
        let mut b = Box::new([0u64; 1024]);
        for r in ranges {
            let (start, end) = (r.start.min(65_535), r.end.min(65_535));
            for s in start..=end {
                b[(s >> 6) as usize] |= 1 << (s & 63);
            }
        }
        SlotBits(b)
    }

    fn contains(&self, slot: u32) -> bool {
        slot <= 65_535 && self.0[(slot >> 6) as usize] & (1 << (slot & 63)) != 0
    }
}
