//! The broker's shared state: configuration, the topic registry, id and name counters, and
//! the connections' outboxes. No sockets, threads or clock: the shells own those.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use dispatcher::Event;
use tracing::{info, warn};

use crate::config::BrokerConfig;
use crate::metadata::{FileMetadata, MemoryMetadata, Metadata, MetadataError, MetadataStore};
use crate::storage::{ReadCache, StorageError};
use crate::sync::lock;

mod policies;
mod topics;

use crate::topic::{
    Backend, FileBackend, MemoryBackend, Runtimes, Subscription, Topic, TopicConfig, TopicName,
};
pub(crate) use topics::{DeleteError, TopicError};

/// Where frames the broker sends on its own (CLOSE_CONSUMER when a seek or a reset closes a
/// subscription's consumers) go for one connection: its writer queue, in the TCP shell.
pub(crate) trait Outbox: Send + Sync {
    /// Queues one encoded frame. May wait a bounded time for room; a connection that does not
    /// read for that long loses the frame.
    fn push(&self, frame: Vec<u8>);

    /// Queues a consumer's MESSAGE frames without waiting (a dispatcher calls it). A
    /// queue that is nearly full refuses them, keeping room for the session's own replies.
    fn offer(&self, frames: Vec<u8>) -> Offer;

    /// Whether a consumer refused by [`offer`](Self::offer) may send again (the queue has
    /// drained to half).
    fn drained(&self) -> bool;
}

/// What [`Outbox::offer`] did with the frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Offer {
    /// Queued.
    Taken,
    /// Not queued: no room now.
    Full,
    /// Not queued: the connection is gone.
    Closed,
}

/// The broker's state that every connection and the admin API share: configuration, the
/// topics, id and name counters, and a way to reach each live connection.
pub(crate) struct BrokerState {
    pub cfg: BrokerConfig,
    pub service_url: String,
    /// The admin API's URL (`http://ADDR`), shown in the cluster's data.
    pub admin_url: String,
    pub server_version: String,
    pub closing: AtomicBool,
    pub next_consumer: AtomicU64,
    next_producer: AtomicU64,
    name_prefix: String,
    /// By full name, ordered: housekeeping and listings visit topics in name order.
    topics: Mutex<BTreeMap<String, Arc<Topic>>>,
    /// The durable topics' read cache (`--read-cache-mb`), one for the broker.
    pub read_cache: Arc<ReadCache>,
    /// Where topics are stored.
    backend: Box<dyn Backend>,
    /// Per live connection: where broker-initiated frames for it go.
    outboxes: Mutex<HashMap<u64, Arc<dyn Outbox>>>,
    /// Tenants, namespaces and partitioned topics (lock order: before `topics`).
    metadata: Mutex<Metadata>,
    /// Where the metadata is kept.
    metadata_store: Box<dyn MetadataStore>,
    /// Starts the subscriptions' dispatchers: the shell's threads or pool, or stepped ones
    /// ([`BrokerState::new_stepped`]).
    runtimes: Arc<dyn Runtimes>,
}

impl BrokerState {
    /// The broker's state with no topic loaded yet (no socket, no thread); its subscriptions'
    /// dispatchers are started by `runtimes`.
    pub(crate) fn new(
        cfg: BrokerConfig,
        service_url: String,
        runtimes: Arc<dyn Runtimes>,
    ) -> BrokerState {
        let read_cache = Arc::new(ReadCache::new(
            cfg.read_cache_mb.saturating_mul(1024 * 1024),
        ));
        let mut backend: Box<dyn Backend> = match &cfg.data_dir {
            Some(d) => Box::new(FileBackend::new(d.join("topics"), read_cache.clone())),
            None => Box::new(MemoryBackend),
        };
        if let Some(file) = &cfg.fail_writes_while_exists {
            let faults = crate::storage::StoreFaults::while_exists(file.clone());
            backend = Box::new(crate::topic::FaultyBackend {
                inner: backend,
                faults: Arc::new(faults),
            });
        }
        let metadata_store: Box<dyn MetadataStore> = match &cfg.data_dir {
            Some(d) => Box::new(FileMetadata::new(crate::metadata::file_in(d))),
            None => Box::new(MemoryMetadata),
        };
        BrokerState {
            admin_url: format!("http://{}", cfg.admin),
            service_url,
            server_version: format!("key-ordered-broker-{}", env!("CARGO_PKG_VERSION")),
            closing: AtomicBool::new(false),
            next_consumer: AtomicU64::new(1),
            next_producer: AtomicU64::new(0),
            name_prefix: format!("standalone-{}", std::process::id()),
            topics: Mutex::new(BTreeMap::new()),
            outboxes: Mutex::new(HashMap::new()),
            read_cache,
            backend,
            metadata: Mutex::new(Metadata::default()),
            metadata_store,
            runtimes,
            cfg,
        }
    }

