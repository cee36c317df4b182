//! The assignor: round robin for plain entries, pins for chunked messages.

use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::Hash;

use tracing::{debug, trace, warn};

use crate::pins::PinTable;
use crate::round_robin::{fill_priority_order, PriorityRoundRobin};
use crate::types::{
    AssignEntry, Assignment, AssignorConfig, AssignorStats, ChunkRef, ConsumerSlot, OrphanPolicy,
};

/// Decides, for each entry of a batch, which consumer gets it or whether it goes back to replay.
///
/// Sans-IO and single-threaded (`&mut self`); time comes in as `now` (any unit, non-decreasing).
///
/// Rules, per entry in input order (each assigned entry decrements exactly its target's permits):
/// * **plain entry** (no chunk metadata): the next consumer of the [`PriorityRoundRobin`] among
///   those with permits left.
/// * **malformed chunk** (`chunk_id >= num_chunks`, `num_chunks == 0` or an empty uuid): a WARN,
///   [`AssignorStats::malformed_chunks`], then handled as a plain entry. Its uuid's pin (if any)
///   is neither followed nor changed.
/// * **chunk 0**: goes to the next round-robin consumer and pins its uuid to it. If the uuid is
///   already pinned, this is a redelivery of the message: the pin moves to the new consumer
///   ([`AssignorStats::pins_repinned`]). A message of a single chunk creates no pin (and releases
///   a leftover one).
/// * **chunk k > 0 with a pin**: goes to the pinned consumer; the last chunk releases the pin. If
///   that consumer has no permits left, the chunk goes to replay, and so does every later non-zero
///   chunk of the same uuid in this batch, so a consumer never gets chunk k+1 before chunk k.
/// * **stale pin**: the pinned consumer is not in `consumers` (disconnected without
///   [`remove_consumer`](Self::remove_consumer)): the pin is dropped with a WARN
///   ([`AssignorStats::stale_pins`]) and the chunk is handled as an orphan.
/// * **orphan chunk** (k > 0, no pin: chunk 0 was acknowledged before a restart, or its pin was
///   dropped or evicted): by default dispatched to the next round-robin consumer with a WARN and
///   [`AssignorStats::orphan_chunks`]; the client discards the incomplete message. It does not pin.
///   [`OrphanPolicy::Replay`] keeps Pulsar's legacy stall instead.
/// * Consumers with permits `<= 0` get nothing; once no consumer has permits, every remaining
///   entry goes to replay.
///
/// Pins are bounded: at the start of each call pins idle for more than `max_pin_age` are evicted,
/// at the end the least recently seen pins are evicted down to `max_pins` (WARN and counters).
///
/// Assumes, as Pulsar's Shared dispatcher guarantees, that replayed entries are read again before
/// newer entries, so a chunk held for replay comes back before the chunks that follow it.
#[derive(Debug)]
pub struct ChunkAssignor<C> {
    config: AssignorConfig,
    pins: PinTable<C>,
    rr: PriorityRoundRobin,
    stats: AssignorStats,
    epoch: u64,
    // Per-call scratch, reused across calls.
    permits: Vec<i64>,
    order: Vec<u32>,
    id_index: HashMap<C, u32, ahash::RandomState>,
    id_index_built: bool,
    doomed: Vec<u32>,
    /// The last pins a last chunk released, newest last, at most [`RELEASED_KEPT`], one per
    /// (message, consumer): what [`ChunkAssignor::last_chunk_returned`] may put back, as it was.
    released: std::collections::VecDeque<Released<C>>,
}

/// Released pins remembered for a last chunk whose delivery comes back.
const RELEASED_KEPT: usize = 64;

/// A pin a last chunk's assignment released (see [`ChunkAssignor::last_chunk_returned`]).
#[derive(Clone, Copy, Debug)]
struct Released<C> {
    /// The message's uuid hash.
    hash: u64,
    /// The consumer it was pinned to.
    consumer: C,
    /// The consumer the pin pointed at before its first chunk's last assignment moved it.
    previous: Option<C>,
}

impl<C: PartialEq> Released<C> {
    fn is(&self, hash: u64, consumer: C) -> bool {
        self.hash == hash && self.consumer == consumer
    }
}

