//! Where a consumer's deliveries go: a bounded channel the caller reads, or a sink the
//! dispatcher thread calls.

use crossbeam_channel::{Sender, TrySendError};

use super::Delivery;

/// Takes one consumer's deliveries on the dispatcher thread, in place of a channel
/// ([`Runtime::add_consumer_with_sink`](super::Runtime::add_consumer_with_sink)): a broker
/// encodes each send into its connection's write queue right there, with no thread between
/// the dispatcher and the socket writer.
///
/// `deliver` must not block: the dispatcher thread serves every consumer of the subscription.
pub trait DeliverySink: Send {
    /// Takes one send (the entries in dispatch order). [`Refused::Full`] gives the send back
    /// when there is no room now: the dispatcher takes the entries back and pauses the
    /// consumer until [`has_room`](Self::has_room) says so (it asks every few milliseconds).
    /// [`Refused::Closed`]: the consumer is gone (its removal is on the way); the send is
    /// dropped.
    fn deliver(&mut self, deliveries: Vec<Delivery>) -> Result<(), Refused>;

    /// Whether a paused consumer may resume: the sink has drained enough to take sends again.
    fn has_room(&self) -> bool;

    /// Failover: the consumer became the active one (`true`) or stands by (`false`). A broker
    /// tells its client (Pulsar's ACTIVE_CONSUMER_CHANGE). Must not block. Default: ignored.
    fn active_changed(&mut self, active: bool) {
        let _ = active;
    }

    /// Something the sink's owner sent it through the dispatcher's events
    /// ([`Event::ToSink`](super::Event::ToSink)), handed over on the dispatcher's thread: the
    /// completion of work the sink asked for elsewhere (a broker's storage read, with the
    /// entries it read). A paused consumer is looked at again right after. Must not block.
    /// Default: dropped.
    fn receive(&mut self, message: Box<dyn std::any::Any + Send>) {
        drop(message);
    }
}

/// Why a [`DeliverySink`] did not take a send.
#[derive(Debug)]
pub enum Refused {
    /// No room now; the send, given back.
    Full(Vec<Delivery>),
    /// The consumer's destination is gone.
    Closed,
}

/// Where a consumer's deliveries go ([`Event::ConsumerAdded`](super::Event::ConsumerAdded)).
pub enum Destination {
    /// A bounded channel the consumer's thread reads; full at capacity, room again at half.
    Channel(Sender<Vec<Delivery>>),
    /// A sink the dispatcher thread calls.
    Sink(Box<dyn DeliverySink>),
}

impl std::fmt::Debug for Destination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Destination::Channel(_) => "Channel",
            Destination::Sink(_) => "Sink",
        })
    }
}

impl Destination {
    pub(super) fn deliver(&mut self, deliveries: Vec<Delivery>) -> Result<(), Refused> {
        match self {
            Destination::Channel(tx) => tx.try_send(deliveries).map_err(|e| match e {
                TrySendError::Full(d) => Refused::Full(d),
                TrySendError::Disconnected(_) => Refused::Closed,
            }),
            Destination::Sink(s) => s.deliver(deliveries),
        }
    }

    /// Failover notices reach a sink; a channel carries deliveries only (ask
    /// [`Runtime::stats`](super::Runtime::stats) for the active consumer instead).
    pub(super) fn active_changed(&mut self, active: bool) {
        if let Destination::Sink(s) = self {
            s.active_changed(active);
        }
    }

    /// Hands `message` to a sink ([`DeliverySink::receive`]); a channel drops it.
    pub(super) fn receive(&mut self, message: Box<dyn std::any::Any + Send>) {
        if let Destination::Sink(s) = self {
            s.receive(message);
        }
    }

    /// A channel resumes at half full; a sink when it says so.
    pub(super) fn has_room(&self) -> bool {
        match self {
            Destination::Channel(tx) => tx.len() <= tx.capacity().unwrap_or(usize::MAX) / 2,
            Destination::Sink(s) => s.has_room(),
        }
    }
}
