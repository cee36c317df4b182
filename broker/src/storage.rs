//! Durable topics: an append-only log per topic, one file per ledger id, each record checked
//! by CRC32C.
//!
//! Layout under `--data-dir`:
//!
//! ```text
//! DIR/topics/<topic, percent-encoded>/ledger-<id>.log      entries of one ledger, in order
//! DIR/topics/<topic>/subscriptions/<sub>.json              the subscription's type and mode
//! DIR/topics/<topic>/subscriptions/<sub>.cursor            its cursor (cursor::FileStore)
//! ```
//!
//! A log file is an 8-byte header (`KOLOG`, 0, 0, version 1) and records
//! `[u32 body length][u32 CRC32C of body][body]`, body = `[u64 ledger id][u64 entry id]` and
//! the entry's `0e01…` payload section as the producer sent it (the entry's metadata is decoded
//! from it again on recovery). All integers big-endian.
//!
//! Recovery reads every file in ledger order. An incomplete or mismatching record at the end
//! of the newest file is a torn write: the file is cut at the last whole record, with a WARN.
//! Anything wrong anywhere else is [`StorageError::Corrupt`], naming the file and the offset:
//! the broker refuses to start rather than silently skip entries. After recovery, new entries
//! go to a new ledger id, so a position is never reused even if the OS lost the tail.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use cursor::Position;
use tracing::{debug, warn};

const HEADER: &[u8; 8] = b"KOLOG\0\0\x01";

/// Largest record body accepted on recovery (a frame can be at most 256 MiB + padding).
const MAX_RECORD: u32 = 300 * 1024 * 1024;

/// When an appended entry is flushed to the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncPolicy {
    /// `fsync` before the SEND_RECEIPT (group-committed: one write and one fsync per batch of
    /// frames read from a connection).
    Always,
    /// Written to the OS before the receipt (one write per batch of frames read from a
    /// connection; survives the broker being killed), `fsync`ed every 100 ms: an OS crash or
    /// power loss can lose the receipts of the last 100 ms.
    Interval,
}

/// Storage failures.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// An IO error on `path`.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// A damaged record that is not a torn tail.
    #[error("corrupt log {path} at offset {offset}: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Where the bad record starts.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> StorageError + 'a {
    move |source| StorageError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// Percent-encodes a name into one safe path component.
