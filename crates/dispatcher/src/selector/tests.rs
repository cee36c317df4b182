//! Selector tests: Pulsar vectors, W6 check values, reference models over seeded random
//! operation sequences, typed errors and scripted snapshots.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use super::*;
use crate::hash::{key_hash31, CONSISTENT_RANGE, FULL_RANGE};

/// SplitMix64 as docs/BENCHMARKS.md defines it.
struct SplitMix64(u64);
impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn ring_of(names: &[&str], points: u32) -> ConsistentHashingSelector<u32> {
    let mut r = ConsistentHashingSelector::new(points);
    for (i, n) in names.iter().enumerate() {
        r.add_consumer(ConsumerInfo::new(i as u32 + 1, *n)).unwrap();
    }
    r
}

fn all_points(r: &ConsistentHashingSelector<u32>, ids: &[u32]) -> BTreeMap<u32, u32> {
    let mut m = BTreeMap::new();
    for &id in ids {
        for &p in r.points_of(id).unwrap() {
            m.entry(p).or_insert(id);
        }
    }
    m
}

// ---------------------------------------------------------------- vectors from Pulsar (its Murmur3_32Hash and selectors)

#[test]
fn ring_points_of_consumer_1_and_c1() {
    let got: Vec<u32> = (0..5).map(|i| ring_point("consumer-1", 0, i)).collect();
    assert_eq!(got, [27499, 40019, 8740, 42471, 43061]);
    let got: Vec<u32> = (0..5).map(|i| ring_point("c1", 0, i)).collect();
    assert_eq!(got, [34662, 61273, 23534, 54464, 29173]);
    // The selector places exactly those points.
    let r = ring_of(&["c1"], 5);
    assert_eq!(
        r.points_of(1).unwrap(),
        &[34662, 61273, 23534, 54464, 29173]
    );
    assert_eq!(r.name_index_of(1), Some(0));
}

#[test]
fn two_consumer_ring_selections() {
    let r = ring_of(&["c1", "c2"], 100);
    let pts = all_points(&r, &[1, 2]);
    assert_eq!(pts.len(), 200, "no collisions");
    assert_eq!(pts.first_key_value(), Some((&1031, &1)));
    assert_eq!(pts.last_key_value(), Some((&64838, &1)));
    let cases = [
        ("key-0", 23544, 1, 24378),
        ("key-1", 11858, 2, 11918),
        ("key-2", 51461, 1, 51554),
        ("key-3", 55278, 2, 55743),
        ("NONE_KEY", 56505, 2, 57280),
        ("order-42", 60576, 1, 61192),
    ];
    for (key, s, owner, point) in cases {
        assert_eq!(slot(key_hash31(key.as_bytes()), r.key_range()), s, "{key}");
        assert_eq!(r.select_key(key.as_bytes()), Some(owner), "{key}");
        assert_eq!(r.select(s), Some(owner), "{key}");
        let (&p, &o) = pts.range(s..).next().unwrap();
        assert_eq!((p, o), (point, owner), "{key}");
        assert_eq!(r.point_entry(point), Some((owner, vec![])));
    }
    // Wrap-around: past the last point goes to the first point's owner.
    assert_eq!(r.select(64839), Some(1));
    assert_eq!(r.select(65535), Some(1));
    assert_eq!(r.select(0), r.select(1));
    assert_eq!(r.select(70000), r.select(1));
    let a = r.assignment();
    assert_eq!(
        a.ranges().first().map(|x| x.0),
        Some(HashRange::new(1, 1031))
    );
    assert_eq!(a.ranges().last().map(|x| x.0.end), Some(65535));
}

#[test]
fn auto_split_three_consumers() {
    let mut s = AutoSplitSelector::new();
    for (id, n) in [(1u32, "c1"), (2, "c2"), (3, "c3")] {
        s.add_consumer(ConsumerInfo::new(id, n)).unwrap();
    }
    assert_eq!(
        s.bounds().collect::<Vec<_>>(),
        [(16384, 3), (32768, 2), (65536, 1)]
    );
    assert_eq!(s.key_range(), FULL_RANGE);
    for (key, sl, owner) in [
        ("key-0", 63679, 1),
        ("key-1", 5536, 3),
        ("key-2", 21772, 2),
        ("key-3", 24226, 2),
        ("NONE_KEY", 48803, 1),
    ] {
        assert_eq!(slot(key_hash31(key.as_bytes()), FULL_RANGE), sl);
        assert_eq!(s.select_key(key.as_bytes()), Some(owner), "{key}");
    }
    assert_eq!(
        s.assignment().ranges(),
        &[
            (HashRange::new(0, 16384), 3),
            (HashRange::new(16385, 32768), 2),
            (HashRange::new(32769, 65535), 1)
        ]
    );
}

