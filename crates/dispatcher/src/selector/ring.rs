//! Consistent-hashing ring (Pulsar's ConsistentHashingStickyKeyConsumerSelector), with an O(1) slot table and incremental impact.

use std::collections::VecDeque;
use std::fmt::Debug;
use std::hash::Hash;

use ahash::AHashMap;
use tracing::{debug, warn};

use super::{
    merge_in_place, merged, Assignment, ConsumerInfo, ImpactedConsumers, Ranges, SelectorError,
    StickyKeySelector, MAX_SLOT,
};
use crate::hash::{key_hash31, slot, HashRange, CONSISTENT_RANGE};

/// Pulsar's default number of ring points per consumer
/// (`subscriptionKeySharedConsistentHashingReplicaPoints`).
pub const DEFAULT_POINTS_PER_CONSUMER: u32 = 100;

/// "No consumer" in the 16-bit tables.
const NONE: u16 = u16::MAX;
const SLOTS: usize = MAX_SLOT as usize + 1;

/// Ring point `i` of a consumer named `name` with name index `name_index`: the slot (range
/// `[1, 65535]`) of the UTF-8 string `name + "\0" + name_index + "\0" + i`.
///
/// ```
/// assert_eq!(dispatcher::ring_point("consumer-1", 0, 0), 27_499);
/// ```
pub fn ring_point(name: &str, name_index: u32, i: u32) -> u32 {
    let mut buf = point_prefix(name, name_index);
    push_decimal(&mut buf, i);
    slot(key_hash31(&buf), CONSISTENT_RANGE)
}

fn point_prefix(name: &str, name_index: u32) -> Vec<u8> {
    let mut buf = Vec::with_capacity(name.len() + 16);
    buf.extend_from_slice(name.as_bytes());
    buf.push(0);
    push_decimal(&mut buf, name_index);
    buf.push(0);
    buf
}

