//! Write requests: a SEND's entry is stored, dispatched and receipted only once the shell ran
//! its write, and replies queued after the receipt wait behind it.

use std::time::Duration;

use super::*;

/// A SEND followed by a CLOSE_PRODUCER in one read, its write not yet run.
fn send_then_close(p: &mut Peer, seq: u64) {
    let mut bytes = sends(&[(1, seq)]);
    wire::encode_command(&wire::commands::close_producer(1, 7), &mut bytes);
    p.session.handle_bytes(p.now, &bytes).unwrap();
}

/// Until its write completes, an entry is neither receipted nor dispatched (a consumer of the
/// topic gets nothing), and the CLOSE_PRODUCER's SUCCESS read after it waits behind the
/// receipt; then both go out in order and the entry is delivered. (Before, the session stored
/// and fsynced inside `handle_bytes`, and a consumer could get an entry whose write had not
/// completed.)
#[test]
fn the_receipt_and_every_later_reply_wait_for_the_write() {
    let st = state();
    let mut p = Peer::connected(&st, 1);
    p.call(&wire::commands::producer(T, 1, 1, Some("p")));
    assert_eq!(
        kinds(&p.call(&subscribe("s", 1, 2, SubType::Shared))),
        [Type::Success]
    );
    p.call(&wire::commands::flow(1, 10));
    send_then_close(&mut p, 0);
    let write = p.session.poll_write().expect("a write request");
    assert!(
        p.session.poll_write().is_none(),
        "one write per topic per read"
    );
    assert!(p.take().is_empty(), "the receipt and the SUCCESS wait");
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        p.outbox.1.lock().unwrap().is_empty(),
        "nothing dispatched before the write completed"
    );
    let topic = st.existing_topic(T).unwrap();
    assert_eq!(topic.storage().0.entries, 0, "not in the ledger yet");
    let outcome = write.run(0);
    assert!(outcome.is_ok());
    assert!(
        p.take().is_empty(),
        "nothing goes out before the session hears of it"
    );
    p.session.handle_written(write.id, &outcome);
    let replies: Vec<BaseCommand> = p.take().into_iter().map(|f| f.command).collect();
    assert_eq!(kinds(&replies), [Type::SendReceipt, Type::Success]);
    let receipt = replies[0].send_receipt.as_ref().unwrap();
    let at = receipt.message_id.as_ref().unwrap();
    assert_eq!(
        p.receive(1, 1),
        [(Position::new(at.ledger_id, at.entry_id), 0)]
    );
    p.session.close();
}

/// Writes of two topics complete in either order; each receipt waits for its own, and the
/// receipts still reach the client in the order of the SENDs.
#[test]
fn receipts_leave_in_send_order_whichever_write_completes_first() {
    let st = state();
    let mut p = Peer::connected(&st, 1);
    let other = "persistent://public/default/other";
    p.call(&wire::commands::producer(T, 1, 1, None));
    p.call(&wire::commands::producer(other, 2, 2, None));
    let bytes = sends(&[(1, 0), (2, 0), (1, 1)]);
    p.session.handle_bytes(p.now, &bytes).unwrap();
    let first = p.session.poll_write().unwrap();
    let second = p.session.poll_write().unwrap();
    assert_eq!(second.topic(), other);
    let done = second.run(0);
    p.session.handle_written(second.id, &done);
    assert!(
        p.take().is_empty(),
        "the other topic's receipt waits behind the first SEND's"
    );
    let done = first.run(0);
    p.session.handle_written(first.id, &done);
    let order: Vec<(u64, u64)> = p
        .take()
        .iter()
        .map(|f| {
            let r = f.command.send_receipt.as_ref().unwrap();
            (r.producer_id, r.sequence_id)
        })
        .collect();
    assert_eq!(order, [(1, 0), (2, 0), (1, 1)]);
    p.session.close();
}

