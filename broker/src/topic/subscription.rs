//! Subscriptions: their types as clients ask for them, their dispatcher runtimes, their files
//! under `--data-dir` (`subscriptions/<name>.json` for the type, `<name>.cursor` for the
//! cursor), and the rules for creating, retyping and removing them.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use cursor::{CursorStore, FileStore, ManagedCursor, MemoryStore, PersistedState, StoreError};
use dispatcher::{
    ConsumerId, DispatcherConfig, KeySharedConfig, KeySharedMode, Runtime, SubscriptionType,
};
use tracing::{info, warn};

use super::{Rate, Topic, TopicState};
use crate::config::Legacy;
use crate::storage::{encode_name, StorageError};
use crate::sync::lock;

/// Writes `bytes` to `path` through a temporary file, fsync and rename (and a directory sync).
fn write_durably(path: &Path, bytes: &[u8]) -> Result<(), StorageError> {
    let tmp = path.with_extension("tmp");
    let io = |op: &'static str, p: &Path| {
        let p = p.to_path_buf();
        move |source| StorageError::Io {
            op,
            path: p,
            source,
        }
    };
    {
        let mut f = fs::File::create(&tmp).map_err(io("create", &tmp))?;
        std::io::Write::write_all(&mut f, bytes).map_err(io("write", &tmp))?;
        f.sync_all().map_err(io("sync", &tmp))?;
    }
    fs::rename(&tmp, path).map_err(io("rename", path))?;
    if let Some(d) = path.parent() {
        crate::storage::sync_dir(d)?;
    }
    Ok(())
}

/// A subscription's cursor store: in memory, or a file under `--data-dir`.
#[derive(Debug)]
pub(crate) enum SubStore {
    /// Shared with the [`Subscription`], which keeps it to restart its cursor when its type
    /// changes.
    Memory(Arc<Mutex<MemoryStore>>),
    File(FileStore),
}

/// Opens (or creates) a cursor file.
fn open_cursor_file(path: &Path) -> Result<FileStore, StorageError> {
    FileStore::open(path).map_err(|e| StorageError::Corrupt {
        path: path.to_path_buf(),
        offset: 0,
        reason: e.to_string(),
    })
}

/// Where a subscription's cursor store lives, to open it for recovery or start it over.
enum StoreAt {
    Memory(Arc<Mutex<MemoryStore>>),
    File(PathBuf),
}

impl StoreAt {
    /// The store as it is (for recovery).
    fn open(&self) -> Result<SubStore, StorageError> {
        Ok(match self {
            StoreAt::Memory(m) => SubStore::Memory(m.clone()),
            StoreAt::File(p) => SubStore::File(open_cursor_file(p)?),
        })
    }

    /// The store for a cursor that starts over: a cursor file is removed first.
    fn open_empty(&self) -> Result<SubStore, StorageError> {
        if let StoreAt::File(p) = self {
            let _ = fs::remove_file(p);
        }
        self.open()
    }
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

/// The subscription type a SUBSCRIBE asked for, as the broker serves it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SubKind {
    /// Pulsar's Exclusive: Shared dispatch with at most one consumer.
    Exclusive,
    /// Shared.
    Shared,
    /// Key_Shared with its mode and ordering setting.
    KeyShared(KeySharedConfig),
}

/// What the broker's flags set for every new subscription's dispatcher.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SubscriptionDefaults {
    /// Pulsar-bug switches (`--legacy`).
    pub legacy: Legacy,
    /// Key-serial limit for Key_Shared (0 = off; `--key-shared-max-unacked-per-key`).
    pub max_unacked_per_key: u32,
    /// Delayed delivery for Shared and Key_Shared (`--delayed-delivery-*`).
    pub delayed_delivery: dispatcher::DelayedDelivery,
}

impl SubKind {
    pub(crate) fn dispatcher_config(self, defaults: &SubscriptionDefaults) -> DispatcherConfig {
        let SubscriptionDefaults {
            legacy,
            max_unacked_per_key,
            delayed_delivery: delayed,
        } = *defaults;
        let mut cfg = match self {
            SubKind::Exclusive | SubKind::Shared => DispatcherConfig::shared(),
            SubKind::KeyShared(ks) => DispatcherConfig::new(SubscriptionType::KeyShared(ks)),
        };
        // As in Pulsar: Shared and Key_Shared honour deliver-at times; Exclusive (and
        // Failover) dispatch a delayed message at once.
        cfg.delayed_delivery = delayed;
        if self == SubKind::Exclusive {
            cfg.delayed_delivery.enabled = false;
        }
        if matches!(self, SubKind::KeyShared(_)) && !legacy.unordered_nack {
            cfg.max_unacked_per_key = max_unacked_per_key;
        }
        cfg.legacy_mark_delete_cleanup = legacy.mark_delete_cleanup;
        if legacy.orphan_chunk_replay {
            cfg.assignor.orphan_policy = chunk_assignor::OrphanPolicy::Replay;
        }
        cfg
    }

