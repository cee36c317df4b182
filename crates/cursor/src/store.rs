//! Durable cursor state: the persisted form, the store trait, an in-memory store and the file
//! store (an append-only log of checksummed snapshot records with compaction).

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use tracing::{debug, warn};

use crate::ackset::AckSet;
use crate::batch::BatchAcks;
use crate::codec::{DecodeError, Reader, Writer};
use crate::entry::Position;
use crate::error::StoreError;
use crate::segment::{self, SegmentFormat};

const STATE_VERSION: u8 = 1;

/// Everything a cursor needs to come back after a restart. Read position, backlog counts and
/// the dirty flag are derived again from this and the ledger.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PersistedState {
    /// The cursor (subscription) name.
    pub name: String,
    /// The mark-delete position.
    pub mark_delete: Position,
    /// Positions acked above mark-delete (no cap on how many ranges).
    pub acked: AckSet,
    /// Partially acked batch entries above mark-delete.
    pub batch_acks: BTreeMap<Position, BatchAcks>,
    /// The caller-supplied last-active time in milliseconds.
    pub last_active: u64,
}

impl PersistedState {
    /// The compact binary form: version byte, name, mark-delete, last-active, then the acked set
    /// (per ledger, per 4096-entry block: delta-varint runs or a 512-byte bitmap) and the batch
    /// bitsets. No checksum: stores add their own framing.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.byte(STATE_VERSION);
        w.varint(self.name.len() as u64);
        w.bytes(self.name.as_bytes());
        w.varint(self.mark_delete.ledger_id);
        w.varint(self.mark_delete.entry_id);
        w.varint(self.last_active);
        self.acked.encode(&mut w);
        w.varint(self.batch_acks.len() as u64);
        for (p, b) in &self.batch_acks {
            w.varint(p.ledger_id);
            w.varint(p.entry_id);
            w.varint(u64::from(b.batch_size()));
            for word in b.words() {
                w.varint(*word);
            }
        }
        w.into_inner()
    }

    /// Parses [`PersistedState::encode`]'s output; every malformed input is an error, never a
    /// panic or a silently different state.
    pub fn decode(buf: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(buf);
        if r.byte()? != STATE_VERSION {
            return Err(DecodeError {
                offset: 0,
                what: "unknown state version",
            });
        }
        let n = r.varint()?;
        let n = usize::try_from(n).map_err(|_| r.error("name too long"))?;
        let name = String::from_utf8(r.take(n)?.to_vec()).map_err(|_| r.error("name not utf-8"))?;
        let mark_delete = Position::new(r.varint()?, r.varint()?);
        let last_active = r.varint()?;
        let acked = AckSet::decode(&mut r)?;
        if acked.first().is_some_and(|f| f <= mark_delete) {
            return Err(r.error("acked position at or below mark-delete"));
        }
        let nb = r.varint()?;
        let mut batch_acks = BTreeMap::new();
        for _ in 0..nb {
            let p = Position::new(r.varint()?, r.varint()?);
            let size = u32::try_from(r.varint()?).map_err(|_| r.error("batch size too large"))?;
            let mut words = Vec::with_capacity(size.div_ceil(64) as usize);
            for _ in 0..size.div_ceil(64) {
                words.push(r.varint()?);
            }
            let b =
                BatchAcks::from_words(size, words).ok_or_else(|| r.error("bad batch bitset"))?;
            if p <= mark_delete || acked.contains(p) || b.is_complete() {
                return Err(r.error("batch bitset for an acked position"));
            }
            if batch_acks.insert(p, b).is_some() {
                return Err(r.error("duplicate batch bitset"));
            }
        }
        if !r.is_empty() {
            return Err(r.error("trailing bytes"));
        }
        Ok(PersistedState {
            name,
            mark_delete,
            acked,
            batch_acks,
            last_active,
        })
    }
}

