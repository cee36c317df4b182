//! Subscriptions: their types as clients ask for them, their dispatcher runtimes, and the rules
//! for creating, retyping and removing them (recorded through the topic's
//! [`TopicCatalog`](super::catalog::TopicCatalog)).

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use cursor::{ManagedCursor, MarkDeleteMove, Position};
use dispatcher::{
    AdminOp, ConsumerId, DispatcherConfig, FailoverConfig, KeySharedConfig, KeySharedMode, Runtime,
    SubscriptionType,
};
use tracing::{info, warn};

use super::{Rate, Topic, TopicName, TopicState};
use crate::config::Legacy;
use crate::storage::StorageError;
use crate::sync::lock;

/// The subscription type a SUBSCRIBE asked for, as the broker serves it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SubKind {
    /// Pulsar's Exclusive: Shared dispatch with at most one consumer.
    Exclusive,
    /// Shared.
    Shared,
    /// Failover: one active consumer (the dispatcher's Failover type).
    Failover,
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
    /// Unacked limits, Key_Shared look-ahead and unblocking (`--max-unacked-messages-*`, …).
    pub limits: crate::config::DispatchLimits,
}

impl SubKind {
    /// The dispatcher configuration of a subscription of this kind on `topic` (a Failover
    /// subscription picks its active consumer by the topic's partition index or name, as Pulsar
    /// does).
    pub(crate) fn dispatcher_config(
        self,
        defaults: &SubscriptionDefaults,
        topic: &str,
    ) -> DispatcherConfig {
        let SubscriptionDefaults {
            legacy,
            max_unacked_per_key,
            delayed_delivery: delayed,
            limits,
        } = *defaults;
        let mut cfg = match self {
            SubKind::Exclusive | SubKind::Shared => DispatcherConfig::shared(),
            SubKind::Failover => DispatcherConfig::failover(
                match TopicName::parse(topic).ok().and_then(|n| n.partition_of()) {
                    Some((_, i)) => FailoverConfig::partition(i),
                    None => FailoverConfig::topic(topic),
                },
            ),
            SubKind::KeyShared(ks) => DispatcherConfig::new(SubscriptionType::KeyShared(ks)),
        };
        limits.apply(&mut cfg);
        // As in Pulsar: Shared and Key_Shared honour deliver-at times; Exclusive and Failover
        // dispatch a delayed message at once (the dispatcher turns it off for Failover).
        cfg.delayed_delivery = delayed;
        if self == SubKind::Exclusive {
            cfg.delayed_delivery.enabled = false;
        }
        if matches!(self, SubKind::KeyShared(_)) && !legacy.unordered_nack {
            cfg.max_unacked_per_key = max_unacked_per_key;
        }
        cfg.legacy_mark_delete_cleanup = legacy.mark_delete_cleanup;
        cfg.legacy_replay_settle = legacy.replay_settle;
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
            SubKind::Failover => "Failover",
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
    /// The client's version, from its CONNECT.
    pub client_version: String,
    /// The consumer's metadata (SUBSCRIBE's `metadata` pairs).
    pub metadata: std::collections::BTreeMap<String, String>,
    /// Messages and bytes sent to it (its delivery sink counts what the write queue took).
    pub out: Arc<OutCounters>,
    /// REACHED_END_OF_TOPIC was sent to it (a terminated topic, everything acknowledged).
    pub reached_end: Arc<std::sync::atomic::AtomicBool>,
}

/// Messages and bytes sent to one consumer.
#[derive(Debug, Default)]
pub(crate) struct OutCounters {
    pub messages: AtomicU64,
    pub bytes: AtomicU64,
    /// Deliveries whose payload could not be read from the store (each tried again later).
    pub read_failures: AtomicU64,
}

/// How a topic's subscriptions run their dispatchers. The core never starts a thread: the shell
/// hands the broker state one of these (a thread per subscription, or its dispatch pool), and
/// a stepped broker [`SteppedRuntimes`], whose loops run only when its driver steps them.
pub(crate) trait Runtimes: Send + Sync + std::fmt::Debug {
    /// Starts the dispatcher of a subscription over `ledger` from `cursor`.
    fn start(
        &self,
        cfg: DispatcherConfig,
        cursor: ManagedCursor<super::SubStore>,
        ledger: cursor::SharedLedger,
    ) -> Runtime;

    /// Runs `request` (the reading of entries a delivery did not find in memory) where IO
    /// may, now or later, and completes it.
    fn read(&self, request: super::ReadRequest);

    /// Whether the dispatchers started run only when stepped
    /// ([`BrokerState::step`](crate::state::BrokerState::step)).
    fn stepped(&self) -> bool {
        false
    }
}

/// No thread: whoever drives the broker steps the dispatchers at the time `clock` reads
/// ([`BrokerState::step`](crate::state::BrokerState::step)), as the simulator does, with
/// `options`. An admin request to a dispatcher runs its loop inline; a read request runs
/// inline too, or waits until the driver completes it while `faults` hold reads
/// ([`StoreFaults::hold_reads`](crate::storage::StoreFaults::hold_reads)).
#[derive(Clone, Debug, Default)]
pub(crate) struct SteppedRuntimes {
    pub clock: dispatcher::StepClock,
    pub options: dispatcher::RuntimeOptions,
    pub faults: Arc<crate::storage::StoreFaults>,
}

impl Runtimes for SteppedRuntimes {
    fn start(
        &self,
        cfg: DispatcherConfig,
        cursor: ManagedCursor<super::SubStore>,
        ledger: cursor::SharedLedger,
    ) -> Runtime {
        Runtime::start_stepped(cfg, cursor, ledger, self.options, self.clock.clone())
    }

