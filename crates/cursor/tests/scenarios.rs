//! Scripted cursor scenarios as insta snapshots: each line of a script is one operation, the
//! output shows what it returned — mark-delete moves with their reason and dropped positions.

use cursor::{
    EntryMeta, InMemoryLedger, Ledger, ManagedCursor, MarkDeleteMove, MemoryStore, Position,
};
use std::fmt::Write as _;

fn p(s: &str) -> Position {
    let (l, e) = s.split_once(':').expect("position l:e");
    Position::new(l.parse().expect("ledger id"), e.parse().expect("entry id"))
}

fn fp(p: Position) -> String {
    if p.entry_id == u64::MAX {
        format!("{}:max", p.ledger_id)
    } else {
        p.to_string()
    }
}

fn fps(ps: &[Position]) -> String {
    let v: Vec<String> = ps.iter().map(|q| fp(*q)).collect();
    format!("[{}]", v.join(" "))
}

fn mv(m: &Option<MarkDeleteMove>) -> String {
    match m {
        None => "no move".into(),
        Some(m) => format!(
            "md {} -> {} ({:?}) dropped {}",
            fp(m.from),
            fp(m.to),
            m.reason,
            fps(&m.dropped)
        ),
    }
}

/// Runs a script; returns the transcript. The ledger rolls every `per` entries; `append n`
/// adds n single-message entries of 10 bytes with publish times 100, 110, 120, …
fn check(per: u64, script: &str) -> String {
    let mut l = InMemoryLedger::new(per);
    let mut t = 100;
    let mut c = ManagedCursor::new("sub", &l, MemoryStore::new());
    let mut out = String::new();
    for line in script.lines().map(str::trim).filter(|s| !s.is_empty()) {
        let w: Vec<&str> = line.split_whitespace().collect();
        let res = match w[0] {
            "append" => {
                let n: u32 = w[1].parse().unwrap();
                let msgs: u32 = w.get(2).map_or(1, |m| m.parse().unwrap());
                let ps: Vec<Position> = (0..n)
                    .map(|_| {
                        t += 10;
                        l.append(EntryMeta::simple(t - 10, 10).with_messages(msgs))
                    })
                    .collect();
                fps(&ps)
            }
            "roll" => {
                l.roll_over();
                String::new()
            }
            "ack" => match c.ack(&l, p(w[1])) {
                Ok(o) => format!("newly_acked={} {}", o.newly_acked, mv(&o.md_move)),
                Err(e) => format!("error: {e}"),
            },
            "batch" => {
                let idx: Vec<u32> = w[3].split(',').map(|i| i.parse().unwrap()).collect();
                match c.ack_batch_index(&l, p(w[1]), w[2].parse().unwrap(), &idx) {
                    Ok(o) => format!("newly_acked={} {}", o.newly_acked, mv(&o.md_move)),
                    Err(e) => format!("error: {e}"),
                }
            }
            "mark_delete" => match c.mark_delete(&l, p(w[1])) {
                Ok(m) => mv(&m),
                Err(e) => format!("error: {e}"),
            },
            "skip" => mv(&c.skip(&l, w[1].parse().unwrap())),
            "clear" => mv(&c.clear_backlog(&l)),
            "expire" => mv(&c.expire(&l, w[1].parse().unwrap())),
            "evict_size" => mv(&c.evict_to_size(&l, w[1].parse().unwrap())),
            "evict_count" => mv(&c.evict_to_count(&l, w[1].parse().unwrap())),
            "evict_age" => {
                mv(&c.evict_older_than(&l, w[1].parse().unwrap(), w[2].parse().unwrap()))
            }
            "reset" => match c.reset(&l, p(w[1])) {
                Ok(m) => mv(&Some(m)),
                Err(e) => format!("error: {e}"),
            },
            "rewind" => {
                c.rewind(&l);
                format!("read position {}", fp(c.read_position()))
            }
            "read" => {
                let es: Vec<Position> = c
                    .read(&l, w[1].parse().unwrap())
                    .iter()
                    .map(|e| e.position)
                    .collect();
                format!("{} then read position {}", fps(&es), fp(c.read_position()))
            }
            "replay" => {
                let ps: Vec<Position> = w[1..].iter().map(|s| p(s)).collect();
                let r = c.replay(&l, &ps);
                let es: Vec<Position> = r.entries.iter().map(|e| e.position).collect();
                format!(
                    "entries {} already_acked {} missing {}",
                    fps(&es),
                    fps(&r.already_acked),
                    fps(&r.missing)
                )
            }
            "restart" => {
                c.persist().unwrap();
                let store = c.store().clone();
                c = ManagedCursor::recover(&l, store).unwrap();
                format!(
                    "recovered md {} read {}",
                    fp(c.mark_delete_position()),
                    fp(c.read_position())
                )
            }
            "trim" => {
                l.trim_below(c.mark_delete_position().next());
                format!("first entry {:?}", l.first_position().map(fp))
            }
            other => panic!("unknown command {other}"),
        };
        c.check_invariants(&l).unwrap();
        let b = c.backlog(&l);
        let _ = writeln!(out, "{line:<22} {res}");
        let _ = writeln!(
            out,
            "{:<22} md {} read {} backlog {}e/{}m/{}b holes {:?}",
            "",
            fp(c.mark_delete_position()),
            fp(c.read_position()),
            b.entries,
            b.messages,
            b.bytes,
            c.acked_set()
                .ranges()
                .iter()
                .map(|(a, z)| format!("{}..{}", fp(*a), fp(*z)))
                .collect::<Vec<_>>()
        );
    }
    out
}

#[test]
fn acks_batches_and_cumulative() {
    insta::assert_snapshot!(check(
        4,
        "
        append 6
        append 1 3
        ack 1:2
        ack 1:1
        ack 1:1
        ack 1:0
        ack 1:1
        ack 9:0
        ack 1:7
        batch 2:2 3 0,2
        batch 2:2 3 3
        batch 2:2 4 1
        mark_delete 2:0
        mark_delete 1:3
        batch 2:2 3 1
        ack 2:1
        "
    ));
}

#[test]
fn skip_clear_expiry_and_quota_report_what_they_drop() {
    insta::assert_snapshot!(check(
        3,
        "
        append 12
        ack 1:1
        ack 2:0
        skip 2
        ack 2:2
        expire 135
        evict_size 40
        ack 4:1
        evict_count 2
        evict_age 300 100
        evict_age 300 180
        append 2
        clear
        clear
        "
    ));
}

#[test]
fn reset_rewind_read_replay_and_restart() {
    insta::assert_snapshot!(check(
        4,
        "
        append 10
        read 3
        ack 1:1
        ack 1:3
        ack 2:2
        read 2
        rewind
        replay 1:0 1:1 2:2 2:3 5:0
        reset 2:1
        ack 2:3
        reset 1:2
        restart
        ack 1:2
        ack 1:3
        batch 2:0 1 0
        restart
        trim
        read 10
        "
    ));
}
