//! The cursor against a reference model (a `BTreeSet` of acked positions and plain loops), over
//! seeded random operation sequences: acks, batch-index acks, cumulative mark-delete, skip,
//! clear, expire, evictions, reset, seek, rewind, read, replay, persist/recover, append, trim.
//! A failure prints the seed and the operations so far.

use std::collections::{BTreeMap, BTreeSet};

use cursor::{
    Backlog, EntryMeta, InMemoryLedger, Ledger, ManagedCursor, MarkDeleteMove, MarkDeleteReason,
    MemoryStore, Position,
};

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
        self.next() % n.max(1)
    }
}

#[derive(Clone, Copy)]
struct M {
    publish: u64,
    size: u32,
    msgs: u32,
}

/// The model: every entry ever appended, what is trimmed, md, read, acked and partial sets.
struct Model {
    entries: Vec<(Position, M)>,
    trimmed_below: Position,
    md: Position,
    read: Position,
    acked: BTreeSet<Position>,
    partial: BTreeMap<Position, BTreeSet<u32>>,
}

impl Model {
    fn existing(&self) -> impl Iterator<Item = &(Position, M)> + '_ {
        self.entries
            .iter()
            .filter(move |(p, _)| *p >= self.trimmed_below)
    }
    fn meta(&self, p: Position) -> Option<M> {
        self.existing().find(|(q, _)| *q == p).map(|(_, m)| *m)
    }
    fn after_md(&self) -> Vec<(Position, M)> {
        self.existing()
            .filter(|(p, _)| *p > self.md)
            .copied()
            .collect()
    }
    fn unacked_after_md(&self) -> Vec<(Position, M)> {
        self.after_md()
            .into_iter()
            .filter(|(p, _)| !self.acked.contains(p))
            .collect()
    }
    fn partial_count(&self, p: Position) -> u64 {
        self.partial.get(&p).map_or(0, |s| s.len() as u64)
    }
    fn advance(&mut self) {
        loop {
            let next = self.after_md().first().map(|(p, _)| *p);
            match next {
                Some(n) if self.acked.remove(&n) => self.md = n,
                _ => break,
            }
        }
        if self.read <= self.md {
            self.read = self.md.next();
        }
    }
    fn move_to(
        &mut self,
        target: Position,
        reason: MarkDeleteReason,
        dropped: Vec<Position>,
    ) -> MarkDeleteMove {
        let from = self.md;
        self.md = target;
        self.acked.retain(|p| *p > target);
        self.partial.retain(|p, _| *p > target);
        self.advance();
        MarkDeleteMove {
            from,
            to: self.md,
            reason,
            dropped,
        }
    }
    fn ack(&mut self, p: Position) -> Result<(bool, Option<MarkDeleteMove>), ()> {
        if p <= self.md {
            return Ok((false, None));
        }
        self.meta(p).ok_or(())?;
        if self.acked.contains(&p) {
            return Ok((false, None));
        }
        Ok((true, self.full_ack(p)))
    }
    fn full_ack(&mut self, p: Position) -> Option<MarkDeleteMove> {
        self.partial.remove(&p);
        self.acked.insert(p);
        let from = self.md;
        self.advance();
        (self.md != from).then(|| MarkDeleteMove {
            from,
            to: self.md,
            reason: MarkDeleteReason::Ack,
            dropped: vec![],
        })
    }
    fn ack_batch(
        &mut self,
        p: Position,
        size: u32,
        idx: &[u32],
    ) -> Result<(bool, Option<MarkDeleteMove>), ()> {
        if p <= self.md {
            return Ok((false, None));
        }
        let m = self.meta(p).ok_or(())?;
        if size != m.msgs || idx.iter().any(|&i| i >= size) {
            return Err(());
        }
        if self.acked.contains(&p) {
            return Ok((false, None));
        }
        let set = self.partial.entry(p).or_default();
        let before = set.len();
        set.extend(idx.iter().copied());
        let newly = set.len() > before;
        if set.len() as u32 == size {
            return Ok((true, self.full_ack(p)));
        }
        if set.is_empty() {
            self.partial.remove(&p);
        }
        Ok((newly, None))
    }
    fn backlog(&self) -> Backlog {
        let mut b = Backlog::default();
        for (p, m) in self.unacked_after_md() {
            b.entries += 1;
            b.messages += u64::from(m.msgs) - self.partial_count(p);
            b.bytes += u64::from(m.size);
        }
        b
    }
    fn first_unacked(&self, from: Position) -> Option<Position> {
        self.unacked_after_md()
            .into_iter()
            .map(|(p, _)| p)
            .find(|p| *p >= from)
    }
}