    /// Pulsar's name for the type, as in topic stats.
    pub(crate) fn pulsar_name(self) -> &'static str {
        match self {
            SubKind::Exclusive => "Exclusive",
            SubKind::Shared => "Shared",
            SubKind::KeyShared(_) => "Key_Shared",
        }
    }

    /// Pulsar's name for the Key_Shared mode.
    pub(crate) fn key_shared_mode_name(self) -> Option<&'static str> {
        match self {
            SubKind::KeyShared(KeySharedConfig { mode, .. }) => Some(match mode {
                KeySharedMode::Sticky => "STICKY",
                _ => "AUTO_SPLIT",
            }),
            _ => None,
        }
    }
}

/// A consumer connected to a subscription, as the registry knows it.
#[derive(Clone, Debug)]
pub(crate) struct ConsumerInfo {
    /// The connection it came on.
    pub conn: u64,
    /// The consumer id the client chose (per connection).
    pub client_id: u64,
    /// The peer address.
    pub address: String,
    /// When it subscribed (RFC 3339, UTC).
    pub connected_since: String,
    /// Messages and bytes sent to it (the forwarder counts).
    pub out: Arc<OutCounters>,
}

/// Messages and bytes sent to one consumer.
#[derive(Debug, Default)]
pub(crate) struct OutCounters {
    pub messages: AtomicU64,
    pub bytes: AtomicU64,
}

/// One subscription: its dispatcher runtime and who is connected.
pub(crate) struct Subscription {
    pub name: String,
    pub kind: SubKind,
    pub runtime: Runtime,
    /// The in-memory cursor store (without `--data-dir`), kept to restart the cursor when the
    /// subscription's type changes.
    memory: Option<Arc<Mutex<MemoryStore>>>,
    pub consumers: Mutex<BTreeMap<ConsumerId, ConsumerInfo>>,
    /// Messages and bytes out (rates, from the consumers' counters).
    pub rate_out: Mutex<(Rate, Rate)>,
    /// Last expiry run by the admin API (ms since the epoch), 0 if none.
    pub last_expire: AtomicU64,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

/// Where a new subscription starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum InitialPosition {
    /// After the last entry (Pulsar's default).
    Latest,
    /// At the first entry that exists.
    Earliest,
}

/// Why a subscribe was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SubscribeError {
    #[error("subscription `{sub}` is {existing}, not {asked}")]
    TypeMismatch {
        sub: String,
        existing: &'static str,
        asked: &'static str,
    },
    #[error("Exclusive subscription `{0}` already has a consumer")]
    ExclusiveBusy(String),
    #[error("subscription storage: {0}")]
    Storage(#[from] StorageError),
}