// ---------------------------------------------------------------- W6 check values

#[test]
fn w6_check_values() {
    let mut r = ConsistentHashingSelector::new(100);
    for i in 0..100u32 {
        r.add_consumer(ConsumerInfo::new(i, format!("consumer-{i}")))
            .unwrap();
    }
    let mut rng = SplitMix64(43);
    let mut sum = 0u64;
    let mut hits = [0u32; 100];
    for _ in 0..1_000_000 {
        let h = 1 + (rng.next() % 65535) as u32;
        let c = r.select(h).unwrap();
        sum += u64::from(c);
        hits[c as usize] += 1;
    }
    assert_eq!(sum, 48_326_997);
    assert_eq!(hits.iter().min(), Some(&6_953));
    assert_eq!(hits.iter().max(), Some(&12_419));
    assert_eq!(r.select(1), Some(56));
    assert_eq!(r.select(65535), Some(56));
    assert_eq!(r.assignment().len(), 9_243);
}

// ---------------------------------------------------------------- collisions

/// Three names whose point 0 (name index 0) collides.
fn colliding_triple() -> (String, String, String, u32) {
    let mut seen: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for i in 0..100_000 {
        let n = format!("n{i}");
        let p = ring_point(&n, 0, 0);
        let v = seen.entry(p).or_default();
        v.push(n);
        if v.len() == 3 {
            return (v[0].clone(), v[1].clone(), v[2].clone(), p);
        }
    }
    panic!("no triple collision among 100000 names");
}

#[test]
fn collisions_queue_fifo_and_hand_over() {
    let (a, b, c, p) = colliding_triple();
    let mut r = ConsistentHashingSelector::<u32>::new(1);
    let ia = r.add_consumer(ConsumerInfo::new(1, a.clone())).unwrap();
    assert_eq!(ia.added_ranges(1), &[HashRange::new(1, 65535)]);
    // B and C land on A's point: they queue and gain nothing.
    assert!(r.add_consumer(ConsumerInfo::new(2, b)).unwrap().is_empty());
    assert!(r.add_consumer(ConsumerInfo::new(3, c)).unwrap().is_empty());
    assert_eq!(r.point_entry(p), Some((1, vec![2, 3])));
    assert_eq!(r.select(p), Some(1));
    // Owner leaves: the first queued (B, not C) takes over everything.
    let i = r.remove_consumer(1);
    assert_eq!(i.removed, vec![(1, vec![HashRange::new(1, 65535)])]);
    assert_eq!(i.added, vec![(2, vec![HashRange::new(1, 65535)])]);
    assert_eq!(r.point_entry(p), Some((2, vec![3])));
    // A rejoins behind C.
    assert!(r.add_consumer(ConsumerInfo::new(1, a)).unwrap().is_empty());
    assert_eq!(r.point_entry(p), Some((2, vec![3, 1])));
    // A queued consumer leaving moves nothing.
    assert!(r.remove_consumer(3).is_empty());
    assert_eq!(r.point_entry(p), Some((2, vec![1])));
    let i = r.remove_consumer(2);
    assert_eq!(i.added, vec![(1, vec![HashRange::new(1, 65535)])]);
    let i = r.remove_consumer(1);
    assert_eq!(i.removed, vec![(1, vec![HashRange::new(1, 65535)])]);
    assert!(i.added.is_empty());
    assert_eq!(r.select(p), None);
    assert!(r.assignment().is_empty());
    assert_eq!(r.consumer_count(), 0);
}