/// A pin not yet in the table: chunk 0 of a message was just assigned to `consumer`, and the
/// chunks that come right after it in the batch, with its uuid, follow it there without a
/// table lookup each, the last one releasing the pin without it ever being inserted. The first
/// entry that does not follow (any other entry, a consumer out of permits, the end of the
/// call) closes it: the pin goes into the table then, as it would have at chunk 0. Nothing else
/// reads or changes pins in between, so the table, its recency order and the stats end up as
/// with an insert at chunk 0 and a follow per chunk.
#[derive(Clone, Copy, Debug)]
struct Open {
    /// Index into `consumers` of the pinned consumer, which got every entry of the message so
    /// far, the last one assigned included.
    consumer: usize,
    /// The uuid's hash, for the insert.
    hash: u64,
}

impl Open {
    /// Whether the pin route would send `ch` to the pinned consumer now: a later chunk of the
    /// same uuid (compared with the entry assigned last, which is this message's), while the
    /// consumer has permits.
    #[inline]
    fn takes<C, E: AssignEntry>(
        self,
        ch: ChunkRef<'_>,
        batch: &Batch<'_, C>,
        out: &Assignment<C, E>,
    ) -> bool {
        ch.chunk_id != 0
            && ch.is_well_formed()
            && batch.permits.get(self.consumer).is_some_and(|&p| p > 0)
            && out
                .per_consumer
                .get(self.consumer)
                .and_then(|(_, es)| es.last())
                .and_then(|e| e.chunk())
                .is_some_and(|prev| {
                    crate::pins::same_bytes(prev.uuid.as_bytes(), ch.uuid.as_bytes())
                })
    }
}

/// Per-call view of the consumers shared by the routing helpers.
struct Batch<'a, C> {
    consumers: &'a [ConsumerSlot<C>],
    order: &'a [u32],
    permits: &'a mut [i64],
    available: usize,
    /// Priority of the first consumer in priority order (the top level).
    top: i32,
}

impl<C: Copy> Batch<'_, C> {
    /// Next round-robin consumer with permits, as an index into `consumers`.
    #[inline(always)]
    fn next_default(&self, rr: &mut PriorityRoundRobin) -> Option<usize> {
        // Fast path (same answer as `pick`): the consumer at the cursor is on the top level and
        // has permits, so nothing can precede it. A cursor past the end wraps to the start, as
        // `pick` does.
        let mut c = rr.cursor;
        if c >= self.order.len() {
            c = 0;
        }
        if let Some(&i) = self.order.get(c) {
            let i = i as usize;
            if self.consumers[i].priority == self.top && self.permits[i] > 0 {
                rr.cursor = c + 1;
                return Some(i);
            }
        }
        self.next_default_slow(rr)
    }

    #[inline(never)]
    fn next_default_slow(&self, rr: &mut PriorityRoundRobin) -> Option<usize> {
        let consumers = self.consumers;
        let order = self.order;
        let permits = &*self.permits;
        rr.pick(
            order.len(),
            |p| consumers[order[p] as usize].priority,
            |p| permits[order[p] as usize] > 0,
        )
        .map(|p| order[p] as usize)
    }
}

impl<C: Copy + Eq + Hash + Debug> ChunkAssignor<C> {
    /// An assignor with no pins and zeroed stats.
    pub fn new(config: AssignorConfig) -> Self {
        ChunkAssignor {
            config,
            pins: PinTable::new(),
            rr: PriorityRoundRobin::new(),
            stats: AssignorStats::default(),
            epoch: 0,
            permits: Vec::new(),
            order: Vec::new(),
            id_index: HashMap::with_hasher(ahash::RandomState::with_seeds(1, 2, 3, 4)),
            id_index_built: false,
            doomed: Vec::new(),
            released: std::collections::VecDeque::new(),
        }
    }

    /// The settings this assignor was created with.
    pub fn config(&self) -> &AssignorConfig {
        &self.config
    }

