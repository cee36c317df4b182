//! Pins the vendored `PulsarApi.proto`, so a change to it cannot go unnoticed without the
//! generated types being regenerated.

const PROTO: &[u8] = include_bytes!("../proto/PulsarApi.proto");
const GENERATED: &str = include_str!("../src/proto/pulsar.proto.rs");

/// Length and CRC32C of the vendored file (apache/pulsar-client-cpp `proto/PulsarApi.proto` at
/// 1d08b2b, the copy of apache/pulsar's `pulsar-common/src/main/proto/PulsarApi.proto`).
const PINNED_LEN: usize = 54_714;
const PINNED_CRC32C: u32 = 0xaf70_6f46;

#[test]
fn vendored_proto_is_pinned() {
    let (len, crc) = (PROTO.len(), crc32c::crc32c(PROTO));
    assert!(
        len == PINNED_LEN && crc == PINNED_CRC32C,
        "crates/wire/proto/PulsarApi.proto changed (now {len} bytes, crc32c {crc:#010x}).\n\
         Regenerate the types with `cargo run --manifest-path crates/wire/gen/Cargo.toml`,\n\
         then set PINNED_LEN = {len} and PINNED_CRC32C = {crc:#010x} in crates/wire/tests/proto_pin.rs."
    );
}

#[test]
fn vendored_proto_keeps_its_license_header_and_protocol_version() {
    let text = std::str::from_utf8(PROTO).unwrap();
    assert!(text.starts_with("/**\n * Licensed to the Apache Software Foundation (ASF)"));
    assert!(text.contains("v21 = 21;"));
    assert!(text.contains("package pulsar.proto;"));
}

#[test]
fn generated_code_covers_the_newest_command() {
    // The highest BaseCommand type in the vendored proto.
    assert!(GENERATED.contains("WatchTcAssignmentsClose = 81"));
    assert_eq!(
        wire::proto::base_command::Type::try_from(81),
        Ok(wire::proto::base_command::Type::WatchTcAssignmentsClose)
    );
}

/// The generator boxes every sub-message of `BaseCommand` (`crates/wire/gen`): one inline slot
/// per command type made it several kilobytes, cleared and copied for every frame decoded or
/// built. Boxed, it is a pointer per command type.
#[test]
fn base_command_keeps_its_sub_messages_boxed() {
    let size = std::mem::size_of::<wire::proto::BaseCommand>();
    assert!(
        size <= 1024,
        "BaseCommand is {size} bytes: regenerate with the gen crate's boxing"
    );
    assert!(GENERATED
        .contains("pub send: ::core::option::Option<::prost::alloc::boxed::Box<CommandSend>>"));
}