#[test]
fn name_index_is_smallest_free_and_reused() {
    let mut r = ConsistentHashingSelector::<u32>::new(3);
    for id in 1..=3 {
        r.add_consumer(ConsumerInfo::new(id, "same")).unwrap();
    }
    assert_eq!(
        (1..=3).map(|i| r.name_index_of(i)).collect::<Vec<_>>(),
        [Some(0), Some(1), Some(2)]
    );
    r.remove_consumer(2);
    r.add_consumer(ConsumerInfo::new(4, "same")).unwrap();
    assert_eq!(r.name_index_of(4), Some(1));
    assert_eq!(
        r.points_of(4).unwrap(),
        &[
            ring_point("same", 1, 0),
            ring_point("same", 1, 1),
            ring_point("same", 1, 2)
        ]
    );
    r.add_consumer(ConsumerInfo::new(5, "other")).unwrap();
    assert_eq!(r.name_index_of(5), Some(0));
}

#[test]
fn ring_edge_cases() {
    let mut r = ConsistentHashingSelector::<u32>::new(0);
    assert_eq!(r.points_per_consumer(), 1);
    assert_eq!(r.select(5), None);
    assert!(r.remove_consumer(9).is_empty());
    r.add_consumer(ConsumerInfo::new(1, "x")).unwrap();
    assert_eq!(
        r.add_consumer(ConsumerInfo::new(1, "y")),
        Err(SelectorError::DuplicateConsumer(1))
    );
    assert_eq!(r.consumer_count(), 1);
    assert_eq!(r.key_range(), CONSISTENT_RANGE);
    assert_eq!(
        ConsistentHashingSelector::<u32>::default().points_per_consumer(),
        100
    );
    assert_eq!(r.points_of(2), None);
    assert_eq!(r.point_entry(70000), None);
}

#[test]
fn selectors_are_send() {
    fn send<T: Send>() {}
    send::<ConsistentHashingSelector<u64>>();
    send::<AutoSplitSelector<u64>>();
    send::<ExclusiveRangeSelector<u64>>();
    send::<Box<dyn StickyKeySelector<u64> + Send>>();
}

// ---------------------------------------------------------------- reference models

/// Pulsar's ring as a plain BTreeMap: point → FIFO of consumers (first = owner).
struct RingModel {
    points: u32,
    ring: BTreeMap<u32, Vec<u32>>,
    names: BTreeMap<String, BTreeSet<u32>>,
    members: BTreeMap<u32, (String, u32)>,
}

impl RingModel {
    fn point(name: &str, idx: u32, i: u32) -> u32 {
        key_hash31(format!("{name}\0{idx}\0{i}").as_bytes()) % 65535 + 1
    }
    fn add(&mut self, id: u32, name: &str) {
        let used = self.names.entry(name.to_owned()).or_default();
        let idx = (0..).find(|i| !used.contains(i)).unwrap();
        used.insert(idx);
        for i in 0..self.points {
            let v = self.ring.entry(Self::point(name, idx, i)).or_default();
            if !v.contains(&id) {
                v.push(id);
            }
        }
        self.members.insert(id, (name.to_owned(), idx));
    }
    fn remove(&mut self, id: u32) {
        let (name, idx) = self.members.remove(&id).unwrap();
        self.names.get_mut(&name).unwrap().remove(&idx);
        for v in self.ring.values_mut() {
            v.retain(|&x| x != id);
        }
        self.ring.retain(|_, v| !v.is_empty());
    }
    fn owner_at(&self, slot: u32) -> Option<u32> {
        let first = self.ring.values().next().map(|v| v[0]);
        self.ring.range(slot..).next().map(|(_, v)| v[0]).or(first)
    }
    /// Owner per slot 1..=65535 (index 0 unused).
    fn owners(&self) -> Vec<Option<u32>> {
        let mut out = vec![None; 65536];
        let first = self.ring.values().next().map(|v| v[0]);
        let mut it = self.ring.iter().peekable();
        for (s, o) in out.iter_mut().enumerate().skip(1) {
            while it.peek().is_some_and(|(&p, _)| (p as usize) < s) {
                it.next();
            }
            *o = it.peek().map(|(_, v)| v[0]).or(first);
        }
        out
    }
}

fn assignment_of(owners: &[Option<u32>], from: u32) -> Assignment<u32> {
    Assignment::from_sorted(
        (from..owners.len() as u32)
            .filter_map(|s| owners[s as usize].map(|o| (HashRange::new(s, s), o))),
    )
    .unwrap()
}

