//! The threaded runtime end to end: consumers ack on their own threads while others join and
//! leave; every message is acked exactly once and no key is ever held by two consumers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use cursor::{EntryMeta, InMemoryLedger, ManagedCursor, MemoryStore};
use dispatcher::{ConsumerHandle, ConsumerSpec, DispatcherConfig, Runtime};

fn meta(key: &str) -> EntryMeta {
    let mut m = EntryMeta::simple(0, 10);
    m.ordering_key = Some(key.as_bytes().to_vec());
    m
}

type Holds = Arc<Mutex<HashMap<Vec<u8>, (u64, u32)>>>;

/// Receives, checks the key is not held elsewhere, "processes", releases the hold, acks.
fn consume(
    c: ConsumerHandle,
    holds: Holds,
    acked: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    violations: Arc<AtomicU64>,
    leave_after: Option<u64>,
) {
    c.flow(50);
    let mut since_flow = 0;
    let mut mine = 0u64;
    'outer: while !stop.load(Ordering::SeqCst) {
        let Ok(batch) = c.deliveries.recv_timeout(Duration::from_millis(20)) else {
            continue;
        };
        for e in batch {
            if leave_after.is_some_and(|n| mine >= n) {
                // Leave with entries unprocessed: they go to the others.
                break 'outer;
            }
            mine += 1;
            let key = e.meta.ordering_key.clone().unwrap_or_default();
            {
                let mut h = holds.lock().unwrap();
                let slot = h.entry(key.clone()).or_insert((c.id.0, 0));
                if slot.1 > 0 && slot.0 != c.id.0 {
                    violations.fetch_add(1, Ordering::SeqCst);
                }
                *slot = (c.id.0, slot.1 + 1);
            }
            {
                let mut h = holds.lock().unwrap();
                if let Some(slot) = h.get_mut(&key) {
                    slot.1 -= 1;
                }
            }
            c.ack(e.position).unwrap();
            acked.fetch_add(1, Ordering::SeqCst);
            since_flow += 1;
            if since_flow >= 25 {
                c.flow(since_flow);
                since_flow = 0;
            }
        }
    }
    c.close();
}

#[test]
fn key_shared_runtime_acks_everything_and_never_splits_a_key() {
    let ledger = InMemoryLedger::new(10_000);
    let cursor = ManagedCursor::new("sub", &ledger, MemoryStore::new());
    let rt = Runtime::start(DispatcherConfig::key_shared(), cursor, ledger);
    let holds: Holds = Arc::default();
    let acked = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let violations = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    let spawn =
        |rt: &Runtime, id: u64, leave: Option<u64>, threads: &mut Vec<thread::JoinHandle<()>>| {
            let c = rt
                .add_consumer(ConsumerSpec::new(id, format!("c{id}")))
                .unwrap();
            let (h, a, s, v) = (
                holds.clone(),
                acked.clone(),
                stop.clone(),
                violations.clone(),
            );
            threads.push(thread::spawn(move || consume(c, h, a, s, v, leave)));
        };
    spawn(&rt, 1, None, &mut threads);
    // Consumer 2 leaves mid-way with entries still unprocessed (they move to the others).
    spawn(&rt, 2, Some(400), &mut threads);
    let total = 3_000u64;
    for round in 0..3 {
        rt.publish(
            (0..1_000)
                .map(|i| meta(&format!("k{}", (i * 7 + round) % 37)))
                .collect(),
        );
        // Churn while messages flow: every join moves keys (draining on the old owners).
        spawn(&rt, 3 + round, None, &mut threads);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while acked.load(Ordering::SeqCst) < total && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::SeqCst);
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(acked.load(Ordering::SeqCst), total);
    assert_eq!(violations.load(Ordering::SeqCst), 0);
    rt.shutdown();
}

#[test]
fn shared_runtime_redelivers_a_closed_consumers_entries() {
    let ledger = InMemoryLedger::new(10_000);
    let cursor = ManagedCursor::new("sub", &ledger, MemoryStore::new());
    let rt = Runtime::start(DispatcherConfig::shared(), cursor, ledger);
    let a = rt.add_consumer(ConsumerSpec::new(1, "a")).unwrap();
    let b = rt.add_consumer(ConsumerSpec::new(2, "b")).unwrap();
    rt.publish((0..10).map(|_| meta("x")).collect());
    a.flow(5);
    let got_a: Vec<_> = a.deliveries.recv_timeout(Duration::from_secs(5)).unwrap();
    // A leaves without acking: its entries go to B.
    a.close();
    b.flow(100);
    let mut got_b = Vec::new();
    while got_b.len() < 10 {
        let batch = b.deliveries.recv_timeout(Duration::from_secs(5)).unwrap();
        got_b.extend(batch.into_iter().map(|e| e.position));
    }
    for e in &got_a {
        assert!(got_b.contains(&e.position));
    }
    for p in &got_b {
        b.ack(*p).unwrap();
    }
    let (stats, consumers) = rt.stats().unwrap();
    assert_eq!(stats.unacked, 0);
    assert_eq!(consumers.len(), 1);
    rt.shutdown();
}

