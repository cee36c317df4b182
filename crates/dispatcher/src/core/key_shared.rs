//! Key_Shared routing: selector, draining, chunk and hash pins.

use super::*;

pub(super) struct KeySharedRouting {
    pub(super) cfg: KeySharedConfig,
    pub(super) selector: BoxedSelector,
    pub(super) draining: Option<Arc<DrainingHashes<ConsumerId>>>,
    /// Key-serial counts (`max_unacked_per_key` > 0).
    pub(super) key_serial: Option<Arc<KeySerial>>,
    /// Chunk and key pins of half-delivered chunked messages (bounded, see [`ChunkPins`]).
    pub(super) pins: ChunkPins,
    /// Hash → time it was first refused by a draining rule (draining timeout only).
    pub(super) blocked_since: AHashMap<u32, u64>,
}

impl KeySharedRouting {
    pub(super) fn ordered(&self) -> bool {
        !self.cfg.allow_out_of_order
    }
}

/// Key_Shared chunk pins: chunk 0 of a multi-chunk message pins its uuid (and its hash) to the
/// consumer, the last chunk unpins them.
pub(super) fn note_chunk_sent(
    key_shared: &mut KeySharedRouting,
    e: &Entry,
    c: ConsumerId,
    hash: u32,
) {
    let Some(ch) = multi_chunk(e) else { return };
    if ch.chunk_id == 0 {
        key_shared.pins.pin(&ch.uuid, c, hash);
    } else if ch.chunk_id + 1 == ch.num_chunks {
        key_shared.pins.last_chunk_sent(&ch.uuid);
    }
}

/// The chunk metadata of a multi-chunk message's entry, if well formed
/// ([`ChunkRef::is_well_formed`]); single-chunk and malformed entries route as plain entries.
pub(super) fn multi_chunk(e: &Entry) -> Option<&cursor::ChunkMeta> {
    e.meta.chunk.as_ref().filter(|c| {
        c.num_chunks > 1
            && ChunkRef {
                uuid: &c.uuid,
                chunk_id: c.chunk_id,
                num_chunks: c.num_chunks,
            }
            .is_well_formed()
    })
}

/// One Key_Shared batch being routed: the per-batch tables that each entry's decision reads
/// and updates (an entry's fate depends on the earlier entries of its key in the batch).
pub(super) struct BatchRouting<'e> {
    pub(super) from_replay: bool,
    /// Ordered mode (not allow-out-of-order).
    pub(super) ordered: bool,
    /// Ordered mode with nack holds in replay.
    pub(super) holds: bool,
    /// Draining is on (a pinned entry sent while its hash maps elsewhere counts in draining).
    pub(super) draining_on: bool,
    /// Entries in the batch.
    pub(super) len: usize,
    /// Per consumer: permits left in this batch.
    pub(super) permits: Vec<i64>,
    /// Per consumer: some entry of the batch chose it.
    pub(super) targeted: Vec<bool>,
    /// Per consumer: entries accepted for it.
    pub(super) counts: Vec<usize>,
    /// Per entry: the consumer index, `None` when held back.
    pub(super) decisions: Vec<Option<usize>>,
    /// Per entry: its hash.
    pub(super) hashes: Vec<u32>,
    /// Per entry (empty when none): sent under a pin while its hash maps elsewhere.
    pub(super) pinned: Vec<bool>,
    /// Hashes held back in this batch: later entries of them wait too.
    pub(super) blocked: AHashSet<u32>,
    /// Pinned entries are ordered per (consumer, hash), not behind the hash's other entries:
    /// their message started before them, on that consumer.
    pub(super) pinned_blocked: AHashSet<(ConsumerId, u32)>,
    /// Chunk-0 pins decided in this batch (uuid → consumer).
    pub(super) batch_pins: AHashMap<&'e str, ConsumerId>,
    /// Key pins decided in this batch (hash → consumer of a chunk 0 accepted here).
    pub(super) batch_hash_pins: AHashMap<u32, ConsumerId>,
    /// Messages whose chunk 0 was held back in this batch.
    pub(super) held_uuids: AHashSet<&'e str>,
    /// Ordered nack: nacked entries accepted in this batch (later entries of their key in the
    /// batch may follow them).
    pub(super) resent_nacked: Vec<Position>,
    /// Entries accepted.
    pub(super) dispatched: usize,
}