/// Checks an add/remove result against the before/after snapshots.
fn check_impacted(
    ctx: &str,
    before: &Assignment<u32>,
    after: &Assignment<u32>,
    got: &ImpactedConsumers<u32>,
    added: Option<u32>,
    removed: Option<u32>,
) {
    let want = diff(before, after);
    assert_eq!(got, &want, "{ctx}: impacted != diff(before, after)");
    if let Some(a) = added {
        // Adding only moves hashes TO the new consumer.
        assert!(
            got.added.iter().all(|(c, _)| *c == a),
            "{ctx}: add moved hashes elsewhere"
        );
        assert!(got.removed.iter().all(|(c, _)| *c != a), "{ctx}");
    }
    if let Some(r) = removed {
        // Removing only moves hashes AWAY from the removed consumer.
        assert!(
            got.removed.iter().all(|(c, _)| *c == r),
            "{ctx}: remove took from others"
        );
        assert!(got.added.iter().all(|(c, _)| *c != r), "{ctx}");
    }
    for (_, rs) in got.removed.iter().chain(&got.added) {
        assert!(
            rs.windows(2).all(|w| w[0].end + 1 < w[1].start),
            "{ctx}: not merged"
        );
    }
}

fn owns_contended(r: &ConsistentHashingSelector<u32>, id: u32) -> bool {
    r.points_of(id).unwrap().iter().any(|&p| {
        r.point_entry(p)
            .is_some_and(|(o, q)| o == id && !q.is_empty())
    })
}

fn run_ring_model(seed: u64, points: u32, steps: usize) -> usize {
    let names = ["a", "b", "consumer", "x1", "x11"];
    let mut rng = SplitMix64(seed);
    let mut real = ConsistentHashingSelector::<u32>::new(points);
    let mut model = RingModel {
        points,
        ring: BTreeMap::new(),
        names: BTreeMap::new(),
        members: BTreeMap::new(),
    };
    let mut next_id = 0u32;
    let mut log: Vec<String> = Vec::new();
    let mut restored = 0;
    for step in 0..steps {
        let before = real.assignment();
        let ids: Vec<u32> = model.members.keys().copied().collect();
        let roll = rng.below(100);
        let ctx_of =
            |log: &[String]| format!("seed {seed} points {points} step {step}; ops: {log:?}");
        if ids.is_empty() || (roll < 55 && ids.len() < 40) {
            let name = names[rng.below(names.len() as u64) as usize];
            next_id += 1;
            log.push(format!("add {next_id} {name}"));
            let got = real.add_consumer(ConsumerInfo::new(next_id, name)).unwrap();
            model.add(next_id, name);
            check_impacted(
                &ctx_of(&log),
                &before,
                &real.assignment(),
                &got,
                Some(next_id),
                None,
            );
        } else if roll < 85 {
            let id = ids[rng.below(ids.len() as u64) as usize];
            log.push(format!("remove {id}"));
            let got = real.remove_consumer(id);
            model.remove(id);
            check_impacted(
                &ctx_of(&log),
                &before,
                &real.assignment(),
                &got,
                None,
                Some(id),
            );
        } else if roll < 95 {
            // Remove and re-add with the same id and name.
            let id = ids[rng.below(ids.len() as u64) as usize];
            let name = model.members[&id].0.clone();
            let idx = real.name_index_of(id);
            let contended = owns_contended(&real, id);
            log.push(format!("readd {id} {name}"));
            real.remove_consumer(id);
            model.remove(id);
            real.add_consumer(ConsumerInfo::new(id, name.clone()))
                .unwrap();
            model.add(id, &name);
            if !contended && real.name_index_of(id) == idx {
                assert_eq!(
                    real.assignment(),
                    before,
                    "{}: re-add changed it",
                    ctx_of(&log)
                );
                restored += 1;
            }
        } else {
            log.push("noops".into());
            assert!(real.remove_consumer(u32::MAX).is_empty());
            if let Some(&id) = ids.first() {
                assert_eq!(
                    real.add_consumer(ConsumerInfo::new(id, "dup")),
                    Err(SelectorError::DuplicateConsumer(id))
                );
            }
            assert_eq!(real.assignment(), before, "{}", ctx_of(&log));
        }
        if step % 5 == 0 || step + 1 == steps {
            // Full per-slot comparison (slow in debug builds, so not every step).
            let owners = model.owners();
            for (s, want) in owners.iter().enumerate().skip(1) {
                assert_eq!(real.select(s as u32), *want, "{} slot {s}", ctx_of(&log));
            }
            assert_eq!(
                real.assignment(),
                assignment_of(&owners, 1),
                "{}",
                ctx_of(&log)
            );
        } else {
            // Every ring point, the slot after it and the ends of the slot space.
            for &p in model.ring.keys() {
                for s in [p, p + 1, p - 1] {
                    if (1..=65535).contains(&s) {
                        assert_eq!(
                            real.select(s),
                            model.owner_at(s),
                            "{} slot {s}",
                            ctx_of(&log)
                        );
                    }
                }
            }
            for s in [1, 65535] {
                assert_eq!(
                    real.select(s),
                    model.owner_at(s),
                    "{} slot {s}",
                    ctx_of(&log)
                );
            }
        }
        assert_eq!(real.consumer_count(), model.members.len());
        for (&p, v) in &model.ring {
            assert_eq!(
                real.point_entry(p),
                Some((v[0], v[1..].to_vec())),
                "{}",
                ctx_of(&log)
            );
        }
    }
    restored
}

