//! Topics and their subscriptions.
//!
//! A topic owns one ledger (entry metadata, the positions Pulsar clients see in SEND_RECEIPT)
//! and an [`EntryStore`] with the payload of every entry: the `0e01…` section of the
//! producer's SEND, stored verbatim and sent back after each MESSAGE header (in memory, or in
//! the topic's log files with a read cache under `--data-dir`). Each subscription runs one
//! dispatcher [`Runtime`] whose cursor reads that same ledger through a [`SharedLedger`]
//! handle: an entry is kept once, whatever the number of subscriptions. The topic appends
//! (then tells each runtime) and trims whole ledgers below every subscription's mark-delete
//! position, with their payloads, once.
//!
//! [`Runtime`]: dispatcher::Runtime

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use cursor::{EntryMeta, InMemoryLedger, Ledger, Position, SharedLedger};
use tracing::debug;

use crate::storage::{EntryStore, StorageError, SyncPolicy};
use crate::sync::lock;

mod appends;
mod backend;
mod catalog;
mod dedup;
mod meta;
mod name;
mod producers;
mod reads;
mod retention;
mod subscription;
mod terminate;

pub(crate) use appends::{Published, Written};
pub(crate) use backend::{Backend, FaultyBackend, FileBackend, MemoryBackend};
use catalog::TopicCatalog;

pub(crate) use catalog::SubStore;
pub(crate) use name::{partition_name, valid_name, TopicName, PARTITION_SUFFIX};
pub(crate) use producers::{
    AccessMode, Admitted, ProducerGate, ProducerKey, ProducerRefused, Producers, Promoted,
    Request as ProducerRequest,
};
pub(crate) use reads::{ReadOutcome, ReadRequest};
pub(crate) use subscription::{
    ConsumerInfo, InitialPosition, OutCounters, Runtimes, SteppedRuntimes, SubKind, SubscribeError,
    Subscription, SubscriptionDefaults,
};

/// A producer attached to a topic, as the registry knows it.
#[derive(Clone, Debug, Default)]
pub(crate) struct ProducerInfo {
    pub name: String,
    pub address: String,
    pub connected_since: String,
    /// The client's version, from its CONNECT.
    pub client_version: String,
    /// The producer's metadata (PRODUCER's `metadata` pairs).
    pub metadata: BTreeMap<String, String>,
    /// Its access mode.
    pub access: AccessMode,
}

/// A rate over the last housekeeping interval (per second).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Rate {
    last: u64,
    pub per_sec: f64,
}

impl Rate {
    /// Feeds the counter's current value, `secs` after the previous one.
    pub(crate) fn update(&mut self, now: u64, secs: f64) {
        if secs > 0.0 {
            self.per_sec = now.saturating_sub(self.last) as f64 / secs;
        }
        self.last = now;
    }
}

struct TopicState {
    /// Chunk uuid → positions of its chunks (for redelivery expansion).
    chunks: HashMap<String, Vec<Position>>,
    subs: BTreeMap<String, Arc<Subscription>>,
    /// The highest sequence id stored per producer (deduplication).
    sequences: dedup::Sequences,
    /// Entries pushed and not yet in the ledger.
    appends: appends::Appends,
}

/// What a durable topic is opened with.
#[derive(Clone, Debug)]
pub(crate) struct TopicConfig {
    /// Entries per ledger (`--entries-per-ledger`).
    pub entries_per_ledger: u64,
    /// When a receipt goes out (`--sync`).
    pub sync: SyncPolicy,
    /// The settings of new subscriptions' dispatchers.
    pub defaults: SubscriptionDefaults,
    /// How many of the newest entries keep their decoded metadata in memory
    /// ([`KEPT_METAS`]).
    pub kept_metas: usize,
    /// Starts the subscriptions' dispatchers (threads, the pool, or stepped).
    pub runtimes: Arc<dyn Runtimes>,
    /// How long new producers are refused after a failed write, ms (doubled per failure in a
    /// row, up to 16 times this; [`BrokerConfig::write_refusal_ms`](crate::config::BrokerConfig)).
    pub write_refusal_ms: u64,
}

pub(crate) use meta::KEPT_METAS;
pub(crate) use retention::Retention;

/// Publish counters of a topic.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TopicCounters {
    pub msg_in: u64,
    pub bytes_in: u64,
    pub entries_in: u64,
}

