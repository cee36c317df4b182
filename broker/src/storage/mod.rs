//! Where a topic's entries live: the [`EntryStore`] trait, in memory ([`MemoryEntries`]) or in
//! the topic's log files under `--data-dir` with a read cache ([`FileEntries`]).
//!
//! Durable topics keep an append-only log per topic, one file per ledger id, each record
//! checked by CRC32C.
//!
//! Layout under `--data-dir`:
//!
//! ```text
//! DIR/topics/<topic, percent-encoded>/ledger-<id>.log      entries of one ledger, in order
//! DIR/topics/<topic>/subscriptions/<sub>.json              the subscription's type and mode
//! DIR/topics/<topic>/subscriptions/<sub>.cursor            its cursor (cursor::FileStore)
//! ```
//!
//! A log file is a `cursor::segment` file (the framing the cursor files use too): an 8-byte
//! header (`KOLOG`, 0, 0, version 1) and records `[u32 body length][u32 CRC32C of body][body]`,
//! body = `[u64 ledger id][u64 entry id]` and the entry's `0e01…` payload section as the
//! producer sent it (the entry's metadata is decoded from it again on recovery). All integers
//! big-endian.
//!
//! Recovery reads every file in ledger order. An incomplete or mismatching record at the end
//! of the newest file is a torn write: the file is cut at the last whole record, with a WARN.
//! Anything wrong anywhere else is [`StorageError::Corrupt`], naming the file and the offset:
//! the broker refuses to start rather than silently skip entries. After recovery, new entries
//! go to a new ledger id, so a position is never reused even if the OS lost the tail.

use std::io;
use std::path::{Path, PathBuf};

mod cache;
mod entries;
mod faults;
mod log;

pub(crate) use cache::ReadCache;
pub(crate) use entries::{Cached, EntryStore, FileEntries, MemoryEntries};
pub(crate) use faults::FaultyEntries;
pub use faults::StoreFaults;

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
    /// A stored entry that does not read back as an entry.
    #[error("entry {position} of {topic}: {reason}")]
    Entry {
        /// The topic.
        topic: String,
        /// The entry's position.
        position: cursor::Position,
        /// What is wrong.
        reason: String,
    },
    /// A whole file (metadata, a catalog's JSON) that does not read back as what it holds.
    #[error("unreadable {path}: {reason}")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A subscription's cursor file that cannot be opened or read.
    #[error("cursor file {path}: {source}")]
    Cursor {
        /// The file.
        path: PathBuf,
        /// What the cursor's store said.
        #[source]
        source: cursor::StoreError,
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

pub(super) fn io_err<'a>(
    op: &'static str,
    path: &'a Path,
) -> impl FnOnce(io::Error) -> StorageError + 'a {
    move |source| StorageError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// What [`encode_name`] escapes: every byte but ASCII letters, digits, `-`, `_` and `.`.
const NAME_ESCAPES: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.');

/// Percent-encodes a name into one safe path component (`%XX`, upper-case hex).
pub(crate) fn encode_name(name: &str) -> String {
    percent_encoding::utf8_percent_encode(name, NAME_ESCAPES).to_string()
}

/// The inverse of [`encode_name`]; `None` for a name it did not produce.
pub(crate) fn decode_name(s: &str) -> Option<String> {
    let name = percent_encoding::percent_decode_str(s).decode_utf8().ok()?;
    (encode_name(&name) == s).then(|| name.into_owned())
}

/// `fsync`s a directory, so a file created or renamed in it survives a crash.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), StorageError> {
    cursor::segment::sync_dir(dir).map_err(io_err("sync", dir))
}

/// Writes `bytes` to `path` atomically and durably: a new temporary file in the same directory
/// (a unique name, removed if anything fails), fsync, rename over `path`, and a directory sync.
/// A crash leaves the old file or the new one, never a mix.
pub(crate) fn write_durably(path: &Path, bytes: &[u8]) -> Result<(), StorageError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(io_err("create", dir))?;
    std::io::Write::write_all(&mut tmp, bytes).map_err(io_err("write", tmp.path()))?;
    tmp.as_file()
        .sync_all()
        .map_err(io_err("sync", tmp.path()))?;
    tmp.persist(path)
        .map_err(|e| io_err("rename", path)(e.error))?;
    sync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        let n = "persistent://public/default/a b%";
        assert_eq!(decode_name(&encode_name(n)).as_deref(), Some(n));
        assert!(!encode_name(n).contains('/'));
        assert_eq!(decode_name("%zz"), None);
    }
}
