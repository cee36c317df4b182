//! The decoder's error type.

/// Why a frame could not be decoded.
///
/// [`DecodeError::is_fatal`] tells the two kinds apart: a fatal error means the frame boundaries
/// of the stream are lost (a [`FrameReader`](crate::FrameReader) refuses everything after it);
/// any other error concerns one well-delimited frame, which the reader has already skipped.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The frame's size prefix announces more bytes than the configured maximum (`size` and
    /// `max` both count the whole frame, including the 4-byte prefix).
    #[error("frame of {size} bytes exceeds the maximum of {max} bytes")]
    FrameTooLarge {
        /// Announced frame size in bytes, prefix included.
        size: u64,
        /// The limit in force.
        max: usize,
    },
    /// [`decode_frame`](crate::decode_frame) was given fewer bytes than the frame's size prefix
    /// announces (or fewer than the 4-byte prefix itself).
    #[error("truncated frame: {needed} bytes needed, {available} available")]
    Truncated {
        /// Bytes the frame needs, prefix included.
        needed: u64,
        /// Bytes that were given.
        available: usize,
    },
    /// [`decode_frame`](crate::decode_frame) was given more bytes than one frame.
    #[error("{extra} bytes after the end of the frame")]
    TrailingBytes {
        /// Bytes past the end of the frame.
        extra: usize,
    },
    /// The size fields contradict each other: total size below 4, command size beyond the
    /// frame, a metadata or broker-entry-metadata size beyond the frame, or a payload section too
    /// short for its own headers.
    #[error("inconsistent size fields: {0}")]
    SizeFieldsInconsistent(SizeField),
    /// Bytes follow the command but start with neither `0e01` (checksum) nor `0e02` (broker
    /// entry metadata followed by `0e01`). Payloads without a checksum (clients before protocol
    /// v6) are not accepted.
    #[error("bad magic {found:#06x} after the command (expected 0x0e01 or 0x0e02)")]
    BadMagic {
        /// The two bytes found, big-endian.
        found: u16,
    },
    /// The CRC32C over metadata size, metadata and payload does not match the frame's.
    #[error("checksum mismatch: frame says {expected:#010x}, computed {actual:#010x}")]
    ChecksumMismatch {
        /// The checksum carried by the frame.
        expected: u32,
        /// The checksum computed over the received bytes.
        actual: u32,
    },
    /// A protobuf message (`BaseCommand`, `MessageMetadata` or `BrokerEntryMetadata`) did not
    /// decode.
    #[error("protobuf decode error in {what}: {message}")]
    Protobuf {
        /// Which message failed.
        what: &'static str,
        /// prost's description.
        message: String,
    },
    /// `BaseCommand.type` is absent (or 0, which no command uses).
    #[error("command without a type")]
    MissingCommandType,
    /// `BaseCommand.type` is a value this protocol version does not define.
    #[error("unknown command type {0}")]
    UnknownCommand(i32),
}

impl DecodeError {
    /// Whether the error loses the stream's frame boundaries, so nothing after it can be read.
    ///
    /// Fatal: [`FrameTooLarge`](Self::FrameTooLarge), and the size-field checks on the 8-byte
    /// header (`total < 4`, `cmd_size > total - 4`). Everything else concerns one delimited frame.
    pub fn is_fatal(&self) -> bool {
        matches!(self, DecodeError::FrameTooLarge { .. })
            || matches!(
                self,
                DecodeError::SizeFieldsInconsistent(
                    SizeField::TotalBelowFour | SizeField::CommandBeyondFrame
                )
            )
    }
}

/// Which size field of a frame is inconsistent (see [`DecodeError::SizeFieldsInconsistent`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SizeField {
    /// The total size is below 4, so there is no room for the command size.
    #[error("total size below 4")]
    TotalBelowFour,
    /// The command size is larger than the total size minus 4.
    #[error("command size beyond the frame")]
    CommandBeyondFrame,
    /// The bytes after the command are too short for the magic, checksum and metadata size.
    #[error("payload section shorter than its headers")]
    SectionTooShort,
    /// The broker-entry-metadata size reaches past the end of the frame.
    #[error("broker entry metadata beyond the frame")]
    BrokerEntryMetadataBeyondFrame,
    /// The metadata size reaches past the end of the frame.
    #[error("metadata size beyond the frame")]
    MetadataBeyondFrame,
}