/// A topic: master ledger, payloads, subscriptions.
pub(crate) struct Topic {
    pub name: String,
    /// The record of its subscriptions.
    catalog: Box<dyn TopicCatalog>,
    /// The entries' payload sections (shared with the ledger, which decodes metadata it does
    /// not keep from them).
    entries: Arc<dyn EntryStore>,
    sync: SyncPolicy,
    /// The settings of new subscriptions' dispatchers.
    pub defaults: SubscriptionDefaults,
    /// Starts the subscriptions' dispatchers (threads, the pool, or stepped).
    runtimes: Arc<dyn Runtimes>,
    /// Guards the subscriptions and the chunk index; taken before `ledger`'s write lock, and
    /// held while an append, a trim or a reset runs, so they happen one at a time.
    state: Mutex<TopicState>,
    /// Held by the one write request running (see [`Topic::write_through`]): batches reach
    /// the store, and then the ledger, in position order.
    writer: Mutex<()>,
    /// The entries' metadata, read by every subscription's cursor (one copy per entry).
    ledger: SharedLedger,
    counters: Mutex<TopicCounters>,
    /// Producers by (connection, producer id), with their access modes; their names are
    /// unique per topic.
    pub producers: Mutex<Producers>,
    /// A Key_Shared subscription was created (see [`Topic::had_key_shared`]).
    key_shared: std::sync::atomic::AtomicBool,
    /// Messages and bytes in (rates).
    pub rate_in: Mutex<(Rate, Rate)>,
    /// The topic's schemas and their versions (recorded through the catalog).
    pub schemas: crate::schema::SchemaRegistry,
    /// Deleted by the admin API: producers and consumers still holding it must let it go.
    deleted: std::sync::atomic::AtomicBool,
    /// Deduplication is on (the broker's flag or the namespace's policy).
    deduplicating: std::sync::atomic::AtomicBool,
    /// Terminated (the admin API's `terminate`): nothing is appended any more. Set only while
    /// the state lock is held, so no append passes it; read without the lock.
    terminated: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Topic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Topic")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Topic {
    /// The topic `name` from `backend`: its stored entries are read back (their metadata and
    /// the chunk index; payloads stay in the store) and its recorded subscriptions restarted
    /// from their cursors. New entries start a new ledger id, so no position is ever reused.
    pub(crate) fn open(
        name: String,
        backend: &dyn Backend,
        config: TopicConfig,
    ) -> Result<Topic, StorageError> {
        let TopicConfig {
            entries_per_ledger,
            sync,
            defaults,
            kept_metas,
            runtimes,
            write_refusal_ms,
        } = config;
        let source = Arc::new(meta::StoredMeta::new(name.clone()));
        let mut ledger =
            InMemoryLedger::new(entries_per_ledger).with_meta_source(source.clone(), kept_metas);
        let mut chunks: HashMap<String, Vec<Position>> = HashMap::new();
        let mut counters = TopicCounters::default();
        let mut sequences = dedup::Sequences::default();
        let corrupt = |position: Position, reason: String| StorageError::Entry {
            topic: name.clone(),
            position,
            reason,
        };
        let (entries, catalog) = backend.open_topic(&name, &mut |pos, section| {
            let meta = match meta::decode(section) {
                Ok(m) => m,
                Err(reason) => {
                    return Err(corrupt(
                        pos,
                        format!("stored section does not decode: {reason}"),
                    ))
                }
            };
            counters.msg_in += u64::from(meta.messages());
            counters.bytes_in += u64::from(meta.size);
            counters.entries_in += 1;
            sequences.record(&meta);
            if let Some(c) = &meta.chunk {
                chunks.entry(c.uuid.clone()).or_default().push(pos);
            }
            ledger.restore(pos, meta).map_err(|expected| {
                corrupt(
                    pos,
                    format!("out of order (expected {expected} or a later ledger)"),
                )
            })
        })?;
        ledger.roll_over();
        source.opened(entries.clone());
        let schemas = crate::schema::SchemaRegistry::restored(catalog.schemas()?);
        let terminated = catalog.terminated();
        let topic = Topic {
            name,
            catalog,
            entries,
            sync,
            defaults,
            runtimes,
            state: Mutex::new(TopicState {
                chunks,
                subs: BTreeMap::new(),
                sequences,
                appends: appends::Appends::new(write_refusal_ms),
            }),
            writer: Mutex::new(()),
            terminated: std::sync::atomic::AtomicBool::new(terminated),
            ledger: SharedLedger::new(ledger),
            counters: Mutex::new(counters),
            producers: Mutex::new(Producers::default()),
            key_shared: std::sync::atomic::AtomicBool::new(false),
            rate_in: Mutex::new((Rate::default(), Rate::default())),
            schemas,
            deleted: std::sync::atomic::AtomicBool::new(false),
            deduplicating: std::sync::atomic::AtomicBool::new(false),
        };
        topic.recover_subscriptions()?;
        Ok(topic)
    }

