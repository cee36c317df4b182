//! Where the metadata is kept: nowhere ([`MemoryMetadata`]) or one JSON file written
//! durably after every change ([`FileMetadata`]).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::Metadata;
use crate::storage::{write_durably, StorageError};

/// Keeps the broker's [`Metadata`]: what a distributed metadata store (ZooKeeper, etcd) would
/// implement too.
pub(crate) trait MetadataStore: Send + Sync + std::fmt::Debug {
    /// The metadata kept, or `None` when nothing was kept yet.
    fn load(&self) -> Result<Option<Metadata>, StorageError>;

    /// Keeps `metadata`, replacing what was kept; durable when this returns.
    fn save(&self, metadata: &Metadata) -> Result<(), StorageError>;
}

/// Keeps nothing: a broker without `--data-dir` starts from Pulsar standalone's defaults.
#[derive(Debug, Default)]
pub(crate) struct MemoryMetadata;

impl MetadataStore for MemoryMetadata {
    fn load(&self) -> Result<Option<Metadata>, StorageError> {
        Ok(None)
    }

    fn save(&self, _: &Metadata) -> Result<(), StorageError> {
        Ok(())
    }
}

/// The metadata in one JSON file (`DIR/metadata.json`), replaced through a temporary file,
/// fsync and rename.
#[derive(Debug)]
pub(crate) struct FileMetadata {
    path: PathBuf,
}

/// The file's format version: a broker refuses a file of a version it does not know.
const VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
struct MetadataFile {
    version: u32,
    #[serde(flatten)]
    metadata: Metadata,
}

impl FileMetadata {
    /// The metadata in file `path` (which need not exist yet).
    pub(crate) fn new(path: PathBuf) -> FileMetadata {
        FileMetadata { path }
    }
}

impl MetadataStore for FileMetadata {
    fn load(&self) -> Result<Option<Metadata>, StorageError> {
        let bytes = match std::fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(StorageError::Io {
                    op: "read",
                    path: self.path.clone(),
                    source,
                })
            }
        };
        let unreadable = |reason: String| StorageError::Unreadable {
            path: self.path.clone(),
            reason,
        };
        // The version first: a newer file may not parse as this version's fields.
        let v: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|e| unreadable(e.to_string()))?;
        match v.get("version").and_then(serde_json::Value::as_u64) {
            Some(n) if n == u64::from(VERSION) => {}
            other => {
                return Err(unreadable(format!(
                    "format version {other:?} (this broker reads {VERSION})"
                )))
            }
        }
        let file: MetadataFile =
            serde_json::from_value(v).map_err(|e| unreadable(e.to_string()))?;
        Ok(Some(file.metadata))
    }

    fn save(&self, metadata: &Metadata) -> Result<(), StorageError> {
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| StorageError::Io {
                op: "create",
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let file = MetadataFile {
            version: VERSION,
            metadata: metadata.clone(),
        };
        let body = serde_json::to_vec_pretty(&file).map_err(|e| StorageError::Unreadable {
            path: self.path.clone(),
            reason: format!("cannot serialise: {e}"),
        })?;
        write_durably(&self.path, &body)
    }
}