#[test]
fn admin_ops_report_their_mark_delete_move() {
    let ledger = InMemoryLedger::new(10_000);
    let cursor = ManagedCursor::new("sub", &ledger, MemoryStore::new());
    let rt = Runtime::start(DispatcherConfig::shared(), cursor, ledger);
    let a = rt.add_consumer(ConsumerSpec::new(1, "a")).unwrap();
    rt.publish((0..4).map(|_| meta("x")).collect());
    a.flow(2);
    let got = a.deliveries.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(!got.is_empty());
    let mv = rt
        .admin(dispatcher::AdminOp::Skip(2))
        .expect("skip moved mark-delete");
    assert_eq!(mv.dropped.len(), 2);
    // Shared: the pending acks at or below the new mark-delete are gone.
    let (stats, _) = rt.stats().unwrap();
    let below = got.iter().filter(|e| e.position <= mv.to).count() as i64;
    assert_eq!(stats.unacked, got.len() as i64 - below);
    assert!(rt.admin(dispatcher::AdminOp::Skip(0)).is_none());
    rt.shutdown();
}

#[test]
fn a_stopped_runtime_answers_with_errors_not_hangs() {
    let ledger = InMemoryLedger::new(10_000);
    let cursor = ManagedCursor::new("sub", &ledger, MemoryStore::new());
    let rt = Runtime::start(DispatcherConfig::shared(), cursor, ledger);
    let events = rt.events();
    events.send(dispatcher::Event::Shutdown).unwrap();
    // The thread stops at the Shutdown (events are FIFO) and drops the queue, so later
    // requests fail instead of blocking.
    assert_eq!(
        rt.add_consumer(ConsumerSpec::new(1, "a")).unwrap_err(),
        dispatcher::AddConsumerError::DispatcherStopped
    );
    assert!(rt.stats().is_none());
    assert!(rt.admin(dispatcher::AdminOp::ClearBacklog).is_none());
    rt.shutdown();
}

/// Ordered nack through the runtime: 0..4 of one key and one message of another key; the
/// consumer nacks 0 with a delay and releases 1..4. The other key is not held back; 0 comes
/// back first, then 1..4, and a dead letter after 2 deliveries is acked on the cursor.
#[test]
fn runtime_ordered_nack_resends_the_nacked_message_first() {
    let ledger = InMemoryLedger::new(10_000);
    let cursor = ManagedCursor::new("sub", &ledger, MemoryStore::new());
    let mut cfg = DispatcherConfig::key_shared();
    cfg.dead_letter = Some(dispatcher::DeadLetterPolicy {
        max_deliveries: 2,
        action: dispatcher::DeadLetterAction::Continue,
    });
    let rt = Runtime::start(cfg, cursor, ledger);
    let c = rt.add_consumer(ConsumerSpec::new(1, "c1")).unwrap();
    c.flow(100);
    rt.publish((0..5).map(|_| meta("k")).collect());
    let recv_n = |n: usize| {
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while got.len() < n && Instant::now() < deadline {
            if let Ok(b) = c.deliveries.recv_timeout(Duration::from_millis(10)) {
                got.extend(b);
            }
        }
        got
    };
    let first = recv_n(5);
    let ps: Vec<_> = first.iter().map(|e| e.position).collect();
    assert_eq!(ps.len(), 5);
    c.nack(vec![ps[0]], Some(30));
    c.release(ps[1..].to_vec());
    rt.publish(vec![meta("other")]);
    let other = recv_n(1);
    assert_eq!(other.len(), 1, "another key flows during the hold");
    assert_eq!(other[0].meta.ordering_key.as_deref(), Some(&b"other"[..]));
    let again: Vec<_> = recv_n(5).iter().map(|e| e.position).collect();
    assert_eq!(
        again, ps,
        "the nacked message first, then the released ones"
    );
    // Second nack: 2 deliveries reached, a dead letter (acked on the cursor by the runtime).
    c.nack(vec![ps[0]], Some(0));
    let (st, _) = rt.stats().unwrap();
    assert_eq!((st.nacks, st.releases, st.dead_letters), (2, 4, 1));
    rt.shutdown();
}

