//! Regenerates the wire crate's checked-in prost types from the vendored `PulsarApi.proto`.
//!
//! `cargo run --manifest-path crates/wire/gen/Cargo.toml` (from anywhere: paths are taken relative
//! to this crate's manifest). It parses the .proto with `protox` (pure Rust, no `protoc`), runs
//! `prost-build` on the descriptor set and writes `crates/wire/src/proto/pulsar.proto.rs`. After
//! running it, update the pinned length and checksum in `crates/wire/tests/proto_pin.rs` (the
//! `vendored_proto_is_pinned` test prints the new values).

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let wire = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .ok_or("generator must live in crates/wire/gen")?
        .to_path_buf();
    let proto_dir = wire.join("proto");
    let out_dir = wire.join("src").join("proto");

    let fds = protox::compile(["PulsarApi.proto"], [&proto_dir])?;
    let mut config = prost_build::Config::new();
    config.out_dir(&out_dir);
    // Every sub-message of `BaseCommand` is boxed: unboxed, the command is several kilobytes
    // (one inline slot per command type), and decoding, building and moving one copied and
    // cleared all of it for every frame. (Its scalar `type` stays inline.)
    for file in &fds.file {
        for message in file.message_type.iter().filter(|m| m.name() == "BaseCommand") {
            for field in &message.field {
                if field.r#type() == prost_types::field_descriptor_proto::Type::Message {
                    config.boxed(format!(".{}.BaseCommand.{}", file.package(), field.name()));
                }
            }
        }
    }
    config.compile_fds(fds)?;

    let generated = out_dir.join("pulsar.proto.rs");
    let text = std::fs::read_to_string(&generated)?;
    println!("wrote {} ({} bytes)", generated.display(), text.len());
    Ok(())
}