#[test]
fn ring_matches_reference_model() {
    let mut restored = 0;
    for (seed, points) in [(1, 1), (2, 3), (3, 20), (4, 60), (5, 100)] {
        restored += run_ring_model(seed, points, 120);
    }
    assert!(
        restored > 10,
        "re-add property exercised only {restored} times"
    );
}

#[test]
fn w6_ring_readd_restores_uncontended_consumers() {
    let mut r = ConsistentHashingSelector::<u32>::new(100);
    for i in 0..100u32 {
        r.add_consumer(ConsumerInfo::new(i, format!("consumer-{i}")))
            .unwrap();
    }
    let base = r.assignment();
    let mut checked = 0;
    for k in 0..100u32 {
        if owns_contended(&r, k) {
            continue;
        }
        let before = r.assignment();
        let out = r.remove_consumer(k);
        let mid = r.assignment();
        check_impacted("w6 remove", &before, &mid, &out, None, Some(k));
        let back = r
            .add_consumer(ConsumerInfo::new(k, format!("consumer-{k}")))
            .unwrap();
        check_impacted("w6 add", &mid, &r.assignment(), &back, Some(k), None);
        assert_eq!(out.removed, back.added, "consumer-{k} regains what it lost");
        assert_eq!(r.assignment(), before, "consumer-{k}");
        checked += 1;
    }
    // Most W6 consumers own a contended point (their rejoin queues behind the heir, as in
    // Pulsar); the uncontended ones must be restored exactly.
    assert!(checked >= 10, "{checked}");
    assert_eq!(r.assignment(), base);
}

/// Pulsar's auto-split rules on a plain Vec.
fn auto_split_model_add(bounds: &mut Vec<(u32, u32)>, id: u32) -> bool {
    if bounds.is_empty() {
        bounds.push((65536, id));
        return true;
    }
    let (mut best, mut bw, mut bl, mut lower) = (0, 0, 0, 0);
    for (i, &(b, _)) in bounds.iter().enumerate() {
        if b - lower > bw {
            (best, bw, bl) = (i, b - lower, lower);
        }
        lower = b;
    }
    if bw <= 1 {
        return false;
    }
    let b = bounds[best].0;
    bounds.insert(best, (b - ((b - bl) >> 1), id));
    true
}

fn auto_split_model_remove(bounds: &mut Vec<(u32, u32)>, id: u32) {
    let i = bounds.iter().position(|&(_, c)| c == id).unwrap();
    let (b, _) = bounds.remove(i);
    if b == 65536 {
        if let Some(last) = bounds.last_mut() {
            last.0 = 65536;
        }
    }
}