pub(crate) fn encode_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len() * 2);
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The inverse of [`encode_name`]; `None` for a name it did not produce.
pub(crate) fn decode_name(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let h = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(h, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// One recovered entry: its position and payload section.
pub(crate) type Recovered = (Position, Vec<u8>);

/// A topic's log.
#[derive(Debug)]
pub(crate) struct TopicLog {
    dir: PathBuf,
    /// The ledger being written and its buffered file.
    current: Option<(u64, BufWriter<File>)>,
    /// Bytes are buffered (not yet handed to the OS).
    buffered: bool,
    /// Bytes were handed to the OS but not fsynced.
    dirty: bool,
}

impl TopicLog {
    /// Opens (creating) the topic's directory and reads back every entry, cutting a torn tail.
    pub(crate) fn open(dir: &Path) -> Result<(TopicLog, Vec<Recovered>), StorageError> {
        fs::create_dir_all(dir).map_err(io_err("create", dir))?;
        let mut ids: Vec<u64> = Vec::new();
        for e in fs::read_dir(dir).map_err(io_err("list", dir))? {
            let e = e.map_err(io_err("list", dir))?;
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(id) = name
                .strip_prefix("ledger-")
                .and_then(|r| r.strip_suffix(".log"))
                .and_then(|n| n.parse::<u64>().ok())
            {
                ids.push(id);
            }
        }
        ids.sort_unstable();
        let mut entries = Vec::new();
        for (i, id) in ids.iter().enumerate() {
            let path = ledger_path(dir, *id);
            let newest = i + 1 == ids.len();
            read_log(&path, newest, &mut entries)?;
        }
        debug!(dir = %dir.display(), ledgers = ids.len(), entries = entries.len(), "topic log recovered");
        Ok((
            TopicLog {
                dir: dir.to_path_buf(),
                current: None,
                buffered: false,
                dirty: false,
            },
            entries,
        ))
    }

    /// Appends one entry to the write buffer: it is in the OS after [`TopicLog::flush`] (enough
    /// to survive the broker being killed) and on the disk after [`TopicLog::sync`].
    pub(crate) fn append(&mut self, p: Position, section: &[u8]) -> Result<(), StorageError> {
        if self.current.as_ref().map(|(id, _)| *id) != Some(p.ledger_id) {
            self.sync()?;
            let path = ledger_path(&self.dir, p.ledger_id);
            let fresh = !path.exists();
            let mut f = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .map_err(io_err("open", &path))?;
            if fresh {
                f.write_all(HEADER).map_err(io_err("write", &path))?;
                f.sync_all().map_err(io_err("sync", &path))?;
                sync_dir(&self.dir)?;
            }
            self.current = Some((p.ledger_id, BufWriter::with_capacity(256 * 1024, f)));
        }
        let body_len = 16 + section.len();
        let mut rec = Vec::with_capacity(8 + body_len);
        rec.extend_from_slice(&(body_len as u32).to_be_bytes());
        rec.extend_from_slice(&[0; 4]);
        rec.extend_from_slice(&p.ledger_id.to_be_bytes());
        rec.extend_from_slice(&p.entry_id.to_be_bytes());
        rec.extend_from_slice(section);
        let crc = crc32c::crc32c(&rec[8..]);
        rec[4..8].copy_from_slice(&crc.to_be_bytes());
        let (_, f) = self.current.as_mut().expect("opened above");
        f.write_all(&rec)
            .map_err(io_err("append", &ledger_path(&self.dir, p.ledger_id)))?;
        self.buffered = true;
        Ok(())
    }

    /// Hands the buffered entries to the OS (one `write`): after this they survive the broker
    /// process being killed.
    pub(crate) fn flush(&mut self) -> Result<(), StorageError> {
        if !self.buffered {
            return Ok(());
        }
        if let Some((id, f)) = &mut self.current {
            f.flush()
                .map_err(io_err("write", &ledger_path(&self.dir, *id)))?;
        }
        self.buffered = false;
        self.dirty = true;
        Ok(())
    }

    /// Flushes, then `fsync`s what was appended since the last sync.
    pub(crate) fn sync(&mut self) -> Result<(), StorageError> {
        self.flush()?;
        if !self.dirty {
            return Ok(());
        }
        if let Some((id, f)) = &self.current {
            f.get_ref()
                .sync_data()
                .map_err(io_err("sync", &ledger_path(&self.dir, *id)))?;
        }
        self.dirty = false;
        Ok(())
    }

    /// Deletes the files of ledgers whose every entry is below `below` (retention).
    pub(crate) fn delete_below(&mut self, below: Position) {
        let Ok(list) = fs::read_dir(&self.dir) else {
            return;
        };
        for e in list.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(id) = name
                .strip_prefix("ledger-")
                .and_then(|r| r.strip_suffix(".log"))
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            let current = self.current.as_ref().map(|(c, _)| *c);
            if id < below.ledger_id && Some(id) != current {
                match fs::remove_file(e.path()) {
                    Ok(()) => {
                        debug!(file = %e.path().display(), "ledger file removed by retention")
                    }
                    Err(err) => {
                        warn!(file = %e.path().display(), error = %err, "cannot remove a ledger file")
                    }
                }
            }
        }
    }
}

fn ledger_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("ledger-{id:012}.log"))
}

pub(crate) fn sync_dir(dir: &Path) -> Result<(), StorageError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err("sync", dir))
}