/// A delivery carries its redelivery count and, for a partly acked batch entry, the acked
/// indexes: c1 acks indexes 0 and 2 of a 5-message entry and asks for it again (a nack), gets
/// it with redelivery count 1 and acked indexes [0, 2] (what Pulsar's `ack_set` tells the
/// client), then leaves; c2 receives it with the same count (a leave is not a redelivery
/// request, as in Pulsar) and the same acked indexes, so its application does not process
/// messages 0 and 2 again.
#[test]
fn redelivered_batch_carries_its_count_and_acked_indexes() {
    let ledger = InMemoryLedger::new(10_000);
    let cursor = ManagedCursor::new("sub", &ledger, MemoryStore::new());
    let rt = Runtime::start(DispatcherConfig::shared(), cursor, ledger);
    let c1 = rt.add_consumer(ConsumerSpec::new(1, "c1")).unwrap();
    let mut batch = meta("k");
    batch.num_messages = 5;
    rt.publish(vec![batch]);
    c1.flow(10);
    let first = c1.deliveries.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].redelivery_count, 0);
    assert!(first[0].acked_indexes.is_empty());
    let p = first[0].position;
    c1.ack_batch_index(p, 5, &[0, 2]).unwrap();
    c1.redeliver(vec![p]);
    let second = c1.deliveries.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(second[0].position, p);
    assert_eq!(second[0].redelivery_count, 1);
    assert_eq!(second[0].acked_indexes, vec![0, 2]);
    c1.close();
    let c2 = rt.add_consumer(ConsumerSpec::new(2, "c2")).unwrap();
    c2.flow(10);
    let again = c2.deliveries.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(again[0].position, p);
    assert_eq!(again[0].redelivery_count, 1);
    assert_eq!(again[0].acked_indexes, vec![0, 2]);
    rt.shutdown();
}

/// The cursor view is readable from any thread while the runtime runs: acks move mark-delete,
/// the backlog counts what is left.
#[test]
fn cursor_view_follows_acks() {
    let ledger = InMemoryLedger::new(10_000);
    let cursor = ManagedCursor::new("sub", &ledger, MemoryStore::new());
    let rt = Runtime::start(DispatcherConfig::shared(), cursor, ledger);
    let c = rt.add_consumer(ConsumerSpec::new(1, "c")).unwrap();
    rt.publish((0..4).map(|_| meta("x")).collect());
    c.flow(10);
    let mut got = Vec::new();
    while got.len() < 4 {
        let b = c.deliveries.recv_timeout(Duration::from_secs(5)).unwrap();
        got.extend(b.iter().map(|d| d.position));
    }
    let before = rt.cursor_view();
    assert_eq!(before.backlog.entries, 4);
    c.ack(got[0]).unwrap();
    c.ack(got[1]).unwrap();
    let after = rt.cursor_view();
    assert_eq!(after.mark_delete, got[1]);
    assert_eq!(after.backlog.entries, 2);
    rt.shutdown();
}

/// Two subscriptions over one shared ledger: the owner appends once and notifies both
/// runtimes; each delivers every entry, and one's acks do not move the other's cursor.
#[test]
fn two_runtimes_share_one_ledger() {
    use cursor::{Ledger, SharedLedger};
    let topic = SharedLedger::new(InMemoryLedger::new(3));
    let start = |name: &str, cfg: DispatcherConfig| {
        let cursor = ManagedCursor::new(name, &topic, MemoryStore::new());
        Runtime::start(cfg, cursor, topic.clone())
    };
    let subs = [
        start("a", DispatcherConfig::shared()),
        start("b", DispatcherConfig::key_shared()),
    ];
    let consumers: Vec<ConsumerHandle> = subs
        .iter()
        .map(|rt| rt.add_consumer(ConsumerSpec::new(1, "c")).unwrap())
        .collect();
    let mut positions = Vec::new();
    for i in 0..10 {
        positions.push(topic.write().append(meta(&format!("k{i}"))));
        for rt in &subs {
            rt.entries_appended();
        }
    }
    let mut got = vec![Vec::new(), Vec::new()];
    for (c, got) in consumers.iter().zip(&mut got) {
        c.flow(100);
        while got.len() < positions.len() {
            let b = c.deliveries.recv_timeout(Duration::from_secs(5)).unwrap();
            got.extend(b.iter().map(|d| d.position));
        }
        got.sort();
        assert_eq!(*got, positions);
    }
    for p in &got[0] {
        consumers[0].ack(*p).unwrap();
    }
    assert_eq!(subs[0].cursor_view().backlog.entries, 0);
    assert_eq!(subs[1].cursor_view().backlog.entries, 10);
    // The owner trims below the slowest cursor once (the boundary is read before the write
    // lock is taken: the cursor view reads the ledger); a's acks trimmed nothing b needs.
    let slowest = subs[1].cursor_view().mark_delete.next();
    topic.write().trim_below(slowest);
    assert_eq!(topic.first_position(), Some(positions[0]));
    drop(consumers);
    for rt in subs {
        rt.shutdown();
    }
}