#[test]
fn auto_split_matches_reference_model() {
    for seed in 10..16u64 {
        let mut rng = SplitMix64(seed);
        let mut real = AutoSplitSelector::<u32>::new();
        let mut model: Vec<(u32, u32)> = Vec::new();
        let mut log = Vec::new();
        let mut next = 0;
        for step in 0..150 {
            let before = real.assignment();
            let ctx = format!("seed {seed} step {step}; ops: {log:?}");
            if model.is_empty() || rng.below(100) < 60 {
                next += 1;
                log.push(format!("add {next}"));
                let got = real.add_consumer(ConsumerInfo::new(next, "c")).unwrap();
                assert!(auto_split_model_add(&mut model, next));
                check_impacted(&ctx, &before, &real.assignment(), &got, Some(next), None);
            } else {
                let id = model[rng.below(model.len() as u64) as usize].1;
                log.push(format!("remove {id}"));
                let got = real.remove_consumer(id);
                auto_split_model_remove(&mut model, id);
                check_impacted(&ctx, &before, &real.assignment(), &got, None, Some(id));
            }
            assert_eq!(real.bounds().collect::<Vec<_>>(), model, "{ctx}");
            let edges = model.iter().flat_map(|&(b, _)| [b - 1, b, b + 1]);
            for s in (0..65536u32).step_by(61).chain([0, 1, 65535]).chain(edges) {
                let want = model.iter().find(|&&(b, _)| b >= s).map(|&(_, c)| c);
                assert_eq!(real.select(s), want, "{ctx} slot {s}");
            }
            assert_eq!(real.consumer_count(), model.len());
        }
    }
}

#[test]
fn auto_split_runs_out_of_ranges() {
    let mut s = AutoSplitSelector::<u32>::new();
    for id in 0..65536u32 {
        s.add_consumer(ConsumerInfo::new(id, "c")).unwrap();
    }
    assert!(s.bounds().all(|(b, _)| b >= 1));
    assert_eq!(
        s.add_consumer(ConsumerInfo::new(70000, "c")),
        Err(SelectorError::NoRangeLeftToSplit)
    );
    assert_eq!(s.consumer_count(), 65536);
    // Removing one frees a two-slot range again.
    s.remove_consumer(5);
    assert!(s.add_consumer(ConsumerInfo::new(70000, "c")).is_ok());
    assert_eq!(
        s.add_consumer(ConsumerInfo::new(70000, "c")),
        Err(SelectorError::DuplicateConsumer(70000))
    );
    assert!(s.remove_consumer(123_456).is_empty());
}

#[test]
fn exclusive_matches_reference_model() {
    for seed in 20..26u64 {
        let mut rng = SplitMix64(seed);
        let mut real = ExclusiveRangeSelector::<u32>::new();
        let mut model: Vec<Option<u32>> = vec![None; 65536];
        let mut log = Vec::new();
        let mut next = 0;
        let mut accepted = 0;
        for step in 0..200 {
            let before = real.assignment();
            let ctx = format!("seed {seed} step {step}; ops: {log:?}");
            let present: BTreeSet<u32> = model.iter().flatten().copied().collect();
            if present.is_empty() || rng.below(100) < 65 {
                next += 1;
                let n = 1 + rng.below(3);
                let ranges: Vec<HashRange> = (0..n)
                    .map(|_| {
                        let s = rng.below(65536) as u32;
                        HashRange::new(s, (s + rng.below(4000) as u32).min(65535))
                    })
                    .collect();
                log.push(format!("add {next} {ranges:?}"));
                let conflict = ranges
                    .iter()
                    .any(|r| (r.start..=r.end).any(|s| model[s as usize].is_some()));
                let own_overlap = ranges.iter().enumerate().any(|(i, a)| {
                    ranges[i + 1..]
                        .iter()
                        .any(|b| a.start <= b.end && b.start <= a.end)
                });
                let got = real.add_consumer(ConsumerInfo::with_ranges(next, "c", ranges.clone()));
                match got {
                    Ok(got) => {
                        assert!(!conflict && !own_overlap, "{ctx}");
                        for r in &ranges {
                            for s in r.start..=r.end {
                                model[s as usize] = Some(next);
                            }
                        }
                        accepted += 1;
                        check_impacted(&ctx, &before, &real.assignment(), &got, Some(next), None);
                    }
                    Err(SelectorError::OverlappingRanges(..)) => assert!(own_overlap, "{ctx}"),
                    Err(SelectorError::RangeConflict { range, owner }) => {
                        assert!(conflict && !own_overlap, "{ctx}");
                        assert!((range.start..=range.end).any(|s| model[s as usize] == Some(owner)));
                        assert_eq!(real.assignment(), before);
                    }
                    Err(e) => panic!("{ctx}: unexpected {e}"),
                }
            } else {
                let v: Vec<u32> = present.into_iter().collect();
                let id = v[rng.below(v.len() as u64) as usize];
                log.push(format!("remove {id}"));
                let got = real.remove_consumer(id);
                model
                    .iter_mut()
                    .filter(|o| **o == Some(id))
                    .for_each(|o| *o = None);
                check_impacted(&ctx, &before, &real.assignment(), &got, None, Some(id));
            }
            if step % 10 == 0 || step == 199 {
                for s in 0..65536u32 {
                    assert_eq!(real.select(s), model[s as usize], "{ctx} slot {s}");
                }
                assert_eq!(real.assignment(), assignment_of(&model, 0), "{ctx}");
            } else {
                // Range edges and a sample of slots.
                let a = real.assignment();
                let edges = a.ranges().iter().flat_map(|(r, _)| {
                    [
                        r.start.saturating_sub(1),
                        r.start,
                        r.end,
                        (r.end + 1).min(65535),
                    ]
                });
                for s in edges.chain((0..65536u32).step_by(97)) {
                    assert_eq!(real.select(s), model[s as usize], "{ctx} slot {s}");
                }
            }
            assert_eq!(real.select(65536 + 5), model[5], "{ctx}: slot mod 65536");
        }
        assert!(accepted > 20, "seed {seed}: only {accepted} accepted");
    }
}