fn push_decimal(buf: &mut Vec<u8>, mut v: u32) {
    let mut tmp = [0u8; 10];
    let mut n = 0;
    loop {
        tmp[n] = b'0' + (v % 10) as u8;
        n += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    buf.extend(tmp[..n].iter().rev());
}

/// Drops repeated points, keeping the first occurrence of each (order preserved); `sorted` is
/// `pts` sorted, and is deduplicated too.
fn dedup_keep_first(pts: &mut Vec<u32>, sorted: &mut Vec<u32>) {
    if sorted.windows(2).all(|w| w[0] != w[1]) {
        return;
    }
    sorted.dedup();
    let mut seen = Vec::with_capacity(pts.len());
    pts.retain(|p| {
        let fresh = !seen.contains(p);
        if fresh {
            seen.push(*p);
        }
        fresh
    });
}

/// The slots `(prev, p]` of the point `p` whose cyclic predecessor is `prev`, as one or two
/// linear ranges within `[1, 65535]`.
fn arc(prev: u32, p: u32) -> (HashRange, Option<HashRange>) {
    if prev < p {
        (HashRange::new(prev + 1, p), None)
    } else {
        // p is the first point: [1, p] plus the wrap-around tail after the last point.
        let tail = (prev < MAX_SLOT).then(|| HashRange::new(prev + 1, MAX_SLOT));
        (HashRange::new(1, p), tail)
    }
}

/// Points a [`PointSet`] keeps as a sorted list before it becomes a bitmap: a ring of one or two
/// consumers at the default 100 points each (512 bytes against the bitmap's 8 KiB).
const SMALL_POINTS: usize = 256;

/// Each ring point's owning member index: a sorted list of `(point, owner)` while it is small
/// (4 bytes a point: 400 bytes for a consumer at the default 100 points, against a hash map's
/// 1.2 KiB), a hash map beyond [`SMALL_POINTS`] (it stays one).
#[derive(Clone, Debug)]
enum PointOwners {
    Small(Vec<(u16, u16)>),
    Big(AHashMap<u32, u16>),
}

impl PointOwners {
    fn get(&self, p: u32) -> Option<u16> {
        match self {
            PointOwners::Small(v) => {
                let p = u16::try_from(p).ok()?;
                v.binary_search_by_key(&p, |&(q, _)| q).ok().map(|i| v[i].1)
            }
            PointOwners::Big(m) => m.get(&p).copied(),
        }
    }

    fn insert(&mut self, p: u32, owner: u16) {
        if let PointOwners::Small(v) = self {
            let at = u16::try_from(p)
                .ok()
                .map(|q| (q, v.binary_search_by_key(&q, |&(x, _)| x)));
            match at {
                Some((_, Ok(i))) => return v[i].1 = owner,
                Some((q, Err(i))) if v.len() < SMALL_POINTS => return v.insert(i, (q, owner)),
                _ => {
                    let m = v.iter().map(|&(x, o)| (u32::from(x), o)).collect();
                    *self = PointOwners::Big(m);
                }
            }
        }
        if let PointOwners::Big(m) = self {
            m.insert(p, owner);
        }
    }

    fn remove(&mut self, p: u32) {
        match self {
            PointOwners::Small(v) => {
                if let Ok(q) = u16::try_from(p) {
                    if let Ok(i) = v.binary_search_by_key(&q, |&(x, _)| x) {
                        v.remove(i);
                    }
                }
            }
            PointOwners::Big(m) => {
                m.remove(&p);
            }
        }
    }
}

/// A set of ring points in `[0, 65535]`: a sorted list while it is small, a two-level bitmap
/// beyond [`SMALL_POINTS`] (it stays one).
#[derive(Clone, Debug)]
enum PointSet {
    Small(Vec<u16>),
    Big(Bitmap),
}

impl PointSet {
    fn new() -> Self {
        PointSet::Small(Vec::new())
    }

    fn insert(&mut self, p: u32) {
        match self {
            PointSet::Small(v) => {
                let Err(at) = v.binary_search(&(p as u16)) else {
                    return;
                };
                if v.len() < SMALL_POINTS {
                    v.insert(at, p as u16);
                    return;
                }
                let mut b = Bitmap::new();
                for &q in v.iter() {
                    b.insert(u32::from(q));
                }
                b.insert(p);
                *self = PointSet::Big(b);
            }
            PointSet::Big(b) => b.insert(p),
        }
    }

    fn remove(&mut self, p: u32) {
        match self {
            PointSet::Small(v) => {
                if let Ok(at) = v.binary_search(&(p as u16)) {
                    v.remove(at);
                }
            }
            PointSet::Big(b) => b.remove(p),
        }
    }

    fn contains(&self, p: u32) -> bool {
        match self {
            PointSet::Small(v) => p <= MAX_SLOT && v.binary_search(&(p as u16)).is_ok(),
            PointSet::Big(b) => b.contains(p),
        }
    }

    /// Smallest point `>= x`.
    fn next_at_or_after(&self, x: u32) -> Option<u32> {
        match self {
            PointSet::Small(v) => v
                .get(v.partition_point(|&q| u32::from(q) < x))
                .map(|&q| u32::from(q)),
            PointSet::Big(b) => b.next_at_or_after(x),
        }
    }

    /// Greatest point `<= x`.
    fn prev_at_or_before(&self, x: u32) -> Option<u32> {
        match self {
            PointSet::Small(v) => v
                .partition_point(|&q| u32::from(q) <= x)
                .checked_sub(1)
                .map(|k| u32::from(v[k])),
            PointSet::Big(b) => b.prev_at_or_before(x),
        }
    }

    /// Cyclic successor of `p` (strictly after, wrapping); `p` itself when it is the only point.
    fn succ(&self, p: u32) -> Option<u32> {
        self.next_at_or_after(p + 1)
            .or_else(|| self.next_at_or_after(0))
    }

    /// Cyclic predecessor of `p` (strictly before, wrapping); `p` itself when it is the only point.
    fn pred(&self, p: u32) -> Option<u32> {
        p.checked_sub(1)
            .and_then(|q| self.prev_at_or_before(q))
            .or_else(|| self.prev_at_or_before(MAX_SLOT))
    }

    /// The points in ascending order.
    fn iter(&self) -> Box<dyn Iterator<Item = u32> + '_> {
        match self {
            PointSet::Small(v) => Box::new(v.iter().map(|&q| u32::from(q))),
            PointSet::Big(b) => Box::new(b.iter()),
        }
    }
}

