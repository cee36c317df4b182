//! Decoding: one whole frame ([`decode_frame`]) or a byte stream ([`FrameReader`]).

use prost::Message;

use crate::error::{DecodeError, SizeField};
use crate::proto::{base_command, BaseCommand, BrokerEntryMetadata, MessageMetadata};

/// Magic number that starts the checksummed payload section (`0e01`).
pub const MAGIC_CRC32C: u16 = 0x0e01;
/// Magic number that starts the optional broker-entry-metadata section (`0e02`).
pub const MAGIC_BROKER_ENTRY_METADATA: u16 = 0x0e02;

/// Pulsar's default `maxMessageSize`: 5 MiB.
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 5 * 1024 * 1024;
/// What Pulsar adds to the maximum message size for the command and metadata around it
/// (`Commands.MESSAGE_SIZE_FRAME_PADDING`, 10 KiB).
pub const FRAME_SIZE_PADDING: usize = 10 * 1024;
/// The default frame limit: [`DEFAULT_MAX_MESSAGE_SIZE`] + [`FRAME_SIZE_PADDING`].
pub const DEFAULT_MAX_FRAME_SIZE: usize = DEFAULT_MAX_MESSAGE_SIZE + FRAME_SIZE_PADDING;

/// The frame limit (whole frame, size prefix included) for a given maximum message size, as
/// Pulsar's broker computes it: `max_message_size + 10 KiB`.
pub const fn max_frame_size_for(max_message_size: usize) -> usize {
    max_message_size.saturating_add(FRAME_SIZE_PADDING)
}

/// One decoded frame: the command and, for SEND and MESSAGE, its payload section.
#[derive(Clone, Debug, PartialEq)]
pub struct Frame {
    /// The command. Its `type` is a known [`base_command::Type`]; the matching sub-message
    /// (`send`, `ack`, …) is whatever the peer put there and may be absent.
    pub command: BaseCommand,
    /// The `0e01…` section after the command, if the frame has one. A `0e02` broker-entry-metadata
    /// section in front of it is skipped and not part of it.
    pub payload: Option<Payload>,
    /// PIP-493's `CommandNegativeAck` when the command's type is
    /// [`pip493::NEGATIVE_ACK`](crate::pip493::NEGATIVE_ACK) (the published proto has no field
    /// for it).
    pub negative_ack: Option<crate::pip493::CommandNegativeAck>,
    /// Whether a CONNECT or CONNECTED carries PIP-493's `supports_key_ordered_negative_ack`.
    pub supports_negative_ack: bool,
}

/// The checksummed payload section of a frame, kept verbatim.
#[derive(Clone, Debug, PartialEq)]
pub struct Payload {
    /// The decoded `MessageMetadata`.
    pub metadata: MessageMetadata,
    /// The `0e01 [crc] [meta_size] [metadata] [payload]` section verbatim: what a broker stores
    /// and sends back after a MESSAGE command (see [`encode_with_section`](crate::encode_with_section)).
    pub section: Vec<u8>,
    /// Where the payload bytes start inside `section` (`body = &section[body_offset..]`).
    pub body_offset: usize,
}

impl Payload {
    /// The payload bytes (opaque: possibly a batch, possibly compressed).
    pub fn body(&self) -> &[u8] {
        self.section.get(self.body_offset..).unwrap_or_default()
    }

    /// The CRC32C carried in the section.
    pub fn checksum(&self) -> u32 {
        be_u32(&self.section, 2).unwrap_or_default()
    }
}

fn be_u16(b: &[u8], at: usize) -> Option<u16> {
    let s = b.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([s[0], s[1]]))
}

pub(crate) fn be_u32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

/// Checks the 8-byte header as far as `header` reaches; returns the whole frame length
/// (prefix included) once the total size is known.
fn check_header(header: &[u8], max: usize) -> Result<Option<u64>, DecodeError> {
    let Some(total) = be_u32(header, 0) else {
        return Ok(None);
    };
    let frame_len = u64::from(total) + 4;
    if frame_len > max as u64 {
        return Err(DecodeError::FrameTooLarge {
            size: frame_len,
            max,
        });
    }
    if total < 4 {
        return Err(DecodeError::SizeFieldsInconsistent(
            SizeField::TotalBelowFour,
        ));
    }
    if let Some(cmd_size) = be_u32(header, 4) {
        if cmd_size > total - 4 {
            return Err(DecodeError::SizeFieldsInconsistent(
                SizeField::CommandBeyondFrame,
            ));
        }
    }
    Ok(Some(frame_len))
}