/// The per-batch tables' buffers, kept between batches (a batch of 100 entries would otherwise
/// allocate five vectors).
#[derive(Default)]
pub(super) struct RouteScratch {
    permits: Vec<i64>,
    targeted: Vec<bool>,
    counts: Vec<usize>,
    decisions: Vec<Option<usize>>,
    hashes: Vec<u32>,
}

impl<'e> BatchRouting<'e> {
    /// A batch's tables, in the buffers of `scratch` (the caller puts them back when the batch
    /// is done).
    pub(super) fn new(
        d: &Dispatcher,
        scratch: RouteScratch,
        from_replay: bool,
        len: usize,
    ) -> Self {
        let ordered = d.mode.key_shared().is_some_and(|k| k.ordered());
        let nc = d.consumers.len();
        let mut permits = scratch.permits;
        permits.clear();
        permits.extend(d.consumers.iter().map(|c| d.available_permits(c)));
        let mut targeted = scratch.targeted;
        targeted.clear();
        targeted.resize(nc, false);
        let mut counts = scratch.counts;
        counts.clear();
        counts.resize(nc, 0);
        let mut decisions = scratch.decisions;
        decisions.clear();
        decisions.reserve(len);
        let mut hashes = scratch.hashes;
        hashes.clear();
        hashes.reserve(len);
        BatchRouting {
            from_replay,
            ordered,
            holds: ordered && d.replay.has_holds(),
            draining_on: d.mode.key_shared().is_some_and(|k| k.draining.is_some()),
            len,
            permits,
            targeted,
            counts,
            decisions,
            hashes,
            pinned: Vec::new(),
            blocked: AHashSet::new(),
            pinned_blocked: AHashSet::new(),
            batch_pins: AHashMap::new(),
            batch_hash_pins: AHashMap::new(),
            held_uuids: AHashSet::new(),
            resent_nacked: Vec::new(),
            dispatched: 0,
        }
    }

    /// A held-back chunk 0 holds its later chunks in this batch.
    fn hold(&mut self, chunk: Option<&'e cursor::ChunkMeta>) {
        if let Some(c) = chunk.filter(|c| c.chunk_id == 0) {
            self.held_uuids.insert(c.uuid.as_str());
        }
    }
}