/// A set of ring points in `[0, 65535]`: a two-level bitmap with O(1)-ish neighbour queries.
#[derive(Clone, Debug)]
struct Bitmap {
    words: Box<[u64]>,
    summary: [u64; 16],
    len: usize,
}

impl Bitmap {
    /// An empty set; its 8 KiB of words are allocated at the first insert.
    fn new() -> Self {
        Bitmap {
            words: Box::default(),
            summary: [0; 16],
            len: 0,
        }
    }

    fn insert(&mut self, p: u32) {
        if self.words.is_empty() {
            self.words = vec![0u64; SLOTS / 64].into_boxed_slice();
        }
        let w = (p >> 6) as usize;
        let bit = 1u64 << (p & 63);
        if self.words[w] & bit == 0 {
            self.words[w] |= bit;
            self.summary[w >> 6] |= 1u64 << (w & 63);
            self.len += 1;
        }
    }

    fn remove(&mut self, p: u32) {
        if !self.contains(p) {
            return;
        }
        let w = (p >> 6) as usize;
        self.words[w] &= !(1u64 << (p & 63));
        if self.words[w] == 0 {
            self.summary[w >> 6] &= !(1u64 << (w & 63));
        }
        self.len -= 1;
    }

    fn contains(&self, p: u32) -> bool {
        self.words
            .get((p >> 6) as usize)
            .is_some_and(|w| w & (1u64 << (p & 63)) != 0)
    }

    /// Smallest point `>= x`.
    fn next_at_or_after(&self, x: u32) -> Option<u32> {
        if x > MAX_SLOT || self.len == 0 {
            return None;
        }
        let w = (x >> 6) as usize;
        let m = self.words[w] & (u64::MAX << (x & 63));
        if m != 0 {
            return Some(((w as u32) << 6) | m.trailing_zeros());
        }
        // Next non-empty word after w.
        let nw = w + 1;
        if nw >= self.words.len() {
            return None;
        }
        let mut s = nw >> 6;
        let mut sm = self.summary[s] & (u64::MAX << (nw & 63));
        loop {
            if sm != 0 {
                let word = (s << 6) | sm.trailing_zeros() as usize;
                let bits = self.words[word];
                return Some(((word as u32) << 6) | bits.trailing_zeros());
            }
            s += 1;
            if s >= self.summary.len() {
                return None;
            }
            sm = self.summary[s];
        }
    }

    /// Greatest point `<= x`.
    fn prev_at_or_before(&self, x: u32) -> Option<u32> {
        if self.len == 0 {
            return None;
        }
        let x = x.min(MAX_SLOT);
        let w = (x >> 6) as usize;
        let m = self.words[w] & (u64::MAX >> (63 - (x & 63)));
        if m != 0 {
            return Some(((w as u32) << 6) | (63 - m.leading_zeros()));
        }
        if w == 0 {
            return None;
        }
        let pw = w - 1;
        let mut s = pw >> 6;
        let mut sm = self.summary[s] & (u64::MAX >> (63 - (pw & 63)));
        loop {
            if sm != 0 {
                let word = (s << 6) | (63 - sm.leading_zeros()) as usize;
                let bits = self.words[word];
                return Some(((word as u32) << 6) | (63 - bits.leading_zeros()));
            }
            if s == 0 {
                return None;
            }
            s -= 1;
            sm = self.summary[s];
        }
    }

    fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.words.iter().enumerate().flat_map(|(w, &bits)| {
            let mut b = bits;
            std::iter::from_fn(move || {
                if b == 0 {
                    return None;
                }
                let t = b.trailing_zeros();
                b &= b - 1;
                Some(((w as u32) << 6) | t)
            })
        })
    }
}

#[derive(Clone, Debug)]
struct Member<C> {
    id: C,
    name: String,
    name_index: u32,
    /// Distinct ring points, in point-index order (a consumer's own colliding points count once).
    points: Vec<u32>,
    /// The same points in ascending order: joins and leaves walk them in ring order, so the
    /// impacted ranges come out (nearly) sorted.
    sorted: Vec<u32>,
}