    /// Flushes appended entries to the disk (a no-op in memory or when nothing is pending).
    pub(crate) fn sync(&self) -> Result<(), StorageError> {
        self.entries.commit(SyncPolicy::Always)
    }

    /// Turns deduplication on or off (the broker's flag or the namespace's policy changed).
    pub(crate) fn set_deduplicating(&self, on: bool) {
        self.deduplicating
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether deduplication is on.
    pub(crate) fn is_deduplicating(&self) -> bool {
        self.deduplicating
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// PRODUCER_SUCCESS's `last_sequence_id`: with deduplication, the highest sequence id
    /// stored for a producer that named itself (it resumes after it); -1 otherwise.
    pub(crate) fn resume_after(&self, name: &str, named: bool) -> i64 {
        if !(named && self.is_deduplicating()) {
            return -1;
        }
        lock(&self.state)
            .sequences
            .last(name)
            .map_or(-1, |s| i64::try_from(s).unwrap_or(i64::MAX))
    }

    /// Registers a producer under (connection, producer id) by its access mode, or refuses it
    /// (a name already connected: Pulsar's ProducerBusy; two producers with one name would
    /// send the same chunk uuids). See [`Producers::admit`].
    pub(crate) fn add_producer(&self, r: ProducerRequest) -> Result<Admitted, ProducerRefused> {
        let name = r.info.name.clone();
        let admitted = lock(&self.producers).admit(r)?;
        self.producer_opened(&name);
        Ok(admitted)
    }

    /// A producer closed: its registration and its name are gone. Returns the waiting producer
    /// this made ready, if any.
    pub(crate) fn remove_producer(&self, conn: u64, producer_id: u64) -> Option<Promoted> {
        lock(&self.producers).remove((conn, producer_id))
    }

    /// Whether the producer is registered (ready or waiting); false once fenced or removed.
    pub(crate) fn has_producer(&self, conn: u64, producer_id: u64) -> bool {
        lock(&self.producers).contains((conn, producer_id))
    }

    /// The (connection, producer id) of every connected producer.
    pub(crate) fn producer_ids(&self) -> Vec<ProducerKey> {
        lock(&self.producers).keys()
    }

    /// How many producers and consumers are connected.
    pub(crate) fn clients(&self) -> usize {
        lock(&self.producers).len()
            + self
                .subscriptions()
                .iter()
                .map(|s| lock(&s.consumers).len())
                .sum::<usize>()
    }

    /// The admin API deleted this topic: it is no longer in the broker's registry.
    pub(crate) fn mark_deleted(&self) {
        self.deleted
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether the admin API deleted this topic (a producer or consumer still holding it
    /// must open the topic again by name).
    pub(crate) fn is_deleted(&self) -> bool {
        self.deleted.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Whether a Key_Shared subscription was ever created on this topic (for the batch WARN;
    /// read on every batched SEND, so it is one atomic load).
    pub(crate) fn had_key_shared(&self) -> bool {
        self.key_shared.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The version of `schema`, recorded through the catalog first when it is new (and
    /// compatible with the topic's under `strategy`).
    pub(crate) fn schema_version(
        &self,
        schema: &wire::proto::Schema,
        strategy: crate::schema::Strategy,
    ) -> Result<Vec<u8>, crate::schema::SchemaError> {
        self.schemas
            .get_or_create(schema, strategy, |all| self.catalog.record_schemas(all))
    }

    /// A consumer's schema (SUBSCRIBE) checked against the topic's; a topic with no schema,
    /// no client and no entry takes it as its first version (see
    /// [`SchemaRegistry::check_consumer`](crate::schema::SchemaRegistry::check_consumer)).
    pub(crate) fn check_consumer_schema(
        &self,
        schema: &wire::proto::Schema,
        strategy: crate::schema::Strategy,
    ) -> Result<(), crate::schema::SchemaError> {
        let idle = self.clients() == 0 && self.storage().0.entries == 0;
        self.schemas.check_consumer(schema, strategy, idle, |all| {
            self.catalog.record_schemas(all)
        })
    }

    /// The stored `0e01…` section of the entry at `p`: `None` when it is gone (trimmed); an
    /// error when the store has it but could not read it now.
    pub(crate) fn payload(&self, p: Position) -> Result<Option<Bytes>, StorageError> {
        self.entries.read(p)
    }

    /// The metadata of the entry at `p`, if it still exists (and can be read).
    pub(crate) fn meta(&self, p: Position) -> Option<Arc<EntryMeta>> {
        self.ledger.get(p).map(|e| e.meta)
    }

    /// How many messages the entry at `p` holds (its batch size), if it still exists.
    pub(crate) fn messages(&self, p: Position) -> Option<u64> {
        self.ledger.stats(p).map(|s| s.messages)
    }

    /// Every position of the chunked message that the chunk at `p` belongs to (just `p` when
    /// it is not a chunk).
    pub(crate) fn chunk_siblings(&self, p: Position) -> Vec<Position> {
        let st = lock(&self.state);
        let uuid = self
            .ledger
            .get(p)
            .and_then(|e| e.meta.chunk.as_ref().map(|c| c.uuid.clone()));
        match uuid.and_then(|u| st.chunks.get(&u)) {
            Some(ps) => ps.clone(),
            None => vec![p],
        }
    }

    /// The existing entries after `after` (from the first entry when `None`) up to `upto`
    /// inclusive, in order.
    pub(crate) fn positions_between(
        &self,
        after: Option<Position>,
        upto: Position,
    ) -> Vec<Position> {
        let ledger = self.ledger.read();
        let mut out = Vec::new();
        let mut p = match after {
            Some(a) => ledger.next_position(a),
            None => ledger.first_position(),
        };
        while let Some(q) = p.filter(|q| *q <= upto) {
            out.push(q);
            p = ledger.next_position(q);
        }
        out
    }

    /// The last entry's position, or the position before the first when there is none.
    pub(crate) fn last_position(&self) -> Position {
        let ledger = self.ledger.read();
        ledger
            .last_position()
            .unwrap_or_else(|| ledger.before_first())
    }

    /// The position a client's message id stands for, with Pulsar's two sentinels: `earliest`
    /// (ledger and entry -1, which arrive as `u64::MAX`) is the first entry, and `latest`
    /// (`i64::MAX`) is the position after the last entry. Any other id is taken as it is.
    pub(crate) fn resolve_message_id(&self, ledger_id: u64, entry_id: u64) -> Position {
        let ledger = self.ledger.read();
        let first = || ledger.before_first().next();
        if ledger_id == u64::MAX {
            first()
        } else if ledger_id >= i64::MAX as u64 {
            ledger.last_position().map_or_else(first, Position::next)
        } else {
            Position::new(ledger_id, entry_id)
        }
    }

    /// The first entry published at or after `publish_time` (ms), or the position after the
    /// last entry when none is. A binary search over publish times (as Pulsar's search by
    /// time is), which reads back O(log entries) entries' metadata, not the whole backlog.
    pub(crate) fn position_at_time(&self, publish_time: u64) -> Position {
        let ledger = self.ledger.read();
        ledger
            .find_by_publish_time(publish_time)
            .or_else(|| ledger.last_position().map(Position::next))
            .unwrap_or_else(|| ledger.before_first().next())
    }

    pub(crate) fn counters(&self) -> TopicCounters {
        *lock(&self.counters)
    }

    /// Entries that exist now: count, messages and bytes (storage size), and per ledger
    /// `(id, entries, bytes)`.
    pub(crate) fn storage(&self) -> (cursor::Backlog, Vec<(u64, u64, u64)>) {
        let per_ledger = self.ledger.read().ledger_totals();
        let mut total = cursor::Backlog::default();
        for (_, t) in &per_ledger {
            total.entries += t.entries;
            total.messages += t.messages;
            total.bytes += t.bytes;
        }
        let ledgers = per_ledger
            .into_iter()
            .map(|(id, t)| (id, t.entries, t.bytes))
            .collect();
        (total, ledgers)
    }

    /// Stops every subscription's runtime (broker shutdown, topic deletion). A runtime a
    /// consumer still holds is told to stop; its thread is joined when the last holder lets
    /// it go.
    pub(crate) fn close(&self) {
        let subs: Vec<_> = std::mem::take(&mut lock(&self.state).subs)
            .into_values()
            .collect();
        for s in subs {
            match Arc::try_unwrap(s) {
                Ok(s) => s.runtime.shutdown(),
                Err(s) => {
                    debug!(subscription = %s.name, "subscription still referenced: told to stop");
                    let _ = s.runtime.events().send(dispatcher::Event::Shutdown);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
