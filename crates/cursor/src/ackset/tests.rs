use super::*;
use crate::codec::{Reader, Writer};
use std::collections::BTreeSet;

fn p(e: u64) -> Position {
    Position::new(1, e)
}

/// Spreads ids over three ledgers (odd seeds) to exercise the per-ledger block lists.
fn q(seed: u64, e: u64) -> Position {
    if seed % 2 == 1 {
        Position::new(1 + e % 3, e / 3)
    } else {
        p(e)
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

fn roundtrip(s: &AckSet) -> AckSet {
    let mut w = Writer::default();
    s.encode(&mut w);
    let buf = w.into_inner();
    let mut r = Reader::new(&buf);
    let d = AckSet::decode(&mut r).expect("decodes");
    assert!(r.is_empty());
    d
}

/// The cursor's pattern: acks land in a window right above a moving floor (the head
/// block, a bitmap once it has more than 16 runs), and the floor moves through runs and
/// through arbitrary points, often inside a run.
#[test]
fn a_sliding_window_over_the_head_block_matches_a_btreeset() {
    for seed in 0..20u64 {
        let mut rng = Rng(seed);
        let mut s = AckSet::new();
        let mut m = BTreeSet::new();
        let mut floor = 0u64;
        for step in 0..6_000 {
            let e = floor + 1 + rng.next() % 300;
            if !rng.next().is_multiple_of(8) {
                assert_eq!(s.insert(Position::new(1, e)), m.insert(Position::new(1, e)));
            } else {
                let cut = floor + rng.next() % 200;
                let before = m.len();
                m.retain(|x| x.entry_id > cut);
                let removed = s.remove_through(Position::new(1, cut));
                assert_eq!(
                    removed as usize,
                    before - m.len(),
                    "seed {seed} step {step}"
                );
                floor = cut;
            }
            assert_eq!(s.len(), m.len() as u64);
            assert_eq!(
                s.first(),
                m.iter().next().copied(),
                "seed {seed} step {step}"
            );
            s.check_bitmaps();
        }
        assert_eq!(s.ranges().len(), {
            let mut runs = 0;
            let mut prev: Option<u64> = None;
            for p in &m {
                if prev.is_none_or(|q| q + 1 != p.entry_id) {
                    runs += 1;
                }
                prev = Some(p.entry_id);
            }
            runs
        });
    }
}

#[test]
fn matches_a_btreeset_over_random_ops() {
    for seed in 0..40u64 {
        let mut rng = Rng(seed);
        let mut s = AckSet::new();
        let mut m = BTreeSet::new();
        let span = [50u64, 5000, 20_000][(seed % 3) as usize];
        for step in 0..3000 {
            let op = rng.next() % 10;
            let e = rng.next() % span;
            if op < 8 {
                assert_eq!(
                    s.insert(q(seed, e)),
                    m.insert(q(seed, e)),
                    "seed {seed} step {step}"
                );
            } else if op == 8 {
                let removed = s.remove_through(q(seed, e));
                let before = m.len();
                let cut = q(seed, e);
                m.retain(|&x| x > cut);
                assert_eq!(
                    removed as usize,
                    before - m.len(),
                    "seed {seed} step {step}"
                );
            } else {
                let x = q(seed, e);
                let want = m.contains(&x).then(|| {
                    let mut end = x;
                    while m.contains(&end.next()) {
                        end = end.next();
                    }
                    end
                });
                assert_eq!(s.run_end(x), want, "seed {seed} step {step} e {e}");
            }
            assert_eq!(s.len(), m.len() as u64);
            s.check_bitmaps();
        }
        assert_eq!(s.first(), m.iter().next().copied());
        assert_eq!(s.last(), m.iter().next_back().copied());
        for e in 0..span {
            assert_eq!(
                s.contains(q(seed, e)),
                m.contains(&q(seed, e)),
                "seed {seed} e {e}"
            );
        }
        let d = roundtrip(&s);
        assert_eq!(d.ranges(), s.ranges(), "seed {seed}");
        assert_eq!(d.len(), s.len());
        let flat: Vec<Position> = s
            .ranges()
            .into_iter()
            .flat_map(|(a, b)| {
                (a.entry_id..=b.entry_id).map(move |e| Position::new(a.ledger_id, e))
            })
            .collect();
        assert_eq!(flat, m.iter().copied().collect::<Vec<_>>(), "seed {seed}");
    }
}

#[test]
fn alternating_positions_encode_as_bitmaps() {
    let mut s = AckSet::new();
    for e in (0..1_000_000u64).step_by(2) {
        s.insert(p(e));
    }
    let mut w = Writer::default();
    s.encode(&mut w);
    let n = w.into_inner().len();
    // 245 blocks of 512 bytes plus small headers.
    assert!(n <= 130_000, "encoded {n} bytes");
    assert_eq!(roundtrip(&s), s);
}

#[test]
fn full_blocks_collapse_to_one_run() {
    let mut s = AckSet::new();
    for e in (0..10_000u64).rev() {
        s.insert(p(e));
    }
    assert_eq!(s.ranges(), vec![(p(0), p(9_999))]);
    assert_eq!(s.run_end(p(0)), Some(p(9_999)));
    let mut w = Writer::default();
    s.encode(&mut w);
    assert!(w.into_inner().len() < 40);
}

/// Whether the head block (the first block of the first ledger) is a bitmap.
fn head_is_bitmap(s: &AckSet) -> bool {
    matches!(
        s.ledgers.first().and_then(|lb| lb.blocks.front()),
        Some((_, Container::Bitmap(_)))
    )
}

/// The head block keeps its bitmap while its runs fall (acks that fill the gaps, moves
/// that clear a prefix) and, once it empties, the next head block starts as that bitmap;
/// the encoding still follows the contents: a head bitmap of one run is a few bytes.
#[test]
fn the_head_keeps_its_bitmap_and_encodes_by_contents() {
    let mut s = AckSet::new();
    for e in (0..100u64).step_by(2) {
        s.insert(p(e));
    }
    assert!(head_is_bitmap(&s), "50 runs in the head");
    for e in (1..99u64).step_by(2) {
        s.insert(p(e));
    }
    assert_eq!(s.ranges(), vec![(p(0), p(98))]);
    assert!(head_is_bitmap(&s), "one run, still the head's bitmap");
    let mut w = Writer::default();
    s.encode(&mut w);
    assert!(w.into_inner().len() < 40);
    assert_eq!(roundtrip(&s), s);
    // Emptied: the block is dropped; the next head block starts as the (cleared) bitmap.
    assert_eq!(s.remove_through(p(98)), 99);
    assert!(s.is_empty() && s.first().is_none());
    assert!(s.insert(p(5_000)));
    assert!(head_is_bitmap(&s));
    assert_eq!(s.ranges(), vec![(p(5_000), p(5_000))]);
    assert_eq!(s.first(), Some(p(5_000)));
    s.check_bitmaps();
}

/// Equality is of the positions held: a head bitmap's scan bound, moved by a mark-delete
/// move, is not part of it (a decoded set starts without one).
#[test]
fn a_head_bitmap_after_a_partial_clear_equals_its_decoded_copy() {
    let mut s = AckSet::new();
    for e in (0..200u64).step_by(2) {
        s.insert(p(e));
    }
    s.remove_through(p(99));
    assert_eq!(roundtrip(&s), s);
}

#[test]
fn runs_never_merge_across_ledgers() {
    let mut s = AckSet::new();
    s.insert(Position::new(1, u64::MAX));
    s.insert(Position::new(2, 0));
    assert_eq!(s.ranges().len(), 2);
    assert_eq!(
        s.run_end(Position::new(1, u64::MAX)),
        Some(Position::new(1, u64::MAX))
    );
    assert_eq!(roundtrip(&s), s);
}

#[test]
fn decode_rejects_garbage() {
    for bad in [
        &[1u8, 1, 1, 0, 9][..],
        &[1, 1, 1, 0, 0, 0],
        &[1, 1, 1, 0, 2][..],
    ] {
        let mut r = Reader::new(bad);
        assert!(AckSet::decode(&mut r).is_err(), "{bad:?}");
    }
}

/// Ledger and block ids are stored as deltas: a repeated id or one past `u64::MAX` is named.
#[test]
fn decode_names_ids_that_do_not_increase_or_overflow() {
    // One block of one run at entry 0: kind 0, one run, gap 0, length 1.
    let block = |w: &mut Writer| {
        w.byte(0);
        w.varint(1);
        w.varint(0);
        w.varint(0);
    };
    let cases: [(&[u64], &[u64], &str); 4] = [
        (&[1, 0], &[0], "ledger ids not increasing"),
        (&[u64::MAX, 1], &[0], "ledger id overflow"),
        (&[1], &[0, 0], "block ids not increasing"),
        (&[1], &[1, u64::MAX], "block id overflow"),
    ];
    for (ledger_deltas, block_deltas, what) in cases {
        let mut w = Writer::default();
        w.varint(ledger_deltas.len() as u64);
        for l in ledger_deltas {
            w.varint(*l);
            w.varint(block_deltas.len() as u64);
            for b in block_deltas {
                w.varint(*b);
                block(&mut w);
            }
        }
        let buf = w.into_inner();
        let err = AckSet::decode(&mut Reader::new(&buf)).unwrap_err();
        assert_eq!(err.what, what, "{ledger_deltas:?} {block_deltas:?}");
    }
}