/// Decodes one whole frame, size prefix included: `[u32 total][u32 cmd_size][BaseCommand]`,
/// optionally followed by `[0e02 u32 size BrokerEntryMetadata]` (skipped) and the checksummed
/// `0e01` payload section.
///
/// Never panics; allocates only for the decoded messages and the copied section, all bounded by
/// `frame_bytes.len()`. `frame_bytes` must hold exactly one frame: fewer bytes give
/// [`DecodeError::Truncated`], more give [`DecodeError::TrailingBytes`]. No size limit is applied
/// here beyond what the slice holds; [`FrameReader`] applies one before buffering.
pub fn decode_frame(frame_bytes: &[u8]) -> Result<Frame, DecodeError> {
    let b = frame_bytes;
    let frame_len = match check_header(b, usize::MAX)? {
        Some(n) => n,
        None => {
            return Err(DecodeError::Truncated {
                needed: 4,
                available: b.len(),
            })
        }
    };
    if (b.len() as u64) < frame_len {
        return Err(DecodeError::Truncated {
            needed: frame_len,
            available: b.len(),
        });
    }
    if b.len() as u64 > frame_len {
        return Err(DecodeError::TrailingBytes {
            extra: b.len() - frame_len as usize,
        });
    }
    // total >= 4 and the whole frame is here, so the command size is readable and in range.
    let cmd_size = be_u32(b, 4).unwrap_or_default() as usize;
    let cmd_end = 8 + cmd_size;
    let cmd_bytes = b.get(8..cmd_end).unwrap_or_default();
    let command = BaseCommand::decode(cmd_bytes).map_err(|e| DecodeError::Protobuf {
        what: "BaseCommand",
        message: e.to_string(),
    })?;
    check_type(cmd_bytes, command.r#type)?;
    // Like every other command's sub-message, field 82 may be absent (the receiver decides).
    let negative_ack = if command.r#type == crate::pip493::NEGATIVE_ACK {
        crate::pip493::decode_negative_ack(cmd_bytes)
    } else {
        None
    };
    let supports_negative_ack = matches!(
        base_command::Type::try_from(command.r#type),
        Ok(base_command::Type::Connect | base_command::Type::Connected)
    ) && crate::pip493::supports_negative_ack(cmd_bytes);

    let rest = b.get(cmd_end..).unwrap_or_default();
    if rest.is_empty() {
        return Ok(Frame {
            command,
            payload: None,
            negative_ack,
            supports_negative_ack,
        });
    }
    let section = skip_broker_entry_metadata(rest)?;
    let payload = parse_section(section)?;
    Ok(Frame {
        command,
        payload: Some(payload),
        negative_ack,
        supports_negative_ack,
    })
}

/// `BaseCommand.type` alone. prost fills an absent proto2 enum with the enum's first value
/// (CONNECT), so presence is checked on the bytes with this one-field view.
#[derive(Clone, PartialEq, prost::Message)]
struct TypeOnly {
    #[prost(int32, optional, tag = "1")]
    r#type: Option<i32>,
}

fn check_type(cmd_bytes: &[u8], t: i32) -> Result<(), DecodeError> {
    // The bytes already decoded as a BaseCommand, so they decode as this subset too.
    let present = TypeOnly::decode(cmd_bytes).is_ok_and(|v| v.r#type.is_some());
    if !present || t == 0 {
        return Err(DecodeError::MissingCommandType);
    }
    if t == crate::pip493::NEGATIVE_ACK {
        return Ok(());
    }
    base_command::Type::try_from(t)
        .map(|_| ())
        .map_err(|_| DecodeError::UnknownCommand(t))
}

/// Returns the bytes from the `0e01` magic on, skipping a leading `0e02` section (whose content
/// must still decode as `BrokerEntryMetadata`).
fn skip_broker_entry_metadata(rest: &[u8]) -> Result<&[u8], DecodeError> {
    let magic = be_u16(rest, 0).ok_or(DecodeError::SizeFieldsInconsistent(
        SizeField::SectionTooShort,
    ))?;
    if magic != MAGIC_BROKER_ENTRY_METADATA {
        return Ok(rest);
    }
    let size = be_u32(rest, 2).ok_or(DecodeError::SizeFieldsInconsistent(
        SizeField::SectionTooShort,
    ))? as usize;
    let beyond = DecodeError::SizeFieldsInconsistent(SizeField::BrokerEntryMetadataBeyondFrame);
    let end = size.checked_add(6).ok_or(beyond.clone())?;
    let bem = rest.get(6..end).ok_or(beyond)?;
    BrokerEntryMetadata::decode(bem).map_err(|e| DecodeError::Protobuf {
        what: "BrokerEntryMetadata",
        message: e.to_string(),
    })?;
    Ok(rest.get(end..).unwrap_or_default())
}

/// Parses a stored `0e01 [u32 crc32c] [u32 meta_size] [MessageMetadata] [payload]` section:
/// checks the magic and the checksum, decodes the metadata, and copies the section.
///
/// This is what [`decode_frame`] does with the bytes after the command; a broker can use it on
/// sections read back from its own store.
pub fn parse_section(section: &[u8]) -> Result<Payload, DecodeError> {
    let too_short = DecodeError::SizeFieldsInconsistent(SizeField::SectionTooShort);
    let magic = be_u16(section, 0).ok_or(too_short.clone())?;
    if magic != MAGIC_CRC32C {
        return Err(DecodeError::BadMagic { found: magic });
    }
    let expected = be_u32(section, 2).ok_or(too_short.clone())?;
    let meta_size = be_u32(section, 6).ok_or(too_short)? as usize;
    let covered = section.get(6..).unwrap_or_default();
    let body_offset = 10usize.saturating_add(meta_size);
    if body_offset > section.len() {
        return Err(DecodeError::SizeFieldsInconsistent(
            SizeField::MetadataBeyondFrame,
        ));
    }
    let actual = crc32c::crc32c(covered);
    if actual != expected {
        return Err(DecodeError::ChecksumMismatch { expected, actual });
    }
    let meta_bytes = section.get(10..body_offset).unwrap_or_default();
    let metadata = MessageMetadata::decode(meta_bytes).map_err(|e| DecodeError::Protobuf {
        what: "MessageMetadata",
        message: e.to_string(),
    })?;
    Ok(Payload {
        metadata,
        section: section.to_vec(),
        body_offset,
    })
}

/// Sans-IO incremental frame reader: [`feed`](Self::feed) it the bytes read from a socket, then
/// call [`next_frame`](Self::next_frame) until it returns `Ok(None)` ("need more bytes").
///
/// **Memory.** The size prefix is checked against the limit as soon as its 4 bytes are buffered,
/// before waiting for the rest, so a prefix of `0xFFFFFFFF` is refused at once. Once a frame's size
/// is known and allowed, the buffer reserves exactly that frame's bytes. The buffer holds at most
/// one frame plus whatever one [`feed`](Self::feed) call brings beyond it, provided the caller
/// drains frames between feeds.
///
/// **After an error.** If the error [`is_fatal`](DecodeError::is_fatal) (frame too large, or the
/// 8-byte header is inconsistent), frame boundaries are lost: the reader is poisoned, drops the
/// buffer, ignores later feeds and returns the same error from every later `next_frame`. The
/// connection should be closed. Any other error concerns one well-delimited frame, which has been
/// consumed: the next call continues with the following frame (a broker may answer, say, a
/// checksum mismatch on SEND and go on, as Pulsar does, or close the connection).
#[derive(Debug)]
pub struct FrameReader {
    buf: Vec<u8>,
    start: usize,
    max_frame_size: usize,
    poisoned: Option<DecodeError>,
}

impl FrameReader {
    /// A reader refusing frames longer than `max_frame_size` bytes (size prefix included; see
    /// [`DEFAULT_MAX_FRAME_SIZE`] and [`max_frame_size_for`]).
    pub fn new(max_frame_size: usize) -> Self {
        FrameReader {
            buf: Vec::new(),
            start: 0,
            max_frame_size,
            poisoned: None,
        }
    }

    /// The limit this reader applies.
    pub fn max_frame_size(&self) -> usize {
        self.max_frame_size
    }

    /// Bytes buffered and not yet returned as frames.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Whether a fatal error has poisoned the reader.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned.is_some()
    }

    /// Appends bytes read from the socket. Ignored once the reader is poisoned.
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.poisoned.is_some() || bytes.is_empty() {
            return;
        }
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole frame, `Ok(None)` if more bytes are needed, or an error (see the type's
    /// documentation for the reader's state after one).
    pub fn next_frame(&mut self) -> Result<Option<Frame>, DecodeError> {
        if let Some(e) = &self.poisoned {
            return Err(e.clone());
        }
        let avail = &self.buf[self.start..];
        let frame_len = match check_header(avail, self.max_frame_size) {
            Ok(Some(n)) => n as usize, // <= max_frame_size, a usize
            Ok(None) => return Ok(None),
            Err(e) => {
                self.poison(e.clone());
                return Err(e);
            }
        };
        if avail.len() < frame_len {
            let missing = frame_len - avail.len();
            self.buf.reserve_exact(missing);
            return Ok(None);
        }
        let result = decode_frame(&avail[..frame_len]);
        self.start += frame_len;
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        match result {
            Ok(f) => Ok(Some(f)),
            Err(e) if e.is_fatal() => {
                self.poison(e.clone());
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    fn poison(&mut self, e: DecodeError) {
        self.poisoned = Some(e);
        self.buf = Vec::new();
        self.start = 0;
    }
}