impl Dispatcher {
    pub(super) fn force_release_expired(&mut self, now: u64) {
        let Some(timeout) = self.cfg.draining_timeout else {
            return;
        };
        let Some(key_shared) = self.mode.key_shared_mut() else {
            return;
        };
        let Some(dr) = key_shared.draining.clone() else {
            return;
        };
        let mut next: Option<u64> = None;
        let mut released = 0u64;
        key_shared.blocked_since.retain(|hash, since| {
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
            Some(key_shared) => {
                let m = &entry.meta;
                let f = KeyFields {
                    ordering_key: m.ordering_key.as_deref(),
                    partition_key: m.partition_key.as_deref(),
                    partition_key_b64: m.partition_key_b64,
                    producer_name: m.producer_name.as_deref(),
                    sequence_id: m.sequence_id,
                };
                slot(
                    key_hash31(&sticky_key_bytes(&f)),
                    key_shared.selector.key_range(),
                )
            }
            None => 0,
        }
    }
    /// Routes one Key_Shared batch: [`route_entry`](Self::route_entry) decides each entry in
    /// position order (the decision for entry E and consumer C is made there), then
    /// [`send_routed`](Self::send_routed) groups the accepted entries per consumer and sends.
    pub(super) fn dispatch_key_shared(
        &mut self,
        now: u64,
        entries: Vec<Entry>,
        from_replay: bool,
        has_more: bool,
        min_replay_at_read: Option<Position>,
    ) {
        if !from_replay && self.discard_if_overtaken(&entries, min_replay_at_read) {
            for e in entries {
                let h = self.entry_hash(&e);
                self.replay.add(e.position, h, None);
            }
            return;
        }
        for c in &mut self.consumers {
            c.blocked_by_hash = false;
        }
        let scratch = std::mem::take(&mut self.route_scratch);
        let mut batch = BatchRouting::new(self, scratch, from_replay, entries.len());
        for e in &entries {
            let d = self.route_entry(now, &mut batch, e);
            batch.decisions.push(d);
        }
        let BatchRouting {
            decisions,
            hashes,
            pinned,
            counts,
            targeted,
            dispatched,
            permits,
            ..
        } = batch;
        self.send_routed(entries, &decisions, &hashes, &pinned, &counts);
        if dispatched == 0 && !from_replay {
            self.look_ahead_if_stuck(&targeted, has_more);
        }
        // The buffers, for the next batch.
        self.route_scratch = RouteScratch {
            permits,
            targeted,
            counts,
            decisions,
            hashes,
        };
    }

    /// Ordered mode: something earlier than this read's first replay position entered replay
    /// while the read was in flight. The whole result then goes to replay (the caller does it)
    /// so the earlier positions go first.
    fn discard_if_overtaken(
        &mut self,
        entries: &[Entry],
        min_replay_at_read: Option<Position>,
    ) -> bool {
        let ordered = self.mode.key_shared().is_some_and(|k| k.ordered());
        if !ordered {
            return false;
        }
        let earlier = match (self.replay.first(), min_replay_at_read) {
            (Some(f), Some(m)) => f < m,
            (Some(_), None) => true,
            _ => false,
        };
        if earlier {
            self.counters.read_results_discarded += 1;
            self.read.discarded_read = true;
            debug!(
                entries = entries.len(),
                "read result discarded: an earlier position entered replay meanwhile"
            );
        }
        earlier
    }

    /// THE Key_Shared routing decision for one entry of a batch: the index of the consumer it
    /// goes to, or `None` when it is held back (it is then already in replay, with its hash and,
    /// for a continuation chunk, its pin).
    ///
    /// In order: a continuation whose chunk 0 was held in this batch follows it; the pin (stored
    /// in replay, the chunk's uuid pin, or the key's half-delivered-message pin) beats the
    /// selector; an entry behind a blocked or nack-held entry of its key waits; then the target
    /// needs permits and the dispatch predicate ([`can_dispatch`](Self::can_dispatch)) at the
    /// read or replay gate. Held entries go to replay right away: later decisions of the same
    /// batch read the replay set.
    pub(super) fn route_entry<'e>(
        &mut self,
        now: u64,
        b: &mut BatchRouting<'e>,
        e: &'e Entry,
    ) -> Option<usize> {
        let hash = self.entry_hash(e);
        b.hashes.push(hash);
        let chunk = multi_chunk(e);
        let continuation = chunk.is_some_and(|c| c.chunk_id > 0);
        if chunk.is_some_and(|c| c.chunk_id > 0 && b.held_uuids.contains(c.uuid.as_str())) {
            // Its chunk 0 was held back in this batch: follow it to replay.
            self.replay.add(e.position, hash, None);
            return None;
        }
        let pin = self.pin_for(now, b, e, hash, chunk);
        let blocked_here = match pin {
            Some(pc) => b.pinned_blocked.contains(&(pc, hash)),
            None => !b.blocked.is_empty() && b.blocked.contains(&hash),
        } || (b.holds
            && hash != 0
            && (b.from_replay || pin.is_some())
            && self.replay.held_before(hash, e.position, &b.resent_nacked));
        if blocked_here {
            // Only a continuation chunk keeps its pin in replay; other entries re-resolve
            // the key's live pin (it ends with the half-delivered message).
            self.replay
                .add(e.position, hash, pin.filter(|_| continuation));
            b.hold(chunk);
            return None;
        }
        let selected = self.mode.key_shared().and_then(|k| k.selector.select(hash));
        let Some(t) = pin.or(selected).and_then(|t| self.find(t)) else {
            b.blocked.insert(hash);
            self.replay.add(e.position, hash, None);
            b.hold(chunk);
            return None;
        };
        b.targeted[t] = true;
        let verdict = if b.permits[t] <= 0 {
            None
        } else {
            Some(self.pinned_or_predicate(b.from_replay, t, pin, continuation, hash))
        };
        if verdict == Some(Verdict::Allow) {
            b.permits[t] -= i64::from(e.meta.messages());
            if b.holds && b.from_replay && self.replay.first_held(hash).is_some() {
                b.resent_nacked.push(e.position);
            }
            if pin.is_some() && selected != pin && b.draining_on {
                if b.pinned.is_empty() {
                    b.pinned = vec![false; b.len];
                }
                b.pinned[b.decisions.len()] = true;
            }
            if let Some(c) = chunk.filter(|c| c.chunk_id == 0) {
                b.batch_pins.insert(c.uuid.as_str(), self.consumers[t].id);
                b.batch_hash_pins.insert(hash, self.consumers[t].id);
            }
            b.counts[t] += 1;
            b.dispatched += 1;
            return Some(t);
        }
        if b.ordered || chunk.is_some() {
            b.blocked.insert(hash);
        }
        if let Some(pc) = pin {
            b.pinned_blocked.insert((pc, hash));
        }
        if verdict == Some(Verdict::Draining) {
            self.note_draining_block(now, hash);
        }
        if verdict.is_some() && !b.from_replay {
            self.consumers[t].blocked_by_hash = true;
        }
        self.replay
            .add(e.position, hash, pin.filter(|_| continuation));
        b.hold(chunk);
        None
    }

