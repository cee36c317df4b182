use super::*;

fn pos(l: u64, e: u64) -> Position {
    Position::new(l, e)
}

fn positions(es: &[Entry]) -> Vec<Position> {
    es.iter().map(|e| e.position).collect()
}

#[test]
fn rolls_over_by_count_and_on_demand() {
    let mut l = InMemoryLedger::new(2);
    assert_eq!(l.before_first(), pos(0, u64::MAX));
    assert_eq!((l.first_position(), l.last_position()), (None, None));
    let a = l.append(EntryMeta::simple(1, 1));
    let b = l.append(EntryMeta::simple(2, 1));
    l.roll_over();
    let c = l.append(EntryMeta::simple(3, 1));
    l.roll_over();
    let d = l.append(EntryMeta::simple(4, 1));
    assert_eq!(
        vec![a, b, c, d],
        vec![pos(1, 0), pos(1, 1), pos(2, 0), pos(3, 0)]
    );
    assert_eq!(l.entry_count(1), Some(2));
    assert_eq!(l.entry_count(2), Some(1));
    assert_eq!(l.entry_count(4), None);
    assert_eq!(l.entry_count(0), None);
    assert_eq!((l.len(), l.is_empty()), (4, false));
}

#[test]
fn positions_handed_out_ahead_are_the_ones_appends_get() {
    let mut l = InMemoryLedger::new(3);
    l.roll_over();
    let mut next = l.next_append_position();
    for i in 0..8 {
        let ahead = next;
        next = l.append_position_after(ahead);
        assert_eq!(l.append(EntryMeta::simple(i, 1)), ahead, "entry {i}");
    }
    assert_eq!(l.next_append_position(), next);
}

#[test]
fn a_roll_over_to_an_id_skips_the_ids_below_it_and_never_goes_back() {
    let mut l = InMemoryLedger::new(10);
    assert_eq!(l.append(EntryMeta::simple(1, 1)), pos(1, 0));
    l.roll_over_to(5);
    assert_eq!(l.next_append_position(), pos(5, 0));
    assert_eq!(l.append(EntryMeta::simple(2, 1)), pos(5, 0));
    l.roll_over_to(3);
    assert_eq!(
        l.append(EntryMeta::simple(3, 1)),
        pos(6, 0),
        "an id at or below one used is not used again"
    );
    assert_eq!(l.len(), 3);
    // Reads cross the skipped ids (each an empty ledger).
    assert_eq!(l.next_position(pos(1, 0)), Some(pos(5, 0)));
    assert_eq!(l.next_position(pos(5, 0)), Some(pos(6, 0)));
    assert_eq!(l.entry_count(3), Some(0));
    assert_eq!(
        positions(&l.read_range(pos(1, 0), 10)),
        [pos(1, 0), pos(5, 0), pos(6, 0)]
    );
    assert!(l.get(pos(6, 0)).is_some() && l.get(pos(4, 0)).is_none());
}

