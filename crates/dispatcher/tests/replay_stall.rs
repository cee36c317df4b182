//! Liveness of the Key_Shared replay loop against input that arrives while a read is in flight.

mod common;

use common::run;
use cursor::Position;
use dispatcher::DispatchCommand;

/// Pulsar's `testLookAheadNotEngagedWhenCursorHasNoMoreEntries` (apache/pulsar#21554): a
/// redelivery that arrives while a replay read is in flight must be dispatched once the read
/// completes, even when the pick that issued the read had scanned the whole replay set and the
/// cursor has no more entries. The pick's "scanned everything" no longer holds after that input.
#[test]
fn a_redelivery_during_a_replay_read_is_not_stranded() {
    for mode in ["key_shared exclusive", "key_shared exclusive ooo"] {
        let w = redeliver_during_replay_read(mode);
        assert_eq!(
            w.received.get("A").cloned().unwrap_or_default(),
            [Position::new(1, 2), Position::new(1, 2)],
            "{mode}: 1:2 was not re-sent to A\n{}",
            w.out
        );
    }
}

/// `DispatcherConfig::legacy_replay_settle` brings the stall back (what the simulator's
/// legacy detection relies on).
#[test]
fn the_legacy_switch_strands_the_redelivery() {
    for mode in ["key_shared exclusive", "key_shared exclusive ooo"] {
        let w = redeliver_during_replay_read(&format!("legacy_replay_settle\n{mode}"));
        assert_eq!(
            w.received.get("A").cloned().unwrap_or_default(),
            [Position::new(1, 2)],
            "{mode}"
        );
    }
}

/// The scenario up to the replay read's completion; returns the world after it.
fn redeliver_during_replay_read(mode: &str) -> common::World {
    {
        let mut w = run(&format!(
            "{mode}\njoin A ranges=0-32767\nflow A 100\njoin B ranges=32768-65535\nflow B 2\n"
        ));
        let key_of = |w: &common::World, lo: u32, hi: u32| {
            (0..100)
                .map(|i| format!("k{i}"))
                .find(|k| (lo..=hi).contains(&(w.hash_of(k) % 65536)))
                .unwrap()
        };
        let (b1, b2, a1) = (
            key_of(&w, 32768, 65535),
            key_of(&w, 32768, 65535),
            key_of(&w, 0, 32767),
        );
        w.step(&format!("pub {b1} {b2} {a1}"));
        let (a, b) = (w.id("A"), w.id("B"));
        let got = |w: &common::World, name: &str| w.received.get(name).cloned().unwrap_or_default();
        assert_eq!(
            got(&w, "B"),
            [Position::new(1, 0), Position::new(1, 1)],
            "{mode}"
        );
        assert_eq!(got(&w, "A"), [Position::new(1, 2)], "{mode}");

        // B asks for its two again and gets two more permits: the replay read is issued ...
        let now = w.now;
        w.d.handle_redeliver(now, b, &[Position::new(1, 0), Position::new(1, 1)]);
        w.d.handle_flow(now, b, 2);
        let replay = take_replay_read(&mut w, mode);
        assert_eq!(replay, [Position::new(1, 0), Position::new(1, 1)], "{mode}");
        // ... and while it is in flight, A asks for 1:2 again.
        w.d.handle_redeliver(now, a, &[Position::new(1, 2)]);
        let entries: Vec<_> = w
            .sends
            .iter()
            .filter(|(n, _)| n == "B")
            .map(|(_, e)| e.clone())
            .collect();
        w.d.handle_replay_complete(now, entries, &[]);
        w.pump();
        w
    }
}

