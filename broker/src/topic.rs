//! Topics, their subscriptions and the payload store.
//!
//! A topic owns the master ledger (entry metadata, the positions Pulsar clients see in
//! SEND_RECEIPT) and the payload of every entry: the `0e01…` section of the producer's SEND,
//! stored verbatim and sent back after each MESSAGE header. Each subscription runs one
//! dispatcher [`Runtime`] over its own replica of the ledger: a clone taken when the
//! subscription is created, then fed every later append in the same order, so the replica
//! assigns the same positions (metadata is shared through `Arc`). Entries below every
//! subscription's mark-delete position are trimmed with their payloads.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use cursor::{EntryMeta, InMemoryLedger, Ledger, ManagedCursor, MemoryStore, Position};
use dispatcher::{
    ConsumerId, DispatcherConfig, KeySharedConfig, KeySharedMode, Runtime, SubscriptionType,
};
use tracing::{debug, info, warn};

/// Locks a mutex, recovering the data if a thread panicked while holding it (the data is a
/// registry whose invariants hold between statements).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
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

impl SubKind {
    pub(crate) fn dispatcher_config(self) -> DispatcherConfig {
        match self {
            SubKind::Exclusive | SubKind::Shared => DispatcherConfig::shared(),
            SubKind::KeyShared(ks) => DispatcherConfig::new(SubscriptionType::KeyShared(ks)),
        }
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
                KeySharedMode::Exclusive => "STICKY",
                _ => "AUTO_SPLIT",
            }),
            _ => None,
        }
    }
}

/// A consumer connected to a subscription, as the registry knows it.
#[derive(Clone, Debug)]
pub(crate) struct ConsumerInfo {
    /// The client's consumer name.
    pub name: String,
    /// The connection it came on.
    pub conn: u64,
    /// The consumer id the client chose (per connection).
    pub client_id: u64,
    /// The peer address.
    pub address: String,
}

/// One subscription: its dispatcher runtime and who is connected.
pub(crate) struct Subscription {
    pub name: String,
    pub kind: SubKind,
    pub runtime: Runtime,
    pub consumers: Mutex<BTreeMap<ConsumerId, ConsumerInfo>>,
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
}

struct TopicState {
    ledger: InMemoryLedger,
    /// Chunk uuid → positions of its chunks (for redelivery expansion).
    chunks: HashMap<String, Vec<Position>>,
    subs: BTreeMap<String, Arc<Subscription>>,
    /// Names of the connected producers (clients build chunk uuids from them).
    producers: HashSet<String>,
}

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
    state: Mutex<TopicState>,
    payloads: RwLock<BTreeMap<Position, Arc<[u8]>>>,
    counters: Mutex<TopicCounters>,
}

