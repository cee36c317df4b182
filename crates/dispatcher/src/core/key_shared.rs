//! Key_Shared routing: selector, draining, chunk and hash pins.

use super::*;

pub(super) struct KeyShared {
    pub(super) cfg: KeySharedConfig,
    pub(super) selector: BoxedSelector,
    pub(super) draining: Option<Arc<DrainingHashes<ConsumerId>>>,
    /// uuid → consumer that received chunk 0 of a half-delivered chunked message.
    pub(super) pins: AHashMap<String, (ConsumerId, u32)>,
    /// hash → (consumer, open chunked messages of that hash on it): while a chunked message of
    /// a key is half-delivered, every later entry of the key follows it to that consumer, so
    /// the client completes the messages in position order (a chunked message counts at its
    /// last chunk) and nothing waits for something queued behind it.
    pub(super) hash_pins: AHashMap<u32, (ConsumerId, u32)>,
    /// Hash → time it was first refused by a draining rule (draining timeout only).
    pub(super) blocked_since: AHashMap<u32, u64>,
}

impl KeyShared {
    pub(super) fn ordered(&self) -> bool {
        !self.cfg.allow_out_of_order
    }
}

/// Key_Shared chunk pins: chunk 0 of a multi-chunk message pins its uuid (and its hash) to the
/// consumer, the last chunk unpins them.
pub(super) fn note_chunk_sent(ks: &mut KeyShared, e: &Entry, c: ConsumerId, hash: u32) {
    let Some(ch) = &e.meta.chunk else { return };
    if ch.num_chunks <= 1 || ch.chunk_id >= ch.num_chunks || ch.uuid.is_empty() {
        return;
    }
    if ch.chunk_id == 0 {
        match ks.pins.insert(ch.uuid.clone(), (c, hash)) {
            None => {
                let p = ks.hash_pins.entry(hash).or_insert((c, 0));
                p.0 = c;
                p.1 += 1;
            }
            // A re-sent chunk 0 re-pins the message (and its hash) to the new consumer.
            Some(_) => {
                if let Some(p) = ks.hash_pins.get_mut(&hash) {
                    p.0 = c;
                }
            }
        }
    } else if ch.chunk_id + 1 == ch.num_chunks {
        if let Some((_, h)) = ks.pins.remove(&ch.uuid) {
            unpin_hash(ks, h);
        }
    }
}

pub(super) fn unpin_hash(ks: &mut KeyShared, h: u32) {
    if let Some(p) = ks.hash_pins.get_mut(&h) {
        p.1 = p.1.saturating_sub(1);
        if p.1 == 0 {
            ks.hash_pins.remove(&h);
        }
    }
}

impl Dispatcher {
    pub(super) fn force_release_expired(&mut self, now: u64) {
        let Some(timeout) = self.cfg.draining_timeout else {
            return;
        };
        let Some(ks) = self.mode.key_shared_mut() else {
            return;
        };
        let Some(dr) = ks.draining.clone() else {
            return;
        };
        let mut next: Option<u64> = None;
        let mut released = 0u64;
        ks.blocked_since.retain(|hash, since| {
            let Some(e) = dr.get(*hash) else { return false };
            if now.saturating_sub(*since) < timeout {
                let due = since.saturating_add(timeout);
                next = Some(next.map_or(due, |n: u64| n.min(due)));
                return true;
            }
            warn!(hash = *hash, owner = %e.owner, pending = e.ref_count, "draining timeout: hash force-released; per-key order is no longer guaranteed for it");
            for _ in 0..e.ref_count {
                match dr.reduce_ref_count(e.owner, *hash, false) {
                    Ok(Reduced::Released { .. }) | Ok(Reduced::NotDraining) | Err(_) => break,
                    Ok(Reduced::Decremented { .. }) => {}
                }
            }
            released += 1;
            false
        });
        self.counters.draining_force_released += released;
        self.timers.draining = next;
    }