/// A producer thread appends to a shared ledger (small ledgers, so appends often roll over)
/// while two subscriptions' runtimes read it and their consumers ack on their own threads:
/// every entry reaches each subscription, and both backlogs drain to zero. An append that lands
/// between two of a cursor's look-ups must not be passed over.
#[test]
fn appends_racing_with_reads_lose_nothing() {
    use cursor::{Ledger, SharedLedger};
    const N: usize = 50_000;
    let topic = SharedLedger::new(InMemoryLedger::new(3));
    let done = Arc::new(AtomicBool::new(false));
    let subs: Vec<Arc<Runtime>> = [DispatcherConfig::shared(), DispatcherConfig::key_shared()]
        .into_iter()
        .enumerate()
        .map(|(i, cfg)| {
            let cursor = ManagedCursor::new(format!("s{i}"), &topic, MemoryStore::new());
            Arc::new(Runtime::start(cfg, cursor, topic.clone()))
        })
        .collect();
    let mut readers = Vec::new();
    for rt in &subs {
        for id in 1..=2u64 {
            let c = rt
                .add_consumer(ConsumerSpec::new(id, format!("c{id}")))
                .unwrap();
            let done = done.clone();
            readers.push(thread::spawn(move || {
                c.flow(500);
                let mut got = Vec::new();
                while !done.load(Ordering::SeqCst) {
                    let Ok(batch) = c.deliveries.recv_timeout(Duration::from_millis(20)) else {
                        continue;
                    };
                    for d in batch {
                        c.ack(d.position).unwrap();
                        got.push(d.position);
                    }
                    c.flow(500);
                }
                got
            }));
        }
    }
    let producer = {
        let (topic, subs) = (topic.clone(), subs.clone());
        thread::spawn(move || {
            for i in 0..N {
                topic.write().append(meta(&format!("k{}", i % 97)));
                for rt in &subs {
                    rt.entries_appended();
                }
            }
        })
    };
    producer.join().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while subs.iter().any(|rt| rt.cursor_view().backlog.entries > 0) && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    done.store(true, Ordering::SeqCst);
    for (i, rt) in subs.iter().enumerate() {
        let v = rt.cursor_view();
        assert_eq!(
            v.backlog.entries, 0,
            "subscription {i} left entries unread: {v:?}"
        );
    }
    let got: Vec<Vec<cursor::Position>> = readers.into_iter().map(|h| h.join().unwrap()).collect();
    for (i, pair) in got.chunks(2).enumerate() {
        let mut all: Vec<_> = pair.concat();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), N, "subscription {i} delivered every entry");
    }
    for rt in subs {
        if let Ok(rt) = Arc::try_unwrap(rt) {
            rt.shutdown();
        }
    }
}

/// Collects a consumer's sends on the dispatcher thread while `room` says so.
struct Collect {
    got: Arc<Mutex<Vec<cursor::Position>>>,
    room: Arc<AtomicBool>,
}

impl dispatcher::DeliverySink for Collect {
    fn deliver(
        &mut self,
        deliveries: Vec<dispatcher::Delivery>,
    ) -> Result<(), dispatcher::Refused> {
        if !self.room.load(Ordering::SeqCst) {
            return Err(dispatcher::Refused::Full(deliveries));
        }
        let mut got = self.got.lock().unwrap();
        got.extend(deliveries.iter().map(|d| d.position));
        Ok(())
    }

    fn has_room(&self) -> bool {
        self.room.load(Ordering::SeqCst)
    }
}

