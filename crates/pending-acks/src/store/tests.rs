//! Layout tests of the store (dense/ordered/tree buckets, trimming, memory) and a store-level
//! reference model over seeded random operations.

use std::collections::BTreeMap;

use super::{Store, ABSENT};
use crate::types::PendingAck;

fn ack(remaining: u32, hash: u32) -> PendingAck {
    PendingAck { remaining, hash }
}

fn entries(s: &Store) -> Vec<(u64, u64, PendingAck)> {
    let mut v = Vec::new();
    s.for_each(|a, b, c| v.push((a, b, c)));
    v
}

#[test]
fn ascending_entries_stay_dense_at_eight_bytes_each() {
    let mut s = Store::default();
    for i in 0..100_000u64 {
        assert_eq!(s.insert(i / 10_000, i % 10_000, ack(1, i as u32)), None);
    }
    assert_eq!(s.len(), 100_000);
    assert_eq!(s.shape(), (10, 0, 0));
    // The last bucket may still have growth slack; the sealed ones are exact.
    let per_entry = s.memory_bytes() as f64 / 100_000.0;
    assert!(per_entry < 8.5, "{per_entry} bytes/entry");
}

#[test]
fn holes_at_the_ends_are_trimmed_and_memory_shrinks() {
    let mut s = Store::default();
    for o in 0..10_000u64 {
        s.insert(0, o, ack(1, 1));
    }
    let full = s.memory_bytes();
    for o in 0..9_990u64 {
        assert_eq!(s.remove(0, o), Some(ack(1, 1)));
    }
    assert_eq!(s.len(), 10);
    assert_eq!(s.shape(), (1, 0, 0));
    assert!(
        s.memory_bytes() * 20 < full,
        "{} vs {full}",
        s.memory_bytes()
    );
    // Removing from the back trims too.
    for o in (9_990..10_000u64).rev() {
        s.remove(0, o);
    }
    assert_eq!(s.len(), 0);
    assert_eq!(s.shape(), (0, 0, 0));
}

#[test]
fn a_far_insert_goes_ordered_and_density_brings_it_back() {
    let mut s = Store::default();
    for o in 0..100u64 {
        s.insert(3, o, ack(1, 2));
    }
    s.insert(3, 1_000_000_000, ack(1, 3));
    assert_eq!(s.shape(), (0, 1, 0));
    assert_eq!(s.get(3, 1_000_000_000), Some(ack(1, 3)));
    assert_eq!(s.remove(3, 1_000_000_000), Some(ack(1, 3)));
    // Enough operations on a now-compact bucket turn it dense again.
    for o in 100..300u64 {
        s.insert(3, o, ack(1, 2));
    }
    assert_eq!(s.shape(), (1, 0, 0));
    assert_eq!(entries(&s).len(), 300);
}

#[test]
fn many_holes_in_the_middle_go_ordered() {
    let mut s = Store::default();
    for o in 0..1_000u64 {
        s.insert(0, o, ack(1, 1));
    }
    for o in 1..999u64 {
        if o % 10 != 0 {
            s.remove(0, o);
        }
    }
    assert_eq!(s.shape(), (0, 1, 0));
    assert_eq!(s.len(), 101);
}

#[test]
fn spread_ascending_offsets_stay_ordered_and_a_middle_insert_into_many_goes_to_a_tree() {
    let mut s = Store::default();
    // One position in fifty, as a Key_Shared consumer gets them.
    for i in 0..200u64 {
        s.insert(0, i * 50, ack(1, i as u32));
    }
    assert_eq!(s.shape(), (0, 1, 0));
    assert_eq!(s.get(0, 50 * 77), Some(ack(1, 77)));
    assert_eq!(s.get(0, 50 * 77 + 1), None);
    // Acks in order pop the front; one out of order leaves a tombstone that is skipped.
    assert_eq!(s.remove(0, 0), Some(ack(1, 0)));
    assert_eq!(s.remove(0, 500), Some(ack(1, 10)));
    assert_eq!(s.remove(0, 500), None);
    assert_eq!(s.get(0, 500), None);
    // Re-adding a removed offset revives its place.
    assert_eq!(s.insert(0, 500, ack(2, 10)), None);
    assert_eq!(s.get(0, 500), Some(ack(2, 10)));
    assert_eq!(s.shape(), (0, 1, 0));
    // A new offset in the middle of more than 64 pairs: the tree form takes it.
    assert_eq!(s.insert(0, 501, ack(1, 1)), None);
    assert_eq!(s.shape(), (0, 0, 1));
    assert_eq!(s.len(), 200);
    let offs: Vec<u64> = entries(&s).iter().map(|e| e.1).collect();
    let mut sorted = offs.clone();
    sorted.sort_unstable();
    assert_eq!(offs, sorted);
}