    /// This state with its topics stored in `backend` (tests: one that fails on demand).
    #[cfg(test)]
    pub(crate) fn with_backend(self, backend: Box<dyn Backend>) -> BrokerState {
        BrokerState { backend, ..self }
    }

    /// A broker state whose subscriptions' dispatchers have no thread: they run when
    /// [`step`](BrokerState::step) is called, at the time `clock` reads, with `options`. With in-memory
    /// storage, nothing in this state then runs unless its caller calls it: what a
    /// deterministic simulator needs.
    pub(crate) fn new_stepped(
        cfg: BrokerConfig,
        service_url: String,
        clock: dispatcher::StepClock,
        options: dispatcher::RuntimeOptions,
        faults: &Arc<crate::storage::StoreFaults>,
    ) -> BrokerState {
        let runtimes = Arc::new(crate::topic::SteppedRuntimes {
            clock,
            options,
            faults: faults.clone(),
        });
        let mut s = BrokerState::new(cfg, service_url, runtimes);
        let inner = std::mem::replace(&mut s.backend, Box::new(crate::topic::MemoryBackend));
        s.backend = Box::new(crate::topic::FaultyBackend {
            inner,
            faults: faults.clone(),
        });
        s
    }

    /// A stepped state ([`new_stepped`](BrokerState::new_stepped)): runs every subscription's
    /// dispatcher loop (topics by name, subscriptions by name) until none has anything left to
    /// do at the clock's time; whether anything ran. A threaded state: nothing, `false`.
    pub(crate) fn step(&self) -> bool {
        if !self.runtimes.stepped() {
            return false;
        }
        let topics = self.topics();
        let mut any = false;
        loop {
            let mut did = false;
            for t in &topics {
                for s in t.subscriptions() {
                    did |= s.runtime.step();
                }
            }
            if !did {
                return any;
            }
            any = true;
        }
    }

    /// Stepped runtimes: the first subscription (by topic name) whose dispatcher sits on a
    /// replay entry nothing holds back with nothing scheduled
    /// ([`dispatcher::Runtime::replay_idle`]): its topic, name and that entry.
    pub(crate) fn replay_idle(&self) -> Option<(String, String, cursor::Position)> {
        self.topics().iter().find_map(|t| {
            t.subscriptions().iter().find_map(|s| {
                let p = s.runtime.replay_idle()?;
                Some((t.name.to_string(), s.name.clone(), p))
            })
        })
    }

    /// The mark-delete position of `topic`'s subscription `sub` (`None` if either is
    /// unknown).
    pub(crate) fn mark_delete(&self, topic: &str, sub: &str) -> Option<cursor::Position> {
        let t = self.topics().into_iter().find(|t| t.name == topic)?;
        let s = t.subscriptions().into_iter().find(|s| s.name == sub)?;
        Some(s.runtime.cursor_view().mark_delete)
    }

    /// Stepped runtimes: who holds what in the dispatcher of `topic`'s subscription `sub`
    /// ([`dispatcher::Runtime::holdings`]); `None` if either is unknown.
    pub(crate) fn holdings(&self, topic: &str, sub: &str) -> Option<dispatcher::Holdings> {
        let t = self.topics().into_iter().find(|t| t.name == topic)?;
        let s = t.subscriptions().into_iter().find(|s| s.name == sub)?;
        s.runtime.holdings()
    }

    /// Stepped runtimes: the first subscription (by topic name) whose dispatcher loop failed
    /// to settle ([`dispatcher::Runtime::livelock`]): its topic, name and how.
    pub(crate) fn livelock(&self) -> Option<(String, String, dispatcher::Livelock)> {
        self.topics().iter().find_map(|t| {
            t.subscriptions().iter().find_map(|s| {
                let l = s.runtime.livelock()?;
                Some((t.name.to_string(), s.name.clone(), l))
            })
        })
    }

