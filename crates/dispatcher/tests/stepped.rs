//! The stepped runtime: the same `Runtime` API with no thread, run by the caller's `step` at the
//! caller's clock. Nothing happens between steps; timers fire only when the clock reaches them;
//! the methods that wait for an answer run the loop themselves.

use std::path::{Path, PathBuf};
use std::time::Duration;

use cursor::{EntryMeta, InMemoryLedger, ManagedCursor, MemoryStore, Position};
use dispatcher::{
    AdminOp, ConsumerSpec, DispatcherConfig, ReadDelay, Runtime, RuntimeOptions, StepClock,
};

const T0: u64 = 1_764_000_000_000;

fn meta(key: &str) -> EntryMeta {
    let mut m = EntryMeta::simple(T0, 10);
    m.ordering_key = Some(key.as_bytes().to_vec());
    m
}

fn stepped(cfg: DispatcherConfig, options: RuntimeOptions) -> (Runtime, StepClock) {
    let clock = StepClock::new(T0);
    let ledger = InMemoryLedger::new(10_000);
    let cursor = ManagedCursor::new("sub", &ledger, MemoryStore::new());
    let rt = Runtime::start_stepped(cfg, cursor, ledger, options, clock.clone());
    (rt, clock)
}

fn received(c: &dispatcher::ConsumerHandle) -> Vec<Position> {
    let mut out = Vec::new();
    while let Ok(batch) = c.deliveries.try_recv() {
        out.extend(batch.iter().map(|d| d.position));
    }
    out
}

#[test]
fn nothing_runs_between_steps_and_a_step_delivers_everything_due() {
    let (rt, _clock) = stepped(DispatcherConfig::key_shared(), RuntimeOptions::default());
    assert!(rt.is_stepped());
    let c = rt.add_consumer(ConsumerSpec::new(1, "c1")).unwrap();
    c.flow(100);
    rt.publish((0..5).map(|i| meta(&format!("k{i}"))).collect());
    assert!(
        received(&c).is_empty(),
        "published, not stepped: nothing sent"
    );
    assert!(rt.step(), "the step handled the flow and the publish");
    assert_eq!(received(&c).len(), 5);
    assert!(!rt.step(), "a second step finds nothing to do");
}

/// With a read delay, a read completes when the clock reaches its time (not at the step that
/// issued it), and the delays follow the seed.
#[test]
fn a_delayed_read_completes_when_the_clock_reaches_it() {
    let delay = ReadDelay {
        min_ms: 20,
        max_ms: 20,
        seed: 1,
    };
    let options = RuntimeOptions {
        read_delay: Some(delay),
        ..RuntimeOptions::default()
    };
    let (rt, clock) = stepped(DispatcherConfig::key_shared(), options);
    let c = rt.add_consumer(ConsumerSpec::new(1, "c1")).unwrap();
    c.flow(100);
    rt.publish((0..5).map(|i| meta(&format!("k{i}"))).collect());
    while rt.step() {}
    assert!(received(&c).is_empty(), "the read is still in flight");
    assert_eq!(rt.next_deadline(), Some(T0 + 20), "due after the delay");
    clock.set(T0 + 19);
    while rt.step() {}
    assert!(received(&c).is_empty(), "one ms early: still in flight");
    clock.set(T0 + 20);
    while rt.step() {}
    let mut got = received(&c);
    assert!(!got.is_empty(), "the first read completed");
    // Each later read takes its 20 ms too.
    while let Some(at) = rt.next_deadline().filter(|_| got.len() < 5) {
        assert!(
            at >= clock.now() + 20 || at > T0 + 1_000,
            "a read waits its delay"
        );
        clock.set(at);
        while rt.step() {}
        got.extend(received(&c));
    }
    assert_eq!(got.len(), 5);
}