#[test]
fn tombstones_are_dropped_once_they_outnumber_the_entries() {
    let mut s = Store::default();
    for i in 0..1_000u64 {
        s.insert(0, i * 10, ack(1, 1));
    }
    assert_eq!(s.shape(), (0, 1, 0));
    // Remove every entry but the two ends, from the middle outwards: tombstones only.
    for i in 1..999u64 {
        assert_eq!(s.remove(0, i * 10), Some(ack(1, 1)));
    }
    assert_eq!(s.len(), 2);
    // 998 tombstones would be 16 KB; compaction and the shrink keep far less.
    assert!(s.memory_bytes() < 2_000, "{}", s.memory_bytes());
    assert_eq!(
        entries(&s).iter().map(|e| e.1).collect::<Vec<_>>(),
        [0, 9_990]
    );
}

#[test]
fn an_emptied_small_bucket_lends_its_buffer_and_form_to_the_next() {
    let mut s = Store::default();
    for i in 0..20u64 {
        s.insert(0, i * 50, ack(1, 1));
    }
    assert_eq!(s.shape(), (0, 1, 0));
    for i in 0..20u64 {
        s.remove(0, i * 50);
    }
    assert_eq!(s.shape(), (0, 0, 0));
    // The spare buffer is still counted as held memory.
    assert!(s.memory_bytes() > 0);
    s.insert(0, 5_000, ack(1, 1));
    assert_eq!(s.shape(), (0, 1, 0));
    s.insert(0, 5_050, ack(1, 2));
    assert_eq!(s.get(0, 5_050), Some(ack(1, 2)));
    // Clearing gives everything back.
    s.drain_all(|_, _, _| {});
    assert_eq!(s.memory_bytes(), 0);
}

#[test]
fn a_value_equal_to_the_hole_marker_is_kept_in_a_tree() {
    let mut s = Store::default();
    let all_ones = ack(u32::MAX, u32::MAX);
    s.insert(0, 0, ack(1, 1));
    s.insert(0, 1, all_ones);
    assert_eq!(s.shape(), (0, 0, 1));
    assert_eq!(s.get(0, 1), Some(all_ones));
    // A new segment starting with it is a tree from the start.
    s.insert(1, 5, all_ones);
    assert_eq!(s.get(1, 5), Some(all_ones));
    assert_eq!(s.update_remaining(1, 5, 0), Some(u32::MAX));
    assert_eq!(s.remove(1, 5), Some(all_ones));
    assert_eq!(super::pack(all_ones), ABSENT);
}

#[test]
fn out_of_order_segments_and_offsets_keep_order() {
    let mut s = Store::default();
    for (seg, off) in [
        (5, 3),
        (1, 9),
        (5, 1),
        (3, 0),
        (1, 2),
        (9, u64::MAX),
        (0, 0),
    ] {
        s.insert(seg, off, ack(1, (seg * 100 + off % 100) as u32));
    }
    let keys: Vec<_> = entries(&s).iter().map(|e| (e.0, e.1)).collect();
    assert_eq!(
        keys,
        [
            (0, 0),
            (1, 2),
            (1, 9),
            (3, 0),
            (5, 1),
            (5, 3),
            (9, u64::MAX)
        ]
    );
}

#[test]
fn drain_up_to_is_inclusive_ascending_and_stops_at_the_bound() {
    let mut s = Store::default();
    for seg in 0..3u64 {
        for off in 0..5u64 {
            s.insert(seg, off * 2, ack(1, 0));
        }
    }
    assert!(!s.has_any_up_to(0, 0) || s.get(0, 0).is_some());
    let mut seen = Vec::new();
    let n = s.drain_up_to(1, 4, |a, b, _| seen.push((a, b)));
    assert_eq!(n, 8);
    assert_eq!(
        seen,
        [
            (0, 0),
            (0, 2),
            (0, 4),
            (0, 6),
            (0, 8),
            (1, 0),
            (1, 2),
            (1, 4)
        ]
    );
    assert!(!s.has_any_up_to(1, 5));
    assert!(s.has_any_up_to(1, 6));
    assert_eq!(s.len(), 7);
}

#[test]
fn repair_drops_empty_buckets_and_recounts() {
    let mut s = Store::default();
    s.insert(0, 0, ack(1, 0));
    s.insert(1, 0, ack(1, 0));
    if let Some(seg) = s.segs.front_mut() {
        seg.pop_first_up_to(None);
    }
    s.repair();
    assert_eq!(s.len(), 1);
    assert_eq!(s.shape(), (1, 0, 0));
}

