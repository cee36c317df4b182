//! A topic's producers and Pulsar's producer access modes (`AbstractTopic` in Pulsar):
//!
//! * **Shared** (the default): any number, but none while an exclusive producer is connected
//!   or waiting (`ProducerBusy`).
//! * **Exclusive**: only when no other producer is connected or waiting (`ProducerFenced`);
//!   the topic epoch moves on.
//! * **ExclusiveWithFencing**: takes the topic: every connected producer is closed (its client
//!   reconnects and is fenced by the epoch, or refused) and every waiting one refused.
//! * **WaitForExclusive**: queued while another producer is connected (PRODUCER_SUCCESS with
//!   `producer_ready = false`), ready when the producers before it left. A fenced one that
//!   reconnects is queued again, as in Pulsar (its sends wait; an Exclusive one is refused).
//!
//! An exclusive producer that reconnects with an epoch older than the topic's is fenced (another
//! exclusive producer came in between). The epoch lives in memory: a restart starts it again.
//! Pure rules over a map: the session applies what they decide (frames to other connections).

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use wire::proto::ServerError;

use super::ProducerInfo;

/// A producer's key: (connection, producer id on that connection).
pub(crate) type ProducerKey = (u64, u64);

/// A producer access mode, as PRODUCER asks for it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum AccessMode {
    #[default]
    Shared,
    Exclusive,
    ExclusiveWithFencing,
    WaitForExclusive,
}

impl AccessMode {
    /// The mode of PRODUCER's `producer_access_mode` (absent or unknown: Shared).
    pub(crate) fn from_wire(v: Option<i32>) -> AccessMode {
        use wire::proto::ProducerAccessMode as W;
        match v.and_then(|v| W::try_from(v).ok()) {
            Some(W::Exclusive) => AccessMode::Exclusive,
            Some(W::ExclusiveWithFencing) => AccessMode::ExclusiveWithFencing,
            Some(W::WaitForExclusive) => AccessMode::WaitForExclusive,
            Some(W::Shared) | None => AccessMode::Shared,
        }
    }

    /// Pulsar's name, as in topic stats.
    pub(crate) fn pulsar_name(self) -> &'static str {
        match self {
            AccessMode::Shared => "Shared",
            AccessMode::Exclusive => "Exclusive",
            AccessMode::ExclusiveWithFencing => "ExclusiveWithFencing",
            AccessMode::WaitForExclusive => "WaitForExclusive",
        }
    }
}

const WAITING: u8 = 0;
const READY: u8 = 1;
const CLOSED: u8 = 2;

/// Whether a producer may send: waiting (queued for exclusive access), ready, or closed by
/// the broker (fenced). Shared by the registry, which decides, and the session, which checks
/// it on every SEND (one atomic load).
#[derive(Clone, Debug, Default)]
pub(crate) struct ProducerGate(Arc<AtomicU8>);

impl ProducerGate {
    pub(crate) fn is_ready(&self) -> bool {
        self.0.load(Ordering::Acquire) == READY
    }

    #[cfg(test)]
    fn is_closed(&self) -> bool {
        self.0.load(Ordering::Acquire) == CLOSED
    }

    fn set(&self, v: u8) {
        self.0.store(v, Ordering::Release);
    }
}

/// Why a producer was refused, with Pulsar's messages.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ProducerRefused {
    #[error("Producer with name '{0}' is already connected to topic")]
    NameTaken(String),
    /// A Shared producer while an exclusive one is connected or waiting.
    #[error("Topic has an existing exclusive producer: {0}")]
    ExclusiveConnected(String),
    /// An Exclusive producer while an exclusive one is connected or waiting.
    #[error("Topic has an existing exclusive producer: {0}")]
    ExclusiveTaken(String),
    #[error("Topic has existing shared producers")]
    SharedConnected,
    #[error("Topic epoch has already moved. Current epoch: {current}, Producer epoch: {producer}")]
    EpochMoved { current: u64, producer: u64 },
    /// A waiting producer, when an ExclusiveWithFencing one took the topic.
    #[error("Fenced out")]
    FencedOut,
}