/// Where a cursor persists its state. `save` must be durable when it returns `Ok` (for a store
/// that claims durability); `load` returns the last state saved, or `None` if there is none.
pub trait CursorStore {
    /// Persists `state`, replacing the previous one.
    fn save(&mut self, state: &PersistedState) -> Result<(), StoreError>;
    /// The last saved state, `None` when nothing was ever saved.
    fn load(&mut self) -> Result<Option<PersistedState>, StoreError>;
}

/// A non-durable store that keeps the last saved state in memory (tests, simulations).
///
/// It stores the encoded bytes, so a save/load round trip exercises the real codec.
#[derive(Clone, Debug, Default)]
pub struct MemoryStore {
    bytes: Option<Vec<u8>>,
    saves: u64,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        MemoryStore::default()
    }

    /// How many saves succeeded.
    pub fn saves(&self) -> u64 {
        self.saves
    }

    /// Size of the last saved encoding in bytes (0 when empty).
    pub fn stored_len(&self) -> usize {
        self.bytes.as_ref().map_or(0, Vec::len)
    }
}

impl CursorStore for MemoryStore {
    fn save(&mut self, state: &PersistedState) -> Result<(), StoreError> {
        self.bytes = Some(state.encode());
        self.saves += 1;
        Ok(())
    }

    fn load(&mut self) -> Result<Option<PersistedState>, StoreError> {
        match &self.bytes {
            None => Ok(None),
            Some(b) => PersistedState::decode(b)
                .map(Some)
                .map_err(|e| StoreError::Unavailable(e.to_string())),
        }
    }
}

impl<S: CursorStore + ?Sized> CursorStore for &mut S {
    fn save(&mut self, state: &PersistedState) -> Result<(), StoreError> {
        (**self).save(state)
    }
    fn load(&mut self) -> Result<Option<PersistedState>, StoreError> {
        (**self).load()
    }
}

/// The file's format: header `KODCUR\0\x02` and [`segment`](crate::segment) records whose
/// body is one [`PersistedState::encode`]. (Version 1, before the shared segment framing, had
/// CRC-32 records and is not read.)
const FORMAT: SegmentFormat = SegmentFormat {
    magic: *b"KODCUR\x00\x02",
    min_body: 1,
    max_body: 1 << 30,
};
const HEADER_LEN: u64 = segment::HEADER_LEN as u64;
const DEFAULT_COMPACT_BYTES: u64 = 1 << 20;

/// The result of scanning a store file.
#[derive(Debug)]
struct Scan {
    /// Offset and length of the last good record's body.
    last_good: Option<(u64, u64)>,
    /// End of the last good record (where the next record goes).
    valid_len: u64,
    /// First damaged record: offset and what was wrong.
    damage: Option<(u64, String)>,
}