    /// Assigns one batch. `consumers` is a snapshot of the consumers' permits and priorities for
    /// this batch; the result's `per_consumer` is aligned with it. See the type's doc for the
    /// rules. Never panics and never leaves an assignable entry behind.
    pub fn assign<E: AssignEntry>(
        &mut self,
        now: u64,
        entries: Vec<E>,
        consumers: &[ConsumerSlot<C>],
    ) -> Assignment<C, E> {
        let mut out = Assignment::new();
        self.assign_into(now, entries, consumers, &mut out);
        out
    }

    /// Like [`assign`](Self::assign), but fills `out` (cleared first), reusing its vectors, and
    /// takes any iterator of entries (for example `batch.drain(..)` or an iterator of
    /// references).
    pub fn assign_into<E, I>(
        &mut self,
        now: u64,
        entries: I,
        consumers: &[ConsumerSlot<C>],
        out: &mut Assignment<C, E>,
    ) where
        E: AssignEntry,
        I: IntoIterator<Item = E>,
    {
        self.epoch += 1;
        self.evict_idle(now);

        out.replay.clear();
        out.per_consumer.truncate(consumers.len());
        for (slot, c) in out.per_consumer.iter_mut().zip(consumers) {
            slot.0 = c.id;
            slot.1.clear();
        }
        for c in &consumers[out.per_consumer.len()..] {
            out.per_consumer.push((c.id, Vec::new()));
        }

        let mut permits = std::mem::take(&mut self.permits);
        let mut order = std::mem::take(&mut self.order);
        permits.clear();
        permits.extend(consumers.iter().map(|c| c.permits.max(0)));
        fill_priority_order(consumers, &mut order);
        self.id_index_built = false;
        let available = permits.iter().filter(|&&p| p > 0).count();
        let mut batch = Batch {
            consumers,
            order: &order,
            permits: &mut permits,
            available,
            top: order.first().map_or(0, |&i| consumers[i as usize].priority),
        };

        let mut entries = entries.into_iter();
        let mut next = self.round_robin_run(&mut entries, &mut batch, out);
        if next.is_none() {
            next = entries.next();
        }
        // A message whose chunk 0 was just assigned and whose pin is not in the table yet (see
        // `Open`); only ever the entry assigned last.
        let mut open: Option<Open> = None;
        while let Some(e) = next.take() {
            if batch.available == 0 {
                out.replay.push(e);
                break;
            }
            let chunk = e.chunk();
            let target = match (open, chunk) {
                (Some(o), Some(ch)) if o.takes(ch, &batch, out) => {
                    // The pin would send this chunk to the consumer of the chunk before it: the
                    // pinned consumer is in this batch and has permits, and nothing was held for
                    // replay this call (see `route_chunk`).
                    if ch.is_last() {
                        open = None;
                        self.stats.pins_released += 1;
                        self.note_released(o.hash, consumers[o.consumer].id, None);
                        debug!(uuid = %ch.uuid, consumer = ?consumers[o.consumer].id, "last chunk; pin released");
                    }
                    Some(o.consumer)
                }
                (_, None) => {
                    self.close(&mut open, now, consumers, out);
                    batch.next_default(&mut self.rr)
                }
                (_, Some(ch)) if !ch.is_well_formed() => {
                    warn!(
                        uuid = %ch.uuid,
                        chunk_id = ch.chunk_id,
                        num_chunks = ch.num_chunks,
                        "malformed chunk metadata; dispatching as a plain entry"
                    );
                    self.stats.malformed_chunks += 1;
                    self.close(&mut open, now, consumers, out);
                    batch.next_default(&mut self.rr)
                }
                (_, Some(ch)) => {
                    self.close(&mut open, now, consumers, out);
                    self.route_chunk(now, ch, &mut batch, &mut open)
                }
            };
            match target {
                Some(i) => {
                    trace!(consumer = ?consumers[i].id, "entry assigned");
                    batch.permits[i] -= 1;
                    if batch.permits[i] == 0 {
                        batch.available -= 1;
                    }
                    out.per_consumer[i].1.push(e);
                }
                None => {
                    trace!("entry put back for replay");
                    out.replay.push(e);
                }
            }
            next = entries.next();
        }
        self.close(&mut open, now, consumers, out);
        out.replay.extend(entries);
        if batch.available == 0 && !out.replay.is_empty() {
            debug!(
                replay = out.replay.len(),
                "no consumer has permits; rest of the batch put back for replay"
            );
        }

        self.stats.entries_assigned += out.assigned_len() as u64;
        self.stats.entries_replayed += out.replay.len() as u64;
        self.permits = permits;
        self.order = order;
        self.evict_over_count();
    }