fn check_move(mv: &MarkDeleteMove, acked_before: &BTreeSet<Position>) -> Result<(), String> {
    let (lo, hi) = (mv.from.min(mv.to), mv.from.max(mv.to));
    if mv.reason != MarkDeleteReason::Reset && mv.to <= mv.from {
        return Err(format!("move {mv:?} does not go forward"));
    }
    if !mv.dropped.windows(2).all(|w| w[0] < w[1]) {
        return Err("dropped not sorted".into());
    }
    for d in &mv.dropped {
        if *d <= lo || *d > hi || acked_before.contains(d) {
            return Err(format!("dropped {d} outside ({lo}, {hi}] or was acked"));
        }
    }
    if matches!(
        mv.reason,
        MarkDeleteReason::Ack | MarkDeleteReason::CumulativeAck
    ) && !mv.dropped.is_empty()
    {
        return Err("ack move with dropped positions".into());
    }
    Ok(())
}

fn run(seed: u64, steps: usize) {
    let mut rng = SplitMix64(seed);
    let per = 1 + rng.below(6);
    let mut ledger = InMemoryLedger::new(per);
    let mut model = Model {
        entries: vec![],
        trimmed_below: Position::new(0, 0),
        md: ledger.before_first(),
        read: ledger.before_first().next(),
        acked: BTreeSet::new(),
        partial: BTreeMap::new(),
    };
    let mut time = 1000u64;
    let append =
        |ledger: &mut InMemoryLedger, model: &mut Model, rng: &mut SplitMix64, time: &mut u64| {
            *time += rng.below(20);
            let m = M {
                publish: *time,
                size: 1 + rng.below(100) as u32,
                msgs: if rng.below(3) == 0 {
                    1 + rng.below(5) as u32
                } else {
                    1
                },
            };
            let p = ledger.append(EntryMeta::simple(m.publish, m.size).with_messages(m.msgs));
            model.entries.push((p, m));
        };
    for _ in 0..(5 + rng.below(20)) {
        append(&mut ledger, &mut model, &mut rng, &mut time);
    }
    let mut c = ManagedCursor::new("m", &ledger, MemoryStore::new());
    assert_eq!(c.mark_delete_position(), model.md);
    // Positions that were acked by an op or dropped by a recorded move.
    let mut consumed: BTreeSet<Position> = BTreeSet::new();
    let mut log: Vec<String> = Vec::new();

    for step in 0..steps {
        let all: Vec<Position> = model.entries.iter().map(|(p, _)| *p).collect();
        let pick = |rng: &mut SplitMix64| -> Position {
            match rng.below(20) {
                0 => Position::new(99, 0),
                1 => Position::new(all.last().map_or(1, |p| p.ledger_id), 50),
                _ => all[rng.below(all.len() as u64) as usize],
            }
        };
        let acked_before: BTreeSet<Position> = model
            .acked
            .iter()
            .copied()
            .chain(all.iter().copied().filter(|p| *p <= model.md))
            .collect();
        let op = rng.below(100);
        let mut moves: Vec<MarkDeleteMove> = Vec::new();
        let desc;
        macro_rules! fail {
            ($($t:tt)*) => {{
                let tail: Vec<&String> = log.iter().rev().take(25).rev().collect();
                panic!("seed {seed} step {step} op {desc}: {}\nlast ops:\n{:#?}", format!($($t)*), tail)
            }};
        }
        match op {
            0..=34 => {
                let p = pick(&mut rng);
                desc = format!("ack {p}");
                let want = model.ack(p);
                let got = c.ack(&ledger, p);
                match (want, got) {
                    (Ok((n, mv)), Ok(o)) => {
                        if o.newly_acked != n || o.md_move != mv {
                            fail!("got {o:?} want ({n}, {mv:?})");
                        }
                        if n {
                            consumed.insert(p);
                        }
                        moves.extend(o.md_move);
                    }
                    (Err(()), Err(_)) => {}
                    (w, g) => fail!("want {w:?} got {g:?}"),
                }
            }
            35..=44 => {
                let p = pick(&mut rng);
                let size = model.meta(p).map_or(1, |m| m.msgs) + u32::from(rng.below(15) == 0);
                let idx: Vec<u32> = (0..rng.below(3))
                    .map(|_| rng.below(u64::from(size) + 1) as u32)
                    .collect();
                desc = format!("batch {p} size {size} {idx:?}");
                let want = model.ack_batch(p, size, &idx);
                let got = c.ack_batch_index(&ledger, p, size, &idx);
                match (want, got) {
                    (Ok((n, mv)), Ok(o)) => {
                        if o.newly_acked != n || o.md_move != mv {
                            fail!("got {o:?} want ({n}, {mv:?})");
                        }
                        if c.is_acked(p) {
                            consumed.insert(p);
                        }
                        moves.extend(o.md_move);
                    }
                    (Err(()), Err(_)) => {}
                    (w, g) => fail!("want {w:?} got {g:?}"),
                }
            }
            45..=48 => {
                let p = pick(&mut rng);
                desc = format!("mark_delete {p}");
                let want = if p == model.md {
                    Ok(None)
                } else if p < model.md || model.meta(p).is_none() {
                    Err(())
                } else {
                    Ok(Some(model.move_to(
                        p,
                        MarkDeleteReason::CumulativeAck,
                        vec![],
                    )))
                };
                match (want, c.mark_delete(&ledger, p)) {
                    (Ok(w), Ok(g)) => {
                        if w != g {
                            fail!("want {w:?} got {g:?}");
                        }
                        if g.is_some() {
                            consumed.extend(all.iter().copied().filter(|q| *q <= p));
                        }
                        moves.extend(g);
                    }
                    (Err(()), Err(_)) => {}
                    (w, g) => fail!("want {w:?} got {g:?}"),
                }
            }
            49..=51 => {
                let n = rng.below(6);
                desc = format!("skip {n}");
                let un: Vec<Position> = model
                    .unacked_after_md()
                    .into_iter()
                    .map(|(p, _)| p)
                    .take(n as usize)
                    .collect();
                let want = un
                    .last()
                    .copied()
                    .map(|t| model.move_to(t, MarkDeleteReason::Skip, un.clone()));
                let got = c.skip(&ledger, n);
                if want != got {
                    fail!("want {want:?} got {got:?}");
                }
                moves.extend(got);
            }
            52 => {
                desc = "clear".to_string();
                let un: Vec<Position> = model
                    .unacked_after_md()
                    .into_iter()
                    .map(|(p, _)| p)
                    .collect();
                let last = model
                    .existing()
                    .last()
                    .map(|(p, _)| *p)
                    .filter(|p| *p > model.md);
                let want = last.map(|t| model.move_to(t, MarkDeleteReason::ClearBacklog, un));
                let got = c.clear_backlog(&ledger);
                if want != got {
                    fail!("want {want:?} got {got:?}");
                }
                moves.extend(got);
            }
            53..=58 => {
                let quota = op >= 57;
                let t = if quota {
                    time
                } else {
                    model.after_md().first().map_or(time, |(_, m)| m.publish) + rng.below(60)
                };
                let age = rng.below(60);
                desc = if quota {
                    format!("evict_older_than now {t} age {age}")
                } else {
                    format!("expire {t}")
                };
                let cutoff = if quota { t.checked_sub(age) } else { Some(t) };
                let mut target = None;
                let mut dropped = vec![];
                if let Some(cut) = cutoff {
                    for (p, m) in model.after_md() {
                        if m.publish >= cut {
                            break;
                        }
                        if !model.acked.contains(&p) {
                            dropped.push(p);
                        }
                        target = Some(p);
                    }
                }
                let reason = if quota {
                    MarkDeleteReason::BacklogQuota
                } else {
                    MarkDeleteReason::Expiry
                };
                let want = target.map(|t| model.move_to(t, reason, dropped));
                let got = if quota {
                    c.evict_older_than(&ledger, t, age)
                } else {
                    c.expire(&ledger, t)
                };
                if want != got {
                    fail!("want {want:?} got {got:?}");
                }
                moves.extend(got);
            }
            59..=61 => {
                let by_size = rng.below(2) == 0;
                let b = model.backlog();
                let max = if by_size {
                    rng.below(b.bytes + 1)
                } else {
                    rng.below(b.messages + 1)
                };
                desc = format!("evict_to_{} {max}", if by_size { "size" } else { "count" });
                let mut over = if by_size { b.bytes } else { b.messages }.saturating_sub(max);
                let mut dropped = vec![];
                for (p, m) in model.unacked_after_md() {
                    if over == 0 {
                        break;
                    }
                    let w = if by_size {
                        u64::from(m.size)
                    } else {
                        u64::from(m.msgs) - model.partial_count(p)
                    };
                    over = over.saturating_sub(w);
                    dropped.push(p);
                }
                let want = dropped
                    .last()
                    .copied()
                    .map(|t| model.move_to(t, MarkDeleteReason::BacklogQuota, dropped.clone()));
                let got = if by_size {
                    c.evict_to_size(&ledger, max)
                } else {
                    c.evict_to_count(&ledger, max)
                };
                if want != got {
                    fail!("want {want:?} got {got:?}");
                }
                if let Some(mv) = &got {
                    let nb = c.backlog(&ledger);
                    if (by_size && nb.bytes > max) || (!by_size && nb.messages > max) {
                        fail!("backlog {nb:?} still above {max}");
                    }
                    let _ = mv;
                }
                moves.extend(got);
            }
            62..=63 => {
                let ex: Vec<Position> = model.existing().map(|(p, _)| *p).collect();
                if ex.is_empty() {
                    desc = "reset skipped".into();
                } else {
                    // Sometimes out of the log's range: clamped to the first entry or the end.
                    let (asked, p) = match rng.below(8) {
                        0 => (Position::new(0, 0), ex[0]),
                        1 => {
                            let end = ex[ex.len() - 1].next();
                            (Position::new(end.ledger_id + 1, 7), end)
                        }
                        _ => {
                            let p = ex[rng.below(ex.len() as u64) as usize];
                            (p, p)
                        }
                    };
                    desc = format!("reset {asked}");
                    let to = p.before();
                    let from = model.md;
                    let dropped: Vec<Position> = if to > from {
                        model
                            .unacked_after_md()
                            .into_iter()
                            .map(|(q, _)| q)
                            .filter(|q| *q <= to)
                            .collect()
                    } else {
                        vec![]
                    };
                    model.acked.clear();
                    model.partial.clear();
                    model.md = to;
                    // Right after a ledger's last entry is the next ledger's first entry.
                    let read = model
                        .existing()
                        .map(|(q, _)| *q)
                        .find(|q| *q > to)
                        .unwrap_or(p);
                    model.read = read;
                    let want = MarkDeleteMove {
                        from,
                        to,
                        reason: MarkDeleteReason::Reset,
                        dropped,
                    };
                    match c.reset(&ledger, asked) {
                        Ok(got) if got == want => moves.push(got),
                        got => fail!("want {want:?} got {got:?}"),
                    }
                }
            }
            66 => {
                let p = pick(&mut rng);
                desc = format!("seek {p}");
                let end = model
                    .existing()
                    .last()
                    .map_or(model.md.next(), |(q, _)| q.next())
                    .max(model.md.next());
                model.read = p.clamp(model.md.next(), end);
                let got = c.seek(&ledger, p);
                if got != model.read {
                    fail!("seek set {got}, want {}", model.read);
                }
            }
            64..=65 => {
                desc = "rewind".into();
                model.read = model
                    .first_unacked(Position::new(0, 0))
                    .unwrap_or(model.md.next());
                c.rewind(&ledger);
            }
            67..=76 => {
                let n = rng.below(5) as usize;
                desc = format!("read {n}");
                let want: Vec<Position> = model
                    .unacked_after_md()
                    .into_iter()
                    .map(|(p, _)| p)
                    .filter(|p| *p >= model.read)
                    .take(n)
                    .collect();
                if let Some(l) = want.last() {
                    // The next entry a read returns, or right after the last entry.
                    let end = model.existing().last().map_or(l.next(), |(q, _)| q.next());
                    model.read = model.first_unacked(l.next()).unwrap_or(end);
                }
                let got: Vec<Position> =
                    c.read(&ledger, n).into_iter().map(|e| e.position).collect();
                if want != got {
                    fail!("want {want:?} got {got:?}");
                }
            }
            77..=79 => {
                let ps: Vec<Position> = (0..rng.below(6)).map(|_| pick(&mut rng)).collect();
                desc = format!("replay {ps:?}");
                let r = c.replay(&ledger, &ps);
                let mut sorted = ps.clone();
                sorted.sort();
                sorted.dedup();
                let acked: Vec<Position> = sorted
                    .iter()
                    .copied()
                    .filter(|p| *p <= model.md || model.acked.contains(p))
                    .collect();
                let ents: Vec<Position> = sorted
                    .iter()
                    .copied()
                    .filter(|p| !acked.contains(p) && model.meta(*p).is_some())
                    .collect();
                let got: Vec<Position> = r.entries.iter().map(|e| e.position).collect();
                if r.already_acked != acked || got != ents {
                    fail!("replay got {r:?}");
                }
            }
            80..=83 => {
                desc = "persist+recover".into();
                c.persist().unwrap_or_else(|e| fail!("{e}"));
                let store = c.store().clone();
                c = ManagedCursor::recover(&ledger, store).unwrap_or_else(|e| fail!("{e}"));
                model.read = model
                    .first_unacked(Position::new(0, 0))
                    .unwrap_or(model.md.next());
            }
            84..=96 => {
                let n = 1 + rng.below(4);
                desc = format!("append {n}");
                for _ in 0..n {
                    if rng.below(10) == 0 {
                        ledger.roll_over();
                    }
                    append(&mut ledger, &mut model, &mut rng, &mut time);
                }
            }
            _ => {
                let p = model.md.next();
                desc = format!("trim_below {p}");
                ledger.trim_below(p);
                model.trimmed_below = model.trimmed_below.max(p);
            }
        }
        log.push(desc.clone());
        for mv in &moves {
            if let Err(e) = check_move(mv, &acked_before) {
                fail!("{e}");
            }
            consumed.extend(mv.dropped.iter().copied());
        }
        // The main invariant: md never passes a position that was neither acked nor dropped.
        let md = c.mark_delete_position();
        if let Some(p) = all.iter().find(|p| **p <= md && !consumed.contains(p)) {
            fail!("md {md} passed {p}, which was neither acked nor dropped");
        }
        if md != model.md || c.read_position() != model.read {
            fail!(
                "md/read {md}/{} want {}/{}",
                c.read_position(),
                model.md,
                model.read
            );
        }
        if c.backlog(&ledger) != model.backlog() {
            fail!(
                "backlog {:?} want {:?}",
                c.backlog(&ledger),
                model.backlog()
            );
        }
        for (p, _) in model.existing() {
            let want = *p <= model.md || model.acked.contains(p);
            if c.is_acked(*p) != want {
                fail!("is_acked({p}) = {}", !want);
            }
            let wantb = model
                .partial
                .get(p)
                .map(|s| s.iter().copied().collect::<Vec<_>>());
            if c.batch_acked_indexes(*p) != wantb {
                fail!("batch indexes at {p}");
            }
        }
        let want_next = model.first_unacked(model.read).unwrap_or_else(|| {
            model
                .existing()
                .last()
                .map_or(model.md.next(), |(p, _)| p.next())
                .max(model.md.next())
        });
        if c.next_read_position(&ledger) != want_next {
            fail!(
                "next_read_position {} want {want_next}",
                c.next_read_position(&ledger)
            );
        }
        if c.has_more_entries(&ledger) != model.first_unacked(model.read).is_some() {
            fail!("has_more_entries");
        }
        if let Err(e) = c.check_invariants(&ledger) {
            fail!("invariant: {e}");
        }
    }
}

#[test]
fn cursor_matches_the_reference_model() {
    for seed in 0..200 {
        run(seed, 200);
    }
}

#[test]
fn cursor_matches_the_reference_model_long_runs() {
    for seed in 1000..1004 {
        run(seed, 2000);
    }
}
