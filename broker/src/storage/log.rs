//! The log file format and its recovery: one file per ledger, CRC32C-checked records.

use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Read, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

use cursor::segment::{FrameError, SegmentFormat, HEADER_LEN, RECORD_HEADER_LEN};
use cursor::Position;
use tracing::{debug, warn};

use super::{io_err, sync_dir, StorageError};

/// A ledger file: header `KOLOG\0\0\x01`, records whose body is the entry's position (two
/// big-endian u64) and its payload section; a body is at most 300 MiB (a frame can be at most
/// 256 MiB and padding).
const LOG: SegmentFormat = SegmentFormat {
    magic: *b"KOLOG\0\0\x01",
    min_body: POSITION_LEN as u32,
    max_body: 300 * 1024 * 1024,
};

/// A record's body starts with the entry's position: ledger id and entry id, big-endian.
const POSITION_LEN: usize = 16;

/// One entry as recovery reads it: its position, its payload section, and where its record
/// lies in its ledger's file.
#[derive(Debug)]
pub(crate) struct Record<'a> {
    pub position: Position,
    pub section: &'a [u8],
    pub bytes: Range<u64>,
}

/// A topic's log.
#[derive(Debug)]
pub(crate) struct TopicLog {
    dir: PathBuf,
    /// The ledger being written, its buffered file, and the file's length with the buffer.
    current: Option<(u64, BufWriter<File>, u64)>,
    /// Bytes appended to the write buffer and not yet handed to the OS.
    pending: u64,
    /// Bytes handed to the OS over the log's life (a count that only grows).
    flushed: u64,
    /// Of those, the bytes known to be on the disk.
    synced: u64,
    /// A second handle of the ledger file being written, to `fsync` it without the log's lock
    /// ([`TopicLog::sync_target`]).
    sync_file: Option<Arc<File>>,
}

/// What one `fsync` outside the log's lock covers ([`TopicLog::sync_target`]).
#[derive(Debug)]
pub(crate) struct SyncTarget {
    /// Every byte handed to the OS up to this count.
    pub upto: u64,
    /// The file to `fsync` and its path (earlier ledgers' files were synced when the next one
    /// opened).
    pub file: Option<(Arc<File>, PathBuf)>,
}

