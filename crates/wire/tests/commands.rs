//! Every constructor in `wire::commands` round-trips through the codec with its type and
//! sub-message set.

mod common;

use wire::commands::{self, negotiate_protocol_version, PROTOCOL_VERSION};
use wire::convert::message_id;
use wire::proto::base_command::Type;
use wire::proto::{
    command_ack, command_lookup_topic_response, command_partitioned_topic_metadata_response,
    command_subscribe, BaseCommand, IntRange, KeySharedMeta, KeySharedMode, MessageIdData,
    ServerError,
};
use wire::{decode_frame, encode_command};

fn id(l: u64, e: u64) -> MessageIdData {
    message_id(cursor::Position::new(l, e))
}

/// Encodes, decodes, checks equality and the type, and returns the decoded command.
fn rt(cmd: BaseCommand, t: Type) -> BaseCommand {
    let mut out = Vec::new();
    encode_command(&cmd, &mut out);
    let f = decode_frame(&out).unwrap_or_else(|e| panic!("{t:?}: {e}"));
    assert!(f.payload.is_none());
    assert_eq!(f.command, cmd, "{t:?}");
    assert_eq!(f.command.r#type(), t);
    f.command
}

#[test]
fn protocol_version_negotiation() {
    assert_eq!(PROTOCOL_VERSION, 21);
    assert_eq!(negotiate_protocol_version(20), 20);
    assert_eq!(negotiate_protocol_version(12), 12);
    assert_eq!(negotiate_protocol_version(30), 21);
}

#[test]
fn broker_side_constructors() {
    let c = rt(commands::connected("kod-0.1", 20, 5 << 20), Type::Connected);
    let c = c.connected.unwrap();
    assert_eq!(
        (
            c.server_version.as_str(),
            c.protocol_version,
            c.max_message_size
        ),
        ("kod-0.1", Some(20), Some(5 << 20))
    );

    assert!(rt(commands::ping(), Type::Ping).ping.is_some());
    assert!(rt(commands::pong(), Type::Pong).pong.is_some());

    let r = rt(
        commands::partitioned_metadata_response(1, 0),
        Type::PartitionedMetadataResponse,
    )
    .partition_metadata_response
    .unwrap();
    assert_eq!((r.request_id, r.partitions), (1, Some(0)));
    assert_eq!(
        r.response(),
        command_partitioned_topic_metadata_response::LookupType::Success
    );
    let r = rt(
        commands::partitioned_metadata_failed(1, ServerError::TopicNotFound, "no"),
        Type::PartitionedMetadataResponse,
    )
    .partition_metadata_response
    .unwrap();
    assert_eq!(
        (r.response(), r.error(), r.message.as_deref()),
        (
            command_partitioned_topic_metadata_response::LookupType::Failed,
            ServerError::TopicNotFound,
            Some("no")
        )
    );

    let l = rt(
        commands::lookup_response(2, "pulsar://127.0.0.1:6650", true),
        Type::LookupResponse,
    )
    .lookup_topic_response
    .unwrap();
    assert_eq!(
        (
            l.request_id,
            l.broker_service_url.as_deref(),
            l.authoritative
        ),
        (2, Some("pulsar://127.0.0.1:6650"), Some(true))
    );
    assert_eq!(
        l.response(),
        command_lookup_topic_response::LookupType::Connect
    );
    let l = rt(
        commands::lookup_failed(2, ServerError::ServiceNotReady, "x"),
        Type::LookupResponse,
    )
    .lookup_topic_response
    .unwrap();
    assert_eq!(
        (l.response(), l.error()),
        (
            command_lookup_topic_response::LookupType::Failed,
            ServerError::ServiceNotReady
        )
    );

    let p = rt(
        commands::producer_success(0, "fake-1-0", -1, Vec::new()),
        Type::ProducerSuccess,
    )
    .producer_success
    .unwrap();
    assert_eq!(
        (
            p.request_id,
            p.producer_name.as_str(),
            p.last_sequence_id,
            p.producer_ready,
            p.schema_version.as_deref(),
        ),
        (0, "fake-1-0", Some(-1), Some(true), Some(&[][..]))
    );
    let p = rt(
        commands::producer_success(0, "n", 41, vec![1, 2]),
        Type::ProducerSuccess,
    )
    .producer_success
    .unwrap();
    assert_eq!(p.schema_version.as_deref(), Some(&[1u8, 2][..]));

    let s = rt(
        commands::send_receipt(0, 7, Some(9), id(1, 3)),
        Type::SendReceipt,
    )
    .send_receipt
    .unwrap();
    assert_eq!(
        (
            s.producer_id,
            s.sequence_id,
            s.highest_sequence_id,
            s.message_id
        ),
        (0, 7, Some(9), Some(id(1, 3)))
    );
    let s = rt(
        commands::send_error(0, 7, ServerError::ChecksumError, "crc"),
        Type::SendError,
    )
    .send_error
    .unwrap();
    assert_eq!(
        (s.error(), s.message.as_str()),
        (ServerError::ChecksumError, "crc")
    );

    assert_eq!(
        rt(commands::success(5), Type::Success)
            .success
            .unwrap()
            .request_id,
        5
    );
    let e = rt(
        commands::error(5, ServerError::ConsumerBusy, "busy"),
        Type::Error,
    )
    .error
    .unwrap();
    assert_eq!(
        (e.request_id, e.error(), e.message.as_str()),
        (5, ServerError::ConsumerBusy, "busy")
    );

    let m = rt(commands::message(3, id(1, 0), 0, None), Type::Message)
        .message
        .unwrap();
    assert_eq!(
        (m.consumer_id, m.redelivery_count, m.ack_set.len()),
        (3, None, 0)
    );
    assert_eq!(m.message_id, id(1, 0));
    let m = rt(
        commands::message(3, id(1, 0), 1, Some(vec![26])),
        Type::Message,
    )
    .message
    .unwrap();
    assert_eq!((m.redelivery_count, m.ack_set), (Some(1), vec![26]));

    let a = rt(commands::ack_response(3, 8, None), Type::AckResponse)
        .ack_response
        .unwrap();
    assert_eq!((a.consumer_id, a.request_id, a.error), (3, Some(8), None));
    let a = rt(
        commands::ack_response(3, 8, Some((ServerError::UnknownError, "e"))),
        Type::AckResponse,
    )
    .ack_response
    .unwrap();
    assert_eq!(
        (a.error(), a.message.as_deref()),
        (ServerError::UnknownError, Some("e"))
    );

    let c = rt(commands::close_producer(0, 1), Type::CloseProducer)
        .close_producer
        .unwrap();
    assert_eq!((c.producer_id, c.request_id), (0, 1));
    let c = rt(commands::close_consumer(4, 2), Type::CloseConsumer)
        .close_consumer
        .unwrap();
    assert_eq!((c.consumer_id, c.request_id), (4, 2));

    let g = rt(
        commands::get_last_message_id_response(6, id(1, 9), Some(id(1, 4))),
        Type::GetLastMessageIdResponse,
    )
    .get_last_message_id_response
    .unwrap();
    assert_eq!(
        (
            g.request_id,
            g.last_message_id,
            g.consumer_mark_delete_position
        ),
        (6, id(1, 9), Some(id(1, 4)))
    );

    let r = rt(commands::reached_end_of_topic(4), Type::ReachedEndOfTopic);
    assert_eq!(r.reached_end_of_topic.unwrap().consumer_id, 4);
}

#[test]
fn client_side_constructors() {
    let c = rt(commands::connect("Pulsar-CPP-v4.2.0", 20), Type::Connect)
        .connect
        .unwrap();
    assert_eq!(c.client_version, "Pulsar-CPP-v4.2.0");
    assert_eq!(c.protocol_version, Some(20));
    assert_eq!(c.auth_method_name.as_deref(), Some("none"));

    let t = "persistent://public/default/t";
    let p = rt(
        commands::partitioned_metadata(t, 1),
        Type::PartitionedMetadata,
    );
    assert_eq!(p.partition_metadata.unwrap().topic, t);
    let l = rt(commands::lookup(t, 2), Type::Lookup)
        .lookup_topic
        .unwrap();
    assert_eq!((l.request_id, l.authoritative), (2, Some(false)));

    let p = rt(commands::producer(t, 0, 0, None), Type::Producer)
        .producer
        .unwrap();
    assert_eq!(
        (p.producer_name, p.user_provided_producer_name),
        (None, Some(false))
    );
    let p = rt(commands::producer(t, 0, 0, Some("me")), Type::Producer)
        .producer
        .unwrap();
    assert_eq!(
        (p.producer_name.as_deref(), p.user_provided_producer_name),
        (Some("me"), Some(true))
    );

    let s = rt(commands::send(0, 4, 1), Type::Send).send.unwrap();
    assert_eq!((s.producer_id, s.sequence_id, s.num_messages()), (0, 4, 1));
    let s = rt(commands::send(0, 4, 5), Type::Send).send.unwrap();
    assert_eq!(s.num_messages, Some(5));

    let ksm = KeySharedMeta {
        key_shared_mode: KeySharedMode::Sticky as i32,
        hash_ranges: vec![IntRange {
            start: 0,
            end: 32767,
        }],
        allow_out_of_order_delivery: Some(false),
    };
    let s = rt(
        commands::subscribe(
            t,
            "sub",
            1,
            3,
            command_subscribe::SubType::KeyShared,
            Some(ksm.clone()),
            command_subscribe::InitialPosition::Earliest,
        ),
        Type::Subscribe,
    )
    .subscribe
    .unwrap();
    assert_eq!(
        (
            s.topic.as_str(),
            s.subscription.as_str(),
            s.consumer_id,
            s.request_id
        ),
        (t, "sub", 1, 3)
    );
    assert_eq!(s.sub_type(), command_subscribe::SubType::KeyShared);
    assert_eq!(
        s.initial_position(),
        command_subscribe::InitialPosition::Earliest
    );
    assert_eq!(s.key_shared_meta, Some(ksm));

    let f = rt(commands::flow(1, 1000), Type::Flow).flow.unwrap();
    assert_eq!((f.consumer_id, f.message_permits), (1, 1000));

    let a = rt(commands::ack(1, id(1, 0), Some(vec![26])), Type::Ack)
        .ack
        .unwrap();
    assert_eq!(a.ack_type(), command_ack::AckType::Individual);
    assert_eq!(a.message_id.len(), 1);
    assert_eq!(a.message_id[0].ack_set, vec![26]);
    let a = rt(commands::ack(1, id(1, 0), None), Type::Ack).ack.unwrap();
    assert!(a.message_id[0].ack_set.is_empty());
    let a = rt(
        commands::ack_ids(1, vec![id(1, 0), id(1, 2), id(1, 3)]),
        Type::Ack,
    )
    .ack
    .unwrap();
    assert_eq!(a.message_id.len(), 3);

    let r = rt(
        commands::redeliver_unacknowledged(1, vec![id(1, 1)]),
        Type::RedeliverUnacknowledgedMessages,
    )
    .redeliver_unacknowledged_messages
    .unwrap();
    assert_eq!((r.consumer_id, r.message_ids), (1, vec![id(1, 1)]));
    let r = rt(
        commands::redeliver_unacknowledged(1, vec![]),
        Type::RedeliverUnacknowledgedMessages,
    )
    .redeliver_unacknowledged_messages
    .unwrap();
    assert!(r.message_ids.is_empty());

    let s = rt(commands::seek(1, 4, id(1, 0)), Type::Seek).seek.unwrap();
    assert_eq!(
        (s.consumer_id, s.request_id, s.message_id),
        (1, 4, Some(id(1, 0)))
    );
    let u = rt(commands::unsubscribe(1, 5), Type::Unsubscribe)
        .unsubscribe
        .unwrap();
    assert_eq!((u.consumer_id, u.request_id), (1, 5));
    let g = rt(commands::get_last_message_id(1, 6), Type::GetLastMessageId)
        .get_last_message_id
        .unwrap();
    assert_eq!((g.consumer_id, g.request_id), (1, 6));
}

#[test]
fn our_constructors_match_the_stock_clients_frames() {
    let golden = common::golden_frames();
    let t = "persistent://public/default/t-produce";
    let mut out = Vec::new();
    for (line, cmd) in [
        (1, commands::connect("Pulsar-CPP-v4.2.0", 20)),
        (2, commands::partitioned_metadata(t, 1)),
        (7, commands::close_producer(0, 1)),
    ] {
        out.clear();
        encode_command(&cmd, &mut out);
        assert_eq!(out, golden[line - 1], "line {line}");
    }
}

/// The MESSAGE encoder without a `BaseCommand` writes the bytes the generic one writes, for
/// small and large ids, with and without a redelivery count, an ack set and an epoch.
#[test]
fn a_message_encodes_as_the_generic_encoder_does() {
    let section = wire::encode_section(&Default::default(), b"payload");
    let ids = [
        id(0, 0),
        id(7, 3),
        id(u64::MAX, u64::MAX),
        MessageIdData {
            batch_index: Some(2),
            partition: Some(-1),
            ..id(1 << 40, 1 << 20)
        },
    ];
    for (i, mid) in ids.into_iter().enumerate() {
        for (redeliveries, ack_set) in [(0, None), (3, Some(vec![-1i64, 5])), (u32::MAX, None)] {
            let mut cmd =
                commands::message(i as u64 * 1_000_003, mid.clone(), redeliveries, ack_set);
            if i == 3 {
                cmd.message.as_mut().unwrap().consumer_epoch = Some(9);
            }
            let (mut generic, mut direct) = (Vec::new(), Vec::new());
            wire::encode_with_section(&cmd, &section, &mut generic);
            wire::encode_message_with_section(cmd.message.as_ref().unwrap(), &section, &mut direct);
            assert_eq!(direct, generic, "id {mid:?}, {redeliveries} redeliveries");
            assert_eq!(decode_frame(&direct).unwrap().command, cmd);
        }
    }
}