impl ProducerRefused {
    /// The error code Pulsar answers with.
    pub(crate) fn code(&self) -> ServerError {
        match self {
            ProducerRefused::NameTaken(_) | ProducerRefused::ExclusiveConnected(_) => {
                ServerError::ProducerBusy
            }
            _ => ServerError::ProducerFenced,
        }
    }
}

/// What became of an admitted producer.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Admitted {
    /// Ready now (false: queued, WaitForExclusive).
    pub ready: bool,
    /// The topic epoch for PRODUCER_SUCCESS (exclusive modes only).
    pub epoch: Option<u64>,
    /// ExclusiveWithFencing: connected producers to close (CLOSE_PRODUCER).
    pub fenced: Vec<ProducerKey>,
    /// ExclusiveWithFencing: waiting producers to refuse, with their PRODUCER's request id.
    pub refused_waiters: Vec<(ProducerKey, u64)>,
}

/// A waiting producer made ready when the exclusive one before it left: its connection gets a
/// second PRODUCER_SUCCESS for `request_id`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Promoted {
    pub key: ProducerKey,
    pub request_id: u64,
    pub name: String,
    pub epoch: u64,
}

struct Waiter {
    key: ProducerKey,
    info: ProducerInfo,
    gate: ProducerGate,
    request_id: u64,
    client_epoch: Option<u64>,
}

/// A topic's producers: connected (with their gates), the exclusive one, the waiting queue,
/// the topic epoch.
#[derive(Default)]
pub(crate) struct Producers {
    connected: BTreeMap<ProducerKey, (ProducerInfo, ProducerGate)>,
    exclusive: Option<ProducerKey>,
    waiting: VecDeque<Waiter>,
    epoch: Option<u64>,
}

/// A new producer's request: its key, description, gate, PRODUCER's request id and the
/// topic epoch it brings (a reconnecting exclusive producer).
pub(crate) struct Request {
    pub key: ProducerKey,
    pub info: ProducerInfo,
    pub gate: ProducerGate,
    pub request_id: u64,
    pub client_epoch: Option<u64>,
}

impl Producers {
    /// Admits a producer by its access mode (see the module doc), or refuses it. A refused
    /// producer is not registered.
    pub(crate) fn admit(&mut self, r: Request) -> Result<Admitted, ProducerRefused> {
        let name = r.info.name.clone();
        let taken = self.connected.values().any(|(p, _)| p.name == name)
            || self.waiting.iter().any(|w| w.info.name == name);
        if taken {
            return Err(ProducerRefused::NameTaken(name));
        }
        let exclusive_name = self
            .exclusive
            .and_then(|k| self.connected.get(&k))
            .map(|(p, _)| p.name.clone())
            .or_else(|| self.waiting.front().map(|w| w.info.name.clone()));
        let mut admitted = Admitted::default();
        match r.info.access {
            AccessMode::Shared => {
                if let Some(n) = exclusive_name {
                    return Err(ProducerRefused::ExclusiveConnected(n));
                }
            }
            AccessMode::Exclusive => {
                if let Some(n) = exclusive_name {
                    return Err(ProducerRefused::ExclusiveTaken(n));
                }
                if !self.connected.is_empty() {
                    return Err(ProducerRefused::SharedConnected);
                }
                admitted.epoch = Some(self.take_exclusive(r.key, r.client_epoch)?);
            }
            AccessMode::ExclusiveWithFencing => {
                admitted.fenced = self.fence_all();
                admitted.refused_waiters = self
                    .waiting
                    .drain(..)
                    .map(|w| {
                        w.gate.set(CLOSED);
                        (w.key, w.request_id)
                    })
                    .collect();
                admitted.epoch = Some(self.take_exclusive(r.key, r.client_epoch)?);
            }
            AccessMode::WaitForExclusive => {
                if exclusive_name.is_some() || !self.connected.is_empty() {
                    r.gate.set(WAITING);
                    self.waiting.push_back(Waiter {
                        key: r.key,
                        info: r.info,
                        gate: r.gate,
                        request_id: r.request_id,
                        client_epoch: r.client_epoch,
                    });
                    return Ok(admitted);
                }
                admitted.epoch = Some(self.take_exclusive(r.key, r.client_epoch)?);
            }
        }
        r.gate.set(READY);
        self.connected.insert(r.key, (r.info, r.gate));
        admitted.ready = true;
        Ok(admitted)
    }

