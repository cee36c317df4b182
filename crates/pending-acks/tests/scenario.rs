//! A scripted consumer lifetime, snapshotted as the log of operations, results and handler
//! calls (easier to review than asserts). Update with `INSTA_UPDATE=always` and read the diff.
#![cfg(not(feature = "loom"))]

mod common;

use std::fmt::Write as _;

use common::{ack, Ev, Recorder};
use pending_acks::{AddHandler, Arc, PendingAcks, RemovalCause};

type Map = PendingAcks<(u64, u64), u32>;

/// Vetoes hash 13, as if it were draining on another consumer.
struct DrainingElsewhere;
impl AddHandler<(u64, u64), u32> for DrainingElsewhere {
    fn allow_add(&self, _: u32, _: (u64, u64), hash: u32) -> bool {
        hash != 13
    }
}

enum Step {
    Add((u64, u64), u32, u32),
    Update((u64, u64), u32),
    Remove((u64, u64), RemovalCause),
    RemoveIfMatches((u64, u64), u32, u32, RemovalCause),
    UpTo((u64, u64), RemovalCause),
    Clear(RemovalCause),
    Close,
}

fn run(steps: &[Step]) -> String {
    let m = Map::new(7);
    let rec = Arc::new(Recorder::default());
    m.set_add_handler(Arc::new(DrainingElsewhere));
    m.set_remove_handler(rec.clone());
    let mut out = String::new();
    for s in steps {
        let line = match *s {
            Step::Add(p, r, h) => format!(
                "add {}:{} remaining={r} hash={h} -> {:?}",
                p.0,
                p.1,
                m.add_if_allowed(p, r, h)
            ),
            Step::Update(p, d) => format!(
                "update {}:{} acked={d} -> {:?}",
                p.0,
                p.1,
                m.update_remaining(p, d)
            ),
            Step::Remove(p, c) => {
                format!("remove {}:{} {c} -> {:?}", p.0, p.1, m.remove(p, c))
            }
            Step::RemoveIfMatches(p, r, h, c) => format!(
                "remove_if_matches {}:{} remaining={r} hash={h} {c} -> {}",
                p.0,
                p.1,
                m.remove_if_matches(p, ack(r, h), c)
            ),
            Step::UpTo(p, c) => {
                let rr = rec.clone();
                let n = m.remove_all_up_to(p, c, |q, _| rr.push(Ev::Callback(q)));
                format!("remove_all_up_to {}:{} {c} -> {n}", p.0, p.1)
            }
            Step::Clear(c) => {
                let rr = rec.clone();
                let n = m.for_each_and_clear(c, |q, _| rr.push(Ev::Callback(q)));
                format!("for_each_and_clear {c} -> {n}")
            }
            Step::Close => {
                let rr = rec.clone();
                let n = m.for_each_and_close(|q, _| rr.push(Ev::Callback(q)));
                format!("for_each_and_close -> {n}")
            }
        };
        let _ = writeln!(out, "{line}");
        for e in rec.take() {
            let _ = writeln!(out, "{e}");
        }
    }
    let mut left = Vec::new();
    m.for_each(|p, a| left.push(format!("{}:{}({}/{})", p.0, p.1, a.remaining, a.hash)));
    let _ = writeln!(
        out,
        "final: len={} closed={} pending=[{}]",
        m.len(),
        m.is_closed(),
        left.join(" ")
    );
    out
}

#[test]
fn consumer_lifetime_event_log() {
    use RemovalCause::*;
    use Step::*;
    let log = run(&[
        Add((1, 0), 1, 100),
        Add((1, 1), 3, 200),
        Add((1, 2), 1, 13),
        Add((1, 3), 1, 100),
        Add((2, 0), 1, 300),
        Add((2, 1), 1, 100),
        Add((3, 0), 1, 0),
        Add((1, 0), 1, 101),
        Update((1, 1), 2),
        Update((9, 9), 1),
        Remove((1, 0), Acked),
        Remove((1, 0), Acked),
        Remove((2, 0), Nacked),
        RemoveIfMatches((1, 1), 3, 200, RedeliveryRequested),
        RemoveIfMatches((1, 1), 1, 200, RedeliveryRequested),
        UpTo((0, 5), MarkDeleteAdvanced),
        UpTo((2, 0), MarkDeleteAdvanced),
        Add((4, 0), 1, 400),
        Clear(RedeliveryRequested),
        Add((5, 0), 1, 500),
        Add((5, 1), 1, 501),
        Close,
        Add((6, 0), 1, 600),
        Remove((5, 0), Acked),
        Close,
    ]);
    insta::assert_snapshot!(log);
}
