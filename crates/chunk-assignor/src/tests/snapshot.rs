//! A scripted multi-batch scenario, printed: what each batch did, the pins and the counters.

use std::fmt::Write as _;

use super::*;
use crate::{AssignorConfig, ChunkAssignor, OrphanPolicy};

struct Script {
    a: ChunkAssignor<u32>,
    log: String,
    uuids: Vec<&'static str>,
}

impl Script {
    fn new(cfg: AssignorConfig, uuids: &[&'static str]) -> Self {
        Script {
            a: ChunkAssignor::new(cfg),
            log: String::new(),
            uuids: uuids.to_vec(),
        }
    }

    fn assign(
        &mut self,
        note: &str,
        now: u64,
        batch: Vec<E>,
        consumers: &[(u32, i64, i32)],
    ) -> Vec<E> {
        let input: Vec<String> = batch
            .iter()
            .map(|e| match &e.chunk {
                None => format!("{}", e.pos),
                Some((u, c, n)) => format!("{}:{u}#{c}/{n}", e.pos),
            })
            .collect();
        let out = self.a.assign(now, batch, &cs(consumers));
        let _ = writeln!(self.log, "t={now} {note}");
        let _ = writeln!(self.log, "  consumers (id,permits,prio) {consumers:?}");
        let _ = writeln!(self.log, "  in   {}", input.join(" "));
        let _ = writeln!(self.log, "  out  {}", render(&out));
        self.pins();
        out.replay
    }

    fn op(&mut self, what: &str, n: usize) {
        let _ = writeln!(self.log, "{what} -> {n}");
        self.pins();
    }

    fn pins(&mut self) {
        let pins: Vec<String> = self
            .uuids
            .iter()
            .filter_map(|u| self.a.pinned(u).map(|c| format!("{u}->c{c}")))
            .collect();
        let _ = writeln!(self.log, "  pins [{}]", pins.join(" "));
    }

    fn finish(mut self) -> String {
        let _ = write!(self.log, "stats\n{}", render_stats(&self.a.stats()));
        self.log
    }
}

#[test]
fn scripted_chunked_messages_over_several_batches() {
    let cfg = AssignorConfig {
        orphan_policy: OrphanPolicy::DispatchToDefault,
        max_pins: 3,
        max_pin_age: 100,
    };
    let mut s = Script::new(cfg, &["A", "B", "C", "D", "E", "F", "G"]);
    let high = [(1, 3, 0), (2, 3, 0), (3, 10, 1)];
    let replay = s.assign(
        "two messages interleaved with plain entries; consumer 1 runs out",
        0,
        vec![
            ch(1, "A", 0, 3),
            plain(2),
            ch(3, "B", 0, 2),
            ch(4, "A", 1, 3),
            plain(5),
            ch(6, "A", 2, 3),
            plain(7),
            plain(8),
        ],
        &high,
    );
    let mut batch = replay;
    batch.extend([ch(9, "B", 1, 2), ch(10, "C", 0, 4)]);
    s.assign(
        "replay first, then new entries",
        5,
        batch,
        &[(1, 2, 0), (2, 0, 0), (3, 10, 1)],
    );
    let n = s.a.remove_consumer(3);
    s.op("remove_consumer(3)", n);
    s.assign(
        "C lost its consumer: its next chunks are orphans, dispatched; a malformed entry is plain",
        6,
        vec![ch(11, "C", 1, 4), ch(12, "C", 2, 4), ch(13, "X", 4, 4)],
        &[(1, 2, 0), (2, 2, 0)],
    );
    s.assign(
        "four new messages; max_pins = 3 evicts the least recently seen (D)",
        7,
        vec![
            ch(14, "D", 0, 2),
            ch(15, "E", 0, 2),
            ch(16, "F", 0, 2),
            ch(17, "A", 0, 2),
        ],
        &[(2, 5, 0), (3, 10, 0)],
    );
    s.assign(
        "consumer 3 disconnected without remove_consumer: its pins are stale",
        8,
        vec![ch(18, "E", 1, 2), ch(19, "F", 1, 2)],
        &[(2, 5, 0)],
    );
    s.assign(
        "the last pin idles past max_pin_age and is evicted",
        200,
        vec![plain(20)],
        &[(2, 5, 0)],
    );
    s.assign(
        "a new message pins",
        201,
        vec![ch(21, "G", 0, 2)],
        &[(2, 5, 0)],
    );
    let n = s.a.pin_count();
    s.a.clear();
    s.op("clear() with pins", n);
    insta::assert_snapshot!(s.finish());
}