#[test]
fn navigation_reads_and_totals() {
    let mut l = InMemoryLedger::new(3);
    for i in 0..7u32 {
        l.append(EntryMeta::simple(u64::from(i), 10 * (i + 1)).with_messages(i + 1));
    }
    assert_eq!(l.next_position(pos(0, u64::MAX)), Some(pos(1, 0)));
    assert_eq!(l.next_position(pos(1, 2)), Some(pos(2, 0)));
    assert_eq!(l.next_position(pos(1, 99)), Some(pos(2, 0)));
    assert_eq!(l.next_position(pos(1, u64::MAX)), Some(pos(2, 0)));
    assert_eq!(l.next_position(pos(3, 0)), None);
    assert_eq!(l.next_position(pos(9, 0)), None);
    assert_eq!(
        positions(&l.read_range(pos(1, 2), 3)),
        vec![pos(1, 2), pos(2, 0), pos(2, 1)]
    );
    assert_eq!(positions(&l.read_range(pos(1, 3), 1)), vec![pos(2, 0)]);
    assert!(l.read_range(pos(3, 1), 5).is_empty());
    assert_eq!(
        positions(&l.read_positions(&[pos(2, 1), pos(1, 0), pos(2, 1), pos(5, 5)])),
        vec![pos(1, 0), pos(2, 1)]
    );
    // (1:1, 2:1] = entries 3, 4, 5 (1-based): messages 3+4+5, bytes 30+40+50.
    let t = l.totals_in(pos(1, 1), pos(2, 1));
    assert_eq!(
        t,
        Backlog {
            entries: 3,
            messages: 12,
            bytes: 120
        }
    );
    assert_eq!(l.totals_in(pos(2, 1), pos(1, 1)), Backlog::default());
    assert_eq!(l.totals_in(pos(0, 0), pos(9, 9)).entries, 7);
    assert_eq!(
        l.stats(pos(2, 0)),
        Some(Backlog {
            entries: 1,
            messages: 4,
            bytes: 40
        })
    );
    assert_eq!(l.stats(pos(2, 3)), None);
    assert!(l.exists(pos(3, 0)) && !l.exists(pos(3, 1)) && !l.exists(pos(0, 0)));
    // The trait's default totals agree with the prefix sums.
    let plain = Linear(&l);
    let all: Vec<Position> = positions(&l.read_range(pos(0, 0), 100));
    for a in &all {
        for b in &all {
            assert_eq!(plain.totals_in(*a, *b), l.totals_in(*a, *b), "{a} {b}");
        }
        assert_eq!(plain.stats(*a), l.stats(*a));
        assert!(plain.exists(*a));
    }
}

/// The trait's default methods (linear search, summing totals) over a real ledger, for
/// comparison.
struct Linear<'a>(&'a InMemoryLedger);
impl Ledger for Linear<'_> {
    fn append(&mut self, _: EntryMeta) -> Position {
        Position::new(0, 0)
    }
    fn first_position(&self) -> Option<Position> {
        self.0.first_position()
    }
    fn last_position(&self) -> Option<Position> {
        self.0.last_position()
    }
    fn before_first(&self) -> Position {
        self.0.before_first()
    }
    fn next_position(&self, p: Position) -> Option<Position> {
        self.0.next_position(p)
    }
    fn get(&self, p: Position) -> Option<Entry> {
        self.0.get(p)
    }
    fn entry_count(&self, id: u64) -> Option<u64> {
        self.0.entry_count(id)
    }
    fn trim_below(&mut self, _: Position) {}
}

/// 30 entries over ledgers of 4, with two early roll-overs (an empty ledger among them) and
/// the first two entries trimmed.
fn rolled_and_trimmed() -> InMemoryLedger {
    let mut l = InMemoryLedger::new(4);
    for i in 0..30u64 {
        l.append(EntryMeta::simple(i, 10));
        if i == 9 || i == 10 {
            l.roll_over();
        }
    }
    l.trim_below(Position::new(1, 2));
    l
}

/// `InMemoryLedger::follows` (one segment lookup) answers what the trait's default
/// (`exists`, then `next_position`) does, for every pair of positions around rolled,
/// trimmed and empty segments, the reserved position before everything included.
#[test]
fn follows_matches_the_default() {
    let l = rolled_and_trimmed();
    let lin = Linear(&l);
    let mut ps = vec![Position::new(0, u64::MAX), Position::new(99, 0)];
    for id in 0..12u64 {
        for e in 0..6u64 {
            ps.push(Position::new(id, e));
        }
        ps.push(Position::new(id, u64::MAX));
    }
    let mut successors = 0;
    for &after in &ps {
        for &p in &ps {
            let want = lin.follows(after, p);
            assert_eq!(l.follows(after, p), want, "after {after} p {p}");
            successors += usize::from(want == Some(true));
        }
    }
    // Every existing entry follows some position (its predecessors, or anything between).
    assert!(successors >= l.len(), "{successors} successor pairs");
}

