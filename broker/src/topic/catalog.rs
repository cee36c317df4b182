//! Where a topic's subscriptions and schemas are recorded: the subscriptions' types and cursors,
//! and the schema versions. In memory ([`MemoryCatalog`]) nothing survives a restart; under
//! `--data-dir` ([`FileCatalog`]) `subscriptions/<name>.json` holds a subscription's type,
//! `<name>.cursor` its cursor, and the topic's `schemas.json` its schemas in version order.
//!
//! What a distributed store implements too: the records as keys in ZooKeeper or etcd, the
//! cursors there or in BookKeeper ledgers.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use cursor::{CursorStore, FileStore, MemoryStore, PersistedState, StoreError};
use dispatcher::{KeySharedConfig, KeySharedMode};
use serde::{Deserialize, Serialize};
use tracing::warn;
use wire::proto::{KeyValue, Schema};

use super::SubKind;
use crate::storage::{encode_name, StorageError};
use crate::sync::lock;

/// A topic's record of its subscriptions.
pub(crate) trait TopicCatalog: Send + Sync + std::fmt::Debug {
    /// The recorded subscriptions with their types, to restart them (an unreadable record is
    /// skipped with a WARN).
    fn recorded(&self) -> Vec<(String, SubKind)>;

    /// Records the subscription `name` with `kind` (a new one, or a type change).
    fn record(&self, name: &str, kind: SubKind) -> Result<(), StorageError>;

    /// The cursor store of `name`: as it is, to recover the cursor, or emptied (`fresh`), for
    /// a cursor that starts over.
    fn cursor_store(&self, name: &str, fresh: bool) -> Result<SubStore, StorageError>;

    /// Forgets `name` and its cursor.
    fn remove(&self, name: &str);

    /// Whether records survive a restart (a new cursor is then saved at once).
    fn durable(&self) -> bool;

    /// The topic's recorded schemas, in version order (none in memory). A record that does not
    /// read is an error: versions must not be handed out twice.
    fn schemas(&self) -> Result<Vec<Schema>, StorageError>;

    /// Records the topic's schemas, all of them in version order, before a new version is
    /// handed out.
    fn record_schemas(&self, all: &[Schema]) -> Result<(), StorageError>;

    /// Whether the topic was terminated (no entry is appended any more).
    fn terminated(&self) -> bool;

    /// Records that the topic is terminated, before the termination takes effect.
    fn record_terminated(&self) -> Result<(), StorageError>;
}

/// A subscription's cursor store: in memory, or a file under `--data-dir`.
#[derive(Debug)]
pub(crate) enum SubStore {
    /// Kept by the [`MemoryCatalog`] to restart the cursor when the subscription's type
    /// changes.
    Memory(Arc<Mutex<MemoryStore>>),
    File(FileStore),
}

impl CursorStore for SubStore {
    fn save(&mut self, state: &PersistedState) -> Result<(), StoreError> {
        match self {
            SubStore::Memory(s) => lock(s).save(state),
            SubStore::File(s) => s.save(state),
        }
    }

    fn load(&mut self) -> Result<Option<PersistedState>, StoreError> {
        match self {
            SubStore::Memory(s) => lock(s).load(),
            SubStore::File(s) => s.load(),
        }
    }
}

/// Subscriptions in memory: nothing is recorded across a restart; cursors are kept by name.
#[derive(Debug, Default)]
pub(crate) struct MemoryCatalog {
    cursors: Mutex<HashMap<String, Arc<Mutex<MemoryStore>>>>,
}

impl TopicCatalog for MemoryCatalog {
    fn recorded(&self) -> Vec<(String, SubKind)> {
        Vec::new()
    }

    fn record(&self, _: &str, _: SubKind) -> Result<(), StorageError> {
        Ok(())
    }

    fn cursor_store(&self, name: &str, fresh: bool) -> Result<SubStore, StorageError> {
        let mut cursors = lock(&self.cursors);
        if fresh {
            cursors.remove(name);
        }
        Ok(SubStore::Memory(
            cursors.entry(name.to_owned()).or_default().clone(),
        ))
    }

    fn remove(&self, name: &str) {
        lock(&self.cursors).remove(name);
    }

    fn durable(&self) -> bool {
        false
    }

    fn schemas(&self) -> Result<Vec<Schema>, StorageError> {
        Ok(Vec::new())
    }

    fn record_schemas(&self, _: &[Schema]) -> Result<(), StorageError> {
        Ok(())
    }

    fn terminated(&self) -> bool {
        false
    }

    fn record_terminated(&self) -> Result<(), StorageError> {
        Ok(())
    }
}

/// Subscriptions as files in a topic's `subscriptions/` directory.
#[derive(Debug)]
pub(crate) struct FileCatalog {
    /// The topic's `subscriptions/` directory.
    dir: PathBuf,
    /// The topic's `schemas.json`.
    schemas: PathBuf,
    /// The topic's `terminated` marker (present once the topic is terminated).
    terminated: PathBuf,
}