    /// Makes `key` the exclusive producer and returns the new topic epoch: the client's own
    /// (a reconnect) unless the topic's has moved past it, else one more than the topic's.
    fn take_exclusive(
        &mut self,
        key: ProducerKey,
        client_epoch: Option<u64>,
    ) -> Result<u64, ProducerRefused> {
        let epoch = match (client_epoch, self.epoch) {
            (Some(mine), Some(current)) if mine < current => {
                return Err(ProducerRefused::EpochMoved {
                    current,
                    producer: mine,
                })
            }
            (Some(mine), _) => mine,
            (None, current) => current.map_or(0, |e| e + 1),
        };
        self.epoch = Some(epoch);
        self.exclusive = Some(key);
        Ok(epoch)
    }

    /// Closes every connected producer (their gates) and forgets them; returns their keys.
    fn fence_all(&mut self) -> Vec<ProducerKey> {
        self.exclusive = None;
        let fenced = std::mem::take(&mut self.connected);
        fenced
            .into_iter()
            .map(|(k, (_, gate))| {
                gate.set(CLOSED);
                k
            })
            .collect()
    }

    /// A producer left (closed, or its connection ended). When it was the exclusive one, the
    /// first waiting producer is made ready and returned.
    pub(crate) fn remove(&mut self, key: ProducerKey) -> Option<Promoted> {
        self.waiting.retain(|w| w.key != key);
        self.connected.remove(&key);
        if self.exclusive == Some(key) {
            self.exclusive = None;
        }
        if self.exclusive.is_some() || !self.connected.is_empty() {
            return None;
        }
        let w = self.waiting.pop_front()?;
        // As Pulsar: the epoch the producer brought (a reconnect), else the next one.
        let epoch = w
            .client_epoch
            .unwrap_or_else(|| self.epoch.map_or(0, |e| e + 1));
        self.epoch = Some(epoch);
        self.exclusive = Some(w.key);
        w.gate.set(READY);
        let promoted = Promoted {
            key: w.key,
            request_id: w.request_id,
            name: w.info.name.clone(),
            epoch,
        };
        self.connected.insert(w.key, (w.info, w.gate));
        Some(promoted)
    }

    /// Whether `key` is connected (ready) or waiting.
    pub(crate) fn contains(&self, key: ProducerKey) -> bool {
        self.connected.contains_key(&key) || self.waiting.iter().any(|w| w.key == key)
    }

    /// The connected producers' keys.
    pub(crate) fn keys(&self) -> Vec<ProducerKey> {
        self.connected.keys().copied().collect()
    }

    /// The connected producers.
    pub(crate) fn infos(&self) -> impl Iterator<Item = &ProducerInfo> {
        self.connected.values().map(|(p, _)| p)
    }