impl std::fmt::Debug for Topic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Topic")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Topic {
    pub(crate) fn new(name: String, entries_per_ledger: u64) -> Topic {
        Topic {
            name,
            state: Mutex::new(TopicState {
                ledger: InMemoryLedger::new(entries_per_ledger),
                chunks: HashMap::new(),
                subs: BTreeMap::new(),
                producers: HashSet::new(),
            }),
            payloads: RwLock::new(BTreeMap::new()),
            counters: Mutex::new(TopicCounters::default()),
        }
    }

    /// Appends one entry with its stored payload section; every subscription sees it.
    pub(crate) fn publish(&self, meta: EntryMeta, section: Arc<[u8]>) -> Position {
        let mut st = lock(&self.state);
        let messages = u64::from(meta.messages());
        let bytes = u64::from(meta.size);
        let chunk_uuid = meta.chunk.as_ref().map(|c| c.uuid.clone());
        let pos = st.ledger.append(meta.clone());
        // The payload is in place before any subscription can dispatch the entry.
        match self.payloads.write() {
            Ok(mut p) => p.insert(pos, section),
            Err(p) => p.into_inner().insert(pos, section),
        };
        if let Some(uuid) = chunk_uuid {
            st.chunks.entry(uuid).or_default().push(pos);
        }
        for sub in st.subs.values() {
            sub.runtime.publish(vec![meta.clone()]);
        }
        drop(st);
        let mut c = lock(&self.counters);
        c.msg_in += messages;
        c.bytes_in += bytes;
        c.entries_in += 1;
        pos
    }

    /// Claims `name` for a new producer: false when a connected producer already has it
    /// (Pulsar answers ProducerBusy; two producers with one name would send the same chunk uuids).
    pub(crate) fn claim_producer_name(&self, name: &str) -> bool {
        lock(&self.state).producers.insert(name.to_owned())
    }

    /// A producer closed: its name is free again.
    pub(crate) fn release_producer_name(&self, name: &str) {
        lock(&self.state).producers.remove(name);
    }

    /// The stored `0e01…` section of the entry at `p`.
    pub(crate) fn payload(&self, p: Position) -> Option<Arc<[u8]>> {
        match self.payloads.read() {
            Ok(m) => m.get(&p).cloned(),
            Err(m) => m.into_inner().get(&p).cloned(),
        }
    }

    /// The metadata of the entry at `p`, if it still exists.
    pub(crate) fn meta(&self, p: Position) -> Option<EntryMeta> {
        lock(&self.state).ledger.meta(p).cloned()
    }

    /// Every position of the chunked message that the chunk at `p` belongs to (just `p` when
    /// it is not a chunk).
    pub(crate) fn chunk_siblings(&self, p: Position) -> Vec<Position> {
        let st = lock(&self.state);
        let uuid = st
            .ledger
            .meta(p)
            .and_then(|m| m.chunk.as_ref().map(|c| c.uuid.clone()));
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
        let st = lock(&self.state);
        let mut out = Vec::new();
        let mut p = match after {
            Some(a) => st.ledger.next_position(a),
            None => st.ledger.first_position(),
        };
        while let Some(q) = p.filter(|q| *q <= upto) {
            out.push(q);
            p = st.ledger.next_position(q);
        }
        out
    }

    /// The last entry's position, or the position before the first when there is none.
    pub(crate) fn last_position(&self) -> Position {
        let st = lock(&self.state);
        st.ledger
            .last_position()
            .unwrap_or_else(|| st.ledger.before_first())
    }

    /// The position a client's message id stands for, with Pulsar's two sentinels: `earliest`
    /// (ledger and entry -1, which arrive as `u64::MAX`) is the first entry, and `latest`
    /// (`i64::MAX`) is the position after the last entry. Any other id is taken as it is.
    pub(crate) fn resolve_message_id(&self, ledger_id: u64, entry_id: u64) -> Position {
        let st = lock(&self.state);
        let first = || st.ledger.before_first().next();
        if ledger_id == u64::MAX {
            first()
        } else if ledger_id >= i64::MAX as u64 {
            st.ledger.last_position().map_or_else(first, Position::next)
        } else {
            Position::new(ledger_id, entry_id)
        }
    }

    /// The first entry published at or after `publish_time` (ms), or the position after the
    /// last entry when none is.
    pub(crate) fn position_at_time(&self, publish_time: u64) -> Position {
        let st = lock(&self.state);
        let mut p = st.ledger.first_position();
        while let Some(q) = p {
            if st
                .ledger
                .meta(q)
                .is_some_and(|m| m.publish_time >= publish_time)
            {
                return q;
            }
            p = st.ledger.next_position(q);
        }
        st.ledger
            .last_position()
            .map_or_else(|| st.ledger.before_first().next(), |l| l.next())
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
                return Err(SubscribeError::TypeMismatch {
                    sub: name.to_owned(),
                    existing: s.kind.pulsar_name(),
                    asked: kind.pulsar_name(),
                });
            }
            if s.kind == SubKind::Exclusive && !lock(&s.consumers).is_empty() {
                return Err(SubscribeError::ExclusiveBusy(name.to_owned()));
            }
            return Ok(s.clone());
        }
        let replica = st.ledger.clone();
        let mut cursor = ManagedCursor::new(name, &replica, MemoryStore::new());
        if initial == InitialPosition::Latest {
            // A new subscription at the end: nothing published so far is backlog.
            let _ = cursor.clear_backlog(&replica);
        }
        let runtime = Runtime::start(kind.dispatcher_config(), cursor, replica);
        let sub = Arc::new(Subscription {
            name: name.to_owned(),
            kind,
            runtime,
            consumers: Mutex::new(BTreeMap::new()),
        });
        info!(topic = %self.name, subscription = name, kind = kind.pulsar_name(), "subscription created");
        st.subs.insert(name.to_owned(), sub.clone());
        Ok(sub)
    }

    /// The subscription `name`, if it exists.
    pub(crate) fn get_subscription(&self, name: &str) -> Option<Arc<Subscription>> {
        lock(&self.state).subs.get(name).cloned()
    }

    /// Every subscription, by name.
    pub(crate) fn subscriptions(&self) -> Vec<Arc<Subscription>> {
        lock(&self.state).subs.values().cloned().collect()
    }

    /// Removes the subscription (UNSUBSCRIBE); its runtime stops when the last reference goes.
    pub(crate) fn remove_subscription(&self, name: &str) -> Option<Arc<Subscription>> {
        let removed = lock(&self.state).subs.remove(name);
        if removed.is_some() {
            info!(topic = %self.name, subscription = name, "subscription removed");
        }
        removed
    }

    pub(crate) fn counters(&self) -> TopicCounters {
        *lock(&self.counters)
    }

    /// Drops entries (and payloads) below every subscription's mark-delete position.
    /// `mark_deletes` are the subscriptions' current mark-delete positions; with no
    /// subscription nothing is trimmed (Pulsar keeps messages for subscriptions to come only
    /// with retention, which this broker does not have: it keeps them).
    pub(crate) fn trim(&self, mark_deletes: &[Position]) {
        let Some(min) = mark_deletes.iter().min().copied() else {
            return;
        };
        let below = min.next();
        let mut st = lock(&self.state);
        st.ledger.trim_below(below);
        st.chunks.retain(|_, ps| {
            ps.retain(|p| *p >= below);
            !ps.is_empty()
        });
        drop(st);
        let mut payloads = match self.payloads.write() {
            Ok(p) => p,
            Err(p) => p.into_inner(),
        };
        let keep = payloads.split_off(&below);
        let dropped = payloads.len();
        *payloads = keep;
        if dropped > 0 {
            debug!(topic = %self.name, dropped, below = %below, "entries trimmed");
        }
    }

    /// Stops every subscription's runtime (broker shutdown).
    pub(crate) fn close(&self) {
        let subs: Vec<_> = std::mem::take(&mut lock(&self.state).subs)
            .into_values()
            .collect();
        for s in subs {
            match Arc::try_unwrap(s) {
                Ok(s) => s.runtime.shutdown(),
                Err(s) => {
                    warn!(subscription = %s.name, "subscription still referenced at shutdown")
                }
            }
        }
    }
}