/// A durable [`CursorStore`]: one file, an append-only log of self-contained snapshot records.
///
/// **Format.** A [`segment`](crate::segment) file: an 8-byte header `KODCUR\0\x02`, then
/// records `[len: u32 BE][CRC32C of the body: u32 BE][body]`, each body one
/// [`PersistedState::encode`]. Every record is a whole state, so any single good record is a
/// complete, consistent state.
///
/// **Save.** Truncate any damaged tail left by an earlier failure, append one record, `fsync`
/// (`sync_data`). When the file grows past the compaction threshold (default 1 MiB, and at
/// least four times the last record), it is compacted: header + last record are written to
/// `<path>.compact`, fsynced, renamed over the file, and the directory is fsynced.
///
/// **Load (recovery policy).** Records are scanned from the start; the first record that is
/// incomplete (torn write), longer than the file, or fails its checksum ends the scan, and
/// everything from it on is discarded (with a `warn!` naming file and offset). The state of the
/// last good record before it is returned: always a state that was saved in full, never a mix.
/// If the damage leaves no good record at all, or the header is damaged, load fails with
/// [`StoreError::Corrupt`] naming the file and offset. A good record whose payload does not
/// decode is also `Corrupt` (it passed its checksum, so it is a format problem, not a torn write).
/// An empty log (header only) loads as `None`.
///
/// ```
/// use cursor::{CursorStore, FileStore, InMemoryLedger, Ledger, EntryMeta, ManagedCursor};
/// let dir = std::env::temp_dir().join(format!("cursor-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let path = dir.join("sub.cursor");
/// # let _ = std::fs::remove_file(&path);
/// let mut ledger = InMemoryLedger::new(100);
/// let p = ledger.append(EntryMeta::simple(1, 10));
/// let mut c = ManagedCursor::new("sub", &ledger, FileStore::open(&path).unwrap());
/// c.ack(&ledger, p).unwrap();
/// c.persist().unwrap();
/// drop(c);
/// let c = ManagedCursor::recover(&ledger, FileStore::open(&path).unwrap()).unwrap();
/// assert_eq!(c.mark_delete_position(), p);
/// # std::fs::remove_dir_all(&dir).unwrap();
/// ```
#[derive(Debug)]
pub struct FileStore {
    path: PathBuf,
    file: File,
    valid_len: u64,
    file_len: u64,
    compact_bytes: u64,
    compactions: u64,
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> StoreError + 'a {
    move |source| StoreError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

fn sync_parent(path: &Path) -> Result<(), StoreError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    segment::sync_dir(dir).map_err(io_err("fsync dir", dir))
}

fn record(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    FORMAT.append_record(&[payload], &mut out);
    out
}

fn scan(bytes: &[u8]) -> Scan {
    let mut s = Scan {
        last_good: None,
        valid_len: HEADER_LEN,
        damage: None,
    };
    let mut at = segment::HEADER_LEN;
    while at < bytes.len() {
        match FORMAT.record_at(bytes, at) {
            Ok((body, next)) => {
                s.last_good = Some(((at + segment::RECORD_HEADER_LEN) as u64, body.len() as u64));
                at = next;
                s.valid_len = at as u64;
            }
            Err(e) => {
                s.damage = Some((at as u64, e.to_string()));
                break;
            }
        }
    }
    s
}

impl FileStore {
    /// Opens the store at `path`, creating it (atomically, with fsync of file and directory) if
    /// it does not exist. Opening never modifies an existing file; a damaged tail is truncated
    /// by the next [`CursorStore::save`].
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        if !path.exists() {
            let tmp = tmp_path(&path);
            write_new_file(&tmp, &FORMAT.magic)?;
            fs::rename(&tmp, &path).map_err(io_err("rename", &path))?;
            sync_parent(&path)?;
            debug!(path = %path.display(), "created cursor store");
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io_err("open", &path))?;
        let mut st = FileStore {
            path,
            file,
            valid_len: HEADER_LEN,
            file_len: 0,
            compact_bytes: DEFAULT_COMPACT_BYTES,
            compactions: 0,
        };
        let bytes = st.read_all()?;
        st.file_len = bytes.len() as u64;
        if FORMAT.header_ok(&bytes) {
            let s = scan(&bytes);
            st.valid_len = s.valid_len;
        } else {
            // A damaged header: load reports it; the next save rewrites the whole file.
            st.valid_len = 0;
        }
        Ok(st)
    }

    /// Sets the size in bytes past which the log is compacted (at least four last records).
    pub fn with_compaction_threshold(mut self, bytes: u64) -> Self {
        self.compact_bytes = bytes;
        self
    }

    /// The file path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The current size of the log in bytes (header and good records).
    pub fn len(&self) -> u64 {
        self.valid_len
    }

    /// Whether the log holds no record.
    pub fn is_empty(&self) -> bool {
        self.valid_len <= HEADER_LEN
    }

    /// How many compactions this handle performed.
    pub fn compactions(&self) -> u64 {
        self.compactions
    }

    fn read_all(&mut self) -> Result<Vec<u8>, StoreError> {
        let mut bytes = Vec::new();
        self.file
            .seek(SeekFrom::Start(0))
            .and_then(|_| self.file.read_to_end(&mut bytes))
            .map_err(io_err("read", &self.path))?;
        Ok(bytes)
    }

    fn compact(&mut self, rec: &[u8]) -> Result<(), StoreError> {
        let tmp = tmp_path(&self.path);
        let mut buf = Vec::with_capacity(segment::HEADER_LEN + rec.len());
        buf.extend_from_slice(&FORMAT.magic);
        buf.extend_from_slice(rec);
        write_new_file(&tmp, &buf)?;
        fs::rename(&tmp, &self.path).map_err(io_err("rename", &self.path))?;
        sync_parent(&self.path)?;
        self.file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.path)
            .map_err(io_err("open", &self.path))?;
        self.valid_len = buf.len() as u64;
        self.file_len = self.valid_len;
        self.compactions += 1;
        debug!(path = %self.path.display(), bytes = self.valid_len, "compacted cursor store");
        Ok(())
    }
}