    /// How many are connected.
    pub(crate) fn len(&self) -> usize {
        self.connected.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(
        p: &mut Producers,
        id: u64,
        mode: AccessMode,
        epoch: Option<u64>,
    ) -> Result<Admitted, ProducerRefused> {
        p.admit(Request {
            key: (id, id),
            info: ProducerInfo {
                name: format!("p{id}"),
                access: mode,
                ..Default::default()
            },
            gate: ProducerGate::default(),
            request_id: 100 + id,
            client_epoch: epoch,
        })
    }

    use AccessMode::*;

    #[test]
    fn exclusive_refuses_everyone_else_until_it_leaves() {
        let mut p = Producers::default();
        assert_eq!(req(&mut p, 1, Exclusive, None).unwrap().epoch, Some(0));
        let busy = req(&mut p, 2, Shared, None).unwrap_err();
        assert_eq!(busy.code(), ServerError::ProducerBusy);
        let fenced = req(&mut p, 3, Exclusive, None).unwrap_err();
        assert_eq!(fenced, ProducerRefused::ExclusiveTaken("p1".into()));
        assert_eq!(fenced.code(), ServerError::ProducerFenced);
        assert_eq!(p.remove((1, 1)), None);
        assert_eq!(req(&mut p, 4, Exclusive, None).unwrap().epoch, Some(1));
    }

    #[test]
    fn exclusive_is_refused_while_shared_producers_are_connected() {
        let mut p = Producers::default();
        req(&mut p, 1, Shared, None).unwrap();
        req(&mut p, 2, Shared, None).unwrap();
        assert_eq!(
            req(&mut p, 3, Exclusive, None).unwrap_err(),
            ProducerRefused::SharedConnected
        );
        assert_eq!(
            req(&mut p, 1, Shared, None).unwrap_err(),
            ProducerRefused::NameTaken("p1".into())
        );
    }

    #[test]
    fn fencing_closes_the_others_and_refuses_the_waiting() {
        let mut p = Producers::default();
        req(&mut p, 1, Exclusive, None).unwrap();
        let gate1 = p.connected[&(1, 1)].1.clone();
        let w = req(&mut p, 2, WaitForExclusive, None).unwrap();
        assert!(!w.ready);
        let a = req(&mut p, 3, ExclusiveWithFencing, None).unwrap();
        assert_eq!(a.fenced, vec![(1, 1)]);
        assert_eq!(a.refused_waiters, vec![((2, 2), 102)]);
        assert_eq!(a.epoch, Some(1));
        assert!(gate1.is_closed());
        assert_eq!(p.keys(), vec![(3, 3)]);
        // The fenced exclusive producer reconnects with its old epoch: fenced for good.
        p.remove((3, 3));
        let e = req(&mut p, 1, Exclusive, Some(0)).unwrap_err();
        assert_eq!(
            e,
            ProducerRefused::EpochMoved {
                current: 1,
                producer: 0
            }
        );
    }

    #[test]
    fn waiters_are_promoted_in_order_when_the_exclusive_one_leaves() {
        let mut p = Producers::default();
        req(&mut p, 1, Shared, None).unwrap();
        assert!(!req(&mut p, 2, WaitForExclusive, None).unwrap().ready);
        assert!(!req(&mut p, 3, WaitForExclusive, None).unwrap().ready);
        assert!(
            req(&mut p, 4, Shared, None).is_err(),
            "a waiter blocks Shared producers"
        );
        let first = p.remove((1, 1)).unwrap();
        assert_eq!((first.key, first.request_id, first.epoch), ((2, 2), 102, 0));
        assert!(p.connected[&(2, 2)].1.is_ready());
        let second = p.remove((2, 2)).unwrap();
        assert_eq!((second.key, second.epoch), ((3, 3), 1));
        assert_eq!(p.remove((3, 3)), None);
        assert_eq!(p.len(), 0);
    }

    #[test]
    fn a_waiter_that_leaves_is_not_promoted() {
        let mut p = Producers::default();
        req(&mut p, 1, Exclusive, None).unwrap();
        req(&mut p, 2, WaitForExclusive, None).unwrap();
        assert!(p.contains((2, 2)));
        p.remove((2, 2));
        assert_eq!(p.remove((1, 1)), None);
    }
}