    /// The batch's leading run of plain entries when it cannot run out of permits: every
    /// consumer on one priority level with at least `m` permits, so `m × n` round-robin picks
    /// give none of them more than `m` and each pick is simply the next consumer in the rotation
    /// (the answer `next_default` would give, without its checks and its permit update per
    /// entry). The permits are charged once, at the end of the run. Returns the entry that ended
    /// the run early (a chunk), for the general loop to route first. Out of line: inlined into
    /// `assign_into`, it changed the general loop's code, and both plain and chunked batches
    /// were slower (measured).
    #[inline(never)]
    fn round_robin_run<E, I>(
        &mut self,
        entries: &mut I,
        batch: &mut Batch<'_, C>,
        out: &mut Assignment<C, E>,
    ) -> Option<E>
    where
        E: AssignEntry,
        I: Iterator<Item = E>,
    {
        let order = batch.order;
        let n = order.len();
        let (Some(&first), Some(&last)) = (order.first(), order.last()) else {
            return None;
        };
        if batch.available != n
            || batch.consumers[first as usize].priority != batch.consumers[last as usize].priority
        {
            return None;
        }
        // The first entry decides before the permits are scanned: a batch that opens with a
        // chunk (a chunked stream) pays one look at it, nothing more.
        let first = entries.next()?;
        if first.chunk().is_some() {
            return Some(first);
        }
        // Every consumer has a permit (`available == n`), so the budget is at least `n`.
        let min = batch.permits.iter().copied().min().unwrap_or(0);
        let budget = usize::try_from(min).unwrap_or(0).saturating_mul(n);
        if budget == 0 {
            return Some(first);
        }
        let start = if self.rr.cursor >= n {
            0
        } else {
            self.rr.cursor
        };
        let (mut c, mut k, mut held) = (start, 0usize, None);
        let mut next = Some(first);
        while k < budget {
            let Some(e) = next.take().or_else(|| entries.next()) else {
                break;
            };
            if e.chunk().is_some() {
                held = Some(e);
                break;
            }
            out.per_consumer[order[c] as usize].1.push(e);
            c += 1;
            if c == n {
                c = 0;
            }
            k += 1;
        }
        // Position p of the rotation was picked k / n times, once more if it is among the
        // k % n positions from `start` on.
        let (each, extra) = (k / n, k % n);
        for (p, &i) in order.iter().enumerate() {
            let picked = each + usize::from((p + n - start) % n < extra);
            let left = &mut batch.permits[i as usize];
            *left -= picked as i64;
            if *left == 0 {
                batch.available -= 1;
            }
        }
        self.rr.cursor = if c == 0 { n } else { c };
        trace!(entries = k, "plain entries assigned round robin");
        held
    }

    /// Puts the open message's pin into the table (see [`Open`]): its uuid is the one of the
    /// entry assigned last, to the pinned consumer.
    #[inline]
    fn close<E: AssignEntry>(
        &mut self,
        open: &mut Option<Open>,
        now: u64,
        consumers: &[ConsumerSlot<C>],
        out: &Assignment<C, E>,
    ) {
        let Some(o) = open.take() else {
            return;
        };
        let last = out
            .per_consumer
            .get(o.consumer)
            .and_then(|(_, es)| es.last());
        if let (Some(ch), Some(c)) = (last.and_then(|e| e.chunk()), consumers.get(o.consumer)) {
            self.pins
                .insert(ch.uuid, o.hash, c.id, o.consumer as u32, now);
        }
    }

