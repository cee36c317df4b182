//! Terminated topics, as Pulsar's `terminate`: the admin call answers the last message id; the
//! producers are closed and refused from then on (`TopicTerminatedError`); a consumer whose
//! subscription acknowledged everything hears REACHED_END_OF_TOPIC; the termination survives a
//! restart with `--data-dir`.

mod common;

use std::time::Duration;

use common::{http, message_positions, metadata, open_producer, produce, start_broker, Raw};
use wire::proto::base_command::Type;
use wire::proto::command_subscribe::{InitialPosition, SubType};
use wire::proto::ServerError;

const TOPIC: &str = "persistent://public/default/terminated";
const PATH: &str = "/admin/v2/persistent/public/default/terminated";

fn consumer(b: &broker::Broker, sub: &str) -> Raw {
    let mut c = Raw::connected(b);
    c.send(&wire::commands::subscribe(
        TOPIC,
        sub,
        1,
        1,
        SubType::Shared,
        None,
        InitialPosition::Earliest,
    ));
    c.expect(Type::Success);
    c.send(&wire::commands::flow(1, 100));
    c
}

/// Whether REACHED_END_OF_TOPIC for consumer 1 arrives within `within`.
fn reached_end(c: &mut Raw, within: Duration) -> bool {
    let until = std::time::Instant::now() + within;
    while std::time::Instant::now() < until {
        if let Ok(Some(f)) = c.next(Duration::from_millis(50)) {
            if f.command.r#type() == Type::ReachedEndOfTopic {
                return f
                    .command
                    .reached_end_of_topic
                    .is_some_and(|r| r.consumer_id == 1);
            }
        }
    }
    false
}

fn refused_producer(b: &broker::Broker) -> ServerError {
    let mut p = Raw::connected(b);
    p.send(&wire::commands::producer(TOPIC, 1, 1, None));
    p.expect(Type::Error).command.error.unwrap().error()
}

#[test]
fn a_terminated_topic_refuses_producers_and_tells_consumers_at_the_end() {
    let d = std::env::temp_dir().join(format!("broker-terminate-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    let dir = d.to_string_lossy().into_owned();
    let b = start_broker(&["--data-dir", &dir]);
    let mut c = consumer(&b, "a");
    let mut p = Raw::connected(&b);
    let name = open_producer(&mut p, TOPIC);
    produce(&b, TOPIC, 3, 1);
    let got = message_positions(&mut c, 3, Duration::from_secs(5));
    assert_eq!(got.len(), 3);

    let (status, body) = http(&b, "POST", &format!("{PATH}/terminate"), "");
    assert_eq!(status, 200, "{body}");
    let last: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(last["ledgerId"], got[2].ledger_id);
    assert_eq!(last["entryId"], got[2].entry_id);

    // The open producer is closed; a SEND that still comes is refused; a new one is refused.
    p.expect(Type::CloseProducer);
    p.send_message(
        &wire::commands::send(1, 9, 1),
        &metadata(&name, 9, None),
        b"late",
    );
    let e = p.expect(Type::SendError).command.send_error.unwrap();
    assert_eq!(e.error(), ServerError::TopicTerminatedError);
    assert_eq!(refused_producer(&b), ServerError::TopicTerminatedError);

    // The end is reached once everything is acknowledged, not before.
    assert!(
        !reached_end(&mut c, Duration::from_millis(400)),
        "told before the acks"
    );
    for pos in &got {
        c.send(&wire::commands::ack(
            1,
            wire::convert::message_id(*pos),
            None,
        ));
    }
    assert!(
        reached_end(&mut c, Duration::from_secs(3)),
        "not told after the acks"
    );
    // A new subscription reads the backlog, then hears the end after its acks.
    let mut late = consumer(&b, "late");
    let again = message_positions(&mut late, 3, Duration::from_secs(5));
    assert_eq!(again, got);
    for pos in &again {
        late.send(&wire::commands::ack(
            1,
            wire::convert::message_id(*pos),
            None,
        ));
    }
    assert!(reached_end(&mut late, Duration::from_secs(3)));
    b.shutdown(Duration::from_secs(5));

    // Terminated for good: after a restart a producer is still refused.
    let b = start_broker(&["--data-dir", &dir]);
    assert_eq!(refused_producer(&b), ServerError::TopicTerminatedError);
    b.shutdown(Duration::from_secs(5));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_partitioned_topic_is_terminated_partition_by_partition() {
    let b = start_broker(&[]);
    let path = "/admin/v2/persistent/public/default/parted";
    assert_eq!(http(&b, "PUT", &format!("{path}/partitions"), "2").0, 204);
    let (status, body) = http(&b, "POST", &format!("{path}/terminate"), "");
    assert_eq!(status, 405, "{body}");
    let (status, body) = http(&b, "POST", &format!("{path}/terminate/partitions"), "");
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v.as_object().map(|m| m.len()), Some(2), "{body}");
    let mut p = Raw::connected(&b);
    p.send(&wire::commands::producer(
        "persistent://public/default/parted-partition-1",
        1,
        1,
        None,
    ));
    let e = p.expect(Type::Error).command.error.unwrap();
    assert_eq!(e.error(), ServerError::TopicTerminatedError);
    b.shutdown(Duration::from_secs(5));
}