    /// The sticky-key hash (slot) of an entry under the current selector; 0 on Shared.
    pub fn entry_hash(&self, entry: &Entry) -> u32 {
        match self.mode.key_shared() {
            Some(ks) => {
                let m = &entry.meta;
                let f = KeyFields {
                    ordering_key: m.ordering_key.as_deref(),
                    partition_key: m.partition_key.as_deref(),
                    partition_key_b64: m.partition_key_b64,
                    producer_name: m.producer_name.as_deref(),
                    sequence_id: m.sequence_id,
                };
                slot(key_hash31(&sticky_key_bytes(&f)), ks.selector.key_range())
            }
            None => 0,
        }
    }
    pub(super) fn dispatch_key_shared(
        &mut self,
        now: u64,
        entries: Vec<Entry>,
        from_replay: bool,
        has_more: bool,
        min_replay_at_read: Option<Position>,
    ) {
        let ordered = self.mode.key_shared().is_some_and(|k| k.ordered());
        if !from_replay && ordered {
            let first = self.replay.first();
            let earlier = match (first, min_replay_at_read) {
                (Some(f), Some(m)) => f < m,
                (Some(_), None) => true,
                _ => false,
            };
            if earlier {
                // Something earlier entered replay while this read was in flight: park the
                // whole result in replay so the earlier positions go first.
                self.counters.read_results_discarded += 1;
                self.read.discarded_read = true;
                debug!(
                    entries = entries.len(),
                    "read result discarded: an earlier position entered replay meanwhile"
                );
                for e in entries {
                    let h = self.entry_hash(&e);
                    self.replay.add(e.position, h, None);
                }
                return;
            }
        }
        let mut snapshot: Vec<i64> = self
            .consumers
            .iter()
            .map(|c| self.available_permits(c))
            .collect();
        for c in &mut self.consumers {
            c.blocked_by_hash = false;
        }
        let n = entries.len();
        let nc = self.consumers.len();
        const HELD: u32 = u32::MAX;
        let mut targets: Vec<bool> = vec![false; nc];
        let mut counts: Vec<usize> = vec![0; nc];
        let mut decision: Vec<u32> = Vec::with_capacity(n);
        let mut hashes: Vec<u32> = Vec::with_capacity(n);
        let mut pins: Vec<bool> = Vec::new();
        let mut blocked: AHashSet<u32> = AHashSet::new();
        let mut dispatched = 0usize;
        let draining_on = self.mode.key_shared().is_some_and(|k| k.draining.is_some());
        // Pass 1: decide per entry (entries held back go to replay with their hash).
        // Chunk pins decided in this batch (chunk 0 accepted into a send group) and messages
        // whose chunk 0 was held back in this batch.
        let mut batch_pins: AHashMap<&str, ConsumerId> = AHashMap::new();
        let mut batch_hash_pins: AHashMap<u32, ConsumerId> = AHashMap::new();
        let mut held_uuids: AHashSet<&str> = AHashSet::new();
        // Pinned continuation chunks are ordered per (consumer, hash), not behind the hash's
        // other entries: their message started before them, on that consumer.
        let mut pinned_blocked: AHashSet<(ConsumerId, u32)> = AHashSet::new();
        // Ordered nack: nacked entries accepted in this batch (later entries of their key in
        // the batch may follow them); any other earlier nacked entry of a key holds it.
        let holds = ordered && self.replay.has_holds();
        let mut going_nacked: Vec<Position> = Vec::new();
        for (k, e) in entries.iter().enumerate() {
            let hash = self.entry_hash(e);
            hashes.push(hash);
            let chunk =
                e.meta.chunk.as_ref().filter(|c| {
                    c.num_chunks > 1 && c.chunk_id < c.num_chunks && !c.uuid.is_empty()
                });
            let continuation = chunk.is_some_and(|c| c.chunk_id > 0);
            if chunk.is_some_and(|c| c.chunk_id > 0 && held_uuids.contains(c.uuid.as_str())) {
                // Its chunk 0 was held back in this batch: follow it to replay.
                self.replay.add(e.position, hash, None);
                decision.push(HELD);
                continue;
            }
            // A continuation chunk follows the consumer that received chunk 0; any other entry
            // of a key with a half-delivered chunked message follows that message.
            // An entry held back under a pin keeps it (the replay pick chose it for that
            // consumer, and that consumer still holds the key).
            let stored = if from_replay {
                self.replay
                    .pinned_of(e.position)
                    .filter(|c| self.find(*c).is_some())
            } else {
                None
            };
            let pin = match stored {
                Some(c) => Some(c),
                None => match chunk {
                    Some(c) if c.chunk_id > 0 => match batch_pins.get(c.uuid.as_str()) {
                        Some(p) => Some(*p),
                        None => self.chunk_pin(e, now),
                    },
                    _ => batch_hash_pins
                        .get(&hash)
                        .copied()
                        .or_else(|| self.hash_pin(hash)),
                },
            };
            fn hold<'a>(held: &mut AHashSet<&'a str>, chunk: Option<&'a cursor::ChunkMeta>) {
                if let Some(c) = chunk.filter(|c| c.chunk_id == 0) {
                    held.insert(c.uuid.as_str());
                }
            }
            let blocked_here = match pin {
                Some(pc) => pinned_blocked.contains(&(pc, hash)),
                None => !blocked.is_empty() && blocked.contains(&hash),
            } || (holds
                && hash != 0
                && (from_replay || pin.is_some())
                && self.replay.held_before(hash, e.position, &going_nacked));
            if blocked_here {
                // Only a continuation chunk keeps its pin in replay; other entries re-resolve
                // the key's live pin (it ends with the half-delivered message).
                self.replay
                    .add(e.position, hash, pin.filter(|_| continuation));
                hold(&mut held_uuids, chunk);
                decision.push(HELD);
                continue;
            }
            let selected = self.mode.key_shared().and_then(|k| k.selector.select(hash));
            let Some(t) = pin.or(selected).and_then(|t| self.find(t)) else {
                blocked.insert(hash);
                self.replay.add(e.position, hash, None);
                hold(&mut held_uuids, chunk);
                decision.push(HELD);
                continue;
            };
            targets[t] = true;
            let verdict = if snapshot[t] <= 0 {
                None
            } else {
                let gate = if from_replay {
                    Gate::ReplayPick
                } else {
                    Gate::NormalRead
                };
                let v = match pin {
                    // A continuation chunk only waits for earlier pinned entries of its key on
                    // its consumer (its message started first); any other pinned entry waits
                    // for every earlier entry of its key (e.g. a nacked one).
                    Some(pc) => {
                        let behind = if continuation {
                            self.replay.contains_pinned(pc, hash)
                        } else {
                            self.replay.contains_hash(hash)
                        };
                        if gate == Gate::NormalRead && behind {
                            Verdict::BehindReplay
                        } else {
                            Verdict::Allow
                        }
                    }
                    None => self.can_dispatch(gate, self.consumers[t].id, hash),
                };
                Some(v)
            };
            match verdict {
                Some(Verdict::Allow) => {
                    snapshot[t] -= i64::from(e.meta.messages());
                    if holds && from_replay && self.replay.first_held(hash).is_some() {
                        going_nacked.push(e.position);
                    }
                    if pin.is_some() && selected != pin && draining_on {
                        if pins.is_empty() {
                            pins = vec![false; n];
                        }
                        pins[k] = true;
                    }
                    if let Some(c) = chunk.filter(|c| c.chunk_id == 0) {
                        batch_pins.insert(c.uuid.as_str(), self.consumers[t].id);
                        batch_hash_pins.insert(hash, self.consumers[t].id);
                    }
                    decision.push(t as u32);
                    counts[t] += 1;
                    dispatched += 1;
                }
                other => {
                    if ordered || chunk.is_some() {
                        blocked.insert(hash);
                    }
                    if let Some(pc) = pin {
                        pinned_blocked.insert((pc, hash));
                    }
                    if matches!(other, Some(Verdict::Draining)) {
                        self.note_draining_block(now, hash);
                    }
                    if other.is_some() && !from_replay {
                        self.consumers[t].blocked_by_hash = true;
                    }
                    self.replay
                        .add(e.position, hash, pin.filter(|_| continuation));
                    hold(&mut held_uuids, chunk);
                    decision.push(HELD);
                }
            }
        }
        // Pass 2: group per consumer (exact capacities) and send.
        let mut groups: Vec<(Vec<Entry>, Vec<u32>, Vec<bool>)> = counts
            .iter()
            .map(|&c| (Vec::with_capacity(c), Vec::with_capacity(c), Vec::new()))
            .collect();
        for (k, e) in entries.into_iter().enumerate() {
            let t = decision[k];
            if t == HELD {
                continue;
            }
            let g = &mut groups[t as usize];
            g.0.push(e);
            g.1.push(hashes[k]);
            if !pins.is_empty() {
                g.2.push(pins[k]);
            }
        }
        for (i, (es, hs, ps)) in groups.into_iter().enumerate() {
            if !es.is_empty() {
                self.send_to(i, es, &hs, &ps);
            }
        }
        // Look-ahead (Pulsar §9.3): nothing went out, yet someone could take more.
        if dispatched == 0 && !from_replay && self.replay.len() < self.look_ahead_limit() {
            let someone =
                self.consumers.iter().enumerate().any(|(i, c)| {
                    (c.blocked_by_hash || !targets[i]) && self.available_permits(c) > 0
                });
            if someone && has_more {
                self.counters.look_ahead_triggers += 1;
                self.read.look_ahead_next = true;
                debug!(
                    replay = self.replay.len(),
                    "look-ahead: reading past blocked keys"
                );
            }
        }
    }

    pub(super) fn note_draining_block(&mut self, now: u64, hash: u32) {
        let Some(timeout) = self.cfg.draining_timeout else {
            return;
        };
        let Some(ks) = self.mode.key_shared_mut() else {
            return;
        };
        ks.blocked_since.entry(hash).or_insert(now);
        let due = now.saturating_add(timeout);
        if self.timers.draining.is_none_or(|t| t > due) {
            let earliest = ks.blocked_since.values().min().copied().unwrap_or(now);
            self.timers.draining = Some(earliest.saturating_add(timeout));
        }
    }

    /// The consumer holding a half-delivered chunked message of this hash, if connected.
    pub(super) fn hash_pin(&self, hash: u32) -> Option<ConsumerId> {
        let ks = self.mode.key_shared()?;
        if ks.hash_pins.is_empty() {
            return None;
        }
        let (c, _) = ks.hash_pins.get(&hash)?;
        self.find(*c).map(|_| *c)
    }

    /// Key_Shared chunk routing: the consumer a continuation chunk must follow, if its chunk 0
    /// was sent and that consumer is still connected. A continuation without a pin (an orphan,
    /// e.g. after a restart) is routed by its hash like any entry, with a WARN and a counter.
    pub(super) fn chunk_pin(&mut self, e: &Entry, _now: u64) -> Option<ConsumerId> {
        let ch = e.meta.chunk.as_ref()?;
        if ch.chunk_id == 0 || ch.chunk_id >= ch.num_chunks || ch.uuid.is_empty() {
            return None;
        }
        let ks = self.mode.key_shared()?;
        match ks.pins.get(ch.uuid.as_str()) {
            Some((c, _)) if self.find(*c).is_some() => Some(*c),
            _ => {
                self.counters.orphan_chunks += 1;
                warn!(uuid = %ch.uuid, chunk_id = ch.chunk_id, num_chunks = ch.num_chunks, "orphan chunk on Key_Shared routed by its key");
                None
            }
        }
    }
}
