//! How one consumer's deliveries reach its connection: the subscription's dispatcher (on a
//! dispatch worker) encodes each send as MESSAGE frames straight into the connection's write queue, and tells
//! a Failover consumer whether it is active.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use cursor::Position;
use dispatcher::{ConsumerId, Delivery, DeliverySink, Refused};
use tracing::{debug, info, warn};

use crate::state::{Offer, Outbox};
use crate::storage::Cached;
use crate::topic::{OutCounters, ReadOutcome, ReadRequest, Topic};

/// How one consumer's deliveries become MESSAGE frames: the subscription's dispatcher (on a
/// dispatch worker) encodes each send straight into the connection's write queue (a [`DeliverySink`]).
pub(crate) struct DeliveryRoute {
    /// The consumer id the client chose.
    pub(super) consumer_id: u64,
    pub(super) counters: Arc<OutCounters>,
    pub(super) topic: Arc<Topic>,
    pub(super) out: Arc<dyn Outbox>,
    /// Set once the SUBSCRIBE's SUCCESS is in the write queue (see `Session::poll_transmit`):
    /// no MESSAGE overtakes it.
    pub(super) ready: Arc<AtomicBool>,
    /// Set when the session closed the consumer: a send its dispatcher makes before it handles
    /// the removal is refused as [`Refused::Closed`] (not written; its entries come back with
    /// the removal, and a first chunk's pin moves back).
    pub(super) closed: Arc<AtomicBool>,
    /// Whether a partly acked batch carries its `ack_set` (off only under `--legacy
    /// no-batch-ack-set`).
    pub(super) send_ack_set: bool,
    /// This consumer's read request in flight, the reads that failed in a row, what the last
    /// read brought.
    pub(super) reads: ReadState,
    /// The subscription's dispatcher loop: a read's completion comes back through it
    /// ([`dispatcher::Event::ToSink`]), on the dispatcher's thread.
    pub(super) events: dispatcher::EventSender,
    /// This consumer's id in the dispatcher (the completion's address).
    pub(super) dispatcher_id: ConsumerId,
}

/// A consumer's reads of entries that were not in memory: whether one is in flight (another is
/// not asked for meanwhile, and the consumer stays paused), how many failed in a row (0: the
/// last one succeeded), the looks at [`DeliverySink::has_room`] still to answer "no" before
/// the next try after a failure, and the payloads the last read brought (taken by the next
/// sends). Owned by the delivery route, on the dispatcher's thread: the read's completion
/// reaches it as a [`ReadDone`] through the dispatcher's events, so nothing here is shared.
#[derive(Debug, Default)]
pub(crate) struct ReadState {
    in_flight: bool,
    failures: u32,
    backoff: Cell<u32>,
    fetched: Vec<(Position, Bytes)>,
}

/// A read request's completion, on its way to the route that asked ([`DeliverySink::receive`]).
struct ReadDone {
    outcome: ReadOutcome,
    first: Option<Position>,
}

/// After payload reads failed, how many of the dispatcher's looks at a paused consumer
/// ([`DeliverySink::has_room`], every few milliseconds) pass before it tries again, at most:
/// the wait doubles per failure in a row up to this (about a second at the runtime's 5 ms).
const MAX_READ_BACKOFF: u32 = 256;

impl DeliveryRoute {
    /// Appends one MESSAGE frame per delivered entry to `frames`: the stored payload section
    /// after the command, the redelivery count, and for a batch entry with acked messages the
    /// `ack_set` (a set bit = still unacked). Returns the messages and bytes encoded and, when
    /// an entry's payload is not at hand (not brought by the last read, not in memory), that
    /// entry's index: it and the entries after it are not encoded, and a read is asked for
    /// them (see [`DeliveryRoute::request`]).
    fn encode(&mut self, batch: &[Delivery], frames: &mut Vec<u8>) -> (u64, u64, Option<usize>) {
        let (mut messages_out, mut bytes_out) = (0, 0);
        for (i, d) in batch.iter().enumerate() {
            let section = match self.take_fetched(d.position) {
                Some(section) => section,
                None => match self.topic.payload_cached(d.position) {
                    Cached::Hit(section) => section,
                    // Gone from the store: trimmed below every cursor, nothing to deliver.
                    Cached::Gone => {
                        tracing::warn!(position = %d.position, "no stored payload for a delivered entry");
                        continue;
                    }
                    Cached::Miss => {
                        if !self.reads.in_flight {
                            self.request(&batch[i..]);
                        }
                        return (messages_out, bytes_out, Some(i));
                    }
                },
            };
            let messages = d.meta.messages();
            let ack_set = (self.send_ack_set && !d.acked_indexes.is_empty())
                .then(|| wire::convert::ack_set_from_acked(&d.acked_indexes, messages));
            let cmd = wire::commands::message_body(
                self.consumer_id,
                wire::convert::message_id(d.position),
                d.redelivery_count,
                ack_set,
            );
            wire::encode_message_with_section(&cmd, &section, frames);
            let unacked = messages as usize - d.acked_indexes.len().min(messages as usize);
            messages_out += unacked as u64;
            bytes_out += u64::from(d.meta.size);
        }
        (messages_out, bytes_out, None)
    }

