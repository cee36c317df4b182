//! Error paths: every malformed input gets a typed error (or "need more bytes"), never a panic.

mod common;

use common::golden_frames;
use prost::Message;
use wire::proto::{BaseCommand, BrokerEntryMetadata};
use wire::{
    commands, decode_frame, encode_command, encode_with_payload, encode_with_section,
    parse_section, DecodeError, FrameReader, SizeField, DEFAULT_MAX_FRAME_SIZE,
};

fn send_frame() -> Vec<u8> {
    golden_frames()[4].clone()
}

/// Offset of the `0e01` magic in a frame.
fn magic_at(frame: &[u8]) -> usize {
    8 + u32::from_be_bytes(frame[4..8].try_into().unwrap()) as usize
}

#[test]
fn every_prefix_of_every_golden_frame_needs_more() {
    for frame in golden_frames() {
        for n in 0..frame.len() {
            let prefix = &frame[..n];
            match decode_frame(prefix) {
                Err(DecodeError::Truncated { needed, available }) => {
                    assert_eq!(available, n);
                    assert_eq!(needed, if n < 4 { 4 } else { frame.len() as u64 });
                }
                other => panic!("prefix of {n} bytes: {other:?}"),
            }
            let mut r = FrameReader::new(DEFAULT_MAX_FRAME_SIZE);
            r.feed(prefix);
            assert_eq!(r.next_frame(), Ok(None), "prefix of {n} bytes");
            r.feed(&frame[n..]);
            assert!(r.next_frame().unwrap().is_some());
        }
    }
}

#[test]
fn trailing_bytes_are_refused_by_decode_frame() {
    let mut f = send_frame();
    f.push(0);
    assert_eq!(
        decode_frame(&f),
        Err(DecodeError::TrailingBytes { extra: 1 })
    );
}

#[test]
fn wrong_crc_is_a_checksum_mismatch() {
    let mut f = send_frame();
    let at = magic_at(&f) + 2;
    f[at] ^= 0xff;
    assert_eq!(
        decode_frame(&f),
        Err(DecodeError::ChecksumMismatch {
            expected: 0xf082_1524,
            actual: 0x0f82_1524
        })
    );
    // A flipped payload byte also changes the computed value.
    let mut f = send_frame();
    let last = f.len() - 1;
    f[last] ^= 1;
    assert!(matches!(
        decode_frame(&f),
        Err(DecodeError::ChecksumMismatch {
            expected: 0x0f82_1524,
            ..
        })
    ));
}

#[test]
fn checksum_mismatch_is_not_fatal_for_the_reader() {
    let mut bad = send_frame();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    let mut r = FrameReader::new(DEFAULT_MAX_FRAME_SIZE);
    r.feed(&bad);
    r.feed(&golden_frames()[6]);
    let e = r.next_frame().unwrap_err();
    assert!(matches!(e, DecodeError::ChecksumMismatch { .. }) && !e.is_fatal());
    assert!(!r.is_poisoned());
    let next = r.next_frame().unwrap().unwrap();
    assert!(next.command.close_producer.is_some());
}

#[test]
fn bad_magic() {
    let mut f = send_frame();
    let at = magic_at(&f);
    f[at + 1] = 0x03;
    assert_eq!(
        decode_frame(&f),
        Err(DecodeError::BadMagic { found: 0x0e03 })
    );
}

#[test]
fn size_over_max_is_refused_from_the_prefix_alone() {
    let mut r = FrameReader::new(1024);
    r.feed(&[0xff, 0xff, 0xff]);
    assert_eq!(r.next_frame(), Ok(None));
    r.feed(&[0xff]);
    let e = r.next_frame().unwrap_err();
    assert_eq!(
        e,
        DecodeError::FrameTooLarge {
            size: 0xffff_ffff + 4,
            max: 1024
        }
    );
    assert!(e.is_fatal() && r.is_poisoned());
    assert_eq!(r.buffered(), 0);
    // Poisoned: later feeds are dropped, and the same error comes back.
    r.feed(&golden_frames()[0]);
    assert_eq!(r.buffered(), 0);
    assert_eq!(r.next_frame(), Err(e));

    // The limit counts the whole frame: a 45-byte frame passes a 45-byte limit, not a 44-byte one.
    let f = golden_frames()[0].clone();
    let mut ok = FrameReader::new(45);
    ok.feed(&f);
    assert!(ok.next_frame().unwrap().is_some());
    let mut tight = FrameReader::new(44);
    tight.feed(&f[..4]);
    assert!(matches!(
        tight.next_frame(),
        Err(DecodeError::FrameTooLarge { size: 45, max: 44 })
    ));
}