#[test]
fn request_and_reply_methods_run_the_loop_themselves() {
    let (rt, _clock) = stepped(DispatcherConfig::shared(), RuntimeOptions::default());
    let positions = rt.publish_wait((0..4).map(|_| meta("k")).collect());
    assert_eq!(positions.len(), 4);
    let mv = rt
        .admin(AdminOp::Skip(2))
        .expect("the skip moved mark-delete");
    assert_eq!(mv.dropped, positions[..2].to_vec());
    let (stats, consumers) = rt.stats().expect("stats");
    assert_eq!(stats.consumers, 0);
    assert!(consumers.is_empty());
    assert_eq!(rt.cursor_view().backlog.entries, 2);
}

/// A nack's delay is the caller's clock: the entry comes back only once the clock passes it,
/// and `next_deadline` says when that is.
#[test]
fn a_nack_delay_fires_when_the_callers_clock_reaches_it() {
    let (rt, clock) = stepped(DispatcherConfig::shared(), RuntimeOptions::default());
    let c = rt.add_consumer(ConsumerSpec::new(1, "c1")).unwrap();
    c.flow(100);
    let ps = rt.publish_wait(vec![meta("k")]);
    while rt.step() {}
    assert_eq!(received(&c), ps);
    c.nack(ps.clone(), Some(300));
    while rt.step() {}
    assert!(received(&c).is_empty(), "not before its delay");
    let due = rt.next_deadline().expect("the nack's timer");
    assert!(due > T0 && due <= T0 + 1_000, "due at {due}");
    clock.set(T0 + 299);
    while rt.step() {}
    assert!(received(&c).is_empty(), "one ms early");
    clock.set(due.max(T0 + 300) + 50);
    while rt.step() {}
    assert_eq!(
        received(&c),
        ps,
        "redelivered once the clock passed the delay"
    );
}

/// The idle-consumer check runs on its own deadline, however busy the loop is with events
/// (each event used to restart the idle tick, so a subscription that never went quiet never
/// disconnected an idle consumer).
#[test]
fn an_idle_consumer_is_disconnected_by_the_clock_even_while_events_keep_coming() {
    let options = RuntimeOptions {
        consumer_idle_timeout: Some(Duration::from_millis(1_000)),
        ..RuntimeOptions::default()
    };
    let (rt, clock) = stepped(DispatcherConfig::key_shared(), options);
    let idle = rt.add_consumer(ConsumerSpec::new(1, "idle")).unwrap();
    idle.flow(10);
    let ps = rt.publish_wait(vec![meta("k")]);
    while rt.step() {}
    assert_eq!(received(&idle), ps, "the idle consumer holds the entry");
    let busy = rt.add_consumer(ConsumerSpec::new(2, "busy")).unwrap();
    // An event every 100 ms of clock (the busy consumer's flow); the idle one says nothing.
    for step in 1..=30 {
        clock.set(T0 + step * 100);
        busy.flow(1);
        while rt.step() {}
    }
    assert_eq!(
        received(&busy),
        ps,
        "the idle consumer was disconnected and its entry went to the other"
    );
}