    /// The payload of `p` if the last read brought it (taken: a later send of it looks in
    /// memory again).
    fn take_fetched(&mut self, p: Position) -> Option<Bytes> {
        let fetched = &mut self.reads.fetched;
        let i = fetched.iter().position(|(q, _)| *q == p)?;
        Some(fetched.remove(i).1)
    }

    /// Asks for the entries of `missing` to be read; the consumer stays paused until the
    /// completion comes back ([`DeliverySink::receive`]) with them.
    fn request(&mut self, missing: &[Delivery]) {
        self.reads.in_flight = true;
        self.reads.fetched.clear();
        let (events, id) = (self.events.clone(), self.dispatcher_id);
        let first = missing.first().map(|d| d.position);
        self.topic.request_read(ReadRequest {
            topic: self.topic.clone(),
            positions: missing.iter().map(|d| d.position).collect(),
            done: Box::new(move |outcome| {
                let done = ReadDone { outcome, first };
                let _ = events.send(dispatcher::Event::ToSink(id, Box::new(done)));
            }),
        });
    }

    /// Ends a row of failed reads, if there was one.
    fn reads_work_again(&mut self) {
        if std::mem::take(&mut self.reads.failures) > 0 {
            info!(
                consumer_id = self.consumer_id,
                "payload reads succeed again"
            );
        }
    }

    /// A read request's completion: keeps what it brought, or counts a failure (the first of
    /// a row is a WARN; the entries stay pending and are tried again after a wait that doubles
    /// per failure in a row up to [`MAX_READ_BACKOFF`] looks).
    fn read_done(&mut self, done: ReadDone) {
        self.reads.in_flight = false;
        match done.outcome {
            Ok(fetched) => {
                self.reads.fetched = fetched;
                self.reads_work_again();
            }
            Err(e) => {
                self.reads.failures += 1;
                let failures = self.reads.failures;
                let shift = failures.min(MAX_READ_BACKOFF.trailing_zeros());
                self.reads.backoff.set(1u32 << shift);
                self.counters.read_failures.fetch_add(1, Ordering::Relaxed);
                let (consumer_id, position) = (self.consumer_id, done.first.map(|p| p.to_string()));
                let position = position.unwrap_or_default();
                if failures == 1 {
                    warn!(consumer_id, position, error = %e,
                        "an entry's payload could not be read: it stays pending for this consumer's dispatcher and is tried again");
                } else {
                    debug!(consumer_id, position, failures, error = %e, "payload read failed again");
                }
            }
        }
    }
}

impl DeliverySink for DeliveryRoute {
    /// Encodes the send into the write queue. An entry whose payload is not in memory is
    /// given back with the ones after it ([`Refused::Full`]: the dispatcher takes them back
    /// and pauses this consumer until [`has_room`](DeliverySink::has_room)) while a read
    /// request fetches them (a wait of one look, longer after each failed read in a row); the
    /// ones before it are sent.
    fn deliver(&mut self, mut batch: Vec<Delivery>) -> Result<(), Refused> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Refused::Closed);
        }
        if !self.ready.load(Ordering::Acquire) {
            return Err(Refused::Full(batch));
        }
        let mut frames = Vec::with_capacity(batch.len() * 128);
        let (messages, bytes, failed_at) = self.encode(&batch, &mut frames);
        if failed_at.is_none() {
            // Every payload was at hand: whatever failed before works again.
            self.reads_work_again();
        }
        if !frames.is_empty() {
            match self.out.offer(frames) {
                Offer::Taken => {
                    self.counters
                        .messages
                        .fetch_add(messages, Ordering::Relaxed);
                    self.counters.bytes.fetch_add(bytes, Ordering::Relaxed);
                }
                Offer::Full => return Err(Refused::Full(batch)),
                Offer::Closed => return Err(Refused::Closed),
            }
        }
        match failed_at {
            Some(i) => Err(Refused::Full(batch.split_off(i))),
            None => Ok(()),
        }
    }

    fn has_room(&self) -> bool {
        if self.reads.in_flight {
            return false;
        }
        let waiting = self.reads.backoff.get();
        if waiting > 0 {
            self.reads.backoff.set(waiting - 1);
            return false;
        }
        self.ready.load(Ordering::Acquire) && self.out.drained()
    }

    /// A read request's completion ([`DeliveryRoute::read_done`]).
    fn receive(&mut self, message: Box<dyn std::any::Any + Send>) {
        if let Ok(done) = message.downcast::<ReadDone>() {
            self.read_done(*done);
        }
    }

    /// Failover: ACTIVE_CONSUMER_CHANGE. Pushed with the session's own replies (room is kept
    /// for them), so a full delivery queue does not lose it.
    fn active_changed(&mut self, active: bool) {
        debug!(
            consumer_id = self.consumer_id,
            active, "active consumer change"
        );
        let mut frame = Vec::with_capacity(32);
        wire::encode_command(
            &wire::commands::active_consumer_change(self.consumer_id, active),
            &mut frame,
        );
        self.out.push(frame);
    }
}