fn tmp_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(".compact");
    PathBuf::from(s)
}

fn write_new_file(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let mut f = File::create(path).map_err(io_err("create", path))?;
    f.write_all(bytes).map_err(io_err("write", path))?;
    f.sync_all().map_err(io_err("fsync", path))
}

impl CursorStore for FileStore {
    fn save(&mut self, state: &PersistedState) -> Result<(), StoreError> {
        let payload = state.encode();
        if payload.len() as u64 > u64::from(FORMAT.max_body) {
            return Err(StoreError::Unavailable(format!(
                "state of {} bytes exceeds the {}-byte record limit",
                payload.len(),
                FORMAT.max_body
            )));
        }
        let rec = record(&payload);
        if self.file_len != self.valid_len {
            // Drop a damaged tail (from a torn write or an earlier failed save) first.
            self.file
                .set_len(self.valid_len)
                .map_err(io_err("truncate", &self.path))?;
            self.file_len = self.valid_len;
        }
        let grown = self.valid_len + rec.len() as u64;
        if self.valid_len < HEADER_LEN || grown > self.compact_bytes.max(4 * rec.len() as u64) {
            return self.compact(&rec);
        }
        // Any failure below leaves valid_len unchanged, so the partial record is cut next time.
        self.file_len = grown;
        self.file
            .seek(SeekFrom::Start(self.valid_len))
            .and_then(|_| self.file.write_all(&rec))
            .map_err(io_err("write", &self.path))?;
        self.file.sync_data().map_err(io_err("fsync", &self.path))?;
        self.valid_len = grown;
        Ok(())
    }

    fn load(&mut self) -> Result<Option<PersistedState>, StoreError> {
        let bytes = self.read_all()?;
        self.file_len = bytes.len() as u64;
        if !FORMAT.header_ok(&bytes) {
            self.valid_len = 0;
            return Err(StoreError::Corrupt {
                path: self.path.clone(),
                offset: 0,
                what: "missing or damaged file header".into(),
            });
        }
        let s = scan(&bytes);
        self.valid_len = s.valid_len;
        match (s.last_good, s.damage) {
            (None, None) => Ok(None),
            (None, Some((offset, what))) => Err(StoreError::Corrupt {
                path: self.path.clone(),
                offset,
                what,
            }),
            (Some((off, len)), damage) => {
                if let Some((offset, what)) = damage {
                    warn!(
                        path = %self.path.display(),
                        offset,
                        discarded = bytes.len() as u64 - offset,
                        what = %what,
                        "cursor store has a damaged tail; using the last good state"
                    );
                }
                let payload = &bytes[off as usize..(off + len) as usize];
                PersistedState::decode(payload)
                    .map(Some)
                    .map_err(|e| StoreError::Corrupt {
                        path: self.path.clone(),
                        offset: off + e.offset as u64,
                        what: e.what.to_string(),
                    })
            }
        }
    }
}