/// `InMemoryLedger::read_range` (a run per segment) returns what the trait's default (one
/// `next_position` and `get` per entry) does, across rolled, trimmed and empty segments.
#[test]
fn read_range_matches_the_per_entry_default() {
    let l = rolled_and_trimmed();
    let lin = Linear(&l);
    let mut froms = vec![Position::new(0, 0), Position::new(99, 0)];
    for id in 0..12u64 {
        for e in 0..6u64 {
            froms.push(Position::new(id, e));
        }
    }
    for from in froms {
        for max in [0usize, 1, 2, 3, 5, 8, 40] {
            assert_eq!(
                l.read_range(from, max),
                lin.read_range(from, max),
                "from {from} max {max}"
            );
        }
    }
}

#[test]
fn find_by_publish_time_is_the_first_entry_at_or_after_t() {
    let mut l = InMemoryLedger::new(3);
    assert_eq!(l.find_by_publish_time(0), None);
    // Times 10, 20, 20, 30 | 40, 40, 50 ... with equal times across a ledger boundary.
    let times = [10, 20, 20, 30, 40, 40, 40, 50, 60, 70];
    let ps: Vec<Position> = times
        .iter()
        .map(|&t| l.append(EntryMeta::simple(t, 1)))
        .collect();
    assert_eq!(l.find_by_publish_time(0), Some(ps[0]));
    assert_eq!(l.find_by_publish_time(10), Some(ps[0]));
    assert_eq!(l.find_by_publish_time(11), Some(ps[1]));
    assert_eq!(l.find_by_publish_time(20), Some(ps[1]));
    assert_eq!(l.find_by_publish_time(31), Some(ps[4]));
    assert_eq!(l.find_by_publish_time(40), Some(ps[4]));
    assert_eq!(l.find_by_publish_time(70), Some(ps[9]));
    assert_eq!(l.find_by_publish_time(71), None);
    for t in 0..80 {
        assert_eq!(
            l.find_by_publish_time(t),
            Linear(&l).find_by_publish_time(t),
            "t = {t}"
        );
    }
    // Trimmed entries are not found; an emptied first ledger is skipped.
    l.trim_below(ps[3]);
    assert_eq!(l.find_by_publish_time(0), Some(ps[3]));
    l.trim_below(ps[6]);
    assert_eq!(l.find_by_publish_time(0), Some(ps[6]));
    for t in 0..80 {
        assert_eq!(
            l.find_by_publish_time(t),
            Linear(&l).find_by_publish_time(t)
        );
    }
    l.trim_below(pos(99, 0));
    assert_eq!(l.find_by_publish_time(0), None);
}

/// `split_off_below(p)` leaves exactly the entries at `>= p` and returns exactly those
/// below, the same `Arc`s at the same positions, with their per-entry stats and range
/// totals intact on both sides, for every `p` around rolled, trimmed and empty segments.
#[test]
fn split_off_below_takes_out_exactly_the_prefix() {
    let mut base = InMemoryLedger::new(4);
    for i in 0..30u64 {
        let m = EntryMeta::simple(i, 1 + i as u32 * 3).with_messages(1 + (i % 5) as u32);
        base.append(m);
        if i == 9 || i == 10 {
            base.roll_over();
        }
    }
    base.trim_below(Position::new(1, 2));
    let all = base.read_range(Position::new(0, 0), usize::MAX);
    let everything = |l: &InMemoryLedger| l.read_range(Position::new(0, 0), usize::MAX);
    let mut ps = vec![Position::new(0, u64::MAX), Position::new(99, 0)];
    for id in 0..12u64 {
        for e in 0..6u64 {
            ps.push(Position::new(id, e));
        }
        ps.push(Position::new(id, u64::MAX));
    }
    for &p in &ps {
        let mut kept = base.clone();
        let old = kept.split_off_below(p);
        let (want_old, want_kept): (Vec<&Entry>, Vec<&Entry>) =
            all.iter().partition(|e| e.position < p);
        for (got, want) in [(everything(&old), want_old), (everything(&kept), want_kept)] {
            assert_eq!(got.len(), want.len(), "p {p}");
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(g.position, w.position, "p {p}");
                assert!(Arc::ptr_eq(&g.meta, &w.meta), "p {p} at {}", w.position);
            }
        }
        for l in [&old, &kept] {
            let mut sum = Backlog::default();
            for e in everything(l) {
                assert_eq!(l.stats(e.position), Some(Backlog::of(&e.meta)), "p {p}");
                sum.add(Backlog::of(&e.meta));
            }
            assert_eq!(l.totals_in(Position::new(0, 0), Position::new(99, 0)), sum);
        }
        // A fresh cursor on what is kept starts before its first entry, or after the last
        // entry ever appended when everything was taken out.
        let last = base.last_position();
        let want = kept.first_position().map(Position::before).or(last);
        assert_eq!(Some(kept.before_first()), want, "p {p}");
        // Appending goes on after everything ever appended (a new ledger when the last one
        // was taken out).
        let next = kept.append(EntryMeta::simple(0, 1));
        assert!(Some(next) > last, "p {p}: {next}");
    }
}

