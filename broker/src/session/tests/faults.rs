//! What a session does when its topic's store refuses: a payload that cannot be read stays
//! pending and comes later; a failed write closes its producers, not the connection, and
//! its sequence ids do not count.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::storage::StoreFaults;
use crate::topic::FaultyBackend;

/// A broker state whose topics fail what `faults` says.
fn faulty_state(cfg: BrokerConfig) -> (Arc<BrokerState>, Arc<StoreFaults>) {
    faulty_state_on(cfg, Arc::new(crate::shell::ShellRuntimes::threads()))
}

/// [`faulty_state`] whose dispatchers and reads `runtimes` runs.
fn faulty_state_on(
    cfg: BrokerConfig,
    runtimes: Arc<dyn crate::topic::Runtimes>,
) -> (Arc<BrokerState>, Arc<StoreFaults>) {
    let faults = Arc::new(StoreFaults::default());
    let backend = FaultyBackend {
        inner: Box::new(crate::topic::MemoryBackend),
        faults: faults.clone(),
    };
    let url = "pulsar://127.0.0.1:6650".into();
    let st = BrokerState::new(cfg, url, runtimes).with_backend(Box::new(backend));
    (Arc::new(st), faults)
}

/// A producer (id 1) and a Shared consumer (id 1, subscription `s`) with 100 permits.
fn producer_and_consumer(p: &mut Peer) {
    p.call(&wire::commands::producer(T, 1, 1, None));
    assert_eq!(
        kinds(&p.call(&subscribe("s", 1, 2, SubType::Shared))),
        [Type::Success]
    );
    p.call(&wire::commands::flow(1, 100));
}

/// Subscription `s`'s stats as JSON.
fn sub_stats(st: &BrokerState) -> serde_json::Value {
    let topic = st.existing_topic(T).unwrap();
    let stats = serde_json::to_value(crate::stats::topic_stats(&topic)).unwrap();
    stats["subscriptions"]["s"].clone()
}