// ---------------------------------------------------------------- typed errors

#[test]
fn exclusive_validation_errors() {
    let mut s = ExclusiveRangeSelector::<u32>::new();
    let add = |s: &mut ExclusiveRangeSelector<u32>, id, rs: &[(u32, u32)]| {
        let rs = rs.iter().map(|&(a, b)| HashRange::new(a, b)).collect();
        s.add_consumer(ConsumerInfo::with_ranges(id, "c", rs))
    };
    assert_eq!(add(&mut s, 1, &[]), Err(SelectorError::EmptyRanges));
    assert_eq!(
        add(&mut s, 1, &[(0, 9), (20, 10)]),
        Err(SelectorError::InvertedRange(HashRange::new(20, 10)))
    );
    assert_eq!(
        add(&mut s, 1, &[(65000, 65536)]),
        Err(SelectorError::RangeOutOfBounds(HashRange::new(
            65000, 65536
        )))
    );
    assert_eq!(
        add(&mut s, 1, &[(50, 60), (0, 50)]),
        Err(SelectorError::OverlappingRanges(
            HashRange::new(0, 50),
            HashRange::new(50, 60)
        ))
    );
    assert_eq!(s.consumer_count(), 0);
    let ok = add(&mut s, 1, &[(100, 199), (0, 9), (10, 19)]).unwrap();
    assert_eq!(
        ok.added,
        vec![(1, vec![HashRange::new(0, 19), HashRange::new(100, 199)])]
    );
    assert!(ok.removed.is_empty());
    assert_eq!(
        add(&mut s, 1, &[(500, 600)]),
        Err(SelectorError::DuplicateConsumer(1))
    );
    assert_eq!(
        add(&mut s, 2, &[(300, 400), (150, 250)]),
        Err(SelectorError::RangeConflict {
            range: HashRange::new(150, 250),
            owner: 1
        })
    );
    assert_eq!(
        add(&mut s, 2, &[(199, 199)]),
        Err(SelectorError::RangeConflict {
            range: HashRange::new(199, 199),
            owner: 1
        })
    );
    add(&mut s, 2, &[(20, 99), (200, 65535)]).unwrap();
    assert_eq!(s.consumer_count(), 2);
    assert_eq!(s.select(20), Some(2));
    assert_eq!(s.select(19), Some(1));
    assert_eq!(s.select(65536 + 19), Some(1));
    let gone = s.remove_consumer(1);
    assert_eq!(
        gone.removed,
        vec![(1, vec![HashRange::new(0, 19), HashRange::new(100, 199)])]
    );
    assert!(gone.added.is_empty());
    assert_eq!(s.select(19), None, "unassigned after the owner left");
    assert!(s.remove_consumer(1).is_empty());
    // Messages are lowercase and name the offending values.
    let e = SelectorError::RangeConflict {
        range: HashRange::new(1, 2),
        owner: 7u32,
    };
    assert_eq!(e.to_string(), "range conflict with consumer 7 on [1, 2]");
    assert_eq!(
        SelectorError::<u32>::NoRangeLeftToSplit.to_string(),
        "no more range can be assigned"
    );
}