/// SplitMix64, for seeded operation sequences.
struct Rng(u64);
impl Rng {
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

#[derive(Debug, Clone, Copy)]
enum Op {
    Insert(u64, u64, PendingAck),
    Remove(u64, u64),
    Update(u64, u64, u32),
    DrainUpTo(u64, u64),
}

/// Position generator for a profile: 0 ascending-heavy, 1 random, 2 sparse offsets,
/// 3 many segments, 4 ascending with gaps (one consumer's share of a Key_Shared stream) and
/// some going back.
fn position(rng: &mut Rng, profile: u64, cursor: &mut u64) -> (u64, u64) {
    match profile {
        0 => {
            if rng.below(10) < 8 {
                *cursor += 1 + rng.below(2);
            } else {
                *cursor = cursor.saturating_sub(rng.below(50));
            }
            (*cursor / 500, *cursor % 500)
        }
        1 => (rng.below(4), rng.below(400)),
        2 => (rng.below(2), rng.below(8) * 1_000_000 + rng.below(64)),
        3 => (rng.below(200), rng.below(8)),
        _ => {
            if rng.below(10) < 9 {
                *cursor += 5 + rng.below(40);
            } else {
                *cursor = cursor.saturating_sub(rng.below(2_000));
            }
            (*cursor / 100_000, *cursor % 100_000)
        }
    }
}

fn run_store_model(seed: u64, steps: usize) -> Result<[usize; 3], String> {
    let mut rng = Rng(seed);
    let profile = seed % 5;
    let mut cursor = 0u64;
    let mut s = Store::default();
    let mut model: BTreeMap<(u64, u64), PendingAck> = BTreeMap::new();
    let mut ops = Vec::new();
    let mut saw = [0; 3];
    for step in 0..steps {
        let (seg, off) = position(&mut rng, profile, &mut cursor);
        let roll = rng.below(100);
        let op = if roll < 50 {
            let a = if rng.below(200) == 0 {
                ack(u32::MAX, u32::MAX)
            } else {
                ack(1 + rng.below(3) as u32, rng.below(65536) as u32)
            };
            Op::Insert(seg, off, a)
        } else if roll < 85 {
            // Remove mostly near the front of the model.
            match model.keys().nth(rng.below(4) as usize) {
                Some(&(a, b)) if rng.below(2) == 0 => Op::Remove(a, b),
                _ => Op::Remove(seg, off),
            }
        } else if roll < 95 {
            Op::Update(seg, off, rng.below(3) as u32)
        } else {
            Op::DrainUpTo(seg, off)
        };
        ops.push(op);
        let fail = |what: String, ops: &[Op]| {
            let tail: Vec<_> = ops.iter().rev().take(20).rev().collect();
            format!("seed {seed} step {step}: {what}; last ops: {tail:?}")
        };
        match op {
            Op::Insert(a, b, v) => {
                let got = s.insert(a, b, v);
                let want = model.insert((a, b), v);
                if got != want {
                    return Err(fail(
                        format!("insert returned {got:?}, want {want:?}"),
                        &ops,
                    ));
                }
            }
            Op::Remove(a, b) => {
                let got = s.remove(a, b);
                let want = model.remove(&(a, b));
                if got != want {
                    return Err(fail(
                        format!("remove returned {got:?}, want {want:?}"),
                        &ops,
                    ));
                }
            }
            Op::Update(a, b, d) => {
                let got = s.update_remaining(a, b, d);
                let want = model.get_mut(&(a, b)).map(|v| {
                    v.remaining = v.remaining.saturating_sub(d);
                    v.remaining
                });
                if got != want {
                    return Err(fail(
                        format!("update returned {got:?}, want {want:?}"),
                        &ops,
                    ));
                }
            }
            Op::DrainUpTo(a, b) => {
                let want_any = model.range(..=(a, b)).next().is_some();
                if s.has_any_up_to(a, b) != want_any {
                    return Err(fail(format!("has_any_up_to != {want_any}"), &ops));
                }
                let mut got = Vec::new();
                s.drain_up_to(a, b, |x, y, v| got.push(((x, y), v)));
                let want: Vec<_> = model.range(..=(a, b)).map(|(k, v)| (*k, *v)).collect();
                for (k, _) in &want {
                    model.remove(k);
                }
                if got != want {
                    return Err(fail(format!("drained {got:?}, want {want:?}"), &ops));
                }
            }
        }
        if s.len() != model.len() {
            return Err(fail(format!("len {} want {}", s.len(), model.len()), &ops));
        }
        let (d, o, t) = s.shape();
        saw[0] += d.min(1);
        saw[1] += o.min(1);
        saw[2] += t.min(1);
        if step % 64 == 0 || step + 1 == steps {
            let got: Vec<_> = entries(&s)
                .into_iter()
                .map(|(a, b, v)| ((a, b), v))
                .collect();
            let want: Vec<_> = model.iter().map(|(k, v)| (*k, *v)).collect();
            if got != want {
                return Err(fail("contents differ".into(), &ops));
            }
            for (&(a, b), v) in model.iter().take(8) {
                if s.get(a, b) != Some(*v) {
                    return Err(fail(format!("get({a},{b}) wrong"), &ops));
                }
            }
        }
    }
    Ok(saw)
}

#[test]
fn store_matches_a_btreemap_over_seeded_operations() {
    let mut saw = [0; 3];
    for seed in 0..80u64 {
        match std::panic::catch_unwind(|| run_store_model(seed, 3_000)) {
            Ok(Ok(s)) => {
                for (a, b) in saw.iter_mut().zip(s) {
                    *a += b;
                }
            }
            Ok(Err(e)) => panic!("{e}\nreproduce: run_store_model({seed}, 3000)"),
            Err(_) => panic!("seed {seed} panicked\nreproduce: run_store_model({seed}, 3000)"),
        }
    }
    // The sequences must exercise all three forms, or the model proves little.
    assert!(
        saw.iter().all(|&n| n > 0),
        "steps in dense, ordered, tree: {saw:?}"
    );
}