    /// Routes a well-formed chunk: `Some(consumer index)` or `None` for replay. The common cases
    /// (pin, follow, release) stay here; the rare ones are out of line. A new pin is not put into
    /// the table here but left in `open`, for the loop to follow or close.
    fn route_chunk(
        &mut self,
        now: u64,
        ch: ChunkRef<'_>,
        batch: &mut Batch<'_, C>,
        open: &mut Option<Open>,
    ) -> Option<usize> {
        // A first chunk is rarely for the most recently seen uuid: skip that shortcut for it.
        let (found, hash) = self.pins.lookup(ch.uuid, ch.chunk_id != 0);

        if ch.chunk_id == 0 {
            let i = batch.next_default(&mut self.rr)?;
            let consumer = batch.consumers[i].id;
            match found {
                None if !ch.is_last() => {
                    *open = Some(Open { consumer: i, hash });
                    self.stats.pins_created += 1;
                    debug!(uuid = %ch.uuid, num_chunks = ch.num_chunks, consumer = ?consumer, "uuid pinned");
                }
                None => {} // a single-chunk message needs no pin
                Some(p) => self.first_chunk_of_pinned(now, ch, p, i, consumer),
            }
            return Some(i);
        }

        if let Some(p) = found {
            self.pins.touch(p, now);
            let pin = self.pins.get(p);
            let (pinned, hint, held_epoch) = (pin.consumer, pin.hint, pin.held_epoch);
            let previous = pin.previous;
            if held_epoch != self.epoch {
                if let Some(i) = self.locate(batch.consumers, pinned, hint) {
                    if batch.permits[i] > 0 {
                        if ch.is_last() {
                            self.pins.remove(p);
                            self.stats.pins_released += 1;
                            let hash = self.pins.hash(ch.uuid);
                            self.note_released(hash, pinned, previous);
                            debug!(uuid = %ch.uuid, consumer = ?pinned, "last chunk; pin released");
                        } else {
                            self.pins.get_mut(p).hint = i as u32;
                        }
                        return Some(i);
                    }
                }
            }
            if !self.pinned_unavailable(ch, p, batch) {
                return None;
            }
        }
        self.orphan(ch, batch)
    }

    /// Chunk 0 of a uuid that is already pinned: a redelivery. A multi-chunk message re-pins to
    /// the chosen consumer; a single-chunk message releases the leftover pin.
    #[cold]
    #[inline(never)]
    fn first_chunk_of_pinned(&mut self, now: u64, ch: ChunkRef<'_>, p: u32, i: usize, consumer: C) {
        if ch.is_last() {
            self.pins.remove(p);
            self.stats.pins_released += 1;
            debug!(uuid = %ch.uuid, "pin released by a single-chunk message");
            return;
        }
        let pin = self.pins.get_mut(p);
        let previous = pin.consumer;
        pin.previous = Some(previous);
        pin.consumer = consumer;
        pin.hint = i as u32;
        self.pins.touch(p, now);
        self.stats.pins_repinned += 1;
        debug!(uuid = %ch.uuid, previous = ?previous, consumer = ?consumer, "first chunk redelivered; uuid re-pinned");
    }

    /// A later chunk whose pin cannot take it now. Returns `true` when the pin was stale (dropped;
    /// the chunk is then an orphan), `false` when the chunk goes to replay behind its message.
    #[cold]
    #[inline(never)]
    fn pinned_unavailable(&mut self, ch: ChunkRef<'_>, p: u32, batch: &Batch<'_, C>) -> bool {
        let pin = self.pins.get(p);
        let (pinned, hint) = (pin.consumer, pin.hint);
        if pin.held_epoch == self.epoch {
            self.stats.chunks_held_for_pin += 1;
            trace!(uuid = %ch.uuid, chunk_id = ch.chunk_id, "chunk follows an earlier chunk back to replay");
            return false;
        }
        if self.locate(batch.consumers, pinned, hint).is_some() {
            self.pins.get_mut(p).held_epoch = self.epoch;
            self.stats.chunks_held_for_pin += 1;
            debug!(uuid = %ch.uuid, chunk_id = ch.chunk_id, consumer = ?pinned, "pinned consumer has no permits; chunk put back for replay");
            return false;
        }
        warn!(uuid = %ch.uuid, chunk_id = ch.chunk_id, consumer = ?pinned, "pin points at a consumer that is not connected; pin dropped");
        self.pins.remove(p);
        self.stats.stale_pins += 1;
        true
    }