/// Reads one log file into `out`. In the newest file a bad tail is cut; elsewhere it is an
/// error.
fn read_log(path: &Path, newest: bool, out: &mut Vec<Recovered>) -> Result<(), StorageError> {
    let mut bytes = Vec::new();
    File::open(path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(io_err("read", path))?;
    let corrupt = |offset: usize, reason: String| StorageError::Corrupt {
        path: path.to_path_buf(),
        offset: offset as u64,
        reason,
    };
    if bytes.len() < HEADER.len() {
        if newest {
            warn!(file = %path.display(), len = bytes.len(), "torn log header; rewriting the empty file");
            fs::write(path, HEADER).map_err(io_err("rewrite", path))?;
            return Ok(());
        }
        return Err(corrupt(0, "file shorter than its header".into()));
    }
    if &bytes[..HEADER.len()] != HEADER {
        return Err(corrupt(0, "not a topic log (bad header)".into()));
    }
    let mut at = HEADER.len();
    let mut last: Option<Position> = None;
    while at < bytes.len() {
        let problem = match record_at(&bytes, at) {
            Ok((p, section, next)) => {
                if last.is_some_and(|l| p <= l) {
                    Some(format!("position {p} does not ascend"))
                } else {
                    out.push((p, section.to_vec()));
                    last = Some(p);
                    at = next;
                    None
                }
            }
            Err(reason) => Some(reason.to_string()),
        };
        if let Some(reason) = problem {
            if newest && is_tail(&bytes, at) {
                warn!(file = %path.display(), offset = at, reason, "torn tail cut at the last whole record");
                let f = OpenOptions::new()
                    .write(true)
                    .open(path)
                    .map_err(io_err("open", path))?;
                f.set_len(at as u64).map_err(io_err("truncate", path))?;
                f.sync_all().map_err(io_err("sync", path))?;
                return Ok(());
            }
            return Err(corrupt(at, reason));
        }
    }
    Ok(())
}

/// Why the bytes at an offset are not a whole record.
#[derive(Debug, thiserror::Error)]
enum RecordError {
    #[error("record header cut short")]
    HeaderCut,
    #[error("record length {0} out of range")]
    Length(u32),
    #[error("record of {0} bytes cut short")]
    BodyCut(u32),
    #[error("checksum {actual:08x} does not match {stored:08x}")]
    Checksum { actual: u32, stored: u32 },
}

/// The record at `at`: position, section and the next offset; or why it is not whole.
fn record_at(bytes: &[u8], at: usize) -> Result<(Position, &[u8], usize), RecordError> {
    let head = bytes.get(at..at + 8).ok_or(RecordError::HeaderCut)?;
    let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
    let stored = u32::from_be_bytes([head[4], head[5], head[6], head[7]]);
    if !(16..=MAX_RECORD).contains(&len) {
        return Err(RecordError::Length(len));
    }
    let body = bytes
        .get(at + 8..at + 8 + len as usize)
        .ok_or(RecordError::BodyCut(len))?;
    let actual = crc32c::crc32c(body);
    if actual != stored {
        return Err(RecordError::Checksum { actual, stored });
    }
    let word = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&body[i..i + 8]);
        u64::from_be_bytes(b)
    };
    Ok((
        Position::new(word(0), word(8)),
        &body[16..],
        at + 8 + len as usize,
    ))
}

