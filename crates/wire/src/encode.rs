//! Encoding: simple frames, frames with a stored section, frames with metadata and payload.

use prost::Message;

use crate::frame::MAGIC_CRC32C;
use crate::proto::{base_command::Type, BaseCommand, CommandMessage, MessageMetadata};

/// Converts a frame length to the u32 a size field holds.
///
/// # Panics
/// If `n` exceeds `u32::MAX`: such a frame cannot be expressed on the wire at all (every
/// Pulsar peer refuses frames far smaller, see [`DEFAULT_MAX_FRAME_SIZE`](crate::DEFAULT_MAX_FRAME_SIZE)).
fn size_u32(n: usize) -> u32 {
    match u32::try_from(n) {
        Ok(v) => v,
        Err(_) => panic!("frame of {n} bytes does not fit Pulsar's 32-bit size fields"),
    }
}

fn put_header(cmd: &BaseCommand, rest_len: usize, out: &mut Vec<u8>) -> usize {
    let cmd_size = cmd.encoded_len();
    let total = size_u32(4 + cmd_size + rest_len);
    out.reserve(8 + cmd_size + rest_len);
    out.extend_from_slice(&total.to_be_bytes());
    out.extend_from_slice(&size_u32(cmd_size).to_be_bytes());
    // Sized above (`encode` would size it again); a Vec grows as needed.
    cmd.encode_raw(out);
    cmd_size
}

/// Appends a simple frame `[u32 total][u32 cmd_size][BaseCommand]` to `out`.
///
/// # Panics
/// Only if the frame would exceed 4 GiB (see the crate docs).
pub fn encode_command(cmd: &BaseCommand, out: &mut Vec<u8>) {
    put_header(cmd, 0, out);
}

/// Appends the command followed by a stored `0e01…` section, verbatim (a broker's MESSAGE: the
/// section is what [`Payload::section`](crate::Payload::section) held for the SEND).
///
/// The section is not checked; pass one that [`parse_section`](crate::parse_section) accepts.
///
/// # Panics
/// Only if the frame would exceed 4 GiB.
pub fn encode_with_section(cmd: &BaseCommand, section: &[u8], out: &mut Vec<u8>) {
    put_header(cmd, section.len(), out);
    out.extend_from_slice(section);
}

/// [`encode_with_section`] for a MESSAGE command, byte for byte, without a [`BaseCommand`]
/// around it: a broker encodes one per delivered entry, and a `BaseCommand` (some 80 optional
/// fields) costs more to build, size and drop than the `CommandMessage` costs to encode.
///
/// # Panics
/// Only if the frame would exceed 4 GiB.
pub fn encode_message_with_section(msg: &CommandMessage, section: &[u8], out: &mut Vec<u8>) {
    // BaseCommand: `type` (field 1, varint), then `message` (field 9, length-delimited), in
    // field order as prost writes them.
    const TYPE_KEY: u8 = 1 << 3;
    const MESSAGE_KEY: u8 = (9 << 3) | 2;
    let body = msg.encoded_len();
    let kind = Type::Message as u64;
    let cmd_size = 1
        + prost::encoding::encoded_len_varint(kind)
        + 1
        + prost::encoding::encoded_len_varint(body as u64)
        + body;
    out.reserve(8 + cmd_size + section.len());
    out.extend_from_slice(&size_u32(4 + cmd_size + section.len()).to_be_bytes());
    out.extend_from_slice(&size_u32(cmd_size).to_be_bytes());
    out.push(TYPE_KEY);
    prost::encoding::encode_varint(kind, out);
    out.push(MESSAGE_KEY);
    prost::encoding::encode_varint(body as u64, out);
    msg.encode_raw(out);
    out.extend_from_slice(section);
}

/// Appends the command, then `0e01 [crc32c] [u32 meta_size] [metadata] [payload]`, computing the
/// CRC32C over everything after it (a client's SEND).
///
/// # Panics
/// Only if the frame would exceed 4 GiB.
pub fn encode_with_payload(
    cmd: &BaseCommand,
    metadata: &MessageMetadata,
    payload: &[u8],
    out: &mut Vec<u8>,
) {
    let meta_size = metadata.encoded_len();
    put_header(cmd, 10 + meta_size + payload.len(), out);
    put_section(metadata, meta_size, payload, out);
}

/// The `0e01…` section alone for `metadata` and `payload`, with its CRC32C: what a broker
/// stores for a message it did not receive as a frame (tests, replays).
pub fn encode_section(metadata: &MessageMetadata, payload: &[u8]) -> Vec<u8> {
    let meta_size = metadata.encoded_len();
    let mut out = Vec::with_capacity(10 + meta_size + payload.len());
    put_section(metadata, meta_size, payload, &mut out);
    out
}

fn put_section(metadata: &MessageMetadata, meta_size: usize, payload: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&MAGIC_CRC32C.to_be_bytes());
    let crc_at = out.len();
    out.extend_from_slice(&[0; 4]);
    let covered_from = out.len();
    out.extend_from_slice(&size_u32(meta_size).to_be_bytes());
    let _ = metadata.encode(out);
    out.extend_from_slice(payload);
    let crc = crc32c::crc32c(&out[covered_from..]);
    out[crc_at..crc_at + 4].copy_from_slice(&crc.to_be_bytes());
}
