//! Pooled runtimes: many subscriptions' loops on a few worker threads, each loop run when it
//! has an event or something due, with the threaded runtime's behaviour (order, timers,
//! paused consumers, shutdown).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use cursor::{EntryMeta, InMemoryLedger, ManagedCursor, MemoryStore, Position};
use dispatcher::{
    ConsumerSpec, Delivery, DeliverySink, DispatchPool, DispatcherConfig, Refused, Runtime,
    RuntimeOptions,
};

fn meta(key: &str) -> EntryMeta {
    let mut m = EntryMeta::simple(0, 10);
    m.ordering_key = Some(key.as_bytes().to_vec());
    m
}

fn pooled(cfg: DispatcherConfig, name: &str, pool: &DispatchPool) -> Runtime {
    let ledger = InMemoryLedger::new(10_000);
    let cursor = ManagedCursor::new(name, &ledger, MemoryStore::new());
    Runtime::start_pooled(cfg, cursor, ledger, RuntimeOptions::default(), pool)
}

/// The threads of this process named `name` now (a threaded runtime's is `dispatcher`).
fn threads_named(name: &str) -> usize {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim_end() == name)
        })
        .count()
}

/// 300 Key_Shared subscriptions on 2 workers: each one's consumers get every entry once, each
/// key on one consumer in publish order, all acked (backlog 0); no runtime has a thread of its
/// own; every runtime shuts down and the pool's threads end.
#[test]
fn many_subscriptions_run_on_two_workers_in_order() {
    let pool = DispatchPool::new(2);
    assert_eq!(pool.workers(), 2);
    let rts: Vec<Runtime> = (0..300)
        .map(|i| pooled(DispatcherConfig::key_shared(), &format!("s{i}"), &pool))
        .collect();
    assert_eq!(
        threads_named("dispatcher"),
        0,
        "a pooled runtime started a thread"
    );
    let mut consumers = Vec::new();
    for rt in &rts {
        let a = rt.add_consumer(ConsumerSpec::new(1, "a")).unwrap();
        let b = rt.add_consumer(ConsumerSpec::new(2, "b")).unwrap();
        a.flow(1_000);
        b.flow(1_000);
        rt.publish((0..40).map(|i| meta(&format!("k{}", i % 7))).collect());
        consumers.push((a, b));
    }
    for (k, (rt, (a, b))) in rts.iter().zip(&consumers).enumerate() {
        let mut per_key: HashMap<Vec<u8>, (u64, Vec<Position>)> = HashMap::new();
        let mut got = 0;
        let deadline = Instant::now() + Duration::from_secs(20);
        while got < 40 {
            assert!(
                Instant::now() < deadline,
                "runtime {k}: {got} of 40 within 20 s"
            );
            for c in [a, b] {
                while let Ok(batch) = c.deliveries.try_recv() {
                    for d in batch {
                        let key = d.meta.ordering_key.clone().unwrap_or_default();
                        let seen = per_key.entry(key).or_insert((c.id.0, Vec::new()));
                        assert_eq!(seen.0, c.id.0, "runtime {k}: a key on two consumers");
                        seen.1.push(d.position);
                        c.ack(d.position).unwrap();
                        got += 1;
                    }
                }
            }
            thread::sleep(Duration::from_millis(1));
        }
        for (_, ps) in per_key.values() {
            assert!(
                ps.windows(2).all(|w| w[0] < w[1]),
                "runtime {k}: out of order"
            );
        }
        assert_eq!(rt.cursor_view().backlog.entries, 0, "runtime {k}");
    }
    drop(consumers);
    for rt in rts {
        rt.shutdown();
    }
    drop(pool);
}

/// Timers run on the pool: a nack's delay holds the message back, then it comes again.
#[test]
fn a_nack_delay_is_kept_by_the_pool_timer() {
    let pool = DispatchPool::new(1);
    let rt = pooled(DispatcherConfig::key_shared(), "nack", &pool);
    let c = rt.add_consumer(ConsumerSpec::new(1, "c")).unwrap();
    c.flow(10);
    let ps = rt.publish_wait(vec![meta("k")]);
    let first = c.deliveries.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(first[0].position, ps[0]);
    let nacked = Instant::now();
    c.nack(vec![ps[0]], Some(200));
    let again = c.deliveries.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!((again[0].position, again[0].redelivery_count), (ps[0], 1));
    // The loop's clock counts whole milliseconds: the nack is stamped with the millisecond it
    // arrived in (up to 1 ms before its real time), so the delay can end up to 1 ms early by
    // this test's clock (a CI run measured 199.5 ms).
    assert!(
        nacked.elapsed() >= Duration::from_millis(199),
        "{:?}",
        nacked.elapsed()
    );
    drop(c);
    rt.shutdown();
}

