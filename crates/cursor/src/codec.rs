//! LEB128 varints and a bounds-checked reader for the persisted form.

use thiserror::Error;

/// The persisted bytes of a cursor state could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("cannot decode cursor state at byte {offset}: {what}")]
pub struct DecodeError {
    /// Offset inside the encoded state where decoding failed.
    pub offset: usize,
    /// What was wrong.
    pub what: &'static str,
}

#[derive(Default)]
pub(crate) struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    pub(crate) fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }

    pub(crate) fn byte(&mut self, b: u8) {
        self.buf.push(b);
    }

    pub(crate) fn bytes(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }

    pub(crate) fn into_inner(self) -> Vec<u8> {
        self.buf
    }
}

pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub(crate) fn error(&self, what: &'static str) -> DecodeError {
        DecodeError {
            offset: self.pos,
            what,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.pos == self.buf.len()
    }

    pub(crate) fn byte(&mut self) -> Result<u8, DecodeError> {
        let b = *self
            .buf
            .get(self.pos)
            .ok_or_else(|| self.error("unexpected end"))?;
        self.pos += 1;
        Ok(b)
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| self.error("unexpected end"))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    pub(crate) fn varint(&mut self) -> Result<u64, DecodeError> {
        let start = self.pos;
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            if shift == 63 && b > 1 {
                self.pos = start;
                return Err(self.error("varint overflow"));
            }
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        self.pos = start;
        Err(self.error("varint too long"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_and_reject_overflow() {
        for v in [
            0,
            1,
            127,
            128,
            300,
            u64::from(u32::MAX),
            u64::MAX - 1,
            u64::MAX,
        ] {
            let mut w = Writer::default();
            w.varint(v);
            let b = w.into_inner();
            let mut r = Reader::new(&b);
            assert_eq!(r.varint(), Ok(v));
            assert!(r.is_empty());
        }
        let mut r = Reader::new(&[0xff; 11]);
        assert!(r.varint().is_err());
        let mut r = Reader::new(&[0x80]);
        assert_eq!(r.varint().unwrap_err().what, "unexpected end");
    }
}