/// With deduplication, a producer that resends (on a new connection) while its first write is
/// still in flight gets SEND_ERROR, as Pulsar answers "cannot determine whether the message is
/// a duplicate at this time"; once the write completed, the resend is a duplicate (`-1:-1`).
/// The entry is stored once.
#[test]
fn a_resend_while_its_write_is_in_flight_is_refused_then_a_duplicate() {
    let st = Arc::new(BrokerState::new(
        deduplicating(),
        "pulsar://127.0.0.1:6650".into(),
        Arc::new(crate::shell::ShellRuntimes::threads()),
    ));
    let mut first = Peer::connected(&st, 1);
    first.call(&wire::commands::producer(T, 1, 1, Some("p")));
    send_then_close(&mut first, 0);
    let write = first.session.poll_write().unwrap();
    let mut again = Peer::connected(&st, 2);
    again.call(&wire::commands::producer(T, 1, 1, Some("p")));
    let bytes = sends(&[(1, 0)]);
    let refused = again.feed(&bytes);
    assert_eq!(
        error_of(&refused[0].command),
        Some(ServerError::PersistenceError)
    );
    let outcome = write.run(0);
    first.session.handle_written(write.id, &outcome);
    let dup = again.feed(&bytes);
    let id = dup[0]
        .command
        .send_receipt
        .as_ref()
        .unwrap()
        .message_id
        .clone();
    assert_eq!(id.unwrap().ledger_id, u64::MAX, "receipted as a duplicate");
    assert_eq!(st.existing_topic(T).unwrap().storage().0.entries, 1);
    first.session.close();
    again.session.close();
}

/// A read of many SENDs: the receipts leave in one buffer (one hand-over to the writer
/// thread), and the entries reach the subscription's consumer (its dispatcher is told once,
/// after the read).
#[test]
fn a_read_of_sends_is_answered_in_one_buffer_and_dispatched() {
    let st = state();
    let mut p = Peer::connected(&st, 1);
    p.call(&wire::commands::producer(T, 1, 1, None));
    let r = p.call(&subscribe("s", 1, 2, SubType::Shared));
    assert_eq!(kinds(&r), [Type::Success]);
    p.call(&wire::commands::flow(1, 1000));
    let all: Vec<(u64, u64)> = (0..100).map(|i| (1, i)).collect();
    let bytes = sends(&all);
    p.session.handle_bytes(p.now, &bytes).unwrap();
    p.run_writes();
    let buffers: Vec<Vec<u8>> = std::iter::from_fn(|| p.session.poll_transmit()).collect();
    assert_eq!(buffers.len(), 1, "one buffer");
    let receipts = decode_all(&buffers[0]);
    assert_eq!(receipts.len(), 100);
    assert!(receipts.iter().all(|f| f.command.send_receipt.is_some()));
    assert_eq!(p.receive(1, 100).len(), 100);
    p.session.close();
}

/// A producer opened again keeps the name the broker gave it, as Pulsar does: the client sends
/// that name back (not flagged as its application's) and its messages carry it. (Before, the
/// broker gave it a new name: after a failed write its resent messages, still carrying the old
/// name, were refused as the failed producer's, and deduplication lost track of it.)
#[test]
fn a_reopened_producer_keeps_the_name_it_was_given() {
    let st = state();
    let mut p = Peer::connected(&st, 1);
    let first = p.call(&wire::commands::producer(T, 1, 1, None));
    let given = first[0]
        .producer_success
        .as_ref()
        .unwrap()
        .producer_name
        .clone();
    p.call(&wire::commands::close_producer(1, 2));
    let mut again = wire::commands::producer(T, 1, 3, None);
    if let Some(cmd) = again.producer.as_mut() {
        cmd.producer_name = Some(given.clone());
    }
    let reply = p.call(&again);
    let name = &reply[0].producer_success.as_ref().unwrap().producer_name;
    assert_eq!(name, &given);
    p.session.close();
}