/// One schema version in `schemas.json`.
#[derive(Serialize, Deserialize)]
struct SchemaFile {
    name: String,
    #[serde(rename = "type")]
    kind: i32,
    data: Vec<u8>,
    properties: Vec<(String, String)>,
}

impl FileCatalog {
    /// The catalog of the topic stored in `topic_dir` (its files are created on the first
    /// record).
    pub(crate) fn new(topic_dir: &Path) -> FileCatalog {
        FileCatalog {
            dir: topic_dir.join("subscriptions"),
            schemas: topic_dir.join("schemas.json"),
            terminated: topic_dir.join("terminated"),
        }
    }

    fn path(&self, name: &str, ext: &str) -> PathBuf {
        self.dir.join(encode_name(name)).with_extension(ext)
    }
}

impl TopicCatalog for FileCatalog {
    fn recorded(&self) -> Vec<(String, SubKind)> {
        let Ok(list) = fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for e in list.flatten() {
            let path = e.path();
            if path.extension().and_then(|x| x.to_str()) != Some("json") {
                continue;
            }
            let parsed = fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice::<SubFile>(&b).ok());
            let Some(f) = parsed else {
                warn!(file = %path.display(), "unreadable subscription file; skipped");
                continue;
            };
            let Some(kind) = SubKind::from_file(&f) else {
                warn!(file = %path.display(), kind = %f.kind, "unknown subscription type; skipped");
                continue;
            };
            out.push((f.name, kind));
        }
        out
    }

    fn record(&self, name: &str, kind: SubKind) -> Result<(), StorageError> {
        fs::create_dir_all(&self.dir).map_err(|source| StorageError::Io {
            op: "create",
            path: self.dir.clone(),
            source,
        })?;
        let body = serde_json::to_vec_pretty(&kind.to_file(name)).unwrap_or_default();
        crate::storage::write_durably(&self.path(name, "json"), &body)
    }

    fn cursor_store(&self, name: &str, fresh: bool) -> Result<SubStore, StorageError> {
        let path = self.path(name, "cursor");
        if fresh {
            let _ = fs::remove_file(&path);
        }
        FileStore::open(&path)
            .map(SubStore::File)
            .map_err(|source| StorageError::Cursor { path, source })
    }

    fn remove(&self, name: &str) {
        let _ = fs::remove_file(self.path(name, "json"));
        let _ = fs::remove_file(self.path(name, "cursor"));
    }

    fn durable(&self) -> bool {
        true
    }

    fn schemas(&self) -> Result<Vec<Schema>, StorageError> {
        let bytes = match fs::read(&self.schemas) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(StorageError::Io {
                    op: "read",
                    path: self.schemas.clone(),
                    source,
                })
            }
        };
        let files: Vec<SchemaFile> =
            serde_json::from_slice(&bytes).map_err(|e| StorageError::Unreadable {
                path: self.schemas.clone(),
                reason: e.to_string(),
            })?;
        Ok(files
            .into_iter()
            .map(|f| Schema {
                name: f.name,
                r#type: f.kind,
                schema_data: f.data,
                properties: f
                    .properties
                    .into_iter()
                    .map(|(key, value)| KeyValue { key, value })
                    .collect(),
            })
            .collect())
    }

    fn record_schemas(&self, all: &[Schema]) -> Result<(), StorageError> {
        let files: Vec<SchemaFile> = all
            .iter()
            .map(|s| SchemaFile {
                name: s.name.clone(),
                kind: s.r#type,
                data: s.schema_data.clone(),
                properties: s
                    .properties
                    .iter()
                    .map(|kv| (kv.key.clone(), kv.value.clone()))
                    .collect(),
            })
            .collect();
        let body = serde_json::to_vec(&files).unwrap_or_default();
        crate::storage::write_durably(&self.schemas, &body)
    }

    fn terminated(&self) -> bool {
        self.terminated.exists()
    }

    fn record_terminated(&self) -> Result<(), StorageError> {
        crate::storage::write_durably(&self.terminated, b"terminated\n")
    }
}

/// What a subscription's `.json` file holds.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct SubFile {
    name: String,
    #[serde(rename = "type")]
    kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    key_shared_mode: Option<String>,
    #[serde(default)]
    allow_out_of_order_delivery: bool,
}

impl SubKind {
    fn to_file(self, name: &str) -> SubFile {
        SubFile {
            name: name.to_owned(),
            kind: self.pulsar_name().to_owned(),
            key_shared_mode: self.key_shared_mode_name().map(str::to_owned),
            allow_out_of_order_delivery: matches!(self, SubKind::KeyShared(k) if k.allow_out_of_order),
        }
    }