    /// The consumer an entry must follow, if any: a pin stored with it in replay (the replay
    /// pick chose it for that consumer, which still holds the key), else a continuation chunk's
    /// chunk-0 consumer (decided in this batch or earlier), else the consumer holding a
    /// half-delivered chunked message of its key.
    fn pin_for(
        &mut self,
        now: u64,
        b: &BatchRouting<'_>,
        e: &Entry,
        hash: u32,
        chunk: Option<&cursor::ChunkMeta>,
    ) -> Option<ConsumerId> {
        let stored = if b.from_replay {
            self.replay
                .pinned_of(e.position)
                .filter(|c| self.find(*c).is_some())
        } else {
            None
        };
        match stored {
            Some(c) => Some(c),
            None => match chunk {
                Some(c) if c.chunk_id > 0 => match b.batch_pins.get(c.uuid.as_str()) {
                    Some(p) => Some(*p),
                    None => self.chunk_pin(e, now),
                },
                _ if b.batch_hash_pins.is_empty() => self.hash_pin(hash),
                _ => b
                    .batch_hash_pins
                    .get(&hash)
                    .copied()
                    .or_else(|| self.hash_pin(hash)),
            },
        }
    }

    /// The verdict for a target with permits: a pinned entry skips the draining rule (its
    /// consumer already holds the key) but still queues behind replay on a normal read — a
    /// continuation chunk only behind earlier pinned entries of its key on its consumer (its
    /// message started first), any other pinned entry behind every earlier entry of its key;
    /// an unpinned entry asks the dispatch predicate.
    fn pinned_or_predicate(
        &self,
        from_replay: bool,
        t: usize,
        pin: Option<ConsumerId>,
        continuation: bool,
        hash: u32,
    ) -> Verdict {
        let gate = if from_replay {
            DispatchGate::ReplayPick
        } else {
            DispatchGate::NormalRead
        };
        match pin {
            Some(pc) => {
                let behind = if continuation {
                    self.replay.contains_pinned(pc, hash)
                } else {
                    self.replay.contains_hash(hash)
                };
                if gate == DispatchGate::NormalRead && behind {
                    Verdict::BehindReplay
                } else {
                    Verdict::Allow
                }
            }
            None => self.can_dispatch(gate, self.consumers[t].id, hash),
        }
    }