    fn read(&self, request: super::ReadRequest) {
        self.faults.run_read(Box::new(move || request.run()));
    }

    fn stepped(&self) -> bool {
        true
    }
}

/// One subscription: its dispatcher runtime and who is connected.
pub(crate) struct Subscription {
    pub name: String,
    pub kind: SubKind,
    pub runtime: Runtime,
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
    /// Restarts every subscription the catalog recorded, from its stored cursor.
    pub(super) fn recover_subscriptions(&self) -> Result<(), StorageError> {
        for (name, kind) in self.catalog.recorded() {
            let mut st = lock(&self.state);
            let sub = self.start_subscription(&st, &name, kind, InitialPosition::Earliest, true)?;
            st.subs.insert(name, sub);
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
        let sub = self.start_subscription(&st, name, kind, initial, false)?;
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
            runtime, kind: was, ..
        } = old;
        runtime.shutdown();
        let sub = self.start_subscription(st, name, kind, InitialPosition::Earliest, true)?;
        self.catalog.record(name, kind)?;
        info!(topic = %self.name, subscription = name, from = was.pulsar_name(), to = kind.pulsar_name(), "subscription type changed (no consumer was connected)");
        st.subs.insert(name.to_owned(), sub.clone());
        Ok(sub)
    }

    /// Starts a subscription's runtime over the topic's ledger, recording a new
    /// one in the catalog. `recover` reads the cursor back from the catalog (a missing or
    /// unusable cursor starts at the earliest entry: redelivery rather than loss). `_held` is
    /// the topic's state, whose lock the caller holds (retention does not trim meanwhile).
    fn start_subscription(
        &self,
        _held: &TopicState,
        name: &str,
        kind: SubKind,
        initial: InitialPosition,
        recover: bool,
    ) -> Result<Arc<Subscription>, StorageError> {
        // AUTO_SPLIT as the broker is configured (a subscription read back from its file
        // says only AUTO_SPLIT).
        let kind = match kind {
            SubKind::KeyShared(mut ks) if ks.mode != KeySharedMode::Sticky => {
                ks.mode = self.defaults.limits.auto_split_mode();
                SubKind::KeyShared(ks)
            }
            k => k,
        };
        if matches!(kind, SubKind::KeyShared(_)) {
            self.key_shared
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        let ledger = self.ledger.clone();
        if !recover {
            self.catalog.record(name, kind)?;
        }
        let recovered = match recover {
            true => ManagedCursor::recover(&ledger, self.catalog.cursor_store(name, false)?)
                .map_err(|e| warn!(topic = %self.name, subscription = name, error = %e, "cursor not recovered; starting at the earliest entry"))
                .ok(),
            false => None,
        };
        let cursor = match recovered {
            Some(c) => c,
            None => {
                let store = self.catalog.cursor_store(name, true)?;
                let mut c = ManagedCursor::new(name, &ledger, store);
                if initial == InitialPosition::Latest && !recover {
                    // A new subscription at the end: nothing published so far is backlog.
                    let _ = c.clear_backlog(&ledger);
                }
                if self.catalog.durable() {
                    let _ = c.persist();
                }
                c
            }
        };
        let cfg = kind.dispatcher_config(&self.defaults, &self.name);
        let runtime = self.runtimes.start(cfg, cursor, ledger);
        info!(topic = %self.name, subscription = name, kind = kind.pulsar_name(), recovered = recover, "subscription started");
        Ok(Arc::new(Subscription {
            name: name.to_owned(),
            kind,
            runtime,
            consumers: Mutex::new(BTreeMap::new()),
            rate_out: Mutex::new((Rate::default(), Rate::default())),
            last_expire: AtomicU64::new(0),
        }))
    }

    /// Moves the subscription's cursor to `target` (a seek or an admin reset); see
    /// [`Topic::move_cursor`].
    pub(crate) fn reset(&self, sub: &Subscription, target: Position) -> Option<MarkDeleteMove> {
        self.move_cursor(sub, AdminOp::ResetTo(target))
    }

    /// Runs an operation that moves the subscription's cursor (skip, clear-backlog, expiry,
    /// reset) under the topic's state lock, and returns the move. Retention chooses its
    /// boundary from the cursors and trims under the same lock, so a reset never lands on
    /// entries being trimmed; and no entry is appended while the cursor walks the ledger.
    pub(crate) fn move_cursor(&self, sub: &Subscription, op: AdminOp) -> Option<MarkDeleteMove> {
        let _held = lock(&self.state);
        sub.runtime.admin(op)
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
            self.catalog.remove(name);
            info!(topic = %self.name, subscription = name, "subscription removed");
        }
        removed
    }
}