/// Pulsar's consistent-hashing selector (the Key_Shared default), bit-compatible ring placement.
///
/// * Each consumer gets `points_per_consumer` points; point `i` is [`ring_point`]`(name,
///   name_index, i)`. The name index is the smallest non-negative integer not used by a connected
///   consumer of the same name, so a consumer that leaves and rejoins lands on the same points.
/// * A point already owned by another consumer is not taken: the newcomer queues behind the owner
///   (FIFO) and takes over when the owner leaves. A consumer that owns no point gets no slot (a
///   `warn` event suggests more points). As in Pulsar, a leave-and-rejoin restores the previous
///   assignment only when none of its points was contended.
/// * [`select`](StickyKeySelector::select) is a lookup in a 65,536-entry table (O(1), no
///   allocation). Slot 0 and slots above 65535 behave as Pulsar's ring (they resolve to the
///   first point's owner, like slot 1).
/// * Joins and leaves compute the impacted ranges from the neighbours of the changed points only
///   and rewrite only the table entries of the arcs that moved.
///
/// At most 65,535 consumers at a time ([`SelectorError::TooManyConsumers`]).
#[derive(Clone, Debug)]
pub struct ConsistentHashingSelector<C> {
    points_per_consumer: u32,
    /// slot → owning member index (`NONE` when the ring is empty), kept only while two or more
    /// consumers are in the ring (128 KiB): alone, one consumer owns every slot ([`only`]).
    ///
    /// [`only`]: Self::only
    table: Option<Box<[u16; SLOTS]>>,
    /// Without a table: the owner of every slot (`NONE` when the ring is empty).
    only: u16,
    /// point → owning member index, for the points on the ring.
    point_owner: PointOwners,
    points: PointSet,
    /// Colliding consumers queued behind a point's owner, FIFO.
    queues: AHashMap<u32, VecDeque<u16>>,
    /// The points that have a queue (so a leave skips the map for the uncontended ones).
    queued: PointSet,
    members: Vec<Option<Member<C>>>,
    /// `ids[i]` is member `i`'s id (stale for freed indexes, which no table entry references).
    ids: Vec<C>,
    free: Vec<u16>,
    by_id: AHashMap<C, u16>,
    /// Scratch for grouping impacted ranges: per member index, the ranges collected so far
    /// (always left empty), and the indexes that have some.
    scratch: Vec<Vec<HashRange>>,
    touched: Vec<u16>,
    /// Scratch for the `(member index, range)` pairs of one join or leave (always left empty).
    pair_scratch: Vec<(u16, HashRange)>,
    /// Used name indexes per name (bitmap).
    names: AHashMap<String, Vec<u64>>,
}

impl<C: Copy + Eq + Hash + Ord + Debug> Default for ConsistentHashingSelector<C> {
    fn default() -> Self {
        Self::new(DEFAULT_POINTS_PER_CONSUMER)
    }
}

impl<C: Copy + Eq + Hash + Ord + Debug> ConsistentHashingSelector<C> {
    /// An empty ring giving each consumer `points_per_consumer` points (Pulsar's default is
    /// [`DEFAULT_POINTS_PER_CONSUMER`]). 0 is treated as 1.
    pub fn new(points_per_consumer: u32) -> Self {
        ConsistentHashingSelector {
            points_per_consumer: points_per_consumer.max(1),
            table: None,
            only: NONE,
            point_owner: PointOwners::Small(Vec::new()),
            points: PointSet::new(),
            queues: AHashMap::new(),
            queued: PointSet::new(),
            members: Vec::new(),
            ids: Vec::new(),
            free: Vec::new(),
            by_id: AHashMap::new(),
            scratch: Vec::new(),
            touched: Vec::new(),
            pair_scratch: Vec::new(),
            names: AHashMap::new(),
        }
    }

    /// Points per consumer.
    pub fn points_per_consumer(&self) -> u32 {
        self.points_per_consumer
    }

    /// The distinct ring points of consumer `id`, in point-index order, or `None` if unknown.
    /// A point may be owned by an earlier consumer that collided on it.
    pub fn points_of(&self, id: C) -> Option<&[u32]> {
        self.member(id).map(|m| m.points.as_slice())
    }

