//! The uuid → consumer pin table: a slab of pins, an open-addressing hash index and a recency
//! list.
//!
//! * The index is a power-of-two array of slab indices with linear probing and backward-shift
//!   deletion (no tombstones), kept at most half full. A lookup hashes the uuid once (ahash,
//!   fixed seeds so runs are reproducible), compares the stored 64-bit hash and then the uuid.
//! * The recency list (least recently seen first) gives O(1) eviction by count and by age.
//! * Freed slots keep their `String` buffer, so steady-state pinning does not allocate.

const NIL: u32 = u32::MAX;

/// One pin (live) or a free slot keeping its buffer (not live).
#[derive(Debug)]
pub(crate) struct Pin<C> {
    pub(crate) uuid: String,
    pub(crate) consumer: C,
    /// Index of `consumer` in the last `consumers` slice it was found at (a lookup hint).
    pub(crate) hint: u32,
    /// When a chunk of this uuid was last seen.
    pub(crate) last_seen: u64,
    /// The `assign` call (epoch) in which a chunk of this uuid went back to replay; later chunks
    /// of the uuid in the same call must follow it there.
    pub(crate) held_epoch: u64,
    /// The consumer the pin pointed at before a redelivered first chunk moved it (until that
    /// chunk is known delivered or given back, see [`ChunkAssignor::first_chunk_returned`]).
    ///
    /// [`ChunkAssignor::first_chunk_returned`]: crate::ChunkAssignor::first_chunk_returned
    pub(crate) previous: Option<C>,
    hash: u64,
    older: u32,
    newer: u32,
}

#[derive(Debug)]
pub(crate) struct PinTable<C> {
    slots: Vec<Pin<C>>,
    free: Vec<u32>,
    /// Open-addressing index: slab indices or `NIL`; the length is 0 or a power of two.
    index: Vec<u32>,
    hasher: ahash::RandomState,
    oldest: u32,
    newest: u32,
    len: usize,
}