#[test]
fn trimming_drops_a_prefix_and_keeps_ids() {
    let mut l = InMemoryLedger::new(3);
    for i in 0..7 {
        l.append(EntryMeta::simple(i, 1));
    }
    l.trim_below(pos(2, 1));
    assert_eq!(l.first_position(), Some(pos(2, 1)));
    assert_eq!(l.before_first(), pos(2, 0));
    assert_eq!(l.entry_count(1), None, "ledger 1 is gone");
    assert_eq!(l.entry_count(2), Some(3), "trimmed entries still count");
    assert!(l.meta(pos(2, 0)).is_none());
    assert_eq!(l.next_position(pos(1, 0)), Some(pos(2, 1)));
    assert_eq!(l.totals_in(pos(0, 0), pos(9, 0)).entries, 3);
    l.trim_below(pos(9, 0));
    assert!(l.is_empty());
    assert_eq!(l.before_first(), pos(3, 0), "the last appended entry");
    assert_eq!(l.append(EntryMeta::simple(9, 1)), pos(4, 0));
    assert_eq!(l.before_first(), pos(3, u64::MAX));
}

/// A source that reads metadata back from a copy of everything appended, counting loads;
/// positions listed in `broken` cannot be read.
#[derive(Debug, Default)]
struct Copy {
    metas: std::sync::Mutex<std::collections::BTreeMap<Position, Arc<EntryMeta>>>,
    loads: std::sync::atomic::AtomicU64,
    broken: std::sync::Mutex<Vec<Position>>,
}

impl MetaSource for Copy {
    fn load(&self, p: Position) -> Option<Arc<EntryMeta>> {
        self.loads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if self.broken.lock().unwrap().contains(&p) {
            return None;
        }
        self.metas.lock().unwrap().get(&p).cloned()
    }
}

