//! Checksummed record files: the one framing that the cursor's [`FileStore`](crate::FileStore)
//! and a broker's entry log share.
//!
//! A segment file is an 8-byte header naming its format (a [`SegmentFormat`]'s `magic`), then
//! records `[u32 body length][u32 CRC32C of the body][body]`, integers big-endian. The module
//! frames and checks records and says whether a bad record is a torn tail; what a body holds,
//! and what to do with a damaged file (cut its tail, refuse it), is the caller's policy.
//!
//! It does no I/O but [`sync_dir`]: callers own their files, buffers, reads and `fsync`s (a
//! caller that writes a record straight into its own buffer writes
//! [`SegmentFormat::record_header`], then the body's parts).
//!
//! ```
//! use cursor::segment::{SegmentFormat, HEADER_LEN};
//! const LOG: SegmentFormat = SegmentFormat { magic: *b"EXAMPLE1", min_body: 1, max_body: 1 << 20 };
//! let mut file = LOG.magic.to_vec();
//! LOG.append_record(&[b"hello, ", b"world"], &mut file);
//! LOG.append_record(&[b"second"], &mut file);
//! let whole = file.len();
//! file.extend_from_slice(&[0, 0, 0, 9, 1]); // a torn write
//! let mut bodies = Vec::new();
//! let mut at = HEADER_LEN;
//! let damage = loop {
//!     match LOG.record_at(&file, at) {
//!         Ok((body, next)) => { bodies.push(body.to_vec()); at = next; }
//!         Err(e) => break (at, e),
//!     }
//! };
//! assert_eq!(bodies, [b"hello, world".to_vec(), b"second".to_vec()]);
//! assert_eq!(damage.0, whole);
//! assert!(LOG.is_tail(&file, damage.0)); // nothing whole after it: cut it, it was never acknowledged
//! ```

use std::fs::File;
use std::io;
use std::path::Path;

/// Length of a segment file's header (its format's magic).
pub const HEADER_LEN: usize = 8;
/// Length of a record's header: body length and checksum.
pub const RECORD_HEADER_LEN: usize = 8;

/// One kind of segment file: its header and the body lengths a record of it may have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentFormat {
    /// The file's first 8 bytes (a name and a version).
    pub magic: [u8; HEADER_LEN],
    /// The shortest body a record may have.
    pub min_body: u32,
    /// The longest body a record may have (a length beyond it is damage, not a record).
    pub max_body: u32,
}

/// Why the bytes at an offset are not a whole record.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Fewer than [`RECORD_HEADER_LEN`] bytes are left.
    #[error("record header cut short")]
    HeaderCut,
    /// The length is outside the format's bounds.
    #[error("record length {0} out of range")]
    Length(u32),
    /// The body runs past the end of the bytes.
    #[error("record of {0} bytes cut short")]
    BodyCut(u32),
    /// The body does not match its checksum.
    #[error("checksum {actual:08x} does not match {stored:08x}")]
    Checksum {
        /// The body's CRC32C.
        actual: u32,
        /// The CRC32C the record carries.
        stored: u32,
    },
}

impl SegmentFormat {
    /// Whether `bytes` start with this format's header.
    pub fn header_ok(&self, bytes: &[u8]) -> bool {
        bytes.get(..HEADER_LEN) == Some(&self.magic[..])
    }

    /// The header of a record whose body is `parts`, one after the other: write it, then the
    /// parts. The caller keeps bodies within the format's bounds.
    pub fn record_header(&self, parts: &[&[u8]]) -> [u8; RECORD_HEADER_LEN] {
        let body_len: usize = parts.iter().map(|p| p.len()).sum();
        let crc = parts
            .iter()
            .fold(0, |crc, part| crc32c::crc32c_append(crc, part));
        let mut head = [0u8; RECORD_HEADER_LEN];
        head[..4].copy_from_slice(&(body_len as u32).to_be_bytes());
        head[4..].copy_from_slice(&crc.to_be_bytes());
        head
    }

    /// Appends one record to `out` whose body is `parts`, one after the other. Returns the
    /// record's length. The caller keeps bodies within the format's bounds.
    pub fn append_record(&self, parts: &[&[u8]], out: &mut Vec<u8>) -> usize {
        let start = out.len();
        out.extend_from_slice(&self.record_header(parts));
        for p in parts {
            out.extend_from_slice(p);
        }
        out.len() - start
    }