    /// A chunk with id > 0 and no (usable) pin.
    #[cold]
    #[inline(never)]
    fn orphan(&mut self, ch: ChunkRef<'_>, batch: &Batch<'_, C>) -> Option<usize> {
        match self.config.orphan_policy {
            OrphanPolicy::DispatchToDefault => {
                let i = batch.next_default(&mut self.rr)?;
                if ch.is_last() {
                    // This assignment released no pin: an older release of the same message's
                    // pin by this consumer (an earlier delivery of it) must not make the
                    // chunk's return pin it again.
                    let hash = self.pins.hash(ch.uuid);
                    let id = batch.consumers[i].id;
                    self.released.retain(|r| !r.is(hash, id));
                }
                warn!(
                    uuid = %ch.uuid,
                    chunk_id = ch.chunk_id,
                    num_chunks = ch.num_chunks,
                    consumer = ?batch.consumers[i].id,
                    "orphan chunk dispatched to default consumer"
                );
                self.stats.orphan_chunks += 1;
                Some(i)
            }
            OrphanPolicy::Replay => {
                warn!(
                    uuid = %ch.uuid,
                    chunk_id = ch.chunk_id,
                    num_chunks = ch.num_chunks,
                    "orphan chunk put back for replay (legacy policy: this stalls the subscription)"
                );
                self.stats.orphan_chunks_replayed += 1;
                None
            }
        }
    }

    /// Index of consumer `id` in `consumers`: the hint when it still matches, else a lookup in a
    /// per-call index built on first need.
    #[inline]
    fn locate(&mut self, consumers: &[ConsumerSlot<C>], id: C, hint: u32) -> Option<usize> {
        match consumers.get(hint as usize) {
            Some(c) if c.id == id => Some(hint as usize),
            _ => self.locate_slow(consumers, id),
        }
    }

    #[cold]
    #[inline(never)]
    fn locate_slow(&mut self, consumers: &[ConsumerSlot<C>], id: C) -> Option<usize> {
        if !self.id_index_built {
            self.id_index.clear();
            for (i, c) in consumers.iter().enumerate() {
                self.id_index.entry(c.id).or_insert(i as u32);
            }
            self.id_index_built = true;
        }
        self.id_index.get(&id).map(|&i| i as usize)
    }

    fn evict_idle(&mut self, now: u64) {
        while let Some(o) = self.pins.oldest() {
            let pin = self.pins.get(o);
            let idle = now.saturating_sub(pin.last_seen);
            if idle <= self.config.max_pin_age {
                break;
            }
            warn!(uuid = %pin.uuid, consumer = ?pin.consumer, idle, "pin evicted: its uuid was idle longer than max_pin_age");
            self.pins.remove(o);
            self.stats.pins_evicted_age += 1;
        }
    }

    fn evict_over_count(&mut self) {
        let cap = self.config.max_pins.clamp(1, (u32::MAX - 1) as usize);
        while self.pins.len() > cap {
            let Some(o) = self.pins.oldest() else { break };
            let pin = self.pins.get(o);
            warn!(uuid = %pin.uuid, consumer = ?pin.consumer, max_pins = cap, "pin evicted: more than max_pins pins");
            self.pins.remove(o);
            self.stats.pins_evicted_count += 1;
        }
    }

    /// The first chunk of `uuid`, assigned to `consumer`, never reached it (the shell refused
    /// the delivery, or the consumer was closing) and went back to replay: the pin its
    /// assignment made or moved is undone, so a pin keeps pointing at the consumer that last
    /// got the first chunk. A pin the assignment created is dropped; one it moved points back
    /// at the consumer it pointed at before. Returns whether a pin changed (none when the pin
    /// is not `consumer`'s: a later assignment moved it already).
    pub fn first_chunk_returned(&mut self, uuid: &str, consumer: C) -> bool {
        let (Some(p), _) = self.pins.lookup(uuid, false) else {
            return false;
        };
        let pin = self.pins.get_mut(p);
        if pin.consumer != consumer {
            return false;
        }
        match pin.previous.take() {
            Some(previous) => {
                pin.consumer = previous;
                pin.hint = 0;
                debug!(uuid, consumer = ?previous, "first chunk not delivered; pin moved back");
            }
            None => {
                self.pins.remove(p);
                debug!(uuid, "first chunk not delivered; its new pin dropped");
            }
        }
        true
    }