/// Entries dispatched while their payloads cannot be read are neither sent nor dropped: they
/// stay pending for the subscription (counted in `readFailures`), and reach the consumer once
/// reads work again, in order and not counted as redeliveries. (Before, the delivery skipped
/// them: the consumer held them as unacked forever and never got them.)
#[test]
fn a_payload_that_cannot_be_read_stays_pending_and_comes_later() {
    let (st, faults) = faulty_state(BrokerConfig::default());
    let mut p = Peer::connected(&st, 1);
    producer_and_consumer(&mut p);
    faults.fail_reads(true);
    let published: Vec<Position> = (0..3).map(|i| p.publish(1, i, meta(i))).collect();
    let deadline = Instant::now() + Duration::from_secs(5);
    while sub_stats(&st)["readFailures"].as_u64() < Some(2) {
        assert!(
            Instant::now() < deadline,
            "no failed read within 5 s: {}",
            sub_stats(&st)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        p.outbox.1.lock().unwrap().is_empty(),
        "nothing sent while reads fail"
    );
    faults.fail_reads(false);
    let got = p.receive(1, 3);
    let want: Vec<(Position, u32)> = published.iter().map(|&pos| (pos, 0)).collect();
    assert_eq!(got, want);
    let stats = sub_stats(&st);
    assert_eq!(stats["msgOutCounter"], 3, "{stats}");
    assert_eq!(stats["unackedMessages"], 3, "{stats}");
    p.session.close();
}

/// Dispatchers on threads, and read requests held in a list until the test runs them.
#[derive(Debug)]
struct HeldReads {
    runtimes: crate::shell::ShellRuntimes,
    held: std::sync::Mutex<Vec<crate::topic::ReadRequest>>,
}

impl crate::topic::Runtimes for HeldReads {
    fn start(
        &self,
        cfg: dispatcher::DispatcherConfig,
        cursor: cursor::ManagedCursor<crate::topic::SubStore>,
        ledger: cursor::SharedLedger,
    ) -> dispatcher::Runtime {
        self.runtimes.start(cfg, cursor, ledger)
    }

    fn read(&self, request: crate::topic::ReadRequest) {
        self.held.lock().unwrap().push(request);
    }
}

/// An entry that is not in memory is read by a request that runs elsewhere, never by the
/// dispatch worker: nothing is sent while the request waits, one request is asked however
/// often the dispatcher looks, and the entries come once it ran (its completion wakes the
/// dispatcher).
#[test]
fn an_entry_not_in_memory_is_read_by_a_request_then_delivered() {
    let held = Arc::new(HeldReads {
        runtimes: crate::shell::ShellRuntimes::threads(),
        held: Default::default(),
    });
    let (st, faults) = faulty_state_on(BrokerConfig::default(), held.clone());
    let mut p = Peer::connected(&st, 1);
    producer_and_consumer(&mut p);
    // While reads fail, the store has nothing in memory: every entry is a miss.
    faults.fail_reads(true);
    let published: Vec<Position> = (0..3).map(|i| p.publish(1, i, meta(i))).collect();
    let deadline = Instant::now() + Duration::from_secs(5);
    while held.held.lock().unwrap().is_empty() {
        assert!(Instant::now() < deadline, "no read request within 5 s");
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(50));
    let requests = std::mem::take(&mut *held.held.lock().unwrap());
    assert_eq!(requests.len(), 1, "one request in flight");
    assert_eq!(requests[0].positions.first(), Some(&published[0]));
    assert!(
        p.outbox.1.lock().unwrap().is_empty(),
        "nothing sent before the read"
    );
    faults.fail_reads(false);
    requests
        .into_iter()
        .for_each(crate::topic::ReadRequest::run);
    let got = p.receive(1, 3);
    let want: Vec<(Position, u32)> = published.iter().map(|&pos| (pos, 0)).collect();
    assert_eq!(got, want);
    assert_eq!(sub_stats(&st)["readFailures"], 0);
    p.session.close();
}

/// A read's completion carries the payloads it read, and the delivery sends them without asking
/// the store again: a cold store that keeps only the last 2 entries it read in memory, and
/// deliveries of more. (Before, the completion only said the read was done; the delivery found
/// the first ones evicted again, asked for them again, and so on: nothing was ever sent.)
#[test]
fn a_read_larger_than_the_cache_is_delivered_from_its_completion() {
    let (st, faults) = faulty_state(BrokerConfig::default());
    let mut p = Peer::connected(&st, 1);
    p.call(&wire::commands::producer(T, 1, 1, None));
    assert_eq!(
        kinds(&p.call(&subscribe("s", 1, 2, SubType::Exclusive))),
        [Type::Success]
    );
    let published: Vec<Position> = (0..100).map(|i| p.publish(1, i, meta(i))).collect();
    faults.cold_reads(Some(2));
    p.call(&wire::commands::flow(1, 100));
    let got = p.receive(1, 100);
    let want: Vec<(Position, u32)> = published.iter().map(|&pos| (pos, 0)).collect();
    assert_eq!(got, want);
    assert_eq!(sub_stats(&st)["readFailures"], 0);
    p.session.close();
}

/// With deduplication, a SEND whose append failed does not count its sequence id: once the
/// producer is open again, its resend is stored and receipted with its position. (Before, the
/// id was recorded ahead of the append, and the retry was receipted `-1:-1` as a duplicate of
/// a message that was never stored.)
#[test]
fn a_failed_append_does_not_count_its_sequence_id() {
    let (st, faults) = faulty_state(deduplicating());
    let mut p = Peer::connected(&st, 1);
    p.call(&wire::commands::producer(T, 1, 1, Some("p")));
    faults.fail_writes(true);
    let closed = p.feed(&sends(&[(1, 0)]));
    assert_eq!(kinds_of(&closed), [Type::CloseProducer]);
    faults.fail_writes(false);
    reopen_after_refusal(&mut p, 2);
    let stored = p.publish(1, 0, meta(0));
    assert_ne!(stored.ledger_id, u64::MAX, "receipted as a duplicate");
    assert_eq!(
        kinds(&p.call(&subscribe("s", 1, 3, SubType::Shared))),
        [Type::Success]
    );
    p.call(&wire::commands::flow(1, 10));
    assert_eq!(p.receive(1, 1), [(stored, 0)]);
    p.session.close();
}

/// How long the first refusal lasts (a second).
const REFUSED_MS: u64 = 1_000;

/// Producer 1 (named `p`) opened again with request `request_id` once the refusal after a
/// failed write is over.
fn reopen_after_refusal(p: &mut Peer, request_id: u64) {
    p.now.wall_ms += REFUSED_MS;
    let reply = p.call(&wire::commands::producer(T, 1, request_id, Some("p")));
    assert_eq!(kinds(&reply), [Type::ProducerSuccess]);
}

fn kinds_of(frames: &[wire::Frame]) -> Vec<Type> {
    frames.iter().map(|f| f.command.r#type()).collect()
}

/// The topic's stats as JSON.
fn topic_stats(st: &BrokerState) -> serde_json::Value {
    let topic = st.existing_topic(T).unwrap();
    serde_json::to_value(crate::stats::topic_stats(&topic)).unwrap()
}

/// A write that fails closes its SENDs' producer (CLOSE_PRODUCER, no SEND_ERROR: every client
/// closes its whole connection on one), keeps the connection and its consumer, which still
/// gets what was receipted; SENDs still on the way are dropped (the client resends them); a
/// reopen is refused with `ProducerBlockedQuotaExceededException` for a second, which the
/// clients back off from; stats and the health check say so; then the producer opens, and the
/// topic has moved on to a new ledger: no position of a failed entry is used again, and the
/// consumer gets exactly the receipted entries. (Before, the SENDs got SEND_ERROR
/// `PersistenceError`, and the clients closed the connection with the consumer on it and
/// reconnected at once, in a loop.)
#[test]
fn a_failed_write_closes_its_producer_not_the_connection() {
    let (st, faults) = faulty_state(BrokerConfig::default());
    let mut p = Peer::connected(&st, 1);
    p.call(&wire::commands::producer(T, 1, 1, Some("p")));
    assert_eq!(
        kinds(&p.call(&subscribe("s", 1, 2, SubType::Shared))),
        [Type::Success]
    );
    p.call(&wire::commands::flow(1, 10));
    let before = p.publish(1, 0, meta(0));
    faults.fail_writes(true);
    let closed = p.feed(&sends(&[(1, 1), (1, 2)]));
    assert_eq!(
        kinds_of(&closed),
        [Type::CloseProducer],
        "one close, no error"
    );
    assert!(p.closed.is_none(), "the connection stays");
    assert!(
        p.feed(&sends(&[(1, 3)])).is_empty(),
        "a SEND on the way: dropped"
    );
    assert_eq!(
        p.receive(1, 1),
        [(before, 0)],
        "the consumer still receives"
    );
    let refused = p.call(&wire::commands::producer(T, 1, 3, Some("p")));
    assert_eq!(
        error_of(&refused[0]),
        Some(ServerError::ProducerBlockedQuotaExceededException)
    );
    let stats = topic_stats(&st);
    assert_eq!(stats["storageWriteFailures"], 1, "{stats}");
    assert_eq!(stats["storageWriteFailuresInARow"], 1, "{stats}");
    let health = |st: &BrokerState, now| {
        let req = crate::admin::Request::new("GET", "/admin/v2/brokers/health", Vec::new(), now);
        crate::admin::route(&req, st).status
    };
    assert_eq!(health(&st, p.now.wall_ms), 500);
    faults.fail_writes(false);
    reopen_after_refusal(&mut p, 4);
    let after = p.publish(1, 1, meta(1));
    assert_eq!(
        after,
        Position::new(before.ledger_id + 1, 0),
        "a new ledger after the failed one"
    );
    assert_eq!(topic_stats(&st)["storageWriteFailuresInARow"], 0);
    assert_eq!(health(&st, p.now.wall_ms), 200);
    assert_eq!(p.receive(1, 1), [(after, 0)]);
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        p.messages.is_empty() && p.outbox.1.lock().unwrap().is_empty(),
        "nothing else delivered"
    );
    p.session.close();
}

/// A producer's SEND that arrives after its earlier entry failed, but before the session has
/// heard of that write's failure, is not stored: stored, it would come ahead of the failed
/// entry, which the client sends again once the producer is open. It is dropped, the failed
/// write's completion closes the producer, and the resent entries are stored in send order.
/// (The simulator found this: the first cut stored it.)
#[test]
fn a_send_after_its_producers_failed_one_is_not_stored_ahead_of_it() {
    let (st, faults) = faulty_state(BrokerConfig::default());
    let mut p = Peer::connected(&st, 1);
    p.call(&wire::commands::producer(T, 1, 1, Some("p")));
    p.session.handle_bytes(p.now, &sends(&[(1, 0)])).unwrap();
    let first = p.session.poll_write().expect("a write");
    faults.fail_writes(true);
    let failed = first.run(p.now.wall_ms);
    faults.fail_writes(false);
    assert!(failed.is_err());
    p.session.handle_bytes(p.now, &sends(&[(1, 1)])).unwrap();
    assert!(
        p.session.poll_write().is_none(),
        "the later SEND is not queued"
    );
    p.session.handle_written(first.id, &failed);
    assert_eq!(kinds_of(&p.take()), [Type::CloseProducer]);
    reopen_after_refusal(&mut p, 2);
    let resent = [p.publish(1, 0, meta(0)), p.publish(1, 1, meta(1))];
    assert!(resent[0] < resent[1]);
    let topic = st.existing_topic(T).unwrap();
    assert_eq!(
        topic.storage().0.entries,
        2,
        "only the resent entries are stored"
    );
    p.session.close();
}