    /// A stepped state: the earliest clock time at which [`step`](BrokerState::step) has
    /// something to do without a new command (a nack's delay, a deliver-at time, a cursor
    /// persist); `None` when nothing is scheduled, and always for a threaded state.
    pub(crate) fn next_deadline(&self) -> Option<u64> {
        self.topics()
            .iter()
            .flat_map(|t| t.subscriptions())
            .filter_map(|s| s.runtime.next_deadline())
            .min()
    }

    /// The same state with the admin API at `url` (the shell knows the bound port).
    pub(crate) fn with_admin_url(mut self, url: String) -> BrokerState {
        self.admin_url = url;
        self
    }

    /// A look at the metadata (hold it briefly: topic creation waits for it).
    pub(crate) fn metadata(&self) -> std::sync::MutexGuard<'_, Metadata> {
        lock(&self.metadata)
    }

    /// Applies `change` to the metadata and keeps the result before anyone sees it; a refused
    /// change, or one the store cannot keep, leaves the metadata as it was.
    pub(crate) fn change_metadata<T>(
        &self,
        change: impl FnOnce(&mut Metadata) -> Result<T, MetadataError>,
    ) -> Result<T, MetadataError> {
        let mut current = lock(&self.metadata);
        let mut next = current.clone();
        let out = change(&mut next)?;
        if next != *current {
            self.metadata_store.save(&next)?;
            *current = next;
        }
        Ok(out)
    }

    /// The topic, created on first use (in the backend: a directory under `--data-dir`).
    pub(crate) fn topic(&self, name: &TopicName) -> Result<Arc<Topic>, StorageError> {
        let full = name.full();
        // The metadata before the registry (the lock order).
        let deduplicate = self.deduplication_of(name);
        let mut topics = lock(&self.topics);
        if let Some(t) = topics.get(&full) {
            return Ok(t.clone());
        }
        let defaults = crate::topic::SubscriptionDefaults {
            legacy: self.cfg.legacy,
            max_unacked_per_key: self.cfg.key_shared_max_unacked_per_key,
            delayed_delivery: self.cfg.delayed_delivery,
            limits: self.cfg.dispatch,
        };
        let config = TopicConfig {
            entries_per_ledger: self.cfg.entries_per_ledger,
            sync: self.cfg.sync,
            defaults,
            kept_metas: crate::topic::KEPT_METAS,
            runtimes: self.runtimes.clone(),
            write_refusal_ms: self.cfg.write_refusal_ms,
        };
        let t = Topic::open(full.clone(), &*self.backend, config)?;
        t.set_deduplicating(deduplicate);
        if self.cfg.legacy != crate::config::Legacy::default() {
            warn!(topic = %full, legacy = ?self.cfg.legacy, "Pulsar-bug switches are on for this topic's subscriptions");
        }
        info!(topic = %full, "topic created");
        let t = Arc::new(t);
        topics.insert(full, t.clone());
        Ok(t)
    }

    /// Whether topics of `name`'s namespace deduplicate: the namespace's policy, else the
    /// broker's `--broker-deduplication-enabled`.
    pub(crate) fn deduplication_of(&self, name: &TopicName) -> bool {
        self.metadata()
            .policies(&name.tenant, &name.namespace)
            .ok()
            .and_then(|p| p.deduplication_enabled)
            .unwrap_or(self.cfg.deduplication)
    }

    /// Applies namespace `tenant/ns`'s deduplication setting to its open topics (after the
    /// admin API changed it).
    pub(crate) fn apply_deduplication(&self, tenant: &str, ns: &str) {
        let namespace = format!("{tenant}/{ns}");
        for full in self.topic_names_in(&namespace) {
            let (Some(t), Ok(name)) = (self.existing_topic(&full), TopicName::parse(&full)) else {
                continue;
            };
            t.set_deduplicating(self.deduplication_of(&name));
        }
    }

    /// Reads the metadata and every stored topic back (before the listener accepts anyone).
    /// A stored topic whose namespace the metadata lacks (a directory an older broker wrote)
    /// gets its tenant and namespace back.
    pub(crate) fn recover_topics(&self) -> Result<usize, StorageError> {
        if let Some(m) = self.metadata_store.load()? {
            *lock(&self.metadata) = m;
        }
        let mut n = 0;
        for full in self.backend.topics()? {
            let Ok(name) = TopicName::parse(&full) else {
                warn!(topic = %full, "not a topic name; skipped");
                continue;
            };
            let adopted =
                self.change_metadata(|m| Ok(m.adopt_namespace(&name.tenant, &name.namespace)));
            match adopted {
                Ok(true) => {
                    info!(namespace = %name.namespace_name(), "namespace of a stored topic recorded")
                }
                Ok(false) => {}
                Err(MetadataError::Storage(e)) => return Err(e),
                Err(e) => warn!(topic = %full, error = %e, "namespace not recorded"),
            }
            self.topic(&name)?;
            n += 1;
        }
        Ok(n)
    }

    /// Syncs every topic's log (the `interval` policy's timer).
    pub(crate) fn sync_topics(&self) {
        for t in self.topics() {
            if let Err(e) = t.sync() {
                warn!(topic = %t.name, error = %e, "log sync failed");
            }
        }
    }

    /// The topic, if it exists.
    pub(crate) fn existing_topic(&self, full: &str) -> Option<Arc<Topic>> {
        lock(&self.topics).get(full).cloned()
    }

    /// The full names of the persistent topics of `namespace` (`tenant/ns`), sorted: the admin
    /// topic list and GET_TOPICS_OF_NAMESPACE. As in Pulsar, a partition is listed once it
    /// exists as a topic (the admin API creates them all; one created on first use is not
    /// listed until a client uses it).
    pub(crate) fn topic_names_in(&self, namespace: &str) -> Vec<String> {
        let prefix = format!("persistent://{namespace}/");
        let mut names: Vec<String> = lock(&self.topics)
            .keys()
            .filter(|n| n.starts_with(&prefix))
            .cloned()
            .collect();
        names.sort();
        names
    }

    /// Every topic, by name (the stepped order: one seed, one run).
    pub(crate) fn topics(&self) -> Vec<Arc<Topic>> {
        lock(&self.topics).values().cloned().collect()
    }

    /// A producer name unique in this broker's life (clients build chunk uuids from it).
    pub(crate) fn producer_name(&self) -> String {
        let n = self.next_producer.fetch_add(1, Ordering::SeqCst);
        format!("{}-{n}", self.name_prefix)
    }

    /// Registers connection `conn`'s outbox (the shell does, when the connection starts).
    pub(crate) fn register_outbox(&self, conn: u64, outbox: Arc<dyn Outbox>) {
        lock(&self.outboxes).insert(conn, outbox);
    }

    /// Connection `conn`'s outbox, while it is open.
    pub(crate) fn outbox(&self, conn: u64) -> Option<Arc<dyn Outbox>> {
        lock(&self.outboxes).get(&conn).cloned()
    }

    /// Queues `cmd` on connection `conn` (a frame the broker starts: another connection's
    /// producer fenced or made ready). A connection that is gone is skipped.
    pub(crate) fn push_to(&self, conn: u64, cmd: &wire::proto::BaseCommand) {
        if let Some(o) = self.outbox(conn) {
            let mut frame = Vec::with_capacity(64);
            wire::encode_command(cmd, &mut frame);
            o.push(frame);
        }
    }

    /// The connection ended: frames for it are dropped from now on.
    pub(crate) fn unregister_outbox(&self, conn: u64) {
        lock(&self.outboxes).remove(&conn);
    }

    /// Closes every consumer of `sub` from the broker side: the dispatcher lets them go (their
    /// unacked entries return to replay) and each client gets CLOSE_CONSUMER, after which it
    /// subscribes again. Pulsar does this on seek and reset-cursor.
    pub(crate) fn kick_subscription(&self, sub: &Subscription) {
        let consumers: Vec<_> = lock(&sub.consumers)
            .iter()
            .map(|(id, c)| (*id, c.clone()))
            .collect();
        let events = sub.runtime.events();
        let outboxes = lock(&self.outboxes);
        for (id, c) in consumers {
            let _ = events.send(Event::ConsumerRemoved(id));
            if let Some(o) = outboxes.get(&c.conn) {
                let mut out = Vec::new();
                wire::encode_command(&wire::commands::close_consumer(c.client_id, 0), &mut out);
                o.push(out);
            }
        }
        lock(&sub.consumers).clear();
    }
}
