//! Selector tests: Pulsar vectors, W6 check values, reference models over seeded random
//! operation sequences, typed errors and scripted snapshots.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::*;
use crate::hash::{key_hash31, CONSISTENT_RANGE, FULL_RANGE};

use crate::rng::SplitMix64;

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
    let mut rng = SplitMix64::new(43);
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
    assert_eq!(
        i.removed,
        vec![(1, Ranges::from_vec(vec![HashRange::new(1, 65535)]))]
    );
    assert_eq!(
        i.added,
        vec![(2, Ranges::from_vec(vec![HashRange::new(1, 65535)]))]
    );
    assert_eq!(r.point_entry(p), Some((2, vec![3])));
    // A rejoins behind C.
    assert!(r.add_consumer(ConsumerInfo::new(1, a)).unwrap().is_empty());
    assert_eq!(r.point_entry(p), Some((2, vec![3, 1])));
    // A queued consumer leaving moves nothing.
    assert!(r.remove_consumer(3).is_empty());
    assert_eq!(r.point_entry(p), Some((2, vec![1])));
    let i = r.remove_consumer(2);
    assert_eq!(
        i.added,
        vec![(1, Ranges::from_vec(vec![HashRange::new(1, 65535)]))]
    );
    let i = r.remove_consumer(1);
    assert_eq!(
        i.removed,
        vec![(1, Ranges::from_vec(vec![HashRange::new(1, 65535)]))]
    );
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

mod model;

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
        vec![(
            1,
            Ranges::from_vec(vec![HashRange::new(0, 19), HashRange::new(100, 199)])
        )]
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
        vec![(
            1,
            Ranges::from_vec(vec![HashRange::new(0, 19), HashRange::new(100, 199)])
        )]
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
    assert_eq!(
        d.removed,
        vec![
            (1, Ranges::from_vec(vec![r(5, 19)])),
            (2, Ranges::from_vec(vec![r(30, 34)]))
        ]
    );
    assert_eq!(d.added, vec![(3, Ranges::from_vec(vec![r(5, 34)]))]);
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