    /// The record at offset `at` of `bytes`: its body and where the next record starts; or why
    /// it is not a whole record.
    pub fn record_at<'a>(
        &self,
        bytes: &'a [u8],
        at: usize,
    ) -> Result<(&'a [u8], usize), FrameError> {
        let head = bytes
            .get(at..at.saturating_add(RECORD_HEADER_LEN))
            .ok_or(FrameError::HeaderCut)?;
        let len = self.length(head)?;
        let stored = u32::from_be_bytes([head[4], head[5], head[6], head[7]]);
        let start = at + RECORD_HEADER_LEN;
        let body = bytes
            .get(start..start + len as usize)
            .ok_or(FrameError::BodyCut(len))?;
        let actual = crc32c::crc32c(body);
        if actual != stored {
            return Err(FrameError::Checksum { actual, stored });
        }
        Ok((body, start + len as usize))
    }

    /// Whether the bad record at `at` is the last thing in `bytes`: a torn write, not a damaged
    /// middle. It is when no whole record starts after it, following the lengths the records
    /// claim (a loop: a file of millions of tiny bad records must not exhaust the stack).
    pub fn is_tail(&self, bytes: &[u8], mut at: usize) -> bool {
        loop {
            let Some(head) = bytes.get(at..at.saturating_add(4)) else {
                return true;
            };
            let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
            // A record that claims to run past the end, or ends exactly at the end, is the tail.
            match at.checked_add(RECORD_HEADER_LEN + len) {
                Some(end) if end < bytes.len() => {
                    if self.record_at(bytes, end).is_ok() {
                        return false;
                    }
                    at = end;
                }
                _ => return true,
            }
        }
    }

    fn length(&self, head: &[u8]) -> Result<u32, FrameError> {
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
        if (self.min_body..=self.max_body).contains(&len) {
            Ok(len)
        } else {
            Err(FrameError::Length(len))
        }
    }
}

/// `fsync`s a directory, so that a file created or renamed in it survives a crash.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir).and_then(|d| d.sync_all())
}

#[cfg(test)]
mod tests {
    use super::*;

    const F: SegmentFormat = SegmentFormat {
        magic: *b"TESTSEG1",
        min_body: 2,
        max_body: 64,
    };

    fn file(bodies: &[&[u8]]) -> (Vec<u8>, Vec<usize>) {
        let mut out = F.magic.to_vec();
        let mut ends = vec![out.len()];
        for b in bodies {
            F.append_record(&[b], &mut out);
            ends.push(out.len());
        }
        (out, ends)
    }

    #[test]
    fn records_read_back_and_parts_join_into_one_body() {
        let mut out = F.magic.to_vec();
        let n = F.append_record(&[b"ab", b"", b"cd"], &mut out);
        assert_eq!(n, RECORD_HEADER_LEN + 4);
        assert!(F.header_ok(&out));
        assert_eq!(F.record_at(&out, HEADER_LEN), Ok((&b"abcd"[..], out.len())));
        // The checksum is CRC32C of the body (the standard check value of "123456789").
        let mut one = Vec::new();
        F.append_record(&[b"123456789"], &mut one);
        assert_eq!(one[4..8], 0xE306_9283u32.to_be_bytes());
    }

    /// Every cut of a file of three records: the records before the cut read back, the one it
    /// cuts is an error and a tail.
    #[test]
    fn every_cut_is_a_tail_after_the_whole_records() {
        let (full, ends) = file(&[b"first", b"second", b"third!"]);
        for cut in HEADER_LEN..full.len() {
            let bytes = &full[..cut];
            let mut at = HEADER_LEN;
            let mut whole = 0;
            while let Ok((_, next)) = F.record_at(bytes, at) {
                whole += 1;
                at = next;
            }
            assert_eq!(
                whole,
                ends.iter().filter(|e| **e <= cut).count() - 1,
                "cut {cut}"
            );
            if at < cut {
                assert!(F.is_tail(bytes, at), "cut {cut}");
            }
        }
    }

    #[test]
    fn a_damaged_middle_is_not_a_tail_and_each_fault_is_named() {
        let (full, ends) = file(&[b"first", b"second", b"third!"]);
        let mut flipped = full.clone();
        flipped[ends[1] + RECORD_HEADER_LEN] ^= 1;
        assert!(matches!(
            F.record_at(&flipped, ends[1]),
            Err(FrameError::Checksum { .. })
        ));
        assert!(!F.is_tail(&flipped, ends[1]));
        let mut long = full.clone();
        long[ends[1]..ends[1] + 4].copy_from_slice(&65u32.to_be_bytes());
        assert_eq!(F.record_at(&long, ends[1]), Err(FrameError::Length(65)));
        let mut short = full.clone();
        short[ends[0]..ends[0] + 4].copy_from_slice(&1u32.to_be_bytes());
        assert_eq!(F.record_at(&short, ends[0]), Err(FrameError::Length(1)));
        assert_eq!(
            F.record_at(&full, full.len() - 2),
            Err(FrameError::HeaderCut)
        );
        assert_eq!(
            F.record_at(&full, usize::MAX - 3),
            Err(FrameError::HeaderCut)
        );
        assert_eq!(
            F.record_at(&full[..full.len() - 1], ends[2]),
            Err(FrameError::BodyCut(6))
        );
        assert!(!F.header_ok(b"TESTSEG"));
        assert!(!F.header_ok(b"TESTSEG2"));
    }
}