/// A topic name Pulsar clients send: `persistent://tenant/namespace/topic`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TopicName {
    pub tenant: String,
    pub namespace: String,
    pub local: String,
}

impl TopicName {
    /// Parses a fully qualified persistent topic name.
    pub(crate) fn parse(s: &str) -> Result<TopicName, String> {
        let rest = if let Some(r) = s.strip_prefix("persistent://") {
            r
        } else if s.starts_with("non-persistent://") {
            return Err(format!("non-persistent topics are not served: {s}"));
        } else {
            return Err(format!(
                "topic name must be persistent://tenant/namespace/topic, got `{s}`"
            ));
        };
        let mut parts = rest.splitn(3, '/');
        let (Some(t), Some(n), Some(l)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(format!(
                "topic name must be persistent://tenant/namespace/topic, got `{s}`"
            ));
        };
        if t.is_empty() || n.is_empty() || l.is_empty() {
            return Err(format!("empty part in topic name `{s}`"));
        }
        Ok(TopicName {
            tenant: t.to_owned(),
            namespace: n.to_owned(),
            local: l.to_owned(),
        })
    }

    /// The canonical form.
    pub(crate) fn full(&self) -> String {
        format!(
            "persistent://{}/{}/{}",
            self.tenant, self.namespace, self.local
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names() {
        let t = TopicName::parse("persistent://public/default/a/b").unwrap();
        assert_eq!(t.local, "a/b");
        assert_eq!(t.full(), "persistent://public/default/a/b");
        assert!(TopicName::parse("public/default/t").is_err());
        assert!(TopicName::parse("persistent://public//t").is_err());
        assert!(TopicName::parse("non-persistent://public/default/t").is_err());
    }

    #[test]
    fn earliest_and_latest_message_ids_resolve_to_the_ends() {
        let t = Topic::new("persistent://p/d/t".into(), 3);
        assert_eq!(
            t.resolve_message_id(u64::MAX, u64::MAX),
            Position::new(1, 0)
        );
        let section: Arc<[u8]> = Arc::from(&b"x"[..]);
        let ps: Vec<_> = (0..4)
            .map(|i| t.publish(EntryMeta::simple(i, 1), section.clone()))
            .collect();
        assert_eq!(t.resolve_message_id(u64::MAX, u64::MAX), ps[0]);
        let latest = i64::MAX as u64;
        assert_eq!(t.resolve_message_id(latest, latest), ps[3].next());
        assert_eq!(t.resolve_message_id(1, 2), Position::new(1, 2));
        // Ledgers of 3 entries: 1:0 1:1 1:2 2:0.
        assert_eq!(
            t.positions_between(None, Position::new(1, 1)),
            ps[..2].to_vec()
        );
        assert_eq!(t.positions_between(Some(ps[1]), ps[3]), ps[2..].to_vec());
        assert_eq!(
            t.positions_between(Some(ps[3]), ps[3]),
            Vec::<Position>::new()
        );
        t.close();
    }

    #[test]
    fn a_late_subscription_sees_the_same_positions() {
        let t = Topic::new("persistent://p/d/t".into(), 3);
        let section: Arc<[u8]> = Arc::from(&b"x"[..]);
        let p0 = t.publish(EntryMeta::simple(1, 1), section.clone());
        let early = t
            .subscription("early", SubKind::Shared, InitialPosition::Earliest)
            .unwrap();
        let ps: Vec<_> = (0..4)
            .map(|i| t.publish(EntryMeta::simple(i, 1), section.clone()))
            .collect();
        let late = t
            .subscription("late", SubKind::Shared, InitialPosition::Earliest)
            .unwrap();
        let p5 = t.publish(EntryMeta::simple(9, 1), section);
        assert_eq!(p0, Position::new(1, 0));
        assert_eq!(ps[2], Position::new(2, 0));
        assert_eq!(p5, Position::new(2, 2));
        for s in [&early, &late] {
            let c = s
                .runtime
                .add_consumer(dispatcher::ConsumerSpec::new(1, "c"))
                .unwrap();
            c.flow(100);
            let mut got = Vec::new();
            while got.len() < 6 {
                let b = c
                    .deliveries
                    .recv_timeout(std::time::Duration::from_secs(5))
                    .unwrap();
                got.extend(b.iter().map(|d| d.position));
            }
            let mut want = vec![p0];
            want.extend(&ps);
            want.push(p5);
            assert_eq!(got, want);
        }
        assert!(matches!(
            t.subscription(
                "early",
                SubKind::KeyShared(KeySharedConfig::default()),
                InitialPosition::Latest
            ),
            Err(SubscribeError::TypeMismatch { .. })
        ));
        drop((early, late));
        t.close();
    }
}