#[test]
fn diff_and_assignment_helpers() {
    let r = |a, b| HashRange::new(a, b);
    let before =
        Assignment::from_sorted([(r(0, 9), 1u32), (r(10, 19), 1), (r(30, 39), 2)]).unwrap();
    assert_eq!(before.ranges(), &[(r(0, 19), 1), (r(30, 39), 2)]);
    assert_eq!(before.owner(25), None);
    assert_eq!(before.owner(19), Some(1));
    assert_eq!(before.ranges_of(2), vec![r(30, 39)]);
    assert!(Assignment::from_sorted([(r(5, 9), 1u32), (r(9, 12), 2)]).is_none());
    assert!(Assignment::from_sorted([(r(9, 5), 1u32)]).is_none());
    let after = Assignment::from_sorted([(r(0, 4), 1u32), (r(5, 34), 3), (r(35, 39), 2)]).unwrap();
    let d = diff(&before, &after);
    assert_eq!(d.removed, vec![(1, vec![r(5, 19)]), (2, vec![r(30, 34)])]);
    assert_eq!(d.added, vec![(3, vec![r(5, 34)])]);
    assert!(d.removed_contains(2, 34) && !d.removed_contains(2, 35));
    assert!(d.added_contains(3, 20) && !d.added_contains(1, 20));
    assert!(diff(&after, &after).is_empty());
    assert!(ranges_contain(&[r(0, 0)], 0));
    assert!(!ranges_contain(&[], 0));
}

// ---------------------------------------------------------------- snapshots

fn render(out: &mut String, op: &str, i: &ImpactedConsumers<u32>) {
    let _ = writeln!(out, "{op}");
    for (label, list) in [("  lost  ", &i.removed), ("  gained", &i.added)] {
        for (c, rs) in list {
            let rs: Vec<String> = rs.iter().map(ToString::to_string).collect();
            let _ = writeln!(out, "{label} c{c}: {}", rs.join(" "));
        }
    }
}

fn script<S: StickyKeySelector<u32>>(mut s: S, ops: &[(&str, u32, Vec<HashRange>)]) -> String {
    let mut out = String::new();
    for (op, id, ranges) in ops {
        match *op {
            "join" => match s.add_consumer(ConsumerInfo::with_ranges(
                *id,
                format!("c{id}"),
                ranges.clone(),
            )) {
                Ok(i) => render(&mut out, &format!("join c{id}"), &i),
                Err(e) => {
                    let _ = writeln!(out, "join c{id}: error: {e}");
                }
            },
            _ => render(&mut out, &format!("leave c{id}"), &s.remove_consumer(*id)),
        }
    }
    let _ = writeln!(out, "final assignment:");
    for (r, c) in s.assignment().ranges() {
        let _ = writeln!(out, "  {r} c{c}");
    }
    out
}

#[test]
fn snapshot_ring_join_leave() {
    let ops: Vec<(&str, u32, Vec<HashRange>)> = vec![
        ("join", 1, vec![]),
        ("join", 2, vec![]),
        ("join", 3, vec![]),
        ("leave", 2, vec![]),
        ("join", 2, vec![]),
        ("leave", 1, vec![]),
        ("leave", 9, vec![]),
    ];
    insta::assert_snapshot!(script(ConsistentHashingSelector::new(3), &ops));
}

#[test]
fn snapshot_auto_split_join_leave() {
    let ops: Vec<(&str, u32, Vec<HashRange>)> = vec![
        ("join", 1, vec![]),
        ("join", 2, vec![]),
        ("join", 3, vec![]),
        ("join", 4, vec![]),
        ("leave", 1, vec![]),
        ("leave", 3, vec![]),
        ("join", 5, vec![]),
    ];
    insta::assert_snapshot!(script(AutoSplitSelector::new(), &ops));
}

#[test]
fn snapshot_exclusive_join_leave() {
    let r = HashRange::new;
    let ops: Vec<(&str, u32, Vec<HashRange>)> = vec![
        ("join", 1, vec![r(0, 32767)]),
        ("join", 2, vec![r(32768, 40000), r(50000, 65535)]),
        ("join", 3, vec![r(40000, 49999)]),
        ("join", 3, vec![r(40001, 49999)]),
        ("leave", 1, vec![]),
        ("join", 4, vec![]),
    ];
    insta::assert_snapshot!(script(ExclusiveRangeSelector::new(), &ops));
}