impl TopicLog {
    /// Opens (creating) the topic's directory and hands every entry to `visit`, in order,
    /// cutting a torn tail. Returns the log and how many entries it read.
    pub(crate) fn open(
        dir: &Path,
        mut visit: impl FnMut(Record<'_>) -> Result<(), StorageError>,
    ) -> Result<(TopicLog, u64), StorageError> {
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
        let mut entries = 0;
        for (i, id) in ids.iter().enumerate() {
            let path = ledger_path(dir, *id);
            let newest = i + 1 == ids.len();
            entries += read_log(&path, newest, &mut visit)?;
        }
        debug!(dir = %dir.display(), ledgers = ids.len(), entries, "topic log recovered");
        Ok((
            TopicLog {
                dir: dir.to_path_buf(),
                current: None,
                pending: 0,
                flushed: 0,
                synced: 0,
                sync_file: None,
            },
            entries,
        ))
    }

    /// Appends one entry to the write buffer: it is in the OS after [`TopicLog::flush`] (enough
    /// to survive the broker being killed) and on the disk after [`TopicLog::sync`]. Returns
    /// where its record lies in its ledger's file.
    pub(crate) fn append(
        &mut self,
        p: Position,
        section: &[u8],
    ) -> Result<Range<u64>, StorageError> {
        if self.current.as_ref().map(|(id, _, _)| *id) != Some(p.ledger_id) {
            self.sync()?;
            let path = ledger_path(&self.dir, p.ledger_id);
            let fresh = !path.exists();
            let mut f = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .map_err(io_err("open", &path))?;
            if fresh {
                f.write_all(&LOG.magic).map_err(io_err("write", &path))?;
                f.sync_all().map_err(io_err("sync", &path))?;
                sync_dir(&self.dir)?;
            }
            let len = f.metadata().map_err(io_err("stat", &path))?.len();
            self.sync_file = Some(Arc::new(f.try_clone().map_err(io_err("open", &path))?));
            self.current = Some((p.ledger_id, BufWriter::with_capacity(256 * 1024, f), len));
        }
        // Straight into the write buffer: header, position, section.
        let (ledger, entry) = (p.ledger_id.to_be_bytes(), p.entry_id.to_be_bytes());
        let body: [&[u8]; 3] = [&ledger, &entry, section];
        let head = LOG.record_header(&body);
        let (_, f, len) = self.current.as_mut().expect("opened above");
        std::iter::once(&head[..])
            .chain(body)
            .try_for_each(|part| f.write_all(part))
            .map_err(ledger_err("append", &self.dir, p.ledger_id))?;
        let record = (head.len() + POSITION_LEN + section.len()) as u64;
        let start = *len;
        *len += record;
        self.pending += record;
        Ok(start..*len)
    }

    /// Drops the ledger being written without writing what its buffer holds (a failed write's
    /// entries, taken back): the next append opens its ledger's file again.
    pub(crate) fn abandon(&mut self) {
        if let Some((_, f, _)) = self.current.take() {
            let (file, _unwritten) = f.into_parts();
            drop(file);
        }
        self.sync_file = None;
        self.pending = 0;
        self.synced = self.flushed;
    }

    /// The ledger being written, if any.
    pub(crate) fn current_ledger(&self) -> Option<u64> {
        self.current.as_ref().map(|(id, _, _)| *id)
    }

    /// Hands the buffered entries to the OS (one `write`): after this they survive the broker
    /// process being killed.
    pub(crate) fn flush(&mut self) -> Result<(), StorageError> {
        if self.pending == 0 {
            return Ok(());
        }
        if let Some((id, f, _)) = &mut self.current {
            f.flush().map_err(ledger_err("write", &self.dir, *id))?;
        }
        self.flushed += std::mem::take(&mut self.pending);
        Ok(())
    }

    /// Bytes handed to the OS so far (after a [`flush`](Self::flush): every append so far).
    pub(crate) fn flushed(&self) -> u64 {
        self.flushed
    }

    /// Bytes known to be on the disk.
    pub(crate) fn synced(&self) -> u64 {
        self.synced
    }

    /// Flushes and says what an `fsync` now would make durable, to run without the log's lock
    /// (appends go on meanwhile); [`synced_upto`](Self::synced_upto) records it when done.
    pub(crate) fn sync_target(&mut self) -> Result<SyncTarget, StorageError> {
        self.flush()?;
        let path = self.current_ledger().map(|id| ledger_path(&self.dir, id));
        Ok(SyncTarget {
            upto: self.flushed,
            file: self.sync_file.clone().zip(path),
        })
    }

    /// An `fsync` begun at [`sync_target`](Self::sync_target) `upto` finished.
    pub(crate) fn synced_upto(&mut self, upto: u64) {
        self.synced = self.synced.max(upto);
    }

    /// Flushes, then `fsync`s what was appended since the last sync.
    pub(crate) fn sync(&mut self) -> Result<(), StorageError> {
        self.flush()?;
        if self.synced >= self.flushed {
            return Ok(());
        }
        if let Some((id, f, _)) = &self.current {
            f.get_ref()
                .sync_data()
                .map_err(ledger_err("sync", &self.dir, *id))?;
        }
        self.synced = self.flushed;
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
            let current = self.current_ledger();
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

/// [`io_err`] for ledger `id`'s file, whose path is only built if there is an error (appends
/// and flushes run per entry and per batch).
fn ledger_err<'a>(
    op: &'static str,
    dir: &'a Path,
    id: u64,
) -> impl FnOnce(std::io::Error) -> StorageError + 'a {
    move |e| io_err(op, &ledger_path(dir, id))(e)
}

/// The file of ledger `id` in the log directory `dir`.
pub(crate) fn ledger_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("ledger-{id:012}.log"))
}