/// Whether the bad record at `at` is the file's last: a torn write, not a corrupt middle.
/// It is when no whole, valid record starts after it, following the lengths the records claim
/// (a loop, not recursion: a file of millions of tiny bad records must not exhaust the stack).
fn is_tail(bytes: &[u8], mut at: usize) -> bool {
    loop {
        let Some(head) = bytes.get(at..at + 4) else {
            return true;
        };
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        // A record that claims to run past the end, or ends exactly at the end, is the tail.
        match at.checked_add(8 + len) {
            Some(end) if end < bytes.len() => {
                if record_at(bytes, end).is_ok() {
                    return false;
                }
                at = end;
            }
            _ => return true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("broker-log-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    fn write_entries(dir: &Path, ps: &[Position]) {
        let (mut log, _) = TopicLog::open(dir).unwrap();
        for (i, p) in ps.iter().enumerate() {
            log.append(*p, format!("section-{i}").as_bytes()).unwrap();
        }
        log.sync().unwrap();
    }

    #[test]
    fn names_round_trip() {
        let n = "persistent://public/default/a b%";
        assert_eq!(decode_name(&encode_name(n)).as_deref(), Some(n));
        assert!(!encode_name(n).contains('/'));
        assert_eq!(decode_name("%zz"), None);
    }

    #[test]
    fn entries_come_back_across_ledger_files() {
        let dir = scratch("back");
        let ps = [
            Position::new(1, 0),
            Position::new(1, 1),
            Position::new(2, 0),
            Position::new(4, 3),
        ];
        write_entries(&dir, &ps);
        let (_, got) = TopicLog::open(&dir).unwrap();
        let positions: Vec<_> = got.iter().map(|(p, _)| *p).collect();
        assert_eq!(positions, ps);
        assert_eq!(got[3].1, b"section-3");
        let _ = fs::remove_dir_all(&dir);
    }

    /// Cutting the newest file at every byte offset: recovery keeps exactly the whole records
    /// before the cut, and the cut file keeps working for appends.
    #[test]
    fn a_torn_tail_is_cut_at_every_offset() {
        let dir = scratch("torn");
        let ps: Vec<_> = (0..4).map(|e| Position::new(1, e)).collect();
        write_entries(&dir, &ps);
        let path = ledger_path(&dir, 1);
        let full = fs::read(&path).unwrap();
        // Record boundaries: header, then each record.
        let mut ends = vec![HEADER.len()];
        let mut at = HEADER.len();
        while at < full.len() {
            let (_, _, next) = record_at(&full, at).unwrap();
            ends.push(next);
            at = next;
        }
        for cut in 0..full.len() {
            fs::write(&path, &full[..cut]).unwrap();
            let (mut log, got) = TopicLog::open(&dir).unwrap();
            let whole = ends.iter().filter(|e| **e <= cut).count().saturating_sub(1);
            assert_eq!(got.len(), whole, "cut at {cut}");
            log.append(Position::new(1, whole as u64), b"again")
                .unwrap();
            log.sync().unwrap();
            drop(log);
            let (_, again) = TopicLog::open(&dir).unwrap();
            assert_eq!(again.len(), whole + 1, "append after the cut at {cut}");
        }
        let _ = fs::remove_dir_all(&dir);
    }

    /// A newest file that is a long run of tiny bad records (zeros after the header) is one
    /// torn tail, cut at the header. The tail check once recursed per record and overflowed the
    /// stack here (2 million records).
    #[test]
    fn a_long_bad_tail_is_cut_without_exhausting_the_stack() {
        let dir = scratch("long-tail");
        fs::create_dir_all(&dir).unwrap();
        let path = ledger_path(&dir, 1);
        let mut bytes = HEADER.to_vec();
        bytes.resize(HEADER.len() + 16 * 1024 * 1024, 0);
        fs::write(&path, &bytes).unwrap();
        let (_, got) = TopicLog::open(&dir).unwrap();
        assert!(got.is_empty());
        assert_eq!(fs::metadata(&path).unwrap().len(), HEADER.len() as u64);
        let _ = fs::remove_dir_all(&dir);
    }

    /// A damaged record followed by good ones, or in an older file, is an error naming the file
    /// and offset, never skipped.
    #[test]
    fn a_corrupt_middle_is_an_error() {
        let dir = scratch("corrupt");
        let ps = [
            Position::new(1, 0),
            Position::new(1, 1),
            Position::new(1, 2),
            Position::new(2, 0),
        ];
        write_entries(&dir, &ps);
        let path = ledger_path(&dir, 1);
        let mut bytes = fs::read(&path).unwrap();
        let second = {
            let (_, _, next) = record_at(&bytes, HEADER.len()).unwrap();
            next
        };
        bytes[second + 20] ^= 0x40;
        fs::write(&path, &bytes).unwrap();
        match TopicLog::open(&dir) {
            Err(StorageError::Corrupt {
                path: p, offset, ..
            }) => {
                assert_eq!(p, path);
                assert_eq!(offset, second as u64);
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
        // In the newest file, a bad record with a good one after it is also corrupt.
        let dir2 = scratch("corrupt2");
        write_entries(&dir2, &ps[..3]);
        let path2 = ledger_path(&dir2, 1);
        let mut b2 = fs::read(&path2).unwrap();
        b2[HEADER.len() + 12] ^= 1;
        fs::write(&path2, &b2).unwrap();
        assert!(matches!(
            TopicLog::open(&dir2),
            Err(StorageError::Corrupt { offset: 8, .. })
        ));
        let _ = fs::remove_dir_all(&dir);
        let _ = fs::remove_dir_all(&dir2);
    }

    #[test]
    fn retention_removes_whole_ledger_files() {
        let dir = scratch("retention");
        let ps = [
            Position::new(1, 0),
            Position::new(2, 0),
            Position::new(3, 0),
        ];
        write_entries(&dir, &ps);
        let (mut log, _) = TopicLog::open(&dir).unwrap();
        log.delete_below(Position::new(3, 0));
        let (_, got) = TopicLog::open(&dir).unwrap();
        assert_eq!(got.iter().map(|(p, _)| *p).collect::<Vec<_>>(), [ps[2]]);
        let _ = fs::remove_dir_all(&dir);
    }
}
