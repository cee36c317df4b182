//! Producer access modes over the wire, as Pulsar answers them: Exclusive refuses others
//! (`ProducerFenced` for exclusive modes, `ProducerBusy` for Shared), WaitForExclusive is
//! queued (PRODUCER_SUCCESS with `producer_ready = false`, then a second one when ready),
//! ExclusiveWithFencing closes the others and an old epoch is fenced for good.

mod common;

use common::{metadata, start_broker, Raw};
use wire::proto::base_command::Type;
use wire::proto::{CommandProducerSuccess, ProducerAccessMode as Mode, ServerError};

const TOPIC: &str = "persistent://public/default/access";

fn producer(
    pid: u64,
    rid: u64,
    name: &str,
    mode: Mode,
    epoch: Option<u64>,
) -> wire::proto::BaseCommand {
    let mut cmd = wire::commands::producer(TOPIC, pid, rid, Some(name));
    if let Some(p) = cmd.producer.as_mut() {
        p.producer_access_mode = Some(mode as i32);
        p.topic_epoch = epoch;
    }
    cmd
}

fn success(c: &mut Raw) -> CommandProducerSuccess {
    *c.expect(Type::ProducerSuccess)
        .command
        .producer_success
        .unwrap()
}

fn refusal(c: &mut Raw) -> (ServerError, String) {
    let e = c.expect(Type::Error).command.error.unwrap();
    (e.error(), e.message)
}

/// SEND of one message by producer 1; the reply's type.
fn send_one(c: &mut Raw, name: &str) -> Type {
    c.send_message(
        &wire::commands::send(1, 0, 1),
        &metadata(name, 0, None),
        b"x",
    );
    let f = c.next(std::time::Duration::from_secs(5)).unwrap().unwrap();
    f.command.r#type()
}

#[test]
fn exclusive_refuses_the_others_until_it_closes() {
    let b = start_broker(&[]);
    let mut a = Raw::connected(&b);
    let mut o = Raw::connected(&b);
    a.send(&producer(1, 1, "a", Mode::Exclusive, None));
    assert_eq!(success(&mut a).topic_epoch, Some(0));
    o.send(&producer(1, 2, "shared", Mode::Shared, None));
    assert_eq!(refusal(&mut o).0, ServerError::ProducerBusy);
    o.send(&producer(1, 3, "excl", Mode::Exclusive, None));
    let (code, message) = refusal(&mut o);
    assert_eq!(code, ServerError::ProducerFenced, "{message}");
    assert!(
        message.contains("existing exclusive producer: a"),
        "{message}"
    );
    a.send(&wire::commands::close_producer(1, 4));
    a.expect(Type::Success);
    o.send(&producer(1, 5, "excl", Mode::Exclusive, None));
    assert_eq!(success(&mut o).topic_epoch, Some(1), "the epoch moves on");
    assert_eq!(send_one(&mut o, "excl"), Type::SendReceipt);
    b.shutdown(std::time::Duration::from_secs(5));
}

#[test]
fn wait_for_exclusive_is_queued_then_made_ready() {
    let b = start_broker(&[]);
    let mut a = Raw::connected(&b);
    let mut w = Raw::connected(&b);
    a.send(&producer(1, 1, "a", Mode::Shared, None));
    success(&mut a);
    w.send(&producer(1, 7, "w", Mode::WaitForExclusive, None));
    let queued = success(&mut w);
    assert_eq!(queued.producer_ready, Some(false));
    assert_eq!(
        send_one(&mut w, "w"),
        Type::SendError,
        "a queued producer may not send"
    );
    a.send(&wire::commands::close_producer(1, 2));
    a.expect(Type::Success);
    let ready = success(&mut w);
    assert_eq!((ready.request_id, ready.producer_ready), (7, Some(true)));
    assert_eq!(ready.topic_epoch, Some(0));
    assert_eq!(send_one(&mut w, "w"), Type::SendReceipt);
    b.shutdown(std::time::Duration::from_secs(5));
}

#[test]
fn fencing_closes_the_exclusive_producer_and_its_old_epoch_is_refused() {
    let b = start_broker(&[]);
    let mut a = Raw::connected(&b);
    let mut f = Raw::connected(&b);
    a.send(&producer(1, 1, "a", Mode::Exclusive, None));
    let epoch = success(&mut a).topic_epoch;
    f.send(&producer(1, 2, "f", Mode::ExclusiveWithFencing, None));
    assert_eq!(success(&mut f).topic_epoch, Some(1));
    a.expect(Type::CloseProducer);
    assert_eq!(
        send_one(&mut a, "a"),
        Type::SendError,
        "a fenced producer may not send"
    );
    // The client reconnects with the epoch it had: another producer came in between.
    a.send(&producer(1, 3, "a", Mode::Exclusive, epoch));
    let (code, message) = refusal(&mut a);
    assert_eq!(code, ServerError::ProducerFenced, "{message}");
    assert_eq!(send_one(&mut f, "f"), Type::SendReceipt);
    b.shutdown(std::time::Duration::from_secs(5));
}
