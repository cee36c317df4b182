//! The consumer state machine: broker input (`connect`, `on_message`), application input
//! (`receive`, `ack`, `nack`), time (`on_timer`) and the command queue (`poll_command`).

use std::collections::{BTreeSet, VecDeque};

use crate::hash::{HashMap, HashSet};

use tracing::{debug, trace, warn};

use crate::chunks::Chunks;
use crate::config::{ConfigError, ConsumerConfig};
use crate::gate::{Arrival, Gate};
use crate::trackers::{AckTimeouts, NackTracker};
use crate::types::{
    BatchInfo, ClientStats, Command, Delivered, EntryId, IncomingMessage, MessageId, RedeliverEntry,
};

/// Most entries in one `RedeliverUnacked` command (Pulsar groups redeliveries by 1000).
const REDELIVER_GROUP: usize = 1000;
/// Most uuids of chunked messages given back for lack of room that are remembered.
const GIVEN_BACK_MAX: usize = 1000;
/// Fewest recently acked ids remembered to drop late duplicates (see [`Consumer::on_message`]).
const RECENT_ACKS_MIN: usize = 1000;

mod chunk_input;

/// Why [`Consumer::on_message`] rejected a message. The message is dropped (its permit is
/// returned, it is not acked) and counted in `invalid_messages`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    /// Chunk metadata does not add up (`num_chunks == 0`, `chunk_id >= num_chunks` or an
    /// empty uuid).
    #[error("invalid chunk metadata for {id}: chunk {chunk_id} of {num_chunks}")]
    InvalidChunk {
        /// The message.
        id: MessageId,
        /// Its chunk id.
        chunk_id: u32,
        /// Its chunk count.
        num_chunks: u32,
    },
    /// Batch metadata does not add up (`size == 0`, `index >= size`, or `id.batch_index`
    /// differs from `batch.index`), or a message is both chunked and batched.
    #[error("invalid batch metadata for {0}")]
    InvalidBatch(MessageId),
}

/// Why [`Consumer::ack`] refused an id.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AckError {
    /// The id is not in the application's hands: never handed out, already acked, or nacked.
    #[error("message {0} is not in the application's hands")]
    NotOutstanding(MessageId),
}

/// Why [`Consumer::nack`] refused an id.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NackError {
    /// The id is not in the application's hands: never handed out, already acked, or nacked.
    #[error("message {0} is not in the application's hands")]
    NotOutstanding(MessageId),
}

struct Queued {
    msg: Delivered,
    epoch: u64,
}

struct Outstanding {
    key: Option<Vec<u8>>,
    chunk_ids: Vec<MessageId>,
    batch: Option<BatchInfo>,
    redelivery_count: u32,
}

/// Acked indexes of a batch entry that still has unacked ones (sized by the acks, not by
/// the batch size the broker claims).
struct BatchAcks {
    size: u32,
    acked: BTreeSet<u32>,
}

/// A sans-IO consumer: feed it broker messages and application calls, drain its commands.
///
/// See the crate documentation for the behaviour and a complete example.
pub struct Consumer {
    cfg: ConsumerConfig,
    epoch: u64,
    queue: VecDeque<Queued>,
    permits_to_return: u32,
    /// Permits granted by `Flow`s on the current connection.
    granted: u64,
    /// Permits the broker charged on the current connection: one per message it pushed (each
    /// chunk, each index of a batch entry), whatever became of it.
    charged: u64,
    chunks: Chunks,
    nacks: NackTracker,
    ack_timeouts: AckTimeouts,
    gate: Gate,
    outstanding: HashMap<MessageId, Outstanding>,
    batches: HashMap<EntryId, BatchAcks>,
    recent_acks: HashSet<MessageId>,
    recent_order: VecDeque<MessageId>,
    /// Chunked messages given back for lack of room (the last [`GIVEN_BACK_MAX`]): their later
    /// chunks go back too, until the time stored.
    given_back: HashMap<String, u64>,
    given_back_order: VecDeque<String>,
    commands: VecDeque<Command>,
    stats: ClientStats,
}