    /// The name index of consumer `id`, or `None` if unknown.
    pub fn name_index_of(&self, id: C) -> Option<u32> {
        self.member(id).map(|m| m.name_index)
    }

    /// The owner of ring point `point` and the consumers queued behind it (FIFO), or `None` when
    /// no point sits there.
    pub fn point_entry(&self, point: u32) -> Option<(C, Vec<C>)> {
        let owner = self.point_owner.get(point)?;
        let owner = *self.ids.get(owner as usize)?;
        let queued = self
            .queues
            .get(&point)
            .map(|q| q.iter().map(|&i| self.ids[i as usize]).collect())
            .unwrap_or_default();
        Some((owner, queued))
    }

    fn member(&self, id: C) -> Option<&Member<C>> {
        let &i = self.by_id.get(&id)?;
        self.members.get(i as usize)?.as_ref()
    }

    fn take_name_index(&mut self, name: &str) -> u32 {
        let bits = match self.names.get_mut(name) {
            Some(b) => b,
            None => self.names.entry(name.to_owned()).or_default(),
        };
        let w = bits
            .iter()
            .position(|&w| w != u64::MAX)
            .unwrap_or(bits.len());
        if w == bits.len() {
            bits.push(0);
        }
        let b = bits[w].trailing_ones();
        bits[w] |= 1u64 << b;
        (w as u32) * 64 + b
    }

    fn release_name_index(&mut self, name: &str, index: u32) {
        if let Some(bits) = self.names.get_mut(name) {
            if let Some(w) = bits.get_mut((index / 64) as usize) {
                *w &= !(1u64 << (index % 64));
            }
            if bits.iter().all(|&w| w == 0) {
                self.names.remove(name);
            }
        }
    }

    fn fill(&mut self, r: HashRange, owner: u16) {
        if let Some(table) = &mut self.table {
            table[r.start as usize..=r.end as usize].fill(owner);
        }
    }

    /// The owner of ring point `p` (`NONE` when no point is there).
    fn owner(&self, p: u32) -> u16 {
        self.point_owner.get(p).unwrap_or(NONE)
    }

    /// After a join or a leave: the slot table exists exactly while two or more consumers are
    /// in the ring; with fewer, [`only`](Self::only) names the one owner of every slot.
    fn retable(&mut self) {
        if self.by_id.len() < 2 {
            self.table = None;
            self.only = self
                .points
                .next_at_or_after(0)
                .map_or(NONE, |p| self.owner(p));
            return;
        }
        if self.table.is_some() {
            return;
        }
        let mut table: Box<[u16; SLOTS]> = match vec![NONE; SLOTS].into_boxed_slice().try_into() {
            Ok(t) => t,
            Err(_) => unreachable!("a boxed slice of SLOTS entries"),
        };
        let mut prev = self.points.prev_at_or_before(MAX_SLOT);
        for p in self.points.iter() {
            let owner = self.owner(p);
            let (a, b) = arc(prev.unwrap_or(p), p);
            for r in std::iter::once(a).chain(b) {
                table[r.start as usize..=r.end as usize].fill(owner);
            }
            prev = Some(p);
        }
        self.table = Some(table);
    }

    /// `(member index, range)` pairs grouped per consumer as [`ImpactedConsumers`] lists them
    /// (ascending ids, each consumer's ranges sorted and merged). The ranges are spread into
    /// per-member scratch lists, so only the distinct consumers are sorted, not every pair.
    /// `pairs` is left empty (its buffer is the caller's scratch).
    fn group_by_member(&mut self, pairs: &mut Vec<(u16, HashRange)>) -> Vec<(C, Ranges)> {
        if self.scratch.len() < self.ids.len() {
            self.scratch.resize_with(self.ids.len(), Vec::new);
        }
        let mut touched = std::mem::take(&mut self.touched);
        for (m, r) in pairs.drain(..) {
            let v = &mut self.scratch[m as usize];
            if v.is_empty() {
                touched.push(m);
            }
            v.push(r);
        }
        let ids = &self.ids;
        touched.sort_unstable_by_key(|&m| ids[m as usize]);
        let mut out = Vec::with_capacity(touched.len());
        for &m in &touched {
            let v = &mut self.scratch[m as usize];
            let n = merge_in_place(v);
            out.push((self.ids[m as usize], Ranges::from_slice(&v[..n])));
            v.clear();
        }
        touched.clear();
        self.touched = touched;
        out
    }
}