/// Reads one log file, handing each record to `visit`; returns how many it read. In the newest
/// file a bad tail is cut; elsewhere it is an error.
fn read_log(
    path: &Path,
    newest: bool,
    visit: &mut impl FnMut(Record<'_>) -> Result<(), StorageError>,
) -> Result<u64, StorageError> {
    let mut n = 0;
    let mut bytes = Vec::new();
    File::open(path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(io_err("read", path))?;
    let corrupt = |offset: usize, reason: String| StorageError::Corrupt {
        path: path.to_path_buf(),
        offset: offset as u64,
        reason,
    };
    if bytes.len() < HEADER_LEN {
        if newest {
            warn!(file = %path.display(), len = bytes.len(), "torn log header; rewriting the empty file");
            fs::write(path, LOG.magic).map_err(io_err("rewrite", path))?;
            return Ok(0);
        }
        return Err(corrupt(0, "file shorter than its header".into()));
    }
    if !LOG.header_ok(&bytes) {
        return Err(corrupt(0, "not a topic log (bad header)".into()));
    }
    let mut at = HEADER_LEN;
    let mut last: Option<Position> = None;
    while at < bytes.len() {
        let problem = match record_at(&bytes, at) {
            Ok((p, section, next)) => {
                if last.is_some_and(|l| p <= l) {
                    Some(format!("position {p} does not ascend"))
                } else {
                    visit(Record {
                        position: p,
                        section,
                        bytes: at as u64..next as u64,
                    })?;
                    n += 1;
                    last = Some(p);
                    at = next;
                    None
                }
            }
            Err(reason) => Some(reason.to_string()),
        };
        if let Some(reason) = problem {
            if newest && LOG.is_tail(&bytes, at) {
                warn!(file = %path.display(), offset = at, reason, "torn tail cut at the last whole record");
                let f = OpenOptions::new()
                    .write(true)
                    .open(path)
                    .map_err(io_err("open", path))?;
                f.set_len(at as u64).map_err(io_err("truncate", path))?;
                f.sync_all().map_err(io_err("sync", path))?;
                return Ok(n);
            }
            return Err(corrupt(at, reason));
        }
    }
    Ok(n)
}

/// Reads the whole records in `bytes` of a ledger file with one positioned read: each one's
/// position and section (slices of one buffer), checked (CRC32C) as on recovery.
pub(crate) fn read_records(
    file: &File,
    path: &Path,
    bytes: Range<u64>,
) -> Result<Vec<(Position, Bytes)>, StorageError> {
    use std::os::unix::fs::FileExt;
    let len = usize::try_from(bytes.end.saturating_sub(bytes.start)).unwrap_or(usize::MAX);
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, bytes.start)
        .map_err(io_err("read", path))?;
    let buf = Bytes::from(buf);
    let mut records = Vec::new();
    let mut at = 0;
    while at < buf.len() {
        let (p, _, next) = record_at(&buf, at).map_err(|e| StorageError::Corrupt {
            path: path.to_path_buf(),
            offset: bytes.start + at as u64,
            reason: e.to_string(),
        })?;
        records.push((p, buf.slice(at + RECORD_HEADER_LEN + POSITION_LEN..next)));
        at = next;
    }
    Ok(records)
}

/// The record at `at`: position, section and the next offset; or why it is not whole.
fn record_at(bytes: &[u8], at: usize) -> Result<(Position, &[u8], usize), FrameError> {
    let (body, next) = LOG.record_at(bytes, at)?;
    Ok((position(body), &body[POSITION_LEN..], next))
}

/// The position at the start of a record's body (the format's minimum body).
fn position(body: &[u8]) -> Position {
    let word = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&body[i..i + 8]);
        u64::from_be_bytes(b)
    };
    Position::new(word(0), word(8))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Opens the log and collects every entry.
    type Entries = Vec<(Position, Vec<u8>)>;

    fn open_all(dir: &Path) -> Result<(TopicLog, Entries), StorageError> {
        let mut got = Vec::new();
        let (log, n) = TopicLog::open(dir, |r| {
            got.push((r.position, r.section.to_vec()));
            Ok(())
        })?;
        assert_eq!(n as usize, got.len());
        Ok((log, got))
    }

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("broker-log-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    fn write_entries(dir: &Path, ps: &[Position]) {
        let (mut log, _) = open_all(dir).unwrap();
        for (i, p) in ps.iter().enumerate() {
            log.append(*p, format!("section-{i}").as_bytes()).unwrap();
        }
        log.sync().unwrap();
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
        let (_, got) = open_all(&dir).unwrap();
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
        let mut ends = vec![HEADER_LEN];
        let mut at = HEADER_LEN;
        while at < full.len() {
            let (_, _, next) = record_at(&full, at).unwrap();
            ends.push(next);
            at = next;
        }
        for cut in 0..full.len() {
            fs::write(&path, &full[..cut]).unwrap();
            let (mut log, got) = open_all(&dir).unwrap();
            let whole = ends.iter().filter(|e| **e <= cut).count().saturating_sub(1);
            assert_eq!(got.len(), whole, "cut at {cut}");
            log.append(Position::new(1, whole as u64), b"again")
                .unwrap();
            log.sync().unwrap();
            drop(log);
            let (_, again) = open_all(&dir).unwrap();
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
        let mut bytes = LOG.magic.to_vec();
        bytes.resize(HEADER_LEN + 16 * 1024 * 1024, 0);
        fs::write(&path, &bytes).unwrap();
        let (_, got) = open_all(&dir).unwrap();
        assert!(got.is_empty());
        assert_eq!(fs::metadata(&path).unwrap().len(), HEADER_LEN as u64);
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
            let (_, _, next) = record_at(&bytes, HEADER_LEN).unwrap();
            next
        };
        bytes[second + 20] ^= 0x40;
        fs::write(&path, &bytes).unwrap();
        match open_all(&dir) {
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
        b2[HEADER_LEN + 12] ^= 1;
        fs::write(&path2, &b2).unwrap();
        assert!(matches!(
            open_all(&dir2),
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
        let (mut log, _) = open_all(&dir).unwrap();
        log.delete_below(Position::new(3, 0));
        let (_, got) = open_all(&dir).unwrap();
        assert_eq!(got.iter().map(|(p, _)| *p).collect::<Vec<_>>(), [ps[2]]);
        let _ = fs::remove_dir_all(&dir);
    }
}
