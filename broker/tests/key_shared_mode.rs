//! Key_Shared mode from SUBSCRIBE's KeySharedMeta: the first consumer of an empty
//! subscription sets it; while consumers are connected another mode is refused.

mod common;

use std::time::Duration;

use common::{produce, start_broker, Raw};
use wire::proto::base_command::Type;
use wire::proto::command_subscribe::{InitialPosition, SubType};
use wire::proto::{IntRange, KeySharedMeta, KeySharedMode};

const TOPIC: &str = "persistent://public/default/ks-mode";

fn meta(mode: KeySharedMode, ranges: Vec<IntRange>) -> KeySharedMeta {
    KeySharedMeta {
        key_shared_mode: mode as i32,
        hash_ranges: ranges,
        allow_out_of_order_delivery: Some(false),
    }
}

fn subscribe(c: &mut Raw, id: u64, m: KeySharedMeta) -> Type {
    c.send(&wire::commands::subscribe(
        TOPIC,
        "sub",
        id,
        id,
        SubType::KeyShared,
        Some(m),
        InitialPosition::Earliest,
    ));
    loop {
        match c.next(Duration::from_secs(5)) {
            Ok(Some(f)) if matches!(f.command.r#type(), Type::Success | Type::Error) => {
                return f.command.r#type()
            }
            Ok(Some(_)) => {}
            other => panic!("no answer to SUBSCRIBE: {other:?}"),
        }
    }
}

#[test]
fn mode_follows_the_first_consumer_and_a_mismatch_is_refused() {
    let b = start_broker(&[]);
    let mut c1 = Raw::connected(&b);
    let all = vec![IntRange {
        start: 0,
        end: 65_535,
    }];
    assert_eq!(
        subscribe(&mut c1, 1, meta(KeySharedMode::Sticky, all)),
        Type::Success
    );
    // Connected STICKY consumer: an AUTO_SPLIT consumer is refused.
    let mut c2 = Raw::connected(&b);
    assert_eq!(
        subscribe(&mut c2, 2, meta(KeySharedMode::AutoSplit, vec![])),
        Type::Error
    );
    // The subscription empties; the next consumer's AUTO_SPLIT is adopted (a STICKY selector
    // would refuse a consumer without ranges).
    c1.send(&wire::commands::close_consumer(1, 10));
    c1.expect(Type::Success);
    let mut c3 = Raw::connected(&b);
    assert_eq!(
        subscribe(&mut c3, 3, meta(KeySharedMode::AutoSplit, vec![])),
        Type::Success
    );
    c3.send(&wire::commands::flow(3, 100));
    produce(&b, TOPIC, 5, 2);
    let mut got = 0;
    while got < 5 {
        match c3.next(Duration::from_secs(5)) {
            Ok(Some(f)) if f.command.r#type() == Type::Message => got += 1,
            Ok(Some(_)) => {}
            other => panic!("no message: {other:?}"),
        }
    }
}