    /// The last chunk of `uuid`, assigned to `consumer` (which released the pin), never reached
    /// it and went back to replay: the message is half-delivered on `consumer` again, so it is
    /// pinned there again (at `now`), as the pin was before the release (a first chunk that
    /// then comes back too moves it back where that chunk's assignment found it). Returns
    /// whether a pin was made: none when the uuid has one, or when its assignment released
    /// none (an orphan last chunk; the last 64 releases are remembered).
    pub fn last_chunk_returned(&mut self, now: u64, uuid: &str, consumer: C) -> bool {
        let (found, hash) = self.pins.lookup(uuid, false);
        if found.is_some() {
            return false;
        }
        // Only a pin this chunk's assignment released (an orphan last chunk released none).
        let Some(k) = self.released.iter().position(|r| r.is(hash, consumer)) else {
            return false;
        };
        let previous = self.released.remove(k).and_then(|r| r.previous);
        let p = self.pins.insert(uuid, hash, consumer, 0, now);
        self.pins.get_mut(p).previous = previous;
        self.evict_over_count();
        debug!(uuid, consumer = ?consumer, "last chunk not delivered; pinned again");
        true
    }

    fn note_released(&mut self, hash: u64, consumer: C, previous: Option<C>) {
        // One record per (message, consumer): the latest release is the one a return undoes.
        self.released.retain(|r| !r.is(hash, consumer));
        if self.released.len() == RELEASED_KEPT {
            self.released.pop_front();
        }
        self.released.push_back(Released {
            hash,
            consumer,
            previous,
        });
    }

    /// Drops every pin to consumer `id` (call it when the consumer leaves); returns how many.
    /// The remaining chunks of those messages become orphans.
    pub fn remove_consumer(&mut self, id: C) -> usize {
        let mut doomed = std::mem::take(&mut self.doomed);
        doomed.clear();
        doomed.extend(
            self.pins
                .iter()
                .filter(|(_, p)| p.consumer == id)
                .map(|(i, _)| i),
        );
        for &i in &doomed {
            self.pins.remove(i);
        }
        let n = doomed.len();
        self.doomed = doomed;
        self.stats.pins_dropped_consumer_removed += n as u64;
        if n > 0 {
            debug!(consumer = ?id, pins = n, "consumer removed; its pins dropped");
        }
        n
    }

    /// Drops every pin (call it when the last consumer leaves) and releases the pin memory.
    pub fn clear(&mut self) {
        let n = self.pins.len();
        self.pins.clear();
        self.stats.pins_cleared += n as u64;
        if n > 0 {
            debug!(pins = n, "all pins cleared");
        }
    }

    /// The consumer `uuid` is pinned to, if any.
    pub fn pinned(&self, uuid: &str) -> Option<C> {
        let hash = self.pins.hash(uuid);
        self.pins
            .find(uuid, hash)
            .map(|p| self.pins.get(p).consumer)
    }

    /// The next consumer for a plain entry from the assignor's own [`PriorityRoundRobin`]
    /// (the rotation [`assign`](Self::assign) uses), so a caller that routes plain batches
    /// itself keeps one rotation across plain and chunked batches. See
    /// [`PriorityRoundRobin::next`].
    pub fn next_consumer(
        &mut self,
        consumers: &[ConsumerSlot<C>],
        has_capacity: impl FnMut(usize) -> bool,
    ) -> Option<usize> {
        self.rr.next(consumers, has_capacity)
    }

    /// How many uuids are pinned now.
    pub fn pin_count(&self) -> usize {
        self.pins.len()
    }

    /// Cumulative counters since creation.
    pub fn stats(&self) -> AssignorStats {
        self.stats
    }
}