/// One consumer's ranges as an [`ImpactedConsumers`] list: empty, or that consumer with its
/// ranges sorted and merged.
fn single<C>(c: C, rs: Vec<HashRange>) -> Vec<(C, Ranges)> {
    if rs.is_empty() {
        return Vec::new();
    }
    vec![(c, merged(Ranges::from_vec(rs)))]
}

impl<C: Copy + Eq + Hash + Ord + Debug> StickyKeySelector<C> for ConsistentHashingSelector<C> {
    fn key_range(&self) -> HashRange {
        CONSISTENT_RANGE
    }

    fn add_consumer(
        &mut self,
        c: ConsumerInfo<C>,
    ) -> Result<ImpactedConsumers<C>, SelectorError<C>> {
        if self.by_id.contains_key(&c.id) {
            return Err(SelectorError::DuplicateConsumer(c.id));
        }
        let idx = match self.free.pop() {
            Some(i) => i,
            None if self.members.len() < NONE as usize => {
                self.members.push(None);
                self.ids.push(c.id);
                (self.members.len() - 1) as u16
            }
            None => return Err(SelectorError::TooManyConsumers),
        };
        self.ids[idx as usize] = c.id;
        let name_index = self.take_name_index(&c.name);

        let mut buf = point_prefix(&c.name, name_index);
        let base = buf.len();
        let mut pts: Vec<u32> = Vec::with_capacity(self.points_per_consumer as usize);
        for i in 0..self.points_per_consumer {
            buf.truncate(base);
            push_decimal(&mut buf, i);
            pts.push(slot(key_hash31(&buf), CONSISTENT_RANGE));
        }
        let mut sorted = pts.clone();
        sorted.sort_unstable();
        dedup_keep_first(&mut pts, &mut sorted);

        // The order the points are taken in does not change the outcome: each slot that moves
        // is reported once, with the owner it had before the join, and a point's queue only
        // sees this consumer once. Ring order makes the gained ranges come out sorted.
        // Losers by member index; the gains are all this consumer's.
        let mut lost = std::mem::take(&mut self.pair_scratch);
        let mut gained: Vec<HashRange> = Vec::with_capacity(sorted.len() + 1);
        let mut owned = 0usize;
        for &p in &sorted {
            if self.point_owner.get(p).is_some() {
                self.queues.entry(p).or_default().push_back(idx);
                self.queued.insert(p);
                continue;
            }
            owned += 1;
            let neighbours = self.points.pred(p).zip(self.points.succ(p));
            self.points.insert(p);
            self.point_owner.insert(p, idx);
            let Some((prev, succ)) = neighbours else {
                // First point on an empty ring: every slot was unassigned.
                let all = HashRange::new(1, MAX_SLOT);
                self.fill(all, idx);
                gained.push(all);
                continue;
            };
            let old = self.owner(succ);
            if old == idx {
                continue;
            }
            let (a, b) = arc(prev, p);
            for r in std::iter::once(a).chain(b) {
                self.fill(r, idx);
                lost.push((old, r));
                gained.push(r);
            }
        }
        if owned == 0 {
            warn!(
                consumer = ?c.id,
                name = %c.name,
                name_index,
                points_per_consumer = self.points_per_consumer,
                suggested_points = self.points_per_consumer.saturating_mul(3) / 2,
                "consumer landed no ring point; it receives no keys until a colliding owner leaves; consider more points per consumer"
            );
        }
        debug!(
            consumer = ?c.id,
            name = %c.name,
            name_index,
            owned_points = owned,
            queued_points = pts.len() - owned,
            "consumer added to consistent-hashing ring"
        );
        self.by_id.insert(c.id, idx);
        self.members[idx as usize] = Some(Member {
            id: c.id,
            name: c.name,
            name_index,
            points: pts,
            sorted,
        });
        let removed = self.group_by_member(&mut lost);
        self.pair_scratch = lost;
        self.retable();
        Ok(ImpactedConsumers {
            removed,
            added: single(c.id, gained),
        })
    }