    /// The send step of a routed batch: groups the accepted entries per consumer (exact
    /// capacities, position order kept) and sends each group.
    fn send_routed(
        &mut self,
        entries: Vec<Entry>,
        decisions: &[Option<usize>],
        hashes: &[u32],
        pinned: &[bool],
        counts: &[usize],
    ) {
        let mut groups: Vec<(Vec<Entry>, Vec<u32>, Vec<bool>)> = counts
            .iter()
            .map(|&c| (Vec::with_capacity(c), Vec::with_capacity(c), Vec::new()))
            .collect();
        for (k, e) in entries.into_iter().enumerate() {
            let Some(t) = decisions[k] else { continue };
            let g = &mut groups[t];
            g.0.push(e);
            g.1.push(hashes[k]);
            if !pinned.is_empty() {
                g.2.push(pinned[k]);
            }
        }
        for (i, (es, hs, ps)) in groups.into_iter().enumerate() {
            if !es.is_empty() {
                self.send_to(i, es, &hs, &ps);
            }
        }
    }

    /// Look-ahead (Pulsar's `lookAheadAllowed`): a normal read sent nothing, yet a consumer
    /// with permits was blocked by a hash rule or not targeted at all: the next read skips the
    /// replay set and reads further, within the look-ahead limit.
    fn look_ahead_if_stuck(&mut self, targeted: &[bool], has_more: bool) {
        if self.replay.len() >= self.look_ahead_limit() {
            return;
        }
        let someone = self
            .consumers
            .iter()
            .enumerate()
            .any(|(i, c)| (c.blocked_by_hash || !targeted[i]) && self.available_permits(c) > 0);
        if someone && has_more {
            self.counters.look_ahead_triggers += 1;
            self.read.look_ahead_next = true;
            debug!(
                replay = self.replay.len(),
                "look-ahead: reading past blocked keys"
            );
        }
    }

    pub(super) fn note_draining_block(&mut self, now: u64, hash: u32) {
        let Some(timeout) = self.cfg.draining_timeout else {
            return;
        };
        let Some(key_shared) = self.mode.key_shared_mut() else {
            return;
        };
        key_shared.blocked_since.entry(hash).or_insert(now);
        let due = now.saturating_add(timeout);
        if self.timers.draining.is_none_or(|t| t > due) {
            let earliest = key_shared
                .blocked_since
                .values()
                .min()
                .copied()
                .unwrap_or(now);
            self.timers.draining = Some(earliest.saturating_add(timeout));
        }
    }

    /// The consumer holding a half-delivered chunked message of this hash, if connected.
    pub(super) fn hash_pin(&self, hash: u32) -> Option<ConsumerId> {
        let key_shared = self.mode.key_shared()?;
        let c = key_shared.pins.consumer_of_hash(hash)?;
        self.find(c).map(|_| c)
    }

    /// Key_Shared chunk routing: the consumer a continuation chunk must follow, if its chunk 0
    /// was sent and that consumer is still connected. A continuation without a pin (an orphan,
    /// e.g. after a restart) is routed by its hash like any entry, with a WARN and a counter.
    pub(super) fn chunk_pin(&mut self, e: &Entry, _now: u64) -> Option<ConsumerId> {
        let ch = multi_chunk(e).filter(|c| c.chunk_id > 0)?;
        let key_shared = self.mode.key_shared()?;
        match key_shared.pins.consumer_of(&ch.uuid) {
            Some(c) if self.find(c).is_some() => Some(c),
            _ => {
                self.counters.orphan_chunks += 1;
                warn!(uuid = %ch.uuid, chunk_id = ch.chunk_id, num_chunks = ch.num_chunks, "orphan chunk on Key_Shared routed by its key");
                None
            }
        }
    }
}