struct Gate {
    got: Arc<Mutex<Vec<Position>>>,
    room: Arc<AtomicBool>,
}

impl DeliverySink for Gate {
    fn deliver(&mut self, batch: Vec<Delivery>) -> Result<(), Refused> {
        if !self.room.load(Ordering::SeqCst) {
            return Err(Refused::Full(batch));
        }
        self.got
            .lock()
            .unwrap()
            .extend(batch.iter().map(|d| d.position));
        Ok(())
    }

    fn has_room(&self) -> bool {
        self.room.load(Ordering::SeqCst)
    }
}

/// A consumer paused on a full sink is looked at again by the pool (no event comes when the
/// sink drains), and then gets everything in order. No cursor persist cadence: nothing else
/// wakes the loop (a loop that found the look never due stalled here until its next persist).
#[test]
fn a_paused_consumer_resumes_without_an_event() {
    let pool = DispatchPool::new(1);
    let ledger = InMemoryLedger::new(10_000);
    let cursor = ManagedCursor::new("paused", &ledger, MemoryStore::new());
    let options = RuntimeOptions {
        persist_every: None,
        ..RuntimeOptions::default()
    };
    let cfg = DispatcherConfig::shared();
    let rt = Runtime::start_pooled(cfg, cursor, ledger, options, &pool);
    let got = Arc::new(Mutex::new(Vec::new()));
    let room = Arc::new(AtomicBool::new(false));
    let sink = Gate {
        got: got.clone(),
        room: room.clone(),
    };
    let c = rt
        .add_consumer_with_sink(ConsumerSpec::new(1, "c"), Box::new(sink))
        .unwrap();
    let positions = rt.publish_wait((0..10).map(|_| meta("x")).collect());
    c.flow(100);
    thread::sleep(Duration::from_millis(50));
    assert!(got.lock().unwrap().is_empty());
    room.store(true, Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.lock().unwrap().len() < positions.len() {
        assert!(Instant::now() < deadline, "not resumed within 5 s");
        thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(*got.lock().unwrap(), positions);
    drop(c);
    rt.shutdown();
}

/// Requests that wait for the loop's answer (stats, admin) are answered from a worker, and a
/// runtime dropped without a shutdown stops too.
#[test]
fn answers_come_from_the_workers_and_a_drop_stops_the_loop() {
    let pool = DispatchPool::new(2);
    let rt = pooled(DispatcherConfig::shared(), "answers", &pool);
    rt.publish_wait((0..5).map(|_| meta("x")).collect());
    let (stats, consumers) = rt.stats().unwrap();
    assert_eq!((stats.replay_size, consumers.len()), (0, 0));
    assert!(rt.admin(dispatcher::AdminOp::ClearBacklog).is_some());
    assert_eq!(rt.cursor_view().backlog.entries, 0);
    drop(rt);
    drop(pool);
}

/// A runtime still alive when its pool is dropped does not run again, and dropping it then
/// returns at once (a broker shutting down out of order does not hang).
#[test]
fn a_runtime_outliving_its_pool_drops_without_waiting() {
    let pool = DispatchPool::new(1);
    let rt = pooled(DispatcherConfig::shared(), "outlives", &pool);
    rt.publish_wait(vec![meta("x")]);
    drop(pool);
    assert!(rt.stats().is_none(), "no loop runs once the pool is gone");
    drop(rt);
}

struct Panics;

impl DeliverySink for Panics {
    fn deliver(&mut self, _: Vec<Delivery>) -> Result<(), Refused> {
        panic!("a sink that panics (planted)");
    }

    fn has_room(&self) -> bool {
        true
    }
}

/// A loop whose step panics stops alone: the worker goes on running the others, and the
/// panicked runtime's shutdown returns.
#[test]
fn a_panicking_loop_stops_alone() {
    let pool = DispatchPool::new(1);
    let bad = pooled(DispatcherConfig::shared(), "bad", &pool);
    let good = pooled(DispatcherConfig::shared(), "good", &pool);
    let b = bad
        .add_consumer_with_sink(ConsumerSpec::new(1, "b"), Box::new(Panics))
        .unwrap();
    b.flow(10);
    bad.publish(vec![meta("x")]);
    let c = good.add_consumer(ConsumerSpec::new(1, "c")).unwrap();
    c.flow(10);
    good.publish(vec![meta("y")]);
    assert_eq!(
        c.deliveries
            .recv_timeout(Duration::from_secs(5))
            .unwrap()
            .len(),
        1
    );
    assert!(bad.stats().is_none(), "the panicked loop answers nothing");
    drop((b, c));
    bad.shutdown();
    good.shutdown();
}