#[test]
fn inconsistent_size_fields() {
    // total < 4
    let f = [0, 0, 0, 3, 0, 0, 0];
    assert_eq!(
        decode_frame(&f),
        Err(DecodeError::SizeFieldsInconsistent(
            SizeField::TotalBelowFour
        ))
    );
    // cmd_size > total - 4: refused by the reader from the 8-byte header, before the body.
    let mut f = golden_frames()[0].clone();
    f[7] = 0x26; // cmd_size 38, total 41
    assert_eq!(
        decode_frame(&f),
        Err(DecodeError::SizeFieldsInconsistent(
            SizeField::CommandBeyondFrame
        ))
    );
    let mut r = FrameReader::new(DEFAULT_MAX_FRAME_SIZE);
    r.feed(&f[..8]);
    assert_eq!(
        r.next_frame(),
        Err(DecodeError::SizeFieldsInconsistent(
            SizeField::CommandBeyondFrame
        ))
    );
    assert!(r.is_poisoned());

    // meta_size beyond the frame.
    let mut f = send_frame();
    let at = magic_at(&f) + 6;
    f[at..at + 4].copy_from_slice(&1000u32.to_be_bytes());
    assert_eq!(
        decode_frame(&f),
        Err(DecodeError::SizeFieldsInconsistent(
            SizeField::MetadataBeyondFrame
        ))
    );

    // A section too short for magic + crc + meta_size.
    let cmd = commands::send(0, 0, 1);
    let mut out = Vec::new();
    encode_with_section(&cmd, &[0x0e, 0x01, 0, 0, 0], &mut out);
    assert_eq!(
        decode_frame(&out),
        Err(DecodeError::SizeFieldsInconsistent(
            SizeField::SectionTooShort
        ))
    );
    out.clear();
    encode_with_section(&cmd, &[0x0e], &mut out);
    assert_eq!(
        decode_frame(&out),
        Err(DecodeError::SizeFieldsInconsistent(
            SizeField::SectionTooShort
        ))
    );
}

#[test]
fn unknown_and_missing_command_type() {
    let mut out = Vec::new();
    encode_command(
        &BaseCommand {
            r#type: 99,
            ..Default::default()
        },
        &mut out,
    );
    assert_eq!(decode_frame(&out), Err(DecodeError::UnknownCommand(99)));

    // An empty BaseCommand has no type.
    let f = [0, 0, 0, 4, 0, 0, 0, 0];
    assert_eq!(decode_frame(&f), Err(DecodeError::MissingCommandType));
    // A negative type.
    out.clear();
    encode_command(
        &BaseCommand {
            r#type: -5,
            ..Default::default()
        },
        &mut out,
    );
    assert_eq!(decode_frame(&out), Err(DecodeError::UnknownCommand(-5)));
}

#[test]
fn garbage_bytes() {
    // Protobuf that does not parse: a length-delimited field longer than the command.
    let f = [0, 0, 0, 7, 0, 0, 0, 3, 0x12, 0x7f, 0x00];
    assert!(matches!(
        decode_frame(&f),
        Err(DecodeError::Protobuf {
            what: "BaseCommand",
            ..
        })
    ));
    // ASCII text is a gigantic size prefix.
    let mut r = FrameReader::new(DEFAULT_MAX_FRAME_SIZE);
    r.feed(b"GET / HTTP/1.1\r\n\r\n");
    assert!(matches!(
        r.next_frame(),
        Err(DecodeError::FrameTooLarge { .. })
    ));
    // Garbage metadata with a correct checksum.
    let garbage = [0xff_u8, 0xff, 0xff];
    let mut section = vec![0x0e, 0x01, 0, 0, 0, 0];
    section.extend_from_slice(&3u32.to_be_bytes());
    section.extend_from_slice(&garbage);
    let crc = crc32c::crc32c(&section[6..]);
    section[2..6].copy_from_slice(&crc.to_be_bytes());
    assert!(matches!(
        parse_section(&section),
        Err(DecodeError::Protobuf {
            what: "MessageMetadata",
            ..
        })
    ));
}

#[test]
fn broker_entry_metadata_is_skipped() {
    let golden = send_frame();
    let at = magic_at(&golden);
    let bem = BrokerEntryMetadata {
        broker_timestamp: Some(1_700_000_000_000),
        index: Some(41),
    }
    .encode_to_vec();
    let mut section = vec![0x0e, 0x02];
    section.extend_from_slice(&(bem.len() as u32).to_be_bytes());
    section.extend_from_slice(&bem);
    section.extend_from_slice(&golden[at..]);
    let cmd = decode_frame(&golden).unwrap().command;
    let mut out = Vec::new();
    encode_with_section(&cmd, &section, &mut out);
    let f = decode_frame(&out).unwrap();
    let p = f.payload.unwrap();
    assert_eq!(p.section, &golden[at..]);
    assert_eq!(p.body(), b"hello");

    // Its size reaching past the frame.
    section[2..6].copy_from_slice(&1000u32.to_be_bytes());
    out.clear();
    encode_with_section(&cmd, &section, &mut out);
    assert_eq!(
        decode_frame(&out),
        Err(DecodeError::SizeFieldsInconsistent(
            SizeField::BrokerEntryMetadataBeyondFrame
        ))
    );
}

#[test]
fn payload_frames_round_trip_through_encode_with_payload() {
    let meta = wire::proto::MessageMetadata {
        producer_name: "p".into(),
        sequence_id: 3,
        publish_time: 9,
        ..Default::default()
    };
    let mut out = Vec::new();
    encode_with_payload(&commands::send(1, 3, 1), &meta, &[], &mut out);
    let f = decode_frame(&out).unwrap();
    let p = f.payload.unwrap();
    assert_eq!(p.metadata, meta);
    assert!(p.body().is_empty());
    assert_eq!(wire::encode_section(&meta, &[]), p.section);
    assert_eq!(parse_section(&p.section).unwrap(), p);
}
