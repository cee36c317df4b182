//! Reference models of the three selectors, compared over seeded random joins and leaves.

use std::collections::{BTreeMap, BTreeSet};

use super::*;

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
    let mut rng = SplitMix64::new(seed);
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

/// The ring keeps its slot table only with two or more consumers: every slot must still match
/// the model through each way in and out of that state (none, one, two, three consumers), with
/// the impacted ranges of each step.
#[test]
fn ring_matches_the_model_through_one_and_two_consumers() {
    let mut real = ConsistentHashingSelector::<u32>::new(20);
    let mut model = RingModel {
        points: 20,
        ring: BTreeMap::new(),
        names: BTreeMap::new(),
        members: BTreeMap::new(),
    };
    let steps: [(bool, u32); 12] = [
        (true, 1),
        (true, 2),
        (false, 1),
        (false, 2),
        (true, 3),
        (true, 4),
        (true, 5),
        (false, 4),
        (false, 3),
        (true, 6),
        (false, 5),
        (false, 6),
    ];
    for (k, &(add, id)) in steps.iter().enumerate() {
        let before = real.assignment();
        let got = if add {
            model.add(id, &format!("c{id}"));
            real.add_consumer(ConsumerInfo::new(id, format!("c{id}")))
                .unwrap()
        } else {
            model.remove(id);
            real.remove_consumer(id)
        };
        let ctx = format!("step {k}: {} {id}", if add { "add" } else { "remove" });
        let (added, removed) = if add {
            (Some(id), None)
        } else {
            (None, Some(id))
        };
        check_impacted(&ctx, &before, &real.assignment(), &got, added, removed);
        let owners = model.owners();
        for (slot, want) in owners.iter().enumerate().skip(1) {
            assert_eq!(real.select(slot as u32), *want, "{ctx} slot {slot}");
        }
        assert_eq!(real.select(0), owners[1], "{ctx} slot 0");
    }
    assert_eq!(real.consumer_count(), 0);
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
        let mut rng = SplitMix64::new(seed);
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

/// Every range the selector hands out satisfies `start <= end <= 65535`.
fn valid_ranges(i: &ImpactedConsumers<u32>) -> bool {
    i.removed
        .iter()
        .chain(&i.added)
        .flat_map(|(_, rs)| rs)
        .all(|r| r.start <= r.end && r.end <= 65535)
}

#[test]
fn auto_split_refuses_the_65536th_consumer_and_never_publishes_an_inverted_range() {
    let mut s = AutoSplitSelector::<u32>::new();
    for id in 0..65535u32 {
        let got = s.add_consumer(ConsumerInfo::new(id, "c")).unwrap();
        assert!(valid_ranges(&got), "add {id}: {got:?}");
    }
    assert_eq!(s.consumer_count(), 65535);
    let a = s.assignment();
    assert!(
        a.ranges()
            .iter()
            .all(|(r, _)| r.start <= r.end && r.end <= 65535),
        "an inverted or out-of-bounds range in the snapshot"
    );
    // Every consumer owns at least one slot, and every slot is owned.
    let mut owners: Vec<u32> = a.ranges().iter().map(|&(_, c)| c).collect();
    owners.sort_unstable();
    owners.dedup();
    assert_eq!(owners.len(), 65535);
    assert_eq!(a.ranges().iter().map(|(r, _)| r.size()).sum::<u64>(), 65536);
    // The 65,536th consumer is refused, and nothing changes.
    assert_eq!(
        s.add_consumer(ConsumerInfo::new(70000, "c")),
        Err(SelectorError::TooManyConsumers)
    );
    assert_eq!(s.consumer_count(), 65535);
    assert_eq!(s.assignment(), a);
    // The top owner keeps slot 65535; removing it hands a valid range to its heir.
    let top = s.select(65535).unwrap();
    let got = s.remove_consumer(top);
    assert!(valid_ranges(&got), "{got:?}");
    assert_eq!(got.removed_ranges(top), [HashRange::new(65535, 65535)]);
}

#[test]
fn auto_split_runs_out_of_ranges() {
    let mut s = AutoSplitSelector::<u32>::new();
    for id in 0..65535u32 {
        s.add_consumer(ConsumerInfo::new(id, "c")).unwrap();
    }
    assert!(s.bounds().all(|(b, _)| b >= 1));
    assert_eq!(
        s.add_consumer(ConsumerInfo::new(70000, "c")),
        Err(SelectorError::TooManyConsumers)
    );
    assert_eq!(s.consumer_count(), AutoSplitSelector::<u32>::MAX_CONSUMERS);
    // Removing one makes room again.
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
        let mut rng = SplitMix64::new(seed);
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