/// With a meta source and a window of 3, a ledger answers every read, total and search as the
/// same ledger keeping everything does, through appends, roll-overs and trims; it keeps at
/// most 3 entries' metadata; and an entry that cannot be read back ends a range read before it.
#[test]
fn a_meta_window_answers_as_keeping_everything_does() {
    let copy = Arc::new(Copy::default());
    let mut full = InMemoryLedger::new(4);
    let mut small = InMemoryLedger::new(4).with_meta_source(copy.clone(), 3);
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for step in 0..400u64 {
        match next() % 10 {
            0 => {
                full.roll_over();
                small.roll_over();
            }
            1 if step % 3 == 0 => {
                let below = full
                    .read_range(Position::new(0, 0), 1000)
                    .get(usize::try_from(next() % 5).unwrap())
                    .map(|e| e.position);
                if let Some(b) = below {
                    full.trim_below(b);
                    small.trim_below(b);
                }
            }
            _ => {
                let m = EntryMeta::simple(step * 10 + next() % 10, 1 + (next() % 50) as u32)
                    .with_messages(1 + (next() % 4) as u32);
                let p = full.append(m.clone());
                copy.metas.lock().unwrap().insert(p, Arc::new(m.clone()));
                assert_eq!(small.append(m), p);
            }
        }
        assert!(
            small.kept_metas() <= 3,
            "step {step}: {} kept",
            small.kept_metas()
        );
        let from = Position::new(0, 0);
        assert_eq!(small.read_range(from, 1000), full.read_range(from, 1000));
        let ps = positions(&full.read_range(from, 1000));
        for (i, p) in ps.iter().enumerate() {
            assert_eq!(small.get(*p), full.get(*p));
            assert_eq!(small.publish_time(*p), full.publish_time(*p));
            assert_eq!(small.stats(*p), full.stats(*p));
            assert_eq!(small.read_range(*p, 2), full.read_range(*p, 2));
            if let Some(q) = ps.get(i + 3) {
                assert_eq!(small.totals_in(*p, *q), full.totals_in(*p, *q));
            }
        }
        for t in (0..step * 10 + 20).step_by(7) {
            assert_eq!(
                small.find_by_publish_time(t),
                full.find_by_publish_time(t),
                "t {t}"
            );
        }
    }
    assert!(copy.loads.load(std::sync::atomic::Ordering::Relaxed) > 0);
    // An entry that cannot be read back: `get` says so, and a range read stops before it.
    let ps = positions(&full.read_range(Position::new(0, 0), 1000));
    assert!(ps.len() > 6, "{} entries left", ps.len());
    copy.broken.lock().unwrap().push(ps[2]);
    assert_eq!(small.get(ps[2]), None);
    assert_eq!(positions(&small.read_range(ps[0], 10)), ps[..2].to_vec());
    assert_eq!(small.stats(ps[2]), full.stats(ps[2]), "counts need no load");
    // A cursor's read stops there too, also when acked entries follow (the read then walks
    // entry by entry): the unreadable entry is read again next time, never passed.
    for ack_after in [false, true] {
        let mut c = crate::ManagedCursor::new("c", &small, crate::MemoryStore::new());
        if ack_after {
            c.ack(&small, ps[4]).unwrap();
        }
        assert_eq!(positions(&c.read(&small, 10)), ps[..2].to_vec());
        assert_eq!(c.read_position(), ps[2], "acked after: {ack_after}");
        assert!(c.read(&small, 10).is_empty());
    }
}

/// Long ledgers (so totals use the running checkpoints), batches of 65,535 messages and more
/// (stored apart), restored ledgers that start mid-way and trims at any entry: every range total
/// and entry figure equals the sum over the entries' own metadata, in the ledger and in the
/// part a trim split off.
#[test]
fn totals_over_checkpoints_equal_the_entries_sums() {
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let mut l = InMemoryLedger::new(700);
    // A restored ledger whose first kept entry is 130 (not on a checkpoint), then appends.
    for e in 130..200 {
        l.restore(pos(5, e), EntryMeta::simple(e, 7)).unwrap();
    }
    l.roll_over();
    for i in 0..3_000u64 {
        let messages = match next(50) {
            0 => 70_000 + next(5) as u32,
            1 => u32::from(u16::MAX),
            _ => 1 + next(9) as u32,
        };
        l.append(EntryMeta::simple(i, next(5_000) as u32).with_messages(messages));
    }
    let check = |l: &InMemoryLedger, next: &mut dyn FnMut(u64) -> u64| {
        let lin = Linear(l);
        let ps = positions(&l.read_range(Position::new(0, 0), usize::MAX));
        for p in &ps {
            assert_eq!(l.stats(*p), lin.stats(*p), "{p}");
        }
        for _ in 0..400 {
            let a = ps[next(ps.len() as u64) as usize];
            let b = ps[next(ps.len() as u64) as usize];
            assert_eq!(l.totals_in(a, b), lin.totals_in(a, b), "({a}, {b}]");
            assert_eq!(l.totals_in(a.before(), b), lin.totals_in(a.before(), b));
        }
        let all = lin.totals_in(Position::new(0, 0), Position::new(u64::MAX, 0));
        let by_ledger = l
            .ledger_totals()
            .iter()
            .fold(Backlog::default(), |mut t, (_, b)| {
                t.add(*b);
                t
            });
        assert_eq!(by_ledger, all);
    };
    check(&l, &mut next);
    for _ in 0..6 {
        let ps = positions(&l.read_range(Position::new(0, 0), usize::MAX));
        let cut = ps[next(ps.len() as u64 / 3) as usize];
        let old = l.split_off_below(cut);
        check(&l, &mut next);
        if !old.is_empty() {
            check(&old, &mut next);
        }
    }
}
