//! Plain data in and out of the assignor.

/// The chunk metadata of one entry, borrowed from the caller's entry type.
///
/// A well-formed chunk has a non-empty `uuid` and `chunk_id < num_chunks`. Anything else is
/// *malformed* and the assignor treats the entry as a plain (non-chunk) entry, logs a WARN and
/// counts it in [`AssignorStats::malformed_chunks`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkRef<'a> {
    /// The chunked message's id, shared by all its chunks (Pulsar: producer name + sequence id).
    pub uuid: &'a str,
    /// Zero-based index of this chunk within its message.
    pub chunk_id: u32,
    /// How many chunks the message has.
    pub num_chunks: u32,
}

impl ChunkRef<'_> {
    /// Whether the metadata is usable: non-empty uuid, `num_chunks > 0`, `chunk_id < num_chunks`.
    pub fn is_well_formed(&self) -> bool {
        !self.uuid.is_empty() && self.num_chunks > 0 && self.chunk_id < self.num_chunks
    }

    /// Whether this is the last chunk of its message (`chunk_id + 1 == num_chunks`).
    pub fn is_last(&self) -> bool {
        self.chunk_id.checked_add(1) == Some(self.num_chunks)
    }
}

/// Implemented by the caller's entry type so the assignor can see its chunk metadata.
///
/// Return `None` for an ordinary (non-chunk) entry. A blanket impl covers `&T`, so a batch of
/// references can be assigned without moving the entries.
pub trait AssignEntry {
    /// The entry's chunk metadata, or `None` when the entry is not a chunk.
    fn chunk(&self) -> Option<ChunkRef<'_>>;
}

impl<T: AssignEntry + ?Sized> AssignEntry for &T {
    fn chunk(&self) -> Option<ChunkRef<'_>> {
        (**self).chunk()
    }
}

/// The assignor's narrow view of one consumer, valid for one `assign` call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConsumerSlot<C> {
    /// The consumer's id (any small `Copy` key the caller uses).
    pub id: C,
    /// Entries the consumer may still receive. Values `<= 0` mean "nothing".
    pub permits: i64,
    /// Priority level: a lower number is a higher priority (as in Pulsar).
    pub priority: i32,
}

/// What one `assign` call decided.
///
/// `per_consumer` has exactly one element per slot of the `consumers` slice passed to the call, in
/// the same order (`per_consumer[i].0 == consumers[i].id`); a consumer that received nothing has
/// an empty list. Entries keep their input order within each list, and `replay` keeps the input
/// order of the entries the caller must put back for a later replay read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assignment<C, E> {
    /// Per consumer (aligned with the `consumers` slice): the entries to send to it.
    pub per_consumer: Vec<(C, Vec<E>)>,
    /// Entries nobody could take now; the caller re-queues them for replay.
    pub replay: Vec<E>,
}

impl<C, E> Default for Assignment<C, E> {
    fn default() -> Self {
        Assignment {
            per_consumer: Vec::new(),
            replay: Vec::new(),
        }
    }
}

impl<C: Copy + Eq, E> Assignment<C, E> {
    /// An empty assignment, to be filled (and refilled, reusing its buffers) by
    /// [`ChunkAssignor::assign_into`](crate::ChunkAssignor::assign_into).
    pub fn new() -> Self {
        Self::default()
    }

    /// The entries assigned to consumer `id` (the first slot with that id), or an empty slice.
    pub fn for_consumer(&self, id: C) -> &[E] {
        self.per_consumer
            .iter()
            .find(|(c, _)| *c == id)
            .map(|(_, v)| v.as_slice())
            .unwrap_or(&[])
    }

    /// How many entries were assigned to some consumer (replay not included).
    pub fn assigned_len(&self) -> usize {
        self.per_consumer.iter().map(|(_, v)| v.len()).sum()
    }
}

/// What to do with an *orphan chunk*: a chunk with `chunk_id > 0` whose uuid has no pin (its
/// chunk 0 was already acknowledged before a restart, its pin was evicted, or its consumer left).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OrphanPolicy {
    /// Dispatch it to the next round-robin consumer with a WARN and a counter, so the client can
    /// discard the incomplete message and the subscription keeps moving. The default.
    #[default]
    DispatchToDefault,
    /// Pulsar's legacy behaviour: put it back for replay. The entry can never become assignable,
    /// so a broker that always reads replay first stalls forever. Only for demonstrating the stall.
    Replay,
}

/// Settings of a [`ChunkAssignor`](crate::ChunkAssignor).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AssignorConfig {
    /// What to do with orphan chunks (see [`OrphanPolicy`]).
    pub orphan_policy: OrphanPolicy,
    /// Upper bound on live pins. At the end of every `assign` the least recently used pins are
    /// evicted until at most this many remain (during one call the count may exceed it by the
    /// number of first chunks in the batch). `0` is treated as `1`.
    pub max_pins: usize,
    /// A pin whose uuid has not been seen for more than this many time units (the caller's unit,
    /// the same as `now`) is evicted at the start of the next `assign`. `u64::MAX` disables it.
    pub max_pin_age: u64,
}

impl Default for AssignorConfig {
    /// `DispatchToDefault`, 100,000 pins, and an idle age of 3,600,000 (one hour if `now` is in
    /// milliseconds).
    fn default() -> Self {
        AssignorConfig {
            orphan_policy: OrphanPolicy::DispatchToDefault,
            max_pins: 100_000,
            max_pin_age: 3_600_000,
        }
    }
}

/// Cumulative counters of one assignor since it was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AssignorStats {
    /// Entries handed to a consumer.
    pub entries_assigned: u64,
    /// Entries put back for replay (for any reason).
    pub entries_replayed: u64,
    /// Orphan chunks dispatched to the default consumer (WARN each).
    pub orphan_chunks: u64,
    /// Orphan chunks put back for replay under [`OrphanPolicy::Replay`] (WARN each).
    pub orphan_chunks_replayed: u64,
    /// Chunks whose pin pointed at a consumer absent from the `consumers` slice: the pin was
    /// dropped and the chunk handled as an orphan (also counted there when dispatched).
    pub stale_pins: u64,
    /// Entries with unusable chunk metadata, treated as plain entries (WARN each).
    pub malformed_chunks: u64,
    /// Chunks put back for replay because their pinned consumer had no permits (or an earlier
    /// chunk of the same uuid in the batch already went back).
    pub chunks_held_for_pin: u64,
    /// Pins created by a first chunk.
    pub pins_created: u64,
    /// First chunks that arrived for an already pinned uuid (a redelivery) and re-pinned it.
    pub pins_repinned: u64,
    /// Pins released by their last chunk.
    pub pins_released: u64,
    /// Pins evicted because more than `max_pins` were live (WARN each).
    pub pins_evicted_count: u64,
    /// Pins evicted because their uuid was idle longer than `max_pin_age` (WARN each).
    pub pins_evicted_age: u64,
    /// Pins dropped by `remove_consumer`.
    pub pins_dropped_consumer_removed: u64,
    /// Pins dropped by `clear`.
    pub pins_cleared: u64,
}