/// A consumer with a sink: a full sink pauses it with nothing lost, and once the sink has room
/// again every entry arrives, in order, exactly once.
#[test]
fn a_sink_that_is_full_pauses_its_consumer_until_it_has_room() {
    let ledger = InMemoryLedger::new(10_000);
    let cursor = ManagedCursor::new("sub", &ledger, MemoryStore::new());
    let rt = Runtime::start(DispatcherConfig::shared(), cursor, ledger);
    let got = Arc::new(Mutex::new(Vec::new()));
    let room = Arc::new(AtomicBool::new(false));
    let sink = Collect {
        got: got.clone(),
        room: room.clone(),
    };
    let c = rt
        .add_consumer_with_sink(ConsumerSpec::new(1, "c"), Box::new(sink))
        .unwrap();
    assert!(c
        .deliveries
        .recv_timeout(Duration::from_millis(10))
        .is_err());
    let positions = rt.publish_wait((0..10).map(|_| meta("x")).collect());
    c.flow(100);
    thread::sleep(Duration::from_millis(100));
    assert!(got.lock().unwrap().is_empty(), "a full sink takes nothing");
    room.store(true, Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.lock().unwrap().len() < positions.len() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(*got.lock().unwrap(), positions);
    rt.shutdown();
}

fn scratch(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("dispatcher-rt-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn consume_and_ack_all(rt: &Runtime, n: usize) -> Vec<cursor::Position> {
    let c = rt.add_consumer(ConsumerSpec::new(1, "c")).unwrap();
    c.flow(1000);
    let mut got = Vec::new();
    while got.len() < n {
        let b = c.deliveries.recv_timeout(Duration::from_secs(5)).unwrap();
        got.extend(b.iter().map(|d| d.position));
    }
    for p in &got {
        c.ack(*p).unwrap();
    }
    got
}

/// Durability on a cadence: acks are saved through the FileStore within the persist interval
/// while the runtime keeps running, so a copy of the store taken then (what a `kill -9`
/// leaves on disk) recovers the acked state; nothing older than the cadence is redelivered.
#[test]
fn cursor_is_persisted_on_a_cadence() {
    let dir = scratch("cadence");
    let path = dir.join("sub.cursor");
    let mut ledger = InMemoryLedger::new(10_000);
    let ps: Vec<_> = (0..10)
        .map(|_| cursor::Ledger::append(&mut ledger, meta("x")))
        .collect();
    let store = cursor::FileStore::open(&path).unwrap();
    let cur = ManagedCursor::new("sub", &ledger, store);
    let rt = Runtime::start_with(
        DispatcherConfig::shared(),
        cur,
        ledger.clone(),
        dispatcher::RuntimeOptions {
            persist_every: Some(Duration::from_millis(50)),
            ..Default::default()
        },
    );
    let got = consume_and_ack_all(&rt, 10);
    assert_eq!(got, ps);
    let until = Instant::now() + Duration::from_secs(5);
    let crash_copy = dir.join("crash.cursor");
    loop {
        std::fs::copy(&path, &crash_copy).unwrap();
        let recovered =
            ManagedCursor::recover(&ledger, cursor::FileStore::open(&crash_copy).unwrap());
        if let Ok(c) = recovered {
            if c.mark_delete_position() == ps[9] {
                break;
            }
        }
        assert!(Instant::now() < until, "acks not persisted within 5 s");
        thread::sleep(Duration::from_millis(20));
    }
    rt.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A clean shutdown persists everything, even with no cadence.
#[test]
fn shutdown_persists_the_cursor() {
    let dir = scratch("shutdown");
    let path = dir.join("sub.cursor");
    let mut ledger = InMemoryLedger::new(10_000);
    let ps: Vec<_> = (0..10)
        .map(|_| cursor::Ledger::append(&mut ledger, meta("x")))
        .collect();
    let cur = ManagedCursor::new("sub", &ledger, cursor::FileStore::open(&path).unwrap());
    let rt = Runtime::start_with(
        DispatcherConfig::shared(),
        cur,
        ledger.clone(),
        dispatcher::RuntimeOptions {
            persist_every: None,
            ..Default::default()
        },
    );
    consume_and_ack_all(&rt, 10);
    rt.shutdown();
    let c = ManagedCursor::recover(&ledger, cursor::FileStore::open(&path).unwrap()).unwrap();
    assert_eq!(c.mark_delete_position(), ps[9]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A consumer whose thread panics while it holds entries (its handle is dropped, never
/// closed) is disconnected: its entries go to the other consumer, so the key moves.
#[test]
fn a_panicking_consumer_thread_gives_its_entries_back() {
    let ledger = InMemoryLedger::new(10_000);
    let cursor = ManagedCursor::new("sub", &ledger, MemoryStore::new());
    let rt = Runtime::start(DispatcherConfig::key_shared(), cursor, ledger);
    let a = rt.add_consumer(ConsumerSpec::new(1, "a")).unwrap();
    a.flow(100);
    rt.publish((0..10).map(|_| meta("k")).collect());
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let t = thread::spawn(move || {
        let mut got = Vec::new();
        while got.len() < 10 {
            let b = a.deliveries.recv_timeout(Duration::from_secs(5)).unwrap();
            got.extend(b.iter().map(|d| d.position));
        }
        held_tx.send(got).unwrap();
        panic!("consumer thread fails while holding its entries");
    });
    let held = held_rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(t.join().is_err(), "the consumer thread panicked");
    let b = rt.add_consumer(ConsumerSpec::new(2, "b")).unwrap();
    b.flow(100);
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.len() < 10 && Instant::now() < deadline {
        if let Ok(batch) = b.deliveries.recv_timeout(Duration::from_millis(20)) {
            got.extend(batch.iter().map(|d| d.position));
        }
    }
    assert_eq!(got, held, "b gets every entry a held, in order");
    for p in &got {
        b.ack(*p).unwrap();
    }
    let (stats, consumers) = rt.stats().unwrap();
    assert_eq!((stats.unacked, consumers.len()), (0, 1));
    rt.shutdown();
}

/// A consumer with a million permits that never reads holds at most `delivery_queue` sends in
/// its channel, while another consumer keeps receiving; once it reads it gets the rest:
/// every entry is delivered to exactly one of them, exactly once.
#[test]
fn a_consumer_that_stops_reading_holds_a_bounded_queue() {
    let ledger = InMemoryLedger::new(100_000);
    let cursor = ManagedCursor::new("sub", &ledger, MemoryStore::new());
    let mut cfg = DispatcherConfig::shared();
    cfg.max_unacked_per_consumer = 0;
    cfg.max_unacked_per_subscription = 0;
    let queue = dispatcher::RuntimeOptions::default().delivery_queue;
    let max_batch = cfg.max_read_batch;
    let rt = Runtime::start(cfg, cursor, ledger);
    let stalled = rt.add_consumer(ConsumerSpec::new(1, "stalled")).unwrap();
    let busy = rt.add_consumer(ConsumerSpec::new(2, "busy")).unwrap();
    stalled.flow(1_000_000);
    busy.flow(1_000_000);
    let total = 20_000usize;
    rt.publish((0..total).map(|_| meta("x")).collect());
    let mut seen = std::collections::BTreeMap::new();
    let mut got_busy = 0usize;
    let deadline = Instant::now() + Duration::from_secs(20);
    // The busy consumer receives everything but what the stalled one's full channel holds.
    while got_busy < total - queue * max_batch && Instant::now() < deadline {
        if let Ok(b) = busy.deliveries.recv_timeout(Duration::from_millis(20)) {
            for d in b {
                *seen.entry(d.position).or_insert(0) += 1;
                busy.ack(d.position).unwrap();
                got_busy += 1;
            }
        }
    }
    assert!(
        stalled.deliveries.len() <= queue,
        "{} sends queued",
        stalled.deliveries.len()
    );
    let mut held = 0;
    while let Ok(b) = stalled.deliveries.try_recv() {
        held += b.len();
        for d in b {
            *seen.entry(d.position).or_insert(0) += 1;
            stalled.ack(d.position).unwrap();
        }
    }
    assert!(held <= queue * max_batch, "{held} entries held");
    assert!(got_busy >= total - queue * max_batch, "busy got {got_busy}");
    // The stalled consumer reads now: the two get the rest.
    while seen.len() < total && Instant::now() < deadline {
        for c in [&stalled, &busy] {
            if let Ok(b) = c.deliveries.recv_timeout(Duration::from_millis(10)) {
                for d in b {
                    *seen.entry(d.position).or_insert(0) += 1;
                    c.ack(d.position).unwrap();
                }
            }
        }
    }
    assert_eq!(seen.len(), total, "nothing lost");
    assert!(seen.values().all(|n| *n == 1), "nothing twice");
    assert_eq!(rt.cursor_view().backlog.entries, 0);
    rt.shutdown();
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// `publish_wait` answers with the positions; `ExpireOlderThan` expires by age on the wall
/// clock (publish times are wall-clock ms); `ResetToPublishTime` rewinds to the first entry
/// published at or after a time, so a consumer gets those entries again.
#[test]
fn admin_by_publish_time_and_age() {
    let ledger = InMemoryLedger::new(10_000);
    let cursor = ManagedCursor::new("sub", &ledger, MemoryStore::new());
    let rt = Runtime::start(DispatcherConfig::shared(), cursor, ledger);
    let t0 = now_ms();
    let old: Vec<_> = (0..3)
        .map(|i| EntryMeta::simple(t0 - 600_000 + i, 10))
        .collect();
    let old = rt.publish_wait(old);
    let young = rt.publish_wait((0..4).map(|i| EntryMeta::simple(t0 + i, 10)).collect());
    assert_eq!((old.len(), young.len()), (3, 4));
    assert!(old
        .iter()
        .chain(&young)
        .zip(old.iter().chain(&young).skip(1))
        .all(|(a, b)| a < b));
    let mv = rt
        .admin(dispatcher::AdminOp::ExpireOlderThan { age_ms: 60_000 })
        .expect("the old entries expired");
    assert_eq!(mv.to, old[2]);
    assert_eq!(rt.cursor_view().backlog.entries, 4);
    // Consume and ack the rest, then reset to the publish time of young[2].
    let c = rt.add_consumer(ConsumerSpec::new(1, "c")).unwrap();
    c.flow(100);
    let mut got = Vec::new();
    while got.len() < 4 {
        let b = c.deliveries.recv_timeout(Duration::from_secs(5)).unwrap();
        got.extend(b.iter().map(|d| d.position));
    }
    assert_eq!(got, young);
    for p in &got {
        c.ack(*p).unwrap();
    }
    c.close();
    let mv = rt
        .admin(dispatcher::AdminOp::ResetToPublishTime(t0 + 2))
        .expect("reset moved mark-delete back");
    assert_eq!(mv.to, young[1]);
    let c = rt.add_consumer(ConsumerSpec::new(2, "c2")).unwrap();
    c.flow(100);
    let mut again = Vec::new();
    while again.len() < 2 {
        let b = c.deliveries.recv_timeout(Duration::from_secs(5)).unwrap();
        again.extend(b.iter().map(|d| d.position));
    }
    assert_eq!(again, young[2..]);
    rt.shutdown();
}

/// A Shared runtime over an empty in-memory ledger whose consumers are disconnected after
/// `ms` idle.
fn shared_with_idle_timeout(ms: u64) -> Runtime {
    let ledger = InMemoryLedger::new(10_000);
    let cursor = ManagedCursor::new("sub", &ledger, MemoryStore::new());
    Runtime::start_with(
        DispatcherConfig::shared(),
        cursor,
        ledger,
        dispatcher::RuntimeOptions {
            consumer_idle_timeout: Some(Duration::from_millis(ms)),
            ..Default::default()
        },
    )
}

/// With `consumer_idle_timeout`, a consumer that holds entries and neither acks nor flows is
/// disconnected: its entries go to the other consumer and its channel closes.
#[test]
fn an_idle_consumer_holding_entries_is_disconnected() {
    let rt = shared_with_idle_timeout(100);
    let idle = rt.add_consumer(ConsumerSpec::new(1, "idle")).unwrap();
    idle.flow(5);
    let held = rt.publish_wait((0..5).map(|_| meta("x")).collect());
    let mut got = Vec::new();
    while got.len() < 5 {
        let b = idle
            .deliveries
            .recv_timeout(Duration::from_secs(5))
            .unwrap();
        got.extend(b.iter().map(|d| d.position));
    }
    assert_eq!(got, held);
    let other = rt.add_consumer(ConsumerSpec::new(2, "other")).unwrap();
    other.flow(100);
    let mut again = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while again.len() < 5 && Instant::now() < deadline {
        if let Ok(b) = other.deliveries.recv_timeout(Duration::from_millis(20)) {
            again.extend(b.iter().map(|d| d.position));
        }
    }
    assert_eq!(again, held, "the idle consumer's entries moved");
    for p in &again {
        other.ack(*p).unwrap();
    }
    assert!(matches!(
        idle.deliveries.recv_timeout(Duration::from_secs(1)),
        Err(crossbeam_channel::RecvTimeoutError::Disconnected)
    ));
    let (_, consumers) = rt.stats().unwrap();
    assert_eq!(consumers.len(), 1);
    rt.shutdown();
}

/// The idle check keeps its own deadline while other consumers' events keep the dispatcher
/// thread busy (an event every 20 ms, the check every 100 ms): the idle consumer is still
/// disconnected. Each event used to restart the check's tick, so it never came.
#[test]
fn an_idle_consumer_is_disconnected_while_others_keep_the_thread_busy() {
    let rt = shared_with_idle_timeout(400);
    let idle = rt.add_consumer(ConsumerSpec::new(1, "idle")).unwrap();
    idle.flow(1);
    let held = rt.publish_wait(vec![meta("x")]);
    let first = idle
        .deliveries
        .recv_timeout(Duration::from_secs(5))
        .unwrap();
    assert_eq!(first[0].position, held[0]);
    let busy = rt.add_consumer(ConsumerSpec::new(2, "busy")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(4);
    let mut moved = false;
    while !moved && Instant::now() < deadline {
        busy.flow(1);
        if let Ok(b) = busy.deliveries.recv_timeout(Duration::from_millis(20)) {
            moved = b.iter().any(|d| d.position == held[0]);
        }
    }
    assert!(moved, "the idle consumer's entry moved to the busy one");
    rt.shutdown();
}

/// Key-serial dispatch (`max_unacked_per_key = 1`) on real threads: a key never has two
/// entries out at once; a redelivered entry comes back before the next entry of its key, and
/// another key is not held back by it.
#[test]
fn key_serial_dispatch_sends_one_entry_per_key_at_a_time() {
    let ledger = InMemoryLedger::new(10_000);
    let cursor = ManagedCursor::new("sub", &ledger, MemoryStore::new());
    let mut cfg = DispatcherConfig::key_shared();
    cfg.max_unacked_per_key = 1;
    let rt = Runtime::start(cfg, cursor, ledger);
    let c = rt.add_consumer(ConsumerSpec::new(1, "c")).unwrap();
    let mut metas: Vec<EntryMeta> = (0..5).map(|_| meta("K")).collect();
    metas.push(meta("other"));
    rt.publish(metas);
    c.flow(100);
    let recv = |n: usize| {
        let mut got = Vec::new();
        let until = Instant::now() + Duration::from_secs(5);
        while got.len() < n && Instant::now() < until {
            if let Ok(b) = c.deliveries.recv_timeout(Duration::from_millis(20)) {
                got.extend(b);
            }
        }
        got
    };
    let first = recv(2);
    let keys: Vec<Vec<u8>> = first
        .iter()
        .map(|d| d.meta.ordering_key.clone().unwrap())
        .collect();
    assert_eq!(keys.len(), 2, "K0 and the other key");
    assert!(keys.contains(&b"K".to_vec()) && keys.contains(&b"other".to_vec()));
    // Nothing more of K while K0 is unacked.
    assert!(c
        .deliveries
        .recv_timeout(Duration::from_millis(200))
        .is_err());
    let k0 = first
        .iter()
        .find(|d| d.meta.ordering_key.as_deref() == Some(b"K"))
        .unwrap()
        .position;
    assert!(matches!(
        rt.why_blocked_key(b"K"),
        Some(dispatcher::BlockReason::KeySerial { unacked: 1 })
    ));
    // A stock client's nack (a redelivery request): K0 comes back first, with count 1.
    c.redeliver(vec![k0]);
    let again = recv(1);
    assert_eq!(again[0].position, k0);
    assert_eq!(again[0].redelivery_count, 1);
    // Acks walk the key forward one entry at a time, in order.
    let mut last = k0;
    c.ack(k0).unwrap();
    for _ in 0..4 {
        let next = recv(1);
        assert_eq!(next.len(), 1);
        assert!(next[0].position > last);
        last = next[0].position;
        c.ack(last).unwrap();
    }
    rt.shutdown();
}

/// Delayed delivery on real threads: the runtime's `now` is the wall clock, so an entry whose
/// deliver-at is 300 ms ahead arrives after the plain entries published with it, and not before
/// its time.
#[test]
fn runtime_holds_a_delayed_entry_until_its_wall_clock_time() {
    let ledger = InMemoryLedger::new(10_000);
    let cursor = ManagedCursor::new("sub", &ledger, MemoryStore::new());
    let mut cfg = DispatcherConfig::key_shared();
    cfg.delayed_delivery.tick = 10;
    let rt = Runtime::start(cfg, cursor, ledger);
    let a = rt.add_consumer(ConsumerSpec::new(1, "a")).unwrap();
    a.flow(100);
    let at = now_ms() + 300;
    rt.publish(vec![meta("k").with_deliver_at(at), meta("k"), meta("k")]);
    let mut got = Vec::new();
    while got.len() < 3 {
        let batch = a.deliveries.recv_timeout(Duration::from_secs(5)).unwrap();
        for d in batch {
            got.push((d.position.entry_id, now_ms()));
            a.ack(d.position).unwrap();
        }
    }
    let order: Vec<u64> = got.iter().map(|g| g.0).collect();
    assert_eq!(order, vec![1, 2, 0], "the delayed entry comes last");
    assert!(got[2].1 >= at, "delivered {} ms early", at - got[2].1);
    assert_eq!(rt.stats().unwrap().0.delayed, 0);
    rt.shutdown();
}

/// An idle subscription's event channel keeps one block of 31 events allocated: the event
/// stays at 56 bytes (it was 112, 3.7 KiB a subscription, before its consumer spec was boxed).
#[test]
fn an_event_stays_small() {
    assert!(std::mem::size_of::<dispatcher::Event>() <= 56);
}