impl Topic {
    pub(super) fn recover_subscriptions(&self, dir: &Path) -> Result<(), StorageError> {
        let Ok(list) = fs::read_dir(dir) else {
            return Ok(());
        };
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
            let mut st = lock(&self.state);
            let sub =
                self.start_subscription(&st, &f.name, kind, InitialPosition::Earliest, true, None)?;
            st.subs.insert(f.name.clone(), sub);
        }
        Ok(())
    }

    /// The subscription `name`, creating it (with `kind`, starting at `initial`) when it does
    /// not exist. A subscription keeps the type it was created with.
    pub(crate) fn subscription(
        &self,
        name: &str,
        kind: SubKind,
        initial: InitialPosition,
    ) -> Result<Arc<Subscription>, SubscribeError> {
        let mut st = lock(&self.state);
        if let Some(s) = st.subs.get(name) {
            if std::mem::discriminant(&s.kind) != std::mem::discriminant(&kind) {
                // As in Pulsar: with no consumer connected the subscription takes the new type
                // (its cursor is kept); with one connected the subscribe is refused.
                let idle = lock(&s.consumers).is_empty() && Arc::strong_count(s) == 1;
                if !idle {
                    return Err(SubscribeError::TypeMismatch {
                        sub: name.to_owned(),
                        existing: s.kind.pulsar_name(),
                        asked: kind.pulsar_name(),
                    });
                }
                return self.retype(&mut st, name, kind);
            }
            if s.kind == SubKind::Exclusive && !lock(&s.consumers).is_empty() {
                return Err(SubscribeError::ExclusiveBusy(name.to_owned()));
            }
            return Ok(s.clone());
        }
        let sub = self.start_subscription(&st, name, kind, initial, false, None)?;
        st.subs.insert(name.to_owned(), sub.clone());
        Ok(sub)
    }

    /// Restarts the idle subscription `name` with the type `kind`: its dispatcher stops (and
    /// persists the cursor), a new one of the new type starts from the same cursor.
    fn retype(
        &self,
        st: &mut TopicState,
        name: &str,
        kind: SubKind,
    ) -> Result<Arc<Subscription>, SubscribeError> {
        let Some(old) = st.subs.remove(name) else {
            return Err(SubscribeError::TypeMismatch {
                sub: name.to_owned(),
                existing: kind.pulsar_name(),
                asked: kind.pulsar_name(),
            });
        };
        let old = match Arc::try_unwrap(old) {
            Ok(s) => s,
            Err(still_used) => {
                let existing = still_used.kind.pulsar_name();
                st.subs.insert(name.to_owned(), still_used);
                return Err(SubscribeError::TypeMismatch {
                    sub: name.to_owned(),
                    existing,
                    asked: kind.pulsar_name(),
                });
            }
        };
        let Subscription {
            runtime,
            memory,
            kind: was,
            ..
        } = old;
        runtime.shutdown();
        let sub =
            self.start_subscription(st, name, kind, InitialPosition::Earliest, true, memory)?;
        if let Some(dir) = &self.dir {
            let path = dir
                .join("subscriptions")
                .join(encode_name(name))
                .with_extension("json");
            let body = serde_json::to_vec_pretty(&kind.to_file(name)).unwrap_or_default();
            write_durably(&path, &body)?;
        }
        info!(topic = %self.name, subscription = name, from = was.pulsar_name(), to = kind.pulsar_name(), "subscription type changed (no consumer was connected)");
        st.subs.insert(name.to_owned(), sub.clone());
        Ok(sub)
    }

    /// Starts a subscription's runtime over a replica of the master ledger. With `--data-dir`
    /// its type goes to `subscriptions/<name>.json` and its cursor to `<name>.cursor`;
    /// `recover` reads the cursor back (a missing or unusable cursor file starts at the
    /// earliest entry: redelivery rather than loss).
    fn start_subscription(
        &self,
        st: &TopicState,
        name: &str,
        kind: SubKind,
        initial: InitialPosition,
        recover: bool,
        memory: Option<Arc<Mutex<MemoryStore>>>,
    ) -> Result<Arc<Subscription>, StorageError> {
        if matches!(kind, SubKind::KeyShared(_)) {
            self.key_shared
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        let replica = st.ledger.clone();
        let memory = self.dir.is_none().then(|| memory.unwrap_or_default());
        let store = match (&self.dir, &memory) {
            (Some(dir), _) => StoreAt::File(self.subscription_files(dir, name, kind, recover)?),
            (None, store) => StoreAt::Memory(store.clone().unwrap_or_default()),
        };
        let recovered = match recover {
            true => ManagedCursor::recover(&replica, store.open()?)
                .map_err(|e| warn!(topic = %self.name, subscription = name, error = %e, "cursor not recovered; starting at the earliest entry"))
                .ok(),
            false => None,
        };
        let cursor = match recovered {
            Some(c) => c,
            None => {
                let mut c = ManagedCursor::new(name, &replica, store.open_empty()?);
                if initial == InitialPosition::Latest && !recover {
                    // A new subscription at the end: nothing published so far is backlog.
                    let _ = c.clear_backlog(&replica);
                }
                if matches!(store, StoreAt::File(_)) {
                    let _ = c.persist();
                }
                c
            }
        };
        let runtime = Runtime::start(kind.dispatcher_config(&self.defaults), cursor, replica);
        info!(topic = %self.name, subscription = name, kind = kind.pulsar_name(), recovered = recover, "subscription started");
        Ok(Arc::new(Subscription {
            name: name.to_owned(),
            kind,
            runtime,
            memory,
            consumers: Mutex::new(BTreeMap::new()),
            rate_out: Mutex::new((Rate::default(), Rate::default())),
            last_expire: AtomicU64::new(0),
        }))
    }

    /// With `--data-dir`: creates `subscriptions/`, writes the type file of a new subscription,
    /// and returns the path of its cursor file.
    fn subscription_files(
        &self,
        dir: &Path,
        name: &str,
        kind: SubKind,
        recover: bool,
    ) -> Result<PathBuf, StorageError> {
        let subs = dir.join("subscriptions");
        fs::create_dir_all(&subs).map_err(|source| StorageError::Io {
            op: "create",
            path: subs.clone(),
            source,
        })?;
        let base = subs.join(encode_name(name));
        if !recover {
            let body = serde_json::to_vec_pretty(&kind.to_file(name)).unwrap_or_default();
            write_durably(&base.with_extension("json"), &body)?;
        }
        Ok(base.with_extension("cursor"))
    }

    /// The subscription `name`, if it exists.
    pub(crate) fn get_subscription(&self, name: &str) -> Option<Arc<Subscription>> {
        lock(&self.state).subs.get(name).cloned()
    }

    /// Every subscription, by name.
    pub(crate) fn subscriptions(&self) -> Vec<Arc<Subscription>> {
        lock(&self.state).subs.values().cloned().collect()
    }

    /// Removes the subscription (UNSUBSCRIBE) and its files; its runtime stops when the last
    /// reference goes.
    pub(crate) fn remove_subscription(&self, name: &str) -> Option<Arc<Subscription>> {
        let removed = lock(&self.state).subs.remove(name);
        if removed.is_some() {
            if let Some(dir) = &self.dir {
                let base = dir.join("subscriptions").join(encode_name(name));
                let _ = fs::remove_file(base.with_extension("json"));
                let _ = fs::remove_file(base.with_extension("cursor"));
            }
            info!(topic = %self.name, subscription = name, "subscription removed");
        }
        removed
    }
}