impl<C: Copy + Eq> PinTable<C> {
    pub(crate) fn new() -> Self {
        PinTable {
            slots: Vec::new(),
            free: Vec::new(),
            index: Vec::new(),
            hasher: ahash::RandomState::with_seeds(
                0x243F_6A88_85A3_08D3,
                0x1319_8A2E_0370_7344,
                0xA409_3822_299F_31D0,
                0x082E_FA98_EC4E_6C89,
            ),
            oldest: NIL,
            newest: NIL,
            len: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub(crate) fn hash(&self, uuid: &str) -> u64 {
        self.hasher.hash_one(uuid)
    }

    #[inline]
    fn mask(&self) -> usize {
        self.index.len().wrapping_sub(1)
    }

    #[inline]
    pub(crate) fn find(&self, uuid: &str, hash: u64) -> Option<u32> {
        if self.index.is_empty() {
            return None;
        }
        let mask = self.mask();
        let mut b = hash as usize & mask;
        loop {
            let i = self.index[b];
            if i == NIL {
                return None;
            }
            let p = &self.slots[i as usize];
            if p.hash == hash && same_bytes(p.uuid.as_bytes(), uuid.as_bytes()) {
                return Some(i);
            }
            b = (b + 1) & mask;
        }
    }

    /// Looks `uuid` up: first (when `try_newest`) against the most recently seen pin
    /// (consecutive chunks of one message hit it without hashing), then through the index.
    /// Returns the pin and the uuid's hash.
    #[inline]
    pub(crate) fn lookup(&self, uuid: &str, try_newest: bool) -> (Option<u32>, u64) {
        if try_newest {
            if let Some(p) = self.slots.get(self.newest as usize) {
                if same_bytes(p.uuid.as_bytes(), uuid.as_bytes()) {
                    return (Some(self.newest), p.hash);
                }
            }
        }
        let hash = self.hash(uuid);
        (self.find(uuid, hash), hash)
    }

    /// Doubles the index (or creates it) and re-inserts every live pin.
    fn grow(&mut self) {
        let cap = (self.index.len() * 2).max(16);
        self.index.clear();
        self.index.resize(cap, NIL);
        let mask = cap - 1;
        let mut i = self.oldest;
        while i != NIL {
            let p = &self.slots[i as usize];
            let mut b = p.hash as usize & mask;
            while self.index[b] != NIL {
                b = (b + 1) & mask;
            }
            self.index[b] = i;
            i = p.newer;
        }
    }

    pub(crate) fn get(&self, i: u32) -> &Pin<C> {
        &self.slots[i as usize]
    }

    pub(crate) fn get_mut(&mut self, i: u32) -> &mut Pin<C> {
        &mut self.slots[i as usize]
    }

    /// Adds a pin for a uuid that has none; returns its slot.
    pub(crate) fn insert(
        &mut self,
        uuid: &str,
        hash: u64,
        consumer: C,
        hint: u32,
        now: u64,
    ) -> u32 {
        if (self.len + 1) * 2 > self.index.len() {
            self.grow();
        }
        let i = match self.free.pop() {
            Some(i) => {
                let p = &mut self.slots[i as usize];
                p.uuid.clear();
                p.uuid.push_str(uuid);
                p.consumer = consumer;
                p.hint = hint;
                p.last_seen = now;
                p.held_epoch = 0;
                p.previous = None;
                p.hash = hash;
                i
            }
            None => {
                let i = self.slots.len() as u32;
                self.slots.push(Pin {
                    uuid: uuid.to_owned(),
                    consumer,
                    hint,
                    last_seen: now,
                    held_epoch: 0,
                    previous: None,
                    hash,
                    older: NIL,
                    newer: NIL,
                });
                i
            }
        };
        let mask = self.mask();
        let mut b = hash as usize & mask;
        while self.index[b] != NIL {
            b = (b + 1) & mask;
        }
        self.index[b] = i;
        self.link_newest(i);
        self.len += 1;
        i
    }

    /// Marks the pin as seen at `now` (it becomes the most recently seen).
    #[inline]
    pub(crate) fn touch(&mut self, i: u32, now: u64) {
        self.slots[i as usize].last_seen = now;
        if self.newest != i {
            self.unlink(i);
            self.link_newest(i);
        }
    }

    /// Drops a live pin.
    pub(crate) fn remove(&mut self, i: u32) {
        let mask = self.mask();
        let mut b = self.slots[i as usize].hash as usize & mask;
        // The pin is in the index: probe to its bucket.
        while self.index[b] != i {
            b = (b + 1) & mask;
        }
        // Backward-shift deletion: pull later entries of the run into the hole when their home
        // bucket allows it, so lookups never need tombstones.
        let mut hole = b;
        let mut k = (hole + 1) & mask;
        loop {
            let j = self.index[k];
            if j == NIL {
                break;
            }
            let home = self.slots[j as usize].hash as usize & mask;
            // Move j into the hole unless its home lies cyclically in (hole, k].
            if (k.wrapping_sub(home) & mask) >= (k.wrapping_sub(hole) & mask) {
                self.index[hole] = j;
                hole = k;
            }
            k = (k + 1) & mask;
        }
        self.index[hole] = NIL;
        self.unlink(i);
        self.free.push(i);
        self.len -= 1;
    }

    /// The least recently seen pin.
    pub(crate) fn oldest(&self) -> Option<u32> {
        (self.oldest != NIL).then_some(self.oldest)
    }

    /// Live pins, least recently seen first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u32, &Pin<C>)> + '_ {
        let mut i = self.oldest;
        std::iter::from_fn(move || {
            if i == NIL {
                return None;
            }
            let cur = i;
            let p = &self.slots[cur as usize];
            i = p.newer;
            Some((cur, p))
        })
    }

    /// Drops every pin and releases the memory.
    pub(crate) fn clear(&mut self) {
        self.slots.clear();
        self.free.clear();
        self.index.clear();
        self.oldest = NIL;
        self.newest = NIL;
        self.len = 0;
    }

    fn link_newest(&mut self, i: u32) {
        let prev = self.newest;
        {
            let p = &mut self.slots[i as usize];
            p.older = prev;
            p.newer = NIL;
        }
        if prev == NIL {
            self.oldest = i;
        } else {
            self.slots[prev as usize].newer = i;
        }
        self.newest = i;
    }

    fn unlink(&mut self, i: u32) {
        let (older, newer) = {
            let p = &self.slots[i as usize];
            (p.older, p.newer)
        };
        if older == NIL {
            self.oldest = newer;
        } else {
            self.slots[older as usize].newer = newer;
        }
        if newer == NIL {
            self.newest = older;
        } else {
            self.slots[newer as usize].older = older;
        }
        let p = &mut self.slots[i as usize];
        p.older = NIL;
        p.newer = NIL;
    }
}

/// Byte equality inlined for short keys (uuids are a few dozen bytes): word compares instead of
/// a library `memcmp` call.
#[inline]
pub(crate) fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let word = |s: &[u8]| u64::from_ne_bytes(s.try_into().unwrap_or([0; 8]));
    let mut x = a.chunks_exact(8);
    let mut y = b.chunks_exact(8);
    for (p, q) in x.by_ref().zip(y.by_ref()) {
        if word(p) != word(q) {
            return false;
        }
    }
    x.remainder().iter().zip(y.remainder()).all(|(p, q)| p == q)
}
