//! The uuid → consumer pin table: a slab of pins, a hash index and a recency list.
//!
//! * Lookups hash the uuid once (ahash, fixed seeds so runs are reproducible) and walk a short
//!   collision chain comparing the stored uuid.
//! * The recency list (least recently seen first) gives O(1) eviction by count and by age.
//! * Freed slots keep their `String` buffer, so steady-state pinning does not allocate.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

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
    hash: u64,
    chain: u32,
    older: u32,
    newer: u32,
    live: bool,
}

/// The hash index is keyed by an already mixed 64-bit hash: pass it through.
#[derive(Default)]
struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

#[derive(Debug)]
pub(crate) struct PinTable<C> {
    slots: Vec<Pin<C>>,
    free: Vec<u32>,
    index: HashMap<u64, u32, BuildHasherDefault<PassThrough>>,
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
            index: HashMap::default(),
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
    pub(crate) fn find(&self, uuid: &str, hash: u64) -> Option<u32> {
        let mut i = *self.index.get(&hash)?;
        while i != NIL {
            let p = &self.slots[i as usize];
            if p.uuid == uuid {
                return Some(i);
            }
            i = p.chain;
        }
        None
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
        let chain = self.index.get(&hash).copied().unwrap_or(NIL);
        let i = match self.free.pop() {
            Some(i) => {
                let p = &mut self.slots[i as usize];
                p.uuid.clear();
                p.uuid.push_str(uuid);
                p.consumer = consumer;
                p.hint = hint;
                p.last_seen = now;
                p.held_epoch = 0;
                p.hash = hash;
                p.chain = chain;
                p.live = true;
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
                    hash,
                    chain,
                    older: NIL,
                    newer: NIL,
                    live: true,
                });
                i
            }
        };
        self.index.insert(hash, i);
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
        let (hash, chain) = {
            let p = &self.slots[i as usize];
            debug_assert!(p.live);
            (p.hash, p.chain)
        };
        // Unlink from the collision chain.
        match self.index.get(&hash).copied() {
            Some(head) if head == i => {
                if chain == NIL {
                    self.index.remove(&hash);
                } else {
                    self.index.insert(hash, chain);
                }
            }
            Some(head) => {
                let mut j = head;
                while j != NIL {
                    let next = self.slots[j as usize].chain;
                    if next == i {
                        self.slots[j as usize].chain = chain;
                        break;
                    }
                    j = next;
                }
            }
            None => {}
        }
        self.unlink(i);
        let p = &mut self.slots[i as usize];
        p.live = false;
        p.chain = NIL;
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