    fn remove_consumer(&mut self, id: C) -> ImpactedConsumers<C> {
        let Some(idx) = self.by_id.remove(&id) else {
            return ImpactedConsumers::default();
        };
        let Some(member) = self.members.get_mut(idx as usize).and_then(Option::take) else {
            return ImpactedConsumers::default();
        };
        // 1. The arcs the member owns, measured on the ring before any change. Every step
        //    handles each point on its own, so the points are walked in ring order (the lost
        //    ranges come out nearly sorted).
        let mut arcs: Vec<(u32, u32)> = Vec::with_capacity(member.sorted.len());
        for &p in &member.sorted {
            if self.owner(p) == idx {
                if let Some(prev) = self.points.pred(p) {
                    arcs.push((prev, p));
                }
            }
        }
        // 2. Leave every point: hand owned points to the first queued consumer, or drop them.
        for &p in &member.sorted {
            let queue = if self.queued.contains(p) {
                self.queues.get_mut(&p)
            } else {
                None
            };
            let owned = self.point_owner.get(p) == Some(idx);
            let emptied = match queue {
                Some(q) => {
                    if owned {
                        if let Some(n) = q.pop_front() {
                            self.point_owner.insert(p, n);
                        }
                    } else {
                        q.retain(|&x| x != idx);
                    }
                    q.is_empty()
                }
                None => {
                    if owned {
                        self.point_owner.remove(p);
                        self.points.remove(p);
                    }
                    false
                }
            };
            if emptied {
                self.queues.remove(&p);
                self.queued.remove(p);
            }
        }
        // 3. Each former arc goes to the point's new owner, else to the next point's owner.
        // The losses are all this consumer's; gainers by member index.
        let mut lost: Vec<HashRange> = Vec::with_capacity(arcs.len() + 1);
        let mut gained = std::mem::take(&mut self.pair_scratch);
        for (prev, p) in arcs {
            let new_owner = match self.owner(p) {
                NONE => self.points.succ(p).map_or(NONE, |s| self.owner(s)),
                o => o,
            };
            let (a, b) = arc(prev, p);
            for r in std::iter::once(a).chain(b) {
                self.fill(r, new_owner);
                lost.push(r);
                if new_owner != NONE {
                    gained.push((new_owner, r));
                }
            }
        }
        self.release_name_index(&member.name, member.name_index);
        self.free.push(idx);
        debug!(
            consumer = ?member.id,
            name = %member.name,
            name_index = member.name_index,
            "consumer removed from consistent-hashing ring"
        );
        let added = self.group_by_member(&mut gained);
        self.pair_scratch = gained;
        self.retable();
        ImpactedConsumers {
            removed: single(id, lost),
            added,
        }
    }

    #[inline]
    fn select(&self, slot: u32) -> Option<C> {
        // Slot 0 and slots past the ring resolve like slot 1 (first point's owner).
        let s = if slot.wrapping_sub(1) < MAX_SLOT {
            slot
        } else {
            1
        };
        let owner = match &self.table {
            // `s` is in [1, 65535], inside the fixed-size table: no bounds check.
            Some(table) => table[s as usize],
            None => self.only,
        };
        self.ids.get(owner as usize).copied()
    }

    fn assignment(&self) -> Assignment<C> {
        let mut pairs: Vec<(HashRange, C)> = Vec::new();
        let mut prev = 0u32;
        for p in self.points.iter() {
            let owner = self.ids[self.owner(p) as usize];
            pairs.push((HashRange::new(prev + 1, p), owner));
            prev = p;
        }
        if let Some(&(_, first)) = pairs.first() {
            if prev < MAX_SLOT {
                pairs.push((HashRange::new(prev + 1, MAX_SLOT), first));
            }
        }
        // Built ascending and disjoint by construction.
        Assignment::merged(pairs)
    }

    fn consumer_count(&self) -> usize {
        self.by_id.len()
    }
}
