//! Golden tests: the frames the stock C++ client (4.2.0) sent decode to the documented values and
//! re-encode byte for byte.

mod common;

use common::{golden_frames, hex};
use wire::proto::base_command::Type;
use wire::proto::{KeyValue, ProducerAccessMode};
use wire::{
    decode_frame, encode_command, encode_with_payload, encode_with_section, FrameReader,
    DEFAULT_MAX_FRAME_SIZE,
};

const TOPIC: &str = "persistent://public/default/t-produce";

#[test]
fn crc32c_check_vector() {
    assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283);
}

#[test]
fn golden_file_has_seven_frames_of_documented_sizes() {
    let sizes: Vec<usize> = golden_frames().iter().map(Vec::len).collect();
    assert_eq!(sizes, [45, 54, 58, 63, 54, 64, 16]);
}

#[test]
fn golden_frames_decode_to_documented_fields() {
    let frames: Vec<_> = golden_frames()
        .iter()
        .map(|b| decode_frame(b).expect("golden frame decodes"))
        .collect();
    let types: Vec<Type> = frames.iter().map(|f| f.command.r#type()).collect();
    assert_eq!(
        types,
        [
            Type::Connect,
            Type::PartitionedMetadata,
            Type::Lookup,
            Type::Producer,
            Type::Send,
            Type::Send,
            Type::CloseProducer
        ]
    );

    let c = frames[0].command.connect.as_ref().unwrap();
    assert_eq!(c.client_version, "Pulsar-CPP-v4.2.0");
    assert_eq!(c.protocol_version, Some(20));
    assert_eq!(c.auth_method_name.as_deref(), Some("none"));
    let ff = c.feature_flags.as_ref().unwrap();
    assert_eq!(ff.supports_auth_refresh, Some(true));
    assert_eq!(ff.supports_broker_entry_metadata, Some(true));
    assert!(frames[0].payload.is_none());

    let pm = frames[1].command.partition_metadata.as_ref().unwrap();
    assert_eq!((pm.topic.as_str(), pm.request_id), (TOPIC, 1));

    let l = frames[2].command.lookup_topic.as_ref().unwrap();
    assert_eq!((l.topic.as_str(), l.request_id), (TOPIC, 2));
    assert_eq!(l.authoritative, Some(false));
    assert_eq!(l.advertised_listener_name.as_deref(), Some(""));

    let p = frames[3].command.producer.as_ref().unwrap();
    assert_eq!(
        (p.topic.as_str(), p.producer_id, p.request_id),
        (TOPIC, 0, 0)
    );
    assert_eq!(p.epoch, Some(0));
    assert_eq!(p.user_provided_producer_name, Some(false));
    assert_eq!(p.producer_access_mode(), ProducerAccessMode::Shared);
    assert_eq!(p.encrypted, Some(false));

    let mut publish_times = Vec::new();
    for (i, f) in frames[4..6].iter().enumerate() {
        let s = f.command.send.as_ref().unwrap();
        assert_eq!((s.producer_id, s.sequence_id), (0, i as u64));
        let pl = f.payload.as_ref().unwrap();
        assert_eq!(pl.metadata.producer_name, "fake-1-0");
        assert_eq!(pl.metadata.sequence_id, i as u64);
        publish_times.push(pl.metadata.publish_time);
    }
    // Milliseconds in 2026, one ms apart.
    assert!((1_700_000_000_000..2_000_000_000_000).contains(&publish_times[0]));
    assert_eq!(publish_times[1], publish_times[0] + 1);

    let p5 = frames[4].payload.as_ref().unwrap();
    assert_eq!(p5.metadata.partition_key.as_deref(), Some("k1"));
    assert_eq!(p5.metadata.ordering_key, None);
    assert!(p5.metadata.properties.is_empty());
    assert_eq!(p5.body(), b"hello");
    assert_eq!(p5.checksum(), 0x0f82_1524);

    let p6 = frames[5].payload.as_ref().unwrap();
    assert_eq!(p6.metadata.partition_key, None);
    assert_eq!(p6.metadata.ordering_key.as_deref(), Some(&b"ok1"[..]));
    assert_eq!(
        p6.metadata.properties,
        [KeyValue {
            key: "a".into(),
            value: "b".into()
        }]
    );
    assert_eq!(p6.body(), b"world");
    assert_eq!(p6.checksum(), 0x5ac6_33b0);

    let cp = frames[6].command.close_producer.as_ref().unwrap();
    assert_eq!((cp.producer_id, cp.request_id), (0, 1));
}

#[test]
fn golden_frames_reencode_byte_identical() {
    for (i, bytes) in golden_frames().iter().enumerate() {
        let f = decode_frame(bytes).unwrap();
        let mut out = Vec::new();
        match &f.payload {
            None => encode_command(&f.command, &mut out),
            Some(p) => encode_with_section(&f.command, &p.section, &mut out),
        }
        assert_eq!(hex(&out), hex(bytes), "line {}", i + 1);

        // Payload frames also come out identical when the section is rebuilt from the decoded
        // metadata and body, checksum included.
        if let Some(p) = &f.payload {
            let mut rebuilt = Vec::new();
            encode_with_payload(&f.command, &p.metadata, p.body(), &mut rebuilt);
            assert_eq!(hex(&rebuilt), hex(bytes), "line {} rebuilt", i + 1);
        }
    }
}

#[test]
fn the_whole_stream_through_a_frame_reader_byte_by_byte() {
    let stream: Vec<u8> = golden_frames().concat();
    let mut r = FrameReader::new(DEFAULT_MAX_FRAME_SIZE);
    let mut got = Vec::new();
    for b in &stream {
        r.feed(std::slice::from_ref(b));
        while let Some(f) = r.next_frame().unwrap() {
            got.push(f);
        }
    }
    assert_eq!(got.len(), 7);
    assert_eq!(r.buffered(), 0);
    let expected: Vec<_> = golden_frames()
        .iter()
        .map(|b| decode_frame(b).unwrap())
        .collect();
    assert_eq!(got, expected);

    // And in one feed.
    let mut r = FrameReader::new(DEFAULT_MAX_FRAME_SIZE);
    r.feed(&stream);
    let mut n = 0;
    while r.next_frame().unwrap().is_some() {
        n += 1;
    }
    assert_eq!(n, 7);
}