/// Ordered Key_Shared with a replay read in flight: the consumer that held the key leaves, and
/// the entry it still had (earlier than the one being replayed) comes back to replay. When the
/// read completes, the replayed entry must not overtake it on the key's new owner. Found by the
/// simulator once its reads took time (`mix-key-shared-slow-reads`, seed 7: `1:949` sent before
/// `1:948` of its key); fails without `withhold_overtaken_replay`.
#[test]
fn an_entry_back_in_replay_during_a_replay_read_is_not_overtaken() {
    for mode in ["key_shared", "key_shared autosplit"] {
        let script = |k: &str| format!("{mode}\njoin A\njoin C\nflow A 2\npub {k} {k}\n");
        // A key the selector gives to A.
        let key = (0..100)
            .map(|i| format!("k{i}"))
            .find(|k| {
                run(&script(k))
                    .received
                    .get("A")
                    .is_some_and(|r| r.len() == 2)
            })
            .unwrap();
        let mut w = run(&script(&key));
        let a = w.id("A");
        let got = |w: &common::World, name: &str| w.received.get(name).cloned().unwrap_or_default();
        // A asks for 1:1 again and has a permit: the replay read of 1:1 is issued ...
        let now = w.now;
        w.d.handle_redeliver(now, a, &[Position::new(1, 1)]);
        w.d.handle_flow(now, a, 1);
        let replay = take_replay_read(&mut w, mode);
        assert_eq!(replay, [Position::new(1, 1)], "{mode}");
        // ... and while it is in flight A leaves (1:0 comes back to replay); C gets permits.
        w.step("leave A");
        w.step("flow C 10");
        assert_eq!(
            got(&w, "C"),
            [],
            "{mode}: nothing may go while the read is in flight"
        );
        let entry = w
            .sends
            .iter()
            .find(|(n, e)| n == "A" && e.position == Position::new(1, 1))
            .map(|(_, e)| e.clone())
            .unwrap();
        w.d.handle_replay_complete(now, vec![entry], &[]);
        w.pump();
        assert_eq!(
            got(&w, "C"),
            [Position::new(1, 0), Position::new(1, 1)],
            "{mode}: C must get the key in order\n{}",
            w.out
        );
    }
}

/// `why_replay_waits` and `replay_ready`, which the simulator's idle-replay check relies on: a
/// redelivered entry waits for its consumer's permits, an entry behind it waits for it, and once
/// the consumer has permits the first one is ready (and goes at the next pump).
#[test]
fn replay_entries_explain_what_they_wait_for() {
    let mut w = run("key_shared exclusive\njoin A ranges=0-65535\nflow A 2\npub k k\n");
    let a = w.id("A");
    let (p0, p1) = (Position::new(1, 0), Position::new(1, 1));
    let now = w.now;
    w.d.handle_redeliver(now, a, &[p0, p1]);
    w.pump();
    assert_eq!(
        w.d.why_replay_waits(p0),
        Some(dispatcher::BlockReason::NoPermits { consumer: a })
    );
    assert_eq!(
        w.d.why_replay_waits(p1),
        Some(dispatcher::BlockReason::BehindReplay { position: p0 })
    );
    assert_eq!(w.d.why_replay_waits(Position::new(9, 9)), None);
    assert_eq!(w.d.replay_ready(), None);
    // Permits arrive: the core acts on them at once, so look before it runs.
    w.d.handle_flow(now, a, 1);
    assert_eq!(
        w.d.why_replay_waits(p0),
        Some(dispatcher::BlockReason::NotBlocked)
    );
    assert_eq!(w.d.replay_ready(), Some(p0));
    w.pump();
    assert_eq!(
        w.received.get("A").cloned().unwrap_or_default(),
        [p0, p1, p0]
    );
}

/// Takes the core's commands until its replay read, and returns the positions it asks for (the
/// read is then in flight: the test completes it with `handle_replay_complete`).
fn take_replay_read(w: &mut common::World, mode: &str) -> Vec<Position> {
    loop {
        match w.d.poll_command() {
            Some(DispatchCommand::Replay { positions }) => return positions,
            Some(_) => continue,
            None => panic!("{mode}: no replay read issued"),
        }
    }
}