    fn from_file(f: &SubFile) -> Option<SubKind> {
        Some(match f.kind.as_str() {
            "Shared" => SubKind::Shared,
            "Exclusive" => SubKind::Exclusive,
            "Failover" => SubKind::Failover,
            "Key_Shared" => SubKind::KeyShared(KeySharedConfig {
                mode: match f.key_shared_mode.as_deref() {
                    Some("STICKY") => KeySharedMode::Sticky,
                    _ => KeySharedConfig::default().mode,
                },
                allow_out_of_order: f.allow_out_of_order_delivery,
            }),
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cursor::Position;

    fn state(md: u64) -> PersistedState {
        PersistedState {
            name: "s".into(),
            mark_delete: Position::new(1, md),
            acked: Default::default(),
            batch_acks: Default::default(),
            last_active: 0,
        }
    }

    fn saved(store: &mut SubStore) -> Option<Position> {
        store.load().unwrap().map(|s| s.mark_delete)
    }

    #[test]
    fn a_memory_catalog_keeps_cursors_by_name_until_started_over() {
        let c = MemoryCatalog::default();
        c.record("s", SubKind::Shared).unwrap();
        assert!(c.recorded().is_empty(), "nothing survives a restart");
        c.cursor_store("s", true).unwrap().save(&state(3)).unwrap();
        assert_eq!(
            saved(&mut c.cursor_store("s", false).unwrap()),
            Some(Position::new(1, 3))
        );
        assert_eq!(
            saved(&mut c.cursor_store("s", true).unwrap()),
            None,
            "fresh"
        );
        c.cursor_store("s", false).unwrap().save(&state(4)).unwrap();
        c.remove("s");
        assert_eq!(
            saved(&mut c.cursor_store("s", false).unwrap()),
            None,
            "removed"
        );
    }

    #[test]
    fn a_file_catalog_records_types_and_cursors() {
        let dir = std::env::temp_dir().join(format!("broker-catalog-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let c = FileCatalog::new(&dir);
        let ks = SubKind::KeyShared(KeySharedConfig {
            mode: KeySharedMode::Sticky,
            allow_out_of_order: true,
        });
        c.record("a/b", SubKind::Shared).unwrap();
        c.record("k", ks).unwrap();
        c.record("a/b", SubKind::Exclusive).unwrap();
        c.record("f", SubKind::Failover).unwrap();
        fs::write(dir.join("subscriptions").join("junk.json"), b"{").unwrap();
        let mut got = c.recorded();
        got.sort_by(|x, y| x.0.cmp(&y.0));
        assert_eq!(
            got,
            vec![
                ("a/b".to_owned(), SubKind::Exclusive),
                ("f".to_owned(), SubKind::Failover),
                ("k".to_owned(), ks)
            ],
            "the last record wins; an unreadable file is skipped"
        );
        c.cursor_store("k", true).unwrap().save(&state(7)).unwrap();
        let reopened = FileCatalog::new(&dir);
        assert_eq!(
            saved(&mut reopened.cursor_store("k", false).unwrap()),
            Some(Position::new(1, 7))
        );
        reopened.remove("k");
        assert_eq!(reopened.recorded().len(), 2);
        assert_eq!(saved(&mut reopened.cursor_store("k", false).unwrap()), None);
        let cursor_path = dir.join("subscriptions").join("d.cursor");
        fs::create_dir_all(&cursor_path).unwrap();
        match reopened.cursor_store("d", false) {
            Err(StorageError::Cursor { path, .. }) => assert_eq!(path, cursor_path),
            other => panic!("a cursor file that cannot be opened: {other:?}"),
        }
        let _ = fs::remove_dir_all(&dir);
    }

    /// Schemas come back in version order with every field; a damaged record is an error, not
    /// an empty list (versions would be handed out twice).
    #[test]
    fn a_file_catalog_records_schemas() {
        let dir = std::env::temp_dir().join(format!("broker-schemas-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let c = FileCatalog::new(&dir);
        assert_eq!(c.schemas().unwrap(), Vec::new());
        let all = vec![
            Schema {
                name: "a".into(),
                r#type: 2,
                schema_data: b"{\"type\":\"record\"}".to_vec(),
                properties: vec![KeyValue {
                    key: "k".into(),
                    value: "v".into(),
                }],
            },
            Schema {
                name: "b".into(),
                r#type: 4,
                schema_data: vec![0, 255, 7],
                properties: Vec::new(),
            },
        ];
        c.record_schemas(&all).unwrap();
        assert_eq!(FileCatalog::new(&dir).schemas().unwrap(), all);
        fs::write(dir.join("schemas.json"), b"[{").unwrap();
        assert!(matches!(
            FileCatalog::new(&dir).schemas(),
            Err(StorageError::Unreadable { .. })
        ));
        let _ = fs::remove_dir_all(&dir);
    }
}