/// A stepped Shared runtime over `n` stored entries, its cursor in a file under a fresh
/// directory, persisted only on shutdown or when an admin operation moves it. Returns the
/// runtime, the ledger, the entries and the cursor file.
fn file_backed(name: &str, n: usize) -> (Runtime, InMemoryLedger, Vec<Position>, PathBuf) {
    let dir = std::env::temp_dir().join(format!("dispatcher-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sub.cursor");
    // The runtime appends to its own copy of the ledger: the entries go in before it starts.
    let mut ledger = InMemoryLedger::new(10_000);
    let ps: Vec<Position> = (0..n)
        .map(|_| cursor::Ledger::append(&mut ledger, meta("k")))
        .collect();
    let cursor = ManagedCursor::new("sub", &ledger, cursor::FileStore::open(&path).unwrap());
    let options = RuntimeOptions {
        persist_every: None,
        ..RuntimeOptions::default()
    };
    let rt = Runtime::start_stepped(
        DispatcherConfig::shared(),
        cursor,
        ledger.clone(),
        options,
        StepClock::new(T0),
    );
    (rt, ledger, ps, path)
}

/// [`file_backed`] over three entries, which a consumer received and acked.
fn three_acked_in_a_file(name: &str) -> (Runtime, InMemoryLedger, Vec<Position>, PathBuf) {
    let (rt, ledger, ps, path) = file_backed(name, 3);
    let c = rt.add_consumer(ConsumerSpec::new(1, "c1")).unwrap();
    c.flow(10);
    while rt.step() {}
    for p in received(&c) {
        c.ack(p).unwrap();
    }
    (rt, ledger, ps, path)
}

/// The mark-delete position read back from the cursor file (`None`: nothing readable).
fn recovered(ledger: &InMemoryLedger, path: &Path) -> Option<Position> {
    let store = cursor::FileStore::open(path).ok()?;
    ManagedCursor::recover(ledger, store)
        .ok()
        .map(|c| c.mark_delete_position())
}

#[test]
fn shutdown_persists_and_ends_the_loop() {
    let (rt, ledger, ps, path) = three_acked_in_a_file("shutdown");
    rt.shutdown();
    assert_eq!(recovered(&ledger, &path), Some(ps[2]));
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}

/// An abandoned runtime (a simulated crash) does not persist on drop: the store keeps what was
/// persisted before.
#[test]
fn an_abandoned_runtime_keeps_only_what_was_persisted() {
    let (rt, ledger, ps, path) = three_acked_in_a_file("abandon");
    rt.abandon();
    assert!(!rt.step(), "an abandoned loop does not run");
    drop(rt);
    assert_ne!(
        recovered(&ledger, &path),
        Some(ps[2]),
        "the acks were never persisted"
    );
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}

/// An admin operation's mark-delete move is persisted before the operation is answered: a
/// crash right after it does not bring the dropped entries back.
#[test]
fn an_admin_skip_survives_a_crash_right_after_it() {
    let (rt, ledger, ps, path) = file_backed("admin", 5);
    assert!(rt.admin(AdminOp::Skip(2)).is_some());
    rt.abandon();
    drop(rt);
    assert_eq!(
        recovered(&ledger, &path),
        Some(ps[1]),
        "the skip is on disk"
    );
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}

#[test]
fn a_threaded_runtime_does_not_step() {
    let ledger = InMemoryLedger::new(10_000);
    let cursor = ManagedCursor::new("sub", &ledger, MemoryStore::new());
    let rt = Runtime::start(DispatcherConfig::shared(), cursor, ledger);
    assert!(!rt.is_stepped());
    assert!(!rt.step());
    assert_eq!(rt.next_deadline(), None);
    rt.shutdown();
}

/// `holdings` shows who holds what after each step: sends make entries pending, an ack and a
/// release take them off; a threaded runtime has none to show, and no livelock to report.
#[test]
fn holdings_follow_sends_acks_and_returns() {
    let (rt, _clock) = stepped(DispatcherConfig::key_shared(), RuntimeOptions::default());
    let c = rt.add_consumer(ConsumerSpec::new(1, "c1")).unwrap();
    c.flow(100);
    rt.publish(vec![meta("k0"), meta("k0"), meta("k1")]);
    while rt.step() {}
    let ps = received(&c);
    let pending = |rt: &Runtime| -> Vec<Position> {
        let h = rt.holdings().expect("a stepped runtime shows its holdings");
        assert_eq!(h.consumers.len(), 1);
        assert_eq!(h.consumers[0].unacked, h.consumers[0].pending.len() as i64);
        h.consumers[0].pending.iter().map(|(p, _)| *p).collect()
    };
    assert_eq!(pending(&rt), ps);
    c.ack(ps[0]).unwrap();
    assert_eq!(pending(&rt), ps[1..].to_vec());
    c.release(vec![ps[2]]);
    rt.step();
    // Released, then sent again at once (the consumer has permits): pending again.
    assert_eq!(received(&c), vec![ps[2]]);
    assert_eq!(pending(&rt), ps[1..].to_vec());
    assert_eq!(rt.livelock(), None);

    let ledger = InMemoryLedger::new(10_000);
    let cursor = ManagedCursor::new("sub", &ledger, MemoryStore::new());
    let threaded = Runtime::start(DispatcherConfig::shared(), cursor, ledger);
    assert_eq!(threaded.holdings(), None);
    assert_eq!(threaded.livelock(), None);
    threaded.shutdown();
}