impl Consumer {
    /// A disconnected consumer; call [`connect`](Self::connect) before feeding messages.
    pub fn new(config: ConsumerConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Consumer {
            ack_timeouts: AckTimeouts::new(config.ack_timeout, config.ack_timeout_tick),
            cfg: config,
            epoch: 0,
            queue: VecDeque::new(),
            permits_to_return: 0,
            granted: 0,
            charged: 0,
            chunks: Chunks::default(),
            nacks: NackTracker::default(),
            gate: Gate::default(),
            outstanding: HashMap::default(),
            batches: HashMap::default(),
            recent_acks: HashSet::default(),
            recent_order: VecDeque::new(),
            given_back: HashMap::default(),
            given_back_order: VecDeque::new(),
            commands: VecDeque::new(),
            stats: ClientStats::default(),
        })
    }

    /// The configuration in use.
    pub fn config(&self) -> &ConsumerConfig {
        &self.cfg
    }

    /// A (re)connection to the broker: clears the receive queue and any partial chunked
    /// messages (the broker redelivers everything unacked), sends `Flow(receiver_queue_size)`
    /// (nothing for a zero-queue consumer) and returns the new epoch, which every
    /// [`IncomingMessage`] of this connection must carry. Messages in the application's hands
    /// stay there and can still be acked.
    pub fn connect(&mut self, _now: u64) -> u64 {
        self.epoch += 1;
        self.queue.clear();
        self.chunks.clear();
        self.gate.on_reconnect();
        self.permits_to_return = 0;
        self.granted = 0;
        self.charged = 0;
        debug!(epoch = self.epoch, "consumer connected");
        if self.cfg.receiver_queue_size > 0 {
            self.flow(self.cfg.receiver_queue_size);
        }
        self.epoch
    }

    fn flow(&mut self, n: u32) {
        self.stats.flow_permits_sent += u64::from(n);
        self.granted += u64::from(n);
        self.commands.push_back(Command::Flow(n));
    }

    /// Returns `n` permits: accumulated, and sent once at least half the queue size is due.
    fn return_permits(&mut self, n: u32) {
        if self.cfg.receiver_queue_size == 0 || n == 0 {
            return;
        }
        self.permits_to_return += n;
        let threshold = (self.cfg.receiver_queue_size / 2).max(1);
        if self.permits_to_return >= threshold {
            let p = std::mem::take(&mut self.permits_to_return);
            self.flow(p);
        }
    }

    fn redeliver_entry(&self, entry: EntryId) -> RedeliverEntry {
        let acked_indexes = self
            .batches
            .get(&entry)
            .map(|b| b.acked.iter().copied().collect())
            .unwrap_or_default();
        RedeliverEntry {
            entry,
            acked_indexes,
        }
    }

    fn redeliver_unacked(&mut self, mut entries: Vec<EntryId>) {
        entries.sort_unstable();
        entries.dedup();
        for group in entries.chunks(REDELIVER_GROUP) {
            let specs: Vec<_> = group.iter().map(|&e| self.redeliver_entry(e)).collect();
            self.stats.redeliveries_requested += specs.len() as u64;
            debug!(entries = specs.len(), "redeliver unacked");
            self.commands.push_back(Command::RedeliverUnacked(specs));
        }
    }

    /// Queues an ack; merged into the previous command when that is an undrained `Ack`.
    fn send_ack(&mut self, ids: Vec<MessageId>) {
        if ids.is_empty() {
            return;
        }
        if let Some(Command::Ack(prev)) = self.commands.back_mut() {
            prev.extend(ids);
        } else {
            self.commands.push_back(Command::Ack(ids));
        }
    }

    /// A message (or one chunk, or one message of a batch entry) pushed by the broker.
    ///
    /// Messages of an old epoch are dropped silently (counted). Chunks are reassembled; a
    /// non-final chunk returns its permit at once. In ordered mode a message of a key whose
    /// earlier message was nacked and not re-sent yet is released straight back.
    ///
    /// A copy of a message the application acked recently (one of the last
    /// `max(1000, 2 × receiver_queue_size)` acks) is dropped when it reaches the head of the
    /// queue, with its permit returned and its ack sent again (the first may have died with a
    /// connection), like Pulsar's ack-grouping duplicate check. Without this, nacking such a
    /// copy would hold its key for a message the broker no longer has. Copies of acked batch
    /// indexes are dropped (and re-acked) the same way.
    pub fn on_message(&mut self, now: u64, mut msg: IncomingMessage) -> Result<(), MessageError> {
        if self.epoch == 0 || msg.epoch != self.epoch {
            self.stats.dropped_old_epoch += 1;
            trace!(id = %msg.id, epoch = msg.epoch, current = self.epoch, "message from an old connection dropped");
            return Ok(());
        }
        self.charged += 1;
        // Where this message's entry started in the connection's permit sequence (a batch
        // entry is pushed index by index; a chunked message counts from its chunk 0).
        let seq = self
            .charged
            .saturating_sub(msg.batch.map_or(0, |b| u64::from(b.index)));
        if let Err(e) = validate(&msg) {
            self.stats.invalid_messages += 1;
            warn!(id = %msg.id, error = %e, "malformed message dropped");
            self.return_permits(1);
            return Err(e);
        }
        self.stats.received += 1;
        trace!(id = %msg.id, redelivery_count = msg.redelivery_count, "message received");
        let already_acked = msg.already_acked;
        let (delivered, seq) = match msg.chunk.take() {
            None => (
                Delivered {
                    id: msg.id,
                    key: msg.key,
                    payload: msg.payload,
                    publish_time: msg.publish_time,
                    redelivery_count: msg.redelivery_count,
                    batch: msg.batch,
                    chunk_ids: Vec::new(),
                },
                seq,
            ),
            Some(info) => match self.on_chunk(now, msg, &info) {
                Some(d) => d,
                None => return Ok(()),
            },
        };
        self.enqueue(delivered, seq, already_acked);
        Ok(())
    }

    fn enqueue(&mut self, d: Delivered, seq: u64, already_acked: bool) {
        if let (true, Some(b)) = (already_acked, d.batch) {
            // Acked before (perhaps by another consumer): count it as acked here, so the
            // entry's whole-entry ack goes out once the application acked the rest.
            self.stats.dropped_already_acked += 1;
            trace!(id = %d.id, "batch index acked before this delivery; skipped");
            self.record_batch_index_ack(d.id.entry(), b.size, b.index);
            self.return_permits(1);
            return;
        }
        if let Some(i) = d.batch.map(|b| b.index) {
            if let Some(b) = self.batches.get(&d.id.entry()) {
                if b.acked.contains(&i) {
                    self.stats.dropped_already_acked += 1;
                    trace!(id = %d.id, "batch index already acked; dropped and acked again");
                    // The earlier ack may have died with a connection; acks are idempotent.
                    self.send_ack(vec![d.id]);
                    self.return_permits(1);
                    return;
                }
            }
        }
        if self.cfg.ordered_nack {
            if let Some(key) = &d.key {
                let first = d.chunk_ids.first().copied().unwrap_or(d.id);
                let (arrival, ended) = self.gate.on_arrival(key, d.id, first, seq);
                if ended > 0 {
                    debug!(id = %d.id, seq, ended, "blockers of the key went to another consumer; they no longer hold it");
                }
                if arrival == Arrival::Release {
                    debug!(id = %d.id, "later message of a held key released on arrival");
                    self.gate.block(key, d.id, true, self.granted);
                    let entries = entries_of(&d);
                    self.release(vec![entries], 1);
                    return;
                }
            }
        }
        self.queue.push_back(Queued {
            msg: d,
            epoch: self.epoch,
        });
    }

    /// Removes the queued messages matching `pred`, in queue order.
    fn take_queued(&mut self, pred: impl Fn(&Delivered) -> bool) -> Vec<Queued> {
        if !self.queue.iter().any(|q| pred(&q.msg)) {
            return Vec::new();
        }
        let mut taken = Vec::new();
        let mut kept = VecDeque::with_capacity(self.queue.len());
        for q in std::mem::take(&mut self.queue) {
            if pred(&q.msg) {
                taken.push(q);
            } else {
                kept.push_back(q);
            }
        }
        self.queue = kept;
        taken
    }

    /// Sends one `Release` for these messages' entries and returns `permits` permits.
    fn release(&mut self, entries: Vec<Vec<EntryId>>, permits: u32) {
        let mut all: Vec<EntryId> = entries.into_iter().flatten().collect();
        all.sort_unstable();
        all.dedup();
        self.stats.released += permits as u64;
        if !all.is_empty() {
            let specs = all.iter().map(|&e| self.redeliver_entry(e)).collect();
            self.commands.push_back(Command::Release(specs));
        }
        self.return_permits(permits);
    }

    /// Hands the application the next message it may process, if any.
    ///
    /// In ordered mode a message of a key waits while an earlier message of that key is nacked
    /// and not yet acked (the nacked message itself, once redelivered, is next); with
    /// `max_unacked_per_key` it waits while the application holds that many of its key. Other
    /// keys are not blocked by a waiting one. Each message taken returns one permit. A
    /// zero-queue consumer that finds nothing sends `Flow(1)` (once until a message arrives).
    pub fn receive(&mut self, now: u64) -> Option<Delivered> {
        let gated = self.gated();
        let q = loop {
            let max = self.cfg.max_unacked_per_key;
            let pos = self.queue.iter().position(|q| match &q.msg.key {
                Some(k) if gated => self.gate.eligible(k, q.msg.id, max),
                _ => true,
            });
            let q = pos.and_then(|i| self.queue.remove(i));
            match q {
                // A copy queued before the application acked the original.
                Some(q) if self.recent_acks.contains(&q.msg.id) => {
                    self.stats.dropped_already_acked += 1;
                    trace!(id = %q.msg.id, "copy of an acked message dropped and acked again");
                    // The earlier ack may have died with a connection; acks are idempotent. A
                    // batch entry whose last index was acked is acked again as a whole.
                    let whole = q.msg.id.entry();
                    let whole = MessageId::new(whole.ledger_id, whole.entry_id);
                    let ids = if !q.msg.chunk_ids.is_empty() {
                        q.msg.chunk_ids
                    } else if q.msg.id.batch_index.is_some() && self.recent_acks.contains(&whole) {
                        vec![whole]
                    } else {
                        vec![q.msg.id]
                    };
                    let repeat = matches!(self.commands.back(), Some(Command::Ack(prev)) if prev.last() == ids.last());
                    if !repeat {
                        self.send_ack(ids);
                    }
                    if q.epoch == self.epoch {
                        self.return_permits(1);
                    }
                }
                other => break other,
            }
        };
        let Some(q) = q else {
            // Zero queue: one permit out at a time. The broker charges a batch entry its whole
            // message count, so the balance can be negative: the Flow repays the debt too, or
            // the broker would never send again.
            if self.cfg.receiver_queue_size == 0 && self.epoch > 0 && self.granted <= self.charged {
                let debt = self.charged - self.granted;
                let n = u32::try_from(debt.saturating_add(1)).unwrap_or(u32::MAX);
                if debt > 0 {
                    debug!(
                        debt,
                        "zero-queue consumer repays the permits a batch entry overdrew"
                    );
                }
                self.flow(n);
            }
            return None;
        };
        let d = q.msg;
        let gated = self.gated();
        let fresh = self
            .outstanding
            .insert(
                d.id,
                Outstanding {
                    // Only the gate needs the key back at ack/nack time.
                    key: if gated { d.key.clone() } else { None },
                    chunk_ids: d.chunk_ids.clone(),
                    batch: d.batch,
                    redelivery_count: d.redelivery_count,
                },
            )
            .is_none();
        if let (true, Some(k)) = (gated, &d.key) {
            self.gate
                .on_handed(k, d.id, fresh, self.cfg.max_unacked_per_key.is_some());
        }
        self.ack_timeouts.add(now, d.id);
        self.stats.delivered += 1;
        trace!(id = %d.id, "message handed to the application");
        if q.epoch == self.epoch {
            self.return_permits(1);
        }
        Some(d)
    }

    /// The application finished `id`: sends the ack (all chunk ids of a chunked message; a
    /// batch-index ack, or the entry ack once every index of the entry is acked).
    ///
    /// Acking a later message of a key while an earlier message of that key is nacked and not
    /// yet acked is an application ordering bug no broker can see: the ack is still performed
    /// (refusing it would only cause a duplicate) and counted in `out_of_order_acks` with a
    /// `warn` event.
    pub fn ack(&mut self, _now: u64, id: MessageId) -> Result<(), AckError> {
        let out = self
            .outstanding
            .remove(&id)
            .ok_or(AckError::NotOutstanding(id))?;
        if let Some(k) = &out.key {
            if self
                .gate
                .on_left_hands(k, id, true, self.cfg.max_unacked_per_key.is_some())
            {
                self.stats.out_of_order_acks += 1;
                warn!(id = %id, "ack of a later message while an earlier message of its key is nacked and not yet acked");
            }
        }
        self.ack_timeouts.remove(id);
        self.stats.acks += 1;
        self.remember_ack(id);
        if !out.chunk_ids.is_empty() {
            self.send_ack(out.chunk_ids);
            return Ok(());
        }
        let (Some(b), Some(i)) = (out.batch, id.batch_index) else {
            self.send_ack(vec![id]);
            return Ok(());
        };
        if !self.record_batch_index_ack(id.entry(), b.size, i) {
            self.send_ack(vec![id]);
        }
        Ok(())
    }

    /// Records index `index` of the batch entry `entry` (`size` messages) as acked. Once every
    /// index is, the whole entry is acked (remembered, its nack forgotten, the ack sent) and
    /// true is returned.
    fn record_batch_index_ack(&mut self, entry: EntryId, size: u32, index: u32) -> bool {
        let st = self.batches.entry(entry).or_insert_with(|| BatchAcks {
            size,
            acked: BTreeSet::new(),
        });
        st.acked.insert(index);
        if (st.acked.len() as u64) < u64::from(st.size) {
            return false;
        }
        self.batches.remove(&entry);
        self.nacks.remove(entry);
        let whole = MessageId::new(entry.ledger_id, entry.entry_id);
        self.remember_ack(whole);
        self.send_ack(vec![whole]);
        true
    }

    /// The application failed `id` and wants it again after the nack delay (or backoff).
    ///
    /// Pulsar mode: the message's entry (all chunk entries of a chunked message) is scheduled
    /// and sent in one `RedeliverUnacked` when due. Ordered mode: a `Nack { entries, delay }` is
    /// sent at once (the broker holds the key for the delay), every later message of the key
    /// waiting in the queue is removed and given back in one `Release` (their permits
    /// returned), and no later message of the key is handed out until `id` is acked.
    pub fn nack(&mut self, now: u64, id: MessageId) -> Result<(), NackError> {
        let out = self
            .outstanding
            .remove(&id)
            .ok_or(NackError::NotOutstanding(id))?;
        if let Some(k) = &out.key {
            self.gate
                .on_left_hands(k, id, false, self.cfg.max_unacked_per_key.is_some());
        }
        self.ack_timeouts.remove(id);
        self.stats.nacks += 1;
        let entries = if out.chunk_ids.is_empty() {
            vec![id.entry()]
        } else {
            out.chunk_ids.iter().map(MessageId::entry).collect()
        };
        let delay = self.cfg.nack_delay_for(out.redelivery_count);
        debug!(id = %id, delay, ordered = self.cfg.ordered_nack, "message nacked");
        if self.cfg.ordered_nack {
            self.ordered_give_back(now, id, out.key.as_deref(), entries, delay);
        } else {
            self.schedule_nack(now, entries, delay);
        }
        Ok(())
    }

    /// Whether the key gate is in use (ordered nack or a per-key limit).
    fn gated(&self) -> bool {
        self.cfg.ordered_nack || self.cfg.max_unacked_per_key.is_some()
    }

    fn remember_ack(&mut self, id: MessageId) {
        let cap = RECENT_ACKS_MIN.max(2 * self.cfg.receiver_queue_size as usize);
        if self.recent_acks.insert(id) {
            self.recent_order.push_back(id);
        }
        while self.recent_order.len() > cap {
            if let Some(old) = self.recent_order.pop_front() {
                self.recent_acks.remove(&old);
            }
        }
    }

    fn schedule_nack(&mut self, now: u64, entries: Vec<EntryId>, delay: u64) {
        if self.cfg.ordered_nack {
            let due = self.cfg.truncate(now.saturating_add(delay));
            let specs = entries.iter().map(|&e| self.redeliver_entry(e)).collect();
            self.commands.push_back(Command::Nack {
                entries: specs,
                delay: due.saturating_sub(now),
            });
            return;
        }
        let due = self.cfg.truncate(now.saturating_add(delay));
        for e in entries {
            self.nacks.add(e, due);
        }
    }

    /// Ordered mode: `id` (key `key`) goes back to the broker with `delay`; later messages of
    /// the key in the queue are released.
    fn ordered_give_back(
        &mut self,
        now: u64,
        id: MessageId,
        key: Option<&[u8]>,
        entries: Vec<EntryId>,
        delay: u64,
    ) {
        let mut released = Vec::new();
        let mut permits = 0;
        if let Some(k) = key {
            self.gate.block(k, id, false, self.granted);
            let later = self.take_queued(|m| m.key.as_deref() == Some(k) && m.id > id);
            for q in later {
                self.gate.block(k, q.msg.id, true, self.granted);
                if q.epoch == self.epoch {
                    permits += 1;
                }
                // Messages of the nacked entries come back with the nack itself.
                let es: Vec<_> = entries_of(&q.msg)
                    .into_iter()
                    .filter(|e| !entries.contains(e))
                    .collect();
                released.push(es);
            }
        }
        self.schedule_nack(now, entries, delay);
        if permits > 0 || !released.is_empty() {
            debug!(id = %id, released = released.len(), "later messages of a nacked key released");
            self.release(released, permits);
        }
    }

    /// Fires every timer due at `now`: incomplete chunked messages expire (their chunks are
    /// acked), ack timeouts redeliver, due nacks are sent in one `RedeliverUnacked`.
    pub fn on_timer(&mut self, now: u64) {
        if let Some(after) = self.cfg.expire_incomplete_chunked_after {
            for (uuid, ids) in self.chunks.expire(now, after) {
                self.stats.expired_chunked += 1;
                warn!(uuid = %uuid, chunks = ids.len(), "incomplete chunked message expired; acking its chunks");
                self.send_ack(ids);
            }
        }
        let expired = self.ack_timeouts.take_expired(now);
        if !expired.is_empty() {
            self.on_ack_timeout(now, expired);
        }
        let due = self.nacks.take_due(now);
        if !due.is_empty() {
            self.redeliver_unacked(due);
        }
    }

    fn on_ack_timeout(&mut self, now: u64, ids: Vec<MessageId>) {
        self.stats.ack_timeouts += ids.len() as u64;
        debug!(messages = ids.len(), "ack timeout expired");
        let mut plain = Vec::new();
        for id in ids {
            let (key, entries) = match self.outstanding.get(&id) {
                Some(o) if !o.chunk_ids.is_empty() => (
                    o.key.clone(),
                    o.chunk_ids.iter().map(MessageId::entry).collect(),
                ),
                Some(o) => (o.key.clone(), vec![id.entry()]),
                None => (None, vec![id.entry()]),
            };
            // Copies already back in the queue are dropped; the redelivery replaces them.
            let epoch = self.epoch;
            let permits = self
                .take_queued(|m| m.id == id)
                .iter()
                .filter(|q| q.epoch == epoch)
                .count() as u32;
            self.return_permits(permits);
            match key {
                Some(k) if self.cfg.ordered_nack && self.outstanding.contains_key(&id) => {
                    self.ordered_give_back(now, id, Some(&k), entries, 0);
                }
                _ => plain.extend(entries),
            }
        }
        if !plain.is_empty() {
            self.redeliver_unacked(plain);
        }
    }

    /// When [`on_timer`](Self::on_timer) next has work, if ever.
    pub fn next_timer(&self) -> Option<u64> {
        let chunk = self
            .cfg
            .expire_incomplete_chunked_after
            .and_then(|a| self.chunks.next_expiry(a));
        [chunk, self.ack_timeouts.next(), self.nacks.next()]
            .into_iter()
            .flatten()
            .min()
    }

    /// The broker dropped `entry` without an ack (admin skip, clear-backlog, expiry, backlog
    /// eviction) and will never send it again; an adapter that learns this calls it so the
    /// client stops waiting. A key held by a nack of a message of that entry is released,
    /// pending nack redeliveries and tracked orphan chunks of it are cancelled, queued copies
    /// are removed (permits returned) and its batch-ack state is forgotten. Messages of it in
    /// the application's hands stay there. Returns whether the consumer knew the entry.
    pub fn on_dropped_by_broker(&mut self, _now: u64, entry: EntryId) -> bool {
        let mut known = self.gate.unblock_entry(entry);
        known |= self.nacks.remove(entry);
        known |= self.batches.remove(&entry).is_some();
        let outstanding = &self.outstanding;
        self.ack_timeouts
            .remove_entry(entry, |id| outstanding.contains_key(id));
        let copies = self.take_queued(|m| {
            m.id.entry() == entry || m.chunk_ids.iter().any(|c| c.entry() == entry)
        });
        known |= !copies.is_empty();
        let epoch = self.epoch;
        let permits = copies.iter().filter(|q| q.epoch == epoch).count() as u32;
        self.return_permits(permits);
        known |= self.outstanding.keys().any(|id| id.entry() == entry);
        if known {
            debug!(entry = %entry, "entry dropped by the broker");
        }
        known
    }

    /// The next command for the broker, in order. Drain after every call.
    pub fn poll_command(&mut self) -> Option<Command> {
        self.commands.pop_front()
    }

    /// Counters and gauges.
    pub fn stats(&self) -> ClientStats {
        ClientStats {
            epoch: self.epoch,
            queued: self.queue.len(),
            outstanding: self.outstanding.len(),
            pending_chunked: self.chunks.len(),
            held_keys: self.gate.held_keys(),
            permits_to_return: self.permits_to_return,
            ..self.stats.clone()
        }
    }

    /// Entries scheduled for a Pulsar-mode nack redelivery (a gauge, for tests and metrics).
    pub fn pending_nacks(&self) -> usize {
        self.nacks.len()
    }
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("config", &self.cfg)
            .field("stats", &self.stats())
            .field("pending_commands", &self.commands.len())
            .finish_non_exhaustive()
    }
}

fn entries_of(d: &Delivered) -> Vec<EntryId> {
    if d.chunk_ids.is_empty() {
        vec![d.id.entry()]
    } else {
        d.chunk_ids.iter().map(MessageId::entry).collect()
    }
}

fn validate(m: &IncomingMessage) -> Result<(), MessageError> {
    if let Some(c) = &m.chunk {
        if c.num_chunks == 0 || c.chunk_id >= c.num_chunks || c.uuid.is_empty() {
            return Err(MessageError::InvalidChunk {
                id: m.id,
                chunk_id: c.chunk_id,
                num_chunks: c.num_chunks,
            });
        }
        if m.batch.is_some() || m.id.batch_index.is_some() {
            return Err(MessageError::InvalidBatch(m.id));
        }
    }
    match m.batch {
        Some(b) if b.size == 0 || b.index >= b.size || m.id.batch_index != Some(b.index) => {
            Err(MessageError::InvalidBatch(m.id))
        }
        None if m.id.batch_index.is_some() => Err(MessageError::InvalidBatch(m.id)),
        _ => Ok(()),
    }
}
